//! The Cluster API Operator (`sigs.k8s.io/cluster-api-operator`, built by `make operator-bin`) installs this
//! provider from an `InfrastructureProvider` whose components come from a ConfigMap (`fetchConfig.selector`)
//! holding what `make release-manifests` puts in the clusterctl repository (docs/operator.md).
//!
//! One flow, two clusters:
//! - `make test-operator`: a bare plane of its own ([`capkk_mgmt::SecondPlane::up_bare`]: etcd, kube-apiserver,
//!   kube-controller-manager with the deployment controllers, no CAPI; no kubelet, so no Pod ever runs). The
//!   Operator installs CAPI's core from its CoreProvider first (it installs no other provider before the core
//!   one is Ready), then ours; the test then starts our manager binary with exactly the container args the
//!   Operator rendered, as the ServiceAccount it created, and sees it healthy and leading.
//! - `make operator-install-pods OPERATOR_KUBECONFIG=... OPERATOR_REGISTRY=...`: a cluster that runs Pods (the VM
//!   management cluster of `make e2e-clusterctl`): the same install, then our manager Pod Running with the rendered
//!   args, the Deployment Available and the InfrastructureProvider Ready.
//!
//! The Operator runs as a process on this machine with an admin kubeconfig, as the plane's CAPI managers do.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, bail, ensure};
use capkk_mgmt::eventually;
use k8s_openapi::{
    ByteString,
    api::coordination::v1::Lease,
    api::{
        apps::v1::Deployment,
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{ConfigMap, Namespace, Pod, ServiceAccount},
    },
};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};

const OPERATOR_V: &str = "operator.cluster.x-k8s.io/v1alpha2";
/// Our components' namespace: the InfrastructureProvider lives there, since clusterctl's library moves every
/// namespaced object of the components into the provider's namespace.
const NS: &str = "capkk-system";
const CORE_NS: &str = "capi-system";
/// The release the test builds with test/release/release-manifests.sh (metadata.yaml's 0.1 series).
const VERSION: &str = "v0.1.0";
/// clusterctl's built-in list has an infrastructure provider of this name (upstream KubeKey, from GitHub);
/// see docs/operator.md for why we keep it and always give fetchConfig.
const PROVIDER: &str = "kubekey";
const DEPLOYMENT: &str = "capkk-controller-manager";
/// The manager's default Lease name: on a cluster where clusterctl installed the manager first, the Pod the
/// Operator rolls out takes over the same Lease instead of leading beside the old one.
const LEASE: &str = "capkk-manager-leader";
/// The Operator's size limit for a ConfigMap's components before it wants them gzipped (its own
/// `needToCompress` threshold is 1 MiB; CAPI's core components are larger).
const COMPRESS_ABOVE: usize = 1 << 20;

fn scale() -> u32 {
    std::env::var("CAPKK_TEST_TIMEOUT_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s * u64::from(scale()))
}

const POLL: Duration = Duration::from_millis(500);

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn work_dir(name: &str) -> anyhow::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(capkk_mgmt::unique(name));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// What test/clusterctl built (`make clusterctl-artifacts`): CAPI's core components and cert-manager's manifest.
struct ClusterctlArtifacts {
    repository: PathBuf,
    capi_version: String,
    cert_manager_version: String,
}

impl ClusterctlArtifacts {
    fn read() -> anyhow::Result<Self> {
        let cache = std::env::var_os("CAPKK_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                    .join(".cache/capkk-rs")
            });
        let env_file = cache.join("clusterctl/current.env");
        let text = std::fs::read_to_string(&env_file).with_context(|| {
            format!(
                "{} is missing: run `make clusterctl-artifacts` (CAPI's core components)",
                env_file.display()
            )
        })?;
        let var = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .map(|v| v.trim_matches('\'').to_owned())
                .with_context(|| format!("{} names no {name}", env_file.display()))
        };
        Ok(Self {
            repository: PathBuf::from(var("CLUSTERCTL_REPOSITORY")?),
            capi_version: var("CAPI_VERSION")?,
            cert_manager_version: var("CERT_MANAGER_VERSION")?,
        })
    }

    fn cert_manager(&self) -> PathBuf {
        self.repository
            .join("cert-manager")
            .join(&self.cert_manager_version)
            .join("cert-manager.yaml")
    }

    fn core(&self, file: &str) -> PathBuf {
        self.repository
            .join("cluster-api")
            .join(&self.capi_version)
            .join(file)
    }
}

