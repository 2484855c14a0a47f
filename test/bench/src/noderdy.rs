//! `capkk-bench node-ready`: from the captures of real-VM cluster runs (`test/vm/real.sh`), per Machine the time
//! from its creation to its Node turning Ready, split into where it went, and how much of it was ours: the host
//! phases (bootstrap, binary, containermanager, repository) that run before kubeadm. It runs nothing; it reads
//! what a run left behind, so the same captures give the same table.
//!
//! A capture is a directory (`$WORK/timeline/` of a real.sh run; the format is in docs/benchmarks.md):
//! `meta.json`, `machines.json`, `kkmachines.json`, `kkinstances.json` (`kubectl get -o json` on the
//! management cluster), `nodes.json` (the workload cluster's Nodes), `clock.txt` (each VM's clock against the
//! host's) and the run's manager log (`../manager.log` unless `--manager-log` names it).
//!
//! Three clocks meet here: the management cluster's (object timestamps, whole seconds), the manager's log
//! (the same host, microseconds) and each VM's (the Node's `Ready` transition, whole seconds). The VM's is put
//! onto the host's with the offset `clock.txt` measured; the other two are the same clock.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{hosts::write, measure::median, results};

/// The host phases before provisioning, in the order the manager runs them (the table's columns).
const PREP_PHASES: [&str; 4] = ["bootstrap", "binary", "containermanager", "repository"];
/// The phase that runs the bootstrap data (kubeadm init/join).
const PROVISIONING: &str = "provisioning";

/// Arguments of `capkk-bench node-ready`.
#[derive(clap::Args, Clone)]
pub struct NodeReadyArgs {
    /// Capture directories, one per run (`$WORK/timeline/` of a `test/vm/real.sh` run).
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// The runs' manager logs, in the order of the runs (once per run) [default: `<run>/../manager.log`].
    #[arg(long)]
    manager_log: Vec<PathBuf>,
    /// Where the table and the JSON results go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
}

/// Read the captures, write `node-ready-table.md` and `node-ready-results.json` to `--out`, print the table.
pub fn run(a: &NodeReadyArgs) -> anyhow::Result<()> {
    if !a.manager_log.is_empty() && a.manager_log.len() != a.runs.len() {
        bail!(
            "--manager-log is given {} times for {} runs: give it once per run, in the runs' order, or not at all",
            a.manager_log.len(),
            a.runs.len()
        );
    }
    let runs = a
        .runs
        .iter()
        .enumerate()
        .map(|(i, dir)| Run::read(dir, a.manager_log.get(i).map(PathBuf::as_path)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let text = render(&runs);
    std::fs::create_dir_all(&a.out)?;
    let (meta, body) = results_json(&runs);
    results::write(&a.out.join("node-ready-results.json"), &meta, body)?;
    write(&a.out.join("node-ready-table.md"), text.as_bytes())?;
    print!("{text}");
    Ok(())
}

/// A run's `meta.json`, written by real.sh.
#[derive(Clone, Debug, Default, Deserialize)]
struct RunMeta {
    run: String,
    variant: Variant,
    #[serde(default)]
    commit: String,
    #[serde(default)]
    manager: String,
    /// `/proc/loadavg` when the run started.
    #[serde(default)]
    load_start: String,
    /// `/proc/loadavg` when the capture was taken.
    #[serde(default)]
    load_end: String,
    #[serde(default)]
    started_epoch_s: Option<f64>,
    #[serde(default)]
    captured_epoch_s: Option<f64>,
}

/// Which manager a run measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Variant {
    /// The manager before the change (phases strictly serial, after the bootstrap data).
    #[default]
    Before,
    /// The manager after it.
    After,
}

impl Variant {
    fn as_str(self) -> &'static str {
        match self {
            Variant::Before => "before",
            Variant::After => "after",
        }
    }
}

/// A Machine's role, from the `cluster.x-k8s.io/control-plane` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    ControlPlane,
    Worker,
}

impl Role {
    /// As in the ratio lines.
    fn key(self) -> &'static str {
        match self {
            Role::ControlPlane => "control-plane",
            Role::Worker => "worker",
        }
    }

    fn display(self) -> &'static str {
        match self {
            Role::ControlPlane => "control plane",
            Role::Worker => "worker",
        }
    }
}

/// One capture, read and measured.
#[derive(Debug)]
struct Run {
    dir: PathBuf,
    manager_log: PathBuf,
    meta: RunMeta,
    machines: Vec<MachineTimes>,
}

