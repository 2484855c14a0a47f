//! The container manager service: containerd + runc + crictl from the artifact catalogue, with
//! `/etc/containerd/config.toml`, per-registry `hosts.toml`, `/etc/crictl.yaml` and the containerd unit, then
//! enable + start (restart when the configuration changed).
//!
//! Files written (all idempotently, in one exec together with the artifact installs):
//! - `/etc/containerd/config.toml` (version 2: `SystemdCgroup = true`, sandbox image, CNI dirs,
//!   `config_path = "/etc/containerd/certs.d"`);
//! - `/etc/containerd/certs.d/docker.io/hosts.toml` with the registry mirrors;
//! - `/etc/containerd/certs.d/<registry>/hosts.toml` for every insecure registry (`http://` and
//!   `skip_verify`) and for the private registry (TLS files and a basic-auth `Authorization` header from the
//!   registry auth; that file is mode 0600);
//! - `/etc/crictl.yaml`, `/etc/systemd/system/containerd.service`.
//!
//! A containerd that is already running with the requested version and was **not** installed by capkk (no
//! stamp in `/var/lib/capkk/artifacts/containerd`) is left alone: the phase is skipped. `type: docker` is
//! refused with [`Error::Unsupported`].

use std::time::Duration;

use capkk_executor::Executor;
use tracing::instrument;

use crate::{
    Error, Result,
    binary::{ArtifactCache, ArtifactRequest, ComponentSource, catalogue, stage_gated},
    facts::{
        HostFacts,
        script::{ExpectedFile, Script, file_probe, files_match, put_file},
    },
    host::{Vars, tpl},
    journal::{Progress, Redactor, StepRunner},
};

/// containerd config path.
pub const CONFIG_TOML: &str = "/etc/containerd/config.toml";
/// Directory of per-registry `hosts.toml` files.
pub const CERTS_D: &str = "/etc/containerd/certs.d";
/// crictl config path.
pub const CRICTL_YAML: &str = "/etc/crictl.yaml";
/// containerd unit path.
pub const CONTAINERD_UNIT: &str = "/etc/systemd/system/containerd.service";
/// Marker: containerd must be restarted once it runs (config or binaries changed).
pub const RESTART_MARKER: &str = "/var/lib/capkk/containerd-restart-pending";
/// The stamp of the containerd capkk installed: a running containerd without it is not capkk's, and neither
/// the container manager nor the reset touches it.
pub const CONTAINERD_STAMP: &str = "/var/lib/capkk/artifacts/containerd";
/// Default CRI socket.
pub const DEFAULT_CRI_SOCKET: &str = "unix:///run/containerd/containerd.sock";

/// Credentials and TLS for one registry. Debug never shows the password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistryAuth {
    /// User name.
    pub username: Option<String>,
    /// Password (secret).
    pub password: Option<String>,
    /// Skip TLS verification.
    pub insecure_skip_verify: bool,
    /// Plain HTTP.
    pub plain_http: bool,
    /// CA file on the host.
    pub ca_file: Option<String>,
    /// Client certificate on the host.
    pub cert_file: Option<String>,
    /// Client key on the host.
    pub key_file: Option<String>,
}

impl RegistryAuth {
    /// Every form in which these credentials reach a host and may come back in output: the password and
    /// the basic-auth token of the `Authorization` header (`base64(user:password)`). Redactors of every
    /// phase register them (a later command may print the registry's `hosts.toml`).
    pub fn secret_texts(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(p) = self.password.as_deref().filter(|p| !p.is_empty()) {
            out.push(p.to_owned());
            if let Some(u) = self.username.as_deref().filter(|u| !u.is_empty()) {
                use base64::Engine as _;
                out.push(base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}")));
            }
        }
        out
    }
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .field("plain_http", &self.plain_http)
            .finish_non_exhaustive()
    }
}

