//! The workload cluster's Node, on the real plane with one sandbox host: once the host is provisioned and
//! `<cluster>-kubeconfig` exists (the management plane stands in for the workload cluster), the manager
//! builds one client for that cluster and watches its Nodes; the Node registering later is patched with
//! `spec.providerID` and recorded as the KKInstance's `status.nodeRef`. Every check runs and all failures
//! are reported together.

mod common;

use std::time::Duration;

use anyhow::bail;
use common::{sandbox::cloud_config, *};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registering_node_gets_its_provider_id_through_one_watched_workload_client_and_is_the_node_ref()
-> anyhow::Result<()> {
    let Some((env, hosts)) = TestEnv::with_hosts("wlnode", "ctl-wlnode", 1).await? else {
        return Ok(());
    };
    let node_name = hosts.sb.hosts().remove(0).info.name.clone();
    env.bootstrap_data("bd", &cloud_config(&[])).await?;
    env.cluster("w", &hosts.inventory(), json!({"component": hosts.component}))
        .await?;
    env.machine("w", "m1", "worker", Some("bd")).await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=5s"])?;
    let inst_name = env.claimed_instance("m1").await?;
    eventually("m1 provisioned", Duration::from_secs(120), || async {
        let k = env.get(INFRA_V, "KKMachine", "m1").await?.unwrap_or_default();
        Ok((k["status"]["initialization"]["provisioned"] == true).then_some(()))
    })
    .await?;

    // The Node is named after the host and has no providerID yet (a leftover of another run goes first).
    let nodes: kube::Api<Node> = kube::Api::all(env.client.clone());
    let _ = nodes.delete(&node_name, &Default::default()).await;
    eventually("old Node gone", Duration::from_secs(30), || async {
        Ok(nodes.get_opt(&node_name).await?.is_none().then_some(()))
    })
    .await?;
    // The kubeconfig comes first: the Node registering afterwards has to reach the manager through its watch
    // of the workload cluster (or a poll).
    let plane = capkk_mgmt::ManagementPlane::shared().await?;
    let admin_kc = std::fs::read_to_string(plane.kubeconfig_path())?;
    env.secret("w-kubeconfig", &[("value", &admin_kc)]).await?;
    let mut failed: Vec<String> = Vec::new();
    if let Err(e) = eventually(
        "the manager watches the workload cluster's Nodes",
        Duration::from_secs(90),
        || async {
            Ok(mgr
                .logs()
                .contains("Watching the workload cluster's Nodes")
                .then_some(()))
        },
    )
    .await
    {
        failed.push(format!("{e:#}"));
    }
    let node: Node = serde_json::from_value(json!({"metadata": {"name": node_name}}))?;
    nodes.create(&Default::default(), &node).await?;
    match eventually("Node providerID patched", Duration::from_secs(90), || async {
        let n = nodes.get(&node_name).await?;
        Ok(n.spec.and_then(|s| s.provider_id))
    })
    .await
    {
        Ok(pid) if pid == format!("kk:///w/{node_name}") => {}
        Ok(pid) => failed.push(format!("Node providerID {pid}, expected kk:///w/{node_name}")),
        Err(e) => failed.push(format!("{e:#}")),
    }
    if let Err(e) =
        eventually("KKInstance status.nodeRef", Duration::from_secs(60), || async {
            let i = env
                .get(INFRA_V, "KKInstance", &inst_name)
                .await?
                .unwrap_or_default();
            Ok((i["status"]["nodeRef"]["name"] == node_name.as_str()
                && i["status"]["nodeRef"]["kind"] == "Node")
                .then_some(()))
        })
        .await
    {
        failed.push(format!("{e:#}"));
    }
    let _ = nodes.delete(&node_name, &Default::default()).await;
    let log = mgr.logs();
    if !log.contains("Workload Node registered: waking its KKMachine") {
        failed.push("the Node watch did not wake the KKMachine".into());
    }
    let watches = log.matches("Watching the workload cluster's Nodes").count();
    if watches != 1 {
        failed.push(format!(
            "{watches} workload Node watches started: expected one cached client (and watch) for the cluster"
        ));
    }
    mgr.terminate();
    env.assert_no_canary(&[&hosts.key_canary()], &[log]).await?;
    if !failed.is_empty() {
        bail!("{} check(s) failed:\n- {}", failed.len(), failed.join("\n- "));
    }
    env.finish().await;
    Ok(())
}
