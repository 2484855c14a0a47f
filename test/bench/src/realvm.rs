//! `capkk-bench real-vm`: capkk-rs and CAPKK v3 (the bench's Go driver) each install the real node artifacts
//! (kubeadm, kubelet, kubectl, CNI plugins, containerd, runc, crictl from `test/vm/artifacts`) on a freshly
//! booted QEMU VM of the same image and size, one method after the other, never both at once. The workload is
//! what both providers' host services do on a bare machine: the binary service (download on the controller,
//! checksum, upload, install, kubelet unit) and the container manager (containerd, runc, crictl, config, unit,
//! start). Provisioning (the bootstrap data's `kubeadm init`) is left out: a bare VM has no control plane to
//! init against or join, and that step's time would be kubeadm's, not the provider's.
//!
//! After each method the VM is checked over a separate `ssh`: every binary installed with the digest the
//! mirror served, containerd active and answering on its CRI socket, kubelet enabled. See docs/benchmarks.md.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, bail};
use capkk_service::{
    binary::{ArtifactCache, ArtifactRequest, BinaryConfig, ComponentSource, resolve},
    containermanager::{ContainerdConfig, DEFAULT_CRI_SOCKET},
    journal::{NoProgress, Redactor},
};
use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, PoolConfig, SshPool};
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::{
    hosts::{self, write},
    methods::{self, Method, V3Checksum, V3Override, V3Services},
    ours::Components,
    results,
};

/// What the VM check runs (the expected digests are prepended as `EXPECT`).
const VERIFY_SCRIPT: &str = include_str!("real-vm-verify.sh");
/// Stands for the mirror's address while URLs are resolved, before any VM (and so any bridge) exists.
const PLACEHOLDER: &str = "http://mirror.invalid";
/// The phases of the table, in order: CAPKK v3's driver labels and capkk-rs's timers map onto these.
const PHASES: [&str; 3] = ["connect", "binary service", "container manager"];

/// Arguments of `capkk-bench real-vm`.
#[derive(clap::Args, Clone)]
pub struct RealVmArgs {
    /// Methods in the order they run, each on its own freshly booted VM: `ours` and `capkk-v3`.
    #[arg(long, value_delimiter = ',', default_value = "ours,capkk-v3")]
    methods: Vec<Method>,
    /// Size of every VM, CPUSxMIB.
    #[arg(long, default_value = "2x2048")]
    vm: capkk_vm::VmSpec,
    /// Prefix of the fleets' names: `<name>-rs` and `<name>-v3` (one VM each, `<fleet>-1`).
    #[arg(long, default_value = "bv")]
    name: String,
    /// The capkk-v3 driver (`test/bench/capkk-v3/build.sh` builds it and prints its path).
    #[arg(long, env = "CAPKK_BENCH_V3_DRIVER")]
    capkk_v3_driver: Option<PathBuf>,
    /// The node artifacts' `current.env` [default: $CAPKK_CACHE/node-artifacts/current.env].
    #[arg(long)]
    node_artifacts: Option<PathBuf>,
    /// Where the table and the JSON results go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Scratch: controller-side caches and CAPKK's rootfs (fresh per method: every run downloads).
    #[arg(long, default_value = "/tmp/kkbench-real")]
    scratch: PathBuf,
    /// How often CAPKK v3 runs a failed phase again (a requeued reconcile), as in `capkk-bench ssh`.
    #[arg(long, default_value_t = 5)]
    retries: usize,
    /// Abort a method's run after this many seconds.
    #[arg(long, default_value_t = 1800)]
    run_timeout: u64,
    /// Run on a sandbox host (shared kernel, systemctl shim) instead of a VM: checks the bench's code path in
    /// a minute, measures nothing worth keeping.
    #[arg(long)]
    sandbox: bool,
}

/// The node artifacts' versions and where their mirror tree is (`current.env` of test/vm/artifacts).
#[derive(Clone, Debug, Serialize)]
struct NodeArtifacts {
    dir: String,
    mirror_dir: PathBuf,
    kubernetes: String,
    containerd: String,
    runc: String,
    crictl: String,
    cni: String,
}

impl NodeArtifacts {
    fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading {} (run `make node-artifacts`)", path.display()))?;
        let env = parse_env(&text);
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .with_context(|| format!("{} has no {k}", path.display()))
        };
        Ok(Self {
            dir: get("NODE_ARTIFACTS_DIR")?,
            mirror_dir: PathBuf::from(get("NODE_MIRROR_DIR")?),
            kubernetes: get("KUBE_VERSION")?,
            containerd: get("CONTAINERD_VERSION")?,
            runc: get("RUNC_VERSION")?,
            crictl: get("CRICTL_VERSION")?,
            cni: get("CNI_VERSION")?,
        })
    }

    /// capkk-rs's artifact ids with the versions the mirror carries.
    fn versions(&self) -> [(&'static str, &str); 7] {
        [
            ("kubeadm", &self.kubernetes),
            ("kubelet", &self.kubernetes),
            ("kubectl", &self.kubernetes),
            ("cni", &self.cni),
            ("containerd", &self.containerd),
            ("runc", &self.runc),
            ("crictl", &self.crictl),
        ]
    }
}

