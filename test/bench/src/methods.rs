//! The five ways of doing the same work, each run in its own driver process (`capkk-bench drive`).

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::{
    hosts::{HostSpec, run_with_stdin, write},
    measure::{self, Usage},
    ours,
    workload::{Op, Workload, digest},
};

/// A way of running the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// capkk-rs: the project's executor (russh pool) and provisioning code path, in-process.
    Ours,
    /// KubeKey CAPKK v3.1.12's own SSH client, services and cloud-init path (the Go driver in
    /// test/bench/capkk-v3), run as a child of the driver process.
    #[value(name = "capkk-v3")]
    #[serde(rename = "capkk-v3")]
    CapkkV3,
    /// ansible-core with pipelining and ControlPersist, running a playbook generated from the same plan.
    Ansible,
    /// OpenSSH with ControlMaster/ControlPersist, one `ssh` per step.
    Openssh,
    /// The same commands run inside each host with `nsenter`, no SSH: the floor.
    Local,
}

impl Method {
    /// Name in the table.
    pub fn display(self) -> &'static str {
        match self {
            Method::Ours => "capkk-rs",
            Method::CapkkV3 => "capkk-v3",
            Method::Ansible => "ansible-core",
            Method::Openssh => "openssh-cm",
            Method::Local => "local (floor)",
        }
    }
}

/// Everything a driver process needs (written as JSON by the orchestrator).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriveSpec {
    /// Method to run.
    pub method: Method,
    /// Hosts, in order.
    pub hosts: Vec<HostSpec>,
    /// Client private key (root login on every host).
    pub key: PathBuf,
    /// known_hosts with every host's key (OpenSSH, ansible).
    pub known_hosts: PathBuf,
    /// Scratch dir of this N (ansible files, control sockets).
    pub work_dir: PathBuf,
    /// Workload JSON.
    pub workload: PathBuf,
    /// `ansible-playbook` to run.
    pub ansible_playbook: PathBuf,
    /// Bootstrap data (cloud-config) capkk-rs provisions.
    pub fixture: PathBuf,
    /// The environment sshd gives root's commands (the local floor runs with exactly this).
    pub login_env: Vec<(String, String)>,
    /// The capkk-v3 driver binary (test/bench/capkk-v3/build.sh).
    #[serde(default)]
    pub v3_driver: PathBuf,
    /// Where capkk-rs's binary and container-manager services get their artifacts.
    #[serde(default)]
    pub components: ours::Components,
}

/// What one driver run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriveResult {
    /// Method.
    pub method: Method,
    /// Wall seconds of the work (all hosts done).
    pub wall_s: f64,
    /// Controller-side CPU and max single-process RSS, including reaped descendants.
    pub usage: Usage,
    /// Descendants reaped after the work (e.g. ssh ControlPersist masters).
    pub reaped: usize,
    /// For `ours`: digest of the ops actually sent, per host (must equal the workload's).
    pub digests: BTreeMap<String, String>,
    /// Wall seconds of each step, mean over hosts (not for ansible).
    pub step_s: Vec<f64>,
    /// Labels of the steps, when the method defines its own (capkk-v3).
    #[serde(default)]
    pub step_labels: Vec<String>,
    /// Phases run again after a failure, summed over hosts (capkk-v3: a requeued reconcile).
    #[serde(default)]
    pub retries: usize,
}

