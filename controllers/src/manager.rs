//! The manager: flags (with environment fallbacks), logging, metrics and health endpoints, leader election,
//! the three controllers, graceful shutdown.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use capkk_api::{
    KKCluster, KKInstance, KKMachine,
    consts::{CLUSTER_NAME_LABEL, WATCH_FILTER_LABEL},
};
use capkk_ssh::{PoolConfig, SshPool};
use clap::{Parser, ValueEnum};
use futures::StreamExt;
use kube::{
    Api, Client, Config, ResourceExt,
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{Controller, WatchStreamExt, predicates, reflector::ObjectRef, watcher},
};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::{
    capi::{Cluster, Machine},
    context::{Context, Settings, Stores, Triggers},
    kkinstance, kkmachine,
    leader::{LeaderConfig, LeaderElector},
    metrics::Metrics,
    reconcile::{error_policy, reconcile},
    services::ServiceLayer,
    shared::{Shared, strip_managed_fields},
};

/// Log output format.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    capkk_api::parse_duration_seconds(s)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?} is not a duration like 30s, 10m or 1h"))
}

/// Command-line flags of the manager.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "manager",
    version,
    about = "capkk-rs: Cluster API infrastructure provider for SSH hosts"
)]
pub struct Args {
    /// Kubeconfig of the management cluster (default: in-cluster config or $KUBECONFIG / ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "CAPKK_NAMESPACE")]
    pub namespace: Option<String>,
    /// Only reconcile objects labelled cluster.x-k8s.io/watch-filter=<value> (empty: all).
    #[arg(long, env = "CAPKK_WATCH_FILTER", default_value = "")]
    pub watch_filter: String,
    /// Address of the /metrics endpoint ("0" disables it).
    #[arg(long, env = "CAPKK_METRICS_BIND_ADDRESS", default_value = "127.0.0.1:8080")]
    pub metrics_bind_address: String,
    /// Address of the /healthz and /readyz endpoints ("0" disables them).
    #[arg(long, env = "CAPKK_HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// Run only while holding the leader Lease.
    #[arg(long, env = "CAPKK_LEADER_ELECT", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else --namespace, else capkk-system).
    #[arg(long, env = "CAPKK_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "CAPKK_LEADER_ELECTION_ID",
        default_value = "capkk-manager-leader"
    )]
    pub leader_election_id: String,
    /// Lease duration.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Give up leadership when renewing fails this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// Interval between lease attempts.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// Hosts worked on at once (SSH host tasks).
    #[arg(long, env = "CAPKK_MAX_CONCURRENT_HOSTS", default_value_t = 10)]
    pub max_concurrent_hosts: usize,
    /// Hosts probed at once per KKCluster.
    #[arg(long, default_value_t = 8)]
    pub probe_concurrency: usize,
    /// Re-probe the inventory this often.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub probe_interval: Duration,
    /// Quarantine a host that stays unreachable this long while being reset on release.
    #[arg(long, env = "CAPKK_QUARANTINE_AFTER", default_value = "10m", value_parser = parse_duration)]
    pub quarantine_after: Duration,
    /// Bound on TCP connect + SSH handshake + authentication.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ssh_connect_timeout: Duration,
    /// Controller-side cache of downloaded artifacts (content-addressed).
    #[arg(long, env = "CAPKK_ARTIFACT_CACHE_DIR", default_value_os_t = default_cache_dir())]
    pub artifact_cache_dir: PathBuf,
    /// Largest artifact (binary, archive, ISO) a download may bring into the cache, in bytes.
    #[arg(long, env = "CAPKK_MAX_ARTIFACT_BYTES", default_value_t = capkk_service::binary::cache::DEFAULT_MAX_ARTIFACT_BYTES)]
    pub max_artifact_bytes: u64,
    /// The only directory `privateKeyPath` keys may be read from; unset or empty (default) refuses
    /// `privateKeyPath` (a path in a tenant's object must not read the manager's files).
    #[arg(long, env = "CAPKK_PRIVATE_KEY_DIR")]
    pub private_key_dir: Option<PathBuf>,
    /// Log format.
    #[arg(long, env = "CAPKK_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Identity in the leader Lease (default: $POD_NAME, else hostname_pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("capkk-rs/artifacts")
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal: in a Pod's log, a file or CI output they are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Parse `host:port`, `:port` (all interfaces) or `0` (disabled).
pub fn parse_bind(s: &str) -> anyhow::Result<Option<SocketAddr>> {
    let s = s.trim();
    if s.is_empty() || s == "0" {
        return Ok(None);
    }
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    Ok(Some(full.parse().with_context(|| {
        format!("bind address {s:?} is not host:port")
    })?))
}

