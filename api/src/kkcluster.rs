//! KKCluster and KKClusterTemplate: the host inventory of one workload cluster.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    ApiEndpoint, Auth, Bastion, Conditions, FailureDomain, Initialization, Role, default_arch, default_roles,
};
use crate::names::host_name_from_address;

fn default_distribution() -> Option<String> {
    Some("kubernetes".into())
}

/// The Kubernetes distribution a KKCluster asks for (`spec.distribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// `kubernetes` (the default; `k8s` is accepted too).
    Kubernetes,
    /// `k3s`: accepted for CAPKK compatibility, not supported by capkk-rs.
    K3s,
}

impl Distribution {
    /// The distribution `spec.distribution` names (unset: kubernetes); the error is a value that names
    /// none.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.unwrap_or("kubernetes") {
            "kubernetes" | "k8s" => Ok(Self::Kubernetes),
            "k3s" => Ok(Self::K3s),
            other => Err(other.to_owned()),
        }
    }
}

/// KKCluster: the SSH host inventory, control-plane endpoint, download mirrors and registry settings.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KKCluster",
    plural = "kkclusters",
    namespaced,
    status = "KKClusterStatus",
    shortname = "kkc",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1beta1"),
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']","description":"Owning Cluster"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".spec.controlPlaneEndpoint.host","description":"Control-plane endpoint host"}"#,
    printcolumn = r#"{"name":"Provisioned","type":"boolean","jsonPath":".status.initialization.provisioned"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(oldSelf.controlPlaneLoadBalancer) || (has(self.controlPlaneLoadBalancer) && self.controlPlaneLoadBalancer == oldSelf.controlPlaneLoadBalancer)",
    "message": "spec.controlPlaneLoadBalancer is immutable once set"
}]))]
pub struct KKClusterSpec {
    /// `kubernetes` (default) or `k3s` (accepted for CAPKK compatibility, reported as unsupported).
    #[serde(default = "default_distribution", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["kubernetes", "k3s", "k8s"]))]
    pub distribution: Option<String>,
    /// The host pool and how to reach it.
    pub nodes: Nodes,
    /// API server endpoint. Set by the controller from `controlPlaneLoadBalancer.host` (or the first
    /// control-plane host) when the user leaves it empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// VIP or DNS name in front of the API servers (e.g. a kube-vip address). Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_load_balancer: Option<LoadBalancer>,
    /// Where binaries are downloaded from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<Component>,
    /// Image registry settings for the container runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<Registry>,
}

/// The host pool.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.auth) && (has(self.auth.password) || has(self.auth.privateKey) || has(self.auth.privateKeyPath) || has(self.auth.secret) || has(self.auth.secretRef))) || self.instances.all(i, has(i.auth) && (has(i.auth.password) || has(i.auth.privateKey) || has(i.auth.privateKeyPath) || has(i.auth.secret) || has(i.auth.secretRef)))",
        "message": "spec.nodes.auth must set one of password, privateKey, privateKeyPath, secret or secretRef (or every instance must set its own auth)"
    }
]))]
pub struct Nodes {
    /// SSH auth shared by every host (defaults `user: root`, `port: 22`; an unset `timeout` is the manager's
    /// `--ssh-connect-timeout`). A per-instance `auth` overrides it field by field, as CAPKK: fields the host
    /// sets win, unset or empty ones are inherited.
    #[serde(default)]
    #[schemars(schema_with = "crate::common::global_auth_schema")]
    pub auth: Auth,
    /// Jump host in front of every host (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<Bastion>,
    /// The hosts. Names and addresses are unique. The list is atomic (server-side apply replaces it as a
    /// whole): `name` is optional (CAPKK), so it cannot key a map list.
    #[serde(default)]
    #[schemars(length(max = 100))]
    #[schemars(extend(
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = [
            {
                "rule": "self.all(a, !has(a.name) || self.exists_one(b, has(b.name) && b.name == a.name))",
                "message": "spec.nodes.instances[].name must be unique"
            },
            {
                "rule": "self.all(a, self.exists_one(b, b.address == a.address))",
                "message": "spec.nodes.instances[].address must be unique"
            },
            {
                "rule": "self.all(a, !has(a.internalAddress) || self.exists_one(b, has(b.internalAddress) && b.internalAddress == a.internalAddress))",
                "message": "spec.nodes.instances[].internalAddress must be unique"
            }
        ]
    ))]
    pub instances: Vec<InstanceInfo>,
}

