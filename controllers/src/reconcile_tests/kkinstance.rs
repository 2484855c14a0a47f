//! KKInstance reconciles: the host state machine's decisions, what they ask of the API server, and what
//! host work they start through the fake SSH and host services.

use std::{sync::Arc, time::Duration};

use capkk_api::{
    Quarantine,
    consts::{
        BLOCK_MOVE_ANNOTATION, COMPLETED_PHASES_ANNOTATION, FAILED_ANNOTATION, HOST_CLAIMS_ANNOTATION,
        QUARANTINED_LABEL, RELEASE_ANNOTATION, TOUCHED_ANNOTATION, UNREACHABLE_SINCE_ANNOTATION, reasons,
    },
};
use futures::{StreamExt, channel::mpsc::UnboundedReceiver};
use k8s_openapi::{ByteString, api::core::v1::Secret, jiff::Timestamp};
use kube::runtime::{controller::Action, reflector::ObjectRef};
use serde_json::{Value, json};

use super::*;
use crate::{
    fixtures::{ApiServer, Served, TestContext},
    reconcile::{reconcile, requeue},
    services::Phase,
};

/// `status.state` and the `Ready` reason of a KKInstance status write.
fn state_and_reason(body: &Value) -> (String, String) {
    let ready = body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["reason"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    (
        body["status"]["state"].as_str().unwrap_or_default().to_owned(),
        ready,
    )
}

/// A test context whose caches hold Cluster `c`, KKCluster `c` (host node1) and KKMachine `km`.
fn world(km: &KKMachine) -> TestContext {
    let mut t = TestContext::new();
    t.caches.capi_cluster(capi_cluster());
    t.caches.cluster(kkcluster(&[("node1", "10.0.0.1")]));
    t.caches.machine(km.clone());
    t
}

fn recorded_kkmachine() -> KKMachine {
    let mut km = kkmachine();
    km.spec.instance_id = Some("c.node1".into());
    km
}

/// Answer the requests of the host work `inst` starts: its KKInstance reads and writes with `inst`, the
/// bootstrap data Secret with a cloud-config that does nothing; a record of the requests is kept.
fn serve_host_work(api: ApiServer, inst: &KKInstance) -> Served {
    let stored = serde_json::to_value(inst).expect("serializes");
    api.serve(move |call| {
        if call.path.contains("/kkinstances/") {
            return Some(stored.clone());
        }
        if call.path == path("secrets", "data") {
            let data = Secret {
                data: Some([("value".to_owned(), ByteString(b"#cloud-config\n".to_vec()))].into()),
                ..Default::default()
            };
            return Some(serde_json::to_value(data).expect("serializes"));
        }
        None
    })
}

/// The KKInstance the host work asked to reconcile when it ended (`None` when it did not end in time).
async fn task_end(triggers: &mut UnboundedReceiver<ObjectRef<KKInstance>>) -> Option<String> {
    let woken = tokio::time::timeout(Duration::from_secs(5), triggers.next()).await;
    woken.ok().flatten().map(|r| r.name)
}

#[tokio::test]
async fn a_claim_its_kkmachine_did_not_record_is_never_worked_on() {
    // The KKMachine recorded another host: this claim lost a race and waits to be deleted untouched.
    let mut km = kkmachine();
    km.spec.instance_id = Some("c.node2".into());
    let t = world(&km);
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let res = scripted(t.ctx, t.api, inst, |mut api: ApiServer| async move {
        // The cache does not show the claim recorded: the API is asked before deciding.
        api.expect("GET", &path("kkmachines", "m")).await.reply(&km);
        let c = api.expect("PATCH", &path("kkinstances", "c.node1/status")).await;
        assert_eq!(
            state_and_reason(&c.body).0,
            "pending",
            "reported as waiting: {}",
            c.body
        );
        c.reply(&claim(&km, "node1", "10.0.0.1", &[]));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::CLAIM_RECORD));
    assert!(
        t.services.ran().is_empty(),
        "no phase ran: {:?}",
        t.services.ran()
    );
    assert!(
        t.ssh.reached().is_empty(),
        "no host was reached: {:?}",
        t.ssh.reached()
    );
}

#[tokio::test]
async fn a_released_host_unreachable_past_the_quarantine_deadline_is_quarantined_and_lets_its_machine_go() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    let hour_ago = (Timestamp::now() - Duration::from_secs(3600)).to_string();
    let inst = claim(
        &km,
        "node1",
        "10.0.0.1",
        &[
            (TOUCHED_ANNOTATION, "true"),
            (RELEASE_ANNOTATION, "now"),
            (UNREACHABLE_SINCE_ANNOTATION, &hour_ago),
        ],
    );
    let res = scripted(t.ctx, t.api, inst, |mut api: ApiServer| async move {
        // The Cluster becomes the only owner, so `clusterctl move` still takes the KKInstance along.
        api.expect("GET", &path("clusters", "c"))
            .await
            .reply(&capi_cluster());
        let c = api.expect("PATCH", &path("kkinstances", "c.node1")).await;
        let m = &c.body["metadata"];
        assert_eq!(m["labels"][QUARANTINED_LABEL], "true", "{}", c.body);
        assert_eq!(
            m["ownerReferences"][0]["kind"], "Cluster",
            "the KKMachine owner is dropped"
        );
        assert_eq!(m["ownerReferences"].as_array().map(Vec::len), Some(1));
        assert!(m["annotations"][RELEASE_ANNOTATION].is_null());
        let why = c.body["spec"]["quarantine"]["reason"]
            .as_str()
            .unwrap_or_default();
        assert!(why.contains("10.0.0.1") && why.contains("unreachable"), "{why}");
        c.reply(&claim(&km, "node1", "10.0.0.1", &[]));
        let c = api.expect("POST", EVENTS).await;
        assert_eq!(c.body["reason"], reasons::QUARANTINED);
        c.echo();
        let c = api.expect("PATCH", &path("kkinstances", "c.node1/status")).await;
        assert_eq!(state_and_reason(&c.body).0, "cleaning");
        c.reply(&claim(&km, "node1", "10.0.0.1", &[]));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
    assert_eq!(t.services.resets(), 0, "no reset is tried on a quarantined host");
    assert_eq!(
        t.instance_triggers.next().await.map(|r| r.name),
        Some("c.node1".into())
    );
}

#[tokio::test]
async fn a_released_host_that_was_never_touched_is_freed_at_once() {
    let km = recorded_kkmachine();
    let t = world(&km);
    let inst = claim(&km, "node1", "10.0.0.1", &[(RELEASE_ANNOTATION, "now")]);
    let res = scripted(t.ctx, t.api, inst, |mut api: ApiServer| async move {
        api.expect("DELETE", &path("kkinstances", "c.node1"))
            .await
            .reply(&claim(&km, "node1", "10.0.0.1", &[]));
        let c = api.expect("PATCH", &path("kkinstances", "c.node1/status")).await;
        assert_eq!(state_and_reason(&c.body).0, "cleaned");
        c.not_found();
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
    assert_eq!(
        t.services.resets(),
        0,
        "nothing ran on the host: nothing to reset"
    );
}

#[tokio::test]
async fn a_terminal_failure_stays_until_the_retry_annotation_and_the_host_is_not_touched_again() {
    let km = recorded_kkmachine();
    let t = world(&km);
    let inst = claim(
        &km,
        "node1",
        "10.0.0.1",
        &[
            (TOUCHED_ANNOTATION, "true"),
            (FAILED_ANNOTATION, reasons::COMMAND_FAILED),
            (BLOCK_MOVE_ANNOTATION, "true"),
        ],
    );
    let res = scripted(t.ctx, t.api, inst, |mut api: ApiServer| async move {
        // Host work is over: `clusterctl move` may go ahead.
        let c = api.expect("PATCH", &path("kkinstances", "c.node1")).await;
        assert_eq!(
            c.body,
            json!({ "metadata": { "annotations": { BLOCK_MOVE_ANNOTATION: null } } })
        );
        c.reply(&claim(&km, "node1", "10.0.0.1", &[]));
        let c = api.expect("PATCH", &path("kkinstances", "c.node1/status")).await;
        assert_eq!(
            state_and_reason(&c.body),
            ("failed".to_owned(), reasons::COMMAND_FAILED.to_owned())
        );
        c.reply(&claim(&km, "node1", "10.0.0.1", &[]));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
    assert!(t.services.ran().is_empty() && t.ssh.reached().is_empty());
}

#[tokio::test]
async fn a_recorded_claim_runs_every_phase_once_on_its_host_and_records_them_as_completed() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    let res = reconcile(Arc::new(inst), t.ctx.clone()).await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::HOST_WORK));
    // The task's last act wakes the KKInstance.
    assert_eq!(task_end(&mut t.instance_triggers).await, Some("c.node1".into()));
    let requests = served.finish();
    assert_eq!(t.services.ran(), Phase::ALL, "every phase once, in order");
    assert_eq!(
        t.ssh.reached(),
        ["10.0.0.1"],
        "one connection to the claimed host"
    );
    let annotated = |key: &str, value: &str| {
        requests.iter().any(|(m, p, b)| {
            m == "PATCH" && p == &path("kkinstances", "c.node1") && b["metadata"]["annotations"][key] == value
        })
    };
    assert!(
        annotated(TOUCHED_ANNOTATION, "true"),
        "the host is marked touched before work starts: {requests:#?}"
    );
    assert!(
        annotated(
            COMPLETED_PHASES_ANNOTATION,
            "bootstrap,binary,containermanager,repository,loadbalancer,provisioning"
        ),
        "every phase is recorded as completed: {requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|(_, p, b)| p == &path("kkinstances", "c.node1") && b["spec"]["hostKey"] == "SHA256:fixture"),
        "the host key seen first is recorded: {requests:#?}"
    );
}

#[tokio::test]
async fn a_failing_phase_is_terminal_the_phases_beside_it_finish_and_provisioning_does_not_run() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    t.services.fail(Phase::Binary, "kubeadm: not found");
    // The packages are still being installed when the binaries fail: they are let finish, not cut.
    t.services.takes(Phase::Repository, Duration::from_millis(300));
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the task ended"
    );
    let requests = served.finish();
    assert_eq!(
        t.services.ran(),
        [
            Phase::Bootstrap,
            Phase::Binary,
            Phase::ContainerManager,
            Phase::Repository
        ],
        "containerd and the packages started beside the binaries; provisioning never ran"
    );
    assert_eq!(
        t.services.finished().last(),
        Some(&Phase::Repository),
        "the task ended after the packages did"
    );
    assert!(
        requests.iter().any(|(m, p, b)| m == "PATCH"
            && p == &path("kkinstances", "c.node1")
            && b["metadata"]["annotations"][FAILED_ANNOTATION] == reasons::COMMAND_FAILED),
        "the failure is recorded as an annotation: {requests:#?}"
    );
    assert!(
        requests.iter().any(|(m, p, b)| m == "PATCH"
            && p == &path("kkinstances", "c.node1")
            && b["metadata"]["annotations"][COMPLETED_PHASES_ANNOTATION]
                == "bootstrap,containermanager,repository"),
        "what completed beside the failed phase is recorded, so a retry skips it: {requests:#?}"
    );
}

#[tokio::test]
async fn a_phase_whose_host_command_hangs_is_cut_at_the_phase_bound_and_reported_as_terminal() {
    let km = recorded_kkmachine();
    let mut t = TestContext::with_settings(crate::context::Settings {
        max_host_phase_duration: Duration::from_secs(1),
        ..Default::default()
    });
    t.caches.capi_cluster(capi_cluster());
    t.caches.cluster(kkcluster(&[("node1", "10.0.0.1")]));
    t.caches.machine(km.clone());
    t.services.hang(Phase::Binary);
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the task did not end within 5 s: the hung phase was not cut at its 1 s bound"
    );
    let requests = served.finish();
    assert_eq!(
        t.services.ran(),
        [
            Phase::Bootstrap,
            Phase::Binary,
            Phase::ContainerManager,
            Phase::Repository
        ]
    );
    let cut = |b: &Value| {
        b["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                c["reason"] == reasons::COMMAND_FAILED
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("binary ran longer than 1 s (--max-host-phase-duration)"))
            })
        })
    };
    assert!(
        requests
            .iter()
            .any(|(_, p, b)| p.starts_with(&path("kkinstances", "c.node1")) && cut(b)),
        "the cut is reported in a condition: {requests:#?}"
    );
    assert!(
        requests.iter().any(|(m, p, b)| m == "PATCH"
            && p == &path("kkinstances", "c.node1")
            && b["metadata"]["annotations"][FAILED_ANNOTATION] == reasons::COMMAND_FAILED),
        "the cut is terminal (the failed annotation): {requests:#?}"
    );
}

