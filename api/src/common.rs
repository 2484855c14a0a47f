//! Types shared by several kinds: SSH auth, roles, container runtime, repository, endpoints, conditions.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
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

/// Login user when neither the host nor the global auth names one (CAPKK's default).
pub const DEFAULT_SSH_USER: &str = "root";
/// SSH port when neither the host nor the global auth names one.
pub const DEFAULT_SSH_PORT: i32 = 22;
/// The largest `auth.timeout` in CAPKK's integer form (one hour in nanoseconds), the CRD's `maximum`.
pub const MAX_SSH_TIMEOUT_NANOS: i64 = 3_600_000_000_000;

/// SSH connect timeout: a duration string (`30s`, `1m`) or, as CAPKK stores its `*time.Duration`, an integer
/// number of nanoseconds. CAPKK's defaulted `30s` is `30000000000`, which does not fit the 32-bit integer of
/// `IntOrString`, hence this type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SshTimeout {
    /// Nanoseconds (CAPKK form).
    Nanos(i64),
    /// A Go-style duration string.
    Text(String),
}

impl JsonSchema for SshTimeout {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SshTimeout".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // `pattern` and `maxLength` apply to the text form, `minimum`/`maximum` to the integer (at most
        // one hour: a connect bound a tenant sets must not hold a host-work permit for longer).
        schemars::json_schema!({
            "x-kubernetes-int-or-string": true,
            "pattern": crate::patterns::SSH_TIMEOUT,
            "maxLength": 64,
            "minimum": 1,
            "maximum": MAX_SSH_TIMEOUT_NANOS,
        })
    }
}

impl SshTimeout {
    /// Whole seconds (at least 1); `None` when unparsable or not positive.
    pub fn seconds(&self) -> Option<u64> {
        match self {
            SshTimeout::Nanos(ns) if *ns > 0 => Some((*ns as u64).div_ceil(1_000_000_000).max(1)),
            SshTimeout::Nanos(_) => None,
            SshTimeout::Text(s) => parse_duration_seconds(s),
        }
    }
}

/// Schema of the global `spec.nodes.auth`: [`Auth`]'s, plus the defaults CAPKK's webhook wrote into the global
/// auth only (`user: root`, `port: 22`). Per-host auths get no defaults: a defaulted per-host `user` would
/// override the global one (an exported CAPKK object carries `auth: {}` on every host). `timeout` gets no
/// default either: unset on the host and globally, the manager's `--ssh-connect-timeout` applies (its default is
/// CAPKK's 30 s); a schema default would put 30 s on every host and the flag would never apply.
pub(crate) fn global_auth_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Auth>();
    if let Some(props) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for (key, default) in [
            ("user", serde_json::json!(DEFAULT_SSH_USER)),
            ("port", serde_json::json!(DEFAULT_SSH_PORT)),
        ] {
            if let Some(p) = props.get_mut(key).and_then(serde_json::Value::as_object_mut) {
                p.insert("default".into(), default);
            }
        }
    }
    schema.insert("default".into(), serde_json::json!({}));
    schema
}

