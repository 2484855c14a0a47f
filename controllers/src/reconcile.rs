//! The reconcile skeleton shared by KKCluster, KKMachine and KKInstance.
//!
//! Every kind runs the same prologue, in the order of the CAPI contract, and only its `apply` and `cleanup`
//! differ:
//!
//! 1. watch filter and externally-managed check: skip without writing anything;
//! 2. owner lookup ([`Reconciler::owner`]): while the owner is missing the object waits — unless it is being
//!    deleted: cleanup then runs without the owner (a Machine or Cluster deleted first must not block the
//!    deletion of its infrastructure);
//! 3. pause (`Cluster.spec.paused` or the paused annotation): the `Paused` condition, nothing else (CAPI's
//!    `EnsurePausedCondition`);
//! 4. the finalizer: added (when missing) by the reconcile that then applies; `kube::runtime::finalizer` runs
//!    [`Reconciler::apply`] while the object lives, [`Reconciler::cleanup`] once it is deleted. Unfinished
//!    cleanup ([`Error::CleanupPending`]) keeps the finalizer and is not a failure.
//!
//! The status is written once, at the end, by server-side apply with the field manager [`FIELD_MANAGER`] and
//! only when the part this reconciler owns ([`Reconciler::owned_status`]) changed. Server-side apply removes
//! fields the manager stops sending, which the old merge patches could never do.
//!
//! [`error_policy`] owns the per-object backoff key `"{KIND}/{uid}"`: every failure lengthens it, every
//! successful reconcile removes it (so it is also gone once a deleted object's last reconcile succeeded).

use std::{fmt::Debug, sync::Arc, time::Instant};

use async_trait::async_trait;
use k8s_openapi::{NamespaceResourceScope, apimachinery::pkg::apis::meta::v1::Condition};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{controller::Action, finalizer, finalizer::Event},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;
use tracing::{debug, info, warn};

use capkk_api::consts::{FIELD_MANAGER, conditions as cond, reasons};

use crate::{
    conditions,
    context::Context,
    error::{Error, Result, is_not_found},
    metrics::Outcome,
};

/// Named requeue intervals. Most waits are woken earlier by a watch; these bound how long a missed event
/// can delay progress.
pub(crate) mod requeue {
    use std::time::Duration;

    /// A conflict (optimistic concurrency): retry almost at once with fresh data.
    pub(crate) const CONFLICT: Duration = Duration::from_millis(500);
    /// The owner (Machine, Cluster) is not there yet.
    pub(crate) const OWNER_MISSING: Duration = Duration::from_secs(10);
    /// Paused KKInstance whose host work has not stopped at a step boundary yet.
    pub(crate) const PAUSED_HOST_WORK: Duration = Duration::from_secs(30);
    /// Deletion waits for host resets or for dependents.
    pub(crate) const CLEANUP_POLL: Duration = Duration::from_secs(5);
    /// Host work runs (progress arrives through the KKInstance watch; this is a safety net).
    pub(crate) const HOST_WORK: Duration = Duration::from_secs(30);
    /// A KKInstance waits for its KKMachine to record the claim.
    pub(crate) const CLAIM_RECORD: Duration = Duration::from_secs(5);
    /// A KKInstance whose KKMachine is not in the cache (yet).
    pub(crate) const CLAIM_OWNER: Duration = Duration::from_secs(10);
    /// A host reset runs.
    pub(crate) const RESET_POLL: Duration = Duration::from_secs(10);
    /// No free host matches a KKMachine.
    pub(crate) const NO_HOST: Duration = Duration::from_secs(15);
    /// Every free host matching a KKMachine is being claimed by another reconcile of this manager.
    pub(crate) const CLAIMS_IN_FLIGHT: Duration = Duration::from_secs(2);
    /// The host recorded in `spec.instanceID` is held by another object.
    pub(crate) const HOST_HELD_ELSEWHERE: Duration = Duration::from_secs(30);
    /// `spec.instanceID` names a host that is not in the inventory.
    pub(crate) const INVALID_CLAIM: Duration = Duration::from_secs(60);
    /// The KKCluster is not provisioned yet (the KKCluster watch wakes the KKMachine earlier).
    pub(crate) const INFRA_NOT_READY: Duration = Duration::from_secs(60);
    /// `Cluster.spec.infrastructureRef` does not point at a KKCluster.
    pub(crate) const NOT_KKCLUSTER: Duration = Duration::from_secs(30);
    /// Waiting for the workload Node to register (providerID patch): a safety net, the workload cluster's
    /// Node watch wakes the KKMachine when its Node appears.
    pub(crate) const NODE_POLL: Duration = Duration::from_secs(60);
    /// A provisioned KKMachine re-checks its KKInstance.
    pub(crate) const PROVISIONED_RESYNC: Duration = Duration::from_secs(600);
    /// A claimed KKMachine waits for host work (progress arrives through the KKInstance watch).
    pub(crate) const MACHINE_WORK: Duration = Duration::from_secs(30);
    /// A name read from a field is no object name (`InvalidName`): the field may be another object's, whose
    /// change does not wake this one.
    pub(crate) const INVALID_NAME: Duration = Duration::from_secs(120);
}

