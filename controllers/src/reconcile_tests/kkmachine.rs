//! KKMachine reconciles: claim, mirror and cleanup decisions and the requests they take.

use capkk_api::{
    InstanceState, KKInstance, KKInstanceStatus, KKMachine,
    consts::{RELEASE_ANNOTATION, TOUCHED_ANNOTATION, conditions as cond, reasons},
};
use futures::StreamExt;
use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::*;
use crate::{
    fixtures::{ApiServer, TestContext},
    reconcile::requeue,
};

/// `(status, reason, message)` of condition `type_` in a status write's body.
fn condition(body: &Value, type_: &str) -> (String, String, String) {
    let c = body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no condition {type_} in {body}"));
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    (s("status"), s("reason"), s("message"))
}

fn true_condition(type_: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: reasons::READY.into(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: Time(Timestamp::now()),
    }
}

/// A test context whose caches hold Cluster `c`, Machine `m` and the KKClusters `kkcs`.
fn world(kkcs: Vec<capkk_api::KKCluster>) -> TestContext {
    let mut t = TestContext::new();
    t.caches.capi_cluster(capi_cluster());
    t.caches.capi_machine(machine());
    for k in kkcs {
        t.caches.cluster(k);
    }
    t
}

/// The reply of a create: the object as sent, with what the API server adds.
fn created(body: &Value) -> KKInstance {
    let mut i: KKInstance = serde_json::from_value(body.clone()).expect("a KKInstance was sent");
    i.metadata.uid = Some(format!("uid-{}", i.metadata.name.clone().unwrap_or_default()));
    i.metadata.resource_version = Some("5".into());
    i
}

#[tokio::test]
async fn a_claim_that_finds_its_first_host_taken_claims_the_next_and_records_it_under_the_resource_version() {
    let t = world(vec![kkcluster(&[("node1", "10.0.0.1"), ("node2", "10.0.0.2")])]);
    let res = scripted(t.ctx, t.api, kkmachine(), |mut api: ApiServer| async move {
        // The cache does not show node1 taken (another manager's claim): the create is the lock.
        let c = api.expect("POST", &path("kkinstances", "")).await;
        assert_eq!(c.body["metadata"]["name"], "c.node1");
        assert_eq!(c.body["metadata"]["ownerReferences"][0]["uid"], "uid-m");
        assert_eq!(c.body["metadata"]["ownerReferences"][0]["controller"], true);
        c.already_exists();
        let c = api.expect("POST", &path("kkinstances", "")).await;
        assert_eq!(c.body["metadata"]["name"], "c.node2");
        assert_eq!(c.body["spec"]["providerID"], "kk:///c/node2");
        let inst = created(&c.body);
        c.created(&inst);
        let c = api.expect("PATCH", &path("kkmachines", "m")).await;
        assert_eq!(
            c.body,
            json!({
                "spec": { "instanceID": "c.node2", "providerID": "kk:///c/node2" },
                "metadata": { "resourceVersion": "1" },
            }),
            "the claim record is guarded by the resourceVersion the reconcile read"
        );
        let mut recorded = kkmachine();
        recorded.spec.instance_id = Some("c.node2".into());
        recorded.metadata.generation = Some(2);
        c.reply(&recorded);
        let c = api.expect("POST", EVENTS).await;
        assert_eq!(c.body["reason"], "HostClaimed");
        c.echo();
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        assert_eq!(condition(&c.body, cond::HOST_CLAIMED).0, "True", "{}", c.body);
        assert_eq!(c.body["status"]["observedGeneration"], 2);
        assert_eq!(c.body["status"]["phase"], "Claimed");
        c.reply(&recorded);
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::MACHINE_WORK));
}

#[tokio::test]
async fn a_claim_creates_its_kkinstance_with_the_finalizer_so_host_work_needs_no_write_to_add_it() {
    let t = world(vec![kkcluster(&[("node1", "10.0.0.1")])]);
    let res = scripted(t.ctx, t.api, kkmachine(), |mut api: ApiServer| async move {
        let c = api.expect("POST", &path("kkinstances", "")).await;
        assert_eq!(
            c.body["metadata"]["finalizers"],
            json!([KKINSTANCE_FINALIZER]),
            "{}",
            c.body["metadata"]
        );
        let inst = created(&c.body);
        c.created(&inst);
        let c = api.expect("PATCH", &path("kkmachines", "m")).await;
        let mut recorded = kkmachine();
        recorded.spec.instance_id = Some("c.node1".into());
        c.reply(&recorded);
        api.expect("POST", EVENTS).await.echo();
        api.expect("PATCH", &path("kkmachines", "m/status"))
            .await
            .reply(&recorded);
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::MACHINE_WORK));
}

