//! capkk-rs's own code path: the russh pool (`capkk-ssh`), the service-layer steps, and
//! `capkk-cloudinit` + `capkk-service::provisioning` on the fixture. Also the recording pass that turns
//! what this path sends into the workload the other methods replay.

use std::{collections::BTreeMap, path::Path, sync::Arc};

use anyhow::{Context as _, bail};
use capkk_executor::{ExecRequest, Executor, PutRequest};
use capkk_service::{
    journal::{NoProgress, Redactor},
    provisioning::{self, Outcome},
};
use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, PoolConfig, SshPool};

use crate::{
    hosts::HostSpec,
    plan,
    workload::{Op, RecordingExecutor},
};

/// Run `ops` over an executor in order; a failed step stops the host with an error naming it.
pub async fn replay(exec: &dyn Executor, ops: &[Op]) -> anyhow::Result<()> {
    for (i, op) in ops.iter().enumerate() {
        let what = || format!("{}: step {} ({})", exec.target(), i + 1, op.label());
        match op {
            Op::Exec { command, stdin } => {
                let mut req = ExecRequest::new(command.clone()).sudo();
                if let Some(s) = stdin {
                    req = req.stdin(s.clone());
                }
                let out = exec.exec(req).await.with_context(what)?;
                if !out.success() {
                    bail!("{} exited {:?}: {}", what(), out.exit_code, out.tail(400));
                }
            }
            Op::Put {
                path,
                content,
                mode,
                owner,
            } => {
                let mut req = PutRequest::bytes(path.clone(), content.clone(), *mode);
                if let Some(o) = owner {
                    req = req.owner(o.clone());
                }
                exec.put(req).await.with_context(what)?;
            }
        }
    }
    Ok(())
}

/// Provision one host the way the provider does: facts and bootstrap (capkk-service), the binary and
/// container-manager steps (bench stand-ins, see [`plan::service_steps`]), then the bootstrap data through
/// `capkk_cloudinit::parse` and `capkk_service::provisioning::run`. Fails unless the sentinel was written and
/// every command item exited 0. `peers` are `(address, name)` of all hosts (the `/etc/hosts` block).
pub async fn provision_host(
    exec: &dyn Executor,
    bootstrap_data: &[u8],
    hostname: &str,
    address: &str,
    peers: &[(String, String)],
) -> anyhow::Result<()> {
    let redactor = Redactor::default();
    let facts = capkk_service::facts::gather(exec, &NoProgress, &redactor)
        .await
        .with_context(|| format!("{}: facts", exec.target()))?;
    let id = capkk_service::bootstrap::HostIdentity {
        hostname: hostname.to_owned(),
        internal_address: address.to_owned(),
        hosts_entries: peers
            .iter()
            .map(|(a, n)| (a.clone(), vec![format!("{n}.bench"), n.clone()]))
            .collect(),
    };
    capkk_service::bootstrap::prepare(exec, &id, &facts, &NoProgress, &redactor)
        .await
        .with_context(|| format!("{}: bootstrap", exec.target()))?;
    replay(exec, &plan::service_steps(hostname)).await?;
    let parsed = parse(bootstrap_data, hostname)?;
    let outcome = provisioning::run(exec, &parsed, &NoProgress, &redactor)
        .await
        .with_context(|| format!("{}: provisioning", exec.target()))?;
    match outcome {
        Outcome::Provisioned { already: true, .. } => {
            bail!(
                "{}: the sentinel was already there (host not reset)",
                exec.target()
            )
        }
        Outcome::Provisioned { failed_items, .. } if !failed_items.is_empty() => bail!(
            "{}: provisioned, but command items failed: {:?}",
            exec.target(),
            failed_items
        ),
        Outcome::Provisioned { .. } => Ok(()),
        Outcome::Failed { first_failure, .. } => {
            bail!("{}: provisioning failed at {:?}", exec.target(), first_failure)
        }
    }
}

/// Ops of capkk-service's own steps before provisioning: facts (1 exec), bootstrap (1 exec), the stand-ins.
pub fn service_op_count() -> usize {
    2 + plan::service_steps("h").len()
}