/// What an owner lookup found.
pub(crate) enum Owner<O> {
    /// The owner (and whatever else the kind needs from it).
    Found(O),
    /// Not there (yet). A live object waits (`retry`, or until a watch fires); a deleted one is cleaned up
    /// without it.
    Missing {
        /// What is missing, for the log.
        what: String,
        /// Requeue after (None: wait for a watch event).
        retry: Option<std::time::Duration>,
    },
}

/// A kind reconciled by the skeleton.
#[async_trait]
pub(crate) trait Reconciler:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The kind, for logs, metrics and the backoff key.
    const KIND: &'static str;
    /// The finalizer.
    const FINALIZER: &'static str;
    /// The status type.
    type Status: Clone + Default + PartialEq + Serialize + Send + Sync + 'static;
    /// What the owner lookup yields (handed to `apply`).
    type Owner: Send + Sync + 'static;

    /// The current status.
    fn status(&self) -> Option<&Self::Status>;
    /// The conditions of a status (for `Paused`).
    fn conditions(status: &mut Self::Status) -> &mut Vec<Condition>;
    /// The part of the status this reconciler writes (the rest belongs to another field manager).
    fn owned_status(status: &Self::Status) -> Self::Status {
        status.clone()
    }
    /// Look up the owner.
    async fn owner(&self, ctx: &Context) -> Result<Owner<Self::Owner>>;
    /// True when the owner says the cluster is paused.
    fn owner_paused(owner: &Self::Owner) -> bool;
    /// Kind-specific work while paused (after the `Paused` condition is set).
    async fn paused(_obj: Arc<Self>, _ctx: &Arc<Context>, _status: &mut Self::Status) -> Result<Action> {
        Ok(Action::await_change())
    }
    /// Bring the world in line with a live object.
    async fn apply(
        obj: Arc<Self>,
        owner: Self::Owner,
        ctx: &Arc<Context>,
        status: &mut Self::Status,
    ) -> Result<Action>;
    /// Undo what `apply` did; may run without the owner and without `apply` ever having run.
    async fn cleanup(
        obj: Arc<Self>,
        owner: Option<Self::Owner>,
        ctx: &Arc<Context>,
        status: &mut Self::Status,
    ) -> Result<Action>;
}

/// Implements [`Reconciler::status`] and [`Reconciler::conditions`] for a kind whose status has
/// `conditions` (inside the `impl Reconciler for ...` block).
#[macro_export]
macro_rules! status_accessors {
    ($status:ty) => {
        fn status(&self) -> Option<&$status> {
            self.status.as_ref()
        }

        fn conditions(
            status: &mut $status,
        ) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
            &mut status.conditions
        }
    };
}

/// The backoff key of an object: `"{KIND}/{uid}"`.
pub(crate) fn backoff_key<K: Reconciler>(obj: &K) -> String {
    format!("{}/{}", K::KIND, obj.uid().unwrap_or_default())
}

/// The reconcile function of every kind (`Controller::run(reconcile::<K>, error_policy::<K>, ctx)`).
pub(crate) async fn reconcile<K: Reconciler>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    let start = Instant::now();
    let key = backoff_key(&*obj);
    let span = tracing::info_span!(
        "reconcile",
        kind = K::KIND,
        name = %obj.name_any(),
        ns = obj.namespace().unwrap_or_default()
    );
    let worker = ctx.metrics.worker(K::KIND);
    let res = tracing::Instrument::instrument(run(obj, &ctx), span).await;
    drop(worker);
    let outcome = match &res {
        Err(_) => Outcome::Error,
        Ok(a) if *a == Action::await_change() => Outcome::Success,
        Ok(_) => Outcome::RequeueAfter,
    };
    ctx.metrics.reconciled(K::KIND, start.elapsed(), outcome);
    ctx.metrics.set_tasks_running(ctx.tasks.len() as i64);
    settle(&ctx.backoff, &key, &res);
    res.map(|a| resync(a, ctx.settings.sync_period))
}

/// With `--sync-period`, an object that would wait for its next change is reconciled again after the period
/// anyway (controller-runtime's periodic resync: a missed event cannot leave it stale for longer).
pub(crate) fn resync(action: Action, sync_period: Option<std::time::Duration>) -> Action {
    match sync_period {
        Some(p) if action == Action::await_change() => Action::requeue(p),
        _ => action,
    }
}

