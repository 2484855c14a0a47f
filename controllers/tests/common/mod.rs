//! Helpers for the controller integration tests: the shared management plane, a kubeconfig for a
//! ServiceAccount bound to exactly the ClusterRole in config/rbac, the manager as a separate process, and
//! builders for CAPI and capkk objects.
#![allow(dead_code)] // each test binary uses a different subset

pub mod day2;
pub mod gitops;
pub mod sandbox;

use std::{
    collections::BTreeMap,
    future::Future,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, bail};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Namespace, Secret, ServiceAccount},
};
use kube::{
    Client, ResourceExt,
    api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    config::Kubeconfig,
};
use serde_json::{Value, json};

/// The shared management plane's admin client, with our CRDs installed.
pub async fn client() -> anyhow::Result<Client> {
    let plane = capkk_mgmt::ManagementPlane::shared()
        .await
        .context("management plane")?;
    let client = plane.client().await?;
    capkk_mgmt::install_crds(&client, &capkk_mgmt::repo_root().join("config/crd/bases")).await?;
    Ok(client)
}

/// A name unique across test runs against the same (long-lived) plane.
pub use capkk_mgmt::unique;

/// A directory for a test's files (kubeconfig, manager logs) kept after the test for inspection:
/// `/tmp/capkk-controllers-tests/<unique>`. Those of runs more than a day old are removed first: kept forever,
/// a machine's runs had piled up 1.7 GB of them.
pub fn test_dir(prefix: &str) -> anyhow::Result<PathBuf> {
    let root = std::env::temp_dir().join("capkk-controllers-tests");
    prune_older_than(&root, std::time::Duration::from_secs(24 * 3600));
    let d = root.join(unique(prefix));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// Remove the directories under `root` last modified longer than `age` ago (best effort: a directory another
/// test removes at the same time, or cannot be read, is left to that test).
fn prune_older_than(root: &std::path::Path, age: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|elapsed| elapsed > age);
        if old && e.path().is_dir() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A fresh namespace.
pub async fn namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let name = unique(prefix);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}

/// Server-side apply of a JSON object.
pub async fn apply(client: &Client, ns: &str, obj: Value) -> anyhow::Result<DynamicObject> {
    Ok(capkk_mgmt::apply(client, ns, &obj).await?)
}

/// Merge-patch an object by apiVersion/kind/name.
pub async fn merge(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
    patch: Value,
) -> anyhow::Result<()> {
    let (api, _) = capkk_mgmt::dynamic_api(client, api_version, kind, ns).await?;
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Get an object as JSON (None when absent).
pub async fn get(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> anyhow::Result<Option<Value>> {
    let (api, _) = capkk_mgmt::dynamic_api(client, api_version, kind, ns).await?;
    Ok(api
        .get_opt(name)
        .await?
        .map(|o| serde_json::to_value(o).unwrap_or_default()))
}

/// List objects as JSON.
pub async fn list(client: &Client, ns: &str, api_version: &str, kind: &str) -> anyhow::Result<Vec<Value>> {
    let (api, _) = capkk_mgmt::dynamic_api(client, api_version, kind, ns).await?;
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap_or_default())
        .collect())
}

/// Delete an object.
pub async fn delete(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> anyhow::Result<()> {
    let (api, _) = capkk_mgmt::dynamic_api(client, api_version, kind, ns).await?;
    api.delete(name, &Default::default()).await?;
    Ok(())
}

/// Polls `f` every 500 ms until it returns `Some`, failing after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    // The management plane and the machine are shared (other test suites, benchmarks): scale every
    // timeout (CAPKK_TEST_TIMEOUT_SCALE, default 3). These are generous upper bounds, not speed assertions.
    let scale: u32 = std::env::var("CAPKK_TEST_TIMEOUT_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let timeout = timeout * scale.max(1);
    Ok(capkk_mgmt::eventually(what, timeout, Duration::from_millis(500), f).await?)
}

/// The condition `type_` of an object's status.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// `status` and `reason` of a condition.
pub fn cond_state(obj: &Value, type_: &str) -> (String, String) {
    condition(obj, type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_owned(),
                c["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .unwrap_or_default()
}

const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
/// apiVersion of our kinds.
pub const INFRA_V: &str = INFRA;
/// apiVersion of CAPI core.
pub const CAPI_V: &str = CAPI;

/// A CAPI Cluster pointing at KKCluster `name`.
pub fn cluster(ns: &str, name: &str, extra_spec: Value) -> Value {
    let mut v = json!({
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKCluster", "name": name}
        }
    });
    if let (Some(s), Some(e)) = (v["spec"].as_object_mut(), extra_spec.as_object()) {
        for (k, x) in e {
            s.insert(k.clone(), x.clone());
        }
    }
    v
}

/// A KKCluster with `hosts` as `(name, address, port)`, password auth from Secret `ssh-auth`.
pub fn kkcluster(ns: &str, name: &str, hosts: &[(String, String, u16)], extra_spec: Value) -> Value {
    let instances: Vec<Value> = hosts
        .iter()
        .map(|(n, a, p)| json!({"name": n, "address": a, "auth": {"port": p}}))
        .collect();
    let mut v = json!({
        "apiVersion": INFRA, "kind": "KKCluster",
        "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": name}},
        "spec": {
            "nodes": {"auth": {"user": "root", "secretRef": {"name": "ssh-auth"}}, "instances": instances}
        }
    });
    if let (Some(s), Some(e)) = (v["spec"].as_object_mut(), extra_spec.as_object()) {
        for (k, x) in e {
            s.insert(k.clone(), x.clone());
        }
    }
    v
}

