//! The bench's release artifacts and the test artifact mirror that serves them.
//!
//! kubeadm, kubelet, kubectl, runc, the CNI plugins, containerd and crictl are stand-ins (shell scripts,
//! archives of them) padded with incompressible bytes to a share of the real releases' sizes, so downloading,
//! hashing and uploading them costs what a smaller release would. The stand-in `kubeadm` records its arguments
//! (the hosts are checked against them) and the stand-in `containerd` stays up under the sandbox's systemctl
//! shim. The mirror is an HTTP server on the sandbox bridge (`spec.component.host` for capkk-rs and CAPKK v3),
//! serving each artifact at the path each provider's catalogue asks for, with a published checksum file next
//! to it under upstream's name.

use std::{path::Path, sync::Arc};

use anyhow::{Context as _, bail};
use capkk_sandbox::mirror::Mirror;
use sha2::{Digest as _, Sha256};

use crate::plan::KUBEADM_STANDIN;

/// Kubernetes version of the artifacts (the captured CABPK fixture's `kubernetesVersion`).
pub const KUBERNETES_VERSION: &str = "v1.34.4";

/// Sizes of the real linux/amd64 release files, MiB (kubeadm/kubelet/kubectl v1.34, CNI plugins v1.3.0,
/// containerd 1.7.13, runc v1.1.12, crictl v1.29.0), to split `--artifact-mib` in the same proportions.
const REAL_MIB: &[(&str, f64)] = &[
    ("kubeadm", 70.0),
    ("kubelet", 78.0),
    ("kubectl", 57.0),
    ("cni", 45.0),
    ("containerd", 36.0),
    ("runc", 10.0),
    ("crictl", 22.0),
];

/// One stand-in artifact.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// Catalogue id (capkk-rs spelling: `cni` is CAPKK's `kubecni`).
    pub id: &'static str,
    /// The file's bytes.
    pub bytes: Arc<Vec<u8>>,
    /// Files it puts on a host once installed: path → content (checked on every host after every run).
    pub installs: Vec<(String, Vec<u8>)>,
}

impl Artifact {
    /// Hex SHA-256 of the file.
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(self.bytes.as_slice()))
    }
}

/// Incompressible filler (xorshift64*), the same for the same seed.
fn filler(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A shell script followed by `pad` filler bytes: the shell stops at `exit`, so the filler is never read.
fn padded(script: &str, seed: u64, pad: usize) -> Vec<u8> {
    let mut b = script.as_bytes().to_vec();
    if !script.ends_with('\n') {
        b.push(b'\n');
    }
    b.extend_from_slice(b"# capkk-bench filler follows (never executed)\n");
    b.extend(filler(seed, pad));
    b
}

fn script(name: &str, body: &str) -> String {
    format!("#!/bin/sh\n# capkk-bench stand-in {name}\n{body}exit 0\n")
}

/// `tar -czf` of `members` (path, content, all 0755), built under `dir`.
fn tarball(dir: &Path, name: &str, members: &[(&str, Vec<u8>)]) -> anyhow::Result<Vec<u8>> {
    let root = dir.join(format!("{name}.d"));
    let _ = std::fs::remove_dir_all(&root);
    for (path, content) in members {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().context("member path")?)?;
        std::fs::write(&p, content)?;
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    }
    let out = dir.join(format!("{name}.tgz"));
    let st = std::process::Command::new("tar")
        .arg("--owner=0")
        .arg("--group=0")
        .arg("-czf")
        .arg(&out)
        .arg("-C")
        .arg(&root)
        .arg(".")
        .status()
        .context("running tar")?;
    if !st.success() {
        bail!("tar -czf {} failed ({st})", out.display());
    }
    let bytes = std::fs::read(&out)?;
    let _ = std::fs::remove_dir_all(&root);
    Ok(bytes)
}

