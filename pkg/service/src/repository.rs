//! The repository service: OS packages needed by Kubernetes, installed non-interactively.
//!
//! One probe exec decides which packages are missing (`dpkg-query` on apt hosts, `rpm -q --whatprovides` on
//! dnf/yum hosts); when none is, nothing else runs (no index refresh, no package manager call). Otherwise one
//! exec waits for the package-manager lock, refreshes the index when `update` is set (or an ISO is used), and
//! installs exactly the missing packages.
//!
//! ISO mode (`iso: auto` or a file name): the ISO is fetched through the controller cache (SHA-256 from
//! `component.overrides[id=iso]`), uploaded to `/var/lib/capkk/repository/<iso>` unless the host already has
//! it with the same digest, loop-mounted read-only on `/mnt/capkk-repository`, used as the **only** source
//! (apt: `Dir::Etc::sourcelist` pointing at a capkk list, `sourceparts` disabled; dnf/yum: a temporary
//! `capkk-iso` repo with every other repo disabled), then unmounted and the temporary repo file removed, so the
//! host's own sources are never modified.

use std::time::Duration;

use capkk_executor::{ExecRequest, Executor, PutRequest};
use tracing::instrument;

use crate::{
    Error, Result,
    binary::{ArtifactCache, ComponentSource, catalogue, check_sha256, strip_userinfo},
    facts::{
        HostFacts, PackageManager,
        script::{Script, sha256_hex},
    },
    host::{Vars, tpl},
    journal::{Progress, Redactor, StepRecord, StepRunner},
};

/// Default packages on apt hosts.
pub const DEFAULT_APT_PACKAGES: &[&str] = &["conntrack", "socat", "ebtables", "ipset", "ipvsadm", "chrony"];
/// Packages of a control plane that holds the cluster's endpoint itself (keepalived VIP + haproxy), apt hosts.
pub const LOADBALANCER_APT_PACKAGES: &[&str] = &["keepalived", "haproxy"];
/// Default packages on dnf/yum hosts.
pub const DEFAULT_RPM_PACKAGES: &[&str] = &[
    "openssl",
    "conntrack-tools",
    "socat",
    "ebtables",
    "ipset",
    "ipvsadm",
    "chrony",
];
/// The packages of a control-plane endpoint served by the provider (`controlPlaneLoadBalancer.type:
/// Keepalived`) on dnf/yum hosts ([`LOADBALANCER_APT_PACKAGES`] on apt hosts): installed on control-plane hosts
/// by [`crate::loadbalancer`] through [`ensure`].
pub const LOADBALANCER_RPM_PACKAGES: &[&str] = &["keepalived", "haproxy"];
/// Where an ISO is kept on the host.
pub const ISO_DIR: &str = "/var/lib/capkk/repository";
/// Where an ISO is mounted.
pub const ISO_MOUNT: &str = "/mnt/capkk-repository";
/// Seconds to wait for a package-manager lock.
pub const LOCK_WAIT_SECS: u32 = 600;

/// Where packages come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackageSource {
    /// The host's configured sources (`iso: none`).
    HostSources,
    /// An ISO file (`iso: auto` resolves the name from the OS and arch).
    Iso(String),
}

/// Inputs of [`ensure`] (mapped from `KKMachine.spec.repository` and `component`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepositoryConfig {
    /// Package source.
    pub source: PackageSource,
    /// Refresh the index before installing.
    pub update: bool,
    /// Packages (empty: the OS family's defaults).
    pub packages: Vec<String>,
    /// Download sources (ISO mode).
    pub component: ComponentSource,
}

impl RepositoryConfig {
    /// Map the API's `iso` value: `None`/`""` → `None` (skip the phase), `none` → host sources, else ISO.
    pub fn from_api(
        iso: Option<&str>,
        update: bool,
        packages: Vec<String>,
        component: ComponentSource,
    ) -> Option<Self> {
        let source = match iso.map(str::trim) {
            None | Some("") => return None,
            Some("none") => PackageSource::HostSources,
            Some(name) => PackageSource::Iso(name.to_owned()),
        };
        Some(Self {
            source,
            update,
            packages,
            component,
        })
    }
}

/// What [`ensure`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepositoryOutcome {
    /// Packages that were missing and got installed.
    pub installed: Vec<String>,
    /// Bytes uploaded (ISO).
    pub bytes_uploaded: u64,
}

fn valid_package(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('-')
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-._:".contains(&b))
}

