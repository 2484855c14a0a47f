//! VM test hosts: real Debian VMs under QEMU for tests that need a real kernel, systemd, containerd and
//! kubelet (the sandbox hosts of `capkk-sandbox` share the machine's kernel and shim systemd).
//!
//! A *fleet* has a name and owns:
//! - a slot `N`, claimed with the sandbox hosts' own claim (`/tmp/capkk-sandbox/.slots/N`, see
//!   [`capkk_sandbox::claim_slot`]), so VMs and sandboxes of other tests never share addresses; the fleet
//!   uses `198.18.N.0/24` on the machine and keeps `198.19.N.0/24` for what runs inside its VMs (pod and
//!   service networks);
//! - a bridge `kkbrN` holding `198.18.N.1/24` and one tap `kkNtI` per VM; VM `i` (1-based) is `198.18.N.(10+i)`;
//! - a state dir `/tmp/capkk-sandbox/<name>` with `state.json`, a `teardown.sh` and per VM a qcow2 overlay of
//!   the cached base image ([`image`]), the serial console log and QEMU's pid file.
//!
//! Each VM boots the image's kernel directly; its identity comes from outside the image: hostname and address
//! from the kernel command line, SMBIOS product_uuid from QEMU's `-uuid`, machine-id made at first boot, and an
//! ed25519 host key generated at first boot whose fingerprint the VM prints to its console. A VM is *ready*
//! when its console reported the fingerprint and port 22 answers with an SSH banner.
//!
//! Acceleration: TCG (`-accel tcg,thread=multi -cpu max`) by default, because this machine kind's `/dev/kvm`
//! (PVM) cannot run stock kernels; `CAPKK_VM_ACCEL=kvm` uses `-accel kvm -cpu host` on machines with real KVM.
//!
//! Lifetime: VMs are stopped by the PIDs QEMU wrote (each checked against its command line first), never by
//! name. [`Fleet::up`] tears down on drop; [`Fleet::shared`] and [`Fleet::start`] leave a watchdog process
//! that tears the fleet down once the guarded process exits, so no VM outlives its test run. Teardown keeps
//! each console log in `/tmp/capkk-vm-logs/<name>/` for failure analysis.

pub mod containers;
pub mod image;
pub mod readme;

use std::{
    fmt, fs,
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

pub use image::{Image, ImageSpec, ensure_image};

/// Where teardown keeps console logs: `<LOG_ROOT>/<fleet>/<vm>.console.log`.
pub const LOG_ROOT: &str = "/tmp/capkk-vm-logs";

/// What went wrong while building, booting or tearing down VMs.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// A tool is missing.
    #[error("VM test hosts need {0}")]
    Unsupported(String),
    /// Building the image failed.
    #[error("building the VM image failed: {0}")]
    BuildImage(String),
    /// A command failed.
    #[error("running `{command}` failed: {message}")]
    RunCommand {
        /// The command.
        command: String,
        /// Exit status and stderr.
        message: String,
    },
    /// File I/O failed.
    #[error("file I/O on {path} failed: {source}")]
    Io {
        /// The path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A VM did not become ready.
    #[error("VM {vm} not ready: {message}; console log: {console}")]
    NotReady {
        /// The VM.
        vm: String,
        /// Why.
        message: String,
        /// Path of its serial console log.
        console: String,
    },
    /// Bad configuration.
    #[error("invalid VM configuration: {0}")]
    Invalid(String),
    /// Too little free disk for node containers (their images, containerd's and the kubelet's state).
    #[error(
        "node containers need {needed_gb} GB free on the file system of {path} (podman's storage and the \
         nodes' volumes), it has {free_gb} GB: free some space (old cargo target directories, podman images) \
         or set CAPKK_NODE_MIN_FREE_GB"
    )]
    NoSpace {
        /// The file system checked (podman's storage).
        path: String,
        /// Gigabytes free there.
        free_gb: u64,
        /// Gigabytes the fleet needs.
        needed_gb: u64,
    },
    /// Too few inotify instances left for node containers (they share the machine's kernel and its limit).
    #[error(
        "node containers need {needed} inotify instances ({per} a node); root holds {used} in use of the machine's \
         fs.inotify.max_user_instances = {max}: stop other node containers (podman ps) or, as the machine's owner, \
         raise fs.inotify.max_user_instances",
        per = crate::containers::INOTIFY_PER_NODE
    )]
    NoInotify {
        /// The machine's `fs.inotify.max_user_instances`.
        max: u64,
        /// Instances root's processes hold now.
        used: u64,
        /// Instances the fleet needs.
        needed: u64,
    },
    /// The sandbox slot claim failed.
    #[error(transparent)]
    Slot(#[from] capkk_sandbox::SandboxError),
}

type Result<T, E = VmError> = std::result::Result<T, E>;

/// Size of one VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmSpec {
    /// vCPUs.
    pub cpus: u32,
    /// Memory in MiB.
    pub memory_mib: u32,
}

