//! The bench's provisioning plan: service-layer host preparation, then the CABPK bootstrap data.
//!
//! The plan's shape: the service steps the provider runs before provisioning (facts, bootstrap, the binary and
//! container-manager services) followed by the fixture's `write_files` (one upload each, decoded, mode and
//! owner applied) and `runcmd` (one command each, in order). The checks here are independent of every
//! method's code: the fixture read on its own, the stand-in artifacts' installed files.

use capkk_service::binary::catalogue;
use sha2::{Digest as _, Sha256};

use crate::{
    artifacts::Artifact,
    workload::{Expect, FixtureFile, Prefixed, SENTINEL, Workload, read_fixture},
};

/// Where CAPKK v3 writes the kubeadm config it appends its kube-proxy configuration to
/// (`pkg/service/provisioning/cloudinit/writefiles.go`, `kubeadmInitPath`).
pub const V3_KUBEADM_CONFIG: &str = "/run/kubeadm/kubeadm.yaml";

/// Where CAPKK v3 keeps its scripts on a host (`pkg/service/operation/directory`, `KubeScriptDir`); the
/// capkk-v3 method copies the bench's stdin scripts there, as CAPKK does with `initOS.sh`.
pub const V3_SCRIPT_DIR: &str = "/usr/local/bin/kube-scripts";

/// Where the stand-in `kubeadm` records its calls on each host.
pub const KUBEADM_LOG: &str = "/var/log/capkk-kubeadm-standin.log";

/// The stand-in `kubeadm` placed on every host before the runs (same for every method): records its
/// arguments, writes an `admin.conf` on init/join so postKubeadmCommands find it, and exits 0.
pub const KUBEADM_STANDIN: &str = r#"#!/bin/sh
# capkk-bench stand-in for kubeadm: records its arguments, writes admin.conf on init/join, exits 0.
echo "$*" >> /var/log/capkk-kubeadm-standin.log
case "$1" in
  init|join)
    mkdir -p /etc/kubernetes
    printf 'apiVersion: v1\nkind: Config\nclusters: []\n# capkk-bench stand-in admin.conf\n' > /etc/kubernetes/admin.conf
    ;;
  version) echo v1.34.1 ;;
esac
exit 0
"#;

/// A workload for these hosts with its checks and reset paths; the ops are filled by recording capkk-rs
/// (see [`crate::ours::record`]).
pub fn skeleton(
    fixture: &str,
    fixture_name: &str,
    hosts: &[String],
    artifacts: &[Artifact],
) -> anyhow::Result<Workload> {
    let mib = artifacts.iter().map(|a| a.bytes.len()).sum::<usize>() as f64 / (1024.0 * 1024.0);
    let mut w = Workload {
        source: format!(
            "capkk-service facts + bootstrap, binary + containermanager services ({} artifacts, {mib:.1} MiB, \
             from the bench mirror), provisioning of {fixture_name}",
            artifacts.len()
        ),
        ..Default::default()
    };
    w.reset_paths = [
        "/run/cluster-api",
        "/run/kubeadm",
        "/var/lib/capkk",
        "/etc/kubernetes",
        "/root/.kube",
        "/etc/containerd",
        "/etc/systemd/system/containerd.service",
        "/etc/systemd/system/kubelet.service",
        "/etc/systemd/system/kubelet.service.d",
        "/etc/crictl.yaml",
        "/usr/bin/kubeadm",
        "/usr/bin/kubelet",
        "/usr/local/bin/runc",
        "/usr/local/bin/containerd-shim-runc-v2",
        "/etc/modules-load.d/capkk.conf",
        "/etc/sysctl.d/99-capkk.conf",
        "/etc/cni",
        "/opt/cni",
        "/var/lib/kubelet",
        KUBEADM_LOG,
        "/var/log/capkk-fake-kernel.log",
        "/var/log/capkk-prekubeadm.log",
        "/var/log/capkk-hostname",
        V3_SCRIPT_DIR,
    ]
    .map(String::from)
    .to_vec();
    // CAPKK v3 leaves the containerd and crictl archives in /usr/local/bin after extracting them.
    w.reset_paths.push(format!(
        "/usr/local/bin/containerd-{v}-linux-amd64.tar.gz",
        v = catalogue::DEFAULT_CONTAINERD_VERSION
    ));
    w.reset_paths.push(format!(
        "/usr/local/bin/crictl-{v}-linux-amd64.tar.gz",
        v = catalogue::DEFAULT_CRICTL_VERSION
    ));
    for host in hosts {
        let (files, cmds) = read_fixture(fixture, host)?;
        let e = w.expect.entry(host.clone()).or_default();
        for f in &files {
            e.files.insert(
                f.path.clone(),
                (
                    hex::encode(Sha256::digest(&f.content)),
                    format!("{:o}", f.mode & 0o7777),
                    f.owner.clone(),
                ),
            );
            if !w.reset_paths.contains(&f.path) {
                w.reset_paths.push(f.path.clone());
            }
        }
        e.exact.insert(SENTINEL.into(), "success\n".into());
        let kubeadm_calls: Vec<String> = cmds
            .iter()
            .filter_map(|c| kubeadm_args(c))
            .map(|a| format!("{a}\n"))
            .collect();
        e.exact.insert(KUBEADM_LOG.into(), kubeadm_calls.concat());
        let mut v3 = v3_expect(&files, &cmds);
        // What the binary and container-manager services install, the same for every method.
        for a in artifacts {
            for (path, content) in &a.installs {
                let check = (
                    hex::encode(Sha256::digest(content)),
                    "755".to_owned(),
                    "root:root".to_owned(),
                );
                e.files.insert(path.clone(), check.clone());
                v3.files.insert(path.clone(), check);
                if !w.reset_paths.contains(path) {
                    w.reset_paths.push(path.clone());
                }
            }
        }
        w.expect_v3.insert(host.clone(), v3);
    }
    Ok(w)
}

