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
//!   ([`Outcome::Provisioned`] with `already: true`). Once a run saw the sentinel, the journal records
//!   `provisioned`, so a reboot (which empties `/run`, and with it the sentinel) does not turn a provisioned
//!   host into a failed one.
//! - **Resumable**: the host keeps a journal per plan hash at `STATE_DIR/<plan-hash>.journal` (root, 0600, in a
//!   0700 directory). A step is journaled only after it succeeded — a command item after it *ran*, whatever its
//!   exit code — and the journal line is written on the host by the same script that ran the step, so a step
//!   never runs again once it completed, even when the connection died before we saw its result.
//!   Hang-ups are ignored and step output goes to a file, so a dropped connection does not interrupt the
//!   running step: the host finishes and journals it. Only a step whose process died with the host (reboot,
//!   kill) is run again on resume (its journal then shows `<id> start` without an exit code), and so is a
//!   `write_files` item whose file a reboot removed (`/run` is emptied at boot, and CABPK writes kubeadm's
//!   configuration there): written again, not journaled twice (`provisioning/write-file-kept.sh`). A kubeadm
//!   init or join cut short that way is undone first (`kubeadm reset -f`, in the probe): kubeadm refuses to run
//!   over its own half-done state; the files the reset removed are then written again. A host-wide
//!   `flock` (`STATE_DIR/lock`) keeps two runs from interleaving and makes a resumed run wait for a step
//!   still running from an earlier connection ([`Error::HostBusy`] after [`RunOptions::lock_wait`]).
//! - **Retry**: [`RunOptions::rerun_failed`] (set for a run started by the retry annotation) makes the first
//!   exec drop from the journal the command items whose last run failed, under the lock, so a fixed host
//!   runs them again (e.g. `kubeadm init` after a failed preflight); everything that succeeded stays done.
//! - **Secrets**: steps travel base64-encoded in scripts on stdin, never on a command line; scripts and step
//!   output live in the 0700 state directory only while they run. Command text and output are redacted with
//!   the caller's [`Redactor`] before they reach progress records or the outcome. Nothing is logged.
//!
//! # Round trips
//! The first exec of a run also probes (waits on the provisioning lock, checks the sentinel and prints the journal;
//! when the sentinel exists and this plan's journal is empty or complete it stops there). Consecutive
//! non-command steps share one exec (all `write_files` of a CABPK payload go in one), and each command item
//! gets its own exec so progress is reported as each item finishes: a CABPK worker join is two round trips, a
//! control-plane init with four runcmd items five, a re-run one. With [`RunOptions::batch_commands`] every
//! step goes into one exec (same journal and failure semantics; progress arrives when it returns).
//! Scripts avoid forks where the shell can do the work (journal lookups, temp files created with
//! `O_EXCL` under the right umask, `chown`/`chmod` only when needed).
//!
//! # Host requirements
//! POSIX `sh`, `base64`, `awk`, `sed`, `mktemp`, `date` (coreutils/busybox); `flock` (util-linux) for the
//! provisioning lock (without it a resumed run does not wait for a step left running by an earlier connection).
//! Modules need their tools: `useradd`/`usermod`/`groupadd`/`chpasswd` (`visudo` when present), chrony or
//! systemd-timesyncd, `blkid`/`sfdisk`/`sgdisk`/`wipefs`/`mkfs.*`, `mount`/`mountpoint`/`swapon`.
//!
//! # Host paths
//! [`STATE_DIR`] (root, 0700): `<plan-hash>.journal` (lines `<step-id> start`, `<step-id> <exit code>`,
//! `provisioned`), `<plan-hash>.<step-id>.tail` (output tail of a failed command item), `lock`, and while a
//! step runs `.run.*`, `<plan-hash>.<step-id>.sh`, `<plan-hash>.out` (all 0600). And [`SENTINEL`]. A host
//! reset must remove both (the bootstrap service's reset removes `/var/lib/capkk` and the sentinel).