/// One host of the pool.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceInfo {
    /// Host name (lower-case DNS label): the host's hostname, its Node name and part of its KKInstance name.
    /// Optional, as in CAPKK: a host without one gets a name derived from its address (`192.168.100.3` ->
    /// `192-168-100-3`, docs/capkk-migration.md), computed by the controller and never written into this spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
        "message": "spec.nodes.instances[].name must be a lower-case DNS label (a-z, 0-9, '-')"
    }]))]
    pub name: Option<String>,
    /// SSH address: an IP address (IPv4 in dotted decimal) or a DNS name that does not end in a number (no
    /// `inet_aton` form such as `0x7f.1`, which the resolver reads as an IPv4 address).
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": crate::patterns::HOST_ADDRESS_RULE,
        "message": "spec.nodes.instances[].address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number"
    }]))]
    pub address: String,
    /// Node IP (kubelet `--node-ip`); defaults to `address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == '' || isIP(self)",
        "message": "spec.nodes.instances[].internalAddress must be a valid IP address"
    }]))]
    pub internal_address: Option<String>,
    /// Roles this host may take (default `[control-plane, worker]`).
    #[serde(default = "default_roles", skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<Role>>,
    /// CPU architecture (default `amd64`); checked against `uname -m` on the host.
    #[serde(default = "default_arch", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["amd64", "arm64"]))]
    pub arch: Option<String>,
    /// Per-host auth override (unset fields come from `spec.nodes.auth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
    /// Pinned SHA256 host-key fingerprints (`SHA256:<base64>`, as `ssh-keygen -lf` prints). When empty the
    /// key is trusted on first use and recorded in the KKInstance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A plain OpenAPI `pattern` (not CEL): a CEL rule here exceeds the apiserver's cost budget.
    #[schemars(length(max = 8))]
    #[schemars(extend("items" = {
        "type": "string",
        "maxLength": 100,
        "pattern": "^SHA256:[A-Za-z0-9+/]{43}=?$"
    }))]
    pub host_keys: Vec<String>,
}

impl InstanceInfo {
    /// The host name: `name` when set and non-empty, else [`host_name_from_address`] of `address`. Stable
    /// across reconciles (a pure function of the spec), a lower-case DNS label.
    pub fn host_name(&self) -> String {
        match self.name.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => n.to_owned(),
            None => host_name_from_address(&self.address),
        }
    }

    /// The roles, defaulted like the apiserver does.
    pub fn roles(&self) -> Vec<Role> {
        self.roles.clone().or_else(default_roles).unwrap_or_default()
    }

    /// The node IP (internalAddress, else address).
    pub fn internal_address(&self) -> &str {
        self.internal_address
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.address)
    }
}

