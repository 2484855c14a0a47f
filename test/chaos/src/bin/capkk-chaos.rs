//! `capkk-chaos`: a seeded fault campaign against a cluster on the local management plane.
//!
//! ```text
//! capkk-chaos --work DIR --namespace NS --cluster NAME --hosts NAME --source containers|sandbox \
//!             --mgmt-dir DIR [--faults N] [--seed S]
//! ```
//! The setup (`make chaos`, `make chaos-smoke`: test/vm/real.sh or test/e2e/e2e.sh kept at the applied
//! cluster) leaves the plane, the hosts, the manager process (`DIR/manager.pid`, `manager.log`) and the
//! cluster's YAML (`DIR/cluster.yaml`). The campaign runs the lifecycle create → scale down → scale up →
//! delete in a loop, one fault per step at a moment drawn from the seed, until it has injected the faults
//! asked for; after each it waits for the step's goal and checks the invariants. It prints the seed first
//! (`CHAOS_SEED=` replays it) and writes `chaos-report.json` and `chaos-report.md` into `--report-dir`.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use base64::Engine;
use capkk_chaos::{
    env::{Frozen, Hosts, Kube, Manager, apiserver_pid, netem_unavailable, signal},
    invariants::{self, HostId, Restart, Secret, Settled, Violation},
    plan::{FaultKind, FaultSpec, Planner, Step, Trigger},
    report::{FaultRecord, Report, Unavailable},
    rng,
};
use clap::Parser;
use serde_json::Value;

#[derive(Parser)]
#[command(about = "Seeded fault campaign against the provider (docs/reliability.md)")]
struct Cli {
    /// The setup's work dir: manager.pid, manager.log, cluster.yaml.
    #[arg(long)]
    work: PathBuf,
    /// The cluster's namespace.
    #[arg(long)]
    namespace: String,
    /// The Cluster's name.
    #[arg(long)]
    cluster: String,
    /// The fleet's or sandbox's name.
    #[arg(long)]
    hosts: String,
    /// containers (node containers of test/vm) or sandbox (sandbox hosts of test/sandbox).
    #[arg(long)]
    source: String,
    /// The management plane's state dir (its kubeconfig and kube-apiserver pid file).
    #[arg(long, env = "CAPKK_MGMT_DIR")]
    mgmt_dir: PathBuf,
    /// Faults to inject.
    #[arg(long, env = "CHAOS_FAULTS", default_value_t = 10)]
    faults: usize,
    /// The seed (decimal or 0x hex); a new one, printed, when not given.
    #[arg(long, env = "CHAOS_SEED")]
    seed: Option<String>,
    /// The longest a fault lasts (seconds; the kinds' own spans are cut to it).
    #[arg(long, env = "CHAOS_MAX_FAULT_SECS", default_value_t = 30)]
    max_fault_secs: u64,
    /// Only these kinds (comma-separated names, e.g. `manager-kill,ssh-cut`; default: every kind the hosts
    /// allow). A campaign beside another run on the same plane leaves out `apiserver-stop`.
    #[arg(long, env = "CHAOS_KINDS", value_delimiter = ',')]
    kinds: Vec<String>,
    /// Faults per lifecycle step (each at its own moment, one after the other).
    #[arg(long, env = "CHAOS_FAULTS_PER_STEP", default_value_t = 1)]
    faults_per_step: usize,
    /// How long a step may take to reach its goal after its fault (seconds).
    #[arg(long, env = "CHAOS_STEP_TIMEOUT", default_value_t = 600)]
    step_timeout: u64,
    /// No new cycle starts after this many seconds (the current one ends with its delete).
    #[arg(long, env = "CHAOS_MAX_SECS", default_value_t = 1800)]
    max_secs: u64,
    /// Manager replicas (leader election among them): the setup's manager and as many more started beside it
    /// (`WORK/manager-b.pid`, ...); `leader-kill` needs two.
    #[arg(long, env = "CHAOS_REPLICAS", default_value_t = 2)]
    replicas: usize,
    /// The manager's RSS bound (MiB).
    #[arg(long, env = "CHAOS_RSS_MAX_MIB", default_value_t = 512)]
    rss_max_mib: u64,
    /// Where the report goes (default: WORK/chaos).
    #[arg(long)]
    report_dir: Option<PathBuf>,
    /// Let the campaign freeze the default plane's API server (shared by every other run on the machine:
    /// refused unless said).
    #[arg(long)]
    allow_shared_plane: bool,
}

struct Campaign {
    cli: Cli,
    kube: Kube,
    /// The manager replicas: the setup's first, then those the campaign started.
    managers: Vec<Manager>,
    hosts: Hosts,
    host_ids: Vec<HostId>,
    /// Per host, what its probe printed before the campaign while it had no claim (empty for a host claimed
    /// then: judged strictly).
    baseline: Vec<Vec<String>>,
    secrets: Vec<Secret>,
    /// Per host, the restarts the campaign injected on it since it was last seen without a claim, each with
    /// the provisioning steps it caught running (what may run again on that host by design).
    restarts: Vec<Vec<Restart>>,
    /// The `no-command-ran-twice` messages reported already: a journal stays until its host's reset and is read
    /// after every fault, and a second run is reported once.
    journal_reported: BTreeSet<String>,
    /// Holder uids of the claim Leases held for the namespace before the campaign began (an earlier,
    /// interrupted run's): not this run's leftovers.
    claims_before: BTreeSet<String>,
    started: Instant,
    report: Report,
}

