//! The provisioning service: execute a bootstrap-data [`Plan`] on a host, as cloud-init would have.
//!
//! ```no_run
//! # async fn demo(exec: &dyn capkk_executor::Executor, value: &[u8], format: &str) -> capkk_service::Result<()> {
//! use capkk_service::{journal::{NoProgress, Redactor}, provisioning};
//! let vars = capkk_cloudinit::TemplateVars::new().local_hostname("node-1").provider_id("kk://ns/node-1");
//! let plan = capkk_cloudinit::parse(value, format, &vars)?;
//! match provisioning::run(exec, &plan, &NoProgress, &Redactor::default()).await? {
//!     provisioning::Outcome::Provisioned { .. } => { /* set providerID, provisioned = true */ }
//!     provisioning::Outcome::Failed { first_failure, .. } => { /* terminal condition naming it */ }
//! }
//! # Ok(()) }
//! ```
//!
//! # Semantics
//! - **Success is the sentinel** [`SENTINEL`] (CABPK chains it to the kubeadm command with `&&`), checked
//!   after the run. [`Outcome::Provisioned`] when it exists, otherwise [`Outcome::Failed`] naming the first
//!   failing item.
//! - **runcmd/bootcmd items** run in order, each in its own `sh` (cwd `/`, stdin `/dev/null`, as root). A failing
//!   item does not stop the next one; its exit code, duration and redacted output tail are journaled.
//!   Unlike cloud-init, which runs all items in one script, `cd` and variables do not carry over from one
//!   item to the next.
//! - **Other steps** (files, users, ntp, disks, mounts) stop the run when they fail (the failure is reported
//!   as the first failing item and the step is retried on the next run).
//! - **Files** are written atomically (temp file beside the target, exact bytes, `chown`, then `chmod`, then
//!   rename); `append` appends to a copy and renames it, so an append happens entirely or not at all.
//! - **Idempotent**: when the sentinel exists and this plan has no unfinished journal, nothing runs
//!   ([`Outcome::Provisioned`] with `already: true`).
//! - **Resumable**: the host keeps a journal per plan hash at `STATE_DIR/<plan-hash>.journal` (root, 0600, in a
//!   0700 directory). A step is journaled only after it succeeded — a command item after it *ran*, whatever its
//!   exit code — and the journal line is written on the host by the same script that ran the step, so a step
//!   never runs again once it completed, even when the connection died before we saw its result.
//!   Hang-ups are ignored and step output goes to a file, so a dropped connection does not interrupt the
//!   running step: the host finishes and journals it. Only a step whose process died with the host (reboot,
//!   kill) is run again on resume (its journal then shows `<id> start` without an exit code). A per-plan
//!   `flock` makes a resumed run wait for a step still running from an earlier connection
//!   ([`Error::HostBusy`] after [`RunOptions::lock_wait`]).
//! - **Secrets**: steps travel base64-encoded in scripts on stdin, never on a command line; scripts and step
//!   output live in the 0700 state directory only while they run. Command text and output are redacted with
//!   the caller's [`Redactor`] before they reach progress records or the outcome. Nothing is logged.
//!
//! # Round trips
//! One probe exec (lock, sentinel, journal), one exec per run of consecutive non-command steps (all
//! `write_files` of a CABPK payload go in one), and one exec per command item (so progress is reported as
//! each item finishes). A CABPK worker join is three round trips.
//!
//! # Host paths
//! [`STATE_DIR`] (journal `<plan-hash>.journal`, lock `<plan-hash>.lock`, transient scripts and output) and
//! [`SENTINEL`]. A host reset must remove both.

mod script;

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use capkk_cloudinit::{Action, Plan, Step};
use capkk_executor::{ExecError, ExecOutput, ExecRequest, Executor};
use tracing::{info, instrument};

use crate::{
    Error, Result,
    journal::{Progress, Redactor, StepRecord, StepRunner},
};

/// CAPI's bootstrap success sentinel, written by CABPK's kubeadm command.
pub const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";
/// Host directory of provisioning journals (`<plan-hash>.journal`), locks and transient scripts.
pub const STATE_DIR: &str = "/var/lib/capkk/provisioning";
/// Phase name in progress records.
pub const PHASE: &str = "provisioning";