/// Control-plane load balancer / VIP. Unset `type` (or `External`): someone else serves `host` (a hardware or
/// cloud load balancer, kube-vip); `Keepalived`: the provider serves it on the control-plane hosts, a VIP held
/// by keepalived (VRRP, unicast peers) in front of haproxy on every control-plane host (docs/ha.md).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.type) || self.type != 'Keepalived' || (has(self.host) && self.host.matches('^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$'))",
        "message": "controlPlaneLoadBalancer.host must be an IPv4 address (the VIP) when type is Keepalived"
    },
    {
        "rule": "(has(self.type) && self.type == 'Keepalived') || (!has(self.port) && !has(self.interface) && !has(self.virtualRouterID))",
        "message": "controlPlaneLoadBalancer.port, interface and virtualRouterID apply only to type Keepalived"
    }
]))]
pub struct LoadBalancer {
    /// VIP address or DNS name (an IP address or a DNS name not ending in a number: no port, path or space; it
    /// becomes the control-plane endpoint, the kubeconfig's URL and kubeadm's `controlPlaneEndpoint`). With
    /// `type: Keepalived`, the VIP: an IPv4 address on the control-plane hosts' segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": crate::patterns::HOST_ADDRESS_OR_EMPTY_RULE,
        "message": "controlPlaneLoadBalancer.host must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number, without port or path"
    }]))]
    pub host: Option<String>,
    /// Who serves `host`: `External` (the default: a load balancer the provider does not manage) or
    /// `Keepalived` (keepalived and haproxy on every control-plane host, installed and configured over SSH).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["External", "Keepalived"]))]
    pub type_: Option<String>,
    /// `Keepalived` only: haproxy's frontend port on every control-plane host and the published endpoint's port
    /// (default 8443). Must differ from the API server's bind port (the Cluster's
    /// `spec.clusterNetwork.apiServerPort`, default 6443): both listen on the same hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// `Keepalived` only: the network interface keepalived puts the VIP on (a Linux interface name). Default:
    /// the interface holding the host's internal address, found on each host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 15), extend("pattern" = crate::patterns::INTERFACE))]
    pub interface: Option<String>,
    /// `Keepalived` only: the VRRP virtual router id (1-255). It must be unique among the VRRP routers of the
    /// layer-2 segment. Default: derived from the KKCluster's namespace and name.
    #[serde(default, rename = "virtualRouterID", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 255))]
    pub virtual_router_id: Option<i32>,
}

/// Who serves the control-plane load balancer's address (`spec.controlPlaneLoadBalancer.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadBalancerType {
    /// Someone else serves `host` (the default).
    External,
    /// keepalived and haproxy on the control-plane hosts, managed by the provider.
    Keepalived,
}

/// haproxy's default frontend port of a `Keepalived` load balancer.
pub const DEFAULT_LOADBALANCER_PORT: u16 = 8443;

impl LoadBalancer {
    /// The type; the error is the value that names none.
    pub fn kind(&self) -> Result<LoadBalancerType, String> {
        match self.type_.as_deref().unwrap_or("External") {
            "" | "External" => Ok(LoadBalancerType::External),
            "Keepalived" => Ok(LoadBalancerType::Keepalived),
            other => Err(other.to_owned()),
        }
    }

    /// True when the provider serves the address (`type: Keepalived`).
    pub fn is_keepalived(&self) -> bool {
        self.kind() == Ok(LoadBalancerType::Keepalived)
    }

    /// `host` when set and non-empty.
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref().filter(|h| !h.is_empty())
    }
}

/// Download sources for binaries.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    /// `cn` switches default URLs to the China mirrors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::ZONE))]
    pub zone: Option<String>,
    /// Replaces scheme and host of every default download URL (offline file server), e.g. `http://10.0.0.5:8080`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::HTTP_URL))]
    pub host: Option<String>,
    /// Per-artifact overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<Override>,
    /// `controller` (default): the controller downloads, verifies, caches and uploads; `host`: each host
    /// downloads directly and verifies the checksum itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["controller", "host"]))]
    pub download_on: Option<String>,
}

/// Override of one artifact's source and checksum.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Override {
    /// Artifact id: kubeadm, kubelet, kubectl, cni, crictl, containerd, runc, ...
    #[schemars(extend("pattern" = crate::patterns::ARTIFACT_ID))]
    pub id: String,
    /// CPU architecture it applies to (empty: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::ARCH))]
    pub arch: Option<String>,
    /// Version it applies to (empty: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub version: Option<String>,
    /// Full download URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::HTTP_URL))]
    pub url: Option<String>,
    /// Path on the component host (combined with `component.host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::NO_SPACE))]
    pub path: Option<String>,
    /// Checksum of the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Checksum>,
}

