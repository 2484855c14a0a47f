//! A small leader elector on a `coordination.k8s.io/v1` Lease (the same protocol as client-go's
//! leaderelection: holderIdentity, leaseDurationSeconds, renewTime; optimistic concurrency on
//! resourceVersion).
//!
//! Like client-go, a candidate judges expiry by its own monotonic clock: the Lease is free once its record
//! has stayed unchanged for the lease duration *as this process observed it*. The holder's `renewTime` is
//! another machine's wall clock; judging by it made a replica whose clock ran ahead take a live lease (two
//! leaders) and one whose clock ran behind wait for hours.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
use tracing::{debug, info, warn};

use crate::error::{Error, Result, is_conflict};

/// Settings of the elector.
#[derive(Clone, Debug)]
pub(super) struct LeaderConfig {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This process's identity.
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// Give up leadership when renewing fails for this long.
    pub renew_deadline: Duration,
    /// Interval between attempts.
    pub retry_period: Duration,
}

/// What identifies one write of the Lease: any renewal or takeover changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: String,
    resource_version: String,
}

/// A record and the local instant this process first saw it.
#[derive(Clone, Debug)]
struct Observed {
    record: Record,
    at: Instant,
}

/// Whether the lease `current` may be taken over at `now`, given what was observed before (`last`), and
/// what to remember for the next attempt. A free lease (no holder) may be taken at once; a held one only
/// after its record stayed unchanged for `duration` of this process's own clock.
fn judge(last: Option<&Observed>, current: Record, duration: Duration, now: Instant) -> (bool, Observed) {
    if current.holder.is_empty() {
        return (
            true,
            Observed {
                record: current,
                at: now,
            },
        );
    }
    match last {
        Some(seen) if seen.record == current => (now.duration_since(seen.at) >= duration, seen.clone()),
        _ => (
            false,
            Observed {
                record: current,
                at: now,
            },
        ),
    }
}

/// Lease-based leader election.
pub(super) struct LeaderElector {
    api: Api<Lease>,
    cfg: LeaderConfig,
    observed: Mutex<Option<Observed>>,
}

impl LeaderElector {
    /// An elector for `cfg`.
    pub(super) fn new(client: Client, cfg: LeaderConfig) -> Self {
        Self {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: Mutex::new(None),
        }
    }

    /// Try once to acquire or renew the lease, within the renew deadline (a request hanging on a busy API
    /// server must not keep a leader believing it leads). Returns true when this process holds it.
    pub(super) async fn try_acquire_or_renew(&self) -> std::result::Result<bool, String> {
        match tokio::time::timeout(self.cfg.renew_deadline, self.attempt()).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "the Lease request took longer than the renew deadline ({:?})",
                self.cfg.renew_deadline
            )),
        }
    }

    async fn attempt(&self) -> Result<bool> {
        let now = Timestamp::now();
        let me = self.cfg.identity.clone();
        let secs = self.cfg.lease_duration.as_secs() as i32;
        let existing = self
            .api
            .get_opt(&self.cfg.name)
            .await
            .map_err(Error::kube("get Lease"))?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(Error::kube("create Lease")(e)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        let record = Record {
            holder: holder.clone(),
            resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
        };
        let expired = {
            let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
            let (expired, seen) = judge(observed.as_ref(), record, duration, Instant::now());
            *observed = Some(seen);
            expired
        };
        if holder != me && !holder.is_empty() && !expired {
            debug!(%holder, "lease held by another manager");
            return Ok(false);
        }
        let mut new = spec.clone();
        if holder != me {
            new.acquire_time = Some(MicroTime(now));
            new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        new.holder_identity = Some(me);
        new.lease_duration_seconds = Some(secs);
        new.renew_time = Some(MicroTime(now));
        lease.spec = Some(new);
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(Error::kube("update Lease")(e)),
        }
    }

    /// Block until this process holds the lease.
    pub(super) async fn acquire(&self) {
        info!(lease = %self.cfg.name, identity = %self.cfg.identity, "waiting for leadership");
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    info!(lease = %self.cfg.name, "became leader");
                    return;
                }
                Ok(false) => {}
                Err(error) => warn!(%error, "leader election attempt failed"),
            }
            tokio::time::sleep(self.cfg.retry_period).await;
        }
    }

    /// Renew the lease until renewing fails for longer than the renew deadline; returns then (leadership
    /// lost). Never returns while leadership holds.
    pub(super) async fn hold(&self) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => {
                    warn!("lease taken by another manager");
                    return;
                }
                Err(error) => warn!(%error, "renewing the lease failed"),
            }
            if last_ok.elapsed() > self.cfg.renew_deadline {
                warn!("could not renew the lease within the renew deadline");
                return;
            }
        }
    }

    /// Give the lease up (on graceful shutdown) so a successor does not wait for it to expire.
    pub(super) async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else { return };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        if let Err(e) = self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            warn!(error = %e, "releasing the lease failed");
        } else {
            info!("lease released");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: &str, rv: &str) -> Record {
        Record {
            holder: holder.into(),
            resource_version: rv.into(),
        }
    }

    const LEASE: Duration = Duration::from_secs(15);

    #[test]
    fn a_lease_first_seen_is_not_expired_whatever_its_renew_time_says() {
        let now = Instant::now();
        let (expired, seen) = judge(None, record("other", "7"), LEASE, now);
        assert!(!expired);
        assert_eq!(seen.at, now);
    }

    #[test]
    fn a_lease_unchanged_for_the_duration_by_the_local_clock_is_expired() {
        let t0 = Instant::now();
        let (_, seen) = judge(None, record("other", "7"), LEASE, t0);
        let (early, seen) = judge(
            Some(&seen),
            record("other", "7"),
            LEASE,
            t0 + LEASE - Duration::from_millis(1),
        );
        assert!(!early, "one millisecond short of the duration");
        assert_eq!(seen.at, t0, "the first observation's instant is kept");
        let (expired, _) = judge(Some(&seen), record("other", "7"), LEASE, t0 + LEASE);
        assert!(expired);
    }

    #[test]
    fn every_renewal_restarts_the_local_count() {
        let t0 = Instant::now();
        let (_, seen) = judge(None, record("other", "7"), LEASE, t0);
        let later = t0 + LEASE * 4;
        let (expired, seen) = judge(Some(&seen), record("other", "8"), LEASE, later);
        assert!(!expired, "the holder renewed (new resourceVersion)");
        assert_eq!(seen.at, later);
        let (taken_over, _) = judge(Some(&seen), record("third", "9"), LEASE, later + LEASE);
        assert!(!taken_over, "another holder is a new record too");
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let t0 = Instant::now();
        let (_, seen) = judge(None, record("other", "7"), LEASE, t0);
        let (free, _) = judge(Some(&seen), record("", "8"), LEASE, t0);
        assert!(free);
    }
}