/// `KEY=VALUE` lines of a sourceable env file (comments and other lines skipped, backslash escapes undone).
fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .map(|(k, v)| {
            let mut out = String::new();
            let mut chars = v.trim().chars();
            while let Some(c) = chars.next() {
                out.push(if c == '\\' {
                    chars.next().unwrap_or('\\')
                } else {
                    c
                });
            }
            (k.to_owned(), out)
        })
        .collect()
}

/// One release file as served: where each provider asks for it, its bytes and what it must install.
struct Served {
    /// capkk-rs's artifact id.
    id: &'static str,
    /// Path under the mirror's base where capkk-rs's catalogue asks for it.
    path: String,
    body: Arc<Vec<u8>>,
    sha256: String,
}

/// Everything both methods get: the artifacts, capkk-rs's `spec.component`, CAPKK's inputs, and for each
/// installed binary the digest the VM must hold afterwards.
struct Inputs {
    served: Vec<Served>,
    /// Extra paths CAPKK v3 asks for (its fixed CNI and runc versions, its URL layout): path → index in `served`.
    v3_paths: Vec<(String, usize)>,
    components: Components,
    v3: V3Services,
    /// Installed file name → SHA-256 (binaries as served, archives' members).
    expect: BTreeMap<String, String>,
    bytes: u64,
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn inputs(a: &RealVmArgs, node: &NodeArtifacts, v3_driver: Option<&Path>) -> anyhow::Result<Inputs> {
    let source = ComponentSource {
        host: Some(PLACEHOLDER.into()),
        ..Default::default()
    };
    let mut served = Vec::new();
    let mut components = Components::default();
    for (id, version) in node.versions() {
        let art = resolve(&ArtifactRequest::new(id, version, "amd64"), &source)?;
        let path = art
            .url
            .strip_prefix(PLACEHOLDER)
            .with_context(|| format!("{} is not on the mirror", art.url))?
            .to_owned();
        let file = node.mirror_dir.join(path.trim_start_matches('/'));
        let body = std::fs::read(&file)
            .with_context(|| format!("reading {} (the node artifacts' mirror)", file.display()))?;
        let sha256 = sha256_hex(&body);
        components
            .pins
            .push((id.to_owned(), version.to_owned(), sha256.clone()));
        served.push(Served {
            id,
            path,
            body: Arc::new(body),
            sha256,
        });
    }
    let mut v3 = V3Services {
        mirror: PLACEHOLDER.into(),
        kubernetes_version: node.kubernetes.clone(),
        arch: "amd64".into(),
        containerd_version: node.containerd.clone(),
        crictl_version: node.crictl.clone(),
        cri_socket: DEFAULT_CRI_SOCKET.into(),
        overrides: Vec::new(),
    };
    let mut v3_paths = Vec::new();
    if let Some(driver) = v3_driver {
        for (id, version, url) in methods::v3_urls(driver, &a.scratch.join("capkk-v3-urls"), &v3)? {
            let ours = if id == "kubecni" { "cni" } else { id.as_str() };
            let i = served
                .iter()
                .position(|s| s.id == ours)
                .with_context(|| format!("CAPKK's {id} is none of the node artifacts"))?;
            let path = url
                .strip_prefix(PLACEHOLDER)
                .with_context(|| format!("CAPKK's {url} is not on the mirror"))?;
            if path != served[i].path {
                v3_paths.push((path.to_owned(), i));
            }
            v3.overrides.push(V3Override {
                id,
                arch: "amd64".into(),
                version,
                checksum: V3Checksum {
                    value: served[i].sha256.clone(),
                },
            });
        }
    }
    let expect = expected_files(&served, &a.scratch.join("expect"))?;
    let bytes = served.iter().map(|s| s.body.len() as u64).sum();
    Ok(Inputs {
        served,
        v3_paths,
        components,
        v3,
        expect,
        bytes,
    })
}

/// What the VM must hold after either method: each bare binary as served, each archive's executables (found
/// with `tar` in `dir`) by file name.
fn expected_files(served: &[Served], dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let mut expect = BTreeMap::new();
    for s in served {
        if !s.path.ends_with(".tgz") && !s.path.ends_with(".tar.gz") {
            // runc is served as `runc.amd64` and installed as `runc`.
            expect.insert(s.id.to_owned(), s.sha256.clone());
            continue;
        }
        let into = dir.join(s.id);
        std::fs::create_dir_all(&into)?;
        let archive = dir.join(format!("{}.tgz", s.id));
        write(&archive, &s.body)?;
        let out = Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&into)
            .output()
            .context("running tar")?;
        if !out.status.success() {
            bail!(
                "tar -xzf {}: {}",
                archive.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for f in walk(&into)? {
            let meta = std::fs::metadata(&f)?;
            if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 == 0 {
                continue;
            }
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            expect.insert(name, sha256_hex(&std::fs::read(&f)?));
        }
    }
    Ok(expect)
}

fn walk(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            out.extend(walk(&p)?);
        } else if p.is_file() {
            out.push(p);
        }
    }
    Ok(out)
}

