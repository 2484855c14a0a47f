//! KKInstance reconciler: one claimed host. [`state::classify`] decides where the host is; the reconcile
//! acts on that state and reports it. Host work runs as background tasks ([`task`]) keyed by UID; completed
//! phases, a terminal failure and a finished reset are annotations, so a restarted (or moved) manager resumes
//! without repeating work. Release resets the host and frees it, or quarantines a host that stays
//! unreachable ([`release`]).

pub(crate) mod failure;
pub(crate) mod inputs;
pub(crate) mod release;
pub(crate) mod state;
pub(crate) mod task;
pub(crate) mod watches;
pub(crate) mod writes;

use std::sync::Arc;

use async_trait::async_trait;
use capkk_api::{
    Distribution, KKInstance, KKInstanceStatus, KKMachine,
    consts::{
        BLOCK_MOVE_ANNOTATION, CLUSTER_NAME_LABEL, FAILED_ANNOTATION, HOST_CLAIMS_ANNOTATION,
        KKINSTANCE_FINALIZER, QUARANTINED_LABEL, RETRY_ANNOTATION, TOUCHED_ANNOTATION, conditions as cond,
        reasons,
    },
};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::{Value, json};
use tracing::{debug, info};

pub(crate) use state::{ClaimRecord, HostState, classify};

use crate::{
    capi::Cluster,
    conditions,
    context::{Context, TaskKind},
    error::{Error, Result},
    object_name::ObjectName,
    reconcile::{Owner, Reconciler, requeue},
};

/// The `Ready` message while host work runs. The same for every step (`status.step` names the step): with the
/// step in it, each step of each host was two more status writes in turn (this reconciler's, then the
/// KKMachine's mirror of it) and a third by CAPI's Machine controller, which copies the KKMachine's `Ready`
/// into the Machine; on a busy API server those writes held up the ones host work waits for.
pub(crate) const HOST_WORK_IN_PROGRESS: &str = "host work in progress (status.step names the step)";

/// The part of the status the reconciler writes: `state`, `observedGeneration` and the `Ready` and `Paused`
/// conditions. Host work owns the rest ([`task::hostwork_status`]); `nodeRef` is written by the KKMachine
/// reconciler once the workload Node carries the providerID.
pub(crate) fn reconciler_status(s: &KKInstanceStatus) -> KKInstanceStatus {
    KKInstanceStatus {
        state: s.state,
        observed_generation: s.observed_generation,
        conditions: s
            .conditions
            .iter()
            .filter(|c| !task::HOSTWORK_CONDITIONS.contains(&c.type_.as_str()))
            .cloned()
            .collect(),
        ..Default::default()
    }
}

#[async_trait]
impl Reconciler for KKInstance {
    const KIND: &'static str = "KKInstance";
    const FINALIZER: &'static str = KKINSTANCE_FINALIZER;
    type Status = KKInstanceStatus;
    /// The Cluster (by CAPI's cluster-name label), for pause; None when there is no such Cluster.
    type Owner = Option<Cluster>;

    crate::status_accessors!(KKInstanceStatus);

    fn owned_status(status: &KKInstanceStatus) -> KKInstanceStatus {
        reconciler_status(status)
    }

    async fn owner(&self, ctx: &Context) -> Result<Owner<Option<Cluster>>> {
        // A KKInstance's controlling KKMachine is checked by the state machine (a quarantined one has none);
        // the Cluster is only needed for pause.
        let ns = self.namespace().unwrap_or_default();
        let cluster = match self.labels().get(CLUSTER_NAME_LABEL) {
            Some(c) => {
                let name = ObjectName::checked("metadata.labels[cluster.x-k8s.io/cluster-name]", c)?;
                crate::capi::cluster(ctx, &ns, name).await?
            }
            None => None,
        };
        Ok(Owner::Found(cluster))
    }

    fn owner_paused(owner: &Option<Cluster>) -> bool {
        owner.as_ref().is_some_and(|c| c.spec.paused == Some(true))
    }