/// SSH authentication. Secret references are preferred; inline `password`/`privateKey` are accepted for
/// CAPKK compatibility. The controller never copies secret material into other objects.
///
/// The same type serves the global `spec.nodes.auth` (which gets the defaults), the per-host
/// `instances[].auth` and the bastion's auth (which get none: what they leave unset or empty is inherited, see
/// [`Auth::merged_over`]).
#[derive(Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    /// Login user (global default `root`). A non-root user must be allowed to run `sudo`. Empty: inherited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub user: Option<String>,
    /// Inline password (CAPKK compatibility; prefer `secretRef`). Also used for `sudo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub password: Option<String>,
    /// SSH port (global default 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Inline private key in OpenSSH or PEM format (CAPKK compatibility; prefer `secretRef`). At most 64 KiB,
    /// the size of the largest key file read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65536))]
    pub private_key: Option<String>,
    /// Path of a private key file on the controller's file system, in the namespace's own directory
    /// `<--private-key-dir>/<namespace>/` of the manager (relative to it, or absolute inside it; no `..`
    /// component).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), extend("pattern" = crate::patterns::KEY_PATH))]
    pub private_key_path: Option<String>,
    /// Name of a Secret in the same namespace with keys `password` and/or `privateKey` (CAPKK form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("pattern" = crate::patterns::SECRET_NAME_OR_EMPTY))]
    pub secret: Option<String>,
    /// Reference to a Secret in the same namespace holding the credentials (preferred form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// Connect timeout (TCP connect, SSH handshake and authentication, each): a duration string (`30s`, `1m`)
    /// or an integer number of nanoseconds (CAPKK form). A host's own value wins over the global one; unset on
    /// both: the manager's `--ssh-connect-timeout` (default 30 s, CAPKK's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<SshTimeout>,
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

/// `mine` unless it is unset or empty, else `base` (CAPKK's merge of a string field).
fn inherit(mine: &Option<String>, base: &Option<String>) -> Option<String> {
    match mine {
        Some(s) if !s.is_empty() => mine.clone(),
        _ => base.clone().filter(|s| !s.is_empty()),
    }
}

impl Auth {
    /// True when this auth names at least one credential source.
    pub fn has_credentials(&self) -> bool {
        self.password.as_deref().is_some_and(|s| !s.is_empty())
            || self.private_key.as_deref().is_some_and(|s| !s.is_empty())
            || self.private_key_path.as_deref().is_some_and(|s| !s.is_empty())
            || self.secret.as_deref().is_some_and(|s| !s.is_empty())
            || self.secret_ref.as_ref().is_some_and(|r| !r.name.is_empty())
    }

    /// This (per-host) auth over `base` (the global one), with CAPKK's semantics: every field that is set and
    /// non-empty here wins, every field left unset or empty comes from `base`, field by field (CAPKK merged
    /// with `mergo.Merge`, which fills zero-valued fields only). So a host with `auth: {}` keeps the global
    /// user, and a host with only `privateKey` still gets the global password for `sudo`.
    ///
    /// Which credential logs in is decided afterwards from the merged fields, in the order private key,
    /// password, Secret (`secretRef`, then CAPKK's `secret`; read only when no inline credential is set, as
    /// CAPKK did), `privateKeyPath`.
    pub fn merged_over(&self, base: &Auth) -> Auth {
        Auth {
            user: inherit(&self.user, &base.user),
            password: inherit(&self.password, &base.password),
            port: self.port.or(base.port),
            private_key: inherit(&self.private_key, &base.private_key),
            private_key_path: inherit(&self.private_key_path, &base.private_key_path),
            secret: inherit(&self.secret, &base.secret),
            secret_ref: self
                .secret_ref
                .clone()
                .filter(|r| !r.name.is_empty())
                .or_else(|| base.secret_ref.clone().filter(|r| !r.name.is_empty())),
            timeout: self.timeout.clone().or_else(|| base.timeout.clone()),
        }
    }

    /// The login user: `user` when set and non-empty, else [`DEFAULT_SSH_USER`].
    pub fn user_or_default(&self) -> &str {
        self.user
            .as_deref()
            .filter(|u| !u.is_empty())
            .unwrap_or(DEFAULT_SSH_USER)
    }

