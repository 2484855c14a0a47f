//! Controller benchmark: the manager binary against the local management plane (real kube-apiserver, etcd,
//! CAPI controllers) with many KKMachines.
//!
//! Hosts are loopback addresses on a closed port (as in the controllers' claim-race test): claiming needs no
//! SSH, and every claimed host then fails to connect at once, so the manager keeps reconciling with
//! retries — the "under load" state. Measured: manager RSS idle (KKClusters with M hosts, no machines) and
//! under load (peak while M KKMachine/Machine pairs are created and claimed, and after they settle), its CPU
//! seconds, and the claim latency from the moment the Machine has bootstrap data (the Machine is created
//! with `spec.bootstrap.dataSecretName`; the clock starts just before its create is sent) to the KKMachine's
//! claim (`spec.instanceID`) and to its first status write (`HostClaimed`), split at the moment CAPI's
//! Machine controller set the KKMachine's owner reference (before it the KKMachine cannot know its Machine).
//! A watch on the KKMachines records when each one changed: polling with LISTs loaded the API server the
//! manager shares.
//!
//! Time from bootstrap data to `provisioned` minus the host's own work needs hosts that can be provisioned:
//! `--provision` (provision.rs).

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Client,
    api::{Api, DeleteParams, DynamicObject, ListParams, PostParams},
    runtime::{WatchStreamExt as _, watcher},
};
use serde_json::{Value, json};

use crate::measure::median;

pub(crate) const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
pub(crate) const CAPI: &str = "cluster.x-k8s.io/v1beta2";
/// Inventory hosts per KKCluster (the CRD allows at most 100).
pub(crate) const PER_CLUSTER: usize = 100;

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
    /// Provision for real: `--machines` sandbox hosts (keep it small: 10 to 20 on two cores) that the
    /// KKMachines' hosts are, an artifact mirror and CABPK bootstrap data; measures bootstrap data →
    /// provisioned and the hosts' own work (see provision.rs).
    #[arg(long)]
    pub provision: bool,
    /// With --provision: size of the stand-in release artifacts together, MiB.
    #[arg(long, default_value_t = 8.0)]
    pub artifact_mib: f64,
    /// With --provision: the bootstrap data [default: the captured CABPK init data, see `capkk-bench ssh`].
    #[arg(long)]
    pub fixture: Option<PathBuf>,
    /// How the Machines get their bootstrap data: `config-ref` (the real order: a bootstrap config the bench
    /// completes once CAPI made it the Machine's; CAPI copies the data to the Machine) or `at-create` (the
    /// Machine carries `dataSecretName` from its create; the method of both benchmarks until 2026-11-26).
    #[arg(long, default_value = "config-ref", value_parser = ["config-ref", "at-create"])]
    pub data_order: String,
    /// The manager's `RUST_LOG` (e.g. `info,capkk_ssh=debug,kube=warn` to see every command it sends).
    #[arg(long, default_value = "info,kube=warn")]
    pub manager_log: String,
}

pub(crate) fn rss_kib(pid: u32) -> u64 {
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

pub(crate) fn cpu_s(pid: u32) -> f64 {
    crate::measure::tree_cpu_s(pid)
}

pub(crate) struct ManagerProc(pub(crate) Child);

impl Drop for ManagerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn unique(prefix: &str) -> String {
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

pub(crate) async fn secret(
    client: &Client,
    ns: &str,
    name: &str,
    data: &[(&str, &str)],
) -> anyhow::Result<()> {
    let sd: serde_json::Map<String, Value> = data.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "stringData": sd}))?;
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await?;
    Ok(())
}

