//! The in-place upgrade service: a provisioned worker moves to another Kubernetes version on the same host,
//! without a reset (what CAPI's `UpdateMachine` hook asks of the controller).
//!
//! | step | what runs | round trips |
//! |---|---|---|
//! | binaries | [`binary::ensure`] with the new version: kubeadm, kubelet and kubectl of that version (by digest), the kubelet unit | probe + uploads + one exec |
//! | [`upgrade_script`] | `kubeadm upgrade node` (refused unless the host's kubeadm is the new version), `systemctl restart kubelet` (refused unless the kubelet answers `--version` with it), then waits for the unit to be active | one exec |
//!
//! Every step is idempotent: a repeated call installs nothing and `kubeadm upgrade node` finds the node
//! upgraded. Whether the Node reports the new version is for the controller to see (this crate never talks to
//! Kubernetes).

use std::time::Duration;

use tracing::instrument;

use crate::{
    Result,
    binary::{self, ArtifactCache, BinaryConfig, BinaryOutcome},
    facts::{HostFacts, script::Script},
    host::{Vars, tpl},
    journal::{Progress, Redactor},
};

/// Options of [`upgrade_node`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeOptions {
    /// How long the kubelet may take to be active after its restart.
    pub wait: Duration,
    /// Bound on `kubeadm upgrade node` plus the restart.
    pub timeout: Duration,
    /// kubeadm preflight checks the node's KubeadmConfig ignores (`nodeRegistration.ignorePreflightErrors`,
    /// e.g. `SystemVerification` on a cgroup v1 host): `kubeadm upgrade node` runs the same checks and must
    /// ignore the same ones. Checked with [`check_preflight_errors`].
    pub ignore_preflight_errors: Vec<String>,
    /// The node's kubeadm patches directory (`joinConfiguration.patches.directory`): `kubeadm upgrade node`
    /// rewrites the kubelet's configuration from the cluster's ConfigMap and applies this node's
    /// `kubeletconfiguration` patches again only when given it (e.g. `failCgroupV1: false` on a cgroup v1 host:
    /// without it the upgraded kubelet refuses to start). Checked with [`check_patches_dir`].
    pub patches_dir: Option<String>,
}

impl Default for UpgradeOptions {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(60),
            timeout: Duration::from_secs(600),
            ignore_preflight_errors: Vec::new(),
            patches_dir: None,
        }
    }
}

/// What [`upgrade_node`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradeOutcome {
    /// The binary step.
    pub binaries: BinaryOutcome,
    /// Names of the upgrade steps that changed something.
    pub changed: Vec<String>,
}

/// Refuse preflight check names that are not kubeadm's spelling (letters, digits, `.`, `_`, `-`, or `all`):
/// they reach a command line on the host. `field` names where they came from.
pub fn check_preflight_errors(field: &str, names: &[String]) -> Result<()> {
    for n in names {
        let ok = !n.is_empty()
            && n.len() <= 128
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            && !n.starts_with('-');
        if !ok {
            return Err(crate::Error::InvalidInput {
                field: field.into(),
                message: format!("{n:?} is not a kubeadm preflight check name"),
            });
        }
    }
    Ok(())
}

/// Refuse a patches directory that is not a plain absolute path (letters, digits, `.`, `_`, `-`, `/`; no `..`):
/// it reaches a command line on the host. `field` names where it came from.
pub fn check_patches_dir(field: &str, dir: &str) -> Result<()> {
    let ok = dir.starts_with('/')
        && dir.len() <= 256
        && dir
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
        && !dir.split('/').any(|c| c == "..");
    if ok {
        Ok(())
    } else {
        Err(crate::Error::InvalidInput {
            field: field.into(),
            message: format!("{dir:?} is not an absolute path of letters, digits, '.', '_', '-' and '/'"),
        })
    }
}

/// The script run after the binaries are in place (pure; the golden rendering uses it). `version` must have
/// passed [`binary::check_version`].
pub fn upgrade_script(version: &str, opts: &UpgradeOptions) -> Script {
    let mut s = Script::new();
    s.step(
        "kubeadm-upgrade-node",
        Vars::new()
            .var("VERSION", version)
            .var("IGNORE", opts.ignore_preflight_errors.join(","))
            .var("PATCHES", opts.patches_dir.clone().unwrap_or_default())
            .render(tpl::UPGRADE_NODE),
    );
    s.step(
        "restart-kubelet",
        Vars::new()
            .var("VERSION", version)
            .var("WAIT", opts.wait.as_secs().to_string())
            .render(tpl::UPGRADE_RESTART_KUBELET),
    );
    s
}

