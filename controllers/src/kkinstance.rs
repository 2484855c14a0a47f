//! KKInstance reconciler: one claimed host. Host work runs as a background task per UID (bounded by
//! `--max-concurrent-hosts`), phase by phase, with progress in conditions; completed phases are recorded
//! in an annotation so a restarted (or moved) manager resumes without repeating them. Release resets the
//! host and frees it, or quarantines a host that stays unreachable.

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use capkk_api::{
    JournalRecord, KKCluster, KKInstance, KKInstanceStatus, KKMachine, Quarantine,
    consts::{
        BLOCK_MOVE_ANNOTATION, CLUSTER_NAME_LABEL, KKINSTANCE_FINALIZER, QUARANTINED_LABEL, RETRY_ANNOTATION,
        conditions as cond, reasons,
    },
};
use capkk_executor::{ExecError, ExecRequest, Executor};
use capkk_service::journal::{Progress, Redactor, StepRecord};
use k8s_openapi::{
    api::core::v1::Secret as K8sSecret, apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::{controller::Action, finalizer, finalizer::Event},
};
use serde_json::{Value, json};
use tracing::{debug, info, instrument, warn};

use crate::{
    annotations,
    capi::Cluster,
    conditions,
    context::{Context, TaskKind, externally_managed, paused_annotation},
    error::{Error, Result},
    hosts,
    metrics::MeteredExecutor,
    services::{BootstrapData, Phase, PhaseInput},
};

const KIND: &str = "KKInstance";
/// Journal records kept in status.
pub const JOURNAL_KEEP: usize = 25;

/// Condition reasons that stop work until the spec changes or the retry annotation is set.
const TERMINAL: &[&str] = &[
    reasons::COMMAND_FAILED,
    reasons::UNSUPPORTED,
    reasons::HOST_KEY_MISMATCH,
    reasons::AUTH_FAILED,
    reasons::INVALID_SPEC,
    reasons::CREDENTIALS_UNAVAILABLE,
];

/// Reconcile one KKInstance.
#[instrument(skip_all, fields(kkinstance = %obj.name_any(), ns = obj.namespace().unwrap_or_default()))]
pub async fn reconcile(obj: Arc<KKInstance>, ctx: Arc<Context>) -> Result<Action> {
    let start = std::time::Instant::now();
    let res = reconcile_inner(obj, &ctx).await;
    ctx.metrics.reconciled(KIND, start.elapsed());
    ctx.metrics.set_tasks_running(ctx.tasks.len() as i64);
    res
}

/// Requeue with backoff on errors.
pub fn error_policy(obj: Arc<KKInstance>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = format!("kki/{}", obj.uid().unwrap_or_default());
    ctx.requeue_after_error(KIND, &key, &obj.name_any(), err)
}

