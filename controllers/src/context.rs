//! Shared state of the reconcilers: client, settings, SSH factory, metrics, events and the background task
//! registry.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use capkk_api::KKInstance;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client, Resource, ResourceExt,
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        reflector::ObjectRef,
    },
};
use tokio::{sync::Semaphore, task::JoinHandle};
use tracing::warn;

use crate::{hosts::SshFactory, metrics::Metrics, services::HostServices};

/// Tunables of the reconcilers (from the manager's flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Only reconcile objects with `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    /// Hosts worked on at once (background tasks).
    pub max_concurrent_hosts: usize,
    /// Hosts probed at once per KKCluster.
    pub probe_concurrency: usize,
    /// Bound on one host probe.
    pub probe_timeout: Duration,
    /// Re-probe the inventory this often.
    pub probe_interval: Duration,
    /// How long a host may stay unreachable during release before it is quarantined.
    pub quarantine_after: Duration,
    /// Bound on talking to a workload cluster.
    pub workload_timeout: Duration,
    /// Field manager for writes.
    pub field_manager: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            watch_filter: None,
            max_concurrent_hosts: 10,
            probe_concurrency: 8,
            probe_timeout: Duration::from_secs(15),
            probe_interval: Duration::from_secs(300),
            quarantine_after: Duration::from_secs(600),
            workload_timeout: Duration::from_secs(10),
            field_manager: "capkk-manager".into(),
        }
    }
}

/// What a background host task does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    /// bootstrap -> repository -> binary -> containermanager -> provisioning.
    Provision,
    /// Reset the host.
    Reset,
}

struct TaskEntry {
    kind: TaskKind,
    handle: JoinHandle<()>,
    stop: Arc<AtomicBool>,
}

/// Background host tasks keyed by KKInstance UID, bounded by a semaphore.
pub struct TaskRegistry {
    tasks: Mutex<HashMap<String, TaskEntry>>,
    /// Global bound on hosts worked on at once.
    pub permits: Arc<Semaphore>,
    /// Consecutive transient failures per UID (for backoff).
    failures: Mutex<HashMap<String, u32>>,
}