/// A KKMachine + Machine pair; the Machine carries `dataSecretName` directly (no bootstrap provider).
pub fn machine_pair(
    ns: &str,
    cluster: &str,
    name: &str,
    role: &str,
    data_secret: Option<&str>,
) -> (Value, Value) {
    let km = json!({
        "apiVersion": INFRA, "kind": "KKMachine",
        "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "spec": {"roles": [role]}
    });
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    if role == "control-plane" {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
    // Without data, point at a KubeadmConfig that does not exist: the Machine is valid and CAPI never
    // produces bootstrap data for it (the test sets dataSecretName itself later).
    let bootstrap = match data_secret {
        Some(s) => json!({"dataSecretName": s}),
        None => {
            json!({"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": format!("{name}-absent")}})
        }
    };
    let m = json!({
        "apiVersion": CAPI, "kind": "Machine",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "clusterName": cluster,
            "version": sandbox::K8S,
            "bootstrap": bootstrap,
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachine", "name": name}
        }
    });
    (km, m)
}

/// An Opaque Secret with string data.
pub async fn secret(client: &Client, ns: &str, name: &str, data: &[(&str, &str)]) -> anyhow::Result<()> {
    let mut sd = serde_json::Map::new();
    for (k, v) in data {
        sd.insert((*k).to_owned(), json!(v));
    }
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "stringData": sd}))?;
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await?;
    Ok(())
}

/// Namespace of the test ServiceAccounts.
const SA_NAMESPACE: &str = "capkk-test-system";

/// The test managers' `--host-claim-namespace` (the namespace of the ServiceAccounts, created with them).
pub const HOST_CLAIM_NAMESPACE: &str = SA_NAMESPACE;

/// Creates a ServiceAccount bound to exactly the ClusterRole in config/rbac/role.yaml (and the leader
/// election Role in `lease_ns`), and writes a kubeconfig using a TokenRequest token for it.
pub async fn manager_kubeconfig(admin: &Client, lease_ns: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    Ok(manager_kubeconfig_for(admin, lease_ns, dir).await?.0)
}

/// [`manager_kubeconfig`], also returning the ServiceAccount's name (for cleanup).
pub async fn manager_kubeconfig_for(
    admin: &Client,
    lease_ns: &str,
    dir: &Path,
) -> anyhow::Result<(PathBuf, String)> {
    manager_kubeconfig_granted(admin, lease_ns, dir, &Grant::ClusterWide).await
}

/// How a test manager's ServiceAccount is given manager-role.
pub enum Grant {
    /// A ClusterRoleBinding of the ClusterRole in config/rbac/role.yaml (the default install).
    ClusterWide,
    /// A rendered namespaced RBAC variant: `role` is its manager ClusterRole, `bindings` are its RoleBindings
    /// of that role (already in the test namespace). They are applied with the test's names: the role
    /// renamed, each binding's subject replaced by the test's ServiceAccount and nothing else changed.
    Namespaced {
        /// The ClusterRole the bindings refer to.
        role: Value,
        /// The RoleBindings.
        bindings: Vec<Value>,
    },
}

