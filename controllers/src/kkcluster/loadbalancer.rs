//! The control-plane endpoint the provider serves (`controlPlaneLoadBalancer.type: Keepalived`): keeping every
//! control-plane host's keepalived and haproxy in step with the control plane's membership, and the
//! `LoadBalancerReady` condition; and the refusal of a cluster asking for more than one control plane with no
//! load balancer (`NoLoadBalancer`).
//!
//! A host configures itself in its load-balancer phase, with the members claimed when its inputs were read
//! ([`crate::hosts::load_balancer_plan`]). A member that joins or leaves later changes the membership; the
//! KKCluster then re-configures every member, once each has run its own phase (a member still in it would
//! overwrite the sync with what it read earlier), as a background job ([`crate::context::jobs`]). The membership
//! every member was last configured with is an annotation on the KKCluster: a restarted manager compares it
//! with the KKInstances and syncs again when they differ (the configuration on the hosts is idempotent). A
//! released host is no member: the others lose it in the next sync, and its reset removes its own
//! configuration.

use std::{sync::Arc, time::Duration};

use capkk_api::{
    KKCluster, KKClusterStatus, KKInstance,
    consts::{LOADBALANCER_MEMBERS_ANNOTATION, conditions as cond, reasons},
};
use capkk_service::journal::{Progress, StepRecord};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;
use tracing::{info, warn};

use crate::{
    conditions,
    context::Context,
    hosts,
    kkinstance::{
        failure::Failure,
        inputs::{Connected, connect, phase_input},
        state::completed,
    },
    services::{HostCall, LoadBalancerPlan, Phase},
};

/// How soon a KKCluster whose membership is not synced yet looks again (a member still in its own phase, a
/// sync running or failed).
pub(crate) const SYNC_POLL: Duration = Duration::from_secs(5);

/// The key of a KKCluster's sync job.
fn job_key(kkc: &KKCluster) -> String {
    format!("loadbalancer/{}", kkc.uid().unwrap_or_default())
}

/// Where a membership stands, decided from the KKInstances and the annotation (pure).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Membership {
    /// No control-plane host claimed yet.
    Empty,
    /// Every member was configured with the current membership.
    Synced,
    /// Members still in their own load-balancer phase (their names): the sync waits for them.
    WaitingFor(Vec<String>),
    /// The membership changed since the members were configured: sync it.
    Changed,
}

/// Decide where the membership `members` (`name=address` text: `text`) stands: `configured` names the
/// members whose load-balancer phase completed, `applied` is the annotation.
pub(crate) fn membership(
    members: &[capkk_service::loadbalancer::Member],
    text: &str,
    configured: &[String],
    applied: Option<&str>,
) -> Membership {
    if members.is_empty() {
        return Membership::Empty;
    }
    let waiting: Vec<String> = members
        .iter()
        .filter(|m| !configured.contains(&m.name))
        .map(|m| m.name.clone())
        .collect();
    if !waiting.is_empty() {
        return Membership::WaitingFor(waiting);
    }
    if applied == Some(text) {
        Membership::Synced
    } else {
        Membership::Changed
    }
}

