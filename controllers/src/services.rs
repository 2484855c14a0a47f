//! The host work of a KKInstance as phases, behind the [`HostServices`] trait so the reconciler does not
//! depend on how a phase is carried out. [`ServiceLayer`] is the production implementation on top of
//! `capkk-service`.

use async_trait::async_trait;
use capkk_api::{Component, KKClusterSpec, KKInstanceSpec, RemediationTier, consts::conditions as cond};
use capkk_executor::Executor;
use capkk_service::{
    Error as ServiceError, Result as ServiceResult,
    binary::{ArtifactCache, ArtifactOverride, BinaryConfig, ComponentSource, DownloadOn},
    bootstrap::{HostIdentity, ResetOptions},
    containermanager::{ContainerdConfig, RegistryAuth},
    facts::HostFacts,
    images::{ImageSet, PrepullConfig},
    journal::{Progress, Redactor, StepRecord},
    provisioning::Outcome,
    remediation::HostSlot,
    repository::RepositoryConfig,
};
use capkk_ssh::{ExposeSecret, SecretSlice};
use tracing::info;

/// One phase of host work, in execution order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    /// Host checks, hostname, kernel prerequisites.
    Bootstrap,
    /// OS packages.
    Repository,
    /// kubeadm, kubelet, kubectl, CNI plugins, crictl.
    Binary,
    /// containerd.
    ContainerManager,
    /// Run the bootstrap data; success is the sentinel file.
    Provisioning,
    /// The control-plane endpoint the provider serves (keepalived and haproxy), on a control-plane host of a
    /// cluster with `controlPlaneLoadBalancer.type: Keepalived`; skipped on every other host. Before
    /// provisioning: `kubeadm init` and `kubeadm join` reach the API server through the endpoint.
    LoadBalancer,
}

impl Phase {
    /// Every phase, in the order their results are recorded. Binary, containermanager and repository run side
    /// by side ([`Phase::independent`]): binaries and containerd do not use what the packages bring
    /// (conntrack, socat, ipset, ...), only the kubelet and kubeadm do, in provisioning. The image pre-pull
    /// starts once kubeadm is installed and containerd runs ([`PREPULL_NEEDS`]); containerd starts in
    /// containermanager's last step, so the pre-pull cannot pull sooner than after that phase; starting it
    /// during the phase would have its pulls cut by a restart the phase's configuration step asks for.
    ///
    /// The load balancer comes after the OS packages (its packages come through the same package manager,
    /// whose lock they would otherwise wait for) and before provisioning.
    pub(crate) const ALL: [Phase; 6] = [
        Phase::Bootstrap,
        Phase::Binary,
        Phase::ContainerManager,
        Phase::Repository,
        Phase::LoadBalancer,
        Phase::Provisioning,
    ];

    /// True for the phases between bootstrap and provisioning (binaries, containerd, OS packages): each needs
    /// only what bootstrap set up (facts, directories, kernel settings), none what another of them installs
    /// (the packages serve the kubelet and kubeadm, which run in provisioning). The first of them to run
    /// starts the others beside it ([`crate::kkinstance::task`]).
    pub(crate) fn independent(self) -> bool {
        matches!(self, Phase::Binary | Phase::ContainerManager | Phase::Repository)
    }

    /// True for the one phase that runs the bootstrap data (provisioning). The others prepare the host from
    /// the spec alone (the Machine's version, the KKCluster's settings) and may run before the bootstrap
    /// provider has written the data.
    pub(crate) fn needs_bootstrap_data(self) -> bool {
        self == Phase::Provisioning
    }

    /// The phase name used in annotations, journals and progress messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Bootstrap => "bootstrap",
            Phase::Repository => "repository",
            Phase::Binary => "binary",
            Phase::ContainerManager => "containermanager",
            Phase::Provisioning => "provisioning",
            Phase::LoadBalancer => capkk_service::loadbalancer::PHASE,
        }
    }

    /// The KKInstance condition reporting this phase.
    pub(crate) fn condition(self) -> &'static str {
        match self {
            Phase::Bootstrap => cond::BOOTSTRAPPED,
            Phase::Repository => cond::REPOSITORY_READY,
            Phase::Binary => cond::BINARIES_READY,
            Phase::ContainerManager => cond::CRI_READY,
            Phase::Provisioning => cond::PROVISIONED,
            Phase::LoadBalancer => cond::LOAD_BALANCER_READY,
        }
    }
}

/// The phase after which the image pre-pull starts (it needs containerd running and the binary phase's
/// kubeadm, which comes before it), and under whose name it is journaled.
pub(crate) const PREPULL_AFTER: Phase = Phase::ContainerManager;

/// The phases the image pre-pull needs completed: containerd running, and kubeadm (it lists the images).
/// They run side by side, so either may end first.
pub(crate) const PREPULL_NEEDS: [Phase; 2] = [Phase::Binary, PREPULL_AFTER];

