//! KKCluster reconciler: owner Cluster, pause, inventory validation, addresses shared with other
//! KKClusters, host probes (background), control-plane endpoint, `status.initialization.provisioned`;
//! deletion waits for every KKMachine and claimed KKInstance.
//!
//! - [`validate`]: the inventory checks; a refusal names the field and its condition reason.
//! - [`endpoint`]: the control-plane endpoint to publish.
//! - [`loadbalancer`]: the endpoint the provider serves (keepalived and haproxy) kept in step with the
//!   control plane's membership; more than one control plane with no load balancer refused.
//! - [`addresses`]: addresses another KKCluster of the namespace also lists.
//! - [`probes`]: background SSH probes of every host and their report.
//! - [`pool`]: the `capkk_hosts` gauge of free, claimed and quarantined hosts.
//! - [`watches`]: what wakes a KKCluster, and its controller.

pub(crate) mod addresses;
pub(crate) mod endpoint;
pub(crate) mod loadbalancer;
pub(crate) mod pool;
pub(crate) mod probes;
pub(crate) mod validate;
pub(crate) mod watches;

use std::sync::Arc;

use async_trait::async_trait;
use capkk_api::{
    KKCluster, KKClusterStatus, KKInstance, KKMachine,
    consts::{KKCLUSTER_FINALIZER, KKCLUSTER_NAME_LABEL, conditions as cond, reasons},
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::json;
use tracing::{info, warn};

use self::{
    addresses::report_shared_addresses, endpoint::desired_endpoint, probes::probe_and_report,
    validate::validate,
};
use crate::{
    capi::{Cluster, capi_owner, cluster_name},
    conditions,
    context::Context,
    error::{Error, Result},
    object_name::ObjectName,
    reconcile::{Owner, Reconciler, requeue},
};

/// The owner Cluster.
pub(crate) struct ClusterOwner(pub Cluster);

#[async_trait]
impl Reconciler for KKCluster {
    const KIND: &'static str = "KKCluster";
    const FINALIZER: &'static str = KKCLUSTER_FINALIZER;
    type Status = KKClusterStatus;
    type Owner = ClusterOwner;

    crate::status_accessors!(KKClusterStatus);

    async fn owner(&self, ctx: &Context) -> Result<Owner<ClusterOwner>> {
        let Some(owner) = capi_owner(&self.metadata, "Cluster").cloned() else {
            return Ok(Owner::Missing {
                what: "the owner Cluster to set its ownerReference".into(),
                retry: None,
            });
        };
        let ns = self.namespace().unwrap_or_default();
        // Owner references are not format-checked by the API server.
        let name = ObjectName::checked("metadata.ownerReferences[kind=Cluster].name", &owner.name)?;
        match crate::capi::cluster(ctx, &ns, name).await? {
            Some(c) => Ok(Owner::Found(ClusterOwner(c))),
            None => Ok(Owner::Missing {
                what: format!("Cluster {}", owner.name),
                retry: Some(requeue::OWNER_MISSING),
            }),
        }
    }

    fn owner_paused(owner: &ClusterOwner) -> bool {
        owner.0.spec.paused == Some(true)
    }

    async fn apply(
        obj: Arc<Self>,
        owner: ClusterOwner,
        ctx: &Arc<Context>,
        status: &mut KKClusterStatus,
    ) -> Result<Action> {
        apply(obj, &owner.0, ctx, status).await
    }

    async fn cleanup(
        obj: Arc<Self>,
        _owner: Option<ClusterOwner>,
        ctx: &Arc<Context>,
        status: &mut KKClusterStatus,
    ) -> Result<Action> {
        cleanup(obj, ctx, status).await
    }
}

async fn apply(
    kkc: Arc<KKCluster>,
    cluster: &Cluster,
    ctx: &Arc<Context>,
    status: &mut KKClusterStatus,
) -> Result<Action> {
    let ns = kkc.namespace().unwrap_or_default();
    let name = kkc.name_any();
    let api: Api<KKCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let gen_ = kkc.metadata.generation;

    let api_server_port = crate::hosts::api_server_port(Some(cluster));
    if let Err(refusal) =
        validate(&kkc).and_then(|()| validate::check_load_balancer_port(&kkc, api_server_port))
    {
        let reason = refusal.reason();
        warn!(error = %refusal, "Refusing an invalid inventory");
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reason,
            refusal.to_string(),
            gen_,
        );
        status.observed_generation = gen_;
        ctx.event(&*kkc, true, reason, "Validate", refusal.to_string())
            .await;
        return Ok(Action::await_change());
    }

    // Endpoint.
    let Some(endpoint) = desired_endpoint(&kkc, cluster) else {
        conditions::set(
            &mut status.conditions,
            cond::ENDPOINT_READY,
            false,
            reasons::INVALID_SPEC,
            "no control-plane endpoint: set spec.controlPlaneEndpoint or spec.controlPlaneLoadBalancer.host, or give a host the control-plane role",
            gen_,
        );
        return Ok(Action::await_change());
    };
    if kkc.spec.control_plane_endpoint.as_ref() != Some(&endpoint) {
        let patch = json!({ "spec": { "controlPlaneEndpoint": endpoint } });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube(format!(
                "set KKCluster {name} spec.controlPlaneEndpoint"
            )))?;
        info!(host = ?endpoint.host, port = ?endpoint.port, "Setting the control-plane endpoint");
    }
    let endpoint_text = format!(
        "{}:{}",
        endpoint.host.clone().unwrap_or_default(),
        endpoint.port.unwrap_or(6443)
    );
    // More than one control plane with the endpoint on one of them: losing that host would lose the cluster.
    // Said loudly (conditions, event); the first control plane still comes up, no further one is provisioned
    // (their KKInstances are refused in their load-balancer phase).
    let no_load_balancer = if crate::hosts::endpoint_is_a_host(&kkc) {
        match crate::capi::control_plane_replicas(ctx, &ns, cluster).await {
            Some(n) if n > 1 => Some(format!(
                "the Cluster asks for {n} control planes but the control-plane endpoint {endpoint_text} is one control-plane host (no load balancer): losing it would lose the cluster; set spec.controlPlaneLoadBalancer (type: Keepalived with a VIP, or an external load balancer's address) when creating the cluster. No control-plane host beyond the first is provisioned"
            )),
            _ => None,
        }
    } else {
        None
    };
    match &no_load_balancer {
        Some(msg) => {
            let said = conditions::get(&status.conditions, cond::ENDPOINT_READY)
                .is_some_and(|c| c.reason == reasons::NO_LOAD_BALANCER);
            conditions::set(
                &mut status.conditions,
                cond::ENDPOINT_READY,
                false,
                reasons::NO_LOAD_BALANCER,
                msg.clone(),
                gen_,
            );
            if !said {
                warn!("{msg}");
                ctx.event(&*kkc, true, reasons::NO_LOAD_BALANCER, "Validate", msg.clone())
                    .await;
            }
        }
        None => conditions::set_ready(&mut status.conditions, cond::ENDPOINT_READY, endpoint_text, gen_),
    }

    // The endpoint the provider serves: every control-plane host configured for the current membership.
    let lb_poll = if kkc
        .spec
        .control_plane_load_balancer
        .as_ref()
        .is_some_and(|l| l.is_keepalived())
    {
        loadbalancer::sync_and_report(&kkc, api_server_port, ctx, status).await
    } else {
        None
    };

    // Addresses another KKCluster also lists: whichever claims such a host first holds it, the other's
    // claim is refused (KKMachine). Both KKClusters say so.
    report_shared_addresses(&kkc, ctx, status).await;

    // Probes run in the background (100 unreachable hosts must not hold a reconcile for minutes) and
    // report here through the registry.
    probe_and_report(&kkc, ctx, status).await;

    status.initialization = Some(capkk_api::Initialization {
        provisioned: Some(true),
    });
    match &no_load_balancer {
        Some(msg) => conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::NO_LOAD_BALANCER,
            msg.clone(),
            gen_,
        ),
        None => conditions::set_ready(&mut status.conditions, cond::READY, "", gen_),
    }
    status.observed_generation = gen_;
    Ok(Action::requeue(
        lb_poll.map_or(ctx.settings.probe_interval, |p| {
            p.min(ctx.settings.probe_interval)
        }),
    ))
}

