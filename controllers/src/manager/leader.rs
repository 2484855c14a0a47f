//! A small leader elector on a `coordination.k8s.io/v1` Lease (the same protocol as client-go's
//! leaderelection: holderIdentity, leaseDurationSeconds, renewTime; optimistic concurrency on
//! resourceVersion).

use std::time::Duration;

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

/// Lease-based leader election.
pub(super) struct LeaderElector {
    api: Api<Lease>,
    cfg: LeaderConfig,
}

impl LeaderElector {
    /// An elector for `cfg`.
    pub(super) fn new(client: Client, cfg: LeaderConfig) -> Self {
        Self {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
        }
    }

    /// Try once to acquire or renew the lease. Returns true when this process holds it.
    pub(super) async fn try_acquire_or_renew(&self) -> Result<bool> {
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
        let expired = match (spec.renew_time.as_ref(), spec.lease_duration_seconds) {
            (Some(t), Some(d)) => now.duration_since(t.0).as_secs() > i64::from(d),
            _ => true,
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
                Err(e) => warn!(error = %e, "leader election attempt failed"),
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
                Err(e) => warn!(error = %e, "renewing the lease failed"),
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
