//! The manager: flags ([`args`]), logging, the metrics and health endpoints ([`http`], [`diagnostics`]), leader election
//! ([`leader`]), the shared watches and the three controllers, graceful shutdown.

mod args;
mod diagnostics;
mod http;
mod leader;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use capkk_api::{KKCluster, KKInstance, KKMachine, KKRemediation};
use capkk_ssh::{PoolConfig, SshPool};
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
    runtime::reflector::ObjectRef,
};
use tokio::sync::watch;
use tracing::{error, info, warn};

pub use self::args::{Args, LogFormat};
use self::{
    args::parse_bind,
    http::Http,
    leader::{LeaderConfig, LeaderElector},
};
use crate::{
    context::{Context, Settings, Triggers},
    kkcluster, kkinstance, kkmachine, kkremediation,
    metrics::Metrics,
    services::ServiceLayer,
    watches::Watches,
};

fn init_tracing(format: LogFormat, level: Option<&str>) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.unwrap_or("info")));
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

async fn client(args: &Args) -> anyhow::Result<Client> {
    let mut config = match &args.kubeconfig {
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
    // The API server names the field manager of a write without one (our merge patches: finalizers,
    // labels, spec.controlPlaneEndpoint) after the User-Agent's first word, and "unknown" without one:
    // with it, `kubectl get -o yaml --show-managed-fields` and a GitOps engine see which fields are ours.
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(USER_AGENT),
    ));
    Client::try_from(config).context("creating the Kubernetes client")
}

/// The manager's User-Agent; its first word is the field manager of its writes that name none.
const USER_AGENT: &str = concat!("capkk-manager/", env!("CARGO_PKG_VERSION"));

