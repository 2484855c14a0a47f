//! The manager's watches: one watch per kind, shared by every controller that needs the kind, and the caches
//! they feed.
//!
//! Each kind is watched once; the watch feeds one cache, and every controller that is woken by the kind
//! (as its main object, its children or a related object) subscribes to the same events. A subscriber
//! receives an object only after the cache has it, so a reconcile woken by a change always reads that change
//! (or a newer one) from the cache.
//!
//! With a watch per controller, a reconcile woken by one watch could read a cache fed by another watch before
//! that one had the change, and nothing woke it again: a KKCluster woken by its Cluster's pause read the
//! Cluster unpaused and never reported `Paused` (the contract test caught it), so the KKCluster and KKInstance
//! reconcilers had to GET the Cluster on every reconcile instead.
//!
//! This module stands in for kube's own shared streams (`reflector::store_shared`, `Writer::subscribe`,
//! `reflect_shared`) because of kube-rs/kube#1590 (open; a fix is proposed in kube-rs/kube#1673): they do
//! not pass deletions on. Their subscriber reads the object from the cache when it is polled and, when the
//! object was deleted meanwhile, returns `Pending` without being woken again; that subscriber then stops,
//! and once the buffer is full the watch stops too. Here a deletion is passed on with the object's last
//! state ([`changed`]). Each controller's own wiring is beside its reconciler (`kkcluster::watches`,
//! `kkmachine::watches`, `kkinstance::watches`).

use std::{fmt::Debug, future::Future, sync::Arc};

use capkk_api::{
    KKCluster, KKInstance, KKMachine,
    consts::{CLUSTER_NAME_LABEL, WATCH_FILTER_LABEL},
};
use futures::{
    Stream, StreamExt,
    channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    core::NamespaceResourceScope,
    runtime::{
        WatchStreamExt, predicates,
        reflector::{self, ObjectRef, Store, store::Writer},
        watcher::{self, Event, watcher},
    },
};
use tracing::warn;

use crate::{
    capi::{Cluster, Machine},
    context::Stores,
};

/// A watched kind: its cache and the subscribers of its events.
pub(crate) struct SharedWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    writer: Writer<K>,
    subscribers: Vec<UnboundedSender<watcher::Result<K>>>,
}

impl<K> Default for SharedWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn default() -> Self {
        let (store, writer) = reflector::store();
        Self {
            store,
            writer,
            subscribers: Vec::new(),
        }
    }
}

impl<K> SharedWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    /// The cache (filled once [`SharedWatch::run`] runs).
    pub(crate) fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// A stream of the objects that changed, each sent after the cache has it: for
    /// `Controller::for_stream`, `owns_stream` or `watches_stream`.
    pub(crate) fn subscribe(&mut self) -> UnboundedReceiver<watcher::Result<K>> {
        let (tx, rx) = unbounded();
        self.subscribers.push(tx);
        rx
    }

    /// Feed the cache from `events` (a watch) and pass every change on to the subscribers. Runs as long as
    /// the watch does.
    pub(crate) fn run<S>(self, events: S) -> impl Future<Output = ()> + Send + 'static
    where
        S: Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
    {
        let SharedWatch {
            store,
            writer,
            subscribers,
        } = self;
        reflector::reflector(writer, events).for_each(move |ev| {
            match ev {
                Ok(ev) => {
                    for obj in changed(&ev, &store) {
                        for tx in &subscribers {
                            // A subscriber that is gone (its controller stopped) just misses the event.
                            let _ = tx.unbounded_send(Ok(obj.clone()));
                        }
                    }
                }
                Err(e) => warn!(kind = %K::kind(&()), error = %e, "Watch failed; it is retried"),
            }
            futures::future::ready(())
        })
    }
}

/// The objects to pass on for `ev`, read from the cache after it applied `ev`: the object of an `Apply`; the
/// whole cache once a (re)list is complete (its objects enter the cache only then, all at once); and a deleted
/// object as its last state (the cache no longer has it), as kube's own `owns` and `watches` do: a KKMachine
/// must wake when its KKInstance or its Machine is finally gone, not at its next requeue. The deleted object's
/// own controller looks it up, finds nothing and does not reconcile it.
pub(crate) fn changed<K>(ev: &Event<K>, cache: &Store<K>) -> Vec<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    match ev {
        Event::Apply(o) => cache
            .get(&ObjectRef::from_obj(o))
            .map(|c| (*c).clone())
            .into_iter()
            .collect(),
        Event::InitDone => cache.state().iter().map(|o| (**o).clone()).collect(),
        Event::Delete(o) => vec![o.clone()],
        Event::Init | Event::InitApply(_) => Vec::new(),
    }
}

/// Drop `metadata.managedFields` from a watched object before it is cached: the manager never reads them,
/// and they are a large part of every object (one entry per field manager).
pub(crate) fn strip_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// The manager's five shared watches. Controllers subscribe while they are built; [`Watches::run`] then
/// feeds every cache and subscriber.
#[derive(Default)]
pub(crate) struct Watches {
    /// KKClusters (filtered by the watch-filter label).
    pub kkclusters: SharedWatch<KKCluster>,
    /// KKMachines (filtered by the watch-filter label).
    pub kkmachines: SharedWatch<KKMachine>,
    /// KKInstances (filtered by the watch-filter label).
    pub kkinstances: SharedWatch<KKInstance>,
    /// CAPI Machines (they carry no watch-filter label).
    pub capi_machines: SharedWatch<Machine>,
    /// CAPI Clusters (they carry no watch-filter label).
    pub capi_clusters: SharedWatch<Cluster>,
}

