//! Controller benchmark: the manager binary against the local management plane (real kube-apiserver, etcd,
//! CAPI controllers) with many KKMachines.
//!
//! Hosts are loopback addresses on a closed port (as in the controllers' claim-race test): claiming needs no
//! SSH, and every claimed host then fails to connect at once, so the manager keeps reconciling with
//! retries — the "under load" state. Measured: manager RSS idle (KKClusters with M hosts, no machines) and
//! under load (peak while M KKMachine/Machine pairs are created and claimed, and after they settle), its CPU
//! seconds, and the reconcile latency from creating a KKMachine to the manager's first status write
//! (`HostClaimed` condition) and to its claim (`spec.instanceID`).
//!
//! Not measured here: time from bootstrap data to `provisioned` minus the host's own work, which needs M
//! provisionable hosts (sandbox hosts + an artifact mirror); see docs/benchmarks.md.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Client,
    api::{Api, DeleteParams, ListParams, PostParams},
};
use serde_json::{Value, json};

use crate::measure::median;

const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
/// Inventory hosts per KKCluster (the CRD allows at most 100).
const PER_CLUSTER: usize = 100;

/// Options of the controller benchmark.
#[derive(clap::Args, Clone, Debug)]
pub struct ControllerArgs {
    /// KKMachines (and inventory hosts) to create.
    #[arg(long, default_value_t = 200)]
    pub machines: usize,
    /// The manager binary.
    #[arg(long, default_value = "target/release/manager")]
    pub manager: PathBuf,
    /// Idle time before the idle sample (seconds).
    #[arg(long, default_value_t = 20)]
    pub idle_s: u64,
    /// Give up waiting for all claims this many seconds after the last create (also the bound on the
    /// KKClusters becoming provisioned).
    #[arg(long, default_value_t = 240)]
    pub timeout_s: u64,
    /// Where the table and the manager log go.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn cpu_s(pid: u32) -> f64 {
    crate::measure::tree_cpu_s(pid)
}

struct ManagerProc(Child);

impl Drop for ManagerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();
    format!("{prefix}-{:x}", nanos & 0xff_ffff)
}

async fn apply(client: &Client, ns: &str, obj: Value) -> anyhow::Result<()> {
    // Server-side apply (with discovery) for the few setup objects; the load loop uses plain creates.
    capkk_mgmt::apply(client, ns, &obj).await?;
    Ok(())
}

async fn secret(client: &Client, ns: &str, name: &str, data: &[(&str, &str)]) -> anyhow::Result<()> {
    let sd: serde_json::Map<String, Value> = data.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "stringData": sd}))?;
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await?;
    Ok(())
}

async fn list(client: &Client, ns: &str, api_version: &str, kind: &str) -> anyhow::Result<Vec<Value>> {
    let (api, _) = capkk_mgmt::dynamic_api(client, api_version, kind, ns).await?;
    let l = api.list(&ListParams::default()).await?;
    Ok(l.items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
        .collect())
}

fn has_condition(obj: &Value, type_: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == type_))
}

/// Run the controller benchmark; returns the markdown report.
pub async fn run(a: &ControllerArgs) -> anyhow::Result<String> {
    if !a.manager.is_file() {
        bail!(
            "{} not found: `cargo build --release -p capkk-controllers --bin manager`",
            a.manager.display()
        );
    }
    let m = a.machines;
    if m == 0 || m > 250 * 250 {
        bail!("--machines must be 1..=62500");
    }
    let plane = capkk_mgmt::ManagementPlane::up()
        .await
        .context("local management plane (make mgmt-up)")?;
    let client = plane.client().await?;
    capkk_mgmt::install_crds(&client, &capkk_mgmt::repo_root().join("config/crd/bases")).await?;
    let ns = unique("capkk-bench");
    let ns_obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns_obj)
        .await?;
    std::fs::create_dir_all(&a.out)?;
    let result = measure(a, &client, &ns, plane.kubeconfig_path()).await;
    // Clean up: the namespace (the manager is gone by now; finalizers are cleared so deletion completes).
    let _ = cleanup(&client, &ns).await;
    result
}

async fn cleanup(client: &Client, ns: &str) -> anyhow::Result<()> {
    for (av, kind) in [
        (INFRA, "KKMachine"),
        (INFRA, "KKCluster"),
        (CAPI, "Machine"),
        (CAPI, "Cluster"),
    ] {
        let Ok((api, _)) = capkk_mgmt::dynamic_api(client, av, kind, ns).await else {
            continue;
        };
        let Ok(items) = api.list(&ListParams::default()).await else {
            continue;
        };
        for o in items {
            let name = o.metadata.name.clone().unwrap_or_default();
            let _ = api.delete(&name, &DeleteParams::background()).await;
            let _ = api
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
        }
    }
    Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await?;
    Ok(())
}