/// Our clusterctl repository, built as a release is (test/release/release-manifests.sh), with the pinned kubectl.
fn release_repository(dir: &Path, bin_dir: &Path) -> anyhow::Result<PathBuf> {
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(capkk_mgmt::repo_root().join("test/release/release-manifests.sh"))
        .arg(dir)
        .arg(VERSION)
        .arg(format!("ghcr.io/capkk-rs/capkk-manager:{VERSION}"))
        .env("PATH", path)
        .output()
        .context("running test/release/release-manifests.sh")?;
    ensure!(
        out.status.success(),
        "release-manifests.sh failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(dir.join("infrastructure-kubekey").join(VERSION))
}

/// A provider's ConfigMap as the Operator reads it with `fetchConfig.selector`: the version in a label (the
/// provider's name and type in the labels the Operator itself writes on ConfigMaps it downloads), the metadata and
/// the components in `data`, gzipped into `binaryData` (with the Operator's annotation) when large.
fn provider_configmap(
    namespace: &str,
    name: &str,
    (provider, type_): (&str, &str),
    version: &str,
    components: &str,
    metadata: &str,
) -> anyhow::Result<Value> {
    let mut cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {
                "provider.cluster.x-k8s.io/version": version,
                "provider.cluster.x-k8s.io/name": provider,
                "provider.cluster.x-k8s.io/type": type_,
            },
        },
        "data": {"metadata": metadata},
    });
    if components.len() > COMPRESS_ABOVE {
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(components.as_bytes())?;
        let bytes = gz.finish()?;
        cm["metadata"]["annotations"] = json!({"provider.cluster.x-k8s.io/compressed": "true"});
        cm["binaryData"] = json!({"components": serde_json::to_value(ByteString(bytes))?});
    } else {
        cm["data"]["components"] = json!(components);
    }
    Ok(cm)
}

fn selector((provider, type_): (&str, &str)) -> Value {
    json!({"selector": {"matchLabels": {
        "provider.cluster.x-k8s.io/name": provider, "provider.cluster.x-k8s.io/type": type_,
    }}})
}

const CORE: (&str, &str) = ("cluster-api", "core");
const OURS: (&str, &str) = (PROVIDER, "infrastructure");

/// The Operator as a process; killed on drop. Its webhooks (which only default a configSecret's namespace) are
/// served but not registered with the API server; its health endpoint tells when it runs.
struct Operator {
    child: Option<Child>,
    log: PathBuf,
    health: u16,
}

impl Operator {
    fn start(binary: &Path, kubeconfig: &Path, dir: &Path) -> anyhow::Result<Self> {
        let certs = dir.join("operator-webhook-certs");
        std::fs::create_dir_all(&certs)?;
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()])?;
        std::fs::write(certs.join("tls.crt"), pem("CERTIFICATE", cert.cert.der()))?;
        std::fs::write(
            certs.join("tls.key"),
            pem("PRIVATE KEY", &cert.signing_key.serialize_der()),
        )?;
        let health = free_port()?;
        let log = dir.join("operator.log");
        let f = std::fs::File::create(&log)?;
        let child = Command::new(binary)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "--leader-elect=false".to_owned(),
                format!("--health-addr=127.0.0.1:{health}"),
                format!("--diagnostics-address=127.0.0.1:{}", free_port()?),
                "--insecure-diagnostics=true".to_owned(),
                "--profiler-address=".to_owned(),
                format!("--webhook-port={}", free_port()?),
                format!("--webhook-cert-dir={}", certs.display()),
                "--v=2".to_owned(),
            ])
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self {
            child: Some(child),
            log,
            health,
        })
    }

    async fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let url = format!("http://127.0.0.1:{}/readyz", self.health);
        let log = self.log.clone();
        let child = self.child.as_mut().context("operator not started")?;
        let mut exited = None;
        let r = eventually("the Operator answers /readyz", secs(30), POLL, || {
            if let Ok(Some(st)) = child.try_wait() {
                exited = Some(st);
            }
            let url = url.clone();
            let gone = exited;
            async move {
                if let Some(st) = gone {
                    bail!("the Operator exited ({st})");
                }
                Ok(reqwest::get(&url).await?.status().is_success().then_some(()))
            }
        })
        .await;
        r.with_context(|| tail(&log))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// PEM text of a DER block (rcgen is built here without its PEM feature).
fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap_or_default())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "last lines of {}:\n{}",
        path.display(),
        lines[lines.len().saturating_sub(40)..].join("\n")
    )
}

async fn operator_api(client: &Client, kind: &str, ns: &str) -> anyhow::Result<Api<DynamicObject>> {
    Ok(capkk_mgmt::dynamic_api(client, OPERATOR_V, kind, ns).await?.0)
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn conditions_text(obj: &Value) -> String {
    obj["status"]["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    format!(
                        "{}={} ({}: {})",
                        c["type"], c["status"], c["reason"], c["message"]
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_else(|| "no conditions".into())
}

/// Waits until the provider's condition `type_` has `status`; the last conditions are in the error.
async fn wait_condition(
    api: &Api<DynamicObject>,
    name: &str,
    type_: &str,
    status: &str,
    timeout: Duration,
    log: &Path,
) -> anyhow::Result<Value> {
    let what = format!("{} {name}: {type_}={status}", api.resource_url());
    let r = eventually(&what, timeout, POLL, || async {
        let obj = serde_json::to_value(api.get(name).await?)?;
        match condition(&obj, type_) {
            Some(c) if c["status"] == status => Ok(Some(obj)),
            _ => anyhow::Result::<Option<Value>>::Err(anyhow::anyhow!(conditions_text(&obj))),
        }
    })
    .await;
    r.with_context(|| tail(log))
}

async fn put_configmap(
    client: &Client,
    ns: &str,
    name: &str,
    provider: (&str, &str),
    version: &str,
    components: &Path,
    metadata: &Path,
) -> anyhow::Result<()> {
    let c =
        std::fs::read_to_string(components).with_context(|| format!("reading {}", components.display()))?;
    let m = std::fs::read_to_string(metadata).with_context(|| format!("reading {}", metadata.display()))?;
    let obj = provider_configmap(ns, name, provider, version, &c, &m)?;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply(capkk_mgmt::FIELD_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await?;
    Ok(())
}

async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await?.is_none() {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}}))?,
        )
        .await?;
    }
    Ok(())
}

/// What differs between the two clusters.
struct Target {
    client: Client,
    kubeconfig: PathBuf,
    /// Pods run: the manager runs as the Operator's Deployment (else the test runs it as a process).
    pods: bool,
    /// Registry holding the images (`REGISTRY/cluster-api/cluster-api-controller:<v>`, `REGISTRY/capkk-manager:<v>`,
    /// as test/clusterctl/config.sh's overrides name them); None: the components' own image names.
    registry: Option<String>,
}

/// The manager flags the InfrastructureProvider sets (`spec.manager`), and the args the Operator renders from them
/// after the Deployment's own: the same order as its customization writes them.
struct ManagerSpec {
    health: String,
    metrics: String,
}