fn log(started: Instant, msg: &str) {
    println!("[chaos +{:6.1}s] {msg}", started.elapsed().as_secs_f64());
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("capkk-chaos: {e:#}");
            std::process::exit(2);
        }
    }
}

fn run() -> Result<bool> {
    let cli = Cli::parse();
    let seed = rng::seed_from(cli.seed.as_deref()).map_err(anyhow::Error::msg)?;
    println!(
        "capkk-chaos: seed {seed} (replay: CHAOS_SEED={seed}), {} faults",
        cli.faults
    );
    guard_plane(&cli)?;
    let kube = Kube {
        kubeconfig: cli.mgmt_dir.join("kubeconfig"),
        namespace: cli.namespace.clone(),
    };
    let hosts = Hosts::attach(&cli.source, &cli.hosts)?;
    let mut managers = vec![Manager::attach(&cli.work)?];
    let mut kinds = vec![
        FaultKind::ManagerKill,
        FaultKind::ApiserverStop,
        FaultKind::SshCut,
        FaultKind::SshdStop,
    ];
    let mut unavailable = Vec::new();
    if hosts.source() == "containers" {
        kinds.extend([FaultKind::HostRestart, FaultKind::DiskFull]);
    } else {
        unavailable.push(Unavailable {
            kind: FaultKind::HostRestart.name().into(),
            why: "sandbox hosts are namespaces of the machine, not containers: nothing to power-cycle".into(),
        });
        unavailable.push(Unavailable {
            kind: FaultKind::DiskFull.name().into(),
            why: "sandbox hosts share the machine's file system: no disk of their own to fill".into(),
        });
    }
    if managers[0].lease().is_none() {
        bail!("the setup's manager runs without --leader-election-id: replicas would not elect a leader");
    }
    for n in 1..cli.replicas {
        let suffix = char::from(b'a' + (n as u8 % 26)).to_string();
        let mut m = managers[0].replica(&cli.work, &suffix)?;
        let pid = m.start()?;
        println!(
            "capkk-chaos: manager replica {} started (pid {pid}, log {})",
            m.identity(),
            m.log.display()
        );
        managers.push(m);
    }
    if managers.len() >= 2 {
        kinds.push(FaultKind::LeaderKill);
    } else {
        unavailable.push(Unavailable {
            kind: FaultKind::LeaderKill.name().into(),
            why: format!(
                "CHAOS_REPLICAS={}: one manager, no leader to take over from",
                cli.replicas
            ),
        });
    }
    unavailable.push(Unavailable {
        kind: "link-latency".into(),
        why: match netem_unavailable() {
            Some(why) => why,
            None => "netem works here, but the campaign does not inject it yet".into(),
        },
    });
    if !cli.kinds.is_empty() {
        for k in &cli.kinds {
            if !FaultKind::ALL.iter().any(|f| f.name() == k) {
                bail!(
                    "CHAOS_KINDS: {k:?} is not a fault kind ({})",
                    FaultKind::ALL.map(FaultKind::name).join(", ")
                );
            }
        }
        kinds.retain(|f| cli.kinds.iter().any(|k| k == f.name()));
        if kinds.is_empty() {
            bail!(
                "CHAOS_KINDS={}: none of them can be injected on these hosts",
                cli.kinds.join(",")
            );
        }
    }
    let host_ids = hosts.ids();
    let report = Report {
        seed,
        source: hosts.source().into(),
        faults_target: cli.faults,
        cycles: 0,
        elapsed_secs: 0.0,
        load_start: loadavg(),
        load_end: String::new(),
        faults: Vec::new(),
        final_violations: Vec::new(),
        unavailable,
        supervised_restarts: 0,
        max_rss_kib: 0,
        replicas: managers.len(),
        stopped: None,
        allowed_reruns: Vec::new(),
    };
    let planner = Planner::new(seed, kinds, cli.max_fault_secs);
    let host_count = host_ids.len();
    let mut c = Campaign {
        cli,
        kube,
        managers,
        hosts,
        host_ids,
        baseline: Vec::new(),
        secrets: Vec::new(),
        restarts: vec![Vec::new(); host_count],
        journal_reported: BTreeSet::new(),
        claims_before: BTreeSet::new(),
        started: Instant::now(),
        report,
    };
    let result = c.campaign(planner);
    if let Err(e) = &result {
        c.report.stopped = Some(format!("{e:#}"));
    }
    // The replicas it started go with the campaign (the setup's manager is the teardown's; chaos.sh also
    // stops these when the campaign itself was killed).
    for m in c.managers.iter_mut().skip(1) {
        if m.pid().is_some()
            && let Err(e) = m.kill()
        {
            eprintln!("capkk-chaos: stopping replica {}: {e:#}", m.identity());
        }
    }
    let md = c.write_report()?;
    println!("\n{md}");
    println!("report: {}", c.report_dir().join("chaos-report.md").display());
    Ok(c.report.passed())
}