#[tokio::test]
async fn a_host_that_refuses_connections_is_retried_with_backoff_and_not_before_its_time() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    t.ssh.hosts_down();
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    let inst = Arc::new(inst);
    reconcile(inst.clone(), t.ctx.clone()).await.expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the attempt ended"
    );
    // The reconcile the task's end asks for: the failure is reported, no new attempt before the backoff.
    let again = reconcile(inst, t.ctx.clone()).await.expect("reconciled");
    let requests = served.finish();
    let retry = t.ctx.tasks.retry("uid-c.node1").expect("the failure is recorded");
    assert!(retry.message.contains("Connection refused"), "{}", retry.message);
    assert!(
        ![Action::requeue(requeue::HOST_WORK), Action::await_change()].contains(&again),
        "the reconcile waits for the backoff, it does not start host work: {again:?}"
    );
    assert_eq!(t.ssh.observed(), ["10.0.0.1"], "one attempt only");
    assert!(
        t.ssh.reached().is_empty(),
        "no executor for a host that did not answer"
    );
    assert!(t.services.ran().is_empty(), "no phase ran on an unreachable host");
    let reported = requests
        .iter()
        .rev()
        .find(|(m, p, _)| m == "PATCH" && p == &path("kkinstances", "c.node1/status"));
    let (_, _, body) = reported.expect("a status write");
    let (state, reason) = state_and_reason(body);
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("pending", reasons::UNREACHABLE),
        "{body}"
    );
}

