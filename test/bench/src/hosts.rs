//! Out-of-band access to sandbox hosts (never over SSH): preparation, reset between runs, result checks.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use anyhow::{Context as _, bail};
use capkk_executor::quote;
use serde::{Deserialize, Serialize};

use crate::{
    plan::KUBEADM_LOG,
    workload::{Expect, SENTINEL, Workload},
};

/// The project's kernel-tool stand-ins for sandbox hosts.
const FAKE_KERNEL: &[(&str, &str)] = &[
    ("modprobe", include_str!("../../assets/fake-kernel/modprobe")),
    ("sysctl", include_str!("../../assets/fake-kernel/sysctl")),
    ("swapoff", include_str!("../../assets/fake-kernel/swapoff")),
];

/// Files bootstrap edits in place; snapshotted before the runs and restored between them.
pub const EDITED_IN_PLACE: &[&str] = &["/etc/hosts", "/etc/hostname", "/etc/fstab"];

/// A host's files from before the first run.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Path and content (`None`: the file did not exist).
    pub files: Vec<(String, Option<Vec<u8>>)>,
}

/// What a driver needs to know about one host.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostSpec {
    /// Host name.
    pub name: String,
    /// IPv4 address of its sshd.
    pub address: String,
    /// Pinned host key fingerprint (`SHA256:...`).
    pub fingerprint: String,
    /// PID (in the machine's namespace) of the host's init, for `nsenter`.
    pub init_pid: u32,
    /// Root's login shell inside the host (what sshd runs commands with).
    pub shell: String,
}

impl HostSpec {
    /// From a sandbox host.
    pub fn from_sandbox(h: &capkk_sandbox::Host<'_>) -> anyhow::Result<Self> {
        let pid_file = h.info.dir.join("init.pid");
        let init_pid = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("reading {}", pid_file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("{} holds no PID", pid_file.display()))?;
        let mut spec = Self {
            name: h.info.name.clone(),
            address: h.info.address.clone(),
            fingerprint: h.info.host_key_fingerprint.clone(),
            init_pid,
            shell: "/bin/sh".into(),
        };
        let passwd = spec.sh("getent passwd root | cut -d: -f7")?;
        if !passwd.trim().is_empty() {
            spec.shell = passwd.trim().to_owned();
        }
        Ok(spec)
    }

    /// `nsenter` into every namespace and the root of the host, running `shell -c script`.
    pub fn command(&self, shell: &str, script: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.args([
            "-t",
            &self.init_pid.to_string(),
            "-m",
            "-u",
            "-n",
            "-p",
            "-r",
            "-w",
        ])
        .args([shell, "-c", script]);
        c
    }

    /// Run `script` inside with `stdin`; returns the raw output.
    pub fn run(&self, script: &str, stdin: Option<&[u8]>) -> anyhow::Result<Output> {
        run_with_stdin(self.command("/bin/sh", script), stdin)
            .with_context(|| format!("nsenter into {}", self.name))
    }

