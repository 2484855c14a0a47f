//! `UpdateMachine`: the in-place upgrade of a worker's host, as a background task per Machine. CAPI calls the
//! hook until it reports done; each call answers from the task's state, so a call never waits on the host.
//!
//! The caller is not authenticated (CAPI sends no client certificate), so the request only names a Machine:
//! everything acted on comes from the API server. The Machine is read by the request's namespace and name and
//! must carry CAPI's pending-update marker with the requested version ([`decide::matches_pending`]); anything
//! else gets one uniform refusal ([`REFUSED`]), whether the Machine exists or not. The host, its current
//! version (its KKInstance's) and the kubeadm settings (the KubeadmConfig the stored Machine references) are
//! read from the API server too, and the step must be one `CanUpdateMachine` allows ([`decide::host_step`]).
//!
//! | task of this Machine (by UID) and version | answer |
//! |---|---|
//! | none, the host records the version already | `Success`, `retryAfterSeconds` 0 (done) |
//! | none | the task starts; `Success`, `retryAfterSeconds` [`RETRY_AFTER`] (in progress) |
//! | running | `Success`, `retryAfterSeconds` [`RETRY_AFTER`] |
//! | done | `Success`, `retryAfterSeconds` 0 (CAPI completes the update) |
//! | failed | `Failure` with the reason (CAPI calls again later; that call starts a new attempt) |
//!
//! The task connects to the KKMachine's host, runs [`HostServices::upgrade`](crate::services::HostServices)
//! (the version's binaries, `kubeadm upgrade node`, a kubelet restart), then records the new version in the
//! KKInstance's `spec.kubernetesVersion` and publishes an event on it. Outcomes are kept by Machine UID (a
//! re-created Machine of the same name is another Machine) in
//! [`Updates`](crate::context::updates::Updates), for
//! [`OUTCOME_TTL`](crate::context::updates::OUTCOME_TTL) at most, at most [`MAX_TRACKED`] of them, and forgotten
//! once their Machine is gone. A restarted manager has no tasks: the
//! next call finds the version recorded on the KKInstance (done), or runs the upgrade again, which finds
//! everything in place.
//!
//! The task holds a slot of the hosts worked on at once, and its work on the host is bounded by
//! `--max-host-phase-duration` like a KKInstance's phases (past it the attempt fails, and CAPI's next call
//! starts a new one). A manager that loses its leadership (or stops) aborts the running tasks with its other
//! host work ([`Updates::abort_all`](crate::context::updates::Updates::abort_all),
//! [`Context::abort_host_work`]): only the leader works on hosts.

use std::sync::Arc;

use capkk_api::{
    KKInstance,
    consts::RUNTIME_VERSION_ANNOTATION,
    names::{is_dns_label, is_dns_subdomain},
};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
    runtime::reflector::ObjectRef,
};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::decide::{self, HOOKS_API_VERSION, Refusal, Step};
use crate::{
    capi::Machine,
    context::{
        Context,
        updates::{MAX_TRACKED, Seen, Start, Target},
    },
    kkinstance::{failure::Failure, inputs::connect, task::overran},
    services::{HostCall, PhaseInput},
};

/// Seconds CAPI waits before asking again while an upgrade runs.
pub(crate) const RETRY_AFTER: i32 = 15;

/// Event reasons on the KKInstance.
pub(crate) use capkk_api::consts::events::{IN_PLACE_UPGRADE_FAILED, UPGRADED_IN_PLACE};

/// The answer to every request that does not match a Machine pending an in-place update: the same whether the
/// Machine is absent, unreadable, another one or not pending (no oracle of what exists in other namespaces).
pub(crate) const REFUSED: &str =
    "refused: the request does not match a Machine that Cluster API marked for an in-place update";

fn answer(status: &str, message: &str, retry: i32) -> Value {
    json!({
        "apiVersion": HOOKS_API_VERSION,
        "kind": "UpdateMachineResponse",
        "status": status,
        "message": message,
        "retryAfterSeconds": retry,
    })
}

/// The uniform refusal; the reason goes to the log only.
fn refused(ns: &str, name: &str, why: &str) -> Value {
    warn!(namespace = %ns, machine = %name, reason = %why, "UpdateMachine refused: the request does not match a Machine pending an in-place update");
    answer("Failure", REFUSED, 0)
}

