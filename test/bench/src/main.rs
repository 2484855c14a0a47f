//! `capkk-bench`: the same provisioning workload on N sandbox hosts, side by side, through
//! capkk-rs (russh pool + provisioning path), KubeKey CAPKK v3 (its own SSH client and services, a Go driver),
//! ansible-core (pipelining + ControlPersist), OpenSSH (ControlMaster, one `ssh` per step) and locally with no
//! SSH (the floor). See docs/benchmarks.md.
//!
//! `capkk-bench ssh` orchestrates (sandbox, reset, alternating runs, verification, table);
//! `capkk-bench drive` is one timed run of one method in its own process (so CPU and RSS are measured the
//! same way for every method). `capkk-bench real-vm` runs capkk-rs's and CAPKK v3's host services with the real
//! node artifacts on freshly booted VMs. `capkk-bench node-ready` reads the captures of real-VM cluster runs
//! (`test/vm/real.sh`) into Machine created → Node Ready and our host phases' share of it. `capkk-bench failover`
//! measures what clients see while an HA control plane loses the host holding its VIP (`real.sh ha`).

mod artifacts;
mod controller;
mod failover;
mod hosts;
mod measure;
mod methods;
mod noderdy;
mod ours;
mod plan;
mod provision;
mod realvm;
mod results;
mod workload;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    io::Read as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};

use crate::{
    hosts::{HostSpec, write},
    measure::{PeakSampler, median},
    methods::{DriveResult, DriveSpec, Method},
    workload::{Op, Workload},
};

#[derive(Parser)]
#[command(about = "capkk-rs benchmarks (see docs/benchmarks.md)")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Provisioning over SSH: capkk-rs vs CAPKK v3 vs ansible-core vs OpenSSH ControlMaster vs local floor.
    Ssh(SshArgs),
    /// The manager against the local management plane with many KKMachines: RSS idle/under load, latency.
    Controller(controller::ControllerArgs),
    /// capkk-rs vs CAPKK v3 installing the real node artifacts (binaries, containerd) on a freshly booted VM each.
    RealVm(realvm::RealVmArgs),
    /// Machine created → Node Ready and our phases' share, from captures of real-VM cluster runs (runs nothing).
    NodeReady(noderdy::NodeReadyArgs),
    /// An HA control plane losing the host that holds its VIP: probe (API through the VIP, workload, VIP
    /// holder) and report the failover table's row (test/vm/real.sh mode ha).
    Failover(failover::FailoverArgs),
    /// Internal: one timed run of one method; prints a JSON result on stdout.
    Drive {
        /// The spec file written by `ssh`.
        #[arg(long)]
        spec: PathBuf,
    },
}

#[derive(clap::Args, Clone)]
struct SshArgs {
    /// Host counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,10,30")]
    hosts: Vec<usize>,
    /// Timed runs per method and host count (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Untimed warm-up runs per method and host count (still verified).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Methods to compare.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ours,capkk-v3,ansible,openssh,local"
    )]
    methods: Vec<Method>,
    /// The capkk-v3 driver (`test/bench/capkk-v3/build.sh` builds it and prints its path).
    #[arg(long, env = "CAPKK_BENCH_V3_DRIVER")]
    capkk_v3_driver: Option<PathBuf>,
    /// CABPK bootstrap data (cloud-config) to provision [default: test/fixtures/cabpk/init-control-plane.yaml
    /// (captured from the local management plane), else test/bench/fixtures/cabpk-controlplane-init.yaml].
    #[arg(long)]
    fixture: Option<PathBuf>,
    /// Sandbox name (its own /24).
    #[arg(long, default_value = "bench")]
    sandbox: String,
    /// ansible-playbook from the bench venv.
    #[arg(long, env = "CAPKK_BENCH_ANSIBLE")]
    ansible_playbook: Option<PathBuf>,
    /// Where results (JSON, markdown table, ansible files, logs) go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Scratch dir for control sockets (short path: unix sockets are limited to 108 bytes).
    #[arg(long, default_value = "/tmp/kkbench")]
    scratch: PathBuf,
    /// Abort one run after this many seconds.
    #[arg(long, default_value_t = 1200)]
    run_timeout: u64,
    /// Leave the sandbox up afterwards.
    #[arg(long)]
    keep: bool,
    /// Size of the stand-in release artifacts together, MiB (split like the real releases; the real
    /// kubeadm, kubelet, kubectl, CNI plugins, containerd, runc and crictl are ~320 MiB).
    #[arg(long, default_value_t = 8.0)]
    artifact_mib: f64,
    /// What the other methods replay: `plan` = one op per plan step (service scripts, each file, each
    /// command), `recorded` = exactly the execs/uploads capkk-rs sent (its batched scripts).
    #[arg(long, value_enum, default_value = "plan")]
    workload: Replay,
    /// Record on every host when each command started and ended (root's login shell becomes a wrapper that
    /// logs bash's clock around the host's shell; the local floor runs its steps through the same wrapper)
    /// and report, per method, the hosts' own command time against the time between commands.
    #[arg(long)]
    host_log: bool,
}

