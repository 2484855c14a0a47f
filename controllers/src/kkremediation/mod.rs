//! KKRemediation reconciler: CAPI's external remediation contract. A MachineHealthCheck with
//! `remediation.templateRef` creates a KKRemediation named after the unhealthy Machine and owned by it; this
//! reconciler repairs the Machine's host in tiers ([`state::decide`]) as background attempts ([`task`]) and,
//! once `retryLimit` attempts did not help, sets the Machine's `OwnerRemediated` condition False: its
//! MachineSet or KubeadmControlPlane then deletes and replaces it, and the host is reset (or quarantined
//! when unreachable) by the KKMachine's normal deletion. CAPI deletes the KKRemediation once the Machine
//! is healthy again.
//!
//! - [`state`]: the pure decision, table-tested.
//! - [`task`]: the attempts and their outcomes.
//! - [`watches`]: the controller.

pub(crate) mod state;
pub(crate) mod task;
pub(crate) mod watches;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use capkk_api::{
    KKRemediation, KKRemediationStatus, RemediationPhase, RemediationTier,
    consts::{KKREMEDIATION_FINALIZER, REMEDIATION_FIELD_MANAGER, conditions as cond, reasons},
};
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::json;
use tracing::info;

use self::{
    state::{AttemptOutcome, Decision, Inputs, decide},
    task::{AttemptSpec, attempt_task},
};
use crate::{
    capi::{Cluster, Machine},
    conditions,
    context::Context,
    error::{Error, Result},
    machine_host::host_of,
    object_name::ObjectName,
    reconcile::{Owner, Reconciler, requeue},
};

/// The Machine being remediated and its Cluster (for pause; None when the Cluster is not found).
pub(crate) struct RemediationOwner {
    /// The Machine (same name as the KKRemediation).
    pub machine: Machine,
    /// Its Cluster.
    pub cluster: Option<Cluster>,
}

/// The condition of a tier.
pub(crate) fn tier_condition(tier: RemediationTier) -> &'static str {
    match tier {
        RemediationTier::RestartServices => cond::SERVICES_RESTARTED,
        RemediationTier::Reboot => cond::HOST_REBOOTED,
    }
}

#[async_trait]
impl Reconciler for KKRemediation {
    const KIND: &'static str = "KKRemediation";
    const FINALIZER: &'static str = KKREMEDIATION_FINALIZER;
    type Status = KKRemediationStatus;
    type Owner = RemediationOwner;

    crate::status_accessors!(KKRemediationStatus);

    async fn owner(&self, ctx: &Context) -> Result<Owner<RemediationOwner>> {
        let ns = self.namespace().unwrap_or_default();
        let Some((owner, machine)) = crate::capi::owner_machine(ctx, &self.metadata).await? else {
            return Ok(Owner::Missing {
                what: "the owner Machine (CAPI's MachineHealthCheck sets it)".into(),
                retry: None,
            });
        };
        let Some(machine) = machine.filter(|m| m.uid().as_deref() == Some(owner.uid.as_str())) else {
            return Ok(Owner::Missing {
                what: format!("Machine {}", owner.name),
                retry: Some(requeue::OWNER_MISSING),
            });
        };
        let cluster_name = ObjectName::checked("Machine.spec.clusterName", &machine.spec.cluster_name)?;
        let cluster = crate::capi::cluster(ctx, &ns, cluster_name).await?;
        Ok(Owner::Found(RemediationOwner { machine, cluster }))
    }

    fn owner_paused(owner: &RemediationOwner) -> bool {
        owner
            .cluster
            .as_ref()
            .is_some_and(|c| c.spec.paused == Some(true))
    }

    async fn apply(
        obj: Arc<Self>,
        owner: RemediationOwner,
        ctx: &Arc<Context>,
        status: &mut KKRemediationStatus,
    ) -> Result<Action> {
        apply(obj, &owner.machine, ctx, status).await
    }

    async fn cleanup(
        obj: Arc<Self>,
        _owner: Option<RemediationOwner>,
        ctx: &Arc<Context>,
        _status: &mut KKRemediationStatus,
    ) -> Result<Action> {
        // Deleted by CAPI (the Machine is healthy, or gone): a running attempt has nothing left to repair.
        ctx.remediations.forget(&obj.uid().unwrap_or_default());
        Ok(Action::await_change())
    }
}

/// How long ago `t` was (zero for a time in the future: another clock).
fn since(t: &Time) -> Duration {
    let d = Timestamp::now().duration_since(t.0);
    Duration::try_from(d).unwrap_or_default()
}