impl Run {
    fn read(dir: &Path, manager_log: Option<&Path>) -> anyhow::Result<Self> {
        let meta: RunMeta = serde_json::from_slice(&read(&dir.join("meta.json"))?)
            .with_context(|| format!("parsing {}", dir.join("meta.json").display()))?;
        let log_path = manager_log.map_or_else(|| dir.join("..").join("manager.log"), Path::to_path_buf);
        let log_text = String::from_utf8_lossy(&read(&log_path).with_context(|| {
            format!(
                "the run's manager log (default: the capture's ../manager.log; --manager-log names another) for {}",
                dir.display()
            )
        })?)
        .into_owned();
        let clock_path = dir.join("clock.txt");
        let clock = parse_clock(&String::from_utf8_lossy(&read(&clock_path)?))
            .with_context(|| format!("parsing {}", clock_path.display()))?;
        let objects = Objects {
            machines: items(&dir.join("machines.json"))?,
            kkmachines: items(&dir.join("kkmachines.json"))?,
            kkinstances: items(&dir.join("kkinstances.json"))?,
            nodes: items(&dir.join("nodes.json"))?,
        };
        let events = parse_log(&log_text);
        let mut machines = objects
            .machines
            .iter()
            .map(|m| MachineTimes::of(m, &objects, &clock, &events))
            .collect::<anyhow::Result<Vec<_>>>()?;
        machines.sort_by(|a, b| {
            (a.role.cmp(&b.role))
                .then(a.created.total_cmp(&b.created))
                .then(a.name.cmp(&b.name))
        });
        Ok(Self {
            dir: dir.to_path_buf(),
            manager_log: log_path,
            meta,
            machines,
        })
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// The objects of a `kubectl get -o json` (a List; a single object is taken as a list of one).
fn items(path: &Path) -> anyhow::Result<Vec<Value>> {
    let v: Value =
        serde_json::from_slice(&read(path)?).with_context(|| format!("parsing {}", path.display()))?;
    Ok(match v.get("items") {
        Some(Value::Array(a)) => a.clone(),
        _ if v.get("metadata").is_some() => vec![v],
        _ => bail!("{}: neither a List nor an object", path.display()),
    })
}

/// The objects of one capture.
struct Objects {
    machines: Vec<Value>,
    kkmachines: Vec<Value>,
    kkinstances: Vec<Value>,
    nodes: Vec<Value>,
}

/// `clock.txt`: each VM's clock offset (VM − host, seconds) from `<vm> <host_before> <vm_epoch> <host_after>`.
fn parse_clock(text: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [vm, before, at, after] = f[..] else {
            bail!("{line:?}: want `<vm> <host_before> <vm_epoch> <host_after>`");
        };
        let num = |s: &str| s.parse::<f64>().with_context(|| format!("{s:?} in {line:?}"));
        // The VM read its clock between the host's two readings, but not in the middle: nearly all of the
        // call is the ssh connection's setup, before the VM runs `date`; its answer reaches the host right
        // after. Against the second reading the offset is off by that way back only (tens of ms), against
        // the middle by half the setup (1-2 s under TCG). The first reading only checks the order.
        let (before, at, after) = (num(before)?, num(at)?, num(after)?);
        if after < before {
            bail!("{line:?}: the host's second reading is before its first");
        }
        out.insert(vm.to_owned(), at - after);
    }
    Ok(out)
}

/// An RFC 3339 time (the log's and the API's) as Unix epoch seconds.
fn epoch(s: &str) -> Option<f64> {
    let t: k8s_openapi::jiff::Timestamp = s.trim().parse().ok()?;
    Some(t.as_second() as f64 + f64::from(t.subsec_nanosecond()) / 1e9)
}

/// What one manager log line says about a KKInstance's host work.
#[derive(Clone, Debug, PartialEq)]
enum What {
    /// `Running step i/n: <phase>`, or `... <phase> (alongside <other>)` when it starts beside another.
    PhaseStart {
        phase: String,
        alongside: Option<String>,
    },
    /// `Phase finished phase=<phase> duration_ms=<ms>` (the new manager).
    PhaseFinished { phase: String, duration_s: Option<f64> },
    /// `Host step finished phase=<phase> step=<step> duration_ms=<ms> host_finished_ms=<Some(ms)|None>`.
    StepFinished {
        phase: String,
        step: String,
        duration_s: Option<f64>,
        host_finished: Option<f64>,
    },
    /// `Host prepared; waiting for the bootstrap data`: prepared before the Machine had its data.
    Prepared,
    /// `Host provisioned`.
    Provisioned,
}

/// A line of the manager log that matters.
#[derive(Clone, Debug, PartialEq)]
struct Event {
    /// Epoch seconds (the line's timestamp).
    t: f64,
    /// The KKInstance's name (`<kkcluster>.<host>`).
    instance: String,
    what: What,
}

/// The lines that matter, in time order; everything else is skipped.
fn parse_log(text: &str) -> Vec<Event> {
    let mut out: Vec<Event> = text.lines().filter_map(parse_line).collect();
    // The log is in time order already, except across a manager restart appended to the same file.
    out.sort_by(|a, b| a.t.total_cmp(&b.t));
    out
}

fn parse_line(raw: &str) -> Option<Event> {
    let line = strip_ansi(raw);
    let (stamp, rest) = line.trim_start().split_once(char::is_whitespace)?;
    let t = epoch(stamp)?;
    let instance = field(rest, "kkinstance")?.to_owned();
    let what = if let Some(tail) = after(rest, "Host step finished ") {
        let phase = field(tail, "phase")?.to_owned();
        // A step name has spaces (`runcmd[0]: kubeadm init ...`): it runs up to the next field.
        let start = tail.find(" step=")? + " step=".len();
        let end = tail
            .rfind(" exit_code=")
            .or_else(|| tail.rfind(" duration_ms="))?;
        let step = tail.get(start..end)?.trim().to_owned();
        let host_finished = field(tail, "host_finished_ms")
            .and_then(|v| v.strip_prefix("Some(")?.strip_suffix(')')?.parse::<f64>().ok())
            .map(|ms| ms / 1e3);
        What::StepFinished {
            phase,
            step,
            duration_s: millis(tail),
            host_finished,
        }
    } else if let Some(tail) = after(rest, "Phase finished ") {
        What::PhaseFinished {
            phase: field(tail, "phase")?.to_owned(),
            duration_s: millis(tail),
        }
    } else if let Some(tail) = after(rest, "Running step ") {
        // `2/5: binary kkinstance=...` or `4/5: repository (alongside binary) kkinstance=...`
        let (_, named) = tail.split_once(": ")?;
        let phase = named.split_whitespace().next()?.to_owned();
        let alongside = named
            .split_once("(alongside ")
            .and_then(|(_, o)| o.split_once(')'))
            .map(|(o, _)| o.trim().to_owned());
        What::PhaseStart { phase, alongside }
    } else if rest.contains("Host prepared; waiting for the bootstrap data") {
        What::Prepared
    } else if rest.contains("Host provisioned") {
        What::Provisioned
    } else {
        return None;
    };
    Some(Event { t, instance, what })
}

/// `text` after `marker` (a message, with the fields that follow it).
fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.find(marker).map(|i| &text[i + marker.len()..])
}

/// The value of ` key=value` (up to the next space).
/// A `key=value` field of a log line; a value logged as a string (`phase="binary"`) loses its quotes.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let tail = after(text, &format!(" {key}="))?;
    tail.split_whitespace().next().map(|v| v.trim_matches('"'))
}

fn millis(text: &str) -> Option<f64> {
    field(text, "duration_ms")?.parse::<f64>().ok().map(|ms| ms / 1e3)
}

