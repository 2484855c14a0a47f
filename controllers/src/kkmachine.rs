//! KKMachine reconciler: the InfraMachine contract. Claims a host by creating its KKInstance (AlreadyExists
//! means taken), records the claim in the spec, mirrors the KKInstance's progress and patches the workload
//! Node's providerID.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use capkk_api::{
    KKCluster, KKInstance, KKInstanceSpec, KKMachine, KKMachineStatus, MachineAddress, Role, SecretRef,
    consts::{
        CLUSTER_NAME_LABEL, KKCLUSTER_NAME_LABEL, KKMACHINE_FINALIZER, WATCH_FILTER_LABEL,
        conditions as cond, reasons,
    },
};
use k8s_openapi::{
    api::core::v1::{Node, Secret},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{controller::Action, finalizer, finalizer::Event},
};
use serde_json::json;
use tracing::{debug, info, instrument, warn};

use crate::{
    annotations,
    capi::{CONTROL_PLANE_LABEL, Cluster, Machine, capi_owner},
    conditions,
    context::{Context, externally_managed, paused_annotation},
    error::{Error, Result, is_conflict},
    hosts,
};

const KIND: &str = "KKMachine";

/// CAPKK's provider ID form.
pub fn provider_id(kkcluster: &str, instance: &str) -> String {
    format!("kk:///{kkcluster}/{instance}")
}

/// Reconcile one KKMachine.
#[instrument(skip_all, fields(kkmachine = %obj.name_any(), ns = obj.namespace().unwrap_or_default()))]
pub async fn reconcile(obj: Arc<KKMachine>, ctx: Arc<Context>) -> Result<Action> {
    let start = std::time::Instant::now();
    let res = reconcile_inner(obj, &ctx).await;
    ctx.metrics.reconciled(KIND, start.elapsed());
    res
}

/// Requeue with backoff on errors.
pub fn error_policy(obj: Arc<KKMachine>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = format!("kkm/{}", obj.uid().unwrap_or_default());
    ctx.requeue_after_error(KIND, &key, &obj.name_any(), err)
}

