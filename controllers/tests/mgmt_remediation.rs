//! CAPI's external remediation contract end to end on the real management plane: a MachineHealthCheck whose
//! `remediation.templateRef` names a KKRemediationTemplate makes CAPI's own controller create a KKRemediation
//! for an unhealthy Machine (marked with `cluster.x-k8s.io/remediate-machine`), named after it, owned by it and
//! carrying the template's spec; the manager, with exactly config/rbac/role.yaml's rights, finds no host behind
//! the Machine (its KKMachine never got bootstrap data) and hands it to its owner: the Machine's
//! `OwnerRemediated` condition is False with CAPI's reason, next to the MachineHealthCheck's own
//! `HealthCheckSucceeded`. The tiers on a host are reconcile-tested (controllers/src/reconcile_tests) and run
//! on VMs. No SSH needed (the host is a loopback address on a closed port and never claimed).

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_machine_health_check_with_a_kk_remediation_template_makes_capi_create_a_kk_remediation_that_hands_a_hostless_machine_to_its_owner()
-> anyhow::Result<()> {
    let env = TestEnv::new("remed").await?;
    env.secret("ssh-auth", &[("password", "canary-pw-remed-3c")])
        .await?;
    env.cluster("r", &[("r1".into(), "127.0.4.2".into(), 1)], json!({}))
        .await?;
    env.machine("r", "w", "worker", None).await?;
    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKRemediationTemplate",
        "metadata": {"name": "kkr"},
        "spec": {"template": {"spec": {"strategy": {"type": "Reboot", "retryLimit": 3, "timeout": "5m"}}}}
    }))
    .await?;
    env.apply(json!({
        "apiVersion": CAPI_V, "kind": "MachineHealthCheck",
        "metadata": {"name": "r-workers"},
        "spec": {
            "clusterName": "r",
            "selector": {"matchLabels": {"remediation-test": "w"}},
            "checks": {"unhealthyNodeConditions": [{"type": "Ready", "status": "Unknown", "timeoutSeconds": 300}]},
            "remediation": {"templateRef": {
                "apiVersion": INFRA_V, "kind": "KKRemediationTemplate", "name": "kkr"
            }}
        }
    }))
    .await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=2s"])?;
    // The Machine is selected and marked for remediation (what a person or a tool does to force one).
    env.merge(
        CAPI_V,
        "Machine",
        "w",
        json!({"metadata": {
            "labels": {"remediation-test": "w"},
            "annotations": {"cluster.x-k8s.io/remediate-machine": ""}
        }}),
    )
    .await?;

    let rem = eventually(
        "CAPI's MachineHealthCheck created KKRemediation w",
        Duration::from_secs(40),
        || async { env.get(INFRA_V, "KKRemediation", "w").await },
    )
    .await?;
    let owner = &rem["metadata"]["ownerReferences"][0];
    ensure!(
        owner["kind"] == "Machine" && owner["name"] == "w",
        "owned by its Machine: {}",
        rem["metadata"]
    );
    ensure!(
        rem["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "r",
        "labelled with its cluster: {}",
        rem["metadata"]
    );
    ensure!(
        rem["spec"]["strategy"] == json!({"type": "Reboot", "retryLimit": 3, "timeout": "5m"}),
        "the template's spec: {}",
        rem["spec"]
    );

    let rem = eventually(
        "KKRemediation w gave the Machine to its owner",
        Duration::from_secs(40),
        || async {
            let r = env.get(INFRA_V, "KKRemediation", "w").await?.unwrap_or_default();
            Ok((r["status"]["phase"] == "Failed").then_some(r))
        },
    )
    .await?;
    let (status, reason) = cond_state(&rem, "OwnerRemediationRequested");
    ensure!(
        status == "True" && reason == "NoHost",
        "OwnerRemediationRequested: {}",
        rem["status"]
    );
    let machine = eventually(
        "Machine w has OwnerRemediated False and HealthCheckSucceeded False",
        Duration::from_secs(20),
        || async {
            let m = env.get(CAPI_V, "Machine", "w").await?.unwrap_or_default();
            let owner = cond_state(&m, "OwnerRemediated");
            let health = cond_state(&m, "HealthCheckSucceeded");
            Ok((owner.0 == "False" && health.0 == "False").then_some(m))
        },
    )
    .await?;
    ensure!(
        cond_state(&machine, "OwnerRemediated").1 == "WaitingForRemediation",
        "CAPI's reason, so its MachineSet or KubeadmControlPlane remediates: {}",
        machine["status"]
    );
    ensure!(mgr.running(), "the manager kept running");
    mgr.terminate();
    env.finish().await;
    Ok(())
}
