//! The image pre-pull against a real sandbox host (netns + overlay root + sshd) over the real SSH client. The
//! host's `kubeadm` and `crictl` are stand-ins (a sandbox host runs no containerd): kubeadm lists images the way
//! `kubeadm config images list` does, crictl records each pull. What is checked is the real shell side: the
//! list for the version and repository, the worker's filter, the sandbox image, images already present left
//! alone, a failed pull reported per image without stopping the others. Without root/sshd the test fails naming
//! what is missing (skipped only with CAPKK_ALLOW_SKIP=1).

use std::{sync::OnceLock, time::Duration};

use capkk_sandbox::{Host, Sandbox, SandboxConfig, skip_unless_supported};
use capkk_service::{
    Error,
    images::{ImageSet, PrepullConfig, STEP, prepull},
    journal::{RecordingProgress, Redactor},
};
use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, PoolConfig, SshPool};

fn sandbox() -> Option<&'static Sandbox> {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    if skip_unless_supported() {
        return None;
    }
    Some(SB.get_or_init(|| Sandbox::shared(&SandboxConfig::new("images-tests", 1)).expect("sandbox up")))
}

fn sh(host: &Host<'_>, script: &str) -> String {
    host.sh_inside(script)
        .unwrap_or_else(|e| panic!("inside {}: {e}", host.info.name))
}

const PULLS: &str = "/var/log/capkk-crictl-pulls";

/// kubeadm lists three images for the version and repository it is given; crictl has `etcd` already, cannot
/// pull from `broken.example`, and records every other pull.
fn install_standins(host: &Host<'_>) {
    sh(
        host,
        &format!(
            "cat >/usr/local/bin/kubeadm <<'EOF'\n#!/bin/sh\n\
             [ \"$1 $2 $3 $4\" = 'config images list --kubernetes-version' ] || exit 9\n\
             r=registry.k8s.io; [ \"$6\" = --image-repository ] && r=$7\n\
             for i in kube-apiserver:$5 kube-proxy:$5 etcd:3.6.8-0; do echo \"$r/$i\"; done\nEOF\n\
             cat >/usr/local/bin/crictl <<'EOF'\n#!/bin/sh\n\
             case \"$1\" in\n inspecti) case \"$2\" in */etcd:*) exit 0;; esac; grep -qx \"$2\" {PULLS} 2>/dev/null;;\n\
             pull) case \"$2\" in broken.example/*) echo \"pulling $2: not found\" >&2; exit 1;; esac; echo \"$2\" >>{PULLS};;\n\
             *) exit 2;;\nesac\nEOF\n\
             chmod 755 /usr/local/bin/kubeadm /usr/local/bin/crictl; rm -f {PULLS}"
        ),
    );
}

fn cfg(repository: &str, images: ImageSet) -> PrepullConfig {
    PrepullConfig {
        kubernetes_version: "v1.36.3".into(),
        image_repository: Some(repository.into()),
        images,
        sandbox_image: Some(format!("{repository}/pause:3.10.1")),
        pull_timeout: Duration::from_secs(30),
        timeout: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn the_pre_pull_pulls_what_kubeadm_lists_once_and_reports_a_failed_image_without_stopping_the_rest() {
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
    install_standins(host);
    let r = Redactor::default();

    // A control plane: every listed image but the one present, and the sandbox image.
    let progress = RecordingProgress::default();
    let reg = "198.18.0.1:5000";
    prepull(
        &*exec,
        &cfg(reg, ImageSet::ControlPlane),
        "containermanager",
        &progress,
        &r,
    )
    .await
    .expect("every image pulled");
    // Pulled three at a time: the order of the pulls is the order they finished in.
    assert_eq!(
        sh(host, &format!("sort {PULLS}")),
        format!("{reg}/kube-apiserver:v1.36.3\n{reg}/kube-proxy:v1.36.3\n{reg}/pause:3.10.1\n")
    );
    let records = progress.records();
    let [rec] = records.as_slice() else {
        panic!("one journal record: {records:?}")
    };
    assert_eq!(
        (rec.phase.as_str(), rec.name.as_str()),
        ("containermanager", STEP)
    );
    assert_eq!(rec.exit_code, Some(0));
    assert!(!rec.skipped, "it changed the host");
    assert!(
        rec.host_finished_ms.is_some_and(|t| t > 1_700_000_000_000),
        "the host's clock at the step's end: {:?}",
        rec.host_finished_ms
    );
    assert!(
        rec.output_tail.contains(&format!(" present {reg}/etcd:3.6.8-0")),
        "{}",
        rec.output_tail
    );
    assert!(
        rec.output_tail
            .contains(&format!(" pulled {reg}/kube-proxy:v1.36.3 in ")),
        "{}",
        rec.output_tail
    );

    // Again: everything is present, nothing is pulled, the step changed nothing.
    let progress = RecordingProgress::default();
    prepull(
        &*exec,
        &cfg(reg, ImageSet::ControlPlane),
        "containermanager",
        &progress,
        &r,
    )
    .await
    .expect("nothing to pull");
    assert_eq!(sh(host, &format!("wc -l <{PULLS}")).trim(), "3");
    assert!(progress.records()[0].skipped, "{:?}", progress.records());

    // A worker whose registry cannot serve: only kube-proxy and the sandbox image are tried, each reported.
    let progress = RecordingProgress::default();
    let err = prepull(
        &*exec,
        &cfg("broken.example", ImageSet::Worker),
        "containermanager",
        &progress,
        &r,
    )
    .await
    .expect_err("the images are not pulled");
    assert!(matches!(err, Error::CommandFailed { .. }), "{err}");
    let tail = &progress.records()[0].output_tail;
    assert!(
        tail.contains(" failed broken.example/kube-proxy:v1.36.3 after "),
        "{tail}"
    );
    assert!(
        tail.contains(" failed broken.example/pause:3.10.1 after "),
        "{tail}"
    );
    assert!(
        !tail.contains("kube-apiserver"),
        "a worker skips the control-plane images: {tail}"
    );
    assert!(
        tail.contains("2 image(s) not pulled: kubeadm pulls them itself"),
        "{tail}"
    );
}
