//! Prometheus metrics: reconciles, errors and durations per kind; SSH command latency; host pool sizes.

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

/// The manager's metrics.
pub(crate) struct Metrics {
    registry: Registry,
    reconciles: Family<KindLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: Family<KindLabels, Histogram, fn() -> Histogram>,
    ssh_latency: Histogram,
    hosts: Family<HostLabels, Gauge>,
    tasks_running: Gauge,
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

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Create and register every metric.
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("capkk");
        let reconciles = Family::<KindLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let durations = Family::<KindLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            reconcile_histogram as _,
        );
        let ssh_latency = Histogram::new(exponential_buckets(0.001, 2.0, 18));
        let hosts = Family::<HostLabels, Gauge>::default();
        let tasks_running = Gauge::default();
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
        registry.register(
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
            registry,
            reconciles,
            errors,
            durations,
            ssh_latency,
            hosts,
            tasks_running,
            scrape: std::sync::Mutex::new(()),
        }
    }

    /// Count one reconcile of `kind` taking `took`.
    pub(crate) fn reconciled(&self, kind: &str, took: Duration) {
        let l = KindLabels {
            kind: kind.to_owned(),
        };
        self.reconciles.get_or_create(&l).inc();
        self.durations.get_or_create(&l).observe(took.as_secs_f64());
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

    /// OpenMetrics text.
    pub(crate) fn encode(&self) -> String {
        // Not while another scrape replaces the pool series (it would see them half written).
        let _scrape = self.scrape.lock();
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
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
        m.reconciled("KKMachine", Duration::from_millis(3));
        m.failed("KKMachine", "kube");
        m.ssh_command(Duration::from_millis(12));
        m.set_pools(&[("ns".into(), "c".into(), 3, 2, 1)]);
        let text = m.encode();
        for needle in [
            "capkk_reconcile_total{kind=\"KKMachine\"} 1",
            "capkk_reconcile_errors_total{kind=\"KKMachine\",error=\"kube\"} 1",
            "capkk_reconcile_duration_seconds_count{kind=\"KKMachine\"} 1",
            "capkk_ssh_command_duration_seconds_count 1",
            "capkk_hosts{namespace=\"ns\",kkcluster=\"c\",state=\"quarantined\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
