//! `clusterctl move` of a provisioned cluster to a second management plane, with the real clusterctl: the
//! SSH credential Secret moves because it carries the `clusterctl.cluster.x-k8s.io/move` label, the KKMachine
//! reports provisioned again on the target (from the KKInstance's annotations; status does not move), and
//! nothing runs on the host again: not the bootstrap commands, not a host phase, not the reset of a
//! cleanup on the source.
//!
//! The target plane is started by the test (its own state directory and ports) and torn down at the end.
//! Neither plane was made by `clusterctl init` (see docs/clusterctl.md), so the test does the one part of it
//! that move needs: the `clusterctl.cluster.x-k8s.io` label on the CRDs (move discovers its types by that
//! label). The provider inventory stays empty on both sides (clusterctl creates its CRD; with no providers
//! recorded, the target check has nothing to compare).

mod common;

use std::{path::Path, time::Duration};

use anyhow::{Context, ensure};
use common::{sandbox::*, *};
use k8s_openapi::{
    api::core::v1::Node, apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

const RUNS: &str = "/root/capkk-move-runs";
const MOVE_LABEL: &str = "clusterctl.cluster.x-k8s.io/move";

fn bootstrap_data() -> String {
    format!(
        "#cloud-config\nruncmd:\n- echo ran >> {RUNS}\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"
    )
}

/// What `clusterctl init` would have put on the CRDs: the label move discovers its types by.
async fn label_crds_for_clusterctl(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds.list(&ListParams::default()).await? {
        let group = &crd.spec.group;
        if group.ends_with("cluster.x-k8s.io") && !crd.labels().contains_key("clusterctl.cluster.x-k8s.io") {
            crds.patch(
                &crd.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"clusterctl.cluster.x-k8s.io": ""}}})),
            )
            .await?;
        }
    }
    Ok(())
}

async fn label_for_move(env: &TestEnv, secret: &str) -> anyhow::Result<()> {
    env.merge(
        "v1",
        "Secret",
        secret,
        json!({"metadata": {"labels": {MOVE_LABEL: ""}}}),
    )
    .await
}

