//! capkk-rs's own code path: the russh pool (`capkk-ssh`), capkk-service's facts, bootstrap, binary and
//! container-manager services (against the bench's artifact mirror, through a controller-side artifact cache),
//! and `capkk-cloudinit` + `capkk-service::provisioning` on the fixture. Also the recording pass that turns what
//! this path sends into the workload the other methods replay.

use std::{collections::BTreeMap, path::Path, sync::Arc};

use anyhow::{Context as _, bail};
use capkk_executor::Executor;
use capkk_service::{
    binary::{ArtifactCache, ArtifactOverride, BinaryConfig, ComponentSource, DownloadOn},
    containermanager::ContainerdConfig,
    journal::{NoProgress, Redactor},
    provisioning::{self, Outcome},
};
use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, PoolConfig, SshPool};
use serde::{Deserialize, Serialize};

use crate::{
    artifacts::KUBERNETES_VERSION,
    hosts::HostSpec,
    workload::{Op, RecordingExecutor},
};

/// Where the binary and container-manager services get their artifacts (KKCluster `spec.component`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Components {
    /// `spec.component.host`: the bench's mirror.
    pub mirror: String,
    /// `spec.component.overrides`: `(id, version, sha256)` of each stand-in artifact.
    pub pins: Vec<(String, String, String)>,
}

impl Components {
    /// `spec.component` as the services read it (downloads on the controller).
    pub fn source(&self) -> ComponentSource {
        ComponentSource {
            zone: None,
            host: Some(self.mirror.clone()),
            overrides: self
                .pins
                .iter()
                .map(|(id, version, sha)| ArtifactOverride {
                    id: id.clone(),
                    version: Some(version.clone()),
                    checksum_value: Some(sha.clone()),
                    ..Default::default()
                })
                .collect(),
            download_on: DownloadOn::Controller,
        }
    }
}

/// Prepare one host the way the provider does before provisioning: facts and bootstrap, then the binary and
/// container-manager services (download into `cache` on the controller, verify, upload, install).
/// `peers` are `(address, name)` of all hosts (the `/etc/hosts` block).
pub async fn prepare_host(
    exec: &dyn Executor,
    hostname: &str,
    address: &str,
    peers: &[(String, String)],
    components: &Components,
    cache: &ArtifactCache,
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
    let source = components.source();
    let binary = BinaryConfig {
        kubernetes_version: KUBERNETES_VERSION.into(),
        arch: "amd64".into(),
        cni_version: None,
        source: source.clone(),
        node_ip: Some(address.to_owned()),
        node_name: Some(hostname.to_owned()),
    };
    capkk_service::binary::ensure(exec, &binary, &facts, cache, &NoProgress, &redactor)
        .await
        .with_context(|| format!("{}: binary service", exec.target()))?;
    let containerd = ContainerdConfig {
        arch: "amd64".into(),
        source,
        ..Default::default()
    };
    capkk_service::containermanager::ensure(exec, &containerd, &facts, cache, &NoProgress, &redactor)
        .await
        .with_context(|| format!("{}: container manager", exec.target()))?;
    Ok(())
}

/// Provision one host with its bootstrap data through `capkk_cloudinit::parse` and
/// `capkk_service::provisioning::run`. Fails unless the sentinel was written and every command item exited 0.
pub async fn provision(exec: &dyn Executor, bootstrap_data: &[u8], hostname: &str) -> anyhow::Result<()> {
    let redactor = Redactor::default();
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

/// The ops capkk-v3 replays from capkk-rs's recording: the facts probe and the bootstrap script (its binary,
/// container-manager and provisioning steps are CAPKK's own).
pub const V3_REPLAYED_OPS: usize = 2;

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

/// What capkk-rs sent to one host, how long each call took (seconds), and how many calls came before
/// provisioning.
#[derive(Clone, Debug, Default)]
pub struct SentTo {
    /// Every exec and upload, in order.
    pub ops: Vec<Op>,
    /// Wall seconds of each.
    pub times: Vec<f64>,
    /// Ops before provisioning (facts, bootstrap, binary, container manager).
    pub pre: usize,
}

/// What capkk-rs sent, per host.
pub type Sent = BTreeMap<String, SentTo>;

/// Provision every host concurrently over one pool and one controller-side artifact cache in `cache_dir`,
/// recording what is sent and how long each call took.
pub async fn run_all(
    hosts: &[HostSpec],
    key: &Path,
    bootstrap_data: Arc<Vec<u8>>,
    components: &Components,
    cache_dir: &Path,
) -> anyhow::Result<Sent> {
    let cache = Arc::new(ArtifactCache::new(cache_dir).context("creating the artifact cache")?);
    let components = Arc::new(components.clone());
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
        let (components, cache) = (components.clone(), cache.clone());
        set.spawn(async move {
            prepare_host(&rec, &name, &address, &peers, &components, &cache).await?;
            let pre = rec.len();
            provision(&rec, &data, &name).await?;
            anyhow::Ok((
                name,
                SentTo {
                    ops: rec.ops(),
                    times: rec.times(),
                    pre,
                },
            ))
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

/// The recording pass: run capkk-rs once on every host (in this process) and return what it sent. Its
/// artifact cache (`cache_dir`) is kept: the other methods upload the artifacts from there.
pub fn record(
    hosts: &[HostSpec],
    key: &Path,
    bootstrap_data: &[u8],
    components: &Components,
    cache_dir: &Path,
) -> anyhow::Result<Sent> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run_all(
        hosts,
        key,
        Arc::new(bootstrap_data.to_vec()),
        components,
        cache_dir,
    ))
}