/// Sync the membership of a `Keepalived` KKCluster and report it in `LoadBalancerReady`. Returns when to look
/// again (`None`: settled).
pub(crate) async fn sync_and_report(
    kkc: &Arc<KKCluster>,
    api_server_port: u16,
    ctx: &Arc<Context>,
    status: &mut KKClusterStatus,
) -> Option<Duration> {
    let ns = kkc.namespace().unwrap_or_default();
    let name = kkc.name_any();
    let gen_ = kkc.metadata.generation;
    let instances = ctx.stores.instances_in(&ns).await;
    let members = hosts::control_plane_members(&instances, &name);
    let member_instances: Vec<Arc<KKInstance>> = instances
        .iter()
        .filter(|i| hosts::of_kkcluster(i, &name) && hosts::is_control_plane_member(i))
        .cloned()
        .collect();
    let configured: Vec<String> = member_instances
        .iter()
        .filter(|i| completed(i).contains(Phase::LoadBalancer.name()))
        .map(|i| i.spec.name.clone())
        .collect();
    let text = hosts::members_text(&members);
    let applied = kkc
        .annotations()
        .get(LOADBALANCER_MEMBERS_ANNOTATION)
        .map(String::as_str);
    let key = job_key(kkc);
    let endpoint = kkc
        .spec
        .control_plane_endpoint
        .as_ref()
        .map(|e| {
            format!(
                "{}:{}",
                e.host.clone().unwrap_or_default(),
                e.port.unwrap_or_default()
            )
        })
        .unwrap_or_default();
    let state = membership(&members, &text, &configured, applied);
    let mut set = |ok: bool, reason: &str, msg: String| {
        conditions::set(
            &mut status.conditions,
            cond::LOAD_BALANCER_READY,
            ok,
            reason,
            msg,
            gen_,
        )
    };
    match state {
        Membership::Empty => {
            set(
                false,
                reasons::IN_PROGRESS,
                format!("{endpoint}: no control-plane host yet"),
            );
            if applied.is_some_and(|a| !a.is_empty()) {
                // Every member went: nothing to configure, the resets removed their configuration.
                patch_applied(ctx, kkc, "").await;
            }
            Some(SYNC_POLL)
        }
        Membership::WaitingFor(names) => {
            set(
                false,
                reasons::IN_PROGRESS,
                format!(
                    "{endpoint}: members {text}; waiting for {} to configure keepalived and haproxy",
                    names.join(", ")
                ),
            );
            Some(SYNC_POLL)
        }
        Membership::Synced => {
            let holder = match ctx.jobs.outcome(&key) {
                Some(Ok(h)) if !h.is_empty() => format!("; the VIP was on {h} at the last sync"),
                _ => String::new(),
            };
            set(
                true,
                reasons::READY,
                format!("{endpoint}: members {text}{holder}"),
            );
            None
        }
        Membership::Changed => {
            let last = match ctx.jobs.outcome(&key) {
                Some(Err(e)) => Some(e),
                _ => None,
            };
            if ctx.jobs.running(&key) {
                set(
                    false,
                    reasons::IN_PROGRESS,
                    format!("{endpoint}: configuring every member for {text}"),
                );
            } else {
                match &last {
                    Some(e) => set(
                        false,
                        reasons::COMMAND_FAILED,
                        format!("{endpoint}: syncing members {text} failed (retried): {e}"),
                    ),
                    None => set(
                        false,
                        reasons::IN_PROGRESS,
                        format!("{endpoint}: configuring every member for {text}"),
                    ),
                }
                info!(members = %text, "Syncing the control-plane endpoint's membership");
                let job_ctx = ctx.clone();
                let job_kkc = (**kkc).clone();
                let job_key = key.clone();
                ctx.jobs.spawn(&key, async move {
                    let outcome =
                        sync_members(&job_ctx, &job_kkc, member_instances, text, api_server_port).await;
                    if let Err(e) = &outcome {
                        warn!(kkcluster = %job_kkc.name_any(), error = %e, "Syncing the load balancer's members failed");
                    }
                    job_ctx.jobs.finish(&job_key, outcome);
                    job_ctx.trigger_cluster(&job_kkc.name_any(), &job_kkc.namespace().unwrap_or_default());
                });
            }
            Some(SYNC_POLL)
        }
    }
}

/// Record the membership every member was configured with.
async fn patch_applied(ctx: &Context, kkc: &KKCluster, text: &str) -> bool {
    let api: Api<KKCluster> = Api::namespaced(ctx.client.clone(), &kkc.namespace().unwrap_or_default());
    let value = if text.is_empty() { json!(null) } else { json!(text) };
    let patch = json!({ "metadata": { "annotations": { LOADBALANCER_MEMBERS_ANNOTATION: value } } });
    match api
        .patch(&kkc.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            warn!(error = %e, "Recording the load balancer's members failed");
            false
        }
    }
}

/// Journal lines of a sync go to the log.
struct LogProgress;