/// The machine a method runs against: a fresh VM (or, with `--sandbox`, a fresh sandbox host).
struct Target {
    /// The [`capkk_vm::Fleet`] or [`capkk_sandbox::Sandbox`]: either tears itself down when dropped.
    _guard: Box<dyn std::any::Any>,
    name: String,
    address: String,
    fingerprint: String,
    key: PathBuf,
    known_hosts: PathBuf,
    /// The machine's address on the target's bridge: the mirror listens here.
    bridge_address: String,
    /// QEMU start → SSH ready (0 for a sandbox host).
    boot_s: f64,
    /// The VM image's content hash (empty for a sandbox host).
    image: String,
}

fn fleet_name(a: &RealVmArgs, m: Method) -> String {
    format!(
        "{}-{}",
        a.name,
        match m {
            Method::CapkkV3 => "v3",
            _ => "rs",
        }
    )
}

fn boot(a: &RealVmArgs, m: Method, scratch: &Path) -> anyhow::Result<Target> {
    let name = fleet_name(a, m);
    if a.sandbox {
        let sb = capkk_sandbox::Sandbox::up(&capkk_sandbox::SandboxConfig::new(name.clone(), 1))
            .context("building the sandbox host")?;
        let (name, address, fingerprint, known_hosts) = {
            let list = sb.hosts();
            let h = &list[0];
            // A node's sshd serves SFTP (CAPKK copies files over it); the sandbox's does not by default.
            h.sh_inside(
                "grep -q '^Subsystem sftp' /etc/ssh/sshd_config.capkk || \
                 echo 'Subsystem sftp /usr/lib/openssh/sftp-server' >> /etc/ssh/sshd_config.capkk",
            )?;
            h.restart_sshd()?;
            let spec = hosts::HostSpec::from_sandbox(h)?;
            spec.install_standins()?;
            let known_hosts = scratch.join(format!("{name}.known_hosts"));
            write(&known_hosts, spec.known_hosts_line()?.as_bytes())?;
            (
                h.info.name.clone(),
                h.info.address.clone(),
                h.info.host_key_fingerprint.clone(),
                known_hosts,
            )
        };
        return Ok(Target {
            name,
            address,
            fingerprint,
            key: sb.credentials().ed25519_key.clone(),
            known_hosts,
            bridge_address: format!("198.18.{}.1", sb.state().index),
            boot_s: 0.0,
            image: String::new(),
            _guard: Box::new(sb),
        });
    }
    let fleet =
        capkk_vm::Fleet::up(&capkk_vm::FleetConfig::new(name, vec![a.vm])).context("booting the VM")?;
    let st = fleet.state().clone();
    let vm = st.vms[0].clone();
    // Untimed and the same for both methods: the host resolves its own name, as a Debian install does
    // (127.0.1.1 in /etc/hosts). The test image leaves that to the provider's bootstrap, which is not part of
    // the workload; without it every `sudo` prints "unable to resolve host" into CAPKK v3's PTY output, which
    // its Copy then fails to parse.
    fleet
        .sh(
            0,
            &format!(
                "grep -qw '{0}' /etc/hosts || echo '127.0.1.1 {0}' >> /etc/hosts",
                vm.name
            ),
        )
        .context("adding the host's name to /etc/hosts")?;
    Ok(Target {
        name: vm.name,
        address: vm.address,
        fingerprint: vm.host_key_fingerprint,
        key: st.private_key,
        known_hosts: st.known_hosts,
        bridge_address: st.bridge_address,
        boot_s: vm.boot_secs,
        image: st.image_hash,
        _guard: Box::new(fleet),
    })
}

/// One method's run, as kept in the results file.
#[derive(Clone, Debug, Default, Serialize)]
struct Run {
    method: String,
    host: String,
    address: String,
    boot_s: f64,
    /// `(phase, seconds)` in [`PHASES`] order (a phase CAPKK ran again is summed over its attempts).
    phases: Vec<(String, f64)>,
    /// The method's whole run, measured by the orchestrator (capkk-v3: the driver process's start to exit).
    total_s: f64,
    /// Artifact GETs the mirror answered during the run (checksum files not counted).
    downloads: usize,
    /// CAPKK v3's phase retries.
    retries: usize,
    /// Why the run failed, if it did.
    error: Option<String>,
    /// What the check on the VM found wrong (empty: verified).
    problems: Vec<String>,
    /// What the check found installed (`name path`).
    installed: Vec<String>,
    /// Whether containerd answered `crictl version` (`ok`, or `not served: <why>`): reported, not required.
    cri: String,
}

