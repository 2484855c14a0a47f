//! Sandbox SSH test hosts (network namespace + overlay root + real sshd).
//!
//! Each *sandbox* has a name and owns:
//! - a slot index `N` in `0..=255`, claimed atomically as `/tmp/capkk-sandbox/.slots/N` (the file holds the name).
//!   The search starts at a hash of the name, so the same name normally gets the same slot, and different
//!   names (ssh tests, service tests, controller tests, e2e, bench) can run side by side without clashing;
//! - a bridge `kkbrN` in the machine's namespace holding `198.18.N.1/24`; host `i` (1-based) is
//!   `198.18.N.(10+i)` in network namespace `kkNhI`, reachable from the machine;
//! - optionally a bastion host `198.18.N.254` (namespace `kkNb`) with a second interface `198.19.N.1/24` on a
//!   bridge that lives *inside the bastion's namespace*; internal hosts `198.19.N.(10+i)` (namespaces `kkNiI`)
//!   hang off that bridge and are reachable only through SSH on the bastion (the bastion does not forward IP,
//!   and the machine gets an `unreachable` route for `198.19.N.0/24` so a direct dial fails at once and never
//!   leaves the machine);
//! - a state dir `/tmp/capkk-sandbox/<name>` (outside the repo) with per-host overlay upper dirs, generated
//!   client keys, `state.json`, `inventory.yaml` and a `teardown.sh`.
//!
//! Every host runs, in its own network, mount, UTS and PID namespaces, a chroot into an overlay of the machine's
//! root (writes land in the host's upper dir only) with a tiny init (`/etc/capkk-sandbox/init.sh`) that starts a
//! real OpenSSH `sshd` with freshly generated host keys (the machine's own host keys are whited out).
//! Users: `root`, `kkadmin` (sudo without password) and `kkuser` (sudo with password); all accept the sandbox's
//! client keys and the sandbox password. A `systemctl` shim records calls to `/var/log/capkk-systemctl.log` and
//! runs `ExecStart=` of unit files in the background.
//!
//! Setup is idempotent: `up` first runs the previous `teardown.sh` of the same name (a crashed run is cleaned
//! by the next `up`). Teardown kills only the PIDs recorded in the state dir (and checks each one's command
//! line first), deletes the namespaces, bridge and route, and removes the state dir.

use std::{
    collections::hash_map::DefaultHasher,
    fmt, fs,
    hash::{Hash, Hasher},
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    os::unix::{
        fs::{OpenOptionsExt, PermissionsExt},
        process::CommandExt,
    },
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

/// Root of all sandbox state dirs.
pub const STATE_ROOT: &str = "/tmp/capkk-sandbox";
/// The non-root login user whose sudo needs no password.
pub const NOPASSWD_USER: &str = "kkadmin";
/// The non-root login user whose sudo needs the sandbox password.
pub const PASSWD_USER: &str = "kkuser";
/// Path of the systemctl shim's call log inside each host.
pub const SYSTEMCTL_LOG: &str = "/var/log/capkk-systemctl.log";

const SHIM: &str = include_str!("systemctl-shim.sh");
/// Kernel settings every host namespace sets for itself right after it is created. A new network namespace
/// inherits IPv4 settings such as `ip_forward` from the machine (`net.core.devconf_inherit_init_net=0`), and a
/// machine that runs VMs or containers usually forwards; the sandbox promises hosts that are not routers (the
/// bastion in particular must not forward between its two networks), so it says so itself.
const NETNS_SYSCTLS: &str = "echo 0 > /proc/sys/net/ipv4/ip_forward && \
     if [ -e /proc/sys/net/ipv6/conf/all/forwarding ]; then echo 0 > /proc/sys/net/ipv6/conf/all/forwarding; fi";
const HOST_KEY: &str = "/etc/ssh/capkk_host_ed25519_key";

/// What went wrong while building, driving or tearing down a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The harness needs root and the tools named.
    #[error("sandbox hosts need root and {0}")]
    Unsupported(String),
    /// A setup command failed.
    #[error("running `{command}` failed: {message}")]
    RunCommand {
        /// The command.
        command: String,
        /// Exit status and stderr.
        message: String,
    },
    /// Local file I/O failed.
    #[error("file I/O on {path} failed: {source}")]
    WriteFile {
        /// The path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// No free slot (all 256 taken).
    #[error("no free sandbox slot for {0}")]
    ClaimSlot(String),
    /// sshd did not come up in time.
    #[error("sshd on {0} did not start listening in time; see its sshd.log")]
    StartSshd(String),
    /// No such host in this sandbox.
    #[error("no host named {0} in this sandbox")]
    FindHost(String),
    /// The state file is missing or unreadable.
    #[error("reading sandbox state {path} failed: {message}")]
    ReadState {
        /// The path.
        path: String,
        /// Why.
        message: String,
    },
}

/// Result alias.
pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

/// Which login user the inventory names by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LoginUser {
    /// `root`.
    #[default]
    Root,
    /// `kkadmin`, sudo without password.
    Nopasswd,
    /// `kkuser`, sudo with the sandbox password.
    Passwd,
}

impl LoginUser {
    /// The Unix user name.
    pub fn name(self) -> &'static str {
        match self {
            LoginUser::Root => "root",
            LoginUser::Nopasswd => NOPASSWD_USER,
            LoginUser::Passwd => PASSWD_USER,
        }
    }
}

/// What to build.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Sandbox name (`[a-z0-9-]`, at most 32 chars): selects the state dir and slot.
    pub name: String,
    /// Hosts on the main network (reachable from the machine).
    pub hosts: usize,
    /// Hosts on the second network, reachable only through a bastion (0 = no bastion).
    pub internal_hosts: usize,
    /// Login user written to the inventory.
    pub user: LoginUser,
}