/// How long in-flight reconciles may run after SIGTERM before the manager stops anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Run the manager until SIGTERM/SIGINT (or until leadership is lost, which is an error).
pub async fn run(args: Args) -> anyhow::Result<()> {
    init_tracing(args.log_format, args.log_level());
    for (flag, value, why) in args.ignored() {
        warn!(%flag, %value, "flag accepted but ignored: {why}");
    }
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let metrics_endpoint = args.metrics_endpoint()?;
    let tls = args.tls_options()?;
    let health_addr = parse_bind(&args.health_probe_bind_address)?;
    let extension_addr = parse_bind(&args.runtime_extension_bind_address)?;
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
    http::serve_endpoints(&http, &client, metrics_endpoint, &tls, health_addr, &shutdown_rx).await?;

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
        let (lease_ns, lease_name) = args.lease();
        let ns = lease_ns
            .or_else(|| args.leader_election_namespace.clone())
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| args.namespace.clone())
            .unwrap_or_else(|| "capkk-system".into());
        let e = LeaderElector::new(
            client.clone(),
            LeaderConfig {
                namespace: ns,
                name: lease_name,
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
        max_concurrent_hosts_per_namespace: args.max_concurrent_hosts_per_namespace.unwrap_or_else(|| {
            args::default_hosts_per_namespace(args.max_concurrent_hosts, args.namespace.is_some())
        }),
        probe_concurrency: args.probe_concurrency,
        max_host_phase_duration: args.max_host_phase_duration,
        probe_interval: args.probe_interval,
        quarantine_after: args.quarantine_after,
        sync_period: args.sync_period,
        concurrency: args.concurrency(),
        host_claim_namespace: args.host_claim_namespace.clone(),
        prepare_before_bootstrap_data: args.prepare_before_bootstrap_data,
        ..Settings::default()
    };
    let services = ServiceLayer::new(&args.artifact_cache_dir)
        .with_context(|| format!("artifact cache {}", args.artifact_cache_dir.display()))?;
    services.cache().set_max_artifact_bytes(args.max_artifact_bytes);
    services.cache().set_max_cache_bytes(args.max_cache_bytes);
    let policy = args.download_policy();
    info!(
        deny = ?policy.deny.iter().map(ToString::to_string).collect::<Vec<_>>(),
        allow = ?policy.allow,
        allow_loopback = policy.allow_loopback,
        "Controller-side download policy (unspecified, link-local, metadata and multicast addresses are \
         refused whatever it says)"
    );
    services.cache().set_download_policy(policy);
    crate::hosts::set_private_key_dir(args.private_key_dir.clone().filter(|d| !d.as_os_str().is_empty()));
    let addresses = args.ssh_address_policy();
    info!(
        deny = ?addresses.deny.iter().map(ToString::to_string).collect::<Vec<_>>(),
        allow = ?addresses.allow.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "SSH address policy (loopback is refused unless allowed; unspecified, link-local, metadata and \
         multicast addresses are refused whatever it says)"
    );
    let pool = SshPool::new(PoolConfig {
        connect_timeout: args.ssh_connect_timeout,
        host_aliases: args.ssh_host_aliases.iter().cloned().collect(),
        addresses,
        ..PoolConfig::default()
    });
    let (instance_tx, instance_rx) = futures::channel::mpsc::unbounded::<ObjectRef<KKInstance>>();
    let (cluster_tx, cluster_rx) = futures::channel::mpsc::unbounded::<ObjectRef<KKCluster>>();
    let (machine_tx, machine_rx) = futures::channel::mpsc::unbounded::<ObjectRef<KKMachine>>();
    let (remediation_tx, remediation_rx) = futures::channel::mpsc::unbounded::<ObjectRef<KKRemediation>>();
    let ns = args.namespace.clone();
    // Each kind is watched once; the controllers subscribe to the watches they are woken by, and read the
    // same caches (crate::watches).
    let mut watches = Watches::default();
    let stores = watches.stores();
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
            remediations: remediation_tx,
        },
        stores,
    ));
    info!(namespace = ?args.namespace, watch_filter = %args.watch_filter, %identity, "Starting controllers");
    // The hooks start with the controllers (after the leader election): a standby must not work on hosts.
    if let Some(addr) = extension_addr {
        crate::inplace::server::serve(
            addr,
            args.runtime_extension_cert_dir.clone(),
            tls.clone(),
            Some(ctx.clone()),
            shutdown_rx.clone(),
        )
        .await?;
    }

    let clusters = kkcluster::watches::controller(&mut watches, cluster_rx, ctx.clone());
    let machines = kkmachine::watches::controller(&mut watches, machine_rx, ctx.clone());
    let instances = kkinstance::watches::controller(&mut watches, instance_rx, ctx.clone());
    let remediations =
        kkremediation::watches::controller(&mut watches, &client, ns.as_deref(), remediation_rx, ctx.clone());
    // The watches; they run until the controllers stop.
    let watches = watches.run(&client, ns.as_deref(), ctx.settings.watch_filter.as_deref());
    // A changed Secret wakes the KKInstances that read it (metadata GETs by name; see secrets.rs). It ends with
    // the controllers (shutdown or lost leadership drop this future).
    let secret_watch = crate::secrets::poll(
        client.clone(),
        ctx.clone(),
        args.secret_poll_interval.max(Duration::from_secs(1)),
    );
    // After SIGTERM the controllers drain their in-flight reconciles, but only for SHUTDOWN_GRACE: a container
    // runtime kills after 10 s (podman) or 30 s (a Pod's default), and a drain with many objects to reconcile
    // can take longer than that (docs/benchmarks.md). Stopping mid-reconcile is safe: status is applied whole,
    // host work resumes from the host's journal.
    let mut drain = shutdown_rx.clone();
    let controllers = async {
        tokio::select! {
            _ = futures::future::join4(clusters, machines, instances, remediations) => {}
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
    ctx.abort_host_work();
    if let Some(e) = &elector {
        e.release().await;
    }
    match &result {
        Ok(()) => info!("manager stopped"),
        Err(e) => warn!(error = %e, "manager stopping"),
    }
    result
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
