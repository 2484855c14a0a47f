//! Shared state of the reconcilers: client, settings, SSH factory, metrics, events and the background task
//! registry.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use capkk_api::{HostProbe, KKCluster, KKInstance, KKMachine};
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client, Resource, ResourceExt,
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        reflector::{ObjectRef, Store},
    },
};
use tokio::{sync::Semaphore, task::JoinHandle};
use tracing::warn;

use crate::{
    capi::{Cluster, Machine},
    hosts::SshFactory,
    metrics::Metrics,
    services::HostServices,
};

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

/// A transient host-work failure: when to try again and why it failed.
#[derive(Clone, Debug)]
pub struct Retry {
    /// Do not start host work again before this instant.
    pub not_before: Instant,
    /// What failed (for the `Ready` condition).
    pub message: String,
    /// The backoff chosen after the failure.
    pub delay: Duration,
}

impl Retry {
    /// The `Ready` message while a host is retried: the failure, and neither the time left nor the delay.
    /// A countdown changed the status on every reconcile, and the delay (which doubles) on every attempt;
    /// each status change woke the KKInstance, its KKMachine and CAPI's Machine controller, whose conflicting
    /// writes under that churn delayed its other Machines by tens of seconds with 200 hosts. Each attempt's
    /// failure and delay are in the manager's log and the KKInstance's events.
    pub fn ready_message(&self) -> String {
        format!("{} (retried with backoff)", self.message)
    }
}

/// Background host tasks keyed by KKInstance UID, bounded by a semaphore.
pub struct TaskRegistry {
    tasks: Mutex<HashMap<String, TaskEntry>>,
    /// Global bound on hosts worked on at once.
    pub permits: Arc<Semaphore>,
    /// Consecutive transient failures per UID and when to retry.
    failures: Mutex<HashMap<String, (u32, Retry)>>,
    /// UIDs whose task ended since the last reconcile looked (their object is re-read from the API: the
    /// cache may not have the task's last writes yet).
    finished: Mutex<HashSet<String>>,
}

impl TaskRegistry {
    /// A registry allowing `max` concurrent host tasks.
    pub fn new(max: usize) -> Self {
        Self {
            tasks: Mutex::new(HashMap::new()),
            permits: Arc::new(Semaphore::new(max.max(1))),
            failures: Mutex::new(HashMap::new()),
            finished: Mutex::new(HashSet::new()),
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

    /// Called by a task as its last act: the next reconcile of `uid` reads the object fresh.
    pub fn mark_finished(&self, uid: &str) {
        if let Ok(mut f) = self.finished.lock() {
            f.insert(uid.to_owned());
        }
    }

    /// True (once) when the task of `uid` ended since the last call.
    pub fn take_finished(&self, uid: &str) -> bool {
        self.finished.lock().map(|mut f| f.remove(uid)).unwrap_or(false)
    }

    /// Record a transient failure of `uid`'s host work; returns the backoff before the next attempt. The
    /// task ends at once (it does not sleep through the backoff holding its slot).
    pub fn transient_failure(&self, uid: &str, message: &str) -> Duration {
        let Ok(mut f) = self.failures.lock() else {
            return backoff(1);
        };
        let n = f.get(uid).map(|(n, _)| n + 1).unwrap_or(1);
        let d = backoff(n);
        f.insert(
            uid.to_owned(),
            (
                n,
                Retry {
                    not_before: Instant::now() + d,
                    message: message.to_owned(),
                    delay: d,
                },
            ),
        );
        d
    }

    /// Forget the failures of `uid` (host work succeeded, a retry was requested, or the object is gone).
    pub fn succeeded(&self, uid: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(uid);
        }
    }

    /// Make a pending retry of `uid` due now (its input changed); the failure count stays, so a failure
    /// that persists keeps backing off.
    pub fn retry_now(&self, uid: &str) {
        if let Ok(mut f) = self.failures.lock()
            && let Some((_, r)) = f.get_mut(uid)
        {
            r.not_before = Instant::now();
        }
    }

    /// The pending retry of `uid` after a transient failure, if any.
    pub fn retry(&self, uid: &str) -> Option<Retry> {
        self.failures
            .lock()
            .ok()
            .and_then(|f| f.get(uid).map(|(_, r)| r.clone()))
    }
}

/// Background host probes per KKCluster UID and their latest results.
#[derive(Default)]
pub struct ProbeRegistry {
    entries: Mutex<HashMap<String, ProbeEntry>>,
}

struct ProbeEntry {
    started: Instant,
    generation: Option<i64>,
    handle: JoinHandle<()>,
    result: Option<Vec<HostProbe>>,
}

impl ProbeRegistry {
    /// True when a probe of KKCluster `uid` should start: none runs, and it was never probed, its spec
    /// changed since, or the last probe is older than `interval`.
    pub fn due(&self, uid: &str, generation: Option<i64>, interval: Duration) -> bool {
        let Ok(e) = self.entries.lock() else {
            return false;
        };
        match e.get(uid) {
            None => true,
            Some(p) if !p.handle.is_finished() => false,
            Some(p) => p.generation != generation || p.started.elapsed() >= interval,
        }
    }