/// Run one method once in this process (the `drive` subcommand).
pub fn drive(spec: &DriveSpec) -> anyhow::Result<DriveResult> {
    measure::become_subreaper()?;
    let text =
        std::fs::read(&spec.workload).with_context(|| format!("reading {}", spec.workload.display()))?;
    let w: Workload = serde_json::from_slice(&text).context("parsing the workload")?;
    // A fresh controller-side directory per run: capkk-rs and CAPKK download into it (cold cache).
    for dir in [v3_run_dir(spec), ours_cache_dir(spec)] {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if spec.method == Method::CapkkV3 {
        let dir = v3_run_dir(spec);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let start = Instant::now();
    let (mut step_labels, mut retries) = (Vec::new(), 0);
    let (digests, step_s) = match spec.method {
        Method::Ours => run_ours(spec)?,
        Method::CapkkV3 => {
            let (labels, r, steps) = run_v3(spec)?;
            (step_labels, retries) = (labels, r);
            (BTreeMap::new(), steps)
        }
        Method::Ansible => (run_ansible(spec)?, Vec::new()),
        Method::Openssh => (BTreeMap::new(), run_per_host(spec, &w, openssh_step)?),
        Method::Local => (BTreeMap::new(), run_per_host(spec, &w, local_step)?),
    };
    let wall_s = start.elapsed().as_secs_f64();
    let reaped = measure::reap_all(Duration::from_secs(3));
    Ok(DriveResult {
        method: spec.method,
        wall_s,
        usage: measure::usage(),
        reaped,
        digests,
        step_s,
        step_labels,
        retries,
    })
}

fn v3_run_dir(spec: &DriveSpec) -> PathBuf {
    spec.work_dir.join("capkk-v3").join("run")
}

fn v3_job_path(spec: &DriveSpec) -> PathBuf {
    spec.work_dir.join("capkk-v3").join("job.json")
}

/// The capkk-v3 driver's job (test/bench/capkk-v3/main.go, `Job`).
#[derive(Serialize)]
struct V3Job<'a> {
    user: &'a str,
    key: &'a Path,
    port: u16,
    work_dir: PathBuf,
    hosts: Vec<V3Host<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    services: Option<&'a V3Services>,
    retries: usize,
}

/// CAPKK's binary and containerd services' inputs (test/bench/capkk-v3/main.go, `Services`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct V3Services {
    /// `spec.component.host`.
    pub mirror: String,
    /// `Machine.spec.version`.
    pub kubernetes_version: String,
    /// KKInstance `spec.arch`.
    pub arch: String,
    /// KKInstance `spec.containerManager.version`.
    pub containerd_version: String,
    /// KKInstance `spec.containerManager.crictlVersion`.
    pub crictl_version: String,
    /// KKInstance `spec.containerManager.criSocket`.
    pub cri_socket: String,
    /// `spec.component.overrides`.
    pub overrides: Vec<V3Override>,
}

/// One `spec.component.overrides[]` entry.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct V3Override {
    /// CAPKK's id (`kubeadm`, `kubecni`, …).
    pub id: String,
    /// Architecture.
    pub arch: String,
    /// Version as CAPKK spells it.
    pub version: String,
    /// `{"value": sha256}`.
    pub checksum: V3Checksum,
}

/// `checksum.value`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct V3Checksum {
    /// Hex SHA-256.
    pub value: String,
}

/// Ask the capkk-v3 driver which URLs CAPKK's services download for `services`: `(CAPKK id, version, url)`.
pub fn v3_urls(
    driver: &Path,
    work_dir: &Path,
    services: &V3Services,
) -> anyhow::Result<Vec<(String, String, String)>> {
    std::fs::create_dir_all(work_dir)?;
    let job = V3Job {
        user: "root",
        key: Path::new("/nonexistent"),
        port: 22,
        work_dir: work_dir.to_path_buf(),
        hosts: Vec::new(),
        services: Some(services),
        retries: 0,
    };
    let path = work_dir.join("urls-job.json");
    write(&path, serde_json::to_string(&job)?.as_bytes())?;
    let out = Command::new(driver)
        .arg("-job")
        .arg(&path)
        .arg("-urls")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", driver.display()))?;
    if !out.status.success() {
        bail!(
            "{} -urls failed ({}): {}",
            driver.display(),
            out.status,
            tail(&out.stderr, 2000)
        );
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                [id, v, url] => Ok(((*id).to_owned(), (*v).to_owned(), (*url).to_owned())),
                _ => bail!("unexpected line from {} -urls: {l:?}", driver.display()),
            }
        })
        .collect()
}

#[derive(Serialize)]
struct V3Host<'a> {
    name: &'a str,
    address: &'a str,
    ops: &'a [Op],
    bootstrap_data: PathBuf,
}

/// What the capkk-v3 driver prints.
#[derive(Deserialize)]
struct V3Result {
    hosts: BTreeMap<String, V3HostResult>,
}

#[derive(Deserialize)]
struct V3HostResult {
    #[serde(default)]
    steps: Vec<V3Step>,
    #[serde(default)]
    retries: usize,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize)]
struct V3Step {
    label: String,
    s: f64,
}