impl ManagerSpec {
    fn spec(&self) -> Value {
        json!({
            "maxConcurrentReconciles": 4,
            "controller": {"groupKindConcurrency": {"KKMachine.infrastructure.cluster.x-k8s.io": 3}},
            "health": {"healthProbeBindAddress": self.health},
            "metrics": {"bindAddress": self.metrics},
            // TCG VMs renew slowly: the lengths test/vm/real.sh gives the Deployment clusterctl installs.
            "leaderElection": {
                "leaderElect": true, "resourceLock": "leases", "resourceNamespace": NS, "resourceName": LEASE,
                "leaseDuration": "60s", "renewDeadline": "40s", "retryPeriod": "10s",
            },
            "syncPeriod": "10m",
            "verbosity": 2,
            "featureGates": {"MachinePool": true},
            "additionalArgs": {"--ssh-connect-timeout": "20s"},
        })
    }

    fn rendered_args(&self) -> Vec<String> {
        [
            // config/manager's own, with clusterctl's variable defaults.
            "--leader-elect",
            "--max-concurrent-hosts=10",
            "--prepare-before-bootstrap-data=true",
            "--log-format=json",
            "--health-probe-bind-address=:8081",
            "--diagnostics-address=:8443",
            "--insecure-diagnostics=false",
            // The Operator's, from spec.manager.
            "--kkmachine.infrastructure.cluster.x-k8s.io-concurrency=3",
            "--max-concurrent-reconciles=4",
            &format!("--health-addr={}", self.health),
            &format!("--metrics-bind-addr={}", self.metrics),
            "--leader-elect=true",
            &format!("--leader-election-id={NS}/{LEASE}"),
            "--leader-elect-lease-duration=60s",
            "--leader-elect-renew-deadline=40s",
            "--leader-elect-retry-period=10s",
            "--sync-period=600s",
            "--v=2",
            "--feature-gates=MachinePool=true",
            "--ssh-connect-timeout=20s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

/// Everything up to our provider installed: the Operator's CRDs, the ConfigMaps, the Operator, the CoreProvider
/// Ready, the InfrastructureProvider installed. Returns the Operator (running) and the InfrastructureProvider.
async fn install(
    target: &Target,
    dir: &Path,
    manager: &ManagerSpec,
    show_name_clash: bool,
) -> anyhow::Result<(Operator, Value)> {
    let client = &target.client;
    let operator_dir = capkk_mgmt::operator_dir().await?;
    let operator_bin = operator_dir.join("operator");
    ensure!(
        operator_bin.is_file() && operator_dir.join("crds/.complete").is_file(),
        "the Cluster API Operator is not built ({}): run `make operator-bin`",
        operator_dir.display()
    );
    let artifacts = ClusterctlArtifacts::read()?;
    let bin_dir = capkk_mgmt::bin_dir().await?;

    capkk_mgmt::install_crds(client, &operator_dir.join("crds")).await?;
    for ns in [CORE_NS, NS] {
        ensure_namespace(client, ns).await?;
    }
    if !target.pods {
        // CAPI's core components hold cert-manager's Issuer and Certificate: its CRDs let the Operator create
        // them (nothing issues certificates here; no webhook of CAPI's is ever called on this plane).
        for doc in capkk_mgmt::read_yaml_docs(&artifacts.cert_manager())? {
            if doc["kind"] == "CustomResourceDefinition" {
                capkk_mgmt::apply(client, "", &doc).await?;
            }
        }
    }
    let capi = &artifacts.capi_version;
    let core_name = format!("cluster-api-{capi}");
    let core_files = (
        artifacts.core("core-components.yaml"),
        artifacts.core("metadata.yaml"),
    );
    put_configmap(
        client,
        CORE_NS,
        &core_name,
        CORE,
        capi,
        &core_files.0,
        &core_files.1,
    )
    .await?;
    let ours = release_repository(&dir.join("release"), &bin_dir)?;
    let (components, metadata) = (
        ours.join("infrastructure-components.yaml"),
        ours.join("metadata.yaml"),
    );
    put_configmap(
        client,
        NS,
        &format!("{PROVIDER}-{VERSION}"),
        OURS,
        VERSION,
        &components,
        &metadata,
    )
    .await?;

    let mut operator = Operator::start(&operator_bin, &target.kubeconfig, dir)?;
    operator.wait_healthy().await?;

    // The CoreProvider first: the Operator installs no other provider before the core one is Ready.
    let mut core_spec = json!({"version": capi, "fetchConfig": selector(CORE)});
    if target.pods {
        if let Some(r) = &target.registry {
            core_spec["deployment"] = json!({"containers": [
                {"name": "manager", "imageUrl": format!("{r}/cluster-api/cluster-api-controller:{capi}")}
            ]});
        }
    } else {
        // No Pod runs on the bare plane, and nothing in installing an infrastructure provider needs CAPI's
        // controllers: at zero replicas the deployment controller reports the Deployment Available, which is
        // what the Operator's health check turns into the CoreProvider's Ready.
        core_spec["deployment"] = json!({"replicas": 0});
    }
    let cores = operator_api(client, "CoreProvider", CORE_NS).await?;
    capkk_mgmt::apply(
        client,
        CORE_NS,
        &json!({"apiVersion": OPERATOR_V, "kind": "CoreProvider",
                "metadata": {"name": "cluster-api", "namespace": CORE_NS}, "spec": core_spec}),
    )
    .await?;
    wait_condition(&cores, "cluster-api", "Ready", "True", secs(200), &operator.log).await?;

    let infras = operator_api(client, "InfrastructureProvider", NS).await?;
    let mut spec = json!({
        "version": VERSION,
        "fetchConfig": selector(OURS),
        "manager": manager.spec(),
    });
    if let Some(r) = &target.registry {
        spec["deployment"] =
            json!({"containers": [{"name": "manager", "imageUrl": format!("{r}/capkk-manager:{VERSION}")}]});
    }
    if show_name_clash {
        // Without fetchConfig the name resolves to clusterctl's built-in entry: upstream KubeKey's GitHub
        // release (github.com/kubesphere/kubekey), another provider of the same API group. The Operator accepts it
        // (a known provider needs no fetchConfig) and asks GitHub for its releases; this machine reaches no
        // GitHub, so the fetch fails (after the GitHub client's own timeout, 2 min) saying so.
        let mut bare = spec.clone();
        if let Some(o) = bare.as_object_mut() {
            o.remove("fetchConfig");
        }
        capkk_mgmt::apply(
            client,
            NS,
            &json!({"apiVersion": OPERATOR_V, "kind": "InfrastructureProvider",
                    "metadata": {"name": PROVIDER, "namespace": NS}, "spec": bare}),
        )
        .await?;
        let p = wait_condition(
            &infras,
            PROVIDER,
            "ProviderInstalled",
            "False",
            secs(200),
            &operator.log,
        )
        .await?;
        ensure!(
            condition(&p, "ProviderInstalled").is_some_and(|c| c["reason"] == "ComponentsFetchError"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("GitHub repository client"))),
            "without fetchConfig, kubekey is fetched from upstream KubeKey's GitHub releases: {}",
            conditions_text(&p)
        );
    }
    capkk_mgmt::apply(
        client,
        NS,
        &json!({"apiVersion": OPERATOR_V, "kind": "InfrastructureProvider",
                "metadata": {"name": PROVIDER, "namespace": NS}, "spec": spec}),
    )
    .await?;
    wait_condition(
        &infras,
        PROVIDER,
        "ProviderInstalled",
        "True",
        secs(200),
        &operator.log,
    )
    .await?;
    // The Operator sets the condition and the installed version in separate status writes: on a cluster
    // whose API server answers slowly (a VM under TCG) the condition came 1 s alone.
    let p = eventually(
        &format!("the InfrastructureProvider reports {VERSION}, contract v1beta2"),
        secs(60),
        POLL,
        || async {
            let p = serde_json::to_value(infras.get(PROVIDER).await?)?;
            let done = p["status"]["installedVersion"] == VERSION && p["status"]["contract"] == "v1beta2";
            anyhow::Ok(done.then_some(p))
        },
    )
    .await?;
    Ok((operator, p))
}

/// What the Operator applied of ours: the CRDs and RBAC of the release, the Deployment owned by the
/// InfrastructureProvider with the image and args it rendered. Returns the Deployment.
async fn check_applied(
    target: &Target,
    provider: &Value,
    manager: &ManagerSpec,
) -> anyhow::Result<Deployment> {
    let client = &target.client;
    let label = "cluster.x-k8s.io/provider=infrastructure-kubekey";
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    let mut names: Vec<String> = crds
        .list(&ListParams::default().labels(label))
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    let mut ours: Vec<String> = std::fs::read_dir(capkk_mgmt::repo_root().join("config/crd/bases"))?
        .filter_map(|e| e.ok())
        .filter_map(|e| capkk_mgmt::read_yaml_docs(&e.path()).ok())
        .flatten()
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    ours.sort();
    ensure!(
        names == ours,
        "the Operator applied our CRDs {ours:?}, found {names:?}"
    );

    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    let role = roles
        .get("capkk-manager-role")
        .await
        .context("ClusterRole capkk-manager-role")?;
    let want = capkk_mgmt::read_yaml_docs(&capkk_mgmt::repo_root().join("config/rbac/role.yaml"))?.remove(0);
    ensure!(
        serde_json::to_value(&role.rules)? == want["rules"],
        "the ClusterRole the Operator applied has config/rbac/role.yaml's rules"
    );
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    let b = bindings
        .list(&ListParams::default().labels(label))
        .await?
        .items
        .into_iter()
        .find(|b| b.role_ref.name == "capkk-manager-role")
        .context("a ClusterRoleBinding of capkk-manager-role")?;
    ensure!(
        b.subjects
            .unwrap_or_default()
            .iter()
            .any(|s| s.name == DEPLOYMENT && s.namespace.as_deref() == Some(NS)),
        "capkk-manager-role is bound to {NS}/{DEPLOYMENT}"
    );

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let d = deployments.get(DEPLOYMENT).await?;
    let uid = provider["metadata"]["uid"].as_str().unwrap_or_default();
    ensure!(
        d.metadata.owner_references.as_ref().is_some_and(|o| o
            .iter()
            .any(|r| r.kind == "InfrastructureProvider" && r.uid == uid)),
        "the Deployment is owned by the InfrastructureProvider: {:?}",
        d.metadata.owner_references
    );
    let c = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.iter().find(|c| c.name == "manager"))
        .context("the Deployment has a manager container")?;
    let image = match &target.registry {
        Some(r) => format!("{r}/capkk-manager:{VERSION}"),
        None => format!("ghcr.io/capkk-rs/capkk-manager:{VERSION}"),
    };
    ensure!(
        c.image.as_deref() == Some(image.as_str()),
        "image {image}, got {:?}",
        c.image
    );
    let args = c.args.clone().unwrap_or_default();
    ensure!(
        args == manager.rendered_args(),
        "the Operator rendered the args\n  {:?}\nexpected\n  {:?}",
        args,
        manager.rendered_args()
    );
    Ok(d)
}

/// A kubeconfig for the ServiceAccount the Operator created for our manager (a TokenRequest token): the process
/// then has exactly the rights the Operator applied.
async fn service_account_kubeconfig(admin: &Client, admin_kc: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    let token = sas
        .create_token_request(
            DEPLOYMENT,
            &PostParams::default(),
            &TokenRequest {
                spec: TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?
        .status
        .context("TokenRequest returned no status")?
        .token;
    let kc = Kubeconfig::read_from(admin_kc)?;
    let cluster = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("admin kubeconfig has no cluster")?;
    let out = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "plane", "cluster": serde_json::to_value(&cluster)?}],
        "users": [{"name": DEPLOYMENT, "user": {"token": token}}],
        "contexts": [{"name": "manager", "context": {"cluster": "plane", "user": DEPLOYMENT}}],
        "current-context": "manager"
    });
    let path = dir.join("manager.kubeconfig");
    std::fs::write(&path, serde_json::to_string_pretty(&out)?)?;
    Ok(path)
}