/// Backoff bookkeeping after a reconcile: success removes the key (the next failure starts from the minimum
/// again); failures are counted by [`error_policy`].
pub(crate) fn settle(backoff: &crate::context::Backoff, key: &str, res: &Result<Action>) {
    if res.is_ok() {
        backoff.reset(key);
    }
}

/// The error policy of every kind: a conflict retries almost at once, anything else backs off per object.
pub(crate) fn error_policy<K: Reconciler>(obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(K::KIND, err.metric_label());
    let delay = if err.is_conflict() {
        requeue::CONFLICT
    } else {
        ctx.backoff.failed(&backoff_key(&*obj))
    };
    warn!(kind = K::KIND, name = %obj.name_any(), error = %err, ?delay, "Reconcile failed");
    Action::requeue(delay)
}

async fn run<K: Reconciler>(obj: Arc<K>, ctx: &Arc<Context>) -> Result<Action> {
    if !ctx.passes_filter(&*obj) {
        return Ok(Action::await_change());
    }
    if externally_managed(&*obj) {
        debug!("Skipping an externally managed object");
        return Ok(Action::await_change());
    }
    let deleting = obj.meta().deletion_timestamp.is_some();
    let owner = match obj.owner(ctx).await {
        Ok(Owner::Found(o)) => Some(o),
        Ok(Owner::Missing { what, retry }) if !deleting => {
            info!(%what, "Waiting for the owner");
            return Ok(retry.map(Action::requeue).unwrap_or_else(Action::await_change));
        }
        Ok(Owner::Missing { what, .. }) => {
            info!(%what, "Cleaning up without the owner (it is gone)");
            None
        }
        // The owner's name (an owner reference, a label, a Machine's field) is no object name: nothing was
        // requested. A live object reports it; a deleted one is cleaned up without the owner.
        Err(e @ Error::InvalidName { .. }) if !deleting => {
            let old = obj.status().cloned().unwrap_or_default();
            let mut status = old.clone();
            report_invalid_name(&*obj, &e, ctx, &mut status).await;
            write_status(&*obj, &old, &status, ctx).await?;
            return Ok(Action::requeue(requeue::INVALID_NAME));
        }
        Err(e @ Error::InvalidName { .. }) => {
            info!(error = %e, "Cleaning up without the owner (its name is refused)");
            None
        }
        Err(e) => return Err(e),
    };
    let old = obj.status().cloned().unwrap_or_default();
    let mut status = old.clone();
    let paused = paused_annotation(&*obj) || owner.as_ref().is_some_and(K::owner_paused);
    let generation = obj.meta().generation;
    if paused {
        conditions::set(
            K::conditions(&mut status),
            cond::PAUSED,
            true,
            reasons::PAUSED,
            "",
            generation,
        );
    } else {
        conditions::set(
            K::conditions(&mut status),
            cond::PAUSED,
            false,
            reasons::NOT_PAUSED,
            "",
            generation,
        );
    }
    let mut pending = false;
    let res = if paused {
        info!("Paused");
        K::paused(obj.clone(), ctx, &mut status).await
    } else {
        let api: Api<K> = Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
        // kube's helper adds a missing finalizer and returns, so the first real work of every new object
        // waited for a second reconcile, queued behind all others once the watch brought the change back.
        // Adding it here and going on with the object the API returned saves that round.
        let obj = if deleting || obj.finalizers().iter().any(|f| f == K::FINALIZER) {
            obj.clone()
        } else {
            Arc::new(
                api.patch(
                    &obj.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&finalizer_patch(&*obj, K::FINALIZER)),
                )
                .await
                .map_err(Error::kube(format!("add finalizer {}", K::FINALIZER)))?,
            )
        };
        let st = &mut status;
        let res = finalizer(&api, K::FINALIZER, obj.clone(), move |ev| async move {
            match ev {
                Event::Apply(o) => match owner {
                    Some(owner) => K::apply(o, owner, ctx, st).await,
                    None => Ok(Action::await_change()),
                },
                Event::Cleanup(o) => K::cleanup(o, owner, ctx, st).await,
            }
        })
        .await
        .map_err(Error::from);
        match res {
            // Unfinished cleanup: the finalizer stays; not a failure.
            Err(Error::CleanupPending { what, retry }) => {
                debug!(%what, "Deletion waits");
                pending = true;
                Ok(Action::requeue(retry))
            }
            Err(e @ Error::InvalidName { .. }) => {
                report_invalid_name(&*obj, &e, ctx, &mut status).await;
                Ok(Action::requeue(requeue::INVALID_NAME))
            }
            other => other,
        }
    };
    // Once cleanup finished the finalizer is gone and so (usually) is the object: nothing to write.
    let gone = deleting && !paused && res.is_ok() && !pending;
    if !gone {
        let written = write_status(&*obj, &old, &status, ctx).await;
        // The reconcile's own error wins; a failed status write alone fails the reconcile.
        if let Err(e) = written {
            return Err(res.err().unwrap_or(e));
        }
    }
    res
}