fn completed(inst: &KKInstance) -> BTreeSet<String> {
    inst.annotations()
        .get(annotations::COMPLETED_PHASES)
        .map(|s| {
            s.split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

async fn annotate(api: &Api<KKInstance>, name: &str, set: &[(&str, Option<String>)]) -> Result<()> {
    let mut map = serde_json::Map::new();
    for (k, v) in set {
        map.insert(
            (*k).to_owned(),
            v.clone().map(Value::String).unwrap_or(Value::Null),
        );
    }
    let patch = json!({ "metadata": { "annotations": map } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(format!("annotate KKInstance {name}")))?;
    Ok(())
}

async fn write_status(
    api: &Api<KKInstance>,
    inst: &KKInstance,
    status: &KKInstanceStatus,
    ctx: &Context,
) -> Result<()> {
    let old = inst.status.clone().unwrap_or_default();
    if conditions::same(&old.conditions, &status.conditions)
        && old.state == status.state
        && old.step == status.step
        && old.observed_generation == status.observed_generation
    {
        return Ok(());
    }
    patch_status(api, &inst.name_any(), status, ctx).await
}

async fn patch_status(
    api: &Api<KKInstance>,
    name: &str,
    status: &KKInstanceStatus,
    ctx: &Context,
) -> Result<()> {
    let patch = json!({ "status": status });
    api.patch_status(
        name,
        &PatchParams::apply(&ctx.settings.field_manager),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube(format!("patch KKInstance {name} status")))?;
    Ok(())
}

async fn reconcile_inner(inst: Arc<KKInstance>, ctx: &Arc<Context>) -> Result<Action> {
    if !ctx.passes_filter(&*inst) {
        return Ok(Action::await_change());
    }
    if externally_managed(&*inst) {
        debug!("externally managed, skipping");
        return Ok(Action::await_change());
    }
    let ns = inst.namespace().unwrap_or_default();
    let uid = inst.uid().unwrap_or_default();
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster_paused = match inst.labels().get(CLUSTER_NAME_LABEL) {
        Some(c) => Api::<Cluster>::namespaced(ctx.client.clone(), &ns)
            .get_opt(c)
            .await
            .map_err(Error::kube(format!("get Cluster {ns}/{c}")))?
            .is_some_and(|c| c.spec.paused == Some(true)),
        None => false,
    };
    if cluster_paused || paused_annotation(&*inst) {
        info!("paused: stopping host work at the next step");
        ctx.tasks.request_stop(&uid);
        if ctx.tasks.running(&uid).is_none() {
            let mut status = inst.status.clone().unwrap_or_default();
            conditions::set(
                &mut status.conditions,
                cond::PAUSED,
                true,
                reasons::PAUSED,
                "",
                inst.metadata.generation,
            );
            write_status(&api, &inst, &status, ctx).await?;
            if inst.annotations().contains_key(BLOCK_MOVE_ANNOTATION) {
                annotate(&api, &inst.name_any(), &[(BLOCK_MOVE_ANNOTATION, None)]).await?;
            }
        }
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    let res = finalizer(&api, KKINSTANCE_FINALIZER, inst, |ev| async {
        match ev {
            Event::Apply(o) => apply(o, ctx).await,
            Event::Cleanup(o) => cleanup(o, ctx).await,
        }
    })
    .await
    .map_err(Error::from)?;
    Ok(res)
}

async fn apply(inst: Arc<KKInstance>, ctx: &Arc<Context>) -> Result<Action> {
    let ns = inst.namespace().unwrap_or_default();
    let name = inst.name_any();
    let uid = inst.uid().unwrap_or_default();
    let gen_ = inst.metadata.generation;
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let mut status = inst.status.clone().unwrap_or_default();
    conditions::set(
        &mut status.conditions,
        cond::PAUSED,
        false,
        reasons::NOT_PAUSED,
        "",
        gen_,
    );

    if let Some(q) = inst.spec.quarantine.as_ref() {
        if inst.labels().get(QUARANTINED_LABEL).map(String::as_str) != Some("true") {
            let patch = json!({ "metadata": { "labels": { QUARANTINED_LABEL: "true" } } });
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::kube(format!("label KKInstance {name}")))?;
        }
        status.state = Some("quarantined".into());
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::QUARANTINED,
            format!(
                "{}; delete this KKInstance after fixing the host to make it claimable again",
                q.reason
            ),
            gen_,
        );
        write_status(&api, &inst, &status, ctx).await?;
        return Ok(Action::await_change());
    }
    if inst.annotations().contains_key(annotations::RELEASE) {
        return release(inst, ctx).await;
    }

    // Work starts only once the owning KKMachine recorded the claim (a claim that lost a race is deleted
    // by its KKMachine before anything touches the host).
    let owner = inst
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "KKMachine")
        .cloned();
    let Some(owner) = owner else {
        debug!("no owning KKMachine: nothing to do");
        return Ok(Action::await_change());
    };
    let km = Api::<KKMachine>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&owner.name)
        .await
        .map_err(Error::kube(format!("get KKMachine {ns}/{}", owner.name)))?;
    match km
        .as_ref()
        .filter(|m| m.uid().as_deref() == Some(owner.uid.as_str()))
    {
        None => return Ok(Action::requeue(Duration::from_secs(10))),
        Some(m) if m.spec.instance_id.as_deref() != Some(name.as_str()) => {
            debug!("waiting for the KKMachine to record this claim");
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        Some(_) => {}
    }

    if ctx.tasks.running(&uid).is_some() {
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    let done = completed(&inst);
    if done.contains(Phase::Provisioning.name()) {
        status.state = Some("running".into());
        conditions::set(
            &mut status.conditions,
            cond::READY,
            true,
            reasons::READY,
            "",
            gen_,
        );
        status.observed_generation = gen_;
        write_status(&api, &inst, &status, ctx).await?;
        if inst.annotations().contains_key(BLOCK_MOVE_ANNOTATION) {
            annotate(&api, &name, &[(BLOCK_MOVE_ANNOTATION, None)]).await?;
        }
        return Ok(Action::await_change());
    }
    let retry = inst.annotations().contains_key(RETRY_ANNOTATION);
    let terminal = status.conditions.iter().find(|c| {
        c.status == "False" && TERMINAL.contains(&c.reason.as_str()) && c.observed_generation == gen_
    });
    if let Some(c) = terminal
        && !retry
    {
        debug!(reason = %c.reason, "terminal failure; waiting for a spec change or the retry annotation");
        if inst.annotations().contains_key(BLOCK_MOVE_ANNOTATION) {
            annotate(&api, &name, &[(BLOCK_MOVE_ANNOTATION, None)]).await?;
        }
        return Ok(Action::await_change());
    }
    if retry {
        info!("retry requested");
        annotate(&api, &name, &[(RETRY_ANNOTATION, None)]).await?;
        ctx.tasks.succeeded(&uid);
    }

    // Distribution.
    let kkc = get_kkcluster(ctx, &inst).await?;
    if let Some(d) = kkc.as_ref().and_then(|k| k.spec.distribution.clone())
        && !matches!(d.as_str(), "kubernetes" | "k8s")
    {
        let msg =
            format!("KKCluster spec.distribution {d:?} is not supported; only kubernetes is implemented");
        status.state = Some("failed".into());
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reasons::UNSUPPORTED,
            &msg,
            gen_,
        );
        conditions::set(
            &mut status.conditions,
            cond::BOOTSTRAPPED,
            false,
            reasons::UNSUPPORTED,
            &msg,
            gen_,
        );
        status.observed_generation = gen_;
        write_status(&api, &inst, &status, ctx).await?;
        ctx.event(&*inst, true, reasons::UNSUPPORTED, "Provision", msg)
            .await;
        return Ok(Action::await_change());
    }

    annotate(
        &api,
        &name,
        &[
            (BLOCK_MOVE_ANNOTATION, Some("true".into())),
            (annotations::TOUCHED, Some("true".into())),
        ],
    )
    .await?;
    let task_ctx = ctx.clone();
    let task_inst = (*inst).clone();
    let started = ctx.tasks.spawn(&uid, TaskKind::Provision, move |stop| {
        provision_task(task_ctx, task_inst, stop)
    });
    if started {
        info!("host work started");
    }
    Ok(Action::requeue(Duration::from_secs(30)))
}

async fn get_kkcluster(ctx: &Context, inst: &KKInstance) -> Result<Option<KKCluster>> {
    let ns = inst.namespace().unwrap_or_default();
    let Some(name) = inst.spec.cluster_name.as_deref() else {
        return Ok(None);
    };
    Api::<KKCluster>::namespaced(ctx.client.clone(), &ns)
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("get KKCluster {ns}/{name}")))
}

