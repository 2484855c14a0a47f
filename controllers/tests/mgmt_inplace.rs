//! In-place upgrades through CAPI's own in-place update extension (issue 24, deliverable 3) against the real
//! CAPI v1.14 controllers of the local management plane (feature gates `InPlaceUpdates` + `RuntimeSDK`): the
//! manager serves `CanUpdateMachineSet`/`CanUpdateMachine`/`UpdateMachine` over TLS, registered by an
//! `ExtensionConfig` for the test's namespace ([`capkk_mgmt::RuntimeExtension`]). A worker of a
//! MachineDeployment (maxSurge 0, maxUnavailable 1: no spare host) runs on a sandbox host at [`OLD`]; its
//! version bumped to [`NEW`], CAPI asks our hooks, moves the Machine to the new MachineSet and calls
//! `UpdateMachine`: the host gets the new release's binaries over SSH, `kubeadm upgrade node` (the simulator)
//! and a kubelet restart, and the kubelet stand-in reports the new version on the Node. Same Machine UID, same
//! KKMachine, same providerID, no reset. Then a KKMachineTemplate change, which is not done in place: our hook
//! says no and CAPI rolls the worker onto the same host (reset, claimed again).

mod common;

use std::time::{Duration, Instant};

use anyhow::ensure;
use common::{day2::*, sandbox::inside, *};
use serde_json::json;

