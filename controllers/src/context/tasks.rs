//! Background host work per KKInstance UID, bounded fairly between namespaces (`permits`), and the transient
//! failures it backs off from.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::task::JoinHandle;

use super::{backoff::jittered, permits::HostPermits};

/// What a background host task does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskKind {
    /// bootstrap -> binary -> containermanager -> repository -> provisioning (the image pre-pull alongside the
    /// last two).
    Provision,
    /// Reset the host.
    Reset,
}

struct TaskEntry {
    kind: TaskKind,
    handle: JoinHandle<()>,
    stop: Arc<AtomicBool>,
}

/// A transient host-work failure: when to try again and why it failed.
#[derive(Clone, Debug)]
pub(crate) struct Retry {
    /// Do not start host work again before this instant.
    pub not_before: Instant,
    /// What failed (for the `Ready` condition).
    pub message: String,
}

impl Retry {
    /// The `Ready` message while a host is retried: the failure, and neither the time left nor the delay.
    /// A countdown changed the status on every reconcile, and the delay (which doubles) on every attempt;
    /// each status change woke the KKInstance, its KKMachine and CAPI's Machine controller, whose conflicting
    /// writes under that churn delay all its other Machines. Each attempt's
    /// failure and delay are in the manager's log and the KKInstance's events.
    pub(crate) fn ready_message(&self) -> String {
        format!("{} (retried with backoff)", self.message)
    }
}

/// Background host tasks keyed by KKInstance UID, bounded by a semaphore.
pub(crate) struct TaskRegistry {
    tasks: Mutex<HashMap<String, TaskEntry>>,
    /// Bound on hosts worked on at once, shared fairly between namespaces.
    pub permits: HostPermits,
    /// Consecutive transient failures per UID and when to retry.
    failures: Mutex<HashMap<String, (u32, Retry)>>,
    /// UIDs whose task ended since the last reconcile looked (their object is re-read from the API: the
    /// cache may not have the task's last writes yet).
    finished: Mutex<HashSet<String>>,
    /// UIDs whose host work reported the host provisioned, until their KKMachine saw it in the cache.
    provisioned: Mutex<HashSet<String>>,
}

impl TaskRegistry {
    /// A registry allowing `max` concurrent host tasks, at most `per_namespace` of one namespace.
    pub(crate) fn new(max: usize, per_namespace: usize) -> Self {
        Self {
            tasks: Mutex::new(HashMap::new()),
            permits: HostPermits::new(max, per_namespace),
            failures: Mutex::new(HashMap::new()),
            finished: Mutex::new(HashSet::new()),
            provisioned: Mutex::new(HashSet::new()),
        }
    }

    /// The kind of the task running for `uid`, if any (finished tasks are dropped).
    pub(crate) fn running(&self, uid: &str) -> Option<TaskKind> {
        let mut tasks = self.tasks.lock().ok()?;
        match tasks.get(uid) {
            Some(e) if e.handle.is_finished() => {
                tasks.remove(uid);
                None
            }
            Some(e) => Some(e.kind),
            None => None,
        }
    }

    /// Number of running tasks.
    pub(crate) fn len(&self) -> usize {
        self.tasks
            .lock()
            .map(|t| t.values().filter(|e| !e.handle.is_finished()).count())
            .unwrap_or(0)
    }

