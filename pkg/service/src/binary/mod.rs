//! The binary service: Kubernetes binaries (kubeadm, kubelet, kubectl) and CNI plugins, verified by SHA-256,
//! downloaded once into a controller-side cache ([`ArtifactCache`]) or directly by the host, uploaded only when
//! the host lacks the exact file, installed into the standard paths, plus the kubelet systemd unit and the
//! kubeadm drop-in.
//!
//! Round trips for [`ensure`]: one probe exec (digests of installed files, unit files, kubelet enablement), one
//! upload per missing artifact, one exec running the batched install script. A run with nothing to do is the
//! probe exec alone: it uploads nothing (`bytes_uploaded == 0`) and changes nothing. See [`catalogue`] for
//! URLs, checksums and install paths.
//!
//! Guarantees: every artifact is verified before anything is installed (on the controller before upload, and
//! again on the host after upload or host download); a mismatch fails with [`Error::ChecksumMismatch`] and
//! leaves the installed files untouched (staged files are removed).

pub mod cache;
pub mod catalogue;
pub mod policy;

use std::{collections::BTreeMap, time::Duration};

use capkk_executor::{ExecRequest, Executor, PutRequest};
use tracing::instrument;

pub use cache::{ArtifactCache, check_sha256, strip_userinfo};
pub use catalogue::{
    Artifact, ArtifactOverride, ArtifactRequest, ChecksumSource, ComponentSource, DownloadOn, Install,
    resolve,
};
pub use policy::{AllowEntry, Cidr, DownloadPolicy};

use crate::{
    Error, Result,
    facts::{
        HostFacts,
        script::{ExpectedFile, Script, file_probe, files_match, put_file},
    },
    host::{Vars, tpl},
    journal::{Progress, Redactor, StepRecord, StepRunner},
};

/// kubelet unit path.
pub const KUBELET_UNIT: &str = "/etc/systemd/system/kubelet.service";
/// kubeadm drop-in path.
pub const KUBELET_DROPIN: &str = "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf";

/// Inputs of [`ensure`] (the controller maps them from KKCluster/KKMachine/Machine).
#[derive(Clone, Debug, Default)]
pub struct BinaryConfig {
    /// `Machine.spec.version`, e.g. `v1.32.0`.
    pub kubernetes_version: String,
    /// Declared arch (`amd64`/`arm64`); checked against the host.
    pub arch: String,
    /// CNI plugins version (default [`catalogue::DEFAULT_CNI_VERSION`]); `Some("")` skips CNI plugins.
    pub cni_version: Option<String>,
    /// Download sources, overrides and `downloadOn`.
    pub source: ComponentSource,
    /// `--node-ip` for the kubelet drop-in, when known.
    pub node_ip: Option<String>,
    /// `--hostname-override` for the kubelet drop-in, when set.
    pub node_name: Option<String>,
}

/// What [`ensure`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BinaryOutcome {
    /// Bytes sent to the host by uploads (0 when everything was already in place).
    pub bytes_uploaded: u64,
    /// Artifacts uploaded from the controller cache.
    pub uploaded: Vec<String>,
    /// Artifacts the host downloaded itself.
    pub host_downloaded: Vec<String>,
    /// Artifacts already installed with the expected digest.
    pub unchanged: Vec<String>,
    /// True when anything on the host changed (files, units).
    pub changed: bool,
}

