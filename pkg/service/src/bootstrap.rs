//! The bootstrap service: OS preparation on create ([`prepare`]) and cleanup on delete ([`reset`]).
//!
//! [`prepare`] runs one batched, idempotent script (one SSH round trip; each step journaled, unchanged steps
//! journaled as skipped):
//!
//! | step | what |
//! |---|---|
//! | `hostname` | `/etc/hostname` and the running hostname |
//! | `etc-hosts` | a managed block `# capkk hosts BEGIN` … `# capkk hosts END` in `/etc/hosts` |
//! | `swap-off` | `swapoff -a` when swap is active; swap lines in `/etc/fstab` commented out |
//! | `kernel-modules` | `/etc/modules-load.d/capkk.conf` (`overlay`, `br_netfilter`); `modprobe` when not loaded |
//! | `sysctl` | `/etc/sysctl.d/99-capkk.conf` ([`SYSCTL`]); `sysctl -e -p <file>` when it changed |
//! | `selinux` | `setenforce 0` when enforcing; `SELINUX=permissive` in `/etc/selinux/config` (only where present) |
//! | `firewall` | stop and disable `firewalld` / `ufw` when active |
//! | `directories` | [`DIRECTORIES`] |
//!
//! [`reset`] removes exactly [`OWNED_PATHS`] (documented in `docs/host-paths.md`) after `kubeadm reset -f`,
//! stops kubelet and the containerd capkk installed (never one that was there before), and removes Kubernetes/CNI iptables chains, IPVS services and CNI links.
//! It never touches anything else.

use std::time::Duration;

use capkk_executor::Executor;
use tracing::instrument;

use crate::{
    Error, Result,
    facts::{
        HostFacts,
        script::{Script, ScriptOutcome, put_file},
    },
    host::{Vars, tpl},
    journal::{Progress, Redactor},
};

/// Sysctl settings written to `/etc/sysctl.d/99-capkk.conf`.
pub const SYSCTL: &[(&str, &str)] = &[
    ("net.bridge.bridge-nf-call-iptables", "1"),
    ("net.bridge.bridge-nf-call-ip6tables", "1"),
    ("net.ipv4.ip_forward", "1"),
    ("vm.max_map_count", "262144"),
    ("vm.swappiness", "1"),
    ("fs.inotify.max_user_instances", "524288"),
    ("fs.inotify.max_user_watches", "524288"),
];
/// Kernel modules loaded now and at boot.
pub const MODULES: &[&str] = &["overlay", "br_netfilter"];
/// Directories created (mode 0755).
pub const DIRECTORIES: &[&str] = &[
    "/usr/local/bin",
    "/etc/kubernetes/manifests",
    "/etc/kubernetes/pki",
    "/etc/cni/net.d",
    "/opt/cni/bin",
    "/var/lib/kubelet",
    "/var/lib/capkk",
];
/// Sysctl file path.
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/99-capkk.conf";
/// Modules file path.
pub const MODULES_FILE: &str = "/etc/modules-load.d/capkk.conf";

/// Paths [`reset`] removes — exactly these and nothing else (files or whole directory trees):
///
/// - Kubernetes: `/etc/kubernetes`, `/run/kubeadm`
/// - kubelet: `/var/lib/kubelet`, `/etc/systemd/system/kubelet.service`,
///   `/etc/systemd/system/kubelet.service.d`, `/var/log/pods`, `/var/log/containers`
/// - etcd: `/var/lib/etcd`
/// - CNI: `/etc/cni`, `/var/lib/cni`, `/opt/cni`, `/run/flannel`, `/run/calico`, `/var/lib/calico`,
///   `/var/log/calico`
/// - sentinel: `/run/cluster-api/bootstrap-success.complete`
/// - capkk journal, artifact stamps and staging: `/var/lib/capkk`
///
/// Not removed (reused on the next provisioning; an upload is skipped when the digest matches): binaries in
/// `/usr/local/bin` and `/usr/local/sbin`, containerd and its config and state, `/etc/crictl.yaml`,
/// `/etc/hosts`, sysctl and module files, installed packages. The containerd unit capkk installed stays but is
/// disabled (its stamp goes with `/var/lib/capkk`: a reboot must not start it).
pub const OWNED_PATHS: &[&str] = &[
    "/etc/kubernetes",
    "/run/kubeadm",
    "/var/lib/kubelet",
    "/etc/systemd/system/kubelet.service",
    "/etc/systemd/system/kubelet.service.d",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/etcd",
    "/etc/cni",
    "/var/lib/cni",
    "/opt/cni",
    "/run/flannel",
    "/run/calico",
    "/var/lib/calico",
    "/var/log/calico",
    "/run/cluster-api/bootstrap-success.complete",
    "/var/lib/capkk",
];

