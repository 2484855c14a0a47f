//! Host facts: OS family and version, package manager, CPU architecture and init system, gathered in one
//! exec ([`gather`]) and parsed by a pure function ([`parse`]).
//!
//! OS mapping (from `/etc/os-release` `ID` and `ID_LIKE`): `debian`, `ubuntu` (or `ID_LIKE` containing
//! `debian`) use apt; `rhel`, `centos`, `rocky`, `almalinux`, `fedora`, `ol`, `openEuler` (or `ID_LIKE`
//! containing `rhel`/`fedora`/`centos`) use dnf, or yum when the host has no dnf. Architecture comes from
//! `uname -m` (`x86_64` → `amd64`, `aarch64`/`arm64` → `arm64`) and is checked against the declared one with
//! [`HostFacts::check_arch`]. The init system is systemd when `/run/systemd/system` exists; a host with a
//! `systemctl` but no running systemd (e.g. a test shim) is [`InitSystem::SystemctlOnly`]; anything else is
//! [`InitSystem::Unsupported`] and the services that manage units refuse it.

pub mod script;

use std::time::Duration;

use capkk_executor::{ExecRequest, Executor};
use tracing::instrument;

use crate::{
    Error, Result,
    journal::{Progress, Redactor, StepRunner},
};

/// Linux distribution family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OsFamily {
    /// Debian, Ubuntu and derivatives.
    Debian,
    /// RHEL, CentOS, Rocky, Alma, Fedora, Oracle Linux, openEuler.
    RedHat,
    /// Anything else.
    Unknown,
}

/// The host's package manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackageManager {
    /// `apt-get` + `dpkg-query`.
    Apt,
    /// `dnf` + `rpm`.
    Dnf,
    /// `yum` + `rpm`.
    Yum,
}

impl PackageManager {
    /// The command name.
    pub fn command(self) -> &'static str {
        match self {
            PackageManager::Apt => "apt-get",
            PackageManager::Dnf => "dnf",
            PackageManager::Yum => "yum",
        }
    }
}

/// How services are managed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitSystem {
    /// systemd is PID 1.
    Systemd,
    /// A `systemctl` exists but systemd is not running (container or test shim); it is used as is.
    SystemctlOnly,
    /// No systemctl: unit management is unsupported.
    Unsupported(String),
}

impl InitSystem {
    /// `Ok` when `systemctl` can be used, else [`Error::Unsupported`].
    pub fn require_systemctl(&self) -> Result<()> {
        match self {
            InitSystem::Systemd | InitSystem::SystemctlOnly => Ok(()),
            InitSystem::Unsupported(what) => Err(Error::Unsupported {
                what: format!("init system {what}: capkk manages services with systemctl"),
            }),
        }
    }
}

/// What a host is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFacts {
    /// `ID` from os-release (lower case).
    pub os_id: String,
    /// `ID_LIKE` words (lower case).
    pub os_like: Vec<String>,
    /// `VERSION_ID`.
    pub os_version: String,
    /// `PRETTY_NAME` (for messages).
    pub os_pretty: String,
    /// Family derived from `ID`/`ID_LIKE`.
    pub family: OsFamily,
    /// Package manager, when the family has one on this host.
    pub package_manager: Option<PackageManager>,
    /// Raw `uname -m`.
    pub machine: String,
    /// Normalised arch (`amd64`, `arm64`, or the raw value).
    pub arch: String,
    /// Kernel release.
    pub kernel: String,
    /// Current hostname.
    pub hostname: String,
    /// Init system.
    pub init: InitSystem,
    /// SELinux mode from `getenforce` (`Enforcing`, `Permissive`, `Disabled`), when present.
    pub selinux: Option<String>,
    /// Whether root may lower a process's `oom_score_adj`: false in containers without `CAP_SYS_RESOURCE`
    /// (LXC, privileged node containers), where containerd must restrict its pods' scores
    /// ([`crate::containermanager`]). True when the probe did not say (an older probe's output).
    pub can_lower_oom_score_adj: bool,
}