/// Install the Kubernetes binaries, CNI plugins, kubelet unit and drop-in.
#[instrument(skip_all, fields(host = %exec.target(), version = %cfg.kubernetes_version))]
pub async fn ensure(
    exec: &dyn Executor,
    cfg: &BinaryConfig,
    facts: &HostFacts,
    cache: &ArtifactCache,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<BinaryOutcome> {
    facts.check_arch(&cfg.arch)?;
    facts.init.require_systemctl()?;
    if cfg.kubernetes_version.trim().is_empty() {
        return Err(Error::InvalidInput {
            field: "spec.version".into(),
            message: "the Kubernetes version is empty".into(),
        });
    }
    check_version("spec.version", &cfg.kubernetes_version)?;
    if let Some(v) = cfg.cni_version.as_deref().filter(|v| !v.is_empty()) {
        check_version("cni version", v)?;
    }
    if let Some(ip) = cfg.node_ip.as_deref().filter(|v| !v.is_empty())
        && ip.parse::<std::net::IpAddr>().is_err()
    {
        return Err(Error::InvalidInput {
            field: "spec.nodes.instances[].internalAddress".into(),
            message: format!("{ip:?} is not an IP address (it becomes kubelet --node-ip)"),
        });
    }
    if let Some(n) = cfg.node_name.as_deref().filter(|v| !v.is_empty())
        && !crate::bootstrap::valid_hostname(n)
    {
        return Err(Error::InvalidInput {
            field: "spec.nodes.instances[].name".into(),
            message: format!("{n:?} is not a valid host name (it becomes kubelet --hostname-override)"),
        });
    }
    let mut requests: Vec<ArtifactRequest> = ["kubeadm", "kubelet", "kubectl"]
        .iter()
        .map(|id| ArtifactRequest::new(id, &cfg.kubernetes_version, &facts.arch))
        .collect();
    let cni = cfg
        .cni_version
        .clone()
        .unwrap_or_else(|| catalogue::DEFAULT_CNI_VERSION.into());
    if !cni.trim().is_empty() {
        requests.push(ArtifactRequest::new("cni", &cni, &facts.arch));
    }
    let artifacts = requests
        .iter()
        .map(|r| resolve(r, &cfg.source))
        .collect::<Result<Vec<_>>>()?;
    // The probe also checks the unit files and the enablement, so a run with nothing to do is one exec.
    let files = kubelet_files(cfg);
    let extra = format!("{}{}", file_probe(&files), tpl::KUBELET_PROBE);
    let (staged, probe_out) = stage(
        exec,
        &artifacts,
        cfg.source.download_on,
        cache,
        "binary",
        progress,
        redactor,
        &extra,
    )
    .await?;
    let outcome = BinaryOutcome {
        bytes_uploaded: staged.bytes_uploaded,
        uploaded: staged.uploaded.clone(),
        host_downloaded: staged.host_downloaded.clone(),
        unchanged: staged.unchanged.clone(),
        changed: false,
    };
    if staged.script.is_empty()
        && files_match(&probe_out, &files)
        && probe_out.lines().any(|l| l == "@@enabled")
    {
        StepRunner {
            exec,
            progress,
            redactor,
            phase: "binary",
        }
        .record_skip(
            "kubelet-unit",
            "kubelet unit and drop-in up to date, kubelet enabled",
        );
        return Ok(outcome);
    }
    let mut script = staged.script.clone();
    script.step("kubelet-unit", kubelet_unit_step(cfg));
    let run = script
        .run(exec, "binary", progress, redactor, Duration::from_secs(900))
        .await?;
    Ok(BinaryOutcome {
        changed: run.any_changed(),
        ..outcome
    })
}

/// The kubelet unit file (`pkg/service/host/units/kubelet.service`).
pub fn kubelet_unit() -> String {
    tpl::KUBELET_UNIT.to_owned()
}

/// The kubeadm drop-in (`pkg/service/host/units/10-kubeadm.conf`: the standard kubeadm flags) plus capkk's
/// own `--node-ip`/`--hostname-override`, appended as `KUBELET_CAPKK_ARGS` (the order of `Environment=` lines
/// does not matter to systemd).
///
/// capkk's flags travel in their own variable, `KUBELET_CAPKK_ARGS`, placed before `KUBELET_KUBEADM_ARGS` and
/// `KUBELET_EXTRA_ARGS` on the command line. Two reasons: systemd lets every `EnvironmentFile=` override every
/// `Environment=` regardless of their order, so a `/etc/default/kubelet` setting `KUBELET_EXTRA_ARGS` (as
/// distro packages and users do) would silently drop `--node-ip` if capkk used that variable; and the kubelet
/// keeps the last value of a repeated flag, so a node IP the user sets through kubeadm's `kubeletExtraArgs` or
/// `/etc/default/kubelet` still wins over capkk's default.
pub fn kubelet_dropin(node_ip: Option<&str>, node_name: Option<&str>) -> String {
    let mut extra = Vec::new();
    if let Some(ip) = node_ip.filter(|s| !s.is_empty()) {
        extra.push(format!("--node-ip={ip}"));
    }
    if let Some(n) = node_name.filter(|s| !s.is_empty()) {
        extra.push(format!("--hostname-override={n}"));
    }
    let mut s = tpl::KUBELET_DROPIN.to_owned();
    if !extra.is_empty() {
        s.push_str(&format!(
            "Environment=\"KUBELET_CAPKK_ARGS={}\"\n",
            extra.join(" ")
        ));
    }
    s
}

fn kubelet_files(cfg: &BinaryConfig) -> [ExpectedFile; 2] {
    [
        ExpectedFile::new(KUBELET_UNIT, 0o644, kubelet_unit().as_bytes()),
        ExpectedFile::new(
            KUBELET_DROPIN,
            0o644,
            kubelet_dropin(cfg.node_ip.as_deref(), cfg.node_name.as_deref()).as_bytes(),
        ),
    ]
}

pub(crate) fn kubelet_unit_step(cfg: &BinaryConfig) -> String {
    let mut s = put_file(KUBELET_UNIT, 0o644, kubelet_unit().as_bytes());
    s.push_str(&put_file(
        KUBELET_DROPIN,
        0o644,
        kubelet_dropin(cfg.node_ip.as_deref(), cfg.node_name.as_deref()).as_bytes(),
    ));
    Vars::new().raw(&s).render(tpl::KUBELET_SERVICE)
}

/// The result of [`stage`]: uploads done, and a script (verify + install steps) still to run.
#[derive(Clone, Debug, Default)]
pub struct Staged {
    /// Verify/download/install steps; empty when everything is in place. Callers append their own steps and
    /// run it once.
    pub script: Script,
    /// Bytes uploaded.
    pub bytes_uploaded: u64,
    /// Labels of uploaded artifacts.
    pub uploaded: Vec<String>,
    /// Labels of artifacts the host will download.
    pub host_downloaded: Vec<String>,
    /// Labels of artifacts already installed.
    pub unchanged: Vec<String>,
}

/// `version` when it has the shape of a version (`^v?[0-9][0-9A-Za-z.+-]{0,63}$`, the CRD pattern), else
/// [`Error::InvalidInput`] naming `field`. Versions become file names, URLs and script variables.
pub fn check_version(field: &str, version: &str) -> Result<()> {
    let v = version.strip_prefix('v').unwrap_or(version);
    let ok = v.len() <= 64
        && v.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".+-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidInput {
            field: field.to_owned(),
            message: format!(
                "{version:?} is not a version (digits first, then letters, digits, '.', '+', '-')"
            ),
        })
    }
}

