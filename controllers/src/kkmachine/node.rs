//! The workload cluster's side of a provisioned KKMachine: the Node's `spec.providerID`, and the Node
//! recorded in the KKInstance's `status.nodeRef`.

use std::sync::Arc;

use capkk_api::{KKInstance, consts::NODE_REF_FIELD_MANAGER};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;
use tracing::{debug, info};

use crate::{
    context::Context,
    error::{Error, Result},
    object_name::ObjectName,
    reconcile::apply_status,
};

/// Record the workload Node in `KKInstance.status.nodeRef` (its own field manager: the KKInstance
/// reconciler does not own that field).
pub(super) async fn record_node_ref(ctx: &Context, inst: &KKInstance, node: &Node) -> Result<()> {
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
pub(crate) async fn patch_node_provider_id(
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
    let node_name = ObjectName::checked("KKInstance.spec.name", &inst.spec.name)?;
    let node = match nodes
        .get_opt(node_name.as_str())
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
            info!(node = %node.name_any(), provider_id = %pid, "Set the workload Node's providerID");
            Ok(Some(node))
        }
    }
}