impl VmSpec {
    /// A control-plane sized VM (2 vCPUs, 3 GiB: kubeadm init's static pods fit with room for images).
    pub const CONTROL_PLANE: VmSpec = VmSpec {
        cpus: 2,
        memory_mib: 3072,
    };
    /// A worker sized VM (1 vCPU, 2 GiB).
    pub const WORKER: VmSpec = VmSpec {
        cpus: 1,
        memory_mib: 2048,
    };
}

impl std::str::FromStr for VmSpec {
    type Err = VmError;

    /// `CPUSxMIB`, e.g. `2x3072`.
    fn from_str(s: &str) -> Result<Self> {
        let bad = || VmError::Invalid(format!("VM size {s:?} is not CPUSxMIB (e.g. 2x3072)"));
        let (c, m) = s.split_once('x').ok_or_else(bad)?;
        let spec = VmSpec {
            cpus: c.parse().map_err(|_| bad())?,
            memory_mib: m.parse().map_err(|_| bad())?,
        };
        if spec.cpus == 0 || spec.cpus > 8 || spec.memory_mib < 512 {
            return Err(bad());
        }
        Ok(spec)
    }
}

/// What the fleet's hosts are: one fleet manifest (`state.json`) and one CLI for both, so every real tier
/// reads its hosts the same way whichever source made them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Debian VMs under QEMU: a kernel of their own (reboots, kernel panics, a pulled cable), emulated here.
    #[default]
    Vms,
    /// Node containers ([`containers`]): the machine's kernel at native speed.
    Containers,
}

impl Source {
    /// From `CAPKK_HOSTS` (`vms` when unset: the library's tests boot VMs unless told otherwise).
    pub fn from_env() -> Result<Self> {
        match std::env::var("CAPKK_HOSTS").as_deref() {
            Err(_) | Ok("") => Ok(Source::Vms),
            Ok(s) => s.parse(),
        }
    }
}

impl std::str::FromStr for Source {
    type Err = VmError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "vms" => Ok(Source::Vms),
            "containers" => Ok(Source::Containers),
            other => Err(VmError::Invalid(format!(
                "host source {other:?}: use containers or vms"
            ))),
        }
    }
}

/// What to boot.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// VMs or node containers.
    pub source: Source,
    /// Fleet name (`[a-z0-9-]`, at most 32 chars); VM `i` is named `<name>-<i>` (also its hostname).
    pub name: String,
    /// One entry per VM.
    pub vms: Vec<VmSpec>,
    /// How long a VM may take from QEMU start to ready (`CAPKK_VM_READY_TIMEOUT` seconds, default 900: TCG
    /// boots take 40 s on a quiet machine and several minutes on a busy one).
    pub ready_timeout: Duration,
    /// Whether a guest reboot restarts the VM (`CAPKK_VM_REBOOT=1`, for tests that reboot a node). Otherwise
    /// a reboot, and with it a kernel panic (`panic=-1`), ends the QEMU process, which the ready wait notices
    /// at once instead of waiting out its timeout on a VM that panics at every boot.
    pub reboot: bool,
    /// Whether the fleet takes a second slot `M` for the workload cluster's Services (`CAPKK_VM_SERVICE_SLOT=1`):
    /// `198.19.M.0/24`, 254 Service addresses where the fleet's own slot leaves a /25 (126). Upstream's
    /// conformance suite creates 200 Services in one spec.
    pub service_slot: bool,
}

impl FleetConfig {
    /// A fleet of the given VMs.
    pub fn new(name: impl Into<String>, vms: Vec<VmSpec>) -> Self {
        let secs = std::env::var("CAPKK_VM_READY_TIMEOUT")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(900);
        Self {
            source: Source::default(),
            name: name.into(),
            vms,
            ready_timeout: Duration::from_secs(secs),
            reboot: std::env::var("CAPKK_VM_REBOOT").as_deref() == Ok("1"),
            service_slot: std::env::var("CAPKK_VM_SERVICE_SLOT").as_deref() == Ok("1"),
        }
    }
}

/// How QEMU executes guest code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Software emulation (works everywhere; this machine kind's only option).
    Tcg,
    /// Hardware virtualization (machines with real KVM).
    Kvm,
}

impl Accel {
    /// From `CAPKK_VM_ACCEL` (`tcg` default, or `kvm`).
    pub fn from_env() -> Result<Self> {
        match std::env::var("CAPKK_VM_ACCEL").as_deref() {
            Err(_) | Ok("") | Ok("tcg") => Ok(Accel::Tcg),
            Ok("kvm") => Ok(Accel::Kvm),
            Ok(other) => Err(VmError::Invalid(format!(
                "CAPKK_VM_ACCEL={other:?}: use tcg or kvm"
            ))),
        }
    }