/// Resolve the expected digest of `a` (fetching a checksum file through `cache` when needed); always 64
/// lower-case hex digits.
pub async fn expected_sha256(a: &Artifact, cache: &ArtifactCache) -> Result<String> {
    match &a.checksum {
        ChecksumSource::Value(v) => check_sha256(
            &format!("spec.component.overrides[id={}].checksum.value", a.id),
            v,
        ),
        ChecksumSource::File { url, file_name } => {
            let field = format!("spec.component.overrides[id={}].checksum.path", a.id);
            let text = cache.fetch_text(url, &field).await?;
            let sha =
                catalogue::parse_checksum_file(&text, file_name).ok_or_else(|| Error::InvalidInput {
                    field: field.clone(),
                    message: format!(
                        "checksum file {} has no SHA-256 for {file_name}",
                        strip_userinfo(url)
                    ),
                })?;
            check_sha256(&field, &sha)
        }
        ChecksumSource::Published { url, file_name } => {
            let pin = format!(
                "pin it with spec.component.overrides[] (id {}, version {}, checksum.value)",
                a.id, a.version
            );
            let text = cache.fetch_text(url, &a.url_field).await.map_err(|e| match e {
                Error::Download { url, message } => Error::Download {
                    message: format!(
                        "{message}: no published checksum for {} (a mirror must serve upstream's checksum files \
                         next to the artifacts); {pin}",
                        a.label()
                    ),
                    url,
                },
                other => other,
            })?;
            catalogue::parse_checksum_file(&text, file_name).ok_or_else(|| Error::InvalidInput {
                field: format!("spec.component.overrides[id={}].checksum", a.id),
                message: format!(
                    "published checksum file {} has no SHA-256 for {file_name}; {pin}",
                    strip_userinfo(url)
                ),
            })
        }
    }
}