async fn release(inst: Arc<KKInstance>, ctx: &Arc<Context>) -> Result<Action> {
    let ns = inst.namespace().unwrap_or_default();
    let name = inst.name_any();
    let uid = inst.uid().unwrap_or_default();
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let a = inst.annotations();
    if a.contains_key(annotations::RESET_DONE) || !a.contains_key(annotations::TOUCHED) {
        if let Some(TaskKind::Provision) = ctx.tasks.running(&uid) {
            ctx.tasks.abort(&uid);
        }
        info!("host is clean; freeing it");
        api.delete(&name, &DeleteParams::default())
            .await
            .map_err(Error::kube(format!("delete KKInstance {name}")))?;
        return Ok(Action::await_change());
    }
    match ctx.tasks.running(&uid) {
        Some(TaskKind::Reset) => return Ok(Action::requeue(Duration::from_secs(10))),
        Some(TaskKind::Provision) => {
            info!("release: stopping host work");
            ctx.tasks.abort(&uid);
        }
        None => {}
    }
    if let Some(since) = a
        .get(annotations::UNREACHABLE_SINCE)
        .and_then(|s| s.parse::<Timestamp>().ok())
    {
        let elapsed = Timestamp::now().duration_since(since);
        if elapsed.as_secs() >= ctx.settings.quarantine_after.as_secs() as i64 {
            let reason = format!(
                "host {} unreachable for {}s while being reset on release",
                inst.spec.address,
                elapsed.as_secs()
            );
            quarantine(&inst, ctx, &reason).await?;
            return Ok(Action::await_change());
        }
    }
    spawn_reset(&inst, ctx, true).await?;
    Ok(Action::requeue(Duration::from_secs(10)))
}