#[tokio::test]
async fn an_address_another_kkcluster_holds_is_refused_without_a_create_and_the_refusal_names_the_holder() {
    let mut t = world(vec![
        kkcluster(&[("node1", "10.0.0.9")]),
        kkcluster_named("other", &[("x", "10.0.0.9")]),
    ]);
    // KKCluster `other` holds the address (its claim is in the cache).
    let mut held = claim(&kkmachine(), "x", "10.0.0.9", &[]);
    held.metadata.name = Some("other.x".into());
    held.spec.cluster_name = Some("other".into());
    held.metadata.owner_references = None;
    t.caches.instance(held);
    let res = scripted(t.ctx, t.api, kkmachine(), |mut api: ApiServer| async move {
        let c = api.expect("POST", EVENTS).await;
        assert_eq!(c.body["reason"], reasons::ADDRESS_IN_USE);
        assert_eq!(c.body["type"], "Warning");
        c.echo();
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        let (status, reason, message) = condition(&c.body, cond::HOST_CLAIMED);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::ADDRESS_IN_USE)
        );
        assert!(
            message.contains("10.0.0.9")
                && message.contains("other.x")
                && message.contains("KKCluster other"),
            "the refusal names the address and its holder: {message}"
        );
        assert_eq!(c.body["status"]["phase"], "Pending");
        c.reply(&kkmachine());
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::NO_HOST));
}

#[tokio::test]
async fn a_claimed_kkmachine_mirrors_its_provisioned_host_and_writes_nothing_but_its_status() {
    let mut t = world(vec![kkcluster(&[("node1", "10.0.0.1")])]);
    let mut km = kkmachine();
    km.spec.instance_id = Some("c.node1".into());
    let mut inst = claim(&km, "node1", "10.0.0.1", &[]);
    inst.spec.internal_address = Some("192.168.0.1".into());
    inst.status = Some(KKInstanceStatus {
        state: Some(InstanceState::Running),
        step: Some("step 5/5: done".into()),
        conditions: vec![true_condition(cond::PROVISIONED), true_condition(cond::READY)],
        ..Default::default()
    });
    t.caches.instance(inst);
    let res = scripted(t.ctx, t.api, km, |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        assert!(
            c.query.contains("fieldManager=capkk-manager") && c.query.contains("force=true"),
            "the status is one server-side apply of the reconciler's field manager: {}",
            c.query
        );
        let s = &c.body["status"];
        assert_eq!(s["initialization"]["provisioned"], true, "{s}");
        assert_eq!(s["phase"], "Provisioned");
        assert_eq!(s["step"], "step 5/5: done");
        assert_eq!(
            s["addresses"],
            json!([
                { "type": "InternalIP", "address": "192.168.0.1" },
                { "type": "ExternalIP", "address": "10.0.0.1" },
                { "type": "Hostname", "address": "node1" },
            ])
        );
        assert_eq!(condition(&c.body, cond::READY).0, "True");
        assert_eq!(condition(&c.body, cond::INSTANCE_READY).0, "True");
        c.reply(&kkmachine());
        api
    })
    .await;
    // Newly provisioned: reported first, the workload Node is looked for on the next reconcile.
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::NODE_POLL));
}

/// The status write of one reconcile of `km`, claimed host `inst` in the KKCluster `kkc`.
async fn status_of(kkc: KKCluster, km: KKMachine, inst: KKInstance) -> Value {
    let mut t = world(vec![kkc]);
    t.caches.instance(inst);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _ = scripted(t.ctx, t.api, km, |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        let _ = tx.send(c.body["status"].clone());
        c.reply(&kkmachine());
        api
    })
    .await;
    rx.await.expect("one status write")
}

