//! Reaching hosts: the SSH factory seam, credential resolution (Secrets or the KKCluster's inline auth, at
//! use time, never copied) and [`HostTarget`] construction with the host-key policy.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use capkk_api::{Auth as ApiAuth, Bastion, InstanceInfo, KKCluster, KKInstance};
use capkk_executor::{ExecError, Executor};
use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, KeySource, Observed, SecretSlice, SshPool};
use futures::future::BoxFuture;
use k8s_openapi::{ByteString, api::core::v1::Secret as K8sSecret};
use kube::{Api, Client};

use crate::error::{Error, Result};

/// Creates executors for hosts. The manager uses the real [`SshPool`]; tests use the same pool against
/// sandbox hosts.
pub(crate) trait SshFactory: Send + Sync {
    /// An executor for `target`.
    fn executor(&self, target: &HostTarget) -> Arc<dyn Executor>;
    /// The host key fingerprint seen on the latest connection to `target` (trust on first use).
    fn observed_fingerprint(&self, target: &HostTarget) -> Option<String>;
    /// Connect to `target` and report its host key and the address reached, running nothing on it (the
    /// host's identity is settled before any work: [`crate::host_claims`]).
    fn observe<'a>(&'a self, target: &'a HostTarget) -> BoxFuture<'a, Result<Observed, ExecError>>;
    /// Drop every pooled connection namespace `ns` has to `address` (its KKInstance is gone); other
    /// namespaces' connections to the address stay.
    fn forget(&self, _ns: &str, _address: &str) {}
}

impl SshFactory for SshPool {
    fn executor(&self, target: &HostTarget) -> Arc<dyn Executor> {
        SshPool::executor(self, target)
    }

    fn observed_fingerprint(&self, target: &HostTarget) -> Option<String> {
        SshPool::observed_fingerprint(self, target)
    }

    fn observe<'a>(&'a self, target: &'a HostTarget) -> BoxFuture<'a, Result<Observed, ExecError>> {
        Box::pin(SshPool::observe(self, target))
    }

    fn forget(&self, ns: &str, address: &str) {
        SshPool::evict_address(self, Some(ns), address);
    }
}

/// The message of a dial the SSH pool's address policy refused ([`ExecError::AddressRefused`]; `None` for
/// any other error): the field holding the address (`field`, or `bastion_field` when the bastion's was
/// refused), what the address is and the flag that decides. Nothing was dialled, so it is the same whatever
/// the port and whatever listens there: no port-scan oracle.
pub(crate) fn address_refused(e: &ExecError, field: &str, bastion_field: &str) -> Option<String> {
    use capkk_executor::address::Refusal;
    let ExecError::AddressRefused {
        address,
        bastion,
        resolved,
        refusal,
    } = e
    else {
        return None;
    };
    let field = if *bastion { bastion_field } else { field };
    let verb = if *resolved { "resolves to" } else { "is" };
    let flag = match refusal {
        Refusal::Loopback => " (allowed only by --ssh-allow-cidr)",
        Refusal::Denied(_) => " (--ssh-deny-cidr; --ssh-allow-cidr makes exceptions)",
        _ => "",
    };
    Some(format!(
        "{field}: {address} {verb} {refusal}{flag}; refused before dialling"
    ))
}

/// The effective auth of one inventory host (per-host over global), inline secrets included.
pub(crate) fn host_auth(cluster: &KKCluster, host: &InstanceInfo) -> ApiAuth {
    match &host.auth {
        Some(a) => a.merged_over(&cluster.spec.nodes.auth),
        None => cluster.spec.nodes.auth.clone(),
    }
}

/// Whether `auth` names a credential of its own (password, key, key file or Secret).
fn has_credential(auth: &ApiAuth) -> bool {
    let set = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    set(&auth.password)
        || set(&auth.private_key)
        || set(&auth.private_key_path)
        || set(&auth.secret)
        || auth.secret_ref.as_ref().is_some_and(|r| !r.name.is_empty())
}

/// The bastion with its auth defaulted from the nodes' auth. The login user, port and timeout default field by
/// field. Credentials: the bastion's own when `bastion.auth` names any; else the nodes' key (inline, file or
/// Secret), never the nodes' inline password: a bastion is often another operator's machine, and a password,
/// unlike a key signature, is handed to it in clear text. A Secret shared with the hosts gives the bastion its
/// key only ([`target`]).
pub(crate) fn effective_bastion(cluster: &KKCluster) -> Option<Bastion> {
    let b = cluster.spec.nodes.bastion.clone()?;
    let nodes = &cluster.spec.nodes.auth;
    let own = b.auth.clone().unwrap_or_default();
    let auth = if has_credential(&own) {
        ApiAuth {
            user: own
                .user
                .clone()
                .filter(|u| !u.is_empty())
                .or_else(|| nodes.user.clone()),
            port: own.port.or(nodes.port),
            timeout: own.timeout.clone().or_else(|| nodes.timeout.clone()),
            ..own
        }
    } else {
        ApiAuth {
            password: None,
            ..own.merged_over(nodes)
        }
    };
    Some(Bastion {
        auth: Some(auth),
        ..b
    })
}

