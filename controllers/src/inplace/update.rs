//! `UpdateMachine`: the in-place upgrade of a worker's host, as a background task per Machine. CAPI calls the
//! hook until it reports done; each call answers from the task's state, so a call never waits on the host:
//!
//! | task of this Machine and version | answer |
//! |---|---|
//! | none | the task starts; `Success`, `retryAfterSeconds` [`RETRY_AFTER`] (in progress) |
//! | running | `Success`, `retryAfterSeconds` [`RETRY_AFTER`] |
//! | done | `Success`, `retryAfterSeconds` 0 (CAPI completes the update) |
//! | failed | `Failure` with the reason (CAPI calls again later; that call starts a new attempt) |
//!
//! The task connects to the KKMachine's host, runs [`HostServices::upgrade`](crate::services::HostServices)
//! (the version's binaries, `kubeadm upgrade node`, a kubelet restart), then records the new version in the
//! KKInstance's `spec.kubernetesVersion` and publishes an event on it. A restarted manager has no tasks: the
//! next call runs the upgrade again, which finds everything in place.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use capkk_api::KKInstance;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::decide::HOOKS_API_VERSION;
use crate::{
    capi::Machine,
    context::Context,
    kkinstance::{failure::Failure, inputs::connect},
    services::{HostCall, PhaseInput},
};

/// Seconds CAPI waits before asking again while an upgrade runs.
pub(crate) const RETRY_AFTER: i32 = 15;

/// Event reasons on the KKInstance.
pub(crate) const UPGRADED_IN_PLACE: &str = "UpgradedInPlace";
/// Event reason of a failed attempt.
pub(crate) const IN_PLACE_UPGRADE_FAILED: &str = "InPlaceUpgradeFailed";

#[derive(Debug)]
enum State {
    Running(Instant),
    Done(String),
    Failed(String),
}

/// The upgrade tasks, by Machine (`namespace/name`), with the version each one is for.
#[derive(Debug, Default)]
pub(crate) struct Updates {
    tasks: Mutex<HashMap<String, (String, State)>>,
}

/// What a call finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Nothing for this version: start one.
    None,
    /// Running for this long (seconds).
    Running(u64),
    /// Done, with what happened.
    Done(String),
    /// Failed (forgotten now: the next call starts a new attempt).
    Failed(String),
}

impl Updates {
    /// The state of `key`'s upgrade to `version`; a failure is reported once and forgotten.
    pub(crate) fn seen(&self, key: &str, version: &str) -> Seen {
        let Ok(mut t) = self.tasks.lock() else {
            return Seen::None;
        };
        match t.get(key) {
            Some((v, State::Running(at))) if v == version => Seen::Running(at.elapsed().as_secs()),
            Some((v, State::Done(m))) if v == version => Seen::Done(m.clone()),
            Some((v, State::Failed(m))) if v == version => {
                let m = m.clone();
                t.remove(key);
                Seen::Failed(m)
            }
            _ => Seen::None,
        }
    }

    /// Mark `key` running for `version`; false when a task of it runs already (for any version).
    pub(crate) fn start(&self, key: &str, version: &str) -> bool {
        let Ok(mut t) = self.tasks.lock() else {
            return false;
        };
        if matches!(t.get(key), Some((_, State::Running(_)))) {
            return false;
        }
        t.insert(
            key.to_owned(),
            (version.to_owned(), State::Running(Instant::now())),
        );
        true
    }

    fn finish(&self, key: &str, version: &str, outcome: Result<String, String>) {
        if let Ok(mut t) = self.tasks.lock() {
            let s = match outcome {
                Ok(m) => State::Done(m),
                Err(m) => State::Failed(m),
            };
            t.insert(key.to_owned(), (version.to_owned(), s));
        }
    }
}

fn answer(status: &str, message: &str, retry: i32) -> Value {
    json!({
        "apiVersion": HOOKS_API_VERSION,
        "kind": "UpdateMachineResponse",
        "status": status,
        "message": message,
        "retryAfterSeconds": retry,
    })
}

