//! The kubelet unit and kubeadm drop-in as a real systemd resolves them.
//!
//! The rendered files are started under a real systemd user manager in a private mount namespace (tmpfs over
//! `/run`, `/etc/default`, `/var/lib` and `/usr/local/bin`, so the machine's files are never touched), with a
//! recorder in place of `/usr/local/bin/kubelet`; the tests assert on the argv systemd handed it. This catches
//! what a string check of the drop-in cannot: systemd lets every `EnvironmentFile=` override every
//! `Environment=`, whatever their order. Needs root, `unshare` and systemd's binaries; without them the tests
//! fail and name what is missing.

use std::{path::Path, process::Command};

use capkk_service::binary::{kubelet_dropin, kubelet_unit};

const SCRIPT: &str = include_str!("scripts/kubelet-argv.sh");

/// What the host has besides our files.
#[derive(Default)]
struct HostEnv<'a> {
    /// Contents of `/etc/default/kubelet`.
    default_kubelet: Option<&'a str>,
    /// Contents of `/var/lib/kubelet/kubeadm-flags.env` (written by `kubeadm init/join`).
    kubeadm_flags: Option<&'a str>,
}

fn require_prerequisites() {
    let mut missing = Vec::new();
    let uid = Command::new("id").arg("-u").output().expect("run id -u");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        missing.push("root (for unshare --mount)");
    }
    for (what, path) in [
        (
            "systemd (/lib/systemd/systemd, Debian package systemd)",
            "/lib/systemd/systemd",
        ),
        ("systemctl (Debian package systemd)", "/bin/systemctl"),
        ("unshare (Debian package util-linux)", "/usr/bin/unshare"),
    ] {
        if !Path::new(path).exists() {
            missing.push(what);
        }
    }
    assert!(
        missing.is_empty(),
        "cannot run systemd for the kubelet unit test; missing: {}",
        missing.join(", ")
    );
}

/// The kubelet's argv after systemd resolved our unit, our drop-in and the host's environment files.
fn kubelet_argv(node_ip: Option<&str>, node_name: Option<&str>, env: &HostEnv<'_>) -> Vec<String> {
    require_prerequisites();
    let dir = tempfile::tempdir().expect("tempdir");
    let w = dir.path();
    std::fs::write(w.join("kubelet.service"), kubelet_unit()).unwrap();
    std::fs::write(w.join("10-kubeadm.conf"), kubelet_dropin(node_ip, node_name)).unwrap();
    if let Some(c) = env.default_kubelet {
        std::fs::write(w.join("default-kubelet"), c).unwrap();
    }
    if let Some(c) = env.kubeadm_flags {
        std::fs::write(w.join("kubeadm-flags.env"), c).unwrap();
    }
    std::fs::write(w.join("kubelet-argv.sh"), SCRIPT).unwrap();
    // A backstop against a hang, not a timing check: the script's own waits are bounded at 30 s each.
    let out = Command::new("timeout")
        .args(["180", "unshare", "--mount", "--propagation", "private", "sh"])
        .arg(w.join("kubelet-argv.sh"))
        .arg(w)
        .output()
        .expect("run unshare");
    assert!(
        out.status.success(),
        "systemd run failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn position(argv: &[String], arg: &str) -> usize {
    argv.iter()
        .position(|a| a == arg)
        .unwrap_or_else(|| panic!("{arg} missing from the kubelet's argv {argv:?}"))
}

#[test]
fn node_ip_survives_an_etc_default_kubelet_that_sets_kubelet_extra_args() {
    let argv = kubelet_argv(
        Some("198.18.0.11"),
        Some("node-a"),
        &HostEnv {
            default_kubelet: Some("KUBELET_EXTRA_ARGS=--v=2\n"),
            kubeadm_flags: Some(
                "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock\"\n",
            ),
        },
    );
    position(&argv, "--node-ip=198.18.0.11");
    position(&argv, "--hostname-override=node-a");
    // The host's own settings are still passed.
    position(&argv, "--v=2");
    position(
        &argv,
        "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
    );
    position(&argv, "--config=/var/lib/kubelet/config.yaml");
}

#[test]
fn node_ip_reaches_the_kubelet_on_a_host_without_environment_files() {
    let argv = kubelet_argv(Some("198.18.0.12"), None, &HostEnv::default());
    position(&argv, "--node-ip=198.18.0.12");
    assert!(
        !argv.iter().any(|a| a.starts_with("--hostname-override")),
        "{argv:?}"
    );
    assert_eq!(
        argv[..3],
        [
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--config=/var/lib/kubelet/config.yaml"
        ]
    );
}

#[test]
fn a_node_ip_the_user_sets_in_kubeadm_or_etc_default_comes_after_ours_so_it_wins() {
    // The kubelet keeps the last value of a repeated flag.
    let argv = kubelet_argv(
        Some("198.18.0.11"),
        None,
        &HostEnv {
            default_kubelet: Some("KUBELET_EXTRA_ARGS=--node-ip=198.18.0.99\n"),
            kubeadm_flags: Some("KUBELET_KUBEADM_ARGS=\"--node-ip=198.18.0.98\"\n"),
        },
    );
    let ours = position(&argv, "--node-ip=198.18.0.11");
    let kubeadm = position(&argv, "--node-ip=198.18.0.98");
    let user = position(&argv, "--node-ip=198.18.0.99");
    assert!(ours < kubeadm && kubeadm < user, "{argv:?}");
}
