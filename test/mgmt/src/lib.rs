//! Local management plane for tests: etcd, kube-apiserver and the real Cluster API managers (core,
//! kubeadm bootstrap, kubeadm control plane) running as local processes on loopback.
//!
//! The plane is started by `test/mgmt/scripts/mgmt.sh up` (also `make mgmt-up`), which is idempotent and
//! serialized by a lock file: the first caller starts it, every later caller (another test binary, another
//! engineer's test run) reuses the running plane. It keeps running after the tests; `make mgmt-down` stops
//! it. The Go-built binaries must exist (`make mgmt-bin`); otherwise [`ManagementPlane::shared`] fails with
//! the script's message naming the missing binaries.
//!
//! ```no_run
//! # async fn demo() -> Result<(), capkk_mgmt::Error> {
//! let plane = capkk_mgmt::ManagementPlane::shared().await?;
//! let client = plane.client().await?;
//! capkk_mgmt::install_crds(&client, &capkk_mgmt::repo_root().join("config/crd/bases")).await?;
//! # Ok(()) }
//! ```
//!
//! Paths, ports and make targets are documented in `test/mgmt/README.md`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::{Client, Config};
use tokio::process::Command;
use tokio::sync::OnceCell;
use tracing::{info, instrument};

mod runtime_extension;
pub use runtime_extension::RuntimeExtension;

/// Field manager used for server-side apply by this crate.
pub const FIELD_MANAGER: &str = "capkk-mgmt";

/// How long [`ManagementPlane::up`] waits for the start script (which has its own 4 minute readiness
/// timeout, plus time spent waiting for the lock held by a concurrent caller).
const UP_TIMEOUT: Duration = Duration::from_secs(600);

/// Errors of the management plane helpers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The start/stop script could not be executed at all.
    #[error("run {script}: {source}")]
    RunScript {
        /// Path of the script.
        script: PathBuf,
        /// Underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The script ran but reported a failure (missing binaries, a component that did not come up, ...).
    #[error("`{script} {command}` failed ({status}):\n{stderr}")]
    ScriptFailed {
        /// Path of the script.
        script: PathBuf,
        /// Sub-command (`up`, `down`, ...).
        command: String,
        /// Exit status.
        status: std::process::ExitStatus,
        /// The script's standard error (component log tails on startup failures).
        stderr: String,
    },
    /// The script did not finish in time.
    #[error("`{script} up` did not finish within {timeout:?}")]
    ScriptTimeout {
        /// Path of the script.
        script: PathBuf,
        /// The timeout.
        timeout: Duration,
    },
    /// The kubeconfig written by the plane could not be read.
    #[error("read kubeconfig {path}: {source}")]
    ReadKubeconfig {
        /// Kubeconfig path.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kube client could not be built.
    #[error("create kube client: {0}")]
    CreateClient(#[source] kube::Error),
    /// A manifest file could not be read.
    #[error("read manifest {path}: {source}")]
    ReadManifest {
        /// File path.
        path: PathBuf,
        /// Underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A manifest could not be parsed.
    #[error("parse manifest {origin}: {message}")]
    ParseManifest {
        /// File path or other origin of the manifest.
        origin: String,
        /// Parser message.
        message: String,
    },
    /// A manifest lacks a required field.
    #[error("manifest {origin}: missing or invalid field `{field}`")]
    InvalidManifest {
        /// File path or other origin of the manifest.
        origin: String,
        /// The field.
        field: &'static str,
    },
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was attempted, e.g. `apply CRD kkclusters.infrastructure.cluster.x-k8s.io`.
        action: String,
        /// Underlying error.
        #[source]
        source: kube::Error,
    },
    /// A CRD did not become Established in time.
    #[error("CRD {name} not established within {timeout:?}")]
    CrdNotEstablished {
        /// CRD name.
        name: String,
        /// The timeout.
        timeout: Duration,
    },
    /// What [`eventually`] waited for did not happen in time.
    #[error("timed out after {timeout:?} waiting for {what}{}", last.as_ref().map(|e| format!("; last error: {e}")).unwrap_or_default())]
    Timeout {
        /// What was waited for.
        what: String,
        /// The timeout.
        timeout: Duration,
        /// The last error the check returned (alternate form, i.e. with its causes).
        last: Option<String>,
    },
}

/// A name unique across test runs against the same (long-lived) plane.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(7))
        .unwrap_or_default();
    format!("{prefix}-{:x}{:x}", std::process::id() & 0xfff, nanos & 0xfffff)
}

/// Polls `check` every `poll` until it returns `Some`, failing after `timeout` with `what` and the last error
/// `check` returned in the message (errors do not end the wait). The tests' one wait loop.
pub async fn eventually<T, E, F, Fut>(
    what: &str,
    timeout: Duration,
    poll: Duration,
    mut check: F,
) -> Result<T, Error>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, E>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = Some(format!("{e:#}")),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_owned(),
                timeout,
                last,
            });
        }
        tokio::time::sleep(poll).await;
    }
}