impl SandboxConfig {
    /// `hosts` main-network hosts, no bastion, root login.
    pub fn new(name: impl Into<String>, hosts: usize) -> Self {
        Self {
            name: name.into(),
            hosts,
            internal_hosts: 0,
            user: LoginUser::Root,
        }
    }

    /// Add a bastion and `n` hosts behind it.
    pub fn with_internal_hosts(mut self, n: usize) -> Self {
        self.internal_hosts = n;
        self
    }
}

/// Which network a host sits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// `198.18.N.0/24`, reachable from the machine.
    Main,
    /// `198.19.N.0/24`, reachable only through the bastion.
    Internal,
}

/// One host as recorded in `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostInfo {
    /// Host name (also its hostname inside).
    pub name: String,
    /// IPv4 address sshd listens on.
    pub address: String,
    /// SSH port.
    pub port: u16,
    /// Network.
    pub network: Network,
    /// Name of the bastion host to go through, for internal hosts.
    pub bastion: Option<String>,
    /// Network namespace name.
    pub netns: String,
    /// SHA256 fingerprint of the current host key (`SHA256:...`).
    pub host_key_fingerprint: String,
    /// Host dir on the machine (upper dir, logs, pid files).
    pub dir: PathBuf,
}

/// The sandbox's client credentials (all test-only, generated per `up`).
#[derive(Clone, Serialize, Deserialize)]
pub struct Credentials {
    /// Password of root, kkadmin and kkuser (also the sudo password of kkuser and the key passphrase).
    pub password: String,
    /// ed25519 client key (no passphrase).
    pub ed25519_key: PathBuf,
    /// RSA 3072 client key.
    pub rsa_key: PathBuf,
    /// ECDSA P-256 client key.
    pub ecdsa_key: PathBuf,
    /// ed25519 client key encrypted with `password`.
    pub ed25519_key_with_passphrase: PathBuf,
    /// An ed25519 key that no host accepts.
    pub unauthorized_key: PathBuf,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("password", &"<redacted>")
            .field("ed25519_key", &self.ed25519_key)
            .finish_non_exhaustive()
    }
}

/// Everything `up` produced, persisted as `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SandboxState {
    /// Sandbox name.
    pub name: String,
    /// Slot index `N` (see the crate docs for the address scheme).
    pub index: u8,
    /// State dir.
    pub dir: PathBuf,
    /// Default login user.
    pub user: LoginUser,
    /// Main network hosts, then the bastion (if any), then internal hosts.
    pub hosts: Vec<HostInfo>,
    /// Client credentials.
    pub credentials: Credentials,
}

/// A running sandbox. Dropping an owned sandbox tears it down; a [`Sandbox::shared`] one is torn down by a
/// watchdog when the process exits.
pub struct Sandbox {
    state: SandboxState,
    teardown_on_drop: bool,
}

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox")
            .field("name", &self.state.name)
            .field("index", &self.state.index)
            .finish()
    }
}

pub mod assets;
pub mod mirror;
pub mod skip;

/// The commands sandbox hosts need, with the Debian package that provides each.
pub const REQUIRED_TOOLS: [(&str, &str); 8] = [
    ("sshd", "openssh-server"),
    ("ssh-keygen", "openssh-client"),
    ("unshare", "util-linux"),
    ("nsenter", "util-linux"),
    ("setsid", "util-linux"),
    ("sudo", "sudo"),
    ("openssl", "openssl"),
    ("ip", "iproute2"),
];

/// Why sandbox tests cannot run here, or `None` when they can: root, and every command of [`REQUIRED_TOOLS`]
/// on `PATH` (looked up like a shell does, so a `PATH` without sshd is a machine without sshd).
pub fn unsupported_reason() -> Option<String> {
    let mut missing = Vec::new();
    if !is_root() {
        missing.push("root".to_string());
    }
    for (tool, package) in REQUIRED_TOOLS {
        if find_tool(tool).is_none() {
            missing.push(format!("{tool} ({package})"));
        }
    }
    if missing.is_empty() {
        None
    } else {
        Some(format!("missing: {}", missing.join(", ")))
    }
}

/// The skip policy for sandbox tests ([`skip::unless_available`]): returns `false` when sandbox hosts can be
/// built here. Otherwise the test fails naming what is missing, unless `CAPKK_ALLOW_SKIP=1`, in which case the
/// skip is recorded and this returns `true` (the caller returns early).
#[track_caller]
pub fn skip_unless_supported() -> bool {
    skip::unless_available("sandbox hosts", unsupported_reason())
}

/// Absolute path of `tool` in a directory of `PATH`, if it is there and executable.
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(tool))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Run `cmd` (stdin closed) and return its output; a command that cannot start or exits non-zero is
/// [`SandboxError::RunCommand`] with its exit status and stderr.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| SandboxError::RunCommand {
            command: format!("{cmd:?}"),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(SandboxError::RunCommand {
            command: format!("{cmd:?}"),
            message: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(out)
}

fn sh(script: &str) -> Result<Output> {
    run(Command::new("sh").arg("-c").arg(script))
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let err = |source| SandboxError::WriteFile {
        path: path.display().to_string(),
        source,
    };
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(err)?;
    }
    let _ = fs::remove_file(path);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(err)?;
    f.write_all(data).map_err(err)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(err)?;
    Ok(())
}

fn read_file(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|source| SandboxError::WriteFile {
        path: path.display().to_string(),
        source,
    })
}