/// The answer to one `UpdateMachine` call (starting the task when none runs).
pub(crate) async fn update_machine(ctx: Arc<Context>, req: &Value) -> Value {
    let machine: Machine = match serde_json::from_value(req["desired"]["machine"].clone()) {
        Ok(m) => m,
        Err(e) => return answer("Failure", &format!("desired.machine is not a Machine: {e}"), 0),
    };
    let ns = machine.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", machine.name_any());
    let Some(version) = machine.spec.version.clone().filter(|v| !v.is_empty()) else {
        return answer("Failure", &format!("Machine {key} has no spec.version"), 0);
    };
    if let Err(e) = capkk_service::binary::check_version("spec.version", &version) {
        return answer("Failure", &e.to_string(), 0);
    }
    let ignore = match ignored_preflight_errors(req) {
        Ok(v) => v,
        Err(e) => return answer("Failure", &e, 0),
    };
    let patches = match patches_dir(req) {
        Ok(v) => v,
        Err(e) => return answer("Failure", &e, 0),
    };
    match ctx.upgrades.seen(&key, &version) {
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
    let (inst, kkc) = match crate::kkremediation::host_of(&ctx, &ns, &machine).await {
        Ok(Ok(h)) => h,
        Ok(Err(why)) => return answer("Failure", &why, 0),
        Err(e) => return answer("Failure", &format!("reading the Machine's host: {e}"), 0),
    };
    if !ctx.upgrades.start(&key, &version) {
        return answer("Success", "an upgrade of this Machine runs", RETRY_AFTER);
    }
    info!(machine = %key, host = %inst.spec.name, %version, "Starting the in-place upgrade");
    let task_ctx = ctx.clone();
    let (k, v) = (key.clone(), version.clone());
    tokio::spawn(async move {
        // A slot of the hosts worked on at once, of the Machine's namespace's share.
        let _permit = task_ctx.tasks.permits.acquire(&ns).await;
        let outcome = run(&task_ctx, &inst, kkc.as_ref(), &v, ignore, patches).await;
        match &outcome {
            Ok(m) => {
                info!(machine = %k, host = %inst.spec.name, version = %v, "In-place upgrade done");
                task_ctx
                    .event(&inst, false, UPGRADED_IN_PLACE, "UpdateMachine", m.clone())
                    .await;
            }
            Err(m) => {
                warn!(machine = %k, host = %inst.spec.name, version = %v, error = %m, "In-place upgrade failed");
                task_ctx
                    .event(&inst, true, IN_PLACE_UPGRADE_FAILED, "UpdateMachine", m.clone())
                    .await;
            }
        }
        task_ctx.upgrades.finish(&k, &v, outcome);
    });
    answer(
        "Success",
        &format!("upgrading host {} to {version} over SSH", inst_name(&key)),
        RETRY_AFTER,
    )
}

/// Journal lines of an upgrade go to the log (the KKInstance's events keep the outcome).
struct LogProgress;

impl capkk_service::journal::Progress for LogProgress {
    fn step_started(&self, _: &str, _: usize, _: usize, _: &str) {}
    fn step_finished(&self, r: &capkk_service::journal::StepRecord) {
        info!(step = %r.name, exit_code = ?r.exit_code, took = ?r.duration, "Upgrade step finished");
    }
}

fn inst_name(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

/// The preflight checks the desired KubeadmConfig's join configuration ignores: the node was joined ignoring them
/// (e.g. `SystemVerification` on a cgroup v1 host), and `kubeadm upgrade node` runs the same checks. Only names
/// in kubeadm's spelling pass (they reach the host's command line).
fn ignored_preflight_errors(req: &Value) -> Result<Vec<String>, String> {
    const FIELD: &str =
        "desired.bootstrapConfig.spec.joinConfiguration.nodeRegistration.ignorePreflightErrors";
    let v = &req["desired"]["bootstrapConfig"]["spec"]["joinConfiguration"]["nodeRegistration"]["ignorePreflightErrors"];
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

/// The desired KubeadmConfig's join patches directory: the node's `kubeletconfiguration` patches (e.g.
/// `failCgroupV1: false`), which `kubeadm upgrade node` applies again only when told where they are.
fn patches_dir(req: &Value) -> Result<Option<String>, String> {
    const FIELD: &str = "desired.bootstrapConfig.spec.joinConfiguration.patches.directory";
    match &req["desired"]["bootstrapConfig"]["spec"]["joinConfiguration"]["patches"]["directory"] {
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
        &Patch::Merge(json!({"spec": {"kubernetesVersion": version}})),
    )
    .await
    .map_err(|e| format!("recording {version} in KKInstance {}: {e}", inst.name_any()))?;
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_upgrade_is_not_started_twice_a_failure_is_reported_once_and_done_stays_done() {
        let u = Updates::default();
        assert_eq!(u.seen("ns/m", "v1.36.3"), Seen::None);
        assert!(u.start("ns/m", "v1.36.3"));
        assert!(!u.start("ns/m", "v1.36.3"), "one task per Machine");
        assert!(matches!(u.seen("ns/m", "v1.36.3"), Seen::Running(_)));
        assert_eq!(
            u.seen("ns/m", "v1.37.0"),
            Seen::None,
            "another version is another upgrade"
        );
        u.finish("ns/m", "v1.36.3", Err("kubeadm upgrade node exited 1".into()));
        assert_eq!(
            u.seen("ns/m", "v1.36.3"),
            Seen::Failed("kubeadm upgrade node exited 1".into())
        );
        assert_eq!(
            u.seen("ns/m", "v1.36.3"),
            Seen::None,
            "the next call starts a new attempt"
        );
        assert!(u.start("ns/m", "v1.36.3"));
        u.finish("ns/m", "v1.36.3", Ok("done".into()));
        assert_eq!(u.seen("ns/m", "v1.36.3"), Seen::Done("done".into()));
        assert_eq!(u.seen("ns/m", "v1.36.3"), Seen::Done("done".into()));
    }

    #[test]
    fn the_upgrade_ignores_the_preflight_checks_the_nodes_join_ignored_and_refuses_other_spellings() {
        let req = |v: Value| {
            json!({"desired": {"bootstrapConfig": {"spec": {"joinConfiguration": {"nodeRegistration":
                {"ignorePreflightErrors": v}}}}}})
        };
        assert_eq!(ignored_preflight_errors(&json!({"desired": {}})), Ok(vec![]));
        assert_eq!(
            ignored_preflight_errors(&req(json!([
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
            let e = ignored_preflight_errors(&req(bad.clone())).unwrap_err();
            assert!(e.contains("ignorePreflightErrors"), "{bad}: {e}");
        }
        let patches = |v: Value| json!({"desired": {"bootstrapConfig": {"spec": {"joinConfiguration": {"patches": {"directory": v}}}}}});
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
    }
}