/// A running local management plane.
#[derive(Debug, Clone)]
pub struct ManagementPlane {
    kubeconfig: PathBuf,
}

static SHARED: OnceCell<ManagementPlane> = OnceCell::const_new();

impl ManagementPlane {
    /// Returns the management plane shared by all tests of this process, starting it on first use (or
    /// reusing one that already runs). A failed start is retried by the next call.
    pub async fn shared() -> Result<&'static ManagementPlane, Error> {
        SHARED.get_or_try_init(Self::up).await
    }

    /// Ensures the plane runs (`mgmt.sh up`: idempotent, serialized by a lock file) and returns a handle.
    #[instrument]
    pub async fn up() -> Result<ManagementPlane, Error> {
        let started = std::time::Instant::now();
        let out = run_script("up", UP_TIMEOUT, &[]).await?;
        info!(elapsed = ?started.elapsed(), "management plane up: {}", out.trim());
        let path = run_script("kubeconfig", Duration::from_secs(30), &[]).await?;
        Ok(ManagementPlane {
            kubeconfig: PathBuf::from(path.trim()),
        })
    }

    /// Path of the admin kubeconfig of the plane.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A new admin client for the plane. Create one per test (per tokio runtime); clients must not be
    /// shared across runtimes.
    pub async fn client(&self) -> Result<Client, Error> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).map_err(|source| Error::ReadKubeconfig {
            path: self.kubeconfig.clone(),
            source,
        })?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|source| Error::ReadKubeconfig {
                path: self.kubeconfig.clone(),
                source,
            })?;
        Client::try_from(config).map_err(Error::CreateClient)
    }
}

/// A second, independent management plane (its own state directory and ports; e.g. the target of
/// `clusterctl move`), stopped and wiped by [`SecondPlane::down`] or on drop.
#[derive(Debug)]
pub struct SecondPlane {
    plane: ManagementPlane,
    env: Vec<(&'static str, String)>,
    down: bool,
}

/// How far a second plane's ports are shifted from the plane of `CAPKK_MGMT_PORT_OFFSET`: past every offset
/// the checkouts of one machine use (0..=100), and still below the ephemeral port range.
pub const SECOND_PLANE_PORT_SHIFT: u32 = 1500;

/// How far a bare plane's ports ([`SecondPlane::up_bare`]) are shifted: past every second plane's (1500 plus
/// offsets up to 100), still below the ephemeral port range.
pub const BARE_PLANE_PORT_SHIFT: u32 = 1700;

impl SecondPlane {
    /// Starts (or reuses) the plane in `<shared plane dir>-<suffix>` with ports shifted by
    /// [`SECOND_PLANE_PORT_SHIFT`] from the shared plane's.
    pub async fn up(suffix: &str) -> Result<SecondPlane, Error> {
        Self::up_with(suffix, &[], SECOND_PLANE_PORT_SHIFT).await
    }

