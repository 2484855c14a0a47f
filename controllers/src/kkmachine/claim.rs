//! The claim: a KKMachine takes a host by creating its KKInstance `<kkcluster>.<host>` (the apiserver's
//! AlreadyExists makes the create a lock across managers), then records the KKInstance in its spec. Three
//! paths: a recorded claim is kept (or re-created under its name), an unrecorded one of an earlier
//! reconcile is adopted, else a free host of the KKCluster is claimed.

use std::collections::BTreeMap;

use capkk_api::{
    InstanceInfo, KKCluster, KKInstance, KKInstanceSpec, KKMachine, Role, SecretRef,
    consts::{
        ADDRESS_HASH_LABEL, CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, KKCLUSTER_NAME_LABEL,
        KKINSTANCE_FINALIZER, TOUCHED_ANNOTATION, WATCH_FILTER_LABEL, reasons,
    },
    names::{address_hash, instance_name, provider_id},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use tracing::{debug, info, warn};

use super::choice::{address_holder, address_listed_elsewhere, choose_hosts, wanted_roles};
use crate::{
    capi::Machine,
    context::Context,
    error::{Error, Result, is_conflict},
    hosts,
    machine_host::controlled_by,
    object_name::ObjectName,
    reconcile::requeue,
};

/// The result of trying to claim a host.
pub(crate) enum Claim {
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

/// Claim a host for `km` from `kkc` (the pending KKCluster label rides along with a new claim record).
pub(crate) async fn claim(
    km: &KKMachine,
    label: &mut Option<String>,
    machine: &Machine,
    kkc: &KKCluster,
    secret: Option<&str>,
    ctx: &Context,
) -> Result<Claim> {
    let ns = km.namespace().unwrap_or_default();
    let claimant = Claimant {
        km,
        machine,
        kkc,
        secret,
        ctx,
        kkc_name: kkc.name_any(),
        uid: km.uid().unwrap_or_default(),
        machines: Api::namespaced(ctx.client.clone(), &ns),
        instances: Api::namespaced(ctx.client.clone(), &ns),
        ns,
    };
    // From the cache: a claim decided on a stale view is still safe (the create is the lock).
    let all = ctx.stores.instances_in(&claimant.ns).await;
    let owned: Vec<&KKInstance> = all
        .iter()
        .map(|i| &**i)
        .filter(|i| controlled_by(i, &claimant.uid))
        .collect();

    if let Some(id) = km.spec.instance_id.as_deref() {
        // The KKInstance is read (and re-created) under this name.
        let id = ObjectName::checked("KKMachine.spec.instanceID", id)?;
        return claimant.recorded(id, &all, &owned).await;
    }
    // A claim made by an earlier reconcile that did not get recorded (crash between the two writes).
    if let Some(i) = owned.iter().find(|i| i.metadata.deletion_timestamp.is_none()) {
        let recorded = record_claim(&claimant.machines, km, label, i).await?;
        info!(instance = %i.name_any(), "Adopting an unrecorded claim");
        return Ok(Claim::Held(Box::new((*i).clone()), recorded));
    }
    claimant.free_host(label, &all).await
}

/// What every path of [`claim`] reads.
struct Claimant<'a> {
    km: &'a KKMachine,
    machine: &'a Machine,
    kkc: &'a KKCluster,
    /// The bootstrap data Secret; `None` while the host is claimed to be prepared before it exists.
    secret: Option<&'a str>,
    ctx: &'a Context,
    ns: String,
    uid: String,
    kkc_name: String,
    machines: Api<KKMachine>,
    instances: Api<KKInstance>,
}

impl Claimant<'_> {
    /// The claim recorded in `spec.instanceID` (`id`): strays of this KKMachine are deleted, the recorded
    /// KKInstance is held, or re-created for the same host under the same name when it is gone.
    async fn recorded(
        &self,
        checked_id: ObjectName<'_>,
        all: &[std::sync::Arc<KKInstance>],
        owned: &[&KKInstance],
    ) -> Result<Claim> {
        let id = checked_id.as_str();
        let (km, machine, kkc, secret) = (self.km, self.machine, self.kkc, self.secret);
        let (ns, kkc_name, instances) = (&self.ns, &self.kkc_name, &self.instances);
        for stray in owned
            .iter()
            .filter(|i| i.name_any() != id && i.metadata.deletion_timestamp.is_none())
        {
            if !stray.annotations().contains_key(TOUCHED_ANNOTATION) {
                release_stray(instances, stray).await;
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
            instance_name(kkc_name, &n) == id || n == id
        }) else {
            return Ok(Claim::Waiting {
                reason: reasons::INVALID_SPEC.into(),
                message: format!(
                    "KKInstance {id} from spec.instanceID names no host of KKCluster {kkc_name} spec.nodes.instances"
                ),
                retry: requeue::INVALID_CLAIM,
            });
        };
        if let Some(holder) = address_holder(all, kkc_name, &host.address) {
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
        let inst = new_instance(km, machine, kkc, host, id, secret, all);
        match instances.create(&PostParams::default(), &inst).await {
            Ok(i) => Ok(Claim::Held(Box::new(i), None)),
            Err(e) if is_conflict(&e) => match instances
                .get_opt(checked_id.as_str())
                .await
                .map_err(Error::kube(format!("get KKInstance {ns}/{id}")))?
            {
                // The cache had not seen this KKMachine's own claim yet.
                Some(i) if controlled_by(&i, &self.uid) => Ok(Claim::Held(Box::new(i), None)),
                _ => Ok(Claim::Waiting {
                    reason: reasons::NO_HOST_AVAILABLE.into(),
                    message: format!("KKInstance {id} was taken by another claim"),
                    retry: requeue::HOST_HELD_ELSEWHERE,
                }),
            },
            Err(e) => Err(Error::kube(format!("re-create claim KKInstance {ns}/{id}"))(e)),
        }
    }

    /// Claim the first free host of the KKCluster that serves the KKMachine's roles.
    async fn free_host(
        &self,
        label: &mut Option<String>,
        all: &[std::sync::Arc<KKInstance>],
    ) -> Result<Claim> {
        let (km, machine, kkc, secret, ctx) = (self.km, self.machine, self.kkc, self.secret, self.ctx);
        let (ns, kkc_name, instances) = (&self.ns, &self.kkc_name, &self.instances);
        let roles = wanted_roles(km, machine);
        let (mut candidates, mut refused) = choose_hosts(kkc, &roles, all);
        let early = secret.is_none();
        let before = candidates.len();
        if early {
            candidates = early_candidates(&roles, candidates);
        }
        let held_back = before - candidates.len();
        let mut in_flight = 0;
        for host in candidates {
            let host_name = host.host_name();
            let name = instance_name(kkc_name, &host_name);
            let reservation = format!("{ns}/{name}");
            if !ctx.reservations.reserve(&reservation) {
                // Another reconcile of this manager is claiming it (or just did, and the cache does not show it
                // yet): try the next host instead of a create that would only conflict.
                in_flight += 1;
                continue;
            }
            let inst = new_instance(km, machine, kkc, host, &name, secret, all);
            match instances.create(&PostParams::default(), &inst).await {
                Ok(created) => {
                    if let Some(other) = competing_claim(ctx, instances, kkc, &created).await? {
                        // Given up before recording: nothing touched the host.
                        release_stray(instances, &created).await;
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
                    let recorded = record_claim(&self.machines, km, label, &created).await?;
                    info!(host = %host_name, instance = %name, "Claimed a host");
                    ctx.event(
                        km,
                        false,
                        capkk_api::consts::events::HOST_CLAIMED,
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
        if held_back > 0 && in_flight == 0 && refused.is_empty() {
            // Hosts serving this worker are free, but each may serve the control plane too: they are left for
            // it until the bootstrap data comes (after the control plane's `kubeadm init`), as before.
            return Ok(Claim::Waiting {
                reason: reasons::WAITING_FOR_BOOTSTRAP_DATA.into(),
                message: format!(
                    "no free host serving only role {} in KKCluster {kkc_name} to prepare before the bootstrap data: hosts that may also serve the control plane are claimed once Machine.spec.bootstrap.dataSecretName is set",
                    roles_s.join("|"),
                ),
                retry: requeue::NO_HOST,
            });
        }
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
}

/// The hosts a claim made before the bootstrap data exists may take. A control-plane Machine takes its hosts
/// as always. A worker takes only hosts that cannot serve the control plane: before, a worker's claim came
/// after the control plane's `kubeadm init` (its bootstrap data waits for it), so it never took a host the
/// first control-plane Machine would have used (the published endpoint is the first control-plane host's
/// address unless set); an early claim must not either.
pub(crate) fn early_candidates<'a>(
    roles: &[Role],
    candidates: Vec<&'a InstanceInfo>,
) -> Vec<&'a InstanceInfo> {
    if roles.iter().any(|r| r.served_by(&[Role::ControlPlane])) {
        return candidates;
    }
    candidates
        .into_iter()
        .filter(|h| !Role::ControlPlane.served_by(&h.roles()))
        .collect()
}

fn new_instance(
    km: &KKMachine,
    machine: &Machine,
    kkc: &KKCluster,
    host: &InstanceInfo,
    name: &str,
    secret: Option<&str>,
    all: &[std::sync::Arc<KKInstance>],
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
    if machine.labels().contains_key(CONTROL_PLANE_LABEL) {
        // What a host prepared before its bootstrap data pre-pulls (every control-plane image, or the
        // worker's), kept where a restarted or moved manager finds it.
        labels.insert(CONTROL_PLANE_LABEL.to_owned(), String::new());
    }
    labels.insert(ADDRESS_HASH_LABEL.to_owned(), address_hash(&host.address));
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
    // A bastion key the KKCluster's other claims recorded is pinned from the start: the new claim's first dial
    // must not trust a bastion key anew (e.g. after a restart emptied the pool).
    let kkc_name = kkc.name_any();
    let bastion = hosts::effective_bastion(kkc).map(|mut b| {
        let siblings = all
            .iter()
            .map(|i| &**i)
            .filter(|i| i.spec.cluster_name.as_deref() == Some(kkc_name.as_str()));
        hosts::pin_recorded_bastion_key(&mut b, siblings);
        capkk_api::Bastion {
            auth: b.auth.map(|a| a.without_inline_secrets()),
            ..b
        }
    });
    KKInstance {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            // Created with it, the KKInstance's first reconcile goes straight to host work: adding it there
            // was one more API write, in turn, between the claim and the host's first command.
            finalizers: Some(vec![KKINSTANCE_FINALIZER.to_owned()]),
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
            bootstrap_data_secret_ref: secret.map(|name| SecretRef {
                name: name.to_owned(),
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

/// The merge patch recording the claim of `inst` (guarded by the KKMachine's `rv`: a KKMachine that changed
/// meanwhile may have recorded another claim), with the KKCluster label when it is still missing.
pub(crate) fn claim_record(inst: &KKInstance, rv: Option<&str>, label: Option<&str>) -> serde_json::Value {
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
        "{ADDRESS_HASH_LABEL}={}",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kkmachine::test_objects::*;
    use capkk_api::Role;

    use crate::{capi::Machine, kkmachine::choice::choose_hosts};

    #[test]
    fn a_host_without_a_name_is_claimed_under_the_name_derived_from_its_address() {
        let a = kkc("a", vec![host("", "192.168.100.3")]);
        let (candidates, _) = choose_hosts::<KKInstance>(&a, &[Role::Worker], &[]);
        assert_eq!(candidates.len(), 1);
        let h = candidates[0];
        let name = instance_name("a", &h.host_name());
        assert_eq!(name, "a.192-168-100-3");
        let km = KKMachine::new("m", Default::default());
        let inst = new_instance(
            &km,
            &Machine::new("m", Default::default()),
            &a,
            h,
            &name,
            Some("s"),
            &[],
        );
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
    fn a_new_claim_starts_pinned_to_the_bastion_key_its_clusters_other_claims_recorded() {
        let recorded = "SHA256:recordedBastionKeyOfTheClaim00000000000000";
        let mut a = kkc("a", vec![host("node1", "10.0.0.1"), host("node2", "10.0.0.2")]);
        a.spec.nodes.bastion = Some(capkk_api::Bastion {
            address: "198.18.0.1".into(),
            ..Default::default()
        });
        let sibling = |cluster: &str| {
            let mut c = claim_of(cluster, "node1", "10.0.0.1");
            c.spec.bastion = Some(capkk_api::Bastion {
                address: "198.18.0.1".into(),
                auth: None,
                host_keys: vec![recorded.into()],
            });
            std::sync::Arc::new(c)
        };
        let km = KKMachine::new("m", Default::default());
        let m = Machine::new("m", Default::default());
        let h = &a.spec.nodes.instances[1];
        let inst = new_instance(&km, &m, &a, h, "a.node2", Some("s"), &[sibling("a")]);
        let b = inst.spec.bastion.expect("bastion");
        assert_eq!(b.host_keys, [recorded]);
        // Another KKCluster's record is not this cluster's; nothing recorded: trust on first use.
        for all in [vec![sibling("b")], vec![]] {
            let inst = new_instance(&km, &m, &a, h, "a.node2", Some("s"), &all);
            assert!(inst.spec.bastion.expect("bastion").host_keys.is_empty());
        }
    }

    #[test]
    fn a_host_claimed_again_by_a_machine_of_another_version_gets_an_instance_of_that_version() {
        let a = kkc("a", vec![host("node1", "10.0.0.1")]);
        let (candidates, _) = choose_hosts::<KKInstance>(&a, &[Role::Worker], &[]);
        let km = KKMachine::new("m", Default::default());
        for v in ["v1.35.2", "v1.36.3"] {
            let mut m = Machine::new("m", Default::default());
            m.spec.version = Some(v.into());
            let inst = new_instance(&km, &m, &a, candidates[0], "a.node1", Some("s"), &[]);
            // The binary service installs what this names, whatever the host ran before the reset.
            assert_eq!(inst.spec.kubernetes_version.as_deref(), Some(v));
        }
    }

    #[test]
    fn an_early_worker_claim_leaves_every_host_that_may_serve_the_control_plane() {
        let mut a = kkc(
            "a",
            vec![
                host("both", "10.0.0.1"),
                host("cp", "10.0.0.2"),
                host("w", "10.0.0.3"),
            ],
        );
        a.spec.nodes.instances[1].roles = Some(vec![Role::Master]);
        a.spec.nodes.instances[2].roles = Some(vec![Role::Worker]);
        let names = |hs: Vec<&InstanceInfo>| hs.iter().map(|h| h.host_name()).collect::<Vec<_>>();
        let (workers, _) = choose_hosts::<KKInstance>(&a, &[Role::Worker], &[]);
        assert_eq!(names(early_candidates(&[Role::Worker], workers)), ["w"]);
        // A control-plane Machine chooses as always.
        let (cps, _) = choose_hosts::<KKInstance>(&a, &[Role::ControlPlane], &[]);
        assert_eq!(
            names(early_candidates(&[Role::ControlPlane], cps)),
            ["both", "cp"]
        );
    }

    #[test]
    fn a_claim_before_the_bootstrap_data_names_none_and_labels_a_control_plane_machines_instance() {
        let a = kkc("a", vec![host("node1", "10.0.0.1")]);
        let km = KKMachine::new("m", Default::default());
        let mut m = Machine::new("m", Default::default());
        m.metadata.labels = Some([(CONTROL_PLANE_LABEL.to_owned(), String::new())].into());
        let inst = new_instance(&km, &m, &a, &a.spec.nodes.instances[0], "a.node1", None, &[]);
        assert!(inst.spec.bootstrap_data_secret_ref.is_none());
        assert!(
            inst.labels().contains_key(CONTROL_PLANE_LABEL),
            "{:?}",
            inst.labels()
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
}
