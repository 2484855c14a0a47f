//! The answers of `CanUpdateMachine` and `CanUpdateMachineSet`: pure functions of the request, table-tested
//! below; and what `UpdateMachine` acts on: a request matching a Machine that the API server stores with CAPI's
//! pending-update marker ([`matches_pending`]), a step `CanUpdateMachine` allows ([`host_step`]).
//!
//! In place means: a worker, the Kubernetes version and nothing else changes (beyond the fields CAPI itself
//! leaves out of its comparison), and the change is an upgrade of at most one minor version (kubeadm upgrades
//! a node one minor at a time). Then the answer carries the patch CAPI requires: a JSON patch setting the
//! current object's version to the desired one, so that the patched current equals the desired. Anything else
//! is answered with no patch, and CAPI falls back to a rollout (new Machine, new host). "No" is a successful
//! answer: `Failure` would stop CAPI's planning instead of falling back.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::capi::Machine;

/// The label CAPI puts on control-plane Machines.
pub(crate) const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";

/// The hooks' API version.
pub(crate) const HOOKS_API_VERSION: &str = "hooks.runtime.cluster.x-k8s.io/v1alpha1";

/// What can be done in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The version changes from `from` to `to`, nothing else: done in place.
    Upgrade {
        /// The current version.
        from: String,
        /// The desired version.
        to: String,
    },
    /// Not in place, and why (CAPI rolls out instead).
    No(String),
}

/// `vMAJOR.MINOR.PATCH` (a leading `v` optional; pre-release and build suffixes ignored for the order).
fn parse(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.strip_prefix('v').unwrap_or(v);
    let core = core.split(['-', '+']).next()?;
    let mut it = core.split('.').map(|p| p.parse::<u64>().ok());
    let t = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(t)
}

/// The fields of a Machine spec CAPI leaves out of its in-place comparison (they never need an update, or
/// are propagated without one), removed here so that they never turn an answer into "no".
fn comparable(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(o) = s.as_object_mut() {
        for k in [
            "clusterName",
            "bootstrap",
            "infrastructureRef",
            "providerID",
            "minReadySeconds",
            "readinessGates",
            "taints",
        ] {
            o.remove(k);
        }
        if let Some(d) = o.get_mut("deletion").and_then(Value::as_object_mut) {
            for k in [
                "nodeDrainTimeoutSeconds",
                "nodeVolumeDetachTimeoutSeconds",
                "nodeDeletionTimeoutSeconds",
            ] {
                d.remove(k);
            }
        }
        if o.get("deletion")
            .and_then(Value::as_object)
            .is_some_and(|d| d.is_empty())
        {
            o.remove("deletion");
        }
    }
    s
}