impl HostFacts {
    /// Fail with [`Error::HostMismatch`] when the host's arch differs from `declared` (`amd64`, `x86_64`, ...).
    pub fn check_arch(&self, declared: &str) -> Result<()> {
        let want = normalize_arch(declared);
        if want != self.arch {
            return Err(Error::HostMismatch {
                message: format!(
                    "spec declares arch {declared} but the host reports {} (uname -m {})",
                    self.arch, self.machine
                ),
            });
        }
        Ok(())
    }

    /// The package manager, or [`Error::HostMismatch`] naming the OS.
    pub fn require_package_manager(&self) -> Result<PackageManager> {
        self.package_manager.ok_or_else(|| Error::HostMismatch {
            message: format!(
                "no supported package manager for OS {:?} (ID={}, ID_LIKE={}); supported: Debian/Ubuntu (apt), \
                 RHEL/CentOS/Rocky/Alma/Fedora/openEuler (dnf/yum)",
                self.os_pretty,
                self.os_id,
                self.os_like.join(" ")
            ),
        })
    }
}

/// `x86_64`/`amd64` → `amd64`, `aarch64`/`arm64` → `arm64`, anything else unchanged (lower case).
pub fn normalize_arch(raw: &str) -> String {
    match raw.trim().to_ascii_lowercase().as_str() {
        "x86_64" | "amd64" | "x64" => "amd64".into(),
        "aarch64" | "arm64" | "armv8" | "armv8l" => "arm64".into(),
        other => other.into(),
    }
}

/// The probe command run by [`gather`] (read only; `pkg/service/host/facts/probe.sh`).
pub const PROBE: &str = crate::host::tpl::FACTS_PROBE;

/// Gather facts with one privileged exec, journaled as step `gather-facts` of phase `facts`.
#[instrument(skip_all, fields(host = %exec.target()))]
pub async fn gather(exec: &dyn Executor, progress: &dyn Progress, redactor: &Redactor) -> Result<HostFacts> {
    let runner = StepRunner {
        exec,
        progress,
        redactor,
        phase: "facts",
    };
    let out = runner
        .run(
            "gather-facts",
            ExecRequest::new(PROBE).sudo().timeout(Duration::from_secs(60)),
        )
        .await?;
    parse(&out.stdout_str())
}

/// Parse the output of [`PROBE`].
pub fn parse(text: &str) -> Result<HostFacts> {
    let mut os = std::collections::BTreeMap::new();
    let mut in_os = false;
    let mut kv = std::collections::BTreeMap::<String, Vec<String>>::new();
    for line in text.lines() {
        match line {
            "@@os-release" => in_os = true,
            "@@end" => in_os = false,
            _ if in_os => {
                if let Some((k, v)) = line.split_once('=') {
                    let v = v.trim().trim_matches('"').trim_matches('\'');
                    os.insert(k.trim().to_owned(), v.to_owned());
                }
            }
            _ => {
                if let Some((k, v)) = line.split_once('=') {
                    kv.entry(k.to_owned()).or_default().push(v.trim().to_owned());
                }
            }
        }
    }
    let one = |k: &str| kv.get(k).and_then(|v| v.first().cloned()).unwrap_or_default();
    let machine = one("machine");
    if machine.is_empty() {
        return Err(Error::HostMismatch {
            message: "host facts: `uname -m` printed nothing".into(),
        });
    }
    let os_id = os.get("ID").cloned().unwrap_or_default().to_ascii_lowercase();
    let os_like: Vec<String> = os
        .get("ID_LIKE")
        .map(|v| v.split_whitespace().map(|w| w.to_ascii_lowercase()).collect())
        .unwrap_or_default();
    let family = family_of(&os_id, &os_like);
    let pms = kv.get("pm").cloned().unwrap_or_default();
    let has = |c: &str| pms.iter().any(|p| p == c);
    let package_manager = match family {
        OsFamily::Debian if has("apt-get") => Some(PackageManager::Apt),
        OsFamily::RedHat if has("dnf") => Some(PackageManager::Dnf),
        OsFamily::RedHat if has("yum") => Some(PackageManager::Yum),
        _ => None,
    };
    let init = if kv.contains_key("systemd") {
        InitSystem::Systemd
    } else if kv.contains_key("systemctl") {
        InitSystem::SystemctlOnly
    } else {
        InitSystem::Unsupported("without systemd or systemctl".into())
    };
    Ok(HostFacts {
        os_version: os.get("VERSION_ID").cloned().unwrap_or_default(),
        os_pretty: os
            .get("PRETTY_NAME")
            .cloned()
            .unwrap_or_else(|| os.get("NAME").cloned().unwrap_or_default()),
        os_id,
        os_like,
        family,
        package_manager,
        arch: normalize_arch(&machine),
        machine,
        kernel: one("kernel"),
        hostname: one("hostname"),
        init,
        selinux: kv
            .get("selinux")
            .and_then(|v| v.first().cloned())
            .filter(|s| !s.is_empty()),
        can_lower_oom_score_adj: one("oom_lower") != "0",
    })
}