const CLUSTER: &str = "ip";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_version_bump_is_done_in_place_by_capis_update_hooks_on_the_same_host_and_a_template_change_rolls()
-> anyhow::Result<()> {
    let t0 = Instant::now();
    let Some((env, hosts)) = TestEnv::with_hosts("inplace", "ctl-inplace", 2).await? else {
        return Ok(());
    };
    let component = publish_releases(&env, &hosts, &[OLD, NEW]).await?;
    let ext = capkk_mgmt::RuntimeExtension::prepare(
        &env.dir.join("runtime-extension"),
        "127.0.0.1".parse()?,
        &capkk_mgmt::unique("inplace"),
        Some(&env.ns),
    )
    .await?;
    let mut args = ext.manager_args();
    args.push("--ssh-connect-timeout=5s".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut mgr = env.manager("manager", &args)?;
    let _unregister = Unregister(ext.clone());
    ext.register(&env.client).await?;
    let discovered = ext.discovered(&env.client, Duration::from_secs(60)).await?;
    let handlers: Vec<String> = discovered["status"]["handlers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| h["requestHook"]["hook"].as_str().unwrap_or_default().to_owned())
        .collect();
    ensure!(
        handlers == ["CanUpdateMachine", "CanUpdateMachineSet", "UpdateMachine"],
        "CAPI discovered our hooks: {handlers:?}"
    );
    eprintln!(
        "inplace: setup + extension discovered: {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    workload_cluster(&env, &hosts, &component, CLUSTER, OLD, 1, (0, 1)).await?;
    let before = workers_running(&env, CLUSTER, 1, Duration::from_secs(120))
        .await?
        .remove(0);
    let machine = name(&before);
    let node_name = before["status"]["nodeRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let workload = workload_client(&env, CLUSTER).await?;
    eventually(
        "the worker's Node reports the old kubelet",
        Duration::from_secs(30),
        || async { Ok((node_state(&node(&workload, &node_name).await?).0 == OLD).then_some(())) },
    )
    .await?;
    let km_before = env
        .get(INFRA_V, "KKMachine", &kkmachine_of(&before))
        .await?
        .unwrap_or_default();
    let inst = km_before["spec"]["instanceID"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let host = host_at(
        &hosts,
        km_before["status"]["addresses"][0]["address"]
            .as_str()
            .unwrap_or_default(),
    )
    .or_else(|_| Ok::<_, anyhow::Error>(worker_host(&hosts)))?;
    ensure!(
        host_kubelet_version(&host) == format!("Kubernetes {OLD}"),
        "the host runs {OLD}'s kubelet"
    );
    let t_up = Instant::now();
    eprintln!(
        "inplace: cluster up at {OLD}: {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // The upgrade: only the version changes.
    env.merge(
        CAPI_V,
        "MachineDeployment",
        &format!("{CLUSTER}-md"),
        json!({"spec": {"template": {"spec": {"version": NEW}}}}),
    )
    .await?;
    let after = eventually(
        "the worker Machine updated in place: version NEW, UpToDate, not Updating, Node at NEW",
        Duration::from_secs(120),
        || async {
            let ms = workers(&env, CLUSTER).await?;
            let [m] = ms.as_slice() else { return Ok(None) };
            let n = node(&workload, &node_name).await?;
            let annotated = m["metadata"]["annotations"].as_object().is_some_and(|a| {
                a.contains_key("in-place-updates.internal.cluster.x-k8s.io/update-in-progress")
            });
            Ok((m["spec"]["version"] == NEW
                && !annotated
                && cond_state(m, "UpToDate").0 == "True"
                && cond_state(m, "Updating").0 == "False"
                && node_state(&n) == (NEW.to_owned(), "True".to_owned()))
                .then(|| m.clone()))
        },
    )
    .await;
    let after = match after {
        Ok(m) => m,
        Err(e) => anyhow::bail!(
            "{e:#}\nMachines: {}\nmanager log tail:\n{}",
            serde_json::to_string(&env.list(CAPI_V, "Machine").await.unwrap_or_default()).unwrap_or_default(),
            tail(&mgr.logs(), 40)
        ),
    };
    eprintln!(
        "inplace: in-place upgrade {OLD} -> {NEW}: {:.1} s",
        t_up.elapsed().as_secs_f64()
    );
    ensure!(
        name(&after) == machine,
        "the same Machine: {} vs {machine}",
        name(&after)
    );
    ensure!(
        after["metadata"]["uid"] == before["metadata"]["uid"],
        "the same Machine UID"
    );
    ensure!(
        after["spec"]["providerID"] == before["spec"]["providerID"],
        "the same providerID: {} vs {}",
        after["spec"]["providerID"],
        before["spec"]["providerID"]
    );
    let km_after = env
        .get(INFRA_V, "KKMachine", &kkmachine_of(&after))
        .await?
        .unwrap_or_default();
    ensure!(
        km_after["metadata"]["uid"] == km_before["metadata"]["uid"],
        "the same KKMachine"
    );
    ensure!(
        km_after["spec"]["instanceID"] == inst.as_str(),
        "the same host: {}",
        km_after["spec"]["instanceID"]
    );
    let ki = env.get(INFRA_V, "KKInstance", &inst).await?.unwrap_or_default();
    ensure!(
        ki["spec"]["kubernetesVersion"] == NEW,
        "the KKInstance records {NEW}: {}",
        ki["spec"]
    );
    ensure!(
        host_kubelet_version(&host) == format!("Kubernetes {NEW}"),
        "the host runs {NEW}'s kubelet"
    );
    let kubeadm = inside(&host, "/usr/local/bin/kubeadm version -o short");
    ensure!(kubeadm.trim() == NEW, "the host runs {NEW}'s kubeadm: {kubeadm}");
    let calls = host.systemctl_calls()?.join("\n");
    ensure!(
        !calls.contains("disable kubelet"),
        "no reset ran on the host:\n{calls}"
    );
    ensure!(
        !inside(&host, "ls /run/cluster-api/bootstrap-success.complete")
            .trim()
            .is_empty(),
        "the bootstrap sentinel stayed (no reset)"
    );
    let logs = mgr.logs();
    for hook in ["CanUpdateMachineSet", "UpdateMachine"] {
        ensure!(logs.contains(hook), "the manager answered {hook}");
    }
    ensure!(
        events_of(&env, "UpgradedInPlace").await? >= 1,
        "an UpgradedInPlace event"
    );

    // Not in place: the KKMachineTemplate changes (a new template, as templates are replaced, not edited).
    let t_roll = Instant::now();
    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKMachineTemplate",
        "metadata": {"name": format!("{CLUSTER}-md-2"), "namespace": env.ns},
        "spec": {"template": {"spec": {"roles": ["worker"], "containerManager": {"sandboxImage": "registry.k8s.io/pause:3.10"}}}}
    }))
    .await?;
    env.merge(
        CAPI_V,
        "MachineDeployment",
        &format!("{CLUSTER}-md"),
        json!({"spec": {"template": {"spec": {"infrastructureRef": {"name": format!("{CLUSTER}-md-2")}}}}}),
    )
    .await?;
    let rolled = eventually(
        "a new worker Machine on the freed host",
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
    eprintln!(
        "inplace: template change rolled: {:.1} s",
        t_roll.elapsed().as_secs_f64()
    );
    let km = env
        .get(INFRA_V, "KKMachine", &kkmachine_of(&rolled))
        .await?
        .unwrap_or_default();
    ensure!(
        km["spec"]["instanceID"] == inst.as_str(),
        "the freed host was claimed again: {}",
        km["spec"]
    );
    let logs = mgr.logs();
    ensure!(
        logs.contains("the KKMachineTemplate changes: not done in place"),
        "our hook said no for the template change"
    );
    let calls = host.systemctl_calls()?.join("\n");
    ensure!(
        calls.contains("disable kubelet"),
        "the rolled host was reset:\n{calls}"
    );

    ensure!(mgr.running(), "the manager kept running");
    mgr.terminate();
    ext.unregister(&env.client).await?;
    env.finish().await;
    eprintln!("inplace: total {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// Deletes the test's ExtensionConfig when the test ends, also on failure (the plane is shared).
struct Unregister(capkk_mgmt::RuntimeExtension);

impl Drop for Unregister {
    fn drop(&mut self) {
        let ext = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let c = capkk_mgmt::ManagementPlane::up()
                    .await
                    .ok()?
                    .client()
                    .await
                    .ok()?;
                ext.unregister(&c).await.ok()
            })
        })
        .join();
    }
}

/// How many events with `reason` the namespace has.
async fn events_of(env: &TestEnv, reason: &str) -> anyhow::Result<usize> {
    let mut n = 0;
    for (v, k) in [("events.k8s.io/v1", "Event"), ("v1", "Event")] {
        n += env
            .list(v, k)
            .await?
            .iter()
            .filter(|e| e["reason"] == reason)
            .count();
    }
    Ok(n)
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
