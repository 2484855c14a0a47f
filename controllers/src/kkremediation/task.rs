//! Remediation attempts as background tasks (one per KKRemediation UID; they take a slot of
//! `--max-concurrent-hosts` like host work): connect, run the tier, publish an event, record the outcome and
//! wake the KKRemediation. The reconcile writes the status; the task writes nothing but the event.
//!
//! A reboot gives its slot back while it waits for the host to come back (up to the strategy's `timeout`) and
//! takes one again for each poll of the host. Each stretch the slot is held is bounded by
//! `--max-host-phase-duration`, as a KKInstance's phases are; past it the attempt fails.

use std::{sync::Arc, time::Duration};

use capkk_api::{KKCluster, KKInstance, KKRemediation, RemediationTier, consts::reasons};
use capkk_service::journal::{Progress, StepRecord};
use kube::{ResourceExt, runtime::reflector::ObjectRef};
use tracing::{info, warn};

use super::state::AttemptOutcome;
use crate::{
    context::{Context, permits::ReturnableSlot},
    kkinstance::{failure::Failure, inputs::connect, task::overran},
    services::{HostCall, PhaseInput},
};

/// The event reason of a tier that ran (or failed).
pub(crate) fn tier_event(tier: RemediationTier, ok: bool) -> &'static str {
    match (tier, ok) {
        (RemediationTier::RestartServices, true) => reasons::SERVICES_RESTARTED,
        (RemediationTier::Reboot, true) => reasons::HOST_REBOOTED,
        (RemediationTier::RestartServices, false) => capkk_api::consts::events::SERVICES_RESTART_FAILED,
        (RemediationTier::Reboot, false) => capkk_api::consts::events::REBOOT_FAILED,
    }
}

/// What an attempt needs.
pub(crate) struct AttemptSpec {
    /// The KKRemediation (for its events and the wake-up).
    pub remediation: KKRemediation,
    /// The host's KKInstance.
    pub instance: KKInstance,
    /// Its KKCluster (credentials, bastion).
    pub kkcluster: Option<KKCluster>,
    /// 1-based attempt.
    pub attempt: u32,
    /// `retryLimit`.
    pub limit: u32,
    /// The tier.
    pub tier: RemediationTier,
    /// `timeout`: bounds a reboot's return.
    pub wait: Duration,
}

/// Journal lines of an attempt go to the log (the KKRemediation's status keeps only the outcome).
struct LogProgress;

impl Progress for LogProgress {
    fn step_started(&self, _: &str, _: usize, _: usize, _: &str) {}
    fn step_finished(&self, r: &StepRecord) {
        info!(step = %r.name, exit_code = ?r.exit_code, took = ?r.duration, "Remediation step finished");
    }
}

/// Run one attempt, then record its outcome and wake the KKRemediation.
pub(crate) async fn attempt_task(ctx: Arc<Context>, spec: AttemptSpec) {
    let uid = spec.remediation.uid().unwrap_or_default();
    // A slot of the hosts worked on at once, of the remediation's namespace's share.
    let slot = ctx
        .tasks
        .permits
        .returnable(&spec.remediation.namespace().unwrap_or_default())
        .await;
    let limit = ctx.settings.max_host_phase_duration;
    let outcome = tokio::select! {
        o = run(&ctx, &spec, &slot) => o,
        () = slot.held_past(limit) => AttemptOutcome::Failed {
            reason: reasons::COMMAND_FAILED,
            message: overran(tier_step(spec.tier), limit),
        },
    };
    drop(slot);
    let (warning, note) = match &outcome {
        AttemptOutcome::Succeeded(m) => (false, m.clone()),
        AttemptOutcome::Failed { message, .. } => (true, message.clone()),
    };
    let host = &spec.instance.spec.name;
    if warning {
        warn!(%host, attempt = spec.attempt, tier = ?spec.tier, %note, "Remediation attempt failed");
    } else {
        info!(%host, attempt = spec.attempt, tier = ?spec.tier, "Remediation attempt finished");
    }
    ctx.event(
        &spec.remediation,
        warning,
        tier_event(spec.tier, !warning),
        "Remediate",
        format!(
            "attempt {} of {} on host {host}: {note}",
            spec.attempt, spec.limit
        ),
    )
    .await;
    ctx.remediations.record(&uid, spec.attempt, outcome);
    let _ = ctx
        .triggers
        .remediations
        .unbounded_send(ObjectRef::from_obj(&spec.remediation));
}

/// The name of a tier's work on the host, as its journal step says.
fn tier_step(tier: RemediationTier) -> &'static str {
    match tier {
        RemediationTier::RestartServices => "restart-services",
        RemediationTier::Reboot => "reboot",
    }
}

async fn run(ctx: &Context, spec: &AttemptSpec, slot: &ReturnableSlot<'_>) -> AttemptOutcome {
    let exec = match connect(ctx, &spec.instance, spec.kkcluster.as_ref()).await {
        Ok(c) => c.exec,
        Err(Failure::Transient(m)) => {
            return AttemptOutcome::Failed {
                reason: reasons::UNREACHABLE,
                message: m,
            };
        }
        Err(Failure::Terminal { reason, message }) => return AttemptOutcome::Failed { reason, message },
    };
    let input = PhaseInput {
        instance: spec.instance.spec.clone(),
        ..Default::default()
    };
    let host = HostCall {
        exec: &*exec,
        input: &input,
        progress: &LogProgress,
    };
    match ctx.services.remediate(spec.tier, spec.wait, host, slot).await {
        Ok(m) => AttemptOutcome::Succeeded(m),
        Err(e @ capkk_service::Error::HostNotBack { .. }) => AttemptOutcome::Failed {
            reason: reasons::HOST_NOT_BACK,
            message: e.to_string(),
        },
        Err(e) if e.is_transient() => AttemptOutcome::Failed {
            reason: reasons::UNREACHABLE,
            message: e.to_string(),
        },
        Err(e) => AttemptOutcome::Failed {
            reason: reasons::COMMAND_FAILED,
            message: e.to_string(),
        },
    }
}
