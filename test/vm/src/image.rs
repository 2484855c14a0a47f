//! The VM test-host image: Debian built with `mmdebstrap` from Debian packages, cached by content hash.
//!
//! The cache key is the SHA-256 of everything that decides the image's content: the build script
//! (`build-image.sh`), the suite and the package list. The Debian mirror is not part of it (any mirror serves
//! the same suite). A finished image is a directory `$CAPKK_CACHE/vm/image-<hash>` holding `base.qcow2`,
//! `vmlinuz`, `initrd.img`, the test-only client key `id_ed25519` and `packages.txt`, plus a `done` marker
//! written last; a build goes to a temp directory renamed into place, so a crashed build never looks finished
//! and two concurrent builders never share a half-written image.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use sha2::{Digest, Sha256};

use crate::{Result, VmError, require_tools};

const BUILD_SCRIPT: &str = include_str!("build-image.sh");

/// Debian packages of the image besides `--variant=minbase` (systemd as init, sshd, the kernel for direct boot
/// and what kubeadm's preflight and the kubelet expect of a node). Deliberately absent: conntrack, socat,
/// ebtables, ipset, ipvsadm, chrony — the repository service installs them with real apt from the test mirror.
pub const PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "udev",
    "openssh-server",
    "iproute2",
    "sudo",
    "ca-certificates",
    "kmod",
    "iptables",
    "ethtool",
    "procps",
    "curl",
    "linux-image-cloud-amd64",
    "initramfs-tools",
];

/// What to build.
#[derive(Clone, Debug)]
pub struct ImageSpec {
    /// Debian suite.
    pub suite: String,
    /// Debian mirror URL (`CAPKK_VM_DEBIAN_MIRROR`, default `http://deb.debian.org/debian`).
    pub mirror: String,
    /// Packages to include.
    pub packages: Vec<String>,
}