/// [`manager_kubeconfig_for`] with the permissions of `grant`.
pub async fn manager_kubeconfig_granted(
    admin: &Client,
    lease_ns: &str,
    dir: &Path,
    grant: &Grant,
) -> anyhow::Result<(PathBuf, String)> {
    let sa_ns = SA_NAMESPACE;
    let ns_obj: Namespace = serde_json::from_value(json!({"metadata": {"name": sa_ns}}))?;
    let _ = Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns_obj)
        .await;
    let sa_name = unique("manager");
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": sa_name, "namespace": sa_ns}}))?;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), sa_ns);
    sas.create(&PostParams::default(), &sa).await?;

    let rbac = capkk_mgmt::repo_root().join("config/rbac");
    match grant {
        Grant::ClusterWide => {
            let mut role = capkk_mgmt::read_yaml_docs(&rbac.join("role.yaml"))?.remove(0);
            let role_name = "capkk-test-manager-role";
            role["metadata"]["name"] = json!(role_name);
            apply(admin, "", role).await?;
            apply(
                admin,
                "",
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": sa_name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
                    "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}]
                }),
            )
            .await?;
        }
        Grant::Namespaced { role, bindings } => {
            let role_name = "capkk-test-namespaced-manager-role";
            let mut role = role.clone();
            role["metadata"] = json!({"name": role_name});
            apply(admin, "", role).await?;
            for (i, b) in bindings.iter().enumerate() {
                let mut b = b.clone();
                let ns = b["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
                b["metadata"] = json!({"name": format!("{sa_name}-{i}"), "namespace": ns});
                b["roleRef"]["name"] = json!(role_name);
                b["subjects"] = json!([{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}]);
                apply(admin, &ns, b).await?;
            }
        }
    }
    let mut le = capkk_mgmt::read_yaml_docs(&rbac.join("leader_election_role.yaml"))?.remove(0);
    le["metadata"]["name"] = json!("capkk-test-leader-election");
    le["metadata"]["namespace"] = json!(lease_ns);
    apply(admin, lease_ns, le).await?;
    apply(
        admin,
        lease_ns,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": sa_name, "namespace": lease_ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "capkk-test-leader-election"},
            "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}]
        }),
    )
    .await?;

    // Host-identity Leases (config/rbac/host_claim_role.yaml) in the one namespace every test manager shares,
    // as every manager of a management cluster does: claims of one sandbox host from two tests meet there.
    let mut hc = capkk_mgmt::read_yaml_docs(&rbac.join("host_claim_role.yaml"))?.remove(0);
    hc["metadata"]["name"] = json!("capkk-test-host-claims");
    hc["metadata"]["namespace"] = json!(HOST_CLAIM_NAMESPACE);
    apply(admin, HOST_CLAIM_NAMESPACE, hc).await?;
    apply(
        admin,
        HOST_CLAIM_NAMESPACE,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("{sa_name}-host-claims"), "namespace": HOST_CLAIM_NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "capkk-test-host-claims"},
            "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}]
        }),
    )
    .await?;

    let tr = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600 * 4),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = sas
        .create_token_request(&sa_name, &PostParams::default(), &tr)
        .await?
        .status
        .context("TokenRequest returned no status")?
        .token;

    let plane = capkk_mgmt::ManagementPlane::shared().await?;
    let admin_kc = Kubeconfig::read_from(plane.kubeconfig_path())?;
    let cluster = admin_kc
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("admin kubeconfig has no cluster")?;
    let server = cluster.server.clone().context("no server")?;
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(d), _) => json!({"certificate-authority-data": d}),
        (None, Some(p)) => json!({"certificate-authority": p}),
        _ => json!({"insecure-skip-tls-verify": true}),
    };
    let mut c = json!({"server": server});
    if let (Some(o), Some(extra)) = (c.as_object_mut(), ca.as_object()) {
        for (k, v) in extra {
            o.insert(k.clone(), v.clone());
        }
    }
    let kc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "mgmt", "cluster": c}],
        "users": [{"name": "manager", "user": {"token": token}}],
        "contexts": [{"name": "manager", "context": {"cluster": "mgmt", "user": "manager"}}],
        "current-context": "manager"
    });
    let path = dir.join("manager.kubeconfig");
    std::fs::write(&path, serde_json::to_string_pretty(&kc)?)?;
    Ok((path, sa_name))
}

/// Environment variable naming another manager build for the integration tests to run instead of this
/// tree's (opt-in; unset or empty: this tree's `manager`). Used to show that a test fails on an older commit:
/// build that commit's manager in its own worktree and run this tier with `CAPKK_TEST_MANAGER=<its binary>`.
/// The tests, CRDs and RBAC stay this tree's; every start says on stderr which binary runs, and writes its path
/// to `<name>.binary` beside the manager's log.
pub const TEST_MANAGER_ENV: &str = "CAPKK_TEST_MANAGER";

/// The manager binary the tests start: this tree's build, or the one [`TEST_MANAGER_ENV`] names (said loudly).
pub fn manager_binary() -> PathBuf {
    match std::env::var_os(TEST_MANAGER_ENV).filter(|v| !v.is_empty()) {
        Some(other) => {
            let other = PathBuf::from(other);
            eprintln!(
                "!!! {TEST_MANAGER_ENV} is set: running the manager {} instead of this tree's build; \
                 results say nothing about this tree",
                other.display()
            );
            other
        }
        None => PathBuf::from(env!("CARGO_BIN_EXE_manager")),
    }
}

/// The flag the tests' managers get by default (see [`SshPolicy::AllowLoopback`]).
pub const ALLOW_LOOPBACK_SSH: &str = "--ssh-allow-cidr=127.0.0.0/8";