#[tokio::test]
async fn deleting_a_quarantined_kkinstance_makes_the_host_claimable_and_drops_its_pooled_connections() {
    let km = recorded_kkmachine();
    let t = world(&km);
    let mut inst = deleted(claim(&km, "node1", "10.0.0.1", &[(TOUCHED_ANNOTATION, "true")]));
    inst.spec.quarantine = Some(Quarantine {
        reason: "unreachable".into(),
        since: None,
    });
    inst.metadata.owner_references = None;
    let res = scripted(t.ctx, t.api, inst, |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkinstances", "c.node1")).await;
        let ops = c.body.as_array().cloned().unwrap_or_default();
        assert!(
            ops.iter()
                .any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0"),
            "the finalizer goes without a reset: {}",
            c.body
        );
        c.reply(&claim(&km, "node1", "10.0.0.1", &[]));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
    assert_eq!(t.services.resets(), 0, "a quarantined host is not reset");
    // Only this namespace's connections to the address go (another tenant's stay).
    assert_eq!(t.ssh.forgotten(), [format!("{NS}/10.0.0.1")]);
}

/// The Leases of the host-identity claims (default `--host-claim-namespace`).
fn leases_path(name: &str) -> String {
    let base = "/apis/coordination.k8s.io/v1/namespaces/capkk-system/leases";
    match name {
        "" => base.to_owned(),
        n => format!("{base}/{n}"),
    }
}

/// A host-identity Lease held by KKInstance `ns/name` with UID `uid` of KKCluster `kkc`.
fn held_lease(name: &str, ns: &str, instance: &str, uid: &str, kkc: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": name, "namespace": "capkk-system", "uid": format!("lease-{uid}"), "resourceVersion": "7",
            "annotations": {
                crate::host_claims::HOLDER_UID_ANNOTATION: uid,
                crate::host_claims::HOLDER_KKCLUSTER_ANNOTATION: kkc,
            },
        },
        "spec": { "holderIdentity": format!("{ns}/{instance}") },
    })
}