fn claimed_at(version: Option<&str>) -> (KKMachine, KKInstance) {
    let mut km = kkmachine();
    km.spec.instance_id = Some("c.node1".into());
    let mut inst = claim(&km, "node1", "10.0.0.1", &[]);
    inst.spec.kubernetes_version = version.map(String::from);
    (km, inst)
}

#[tokio::test]
async fn a_claimed_kkmachine_naming_no_components_reports_the_defaults_of_its_kubernetes_version() {
    let mut kkc = kkcluster(&[("node1", "10.0.0.1")]);
    kkc.spec.registry = Some(capkk_api::Registry {
        private_registry: Some("198.18.0.1:5000".into()),
        ..Default::default()
    });
    let (km, inst) = claimed_at(Some("v1.36.3"));
    let s = status_of(kkc, km, inst).await;
    assert_eq!(
        s["components"],
        json!({
            "kubernetesVersion": "v1.36.3",
            "containerd": "2.2.1",
            "runc": "v1.3.4",
            "crictl": "v1.36.0",
            "sandboxImage": "198.18.0.1:5000/pause:3.10.2",
            "defaulted": ["version", "runcVersion", "crictlVersion", "sandboxImage"],
        }),
        "{s}"
    );
}

#[tokio::test]
async fn a_claimed_kkmachine_reports_its_own_component_values_over_the_defaults() {
    let (km, mut inst) = claimed_at(Some("v1.35.4"));
    inst.spec.container_manager = Some(capkk_api::ContainerManager {
        version: Some("1.7.13".into()),
        crictl_version: Some("v1.29.0".into()),
        ..Default::default()
    });
    let s = status_of(kkcluster(&[("node1", "10.0.0.1")]), km, inst).await;
    let c = &s["components"];
    assert_eq!(c["containerd"], "1.7.13", "{s}");
    assert_eq!(c["crictl"], "v1.29.0", "{s}");
    assert_eq!(c["runc"], "v1.3.4", "{s}");
    assert_eq!(c["sandboxImage"], "registry.k8s.io/pause:3.10.1", "{s}");
    assert_eq!(c["defaulted"], json!(["runcVersion", "sandboxImage"]), "{s}");
}

#[tokio::test]
async fn a_host_upgraded_in_place_reports_the_runtime_it_was_installed_with_not_the_new_versions_defaults() {
    let (km, mut inst) = claimed_at(Some("v1.36.3"));
    inst.metadata.annotations = Some(
        [(
            capkk_api::consts::RUNTIME_VERSION_ANNOTATION.to_owned(),
            "v1.35.4".to_owned(),
        )]
        .into(),
    );
    let s = status_of(kkcluster(&[("node1", "10.0.0.1")]), km, inst).await;
    let c = &s["components"];
    assert_eq!(c["kubernetesVersion"], "v1.35.4", "{s}");
    assert_eq!(
        c["sandboxImage"], "registry.k8s.io/pause:3.10.1",
        "v1.35's default, not v1.36's: {s}"
    );
}

#[tokio::test]
async fn a_kkmachine_whose_kubernetes_version_has_no_defaults_reports_no_components_rather_than_a_guess() {
    let (km, inst) = claimed_at(Some("v1.99.0"));
    let s = status_of(kkcluster(&[("node1", "10.0.0.1")]), km, inst).await;
    assert!(s["components"].is_null(), "{s}");
}

#[tokio::test]
async fn a_deleted_kkmachine_asks_its_host_to_be_released_and_keeps_its_finalizer_until_it_is_free() {
    let mut t = world(vec![kkcluster(&[("node1", "10.0.0.1")])]);
    let mut km = deleted(kkmachine());
    km.spec.instance_id = Some("c.node1".into());
    t.caches
        .instance(claim(&km, "node1", "10.0.0.1", &[(TOUCHED_ANNOTATION, "true")]));
    let res = scripted(t.ctx, t.api, km, |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkinstances", "c.node1")).await;
        assert!(
            c.body["metadata"]["annotations"][RELEASE_ANNOTATION].is_string(),
            "the release annotation is set: {}",
            c.body
        );
        c.reply(&claim(&kkmachine(), "node1", "10.0.0.1", &[]));
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        let (status, reason, _) = condition(&c.body, cond::READY);
        assert_eq!((status.as_str(), reason.as_str()), ("False", reasons::DELETING));
        assert_eq!(c.body["status"]["phase"], "Deleting");
        c.reply(&kkmachine());
        api
    })
    .await;
    assert_eq!(
        res.expect("unfinished cleanup is not a failure"),
        Action::requeue(requeue::CLEANUP_POLL)
    );
    let woken = t.instance_triggers.next().await.expect("the KKInstance is woken");
    assert_eq!(woken.name, "c.node1");
}