    async fn paused(obj: Arc<Self>, ctx: &Arc<Context>, _status: &mut KKInstanceStatus) -> Result<Action> {
        let uid = obj.uid().unwrap_or_default();
        ctx.tasks.request_stop(&uid);
        if ctx.tasks.running(&uid).is_some() {
            info!("Paused: host work stops at the next step boundary");
            return Ok(Action::requeue(requeue::PAUSED_HOST_WORK));
        }
        if obj.annotations().contains_key(BLOCK_MOVE_ANNOTATION) {
            let api: Api<KKInstance> =
                Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
            annotate(&api, &obj.name_any(), &[(BLOCK_MOVE_ANNOTATION, None)]).await?;
        }
        Ok(Action::await_change())
    }

    async fn apply(
        obj: Arc<Self>,
        _cluster: Option<Cluster>,
        ctx: &Arc<Context>,
        status: &mut KKInstanceStatus,
    ) -> Result<Action> {
        let Some(inst) = fresh(obj, ctx).await? else {
            return Ok(Action::await_change());
        };
        let uid = inst.uid().unwrap_or_default();
        let task = ctx.tasks.running(&uid);
        let claim = claim_record(&inst, ctx).await?;
        let state = classify(&inst, claim, task);
        debug!(?state, "Classified");
        status.state = Some(state.reported(&inst));
        let generation = inst.metadata.generation;
        let mut ready = |ok: bool, reason: &str, msg: String| {
            conditions::set(&mut status.conditions, cond::READY, ok, reason, msg, generation)
        };
        let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
        let name = inst.name_any();
        match state {
            HostState::Quarantined => {
                if inst.labels().get(QUARANTINED_LABEL).map(String::as_str) != Some("true") {
                    let patch = json!({ "metadata": { "labels": { QUARANTINED_LABEL: "true" } } });
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(Error::kube(format!("label KKInstance {name}")))?;
                }
                let why = inst
                    .spec
                    .quarantine
                    .as_ref()
                    .map(|q| q.reason.clone())
                    .unwrap_or_default();
                ready(
                    false,
                    reasons::QUARANTINED,
                    format!("{why}; delete this KKInstance after fixing the host to make it claimable again"),
                );
                Ok(Action::await_change())
            }
            HostState::Free => release::free(&inst, ctx).await,
            HostState::Releasing(task) => {
                ready(
                    false,
                    reasons::DELETING,
                    "resetting the host before freeing it".into(),
                );
                release::release(&inst, task, ctx).await
            }
            HostState::Orphaned => Ok(Action::await_change()),
            HostState::AwaitingOwner => Ok(Action::requeue(requeue::CLAIM_OWNER)),
            HostState::AwaitingClaimRecord => {
                debug!("Waiting for the KKMachine to record this claim");
                Ok(Action::requeue(requeue::CLAIM_RECORD))
            }
            HostState::Busy(kind) => {
                let step = inst.status.as_ref().and_then(|s| s.step.clone());
                if kind == TaskKind::Provision
                    && let Some(msg) = quiet_retry(ctx, &uid, step.as_deref())
                {
                    status.state = Some(capkk_api::InstanceState::Pending);
                    ready(false, reasons::UNREACHABLE, msg);
                    return Ok(Action::requeue(requeue::HOST_WORK));
                }
                ready(false, reasons::IN_PROGRESS, HOST_WORK_IN_PROGRESS.into());
                Ok(Action::requeue(requeue::HOST_WORK))
            }
            HostState::Provisioned => {
                ready(true, reasons::READY, String::new());
                status.observed_generation = generation;
                if inst.annotations().contains_key(BLOCK_MOVE_ANNOTATION) {
                    annotate(&api, &name, &[(BLOCK_MOVE_ANNOTATION, None)]).await?;
                }
                Ok(Action::await_change())
            }
            HostState::FailedTerminal { reason } => {
                let message = failure_message(&inst, &reason);
                debug!(%reason, "Terminal failure; waiting for the retry annotation");
                ready(false, &reason, message);
                status.observed_generation = generation;
                if inst.annotations().contains_key(BLOCK_MOVE_ANNOTATION) {
                    annotate(&api, &name, &[(BLOCK_MOVE_ANNOTATION, None)]).await?;
                }
                Ok(Action::await_change())
            }
            HostState::RetryRequested => {
                info!("Retry requested");
                annotate(
                    &api,
                    &name,
                    &[(RETRY_ANNOTATION, None), (FAILED_ANNOTATION, None)],
                )
                .await?;
                ctx.tasks.succeeded(&uid);
                start_provisioning(&inst, ctx, status, true).await
            }
            HostState::AwaitingBootstrapData => {
                // Prepared; the KKMachine names the bootstrap data in the spec once CAPI's bootstrap provider
                // wrote it, and that change wakes this KKInstance for provisioning.
                ready(
                    false,
                    reasons::WAITING_FOR_BOOTSTRAP_DATA,
                    "host prepared (bootstrap, binaries, container runtime, packages); waiting for the bootstrap data to provision it".into(),
                );
                status.observed_generation = generation;
                if inst.annotations().contains_key(BLOCK_MOVE_ANNOTATION) {
                    annotate(&api, &name, &[(BLOCK_MOVE_ANNOTATION, None)]).await?;
                }
                Ok(Action::await_change())
            }
            HostState::Provisionable => {
                if let Some(wait) = release::retry_wait(ctx, &uid) {
                    let msg = ctx
                        .tasks
                        .retry(&uid)
                        .map(|r| r.ready_message())
                        .unwrap_or_default();
                    ready(false, reasons::UNREACHABLE, msg);
                    return Ok(Action::requeue(wait));
                }
                start_provisioning(&inst, ctx, status, false).await
            }
        }
    }