#[tokio::test]
async fn a_host_another_namespace_holds_is_refused_naming_the_holder_and_nothing_runs_on_it() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let stored = serde_json::to_value(&inst).expect("serializes");
    let other = {
        let mut o = claim(&km, "node1", "10.0.0.1", &[]);
        o.metadata.namespace = Some("tenant-b".into());
        o.metadata.uid = Some("uid-b".into());
        serde_json::to_value(o).expect("serializes")
    };
    let served = t.api.serve_calls(move |call| {
        if call.method == "POST" && call.path == leases_path("") {
            // Another namespace's KKInstance created the host-key Lease first.
            call.already_exists();
        } else if call.method == "GET" && call.path.starts_with(&leases_path("capkk-host-key-")) {
            let name = call.path.rsplit('/').next().unwrap_or_default().to_owned();
            call.reply(&held_lease(&name, "tenant-b", "c.node1", "uid-b", "c"));
        } else if call.method == "GET" && call.path.contains("/namespaces/tenant-b/kkinstances/c.node1") {
            call.reply(&other);
        } else if call.path.contains("/kkinstances/") {
            call.reply(&stored);
        } else {
            return Some(call);
        }
        None
    });
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the attempt ended"
    );
    let requests = served.finish();
    assert!(t.services.ran().is_empty(), "no phase ran");
    assert!(
        t.ssh.reached().is_empty(),
        "no executor was made: nothing ran on the host"
    );
    let patched = |key: &str, value: Value| {
        requests.iter().any(|(m, p, b)| {
            m == "PATCH" && p == &path("kkinstances", "c.node1") && b["metadata"]["annotations"][key] == value
        })
    };
    assert!(
        patched(FAILED_ANNOTATION, json!(reasons::HOST_IN_USE)),
        "refused as HostInUse: {requests:#?}"
    );
    assert!(
        patched(TOUCHED_ANNOTATION, Value::Null),
        "not touched: its release must not reset the other claim's host: {requests:#?}"
    );
    let event = requests
        .iter()
        .find(|(m, p, b)| m == "POST" && p == EVENTS && b["reason"] == reasons::HOST_IN_USE)
        .map(|(_, _, b)| b["note"].as_str().unwrap_or_default().to_owned())
        .expect("a HostInUse event");
    assert!(
        event.contains("tenant-b/c.node1") && event.contains("KKCluster tenant-b/c"),
        "the event names the holder's namespace and KKCluster: {event}"
    );
    assert!(
        !requests
            .iter()
            .any(|(m, p, _)| m == "DELETE" && p.starts_with(&leases_path(""))),
        "a live holder's Lease is not taken over: {requests:#?}"
    );
}

/// The last status host work wrote for `c.node1` (its part: step, journal, phase conditions).
fn last_status(requests: &[(String, String, Value)]) -> Value {
    requests
        .iter()
        .rev()
        .find(|(m, p, b)| {
            m == "PATCH" && p == &path("kkinstances", "c.node1/status") && b["status"]["journal"].is_array()
        })
        .map(|(_, _, b)| b["status"].clone())
        .unwrap_or_else(|| panic!("no status with a journal: {requests:#?}"))
}

/// The `image-prepull` journal records of a status, as `(exit code, output)`.
fn prepull_records(status: &Value) -> Vec<(Value, String)> {
    status["journal"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["name"] == "image-prepull")
        .map(|r| {
            assert_eq!(r["phase"], "containermanager", "{r}");
            (
                r["exitCode"].clone(),
                r["outputTail"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn provisioned(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Provisioned" && c["status"] == "True")
}

#[tokio::test]
async fn the_image_pre_pull_starts_once_containerd_runs_and_provisioning_starts_while_it_still_pulls() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    t.services.prepull_takes(Duration::from_millis(600));
    // The packages, started beside the binaries and containerd, are still being installed when both end,
    // and end before the pre-pull does.
    t.services.takes(Phase::Repository, Duration::from_millis(300));
    t.services.takes(Phase::Provisioning, Duration::from_millis(900));
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the task ended"
    );
    let requests = served.finish();
    assert_eq!(t.services.ran(), Phase::ALL);
    let [(started, ended)] = t.services.prepulls().try_into().expect("one pre-pull");
    assert_eq!(
        started,
        [Phase::Bootstrap, Phase::Binary, Phase::ContainerManager],
        "started once kubeadm is installed and containerd runs, while the packages are still installed"
    );
    assert_eq!(
        ended,
        Phase::ALL,
        "the packages ran alongside it, and provisioning had started before it ended"
    );
    let status = last_status(&requests);
    assert!(provisioned(&status), "{status:#}");
    assert_eq!(
        prepull_records(&status),
        [(
            json!(0),
            "1 pulled registry.example/kube-apiserver:v1.36.3 in 9 ms (fake)".to_owned()
        )],
        "its result is journaled, though it finished during provisioning: {status:#}"
    );
}

#[tokio::test]
async fn a_pre_pull_still_running_when_the_host_is_provisioned_is_cancelled_and_journaled_as_not_finished() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    // A registry that never answers (the real pre-pull is bounded by its timeout; nothing waits for it).
    t.services.prepull_takes(Duration::from_secs(3600));
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the task ended within 5 s: nothing waited for the pre-pull"
    );
    let requests = served.finish();
    assert_eq!(t.services.ran(), Phase::ALL);
    assert!(t.services.prepulls().is_empty(), "it never finished");
    assert_eq!(
        t.services.prepulls_running(),
        0,
        "it did not outlive the task (cancelled, not leaked)"
    );
    let status = last_status(&requests);
    assert!(provisioned(&status), "{status:#}");
    let [(code, tail)] = prepull_records(&status).try_into().expect("one pre-pull record");
    assert_eq!(code, Value::Null, "no exit code: it did not end on the host");
    assert!(
        tail.starts_with("not finished when host work ended (") && tail.contains("cancelled"),
        "{tail}"
    );
}

#[tokio::test]
async fn a_failed_image_pre_pull_is_journaled_and_the_host_is_still_provisioned() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    t.services.prepull_fails();
    // The pre-pull ends during the packages' phase, its records are journaled with it.
    t.services.takes(Phase::Repository, Duration::from_millis(300));
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the task ended"
    );
    let requests = served.finish();
    assert_eq!(t.services.ran(), Phase::ALL);
    let status = last_status(&requests);
    assert!(
        provisioned(&status),
        "a failed pre-pull fails nothing: {status:#}"
    );
    let [(code, tail)] = prepull_records(&status).try_into().expect("one pre-pull record");
    assert_eq!(code, json!(1));
    assert!(
        tail.contains(" failed registry.example/kube-apiserver:v1.36.3 "),
        "{tail}"
    );
    assert!(
        !requests
            .iter()
            .any(|(_, _, b)| b["metadata"]["annotations"][FAILED_ANNOTATION].is_string()),
        "no failure recorded: {requests:#?}"
    );
}