/// Inputs of [`ensure`] (mapped by the controller from `containerManager`, `registry` and `component`).
#[derive(Clone, Debug, Default)]
pub struct ContainerdConfig {
    /// `containerd` (default) or `docker` (refused).
    pub runtime_type: Option<String>,
    /// containerd version (default [`catalogue::DEFAULT_CONTAINERD_VERSION`]; the controllers always resolve one
    /// for the host's Kubernetes version, [`crate::components::resolve`]).
    pub version: Option<String>,
    /// crictl version (default [`catalogue::DEFAULT_CRICTL_VERSION`]).
    pub crictl_version: Option<String>,
    /// runc version (default [`catalogue::DEFAULT_RUNC_VERSION`]).
    pub runc_version: Option<String>,
    /// CRI socket (default [`DEFAULT_CRI_SOCKET`]).
    pub cri_socket: Option<String>,
    /// Pod sandbox image (default: the newest row of [`crate::components::COMPONENT_DEFAULTS`] from
    /// `registry.k8s.io`; the controllers always resolve one for the host's Kubernetes version).
    pub sandbox_image: Option<String>,
    /// docker.io mirrors (`https://mirror.example`).
    pub registry_mirrors: Vec<String>,
    /// Registries reached over plain HTTP / without TLS verification (`host[:port]`).
    pub insecure_registries: Vec<String>,
    /// Private registry (`host[:port]`) and its auth.
    pub private_registry: Option<String>,
    /// Auth for the private registry.
    pub registry_auth: Option<RegistryAuth>,
    /// Declared arch.
    pub arch: String,
    /// Download sources.
    pub source: ComponentSource,
    /// containerd's CRI `restrict_oom_score_adj`: never set a pod's score below containerd's own. Not an
    /// input: [`ensure`] sets it from the host's facts ([`HostFacts::can_lower_oom_score_adj`]), since on a
    /// host that may not lower scores every pod sandbox fails to start without it.
    pub restrict_oom_score_adj: bool,
}

/// What [`ensure`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerdOutcome {
    /// Bytes uploaded.
    pub bytes_uploaded: u64,
    /// True when a running containerd of the requested version, not installed by capkk, was left alone.
    pub skipped_existing: bool,
    /// True when anything changed.
    pub changed: bool,
    /// True when the service step changed anything (unit, enable, start or restart).
    pub restarted: bool,
}

fn socket_path(sock: &str) -> &str {
    sock.strip_prefix("unix://").unwrap_or(sock)
}

/// A registry `host[:port]`: it names a directory under [`CERTS_D`], so it starts with a letter, digit or
/// `[` (never `.` or `..`).
fn valid_registry(r: &str) -> bool {
    r.len() <= 261
        && r.as_bytes()
            .first()
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'[')
        && r.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:_[]".contains(&b))
}

/// A CRI socket: an absolute path (optionally `unix://`) of letters, digits, `.`, `_`, `-`, `/`.
pub(crate) fn valid_cri_socket(s: &str) -> bool {
    let p = socket_path(s);
    p.starts_with('/')
        && p.len() <= 200
        && !p.split('/').any(|c| c == "..")
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b))
}

/// Every version and the CRI socket, checked before anything is rendered or any host touched.
pub(crate) fn check_input(cfg: &ContainerdConfig) -> Result<()> {
    for (field, v) in [
        ("spec.containerManager.version", &cfg.version),
        ("spec.containerManager.crictlVersion", &cfg.crictl_version),
        ("spec.containerManager.runcVersion", &cfg.runc_version),
    ] {
        if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
            crate::binary::check_version(field, v)?;
        }
    }
    if let Some(s) = cfg.cri_socket.as_deref().filter(|s| !valid_cri_socket(s)) {
        return Err(Error::InvalidInput {
            field: "spec.containerManager.criSocket".into(),
            message: format!("{s:?} is not an absolute socket path (optionally unix://)"),
        });
    }
    Ok(())
}

fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `/etc/containerd/config.toml`.
pub fn config_toml(cfg: &ContainerdConfig) -> String {
    let sock = socket_path(cfg.cri_socket.as_deref().unwrap_or(DEFAULT_CRI_SOCKET));
    let sandbox = cfg
        .sandbox_image
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| crate::components::sandbox_image(None, crate::components::NEWEST.pause));
    format!(
        "# Managed by capkk.\nversion = 2\nroot = \"/var/lib/containerd\"\nstate = \"/run/containerd\"\n\n\
         [grpc]\n  address = {sock}\n\n\
         [plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = {sandbox}\n{oom}\
         \x20 [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n    default_runtime_name = \"runc\"\n\
         \x20   [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n      runtime_type = \"io.containerd.runc.v2\"\n\
         \x20     [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n        SystemdCgroup = true\n\
         \x20 [plugins.\"io.containerd.grpc.v1.cri\".cni]\n    bin_dir = \"/opt/cni/bin\"\n    conf_dir = \"/etc/cni/net.d\"\n\
         \x20 [plugins.\"io.containerd.grpc.v1.cri\".registry]\n    config_path = {certs}\n",
        sock = toml_str(sock),
        sandbox = toml_str(&sandbox),
        oom = if cfg.restrict_oom_score_adj {
            "  restrict_oom_score_adj = true\n"
        } else {
            ""
        },
        certs = toml_str(CERTS_D),
    )
}