/// The bootstrap data (`value`, `format`) of the Machine. Secret: never printed.
pub(crate) struct BootstrapData {
    /// The payload.
    pub value: SecretSlice<u8>,
    /// `cloud-config` (default) or `ignition`.
    pub format: String,
    /// The payload parsed, once: the image pre-pull and provisioning both read it.
    plan: std::sync::OnceLock<capkk_cloudinit::Plan>,
}

impl BootstrapData {
    /// Bootstrap data of `format` holding `value`.
    pub(crate) fn new(value: SecretSlice<u8>, format: String) -> Self {
        Self {
            value,
            format,
            plan: Default::default(),
        }
    }
}

impl std::fmt::Debug for BootstrapData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapData")
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

/// What the load-balancer phase does on this host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum LoadBalancerPlan {
    /// Nothing: a worker, or a cluster whose endpoint someone else serves.
    #[default]
    Nothing,
    /// Install and configure keepalived and haproxy.
    Serve(capkk_service::loadbalancer::LoadBalancerConfig),
    /// Refuse the host: a second control plane of a cluster whose endpoint is one control-plane host (no load
    /// balancer). The message names the field.
    Refuse(String),
}

/// What a phase gets to work with.
#[derive(Debug, Default)]
pub(crate) struct PhaseInput {
    /// The KKInstance spec.
    pub instance: KKInstanceSpec,
    /// The KKCluster spec (mirrors, registry), when the KKCluster still exists.
    pub cluster: Option<KKClusterSpec>,
    /// Bootstrap data, read once when first needed (the image pre-pull, else provisioning).
    pub bootstrap: std::sync::OnceLock<BootstrapData>,
    /// Redacts known secrets from output kept in journals and conditions.
    pub redactor: Redactor,
    /// Private registry credentials resolved from the KKCluster (inline or Secret).
    pub registry_auth: Option<RegistryAuth>,
    /// `/etc/hosts` entries: every host of the KKCluster as `(internal address, [name])`.
    pub hosts_entries: Vec<(String, Vec<String>)>,
    /// Host facts, gathered by the first phase that needs them.
    pub facts: std::sync::Mutex<Option<HostFacts>>,
    /// The run answers the retry annotation: provisioning runs again the bootstrap commands that failed on
    /// the host (a fixed host must not be told its old failure again).
    pub rerun_failed: bool,
    /// The host is claimed for a control-plane Machine (CAPI's control-plane label, copied onto the
    /// KKInstance): what a pre-pull before the bootstrap data pulls.
    pub control_plane: bool,
    /// The preflight checks the node's KubeadmConfig ignores (`nodeRegistration.ignorePreflightErrors`): an
    /// in-place upgrade's `kubeadm upgrade node` ignores the same.
    pub ignore_preflight_errors: Vec<String>,
    /// The node's kubeadm patches directory (`joinConfiguration.patches.directory`): an in-place upgrade's
    /// `kubeadm upgrade node` applies its kubelet configuration patches again.
    pub patches_dir: Option<String>,
    /// The load-balancer phase's work (the membership as it was when the inputs were read).
    pub load_balancer: LoadBalancerPlan,
}

/// What every call on a host travels with: the connection, the inputs, where the steps are reported.
#[derive(Clone, Copy)]
pub(crate) struct HostCall<'a> {
    /// The connection to the host.
    pub(crate) exec: &'a dyn Executor,
    /// What the phases need (specs, bootstrap data, secrets to redact, cached facts).
    pub(crate) input: &'a PhaseInput,
    /// Receives every step run on the host.
    pub(crate) progress: &'a dyn Progress,
}