/// The Secret an auth reads (`secretRef`, then CAPKK's `secret`), when it sets one.
fn secret_name(auth: &ApiAuth) -> Option<&str> {
    auth.secret_ref
        .as_ref()
        .map(|r| r.name.as_str())
        .or(auth.secret.as_deref())
        .filter(|s| !s.is_empty())
}

/// Whether a password may authenticate to the bastion: not when its Secret is the host's own (inherited from
/// the nodes' auth, or named again), whose password is the hosts' and stays off the bastion.
fn bastion_password_allowed(bastion: &ApiAuth, host: &ApiAuth) -> bool {
    match secret_name(bastion) {
        Some(name) => secret_name(host) != Some(name),
        None => true,
    }
}

fn secret_value(data: &BTreeMap<String, ByteString>, key: &str) -> Option<SecretSlice<u8>> {
    data.get(key)
        .filter(|v| !v.0.is_empty())
        .map(|v| SecretSlice::from(v.0.clone()))
}

async fn read_secret(client: &Client, ns: &str, name: &str) -> Result<BTreeMap<String, ByteString>> {
    // The name becomes a path segment of the request: `/`, `?` or `..` would address something else.
    if !capkk_api::is_dns_subdomain(name) {
        return Err(Error::ResolveCredentials(format!(
            "Secret name {name:?} is not a DNS-1123 subdomain"
        )));
    }
    let api: Api<K8sSecret> = Api::namespaced(client.clone(), ns);
    let s = api
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("get Secret {ns}/{name}")))?
        .ok_or_else(|| Error::ResolveCredentials(format!("Secret {ns}/{name} not found")))?;
    Ok(s.data.unwrap_or_default())
}

static PRIVATE_KEY_DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();

/// Set (once, at start-up) the directory whose per-namespace subdirectories `privateKeyPath` may name a file
/// in ([`namespace_key_dir`]): the manager's `--private-key-dir`. Unset or `None`: `privateKeyPath` is refused
/// (a path in a tenant's object must not read the manager's files).
pub(crate) fn set_private_key_dir(dir: Option<std::path::PathBuf>) {
    let _ = PRIVATE_KEY_DIR.set(dir);
}

fn private_key_dir() -> Option<std::path::PathBuf> {
    PRIVATE_KEY_DIR.get().cloned().flatten()
}

/// The directory a namespace's `privateKeyPath` keys are read from: `<--private-key-dir>/<namespace>`. A
/// namespace name is a DNS label (no `/`, never `.` or `..`), so each namespace has its own directory and none
/// can name another's key, by a relative path or an absolute one.
pub(crate) fn namespace_key_dir(dir: &std::path::Path, ns: &str) -> std::path::PathBuf {
    dir.join(ns)
}

/// Reads the key `path` (relative to the namespace's key directory, or absolute inside it) for an object of
/// namespace `ns`; `dir` is `--private-key-dir` (`None` refuses every path).
async fn read_private_key_path(
    dir: Option<&std::path::Path>,
    ns: &str,
    path: &str,
    field: &str,
) -> Result<SecretSlice<u8>> {
    let scoped = dir.map(|d| namespace_key_dir(d, ns));
    capkk_ssh::keyfile::read_confined(
        scoped.as_deref(),
        std::path::Path::new(path),
        capkk_ssh::keyfile::MAX_KEY_BYTES,
    )
    .await
    .map_err(|m| Error::ResolveCredentials(format!("{field}.privateKeyPath: {m}")))
}

/// The host key the KKCluster's last probe recorded for `host` (trust on first use), unless keys are pinned.
pub(crate) fn probed_host_key(kkc: &KKCluster, host: &capkk_api::InstanceInfo) -> Option<String> {
    if !host.host_keys.is_empty() {
        return None;
    }
    let name = host.host_name();
    kkc.status
        .as_ref()?
        .hosts
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.host_key.clone())
        .filter(|k| !k.is_empty())
}

/// Login user, port, credentials and sudo password resolved from `auth`.
pub(crate) struct Resolved {
    /// Login user.
    pub user: String,
    /// SSH port.
    pub port: u16,
    /// Credentials.
    pub auth: Auth,
    /// Password for sudo (non-root users).
    pub sudo_password: Option<SecretSlice<u8>>,
    /// The auth's `timeout` (connect bound); `None` when unset: the manager's `--ssh-connect-timeout`.
    pub connect_timeout: Option<Duration>,
}