/// The SSH address policy a test's manager runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SshPolicy {
    /// The shipped default plus [`ALLOW_LOOPBACK_SSH`]: most tests list hosts on loopback addresses (closed
    /// ports for unreachable hosts, local listeners), which the shipped default refuses.
    AllowLoopback,
    /// Exactly the shipped default (loopback refused), for the tests of the policy itself.
    Shipped,
}

/// Whether `binary --help` lists `flag` (asked once per binary and flag).
fn knows_flag(binary: &Path, flag: &str) -> bool {
    static KNOWN: std::sync::Mutex<BTreeMap<(PathBuf, String), bool>> =
        std::sync::Mutex::new(BTreeMap::new());
    let key = (binary.to_owned(), flag.to_owned());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    *known.entry(key).or_insert_with(|| {
        Command::new(binary)
            .arg("--help")
            .stdin(Stdio::null())
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(flag))
    })
}

/// The manager binary running as a separate process; killed on drop.
pub struct Manager {
    child: Option<Child>,
    /// Combined log file.
    pub log: PathBuf,
}

impl Manager {
    /// Start `manager --kubeconfig <kc> <args>` with logs in `dir/<name>.log`.
    pub fn start(kubeconfig: &Path, dir: &Path, name: &str, args: &[&str]) -> anyhow::Result<Manager> {
        Self::start_logging(kubeconfig, dir, name, args, DEFAULT_LOG_FILTER)
    }

    /// [`Manager::start`] with `RUST_LOG=<filter>`.
    pub fn start_logging(
        kubeconfig: &Path,
        dir: &Path,
        name: &str,
        args: &[&str],
        filter: &str,
    ) -> anyhow::Result<Manager> {
        Self::spawn(kubeconfig, dir, name, args, filter, SshPolicy::AllowLoopback)
    }

    /// [`Manager::start_logging`] with the SSH address policy `ssh`.
    pub fn spawn(
        kubeconfig: &Path,
        dir: &Path,
        name: &str,
        args: &[&str],
        filter: &str,
        ssh: SshPolicy,
    ) -> anyhow::Result<Manager> {
        let log = dir.join(format!("{name}.log"));
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
        let mut defaults = Vec::new();
        let binary = manager_binary();
        // The tests' hosts on loopback addresses (closed ports, silent listeners, sshd forwarders) are dialled
        // as before unless a test asks for the shipped policy or passes its own allow-list. A manager built
        // before the flag existed dials loopback anyway and is not given it.
        if ssh == SshPolicy::AllowLoopback
            && !args.iter().any(|a| a.starts_with("--ssh-allow-cidr"))
            && knows_flag(&binary, "--ssh-allow-cidr")
        {
            defaults.push(ALLOW_LOOPBACK_SSH.to_owned());
        }
        // A test of the diagnostics endpoint asks for it: an explicit --metrics-bind-address would win over it.
        let diagnostics = args.iter().any(|a| a.starts_with("--diagnostics-address"));
        for flag in ["--metrics-bind-address", "--health-probe-bind-address"] {
            let given = args.iter().any(|a| a.starts_with(flag));
            let wanted_off = diagnostics && flag == "--metrics-bind-address";
            if !given && !wanted_off {
                defaults.push(format!("{flag}=127.0.0.1:0"));
            }
        }
        // Beside the log, which build ran (a CAPKK_TEST_MANAGER run must never pass for this tree's); the log
        // itself stays the manager's alone (tests parse it).
        std::fs::write(
            dir.join(format!("{name}.binary")),
            format!("{}\n", binary.display()),
        )?;
        let child = Command::new(&binary)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(&defaults)
            .args(args)
            .env("RUST_LOG", filter)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .with_context(|| format!("starting the manager {}", binary.display()))?;
        Ok(Manager {
            child: Some(child),
            log,
        })
    }

