//! What wakes a KKMachine besides its own changes: its Machine, its Cluster's spec, its KKCluster's inventory
//! and provisioning, its KKInstance and its workload Node.

use std::{future::Future, sync::Arc};

use capkk_api::{
    KKCluster, KKMachine,
    consts::{CLUSTER_NAME_LABEL, KKCLUSTER_NAME_LABEL},
};
use futures::{StreamExt, channel::mpsc::UnboundedReceiver};
use kube::{
    ResourceExt,
    runtime::{Controller, WatchStreamExt, reflector::ObjectRef},
};

use crate::{
    capi::{Cluster, Machine, cluster_name},
    context::Context,
    reconcile::{error_policy, reconcile},
    watches::{Watches, controller_config, of_cluster},
};

/// The KKMachine controller on the shared `watches`; `triggers` wakes a KKMachine whose workload Node
/// registered (the workload clusters' Node watches).
pub(crate) fn controller(
    watches: &mut Watches,
    triggers: UnboundedReceiver<ObjectRef<KKMachine>>,
    ctx: Arc<Context>,
) -> impl Future<Output = ()> + Send + use<> {
    let (by_cluster, by_kkcluster) = (watches.kkmachines.store(), watches.kkmachines.store());
    Controller::for_stream(watches.kkmachines.subscribe(), watches.kkmachines.store())
        .owns_stream(watches.kkinstances.subscribe())
        .watches_stream(watches.capi_machines.subscribe(), machine_to_kkmachine)
        .watches_stream(watches.cluster_spec_changes(), move |c: Cluster| {
            of_cluster(&by_cluster.state(), &c)
        })
        // A KKCluster becoming provisioned (or changing its inventory) wakes its KKMachines: no polling. Its
        // other status changes (probe results) do not.
        .watches_stream(
            watches
                .kkclusters
                .subscribe()
                .predicate_filter(kkcluster_wakes_machines, Default::default()),
            move |k: KKCluster| of_kkcluster(&by_kkcluster.state(), &k),
        )
        .reconcile_on(triggers)
        .with_config(controller_config::<KKMachine>(
            &ctx,
            ctx.settings.concurrency.kkmachine,
        ))
        .shutdown_on_signal()
        .run(reconcile::<KKMachine>, error_policy::<KKMachine>, ctx)
        .for_each(|_| futures::future::ready(()))
}

/// The KKMachines of a KKCluster's Cluster (by CAPI's cluster-name label), for the KKCluster watch.
pub(crate) fn of_kkcluster(kkms: &[Arc<KKMachine>], kkc: &KKCluster) -> Vec<ObjectRef<KKMachine>> {
    let Some(cluster) = cluster_name(&kkc.metadata) else {
        return Vec::new();
    };
    kkms.iter()
        .filter(|m| {
            m.namespace() == kkc.namespace()
                && (m.labels().get(CLUSTER_NAME_LABEL) == Some(&cluster)
                    || m.labels().get(KKCLUSTER_NAME_LABEL) == Some(&kkc.name_any()))
        })
        .map(|m| ObjectRef::from_obj(&**m))
        .collect()
}

/// What of a KKCluster its KKMachines wait for: its spec (inventory) and whether it is provisioned (the
/// KKCluster watch's predicate; probe results and other status changes wake no KKMachine).
pub(crate) fn kkcluster_wakes_machines(k: &KKCluster) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let provisioned = k
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.provisioned);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (k.metadata.generation, provisioned).hash(&mut h);
    Some(h.finish())
}

/// The KKMachine a Machine points at (for the Machine watch).
pub(crate) fn machine_to_kkmachine(m: Machine) -> Option<ObjectRef<KKMachine>> {
    let r = m.spec.infrastructure_ref.as_ref().filter(|r| r.is("KKMachine"))?;
    Some(ObjectRef::new(&r.name).within(&m.namespace()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kkmachine::test_objects::*;

    #[test]
    fn a_kkcluster_wakes_its_machines_for_its_spec_and_provisioning_not_for_probe_results() {
        let mut k = kkc("a", vec![host("node1", "10.0.0.1")]);
        k.metadata.generation = Some(1);
        let before = kkcluster_wakes_machines(&k);
        let mut status = capkk_api::KKClusterStatus::default();
        status.hosts.push(capkk_api::HostProbe {
            name: "node1".into(),
            reachable: true,
            ..Default::default()
        });
        k.status = Some(status);
        assert_eq!(
            kkcluster_wakes_machines(&k),
            before,
            "a probe result wakes nobody"
        );
        k.status.get_or_insert_default().initialization = Some(capkk_api::Initialization {
            provisioned: Some(true),
        });
        let provisioned = kkcluster_wakes_machines(&k);
        assert_ne!(provisioned, before, "becoming provisioned wakes the KKMachines");
        k.metadata.generation = Some(2);
        assert_ne!(
            kkcluster_wakes_machines(&k),
            provisioned,
            "an inventory change wakes them"
        );
    }
}