#[tokio::test]
async fn a_free_host_is_claimed_by_key_and_address_before_any_phase_and_the_claims_are_recorded() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the task ended"
    );
    let requests = served.finish();
    let created: Vec<String> = requests
        .iter()
        .filter(|(m, p, _)| m == "POST" && p == &leases_path(""))
        .map(|(_, _, b)| b["metadata"]["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let id = crate::host_claims::HostIdentity::new("SHA256:fixture", "10.0.0.1", None, None);
    let expected: Vec<String> = id.leases().into_iter().map(|(_, n, _)| n).collect();
    assert_eq!(created, expected, "the host-key Lease, then the address Lease");
    let holder = requests
        .iter()
        .find(|(m, p, _)| m == "POST" && p == &leases_path(""))
        .map(|(_, _, b)| b["spec"]["holderIdentity"].clone());
    assert_eq!(holder, Some(json!("ns/c.node1")));
    assert!(
        requests.iter().any(|(m, p, b)| m == "PATCH"
            && p == &path("kkinstances", "c.node1")
            && b["metadata"]["annotations"][HOST_CLAIMS_ANNOTATION] == json!(expected.join(","))),
        "the claims are recorded for their release: {requests:#?}"
    );
    assert_eq!(t.services.ran(), Phase::ALL);
}

#[tokio::test]
async fn a_claim_whose_holder_is_gone_is_taken_over_deleting_exactly_the_lease_read() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let stored = serde_json::to_value(&inst).expect("serializes");
    let posts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let served = t.api.serve_calls(move |call| {
        let first_post = call.method == "POST"
            && call.path == leases_path("")
            && posts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
        if first_post {
            call.already_exists();
        } else if ["GET", "DELETE"].contains(&call.method.as_str())
            && call.path.starts_with(&leases_path("capkk-host-key-"))
        {
            let name = call.path.rsplit('/').next().unwrap_or_default().to_owned();
            call.reply(&held_lease(&name, "tenant-b", "c.node1", "uid-gone", "c"));
        } else if call.path.contains("/namespaces/ns/kkinstances/") {
            call.reply(&stored);
        } else {
            // GET tenant-b/c.node1: not found (the holder is gone); the second POST: echoed (created).
            return Some(call);
        }
        None
    });
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the task ended"
    );
    let requests = served.finish();
    let delete = requests
        .iter()
        .find(|(m, p, _)| m == "DELETE" && p.starts_with(&leases_path("capkk-host-key-")))
        .map(|(_, _, b)| b.clone())
        .expect("the abandoned Lease is deleted");
    assert_eq!(delete["preconditions"]["uid"], "lease-uid-gone");
    assert_eq!(delete["preconditions"]["resourceVersion"], "7");
    assert_eq!(
        t.services.ran().first(),
        Some(&Phase::Bootstrap),
        "the host is this claim's now: its work starts"
    );
}

#[tokio::test]
async fn deleting_a_clean_kkinstance_gives_its_host_claims_back() {
    let km = recorded_kkmachine();
    let t = world(&km);
    let key = crate::host_claims::lease_name("key", "SHA256:fixture");
    let inst = deleted(claim(&km, "node1", "10.0.0.1", &[(HOST_CLAIMS_ANNOTATION, &key)]));
    let held = held_lease(&key, "ns", "c.node1", "uid-c.node1", "c");
    let res = scripted(t.ctx, t.api, inst, move |mut api: ApiServer| async move {
        api.expect("GET", &leases_path(&key)).await.reply(&held);
        let d = api.expect("DELETE", &leases_path(&key)).await;
        assert_eq!(d.body["preconditions"]["uid"], "lease-uid-c.node1");
        d.reply(&held);
        let c = api.expect("PATCH", &path("kkinstances", "c.node1")).await;
        c.reply(&claim(&km, "node1", "10.0.0.1", &[]));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
}

/// The phases that need no bootstrap data, in the order they run.
const PREPARATION: [Phase; 5] = [
    Phase::Bootstrap,
    Phase::Binary,
    Phase::ContainerManager,
    Phase::Repository,
    Phase::LoadBalancer,
];

/// A claim made before the bootstrap data existed (the spec names none), with `annotations`.
fn claim_without_data(km: &KKMachine, annotations: &[(&str, &str)]) -> KKInstance {
    let mut i = claim(km, "node1", "10.0.0.1", annotations);
    i.spec.bootstrap_data_secret_ref = None;
    i
}

/// Whether host work posted an event with `reason`.
fn evented(requests: &[(String, String, Value)], reason: &str) -> bool {
    requests
        .iter()
        .any(|(m, p, b)| m == "POST" && p == EVENTS && b["reason"] == reason)
}

#[tokio::test]
async fn a_claim_without_bootstrap_data_prepares_its_host_and_stops_before_provisioning() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    let inst = claim_without_data(&km, &[]);
    t.caches.instance(inst.clone());
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(task_end(&mut t.instance_triggers).await, Some("c.node1".into()));
    let requests = served.finish();
    assert_eq!(t.services.ran(), PREPARATION, "every phase but provisioning");
    assert!(
        requests.iter().any(|(m, p, b)| m == "PATCH"
            && p == &path("kkinstances", "c.node1")
            && b["metadata"]["annotations"][COMPLETED_PHASES_ANNOTATION]
                == "bootstrap,binary,containermanager,repository,loadbalancer"),
        "the preparation is recorded in the host journal's annotation: {requests:#?}"
    );
    assert!(evented(&requests, "HostPrepared"), "{requests:#?}");
    assert!(
        !evented(&requests, "Provisioned"),
        "not provisioned: {requests:#?}"
    );
    let status = last_status(&requests);
    assert!(!provisioned(&status), "{status:#}");
    assert!(
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Provisioned"
                && c["status"] == "False"
                && c["reason"] == reasons::WAITING_FOR_BOOTSTRAP_DATA),
        "{status:#}"
    );
    assert!(
        t.services.prepulls().len() == 1 && t.services.prepulls_running() == 0,
        "the pre-pull ran to its end, not cancelled by the end of preparation"
    );
    assert!(
        prepull_records(&status)
            .iter()
            .all(|(_, tail)| !tail.contains("cancelled")),
        "{status:#}"
    );
}

