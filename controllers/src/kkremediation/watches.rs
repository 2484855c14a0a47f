//! What wakes a KKRemediation besides its own changes: its Cluster's spec (pause) and its finished attempts.
//! Waiting for the Node is a requeue at the end of the attempt's timeout; CAPI deletes the KKRemediation as
//! soon as the Machine is healthy again.

use std::{future::Future, sync::Arc};

use capkk_api::{KKRemediation, consts::WATCH_FILTER_LABEL};
use futures::{StreamExt, channel::mpsc::UnboundedReceiver};
use kube::{
    Api, Client,
    runtime::{Controller, reflector::ObjectRef, watcher},
};

use crate::{
    capi::Cluster,
    context::Context,
    reconcile::{error_policy, reconcile},
    watches::{Watches, controller_config, of_cluster},
};

/// The KKRemediation controller: its own watch of KKRemediations (in `ns`, or all; with the watch filter when
/// one is set), the shared Cluster watch, and `triggers` for finished attempts.
pub(crate) fn controller(
    watches: &mut Watches,
    client: &Client,
    ns: Option<&str>,
    triggers: UnboundedReceiver<ObjectRef<KKRemediation>>,
    ctx: Arc<Context>,
) -> impl Future<Output = ()> + Send + use<> {
    let api: Api<KKRemediation> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let wc = match &ctx.settings.watch_filter {
        Some(v) => watcher::Config::default().labels(&format!("{WATCH_FILTER_LABEL}={v}")),
        None => watcher::Config::default(),
    };
    let controller = Controller::new(api, wc);
    let store = controller.store();
    controller
        .watches_stream(watches.cluster_spec_changes(), move |c: Cluster| {
            of_cluster(&store.state(), &c)
        })
        .reconcile_on(triggers)
        .with_config(controller_config::<KKRemediation>(&ctx, 0))
        .shutdown_on_signal()
        .run(reconcile::<KKRemediation>, error_policy::<KKRemediation>, ctx)
        .for_each(|_| futures::future::ready(()))
}
