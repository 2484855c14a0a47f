//! The management plane runs the real CAPI v1beta2 API: CRDs served and stored as v1beta2 with conversion
//! webhooks on the local CAPI core process, and CAPI's defaulting/validating webhooks answering.

mod common;

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

#[tokio::test]
async fn capi_crds_are_served_and_stored_as_v1beta2_with_local_conversion_webhooks() -> anyhow::Result<()> {
    let client = common::client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for name in [
        "clusters.cluster.x-k8s.io",
        "machines.cluster.x-k8s.io",
        "machinedeployments.cluster.x-k8s.io",
        "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
    ] {
        let crd = crds.get(name).await.with_context(|| format!("get CRD {name}"))?;
        let v1beta2 = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == "v1beta2")
            .context("no v1beta2 version")?;
        assert!(
            v1beta2.served && v1beta2.storage,
            "{name}: v1beta2 must be served and the storage version"
        );
        let stored = crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.clone())
            .unwrap_or_default();
        assert_eq!(
            stored,
            vec!["v1beta2".to_owned()],
            "{name}: status.storedVersions"
        );
        if crd.spec.versions.len() > 1 {
            let conversion = crd.spec.conversion.as_ref().context("conversion")?;
            assert_eq!(conversion.strategy, "Webhook", "{name}");
            let cc = conversion
                .webhook
                .as_ref()
                .and_then(|w| w.client_config.as_ref())
                .context("clientConfig")?;
            let url = cc.url.as_deref().unwrap_or_default();
            assert!(
                url.starts_with("https://127.0.0.1:") && url.ends_with("/convert"),
                "{name}: url {url}"
            );
            assert!(
                cc.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty()),
                "{name}: caBundle must be set"
            );
        }
        let labels = crd.metadata.labels.unwrap_or_default();
        assert!(
            labels.contains_key("cluster.x-k8s.io/provider"),
            "{name}: provider label"
        );
        if name.contains("kubeadm") {
            // Contract label CAPI core resolves references with (from the provider's kustomization).
            assert_eq!(
                labels.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
                Some("v1beta2"),
                "{name}"
            );
        }
    }
    Ok(())
}

fn machine_deployment(ns: &str, name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "clusterName": "demo",
            "template": {
                "spec": {
                    "clusterName": "demo",
                    "version": "1.34.4",
                    "bootstrap": {"dataSecretName": "demo-bootstrap"},
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "KKMachineTemplate",
                        "name": "demo-workers"
                    }
                }
            }
        }
    })
}

#[tokio::test]
async fn machine_deployment_without_selector_is_defaulted_by_the_capi_webhook() -> anyhow::Result<()> {
    let client = common::client().await?;
    let ns = common::namespace(&client, "md-default").await?;
    let md = common::create(&client, &ns, machine_deployment(&ns, "workers")).await?;
    let spec = &md.data["spec"];
    // Everything below is set by CAPI core's mutating webhook (the CRD schema has no such defaults).
    let want_labels = json!({
        "cluster.x-k8s.io/cluster-name": "demo",
        "cluster.x-k8s.io/deployment-name": "workers"
    });
    assert_eq!(spec["selector"]["matchLabels"], want_labels, "selector: {spec}");
    assert_eq!(
        spec["template"]["metadata"]["labels"], want_labels,
        "template labels: {spec}"
    );
    assert_eq!(
        md.metadata.labels.unwrap_or_default()["cluster.x-k8s.io/cluster-name"],
        "demo"
    );
    assert_eq!(spec["replicas"], 1, "replicas: {spec}");
    assert_eq!(spec["rollout"]["strategy"]["type"], "RollingUpdate", "{spec}");
    assert_eq!(
        spec["template"]["spec"]["version"], "v1.34.4",
        "version gets its v prefix: {spec}"
    );
    Ok(())
}

#[tokio::test]
async fn machine_deployment_with_mismatched_selector_is_rejected_by_the_capi_webhook() -> anyhow::Result<()> {
    let client = common::client().await?;
    let ns = common::namespace(&client, "md-invalid").await?;
    let mut md = machine_deployment(&ns, "bad");
    md["spec"]["selector"] = json!({"matchLabels": {"pool": "a"}});
    md["spec"]["template"]["metadata"] = json!({"labels": {"pool": "b"}});
    let message = common::create_rejected(&client, &ns, md).await?;
    assert!(
        message.contains("admission webhook"),
        "rejected by a webhook: {message}"
    );
    assert!(
        message.contains("selector"),
        "message names the selector: {message}"
    );
    Ok(())
}