/// Write the capkk-v3 driver's job for these hosts: the ops before provisioning (CAPKK provisions through its
/// own cloud-init path) and each host's bootstrap data with the Jinja variable rendered (CAPKK v3 has no Jinja
/// support; rendered here it writes the same files as the other methods).
pub fn prepare_v3(spec: &DriveSpec, w: &Workload, services: &V3Services) -> anyhow::Result<PathBuf> {
    let dir = spec.work_dir.join("capkk-v3");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data"))?;
    let fixture = std::fs::read_to_string(&spec.fixture)
        .with_context(|| format!("reading {}", spec.fixture.display()))?;
    let mut hosts = Vec::new();
    for h in &spec.hosts {
        let ops = w
            .ops
            .get(&h.name)
            .with_context(|| format!("no ops for {}", h.name))?;
        let data = dir.join("data").join(format!("{}.yaml", h.name));
        let rendered: String = fixture
            .lines()
            .filter(|l| !l.starts_with("## template:"))
            .map(|l| l.replace("{{ ds.meta_data.local_hostname }}", &h.name) + "\n")
            .collect();
        write(&data, rendered.as_bytes())?;
        hosts.push(V3Host {
            name: &h.name,
            address: &h.address,
            ops: &ops[..w.pre_ops.min(ops.len())],
            bootstrap_data: data,
        });
    }
    let job = V3Job {
        user: "root",
        key: &spec.key,
        port: 22,
        work_dir: v3_run_dir(spec),
        hosts,
        services: Some(services),
        retries: 5,
    };
    let path = v3_job_path(spec);
    write(&path, serde_json::to_string(&job)?.as_bytes())?;
    Ok(path)
}

/// Run the capkk-v3 driver on the prepared job; returns step labels, retries and per-step means.
fn run_v3(spec: &DriveSpec) -> anyhow::Result<(Vec<String>, usize, Vec<f64>)> {
    let out = Command::new(&spec.v3_driver)
        .arg("-job")
        .arg(v3_job_path(spec))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", spec.v3_driver.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let res: V3Result = serde_json::from_str(text.trim()).with_context(|| {
        format!(
            "the capkk-v3 driver ({}) printed no result: {}",
            out.status,
            tail(&out.stderr, 2000)
        )
    })?;
    let errors: Vec<&str> = res
        .hosts
        .values()
        .filter(|h| !h.error.is_empty())
        .map(|h| h.error.as_str())
        .collect();
    if !errors.is_empty() || !out.status.success() {
        bail!(
            "capkk-v3: {} host(s) failed ({}):\n  {}",
            errors.len(),
            out.status,
            errors.join("\n  ")
        );
    }
    if res.hosts.len() != spec.hosts.len() {
        bail!(
            "capkk-v3: the driver reported {} hosts, not {}",
            res.hosts.len(),
            spec.hosts.len()
        );
    }
    // A retried phase appears once per attempt: its attempts are summed, so steps line up across hosts.
    let merged = |h: &V3HostResult| {
        let mut v: Vec<(String, f64)> = Vec::new();
        for st in &h.steps {
            match v.iter_mut().find(|(l, _)| *l == st.label) {
                Some((_, s)) => *s += st.s,
                None => v.push((st.label.clone(), st.s)),
            }
        }
        v
    };
    let per_host: Vec<Vec<(String, f64)>> = res.hosts.values().map(merged).collect();
    let labels: Vec<String> = per_host
        .first()
        .map(|v| v.iter().map(|(l, _)| l.clone()).collect())
        .unwrap_or_default();
    let retries = res.hosts.values().map(|h| h.retries).sum();
    let times = per_host
        .iter()
        .map(|v| v.iter().map(|(_, s)| *s).collect())
        .collect();
    Ok((labels, retries, mean_per_step(times)))
}

fn ours_cache_dir(spec: &DriveSpec) -> PathBuf {
    spec.work_dir.join("capkk-rs-cache")
}

fn run_ours(spec: &DriveSpec) -> anyhow::Result<(BTreeMap<String, String>, Vec<f64>)> {
    let data = std::fs::read(&spec.fixture).with_context(|| format!("reading {}", spec.fixture.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let sent = rt.block_on(ours::run_all(
        &spec.hosts,
        &spec.key,
        Arc::new(data),
        &spec.components,
        &ours_cache_dir(spec),
    ))?;
    let digests = sent.iter().map(|(h, s)| (h.clone(), digest(&s.ops))).collect();
    Ok((
        digests,
        mean_per_step(sent.values().map(|s| s.times.clone()).collect()),
    ))
}

/// Per step index, the mean over hosts.
fn mean_per_step(per_host: Vec<Vec<f64>>) -> Vec<f64> {
    let n = per_host.iter().map(Vec::len).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            let v: Vec<f64> = per_host.iter().filter_map(|t| t.get(i).copied()).collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        })
        .collect()
}