/// What the non-capkk methods replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Replay {
    /// One op per plan step.
    Plan,
    /// capkk-rs's own execs and uploads.
    Recorded,
}

/// Real CABPK bootstrap data captured from the local management plane (test/mgmt `make fixtures`).
const CAPTURED_FIXTURE: &str = "test/fixtures/cabpk/init-control-plane.yaml";
/// Hand-made bootstrap data of the same shape (with pre/post kubeadm commands), the fallback.
const HANDMADE_FIXTURE: &str = "test/bench/fixtures/cabpk-controlplane-init.yaml";

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CAPKK_BENCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Cmd::Drive { spec } => {
            let text = std::fs::read(&spec).with_context(|| format!("reading {}", spec.display()))?;
            let spec: DriveSpec = serde_json::from_slice(&text).context("parsing the drive spec")?;
            let result = methods::drive(&spec)?;
            println!("{}", serde_json::to_string(&result)?);
            Ok(())
        }
        Cmd::Ssh(args) => ssh_bench(&args),
        Cmd::RealVm(args) => realvm::run(&args),
        Cmd::NodeReady(args) => noderdy::run(&args),
        Cmd::Failover(args) => failover::run(&args),
        Cmd::Controller(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let report = rt.block_on(controller::run(&args))?;
            write(&args.out.join("controller-table.md"), report.as_bytes())?;
            print!("{report}");
            Ok(())
        }
    }
}

/// One measured run, as kept in the results file.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct RunRecord {
    hosts: usize,
    method: Method,
    run: usize,
    wall_s: f64,
    cpu_s: f64,
    host_cpu_s: f64,
    peak_tree_rss_kib: u64,
    max_process_rss_kib: u64,
    step_s: Vec<f64>,
    #[serde(default)]
    step_labels: Vec<String>,
    #[serde(default)]
    retries: usize,
    /// Artifact downloads from the mirror during the run.
    #[serde(default)]
    downloads: usize,
    /// With `--host-log`: the hosts' command intervals, summed up (mean over hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host_log: Option<HostLog>,
}

/// Where one run's time went on the hosts (`--host-log`), mean over hosts, seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct HostLog {
    /// Commands a host ran (sshd or nsenter starting the login shell).
    commands: f64,
    /// The driver's start → the host's first command started.
    to_first_s: f64,
    /// The union of the host's command intervals: its own work.
    work_s: f64,
    /// First command start → last command end, outside commands: round trips, the controller's own work
    /// (downloads, hashing) and waits.
    between_s: f64,
    /// Last command end → the driver's end.
    after_last_s: f64,
}

impl HostLog {
    /// From each host's `(start, end)` command intervals and the run's start and end (epoch seconds).
    fn of(hosts: &[Vec<(f64, f64)>], start: f64, end: f64) -> Self {
        let mut sum = HostLog::default();
        for sessions in hosts {
            let mut v = sessions.clone();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut union: Vec<(f64, f64)> = Vec::new();
            for (s, e) in v {
                match union.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => union.push((s, e)),
                }
            }
            let (Some(first), Some(last)) = (union.first(), union.last()) else {
                continue;
            };
            let work: f64 = union.iter().map(|(s, e)| e - s).sum();
            sum.commands += sessions.len() as f64;
            sum.to_first_s += first.0 - start;
            sum.work_s += work;
            sum.between_s += (last.1 - first.0) - work;
            sum.after_last_s += end - last.1;
        }
        let n = hosts.len().max(1) as f64;
        HostLog {
            commands: sum.commands / n,
            to_first_s: sum.to_first_s / n,
            work_s: sum.work_s / n,
            between_s: sum.between_s / n,
            after_last_s: sum.after_last_s / n,
        }
    }
}

pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map_or(0, |k| k / 1024 / 1024);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores ({cpu}), {mem} GiB, Linux {}", kernel.trim())
}

