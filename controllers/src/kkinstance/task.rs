//! Host work as background tasks (one per KKInstance UID, bounded by `--max-concurrent-hosts`): provision
//! (bootstrap → binary ∥ containermanager ∥ repository → provisioning) and reset. A KKInstance claimed before
//! its bootstrap data exists (`--prepare-before-bootstrap-data`) runs the first four (its preparation) in
//! one task and provisioning in a second, once its KKMachine names the data in the spec.
//!
//! The three phases between bootstrap and provisioning need nothing of one another
//! ([`Phase::independent`]): when the first of them starts, the others start beside it, each on its own SSH
//! channel with its own journal records; their results are taken in the phases' order (conditions, journal,
//! completed phases), so a later phase that fails is reported at its turn. A phase that fails does not cut
//! the ones beside it: they run to their end (an OS package transaction cut short would leave dpkg to be
//! repaired) and what completed is recorded, so a retry skips it.
//!
//! Once containerd runs and kubeadm is installed, the image pre-pull ([`HostServices::prepull`](crate::services::HostServices)) goes on
//! alongside what is still running (the OS packages, then provisioning) on another SSH channel; nothing waits
//! for it: kubeadm starts as soon as the packages are in, and its pulls join the pre-pull's. Its records are
//! journaled at the end of the phase it finished in; if provisioning ends first, it is cancelled and the
//! journal says so. The end of preparation does not cancel it: a prepared host's task drives it to its end
//! (bounded by its own timeout) and goes straight on to provisioning, the pull still running, if the bootstrap
//! data is handed over meanwhile. It is not a phase: no condition, no completed-phases entry, never a failure;
//! a restarted task runs it again (images already present are only checked) unless provisioning is done, and
//! so does the provisioning task of a prepared host (with the bootstrap data it knows the exact images).
//!
//! A task writes only its own part of the status (`step`, `journal`, `hostInfo`, the phase conditions and
//! `Deleting`) with the field manager `capkk-manager/hostwork`, and the durable facts (completed phases,
//! terminal failure, reset done) as annotations. Those writes go out in the background
//! ([`super::writes`]): the host's commands do not wait for them, and the task waits for them only before it
//! ends. It never sleeps through a backoff: a transient failure is recorded in the registry and the task
//! ends; the reconcile decides when to start again.

use std::collections::BTreeSet;
use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};
use std::{future::Future, pin::Pin, task::Poll, time::Duration};

use futures::future::MaybeDone;

use capkk_api::{
    JournalRecord, KKInstance, KKInstanceStatus,
    consts::{
        BLOCK_MOVE_ANNOTATION, COMPLETED_PHASES_ANNOTATION, FAILED_ANNOTATION, HOST_CLAIMS_ANNOTATION,
        RESET_DONE_ANNOTATION, TOUCHED_ANNOTATION, UNREACHABLE_SINCE_ANNOTATION, conditions as cond, reasons,
    },
};
use capkk_service::{
    Result as ServiceResult,
    journal::{Progress, StepRecord},
};
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::{
    failure::{Failure, service_failure},
    inputs::{Connected, bootstrap_data, connect, phase_input},
    release::quarantine,
    state::completed,
    writes::{Op, Writes},
};
use crate::{
    conditions,
    context::Context,
    services::{HostCall, LoadBalancerPlan, PREPULL_AFTER, PREPULL_NEEDS, Phase},
};

/// Journal records kept in status.
pub(crate) const JOURNAL_KEEP: usize = 25;

/// The condition types host work owns.
pub(crate) const HOSTWORK_CONDITIONS: &[&str] = &[
    cond::BOOTSTRAPPED,
    cond::REPOSITORY_READY,
    cond::BINARIES_READY,
    cond::CRI_READY,
    cond::PROVISIONED,
    cond::LOAD_BALANCER_READY,
    cond::DELETING,
];

/// The part of a KKInstance status host work writes.
pub(crate) fn hostwork_status(s: &KKInstanceStatus) -> KKInstanceStatus {
    KKInstanceStatus {
        step: s.step.clone(),
        journal: s.journal.clone(),
        host_info: s.host_info.clone(),
        conditions: s
            .conditions
            .iter()
            .filter(|c| HOSTWORK_CONDITIONS.contains(&c.type_.as_str()))
            .cloned()
            .collect(),
        ..Default::default()
    }
}

/// Collects step records from the services and logs each one.
#[derive(Default)]
struct TaskProgress {
    /// The KKInstance's name, for the log.
    instance: String,
    records: Mutex<Vec<StepRecord>>,
}

impl TaskProgress {
    fn of(instance: &str) -> Self {
        Self {
            instance: instance.to_owned(),
            ..Default::default()
        }
    }
}