/// The connect bound `auth.timeout` asks for: `None` when unset (the manager's `--ssh-connect-timeout`
/// applies), an error naming `{field}.timeout` when it is not a positive duration.
pub(crate) fn connect_timeout(auth: &ApiAuth, field: &str) -> Result<Option<Duration>> {
    if auth.timeout.is_none() {
        return Ok(None);
    }
    match auth.timeout_seconds() {
        Some(s) if s > 0 => Ok(Some(Duration::from_secs(s))),
        _ => Err(Error::InvalidSpec {
            field: format!("{field}.timeout"),
            message: "not a positive duration (e.g. `30s`) or number of nanoseconds".into(),
        }),
    }
}

/// Resolve `auth` into credentials. Order: inline private key, inline password, `secretRef`, `secret`
/// (CAPKK), `privateKeyPath`. `field` names the auth in error messages.
pub(crate) async fn resolve_auth(client: &Client, ns: &str, auth: &ApiAuth, field: &str) -> Result<Resolved> {
    resolve_auth_with(client, ns, auth, field, true).await
}

/// [`resolve_auth`]; without `secret_password`, a `password` in the Secret is neither a credential nor the sudo
/// password (the bastion reading the hosts' Secret: [`bastion_password_allowed`]).
async fn resolve_auth_with(
    client: &Client,
    ns: &str,
    auth: &ApiAuth,
    field: &str,
    secret_password: bool,
) -> Result<Resolved> {
    let user = auth.user_or_default().to_owned();
    let port = auth.port_or_default();
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Error::InvalidSpec {
            field: format!("{field}.port"),
            message: format!("{port} is not a TCP port"),
        })?;
    let connect_timeout = connect_timeout(auth, field)?;
    let mut password: Option<SecretSlice<u8>> = auth
        .password
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(|p| SecretSlice::from(p.as_bytes().to_vec()));
    let mut key: Option<SecretSlice<u8>> = auth
        .private_key
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(|k| SecretSlice::from(k.as_bytes().to_vec()));
    let mut passphrase = None;
    let mut sudo = None;
    let secret_name = auth
        .secret_ref
        .as_ref()
        .map(|r| r.name.clone())
        .or_else(|| auth.secret.clone())
        .filter(|s| !s.is_empty());
    if let Some(name) = secret_name.as_deref()
        && (key.is_none() && password.is_none())
    {
        let data = read_secret(client, ns, name).await?;
        key = secret_value(&data, "privateKey");
        passphrase = secret_value(&data, "passphrase");
        if !secret_password {
            if key.is_none() {
                return Err(Error::ResolveCredentials(format!(
                    "Secret {ns}/{name} (from {field}) is the hosts' Secret and has no `privateKey`: the hosts' \
                     password is not sent to the bastion; name the bastion's own credentials in {field}"
                )));
            }
        } else {
            password = secret_value(&data, "password");
            sudo = secret_value(&data, "sudoPassword");
            if key.is_none() && password.is_none() {
                return Err(Error::ResolveCredentials(format!(
                    "Secret {ns}/{name} (from {field}) has neither `privateKey` nor `password`"
                )));
            }
        }
    }
    let creds = if let Some(k) = key {
        Auth::PrivateKey {
            key: KeySource::Bytes(k),
            passphrase,
        }
    } else if let Some(p) = password.clone() {
        Auth::Password(p)
    } else if let Some(path) = auth.private_key_path.as_deref().filter(|p| !p.is_empty()) {
        Auth::PrivateKey {
            key: KeySource::Bytes(
                read_private_key_path(private_key_dir().as_deref(), ns, path, field).await?,
            ),
            passphrase: None,
        }
    } else {
        return Err(Error::ResolveCredentials(format!(
            "{field} sets none of password, privateKey, privateKeyPath, secret or secretRef"
        )));
    };
    if user != "root" && sudo.is_none() {
        sudo = password;
    }
    Ok(Resolved {
        user,
        port,
        auth: creds,
        sudo_password: sudo,
        connect_timeout,
    })
}

/// Everything needed to dial one host.
pub(crate) struct HostDial<'a> {
    /// Host name (for messages).
    pub name: &'a str,
    /// Address.
    pub address: &'a str,
    /// Effective auth.
    pub auth: &'a ApiAuth,
    /// Pinned fingerprints (KKCluster).
    pub pinned: &'a [String],
    /// Fingerprint recorded on first use (KKInstance).
    pub recorded: Option<&'a str>,
    /// Bastion (auth already defaulted).
    pub bastion: Option<&'a Bastion>,
}