pub(crate) mod script;

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use capkk_cloudinit::{Action, Plan, Step};
use capkk_executor::{ExecError, ExecOutput, ExecRequest, Executor};
use tracing::{info, instrument, warn};

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
    /// Send consecutive command items in the same exec as the steps around them (fewest round trips: a
    /// whole CABPK payload in one exec) instead of one exec per item (progress after each item). Journal,
    /// resume and failure semantics are the same; only progress granularity differs.
    pub batch_commands: bool,
    /// Run again the command items this plan's host journal shows as failed (their last exit non-zero): what
    /// a retry after a terminal failure asks for, once the host or the bootstrap data was fixed. Without it a
    /// failed item counts as run (cloud-init semantics), so a resumed run reports the recorded failure and
    /// never repeats a `kubeadm init` on its own. Items that succeeded never run again either way.
    pub rerun_failed: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            command_timeout: Duration::from_secs(30 * 60),
            batch_timeout: Duration::from_secs(10 * 60),
            lock_wait: Duration::from_secs(5 * 60),
            batch_commands: false,
            rerun_failed: false,
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
    /// Redacted output tail (for a failure of an earlier run: the tail the host kept for it).
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
    let n = plan.steps.len();
    // The host journal as the first exec found it; `None` until then.
    let mut journal: Option<HostJournal> = None;
    let mut sentinel_now = false;
    let mut results: HashMap<String, (u32, String)> = HashMap::new();
    let mut i = 0;
    loop {
        if let Some(j) = &journal {
            while i < n && j.finished.contains_key(&plan.steps[i].id) {
                let name = display_name(&plan.steps[i], redactor);
                progress.step_started(PHASE, i + 1, n, &name);
                runner.record_skip(&name, "already done (host journal)");
                i += 1;
            }
            if i >= n {
                break;
            }
        }
        let steps = segment(plan, i, journal.as_ref(), opts.batch_commands);
        let commands = steps
            .iter()
            .filter(|s| matches!(s.action, Action::Command(_)))
            .count() as u32;
        let timeout = opts.batch_timeout + opts.command_timeout * commands + opts.lock_wait;
        let script = script::segment(plan, lock_wait, &steps, journal.is_none(), opts.rerun_failed);
        let first_name = steps
            .first()
            .map_or_else(|| "provisioning".to_owned(), |s| display_name(s, redactor));
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
        if let Some(id) = &marks.shutdown {
            // A command failed while the host was shutting down: not journaled as run (command.sh), so the run
            // after the boot runs it again. Transient, like the lost connection that follows.
            let name = step_name(plan, id, redactor);
            return Err(Error::exec(
                &name,
                ExecError::Disconnected {
                    host: exec.target(),
                    message: "the host began shutting down while the step ran; it runs again after the boot"
                        .into(),
                },
            ));
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
        if journal.is_none() {
            if marks.skip_all {
                let found = marks.journal.unwrap_or_default();
                runner.record_skip("sentinel", "bootstrap success sentinel present: nothing to run");
                info!("Provisioning skipped: sentinel present");
                return Ok(Outcome::Provisioned {
                    already: true,
                    failed_items: failures(plan, &found, &HashMap::new(), redactor),
                });
            }
            let Some(found) = marks.journal.clone() else {
                return Err(runner_died(exec, &first_name, &out, redactor));
            };
            for st in plan
                .steps
                .iter()
                .filter(|s| found.started.contains(&s.id) && !found.finished.contains_key(&s.id))
            {
                info!(step = %st.name(), "Re-running a step that an earlier run started but did not finish");
            }
            for (id, rc) in &marks.undone {
                let name = step_name(plan, id, redactor);
                if *rc == 0 {
                    info!(step = %name, "Undid the half-done state of a kubeadm item cut short (kubeadm reset -f) before running it again");
                } else {
                    warn!(step = %name, exit_code = rc, "kubeadm reset -f failed while undoing a kubeadm item cut short; running it again anyway");
                }
            }
            journal = Some(found);
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
                return Err(runner_died(exec, &name, &out, redactor));
            };
            let tail = redactor.redact(tail);
            progress.step_finished(&StepRecord {
                phase: PHASE.to_owned(),
                name: name.clone(),
                exit_code: Some(*rc),
                duration: Duration::from_millis(*ms),
                output_tail: tail.clone(),
                skipped: false,
                host_finished_ms: None,
            });
            info!(step = %st.name(), exit_code = rc, duration_ms = ms, "Provisioning step finished");
            results.insert(st.id.clone(), (*rc, tail));
            if *rc != 0 && !matches!(st.action, Action::Command(_)) {
                stop = true;
                break;
            }
        }
        if stop {
            let failed = failures(
                plan,
                journal.as_ref().unwrap_or(&HostJournal::default()),
                &results,
                redactor,
            );
            return Ok(Outcome::Failed {
                first_failure: failed.first().cloned(),
                failed_items: failed,
            });
        }
        i += steps.len();
        if i >= n {
            break;
        }
    }
    let failed = failures(plan, &journal.unwrap_or_default(), &results, redactor);
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

/// The next steps to send in one exec, from `i`: one command item, or the run of consecutive non-command
/// steps (with `batch_commands`: every consecutive step), stopping at a step the journal shows done.
fn segment<'p>(
    plan: &'p Plan,
    i: usize,
    journal: Option<&HostJournal>,
    batch_commands: bool,
) -> Vec<&'p Step> {
    let done = |s: &Step| journal.is_some_and(|j| j.finished.contains_key(&s.id));
    let is_cmd = |s: &Step| matches!(s.action, Action::Command(_));
    let Some(first) = plan.steps.get(i) else {
        return Vec::new();
    };
    if is_cmd(first) && !batch_commands {
        return vec![first];
    }
    plan.steps[i..]
        .iter()
        .take_while(|s| !done(s) && (batch_commands || !is_cmd(s)))
        .collect()
}

