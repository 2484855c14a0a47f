//! Node containers: the fleet's hosts as privileged podman containers with systemd as PID 1 and sshd, the way
//! kind and CAPI's Docker provider run nodes, at native speed on the machine's kernel.
//!
//! A node container looks like a user's bare host: Debian with systemd, sshd and nothing of Kubernetes; the
//! provider installs everything over SSH as on VMs. Each fleet keeps the VM fleet's plan (slot `N`, bridge
//! `kkbrN` at `198.18.N.1/24`, host `i` at `198.18.N.(10+i)`, `state.json`, `teardown.sh`), so every real tier
//! reads one fleet manifest whichever source made it. The container has no network of podman's
//! (`--network none`): a veth pair puts its `eth0` on the fleet's bridge, with no NAT to anywhere, exactly as
//! a VM's tap does.
//!
//! Identity: hostname = container name; a machine-id made at first boot; an ed25519 host key made at first
//! boot, read out of band (`podman exec`) and pinned. Resources carry the labels `capkk.run=<fleet>`,
//! `capkk.host=<i>` and `capkk.slot=<N>`, and volumes are named after the host, so teardown finds them all
//! again from a fresh process.
//!
//! What running on the machine's kernel takes (facts measured here: `../shared/reference/container-hosts.md`):
//! runc (crun refuses hybrid cgroups), `--privileged --cgroupns=private --systemd=false`, tmpfs `/run` and
//! `/tmp`, volumes for `/var/lib/containerd` and `/var/lib/kubelet` (overlayfs cannot stack on the container's
//! own overlay root), rlimits within the bounding set, and the image's entrypoint shielding the machine's
//! kernel settings (`build-node-image.sh`).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Instant,
};

use crate::{FleetState, Result, VmError, VmInfo, image::cache_root, q, require_tools, run};

const BUILD_SCRIPT: &str = include_str!("build-node-image.sh");

/// Debian packages of a node container besides `--variant=minbase`: the VM image's (systemd as init, sshd,
/// what kubeadm's preflight and the kubelet expect of a node) without a kernel, udev or initramfs, plus
/// D-Bus (systemd's cgroup driver talks to systemd over it).
pub const NODE_PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "iproute2",
    "sudo",
    "ca-certificates",
    "kmod",
    "iptables",
    "ethtool",
    "procps",
    "curl",
];

/// Repository of the node image in podman's local storage (never pushed anywhere).
pub const IMAGE_REPO: &str = "localhost/capkk-node";

/// Label naming the fleet of a container or volume.
pub const LABEL_RUN: &str = "capkk.run";

/// Files under `/proc/sys` whose machine values every container-host tier checks before and after: the ones
/// a kubelet writes (issue 40) and the conntrack table size kube-proxy would.
pub const WATCHED_SYSCTLS: &[&str] = &[
    "kernel/panic",
    "kernel/panic_on_oops",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "vm/max_map_count",
    "vm/swappiness",
    "fs/inotify/max_user_watches",
    "fs/inotify/max_user_instances",
    "kernel/pid_max",
    "fs/file-max",
    "fs/nr_open",
    "net/netfilter/nf_conntrack_max",
];

/// A node image, built (or found) in the cache and present in podman's storage.
#[derive(Clone, Debug)]
pub struct NodeImage {
    /// Content hash (script, suite, packages).
    pub hash: String,
    /// Its cache dir (`rootfs.tar`, the client key, `packages.txt`).
    pub dir: PathBuf,
    /// `localhost/capkk-node:<hash>`.
    pub reference: String,
    /// Seconds the build took (0 when cached).
    pub build_secs: f64,
}

impl NodeImage {
    /// The test-only client key root's `authorized_keys` holds.
    pub fn private_key(&self) -> PathBuf {
        self.dir.join("id_ed25519")
    }
}

/// The content hash of the node image (first 16 hex digits of the SHA-256 of script, suite and packages).
pub fn node_image_hash(suite: &str, packages: &[&str]) -> String {
    crate::image::content_hash(BUILD_SCRIPT, suite, &packages.join(","))
}