async fn lease_holder(client: &Client) -> anyhow::Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    Ok(leases
        .get_opt(LEASE)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_installs_the_provider_and_the_manager_runs_with_the_args_it_rendered()
-> anyhow::Result<()> {
    let dir = work_dir("operator")?;
    let plane = capkk_mgmt::SecondPlane::up_bare("operator").await?;
    let kubeconfig = plane.plane().kubeconfig_path().to_owned();
    let target = Target {
        client: plane.plane().client().await?,
        kubeconfig: kubeconfig.clone(),
        pods: false,
        registry: None,
    };
    let manager = ManagerSpec {
        health: format!("127.0.0.1:{}", free_port()?),
        metrics: format!("127.0.0.1:{}", free_port()?),
    };
    let (operator, provider) = install(&target, &dir, &manager, true).await?;
    let deployment = check_applied(&target, &provider, &manager).await?;

    // No Pod runs here: the Operator's health check says so from the Deployment's Available condition.
    let infras = operator_api(&target.client, "InfrastructureProvider", NS).await?;
    let p = wait_condition(&infras, PROVIDER, "Ready", "False", secs(60), &operator.log).await?;
    ensure!(
        condition(&p, "Ready").is_some_and(|c| c["reason"] == "MinimumReplicasUnavailable"),
        "Ready reflects the Deployment's availability: {}",
        conditions_text(&p)
    );

    // Our manager with exactly the container's args and environment (the downward API's values filled in), as
    // the Operator's ServiceAccount: the flags are accepted, it serves health and metrics where the Operator told
    // it to and takes the Lease the Operator named.
    let args = check_container_args(&deployment)?;
    let sa_kc = service_account_kubeconfig(&target.client, &kubeconfig, &dir).await?;
    let pod_name = format!("{DEPLOYMENT}-operator-test");
    let log = dir.join("manager.log");
    let f = std::fs::File::create(&log)?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_manager"))
        .args(&args)
        .env("KUBECONFIG", &sa_kc)
        .env("POD_NAME", &pod_name)
        .env("POD_NAMESPACE", NS)
        .env("CAPKK_ARTIFACT_CACHE_DIR", dir.join("artifact-cache"))
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f)
        .spawn()?;
    let result = async {
        let client = reqwest::Client::new();
        for (what, url) in [
            (
                "/readyz on --health-addr",
                format!("http://{}/readyz", manager.health),
            ),
            (
                "/metrics on --metrics-bind-addr",
                format!("http://{}/metrics", manager.metrics),
            ),
        ] {
            eventually(&format!("the manager serves {what}"), secs(60), POLL, || async {
                Ok::<_, reqwest::Error>(client.get(&url).send().await?.status().is_success().then_some(()))
            })
            .await?;
        }
        eventually(
            &format!("{pod_name} holds the Lease {NS}/{LEASE}"),
            secs(60),
            POLL,
            || async {
                Ok::<_, anyhow::Error>(
                    (lease_holder(&target.client).await?.as_deref() == Some(pod_name.as_str())).then_some(()),
                )
            },
        )
        .await?;
        let text = std::fs::read_to_string(&log)?;
        ensure!(
            text.contains("--feature-gates"),
            "the manager names the flags it accepts and ignores (--feature-gates)"
        );
        anyhow::Ok(())
    }
    .await;
    let exited = child.try_wait()?;
    let _ = child.kill();
    let _ = child.wait();
    result.with_context(|| format!("manager exit: {exited:?}; {}", tail(&log)))?;
    drop(operator);
    plane.down().await?;
    Ok(())
}