/// The answer to one `UpdateMachine` call (starting the task when none runs).
pub(crate) async fn update_machine(ctx: Arc<Context>, req: &Value) -> Value {
    let requested = &req["desired"]["machine"];
    let ns = requested["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = requested["metadata"]["name"].as_str().unwrap_or_default();
    // Both become part of the request path of the read below.
    if !is_dns_label(ns) || !is_dns_subdomain(name) {
        return refused(ns, name, "the namespace or name is not a valid object name");
    }
    let stored = match Api::<Machine>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
    {
        Ok(Some(m)) => m,
        Ok(None) => return refused(ns, name, "no such Machine"),
        Err(e) => return refused(ns, name, &format!("reading the Machine: {e}")),
    };
    let version = match decide::matches_pending(requested, &stored) {
        Ok(v) => v,
        Err(Refusal::NotPending(why)) => return refused(ns, name, &why),
        Err(Refusal::NotInPlace(why)) => return answer("Failure", &why, 0),
    };
    if let Err(e) = capkk_service::binary::check_version("spec.version", &version) {
        return answer("Failure", &e.to_string(), 0);
    }
    let uid = stored.uid().unwrap_or_default();
    let machines = &ctx.stores.capi_machines;
    ctx.upgrades.sweep(|ns, name, uid| {
        machines
            .get(&ObjectRef::new(name).within(ns))
            .is_some_and(|m| m.uid().as_deref() == Some(uid))
    });
    match ctx.upgrades.seen(&uid, &version) {
        Seen::Done(m) => return answer("Success", &m, 0),
        Seen::Failed(m) => return answer("Failure", &m, 0),
        Seen::Running(s) => {
            return answer(
                "Success",
                &format!("upgrading to {version} over SSH for {s} s"),
                RETRY_AFTER,
            );
        }
        Seen::None => {}
    }
    let (ignore, patches) = match join_settings(&ctx, ns, &stored).await {
        Ok(v) => v,
        Err(e) => return answer("Failure", &e, 0),
    };
    let (inst, kkc) = match crate::machine_host::host_of(&ctx, ns, &stored).await {
        Ok(Ok(h)) => h,
        Ok(Err(why)) => return answer("Failure", &why, 0),
        Err(e) => return answer("Failure", &format!("reading the Machine's host: {e}"), 0),
    };
    match decide::host_step(inst.spec.kubernetes_version.as_deref(), &version) {
        Ok(Step::AlreadyAt(v)) => {
            return answer("Success", &format!("host {} runs {v} already", inst.spec.name), 0);
        }
        Ok(Step::Upgrade { .. }) => {}
        Err(Refusal::NotInPlace(why) | Refusal::NotPending(why)) => {
            return answer("Failure", &why, 0);
        }
    }
    let host = format!("{ns}/{}", inst.name_any());
    let target = Target {
        uid: &uid,
        ns,
        name,
        host: &host,
    };
    match ctx.upgrades.start(&target, &version) {
        Start::Started => {}
        Start::Busy => {
            return answer(
                "Success",
                &format!("an upgrade of host {} runs", inst.spec.name),
                RETRY_AFTER,
            );
        }
        Start::Full => {
            return answer(
                "Failure",
                &format!("{MAX_TRACKED} in-place upgrades are tracked already: try again later"),
                0,
            );
        }
        Start::Stopping => {
            return answer("Success", "the manager is stopping: ask again", RETRY_AFTER);
        }
    }
    info!(namespace = %ns, machine = %name, %uid, host = %inst.spec.name, %version, "Starting the in-place upgrade");
    let task_ctx = ctx.clone();
    let (u, v, ns, name) = (uid.clone(), version.clone(), ns.to_owned(), name.to_owned());
    let host_name = inst.spec.name.clone();
    ctx.upgrades.spawn(&uid, async move {
        // A slot of the hosts worked on at once, of the Machine's namespace's share; the work done holding
        // it is bounded like a KKInstance's phase.
        let _permit = task_ctx.tasks.permits.acquire(&ns).await;
        let limit = task_ctx.settings.max_host_phase_duration;
        let outcome = tokio::time::timeout(limit, run(&task_ctx, &inst, kkc.as_ref(), &v, ignore, patches))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "host {}: {}",
                    inst.spec.name,
                    overran(&format!("the in-place upgrade to {v}"), limit)
                ))
            });
        match &outcome {
            Ok(m) => {
                info!(namespace = %ns, machine = %name, host = %inst.spec.name, version = %v, "In-place upgrade done");
                task_ctx
                    .event(&inst, false, UPGRADED_IN_PLACE, "UpdateMachine", m.clone())
                    .await;
            }
            Err(m) => {
                warn!(namespace = %ns, machine = %name, host = %inst.spec.name, version = %v, error = %m, "In-place upgrade failed");
                task_ctx
                    .event(&inst, true, IN_PLACE_UPGRADE_FAILED, "UpdateMachine", m.clone())
                    .await;
            }
        }
        task_ctx.upgrades.finish(&u, &v, outcome);
    });
    answer(
        "Success",
        &format!("upgrading host {host_name} to {version} over SSH"),
        RETRY_AFTER,
    )
}

