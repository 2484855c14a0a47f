//! What wakes a KKCluster: its own changes, its Cluster's spec (pause), and its finished probes.

use std::{future::Future, sync::Arc};

use capkk_api::KKCluster;
use futures::{StreamExt, channel::mpsc::UnboundedReceiver};
use kube::{
    ResourceExt,
    runtime::{Controller, reflector::ObjectRef},
};

use crate::{
    capi::Cluster,
    context::Context,
    reconcile::{error_policy, reconcile},
    watches::{Watches, controller_config},
};

/// The KKCluster controller on the shared `watches`; `triggers` wakes a KKCluster whose probes finished.
pub(crate) fn controller(
    watches: &mut Watches,
    triggers: UnboundedReceiver<ObjectRef<KKCluster>>,
    ctx: Arc<Context>,
) -> impl Future<Output = ()> + Send + use<> {
    Controller::for_stream(watches.kkclusters.subscribe(), watches.kkclusters.store())
        .watches_stream(watches.cluster_spec_changes(), cluster_to_kkcluster)
        .reconcile_on(triggers)
        .with_config(controller_config::<KKCluster>(
            &ctx,
            ctx.settings.concurrency.kkcluster,
        ))
        .shutdown_on_signal()
        .run(reconcile::<KKCluster>, error_policy::<KKCluster>, ctx)
        .for_each(|_| futures::future::ready(()))
}

/// The KKCluster a Cluster points at.
fn cluster_to_kkcluster(c: Cluster) -> Option<ObjectRef<KKCluster>> {
    let r = c.spec.infrastructure_ref.as_ref().filter(|r| r.is("KKCluster"))?;
    Some(ObjectRef::new(&r.name).within(&c.namespace()?))
}
