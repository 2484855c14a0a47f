//! The campaign's environment: the management plane (kubectl on its admin kubeconfig, its kube-apiserver
//! process), the manager process of the run, and the test hosts (node containers or sandbox hosts), each found
//! from what the run's setup left (`test/vm/real.sh` or `test/e2e/e2e.sh` with their `keep` modes).

use std::{
    fs,
    io::Write,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use capkk_sandbox::Sandbox;
use capkk_vm::Fleet;
use serde_json::Value;

use crate::invariants::{HostId, shell_quote};

/// `kubectl` against the management plane. Every request carries a timeout: the campaign freezes the API
/// server, and a read must then fail, not hang.
#[derive(Clone, Debug)]
pub struct Kube {
    /// The admin kubeconfig of the plane.
    pub kubeconfig: PathBuf,
    /// The namespace of the campaign's cluster.
    pub namespace: String,
}

impl Kube {
    /// Run kubectl with `args` (a non-zero exit is data).
    pub fn run(&self, args: &[&str]) -> Result<Output> {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--request-timeout=10s")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running kubectl (is the plane's bin dir on PATH? `eval \"$(test/mgmt/scripts/mgmt.sh env)\"`)")
    }

    /// Run kubectl; its stdout, or an error naming its stderr.
    pub fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.run(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl get RESOURCES -n NS -o json` (`all_namespaces`: `-A`), parsed.
    pub fn list(&self, resources: &str, all_namespaces: bool, extra: &[&str]) -> Result<Value> {
        let mut args = vec!["get", resources, "-o", "json"];
        if all_namespaces {
            args.push("-A");
        } else {
            args.extend(["-n", self.namespace.as_str()]);
        }
        args.extend(extra);
        let text = self.ok(&args)?;
        serde_json::from_str(&text).context("kubectl's JSON")
    }
}

/// How to start the manager again: what its process ran with.
#[derive(Clone, Debug)]
struct Launch {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
}

/// A manager process of the run: the setup's (its pid file and log `$WORK/manager.pid`, `manager.log`), or a
/// second replica the campaign started beside it ([`Manager::replica`]).
pub struct Manager {
    pid_file: PathBuf,
    /// Its log (appended to by every start).
    pub log: PathBuf,
    launch: Launch,
    children: Vec<Child>,
}

fn nul_split(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

impl Manager {
    /// The manager the setup started, from its pid file; remembers how it was started.
    pub fn attach(work: &Path) -> Result<Manager> {
        let pid_file = work.join("manager.pid");
        let log = work.join("manager.log");
        let pid = read_pid(&pid_file)?;
        if comm(pid).as_deref() != Some("manager") {
            bail!(
                "{}: pid {pid} is not a running manager (did the setup keep its manager running?)",
                pid_file.display()
            );
        }
        let argv = nul_split(&fs::read(format!("/proc/{pid}/cmdline"))?);
        let env = nul_split(&fs::read(format!("/proc/{pid}/environ"))?)
            .into_iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect();
        let cwd = fs::read_link(format!("/proc/{pid}/cwd"))?;
        Ok(Manager {
            pid_file,
            log,
            launch: Launch { argv, env, cwd },
            children: Vec::new(),
        })
    }

    /// A second replica of this manager, not started yet: the same command line and environment (its leader
    /// election among them) with an identity, health and metrics ports, artifact cache, pid file and log of its
    /// own (`$WORK/manager-SUFFIX.pid`, `.log`), as a second Pod of the Deployment would have.
    pub fn replica(&self, work: &Path, suffix: &str) -> Result<Manager> {
        let mut launch = self.launch.clone();
        let port = free_port_pair()?;
        for (flag, value) in [
            ("--health-probe-bind-address", format!("127.0.0.1:{port}")),
            ("--metrics-bind-address", format!("127.0.0.1:{}", port + 1)),
            (
                "--artifact-cache-dir",
                work.join(format!("artifacts-{suffix}")).display().to_string(),
            ),
        ] {
            set_flag(&mut launch.argv, flag, &value);
        }
        let identity = format!("{}-{suffix}", self.identity());
        launch
            .env
            .retain(|(k, _)| k != "POD_NAME" && k != "CAPKK_ARTIFACT_CACHE_DIR");
        launch.env.push(("POD_NAME".into(), identity.clone()));
        set_flag(&mut launch.argv, "--identity", &identity);
        Ok(Manager {
            pid_file: work.join(format!("manager-{suffix}.pid")),
            log: work.join(format!("manager-{suffix}.log")),
            launch,
            children: Vec::new(),
        })
    }

    /// Its identity in the leader Lease (`--identity`, else `$POD_NAME`, as the manager reads it).
    pub fn identity(&self) -> String {
        flag_value(&self.launch.argv, "--identity")
            .or_else(|| self.env("POD_NAME"))
            .unwrap_or_default()
    }

    /// The leader Lease it competes for: (namespace, name), from its command line and environment.
    pub fn lease(&self) -> Option<(String, String)> {
        let name = flag_value(&self.launch.argv, "--leader-election-id")?;
        let ns = flag_value(&self.launch.argv, "--leader-election-namespace")
            .or_else(|| self.env("POD_NAMESPACE"))?;
        Some((ns, name))
    }

    fn env(&self, key: &str) -> Option<String> {
        self.launch
            .env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    /// Its pid while it runs.
    pub fn pid(&mut self) -> Option<u32> {
        self.reap();
        let pid = read_pid(&self.pid_file).ok()?;
        (comm(pid).as_deref() == Some("manager") && !zombie(pid)).then_some(pid)
    }

    /// SIGKILL it and wait until it is gone.
    pub fn kill(&mut self) -> Result<()> {
        let Some(pid) = self.pid() else {
            bail!("no manager running to kill")
        };
        signal("KILL", pid)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid) {
            if Instant::now() > deadline {
                bail!("manager pid {pid} still alive 20 s after SIGKILL");
            }
            thread::sleep(Duration::from_millis(100));
        }
        self.reap();
        Ok(())
    }

    /// Start it again exactly as it ran (command line, environment, directory), appending to its log.
    pub fn start(&mut self) -> Result<u32> {
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        writeln!(log, "---- capkk-chaos: manager started again ----")?;
        let child = Command::new(&self.launch.argv[0])
            .args(&self.launch.argv[1..])
            .env_clear()
            .envs(self.launch.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.launch.cwd)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // A process group of its own, as the setup's `setsid` gave the first one: the teardown's signals
            // to the campaign do not reach it, and it outlives the campaign like the first one would.
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", self.launch.argv[0]))?;
        let pid = child.id();
        fs::write(&self.pid_file, format!("{pid}\n"))?;
        self.children.push(child);
        Ok(pid)
    }

    fn reap(&mut self) {
        self.children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
    }
}

/// The value of `flag` on a command line (`--flag value` or `--flag=value`).
fn flag_value(argv: &[String], flag: &str) -> Option<String> {
    let eq = format!("{flag}=");
    argv.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            argv.get(i + 1).cloned()
        } else {
            a.strip_prefix(&eq).map(str::to_owned)
        }
    })
}

/// Set `flag` to `value` on a command line: in place where it is given, else appended.
fn set_flag(argv: &mut Vec<String>, flag: &str, value: &str) {
    let eq = format!("{flag}=");
    for i in 0..argv.len() {
        if argv[i] == flag && i + 1 < argv.len() {
            argv[i + 1] = value.to_owned();
            return;
        }
        if argv[i].starts_with(&eq) {
            argv[i] = format!("{eq}{value}");
            return;
        }
    }
    argv.push(flag.to_owned());
    argv.push(value.to_owned());
}

/// A port P with P and P+1 free on loopback, from 10000-19999 (as test/lib/provider.sh picks the first
/// manager's: below the ephemeral ports and the management planes' ports).
fn free_port_pair() -> Result<u16> {
    let mut rng = crate::rng::Rng::new(u64::from(std::process::id()) ^ now_nanos());
    for _ in 0..100 {
        let port = 10000 + (rng.next_u64() % 9999) as u16;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 1) {
            return Ok(port);
        }
    }
    bail!("no two free adjacent ports in 10000-19999")
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn read_pid(path: &Path) -> Result<u32> {
    fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .parse()
        .with_context(|| format!("{}: not a pid", path.display()))
}

fn comm(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_owned())
}

fn zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| s.lines().any(|l| l.starts_with("State:") && l.contains("zombie")))
        .unwrap_or(true)
}

/// Send `sig` (`KILL`, `STOP`, `CONT`) to `pid`.
pub fn signal(sig: &str, pid: u32) -> Result<()> {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()?;
    if !st.success() {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

/// The plane's kube-apiserver process (`$CAPKK_MGMT_DIR/run/kube-apiserver.pid`, checked to be the one of
/// that plane).
pub fn apiserver_pid(mgmt_dir: &Path) -> Result<u32> {
    let pid = read_pid(&mgmt_dir.join("run/kube-apiserver.pid"))?;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).contains(&*mgmt_dir.to_string_lossy()) {
        bail!(
            "pid {pid} is not the kube-apiserver of the plane in {}",
            mgmt_dir.display()
        );
    }
    Ok(pid)
}

/// A frozen kube-apiserver, continued when dropped (also when the campaign fails half-way: a plane left frozen
/// would stop every other test on it).
pub struct Frozen(pub u32);

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = signal("CONT", self.0);
    }
}

/// The disk-full fault's host script.
const DISK_FULL_SH: &str = include_str!("disk-full.sh");

/// The test hosts of the run.
pub enum Hosts {
    /// Node containers (or VMs) of `capkk-vm`.
    Fleet(Fleet),
    /// Sandbox hosts of `capkk-sandbox` (network namespaces with sshd and the kubeadm simulator).
    Sandbox(Sandbox),
}

impl Hosts {
    /// Attach to the fleet or sandbox named `name`.
    pub fn attach(source: &str, name: &str) -> Result<Hosts> {
        Ok(match source {
            "containers" => {
                let f = Fleet::attach(name)?;
                if f.state().source != capkk_vm::Source::Containers {
                    bail!("fleet {name} is not made of node containers");
                }
                Hosts::Fleet(f)
            }
            "sandbox" => Hosts::Sandbox(Sandbox::attach(name)?),
            other => bail!("--source {other}: containers or sandbox"),
        })
    }

    /// Its source's name.
    pub fn source(&self) -> &'static str {
        match self {
            Hosts::Fleet(_) => "containers",
            Hosts::Sandbox(_) => "sandbox",
        }
    }

    /// Every host.
    pub fn ids(&self) -> Vec<HostId> {
        match self {
            Hosts::Fleet(f) => f
                .vms()
                .iter()
                .map(|v| HostId {
                    name: v.name.clone(),
                    address: v.address.clone(),
                    fingerprint: v.host_key_fingerprint.clone(),
                })
                .collect(),
            Hosts::Sandbox(s) => s
                .state()
                .hosts
                .iter()
                .map(|h| HostId {
                    name: h.name.clone(),
                    address: h.address.clone(),
                    fingerprint: h.host_key_fingerprint.clone(),
                })
                .collect(),
        }
    }

    /// Run `script` inside host `i` out of band (not through its sshd). A non-zero exit is data.
    pub fn inside(&self, i: usize, script: &str) -> Result<Output> {
        Ok(match self {
            Hosts::Fleet(f) => f.inside(i, script)?,
            Hosts::Sandbox(s) => s.hosts()[i].run_inside(script)?,
        })
    }

    /// A command that runs `program` in host `i`'s network namespace with the machine's tools.
    fn in_netns(&self, i: usize, program: &str) -> Command {
        match self {
            Hosts::Fleet(f) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &f.vms()[i].pid.to_string(), "-n", program]);
                c
            }
            Hosts::Sandbox(s) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &s.state().hosts[i].netns, program]);
                c
            }
        }
    }

    fn ssh_port(&self, i: usize) -> u16 {
        match self {
            Hosts::Fleet(_) => 22,
            Hosts::Sandbox(s) => s.state().hosts[i].port,
        }
    }

    /// Drop (`insert`) or stop dropping (`!insert`) TCP packets to host `i`'s sshd, in its network namespace:
    /// the machine's `iptables`, a rule marked as the campaign's.
    pub fn ssh_cut(&self, i: usize, insert: bool) -> Result<()> {
        let port = self.ssh_port(i).to_string();
        let out = self
            .in_netns(i, "iptables")
            .args([
                "-w",
                if insert { "-I" } else { "-D" },
                "INPUT",
                "-p",
                "tcp",
                "--dport",
                &port,
            ])
            .args(["-m", "comment", "--comment", "capkk-chaos", "-j", "DROP"])
            .output()?;
        if !out.status.success() {
            bail!(
                "iptables in host {}'s network namespace: {}",
                i + 1,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Stop (`!start`) or start host `i`'s sshd: the sandbox's kill/start, the node's systemd unit.
    pub fn sshd(&self, i: usize, start: bool) -> Result<()> {
        match self {
            Hosts::Sandbox(s) => {
                let h = &s.hosts()[i];
                if start { h.start_sshd()? } else { h.kill_sshd()? }
            }
            Hosts::Fleet(f) => {
                let verb = if start { "start" } else { "stop" };
                let out = f.inside(i, &format!("systemctl {} ssh.service", shell_quote(verb)))?;
                if !out.status.success() {
                    bail!(
                        "systemctl {verb} ssh in {}: {}",
                        f.vms()[i].name,
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
        }
        Ok(())
    }

    /// Fill (`fill`) or free host `i`'s artifact staging directory (`src/disk-full.sh`); node containers
    /// only (a sandbox host's directories are the machine's).
    pub fn disk_full(&self, i: usize, fill: bool) -> Result<()> {
        let Hosts::Fleet(f) = self else {
            bail!("sandbox hosts share the machine's file system: no disk of their own to fill")
        };
        let mode = if fill { "fill" } else { "free" };
        let script = format!(
            "MODE={mode}\nDIR={}\n{DISK_FULL_SH}",
            shell_quote(capkk_service::binary::catalogue::STAGING_DIR),
        );
        let out = f.inside(i, &script)?;
        if !out.status.success() {
            bail!(
                "disk-full {mode} in {}: {}",
                f.vms()[i].name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Restart node container `i` (a power cycle) and wait for its SSH; None where hosts cannot restart.
    pub fn restart(&mut self, i: usize) -> Result<()> {
        match self {
            Hosts::Fleet(f) => Ok(f.restart(i)?),
            Hosts::Sandbox(_) => bail!("sandbox hosts cannot be restarted"),
        }
    }
}

/// Whether this kernel's traffic control has netem (latency and loss): tried in a network namespace of its
/// own, so nothing of the machine's is touched. The error text when not.
pub fn netem_unavailable() -> Option<String> {
    let out = Command::new("unshare")
        .args([
            "-n", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "tc netem refused in a scratch namespace ({}); kernel {}",
            String::from_utf8_lossy(&o.stderr).trim(),
            fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
        )),
        Err(e) => Some(format!("cannot run unshare/tc: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn a_replica_gets_its_own_ports_and_identity_on_the_same_command_line() {
        let mut a = argv(
            "manager --leader-elect --leader-election-id capkk-x --metrics-bind-address=127.0.0.1:9 --health-probe-bind-address 127.0.0.1:8",
        );
        assert_eq!(flag_value(&a, "--leader-election-id").as_deref(), Some("capkk-x"));
        assert_eq!(
            flag_value(&a, "--metrics-bind-address").as_deref(),
            Some("127.0.0.1:9")
        );
        set_flag(&mut a, "--metrics-bind-address", "127.0.0.1:11");
        set_flag(&mut a, "--health-probe-bind-address", "127.0.0.1:10");
        set_flag(&mut a, "--identity", "m-b");
        assert_eq!(
            a,
            argv(
                "manager --leader-elect --leader-election-id capkk-x --metrics-bind-address=127.0.0.1:11 --health-probe-bind-address 127.0.0.1:10 --identity m-b"
            )
        );
        let port = free_port_pair().expect("two free ports");
        assert!((10000..20000).contains(&port));
    }

    /// The fault's host script for `mode` on `dir`, its own state at `state` (a scratch path, not the machine's
    /// /run).
    fn disk_full_script(dir: &Path, state: &Path, mode: &str) -> String {
        shell_quote(&format!(
            "MODE={mode}\nDIR={}\nSTATE={}\n{DISK_FULL_SH}",
            shell_quote(&dir.display().to_string()),
            shell_quote(&state.display().to_string())
        ))
    }

    /// `script` in a mount namespace of its own (the fault's mounts go with it): stdout, stderr.
    fn in_mount_ns(script: &str) -> (String, String) {
        let out = Command::new("unshare")
            .args(["-m", "sh", "-c", &format!("mount --make-rprivate / && {script}")])
            .output()
            .expect("unshare runs (root)");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn the_disk_full_script_fails_new_writes_keeps_what_was_staged_and_its_free_removes_what_it_made() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let dir = scratch.path().join("capkk/staging");
        let state = scratch.path().join("state");
        let d = shell_quote(&dir.display().to_string());
        let fill = disk_full_script(&dir, &state, "fill");
        let free = disk_full_script(&dir, &state, "free");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("staged"), "whole").unwrap();
        // A download under way when the disk fills (its file open before) goes on; a new file cannot be
        // written; what was staged before stays readable.
        let (text, err) = in_mount_ns(&format!(
            "exec 3>>{d}/open-before; sh -c {fill} && df -k {d} | tail -n 1 && \
             if echo data > {d}/new; then echo WROTE-NEW; fi; \
             if echo more >&3; then echo FD-WROTE; fi; cat {d}/open-before; cat {d}/staged; echo; \
             sh -c {fill} || echo REFUSED; sh -c {free}; echo END"
        ));
        assert!(text.contains("full: "), "{text}\n{err}");
        assert!(
            text.lines().any(|l| l.split_whitespace().nth(3) == Some("0")),
            "0 KiB available: {text}"
        );
        assert!(
            !text.contains("WROTE-NEW"),
            "a new file was written on the full disk: {text}\n{err}"
        );
        assert!(
            text.contains("FD-WROTE\nmore\nwhole"),
            "the open file grew, the staged one readable: {text}\n{err}"
        );
        assert!(
            text.contains("REFUSED") && err.contains("is full already"),
            "{text}\n{err}"
        );
        assert!(text.contains("END"), "{text}\n{err}");
        assert_eq!(fs::read_to_string(dir.join("staged")).unwrap(), "whole");
        assert_eq!(fs::read_to_string(dir.join("open-before")).unwrap(), "more\n");
        assert!(
            !dir.join("new").exists() && !state.exists(),
            "nothing of the fault left"
        );
        // On a host without the directories, the ones fill created go again.
        fs::remove_dir_all(scratch.path().join("capkk")).unwrap();
        let (text, err) = in_mount_ns(&format!("sh -c {fill} && sh -c {free} && echo END"));
        assert!(text.contains("END"), "{text}\n{err}");
        assert!(
            !scratch.path().join("capkk").exists(),
            "left behind: {}",
            dir.display()
        );
        assert!(!state.exists(), "left behind: {}", state.display());
    }
}