/// Move the node on `exec` to `cfg.kubernetes_version` in place: that version's binaries, `kubeadm upgrade
/// node`, a kubelet restart on the new binary.
#[instrument(skip_all, fields(host = %exec.target(), version = %cfg.kubernetes_version))]
pub async fn upgrade_node(
    exec: &dyn capkk_executor::Executor,
    cfg: &BinaryConfig,
    facts: &HostFacts,
    cache: &ArtifactCache,
    opts: &UpgradeOptions,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<UpgradeOutcome> {
    // ensure() validates the version before anything reaches the host.
    check_preflight_errors("ignorePreflightErrors", &opts.ignore_preflight_errors)?;
    if let Some(d) = &opts.patches_dir {
        check_patches_dir("patches.directory", d)?;
    }
    let binaries = binary::ensure(exec, cfg, facts, cache, progress, redactor).await?;
    let run = upgrade_script(&cfg.kubernetes_version, opts)
        .run(exec, "upgrade", progress, redactor, opts.timeout)
        .await?;
    Ok(UpgradeOutcome {
        binaries,
        changed: run.changed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the rendered script under `sh` with stand-in `kubeadm`, `kubelet` and `systemctl` on PATH; returns
    /// (exit status, output, calls the stand-ins logged).
    fn run_with_stand_ins(version: &str, kubeadm_says: &str, kubelet_says: &str) -> (bool, String, String) {
        run_with_options(version, kubeadm_says, kubelet_says, &UpgradeOptions::default())
    }

    fn run_with_options(
        version: &str,
        kubeadm_says: &str,
        kubelet_says: &str,
        opts: &UpgradeOptions,
    ) -> (bool, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let log = dir.path().join("calls");
        let conf = dir.path().join("kubelet.conf");
        std::fs::write(&conf, "x").unwrap();
        let tool = |name: &str, body: String| {
            let p = bin.join(name);
            std::fs::write(
                &p,
                format!("#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}", log.display()),
            )
            .unwrap();
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        };
        tool(
            "kubeadm",
            format!("[ \"$1\" = version ] && echo '{kubeadm_says}'\nexit 0\n"),
        );
        tool("kubelet", format!("echo '{kubelet_says}'\n"));
        tool("systemctl", "exit 0\n".into());
        let text = upgrade_script(version, opts)
            .render()
            .replace("/etc/kubernetes/kubelet.conf", &conf.display().to_string());
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&text)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .unwrap();
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            calls,
        )
    }

    #[test]
    fn kubeadm_upgrade_node_ignores_the_preflight_checks_the_node_was_joined_ignoring() {
        let opts = UpgradeOptions {
            ignore_preflight_errors: vec!["SystemVerification".into(), "Swap".into()],
            patches_dir: Some("/etc/capkk-test/kubeadm-patches".into()),
            ..Default::default()
        };
        let (ok, out, calls) = run_with_options("v1.36.3", "v1.36.3", "Kubernetes v1.36.3", &opts);
        assert!(ok, "{out}");
        assert!(
            calls.contains(
                "kubeadm upgrade node --ignore-preflight-errors=SystemVerification,Swap \
                 --patches /etc/capkk-test/kubeadm-patches\n"
            ),
            "{calls}"
        );
        for bad in ["relative", "/a/../b", "/a b", "/a;b"] {
            assert!(check_patches_dir("f", bad).is_err(), "{bad:?}");
        }
        for bad in ["x;reboot", "--all", "", "a b"] {
            assert!(check_preflight_errors("f", &[bad.into()]).is_err(), "{bad:?}");
        }
        assert!(check_preflight_errors("f", &["all".into(), "Port-10250".into()]).is_ok());
    }

    #[test]
    fn the_upgrade_runs_kubeadm_upgrade_node_then_restarts_the_kubelet_on_the_new_binary() {
        let (ok, out, calls) = run_with_stand_ins("v1.36.3", "v1.36.3", "Kubernetes v1.36.3");
        assert!(ok, "{out}");
        let calls: Vec<&str> = calls.lines().filter(|l| !l.contains(" is-active")).collect();
        assert_eq!(
            calls,
            [
                "kubeadm version -o short",
                "kubeadm upgrade node",
                "kubelet --version",
                "systemctl daemon-reload",
                "systemctl restart kubelet",
            ],
            "{out}"
        );
    }

    #[test]
    fn a_host_whose_kubeadm_or_kubelet_is_still_the_old_version_is_not_upgraded_and_says_why() {
        let (ok, out, calls) = run_with_stand_ins("v1.36.3", "v1.35.2", "Kubernetes v1.36.3");
        assert!(!ok);
        assert!(
            out.contains("kubeadm on the host is v1.35.2, not v1.36.3"),
            "{out}"
        );
        assert!(!calls.contains("upgrade node"), "{calls}");
        let (ok, out, calls) = run_with_stand_ins("v1.36.3", "v1.36.3", "Kubernetes v1.35.2");
        assert!(!ok);
        assert!(
            out.contains("the kubelet on the host answers 'Kubernetes v1.35.2', not v1.36.3"),
            "{out}"
        );
        assert!(!calls.contains("restart kubelet"), "{calls}");
        // A version that only starts like the desired one is not it.
        let (ok, _, _) = run_with_stand_ins("v1.36.3", "v1.36.3", "Kubernetes v1.36.30");
        assert!(!ok);
    }
}