    /// [`SecondPlane::up`] without CAPI (`mgmt.sh up --bare`): etcd, kube-apiserver and kube-controller-manager
    /// with the deployment controllers, for a test that installs CAPI itself (the Cluster API Operator). Its
    /// ports are shifted by [`BARE_PLANE_PORT_SHIFT`], so that it never meets a plane of [`SecondPlane::up`].
    pub async fn up_bare(suffix: &str) -> Result<SecondPlane, Error> {
        Self::up_with(suffix, &["--bare"], BARE_PLANE_PORT_SHIFT).await
    }

    async fn up_with(suffix: &str, args: &[&str], shift: u32) -> Result<SecondPlane, Error> {
        // The shared plane's directory, defaulted as scripts/common.sh does.
        let base = std::env::var("CAPKK_MGMT_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                std::env::var("CAPKK_CACHE")
                    .map(PathBuf::from)
                    .unwrap_or_else(|_| {
                        PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                            .join(".cache/capkk-rs")
                    })
                    .join("mgmt")
            });
        let offset: u32 = std::env::var("CAPKK_MGMT_PORT_OFFSET")
            .ok()
            .and_then(|o| o.trim().parse().ok())
            .unwrap_or(0);
        let dir = format!("{}-{suffix}", base.display());
        let env = vec![
            ("CAPKK_MGMT_DIR", dir),
            ("CAPKK_MGMT_PORT_OFFSET", (offset + shift).to_string()),
        ];
        let started = std::time::Instant::now();
        let out = run_script_args("up", args, UP_TIMEOUT, &env).await?;
        info!(elapsed = ?started.elapsed(), "second management plane up: {}", out.trim());
        let path = run_script("kubeconfig", Duration::from_secs(30), &env).await?;
        Ok(SecondPlane {
            plane: ManagementPlane {
                kubeconfig: PathBuf::from(path.trim()),
            },
            env,
            down: false,
        })
    }

    /// The running plane.
    pub fn plane(&self) -> &ManagementPlane {
        &self.plane
    }

    /// Stops the plane's processes and wipes its state.
    pub async fn down(mut self) -> Result<(), Error> {
        self.down = true;
        run_script("down", Duration::from_secs(120), &self.env)
            .await
            .map(|_| ())
    }
}

impl Drop for SecondPlane {
    fn drop(&mut self) {
        if !self.down {
            // Synchronous: a test that panicked must not leave a plane running.
            let _ = std::process::Command::new("bash")
                .arg(script_path())
                .arg("down")
                .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
                .stdin(std::process::Stdio::null())
                .status();
        }
    }
}

/// Directory of the pinned binaries (`kubectl`, `clusterctl`, ...), as `mgmt.sh bin-dir` prints it. The
/// binaries exist once the plane is up (`ManagementPlane::up` refuses to start without them).
pub async fn bin_dir() -> Result<PathBuf, Error> {
    let out = run_script("bin-dir", Duration::from_secs(30), &[]).await?;
    Ok(PathBuf::from(out.trim()))
}

/// Directory of the pinned Flux controllers (`source-controller`, `kustomize-controller`) and their CRDs
/// (`crds/`), as `mgmt.sh flux-dir` prints it. Built by `make flux-bin`, not by `up`: only the GitOps test
/// needs them, and it fails naming that target when they are missing.
pub async fn flux_dir() -> Result<PathBuf, Error> {
    let out = run_script("flux-dir", Duration::from_secs(30), &[]).await?;
    Ok(PathBuf::from(out.trim()))
}

/// Directory of the pinned Cluster API Operator (`operator`) and its CRDs (`crds/`), as `mgmt.sh operator-dir`
/// prints it. Built by `make operator-bin`, not by `up`: only the Operator's tests need it
/// (docs/operator.md).
pub async fn operator_dir() -> Result<PathBuf, Error> {
    let out = run_script("operator-dir", Duration::from_secs(30), &[]).await?;
    Ok(PathBuf::from(out.trim()))
}

/// Path of the management plane script (`test/mgmt/scripts/mgmt.sh`).
pub fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join("mgmt.sh")
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| {
            // canonicalize only fails if the source tree vanished; keep the lexical path then.
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
        })
}

async fn run_script(command: &str, timeout: Duration, env: &[(&str, String)]) -> Result<String, Error> {
    run_script_args(command, &[], timeout, env).await
}

