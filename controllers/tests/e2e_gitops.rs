//! GitOps with a real Flux: the cluster `clusterctl generate cluster` renders from the repository's templates is
//! committed to a git repository (served by Debian's `git http-backend` on 127.0.0.1), Flux's source-controller
//! and kustomize-controller (built from their Go modules, `make flux-bin`) apply it to the local management
//! plane, and the real CAPI controllers and the provider bring it up on sandbox hosts, the kubeadm simulator
//! (test/kubeadm-sim) standing in for kubeadm as in `make e2e`. Then:
//! - a suspended Kustomization holds: a commit changing the MachineDeployment's replicas is fetched but not
//!   applied for longer than Flux's interval; resumed, Flux applies it and the MachineDeployment scales;
//! - a hand edit (`kubectl patch`) of a field in git is reverted by Flux on its own (its interval, no poke);
//! - no field of an object Flux applied is owned by Flux and by the provider (managed fields), and every
//!   writer is named (the provider as `capkk-manager`, never the API server's "unknown");
//! - removing the cluster from the repository (prune) deletes it and resets every host.
//!
//! The SSH Secret is not in git (docs/gitops.md: a sealed or external secret makes it); here the test creates
//! it, and prune must leave it alone. Every step is timed and a table printed (also when a step fails).
//!
//! Tier: `e2e_*` runs in `make e2e` (hack/test-targets.sh), not in test-unit: it needs the management plane,
//! `make flux-bin`, root for sandbox hosts, and Go for the simulator.

mod common;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use common::{gitops::*, sandbox::*, *};
use serde_json::{Value, json};

const CLUSTER: &str = "gitops";
const MD: &str = "gitops-md-0";
/// Flux's own pace: how often it fetches the repository and re-applies what git says (drift correction).
const FLUX_INTERVAL: &str = "6s";
/// How long a suspended Kustomization must hold a fetched commit: past Flux's interval (the periodic path) and
/// well past the ~2-3 s a resumed one takes to apply a new commit (the event path).
const HOLD: Duration = Duration::from_secs(9);
const KUSTOMIZATION: &str = "gitops-cluster";

/// Wall time of each step; printed as a table at the end, or when the test fails part-way (drop).
struct Timings {
    rows: Vec<(String, Duration)>,
    last: Instant,
    start: Instant,
}

impl Timings {
    fn new() -> Timings {
        let now = Instant::now();
        Timings {
            rows: Vec::new(),
            last: now,
            start: now,
        }
    }

    fn step(&mut self, what: &str) {
        let now = Instant::now();
        self.rows.push((what.to_owned(), now - self.last));
        eprintln!("gitops: {what}: {:.1} s", (now - self.last).as_secs_f64());
        self.last = now;
    }
}

impl Drop for Timings {
    fn drop(&mut self) {
        let w = self.rows.iter().map(|(s, _)| s.len()).max().unwrap_or(4).max(5);
        eprintln!(
            "\n| {:<w$} | time (s) |\n|{}|----------|",
            "step",
            "-".repeat(w + 2)
        );
        for (s, d) in &self.rows {
            eprintln!("| {s:<w$} | {:>8.1} |", d.as_secs_f64());
        }
        eprintln!(
            "| {:<w$} | {:>8.1} |",
            "total",
            self.start.elapsed().as_secs_f64()
        );
    }
}

/// The kubeadm simulator with etcd and kube-apiserver embedded, built (or reused: build.sh keys it by its
/// sources and the embedded binaries) from the management plane's binaries.
fn kubeadm_simulator(bin_dir: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kubeadm-sim/kubeadm");
    let script = capkk_mgmt::repo_root().join("test/kubeadm-sim/build.sh");
    let status = std::process::Command::new("bash")
        .arg(&script)
        .arg(&out)
        .arg(bin_dir)
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(
        status.success(),
        "{} failed ({status}): Go is needed",
        script.display()
    );
    Ok(std::fs::read(&out)?)
}