/// The kubeadm settings of the stored Machine's KubeadmConfig (`spec.bootstrap.configRef`), read from the API
/// server: the preflight checks its join ignored and its patches directory. None for a Machine without one
/// (bootstrap data given directly) or with another bootstrap provider's config.
async fn join_settings(
    ctx: &Context,
    ns: &str,
    machine: &Machine,
) -> Result<(Vec<String>, Option<String>), String> {
    let Some(r) = machine.spec.bootstrap.config_ref.as_ref() else {
        return Ok((Vec::new(), None));
    };
    if r.kind != KUBEADM_CONFIG || (!r.api_group.is_empty() && r.api_group != BOOTSTRAP_GROUP) {
        return Ok((Vec::new(), None));
    }
    if !is_dns_subdomain(&r.name) {
        return Err(format!(
            "Machine spec.bootstrap.configRef.name {:?} is not a valid object name",
            r.name
        ));
    }
    let gvk = GroupVersionKind::gvk(BOOTSTRAP_GROUP, "v1beta2", KUBEADM_CONFIG);
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ApiResource::from_gvk(&gvk));
    let config = match api.get_opt(&r.name).await {
        Ok(Some(c)) => c,
        Ok(None) => return Err(format!("KubeadmConfig {} not found", r.name)),
        Err(e) => return Err(format!("reading KubeadmConfig {}: {e}", r.name)),
    };
    let config = serde_json::to_value(&config).unwrap_or_default();
    Ok((ignored_preflight_errors(&config)?, patches_dir(&config)?))
}

/// CABPK's group and bootstrap config kind.
const BOOTSTRAP_GROUP: &str = "bootstrap.cluster.x-k8s.io";
const KUBEADM_CONFIG: &str = "KubeadmConfig";

/// Journal lines of an upgrade go to the log (the KKInstance's events keep the outcome).
struct LogProgress;

impl capkk_service::journal::Progress for LogProgress {
    fn step_started(&self, _: &str, _: usize, _: usize, _: &str) {}
    fn step_finished(&self, r: &capkk_service::journal::StepRecord) {
        info!(step = %r.name, exit_code = ?r.exit_code, took = ?r.duration, "Upgrade step finished");
    }
}

/// The preflight checks the KubeadmConfig's join configuration ignores: the node was joined ignoring them (e.g.
/// `SystemVerification` on a cgroup v1 host), and `kubeadm upgrade node` runs the same checks. Only names in
/// kubeadm's spelling pass (they reach the host's command line).
fn ignored_preflight_errors(config: &Value) -> Result<Vec<String>, String> {
    const FIELD: &str = "KubeadmConfig spec.joinConfiguration.nodeRegistration.ignorePreflightErrors";
    let v = &config["spec"]["joinConfiguration"]["nodeRegistration"]["ignorePreflightErrors"];
    let names: Vec<String> = match v {
        Value::Null => Vec::new(),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{FIELD}: not a list of strings"))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(format!("{FIELD}: not a list of strings")),
    };
    capkk_service::upgrade::check_preflight_errors(FIELD, &names).map_err(|e| e.to_string())?;
    Ok(names)
}

/// The KubeadmConfig's join patches directory: the node's `kubeletconfiguration` patches (e.g.
/// `failCgroupV1: false`), which `kubeadm upgrade node` applies again only when told where they are.
fn patches_dir(config: &Value) -> Result<Option<String>, String> {
    const FIELD: &str = "KubeadmConfig spec.joinConfiguration.patches.directory";
    match &config["spec"]["joinConfiguration"]["patches"]["directory"] {
        Value::Null => Ok(None),
        Value::String(d) if d.is_empty() => Ok(None),
        Value::String(d) => capkk_service::upgrade::check_patches_dir(FIELD, d)
            .map(|()| Some(d.clone()))
            .map_err(|e| e.to_string()),
        _ => Err(format!("{FIELD}: not a string")),
    }
}

async fn run(
    ctx: &Context,
    inst: &KKInstance,
    kkc: Option<&capkk_api::KKCluster>,
    version: &str,
    ignore_preflight_errors: Vec<String>,
    patches_dir: Option<String>,
) -> Result<String, String> {
    let exec = connect(ctx, inst, kkc)
        .await
        .map_err(|f| match f {
            Failure::Transient(m) => format!("host {} unreachable: {m}", inst.spec.name),
            Failure::Terminal { message, .. } => message,
        })?
        .exec;
    let mut spec = inst.spec.clone();
    spec.kubernetes_version = Some(version.to_owned());
    let input = PhaseInput {
        instance: spec,
        cluster: kkc.map(|c| c.spec.clone()),
        ignore_preflight_errors,
        patches_dir,
        ..Default::default()
    };
    let host = HostCall {
        exec: &*exec,
        input: &input,
        progress: &LogProgress,
    };
    let message = ctx
        .services
        .upgrade(host)
        .await
        .map_err(|e| format!("host {}: {e}", inst.spec.name))?;
    // What the host runs now; the KKInstance is provisioned, so no phase runs again because of this.
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
    api.patch(
        &inst.name_any(),
        &PatchParams::default(),
        &Patch::Merge(upgraded_record(inst, version)),
    )
    .await
    .map_err(|e| format!("recording {version} in KKInstance {}: {e}", inst.name_any()))?;
    Ok(message)
}

