//! KKMachine and KKMachineTemplate: one CAPI Machine mapped onto one host.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Conditions, ContainerManager, Initialization, MachineAddress, Repository, Role};

/// KKMachine: the infrastructure side of one CAPI Machine.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KKMachine",
    plural = "kkmachines",
    namespaced,
    status = "KKMachineStatus",
    shortname = "kkm",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1beta1"),
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']","description":"Owning Cluster"}"#,
    printcolumn = r#"{"name":"Instance","type":"string","jsonPath":".spec.instanceID","description":"Claimed host (KKInstance)"}"#,
    printcolumn = r#"{"name":"Provisioned","type":"boolean","jsonPath":".status.initialization.provisioned"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".status.step","priority":1}"#,
    printcolumn = r#"{"name":"Containerd","type":"string","jsonPath":".status.components.containerd","priority":1}"#,
    printcolumn = r#"{"name":"Sandbox","type":"string","jsonPath":".status.components.sandboxImage","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(oldSelf.providerID) || (has(self.providerID) && self.providerID == oldSelf.providerID)",
        "message": "spec.providerID is immutable once set"
    },
    {
        "rule": "!has(oldSelf.instanceID) || (has(self.instanceID) && self.instanceID == oldSelf.instanceID)",
        "message": "spec.instanceID is immutable once set"
    }
]))]
pub struct KKMachineSpec {
    /// `kk:///<kkcluster>/<instance>`; set by the controller once a host is claimed.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512), extend("pattern" = crate::patterns::PROVIDER_ID))]
    pub provider_id: Option<String>,
    /// Name of the claimed KKInstance (`<kkcluster>.<host>`; a bare host name in objects claimed before
    /// 0.2); set by the controller. A DNS-1123 subdomain: it is a path segment of the request that reads the
    /// KKInstance.
    #[serde(default, rename = "instanceID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), extend("pattern" = crate::patterns::DNS_SUBDOMAIN))]
    pub instance_id: Option<String>,
    /// Roles a host must have to be claimed; a host qualifies when it has any of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<Role>,
    /// Container runtime to install.
    #[serde(default)]
    pub container_manager: ContainerManager,
    /// OS package handling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<Repository>,
}

/// Observed state of a KKMachine.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KKMachineStatus {
    /// v1beta2 contract: `provisioned` once the bootstrap sentinel exists on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// Conditions: `Ready`, `Paused`, `InstanceReady` (mirrors the KKInstance), `HostClaimed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Conditions,
    /// InternalIP, ExternalIP and Hostname of the claimed host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    /// Coarse phase: Pending, Claimed, Provisioning, Provisioned, Deleting, Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePhase>,
    /// Progress of the host work: `step i/n: <name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The component versions the claimed host gets: `spec.containerManager`'s values, and for each it
    /// leaves unset the component default of the Machine's Kubernetes minor. Absent until a host is claimed,
    /// or while the defaults cannot be resolved (the KKInstance's `InvalidSpec` reason names the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<ResolvedComponents>,
}

/// `KKMachine.status.components`: what the host's container runtime step installs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedComponents {
    /// The Kubernetes version the defaults were chosen for: the Machine's when its host was provisioned (an
    /// in-place upgrade replaces Kubernetes' binaries, not the container runtime, and keeps this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// containerd version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd: Option<String>,
    /// runc version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runc: Option<String>,
    /// crictl version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crictl: Option<String>,
    /// Pod sandbox (pause) image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_image: Option<String>,
    /// The `spec.containerManager` fields that were unset and so taken from the component defaults
    /// (`version`, `runcVersion`, `crictlVersion`, `sandboxImage`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defaulted: Vec<String>,
}

/// `KKMachine.status.phase`: a coarse summary for `kubectl get` (conditions carry the details).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum MachinePhase {
    /// No host claimed yet (waiting for the cluster infrastructure, bootstrap data or a free host).
    Pending,
    /// A host is claimed; host work has not started.
    Claimed,
    /// Host work runs.
    Provisioning,
    /// The bootstrap data ran on the host.
    Provisioned,
    /// The host is being reset and freed.
    Deleting,
    /// Host work failed terminally or the host is quarantined.
    Failed,
}

/// KKMachineTemplate: referenced by KubeadmControlPlane and MachineDeployments. The spec is immutable,
/// enforced by the ValidatingAdmissionPolicy in `config/admission` (it lets CAPI's topology dry-run through,
/// which a CRD rule cannot).
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KKMachineTemplate",
    plural = "kkmachinetemplates",
    namespaced,
    status = "KKMachineTemplateStatus",
    shortname = "kkmt",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1beta1"),
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KKMachineTemplateSpec {
    /// The KKMachine to stamp out.
    pub template: KKMachineTemplateResource,
}

/// `spec.template` of a KKMachineTemplate.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KKMachineTemplateResource {
    /// Labels and annotations for created KKMachines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::ObjectMetaTemplate>,
    /// The KKMachine spec, without the claim fields (see [`template_machine_spec_schema`]).
    #[schemars(schema_with = "template_machine_spec_schema")]
    pub spec: KKMachineSpec,
}

/// Schema of a template's `spec.template.spec`: [`KKMachineSpec`]'s, whose rules (immutable claim fields) are
/// replaced by rules refusing the claim fields. `instanceID` and `providerID` name one host: preset in a
/// template, every KKMachine made from it would target that host and skip the role filter. A KKMachine itself
/// still accepts them on create (`clusterctl move` re-creates it with its claim).
fn template_machine_spec_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<KKMachineSpec>();
    schema.insert(
        "x-kubernetes-validations".into(),
        serde_json::json!([
            {
                "rule": "!has(self.instanceID)",
                "message": "spec.template.spec.instanceID must not be set in a template: it names one host, which every KKMachine made from it would claim"
            },
            {
                "rule": "!has(self.providerID)",
                "message": "spec.template.spec.providerID must not be set in a template: it names one host, which every KKMachine made from it would claim"
            }
        ]),
    );
    schema
}

/// Status of a KKMachineTemplate (autoscale-from-zero hints, set by users or tools).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KKMachineTemplateStatus {
    /// Node capacity of machines from this template (e.g. `cpu`, `memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity:
        Option<std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
}
