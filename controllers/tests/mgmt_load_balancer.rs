//! Issue 41 on the local management plane, with the manager's ClusterRole of config/rbac and the real KCP
//! controller: a Cluster whose KubeadmControlPlane asks for 3 replicas with no load balancer is refused loudly
//! (KKCluster `EndpointReady` and `Ready` False `NoLoadBalancer` naming `spec.controlPlaneLoadBalancer`, a
//! Warning event: the replica count is read from the KubeadmControlPlane the Cluster's `controlPlaneRef` names),
//! and a KKCluster whose endpoint the provider serves (`type: Keepalived`) publishes the VIP with haproxy's port
//! and reports `LoadBalancerReady` while it has no control-plane host yet.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_control_planes_without_a_load_balancer_are_refused_and_a_keepalived_vip_is_published()
-> anyhow::Result<()> {
    let env = TestEnv::new("lb").await?;
    let ns = env.ns.clone();
    // Hosts that are never reached: the decisions here come before any host work.
    let host = |n: &str, a: &str| (n.to_owned(), a.to_owned(), 22);
    env.apply(cluster(
        &ns,
        "nolb",
        json!({"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "nolb-cp"}}),
    ))
    .await?;
    env.apply(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {"name": "nolb-cp", "namespace": ns},
        "spec": {
            "replicas": 3,
            "version": "v1.36.3",
            "machineTemplate": {"spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachineTemplate", "name": "nolb-cp"}}},
            "kubeadmConfigSpec": {"initConfiguration": {"nodeRegistration": {"name": "{{ ds.meta_data.local_hostname }}"}}}
        }
    }))
    .await?;
    env.apply(kkcluster(
        &ns,
        "nolb",
        &[host("cp-1", "198.18.200.11"), host("cp-2", "198.18.200.12")],
        json!({}),
    ))
    .await?;
    env.apply(cluster(&ns, "vip", json!({}))).await?;
    env.apply(kkcluster(
        &ns,
        "vip",
        &[host("cp-1", "198.18.201.11")],
        json!({"controlPlaneLoadBalancer": {"host": "198.18.201.100", "type": "Keepalived"}}),
    ))
    .await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=2s"])?;

    let refused = eventually(
        "KKCluster nolb refuses 3 control planes with no load balancer",
        Duration::from_secs(60),
        || async {
            let k = env.get(INFRA_V, "KKCluster", "nolb").await?;
            Ok(k.filter(|k| cond_state(k, "EndpointReady").1 == "NoLoadBalancer"))
        },
    )
    .await?;
    assert_eq!(
        cond_state(&refused, "EndpointReady"),
        ("False".to_owned(), "NoLoadBalancer".to_owned())
    );
    assert_eq!(
        cond_state(&refused, "Ready"),
        ("False".to_owned(), "NoLoadBalancer".to_owned()),
        "the Cluster's InfrastructureReady mirrors it"
    );
    let message = condition(&refused, "EndpointReady")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default();
    assert!(
        message.contains("3 control planes") && message.contains("spec.controlPlaneLoadBalancer"),
        "{message}"
    );
    eventually(
        "a Warning event NoLoadBalancer about KKCluster nolb",
        Duration::from_secs(30),
        || async {
            let events = env.list("events.k8s.io/v1", "Event").await?;
            Ok(events
                .into_iter()
                .find(|e| {
                    e["reason"] == "NoLoadBalancer"
                        && e["type"] == "Warning"
                        && e["regarding"]["name"] == "nolb"
                        && e["note"]
                            .as_str()
                            .is_some_and(|n| n.contains("spec.controlPlaneLoadBalancer"))
                })
                .map(|_| ()))
        },
    )
    .await?;

    let served = eventually(
        "KKCluster vip publishes the VIP with haproxy's port",
        Duration::from_secs(60),
        || async {
            let k = env.get(INFRA_V, "KKCluster", "vip").await?;
            Ok(k.filter(|k| condition(k, "LoadBalancerReady").is_some()))
        },
    )
    .await?;
    assert_eq!(
        served["spec"]["controlPlaneEndpoint"],
        json!({"host": "198.18.201.100", "port": 8443})
    );
    assert_eq!(
        cond_state(&served, "LoadBalancerReady"),
        ("False".to_owned(), "InProgress".to_owned()),
        "no control-plane host claimed yet"
    );
    assert_eq!(cond_state(&served, "EndpointReady").0, "True");

    mgr.terminate();
    env.finish().await;
    Ok(())
}