async fn apply(
    rem: Arc<KKRemediation>,
    machine: &Machine,
    ctx: &Arc<Context>,
    status: &mut KKRemediationStatus,
) -> Result<Action> {
    let ns = rem.namespace().unwrap_or_default();
    let uid = rem.uid().unwrap_or_default();
    let gen_ = rem.metadata.generation;
    let strategy = &rem.spec.strategy;
    let limit = strategy.retry_limit();
    if let Some((attempt, at)) = ctx.remediations.latest_started(&uid)
        && attempt > status.retry_count.unwrap_or(0).max(0) as u32
    {
        // The cached object predates the status write that recorded this attempt.
        status.retry_count = Some(attempt as i32);
        status.last_remediated = Some(at);
        status.phase = Some(RemediationPhase::Running);
    }
    let retry_count = status.retry_count.unwrap_or(0).max(0) as u32;
    let running = ctx.remediations.running(&uid);
    let outcome = (retry_count > 0)
        .then(|| ctx.remediations.outcome(&uid, retry_count))
        .flatten();

    // The last attempt's outcome, once it is known, into its tier's condition.
    if let Some(o) = &outcome {
        let tier = strategy.type_.tier(retry_count);
        let (ok, reason, message) = match o {
            AttemptOutcome::Succeeded(m) => (true, task::tier_event(tier, true), m.as_str()),
            AttemptOutcome::Failed { reason, message } => (false, *reason, message.as_str()),
        };
        conditions::set(
            &mut status.conditions,
            tier_condition(tier),
            ok,
            reason,
            format!("attempt {retry_count} of {limit}: {message}"),
            gen_,
        );
    }
    if !running && status.phase == Some(RemediationPhase::Running) {
        status.phase = Some(RemediationPhase::Waiting);
    }

    let host = host_of(ctx, &ns, machine).await?;
    let decision = decide(&Inputs {
        strategy,
        phase: status.phase,
        retry_count,
        since_last: status.last_remediated.as_ref().map(since),
        running,
        outcome: outcome.as_ref(),
        machine_deleting: machine.metadata.deletion_timestamp.is_some(),
        no_host: host.as_ref().err().cloned(),
    });
    info!(?decision, retry_count, "Decided");
    match decision {
        Decision::Done => Ok(Action::await_change()),
        Decision::Running => Ok(Action::requeue(requeue::HOST_WORK)),
        Decision::Wait(d) => {
            status.phase = Some(RemediationPhase::Waiting);
            Ok(Action::requeue(d + Duration::from_secs(1)))
        }
        Decision::Start { attempt, tier } => {
            let Ok((instance, kkcluster)) = host else {
                return Ok(Action::requeue(requeue::HOST_WORK));
            };
            let wait = Duration::from_secs(strategy.timeout_seconds());
            let (reason, doing) = match tier {
                RemediationTier::RestartServices => (
                    capkk_api::consts::events::RESTARTING_SERVICES,
                    "restarting the kubelet, and containerd when capkk installed it".to_owned(),
                ),
                RemediationTier::Reboot => (
                    capkk_api::consts::events::REBOOTING,
                    format!("rebooting the host and waiting up to {} s for it", wait.as_secs()),
                ),
            };
            let host_name = instance.spec.name.clone();
            let now = Time(Timestamp::now());
            ctx.remediations.started(&uid, attempt, now.clone());
            status.retry_count = Some(attempt as i32);
            status.last_remediated = Some(now);
            status.phase = Some(RemediationPhase::Running);
            conditions::set(
                &mut status.conditions,
                tier_condition(tier),
                false,
                reasons::IN_PROGRESS,
                format!("attempt {attempt} of {limit}: {doing}"),
                gen_,
            );
            let spec = AttemptSpec {
                remediation: (*rem).clone(),
                instance,
                kkcluster,
                attempt,
                limit,
                tier,
                wait,
            };
            let task_ctx = ctx.clone();
            ctx.remediations.spawn(&uid, attempt_task(task_ctx, spec));
            info!(attempt, ?tier, host = %host_name, "Starting a remediation attempt");
            ctx.event(
                &*rem,
                false,
                reason,
                "Remediate",
                format!("attempt {attempt} of {limit} on host {host_name}: {doing}"),
            )
            .await;
            Ok(Action::requeue(requeue::HOST_WORK))
        }
        Decision::GiveUp {
            reason,
            message,
            phase,
        } => {
            request_owner_remediation(ctx, &ns, machine, &message).await?;
            status.phase = Some(phase);
            conditions::set(
                &mut status.conditions,
                cond::OWNER_REMEDIATION_REQUESTED,
                true,
                reason,
                format!(
                    "{message}; Machine {} handed to its owner for replacement",
                    machine.name_any()
                ),
                gen_,
            );
            info!(%reason, %message, "Handing the Machine to its owner for replacement");
            ctx.event(
                &*rem,
                true,
                reason,
                "Remediate",
                format!(
                    "{message}; Machine {} handed to its owner for replacement",
                    machine.name_any()
                ),
            )
            .await;
            Ok(Action::await_change())
        }
    }
}

/// Set the Machine's `OwnerRemediated` condition False (CAPI's `WaitingForRemediation`): its MachineSet or
/// KubeadmControlPlane remediates a Machine whose `HealthCheckSucceeded` (set by the MachineHealthCheck) and
/// `OwnerRemediated` are both False, by deleting and replacing it. Server-side apply of that one entry of the
/// condition list, as its own field manager: CAPI's conditions stay CAPI's.
pub(crate) async fn request_owner_remediation(
    ctx: &Context,
    ns: &str,
    machine: &Machine,
    message: &str,
) -> Result<()> {
    let name = machine.name_any();
    let body = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "status": { "conditions": [{
            "type": cond::MACHINE_OWNER_REMEDIATED,
            "status": "False",
            "reason": reasons::WAITING_FOR_REMEDIATION,
            "message": format!("KKRemediation: {message}"),
            "lastTransitionTime": Timestamp::now().to_string(),
        }]},
    });
    Api::<Machine>::namespaced(ctx.client.clone(), ns)
        .patch_status(
            &name,
            &PatchParams::apply(REMEDIATION_FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(Error::kube(format!("set OwnerRemediated on Machine {ns}/{name}")))?;
    Ok(())
}