pub(crate) async fn list(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
) -> anyhow::Result<Vec<Value>> {
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
    if a.provision {
        return crate::provision::run(a).await;
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
    // The bench's bootstrap config kind (DataOrder::ConfigRef).
    capkk_mgmt::install_crds(&client, &capkk_mgmt::repo_root().join("test/bench/crd")).await?;
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

pub(crate) async fn cleanup(client: &Client, ns: &str) -> anyhow::Result<()> {
    for (av, kind) in [
        (INFRA, "KKMachine"),
        // The claimed hosts' KKInstances carry the manager's finalizer too: left out, every run left its
        // namespace terminating with all its KKInstances on the plane.
        (INFRA, "KKInstance"),
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

/// A CAPI Cluster `name` and its KKCluster with `hosts` (SSH as root with the Secret `ssh-auth`) and
/// `component` (where artifacts come from), if any.
pub(crate) async fn cluster(
    client: &Client,
    ns: &str,
    name: &str,
    hosts: Vec<Value>,
    component: Option<Value>,
) -> anyhow::Result<()> {
    apply(
        client,
        ns,
        json!({"apiVersion": CAPI, "kind": "Cluster", "metadata": {"name": name, "namespace": ns},
               "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKCluster", "name": name}}}),
    )
    .await?;
    let mut kkc = json!({"apiVersion": INFRA, "kind": "KKCluster",
           "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": name}},
           "spec": {"nodes": {"auth": {"user": "root", "secretRef": {"name": "ssh-auth"}}, "instances": hosts}}});
    if let Some(c) = component {
        kkc["spec"]["component"] = c;
    }
    apply(client, ns, kkc).await
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
        cluster(client, ns, &cname, hosts, None).await?;
    }

    let log_path = a.out.join("controller-manager.log");
    let start = Instant::now();
    let mgr = start_manager(
        &a.manager,
        kubeconfig,
        ns,
        &log_path,
        &a.manager_log,
        // The hosts are on loopback, which the shipped SSH address policy refuses before dialling: allowed,
        // they fail to connect and are retried, the load this measures.
        &["--ssh-connect-timeout=2s", "--ssh-allow-cidr=127.0.0.0/8"],
    )?;
    let pid = mgr.0.id();
    wait_kkclusters(
        client,
        ns,
        clusters,
        Duration::from_secs(a.timeout_s),
        &log_path,
        provisioned,
    )
    .await?;
    let ready_s = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(a.idle_s)).await;
    let idle_rss = rss_kib(pid);
    let cpu_idle_start = cpu_s(pid);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_cpu_per_s = (cpu_s(pid) - cpu_idle_start) / 10.0;

    // Load: create M KKMachine + Machine pairs as fast as the API allows (one task), while a watch on the
    // KKMachines records when each one got its owner reference (CAPI's Machine controller), its first status
    // write (`HostClaimed`) and its claim. The Machines get their bootstrap data as `--data-order` says.
    let cpu_before = cpu_s(pid);
    let load_avg_start = crate::load_average();
    let started_at = std::time::SystemTime::now();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let load_start = Instant::now();
    let mut peak_rss = idle_rss;
    let (km_api, _) = capkk_mgmt::dynamic_api(client, INFRA, "KKMachine", ns).await?;
    let (m_api, _) = capkk_mgmt::dynamic_api(client, CAPI, "Machine", ns).await?;
    let watch = tokio::spawn(watch_kkmachines(km_api.clone(), seen.clone()));
    let order = DataOrder::of(&a.data_order);
    let (configs, helpers) = bootstrap_provider(order, client, ns, &m_api, &seen).await?;
    let creator = spawn_creator(
        km_api.clone(),
        m_api.clone(),
        configs,
        ns,
        m,
        "v1.34.4",
        seen.clone(),
    );
    let wait = Duration::from_secs(a.timeout_s);
    let mut creator = Some(creator);
    let mut last_create: Option<Instant> = None;
    loop {
        if let Some(c) = creator.take_if(|c| c.is_finished()) {
            last_create = Some(c.await.context("creating machines")??);
        }
        if watch.is_finished() {
            bail!("the KKMachine watch ended");
        }
        if let Some(h) = helpers.iter().find(|h| h.is_finished()) {
            bail!("the bootstrap provider or the Machine watch ended ({h:?})");
        }
        let claimed = seen.lock().map(|s| s.claimed.len()).unwrap_or_default();
        if claimed >= m || claim_wait_over(last_create, wait, Instant::now()) {
            break;
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
    // watch saw the last claim: then the window is 0.
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
    let load_avg_end = crate::load_average();
    drop(mgr);
    watch.abort();
    helpers.iter().for_each(|h| h.abort());
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let lat = |ends: &BTreeMap<String, Instant>, starts: &BTreeMap<String, Instant>| latencies(starts, ends);
    let claimed = lat(&seen.claimed, &seen.bootstrap);
    let first_write = lat(&seen.host_claimed, &seen.bootstrap);
    let owned = lat(&seen.owned, &seen.created);
    let ours = lat(&seen.claimed, &seen.owned);
    let created_claimed = lat(&seen.claimed, &seen.created);
    let owned_data = lat(&seen.bootstrap, &seen.owned);
    {
        use crate::results::distribution as d;
        crate::results::write(
            &a.out.join("claim-results.json"),
            &crate::results::Meta::new("claim", started_at, &load_avg_start),
            json!({
                "machines": m,
                "clusters": clusters,
                "data_order": a.data_order,
                "claimed": claimed.len(),
                "create_s": create_s,
                "last_create_to_all_claimed_s": all_claimed_s,
                "manager": {
                    "ready_s": ready_s,
                    "rss_idle_mib": idle_rss as f64 / 1024.0,
                    "rss_peak_mib": peak_rss as f64 / 1024.0,
                    "rss_settled_mib": median(&settled_rss) / 1024.0,
                    "cpu_idle_s_per_s": idle_cpu_per_s,
                    "cpu_load_s": load_cpu,
                },
                "latency_s": {
                    "data_to_claimed": d(&claimed),
                    "data_to_first_status_write": d(&first_write),
                    "create_to_claimed": d(&created_claimed),
                    "create_to_owner_reference": d(&owned),
                    "owner_reference_to_data": d(&owned_data),
                    "owner_reference_to_claimed": d(&ours),
                },
            }),
        )?;
    }

    let mut s = String::new();
    let _ = writeln!(
        s,
        "capkk-bench controller: {m} KKMachines + Machines in {clusters} KKClusters of <= {PER_CLUSTER} hosts (loopback, closed port); bootstrap data {}",
        match order {
            DataOrder::AtCreate => "at the Machine's create (--data-order at-create)",
            DataOrder::ConfigRef =>
                "from a bootstrap config, copied by CAPI once the Machine owns it (--data-order config-ref)",
        }
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "| measure | value |");
    let _ = writeln!(s, "|---|---:|");
    let _ = writeln!(
        s,
        "| load average (1, 5, 15 min) at first create → at the end | {load_avg_start} → {load_avg_end} |"
    );
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
    let row = |s: &mut String, what: &str, v: &BTreeMap<String, f64>| {
        let _ = writeln!(
            s,
            "| {what}, p50 / p90 / max | {:.2} / {:.2} / {:.2} s |",
            pct(v, 0.5),
            pct(v, 0.9),
            pct(v, 1.0)
        );
    };
    row(
        &mut s,
        "**bootstrap data → claimed** (`spec.instanceID`)",
        &claimed,
    );
    row(
        &mut s,
        "bootstrap data → first status write (`HostClaimed`)",
        &first_write,
    );
    row(&mut s, "Machine create → claimed", &created_claimed);
    row(
        &mut s,
        "Machine create → owner reference (CAPI's Machine controller)",
        &owned,
    );
    if order == DataOrder::ConfigRef {
        row(
            &mut s,
            "owner reference → bootstrap data (the bench's config completed, CAPI copies it)",
            &owned_data,
        );
    } else {
        row(&mut s, "Machine owner reference → claimed (capkk-rs)", &ours);
    }
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

/// Start the manager on namespace `ns` (log in `log_path`), with `extra` flags.
pub(crate) fn start_manager(
    manager: &Path,
    kubeconfig: &Path,
    ns: &str,
    log_path: &Path,
    log_filter: &str,
    extra: &[&str],
) -> anyhow::Result<ManagerProc> {
    let log = std::fs::File::create(log_path)?;
    let child = Command::new(manager)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--namespace", ns, "--leader-elect=false"])
        // Host-identity Leases in the bench's own namespace (it exists; the admin kubeconfig may write there).
        .args(["--host-claim-namespace", ns])
        .args([
            "--metrics-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
        ])
        .args(extra)
        .env("RUST_LOG", log_filter)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", manager.display()))?;
    Ok(ManagerProc(child))
}

/// True when a KKCluster reports `status.initialization.provisioned`.
pub(crate) fn provisioned(k: &Value) -> bool {
    k["status"]["initialization"]["provisioned"] == true
}

/// Wait until `count` KKClusters of `ns` are `ready` (the manager is up and reconciling).
pub(crate) async fn wait_kkclusters(
    client: &Client,
    ns: &str,
    count: usize,
    timeout: Duration,
    log_path: &Path,
    ready: impl Fn(&Value) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let k = list(client, ns, INFRA, "KKCluster").await?;
        if k.iter().filter(|k| ready(k)).count() >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{count} KKClusters not ready within {}s; see {}",
                timeout.as_secs(),
                log_path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// How the Machines get their bootstrap data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DataOrder {
    /// The Machine is created with `spec.bootstrap.dataSecretName` set: its create is the moment it has
    /// bootstrap data (the claim benchmark; the provisioning benchmark until 2026-11-26).
    AtCreate,
    /// The order of KubeadmControlPlane / MachineDeployment with a bootstrap provider: the Machine is created
    /// with a bootstrap `configRef` (a `BenchBootstrapConfig`, test/bench/crd) and no data; CAPI's Machine
    /// controller makes it the owner of the KKMachine and of the config; the bench, as bootstrap provider,
    /// completes the config once it is owned ([`provide_bootstrap_data`]); CAPI copies the data secret's name
    /// into the Machine, and that is the moment the Machine has bootstrap data (seen by [`watch_machines`]).
    ConfigRef,
}

impl DataOrder {
    /// From `--data-order`.
    pub(crate) fn of(arg: &str) -> Self {
        if arg == "at-create" {
            DataOrder::AtCreate
        } else {
            DataOrder::ConfigRef
        }
    }
}

/// With [`DataOrder::ConfigRef`]: the bootstrap config API (for [`spawn_creator`]) and the tasks that play
/// the bootstrap provider ([`provide_bootstrap_data`]) and see when each Machine has its data
/// ([`watch_machines`]); nothing with [`DataOrder::AtCreate`].
pub(crate) async fn bootstrap_provider(
    order: DataOrder,
    client: &Client,
    ns: &str,
    machines: &Api<DynamicObject>,
    seen: &Arc<Mutex<Seen>>,
) -> anyhow::Result<(
    Option<Api<DynamicObject>>,
    Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
)> {
    if order == DataOrder::AtCreate {
        return Ok((None, Vec::new()));
    }
    let (api, _) = capkk_mgmt::dynamic_api(client, BOOTSTRAP_CONFIG.0, BOOTSTRAP_CONFIG.1, ns).await?;
    let helpers = vec![
        tokio::spawn(provide_bootstrap_data(
            api.clone(),
            "bootstrap-data".into(),
            seen.clone(),
        )),
        tokio::spawn(watch_machines(machines.clone(), seen.clone())),
    ];
    Ok((Some(api), helpers))
}

/// The bench's bootstrap config kind (test/bench/crd).
pub(crate) const BOOTSTRAP_CONFIG: (&str, &str) =
    ("bootstrap.bench.capkk.io/v1alpha1", "BenchBootstrapConfig");

/// Create `m` KKMachine + Machine pairs (`m<i>`, KKCluster `bench-<i / PER_CLUSTER>`, worker role,
/// Kubernetes `version`, bootstrap data Secret `bootstrap-data`) as fast as the API allows, in one task.
/// With `configs` (the bootstrap config API) the Machines follow [`DataOrder::ConfigRef`]: a config is
/// created with each pair and the Machine points at it; otherwise [`DataOrder::AtCreate`], and the instant
/// before the Machine's create is sent is the (conservative) start of every latency. Both record that
/// instant as the Machine's creation in `seen`. Returns when the last create returned.
pub(crate) fn spawn_creator(
    km_api: Api<DynamicObject>,
    m_api: Api<DynamicObject>,
    configs: Option<Api<DynamicObject>>,
    ns: &str,
    m: usize,
    version: &str,
    seen: Arc<Mutex<Seen>>,
) -> tokio::task::JoinHandle<anyhow::Result<Instant>> {
    let (ns, version) = (ns.to_owned(), version.to_owned());
    tokio::spawn(async move {
        for i in 0..m {
            let name = format!("m{i:05}");
            let cname = format!("bench-{}", i / PER_CLUSTER);
            let labels = json!({"cluster.x-k8s.io/cluster-name": cname});
            let km: DynamicObject = serde_json::from_value(json!({"apiVersion": INFRA, "kind": "KKMachine",
                   "metadata": {"name": name, "namespace": ns, "labels": labels},
                   "spec": {"roles": ["worker"]}}))?;
            let bootstrap = match &configs {
                Some(api) => {
                    let cfg: DynamicObject = serde_json::from_value(
                        json!({"apiVersion": BOOTSTRAP_CONFIG.0,
                           "kind": BOOTSTRAP_CONFIG.1, "metadata": {"name": name, "namespace": ns, "labels": labels},
                           "spec": {}}),
                    )?;
                    api.create(&PostParams::default(), &cfg).await?;
                    json!({"configRef": {"apiGroup": api_group(BOOTSTRAP_CONFIG.0), "kind": BOOTSTRAP_CONFIG.1, "name": name}})
                }
                None => json!({"dataSecretName": "bootstrap-data"}),
            };
            let mach: DynamicObject = serde_json::from_value(json!({"apiVersion": CAPI, "kind": "Machine",
                   "metadata": {"name": name, "namespace": ns, "labels": labels},
                   "spec": {"clusterName": cname, "version": version, "bootstrap": bootstrap,
                            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachine", "name": name}}}))?;
            km_api.create(&PostParams::default(), &km).await?;
            if let Ok(mut s) = seen.lock() {
                let now = Instant::now();
                s.created.insert(name.clone(), now);
                if configs.is_none() {
                    s.bootstrap.insert(name.clone(), now);
                }
            }
            m_api.create(&PostParams::default(), &mach).await?;
        }
        anyhow::Ok(Instant::now())
    })
}

fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The status a bootstrap provider writes when the data is ready (CAPI's v1beta2 bootstrap contract).
pub(crate) fn bootstrap_ready_status(secret: &str) -> Value {
    json!({"status": {"dataSecretName": secret, "initialization": {"dataSecretCreated": true}}})
}

/// Whether a bootstrap config is owned by its Machine (CAPI's Machine controller sets the controller
/// reference) and not yet complete: then a bootstrap provider generates its data.
pub(crate) fn wants_bootstrap_data(cfg: &Value) -> bool {
    let owned = cfg["metadata"]["ownerReferences"].as_array().is_some_and(|o| {
        o.iter()
            .any(|o| o["kind"] == "Machine" && o["controller"] == true)
    });
    owned && cfg["status"]["initialization"]["dataSecretCreated"] != true
}

/// The bench as bootstrap provider ([`DataOrder::ConfigRef`]): every config that CAPI's Machine controller
/// made its Machine's is completed at once with the Secret `secret` (like CABPK, which generates the data
/// once its config has an owner Machine); the instant is recorded in `seen.config_done`.
pub(crate) async fn provide_bootstrap_data(
    api: Api<DynamicObject>,
    secret: String,
    seen: Arc<Mutex<Seen>>,
) -> anyhow::Result<()> {
    let mut events = std::pin::pin!(watcher(api.clone(), watcher::Config::default()).default_backoff());
    let status = bootstrap_ready_status(&secret);
    while let Some(ev) = events.next().await {
        let Some(o) = applied(ev, "bootstrap config") else {
            continue;
        };
        let name = o.metadata.name.clone().unwrap_or_default();
        let done = seen
            .lock()
            .map(|s| s.config_done.contains_key(&name))
            .unwrap_or(true);
        if done || !wants_bootstrap_data(&serde_json::to_value(&o)?) {
            continue;
        }
        api.patch_status(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .with_context(|| format!("completing the bootstrap config {name}"))?;
        if let Ok(mut s) = seen.lock() {
            s.config_done.insert(name, Instant::now());
        }
    }
    Ok(())
}

/// Watch the Machines of the namespace and record into `seen.bootstrap` when each first has
/// `spec.bootstrap.dataSecretName` ([`DataOrder::ConfigRef`]: CAPI copied it from the bootstrap config).
pub(crate) async fn watch_machines(api: Api<DynamicObject>, seen: Arc<Mutex<Seen>>) -> anyhow::Result<()> {
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(ev) = events.next().await {
        let now = Instant::now();
        let Some(o) = applied(ev, "Machine") else {
            continue;
        };
        let v = serde_json::to_value(&o)?;
        if v["spec"]["bootstrap"]["dataSecretName"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
            && let Ok(mut s) = seen.lock()
        {
            s.bootstrap
                .entry(o.metadata.name.clone().unwrap_or_default())
                .or_insert(now);
        }
    }
    Ok(())
}

/// The `q` quantile (nearest rank) of the values, NaN when there are none.
pub(crate) fn pct(v: &BTreeMap<String, f64>, q: f64) -> f64 {
    let mut x: Vec<f64> = v.values().copied().collect();
    x.sort_by(f64::total_cmp);
    if x.is_empty() {
        return f64::NAN;
    }
    x[((x.len() - 1) as f64 * q).round() as usize]
}

/// Whether the claim wait is over: `wait` counted from the last create. While creates still run it is never
/// over (under load, creating M pairs alone may take longer than the wait, and a wait counted from the first
/// create left the late machines no time to be claimed).
pub(crate) fn claim_wait_over(last_create: Option<Instant>, wait: Duration, now: Instant) -> bool {
    last_create.is_some_and(|t| now.saturating_duration_since(t) >= wait)
}

/// When the bench gave each Machine its bootstrap data, and when the watch saw each KKMachine get its
/// Machine owner reference, its `HostClaimed` condition and its claim (by name; first time only).
#[derive(Clone, Default)]
pub(crate) struct Seen {
    /// The instant before the Machine's create was sent.
    pub(crate) created: BTreeMap<String, Instant>,
    /// The Machine has bootstrap data (its create with [`DataOrder::AtCreate`]).
    pub(crate) bootstrap: BTreeMap<String, Instant>,
    /// The bench completed the bootstrap config ([`DataOrder::ConfigRef`]).
    pub(crate) config_done: BTreeMap<String, Instant>,
    pub(crate) owned: BTreeMap<String, Instant>,
    pub(crate) host_claimed: BTreeMap<String, Instant>,
    pub(crate) claimed: BTreeMap<String, Instant>,
    /// `status.initialization.provisioned` first true.
    pub(crate) provisioned: BTreeMap<String, Instant>,
    /// `spec.providerID` (`kk:///<kkcluster>/<host>`) once claimed.
    pub(crate) provider_id: BTreeMap<String, String>,
}

impl Seen {
    fn observe(&mut self, k: &Value, now: Instant) {
        let name = k["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let owned = k["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["kind"] == "Machine"));
        if owned {
            self.owned.entry(name.clone()).or_insert(now);
        }
        if has_condition(k, "HostClaimed") {
            self.host_claimed.entry(name.clone()).or_insert(now);
        }
        if let Some(pid) = k["spec"]["providerID"].as_str() {
            self.provider_id
                .entry(name.clone())
                .or_insert_with(|| pid.to_owned());
        }
        if k["status"]["initialization"]["provisioned"] == true {
            self.provisioned.entry(name.clone()).or_insert(now);
        }
        if k["spec"]["instanceID"].is_string() {
            self.claimed.entry(name).or_insert(now);
        }
    }
}

/// The object a watch event created or changed; `None` for other events and errors (logged; the watch
/// retries with backoff).
fn applied(ev: Result<watcher::Event<DynamicObject>, watcher::Error>, what: &str) -> Option<DynamicObject> {
    match ev {
        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => Some(o),
        Ok(_) => None,
        Err(e) => {
            eprintln!("{what} watch: {e} (retrying)");
            None
        }
    }
}

/// Watch the KKMachines of the namespace and record into `seen` (a watch, not polling: a LIST of M
/// KKMachines every few hundred milliseconds would load the API server the manager shares).
pub(crate) async fn watch_kkmachines(api: Api<DynamicObject>, seen: Arc<Mutex<Seen>>) -> anyhow::Result<()> {
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(ev) = events.next().await {
        let now = Instant::now();
        let Some(o) = applied(ev, "KKMachine") else {
            continue;
        };
        if let Ok(mut s) = seen.lock() {
            s.observe(&serde_json::to_value(o)?, now);
        }
    }
    Ok(())
}

/// Per name present in both: `end - start` in seconds (an end before its start counts as 0).
pub(crate) fn latencies(
    starts: &BTreeMap<String, Instant>,
    ends: &BTreeMap<String, Instant>,
) -> BTreeMap<String, f64> {
    ends.iter()
        .filter_map(|(n, e)| {
            let s = starts.get(n)?;
            Some((n.clone(), e.saturating_duration_since(*s).as_secs_f64()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_completes_a_bootstrap_config_only_once_its_machine_owns_it() {
        let owner =
            json!([{"apiVersion": CAPI, "kind": "Machine", "name": "m0", "uid": "u", "controller": true}]);
        assert!(!wants_bootstrap_data(&json!({"metadata": {"name": "m0"}})));
        assert!(
            !wants_bootstrap_data(&json!({"metadata": {"name": "m0", "ownerReferences":
            [{"kind": "Machine", "name": "m0", "uid": "u"}]}})),
            "an owner that is not the controller"
        );
        let mut cfg = json!({"metadata": {"name": "m0", "ownerReferences": owner}});
        assert!(wants_bootstrap_data(&cfg));
        cfg["status"] = bootstrap_ready_status("bootstrap-data")["status"].clone();
        assert!(!wants_bootstrap_data(&cfg), "already complete");
        assert_eq!(cfg["status"]["dataSecretName"], "bootstrap-data");
        assert_eq!(cfg["status"]["initialization"]["dataSecretCreated"], true);
    }

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