async fn clusterctl_move(from: &Path, to: &Path, ns: &str, log: &Path) -> anyhow::Result<()> {
    let clusterctl = capkk_mgmt::bin_dir().await?.join("clusterctl");
    let home = log.parent().context("log dir")?.join("clusterctl-home");
    std::fs::create_dir_all(&home)?;
    let out = tokio::process::Command::new(&clusterctl)
        .args(["move", "-n", ns, "-v", "3", "--kubeconfig"])
        .arg(from)
        .arg("--to-kubeconfig")
        .arg(to)
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), out)
        .await
        .context("clusterctl move did not finish in 300 s")??;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(log, &text)?;
    ensure!(out.status.success(), "clusterctl move failed: {text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_provisioned_cluster_moves_to_another_plane_and_nothing_runs_again_on_the_host()
-> anyhow::Result<()> {
    let Some((env, sandbox)) = TestEnv::with_hosts("move", "ctl-move", 1).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    let host = sandbox.sb.hosts().remove(0);
    let _ = inside(&host, &format!("rm -f {RUNS}"));
    label_for_move(&env, "ssh-auth").await?;
    env.bootstrap_data("bootstrap-data", &bootstrap_data()).await?;
    label_for_move(&env, "bootstrap-data").await?;
    env.cluster(
        "mv",
        &sandbox.inventory(),
        json!({"component": sandbox.component}),
    )
    .await?;
    // clusterctl moves only a cluster whose control plane is initialized and whose Machines have a nodeRef:
    // the management plane stands in for the workload cluster (`mv-kubeconfig` is its admin kubeconfig, the
    // Node is named after the host); the KKMachine patches the Node's providerID, CAPI then sets the nodeRef
    // and, the Machine being a control-plane one, ControlPlaneInitialized.
    let nodes: Api<Node> = Api::all(env.client.clone());
    let node_name = host.info.name.clone();
    let _ = nodes.delete(&node_name, &Default::default()).await;
    eventually("no stale Node", Duration::from_secs(30), || async {
        Ok(nodes.get_opt(&node_name).await?.is_none().then_some(()))
    })
    .await?;
    nodes
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": node_name}}))?,
        )
        .await?;
    let plane = capkk_mgmt::ManagementPlane::shared().await?;
    let admin_kc = std::fs::read_to_string(plane.kubeconfig_path())?;
    env.secret("mv-kubeconfig", &[("value", &admin_kc)]).await?;
    // CAPI's managers see only Secrets with the cluster-name label (their cache is filtered by it).
    env.merge(
        "v1",
        "Secret",
        "mv-kubeconfig",
        json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "mv"}}}),
    )
    .await?;
    env.machine("mv", "m", "control-plane", Some("bootstrap-data"))
        .await?;
    let mut source = env.manager("source", &["--ssh-connect-timeout=5s"])?;
    let inst_name = env.claimed_instance("m").await?;

    let km = eventually(
        "KKMachine provisioned on the source plane",
        Duration::from_secs(180),
        || async {
            let k = env.get(INFRA_V, "KKMachine", "m").await?.unwrap_or_default();
            Ok((k["status"]["initialization"]["provisioned"] == true).then_some(k))
        },
    )
    .await?;
    let provider_id = km["spec"]["providerID"].clone();
    ensure!(provider_id.is_string(), "providerID set: {}", km["spec"]);
    // The claim's record as the move will find it: read once the host work is done (block-move released),
    // since the journal of completed phases is still being written while the KKMachine already has its
    // providerID.
    let inst_before = eventually(
        "block-move released once the host work is done",
        Duration::from_secs(60),
        || async {
            let Some(i) = env.get(INFRA_V, "KKInstance", &inst_name).await? else {
                return Ok(None);
            };
            Ok(
                i["metadata"]["annotations"]["clusterctl.cluster.x-k8s.io/block-move"]
                    .is_null()
                    .then_some(i),
            )
        },
    )
    .await?;
    ensure!(
        inside(&host, &format!("cat {RUNS}")) == "ran\n",
        "the bootstrap commands ran once"
    );
    let kernel_log_before = inside(&host, "cat /var/log/capkk-fake-kernel.log 2>/dev/null");
    eventually(
        "Machine nodeRef and Cluster ControlPlaneInitialized (what clusterctl move requires)",
        Duration::from_secs(120),
        || async {
            let m = env.get(CAPI_V, "Machine", "m").await?.unwrap_or_default();
            let c = env.get(CAPI_V, "Cluster", "mv").await?.unwrap_or_default();
            Ok((m["status"]["nodeRef"]["name"] == node_name.as_str()
                && cond_state(&c, "ControlPlaneInitialized").0 == "True")
                .then_some(()))
        },
    )
    .await?;

    // The target plane, with our CRDs and a manager of its own.
    let target = capkk_mgmt::SecondPlane::up("move-target").await?;
    let target_client = target.plane().client().await?;
    capkk_mgmt::install_crds(&target_client, &capkk_mgmt::repo_root().join("config/crd/bases")).await?;
    label_crds_for_clusterctl(&env.client).await?;
    label_crds_for_clusterctl(&target_client).await?;
    let cache = format!("--artifact-cache-dir={}", env.dir.join("cache-target").display());
    let mut dest = Manager::start(
        target.plane().kubeconfig_path(),
        &env.dir,
        "target",
        &["--namespace", &ns, "--ssh-connect-timeout=5s", &cache],
    )?;

    let source_kubeconfig = capkk_mgmt::ManagementPlane::shared()
        .await?
        .kubeconfig_path()
        .to_owned();
    clusterctl_move(
        &source_kubeconfig,
        target.plane().kubeconfig_path(),
        &ns,
        &env.dir.join("clusterctl-move.log"),
    )
    .await?;

    // Everything left the source, without a cleanup.
    for (v, k, n) in [
        (CAPI_V, "Cluster", "mv"),
        (CAPI_V, "Machine", "m"),
        (INFRA_V, "KKCluster", "mv"),
        (INFRA_V, "KKMachine", "m"),
        (INFRA_V, "KKInstance", inst_name.as_str()),
        ("v1", "Secret", "ssh-auth"),
        ("v1", "Secret", "mv-kubeconfig"),
    ] {
        ensure!(
            env.get(v, k, n).await?.is_none(),
            "{k} {n} is still on the source plane"
        );
    }

    // On the target: the credential Secret, the claim with its journal, and a provisioned KKMachine.
    let t = |v: &'static str, k: &'static str, n: String| {
        let c = target_client.clone();
        let ns = ns.clone();
        async move { get(&c, &ns, v, k, &n).await }
    };
    ensure!(
        t("v1", "Secret", "ssh-auth".into()).await?.is_some(),
        "the labelled SSH credential Secret moved"
    );
    let inst_after = t(INFRA_V, "KKInstance", inst_name.clone())
        .await?
        .context("the claim moved")?;
    let journal = |i: &serde_json::Value| -> Vec<(String, String)> {
        i["metadata"]["annotations"]
            .as_object()
            .map(|a| {
                a.iter()
                    .filter(|(k, _)| k.starts_with("kkinstance.infrastructure.cluster.x-k8s.io/"))
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    ensure!(
        !journal(&inst_before).is_empty() && journal(&inst_after) == journal(&inst_before),
        "the host's record moved with the claim: before {:?}, after {:?}",
        journal(&inst_before),
        journal(&inst_after)
    );
    let km_after = eventually(
        "KKMachine provisioned again on the target plane",
        Duration::from_secs(120),
        || {
            let t = &t;
            async move {
                let k = t(INFRA_V, "KKMachine", "m".into()).await?.unwrap_or_default();
                Ok((k["status"]["initialization"]["provisioned"] == true).then_some(k))
            }
        },
    )
    .await?;
    ensure!(
        km_after["spec"]["providerID"] == provider_id,
        "same providerID after the move"
    );
    let inst_state = eventually(
        "KKInstance reports Running on the target plane",
        Duration::from_secs(60),
        || {
            let t = &t;
            let inst_name = inst_name.clone();
            async move {
                let i = t(INFRA_V, "KKInstance", inst_name).await?.unwrap_or_default();
                Ok((i["status"]["state"] == "running").then_some(i))
            }
        },
    )
    .await?;
    ensure!(
        inst_state["metadata"]["annotations"]["clusterctl.cluster.x-k8s.io/block-move"].is_null(),
        "no host work started on the target"
    );

    // Nothing ran again on the host, from either side.
    ensure!(
        inside(&host, &format!("cat {RUNS}")) == "ran\n",
        "the bootstrap commands did not run again"
    );
    ensure!(
        inside(&host, "cat /var/log/capkk-fake-kernel.log 2>/dev/null") == kernel_log_before,
        "no host phase ran again"
    );
    ensure!(
        inside(
            &host,
            "test -e /run/cluster-api/bootstrap-success.complete && echo kept"
        ) == "kept\n",
        "the host was not reset"
    );
    let (source_logs, dest_logs) = (source.logs(), dest.logs());
    // The source manager ran them (6 phases: bootstrap .. loadbalancer, provisioning); the target none.
    for step in ["step 1/6", "step 6/6"] {
        ensure!(
            source_logs.contains(step),
            "the source manager logged {step}: the check below could not fail"
        );
        ensure!(!dest_logs.contains(step), "the target manager ran {step}");
    }
    for line in ["Resetting the host", "Freeing the host", "Quarantining the host"] {
        ensure!(!source_logs.contains(line), "the source manager logged {line:?}");
    }
    source.terminate();
    dest.terminate();
    let _ = nodes.delete(&node_name, &Default::default()).await;
    env.assert_no_canary(&[&sandbox.key_canary()], &[source_logs, dest_logs])
        .await?;
    drop(target_client);
    target.down().await?;
    env.finish().await;
    Ok(())
}