async fn reconcile_inner(obj: Arc<KKMachine>, ctx: &Context) -> Result<Action> {
    if !ctx.passes_filter(&*obj) {
        return Ok(Action::await_change());
    }
    if externally_managed(&*obj) {
        debug!("externally managed, skipping");
        return Ok(Action::await_change());
    }
    let ns = obj.namespace().unwrap_or_default();
    let Some(owner) = capi_owner(&obj.metadata, "Machine").cloned() else {
        info!("waiting for the owner Machine to set its ownerReference");
        return Ok(Action::await_change());
    };
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(machine) = machines
        .get_opt(&owner.name)
        .await
        .map_err(Error::kube(format!("get Machine {ns}/{}", owner.name)))?
    else {
        info!(machine = %owner.name, "owner Machine not found");
        return Ok(Action::requeue(Duration::from_secs(10)));
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
    let clusters: Api<Cluster> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cluster) = clusters
        .get_opt(&cluster_name)
        .await
        .map_err(Error::kube(format!("get Cluster {ns}/{cluster_name}")))?
    else {
        info!(cluster = %cluster_name, "Cluster not found");
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    let api: Api<KKMachine> = Api::namespaced(ctx.client.clone(), &ns);
    if cluster.spec.paused == Some(true) || paused_annotation(&*obj) {
        info!("paused");
        let mut status = obj.status.clone().unwrap_or_default();
        conditions::set(
            &mut status.conditions,
            cond::PAUSED,
            true,
            reasons::PAUSED,
            "",
            obj.metadata.generation,
        );
        write_status(&api, &obj, status, ctx).await?;
        return Ok(Action::await_change());
    }
    let uid = obj.uid().unwrap_or_default();
    let res = finalizer(&api, KKMACHINE_FINALIZER, obj, |ev| async {
        match ev {
            Event::Apply(o) => apply(o, &machine, &cluster, ctx).await,
            Event::Cleanup(o) => cleanup(o, ctx).await,
        }
    })
    .await
    .map_err(Error::from)?;
    ctx.tasks.succeeded(&format!("kkm/{uid}"));
    Ok(res)
}

async fn write_status(
    api: &Api<KKMachine>,
    obj: &KKMachine,
    status: KKMachineStatus,
    ctx: &Context,
) -> Result<()> {
    let old = obj.status.clone().unwrap_or_default();
    if conditions::same(&old.conditions, &status.conditions)
        && old.addresses == status.addresses
        && old.initialization == status.initialization
        && old.phase == status.phase
        && old.step == status.step
        && old.observed_generation == status.observed_generation
    {
        return Ok(());
    }
    let patch = json!({ "status": status });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::apply(&ctx.settings.field_manager),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube(format!("patch KKMachine {} status", obj.name_any())))?;
    Ok(())
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

#[allow(clippy::too_many_arguments)]
async fn apply(km: Arc<KKMachine>, machine: &Machine, cluster: &Cluster, ctx: &Context) -> Result<Action> {
    let ns = km.namespace().unwrap_or_default();
    let name = km.name_any();
    let gen_ = km.metadata.generation;
    let api: Api<KKMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let mut status = km.status.clone().unwrap_or_default();
    conditions::set(
        &mut status.conditions,
        cond::PAUSED,
        false,
        reasons::NOT_PAUSED,
        "",
        gen_,
    );
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
        write_status(&api, &km, status, ctx).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let kkcs: Api<KKCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let kkc = kkcs
        .get_opt(&infra.name)
        .await
        .map_err(Error::kube(format!("get KKCluster {ns}/{}", infra.name)))?;
    let provisioned = kkc
        .as_ref()
        .and_then(|k| k.status.as_ref())
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.provisioned)
        == Some(true);
    let Some(kkc) = kkc.filter(|_| provisioned) else {
        info!(kkcluster = %infra.name, "waiting for the cluster infrastructure");
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!("KKCluster {} is not provisioned yet", infra.name),
            gen_,
        );
        status.phase.get_or_insert_with(|| "Pending".into());
        write_status(&api, &km, status, ctx).await?;
        return Ok(Action::requeue(Duration::from_secs(15)));
    };

    // Labels used by the KKCluster's deletion and by CAPI.
    let mut rv = km.resource_version();
    if km.labels().get(KKCLUSTER_NAME_LABEL) != Some(&kkc.name_any()) {
        let patch = json!({ "metadata": { "labels": { KKCLUSTER_NAME_LABEL: kkc.name_any() } } });
        let updated = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube(format!("label KKMachine {name}")))?;
        rv = updated.resource_version();
    }

    let Some(secret_name) = machine
        .spec
        .bootstrap
        .data_secret_name
        .clone()
        .filter(|s| !s.is_empty())
    else {
        info!("waiting for Machine.spec.bootstrap.dataSecretName");
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            "waiting for the bootstrap provider to set Machine.spec.bootstrap.dataSecretName",
            gen_,
        );
        status.phase.get_or_insert_with(|| "Pending".into());
        write_status(&api, &km, status, ctx).await?;
        return Ok(Action::await_change());
    };

    let claim = claim(&km, rv, machine, &kkc, &secret_name, ctx).await?;
    let inst = match claim {
        Claim::Held(i) => i,
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
            status.phase = Some("Pending".into());
            write_status(&api, &km, status, ctx).await?;
            return Ok(Action::requeue(retry));
        }
    };
    mirror(&mut status, &inst, gen_);
    let done = status.initialization.as_ref().and_then(|i| i.provisioned) == Some(true);
    write_status(&api, &km, status, ctx).await?;

    if done
        && machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .is_none()
    {
        if !ctx.throttle(
            &format!("node/{}", km.uid().unwrap_or_default()),
            Duration::from_secs(15),
        ) {
            return Ok(Action::requeue(Duration::from_secs(15)));
        }
        let cluster_name = cluster.name_any();
        match tokio::time::timeout(
            ctx.settings.workload_timeout,
            patch_node_provider_id(&ctx.client, &ns, &cluster_name, &inst),
        )
        .await
        {
            Ok(Ok(true)) => info!(node = %inst.spec.name, "workload Node carries the providerID"),
            Ok(Ok(false)) => debug!(node = %inst.spec.name, "workload Node not registered yet"),
            Ok(Err(e)) => debug!(error = %e, "workload cluster not reachable yet"),
            Err(_) => debug!("workload cluster did not answer in time"),
        }
        return Ok(Action::requeue(Duration::from_secs(20)));
    }
    if done {
        Ok(Action::requeue(Duration::from_secs(600)))
    } else {
        Ok(Action::requeue(Duration::from_secs(30)))
    }
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
    let provisioned = conditions::is_true(&ist.conditions, cond::PROVISIONED)
        || status.initialization.as_ref().and_then(|i| i.provisioned) == Some(true);
    if provisioned {
        status.initialization = Some(capkk_api::Initialization {
            provisioned: Some(true),
        });
        let mut addrs = vec![MachineAddress {
            type_: "InternalIP".into(),
            address: inst
                .spec
                .internal_address
                .clone()
                .unwrap_or_else(|| inst.spec.address.clone()),
        }];
        addrs.push(MachineAddress {
            type_: "ExternalIP".into(),
            address: inst.spec.address.clone(),
        });
        addrs.push(MachineAddress {
            type_: "Hostname".into(),
            address: inst.spec.name.clone(),
        });
        addrs.dedup();
        status.addresses = addrs;
    }
    status.step = ist.step.clone();
    let state = ist.state.clone().unwrap_or_default();
    status.phase = Some(
        match (provisioned, state.as_str()) {
            (_, "quarantined") => "Failed",
            (_, "failed") => "Failed",
            (true, _) => "Provisioned",
            (false, "") | (false, "pending") => "Claimed",
            (false, _) => "Provisioning",
        }
        .into(),
    );
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
    /// This KKMachine holds the KKInstance.
    Held(Box<KKInstance>),
    /// No host (yet).
    Waiting {
        /// Condition reason.
        reason: String,
        /// Condition message.
        message: String,
        /// Retry after.
        retry: Duration,
    },
}