/// The package list for this host.
pub fn packages_for(cfg: &RepositoryConfig, pm: PackageManager) -> Result<Vec<String>> {
    let list: Vec<String> = if cfg.packages.is_empty() {
        match pm {
            PackageManager::Apt => DEFAULT_APT_PACKAGES,
            PackageManager::Dnf | PackageManager::Yum => DEFAULT_RPM_PACKAGES,
        }
        .iter()
        .map(|s| s.to_string())
        .collect()
    } else {
        cfg.packages.clone()
    };
    for (i, p) in list.iter().enumerate() {
        if !valid_package(p) {
            return Err(Error::InvalidInput {
                field: format!("spec.repository.packages[{i}]"),
                message: format!("{p:?} is not a package name"),
            });
        }
    }
    Ok(list)
}

/// `iso: auto` naming (KubeKey's ISO builder): `ubuntu-<ver>-debs-<arch>.iso`, `debian<major>-debs-<arch>.iso`,
/// `centos<major>-rpms-<arch>.iso`, else `<id>-<ver>-<arch>.iso`.
pub fn auto_iso_name(facts: &HostFacts) -> String {
    let major = facts.os_version.split('.').next().unwrap_or_default();
    match facts.os_id.as_str() {
        "ubuntu" => format!("ubuntu-{}-debs-{}.iso", facts.os_version, facts.arch),
        "debian" => format!("debian{major}-debs-{}.iso", facts.arch),
        "centos" => format!("centos{major}-rpms-{}.iso", facts.arch),
        id => format!("{id}-{}-{}.iso", facts.os_version, facts.arch),
    }
}

/// The probe command: prints `missing=<pkg>` for every package not installed.
pub fn probe_command(pm: PackageManager, packages: &[String]) -> String {
    let tpl = match pm {
        PackageManager::Apt => tpl::PKG_PROBE_APT,
        PackageManager::Dnf | PackageManager::Yum => tpl::PKG_PROBE_RPM,
    };
    Vars::new().args(packages).render(tpl)
}

/// The install script for `missing` packages (pure; used by tests).
pub fn install_script(pm: PackageManager, missing: &[String], update: bool, iso: Option<&str>) -> Script {
    let mut s = Script::new();
    let vars = Vars::new()
        .var("ISO", iso.map(|i| format!("{ISO_DIR}/{i}")).unwrap_or_default())
        .var("ISO_MOUNT", ISO_MOUNT)
        .var("LOCK_WAIT", LOCK_WAIT_SECS.to_string())
        .flag("UPDATE", update);
    let body = match pm {
        PackageManager::Apt => vars.var("ISO_DIR", ISO_DIR).args(missing).render(&format!(
            "{}{}",
            tpl::ISO_MOUNT,
            tpl::INSTALL_APT
        )),
        PackageManager::Dnf | PackageManager::Yum => {
            let repo =
                format!("[capkk-iso]\nname=capkk ISO\nbaseurl=file://{ISO_MOUNT}\nenabled=1\ngpgcheck=0\n");
            vars.var("PM", pm.command())
                .var("REPO_SHA", sha256_hex(repo.as_bytes()))
                .var(
                    "REPO_B64",
                    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, repo),
                )
                .args(missing)
                .render(&format!("{}{}", tpl::ISO_MOUNT, tpl::INSTALL_RPM))
        }
    };
    s.step("install-packages", body);
    s
}

/// `name` when it is a file name (the CRD pattern: letters, digits, `.`, `_`, `+`, `-`, not starting with `.`
/// or `-`): it is joined under [`ISO_DIR`] on the host.
pub fn check_iso_name(name: &str) -> Result<()> {
    let file_name = name.len() <= 255
        && name.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b));
    if file_name {
        Ok(())
    } else {
        Err(Error::InvalidInput {
            field: "spec.repository.iso".into(),
            message: format!("{name:?} must be a file name (letters, digits, '.', '_', '+', '-')"),
        })
    }
}

/// The command printing the SHA-256 of the ISO at `path` on the host (empty when missing).
pub fn iso_probe_command(path: &str) -> String {
    Vars::new().var("ISO", path).render(tpl::ISO_PROBE)
}