/// Network links created by kube-proxy (IPVS) and common CNIs; deleted on reset when present.
pub const OWNED_LINKS: &[&str] = &[
    "kube-ipvs0",
    "nodelocaldns",
    "cni0",
    "flannel.1",
    "flannel-v6.1",
    "flannel-wg",
    "cilium_host",
    "cilium_net",
    "cilium_vxlan",
    "vxlan.calico",
];

/// Who the host is (mapped by the controller from the KKInstance and its KKCluster).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostIdentity {
    /// Hostname (also the Kubernetes node name).
    pub hostname: String,
    /// Internal address (kubelet `--node-ip`).
    pub internal_address: String,
    /// `/etc/hosts` entries for all cluster hosts: `(address, names)`.
    pub hosts_entries: Vec<(String, Vec<String>)>,
}

/// What [`prepare`] / [`reset`] did.
#[derive(Clone, Debug, Default)]
pub struct BootstrapOutcome {
    /// Names of the steps that changed the host.
    pub changed: Vec<String>,
}

impl From<ScriptOutcome> for BootstrapOutcome {
    fn from(o: ScriptOutcome) -> Self {
        Self { changed: o.changed }
    }
}

/// True for an RFC 1123 host name.
pub(crate) fn valid_hostname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn valid_address(a: &str) -> bool {
    a.parse::<std::net::IpAddr>().is_ok()
}

/// The managed `/etc/hosts` block.
pub fn hosts_block(id: &HostIdentity) -> Result<String> {
    let mut s = String::from("# capkk hosts BEGIN\n");
    for (i, (addr, names)) in id.hosts_entries.iter().enumerate() {
        if !valid_address(addr) {
            return Err(Error::InvalidInput {
                field: format!("hosts entry {i} address"),
                message: format!("{addr:?} is not an IP address"),
            });
        }
        if let Some(bad) = names.iter().find(|n| !valid_hostname(n)) {
            return Err(Error::InvalidInput {
                field: format!("hosts entry {i} names"),
                message: format!("{bad:?} is not a valid host name"),
            });
        }
        if !names.is_empty() {
            s.push_str(&format!("{addr} {}\n", names.join(" ")));
        }
    }
    s.push_str("# capkk hosts END\n");
    Ok(s)
}

/// The sysctl file content.
pub fn sysctl_conf() -> String {
    let mut s = String::from("# Managed by capkk.\n");
    for (k, v) in SYSCTL {
        s.push_str(&format!("{k} = {v}\n"));
    }
    s
}

/// Build the [`prepare`] script (pure; used by tests).
pub fn prepare_script(id: &HostIdentity, facts: &HostFacts) -> Result<Script> {
    if !valid_hostname(&id.hostname) {
        return Err(Error::InvalidInput {
            field: "hostname".into(),
            message: format!("{:?} is not a valid host name (RFC 1123)", id.hostname),
        });
    }
    if !id.internal_address.is_empty() && !valid_address(&id.internal_address) {
        return Err(Error::InvalidInput {
            field: "internalAddress".into(),
            message: format!("{:?} is not an IP address", id.internal_address),
        });
    }
    let mut s = Script::new();
    s.step(
        "hostname",
        Vars::new().var("H", &id.hostname).render(tpl::HOSTNAME),
    );
    {
        use base64::Engine as _;
        let block = base64::engine::general_purpose::STANDARD.encode(hosts_block(id)?);
        s.step(
            "etc-hosts",
            Vars::new().var("BLOCK", &block).render(tpl::ETC_HOSTS),
        );
    }
    s.step("swap-off", tpl::SWAP_OFF);
    let modules = MODULES.join("\n") + "\n";
    s.step(
        "kernel-modules",
        Vars::new()
            .raw(&put_file(MODULES_FILE, 0o644, modules.as_bytes()))
            .args(MODULES)
            .render(tpl::KERNEL_MODULES),
    );
    s.step(
        "sysctl",
        Vars::new()
            .raw(&put_file(SYSCTL_FILE, 0o644, sysctl_conf().as_bytes()))
            .var("F", SYSCTL_FILE)
            .render(tpl::SYSCTL),
    );
    s.step("selinux", tpl::SELINUX);
    if facts.init.require_systemctl().is_ok() {
        s.step("firewall", tpl::FIREWALL);
    }
    s.step(
        "directories",
        Vars::new().args(DIRECTORIES).render(tpl::DIRECTORIES),
    );
    Ok(s)
}