#[tokio::test]
async fn a_prepared_host_waits_for_its_bootstrap_data_without_running_anything_after_a_restart() {
    let km = recorded_kkmachine();
    let t = world(&km);
    let inst = claim_without_data(
        &km,
        &[
            (TOUCHED_ANNOTATION, "true"),
            (
                COMPLETED_PHASES_ANNOTATION,
                "bootstrap,binary,containermanager,repository,loadbalancer",
            ),
        ],
    );
    let res = scripted(t.ctx, t.api, inst, |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkinstances", "c.node1/status")).await;
        assert_eq!(
            state_and_reason(&c.body),
            (
                "pending".to_owned(),
                reasons::WAITING_FOR_BOOTSTRAP_DATA.to_owned()
            )
        );
        c.reply(&claim(&km, "node1", "10.0.0.1", &[]));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
    assert!(
        t.services.ran().is_empty() && t.ssh.reached().is_empty(),
        "nothing runs on the host, it is not even reached"
    );
}

#[tokio::test]
async fn a_prepared_host_given_its_bootstrap_data_runs_provisioning_alone() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    let inst = claim(
        &km,
        "node1",
        "10.0.0.1",
        &[
            (TOUCHED_ANNOTATION, "true"),
            (
                COMPLETED_PHASES_ANNOTATION,
                "bootstrap,binary,containermanager,repository,loadbalancer",
            ),
        ],
    );
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(task_end(&mut t.instance_triggers).await, Some("c.node1".into()));
    let requests = served.finish();
    assert_eq!(
        t.services.ran(),
        [Phase::Provisioning],
        "finished phases are not redone"
    );
    let status = last_status(&requests);
    assert!(provisioned(&status), "{status:#}");
    assert!(evented(&requests, "Provisioned"), "{requests:#?}");
}

#[tokio::test]
async fn bootstrap_data_handed_over_while_the_pre_pull_runs_goes_on_to_provisioning_in_the_same_task() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    // A pre-pull far longer than the test: what ends it is provisioning's end.
    t.services.prepull_takes(Duration::from_secs(3600));
    let inst = claim_without_data(&km, &[]);
    t.caches.instance(inst.clone());
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst.clone()), t.ctx.clone())
        .await
        .expect("reconciled");
    // The host is prepared and its task waits on the pre-pull; then the KKMachine names the data.
    let prepared = async {
        while t.services.ran().len() < PREPARATION.len() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), prepared)
        .await
        .expect("the host was prepared");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        t.services.ran(),
        PREPARATION,
        "no provisioning without bootstrap data"
    );
    let mut handed = inst;
    handed.spec.bootstrap_data_secret_ref = Some(capkk_api::SecretRef { name: "data".into() });
    t.caches.instance(handed);
    assert_eq!(task_end(&mut t.instance_triggers).await, Some("c.node1".into()));
    let requests = served.finish();
    assert_eq!(
        t.services.ran(),
        Phase::ALL,
        "provisioning followed in the same task"
    );
    let status = last_status(&requests);
    assert!(provisioned(&status), "{status:#}");
    let [(code, tail)] = prepull_records(&status).try_into().expect("one pre-pull record");
    assert_eq!(code, Value::Null);
    assert!(
        tail.starts_with("not finished when host work ended ("),
        "cancelled only when provisioning ended: {tail}"
    );
    assert_eq!(t.services.prepulls_running(), 0);
}

#[tokio::test]
async fn deleting_a_prepared_host_that_never_got_its_bootstrap_data_resets_it() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    let inst = super::deleted(claim_without_data(
        &km,
        &[
            (TOUCHED_ANNOTATION, "true"),
            (
                COMPLETED_PHASES_ANNOTATION,
                "bootstrap,binary,containermanager,repository,loadbalancer",
            ),
        ],
    ));
    let served = serve_host_work(t.api, &inst);
    let res = reconcile(Arc::new(inst), t.ctx.clone()).await;
    assert_eq!(
        res.expect("reconciled"),
        Action::requeue(requeue::CLEANUP_POLL),
        "the finalizer stays until the reset is done"
    );
    assert_eq!(task_end(&mut t.instance_triggers).await, Some("c.node1".into()));
    let requests = served.finish();
    assert_eq!(
        t.services.resets(),
        1,
        "the prepared host is reset before it is freed"
    );
    assert!(
        requests.iter().any(|(m, p, b)| m == "PATCH"
            && p == &path("kkinstances", "c.node1")
            && b["metadata"]["annotations"][COMPLETED_PHASES_ANNOTATION].is_null()
            && b["metadata"]["annotations"]
                .get(capkk_api::consts::RESET_DONE_ANNOTATION)
                .is_some()),
        "the reset clears the journal's phases: {requests:#?}"
    );
}