/// The log without terminal colours (a manager run on a terminal writes them).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One host phase of a Machine, epoch seconds.
#[derive(Clone, Debug)]
struct Phase {
    name: String,
    start: f64,
    end: Option<f64>,
    /// The phase's own duration: the `Phase finished` line's, else end − start.
    duration_s: Option<f64>,
    /// It started alongside this other phase.
    alongside: Option<String>,
    /// Where the end came from: `logged` (`Phase finished`) or `next` (the next phase's start, serial).
    end_from: &'static str,
}

/// A host step's line (new manager).
#[derive(Clone, Debug)]
struct Step {
    phase: String,
    step: String,
    logged: f64,
    duration_s: Option<f64>,
    /// When the host says it finished, on the host's clock (VM clock corrected by its offset).
    host_finished: Option<f64>,
}

/// Where one Machine's time went. Instants are epoch seconds on the management host's clock.
#[derive(Clone, Debug)]
struct MachineTimes {
    name: String,
    role: Role,
    node: String,
    instance: Option<String>,
    created: f64,
    /// When the Machine had its bootstrap data (`BootstrapConfigReady` True).
    data: Option<f64>,
    data_source: &'static str,
    /// The Node's `Ready` transition, moved onto the host's clock.
    ready: Option<f64>,
    ready_source: &'static str,
    clock_offset_s: Option<f64>,
    phases: Vec<Phase>,
    steps: Vec<Step>,
    prepared: Option<f64>,
    provisioned: Option<f64>,
    notes: Vec<String>,
}

/// The object's `metadata.<key>` string.
fn meta<'a>(o: &'a Value, key: &str) -> &'a str {
    o["metadata"][key].as_str().unwrap_or_default()
}

fn owned_by<'a>(objects: &'a [Value], kind: &str, name: &str, ns: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|o| meta(o, "namespace") == ns)
        .filter(|o| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| refs.iter().any(|r| r["kind"] == kind && r["name"] == name))
        })
        .collect()
}

/// The `lastTransitionTime` of condition `kind` in `conditions` when it is True.
fn true_since(conditions: &Value, kind: &str) -> Option<f64> {
    conditions
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
        .and_then(|c| epoch(c["lastTransitionTime"].as_str()?))
}

impl MachineTimes {
    fn of(
        m: &Value,
        objects: &Objects,
        clock: &BTreeMap<String, f64>,
        events: &[Event],
    ) -> anyhow::Result<Self> {
        let name = meta(m, "name").to_owned();
        let ns = meta(m, "namespace");
        let created = epoch(meta(m, "creationTimestamp"))
            .with_context(|| format!("Machine {name}: no creationTimestamp"))?;
        let role = if m["metadata"]["labels"]
            .get("cluster.x-k8s.io/control-plane")
            .is_some()
        {
            Role::ControlPlane
        } else {
            Role::Worker
        };
        let mut notes = Vec::new();
        // Machine → KKMachine (its ownerReference; else the Machine's infrastructureRef) → KKInstance.
        let kkmachine = owned_by(&objects.kkmachines, "Machine", &name, ns)
            .first()
            .copied()
            .or_else(|| {
                let infra = m["spec"]["infrastructureRef"]["name"].as_str()?;
                objects
                    .kkmachines
                    .iter()
                    .find(|k| meta(k, "name") == infra && meta(k, "namespace") == ns)
            });
        let kkinstance = kkmachine.and_then(|k| {
            owned_by(&objects.kkinstances, "KKMachine", meta(k, "name"), ns)
                .into_iter()
                .max_by(|a, b| meta(a, "creationTimestamp").cmp(meta(b, "creationTimestamp")))
        });
        if kkinstance.is_none() {
            notes.push("no KKInstance owned by its KKMachine in the capture".into());
        }
        let instance = kkinstance.map(|k| meta(k, "name").to_owned());
        let node = m["status"]["nodeRef"]["name"]
            .as_str()
            .or_else(|| kkinstance.and_then(|k| k["spec"]["name"].as_str()))
            .unwrap_or_default()
            .to_owned();

        // The bootstrap data: CAPI v1beta2 mirrors the KubeadmConfig's readiness (its data Secret written) as
        // BootstrapConfigReady; `status.initialization.bootstrapDataSecretCreated` is a bool with no time.
        let conditions = &m["status"]["conditions"];
        let (data, data_source) = match true_since(conditions, "BootstrapConfigReady") {
            Some(t) => (Some(t), "Machine BootstrapConfigReady"),
            None => match true_since(
                &m["status"]["deprecated"]["v1beta1"]["conditions"],
                "BootstrapReady",
            ) {
                Some(t) => (Some(t), "Machine v1beta1 BootstrapReady"),
                None => {
                    notes.push(
                        "no bootstrap data time: all of our phases counted on the critical path".into(),
                    );
                    (None, "")
                }
            },
        };

        let clock_offset_s = clock.get(&node).copied();
        let node_obj = objects.nodes.iter().find(|n| meta(n, "name") == node);
        let node_ready = node_obj.and_then(|n| true_since(&n["status"]["conditions"], "Ready"));
        let (ready, ready_source) = match (node_ready, clock_offset_s) {
            (Some(t), Some(off)) => (Some(t - off), "Node Ready (VM clock, corrected)"),
            (Some(t), None) => {
                notes.push(format!(
                    "no clock.txt line for {node}: its Node's time is uncorrected"
                ));
                (Some(t), "Node Ready (VM clock, uncorrected)")
            }
            (None, _) => match true_since(conditions, "NodeReady") {
                Some(t) => {
                    notes.push("Node not Ready in nodes.json: the Machine's NodeReady condition (when the management cluster saw it)".into());
                    (Some(t), "Machine NodeReady")
                }
                None => {
                    notes.push("its Node is not Ready".into());
                    (None, "")
                }
            },
        };

        let mut times = Self {
            name,
            role,
            node,
            instance,
            created,
            data,
            data_source,
            ready,
            ready_source,
            clock_offset_s,
            phases: Vec::new(),
            steps: Vec::new(),
            prepared: None,
            provisioned: None,
            notes,
        };
        if let Some(inst) = times.instance.clone() {
            times.host_work(events, &inst, clock_offset_s.unwrap_or(0.0));
        }
        Ok(times)
    }

