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
//!
//! And what `UpdateMachine` trusts: not the caller (CAPI sends no client certificate) but the Machine the API
//! server stores. A forged request is refused with one answer whatever it names, and nothing runs on a host; a
//! Machine re-created under the same name is upgraded again, not answered "done" from its predecessor's state.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use common::{
    day2::*,
    sandbox::{self, inside, sha},
    *,
};
use serde_json::{Value, json};

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

// --- UpdateMachine trusts the API server, not the caller (issue 43, findings 1 and 7) ---
//
// A standalone worker Machine (bootstrap data given directly) on one sandbox host at `sandbox::K8S`, the
// manager serving the hooks, no ExtensionConfig registered: the test itself POSTs `UpdateMachine` requests, as
// any Pod of the management cluster could (no client certificate, the server's not verified). The release
// [`STEP`] is published as stand-ins whose `kubeadm upgrade node` leaves a line in [`UPGRADES`] on the host.

/// The version a forged or a genuine request asks for: one minor above the hosts' `sandbox::K8S`.
const STEP: &str = "v1.33.0";
/// Where [`STEP`]'s kubeadm stand-in records each `kubeadm upgrade` it ran (outside what a reset removes).
const UPGRADES: &str = "/root/capkk-upgrades";
/// CAPI's marker of a Machine whose in-place update waits for `UpdateMachine` (CAPI v1.14).
const UPDATE_IN_PROGRESS: &str = "in-place-updates.internal.cluster.x-k8s.io/update-in-progress";
const PENDING_HOOKS: &str = "runtime.cluster.x-k8s.io/pending-hooks";

/// `hosts.component` with [`STEP`]'s kubeadm, kubelet and kubectl published as stand-ins.
fn with_step_release(hosts: &Hosts) -> Value {
    let mut component = hosts.component.clone();
    let kubeadm = format!(
        "#!/bin/sh\n# capkk stand-in kubeadm {STEP}\nif [ \"$1\" = version ]; then echo {STEP}; exit 0; fi\n\
         if [ \"$1\" = upgrade ]; then echo \"$*\" >> {UPGRADES}; fi\nexit 0\n"
    );
    let kubelet = format!(
        "#!/bin/sh\n# capkk stand-in kubelet {STEP}\nif [ \"$1\" = --version ]; then echo 'Kubernetes {STEP}'; exit 0; fi\nexec sleep 86400\n"
    );
    let kubectl = format!("#!/bin/sh\n# capkk stand-in kubectl {STEP}\nexit 0\n");
    // The stand-ins' kubeadm, kubelet and kubectl overrides name no version (any version's binary would be
    // them): pin them to `sandbox::K8S`, so that STEP's are told apart.
    let mut overrides: Vec<Value> = component["overrides"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut o| {
            if ["kubeadm", "kubelet", "kubectl"].contains(&o["id"].as_str().unwrap_or_default()) {
                o["version"] = json!(sandbox::K8S);
            }
            o
        })
        .collect();
    for (id, body) in [("kubeadm", kubeadm), ("kubelet", kubelet), ("kubectl", kubectl)] {
        let body = body.into_bytes();
        overrides.push(json!({"id": id, "version": STEP, "checksum": {"value": sha(&body)}}));
        hosts.mirror.put(
            &format!("/kubernetes-release/release/{STEP}/bin/linux/amd64/{id}"),
            body,
        );
    }
    component["overrides"] = Value::Array(overrides);
    component
}

/// The test's world: Cluster `c` on one sandbox host, worker Machine `w` provisioned, the manager serving the
/// hooks at `ext.addr`. Fields drop in order: the manager stops before the namespace is cleaned up.
struct Standalone {
    mgr: Manager,
    env: TestEnv,
    hosts: Hosts,
    ext: capkk_mgmt::RuntimeExtension,
}