/// The node image, built now unless the cache has it, and imported into podman unless present there. Its Debian
/// suite is `CAPKK_HOST_OS`'s ([`crate::image::host_os_suite`]): a suite of its own is a cache entry and an image
/// tag of its own (the content hash covers the suite).
pub fn ensure_node_image() -> Result<NodeImage> {
    let spec = crate::ImageSpec {
        suite: crate::image::host_os_suite_from_env()?.to_owned(),
        ..Default::default()
    };
    let hash = node_image_hash(&spec.suite, NODE_PACKAGES);
    let reference = format!("{IMAGE_REPO}:{hash}");
    let (dir, build_secs) = crate::image::build_cached(
        &cache_root().join("containers"),
        &hash,
        "node image",
        BUILD_SCRIPT,
        &[&spec.suite, &spec.mirror, &NODE_PACKAGES.join(",")],
        &[
            ("mmdebstrap", "mmdebstrap"),
            ("ssh-keygen", "openssh-client"),
            ("tar", "tar"),
        ],
    )?;
    // podman's storage is the machine's, not the cache's: import again after it was reset.
    let present = Command::new("podman")
        .args(["image", "exists", &reference])
        .stdin(Stdio::null())
        .status()
        .map_err(|e| VmError::Unsupported(format!("podman (Debian package podman): {e}")))?;
    if !present.success() {
        run(Command::new("podman")
            .args(["import", "--quiet"])
            .args(["--change", r#"CMD ["/usr/local/sbin/capkk-node-init"]"#])
            .args(["--change", "ENV container=podman"])
            .args(["--change", "STOPSIGNAL SIGRTMIN+3"])
            .arg(dir.join("rootfs.tar"))
            .arg(&reference))?;
    }
    Ok(NodeImage {
        hash,
        dir,
        reference,
        build_secs,
    })
}

/// Where podman keeps images, containers and volumes (as root): the file system node containers fill.
pub const PODMAN_STORAGE: &str = "/var/lib/containers";

/// Gigabytes a fleet of `nodes` node containers needs free before it starts: each node pulls the Kubernetes,
/// CNI and workload images into its containerd and the kubelet keeps its state beside them (about 1.5 GB a
/// node measured), and the kubelet's eviction thresholds of the test clusters (2 GiB, tcg-knobs.py) must still
/// hold after that. A machine short of it once ran a whole CI run into `no space left on device` inside the
/// nodes' containerd: the fleet now refuses to start, naming the number, instead.
pub fn needed_free_gb(nodes: usize) -> u64 {
    6 + 2 * nodes as u64
}

/// Refuses to start `nodes` node containers when podman's storage has less free space than
/// [`needed_free_gb`] (`CAPKK_NODE_MIN_FREE_GB` overrides the number).
pub fn check_free_space(nodes: usize) -> Result<()> {
    let path = if Path::new(PODMAN_STORAGE).exists() {
        PODMAN_STORAGE
    } else {
        "/"
    };
    let needed_gb = match std::env::var("CAPKK_NODE_MIN_FREE_GB") {
        Ok(v) => v.trim().parse().map_err(|_| {
            VmError::Invalid(format!(
                "CAPKK_NODE_MIN_FREE_GB={v:?} is not a whole number of gigabytes"
            ))
        })?,
        Err(_) => needed_free_gb(nodes),
    };
    let out = run(Command::new("df").args(["--output=avail", "-B1", path]))?;
    let free = parse_df_avail(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| VmError::RunCommand {
        command: format!("df --output=avail -B1 {path}"),
        message: "no number in its output".into(),
    })?;
    space_verdict(path, free, needed_gb)
}

fn parse_df_avail(out: &str) -> Option<u64> {
    out.lines().nth(1)?.trim().parse().ok()
}

fn space_verdict(path: &str, free_bytes: u64, needed_gb: u64) -> Result<()> {
    let free_gb = free_bytes / 1_000_000_000;
    if free_gb < needed_gb {
        return Err(VmError::NoSpace {
            path: path.into(),
            free_gb,
            needed_gb,
        });
    }
    Ok(())
}

/// inotify instances one node container takes at most: its systemd, containerd, the kubelet and its pods'
/// processes (kube-proxy, flannel, CoreDNS) each hold some, measured 7 on an idle node and 17 on a busy one. They
/// all count against root's `fs.inotify.max_user_instances` of the machine's kernel (128 by default), which every
/// node container shares: a second fleet beside a five-node one ran out, and kube-proxy on the newest node crashed
/// in a loop with "too many open files" while the run waited on it.
pub const INOTIFY_PER_NODE: u64 = 16;

/// Refuses to start `nodes` node containers when root's free inotify instances (the machine's
/// `fs.inotify.max_user_instances` less those root's processes hold now) are fewer than [`INOTIFY_PER_NODE`]
/// a node. The setting is the machine owner's: this names it, and never changes it.
pub fn check_inotify(nodes: usize) -> Result<()> {
    let path = "/proc/sys/fs/inotify/max_user_instances";
    let max = fs::read_to_string(path)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| VmError::RunCommand {
            command: format!("read {path}"),
            message: "no number there".into(),
        })?;
    inotify_verdict(max, root_inotify_instances(), nodes)
}

/// The inotify instances root's processes hold: their descriptors that name an inotify instance.
fn root_inotify_instances() -> u64 {
    let Ok(procs) = fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for p in procs.flatten() {
        let dir = p.path();
        let root = fs::read_to_string(dir.join("status")).is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next())
                == Some("0")
        });
        if !root {
            continue;
        }
        let Ok(fds) = fs::read_dir(dir.join("fd")) else {
            continue;
        };
        n += fds
            .flatten()
            .filter(|fd| fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:inotify"))
            .count() as u64;
    }
    n
}

