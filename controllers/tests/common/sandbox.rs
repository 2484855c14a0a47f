//! Sandbox hosts for controller tests: fake kernel tools and package managers (so nothing touches the
//! machine's kernel or the network), a local HTTP mirror on the sandbox bridge serving stand-in release
//! artifacts with their real SHA-256 (the binary and containerd services download, verify and upload them
//! exactly as in production), and a `kubeadm` stand-in that records its arguments and config.

use std::path::Path;

use capkk_sandbox::Host;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Kubernetes version the stand-ins are published for.
pub const K8S: &str = "v1.32.0";
const CNI: &str = "v1.3.0";

/// Where the kubeadm stand-in records its arguments (one line per call).
pub const KUBEADM_ARGS_LOG: &str = "/var/log/capkk-kubeadm.args";
/// Where it copies the `--config` file it was given.
pub const KUBEADM_CONFIG_COPY: &str = "/var/log/capkk-kubeadm.config";

/// Hex SHA-256.
pub fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The artifact mirror on the sandbox bridge (shared with pkg/service's sandbox tests).
pub use capkk_sandbox::mirror::Mirror;

fn script(name: &str, body: &str) -> Vec<u8> {
    format!("#!/bin/sh\n# capkk stand-in {name}\n{body}").into_bytes()
}

/// Stand-ins are packed like the releases they replace.
fn tarball(dir: &Path, name: &str, members: &[(&str, Vec<u8>)]) -> anyhow::Result<Vec<u8>> {
    Ok(capkk_sandbox::mirror::tarball(dir, name, members)?)
}

/// The kubeadm stand-in: records its arguments and the `--config` file, exits 0.
pub fn kubeadm_standin() -> Vec<u8> {
    script(
        "kubeadm",
        &format!(
            "echo \"$*\" >> {KUBEADM_ARGS_LOG}\nprev=\nfor a in \"$@\"; do\n  if [ \"$prev\" = --config ]; then cp \"$a\" {KUBEADM_CONFIG_COPY}; fi\n  prev=$a\ndone\nif [ \"$1\" = version ]; then echo {K8S}; fi\nexit 0\n"
        ),
    )
}

/// Publish stand-ins for every artifact on `mirror` and return the KKCluster `spec.component` pointing at
/// it (overrides carry the stand-ins' SHA-256).
pub fn publish_standins(mirror: &Mirror, dir: &Path, arch: &str) -> anyhow::Result<Value> {
    publish_standins_for(mirror, dir, arch, K8S, kubeadm_standin())
}

/// [`publish_standins`] for Kubernetes version `k8s`, with `kubeadm` as the kubeadm binary (e.g. the kubeadm
/// simulator of test/kubeadm-sim, which brings up a workload API server CAPI can reach).
pub fn publish_standins_for(
    mirror: &Mirror,
    dir: &Path,
    arch: &str,
    k8s: &str,
    kubeadm: Vec<u8>,
) -> anyhow::Result<Value> {
    let dir = dir.join("standins");
    std::fs::create_dir_all(&dir)?;
    let mut files: Vec<(&str, String, Vec<u8>)> = Vec::new();
    let mut kubeadm = Some(kubeadm);
    for id in ["kubeadm", "kubelet", "kubectl"] {
        let body = match id {
            "kubeadm" => kubeadm.take().unwrap_or_default(),
            _ => script(id, "exit 0\n"),
        };
        files.push((
            id,
            format!("/kubernetes-release/release/{k8s}/bin/linux/{arch}/{id}"),
            body,
        ));
    }
    // containerd, runc and crictl at every version of the component defaults table: the clusters here name
    // none, so each host resolves the row of its own Machine's version (the day-2 tests run several). Each
    // version's override carries its own checksum.
    let mut versioned: Vec<(&str, &str, String, Vec<u8>)> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for d in capkk_service::components::COMPONENT_DEFAULTS {
        if seen.insert(("runc", d.runc)) {
            versioned.push((
                "runc",
                d.runc,
                format!("/opencontainers/runc/releases/download/{}/runc.{arch}", d.runc),
                script("runc", "exit 0\n"),
            ));
        }
        if seen.insert(("crictl", d.crictl)) {
            let crictl = d.crictl;
            versioned.push((
                "crictl",
                crictl,
                format!("/cri-tools/releases/download/{crictl}/crictl-{crictl}-linux-{arch}.tar.gz"),
                tarball(
                    &dir,
                    &format!("crictl-{crictl}"),
                    &[("crictl", script("crictl", "exit 0\n"))],
                )?,
            ));
        }
        if seen.insert(("containerd", d.containerd)) {
            let v = d.containerd;
            let containerd = format!(
                "if [ \"$1\" = --version ]; then echo 'containerd github.com/containerd/containerd v{v} standin'; exit 0; fi\nmkdir -p /run/containerd\nexec sleep 86400\n"
            );
            versioned.push((
                "containerd",
                v,
                format!("/containerd/containerd/releases/download/v{v}/containerd-{v}-linux-{arch}.tar.gz"),
                tarball(
                    &dir,
                    &format!("containerd-{v}"),
                    &[
                        ("bin/containerd", script("containerd", &containerd)),
                        ("bin/ctr", script("ctr", "exit 0\n")),
                        ("bin/containerd-shim-runc-v2", script("shim", "exit 0\n")),
                    ],
                )?,
            ));
        }
    }
    files.push((
        "cni",
        format!("/containernetworking/plugins/releases/download/{CNI}/cni-plugins-linux-{arch}-{CNI}.tgz"),
        tarball(
            &dir,
            "cni",
            &[
                ("bridge", script("bridge", "exit 0\n")),
                ("loopback", script("loopback", "exit 0\n")),
            ],
        )?,
    ));
    let mut overrides = Vec::new();
    for (id, path, body) in files {
        overrides.push(json!({"id": id, "checksum": {"value": sha(&body)}}));
        mirror.put(&path, body);
    }
    for (id, version, path, body) in versioned {
        overrides.push(json!({"id": id, "version": version, "checksum": {"value": sha(&body)}}));
        mirror.put(&path, body);
    }
    Ok(json!({"host": mirror.base, "overrides": overrides}))
}

/// Bootstrap data in CABPK's shape: `runcmd` runs `commands`, then writes CAPI's bootstrap sentinel (only when
/// they all succeeded).
pub fn cloud_config(commands: &[&str]) -> String {
    let mut data = String::from("#cloud-config\nruncmd:\n");
    for c in commands {
        data.push_str(&format!("- {c}\n"));
    }
    data.push_str(
        "- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n",
    );
    data
}

/// Run a script inside a host and return stdout ("" on failure).
pub fn inside(host: &Host<'_>, script: &str) -> String {
    host.sh_inside(script).unwrap_or_default()
}