async fn client(args: &Args) -> anyhow::Result<Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => Config::infer()
            .await
            .context("no kubeconfig: pass --kubeconfig or run in a cluster")?,
    };
    Client::try_from(config).context("creating the Kubernetes client")
}

#[derive(Clone)]
struct Http {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    /// The controllers' caches, once they exist (the host pool gauges are computed from them per scrape).
    stores: Arc<std::sync::OnceLock<Stores>>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(h): State<Http>) -> impl IntoResponse {
    if h.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics_handler(State(h): State<Http>) -> impl IntoResponse {
    if let Some(stores) = h.stores.get() {
        crate::kkcluster::record_pools(&h.metrics, stores);
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.encode(),
    )
}

async fn serve(
    addr: SocketAddr,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
    what: &'static str,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {what} on {addr}"))?;
    info!(%addr, "{what} endpoint listening");
    tokio::spawn(async move {
        let res = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|v| *v).await;
            })
            .await;
        if let Err(e) = res {
            error!(error = %e, "{what} server failed");
        }
    });
    Ok(())
}

fn api<K>(client: &Client, ns: &Option<String>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// How long in-flight reconciles may run after SIGTERM before the manager stops anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Run the manager until SIGTERM/SIGINT (or until leadership is lost, which is an error).
pub async fn run(args: Args) -> anyhow::Result<()> {
    init_tracing(args.log_format);
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let metrics_addr = parse_bind(&args.metrics_bind_address)?;
    let health_addr = parse_bind(&args.health_probe_bind_address)?;
    let client = client(&args).await?;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutdown signal received");
        let _ = shutdown_tx.send(true);
    });

    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let http = Http {
        metrics: metrics.clone(),
        ready: ready.clone(),
        stores: Arc::default(),
    };
    if let Some(addr) = metrics_addr {
        serve(
            addr,
            Router::new()
                .route("/metrics", get(metrics_handler))
                .with_state(http.clone()),
            shutdown_rx.clone(),
            "metrics",
        )
        .await?;
    }
    if let Some(addr) = health_addr {
        let r = Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(http.clone());
        serve(addr, r, shutdown_rx.clone(), "health").await?;
    }

    client
        .apiserver_version()
        .await
        .context("the management cluster's API server does not answer")?;
    ready.store(true, Ordering::SeqCst);

    let identity = args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "manager".into());
        format!("{}_{}", host.trim(), std::process::id())
    });
    let elector = if args.leader_elect {
        let ns = args
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| args.namespace.clone())
            .unwrap_or_else(|| "capkk-system".into());
        let e = LeaderElector::new(
            client.clone(),
            LeaderConfig {
                namespace: ns,
                name: args.leader_election_id.clone(),
                identity: identity.clone(),
                lease_duration: args.lease_duration,
                renew_deadline: args.renew_deadline,
                retry_period: args.retry_period,
            },
        );
        let mut rx = shutdown_rx.clone();
        tokio::select! {
            _ = e.acquire() => {}
            _ = rx.wait_for(|v| *v) => { info!("shut down before becoming leader"); return Ok(()); }
        }
        Some(Arc::new(e))
    } else {
        None
    };

    let settings = Settings {
        watch_filter: Some(args.watch_filter.clone()).filter(|s| !s.is_empty()),
        max_concurrent_hosts: args.max_concurrent_hosts,
        probe_concurrency: args.probe_concurrency,
        probe_interval: args.probe_interval,
        quarantine_after: args.quarantine_after,
        ..Settings::default()
    };
    let services = ServiceLayer::new(&args.artifact_cache_dir)
        .with_context(|| format!("artifact cache {}", args.artifact_cache_dir.display()))?;
    services.cache().set_max_artifact_bytes(args.max_artifact_bytes);
    crate::hosts::set_private_key_dir(args.private_key_dir.clone().filter(|d| !d.as_os_str().is_empty()));
    let pool = SshPool::new(PoolConfig {
        connect_timeout: args.ssh_connect_timeout,
        ..PoolConfig::default()
    });
    let (instance_tx, instance_rx) = futures::channel::mpsc::unbounded::<ObjectRef<KKInstance>>();
    let (cluster_tx, cluster_rx) = futures::channel::mpsc::unbounded::<ObjectRef<KKCluster>>();
    let (machine_tx, machine_rx) = futures::channel::mpsc::unbounded::<ObjectRef<KKMachine>>();
    let wc = match &settings.watch_filter {
        Some(v) => watcher::Config::default().labels(&format!("{WATCH_FILTER_LABEL}={v}")),
        None => watcher::Config::default(),
    };
    let ns = args.namespace.clone();
    // Each kind is watched once; the controllers subscribe to the watches they are woken by, and read the
    // same caches (see shared.rs). CAPI's objects carry no watch-filter label.
    let (mut kkclusters, mut kkmachines, mut kkinstances) = (
        Shared::<KKCluster>::default(),
        Shared::<KKMachine>::default(),
        Shared::<KKInstance>::default(),
    );
    let (mut capi_machines, mut capi_clusters) = (Shared::<Machine>::default(), Shared::<Cluster>::default());
    let kc_controller = Controller::for_stream(kkclusters.subscribe(), kkclusters.store());
    let km_controller = Controller::for_stream(kkmachines.subscribe(), kkmachines.store());
    let ki_controller = Controller::for_stream(kkinstances.subscribe(), kkinstances.store());
    let stores = Stores {
        instances: kkinstances.store(),
        machines: kkmachines.store(),
        clusters: kkclusters.store(),
        capi_machines: capi_machines.store(),
        capi_clusters: capi_clusters.store(),
    };
    let _ = http.stores.set(stores.clone());
    let ctx = Arc::new(Context::new(
        client.clone(),
        settings,
        Arc::new(pool),
        Arc::new(services),
        metrics.clone(),
        Triggers {
            instances: instance_tx,
            clusters: cluster_tx,
            machines: machine_tx,
        },
        stores.clone(),
    ));
    info!(namespace = ?args.namespace, watch_filter = %args.watch_filter, %identity, "Starting controllers");

    // Cluster changes matter to the three kinds only through the spec (pause, infrastructureRef, endpoint):
    // CAPI rewrites a Cluster's status whenever one of its Machines changes, and waking every object of the
    // cluster for each of those was most of the reconciles with 200 Machines.
    let mut cluster_spec_changes = || {
        capi_clusters
            .subscribe()
            .predicate_filter(predicates::generation, Default::default())
    };
    let clusters = kc_controller
        .watches_stream(cluster_spec_changes(), |c: Cluster| {
            let r = c.spec.infrastructure_ref.as_ref().filter(|r| r.is("KKCluster"))?;
            Some(ObjectRef::<KKCluster>::new(&r.name).within(&c.namespace()?))
        })
        .reconcile_on(cluster_rx)
        .shutdown_on_signal()
        .run(reconcile::<KKCluster>, error_policy::<KKCluster>, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let (km_by_cluster, km_by_kkcluster) = (stores.machines.clone(), stores.machines.clone());
    let machines = km_controller
        .owns_stream(kkinstances.subscribe())
        .watches_stream(capi_machines.subscribe(), kkmachine::machine_to_kkmachine)
        .watches_stream(cluster_spec_changes(), move |c: Cluster| {
            of_cluster(&km_by_cluster.state(), &c)
        })
        // A KKCluster becoming provisioned (or changing its inventory) wakes its KKMachines: no polling. Its
        // other status changes (probe results) do not.
        .watches_stream(
            kkclusters
                .subscribe()
                .predicate_filter(kkmachine::kkcluster_wakes_machines, Default::default()),
            move |k: KKCluster| kkmachine::of_kkcluster(&km_by_kkcluster.state(), &k),
        )
        // A workload Node registering (the workload clusters' Node watches) wakes its KKMachine.
        .reconcile_on(machine_rx)
        .shutdown_on_signal()
        .run(reconcile::<KKMachine>, error_policy::<KKMachine>, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let ki_store = stores.instances.clone();
    let instances = ki_controller
        // A KKMachine's spec (the claim record, spec.instanceID) and its deletion matter to its KKInstance, not
        // its status (which mirrors the KKInstance: waking the KKInstance for it only fed a loop).
        .watches_stream(
            kkmachines
                .subscribe()
                .predicate_filter(predicates::generation, Default::default()),
            kkinstance::kkmachine_to_instance,
        )
        .watches_stream(cluster_spec_changes(), move |c: Cluster| {
            of_cluster(&ki_store.state(), &c)
        })
        .reconcile_on(instance_rx)
        .shutdown_on_signal()
        .run(reconcile::<KKInstance>, error_policy::<KKInstance>, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    // The watches; they run until the controllers stop.
    let watches = futures::future::join5(
        kkclusters.run(watch(api::<KKCluster>(&client, &ns), wc.clone())),
        kkmachines.run(watch(api::<KKMachine>(&client, &ns), wc.clone())),
        kkinstances.run(watch(api::<KKInstance>(&client, &ns), wc.clone())),
        capi_machines.run(watch(api::<Machine>(&client, &ns), watcher::Config::default())),
        capi_clusters.run(watch(api::<Cluster>(&client, &ns), watcher::Config::default())),
    );
    // A changed Secret wakes the KKInstances that read it (metadata only; see secrets.rs). It ends with the
    // controllers (shutdown or lost leadership drop this future).
    let secret_watch = crate::secrets::watch(client.clone(), ns.clone(), ctx.clone());
    // After SIGTERM the controllers drain their in-flight reconciles, but only for SHUTDOWN_GRACE: a container
    // runtime kills after 10 s (podman) or 30 s (a Pod's default). With objects to reconcile (a cluster-wide
    // manager on a plane full of test namespaces) the drain took from 2 s to 16 s here, and the image test's
    // SIGTERM ran into podman's kill. Stopping mid-reconcile is safe: status is applied whole, host work
    // resumes from the host's journal.
    let mut drain = shutdown_rx.clone();
    let controllers = async {
        tokio::select! {
            _ = futures::future::join3(clusters, machines, instances) => {}
            _ = secret_watch => {}
            _ = watches => { error!("the watches ended"); }
            _ = async {
                let _ = drain.wait_for(|v| *v).await;
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } => { warn!(grace = ?SHUTDOWN_GRACE, "in-flight reconciles did not finish in time; stopping anyway"); }
        }
    };

    let lost = async {
        match &elector {
            Some(e) => e.hold().await,
            None => futures::future::pending::<()>().await,
        }
    };
    let result = tokio::select! {
        _ = controllers => Ok(()),
        _ = lost => Err(anyhow::anyhow!("leadership lost")),
    };
    ctx.tasks.abort_all();
    ctx.probes.abort_all();
    if let Some(e) = &elector {
        e.release().await;
    }
    match &result {
        Ok(()) => info!("manager stopped"),
        Err(e) => warn!(error = %e, "manager stopping"),
    }
    result
}

/// The watch of `api`, its objects without their managed fields, retried with backoff after errors.
fn watch<K>(
    api: Api<K>,
    wc: watcher::Config,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    watcher(api, wc).modify(strip_managed_fields).default_backoff()
}

/// The objects of `cluster` (by CAPI's cluster-name label) among `objs`: a Cluster spec change (pause,
/// unpause; the watches filter on generation, so status changes wake nobody) re-queues them.
fn of_cluster<K>(objs: &[Arc<K>], cluster: &Cluster) -> Vec<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone,
{
    let name = cluster.name_any();
    let ns = cluster.namespace();
    objs.iter()
        .filter(|o| o.namespace() == ns && o.labels().get(CLUSTER_NAME_LABEL) == Some(&name))
        .map(|o| ObjectRef::from_obj(&**o))
        .collect()
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses() {
        assert_eq!(parse_bind(":8081").unwrap().unwrap().to_string(), "0.0.0.0:8081");
        assert_eq!(
            parse_bind("127.0.0.1:8080").unwrap().unwrap().to_string(),
            "127.0.0.1:8080"
        );
        assert!(parse_bind("0").unwrap().is_none());
        assert!(parse_bind("nonsense").is_err());
    }

    #[test]
    fn flags_parse_with_defaults() {
        let a = Args::try_parse_from([
            "manager",
            "--leader-elect",
            "--max-concurrent-hosts=3",
            "--quarantine-after=20s",
        ])
        .unwrap();
        assert!(a.leader_elect);
        assert_eq!(a.max_concurrent_hosts, 3);
        assert_eq!(a.quarantine_after, Duration::from_secs(20));
        assert_eq!(a.log_format, LogFormat::Text);
        assert_eq!(
            a.private_key_dir, None,
            "privateKeyPath is off unless the operator names a directory"
        );
        assert_eq!(
            a.max_artifact_bytes,
            capkk_service::binary::cache::DEFAULT_MAX_ARTIFACT_BYTES
        );
        let a = Args::try_parse_from([
            "manager",
            "--private-key-dir=/etc/capkk/keys",
            "--max-artifact-bytes=1024",
        ])
        .unwrap();
        assert_eq!(a.private_key_dir, Some(PathBuf::from("/etc/capkk/keys")));
        assert_eq!(a.max_artifact_bytes, 1024);
        let a = Args::try_parse_from(["manager", "--leader-elect=false", "--log-format=json"]).unwrap();
        assert!(!a.leader_elect);
        assert_eq!(a.log_format, LogFormat::Json);
        assert!(Args::try_parse_from(["manager", "--quarantine-after=soon"]).is_err());
    }
}
