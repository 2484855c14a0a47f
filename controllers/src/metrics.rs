//! Prometheus metrics: reconciles, errors and durations per kind; SSH command latency; host pool sizes.
//!
//! Beside our `capkk_*` families, the reconcile families a controller-runtime provider exposes, under the
//! same names and labels (`controller_runtime_reconcile_total{controller,result}`,
//! `controller_runtime_reconcile_errors_total`, `controller_runtime_reconcile_time_seconds`,
//! `controller_runtime_active_workers`, `controller_runtime_max_concurrent_reconciles`), so the dashboards
//! and alerts written for CAPI's providers work unchanged. `controller` is the lower-case kind (`kkcluster`,
//! `kkmachine`, `kkinstance`). `workqueue_*` is not exposed: kube-runtime's scheduler does not make its
//! queue observable.
//!
//! The host pool series (`capkk_hosts{namespace,kkcluster,state}`) name every tenant's namespace and KKCluster:
//! they are encoded only for an endpoint that authenticates its readers ([`Exposure::Authenticated`]), never for
//! plain `/metrics`.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use capkk_executor::{ExecError, ExecOutput, ExecRequest, Executor, PutRequest};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// `kind` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabels {
    /// KKCluster, KKMachine or KKInstance.
    pub kind: String,
}

/// Error labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorLabels {
    /// Kind reconciled.
    pub kind: String,
    /// Error class.
    pub error: String,
}

/// `controller` label (controller-runtime's).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ControllerLabels {
    /// kkcluster, kkmachine or kkinstance.
    pub controller: String,
}

/// `controller` and `result` labels (controller-runtime's).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    /// kkcluster, kkmachine or kkinstance.
    pub controller: String,
    /// success, error or requeue_after.
    pub result: String,
}

/// How a reconcile ended, as controller-runtime's `result` label spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Done; waits for the next change.
    Success,
    /// Done for now; asked to run again after a delay.
    RequeueAfter,
    /// Failed.
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::RequeueAfter => "requeue_after",
            Self::Error => "error",
        }
    }
}

/// Host pool labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct HostLabels {
    /// Namespace of the KKCluster.
    pub namespace: String,
    /// KKCluster name.
    pub kkcluster: String,
    /// free, claimed or quarantined.
    pub state: String,
}

/// Who reads an encoding of the metrics ([`Metrics::encode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exposure {
    /// A reader the endpoint authenticated and authorized (the diagnostics endpoint): every series.
    Authenticated,
    /// Anyone who reaches the port (plain HTTP, no authentication): no series that names a tenant's namespace
    /// or objects.
    Anonymous,
}