/// The top-level keys that differ between two objects (for the "no" message).
fn differing(a: &Value, b: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let (a, b) = (a.as_object().unwrap_or(&empty), b.as_object().unwrap_or(&empty));
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Whether `current` → `desired` Machine specs (or MachineSet `spec.template.spec`s) can be done in place.
pub(crate) fn version_change(current: &Value, desired: &Value) -> Answer {
    let (mut c, mut d) = (comparable(current), comparable(desired));
    let from = c
        .as_object_mut()
        .and_then(|o| o.remove("version"))
        .and_then(|v| v.as_str().map(str::to_owned));
    let to = d
        .as_object_mut()
        .and_then(|o| o.remove("version"))
        .and_then(|v| v.as_str().map(str::to_owned));
    let others = differing(&c, &d);
    if !others.is_empty() {
        return Answer::No(format!(
            "spec fields other than version change ({}): only a version change is done in place",
            others.join(", ")
        ));
    }
    let (Some(from), Some(to)) = (from, to) else {
        return Answer::No("the current or the desired version is not set".into());
    };
    version_step(from, to)
}

/// Whether a node at `from` can be upgraded in place to `to`: an upgrade of at most one minor version.
pub(crate) fn version_step(from: String, to: String) -> Answer {
    if from == to {
        return Answer::No(format!("the version stays {to}: nothing to do in place"));
    }
    let (Some(f), Some(t)) = (parse(&from), parse(&to)) else {
        return Answer::No(format!("{from} -> {to}: not both of the form vMAJOR.MINOR.PATCH"));
    };
    if t < f {
        return Answer::No(format!(
            "{from} -> {to} is a downgrade: kubeadm does not downgrade a node"
        ));
    }
    if t.0 != f.0 || t.1 > f.1 + 1 {
        return Answer::No(format!(
            "{from} -> {to} skips a minor version: kubeadm upgrades a node one minor at a time"
        ));
    }
    Answer::Upgrade { from, to }
}

/// Whether two objects' specs at `path` are equal (absent on both counts as equal).
fn same_at(a: &Value, b: &Value, path: &[&str]) -> bool {
    let at = |v: &Value| path.iter().try_fold(v, |v, k| v.get(*k)).cloned();
    at(a) == at(b)
}

/// A JSON patch for CAPI's `*Patch` fields: `patch` is `[]byte` in Go, so base64 in JSON.
fn json_patch(ops: &Value) -> Value {
    json!({
        "patchType": "JSONPatch",
        "patch": base64::engine::general_purpose::STANDARD.encode(ops.to_string()),
    })
}

fn response(kind: &str, message: &str) -> Value {
    json!({
        "apiVersion": HOOKS_API_VERSION,
        "kind": kind,
        "status": "Success",
        "message": message,
    })
}

fn is_control_plane(meta: Option<&Value>) -> bool {
    meta.and_then(|m| m.get("labels"))
        .and_then(|l| l.get(CONTROL_PLANE_LABEL))
        .is_some()
}

/// The `CanUpdateMachineSet` answer (and the decision, for logs and tests).
pub(crate) fn can_update_machine_set(req: &Value) -> (Value, Answer) {
    let cur = &req["current"];
    let des = &req["desired"];
    let answer = if is_control_plane(cur["machineSet"]["spec"]["template"].get("metadata")) {
        Answer::No("control-plane Machines are not updated in place".into())
    } else if !same_at(
        &cur["infrastructureMachineTemplate"],
        &des["infrastructureMachineTemplate"],
        &["spec", "template", "spec"],
    ) {
        Answer::No("the KKMachineTemplate changes: not done in place".into())
    } else if !same_at(
        &cur["bootstrapConfigTemplate"],
        &des["bootstrapConfigTemplate"],
        &["spec", "template", "spec"],
    ) {
        Answer::No("the bootstrap config template changes: not done in place".into())
    } else {
        version_change(
            &cur["machineSet"]["spec"]["template"]["spec"],
            &des["machineSet"]["spec"]["template"]["spec"],
        )
    };
    let mut resp = response("CanUpdateMachineSetResponse", &message(&answer));
    if let Answer::Upgrade { to, .. } = &answer {
        resp["machineSetPatch"] = json_patch(&json!([
            {"op": "replace", "path": "/spec/template/spec/version", "value": to}
        ]));
    }
    (resp, answer)
}

/// The `CanUpdateMachine` answer (and the decision). CAPI calls it for control-plane Machines (KCP), which
/// are never updated in place here: the answer is then always "no".
pub(crate) fn can_update_machine(req: &Value) -> (Value, Answer) {
    let cur = &req["current"];
    let des = &req["desired"];
    // The KKMachine's claim fields are ours, set after the template was applied: not a change.
    let kkmachine_spec = |v: &Value| {
        let mut s = v["infrastructureMachine"]["spec"].clone();
        if let Some(o) = s.as_object_mut() {
            o.remove("instanceID");
            o.remove("providerID");
        }
        s
    };
    let answer = if is_control_plane(cur["machine"].get("metadata")) {
        Answer::No("control-plane Machines are not updated in place".into())
    } else if kkmachine_spec(cur) != kkmachine_spec(des) {
        Answer::No("the KKMachine changes: not done in place".into())
    } else if !same_at(&cur["bootstrapConfig"], &des["bootstrapConfig"], &["spec"]) {
        Answer::No("the bootstrap config changes: not done in place".into())
    } else {
        version_change(&cur["machine"]["spec"], &des["machine"]["spec"])
    };
    let mut resp = response("CanUpdateMachineResponse", &message(&answer));
    if let Answer::Upgrade { to, .. } = &answer {
        resp["machinePatch"] = json_patch(&json!([
            {"op": "replace", "path": "/spec/version", "value": to}
        ]));
    }
    (resp, answer)
}

/// The annotation CAPI (v1.14) puts on a Machine, its InfraMachine and its BootstrapConfig when it starts an
/// in-place update, and removes when `UpdateMachine` reported done.
pub(crate) const UPDATE_IN_PROGRESS_ANNOTATION: &str =
    "in-place-updates.internal.cluster.x-k8s.io/update-in-progress";
/// CAPI's list of the hooks still to call for an object (comma-separated hook names).
pub(crate) const PENDING_HOOKS_ANNOTATION: &str = "runtime.cluster.x-k8s.io/pending-hooks";
/// The hook name CAPI lists in [`PENDING_HOOKS_ANNOTATION`] while an in-place update waits for us.
pub(crate) const UPDATE_MACHINE_HOOK: &str = "UpdateMachine";

/// Why an `UpdateMachine` request is not acted on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The request does not match a Machine that CAPI has marked for an in-place update (absent, another UID,
    /// no marker, another version, being deleted). The caller gets one uniform answer whatever the reason (not
    /// an oracle of which Machines exist); the reason goes to the manager's log only.
    NotPending(String),
    /// The stored Machine is pending, but the change is not one done in place (what `CanUpdateMachine` refuses:
    /// a control-plane Machine, a downgrade, a skipped minor): answered with the reason.
    NotInPlace(String),
}