/// Single-quote for sh.
fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn random_password() -> Result<String> {
    let mut buf = [0u8; 12];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|source| SandboxError::WriteFile {
            path: "/dev/urandom".into(),
            source,
        })?;
    Ok(format!(
        "kkpw-{}",
        buf.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

fn fingerprint(pubkey: &Path) -> Result<String> {
    let out = run(Command::new("ssh-keygen").arg("-lf").arg(pubkey))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .nth(1)
        .map(str::to_owned)
        .ok_or_else(|| SandboxError::RunCommand {
            command: format!("ssh-keygen -lf {}", pubkey.display()),
            message: format!("unexpected output {text:?}"),
        })
}

fn keygen(path: &Path, kind: &str, bits: Option<&str>, passphrase: &str) -> Result<()> {
    let _ = fs::remove_file(path);
    let _ = fs::remove_file(path.with_extension("pub"));
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-t", kind, "-N", passphrase, "-C", "capkk-sandbox", "-f"])
        .arg(path);
    if let Some(b) = bits {
        cmd.args(["-b", b]);
    }
    run(&mut cmd)?;
    Ok(())
}

fn slot_dir() -> PathBuf {
    Path::new(STATE_ROOT).join(".slots")
}

/// Claim a slot for `name`: reuse its own stale slot, else the first free one from hash(name).
///
/// Public so other test-host kinds (the VM fleets of `capkk-vm`) share the address plan: whoever holds slot
/// `N` owns `198.18.N.0/24`, `198.19.N.0/24` and the bridge `kkbrN`, and keeps its state dir at
/// `STATE_ROOT/<name>` while it runs (a slot whose owner has neither is taken over as stale). The state dir is
/// made here, before the slot is: a claim must never look stale to another one.
pub fn claim_slot(name: &str) -> Result<u8> {
    claim_slot_in(Path::new(STATE_ROOT), name)
}

/// [`claim_slot`] with the state dirs under `root` (slots in `root/.slots`).
///
/// Claims of several processes at once (test binaries run in parallel, each building its sandboxes) are
/// serialized by a lock on `root/.slots/.lock`: taking over a stale slot is a read, a delete and a create,
/// and two claimants must not both take over one slot.
pub fn claim_slot_in(root: &Path, name: &str) -> Result<u8> {
    let dir = root.join(".slots");
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| SandboxError::WriteFile { path, source }
    };
    fs::create_dir_all(&dir).map_err(io(&dir))?;
    let lock_path = dir.join(".lock");
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    lock.lock().map_err(io(&lock_path))?;
    let state = root.join(name);
    fs::create_dir_all(&state).map_err(io(&state))?;
    for i in 0..=255u8 {
        if fs::read_to_string(dir.join(i.to_string())).is_ok_and(|n| n == name) {
            return Ok(i);
        }
    }
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    let start = (h.finish() % 256) as usize;
    for k in 0..256 {
        let idx = ((start + k) % 256) as u8;
        let path = dir.join(idx.to_string());
        match fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                f.write_all(name.as_bytes()).map_err(io(&path))?;
                // The bridge may still exist from a crashed run of a different name that lost its slot file.
                if Path::new(&format!("/sys/class/net/kkbr{idx}")).exists() {
                    let _ = fs::remove_file(&path);
                    continue;
                }
                return Ok(idx);
            }
            Err(_) => {
                // Taken. If its owner has no state dir any more, it is stale: take it over.
                let owner = fs::read_to_string(&path).unwrap_or_default();
                if !owner.is_empty()
                    && !root.join(&owner).exists()
                    && !Path::new(&format!("/sys/class/net/kkbr{idx}")).exists()
                {
                    let _ = fs::remove_file(&path);
                    if fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .and_then(|mut f| f.write_all(name.as_bytes()))
                        .is_ok()
                    {
                        return Ok(idx);
                    }
                }
            }
        }
    }
    Err(SandboxError::ClaimSlot(name.into()))
}

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 32
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(SandboxError::RunCommand {
            command: "validate sandbox name".into(),
            message: format!("name {name:?} must be 1-32 chars of [a-z0-9-]"),
        });
    }
    Ok(())
}

/// Tear down the sandbox `name` if anything of it exists (idempotent; no-op otherwise).
pub fn down(name: &str) -> Result<()> {
    validate_name(name)?;
    let dir = Path::new(STATE_ROOT).join(name);
    let script = dir.join("teardown.sh");
    if script.exists() {
        run(Command::new("sh").arg(&script))?;
    } else if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|source| SandboxError::WriteFile {
            path: dir.display().to_string(),
            source,
        })?;
    }
    Ok(())
}

fn teardown_script(name: &str, idx: u8, dir: &Path, netns: &[String], links: &[String]) -> String {
    let d = dir.display();
    let mut s = format!(
        "#!/bin/sh\n# Generated by capkk-sandbox: tears down sandbox {name} (slot {idx}).\n\
         # Kills only the PIDs recorded under {d}/hosts/*/ whose command line mentions this sandbox.\n"
    );
    s.push_str(&format!(
        "for f in {d}/hosts/*/init.pid {d}/hosts/*/unshare.pid; do\n  [ -f \"$f\" ] || continue\n  \
         p=$(cat \"$f\")\n  if [ -n \"$p\" ] && tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q -e {m1} -e {m2}; then\n    \
         kill -9 \"$p\" 2>/dev/null\n  fi\ndone\n",
        m1 = q(&format!("capkk-sandbox/{name}/")),
        m2 = q("/etc/capkk-sandbox/init.sh"),
    ));
    // Delete the machine-side veth ends first: that is synchronous, while a namespace's devices vanish
    // asynchronously after `ip netns del` (a quick re-`up` would otherwise find the old names still taken).
    for link in links {
        s.push_str(&format!("ip link del {link} 2>/dev/null\n"));
    }
    for ns in netns {
        s.push_str(&format!("ip netns del {ns} 2>/dev/null\n"));
    }
    s.push_str(&format!(
        "ip link del kkbr{idx} 2>/dev/null\nip route del unreachable 198.19.{idx}.0/24 2>/dev/null\n\
         rm -rf {d}\nrm -f {slots}/{idx}\nexit 0\n",
        slots = slot_dir().display()
    ));
    s
}

