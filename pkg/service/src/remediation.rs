//! The remediation service: repairing a provisioned host that its Node reports unhealthy, in tiers.
//!
//! | tier | what runs | success |
//! |---|---|---|
//! | [`restart_services`] | `systemctl restart containerd` when capkk installed it ([`CONTAINERD_STAMP`]), then `kubelet` (one script, one round trip) | the restarted units active within [`RestartOptions::wait`] |
//! | [`reboot`] | the boot ID is read, a reboot is scheduled a few seconds ahead, then the host is polled | the host answers with another boot ID within [`RebootOptions::wait`] |
//!
//! Every remote call carries a timeout. Whether the Node recovers is for the controller to see (this crate never
//! talks to Kubernetes). A containerd capkk did not install (the distribution's, Docker's) serves more than the
//! node and is never restarted, as the reset never stops it. A reboot holds the caller's [`HostSlot`] only
//! while it runs a command on the host, not while it waits for the host to come back.

use std::{
    future::Future,
    pin::Pin,
    time::{Duration, Instant},
};

use capkk_executor::{ExecRequest, Executor};
use tracing::{debug, instrument};

use crate::{
    Error, Result,
    containermanager::CONTAINERD_STAMP,
    facts::script::Script,
    host::{Vars, tpl},
    journal::{Progress, Redactor, StepRecord},
};

/// Bound on one short call (reading the boot ID).
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// The line the restart tier prints when it leaves containerd alone (no [`CONTAINERD_STAMP`]: capkk did not
/// install it).
pub const CONTAINERD_LEFT_ALONE: &str = "left containerd alone: capkk did not install it";

/// What holds the caller's share of the hosts worked on at once (the controller's slot) while a tier runs
/// commands on the host. A reboot gives it back once the reboot is scheduled and takes it again for each poll
/// of the host: the host does no work while it is down, and its wait (up to the remediation's `timeout`) must
/// not keep other hosts' work waiting.
pub trait HostSlot: Send + Sync {
    /// Give the slot back until the next [`HostSlot::take`] (nothing runs on the host meanwhile).
    fn give_back(&self);
    /// Take a slot again before the next command on the host; waits while none is free.
    fn take(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// A caller that holds no slot.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSlot;

impl HostSlot for NoSlot {
    fn give_back(&self) {}
    fn take(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }
}

/// What [`restart_services`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartOutcome {
    /// containerd was restarted (capkk installed it); false: it was left alone.
    pub containerd_restarted: bool,
}

/// Options of [`restart_services`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartOptions {
    /// How long the units may take to be active after the restart.
    pub wait: Duration,
}

impl Default for RestartOptions {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(60),
        }
    }
}

/// Options of [`reboot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RebootOptions {
    /// Seconds between the scheduling command and the reboot (the session that asked ends first).
    pub delay: Duration,
    /// How long the host may take to answer again with another boot ID.
    pub wait: Duration,
    /// Pause between two polls of a host that is not back yet.
    pub poll: Duration,
}

impl Default for RebootOptions {
    fn default() -> Self {
        Self {
            delay: Duration::from_secs(3),
            wait: Duration::from_secs(300),
            poll: Duration::from_secs(5),
        }
    }
}

/// What [`reboot`] saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RebootOutcome {
    /// Boot ID before the reboot.
    pub before: String,
    /// Boot ID the host answered with afterwards.
    pub after: String,
    /// From scheduling the reboot to the first answer with the new boot ID.
    pub took: Duration,
}

/// The restart script (pure; the golden rendering and the sandbox test use it).
pub fn restart_script(opts: &RestartOptions) -> Script {
    let mut s = Script::new();
    s.step(
        "restart-services",
        Vars::new()
            .var("WAIT", opts.wait.as_secs().to_string())
            .var("STAMP", CONTAINERD_STAMP)
            .render(tpl::REMEDIATION_RESTART),
    );
    s
}

/// The reboot-scheduling script (pure).
pub fn reboot_script(opts: &RebootOptions) -> Script {
    let mut s = Script::new();
    s.step(
        "schedule-reboot",
        Vars::new()
            .var("DELAY", opts.delay.as_secs().max(1).to_string())
            .render(tpl::REMEDIATION_REBOOT),
    );
    s
}