#[tokio::test]
async fn a_busy_host_reports_one_ready_message_whatever_its_step_so_a_new_step_writes_no_status_of_its_own() {
    let km = recorded_kkmachine();
    let t = world(&km);
    let mut inst = claim(&km, "node1", "10.0.0.1", &[(TOUCHED_ANNOTATION, "true")]);
    let uid = inst.metadata.uid.clone().unwrap_or_default();
    // Host work of this KKInstance runs (it never ends in this test).
    t.ctx.tasks.spawn(&uid, crate::context::TaskKind::Provision, |_| {
        futures::future::pending::<()>()
    });
    inst.status = Some(capkk_api::KKInstanceStatus {
        step: Some("step 1/5: bootstrap".into()),
        ..Default::default()
    });
    let written = Arc::new(std::sync::Mutex::new(Value::Null));
    let (keep, reply) = (written.clone(), inst.clone());
    let server = t.api.script(|mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkinstances", "c.node1/status")).await;
        *keep.lock().unwrap() = c.body["status"].clone();
        c.reply(&reply);
        api
    });
    let res = reconcile(Arc::new(inst.clone()), t.ctx.clone()).await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::HOST_WORK));
    let first = written.lock().unwrap().clone();
    assert_eq!(
        first["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .map(|c| c["message"].clone()),
        Some(json!(crate::kkinstance::HOST_WORK_IN_PROGRESS)),
        "{first}"
    );
    // Host work moved on to its next step: the reconcile that wakes has nothing to write.
    let mut status: capkk_api::KKInstanceStatus = serde_json::from_value(first).expect("a status");
    status.step = Some("step 2/5: binary".into());
    inst.status = Some(status);
    let res = reconcile(Arc::new(inst), t.ctx.clone()).await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::HOST_WORK));
    t.ctx.tasks.abort(&uid);
    server.finish(t.ctx).await;
}

#[tokio::test]
async fn host_work_on_a_host_already_marked_touched_does_not_mark_it_again() {
    let km = recorded_kkmachine();
    let mut t = world(&km);
    let inst = claim(
        &km,
        "node1",
        "10.0.0.1",
        &[(TOUCHED_ANNOTATION, "true"), (BLOCK_MOVE_ANNOTATION, "true")],
    );
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(task_end(&mut t.instance_triggers).await, Some("c.node1".into()));
    let requests = served.finish();
    assert_eq!(t.services.ran(), Phase::ALL);
    assert!(
        !requests
            .iter()
            .any(|(m, _, b)| m == "PATCH" && b["metadata"]["annotations"][TOUCHED_ANNOTATION] == "true"),
        "no write repeats what the object says: {requests:#?}"
    );
}

/// A TCP listener on loopback that counts the connections it accepts (and holds them without a word).
async fn counting_listener() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let port = listener.local_addr().expect("bound").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            held.push(sock);
        }
    });
    (port, hits)
}