impl Sandbox {
    /// Build a sandbox, first cleaning whatever a previous run of the same name left behind.
    /// Dropping the returned value tears it down.
    pub fn up(config: &SandboxConfig) -> Result<Sandbox> {
        let state = build_or_clean(config)?;
        Ok(Sandbox {
            state,
            teardown_on_drop: true,
        })
    }

    /// Build a sandbox that outlives this value and is torn down by a watchdog process once the current
    /// process exits (use from a `static OnceLock` shared by the tests of one binary). A crash of the watchdog
    /// is covered by the next `up` of the same name.
    pub fn shared(config: &SandboxConfig) -> Result<Sandbox> {
        let state = build_or_clean(config)?;
        let script = state.dir.join("teardown.sh");
        let pid = std::process::id();
        // The watchdog tears down only the generation it guards: a later `up` of the same name rewrites `owner`.
        let owner = state.dir.join("owner");
        write_file(&owner, pid.to_string().as_bytes(), 0o644)?;
        run(Command::new("setsid")
            .arg("-f")
            .arg("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {pid} 2>/dev/null; do sleep 0.2; done; \
                 [ \"$(cat {owner} 2>/dev/null)\" = {pid} ] && sh {script} >/dev/null 2>&1",
                owner = owner.display(),
                script = script.display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null()))?;
        Ok(Sandbox {
            state,
            teardown_on_drop: false,
        })
    }

    /// Attach to a sandbox started elsewhere (e.g. by the CLI); dropping it does not tear it down.
    pub fn attach(name: &str) -> Result<Sandbox> {
        validate_name(name)?;
        let path = Path::new(STATE_ROOT).join(name).join("state.json");
        let text = fs::read_to_string(&path).map_err(|e| SandboxError::ReadState {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let state = serde_json::from_str(&text).map_err(|e| SandboxError::ReadState {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Ok(Sandbox {
            state,
            teardown_on_drop: false,
        })
    }

    /// Tear down now (idempotent).
    pub fn down(&self) -> Result<()> {
        down(&self.state.name)
    }

    /// The recorded state.
    pub fn state(&self) -> &SandboxState {
        &self.state
    }

    /// The client credentials.
    pub fn credentials(&self) -> &Credentials {
        &self.state.credentials
    }

    /// Main-network hosts (not the bastion).
    pub fn hosts(&self) -> Vec<Host<'_>> {
        self.state
            .hosts
            .iter()
            .filter(|h| h.network == Network::Main && !h.name.ends_with("-bastion"))
            .map(|info| Host {
                sandbox: self,
                info: info.clone(),
            })
            .collect()
    }

    /// The bastion, when the sandbox has internal hosts.
    pub fn bastion(&self) -> Option<Host<'_>> {
        self.state
            .hosts
            .iter()
            .find(|h| h.name.ends_with("-bastion"))
            .map(|info| Host {
                sandbox: self,
                info: info.clone(),
            })
    }

    /// Hosts on the second network (reachable only through the bastion).
    pub fn internal_hosts(&self) -> Vec<Host<'_>> {
        self.state
            .hosts
            .iter()
            .filter(|h| h.network == Network::Internal)
            .map(|info| Host {
                sandbox: self,
                info: info.clone(),
            })
            .collect()
    }

    /// A host by name.
    pub fn host(&self, name: &str) -> Result<Host<'_>> {
        self.state
            .hosts
            .iter()
            .find(|h| h.name == name)
            .map(|info| Host {
                sandbox: self,
                info: info.clone(),
            })
            .ok_or_else(|| SandboxError::FindHost(name.into()))
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.teardown_on_drop
            && let Err(e) = down(&self.state.name)
        {
            eprintln!("sandbox {} teardown failed: {e}", self.state.name);
        }
    }
}

fn save_state(state: &SandboxState) -> Result<()> {
    let json = serde_json::to_vec_pretty(state).map_err(|e| SandboxError::ReadState {
        path: state.dir.join("state.json").display().to_string(),
        message: e.to_string(),
    })?;
    write_file(&state.dir.join("state.json"), &json, 0o600)?;
    write_file(
        &state.dir.join("inventory.yaml"),
        inventory_yaml(state).as_bytes(),
        0o600,
    )?;
    Ok(())
}

#[derive(Serialize)]
struct InventoryHost<'a> {
    name: &'a str,
    address: &'a str,
    port: u16,
    user: &'a str,
    private_key_file: String,
    host_key_fingerprint: &'a str,
    network: Network,
    #[serde(skip_serializing_if = "Option::is_none")]
    bastion: Option<String>,
}

#[derive(Serialize)]
struct Inventory<'a> {
    name: &'a str,
    index: u8,
    password_file: String,
    users: [&'static str; 3],
    hosts: Vec<InventoryHost<'a>>,
}

fn inventory_yaml(state: &SandboxState) -> String {
    let inv = Inventory {
        name: &state.name,
        index: state.index,
        password_file: state.dir.join("password").display().to_string(),
        users: ["root", NOPASSWD_USER, PASSWD_USER],
        hosts: state
            .hosts
            .iter()
            .map(|h| InventoryHost {
                name: &h.name,
                address: &h.address,
                port: h.port,
                user: state.user.name(),
                private_key_file: state.credentials.ed25519_key.display().to_string(),
                host_key_fingerprint: &h.host_key_fingerprint,
                network: h.network,
                bastion: h.bastion.clone(),
            })
            .collect(),
    };
    serde_saphyr::to_string(&inv).unwrap_or_else(|e| format!("# inventory serialization failed: {e}\n"))
}

/// Build, or on failure tear down whatever was built (the error names the failed step).
fn build_or_clean(config: &SandboxConfig) -> Result<SandboxState> {
    build(config).inspect_err(|_| {
        if validate_name(&config.name).is_ok() {
            let _ = down(&config.name);
        }
    })
}

struct HostPlan {
    name: String,
    netns: String,
    address: String,
    network: Network,
    bastion: Option<String>,
}

