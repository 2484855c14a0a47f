//! The bound on hosts worked on at once, shared fairly between namespaces.
//!
//! Host work can last long (a `kubeadm init` may take half an hour), and a tenant decides how much of it there
//! is. With one global bound, one namespace's ten long runs would hold every slot and the other tenants' hosts
//! would wait for them. So a slot is taken in two steps: first one of the namespace's own share
//! (`--max-concurrent-hosts-per-namespace`), then one of the global bound. A namespace that has used its share
//! waits on its own semaphore and never queues at the global one, so what it cannot take stays available to
//! the others, in arrival order.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore, watch},
    time::Instant,
};

/// A slot of host work, held until dropped.
pub(crate) struct HostPermit {
    _namespace: Option<OwnedSemaphorePermit>,
    _global: Option<OwnedSemaphorePermit>,
}

/// Slots of host work: `max` at once in all, at most `per_namespace` of them for one namespace.
pub(crate) struct HostPermits {
    global: Arc<Semaphore>,
    per_namespace: usize,
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl HostPermits {
    /// `max` slots in all (at least 1), at most `per_namespace` (at least 1, at most `max`) per namespace.
    pub(crate) fn new(max: usize, per_namespace: usize) -> Self {
        let max = max.max(1);
        Self {
            global: Arc::new(Semaphore::new(max)),
            per_namespace: per_namespace.clamp(1, max),
            namespaces: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a slot for host work of namespace `ns`. A closed semaphore (never, today) would just run
    /// unbounded rather than not at all.
    pub(crate) async fn acquire(&self, ns: &str) -> HostPermit {
        let share = {
            let mut map = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
            // Forget the namespaces nobody holds or waits for (the map would grow with every namespace seen).
            let full = self.per_namespace;
            map.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < full);
            map.entry(ns.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(full)))
                .clone()
        };
        let namespace = share.acquire_owned().await.ok();
        let global = self.global.clone().acquire_owned().await.ok();
        HostPermit {
            _namespace: namespace,
            _global: global,
        }
    }

    /// A slot for host work of namespace `ns` that the work can give back and take again
    /// ([`ReturnableSlot`]); waits for the first one like [`HostPermits::acquire`].
    pub(crate) async fn returnable(&self, ns: &str) -> ReturnableSlot<'_> {
        let permit = self.acquire(ns).await;
        let (since, _) = watch::channel(Some(Instant::now()));
        ReturnableSlot {
            permits: self,
            namespace: ns.to_owned(),
            held: Mutex::new(Some(permit)),
            since,
        }
    }

    /// Slots free in all.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.global.available_permits()
    }
}

/// A slot of host work that is given back while the work waits for the host (a reboot's wait for the host to
/// come back) and taken again for its next command. Held from [`HostPermits::returnable`] until given back or
/// dropped.
pub(crate) struct ReturnableSlot<'a> {
    permits: &'a HostPermits,
    namespace: String,
    held: Mutex<Option<HostPermit>>,
    /// Since when the slot is held; `None` while it is given back.
    since: watch::Sender<Option<Instant>>,
}

impl ReturnableSlot<'_> {
    /// Resolves once the slot has been held for longer than `limit` at a stretch (from a take to the next give
    /// back): what `--max-host-phase-duration` bounds. Never resolves while the slot is given back.
    pub(crate) async fn held_past(&self, limit: Duration) {
        let mut since = self.since.subscribe();
        loop {
            let held = *since.borrow_and_update();
            match held {
                Some(at) => tokio::select! {
                    () = tokio::time::sleep_until(at + limit) => return,
                    _ = since.changed() => {}
                },
                // The sender lives as long as `self`: `changed` only returns on a change.
                None => {
                    let _ = since.changed().await;
                }
            }
        }
    }
}

impl capkk_service::remediation::HostSlot for ReturnableSlot<'_> {
    fn give_back(&self) {
        if let Ok(mut held) = self.held.lock() {
            *held = None;
        }
        self.since.send_replace(None);
    }

    fn take(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let permit = self.permits.acquire(&self.namespace).await;
            if let Ok(mut held) = self.held.lock() {
                *held = Some(permit);
            }
            self.since.send_replace(Some(Instant::now()));
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn one_namespaces_long_runs_cannot_hold_every_slot_and_another_namespace_still_gets_one() {
        let permits = Arc::new(HostPermits::new(10, 8));
        // Namespace a starts 10 long runs: 8 run, 2 wait on a's share, not at the global bound.
        let mut held = Vec::new();
        for _ in 0..8 {
            held.push(permits.acquire("a").await);
        }
        let waiting: Vec<_> = (0..2)
            .map(|_| {
                let p = permits.clone();
                tokio::spawn(async move { p.acquire("a").await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(permits.available(), 2, "a holds its share only");
        // Namespace b gets both free slots at once, while a's runs still hold theirs.
        let b1 = tokio::time::timeout(Duration::from_secs(1), permits.acquire("b"))
            .await
            .expect("b runs");
        let b2 = tokio::time::timeout(Duration::from_secs(1), permits.acquire("b"))
            .await
            .expect("b runs");
        assert_eq!(permits.available(), 0);
        // When one of a's runs ends, one of a's waiting runs takes that slot.
        held.pop();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(waiting.iter().filter(|w| w.is_finished()).count(), 1);
        assert_eq!(permits.available(), 0);
        drop((b1, b2, held));
        for w in waiting {
            drop(w.await.unwrap());
        }
        assert_eq!(permits.available(), 10);
    }

    #[tokio::test]
    async fn the_share_is_at_least_one_and_at_most_the_total() {
        let p = HostPermits::new(2, 0);
        let _a = p.acquire("a").await;
        assert!(
            tokio::time::timeout(Duration::from_millis(50), p.acquire("a"))
                .await
                .is_err()
        );
        let p = HostPermits::new(2, 99);
        let (_x, _y) = (p.acquire("a").await, p.acquire("a").await);
        assert_eq!(p.available(), 0);
    }

    /// Issue 43 finding 5: a reboot's wait gives its slot back; `--max-host-phase-duration` bounds each
    /// stretch the slot is held, not the wait between them.
    #[tokio::test(start_paused = true)]
    async fn a_slot_given_back_frees_its_place_and_only_a_held_stretch_counts_against_the_bound() {
        use capkk_service::remediation::HostSlot;
        let permits = HostPermits::new(1, 1);
        let bound = Duration::from_secs(60);
        let slot = permits.returnable("a").await;
        assert_eq!(permits.available(), 0);
        slot.give_back();
        assert_eq!(permits.available(), 1, "another host's work may take it");
        let other = tokio::time::timeout(Duration::from_secs(1), permits.acquire("b"))
            .await
            .expect("another namespace's host gets the slot");
        assert!(
            tokio::time::timeout(bound * 10, slot.held_past(bound))
                .await
                .is_err(),
            "given back, however long, is not held"
        );
        // Taking it again waits for the other host's work.
        assert!(
            tokio::time::timeout(Duration::from_secs(5), slot.take())
                .await
                .is_err()
        );
        drop(other);
        slot.take().await;
        assert_eq!(permits.available(), 0);
        assert!(
            tokio::time::timeout(bound / 2, slot.held_past(bound))
                .await
                .is_err()
        );
        tokio::time::timeout(bound, slot.held_past(bound))
            .await
            .expect("held past the bound");
        drop(slot);
        assert_eq!(permits.available(), 1, "dropped with its slot");
    }
}