impl Default for ImageSpec {
    fn default() -> Self {
        Self {
            suite: "bookworm".into(),
            mirror: std::env::var("CAPKK_VM_DEBIAN_MIRROR")
                .unwrap_or_else(|_| "http://deb.debian.org/debian".into()),
            packages: PACKAGES.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// The Debian suite of a host OS name as the tests take it (`HOST_OS` of the make targets, `CAPKK_HOST_OS` in the
/// environment): `debian12` (the default, also when empty) or `debian13`.
pub fn host_os_suite(host_os: &str) -> crate::Result<&'static str> {
    match host_os {
        "" | "debian12" => Ok("bookworm"),
        "debian13" => Ok("trixie"),
        other => Err(crate::VmError::Invalid(format!(
            "HOST_OS={other:?}: debian12 (Debian 12 bookworm, the default) or debian13 (Debian 13 trixie)"
        ))),
    }
}

/// The suite of `CAPKK_HOST_OS` (node containers are built from it; the VM image stays bookworm).
pub fn host_os_suite_from_env() -> crate::Result<&'static str> {
    host_os_suite(&std::env::var("CAPKK_HOST_OS").unwrap_or_default())
}

impl ImageSpec {
    /// The content hash (first 16 hex digits of the SHA-256 of script, suite and packages).
    pub fn hash(&self) -> String {
        content_hash(BUILD_SCRIPT, &self.suite, &self.packages.join(","))
    }
}

/// First 16 hex digits of the SHA-256 of a build script, a suite and a package list: what decides an image.
pub(crate) fn content_hash(script: &str, suite: &str, packages: &str) -> String {
    let mut h = Sha256::new();
    h.update(script.as_bytes());
    h.update(b"\0");
    h.update(suite.as_bytes());
    h.update(b"\0");
    h.update(packages.as_bytes());
    hex::encode(h.finalize())[..16].to_owned()
}

/// A build cached by content hash: `<root>/image-<hash>/`, made by running `script` (`sh SCRIPT OUT ARGS...`)
/// into a temp dir renamed into place with a `done` marker written last, so a crashed build never looks
/// finished. One builder at a time per hash, across threads and processes (a file lock, released when this
/// returns). Returns the dir and the seconds the build took (0 when cached). `what` names it in errors.
pub(crate) fn build_cached(
    root: &Path,
    hash: &str,
    what: &str,
    script: &str,
    args: &[&str],
    tools: &[(&str, &str)],
) -> Result<(PathBuf, f64)> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| VmError::Io { path, source }
    };
    let dir = root.join(format!("image-{hash}"));
    if dir.join("done").exists() {
        return Ok((dir, 0.0));
    }
    // Fleets started at once (the tests of one binary run in parallel) used to build into the same directory
    // and clobber each other on a cold cache.
    fs::create_dir_all(root).map_err(io(root))?;
    let lock_path = root.join(format!("image-{hash}.lock"));
    let lock = fs::File::create(&lock_path).map_err(io(&lock_path))?;
    lock.lock().map_err(io(&lock_path))?;
    if dir.join("done").exists() {
        // Built by whoever held the lock before us.
        return Ok((dir, 0.0));
    }
    require_tools(tools)?;
    let tmp = root.join(format!("image-{hash}.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    let path = tmp.join("build.sh");
    fs::write(&path, script).map_err(io(&path))?;
    let start = Instant::now();
    let out = Command::new("sh")
        .arg(&path)
        .arg(&tmp)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(io(&path))?;
    if !out.status.success() {
        let _ = fs::remove_dir_all(&tmp);
        return Err(VmError::BuildImage(format!(
            "{what}: {}: {}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 30)
        )));
    }
    let build_secs = start.elapsed().as_secs_f64();
    let done = tmp.join("done");
    fs::write(&done, format!("build_secs={build_secs:.0}\n")).map_err(io(&done))?;
    let _ = fs::remove_dir_all(&dir);
    fs::rename(&tmp, &dir).map_err(io(&dir))?;
    Ok((dir, build_secs))
}

/// A finished image.
#[derive(Clone, Debug)]
pub struct Image {
    /// The content hash.
    pub hash: String,
    /// Its directory in the cache.
    pub dir: PathBuf,
    /// Seconds the build took (0 when it came from the cache).
    pub build_secs: f64,
}

impl Image {
    /// The qcow2 base every VM's overlay is backed by.
    pub fn base(&self) -> PathBuf {
        self.dir.join("base.qcow2")
    }
    /// The kernel for direct boot.
    pub fn kernel(&self) -> PathBuf {
        self.dir.join("vmlinuz")
    }
    /// The initrd for direct boot.
    pub fn initrd(&self) -> PathBuf {
        self.dir.join("initrd.img")
    }
    /// The test-only client key root's `authorized_keys` holds.
    pub fn private_key(&self) -> PathBuf {
        self.dir.join("id_ed25519")
    }
}

/// `$CAPKK_CACHE` (default `~/.cache/capkk-rs`).
pub fn cache_root() -> PathBuf {
    std::env::var_os("CAPKK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache/capkk-rs")
        })
}

/// The image for `spec`, built now unless the cache has it.
pub fn ensure_image(spec: &ImageSpec) -> Result<Image> {
    let hash = spec.hash();
    let (dir, build_secs) = build_cached(
        &cache_root().join("vm"),
        &hash,
        "VM image",
        BUILD_SCRIPT,
        &[&spec.suite, &spec.mirror, &spec.packages.join(",")],
        &[
            ("mmdebstrap", "mmdebstrap"),
            ("mkfs.ext4", "e2fsprogs"),
            ("qemu-img", "qemu-utils"),
            ("ssh-keygen", "openssh-client"),
        ],
    )?;
    Ok(Image {
        hash,
        dir,
        build_secs,
    })
}

/// The last `n` lines of `s`.
pub(crate) fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_os_names_map_to_their_debian_suite_and_others_are_refused_naming_the_choices() {
        assert_eq!(host_os_suite("").unwrap(), "bookworm");
        assert_eq!(host_os_suite("debian12").unwrap(), "bookworm");
        assert_eq!(host_os_suite("debian13").unwrap(), "trixie");
        assert!(
            host_os_suite("ubuntu24")
                .unwrap_err()
                .to_string()
                .contains("debian13")
        );
    }

    #[test]
    fn the_image_hash_changes_with_the_packages_but_not_with_the_mirror() {
        let a = ImageSpec::default();
        let mut b = a.clone();
        b.mirror = "http://other.example/debian".into();
        assert_eq!(a.hash(), b.hash());
        b.packages.push("vim".into());
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.hash().len(), 16);
    }
}
