//! Types shared by several kinds: SSH auth, roles, container runtime, repository, endpoints, conditions.

use std::fmt;

use k8s_openapi::apimachinery::pkg::{apis::meta::v1::Condition, util::intstr::IntOrString};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A node role, as CAPKK names them. `master` is an alias of `control-plane`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Runs the Kubernetes control plane.
    #[serde(rename = "control-plane")]
    ControlPlane,
    /// Legacy alias of `control-plane`.
    #[serde(rename = "master")]
    Master,
    /// Runs workloads.
    #[serde(rename = "worker")]
    Worker,
}

impl Role {
    /// The role with `master` folded into `control-plane`.
    pub fn normalized(self) -> Role {
        match self {
            Role::Master => Role::ControlPlane,
            r => r,
        }
    }

    /// True when a host with `host_roles` may serve a machine that asks for `self`.
    pub fn served_by(self, host_roles: &[Role]) -> bool {
        host_roles.iter().any(|r| r.normalized() == self.normalized())
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::ControlPlane => "control-plane",
            Role::Master => "master",
            Role::Worker => "worker",
        })
    }
}

pub(crate) fn default_roles() -> Option<Vec<Role>> {
    Some(vec![Role::ControlPlane, Role::Worker])
}

pub(crate) fn default_arch() -> Option<String> {
    Some("amd64".into())
}

fn default_user() -> Option<String> {
    Some("root".into())
}

fn default_port() -> Option<i32> {
    Some(22)
}

fn default_timeout() -> Option<IntOrString> {
    Some(IntOrString::String("30s".into()))
}

/// SSH authentication. Secret references are preferred; inline `password`/`privateKey` are accepted for
/// CAPKK compatibility. The controller never copies secret material into other objects.
#[derive(Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    /// Login user (default `root`). A non-root user must be allowed to run `sudo`.
    #[serde(default = "default_user", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub user: Option<String>,
    /// Inline password (CAPKK compatibility; prefer `secretRef`). Also used for `sudo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// SSH port (default 22).
    #[serde(default = "default_port", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Inline private key in OpenSSH or PEM format (CAPKK compatibility; prefer `secretRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<String>,
    /// Path of a private key file on the controller's file system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_path: Option<String>,
    /// Name of a Secret in the same namespace with keys `password` and/or `privateKey` (CAPKK form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Reference to a Secret in the same namespace holding the credentials (preferred form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// Connect timeout: a duration string (`30s`, `1m`) or an integer number of nanoseconds (CAPKK form).
    #[serde(default = "default_timeout", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<IntOrString>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("port", &self.port)
            .field("private_key", &self.private_key.as_ref().map(|_| "<redacted>"))
            .field("private_key_path", &self.private_key_path)
            .field("secret", &self.secret)
            .field("secret_ref", &self.secret_ref)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Auth {
    /// True when this auth names at least one credential source.
    pub fn has_credentials(&self) -> bool {
        self.password.as_deref().is_some_and(|s| !s.is_empty())
            || self.private_key.as_deref().is_some_and(|s| !s.is_empty())
            || self.private_key_path.as_deref().is_some_and(|s| !s.is_empty())
            || self.secret.as_deref().is_some_and(|s| !s.is_empty())
            || self.secret_ref.is_some()
    }

    /// `self` with every unset field taken from `base` (per-host auth over the global one).
    pub fn merged_over(&self, base: &Auth) -> Auth {
        // A host that brings its own credential source does not inherit the global ones.
        let own = self.has_credentials();
        let pick = |mine: &Option<String>, theirs: &Option<String>| {
            if own {
                mine.clone()
            } else {
                mine.clone().or_else(|| theirs.clone())
            }
        };
        Auth {
            user: self.user.clone().or_else(|| base.user.clone()),
            port: self.port.or(base.port),
            timeout: self.timeout.clone().or_else(|| base.timeout.clone()),
            password: pick(&self.password, &base.password),
            private_key: pick(&self.private_key, &base.private_key),
            private_key_path: pick(&self.private_key_path, &base.private_key_path),
            secret: pick(&self.secret, &base.secret),
            secret_ref: if own {
                self.secret_ref.clone()
            } else {
                self.secret_ref.clone().or_else(|| base.secret_ref.clone())
            },
        }
    }

    /// The same auth with inline secret material removed (what may be copied into a KKInstance).
    pub fn without_inline_secrets(&self) -> Auth {
        Auth {
            password: None,
            private_key: None,
            ..self.clone()
        }
    }

    /// True when inline secret material is present (the KKInstance then reads it from its KKCluster).
    pub fn has_inline_secrets(&self) -> bool {
        self.password.is_some() || self.private_key.is_some()
    }

    /// The connect timeout in seconds; CAPKK integers are nanoseconds. `None` when unparsable.
    pub fn timeout_seconds(&self) -> Option<u64> {
        match self.timeout.as_ref()? {
            IntOrString::Int(ns) => Some((*ns as u64) / 1_000_000_000).map(|s| s.max(1)),
            IntOrString::String(s) => parse_duration_seconds(s),
        }
    }
}