/// The manager container's command-line, resolved as the kubelet would: `$(VAR)` references are not used by our
/// Deployment, so its args are the command's arguments as they are.
fn check_container_args(d: &Deployment) -> anyhow::Result<Vec<String>> {
    let c = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.iter().find(|c| c.name == "manager"))
        .context("manager container")?;
    ensure!(
        c.command.as_deref() == Some(&["/manager".to_owned()][..]),
        "the container runs /manager: {:?}",
        c.command
    );
    let args = c.args.clone().unwrap_or_default();
    ensure!(
        !args.iter().any(|a| a.contains("$(")),
        "no $(VAR) in the args: {args:?}"
    );
    Ok(args)
}

/// The same install on a cluster that runs Pods (`make operator-install-pods`): run explicitly, with
/// `OPERATOR_KUBECONFIG` (that cluster's admin kubeconfig) and `OPERATOR_REGISTRY` (where its nodes pull
/// `capkk-manager:<v>` and CAPI's images from); it leaves everything installed for inspection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster that runs Pods: make operator-install-pods OPERATOR_KUBECONFIG=... OPERATOR_REGISTRY=..."]
async fn the_operator_installs_the_provider_on_a_cluster_that_runs_pods_and_the_manager_pod_runs_its_args()
-> anyhow::Result<()> {
    let kubeconfig = PathBuf::from(
        std::env::var_os("OPERATOR_KUBECONFIG")
            .context("OPERATOR_KUBECONFIG (the cluster's kubeconfig) is not set")?,
    );
    let registry = std::env::var("OPERATOR_REGISTRY")
        .ok()
        .filter(|r| !r.is_empty())
        .context("OPERATOR_REGISTRY (host:port its nodes pull images from) is not set")?;
    let kc = Kubeconfig::read_from(&kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    // cert-manager first, as clusterctl init installs it: CAPI's core components hold its Issuer and Certificate.
    let cm: Api<Deployment> = Api::namespaced(client.clone(), "cert-manager");
    ensure!(
        cm.get_opt("cert-manager-webhook")
            .await?
            .is_some_and(|d| available(&d)),
        "cert-manager is not running in this cluster: install it first (clusterctl init does; docs/operator.md)"
    );
    let dir = work_dir("operator-pods")?;
    let target = Target {
        client,
        kubeconfig,
        pods: true,
        registry: Some(registry),
    };
    let manager = ManagerSpec {
        health: ":8081".into(),
        metrics: ":8080".into(),
    };
    let t0 = std::time::Instant::now();
    let (operator, provider) = install(&target, &dir, &manager, false).await?;
    eprintln!(
        "operator: InfrastructureProvider installed after {:?}",
        t0.elapsed()
    );
    check_applied(&target, &provider, &manager).await?;
    let infras = operator_api(&target.client, "InfrastructureProvider", NS).await?;
    wait_condition(&infras, PROVIDER, "Ready", "True", secs(400), &operator.log).await?;
    let deployments: Api<Deployment> = Api::namespaced(target.client.clone(), NS);
    let d = eventually(
        "the manager Deployment rolled out and Available",
        secs(400),
        POLL,
        || async {
            let d = deployments.get(DEPLOYMENT).await?;
            let st = d.status.clone().unwrap_or_default();
            let done = st.observed_generation == d.metadata.generation
                && st.updated_replicas == st.replicas
                && st.ready_replicas.unwrap_or(0) >= 1
                && available(&d);
            anyhow::Ok(done.then_some(d))
        },
    )
    .await?;
    eprintln!("operator: manager Deployment Available after {:?}", t0.elapsed());
    let sel = d
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(target.client.clone(), NS);
    let want = manager.rendered_args();
    let running = pods
        .list(&ListParams::default().labels(&sel))
        .await?
        .items
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.containers.iter().find(|c| c.name == "manager"))
                .and_then(|c| c.args.clone())
                .as_ref()
                == Some(&want)
        })
        .filter_map(|p| p.metadata.name)
        .collect::<Vec<_>>();
    ensure!(
        !running.is_empty(),
        "a manager Pod Running with the rendered args {want:?}"
    );
    let holder = eventually("a manager Pod holds the Lease", secs(200), POLL, || async {
        anyhow::Ok(
            lease_holder(&target.client)
                .await?
                .filter(|h| running.contains(h)),
        )
    })
    .await?;
    eprintln!(
        "operator: manager Pods {running:?} Running with the rendered args, {holder} leads; {:?} in all",
        t0.elapsed()
    );
    Ok(())
}

fn available(d: &Deployment) -> bool {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Available" && c.status == "True"))
}