/// The campaign freezes the plane's API server: never the default plane every other run shares, unless
/// asked to.
fn guard_plane(cli: &Cli) -> Result<()> {
    let home = std::env::var("HOME").unwrap_or_default();
    let cache = std::env::var("CAPKK_CACHE").unwrap_or_else(|_| format!("{home}/.cache/capkk-rs"));
    let default = fs::canonicalize(Path::new(&cache).join("mgmt")).ok();
    let ours =
        fs::canonicalize(&cli.mgmt_dir).with_context(|| format!("--mgmt-dir {}", cli.mgmt_dir.display()))?;
    if default.as_deref() == Some(ours.as_path()) && !cli.allow_shared_plane {
        bail!(
            "--mgmt-dir {} is the default management plane, shared by every run on this machine: the campaign \
             freezes its API server. Use a plane of your own (CAPKK_MGMT_DIR, CAPKK_MGMT_PORT_OFFSET) or pass \
             --allow-shared-plane",
            ours.display()
        );
    }
    Ok(())
}

impl Campaign {
    fn log(&self, msg: &str) {
        log(self.started, msg);
    }

    fn report_dir(&self) -> PathBuf {
        self.cli
            .report_dir
            .clone()
            .unwrap_or_else(|| self.cli.work.join("chaos"))
    }

    /// The report as it stands, written (after every step too: a campaign stopped from outside leaves the
    /// report of the steps it finished); its Markdown.
    fn write_report(&mut self) -> Result<String> {
        self.report.elapsed_secs = self.started.elapsed().as_secs_f64();
        self.report.load_end = loadavg();
        let dir = self.report_dir();
        fs::create_dir_all(&dir)?;
        let md = self.report.to_markdown();
        fs::write(dir.join("chaos-report.md"), &md)?;
        fs::write(
            dir.join("chaos-report.json"),
            serde_json::to_string_pretty(&self.report)?,
        )?;
        Ok(md)
    }

    /// Each host's probe before the campaign, for hosts without a claim then; the claim Leases already held
    /// for the namespace.
    fn take_baseline(&mut self) -> Result<()> {
        let leases = retry(|| {
            self.kube.list(
                "leases",
                true,
                &["-l", "infrastructure.cluster.x-k8s.io/host-claim"],
            )
        })?;
        self.claims_before = invariants::claims_held_for(&leases, &self.cli.namespace);
        if !self.claims_before.is_empty() {
            self.log(&format!(
                "claim Leases held for {} before the campaign (an earlier run's): {} holder(s), not counted by {}",
                self.cli.namespace,
                self.claims_before.len(),
                invariants::NO_LEFTOVER_CLAIM
            ));
        }
        let insts = retry(|| self.kube.list("kkinstances", true, &[]))?;
        let claimed: BTreeSet<String> = insts["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["spec"]["address"].as_str().map(str::to_owned))
            .collect();
        let script = invariants::host_probe_script(capkk_service::bootstrap::OWNED_PATHS);
        for (n, h) in self.host_ids.iter().enumerate() {
            let lines: Vec<String> = if claimed.contains(&h.address) {
                Vec::new()
            } else {
                let out = self.hosts.inside(n, &script)?;
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| *l != invariants::PROBE_END && !l.trim().is_empty())
                    .map(str::to_owned)
                    .collect()
            };
            log(
                self.started,
                &format!(
                    "baseline of {}: {}",
                    h.name,
                    if claimed.contains(&h.address) {
                        "claimed already, none (judged strictly)".to_owned()
                    } else if lines.is_empty() {
                        "clean".to_owned()
                    } else {
                        lines.join("; ")
                    }
                ),
            );
            self.baseline.push(lines);
        }
        Ok(())
    }

    fn campaign(&mut self, mut planner: Planner) -> Result<()> {
        self.take_baseline()?;
        let mut cycle = 0;
        while self.report.faults.len() < self.cli.faults {
            if self.started.elapsed().as_secs() > self.cli.max_secs {
                self.report.stopped = Some(format!(
                    "CHAOS_MAX_SECS={} reached after {} of {} faults",
                    self.cli.max_secs,
                    self.report.faults.len(),
                    self.cli.faults
                ));
                break;
            }
            cycle += 1;
            self.report.cycles = cycle;
            for step in Step::CYCLE {
                // Once the faults are injected the cycle still ends with its delete (without faults), so that
                // the delete's invariants are checked and no cluster is left.
                let mut specs = Vec::new();
                for _ in 0..self.cli.faults_per_step {
                    if self.report.faults.len() + specs.len() < self.cli.faults {
                        specs.extend(planner.next(step));
                    }
                }
                // A step's faults run one after the other, each from its moment to its end: a full disk
                // aimed at the binaries' upload goes first while hosts are set up, or the upload is over
                // before its turn (seen: every one of them found the step settled). The draws are unchanged.
                if matches!(step, Step::Create | Step::ScaleUp) {
                    specs.sort_by_key(|s| s.kind != FaultKind::DiskFull);
                }
                self.step(cycle, step, specs)?;
                self.write_report()?;
            }
        }
        Ok(())
    }