/// Parse a Go-style duration (`30s`, `1m30s`, `2h`, `500ms`) into whole seconds (at least 1).
pub fn parse_duration_seconds(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Ok(n) = s.parse::<u64>() {
        return Some(n.max(1));
    }
    let mut total_ms: u64 = 0;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let mut unit = c.to_string();
        if c == 'm' && chars.peek() == Some(&'s') {
            unit.push(chars.next()?);
        }
        let n: u64 = num.parse().ok()?;
        num.clear();
        total_ms += match unit.as_str() {
            "ms" => n,
            "s" => n * 1000,
            "m" => n * 60_000,
            "h" => n * 3_600_000,
            _ => return None,
        };
    }
    if !num.is_empty() {
        return None;
    }
    Some(total_ms.div_ceil(1000).max(1))
}

/// Reference to a Secret in the object's own namespace.
///
/// Keys read: `password`, `privateKey`, `passphrase` (for an encrypted key), `sudoPassword`
/// (when sudo needs a password other than the login password).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A jump host through which the hosts are reached (direct-tcpip forwarding).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Bastion {
    /// Address (IP or DNS name) of the bastion.
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "!self.matches('^[0-9.]+$') || isIP(self)",
        "message": "bastion.address must be a valid IP address or DNS name"
    }]))]
    pub address: String,
    /// Auth for the bastion itself (defaults: the nodes' auth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
    /// Pinned SHA256 host-key fingerprints of the bastion (`SHA256:...`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_keys: Vec<String>,
}

/// Host endpoint of the Kubernetes API server.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// Host name or IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub host: Option<String>,
    /// Port (CAPKK writes 0 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 65535))]
    pub port: Option<i32>,
}

impl ApiEndpoint {
    /// True when a host and a non-zero port are set.
    pub fn is_set(&self) -> bool {
        self.host.as_deref().is_some_and(|h| !h.is_empty()) && self.port.is_some_and(|p| p > 0)
    }
}

fn default_cm_type() -> Option<String> {
    Some("containerd".into())
}
fn default_cm_version() -> Option<String> {
    Some("1.7.13".into())
}
fn default_cri_socket() -> Option<String> {
    Some("unix:///var/run/containerd/containerd.sock".into())
}
fn default_crictl_version() -> Option<String> {
    Some("v1.29.0".into())
}

/// Container runtime to install. Defaults describe containerd (the only runtime implemented;
/// `type: docker` is accepted for CAPKK compatibility and reported as unsupported).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerManager {
    /// `containerd` (default) or `docker`.
    #[serde(
        default = "default_cm_type",
        rename = "type",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["containerd", "docker"]))]
    pub type_: Option<String>,
    /// Runtime version, with or without a leading `v` (default `1.7.13`).
    #[serde(default = "default_cm_version", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub version: Option<String>,
    /// CRI socket (default `unix:///var/run/containerd/containerd.sock`).
    #[serde(default = "default_cri_socket", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::CRI_SOCKET))]
    pub cri_socket: Option<String>,
    /// crictl version (default `v1.29.0`).
    #[serde(default = "default_crictl_version", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub crictl_version: Option<String>,
    /// cri-dockerd version (docker only; CAPKK compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub cri_dockerd_version: Option<String>,
    /// runc version (default: the catalogue's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub runc_version: Option<String>,
    /// Pod sandbox (pause) image for containerd's CRI plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::IMAGE))]
    pub sandbox_image: Option<String>,
}

impl Default for ContainerManager {
    fn default() -> Self {
        Self {
            type_: default_cm_type(),
            version: default_cm_version(),
            cri_socket: default_cri_socket(),
            crictl_version: default_crictl_version(),
            cri_dockerd_version: None,
            runc_version: None,
            sandbox_image: None,
        }
    }
}

/// OS package handling on the host.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Repository {
    /// `""` (skip the repository step), `none` (use the host's configured sources), `auto` (pick an ISO
    /// by OS and arch) or an ISO file name served by the component host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::ISO))]
    pub iso: Option<String>,
    /// Refresh package indexes before installing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<bool>,
    /// Packages to install instead of the default set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = {"type": "string", "pattern": crate::patterns::PACKAGE}))]
    pub packages: Vec<String>,
}

/// `status.initialization` of the v1beta2 contract.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Initialization {
    /// True once the infrastructure is provisioned; never flips back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// A machine address (`status.addresses`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MachineAddress {
    /// Hostname, ExternalIP, InternalIP, ExternalDNS or InternalDNS.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["Hostname", "ExternalIP", "InternalIP", "ExternalDNS", "InternalDNS"]))]
    pub type_: String,
    /// The address.
    #[schemars(length(min = 1, max = 256))]
    pub address: String,
}

/// A failure domain (`status.failureDomains`, v1beta2 list form).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    /// Name of the failure domain.
    pub name: String,
    /// Whether control-plane machines may be placed in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    /// Free-form attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<std::collections::BTreeMap<String, String>>,
}

/// Schema extension for `status.conditions`: a list-map keyed on `type`.
pub(crate) type Conditions = Vec<Condition>;