async fn spawn_reset(inst: &KKInstance, ctx: &Arc<Context>, releasing: bool) -> Result<()> {
    let uid = inst.uid().unwrap_or_default();
    if ctx.tasks.running(&uid).is_some() {
        return Ok(());
    }
    let ns = inst.namespace().unwrap_or_default();
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    if inst.metadata.deletion_timestamp.is_none() {
        annotate(
            &api,
            &inst.name_any(),
            &[(BLOCK_MOVE_ANNOTATION, Some("true".into()))],
        )
        .await?;
    }
    let task_ctx = ctx.clone();
    let task_inst = inst.clone();
    if ctx.tasks.spawn(&uid, TaskKind::Reset, move |_stop| {
        reset_task(task_ctx, task_inst, releasing)
    }) {
        info!("host reset started");
    }
    Ok(())
}

/// Keep the host out of the pool: the KKInstance stays (so the host cannot be claimed), loses its owner
/// (so the Machine can go) and is marked quarantined.
async fn quarantine(inst: &KKInstance, ctx: &Context, reason: &str) -> Result<()> {
    let ns = inst.namespace().unwrap_or_default();
    let name = inst.name_any();
    let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    warn!(%reason, "quarantining host");
    let patch = json!({
        "metadata": {
            "labels": { QUARANTINED_LABEL: "true" },
            "annotations": {
                annotations::RELEASE: null,
                annotations::UNREACHABLE_SINCE: null,
                BLOCK_MOVE_ANNOTATION: null,
            },
            "ownerReferences": null,
        },
        "spec": { "quarantine": Quarantine { reason: reason.to_owned(), since: Some(Time(Timestamp::now())) } },
    });
    let updated = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(format!("quarantine KKInstance {name}")))?;
    let mut status = updated.status.clone().unwrap_or_default();
    status.state = Some("quarantined".into());
    conditions::set(
        &mut status.conditions,
        cond::READY,
        false,
        reasons::QUARANTINED,
        reason,
        updated.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::DELETING,
        false,
        reasons::QUARANTINED,
        reason,
        updated.metadata.generation,
    );
    patch_status(&api, &name, &status, ctx).await?;
    ctx.event(
        inst,
        true,
        reasons::QUARANTINED,
        "Release",
        format!("{reason}; the host is not claimable until a person deletes this KKInstance"),
    )
    .await;
    Ok(())
}

async fn cleanup(inst: Arc<KKInstance>, ctx: &Arc<Context>) -> Result<Action> {
    let uid = inst.uid().unwrap_or_default();
    if inst.spec.quarantine.is_some() {
        info!("quarantined KKInstance deleted by a person: the host is claimable again");
        ctx.tasks.abort(&uid);
        ctx.ssh.forget(&inst.spec.address);
        return Ok(Action::await_change());
    }
    let a = inst.annotations();
    if a.contains_key(annotations::RESET_DONE) || !a.contains_key(annotations::TOUCHED) {
        ctx.tasks.abort(&uid);
        // The claim is over: its pooled connections (and their first-seen keys) go with it.
        ctx.ssh.forget(&inst.spec.address);
        return Ok(Action::await_change());
    }
    match ctx.tasks.running(&uid) {
        Some(TaskKind::Reset) => return Err(Error::pending("host reset", Duration::from_secs(5))),
        Some(TaskKind::Provision) => ctx.tasks.abort(&uid),
        None => {}
    }
    spawn_reset(&inst, ctx, false).await?;
    Err(Error::pending("host reset", Duration::from_secs(5)))
}

/// Collects step records from the services and keeps the current step for progress messages.
#[derive(Default)]
struct TaskProgress {
    records: Mutex<Vec<StepRecord>>,
}