    async fn cleanup(
        obj: Arc<Self>,
        _cluster: Option<Option<Cluster>>,
        ctx: &Arc<Context>,
        status: &mut KKInstanceStatus,
    ) -> Result<Action> {
        let uid = obj.uid().unwrap_or_default();
        let task = ctx.tasks.running(&uid);
        let state = classify(&obj, ClaimRecord::NoOwner, task);
        status.state = Some(state.reported(&obj));
        match state {
            HostState::Quarantined => {
                info!("Quarantined KKInstance deleted by a person: the host is claimable again");
                ctx.tasks.abort(&uid);
                ctx.tasks.succeeded(&uid);
                release_host_claims(&obj, ctx).await?;
                ctx.ssh
                    .forget(&obj.namespace().unwrap_or_default(), &obj.spec.address);
                Ok(Action::await_change())
            }
            HostState::Releasing(Some(TaskKind::Reset)) => {
                Err(Error::pending("host reset", requeue::CLEANUP_POLL))
            }
            HostState::Releasing(t) => {
                if t == Some(TaskKind::Provision) {
                    ctx.tasks.abort(&uid);
                }
                if let Some(wait) = release::retry_wait(ctx, &uid) {
                    return Err(Error::pending("host reset (retry after a failure)", wait));
                }
                release::spawn_reset(&obj, ctx, false).await?;
                Err(Error::pending("host reset", requeue::CLEANUP_POLL))
            }
            // Clean (or never touched): nothing to undo on the host.
            _ => {
                ctx.tasks.abort(&uid);
                ctx.tasks.succeeded(&uid);
                // The claim is over: its host identity, pooled connections (and their first-seen keys) go
                // with it.
                release_host_claims(&obj, ctx).await?;
                ctx.ssh
                    .forget(&obj.namespace().unwrap_or_default(), &obj.spec.address);
                Ok(Action::await_change())
            }
        }
    }
}

/// Give back the host-identity Leases `inst` recorded (none recorded: it never held the host, no request).
async fn release_host_claims(inst: &KKInstance, ctx: &Context) -> Result<()> {
    let Some(names) = inst.annotations().get(HOST_CLAIMS_ANNOTATION) else {
        return Ok(());
    };
    let names: Vec<String> = names
        .split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    crate::host_claims::release(
        &ctx.client,
        &ctx.settings.host_claim_namespace,
        &names,
        &inst.uid().unwrap_or_default(),
    )
    .await
    .map_err(Error::kube("release the host-identity Leases"))
}