    /// Track a started probe (the previous result stays until the new one arrives).
    pub fn start(&self, uid: &str, generation: Option<i64>, handle: JoinHandle<()>) {
        if let Ok(mut e) = self.entries.lock() {
            let result = e.remove(uid).and_then(|p| p.result);
            e.insert(
                uid.to_owned(),
                ProbeEntry {
                    started: Instant::now(),
                    generation,
                    handle,
                    result,
                },
            );
        }
    }

    /// Store the result of the probe of `uid`.
    pub fn finish(&self, uid: &str, probes: Vec<HostProbe>) {
        if let Ok(mut e) = self.entries.lock()
            && let Some(p) = e.get_mut(uid)
        {
            p.result = Some(probes);
        }
    }

    /// The latest probe results of `uid`.
    pub fn latest(&self, uid: &str) -> Option<Vec<HostProbe>> {
        self.entries
            .lock()
            .ok()
            .and_then(|e| e.get(uid).and_then(|p| p.result.clone()))
    }

    /// Stop and forget the probes of a deleted KKCluster.
    pub fn forget(&self, uid: &str) {
        if let Ok(mut e) = self.entries.lock()
            && let Some(p) = e.remove(uid)
        {
            p.handle.abort();
        }
    }

    /// Abort every probe (shutdown).
    pub fn abort_all(&self) {
        if let Ok(mut e) = self.entries.lock() {
            for (_, p) in e.drain() {
                p.handle.abort();
            }
        }
    }
}

/// The controllers' reflector caches: claims, claim records and pool accounting read these instead of
/// listing from the API server on every reconcile. A stale read is safe where it is used: creating a
/// KKInstance is still the lock, and a missing entry falls back to the API.
#[derive(Clone)]
pub struct Stores {
    /// Every KKInstance the manager watches.
    pub instances: Store<KKInstance>,
    /// Every KKMachine the manager watches.
    pub machines: Store<KKMachine>,
    /// Every KKCluster the manager watches.
    pub clusters: Store<KKCluster>,
    /// Every CAPI Machine the manager watches (the KKMachines' owners).
    pub capi_machines: Store<Machine>,
    /// Every CAPI Cluster the manager watches (owners, pause).
    pub capi_clusters: Store<Cluster>,
}

/// Bound on waiting for a cache's first list (the manager just started).
const STORE_READY_TIMEOUT: Duration = Duration::from_secs(30);

impl Stores {
    async fn ready<K>(store: &Store<K>)
    where
        K: kube::Resource + Clone + 'static,
        K::DynamicType: std::hash::Hash + Eq + Clone,
    {
        let _ = tokio::time::timeout(STORE_READY_TIMEOUT, store.wait_until_ready()).await;
    }

    /// The KKInstances of namespace `ns` (shared with the cache, not copied: every claim reads them all, and
    /// with hundreds of concurrent claims copies of the namespace's KKInstances were most of the manager's
    /// memory).
    pub async fn instances_in(&self, ns: &str) -> Vec<Arc<KKInstance>> {
        Self::ready(&self.instances).await;
        self.instances
            .state()
            .into_iter()
            .filter(|i| i.namespace().as_deref() == Some(ns))
            .collect()
    }

    /// The KKClusters of namespace `ns`.
    pub async fn clusters_in(&self, ns: &str) -> Vec<KKCluster> {
        Self::ready(&self.clusters).await;
        self.clusters
            .state()
            .iter()
            .filter(|c| c.namespace().as_deref() == Some(ns))
            .map(|c| (**c).clone())
            .collect()
    }

    /// The KKMachine `ns/name`, if cached.
    pub async fn machine(&self, ns: &str, name: &str) -> Option<Arc<KKMachine>> {
        Self::get(&self.machines, ns, name).await
    }

    /// The KKCluster `ns/name`, if cached.
    pub async fn cluster(&self, ns: &str, name: &str) -> Option<Arc<KKCluster>> {
        Self::get(&self.clusters, ns, name).await
    }