    /// Take this Machine's host work from the log: its KKInstance's lines from the first phase that started
    /// after the Machine was created to the first `Host provisioned` after that. A host reused by a later
    /// Machine (a remediation, a scale down and up) keeps its KKInstance name, so the earlier Machine's lines
    /// are before this one's creation.
    fn host_work(&mut self, events: &[Event], instance: &str, offset: f64) {
        let mine: Vec<&Event> = events
            .iter()
            .filter(|e| e.instance == instance && e.t >= self.created)
            .skip_while(|e| !matches!(e.what, What::PhaseStart { .. }))
            .collect();
        let end = mine
            .iter()
            .position(|e| e.what == What::Provisioned)
            .map_or(mine.len(), |i| i + 1);
        let mine = &mine[..end];
        if mine.is_empty() {
            self.notes.push(format!(
                "no host phases of {instance} in the manager log after the Machine was created"
            ));
            return;
        }
        self.provisioned = mine.iter().find(|e| e.what == What::Provisioned).map(|e| e.t);
        self.prepared = mine.iter().find(|e| e.what == What::Prepared).map(|e| e.t);
        for (i, e) in mine.iter().enumerate() {
            match &e.what {
                // The first start of a phase counts: one started again (a restarted manager, a retry) took
                // the whole time from there.
                What::PhaseStart { phase, alongside } if !self.phases.iter().any(|p| &p.name == phase) => {
                    let finished = mine[i..].iter().rev().find_map(|f| match &f.what {
                        What::PhaseFinished { phase: p, duration_s } if p == phase => {
                            Some((f.t, *duration_s))
                        }
                        _ => None,
                    });
                    let (end, duration_s, end_from) = if phase == PROVISIONING {
                        (self.provisioned, self.provisioned.map(|p| p - e.t), "provisioned")
                    } else if let Some((t, d)) = finished {
                        (Some(t), d.or(Some(t - e.t)), "logged")
                    } else {
                        // Serial phases (the old manager): a phase ends where the next begins, or where the
                        // host was prepared or provisioned. A phase started alongside this one does not end it.
                        let next = mine[i + 1..].iter().find(|f| match &f.what {
                            What::PhaseStart { alongside, .. } => {
                                alongside.as_deref() != Some(phase.as_str())
                            }
                            What::Prepared | What::Provisioned => true,
                            _ => false,
                        });
                        (next.map(|f| f.t), next.map(|f| f.t - e.t), "next")
                    };
                    self.phases.push(Phase {
                        name: phase.clone(),
                        start: e.t,
                        end,
                        duration_s,
                        alongside: alongside.clone(),
                        end_from,
                    });
                }
                What::StepFinished {
                    phase,
                    step,
                    duration_s,
                    host_finished,
                } => self.steps.push(Step {
                    phase: phase.clone(),
                    step: step.clone(),
                    logged: e.t,
                    duration_s: *duration_s,
                    host_finished: host_finished.map(|h| h - offset),
                }),
                _ => {}
            }
        }
    }