/// The object to decide on: the cached one, or a fresh read when host work ended since the last reconcile
/// (the cache may not hold the task's last annotations yet; deciding on it would repeat work).
async fn fresh(obj: Arc<KKInstance>, ctx: &Context) -> Result<Option<Arc<KKInstance>>> {
    if !ctx.tasks.take_finished(&obj.uid().unwrap_or_default()) {
        return Ok(Some(obj));
    }
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
    Ok(api
        .get_opt(&obj.name_any())
        .await
        .map_err(Error::kube(format!("get KKInstance {}", obj.name_any())))?
        .filter(|i| i.uid() == obj.uid())
        .map(Arc::new))
}

/// Whether the controlling KKMachine recorded this KKInstance as its claim.
async fn claim_record(inst: &KKInstance, ctx: &Context) -> Result<ClaimRecord> {
    let Some(owner) = inst
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "KKMachine")
    else {
        return Ok(ClaimRecord::NoOwner);
    };
    let ns = inst.namespace().unwrap_or_default();
    let record = |km: Option<&KKMachine>| match km.filter(|m| m.uid().as_deref() == Some(owner.uid.as_str()))
    {
        None => ClaimRecord::OwnerMissing,
        Some(m) if m.spec.instance_id.as_deref() == Some(inst.name_any().as_str()) => ClaimRecord::Recorded,
        Some(_) => ClaimRecord::Unrecorded,
    };
    // The cache answers almost always; only a claim it does not show as recorded is checked with the API
    // (the KKMachine may have just recorded it).
    let cached = ctx.stores.machine(&ns, &owner.name).await;
    if record(cached.as_deref()) == ClaimRecord::Recorded {
        return Ok(ClaimRecord::Recorded);
    }
    // Owner references are not format-checked by the API server.
    let name = ObjectName::checked("metadata.ownerReferences[kind=KKMachine].name", &owner.name)?;
    let km = Api::<KKMachine>::namespaced(ctx.client.clone(), &ns)
        .get_opt(name.as_str())
        .await
        .map_err(Error::kube(format!("get KKMachine {ns}/{}", owner.name)))?;
    Ok(record(km.as_ref()))
}

/// The message of a terminal failure: from the phase condition host work set, else the reason alone.
fn failure_message(inst: &KKInstance, reason: &str) -> String {
    inst.status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.status == "False" && c.reason == reason && c.type_ != cond::READY)
        })
        .map(|c| c.message.clone())
        .unwrap_or_else(|| format!("host work failed ({reason}); set the retry annotation to try again"))
}

/// Start host work. `retry`: the run answers the retry annotation, so bootstrap commands that failed on the
/// host run again.
async fn start_provisioning(
    inst: &KKInstance,
    ctx: &Arc<Context>,
    status: &mut KKInstanceStatus,
    retry: bool,
) -> Result<Action> {
    let generation = inst.metadata.generation;
    let kkc = crate::machine_host::get_kkcluster(ctx, inst).await?;
    if let Some(d) = kkc.as_ref().and_then(|k| k.spec.distribution.clone())
        && Distribution::parse(Some(&d)) != Ok(Distribution::Kubernetes)
    {
        let msg =
            format!("KKCluster spec.distribution {d:?} is not supported; only kubernetes is implemented");
        status.state = Some(capkk_api::InstanceState::Failed);
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::UNSUPPORTED,
            &msg,
            generation,
        );
        status.observed_generation = generation;
        ctx.event(inst, true, reasons::UNSUPPORTED, "Provision", msg)
            .await;
        return Ok(Action::await_change());
    }
    // The task marks the host touched itself, alongside its connect ([`mark_touched`]).
    let uid = inst.uid().unwrap_or_default();
    let task_ctx = ctx.clone();
    let task_inst = inst.clone();
    if ctx.tasks.spawn(&uid, TaskKind::Provision, move |stop| {
        task::provision_task(task_ctx, task_inst, stop, retry)
    }) {
        info!("Starting host work");
    }
    let step = inst.status.as_ref().and_then(|s| s.step.as_deref());
    if let Some(msg) = quiet_retry(ctx, &uid, step) {
        status.state = Some(capkk_api::InstanceState::Pending);
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::UNREACHABLE,
            msg,
            generation,
        );
        return Ok(Action::requeue(requeue::HOST_WORK));
    }
    status.state = Some(capkk_api::InstanceState::Bootstrapping);
    conditions::set(
        &mut status.conditions,
        cond::READY,
        false,
        reasons::IN_PROGRESS,
        HOST_WORK_IN_PROGRESS,
        generation,
    );
    Ok(Action::requeue(requeue::HOST_WORK))
}