type StepFn = fn(&DriveSpec, &HostSpec, &Op) -> Command;

fn run_per_host(spec: &DriveSpec, w: &Workload, step: StepFn) -> anyhow::Result<Vec<f64>> {
    let spec = Arc::new(spec.clone());
    let mut threads = Vec::new();
    for h in spec.hosts.clone() {
        let ops = w
            .ops
            .get(&h.name)
            .cloned()
            .with_context(|| format!("no ops for {}", h.name))?;
        let spec = spec.clone();
        threads.push(std::thread::spawn(move || -> anyhow::Result<Vec<f64>> {
            let mut times = Vec::with_capacity(ops.len());
            for (i, op) in ops.iter().enumerate() {
                let t = Instant::now();
                let (_, stdin) = op.shell()?;
                let out = run_with_stdin(step(&spec, &h, op), stdin.as_deref())
                    .with_context(|| format!("{}: step {} ({})", h.name, i + 1, op.label()))?;
                times.push(t.elapsed().as_secs_f64());
                if !out.status.success() {
                    bail!(
                        "{}: step {} ({}) failed ({}): {}",
                        h.name,
                        i + 1,
                        op.label(),
                        out.status,
                        tail(&out.stderr, 400)
                    );
                }
            }
            if spec.method == Method::Openssh {
                // Close the ControlPersist master now (the reaper would otherwise wait for it).
                let _ = ssh_base(&spec, &h)
                    .args(["-O", "exit"])
                    .arg(format!("root@{}", h.address))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            Ok(times)
        }));
    }
    let mut errors = Vec::new();
    let mut per_host = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Ok(times)) => per_host.push(times),
            Ok(Err(e)) => errors.push(format!("{e:#}")),
            Err(_) => errors.push("a host thread panicked".into()),
        }
    }
    if !errors.is_empty() {
        bail!("{} host(s) failed:\n  {}", errors.len(), errors.join("\n  "));
    }
    Ok(mean_per_step(per_host))
}

