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

use capkk_executor::{ExecRequest, Executor, PutRequest, quote};
use tracing::instrument;

use crate::{
    Error, Result,
    binary::{ArtifactCache, ComponentSource, catalogue},
    facts::{
        HostFacts, PackageManager,
        script::{Script, put_file},
    },
    journal::{Progress, Redactor, StepRecord, StepRunner},
};

/// Default packages on apt hosts.
pub const DEFAULT_APT_PACKAGES: &[&str] = &["conntrack", "socat", "ebtables", "ipset", "ipvsadm", "chrony"];
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
    let list = packages.iter().map(|p| quote(p)).collect::<Vec<_>>().join(" ");
    match pm {
        PackageManager::Apt => format!(
            "for p in {list}; do dpkg-query -W -f='${{Status}}\\n' \"$p\" 2>/dev/null | grep -q 'install ok installed' || echo \"missing=$p\"; done; true"
        ),
        PackageManager::Dnf | PackageManager::Yum => format!(
            "for p in {list}; do rpm -q --whatprovides \"$p\" >/dev/null 2>&1 || echo \"missing=$p\"; done; true"
        ),
    }
}

/// The install script for `missing` packages (pure; used by tests).
pub fn install_script(pm: PackageManager, missing: &[String], update: bool, iso: Option<&str>) -> Script {
    let pkgs = missing.iter().map(|p| quote(p)).collect::<Vec<_>>().join(" ");
    let mut s = Script::new();
    let mut body = String::new();
    if let Some(iso) = iso {
        let iso_path = quote(&format!("{ISO_DIR}/{iso}"));
        body.push_str(&format!(
            "mkdir -p {ISO_MOUNT}\n\
             if ! mountpoint -q {ISO_MOUNT}; then mount -o loop,ro {iso_path} {ISO_MOUNT}; fi\n\
             trap 'umount {ISO_MOUNT} 2>/dev/null; rm -f /etc/yum.repos.d/capkk-iso.repo' EXIT\n"
        ));
    }
    match pm {
        PackageManager::Apt => {
            body.push_str(&format!(
                "export DEBIAN_FRONTEND=noninteractive\n\
                 i=0; while command -v fuser >/dev/null 2>&1 && fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock >/dev/null 2>&1; do\n  \
                 [ $i -ge {LOCK_WAIT_SECS} ] && {{ echo 'apt/dpkg lock still held after {LOCK_WAIT_SECS}s' >&2; exit 75; }}\n  \
                 [ $i = 0 ] && echo 'waiting for the apt/dpkg lock'; sleep 2; i=$((i+2))\ndone\n"
            ));
            let mut opts = format!("-o DPkg::Lock::Timeout={LOCK_WAIT_SECS}");
            if iso.is_some() {
                body.push_str(&format!(
                    "printf 'deb [trusted=yes] file://{ISO_MOUNT} ./\\n' > {ISO_DIR}/iso.list\n"
                ));
                opts.push_str(&format!(
                    " -o Dir::Etc::sourcelist={ISO_DIR}/iso.list -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0"
                ));
            }
            if update || iso.is_some() {
                body.push_str(&format!("apt-get {opts} -q -y update\n"));
            }
            body.push_str(&format!(
                "apt-get {opts} -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold -q -y install --no-install-recommends {pkgs}\nCHANGED=1\n"
            ));
        }
        PackageManager::Dnf | PackageManager::Yum => {
            let cmd = pm.command();
            body.push_str(&format!(
                "locked() {{ for f in /var/run/dnf.pid /var/run/yum.pid; do [ -f $f ] && kill -0 \"$(cat $f)\" 2>/dev/null && return 0; done; return 1; }}\n\
                 i=0; while locked; do\n  \
                 [ $i -ge {LOCK_WAIT_SECS} ] && {{ echo '{cmd} lock still held after {LOCK_WAIT_SECS}s' >&2; exit 75; }}\n  \
                 [ $i = 0 ] && echo 'waiting for the {cmd} lock'; sleep 2; i=$((i+2))\ndone\n"
            ));
            let mut opts = String::from("-y");
            if iso.is_some() {
                body.push_str(&put_file(
                    "/etc/yum.repos.d/capkk-iso.repo",
                    0o644,
                    format!(
                        "[capkk-iso]\nname=capkk ISO\nbaseurl=file://{ISO_MOUNT}\nenabled=1\ngpgcheck=0\n"
                    )
                    .as_bytes(),
                ));
                opts.push_str(" --disablerepo=* --enablerepo=capkk-iso");
            }
            if update || iso.is_some() {
                body.push_str(&format!("{cmd} {opts} makecache\n"));
            }
            body.push_str(&format!("{cmd} {opts} install {pkgs}\nCHANGED=1\n"));
        }
    }
    s.step("install-packages", body);
    s
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
            if name.contains('/') || name.starts_with('.') {
                return Err(Error::InvalidInput {
                    field: "spec.repository.iso".into(),
                    message: format!("{name:?} must be a file name"),
                });
            }
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
    let url = match ov {
        Some(o) if o.url.as_deref().is_some_and(|u| !u.is_empty()) => o.url.clone().unwrap_or_default(),
        Some(o) if o.path.as_deref().is_some_and(|p| !p.is_empty()) => {
            format!(
                "{base}/{}",
                o.path.as_deref().unwrap_or_default().trim_start_matches('/')
            )
        }
        _ => format!("{base}/kubesphere/kubekey/releases/download/v2.2.2/{name}"),
    };
    let field = "spec.component.overrides[id=iso].checksum";
    let sha = if let Some(v) = ov
        .and_then(|o| o.checksum_value.clone())
        .filter(|v| !v.is_empty())
    {
        v.to_ascii_lowercase()
    } else if let Some(p) = ov.and_then(|o| o.checksum_path.clone()).filter(|v| !v.is_empty()) {
        let curl = if p.starts_with("http") {
            p
        } else {
            format!("{base}/{}", p.trim_start_matches('/'))
        };
        let text = cache.fetch_text(&curl).await?;
        catalogue::parse_checksum_file(&text, name).ok_or_else(|| Error::InvalidInput {
            field: field.into(),
            message: format!("checksum file {curl} has no SHA-256 for {name}"),
        })?
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
        .run(
            "probe-iso",
            ExecRequest::new(format!(
                "sha256sum {} 2>/dev/null | cut -d' ' -f1; true",
                quote(&dest)
            ))
            .sudo(),
        )
        .await?;
    if out.stdout_str().trim() == sha {
        runner.record_skip("upload-iso", "ISO already on the host");
        return Ok(0);
    }
    let local = cache.fetch(&url, &sha, &format!("iso {name}")).await?;
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
        assert!(apt.contains(
            "mount -o loop,ro /var/lib/capkk/repository/debian12-debs-amd64.iso /mnt/capkk-repository"
        ));
        assert!(apt.contains("Dir::Etc::sourceparts=-"));
        assert!(apt.contains("trap 'umount /mnt/capkk-repository"));
        let dnf = install_script(PackageManager::Dnf, &["socat".into()], false, Some("x.iso")).render();
        assert!(dnf.contains("--disablerepo=* --enablerepo=capkk-iso"));
        assert!(dnf.contains("rm -f /etc/yum.repos.d/capkk-iso.repo"));
        let facts =
            crate::facts::parse("@@os-release\nID=ubuntu\nVERSION_ID=\"22.04\"\n@@end\nmachine=x86_64\n")
                .unwrap();
        assert_eq!(auto_iso_name(&facts), "ubuntu-22.04-debs-amd64.iso");
    }
}