impl Run {
    fn ok(&self) -> bool {
        self.error.is_none() && self.problems.is_empty()
    }

    fn phase(&self, p: &str) -> Option<f64> {
        self.phases.iter().find(|(l, _)| l == p).map(|(_, s)| *s)
    }
}

/// Run `capkk-bench real-vm`.
pub fn run(a: &RealVmArgs) -> anyhow::Result<()> {
    if a.methods.is_empty()
        || a.methods
            .iter()
            .any(|m| !matches!(m, Method::Ours | Method::CapkkV3))
    {
        bail!("--methods takes ours and/or capkk-v3");
    }
    if a.sandbox
        && let Some(reason) = capkk_sandbox::unsupported_reason()
    {
        bail!("--sandbox needs sandbox hosts: {reason}");
    }
    let v3_driver = if a.methods.contains(&Method::CapkkV3) {
        let d = a.capkk_v3_driver.clone().unwrap_or_default();
        methods::require_exe(
            &d,
            "set CAPKK_BENCH_V3_DRIVER or --capkk-v3-driver to the path `test/bench/capkk-v3/build.sh` prints \
             (`make bench-real-vm` does), or leave capkk-v3 out of --methods",
        )?;
        Some(d)
    } else {
        None
    };
    let env_file = a.node_artifacts.clone().unwrap_or_else(|| {
        let cache = std::env::var("CAPKK_CACHE")
            .unwrap_or_else(|_| format!("{}/.cache/capkk-rs", std::env::var("HOME").unwrap_or_default()));
        Path::new(&cache).join("node-artifacts/current.env")
    });
    let node = NodeArtifacts::load(&env_file)?;
    let _ = std::fs::remove_dir_all(&a.scratch);
    std::fs::create_dir_all(&a.scratch)?;
    std::fs::create_dir_all(&a.out)?;
    let inp = inputs(a, &node, v3_driver.as_deref())?;
    eprintln!(
        "capkk-bench real-vm: {} node artifacts, {:.1} MiB; {} installed files to check",
        inp.served.len(),
        inp.bytes as f64 / 1048576.0,
        inp.expect.len()
    );
    let load_start = crate::load_average();
    let started_at = SystemTime::now();
    let mut runs = Vec::new();
    let mut image = String::new();
    for &m in &a.methods {
        eprintln!(
            "capkk-bench real-vm: {}: booting {} (load average {})",
            m.display(),
            if a.sandbox { "a sandbox host" } else { "a VM" },
            crate::load_average()
        );
        let run = match boot(a, m, &a.scratch) {
            Ok(t) => {
                image.clone_from(&t.image);
                let r = run_on(a, m, &t, &inp, v3_driver.as_deref());
                // The target (VM or sandbox) is torn down here, before the next method boots its own.
                drop(t);
                r
            }
            Err(e) => Run {
                method: m.display().into(),
                error: Some(format!("{e:#}")),
                ..Default::default()
            },
        };
        eprintln!(
            "capkk-bench real-vm: {}: {:.2} s total, {} downloads, {}",
            m.display(),
            run.total_s,
            run.downloads,
            match (&run.error, run.problems.len()) {
                (Some(e), _) => format!("FAILED: {e}"),
                (None, 0) => "verified on the host".into(),
                (None, n) => format!("{n} problems on the host"),
            }
        );
        runs.push(run);
    }
    let load_end = crate::load_average();
    let report = Report {
        target: if a.sandbox {
            "a fresh sandbox host each (shared kernel, systemctl shim: a code-path check, not a measurement)"
                .into()
        } else {
            format!(
                "a freshly booted VM each ({} vCPU, {} MiB, {:?}, image {})",
                a.vm.cpus,
                a.vm.memory_mib,
                capkk_vm::Accel::from_env().unwrap_or(capkk_vm::Accel::Tcg),
                short(&image)
            )
        },
        artifacts: format!(
            "Kubernetes {}, containerd {}, runc {}, crictl {}, CNI plugins {}; {:.1} MiB",
            node.kubernetes,
            node.containerd,
            node.runc,
            node.crictl,
            node.cni,
            inp.bytes as f64 / 1048576.0
        ),
        machine: crate::machine(),
        load_start: load_start.clone(),
        load_end,
        runs: runs.clone(),
    };
    let text = report.render();
    let out = std::fs::canonicalize(&a.out)?;
    results::write(
        &out.join("real-vm-results.json"),
        &results::Meta::new("real-vm", started_at, &load_start),
        serde_json::json!({
            "target": report.target,
            "sandbox": a.sandbox,
            "vm": {"cpus": a.vm.cpus, "memory_mib": a.vm.memory_mib},
            "image": image,
            "node_artifacts": node,
            "artifact_bytes": inp.bytes,
            "workload": "binary service + container manager (no facts/bootstrap/provisioning for CAPKK v3; capkk-rs's facts probe is counted in its connect phase)",
            "runs": runs,
        }),
    )?;
    write(&out.join("real-vm-table.md"), text.as_bytes())?;
    print!("{text}");
    let failed: Vec<String> = runs
        .iter()
        .filter(|r| !r.ok())
        .map(|r| {
            format!(
                "{}: {}",
                r.method,
                r.error.clone().unwrap_or_else(|| r.problems.join("; "))
            )
        })
        .collect();
    if !failed.is_empty() {
        bail!("not every run was verified:\n  {}", failed.join("\n  "));
    }
    Ok(())
}