/// Carries out phases on a host.
#[async_trait]
pub(crate) trait HostServices: Send + Sync {
    /// Run one phase. Must be idempotent: a restarted manager may run a phase again after a crash.
    async fn run(&self, phase: Phase, host: HostCall<'_>) -> ServiceResult<()>;

    /// Undo what the phases did (kubeadm reset, remove the sentinel and the files the bootstrap wrote).
    async fn reset(&self, host: HostCall<'_>) -> ServiceResult<()>;

    /// Run one remediation tier on a provisioned host; `wait` bounds a reboot's return. `slot` is held when
    /// called; a reboot gives it back while it waits for the host and takes it again for each poll
    /// ([`capkk_service::remediation::reboot`]). Returns what happened, for the tier's condition.
    async fn remediate(
        &self,
        tier: RemediationTier,
        wait: std::time::Duration,
        host: HostCall<'_>,
        slot: &dyn HostSlot,
    ) -> ServiceResult<String>;

    /// Pull the images kubeadm will need into containerd (see [`capkk_service::images`]); run alongside the
    /// phases after [`PREPULL_AFTER`], provisioning included. Never fails: what it could not pull, kubeadm
    /// pulls; what happened is in the journal (step `image-prepull`, under [`PREPULL_AFTER`]'s name). Host
    /// work that ends first drops it ([`crate::kkinstance::task`]).
    async fn prepull(&self, host: HostCall<'_>);

    /// Whether the host holds the VIP of the control-plane endpoint the provider serves (`host.input`'s
    /// [`LoadBalancerPlan::Serve`]); `None` when there is nothing to ask (no such plan, or the services cannot
    /// tell).
    async fn holds_vip(&self, host: HostCall<'_>) -> ServiceResult<Option<bool>> {
        let _ = host;
        Ok(None)
    }

    /// Upgrade a provisioned worker in place to `host.input.instance.kubernetes_version` (that version's
    /// binaries, `kubeadm upgrade node`, a kubelet restart). Returns what happened, for the event.
    async fn upgrade(&self, host: HostCall<'_>) -> ServiceResult<String>;
}

/// The sentinel CABPK's bootstrap data writes once kubeadm succeeded.
pub(crate) const SENTINEL: &str = capkk_service::provisioning::SENTINEL;

/// Production host services: `capkk-service` (facts, bootstrap, repository, binary, containermanager,
/// provisioning, reset) with a controller-side artifact cache.
#[derive(Debug)]
pub(crate) struct ServiceLayer {
    cache: ArtifactCache,
}

impl ServiceLayer {
    /// Services caching downloads under `cache_dir`.
    pub(crate) fn new(cache_dir: impl Into<std::path::PathBuf>) -> ServiceResult<Self> {
        Ok(Self {
            cache: ArtifactCache::new(cache_dir)?,
        })
    }

    /// The artifact cache (limits are set on it).
    pub(crate) fn cache(&self) -> &ArtifactCache {
        &self.cache
    }
}

/// Map the API's `component` to the binary service's download sources.
pub(crate) fn component_source(c: Option<&Component>) -> ServiceResult<ComponentSource> {
    let Some(c) = c else {
        return Ok(ComponentSource::default());
    };
    Ok(ComponentSource {
        zone: c.zone.clone().filter(|z| !z.is_empty()),
        host: c.host.clone().filter(|h| !h.is_empty()),
        overrides: c
            .overrides
            .iter()
            .map(|o| ArtifactOverride {
                id: o.id.clone(),
                arch: o.arch.clone().filter(|s| !s.is_empty()),
                version: o.version.clone().filter(|s| !s.is_empty()),
                url: o.url.clone().filter(|s| !s.is_empty()),
                path: o.path.clone().filter(|s| !s.is_empty()),
                checksum_value: o
                    .checksum
                    .as_ref()
                    .and_then(|c| c.value.clone())
                    .filter(|s| !s.is_empty()),
                checksum_path: o
                    .checksum
                    .as_ref()
                    .and_then(|c| c.path.clone())
                    .filter(|s| !s.is_empty()),
            })
            .collect(),
        download_on: DownloadOn::parse(c.download_on.as_deref())?,
    })
}

async fn facts(exec: &dyn Executor, input: &PhaseInput, progress: &dyn Progress) -> ServiceResult<HostFacts> {
    if let Some(f) = input.facts.lock().ok().and_then(|f| f.clone()) {
        return Ok(f);
    }
    let f = capkk_service::facts::gather(exec, progress, &input.redactor).await?;
    if let Ok(mut slot) = input.facts.lock() {
        *slot = Some(f.clone());
    }
    Ok(f)
}

/// The binary service's inputs for the host of `spec` (the Kubernetes version is the spec's).
fn binary_config(
    spec: &KKInstanceSpec,
    arch: String,
    component: Option<&Component>,
) -> ServiceResult<BinaryConfig> {
    Ok(BinaryConfig {
        kubernetes_version: spec.kubernetes_version.clone().unwrap_or_default(),
        arch,
        cni_version: None,
        source: component_source(component)?,
        node_ip: spec
            .internal_address
            .clone()
            .or_else(|| Some(spec.address.clone())),
        node_name: Some(spec.name.clone()),
    })
}

/// The bootstrap data as a plan (its template variables are the host's, the same for every phase of a task),
/// parsed on first use.
fn bootstrap_plan(input: &PhaseInput) -> ServiceResult<&capkk_cloudinit::Plan> {
    let Some(data) = input.bootstrap.get() else {
        return Err(ServiceError::InvalidInput {
            field: "spec.bootstrapDataSecretRef".into(),
            message: "no bootstrap data".into(),
        });
    };
    if let Some(plan) = data.plan.get() {
        return Ok(plan);
    }
    let spec = &input.instance;
    let mut vars = capkk_cloudinit::TemplateVars::new()
        .local_hostname(spec.name.clone())
        .instance_id(spec.name.clone());
    if let Some(p) = spec.provider_id.clone() {
        vars = vars.provider_id(p);
    }
    let plan = capkk_cloudinit::parse(data.value.expose_secret(), &data.format, &vars)?;
    Ok(data.plan.get_or_init(|| plan))
}

/// The container runtime's components for the host of `spec`: the spec's `containerManager` values, and for
/// each it leaves unset the component default of its Kubernetes minor, the sandbox image from the cluster's
/// private registry (`capkk_service::components`). The containermanager phase installs exactly these, the
/// pre-pull pulls that sandbox image, and the KKMachine's `status.components` reports them: one resolution
/// for all three. An unknown version with unset fields is `InvalidInput` naming the first such field.
pub(crate) fn resolve_components(
    spec: &KKInstanceSpec,
    cluster: Option<&KKClusterSpec>,
) -> ServiceResult<capkk_service::components::ResolvedComponents> {
    let cm = spec.container_manager.as_ref();
    capkk_service::components::resolve(&capkk_service::components::ComponentSpec {
        kubernetes_version: spec.kubernetes_version.as_deref(),
        containerd: cm.and_then(|c| c.version.as_deref()),
        runc: cm.and_then(|c| c.runc_version.as_deref()),
        crictl: cm.and_then(|c| c.crictl_version.as_deref()),
        sandbox_image: cm.and_then(|c| c.sandbox_image.as_deref()),
        private_registry: cluster
            .and_then(|c| c.registry.as_ref())
            .and_then(|r| r.private_registry.as_deref()),
    })
}

/// Bound on pulling one image on the host.
const PULL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);
/// Bound on the whole pre-pull (its SSH channel): nothing waits for it, but the channel is not kept forever.
const PREPULL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(420);

/// What to pre-pull for this host, or why nothing. The version is the Machine's (the kubeadm the binary phase
/// installed), the image repository the bootstrap data's ClusterConfiguration's (what `kubeadm init` uses),
/// else the KKCluster's `registry.privateRegistry` (a join's bootstrap data carries no ClusterConfiguration),
/// else kubeadm's default; the images by what the bootstrap data runs: init or a control-plane join, every image;
/// a worker's join, kube-proxy; plus containerd's configured sandbox image.
///
/// A host prepared before its bootstrap data exists (the spec names none yet) pulls by the Machine's role (the
/// control-plane label) from the private registry or kubeadm's default: a ClusterConfiguration's own
/// `imageRepository` is not known yet. Provisioning's pre-pull, with the data, checks that set again.
pub(crate) fn prepull_config(input: &PhaseInput) -> Result<PrepullConfig, &'static str> {
    let kubeadm = match bootstrap_plan(input) {
        Ok(plan) => Some(
            plan.kubeadm()
                .ok_or("the bootstrap data writes no kubeadm configuration")?,
        ),
        Err(_) if input.instance.bootstrap_data_secret_ref.is_none() => None,
        Err(_) => return Err("the bootstrap data is not readable (yet)"),
    };
    let kubernetes_version = input
        .instance
        .kubernetes_version
        .clone()
        .filter(|v| !v.is_empty())
        .or_else(|| kubeadm.as_ref().and_then(|k| k.kubernetes_version.clone()))
        .ok_or("no Kubernetes version (spec.kubernetesVersion)")?;
    let private_registry = input
        .cluster
        .as_ref()
        .and_then(|c| c.registry.as_ref())
        .and_then(|r| r.private_registry.clone())
        .filter(|r| !r.is_empty());
    let control_plane = match &kubeadm {
        Some(k) => k.role == capkk_cloudinit::KubeadmRole::ControlPlane,
        None => input.control_plane,
    };
    Ok(PrepullConfig {
        kubernetes_version,
        image_repository: kubeadm.and_then(|k| k.image_repository).or(private_registry),
        images: if control_plane {
            ImageSet::ControlPlane
        } else {
            ImageSet::Worker
        },
        // The image containerd was configured with: resolved as the containermanager phase resolved it (a
        // version with no defaults failed that phase, so the pre-pull never ran).
        sandbox_image: resolve_components(&input.instance, input.cluster.as_ref())
            .ok()
            .map(|c| c.sandbox_image)
            .filter(|s| !s.is_empty()),
        pull_timeout: PULL_TIMEOUT,
        timeout: PREPULL_TIMEOUT,
    })
}

/// What the restart tier did, for its event and condition: whether it left a containerd capkk did not install
/// alone.
pub(crate) fn restart_message(out: capkk_service::remediation::RestartOutcome) -> &'static str {
    if out.containerd_restarted {
        "containerd and the kubelet were restarted and are active"
    } else {
        "the kubelet was restarted and is active; containerd was left alone: capkk did not install it"
    }
}

fn skip(progress: &dyn Progress, phase: Phase, why: &str) {
    progress.step_finished(&StepRecord {
        phase: phase.name().into(),
        name: phase.name().into(),
        exit_code: None,
        duration: std::time::Duration::ZERO,
        output_tail: why.into(),
        skipped: true,
        host_finished_ms: None,
    });
}

#[async_trait]
impl HostServices for ServiceLayer {
    async fn run(&self, phase: Phase, host: HostCall<'_>) -> ServiceResult<()> {
        let HostCall {
            exec,
            input,
            progress,
        } = host;
        let spec = &input.instance;
        let r = &input.redactor;
        let arch = spec.arch.clone().unwrap_or_else(|| "amd64".into());
        let component = input.cluster.as_ref().and_then(|c| c.component.as_ref());
        match phase {
            Phase::Bootstrap => {
                let f = facts(exec, input, progress).await?;
                f.check_arch(&arch)?;
                let id = HostIdentity {
                    hostname: spec.name.clone(),
                    internal_address: spec
                        .internal_address
                        .clone()
                        .unwrap_or_else(|| spec.address.clone()),
                    hosts_entries: input.hosts_entries.clone(),
                };
                capkk_service::bootstrap::prepare(exec, &id, &f, progress, r).await?;
                Ok(())
            }
            Phase::Repository => {
                let repo = spec.repository.clone().unwrap_or_default();
                let Some(cfg) = RepositoryConfig::from_api(
                    repo.iso.as_deref(),
                    repo.update.unwrap_or(false),
                    repo.packages.clone(),
                    component_source(component)?,
                ) else {
                    skip(
                        progress,
                        phase,
                        "spec.repository.iso is empty: package handling skipped",
                    );
                    return Ok(());
                };
                let f = facts(exec, input, progress).await?;
                capkk_service::repository::ensure(exec, &cfg, &f, &self.cache, progress, r).await?;
                Ok(())
            }
            Phase::Binary => {
                let f = facts(exec, input, progress).await?;
                let cfg = binary_config(spec, arch, component)?;
                capkk_service::binary::ensure(exec, &cfg, &f, &self.cache, progress, r).await?;
                Ok(())
            }
            Phase::ContainerManager => {
                let cm = spec.container_manager.clone().unwrap_or_default();
                // Checked before the host's facts: a version with no defaults fails without touching it.
                let components = resolve_components(spec, input.cluster.as_ref())?;
                let f = facts(exec, input, progress).await?;
                let reg = input
                    .cluster
                    .as_ref()
                    .and_then(|c| c.registry.clone())
                    .unwrap_or_default();
                let cfg = ContainerdConfig {
                    runtime_type: cm.type_.clone(),
                    version: Some(components.containerd),
                    crictl_version: Some(components.crictl),
                    runc_version: Some(components.runc),
                    cri_socket: cm.cri_socket.clone(),
                    sandbox_image: Some(components.sandbox_image),
                    registry_mirrors: reg.registry_mirrors.clone(),
                    insecure_registries: reg.insecure_registries.clone(),
                    private_registry: reg.private_registry.clone().filter(|s| !s.is_empty()),
                    registry_auth: input.registry_auth.clone(),
                    arch,
                    source: component_source(component)?,
                    // Decided by `ensure` from the host's facts, not by the spec.
                    restrict_oom_score_adj: false,
                };
                capkk_service::containermanager::ensure(exec, &cfg, &f, &self.cache, progress, r).await?;
                Ok(())
            }
            Phase::LoadBalancer => {
                let cfg = match &input.load_balancer {
                    LoadBalancerPlan::Nothing => {
                        skip(
                            progress,
                            phase,
                            "not a control plane of a cluster whose endpoint the provider serves",
                        );
                        return Ok(());
                    }
                    LoadBalancerPlan::Refuse(message) => {
                        return Err(ServiceError::InvalidInput {
                            field: "spec.controlPlaneLoadBalancer".into(),
                            message: message.clone(),
                        });
                    }
                    LoadBalancerPlan::Serve(cfg) => cfg,
                };
                let f = facts(exec, input, progress).await?;
                // The packages come from where the host's other packages come from (its sources, or the ISO).
                let repo = spec.repository.clone().unwrap_or_default();
                let repo = RepositoryConfig::from_api(
                    Some(
                        repo.iso
                            .as_deref()
                            .filter(|i| !i.trim().is_empty())
                            .unwrap_or("none"),
                    ),
                    repo.update.unwrap_or(false),
                    Vec::new(),
                    component_source(component)?,
                )
                .ok_or_else(|| ServiceError::InvalidInput {
                    field: "spec.repository.iso".into(),
                    message: "no package source".into(),
                })?;
                let out = capkk_service::loadbalancer::ensure(exec, cfg, &repo, &f, &self.cache, progress, r)
                    .await?;
                info!(
                    members = cfg.members.len(),
                    interface = %out.interface,
                    changed = out.changed,
                    installed = ?out.installed,
                    "Load balancer configured"
                );
                Ok(())
            }
            Phase::Provisioning => {
                let plan = bootstrap_plan(input)?;
                let opts = capkk_service::provisioning::RunOptions {
                    rerun_failed: input.rerun_failed,
                    ..Default::default()
                };
                match capkk_service::provisioning::run_with(exec, plan, progress, r, &opts).await? {
                    Outcome::Provisioned { .. } => Ok(()),
                    Outcome::Failed { first_failure, .. } => Err(match first_failure {
                        Some(f) => ServiceError::CommandFailed {
                            step: f.name,
                            command: f.command.unwrap_or_default(),
                            exit_code: f.exit_code,
                            output_tail: f.output_tail,
                        },
                        None => ServiceError::CommandFailed {
                            step: "bootstrap data".into(),
                            command: String::new(),
                            exit_code: None,
                            output_tail: format!(
                                "every step succeeded but nothing wrote the sentinel {SENTINEL}"
                            ),
                        },
                    }),
                }
            }
        }
    }