/// The `Ready` message to keep while an attempt to reach a host that failed transiently has not got past
/// connecting: the attempt is reported as the wait it most likely returns to (state `Pending`, the failure),
/// not as host work. Reported as host work, an unreachable host would change its status (and its
/// KKMachine's, and so CAPI's Machine's) twice per attempt, and with many such hosts CAPI's Machine
/// controller falls behind on every Machine. Progress past the connect is reported as usual. `None`: no failure
/// to keep (first attempt, or after a success or the retry annotation, which clear the record).
fn quiet_retry(ctx: &Context, uid: &str, step: Option<&str>) -> Option<String> {
    retry_report(step, ctx.tasks.retry(uid).as_ref())
}

/// [`quiet_retry`]'s decision (pure).
fn retry_report(step: Option<&str>, retry: Option<&crate::context::Retry>) -> Option<String> {
    let connecting = step.is_none_or(|s| s == task::CONNECTING_STEP);
    retry.filter(|_| connecting).map(|r| r.ready_message())
}

/// Mark `inst` touched (its release resets the host) and blocked for `clusterctl move` while host work runs,
/// unless both are recorded already. Host work does it while it connects (the host-identity Leases, `true`)
/// and runs no phase before it is written: made before the task started, it was one more API write in turn
/// between the claim and the host's first command. `true` and the Leases change nothing a reset would undo.
pub(crate) async fn mark_touched(api: &Api<KKInstance>, inst: &KKInstance) -> Result<()> {
    let a = inst.annotations();
    let set = |k: &str| a.get(k).map(String::as_str) == Some("true");
    if set(TOUCHED_ANNOTATION) && set(BLOCK_MOVE_ANNOTATION) {
        return Ok(());
    }
    annotate(
        api,
        &inst.name_any(),
        &[
            (BLOCK_MOVE_ANNOTATION, Some("true".into())),
            (TOUCHED_ANNOTATION, Some("true".into())),
        ],
    )
    .await
}

/// Merge-patch annotations (`None` removes one).
pub(crate) async fn annotate(
    api: &Api<KKInstance>,
    name: &str,
    set: &[(&str, Option<String>)],
) -> Result<()> {
    let mut map = serde_json::Map::new();
    for (k, v) in set {
        map.insert(
            (*k).to_owned(),
            v.clone().map(Value::String).unwrap_or(Value::Null),
        );
    }
    let patch = json!({ "metadata": { "annotations": map } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(format!("annotate KKInstance {name}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::TaskRegistry;

    #[test]
    fn an_attempt_at_a_host_that_failed_to_connect_reports_the_failure_until_it_gets_past_connecting() {
        let r = TaskRegistry::new(1, 1);
        assert_eq!(
            retry_report(Some(task::CONNECTING_STEP), r.retry("u").as_ref()),
            None,
            "the first attempt is reported as host work"
        );
        r.transient_failure("u", "connecting to 10.0.0.1:22 failed: Connection refused");
        let kept = retry_report(Some(task::CONNECTING_STEP), r.retry("u").as_ref())
            .expect("a retried attempt that is still connecting keeps the failure");
        assert!(kept.starts_with("connecting to 10.0.0.1:22 failed"), "{kept}");
        assert_eq!(retry_report(None, r.retry("u").as_ref()), Some(kept.clone()));
        // The same failure again: the status it leads to is the one already written.
        r.transient_failure("u", "connecting to 10.0.0.1:22 failed: Connection refused");
        assert_eq!(
            retry_report(Some(task::CONNECTING_STEP), r.retry("u").as_ref()),
            Some(kept)
        );
        assert_eq!(
            retry_report(Some("step 2/5: repository"), r.retry("u").as_ref()),
            None,
            "progress past the connect is reported as host work"
        );
        r.succeeded("u");
        assert_eq!(
            retry_report(Some(task::CONNECTING_STEP), r.retry("u").as_ref()),
            None
        );
    }
}