/// The bootstrap data parsed for `hostname`, exactly as [`provision_host`] parses it.
pub fn parse(bootstrap_data: &[u8], hostname: &str) -> anyhow::Result<capkk_cloudinit::Plan> {
    let vars = capkk_cloudinit::TemplateVars::new()
        .local_hostname(hostname)
        .instance_id(hostname)
        .provider_id(format!("kk://bench/{hostname}"));
    capkk_cloudinit::parse(bootstrap_data, capkk_cloudinit::FORMAT_CLOUD_CONFIG, &vars)
        .context("parsing the bootstrap data")
}

/// The provisioning plan as one op per plan step: a file upload per `write_files` entry (decoded content,
/// mode, owner), a command per `runcmd`/`bootcmd` item. This is the plan the other methods run step by step.
pub fn plan_ops(bootstrap_data: &[u8], hostname: &str) -> anyhow::Result<Vec<Op>> {
    let plan = parse(bootstrap_data, hostname)?;
    let mut ops = Vec::new();
    for step in &plan.steps {
        match &step.action {
            capkk_cloudinit::Action::WriteFile(f) if !f.append => ops.push(Op::Put {
                path: f.path.clone(),
                content: f.content.clone(),
                mode: f.mode,
                owner: Some(f.owner.clone()),
            }),
            capkk_cloudinit::Action::Command(c) => ops.push(Op::Exec {
                command: c.script.clone(),
                stdin: None,
            }),
            _ => bail!(
                "plan step {} has no single-command form in the bench (append, users, disks, mounts, ntp)",
                step.name()
            ),
        }
    }
    Ok(ops)
}

/// A pinned, key-authenticated root target.
pub fn target(h: &HostSpec, key: &Path) -> HostTarget {
    HostTarget::new(h.address.clone(), "root", Auth::key_file(key))
        .host_key(HostKeyPolicy::pinned(h.fingerprint.clone()))
}

/// What capkk-rs sent to each host, and how long each call took (seconds).
pub type Sent = BTreeMap<String, (Vec<Op>, Vec<f64>)>;

/// Provision every host concurrently over one pool, recording what is sent and how long each call took.
pub async fn run_all(hosts: &[HostSpec], key: &Path, bootstrap_data: Arc<Vec<u8>>) -> anyhow::Result<Sent> {
    let pool = SshPool::new(PoolConfig::default());
    let peers: Arc<Vec<(String, String)>> = Arc::new(
        hosts
            .iter()
            .map(|h| (h.address.clone(), h.name.clone()))
            .collect(),
    );
    let mut set = tokio::task::JoinSet::new();
    for h in hosts {
        let rec = RecordingExecutor::new(pool.executor(&target(h, key)));
        let (name, address) = (h.name.clone(), h.address.clone());
        let (data, peers) = (bootstrap_data.clone(), peers.clone());
        set.spawn(async move {
            provision_host(&rec, &data, &name, &address, &peers).await?;
            anyhow::Ok((name, (rec.ops(), rec.times())))
        });
    }
    let mut ops = BTreeMap::new();
    let mut errors = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok((name, o))) => {
                ops.insert(name, o);
            }
            Ok(Err(e)) => errors.push(format!("{e:#}")),
            Err(e) => errors.push(format!("host task failed: {e}")),
        }
    }
    pool.close_all().await;
    if !errors.is_empty() {
        bail!("{} host(s) failed:\n  {}", errors.len(), errors.join("\n  "));
    }
    Ok(ops)
}

/// The recording pass: run capkk-rs once on every host (in this process) and return what it sent.
pub fn record(
    hosts: &[HostSpec],
    key: &Path,
    bootstrap_data: &[u8],
) -> anyhow::Result<BTreeMap<String, Vec<Op>>> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let sent = rt.block_on(run_all(hosts, key, Arc::new(bootstrap_data.to_vec())))?;
    Ok(sent.into_iter().map(|(h, (ops, _))| (h, ops)).collect())
}