    fn phase(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// When host work began: the first host phase's start.
    fn first_phase(&self) -> Option<f64> {
        self.phases
            .iter()
            .filter(|p| p.name != PROVISIONING)
            .map(|p| p.start)
            .min_by(f64::total_cmp)
    }

    fn provisioning_start(&self) -> Option<f64> {
        self.phase(PROVISIONING).map(|p| p.start)
    }

    /// Machine created → Node Ready.
    fn total_s(&self) -> Option<f64> {
        Some(self.ready? - self.created)
    }

    /// Machine created → its first host phase.
    fn to_host_work_s(&self) -> Option<f64> {
        Some(self.first_phase()? - self.created)
    }

    /// Our phases, wall: the first host phase's start → provisioning's start (including any wait for data).
    fn our_phases_s(&self) -> Option<f64> {
        Some(self.provisioning_start()? - self.first_phase()?)
    }

    /// A host prepared before its data: `Host prepared` → provisioning's start (the manager's reaction to the
    /// data included). Zero when the data came first.
    fn waiting_s(&self) -> Option<f64> {
        let start = self.provisioning_start()?;
        Some(self.prepared.filter(|p| *p <= start).map_or(0.0, |p| start - p))
    }

    /// The part of our phases after the Machine had its bootstrap data: from then (or from the first phase,
    /// when the data came first) to provisioning's start. Before the data, kubeadm could not have run anyway.
    fn critical_s(&self) -> Option<f64> {
        let (first, start) = (self.first_phase()?, self.provisioning_start()?);
        let from = self.data.map_or(first, |d| d.max(first));
        Some((start - from).clamp(0.0, start - first))
    }

    /// Provisioning (kubeadm init/join and the bootstrap data's other commands): its start → `Host provisioned`.
    fn provisioning_s(&self) -> Option<f64> {
        Some(self.provisioned? - self.provisioning_start()?)
    }

    /// The kubeadm command's own time: the provisioning step running `kubeadm init` or `kubeadm join` (other
    /// commands name kubeadm too: its config path, `kubeadm init phase addon`).
    fn kubeadm_s(&self) -> Option<f64> {
        self.steps
            .iter()
            .filter(|s| s.phase == PROVISIONING)
            .find(|s| s.step.contains("kubeadm init --") || s.step.contains("kubeadm join"))
            .or_else(|| {
                self.steps
                    .iter()
                    .find(|s| s.phase == PROVISIONING && s.step.contains("kubeadm init"))
            })
            .and_then(|s| s.duration_s)
    }

    /// `Host provisioned` → Node Ready (negative when the Node was Ready before the bootstrap data's last
    /// command ended: kubeadm init's addon phases and the commands after it run on a Ready node).
    fn provisioned_to_ready_s(&self) -> Option<f64> {
        Some(self.ready? - self.provisioned?)
    }

    fn json(&self) -> Value {
        // Milliseconds are the log's resolution; more digits would be the float arithmetic's.
        let rel = |t: f64| r3(t - self.created);
        json!({
            "machine": self.name,
            "role": self.role.key(),
            "node": self.node,
            "kkinstance": self.instance,
            "created_epoch_s": self.created,
            "bootstrap_data_s": self.data.map(rel),
            "bootstrap_data_source": self.data_source,
            "node_ready_s": self.ready.map(rel),
            "node_ready_source": self.ready_source,
            "clock_offset_s": self.clock_offset_s.map(r3),
            "prepared_s": self.prepared.map(rel),
            "provisioned_s": self.provisioned.map(rel),
            "split": {
                "total_s": self.total_s().map(r3),
                "to_host_work_s": self.to_host_work_s().map(r3),
                "our_phases_s": self.our_phases_s().map(r3),
                "waiting_for_data_s": self.waiting_s().map(r3),
                "our_phases_critical_s": self.critical_s().map(r3),
                "provisioning_s": self.provisioning_s().map(r3),
                "kubeadm_s": self.kubeadm_s().map(r3),
                "provisioned_to_ready_s": self.provisioned_to_ready_s().map(r3),
            },
            "phases": self.phases.iter().map(|p| json!({
                "phase": p.name,
                "start_s": rel(p.start),
                "end_s": p.end.map(rel),
                "duration_s": p.duration_s.map(r3),
                "alongside": p.alongside,
                "end_from": p.end_from,
            })).collect::<Vec<_>>(),
            "steps": self.steps.iter().map(|s| json!({
                "phase": s.phase,
                "step": s.step,
                "logged_s": rel(s.logged),
                "duration_s": s.duration_s.map(r3),
                "host_finished_s": s.host_finished.map(rel),
            })).collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }
}

/// Median, min and max of the values present.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: impl IntoIterator<Item = Option<f64>>) -> Option<Self> {
        let v: Vec<f64> = values.into_iter().flatten().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        Some(Self {
            median: r3(median(&v)),
            min: r3(v.iter().copied().fold(f64::INFINITY, f64::min)),
            max: r3(v.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        })
    }

    fn cell(s: Option<Self>) -> String {
        s.map_or("—".into(), |s| {
            format!("{:.1} ({:.1}–{:.1})", s.median, s.min, s.max)
        })
    }

    fn json(s: Option<Self>) -> Value {
        s.map_or(
            Value::Null,
            |s| json!({"median": s.median, "min": s.min, "max": s.max}),
        )
    }
}

/// One variant and role over its runs.
#[derive(Debug)]
struct Group {
    variant: Variant,
    role: Role,
    machines: usize,
    runs: usize,
    total: Option<Spread>,
    ours: Option<Spread>,
    critical: Option<Spread>,
}

fn groups(runs: &[Run]) -> Vec<Group> {
    let mut by: BTreeMap<(Variant, Role), Vec<(usize, &MachineTimes)>> = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        for m in &r.machines {
            by.entry((r.meta.variant, m.role)).or_default().push((i, m));
        }
    }
    by.into_iter()
        .map(|((variant, role), ms)| {
            let mut run_ids: Vec<usize> = ms.iter().map(|(i, _)| *i).collect();
            run_ids.dedup();
            Group {
                variant,
                role,
                machines: ms.len(),
                runs: run_ids.len(),
                total: Spread::of(ms.iter().map(|(_, m)| m.total_s())),
                ours: Spread::of(ms.iter().map(|(_, m)| m.our_phases_s())),
                critical: Spread::of(ms.iter().map(|(_, m)| m.critical_s())),
            }
        })
        .collect()
}

/// after/before of the medians of one role (none where a median is missing or zero).
struct Ratio {
    role: Role,
    node_ready: Option<f64>,
    our_phases: Option<f64>,
    critical: Option<f64>,
}

/// The roles measured with both variants.
fn ratios(groups: &[Group]) -> Vec<Ratio> {
    let find = |v: Variant, r: Role| groups.iter().find(|g| g.variant == v && g.role == r);
    let ratio = |a: Option<Spread>, b: Option<Spread>| {
        let (a, b) = (a?.median, b?.median);
        Some(a / b).filter(|x| x.is_finite())
    };
    [Role::ControlPlane, Role::Worker]
        .into_iter()
        .filter_map(|role| {
            let (b, a) = (find(Variant::Before, role)?, find(Variant::After, role)?);
            Some(Ratio {
                role,
                node_ready: ratio(a.total, b.total),
                our_phases: ratio(a.ours, b.ours),
                critical: ratio(a.critical, b.critical),
            })
        })
        .collect()
}

/// Rounded to milliseconds.
fn r3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn secs(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.1}"))
}

fn ratio_text(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.2}"))
}