fn new_instance(
    km: &KKMachine,
    machine: &Machine,
    kkc: &KKCluster,
    host: &capkk_api::InstanceInfo,
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
            name: Some(host.name.clone()),
            namespace: Some(ns),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: KKInstanceSpec {
            name: host.name.clone(),
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
            provider_id: Some(provider_id(&kkc.name_any(), &host.name)),
            container_manager: Some(km.spec.container_manager.clone()),
            repository: km.spec.repository.clone(),
            quarantine: None,
        },
        status: None,
    }
}

async fn record_claim(
    api: &Api<KKMachine>,
    km: &KKMachine,
    rv: Option<String>,
    kkc: &str,
    host: &str,
) -> Result<()> {
    let mut patch = json!({ "spec": { "instanceID": host, "providerID": provider_id(kkc, host) } });
    if let Some(rv) = rv {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    api.patch(&km.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(format!(
            "record claim of host {host} in KKMachine {}",
            km.name_any()
        )))?;
    Ok(())
}

async fn release_stray(instances: &Api<KKInstance>, i: &KKInstance) {
    // A claim this KKMachine made but did not record (lost a race): nothing ran on the host yet. Only called
    // once spec.instanceID (immutable) names another host, so the stray can never become the recorded one.
    if let Err(e) = instances.delete(&i.name_any(), &DeleteParams::default()).await {
        warn!(instance = %i.name_any(), error = %e, "deleting an unrecorded claim failed");
    }
}

async fn claim(
    km: &KKMachine,
    rv: Option<String>,
    machine: &Machine,
    kkc: &KKCluster,
    secret: &str,
    ctx: &Context,
) -> Result<Claim> {
    let ns = km.namespace().unwrap_or_default();
    let uid = km.uid().unwrap_or_default();
    let api: Api<KKMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let instances: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let all = instances
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("list KKInstances"))?
        .items;
    let owned: Vec<&KKInstance> = all.iter().filter(|i| controlled_by(i, &uid)).collect();

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
            return Ok(Claim::Held(Box::new((*i).clone())));
        }
        if all.iter().any(|i| i.name_any() == id) {
            return Ok(Claim::Waiting {
                reason: reasons::NO_HOST_AVAILABLE.into(),
                message: format!(
                    "host {id} recorded in spec.instanceID is held by another object (quarantined or claimed elsewhere)"
                ),
                retry: Duration::from_secs(30),
            });
        }
        // The claim record is gone (e.g. deleted by hand): re-create it for the same host.
        let Some(host) = kkc.spec.nodes.instances.iter().find(|h| h.name == id) else {
            return Ok(Claim::Waiting {
                reason: reasons::INVALID_SPEC.into(),
                message: format!(
                    "host {id} from spec.instanceID is not in KKCluster {} spec.nodes.instances",
                    kkc.name_any()
                ),
                retry: Duration::from_secs(60),
            });
        };
        let inst = new_instance(km, machine, kkc, host, secret);
        return match instances.create(&PostParams::default(), &inst).await {
            Ok(i) => Ok(Claim::Held(Box::new(i))),
            Err(e) if is_conflict(&e) => Ok(Claim::Waiting {
                reason: reasons::NO_HOST_AVAILABLE.into(),
                message: format!("host {id} was taken by another claim"),
                retry: Duration::from_secs(30),
            }),
            Err(e) => Err(Error::kube(format!("re-create claim KKInstance {ns}/{id}"))(e)),
        };
    }

    // A claim made by an earlier reconcile that did not get recorded (crash between the two writes).
    if let Some(i) = owned.iter().find(|i| i.metadata.deletion_timestamp.is_none()) {
        record_claim(&api, km, rv, &kkc.name_any(), &i.name_any()).await?;
        info!(host = %i.name_any(), "adopted an unrecorded claim");
        return Ok(Claim::Held(Box::new((*i).clone())));
    }

    let roles = wanted_roles(km, machine);
    let taken: std::collections::HashSet<String> = all.iter().map(|i| i.name_any()).collect();
    let candidates: Vec<&capkk_api::InstanceInfo> = kkc
        .spec
        .nodes
        .instances
        .iter()
        .filter(|h| roles.iter().any(|r| r.served_by(&h.roles())))
        .filter(|h| !taken.contains(&h.name))
        .collect();
    for host in candidates {
        let inst = new_instance(km, machine, kkc, host, secret);
        match instances.create(&PostParams::default(), &inst).await {
            Ok(created) => {
                // On a conflict (the KKMachine changed, possibly another manager recorded a different
                // claim) the created KKInstance stays: the next reconcile either adopts it or, once
                // spec.instanceID (immutable) names another host, deletes it as a stray. It is never worked
                // on unless the KKMachine records it.
                record_claim(&api, km, rv.clone(), &kkc.name_any(), &host.name).await?;
                info!(host = %host.name, "claimed host");
                ctx.event(
                    km,
                    false,
                    "HostClaimed",
                    "Claim",
                    format!("claimed host {} ({})", host.name, host.address),
                )
                .await;
                return Ok(Claim::Held(Box::new(created)));
            }
            Err(e) if is_conflict(&e) => {
                debug!(host = %host.name, "host already claimed, trying the next");
                continue;
            }
            Err(e) => return Err(Error::kube(format!("create claim KKInstance {ns}/{}", host.name))(e)),
        }
    }
    let roles_s: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
    Ok(Claim::Waiting {
        reason: reasons::NO_HOST_AVAILABLE.into(),
        message: format!(
            "no free host with role {} in KKCluster {} (every matching host is claimed or quarantined)",
            roles_s.join("|"),
            kkc.name_any()
        ),
        retry: Duration::from_secs(15),
    })
}