/// Limits of a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Timeout of one command item (kubeadm init can take minutes).
    pub command_timeout: Duration,
    /// Timeout of one exec of non-command steps.
    pub batch_timeout: Duration,
    /// How long to wait for a step still running from an earlier connection before [`Error::HostBusy`].
    pub lock_wait: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            command_timeout: Duration::from_secs(30 * 60),
            batch_timeout: Duration::from_secs(10 * 60),
            lock_wait: Duration::from_secs(5 * 60),
        }
    }
}

/// A step that failed (a command item's non-zero exit, or a failing file/user/... step).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedItem {
    /// The step's id (see [`capkk_cloudinit::Step::id`]).
    pub step_id: String,
    /// The step's name (`runcmd[2]`, `write_files /etc/x`).
    pub name: String,
    /// For command items: the command, redacted and cut to 512 bytes.
    pub command: Option<String>,
    /// Exit code.
    pub exit_code: Option<u32>,
    /// Redacted output tail; empty when the step ran in an earlier run (output is not kept on the host).
    pub output_tail: String,
}

/// What a run found or achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The sentinel exists: the node bootstrapped.
    Provisioned {
        /// True when the sentinel was already there and nothing ran.
        already: bool,
        /// Command items that exited non-zero (cloud-init logs them and carries on), e.g. a failed
        /// postKubeadmCommand.
        failed_items: Vec<FailedItem>,
    },
    /// The run ended without the sentinel.
    Failed {
        /// The first failing item in plan order; `None` when every step succeeded but nothing wrote the
        /// sentinel (bootstrap data without CABPK's kubeadm command).
        first_failure: Option<FailedItem>,
        /// Every failing item in plan order.
        failed_items: Vec<FailedItem>,
    },
}

impl Outcome {
    /// True when the sentinel exists.
    pub fn is_provisioned(&self) -> bool {
        matches!(self, Outcome::Provisioned { .. })
    }

    /// The first failing item, if the run failed.
    pub fn first_failure(&self) -> Option<&FailedItem> {
        match self {
            Outcome::Failed { first_failure, .. } => first_failure.as_ref(),
            Outcome::Provisioned { .. } => None,
        }
    }
}

