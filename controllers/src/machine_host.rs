//! Lookups shared by the reconcilers and hook handlers that act on a Machine's host (the KKRemediation's
//! repairs, the in-place upgrade): from a CAPI Machine to the KKInstance its KKMachine holds and that host's
//! KKCluster, and the two lookups every kind shares on the way (a host's controller, a host's KKCluster).
//! Beside [`crate::hosts`], which reaches a host once it is found.

use capkk_api::{
    KKCluster, KKInstance,
    consts::{QUARANTINED_LABEL, RELEASE_ANNOTATION},
};
use kube::ResourceExt;

use crate::{
    capi::Machine,
    context::{Context, cached_or_get},
    error::Result,
    object_name::ObjectName,
};

/// The host behind `machine`: its KKMachine's claimed KKInstance and that host's KKCluster, or why there is
/// none to work on. The KKInstance must be controlled by that KKMachine (its controller reference carries the
/// KKMachine's UID): `spec.instanceID` is written by the KKMachine's creator too (`clusterctl move` re-creates
/// it with its claim), so it alone does not make a host the Machine's. Names read from the Machine and the
/// KKMachine are checked before they are requested ([`ObjectName`]).
pub(crate) async fn host_of(
    ctx: &Context,
    ns: &str,
    machine: &Machine,
) -> Result<std::result::Result<(KKInstance, Option<KKCluster>), String>> {
    let Some(r) = machine
        .spec
        .infrastructure_ref
        .as_ref()
        .filter(|r| r.is("KKMachine"))
    else {
        return Ok(Err(format!(
            "Machine {} has no KKMachine as its infrastructure",
            machine.name_any()
        )));
    };
    let km_name = ObjectName::checked("Machine.spec.infrastructureRef.name", &r.name)?;
    let Some(km) = cached_or_get(ctx.stores.machine(ns, &r.name).await, &ctx.client, ns, km_name).await?
    else {
        return Ok(Err(format!("KKMachine {} not found", r.name)));
    };
    let Some(id) = km.spec.instance_id.clone() else {
        return Ok(Err(format!("KKMachine {} holds no host", r.name)));
    };
    let checked_id = ObjectName::checked("KKMachine.spec.instanceID", &id)?;
    let cached = ctx
        .stores
        .instances_in(ns)
        .await
        .into_iter()
        .find(|i| i.name_any() == id);
    let Some(inst) = cached_or_get(cached, &ctx.client, ns, checked_id).await? else {
        return Ok(Err(format!("KKInstance {id} of KKMachine {} not found", r.name)));
    };
    let km_uid = km.uid().unwrap_or_default();
    if km_uid.is_empty() || !controlled_by(&inst, &km_uid) {
        return Ok(Err(format!(
            "KKInstance {id} named by KKMachine {} spec.instanceID is not controlled by that KKMachine",
            r.name
        )));
    }
    if inst.spec.quarantine.is_some()
        || inst.labels().contains_key(QUARANTINED_LABEL)
        || inst.annotations().contains_key(RELEASE_ANNOTATION)
        || inst.metadata.deletion_timestamp.is_some()
    {
        return Ok(Err(format!(
            "host {} is being released or is quarantined",
            inst.spec.name
        )));
    }
    let kkc = get_kkcluster(ctx, &inst).await?;
    Ok(Ok((inst, kkc)))
}

/// True when `i`'s controller reference carries `uid` (the KKMachine that claimed it).
pub(crate) fn controlled_by(i: &KKInstance, uid: &str) -> bool {
    i.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The KKCluster the host comes from, if it still exists.
pub(crate) async fn get_kkcluster(ctx: &Context, inst: &KKInstance) -> Result<Option<KKCluster>> {
    let ns = inst.namespace().unwrap_or_default();
    let Some(name) = inst.spec.cluster_name.as_deref() else {
        return Ok(None);
    };
    let checked = ObjectName::checked("KKInstance.spec.clusterName", name)?;
    cached_or_get(ctx.stores.cluster(&ns, name).await, &ctx.client, &ns, checked).await
}