#[tokio::test]
async fn a_host_whose_address_the_ssh_policy_refuses_fails_terminally_naming_the_field_and_is_never_dialled()
{
    use std::sync::atomic::Ordering;
    let (port, hits) = counting_listener().await;
    let km = recorded_kkmachine();
    // The real pool with the manager's default policy (loopback refused): the decision is the pool's, made
    // before any connection. On an address it allowed, this listener would see the dial.
    let pool = capkk_ssh::SshPool::new(capkk_ssh::PoolConfig {
        connect_timeout: Duration::from_secs(2),
        ..Default::default()
    });
    let mut t = TestContext::with_ssh(
        crate::context::Settings::default(),
        Arc::new(crate::fixtures::FakeSsh::default()),
        Arc::new(pool.clone()),
    );
    t.caches.capi_cluster(capi_cluster());
    let mut kkc = kkcluster(&[("node1", "127.0.0.1")]);
    kkc.spec.nodes.auth.port = Some(i32::from(port));
    t.caches.cluster(kkc);
    t.caches.machine(km.clone());
    let inst = claim(&km, "node1", "127.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the attempt ended"
    );
    let requests = served.finish();
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing connected to the host's port"
    );
    assert_eq!(pool.stats().connects, 0);
    assert!(t.services.ran().is_empty(), "no phase ran");
    assert!(
        t.ctx.tasks.retry("uid-c.node1").is_none(),
        "terminal, not transient: no retry is scheduled"
    );
    let want = "spec.address: 127.0.0.1 is a loopback address (allowed only by --ssh-allow-cidr); \
                refused before dialling";
    let patched = |key: &str, value: Value| {
        requests.iter().any(|(m, p, b)| {
            m == "PATCH" && p == &path("kkinstances", "c.node1") && b["metadata"]["annotations"][key] == value
        })
    };
    assert!(
        patched(FAILED_ANNOTATION, json!(reasons::ADDRESS_REFUSED)),
        "refused as AddressRefused until the retry annotation: {requests:#?}"
    );
    assert!(
        patched(TOUCHED_ANNOTATION, Value::Null),
        "not touched: its release resets nothing on a host never reached: {requests:#?}"
    );
    let condition = requests
        .iter()
        .rev()
        .filter(|(m, p, _)| m == "PATCH" && p == &path("kkinstances", "c.node1/status"))
        .find_map(|(_, _, b)| {
            b["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Bootstrapped")
                .cloned()
        })
        .unwrap_or_else(|| panic!("no Bootstrapped condition written: {requests:#?}"));
    assert_eq!(condition["reason"], reasons::ADDRESS_REFUSED, "{condition}");
    assert_eq!(condition["message"], want, "{condition}");
    let event = requests
        .iter()
        .find(|(m, p, b)| m == "POST" && p == EVENTS && b["reason"] == reasons::ADDRESS_REFUSED)
        .map(|(_, _, b)| b["note"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no AddressRefused event: {requests:#?}"));
    assert_eq!(event, want);
}

/// `inst` claimed for a control-plane Machine (CAPI's control-plane label, copied onto the KKInstance).
fn control_plane(mut inst: KKInstance) -> KKInstance {
    inst.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(capkk_api::consts::CONTROL_PLANE_LABEL.to_owned(), String::new());
    inst
}

/// A test context whose caches hold Cluster `c`, KKCluster `c` (hosts node1, node2; `lb` its load balancer),
/// KKMachine `km` and control plane node2, claimed earlier.
fn two_control_planes(km: &KKMachine, lb: Option<capkk_api::LoadBalancer>) -> TestContext {
    let mut t = TestContext::new();
    t.caches.capi_cluster(capi_cluster());
    let mut kkc = kkcluster(&[("node1", "10.0.0.1"), ("node2", "10.0.0.2")]);
    kkc.spec.control_plane_load_balancer = lb;
    t.caches.cluster(kkc);
    t.caches.machine(km.clone());
    t.caches
        .instance(control_plane(claim(km, "node2", "10.0.0.2", &[])));
    t
}

#[tokio::test]
async fn a_control_plane_of_a_keepalived_cluster_serves_the_endpoint_with_every_claimed_control_plane_before_kubeadm()
 {
    use crate::services::LoadBalancerPlan;
    let km = recorded_kkmachine();
    let mut t = two_control_planes(
        &km,
        Some(capkk_api::LoadBalancer {
            host: Some("10.0.0.100".into()),
            type_: Some("Keepalived".into()),
            ..Default::default()
        }),
    );
    let inst = control_plane(claim(&km, "node1", "10.0.0.1", &[]));
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(task_end(&mut t.instance_triggers).await, Some("c.node1".into()));
    served.finish();
    assert_eq!(
        t.services.ran(),
        Phase::ALL,
        "the load balancer's phase runs, before provisioning"
    );
    let plans = t.services.load_balancer_plans();
    let [LoadBalancerPlan::Serve(cfg)] = plans.as_slice() else {
        panic!("one phase serving the endpoint: {plans:?}");
    };
    let members: Vec<(&str, &str)> = cfg
        .members
        .iter()
        .map(|m| (m.name.as_str(), m.address.as_str()))
        .collect();
    assert_eq!(
        members,
        [("node1", "10.0.0.1"), ("node2", "10.0.0.2")],
        "itself and the control plane claimed before it"
    );
    assert_eq!(
        (
            cfg.this.name.as_str(),
            cfg.vip.as_str(),
            cfg.port,
            cfg.api_server_port
        ),
        ("node1", "10.0.0.100", 8443, 6443)
    );
    assert_eq!(cfg.cluster, "ns/c");
}

#[tokio::test]
async fn a_second_control_plane_without_a_load_balancer_is_refused_before_kubeadm_naming_the_field() {
    let km = recorded_kkmachine();
    let mut t = two_control_planes(&km, None);
    let inst = control_plane(claim(&km, "node1", "10.0.0.1", &[]));
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(
        task_end(&mut t.instance_triggers).await.is_some(),
        "the task ended"
    );
    let requests = served.finish();
    assert_eq!(
        t.services.ran(),
        [
            Phase::Bootstrap,
            Phase::Binary,
            Phase::ContainerManager,
            Phase::Repository
        ],
        "neither the load balancer's phase nor provisioning (kubeadm) ran"
    );
    assert!(
        requests.iter().any(|(m, p, b)| m == "PATCH"
            && p == &path("kkinstances", "c.node1")
            && b["metadata"]["annotations"][FAILED_ANNOTATION] == reasons::NO_LOAD_BALANCER),
        "a terminal failure: {requests:#?}"
    );
    let condition = requests
        .iter()
        .rev()
        .filter(|(m, p, _)| m == "PATCH" && p == &path("kkinstances", "c.node1/status"))
        .filter_map(|(_, _, b)| {
            b["status"]["conditions"].as_array().and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == capkk_api::consts::conditions::LOAD_BALANCER_READY)
                    .cloned()
            })
        })
        .next()
        .expect("the LoadBalancerReady condition is written");
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], reasons::NO_LOAD_BALANCER);
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.controlPlaneLoadBalancer") && message.contains("node2"),
        "{message}"
    );
    assert!(
        requests
            .iter()
            .any(|(m, p, b)| m == "POST" && p == EVENTS && b["reason"] == reasons::NO_LOAD_BALANCER),
        "an event says so: {requests:#?}"
    );
}

#[tokio::test]
async fn a_worker_and_a_first_control_plane_without_a_load_balancer_run_no_load_balancer() {
    use crate::services::LoadBalancerPlan;
    let km = recorded_kkmachine();
    // The only control plane of its cluster: the endpoint is its own address, as before.
    let mut t = world(&km);
    let inst = control_plane(claim(&km, "node1", "10.0.0.1", &[]));
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(task_end(&mut t.instance_triggers).await.is_some());
    served.finish();
    assert_eq!(t.services.ran(), Phase::ALL);
    assert_eq!(t.services.load_balancer_plans(), [LoadBalancerPlan::Nothing]);
    // A worker beside two control planes of a cluster without a load balancer.
    let mut t = two_control_planes(&km, None);
    let inst = claim(&km, "node1", "10.0.0.1", &[]);
    let served = serve_host_work(t.api, &inst);
    reconcile(Arc::new(inst), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(task_end(&mut t.instance_triggers).await.is_some());
    served.finish();
    assert_eq!(t.services.ran(), Phase::ALL);
    assert_eq!(t.services.load_balancer_plans(), [LoadBalancerPlan::Nothing]);
}