    /// The process id (also the default leader-election identity suffix).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait (up to 20 s, then SIGKILL).
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
            for _ in 0..80 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Fails when `canary` appears in the manager logs, the namespace's events or any capkk object.
pub async fn assert_no_canary(
    client: &Client,
    ns: &str,
    canaries: &[&str],
    logs: &[String],
) -> anyhow::Result<()> {
    let mut haystacks: Vec<(String, String)> = logs
        .iter()
        .enumerate()
        .map(|(i, l)| (format!("manager log {i}"), l.clone()))
        .collect();
    for (v, k) in [("events.k8s.io/v1", "Event"), ("v1", "Event")] {
        for e in list(client, ns, v, k).await? {
            haystacks.push((format!("{k} {}", e["metadata"]["name"]), e.to_string()));
        }
    }
    for k in ["KKCluster", "KKMachine", "KKInstance"] {
        for o in list(client, ns, INFRA, k).await? {
            // A KKCluster's spec is user input (it may hold inline CAPKK credentials); its status may not.
            let text = if k == "KKCluster" {
                format!("{} {}", o["status"], o["metadata"])
            } else {
                o.to_string()
            };
            haystacks.push((format!("{k} {}", o["metadata"]["name"]), text));
        }
    }
    for (what, text) in &haystacks {
        for c in canaries {
            if text.contains(c) {
                bail!("secret canary found in {what}");
            }
        }
    }
    Ok(())
}

/// A free loopback port (bound, then released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// GET `http://127.0.0.1:<port><path>` and return the raw response.
pub fn http_get(port: u16, path: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// The managers' log filter unless a test asks for another.
pub const DEFAULT_LOG_FILTER: &str = "info,capkk_controllers=debug,kube=warn";

/// One integration test's world: an admin client, a fresh namespace, a directory for logs, a kubeconfig for
/// a ServiceAccount bound to exactly the ClusterRole in config/rbac, and the manager processes started
/// through it. Dropping it (also when the test panics) stops the managers and deletes the namespace, the
/// ServiceAccount and its binding, unless `CAPKK_TEST_KEEP=1` (then it says what it kept).
pub struct TestEnv {
    /// Admin client of the management plane.
    pub client: Client,
    /// The test's namespace.
    pub ns: String,
    /// Logs and files of the test (kept).
    pub dir: PathBuf,
    kubeconfig: PathBuf,
    admin_kubeconfig: PathBuf,
    sa_name: String,
    cleaned: bool,
}

/// Sandbox SSH hosts prepared for host work: stand-ins installed, an artifact mirror with stand-in
/// binaries (`component` goes into the KKCluster spec) and the `ssh-auth` Secret holding the hosts' key.
pub struct Hosts {
    /// The sandbox.
    pub sb: capkk_sandbox::Sandbox,
    /// The artifact mirror.
    pub mirror: sandbox::Mirror,
    /// `spec.component` pointing at the mirror.
    pub component: Value,
    /// The hosts' private key (a line of it is a canary for leaks).
    pub key: String,
}

impl Hosts {
    /// `(name, address, port)` of every host, for [`kkcluster`].
    pub fn inventory(&self) -> Vec<(String, String, u16)> {
        self.sb
            .hosts()
            .iter()
            .map(|h| (h.info.name.clone(), h.address().to_owned(), 22))
            .collect()
    }

    /// A line of the private key that must never leak.
    pub fn key_canary(&self) -> String {
        self.key.lines().nth(2).unwrap_or("-").to_owned()
    }
}

impl TestEnv {
    /// Namespace `<prefix>-<unique>`, test directory, manager kubeconfig.
    pub async fn new(prefix: &str) -> anyhow::Result<TestEnv> {
        Self::granted(prefix, |_| Ok(Grant::ClusterWide)).await
    }

    /// [`TestEnv::new`] with the manager's permissions from `grant` (given the test namespace).
    pub async fn granted(
        prefix: &str,
        grant: impl FnOnce(&str) -> anyhow::Result<Grant>,
    ) -> anyhow::Result<TestEnv> {
        let client = client().await?;
        let ns = namespace(&client, prefix).await?;
        let dir = test_dir(prefix)?;
        eprintln!("test {prefix}: namespace {ns}, manager logs in {}", dir.display());
        let grant = grant(&ns)?;
        let (kubeconfig, sa_name) = manager_kubeconfig_granted(&client, &ns, &dir, &grant).await?;
        let admin_kubeconfig = capkk_mgmt::ManagementPlane::shared()
            .await?
            .kubeconfig_path()
            .to_owned();
        Ok(TestEnv {
            client,
            ns,
            dir,
            kubeconfig,
            admin_kubeconfig,
            sa_name,
            cleaned: false,
        })
    }

    /// The kubeconfig the test's managers use (the ServiceAccount with the test's grant).
    pub fn manager_kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The test managers' ServiceAccount: (namespace, name).
    pub fn service_account(&self) -> (&str, &str) {
        (SA_NAMESPACE, &self.sa_name)
    }

    /// A client authenticated as the test managers' ServiceAccount (its token, exactly its permissions).
    pub async fn manager_client(&self) -> anyhow::Result<Client> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)?;
        Ok(Client::try_from(
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?,
        )?)
    }