    fn qemu_args(self) -> [&'static str; 4] {
        match self {
            Accel::Tcg => ["-accel", "tcg,thread=multi", "-cpu", "max"],
            Accel::Kvm => ["-accel", "kvm", "-cpu", "host"],
        }
    }
}

/// One VM as recorded in `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VmInfo {
    /// Name (also its hostname).
    pub name: String,
    /// IPv4 address.
    pub address: String,
    /// MAC address of its NIC.
    pub mac: String,
    /// SMBIOS product_uuid.
    pub uuid: String,
    /// Tap device on the machine.
    pub tap: String,
    /// Size.
    pub spec: VmSpec,
    /// Its dir (overlay, console log, pid file).
    pub dir: PathBuf,
    /// QEMU's PID.
    pub pid: u32,
    /// SHA256 fingerprint of its ed25519 host key, once ready.
    pub host_key_fingerprint: String,
    /// Seconds from QEMU start to ready, once ready.
    pub boot_secs: f64,
}

impl VmInfo {
    /// Path of its serial console log.
    pub fn console_log(&self) -> PathBuf {
        self.dir.join("console.log")
    }
}

/// Everything about a running fleet, persisted as `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FleetState {
    /// Fleet name.
    pub name: String,
    /// VMs or node containers (absent in manifests written before containers: VMs).
    #[serde(default)]
    pub source: Source,
    /// Slot `N`.
    pub index: u8,
    /// State dir.
    pub dir: PathBuf,
    /// Bridge device.
    pub bridge: String,
    /// The machine's address on the bridge (`198.18.N.1`): serve mirrors and registries here.
    pub bridge_address: String,
    /// A /24 for what runs inside the VMs (`198.19.N.0/24`), e.g. the workload cluster's pod and service
    /// networks; never routed on the machine.
    pub inner_cidr: String,
    /// The second slot's `198.19.M.0/24` for the workload cluster's Services, when the fleet took one
    /// ([`FleetConfig::service_slot`]); never routed on the machine either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_cidr: Option<String>,
    /// The second slot `M` (claimed as `<name>-svc`), released with the fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_index: Option<u8>,
    /// Acceleration (VMs only).
    pub accel: Accel,
    /// The image's content hash.
    pub image_hash: String,
    /// Seconds the image build took (0 when cached).
    pub image_build_secs: f64,
    /// The client key every VM's root accepts.
    pub private_key: PathBuf,
    /// `known_hosts` pinning every ready VM's host key.
    pub known_hosts: PathBuf,
    /// The VMs.
    pub vms: Vec<VmInfo>,
}

/// A running fleet. Dropping an owned fleet tears it down; a shared or started one is torn down by its
/// watchdog when the guarded process exits, or by [`down`].
pub struct Fleet {
    state: FleetState,
    teardown_on_drop: bool,
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("name", &self.state.name)
            .field("index", &self.state.index)
            .finish()
    }
}