#[tokio::test]
async fn a_deleted_kkmachine_whose_machine_is_gone_is_cleaned_up_and_loses_its_finalizer() {
    // No Machine in the cache, and the API server does not have it either.
    let mut t = TestContext::new();
    t.caches.capi_cluster(capi_cluster());
    let km = deleted(kkmachine());
    let res = scripted(t.ctx, t.api, km, |mut api: ApiServer| async move {
        api.expect("GET", &path("machines", "m")).await.not_found();
        // No host held: the finalizer goes (kube's finalizer helper: a JSON patch guarded by a test op).
        let c = api.expect("PATCH", &path("kkmachines", "m")).await;
        let ops = c.body.as_array().cloned().unwrap_or_default();
        assert!(
            ops.iter()
                .any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0"),
            "the KKMachine's finalizer is removed: {}",
            c.body
        );
        let mut gone = deleted(kkmachine());
        gone.metadata.finalizers = None;
        c.reply(&gone);
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
}

#[tokio::test]
async fn a_kkmachine_of_an_unprovisioned_kkcluster_waits_without_claiming() {
    let mut unprovisioned = kkcluster(&[("node1", "10.0.0.1")]);
    unprovisioned.status = None;
    let t = world(vec![unprovisioned]);
    let res = scripted(t.ctx, t.api, kkmachine(), |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        let (status, reason, _) = condition(&c.body, cond::READY);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE)
        );
        c.reply(&kkmachine());
        api
    })
    .await;
    assert_eq!(
        res.expect("reconciled"),
        Action::requeue(requeue::INFRA_NOT_READY)
    );
}

#[tokio::test]
async fn a_kkmachine_without_its_claim_record_adopts_the_unrecorded_claim_it_made_earlier() {
    // A crash between the create and the record: the KKInstance it controls is recorded now, not a new one.
    let mut t = world(vec![kkcluster(&[("node1", "10.0.0.1"), ("node2", "10.0.0.2")])]);
    let km = kkmachine();
    t.caches.instance(claim(&km, "node2", "10.0.0.2", &[]));
    let res = scripted(t.ctx, t.api, km, |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkmachines", "m")).await;
        assert_eq!(c.body["spec"]["instanceID"], "c.node2", "{}", c.body);
        let mut recorded: KKMachine = kkmachine();
        recorded.spec.instance_id = Some("c.node2".into());
        c.reply(&recorded);
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        assert_eq!(condition(&c.body, cond::HOST_CLAIMED).0, "True");
        c.reply(&recorded);
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::MACHINE_WORK));
}

#[tokio::test]
async fn a_claim_record_that_conflicts_fails_the_reconcile_and_leaves_the_claim_for_the_next_one() {
    // The KKMachine changed meanwhile (maybe another manager recorded a claim): the created KKInstance is not
    // deleted here; the next reconcile adopts it, or deletes it once spec.instanceID names another host.
    let t = world(vec![kkcluster(&[("node1", "10.0.0.1")])]);
    let res = scripted(t.ctx, t.api, kkmachine(), |mut api: ApiServer| async move {
        let c = api.expect("POST", &path("kkinstances", "")).await;
        let inst = created(&c.body);
        c.created(&inst);
        api.expect("PATCH", &path("kkmachines", "m")).await.conflict();
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        assert_eq!(c.body["status"]["phase"], serde_json::Value::Null, "{}", c.body);
        c.reply(&kkmachine());
        api
    })
    .await;
    let err = res.expect_err("a conflict fails the reconcile");
    assert!(err.is_conflict(), "retried at once as a conflict: {err}");
}

/// Machine `m` with a version and no bootstrap data yet (CABPK waits for the control plane).
fn machine_without_data() -> crate::capi::Machine {
    let mut m = machine();
    m.spec.bootstrap.data_secret_name = None;
    m
}