/// Build the [`HostTarget`] for a host.
pub(crate) async fn target(client: &Client, ns: &str, dial: &HostDial<'_>) -> Result<HostTarget> {
    let field = format!("auth of host {}", dial.name);
    let r = resolve_auth(client, ns, dial.auth, &field).await?;
    let policy = if !dial.pinned.is_empty() {
        HostKeyPolicy::Pinned(dial.pinned.to_vec())
    } else if let Some(fp) = dial.recorded.filter(|f| !f.is_empty()) {
        HostKeyPolicy::pinned(fp)
    } else {
        HostKeyPolicy::TrustOnFirstUse
    };
    // Owned by the namespace: one tenant's deleted host or rotated Secret never drops another's connections.
    let mut t = HostTarget::new(dial.address, r.user, r.auth)
        .port(r.port)
        .host_key(policy)
        .owner(ns);
    t.sudo_password = r.sudo_password;
    t.connect_timeout = r.connect_timeout;
    if let Some(b) = dial.bastion {
        let auth = b.auth.clone().unwrap_or_default();
        let secret_password = bastion_password_allowed(&auth, dial.auth);
        let br = resolve_auth_with(client, ns, &auth, "spec.nodes.bastion.auth", secret_password).await?;
        let policy = if b.host_keys.is_empty() {
            HostKeyPolicy::TrustOnFirstUse
        } else {
            HostKeyPolicy::Pinned(b.host_keys.clone())
        };
        let mut bt = HostTarget::new(b.address.clone(), br.user, br.auth)
            .port(br.port)
            .host_key(policy)
            .owner(ns);
        bt.connect_timeout = br.connect_timeout;
        t = t.via(bt);
    }
    Ok(t)
}

/// The SSH auth and bastion of a KKInstance: from its KKCluster (the host's entry merged over the cluster-wide
/// auth) when the KKCluster still lists the host, else what the KKInstance carries itself. `None` auth: the
/// KKInstance carries none.
pub(crate) fn instance_auth_and_bastion(
    inst: &KKInstance,
    cluster: Option<&KKCluster>,
) -> (Option<ApiAuth>, Option<Bastion>) {
    let host = cluster.and_then(|c| {
        c.spec
            .nodes
            .instances
            .iter()
            .find(|h| h.host_name() == inst.spec.name)
    });
    let auth = match (cluster, host) {
        (Some(c), Some(h)) => Some(host_auth(c, h)),
        _ => inst.spec.auth.clone(),
    };
    let bastion = match cluster {
        Some(c) => effective_bastion(c),
        None => inst.spec.bastion.clone(),
    };
    (auth, bastion)
}

/// A bastion key trusted on first use is recorded in the KKInstances behind it (`spec.bastion.hostKeys`): pin
/// `bastion` to the keys `claims` recorded for its address, unless its spec pins keys itself. Without this
/// every new pool slot (after each restart) would trust whatever key answered first and hand it the bastion's
/// credentials.
pub(crate) fn pin_recorded_bastion_key<'a>(
    bastion: &mut Bastion,
    claims: impl IntoIterator<Item = &'a KKInstance>,
) {
    if !bastion.host_keys.is_empty() {
        return;
    }
    let mut keys: Vec<String> = claims
        .into_iter()
        .filter_map(|i| i.spec.bastion.as_ref())
        .filter(|r| r.address == bastion.address)
        .flat_map(|r| r.host_keys.iter().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    bastion.host_keys = keys;
}

/// The target of a KKInstance. Credentials come from its KKCluster (inline or Secret refs) when the
/// KKCluster still exists, else from the Secret references in the KKInstance.
pub(crate) async fn instance_target(
    client: &Client,
    inst: &KKInstance,
    cluster: Option<&KKCluster>,
) -> Result<HostTarget> {
    let ns = inst.metadata.namespace.clone().unwrap_or_default();
    let (auth, mut bastion) = instance_auth_and_bastion(inst, cluster);
    let auth = auth.unwrap_or_default();
    if let Some(b) = bastion.as_mut() {
        pin_recorded_bastion_key(b, [inst]);
    }
    target(
        client,
        &ns,
        &HostDial {
            name: &inst.spec.name,
            address: &inst.spec.address,
            auth: &auth,
            pinned: &inst.spec.host_keys,
            recorded: inst.spec.host_key.as_deref(),
            bastion: bastion.as_ref(),
        },
    )
    .await
}

/// The KKCluster named `kkc` is the one `inst` comes from (its spec's `clusterName`, else CAPKK's label).
pub(crate) fn of_kkcluster(inst: &KKInstance, kkc: &str) -> bool {
    use kube::ResourceExt as _;
    inst.spec.cluster_name.as_deref() == Some(kkc)
        || inst
            .labels()
            .get(capkk_api::consts::KKCLUSTER_NAME_LABEL)
            .map(String::as_str)
            == Some(kkc)
}

/// True while `inst` is a control-plane host of its cluster: claimed for a control-plane Machine (CAPI's
/// control-plane label, copied onto the KKInstance), neither quarantined nor released nor being deleted.
pub(crate) fn is_control_plane_member(inst: &KKInstance) -> bool {
    use capkk_api::consts::{CONTROL_PLANE_LABEL, RELEASE_ANNOTATION};
    use kube::ResourceExt as _;
    inst.labels().contains_key(CONTROL_PLANE_LABEL)
        && inst.spec.quarantine.is_none()
        && !inst.annotations().contains_key(RELEASE_ANNOTATION)
        && inst.metadata.deletion_timestamp.is_none()
}

/// `inst` as a member of the control-plane endpoint: its host name and internal address (else its address).
pub(crate) fn member_of(inst: &KKInstance) -> capkk_service::loadbalancer::Member {
    capkk_service::loadbalancer::Member {
        name: inst.spec.name.clone(),
        address: inst
            .spec
            .internal_address
            .clone()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| inst.spec.address.clone()),
    }
}