#[tokio::test]
async fn cluster_created_as_v1beta2_is_readable_as_v1beta1_through_the_conversion_webhook()
-> anyhow::Result<()> {
    let client = common::client().await?;
    let ns = common::namespace(&client, "conversion").await?;
    common::create(
        &client,
        &ns,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": "conv", "namespace": ns},
            "spec": {
                "paused": true,
                "controlPlaneRef": {
                    "apiGroup": "controlplane.cluster.x-k8s.io",
                    "kind": "KubeadmControlPlane",
                    "name": "conv"
                }
            }
        }),
    )
    .await?;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"));
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client, &ns, &ar);
    let old = common::eventually("v1beta1 view of the Cluster", Duration::from_secs(30), || async {
        Ok(Some(api.get("conv").await?))
    })
    .await?;
    assert_eq!(
        old.types.as_ref().map(|t| t.api_version.as_str()),
        Some("cluster.x-k8s.io/v1beta1")
    );
    // v1beta1 references carry apiVersion (resolved by CAPI from the referenced CRD's contract label)
    // instead of apiGroup.
    let cp = &old.data["spec"]["controlPlaneRef"];
    assert_eq!(cp["apiVersion"], "controlplane.cluster.x-k8s.io/v1beta2", "{cp}");
    assert_eq!(cp["kind"], "KubeadmControlPlane");
    assert_eq!(cp["name"], "conv");
    assert_eq!(old.data["spec"]["paused"], true);
    Ok(())
}

#[tokio::test]
async fn up_is_idempotent_and_concurrent_callers_share_one_plane() -> anyhow::Result<()> {
    let first = capkk_mgmt::ManagementPlane::shared().await?;
    let (a, b) = tokio::join!(
        capkk_mgmt::ManagementPlane::up(),
        capkk_mgmt::ManagementPlane::up()
    );
    let (a, b) = (a?, b?);
    assert_eq!(a.kubeconfig_path(), first.kubeconfig_path());
    assert_eq!(b.kubeconfig_path(), first.kubeconfig_path());
    let version = a.client().await?.apiserver_version().await?;
    assert_eq!(version.major, "1");
    Ok(())
}

#[tokio::test]
async fn garbage_collector_deletes_dependents_of_a_deleted_owner() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DeleteParams, PostParams};

    let client = common::client().await?;
    let ns = common::namespace(&client, "gc").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}}))?,
        )
        .await?;
    let uid = owner.metadata.uid.context("owner uid")?;
    let dependent = json!({"metadata": {"name": "dependent", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
    ]}});
    cms.create(&PostParams::default(), &serde_json::from_value(dependent)?)
        .await?;
    cms.delete("owner", &DeleteParams::default()).await?;
    common::eventually(
        "the dependent ConfigMap to be garbage collected",
        Duration::from_secs(60),
        || async { Ok(cms.get_opt("dependent").await?.is_none().then_some(())) },
    )
    .await
}

#[tokio::test]
async fn apply_helper_server_side_applies_any_kind_idempotently() -> anyhow::Result<()> {
    let client = common::client().await?;
    let ns = common::namespace(&client, "apply").await?;
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v1"}});
    let first = capkk_mgmt::apply(&client, &ns, &cm).await?;
    let again = capkk_mgmt::apply(&client, &ns, &cm).await?;
    assert_eq!(
        first.metadata.resource_version, again.metadata.resource_version,
        "no-op re-apply"
    );
    let changed =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v2"}});
    let updated = capkk_mgmt::apply(&client, &ns, &changed).await?;
    assert_eq!(updated.data["data"]["k"], "v2");
    let managers = updated.metadata.managed_fields.unwrap_or_default();
    assert!(
        managers
            .iter()
            .any(|m| m.manager.as_deref() == Some(capkk_mgmt::FIELD_MANAGER))
    );
    let err = capkk_mgmt::apply(&client, &ns, &json!({"apiVersion": "v1", "kind": "ConfigMap"}))
        .await
        .expect_err("object without a name");
    assert!(err.to_string().contains("metadata.name"), "{err}");
    Ok(())
}
