//! A rolling upgrade with host reuse (issue 24, deliverable 2) against the real CAPI controllers: a
//! MachineDeployment worker (maxSurge 0, maxUnavailable 1, one worker host) on a sandbox host at [`OLD`]; its
//! version bumped to [`NEW`] with no in-place extension registered, CAPI rolls: the old Machine is deleted, its
//! host reset and freed, the new Machine claims the same host, and the host must then run the new release's
//! kubelet and kubeadm (a reset keeps /usr/local/bin: this test fails if the old kubelet stays), which the
//! kubelet stand-in reports on the Node.

mod common;

use std::time::{Duration, Instant};

use anyhow::ensure;
use common::{day2::*, sandbox::inside, *};
use serde_json::json;

const CLUSTER: &str = "rl";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_bump_rolls_the_worker_onto_its_reset_host_which_then_runs_the_new_releases_kubelet()
-> anyhow::Result<()> {
    let t0 = Instant::now();
    let Some((env, hosts)) = TestEnv::with_hosts("rolling", "ctl-rolling", 2).await? else {
        return Ok(());
    };
    let component = publish_releases(&env, &hosts, &[OLD, NEW]).await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=5s"])?;
    workload_cluster(&env, &hosts, &component, CLUSTER, OLD, 1, (0, 1)).await?;
    let before = workers_running(&env, CLUSTER, 1, Duration::from_secs(120))
        .await?
        .remove(0);
    let km_before = env
        .get(INFRA_V, "KKMachine", &kkmachine_of(&before))
        .await?
        .unwrap_or_default();
    let inst = km_before["spec"]["instanceID"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let host = worker_host(&hosts);
    ensure!(
        host_kubelet_version(&host) == format!("Kubernetes {OLD}"),
        "the host runs {OLD}'s kubelet"
    );
    eprintln!(
        "rolling: cluster up at {OLD}: {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    let t_roll = Instant::now();
    env.merge(
        CAPI_V,
        "MachineDeployment",
        &format!("{CLUSTER}-md"),
        json!({"spec": {"template": {"spec": {"version": NEW}}}}),
    )
    .await?;
    let after = eventually(
        "a new worker Machine at NEW running on the freed host",
        Duration::from_secs(150),
        || async {
            let ms = workers(&env, CLUSTER).await?;
            let [m] = ms.as_slice() else { return Ok(None) };
            Ok((m["metadata"]["uid"] != before["metadata"]["uid"]
                && m["spec"]["version"] == NEW
                && m["status"]["phase"] == "Running"
                && !m["status"]["nodeRef"]["name"].is_null())
            .then(|| m.clone()))
        },
    )
    .await?;
    eprintln!(
        "rolling: {OLD} -> {NEW} rolled onto the reset host: {:.1} s",
        t_roll.elapsed().as_secs_f64()
    );
    ensure!(
        env.get(CAPI_V, "Machine", &name(&before)).await?.is_none(),
        "the old Machine is gone"
    );
    let km = env
        .get(INFRA_V, "KKMachine", &kkmachine_of(&after))
        .await?
        .unwrap_or_default();
    ensure!(
        km["spec"]["instanceID"] == inst.as_str(),
        "the new Machine claimed the freed host {inst}: {}",
        km["spec"]
    );
    let calls = host.systemctl_calls()?.join("\n");
    ensure!(
        calls.contains("disable kubelet"),
        "the host was reset before its reuse:\n{calls}"
    );
    ensure!(
        host_kubelet_version(&host) == format!("Kubernetes {NEW}"),
        "the reused host runs {NEW}'s kubelet, not the one the reset left: {}",
        host_kubelet_version(&host)
    );
    let kubeadm = inside(&host, "/usr/local/bin/kubeadm version -o short");
    ensure!(
        kubeadm.trim() == NEW,
        "the reused host runs {NEW}'s kubeadm: {kubeadm}"
    );
    let workload = workload_client(&env, CLUSTER).await?;
    let node_name = after["status"]["nodeRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    eventually(
        "the Node reports the new kubelet, Ready",
        Duration::from_secs(30),
        || async {
            Ok(
                (node_state(&node(&workload, &node_name).await?) == (NEW.to_owned(), "True".to_owned()))
                    .then_some(()),
            )
        },
    )
    .await?;

    ensure!(mgr.running(), "the manager kept running");
    mgr.terminate();
    env.finish().await;
    eprintln!("rolling: total {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}