/// The control-plane hosts of KKCluster `kkc` among `instances` (one namespace's KKInstances), sorted by name.
pub(crate) fn control_plane_members(
    instances: &[Arc<KKInstance>],
    kkc: &str,
) -> Vec<capkk_service::loadbalancer::Member> {
    let mut m: Vec<_> = instances
        .iter()
        .filter(|i| of_kkcluster(i, kkc) && is_control_plane_member(i))
        .map(|i| member_of(i))
        .collect();
    m.sort();
    m.dedup_by(|a, b| a.name == b.name);
    m
}

/// The membership as [`capkk_api::consts::LOADBALANCER_MEMBERS_ANNOTATION`] records it.
pub(crate) fn members_text(members: &[capkk_service::loadbalancer::Member]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}", m.name, m.address))
        .collect::<Vec<_>>()
        .join(",")
}

/// True when the control-plane endpoint is (or would be) one of the inventory's hosts: no load balancer
/// address, and the endpoint unset (the controller publishes the first control-plane host) or a host's
/// address. With more than one control plane, losing that host loses the cluster.
pub(crate) fn endpoint_is_a_host(kkc: &KKCluster) -> bool {
    if kkc
        .spec
        .control_plane_load_balancer
        .as_ref()
        .and_then(|l| l.host())
        .is_some()
    {
        return false;
    }
    match kkc
        .spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.host.as_deref())
        .filter(|h| !h.is_empty())
    {
        None => true,
        Some(h) => kkc
            .spec
            .nodes
            .instances
            .iter()
            .any(|i| i.address == h || i.internal_address() == h),
    }
}

/// The API servers' bind port: the Cluster's `spec.clusterNetwork.apiServerPort`, default 6443.
pub(crate) fn api_server_port(cluster: Option<&crate::capi::Cluster>) -> u16 {
    cluster
        .and_then(|c| c.spec.cluster_network.as_ref())
        .and_then(|n| n.api_server_port)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(6443)
}