fn ssh_bench(a: &SshArgs) -> anyhow::Result<()> {
    if let Some(reason) = capkk_sandbox::unsupported_reason() {
        bail!("the benchmark needs sandbox hosts: {reason}");
    }
    if a.runs == 0 || a.hosts.is_empty() || a.methods.is_empty() {
        bail!("--runs, --hosts and --methods must not be empty");
    }
    if !a.methods.contains(&Method::Ours) {
        bail!("--methods must include ours (ratios are relative to it)");
    }
    let ansible = a.ansible_playbook.clone().unwrap_or_else(hosts::default_ansible);
    if a.methods.contains(&Method::Ansible) {
        methods::require_exe(
            &ansible,
            "run `make bench-venv` (ansible-core from PyPI into a venv)",
        )?;
    }
    let v3_driver = a.capkk_v3_driver.clone().unwrap_or_default();
    if a.methods.contains(&Method::CapkkV3) {
        methods::require_exe(
            &v3_driver,
            "set CAPKK_BENCH_V3_DRIVER or --capkk-v3-driver to the path `test/bench/capkk-v3/build.sh` prints \
             (`make bench-ssh` does), or leave capkk-v3 out of --methods",
        )?;
    }
    let fixture = fixture_path(a.fixture.as_deref())?;
    let fixture_text = std::fs::read_to_string(&fixture)
        .with_context(|| format!("reading fixture {}", fixture.display()))?;
    let fixture_name = fixture.display().to_string();
    let max_n = *a.hosts.iter().max().unwrap_or(&1);
    let load_start = load_average();
    let started = Instant::now();
    let started_at = std::time::SystemTime::now();
    eprintln!(
        "capkk-bench: sandbox {:?} with {max_n} hosts (load average {load_start})",
        a.sandbox
    );
    let sandbox = capkk_sandbox::Sandbox::up(&capkk_sandbox::SandboxConfig::new(a.sandbox.clone(), max_n))
        .context("building the sandbox hosts")?;
    let result = (|| {
        let fixture = fixture.as_path();
        let all: Vec<HostSpec> = sandbox
            .hosts()
            .iter()
            .map(HostSpec::from_sandbox)
            .collect::<anyhow::Result<_>>()?;
        let _ = std::fs::remove_dir_all(&a.scratch);
        std::fs::create_dir_all(&a.scratch)?;
        std::fs::create_dir_all(&a.out)?;
        let out = std::fs::canonicalize(&a.out)?;
        let known_hosts = a.scratch.join("known_hosts");
        let key = sandbox.credentials().ed25519_key.clone();
        // A node's sshd serves SFTP (Debian's and Ubuntu's default sshd_config); the sandbox's does not.
        // CAPKK v3 copies files over SFTP, and ansible prefers it.
        for h in sandbox.hosts() {
            h.sh_inside(
                "grep -q '^Subsystem sftp' /etc/ssh/sshd_config.capkk || \
                 echo 'Subsystem sftp /usr/lib/openssh/sftp-server' >> /etc/ssh/sshd_config.capkk",
            )?;
            h.restart_sshd()?;
        }
        let mut kh = String::new();
        let mut snaps = BTreeMap::new();
        let mut all = all;
        for h in &mut all {
            snaps.insert(h.name.clone(), h.snapshot()?);
            h.install_standins()?;
            kh.push_str(&h.known_hosts_line()?);
            if a.host_log {
                provision::record_sessions(h)?;
                h.shell = provision::SESSION_SHELL.into();
            }
        }
        write(&known_hosts, kh.as_bytes())?;
        let login_env = hosts::login_env(&all[0], &key, &known_hosts)?;
        let (mirror, components, v3_services, arts) = serve_artifacts(a, &sandbox, &v3_driver)?;
        let mut records = Vec::new();
        let mut sources = Vec::new();
        let mut labels: BTreeMap<usize, (Vec<String>, Vec<String>)> = BTreeMap::new();
        for &n in &a.hosts {
            let hosts = all[..n].to_vec();
            let names: Vec<String> = hosts.iter().map(|h| h.name.clone()).collect();
            let mut w = plan::skeleton(&fixture_text, &fixture_name, &names, &arts)?;
            // Recording pass (also capkk-rs's first warm-up): what capkk-rs sends is the workload.
            for h in &hosts {
                h.reset_to(&snaps[&h.name], &w)?;
            }
            // The recording's artifact cache stays: the replaying methods upload the artifacts from it.
            let recorded = ours::record(
                &hosts,
                &key,
                fixture_text.as_bytes(),
                &components,
                &a.scratch.join(format!("record-cache-n{n}")),
            )?;
            let round_trips = recorded.values().next().map_or(0, |s| s.ops.len());
            let ours_labels: Vec<String> = recorded
                .values()
                .next()
                .map(|s| s.ops.iter().map(|op| op.label()).collect())
                .unwrap_or_default();
            w.ours_digests = recorded
                .iter()
                .map(|(h, s)| (h.clone(), workload::digest(&s.ops)))
                .collect();
            w.pre_ops = ours::V3_REPLAYED_OPS;
            let mut ops = BTreeMap::new();
            for (h, rec) in recorded {
                if rec.pre < ours::V3_REPLAYED_OPS
                    || !matches!(&rec.ops[0], Op::Exec { command, .. } if command.contains("@@os-release"))
                {
                    bail!("{h}: the recording does not start with the facts probe and the bootstrap script");
                }
                let o = match a.workload {
                    Replay::Recorded => rec.ops,
                    Replay::Plan => {
                        let mut o = rec.ops[..rec.pre].to_vec();
                        o.extend(ours::plan_ops(fixture_text.as_bytes(), &h)?);
                        o
                    }
                };
                ops.insert(h, o);
            }
            w.ops = ops;
            w.derive_file_checks();
            w.source = format!(
                "{}; capkk-rs: {round_trips} execs/uploads per host; the others replay {}",
                w.source,
                match a.workload {
                    Replay::Plan => "one op per plan step (service scripts, each file, each command)",
                    Replay::Recorded => "exactly capkk-rs's execs/uploads",
                }
            );
            verify_all(&hosts, &w).context("after the recording pass")?;
            eprintln!("N={n}: {} steps per host ({})", w.steps(), w.source);
            sources.push((n, w.steps(), w.source.clone()));
            labels.insert(
                n,
                (
                    ours_labels,
                    w.ops
                        .values()
                        .next()
                        .map(|o| o.iter().map(|op| op.label()).collect())
                        .unwrap_or_default(),
                ),
            );
            let ctx = Paths {
                known_hosts: known_hosts.clone(),
                key: key.clone(),
                ansible: ansible.clone(),
                out: out.clone(),
                fixture: fixture.to_path_buf(),
                snaps: snaps.clone(),
                login_env: login_env.clone(),
                v3_driver: v3_driver.clone(),
                components: components.clone(),
                v3_services: v3_services.clone(),
                mirror: mirror.clone(),
            };
            records.extend(bench_n(a, n, &hosts, &w, &ctx)?);
        }
        let load_end = load_average();
        let report = render(
            a,
            &records,
            &sources,
            &labels,
            &load_start,
            &load_end,
            started.elapsed(),
        );
        results::write(
            &out.join("ssh-results.json"),
            &results::Meta::new("ssh", started_at, &load_start),
            serde_json::json!({
                "hosts": a.hosts,
                "runs_per_method": a.runs,
                "warmup": a.warmup,
                "workload": format!("{:?}", a.workload).to_lowercase(),
                "artifact_mib": a.artifact_mib,
                "steps": sources.iter().map(|(n, steps, source)| serde_json::json!({"hosts": n, "steps": steps, "source": source})).collect::<Vec<_>>(),
                "runs": records,
            }),
        )?;
        write(&out.join("ssh-table.md"), report.as_bytes())?;
        print!("{report}");
        anyhow::Ok(())
    })();
    if a.keep {
        eprintln!(
            "sandbox {} left up (--keep); `sandbox down --name {}` removes it",
            a.sandbox, a.sandbox
        );
        std::mem::forget(sandbox);
    } else {
        sandbox.down().context("tearing the sandbox down")?;
    }
    result
}

