//! Host services against real sandbox hosts (netns + overlay root + sshd, see `capkk-sandbox`) over the real
//! SSH client, with stand-in release artifacts served by a local HTTP mirror on the sandbox bridge.
//!
//! One sandbox (`svc-tests`, 12 hosts) is shared by the tests of this binary; each test owns its hosts:
//! 0 apt end to end + reset, 1 dnf host (non-root login with sudo), 2 checksum mismatches, 3 host-download
//! mode, 4+5 two hosts sharing one controller download, 6 ISO repository mode, 7 a pre-existing containerd
//! (login with a sudo password), 8 reset with volumes still mounted, 9 the rendering property test, 10 unpinned versions through
//! upstream-style published checksum files, 11 a host reused across Kubernetes versions. Fake package managers and kernel tools
//! (`test/assets/`) are put into each host's `/usr/local/sbin` so nothing reaches the network or changes the
//! machine's kernel state. Without root/sshd the tests fail naming what is missing (skipped only with CAPKK_ALLOW_SKIP=1).

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, OnceLock},
    time::Duration,
};

use capkk_executor::Executor;
use capkk_sandbox::{Host, NOPASSWD_USER, Sandbox, SandboxConfig, mirror::Mirror, skip_unless_supported};
use capkk_service::{
    Error,
    binary::{self, ArtifactCache, ArtifactOverride, BinaryConfig, ComponentSource, DownloadOn},
    bootstrap::{self, HostIdentity, OWNED_PATHS, ResetOptions},
    containermanager::{self, ContainerdConfig, RegistryAuth},
    facts::{self, HostFacts, OsFamily, PackageManager},
    journal::{RecordingProgress, Redactor},
    repository::{self, PackageSource, RepositoryConfig},
    upgrade,
};
use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, PoolConfig, SshPool};
use sha2::{Digest, Sha256};

const K8S: &str = "v1.32.0";
const CNI: &str = "v1.3.0";
const CRICTL: &str = "v1.29.0";
const CONTAINERD: &str = "1.7.13";
const RUNC: &str = "v1.1.12";

fn sandbox() -> Option<&'static Sandbox> {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    if skip_unless_supported() {
        return None;
    }
    Some(SB.get_or_init(|| Sandbox::shared(&SandboxConfig::new("svc-tests", 13)).expect("sandbox up")))
}

fn pool() -> &'static SshPool {
    static POOL: OnceLock<SshPool> = OnceLock::new();
    POOL.get_or_init(|| {
        SshPool::new(PoolConfig {
            connect_timeout: Duration::from_secs(10),
            ..Default::default()
        })
    })
}

fn executor(sb: &Sandbox, idx: usize, user: &str) -> Arc<dyn Executor> {
    let host = &sb.hosts()[idx];
    let target = HostTarget::new(
        host.address(),
        user,
        Auth::key_file(&sb.credentials().ed25519_key),
    )
    .host_key(HostKeyPolicy::pinned(host.fingerprint()));
    pool().executor(&target)
}

fn sh(host: &Host<'_>, script: &str) -> String {
    host.sh_inside(script)
        .unwrap_or_else(|e| panic!("inside {}: {e}", host.info.name))
}

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Put the fake package managers and kernel tools into the host's /usr/local/sbin and check that root's and
/// sudo's PATH pick them (so the real ones can never run).
async fn install_fakes(host: &Host<'_>, ex: &dyn Executor) {
    capkk_sandbox::assets::install(host, capkk_sandbox::assets::FAKES)
        .unwrap_or_else(|e| panic!("installing the fakes on {}: {e}", host.info.name));
    let out = ex
        .sudo(capkk_executor::ExecRequest::new(
            "for t in apt-get dpkg-query dnf rpm modprobe sysctl swapoff; do command -v $t; done",
        ))
        .await
        .unwrap();
    let resolved = out.stdout_str();
    for t in [
        "apt-get",
        "dpkg-query",
        "dnf",
        "rpm",
        "modprobe",
        "sysctl",
        "swapoff",
    ] {
        assert!(
            resolved.lines().any(|l| l == format!("/usr/local/sbin/{t}")),
            "{t} does not resolve to the fake: {resolved}"
        );
    }
}

/// Counts round trips (execs and uploads) through an executor.
struct Counting {
    inner: Arc<dyn Executor>,
    execs: std::sync::atomic::AtomicUsize,
    puts: std::sync::atomic::AtomicUsize,
}

impl Counting {
    fn new(inner: Arc<dyn Executor>) -> Self {
        Self {
            inner,
            execs: Default::default(),
            puts: Default::default(),
        }
    }

    /// (execs, puts) since the last call.
    fn take(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.execs.swap(0, Relaxed), self.puts.swap(0, Relaxed))
    }
}

#[async_trait::async_trait]
impl Executor for Counting {
    async fn exec(
        &self,
        req: capkk_executor::ExecRequest,
    ) -> Result<capkk_executor::ExecOutput, capkk_executor::ExecError> {
        self.execs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.exec(req).await
    }

    async fn put(&self, req: capkk_executor::PutRequest) -> Result<u64, capkk_executor::ExecError> {
        self.puts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.put(req).await
    }

    async fn get(
        &self,
        path: &str,
        limit: usize,
        privileged: bool,
    ) -> Result<Vec<u8>, capkk_executor::ExecError> {
        self.inner.get(path, limit, privileged).await
    }

    fn target(&self) -> String {
        self.inner.target()
    }
}

// ---------------------------------------------------------------------------------------------------------
// Stand-in artifacts with real checksums.