/// Restart the kubelet, and before it containerd when capkk installed it, and wait for them to be active
/// (first tier). A containerd capkk did not install is left alone ([`RestartOutcome::containerd_restarted`]).
#[instrument(skip_all, fields(host = %exec.target()))]
pub async fn restart_services(
    exec: &dyn Executor,
    opts: &RestartOptions,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<RestartOutcome> {
    let out = restart_script(opts)
        .run(
            exec,
            "remediation",
            progress,
            redactor,
            opts.wait + Duration::from_secs(60),
        )
        .await?;
    let left_alone = out
        .records
        .iter()
        .any(|r| r.output_tail.lines().any(|l| l.trim() == CONTAINERD_LEFT_ALONE));
    Ok(RestartOutcome {
        containerd_restarted: !left_alone,
    })
}

/// The host's boot ID.
pub async fn boot_id(exec: &dyn Executor) -> Result<String> {
    let out = exec
        .exec(ExecRequest::new(tpl::REMEDIATION_BOOT_ID.trim_end()).timeout(CALL_TIMEOUT))
        .await
        .map_err(|e| Error::exec("remediation/boot-id", e))?;
    let id = out.stdout_str().trim().to_owned();
    if !out.success() || id.is_empty() {
        return Err(Error::CommandFailed {
            step: "remediation/boot-id".into(),
            command: "cat /proc/sys/kernel/random/boot_id".into(),
            exit_code: out.exit_code,
            output_tail: out.tail(1024),
        });
    }
    Ok(id)
}

/// Reboot the host and wait until it answers with another boot ID (second tier). A host that is not back
/// within `opts.wait` is [`Error::HostNotBack`]. `slot` (held when called) is given back once the reboot is
/// scheduled and taken again only for each poll; it is given back when this returns.
#[instrument(skip_all, fields(host = %exec.target()))]
pub async fn reboot(
    exec: &dyn Executor,
    opts: &RebootOptions,
    progress: &dyn Progress,
    redactor: &Redactor,
    slot: &dyn HostSlot,
) -> Result<RebootOutcome> {
    let before = boot_id(exec).await?;
    reboot_script(opts)
        .run(exec, "remediation", progress, redactor, CALL_TIMEOUT * 2)
        .await?;
    let started = Instant::now();
    slot.give_back();
    let outcome = wait_for_new_boot(exec, &before, opts, started, slot).await;
    progress.step_finished(&StepRecord {
        phase: "remediation".into(),
        name: "wait-for-host".into(),
        exit_code: Some(if outcome.is_ok() { 0 } else { 1 }),
        duration: started.elapsed(),
        output_tail: match &outcome {
            Ok(o) => format!("back with boot ID {} after {:?}", o.after, o.took),
            Err(e) => e.to_string(),
        },
        skipped: false,
        host_finished_ms: None,
    });
    outcome
}

/// Poll the boot ID until it differs from `before`; a failed poll (the host is down, or sshd not up yet) is
/// what a reboot looks like, so it is retried until the deadline. Each poll holds `slot`, nothing else does;
/// a poll that waited for a slot past the deadline still runs once, so the host is judged by its answer.
async fn wait_for_new_boot(
    exec: &dyn Executor,
    before: &str,
    opts: &RebootOptions,
    started: Instant,
    slot: &dyn HostSlot,
) -> Result<RebootOutcome> {
    // The reboot happens `delay` after it was scheduled; polls before that only see the old boot.
    tokio::time::sleep(opts.delay).await;
    loop {
        slot.take().await;
        let polled = boot_id(exec).await;
        slot.give_back();
        let last = match polled {
            Ok(id) if id != before => {
                return Ok(RebootOutcome {
                    before: before.to_owned(),
                    after: id,
                    took: started.elapsed(),
                });
            }
            Ok(_) => "the host still runs the boot before the reboot".to_owned(),
            Err(e) => {
                debug!(error = %e, "Host not back yet");
                e.to_string()
            }
        };
        if started.elapsed() + opts.poll > opts.wait {
            return Err(Error::HostNotBack {
                host: exec.target(),
                waited: started.elapsed(),
                last,
            });
        }
        tokio::time::sleep(opts.poll).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use capkk_executor::{ExecError, ExecOutput, PutRequest};

    use super::*;
    use crate::journal::RecordingProgress;

    /// A host whose boot ID changes after `down` failed polls following the scheduling script (None: never
    /// back).
    struct Rebooting {
        calls: Mutex<Vec<String>>,
        down: Option<usize>,
        polls: Mutex<usize>,
        /// The slot of the caller, if the test gives one: each call records whether it was held.
        slot: Option<Arc<CountingSlot>>,
        held_at_calls: Mutex<Vec<bool>>,
    }

    impl Rebooting {
        fn new(down: Option<usize>) -> Arc<Self> {
            Self::with_slot(down, None)
        }

        fn with_slot(down: Option<usize>, slot: Option<Arc<CountingSlot>>) -> Arc<Self> {
            Arc::new(Self {
                calls: Mutex::new(Vec::new()),
                down,
                polls: Mutex::new(0),
                slot,
                held_at_calls: Mutex::new(Vec::new()),
            })
        }
    }

    /// A slot that counts how often it was given back and taken, and whether it is held now.
    #[derive(Default)]
    struct CountingSlot {
        held: std::sync::atomic::AtomicBool,
        given_back: std::sync::atomic::AtomicUsize,
        taken: std::sync::atomic::AtomicUsize,
    }

    impl HostSlot for CountingSlot {
        fn give_back(&self) {
            use std::sync::atomic::Ordering::SeqCst;
            self.held.store(false, SeqCst);
            self.given_back.fetch_add(1, SeqCst);
        }

        fn take(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            use std::sync::atomic::Ordering::SeqCst;
            assert!(!self.held.swap(true, SeqCst), "taken while held");
            self.taken.fetch_add(1, SeqCst);
            Box::pin(std::future::ready(()))
        }
    }

    #[async_trait]
    impl Executor for Rebooting {
        async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
            assert!(req.timeout > Duration::ZERO, "every call carries a timeout");
            if let Some(slot) = &self.slot {
                let held = slot.held.load(std::sync::atomic::Ordering::SeqCst);
                self.held_at_calls.lock().unwrap().push(held);
            }
            self.calls.lock().unwrap().push(req.command.clone());
            let scheduled = self.calls.lock().unwrap().iter().any(|c| c == "sh -s");
            if req.command == "sh -s" {
                let out = "\n@@capkk begin schedule-reboot\nreboot scheduled\n@@capkk changed\n\n@@capkk end schedule-reboot 0 5 0\n";
                return Ok(ExecOutput {
                    exit_code: Some(0),
                    stdout: out.as_bytes().to_vec(),
                    ..Default::default()
                });
            }
            if !scheduled {
                return Ok(ExecOutput {
                    exit_code: Some(0),
                    stdout: b"old-boot\n".to_vec(),
                    ..Default::default()
                });
            }
            let mut polls = self.polls.lock().unwrap();
            *polls += 1;
            match self.down {
                Some(d) if *polls > d => Ok(ExecOutput {
                    exit_code: Some(0),
                    stdout: b"new-boot\n".to_vec(),
                    ..Default::default()
                }),
                _ => Err(ExecError::Connect {
                    host: "198.18.0.11".into(),
                    message: "Connection refused".into(),
                }),
            }
        }

        async fn put(&self, _req: PutRequest) -> Result<u64, ExecError> {
            Ok(0)
        }

        async fn get(&self, _path: &str, _limit: usize, _privileged: bool) -> Result<Vec<u8>, ExecError> {
            Ok(Vec::new())
        }

        fn target(&self) -> String {
            "198.18.0.11".into()
        }
    }

    fn quick(wait: u64) -> RebootOptions {
        RebootOptions {
            delay: Duration::from_millis(1),
            wait: Duration::from_millis(wait),
            poll: Duration::from_millis(5),
        }
    }

    #[tokio::test]
    async fn a_reboot_waits_through_refused_connections_until_the_host_answers_with_a_new_boot_id() {
        let host = Rebooting::new(Some(3));
        let progress = RecordingProgress::default();
        let out = reboot(&*host, &quick(5_000), &progress, &Redactor::default(), &NoSlot)
            .await
            .expect("the host comes back");
        assert_eq!(
            (out.before.as_str(), out.after.as_str()),
            ("old-boot", "new-boot")
        );
        assert_eq!(
            *host.polls.lock().unwrap(),
            4,
            "three refused polls, then the answer"
        );
        let names: Vec<String> = progress.records().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["schedule-reboot", "wait-for-host"]);
    }

    #[tokio::test]
    async fn a_host_that_does_not_come_back_in_time_is_host_not_back_naming_the_last_error() {
        let host = Rebooting::new(None);
        let err = reboot(
            &*host,
            &quick(60),
            &RecordingProgress::default(),
            &Redactor::default(),
            &NoSlot,
        )
        .await
        .expect_err("never back");
        match &err {
            Error::HostNotBack { host, last, .. } => {
                assert_eq!(host, "198.18.0.11");
                assert!(last.contains("Connection refused"), "{last}");
            }
            e => panic!("not HostNotBack: {e}"),
        }
        assert!(
            !err.is_transient(),
            "the controller counts it as a failed attempt"
        );
    }

    /// Issue 43 finding 5: a reboot's wait for the host (up to the remediation's `timeout`) holds no slot of
    /// the hosts worked on at once; only its commands do.
    #[tokio::test]
    async fn a_reboot_gives_its_slot_back_once_scheduled_and_takes_it_only_for_each_poll() {
        use std::sync::atomic::Ordering::SeqCst;
        let slot = Arc::new(CountingSlot::default());
        slot.held.store(true, SeqCst); // the caller holds it when the tier starts
        let host = Rebooting::with_slot(Some(3), Some(slot.clone()));
        reboot(
            &*host,
            &quick(5_000),
            &RecordingProgress::default(),
            &Redactor::default(),
            &*slot,
        )
        .await
        .expect("the host comes back");
        let held = host.held_at_calls.lock().unwrap().clone();
        assert_eq!(held.len(), 6, "boot ID, schedule, four polls: {held:?}");
        assert!(
            held.iter().all(|h| *h),
            "every command ran holding the slot: {held:?}"
        );
        assert_eq!(
            slot.taken.load(SeqCst),
            4,
            "taken again for each of the four polls"
        );
        assert_eq!(
            slot.given_back.load(SeqCst),
            5,
            "given back once the reboot was scheduled and after each poll"
        );
        assert!(!slot.held.load(SeqCst), "not held once the host is back");
    }

    /// Runs the rendered restart tier under `sh` with a stand-in `systemctl` on PATH and capkk's containerd
    /// stamp at a temporary path, present when `ours`; returns (success, output, the stand-in's calls).
    fn restart_with_stand_ins(ours: bool) -> (bool, String, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let tools = crate::stand_ins::StandIns::new(dir.path());
        let stamp = dir.path().join("containerd-stamp");
        if ours {
            std::fs::write(&stamp, "x").unwrap();
        }
        tools.tool(
            "systemctl",
            &format!("echo \"$*\" >> '{}'\n", tools.log().display()),
        );
        let text = restart_script(&RestartOptions {
            wait: Duration::from_secs(5),
        })
        .render()
        .replace(CONTAINERD_STAMP, &stamp.display().to_string());
        tools.run(&text)
    }

    /// Issue 43 finding 8: the restart tier restarts the kubelet always, containerd only when capkk installed
    /// it, and says when it left one alone.
    #[test]
    fn the_restart_tier_restarts_a_containerd_capkk_installed_and_leaves_a_foreign_one_alone_saying_so() {
        let (ok, out, calls) = restart_with_stand_ins(false);
        assert!(ok, "{out}");
        assert!(
            !calls.iter().any(|c| c.contains("containerd")),
            "a containerd capkk did not install is neither restarted nor waited for: {calls:?}"
        );
        assert!(calls.iter().any(|c| c == "restart kubelet"), "{calls:?}");
        assert!(
            out.lines().any(|l| l == CONTAINERD_LEFT_ALONE),
            "the step says so in the line restart_services reads: {out}"
        );
        assert!(out.contains("kubelet is active"), "{out}");

        let (ok, out, calls) = restart_with_stand_ins(true);
        assert!(ok, "{out}");
        let restarts: Vec<&String> = calls.iter().filter(|c| c.starts_with("restart ")).collect();
        assert_eq!(restarts, ["restart containerd", "restart kubelet"], "{calls:?}");
        assert!(!out.contains(CONTAINERD_LEFT_ALONE), "{out}");
        // The stamp the script asks for is the one the install writes and the reset asks for.
        assert!(
            restart_script(&RestartOptions::default())
                .render()
                .contains(&format!("STAMP={CONTAINERD_STAMP}\n"))
        );
    }

    #[test]
    fn the_scripts_carry_their_bounds_as_quoted_variables() {
        let r = restart_script(&RestartOptions {
            wait: Duration::from_secs(45),
        })
        .render();
        assert!(r.contains("WAIT='45'") || r.contains("WAIT=45"), "{r}");
        assert!(r.contains("systemctl restart \"$_u\""));
        let b = reboot_script(&RebootOptions::default()).render();
        assert!(b.contains("DELAY='3'") || b.contains("DELAY=3"), "{b}");
    }
}
