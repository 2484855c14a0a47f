//! The controllers' reflector caches and the read that falls back to the API.

use std::{sync::Arc, time::Duration};

use capkk_api::{KKCluster, KKInstance, KKMachine};
use kube::{
    Client, ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};

use crate::{
    capi::{Cluster, Machine},
    object_name::ObjectName,
};

/// The controllers' reflector caches: claims, claim records and pool accounting read these instead of
/// listing from the API server on every reconcile. A stale read is safe where it is used: creating a
/// KKInstance is still the lock, and a missing entry falls back to the API.
#[derive(Clone)]
pub(crate) struct Stores {
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
    pub(crate) async fn instances_in(&self, ns: &str) -> Vec<Arc<KKInstance>> {
        Self::ready(&self.instances).await;
        self.instances
            .state()
            .into_iter()
            .filter(|i| i.namespace().as_deref() == Some(ns))
            .collect()
    }

    /// The KKClusters of namespace `ns`.
    pub(crate) async fn clusters_in(&self, ns: &str) -> Vec<KKCluster> {
        Self::ready(&self.clusters).await;
        self.clusters
            .state()
            .iter()
            .filter(|c| c.namespace().as_deref() == Some(ns))
            .map(|c| (**c).clone())
            .collect()
    }

    /// The KKInstance `ns/name`, if cached.
    pub(crate) async fn instance(&self, ns: &str, name: &str) -> Option<Arc<KKInstance>> {
        Self::get(&self.instances, ns, name).await
    }

    /// The KKMachine `ns/name`, if cached.
    pub(crate) async fn machine(&self, ns: &str, name: &str) -> Option<Arc<KKMachine>> {
        Self::get(&self.machines, ns, name).await
    }

    /// The KKCluster `ns/name`, if cached.
    pub(crate) async fn cluster(&self, ns: &str, name: &str) -> Option<Arc<KKCluster>> {
        Self::get(&self.clusters, ns, name).await
    }

    /// The CAPI Machine `ns/name`, if cached.
    pub(crate) async fn capi_machine(&self, ns: &str, name: &str) -> Option<Arc<Machine>> {
        Self::get(&self.capi_machines, ns, name).await
    }

    /// The CAPI Cluster `ns/name`, if cached.
    pub(crate) async fn capi_cluster(&self, ns: &str, name: &str) -> Option<Arc<Cluster>> {
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

/// `ns/name` from the cache when it has it (`cached`), else from the API (just created, not cached yet). The
/// name comes from a field of another object, hence checked ([`ObjectName`]).
pub(crate) async fn cached_or_get<K>(
    cached: Option<Arc<K>>,
    client: &Client,
    ns: &str,
    name: ObjectName<'_>,
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
        .get_opt(name.as_str())
        .await
        .map_err(crate::Error::kube(format!("get {} {ns}/{name}", K::kind(&()))))
}