/// The merge patch recording that `inst`'s host now runs `version`. The container runtime is not upgraded in
/// place: the first upgrade also records the version whose defaults it was installed with
/// ([`RUNTIME_VERSION_ANNOTATION`]), later ones keep it.
fn upgraded_record(inst: &KKInstance, version: &str) -> serde_json::Value {
    let mut patch = json!({"spec": {"kubernetesVersion": version}});
    let recorded = inst
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(RUNTIME_VERSION_ANNOTATION));
    if let (false, Some(installed)) = (recorded, inst.spec.kubernetes_version.as_deref()) {
        patch["metadata"] = json!({"annotations": {RUNTIME_VERSION_ANNOTATION: installed}});
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_in_place_upgrade_records_the_version_the_runtime_was_installed_for_and_later_ones_keep_it() {
        let mut inst = KKInstance::new("c.h1", Default::default());
        inst.spec.kubernetes_version = Some("v1.35.4".into());
        let first = upgraded_record(&inst, "v1.36.3");
        assert_eq!(
            first,
            json!({"spec": {"kubernetesVersion": "v1.36.3"},
                   "metadata": {"annotations": {RUNTIME_VERSION_ANNOTATION: "v1.35.4"}}})
        );
        inst.spec.kubernetes_version = Some("v1.36.3".into());
        inst.metadata.annotations =
            Some([(RUNTIME_VERSION_ANNOTATION.to_owned(), "v1.35.4".to_owned())].into());
        assert_eq!(
            upgraded_record(&inst, "v1.37.0"),
            json!({"spec": {"kubernetesVersion": "v1.37.0"}}),
            "a second upgrade keeps what the runtime was installed for"
        );
    }

    #[test]
    fn the_upgrade_ignores_the_preflight_checks_the_nodes_kubeadm_config_ignored_and_refuses_other_spellings()
    {
        let config = |v: Value| json!({"spec": {"joinConfiguration": {"nodeRegistration": {"ignorePreflightErrors": v}}}});
        assert_eq!(ignored_preflight_errors(&json!({"spec": {}})), Ok(vec![]));
        assert_eq!(
            ignored_preflight_errors(&config(json!([
                "SystemVerification",
                "FileAvailable--etc-kubernetes-kubelet.conf"
            ]))),
            Ok(vec![
                "SystemVerification".into(),
                "FileAvailable--etc-kubernetes-kubelet.conf".into()
            ])
        );
        for bad in [
            json!(["x; reboot"]),
            json!(["--dry-run"]),
            json!("SystemVerification"),
            json!([1]),
        ] {
            let e = ignored_preflight_errors(&config(bad.clone())).unwrap_err();
            assert!(e.contains("ignorePreflightErrors"), "{bad}: {e}");
        }
        let patches = |v: Value| json!({"spec": {"joinConfiguration": {"patches": {"directory": v}}}});
        assert_eq!(patches_dir(&json!({})), Ok(None));
        assert_eq!(
            patches_dir(&patches(json!("/etc/kubeadm-patches"))),
            Ok(Some("/etc/kubeadm-patches".into()))
        );
        for bad in [json!("etc"), json!("/a/../etc"), json!("/a;reboot"), json!(3)] {
            let e = patches_dir(&patches(bad.clone())).unwrap_err();
            assert!(e.contains("patches.directory"), "{bad}: {e}");
        }
    }

    #[test]
    fn answers_carry_capis_retry_semantics() {
        let a = answer("Success", "upgrading", RETRY_AFTER);
        assert_eq!(a["kind"], "UpdateMachineResponse");
        assert_eq!(a["retryAfterSeconds"], RETRY_AFTER, "in progress");
        assert_eq!(answer("Success", "done", 0)["retryAfterSeconds"], 0, "done");
        assert_eq!(answer("Failure", "x", 0)["status"], "Failure");
        let r = refused("other-tenant", "their-machine", "no such Machine");
        assert_eq!(r["status"], "Failure");
        assert_eq!(r["message"], REFUSED, "the same answer whatever the reason");
        assert!(!REFUSED.contains("not found"));
    }
}