    /// Also grant the test's managers config/rbac/metrics_auth_role.yaml (TokenReviews and
    /// SubjectAccessReviews, what the diagnostics endpoint needs), bound cluster-wide as config/default binds it.
    pub async fn grant_metrics_auth(&self) -> anyhow::Result<()> {
        let path = capkk_mgmt::repo_root().join("config/rbac/metrics_auth_role.yaml");
        let mut role = capkk_mgmt::read_yaml_docs(&path)?.remove(0);
        let role_name = "capkk-test-metrics-auth";
        role["metadata"]["name"] = json!(role_name);
        apply(&self.client, "", role).await?;
        apply(
            &self.client,
            "",
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("{}-metrics-auth", self.sa_name)},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
                "subjects": [{"kind": "ServiceAccount", "name": self.sa_name, "namespace": SA_NAMESPACE}]
            }),
        )
        .await?;
        Ok(())
    }

    /// A token of a scraper allowed to read the diagnostics endpoint: the ServiceAccount `<sa>-scraper` bound
    /// to config/rbac/metrics_reader_role.yaml (renamed), as an operator binds Prometheus. Also grants the
    /// managers the reviews the endpoint makes ([`TestEnv::grant_metrics_auth`]). Cleaned up with the
    /// test's ServiceAccount.
    pub async fn metrics_reader_token(&self) -> anyhow::Result<String> {
        self.grant_metrics_auth().await?;
        let path = capkk_mgmt::repo_root().join("config/rbac/metrics_reader_role.yaml");
        let mut reader = capkk_mgmt::read_yaml_docs(&path)?.remove(0);
        let role_name = "capkk-test-metrics-reader";
        reader["metadata"]["name"] = json!(role_name);
        apply(&self.client, "", reader).await?;
        let scraper = format!("{}-scraper", self.sa_name);
        let sas: Api<ServiceAccount> = Api::namespaced(self.client.clone(), SA_NAMESPACE);
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": scraper, "namespace": SA_NAMESPACE}}))?;
        sas.create(&PostParams::default(), &sa).await?;
        apply(
            &self.client,
            "",
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": scraper},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
                "subjects": [{"kind": "ServiceAccount", "name": scraper, "namespace": SA_NAMESPACE}]
            }),
        )
        .await?;
        let tr = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(3600 * 4),
                ..Default::default()
            },
            ..Default::default()
        };
        Ok(sas
            .create_token_request(&scraper, &PostParams::default(), &tr)
            .await?
            .status
            .context("TokenRequest returned no status")?
            .token)
    }

    /// Start a manager scoped to the namespace (`--namespace`, an artifact cache in the test directory,
    /// then `args`).
    pub fn manager(&self, name: &str, args: &[&str]) -> anyhow::Result<Manager> {
        self.manager_logging(name, args, DEFAULT_LOG_FILTER)
    }

    /// [`TestEnv::manager`] with the shipped SSH address policy (loopback refused), not the tests' default.
    pub fn manager_shipped_ssh_policy(&self, name: &str, args: &[&str]) -> anyhow::Result<Manager> {
        self.manager_with(name, args, DEFAULT_LOG_FILTER, SshPolicy::Shipped)
    }

    /// [`TestEnv::manager`] with `RUST_LOG=<filter>` (e.g. `trace`: every crate at its most verbose).
    pub fn manager_logging(&self, name: &str, args: &[&str], filter: &str) -> anyhow::Result<Manager> {
        self.manager_with(name, args, filter, SshPolicy::AllowLoopback)
    }

    fn manager_with(
        &self,
        name: &str,
        args: &[&str],
        filter: &str,
        ssh: SshPolicy,
    ) -> anyhow::Result<Manager> {
        let cache = self.dir.join("cache");
        let cache_arg = format!("--artifact-cache-dir={}", cache.display());
        let mut all: Vec<&str> = vec!["--namespace", &self.ns];
        if !args.iter().any(|a| a.starts_with("--artifact-cache-dir")) {
            all.push(&cache_arg);
        }
        let claims_arg = format!("--host-claim-namespace={HOST_CLAIM_NAMESPACE}");
        if !args.iter().any(|a| a.starts_with("--host-claim-namespace")) {
            all.push(&claims_arg);
        }
        all.extend_from_slice(args);
        Manager::spawn(&self.kubeconfig, &self.dir, name, &all, filter, ssh)
    }

    /// A test environment with `n` sandbox hosts `sandbox` ready for host work; None (after saying why) when
    /// this machine cannot run sandbox hosts outside CI (in CI that fails the test).
    pub async fn with_hosts(
        prefix: &str,
        sandbox: &str,
        n: usize,
    ) -> anyhow::Result<Option<(TestEnv, Hosts)>> {
        if capkk_sandbox::skip_unless_supported() {
            return Ok(None);
        }
        let env = TestEnv::new(prefix).await?;
        let hosts = env.hosts(sandbox, n).await?;
        Ok(Some((env, hosts)))
    }

    /// Sandbox hosts `name` (`n` of them) ready for host work, and the `ssh-auth` Secret.
    pub async fn hosts(&self, name: &str, n: usize) -> anyhow::Result<Hosts> {
        let sb = capkk_sandbox::Sandbox::shared(&capkk_sandbox::SandboxConfig::new(name, n))?;
        for h in sb.hosts() {
            h.link_up()?;
            capkk_sandbox::assets::install(&h, capkk_sandbox::assets::FAKES)?;
        }
        let mirror = sandbox::Mirror::start(&sb)?;
        let component = sandbox::publish_standins(&mirror, &self.dir, "amd64")?;
        let key = std::fs::read_to_string(&sb.credentials().ed25519_key)?;
        self.secret("ssh-auth", &[("privateKey", &key)]).await?;
        Ok(Hosts {
            sb,
            mirror,
            component,
            key,
        })
    }

    /// An Opaque Secret in the namespace.
    pub async fn secret(&self, name: &str, data: &[(&str, &str)]) -> anyhow::Result<()> {
        secret(&self.client, &self.ns, name, data).await
    }

    /// The bootstrap-data Secret `name` (`value`, `format: cloud-config`).
    pub async fn bootstrap_data(&self, name: &str, value: &str) -> anyhow::Result<()> {
        self.secret(name, &[("value", value), ("format", "cloud-config")])
            .await
    }

    /// Server-side apply of a JSON object into the namespace.
    pub async fn apply(&self, obj: Value) -> anyhow::Result<DynamicObject> {
        apply(&self.client, &self.ns, obj).await
    }

    /// A Cluster and its KKCluster `name` with `hosts`.
    pub async fn cluster(
        &self,
        name: &str,
        hosts: &[(String, String, u16)],
        kkcluster_spec: Value,
    ) -> anyhow::Result<()> {
        self.apply(cluster(&self.ns, name, json!({}))).await?;
        self.apply(kkcluster(&self.ns, name, hosts, kkcluster_spec))
            .await?;
        Ok(())
    }

    /// A KKMachine + Machine pair (see [`machine_pair`]).
    pub async fn machine(
        &self,
        cluster: &str,
        name: &str,
        role: &str,
        data_secret: Option<&str>,
    ) -> anyhow::Result<()> {
        let (km, m) = machine_pair(&self.ns, cluster, name, role, data_secret);
        self.apply(km).await?;
        self.apply(m).await?;
        Ok(())
    }

    /// A typed API of the namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Get an object as JSON (None when absent).
    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> anyhow::Result<Option<Value>> {
        get(&self.client, &self.ns, api_version, kind, name).await
    }

    /// List objects as JSON.
    pub async fn list(&self, api_version: &str, kind: &str) -> anyhow::Result<Vec<Value>> {
        list(&self.client, &self.ns, api_version, kind).await
    }

    /// Merge-patch an object.
    pub async fn merge(&self, api_version: &str, kind: &str, name: &str, patch: Value) -> anyhow::Result<()> {
        merge(&self.client, &self.ns, api_version, kind, name, patch).await
    }

    /// Delete an object.
    pub async fn delete(&self, api_version: &str, kind: &str, name: &str) -> anyhow::Result<()> {
        delete(&self.client, &self.ns, api_version, kind, name).await
    }

    /// The KKInstance that KKMachine `kkmachine` claimed (its `spec.instanceID`), once it has one. Tests that
    /// are not about claim names find a KKInstance this way rather than by spelling its name.
    pub async fn claimed_instance(&self, kkmachine: &str) -> anyhow::Result<String> {
        eventually(
            &format!("KKMachine {kkmachine} claims a host"),
            Duration::from_secs(90),
            || async {
                let k = self
                    .get(INFRA_V, "KKMachine", kkmachine)
                    .await?
                    .unwrap_or_default();
                Ok(k["spec"]["instanceID"].as_str().map(str::to_owned))
            },
        )
        .await
    }

    /// Wait for the KKCluster `name` to be provisioned; returns it.
    pub async fn kkcluster_provisioned(&self, name: &str) -> anyhow::Result<Value> {
        eventually(
            &format!("KKCluster {name} provisioned"),
            Duration::from_secs(90),
            || async {
                let k = self.get(INFRA_V, "KKCluster", name).await?;
                Ok(k.filter(|k| k["status"]["initialization"]["provisioned"] == true))
            },
        )
        .await
    }

    /// Wait for the KKCluster `name` to report `n` host probes (they run in the background); returns it.
    pub async fn kkcluster_probed(&self, name: &str, n: usize) -> anyhow::Result<Value> {
        eventually(
            &format!("KKCluster {name} reports {n} probes"),
            Duration::from_secs(90),
            || async {
                let k = self.get(INFRA_V, "KKCluster", name).await?;
                Ok(k.filter(|k| k["status"]["hosts"].as_array().is_some_and(|h| h.len() == n)))
            },
        )
        .await
    }

    /// Fails when a canary appears in the manager logs, the namespace's events or any capkk object.
    pub async fn assert_no_canary(&self, canaries: &[&str], logs: &[String]) -> anyhow::Result<()> {
        assert_no_canary(&self.client, &self.ns, canaries, logs).await
    }

    /// Clean up now (async) instead of at drop.
    pub async fn finish(mut self) {
        if keep() {
            eprintln!(
                "CAPKK_TEST_KEEP=1: kept namespace {} and {}",
                self.ns,
                self.dir.display()
            );
        } else {
            cleanup_namespace(&self.client, &self.ns).await;
            cleanup_service_account(&self.client, &self.sa_name).await;
        }
        self.cleaned = true;
    }
}

