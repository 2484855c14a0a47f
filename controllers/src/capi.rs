//! The few Cluster API v1beta2 fields the provider reads. Read-only: these types are never written back
//! (they drop every field they do not name).

use capkk_api::ApiEndpoint;

use crate::object_name::ObjectName;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// CAPI core group.
pub(crate) const CAPI_GROUP: &str = "cluster.x-k8s.io";

/// `Cluster.spec` (subset).
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    plural = "clusters",
    namespaced,
    status = "ClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterSpec {
    /// Pause reconciliation of the whole cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The API endpoint (copied from the InfraCluster by CAPI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Cluster network settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_network: Option<ClusterNetwork>,
    /// The InfraCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractRef>,
    /// The control plane (a KubeadmControlPlane): its replica count is read untyped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_ref: Option<ContractRef>,
}

/// `Cluster.spec.clusterNetwork` (subset).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterNetwork {
    /// API server port (default 6443).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_port: Option<i32>,
}

/// A v1beta2 contract-versioned reference `{apiGroup, kind, name}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContractRef {
    /// API group.
    #[serde(default)]
    pub api_group: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Name.
    #[serde(default)]
    pub name: String,
}

impl ContractRef {
    /// True when this points at `kind` in the infrastructure group.
    pub(crate) fn is(&self, kind: &str) -> bool {
        self.kind == kind && (self.api_group.is_empty() || self.api_group == capkk_api::GROUP)
    }
}

/// `Cluster.status` (subset).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterStatus {
    /// Initialization flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitialization>,
}

/// `Cluster.status.initialization`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterInitialization {
    /// The InfraCluster reported provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    /// The control plane is initialized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

/// `Machine.spec` (subset).
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Machine",
    plural = "machines",
    namespaced,
    status = "MachineStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MachineSpec {
    /// The owning Cluster.
    #[serde(default)]
    pub cluster_name: String,
    /// Bootstrap settings.
    #[serde(default)]
    pub bootstrap: MachineBootstrap,
    /// The InfraMachine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractRef>,
    /// Kubernetes version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Provider ID (copied from the InfraMachine).
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
}

/// `Machine.spec.bootstrap` (subset).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MachineBootstrap {
    /// The bootstrap config (a KubeadmConfig with CABPK): the in-place upgrade reads its join settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<ContractRef>,
    /// Secret with the bootstrap data (`value`, `format`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_name: Option<String>,
}

/// `Machine.status` (subset).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MachineStatus {
    /// The workload Node once CAPI found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<NodeRef>,
}

/// `Machine.status.nodeRef`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeRef {
    /// Node name.
    #[serde(default)]
    pub name: String,
}

/// The owner reference of `kind` in the CAPI core group, if any.
pub(crate) fn capi_owner<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == kind && o.api_version.split('/').next() == Some(CAPI_GROUP))
}

/// The Machine that owns `meta` through a CAPI Machine ownerReference: `None` without such a reference, else the
/// reference and the Machine from the cache (from the API when the cache does not show it yet: just created),
/// `None` when it does not exist. The reconcilers of the objects a Machine owns (KKMachine, KKRemediation) start here.
pub(crate) async fn owner_machine(
    ctx: &crate::context::Context,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> crate::Result<
    Option<(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
        Option<Machine>,
    )>,
> {
    let Some(owner) = capi_owner(meta, "Machine").cloned() else {
        return Ok(None);
    };
    let ns = meta.namespace.as_deref().unwrap_or_default();
    // Owner references are not format-checked by the API server.
    let name = ObjectName::checked("metadata.ownerReferences[kind=Machine].name", &owner.name)?;
    let machine = crate::context::cached_or_get(
        ctx.stores.capi_machine(ns, name.as_str()).await,
        &ctx.client,
        ns,
        name,
    )
    .await?;
    Ok(Some((owner, machine)))
}

/// The name of the Cluster an object belongs to: its Cluster owner, else CAPI's cluster-name label (the owner
/// reference comes only once CAPI has adopted the object; the label is set by whoever created it).
pub(crate) fn cluster_name(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    capi_owner(meta, "Cluster").map(|o| o.name.clone()).or_else(|| {
        meta.labels
            .as_ref()?
            .get(capkk_api::consts::CLUSTER_NAME_LABEL)
            .cloned()
    })
}

/// The Cluster `ns/name`, from the cache (from the API when the cache does not show it yet). Every kind's
/// Cluster watch is the cache's own (crate::watches): a reconcile woken by a Cluster change (pause) reads it.
/// `name` comes from a field of another object (an owner reference, a label, a Machine's `spec.clusterName`).
pub(crate) async fn cluster(
    ctx: &crate::context::Context,
    ns: &str,
    name: ObjectName<'_>,
) -> crate::Result<Option<Cluster>> {
    crate::context::cached_or_get(
        ctx.stores.capi_cluster(ns, name.as_str()).await,
        &ctx.client,
        ns,
        name,
    )
    .await
}

/// The control-plane replicas the Cluster asks for: its control plane's `spec.replicas` (the object its
/// `controlPlaneRef` names, read untyped at `v1beta2`), and at least as many as it has control-plane Machines.
/// `None` when neither tells (no reference, a control plane that cannot be read, no Machine yet).
pub(crate) async fn control_plane_replicas(
    ctx: &crate::context::Context,
    ns: &str,
    cluster: &Cluster,
) -> Option<i64> {
    use kube::{
        Api, ResourceExt as _,
        core::{ApiResource, DynamicObject, GroupVersionKind},
    };
    let name = cluster.name_any();
    let machines = {
        let store = &ctx.stores.capi_machines;
        store
            .state()
            .iter()
            .filter(|m| {
                m.namespace().as_deref() == Some(ns)
                    && m.spec.cluster_name == name
                    && m.labels().contains_key(capkk_api::consts::CONTROL_PLANE_LABEL)
                    && m.metadata.deletion_timestamp.is_none()
            })
            .count() as i64
    };
    let declared = async {
        let r = cluster.spec.control_plane_ref.as_ref()?;
        let group = if r.api_group.is_empty() {
            "controlplane.cluster.x-k8s.io"
        } else {
            r.api_group.as_str()
        };
        let obj_name = ObjectName::checked("Cluster spec.controlPlaneRef.name", &r.name).ok()?;
        let gvk = GroupVersionKind::gvk(group, "v1beta2", &r.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", r.kind.to_ascii_lowercase()));
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        let obj = match api.get_opt(obj_name.as_str()).await {
            Ok(o) => o?,
            Err(e) => {
                tracing::debug!(error = %e, kind = %r.kind, "Reading the control plane's replicas failed");
                return None;
            }
        };
        obj.data.get("spec")?.get("replicas")?.as_i64()
    }
    .await;
    match (declared, machines) {
        (None, 0) => None,
        (d, m) => Some(d.unwrap_or(0).max(m)),
    }
}