/// Build the seven artifacts, `total_mib` MiB together, in the real releases' proportions.
pub fn build(dir: &Path, total_mib: f64) -> anyhow::Result<Vec<Artifact>> {
    std::fs::create_dir_all(dir)?;
    let real: f64 = REAL_MIB.iter().map(|(_, m)| m).sum();
    let pad = |id: &str| -> usize {
        let m = REAL_MIB.iter().find(|(i, _)| *i == id).map_or(1.0, |(_, m)| *m);
        (total_mib * m / real * 1024.0 * 1024.0) as usize
    };
    let mut out = Vec::new();
    let mut single = |id: &'static str, dest: &str, text: &str, seed: u64| {
        let bytes = padded(text, seed, pad(id));
        out.push(Artifact {
            id,
            bytes: Arc::new(bytes.clone()),
            installs: vec![(dest.to_owned(), bytes)],
        });
    };
    single("kubeadm", "/usr/local/bin/kubeadm", KUBEADM_STANDIN, 1);
    single(
        "kubelet",
        "/usr/local/bin/kubelet",
        &script("kubelet", "echo \"kubelet stand-in $*\"\n"),
        2,
    );
    single(
        "kubectl",
        "/usr/local/bin/kubectl",
        &script("kubectl", "echo \"kubectl stand-in $*\"\n"),
        3,
    );
    single(
        "runc",
        "/usr/local/sbin/runc",
        &script("runc", "echo \"runc stand-in $*\"\n"),
        4,
    );
    let cni_loopback = padded(&script("loopback", ""), 5, pad("cni"));
    let cni_bridge = script("bridge", "").into_bytes();
    out.push(Artifact {
        id: "cni",
        bytes: Arc::new(tarball(
            dir,
            "cni",
            &[
                ("./loopback", cni_loopback.clone()),
                ("./bridge", cni_bridge.clone()),
            ],
        )?),
        installs: vec![
            ("/opt/cni/bin/loopback".into(), cni_loopback),
            ("/opt/cni/bin/bridge".into(), cni_bridge),
        ],
    });
    // It reports the version it is published as (the product compares the two).
    let containerd = padded(
        &format!(
            "#!/bin/sh\n# capkk-bench stand-in containerd: stays up under the sandbox's systemctl shim\n\
             if [ \"$1\" = --version ]; then echo 'containerd github.com/containerd/containerd v{} capkk-bench'; exit 0; fi\n\
             mkdir -p /run/containerd\nexec sleep 86400\n",
            capkk_service::binary::catalogue::DEFAULT_CONTAINERD_VERSION
        ),
        6,
        pad("containerd"),
    );
    let ctr = script("ctr", "").into_bytes();
    out.push(Artifact {
        id: "containerd",
        bytes: Arc::new(tarball(
            dir,
            "containerd",
            &[("bin/containerd", containerd.clone()), ("bin/ctr", ctr.clone())],
        )?),
        installs: vec![
            ("/usr/local/bin/containerd".into(), containerd),
            ("/usr/local/bin/ctr".into(), ctr),
        ],
    });
    let crictl = padded(&script("crictl", ""), 7, pad("crictl"));
    out.push(Artifact {
        id: "crictl",
        bytes: Arc::new(tarball(dir, "crictl", &[("crictl", crictl.clone())])?),
        installs: vec![("/usr/local/bin/crictl".into(), crictl)],
    });
    Ok(out)
}

/// The checksum file upstream publishes next to an artifact (its name and content).
pub fn checksum_file(file_name: &str, sha: &str) -> (String, String) {
    match file_name {
        // dl.k8s.io: `<file>.sha256` holding the bare digest.
        "kubeadm" | "kubelet" | "kubectl" => (format!("{file_name}.sha256"), format!("{sha}\n")),
        // runc: `runc.sha256sum` listing every release file.
        f if f.starts_with("runc.") => ("runc.sha256sum".into(), format!("{sha}  {f}\n")),
        // containerd: `<file>.sha256sum`; CNI plugins and crictl: `<file>.sha256`.
        f if f.starts_with("containerd-") => (format!("{f}.sha256sum"), format!("{sha}  {f}\n")),
        f => (format!("{f}.sha256"), format!("{sha}  {f}\n")),
    }
}

/// Serve `body` at `path` on `mirror`, with the checksum file upstream publishes next to it.
pub fn publish(mirror: &Mirror, path: &str, body: Arc<Vec<u8>>) {
    let sha = hex::encode(Sha256::digest(body.as_slice()));
    let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
    let (sum_name, sum) = checksum_file(file, &sha);
    mirror.put(path, body);
    mirror.put(&format!("{dir}/{sum_name}"), sum.into_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_is_deterministic_and_incompressible_enough() {
        assert_eq!(filler(3, 100), filler(3, 100));
        assert_ne!(filler(3, 100), filler(4, 100));
        let f = filler(9, 1 << 16);
        let distinct = f.iter().collect::<std::collections::BTreeSet<_>>().len();
        assert!(distinct > 250, "{distinct} distinct byte values");
    }

    #[test]
    fn checksum_files_use_upstream_names() {
        assert_eq!(checksum_file("kubeadm", "ab").0, "kubeadm.sha256");
        assert_eq!(
            checksum_file("runc.amd64", "ab"),
            ("runc.sha256sum".into(), "ab  runc.amd64\n".into())
        );
        assert_eq!(
            checksum_file("containerd-1.7.13-linux-amd64.tar.gz", "ab").0,
            "containerd-1.7.13-linux-amd64.tar.gz.sha256sum"
        );
        assert_eq!(
            checksum_file("cni-plugins-linux-amd64-v1.3.0.tgz", "ab").0,
            "cni-plugins-linux-amd64-v1.3.0.tgz.sha256"
        );
    }

    #[test]
    fn padded_scripts_stop_before_the_filler() {
        let b = padded("#!/bin/sh\nexit 0\n", 1, 4096);
        let text_end = b.windows(7).position(|w| w == b"exit 0\n").unwrap();
        assert!(text_end < 64);
        assert_eq!(b.len(), "#!/bin/sh\nexit 0\n".len() + 46 + 4096);
    }
}
