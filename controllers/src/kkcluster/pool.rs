//! The `capkk_hosts` gauge: free, claimed and quarantined hosts per KKCluster, computed from the caches.

use std::sync::Arc;

use capkk_api::{KKCluster, KKInstance};
use kube::ResourceExt;

/// Free, claimed and quarantined hosts of `kkc`, given its claims (the `capkk_hosts` gauge).
pub(crate) fn pool_counts(kkc: &KKCluster, claims: &[Arc<KKInstance>]) -> (i64, i64, i64) {
    let quarantined = claims.iter().filter(|i| i.spec.quarantine.is_some()).count() as i64;
    let claimed = claims.len() as i64 - quarantined;
    let total = kkc.spec.nodes.instances.len() as i64;
    ((total - claimed - quarantined).max(0), claimed, quarantined)
}

/// Set the `capkk_hosts` gauge of every cached KKCluster from the caches, when metrics are scraped (the
/// only place it is computed: the counts change with KKInstances, and a KKInstance change does not wake its
/// KKCluster). A deleted KKCluster's series go with it.
pub(crate) fn record_pools(metrics: &crate::metrics::Metrics, stores: &crate::context::Stores) {
    let instances = stores.instances.state();
    let pools: Vec<_> = stores
        .clusters
        .state()
        .iter()
        .map(|kkc| {
            let (ns, name) = (kkc.namespace(), kkc.name_any());
            let claims: Vec<Arc<KKInstance>> = instances
                .iter()
                .filter(|i| i.namespace() == ns && i.spec.cluster_name.as_deref() == Some(name.as_str()))
                .cloned()
                .collect();
            let (free, claimed, quarantined) = pool_counts(kkc, &claims);
            (ns.unwrap_or_default(), name, free, claimed, quarantined)
        })
        .collect();
    metrics.set_pools(&pools);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kkcluster::test_objects::*;
    use capkk_api::KKInstance;

    #[test]
    fn the_host_pool_gauges_follow_the_kkinstance_cache_without_a_kkcluster_reconcile() {
        use kube::runtime::{reflector, watcher::Event};
        let mut c = kkc(vec![
            host("a", "10.0.0.1"),
            host("b", "10.0.0.2"),
            host("d", "10.0.0.3"),
        ]);
        c.metadata.namespace = Some("ns".into());
        let claim = |host: &str, quarantined: bool| {
            let mut i = KKInstance::new(
                &format!("c.{host}"),
                capkk_api::KKInstanceSpec {
                    name: host.into(),
                    cluster_name: Some("c".into()),
                    ..Default::default()
                },
            );
            i.metadata.namespace = Some("ns".into());
            i.spec.quarantine = quarantined.then(|| capkk_api::Quarantine {
                reason: "unreachable".into(),
                since: None,
            });
            i
        };
        let (instances, mut iw) = reflector::store::<KKInstance>();
        let (clusters, mut cw) = reflector::store::<KKCluster>();
        let stores = crate::context::Stores {
            instances,
            clusters,
            machines: reflector::store().0,
            capi_machines: reflector::store().0,
            capi_clusters: reflector::store().0,
        };
        cw.apply_watcher_event(&Event::Apply(c));
        iw.apply_watcher_event(&Event::Apply(claim("a", false)));
        let m = crate::metrics::Metrics::new();
        record_pools(&m, &stores);
        let gauge = |m: &crate::metrics::Metrics, state: &str, v: i64| {
            m.encode(crate::metrics::Exposure::Authenticated)
                .contains(&format!(
                    "capkk_hosts{{namespace=\"ns\",kkcluster=\"c\",state=\"{state}\"}} {v}\n"
                ))
        };
        assert!(gauge(&m, "free", 2) && gauge(&m, "claimed", 1) && gauge(&m, "quarantined", 0));
        // A host quarantined (its KKInstance changed, the KKCluster did not): the next scrape counts it.
        iw.apply_watcher_event(&Event::Apply(claim("b", true)));
        record_pools(&m, &stores);
        assert!(gauge(&m, "free", 1) && gauge(&m, "claimed", 1) && gauge(&m, "quarantined", 1));
        // The KKCluster deleted: its series are gone at the next scrape, not frozen at their last values.
        let gone = stores.clusters.state()[0].as_ref().clone();
        cw.apply_watcher_event(&Event::Delete(gone));
        record_pools(&m, &stores);
        assert!(
            !m.encode(crate::metrics::Exposure::Authenticated)
                .contains("kkcluster=\"c\""),
            "{}",
            m.encode(crate::metrics::Exposure::Authenticated)
        );
    }
}