/// Prepare the OS (one exec). Idempotent: a second run changes nothing and journals every step as skipped.
#[instrument(skip_all, fields(host = %exec.target(), hostname = %id.hostname))]
pub async fn prepare(
    exec: &dyn Executor,
    id: &HostIdentity,
    facts: &HostFacts,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<BootstrapOutcome> {
    let script = prepare_script(id, facts)?;
    Ok(script
        .run(exec, "bootstrap", progress, redactor, Duration::from_secs(300))
        .await?
        .into())
}

/// Options for [`reset`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResetOptions {
    /// CRI socket passed to `kubeadm reset --cri-socket` (default: kubeadm's detection).
    pub cri_socket: Option<String>,
}

/// Build the [`reset`] script (pure; used by tests).
pub fn reset_script(opts: &ResetOptions) -> Script {
    let mut s = Script::new();
    // First: a bootstrap still running on the host (its Machine deleted mid-bootstrap; the provisioning script
    // survives the dropped connection by design) would otherwise go on during the reset, or after it, and
    // leave kubeadm's work on a host handed out as clean.
    s.step(
        "stop-provisioning",
        Vars::new()
            .var("D", crate::provisioning::STATE_DIR)
            .render(tpl::STOP_PROVISIONING),
    );
    // A socket that is not a plain absolute path is dropped (kubeadm detects the runtime): a reset must
    // not fail on a bad spec value, and the value never reaches the host.
    let sock = opts
        .cri_socket
        .as_deref()
        .filter(|s| crate::containermanager::valid_cri_socket(s))
        .unwrap_or_default();
    s.step(
        "kubeadm-reset",
        Vars::new().var("SOCK", sock).render(tpl::KUBEADM_RESET),
    );
    // The same socket reaches the pod removal before containerd stops: with a non-default socket, a default
    // one would not exist and the pods kubeadm reset left would outlive containerd.
    // Only the containerd capkk installed is stopped: its artifact stamp says so (the same stamp the
    // container manager reads to leave a pre-existing containerd alone).
    s.step(
        "stop-services",
        Vars::new()
            .var("SOCK", sock)
            .var("STAMP", crate::containermanager::CONTAINERD_STAMP)
            .var("UNIT", crate::containermanager::CONTAINERD_UNIT)
            .render(tpl::STOP_SERVICES),
    );
    s.step(
        "network-cleanup",
        Vars::new().args(OWNED_LINKS).render(tpl::NETWORK_CLEANUP),
    );
    s.step(
        "remove-paths",
        Vars::new().args(OWNED_PATHS).render(tpl::REMOVE_PATHS),
    );
    s
}

