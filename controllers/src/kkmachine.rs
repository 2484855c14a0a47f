//! KKMachine reconciler: the InfraMachine contract. Claims a host by creating its KKInstance
//! `<kkcluster>.<host>` (AlreadyExists means taken), refuses an address another KKCluster holds, records the
//! claim in the spec, mirrors the KKInstance's progress and patches the workload Node's providerID.

use std::{borrow::Borrow, collections::BTreeMap, net::IpAddr, sync::Arc};

use async_trait::async_trait;
use capkk_api::{
    InstanceState, KKCluster, KKInstance, KKInstanceSpec, KKMachine, KKMachineStatus, MachineAddress,
    MachinePhase, Role, SecretRef,
    consts::{
        CLUSTER_NAME_LABEL, KKCLUSTER_NAME_LABEL, KKMACHINE_FINALIZER, WATCH_FILTER_LABEL,
        conditions as cond, reasons,
    },
};
use k8s_openapi::{
    api::core::v1::{Node, ObjectReference},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::controller::Action,
};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::{
    annotations,
    capi::{CONTROL_PLANE_LABEL, Cluster, Machine, capi_owner},
    conditions,
    context::{Context, cached_or_get},
    error::{Error, Result, is_conflict},
    hosts,
    reconcile::{Owner, Reconciler, apply_status, requeue},
};

/// The field manager of `KKInstance.status.nodeRef` (written by the KKMachine reconciler).
pub const NODE_REF_FIELD_MANAGER: &str = "capkk-manager/noderef";

/// Label on a KKInstance: a hash of its address, so claims of one address are found with one selector
/// (two KKClusters listing the same address must never both provision it).
pub const ADDRESS_LABEL: &str = "kkinstance.infrastructure.cluster.x-k8s.io/address-hash";

/// CAPKK's provider ID form: `kk:///<kkcluster>/<host>`.
pub fn provider_id(kkcluster: &str, host: &str) -> String {
    format!("kk:///{kkcluster}/{host}")
}

/// The name of the KKInstance claiming `host` of `kkcluster`: `<kkcluster>.<host>`. Unambiguous because
/// host names are DNS labels (no dots). Names longer than an object name allows keep a hash of the
/// KKCluster name instead of its tail.
pub fn instance_name(kkcluster: &str, host: &str) -> String {
    let name = format!("{kkcluster}.{host}");
    if name.len() <= 253 {
        return name;
    }
    let keep = 253 - host.len() - 1 - 17;
    let mut cut = keep.min(kkcluster.len());
    while !kkcluster.is_char_boundary(cut) {
        cut -= 1;
    }
    let prefix = kkcluster[..cut].trim_end_matches(['-', '.']);
    format!("{prefix}-{:016x}.{host}", fnv1a(kkcluster.as_bytes()))
}

/// The value of [`ADDRESS_LABEL`] for an address (label values allow 63 characters; addresses 253).
pub fn address_hash(address: &str) -> String {
    format!("{:016x}", fnv1a(address.trim().to_ascii_lowercase().as_bytes()))
}