fn family_of(id: &str, like: &[String]) -> OsFamily {
    const DEB: &[&str] = &["debian", "ubuntu"];
    const RH: &[&str] = &[
        "rhel",
        "centos",
        "rocky",
        "almalinux",
        "fedora",
        "ol",
        "openeuler",
        "anolis",
        "kylin",
    ];
    if DEB.contains(&id) || like.iter().any(|l| l == "debian" || l == "ubuntu") {
        OsFamily::Debian
    } else if RH.contains(&id)
        || like
            .iter()
            .any(|l| ["rhel", "fedora", "centos"].contains(&l.as_str()))
    {
        OsFamily::RedHat
    } else {
        OsFamily::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROCKY: &str = "@@os-release\nNAME=\"Rocky Linux\"\nVERSION_ID=\"9.3\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nPRETTY_NAME=\"Rocky Linux 9.3 (Blue Onyx)\"\n@@end\nmachine=aarch64\nkernel=5.14\nhostname=n1\nsystemctl=/usr/bin/systemctl\npm=dnf\npm=yum\nselinux=Enforcing\n";

    #[test]
    fn a_host_that_may_not_lower_oom_scores_says_so_and_silence_means_it_may() {
        assert!(parse(ROCKY).unwrap().can_lower_oom_score_adj);
        assert!(
            parse(&format!("{ROCKY}oom_lower=1\n"))
                .unwrap()
                .can_lower_oom_score_adj
        );
        assert!(
            !parse(&format!("{ROCKY}oom_lower=0\n"))
                .unwrap()
                .can_lower_oom_score_adj
        );
    }

    #[test]
    fn parses_rocky_on_arm() {
        let f = parse(ROCKY).unwrap();
        assert_eq!(f.family, OsFamily::RedHat);
        assert_eq!(f.package_manager, Some(PackageManager::Dnf));
        assert_eq!(f.arch, "arm64");
        assert_eq!(f.os_version, "9.3");
        assert_eq!(f.init, InitSystem::SystemctlOnly);
        assert_eq!(f.selinux.as_deref(), Some("Enforcing"));
        assert!(f.check_arch("arm64").is_ok());
        let err = f.check_arch("amd64").unwrap_err().to_string();
        assert!(err.contains("amd64") && err.contains("aarch64"), "{err}");
    }

    #[test]
    fn parses_debian_ubuntu_openeuler_and_unknown() {
        let deb = parse("@@os-release\nID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"22.04\"\n@@end\nmachine=x86_64\npm=apt-get\nsystemd=1\n").unwrap();
        assert_eq!(deb.package_manager, Some(PackageManager::Apt));
        assert_eq!(deb.init, InitSystem::Systemd);
        assert_eq!(deb.arch, "amd64");
        let oe =
            parse("@@os-release\nID=\"openEuler\"\nVERSION_ID=\"22.03\"\n@@end\nmachine=x86_64\npm=yum\n")
                .unwrap();
        assert_eq!(oe.package_manager, Some(PackageManager::Yum));
        assert!(matches!(oe.init, InitSystem::Unsupported(_)));
        assert!(oe.init.require_systemctl().is_err());
        let alpine = parse("@@os-release\nID=alpine\n@@end\nmachine=x86_64\n").unwrap();
        assert_eq!(alpine.family, OsFamily::Unknown);
        assert!(
            alpine
                .require_package_manager()
                .unwrap_err()
                .to_string()
                .contains("alpine")
        );
        assert!(parse("nothing").is_err());
    }
}