    /// The replicas of the cluster's control plane and MachineDeployment, and the MachineDeployment's name.
    fn replicas(&self) -> Result<(usize, usize, String)> {
        let kcp = self.kube.list("kubeadmcontrolplanes", false, &[])?;
        let md = self.kube.list("machinedeployments", false, &[])?;
        let sum = |v: &Value| {
            v["items"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|i| i["spec"]["replicas"].as_u64().unwrap_or(0))
                        .sum::<u64>()
                })
                .unwrap_or(0) as usize
        };
        let name = md["items"][0]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Ok((sum(&kcp), sum(&md), name))
    }

    /// The step's action; returns the Machines it should end with (None: the cluster gone).
    fn act(&mut self, step: Step) -> Result<Option<usize>> {
        match step {
            Step::Create => {
                let yaml = self.cli.work.join("cluster.yaml");
                retry(|| self.kube.ok(&["apply", "-f", &yaml.to_string_lossy()]))?;
                let (cp, w, _) = retry(|| self.replicas())?;
                Ok(Some(cp + w))
            }
            Step::ScaleDown | Step::ScaleUp => {
                let (cp, w, md) = retry(|| self.replicas())?;
                let target = if step == Step::ScaleDown {
                    w.saturating_sub(1)
                } else if cp + w < self.host_ids.len() {
                    w + 1
                } else {
                    self.log("scale-up: no free host in the pool; the replicas stay");
                    w
                };
                if !md.is_empty() && target != w {
                    retry(|| {
                        self.kube.ok(&[
                            "scale",
                            "-n",
                            &self.cli.namespace,
                            &format!("machinedeployment/{md}"),
                            &format!("--replicas={target}"),
                        ])
                    })?;
                }
                self.log(&format!(
                    "{}: MachineDeployment {md} {w} -> {target}",
                    step.name()
                ));
                Ok(Some(cp + target))
            }
            Step::Delete => {
                retry(|| {
                    self.kube.ok(&[
                        "delete",
                        "-n",
                        &self.cli.namespace,
                        &format!("cluster/{}", self.cli.cluster),
                        "--wait=false",
                    ])
                })?;
                Ok(None)
            }
        }
    }

    /// The KKMachines' phases and host steps, for the log and the trigger.
    fn moment(&self) -> Option<(Vec<(String, String)>, String)> {
        let kk = self.kube.list("kkmachines", false, &[]).ok()?;
        let mut pairs = Vec::new();
        let mut text = Vec::new();
        for m in kk["items"].as_array().into_iter().flatten() {
            let name = m["metadata"]["name"].as_str().unwrap_or_default();
            let phase = m["status"]["phase"].as_str().unwrap_or("-");
            let step = m["status"]["step"].as_str().unwrap_or_default();
            pairs.push((phase.to_owned(), step.to_owned()));
            text.push(if step.is_empty() {
                format!("{name} {phase}")
            } else {
                format!("{name} {phase} ({step})")
            });
        }
        Some((
            pairs,
            if text.is_empty() {
                "no KKMachine".into()
            } else {
                text.join(", ")
            },
        ))
    }

    /// Whether the step's goal is reached: Settled for the Machines (and no claim without its Machine), or
    /// the cluster's objects gone.
    fn goal(&self, want: Option<usize>) -> Result<Settled> {
        match want {
            Some(n) => {
                let machines = self.kube.list("machines.cluster.x-k8s.io", false, &[])?;
                let kk = self.kube.list("kkmachines", false, &[])?;
                let settled = invariants::machines_settled(&machines, &kk, n);
                if settled == Settled::Ready {
                    let insts = self.kube.list("kkinstances", false, &[])?;
                    let claims = insts["items"].as_array().map_or(0, Vec::len);
                    if claims != n {
                        return Ok(Settled::NotYet(format!(
                            "{claims} KKInstances for {n} Machines (a host still being reset or claimed)"
                        )));
                    }
                }
                Ok(settled)
            }
            None => {
                let left = self.kube.list(
                    "clusters.cluster.x-k8s.io,machines.cluster.x-k8s.io,kkclusters,kkmachines,kkinstances",
                    false,
                    &[],
                )?;
                let names: Vec<String> = left["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|i| {
                        format!(
                            "{} {}",
                            i["kind"].as_str().unwrap_or_default(),
                            i["metadata"]["name"].as_str().unwrap_or_default()
                        )
                    })
                    .collect();
                Ok(if names.is_empty() {
                    Settled::Ready
                } else {
                    Settled::NotYet(format!("left: {}", names.join(", ")))
                })
            }
        }
    }

    fn step(&mut self, cycle: usize, step: Step, specs: Vec<FaultSpec>) -> Result<()> {
        self.log(&format!("== cycle {cycle} {} (load {})", step.name(), loadavg()));
        // A scale-down or delete resets hosts, and the reset removes their journals: read them before.
        let mut early = Vec::new();
        if matches!(step, Step::ScaleDown | Step::Delete) {
            early.extend(self.journal_checks("before the step's resets"));
        }
        let want = self.act(step)?;
        let t0 = Instant::now();
        let mut records = Vec::new();
        let mut cleared = Instant::now();
        for spec in specs {
            // Wait for the moment (or the goal: then the fault hits the settled step). A step's later faults
            // wait for their moment after the earlier ones ended.
            let (hit, moment) = self.await_trigger(&spec, want, t0);
            let index = self.report.faults.len() + records.len() + 1;
            records.push((
                self.inject(index, cycle, step, &spec, hit, moment)?,
                Instant::now(),
            ));
            cleared = Instant::now();
            // Right after the fault, before a reset of the step can remove a journal it affected.
            early.extend(self.journal_checks(&format!("after fault {index}")));
        }
        let bound = Duration::from_secs(self.cli.step_timeout);
        let mut last = String::new();
        let mut next_progress = Instant::now() + Duration::from_secs(30);
        let settled = loop {
            self.supervise();
            match self.goal(want) {
                Ok(Settled::NotYet(why)) => last = why,
                Ok(done) => break Some(done),
                Err(e) => last = format!("{e:#}"),
            }
            if cleared.elapsed() > bound {
                break None;
            }
            if Instant::now() > next_progress {
                self.log(&format!("   .. waiting for the {} goal: {last}", step.name()));
                next_progress = Instant::now() + Duration::from_secs(30);
            }
            thread::sleep(Duration::from_secs(2));
        };
        let recover = cleared.elapsed().as_secs_f64();
        let done = Instant::now();
        let mut violations = early;
        let mut terminal = Vec::new();
        match &settled {
            Some(Settled::Ready) => self.log(&format!(
                "   {} goal reached ({recover:.1}s after the fault)",
                step.name()
            )),
            Some(Settled::Terminal(causes)) => {
                self.log(&format!(
                    "   {} settled with terminal failures: {}",
                    step.name(),
                    causes.join("; ")
                ));
                terminal = causes.clone();
            }
            _ => violations.push(Violation {
                check: invariants::MACHINES_SETTLE.into(),
                message: format!(
                    "{} of cycle {cycle}: not settled {}s after the fault: {last}",
                    step.name(),
                    bound.as_secs()
                ),
            }),
        }
        violations.extend(self.checks(step));
        for v in &violations {
            self.log(&format!("   VIOLATION {}: {}", v.check, v.message));
        }
        let ok = settled.is_some();
        let clean = violations.is_empty();
        if records.is_empty() {
            self.report.final_violations.append(&mut violations);
        }
        // Every fault of the step shares its outcome; each recovered from its own end to the goal. The
        // violations are counted once, with the step's last fault.
        let last = records.len();
        for (n, (mut r, ended)) in records.into_iter().enumerate() {
            r.survived = ok && clean && terminal.is_empty();
            r.recover_secs = ok.then(|| done.duration_since(ended).as_secs_f64());
            if n + 1 == last {
                r.violations.append(&mut violations);
            }
            r.terminal = terminal.clone();
            self.report.faults.push(r);
        }
        Ok(())
    }

    /// Poll until the trigger's moment or the goal; returns whether the moment came first and what the
    /// cluster was doing.
    fn await_trigger(&mut self, spec: &FaultSpec, want: Option<usize>, t0: Instant) -> (bool, String) {
        let bound = Duration::from_secs(self.cli.step_timeout);
        loop {
            let moment = self.moment();
            let text = moment
                .as_ref()
                .map(|m| m.1.clone())
                .unwrap_or_else(|| "API not answering".into());
            let hit = match &spec.trigger {
                Trigger::AtStart => true,
                Trigger::AfterSecs(s) => t0.elapsed().as_secs() >= *s,
                Trigger::Phase(p) => moment.as_ref().is_some_and(|m| m.0.iter().any(|(ph, _)| ph == p)),
                Trigger::HostWork => moment
                    .as_ref()
                    .is_some_and(|m| m.0.iter().any(|(ph, st)| ph == "Provisioning" && !st.is_empty())),
                Trigger::HostStep(text) => moment
                    .as_ref()
                    .is_some_and(|m| m.0.iter().any(|(_, st)| st.contains(text.as_str()))),
            };
            if hit {
                return (true, text);
            }
            if matches!(self.goal(want), Ok(Settled::Ready | Settled::Terminal(_))) || t0.elapsed() > bound {
                return (false, text);
            }
            self.supervise();
            thread::sleep(Duration::from_secs(1));
        }
    }

    /// The hosts a host fault may hit: for a host-step trigger those whose KKMachine is in that step now (by
    /// its status addresses), else those the cluster claims now (by KKInstance address), else all.
    fn host_candidates(&self, trigger: &Trigger) -> Vec<usize> {
        if let Trigger::HostStep(text) = trigger {
            let in_step: BTreeSet<String> = self
                .kube
                .list("kkmachines", false, &[])
                .ok()
                .and_then(|v| v["items"].as_array().cloned())
                .into_iter()
                .flatten()
                .filter(|m| {
                    m["status"]["step"]
                        .as_str()
                        .is_some_and(|s| s.contains(text.as_str()))
                })
                .flat_map(|m| {
                    m["status"]["addresses"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a["address"].as_str().map(str::to_owned))
                        .collect::<Vec<_>>()
                })
                .collect();
            let c: Vec<usize> = (0..self.host_ids.len())
                .filter(|i| in_step.contains(&self.host_ids[*i].address))
                .collect();
            if !c.is_empty() {
                return c;
            }
        }
        let claimed: BTreeSet<String> = self
            .kube
            .list("kkinstances", false, &[])
            .ok()
            .and_then(|v| v["items"].as_array().cloned())
            .into_iter()
            .flatten()
            .filter_map(|i| i["spec"]["address"].as_str().map(str::to_owned))
            .collect();
        let c: Vec<usize> = (0..self.host_ids.len())
            .filter(|i| claimed.contains(&self.host_ids[*i].address))
            .collect();
        if c.is_empty() {
            (0..self.host_ids.len()).collect()
        } else {
            c
        }
    }

    fn inject(
        &mut self,
        index: usize,
        cycle: usize,
        step: Step,
        spec: &FaultSpec,
        hit: bool,
        moment: String,
    ) -> Result<FaultRecord> {
        let at_secs = self.started.elapsed().as_secs_f64();
        let host = spec.kind.on_host().then(|| {
            let c = self.host_candidates(&spec.trigger);
            c[(spec.host_draw % c.len() as u64) as usize]
        });
        let host_name = host.map(|i| self.host_ids[i].name.clone());
        self.log(&format!(
            "-> fault {index}: {} {}s{} ({}; {}: {moment})",
            spec.kind.name(),
            spec.secs,
            host_name
                .as_deref()
                .map(|h| format!(" on {h}"))
                .unwrap_or_default(),
            spec.trigger,
            if hit { "moment hit" } else { "step already settled" },
        ));
        let secs = Duration::from_secs(spec.secs);
        let mut extra = Vec::new();
        match spec.kind {
            FaultKind::ManagerKill => {
                // A manager that exited on its own right before (its Lease lost during an API-server freeze
                // just before) is started first: the fault is the kill of a running manager. With replicas,
                // one of them, leader or not (leader-kill aims at the leader).
                self.supervise();
                let r = (spec.host_draw % self.managers.len() as u64) as usize;
                self.kill_replica(r, secs)?;
            }
            FaultKind::LeaderKill => {
                self.supervise();
                extra.extend(self.kill_leader(spec.secs)?);
            }
            FaultKind::DiskFull => {
                let i = host.context("host fault without a host")?;
                self.hosts.disk_full(i, true)?;
                thread::sleep(secs);
                self.hosts.disk_full(i, false)?;
            }
            FaultKind::ApiserverStop => {
                let pid = apiserver_pid(&self.cli.mgmt_dir)?;
                signal("STOP", pid)?;
                let frozen = Frozen(pid);
                thread::sleep(secs);
                drop(frozen);
            }
            FaultKind::SshCut => {
                let i = host.context("host fault without a host")?;
                self.hosts.ssh_cut(i, true)?;
                thread::sleep(secs);
                self.hosts.ssh_cut(i, false)?;
            }
            FaultKind::SshdStop => {
                let i = host.context("host fault without a host")?;
                self.hosts.sshd(i, false)?;
                thread::sleep(secs);
                self.hosts.sshd(i, true)?;
            }
            FaultKind::HostRestart => {
                let i = host.context("host fault without a host")?;
                // The journals right before and right after the power cycle say which provisioning steps it
                // caught running: those may run again on this host by design (no-command-ran-twice).
                let before = self.read_journals(i);
                let t = Instant::now();
                self.hosts.restart(i)?;
                self.log(&format!(
                    "   host back with SSH after {:.1}s",
                    t.elapsed().as_secs_f64()
                ));
                let caught = match (before, self.read_journals(i)) {
                    (Ok(b), Ok(a)) => invariants::caught_by_restart(&b, &a),
                    (Err(e), _) | (_, Err(e)) => {
                        self.log(&format!(
                            "   journals around the restart not read ({e}): no step may run again on it"
                        ));
                        BTreeSet::new()
                    }
                };
                self.log(&format!(
                    "   the restart caught {} provisioning step(s) running{}",
                    caught.len(),
                    caught
                        .iter()
                        .map(|(plan, id)| format!(" {id} (plan {plan})"))
                        .collect::<Vec<_>>()
                        .join(",")
                ));
                self.restarts[i].push(Restart { fault: index, caught });
            }
        }
        Ok(FaultRecord {
            index,
            cycle,
            step: step.name().into(),
            kind: spec.kind,
            trigger: spec.trigger.to_string(),
            trigger_hit: hit,
            moment,
            host: host_name,
            secs: spec.secs,
            at_secs,
            survived: false,
            recover_secs: None,
            violations: extra,
            terminal: Vec::new(),
        })
    }

    /// SIGKILL replica `r`, and start it again after `secs` (as its Pod's kubelet would).
    fn kill_replica(&mut self, r: usize, secs: Duration) -> Result<()> {
        let m = &mut self.managers[r];
        let who = m.identity();
        m.kill()?;
        thread::sleep(secs);
        let pid = m.start()?;
        self.log(&format!("   manager {who} killed, started again (pid {pid})"));
        Ok(())
    }

    /// SIGKILL the replica holding the leader Lease and keep it down `secs` (longer than the Lease), reading
    /// the Lease's holder every second: another replica must take it (`leader-taken-over`). Then start it
    /// again.
    fn kill_leader(&mut self, secs: u64) -> Result<Option<Violation>> {
        let r = self.leader()?;
        let killed = self.managers[r].identity();
        self.managers[r].kill()?;
        let t = Instant::now();
        let mut holders = Vec::new();
        let mut took: Option<(String, f64)> = None;
        while t.elapsed() < Duration::from_secs(secs) {
            if let Ok(h) = self.lease_holder() {
                if took.is_none() && !h.is_empty() && h != killed {
                    took = Some((h.clone(), t.elapsed().as_secs_f64()));
                }
                holders.push(h);
            }
            thread::sleep(Duration::from_secs(1));
        }
        let pid = self.managers[r].start()?;
        self.log(&match &took {
            Some((h, at)) => format!(
                "   leader {killed} killed: {h} took the Lease after {at:.1}s; {killed} started again (pid {pid})"
            ),
            None => format!(
                "   leader {killed} killed: no other replica took the Lease in {secs}s; started again (pid {pid})"
            ),
        });
        Ok(invariants::leader_taken_over(&killed, &holders, secs))
    }

    /// The leader Lease's holder identity now (empty when vacant).
    fn lease_holder(&self) -> Result<String> {
        let (ns, name) = self.managers[0]
            .lease()
            .context("the manager names no leader Lease")?;
        Ok(self
            .kube
            .ok(&[
                "get",
                "lease",
                "-n",
                &ns,
                &name,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])?
            .trim()
            .to_owned())
    }

    /// The replica holding the leader Lease now: its holder read from the API (waiting up to 60 s for one of
    /// the replicas to hold it: right after a kill or a freeze it may be vacant until it expires).
    fn leader(&mut self) -> Result<usize> {
        let (ns, name) = self.managers[0]
            .lease()
            .context("the manager names no leader Lease")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last;
        loop {
            match self.lease_holder() {
                Ok(holder) => {
                    if let Some(r) = self.managers.iter().position(|m| m.identity() == holder)
                        && self.managers[r].pid().is_some()
                    {
                        self.log(&format!("   leader: {holder} (Lease {ns}/{name})"));
                        return Ok(r);
                    }
                    last = format!("held by {holder:?}");
                }
                Err(e) => last = format!("{e:#}"),
            }
            if Instant::now() > deadline {
                bail!("no replica holds the leader Lease {ns}/{name} after 60 s: {last}");
            }
            self.supervise();
            thread::sleep(Duration::from_secs(1));
        }
    }

    /// A replica exited on its own (e.g. it lost its leader Lease while the API server was frozen: by design it
    /// stops acting then): restart it as its Pod's kubelet would, and count it.
    fn supervise(&mut self) {
        for r in 0..self.managers.len() {
            let m = &mut self.managers[r];
            if m.pid().is_some() {
                continue;
            }
            let who = m.identity();
            let started = m.start();
            self.report.supervised_restarts += 1;
            match started {
                Ok(pid) => self.log(&format!(
                    "   manager {who} exited on its own: restarted (pid {pid}), as its Pod's kubelet would"
                )),
                Err(e) => self.log(&format!(
                    "   manager {who} exited and could not be restarted: {e:#}"
                )),
            }
        }
    }

    /// The invariants after a step: claims, secrets, memory; after a removal, the freed hosts' reset; after
    /// the delete, no claim left.
    fn checks(&mut self, step: Step) -> Vec<Violation> {
        let mut out = self.journal_checks("after the step");
        let insts = self.kube.list("kkinstances", true, &[]);
        let leases = self.kube.list(
            "leases",
            true,
            &["-l", "infrastructure.cluster.x-k8s.io/host-claim"],
        );
        match (&insts, &leases) {
            (Ok(i), Ok(l)) => {
                out.extend(invariants::double_claims(i, l, &self.host_ids));
                let claimed = i["items"].as_array().map_or(0, Vec::len);
                let pairs = invariants::claimed_pairs(l, &self.host_ids);
                self.log(&format!(
                    "   claims: {claimed} KKInstances, {pairs} hosts with both claim Leases compared"
                ));
                if step == Step::Delete {
                    out.extend(invariants::leftover_claims(
                        i,
                        l,
                        &self.cli.namespace,
                        &self.claims_before,
                    ));
                }
            }
            _ => self.log("   (claims not checked: the API did not answer)"),
        }
        if matches!(step, Step::ScaleDown | Step::Delete)
            && let Ok(i) = &insts
        {
            let claimed: BTreeSet<&str> = i["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x["spec"]["address"].as_str())
                .collect();
            let script = invariants::host_probe_script(capkk_service::bootstrap::OWNED_PATHS);
            for (n, h) in self.host_ids.iter().enumerate() {
                if claimed.contains(h.address.as_str()) {
                    continue;
                }
                let out_text = match self.hosts.inside(n, &script) {
                    Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
                    Err(e) => format!("cannot run the probe: {e:#}"),
                };
                out.extend(invariants::host_clean_against(
                    &h.name,
                    &out_text,
                    &self.baseline[n],
                ));
            }
        }
        out.extend(self.secret_checks());
        for r in 0..self.managers.len() {
            if let Some(pid) = self.managers[r].pid()
                && let Some(rss) = fs::read_to_string(format!("/proc/{pid}/status"))
                    .ok()
                    .and_then(|s| invariants::rss_kib(&s))
            {
                self.report.max_rss_kib = self.report.max_rss_kib.max(rss);
                out.extend(invariants::rss_bounded(rss, self.cli.rss_max_mib * 1024));
            }
        }
        out
    }

    /// Host `n`'s provisioning journals by plan hash, read out of band (as the reset probe reads a host).
    fn read_journals(&self, n: usize) -> std::result::Result<BTreeMap<String, String>, String> {
        let script = invariants::journals_script(capkk_service::provisioning::STATE_DIR);
        match self.hosts.inside(n, &script) {
            Ok(o) => invariants::parse_journals(&String::from_utf8_lossy(&o.stdout)),
            Err(e) => Err(format!("cannot run the journal reader: {e:#}")),
        }
    }

    /// `no-command-ran-twice` on every host with a claim (a KKInstance of any namespace listing its address):
    /// its journals against the restarts the campaign injected on it. Each violation and each allowed re-run is
    /// reported once; a host seen without a claim (reset) starts over without restarts.
    fn journal_checks(&mut self, when: &str) -> Vec<Violation> {
        let Ok(insts) = retry(|| self.kube.list("kkinstances", true, &[])) else {
            self.log(&format!(
                "   (journals not checked {when}: the API did not answer)"
            ));
            return Vec::new();
        };
        let claimed: BTreeSet<String> = insts["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x["spec"]["address"].as_str().map(str::to_owned))
            .collect();
        let mut out = Vec::new();
        let (mut hosts, mut journals, mut runs) = (0, 0, 0);
        for n in 0..self.host_ids.len() {
            let name = self.host_ids[n].name.clone();
            if !claimed.contains(&self.host_ids[n].address) {
                self.restarts[n].clear();
                continue;
            }
            hosts += 1;
            let verdict = match self.read_journals(n) {
                Ok(j) => {
                    journals += j.len();
                    invariants::commands_ran_once(&name, &j, &self.restarts[n])
                }
                Err(e) => invariants::JournalVerdict {
                    violations: vec![Violation {
                        check: invariants::NO_COMMAND_TWICE.into(),
                        message: format!("host {name}: its journals could not be read: {e}"),
                    }],
                    ..Default::default()
                },
            };
            runs += verdict.command_runs;
            for v in verdict.violations {
                if self.journal_reported.insert(v.message.clone()) {
                    out.push(v);
                }
            }
            for a in verdict.allowed {
                if !self.report.allowed_reruns.contains(&a) {
                    self.log(&format!("   allowed re-run: {a}"));
                    self.report.allowed_reruns.push(a);
                }
            }
        }
        self.log(&format!(
            "   journals {when}: {hosts} claimed hosts, {journals} journals, {runs} command runs compared"
        ));
        out
    }

    /// Secrets of the namespace (SSH private keys, the bootstrap data's tokens) looked for in the manager's
    /// log, the namespace's events and the status of every object of the cluster.
    fn secret_checks(&mut self) -> Vec<Violation> {
        if let Ok(list) = self.kube.list("secrets", false, &[]) {
            let b64 = base64::engine::general_purpose::STANDARD;
            for s in list["items"].as_array().into_iter().flatten() {
                let data = &s["data"];
                let decode = |k: &str| {
                    data[k]
                        .as_str()
                        .and_then(|v| b64.decode(v).ok())
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                };
                let mut found = Vec::new();
                if let Some(key) = decode("privateKey") {
                    found.extend(invariants::private_key_secrets(&key));
                }
                if let Some(value) = decode("value") {
                    found.extend(invariants::bootstrap_token_secrets(&value));
                }
                for f in found {
                    if !self.secrets.iter().any(|x| x.value == f.value) {
                        self.secrets.push(f);
                    }
                }
            }
        }
        if self.secrets.is_empty() {
            return vec![Violation {
                check: invariants::NO_SECRET_LEAK.into(),
                message:
                    "no secret value found to look for (no privateKey Secret in the namespace): the check \
                          would pass vacuously"
                        .into(),
            }];
        }
        let mut out = Vec::new();
        let keys = self.secrets.iter().filter(|s| s.what.starts_with("SSH")).count();
        self.log(&format!(
            "   looking for {} secret values ({keys} private-key lines, {} bootstrap-token forms)",
            self.secrets.len(),
            self.secrets.len() - keys
        ));
        for m in &self.managers {
            let log = fs::read_to_string(&m.log).unwrap_or_default();
            out.extend(invariants::secret_leaks(
                &m.log.display().to_string(),
                &log,
                &self.secrets,
            ));
        }
        if let Ok(ev) = self.kube.list("events", false, &[]) {
            out.extend(invariants::secret_leaks(
                "the namespace's events",
                &ev.to_string(),
                &self.secrets,
            ));
        }
        if let Ok(objs) = self.kube.list(
            "clusters.cluster.x-k8s.io,machines.cluster.x-k8s.io,kkclusters,kkmachines,kkinstances",
            false,
            &[],
        ) {
            let statuses: Vec<String> = objs["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| {
                    format!(
                        "{} {}: {}",
                        o["kind"].as_str().unwrap_or_default(),
                        o["metadata"]["name"].as_str().unwrap_or_default(),
                        o["status"]
                    )
                })
                .collect();
            out.extend(invariants::secret_leaks(
                "object status",
                &statuses.join("\n"),
                &self.secrets,
            ));
        }
        out
    }
}

/// `f` up to 5 times, 3 s apart (the API server may be slow right after a fault).
fn retry<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let mut last = None;
    for _ in 0..5 {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) => last = Some(e),
        }
        thread::sleep(Duration::from_secs(3));
    }
    Err(last.expect("tried at least once"))
}