impl Watches {
    /// The caches the reconcilers read.
    pub(crate) fn stores(&self) -> Stores {
        Stores {
            instances: self.kkinstances.store(),
            machines: self.kkmachines.store(),
            clusters: self.kkclusters.store(),
            capi_machines: self.capi_machines.store(),
            capi_clusters: self.capi_clusters.store(),
        }
    }

    /// Changes of a Cluster's spec (pause, infrastructureRef, endpoint): the three kinds care about nothing
    /// else of a Cluster. CAPI rewrites a Cluster's status whenever one of its Machines changes; waking every
    /// object of the cluster for each of those would multiply the reconciles by the number of Machines.
    pub(crate) fn cluster_spec_changes(
        &mut self,
    ) -> impl Stream<Item = watcher::Result<Cluster>> + Send + use<> {
        self.capi_clusters
            .subscribe()
            .predicate_filter(predicates::generation, Default::default())
    }

    /// Run every watch (in namespace `ns`, or all) until the controllers stop; the kinds of capkk-rs only
    /// with `cluster.x-k8s.io/watch-filter=<watch_filter>` when one is set.
    pub(crate) fn run(
        self,
        client: &Client,
        ns: Option<&str>,
        watch_filter: Option<&str>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let wc = match watch_filter {
            Some(v) => watcher::Config::default().labels(&format!("{WATCH_FILTER_LABEL}={v}")),
            None => watcher::Config::default(),
        };
        let all = watcher::Config::default();
        let w = futures::future::join5(
            self.kkclusters.run(watch(api(client, ns), wc.clone())),
            self.kkmachines.run(watch(api(client, ns), wc.clone())),
            self.kkinstances.run(watch(api(client, ns), wc)),
            self.capi_machines.run(watch(api(client, ns), all.clone())),
            self.capi_clusters.run(watch(api(client, ns), all)),
        );
        async move {
            w.await;
        }
    }
}

/// The watch of `api`, its objects without their managed fields, retried with backoff after errors.
fn watch<K>(api: Api<K>, wc: watcher::Config) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, wc).modify(strip_managed_fields).default_backoff()
}

/// The API of `K` in namespace `ns`, or in all namespaces.
fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + Debug,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The objects of `cluster` (by CAPI's cluster-name label) among `objs`: a Cluster spec change (pause,
/// unpause; the watches filter on generation, so status changes wake nobody) re-queues them.
pub(crate) fn of_cluster<K>(objs: &[Arc<K>], cluster: &Cluster) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let name = cluster.name_any();
    let ns = cluster.namespace();
    objs.iter()
        .filter(|o| o.namespace() == ns && o.labels().get(CLUSTER_NAME_LABEL) == Some(&name))
        .map(|o| ObjectRef::from_obj(&**o))
        .collect()
}

/// The kube-runtime settings of `K`'s controller: at most `concurrency` reconciles at once (0: unbounded).
/// Also publishes the limit as `controller_runtime_max_concurrent_reconciles`.
pub(crate) fn controller_config<K: crate::reconcile::Reconciler>(
    ctx: &crate::context::Context,
    concurrency: u16,
) -> kube::runtime::controller::Config {
    ctx.metrics.controller_started(K::KIND, concurrency);
    kube::runtime::controller::Config::default().concurrency(concurrency)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.resource_version = Some(rv.into());
        c
    }

    fn name_rv(c: ConfigMap) -> String {
        format!(
            "{}@{}",
            c.metadata.name.unwrap_or_default(),
            c.metadata.resource_version.unwrap_or_default()
        )
    }

    #[test]
    fn what_is_passed_on_is_what_the_cache_holds_a_relist_only_once_complete_and_a_deletion_as_last_seen() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let mut seen = |ev: Event<ConfigMap>| {
            writer.apply_watcher_event(&ev);
            let mut out: Vec<String> = changed(&ev, &store).into_iter().map(name_rv).collect();
            out.sort();
            out
        };
        assert!(seen(Event::Init).is_empty());
        assert!(
            seen(Event::InitApply(cm("a", "1"))).is_empty(),
            "not in the cache before the list is complete"
        );
        assert!(seen(Event::InitApply(cm("b", "1"))).is_empty());
        assert_eq!(seen(Event::InitDone), ["a@1", "b@1"]);
        assert_eq!(seen(Event::Apply(cm("a", "2"))), ["a@2"]);
        assert_eq!(
            seen(Event::Delete(cm("b", "1"))),
            ["b@1"],
            "a deletion is passed on with the object's last state"
        );
        assert!(
            store
                .state()
                .iter()
                .all(|c| c.metadata.name.as_deref() != Some("b"))
        );
    }

    #[tokio::test]
    async fn every_subscriber_receives_every_change_in_order() {
        let mut shared = SharedWatch::<ConfigMap>::default();
        let (mut first, mut second) = (shared.subscribe(), shared.subscribe());
        let store = shared.store();
        let (events, rx) = unbounded::<watcher::Result<Event<ConfigMap>>>();
        let feed = tokio::spawn(shared.run(rx));
        for ev in [
            Event::Init,
            Event::InitApply(cm("a", "1")),
            Event::InitDone,
            Event::Apply(cm("a", "2")),
            Event::Apply(cm("a", "3")),
            Event::Delete(cm("a", "3")),
        ] {
            events.unbounded_send(Ok(ev)).unwrap();
        }
        drop(events);
        feed.await.unwrap();
        for sub in [&mut first, &mut second] {
            let got: Vec<String> = sub.map(|r| name_rv(r.unwrap())).collect().await;
            assert_eq!(got, ["a@1", "a@2", "a@3", "a@3"]);
        }
        assert!(store.state().is_empty());
    }
}