impl Progress for TaskProgress {
    fn step_started(&self, _phase: &str, _index: usize, _total: usize, _name: &str) {}
    fn step_finished(&self, record: &StepRecord) {
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

/// How host work ended.
enum Failure {
    /// Retry later without anyone changing anything.
    Transient(String),
    /// Stays until the spec changes or the retry annotation is set.
    Terminal { reason: &'static str, message: String },
}

fn exec_failure(e: &ExecError) -> Failure {
    match e {
        ExecError::HostKeyMismatch { .. } => Failure::Terminal {
            reason: reasons::HOST_KEY_MISMATCH,
            message: e.to_string(),
        },
        ExecError::Auth { .. } | ExecError::Sudo { .. } => Failure::Terminal {
            reason: reasons::AUTH_FAILED,
            message: e.to_string(),
        },
        ExecError::Credentials { .. } => Failure::Terminal {
            reason: reasons::CREDENTIALS_UNAVAILABLE,
            message: e.to_string(),
        },
        _ => Failure::Transient(e.to_string()),
    }
}

fn service_failure(phase: Phase, e: capkk_service::Error) -> Failure {
    use capkk_service::Error as S;
    let p = phase.name();
    match e {
        S::Exec { source, step } => match exec_failure(&source) {
            Failure::Transient(m) => Failure::Transient(format!("{p}: step {step}: {m}")),
            Failure::Terminal { reason, message } => Failure::Terminal {
                reason,
                message: format!("{p}: {message}"),
            },
        },
        S::CommandFailed {
            step,
            command,
            exit_code,
            output_tail,
        } => Failure::Terminal {
            reason: reasons::COMMAND_FAILED,
            message: format!(
                "{p}: step {step:?}: command `{command}` exited with {}; output tail:\n{output_tail}",
                exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "no status".into())
            ),
        },
        S::Unsupported { what } => Failure::Terminal {
            reason: reasons::UNSUPPORTED,
            message: format!("{p}: unsupported: {what}"),
        },
        S::InvalidInput { field, message } => Failure::Terminal {
            reason: reasons::INVALID_SPEC,
            message: format!("{p}: invalid {field}: {message}"),
        },
        e if e.is_transient() => Failure::Transient(format!("{p}: {e}")),
        e => Failure::Terminal {
            reason: reasons::COMMAND_FAILED,
            message: format!("{p}: {e}"),
        },
    }
}

struct Task {
    ctx: Arc<Context>,
    api: Api<KKInstance>,
    name: String,
    uid: String,
    status: KKInstanceStatus,
    generation: Option<i64>,
}

impl Task {
    fn new(ctx: Arc<Context>, inst: &KKInstance) -> Self {
        let ns = inst.namespace().unwrap_or_default();
        Self {
            api: Api::namespaced(ctx.client.clone(), &ns),
            ctx,
            name: inst.name_any(),
            uid: inst.uid().unwrap_or_default(),
            status: inst.status.clone().unwrap_or_default(),
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

    async fn flush(&mut self) {
        self.status.observed_generation = self.generation;
        if let Err(e) = patch_status(&self.api, &self.name, &self.status, &self.ctx).await {
            warn!(kkinstance = %self.name, error = %e, "writing progress failed");
        }
    }

    async fn annotate(&self, set: &[(&str, Option<String>)]) {
        if let Err(e) = annotate(&self.api, &self.name, set).await {
            warn!(kkinstance = %self.name, error = %e, "annotating failed");
        }
    }

    async fn event(&self, warning: bool, reason: &str, note: String) {
        match self.api.get_opt(&self.name).await {
            Ok(Some(obj)) => self.ctx.event(&obj, warning, reason, "HostWork", note).await,
            Ok(None) => {}
            Err(e) => warn!(error = %e, "reading KKInstance for an event failed"),
        }
    }
}

async fn connect(
    ctx: &Context,
    inst: &KKInstance,
    kkc: Option<&KKCluster>,
) -> Result<(Arc<dyn Executor>, capkk_ssh::HostTarget), Failure> {
    let target = hosts::instance_target(&ctx.client, inst, kkc)
        .await
        .map_err(|e| match e {
            Error::ResolveCredentials(m) => Failure::Terminal {
                reason: reasons::CREDENTIALS_UNAVAILABLE,
                message: m,
            },
            Error::InvalidSpec { .. } => Failure::Terminal {
                reason: reasons::INVALID_SPEC,
                message: e.to_string(),
            },
            e => Failure::Transient(e.to_string()),
        })?;
    let exec: Arc<dyn Executor> = Arc::new(MeteredExecutor::new(
        ctx.ssh.executor(&target),
        ctx.metrics.clone(),
    ));
    let out = exec
        .exec(ExecRequest::new("true").timeout(Duration::from_secs(30)))
        .await
        .map_err(|e| exec_failure(&e))?;
    if !out.success() {
        return Err(Failure::Transient(format!(
            "`true` exited {:?} on {}",
            out.exit_code, inst.spec.address
        )));
    }
    Ok((exec, target))
}

async fn bootstrap_data(ctx: &Context, inst: &KKInstance) -> Result<Option<BootstrapData>, Failure> {
    let ns = inst.namespace().unwrap_or_default();
    let Some(r) = inst.spec.bootstrap_data_secret_ref.as_ref() else {
        return Ok(None);
    };
    let secret = Api::<K8sSecret>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&r.name)
        .await
        .map_err(|e| Failure::Transient(format!("reading bootstrap data Secret {}: {e}", r.name)))?
        .ok_or_else(|| {
            Failure::Transient(format!("bootstrap data Secret {ns}/{} not found (yet)", r.name))
        })?;
    let data = secret.data.unwrap_or_default();
    let value = data
        .get("value")
        .map(|v| v.0.clone())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Failure::Terminal {
            reason: reasons::INVALID_SPEC,
            message: format!("bootstrap data Secret {} has no key `value`", r.name),
        })?;
    let format = data
        .get("format")
        .and_then(|f| String::from_utf8(f.0.clone()).ok())
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| "cloud-config".into());
    Ok(Some(BootstrapData {
        value: capkk_ssh::Secret::new(value),
        format,
    }))
}

/// Inputs of the phases: spec, KKCluster spec, `/etc/hosts` entries, registry credentials (resolved from the
/// KKCluster's inline auth or its Secret, at use time) and a redactor knowing them.
async fn phase_input(
    ctx: &Context,
    inst: &KKInstance,
    kkc: Option<&KKCluster>,
) -> Result<PhaseInput, Failure> {
    let ns = inst.namespace().unwrap_or_default();
    let mut redactor = Redactor::default();
    let mut registry_auth = None;
    if let Some(a) = kkc
        .and_then(|k| k.spec.registry.as_ref())
        .and_then(|r| r.auth.as_ref())
    {
        let (mut user, mut pass) = (a.username.clone(), a.password.clone());
        if let Some(r) = a.secret_ref.as_ref() {
            let secret = Api::<K8sSecret>::namespaced(ctx.client.clone(), &ns)
                .get_opt(&r.name)
                .await
                .map_err(|e| Failure::Transient(format!("reading registry Secret {}: {e}", r.name)))?
                .ok_or_else(|| Failure::Terminal {
                    reason: reasons::CREDENTIALS_UNAVAILABLE,
                    message: format!(
                        "registry Secret {ns}/{} (spec.registry.auth.secretRef) not found",
                        r.name
                    ),
                })?;
            let data = secret.data.unwrap_or_default();
            let get = |k: &str| data.get(k).and_then(|v| String::from_utf8(v.0.clone()).ok());
            user = get("username").or(user);
            pass = get("password").or(pass);
        }
        if let Some(p) = pass.as_ref() {
            redactor.add(p.clone());
        }
        registry_auth = Some(capkk_service::containermanager::RegistryAuth {
            username: user,
            password: pass,
            insecure_skip_verify: a.insecure_skip_verify.unwrap_or(false),
            plain_http: a.plain_http.unwrap_or(false),
            ca_file: a.ca_file.clone(),
            cert_file: a.cert_file.clone(),
            key_file: a.key_file.clone(),
        });
    }
    let hosts_entries = kkc
        .map(|k| {
            k.spec
                .nodes
                .instances
                .iter()
                .map(|h| (h.internal_address().to_owned(), vec![h.name.clone()]))
                .collect()
        })
        .unwrap_or_default();
    Ok(PhaseInput {
        instance: inst.spec.clone(),
        cluster: kkc.map(|k| k.spec.clone()),
        bootstrap: None,
        redactor,
        registry_auth,
        hosts_entries,
        facts: Default::default(),
    })
}

async fn provision_task(ctx: Arc<Context>, inst: KKInstance, stop: Arc<AtomicBool>) {
    let permit = ctx.tasks.permits.clone().acquire_owned().await;
    let mut t = Task::new(ctx.clone(), &inst);
    ctx.metrics.set_tasks_running(ctx.tasks.len() as i64);
    let phases = Phase::ALL;
    let n = phases.len();
    let mut current = Phase::Bootstrap;
    let result: Result<bool, Failure> = async {
        let kkc = get_kkcluster(&ctx, &inst)
            .await
            .map_err(|e| Failure::Transient(e.to_string()))?;
        t.status.state = Some("bootstrapping".into());
        t.set(cond::READY, false, reasons::IN_PROGRESS, "connecting");
        t.flush().await;
        let (exec, target) = connect(&ctx, &inst, kkc.as_ref()).await?;
        if inst.spec.host_key.is_none()
            && inst.spec.host_keys.is_empty()
            && let Some(fp) = ctx.ssh.observed_fingerprint(&target)
        {
            let patch = json!({ "spec": { "hostKey": fp } });
            match t
                .api
                .patch(&t.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => info!(fingerprint = %fp, "host key trusted on first use"),
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
                .patch(&t.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| {
                    Failure::Transient(format!("recording the bastion host key {fp} failed: {e}"))
                })?;
            info!(fingerprint = %fp, "bastion host key trusted on first use");
        }
        let mut done = completed(&inst);
        let mut input = phase_input(&ctx, &inst, kkc.as_ref()).await?;
        target
            .secret_texts()
            .into_iter()
            .for_each(|t| input.redactor.add(t));
        for (i, phase) in phases.iter().copied().enumerate() {
            current = phase;
            if done.contains(phase.name()) {
                if !conditions::is_true(&t.status.conditions, phase.condition()) {
                    t.set(phase.condition(), true, reasons::READY, "completed earlier");
                }
                continue;
            }
            if stop.load(Ordering::SeqCst) {
                return Ok(false);
            }
            if phase == Phase::Provisioning && input.bootstrap.is_none() {
                input.bootstrap = bootstrap_data(&ctx, &inst).await?;
            }
            let step = format!("step {}/{}: {}", i + 1, n, phase.name());
            info!(kkinstance = %t.name, "{step}");
            t.status.step = Some(step.clone());
            t.status.state = Some(
                if phase == Phase::Provisioning {
                    "provisioning"
                } else {
                    "bootstrapping"
                }
                .into(),
            );
            t.set(phase.condition(), false, reasons::IN_PROGRESS, &step);
            t.set(cond::READY, false, reasons::IN_PROGRESS, &step);
            t.flush().await;
            let progress = TaskProgress::default();
            let res = ctx.services.run(phase, exec.clone(), &input, &progress).await;
            t.journal(progress.drain());
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
            t.set(phase.condition(), true, reasons::READY, "");
            done.insert(phase.name().to_owned());
            let list: Vec<&str> = phases
                .iter()
                .map(|p| p.name())
                .filter(|p| done.contains(*p))
                .collect();
            t.annotate(&[(annotations::COMPLETED_PHASES, Some(list.join(",")))])
                .await;
        }
        Ok(true)
    }
    .await;
    let mut backoff = None;
    match result {
        Ok(true) => {
            ctx.tasks.succeeded(&t.uid);
            t.status.state = Some("running".into());
            t.status.step = Some(format!("step {n}/{n}: done"));
            t.set(cond::READY, true, reasons::READY, "");
            t.flush().await;
            info!(kkinstance = %t.name, "host provisioned");
            t.event(
                false,
                "Provisioned",
                "bootstrap data ran; sentinel present".into(),
            )
            .await;
        }
        Ok(false) => {
            t.status.state = Some("pending".into());
            t.set(
                cond::READY,
                false,
                reasons::PAUSED,
                "host work stopped at a step boundary (paused)",
            );
            t.flush().await;
        }
        Err(Failure::Transient(msg)) => {
            let delay = ctx.tasks.transient_failure(&t.uid);
            warn!(kkinstance = %t.name, error = %msg, ?delay, "host work failed; will retry");
            t.status.state = Some("pending".into());
            t.set(current.condition(), false, reasons::UNREACHABLE, &msg);
            t.set(
                cond::READY,
                false,
                reasons::UNREACHABLE,
                format!("{msg} (retrying in {}s)", delay.as_secs()),
            );
            t.flush().await;
            t.event(true, reasons::UNREACHABLE, msg).await;
            backoff = Some(delay);
        }
        Err(Failure::Terminal { reason, message }) => {
            warn!(kkinstance = %t.name, %reason, "host work failed: {message}");
            t.status.state = Some("failed".into());
            t.set(current.condition(), false, reason, &message);
            t.set(cond::READY, false, reason, &message);
            t.flush().await;
            t.event(true, reason, message).await;
        }
    }
    t.annotate(&[(BLOCK_MOVE_ANNOTATION, None)]).await;
    drop(permit);
    if let Some(d) = backoff {
        tokio::time::sleep(d).await;
    }
    let ns = inst.namespace().unwrap_or_default();
    ctx.trigger_instance(&t.name, &ns);
}

async fn reset_task(ctx: Arc<Context>, inst: KKInstance, releasing: bool) {
    let permit = ctx.tasks.permits.clone().acquire_owned().await;
    let mut t = Task::new(ctx.clone(), &inst);
    t.status.state = Some("cleaning".into());
    t.status.step = Some("reset".into());
    t.set(cond::DELETING, false, reasons::IN_PROGRESS, "resetting the host");
    t.set(cond::READY, false, reasons::DELETING, "resetting the host");
    t.flush().await;
    let result: Result<(), Failure> = async {
        let kkc = get_kkcluster(&ctx, &inst)
            .await
            .map_err(|e| Failure::Transient(e.to_string()))?;
        let (exec, target) = connect(&ctx, &inst, kkc.as_ref()).await?;
        let mut input = phase_input(&ctx, &inst, kkc.as_ref()).await?;
        target
            .secret_texts()
            .into_iter()
            .for_each(|t| input.redactor.add(t));
        let progress = TaskProgress::default();
        let res = ctx.services.reset(exec, &input, &progress).await;
        t.journal(progress.drain());
        res.map_err(|e| service_failure(Phase::Bootstrap, e))
    }
    .await;
    let ns = inst.namespace().unwrap_or_default();
    let mut backoff = None;
    match result {
        Ok(()) => {
            ctx.tasks.succeeded(&t.uid);
            t.status.state = Some("cleaned".into());
            t.set(cond::DELETING, true, reasons::READY, "host reset");
            t.flush().await;
            t.annotate(&[
                (annotations::RESET_DONE, Some(Timestamp::now().to_string())),
                (annotations::COMPLETED_PHASES, None),
                (annotations::UNREACHABLE_SINCE, None),
                (BLOCK_MOVE_ANNOTATION, None),
            ])
            .await;
            info!(kkinstance = %t.name, "host reset");
            t.event(false, "HostReset", "host reset; it is free again".into())
                .await;
        }
        Err(Failure::Transient(msg)) => {
            let delay = ctx.tasks.transient_failure(&t.uid);
            warn!(kkinstance = %t.name, error = %msg, "reset failed; will retry");
            t.set(cond::DELETING, false, reasons::UNREACHABLE, &msg);
            t.flush().await;
            if !inst.annotations().contains_key(annotations::UNREACHABLE_SINCE)
                && inst.metadata.deletion_timestamp.is_none()
            {
                t.annotate(&[(annotations::UNREACHABLE_SINCE, Some(Timestamp::now().to_string()))])
                    .await;
            }
            backoff = Some(
                delay
                    .min(ctx.settings.quarantine_after / 2)
                    .max(Duration::from_secs(1)),
            );
        }
        Err(Failure::Terminal { reason, message }) => {
            if releasing {
                let why = format!("reset failed ({reason}): {message}");
                if let Err(e) = quarantine(&inst, &ctx, &why).await {
                    warn!(error = %e, "quarantining failed");
                }
            } else {
                t.set(cond::DELETING, false, reason, &message);
                t.flush().await;
                t.event(true, reason, message).await;
                backoff = Some(ctx.tasks.transient_failure(&t.uid));
            }
        }
    }
    drop(permit);
    if let Some(d) = backoff {
        tokio::time::sleep(d).await;
    }
    ctx.trigger_instance(&t.name, &ns);
}

/// The KKInstance a KKMachine claimed (for the KKMachine watch).
pub fn kkmachine_to_instance(m: KKMachine) -> Option<kube::runtime::reflector::ObjectRef<KKInstance>> {
    let id = m.spec.instance_id.clone()?;
    Some(kube::runtime::reflector::ObjectRef::new(&id).within(&m.namespace()?))
}
