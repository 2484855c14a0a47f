//! The remediation service's first tier against a real sandbox host (netns + overlay root + sshd) over the
//! real SSH client: containerd (capkk's: its stamp is on the host) and the kubelet are restarted in that order
//! and waited for, a containerd capkk did not install is left alone, and a kubelet that cannot start fails the
//! tier naming it. The sandbox's `systemctl` shim runs the units' `ExecStart=` (stand-in
//! daemons) and records every call. The reboot tier cannot run here (a sandbox host shares the machine's
//! kernel); its waiting is unit-tested in `src/remediation.rs` and it runs on the VM tiers. Without
//! root/sshd the test fails naming what is missing (skipped only with CAPKK_ALLOW_SKIP=1).

use std::{sync::OnceLock, time::Duration};

use capkk_sandbox::{Host, Sandbox, SandboxConfig, skip_unless_supported};
use capkk_service::{
    Error,
    containermanager::CONTAINERD_STAMP,
    journal::{RecordingProgress, Redactor},
    remediation::{CONTAINERD_LEFT_ALONE, RestartOptions, RestartOutcome, restart_services},
};
use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, PoolConfig, SshPool};

/// Two hosts: the tests run side by side, each on its own.
fn sandbox() -> Option<&'static Sandbox> {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    if skip_unless_supported() {
        return None;
    }
    Some(SB.get_or_init(|| Sandbox::shared(&SandboxConfig::new("remed-tests", 2)).expect("sandbox up")))
}

fn sh(host: &Host<'_>, script: &str) -> String {
    host.sh_inside(script)
        .unwrap_or_else(|e| panic!("inside {}: {e}", host.info.name))
}

/// Stand-in units: `sleep` as a daemon, or (`kubelet_starts: false`) a kubelet that exits at once; capkk's
/// containerd stamp on the host when `capkk_containerd` (else the containerd is one capkk did not install).
fn install_units(host: &Host<'_>, kubelet_starts: bool, capkk_containerd: bool) {
    let kubelet = if kubelet_starts {
        "/bin/sleep 100000"
    } else {
        "/bin/false"
    };
    let stamp = if capkk_containerd {
        format!("mkdir -p \"$(dirname {CONTAINERD_STAMP})\"; : >{CONTAINERD_STAMP}")
    } else {
        format!("rm -f {CONTAINERD_STAMP}")
    };
    sh(
        host,
        &format!(
            "systemctl stop kubelet containerd >/dev/null 2>&1; \
             printf '[Service]\\nExecStart=/bin/sleep 100000\\n' >/etc/systemd/system/containerd.service; \
             printf '[Service]\\nExecStart={kubelet}\\n' >/etc/systemd/system/kubelet.service; \
             {stamp}; : >/var/log/capkk-systemctl.log"
        ),
    );
}

#[tokio::test]
async fn restarting_the_services_brings_a_stopped_kubelet_back_after_containerd_and_a_kubelet_that_cannot_start_fails_the_tier()
 {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[0];
    let pool = SshPool::new(PoolConfig {
        connect_timeout: Duration::from_secs(10),
        ..Default::default()
    });
    let target = HostTarget::new(
        host.address(),
        "root",
        Auth::key_file(&sb.credentials().ed25519_key),
    )
    .host_key(HostKeyPolicy::pinned(host.fingerprint()));
    let exec = pool.executor(&target);
    let opts = RestartOptions {
        wait: Duration::from_secs(5),
    };

    // containerd runs, the kubelet was stopped (what `systemctl stop kubelet` on a node does).
    install_units(host, true, true);
    sh(host, "systemctl start containerd");
    assert_eq!(sh(host, "systemctl is-active kubelet || true"), "inactive\n");
    let progress = RecordingProgress::default();
    let outcome = restart_services(&*exec, &opts, &progress, &Redactor::default())
        .await
        .expect("the restart succeeds");
    assert_eq!(
        outcome,
        RestartOutcome {
            containerd_restarted: true
        }
    );
    assert_eq!(
        sh(host, "systemctl is-active containerd kubelet"),
        "active\nactive\n"
    );
    let calls = host.systemctl_calls().expect("the shim's log");
    let restarts: Vec<&String> = calls.iter().filter(|c| c.starts_with("restart ")).collect();
    assert_eq!(
        restarts,
        ["restart containerd", "restart kubelet"],
        "containerd first, then the kubelet: {calls:?}"
    );
    let records = progress.records();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].name.as_str(), records[0].exit_code),
        ("restart-services", Some(0))
    );
    assert!(
        records[0]
            .output_tail
            .contains("containerd and kubelet are active"),
        "{}",
        records[0].output_tail
    );

    // A kubelet that exits at once: the tier fails and says so.
    install_units(host, false, true);
    let err = restart_services(&*exec, &opts, &RecordingProgress::default(), &Redactor::default())
        .await
        .expect_err("a kubelet that cannot start fails the tier");
    match &err {
        Error::CommandFailed {
            step, output_tail, ..
        } => {
            assert_eq!(step, "remediation/restart-services");
            assert!(output_tail.contains("kubelet"), "{output_tail}");
        }
        e => panic!("not a failed command: {e}"),
    }
    sh(host, "systemctl stop kubelet containerd >/dev/null 2>&1; true");
}

/// Issue 43 finding 8: a containerd capkk did not install (no stamp: the distribution's, Docker's) serves more
/// than the node; the restart tier restarts the kubelet only and says it left containerd alone.
#[tokio::test]
async fn restarting_the_services_leaves_a_containerd_capkk_did_not_install_running_and_restarts_only_the_kubelet()
 {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[1];
    let pool = SshPool::new(PoolConfig {
        connect_timeout: Duration::from_secs(10),
        ..Default::default()
    });
    let target = HostTarget::new(
        host.address(),
        "root",
        Auth::key_file(&sb.credentials().ed25519_key),
    )
    .host_key(HostKeyPolicy::pinned(host.fingerprint()));
    let exec = pool.executor(&target);
    let opts = RestartOptions {
        wait: Duration::from_secs(5),
    };
    install_units(host, true, false);
    sh(host, "systemctl start containerd");
    // The sandbox's systemctl shim keeps a unit's PID here.
    let pid_of_containerd = "cat /run/capkk-units/containerd.service.pid";
    let pid = sh(host, pid_of_containerd);
    let progress = RecordingProgress::default();
    let outcome = restart_services(&*exec, &opts, &progress, &Redactor::default())
        .await
        .expect("the restart succeeds");
    assert_eq!(
        outcome,
        RestartOutcome {
            containerd_restarted: false
        }
    );
    let calls = host.systemctl_calls().expect("the shim's log");
    let restarts: Vec<&String> = calls.iter().filter(|c| c.starts_with("restart ")).collect();
    assert_eq!(restarts, ["restart kubelet"], "only the kubelet: {calls:?}");
    assert_eq!(
        sh(host, "systemctl is-active containerd kubelet"),
        "active\nactive\n"
    );
    assert_eq!(
        sh(host, pid_of_containerd),
        pid,
        "the same containerd process runs"
    );
    let records = progress.records();
    assert!(
        records[0].output_tail.contains(CONTAINERD_LEFT_ALONE),
        "{}",
        records[0].output_tail
    );
    sh(host, "systemctl stop kubelet containerd >/dev/null 2>&1; true");
}