/// What the load-balancer phase does on `inst`, given its KKCluster, the namespace's KKInstances and the API
/// servers' port: serve the endpoint (a control plane of a `Keepalived` cluster; the members are the cluster's
/// control-plane hosts now, `inst` included), refuse the host (a second control plane when the endpoint is one
/// control-plane host), or nothing.
pub(crate) fn load_balancer_plan(
    kkc: &KKCluster,
    inst: &KKInstance,
    instances: &[Arc<KKInstance>],
    api_server_port: u16,
) -> crate::services::LoadBalancerPlan {
    use crate::services::LoadBalancerPlan;
    use kube::ResourceExt as _;
    if !is_control_plane_member(inst) {
        return LoadBalancerPlan::Nothing;
    }
    let name = kkc.name_any();
    let this = member_of(inst);
    let mut members = control_plane_members(instances, &name);
    if !members.iter().any(|m| m.name == this.name) {
        members.push(this.clone());
        members.sort();
    }
    match kkc.spec.control_plane_load_balancer.as_ref() {
        Some(lb) if lb.is_keepalived() => {
            let ns = kkc.namespace().unwrap_or_default();
            LoadBalancerPlan::Serve(capkk_service::loadbalancer::LoadBalancerConfig {
                cluster: format!("{ns}/{name}"),
                vip: lb.host().unwrap_or_default().to_owned(),
                port: lb
                    .port
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(capkk_api::DEFAULT_LOADBALANCER_PORT),
                api_server_port,
                interface: lb.interface.clone().filter(|i| !i.is_empty()),
                virtual_router_id: lb
                    .virtual_router_id
                    .and_then(|v| u8::try_from(v).ok())
                    .unwrap_or_else(|| capkk_service::loadbalancer::default_virtual_router_id(&ns, &name)),
                this,
                members,
            })
        }
        _ if endpoint_is_a_host(kkc) && members.iter().any(|m| m.name != this.name) => {
            let others: Vec<&str> = members
                .iter()
                .filter(|m| m.name != this.name)
                .map(|m| m.name.as_str())
                .collect();
            LoadBalancerPlan::Refuse(format!(
                "a second control plane (besides {}) with no load balancer: the control-plane endpoint is one control-plane host, and losing it would lose the cluster; set spec.controlPlaneLoadBalancer (type Keepalived, or the address of an external load balancer) when creating the cluster",
                others.join(", ")
            ))
        }
        _ => LoadBalancerPlan::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capkk_ssh::ExposeSecret;

    #[tokio::test]
    async fn a_namespace_reads_only_its_own_key_directory_and_cannot_name_another_namespaces_key() {
        let dir = std::env::temp_dir().join(format!("capkk-nskeys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for ns in ["tenant-a", "tenant-b"] {
            std::fs::create_dir_all(dir.join(ns)).unwrap();
            std::fs::write(dir.join(ns).join("id"), format!("KEY-OF-{ns}")).unwrap();
        }
        std::fs::write(dir.join("shared"), "SHARED-KEY").unwrap();
        let read = |ns: &'static str, path: String| {
            let dir = dir.clone();
            async move { read_private_key_path(Some(&dir), ns, &path, "spec.nodes.auth").await }
        };
        let own = read("tenant-a", "id".into())
            .await
            .expect("a relative path in a's directory");
        assert_eq!(own.expose_secret(), b"KEY-OF-tenant-a");
        let own_abs = read("tenant-b", dir.join("tenant-b/id").display().to_string())
            .await
            .expect("absolute in b's");
        assert_eq!(own_abs.expose_secret(), b"KEY-OF-tenant-b");
        for path in [
            dir.join("tenant-b/id").display().to_string(),
            "../tenant-b/id".into(),
            dir.join("shared").display().to_string(),
            "../shared".into(),
        ] {
            let e = read("tenant-a", path.clone()).await.expect_err(&path).to_string();
            assert!(e.contains("spec.nodes.auth.privateKeyPath"), "{path}: {e}");
            assert!(
                e.contains(&dir.join("tenant-a").display().to_string()),
                "names a's directory: {e}"
            );
            assert!(!e.contains("KEY-OF") && !e.contains("SHARED-KEY"), "{e}");
        }
        // A namespace without a directory reads nothing; no directory at all refuses every path.
        assert!(read("tenant-c", "id".into()).await.is_err());
        let off = read_private_key_path(None, "tenant-a", "id", "f")
            .await
            .unwrap_err()
            .to_string();
        assert!(off.contains("--private-key-dir"), "{off}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_secret_name_that_would_change_the_request_path_is_refused_before_any_request() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // An API server that counts connections and closes each at once.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let seen = hits.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        // Objects written before the CRD pattern existed, or by clients that skip validation, still carry these.
        for name in ["ssh?labelSelector=x", "a/b", "..", "ssh%2F..", "Upper"] {
            let e = read_secret(&client, "tenant-a", name)
                .await
                .expect_err(name)
                .to_string();
            assert!(e.contains("is not a DNS-1123 subdomain"), "{name}: {e}");
        }
        assert_eq!(hits.load(Ordering::SeqCst), 0, "a request was sent");
        // A valid name is requested (and fails here only because this server answers nothing).
        assert!(read_secret(&client, "tenant-a", "ssh").await.is_err());
        assert!(hits.load(Ordering::SeqCst) > 0, "a valid name is read");
    }

    /// A KKCluster with inline passwords (no Secret is read, so no apiserver is needed): `a` sets its own
    /// timeout, `b` inherits the global one; the bastion sets none.
    fn kkc(global_timeout: Option<serde_json::Value>) -> KKCluster {
        let mut auth = serde_json::json!({"user": "root", "password": "pw"});
        if let Some(t) = global_timeout {
            auth["timeout"] = t;
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "KKCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"nodes": {
                "auth": auth,
                "bastion": {"address": "198.18.0.1", "auth": {"password": "bpw"}},
                "instances": [
                    {"name": "a", "address": "198.18.0.11", "auth": {"timeout": "5s"}},
                    {"name": "b", "address": "198.18.0.12"},
                ],
            }},
        }))
        .unwrap()
    }

    async fn dial(kkc: &KKCluster, host: usize) -> Result<HostTarget> {
        let client = Client::try_from(kube::Config::new("http://198.18.0.1:9".parse().unwrap())).unwrap();
        let h = &kkc.spec.nodes.instances[host];
        let auth = host_auth(kkc, h);
        let bastion = effective_bastion(kkc);
        target(
            &client,
            "ns",
            &HostDial {
                name: "x",
                address: &h.address,
                auth: &auth,
                pinned: &[],
                recorded: None,
                bastion: bastion.as_ref(),
            },
        )
        .await
    }

    /// A KKCluster whose nodes log in as `ops` with `nodes` auth, behind a bastion with `bastion` auth.
    fn behind_bastion(nodes: serde_json::Value, bastion: Option<serde_json::Value>) -> KKCluster {
        let mut b = serde_json::json!({"address": "198.18.0.1"});
        if let Some(a) = bastion {
            b["auth"] = a;
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "KKCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"nodes": {
                "auth": nodes,
                "bastion": b,
                "instances": [{"name": "a", "address": "198.18.0.11"}],
            }},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_bastion_without_credentials_of_its_own_gets_the_nodes_key_and_user_but_never_their_password() {
        let c = behind_bastion(
            serde_json::json!({"user": "ops", "port": 2222, "password": "NODES-PW", "privateKey": "NODES-KEY"}),
            None,
        );
        let auth = effective_bastion(&c).unwrap().auth.unwrap();
        assert_eq!(auth.password, None, "the nodes' password is not the bastion's");
        assert_eq!(auth.private_key.as_deref(), Some("NODES-KEY"));
        assert_eq!((auth.user.as_deref(), auth.port), (Some("ops"), Some(2222)));
        // Only a password on the nodes: the bastion has no credential, and says so without the password.
        for bastion in [None, Some(serde_json::json!({"user": "jump"}))] {
            let c = behind_bastion(
                serde_json::json!({"user": "ops", "password": "NODES-PW"}),
                bastion,
            );
            let e = dial(&c, 0)
                .await
                .expect_err("the nodes' password reached the bastion");
            let e = e.to_string();
            assert!(e.contains("spec.nodes.bastion.auth"), "{e}");
            assert!(!e.contains("NODES-PW"), "{e}");
        }
    }

    #[tokio::test]
    async fn a_bastion_without_its_own_credentials_gets_the_key_in_the_nodes_secret_never_its_password() {
        // The nodes' Secret, served by the scripted API server; `target` is what dials, so it is what is checked.
        async fn dial_with_secret(data: &[(&str, &str)]) -> Result<HostTarget> {
            let secret = K8sSecret {
                metadata: kube::api::ObjectMeta {
                    name: Some("nodes-ssh".into()),
                    namespace: Some("ns".into()),
                    ..Default::default()
                },
                data: Some(
                    data.iter()
                        .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                        .collect(),
                ),
                ..Default::default()
            };
            let secret = serde_json::to_value(&secret).unwrap();
            let t = crate::fixtures::TestContext::new();
            let served = t.api.serve(move |call| {
                (call.method == "GET" && call.path == "/api/v1/namespaces/ns/secrets/nodes-ssh")
                    .then(|| secret.clone())
            });
            let c = behind_bastion(
                serde_json::json!({"user": "ops", "secretRef": {"name": "nodes-ssh"}}),
                None,
            );
            let h = &c.spec.nodes.instances[0];
            let auth = host_auth(&c, h);
            let bastion = effective_bastion(&c);
            let res = target(
                &t.ctx.client,
                "ns",
                &HostDial {
                    name: "a",
                    address: &h.address,
                    auth: &auth,
                    pinned: &[],
                    recorded: None,
                    bastion: bastion.as_ref(),
                },
            )
            .await;
            served.finish();
            res
        }
        let t = dial_with_secret(&[("password", "NODES-PW"), ("privateKey", "NODES-KEY")])
            .await
            .unwrap();
        assert!(
            matches!(&t.auth, Auth::PrivateKey { key: KeySource::Bytes(k), .. } if k.expose_secret() == b"NODES-KEY")
        );
        let b = t.bastion.expect("bastion");
        assert!(
            matches!(&b.auth, Auth::PrivateKey { key: KeySource::Bytes(k), .. } if k.expose_secret() == b"NODES-KEY"),
            "the bastion gets the nodes' key"
        );
        assert_eq!(b.user, "ops");
        // Without a key the password is all the Secret holds: the bastion is refused rather than sent it.
        let e = dial_with_secret(&[("password", "NODES-PW")])
            .await
            .expect_err("the nodes' password from their Secret reached the bastion")
            .to_string();
        assert!(e.contains("spec.nodes.bastion.auth"), "{e}");
        assert!(!e.contains("NODES-PW"), "{e}");
    }

    #[tokio::test]
    async fn a_bastion_with_credentials_of_its_own_uses_only_those_and_the_nodes_user_port_and_timeout() {
        let c = behind_bastion(
            serde_json::json!({"user": "ops", "port": 2222, "timeout": "7s", "privateKey": "NODES-KEY"}),
            Some(serde_json::json!({"password": "BASTION-PW"})),
        );
        let auth = effective_bastion(&c).unwrap().auth.unwrap();
        assert_eq!(
            auth.private_key, None,
            "the nodes' key is not tried on a bastion with its own password"
        );
        assert_eq!(auth.password.as_deref(), Some("BASTION-PW"));
        assert_eq!((auth.user.as_deref(), auth.port), (Some("ops"), Some(2222)));
        let t = dial(&c, 0).await.unwrap();
        let b = t.bastion.expect("bastion");
        assert!(matches!(&b.auth, Auth::Password(p) if p.expose_secret() == b"BASTION-PW"));
        assert_eq!((b.user.as_str(), b.port), ("ops", 2222));
        assert_eq!(b.connect_timeout, Some(Duration::from_secs(7)));
        // An explicit password for the bastion is the bastion's, whatever the nodes use.
        let c = behind_bastion(
            serde_json::json!({"password": "NODES-PW"}),
            Some(serde_json::json!({"password": "BASTION-PW"})),
        );
        let b = dial(&c, 0).await.unwrap().bastion.unwrap();
        assert!(matches!(&b.auth, Auth::Password(p) if p.expose_secret() == b"BASTION-PW"));
    }

    #[tokio::test]
    async fn a_host_and_its_bastion_are_dialled_as_the_namespaces_own_connections() {
        let t = dial(&kkc(None), 1).await.unwrap();
        assert_eq!(t.owner.as_deref(), Some("ns"));
        assert_eq!(t.bastion.expect("bastion").owner.as_deref(), Some("ns"));
    }

    #[test]
    fn the_hosts_own_secret_gives_the_bastion_no_password_but_a_secret_of_its_own_does() {
        let auth = |v: serde_json::Value| -> ApiAuth { serde_json::from_value(v).unwrap() };
        let hosts = auth(serde_json::json!({"secretRef": {"name": "nodes-ssh"}}));
        let capkk = auth(serde_json::json!({"secret": "nodes-ssh"}));
        for same in [&hosts, &capkk] {
            assert!(!bastion_password_allowed(same, &hosts));
            assert!(!bastion_password_allowed(same, &capkk));
        }
        let own = auth(serde_json::json!({"secretRef": {"name": "bastion-ssh"}}));
        assert!(bastion_password_allowed(&own, &hosts));
        assert!(bastion_password_allowed(
            &auth(serde_json::json!({"password": "x"})),
            &hosts
        ));
    }

    #[tokio::test]
    async fn a_hosts_auth_timeout_bounds_its_connect_and_the_global_one_is_inherited() {
        let c = kkc(Some(serde_json::json!("1m")));
        let a = dial(&c, 0).await.unwrap();
        assert_eq!(a.connect_timeout, Some(Duration::from_secs(5)), "per-host");
        let b = dial(&c, 1).await.unwrap();
        assert_eq!(b.connect_timeout, Some(Duration::from_secs(60)), "global");
        let bastion = b.bastion.as_ref().expect("bastion");
        assert_eq!(bastion.connect_timeout, Some(Duration::from_secs(60)));
        // CAPKK's form: nanoseconds.
        let c = kkc(Some(serde_json::json!(2_000_000_000_i64)));
        let b = dial(&c, 1).await.unwrap();
        assert_eq!(b.connect_timeout, Some(Duration::from_secs(2)));
    }

    #[tokio::test]
    async fn an_unset_timeout_leaves_the_managers_connect_timeout_in_charge() {
        let c = kkc(None);
        let b = dial(&c, 1).await.unwrap();
        assert_eq!(b.connect_timeout, None);
        assert_eq!(b.bastion.as_ref().unwrap().connect_timeout, None);
        assert_eq!(
            dial(&c, 0).await.unwrap().connect_timeout,
            Some(Duration::from_secs(5))
        );
    }

    #[tokio::test]
    async fn an_unparsable_timeout_is_an_invalid_spec_naming_the_field() {
        let c = kkc(Some(serde_json::json!("soon")));
        match dial(&c, 1).await {
            Err(Error::InvalidSpec { field, .. }) => assert_eq!(field, "auth of host x.timeout"),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("an unparsable timeout was accepted"),
        }
    }

    #[test]
    fn the_endpoint_is_a_host_without_a_load_balancer_and_when_it_names_an_inventory_address() {
        use capkk_api::{ApiEndpoint, InstanceInfo, LoadBalancer};
        let mut k = KKCluster::new("c", Default::default());
        k.spec.nodes.instances = vec![InstanceInfo {
            name: Some("cp-1".into()),
            address: "198.18.0.11".into(),
            internal_address: Some("10.0.0.11".into()),
            ..Default::default()
        }];
        assert!(
            endpoint_is_a_host(&k),
            "unset: the first control-plane host is published"
        );
        k.spec.control_plane_endpoint = Some(ApiEndpoint {
            host: Some("10.0.0.11".into()),
            port: Some(6443),
        });
        assert!(
            endpoint_is_a_host(&k),
            "as published by the controller: a host's address"
        );
        k.spec.control_plane_endpoint = Some(ApiEndpoint {
            host: Some("api.example".into()),
            port: Some(6443),
        });
        assert!(!endpoint_is_a_host(&k), "the user's own endpoint");
        k.spec.control_plane_endpoint = None;
        k.spec.control_plane_load_balancer = Some(LoadBalancer {
            host: Some("198.18.0.100".into()),
            ..Default::default()
        });
        assert!(!endpoint_is_a_host(&k), "an external load balancer");
        k.spec.control_plane_load_balancer = Some(LoadBalancer {
            host: Some(String::new()),
            ..Default::default()
        });
        assert!(endpoint_is_a_host(&k), "CAPKK's empty host is unset");
    }
}