fn staged_path(sha: &str) -> String {
    format!("{}/{sha}", catalogue::STAGING_DIR)
}

/// Probe the host for `artifacts`, get missing ones onto it (upload from the cache, or plan a host download)
/// and return the verify/install script. `extra_probe` is appended to the probe exec; its output is returned.
#[allow(clippy::too_many_arguments)]
pub async fn stage(
    exec: &dyn Executor,
    artifacts: &[Artifact],
    download_on: DownloadOn,
    cache: &ArtifactCache,
    phase: &str,
    progress: &dyn Progress,
    redactor: &Redactor,
    extra_probe: &str,
) -> Result<(Staged, String)> {
    let (staged, extra, _) = stage_gated(
        exec,
        artifacts,
        download_on,
        cache,
        phase,
        progress,
        redactor,
        extra_probe,
        |_| Ok(true),
    )
    .await?;
    Ok((staged, extra))
}

/// Like [`stage`], but `gate` sees the output of `extra_probe` (same exec as the artifact probe) before
/// anything is downloaded or uploaded: `Ok(false)` stops there (returns an empty [`Staged`] and `false`), an
/// error is returned as is.
#[allow(clippy::too_many_arguments)]
pub async fn stage_gated(
    exec: &dyn Executor,
    artifacts: &[Artifact],
    download_on: DownloadOn,
    cache: &ArtifactCache,
    phase: &str,
    progress: &dyn Progress,
    redactor: &Redactor,
    extra_probe: &str,
    gate: impl FnOnce(&str) -> Result<bool>,
) -> Result<(Staged, String, bool)> {
    // 1. Expected digests (fails before touching the host when a checksum is unknown).
    let mut expected = Vec::with_capacity(artifacts.len());
    for a in artifacts {
        expected.push(expected_sha256(a, cache).await?);
    }
    // 2. One probe exec: installed digests / stamps, plus the caller's probe.
    let probe = probe_script(artifacts, extra_probe);
    let runner = StepRunner {
        exec,
        progress,
        redactor,
        phase,
    };
    let out = runner
        .run(
            "probe-artifacts",
            ExecRequest::new("sh -s")
                .sudo()
                .stdin(probe)
                .timeout(Duration::from_secs(120)),
        )
        .await?;
    let text = out.stdout_str();
    let (arts, extra) = text.split_once("@@extra\n").unwrap_or((&text, ""));
    let installed: BTreeMap<&str, &str> = arts
        .lines()
        .filter_map(|l| l.strip_prefix("@@art:"))
        .filter_map(|l| l.split_once('='))
        .collect();
    if !gate(extra)? {
        return Ok((Staged::default(), extra.to_owned(), false));
    }
    // 3. Which are missing.
    let mut staged = Staged::default();
    let mut needed: Vec<(&Artifact, &str)> = Vec::new();
    for (a, sha) in artifacts.iter().zip(&expected) {
        if installed.get(a.id.as_str()).map(|h| h.trim()) == Some(sha.as_str()) {
            staged.unchanged.push(a.label());
            runner.record_skip(
                &format!("artifact-{}", a.id),
                &format!("{} already installed ({sha})", a.label()),
            );
        } else {
            needed.push((a, sha));
        }
    }
    if needed.is_empty() {
        return Ok((staged, extra.to_owned(), true));
    }
    // 4. Get them onto the host.
    match download_on {
        DownloadOn::Controller => {
            // Everything is fetched and verified before the first upload: a bad artifact uploads nothing.
            let mut local = Vec::new();
            for (a, sha) in &needed {
                local.push(cache.fetch(&a.url, &a.url_field, sha, &a.label()).await?);
            }
            for ((a, sha), path) in needed.iter().zip(local) {
                let start = std::time::Instant::now();
                let dest = staged_path(sha);
                let sent = exec
                    .put(PutRequest::file(&dest, &path, 0o600).timeout_secs(1800))
                    .await
                    .map_err(|e| Error::exec(format!("{phase}/upload-{}", a.id), e))?;
                staged.bytes_uploaded += sent;
                staged.uploaded.push(a.label());
                progress.step_finished(&StepRecord {
                    phase: phase.to_owned(),
                    name: format!("upload-{}", a.id),
                    exit_code: None,
                    duration: start.elapsed(),
                    output_tail: format!("{} bytes of {} to {dest}", sent, a.label()),
                    skipped: false,
                    host_finished_ms: None,
                });
            }
        }
        DownloadOn::Host => {
            staged.host_downloaded = needed.iter().map(|(a, _)| a.label()).collect();
        }
    }
    install_steps(&mut staged.script, &needed, download_on);
    Ok((staged, extra.to_owned(), true))
}