    async fn reset(&self, host: HostCall<'_>) -> ServiceResult<()> {
        let HostCall {
            exec,
            input,
            progress,
        } = host;
        let opts = ResetOptions {
            cri_socket: input
                .instance
                .container_manager
                .as_ref()
                .and_then(|c| c.cri_socket.clone()),
        };
        capkk_service::bootstrap::reset(exec, &opts, progress, &input.redactor).await?;
        // keepalived and haproxy capkk configured (a control plane of a cluster whose endpoint it served): the
        // host must not hold or answer for the VIP any more. Does nothing on any other host.
        capkk_service::loadbalancer::remove(exec, progress, &input.redactor).await?;
        Ok(())
    }

    async fn remediate(
        &self,
        tier: RemediationTier,
        wait: std::time::Duration,
        host: HostCall<'_>,
        slot: &dyn HostSlot,
    ) -> ServiceResult<String> {
        use capkk_service::remediation::{RebootOptions, RestartOptions, reboot, restart_services};
        let HostCall {
            exec,
            input,
            progress,
        } = host;
        match tier {
            RemediationTier::RestartServices => {
                let opts = RestartOptions::default();
                let out = restart_services(exec, &opts, progress, &input.redactor).await?;
                Ok(restart_message(out).into())
            }
            RemediationTier::Reboot => {
                let opts = RebootOptions {
                    wait,
                    ..Default::default()
                };
                let out = reboot(exec, &opts, progress, &input.redactor, slot).await?;
                Ok(format!(
                    "the host rebooted and answered with a new boot ID after {} s",
                    out.took.as_secs()
                ))
            }
        }
    }