fn tail(b: &[u8], max: usize) -> String {
    let s = String::from_utf8_lossy(b);
    let start = s.len().saturating_sub(max);
    let start = (start..s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(s.len());
    s[start..].trim().to_owned()
}

/// Control socket path template (short: unix sockets are limited to 108 bytes).
fn control_path(spec: &DriveSpec) -> String {
    format!("{}/cm-%C", spec.work_dir.display())
}

fn ssh_base(spec: &DriveSpec, _h: &HostSpec) -> Command {
    let mut c = Command::new("ssh");
    c.args([
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
    ])
    .arg("-o")
    .arg(format!("UserKnownHostsFile={}", spec.known_hosts.display()))
    .args(["-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR"])
    .args(["-o", "ControlMaster=auto", "-o", "ControlPersist=60s"])
    .arg("-o")
    .arg(format!("ControlPath={}", control_path(spec)))
    .arg("-i")
    .arg(&spec.key);
    c
}

fn openssh_step(spec: &DriveSpec, h: &HostSpec, op: &Op) -> Command {
    let cmd = op.command_line();
    let mut c = ssh_base(spec, h);
    c.arg(format!("root@{}", h.address)).arg("--").arg(cmd);
    c
}

fn local_step(spec: &DriveSpec, h: &HostSpec, op: &Op) -> Command {
    let cmd = op.command_line();
    let mut c = h.command(&h.shell, &cmd);
    c.env_clear().envs(spec.login_env.iter().map(|(k, v)| (k, v)));
    c
}

fn run_ansible(spec: &DriveSpec) -> anyhow::Result<BTreeMap<String, String>> {
    let dir = spec.work_dir.join("ansible");
    let log = std::fs::File::create(dir.join("last-run.log"))?;
    let status = Command::new(&spec.ansible_playbook)
        .arg("playbook.yml")
        .current_dir(&dir)
        .env("ANSIBLE_CONFIG", dir.join("ansible.cfg"))
        .env("ANSIBLE_NOCOLOR", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .with_context(|| format!("running {}", spec.ansible_playbook.display()))?;
    if !status.success() {
        let text = std::fs::read(dir.join("last-run.log")).unwrap_or_default();
        bail!(
            "ansible-playbook failed ({status}); end of {}/last-run.log:\n{}",
            dir.display(),
            tail(&text, 3000)
        );
    }
    Ok(BTreeMap::new())
}

/// YAML double-quoted scalar (JSON string syntax is valid YAML), marked `!unsafe` so Jinja leaves it alone.
fn unsafe_str(s: &str) -> String {
    format!("!unsafe {}", serde_json::Value::String(s.to_owned()))
}

/// Write ansible.cfg, the inventory, host_vars, files and the playbook for these hosts.
pub fn prepare_ansible(spec: &DriveSpec, w: &Workload) -> anyhow::Result<PathBuf> {
    let dir = spec.work_dir.join("ansible");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("host_vars"))?;
    let first = spec.hosts.first().context("no hosts")?;
    let shapes: Vec<&Vec<Op>> = spec
        .hosts
        .iter()
        .map(|h| {
            w.ops
                .get(&h.name)
                .with_context(|| format!("no ops for {}", h.name))
        })
        .collect::<anyhow::Result<_>>()?;
    let n_ops = shapes[0].len();
    if shapes.iter().any(|o| o.len() != n_ops) {
        bail!("hosts have different step counts; the playbook generator needs one shape");
    }
    let cfg = format!(
        "[defaults]\nforks = {forks}\nhost_key_checking = True\ngathering = explicit\n\
         interpreter_python = /usr/bin/python3\nretry_files_enabled = False\nlocal_tmp = {dir}/tmp\n\
         remote_tmp = /tmp/.ansible-bench\n\n[ssh_connection]\npipelining = True\n\
         ssh_args = -F /dev/null -o ControlMaster=auto -o ControlPersist=60s -o BatchMode=yes -o IdentitiesOnly=yes \
         -o StrictHostKeyChecking=yes -o UserKnownHostsFile={kh}\ncontrol_path_dir = {cp}\n",
        forks = spec.hosts.len(),
        dir = dir.display(),
        kh = spec.known_hosts.display(),
        cp = spec.work_dir.join("acp").display(),
    );
    write(&dir.join("ansible.cfg"), cfg.as_bytes())?;
    let mut inv = String::from("[bench]\n");
    for h in &spec.hosts {
        writeln!(
            inv,
            "{} ansible_host={} ansible_user=root ansible_ssh_private_key_file={}",
            h.name,
            h.address,
            spec.key.display()
        )?;
    }
    write(&dir.join("inventory.ini"), inv.as_bytes())?;
    let mut host_vars: BTreeMap<String, String> = BTreeMap::new();
    let mut pb = format!(
        "# Generated by capkk-bench from the same plan capkk-rs runs ({n_ops} steps).\n\
         - hosts: bench\n  gather_facts: false\n  any_errors_fatal: true\n  tasks:\n"
    );
    // capkk-rs's upload creates parent directories itself; ansible's copy does not, so one task up front
    // creates every parent directory the uploads need (one extra task, noted in docs/benchmarks.md).
    let mut parents: Vec<String> = shapes
        .iter()
        .flat_map(|ops| ops.iter())
        .filter_map(|o| match o {
            Op::Put { path, .. } | Op::PutFile { path, .. } => {
                Path::new(path).parent().map(|p| p.display().to_string())
            }
            Op::Exec { .. } => None,
        })
        .collect();
    parents.sort();
    parents.dedup();
    if !parents.is_empty() {
        let cmd = format!("mkdir -p -- {}", capkk_executor::quote_all(&parents));
        write!(
            pb,
            "    - name: \"step 0: parent directories of the uploads\"\n      ansible.builtin.shell:\n        \
             cmd: {}\n        executable: {}\n",
            unsafe_str(&cmd),
            first.shell
        )?;
    }
    for i in 0..n_ops {
        let ops: Vec<&Op> = shapes.iter().map(|o| &o[i]).collect();
        // A value that differs per host goes to host_vars; otherwise it is inline.
        let mut value = |field: &str, get: &dyn Fn(&Op) -> String| -> String {
            let vals: Vec<String> = ops.iter().map(|o| get(o)).collect();
            if vals.iter().all(|v| *v == vals[0]) {
                unsafe_str(&vals[0])
            } else {
                let var = format!("step{i}_{field}");
                for (h, v) in spec.hosts.iter().zip(&vals) {
                    let _ = writeln!(
                        host_vars.entry(h.name.clone()).or_default(),
                        "{var}: {}",
                        unsafe_str(v)
                    );
                }
                format!("\"{{{{ {var} }}}}\"")
            }
        };
        let task_name = if ops.iter().all(|o| o.label() == ops[0].label()) {
            format!("step {}: {}", i + 1, ops[0].label())
        } else {
            format!(
                "step {}: {} (per host)",
                i + 1,
                ops[0].label().split(' ').next().unwrap_or("op")
            )
        };
        match ops[0] {
            Op::Exec { stdin, .. } => {
                if ops.iter().any(|o| !matches!(o, Op::Exec { .. })) {
                    bail!("step {} differs in kind between hosts", i + 1);
                }
                let cmd = value("cmd", &|o| match o {
                    Op::Exec { command, .. } => command.clone(),
                    Op::Put { .. } | Op::PutFile { .. } => String::new(),
                });
                write!(
                    pb,
                    "    - name: {}\n      ansible.builtin.shell:\n        cmd: {cmd}\n        executable: {}\n",
                    unsafe_str(&task_name),
                    first.shell
                )?;
                if stdin.is_some() {
                    let s = value("stdin", &|o| match o {
                        Op::Exec { stdin: Some(s), .. } => String::from_utf8_lossy(s).into_owned(),
                        _ => String::new(),
                    });
                    write!(pb, "        stdin: {s}\n        stdin_add_newline: false\n")?;
                }
            }
            Op::Put { mode, owner, .. } => {
                for (h, o) in spec.hosts.iter().zip(&ops) {
                    let Op::Put { content, .. } = o else {
                        bail!("step {} differs in kind between hosts", i + 1);
                    };
                    write(&dir.join("files").join(&h.name).join(i.to_string()), content)?;
                }
                let dest = value("dest", &|o| match o {
                    Op::Put { path, .. } => path.clone(),
                    Op::Exec { .. } | Op::PutFile { .. } => String::new(),
                });
                let (user, group) = owner
                    .as_deref()
                    .map(|o| o.split_once(':').unwrap_or((o, o)))
                    .unwrap_or(("root", "root"));
                write!(
                    pb,
                    "    - name: {}\n      ansible.builtin.copy:\n        src: \"files/{{{{ inventory_hostname }}}}/{i}\"\n        \
                     dest: {dest}\n        mode: \"{:04o}\"\n        owner: {}\n        group: {}\n",
                    unsafe_str(&task_name),
                    mode & 0o7777,
                    unsafe_str(user),
                    unsafe_str(group),
                )?;
            }
            Op::PutFile { mode, owner, .. } => {
                // An artifact from capkk-rs's cache: copied from the controller's disk.
                let src = value("src", &|o| match o {
                    Op::PutFile { source, .. } => source.display().to_string(),
                    Op::Exec { .. } | Op::Put { .. } => String::new(),
                });
                let dest = value("dest", &|o| match o {
                    Op::PutFile { path, .. } => path.clone(),
                    Op::Exec { .. } | Op::Put { .. } => String::new(),
                });
                let (user, group) = owner
                    .as_deref()
                    .map(|o| o.split_once(':').unwrap_or((o, o)))
                    .unwrap_or(("root", "root"));
                write!(
                    pb,
                    "    - name: {}\n      ansible.builtin.copy:\n        src: {src}\n        dest: {dest}\n        \
                     mode: \"{:04o}\"\n        owner: {}\n        group: {}\n",
                    unsafe_str(&task_name),
                    mode & 0o7777,
                    unsafe_str(user),
                    unsafe_str(group),
                )?;
            }
        }
    }
    write(&dir.join("playbook.yml"), pb.as_bytes())?;
    for (h, vars) in host_vars {
        write(&dir.join("host_vars").join(format!("{h}.yml")), vars.as_bytes())?;
    }
    // ansible.cfg names the inventory implicitly through this file name.
    let cfg_path = dir.join("ansible.cfg");
    let mut cfg = std::fs::read_to_string(&cfg_path)?;
    cfg = cfg.replacen("[defaults]\n", "[defaults]\ninventory = inventory.ini\n", 1);
    write(&cfg_path, cfg.as_bytes())?;
    Ok(dir)
}

/// Where the driver binary is.
pub fn self_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("locating the capkk-bench binary")
}

/// Check that `p` is an executable file.
pub fn require_exe(p: &Path, hint: &str) -> anyhow::Result<()> {
    if !p.is_file() {
        bail!("{} not found: {hint}", p.display());
    }
    Ok(())
}