/// The probe exec's script: `@@art:<id>=<digest or stamp>` per artifact, `@@extra`, then `extra_probe`.
pub(crate) fn probe_script(artifacts: &[Artifact], extra_probe: &str) -> String {
    let args = artifacts.iter().flat_map(|a| match &a.install {
        Install::Binary { dest, .. } => ["binary".to_owned(), a.id.clone(), dest.clone()],
        Install::Archive { probe, .. } => ["archive".to_owned(), a.id.clone(), probe.clone()],
    });
    let mut s = Vars::new()
        .var("STAMPS", catalogue::STAMP_DIR)
        .args(args)
        .render(tpl::ART_PROBE);
    s.push_str("echo '@@extra'\n");
    s.push_str(extra_probe);
    s.push_str("\ntrue\n");
    s
}

/// Append the download and verify steps (host mode) and the install steps for `needed` (artifact, expected
/// digest).
///
/// Each artifact is hashed once, where it is downloaded. The host verifies what it downloaded itself; what
/// the controller uploads it verified while downloading (the cache stores only a file whose digest matched),
/// SSH's integrity check covers the transfer, and the upload is written to a temporary file and renamed, so
/// the staged file is whole: hashing it again on the host (seconds of CPU for kubelet and containerd on a
/// small node) would find nothing new.
pub(crate) fn install_steps(script: &mut Script, needed: &[(&Artifact, &str)], download_on: DownloadOn) {
    if download_on == DownloadOn::Host {
        let args = needed
            .iter()
            .flat_map(|(a, sha)| [a.label(), a.url.clone(), staged_path(sha)]);
        script.step(
            "download-artifacts",
            Vars::new()
                .var("STAGING", catalogue::STAGING_DIR)
                .args(args)
                .render(tpl::ART_DOWNLOAD),
        );
        // Verify every downloaded file before installing any.
        let args = needed.iter().flat_map(|(a, sha)| {
            [
                staged_path(sha),
                (*sha).to_owned(),
                format!("{} from {}", a.label(), strip_userinfo(&a.url)),
            ]
        });
        script.step("verify-artifacts", Vars::new().args(args).render(tpl::ART_VERIFY));
    }
    for (a, sha) in needed {
        let f = staged_path(sha);
        let body = match &a.install {
            Install::Binary { dest, mode } => Vars::new()
                .var("F", &f)
                .var("DEST", dest)
                .var("MODE", format!("{mode:o}"))
                .render(tpl::INSTALL_BINARY),
            Install::Archive { dir, probe } => Vars::new()
                .var("F", &f)
                .var("DIR", dir)
                .var("PROBE", probe)
                .var("SHA", sha)
                .var("STAMPS", catalogue::STAMP_DIR)
                .var("ID", &a.id)
                .var("LABEL", a.label())
                .render(tpl::INSTALL_ARCHIVE),
        };
        script.step(format!("install-{}", a.id), body);
    }
}

trait PutTimeout {
    fn timeout_secs(self, secs: u64) -> Self;
}