/// 64-bit FNV-1a: a stable, dependency-free hash for names and labels (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The owner Machine and its Cluster.
pub struct MachineOwner {
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
        let Some(owner) = capi_owner(&self.metadata, "Machine").cloned() else {
            return Ok(Owner::Missing {
                what: "the owner Machine to set its ownerReference".into(),
                retry: None,
            });
        };
        // From the caches; an object the cache does not show yet (just created) is read from the API.
        let machine = cached_or_get(
            ctx.stores.capi_machine(&ns, &owner.name).await,
            &ctx.client,
            &ns,
            &owner.name,
        )
        .await?;
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
        let Some(cluster) = crate::capi::cluster(ctx, &ns, &cluster_name).await? else {
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

/// The roles a host must serve: the KKMachine's, else derived from the Machine's control-plane label.
pub fn wanted_roles(km: &KKMachine, machine: &Machine) -> Vec<Role> {
    if !km.spec.roles.is_empty() {
        return km.spec.roles.clone();
    }
    if machine.labels().contains_key(CONTROL_PLANE_LABEL) {
        vec![Role::ControlPlane]
    } else {
        vec![Role::Worker]
    }
}

fn controlled_by(i: &KKInstance, uid: &str) -> bool {
    i.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
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
    let kkc = cached_or_get(
        ctx.stores.cluster(&ns, &infra.name).await,
        &ctx.client,
        &ns,
        &infra.name,
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

    let Some(secret_name) = machine
        .spec
        .bootstrap
        .data_secret_name
        .clone()
        .filter(|s| !s.is_empty())
    else {
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
    };

    let claimed = claim(&km, &mut label, machine, &kkc, &secret_name, ctx).await?;
    label_kkmachine(&api, &name, label).await?;
    let (inst, gen_) = match claimed {
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
    mirror(status, &inst, gen_);
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
                info!(node = %node.name_any(), "Workload Node carries the providerID");
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

/// Whether this reconcile is the first to report the KKMachine provisioned (`before` is the status it
/// read, `now` the one it will write).
pub fn newly_provisioned(before: Option<&KKMachineStatus>, now: &KKMachineStatus) -> bool {
    let provisioned = |s: Option<&KKMachineStatus>| {
        s.and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.provisioned)
            == Some(true)
    };
    provisioned(Some(now)) && !provisioned(before)
}

/// The machine addresses of a host: InternalIP, ExternalIP (ExternalDNS when the SSH address is a name),
/// Hostname.
pub fn addresses(inst: &KKInstance) -> Vec<MachineAddress> {
    let internal = inst
        .spec
        .internal_address
        .clone()
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| inst.spec.address.clone());
    let external_type = if inst.spec.address.parse::<IpAddr>().is_ok() {
        "ExternalIP"
    } else {
        "ExternalDNS"
    };
    let mut addrs = vec![
        MachineAddress {
            type_: "InternalIP".into(),
            address: internal,
        },
        MachineAddress {
            type_: external_type.into(),
            address: inst.spec.address.clone(),
        },
        MachineAddress {
            type_: "Hostname".into(),
            address: inst.spec.name.clone(),
        },
    ];
    addrs.dedup();
    addrs
}

/// Copy the KKInstance's progress into the KKMachine status.
pub fn mirror(status: &mut KKMachineStatus, inst: &KKInstance, gen_: Option<i64>) {
    let ist = inst.status.clone().unwrap_or_default();
    conditions::set(
        &mut status.conditions,
        cond::HOST_CLAIMED,
        true,
        reasons::READY,
        format!("host {} ({})", inst.spec.name, inst.spec.address),
        gen_,
    );
    let ready = conditions::get(&ist.conditions, cond::READY);
    match ready {
        Some(c) => conditions::set_raw(
            &mut status.conditions,
            cond::INSTANCE_READY,
            &c.status,
            &c.reason,
            c.message.clone(),
            gen_,
        ),
        None => conditions::set_raw(
            &mut status.conditions,
            cond::INSTANCE_READY,
            "Unknown",
            reasons::IN_PROGRESS,
            "waiting for the KKInstance to report",
            gen_,
        ),
    }
    // `Running` is re-derived from the KKInstance's annotations, so it holds again after `clusterctl move`
    // (which copies neither status); the `Provisioned` condition is host work's own report.
    let provisioned = conditions::is_true(&ist.conditions, cond::PROVISIONED)
        || ist.state == Some(InstanceState::Running)
        || status.initialization.as_ref().and_then(|i| i.provisioned) == Some(true);
    if provisioned {
        status.initialization = Some(capkk_api::Initialization {
            provisioned: Some(true),
        });
        status.addresses = addresses(inst);
    }
    status.step = ist.step.clone();
    status.phase = Some(match (provisioned, ist.state) {
        (_, Some(InstanceState::Quarantined | InstanceState::Failed)) => MachinePhase::Failed,
        (true, _) => MachinePhase::Provisioned,
        (false, None | Some(InstanceState::Pending)) => MachinePhase::Claimed,
        (false, _) => MachinePhase::Provisioning,
    });
    let instance_ready = ready.is_some_and(|c| c.status == "True");
    if provisioned && instance_ready {
        conditions::set(
            &mut status.conditions,
            cond::READY,
            true,
            reasons::READY,
            "",
            gen_,
        );
    } else {
        let (reason, msg) = ready
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap_or_else(|| (reasons::IN_PROGRESS.into(), "host work pending".into()));
        conditions::set(&mut status.conditions, cond::READY, false, &reason, msg, gen_);
    }
}

/// The result of trying to claim a host.
pub enum Claim {
    /// This KKMachine holds the KKInstance; with the KKMachine's generation after the claim record when this
    /// reconcile wrote it (the status then reports that generation at once, not one write later).
    Held(Box<KKInstance>, Option<i64>),
    /// No host (yet).
    Waiting {
        /// Condition reason.
        reason: String,
        /// Condition message.
        message: String,
        /// Retry after.
        retry: std::time::Duration,
    },
}

fn new_instance(
    km: &KKMachine,
    machine: &Machine,
    kkc: &KKCluster,
    host: &capkk_api::InstanceInfo,
    name: &str,
    secret: &str,
) -> KKInstance {
    let ns = km.namespace().unwrap_or_default();
    let mut labels = BTreeMap::new();
    if let Some(c) = km
        .labels()
        .get(CLUSTER_NAME_LABEL)
        .or_else(|| machine.labels().get(CLUSTER_NAME_LABEL))
    {
        labels.insert(CLUSTER_NAME_LABEL.to_owned(), c.clone());
    }
    labels.insert(KKCLUSTER_NAME_LABEL.to_owned(), kkc.name_any());
    labels.insert(ADDRESS_LABEL.to_owned(), address_hash(&host.address));
    if let Some(f) = km.labels().get(WATCH_FILTER_LABEL) {
        labels.insert(WATCH_FILTER_LABEL.to_owned(), f.clone());
    }
    let owner = OwnerReference {
        api_version: capkk_api::API_VERSION.into(),
        kind: "KKMachine".into(),
        name: km.name_any(),
        uid: km.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let auth = hosts::host_auth(kkc, host).without_inline_secrets();
    let bastion = hosts::effective_bastion(kkc).map(|b| capkk_api::Bastion {
        auth: b.auth.map(|a| a.without_inline_secrets()),
        ..b
    });
    KKInstance {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: KKInstanceSpec {
            name: host.host_name(),
            address: host.address.clone(),
            internal_address: Some(host.internal_address().to_owned()),
            roles: host.roles(),
            arch: host.arch.clone(),
            cluster_name: Some(kkc.name_any()),
            auth: Some(auth),
            bastion,
            host_keys: host.host_keys.clone(),
            // Trust on first use starts at the KKCluster's probe: the claim pins the key the probe saw.
            host_key: hosts::probed_host_key(kkc, host),
            bootstrap_data_secret_ref: Some(SecretRef {
                name: secret.to_owned(),
            }),
            kubernetes_version: machine.spec.version.clone(),
            provider_id: Some(provider_id(&kkc.name_any(), &host.host_name())),
            container_manager: Some(km.spec.container_manager.clone()),
            repository: km.spec.repository.clone(),
            quarantine: None,
        },
        status: None,
    }
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

/// The merge patch recording the claim of `inst` (guarded by the KKMachine's `rv`: a KKMachine that changed
/// meanwhile may have recorded another claim), with the KKCluster label when it is still missing.
pub fn claim_record(inst: &KKInstance, rv: Option<&str>, label: Option<&str>) -> serde_json::Value {
    let kkc = inst.spec.cluster_name.clone().unwrap_or_default();
    let mut patch = json!({
        "spec": { "instanceID": inst.name_any(), "providerID": provider_id(&kkc, &inst.spec.name) }
    });
    if let Some(rv) = rv {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    if let Some(l) = label {
        patch["metadata"]["labels"] = json!({ KKCLUSTER_NAME_LABEL: l });
    }
    patch
}

/// Record the claim of `inst` in `km`; the pending KKCluster label rides along (taken from `label` once
/// written). Returns the KKMachine's generation after the record.
async fn record_claim(
    api: &Api<KKMachine>,
    km: &KKMachine,
    label: &mut Option<String>,
    inst: &KKInstance,
) -> Result<Option<i64>> {
    let patch = claim_record(inst, km.metadata.resource_version.as_deref(), label.as_deref());
    let recorded = api
        .patch(&km.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(format!(
            "record claim of KKInstance {} in KKMachine {}",
            inst.name_any(),
            km.name_any()
        )))?;
    *label = None;
    Ok(recorded.metadata.generation)
}

async fn release_stray(instances: &Api<KKInstance>, i: &KKInstance) {
    // A claim this KKMachine made but did not record (lost a race): nothing ran on the host yet. Only called
    // for claims that can never become the recorded one (spec.instanceID names another KKInstance, or the
    // claim was given up before recording it).
    if let Err(e) = instances.delete(&i.name_any(), &DeleteParams::default()).await {
        warn!(instance = %i.name_any(), error = %e, "Deleting an unrecorded claim failed");
    }
}

/// True when `i` claims `host` of KKCluster `kkc` (by name `<kkc>.<host>`, or by spec for claims named
/// after the bare host by earlier versions).
fn claims_host(i: &KKInstance, kkc: &str, host: &str) -> bool {
    i.name_any() == instance_name(kkc, host)
        || (i.spec.name == host && i.spec.cluster_name.as_deref() == Some(kkc))
}

/// The KKInstance of another KKCluster that holds `address`, if any. Deleted ones still hold it (their
/// host is being reset), quarantined ones too.
pub fn address_holder<'a, I: Borrow<KKInstance>>(
    all: &'a [I],
    kkc: &str,
    address: &str,
) -> Option<&'a KKInstance> {
    all.iter().map(Borrow::borrow).find(|i: &&KKInstance| {
        i.spec.address.eq_ignore_ascii_case(address.trim()) && i.spec.cluster_name.as_deref() != Some(kkc)
    })
}

/// The hosts of `kkc` a KKMachine with `roles` may try, in inventory order, and the free ones refused because
/// another KKCluster holds their address. A host is taken when any KKInstance claims it.
pub fn choose_hosts<'a, I: Borrow<KKInstance>>(
    kkc: &'a KKCluster,
    roles: &[Role],
    all: &[I],
) -> (Vec<&'a capkk_api::InstanceInfo>, Vec<String>) {
    let kkc_name = kkc.name_any();
    let mut candidates = Vec::new();
    let mut refused = Vec::new();
    for h in kkc
        .spec
        .nodes
        .instances
        .iter()
        .filter(|h| roles.iter().any(|r| r.served_by(&h.roles())))
        .filter(|h| {
            !all.iter()
                .any(|i| claims_host(i.borrow(), &kkc_name, &h.host_name()))
        })
    {
        match address_holder(all, &kkc_name, &h.address) {
            Some(holder) => refused.push(format!(
                "{} ({}) is held by KKInstance {} of KKCluster {}",
                h.host_name(),
                h.address,
                holder.name_any(),
                holder.spec.cluster_name.clone().unwrap_or_default()
            )),
            None => candidates.push(h),
        }
    }
    (candidates, refused)
}

/// True when a KKCluster of `kkclusters` other than `kkc` (same namespace) lists `address`: only then can a
/// claim of another KKCluster compete for it.
pub fn address_listed_elsewhere<I: Borrow<KKCluster>>(
    kkclusters: &[I],
    kkc: &KKCluster,
    address: &str,
) -> bool {
    let address = address.trim();
    kkclusters.iter().map(Borrow::borrow).any(|o: &KKCluster| {
        o.namespace() == kkc.namespace()
            && o.name_any() != kkc.name_any()
            && o.spec
                .nodes
                .instances
                .iter()
                .any(|h| h.address.trim().eq_ignore_ascii_case(address))
    })
}

/// Another claim of the created KKInstance's address (made meanwhile by another KKCluster's machine): the
/// name lock of the create does not cover addresses, so both sides look after creating and the one that
/// sees the other gives up — at most one claim of an address is ever recorded.
///
/// The look is a LIST from the API (a cache could miss the other side's create), but only when another
/// KKCluster lists the address: a competing claim needs one, and with one active manager (leader election)
/// that KKCluster was in the manager's cache before its machine could claim (a KKMachine claims only from a
/// provisioned KKCluster, which its own reconcile read from the same cache). Every other claim skips the LIST.
/// A manager with a watch filter always LISTs: its cache does not show the KKClusters of the managers beside
/// it.
async fn competing_claim(
    ctx: &Context,
    instances: &Api<KKInstance>,
    kkc: &KKCluster,
    created: &KKInstance,
) -> Result<Option<String>> {
    if ctx.settings.watch_filter.is_none()
        && !address_listed_elsewhere(&ctx.stores.clusters.state(), kkc, &created.spec.address)
    {
        return Ok(None);
    }
    let lp = ListParams::default().labels(&format!(
        "{ADDRESS_LABEL}={}",
        address_hash(&created.spec.address)
    ));
    Ok(instances
        .list(&lp)
        .await
        .map_err(Error::kube("list KKInstances by address"))?
        .items
        .into_iter()
        .find(|i| i.uid() != created.uid() && i.spec.address.eq_ignore_ascii_case(&created.spec.address))
        .map(|i| i.name_any()))
}

async fn claim(
    km: &KKMachine,
    label: &mut Option<String>,
    machine: &Machine,
    kkc: &KKCluster,
    secret: &str,
    ctx: &Context,
) -> Result<Claim> {
    let ns = km.namespace().unwrap_or_default();
    let uid = km.uid().unwrap_or_default();
    let kkc_name = kkc.name_any();
    let api: Api<KKMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let instances: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    // From the cache: a claim decided on a stale view is still safe (the create is the lock).
    let all = ctx.stores.instances_in(&ns).await;
    let owned: Vec<&KKInstance> = all
        .iter()
        .map(|i| &**i)
        .filter(|i| controlled_by(i, &uid))
        .collect();

    if let Some(id) = km.spec.instance_id.clone() {
        for stray in owned
            .iter()
            .filter(|i| i.name_any() != id && i.metadata.deletion_timestamp.is_none())
        {
            if !stray.annotations().contains_key(annotations::TOUCHED) {
                release_stray(&instances, stray).await;
            }
        }
        if let Some(i) = owned.iter().find(|i| i.name_any() == id) {
            return Ok(Claim::Held(Box::new((*i).clone()), None));
        }
        if all.iter().any(|i| i.name_any() == id) {
            return Ok(Claim::Waiting {
                reason: reasons::NO_HOST_AVAILABLE.into(),
                message: format!(
                    "KKInstance {id} recorded in spec.instanceID is held by another object (quarantined or claimed elsewhere)"
                ),
                retry: requeue::HOST_HELD_ELSEWHERE,
            });
        }
        // The claim record is gone (e.g. deleted by hand): re-create it for the same host, same name.
        let Some(host) = kkc.spec.nodes.instances.iter().find(|h| {
            let n = h.host_name();
            instance_name(&kkc_name, &n) == id || n == id
        }) else {
            return Ok(Claim::Waiting {
                reason: reasons::INVALID_SPEC.into(),
                message: format!(
                    "KKInstance {id} from spec.instanceID names no host of KKCluster {kkc_name} spec.nodes.instances"
                ),
                retry: requeue::INVALID_CLAIM,
            });
        };
        if let Some(holder) = address_holder(&all, &kkc_name, &host.address) {
            return Ok(Claim::Waiting {
                reason: reasons::ADDRESS_IN_USE.into(),
                message: format!(
                    "address {} of host {} is held by KKInstance {} of KKCluster {}",
                    host.address,
                    host.host_name(),
                    holder.name_any(),
                    holder.spec.cluster_name.clone().unwrap_or_default()
                ),
                retry: requeue::HOST_HELD_ELSEWHERE,
            });
        }
        let inst = new_instance(km, machine, kkc, host, &id, secret);
        return match instances.create(&PostParams::default(), &inst).await {
            Ok(i) => Ok(Claim::Held(Box::new(i), None)),
            Err(e) if is_conflict(&e) => match instances
                .get_opt(&id)
                .await
                .map_err(Error::kube(format!("get KKInstance {ns}/{id}")))?
            {
                // The cache had not seen this KKMachine's own claim yet.
                Some(i) if controlled_by(&i, &uid) => Ok(Claim::Held(Box::new(i), None)),
                _ => Ok(Claim::Waiting {
                    reason: reasons::NO_HOST_AVAILABLE.into(),
                    message: format!("KKInstance {id} was taken by another claim"),
                    retry: requeue::HOST_HELD_ELSEWHERE,
                }),
            },
            Err(e) => Err(Error::kube(format!("re-create claim KKInstance {ns}/{id}"))(e)),
        };
    }

    // A claim made by an earlier reconcile that did not get recorded (crash between the two writes).
    if let Some(i) = owned.iter().find(|i| i.metadata.deletion_timestamp.is_none()) {
        let recorded = record_claim(&api, km, label, i).await?;
        info!(instance = %i.name_any(), "Adopting an unrecorded claim");
        return Ok(Claim::Held(Box::new((*i).clone()), recorded));
    }

    let roles = wanted_roles(km, machine);
    let (candidates, mut refused) = choose_hosts(kkc, &roles, &all);
    let mut in_flight = 0;
    for host in candidates {
        let host_name = host.host_name();
        let name = instance_name(&kkc_name, &host_name);
        let reservation = format!("{ns}/{name}");
        if !ctx.reservations.reserve(&reservation) {
            // Another reconcile of this manager is claiming it (or just did, and the cache does not show it
            // yet): try the next host instead of a create that would only conflict.
            in_flight += 1;
            continue;
        }
        let inst = new_instance(km, machine, kkc, host, &name, secret);
        match instances.create(&PostParams::default(), &inst).await {
            Ok(created) => {
                if let Some(other) = competing_claim(ctx, &instances, kkc, &created).await? {
                    // Given up before recording: nothing touched the host.
                    release_stray(&instances, &created).await;
                    refused.push(format!(
                        "{host_name} ({}) is claimed at the same time by KKInstance {other}",
                        host.address
                    ));
                    continue;
                }
                // On a conflict (the KKMachine changed, possibly another manager recorded a different
                // claim) the created KKInstance stays: the next reconcile either adopts it or, once
                // spec.instanceID (immutable) names another host, deletes it as a stray. It is never worked
                // on unless the KKMachine records it.
                let recorded = record_claim(&api, km, label, &created).await?;
                info!(host = %host_name, instance = %name, "Claimed a host");
                ctx.event(
                    km,
                    false,
                    "HostClaimed",
                    "Claim",
                    format!("claimed host {host_name} ({})", host.address),
                )
                .await;
                return Ok(Claim::Held(Box::new(created), recorded));
            }
            // Taken (by another manager, or the cache is behind): the reservation stays, the host is not free.
            Err(e) if is_conflict(&e) => {
                debug!(host = %host_name, "Host already claimed, trying the next");
                continue;
            }
            Err(e) => {
                ctx.reservations.release(&reservation);
                return Err(Error::kube(format!("create claim KKInstance {ns}/{name}"))(e));
            }
        }
    }
    let roles_s: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
    if in_flight > 0 {
        // Not "no free host": claims of this manager are in flight for the remaining hosts, and one of them
        // may yet fail and free its host.
        return Ok(Claim::Waiting {
            reason: reasons::NO_HOST_AVAILABLE.into(),
            message: format!(
                "no free host with role {} in KKCluster {kkc_name} right now: the {in_flight} left are being claimed by other KKMachines",
                roles_s.join("|"),
            ),
            retry: requeue::CLAIMS_IN_FLIGHT,
        });
    }
    if !refused.is_empty() {
        let message = format!(
            "no free host with role {} in KKCluster {kkc_name}; refused because another KKCluster holds the address: {}",
            roles_s.join("|"),
            refused.join("; ")
        );
        ctx.event(km, true, reasons::ADDRESS_IN_USE, "Claim", message.clone())
            .await;
        return Ok(Claim::Waiting {
            reason: reasons::ADDRESS_IN_USE.into(),
            message,
            retry: requeue::NO_HOST,
        });
    }
    Ok(Claim::Waiting {
        reason: reasons::NO_HOST_AVAILABLE.into(),
        message: format!(
            "no free host with role {} in KKCluster {kkc_name} (every matching host is claimed or quarantined)",
            roles_s.join("|"),
        ),
        retry: requeue::NO_HOST,
    })
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
        if i.metadata.deletion_timestamp.is_none() && !i.annotations().contains_key(annotations::RELEASE) {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = json!({ "metadata": { "annotations": { annotations::RELEASE: now } } });
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

/// Record the workload Node in `KKInstance.status.nodeRef` (its own field manager: the KKInstance
/// reconciler does not own that field).
async fn record_node_ref(ctx: &Context, inst: &KKInstance, node: &Node) -> Result<()> {
    if inst
        .status
        .as_ref()
        .and_then(|s| s.node_ref.as_ref())
        .is_some_and(|r| r.name.as_deref() == Some(node.name_any().as_str()) && r.uid == node.uid())
    {
        return Ok(());
    }
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
    let node_ref = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.name_any()),
        uid: node.uid(),
        ..Default::default()
    };
    apply_status(
        &api,
        &inst.name_any(),
        &json!({ "nodeRef": node_ref }),
        NODE_REF_FIELD_MANAGER,
    )
    .await
}

/// Patch `spec.providerID` of the workload Node of `inst` (matched by name, then by address) through the
/// cached client of the `<cluster>-kubeconfig` Secret. Returns the Node once it carries the ID.
pub async fn patch_node_provider_id(
    ctx: &Context,
    ns: &str,
    cluster: &str,
    inst: &KKInstance,
) -> Result<Option<Node>> {
    let werr = |m: String| Error::WorkloadCluster {
        cluster: cluster.to_owned(),
        message: m,
    };
    let Some(pid) = inst.spec.provider_id.clone() else {
        return Ok(None);
    };
    let (machines, tx) = (ctx.stores.machines.clone(), ctx.triggers.machines.clone());
    let (wns, wcluster) = (ns.to_owned(), cluster.to_owned());
    let wake: crate::workload::Wake = Arc::new(move |node: &Node| {
        for r in crate::workload::node_to_kkmachines(&machines.state(), &wns, &wcluster, node) {
            debug!(node = %node.name_any(), kkmachine = %r.name, "Workload Node registered: waking its KKMachine");
            let _ = tx.unbounded_send(r);
        }
    });
    let Some(wc) = ctx.workloads.client(&ctx.client, ns, cluster, wake).await? else {
        return Ok(None);
    };
    let nodes: Api<Node> = Api::all(wc);
    let node = match nodes
        .get_opt(&inst.spec.name)
        .await
        .map_err(|e| werr(format!("get Node: {e}")))?
    {
        Some(n) => Some(n),
        None => {
            let addrs = [
                inst.spec.address.clone(),
                inst.spec.internal_address.clone().unwrap_or_default(),
            ];
            nodes
                .list(&ListParams::default())
                .await
                .map_err(|e| werr(format!("list Nodes: {e}")))?
                .items
                .into_iter()
                .find(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.addresses.as_ref())
                        .is_some_and(|a| {
                            a.iter()
                                .any(|x| x.type_ == "InternalIP" && addrs.contains(&x.address))
                        })
                })
        }
    };
    let Some(node) = node else { return Ok(None) };
    match node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .filter(|p| !p.is_empty())
    {
        Some(p) if p == pid => Ok(Some(node)),
        Some(p) => Err(werr(format!(
            "Node {} already has providerID {p}, expected {pid}",
            node.name_any()
        ))),
        None => {
            let patch = json!({ "spec": { "providerID": pid } });
            nodes
                .patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| werr(format!("patch Node {}: {e}", node.name_any())))?;
            Ok(Some(node))
        }
    }
}

