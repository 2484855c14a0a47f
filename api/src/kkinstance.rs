//! KKInstance: one claimed host, driven over SSH.

use k8s_openapi::{api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Auth, Bastion, Conditions, ContainerManager, Repository, Role};

/// KKInstance: a host claimed by a KKMachine. Its name is `<kkcluster>.<host>`, so a host of one KKCluster
/// can be claimed once (the create is the lock) and two KKClusters may both have a host `node1`. Holds only
/// references to credentials, never secret material.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KKInstance",
    plural = "kkinstances",
    namespaced,
    status = "KKInstanceStatus",
    shortname = "kki",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1beta1"),
    printcolumn = r#"{"name":"Host","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".status.step"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.name == oldSelf.name && self.address == oldSelf.address",
        "message": "spec.name and spec.address are immutable"
    },
    {
        "rule": "!has(oldSelf.hostKey) || (has(self.hostKey) && self.hostKey == oldSelf.hostKey)",
        "message": "spec.hostKey is immutable once recorded; delete the KKInstance to re-trust a host"
    }
]))]
pub struct KKInstanceSpec {
    /// Host name (= KKCluster instance name = Node name): a lower-case DNS label (it names the workload Node
    /// in a request path).
    #[schemars(length(min = 1, max = 63), extend("pattern" = crate::patterns::DNS_LABEL))]
    pub name: String,
    /// SSH address (as the KKCluster's `instances[].address`).
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": crate::patterns::HOST_ADDRESS_RULE,
        "message": "spec.address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number"
    }]))]
    pub address: String,
    /// Node address: the KKCluster instance's `internalAddress`, or its SSH `address` when it has none (then
    /// possibly a DNS name), so the same rule as `address` (empty allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": crate::patterns::HOST_ADDRESS_OR_EMPTY_RULE,
        "message": "spec.internalAddress must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number"
    }]))]
    pub internal_address: Option<String>,
    /// Roles of the host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<Role>,
    /// Declared CPU architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::ARCH))]
    pub arch: Option<String>,
    /// Name of the KKCluster the host comes from (inline credentials are read from there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("pattern" = crate::patterns::DNS_SUBDOMAIN))]
    pub cluster_name: Option<String>,
    /// Auth with inline secrets stripped: user, port, timeout and Secret references only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
    /// Jump host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<Bastion>,
    /// Pinned fingerprints from the KKCluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[schemars(extend("items" = {
        "type": "string",
        "maxLength": 100,
        "pattern": crate::patterns::HOST_KEY_FINGERPRINT
    }))]
    pub host_keys: Vec<String>,
    /// Host-key fingerprint trusted on first use (recorded by the controller; immutable afterwards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), extend("pattern" = crate::patterns::HOST_KEY_FINGERPRINT))]
    pub host_key: Option<String>,
    /// Secret holding the bootstrap data (`value`, `format`), from `Machine.spec.bootstrap.dataSecretName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_data_secret_ref: Option<crate::common::SecretRef>,
    /// Kubernetes version to install (from `Machine.spec.version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub kubernetes_version: Option<String>,
    /// Provider ID the Node must carry.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512), extend("pattern" = crate::patterns::PROVIDER_ID))]
    pub provider_id: Option<String>,
    /// Container runtime to install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_manager: Option<ContainerManager>,
    /// OS package handling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<Repository>,
    /// Set when the host could not be reset: it is not claimable until a person deletes this KKInstance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<Quarantine>,
}

/// Why and since when a host is quarantined.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Quarantine {
    /// What went wrong.
    pub reason: String,
    /// When the host was quarantined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
}

/// Observed state of a KKInstance.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KKInstanceStatus {
    /// Where the host is in its life cycle (derived from spec, annotations and running host work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<InstanceState>,
    /// `step i/n: <name>` of the current or last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Conditions: `Ready`, `Paused`, `Bootstrapped`, `RepositoryReady`, `BinariesReady`, `CRIReady`,
    /// `Provisioned`, `Deleting`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Conditions,
    /// The last journal records of host work (name, exit code, duration, redacted output tail).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub journal: Vec<JournalRecord>,
    /// What the host reported about itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_info: Option<HostInfo>,
    /// The workload Node this host became.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<ObjectReference>,
    /// Generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// `KKInstance.status.state`: the host's place in its life cycle. The values are CAPKK's lower-case words.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    /// Claimed; host work not started, or waiting to retry after a transient failure.
    Pending,
    /// Host work runs the phases before the bootstrap data.
    Bootstrapping,
    /// Host work runs the bootstrap data.
    Provisioning,
    /// Every phase finished; the bootstrap sentinel exists on the host.
    Running,
    /// A terminal failure: stays until the retry annotation is set.
    Failed,
    /// The host is being reset (release or deletion).
    Cleaning,
    /// The host was reset (or never touched) and is being freed.
    Cleaned,
    /// The host could not be reset: kept out of the pool until a person deletes the KKInstance.
    Quarantined,
}

impl InstanceState {
    /// The value as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Bootstrapping => "bootstrapping",
            InstanceState::Provisioning => "provisioning",
            InstanceState::Running => "running",
            InstanceState::Failed => "failed",
            InstanceState::Cleaning => "cleaning",
            InstanceState::Cleaned => "cleaned",
            InstanceState::Quarantined => "quarantined",
        }
    }
}

impl std::fmt::Display for InstanceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finished step of host work.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JournalRecord {
    /// Phase (bootstrap, repository, binary, containermanager, provisioning, reset).
    pub phase: String,
    /// Step name.
    pub name: String,
    /// Exit code (absent when the step did not run a command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Wall time in milliseconds.
    #[serde(default)]
    pub duration_ms: i64,
    /// Last lines of output, with secrets redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
}

/// Facts gathered from the host.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HostInfo {
    /// os-release ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// os-release VERSION_ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_version: Option<String>,
    /// Architecture (Go naming).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Init system (systemd, other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_system: Option<String>,
}