fn short(s: &str) -> &str {
    s.get(..12).unwrap_or(s)
}

/// Start the mirror on the target's bridge, run method `m` against it, check the host.
fn run_on(a: &RealVmArgs, m: Method, t: &Target, inp: &Inputs, v3_driver: Option<&Path>) -> Run {
    let mut run = Run {
        method: m.display().into(),
        host: t.name.clone(),
        address: t.address.clone(),
        boot_s: t.boot_s,
        ..Default::default()
    };
    let result = (|| {
        let mirror = capkk_sandbox::mirror::Mirror::start_on(&t.bridge_address)
            .with_context(|| format!("starting the mirror on {}", t.bridge_address))?;
        for s in &inp.served {
            crate::artifacts::publish(&mirror, &s.path, s.body.clone());
        }
        for (path, i) in &inp.v3_paths {
            crate::artifacts::publish(&mirror, path, inp.served[*i].body.clone());
        }
        let work = a.scratch.join(fleet_name(a, m));
        std::fs::create_dir_all(&work)?;
        mirror.reset_downloads();
        let (phases, total, retries) = match m {
            Method::Ours => {
                let components = Components {
                    mirror: mirror.base.clone(),
                    pins: inp.components.pins.clone(),
                };
                let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
                let started = Instant::now();
                let limit = Duration::from_secs(a.run_timeout);
                let phases = rt.block_on(async {
                    tokio::time::timeout(limit, run_ours(t, &components, &work.join("cache"))).await
                });
                let total = started.elapsed().as_secs_f64();
                let phases =
                    phases.map_err(|_| anyhow::anyhow!("no result within {} s", a.run_timeout))??;
                (phases, total, 0)
            }
            _ => {
                let driver = v3_driver.context("no capkk-v3 driver")?;
                let mut services = inp.v3.clone();
                services.mirror.clone_from(&mirror.base);
                run_v3(a, t, driver, &services, &work)?
            }
        };
        run.phases = phases;
        run.total_s = total;
        run.retries = retries;
        run.downloads = mirror
            .downloads()
            .iter()
            .filter(|(p, _)| !p.contains(".sha256"))
            .map(|(_, n)| n)
            .sum();
        anyhow::Ok(())
    })();
    if let Err(e) = result {
        run.error = Some(format!("{e:#}"));
    }
    // Check the host even after a failed run: what is missing says where it stopped.
    match verify(t, &inp.expect) {
        Ok((installed, cri, problems)) => {
            run.installed = installed;
            run.cri = cri;
            run.problems = problems;
        }
        Err(e) => run.problems.push(format!("the check itself failed: {e:#}")),
    }
    run
}

/// capkk-rs's host services, as the KKInstance controller calls them: connect and facts (the services' input),
/// the binary service, the container manager; one pool, a cold controller-side artifact cache.
async fn run_ours(
    t: &Target,
    components: &Components,
    cache_dir: &Path,
) -> anyhow::Result<Vec<(String, f64)>> {
    let redactor = Redactor::default();
    let cache = ArtifactCache::new(cache_dir).context("creating the artifact cache")?;
    let pool = SshPool::new(PoolConfig::default());
    let target = HostTarget::new(t.address.clone(), "root", Auth::key_file(&t.key))
        .host_key(HostKeyPolicy::pinned(t.fingerprint.clone()));
    let exec = pool.executor(&target);
    let source = components.source();
    let mut phases = Vec::new();
    let result = async {
        let clock = Instant::now();
        let facts = capkk_service::facts::gather(exec.as_ref(), &NoProgress, &redactor)
            .await
            .context("facts")?;
        phases.push((PHASES[0].to_owned(), clock.elapsed().as_secs_f64()));
        let clock = Instant::now();
        let binary = BinaryConfig {
            kubernetes_version: components_version(components, "kubeadm")?,
            arch: "amd64".into(),
            cni_version: Some(components_version(components, "cni")?),
            source: source.clone(),
            node_ip: Some(t.address.clone()),
            node_name: Some(t.name.clone()),
        };
        capkk_service::binary::ensure(exec.as_ref(), &binary, &facts, &cache, &NoProgress, &redactor)
            .await
            .context("binary service")?;
        phases.push((PHASES[1].to_owned(), clock.elapsed().as_secs_f64()));
        let clock = Instant::now();
        let containerd = ContainerdConfig {
            version: Some(components_version(components, "containerd")?),
            crictl_version: Some(components_version(components, "crictl")?),
            runc_version: Some(components_version(components, "runc")?),
            arch: "amd64".into(),
            source,
            ..Default::default()
        };
        capkk_service::containermanager::ensure(
            exec.as_ref(),
            &containerd,
            &facts,
            &cache,
            &NoProgress,
            &redactor,
        )
        .await
        .context("container manager")?;
        phases.push((PHASES[2].to_owned(), clock.elapsed().as_secs_f64()));
        anyhow::Ok(())
    }
    .await;
    pool.close_all().await;
    result.map(|()| phases)
}