/// Files every run of one host count uses.
struct Paths {
    known_hosts: PathBuf,
    key: PathBuf,
    ansible: PathBuf,
    out: PathBuf,
    fixture: PathBuf,
    snaps: BTreeMap<String, hosts::Snapshot>,
    login_env: Vec<(String, String)>,
    v3_driver: PathBuf,
    components: ours::Components,
    v3_services: Option<methods::V3Services>,
    mirror: capkk_sandbox::mirror::Mirror,
}

fn bench_n(
    a: &SshArgs,
    n: usize,
    hosts: &[HostSpec],
    w: &Workload,
    p: &Paths,
) -> anyhow::Result<Vec<RunRecord>> {
    let work_dir = a.scratch.join(format!("n{n}"));
    std::fs::create_dir_all(&work_dir)?;
    let workload_path = work_dir.join("workload.json");
    write(&workload_path, serde_json::to_string(w)?.as_bytes())?;
    let base = DriveSpec {
        method: Method::Ours,
        hosts: hosts.to_vec(),
        key: p.key.clone(),
        known_hosts: p.known_hosts.clone(),
        work_dir: work_dir.clone(),
        workload: workload_path,
        ansible_playbook: p.ansible.clone(),
        fixture: p.fixture.clone(),
        login_env: p.login_env.clone(),
        v3_driver: p.v3_driver.clone(),
        components: p.components.clone(),
    };
    if a.methods.contains(&Method::Ansible) {
        let dir = methods::prepare_ansible(&base, w)?;
        // Keep a copy of the generated playbook next to the results for inspection.
        let _ = std::fs::copy(dir.join("playbook.yml"), p.out.join(format!("playbook-n{n}.yml")));
    }
    if let Some(services) = &p.v3_services {
        methods::prepare_v3(&base, w, services)?;
    }
    let expected = w.ours_digests.clone();
    let mut records = Vec::new();
    let total = a.warmup + a.runs;
    for r in 0..total {
        let timed = r >= a.warmup;
        let k = a.methods.len();
        // Alternate: each round starts with a different method.
        let order: Vec<Method> = (0..k).map(|i| a.methods[(i + r) % k]).collect();
        for m in order {
            for h in hosts {
                h.reset_to(&p.snaps[&h.name], w)
                    .with_context(|| format!("resetting {}", h.name))?;
            }
            let spec = DriveSpec {
                method: m,
                ..base.clone()
            };
            if a.host_log {
                for h in hosts {
                    provision::clear_sessions(h)?;
                }
            }
            let host_cpu_before: f64 = hosts.iter().map(|h| measure::tree_cpu_s(h.init_pid)).sum();
            p.mirror.reset_downloads();
            let run_start = results::epoch(std::time::SystemTime::now());
            let (res, peak) = run_driver(&spec, &work_dir, Duration::from_secs(a.run_timeout))
                .with_context(|| format!("N={n} {} run {}", m.display(), r + 1))?;
            let run_end = results::epoch(std::time::SystemTime::now());
            let host_log = if a.host_log {
                let sessions = hosts
                    .iter()
                    .map(provision::sessions)
                    .collect::<anyhow::Result<Vec<_>>>()?;
                Some(HostLog::of(&sessions, run_start, run_end))
            } else {
                None
            };
            // Connections are closed when the driver exits; give sshd a moment to reap its sessions.
            std::thread::sleep(Duration::from_millis(200));
            let host_cpu_s =
                hosts.iter().map(|h| measure::tree_cpu_s(h.init_pid)).sum::<f64>() - host_cpu_before;
            let downloads: usize = p
                .mirror
                .downloads()
                .iter()
                .filter(|(path, _)| !path.contains(".sha256"))
                .map(|(_, n)| n)
                .sum();
            let mut problems = verify_problems(hosts, w, m)?;
            if m == Method::Ours && res.digests != expected {
                problems.push(format!(
                    "capkk-rs sent different work than the workload: {:?} vs {:?}",
                    res.digests, expected
                ));
            }
            if !problems.is_empty() {
                bail!(
                    "N={n} {} run {} left the hosts WRONG ({} problems):\n  {}",
                    m.display(),
                    r + 1,
                    problems.len(),
                    problems.join("\n  ")
                );
            }
            eprintln!(
                "N={n:<2} {:<13} {} {:>2}: {:>8.3} s wall, {:>7.3} s cpu, {:>7.3} s host cpu, {:>7.1} MiB peak, {downloads} downloads  [verified]{}",
                m.display(),
                if timed { "run" } else { "warm-up" },
                if timed { r + 1 - a.warmup } else { r + 1 },
                res.wall_s,
                res.usage.cpu_s(),
                host_cpu_s,
                peak as f64 / 1024.0,
                if res.retries > 0 {
                    format!(" ({} phase retries)", res.retries)
                } else {
                    String::new()
                }
            );
            if timed {
                records.push(RunRecord {
                    hosts: n,
                    method: m,
                    run: r + 1 - a.warmup,
                    wall_s: res.wall_s,
                    cpu_s: res.usage.cpu_s(),
                    host_cpu_s,
                    peak_tree_rss_kib: peak,
                    max_process_rss_kib: res.usage.max_rss_kib,
                    step_s: res.step_s.clone(),
                    step_labels: res.step_labels.clone(),
                    retries: res.retries,
                    downloads,
                    host_log,
                });
            }
        }
    }
    for h in hosts {
        h.reset_to(&p.snaps[&h.name], w)?;
    }
    Ok(records)
}