/// The tools VMs need on the machine, or an error naming the missing ones with their Debian packages.
pub fn require_tools(tools: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<String> = tools
        .iter()
        .filter(|(t, _)| which(t).is_none())
        .map(|(t, p)| format!("{t} (Debian package {p})"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(VmError::Unsupported(missing.join(", ")))
    }
}

fn require_root() -> Result<()> {
    let root = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if root {
        Ok(())
    } else {
        Err(VmError::Unsupported("root (bridge and tap devices)".into()))
    }
}

fn which(tool: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
}

pub(crate) fn run(cmd: &mut Command) -> Result<Output> {
    capkk_sandbox::run(cmd).map_err(|e| match e {
        capkk_sandbox::SandboxError::RunCommand { command, message } => {
            VmError::RunCommand { command, message }
        }
        e => VmError::Slot(e),
    })
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> VmError + '_ {
    move |source| VmError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    fs::write(path, data).map_err(io_err(path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_err(path))
}

/// Single-quote for sh.
pub(crate) fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn random_uuid() -> Result<String> {
    let mut b = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(io_err(Path::new("/dev/urandom")))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

fn state_dir(name: &str) -> PathBuf {
    Path::new(capkk_sandbox::STATE_ROOT).join(name)
}

/// The kernel command line that gives VM `name` its identity.
pub fn kernel_cmdline(name: &str, address: &str, gateway: &str) -> String {
    // ip=<client>:<server>:<gw>:<netmask>:<hostname>:<device>:<autoconf>; systemd-network-generator turns it
    // into a networkd config. panic=-1 with QEMU's -no-reboot makes a kernel panic end the QEMU process, which
    // the ready wait notices at once.
    format!(
        "root=/dev/vda rw console=ttyS0 net.ifnames=0 ip={address}::{gateway}:255.255.255.0:{name}:eth0:off \
         systemd.hostname={name} panic=-1"
    )
}

fn teardown_script(state: &FleetState) -> String {
    let d = state.dir.display().to_string();
    let logs = Path::new(LOG_ROOT).join(&state.name);
    let mut s = format!(
        "#!/bin/sh\n# Generated by capkk-vm: tears down VM fleet {name} (slot {idx}).\n\
         # Stops only the QEMU PIDs recorded under {d}/ whose command line names this fleet's dir.\n\
         mkdir -p {logs}\n",
        name = state.name,
        idx = state.index,
        logs = q(&logs.display().to_string()),
    );
    if state.source == Source::Containers {
        s.push_str(&containers::teardown_lines(state, &logs));
    }
    s.push_str(&format!(
        "pids=''\nfor f in {d}/*/qemu.pid; do\n  [ -f \"$f\" ] || continue\n  p=$(cat \"$f\")\n  \
         if [ -n \"$p\" ] && tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q -e {m}; then\n    \
         kill \"$p\" 2>/dev/null; pids=\"$pids $p\"\n  fi\ndone\n\
         i=0; while [ $i -lt 50 ]; do alive=''; for p in $pids; do [ -d /proc/$p ] && alive=1; done\n  \
         [ -z \"$alive\" ] && break; sleep 0.1; i=$((i+1)); done\n\
         for p in $pids; do kill -9 \"$p\" 2>/dev/null; done\n",
        m = q(&format!("{d}/")),
    ));
    for vm in &state.vms {
        s.push_str(&format!(
            "cp {src} {dst} 2>/dev/null\nip link del {tap} 2>/dev/null\n",
            src = q(&vm.console_log().display().to_string()),
            dst = q(&logs
                .join(format!("{}.console.log", vm.name))
                .display()
                .to_string()),
            tap = vm.tap,
        ));
    }
    let slots = q(&Path::new(capkk_sandbox::STATE_ROOT)
        .join(".slots")
        .display()
        .to_string());
    if let Some(m) = state.service_index {
        s.push_str(&format!(
            "rm -rf {sd}\nrm -f {slots}/{m}\n",
            sd = q(&state_dir(&service_slot_name(&state.name)).display().to_string()),
        ));
    }
    s.push_str(&format!(
        "ip link del {br} 2>/dev/null\nrm -rf {dq}\nrm -f {slots}/{idx}\nexit 0\n",
        br = state.bridge,
        dq = q(&d),
        idx = state.index,
    ));
    s
}

/// The owner name of a fleet's second slot (its Service range).
fn service_slot_name(fleet: &str) -> String {
    format!("{fleet}-svc")
}

/// Tear down fleet `name` if anything of it exists (idempotent).
pub fn down(name: &str) -> Result<()> {
    validate_name(name)?;
    let dir = state_dir(name);
    let script = dir.join("teardown.sh");
    if script.exists() {
        run(Command::new("sh").arg(&script))?;
    } else if dir.exists() {
        fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
    }
    Ok(())
}

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 32
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(VmError::Invalid(format!(
            "fleet name {name:?} must be 1-32 chars of [a-z0-9-]"
        )));
    }
    Ok(())
}

fn save_state(state: &FleetState) -> Result<()> {
    let json =
        serde_json::to_vec_pretty(state).map_err(|e| VmError::Invalid(format!("serializing state: {e}")))?;
    write_file(&state.dir.join("state.json"), &json, 0o600)?;
    write_file(
        &state.dir.join("teardown.sh"),
        teardown_script(state).as_bytes(),
        0o700,
    )
}

impl Fleet {
    /// Boot the fleet and wait until every VM is ready; dropping the value tears it down.
    pub fn up(config: &FleetConfig) -> Result<Fleet> {
        let mut fleet = Fleet {
            state: boot_or_clean(config)?,
            teardown_on_drop: true,
        };
        fleet.wait_ready(config.ready_timeout)?;
        Ok(fleet)
    }

    /// Boot the fleet and wait until every VM is ready; a watchdog tears it down once the current process
    /// exits (for a `static OnceLock` shared by the tests of one binary).
    pub fn shared(config: &FleetConfig) -> Result<Fleet> {
        let mut fleet = Fleet::start(config, std::process::id())?;
        fleet.wait_ready(config.ready_timeout)?;
        Ok(fleet)
    }

    /// Boot the fleet without waiting, guarded by a watchdog that tears it down once process `guard_pid`
    /// exits (the CLI passes the test driver's PID; 0 = no watchdog, the fleet lives until [`down`]).
    pub fn start(config: &FleetConfig, guard_pid: u32) -> Result<Fleet> {
        let state = boot_or_clean(config)?;
        if guard_pid != 0 {
            start_watchdog(&state, guard_pid)?;
        }
        Ok(Fleet {
            state,
            teardown_on_drop: false,
        })
    }

    /// Attach to a fleet started elsewhere (e.g. by the CLI); dropping it does not tear it down.
    pub fn attach(name: &str) -> Result<Fleet> {
        validate_name(name)?;
        let path = state_dir(name).join("state.json");
        let text = fs::read_to_string(&path).map_err(io_err(&path))?;
        let state =
            serde_json::from_str(&text).map_err(|e| VmError::Invalid(format!("{}: {e}", path.display())))?;
        Ok(Fleet {
            state,
            teardown_on_drop: false,
        })
    }

    /// The recorded state.
    pub fn state(&self) -> &FleetState {
        &self.state
    }

    /// The VMs.
    pub fn vms(&self) -> &[VmInfo] {
        &self.state.vms
    }

    /// Tear down now (idempotent).
    pub fn down(&self) -> Result<()> {
        down(&self.state.name)
    }

    /// Wait until every VM reported its host key on the console and answers on port 22; records host keys
    /// (`known_hosts`, checked against `ssh-keyscan`) and boot times in `state.json`.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut pending: Vec<usize> = (0..self.state.vms.len())
            .filter(|i| self.state.vms[*i].host_key_fingerprint.is_empty())
            .collect();
        let started = fs::metadata(self.state.dir.join("started"))
            .and_then(|m| m.modified())
            .ok();
        while !pending.is_empty() {
            let mut still = Vec::new();
            for i in pending {
                let vm = &self.state.vms[i];
                let containers = self.state.source == Source::Containers;
                if !Path::new(&format!("/proc/{}", vm.pid)).exists() {
                    return Err(not_ready(
                        vm,
                        if containers {
                            "the container exited"
                        } else {
                            "QEMU exited"
                        },
                    ));
                }
                let fingerprint = if containers {
                    containers::fingerprint(vm)
                } else {
                    console_fingerprint(vm)
                };
                match fingerprint.filter(|_| ssh_banner(&vm.address)) {
                    Some(fp) => {
                        let line = keyscan(&vm.address, &fp).map_err(|m| not_ready(vm, &m))?;
                        let boot_secs = started
                            .and_then(|t| t.elapsed().ok())
                            .map(|d| d.as_secs_f64())
                            .unwrap_or_default();
                        let vm = &mut self.state.vms[i];
                        vm.host_key_fingerprint = fp;
                        vm.boot_secs = boot_secs;
                        let kh = &self.state.known_hosts;
                        let mut f = fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(kh)
                            .map_err(io_err(kh))?;
                        f.write_all(format!("{line}\n").as_bytes()).map_err(io_err(kh))?;
                    }
                    None => still.push(i),
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                let vm = &self.state.vms[pending[0]];
                let why = if self.state.source == Source::Containers {
                    format!(
                        "no SSH within {}s of the container's start; inside:\n{}",
                        timeout.as_secs(),
                        containers::diagnose(vm)
                    )
                } else {
                    format!("no SSH within {}s of QEMU start", timeout.as_secs())
                };
                return Err(not_ready(vm, &why));
            }
            thread::sleep(Duration::from_secs(1));
        }
        save_state(&self.state)
    }

    /// Run `script` as root on VM `i` (0-based) with the system's `ssh` (a fresh connection: 2-4 s under
    /// TCG). Returns the raw output; a non-zero exit is not an error.
    pub fn ssh(&self, i: usize, script: &str) -> Result<Output> {
        let vm = &self.state.vms[i];
        let out = Command::new("ssh")
            .args(ssh_args(&self.state))
            .arg(format!("root@{}", vm.address))
            .arg(script)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| VmError::RunCommand {
                command: format!("ssh {}", vm.name),
                message: e.to_string(),
            })?;
        Ok(out)
    }

    /// Like [`Fleet::ssh`], returning stdout as text and failing on a non-zero exit.
    pub fn sh(&self, i: usize, script: &str) -> Result<String> {
        let out = self.ssh(i, script)?;
        if !out.status.success() {
            return Err(VmError::RunCommand {
                command: format!("ssh {}: {script}", self.state.vms[i].name),
                message: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Fleet {
    /// Restart host `i` (0-based) like a power cycle and wait for SSH again (node containers only: a VM's
    /// reboot is its guest's own, e.g. `systemctl reboot` with `CAPKK_VM_REBOOT=1`).
    pub fn restart(&mut self, i: usize) -> Result<()> {
        if self.state.source != Source::Containers {
            return Err(VmError::Invalid(
                "restart is for node containers; reboot a VM from inside it".into(),
            ));
        }
        containers::restart(&mut self.state, i, Duration::from_secs(300))?;
        save_state(&self.state)
    }

    /// Cut host `i`'s (0-based) power: every process of a node container killed at once (`podman kill`: its
    /// network namespace and its veth on the bridge go with it), a VM's QEMU killed. Nothing shuts down
    /// cleanly: a host lost, as an HA control plane must survive. Its disk stays until `down`.
    pub fn power_off(&self, i: usize) -> Result<()> {
        let vm = &self.state.vms[i];
        match self.state.source {
            Source::Containers => containers::power_off(vm),
            Source::Vms => {
                run(Command::new("kill").args(["-KILL", &vm.pid.to_string()]))?;
                Ok(())
            }
        }
    }

    /// Run `script` as root on host `i` (0-based) out of band, not through its sshd: `podman exec` in a node
    /// container, root SSH on a VM (which has no other way in). For assertions and faults; a non-zero exit is
    /// not an error.
    pub fn inside(&self, i: usize, script: &str) -> Result<Output> {
        match self.state.source {
            Source::Containers => containers::inside(&self.state.vms[i], script),
            Source::Vms => self.ssh(i, script),
        }
    }
}

/// `ssh` options for a fleet: its key, its pinned host keys, no agent, no other identities.
pub fn ssh_args(state: &FleetState) -> Vec<String> {
    vec![
        "-i".into(),
        state.private_key.display().to_string(),
        "-o".into(),
        "IdentitiesOnly=yes".into(),
        "-o".into(),
        format!("UserKnownHostsFile={}", state.known_hosts.display()),
        "-o".into(),
        "StrictHostKeyChecking=yes".into(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "ConnectTimeout=30".into(),
        "-o".into(),
        "LogLevel=ERROR".into(),
    ]
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if self.teardown_on_drop
            && let Err(e) = down(&self.state.name)
        {
            eprintln!("VM fleet {} teardown failed: {e}", self.state.name);
        }
    }
}

fn not_ready(vm: &VmInfo, message: &str) -> VmError {
    let console = vm.console_log();
    let tail = fs::read(&console)
        .map(|b| image::tail(&String::from_utf8_lossy(&b), 15))
        .unwrap_or_default();
    VmError::NotReady {
        vm: vm.name.clone(),
        message: format!("{message}; console tail:\n{tail}"),
        console: Path::new(LOG_ROOT)
            .join(vm.name.rsplit_once('-').map_or(vm.name.as_str(), |(f, _)| f))
            .join(format!("{}.console.log", vm.name))
            .display()
            .to_string(),
    }
}

/// The `capkk-hostkey: SHA256:...` line the image's first-boot unit prints to the console.
fn console_fingerprint(vm: &VmInfo) -> Option<String> {
    let log = fs::read(vm.console_log()).ok()?;
    let text = String::from_utf8_lossy(&log);
    text.lines()
        .filter_map(|l| l.split_once("capkk-hostkey: "))
        .map(|(_, fp)| fp.trim().to_owned())
        .find(|fp| fp.starts_with("SHA256:"))
}

pub(crate) fn ssh_banner(address: &str) -> bool {
    let Ok(addr) = format!("{address}:22").parse::<SocketAddr>() else {
        return false;
    };
    TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .and_then(|mut s| {
            let mut b = [0u8; 4];
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.read_exact(&mut b)?;
            Ok(&b == b"SSH-")
        })
        .unwrap_or(false)
}

/// The `known_hosts` line of `address`'s ed25519 key, after checking it matches the console's fingerprint.
fn keyscan(address: &str, fingerprint: &str) -> Result<String, String> {
    let out = Command::new("ssh-keyscan")
        .args(["-T", "30", "-t", "ed25519", address])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("ssh-keyscan: {e}"))?;
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| !l.starts_with('#') && l.contains("ssh-ed25519"))
        .map(str::to_owned)
        .ok_or_else(|| "ssh-keyscan found no ed25519 host key".to_string())?;
    let mut child = Command::new("ssh-keygen")
        .args(["-lf", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("ssh-keygen: {e}"))?;
    child
        .stdin
        .take()
        .map(|mut i| i.write_all(line.as_bytes()))
        .transpose()
        .map_err(|e| format!("ssh-keygen: {e}"))?;
    let fp = child.wait_with_output().map_err(|e| format!("ssh-keygen: {e}"))?;
    let got = String::from_utf8_lossy(&fp.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    if got != fingerprint {
        return Err(format!(
            "host key on port 22 ({got}) is not the one the console reported ({fingerprint})"
        ));
    }
    Ok(line)
}

fn start_watchdog(state: &FleetState, guard: u32) -> Result<()> {
    // The watchdog tears down only the generation it guards: a later boot of the same name rewrites `owner`.
    let owner = state.dir.join("owner");
    write_file(&owner, guard.to_string().as_bytes(), 0o644)?;
    run(Command::new("setsid")
        .arg("-f")
        .arg("sh")
        .arg("-c")
        .arg(format!(
            "while kill -0 {guard} 2>/dev/null; do sleep 0.5; done; \
             [ \"$(cat {owner} 2>/dev/null)\" = {guard} ] && sh {script} >/dev/null 2>&1",
            owner = q(&owner.display().to_string()),
            script = q(&state.dir.join("teardown.sh").display().to_string()),
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null()))?;
    Ok(())
}

fn boot_or_clean(config: &FleetConfig) -> Result<FleetState> {
    boot(config).inspect_err(|_| {
        if validate_name(&config.name).is_ok() {
            let _ = down(&config.name);
        }
    })
}

fn boot(config: &FleetConfig) -> Result<FleetState> {
    validate_name(&config.name)?;
    if config.vms.is_empty() || config.vms.len() > 9 {
        return Err(VmError::Invalid("a fleet has 1 to 9 VMs".into()));
    }
    require_root()?;
    if config.source == Source::Containers {
        return boot_containers(config);
    }
    require_tools(&[
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("qemu-img", "qemu-utils"),
        ("ip", "iproute2"),
        ("setsid", "util-linux"),
        ("ssh", "openssh-client"),
        ("ssh-keyscan", "openssh-client"),
    ])?;
    let accel = Accel::from_env()?;
    let image = ensure_image(&ImageSpec::default())?;
    let mut state = plan(
        config,
        accel,
        (image.hash.clone(), image.build_secs, image.private_key()),
    )?;
    let bridge = state.bridge.clone();
    let bridge_address = state.bridge_address.clone();
    for vm in &mut state.vms {
        fs::create_dir_all(&vm.dir).map_err(io_err(&vm.dir))?;
        run(Command::new("ip").args(["tuntap", "add", "dev", &vm.tap, "mode", "tap"]))?;
        run(Command::new("ip").args(["link", "set", &vm.tap, "master", &bridge, "up"]))?;
        let disk = vm.dir.join("disk.qcow2");
        run(Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
            .arg(image.base())
            .arg(&disk))?;
        let pidfile = vm.dir.join("qemu.pid");
        let mut cmd = Command::new("qemu-system-x86_64");
        // -nodefaults: no IDE CD-ROM, floppy or VGA for the guest kernel to probe (seconds each under TCG).
        cmd.args(["-nodefaults", "-name", &vm.name])
            .args(accel.qemu_args())
            .args([
                "-smp",
                &vm.spec.cpus.to_string(),
                "-m",
                &vm.spec.memory_mib.to_string(),
            ])
            .arg("-kernel")
            .arg(image.kernel())
            .arg("-initrd")
            .arg(image.initrd())
            .args(["-append", &kernel_cmdline(&vm.name, &vm.address, &bridge_address)])
            .arg("-drive")
            .arg(format!(
                "file={},if=virtio,format=qcow2,cache=unsafe,discard=unmap",
                disk.display()
            ))
            .args([
                "-netdev",
                &format!("tap,id=n0,ifname={},script=no,downscript=no", vm.tap),
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={}", vm.mac),
                "-device",
                "virtio-rng-pci",
                "-uuid",
                &vm.uuid,
                "-display",
                "none",
                "-monitor",
                "none",
                "-daemonize",
            ])
            .args((!config.reboot).then_some("-no-reboot"))
            .arg("-serial")
            .arg(format!("file:{}", vm.console_log().display()))
            .arg("-pidfile")
            .arg(&pidfile);
        run(&mut cmd)?;
        let pid = fs::read_to_string(&pidfile).map_err(io_err(&pidfile))?;
        vm.pid = pid
            .trim()
            .parse()
            .map_err(|_| VmError::Invalid(format!("{}: not a PID: {pid:?}", pidfile.display())))?;
    }
    save_state(&state)?;
    Ok(state)
}

/// The fleet's plan, saved with its teardown script, and its bridge up: slot, addresses, names, state dir.
/// `image` is the hash, build time and client key of the hosts' image.
fn plan(config: &FleetConfig, accel: Accel, image: (String, f64, PathBuf)) -> Result<FleetState> {
    down(&config.name)?;
    let idx = capkk_sandbox::claim_slot(&config.name)?;
    let service_index = if config.service_slot {
        Some(capkk_sandbox::claim_slot(&service_slot_name(&config.name))?)
    } else {
        None
    };
    let dir = state_dir(&config.name);
    fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(io_err(&dir))?;
    let bridge = format!("kkbr{idx}");
    let bridge_address = format!("198.18.{idx}.1");
    let mut state = FleetState {
        name: config.name.clone(),
        source: config.source,
        index: idx,
        dir: dir.clone(),
        bridge: bridge.clone(),
        bridge_address: bridge_address.clone(),
        inner_cidr: format!("198.19.{idx}.0/24"),
        service_cidr: service_index.map(|m| format!("198.19.{m}.0/24")),
        service_index,
        accel,
        image_hash: image.0,
        image_build_secs: image.1,
        private_key: image.2,
        known_hosts: dir.join("known_hosts"),
        vms: Vec::new(),
    };
    for (i, spec) in config.vms.iter().enumerate() {
        let n = i + 1;
        state.vms.push(VmInfo {
            name: format!("{}-{n}", config.name),
            address: format!("198.18.{idx}.{}", 10 + n),
            mac: format!("52:54:00:c4:{idx:02x}:{n:02x}"),
            uuid: random_uuid()?,
            tap: format!("kk{idx}t{n}"),
            spec: *spec,
            dir: dir.join(format!("vm{n}")),
            pid: 0,
            host_key_fingerprint: String::new(),
            boot_secs: 0.0,
        });
    }
    // The teardown script exists before the first device does, so a crash from here on is cleaned up.
    save_state(&state)?;
    write_file(&state.known_hosts, b"", 0o600)?;
    run(Command::new("ip").args(["link", "add", &bridge, "type", "bridge"]))?;
    run(Command::new("ip").args(["addr", "add", &format!("{bridge_address}/24"), "dev", &bridge]))?;
    run(Command::new("ip").args(["link", "set", &bridge, "up"]))?;
    write_file(&dir.join("started"), b"", 0o644)?;
    Ok(state)
}

fn boot_containers(config: &FleetConfig) -> Result<FleetState> {
    require_tools(&[
        ("podman", "podman"),
        ("runc", "runc"),
        ("ip", "iproute2"),
        ("nsenter", "util-linux"),
        ("setsid", "util-linux"),
        ("ssh", "openssh-client"),
        ("ssh-keyscan", "openssh-client"),
    ])?;
    containers::check_free_space(config.vms.len())?;
    containers::check_inotify(config.vms.len())?;
    let image = containers::ensure_node_image()?;
    let mut state = plan(
        config,
        Accel::Tcg,
        (image.hash.clone(), image.build_secs, image.private_key()),
    )?;
    containers::start(&mut state, &image)?;
    save_state(&state)?;
    Ok(state)
}

/// A one-host fleet in slot 9 named `name`, for unit tests of what is rendered from a state.
#[cfg(test)]
pub(crate) fn sample_state(name: &str, source: Source) -> FleetState {
    FleetState {
        name: name.into(),
        source,
        index: 9,
        dir: format!("/tmp/capkk-sandbox/{name}").into(),
        bridge: "kkbr9".into(),
        bridge_address: "198.18.9.1".into(),
        inner_cidr: "198.19.9.0/24".into(),
        service_cidr: None,
        service_index: None,
        accel: Accel::Tcg,
        image_hash: "h".into(),
        image_build_secs: 0.0,
        private_key: "/k".into(),
        known_hosts: "/kh".into(),
        vms: vec![VmInfo {
            name: format!("{name}-1"),
            address: "198.18.9.11".into(),
            mac: "52:54:00:c4:09:01".into(),
            uuid: "u".into(),
            tap: "kk9t1".into(),
            spec: VmSpec::WORKER,
            dir: format!("/tmp/capkk-sandbox/{name}/vm1").into(),
            pid: 1,
            host_key_fingerprint: String::new(),
            boot_secs: 0.0,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_sizes_parse_and_reject_nonsense() {
        assert_eq!("2x3072".parse::<VmSpec>().unwrap(), VmSpec::CONTROL_PLANE);
        for bad in ["", "2", "0x1024", "2x100", "ax1024", "2x"] {
            assert!(bad.parse::<VmSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_kernel_command_line_carries_the_identity() {
        let c = kernel_cmdline("vm-a-1", "198.18.7.11", "198.18.7.1");
        assert!(c.contains("ip=198.18.7.11::198.18.7.1:255.255.255.0:vm-a-1:eth0:off"));
        assert!(c.contains("systemd.hostname=vm-a-1"));
    }

    #[test]
    fn teardown_names_only_this_fleet() {
        let state = sample_state("vm-x", Source::Vms);
        let s = teardown_script(&state);
        assert!(s.contains("grep -q -e '/tmp/capkk-sandbox/vm-x/'"));
        assert!(s.contains("ip link del kk9t1"));
        assert!(s.contains("ip link del kkbr9"));
        assert!(s.contains("rm -f '/tmp/capkk-sandbox/.slots'/9"));
        assert!(!s.contains("pkill") && !s.contains("killall"));
    }

    #[test]
    fn a_fleet_with_a_service_slot_releases_both_slots_and_only_its_own() {
        let mut state = sample_state("conf", Source::Containers);
        assert!(
            !teardown_script(&state).contains("conf-svc"),
            "no second slot, nothing of it"
        );
        state.service_index = Some(42);
        state.service_cidr = Some("198.19.42.0/24".into());
        let s = teardown_script(&state);
        assert!(s.contains("rm -rf '/tmp/capkk-sandbox/conf-svc'"), "{s}");
        assert!(s.contains("rm -f '/tmp/capkk-sandbox/.slots'/42"), "{s}");
        assert!(s.contains("rm -f '/tmp/capkk-sandbox/.slots'/9"), "{s}");
        let json = serde_json::to_string(&state).unwrap();
        let back: FleetState = serde_json::from_str(&json).unwrap();
        assert_eq!(back.service_cidr.as_deref(), Some("198.19.42.0/24"));
    }

    #[test]
    fn uuids_are_random_version_4() {
        let a = random_uuid().unwrap();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, random_uuid().unwrap());
    }
}