fn keep() -> bool {
    std::env::var("CAPKK_TEST_KEEP").is_ok_and(|v| v == "1")
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        if keep() {
            eprintln!(
                "CAPKK_TEST_KEEP=1: kept namespace {} and {}",
                self.ns,
                self.dir.display()
            );
            return;
        }
        // Drop may run during a panic inside the test's runtime: clean up from a thread with its own
        // runtime and client (clients must not cross runtimes).
        let (ns, sa, kc) = (
            self.ns.clone(),
            self.sa_name.clone(),
            self.admin_kubeconfig.clone(),
        );
        let done = std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let config =
                    kube::Config::from_custom_kubeconfig(Kubeconfig::read_from(&kc)?, &Default::default())
                        .await?;
                let client = Client::try_from(config)?;
                cleanup_namespace(&client, &ns).await;
                cleanup_service_account(&client, &sa).await;
                Ok(())
            })
        })
        .join();
        if !matches!(done, Ok(Ok(()))) {
            eprintln!("cleaning up namespace {} failed", self.ns);
        }
    }
}

/// Delete the ServiceAccount a test's managers used, its ClusterRoleBinding and its host-claim RoleBinding.
pub async fn cleanup_service_account(client: &Client, sa_name: &str) {
    let _ = Api::<ServiceAccount>::namespaced(client.clone(), SA_NAMESPACE)
        .delete(sa_name, &Default::default())
        .await;
    let _ = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone())
        .delete(sa_name, &Default::default())
        .await;
    let _ = Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), HOST_CLAIM_NAMESPACE)
        .delete(&format!("{sa_name}-host-claims"), &Default::default())
        .await;
    let _ = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone())
        .delete(&format!("{sa_name}-metrics-auth"), &Default::default())
        .await;
    let scraper = format!("{sa_name}-scraper");
    let _ = Api::<ServiceAccount>::namespaced(client.clone(), SA_NAMESPACE)
        .delete(&scraper, &Default::default())
        .await;
    let _ = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone())
        .delete(&scraper, &Default::default())
        .await;
}