async fn cleanup(kkc: Arc<KKCluster>, ctx: &Context, status: &mut KKClusterStatus) -> Result<Action> {
    let ns = kkc.namespace().unwrap_or_default();
    let name = kkc.name_any();
    let lp = ListParams::default();
    let machines: Api<KKMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let instances: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let ms: Vec<String> = machines
        .list(&lp)
        .await
        .map_err(Error::kube("list KKMachines"))?
        .items
        .into_iter()
        .filter(|m| m.labels().get(KKCLUSTER_NAME_LABEL) == Some(&name))
        .map(|m| m.name_any())
        .collect();
    let is: Vec<String> = instances
        .list(&lp)
        .await
        .map_err(Error::kube("list KKInstances"))?
        .items
        .into_iter()
        .filter(|i| {
            (i.spec.cluster_name.as_deref() == Some(&name)
                || i.labels().get(KKCLUSTER_NAME_LABEL) == Some(&name))
                && i.spec.quarantine.is_none()
        })
        .map(|i| i.name_any())
        .collect();
    if ms.is_empty() && is.is_empty() {
        info!("No KKMachine or claimed KKInstance left; removing the finalizer");
        ctx.probes.forget(&kkc.uid().unwrap_or_default());
        ctx.jobs
            .forget(&format!("loadbalancer/{}", kkc.uid().unwrap_or_default()));
        // The workload cluster's cached client and Node watch go with it.
        if let Some(cluster) = cluster_name(&kkc.metadata) {
            ctx.workloads.forget(&ns, &cluster);
        }
        return Ok(Action::await_change());
    }
    let msg = format!("waiting for KKMachines {ms:?} and KKInstances {is:?} to be deleted");
    info!("{msg}");
    conditions::set(
        &mut status.conditions,
        cond::READY,
        false,
        reasons::DELETING,
        msg,
        kkc.metadata.generation,
    );
    Err(Error::pending(
        "KKMachines/KKInstances of this KKCluster",
        requeue::CLEANUP_POLL,
    ))
}

/// Objects for the KKCluster tests.
#[cfg(test)]
mod test_objects {
    use capkk_api::{Auth, InstanceInfo, KKCluster, KKClusterSpec, Nodes};

    pub(super) fn kkc(hosts: Vec<InstanceInfo>) -> KKCluster {
        KKCluster::new(
            "c",
            KKClusterSpec {
                nodes: Nodes {
                    auth: Auth {
                        password: Some("pw".into()),
                        ..Default::default()
                    },
                    bastion: None,
                    instances: hosts,
                },
                ..Default::default()
            },
        )
    }

    pub(super) fn host(name: &str, addr: &str) -> InstanceInfo {
        InstanceInfo {
            name: Some(name.to_owned()).filter(|n| !n.is_empty()),
            address: addr.into(),
            ..Default::default()
        }
    }
}
