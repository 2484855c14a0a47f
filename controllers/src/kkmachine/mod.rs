//! KKMachine reconciler: the InfraMachine contract. Claims a host by creating its KKInstance
//! `<kkcluster>.<host>` (AlreadyExists means taken), refuses an address another KKCluster holds, records the
//! claim in the spec, mirrors the KKInstance's progress and patches the workload Node's providerID.
//!
//! - [`claim`]: creating the KKInstance of a host and recording the claim.
//! - [`choice`]: which hosts a claim may try, and which addresses another KKCluster holds.
//! - [`mirror`]: the KKInstance's progress and addresses copied into the KKMachine status.
//! - [`node`]: the workload Node's providerID and the KKInstance's `nodeRef`.
//! - [`watches`]: what wakes a KKMachine, and its controller.

pub(crate) mod choice;
pub(crate) mod claim;
pub(crate) mod mirror;
pub(crate) mod node;
pub(crate) mod watches;

use std::sync::Arc;

use async_trait::async_trait;
use capkk_api::{
    KKInstance, KKMachine, KKMachineStatus, MachinePhase,
    consts::{
        CLUSTER_NAME_LABEL, KKCLUSTER_NAME_LABEL, KKMACHINE_FINALIZER, RELEASE_ANNOTATION,
        RUNTIME_VERSION_ANNOTATION, conditions as cond, reasons,
    },
};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::json;
use tracing::{debug, info};

use self::{
    claim::{Claim, claim},
    mirror::{instance_provisioned, mirror, newly_provisioned},
    node::{patch_node_provider_id, record_node_ref},
};
use crate::{
    capi::{Cluster, Machine},
    conditions,
    context::{Context, cached_or_get},
    error::{Error, Result},
    machine_host::controlled_by,
    object_name::ObjectName,
    reconcile::{Owner, Reconciler, requeue},
};

/// The owner Machine and its Cluster.
pub(crate) struct MachineOwner {
    /// The owner Machine.
    pub machine: Machine,
    /// Its Cluster.
    pub cluster: Cluster,
}

#[async_trait]
impl Reconciler for KKMachine {
    const KIND: &'static str = "KKMachine";
    const FINALIZER: &'static str = KKMACHINE_FINALIZER;
    type Status = KKMachineStatus;
    type Owner = MachineOwner;

    crate::status_accessors!(KKMachineStatus);

    async fn owner(&self, ctx: &Context) -> Result<Owner<MachineOwner>> {
        let ns = self.namespace().unwrap_or_default();
        let Some((owner, machine)) = crate::capi::owner_machine(ctx, &self.metadata).await? else {
            return Ok(Owner::Missing {
                what: "the owner Machine to set its ownerReference".into(),
                retry: None,
            });
        };
        let Some(machine) = machine else {
            return Ok(Owner::Missing {
                what: format!("Machine {}", owner.name),
                retry: Some(requeue::OWNER_MISSING),
            });
        };
        let cluster_name = if machine.spec.cluster_name.is_empty() {
            machine
                .labels()
                .get(CLUSTER_NAME_LABEL)
                .cloned()
                .unwrap_or_default()
        } else {
            machine.spec.cluster_name.clone()
        };
        let field = if machine.spec.cluster_name.is_empty() {
            "Machine metadata.labels[cluster.x-k8s.io/cluster-name]"
        } else {
            "Machine.spec.clusterName"
        };
        let name = ObjectName::checked(field, &cluster_name)?;
        let Some(cluster) = crate::capi::cluster(ctx, &ns, name).await? else {
            return Ok(Owner::Missing {
                what: format!("Cluster {cluster_name}"),
                retry: Some(requeue::OWNER_MISSING),
            });
        };
        Ok(Owner::Found(MachineOwner { machine, cluster }))
    }

    fn owner_paused(owner: &MachineOwner) -> bool {
        owner.cluster.spec.paused == Some(true)
    }

    async fn apply(
        obj: Arc<Self>,
        owner: MachineOwner,
        ctx: &Arc<Context>,
        status: &mut KKMachineStatus,
    ) -> Result<Action> {
        apply(obj, &owner.machine, &owner.cluster, ctx, status).await
    }