    /// The CAPI Machine `ns/name`, if cached.
    pub async fn capi_machine(&self, ns: &str, name: &str) -> Option<Arc<Machine>> {
        Self::get(&self.capi_machines, ns, name).await
    }

    /// The CAPI Cluster `ns/name`, if cached.
    pub async fn capi_cluster(&self, ns: &str, name: &str) -> Option<Arc<Cluster>> {
        Self::get(&self.capi_clusters, ns, name).await
    }

    async fn get<K>(store: &Store<K>, ns: &str, name: &str) -> Option<Arc<K>>
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        Self::ready(store).await;
        store.get(&ObjectRef::new(name).within(ns))
    }
}

/// `ns/name` from the cache when it has it (`cached`), else from the API (just created, not cached yet).
pub async fn cached_or_get<K>(
    cached: Option<Arc<K>>,
    client: &Client,
    ns: &str,
    name: &str,
) -> crate::Result<Option<K>>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    if let Some(o) = cached {
        return Ok(Some((*o).clone()));
    }
    kube::Api::<K>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(crate::Error::kube(format!("get {} {ns}/{name}", K::kind(&()))))
}

/// How long a claim reservation steers the host choice: long enough for the KKInstance cache to show the
/// claim (it then excludes the host itself), short enough that a claim deleted at once frees its host soon.
pub const RESERVATION_TTL: Duration = Duration::from_secs(30);

/// Hosts this manager is claiming (or just claimed) that its KKInstance cache may not show yet.
///
/// Concurrent KKMachine reconciles choose from the same cache. Without reservations they all tried the first
/// free host: one create won, the others failed and tried the next host, so n concurrent claims cost O(n²)
/// creates against the API server (200 KKMachines: claim p90 of tens of seconds). A reservation only steers
/// the choice inside this process; creating the KKInstance is still the lock (another manager does not see
/// this process's reservations and still loses on the create).
pub struct Reservations {
    held: Mutex<HashMap<String, Instant>>,
    ttl: Duration,
}

impl Default for Reservations {
    fn default() -> Self {
        Self::with_ttl(RESERVATION_TTL)
    }
}

impl Reservations {
    /// Reservations that expire after `ttl`.
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            held: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    /// Reserve `key` (`<namespace>/<KKInstance name>`) unless a live reservation holds it. True when this
    /// call reserved it.
    pub fn reserve(&self, key: &str) -> bool {
        let Ok(mut h) = self.held.lock() else {
            return true;
        };
        let ttl = self.ttl;
        h.retain(|_, at| at.elapsed() < ttl);
        if h.contains_key(key) {
            return false;
        }
        h.insert(key.to_owned(), Instant::now());
        true
    }

    /// Drop the reservation of `key` (the claim failed: the host is free for another KKMachine).
    pub fn release(&self, key: &str) {
        if let Ok(mut h) = self.held.lock() {
            h.remove(key);
        }
    }
}

/// Channels that make a controller reconcile an object now (a background task finished).
#[derive(Clone)]
pub struct Triggers {
    /// KKInstance reconciles (host work finished).
    pub instances: UnboundedSender<ObjectRef<KKInstance>>,
    /// KKCluster reconciles (probes finished).
    pub clusters: UnboundedSender<ObjectRef<KKCluster>>,
    /// KKMachine reconciles (a workload Node registered).
    pub machines: UnboundedSender<ObjectRef<KKMachine>>,
}

/// Consecutive reconcile failures per object (`"{KIND}/{uid}"`), for [`crate::reconcile::error_policy`].
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Count a failure of `key`; returns how long to wait before the next attempt.
    pub fn failed(&self, key: &str) -> Duration {
        let n = self
            .failures
            .lock()
            .map(|mut f| {
                let e = f.entry(key.to_owned()).or_insert(0);
                *e += 1;
                *e
            })
            .unwrap_or(1);
        backoff(n)
    }

    /// Forget `key` (a successful reconcile).
    pub fn reset(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }

    /// Consecutive failures of `key`.
    pub fn attempts(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .ok()
            .and_then(|f| f.get(key).copied())
            .unwrap_or(0)
    }

    /// Number of keys tracked (objects currently failing).
    pub fn len(&self) -> usize {
        self.failures.lock().map(|f| f.len()).unwrap_or(0)
    }

    /// True when no object is failing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    /// Reconcile failures per object (backoff).
    pub backoff: Backoff,
    /// Event recorder.
    pub recorder: Recorder,
    /// Host probes per KKCluster.
    pub probes: ProbeRegistry,
    /// Reconcile-now channels for background work.
    pub triggers: Triggers,
    /// The controllers' caches.
    pub stores: Stores,
    /// Workload cluster clients and their Node watches.
    pub workloads: crate::workload::WorkloadClients,
    /// Hosts being claimed by this manager's KKMachine reconciles.
    pub reservations: Reservations,
    /// When the manager started (for logs).
    pub started: Instant,
    throttles: Mutex<HashMap<String, Instant>>,
}