/// `hosts.toml` files: `(registry, content, mode)`. The private registry's file may hold credentials.
pub fn hosts_tomls(cfg: &ContainerdConfig) -> Result<Vec<(String, String, u32)>> {
    let mut files = Vec::new();
    if !cfg.registry_mirrors.is_empty() {
        let mut s = String::from("server = \"https://registry-1.docker.io\"\n");
        for (i, m) in cfg.registry_mirrors.iter().enumerate() {
            if !(m.starts_with("http://") || m.starts_with("https://")) || m.contains(['"', '\n', ' ']) {
                return Err(Error::InvalidInput {
                    field: format!("spec.registry.registryMirrors[{i}]"),
                    message: format!("{m:?} is not an http(s) URL"),
                });
            }
            s.push_str(&format!(
                "\n[host.{}]\n  capabilities = [\"pull\", \"resolve\"]\n",
                toml_str(m.trim_end_matches('/'))
            ));
        }
        files.push(("docker.io".to_owned(), s, 0o644));
    }
    for (i, r) in cfg.insecure_registries.iter().enumerate() {
        let host = r
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/');
        if !valid_registry(host) {
            return Err(Error::InvalidInput {
                field: format!("spec.registry.insecureRegistries[{i}]"),
                message: format!("{r:?} is not a registry host[:port]"),
            });
        }
        if Some(host) == cfg.private_registry.as_deref() {
            continue; // rendered with the private registry below
        }
        files.push((
            host.to_owned(),
            format!(
                "server = {http}\n\n[host.{http}]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n\n\
                 [host.{https}]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n  skip_verify = true\n",
                http = toml_str(&format!("http://{host}")),
                https = toml_str(&format!("https://{host}")),
            ),
            0o644,
        ));
    }
    if let Some(reg) = cfg.private_registry.as_deref().filter(|r| !r.is_empty()) {
        if !valid_registry(reg) {
            return Err(Error::InvalidInput {
                field: "spec.registry.privateRegistry".into(),
                message: format!("{reg:?} is not a registry host[:port]"),
            });
        }
        let auth = cfg.registry_auth.clone().unwrap_or_default();
        let insecure = cfg
            .insecure_registries
            .iter()
            .any(|r| r.trim_start_matches("http://") == reg);
        let scheme = if auth.plain_http || insecure {
            "http"
        } else {
            "https"
        };
        let url = format!("{scheme}://{reg}");
        let mut s = format!(
            "server = {u}\n\n[host.{u}]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n",
            u = toml_str(&url)
        );
        if auth.insecure_skip_verify || insecure {
            s.push_str("  skip_verify = true\n");
        }
        if let Some(ca) = auth.ca_file.as_deref().filter(|s| !s.is_empty()) {
            s.push_str(&format!("  ca = {}\n", toml_str(ca)));
        }
        match (auth.cert_file.as_deref(), auth.key_file.as_deref()) {
            (Some(c), Some(k)) if !c.is_empty() && !k.is_empty() => {
                s.push_str(&format!("  client = [[{}, {}]]\n", toml_str(c), toml_str(k)));
            }
            (Some(c), None) | (None, Some(c)) if !c.is_empty() => {
                return Err(Error::InvalidInput {
                    field: "spec.registry.auth".into(),
                    message: "certFile and keyFile must be given together".into(),
                });
            }
            _ => {}
        }
        let mut mode = 0o644;
        match (auth.username.as_deref(), auth.password.as_deref()) {
            (Some(u), Some(p)) if !u.is_empty() => {
                use base64::Engine as _;
                let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
                s.push_str(&format!(
                    "  [host.{}.header]\n    Authorization = {}\n",
                    toml_str(&url),
                    toml_str(&format!("Basic {token}"))
                ));
                mode = 0o600;
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::InvalidInput {
                    field: "spec.registry.auth".into(),
                    message: "username and password must be given together".into(),
                });
            }
            _ => {}
        }
        files.push((reg.to_owned(), s, mode));
    }
    Ok(files)
}