impl Progress for TaskProgress {
    fn step_started(&self, _phase: &str, _index: usize, _total: usize, _name: &str) {}
    fn step_finished(&self, record: &StepRecord) {
        // One line per host step: with the host's clock where the host measured it, steps that ran alongside
        // each other (the image pre-pull and the packages) line up, and each step's share can be read off.
        info!(
            kkinstance = %self.instance,
            phase = %record.phase,
            step = %record.name,
            exit_code = ?record.exit_code,
            duration_ms = record.duration.as_millis() as u64,
            host_finished_ms = ?record.host_finished_ms,
            skipped = record.skipped,
            "Host step finished"
        );
        if let Ok(mut r) = self.records.lock() {
            r.push(record.clone());
        }
    }
}

impl TaskProgress {
    fn drain(&self) -> Vec<JournalRecord> {
        self.records
            .lock()
            .map(|mut r| {
                r.drain(..)
                    .map(|s| JournalRecord {
                        phase: s.phase,
                        name: if s.skipped {
                            format!("{} (skipped)", s.name)
                        } else {
                            s.name
                        },
                        exit_code: s.exit_code.map(i64::from),
                        duration_ms: s.duration.as_millis() as i64,
                        output_tail: Some(s.output_tail).filter(|t| !t.is_empty()),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The writer of one task: its part of the status and the annotations.
struct Task {
    ctx: Arc<Context>,
    api: Api<KKInstance>,
    /// The object the task started from (for events: they need its reference, not its latest state).
    inst: KKInstance,
    name: String,
    ns: String,
    uid: String,
    status: KKInstanceStatus,
    /// The status as last queued (or read): a flush that would not change it is skipped.
    queued: KKInstanceStatus,
    generation: Option<i64>,
    writes: Writes,
}

impl Task {
    fn new(ctx: Arc<Context>, inst: &KKInstance) -> Self {
        let ns = inst.namespace().unwrap_or_default();
        let status = hostwork_status(&inst.status.clone().unwrap_or_default());
        let api = Api::namespaced(ctx.client.clone(), &ns);
        Self {
            writes: Writes::start(api.clone(), inst.name_any()),
            api,
            ctx,
            inst: inst.clone(),
            name: inst.name_any(),
            ns,
            uid: inst.uid().unwrap_or_default(),
            queued: status.clone(),
            status,
            generation: inst.metadata.generation,
        }
    }

    fn set(&mut self, type_: &str, ok: bool, reason: &str, msg: impl Into<String>) {
        conditions::set(
            &mut self.status.conditions,
            type_,
            ok,
            reason,
            msg,
            self.generation,
        );
    }

    fn journal(&mut self, mut records: Vec<JournalRecord>) {
        self.status.journal.append(&mut records);
        let n = self.status.journal.len();
        if n > JOURNAL_KEEP {
            self.status.journal.drain(..n - JOURNAL_KEEP);
        }
    }

    /// Queue the task's part of the status, unless it is what was last queued: a host retried after a
    /// transient failure starts each attempt with the same "connecting" step, and every write wakes both the
    /// KKInstance and the KKMachine reconciler.
    fn flush(&mut self) {
        if self.status == self.queued {
            return;
        }
        self.queued = self.status.clone();
        self.writes.queue(Op::Status(Box::new(self.status.clone())));
    }

    /// Queue an annotation patch (`None` removes one).
    fn annotate(&self, set: &[(&str, Option<String>)]) {
        self.writes.queue(Op::Annotate(
            set.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
        ));
    }

    /// Records `phase` as completed: its condition, `done`, and the completed-phases annotation, in the
    /// phases' order whatever order they ended in.
    fn phase_completed(&mut self, done: &mut BTreeSet<String>, phase: Phase) {
        self.set(phase.condition(), true, reasons::READY, "");
        done.insert(phase.name().to_owned());
        let list: Vec<&str> = Phase::ALL
            .iter()
            .map(|p| p.name())
            .filter(|p| done.contains(*p))
            .collect();
        self.annotate(&[(COMPLETED_PHASES_ANNOTATION, Some(list.join(",")))]);
    }

    /// The log line per phase that `capkk-bench node-ready` reads: how long it ran, on its own.
    fn phase_finished(&self, phase: Phase, ran: Duration, ok: bool) {
        info!(
            kkinstance = %self.name,
            phase = %phase.name(),
            duration_ms = ran.as_millis() as u64,
            ok,
            "Phase finished"
        );
    }

    /// An event about the KKInstance. It refers to the object by kind, namespace, name and UID: the object
    /// the task started from does (no read of the latest version for every event).
    async fn event(&self, warning: bool, reason: &str, note: String) {
        self.ctx
            .event(&self.inst, warning, reason, "HostWork", note)
            .await;
    }

    /// The task's last act: once its writes are out, the next reconcile reads the object fresh and runs now.
    async fn done(&self) {
        self.writes.sync().await;
        self.ctx.tasks.mark_finished(&self.uid);
        self.ctx.metrics.set_tasks_running(self.ctx.tasks.len() as i64);
        self.ctx.trigger_instance(&self.name, &self.ns);
    }
}

/// The step an attempt reports until it is connected to the host: while a host is retried after a
/// transient failure, an attempt at this step keeps reporting that failure (see `quiet_retry`).
pub(crate) const CONNECTING_STEP: &str = "connecting";

/// Runs one phase for at most `limit` (`--max-host-phase-duration`). Each command already has its own bound,
/// but bootstrap data decides how many commands there are: without a bound on the phase, one KKInstance could
/// keep its slot of host work for days. Past the bound the phase fails terminally (the retry annotation resumes
/// it from the host's journal); dropping it closes its SSH channel.
pub(crate) async fn bounded_phase<F>(
    phase: Phase,
    limit: Duration,
    run: F,
) -> Result<ServiceResult<()>, Failure>
where
    F: Future<Output = ServiceResult<()>>,
{
    tokio::time::timeout(limit, run)
        .await
        .map_err(|_| Failure::Terminal {
            reason: reasons::COMMAND_FAILED,
            message: format!(
                "{}; set the retry annotation to resume it",
                overran(phase.name(), limit)
            ),
        })
}

/// What a condition says of host work (`what`) cut at `--max-host-phase-duration` (`limit`): host phases,
/// remediation attempts and in-place upgrades are bounded alike.
pub(crate) fn overran(what: &str, limit: Duration) -> String {
    format!(
        "{what} ran longer than {} s (--max-host-phase-duration)",
        limit.as_secs()
    )
}

/// Work the host does alongside the phases (the image pre-pull).
type SideJob<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Runs `main` while also driving `side` forward; `side` is cleared once it finished. The side job is polled
/// first, so that its command reaches the host before the phase's first one.
pub(crate) async fn alongside<T>(main: impl Future<Output = T>, side: &mut Option<SideJob<'_>>) -> T {
    let Some(job) = side.as_mut() else {
        return main.await;
    };
    tokio::pin!(main);
    tokio::select! {
        biased;
        () = job => {}
        out = &mut main => return out,
    }
    *side = None;
    main.await
}

/// What a phase's run returns: the bound's verdict around the service's result.
type PhaseOutcome = Result<ServiceResult<()>, Failure>;

/// A phase's run, boxed so that phases started ahead of their turn can be held side by side.
type PhaseJob<'a> = Pin<Box<dyn Future<Output = PhaseOutcome> + Send + 'a>>;

/// A phase started ahead of its turn: its outcome and how long it ran, kept until its turn.
type TimedJob<'a> = Pin<Box<dyn Future<Output = (PhaseOutcome, Duration)> + Send + 'a>>;

/// Phases started before their turn ([`Phase::independent`]), running beside the phase in front of them on
/// channels of their own. Each keeps its result until the loop reaches its turn and takes it, so conditions,
/// journal and completed phases are still written in the phases' order.
#[derive(Default)]
struct Early<'a> {
    jobs: Vec<(Phase, MaybeDone<TimedJob<'a>>)>,
}

impl<'a> Early<'a> {
    fn start(&mut self, phase: Phase, job: PhaseJob<'a>) {
        let started = tokio::time::Instant::now();
        let timed: TimedJob<'a> = Box::pin(async move { (job.await, started.elapsed()) });
        self.jobs.push((phase, futures::future::maybe_done(timed)));
    }

    fn is_started(&self, phase: Phase) -> bool {
        self.jobs.iter().any(|(p, ..)| *p == phase)
    }

    /// Phases started and not taken yet, in their order.
    fn pending(&self) -> Vec<Phase> {
        self.jobs.iter().map(|(p, ..)| *p).collect()
    }

    fn poll_jobs(&mut self, cx: &mut std::task::Context<'_>) {
        for (_, job) in &mut self.jobs {
            // A finished job stays `Done` until taken; polling it again is a no-op.
            let _ = Pin::new(job).poll(cx);
        }
    }

    /// Runs `main` while driving every started phase. `main` is polled first: its first command is the
    /// phase whose turn it is.
    async fn drive<T>(&mut self, main: impl Future<Output = T>) -> T {
        tokio::pin!(main);
        std::future::poll_fn(|cx| {
            let out = main.as_mut().poll(cx);
            self.poll_jobs(cx);
            out
        })
        .await
    }

    /// Waits for `phase` (driving the others meanwhile) and takes its outcome and how long it ran; `None`
    /// if it was not started early.
    async fn take(&mut self, phase: Phase) -> Option<(PhaseOutcome, Duration)> {
        std::future::poll_fn(|cx| {
            self.poll_jobs(cx);
            let Some(i) = self.jobs.iter().position(|(p, ..)| *p == phase) else {
                return Poll::Ready(None);
            };
            if !matches!(self.jobs[i].1, MaybeDone::Done(_)) {
                return Poll::Pending;
            }
            let (_, mut job) = self.jobs.remove(i);
            Poll::Ready(Pin::new(&mut job).take_output())
        })
        .await
    }
}

/// The journal record of an image pre-pull that host work ended before (after `ran`): its own record, with
/// the line per image, never came.
fn prepull_cancelled(ran: Duration) -> StepRecord {
    StepRecord {
        phase: PREPULL_AFTER.name().into(),
        name: capkk_service::images::STEP.into(),
        exit_code: None,
        duration: ran,
        output_tail: format!(
            "not finished when host work ended ({} s after it started): cancelled; kubeadm pulls what it needs",
            ran.as_secs()
        ),
        skipped: false,
        host_finished_ms: None,
    }
}

/// How a provision task's phases ended (when they did not fail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// Every phase ran: the bootstrap data ran and the sentinel is there.
    Provisioned,
    /// Every phase but provisioning ran, and the spec still names no bootstrap data: the host waits for it.
    Prepared,
    /// Stopped at a step boundary (paused).
    Stopped,
}

/// How often a prepared host's task looks for the bootstrap data while its image pre-pull still runs.
const HANDOVER_POLL: Duration = Duration::from_secs(1);

/// A prepared host's task at the phase that runs the bootstrap data, which the spec does not name yet. A
/// pre-pull under way is not cut because preparation ended: the task drives it to its end (it is bounded by
/// its own timeout) and looks in the cache meanwhile for the bootstrap data the KKMachine hands over. Returns
/// the handed-over Secret's reference (provisioning follows in this task, the pre-pull still running
/// alongside), or `None` once the pre-pull is over (or there was none) or the task is asked to stop.
async fn await_handover(
    ctx: &Context,
    inst: &KKInstance,
    stop: &AtomicBool,
    prepull: &mut Option<SideJob<'_>>,
) -> Option<capkk_api::SecretRef> {
    let ns = inst.namespace().unwrap_or_default();
    loop {
        if let Some(r) = ctx
            .stores
            .instance(&ns, &inst.name_any())
            .await
            .filter(|i| i.uid() == inst.uid())
            .and_then(|i| i.spec.bootstrap_data_secret_ref.clone())
        {
            return Some(r);
        }
        if prepull.is_none() || stop.load(Ordering::SeqCst) {
            return None;
        }
        alongside(tokio::time::sleep(HANDOVER_POLL), prepull).await;
    }
}

/// Provision the host, phase by phase, skipping phases recorded as completed. Without bootstrap data in the
/// spec (`--prepare-before-bootstrap-data`) it prepares the host and ends before provisioning, unless the data
/// is handed over while its image pre-pull still runs.
pub(crate) async fn provision_task(ctx: Arc<Context>, inst: KKInstance, stop: Arc<AtomicBool>, retry: bool) {
    let permit = ctx
        .tasks
        .permits
        .acquire(&inst.namespace().unwrap_or_default())
        .await;
    let mut t = Task::new(ctx.clone(), &inst);
    ctx.tasks.forget_provisioned(&t.uid);
    ctx.metrics.set_tasks_running(ctx.tasks.len() as i64);
    let phases = Phase::ALL;
    let n = phases.len();
    let mut current = Phase::Bootstrap;
    // Whether the host was reached and claimed: a refusal before that ran nothing on it.
    let mut reached = false;
    let result: Result<Ended, Failure> = async {
        let kkc = crate::machine_host::get_kkcluster(&ctx, &inst)
            .await
            .map_err(|e| Failure::Transient(e.to_string()))?;
        t.status.step = Some(CONNECTING_STEP.into());
        t.flush();
        // The bootstrap data is read while connecting, not between the phases: the image pre-pull needs it
        // the moment containerd runs. Unreadable now, it is read again when needed (and its failure
        // reported by provisioning).
        let (connected, early_data, touched) = tokio::join!(
            connect(&ctx, &inst, kkc.as_ref()),
            bootstrap_data(&ctx, &inst),
            super::mark_touched(&t.api, &inst)
        );
        let Connected { exec, target, claims } = connected?;
        reached = true;
        let claims = claims.join(",");
        if inst.annotations().get(HOST_CLAIMS_ANNOTATION) != Some(&claims) {
            // Recorded so that the claim is given back when the KKInstance goes.
            t.annotate(&[(HOST_CLAIMS_ANNOTATION, Some(claims))]);
        }
        // After the claims are recorded: a failed mark still leaves the Leases connect took to be given back.
        touched.map_err(|e| Failure::Transient(e.to_string()))?;
        if inst.spec.host_key.is_none()
            && inst.spec.host_keys.is_empty()
            && let Some(fp) = ctx.ssh.observed_fingerprint(&target)
        {
            let patch = json!({ "spec": { "hostKey": fp } });
            match t
                .api
                .patch(
                    &t.name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => info!(fingerprint = %fp, "Trusting the host key on first use"),
                // Unrecorded, the next connection (a new pool slot after a restart) would trust any key.
                Err(e) => {
                    return Err(Failure::Transient(format!(
                        "recording the host key {fp} in spec.hostKey failed: {e}"
                    )));
                }
            }
        }
        if let (Some(b), Some(_)) = (target.bastion.as_deref(), inst.spec.bastion.as_ref())
            && matches!(b.host_key, capkk_ssh::HostKeyPolicy::TrustOnFirstUse)
            && let Some(fp) = ctx.ssh.observed_fingerprint(b)
        {
            let patch = json!({ "spec": { "bastion": { "hostKeys": [fp] } } });
            t.api
                .patch(
                    &t.name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .map_err(|e| {
                    Failure::Transient(format!("recording the bastion host key {fp} failed: {e}"))
                })?;
            info!(fingerprint = %fp, "Trusting the bastion host key on first use");
        }
        let mut done = completed(&inst);
        let mut input = phase_input(&ctx, &inst, kkc.as_ref()).await?;
        input.rerun_failed = retry;
        target
            .secret_texts()
            .into_iter()
            .for_each(|t| input.redactor.add(t));
        if let Ok(Some(data)) = early_data {
            let _ = input.bootstrap.set(data);
        }
        let side_progress = TaskProgress::of(&t.name);
        let mut prepull: Option<SideJob<'_>> = None;
        let mut prepull_started: Option<tokio::time::Instant> = None;
        // Each phase reports its steps to its own progress (a phase started early borrows it while it runs
        // beside the current one), indexed by the phase.
        let progress: [TaskProgress; Phase::ALL.len()] = Phase::ALL.map(|_| TaskProgress::of(&t.name));
        let progress_of = |phase: Phase| &progress[phase as usize];
        let mut early = Early::default();
        let phases_result: Result<Ended, Failure> = async {
            for (i, phase) in phases.iter().copied().enumerate() {
                current = phase;
                if done.contains(phase.name()) {
                    if !conditions::is_true(&t.status.conditions, phase.condition()) {
                        t.set(phase.condition(), true, reasons::READY, "completed earlier");
                    }
                    continue;
                }
                if stop.load(Ordering::SeqCst) {
                    return Ok(Ended::Stopped);
                }
                if let (Phase::LoadBalancer, LoadBalancerPlan::Refuse(message)) = (phase, &input.load_balancer) {
                    // A second control plane whose endpoint would be one control-plane host: kubeadm must not
                    // join it (the condition and the event name spec.controlPlaneLoadBalancer).
                    return Err(Failure::Terminal {
                        reason: reasons::NO_LOAD_BALANCER,
                        message: message.clone(),
                    });
                }
                if prepull_started.is_none() && PREPULL_NEEDS.iter().all(|p| done.contains(p.name())) {
                    prepull_started = Some(tokio::time::Instant::now());
                    // The images depend on what the bootstrap data runs. Unreadable, it is read again (and
                    // its failure reported) by provisioning; the pre-pull then notes that it pulled nothing.
                    if input.bootstrap.get().is_none()
                        && let Ok(Some(data)) = bootstrap_data(&ctx, &inst).await
                    {
                        let _ = input.bootstrap.set(data);
                    }
                    prepull = Some(ctx.services.prepull(HostCall {
                        exec: &*exec,
                        input: &input,
                        progress: &side_progress,
                    }));
                }
                // Provisioning does not wait for the pre-pull: kubeadm asks for the images in its own order,
                // and its pull of an image containerd is already fetching waits for that content instead of
                // fetching it again. Waiting would hold kubeadm until the last image is in, though it needs
                // the first ones first and spends most of its time starting the control plane.
                let mut handed = None;
                if phase.needs_bootstrap_data() && inst.spec.bootstrap_data_secret_ref.is_none() {
                    info!(kkinstance = %t.name, "Host prepared; waiting for the bootstrap data");
                    t.event(
                        false,
                        capkk_api::consts::events::HOST_PREPARED,
                        "host prepared (bootstrap, binaries, container runtime, packages) before its bootstrap data; provisioning runs once the data is written".into(),
                    )
                    .await;
                    if prepull.is_some() {
                        t.status.step = Some(
                            "host prepared; waiting for the bootstrap data (image pre-pull still running)".into(),
                        );
                        t.flush();
                    }
                    match await_handover(&ctx, &inst, &stop, &mut prepull).await {
                        Some(r) => {
                            let mut with_data = inst.clone();
                            with_data.spec.bootstrap_data_secret_ref = Some(r);
                            handed = Some(with_data);
                        }
                        None if stop.load(Ordering::SeqCst) => return Ok(Ended::Stopped),
                        None => return Ok(Ended::Prepared),
                    }
                }
                if phase.needs_bootstrap_data()
                    && input.bootstrap.get().is_none()
                    && let Some(data) = bootstrap_data(&ctx, handed.as_ref().unwrap_or(&inst)).await?
                {
                    let _ = input.bootstrap.set(data);
                }
                let (res, ran) = if early.is_started(phase) {
                    // Started beside an earlier phase: its turn is to wait for its end.
                    let (res, ran) = alongside(early.take(phase), &mut prepull)
                        .await
                        .expect("a started phase is taken once");
                    (res, ran)
                } else {
                    let step = format!("step {}/{}: {}", i + 1, n, phase.name());
                    info!(kkinstance = %t.name, "Running {step}");
                    t.status.step = Some(step.clone());
                    t.set(phase.condition(), false, reasons::IN_PROGRESS, &step);
                    if phase.independent() {
                        // The phases between bootstrap and provisioning need only what bootstrap set up,
                        // not one another: the later ones start now, on channels of their own, instead
                        // of after this one (the OS packages' transaction no longer waits for the
                        // binaries and containerd).
                        for (j, later) in phases.iter().copied().enumerate().skip(i + 1) {
                            if !later.independent() || done.contains(later.name()) || early.is_started(later) {
                                continue;
                            }
                            let step = format!("step {}/{}: {} (alongside {})", j + 1, n, later.name(), phase.name());
                            info!(kkinstance = %t.name, "Running {step}");
                            t.set(later.condition(), false, reasons::IN_PROGRESS, &step);
                            let host = HostCall {
                                exec: &*exec,
                                input: &input,
                                progress: progress_of(later),
                            };
                            let services = &ctx.services;
                            let limit = ctx.settings.max_host_phase_duration;
                            early.start(
                                later,
                                Box::pin(bounded_phase(later, limit, services.run(later, host))),
                            );
                        }
                    }
                    t.flush();
                    let started = tokio::time::Instant::now();
                    let host = HostCall {
                        exec: &*exec,
                        input: &input,
                        progress: progress_of(phase),
                    };
                    let res = alongside(
                        early.drive(bounded_phase(
                            phase,
                            ctx.settings.max_host_phase_duration,
                            ctx.services.run(phase, host),
                        )),
                        &mut prepull,
                    )
                    .await;
                    (res, started.elapsed())
                };
                t.journal(progress_of(phase).drain());
                t.journal(side_progress.drain());
                t.phase_finished(phase, ran, matches!(res, Ok(Ok(()))));
                let res = res?;
                if let Some(f) = input.facts.lock().ok().and_then(|f| f.clone()) {
                    t.status.host_info = Some(capkk_api::HostInfo {
                        os: Some(f.os_id.clone()).filter(|s| !s.is_empty()),
                        os_version: Some(f.os_version.clone()).filter(|s| !s.is_empty()),
                        arch: Some(f.arch.clone()).filter(|s| !s.is_empty()),
                        init_system: Some(match f.init {
                            capkk_service::facts::InitSystem::Systemd => "systemd".to_owned(),
                            capkk_service::facts::InitSystem::SystemctlOnly => "systemctl".to_owned(),
                            capkk_service::facts::InitSystem::Unsupported(ref w) => w.clone(),
                        }),
                    });
                }
                res.map_err(|e| service_failure(phase, e))?;
                t.phase_completed(&mut done, phase);
                if phase == Phase::LoadBalancer
                    && matches!(input.load_balancer, LoadBalancerPlan::Serve(_))
                    && let Some(kkc) = inst.spec.cluster_name.as_deref()
                {
                    // The other members learn of this one from the KKCluster's sync: now, not at its next
                    // poll (until then their keepalived does not send it adverts, and it may take the VIP too).
                    ctx.trigger_cluster(kkc, &t.ns);
                }
            }
            Ok(Ended::Provisioned)
        }
        .await;
        // A phase failed (or the task was paused) while later ones ran beside it: they are let finish, not
        // cut (an OS package transaction cut short leaves dpkg to be repaired), and what they did is
        // recorded, so that a retry skips what completed.
        for phase in early.pending() {
            if let Some((res, ran)) = early.take(phase).await {
                t.journal(progress_of(phase).drain());
                t.phase_finished(phase, ran, matches!(res, Ok(Ok(()))));
                let failure = match res {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(service_failure(phase, e)),
                    Err(f) => Some(f),
                };
                match failure {
                    None => t.phase_completed(&mut done, phase),
                    Some(Failure::Terminal { reason, message }) => t.set(phase.condition(), false, reason, message),
                    Some(Failure::Transient(m)) => t.set(phase.condition(), false, reasons::UNREACHABLE, m),
                }
            }
        }
        if let (Some(job), Some(started)) = (prepull.take(), prepull_started) {
            // Host work ended (provisioned, failed or paused) before the pre-pull: it is dropped, which
            // closes its SSH channel, rather than awaited. The task's end is what makes the KKInstance
            // Ready (or lets a retry start), so waiting would delay the Machine for images kubeadm already
            // pulled, or will pull, itself. What is left on the host is bounded: each pull by its own
            // timeout, and the script ends when it next writes to the closed channel.
            drop(job);
            let ran = started.elapsed();
            info!(kkinstance = %t.name, ran_s = ran.as_secs(), "Image pre-pull cancelled: host work ended first");
            side_progress.step_finished(&prepull_cancelled(ran));
        }
        t.journal(side_progress.drain());
        phases_result
    }
    .await;
    match result {
        Ok(Ended::Provisioned) => {
            ctx.tasks.succeeded(&t.uid);
            t.status.step = Some(format!("step {n}/{n}: done"));
            t.flush();
            info!(kkinstance = %t.name, "Host provisioned");
            // The KKMachine need not wait for the status write just queued to come back through the watch.
            ctx.tasks.report_provisioned(&t.uid);
            if let Some(km) = controlling_kkmachine(&inst) {
                ctx.trigger_machine(&km, &t.ns);
            }
            t.event(
                false,
                capkk_api::consts::events::PROVISIONED,
                "bootstrap data ran; sentinel present".into(),
            )
            .await;
        }
        Ok(Ended::Prepared) => {
            ctx.tasks.succeeded(&t.uid);
            let msg = "host prepared; waiting for the bootstrap data";
            t.status.step = Some(msg.into());
            t.set(cond::PROVISIONED, false, reasons::WAITING_FOR_BOOTSTRAP_DATA, msg);
            t.flush();
        }
        Ok(Ended::Stopped) => {
            t.status.step = Some("host work stopped at a step boundary (paused)".into());
            t.flush();
        }
        Err(Failure::Transient(msg)) => {
            let delay = ctx.tasks.transient_failure(&t.uid, &msg);
            warn!(kkinstance = %t.name, error = %msg, ?delay, "Host work failed; retrying later");
            t.set(current.condition(), false, reasons::UNREACHABLE, &msg);
            t.flush();
            t.event(true, reasons::UNREACHABLE, msg).await;
        }
        Err(Failure::Terminal { reason, message }) => {
            warn!(kkinstance = %t.name, %reason, "Host work failed terminally: {message}");
            if !reached
                && [reasons::HOST_IN_USE, reasons::ADDRESS_REFUSED].contains(&reason)
                && !inst.annotations().contains_key(HOST_CLAIMS_ANNOTATION)
            {
                // Refused before anything ran, and never held before: the host is not dirty on this claim's
                // account, so its release must not reset (touch) a host another claim holds, nor try to
                // reach an address the policy refuses (a reset would fail and quarantine it).
                t.annotate(&[(TOUCHED_ANNOTATION, None)]);
            }
            t.set(current.condition(), false, reason, &message);
            t.flush();
            t.annotate(&[(FAILED_ANNOTATION, Some(reason.to_owned()))]);
            t.event(true, reason, message).await;
        }
    }
    t.annotate(&[(BLOCK_MOVE_ANNOTATION, None)]);
    drop(permit);
    t.done().await;
}

/// The KKMachine that controls `inst` (its claim), if any.
fn controlling_kkmachine(inst: &KKInstance) -> Option<String> {
    inst.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "KKMachine")
        .map(|o| o.name.clone())
}

/// Reset the host (kubeadm reset, capkk state, bootstrap files). On release, a host whose reset fails
/// terminally is quarantined.
pub(crate) async fn reset_task(ctx: Arc<Context>, inst: KKInstance, releasing: bool) {
    let permit = ctx
        .tasks
        .permits
        .acquire(&inst.namespace().unwrap_or_default())
        .await;
    let mut t = Task::new(ctx.clone(), &inst);
    ctx.tasks.forget_provisioned(&t.uid);
    t.status.step = Some("reset".into());
    t.set(cond::DELETING, false, reasons::IN_PROGRESS, "resetting the host");
    t.flush();
    let result: Result<(), Failure> = async {
        let kkc = crate::machine_host::get_kkcluster(&ctx, &inst)
            .await
            .map_err(|e| Failure::Transient(e.to_string()))?;
        let (exec, target) = match connect(&ctx, &inst, kkc.as_ref()).await {
            Err(Failure::Terminal {
                reason: reasons::HOST_IN_USE,
                message,
            }) => {
                // Another claim holds the host: commands run only under the claim, so nothing of this
                // KKInstance is on it to undo, and the other claim's work must not be reset.
                info!(kkinstance = %t.name, "Nothing to reset: {message}");
                return Ok(());
            }
            other => {
                let c = other?;
                (c.exec, c.target)
            }
        };
        let mut input = phase_input(&ctx, &inst, kkc.as_ref()).await?;
        target
            .secret_texts()
            .into_iter()
            .for_each(|t| input.redactor.add(t));
        let progress = TaskProgress::of(&t.name);
        let host = HostCall {
            exec: &*exec,
            input: &input,
            progress: &progress,
        };
        let res = ctx.services.reset(host).await;
        t.journal(progress.drain());
        res.map_err(|e| service_failure(Phase::Bootstrap, e))
    }
    .await;
    match result {
        Ok(()) => {
            ctx.tasks.succeeded(&t.uid);
            t.set(cond::DELETING, true, reasons::READY, "host reset");
            t.flush();
            t.annotate(&[
                (RESET_DONE_ANNOTATION, Some(Timestamp::now().to_string())),
                (COMPLETED_PHASES_ANNOTATION, None),
                (UNREACHABLE_SINCE_ANNOTATION, None),
                (FAILED_ANNOTATION, None),
                (BLOCK_MOVE_ANNOTATION, None),
            ]);
            info!(kkinstance = %t.name, "Host reset");
            t.event(
                false,
                capkk_api::consts::events::HOST_RESET,
                "host reset; it is free again".into(),
            )
            .await;
        }
        Err(Failure::Transient(msg)) => {
            let delay = ctx.tasks.transient_failure(&t.uid, &msg);
            warn!(kkinstance = %t.name, error = %msg, ?delay, "Reset failed; retrying later");
            t.set(cond::DELETING, false, reasons::UNREACHABLE, &msg);
            t.flush();
            let mut set = vec![(BLOCK_MOVE_ANNOTATION, None)];
            if !inst.annotations().contains_key(UNREACHABLE_SINCE_ANNOTATION)
                && inst.metadata.deletion_timestamp.is_none()
            {
                set.push((UNREACHABLE_SINCE_ANNOTATION, Some(Timestamp::now().to_string())));
            }
            t.annotate(&set);
        }
        Err(Failure::Terminal { reason, message }) => {
            if releasing {
                let why = format!("reset failed ({reason}): {message}");
                if let Err(e) = quarantine(&inst, &ctx, &why).await {
                    warn!(error = %e, "Quarantining failed");
                }
            } else {
                t.set(cond::DELETING, false, reason, &message);
                t.flush();
                t.event(true, reason, message.clone()).await;
                ctx.tasks.transient_failure(&t.uid, &message);
            }
            t.annotate(&[(BLOCK_MOVE_ANNOTATION, None)]);
        }
    }
    drop(permit);
    t.done().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_phase_that_runs_past_the_bound_ends_terminally_and_frees_its_slot() {
        let limit = Duration::from_secs(2 * 3600);
        let started = tokio::time::Instant::now();
        // Bootstrap data of endless commands, each under its own bound.
        let endless = futures::future::pending::<ServiceResult<()>>();
        match bounded_phase(Phase::Provisioning, limit, endless).await {
            Err(Failure::Terminal { reason, message }) => {
                assert_eq!(reason, reasons::COMMAND_FAILED);
                assert!(
                    message.contains("provisioning ran longer than 7200 s (--max-host-phase-duration)"),
                    "{message}"
                );
            }
            Err(Failure::Transient(m)) => panic!("expected a terminal failure, got a transient one: {m}"),
            Ok(r) => panic!(
                "expected a terminal failure, the phase returned (ok: {})",
                r.is_ok()
            ),
        }
        assert_eq!(started.elapsed(), limit);
        // A phase within the bound returns its own result.
        let quick = async { Ok(()) };
        assert!(matches!(
            bounded_phase(Phase::Bootstrap, limit, quick).await,
            Ok(Ok(()))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn phases_started_early_run_beside_the_current_one_and_are_taken_at_their_turn() {
        let sleeper = |secs: u64| -> PhaseJob<'static> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                Ok(Ok(()))
            })
        };
        let t0 = tokio::time::Instant::now();
        let mut early = Early::default();
        early.start(Phase::ContainerManager, sleeper(10));
        early.start(Phase::Repository, sleeper(30));
        assert!(early.is_started(Phase::Repository) && !early.is_started(Phase::Binary));
        // The binaries take 20 s; containerd ends within them, the packages do not.
        let out = early
            .drive(async {
                tokio::time::sleep(Duration::from_secs(20)).await;
                "binary"
            })
            .await;
        assert_eq!((out, t0.elapsed()), ("binary", Duration::from_secs(20)));
        // containerd's turn costs nothing: it ended 10 s ago, and kept its result and how long it ran.
        let (res, ran) = early.take(Phase::ContainerManager).await.expect("started");
        assert!(matches!(res, Ok(Ok(()))));
        assert_eq!(
            (ran, t0.elapsed()),
            (Duration::from_secs(10), Duration::from_secs(20))
        );
        // The packages' turn waits for their end, 30 s after all three started.
        assert_eq!(early.pending(), [Phase::Repository]);
        let (_, ran) = early.take(Phase::Repository).await.expect("started");
        assert_eq!(
            (ran, t0.elapsed()),
            (Duration::from_secs(30), Duration::from_secs(30))
        );
        // A phase not started early, or taken already, is not waited for.
        assert!(early.take(Phase::Repository).await.is_none());
        assert!(early.pending().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_side_job_progresses_while_phases_run_and_is_kept_for_the_next_phase_when_unfinished() {
        use std::sync::atomic::AtomicUsize;
        let ticks = Arc::new(AtomicUsize::new(0));
        let counter = ticks.clone();
        let mut side: Option<SideJob<'_>> = Some(Box::pin(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(10)).await;
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }));
        // A 15 s phase: the side job got through one of its 10 s sleeps and is kept.
        alongside(tokio::time::sleep(Duration::from_secs(15)), &mut side).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 1);
        assert!(side.is_some(), "an unfinished side job is kept");
        // A longer phase: the side job finishes within it and is cleared; the phase still runs to its end.
        let started = tokio::time::Instant::now();
        let out = alongside(
            async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                7
            },
            &mut side,
        )
        .await;
        assert_eq!(out, 7);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        assert_eq!(ticks.load(Ordering::SeqCst), 3);
        assert!(side.is_none(), "a finished side job is cleared");
    }
}