    /// Run `script` inside, failing on a non-zero exit; returns stdout.
    pub fn sh(&self, script: &str) -> anyhow::Result<String> {
        let out = self.run(script, None)?;
        if !out.status.success() {
            bail!(
                "inside {}: `{script}` failed ({}): {}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The host's public host key line for a known_hosts file.
    pub fn known_hosts_line(&self) -> anyhow::Result<String> {
        let key = self.sh("cat /etc/ssh/capkk_host_ed25519_key.pub")?;
        let mut words = key.split_whitespace();
        let (Some(kind), Some(blob)) = (words.next(), words.next()) else {
            bail!("{}: unexpected host key file {key:?}", self.name);
        };
        Ok(format!("{} {kind} {blob}\n", self.address))
    }

    /// Install the kernel-tool stand-ins (identical for every method) and make root's shell start-up that of a
    /// fresh node: the sandbox's lower layer is the machine's own root, whose `/root/.bashrc` (pyenv init)
    /// costs ~180 ms in every `bash -c` that sshd starts; a node has Debian's default `.bashrc`. kubeadm and
    /// the other binaries come from the artifact mirror through each method's binary service.
    pub fn install_standins(&self) -> anyhow::Result<()> {
        // Kernel tools: the hosts share the machine's kernel, so modprobe/sysctl/swapoff are the project's
        // test stand-ins (test/assets/fake-kernel) and /sys/module is the host's own tmpfs, as in the
        // capkk-service sandbox tests.
        let mut script = String::from(
            "set -e; mkdir -p /usr/local/sbin; mountpoint -q /sys/module || mount -t tmpfs capkk-fake-sysmodule /sys/module\n",
        );
        for (name, text) in FAKE_KERNEL {
            use base64::Engine as _;
            let b64 = base64::engine::general_purpose::STANDARD.encode(text);
            script.push_str(&format!(
                "printf '%s' '{b64}' | base64 -d > /usr/local/sbin/{name}; chmod 755 /usr/local/sbin/{name}\n"
            ));
        }
        script.push_str("cp /etc/skel/.bashrc /root/.bashrc\n");
        self.sh(&script)?;
        Ok(())
    }

    /// Contents of the host's files that bootstrap edits in place (`/etc/hosts`, `/etc/hostname`, `/etc/fstab`)
    /// before any run, restored by [`HostSpec::reset`] so every run does the full work.
    pub fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let mut files = Vec::new();
        for path in EDITED_IN_PLACE {
            let out = self.run(&format!("cat -- {path}"), None)?;
            files.push((path.to_string(), out.status.success().then_some(out.stdout)));
        }
        Ok(Snapshot { files })
    }

    /// Restore the snapshot, then remove everything a run writes; checks the sentinel is gone.
    pub fn reset_to(&self, snap: &Snapshot, w: &Workload) -> anyhow::Result<()> {
        for (path, content) in &snap.files {
            let p = quote(path);
            let out = match content {
                Some(c) => self.run(&format!("cat > {p}"), Some(c))?,
                None => self.run(&format!("rm -f -- {p}"), None)?,
            };
            if !out.status.success() {
                bail!(
                    "{}: restoring {path} failed: {}",
                    self.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        self.reset(w)
    }

    /// Remove everything a run writes, so the next method does the full work; checks the sentinel is gone.
    pub fn reset(&self, w: &Workload) -> anyhow::Result<()> {
        let paths: Vec<String> = w.reset_paths.iter().map(|p| quote(p)).collect();
        self.sh(&format!(
            "rm -rf -- {}; \
             for f in /run/capkk-units/*.pid; do [ -f \"$f\" ] && kill \"$(cat \"$f\")\" 2>/dev/null; rm -f \"$f\"; done; \
             rm -rf /var/lib/capkk-systemctl; test ! -e {SENTINEL} && test ! -e {KUBEADM_LOG}",
            paths.join(" ")
        ))
        .map(|_| ())
    }

    /// Check files (sha256, mode, owner) and exact contents; returns every mismatch.
    pub fn verify(&self, expect: &Expect) -> anyhow::Result<Vec<String>> {
        let mut script = String::new();
        for path in expect.files.keys() {
            let p = quote(path);
            script.push_str(&format!(
                "if [ -f {p} ]; then printf '%s %s\\n' \"$(sha256sum < {p} | cut -c1-64)\" \"$(stat -c '%a %U:%G' {p})\"; \
                 else echo MISSING; fi\n"
            ));
        }
        let out = self.sh(&script)?;
        let mut problems = Vec::new();
        let lines: Vec<&str> = out.lines().collect();
        if lines.len() != expect.files.len() {
            bail!(
                "{}: verification printed {} lines for {} files",
                self.name,
                lines.len(),
                expect.files.len()
            );
        }
        for ((path, (sha, mode, owner)), line) in expect.files.iter().zip(lines) {
            let want = format!("{sha} {mode} {owner}");
            if line != want {
                problems.push(format!("{}:{path}: want {want}, found {line}", self.name));
            }
        }
        for (path, p) in &expect.prefixed {
            let q = quote(path);
            let out = self.sh(&format!(
                "if [ -f {q} ]; then printf '%s %s %s\\n' \"$(head -c {len} {q} | sha256sum | cut -c1-64)\" \
                 \"$(stat -c '%a %U:%G' {q})\" \"$(tail -c +{next} {q} | grep -qF -- {c} && echo found || echo absent)\"; \
                 else echo MISSING; fi",
                len = p.len,
                next = p.len + 1,
                c = quote(&p.contains),
            ))?;
            let want = format!("{} {} {} found", p.sha256, p.mode, p.owner);
            if out.trim() != want {
                problems.push(format!(
                    "{}:{path}: want {want} (first {} bytes, then {:?}), found {}",
                    self.name,
                    p.len,
                    p.contains,
                    out.trim()
                ));
            }
        }
        for (path, content) in &expect.exact {
            let out = self.run(&format!("cat -- {}", quote(path)), None)?;
            let found = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                problems.push(format!("{}:{path}: missing", self.name));
            } else if found != *content {
                problems.push(format!("{}:{path}: want {content:?}, found {found:?}", self.name));
            }
        }
        Ok(problems)
    }
}

/// The environment sshd gives root's commands on `h` (read once over OpenSSH, `SSH_*` dropped), so the local
/// floor runs its commands with the same environment as the SSH methods.
pub fn login_env(h: &HostSpec, key: &Path, known_hosts: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let out = Command::new("ssh")
        .args([
            "-F",
            "/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
        ])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args(["-o", "StrictHostKeyChecking=yes", "-i"])
        .arg(key)
        .arg(format!("root@{}", h.address))
        .arg("env")
        .stdin(Stdio::null())
        .output()
        .context("ssh env")?;
    if !out.status.success() {
        bail!(
            "{}: `ssh env` failed: {}",
            h.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.starts_with("SSH_") && *k != "_" && *k != "SHLVL" && *k != "PWD")
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// Spawn `cmd`, feed `stdin` from a thread (so a chatty command cannot deadlock), collect output.
pub fn run_with_stdin(mut cmd: Command, stdin: Option<&[u8]>) -> std::io::Result<Output> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let writer = match (stdin, child.stdin.take()) {
        (Some(data), Some(mut pipe)) => {
            let data = data.to_vec();
            Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&data);
            }))
        }
        _ => None,
    };
    let out = child.wait_with_output()?;
    if let Some(w) = writer {
        let _ = w.join();
    }
    Ok(out)
}

/// Write a file, creating parents.
pub fn write(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))
}

/// `~/.cache/capkk-rs/bench-venv/bin/ansible-playbook` unless overridden.
pub fn default_ansible() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache/capkk-rs/bench-venv/bin/ansible-playbook")
}