/// Runs `program` with the plane's pinned binaries (kubectl, clusterctl) first on PATH; its stdout.
fn run(
    program: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
    bin_dir: &std::path::Path,
    home: &std::path::Path,
) -> anyhow::Result<String> {
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .env("PATH", path)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    ensure!(
        out.status.success(),
        "{} {args:?}: {}\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The one document of a multi-document YAML text whose kind is `kind`, changed by `f`.
fn edit_doc(yaml: &str, kind: &str, f: impl Fn(&str) -> anyhow::Result<String>) -> anyhow::Result<String> {
    let mut docs: Vec<String> = yaml.split("\n---\n").map(str::to_owned).collect();
    let marker = format!("\nkind: {kind}\n");
    let i = docs
        .iter()
        .position(|d| format!("\n{d}\n").contains(&marker))
        .with_context(|| format!("no {kind} in the rendered cluster"))?;
    docs[i] = f(&docs[i])?;
    Ok(docs.join("\n---\n"))
}

/// Machines of the cluster matching `selector` (label selector), as (name, phase, nodeRef name).
async fn machines(env: &TestEnv, selector: &str) -> anyhow::Result<Vec<(String, String, String)>> {
    let (api, _) = capkk_mgmt::dynamic_api(&env.client, CAPI_V, "Machine", &env.ns).await?;
    let list = api
        .list(&kube::api::ListParams::default().labels(selector))
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|m| {
            let v = serde_json::to_value(m).unwrap_or_default();
            (
                name(&v),
                v["status"]["phase"].as_str().unwrap_or_default().to_owned(),
                v["status"]["nodeRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect())
}

/// Waits until exactly `n` Machines match `selector`, all Running with a nodeRef.
async fn running(env: &TestEnv, selector: &str, n: usize, what: &str) -> anyhow::Result<()> {
    eventually(what, Duration::from_secs(200), || async {
        let ms = machines(env, selector).await?;
        Ok((ms.len() == n && ms.iter().all(|(_, p, node)| p == "Running" && !node.is_empty())).then_some(()))
    })
    .await
}

/// Waits until the Kustomization applied `commit` and is Ready.
async fn applied(env: &TestEnv, commit: &str, what: &str) -> anyhow::Result<Value> {
    eventually(what, Duration::from_secs(100), || async {
        let k = env
            .get("kustomize.toolkit.fluxcd.io/v1", "Kustomization", KUSTOMIZATION)
            .await?
            .unwrap_or_default();
        let rev = k["status"]["lastAppliedRevision"].as_str().unwrap_or_default();
        Ok((rev.ends_with(commit) && cond_state(&k, "Ready").0 == "True").then_some(k))
    })
    .await
}

/// Asks source-controller to fetch now, as a git host's webhook (Flux's notification receiver) would.
async fn poke_source(env: &TestEnv) -> anyhow::Result<()> {
    let now = format!("{:?}", Instant::now());
    env.merge(
        "source.toolkit.fluxcd.io/v1",
        "GitRepository",
        "fleet",
        json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": now}}}),
    )
    .await
}

/// Sets the Kustomization's `spec.suspend` (what `flux suspend/resume kustomization` do).
async fn suspend(env: &TestEnv, on: bool) -> anyhow::Result<()> {
    env.merge(
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        KUSTOMIZATION,
        json!({"spec": {"suspend": on}}),
    )
    .await
}

/// Waits until source-controller has an artifact of `commit` (fetched from the git server).
async fn fetched(env: &TestEnv, commit: &str) -> anyhow::Result<()> {
    eventually(
        "source-controller fetched the commit",
        Duration::from_secs(60),
        || async {
            let g = env
                .get("source.toolkit.fluxcd.io/v1", "GitRepository", "fleet")
                .await?
                .unwrap_or_default();
            let rev = g["status"]["artifact"]["revision"].as_str().unwrap_or_default();
            Ok(rev.ends_with(commit).then_some(()))
        },
    )
    .await
}

/// Every leaf field path of a managedFields `fieldsV1` tree (`f:spec.f:replicas`, `f:metadata.f:labels...`).
fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match v.as_object() {
        Some(m) if m.keys().any(|k| k != ".") => {
            for (k, child) in m {
                if k != "." {
                    leaves(&format!("{prefix}.{k}"), child, out);
                }
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

/// A field manager ("name (operation)") and the leaf paths of the fields it owns.
type Owned = (String, Vec<String>);

/// For an object: (manager, field) pairs where a field Flux owns is also owned by another manager (status
/// subresource entries aside: Flux never writes status), and each manager present with the fields it owns.
fn shared_fields(obj: &Value) -> (Vec<(String, String)>, Vec<Owned>) {
    let mut owned: Vec<Owned> = Vec::new();
    for e in obj["metadata"]["managedFields"].as_array().into_iter().flatten() {
        if e["subresource"] == "status" {
            continue;
        }
        let mut l = Vec::new();
        leaves("", &e["fieldsV1"], &mut l);
        let who = format!(
            "{} ({})",
            e["manager"].as_str().unwrap_or("<none>"),
            e["operation"].as_str().unwrap_or("?")
        );
        owned.push((who, l));
    }
    let flux: Vec<&String> = owned
        .iter()
        .filter(|(m, _)| m.starts_with("kustomize-controller "))
        .flat_map(|(_, l)| l)
        .collect();
    let mut shared = Vec::new();
    for (m, l) in &owned {
        if m.starts_with("kustomize-controller ") {
            continue;
        }
        for f in l {
            if flux.contains(&f) {
                shared.push((m.clone(), f.clone()));
            }
        }
    }
    (shared, owned)
}

/// No sentinel, no kubeadm state, no simulated control plane left running: what a reset leaves.
fn host_clean(host: &capkk_sandbox::Host<'_>) -> anyhow::Result<Option<String>> {
    let out = host.sh_inside(
        "ls -d /run/cluster-api/bootstrap-success.complete /etc/kubernetes/admin.conf /etc/kubernetes/kubelet.conf \
         /etc/kubernetes/bootstrap-kubelet.conf /etc/kubernetes/pki/ca.crt /var/lib/etcd 2>/dev/null; \
         for p in /proc/[0-9]*; do case $(cat $p/comm 2>/dev/null) in etcd|kube-apiserver) \
         grep -q '^State:.*zombie' $p/status 2>/dev/null || echo \"running $(cat $p/comm)\";; esac; done; true",
    )?;
    Ok((!out.trim().is_empty()).then(|| out.trim().replace('\n', " ")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_in_git_is_applied_scaled_held_and_pruned_by_flux() -> anyhow::Result<()> {
    let mut t = Timings::new();
    let flux_bin = Flux::dir().await?; // before anything starts: fails naming `make flux-bin`
    let Some((env, hosts)) = TestEnv::with_hosts("gitops", "gitops", 3).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    let plane = capkk_mgmt::ManagementPlane::shared().await?;
    let admin_kc = plane.kubeconfig_path().to_owned();
    let admin_kc_s = admin_kc.to_str().context("kubeconfig path")?.to_owned();
    let bin = capkk_mgmt::bin_dir().await?;
    let (kubectl, clusterctl) = (bin.join("kubectl"), bin.join("clusterctl"));
    let kv = std::fs::read_to_string(bin.join("VERSIONS"))?
        .lines()
        .find_map(|l| l.strip_prefix("kubernetes ").map(str::to_owned))
        .context("no kubernetes version in the plane's VERSIONS")?;
    let sim = kubeadm_simulator(&bin)?;
    let component = publish_standins_for(&hosts.mirror, &env.dir, "amd64", &kv, sim)?;
    let _manager = env.manager("manager", &[])?;
    t.step("setup: 3 sandbox hosts, mirror, kubeadm simulator, manager");

    let flux = Flux::start(&env.client, &admin_kc, &env.dir, &ns).await?;
    t.step("Flux: CRDs installed, source-controller + kustomize-controller ready");
    eprintln!(
        "gitops: Flux binaries {}, logs {:?}",
        flux_bin.display(),
        flux.logs
    );

    // The cluster as a user renders it: our clusterctl repository, the default flavor, the hosts pinned.
    let repo_dir = env.dir.join("clusterctl-repo");
    let release = capkk_mgmt::repo_root().join("test/release/release-manifests.sh");
    let repo_s = repo_dir.to_str().context("path")?;
    run(
        &release,
        &[
            "--local-config",
            repo_s,
            "v0.1.0",
            "ghcr.io/capkk-rs/capkk-manager:v0.1.0",
        ],
        &[],
        &bin,
        &env.dir,
    )?;
    let instances: Vec<Value> = hosts
        .sb
        .hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            json!({"name": h.info.name, "address": h.address(),
                   "roles": [if i == 0 { "control-plane" } else { "worker" }],
                   "hostKeys": [h.fingerprint()]})
        })
        .collect();
    let cluster_yaml = run(
        &clusterctl,
        &[
            "generate",
            "cluster",
            CLUSTER,
            "-n",
            &ns,
            "--infrastructure",
            "kubekey:v0.1.0",
            "--config",
            &format!("{repo_s}/clusterctl.yaml"),
            "--kubernetes-version",
            &kv,
            "--control-plane-machine-count",
            "1",
            "--worker-machine-count",
            "1",
        ],
        &[
            ("KUBECONFIG", admin_kc_s.as_str()),
            ("KUBEKEY_INSTANCES", Value::Array(instances).to_string().as_str()),
            ("KUBEKEY_COMPONENT", component.to_string().as_str()),
            ("KUBEKEY_SSH_SECRET", "ssh-auth"),
        ],
        &bin,
        &env.dir,
    )?;
    ensure!(
        !cluster_yaml.contains("\nstatus:"),
        "the rendered cluster carries status"
    );

    // The repository: one directory per cluster, a kustomization listing what Flux applies.
    let git = GitRepo::create(&env.dir.join("git"), "fleet")?;
    let path = format!("clusters/{CLUSTER}");
    let (cluster_file, kust_file) = (
        format!("{path}/cluster.yaml"),
        format!("{path}/kustomization.yaml"),
    );
    let kust =
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- cluster.yaml\n";
    let c1 = git.commit(
        &[(&cluster_file, Some(&cluster_yaml)), (&kust_file, Some(kust))],
        "add cluster gitops: 1 control plane, 1 worker",
    )?;
    t.step("render (clusterctl generate cluster) + commit");
    env.apply(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "fleet", "namespace": ns},
        "spec": {"url": git.url, "interval": FLUX_INTERVAL, "ref": {"branch": "main"}, "timeout": "30s"}
    }))
    .await?;
    env.apply(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": KUSTOMIZATION, "namespace": ns},
        "spec": {"interval": FLUX_INTERVAL, "retryInterval": "10s", "path": format!("./{path}"), "prune": true,
                 "timeout": "1m", "sourceRef": {"kind": "GitRepository", "name": "fleet"}}
    }))
    .await?;
    applied(&env, &c1, "Flux fetched the commit over HTTP and applied it").await?;
    ensure!(
        git.fetches() > 0,
        "source-controller never fetched from the git server"
    );
    ensure!(
        env.get(CAPI_V, "Cluster", CLUSTER).await?.is_some(),
        "Kustomization Ready but no Cluster {CLUSTER}"
    );
    t.step("commit -> Flux applied it (Kustomization Ready)");
    running(
        &env,
        "cluster.x-k8s.io/control-plane",
        1,
        "control-plane Machine Running",
    )
    .await?;
    t.step("applied -> control-plane Machine Running");
    running(
        &env,
        &format!("cluster.x-k8s.io/deployment-name={MD}"),
        1,
        "worker Machine Running",
    )
    .await?;
    t.step("-> worker Machine Running");

    // Scale by commit, first held by a suspended Kustomization.
    suspend(&env, true).await?;
    let scaled = edit_doc(&cluster_yaml, "MachineDeployment", |d| {
        ensure!(
            d.matches("\n  replicas: 1\n").count() == 1,
            "MachineDeployment without `replicas: 1`:\n{d}"
        );
        Ok(d.replace("\n  replicas: 1\n", "\n  replicas: 2\n"))
    })?;
    let c2 = git.commit(&[(&cluster_file, Some(&scaled))], "scale gitops-md-0 to 2")?;
    poke_source(&env).await?;
    fetched(&env, &c2).await?;
    t.step("suspended: commit replicas 1 -> 2, fetched by source-controller");
    let held = Instant::now();
    while held.elapsed() < HOLD {
        let k = env
            .get("kustomize.toolkit.fluxcd.io/v1", "Kustomization", KUSTOMIZATION)
            .await?
            .unwrap_or_default();
        let rev = k["status"]["lastAppliedRevision"].as_str().unwrap_or_default();
        ensure!(
            rev.ends_with(&c1),
            "the suspended Kustomization applied {rev} after {:.1} s",
            held.elapsed().as_secs_f64()
        );
        let md = env
            .get(CAPI_V, "MachineDeployment", MD)
            .await?
            .unwrap_or_default();
        ensure!(
            md["spec"]["replicas"] == 1,
            "MachineDeployment replicas {} while suspended",
            md["spec"]["replicas"]
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    t.step("suspended: the fetched commit not applied (held past the interval)");
    suspend(&env, false).await?;
    applied(&env, &c2, "Flux applied the scaling commit once resumed").await?;
    let md = env
        .get(CAPI_V, "MachineDeployment", MD)
        .await?
        .unwrap_or_default();
    ensure!(
        md["spec"]["replicas"] == 2,
        "MachineDeployment replicas after the commit: {}",
        md["spec"]["replicas"]
    );
    t.step("resumed -> the scaling commit applied");
    running(
        &env,
        &format!("cluster.x-k8s.io/deployment-name={MD}"),
        2,
        "2 worker Machines Running",
    )
    .await?;
    t.step("-> 2 worker Machines Running");

    // A hand edit of a field git holds: Flux puts it back on its own (drift correction every interval).
    let patched = run(
        &kubectl,
        &[
            "--kubeconfig",
            &admin_kc_s,
            "-n",
            &ns,
            "patch",
            "machinedeployment",
            MD,
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        &[],
        &bin,
        &env.dir,
    )?;
    let hand = Instant::now();
    ensure!(
        patched.trim() == "3",
        "kubectl patch answered replicas {patched:?}, not 3"
    );
    eventually(
        "Flux reverted the hand edit (replicas 3 -> 2)",
        Duration::from_secs(60),
        || async {
            let md = env
                .get(CAPI_V, "MachineDeployment", MD)
                .await?
                .unwrap_or_default();
            Ok((md["spec"]["replicas"] == 2).then_some(()))
        },
    )
    .await?;
    eprintln!(
        "gitops: hand edit reverted {:.1} s after it",
        hand.elapsed().as_secs_f64()
    );
    t.step("hand edit (kubectl patch replicas 3) -> reverted by Flux");
    running(
        &env,
        &format!("cluster.x-k8s.io/deployment-name={MD}"),
        2,
        "back to 2 worker Machines",
    )
    .await?;
    t.step("-> the extra Machine gone, 2 workers Running");

    // Managed fields: no field of an object Flux applied is owned by Flux and another manager.
    let k = env
        .get("kustomize.toolkit.fluxcd.io/v1", "Kustomization", KUSTOMIZATION)
        .await?
        .unwrap_or_default();
    let entries = k["status"]["inventory"]["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        entries.len() >= 7,
        "Flux's inventory lists {} objects: {entries:?}",
        entries.len()
    );
    let mut conflicts = Vec::new();
    for e in &entries {
        // id: <namespace>_<name>_<group>_<kind>
        let id = e["id"].as_str().unwrap_or_default();
        let parts: Vec<&str> = id.split('_').collect();
        ensure!(parts.len() == 4, "inventory id {id}");
        let v = e["v"].as_str().unwrap_or_default();
        let api_version = if parts[2].is_empty() {
            v.to_owned()
        } else {
            format!("{}/{v}", parts[2])
        };
        let obj = env
            .get(&api_version, parts[3], parts[1])
            .await?
            .context(id.to_owned())?;
        let (shared, owned) = shared_fields(&obj);
        for (m, fields) in owned
            .iter()
            .filter(|(m, _)| !m.starts_with("kustomize-controller "))
        {
            eprintln!("gitops: {} {}: {m} owns {}", parts[3], parts[1], fields.join(" "));
        }
        let managers: Vec<&String> = owned.iter().map(|(m, _)| m).collect();
        eprintln!("gitops: {} {}: managers {managers:?}", parts[3], parts[1]);
        ensure!(
            managers.iter().any(|m| m.starts_with("kustomize-controller ")),
            "{id}: Flux owns no field of it"
        );
        ensure!(
            !managers
                .iter()
                .any(|m| m.starts_with("unknown ") || m.starts_with("<none> ")),
            "{id}: a writer without a name (User-Agent) owns fields: {managers:?}"
        );
        if parts[3] == "KKCluster" {
            ensure!(
                managers.iter().any(|m| m.starts_with("capkk-manager ")),
                "{id}: the provider's writes (finalizer, endpoint) are not under `capkk-manager`: {managers:?}"
            );
        }
        for (m, f) in shared {
            conflicts.push(format!("{} {}: {f} owned by Flux and {m}", parts[3], parts[1]));
        }
    }
    ensure!(
        conflicts.is_empty(),
        "fields owned by Flux and another manager:\n{}",
        conflicts.join("\n")
    );
    t.step("managed fields: no field owned by Flux and another manager");

    // Prune: the cluster leaves the repository.
    let c3 = git.commit(
        &[
            (&cluster_file, None),
            (
                &kust_file,
                Some("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n"),
            ),
        ],
        "remove cluster gitops",
    )?;
    poke_source(&env).await?;
    applied(&env, &c3, "Flux applied the removal").await?;
    t.step("commit removing the cluster -> applied (prune)");
    eventually(
        "the Cluster and every Machine, KKMachine, KKInstance, KKCluster are gone",
        Duration::from_secs(200),
        || async {
            let mut left = Vec::new();
            for (v, kind) in [
                (CAPI_V, "Cluster"),
                (CAPI_V, "Machine"),
                (INFRA_V, "KKCluster"),
                (INFRA_V, "KKMachine"),
                (INFRA_V, "KKInstance"),
                ("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane"),
            ] {
                left.extend(
                    env.list(v, kind)
                        .await?
                        .iter()
                        .map(|o| format!("{kind}/{}", name(o))),
                );
            }
            Ok(left.is_empty().then_some(()))
        },
    )
    .await?;
    t.step("-> Cluster and its machines deleted");
    for h in hosts.sb.hosts() {
        let dirty = host_clean(&h)?;
        ensure!(
            dirty.is_none(),
            "{} not reset after prune: {}",
            h.info.name,
            dirty.unwrap_or_default()
        );
    }
    ensure!(
        env.get("v1", "Secret", "ssh-auth").await?.is_some(),
        "prune deleted the SSH Secret, which is not in git"
    );
    let k = env
        .get("kustomize.toolkit.fluxcd.io/v1", "Kustomization", KUSTOMIZATION)
        .await?
        .unwrap_or_default();
    let left = k["status"]["inventory"]["entries"].as_array().map_or(0, Vec::len);
    ensure!(left == 0, "Flux's inventory still lists {left} objects");
    t.step("hosts reset, SSH Secret kept, inventory empty");
    drop(flux);
    env.finish().await;
    Ok(())
}