impl Progress for LogProgress {
    fn step_started(&self, _: &str, _: usize, _: usize, _: &str) {}
    fn step_finished(&self, r: &StepRecord) {
        info!(phase = %r.phase, step = %r.name, exit_code = ?r.exit_code, took = ?r.duration, skipped = r.skipped, "Load-balancer sync step finished");
    }
}

/// Configure every member for the membership of `members` (the KKInstances, as read when the sync started),
/// then record it. Returns the member holding the VIP (empty when none said so), or why members failed.
async fn sync_members(
    ctx: &Arc<Context>,
    kkc: &KKCluster,
    members: Vec<Arc<KKInstance>>,
    text: String,
    api_server_port: u16,
) -> Result<String, String> {
    let mut failures = Vec::new();
    let mut holders = Vec::new();
    for inst in &members {
        match sync_member(ctx, kkc, inst, &members, api_server_port).await {
            Ok(true) => holders.push(inst.spec.name.clone()),
            Ok(false) => {}
            Err(e) => failures.push(format!("{}: {e}", inst.spec.name)),
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    if !patch_applied(ctx, kkc, &text).await {
        return Err("recording the members on the KKCluster failed".into());
    }
    Ok(holders.join(", "))
}

/// Configure one member; true when it holds the VIP afterwards.
async fn sync_member(
    ctx: &Arc<Context>,
    kkc: &KKCluster,
    inst: &KKInstance,
    members: &[Arc<KKInstance>],
    api_server_port: u16,
) -> Result<bool, String> {
    let failure = |f: Failure| match f {
        Failure::Transient(m) => m,
        Failure::Terminal { reason, message } => format!("{reason}: {message}"),
    };
    let Connected { exec, target, .. } = connect(ctx, inst, Some(kkc)).await.map_err(failure)?;
    let mut input = phase_input(ctx, inst, Some(kkc)).await.map_err(failure)?;
    target
        .secret_texts()
        .into_iter()
        .for_each(|t| input.redactor.add(t));
    input.load_balancer = hosts::load_balancer_plan(kkc, inst, members, api_server_port);
    if !matches!(input.load_balancer, LoadBalancerPlan::Serve(_)) {
        return Ok(false);
    }
    let host = HostCall {
        exec: &*exec,
        input: &input,
        progress: &LogProgress,
    };
    ctx.services
        .run(Phase::LoadBalancer, host)
        .await
        .map_err(|e| e.to_string())?;
    // Who holds the VIP is reported if the host can tell; a failed look is no failed sync.
    Ok(ctx.services.holds_vip(host).await.ok().flatten().unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capkk_service::loadbalancer::Member;

    fn members(names: &[&str]) -> Vec<Member> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| Member {
                name: (*n).into(),
                address: format!("198.18.5.{}", 11 + i),
            })
            .collect()
    }

    #[test]
    fn a_membership_is_synced_once_every_member_configured_itself_and_the_annotation_differs() {
        let m = members(&["cp-1", "cp-2"]);
        let text = hosts::members_text(&m);
        assert_eq!(text, "cp-1=198.18.5.11,cp-2=198.18.5.12");
        assert_eq!(membership(&[], "", &[], None), Membership::Empty);
        assert_eq!(
            membership(&m, &text, &["cp-1".into()], Some("cp-1=198.18.5.11")),
            Membership::WaitingFor(vec!["cp-2".into()]),
            "cp-2 still runs its own phase: a sync now would be overwritten"
        );
        let both = ["cp-1".to_owned(), "cp-2".to_owned()];
        assert_eq!(
            membership(&m, &text, &both, Some("cp-1=198.18.5.11")),
            Membership::Changed
        );
        assert_eq!(membership(&m, &text, &both, None), Membership::Changed);
        assert_eq!(membership(&m, &text, &both, Some(&text)), Membership::Synced);
        // A member released: the membership shrinks and differs from what was applied.
        let one = members(&["cp-1"]);
        assert_eq!(
            membership(&one, &hosts::members_text(&one), &both, Some(&text)),
            Membership::Changed
        );
    }
}