async fn cleanup(km: Arc<KKMachine>, ctx: &Context) -> Result<Action> {
    let ns = km.namespace().unwrap_or_default();
    let uid = km.uid().unwrap_or_default();
    let api: Api<KKMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let instances: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let owned: Vec<KKInstance> = instances
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("list KKInstances"))?
        .items
        .into_iter()
        .filter(|i| controlled_by(i, &uid))
        .collect();
    if owned.is_empty() {
        info!("no host held; removing finalizer");
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
            info!(host = %i.name_any(), "asked the KKInstance to reset and free its host");
            ctx.trigger_instance(&i.name_any(), &ns);
        }
    }
    let names: Vec<String> = owned.iter().map(|i| i.name_any()).collect();
    let mut status = km.status.clone().unwrap_or_default();
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
    status.phase = Some("Deleting".into());
    status.step = step;
    write_status(&api, &km, status, ctx).await?;
    Err(Error::pending(
        format!("hosts {names:?} to be reset and freed"),
        Duration::from_secs(5),
    ))
}

/// Patch `spec.providerID` of the workload Node of `inst` (matched by name, then by address) through the
/// `<cluster>-kubeconfig` Secret. Returns true once the Node carries the ID.
pub async fn patch_node_provider_id(
    client: &Client,
    ns: &str,
    cluster: &str,
    inst: &KKInstance,
) -> Result<bool> {
    let werr = |m: String| Error::WorkloadCluster {
        cluster: cluster.to_owned(),
        message: m,
    };
    let Some(pid) = inst.spec.provider_id.clone() else {
        return Ok(false);
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let name = format!("{cluster}-kubeconfig");
    let Some(secret) = secrets
        .get_opt(&name)
        .await
        .map_err(Error::kube(format!("get Secret {ns}/{name}")))?
    else {
        return Ok(false);
    };
    let Some(value) = secret.data.as_ref().and_then(|d| d.get("value")) else {
        return Err(werr(format!("Secret {name} has no key `value`")));
    };
    let text = String::from_utf8(value.0.clone())
        .map_err(|_| werr(format!("Secret {name} `value` is not UTF-8")))?;
    let kubeconfig = Kubeconfig::from_yaml(&text).map_err(|e| werr(format!("parsing kubeconfig: {e}")))?;
    crate::workload_kubeconfig::check(&kubeconfig).map_err(|e| werr(format!("Secret {name}: {e}")))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| werr(format!("kubeconfig: {e}")))?;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(10));
    let wc = Client::try_from(config).map_err(|e| werr(format!("client: {e}")))?;
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
    let Some(node) = node else { return Ok(false) };
    match node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .filter(|p| !p.is_empty())
    {
        Some(p) if p == pid => Ok(true),
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
            Ok(true)
        }
    }
}

/// The KKMachine a Machine points at (for the Machine watch).
pub fn machine_to_kkmachine(m: Machine) -> Option<kube::runtime::reflector::ObjectRef<KKMachine>> {
    let r = m.spec.infrastructure_ref.as_ref().filter(|r| r.is("KKMachine"))?;
    Some(kube::runtime::reflector::ObjectRef::new(&r.name).within(&m.namespace()?))
}