/// What an `UpdateMachine` request that matches its stored Machine asks of the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The host records this version already: done, nothing to run.
    AlreadyAt(String),
    /// Upgrade the host in place.
    Upgrade {
        /// The version the host records.
        from: String,
        /// The stored Machine's `spec.version`.
        to: String,
    },
}

/// Whether the `UpdateMachine` request's `desired.machine` (`requested`, from the caller, which is not
/// authenticated) matches `stored`, the Machine read from the API server by the request's namespace and name.
/// The stored Machine decides: it must carry CAPI's own pending-update marker (the update-in-progress
/// annotation and `UpdateMachine` in its pending hooks, which only CAPI or who can edit that Machine sets), not
/// be deleting, have the requested UID (when the request names one: CAPI's requests carry none) and the
/// requested `spec.version`. Returns the version to upgrade to.
pub(crate) fn matches_pending(requested: &Value, stored: &Machine) -> Result<String, Refusal> {
    let no = |why: &str| Err(Refusal::NotPending(why.to_owned()));
    if stored.metadata.deletion_timestamp.is_some() {
        return no("the Machine is being deleted");
    }
    if let Some(uid) = requested["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
        && stored.metadata.uid.as_deref() != Some(uid)
    {
        return no("the request's UID is not the stored Machine's");
    }
    let ann = stored.metadata.annotations.as_ref();
    if !ann.is_some_and(|a| a.contains_key(UPDATE_IN_PROGRESS_ANNOTATION)) {
        return no("the stored Machine has no in-place update in progress");
    }
    let pending = ann
        .and_then(|a| a.get(PENDING_HOOKS_ANNOTATION))
        .map(String::as_str)
        .unwrap_or_default();
    if !pending.split(',').any(|h| h.trim() == UPDATE_MACHINE_HOOK) {
        return no("the stored Machine has no UpdateMachine hook pending");
    }
    let Some(version) = stored.spec.version.clone().filter(|v| !v.is_empty()) else {
        return no("the stored Machine has no spec.version");
    };
    if requested["spec"]["version"].as_str() != Some(version.as_str()) {
        return no("the requested version is not the stored Machine's spec.version");
    }
    if is_control_plane_machine(stored) {
        return Err(Refusal::NotInPlace(
            "control-plane Machines are not updated in place".into(),
        ));
    }
    Ok(version)
}

fn is_control_plane_machine(m: &Machine) -> bool {
    m.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL))
}

/// What upgrading a host that records `host_version` (its KKInstance's `spec.kubernetesVersion`) to `to` means:
/// nothing when it records `to` already, an upgrade when `CanUpdateMachine` would allow it (at most one minor,
/// never down), else a refusal with `CanUpdateMachine`'s reason.
pub(crate) fn host_step(host_version: Option<&str>, to: &str) -> Result<Step, Refusal> {
    let Some(from) = host_version.filter(|v| !v.is_empty()) else {
        return Err(Refusal::NotInPlace(
            "the host's current Kubernetes version is not recorded (KKInstance spec.kubernetesVersion)"
                .into(),
        ));
    };
    if from == to {
        return Ok(Step::AlreadyAt(to.to_owned()));
    }
    match version_step(from.to_owned(), to.to_owned()) {
        Answer::Upgrade { from, to } => Ok(Step::Upgrade { from, to }),
        Answer::No(why) => Err(Refusal::NotInPlace(why)),
    }
}