    async fn prepull(&self, host: HostCall<'_>) {
        let HostCall {
            exec,
            input,
            progress,
        } = host;
        let phase = PREPULL_AFTER.name();
        let note = |why: String| {
            progress.step_finished(&StepRecord {
                phase: phase.into(),
                name: capkk_service::images::STEP.into(),
                exit_code: None,
                duration: std::time::Duration::ZERO,
                output_tail: why,
                skipped: true,
                host_finished_ms: None,
            })
        };
        let cfg = match prepull_config(input) {
            Ok(cfg) => cfg,
            Err(why) => return note(format!("nothing pre-pulled: {why}")),
        };
        match capkk_service::images::prepull(exec, &cfg, phase, progress, &input.redactor).await {
            Ok(out) => info!(
                version = %cfg.kubernetes_version,
                images = %out.replace('\n', " | "),
                "Images pre-pulled"
            ),
            // Its step (a line per image) is journaled already.
            Err(ServiceError::CommandFailed { output_tail, .. }) => info!(
                version = %cfg.kubernetes_version,
                images = %output_tail.replace('\n', " | "),
                "Image pre-pull incomplete; kubeadm pulls the rest"
            ),
            Err(e) => {
                info!(error = %e, "Image pre-pull did not finish; kubeadm pulls the rest");
                note(format!("not finished ({e}); kubeadm pulls what is missing"));
            }
        }
    }