fn build(config: &SandboxConfig) -> Result<SandboxState> {
    validate_name(&config.name)?;
    if let Some(reason) = unsupported_reason() {
        return Err(SandboxError::Unsupported(reason));
    }
    down(&config.name)?;
    let idx = claim_slot(&config.name)?;
    let dir = Path::new(STATE_ROOT).join(&config.name);
    fs::create_dir_all(dir.join("hosts")).map_err(|source| SandboxError::WriteFile {
        path: dir.display().to_string(),
        source,
    })?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(|source| {
        SandboxError::WriteFile {
            path: dir.display().to_string(),
            source,
        }
    })?;

    let name = &config.name;
    let mut plans = Vec::new();
    for i in 1..=config.hosts {
        plans.push(HostPlan {
            name: format!("{name}-{i}"),
            netns: format!("kk{idx}h{i}"),
            address: format!("198.18.{idx}.{}", 10 + i),
            network: Network::Main,
            bastion: None,
        });
    }
    let bastion_name = format!("{name}-bastion");
    if config.internal_hosts > 0 {
        plans.push(HostPlan {
            name: bastion_name.clone(),
            netns: format!("kk{idx}b"),
            address: format!("198.18.{idx}.254"),
            network: Network::Main,
            bastion: None,
        });
        for i in 1..=config.internal_hosts {
            plans.push(HostPlan {
                name: format!("{name}-in{i}"),
                netns: format!("kk{idx}i{i}"),
                address: format!("198.19.{idx}.{}", 10 + i),
                network: Network::Internal,
                bastion: Some(bastion_name.clone()),
            });
        }
    }
    if config.hosts + config.internal_hosts > 200 {
        return Err(SandboxError::RunCommand {
            command: "plan hosts".into(),
            message: "at most 200 hosts per sandbox".into(),
        });
    }
    let netns: Vec<String> = plans.iter().map(|p| p.netns.clone()).collect();
    let links: Vec<String> = (0..plans.len()).map(|n| format!("kkv{idx}x{n}")).collect();
    write_file(
        &dir.join("teardown.sh"),
        teardown_script(name, idx, &dir, &netns, &links).as_bytes(),
        0o700,
    )?;

    // Credentials.
    let password = random_password()?;
    write_file(&dir.join("password"), password.as_bytes(), 0o600)?;
    let keys = dir.join("keys");
    let credentials = Credentials {
        password: password.clone(),
        ed25519_key: keys.join("id_ed25519"),
        rsa_key: keys.join("id_rsa"),
        ecdsa_key: keys.join("id_ecdsa"),
        ed25519_key_with_passphrase: keys.join("id_ed25519_pass"),
        unauthorized_key: keys.join("id_unauthorized"),
    };
    fs::create_dir_all(&keys).map_err(|source| SandboxError::WriteFile {
        path: keys.display().to_string(),
        source,
    })?;
    keygen(&credentials.ed25519_key, "ed25519", None, "")?;
    keygen(&credentials.rsa_key, "rsa", Some("3072"), "")?;
    keygen(&credentials.ecdsa_key, "ecdsa", Some("256"), "")?;
    keygen(
        &credentials.ed25519_key_with_passphrase,
        "ed25519",
        None,
        &password,
    )?;
    keygen(&credentials.unauthorized_key, "ed25519", None, "")?;
    let mut authorized = String::new();
    for k in [
        &credentials.ed25519_key,
        &credentials.rsa_key,
        &credentials.ecdsa_key,
        &credentials.ed25519_key_with_passphrase,
    ] {
        authorized.push_str(&read_file(&k.with_extension("pub"))?);
    }
    let hash = String::from_utf8_lossy(
        &run_with_stdin(
            Command::new("openssl").args(["passwd", "-6", "-stdin"]),
            password.as_bytes(),
        )?
        .stdout,
    )
    .trim()
    .to_owned();

    // Networks.
    sh(&format!(
        "ip link del kkbr{idx} 2>/dev/null; ip link add kkbr{idx} type bridge && ip addr add 198.18.{idx}.1/24 dev kkbr{idx} && ip link set kkbr{idx} up"
    ))?;
    if config.internal_hosts > 0 {
        sh(&format!("ip route replace unreachable 198.19.{idx}.0/24"))?;
    }
    let mut hosts = Vec::new();
    for (n, plan) in plans.iter().enumerate() {
        let hdir = dir.join("hosts").join(&plan.name);
        let ns = &plan.netns;
        sh(&format!(
            "ip netns del {ns} 2>/dev/null; ip netns add {ns} && ip -n {ns} link set lo up && ip netns exec {ns} sh -c {}",
            q(NETNS_SYSCTLS)
        ))?;
        match plan.network {
            Network::Main => {
                let out = format!("kkv{idx}x{n}");
                sh(&format!(
                    "ip link del {out} 2>/dev/null; ip link add {out} type veth peer name eth0 netns {ns} && ip link set {out} master kkbr{idx} && \
                     ip link set {out} up && ip -n {ns} addr add {addr}/24 dev eth0 && ip -n {ns} link set eth0 up",
                    addr = plan.address
                ))?;
                if plan.name == bastion_name {
                    sh(&format!(
                        "ip -n {ns} link add br1 type bridge && ip -n {ns} addr add 198.19.{idx}.1/24 dev br1 && \
                         ip -n {ns} link set br1 up"
                    ))?;
                }
            }
            Network::Internal => {
                let bns = format!("kk{idx}b");
                sh(&format!(
                    "ip -n {bns} link add v{n} type veth peer name eth0 netns {ns} && ip -n {bns} link set v{n} master br1 && \
                     ip -n {bns} link set v{n} up && ip -n {ns} addr add {addr}/24 dev eth0 && ip -n {ns} link set eth0 up",
                    addr = plan.address
                ))?;
            }
        }
        let fp = prepare_host(&hdir, &plan.name, &plan.address, &authorized, &hash)?;
        hosts.push(HostInfo {
            name: plan.name.clone(),
            address: plan.address.clone(),
            port: 22,
            network: plan.network,
            bastion: plan.bastion.clone(),
            netns: ns.clone(),
            host_key_fingerprint: fp,
            dir: hdir,
        });
    }
    let state = SandboxState {
        name: name.clone(),
        index: idx,
        dir: dir.clone(),
        user: config.user,
        hosts,
        credentials,
    };
    save_state(&state)?;
    for h in &state.hosts {
        boot_host(h)?;
    }
    // Main-network hosts answer from the machine; internal ones are checked from inside the bastion.
    for h in &state.hosts {
        wait_listening(h)?;
    }
    Ok(state)
}

