//! Giving a host back: reset and free it, or quarantine a host that cannot be reset.

use std::{sync::Arc, time::Duration};

use capkk_api::{
    KKInstance, Quarantine,
    consts::{
        BLOCK_MOVE_ANNOTATION, CLUSTER_NAME_LABEL, QUARANTINED_LABEL, RELEASE_ANNOTATION,
        UNREACHABLE_SINCE_ANNOTATION, reasons,
    },
};
use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{OwnerReference, Time},
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::json;
use tracing::{info, warn};

use super::{annotate, task::reset_task};
use crate::{
    capi::Cluster,
    context::{Context, TaskKind},
    error::{Error, Result},
    object_name::ObjectName,
    reconcile::requeue,
};

/// Time left before a failed reset may be tried again (None: now).
pub(crate) fn retry_wait(ctx: &Context, uid: &str) -> Option<Duration> {
    ctx.tasks
        .retry(uid)
        .map(|r| r.not_before.saturating_duration_since(std::time::Instant::now()))
        .filter(|d| !d.is_zero())
}

/// A released (not deleted) KKInstance whose host needs a reset: stop provisioning, reset, quarantine
/// a host that stays unreachable for `--quarantine-after`.
pub(crate) async fn release(inst: &KKInstance, task: Option<TaskKind>, ctx: &Arc<Context>) -> Result<Action> {
    let uid = inst.uid().unwrap_or_default();
    match task {
        Some(TaskKind::Reset) => return Ok(Action::requeue(requeue::RESET_POLL)),
        Some(TaskKind::Provision) => {
            info!("Stopping host work for the release");
            ctx.tasks.abort(&uid);
        }
        None => {}
    }
    if let Some(since) = inst
        .annotations()
        .get(UNREACHABLE_SINCE_ANNOTATION)
        .and_then(|s| s.parse::<Timestamp>().ok())
    {
        let elapsed = Timestamp::now().duration_since(since);
        if elapsed.as_secs() >= ctx.settings.quarantine_after.as_secs() as i64 {
            let reason = format!(
                "host {} unreachable for {}s while being reset on release",
                inst.spec.address,
                elapsed.as_secs()
            );
            quarantine(inst, ctx, &reason).await?;
            return Ok(Action::await_change());
        }
    }
    if let Some(wait) = retry_wait(ctx, &uid) {
        // Not beyond the quarantine deadline: check it again in time.
        return Ok(Action::requeue(
            wait.min(ctx.settings.quarantine_after / 2)
                .max(Duration::from_secs(1)),
        ));
    }
    spawn_reset(inst, ctx, true).await?;
    Ok(Action::requeue(requeue::RESET_POLL))
}

/// Free a clean host: delete its KKInstance.
pub(crate) async fn free(inst: &KKInstance, ctx: &Context) -> Result<Action> {
    let uid = inst.uid().unwrap_or_default();
    if let Some(TaskKind::Provision) = ctx.tasks.running(&uid) {
        ctx.tasks.abort(&uid);
    }
    info!("Freeing the host (it is clean)");
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
    match api.delete(&inst.name_any(), &DeleteParams::default()).await {
        Ok(_) => Ok(Action::await_change()),
        Err(e) if crate::error::is_not_found(&e) => Ok(Action::await_change()),
        Err(e) => Err(Error::kube(format!("delete KKInstance {}", inst.name_any()))(e)),
    }
}

/// Start a reset task unless one runs.
pub(crate) async fn spawn_reset(inst: &KKInstance, ctx: &Arc<Context>, releasing: bool) -> Result<()> {
    let uid = inst.uid().unwrap_or_default();
    if ctx.tasks.running(&uid).is_some() {
        return Ok(());
    }
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
    if inst.metadata.deletion_timestamp.is_none() {
        annotate(
            &api,
            &inst.name_any(),
            &[(BLOCK_MOVE_ANNOTATION, Some("true".into()))],
        )
        .await?;
    }
    let task_ctx = ctx.clone();
    let task_inst = inst.clone();
    if ctx.tasks.spawn(&uid, TaskKind::Reset, move |_stop| {
        reset_task(task_ctx, task_inst, releasing)
    }) {
        info!("Resetting the host");
    }
    Ok(())
}

/// Keep the host out of the pool: the KKInstance stays (so the host cannot be claimed), loses its
/// KKMachine owner (so the Machine can go) and is marked quarantined. It keeps an owner chain to the
/// Cluster, so `clusterctl move` takes it along.
pub(crate) async fn quarantine(inst: &KKInstance, ctx: &Context, reason: &str) -> Result<()> {
    let ns = inst.namespace().unwrap_or_default();
    let name = inst.name_any();
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    warn!(%reason, "Quarantining the host");
    // A label that names no object (upper case, `..`) leaves the quarantine without its Cluster owner rather
    // than unquarantined: it is never requested.
    let cluster = inst.labels().get(CLUSTER_NAME_LABEL).and_then(|c| {
        ObjectName::checked("metadata.labels[cluster.x-k8s.io/cluster-name]", c)
            .inspect_err(|e| warn!(error = %e, "Quarantining without a Cluster owner"))
            .ok()
    });
    let cluster_owner = match cluster {
        Some(c) => Api::<Cluster>::namespaced(ctx.client.clone(), &ns)
            .get_opt(c.as_str())
            .await
            .map_err(Error::kube(format!("get Cluster {ns}/{c}")))?
            .map(|c| OwnerReference {
                api_version: "cluster.x-k8s.io/v1beta2".into(),
                kind: "Cluster".into(),
                name: c.name_any(),
                uid: c.uid().unwrap_or_default(),
                controller: None,
                block_owner_deletion: None,
            }),
        None => None,
    };
    let patch = json!({
        "metadata": {
            "labels": { QUARANTINED_LABEL: "true" },
            "annotations": {
                RELEASE_ANNOTATION: null,
                UNREACHABLE_SINCE_ANNOTATION: null,
                BLOCK_MOVE_ANNOTATION: null,
            },
            "ownerReferences": cluster_owner.map(|o| vec![o]),
        },
        "spec": { "quarantine": Quarantine { reason: reason.to_owned(), since: Some(Time(Timestamp::now())) } },
    });
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(format!("quarantine KKInstance {name}")))?;
    ctx.event(
        inst,
        true,
        reasons::QUARANTINED,
        "Release",
        format!("{reason}; the host is not claimable until a person deletes this KKInstance"),
    )
    .await;
    ctx.trigger_instance(&name, &ns);
    Ok(())
}
