//! What wakes a KKInstance besides its own changes: its KKMachine's spec and deletion, its Cluster's spec
//! (pause), its finished host work, and a changed Secret it reads (the by-name Secret check, [`crate::secrets`]).

use std::{future::Future, sync::Arc};

use capkk_api::{KKInstance, KKMachine};
use futures::{StreamExt, channel::mpsc::UnboundedReceiver};
use kube::{
    ResourceExt,
    runtime::{Controller, WatchStreamExt, predicates, reflector::ObjectRef},
};

use crate::{
    capi::Cluster,
    context::Context,
    reconcile::{error_policy, reconcile},
    watches::{Watches, controller_config, of_cluster},
};

/// The KKInstance controller on the shared `watches`; `triggers` wakes a KKInstance whose host work
/// finished.
pub(crate) fn controller(
    watches: &mut Watches,
    triggers: UnboundedReceiver<ObjectRef<KKInstance>>,
    ctx: Arc<Context>,
) -> impl Future<Output = ()> + Send + use<> {
    let by_cluster = watches.kkinstances.store();
    Controller::for_stream(watches.kkinstances.subscribe(), watches.kkinstances.store())
        // A KKMachine's spec (the claim record, spec.instanceID) and its deletion matter to its KKInstance, not
        // its status (which mirrors the KKInstance: waking the KKInstance for it only fed a loop).
        .watches_stream(
            watches
                .kkmachines
                .subscribe()
                .predicate_filter(predicates::generation, Default::default()),
            kkmachine_to_instance,
        )
        .watches_stream(watches.cluster_spec_changes(), move |c: Cluster| {
            of_cluster(&by_cluster.state(), &c)
        })
        .reconcile_on(triggers)
        .with_config(controller_config::<KKInstance>(
            &ctx,
            ctx.settings.concurrency.kkinstance,
        ))
        .shutdown_on_signal()
        .run(reconcile::<KKInstance>, error_policy::<KKInstance>, ctx)
        .for_each(|_| futures::future::ready(()))
}

/// The KKInstance a KKMachine claimed (for the KKMachine watch).
pub(crate) fn kkmachine_to_instance(m: KKMachine) -> Option<ObjectRef<KKInstance>> {
    let id = m.spec.instance_id.clone()?;
    Some(ObjectRef::new(&id).within(&m.namespace()?))
}