async fn standalone(prefix: &str, sandbox: &str) -> anyhow::Result<Option<Standalone>> {
    let Some((env, hosts)) = TestEnv::with_hosts(prefix, sandbox, 1).await? else {
        return Ok(None);
    };
    let component = with_step_release(&hosts);
    // `kubeadm upgrade node` needs a joined node's kubelet.conf (pkg/service/host/upgrade).
    env.bootstrap_data(
        "bd",
        &sandbox::cloud_config(&["mkdir -p /etc/kubernetes", "touch /etc/kubernetes/kubelet.conf"]),
    )
    .await?;
    env.cluster("c", &hosts.inventory(), json!({"component": component}))
        .await?;
    let ext = capkk_mgmt::RuntimeExtension::prepare(
        &env.dir.join("runtime-extension"),
        "127.0.0.1".parse()?,
        &capkk_mgmt::unique(prefix),
        Some(&env.ns),
    )
    .await?;
    let mut args = ext.manager_args();
    args.push("--ssh-connect-timeout=5s".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mgr = env.manager("manager", &args)?;
    let s = Standalone { env, hosts, ext, mgr };
    s.provisioned().await?;
    Ok(Some(s))
}

impl Standalone {
    /// Creates worker Machine `w` and waits for its host to be provisioned; returns the KKInstance's name.
    async fn provisioned(&self) -> anyhow::Result<String> {
        self.env.machine("c", "w", "worker", Some("bd")).await?;
        let inst = self.env.claimed_instance("w").await?;
        eventually("w provisioned", Duration::from_secs(120), || async {
            let k = self.env.get(INFRA_V, "KKMachine", "w").await?.unwrap_or_default();
            Ok((k["status"]["initialization"]["provisioned"] == true).then_some(()))
        })
        .await?;
        Ok(inst)
    }

    /// Marks Machine `w` as CAPI does when its in-place update to `version` waits for `UpdateMachine`.
    async fn mark_pending(&self, version: &str) -> anyhow::Result<()> {
        self.env
            .merge(
                CAPI_V,
                "Machine",
                "w",
                json!({"metadata": {"annotations": {UPDATE_IN_PROGRESS: "", PENDING_HOOKS: "UpdateMachine"}},
                       "spec": {"version": version}}),
            )
            .await
    }

    /// `desired.machine` as CAPI sends it for the stored Machine `w` (name, namespace, labels, annotations,
    /// spec; no UID).
    async fn as_capi_sends(&self) -> anyhow::Result<Value> {
        let m = self.env.get(CAPI_V, "Machine", "w").await?.context("Machine w")?;
        Ok(json!({
            "apiVersion": CAPI_V, "kind": "Machine",
            "metadata": {"name": m["metadata"]["name"], "namespace": m["metadata"]["namespace"],
                "labels": m["metadata"]["labels"], "annotations": m["metadata"]["annotations"]},
            "spec": m["spec"],
        }))
    }

    /// The `kubeadm upgrade` runs [`STEP`]'s kubeadm recorded on the host.
    fn upgrades_run(&self) -> usize {
        let host = self.hosts.sb.hosts().remove(0);
        inside(&host, &format!("cat {UPGRADES} 2>/dev/null"))
            .lines()
            .filter(|l| l.starts_with("upgrade node"))
            .count()
    }

    /// Asks `UpdateMachine` for `machine` until it reports done (retryAfterSeconds 0), within two minutes;
    /// returns the answers.
    async fn until_done(&self, machine: &Value) -> anyhow::Result<Vec<Value>> {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut answers = Vec::new();
        loop {
            let a = update_machine_request(&self.ext, machine.clone()).await?;
            ensure!(a["status"] == "Success", "UpdateMachine failed: {a}");
            let done = a["retryAfterSeconds"] == 0;
            answers.push(a);
            if done {
                return Ok(answers);
            }
            ensure!(
                Instant::now() < deadline,
                "UpdateMachine did not report done within 120 s: {answers:?}\nmanager log tail:\n{}",
                tail(&self.mgr.logs(), 30)
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// POSTs an `UpdateMachineRequest` for `machine` to the manager's hook as an unauthenticated caller would:
/// no client certificate, the server's certificate not verified. Returns the response body.
async fn update_machine_request(ext: &capkk_mgmt::RuntimeExtension, machine: Value) -> anyhow::Result<Value> {
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()?;
    let body = json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "UpdateMachineRequest",
        "desired": {"machine": machine, "infrastructureMachine": {}, "bootstrapConfig": {}},
    });
    let resp = http
        .post(format!(
            "https://{}/hooks.runtime.cluster.x-k8s.io/v1alpha1/updatemachine/update-machine",
            ext.addr
        ))
        .body(body.to_string())
        .send()
        .await?;
    ensure!(resp.status().is_success(), "HTTP {}", resp.status());
    Ok(resp.json().await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forged_update_machine_request_is_refused_alike_whatever_machine_it_names_and_nothing_runs_on_the_host()
-> anyhow::Result<()> {
    let Some(mut s) = standalone("inplace-forged", "ctl-inplace-forged").await? else {
        return Ok(());
    };
    let ns = s.env.ns.clone();
    let inst = s.env.claimed_instance("w").await?;
    let forged = |ns: &str, name: &str, version: &str| {
        json!({"apiVersion": CAPI_V, "kind": "Machine",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterName": "c", "version": version,
                "bootstrap": {"dataSecretName": "bd"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachine", "name": name}}})
    };
    let mut answers = Vec::new();
    // The worker exists, nothing is pending on it: a caller picks the version.
    answers.push((
        "a Machine CAPI did not mark",
        update_machine_request(&s.ext, forged(&ns, "w", STEP)).await?,
    ));
    answers.push((
        "a Machine that does not exist",
        update_machine_request(&s.ext, forged(&ns, "nobody", STEP)).await?,
    ));
    answers.push((
        "a namespace that does not exist",
        update_machine_request(&s.ext, forged("no-such-tenant", "w", STEP)).await?,
    ));
    answers.push((
        "a name that is no object name",
        update_machine_request(&s.ext, forged(&ns, "w?watch=true", STEP)).await?,
    ));
    // CAPI marks the worker for STEP: another version, or the same one under another UID, is still refused.
    s.mark_pending(STEP).await?;
    answers.push((
        "another version than the pending one",
        update_machine_request(&s.ext, forged(&ns, "w", "v1.33.9")).await?,
    ));
    let mut other_uid = s.as_capi_sends().await?;
    other_uid["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    answers.push((
        "another UID than the stored one",
        update_machine_request(&s.ext, other_uid).await?,
    ));

    let first = answers[0].1.clone();
    for (what, a) in &answers {
        ensure!(
            a["status"] == "Failure" && a["retryAfterSeconds"] == 0,
            "{what}: refused, got {a}"
        );
        ensure!(
            a["message"] == first["message"],
            "{what}: the same answer as for every other refusal (no oracle): {a} vs {first}"
        );
        let m = a["message"].as_str().unwrap_or_default();
        ensure!(
            !m.contains("not found") && !m.contains("KKMachine"),
            "{what}: {m}"
        );
    }
    // Nothing ran on the host: give a started task time to show.
    tokio::time::sleep(Duration::from_secs(8)).await;
    ensure!(s.upgrades_run() == 0, "a kubeadm upgrade ran on the host");
    let ki = s.env.get(INFRA_V, "KKInstance", &inst).await?.unwrap_or_default();
    ensure!(
        ki["spec"]["kubernetesVersion"] == sandbox::K8S,
        "the KKInstance still records {}: {}",
        sandbox::K8S,
        ki["spec"]["kubernetesVersion"]
    );
    let logs = s.mgr.logs();
    ensure!(
        !logs.contains("Starting the in-place upgrade"),
        "the manager started an upgrade:\n{}",
        tail(&logs, 30)
    );
    ensure!(
        logs.contains("UpdateMachine refused"),
        "the refusals are logged with their reason"
    );

    // The request CAPI sends for the pending Machine is acted on (the refusals above were not a broken setup).
    let answers = s.until_done(&s.as_capi_sends().await?).await?;
    ensure!(
        answers[0]["retryAfterSeconds"].as_i64().unwrap_or_default() > 0,
        "the upgrade started: {}",
        answers[0]
    );
    ensure!(s.upgrades_run() == 1, "kubeadm upgrade node ran once on the host");
    let ki = s.env.get(INFRA_V, "KKInstance", &inst).await?.unwrap_or_default();
    ensure!(
        ki["spec"]["kubernetesVersion"] == STEP,
        "the KKInstance records {STEP}"
    );
    s.mgr.terminate();
    s.env
        .assert_no_canary(&[&s.hosts.key_canary()], &[s.mgr.logs()])
        .await?;
    s.env.finish().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_machine_recreated_under_the_same_name_is_upgraded_again_not_answered_done() -> anyhow::Result<()> {
    let Some(mut s) = standalone("inplace-uid", "ctl-inplace-uid").await? else {
        return Ok(());
    };
    s.mark_pending(STEP).await?;
    s.until_done(&s.as_capi_sends().await?).await?;
    ensure!(s.upgrades_run() == 1, "the first Machine's upgrade ran");

    // The Machine goes (its host is reset and freed) and a new one of the same name takes the host at K8S.
    s.env.delete(CAPI_V, "Machine", "w").await?;
    eventually(
        "Machine w and KKMachine w gone",
        Duration::from_secs(120),
        || async {
            Ok((s.env.get(CAPI_V, "Machine", "w").await?.is_none()
                && s.env.get(INFRA_V, "KKMachine", "w").await?.is_none())
            .then_some(()))
        },
    )
    .await?;
    let inst = s.provisioned().await?;
    let ki = s.env.get(INFRA_V, "KKInstance", &inst).await?.unwrap_or_default();
    ensure!(
        ki["spec"]["kubernetesVersion"] == sandbox::K8S,
        "the re-created Machine's host is at {}: {}",
        sandbox::K8S,
        ki["spec"]
    );

    // Same namespace, name and version as the upgrade that is done: another Machine, upgraded again.
    s.mark_pending(STEP).await?;
    let answers = s.until_done(&s.as_capi_sends().await?).await?;
    ensure!(
        answers[0]["retryAfterSeconds"].as_i64().unwrap_or_default() > 0,
        "the re-created Machine was answered done with nothing run: {}",
        answers[0]
    );
    ensure!(
        s.upgrades_run() == 2,
        "kubeadm upgrade node ran for the new Machine"
    );
    let ki = s.env.get(INFRA_V, "KKInstance", &inst).await?.unwrap_or_default();
    ensure!(
        ki["spec"]["kubernetesVersion"] == STEP,
        "the KKInstance records {STEP}"
    );
    s.mgr.terminate();
    s.env.finish().await;
    Ok(())
}

/// `kubectl kustomize config/inplace` with the pinned kubectl.
async fn render_inplace() -> anyhow::Result<Vec<Value>> {
    let kubectl = capkk_mgmt::bin_dir().await?.join("kubectl");
    let dir = capkk_mgmt::repo_root().join("config/inplace");
    let out = std::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .with_context(|| format!("running {}", kubectl.display()))?;
    ensure!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(capkk_mgmt::parse_yaml_docs(
        &String::from_utf8(out.stdout)?,
        "config/inplace",
    )?)
}

/// Whether `selector`'s `matchLabels` all hold in `labels` (the policy uses no `matchExpressions`).
fn selects(selector: &Value, labels: &Value) -> bool {
    selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && selector.get("matchExpressions").is_none()
}

/// Whether NetworkPolicy `np` admits TCP `port` of a Pod it selects from a Pod labelled `pod` in a namespace
/// labelled `ns` (its ingress rules, as a network plugin reads them).
fn admits(np: &Value, ns: &Value, pod: &Value, port: i64) -> bool {
    np["spec"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|rule| {
            let from_ok = match rule["from"].as_array() {
                None => true,
                Some(peers) => peers.iter().any(|p| {
                    (p.get("namespaceSelector").is_none() || selects(&p["namespaceSelector"], ns))
                        && (p.get("podSelector").is_none() || selects(&p["podSelector"], pod))
                        && p.get("ipBlock").is_none()
                }),
            };
            let port_ok = match rule["ports"].as_array() {
                None => true,
                Some(ports) => ports.iter().any(|p| {
                    let lo = p["port"].as_i64().unwrap_or(-1);
                    let hi = p["endPort"].as_i64().unwrap_or(lo);
                    p["protocol"] == "TCP" && (lo..=hi).contains(&port)
                }),
            };
            from_ok && port_ok
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_in_place_component_admits_only_capis_controller_to_the_hook_port() -> anyhow::Result<()> {
    let docs = render_inplace().await?;
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .cloned()
            .with_context(|| {
                let all: Vec<String> = docs
                    .iter()
                    .map(|d| format!("{} {}", d["kind"], d["metadata"]["name"]))
                    .collect();
                format!("config/inplace renders no {kind} {name}: {all:?}")
            })
    };
    let np = find("NetworkPolicy", "capkk-runtime-extension")?;
    let svc = find("Service", "capkk-runtime-extension")?;
    let deploy = find("Deployment", "capkk-controller-manager")?;
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
    ensure!(
        np["spec"]["podSelector"] == json!({"matchLabels": svc["spec"]["selector"]})
            && selects(&np["spec"]["podSelector"], pod_labels),
        "the policy selects the Pods behind the hooks' Service: {} vs {}",
        np["spec"]["podSelector"],
        svc["spec"]["selector"]
    );
    ensure!(np["spec"]["policyTypes"] == json!(["Ingress"]), "ingress only");
    // The port the policy guards is the one the manager serves the hooks on.
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    let hook_port = container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "runtime-ext")
        .and_then(|p| p["containerPort"].as_i64())
        .context("no runtime-ext port")?;
    ensure!(hook_port == 9443, "runtime-ext is {hook_port}");
    ensure!(
        container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a == "--runtime-extension-bind-address=:9443"),
        "the manager serves the hooks on :9443"
    );

    let capi_ns = json!({"kubernetes.io/metadata.name": "capi-system"});
    let capi_pod = json!({"cluster.x-k8s.io/provider": "cluster-api", "control-plane": "controller-manager"});
    let tenant_ns = json!({"kubernetes.io/metadata.name": "tenant-a"});
    ensure!(
        admits(&np, &capi_ns, &capi_pod, hook_port),
        "CAPI's core controller reaches the hooks"
    );
    for (what, ns, pod) in [
        ("a tenant's Pod", &tenant_ns, &json!({"app": "x"})),
        ("a tenant's Pod wearing CAPI's labels", &tenant_ns, &capi_pod),
        (
            "another Pod of capi-system",
            &capi_ns,
            &json!({"control-plane": "controller-manager"}),
        ),
        (
            "a Pod of capkk-system",
            &json!({"kubernetes.io/metadata.name": "capkk-system"}),
            &json!({"app": "x"}),
        ),
    ] {
        ensure!(!admits(&np, ns, pod, hook_port), "{what} reaches the hooks");
    }
    for port in [8080, 8081, 8443] {
        ensure!(
            admits(&np, &tenant_ns, &json!({}), port),
            "the manager's port {port} stays open as without the policy"
        );
    }

    // The API server accepts the policy as rendered (endPort, selectors).
    let env = TestEnv::new("inplace-netpol").await?;
    let mut np = np;
    np["metadata"]["namespace"] = json!(env.ns);
    env.apply(np).await?;
    ensure!(
        env.get("networking.k8s.io/v1", "NetworkPolicy", "capkk-runtime-extension")
            .await?
            .is_some(),
        "stored"
    );
    env.finish().await;
    Ok(())
}