    async fn cleanup(
        obj: Arc<Self>,
        _owner: Option<MachineOwner>,
        ctx: &Arc<Context>,
        status: &mut KKMachineStatus,
    ) -> Result<Action> {
        cleanup(obj, ctx, status).await
    }
}

async fn apply(
    km: Arc<KKMachine>,
    machine: &Machine,
    cluster: &Cluster,
    ctx: &Context,
    status: &mut KKMachineStatus,
) -> Result<Action> {
    let ns = km.namespace().unwrap_or_default();
    let name = km.name_any();
    let gen_ = km.metadata.generation;
    let api: Api<KKMachine> = Api::namespaced(ctx.client.clone(), &ns);
    status.observed_generation = gen_;

    // The KKCluster.
    let Some(infra) = cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .filter(|r| r.is("KKCluster"))
    else {
        let msg = "Cluster.spec.infrastructureRef does not point at a KKCluster";
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            msg,
            gen_,
        );
        return Ok(Action::requeue(requeue::NOT_KKCLUSTER));
    };
    let infra_name = ObjectName::checked("Cluster.spec.infrastructureRef.name", &infra.name)?;
    let kkc = cached_or_get(
        ctx.stores.cluster(&ns, &infra.name).await,
        &ctx.client,
        &ns,
        infra_name,
    )
    .await?;
    let provisioned = kkc
        .as_ref()
        .and_then(|k| k.status.as_ref())
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.provisioned)
        == Some(true);
    let Some(kkc) = kkc.filter(|_| provisioned) else {
        info!(kkcluster = %infra.name, "Waiting for the cluster infrastructure");
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!("KKCluster {} is not provisioned yet", infra.name),
            gen_,
        );
        status.phase.get_or_insert(MachinePhase::Pending);
        return Ok(Action::requeue(requeue::INFRA_NOT_READY));
    };

    // The KKCluster's label (its deletion waits for the KKMachines carrying it). A new claim's record carries
    // it: one write instead of two, and one wake of CAPI's Machine controller fewer on the way to a claim.
    // Otherwise (waiting, or a claim recorded earlier) it is written on its own before returning.
    let mut label = (km.labels().get(KKCLUSTER_NAME_LABEL) != Some(&kkc.name_any())).then(|| kkc.name_any());

    let secret_name = machine
        .spec
        .bootstrap
        .data_secret_name
        .clone()
        .filter(|s| !s.is_empty());
    // Copied into the KKInstance, which reads the Secret by this name.
    if let Some(s) = secret_name.as_deref() {
        ObjectName::checked("Machine.spec.bootstrap.dataSecretName", s)?;
    }
    // Host preparation needs the version (the binaries and images are the Machine's) but not the bootstrap
    // data: with both flag and version, the host is claimed and prepared while the bootstrap provider waits
    // (for a worker, on the control plane's `kubeadm init`); only running the data waits for it.
    let prepare_early = ctx.settings.prepare_before_bootstrap_data
        && machine.spec.version.as_deref().is_some_and(|v| !v.is_empty());
    if secret_name.is_none() && !prepare_early {
        info!("Waiting for Machine.spec.bootstrap.dataSecretName");
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            "waiting for the bootstrap provider to set Machine.spec.bootstrap.dataSecretName",
            gen_,
        );
        status.phase.get_or_insert(MachinePhase::Pending);
        label_kkmachine(&api, &name, label).await?;
        return Ok(Action::await_change());
    }

    let claimed = claim(&km, &mut label, machine, &kkc, secret_name.as_deref(), ctx).await?;
    label_kkmachine(&api, &name, label).await?;
    let (mut inst, gen_) = match claimed {
        // The status reports the generation that holds the claim: reporting the one before it made the next
        // reconcile write the status again for observedGeneration alone (one more wake of CAPI's Machine).
        Claim::Held(i, recorded) => {
            let gen_ = recorded.or(gen_);
            status.observed_generation = gen_;
            (i, gen_)
        }
        Claim::Waiting {
            reason,
            message,
            retry,
        } => {
            info!(%reason, "{message}");
            conditions::set(
                &mut status.conditions,
                cond::HOST_CLAIMED,
                false,
                &reason,
                &message,
                gen_,
            );
            conditions::set(
                &mut status.conditions,
                cond::READY,
                false,
                &reason,
                &message,
                gen_,
            );
            status.phase = Some(MachinePhase::Pending);
            return Ok(Action::requeue(retry));
        }
    };
    if let Some(secret) = secret_name.as_deref()
        && inst.spec.bootstrap_data_secret_ref.is_none()
        && inst.metadata.deletion_timestamp.is_none()
    {
        // Claimed (and prepared) before the bootstrap data existed: handing it over starts provisioning.
        *inst = hand_over_bootstrap_data(ctx, &inst, secret).await?;
    }
    let uid = inst.uid().unwrap_or_default();
    let reported = ctx.tasks.reported_provisioned(&uid);
    if reported && instance_provisioned(&inst) {
        ctx.tasks.forget_provisioned(&uid);
    }
    mirror(status, &inst, reported, gen_);
    status.components = components(&inst, &kkc);
    let done = status.initialization.as_ref().and_then(|i| i.provisioned) == Some(true);
    if newly_provisioned(km.status.as_ref(), status) {
        // Report it before going to the workload cluster (connecting to it, a Node watch, a GET and a LIST
        // can take seconds against an API server that just started, and CAPI waits for this report): the
        // status write wakes this KKMachine again, and that reconcile sets the Node's providerID.
        return Ok(Action::requeue(requeue::NODE_POLL));
    }

    if done
        && machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .is_none()
    {
        // The workload cluster's client is cached and its Node watch wakes this KKMachine when its Node
        // registers (workload::WorkloadClients); the requeue below is only a safety net.
        let cluster_name = cluster.name_any();
        match tokio::time::timeout(
            ctx.settings.workload_timeout,
            patch_node_provider_id(ctx, &ns, &cluster_name, &inst),
        )
        .await
        {
            Ok(Ok(Some(node))) => {
                // Logged at info where it is set (node.rs): this runs on every poll until CAPI sets the nodeRef.
                debug!(node = %node.name_any(), "Workload Node carries the providerID");
                record_node_ref(ctx, &inst, &node).await?;
            }
            Ok(Ok(None)) => debug!(node = %inst.spec.name, "Workload Node not registered yet"),
            Ok(Err(e)) => debug!(error = %e, "Workload cluster not reachable yet"),
            Err(_) => debug!("Workload cluster did not answer in time"),
        }
        return Ok(Action::requeue(requeue::NODE_POLL));
    }
    if done {
        Ok(Action::requeue(requeue::PROVISIONED_RESYNC))
    } else {
        Ok(Action::requeue(requeue::MACHINE_WORK))
    }
}