    /// Start `fut` for `uid` unless a task already runs. The future receives a stop flag it checks between
    /// steps. Returns false when one was already running.
    pub(crate) fn spawn<F, Fut>(&self, uid: &str, kind: TaskKind, f: F) -> bool
    where
        F: FnOnce(Arc<AtomicBool>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        if self.running(uid).is_some() {
            return false;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let handle = tokio::spawn(f(stop.clone()));
        if let Ok(mut t) = self.tasks.lock() {
            t.insert(uid.to_owned(), TaskEntry { kind, handle, stop });
        }
        true
    }

    /// Ask the task of `uid` to stop at the next step boundary.
    pub(crate) fn request_stop(&self, uid: &str) {
        if let Ok(t) = self.tasks.lock()
            && let Some(e) = t.get(uid)
        {
            e.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Abort the task of `uid` at once.
    pub(crate) fn abort(&self, uid: &str) {
        if let Ok(mut t) = self.tasks.lock()
            && let Some(e) = t.remove(uid)
        {
            e.handle.abort();
        }
    }

    /// Abort every task (shutdown; a new manager resumes from spec/annotations and the host).
    pub(crate) fn abort_all(&self) {
        if let Ok(mut t) = self.tasks.lock() {
            for (_, e) in t.drain() {
                e.handle.abort();
            }
        }
    }

    /// Called by a task as its last act: the next reconcile of `uid` reads the object fresh.
    pub(crate) fn mark_finished(&self, uid: &str) {
        if let Ok(mut f) = self.finished.lock() {
            f.insert(uid.to_owned());
        }
    }

    /// True (once) when the task of `uid` ended since the last call.
    pub(crate) fn take_finished(&self, uid: &str) -> bool {
        self.finished.lock().map(|mut f| f.remove(uid)).unwrap_or(false)
    }

    /// Called by host work when the host of `uid` is provisioned, as its status write is queued: the
    /// KKMachine reports `provisioned` from this at once instead of after that write came back through the
    /// KKInstance watch (a write and a watch round trip later, a second or more on a loaded API server,
    /// while CAPI waits for it). Only ever true of a host whose bootstrap data ran; a KKMachine's
    /// `provisioned`, once reported, stays.
    pub(crate) fn report_provisioned(&self, uid: &str) {
        if let Ok(mut p) = self.provisioned.lock() {
            p.insert(uid.to_owned());
        }
    }

    /// True when host work of `uid` reported the host provisioned and the cache may not show it yet.
    pub(crate) fn reported_provisioned(&self, uid: &str) -> bool {
        self.provisioned.lock().map(|p| p.contains(uid)).unwrap_or(false)
    }

    /// Forget the report of `uid` (its KKMachine saw the status, or new host work or a reset started).
    pub(crate) fn forget_provisioned(&self, uid: &str) {
        if let Ok(mut p) = self.provisioned.lock() {
            p.remove(uid);
        }
    }

    /// Record a transient failure of `uid`'s host work; returns the backoff before the next attempt. The
    /// task ends at once (it does not sleep through the backoff holding its slot).
    pub(crate) fn transient_failure(&self, uid: &str, message: &str) -> Duration {
        let Ok(mut f) = self.failures.lock() else {
            return jittered(uid, 1);
        };
        let n = f.get(uid).map(|(n, _)| n + 1).unwrap_or(1);
        let d = jittered(uid, n);
        f.insert(
            uid.to_owned(),
            (
                n,
                Retry {
                    not_before: Instant::now() + d,
                    message: message.to_owned(),
                },
            ),
        );
        d
    }

    /// Forget the failures of `uid` (host work succeeded, a retry was requested, or the object is gone).
    pub(crate) fn succeeded(&self, uid: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(uid);
        }
    }

    /// Make a pending retry of `uid` due now (its input changed); the failure count stays, so a failure
    /// that persists keeps backing off.
    pub(crate) fn retry_now(&self, uid: &str) {
        if let Ok(mut f) = self.failures.lock()
            && let Some((_, r)) = f.get_mut(uid)
        {
            r.not_before = Instant::now();
        }
    }

    /// The pending retry of `uid` after a transient failure, if any.
    pub(crate) fn retry(&self, uid: &str) -> Option<Retry> {
        self.failures
            .lock()
            .ok()
            .and_then(|f| f.get(uid).map(|(_, r)| r.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_of_a_retried_host_changes_neither_while_it_waits_nor_from_one_attempt_to_the_next() {
        let r = TaskRegistry::new(1, 1);
        let first_delay = r.transient_failure("u", "connecting to 10.0.0.1:22 failed");
        let mut retry = r.retry("u").expect("recorded");
        let first = retry.ready_message();
        // Later reconciles see less time left; the status they write must stay the same.
        retry.not_before -= Duration::from_secs(3);
        assert_eq!(retry.ready_message(), first);
        assert!(first.starts_with("connecting to 10.0.0.1:22 failed"), "{first}");
        // The next attempt fails the same way and backs off longer: still the same message.
        let second_delay = r.transient_failure("u", "connecting to 10.0.0.1:22 failed");
        let second = r.retry("u").expect("recorded");
        assert!(second_delay > first_delay);
        assert_eq!(second.ready_message(), first);
    }

    #[tokio::test]
    async fn a_transient_host_failure_records_when_to_retry_and_success_clears_it() {
        let r = TaskRegistry::new(1, 1);
        let d = r.transient_failure("u", "host unreachable");
        let retry = r.retry("u").expect("recorded");
        assert_eq!(retry.message, "host unreachable");
        assert!(retry.not_before > Instant::now() + d / 2);
        assert!(r.transient_failure("u", "again") > d);
        r.succeeded("u");
        assert!(r.retry("u").is_none());
    }
}