/// `/etc/crictl.yaml`.
pub fn crictl_yaml(cfg: &ContainerdConfig) -> String {
    let sock = cfg.cri_socket.as_deref().unwrap_or(DEFAULT_CRI_SOCKET);
    format!("runtime-endpoint: {sock}\nimage-endpoint: {sock}\ntimeout: 10\ndebug: false\n")
}

/// The containerd unit (`pkg/service/host/units/containerd.service`).
pub fn containerd_unit() -> String {
    tpl::CONTAINERD_UNIT.to_owned()
}

/// Install and start containerd.
#[instrument(skip_all, fields(host = %exec.target()))]
pub async fn ensure(
    exec: &dyn Executor,
    cfg: &ContainerdConfig,
    facts: &HostFacts,
    cache: &ArtifactCache,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<ContainerdOutcome> {
    match cfg.runtime_type.as_deref().map(str::trim).unwrap_or("") {
        "" | "containerd" => {}
        "docker" => {
            return Err(Error::Unsupported {
                what: "spec.containerManager.type docker (docker + cri-dockerd is not implemented; use containerd)"
                    .into(),
            });
        }
        other => {
            return Err(Error::InvalidInput {
                field: "spec.containerManager.type".into(),
                message: format!("{other:?} is not one of containerd, docker"),
            });
        }
    }
    check_input(cfg)?;
    facts.check_arch(&cfg.arch)?;
    facts.init.require_systemctl()?;
    let cfg = &ContainerdConfig {
        restrict_oom_score_adj: !facts.can_lower_oom_score_adj,
        ..cfg.clone()
    };
    let mut redactor = redactor.clone();
    for t in cfg.registry_auth.iter().flat_map(RegistryAuth::secret_texts) {
        redactor.add(t);
    }
    let hosts = hosts_tomls(cfg)?;
    for (_, content, _) in &hosts {
        if let Some(tok) = content.split("Basic ").nth(1) {
            redactor.add(tok.trim_end().trim_end_matches('"'));
        }
    }
    let version = catalogue::normalize_version(
        "containerd",
        cfg.version
            .as_deref()
            .filter(|v| !v.is_empty())
            .unwrap_or(catalogue::DEFAULT_CONTAINERD_VERSION),
    );
    let requests = [
        ArtifactRequest::new("containerd", &version, &facts.arch),
        ArtifactRequest::new(
            "runc",
            cfg.runc_version
                .as_deref()
                .filter(|v| !v.is_empty())
                .unwrap_or(catalogue::DEFAULT_RUNC_VERSION),
            &facts.arch,
        ),
        ArtifactRequest::new(
            "crictl",
            cfg.crictl_version
                .as_deref()
                .filter(|v| !v.is_empty())
                .unwrap_or(catalogue::DEFAULT_CRICTL_VERSION),
            &facts.arch,
        ),
    ];
    let artifacts = requests
        .iter()
        .map(|r| catalogue::resolve(r, &cfg.source))
        .collect::<Result<Vec<_>>>()?;

    // Is a foreign containerd of this version already running? Checked (in the same exec as the artifact
    // probe) before anything is downloaded or uploaded. The same exec also tells whether the config/service
    // steps would change anything.
    let files = expected_files(cfg, &hosts);
    let probe = probe_script(cfg, &hosts);
    let mut foreign: Option<String> = None;
    let (staged, probe_out, proceed) = stage_gated(
        exec,
        &artifacts,
        cfg.source.download_on,
        cache,
        "containermanager",
        progress,
        &redactor,
        &probe,
        |extra| {
            let Some(line) = extra.lines().find_map(|l| l.strip_prefix("foreign=")) else {
                return Ok(true);
            };
            if line.split_whitespace().any(|w| w.trim_start_matches('v') == version) {
                foreign = Some(line.to_owned());
                return Ok(false);
            }
            Err(Error::HostMismatch {
                message: format!(
                    "a containerd not installed by capkk is running ({line}) but spec asks for {version}; stop and \
                     remove it, or set spec.containerManager.version to its version"
                ),
            })
        },
    )
    .await?;
    if !proceed {
        let runner = StepRunner {
            exec,
            progress,
            redactor: &redactor,
            phase: "containermanager",
        };
        runner.record_skip(
            "containerd",
            &format!(
                "containerd already running and not managed by capkk: {}",
                foreign.unwrap_or_default()
            ),
        );
        return Ok(ContainerdOutcome {
            skipped_existing: true,
            ..Default::default()
        });
    }
    let up_to_date = staged.script.is_empty()
        && files_match(&probe_out, &files)
        && ["@@enabled", "@@active"]
            .iter()
            .all(|m| probe_out.lines().any(|l| l == *m))
        && !probe_out.lines().any(|l| l == "@@restart-pending");
    if up_to_date {
        StepRunner {
            exec,
            progress,
            redactor: &redactor,
            phase: "containermanager",
        }
        .record_skip(
            "containerd-config",
            "containerd binaries, configuration and unit up to date; running",
        );
        return Ok(ContainerdOutcome::default());
    }
    let mut script = staged.script.clone();
    let restart_needed = !staged.uploaded.is_empty() || !staged.host_downloaded.is_empty();
    config_steps(&mut script, cfg, &hosts, restart_needed);
    let run = script
        .run(
            exec,
            "containermanager",
            progress,
            &redactor,
            Duration::from_secs(900),
        )
        .await?;
    Ok(ContainerdOutcome {
        bytes_uploaded: staged.bytes_uploaded,
        skipped_existing: false,
        changed: run.any_changed(),
        restarted: run.step_changed("containerd-service"),
    })
}

/// The files the config and service steps write: path, mode, digest.
fn expected_files(cfg: &ContainerdConfig, hosts: &[(String, String, u32)]) -> Vec<ExpectedFile> {
    let mut files = vec![ExpectedFile::new(CONFIG_TOML, 0o644, config_toml(cfg).as_bytes())];
    for (reg, content, mode) in hosts {
        files.push(ExpectedFile::new(
            &format!("{CERTS_D}/{reg}/hosts.toml"),
            *mode,
            content.as_bytes(),
        ));
    }
    files.push(ExpectedFile::new(CRICTL_YAML, 0o644, crictl_yaml(cfg).as_bytes()));
    files.push(ExpectedFile::new(
        CONTAINERD_UNIT,
        0o644,
        containerd_unit().as_bytes(),
    ));
    files
}

/// The caller's part of the artifact probe exec: a foreign containerd, the files, the service state.
pub(crate) fn probe_script(cfg: &ContainerdConfig, hosts: &[(String, String, u32)]) -> String {
    format!(
        "{foreign}{files}{service}",
        foreign = Vars::new()
            .var("STAMP", CONTAINERD_STAMP)
            .render(tpl::CONTAINERD_FOREIGN),
        files = file_probe(&expected_files(cfg, hosts)),
        service = Vars::new()
            .var("RESTART_MARKER", RESTART_MARKER)
            .render(tpl::CONTAINERD_PROBE),
    )
}

/// The `containerd-config` and `containerd-service` steps.
pub(crate) fn config_steps(
    script: &mut Script,
    cfg: &ContainerdConfig,
    hosts: &[(String, String, u32)],
    restart_needed: bool,
) {
    let mut conf = put_file(CONFIG_TOML, 0o644, config_toml(cfg).as_bytes());
    for (reg, content, mode) in hosts {
        conf.push_str(&put_file(
            &format!("{CERTS_D}/{reg}/hosts.toml"),
            *mode,
            content.as_bytes(),
        ));
    }
    conf.push_str(&put_file(CRICTL_YAML, 0o644, crictl_yaml(cfg).as_bytes()));
    script.step(
        "containerd-config",
        Vars::new()
            .raw(&conf)
            .var("RESTART_MARKER", RESTART_MARKER)
            .flag("RESTART", restart_needed)
            .render(tpl::CONTAINERD_CONFIG),
    );
    script.step(
        "containerd-service",
        Vars::new()
            .raw(&put_file(CONTAINERD_UNIT, 0o644, containerd_unit().as_bytes()))
            .var("RESTART_MARKER", RESTART_MARKER)
            .render(tpl::CONTAINERD_SERVICE),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_restricts_pod_oom_scores_only_where_the_host_cannot_lower_them() {
        let mut cfg = ContainerdConfig::default();
        assert!(!config_toml(&cfg).contains("restrict_oom_score_adj"));
        cfg.restrict_oom_score_adj = true;
        let toml = config_toml(&cfg);
        let cri = toml.find("[plugins.\"io.containerd.grpc.v1.cri\"]\n").unwrap();
        let at = toml.find("  restrict_oom_score_adj = true\n").unwrap();
        let next = toml[cri + 1..].find("\n  [").unwrap() + cri + 1;
        assert!(
            cri < at && at < next,
            "not a key of the CRI plugin's own table:\n{toml}"
        );
    }

    #[test]
    fn renders_config_and_hosts_files() {
        let cfg = ContainerdConfig {
            sandbox_image: Some("registry.local/pause:3.10".into()),
            registry_mirrors: vec!["https://mirror.example".into()],
            insecure_registries: vec!["10.0.0.9:5000".into()],
            private_registry: Some("registry.local".into()),
            registry_auth: Some(RegistryAuth {
                username: Some("u".into()),
                password: Some("hunter2-canary".into()),
                ca_file: Some("/etc/ssl/ca.pem".into()),
                ..Default::default()
            }),
            arch: "amd64".into(),
            ..Default::default()
        };
        let toml = config_toml(&cfg);
        assert!(toml.contains("SystemdCgroup = true"));
        assert!(toml.contains("sandbox_image = \"registry.local/pause:3.10\""));
        assert!(toml.contains("address = \"/run/containerd/containerd.sock\""));
        assert!(toml.contains("config_path = \"/etc/containerd/certs.d\""));
        let files = hosts_tomls(&cfg).unwrap();
        assert_eq!(files.len(), 3);
        assert_eq!(files[0].0, "docker.io");
        assert!(files[0].1.contains("[host.\"https://mirror.example\"]"));
        assert!(
            files[1].1.contains("server = \"http://10.0.0.9:5000\"")
                && files[1].1.contains("skip_verify = true")
        );
        let (reg, content, mode) = &files[2];
        assert_eq!(reg, "registry.local");
        assert_eq!(*mode, 0o600);
        assert!(content.contains("ca = \"/etc/ssl/ca.pem\""));
        assert!(content.contains("Authorization = \"Basic dTpodW50ZXIyLWNhbmFyeQ==\""));
        assert!(!format!("{cfg:?}").contains("hunter2"));
        // Both forms the credentials take on the host are known to every redactor.
        let texts = cfg
            .registry_auth
            .as_ref()
            .map(RegistryAuth::secret_texts)
            .unwrap_or_default();
        assert_eq!(texts, ["hunter2-canary", "dTpodW50ZXIyLWNhbmFyeQ=="]);
    }

    /// An executor that fails the test when called: the checks below must refuse before touching the host.
    struct NoHost;

    #[async_trait::async_trait]
    impl Executor for NoHost {
        async fn exec(
            &self,
            req: capkk_executor::ExecRequest,
        ) -> std::result::Result<capkk_executor::ExecOutput, capkk_executor::ExecError> {
            panic!("unexpected exec {req:?}")
        }
        async fn put(
            &self,
            req: capkk_executor::PutRequest,
        ) -> std::result::Result<u64, capkk_executor::ExecError> {
            panic!("unexpected put {req:?}")
        }
        async fn get(
            &self,
            path: &str,
            _: usize,
            _: bool,
        ) -> std::result::Result<Vec<u8>, capkk_executor::ExecError> {
            panic!("unexpected get {path}")
        }
        fn target(&self) -> String {
            "nohost".into()
        }
    }

    #[tokio::test]
    async fn refuses_docker_bad_types_and_wrong_arch_without_touching_the_host() {
        let facts =
            crate::facts::parse("@@os-release\nID=debian\n@@end\nmachine=x86_64\nsystemctl=/x\n").unwrap();
        let dir = std::env::temp_dir().join(format!("capkk-cm-unit-{}", std::process::id()));
        let cache = ArtifactCache::new(&dir).unwrap();
        let p = crate::journal::NoProgress;
        let r = Redactor::default();
        let mut cfg = ContainerdConfig {
            runtime_type: Some("docker".into()),
            arch: "amd64".into(),
            ..Default::default()
        };
        let e = ensure(&NoHost, &cfg, &facts, &cache, &p, &r).await.unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        cfg.runtime_type = Some("podman".into());
        let e = ensure(&NoHost, &cfg, &facts, &cache, &p, &r)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("spec.containerManager.type"), "{e}");
        cfg.runtime_type = None;
        cfg.arch = "arm64".into();
        let e = ensure(&NoHost, &cfg, &facts, &cache, &p, &r).await.unwrap_err();
        assert!(matches!(e, Error::HostMismatch { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rejects_bad_registry_input() {
        let bad = ContainerdConfig {
            registry_mirrors: vec!["mirror.example".into()],
            ..Default::default()
        };
        assert!(
            hosts_tomls(&bad)
                .unwrap_err()
                .to_string()
                .contains("registryMirrors[0]")
        );
        let bad = ContainerdConfig {
            insecure_registries: vec!["a b".into()],
            ..Default::default()
        };
        assert!(
            hosts_tomls(&bad)
                .unwrap_err()
                .to_string()
                .contains("insecureRegistries[0]")
        );
        let bad = ContainerdConfig {
            private_registry: Some("r.local".into()),
            registry_auth: Some(RegistryAuth {
                username: Some("u".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(hosts_tomls(&bad).unwrap_err().to_string().contains("together"));
    }

    #[tokio::test]
    async fn versions_and_cri_sockets_with_shell_metacharacters_are_refused_before_touching_the_host() {
        let facts =
            crate::facts::parse("@@os-release\nID=debian\n@@end\nmachine=x86_64\nsystemctl=/x\n").unwrap();
        let dir = std::env::temp_dir().join(format!("capkk-cm-inject-{}", std::process::id()));
        let cache = ArtifactCache::new(&dir).unwrap();
        let evil = "1.7.13'; touch /tmp/capkk-pwned; echo '";
        type Set = fn(&mut ContainerdConfig, &str);
        let cases: [(&str, Set); 4] = [
            ("spec.containerManager.version", |c, v| c.version = Some(v.into())),
            ("spec.containerManager.crictlVersion", |c, v| {
                c.crictl_version = Some(v.into())
            }),
            ("spec.containerManager.runcVersion", |c, v| {
                c.runc_version = Some(v.into())
            }),
            ("spec.containerManager.criSocket", |c, v| {
                c.cri_socket = Some(format!("/run/{v}"))
            }),
        ];
        for (field, set) in cases {
            let mut cfg = ContainerdConfig {
                arch: "amd64".into(),
                ..Default::default()
            };
            set(&mut cfg, evil);
            // Even with a checksum override for that version, nothing is resolved or rendered.
            cfg.source.overrides.push(catalogue::ArtifactOverride {
                id: "containerd".into(),
                checksum_value: Some("a".repeat(64)),
                ..Default::default()
            });
            let e = ensure(
                &NoHost,
                &cfg,
                &facts,
                &cache,
                &crate::journal::NoProgress,
                &Redactor::default(),
            )
            .await
            .unwrap_err();
            assert!(
                matches!(&e, Error::InvalidInput { field: f, .. } if f == field),
                "{field}: {e}"
            );
        }
        assert!(!std::path::Path::new("/tmp/capkk-pwned").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn registry_names_that_are_dot_or_dot_dot_are_refused() {
        for bad in [".", "..", ".hidden", "-x"] {
            let cfg = ContainerdConfig {
                insecure_registries: vec![bad.into()],
                ..Default::default()
            };
            assert!(hosts_tomls(&cfg).is_err(), "{bad:?} accepted");
            let cfg = ContainerdConfig {
                private_registry: Some(bad.into()),
                ..Default::default()
            };
            assert!(hosts_tomls(&cfg).is_err(), "{bad:?} accepted");
        }
        let ok = ContainerdConfig {
            insecure_registries: vec!["198.18.0.9:5000".into(), "[fd00::1]:5000".into()],
            ..Default::default()
        };
        assert_eq!(hosts_tomls(&ok).unwrap().len(), 2);
    }
}