/// A SHA-256 checksum, inline or published at a URL/path.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Checksum {
    /// Hex SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::SHA256))]
    pub value: Option<String>,
    /// URL or component-host path of a `sha256sum`-style checksum file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::NO_SPACE))]
    pub path: Option<String>,
}

/// Image registry settings.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Registry {
    /// Accepted and ignored: CAPKK's `Registry` inlines `metav1.TypeMeta`, so its YAML may carry it.
    #[serde(default, rename = "apiVersion", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub api_version: Option<String>,
    /// Accepted and ignored (CAPKK's inlined `metav1.TypeMeta`, see `apiVersion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub kind: Option<String>,
    /// Private registry host used for system images (empty: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::PRIVATE_REGISTRY))]
    pub private_registry: Option<String>,
    /// Registries reached over plain HTTP or without TLS verification.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = {"type": "string", "pattern": crate::patterns::INSECURE_REGISTRY}))]
    pub insecure_registries: Vec<String>,
    /// Mirrors for docker.io (`https://mirror.example`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = {"type": "string", "pattern": crate::patterns::HTTP_URL}))]
    pub registry_mirrors: Vec<String>,
    /// Accepted for CAPKK compatibility; unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub namespace_override: Option<String>,
    /// Credentials and TLS for `privateRegistry`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<RegistryAuth>,
}

/// Registry credentials. Prefer `secretRef` (keys `username`, `password`).
#[derive(Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RegistryAuth {
    /// User name (inline, CAPKK compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub username: Option<String>,
    /// Password (inline, CAPKK compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub password: Option<String>,
    /// Secret in the same namespace with keys `username` and `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<crate::common::SecretRef>,
    /// Skip TLS verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
    /// Use plain HTTP.
    #[serde(default, rename = "plainHTTP", skip_serializing_if = "Option::is_none")]
    pub plain_http: Option<bool>,
    /// Directory of certificates on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), extend("pattern" = crate::patterns::HOST_PATH))]
    pub certs_path: Option<String>,
    /// CA file path on the host (written into containerd's `hosts.toml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), extend("pattern" = crate::patterns::HOST_PATH))]
    pub ca_file: Option<String>,
    /// Client certificate path on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), extend("pattern" = crate::patterns::HOST_PATH))]
    pub cert_file: Option<String>,
    /// Client key path on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), extend("pattern" = crate::patterns::HOST_PATH))]
    pub key_file: Option<String>,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("secret_ref", &self.secret_ref)
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .field("plain_http", &self.plain_http)
            .finish_non_exhaustive()
    }
}

/// Observed state of a KKCluster.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KKClusterStatus {
    /// v1beta2 contract: `provisioned` once the endpoint is known and the inventory is valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// Conditions: `Ready`, `Paused`, `HostsReachable`, `EndpointReady`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Conditions,
    /// Failure domains (none are defined for SSH hosts today).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<Vec<FailureDomain>>,
    /// Last probe result per host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub hosts: Vec<HostProbe>,
    /// Generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// What a probe saw on one host.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HostProbe {
    /// Instance name.
    pub name: String,
    /// Reachable over SSH with the configured auth.
    pub reachable: bool,
    /// Host-key fingerprint presented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<String>,
    /// `ID VERSION_ID` from /etc/os-release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// Architecture from `uname -m`, in Go naming (amd64, arm64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Why it is not usable (empty when fine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// KKClusterTemplate: a KKCluster blueprint for ClusterClass. The spec is immutable, enforced by the
/// ValidatingAdmissionPolicy in `config/admission` (it lets CAPI's topology dry-run through).
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KKClusterTemplate",
    plural = "kkclustertemplates",
    namespaced,
    shortname = "kkct",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1beta1"),
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KKClusterTemplateSpec {
    /// The KKCluster to stamp out.
    pub template: KKClusterTemplateResource,
}

/// `spec.template` of a KKClusterTemplate.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KKClusterTemplateResource {
    /// Labels and annotations for the created KKCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::ObjectMetaTemplate>,
    /// The KKCluster spec.
    pub spec: KKClusterSpec,
}