async fn run_script_args(
    command: &str,
    args: &[&str],
    timeout: Duration,
    env: &[(&str, String)],
) -> Result<String, Error> {
    let script = script_path();
    let child = Command::new("bash")
        .arg(&script)
        .arg(command)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(timeout, child)
        .await
        .map_err(|_| Error::ScriptTimeout {
            script: script.clone(),
            timeout,
        })?
        .map_err(|source| Error::RunScript {
            script: script.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::ScriptFailed {
            script,
            command: command.to_owned(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    // mgmtctl reports on stderr; commands that print a value (kubeconfig) use stdout.
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok(if stdout.trim().is_empty() {
        String::from_utf8_lossy(&out.stderr).into_owned()
    } else {
        stdout
    })
}

/// Parses every YAML document of `text` into JSON values (empty documents are skipped).
pub fn parse_yaml_docs(text: &str, origin: &str) -> Result<Vec<serde_json::Value>, Error> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| Error::ParseManifest {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Reads and parses a (multi-document) YAML file.
pub fn read_yaml_docs(path: &Path) -> Result<Vec<serde_json::Value>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadManifest {
        path: path.to_owned(),
        source,
    })?;
    parse_yaml_docs(&text, &path.display().to_string())
}

/// Server-side applies every CRD in `dir` (`*.yaml`, sorted) and waits until all are Established.
/// Returns the CRD names.
#[instrument(skip(client))]
pub async fn install_crds(client: &Client, dir: &Path) -> Result<Vec<String>, Error> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| Error::ReadManifest {
            path: dir.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for file in &files {
        for doc in read_yaml_docs(file)? {
            let origin = file.display().to_string();
            let crd: CustomResourceDefinition =
                serde_json::from_value(doc).map_err(|e| Error::ParseManifest {
                    origin: origin.clone(),
                    message: e.to_string(),
                })?;
            let name = crd.metadata.name.clone().ok_or(Error::InvalidManifest {
                origin,
                field: "metadata.name",
            })?;
            crds.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .map_err(|source| Error::Api {
                action: format!("apply CRD {name}"),
                source,
            })?;
            names.push(name);
        }
    }
    for name in &names {
        wait_established(&crds, name).await?;
    }
    Ok(names)
}

async fn wait_established(crds: &Api<CustomResourceDefinition>, name: &str) -> Result<(), Error> {
    let timeout = Duration::from_secs(60);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let crd = crds.get(name).await.map_err(|source| Error::Api {
            action: format!("get CRD {name}"),
            source,
        })?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::CrdNotEstablished {
                name: name.to_owned(),
                timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An `Api<DynamicObject>` for `apiVersion`/`kind`, resolved through discovery. `namespace` is used for
/// namespaced kinds and ignored for cluster-scoped ones.
pub async fn dynamic_api(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
) -> Result<(Api<DynamicObject>, ApiResource), Error> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|source| Error::Api {
            action: format!("discover {api_version} {kind}"),
            source,
        })?;
    let api = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &ar),
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    Ok((api, ar))
}

/// Server-side applies one object given as JSON (`apiVersion`, `kind`, `metadata.name` required) into
/// `namespace` (for namespaced kinds) and returns the object as stored (after defaulting webhooks).
pub async fn apply(
    client: &Client,
    namespace: &str,
    obj: &serde_json::Value,
) -> Result<DynamicObject, Error> {
    let field = |f: &'static str, v: Option<&str>| {
        v.map(str::to_owned).ok_or(Error::InvalidManifest {
            origin: "object".into(),
            field: f,
        })
    };
    let api_version = field("apiVersion", obj["apiVersion"].as_str())?;
    let kind = field("kind", obj["kind"].as_str())?;
    let name = field("metadata.name", obj["metadata"]["name"].as_str())?;
    let (api, _) = dynamic_api(client, &api_version, &kind, namespace).await?;
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(|source| Error::Api {
        action: format!("apply {kind} {namespace}/{name}"),
        source,
    })
}
