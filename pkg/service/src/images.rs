//! The image pre-pull: the images `kubeadm init/join` would pull, pulled into containerd while the node's other
//! work goes on, so that kubeadm finds them present and pulls nothing.
//!
//! The host's kubeadm (the Machine's version, installed by [`crate::binary`]) lists the images for the version
//! and image repository (`kubeadm config images list`), and crictl pulls each one through containerd's CRI (the
//! same path and registry configuration, `hosts.toml` with mirrors and credentials, as kubeadm's own pulls).
//! A control plane gets every image kubeadm lists; a worker, whose `kubeadm join` pulls nothing, gets
//! kube-proxy (the kubelet pulls it first); both get containerd's sandbox image when one is configured.
//!
//! The images are pulled [`LANES`] at a time, in kubeadm's order. The pull is an optimisation: callers never
//! fail provisioning on its result. It is one journaled step (`image-prepull`, one output line per image with
//! the host's clock) bounded by [`PrepullConfig::timeout`], each image's pull by
//! [`PrepullConfig::pull_timeout`].

use std::time::Duration;

use capkk_executor::Executor;
use tracing::instrument;

use crate::{
    Error, Result,
    facts::script::Script,
    host::{Vars, tpl},
    journal::{Progress, Redactor},
};

/// The journal step name of the pre-pull.
pub const STEP: &str = "image-prepull";

/// How many images are pulled at a time. A control plane needs about eight (kubeadm's seven and the sandbox
/// image), a worker two. One at a time leaves the link idle while an image unpacks and makes the last image
/// wait for every other; all at once makes every image share the host's CPUs (unpacking layers is CPU work,
/// and the host runs the OS packages' transaction and then kubeadm alongside) and arrive late, while kubeadm
/// takes them in its list order. Three gets a control plane's images through in about three rounds, the
/// first ones kubeadm wants first.
pub const LANES: usize = 3;

/// Which of kubeadm's images the node needs before kubeadm runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageSet {
    /// Every image kubeadm lists (init and control-plane join pull them all first).
    ControlPlane,
    /// kube-proxy only (a worker's join pulls nothing; the kubelet then pulls kube-proxy).
    Worker,
}

/// Inputs of [`prepull`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepullConfig {
    /// The Kubernetes version (`Machine.spec.version`).
    pub kubernetes_version: String,
    /// kubeadm's `imageRepository` (`None`: kubeadm's default).
    pub image_repository: Option<String>,
    /// Which images.
    pub images: ImageSet,
    /// containerd's sandbox image (`containerManager.sandboxImage`), pulled too when set.
    pub sandbox_image: Option<String>,
    /// Bound on one image's pull (on the host).
    pub pull_timeout: Duration,
    /// Bound on the whole step.
    pub timeout: Duration,
}

/// An image repository or reference (`host[:port][/path][:tag][@digest]`): letters, digits and `._/:@+-`,
/// starting with a letter or digit, at most 512 bytes (the CRD's pattern for images).
fn valid_image_ref(s: &str) -> bool {
    s.len() <= 512
        && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/:@+-".contains(&b))
}

/// Every value that reaches the host, checked: the version as the binary service checks it, the repository
/// (it may come from bootstrap data, which no CRD validates) and the sandbox image as image references.
pub fn check_input(cfg: &PrepullConfig) -> Result<()> {
    crate::binary::check_version("spec.version", &cfg.kubernetes_version)?;
    for (field, v) in [
        ("ClusterConfiguration.imageRepository", &cfg.image_repository),
        ("spec.containerManager.sandboxImage", &cfg.sandbox_image),
    ] {
        if let Some(v) = v.as_deref().filter(|v| !valid_image_ref(v)) {
            return Err(Error::InvalidInput {
                field: field.into(),
                message: format!("{v:?} is not an image reference (letters, digits, '._/:@+-')"),
            });
        }
    }
    Ok(())
}

