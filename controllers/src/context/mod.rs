//! What the reconcilers share: the client, settings, SSH factory and host services, metrics, events, the
//! caches and the registries of background work.
//!
//! - [`tasks`]: background host work per KKInstance and its transient failures.
//! - [`probes`]: background host probes per KKCluster.
//! - [`stores`]: the reflector caches the reconcilers read.
//! - [`reservations`]: hosts this manager is claiming.
//! - [`backoff`]: consecutive reconcile failures per object.
//! - [`jobs`]: other background jobs by key, and their last outcome.

pub(crate) mod attempts;
pub(crate) mod backoff;
pub(crate) mod jobs;
pub(crate) mod permits;
pub(crate) mod probes;
pub(crate) mod reservations;
pub(crate) mod stores;
pub(crate) mod tasks;
pub(crate) mod updates;
pub(crate) mod written;

use std::{sync::Arc, time::Duration};

use capkk_api::{KKCluster, KKInstance, KKMachine, KKRemediation};
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client, Resource, ResourceExt,
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        reflector::ObjectRef,
    },
};
use tracing::warn;

pub(crate) use self::{
    backoff::Backoff,
    probes::ProbeRegistry,
    reservations::Reservations,
    stores::{Stores, cached_or_get},
    tasks::{Retry, TaskKind, TaskRegistry},
};
use crate::{hosts::SshFactory, metrics::Metrics, services::HostServices};

/// Tunables of the reconcilers (from the manager's flags).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Only reconcile objects with `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    /// Hosts worked on at once (background tasks).
    pub max_concurrent_hosts: usize,
    /// Of those, at most this many for one namespace ([`permits`]).
    pub max_concurrent_hosts_per_namespace: usize,
    /// Bound on one phase of host work (`--max-host-phase-duration`).
    pub max_host_phase_duration: Duration,
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
    /// Reconcile objects that wait for a change again after this long (`--sync-period`; `None`: only the
    /// kinds' own requeues).
    pub sync_period: Option<Duration>,
    /// Reconciles run at once per controller, by kind (`--<kind>-concurrency`; 0: unbounded).
    pub concurrency: Concurrency,
    /// Namespace of the host-identity Leases (`--host-claim-namespace`; see [`crate::host_claims`]).
    pub host_claim_namespace: String,
    /// Claim and prepare a host before the bootstrap data exists (`--prepare-before-bootstrap-data`).
    pub prepare_before_bootstrap_data: bool,
}

/// Where host-identity Leases live unless `--host-claim-namespace` says otherwise: one well-known namespace,
/// so that every manager sharing the management cluster arbitrates in the same place.
pub(crate) const DEFAULT_HOST_CLAIM_NAMESPACE: &str = "capkk-system";

/// Reconciles run at once per controller (0: unbounded, kube-runtime's default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Concurrency {
    /// KKCluster controller.
    pub kkcluster: u16,
    /// KKMachine controller.
    pub kkmachine: u16,
    /// KKInstance controller.
    pub kkinstance: u16,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            watch_filter: None,
            max_concurrent_hosts: 10,
            max_concurrent_hosts_per_namespace: 10,
            max_host_phase_duration: Duration::from_secs(2 * 3600),
            probe_concurrency: 8,
            probe_timeout: Duration::from_secs(15),
            probe_interval: Duration::from_secs(300),
            quarantine_after: Duration::from_secs(600),
            workload_timeout: Duration::from_secs(10),
            sync_period: None,
            concurrency: Concurrency::default(),
            host_claim_namespace: DEFAULT_HOST_CLAIM_NAMESPACE.into(),
            prepare_before_bootstrap_data: true,
        }
    }
}

/// Channels that make a controller reconcile an object now (a background task finished).
#[derive(Clone)]
pub(crate) struct Triggers {
    /// KKInstance reconciles (host work finished).
    pub instances: UnboundedSender<ObjectRef<KKInstance>>,
    /// KKCluster reconciles (probes finished).
    pub clusters: UnboundedSender<ObjectRef<KKCluster>>,
    /// KKMachine reconciles (a workload Node registered).
    pub machines: UnboundedSender<ObjectRef<KKMachine>>,
    /// KKRemediation reconciles (an attempt finished).
    pub remediations: UnboundedSender<ObjectRef<KKRemediation>>,
}

/// Context shared by all reconcilers.
pub(crate) struct Context {
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
    /// Remediation attempts and their outcomes.
    pub remediations: attempts::Attempts,
    /// In-place upgrades (CAPI's `UpdateMachine`) and their outcomes.
    pub upgrades: updates::Updates,
    /// The status each reconciler last wrote, until the cache shows it.
    pub written: written::Written,
    /// Background jobs by key (a KKCluster's load-balancer membership sync).
    pub jobs: jobs::Jobs,
}

impl Context {
    /// Build the context.
    pub(crate) fn new(
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
                controller: capkk_api::consts::EVENT_REPORTER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Self {
            tasks: TaskRegistry::new(
                settings.max_concurrent_hosts,
                settings.max_concurrent_hosts_per_namespace,
            ),
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
            remediations: Default::default(),
            upgrades: Default::default(),
            written: Default::default(),
            jobs: Default::default(),
        }
    }

    /// Publish an event about `obj` (best effort; failures are logged). `note` must not contain secrets.
    pub(crate) async fn event<K>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) where
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

    /// Abort all background host work: host tasks, probes, remediation attempts and in-place upgrades. The
    /// manager calls it when it stops, and when it loses its leadership: only the leader works on hosts, and
    /// the next leader resumes from the objects and the hosts.
    pub(crate) fn abort_host_work(&self) {
        self.tasks.abort_all();
        self.probes.abort_all();
        self.remediations.abort_all();
        self.upgrades.abort_all();
        self.jobs.abort_all();
    }

    /// True when the object passes the watch filter.
    pub(crate) fn passes_filter<K: Resource>(&self, obj: &K) -> bool {
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
    pub(crate) fn trigger_instance(&self, name: &str, ns: &str) {
        let _ = self
            .triggers
            .instances
            .unbounded_send(ObjectRef::new(name).within(ns));
    }

    /// Ask for a reconcile of a KKMachine.
    pub(crate) fn trigger_machine(&self, name: &str, ns: &str) {
        let _ = self
            .triggers
            .machines
            .unbounded_send(ObjectRef::new(name).within(ns));
    }

    /// Ask for a reconcile of a KKCluster.
    pub(crate) fn trigger_cluster(&self, name: &str, ns: &str) {
        let _ = self
            .triggers
            .clusters
            .unbounded_send(ObjectRef::new(name).within(ns));
    }
}