fn message(a: &Answer) -> String {
    match a {
        Answer::Upgrade { from, to } => {
            format!("{from} -> {to} in place: new binaries, kubeadm upgrade node, kubelet restart")
        }
        Answer::No(why) => why.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms_request(cur_version: &str, des_version: &str) -> Value {
        let ms = |v: &str, name: &str| {
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"clusterName": "c1", "replicas": 1, "template": {
                    "metadata": {"labels": {"cluster.x-k8s.io/deployment-name": "md"}},
                    "spec": {"clusterName": "c1", "version": v,
                        "bootstrap": {"configRef": {"name": name, "kind": "KubeadmConfigTemplate", "apiGroup": "bootstrap.cluster.x-k8s.io"}},
                        "infrastructureRef": {"name": "t", "kind": "KKMachineTemplate", "apiGroup": "infrastructure.cluster.x-k8s.io"}}}}
            })
        };
        let tpl = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "KKMachineTemplate",
            "metadata": {"name": "t"}, "spec": {"template": {"spec": {"roles": ["worker"]}}}});
        let bct = json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "b"}, "spec": {"template": {"spec": {"joinConfiguration": {}}}}});
        json!({
            "apiVersion": HOOKS_API_VERSION, "kind": "CanUpdateMachineSetRequest",
            "current": {"machineSet": ms(cur_version, "ms-old"), "infrastructureMachineTemplate": tpl, "bootstrapConfigTemplate": bct},
            "desired": {"machineSet": ms(des_version, "ms-new"), "infrastructureMachineTemplate": tpl, "bootstrapConfigTemplate": bct},
        })
    }

    /// Applies the answer's JSON patch the way CAPI does (to the whole current object, then compares
    /// `spec.template.spec` after its clean-up): the patched current must equal the desired.
    fn patched_matches(req: &Value, resp: &Value) -> bool {
        let b64 = resp["machineSetPatch"]["patch"].as_str().unwrap();
        let ops: Value =
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap();
        let mut cur = req["current"]["machineSet"].clone();
        for op in ops.as_array().unwrap() {
            assert_eq!(op["op"], "replace");
            let path: Vec<&str> = op["path"]
                .as_str()
                .unwrap()
                .trim_start_matches('/')
                .split('/')
                .collect();
            let mut at = &mut cur;
            for k in &path[..path.len() - 1] {
                at = at.get_mut(*k).unwrap();
            }
            at[path[path.len() - 1]] = op["value"].clone();
        }
        comparable(&cur["spec"]["template"]["spec"])
            == comparable(&req["desired"]["machineSet"]["spec"]["template"]["spec"])
    }

    #[test]
    fn a_worker_version_bump_of_one_minor_is_done_in_place_with_the_patch_capi_applies() {
        for (from, to) in [
            ("v1.35.2", "v1.36.3"),
            ("v1.36.0", "v1.36.3"),
            ("1.35.0", "1.36.0"),
        ] {
            let req = ms_request(from, to);
            let (resp, answer) = can_update_machine_set(&req);
            assert_eq!(
                answer,
                Answer::Upgrade {
                    from: from.into(),
                    to: to.into()
                }
            );
            assert_eq!(resp["kind"], "CanUpdateMachineSetResponse");
            assert_eq!(resp["status"], "Success");
            assert_eq!(resp["machineSetPatch"]["patchType"], "JSONPatch");
            assert!(patched_matches(&req, &resp), "{resp}");
            assert!(resp.get("infrastructureMachineTemplatePatch").is_none());
        }
    }

    #[test]
    fn downgrades_minor_skips_and_unparsable_versions_fall_back_to_a_rollout() {
        for (from, to, why) in [
            ("v1.36.3", "v1.35.2", "downgrade"),
            ("v1.34.1", "v1.36.3", "skips a minor"),
            ("v1.36.3", "v2.0.0", "skips a minor"),
            ("v1.36", "v1.37.0", "not both"),
        ] {
            let (resp, answer) = can_update_machine_set(&ms_request(from, to));
            let Answer::No(m) = answer else {
                panic!("{from} -> {to} answered in place")
            };
            assert!(m.contains(why), "{from} -> {to}: {m}");
            assert_eq!(resp["status"], "Success", "no is an answer, not a failure");
            assert!(resp.get("machineSetPatch").is_none());
        }
    }

    #[test]
    fn any_change_besides_the_version_falls_back_to_a_rollout_and_names_the_field() {
        let mut req = ms_request("v1.35.2", "v1.36.3");
        req["desired"]["machineSet"]["spec"]["template"]["spec"]["failureDomain"] = json!("zone-b");
        let (_, a) = can_update_machine_set(&req);
        assert_eq!(
            a,
            Answer::No("spec fields other than version change (failureDomain): only a version change is done in place".into())
        );
        let mut req = ms_request("v1.35.2", "v1.36.3");
        req["desired"]["infrastructureMachineTemplate"]["spec"]["template"]["spec"]["roles"] =
            json!(["worker", "etcd"]);
        assert!(matches!(can_update_machine_set(&req).1, Answer::No(m) if m.contains("KKMachineTemplate")));
        let mut req = ms_request("v1.35.2", "v1.36.3");
        req["desired"]["bootstrapConfigTemplate"]["spec"]["template"]["spec"]["joinConfiguration"] =
            json!({"nodeRegistration": {"name": "x"}});
        assert!(
            matches!(can_update_machine_set(&req).1, Answer::No(m) if m.contains("bootstrap config template"))
        );
    }

    #[test]
    fn fields_capi_propagates_without_a_rollout_do_not_block_an_in_place_answer() {
        let mut req = ms_request("v1.35.2", "v1.36.3");
        let d = &mut req["desired"]["machineSet"]["spec"]["template"]["spec"];
        d["minReadySeconds"] = json!(30);
        d["taints"] = json!([{"key": "k", "effect": "NoSchedule"}]);
        d["deletion"] = json!({"nodeDrainTimeoutSeconds": 60});
        d["infrastructureRef"]["name"] = json!("t2");
        assert!(matches!(can_update_machine_set(&req).1, Answer::Upgrade { .. }));
    }

    fn machine_request(labels: Value, from: &str, to: &str) -> Value {
        let m = |v: &str| json!({"metadata": {"name": "m", "labels": labels}, "spec": {"clusterName": "c1", "version": v, "providerID": "kk:///a/n"}});
        json!({
            "current": {"machine": m(from), "infrastructureMachine": {"spec": {"instanceID": "a.n", "providerID": "kk:///a/n", "roles": ["worker"]}}},
            "desired": {"machine": m(to), "infrastructureMachine": {"spec": {"roles": ["worker"]}}},
        })
    }

    #[test]
    fn a_control_plane_machine_is_never_updated_in_place_and_a_worker_is() {
        let cp = machine_request(json!({CONTROL_PLANE_LABEL: ""}), "v1.35.2", "v1.36.3");
        let (resp, a) = can_update_machine(&cp);
        assert!(matches!(a, Answer::No(m) if m.contains("control-plane")));
        assert!(resp.get("machinePatch").is_none());
        let w = machine_request(json!({}), "v1.35.2", "v1.36.3");
        let (resp, a) = can_update_machine(&w);
        assert_eq!(
            a,
            Answer::Upgrade {
                from: "v1.35.2".into(),
                to: "v1.36.3".into()
            }
        );
        let ops = base64::engine::general_purpose::STANDARD
            .decode(resp["machinePatch"]["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&ops).unwrap(),
            json!([{"op": "replace", "path": "/spec/version", "value": "v1.36.3"}])
        );
    }

    /// The Machine as the API server stores it while CAPI waits for `UpdateMachine`.
    fn stored(version: &str, annotations: Value, labels: Value) -> Machine {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "tenant-a", "uid": "uid-1",
                "annotations": annotations, "labels": labels},
            "spec": {"clusterName": "c1", "version": version,
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachine", "name": "m"}}
        }))
        .unwrap()
    }

    fn pending() -> Value {
        json!({UPDATE_IN_PROGRESS_ANNOTATION: "", PENDING_HOOKS_ANNOTATION: "UpdateMachine"})
    }

    /// `desired.machine` of a request: what CAPI sends (no UID) unless `uid` is given.
    fn requested(version: &str, uid: Option<&str>) -> Value {
        let mut m = json!({"metadata": {"name": "m", "namespace": "tenant-a"}, "spec": {"version": version}});
        if let Some(u) = uid {
            m["metadata"]["uid"] = json!(u);
        }
        m
    }

    #[test]
    fn an_update_request_is_acted_on_only_for_a_stored_machine_that_capi_marked_pending_at_that_version() {
        let ok = stored("v1.36.3", pending(), json!({}));
        assert_eq!(
            matches_pending(&requested("v1.36.3", None), &ok),
            Ok("v1.36.3".into())
        );
        assert_eq!(
            matches_pending(&requested("v1.36.3", Some("uid-1")), &ok),
            Ok("v1.36.3".into())
        );
        let not_pending = |r: Result<String, Refusal>, what: &str| {
            assert!(matches!(&r, Err(Refusal::NotPending(_))), "{what}: {r:?}");
        };
        // The caller picks another version than the one stored.
        not_pending(matches_pending(&requested("v1.37.0", None), &ok), "other version");
        not_pending(matches_pending(&requested("", None), &ok), "no version");
        // Another Machine (re-created under the same name).
        not_pending(
            matches_pending(&requested("v1.36.3", Some("uid-2")), &ok),
            "other UID",
        );
        // No marker of CAPI's: nothing is pending on that Machine.
        not_pending(
            matches_pending(
                &requested("v1.36.3", None),
                &stored("v1.36.3", json!({}), json!({})),
            ),
            "no marker",
        );
        not_pending(
            matches_pending(
                &requested("v1.36.3", None),
                &stored("v1.36.3", json!({UPDATE_IN_PROGRESS_ANNOTATION: ""}), json!({})),
            ),
            "in progress but the hook not pending",
        );
        not_pending(
            matches_pending(
                &requested("v1.36.3", None),
                &stored(
                    "v1.36.3",
                    json!({PENDING_HOOKS_ANNOTATION: "UpdateMachine"}),
                    json!({}),
                ),
            ),
            "the hook pending without the update in progress",
        );
        not_pending(
            matches_pending(
                &requested("v1.36.3", None),
                &stored(
                    "v1.36.3",
                    json!({UPDATE_IN_PROGRESS_ANNOTATION: "", PENDING_HOOKS_ANNOTATION: "UpdateMachineX,Other"}),
                    json!({}),
                ),
            ),
            "another hook pending",
        );
        let mut deleting = ok.clone();
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        not_pending(
            matches_pending(&requested("v1.36.3", None), &deleting),
            "deleting",
        );
        // Among other pending hooks.
        let several = stored(
            "v1.36.3",
            json!({UPDATE_IN_PROGRESS_ANNOTATION: "", PENDING_HOOKS_ANNOTATION: "AfterClusterUpgrade,UpdateMachine"}),
            json!({}),
        );
        assert!(matches_pending(&requested("v1.36.3", None), &several).is_ok());
    }

    #[test]
    fn an_update_request_for_a_pending_control_plane_machine_is_refused_as_can_update_machine_refuses_it() {
        let cp = stored("v1.36.3", pending(), json!({CONTROL_PLANE_LABEL: ""}));
        assert!(matches!(
            matches_pending(&requested("v1.36.3", None), &cp),
            Err(Refusal::NotInPlace(m)) if m.contains("control-plane")
        ));
    }

    #[test]
    fn the_host_step_is_done_when_recorded_an_upgrade_of_one_minor_and_refused_as_can_update_refuses() {
        assert_eq!(
            host_step(Some("v1.36.3"), "v1.36.3"),
            Ok(Step::AlreadyAt("v1.36.3".into()))
        );
        assert_eq!(
            host_step(Some("v1.35.2"), "v1.36.3"),
            Ok(Step::Upgrade {
                from: "v1.35.2".into(),
                to: "v1.36.3".into()
            })
        );
        for (from, to, why) in [
            (Some("v1.36.3"), "v1.35.2", "downgrade"),
            (Some("v1.34.1"), "v1.36.3", "skips a minor"),
            (Some("v1.36.3"), "v2.0.0", "skips a minor"),
            (Some("v1.36"), "v1.37.0", "not both"),
            (None, "v1.36.3", "not recorded"),
            (Some(""), "v1.36.3", "not recorded"),
        ] {
            match host_step(from, to) {
                Err(Refusal::NotInPlace(m)) => assert!(m.contains(why), "{from:?} -> {to}: {m}"),
                other => panic!("{from:?} -> {to}: {other:?}"),
            }
        }
    }
}