    async fn holds_vip(&self, host: HostCall<'_>) -> ServiceResult<Option<bool>> {
        let LoadBalancerPlan::Serve(cfg) = &host.input.load_balancer else {
            return Ok(None);
        };
        let s = capkk_service::loadbalancer::status(host.exec, cfg).await?;
        Ok(Some(s.vip_held))
    }

    async fn upgrade(&self, host: HostCall<'_>) -> ServiceResult<String> {
        use capkk_service::upgrade::{UpgradeOptions, upgrade_node};
        let HostCall {
            exec,
            input,
            progress,
        } = host;
        let spec = &input.instance;
        let arch = spec.arch.clone().unwrap_or_else(|| "amd64".into());
        let component = input.cluster.as_ref().and_then(|c| c.component.as_ref());
        let f = facts(exec, input, progress).await?;
        let cfg = binary_config(spec, arch, component)?;
        let out = upgrade_node(
            exec,
            &cfg,
            &f,
            &self.cache,
            &UpgradeOptions {
                ignore_preflight_errors: input.ignore_preflight_errors.clone(),
                patches_dir: input.patches_dir.clone(),
                ..Default::default()
            },
            progress,
            &input.redactor,
        )
        .await?;
        Ok(format!(
            "upgraded in place to {}: {} binaries installed ({} bytes uploaded), kubeadm upgrade node, kubelet restarted",
            cfg.kubernetes_version,
            out.binaries.uploaded.len() + out.binaries.host_downloaded.len(),
            out.binaries.bytes_uploaded
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host answering the restart tier's script with `lines` as its output.
    struct Restarted(&'static str);

    #[async_trait]
    impl Executor for Restarted {
        async fn exec(
            &self,
            _req: capkk_executor::ExecRequest,
        ) -> Result<capkk_executor::ExecOutput, capkk_executor::ExecError> {
            let out = format!(
                "\n@@capkk begin restart-services\n{}\n@@capkk changed\n\n@@capkk end restart-services 0 5 0\n",
                self.0
            );
            Ok(capkk_executor::ExecOutput {
                exit_code: Some(0),
                stdout: out.into_bytes(),
                ..Default::default()
            })
        }

        async fn put(&self, _req: capkk_executor::PutRequest) -> Result<u64, capkk_executor::ExecError> {
            Ok(0)
        }

        async fn get(
            &self,
            _path: &str,
            _limit: usize,
            _privileged: bool,
        ) -> Result<Vec<u8>, capkk_executor::ExecError> {
            Ok(Vec::new())
        }

        fn target(&self) -> String {
            "198.18.0.11".into()
        }
    }

    /// Issue 43 finding 8: the restart tier's event and condition say when it left a containerd capkk did not
    /// install alone.
    #[tokio::test]
    async fn the_restart_tiers_message_says_when_it_left_a_containerd_capkk_did_not_install_alone() {
        let dir = std::env::temp_dir().join(format!("capkk-services-test-{}", std::process::id()));
        let services = ServiceLayer::new(&dir).expect("a cache dir");
        let input = PhaseInput::default();
        let progress = capkk_service::journal::RecordingProgress::default();
        let restart = |exec: &'static Restarted| {
            let (services, input, progress) = (&services, &input, &progress);
            async move {
                let host = HostCall {
                    exec,
                    input,
                    progress,
                };
                services
                    .remediate(
                        RemediationTier::RestartServices,
                        std::time::Duration::from_secs(60),
                        host,
                        &capkk_service::remediation::NoSlot,
                    )
                    .await
                    .expect("the tier ran")
            }
        };
        static FOREIGN: Restarted = Restarted(
            "left containerd alone: capkk did not install it\nrestarted kubelet\nkubelet is active",
        );
        static OURS: Restarted =
            Restarted("restarted containerd\nrestarted kubelet\ncontainerd and kubelet are active");
        assert_eq!(
            restart(&FOREIGN).await,
            "the kubelet was restarted and is active; containerd was left alone: capkk did not install it"
        );
        assert_eq!(
            restart(&OURS).await,
            "containerd and the kubelet were restarted and are active"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    const INIT: &str = "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: ClusterConfiguration\n    imageRepository: 198.18.0.1:5000\n    kubernetesVersion: v1.36.3\n    ---\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: InitConfiguration\nruncmd:\n- kubeadm init --config /run/kubeadm/kubeadm.yaml\n";
    const JOIN: &str = "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm-join-config.yaml\n  content: |\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: JoinConfiguration\nruncmd:\n- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n";

    fn input(data: &str, private_registry: Option<&str>) -> PhaseInput {
        let input = PhaseInput {
            instance: KKInstanceSpec {
                name: "node-1".into(),
                kubernetes_version: Some("v1.36.3".into()),
                container_manager: Some(capkk_api::ContainerManager {
                    sandbox_image: Some("198.18.0.1:5000/pause:3.10.1".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            cluster: Some(KKClusterSpec {
                registry: Some(capkk_api::Registry {
                    private_registry: private_registry.map(str::to_owned),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let _ = input.bootstrap.set(BootstrapData::new(
            SecretSlice::from(data.as_bytes().to_vec()),
            "cloud-config".into(),
        ));
        input
    }

    #[test]
    fn an_init_pre_pulls_every_image_from_the_cluster_configurations_repository() {
        let cfg = prepull_config(&input(INIT, Some("other.example:5000"))).expect("a pre-pull");
        assert_eq!(cfg.images, ImageSet::ControlPlane);
        assert_eq!(cfg.image_repository.as_deref(), Some("198.18.0.1:5000"));
        assert_eq!(cfg.kubernetes_version, "v1.36.3");
        assert_eq!(cfg.sandbox_image.as_deref(), Some("198.18.0.1:5000/pause:3.10.1"));
    }

    #[test]
    fn a_host_naming_no_sandbox_image_pre_pulls_the_default_pause_of_its_version_from_the_private_registry() {
        let mut i = input(JOIN, Some("198.18.0.1:5000"));
        i.instance.container_manager = None;
        let cfg = prepull_config(&i).expect("a pre-pull");
        assert_eq!(cfg.sandbox_image.as_deref(), Some("198.18.0.1:5000/pause:3.10.2"));
    }

    #[test]
    fn the_container_runtime_components_are_the_specs_values_over_the_defaults_of_the_kubernetes_version() {
        let mut i = input(JOIN, None);
        let c = resolve_components(&i.instance, i.cluster.as_ref()).expect("resolved");
        assert_eq!(
            (c.containerd.as_str(), c.runc.as_str(), c.crictl.as_str()),
            ("2.2.1", "v1.3.4", "v1.36.0")
        );
        assert_eq!(
            c.sandbox_image, "198.18.0.1:5000/pause:3.10.1",
            "the spec's own sandbox image"
        );
        i.instance.kubernetes_version = Some("v1.29.0".into());
        let e = resolve_components(&i.instance, i.cluster.as_ref()).expect_err("no defaults for v1.29");
        assert!(
            matches!(&e, ServiceError::InvalidInput { field, .. } if field == "spec.containerManager.version"),
            "{e:?}"
        );
    }

    /// A host that must not be touched: every call panics.
    struct Untouchable;

    #[async_trait]
    impl Executor for Untouchable {
        async fn exec(
            &self,
            req: capkk_executor::ExecRequest,
        ) -> Result<capkk_executor::ExecOutput, capkk_executor::ExecError> {
            panic!("the host was asked to run {:?}", req.command)
        }

        async fn put(&self, req: capkk_executor::PutRequest) -> Result<u64, capkk_executor::ExecError> {
            panic!("the host was sent {}", req.path)
        }

        async fn get(
            &self,
            path: &str,
            _limit: usize,
            _privileged: bool,
        ) -> Result<Vec<u8>, capkk_executor::ExecError> {
            panic!("the host was read: {path}")
        }

        fn target(&self) -> String {
            "198.18.0.12".into()
        }
    }

    #[tokio::test]
    async fn the_container_runtime_step_refuses_a_version_without_defaults_before_touching_the_host() {
        let dir = std::env::temp_dir().join(format!("capkk-services-defaults-{}", std::process::id()));
        let services = ServiceLayer::new(&dir).expect("a cache dir");
        let mut input = input(JOIN, None);
        input.instance.kubernetes_version = Some("v1.99.0".into());
        input.instance.container_manager = None;
        let progress = capkk_service::journal::RecordingProgress::default();
        let host = HostCall {
            exec: &Untouchable,
            input: &input,
            progress: &progress,
        };
        let e = services
            .run(Phase::ContainerManager, host)
            .await
            .expect_err("no defaults for v1.99");
        let ServiceError::InvalidInput { field, message } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(field, "spec.containerManager.version");
        assert!(
            message.contains("v1.99.0") && message.contains("spec.containerManager.sandboxImage"),
            "{message}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_worker_join_pre_pulls_kube_proxy_from_the_private_registry_or_kubeadms_default() {
        let cfg = prepull_config(&input(JOIN, Some("198.18.0.1:5000"))).expect("a pre-pull");
        assert_eq!(cfg.images, ImageSet::Worker);
        assert_eq!(cfg.image_repository.as_deref(), Some("198.18.0.1:5000"));
        let cfg = prepull_config(&input(JOIN, None)).expect("a pre-pull");
        assert_eq!(cfg.image_repository, None, "kubeadm's default");
    }

    #[test]
    fn bootstrap_data_without_kubeadm_or_unreadable_pre_pulls_nothing_and_says_why() {
        assert_eq!(
            prepull_config(&input("#cloud-config\nruncmd:\n- echo hi\n", None)).err(),
            Some("the bootstrap data writes no kubeadm configuration")
        );
        let named_unread = PhaseInput {
            instance: KKInstanceSpec {
                bootstrap_data_secret_ref: Some(capkk_api::SecretRef { name: "data".into() }),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            prepull_config(&named_unread).err(),
            Some("the bootstrap data is not readable (yet)")
        );
    }

    #[test]
    fn a_host_prepared_before_its_bootstrap_data_pre_pulls_by_its_machines_role_from_the_private_registry() {
        let before_data = |control_plane: bool, private_registry: Option<&str>| PhaseInput {
            instance: KKInstanceSpec {
                kubernetes_version: Some("v1.36.3".into()),
                ..Default::default()
            },
            cluster: Some(KKClusterSpec {
                registry: Some(capkk_api::Registry {
                    private_registry: private_registry.map(str::to_owned),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            control_plane,
            ..Default::default()
        };
        let cfg = prepull_config(&before_data(false, Some("198.18.0.1:5000"))).expect("a pre-pull");
        assert_eq!(cfg.images, ImageSet::Worker);
        assert_eq!(cfg.kubernetes_version, "v1.36.3");
        assert_eq!(cfg.image_repository.as_deref(), Some("198.18.0.1:5000"));
        let cfg = prepull_config(&before_data(true, None)).expect("a pre-pull");
        assert_eq!(cfg.images, ImageSet::ControlPlane);
        assert_eq!(cfg.image_repository, None, "kubeadm's default");
    }
}
