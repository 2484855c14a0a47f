//! MachineHealthCheck remediation of a worker on a sandbox host (issue 24, deliverable 4) against the real
//! CAPI controllers: the kubelet stops (`systemctl stop kubelet` on the host) and its Node goes Unknown (set by
//! the test: the simulated workload cluster runs no node lifecycle controller); with a KKRemediationTemplate,
//! CAPI creates a KKRemediation, the restart tier restarts containerd and the kubelet over SSH, the kubelet
//! reports the Node Ready again and CAPI deletes the KKRemediation: the same Machine. Then the same failure
//! under a MachineHealthCheck without a template: CAPI deletes the Machine, the host is reset and freed, and the
//! replacement claims it.

mod common;

use std::time::{Duration, Instant};

use anyhow::ensure;
use common::{day2::*, sandbox::inside, *};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

const CLUSTER: &str = "hr";

/// What a node lifecycle controller does to a Node whose kubelet stopped reporting.
async fn mark_unknown(workload: &kube::Client, node: &str) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status (set by the test)",
        "lastHeartbeatTime": now, "lastTransitionTime": now
    }]}});
    Api::<Node>::all(workload.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unhealthy_workers_kubelet_is_restarted_over_ssh_by_a_kk_remediation_and_without_a_template_the_machine_is_replaced_on_its_reset_host()
-> anyhow::Result<()> {
    let t0 = Instant::now();
    let Some((env, hosts)) = TestEnv::with_hosts("hostremed", "ctl-hremed", 2).await? else {
        return Ok(());
    };
    let component = publish_releases(&env, &hosts, &[NEW]).await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=5s"])?;
    workload_cluster(&env, &hosts, &component, CLUSTER, NEW, 1, (0, 1)).await?;
    let before = workers_running(&env, CLUSTER, 1, Duration::from_secs(120))
        .await?
        .remove(0);
    let machine = name(&before);
    let node_name = before["status"]["nodeRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let km = env
        .get(INFRA_V, "KKMachine", &kkmachine_of(&before))
        .await?
        .unwrap_or_default();
    let inst = km["spec"]["instanceID"].as_str().unwrap_or_default().to_owned();
    let host = worker_host(&hosts);
    let workload = workload_client(&env, CLUSTER).await?;
    eprintln!("remediation: cluster up: {:.1} s", t0.elapsed().as_secs_f64());

    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKRemediationTemplate",
        "metadata": {"name": "restart"},
        "spec": {"template": {"spec": {"strategy": {"type": "Tiered", "retryLimit": 2, "timeout": "30s"}}}}
    }))
    .await?;
    let mhc = |template: bool| {
        let mut m = json!({
            "apiVersion": CAPI_V, "kind": "MachineHealthCheck",
            "metadata": {"name": format!("{CLUSTER}-workers")},
            "spec": {
                "clusterName": CLUSTER,
                "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": format!("{CLUSTER}-md")}},
                "checks": {"unhealthyNodeConditions": [
                    {"type": "Ready", "status": "Unknown", "timeoutSeconds": 5},
                    {"type": "Ready", "status": "False", "timeoutSeconds": 5}
                ]}
            }
        });
        if template {
            m["spec"]["remediation"] = json!({"templateRef": {
                "apiVersion": INFRA_V, "kind": "KKRemediationTemplate", "name": "restart"}});
        }
        m
    };
    env.apply(mhc(true)).await?;

    // (a) The kubelet stops; the restart tier brings it back.
    let t_a = Instant::now();
    inside(&host, "systemctl stop kubelet");
    mark_unknown(&workload, &node_name).await?;
    let rem = eventually(
        "CAPI created KKRemediation for the worker",
        Duration::from_secs(40),
        || async { env.get(INFRA_V, "KKRemediation", &machine).await },
    )
    .await?;
    ensure!(
        rem["metadata"]["ownerReferences"][0]["name"] == machine.as_str(),
        "owned by the Machine: {}",
        rem["metadata"]
    );
    let rem = eventually(
        "the restart tier ran (ServicesRestarted True)",
        Duration::from_secs(40),
        || async {
            let r = env.get(INFRA_V, "KKRemediation", &machine).await?;
            // CAPI may already have deleted it once the Node was Ready again.
            Ok(match r {
                Some(r) => (cond_state(&r, "ServicesRestarted").0 == "True").then_some(Some(r)),
                None => Some(None),
            })
        },
    )
    .await?;
    if let Some(r) = &rem {
        eprintln!(
            "remediation: KKRemediation conditions: {}",
            r["status"]["conditions"]
        );
    }
    let calls = host.systemctl_calls()?.join("\n");
    ensure!(
        calls.contains("restart containerd") && calls.contains("restart kubelet"),
        "the restart tier ran over SSH:\n{calls}"
    );
    eventually("the Node is Ready again", Duration::from_secs(30), || async {
        Ok((node_state(&node(&workload, &node_name).await?).1 == "True").then_some(()))
    })
    .await?;
    eventually(
        "CAPI deleted the KKRemediation (the Machine is healthy)",
        Duration::from_secs(60),
        || async {
            Ok(env
                .get(INFRA_V, "KKRemediation", &machine)
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    let m = env.get(CAPI_V, "Machine", &machine).await?.unwrap_or_default();
    ensure!(
        m["metadata"]["uid"] == before["metadata"]["uid"],
        "the same Machine"
    );
    ensure!(
        !host.systemctl_calls()?.join("\n").contains("disable kubelet"),
        "no reset"
    );
    eprintln!(
        "remediation: (a) restarted, Ready, KKRemediation gone: {:.1} s",
        t_a.elapsed().as_secs_f64()
    );

    // (b) Without a template CAPI replaces the Machine: the host is reset, freed and claimed again.
    let t_b = Instant::now();
    env.delete(CAPI_V, "MachineHealthCheck", &format!("{CLUSTER}-workers"))
        .await?;
    env.apply(mhc(false)).await?;
    inside(&host, "systemctl stop kubelet");
    mark_unknown(&workload, &node_name).await?;
    let replaced = eventually(
        "the worker Machine replaced and Running on the reset host",
        Duration::from_secs(150),
        || async {
            let ms = workers(&env, CLUSTER).await?;
            let [m] = ms.as_slice() else { return Ok(None) };
            Ok((m["metadata"]["uid"] != before["metadata"]["uid"]
                && m["status"]["phase"] == "Running"
                && !m["status"]["nodeRef"]["name"].is_null())
            .then(|| m.clone()))
        },
    )
    .await?;
    ensure!(
        env.get(CAPI_V, "Machine", &machine).await?.is_none(),
        "the unhealthy Machine was deleted"
    );
    let km = env
        .get(INFRA_V, "KKMachine", &kkmachine_of(&replaced))
        .await?
        .unwrap_or_default();
    ensure!(
        km["spec"]["instanceID"] == inst.as_str(),
        "the replacement claimed the freed host: {}",
        km["spec"]
    );
    ensure!(
        host.systemctl_calls()?.join("\n").contains("disable kubelet"),
        "the host was reset before it was claimed again"
    );
    ensure!(
        env.list(INFRA_V, "KKRemediation").await?.is_empty(),
        "no KKRemediation without a template"
    );
    eprintln!(
        "remediation: (b) replaced on the reset host: {:.1} s",
        t_b.elapsed().as_secs_f64()
    );

    ensure!(mgr.running(), "the manager kept running");
    mgr.terminate();
    env.finish().await;
    eprintln!("remediation: total {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}