/// KKCluster `c` with host node1 serving both roles (the default) and node2 only workers.
fn mixed_inventory() -> capkk_api::KKCluster {
    let mut k = kkcluster(&[("node1", "10.0.0.1"), ("node2", "10.0.0.2")]);
    k.spec.nodes.instances[1].roles = Some(vec![capkk_api::Role::Worker]);
    k
}

fn world_with(
    settings: crate::context::Settings,
    m: crate::capi::Machine,
    k: capkk_api::KKCluster,
) -> TestContext {
    let mut t = TestContext::with_settings(settings);
    t.caches.capi_cluster(capi_cluster());
    t.caches.capi_machine(m);
    t.caches.cluster(k);
    t
}

#[tokio::test]
async fn a_worker_with_a_version_and_no_bootstrap_data_claims_a_worker_only_host_to_prepare_it() {
    let t = world_with(Default::default(), machine_without_data(), mixed_inventory());
    let res = scripted(t.ctx, t.api, kkmachine(), |mut api: ApiServer| async move {
        // node1 may serve the control plane: it is left for the control-plane Machine.
        let c = api.expect("POST", &path("kkinstances", "")).await;
        assert_eq!(c.body["metadata"]["name"], "c.node2");
        assert!(
            c.body["spec"].get("bootstrapDataSecretRef").is_none(),
            "no bootstrap data to name yet: {}",
            c.body["spec"]
        );
        assert_eq!(c.body["spec"]["kubernetesVersion"], "v1.34.1");
        assert_eq!(c.body["spec"]["providerID"], "kk:///c/node2");
        let inst = created(&c.body);
        c.created(&inst);
        let c = api.expect("PATCH", &path("kkmachines", "m")).await;
        assert_eq!(c.body["spec"]["instanceID"], "c.node2");
        assert_eq!(
            c.body["spec"]["providerID"], "kk:///c/node2",
            "the providerID comes with the claim"
        );
        let mut recorded = kkmachine();
        recorded.spec.instance_id = Some("c.node2".into());
        c.reply(&recorded);
        api.expect("POST", EVENTS).await.echo();
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        assert_eq!(condition(&c.body, cond::HOST_CLAIMED).0, "True", "{}", c.body);
        assert!(
            c.body["status"]["initialization"]["provisioned"].is_null(),
            "not provisioned before the bootstrap data ran: {}",
            c.body
        );
        c.reply(&recorded);
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::MACHINE_WORK));
}

#[tokio::test]
async fn an_early_worker_leaves_hosts_that_may_serve_the_control_plane_and_waits_for_its_bootstrap_data() {
    let only_shared = kkcluster(&[("node1", "10.0.0.1")]);
    let t = world_with(Default::default(), machine_without_data(), only_shared);
    let res = scripted(t.ctx, t.api, kkmachine(), |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        let (status, reason, message) = condition(&c.body, cond::READY);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::WAITING_FOR_BOOTSTRAP_DATA)
        );
        assert!(message.contains("control plane"), "{message}");
        assert_eq!(
            condition(&c.body, cond::HOST_CLAIMED).1,
            reasons::WAITING_FOR_BOOTSTRAP_DATA
        );
        c.reply(&kkmachine());
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::NO_HOST));
}

#[tokio::test]
async fn with_preparation_before_the_bootstrap_data_off_a_machine_without_it_claims_nothing() {
    let settings = crate::context::Settings {
        prepare_before_bootstrap_data: false,
        ..Default::default()
    };
    let t = world_with(settings, machine_without_data(), mixed_inventory());
    let res = scripted(t.ctx, t.api, kkmachine(), |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        let (status, reason, _) = condition(&c.body, cond::READY);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::WAITING_FOR_BOOTSTRAP_DATA)
        );
        assert_eq!(c.body["status"]["phase"], "Pending");
        c.reply(&kkmachine());
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
}