/// Ensure the packages are installed.
#[instrument(skip_all, fields(host = %exec.target()))]
pub async fn ensure(
    exec: &dyn Executor,
    cfg: &RepositoryConfig,
    facts: &HostFacts,
    cache: &ArtifactCache,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<RepositoryOutcome> {
    let pm = facts.require_package_manager()?;
    let packages = packages_for(cfg, pm)?;
    let runner = StepRunner {
        exec,
        progress,
        redactor,
        phase: "repository",
    };
    let out = runner
        .run(
            "probe-packages",
            ExecRequest::new(probe_command(pm, &packages))
                .sudo()
                .timeout(Duration::from_secs(120)),
        )
        .await?;
    let missing: Vec<String> = out
        .stdout_str()
        .lines()
        .filter_map(|l| l.strip_prefix("missing="))
        .map(str::to_owned)
        .collect();
    if missing.is_empty() {
        runner.record_skip(
            "install-packages",
            &format!("all {} packages installed", packages.len()),
        );
        return Ok(RepositoryOutcome::default());
    }
    let mut outcome = RepositoryOutcome::default();
    let iso = match &cfg.source {
        PackageSource::HostSources => None,
        PackageSource::Iso(name) => {
            let name = if name == "auto" {
                auto_iso_name(facts)
            } else {
                name.clone()
            };
            check_iso_name(&name)?;
            outcome.bytes_uploaded = upload_iso(exec, &name, cfg, cache, progress, redactor).await?;
            Some(name)
        }
    };
    install_script(pm, &missing, cfg.update, iso.as_deref())
        .run(exec, "repository", progress, redactor, Duration::from_secs(1800))
        .await?;
    outcome.installed = missing;
    Ok(outcome)
}

async fn upload_iso(
    exec: &dyn Executor,
    name: &str,
    cfg: &RepositoryConfig,
    cache: &ArtifactCache,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<u64> {
    let ov = cfg.component.overrides.iter().find(|o| o.id == "iso");
    let host = cfg.component.host.as_deref().filter(|h| !h.is_empty());
    let base = host.unwrap_or("https://github.com").trim_end_matches('/');
    let (url, url_field) = match ov {
        Some(o) if o.url.as_deref().is_some_and(|u| !u.is_empty()) => (
            o.url.clone().unwrap_or_default(),
            "spec.component.overrides[id=iso].url",
        ),
        Some(o) if o.path.as_deref().is_some_and(|p| !p.is_empty()) => (
            format!(
                "{base}/{}",
                o.path.as_deref().unwrap_or_default().trim_start_matches('/')
            ),
            "spec.component.overrides[id=iso].path",
        ),
        _ => (
            format!("{base}/kubesphere/kubekey/releases/download/v2.2.2/{name}"),
            "spec.component.host",
        ),
    };
    let field = "spec.component.overrides[id=iso].checksum";
    // The digest names the cached file and the staged file on the host: exactly 64 hex digits, whatever
    // its source (a value that is a path would upload that controller file to the tenant's host).
    let sha = if let Some(v) = ov
        .and_then(|o| o.checksum_value.clone())
        .filter(|v| !v.is_empty())
    {
        check_sha256(&format!("{field}.value"), &v)?
    } else if let Some(p) = ov.and_then(|o| o.checksum_path.clone()).filter(|v| !v.is_empty()) {
        let curl = if p.starts_with("http") {
            p
        } else {
            format!("{base}/{}", p.trim_start_matches('/'))
        };
        let text = cache.fetch_text(&curl, &format!("{field}.path")).await?;
        let sha = catalogue::parse_checksum_file(&text, name).ok_or_else(|| Error::InvalidInput {
            field: format!("{field}.path"),
            message: format!(
                "checksum file {} has no SHA-256 for {name}",
                strip_userinfo(&curl)
            ),
        })?;
        check_sha256(&format!("{field}.path"), &sha)?
    } else {
        return Err(Error::InvalidInput {
            field: field.into(),
            message: format!(
                "ISO {name} needs a SHA-256: set checksum.value or checksum.path on an override with id iso"
            ),
        });
    };
    let dest = format!("{ISO_DIR}/{name}");
    let runner = StepRunner {
        exec,
        progress,
        redactor,
        phase: "repository",
    };
    let out = runner
        .run("probe-iso", ExecRequest::new(iso_probe_command(&dest)).sudo())
        .await?;
    if out.stdout_str().trim() == sha {
        runner.record_skip("upload-iso", "ISO already on the host");
        return Ok(0);
    }
    let local = cache.fetch(&url, url_field, &sha, &format!("iso {name}")).await?;
    let start = std::time::Instant::now();
    let sent = exec
        .put(PutRequest::file(&dest, &local, 0o600))
        .await
        .map_err(|e| Error::exec("repository/upload-iso", e))?;
    progress.step_finished(&StepRecord {
        phase: "repository".into(),
        name: "upload-iso".into(),
        exit_code: None,
        duration: start.elapsed(),
        output_tail: format!("{sent} bytes to {dest}"),
        skipped: false,
        host_finished_ms: None,
    });
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_api_values_and_validates_packages() {
        assert!(RepositoryConfig::from_api(None, false, vec![], Default::default()).is_none());
        assert!(RepositoryConfig::from_api(Some(""), false, vec![], Default::default()).is_none());
        let c =
            RepositoryConfig::from_api(Some("none"), true, vec!["socat".into()], Default::default()).unwrap();
        assert_eq!(c.source, PackageSource::HostSources);
        assert_eq!(packages_for(&c, PackageManager::Apt).unwrap(), vec!["socat"]);
        let bad =
            RepositoryConfig::from_api(Some("none"), true, vec!["-oops".into()], Default::default()).unwrap();
        assert!(
            packages_for(&bad, PackageManager::Dnf)
                .unwrap_err()
                .to_string()
                .contains("packages[0]")
        );
        let d = RepositoryConfig::from_api(Some("none"), false, vec![], Default::default()).unwrap();
        assert!(
            packages_for(&d, PackageManager::Dnf)
                .unwrap()
                .contains(&"conntrack-tools".to_string())
        );
    }

    #[test]
    fn iso_scripts_use_only_the_iso_and_clean_up() {
        let apt = install_script(
            PackageManager::Apt,
            &["socat".into()],
            false,
            Some("debian12-debs-amd64.iso"),
        )
        .render();
        assert!(apt.contains("ISO=/var/lib/capkk/repository/debian12-debs-amd64.iso\n"));
        assert!(apt.contains("mount -o loop,ro \"$ISO\" \"$ISO_MOUNT\""));
        assert!(apt.contains("Dir::Etc::sourceparts=-"));
        assert!(apt.contains("trap 'umount \"$ISO_MOUNT\""));
        let dnf = install_script(PackageManager::Dnf, &["socat".into()], false, Some("x.iso")).render();
        assert!(dnf.contains("--disablerepo=* --enablerepo=capkk-iso"));
        assert!(dnf.contains("PM=dnf\n"));
        assert!(dnf.contains("rm -f /etc/yum.repos.d/capkk-iso.repo"));
        let facts =
            crate::facts::parse("@@os-release\nID=ubuntu\nVERSION_ID=\"22.04\"\n@@end\nmachine=x86_64\n")
                .unwrap();
        assert_eq!(auto_iso_name(&facts), "ubuntu-22.04-debs-amd64.iso");
    }

    /// Answers the package probe with a missing package, records every upload.
    #[derive(Default)]
    struct UploadRecorder {
        puts: std::sync::Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl Executor for UploadRecorder {
        async fn exec(
            &self,
            req: ExecRequest,
        ) -> std::result::Result<capkk_executor::ExecOutput, capkk_executor::ExecError> {
            let stdout = if req.command.contains("dpkg-query") {
                "missing=socat\n"
            } else {
                ""
            };
            Ok(capkk_executor::ExecOutput {
                exit_code: Some(0),
                stdout: stdout.into(),
                ..Default::default()
            })
        }
        async fn put(&self, req: PutRequest) -> std::result::Result<u64, capkk_executor::ExecError> {
            self.puts.lock().unwrap().push(format!("{req:?}"));
            Ok(1)
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
            "recorder".into()
        }
    }

    #[tokio::test]
    async fn iso_checksum_that_is_a_path_is_refused_and_nothing_is_uploaded() {
        // A controller file the tenant wants on its host (lower case: the old code lower-cased the value).
        let dir = std::env::temp_dir().join(format!("capkk-iso-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("token");
        std::fs::write(&secret, "manager-token-canary").unwrap();
        let cache_dir = dir.join("cache");
        let cache = ArtifactCache::new(&cache_dir).unwrap();
        let facts = crate::facts::parse(
            "@@os-release\nID=debian\nVERSION_ID=12\n@@end\nmachine=x86_64\npm=apt-get\n",
        )
        .unwrap();
        let escape = format!("../../../../../../../..{}", secret.display());
        for value in [secret.display().to_string(), escape] {
            let host = UploadRecorder::default();
            let cfg = RepositoryConfig {
                source: PackageSource::Iso("debian12-debs-amd64.iso".into()),
                update: false,
                packages: vec![],
                component: ComponentSource {
                    overrides: vec![catalogue::ArtifactOverride {
                        id: "iso".into(),
                        url: Some("http://198.18.0.1:9/x.iso".into()),
                        checksum_value: Some(value.clone()),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            };
            let err = ensure(
                &host,
                &cfg,
                &facts,
                &cache,
                &crate::journal::NoProgress,
                &Redactor::default(),
            )
            .await
            .expect_err(&format!("checksum.value {value:?} must be refused"));
            assert!(
                matches!(&err, Error::InvalidInput { field, .. } if field == "spec.component.overrides[id=iso].checksum.value"),
                "{err}"
            );
            assert!(host.puts.lock().unwrap().is_empty(), "uploaded: {:?}", host.puts);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