/// Build the stand-in artifacts, start the mirror on the sandbox bridge and serve each artifact where capkk-rs's
/// catalogue and (when capkk-v3 runs) CAPKK v3's services look for it. Returns the mirror, capkk-rs's
/// `spec.component`, CAPKK's inputs and the artifacts.
fn serve_artifacts(
    a: &SshArgs,
    sandbox: &capkk_sandbox::Sandbox,
    v3_driver: &Path,
) -> anyhow::Result<(
    capkk_sandbox::mirror::Mirror,
    ours::Components,
    Option<methods::V3Services>,
    Vec<artifacts::Artifact>,
)> {
    use capkk_service::binary::catalogue;
    let arts = artifacts::build(&a.scratch.join("artifacts"), a.artifact_mib)?;
    let by_id = |id: &str| {
        arts.iter()
            .find(|x| x.id == id)
            .with_context(|| format!("no stand-in artifact {id}"))
    };
    let mirror = capkk_sandbox::mirror::Mirror::start(sandbox)?;
    let components = serve_ours(&arts, &mirror)?;
    let mut v3 = None;
    if a.methods.contains(&Method::CapkkV3) {
        let mut services = methods::V3Services {
            mirror: mirror.base.clone(),
            kubernetes_version: artifacts::KUBERNETES_VERSION.into(),
            arch: "amd64".into(),
            containerd_version: catalogue::DEFAULT_CONTAINERD_VERSION.into(),
            crictl_version: catalogue::DEFAULT_CRICTL_VERSION.into(),
            cri_socket: capkk_service::containermanager::DEFAULT_CRI_SOCKET.into(),
            overrides: Vec::new(),
        };
        for (id, version, url) in methods::v3_urls(v3_driver, &a.scratch.join("capkk-v3-urls"), &services)? {
            let ours_id = if id == "kubecni" { "cni" } else { id.as_str() };
            let art = by_id(ours_id)?;
            let path = url
                .strip_prefix(&mirror.base)
                .with_context(|| format!("CAPKK's {url} is not on the mirror"))?;
            artifacts::publish(&mirror, path, art.bytes.clone());
            services.overrides.push(methods::V3Override {
                id,
                arch: "amd64".into(),
                version,
                checksum: methods::V3Checksum { value: art.sha256() },
            });
        }
        v3 = Some(services);
    }
    eprintln!(
        "mirror {}: {} stand-in artifacts, {:.1} MiB",
        mirror.base,
        arts.len(),
        arts.iter().map(|x| x.bytes.len()).sum::<usize>() as f64 / (1024.0 * 1024.0)
    );
    Ok((mirror, components, v3, arts))
}