/// The first three fields of a `/proc/loadavg` line (the 1, 5 and 15 minute averages).
fn load3(s: &str) -> String {
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The markdown report: the runs, a table per run, the summary and the ratio lines last.
fn render(runs: &[Run]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "capkk-bench node-ready: Machine created → Node Ready, and our phases' share ({} runs)",
        runs.len()
    );
    let _ = writeln!(s);
    for line in [
        "Seconds, on the management host's clock. Sources: Machine created = its `creationTimestamp`; bootstrap \
         data = its `BootstrapConfigReady` condition; Node Ready = the Node's `Ready` transition, on its VM's clock \
         moved onto the host's by `clock.txt`'s offset; phases = the manager log.",
        "- **our phases**: the first host phase's start → provisioning's start: bootstrap, binary, \
         containermanager, repository (∥ = started alongside another phase: the phases then add up to more than \
         the wall)",
        "- **waiting for data**: a host prepared before its bootstrap data, `Host prepared` → provisioning's start",
        "- **on the critical path**: the part of our phases after the Machine had its bootstrap data; **share**: \
         that / created → Node Ready",
        "- **provisioning**: its start → `Host provisioned`; **kubeadm**: the init/join command alone; \
         **provisioned → Ready** is negative when the Node was Ready before the bootstrap data's last command \
         ended",
    ] {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| run | variant | commit | machines | load at start | load at end | captured after |"
    );
    let _ = writeln!(s, "|---|---|---|---:|---|---|---:|");
    for r in runs {
        let took = r
            .meta
            .started_epoch_s
            .zip(r.meta.captured_epoch_s)
            .map_or("—".into(), |(a, b)| format!("{:.0} s", b - a));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {took} |",
            r.meta.run,
            r.meta.variant.as_str(),
            r.meta.commit,
            r.machines.len(),
            load3(&r.meta.load_start),
            load3(&r.meta.load_end),
        );
    }
    for r in runs {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "### {} ({}, {})",
            r.meta.run,
            r.meta.variant.as_str(),
            r.dir.display()
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "| Machine (Node) | role | created → Node Ready | created → host work | our phases | {} | waiting for data | on the critical path | share | provisioning | kubeadm | provisioned → Ready |",
            PREP_PHASES.join(" | ")
        );
        let _ = writeln!(s, "|---|---|{}", "---:|".repeat(PREP_PHASES.len() + 9));
        let mut notes = Vec::new();
        for m in &r.machines {
            let phases: Vec<String> = PREP_PHASES
                .iter()
                .map(|p| {
                    m.phase(p).map_or("—".into(), |p| {
                        format!(
                            "{}{}",
                            secs(p.duration_s),
                            if p.alongside.is_some() { " ∥" } else { "" }
                        )
                    })
                })
                .collect();
            let share = m
                .critical_s()
                .zip(m.total_s())
                .filter(|(_, t)| *t > 0.0)
                .map_or("—".into(), |(c, t)| format!("{:.0} %", 100.0 * c / t));
            let _ = writeln!(
                s,
                "| {} ({}) | {} | {} | {} | {} | {} | {} | {} | {share} | {} | {} | {} |",
                m.name,
                m.node,
                m.role.display(),
                secs(m.total_s()),
                secs(m.to_host_work_s()),
                secs(m.our_phases_s()),
                phases.join(" | "),
                secs(m.waiting_s()),
                secs(m.critical_s()),
                secs(m.provisioning_s()),
                secs(m.kubeadm_s()),
                secs(m.provisioned_to_ready_s()),
            );
            notes.extend(m.notes.iter().map(|n| format!("{}: {n}", m.name)));
        }
        if !notes.is_empty() {
            let _ = writeln!(s);
            for n in notes {
                let _ = writeln!(s, "- {n}");
            }
        }
    }
    let gs = groups(runs);
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "### Summary: median (min–max) over the Machines of each variant and role"
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| variant | role | Machines (runs) | created → Node Ready | our phases | on the critical path | share (of the medians) |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|");
    for g in &gs {
        let share = g
            .critical
            .zip(g.total)
            .filter(|(_, t)| t.median > 0.0)
            .map_or("—".into(), |(c, t)| {
                format!("{:.0} %", 100.0 * c.median / t.median)
            });
        let _ = writeln!(
            s,
            "| {} | {} | {} ({}) | {} | {} | {} | {share} |",
            g.variant.as_str(),
            g.role.display(),
            g.machines,
            g.runs,
            Spread::cell(g.total),
            Spread::cell(g.ours),
            Spread::cell(g.critical),
        );
    }
    let rs = ratios(&gs);
    if !rs.is_empty() {
        let _ = writeln!(s);
        for Ratio {
            role,
            node_ready: total,
            our_phases: ours,
            critical,
        } in &rs
        {
            let _ = writeln!(
                s,
                "node-ready {} after/before: {}",
                role.key(),
                ratio_text(*total)
            );
            let _ = writeln!(s, "our-phases {} after/before: {}", role.key(), ratio_text(*ours));
            let _ = writeln!(
                s,
                "our-phases-critical {} after/before: {}",
                role.key(),
                ratio_text(*critical)
            );
        }
    }
    s
}