fn run_with_stdin(cmd: &mut Command, input: &[u8]) -> Result<Output> {
    let name = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| SandboxError::RunCommand {
            command: name.clone(),
            message: e.to_string(),
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input).map_err(|e| SandboxError::RunCommand {
            command: name.clone(),
            message: e.to_string(),
        })?;
    }
    let out = child.wait_with_output().map_err(|e| SandboxError::RunCommand {
        command: name.clone(),
        message: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(SandboxError::RunCommand {
            command: name,
            message: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(out)
}

/// Write the host's upper dir: users, sudoers, sshd config, fresh host key, systemctl shim, init.
fn prepare_host(hdir: &Path, hostname: &str, address: &str, authorized: &str, hash: &str) -> Result<String> {
    let upper = hdir.join("upper");
    for d in ["upper", "work", "merged"] {
        fs::create_dir_all(hdir.join(d)).map_err(|source| SandboxError::WriteFile {
            path: hdir.join(d).display().to_string(),
            source,
        })?;
    }
    let etc = upper.join("etc");
    // Users: copy the machine's account files and add ours (root gets the sandbox password too).
    let mut passwd = read_file(Path::new("/etc/passwd"))?;
    let mut group = read_file(Path::new("/etc/group"))?;
    let shadow_src = read_file(Path::new("/etc/shadow"))?;
    let mut shadow = String::new();
    for line in shadow_src.lines() {
        if let Some(rest) = line.strip_prefix("root:") {
            let tail: Vec<&str> = rest.splitn(2, ':').collect();
            shadow.push_str(&format!("root:{hash}:{}\n", tail.get(1).unwrap_or(&"")));
        } else if !line.starts_with(&format!("{NOPASSWD_USER}:"))
            && !line.starts_with(&format!("{PASSWD_USER}:"))
        {
            shadow.push_str(line);
            shadow.push('\n');
        }
    }
    for (user, uid) in [(NOPASSWD_USER, 2001), (PASSWD_USER, 2002)] {
        passwd.push_str(&format!(
            "{user}:x:{uid}:{uid}:capkk sandbox:/home/{user}:/bin/sh\n"
        ));
        group.push_str(&format!("{user}:x:{uid}:\n"));
        shadow.push_str(&format!("{user}:{hash}:19000:0:99999:7:::\n"));
        let home = upper.join("home").join(user);
        fs::create_dir_all(&home).map_err(|source| SandboxError::WriteFile {
            path: home.display().to_string(),
            source,
        })?;
        run(Command::new("chown").arg(format!("{uid}:{uid}")).arg(&home))?;
    }
    clean_root_home(&upper)?;
    write_file(&etc.join("passwd"), passwd.as_bytes(), 0o644)?;
    write_file(&etc.join("group"), group.as_bytes(), 0o644)?;
    write_file(&etc.join("shadow"), shadow.as_bytes(), 0o640)?;
    run(Command::new("chown").arg("root:shadow").arg(etc.join("shadow"))).ok();
    write_file(
        &etc.join("sudoers.d/capkk-sandbox"),
        format!("{NOPASSWD_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n{PASSWD_USER} ALL=(ALL:ALL) ALL\n").as_bytes(),
        0o440,
    )?;
    write_file(&etc.join("hostname"), format!("{hostname}\n").as_bytes(), 0o644)?;
    write_file(
        &etc.join("hosts"),
        format!("127.0.0.1 localhost\n{address} {hostname}\n").as_bytes(),
        0o644,
    )?;
    // Host keys: whiteout the machine's, generate a fresh one.
    fs::create_dir_all(etc.join("ssh")).map_err(|source| SandboxError::WriteFile {
        path: etc.join("ssh").display().to_string(),
        source,
    })?;
    if let Ok(entries) = fs::read_dir("/etc/ssh") {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("ssh_host_") {
                let w = etc.join("ssh").join(&n);
                let _ = fs::remove_file(&w);
                run(Command::new("mknod").arg(&w).args(["c", "0", "0"]))?;
            }
        }
    }
    let key = upper.join(HOST_KEY.trim_start_matches('/'));
    keygen(&key, "ed25519", None, "")?;
    write_file(
        &etc.join("ssh/capkk_authorized_keys"),
        authorized.as_bytes(),
        0o644,
    )?;
    let config = format!(
        "ListenAddress {address}\nPort 22\nHostKey {HOST_KEY}\nPermitRootLogin yes\nUsePAM no\nStrictModes no\n\
         PubkeyAuthentication yes\nPasswordAuthentication yes\nKbdInteractiveAuthentication no\n\
         AuthorizedKeysFile /etc/ssh/capkk_authorized_keys\nMaxSessions 10\nMaxStartups 100:30:200\n\
         AllowTcpForwarding yes\nPidFile none\nLogLevel VERBOSE\nClientAliveInterval 0\nPrintMotd no\n\
         AcceptEnv LANG LC_*\n"
    );
    write_file(&etc.join("ssh/sshd_config.capkk"), config.as_bytes(), 0o644)?;
    write_file(&upper.join("usr/bin/systemctl"), SHIM.as_bytes(), 0o755)?;
    // The same sshd the prerequisite check found on PATH (the host's root is an overlay of the machine's).
    let sshd = find_tool("sshd").ok_or_else(|| SandboxError::Unsupported("sshd (openssh-server)".into()))?;
    let sshd = q(&sshd.display().to_string());
    let init = format!(
        "#!/bin/sh\n# capkk sandbox init (PID 1 of host {hostname}). Starts sshd; reaps children.\n\
         mkdir -p /run/sshd /var/log\n\
         start_sshd() {{ {sshd} -D -f /etc/ssh/sshd_config.capkk -E /var/log/capkk-sshd.log & echo $! > /run/capkk-sshd.pid; }}\n\
         trap 'start_sshd' USR1\n\
         start_sshd\n\
         while :; do sleep 1 & wait $!; done\n"
    );
    write_file(&upper.join("etc/capkk-sandbox/init.sh"), init.as_bytes(), 0o755)?;
    fingerprint(&key.with_extension("pub"))
}

/// Give the host a fresh `/root` (like a new machine): every entry of the machine's `/root` is whited out in the
/// upper layer, and `/etc/skel`'s files take the place of their namesakes. Without this, root's login shell
/// would run the machine's `.bashrc` (toolchain managers and all) on every exec.
fn clean_root_home(upper: &Path) -> Result<()> {
    let home = upper.join("root");
    fs::create_dir_all(&home).map_err(|source| SandboxError::WriteFile {
        path: home.display().to_string(),
        source,
    })?;
    fs::set_permissions(&home, fs::Permissions::from_mode(0o700)).map_err(|source| {
        SandboxError::WriteFile {
            path: home.display().to_string(),
            source,
        }
    })?;
    let skel = Path::new("/etc/skel");
    if let Ok(entries) = fs::read_dir("/root") {
        for e in entries.flatten() {
            let name = e.file_name();
            let target = home.join(&name);
            let _ = fs::remove_file(&target);
            if skel.join(&name).is_file() {
                fs::copy(skel.join(&name), &target).map_err(|source| SandboxError::WriteFile {
                    path: target.display().to_string(),
                    source,
                })?;
            } else {
                run(Command::new("mknod").arg(&target).args(["c", "0", "0"]))?;
            }
        }
    }
    Ok(())
}

fn boot_host(h: &HostInfo) -> Result<()> {
    let d = h.dir.display();
    let m = format!("{d}/merged");
    let script = format!(
        "set -e\n\
         mount -t overlay overlay -o lowerdir=/,upperdir={d}/upper,workdir={d}/work {m}\n\
         mount --rbind /dev {m}/dev\n\
         mount -t proc proc {m}/proc\n\
         mount -t sysfs sysfs {m}/sys || true\n\
         mount -t tmpfs tmpfs {m}/run\n\
         mount -t tmpfs tmpfs {m}/tmp\n\
         chmod 1777 {m}/tmp\n\
         hostname {name}\n\
         exec chroot {m} /bin/sh /etc/capkk-sandbox/init.sh\n",
        name = h.name
    );
    let log = fs::File::create(h.dir.join("console.log")).map_err(|source| SandboxError::WriteFile {
        path: h.dir.join("console.log").display().to_string(),
        source,
    })?;
    let log2 = log.try_clone().map_err(|source| SandboxError::WriteFile {
        path: d.to_string(),
        source,
    })?;
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &h.netns,
            "unshare",
            "--mount",
            "--uts",
            "--pid",
            "--fork",
            "--kill-child",
        ])
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(|e| SandboxError::RunCommand {
            command: format!("boot {}", h.name),
            message: e.to_string(),
        })?;
    let upid = child.id();
    write_file(&h.dir.join("unshare.pid"), upid.to_string().as_bytes(), 0o644)?;
    // The init is unshare's only child.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = fs::read_to_string(format!("/proc/{upid}/task/{upid}/children")).unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            write_file(&h.dir.join("init.pid"), pid.as_bytes(), 0o644)?;
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(SandboxError::StartSshd(h.name.clone()));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

fn wait_listening(h: &HostInfo) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ok = match h.network {
            Network::Main => {
                let addr: SocketAddr =
                    format!("{}:{}", h.address, h.port)
                        .parse()
                        .map_err(|e| SandboxError::RunCommand {
                            command: "parse address".into(),
                            message: format!("{e}"),
                        })?;
                TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                    .and_then(|mut s| {
                        let mut b = [0u8; 4];
                        s.set_read_timeout(Some(Duration::from_secs(2)))?;
                        s.read_exact(&mut b)?;
                        Ok(&b == b"SSH-")
                    })
                    .unwrap_or(false)
            }
            Network::Internal => Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &h.netns,
                    "grep",
                    "-q",
                    ":0016 00000000:0000 0A",
                    "/proc/net/tcp",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false),
        };
        if ok {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(SandboxError::StartSshd(h.name.clone()));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// One host of a sandbox, with out-of-band access and fault helpers.
#[derive(Clone)]
pub struct Host<'a> {
    sandbox: &'a Sandbox,
    /// What `state.json` records about it.
    pub info: HostInfo,
}