/// `/metrics` of a manager's diagnostics endpoint on 127.0.0.1:`port` read with `token`, once it answers 200
/// (RBAC bindings reach the API server's authorizer shortly after they are created). The certificate is the
/// manager's self-signed one and is not verified, as a scraper of CAPI's diagnostics endpoint does.
pub async fn scrape_diagnostics(port: u16, token: &str) -> anyhow::Result<String> {
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()?;
    let url = format!("https://127.0.0.1:{port}/metrics");
    eventually(
        &format!("{url} answers 200 to the scraper's token"),
        Duration::from_secs(30),
        || async {
            let Ok(resp) = http.get(&url).bearer_auth(token).send().await else {
                return Ok(None);
            };
            Ok(match resp.status().as_u16() {
                200 => Some(resp.text().await?),
                _ => None,
            })
        },
    )
    .await
}

/// Remove a finished test's objects: our finalizers are stripped (no manager runs any more) and the
/// namespace is deleted (CAPI and the namespace controller take care of the rest).
pub async fn cleanup_namespace(client: &Client, ns: &str) {
    for kind in ["KKInstance", "KKMachine", "KKCluster"] {
        for o in list(client, ns, INFRA, kind).await.unwrap_or_default() {
            let _ = merge(
                client,
                ns,
                INFRA,
                kind,
                &name(&o),
                json!({"metadata": {"finalizers": null}}),
            )
            .await;
        }
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &Default::default())
        .await;
}

/// `kubectl kustomize config/<variant>` with the pinned kubectl (as `make release-manifests` renders
/// config/default), clusterctl's `${VAR}`s left as they are.
pub async fn render_config(variant: &str) -> anyhow::Result<Vec<Value>> {
    let kubectl = capkk_mgmt::bin_dir().await?.join("kubectl");
    let dir = capkk_mgmt::repo_root().join("config").join(variant);
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .with_context(|| format!("running {}", kubectl.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(capkk_mgmt::parse_yaml_docs(
        &String::from_utf8(out.stdout)?,
        &format!("config/{variant}"),
    )?)
}

/// Name of an object.
pub fn name(v: &Value) -> String {
    v["metadata"]["name"].as_str().unwrap_or_default().to_owned()
}

/// Keep ResourceExt in scope for callers.
pub fn _name_any<K: ResourceExt>(k: &K) -> String {
    k.name_any()
}