fn components_version(c: &Components, id: &str) -> anyhow::Result<String> {
    c.pins
        .iter()
        .find(|(i, _, _)| i == id)
        .map(|(_, v, _)| v.clone())
        .with_context(|| format!("no pinned version of {id}"))
}

/// The capkk-v3 driver's job for one host without ops or bootstrap data: ping, CAPKK's binary service, its
/// container manager.
#[derive(Serialize)]
struct V3Job<'a> {
    user: &'a str,
    key: &'a Path,
    port: u16,
    work_dir: PathBuf,
    hosts: Vec<V3Host<'a>>,
    services: &'a V3Services,
    retries: usize,
}

#[derive(Serialize)]
struct V3Host<'a> {
    name: &'a str,
    address: &'a str,
}

#[derive(serde::Deserialize)]
struct V3Result {
    hosts: BTreeMap<String, V3HostResult>,
}

#[derive(serde::Deserialize)]
struct V3HostResult {
    #[serde(default)]
    steps: Vec<V3Step>,
    #[serde(default)]
    retries: usize,
    #[serde(default)]
    error: String,
}

#[derive(serde::Deserialize)]
struct V3Step {
    label: String,
    s: f64,
}

/// Which of [`PHASES`] a step of the capkk-v3 driver belongs to (its labels: `ping`, `binary service (…)`,
/// `container manager (…)`).
fn v3_phase(label: &str) -> Option<&'static str> {
    if label == "ping" {
        Some(PHASES[0])
    } else if label.starts_with("binary service") {
        Some(PHASES[1])
    } else if label.starts_with("container manager") {
        Some(PHASES[2])
    } else {
        None
    }
}

/// `(phase, seconds)` in [`PHASES`] order.
type Phases = Vec<(String, f64)>;

/// Sum the driver's steps into [`PHASES`] (a retried phase appears once per attempt).
fn v3_phases(steps: &[(String, f64)]) -> anyhow::Result<Vec<(String, f64)>> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for (label, s) in steps {
        let p = v3_phase(label).with_context(|| format!("unexpected capkk-v3 step {label:?}"))?;
        match out.iter_mut().find(|(l, _)| l == p) {
            Some((_, t)) => *t += s,
            None => out.push((p.to_owned(), *s)),
        }
    }
    Ok(out)
}

fn run_v3(
    a: &RealVmArgs,
    t: &Target,
    driver: &Path,
    services: &V3Services,
    work: &Path,
) -> anyhow::Result<(Phases, f64, usize)> {
    let job = V3Job {
        user: "root",
        key: &t.key,
        port: 22,
        work_dir: work.join("capkk-v3"),
        hosts: vec![V3Host {
            name: &t.name,
            address: &t.address,
        }],
        services,
        retries: a.retries,
    };
    let path = work.join("job.json");
    write(&path, serde_json::to_string(&job)?.as_bytes())?;
    let started = Instant::now();
    let mut child = Command::new(driver)
        .arg("-job")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", driver.display()))?;
    let (out_r, err_r) = (child.stdout.take(), child.stderr.take());
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            s
        })
    };
    let out_t = read(out_r.map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
    let err_t = read(err_r.map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
    let Some(status) = crate::measure::wait_until(&mut child, started + Duration::from_secs(a.run_timeout))?
    else {
        bail!("the capkk-v3 driver did not finish within {} s", a.run_timeout);
    };
    let total = started.elapsed().as_secs_f64();
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    let res: V3Result = serde_json::from_slice(&stdout).with_context(|| {
        format!(
            "the capkk-v3 driver ({status}) printed no result: {}",
            String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(2000)..])
        )
    })?;
    let host = res
        .hosts
        .get(&t.name)
        .with_context(|| format!("the capkk-v3 driver reported no {}", t.name))?;
    if !host.error.is_empty() || !status.success() {
        bail!("capkk-v3 ({status}): {}", host.error);
    }
    let steps: Vec<(String, f64)> = host.steps.iter().map(|s| (s.label.clone(), s.s)).collect();
    Ok((v3_phases(&steps)?, total, host.retries))
}