    /// The SSH port: `port` when set, else [`DEFAULT_SSH_PORT`].
    pub fn port_or_default(&self) -> i32 {
        self.port.unwrap_or(DEFAULT_SSH_PORT)
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

    /// The connect timeout in seconds (CAPKK integers are nanoseconds). `None` when unset (the manager's
    /// `--ssh-connect-timeout` applies) or unparsable.
    pub fn timeout_seconds(&self) -> Option<u64> {
        self.timeout.as_ref()?.seconds()
    }
}

/// Parse a Go-style duration (`30s`, `1m30s`, `2h`, `500ms`) into whole seconds (at least 1); `None` when
/// unparsable or too large for 64 bits of milliseconds.
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
        let unit_ms: u64 = match unit.as_str() {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return None,
        };
        // A tenant writes the text: a sum that does not fit is unparsable, never a wrapped or panicking one.
        total_ms = total_ms.checked_add(n.checked_mul(unit_ms)?)?;
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
    /// Secret name (a DNS-1123 subdomain: it is part of the request path that reads the Secret).
    #[schemars(length(min = 1, max = 253), extend("pattern" = crate::patterns::DNS_SUBDOMAIN))]
    pub name: String,
}

/// A jump host through which the hosts are reached (direct-tcpip forwarding).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Bastion {
    /// Address of the bastion: an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number.
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": crate::patterns::HOST_ADDRESS_RULE,
        "message": "bastion.address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number"
    }]))]
    pub address: String,
    /// Auth for the bastion itself. Unset fields default to the nodes' user, port and timeout; without a credential
    /// of its own the nodes' key is used, never their password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
    /// Pinned SHA256 host-key fingerprints of the bastion (`SHA256:<base64>`, as `ssh-keygen -lf` prints),
    /// at most 8: copied into every KKInstance behind the bastion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[schemars(extend("items" = {
        "type": "string",
        "maxLength": 100,
        "pattern": crate::patterns::HOST_KEY_FINGERPRINT
    }))]
    pub host_keys: Vec<String>,
}

/// Host endpoint of the Kubernetes API server.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// Host name or IP address (a DNS name not ending in a number, or an IP address: no port, path or space;
    /// it reaches the Cluster's endpoint, the kubeconfig's URL and kubeadm's configuration). Empty: unset
    /// (CAPKK writes the zero endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": crate::patterns::HOST_ADDRESS_OR_EMPTY_RULE,
        "message": "controlPlaneEndpoint.host must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number, without port or path"
    }]))]
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
fn default_cri_socket() -> Option<String> {
    Some("unix:///var/run/containerd/containerd.sock".into())
}

/// Container runtime to install (containerd: the only runtime implemented; `type: docker` is accepted for
/// CAPKK compatibility and reported as unsupported). The versions and the sandbox image have no schema default:
/// what a field leaves unset follows the Machine's Kubernetes version (the component defaults table,
/// `capkk_service::components`), and `KKMachine.status.components` shows what was resolved.
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
    /// containerd version, with or without a leading `v`. Unset: the component default for the Machine's
    /// Kubernetes minor (containerd 2.2.1 for v1.31-v1.36).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub version: Option<String>,
    /// CRI socket (default `unix:///var/run/containerd/containerd.sock`).
    #[serde(default = "default_cri_socket", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 207), extend("pattern" = crate::patterns::CRI_SOCKET))]
    pub cri_socket: Option<String>,
    /// crictl version. Unset: the cri-tools release of the Machine's Kubernetes minor (`v1.36.0` for v1.36).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub crictl_version: Option<String>,
    /// cri-dockerd version (docker only; CAPKK compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub cri_dockerd_version: Option<String>,
    /// runc version. Unset: the component default for the Machine's Kubernetes minor (v1.3.4 for v1.31-v1.36).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::VERSION))]
    pub runc_version: Option<String>,
    /// Pod sandbox (pause) image for containerd's CRI plugin. Unset: `pause` at the tag kubeadm of the
    /// Machine's Kubernetes minor names (`3.10.2` for v1.36), from the KKCluster's
    /// `registry.privateRegistry` when set, else from `registry.k8s.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::IMAGE))]
    pub sandbox_image: Option<String>,
}

impl Default for ContainerManager {
    fn default() -> Self {
        Self {
            type_: default_cm_type(),
            version: None,
            cri_socket: default_cri_socket(),
            crictl_version: None,
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