/// The pre-pull as a one-step script (pure; the golden rendering uses it). `cfg` must have passed
/// [`check_input`].
pub fn prepull_script(cfg: &PrepullConfig) -> Script {
    let only = match cfg.images {
        ImageSet::ControlPlane => "",
        ImageSet::Worker => "kube-proxy",
    };
    let mut s = Script::new();
    s.step(
        STEP,
        Vars::new()
            .var("VERSION", &cfg.kubernetes_version)
            .var("REPOSITORY", cfg.image_repository.as_deref().unwrap_or_default())
            .var("ONLY", only)
            .var("EXTRA", cfg.sandbox_image.as_deref().unwrap_or_default())
            .var("PULL_TIMEOUT", cfg.pull_timeout.as_secs().max(1).to_string())
            .var("LANES", LANES.to_string())
            .render(tpl::IMAGE_PREPULL),
    );
    s
}

/// Pull the images `cfg` names into containerd on `exec` (one exec, journaled as [`STEP`]); returns the step's
/// output (one line per image). An error means some image is not pulled (or the input was refused, or the step
/// ran past its bound): the caller goes on and kubeadm pulls what is missing.
#[instrument(skip_all, fields(host = %exec.target(), version = %cfg.kubernetes_version))]
pub async fn prepull(
    exec: &dyn Executor,
    cfg: &PrepullConfig,
    phase: &str,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<String> {
    check_input(cfg)?;
    let out = prepull_script(cfg)
        .run(exec, phase, progress, redactor, cfg.timeout)
        .await?;
    Ok(out
        .records
        .into_iter()
        .map(|r| r.output_tail)
        .collect::<Vec<_>>()
        .join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PrepullConfig {
        PrepullConfig {
            kubernetes_version: "v1.36.3".into(),
            image_repository: Some("198.18.0.1:5000".into()),
            images: ImageSet::ControlPlane,
            sandbox_image: Some("198.18.0.1:5000/pause:3.10.1".into()),
            pull_timeout: Duration::from_secs(120),
            timeout: Duration::from_secs(300),
        }
    }

    #[test]
    fn a_repository_or_sandbox_image_that_could_break_out_of_quoting_is_refused_naming_its_field() {
        assert!(check_input(&cfg()).is_ok());
        let mut c = cfg();
        c.image_repository = Some("reg.example/$(reboot)".into());
        let e = check_input(&c).unwrap_err().to_string();
        assert!(e.contains("ClusterConfiguration.imageRepository"), "{e}");
        let mut c = cfg();
        c.sandbox_image = Some("pause:3.10 'x'".into());
        let e = check_input(&c).unwrap_err().to_string();
        assert!(e.contains("spec.containerManager.sandboxImage"), "{e}");
        let mut c = cfg();
        c.kubernetes_version = "v1.36;id".into();
        assert!(check_input(&c).is_err());
    }

    #[test]
    fn a_worker_keeps_only_kube_proxy_and_a_control_plane_every_image() {
        let cp = prepull_script(&cfg()).render();
        assert!(
            cp.contains(&format!("\nONLY={}\n", capkk_executor::quote(""))),
            "{cp}"
        );
        let w = prepull_script(&PrepullConfig {
            images: ImageSet::Worker,
            ..cfg()
        })
        .render();
        assert!(w.contains("\nONLY=kube-proxy\n"), "{w}");
        assert!(w.contains("\nEXTRA=198.18.0.1:5000/pause:3.10.1\n"), "{w}");
    }

    /// A scratch directory with `bin/` for stand-in commands and the path of their pull log.
    fn stand_in_dir() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let log = dir.path().join("pulls");
        (dir, bin, log)
    }

    /// An executable `sh` script `name` in `bin`.
    fn stand_in(bin: &std::path::Path, name: &str, body: &str) {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
        std::process::Command::new("chmod")
            .args(["755", p.to_str().unwrap()])
            .status()
            .unwrap();
    }

    /// The script against stand-ins for kubeadm and crictl (a real shell): a control plane pulls every listed
    /// image and the sandbox image, skips what is present, and reports a failed image without hiding the rest.
    #[test]
    fn the_script_pulls_what_is_missing_and_reports_each_image_with_the_host_clock() {
        let (_dir, bin, log) = stand_in_dir(); // kept: the directory lives as long as the test
        let write = |name: &str, body: String| stand_in(&bin, name, &body);
        write(
            "kubeadm",
            "[ \"$1 $2 $3\" = 'config images list' ] || exit 9\n\
             r=registry.k8s.io; [ \"$6\" = --image-repository ] && r=$7\n\
             for i in kube-apiserver:$5 kube-proxy:$5 etcd:3.6.8-0; do echo \"$r/$i\"; done\n"
                .into(),
        );
        write(
            "crictl",
            format!(
                "case \"$1\" in inspecti) case \"$2\" in */etcd:*) exit 0;; esac; exit 1;;\n\
                 pull) case \"$2\" in */kube-apiserver:*) echo 'not found' >&2; exit 1;; esac; echo \"$2\" >> {}; echo pulled;;\n\
                 esac\n",
                log.display()
            ),
        );
        let script = prepull_script(&cfg()).render();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("@@capkk end image-prepull 1 "),
            "a failed image fails the step: {stdout}"
        );
        let pulled = std::fs::read_to_string(&log).unwrap();
        let mut pulled: Vec<&str> = pulled.lines().collect();
        pulled.sort_unstable();
        assert_eq!(
            pulled,
            [
                "198.18.0.1:5000/kube-proxy:v1.36.3",
                "198.18.0.1:5000/pause:3.10.1"
            ],
            "{stdout}"
        );
        let line = |what: &str| {
            stdout
                .lines()
                .find(|l| l.contains(what))
                .unwrap_or_else(|| panic!("no line with {what:?}: {stdout}"))
                .to_owned()
        };
        let pulled_line = line("pulled 198.18.0.1:5000/kube-proxy:v1.36.3 in ");
        let host_ms: u64 = pulled_line.split(' ').next().unwrap().parse().unwrap();
        assert!(host_ms > 1_700_000_000_000, "{pulled_line}");
        assert!(line("present 198.18.0.1:5000/etcd:3.6.8-0").len() > 10);
        assert!(line("failed 198.18.0.1:5000/kube-apiserver:v1.36.3 after ").ends_with(": not found"));
        assert!(stdout.contains("1 image(s) not pulled: kubeadm pulls them itself"));
    }

    /// Pulls run [`LANES`] at a time: the stand-in crictl holds each pull until three are under way (a pull
    /// left alone fails after a few seconds), and logs each pull's start and end.
    #[test]
    fn the_script_pulls_three_images_at_a_time_taking_them_in_kubeadms_order() {
        assert_eq!(LANES, 3, "the stand-in below waits for three pulls");
        let (_dir, bin, log) = stand_in_dir(); // kept: the directory lives as long as the test
        let write = |name: &str, body: String| stand_in(&bin, name, &body);
        write(
            "kubeadm",
            "for i in kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd; do\n\
             echo \"$7/$i:$5\"; done\n"
                .into(),
        );
        write(
            "crictl",
            format!(
                "log={log}\n\
                 case \"$1\" in inspecti) case \"$2\" in */etcd:*) exit 0;; esac; exit 1;; esac\n\
                 echo \"+ $2\" >>\"$log\"\n\
                 n=0; while [ \"$(grep -c '^+' \"$log\")\" -lt 3 ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done\n\
                 [ \"$(grep -c '^+' \"$log\")\" -ge 3 ] || {{ echo 'pulled alone' >&2; exit 1; }}\n\
                 echo \"- $2\" >>\"$log\"\n",
                log = log.display()
            ),
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(prepull_script(&cfg()).render())
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("@@capkk end image-prepull 0 "),
            "every image pulled: {stdout}"
        );
        let log = std::fs::read_to_string(&log).unwrap();
        let (mut running, mut most) = (0, 0);
        for l in log.lines() {
            running += if l.starts_with('+') { 1 } else { -1 };
            most = most.max(running);
        }
        assert_eq!(most, 3, "three pulls at a time, never more: {log}");
        let mut first: Vec<&str> = log.lines().take(3).collect();
        first.sort_unstable();
        let r = "198.18.0.1:5000";
        assert_eq!(
            first,
            [
                format!("+ {r}/kube-apiserver:v1.36.3"),
                format!("+ {r}/kube-controller-manager:v1.36.3"),
                format!("+ {r}/kube-scheduler:v1.36.3"),
            ],
            "the first three kubeadm lists start first: {log}"
        );
        assert_eq!(log.lines().filter(|l| l.starts_with('+')).count(), 5, "{log}");
        // One line per image, ordered by the host clock at its start.
        let starts: Vec<u64> = stdout
            .lines()
            .filter(|l| l.contains(" pulled ") || l.contains(" present "))
            .map(|l| l.split(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(starts.len(), 6, "{stdout}");
        assert!(starts.is_sorted(), "{stdout}");
    }
}