/// Check the host over a fresh `ssh` (not the methods' connections): returns what is installed, whether
/// containerd serves the CRI, and the problems found.
fn verify(
    t: &Target,
    expect: &BTreeMap<String, String>,
) -> anyhow::Result<(Vec<String>, String, Vec<String>)> {
    let list: String = expect.iter().map(|(n, s)| format!("{n} {s}\n")).collect();
    let script = format!("EXPECT='{list}'\n{VERIFY_SCRIPT}");
    let mut cmd = Command::new("ssh");
    cmd.args([
        "-i",
        &t.key.display().to_string(),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        &format!("UserKnownHostsFile={}", t.known_hosts.display()),
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=30",
        "-o",
        "LogLevel=ERROR",
        &format!("root@{}", t.address),
        "bash -s",
    ]);
    let out = hosts::run_with_stdin(cmd, Some(script.as_bytes())).context("ssh to the host")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let installed = text
        .lines()
        .filter_map(|l| l.strip_prefix("installed: "))
        .map(str::to_owned)
        .collect();
    let mut problems: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("problem: "))
        .map(str::to_owned)
        .collect();
    if !out.status.success() && problems.is_empty() {
        problems.push(format!(
            "the check exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if !text.lines().any(|l| l == "check: done") {
        problems.push("the check did not run to its end".into());
    }
    let cri = text
        .lines()
        .find_map(|l| l.strip_prefix("cri: "))
        .unwrap_or("not checked")
        .to_owned();
    Ok((installed, cri, problems))
}

/// What the bench prints.
struct Report {
    target: String,
    artifacts: String,
    machine: String,
    load_start: String,
    load_end: String,
    runs: Vec<Run>,
}

impl Report {
    fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "capkk-bench real-vm: one run per method, one method after the other, on {}; the real node \
             artifacts ({}) from one mirror on the host's bridge; workload: binary service + container manager; \
             every run checked on the host",
            self.target, self.artifacts
        );
        let _ = writeln!(s, "machine: {}", self.machine);
        let _ = writeln!(
            s,
            "load average at start: {}; at end: {}",
            self.load_start, self.load_end
        );
        let _ = writeln!(s);
        let head: Vec<String> = self.runs.iter().map(|r| format!("{} (s)", r.method)).collect();
        let _ = writeln!(s, "| phase | {} |", head.join(" | "));
        let _ = writeln!(s, "|---|{}", "---:|".repeat(self.runs.len()));
        let cell = |r: &Run, v: Option<f64>| match v {
            Some(v) if r.error.is_none() => format!("{v:.2}"),
            _ => "failed".into(),
        };
        for p in PHASES {
            let cells: Vec<String> = self.runs.iter().map(|r| cell(r, r.phase(p))).collect();
            let label = match p {
                "connect" => "connect (capkk-rs: SSH + facts; capkk-v3: ping)",
                "binary service" => "binary service (kubeadm, kubelet, kubectl, CNI; kubelet unit)",
                _ => "container manager (containerd, runc, crictl; config, unit, start)",
            };
            let _ = writeln!(s, "| {label} | {} |", cells.join(" | "));
        }
        let totals: Vec<String> = self.runs.iter().map(|r| cell(r, Some(r.total_s))).collect();
        let _ = writeln!(s, "| **total** | {} |", totals.join(" | "));
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "| method | host | boot (s) | downloads | phase retries | checked on the host | CRI (`crictl version`) |"
        );
        let _ = writeln!(s, "|---|---|---:|---:|---:|---|---|");
        for r in &self.runs {
            let checked = match (&r.error, r.problems.len()) {
                (Some(_), _) => "run failed".to_owned(),
                (None, 0) => format!("ok ({} files, containerd active)", r.installed.len()),
                (None, n) => format!("{n} problems"),
            };
            let cri = if r.cri == "ok" || r.cri.is_empty() {
                r.cri.as_str()
            } else {
                "not served (below)"
            };
            let _ = writeln!(
                s,
                "| {} | {} {} | {:.0} | {} | {} | {checked} | {cri} |",
                r.method, r.host, r.address, r.boot_s, r.downloads, r.retries
            );
        }
        let _ = writeln!(s);
        for r in self.runs.iter().filter(|r| !r.ok()) {
            if let Some(e) = &r.error {
                let _ = writeln!(s, "{}: FAILED: {e}", r.method);
            }
            for p in &r.problems {
                let _ = writeln!(s, "{}: problem: {p}", r.method);
            }
        }
        for r in self.runs.iter().filter(|r| !r.cri.is_empty() && r.cri != "ok") {
            let _ = writeln!(s, "{}: containerd's CRI {}", r.method, r.cri);
        }
        let find = |m: &str| self.runs.iter().find(|r| r.method == m && r.ok());
        if let (Some(rs), Some(v3)) = (find("capkk-rs"), find("capkk-v3")) {
            let _ = writeln!(
                s,
                "ratio capkk-v3/capkk-rs real-vm: {:.2}",
                v3.total_s / rs.total_s
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(method: &str, phases: [f64; 3], total: f64) -> Run {
        Run {
            method: method.into(),
            host: format!("{method}-1"),
            address: "198.18.9.11".into(),
            phases: PHASES
                .iter()
                .zip(phases)
                .map(|(p, s)| ((*p).to_owned(), s))
                .collect(),
            total_s: total,
            downloads: 7,
            installed: vec!["kubeadm /usr/local/bin/kubeadm".into()],
            cri: "ok".into(),
            ..Default::default()
        }
    }

    fn report(runs: Vec<Run>) -> Report {
        Report {
            target: "a VM".into(),
            artifacts: "Kubernetes v1.36.3".into(),
            machine: "2 cores".into(),
            load_start: "1.00 1.00 1.00".into(),
            load_end: "2.00 2.00 2.00".into(),
            runs,
        }
    }

    #[test]
    fn the_table_has_every_phase_and_the_ratio_line_comes_last() {
        let text = report(vec![
            measured("capkk-rs", [0.5, 10.0, 9.5], 20.0),
            measured("capkk-v3", [1.0, 30.0, 19.0], 50.0),
        ])
        .render();
        assert!(text.contains("| phase | capkk-rs (s) | capkk-v3 (s) |"), "{text}");
        assert!(
            text.contains(
                "| binary service (kubeadm, kubelet, kubectl, CNI; kubelet unit) | 10.00 | 30.00 |"
            )
        );
        assert!(text.contains("| **total** | 20.00 | 50.00 |"));
        assert_eq!(text.lines().last(), Some("ratio capkk-v3/capkk-rs real-vm: 2.50"));
    }

    #[test]
    fn a_run_with_problems_on_the_host_gets_no_ratio() {
        let mut bad = measured("capkk-v3", [1.0, 30.0, 19.0], 50.0);
        bad.problems.push("containerd is failed".into());
        let text = report(vec![measured("capkk-rs", [0.5, 10.0, 9.5], 20.0), bad]).render();
        assert!(!text.contains("ratio"), "{text}");
        assert!(text.contains("capkk-v3: problem: containerd is failed"));
        assert!(text.contains("| 1 problems |"));
    }

    #[test]
    fn a_containerd_without_cri_is_reported_but_keeps_the_ratio() {
        let mut v3 = measured("capkk-v3", [1.0, 30.0, 19.0], 50.0);
        v3.cri = "not served: unknown service runtime.v1.RuntimeService".into();
        let text = report(vec![measured("capkk-rs", [0.5, 10.0, 9.5], 20.0), v3]).render();
        assert!(text.contains("| not served (below) |"), "{text}");
        assert!(text.contains("capkk-v3: containerd's CRI not served: unknown service"));
        assert_eq!(text.lines().last(), Some("ratio capkk-v3/capkk-rs real-vm: 2.50"));
    }

    #[test]
    fn a_failed_run_shows_failed_cells() {
        let mut bad = measured("capkk-v3", [1.0, 0.0, 0.0], 3.0);
        bad.phases.truncate(1);
        bad.error = Some("binary service: checksum mismatch".into());
        let text = report(vec![bad]).render();
        assert!(text.contains("| **total** | failed |"), "{text}");
        assert!(text.contains("capkk-v3: FAILED: binary service: checksum mismatch"));
    }

    #[test]
    fn capkk_v3_steps_are_summed_into_the_phases() {
        let steps = vec![
            ("ping".to_owned(), 0.25),
            ("binary service (CAPKK pkg/service/binary)".to_owned(), 2.0),
            ("binary service (CAPKK pkg/service/binary)".to_owned(), 3.0),
            (
                "container manager (CAPKK pkg/service/containermanager)".to_owned(),
                4.0,
            ),
        ];
        assert_eq!(
            v3_phases(&steps).unwrap(),
            vec![
                ("connect".to_owned(), 0.25),
                ("binary service".to_owned(), 5.0),
                ("container manager".to_owned(), 4.0),
            ]
        );
        assert!(v3_phases(&[("provisioning 1: mkdir".to_owned(), 1.0)]).is_err());
    }

    #[test]
    fn the_node_artifacts_env_file_is_read_like_a_shell_would() {
        let env =
            parse_env("# comment\nKUBE_VERSION=v1.36.3\nNODE_APT_PACKAGES=conntrack\\ socat\nnot a line\n");
        assert_eq!(env["KUBE_VERSION"], "v1.36.3");
        assert_eq!(env["NODE_APT_PACKAGES"], "conntrack socat");
        assert_eq!(env.len(), 2);
    }
}