/// The manager's metrics.
pub(crate) struct Metrics {
    registry: Registry,
    /// The series that name tenants' namespaces and objects (the host pools), for [`Exposure::Authenticated`]
    /// only.
    tenant_registry: Registry,
    reconciles: Family<KindLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: Family<KindLabels, Histogram, fn() -> Histogram>,
    ssh_latency: Histogram,
    hosts: Family<HostLabels, Gauge>,
    tasks_running: Gauge,
    cr_reconciles: Family<ResultLabels, Counter>,
    cr_errors: Family<ControllerLabels, Counter>,
    cr_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    cr_active: Family<ControllerLabels, Gauge>,
    cr_max_concurrent: Family<ControllerLabels, Gauge>,
    /// Held while the pool series are replaced or the registry is encoded.
    scrape: std::sync::Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.5, 14))
}

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`.
fn controller_runtime_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
        1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0,
        40.0, 50.0, 60.0,
    ])
}

/// controller-runtime's `controller` label value of a kind: `KKMachine` -> `kkmachine`.
fn controller_name(kind: &str) -> String {
    kind.to_ascii_lowercase()
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Create and register every metric.
    pub(crate) fn new() -> Self {
        let mut root = Registry::default();
        let cr_reconciles = Family::<ResultLabels, Counter>::default();
        let cr_errors = Family::<ControllerLabels, Counter>::default();
        let cr_time = Family::<ControllerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            controller_runtime_histogram as _,
        );
        let cr_active = Family::<ControllerLabels, Gauge>::default();
        let cr_max_concurrent = Family::<ControllerLabels, Gauge>::default();
        root.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            cr_reconciles.clone(),
        );
        root.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            cr_errors.clone(),
        );
        root.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            cr_time.clone(),
        );
        root.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            cr_active.clone(),
        );
        root.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller (0: unbounded)",
            cr_max_concurrent.clone(),
        );
        let registry = root.sub_registry_with_prefix("capkk");
        let reconciles = Family::<KindLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let durations = Family::<KindLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            reconcile_histogram as _,
        );
        let ssh_latency = Histogram::new(exponential_buckets(0.001, 2.0, 18));
        let hosts = Family::<HostLabels, Gauge>::default();
        let tasks_running = Gauge::default();
        let mut tenant_root = Registry::default();
        registry.register("reconcile", "Reconciles per kind", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Failed reconciles per kind and error class",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration per kind",
            durations.clone(),
        );
        registry.register(
            "ssh_command_duration_seconds",
            "Latency of SSH command executions",
            ssh_latency.clone(),
        );
        tenant_root.sub_registry_with_prefix("capkk").register(
            "hosts",
            "Hosts per KKCluster and state (free, claimed, quarantined)",
            hosts.clone(),
        );
        registry.register(
            "host_tasks_running",
            "Background host tasks running",
            tasks_running.clone(),
        );
        Self {
            registry: root,
            tenant_registry: tenant_root,
            reconciles,
            errors,
            durations,
            ssh_latency,
            hosts,
            tasks_running,
            cr_reconciles,
            cr_errors,
            cr_time,
            cr_active,
            cr_max_concurrent,
            scrape: std::sync::Mutex::new(()),
        }
    }

    /// Count one reconcile of `kind` taking `took` that ended with `outcome`.
    pub(crate) fn reconciled(&self, kind: &str, took: Duration, outcome: Outcome) {
        let l = KindLabels {
            kind: kind.to_owned(),
        };
        self.reconciles.get_or_create(&l).inc();
        self.durations.get_or_create(&l).observe(took.as_secs_f64());
        let controller = controller_name(kind);
        self.cr_reconciles
            .get_or_create(&ResultLabels {
                controller: controller.clone(),
                result: outcome.label().to_owned(),
            })
            .inc();
        let c = ControllerLabels { controller };
        if outcome == Outcome::Error {
            self.cr_errors.get_or_create(&c).inc();
        }
        self.cr_time.get_or_create(&c).observe(took.as_secs_f64());
    }

    /// A reconcile of `kind` started; the worker counts as active until the guard is dropped (also when the
    /// reconcile is cancelled).
    pub(crate) fn worker(&self, kind: &str) -> ActiveWorker {
        let gauge = self
            .cr_active
            .get_or_create(&ControllerLabels {
                controller: controller_name(kind),
            })
            .clone();
        gauge.inc();
        ActiveWorker(gauge)
    }

    /// The concurrency limit of `kind`'s controller (0: unbounded), and the zero series every controller
    /// family starts with, so a dashboard sees each controller before its first reconcile.
    pub(crate) fn controller_started(&self, kind: &str, max_concurrent: u16) {
        let c = ControllerLabels {
            controller: controller_name(kind),
        };
        self.cr_max_concurrent
            .get_or_create(&c)
            .set(i64::from(max_concurrent));
        let _ = self.cr_active.get_or_create(&c);
        let _ = self.cr_errors.get_or_create(&c);
    }

    /// Count one failed reconcile.
    pub(crate) fn failed(&self, kind: &str, error: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                kind: kind.to_owned(),
                error: error.to_owned(),
            })
            .inc();
    }

    /// Record an SSH command's latency.
    pub(crate) fn ssh_command(&self, took: Duration) {
        self.ssh_latency.observe(took.as_secs_f64());
    }

    /// Replace the host pool sizes with `pools` (one entry per KKCluster: namespace, name, free, claimed,
    /// quarantined); a KKCluster that is not listed any more loses its series.
    pub(crate) fn set_pools(&self, pools: &[(String, String, i64, i64, i64)]) {
        let _scrape = self.scrape.lock();
        self.hosts.clear();
        for (namespace, kkcluster, free, claimed, quarantined) in pools {
            for (state, v) in [("free", free), ("claimed", claimed), ("quarantined", quarantined)] {
                self.hosts
                    .get_or_create(&HostLabels {
                        namespace: namespace.clone(),
                        kkcluster: kkcluster.clone(),
                        state: state.to_owned(),
                    })
                    .set(*v);
            }
        }
    }

    /// Number of background host tasks.
    pub(crate) fn set_tasks_running(&self, n: i64) {
        self.tasks_running.set(n);
    }

    /// OpenMetrics text for a reader of `exposure`: without the tenant-naming series for an anonymous one.
    pub(crate) fn encode(&self, exposure: Exposure) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        // Not while another scrape replaces the pool series (it would see them half written).
        let _scrape = self.scrape.lock();
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry);
        if exposure == Exposure::Authenticated {
            let _ = encode_registry(&mut out, &self.tenant_registry);
        }
        let _ = encode_eof(&mut out);
        out
    }
}

/// One running reconcile in `controller_runtime_active_workers`.
pub(crate) struct ActiveWorker(Gauge);

impl Drop for ActiveWorker {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// An [`Executor`] that records each command's latency.
pub(crate) struct MeteredExecutor {
    inner: Arc<dyn Executor>,
    metrics: Arc<Metrics>,
}

impl MeteredExecutor {
    /// Wrap `inner`.
    pub(crate) fn new(inner: Arc<dyn Executor>, metrics: Arc<Metrics>) -> Self {
        Self { inner, metrics }
    }
}

#[async_trait]
impl Executor for MeteredExecutor {
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        let start = std::time::Instant::now();
        let out = self.inner.exec(req).await;
        self.metrics.ssh_command(start.elapsed());
        out
    }

    async fn put(&self, req: PutRequest) -> Result<u64, ExecError> {
        self.inner.put(req).await
    }

    async fn get(&self, path: &str, limit: usize, privileged: bool) -> Result<Vec<u8>, ExecError> {
        self.inner.get(path, limit, privileged).await
    }

    fn target(&self) -> String {
        self.inner.target()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_all_families() {
        let m = Metrics::new();
        m.controller_started("KKMachine", 0);
        m.reconciled("KKMachine", Duration::from_millis(3), Outcome::RequeueAfter);
        m.reconciled("KKMachine", Duration::from_millis(30), Outcome::Error);
        m.failed("KKMachine", "kube");
        let worker = m.worker("KKMachine");
        m.ssh_command(Duration::from_millis(12));
        m.set_pools(&[("ns".into(), "c".into(), 3, 2, 1)]);
        let text = m.encode(Exposure::Authenticated);
        for needle in [
            "capkk_reconcile_total{kind=\"KKMachine\"} 2",
            "capkk_reconcile_errors_total{kind=\"KKMachine\",error=\"kube\"} 1",
            "capkk_reconcile_duration_seconds_count{kind=\"KKMachine\"} 2",
            "controller_runtime_reconcile_total{controller=\"kkmachine\",result=\"requeue_after\"} 1",
            "controller_runtime_reconcile_total{controller=\"kkmachine\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"kkmachine\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"kkmachine\"} 2",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"0.005\",controller=\"kkmachine\"} 1",
            "controller_runtime_active_workers{controller=\"kkmachine\"} 1",
            "controller_runtime_max_concurrent_reconciles{controller=\"kkmachine\"} 0",
            "capkk_ssh_command_duration_seconds_count 1",
            "capkk_hosts{namespace=\"ns\",kkcluster=\"c\",state=\"quarantined\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        drop(worker);
        assert!(
            m.encode(Exposure::Authenticated)
                .contains("controller_runtime_active_workers{controller=\"kkmachine\"} 0"),
            "a finished reconcile frees its worker"
        );
    }

    #[test]
    fn plain_metrics_leave_out_the_pool_series_that_name_tenants_and_keep_the_rest() {
        let m = Metrics::new();
        m.reconciled("KKMachine", Duration::from_millis(3), Outcome::Success);
        m.set_pools(&[("tenant-a".into(), "secret-project".into(), 3, 2, 1)]);
        let full = m.encode(Exposure::Authenticated);
        assert!(
            full.contains(
                "capkk_hosts{namespace=\"tenant-a\",kkcluster=\"secret-project\",state=\"free\"} 3"
            ),
            "{full}"
        );
        let plain = m.encode(Exposure::Anonymous);
        for leak in ["capkk_hosts", "tenant-a", "secret-project"] {
            assert!(!plain.contains(leak), "{leak} in plain /metrics:\n{plain}");
        }
        assert!(
            plain.contains("capkk_reconcile_total{kind=\"KKMachine\"} 1")
                && plain.contains("controller_runtime_reconcile_total{"),
            "the other series stay: {plain}"
        );
        for text in [&full, &plain] {
            assert_eq!(text.matches("# EOF").count(), 1, "one OpenMetrics page: {text}");
            assert!(text.ends_with("# EOF\n"), "{text}");
        }
    }
}
