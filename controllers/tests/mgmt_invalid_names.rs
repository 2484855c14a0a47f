//! Issue 43: a name read from a field is checked before it becomes part of a request path. An owner reference's
//! `name` is not format-checked by the API server; spliced into `GET …/machines/<name>`, the value
//! `?watch=true&timeoutSeconds=86400` made the manager's read a day-long WATCH of the namespace (the reconcile
//! hung on it). The real manager against the real apiserver reports it instead, as `InvalidName` naming the
//! field, and keeps reconciling. No SSH needed.

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::*;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_reference_name_that_would_change_the_request_path_is_reported_as_invalid_name()
-> anyhow::Result<()> {
    let env = TestEnv::new("badname").await?;
    // The owner's apiVersion names a version no CRD serves: the garbage collector cannot resolve it and so
    // leaves the KKMachine alone (it would delete it as dangling otherwise); the manager still takes it for
    // a CAPI Machine owner (same group and kind).
    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKMachine",
        "metadata": {
            "name": "w",
            "namespace": env.ns,
            "labels": {"cluster.x-k8s.io/cluster-name": "c"},
            "ownerReferences": [{
                "apiVersion": "cluster.x-k8s.io/v1alpha9",
                "kind": "Machine",
                "name": "?watch=true&timeoutSeconds=86400",
                "uid": "6f1f5d7e-0000-4000-8000-000000000043",
                "controller": true
            }]
        },
        "spec": {"roles": ["worker"]}
    }))
    .await?;
    let mut mgr = env.manager("manager", &[])?;

    let km = eventually(
        "KKMachine Ready=False reason InvalidName",
        Duration::from_secs(60),
        || async {
            let k = env.get(INFRA_V, "KKMachine", "w").await?.unwrap_or_default();
            Ok((cond_state(&k, "Ready") == ("False".to_owned(), "InvalidName".to_owned())).then_some(k))
        },
    )
    .await?;
    let message = condition(&km, "Ready")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    ensure!(
        message.contains("metadata.ownerReferences[kind=Machine].name"),
        "the condition names the field: {message}"
    );
    let events = env.api::<Event>().list(&ListParams::default()).await?;
    ensure!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("InvalidName")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("w")),
        "a warning event says so: {:?}",
        events.items.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );
    ensure!(mgr.running(), "the manager kept running");
    mgr.terminate();
    env.finish().await;
    Ok(())
}
