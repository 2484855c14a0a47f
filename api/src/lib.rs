//! CRD types of capkk-rs: `infrastructure.cluster.x-k8s.io/v1beta1` KKCluster, KKClusterTemplate,
//! KKMachine, KKMachineTemplate, KKInstance, KKRemediation and KKRemediationTemplate.
//!
//! The field names follow KubeKey's CAPKK v3 so existing YAML applies unchanged; the status follows the
//! Cluster API v1beta2 contract (`status.initialization.provisioned`, `metav1.Condition` conditions,
//! `status.addresses`, `status.failureDomains` as a list). Defaults and validation are in the OpenAPI
//! schema (defaults, CEL `x-kubernetes-validations`), so no webhook server is needed. Template immutability
//! needs the request (CAPI's topology dry-run may change a template's spec): it is a ValidatingAdmissionPolicy
//! in `config/admission`, installed with the provider components.

pub mod common;
pub mod consts;
pub mod kkcluster;
pub mod kkinstance;
pub mod kkmachine;
pub mod kkremediation;
pub mod names;
pub mod patterns;

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use common::*;
pub use kkcluster::*;
pub use kkinstance::*;
pub use kkmachine::*;
pub use kkremediation::*;
pub use names::{host_name_from_address, is_dns_label, is_dns_subdomain, is_host_address};

/// The API group.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The API version.
pub const VERSION: &str = "v1beta1";
/// `group/version`.
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";

/// Labels and annotations of a template's objects (`spec.template.metadata`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMetaTemplate {
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Every CRD of the API, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        KKCluster::crd(),
        KKClusterTemplate::crd(),
        KKMachine::crd(),
        KKMachineTemplate::crd(),
        KKInstance::crd(),
        KKRemediation::crd(),
        KKRemediationTemplate::crd(),
    ]
}

/// Render a CRD as YAML (what `crdgen` writes to `config/crd/bases`).
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(crd)
}

/// The file name of a CRD under `config/crd/bases`, as controller-gen would name it.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}