/// `status.components`: what the containermanager phase installs on the claimed host (the same resolution),
/// or nothing while it cannot be resolved; the phase then fails with `InvalidSpec` naming the field, and that
/// reason reaches this KKMachine through the mirrored `InstanceReady`. After an in-place upgrade the
/// resolution stays the one the runtime was installed with ([`RUNTIME_VERSION_ANNOTATION`]): the upgrade
/// replaces Kubernetes' binaries, not containerd.
fn components(inst: &KKInstance, kkc: &capkk_api::KKCluster) -> Option<capkk_api::ResolvedComponents> {
    let mut spec = inst.spec.clone();
    if let Some(installed) = inst.annotations().get(RUNTIME_VERSION_ANNOTATION) {
        spec.kubernetes_version = Some(installed.clone());
    }
    let c = crate::services::resolve_components(&spec, Some(&kkc.spec)).ok()?;
    Some(capkk_api::ResolvedComponents {
        kubernetes_version: spec.kubernetes_version.filter(|v| !v.is_empty()),
        containerd: Some(c.containerd),
        runc: Some(c.runc),
        crictl: Some(c.crictl),
        sandbox_image: Some(c.sandbox_image),
        defaulted: c.defaulted.into_iter().map(String::from).collect(),
    })
}

/// Name the bootstrap data Secret in the spec of `inst`, a KKInstance claimed before it existed, and wake it:
/// its host (prepared meanwhile, or still preparing) goes on to provisioning.
async fn hand_over_bootstrap_data(ctx: &Context, inst: &KKInstance, secret: &str) -> Result<KKInstance> {
    let ns = inst.namespace().unwrap_or_default();
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({ "spec": { "bootstrapDataSecretRef": { "name": secret } } });
    let patched = api
        .patch(&inst.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(format!(
            "name the bootstrap data in KKInstance {}",
            inst.name_any()
        )))?;
    info!(instance = %inst.name_any(), secret, "Bootstrap data handed to the prepared host");
    ctx.trigger_instance(&inst.name_any(), &ns);
    Ok(patched)
}