/// Serve each artifact where capkk-rs's catalogue looks for it (`spec.component.host` = the mirror) and return
/// the `spec.component` that pins their SHA-256.
pub(crate) fn serve_ours(
    arts: &[artifacts::Artifact],
    mirror: &capkk_sandbox::mirror::Mirror,
) -> anyhow::Result<ours::Components> {
    use capkk_service::binary::{ArtifactRequest, ComponentSource, catalogue, resolve};
    let by_id = |id: &str| {
        arts.iter()
            .find(|x| x.id == id)
            .with_context(|| format!("no stand-in artifact {id}"))
    };
    let versions = [
        ("kubeadm", artifacts::KUBERNETES_VERSION),
        ("kubelet", artifacts::KUBERNETES_VERSION),
        ("kubectl", artifacts::KUBERNETES_VERSION),
        ("cni", catalogue::DEFAULT_CNI_VERSION),
        ("containerd", catalogue::DEFAULT_CONTAINERD_VERSION),
        ("runc", catalogue::DEFAULT_RUNC_VERSION),
        ("crictl", catalogue::DEFAULT_CRICTL_VERSION),
    ];
    let mut components = ours::Components {
        mirror: mirror.base.clone(),
        pins: Vec::new(),
    };
    let source = ComponentSource {
        host: Some(mirror.base.clone()),
        ..Default::default()
    };
    for (id, v) in versions {
        let sha = by_id(id)?.sha256();
        components.pins.push((id.to_owned(), v.to_owned(), sha.clone()));
        let mut src = source.clone();
        src.overrides.push(capkk_service::binary::ArtifactOverride {
            id: id.to_owned(),
            checksum_value: Some(sha),
            ..Default::default()
        });
        let art = resolve(&ArtifactRequest::new(id, v, "amd64"), &src)?;
        let path = art
            .url
            .strip_prefix(&mirror.base)
            .with_context(|| format!("{} is not on the mirror", art.url))?;
        artifacts::publish(mirror, path, by_id(id)?.bytes.clone());
    }
    Ok(components)
}