async fn measure(a: &ControllerArgs, client: &Client, ns: &str, kubeconfig: &Path) -> anyhow::Result<String> {
    let m = a.machines;
    secret(client, ns, "ssh-auth", &[("password", &unique("pw"))]).await?;
    secret(
        client,
        ns,
        "bootstrap-data",
        &[("value", "#cloud-config\n"), ("format", "cloud-config")],
    )
    .await?;
    // A KKCluster holds at most 100 inventory hosts (CRD limit): one CAPI Cluster + KKCluster per 100.
    let clusters = m.div_ceil(PER_CLUSTER);
    for c in 0..clusters {
        let cname = format!("bench-{c}");
        let hosts: Vec<Value> = (c * PER_CLUSTER..m.min((c + 1) * PER_CLUSTER))
            .map(|i| {
                json!({"name": format!("host{i:05}"), "address": format!("127.1.{}.{}", i / 250, i % 250 + 1),
                       "auth": {"port": 1}})
            })
            .collect();
        apply(
            client,
            ns,
            json!({"apiVersion": CAPI, "kind": "Cluster", "metadata": {"name": cname, "namespace": ns},
                   "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKCluster", "name": cname}}}),
        )
        .await?;
        apply(
            client,
            ns,
            json!({"apiVersion": INFRA, "kind": "KKCluster",
                   "metadata": {"name": cname, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cname}},
                   "spec": {"nodes": {"auth": {"user": "root", "secretRef": {"name": "ssh-auth"}}, "instances": hosts}}}),
        )
        .await?;
    }

    let log_path = a.out.join("controller-manager.log");
    let log = std::fs::File::create(&log_path)?;
    let start = Instant::now();
    let child = Command::new(&a.manager)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--namespace",
            ns,
            "--leader-elect=false",
            "--ssh-connect-timeout=2s",
        ])
        .args([
            "--metrics-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
        ])
        .env("RUST_LOG", "info,kube=warn")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", a.manager.display()))?;
    let mgr = ManagerProc(child);
    let pid = mgr.0.id();

    // Wait for the KKCluster to be provisioned (the manager is up and reconciling).
    let deadline = Instant::now() + Duration::from_secs(a.timeout_s);
    loop {
        let k = list(client, ns, INFRA, "KKCluster").await?;
        if k.iter()
            .any(|k| k["status"]["initialization"]["provisioned"] == true)
        {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "KKCluster not provisioned within {}s; see {}",
                a.timeout_s,
                log_path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let ready_s = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(a.idle_s)).await;
    let idle_rss = rss_kib(pid);
    let cpu_idle_start = cpu_s(pid);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_cpu_per_s = (cpu_s(pid) - cpu_idle_start) / 10.0;

    // Load: create M KKMachine + Machine pairs as fast as the API allows (one task), while this task polls the
    // KKMachines from the start, so each latency is measured from its own KKMachine's creation.
    let cpu_before = cpu_s(pid);
    let created = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::<String, Instant>::new()));
    let load_start = Instant::now();
    let mut peak_rss = idle_rss;
    let (km_api, _) = capkk_mgmt::dynamic_api(client, INFRA, "KKMachine", ns).await?;
    let (m_api, _) = capkk_mgmt::dynamic_api(client, CAPI, "Machine", ns).await?;
    let creator = {
        let (created, ns) = (created.clone(), ns.to_owned());
        tokio::spawn(async move {
            for i in 0..m {
                let name = format!("m{i:05}");
                let cname = format!("bench-{}", i / PER_CLUSTER);
                let km: kube::api::DynamicObject = serde_json::from_value(
                    json!({"apiVersion": INFRA, "kind": "KKMachine",
                       "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cname}},
                       "spec": {"roles": ["worker"]}}),
                )?;
                let mach: kube::api::DynamicObject = serde_json::from_value(
                    json!({"apiVersion": CAPI, "kind": "Machine",
                       "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cname}},
                       "spec": {"clusterName": cname, "version": "v1.34.4", "bootstrap": {"dataSecretName": "bootstrap-data"},
                                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachine", "name": name}}}),
                )?;
                let t0 = Instant::now();
                km_api.create(&PostParams::default(), &km).await?;
                if let Ok(mut c) = created.lock() {
                    c.insert(name.clone(), t0);
                }
                m_api.create(&PostParams::default(), &mach).await?;
            }
            anyhow::Ok(Instant::now())
        })
    };
    let mut first_write: BTreeMap<String, f64> = BTreeMap::new();
    let mut claimed: BTreeMap<String, f64> = BTreeMap::new();
    let wait = Duration::from_secs(a.timeout_s);
    let mut creator = Some(creator);
    let mut last_create: Option<Instant> = None;
    while claimed.len() < m && !claim_wait_over(last_create, wait, Instant::now()) {
        if let Some(c) = creator.take_if(|c| c.is_finished()) {
            last_create = Some(c.await.context("creating machines")??);
        }
        let now = Instant::now();
        let snapshot = created.lock().map(|c| c.clone()).unwrap_or_default();
        for k in list(client, ns, INFRA, "KKMachine").await? {
            let name = k["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let Some(t0) = snapshot.get(&name) else { continue };
            let since = now.duration_since(*t0).as_secs_f64();
            if has_condition(&k, "HostClaimed") {
                first_write.entry(name.clone()).or_insert(since);
            }
            if k["spec"]["instanceID"].is_string() {
                claimed.entry(name).or_insert(since);
            }
        }
        peak_rss = peak_rss.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let all_claimed_at = Instant::now();
    let last_create = match (last_create, creator) {
        (Some(t), _) => t,
        (None, Some(c)) => c.await.context("creating machines")??,
        (None, None) => bail!("the creating task ended without a result"),
    };
    let create_s = last_create.duration_since(load_start).as_secs_f64();
    // All m claimed implies all m KKMachines were created, but the last Machine create may return after the
    // poll saw the last claim: then the window is 0.
    let all_claimed_s = all_claimed_at
        .saturating_duration_since(last_create)
        .as_secs_f64();
    // Keep the load (claimed hosts failing to connect, retried) for a while and sample.
    let mut settled_rss = Vec::new();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let r = rss_kib(pid);
        peak_rss = peak_rss.max(r);
        settled_rss.push(r as f64);
    }
    let load_cpu = cpu_s(pid) - cpu_before;
    drop(mgr);

    let pct = |v: &BTreeMap<String, f64>, p: f64| {
        let mut x: Vec<f64> = v.values().copied().collect();
        x.sort_by(f64::total_cmp);
        if x.is_empty() {
            return f64::NAN;
        }
        x[((x.len() - 1) as f64 * p).round() as usize]
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "capkk-bench controller: {m} KKMachines + Machines in {clusters} KKClusters of <= {PER_CLUSTER} hosts (loopback, closed port)"
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "| measure | value |");
    let _ = writeln!(s, "|---|---:|");
    let _ = writeln!(
        s,
        "| manager start → {clusters} KKClusters provisioned | {ready_s:.2} s |"
    );
    let _ = writeln!(
        s,
        "| manager RSS idle ({clusters} KKClusters, {m} hosts, no machines) | {:.1} MiB |",
        idle_rss as f64 / 1024.0
    );
    let _ = writeln!(s, "| manager CPU idle | {:.3} s/s |", idle_cpu_per_s);
    let _ = writeln!(
        s,
        "| create {m} KKMachine + Machine pairs (API) | {create_s:.1} s |"
    );
    let _ = writeln!(s, "| KKMachines claimed | {} of {m} |", claimed.len());
    let _ = writeln!(
        s,
        "| reconcile latency: create → HostClaimed condition, p50 / p90 / max | {:.2} / {:.2} / {:.2} s |",
        pct(&first_write, 0.5),
        pct(&first_write, 0.9),
        pct(&first_write, 1.0)
    );
    let _ = writeln!(
        s,
        "| create → claimed (spec.instanceID), p50 / p90 / max | {:.2} / {:.2} / {:.2} s |",
        pct(&claimed, 0.5),
        pct(&claimed, 0.9),
        pct(&claimed, 1.0)
    );
    let _ = writeln!(s, "| last create → all claimed | {all_claimed_s:.1} s |");
    let _ = writeln!(
        s,
        "| manager RSS peak under load | {:.1} MiB |",
        peak_rss as f64 / 1024.0
    );
    let _ = writeln!(
        s,
        "| manager RSS with {m} claimed machines retrying SSH (median of 20 s) | {:.1} MiB |",
        median(&settled_rss) / 1024.0
    );
    let _ = writeln!(
        s,
        "| manager CPU from first create to +20 s after the last claim | {load_cpu:.2} s |"
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "manager idle RSS: {:.1} MiB", idle_rss as f64 / 1024.0);
    if claimed.len() < m {
        let _ = writeln!(
            s,
            "WARNING: only {} of {m} claimed within {}s of the last create; see {}",
            claimed.len(),
            a.timeout_s,
            log_path.display()
        );
    }
    Ok(s)
}

/// Whether the claim wait is over: `wait` counted from the last create. While creates still run it is never
/// over (under load, creating M pairs alone may take longer than the wait, and a wait counted from the first
/// create left the late machines no time to be claimed).
fn claim_wait_over(last_create: Option<Instant>, wait: Duration, now: Instant) -> bool {
    last_create.is_some_and(|t| now.saturating_duration_since(t) >= wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_wait_never_ends_while_machines_are_still_being_created() {
        let now = Instant::now() + Duration::from_secs(3600);
        assert!(!claim_wait_over(None, Duration::from_secs(240), now));
    }

    #[test]
    fn the_claim_wait_is_counted_from_the_last_create() {
        let last = Instant::now();
        let wait = Duration::from_secs(240);
        assert!(!claim_wait_over(
            Some(last),
            wait,
            last + Duration::from_secs(239)
        ));
        assert!(claim_wait_over(Some(last), wait, last + wait));
        // A poll timestamp taken just before the creating task reported its end is not "over".
        assert!(!claim_wait_over(Some(last + Duration::from_secs(1)), wait, last));
    }
}