/// The results file: `meta` as the other benches write it, then every run's Machines and the summary.
fn results_json(runs: &[Run]) -> (results::Meta, Value) {
    // The measurement is the runs': their span and loads, not this process's (which only reads them).
    let mut meta = results::Meta::new("node-ready", std::time::SystemTime::now(), "");
    let by_start = |r: &&Run| r.meta.started_epoch_s.unwrap_or(f64::INFINITY);
    if let Some(first) = runs.iter().min_by(|a, b| by_start(a).total_cmp(&by_start(b))) {
        meta.started_epoch_s = first.meta.started_epoch_s.unwrap_or(meta.started_epoch_s);
        meta.load_start = load3(&first.meta.load_start);
    }
    let by_end = |r: &&Run| r.meta.captured_epoch_s.unwrap_or(f64::NEG_INFINITY);
    if let Some(last) = runs.iter().max_by(|a, b| by_end(a).total_cmp(&by_end(b))) {
        meta.load_end = load3(&last.meta.load_end);
    }
    let gs = groups(runs);
    let body = json!({
        "sources": {
            "created": "Machine metadata.creationTimestamp (management cluster, whole seconds)",
            "bootstrap_data": "Machine status.conditions BootstrapConfigReady True lastTransitionTime (else status.deprecated.v1beta1 BootstrapReady)",
            "node_ready": "Node status.conditions Ready True lastTransitionTime (the VM's clock, whole seconds) minus clock.txt's offset",
            "phases": "manager log: Running step (phase start), Phase finished (its end, when logged; else the next phase's start), Host prepared, Host provisioned",
            "times": "seconds after the Machine's creation",
        },
        "runs": runs.iter().map(|r| json!({
            "run": r.meta.run,
            "variant": r.meta.variant.as_str(),
            "commit": r.meta.commit,
            "manager": r.meta.manager,
            "load_start": load3(&r.meta.load_start),
            "load_end": load3(&r.meta.load_end),
            "started_epoch_s": r.meta.started_epoch_s,
            "captured_epoch_s": r.meta.captured_epoch_s,
            "capture": r.dir.display().to_string(),
            "manager_log": r.manager_log.display().to_string(),
            "machines": r.machines.iter().map(MachineTimes::json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "summary": gs.iter().map(|g| json!({
            "variant": g.variant.as_str(),
            "role": g.role.key(),
            "machines": g.machines,
            "runs": g.runs,
            "node_ready_s": Spread::json(g.total),
            "our_phases_s": Spread::json(g.ours),
            "our_phases_critical_s": Spread::json(g.critical),
        })).collect::<Vec<_>>(),
        "ratios_after_before": ratios(&gs).iter().map(|r| json!({
            "role": r.role.key(),
            "node_ready": r.node_ready,
            "our_phases": r.our_phases,
            "our_phases_critical": r.critical,
        })).collect::<Vec<_>>(),
    });
    (meta, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/node-ready")
            .join(name)
    }

    fn capture(name: &str) -> Run {
        Run::read(&fixture(name).join("timeline"), None).unwrap()
    }

    fn machine<'a>(r: &'a Run, node: &str) -> &'a MachineTimes {
        r.machines.iter().find(|m| m.node == node).unwrap()
    }

    fn near(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-3)
    }

    fn duration(m: &MachineTimes, phase: &str) -> Option<f64> {
        m.phase(phase).and_then(|p| p.duration_s)
    }

    #[test]
    fn the_log_lines_that_matter_are_read_and_the_rest_skipped() {
        let log = "\
2026-11-28T10:00:08.212481Z  INFO capkk_controllers::kkinstance::task: Running step 2/5: binary kkinstance=c.h-1
2026-11-28T10:00:08.215170Z  INFO capkk_controllers::kkinstance::task: Running step 4/5: repository (alongside binary) kkinstance=c.h-1
2026-11-28T10:00:32.401020Z  INFO capkk_controllers::kkinstance::task: Phase finished kkinstance=c.h-1 phase=\"repository\" duration_ms=24186
2026-11-28T10:02:27.330118Z  INFO run_with{host=root@198.18.41.11 plan=97b0 steps=18}: capkk_controllers::kkinstance::task: Host step finished kkinstance=c.h-1 phase=provisioning step=runcmd[0]: kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo suc ... exit_code=Some(0) duration_ms=96981 host_finished_ms=Some(1795860147330) skipped=false
2026-11-28T10:02:27.330201Z  INFO run_with{host=root@198.18.41.11}: capkk_service::provisioning: Provisioning step finished step=runcmd[0] exit_code=0 duration_ms=96981
2026-11-28T10:00:52.101001Z  INFO capkk_controllers::kkinstance::task: Host prepared; waiting for the bootstrap data kkinstance=c.h-2
\u{1b}[2m2026-11-28T10:02:33.462011Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m capkk_controllers::kkinstance::task: Host provisioned kkinstance=c.h-1
2026-11-28T10:00:04.100122Z  INFO reconcile{kind=\"KKInstance\" name=c.h-1}: capkk_controllers::kkinstance: Starting host work
";
        let what: Vec<What> = parse_log(log).into_iter().map(|e| e.what).collect();
        assert_eq!(
            what,
            vec![
                What::PhaseStart {
                    phase: "binary".into(),
                    alongside: None
                },
                What::PhaseStart {
                    phase: "repository".into(),
                    alongside: Some("binary".into())
                },
                What::PhaseFinished {
                    phase: "repository".into(),
                    duration_s: Some(24.186)
                },
                What::Prepared,
                What::StepFinished {
                    phase: "provisioning".into(),
                    step: "runcmd[0]: kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo suc ..."
                        .into(),
                    duration_s: Some(96.981),
                    host_finished: Some(1795860147.33),
                },
                What::Provisioned,
            ],
            "sorted by time; the provisioning service's own line and the reconcile line are not host work"
        );
    }

    #[test]
    fn a_vms_clock_offset_is_its_reading_against_the_hosts_time_when_the_answer_arrived() {
        let clock =
            parse_clock("# vm before at after\nvm-1 100.0 103.5 101.0\nvm-2 100.0 99.0 100.0\n").unwrap();
        assert_eq!(clock["vm-1"], 2.5);
        assert_eq!(clock["vm-2"], -1.0);
        assert!(
            parse_clock("vm-1 101.0 103.5 100.0\n").is_err(),
            "readings out of order"
        );
        assert!(
            parse_clock("vm-1 100.0 103.5\n").is_err(),
            "a line without the host's second reading"
        );
    }

    #[test]
    fn an_old_format_run_ends_each_phase_where_the_next_one_starts() {
        let run = capture("old-format");
        assert_eq!(run.meta.variant, Variant::Before);
        let cp = machine(&run, "cem-1");
        assert_eq!(cp.role, Role::ControlPlane);
        let bootstrap = cp.phase("bootstrap").unwrap();
        let binary = cp.phase("binary").unwrap();
        assert_eq!((bootstrap.end, bootstrap.end_from), (Some(binary.start), "next"));
        assert!(near(
            duration(cp, "repository"),
            cp.provisioning_start().unwrap() - cp.phase("repository").unwrap().start
        ));
        assert!(
            near(
                cp.our_phases_s(),
                ["bootstrap", "binary", "containermanager", "repository"]
                    .iter()
                    .map(|p| duration(cp, p).unwrap())
                    .sum()
            ),
            "serial phases add up to our phases"
        );
        assert!(cp.kubeadm_s().is_none(), "the old manager logs no per-step lines");
    }

    #[test]
    fn the_parts_add_up_to_machine_created_to_node_ready() {
        for name in ["old-format", "new-format"] {
            for m in &capture(name).machines {
                let parts = m.to_host_work_s().unwrap()
                    + m.our_phases_s().unwrap()
                    + m.provisioning_s().unwrap()
                    + m.provisioned_to_ready_s().unwrap();
                assert!(near(m.total_s(), parts), "{name} {}", m.name);
            }
        }
    }

    #[test]
    fn a_machine_on_a_reused_host_is_timed_from_its_own_host_work_not_the_host_s_earlier_machine() {
        let run = capture("old-format");
        let worker = machine(&run, "cem-2");
        assert_eq!(worker.role, Role::Worker);
        // The remediated Machine's work on cem-2 ran from 22:00:39 to 22:04:24; this one was created 22:05:44.
        assert!(worker.phases.iter().all(|p| p.start >= worker.created));
        assert!(worker.provisioned.unwrap() > worker.created);
        assert!(worker.to_host_work_s().unwrap() < 10.0);
    }

    #[test]
    fn a_phase_started_alongside_another_is_timed_by_its_phase_finished_line() {
        let run = capture("new-format");
        let cp = machine(&run, "nra1-1");
        let repository = cp.phase("repository").unwrap();
        assert_eq!(repository.alongside.as_deref(), Some("binary"));
        assert_eq!(repository.end_from, "logged");
        assert!(near(repository.duration_s, 24.186));
        assert!(repository.end.unwrap() < cp.phase("containermanager").unwrap().start);
        let phases: f64 = PREP_PHASES.iter().map(|p| duration(cp, p).unwrap()).sum();
        assert!(
            phases > cp.our_phases_s().unwrap(),
            "phases that overlap add up to more than the wall"
        );
    }

    #[test]
    fn a_phase_started_alongside_does_not_end_the_one_it_runs_beside_when_no_end_is_logged() {
        let mut m = capture("new-format").machines.remove(0);
        let events: Vec<Event> =
            parse_log(&std::fs::read_to_string(fixture("new-format/manager.log")).unwrap())
                .into_iter()
                .filter(|e| !matches!(e.what, What::PhaseFinished { .. }))
                .collect();
        m.phases.clear();
        m.steps.clear();
        let inst = m.instance.clone().unwrap();
        m.host_work(&events, &inst, 0.0);
        let binary = m.phase("binary").unwrap();
        assert_eq!(binary.end_from, "next");
        assert_eq!(binary.end, Some(m.phase("containermanager").unwrap().start));
    }

    #[test]
    fn a_worker_prepared_before_its_bootstrap_data_has_only_the_handover_on_the_critical_path() {
        let run = capture("new-format");
        let worker = machine(&run, "nra1-2");
        assert_eq!(worker.data_source, "Machine BootstrapConfigReady");
        let (data, start) = (worker.data.unwrap(), worker.provisioning_start().unwrap());
        assert!(worker.prepared.unwrap() < data, "prepared before the data");
        assert!(near(worker.critical_s(), start - data));
        assert!(near(worker.waiting_s(), start - worker.prepared.unwrap()));
        assert!(worker.critical_s().unwrap() < worker.waiting_s().unwrap());
        let cp = machine(&run, "nra1-1");
        assert_eq!(
            cp.waiting_s(),
            Some(0.0),
            "the control plane had its data before host work began"
        );
        assert_eq!(
            cp.critical_s(),
            cp.our_phases_s(),
            "so all of its phases were on the critical path"
        );
    }

    #[test]
    fn the_node_ready_time_is_moved_onto_the_host_s_clock_by_the_vm_s_offset() {
        let run = capture("new-format");
        let cp = machine(&run, "nra1-1");
        assert!(near(cp.clock_offset_s, 2.5));
        // The Node says 10:02:21 on a VM 2.5 s ahead: 10:02:18.5 on the host, 138.5 s after 10:00:00.
        assert!(near(cp.total_s(), 138.5));
        assert_eq!(cp.ready_source, "Node Ready (VM clock, corrected)");
        assert!(
            cp.provisioned_to_ready_s().unwrap() < 0.0,
            "Ready before kubeadm init's later commands ended"
        );
    }

    #[test]
    fn the_kubeadm_step_is_the_init_or_join_command_not_a_later_command_that_names_kubeadm() {
        let run = capture("new-format");
        assert!(
            near(machine(&run, "nra1-1").kubeadm_s(), 96.981),
            "not runcmd[1], which reads kubeadm.yaml"
        );
        assert!(near(machine(&run, "nra1-2").kubeadm_s(), 28.407));
    }

    #[test]
    fn the_summary_has_a_ratio_line_per_role_when_both_variants_were_measured() {
        let runs = [capture("old-format"), capture("new-format")];
        let text = render(&runs);
        for role in ["control-plane", "worker"] {
            for measure in ["node-ready", "our-phases", "our-phases-critical"] {
                let prefix = format!("{measure} {role} after/before: ");
                let line = text
                    .lines()
                    .find(|l| l.starts_with(&prefix))
                    .unwrap_or_else(|| panic!("{prefix}"));
                assert!(line[prefix.len()..].parse::<f64>().is_ok(), "{line}");
            }
        }
        assert!(text.contains("| nrB1 | before | 7d7c515 | 2 | 2.05 2.31 2.40 | 2.88 2.52 2.46 |"));
        let only_after = render(&runs[1..]);
        assert!(
            !only_after.contains("after/before"),
            "one variant has nothing to compare with"
        );
    }

    #[test]
    fn the_results_file_starts_with_meta_and_gives_every_machine_s_split() {
        let runs = [capture("old-format"), capture("new-format")];
        let (meta, body) = results_json(&runs);
        assert_eq!(meta.bench, "node-ready");
        assert_eq!(meta.load_start, "2.05 2.31 2.40", "the earliest run's");
        assert_eq!(meta.load_end, "3.10 2.20 1.85", "the latest run's");
        let worker = &body["runs"][1]["machines"][1];
        assert_eq!(worker["role"], "worker");
        assert_eq!(worker["split"]["our_phases_critical_s"], 2.6);
        assert_eq!(worker["phases"][2]["alongside"], "binary");
        assert_eq!(body["summary"].as_array().unwrap().len(), 4);
        assert_eq!(body["ratios_after_before"][0]["role"], "control-plane");
    }

    #[test]
    fn the_manager_log_is_looked_for_beside_the_capture_unless_named() {
        // A capture copied without its run's directory: nothing beside it.
        let dir = std::env::temp_dir().join(format!("capkk-node-ready-{}", std::process::id()));
        let timeline = dir.join("timeline");
        std::fs::create_dir_all(&timeline).unwrap();
        for f in std::fs::read_dir(fixture("new-format/timeline")).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), timeline.join(f.file_name())).unwrap();
        }
        let err = Run::read(&timeline, None).unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(format!("{err:#}").contains("--manager-log"), "{err:#}");
        let named = Run::read(
            &fixture("new-format/timeline"),
            Some(&fixture("old-format/manager.log")),
        )
        .unwrap();
        assert!(
            named.machines.iter().all(|m| m.phases.is_empty()),
            "another run's log has none of these hosts"
        );
        assert!(named.machines[0].notes[0].contains("no host phases"));
    }
}