/// The bootstrap data to provision: `fixture`, else the captured CABPK data, else the hand-made one.
pub(crate) fn fixture_path(fixture: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = fixture.map(Path::to_path_buf).unwrap_or_else(|| {
        [CAPTURED_FIXTURE, HANDMADE_FIXTURE]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from(HANDMADE_FIXTURE))
    });
    std::fs::canonicalize(&path).with_context(|| format!("fixture {}", path.display()))
}

fn verify_problems(hosts: &[HostSpec], w: &Workload, m: Method) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    let expect = if m == Method::CapkkV3 {
        &w.expect_v3
    } else {
        &w.expect
    };
    for h in hosts {
        let e = expect
            .get(&h.name)
            .with_context(|| format!("no checks for {}", h.name))?;
        problems.extend(h.verify(e)?);
    }
    Ok(problems)
}

fn verify_all(hosts: &[HostSpec], w: &Workload) -> anyhow::Result<()> {
    let problems = verify_problems(hosts, w, Method::Ours)?;
    if !problems.is_empty() {
        bail!(
            "the hosts are WRONG ({} problems):\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// Spawn `capkk-bench drive`, sample its process tree's RSS, wait (bounded), parse its result.
fn run_driver(spec: &DriveSpec, work_dir: &Path, limit: Duration) -> anyhow::Result<(DriveResult, u64)> {
    let spec_path = work_dir.join(format!("spec-{:?}.json", spec.method).to_lowercase());
    write(&spec_path, serde_json::to_string(spec)?.as_bytes())?;
    let mut child = Command::new(methods::self_exe()?)
        .arg("drive")
        .arg("--spec")
        .arg(&spec_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the driver")?;
    let sampler = PeakSampler::start(child.id(), Duration::from_millis(20));
    let mut stdout = child.stdout.take().context("driver stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let Some(status) = measure::wait_until(&mut child, Instant::now() + limit)? else {
        bail!("the driver did not finish within {limit:?}");
    };
    let peak = sampler.finish();
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        bail!("the driver failed ({status})");
    }
    let res: DriveResult =
        serde_json::from_str(text.trim()).with_context(|| format!("parsing driver output {text:?}"))?;
    Ok((res, peak))
}

fn render(
    a: &SshArgs,
    records: &[RunRecord],
    sources: &[(usize, usize, String)],
    labels: &BTreeMap<usize, (Vec<String>, Vec<String>)>,
    load_start: &str,
    load_end: &str,
    took: Duration,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "capkk-bench ssh: medians of {} runs (+{} warm-up), methods alternating; every run verified on the hosts",
        a.runs, a.warmup
    );
    let _ = writeln!(s, "machine: {}", machine());
    let _ = writeln!(
        s,
        "load average at start: {load_start}; at end: {load_end}; took {:.0} s",
        took.as_secs_f64()
    );
    for (n, steps, src) in sources {
        let _ = writeln!(s, "N={n}: {steps} steps per host; {src}");
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| N | method | wall median (s) | min–max (s) | × capkk-rs | controller CPU (s) | hosts' CPU (s) | peak RSS (MiB) | downloads |"
    );
    let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut groups: BTreeMap<(usize, Method), Vec<&RunRecord>> = BTreeMap::new();
    for r in records {
        groups.entry((r.hosts, r.method)).or_default().push(r);
    }
    let med =
        |v: &[&RunRecord], f: fn(&RunRecord) -> f64| median(&v.iter().map(|r| f(r)).collect::<Vec<_>>());
    let wall = |n: usize, m: Method| groups.get(&(n, m)).map(|v| med(v, |r| r.wall_s));
    for ((n, m), v) in &groups {
        let w = med(v, |r| r.wall_s);
        let min = v.iter().map(|r| r.wall_s).fold(f64::INFINITY, f64::min);
        let max = v.iter().map(|r| r.wall_s).fold(0.0, f64::max);
        let ratio = wall(*n, Method::Ours).map_or(f64::NAN, |o| w / o);
        let _ = writeln!(
            s,
            "| {n} | {} | {w:.2} | {min:.2}–{max:.2} | {ratio:.2} | {:.2} | {:.2} | {:.1} | {:.0} |",
            m.display(),
            med(v, |r| r.cpu_s),
            med(v, |r| r.host_cpu_s),
            med(v, |r| r.peak_tree_rss_kib as f64) / 1024.0,
            med(v, |r| r.downloads as f64),
        );
    }
    let _ = writeln!(s);
    let ns: Vec<usize> = groups.keys().map(|(n, _)| *n).collect();
    let key_n = if ns.contains(&10) {
        10
    } else {
        ns.iter().copied().max().unwrap_or(0)
    };
    // Where the time goes: each step's wall time (mean over hosts, median over runs).
    let step_med = |m: Method, i: usize| {
        groups.get(&(key_n, m)).map(|v| {
            median(
                &v.iter()
                    .filter_map(|r| r.step_s.get(i).copied())
                    .collect::<Vec<_>>(),
            )
        })
    };
    let table = |s: &mut String, title: &str, methods: &[Method], l: &[String]| {
        let shown: Vec<Method> = methods
            .iter()
            .copied()
            .filter(|m| groups.contains_key(&(key_n, *m)))
            .collect();
        if shown.is_empty() {
            return;
        }
        let _ = writeln!(s, "{title} at N={key_n} (s; mean over hosts, median over runs):");
        let _ = writeln!(s);
        let head: Vec<&str> = shown.iter().map(|m| m.display()).collect();
        let _ = writeln!(s, "| step | {} |", head.join(" | "));
        let _ = writeln!(s, "|---|{}", "---:|".repeat(shown.len()));
        for (i, label) in l.iter().enumerate() {
            let cells: Vec<String> = shown
                .iter()
                .map(|m| {
                    step_med(*m, i)
                        .filter(|v| v.is_finite())
                        .map_or("-".into(), |v| format!("{v:.3}"))
                })
                .collect();
            let _ = writeln!(
                s,
                "| {} {} | {} |",
                i + 1,
                label.replace('|', "\\|"),
                cells.join(" | ")
            );
        }
        let _ = writeln!(s);
    };
    if let Some((ours_l, replay_l)) = labels.get(&key_n) {
        table(&mut s, "capkk-rs, per exec/upload", &[Method::Ours], ours_l);
        table(
            &mut s,
            "OpenSSH and local floor, per step",
            &[Method::Openssh, Method::Local],
            replay_l,
        );
    }
    if let Some(v3_l) = groups
        .get(&(key_n, Method::CapkkV3))
        .and_then(|v| v.first())
        .map(|r| r.step_labels.clone())
    {
        table(
            &mut s,
            "capkk-v3 (CAPKK v3.1.12's client and services), per call",
            &[Method::CapkkV3],
            &v3_l,
        );
    }
    let retries: usize = records
        .iter()
        .filter(|r| r.method == Method::CapkkV3)
        .map(|r| r.retries)
        .sum();
    if retries > 0 {
        let _ = writeln!(
            s,
            "capkk-v3: {retries} phase retries over all timed runs (a failed phase is run again, like a requeued reconcile)"
        );
    }
    let with_logs: Vec<_> = groups
        .iter()
        .filter(|(_, v)| v.iter().all(|r| r.host_log.is_some()))
        .collect();
    if !with_logs.is_empty() {
        let _ = writeln!(
            s,
            "On the hosts' clocks (--host-log; s, mean over hosts, median over runs; the driver's start and end \
             are the orchestrator's, so its process start is in the first column):"
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "| N | method | wall | start → first command | host work | between commands | last command → end | commands |"
        );
        let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|---:|---:|");
        for ((n, m), v) in with_logs {
            let hl = |f: fn(&HostLog) -> f64| {
                median(
                    &v.iter()
                        .filter_map(|r| r.host_log.as_ref().map(f))
                        .collect::<Vec<_>>(),
                )
            };
            let _ = writeln!(
                s,
                "| {n} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} |",
                m.display(),
                med(v, |r| r.wall_s),
                hl(|h| h.to_first_s),
                hl(|h| h.work_s),
                hl(|h| h.between_s),
                hl(|h| h.after_last_s),
                hl(|h| h.commands),
            );
        }
        let _ = writeln!(s);
    }
    for n in ns.iter().copied().collect::<std::collections::BTreeSet<_>>() {
        if let (Some(o), Some(l)) = (wall(n, Method::Ours), wall(n, Method::Local)) {
            let _ = writeln!(s, "capkk-rs/local N={n}: {:.2}", o / l);
        }
    }
    if let (Some(o), Some(x)) = (wall(key_n, Method::Ours), wall(key_n, Method::Openssh)) {
        let _ = writeln!(s, "ratio openssh/capkk-rs N={key_n}: {:.1}", x / o);
    }
    if let (Some(o), Some(x)) = (wall(key_n, Method::Ours), wall(key_n, Method::CapkkV3)) {
        let _ = writeln!(s, "ratio capkk-v3/capkk-rs N={key_n}: {:.1}", x / o);
    }
    if let (Some(o), Some(x)) = (wall(key_n, Method::Ours), wall(key_n, Method::Ansible)) {
        let _ = writeln!(s, "ratio ansible/capkk-rs N={key_n}: {:.1}", x / o);
    }
    s
}