/// The KKMachines of a KKCluster's Cluster (by CAPI's cluster-name label), for the KKCluster watch.
pub fn of_kkcluster(
    kkms: &[Arc<KKMachine>],
    kkc: &KKCluster,
) -> Vec<kube::runtime::reflector::ObjectRef<KKMachine>> {
    let cluster = capi_owner(&kkc.metadata, "Cluster")
        .map(|o| o.name.clone())
        .or_else(|| kkc.labels().get(CLUSTER_NAME_LABEL).cloned());
    let Some(cluster) = cluster else {
        return Vec::new();
    };
    kkms.iter()
        .filter(|m| {
            m.namespace() == kkc.namespace()
                && (m.labels().get(CLUSTER_NAME_LABEL) == Some(&cluster)
                    || m.labels().get(KKCLUSTER_NAME_LABEL) == Some(&kkc.name_any()))
        })
        .map(|m| kube::runtime::reflector::ObjectRef::from_obj(&**m))
        .collect()
}

/// What of a KKCluster its KKMachines wait for: its spec (inventory) and whether it is provisioned (the
/// KKCluster watch's predicate; probe results and other status changes wake no KKMachine).
pub fn kkcluster_wakes_machines(k: &KKCluster) -> Option<u64> {
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
pub fn machine_to_kkmachine(m: Machine) -> Option<kube::runtime::reflector::ObjectRef<KKMachine>> {
    let r = m.spec.infrastructure_ref.as_ref().filter(|r| r.is("KKMachine"))?;
    Some(kube::runtime::reflector::ObjectRef::new(&r.name).within(&m.namespace()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capkk_api::{Auth, InstanceInfo, KKClusterSpec, KKInstanceStatus, Nodes};
    use k8s_openapi::{
        apimachinery::pkg::apis::meta::v1::{Condition, Time},
        jiff::Timestamp,
    };

    fn host(name: &str, addr: &str) -> InstanceInfo {
        InstanceInfo {
            name: Some(name.to_owned()).filter(|n| !n.is_empty()),
            address: addr.into(),
            ..Default::default()
        }
    }

    fn kkc(name: &str, hosts: Vec<InstanceInfo>) -> KKCluster {
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

    fn claim_of(kkc: &str, host: &str, addr: &str) -> KKInstance {
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

    fn cond(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("{type_} {reason}"),
            observed_generation: Some(1),
            last_transition_time: Time(Timestamp::now()),
        }
    }

    #[test]
    fn claims_are_named_by_kkcluster_and_host() {
        assert_eq!(instance_name("a", "node1"), "a.node1");
        assert_ne!(instance_name("a", "node1"), instance_name("b", "node1"));
        let long = "k".repeat(250);
        let n = instance_name(&long, "node1");
        assert!(n.len() <= 253, "{}", n.len());
        assert!(n.ends_with(".node1"));
        assert_ne!(n, instance_name(&format!("{}x", &long[..249]), "node1"));
    }

    #[test]
    fn a_host_without_a_name_is_claimed_under_the_name_derived_from_its_address() {
        let a = kkc("a", vec![host("", "192.168.100.3")]);
        let (candidates, _) = choose_hosts::<KKInstance>(&a, &[Role::Worker], &[]);
        assert_eq!(candidates.len(), 1);
        let h = candidates[0];
        let name = instance_name("a", &h.host_name());
        assert_eq!(name, "a.192-168-100-3");
        let km = KKMachine::new("m", Default::default());
        let inst = new_instance(&km, &Machine::new("m", Default::default()), &a, h, &name, "s");
        assert_eq!(inst.metadata.name.as_deref(), Some("a.192-168-100-3"));
        // The hostname and so the Node name, and the providerID the Node carries.
        assert_eq!(inst.spec.name, "192-168-100-3");
        assert_eq!(inst.spec.provider_id.as_deref(), Some("kk:///a/192-168-100-3"));
        // Taken once claimed: the claim is found again by the derived name.
        let claim = claim_of("a", "192-168-100-3", "192.168.100.3");
        assert!(choose_hosts(&a, &[Role::Worker], &[claim]).0.is_empty());
        // The user's spec is not rewritten.
        assert_eq!(a.spec.nodes.instances[0].name, None);
    }

    #[test]
    fn host_choice_skips_taken_hosts_and_refuses_addresses_of_other_kkclusters() {
        let a = kkc(
            "a",
            vec![
                host("node1", "10.0.0.1"),
                host("node2", "10.0.0.2"),
                host("node3", "10.0.0.3"),
            ],
        );
        let all = vec![
            // node1 of KKCluster a is taken; b's node1 is another host.
            claim_of("a", "node1", "10.0.0.1"),
            claim_of("b", "node1", "10.0.1.1"),
            // b holds node3's address.
            claim_of("b", "x", "10.0.0.3"),
        ];
        let (candidates, refused) = choose_hosts(&a, &[Role::Worker], &all);
        let names: Vec<String> = candidates.iter().map(|h| h.host_name()).collect();
        assert_eq!(names, ["node2"]);
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0].contains("10.0.0.3") && refused[0].contains("b.x"),
            "{}",
            refused[0]
        );
    }

    #[test]
    fn the_claim_record_carries_the_missing_kkcluster_label_and_the_resource_version_guard() {
        let inst = claim_of("a", "node1", "10.0.0.1");
        let p = claim_record(&inst, Some("42"), Some("a"));
        assert_eq!(p["spec"]["instanceID"], "a.node1");
        assert_eq!(p["spec"]["providerID"], "kk:///a/node1");
        assert_eq!(p["metadata"]["resourceVersion"], "42");
        assert_eq!(p["metadata"]["labels"][KKCLUSTER_NAME_LABEL], "a");
        let p = claim_record(&inst, Some("42"), None);
        assert!(
            p["metadata"].get("labels").is_none(),
            "a label already set is not written again: {p}"
        );
        let p = claim_record(&inst, None, None);
        assert!(p.get("metadata").is_none(), "{p}");
    }

    #[test]
    fn only_an_address_another_kkcluster_of_the_namespace_lists_can_be_claimed_concurrently() {
        let mut a = kkc("a", vec![host("node1", "10.0.0.1"), host("node2", "10.0.0.2")]);
        let mut b = kkc("b", vec![host("x", " 10.0.0.2 ")]);
        let mut c = kkc("c", vec![host("y", "10.0.0.1")]);
        a.metadata.namespace = Some("ns".into());
        b.metadata.namespace = Some("ns".into());
        c.metadata.namespace = Some("other".into());
        let all = [a.clone(), b, c];
        assert!(address_listed_elsewhere(&all, &a, "10.0.0.2"));
        assert!(
            !address_listed_elsewhere(&all, &a, "10.0.0.1"),
            "its own listing and another namespace's do not count"
        );
        let mut named = kkc("d", vec![host("z", "Node.Example")]);
        named.metadata.namespace = Some("ns".into());
        assert!(address_listed_elsewhere(&[named], &a, "node.example"));
    }

    #[test]
    fn host_choice_honours_roles_and_legacy_claim_names() {
        let mut cp = host("cp", "10.0.0.1");
        cp.roles = Some(vec![Role::ControlPlane]);
        let a = kkc("a", vec![cp, host("w", "10.0.0.2")]);
        // A claim from before 0.2 is named after the bare host.
        let mut legacy = claim_of("a", "w", "10.0.0.2");
        legacy.metadata.name = Some("w".into());
        let (candidates, refused) = choose_hosts(&a, &[Role::ControlPlane], &[legacy.clone()]);
        assert_eq!(candidates.len(), 1);
        assert_eq!(candidates[0].host_name(), "cp");
        assert!(refused.is_empty());
        let (candidates, _) = choose_hosts(&a, &[Role::Worker], &[legacy]);
        // `cp` defaults to no worker role here; `w` is taken by the legacy claim.
        assert!(candidates.iter().all(|h| h.host_name() != "w"));
    }

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

    #[test]
    fn a_dns_address_is_reported_as_external_dns() {
        let mut i = claim_of("a", "n", "node.example.com");
        i.spec.internal_address = Some("10.0.0.5".into());
        let types: Vec<(String, String)> = addresses(&i).into_iter().map(|a| (a.type_, a.address)).collect();
        assert_eq!(
            types,
            [
                ("InternalIP".to_owned(), "10.0.0.5".to_owned()),
                ("ExternalDNS".to_owned(), "node.example.com".to_owned()),
                ("Hostname".to_owned(), "n".to_owned()),
            ]
        );
        let ip = claim_of("a", "n", "10.0.0.6");
        assert!(
            addresses(&ip)
                .iter()
                .any(|a| a.type_ == "ExternalIP" && a.address == "10.0.0.6")
        );
    }

    #[test]
    fn provisioned_is_reported_before_the_workload_node_is_looked_for() {
        let provisioned = KKMachineStatus {
            initialization: Some(capkk_api::Initialization {
                provisioned: Some(true),
            }),
            ..Default::default()
        };
        let pending = KKMachineStatus::default();
        assert!(newly_provisioned(None, &provisioned));
        assert!(newly_provisioned(Some(&pending), &provisioned));
        assert!(
            !newly_provisioned(Some(&provisioned), &provisioned),
            "reported already: now the Node"
        );
        assert!(!newly_provisioned(Some(&pending), &pending));
    }

    #[test]
    fn mirror_maps_the_instance_state_to_the_machine_phase() {
        let cases = [
            (None, vec![], MachinePhase::Claimed),
            (Some(InstanceState::Pending), vec![], MachinePhase::Claimed),
            (
                Some(InstanceState::Bootstrapping),
                vec![],
                MachinePhase::Provisioning,
            ),
            (
                Some(InstanceState::Failed),
                vec![cond(cond::READY, "False", reasons::COMMAND_FAILED)],
                MachinePhase::Failed,
            ),
            (Some(InstanceState::Quarantined), vec![], MachinePhase::Failed),
            (
                Some(InstanceState::Running),
                vec![
                    cond(cond::PROVISIONED, "True", reasons::READY),
                    cond(cond::READY, "True", reasons::READY),
                ],
                MachinePhase::Provisioned,
            ),
        ];
        for (state, conds, want) in cases {
            let mut i = claim_of("a", "n", "10.0.0.1");
            i.status = Some(KKInstanceStatus {
                state,
                conditions: conds,
                ..Default::default()
            });
            let mut st = KKMachineStatus::default();
            mirror(&mut st, &i, Some(1));
            assert_eq!(st.phase, Some(want), "{state:?}");
        }
    }

    #[test]
    fn a_moved_host_reports_provisioned_again_from_its_annotations() {
        // After `clusterctl move` neither status exists; the KKInstance's annotations say every phase ran.
        let mut i = claim_of("a", "n", "10.0.0.1");
        i.metadata.annotations = Some(
            [(
                annotations::COMPLETED_PHASES.to_owned(),
                "bootstrap,repository,binary,containermanager,provisioning".to_owned(),
            )]
            .into(),
        );
        let state = crate::kkinstance::classify(&i, crate::kkinstance::ClaimRecord::Recorded, None);
        assert_eq!(state, crate::kkinstance::HostState::Provisioned);
        i.status = Some(KKInstanceStatus {
            state: Some(state.reported(&i)),
            conditions: vec![cond(cond::READY, "True", reasons::READY)],
            ..Default::default()
        });
        let mut st = KKMachineStatus::default();
        mirror(&mut st, &i, Some(1));
        assert_eq!(st.initialization.as_ref().and_then(|x| x.provisioned), Some(true));
        assert_eq!(st.phase, Some(MachinePhase::Provisioned));
        assert!(conditions::is_true(&st.conditions, cond::READY));
    }

    #[test]
    fn mirror_copies_a_terminal_failure_and_provisioned_sets_the_contract_fields() {
        let mut i = claim_of("a", "n", "10.0.0.1");
        i.status = Some(KKInstanceStatus {
            state: Some(InstanceState::Failed),
            conditions: vec![cond(cond::READY, "False", reasons::COMMAND_FAILED)],
            ..Default::default()
        });
        let mut st = KKMachineStatus::default();
        mirror(&mut st, &i, Some(1));
        let ir = conditions::get(&st.conditions, cond::INSTANCE_READY).unwrap();
        assert_eq!(
            (ir.status.as_str(), ir.reason.as_str()),
            ("False", reasons::COMMAND_FAILED)
        );
        assert!(!conditions::is_true(&st.conditions, cond::READY));
        assert!(st.initialization.is_none() && st.addresses.is_empty());

        i.status = Some(KKInstanceStatus {
            state: Some(InstanceState::Running),
            conditions: vec![
                cond(cond::PROVISIONED, "True", reasons::READY),
                cond(cond::READY, "True", reasons::READY),
            ],
            ..Default::default()
        });
        mirror(&mut st, &i, Some(1));
        assert_eq!(st.initialization.as_ref().and_then(|x| x.provisioned), Some(true));
        assert!(conditions::is_true(&st.conditions, cond::READY));
        assert_eq!(st.addresses.len(), 3);
    }
}