/// The script ended before reporting a step. Killed by a signal (host shutting down, processes killed; a
/// shell reports 128 + signal): transient, the journal resumes it. Otherwise report how it ended.
fn runner_died(exec: &dyn Executor, step: &str, out: &ExecOutput, redactor: &Redactor) -> Error {
    if out.exit_code.is_none_or(|c| c > 128) {
        Error::exec(
            step,
            ExecError::Disconnected {
                host: exec.target(),
                message: "the step runner was killed before it reported".into(),
            },
        )
    } else {
        failed_exec(step, "provisioning step runner", out, redactor)
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
        output_tail: redactor.redact_tail(out),
    }
}

/// `runcmd[2]: kubeadm init --config ...` (command redacted and cut), or the step name.
/// The display name of the plan's step `id` (the id itself for a step the plan does not have).
fn step_name(plan: &Plan, id: &str, redactor: &Redactor) -> String {
    plan.steps
        .iter()
        .find(|s| s.id == id)
        .map_or_else(|| id.to_owned(), |s| display_name(s, redactor))
}

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
    journal: &HostJournal,
    results: &HashMap<String, (u32, String)>,
    redactor: &Redactor,
) -> Vec<FailedItem> {
    plan.steps
        .iter()
        .filter_map(|s| {
            let (rc, tail) = match results.get(&s.id) {
                Some((rc, tail)) if !tail.is_empty() => (*rc, tail.clone()),
                Some((rc, _)) => (
                    *rc,
                    journal
                        .tails
                        .get(&s.id)
                        .map(|t| redactor.redact(t))
                        .unwrap_or_default(),
                ),
                None => (
                    *journal.finished.get(&s.id)?,
                    journal
                        .tails
                        .get(&s.id)
                        .map(|t| redactor.redact(t))
                        .unwrap_or_default(),
                ),
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct HostJournal {
    /// Step id -> exit code of completed steps.
    finished: HashMap<String, u32>,
    /// Steps that started (command items) — finished or not.
    started: HashSet<String>,
    /// Raw output tails of failed command items (not yet redacted).
    tails: HashMap<String, String>,
}

/// Markers printed by the step scripts.
#[derive(Debug, Default)]
struct Marks {
    steps: HashMap<String, (u32, u64, String)>,
    already: HashMap<String, u32>,
    sentinel: Option<bool>,
    busy: bool,
    truncated: bool,
    skip_all: bool,
    /// The journal printed by the probe section.
    journal: Option<HostJournal>,
    /// Kubeadm items cut short that the probe undid, with `kubeadm reset`'s exit code.
    undone: Vec<(String, u32)>,
    /// The command item that failed while the host was shutting down (not journaled).
    shutdown: Option<String>,
}

fn parse_marks(text: &str) -> Marks {
    use base64::Engine as _;
    let mut m = Marks::default();
    let mut in_journal = false;
    for line in text.lines() {
        if in_journal {
            if line == "@@capkk journal-end" {
                in_journal = false;
                continue;
            }
            let journal = m.journal.get_or_insert_with(HostJournal::default);
            let mut parts = line.split_whitespace();
            if let (Some(id), Some(what)) = (parts.next(), parts.next()) {
                if what == "start" {
                    journal.started.insert(id.to_owned());
                } else if let Ok(rc) = what.parse() {
                    journal.finished.insert(id.to_owned(), rc);
                }
            }
            continue;
        }
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
            ["shutdown", id] => m.shutdown = Some((*id).trim().to_owned()),
            ["undo", id, rc] => {
                if let Ok(rc) = rc.trim().parse() {
                    m.undone.push(((*id).to_owned(), rc));
                }
            }
            ["tail", id, b64] => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .unwrap_or_default();
                m.journal
                    .get_or_insert_with(HostJournal::default)
                    .tails
                    .insert((*id).to_owned(), String::from_utf8_lossy(&bytes).into_owned());
            }
            ["already", id, rc] => {
                if let Ok(rc) = rc.parse() {
                    m.already.insert((*id).to_owned(), rc);
                }
            }
            ["sentinel", v] => m.sentinel = Some(*v == "1"),
            ["busy"] => m.busy = true,
            ["skipall"] => m.skip_all = true,
            ["journal"] => {
                in_journal = true;
                m.journal.get_or_insert_with(HostJournal::default);
            }
            ["truncated"] => m.truncated = true,
            _ => {}
        }
    }
    m
}

#[cfg(test)]
mod tests;