impl PutTimeout for PutRequest {
    fn timeout_secs(mut self, secs: u64) -> Self {
        self.timeout = Duration::from_secs(secs);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mirror on 127.0.0.1 that answers every request with `body` (cache.rs's test mirror).
    async fn mirror(body: &'static str) -> String {
        let (addr, _) = super::cache::tests::counting_mirror("127.0.0.1", body.as_bytes()).await;
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_published_checksum_file_without_the_artifact_is_reported_without_the_urls_userinfo() {
        // Two entries, neither for kubeadm (a file of one entry is taken as the artifact's own).
        let base = mirror(concat!(
            "0000000000000000000000000000000000000000000000000000000000000000  kubelet\n",
            "1111111111111111111111111111111111111111111111111111111111111111  kubectl\n",
        ))
        .await;
        let with_user = base.replace("http://", "http://mirror-user:hunter2-pass@");
        let dir = tempfile::tempdir().unwrap();
        // The test mirror listens on loopback, which the manager allows only when the operator opts in.
        let cache = ArtifactCache::new(dir.path().join("cache")).unwrap();
        cache.set_download_policy(DownloadPolicy {
            allow_loopback: true,
            ..DownloadPolicy::default()
        });
        let artifact = Artifact {
            id: "kubeadm".into(),
            version: "v1.32.0".into(),
            arch: "amd64".into(),
            url: format!("{with_user}/kubeadm"),
            url_field: "spec.component.host".into(),
            checksum: ChecksumSource::Published {
                url: format!("{with_user}/kubeadm.sha256"),
                file_name: "kubeadm".into(),
            },
            install: Install::Binary {
                dest: "/usr/local/bin/kubeadm".into(),
                mode: 0o755,
            },
        };
        let err = expected_sha256(&artifact, &cache)
            .await
            .expect_err("the file lists no kubeadm");
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(shown.contains("has no SHA-256 for kubeadm"), "{shown}");
            assert!(
                !shown.contains("hunter2-pass") && !shown.contains("mirror-user"),
                "userinfo reaches the condition: {shown}"
            );
        }
    }

    #[test]
    fn dropin_carries_node_ip_and_name() {
        let d = kubelet_dropin(Some("10.0.0.5"), Some("n1"));
        assert!(d.contains("KUBELET_CAPKK_ARGS=--node-ip=10.0.0.5 --hostname-override=n1"));
        assert!(d.contains("ExecStart=\nExecStart=/usr/local/bin/kubelet"));
        assert!(!kubelet_dropin(None, None).contains("KUBELET_CAPKK_ARGS="));
        assert!(kubelet_unit().contains("ExecStart=/usr/local/bin/kubelet\n"));
    }

    #[test]
    fn artifact_labels_and_urls_with_quotes_reach_the_host_only_as_quoted_arguments() {
        let dir = std::env::temp_dir().join(format!("capkk-label-inject-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pwned = dir.join("pwned");
        let evil = format!("1.0'; touch {}; echo '", pwned.display());
        let a = Artifact {
            id: "kubeadm".into(),
            version: evil.clone(),
            arch: "amd64".into(),
            // Port 9 on the loopback refuses at once: the download fails after the label was printed.
            url: format!("http://127.0.0.1:9/$(touch {})", pwned.display()),
            url_field: "spec.component.overrides[id=kubeadm].url".into(),
            checksum: ChecksumSource::Value("a".repeat(64)),
            install: Install::Archive {
                dir: dir.join("opt").display().to_string(),
                probe: dir.join("opt/bin").display().to_string(),
            },
        };
        let sha = "a".repeat(64);
        let mut s = Script::new();
        install_steps(&mut s, &[(&a, sha.as_str())], DownloadOn::Host);
        // Staged under the test's directory, not the machine's /var/lib/capkk.
        let text = s
            .render()
            .replace(catalogue::STAGING_DIR, &dir.join("staging").display().to_string());
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&text)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!pwned.exists(), "the label ran as code:\n{text}");
        assert!(
            stdout.contains(&format!("downloading kubeadm {evil} (amd64)")),
            "{stdout}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn versions_node_ips_and_names_that_are_not_what_they_claim_are_refused() {
        for bad in [
            "",
            "v",
            "-1.0",
            "1.0 ",
            "1.0;id",
            "1.0'",
            "$(id)",
            &"1".repeat(66),
        ] {
            assert!(check_version("f", bad).is_err(), "{bad:?}");
        }
        for good in ["v1.32.0", "1.7.13", "v1.30.0-rc.1+k3s1"] {
            assert!(check_version("f", good).is_ok(), "{good:?}");
        }
    }
}