fn inotify_verdict(max: u64, used: u64, nodes: usize) -> Result<()> {
    let needed = INOTIFY_PER_NODE * nodes as u64;
    if max.saturating_sub(used) < needed {
        return Err(VmError::NoInotify { max, used, needed });
    }
    Ok(())
}

/// Names of the volumes of host `name`: containerd's and the kubelet's state, which need a file system that
/// overlayfs can stack on (the container's root is an overlay itself).
pub fn volumes(name: &str) -> [(String, &'static str); 2] {
    [
        (format!("{name}-containerd"), "/var/lib/containerd"),
        (format!("{name}-kubelet"), "/var/lib/kubelet"),
    ]
}

/// The `podman run` arguments of host `vm` of fleet `state` (without the program).
pub fn run_args(state: &FleetState, vm: &VmInfo, n: usize, image: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "--detach",
        "--name",
        &vm.name,
        "--hostname",
        &vm.name,
        "--label",
        &format!("{LABEL_RUN}={}", state.name),
        "--label",
        &format!("capkk.host={n}"),
        "--label",
        &format!("capkk.slot={}", state.index),
        // runc: crun refuses this machine's hybrid cgroups.
        "--runtime",
        "runc",
        "--privileged",
        // A cgroup tree of its own: podman's systemd mode bind-mounts the machine's name=systemd tree, and two
        // nodes then shared one containerd cgroup. systemd still runs as PID 1 from the image's entrypoint.
        "--cgroupns=private",
        "--systemd=false",
        "--security-opt",
        "seccomp=unconfined",
        "--security-opt",
        "label=disable",
        // The fleet's bridge, not a podman network: no NAT, the same plan as the VMs (plumbed after start).
        "--network",
        "none",
        // The image's /etc/hosts; the provider manages its own block in it, as on any host.
        "--no-hosts",
        "--tmpfs",
        "/run:rw,exec,mode=755",
        "--tmpfs",
        "/tmp:rw,exec,mode=1777",
        // Within the bounding set (no CAP_SYS_RESOURCE): podman's defaults make runc fail setting rlimits.
        "--ulimit",
        "nofile=20000:20000",
        "--ulimit",
        "nproc=32768:32768",
        "--stop-timeout",
        "10",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (vol, path) in volumes(&vm.name) {
        a.push("--volume".into());
        a.push(format!("{vol}:{path}"));
    }
    a.push(image.into());
    a
}

/// Lines of `teardown.sh` that remove fleet `state`'s containers and volumes (found by label, so a crash
/// between two creations leaves nothing behind) after keeping each host's journal in `logs`.
pub fn teardown_lines(state: &FleetState, logs: &Path) -> String {
    let label = q(&format!("label={LABEL_RUN}={}", state.name));
    let mut s = String::new();
    for vm in &state.vms {
        s.push_str(&format!(
            "timeout 15 podman exec {name} journalctl --no-pager -n 3000 > {dst} 2>/dev/null\n",
            name = q(&vm.name),
            dst = q(&logs
                .join(format!("{}.journal.log", vm.name))
                .display()
                .to_string()),
        ));
    }
    // One `podman rm` for all of them: podman stops them side by side. Each stop may take its whole 10 s (systemd
    // shutting down the kubelet's pods), so one after another a 5-host fleet took ~50 s.
    s.push_str(&format!(
        "cs=$(podman ps -a -q --filter {label}); [ -z \"$cs\" ] || podman rm -f -t 10 -v $cs >/dev/null 2>&1\n\
         for v in $(podman volume ls -q --filter {label}); do podman volume rm -f \"$v\" >/dev/null 2>&1; done\n"
    ));
    s
}

/// Start the containers of `state` (created by [`crate::boot`]: bridge up, state saved) and put each on the
/// bridge; fills in each host's PID.
pub(crate) fn start(state: &mut FleetState, image: &NodeImage) -> Result<()> {
    require_tools(&[("podman", "podman"), ("runc", "runc"), ("nsenter", "util-linux")])?;
    for (i, vm) in state.vms.clone().iter().enumerate() {
        let n = i + 1;
        fs::create_dir_all(&vm.dir).map_err(crate::io_err(&vm.dir))?;
        for (vol, _) in volumes(&vm.name) {
            // A volume left by a crashed run of the same name must not carry its containerd state over.
            let _ = Command::new("podman")
                .args(["volume", "rm", "-f", &vol])
                .stdin(Stdio::null())
                .output();
            run(Command::new("podman").args([
                "volume",
                "create",
                "--label",
                &format!("{LABEL_RUN}={}", state.name),
                &vol,
            ]))?;
        }
        let _ = Command::new("podman")
            .args(["rm", "-f", "-v", &vm.name])
            .stdin(Stdio::null())
            .output();
        run(Command::new("podman").args(run_args(state, vm, n, &image.reference)))?;
        let pid = host_pid(&vm.name)?;
        state.vms[i].pid = pid;
        plumb(state, &state.vms[i])?;
    }
    Ok(())
}

/// Restart host `i` (0-based) of `state` as a power cycle would: the container stops (systemd shuts down), starts
/// again with a fresh `/run` and network namespace, is put back on the bridge and waits for SSH. Its disk (the
/// container's root and volumes) and host key survive. Updates the host's PID in `state`.
pub fn restart(state: &mut FleetState, i: usize, timeout: std::time::Duration) -> Result<()> {
    let name = state.vms[i].name.clone();
    run(Command::new("podman").args(["restart", "--time", "10", &name]))?;
    state.vms[i].pid = host_pid(&name)?;
    plumb(state, &state.vms[i])?;
    let deadline = Instant::now() + timeout;
    while fingerprint(&state.vms[i]).as_deref() != Some(state.vms[i].host_key_fingerprint.as_str())
        || !crate::ssh_banner(&state.vms[i].address)
    {
        if Instant::now() > deadline {
            return Err(VmError::NotReady {
                vm: name,
                message: format!(
                    "no SSH within {}s of the restart; inside:\n{}",
                    timeout.as_secs(),
                    diagnose(&state.vms[i])
                ),
                console: String::new(),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    Ok(())
}

/// The arguments of `podman` that cut a node container's power: SIGKILL to every process at once (no stop
/// signal, no grace period: systemd and the services get no chance to say goodbye).
pub fn power_off_args(name: &str) -> [&str; 4] {
    ["kill", "--signal", "KILL", name]
}

/// Cut host `vm`'s power ([`power_off_args`]).
pub fn power_off(vm: &VmInfo) -> Result<()> {
    run(Command::new("podman").args(power_off_args(&vm.name)))?;
    Ok(())
}

/// The host PID of container `name`'s init (its namespaces are `/proc/<pid>/ns/*`).
pub fn host_pid(name: &str) -> Result<u32> {
    let out = run(Command::new("podman").args(["inspect", "--format", "{{.State.Pid}}", name]))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| VmError::Invalid(format!("container {name} has no PID ({:?})", text.trim())))
}

/// Put host `vm` on the fleet's bridge: a veth pair (`kkNtI` on the machine, `eth0` inside) with the host's
/// address and MAC, a default route via the bridge and a resolver naming it. Again after a restart (a new
/// network namespace).
pub fn plumb(state: &FleetState, vm: &VmInfo) -> Result<()> {
    let pid = vm.pid.to_string();
    let _ = Command::new("ip").args(["link", "del", &vm.tap]).output();
    run(Command::new("ip").args([
        "link", "add", &vm.tap, "type", "veth", "peer", "name", "eth0", "netns", &pid,
    ]))?;
    run(Command::new("ip").args(["link", "set", &vm.tap, "master", &state.bridge, "up"]))?;
    let gw = &state.bridge_address;
    let script = format!(
        "ip link set eth0 address {mac} && ip addr add {addr}/24 dev eth0 && ip link set eth0 up && \
         ip route add default via {gw}",
        mac = vm.mac,
        addr = vm.address,
    );
    run(Command::new("nsenter").args(["-t", &pid, "-n", "sh", "-c", &script]))?;
    // The resolver names the gateway, which runs no DNS server: lookups fail fast and never leave the machine
    // (the kubelet refuses pod sandboxes without a resolv.conf; CoreDNS forwards to it).
    inside_ok(vm, &format!("echo 'nameserver {gw}' > /etc/resolv.conf"))?;
    Ok(())
}

/// Run `script` with `sh -c` inside host `vm` out of band (`podman exec`, not SSH). A non-zero exit is data.
pub fn inside(vm: &VmInfo, script: &str) -> Result<Output> {
    Command::new("podman")
        .args(["exec", &vm.name, "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| VmError::RunCommand {
            command: format!("podman exec {}", vm.name),
            message: e.to_string(),
        })
}

fn inside_ok(vm: &VmInfo, script: &str) -> Result<String> {
    let out = inside(vm, script)?;
    if !out.status.success() {
        return Err(VmError::RunCommand {
            command: format!("podman exec {}: {script}", vm.name),
            message: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether the container still runs (its init PID is alive).
pub fn running(vm: &VmInfo) -> bool {
    Path::new(&format!("/proc/{}", vm.pid)).exists()
}

/// The host key fingerprint, once systemd is up and sshd has its key; `None` while it boots.
pub fn fingerprint(vm: &VmInfo) -> Option<String> {
    let out = inside(
        vm,
        "s=$(systemctl is-system-running 2>/dev/null); case $s in running|degraded) ;; *) exit 1;; esac; \
         systemctl is-active -q ssh && ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub",
    )
    .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .filter(|f| f.starts_with("SHA256:"))
        .map(str::to_owned)
}

/// A diagnosis for a host that did not become ready: systemd's state and failed units.
pub fn diagnose(vm: &VmInfo) -> String {
    inside(
        vm,
        "systemctl is-system-running; systemctl --failed --no-legend --no-pager; journalctl -n 20 --no-pager",
    )
    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    .unwrap_or_else(|e| e.to_string())
}

/// Values of [`WATCHED_SYSCTLS`] on the machine (this process's view: run it outside any node).
pub fn machine_sysctls() -> Vec<(String, String)> {
    WATCHED_SYSCTLS
        .iter()
        .map(|s| {
            let v = fs::read_to_string(Path::new("/proc/sys").join(s))
                .map(|v| v.trim().to_owned())
                .unwrap_or_else(|e| format!("unreadable: {e}"));
            (s.replace('/', "."), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Source;

    fn state() -> FleetState {
        crate::sample_state("ct-x", Source::Containers)
    }

    #[test]
    fn a_fleet_short_of_disk_is_refused_naming_what_it_needs_and_what_there_is() {
        assert_eq!(parse_df_avail(" Avail\n12345678901\n"), Some(12_345_678_901));
        assert_eq!(parse_df_avail("Avail\n"), None);
        let need = needed_free_gb(3);
        assert_eq!(need, 12);
        let err = space_verdict("/var/lib/containers", 11_900_000_000, need)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("need 12 GB free")
                && err.contains("it has 11 GB")
                && err.contains("/var/lib/containers"),
            "{err}"
        );
        assert!(space_verdict("/var/lib/containers", 12_000_000_000, need).is_ok());
    }

    #[test]
    fn a_fleet_short_of_inotify_instances_is_refused_naming_the_setting_and_the_numbers() {
        // 5 nodes need 80; root holds 60 of 128: 68 left.
        let err = inotify_verdict(128, 60, 5).unwrap_err().to_string();
        assert!(
            err.contains("fs.inotify.max_user_instances = 128")
                && err.contains("60 in use")
                && err.contains("need 80"),
            "{err}"
        );
        assert!(inotify_verdict(128, 48, 5).is_ok(), "80 left for 80");
        assert!(inotify_verdict(100, 200, 1).is_err(), "more in use than allowed");
    }

    #[test]
    fn a_node_container_runs_privileged_on_runc_with_its_own_cgroups_and_no_podman_network() {
        let s = state();
        let a = run_args(&s, &s.vms[0], 1, "localhost/capkk-node:h").join(" ");
        for want in [
            "--runtime runc",
            "--privileged",
            "--cgroupns=private",
            "--systemd=false",
            "--network none",
            "--label capkk.run=ct-x",
            "--volume ct-x-1-containerd:/var/lib/containerd",
            "--volume ct-x-1-kubelet:/var/lib/kubelet",
            "--ulimit nofile=20000:20000",
        ] {
            assert!(a.contains(want), "{want} missing from {a}");
        }
        assert!(a.ends_with("localhost/capkk-node:h"));
    }

    #[test]
    fn power_off_kills_every_process_at_once_without_a_stop_signal() {
        assert_eq!(power_off_args("ct-x-1"), ["kill", "--signal", "KILL", "ct-x-1"]);
    }

    #[test]
    fn teardown_finds_containers_and_volumes_by_the_fleets_label_only() {
        let s = teardown_lines(&state(), Path::new("/tmp/logs/ct-x"));
        assert!(s.contains("podman ps -a -q --filter 'label=capkk.run=ct-x'"));
        assert!(s.contains("podman volume ls -q --filter 'label=capkk.run=ct-x'"));
        // Every container in one `podman rm` (stopped side by side), not one after another.
        assert!(s.contains("podman rm -f -t 10 -v $cs"), "{s}");
        assert_eq!(s.matches("podman rm ").count(), 1, "{s}");
        assert!(s.contains("'/tmp/logs/ct-x/ct-x-1.journal.log'"));
        assert!(!s.contains("pkill") && !s.contains("podman system"));
    }

    #[test]
    fn the_node_image_hash_changes_with_its_packages() {
        let a = node_image_hash("bookworm", NODE_PACKAGES);
        assert_eq!(a.len(), 16);
        assert_ne!(a, node_image_hash("bookworm", &["systemd"]));
        assert_ne!(a, node_image_hash("trixie", NODE_PACKAGES));
    }
}
