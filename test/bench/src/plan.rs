//! The bench's provisioning plan: service-layer host preparation, then the CABPK bootstrap data.
//!
//! While `capkk-cloudinit` / `capkk-service::provisioning` do not yet expose a plan, the bench renders the
//! same shape itself: the service steps the provider runs before provisioning (facts, bootstrap, binary
//! check, container manager) followed by the fixture's `write_files` (one upload each, decoded, mode and
//! owner applied) and `runcmd` (one command each, in order). Every method runs exactly these ops.

use sha2::{Digest as _, Sha256};

use crate::workload::{Op, SENTINEL, Workload, read_fixture};

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

const CONTAINERD_CONFIG: &str = r#"version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = true
"#;

const CONTAINERD_UNIT: &str = r#"[Unit]
Description=containerd container runtime (capkk-bench stand-in)
After=network.target

[Service]
ExecStart=/bin/sleep infinity
Restart=always

[Install]
WantedBy=multi-user.target
"#;

fn exec(command: impl Into<String>) -> Op {
    Op::Exec {
        command: command.into(),
        stdin: None,
    }
}

fn put(path: &str, content: &[u8], mode: u32) -> Op {
    Op::Put {
        path: path.into(),
        content: content.to_vec(),
        mode,
        owner: Some("root:root".into()),
    }
}

/// The service-layer steps capkk-service does not run yet in the bench: the binary check (the artifact is the
/// stand-in placed out of band) and the container manager (config, unit, start through the systemctl shim).
/// Facts and bootstrap are capkk-service's own ([`crate::ours::provision_host`]).
pub fn service_steps(_hostname: &str) -> Vec<Op> {
    vec![
        // binary
        exec("test -x /usr/local/bin/kubeadm && sha256sum /usr/local/bin/kubeadm"),
        exec("kubeadm version -o short"),
        // container manager
        put("/etc/containerd/config.toml", CONTAINERD_CONFIG.as_bytes(), 0o644),
        put(
            "/etc/systemd/system/containerd.service",
            CONTAINERD_UNIT.as_bytes(),
            0o644,
        ),
        exec("systemctl daemon-reload"),
        exec("systemctl enable --now containerd"),
        exec("systemctl is-active containerd"),
    ]
}

/// A workload for these hosts with its checks and reset paths; the ops are filled by recording capkk-rs
/// (see [`crate::ours::record`]).
pub fn skeleton(fixture: &str, fixture_name: &str, hosts: &[String]) -> anyhow::Result<Workload> {
    let mut w = Workload {
        source: format!(
            "capkk-service facts + bootstrap, {} binary/containermanager steps (bench stand-ins until \
             capkk-service's run without a mirror), capkk-service provisioning of {fixture_name}",
            service_steps("h").len()
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
        "/etc/modules-load.d/capkk.conf",
        "/etc/sysctl.d/99-capkk.conf",
        "/etc/cni",
        "/opt/cni",
        "/var/lib/kubelet",
        KUBEADM_LOG,
        "/var/log/capkk-fake-kernel.log",
        "/var/log/capkk-prekubeadm.log",
        "/var/log/capkk-hostname",
    ]
    .map(String::from)
    .to_vec();
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
        let mut log = String::from("version -o short\n");
        log.push_str(&kubeadm_calls.concat());
        e.exact.insert(KUBEADM_LOG.into(), log);
    }
    Ok(w)
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
        let w = skeleton(fixture, "fixture", &["h1".into(), "h2".into()]).unwrap();
        let e = &w.expect["h2"];
        assert_eq!(e.exact[SENTINEL], "success\n");
        assert_eq!(
            e.exact[KUBEADM_LOG],
            "version -o short\ninit --config /run/kubeadm/kubeadm.yaml\n"
        );
        assert_eq!(e.files["/etc/kubernetes/pki/ca.key"].1, "600");
        assert_ne!(
            w.expect["h1"].files["/run/kubeadm/kubeadm.yaml"].0, e.files["/run/kubeadm/kubeadm.yaml"].0,
            "per-host rendering of the hostname"
        );
        assert!(w.reset_paths.iter().any(|p| p == "/run/cluster-api"));
        assert!(service_steps("h1").len() >= 5);
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