/// What CAPKK v3's cloud-init path leaves on a host for these `write_files` and `runcmd`
/// (`pkg/service/provisioning/cloudinit`): each file written with `echo '<content>' > path` (so one more
/// newline), `chmod`/`chown` when not 0644/root:root, its kube-proxy configuration appended to the kubeadm
/// config, and `--ignore-preflight-errors=all` inserted after `kubeadm init|join` (`hackKubeadmIgnoreErrors`).
fn v3_expect(files: &[FixtureFile], cmds: &[String]) -> Expect {
    let mut e = Expect::default();
    for f in files {
        let mode = format!("{:o}", f.mode & 0o7777);
        if f.path == V3_KUBEADM_CONFIG {
            e.prefixed.insert(
                f.path.clone(),
                Prefixed {
                    sha256: hex::encode(Sha256::digest(&f.content)),
                    len: f.content.len(),
                    mode,
                    owner: f.owner.clone(),
                    contains: "kind: KubeProxyConfiguration".into(),
                },
            );
        } else {
            let mut c = f.content.clone();
            c.push(b'\n');
            e.files.insert(
                f.path.clone(),
                (hex::encode(Sha256::digest(&c)), mode, f.owner.clone()),
            );
        }
    }
    e.exact.insert(SENTINEL.into(), "success\n".into());
    let calls: String = cmds
        .iter()
        .map(|c| {
            c.replacen("kubeadm init", "kubeadm init --ignore-preflight-errors=all", 1)
                .replacen("kubeadm join", "kubeadm join --ignore-preflight-errors=all", 1)
        })
        .filter_map(|c| kubeadm_args(&c))
        .map(|a| format!("{a}\n"))
        .collect();
    e.exact.insert(KUBEADM_LOG.into(), calls);
    e
}

/// The arguments the stand-in records for a runcmd entry that calls `kubeadm` (`kubeadm init --config x && …`).
fn kubeadm_args(cmd: &str) -> Option<String> {
    let rest = cmd.trim_start().strip_prefix("kubeadm ")?;
    let args = rest.split("&&").next()?.trim();
    // The stand-in echoes "$*": words joined by single spaces.
    Some(args.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skeleton_checks_fixture_files_sentinel_and_kubeadm_calls_per_host() {
        let fixture = include_str!("../fixtures/cabpk-controlplane-init.yaml");
        let w = skeleton(fixture, "fixture", &["h1".into(), "h2".into()], &[]).unwrap();
        let e = &w.expect["h2"];
        assert_eq!(e.exact[SENTINEL], "success\n");
        assert_eq!(e.exact[KUBEADM_LOG], "init --config /run/kubeadm/kubeadm.yaml\n");
        assert_eq!(e.files["/etc/kubernetes/pki/ca.key"].1, "600");
        assert_ne!(
            w.expect["h1"].files["/run/kubeadm/kubeadm.yaml"].0, e.files["/run/kubeadm/kubeadm.yaml"].0,
            "per-host rendering of the hostname"
        );
        assert!(w.reset_paths.iter().any(|p| p == "/run/cluster-api"));
    }

    #[test]
    fn installed_artifacts_are_checked_for_every_method() {
        let fixture = include_str!("../fixtures/cabpk-controlplane-init.yaml");
        let dir = std::env::temp_dir().join(format!("capkk-bench-plan-test-{}", std::process::id()));
        let arts = crate::artifacts::build(&dir, 0.1).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let w = skeleton(fixture, "fixture", &["h1".into()], &arts).unwrap();
        for path in [
            "/usr/local/bin/kubeadm",
            "/usr/local/sbin/runc",
            "/opt/cni/bin/loopback",
            "/usr/local/bin/containerd",
        ] {
            assert_eq!(
                w.expect["h1"].files[path], w.expect_v3["h1"].files[path],
                "{path}"
            );
            assert!(w.reset_paths.iter().any(|p| p == path), "{path} reset");
        }
    }

    #[test]
    fn capkk_v3_checks_expect_its_echo_newline_kube_proxy_block_and_preflight_flag() {
        let fixture = include_str!("../fixtures/cabpk-controlplane-init.yaml");
        let w = skeleton(fixture, "fixture", &["h1".into()], &[]).unwrap();
        let (ours, v3) = (&w.expect["h1"], &w.expect_v3["h1"]);
        assert_eq!(
            v3.exact[KUBEADM_LOG],
            "init --ignore-preflight-errors=all --config /run/kubeadm/kubeadm.yaml\n"
        );
        let (ca, ca_v3) = (
            &ours.files["/etc/kubernetes/pki/ca.key"],
            &v3.files["/etc/kubernetes/pki/ca.key"],
        );
        assert_ne!(ca.0, ca_v3.0, "echo adds a newline");
        assert_eq!((&ca.1, &ca.2), (&ca_v3.1, &ca_v3.2));
        let p = &v3.prefixed[V3_KUBEADM_CONFIG];
        assert_eq!(p.sha256, ours.files[V3_KUBEADM_CONFIG].0);
        assert!(!v3.files.contains_key(V3_KUBEADM_CONFIG));
    }

    #[test]
    fn kubeadm_args_are_what_the_standin_records() {
        assert_eq!(
            kubeadm_args("kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /x").as_deref(),
            Some("init --config /run/kubeadm/kubeadm.yaml")
        );
        assert_eq!(kubeadm_args("echo kubeadm"), None);
    }
}