/// A name read from a field that is no object name ([`Error::InvalidName`], no request made for it): `Ready`
/// False with reason `InvalidName` and the message naming the field, and a warning event saying the same.
async fn report_invalid_name<K: Reconciler>(obj: &K, e: &Error, ctx: &Context, status: &mut K::Status) {
    warn!(error = %e, "Refusing a name read from a field");
    conditions::set(
        K::conditions(status),
        cond::READY,
        false,
        reasons::INVALID_NAME,
        e.to_string(),
        obj.meta().generation,
    );
    ctx.event(obj, true, reasons::INVALID_NAME, "Reconcile", e.to_string())
        .await;
}

/// The merge patch adding `finalizer` to `obj`'s finalizers. It names the whole list, guarded by the
/// object's resourceVersion: a finalizer another writer added meanwhile makes it conflict (and the reconcile
/// retry almost at once) instead of being dropped.
pub(crate) fn finalizer_patch<K: Resource>(obj: &K, finalizer: &str) -> serde_json::Value {
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(finalizer.to_owned());
    json!({ "metadata": { "finalizers": finalizers, "resourceVersion": obj.resource_version() } })
}

/// Server-side apply of the reconciler's part of the status, when it changed: against the status this
/// reconciler last wrote while the cache does not show it yet (see [`crate::context::written`]), else against
/// the cached one.
pub(crate) async fn write_status<K: Reconciler>(
    obj: &K,
    old: &K::Status,
    new: &K::Status,
    ctx: &Context,
) -> Result<()> {
    let key = backoff_key(obj);
    let (old, mut new) = (K::owned_status(old), K::owned_status(new));
    let base = match ctx.written.get::<K::Status>(&key) {
        Some(mut written) if written != old => {
            // Computed from a status older than the last write: its conditions' times are the written ones
            // where nothing changed since.
            conditions::keep_transitions(K::conditions(&mut new), K::conditions(&mut written));
            written
        }
        Some(_) => {
            ctx.written.forget(&key);
            old
        }
        None => old,
    };
    if base == new {
        return Ok(());
    }
    let name = obj.name_any();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
    apply_status(&api, &name, &new, FIELD_MANAGER).await?;
    ctx.written.put(&key, new);
    Ok(())
}

/// Server-side apply `status` (`{"status": status}`) of `name` as `manager`.
pub(crate) async fn apply_status<K, S>(api: &Api<K>, name: &str, status: &S, manager: &str) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize,
{
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    match api
        .patch_status(name, &PatchParams::apply(manager).force(), &Patch::Apply(&body))
        .await
    {
        Ok(_) => Ok(()),
        // Deleted meanwhile: nothing left to report on.
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::kube(format!("apply {} {name} status", K::kind(&())))(e)),
    }
}

/// True when the object carries CAPI's externally-managed annotation.
fn externally_managed<K: Resource>(obj: &K) -> bool {
    obj.meta()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(capkk_api::consts::MANAGED_BY_ANNOTATION))
}

/// True when the object carries CAPI's paused annotation.
fn paused_annotation<K: Resource>(obj: &K) -> bool {
    obj.meta()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(capkk_api::consts::PAUSED_ANNOTATION))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capkk_api::KKMachine;

    #[test]
    fn a_sync_period_requeues_only_objects_that_would_wait_for_a_change() {
        use std::time::Duration;
        let period = Some(Duration::from_secs(600));
        assert_eq!(
            resync(Action::await_change(), period),
            Action::requeue(Duration::from_secs(600))
        );
        assert_eq!(
            resync(Action::requeue(Duration::from_secs(5)), period),
            Action::requeue(Duration::from_secs(5)),
            "a kind's own requeue stands"
        );
        assert_eq!(
            resync(Action::await_change(), None),
            Action::await_change(),
            "no period, no resync"
        );
    }

    #[test]
    fn the_finalizer_patch_keeps_other_finalizers_and_is_guarded_by_the_resource_version() {
        let mut km = KKMachine::new("m", Default::default());
        km.metadata.resource_version = Some("7".into());
        km.metadata.finalizers = Some(vec!["other.example/keep".into()]);
        let p = finalizer_patch(&km, "ours.example/f");
        assert_eq!(
            p["metadata"]["finalizers"],
            json!(["other.example/keep", "ours.example/f"])
        );
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        km.metadata.finalizers = None;
        assert_eq!(
            finalizer_patch(&km, "ours.example/f")["metadata"]["finalizers"],
            json!(["ours.example/f"])
        );
    }
}