impl Context {
    /// Build the context.
    pub fn new(
        client: Client,
        settings: Settings,
        ssh: Arc<dyn SshFactory>,
        services: Arc<dyn HostServices>,
        metrics: Arc<Metrics>,
        triggers: Triggers,
        stores: Stores,
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
            backoff: Backoff::default(),
            client,
            settings,
            ssh,
            services,
            metrics,
            recorder,
            probes: ProbeRegistry::default(),
            triggers,
            stores,
            workloads: Default::default(),
            reservations: Reservations::default(),
            started: Instant::now(),
            throttles: Mutex::new(HashMap::new()),
        }
    }

    /// True at most once per `every` for `key` (rate-limits work triggered by frequent reconciles).
    pub fn throttle(&self, key: &str, every: Duration) -> bool {
        let Ok(mut p) = self.throttles.lock() else {
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
            .triggers
            .instances
            .unbounded_send(ObjectRef::new(name).within(ns));
    }

    /// Ask for a reconcile of a KKCluster.
    pub fn trigger_cluster(&self, name: &str, ns: &str) {
        let _ = self
            .triggers
            .clusters
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

    #[test]
    fn a_success_resets_the_backoff_so_the_next_failure_waits_the_minimum() {
        let b = Backoff::default();
        let key = "KKInstance/uid-1";
        let first = b.failed(key);
        for _ in 0..4 {
            b.failed(key);
        }
        assert!(b.failed(key) > first, "failures lengthen the backoff");
        crate::reconcile::settle(&b, key, &Ok(kube::runtime::controller::Action::await_change()));
        assert_eq!(b.attempts(key), 0);
        assert!(b.is_empty(), "the key is dropped, not kept at zero");
        assert_eq!(b.failed(key), first);
    }

    #[test]
    fn a_failed_reconcile_keeps_the_backoff() {
        let b = Backoff::default();
        let key = "KKCluster/uid-2";
        b.failed(key);
        let err = crate::Error::ResolveCredentials("x".into());
        crate::reconcile::settle(&b, key, &Err(err));
        assert_eq!(b.attempts(key), 1);
    }

    #[test]
    fn the_message_of_a_retried_host_changes_neither_while_it_waits_nor_from_one_attempt_to_the_next() {
        let r = TaskRegistry::new(1);
        r.transient_failure("u", "connecting to 10.0.0.1:22 failed");
        let mut retry = r.retry("u").expect("recorded");
        let first = retry.ready_message();
        // Later reconciles see less time left; the status they write must stay the same.
        retry.not_before -= Duration::from_secs(3);
        assert_eq!(retry.ready_message(), first);
        assert!(first.starts_with("connecting to 10.0.0.1:22 failed"), "{first}");
        // The next attempt fails the same way and backs off longer: still the same message.
        r.transient_failure("u", "connecting to 10.0.0.1:22 failed");
        let second = r.retry("u").expect("recorded");
        assert!(second.delay > retry.delay);
        assert_eq!(second.ready_message(), first);
    }

    #[test]
    fn a_reserved_host_is_not_reserved_again_until_released_or_expired() {
        let r = Reservations::default();
        assert!(r.reserve("ns/c.node1"));
        assert!(
            !r.reserve("ns/c.node1"),
            "a second claim of the same host is steered elsewhere"
        );
        assert!(r.reserve("ns/c.node2"));
        assert!(r.reserve("other/c.node1"), "keys are per namespace");
        r.release("ns/c.node1");
        assert!(
            r.reserve("ns/c.node1"),
            "a failed claim frees the host for the next KKMachine"
        );
        let expired = Reservations::with_ttl(Duration::ZERO);
        assert!(expired.reserve("ns/c.node1"));
        assert!(
            expired.reserve("ns/c.node1"),
            "an expired reservation does not hold the host"
        );
    }

    #[tokio::test]
    async fn a_transient_host_failure_records_when_to_retry_and_success_clears_it() {
        let r = TaskRegistry::new(1);
        let d = r.transient_failure("u", "host unreachable");
        let retry = r.retry("u").expect("recorded");
        assert_eq!(retry.message, "host unreachable");
        assert!(retry.not_before > Instant::now() + d / 2);
        assert!(r.transient_failure("u", "again") > d);
        r.succeeded("u");
        assert!(r.retry("u").is_none());
    }
}