impl fmt::Debug for Host<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("name", &self.info.name)
            .field("address", &self.info.address)
            .finish()
    }
}

impl Host<'_> {
    /// The host's address.
    pub fn address(&self) -> &str {
        &self.info.address
    }

    /// The current host key fingerprint (`SHA256:...`).
    pub fn fingerprint(&self) -> &str {
        &self.info.host_key_fingerprint
    }

    fn init_pid(&self) -> Result<String> {
        Ok(read_file(&self.info.dir.join("init.pid"))?.trim().to_owned())
    }

    /// Run `script` with `sh -c` *inside* the host (its namespaces and root), out of band (not over SSH).
    /// Returns the raw output; a non-zero exit is not an error.
    pub fn run_inside(&self, script: &str) -> Result<Output> {
        let pid = self.init_pid()?;
        Command::new("nsenter")
            .args(["-t", &pid, "-m", "-u", "-n", "-p", "-r", "-w"])
            .args(["sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| SandboxError::RunCommand {
                command: format!("nsenter {}", self.info.name),
                message: e.to_string(),
            })
    }

    /// Like [`Host::run_inside`], returning stdout as text and failing on a non-zero exit.
    pub fn sh_inside(&self, script: &str) -> Result<String> {
        let out = self.run_inside(script)?;
        if !out.status.success() {
            return Err(SandboxError::RunCommand {
                command: format!("inside {}: {script}", self.info.name),
                message: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Path on the machine of the host's overlay upper dir (only what the host wrote or we prepared).
    pub fn upper_dir(&self) -> PathBuf {
        self.info.dir.join("upper")
    }

    /// Lines of the systemctl shim's call log.
    pub fn systemctl_calls(&self) -> Result<Vec<String>> {
        let out = self.run_inside(&format!("cat {SYSTEMCTL_LOG} 2>/dev/null"))?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect())
    }

    /// Bring the host's network interface down (the host becomes unreachable; connections stall).
    pub fn link_down(&self) -> Result<()> {
        run(Command::new("ip").args(["-n", &self.info.netns, "link", "set", "eth0", "down"]))?;
        Ok(())
    }

    /// Bring the host's network interface back up.
    pub fn link_up(&self) -> Result<()> {
        run(Command::new("ip").args(["-n", &self.info.netns, "link", "set", "eth0", "up"]))?;
        Ok(())
    }

    /// Kill every sshd process of the host (listener and all sessions): connections drop, nothing listens.
    pub fn kill_sshd(&self) -> Result<()> {
        self.sh_inside(
            "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = sshd ] && kill -9 ${p#/proc/} 2>/dev/null; done; \
             i=0; while [ $i -lt 50 ]; do alive=0; for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = sshd ] && alive=1; done; \
             [ $alive = 0 ] && break; sleep 0.1; i=$((i+1)); done; true",
        )?;
        Ok(())
    }

    /// Start sshd again (after [`Host::kill_sshd`]) and wait until it listens.
    pub fn start_sshd(&self) -> Result<()> {
        // Signal the init (PID 1 inside) to start sshd.
        run(Command::new("kill").args(["-USR1", &self.init_pid()?]))?;
        wait_listening(&self.info)
    }

    /// Kill every sshd process and start a new one.
    pub fn restart_sshd(&self) -> Result<()> {
        self.kill_sshd()?;
        self.start_sshd()
    }

    /// Replace the host key with a freshly generated one and restart sshd; returns the new fingerprint and
    /// records it in the sandbox state (and `state.json`).
    pub fn rotate_host_key(&mut self) -> Result<String> {
        let fp = self.sh_inside(&format!(
            "rm -f {HOST_KEY} {HOST_KEY}.pub && ssh-keygen -q -t ed25519 -N '' -C capkk-sandbox -f {HOST_KEY} && \
             ssh-keygen -lf {HOST_KEY}.pub | cut -d' ' -f2"
        ))?;
        let fp = fp.trim().to_owned();
        self.restart_sshd()?;
        self.info.host_key_fingerprint = fp.clone();
        let mut state = self.sandbox.state.clone();
        if let Some(h) = state.hosts.iter_mut().find(|h| h.name == self.info.name) {
            h.host_key_fingerprint = fp.clone();
        }
        save_state(&state)?;
        Ok(fp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_just_claimed_is_never_taken_over_as_stale_by_the_next_claim() {
        // Every slot but one is held by a live owner (its state dir exists); the free one has no bridge here.
        let root = std::env::temp_dir().join(format!("capkk-slots-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let free = (0..=255u8)
            .find(|i| !Path::new(&format!("/sys/class/net/kkbr{i}")).exists())
            .expect("a slot without a bridge");
        fs::create_dir_all(root.join(".slots")).unwrap();
        for i in (0..=255u8).filter(|i| *i != free) {
            let owner = format!("live-{i}");
            fs::create_dir_all(root.join(&owner)).unwrap();
            fs::write(root.join(".slots").join(i.to_string()), &owner).unwrap();
        }
        assert_eq!(claim_slot_in(&root, "first").unwrap(), free);
        // "first" has not built anything yet (its caller makes the bridge and the rest after the claim): its
        // slot is still its own, so there is none left for "second".
        let second = claim_slot_in(&root, "second");
        let _ = fs::remove_dir_all(&root);
        assert!(
            matches!(second, Err(SandboxError::ClaimSlot(_))),
            "the second claim got {second:?}: the first one's slot {free} was taken over"
        );
    }

    #[test]
    fn teardown_script_names_only_this_sandbox() {
        let s = teardown_script(
            "demo",
            7,
            Path::new("/tmp/capkk-sandbox/demo"),
            &["kk7h1".into()],
            &["kkv7x0".into()],
        );
        assert!(s.contains("ip link del kkv7x0"));
        assert!(s.contains("ip netns del kk7h1"));
        assert!(s.contains("ip link del kkbr7"));
        assert!(s.contains("capkk-sandbox/demo/"));
        assert!(s.contains("rm -f /tmp/capkk-sandbox/.slots/7"));
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_name("e2e-1").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("Bad/Name").is_err());
        assert!(validate_name(&"x".repeat(33)).is_err());
    }

    #[test]
    fn credentials_debug_redacts_the_password() {
        let c = Credentials {
            password: "canary-secret".into(),
            ed25519_key: "/k".into(),
            rsa_key: "/k".into(),
            ecdsa_key: "/k".into(),
            ed25519_key_with_passphrase: "/k".into(),
            unauthorized_key: "/k".into(),
        };
        assert!(!format!("{c:?}").contains("canary-secret"));
    }
}
