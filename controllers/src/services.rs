//! The host work of a KKInstance as phases, behind the [`HostServices`] trait so the reconciler does not
//! depend on how a phase is carried out. [`ServiceLayer`] is the production implementation on top of
//! `capkk-service`.

use std::sync::Arc;

use async_trait::async_trait;
use capkk_api::{KKClusterSpec, KKInstanceSpec, consts::conditions as cond};
use capkk_executor::{ExecRequest, Executor, quote};
use capkk_service::{
    Error as ServiceError, Result as ServiceResult,
    journal::{Progress, Redactor, StepRunner},
};
use capkk_ssh::Secret;

/// One phase of host work, in execution order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
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
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 5] = [
        Phase::Bootstrap,
        Phase::Repository,
        Phase::Binary,
        Phase::ContainerManager,
        Phase::Provisioning,
    ];

    /// The phase name used in annotations, journals and progress messages.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Bootstrap => "bootstrap",
            Phase::Repository => "repository",
            Phase::Binary => "binary",
            Phase::ContainerManager => "containermanager",
            Phase::Provisioning => "provisioning",
        }
    }

    /// The KKInstance condition reporting this phase.
    pub fn condition(self) -> &'static str {
        match self {
            Phase::Bootstrap => cond::BOOTSTRAPPED,
            Phase::Repository => cond::REPOSITORY_READY,
            Phase::Binary => cond::BINARIES_READY,
            Phase::ContainerManager => cond::CRI_READY,
            Phase::Provisioning => cond::PROVISIONED,
        }
    }
}

/// The bootstrap data (`value`, `format`) of the Machine. Secret: never printed.
pub struct BootstrapData {
    /// The payload.
    pub value: Secret,
    /// `cloud-config` (default) or `ignition`.
    pub format: String,
}

impl std::fmt::Debug for BootstrapData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapData")
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

/// What a phase gets to work with.
#[derive(Debug)]
pub struct PhaseInput {
    /// The KKInstance spec.
    pub instance: KKInstanceSpec,
    /// The KKCluster spec (mirrors, registry), when the KKCluster still exists.
    pub cluster: Option<KKClusterSpec>,
    /// Bootstrap data (provisioning only).
    pub bootstrap: Option<BootstrapData>,
    /// Redacts known secrets from output kept in journals and conditions.
    pub redactor: Redactor,
}

/// Carries out phases on a host.
#[async_trait]
pub trait HostServices: Send + Sync {
    /// Run one phase. Must be idempotent: a restarted manager may run a phase again after a crash.
    async fn run(
        &self,
        phase: Phase,
        exec: Arc<dyn Executor>,
        input: &PhaseInput,
        progress: &dyn Progress,
    ) -> ServiceResult<()>;

    /// Undo what the phases did (kubeadm reset, remove the sentinel and the files the bootstrap wrote).
    async fn reset(
        &self,
        exec: Arc<dyn Executor>,
        input: &PhaseInput,
        progress: &dyn Progress,
    ) -> ServiceResult<()>;
}

/// The sentinel CABPK's bootstrap data writes once kubeadm succeeded.
pub const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

/// Production host services.
#[derive(Debug, Default, Clone)]
pub struct ServiceLayer;

fn go_arch(m: &str) -> &str {
    match m {
        "x86_64" => "amd64",
        "aarch64" | "arm64" => "arm64",
        o => o,
    }
}

#[async_trait]
impl HostServices for ServiceLayer {
    async fn run(
        &self,
        phase: Phase,
        exec: Arc<dyn Executor>,
        input: &PhaseInput,
        progress: &dyn Progress,
    ) -> ServiceResult<()> {
        let runner = StepRunner {
            exec: &*exec,
            progress,
            redactor: &input.redactor,
            phase: phase.name(),
        };
        let spec = &input.instance;
        match phase {
            Phase::Bootstrap => {
                let out = runner
                    .run("detect architecture", ExecRequest::new("uname -m"))
                    .await?;
                let arch = go_arch(out.stdout_str().trim()).to_owned();
                let declared = spec.arch.clone().unwrap_or_else(|| "amd64".into());
                if arch != declared {
                    return Err(ServiceError::HostMismatch {
                        message: format!(
                            "host {} is {arch}, but its arch is declared as {declared}",
                            spec.name
                        ),
                    });
                }
                let name = quote(&spec.name);
                runner
                    .run(
                        "set hostname",
                        ExecRequest::new(format!(
                            "if [ \"$(hostname)\" != {name} ]; then hostname {name} && printf '%s\\n' {name} > /etc/hostname; fi"
                        ))
                        .sudo(),
                    )
                    .await?;
                runner
                    .run(
                        "create directories",
                        ExecRequest::new("mkdir -p /etc/kubernetes /run/cluster-api /var/lib/kubelet").sudo(),
                    )
                    .await?;
                Ok(())
            }
            Phase::Repository => match spec
                .repository
                .as_ref()
                .and_then(|r| r.iso.as_deref())
                .unwrap_or("")
            {
                "" | "none" => {
                    runner.record_skip(
                        "repository",
                        "no ISO configured; using the host's package sources",
                    );
                    Ok(())
                }
                iso => Err(ServiceError::Unsupported {
                    what: format!("spec.repository.iso {iso:?}"),
                }),
            },
            Phase::Binary => {
                let out = runner
                    .run_allow_failure(
                        "check kubernetes binaries",
                        ExecRequest::new("command -v kubeadm && command -v kubelet"),
                    )
                    .await?;
                if out.success() {
                    return Ok(());
                }
                Err(ServiceError::Unsupported {
                    what: "installing kubeadm/kubelet on a host that lacks them (the binary service is not linked into this build)".into(),
                })
            }
            Phase::ContainerManager => {
                match spec
                    .container_manager
                    .as_ref()
                    .and_then(|c| c.type_.as_deref())
                    .unwrap_or("containerd")
                {
                    "containerd" => {}
                    other => {
                        return Err(ServiceError::Unsupported {
                            what: format!(
                                "spec.containerManager.type {other:?} (only containerd is implemented)"
                            ),
                        });
                    }
                }
                runner.record_skip("containerd", "container runtime handled by the host image");
                Ok(())
            }
            Phase::Provisioning => {
                let check = runner
                    .run_allow_failure(
                        "check sentinel",
                        ExecRequest::new(format!("test -f {SENTINEL}")).sudo(),
                    )
                    .await?;
                if check.success() {
                    return Ok(());
                }
                Err(ServiceError::Unsupported {
                    what: "running bootstrap data (the provisioning service is not linked into this build)"
                        .into(),
                })
            }
        }
    }

    async fn reset(
        &self,
        exec: Arc<dyn Executor>,
        input: &PhaseInput,
        progress: &dyn Progress,
    ) -> ServiceResult<()> {
        let runner = StepRunner {
            exec: &*exec,
            progress,
            redactor: &input.redactor,
            phase: "reset",
        };
        runner
            .run(
                "kubeadm reset",
                ExecRequest::new("if command -v kubeadm >/dev/null; then kubeadm reset -f; fi").sudo(),
            )
            .await?;
        runner
            .run(
                "remove bootstrap files",
                ExecRequest::new(format!(
                    "rm -rf {SENTINEL} /run/kubeadm /etc/kubernetes /var/lib/kubelet /var/lib/etcd"
                ))
                .sudo(),
            )
            .await?;
        Ok(())
    }
}