/// Run `plan` on the host with default [`RunOptions`].
pub async fn run(
    exec: &dyn Executor,
    plan: &Plan,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<Outcome> {
    run_with(exec, plan, progress, redactor, &RunOptions::default()).await
}

/// Run `plan` on the host. `Err` means the run could not be carried out or observed (connection lost,
/// host busy) and is retried later; what the bootstrap data itself did is in the [`Outcome`].
#[instrument(skip_all, fields(host = %exec.target(), plan = %plan.hash, steps = plan.steps.len()))]
pub async fn run_with(
    exec: &dyn Executor,
    plan: &Plan,
    progress: &dyn Progress,
    redactor: &Redactor,
    opts: &RunOptions,
) -> Result<Outcome> {
    let runner = StepRunner {
        exec,
        progress,
        redactor,
        phase: PHASE,
    };
    let lock_wait = opts.lock_wait.as_secs().max(1);
    let probe = exec
        .exec(
            ExecRequest::new(script::probe(&plan.hash, lock_wait))
                .sudo()
                .timeout(opts.lock_wait + Duration::from_secs(60)),
        )
        .await
        .map_err(|e| Error::exec("provisioning probe", e))?;
    let probe_text = probe.stdout_str();
    if !probe.success() || !probe_text.contains("@@capkk sentinel") {
        if probe_text.contains("@@capkk busy") {
            return Err(busy(opts));
        }
        return Err(failed_exec(
            "provisioning probe",
            "provisioning probe",
            &probe,
            redactor,
        ));
    }
    let (sentinel, journal) = parse_probe(&probe_text);
    let n = plan.steps.len();
    let touched = plan
        .steps
        .iter()
        .any(|s| journal.finished.contains_key(&s.id) || journal.started.contains(&s.id));
    let all_done = plan.steps.iter().all(|s| journal.finished.contains_key(&s.id));
    if sentinel && (!touched || all_done) {
        runner.record_skip("sentinel", "bootstrap success sentinel present: nothing to run");
        info!("Provisioning skipped: sentinel present");
        return Ok(Outcome::Provisioned {
            already: true,
            failed_items: failures(plan, &journal.finished, &HashMap::new(), redactor),
        });
    }

    let mut sentinel_now = sentinel;
    let mut results: HashMap<String, (u32, String)> = HashMap::new();
    let mut i = 0;
    while i < n {
        let step = &plan.steps[i];
        if journal.finished.contains_key(&step.id) {
            progress.step_started(PHASE, i + 1, n, &display_name(step, redactor));
            runner.record_skip(&display_name(step, redactor), "already done (host journal)");
            i += 1;
            continue;
        }
        if journal.started.contains(&step.id) {
            info!(step = %step.name(), "Re-running a step that an earlier run started but did not finish");
        }
        let (steps, script, timeout) = match &step.action {
            Action::Command(c) => (
                vec![step],
                script::command_item(&plan.hash, lock_wait, step, c),
                opts.command_timeout,
            ),
            _ => {
                let mut batch = Vec::new();
                let mut j = i;
                while j < n
                    && !matches!(plan.steps[j].action, Action::Command(_))
                    && !journal.finished.contains_key(&plan.steps[j].id)
                {
                    batch.push(&plan.steps[j]);
                    j += 1;
                }
                (
                    batch.clone(),
                    script::batch(&plan.hash, lock_wait, &batch),
                    opts.batch_timeout,
                )
            }
        };
        let first_name = display_name(steps[0], redactor);
        if steps.len() == 1 {
            progress.step_started(PHASE, i + 1, n, &first_name);
        }
        let out = exec
            .exec(
                ExecRequest::new(script::launcher(script.len()))
                    .stdin(script)
                    .sudo()
                    .timeout(timeout),
            )
            .await
            .map_err(|e| Error::exec(&first_name, e))?;
        let marks = parse_marks(&out.stdout_str());
        if marks.busy {
            return Err(busy(opts));
        }
        if marks.truncated {
            return Err(Error::exec(
                &first_name,
                ExecError::Disconnected {
                    host: exec.target(),
                    message: "the step script arrived truncated".into(),
                },
            ));
        }
        if let Some(s) = marks.sentinel {
            sentinel_now = s;
        }
        let mut stop = false;
        for (k, st) in steps.iter().enumerate() {
            let name = display_name(st, redactor);
            if steps.len() > 1 {
                progress.step_started(PHASE, i + k + 1, n, &name);
            }
            if let Some(rc) = marks.already.get(&st.id) {
                runner.record_skip(&name, "already done (host journal)");
                results.insert(st.id.clone(), (*rc, String::new()));
                continue;
            }
            let Some((rc, ms, tail)) = marks.steps.get(&st.id) else {
                // The script ended before reporting this step. Killed by a signal (host shutting down,
                // processes killed; a shell reports 128 + signal): transient, the journal resumes it.
                // Otherwise report how it ended.
                if out.exit_code.is_none_or(|c| c > 128) {
                    return Err(Error::exec(
                        &name,
                        ExecError::Disconnected {
                            host: exec.target(),
                            message: "the step runner was killed before it reported".into(),
                        },
                    ));
                }
                return Err(failed_exec(&name, "provisioning step runner", &out, redactor));
            };
            let tail = redactor.redact(tail);
            progress.step_finished(&StepRecord {
                phase: PHASE.to_owned(),
                name: name.clone(),
                exit_code: Some(*rc),
                duration: Duration::from_millis(*ms),
                output_tail: tail.clone(),
                skipped: false,
            });
            info!(step = %st.name(), exit_code = rc, duration_ms = ms, "Provisioning step finished");
            results.insert(st.id.clone(), (*rc, tail));
            if *rc != 0 && !matches!(st.action, Action::Command(_)) {
                stop = true;
                break;
            }
        }
        if stop {
            let failed = failures(plan, &journal.finished, &results, redactor);
            return Ok(Outcome::Failed {
                first_failure: failed.first().cloned(),
                failed_items: failed,
            });
        }
        i += steps.len();
    }
    let failed = failures(plan, &journal.finished, &results, redactor);
    if sentinel_now {
        Ok(Outcome::Provisioned {
            already: false,
            failed_items: failed,
        })
    } else {
        Ok(Outcome::Failed {
            first_failure: failed.first().cloned(),
            failed_items: failed,
        })
    }
}

fn busy(opts: &RunOptions) -> Error {
    Error::HostBusy {
        message: format!(
            "a provisioning step from an earlier connection is still running after {:?}",
            opts.lock_wait
        ),
    }
}

fn failed_exec(step: &str, command: &str, out: &ExecOutput, redactor: &Redactor) -> Error {
    Error::CommandFailed {
        step: step.to_owned(),
        command: command.to_owned(),
        exit_code: out.exit_code,
        output_tail: redactor.redact(&out.tail(crate::journal::TAIL_BYTES)),
    }
}

/// `runcmd[2]: kubeadm init --config ...` (command redacted and cut), or the step name.
fn display_name(step: &Step, redactor: &Redactor) -> String {
    match &step.action {
        Action::Command(c) => {
            let first = c.script.lines().next().unwrap_or("");
            let red = redactor.redact(first);
            let short: String = red.chars().take(60).collect();
            let more = if short.len() < red.len() || c.script.lines().nth(1).is_some() {
                " ..."
            } else {
                ""
            };
            format!("{}: {short}{more}", step.name())
        }
        _ => step.name(),
    }
}

/// Every failing step in plan order: this run's results first, the host journal for earlier runs.
fn failures(
    plan: &Plan,
    journal: &HashMap<String, u32>,
    results: &HashMap<String, (u32, String)>,
    redactor: &Redactor,
) -> Vec<FailedItem> {
    plan.steps
        .iter()
        .filter_map(|s| {
            let (rc, tail) = match results.get(&s.id) {
                Some((rc, tail)) => (*rc, tail.clone()),
                None => (*journal.get(&s.id)?, String::new()),
            };
            (rc != 0).then(|| FailedItem {
                step_id: s.id.clone(),
                name: s.name(),
                command: match &s.action {
                    Action::Command(c) => {
                        let red = redactor.redact(&c.script);
                        let mut cut = 512.min(red.len());
                        while !red.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        Some(red[..cut].to_owned())
                    }
                    _ => None,
                },
                exit_code: Some(rc),
                output_tail: tail,
            })
        })
        .collect()
}

/// What the host journal says about a plan.
#[derive(Debug, Default, PartialEq, Eq)]
struct HostJournal {
    /// Step id -> exit code of completed steps.
    finished: HashMap<String, u32>,
    /// Steps that started (command items) — finished or not.
    started: HashSet<String>,
}

fn parse_probe(text: &str) -> (bool, HostJournal) {
    let mut sentinel = false;
    let mut journal = HostJournal::default();
    let mut in_journal = false;
    for line in text.lines() {
        if in_journal {
            let mut parts = line.split_whitespace();
            if let (Some(id), Some(what)) = (parts.next(), parts.next()) {
                if what == "start" {
                    journal.started.insert(id.to_owned());
                } else if let Ok(rc) = what.parse() {
                    journal.finished.insert(id.to_owned(), rc);
                }
            }
        } else if line == "@@capkk sentinel 1" {
            sentinel = true;
        } else if line == "@@capkk journal" {
            in_journal = true;
        }
    }
    (sentinel, journal)
}

/// Markers printed by the step scripts.
#[derive(Debug, Default)]
struct Marks {
    steps: HashMap<String, (u32, u64, String)>,
    already: HashMap<String, u32>,
    sentinel: Option<bool>,
    busy: bool,
    truncated: bool,
}

fn parse_marks(text: &str) -> Marks {
    use base64::Engine as _;
    let mut m = Marks::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("@@capkk ") else {
            continue;
        };
        let parts: Vec<&str> = rest.splitn(5, ' ').collect();
        match parts.as_slice() {
            ["step", id, rc, ms, tail @ ..] => {
                let tail = tail.first().copied().unwrap_or("");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(tail.trim())
                    .unwrap_or_default();
                if let (Ok(rc), Ok(ms)) = (rc.parse(), ms.parse::<i64>()) {
                    m.steps.insert(
                        (*id).to_owned(),
                        (rc, ms.max(0) as u64, String::from_utf8_lossy(&bytes).into_owned()),
                    );
                }
            }
            ["already", id, rc] => {
                if let Ok(rc) = rc.parse() {
                    m.already.insert((*id).to_owned(), rc);
                }
            }
            ["sentinel", v] => m.sentinel = Some(*v == "1"),
            ["busy"] => m.busy = true,
            ["truncated"] => m.truncated = true,
            _ => {}
        }
    }
    m
}

#[cfg(test)]
mod tests;