#[tokio::test]
async fn bootstrap_data_written_after_the_claim_is_named_in_the_prepared_kkinstance() {
    let mut t = world_with(Default::default(), machine(), mixed_inventory());
    let mut km = kkmachine();
    km.spec.instance_id = Some("c.node2".into());
    let mut inst = claim(&km, "node2", "10.0.0.2", &[(TOUCHED_ANNOTATION, "true")]);
    inst.spec.bootstrap_data_secret_ref = None;
    inst.status = Some(KKInstanceStatus {
        state: Some(InstanceState::Pending),
        conditions: vec![Condition {
            type_: cond::READY.into(),
            status: "False".into(),
            reason: reasons::WAITING_FOR_BOOTSTRAP_DATA.into(),
            message: "host prepared".into(),
            observed_generation: Some(1),
            last_transition_time: Time(Timestamp::now()),
        }],
        ..Default::default()
    });
    t.caches.instance(inst.clone());
    let res = scripted(t.ctx, t.api, km.clone(), |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkinstances", "c.node2")).await;
        assert_eq!(
            c.body,
            json!({ "spec": { "bootstrapDataSecretRef": { "name": "data" } } }),
            "only the bootstrap data is handed over"
        );
        let mut handed = inst.clone();
        handed.spec.bootstrap_data_secret_ref = Some(capkk_api::SecretRef { name: "data".into() });
        c.reply(&handed);
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        assert!(
            c.body["status"]["initialization"]["provisioned"].is_null(),
            "{}",
            c.body
        );
        c.reply(&km);
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::MACHINE_WORK));
    let woken = tokio::time::timeout(std::time::Duration::from_secs(1), t.instance_triggers.next()).await;
    assert_eq!(
        woken.ok().flatten().map(|r| r.name),
        Some("c.node2".to_owned()),
        "the KKInstance is woken to provision"
    );
}

#[tokio::test]
async fn a_kkmachine_mirrors_its_prepared_host_as_waiting_for_bootstrap_data() {
    let mut t = world_with(Default::default(), machine_without_data(), mixed_inventory());
    let mut km = kkmachine();
    km.spec.instance_id = Some("c.node2".into());
    let mut inst = claim(&km, "node2", "10.0.0.2", &[(TOUCHED_ANNOTATION, "true")]);
    inst.spec.bootstrap_data_secret_ref = None;
    inst.status = Some(KKInstanceStatus {
        state: Some(InstanceState::Pending),
        conditions: vec![Condition {
            type_: cond::READY.into(),
            status: "False".into(),
            reason: reasons::WAITING_FOR_BOOTSTRAP_DATA.into(),
            message: "host prepared".into(),
            observed_generation: Some(1),
            last_transition_time: Time(Timestamp::now()),
        }],
        ..Default::default()
    });
    t.caches.instance(inst);
    let res = scripted(t.ctx, t.api, km.clone(), |mut api: ApiServer| async move {
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        let (status, reason, _) = condition(&c.body, cond::READY);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::WAITING_FOR_BOOTSTRAP_DATA)
        );
        assert_eq!(c.body["status"]["phase"], "Claimed");
        c.reply(&km);
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::MACHINE_WORK));
}

/// Issue 43: an owner reference's `name` is not format-checked by the API server; spliced into
/// `GET …/machines/<name>` it would make the read a namespace WATCH. It is refused before any request and
/// reported as `InvalidName` naming the field.
#[tokio::test]
async fn an_owner_reference_name_that_would_change_the_request_path_is_reported_and_never_requested() {
    let t = world(vec![kkcluster(&[("node1", "10.0.0.1")])]);
    let mut km = kkmachine();
    if let Some(o) = km.metadata.owner_references.as_mut().and_then(|o| o.first_mut()) {
        o.name = "?watch=true&timeoutSeconds=86400".into();
    }
    let reply = km.clone();
    let res = scripted(t.ctx, t.api, km, |mut api: ApiServer| async move {
        let c = api.next().await;
        assert_eq!(
            (c.method.as_str(), c.path.as_str()),
            ("POST", EVENTS),
            "the first request is the event, none for the name (query {:?})",
            c.query
        );
        assert_eq!(c.body["reason"], reasons::INVALID_NAME);
        c.echo();
        let c = api.expect("PATCH", &path("kkmachines", "m/status")).await;
        let (status, reason, message) = condition(&c.body, cond::READY);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::INVALID_NAME)
        );
        assert!(
            message.contains("metadata.ownerReferences[kind=Machine].name"),
            "{message}"
        );
        c.reply(&reply);
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::INVALID_NAME));
}