/// Undo the node (one exec): stop a bootstrap still running there, `kubeadm reset -f` when Kubernetes is present, stop kubelet and the containerd
/// capkk installed (a pre-existing one keeps running), remove Kubernetes/CNI firewall rules, IPVS services and
/// CNI links, then remove exactly [`OWNED_PATHS`].
#[instrument(skip_all, fields(host = %exec.target()))]
pub async fn reset(
    exec: &dyn Executor,
    opts: &ResetOptions,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<BootstrapOutcome> {
    Ok(reset_script(opts)
        .run(exec, "reset", progress, redactor, Duration::from_secs(600))
        .await?
        .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> HostFacts {
        crate::facts::parse("@@os-release\nID=debian\n@@end\nmachine=x86_64\npm=apt-get\nsystemctl=/x\n")
            .unwrap()
    }

    #[test]
    fn rejects_bad_identity() {
        let mut id = HostIdentity {
            hostname: "node-1".into(),
            internal_address: "10.0.0.1".into(),
            hosts_entries: vec![("10.0.0.1".into(), vec!["node-1".into()])],
        };
        assert!(prepare_script(&id, &facts()).is_ok());
        id.hostname = "bad name;rm".into();
        assert!(
            prepare_script(&id, &facts())
                .unwrap_err()
                .to_string()
                .contains("hostname")
        );
        id.hostname = "ok".into();
        id.hosts_entries.push(("not-ip".into(), vec!["x".into()]));
        assert!(
            prepare_script(&id, &facts())
                .unwrap_err()
                .to_string()
                .contains("hosts entry 1 address")
        );
    }

    #[test]
    fn reset_covers_the_provisioning_sentinel_and_journal() {
        assert!(OWNED_PATHS.contains(&crate::provisioning::SENTINEL));
        assert!(
            OWNED_PATHS
                .iter()
                .any(|p| crate::provisioning::STATE_DIR.starts_with(&format!("{p}/")))
        );
        assert!(
            OWNED_PATHS
                .iter()
                .any(|p| crate::binary::catalogue::STAMP_DIR.starts_with(&format!("{p}/")))
        );
        // The reset tells capkk's containerd by the stamp its install writes.
        assert_eq!(
            crate::containermanager::CONTAINERD_STAMP,
            format!("{}/containerd", crate::binary::catalogue::STAMP_DIR)
        );
    }

    #[test]
    fn the_reset_removes_leftover_pods_through_the_configured_cri_socket() {
        let text = reset_script(&ResetOptions {
            cri_socket: Some("unix:///run/k3s/containerd/containerd.sock".into()),
        })
        .render();
        let stop = text
            .split("STEP=stop-services")
            .nth(1)
            .and_then(|t| t.split("STEP=").next())
            .expect("the reset has a stop-services step");
        assert!(
            stop.contains("SOCK=unix:///run/k3s/containerd/containerd.sock\n"),
            "{stop}"
        );
        assert!(stop.contains("crictl --timeout 60s --runtime-endpoint \"$_ep\" rmp -f"));
        // A value that is not a socket path never reaches the host, in either step.
        let bad = reset_script(&ResetOptions {
            cri_socket: Some("/run/x.sock; reboot".into()),
        })
        .render();
        assert!(!bad.contains("reboot"));
    }

    /// A provisioning run as the launcher leaves it when the manager drops its connection: a script holding
    /// `dir/lock` in a session of its own (sshd's exec), its step (lock closed) still waiting in a child.
    fn orphaned_bootstrap(dir: &std::path::Path) -> std::process::Child {
        std::process::Command::new("setsid")
            .args([
                "sh",
                "-c",
                r#"trap '' HUP; exec 9>>"$0/lock"; flock 9; sh -c 'sleep 300' 9>&- & echo $! > "$0/started"; wait"#,
            ])
            .arg(dir)
            .spawn()
            .expect("setsid sh")
    }

    #[test]
    fn the_reset_first_stops_a_bootstrap_still_running_on_the_host() {
        let text = reset_script(&ResetOptions::default()).render();
        let first = text.split("STEP=").nth(1).expect("the reset has steps");
        assert!(first.starts_with("stop-provisioning\n"), "{first}");
        assert!(
            first.contains(&format!("D={}\n", crate::provisioning::STATE_DIR)),
            "{first}"
        );

        // The step itself, run for real under sh against a provisioning run that outlived its connection.
        let dir = tempfile::tempdir().unwrap();
        let mut run = orphaned_bootstrap(dir.path());
        let started = dir.path().join("started");
        for _ in 0..100 {
            if started.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(started.exists(), "the stand-in provisioning run did not start");
        let step = Vars::new()
            .var("D", dir.path().display().to_string())
            .render(tpl::STOP_PROVISIONING);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{step}\necho \"CHANGED=${{CHANGED:-0}}\"\n"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert!(stdout.contains("stopped the bootstrap still running"), "{stdout}");
        assert!(stdout.contains("CHANGED=1"), "{stdout}");
        // The run's script ended (waited for: no zombie to mistake for a live one), its step's child too, and
        // the lock is free for the next bootstrap.
        let status = run.wait().unwrap();
        assert!(!status.success(), "the run was stopped, not finished: {status}");
        let free = std::process::Command::new("flock")
            .args(["-n"])
            .arg(dir.path().join("lock"))
            .arg("true")
            .status()
            .unwrap();
        assert!(free.success(), "the provisioning lock is still held");
        let step_pid = std::fs::read_to_string(&started).unwrap().trim().to_owned();
        let alive = || {
            // Gone, or a zombie its new parent has not reaped yet.
            std::fs::read_to_string(format!("/proc/{step_pid}/stat"))
                .map(|s| !s.rsplit(") ").next().unwrap_or("").starts_with('Z'))
                .unwrap_or(false)
        };
        for _ in 0..40 {
            if !alive() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(!alive(), "the stopped run's step {step_pid} survived");

        // Nothing running: nothing stopped, nothing changed.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{step}\necho \"CHANGED=${{CHANGED:-0}}\"\n"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "CHANGED=0\n");
    }

    #[test]
    fn reset_removes_only_owned_paths() {
        let text = reset_script(&ResetOptions::default()).render();
        let removed: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("set -- "))
            .find(|l| l.contains("/var/lib/kubelet"))
            .unwrap()
            .split(' ')
            .collect();
        assert_eq!(removed, OWNED_PATHS);
        assert_eq!(
            text.matches("rm -rf --one-file-system -- ").count(),
            text.matches("rm -rf").count(),
            "every rm stays on one file system"
        );
        assert!(!text.contains("iptables -F"));
    }
}