struct StandIns {
    /// id → (mirror path, bytes)
    files: HashMap<&'static str, (String, Vec<u8>)>,
    /// Contents of the single binaries, by install path.
    binaries: Vec<(&'static str, Vec<u8>)>,
}

fn script_bytes(name: &str, extra: &str) -> Vec<u8> {
    format!("#!/bin/sh\n# capkk stand-in {name}\n{extra}echo \"{name} stand-in $*\"\n").into_bytes()
}

fn tarball(dir: &Path, name: &str, members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    capkk_sandbox::mirror::tarball(dir, name, members).expect("stand-in tarball")
}

fn stand_ins(arch: &str, tag: &str) -> StandIns {
    stand_ins_of(arch, tag, K8S)
}

/// Stand-ins of Kubernetes `k8s`: its kubelet answers `--version` and its kubeadm `version -o short` with
/// `k8s`, as the real ones do, so a test can ask the host which version it runs.
fn stand_ins_of(arch: &str, tag: &str, k8s: &str) -> StandIns {
    let dir = std::env::temp_dir().join(format!("capkk-svc-standins-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = HashMap::new();
    let mut binaries = Vec::new();
    for id in ["kubeadm", "kubelet", "kubectl"] {
        let extra = match id {
            "kubeadm" => format!(
                "if [ \"$*\" = 'version -o short' ]; then echo {k8s}; exit 0; fi\necho \"kubeadm $*\" >> /var/log/capkk-kubeadm.log\n"
            ),
            // Runs like a daemon, so that the systemctl shim sees a restarted kubelet active.
            "kubelet" => format!(
                "if [ \"$1\" = --version ]; then echo 'Kubernetes {k8s}'; exit 0; fi\necho \"kubelet {k8s} stand-in $*\"\nexec sleep 86400\n"
            ),
            _ => String::new(),
        };
        let body = script_bytes(&format!("{id} {k8s} {tag}"), &extra);
        files.insert(
            id,
            (
                format!("/kubernetes-release/release/{k8s}/bin/linux/{arch}/{id}"),
                body.clone(),
            ),
        );
        binaries.push((
            match id {
                "kubeadm" => "/usr/local/bin/kubeadm",
                "kubelet" => "/usr/local/bin/kubelet",
                _ => "/usr/local/bin/kubectl",
            },
            body,
        ));
    }
    let runc = script_bytes(&format!("runc {RUNC} {tag}"), "");
    files.insert(
        "runc",
        (
            format!("/opencontainers/runc/releases/download/{RUNC}/runc.{arch}"),
            runc.clone(),
        ),
    );
    binaries.push(("/usr/local/sbin/runc", runc));
    let cni = tarball(
        &dir,
        "cni",
        &[
            ("bridge", script_bytes("bridge", "")),
            ("loopback", script_bytes("loopback", "")),
            ("host-local", script_bytes(&format!("host-local {tag}"), "")),
        ],
    );
    files.insert(
        "cni",
        (
            format!(
                "/containernetworking/plugins/releases/download/{CNI}/cni-plugins-linux-{arch}-{CNI}.tgz"
            ),
            cni,
        ),
    );
    let crictl = tarball(
        &dir,
        "crictl",
        &[("crictl", script_bytes(&format!("crictl {tag}"), ""))],
    );
    files.insert(
        "crictl",
        (
            format!("/cri-tools/releases/download/{CRICTL}/crictl-{CRICTL}-linux-{arch}.tar.gz"),
            crictl,
        ),
    );
    let containerd = tarball(
        &dir,
        "containerd",
        &[
            (
                "bin/containerd",
                format!(
                    "#!/bin/sh\n# capkk stand-in containerd {tag}\nif [ \"$1\" = --version ]; then echo 'containerd github.com/containerd/containerd v{CONTAINERD} standin'; exit 0; fi\nmkdir -p /run/containerd\nexec sleep 86400\n"
                )
                .into_bytes(),
            ),
            ("bin/ctr", script_bytes("ctr", "")),
            ("bin/containerd-shim-runc-v2", script_bytes("shim", "")),
        ],
    );
    files.insert(
        "containerd",
        (
            format!("/containerd/containerd/releases/download/v{CONTAINERD}/containerd-{CONTAINERD}-linux-{arch}.tar.gz"),
            containerd,
        ),
    );
    let _ = std::fs::remove_dir_all(&dir);
    StandIns { files, binaries }
}

impl StandIns {
    fn serve(&self, mirror: &Mirror) {
        for (path, body) in self.files.values() {
            mirror.put(path, body.clone());
        }
        // A published checksum file for crictl (exercises checksum.path).
        let (p, b) = &self.files["crictl"];
        mirror.put(
            "/sums/crictl.sha256",
            format!("{}  {}\n", sha(b), p.rsplit('/').next().unwrap()).into_bytes(),
        );
    }

    /// Overrides giving every artifact its stand-in checksum (crictl through a checksum file).
    fn overrides(&self, skip: &[&str]) -> Vec<ArtifactOverride> {
        self.files
            .iter()
            .filter(|(id, _)| !skip.contains(id))
            .map(|(id, (_, body))| {
                if *id == "crictl" {
                    ArtifactOverride {
                        id: (*id).into(),
                        checksum_path: Some("/sums/crictl.sha256".into()),
                        ..Default::default()
                    }
                } else {
                    ArtifactOverride {
                        id: (*id).into(),
                        checksum_value: Some(sha(body)),
                        ..Default::default()
                    }
                }
            })
            .collect()
    }

    fn source(&self, mirror: &Mirror, download_on: DownloadOn) -> ComponentSource {
        ComponentSource {
            zone: None,
            host: Some(mirror.base.clone()),
            overrides: self.overrides(&[]),
            download_on,
        }
    }
}

/// An artifact cache in a temporary directory removed when the test ends.
struct TestCache {
    cache: ArtifactCache,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for TestCache {
    type Target = ArtifactCache;
    fn deref(&self) -> &ArtifactCache {
        &self.cache
    }
}

fn cache(tag: &str) -> TestCache {
    let dir = tempfile::Builder::new()
        .prefix(&format!("capkk-svc-cache-{tag}-"))
        .tempdir()
        .unwrap();
    TestCache {
        cache: ArtifactCache::new(dir.path()).unwrap(),
        _dir: dir,
    }
}

fn binary_config(f: &HostFacts, source: ComponentSource) -> BinaryConfig {
    BinaryConfig {
        kubernetes_version: K8S.into(),
        arch: f.arch.clone(),
        cni_version: Some(CNI.into()),
        source,
        node_ip: Some("10.1.2.3".into()),
        node_name: Some("node-a".into()),
    }
}

/// `path mode sha256` of each path (or `path missing`).
fn file_states(host: &Host<'_>, paths: &[&str]) -> Vec<String> {
    let mut script = String::new();
    for p in paths {
        script.push_str(&format!(
            "if [ -f {p} ]; then echo \"{p} $(stat -c %a {p}) $(sha256sum {p} | cut -d' ' -f1)\"; else echo '{p} missing'; fi\n"
        ));
    }
    sh(host, &script).lines().map(str::to_owned).collect()
}

fn systemctl_mutations(host: &Host<'_>) -> Vec<String> {
    host.systemctl_calls()
        .unwrap()
        .into_iter()
        .filter(|l| !l.starts_with("is-"))
        .collect()
}

// ---------------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apt_host_create_is_verified_idempotent_and_reset_removes_only_owned_paths() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[0];
    let ex = executor(sb, 0, "root");
    install_fakes(host, &*ex).await;
    let progress = RecordingProgress::default();
    let redactor = Redactor::new(["reg-password-canary"]);

    // Facts.
    // Round trips of the first (changing) run are counted too.
    let first_run = Counting::new(ex.clone());
    let f = facts::gather(&first_run, &progress, &redactor).await.unwrap();
    assert_eq!(first_run.take(), (1, 0), "facts: one exec");
    assert_eq!(f.family, OsFamily::Debian);
    assert_eq!(f.package_manager, Some(PackageManager::Apt));
    assert_eq!(
        f.init,
        facts::InitSystem::SystemctlOnly,
        "sandbox hosts run the systemctl shim"
    );
    f.check_arch(&f.arch).unwrap();
    let other = if f.arch == "amd64" { "arm64" } else { "amd64" };
    assert!(matches!(f.check_arch(other), Err(Error::HostMismatch { .. })));

    // Bootstrap: first run changes, second run is all skips and changes nothing.
    let id = HostIdentity {
        hostname: "node-a".into(),
        internal_address: "10.1.2.3".into(),
        hosts_entries: vec![
            ("10.1.2.3".into(), vec!["node-a.c1".into(), "node-a".into()]),
            ("10.1.2.4".into(), vec!["node-b.c1".into(), "node-b".into()]),
        ],
    };
    let first = bootstrap::prepare(&first_run, &id, &f, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(first_run.take(), (1, 0), "bootstrap: one exec");
    assert!(
        first.changed.contains(&"hostname".to_string()),
        "{:?}",
        first.changed
    );
    assert!(first.changed.contains(&"sysctl".to_string()));
    assert_eq!(sh(host, "hostname; cat /etc/hostname"), "node-a\nnode-a\n");
    let hosts = sh(host, "cat /etc/hosts");
    assert!(
        hosts.contains(
            "# capkk hosts BEGIN\n10.1.2.3 node-a.c1 node-a\n10.1.2.4 node-b.c1 node-b\n# capkk hosts END\n"
        ),
        "{hosts}"
    );
    assert!(hosts.contains("localhost"), "existing entries kept: {hosts}");
    assert_eq!(
        sh(
            host,
            "stat -c '%a' /etc/sysctl.d/99-capkk.conf; cat /etc/sysctl.d/99-capkk.conf"
        ),
        format!("644\n{}", bootstrap::sysctl_conf())
    );
    assert_eq!(
        sh(host, "cat /etc/modules-load.d/capkk.conf"),
        "overlay\nbr_netfilter\n"
    );
    let kernel_log = sh(host, "cat /var/log/capkk-fake-kernel.log");
    assert!(
        kernel_log
            .lines()
            .any(|l| l == "sysctl -e -p /etc/sysctl.d/99-capkk.conf"),
        "{kernel_log}"
    );
    for d in bootstrap::DIRECTORIES {
        assert_eq!(sh(host, &format!("stat -c %a {d}")), "755\n", "{d}");
    }
    let second = bootstrap::prepare(&*ex, &id, &f, &progress, &redactor)
        .await
        .unwrap();
    assert!(
        second.changed.is_empty(),
        "second prepare changed {:?}: {:?}",
        second.changed,
        progress
            .records()
            .iter()
            .filter(|r| second.changed.contains(&r.name))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        sh(host, "cat /var/log/capkk-fake-kernel.log"),
        kernel_log,
        "no kernel calls on the second run"
    );
    assert_eq!(sh(host, "grep -c 'capkk hosts BEGIN' /etc/hosts"), "1\n");
    let boot: Vec<_> = progress
        .records()
        .into_iter()
        .filter(|r| r.phase == "bootstrap")
        .collect();
    let names: Vec<&str> = boot.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        &names[..8],
        [
            "hostname",
            "etc-hosts",
            "swap-off",
            "kernel-modules",
            "sysctl",
            "selinux",
            "firewall",
            "directories"
        ]
    );
    assert!(boot.iter().all(|r| r.exit_code == Some(0)));
    assert!(
        boot[8..].iter().all(|r| r.skipped),
        "second run journals skips: {:?}",
        &boot[8..]
    );

    // Repository (fake apt): missing packages installed non-interactively after an index update; then no-op.
    let repo = RepositoryConfig {
        source: PackageSource::HostSources,
        update: true,
        packages: vec![],
        component: ComponentSource::default(),
    };
    let c = cache("apt");
    let r1 = repository::ensure(&first_run, &repo, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(first_run.take(), (2, 0), "repository first run: probe + install");
    assert_eq!(r1.installed, repository::DEFAULT_APT_PACKAGES);
    let pm_log = sh(host, "grep '^apt-get' /var/log/capkk-fake-pm.log");
    let pkgs = repository::DEFAULT_APT_PACKAGES.join(" ");
    assert_eq!(
        pm_log,
        format!(
            "apt-get -o DPkg::Lock::Timeout=600 -q -y update [DEBIAN_FRONTEND=noninteractive]\n\
             apt-get -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold -q -y install --no-install-recommends {pkgs} [DEBIAN_FRONTEND=noninteractive]\n"
        )
    );
    let r2 = repository::ensure(&*ex, &repo, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert!(r2.installed.is_empty());
    assert_eq!(
        sh(host, "grep '^apt-get' /var/log/capkk-fake-pm.log"),
        pm_log,
        "no apt-get call on the second run"
    );

    // Binaries from the local mirror (controller download + upload).
    let mirror = Mirror::start(sb).expect("mirror on the sandbox bridge");
    let si = stand_ins(&f.arch, "apt");
    si.serve(&mirror);
    let cfg = binary_config(&f, si.source(&mirror, DownloadOn::Controller));
    let b1 = binary::ensure(&first_run, &cfg, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(
        first_run.take(),
        (2, 4),
        "binary first run: probe, 4 uploads, one script"
    );
    let expected_bytes: u64 = ["kubeadm", "kubelet", "kubectl", "cni"]
        .iter()
        .map(|id| si.files[id].1.len() as u64)
        .sum();
    assert_eq!(b1.bytes_uploaded, expected_bytes);
    assert_eq!(b1.uploaded.len(), 4);
    assert!(b1.changed);
    let bins: Vec<&str> = si
        .binaries
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| !p.contains("runc"))
        .collect();
    let states = file_states(host, &bins);
    for ((path, body), state) in si
        .binaries
        .iter()
        .filter(|(p, _)| !p.contains("runc"))
        .zip(&states)
    {
        assert_eq!(state, &format!("{path} 755 {}", sha(body)));
    }
    assert_eq!(
        sh(host, "/usr/local/bin/kubectl version"),
        format!("kubectl {K8S} apt stand-in version\n")
    );
    assert_eq!(
        sh(host, "ls /opt/cni/bin | sort | tr '\\n' ' '"),
        "bridge host-local loopback "
    );
    assert_eq!(
        sh(host, "cat /var/lib/capkk/artifacts/cni"),
        format!("{}\n", sha(&si.files["cni"].1))
    );
    assert_eq!(
        sh(host, "cat /etc/systemd/system/kubelet.service"),
        binary::kubelet_unit()
    );
    assert_eq!(
        sh(host, "cat /etc/systemd/system/kubelet.service.d/10-kubeadm.conf"),
        binary::kubelet_dropin(Some("10.1.2.3"), Some("node-a"))
    );
    assert_eq!(sh(host, "ls -A /var/lib/capkk/staging"), "", "staging cleaned");
    let calls = systemctl_mutations(host);
    assert_eq!(calls, ["daemon-reload", "enable kubelet"], "{calls:?}");

    // containerd + runc + crictl, config, unit, start.
    let cm = ContainerdConfig {
        arch: f.arch.clone(),
        version: Some(CONTAINERD.into()),
        crictl_version: Some(CRICTL.into()),
        runc_version: Some(RUNC.into()),
        sandbox_image: Some("registry.local:5000/pause:3.10".into()),
        registry_mirrors: vec!["https://mirror.example".into()],
        insecure_registries: vec!["10.9.9.9:5000".into()],
        private_registry: Some("registry.local:5000".into()),
        registry_auth: Some(RegistryAuth {
            username: Some("admin".into()),
            password: Some("reg-password-canary".into()),
            ..Default::default()
        }),
        source: si.source(&mirror, DownloadOn::Controller),
        ..Default::default()
    };
    let c1 = containermanager::ensure(&first_run, &cm, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(
        first_run.take(),
        (2, 3),
        "containermanager first run: probe, 3 uploads, one script"
    );
    assert!(!c1.skipped_existing);
    let cm_bytes: u64 = ["containerd", "runc", "crictl"]
        .iter()
        .map(|id| si.files[id].1.len() as u64)
        .sum();
    assert_eq!(c1.bytes_uploaded, cm_bytes);
    // What the host's facts decide is part of the file: a host that may not lower oom_score_adj (this
    // machine's root lacks CAP_SYS_RESOURCE, and so do its sandbox hosts) gets containerd's restriction.
    let decided = containermanager::ContainerdConfig {
        restrict_oom_score_adj: !f.can_lower_oom_score_adj,
        ..cm.clone()
    };
    assert_eq!(
        sh(host, "cat /etc/containerd/config.toml"),
        containermanager::config_toml(&decided)
    );
    let hosts_files = containermanager::hosts_tomls(&cm).unwrap();
    for (reg, content, mode) in &hosts_files {
        assert_eq!(
            sh(
                host,
                &format!(
                    "stat -c %a /etc/containerd/certs.d/{reg}/hosts.toml; cat /etc/containerd/certs.d/{reg}/hosts.toml"
                )
            ),
            format!("{mode:o}\n{content}")
        );
    }
    assert_eq!(
        sh(host, "cat /etc/crictl.yaml"),
        containermanager::crictl_yaml(&cm)
    );
    assert_eq!(
        sh(host, "cat /etc/systemd/system/containerd.service"),
        containermanager::containerd_unit()
    );
    assert_eq!(
        file_states(host, &["/usr/local/sbin/runc"]),
        [format!(
            "/usr/local/sbin/runc 755 {}",
            sha(&si.binaries.iter().find(|(p, _)| p.contains("runc")).unwrap().1)
        )]
    );
    assert_eq!(
        sh(
            host,
            "ls /usr/local/bin/containerd /usr/local/bin/ctr /usr/local/bin/crictl | wc -l"
        ),
        "3\n"
    );
    let calls = systemctl_mutations(host);
    assert_eq!(
        calls,
        [
            "daemon-reload",
            "enable kubelet",
            "daemon-reload",
            "enable containerd",
            "start containerd"
        ],
        "{calls:?}"
    );
    assert_eq!(sh(host, "systemctl is-active containerd"), "active\n");

    // Second run of everything: zero bytes uploaded, no downloads, no host change, no service restarts, and
    // one or two round trips per service.
    let downloads = c.downloads();
    let t = std::time::Instant::now();
    for _ in 0..5 {
        ex.sudo(capkk_executor::ExecRequest::new("true")).await.unwrap();
    }
    let t_true = t.elapsed() / 5;
    let counting = Counting::new(ex.clone());
    let t = std::time::Instant::now();
    let again = bootstrap::prepare(&counting, &id, &f, &progress, &redactor)
        .await
        .unwrap();
    assert!(again.changed.is_empty());
    assert_eq!(counting.take(), (1, 0), "bootstrap no-op: one exec");
    let t_boot = t.elapsed();
    let t = std::time::Instant::now();
    repository::ensure(&counting, &repo, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(counting.take(), (1, 0), "repository no-op: one exec");
    let t_repo = t.elapsed();
    let t = std::time::Instant::now();
    let b2 = binary::ensure(&counting, &cfg, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(counting.take(), (1, 0), "binary no-op: one probe exec, no upload");
    let t_bin = t.elapsed();
    assert_eq!(b2.bytes_uploaded, 0);
    assert!(!b2.changed);
    assert_eq!(b2.unchanged.len(), 4);
    let t = std::time::Instant::now();
    let c2 = containermanager::ensure(&counting, &cm, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(
        counting.take(),
        (1, 0),
        "containermanager no-op: one probe exec, no upload"
    );
    eprintln!(
        "no-op re-run over SSH (`true` exec {t_true:?}): bootstrap {t_boot:?}, repository {t_repo:?}, binary {t_bin:?}, containermanager {:?}",
        t.elapsed()
    );
    assert_eq!(c2.bytes_uploaded, 0);
    assert!(!c2.changed, "{c2:?}");
    assert_eq!(c.downloads(), downloads, "no downloads on the second run");
    assert_eq!(
        systemctl_mutations(host),
        calls,
        "no systemctl changes on the second run"
    );

    // Journal: every record has a phase and name; failures none; the registry password never appears.
    let records = progress.records();
    assert!(
        records
            .iter()
            .all(|r| !r.output_tail.contains("reg-password-canary"))
    );
    for phase in ["facts", "bootstrap", "repository", "binary", "containermanager"] {
        assert!(records.iter().any(|r| r.phase == phase), "no records for {phase}");
    }
    assert!(
        records
            .iter()
            .any(|r| r.phase == "binary" && r.name == "upload-kubeadm" && !r.skipped)
    );
    assert!(
        records
            .iter()
            .any(|r| r.phase == "binary" && r.name == "artifact-kubeadm" && r.skipped)
    );

    // Reset: owned paths gone, markers and non-owned files intact.
    sh(
        host,
        "mkdir -p /etc/kubernetes/pki /var/lib/etcd/member /run/cluster-api /var/lib/kubelet/pods /var/lib/other /etc/kubernetes.bak /etc/cni/net.d /var/lib/cni/networks /run/kubeadm\n\
         echo admin > /etc/kubernetes/admin.conf; echo db > /var/lib/etcd/member/db; touch /run/cluster-api/bootstrap-success.complete\n\
         echo keep > /etc/keep-me; echo keep > /var/lib/other/keep; echo keep > /etc/kubernetes.bak/keep; echo keep > /run/cluster-api/other\n\
         echo '{}' > /etc/cni/net.d/10-net.conflist; echo x > /run/kubeadm/kubeadm.yaml",
    );
    let opts = ResetOptions {
        cri_socket: Some(containermanager::DEFAULT_CRI_SOCKET.into()),
    };
    bootstrap::reset(&*ex, &opts, &progress, &redactor).await.unwrap();
    for p in OWNED_PATHS {
        assert_eq!(
            sh(host, &format!("[ -e {p} ] && echo present || echo gone")),
            "gone\n",
            "{p}"
        );
    }
    assert_eq!(
        sh(
            host,
            "cat /etc/keep-me /var/lib/other/keep /etc/kubernetes.bak/keep /run/cluster-api/other"
        ),
        "keep\nkeep\nkeep\nkeep\n"
    );
    assert_eq!(
        sh(
            host,
            "ls /usr/local/bin/kubeadm /etc/containerd/config.toml /etc/crictl.yaml /etc/sysctl.d/99-capkk.conf | wc -l"
        ),
        "4\n",
        "binaries and runtime config are not reset-owned"
    );
    assert_eq!(
        sh(host, "cat /var/log/capkk-kubeadm.log"),
        "kubeadm reset -f --cri-socket unix:///run/containerd/containerd.sock\n"
    );
    let after = host.systemctl_calls().unwrap();
    assert!(after.iter().any(|l| l == "stop containerd"), "{after:?}");
    // Its unit stays for the next install but no longer starts at boot: its stamp is gone with /var/lib/capkk,
    // and a containerd a reboot started without it was taken for a pre-existing one ever after.
    assert!(after.iter().any(|l| l == "disable containerd"), "{after:?}");
    assert_eq!(
        sh(
            host,
            "systemctl is-enabled -q containerd && echo enabled || echo disabled; ls /etc/systemd/system/containerd.service"
        ),
        "disabled\n/etc/systemd/system/containerd.service\n"
    );
    assert_eq!(after.last().map(String::as_str), Some("daemon-reload"));
    // A second reset finds nothing to do.
    let again = bootstrap::reset(&*ex, &opts, &progress, &redactor).await.unwrap();
    assert!(again.changed.is_empty(), "{:?}", again.changed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dnf_host_via_sudo_installs_missing_packages_in_order() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[1];
    let ex = executor(sb, 1, NOPASSWD_USER);
    install_fakes(host, &*ex).await;
    sh(
        host,
        "printf 'NAME=\"Rocky Linux\"\\nVERSION_ID=\"9.3\"\\nID=\"rocky\"\\nID_LIKE=\"rhel centos fedora\"\\nPRETTY_NAME=\"Rocky Linux 9.3\"\\n' > /etc/os-release.capkk\n\
         rm -f /etc/os-release; mv /etc/os-release.capkk /etc/os-release\n\
         printf 'socat\\n' > /var/lib/capkk-fake-pm/installed 2>/dev/null || { mkdir -p /var/lib/capkk-fake-pm; printf 'socat\\n' > /var/lib/capkk-fake-pm/installed; }",
    );
    let progress = RecordingProgress::default();
    let redactor = Redactor::default();
    let f = facts::gather(&*ex, &progress, &redactor).await.unwrap();
    assert_eq!(f.family, OsFamily::RedHat);
    assert_eq!(f.os_id, "rocky");
    assert_eq!(f.os_version, "9.3");
    assert_eq!(f.package_manager, Some(PackageManager::Dnf));
    let repo = RepositoryConfig {
        source: PackageSource::HostSources,
        update: true,
        packages: vec![],
        component: ComponentSource::default(),
    };
    let c = cache("dnf");
    let r = repository::ensure(&*ex, &repo, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    let expected: Vec<&str> = repository::DEFAULT_RPM_PACKAGES
        .iter()
        .copied()
        .filter(|p| *p != "socat")
        .collect();
    assert_eq!(r.installed, expected, "socat was already installed");
    let log = sh(host, "cat /var/log/capkk-fake-pm.log");
    let mut want: Vec<String> = repository::DEFAULT_RPM_PACKAGES
        .iter()
        .map(|p| format!("rpm -q --whatprovides {p}"))
        .collect();
    want.push("dnf -y makecache".into());
    want.push(format!("dnf -y install {}", expected.join(" ")));
    assert_eq!(log.lines().collect::<Vec<_>>(), want);
    let again = repository::ensure(&*ex, &repo, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert!(again.installed.is_empty());
    let log2 = sh(host, "cat /var/log/capkk-fake-pm.log");
    assert!(
        !log2[log.len()..].contains("dnf"),
        "second run only queries rpm: {}",
        &log2[log.len()..]
    );
    // Bootstrap works through sudo as well.
    let id = HostIdentity {
        hostname: "rocky-1".into(),
        internal_address: "10.1.2.9".into(),
        hosts_entries: vec![("10.1.2.9".into(), vec!["rocky-1".into()])],
    };
    bootstrap::prepare(&*ex, &id, &f, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(sh(host, "hostname"), "rocky-1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksum_mismatch_refuses_and_leaves_the_host_unchanged() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[2];
    let ex = executor(sb, 2, "root");
    let progress = RecordingProgress::default();
    let redactor = Redactor::default();
    let f = facts::gather(&*ex, &progress, &redactor).await.unwrap();
    let mirror = Mirror::start(sb).expect("mirror on the sandbox bridge");
    let si = stand_ins(&f.arch, "bad");
    si.serve(&mirror);
    let watched = [
        "/usr/local/bin/kubeadm",
        "/usr/local/bin/kubelet",
        "/usr/local/bin/kubectl",
        "/opt/cni/bin/loopback",
        binary::KUBELET_UNIT,
    ];
    let snapshot = || {
        let mut s = file_states(host, &watched);
        s.push(sh(host, "ls -A /var/lib/capkk/staging 2>/dev/null; true"));
        s
    };
    let before = snapshot();
    assert!(before[..5].iter().all(|l| l.ends_with("missing")), "{before:?}");

    // 1. Controller side: kubeadm has no override, so the embedded upstream checksum applies and the stand-in
    //    does not match it.
    let c = cache("bad");
    let mut source = si.source(&mirror, DownloadOn::Controller);
    source.overrides.retain(|o| o.id != "kubeadm");
    let cfg = binary_config(&f, source);
    let err = binary::ensure(&*ex, &cfg, &f, &c, &progress, &redactor)
        .await
        .unwrap_err();
    match &err {
        Error::ChecksumMismatch { artifact, expected } => {
            assert!(artifact.contains("kubeadm v1.32.0"), "{err}");
            assert_eq!(
                expected,
                binary::catalogue::known_sha256("kubeadm", &f.arch, K8S).unwrap()
            );
            assert!(!err.to_string().contains(&sha(&si.files["kubeadm"].1)), "{err}");
        }
        other => panic!("expected a checksum mismatch, got {other}"),
    }
    assert!(err.to_string().contains("checksum mismatch for kubeadm"), "{err}");
    assert_eq!(snapshot(), before, "nothing installed or staged");
    assert!(
        !c.path_for(&sha(&si.files["kubeadm"].1)).unwrap().exists(),
        "a bad file never enters the cache"
    );

    // 2. Host side (downloadOn: host): a wrong override digest is caught by the host before installing.
    let mut source = si.source(&mirror, DownloadOn::Host);
    for o in &mut source.overrides {
        if o.id == "kubelet" {
            o.checksum_value = Some("0".repeat(64));
        }
    }
    let err = binary::ensure(&*ex, &binary_config(&f, source), &f, &c, &progress, &redactor)
        .await
        .unwrap_err();
    match &err {
        Error::ChecksumMismatch { artifact, expected } => {
            assert!(artifact.contains("kubelet v1.32.0"), "{err}");
            assert_eq!(expected, &"0".repeat(64));
            assert!(!err.to_string().contains(&sha(&si.files["kubelet"].1)), "{err}");
        }
        other => panic!("expected a checksum mismatch, got {other}"),
    }
    assert_eq!(snapshot(), before, "nothing installed; staged downloads removed");
    assert!(
        progress
            .records()
            .iter()
            .any(|r| r.name == "verify-artifacts" && r.exit_code == Some(65))
    );

    // 3. No checksum anywhere for an unknown version: refused before any download, naming the fix.
    let mut cfg = binary_config(
        &f,
        ComponentSource {
            host: Some(mirror.base.clone()),
            ..Default::default()
        },
    );
    cfg.kubernetes_version = "v1.99.0".into();
    let err = binary::ensure(&*ex, &cfg, &f, &c, &progress, &redactor)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("kubeadm v1.99.0")
            && err.contains(&format!(
                "/kubernetes-release/release/v1.99.0/bin/linux/{}/kubeadm.sha256",
                f.arch
            ))
            && err.contains("HTTP 404")
            && err.contains("checksum.value"),
        "the missing published checksum file is named with the override that pins the version: {err}"
    );
    assert_eq!(snapshot(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpinned_version_installs_through_its_published_checksum_and_a_tampered_one_is_refused() {
    // Versions absent from the embedded pin: Kubernetes v1.33.7, CNI v1.4.1 and CAPKK's defaults containerd
    // 1.6.4, crictl v1.24.0, runc v1.1.1. The mirror serves stand-ins with upstream's checksum files next to
    // them (upstream's names and formats); no override names a checksum.
    const K: &str = "v1.33.7";
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[10];
    let ex = executor(sb, 10, "root");
    let progress = RecordingProgress::default();
    let redactor = Redactor::default();
    let f = facts::gather(&*ex, &progress, &redactor).await.unwrap();
    let arch = f.arch.clone();
    let mirror = Mirror::start(sb).expect("mirror on the sandbox bridge");
    let dir = tempfile::tempdir().unwrap();
    let k8s_dir = format!("/kubernetes-release/release/{K}/bin/linux/{arch}");
    let mut bodies = HashMap::new();
    for id in ["kubeadm", "kubelet", "kubectl"] {
        let body = script_bytes(&format!("{id} {K} published"), "");
        mirror.put(&format!("{k8s_dir}/{id}"), body.clone());
        // dl.k8s.io: the digest alone.
        mirror.put(&format!("{k8s_dir}/{id}.sha256"), sha(&body).into_bytes());
        bodies.insert(id, body);
    }
    let cni_name = format!("cni-plugins-linux-{arch}-v1.4.1.tgz");
    let cni_path = format!("/containernetworking/plugins/releases/download/v1.4.1/{cni_name}");
    let cni = tarball(
        dir.path(),
        "cni",
        &[("loopback", script_bytes("loopback v1.4.1", ""))],
    );
    mirror.put(&cni_path, cni.clone());
    mirror.put(
        &format!("{cni_path}.sha256"),
        format!("{}  {cni_name}\n", sha(&cni)).into_bytes(),
    );
    let containerd_name = format!("containerd-1.6.4-linux-{arch}.tar.gz");
    let containerd_path = format!("/containerd/containerd/releases/download/v1.6.4/{containerd_name}");
    let containerd = tarball(
        dir.path(),
        "containerd",
        &[
            (
                "bin/containerd",
                b"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'containerd github.com/containerd/containerd v1.6.4 standin'; exit 0; fi\nmkdir -p /run/containerd\nexec sleep 86400\n".to_vec(),
            ),
            ("bin/ctr", script_bytes("ctr", "")),
            ("bin/containerd-shim-runc-v2", script_bytes("shim", "")),
        ],
    );
    mirror.put(&containerd_path, containerd.clone());
    mirror.put(
        &format!("{containerd_path}.sha256sum"),
        format!("{}  {containerd_name}\n", sha(&containerd)).into_bytes(),
    );
    let crictl_name = format!("crictl-v1.24.0-linux-{arch}.tar.gz");
    let crictl_path = format!("/cri-tools/releases/download/v1.24.0/{crictl_name}");
    let crictl = tarball(
        dir.path(),
        "crictl",
        &[("crictl", script_bytes("crictl v1.24.0", ""))],
    );
    mirror.put(&crictl_path, crictl.clone());
    mirror.put(&format!("{crictl_path}.sha256"), sha(&crictl).into_bytes());
    // runc: one runc.sha256sum for every arch of the release.
    let runc = script_bytes("runc v1.1.1", "");
    let runc_dir = "/opencontainers/runc/releases/download/v1.1.1";
    mirror.put(&format!("{runc_dir}/runc.{arch}"), runc.clone());
    mirror.put(
        &format!("{runc_dir}/runc.sha256sum"),
        format!("{}  runc.arm64\n{}  runc.{arch}\n", "1".repeat(64), sha(&runc)).into_bytes(),
    );

    let source = ComponentSource {
        host: Some(mirror.base.clone()),
        ..Default::default()
    };
    let mut cfg = binary_config(&f, source.clone());
    cfg.kubernetes_version = K.into();
    cfg.cni_version = Some("v1.4.1".into());
    let watched = [
        "/usr/local/bin/kubeadm",
        "/usr/local/bin/kubelet",
        "/usr/local/bin/kubectl",
        "/opt/cni/bin/loopback",
        binary::KUBELET_UNIT,
    ];
    let snapshot = || {
        let mut s = file_states(host, &watched);
        s.push(sh(host, "ls -A /var/lib/capkk/staging 2>/dev/null; true"));
        s
    };
    let before = snapshot();
    assert!(before[..5].iter().all(|l| l.ends_with("missing")), "{before:?}");
    let c = cache("published");

    // 1. A tampered published checksum (it no longer matches the artifact): refused, nothing installed,
    //    nothing staged, nothing cached.
    let tampered = sha(b"not the kubelet");
    mirror.put(
        &format!("{k8s_dir}/kubelet.sha256"),
        tampered.clone().into_bytes(),
    );
    let err = binary::ensure(&*ex, &cfg, &f, &c, &progress, &redactor)
        .await
        .unwrap_err();
    match &err {
        Error::ChecksumMismatch { artifact, expected } => {
            assert!(artifact.contains(&format!("kubelet {K}")), "{err}");
            assert_eq!(expected, &tampered);
            assert!(!err.to_string().contains(&sha(&bodies["kubelet"])), "{err}");
        }
        other => panic!("expected a checksum mismatch, got {other}"),
    }
    assert_eq!(snapshot(), before, "the host is unchanged");
    assert!(
        !c.path_for(&sha(&bodies["kubelet"])).unwrap().exists(),
        "a bad file never enters the cache"
    );

    // 2. The genuine published checksum: installed, each checksum file fetched from the mirror.
    mirror.put(
        &format!("{k8s_dir}/kubelet.sha256"),
        sha(&bodies["kubelet"]).into_bytes(),
    );
    let out = binary::ensure(&*ex, &cfg, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(out.uploaded.len(), 4, "{out:?}");
    for id in ["kubeadm", "kubelet", "kubectl"] {
        assert_eq!(
            file_states(host, &[format!("/usr/local/bin/{id}").as_str()]),
            [format!("/usr/local/bin/{id} 755 {}", sha(&bodies[id]))]
        );
        assert!(
            mirror.hits(&format!("{k8s_dir}/{id}.sha256")) >= 1,
            "{id}.sha256 fetched"
        );
    }
    assert!(mirror.hits(&format!("{cni_path}.sha256")) >= 1);

    // 3. CAPKK's defaulted runtime versions resolve the same way (containerd `.sha256sum`, crictl `.sha256`,
    //    runc's `runc.sha256sum` listing every arch).
    let cm = ContainerdConfig {
        arch: arch.clone(),
        version: Some("1.6.4".into()),
        crictl_version: Some("v1.24.0".into()),
        runc_version: Some("v1.1.1".into()),
        source,
        ..Default::default()
    };
    let out = containermanager::ensure(&*ex, &cm, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert!(!out.skipped_existing);
    assert_eq!(
        file_states(host, &["/usr/local/sbin/runc"]),
        [format!("/usr/local/sbin/runc 755 {}", sha(&runc))]
    );
    assert_eq!(
        sh(
            host,
            "/usr/local/bin/containerd --version; ls /usr/local/bin/crictl"
        ),
        "containerd github.com/containerd/containerd v1.6.4 standin\n/usr/local/bin/crictl\n"
    );
    for sums in [
        format!("{containerd_path}.sha256sum"),
        format!("{crictl_path}.sha256"),
        format!("{runc_dir}/runc.sha256sum"),
    ] {
        assert!(mirror.hits(&sums) >= 1, "{sums} fetched");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_download_mode_installs_without_uploads() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[3];
    let ex = executor(sb, 3, "root");
    let progress = RecordingProgress::default();
    let redactor = Redactor::default();
    let f = facts::gather(&*ex, &progress, &redactor).await.unwrap();
    let mirror = Mirror::start(sb).expect("mirror on the sandbox bridge");
    let si = stand_ins(&f.arch, "hostdl");
    si.serve(&mirror);
    let c = cache("hostdl");
    let cfg = binary_config(&f, si.source(&mirror, DownloadOn::Host));
    let out = binary::ensure(&*ex, &cfg, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(out.bytes_uploaded, 0);
    assert_eq!(out.host_downloaded.len(), 4);
    assert_eq!(c.downloads(), 0, "the controller downloaded nothing");
    for id in ["kubeadm", "kubelet", "kubectl", "cni"] {
        assert_eq!(mirror.hits(&si.files[id].0), 1, "{id} fetched once by the host");
    }
    let (path, body) = &si.binaries[0];
    assert_eq!(file_states(host, &[path]), [format!("{path} 755 {}", sha(body))]);
    let again = binary::ensure(&*ex, &cfg, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert!(again.host_downloaded.is_empty() && !again.changed);
    assert_eq!(
        mirror.hits(&si.files["kubeadm"].0),
        1,
        "second run downloads nothing"
    );
}

/// The fault campaign's `disk-full` on a host that downloads (docs/reliability.md): a host download that fails
/// (here the mirror lacks one file; a full disk fails the same step) must be retried with backoff, not leave
/// the Machine failed until someone sets the retry annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_host_download_is_retried_later_and_installs_once_the_file_is_there() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[12];
    let ex = executor(sb, 12, "root");
    let progress = RecordingProgress::default();
    let redactor = Redactor::default();
    let f = facts::gather(&*ex, &progress, &redactor).await.unwrap();
    let mirror = Mirror::start(sb).expect("mirror on the sandbox bridge");
    let si = stand_ins(&f.arch, "hostretry");
    si.serve(&mirror);
    let (kubelet_path, kubelet_body) = si.files["kubelet"].clone();
    mirror.remove(&kubelet_path);
    let c = cache("hostretry");
    let cfg = binary_config(&f, si.source(&mirror, DownloadOn::Host));
    let err = binary::ensure(&*ex, &cfg, &f, &c, &progress, &redactor)
        .await
        .expect_err("kubelet is not on the mirror");
    assert!(
        matches!(err, capkk_service::Error::RetryLater { .. }) && err.is_transient(),
        "a failed host download is retried later, not terminal: {err:?}"
    );
    assert!(
        err.to_string().contains("downloading kubelet"),
        "names what failed: {err}"
    );
    let (path, _) = &si.binaries[0];
    assert_eq!(
        file_states(host, &[path]),
        [format!("{path} missing")],
        "nothing installed"
    );
    mirror.put(&kubelet_path, kubelet_body);
    let out = binary::ensure(&*ex, &cfg, &f, &c, &progress, &redactor)
        .await
        .expect("the retry installs once the file is served");
    assert_eq!(out.host_downloaded.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_controller_download_serves_many_hosts() {
    let Some(sb) = sandbox() else { return };
    let ex4 = executor(sb, 4, "root");
    let ex5 = executor(sb, 5, "root");
    let progress = RecordingProgress::default();
    let redactor = Redactor::default();
    let f = facts::gather(&*ex4, &progress, &redactor).await.unwrap();
    let mirror = Mirror::start(sb).expect("mirror on the sandbox bridge");
    let si = stand_ins(&f.arch, "shared");
    si.serve(&mirror);
    let c = cache("shared");
    // A private mirror (198.18.0.0/15) is reached under the default download policy, which refuses
    // loopback and link-local addresses.
    assert_eq!(*c.download_policy(), binary::DownloadPolicy::default());
    let cfg = binary_config(&f, si.source(&mirror, DownloadOn::Controller));
    let (a, b) = tokio::join!(
        binary::ensure(&*ex4, &cfg, &f, &c, &progress, &redactor),
        binary::ensure(&*ex5, &cfg, &f, &c, &progress, &redactor)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.bytes_uploaded, b.bytes_uploaded);
    assert!(a.bytes_uploaded > 0);
    assert_eq!(c.downloads(), 4);
    for id in ["kubeadm", "kubelet", "kubectl", "cni"] {
        assert_eq!(
            mirror.hits(&si.files[id].0),
            1,
            "{id} downloaded once for two hosts"
        );
    }
    for idx in [4, 5] {
        let host = &sb.hosts()[idx];
        let (path, body) = &si.binaries[1];
        assert_eq!(file_states(host, &[path]), [format!("{path} 755 {}", sha(body))]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iso_mode_uploads_mounts_uses_only_the_iso_and_restores_sources() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[6];
    let ex = executor(sb, 6, "root");
    install_fakes(host, &*ex).await;
    capkk_sandbox::assets::install(host, &["fake-iso"])
        .unwrap_or_else(|e| panic!("installing fake-iso on {}: {e}", host.info.name));
    let progress = RecordingProgress::default();
    let redactor = Redactor::default();
    let f = facts::gather(&*ex, &progress, &redactor).await.unwrap();
    let iso_name = repository::auto_iso_name(&f);
    let iso = format!("ISO stand-in for {iso_name}\n").repeat(1000).into_bytes();
    let mirror = Mirror::start(sb).expect("mirror on the sandbox bridge");
    mirror.put(
        &format!("/kubesphere/kubekey/releases/download/v2.2.2/{iso_name}"),
        iso.clone(),
    );
    let repo = RepositoryConfig {
        source: PackageSource::Iso("auto".into()),
        update: false,
        packages: vec!["socat".into(), "conntrack".into()],
        component: ComponentSource {
            host: Some(mirror.base.clone()),
            overrides: vec![ArtifactOverride {
                id: "iso".into(),
                checksum_value: Some(sha(&iso)),
                ..Default::default()
            }],
            ..Default::default()
        },
    };
    let sources = "sha256sum /etc/apt/sources.list 2>/dev/null; ls -la /etc/apt/sources.list.d";
    let sources_before = sh(host, sources);
    let c = cache("iso");
    let out = repository::ensure(&*ex, &repo, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(out.bytes_uploaded, iso.len() as u64);
    assert_eq!(out.installed, ["socat", "conntrack"]);
    let iso_path = format!("{}/{iso_name}", repository::ISO_DIR);
    assert_eq!(
        file_states(host, &[&iso_path]),
        [format!("{iso_path} 600 {}", sha(&iso))]
    );
    let log: Vec<String> = sh(host, "grep -v '^dpkg-query' /var/log/capkk-fake-pm.log")
        .lines()
        .map(str::to_owned)
        .collect();
    let apt_opts = "-o DPkg::Lock::Timeout=600 -o Dir::Etc::sourcelist=/var/lib/capkk/repository/iso.list \
                    -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0";
    assert_eq!(
        log,
        [
            format!("mount -o loop,ro {iso_path} /mnt/capkk-repository"),
            format!("apt-get {apt_opts} -q -y update [DEBIAN_FRONTEND=noninteractive]"),
            format!(
                "apt-get {apt_opts} -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold -q -y \
                 install --no-install-recommends socat conntrack [DEBIAN_FRONTEND=noninteractive]"
            ),
            "umount /mnt/capkk-repository".to_owned(),
        ]
    );
    assert_eq!(
        sh(host, "cat /var/lib/capkk/repository/iso.list"),
        "deb [trusted=yes] file:///mnt/capkk-repository ./\n"
    );
    assert_eq!(
        sh(host, sources),
        sources_before,
        "the host's own sources are untouched"
    );
    // Everything installed now: no upload, no mount, no package manager call.
    let again = repository::ensure(&*ex, &repo, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(again, Default::default());
    assert_eq!(
        sh(host, "grep -vc '^dpkg-query' /var/log/capkk-fake-pm.log"),
        "4\n"
    );
    // A wrong ISO digest is refused before anything is uploaded or mounted.
    sh(host, "rm -f /var/lib/capkk-fake-pm/installed");
    let mut bad = repo.clone();
    bad.component.overrides[0].checksum_value = Some("1".repeat(64));
    sh(host, &format!("rm -f {iso_path}"));
    let err = repository::ensure(&*ex, &bad, &f, &cache("iso-bad"), &progress, &redactor)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{err}");
    assert_eq!(file_states(host, &[&iso_path]), [format!("{iso_path} missing")]);
    assert_eq!(
        sh(host, "grep -vc '^dpkg-query' /var/log/capkk-fake-pm.log"),
        "4\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_foreign_containerd_is_left_alone_by_install_and_reset_via_password_sudo() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[7];
    let target = HostTarget::new(
        host.address(),
        capkk_sandbox::PASSWD_USER,
        Auth::key_file(&sb.credentials().ed25519_key),
    )
    .host_key(HostKeyPolicy::pinned(host.fingerprint()))
    .sudo_password(sb.credentials().password.clone());
    let ex = pool().executor(&target);
    let progress = RecordingProgress::default();
    let redactor = Redactor::new([sb.credentials().password.clone()]);
    let f = facts::gather(&*ex, &progress, &redactor).await.unwrap();
    // A distro-installed containerd, already running.
    sh(
        host,
        &format!(
            "printf '#!/bin/sh\\nif [ \"$1\" = --version ]; then echo \"containerd containerd.io {CONTAINERD} abcdef\"; exit 0; fi\\nexec sleep 86400\\n' > /usr/bin/containerd\n\
             chmod 755 /usr/bin/containerd\n\
             printf '[Service]\\nExecStart=/usr/bin/containerd\\n' > /lib/systemd/system/containerd.service\n\
             systemctl start containerd"
        ),
    );
    let mirror = Mirror::start(sb).expect("mirror on the sandbox bridge");
    let si = stand_ins(&f.arch, "foreign");
    si.serve(&mirror);
    let c = cache("foreign");
    let mut cm = ContainerdConfig {
        arch: f.arch.clone(),
        version: Some(CONTAINERD.into()),
        source: si.source(&mirror, DownloadOn::Controller),
        ..Default::default()
    };
    let out = containermanager::ensure(&*ex, &cm, &f, &c, &progress, &redactor)
        .await
        .unwrap();
    assert!(out.skipped_existing);
    assert_eq!(out.bytes_uploaded, 0);
    assert_eq!(c.downloads(), 0);
    assert_eq!(
        file_states(
            host,
            &[containermanager::CONFIG_TOML, "/usr/local/bin/containerd"]
        ),
        [
            format!("{} missing", containermanager::CONFIG_TOML),
            "/usr/local/bin/containerd missing".to_owned()
        ]
    );
    // Another version requested: refused with a clear message, still nothing written.
    cm.version = Some("1.7.99".into());
    let err = containermanager::ensure(&*ex, &cm, &f, &c, &progress, &redactor)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("not installed by capkk") && err.contains("1.7.99"),
        "{err}"
    );
    assert_eq!(
        file_states(host, &[containermanager::CONFIG_TOML]),
        [format!("{} missing", containermanager::CONFIG_TOML)]
    );
    // docker is refused before touching the host.
    cm.runtime_type = Some("docker".into());
    let err = containermanager::ensure(&*ex, &cm, &f, &c, &progress, &redactor)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Unsupported { .. }) && err.to_string().contains("docker"),
        "{err}"
    );
    // The reset of this node leaves that containerd running with what it runs: no pod of its CRI is removed
    // and no shim of its k8s.io namespace is killed (a crictl that lists one pod, and a shim, stand in).
    sh(
        host,
        "rm -f /var/log/capkk-crictl.log\n\
         printf '#!/bin/sh\\necho \"$*\" >> /var/log/capkk-crictl.log\\ncase \"$*\" in *pods*) echo pod-of-another-owner ;; esac\\n' > /usr/local/bin/crictl\n\
         printf '#!/bin/sh\\nwhile :; do sleep 1; done\\n' > /usr/bin/containerd-shim-runc-v2\n\
         chmod 755 /usr/local/bin/crictl /usr/bin/containerd-shim-runc-v2\n\
         mkdir -p /run/containerd && rm -f /run/containerd/containerd.sock\n\
         python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/run/containerd/containerd.sock\")'\n\
         setsid /usr/bin/containerd-shim-runc-v2 -namespace k8s.io -id p1 -address /run/containerd/containerd.sock </dev/null >/dev/null 2>&1 &\n\
         echo $! > /run/foreign-shim.pid",
    );
    let before = host.systemctl_calls().unwrap().len();
    let reset = bootstrap::reset(&*ex, &ResetOptions::default(), &progress, &redactor)
        .await
        .unwrap();
    let calls = host.systemctl_calls().unwrap().split_off(before);
    assert!(!calls.iter().any(|c| c.contains("stop containerd")), "{calls:?}");
    assert_eq!(
        sh(
            host,
            "systemctl is-active -q containerd && echo active; kill -0 $(cat /run/foreign-shim.pid) && echo shim; cat /var/log/capkk-crictl.log 2>/dev/null || true"
        ),
        "active\nshim\n",
        "the pre-existing containerd, its shim and its pods are left alone"
    );
    assert!(
        reset.changed.iter().all(|s| !s.contains("stop-services")),
        "{:?}",
        reset.changed
    );
    assert!(
        progress.records().iter().any(|r| r.phase == "reset"
            && r.name == "stop-services"
            && r.output_tail
                .contains("left containerd running: capkk did not install it")),
        "the reset says why it left containerd running"
    );
    sh(
        host,
        "kill $(cat /run/foreign-shim.pid); systemctl stop containerd; rm -f /usr/local/bin/crictl /usr/bin/containerd-shim-runc-v2 /run/foreign-shim.pid /run/containerd/containerd.sock",
    );
    // The sudo password never reaches the journal.
    assert!(
        progress
            .records()
            .iter()
            .all(|r| !r.output_tail.contains(&sb.credentials().password))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_never_deletes_through_a_volume_still_mounted_under_an_owned_path() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[8];
    let ex = executor(sb, 8, "root");
    let progress = RecordingProgress::default();
    let redactor = Redactor::default();
    // A pod volume: data that is not the node's, bind-mounted under /var/lib/kubelet (like NFS or CSI).
    sh(
        host,
        "mkdir -p /srv/precious /var/lib/kubelet/pods/p1/volumes/v1 && echo keep > /srv/precious/data
         mount --bind /srv/precious /var/lib/kubelet/pods/p1/volumes/v1
         echo node > /var/lib/kubelet/config.yaml",
    );
    bootstrap::reset(&*ex, &ResetOptions::default(), &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(
        sh(host, "cat /srv/precious/data"),
        "keep\n",
        "deleted through the mount"
    );
    assert_eq!(
        sh(
            host,
            "[ -e /var/lib/kubelet ] && echo present || echo gone; grep -c ' /var/lib/kubelet/' /proc/self/mountinfo || true"
        ),
        "gone\n0\n"
    );
    // A volume that cannot be unmounted (in use): nothing under it is deleted, the reset fails (the
    // controller quarantines the host instead of freeing it).
    sh(
        host,
        "mkdir -p /srv/busy /var/lib/kubelet/pods/p2/volumes/v2 && echo keep > /srv/busy/data
         mount --bind /srv/busy /var/lib/kubelet/pods/p2/volumes/v2
         cd /var/lib/kubelet/pods/p2/volumes/v2 && setsid sleep 600 < /dev/null > /dev/null 2>&1 &",
    );
    let err = bootstrap::reset(&*ex, &ResetOptions::default(), &progress, &redactor)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::CommandFailed { step, output_tail, .. }
            if step.ends_with("remove-paths") && output_tail.contains("still mounted under: /var/lib/kubelet")),
        "{err}"
    );
    assert_eq!(sh(host, "cat /srv/busy/data"), "keep\n");
    sh(
        host,
        "for p in $(pgrep -f 'sleep 600'); do [ \"$(readlink /proc/$p/cwd)\" = /var/lib/kubelet/pods/p2/volumes/v2 ] && kill $p; done
         sleep 0.2; umount /var/lib/kubelet/pods/p2/volumes/v2; rm -rf /var/lib/kubelet /srv/busy /srv/precious",
    );
}

/// Files in a host's overlay upper dir (what the host wrote): path inside the host -> (size, mtime).
fn upper_files(root: &Path) -> HashMap<String, (u64, std::time::SystemTime)> {
    fn walk(root: &Path, dir: &Path, out: &mut HashMap<String, (u64, std::time::SystemTime)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = format!("/{}", p.strip_prefix(root).unwrap().display());
                out.insert(rel, (m.len(), m.modified().unwrap_or(std::time::UNIX_EPOCH)));
            }
        }
    }
    let mut out = HashMap::new();
    walk(root, root, &mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_scripts_from_random_fields_touch_only_their_own_paths() {
    use proptest::{
        strategy::{Strategy, ValueTree},
        test_runner::{Config, RngAlgorithm, TestRng, TestRunner},
    };
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[9];
    let ex = executor(sb, 9, "root");
    let nasty = || {
        proptest::prop_oneof![
            "[ -~\\t\\n]{0,24}",
            "[$`'\"\\\\;|&<>(){}*?!#~ \\n-]{1,12}",
            "[a-z0-9.:/-]{1,16}",
        ]
    };
    let y = |s: &str| serde_json::to_string(s).unwrap();
    // Where bootstrap data with these fields may write: its own paths, the account databases of the user it
    // creates, fstab, and capkk's journal.
    let allowed = |p: &str| {
        [
            "/srv/prop/",
            "/etc/passwd",
            "/etc/shadow",
            "/etc/group",
            "/etc/gshadow",
            "/etc/subuid",
            "/etc/subgid",
            "/etc/.pwd.lock",
            "/etc/sudoers.d/",
            "/home/prop",
            "/var/mail/",
            "/var/spool/mail/",
            "/var/log/lastlog",
            "/var/log/faillog",
            "/etc/fstab",
            "/var/lib/capkk/",
            // The sandbox harness's own logs (its sshd and systemctl shim), not the payload's doing.
            "/var/log/capkk-sshd.log",
            "/var/log/capkk-systemctl.log",
        ]
        .iter()
        .any(|a| p.starts_with(a))
    };
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[13; 32]),
    );
    let strategy = nasty();
    let mut ran = 0;
    let mut refused = Vec::new();
    for case in 0..24 {
        // One field at a time gets the random value (a payload the parser refuses runs nothing at all).
        let v = strategy.new_tree(&mut runner).unwrap().current();
        let pick = |i: usize, benign: &str| {
            if case % 6 == i {
                v.clone()
            } else {
                benign.to_owned()
            }
        };
        let (name, owner, content) = (pick(0, "f"), pick(1, "root"), pick(2, "x"));
        let (gecos, key, spec) = (pick(3, "g"), pick(4, "ssh-ed25519 AAAA k"), pick(5, "/dev/null"));
        let yaml = format!(
            "#cloud-config\nwrite_files:\n- {{path: {p}, owner: {o}, content: {c}}}\n- {{path: {p}, content: {c}, append: true}}\n\
             users:\n- {{name: prop{case}, gecos: {g}, ssh_authorized_keys: [{k}], sudo: [{c}]}}\n\
             mounts:\n- [{s}, {mp}]\n",
            p = y(&format!("/srv/prop/{case}/{name}")),
            o = y(&owner),
            c = y(&content),
            g = y(&gecos),
            k = y(&key),
            s = y(&spec),
            mp = y(&format!("/srv/prop/{case}/mnt")),
        );
        let plan = match capkk_cloudinit::parse(yaml.as_bytes(), "", &capkk_cloudinit::TemplateVars::new()) {
            Ok(p) => p,
            Err(e) => {
                refused.push(e.to_string());
                continue;
            }
        };
        let before = upper_files(&host.upper_dir());
        // The run's outcome does not matter (a bad owner fails its step): only what it touched.
        let _ = capkk_service::provisioning::run(
            &*ex,
            &plan,
            &capkk_service::journal::NoProgress,
            &Redactor::default(),
        )
        .await;
        ran += 1;
        let after = upper_files(&host.upper_dir());
        let touched: Vec<&String> = after
            .iter()
            .filter(|(p, v)| before.get(*p) != Some(v))
            .map(|(p, _)| p)
            .collect();
        let outside: Vec<&&String> = touched.iter().filter(|p| !allowed(p)).collect();
        assert!(
            outside.is_empty(),
            "case {case} ({yaml}) wrote outside its paths: {outside:?}"
        );
    }
    assert!(ran >= 12, "only {ran} of 24 random payloads parsed: {refused:#?}");
}

/// The older of the two versions a reused host sees (the newer is [`K8S`]).
const K8S_OLD: &str = "v1.31.4";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_reset_and_claimed_for_another_kubernetes_version_runs_that_versions_kubelet_kubeadm_and_kubectl()
 {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[11];
    let ex = executor(sb, 11, "root");
    install_fakes(host, &*ex).await;
    let progress = RecordingProgress::default();
    let redactor = Redactor::default();
    let f = facts::gather(&*ex, &progress, &redactor).await.unwrap();
    let mirror = Mirror::start(sb).expect("mirror on the sandbox bridge");
    let old = stand_ins_of(&f.arch, "reuse", K8S_OLD);
    let new = stand_ins_of(&f.arch, "reuse", K8S);
    // Both serve the CNI archive at one path: the old one's (served last) is the one its checksum pins.
    new.serve(&mirror);
    old.serve(&mirror);
    // One KKCluster's component overrides carry both versions, each pinned to its own version, as a cluster
    // in the middle of an upgrade has them: which one applies is the Machine's version alone.
    let pinned = |si: &StandIns, v: &str| {
        si.overrides(&["containerd", "runc", "crictl"])
            .into_iter()
            .map(|o| ArtifactOverride {
                version: (o.id != "cni").then(|| v.to_owned()),
                ..o
            })
            .collect::<Vec<_>>()
    };
    let mut overrides = pinned(&old, K8S_OLD);
    overrides.extend(pinned(&new, K8S).into_iter().filter(|o| o.id != "cni"));
    let source = ComponentSource {
        zone: None,
        host: Some(mirror.base.clone()),
        overrides,
        download_on: DownloadOn::Controller,
    };
    let c = cache("reuse");
    let version_of = |si: &StandIns| {
        si.binaries
            .iter()
            .filter(|(p, _)| p.starts_with("/usr/local/bin/"))
            .map(|(p, body)| format!("{p} 755 {}", sha(body)))
            .collect::<Vec<_>>()
    };
    let paths = [
        "/usr/local/bin/kubeadm",
        "/usr/local/bin/kubelet",
        "/usr/local/bin/kubectl",
    ];
    let installed = |v: &'static str| {
        let cfg = BinaryConfig {
            kubernetes_version: v.into(),
            ..binary_config(&f, source.clone())
        };
        let (ex, c, progress, redactor, f) = (&ex, &c, &progress, &redactor, &f);
        async move {
            binary::ensure(&**ex, &cfg, f, c, progress, redactor)
                .await
                .unwrap_or_else(|e| panic!("binaries of {v}: {e}"))
        }
    };

    // Version A, as the first Machine on this host had it.
    let first = installed(K8S_OLD).await;
    assert!(first.changed, "{first:?}");
    assert_eq!(file_states(host, &paths), version_of(&old));
    assert_eq!(
        sh(host, "kubelet --version; kubeadm version -o short"),
        format!("Kubernetes {K8S_OLD}\n{K8S_OLD}\n")
    );
    // A kubeadm-built node as reset finds it; the binaries are not reset-owned and stay.
    sh(
        host,
        "mkdir -p /etc/kubernetes/pki /var/lib/kubelet && echo admin > /etc/kubernetes/admin.conf",
    );
    bootstrap::reset(&*ex, &ResetOptions::default(), &progress, &redactor)
        .await
        .unwrap();
    assert_eq!(
        file_states(host, &paths),
        version_of(&old),
        "reset keeps the binaries: the next claim must replace them"
    );

    // Version B: the host is claimed for a Machine of another version.
    let second = installed(K8S).await;
    assert!(second.changed, "{second:?}");
    let mut replaced = second.uploaded.clone();
    replaced.sort();
    assert_eq!(
        replaced,
        [
            format!("cni {CNI} ({})", f.arch),
            format!("kubeadm {K8S} ({})", f.arch),
            format!("kubectl {K8S} ({})", f.arch),
            format!("kubelet {K8S} ({})", f.arch),
        ],
        "every Kubernetes binary of {K8S} is installed (and the CNI plugins, as reset removes /opt/cni)"
    );
    assert_eq!(
        file_states(host, &paths),
        version_of(&new),
        "the host still runs {K8S_OLD}'s binaries after a claim for {K8S}"
    );
    assert_eq!(
        sh(host, "kubelet --version; kubeadm version -o short"),
        format!("Kubernetes {K8S}\n{K8S}\n"),
        "the kubelet on the reused host is not {K8S}'s"
    );
    // And back: a host is never stuck on the newest version it ever ran either.
    installed(K8S_OLD).await;
    assert_eq!(file_states(host, &paths), version_of(&old));

    // In place (CAPI's UpdateMachine), no reset: a joined node of the old version moves to the new one.
    sh(
        host,
        "mkdir -p /etc/kubernetes && echo kubelet > /etc/kubernetes/kubelet.conf && : > /var/log/capkk-kubeadm.log",
    );
    let cfg = BinaryConfig {
        kubernetes_version: K8S.into(),
        ..binary_config(&f, source.clone())
    };
    let opts = upgrade::UpgradeOptions::default();
    let up = upgrade::upgrade_node(&*ex, &cfg, &f, &c, &opts, &progress, &redactor)
        .await
        .unwrap_or_else(|e| panic!("in-place upgrade: {e}"));
    assert_eq!(up.changed, ["kubeadm-upgrade-node", "restart-kubelet"]);
    assert_eq!(file_states(host, &paths), version_of(&new));
    assert_eq!(
        sh(host, "cat /var/log/capkk-kubeadm.log"),
        "kubeadm upgrade node\n"
    );
    assert!(
        systemctl_mutations(host).iter().any(|l| l == "restart kubelet"),
        "{:?}",
        systemctl_mutations(host)
    );
    assert_eq!(
        sh(host, "systemctl is-active kubelet; kubelet --version"),
        format!("active\nKubernetes {K8S}\n")
    );
    // CAPI calls UpdateMachine until done: a repeated run uploads nothing.
    let again = upgrade::upgrade_node(&*ex, &cfg, &f, &c, &opts, &progress, &redactor)
        .await
        .unwrap();
    assert!(again.binaries.uploaded.is_empty(), "{again:?}");
    sh(host, "systemctl stop kubelet");
}