/// Set the KKCluster label of KKMachine `name` when `label` still holds it (no claim record carried it).
async fn label_kkmachine(api: &Api<KKMachine>, name: &str, label: Option<String>) -> Result<()> {
    let Some(kkc) = label else { return Ok(()) };
    let patch = json!({ "metadata": { "labels": { KKCLUSTER_NAME_LABEL: kkc } } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(format!("label KKMachine {name}")))?;
    Ok(())
}

async fn cleanup(km: Arc<KKMachine>, ctx: &Context, status: &mut KKMachineStatus) -> Result<Action> {
    let ns = km.namespace().unwrap_or_default();
    let uid = km.uid().unwrap_or_default();
    let instances: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let owned: Vec<Arc<KKInstance>> = ctx
        .stores
        .instances_in(&ns)
        .await
        .into_iter()
        .filter(|i| controlled_by(i, &uid))
        .collect();
    if owned.is_empty() {
        info!("No host held; removing the finalizer");
        return Ok(Action::await_change());
    }
    for i in &owned {
        if i.metadata.deletion_timestamp.is_none() && !i.annotations().contains_key(RELEASE_ANNOTATION) {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = json!({ "metadata": { "annotations": { RELEASE_ANNOTATION: now } } });
            instances
                .patch(&i.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::kube(format!("release KKInstance {}", i.name_any())))?;
            info!(instance = %i.name_any(), "Asking the KKInstance to reset and free its host");
            ctx.trigger_instance(&i.name_any(), &ns);
        }
    }
    let names: Vec<String> = owned.iter().map(|i| i.name_any()).collect();
    let step = owned
        .first()
        .and_then(|i| i.status.as_ref())
        .and_then(|s| s.step.clone());
    conditions::set(
        &mut status.conditions,
        cond::READY,
        false,
        reasons::DELETING,
        format!("waiting for host(s) {names:?} to be reset and freed"),
        km.metadata.generation,
    );
    status.phase = Some(MachinePhase::Deleting);
    status.step = step;
    Err(Error::pending(
        format!("hosts {names:?} to be reset and freed"),
        requeue::CLEANUP_POLL,
    ))
}

/// Objects for the KKMachine tests.
#[cfg(test)]
mod test_objects {
    use capkk_api::{
        Auth, InstanceInfo, KKCluster, KKClusterSpec, KKInstance, KKInstanceSpec, Nodes, names::instance_name,
    };
    use k8s_openapi::{
        apimachinery::pkg::apis::meta::v1::{Condition, Time},
        jiff::Timestamp,
    };

    pub(super) fn host(name: &str, addr: &str) -> InstanceInfo {
        InstanceInfo {
            name: Some(name.to_owned()).filter(|n| !n.is_empty()),
            address: addr.into(),
            ..Default::default()
        }
    }

    pub(super) fn kkc(name: &str, hosts: Vec<InstanceInfo>) -> KKCluster {
        KKCluster::new(
            name,
            KKClusterSpec {
                nodes: Nodes {
                    auth: Auth::default(),
                    bastion: None,
                    instances: hosts,
                },
                ..Default::default()
            },
        )
    }

    pub(super) fn claim_of(kkc: &str, host: &str, addr: &str) -> KKInstance {
        KKInstance::new(
            &instance_name(kkc, host),
            KKInstanceSpec {
                name: host.into(),
                address: addr.into(),
                cluster_name: Some(kkc.into()),
                ..Default::default()
            },
        )
    }

    pub(super) fn cond(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("{type_} {reason}"),
            observed_generation: Some(1),
            last_transition_time: Time(Timestamp::now()),
        }
    }
}