impl TaskRegistry {
    /// A registry allowing `max` concurrent host tasks.
    pub fn new(max: usize) -> Self {
        Self {
            tasks: Mutex::new(HashMap::new()),
            permits: Arc::new(Semaphore::new(max.max(1))),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The kind of the task running for `uid`, if any (finished tasks are dropped).
    pub fn running(&self, uid: &str) -> Option<TaskKind> {
        let mut tasks = self.tasks.lock().ok()?;
        match tasks.get(uid) {
            Some(e) if e.handle.is_finished() => {
                tasks.remove(uid);
                None
            }
            Some(e) => Some(e.kind),
            None => None,
        }
    }

    /// Number of running tasks.
    pub fn len(&self) -> usize {
        self.tasks
            .lock()
            .map(|t| t.values().filter(|e| !e.handle.is_finished()).count())
            .unwrap_or(0)
    }

    /// True when no task runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Start `fut` for `uid` unless a task already runs. The future receives a stop flag it checks between
    /// steps. Returns false when one was already running.
    pub fn spawn<F, Fut>(&self, uid: &str, kind: TaskKind, f: F) -> bool
    where
        F: FnOnce(Arc<AtomicBool>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        if self.running(uid).is_some() {
            return false;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let handle = tokio::spawn(f(stop.clone()));
        if let Ok(mut t) = self.tasks.lock() {
            t.insert(uid.to_owned(), TaskEntry { kind, handle, stop });
        }
        true
    }

    /// Ask the task of `uid` to stop at the next step boundary.
    pub fn request_stop(&self, uid: &str) {
        if let Ok(t) = self.tasks.lock()
            && let Some(e) = t.get(uid)
        {
            e.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Abort the task of `uid` at once.
    pub fn abort(&self, uid: &str) {
        if let Ok(mut t) = self.tasks.lock()
            && let Some(e) = t.remove(uid)
        {
            e.handle.abort();
        }
    }

    /// Abort every task (shutdown; a new manager resumes from spec/annotations and the host).
    pub fn abort_all(&self) {
        if let Ok(mut t) = self.tasks.lock() {
            for (_, e) in t.drain() {
                e.handle.abort();
            }
        }
    }

    /// Record a transient failure of `uid`; returns the backoff before the next attempt.
    pub fn transient_failure(&self, uid: &str) -> Duration {
        let n = self
            .failures
            .lock()
            .map(|mut f| {
                let e = f.entry(uid.to_owned()).or_insert(0);
                *e += 1;
                *e
            })
            .unwrap_or(1);
        backoff(n)
    }

    /// Forget the failures of `uid`.
    pub fn succeeded(&self, uid: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(uid);
        }
    }

    /// The backoff for `uid` now (zero when it has not failed).
    pub fn current_backoff(&self, uid: &str) -> Duration {
        let n = self
            .failures
            .lock()
            .ok()
            .and_then(|f| f.get(uid).copied())
            .unwrap_or(0);
        if n == 0 { Duration::ZERO } else { backoff(n) }
    }
}

/// Exponential backoff from 5 s, doubling, capped at 5 minutes (built with backon's builder).
pub fn backoff(attempt: u32) -> Duration {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(5))
        .with_max_delay(Duration::from_secs(300))
        .with_factor(2.0)
        .with_max_times(usize::MAX)
        .build()
        .nth(attempt.saturating_sub(1) as usize)
        .unwrap_or(Duration::from_secs(300))
}

/// Context shared by all reconcilers.
pub struct Context {
    /// Management cluster client.
    pub client: Client,
    /// Tunables.
    pub settings: Settings,
    /// SSH executors.
    pub ssh: Arc<dyn SshFactory>,
    /// Host services (the phases run on a host).
    pub services: Arc<dyn HostServices>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Background host tasks.
    pub tasks: TaskRegistry,
    /// Event recorder.
    pub recorder: Recorder,
    /// Triggers a KKInstance reconcile (task finished).
    pub instance_trigger: UnboundedSender<ObjectRef<KKInstance>>,
    /// When the manager started (for logs).
    pub started: Instant,
    probes: Mutex<HashMap<String, Instant>>,
}

impl Context {
    /// The shared body of every kind's `error_policy`: a pending cleanup retries at its own pace, a conflict
    /// retries at once, anything else backs off per object (`key` is `<kind prefix>/<uid>`).
    pub fn requeue_after_error(
        &self,
        kind: &str,
        key: &str,
        name: &str,
        err: &crate::Error,
    ) -> kube::runtime::controller::Action {
        use kube::runtime::controller::Action;
        if let crate::Error::CleanupPending { what, retry } = err {
            tracing::debug!(object = %name, %what, "deletion waits");
            return Action::requeue(*retry);
        }
        self.metrics.failed(kind, err.metric_label());
        let delay = if err.is_conflict() {
            Duration::from_millis(500)
        } else {
            self.tasks.transient_failure(key)
        };
        warn!(kind, object = %name, error = %err, ?delay, "reconcile failed");
        Action::requeue(delay)
    }

    /// Build the context.
    pub fn new(
        client: Client,
        settings: Settings,
        ssh: Arc<dyn SshFactory>,
        services: Arc<dyn HostServices>,
        metrics: Arc<Metrics>,
        instance_trigger: UnboundedSender<ObjectRef<KKInstance>>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "capkk-manager".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Self {
            tasks: TaskRegistry::new(settings.max_concurrent_hosts),
            client,
            settings,
            ssh,
            services,
            metrics,
            recorder,
            instance_trigger,
            started: Instant::now(),
            probes: Mutex::new(HashMap::new()),
        }
    }

    /// True when the KKCluster `uid` has not been probed within the probe interval.
    pub fn probe_due(&self, uid: &str) -> bool {
        self.probes
            .lock()
            .ok()
            .and_then(|p| p.get(uid).map(|t| t.elapsed() >= self.settings.probe_interval))
            .unwrap_or(true)
    }

    /// True at most once per `every` for `key` (rate-limits work triggered by frequent reconciles).
    pub fn throttle(&self, key: &str, every: Duration) -> bool {
        let Ok(mut p) = self.probes.lock() else {
            return true;
        };
        match p.get(key) {
            Some(t) if t.elapsed() < every => false,
            _ => {
                p.insert(key.to_owned(), Instant::now());
                true
            }
        }
    }

    /// Note that the KKCluster `uid` was probed now.
    pub fn probed(&self, uid: &str) {
        if let Ok(mut p) = self.probes.lock() {
            p.insert(uid.to_owned(), Instant::now());
        }
    }

    /// Publish an event about `obj` (best effort; failures are logged). `note` must not contain secrets.
    pub async fn event<K>(&self, obj: &K, warning: bool, reason: &str, action: &str, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        let reference: ObjectReference = obj.object_ref(&());
        let mut note: String = note.into();
        if note.len() > 1000 {
            let mut cut = note.len() - 1000;
            while !note.is_char_boundary(cut) {
                cut += 1;
            }
            note = note[cut..].to_owned();
        }
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            warn!(object = %obj.name_any(), error = %e, "publishing event failed");
        }
    }

    /// True when the object passes the watch filter.
    pub fn passes_filter<K: Resource>(&self, obj: &K) -> bool {
        match &self.settings.watch_filter {
            None => true,
            Some(v) => {
                obj.meta()
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(capkk_api::consts::WATCH_FILTER_LABEL))
                    == Some(v)
            }
        }
    }

    /// Ask for a reconcile of a KKInstance.
    pub fn trigger_instance(&self, name: &str, ns: &str) {
        let _ = self
            .instance_trigger
            .unbounded_send(ObjectRef::new(name).within(ns));
    }
}

/// True when the object carries CAPI's externally-managed annotation.
pub fn externally_managed<K: Resource>(obj: &K) -> bool {
    obj.meta()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(capkk_api::consts::MANAGED_BY_ANNOTATION))
}

/// True when the object carries CAPI's paused annotation.
pub fn paused_annotation<K: Resource>(obj: &K) -> bool {
    obj.meta()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(capkk_api::consts::PAUSED_ANNOTATION))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        assert!(backoff(1) >= Duration::from_secs(5));
        assert!(backoff(2) > backoff(1));
        assert!(backoff(30) <= Duration::from_secs(300));
    }
}
