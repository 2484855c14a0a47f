//! Controller benchmark with hosts that really get provisioned (`capkk-bench controller --provision`).
//!
//! N sandbox hosts (real sshd) make up one KKCluster's inventory; the stand-in release artifacts are served by
//! the bench's mirror on the sandbox bridge (`spec.component`, SHA-256 pinned); the bootstrap data is CABPK's
//! (the captured fixture; its `kubeadm` is the bench's stand-in). N KKMachine + Machine pairs are created as in
//! the claim benchmark, and each KKMachine goes through the whole path: claim, KKInstance, host work
//! (bootstrap, repository, binary, containermanager, provisioning), `provisioned`.
//!
//! The host's own work is measured on the host: root's login shell there is a wrapper
//! (`session-shell.sh`) that runs each command with the host's shell and records when it started and ended
//! (every exec and upload of capkk-rs is one such command). Per machine the bench reports the time from
//! bootstrap data to `provisioned`, the union of the host's command intervals in that window (host work), the
//! difference, and where the difference went: CAPI's owner reference, the claim, claim → first host command
//! (KKInstance woken, SSH connect), between host commands (status writes, annotations, the controller-side
//! artifact cache, SSH round trips) and last host command → `provisioned` on the KKMachine.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, bail};
use capkk_executor::quote;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Client,
    api::{Api, PostParams},
};
use serde_json::json;

use crate::{
    artifacts,
    controller::{
        CAPI, ControllerArgs, DataOrder, INFRA, PER_CLUSTER, Seen, bootstrap_provider, cleanup, cluster,
        cpu_s, pct, provisioned, rss_kib, secret, spawn_creator, start_manager, unique, wait_kkclusters,
        watch_kkmachines,
    },
    hosts::HostSpec,
    workload::SENTINEL,
};

/// The sandbox's name (its own /24; no test suite uses it).
const SANDBOX: &str = "benchprov";
/// Where the session wrapper records `<start> <end>` (epoch seconds) of every command.
const SESSIONS: &str = "/var/log/capkk-bench-sessions";
/// The wrapper's path inside a host.
pub(crate) const SESSION_SHELL: &str = "/usr/local/sbin/capkk-bench-shell";

/// The project's package-manager stand-ins (the repository phase installs Kubernetes' OS packages; the hosts
/// are overlays of this machine, whose package database must not change).
const FAKE_PM: &[(&str, &str)] = &[
    ("apt-get", include_str!("../../assets/fake-pm/apt-get")),
    ("dpkg-query", include_str!("../../assets/fake-pm/dpkg-query")),
    ("dnf", include_str!("../../assets/fake-pm/dnf")),
    ("rpm", include_str!("../../assets/fake-pm/rpm")),
];

/// Run the provisioning benchmark; returns the markdown report.
pub async fn run(a: &ControllerArgs) -> anyhow::Result<String> {
    if let Some(reason) = capkk_sandbox::unsupported_reason() {
        bail!("--provision needs sandbox hosts: {reason}");
    }
    if !a.manager.is_file() {
        bail!(
            "{} not found: `cargo build --release -p capkk-controllers --bin manager`",
            a.manager.display()
        );
    }
    let n = a.machines;
    if n == 0 || n > PER_CLUSTER {
        bail!("--provision takes 1..={PER_CLUSTER} machines (one KKCluster; 10 to 20 suit two cores)");
    }
    let fixture = crate::fixture_path(a.fixture.as_deref())?;
    let data = std::fs::read_to_string(&fixture).with_context(|| format!("reading {}", fixture.display()))?;
    let plane = capkk_mgmt::ManagementPlane::up()
        .await
        .context("local management plane (make mgmt-up)")?;
    let client = plane.client().await?;
    capkk_mgmt::install_crds(&client, &capkk_mgmt::repo_root().join("config/crd/bases")).await?;
    // The bench's bootstrap config kind (DataOrder::ConfigRef).
    capkk_mgmt::install_crds(&client, &capkk_mgmt::repo_root().join("test/bench/crd")).await?;
    std::fs::create_dir_all(&a.out)?;
    eprintln!("capkk-bench controller --provision: sandbox {SANDBOX:?} with {n} hosts");
    let sandbox = capkk_sandbox::Sandbox::up(&capkk_sandbox::SandboxConfig::new(SANDBOX, n))
        .context("building the sandbox hosts")?;
    let ns = unique("capkk-benchprov");
    let ns_obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns_obj)
        .await?;
    let result = measure(
        a,
        &client,
        &ns,
        plane.kubeconfig_path(),
        &sandbox,
        &data,
        &fixture,
    )
    .await;
    let _ = cleanup(&client, &ns).await;
    // The sandbox is torn down when it is dropped.
    drop(sandbox);
    result
}

/// Make root's login shell on `h` the session wrapper (the host's own shell runs each command).
pub(crate) fn record_sessions(h: &HostSpec) -> anyhow::Result<()> {
    let wrapper = format!(
        "#!/bin/bash\ninner={}\nsessions={}\n{}",
        quote(&h.shell),
        quote(SESSIONS),
        include_str!("session-shell.sh")
    );
    let out = h.run(
        &format!(
            "set -e; cat > {w}; chmod 755 {w}; : > {s}; usermod -s {w} root",
            w = quote(SESSION_SHELL),
            s = quote(SESSIONS)
        ),
        Some(wrapper.as_bytes()),
    )?;
    if !out.status.success() {
        bail!(
            "{}: installing the session wrapper failed: {}",
            h.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Empty `h`'s session log.
pub(crate) fn clear_sessions(h: &HostSpec) -> anyhow::Result<()> {
    h.sh(&format!(": > {}", quote(SESSIONS))).map(|_| ())
}

/// `h`'s command intervals so far.
pub(crate) fn sessions(h: &HostSpec) -> anyhow::Result<Vec<(f64, f64)>> {
    Ok(parse_sessions(&h.sh(&format!("cat {}", quote(SESSIONS)))?))
}

fn install_fake_pm(h: &HostSpec) -> anyhow::Result<()> {
    use base64::Engine as _;
    let mut script = String::from("set -e; mkdir -p /usr/local/sbin\n");
    for (name, text) in FAKE_PM {
        let b64 = base64::engine::general_purpose::STANDARD.encode(text);
        script.push_str(&format!(
            "printf '%s' '{b64}' | base64 -d > /usr/local/sbin/{name}; chmod 755 /usr/local/sbin/{name}\n"
        ));
    }
    h.sh(&script).map(|_| ())
}

/// `<start> <end>` lines of the session log (epoch seconds).
pub fn parse_sessions(text: &str) -> Vec<(f64, f64)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let s = w.next()?.parse::<f64>().ok()?;
            let e = w.next()?.parse::<f64>().ok()?;
            (e >= s).then_some((s, e))
        })
        .collect()
}

/// What the bench saw of one machine, in epoch seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Instants {
    /// Just before the Machine's create was sent.
    pub created: f64,
    /// The KKMachine has its Machine owner reference (CAPI's Machine controller).
    pub owned: f64,
    /// The bench, as bootstrap provider, completed the Machine's bootstrap config (`config-ref` order).
    pub config_done: Option<f64>,
    /// The Machine has bootstrap data (`spec.bootstrap.dataSecretName`): the clock starts.
    pub data: f64,
    /// The KKMachine claimed a host (`spec.instanceID`).
    pub claimed: f64,
    /// The KKMachine is provisioned (`status.initialization.provisioned`).
    pub provisioned: f64,
}

/// Where one machine's time went, in seconds.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Split {
    /// Bootstrap data → KKMachine provisioned.
    pub total: f64,
    /// The union of the host's command intervals in that window.
    pub host: f64,
    /// Host commands in the window.
    pub commands: usize,
    /// Bootstrap data → the KKMachine's owner reference, when that came after the data (the `at-create`
    /// order: CAPI's Machine controller); 0 when the Machine owned the KKMachine before it had data.
    pub owner: f64,
    /// The later of bootstrap data and owner reference → claimed.
    pub claim: f64,
    /// Claimed → first host command.
    pub to_first: f64,
    /// Between the first and the last host command, outside commands.
    pub between: f64,
    /// Last host command → provisioned.
    pub after_last: f64,
    /// Machine create → the KKMachine's owner reference (CAPI), whether inside the clock or before it.
    pub create_owner: f64,
    /// Machine create → the Machine has bootstrap data (0 in the `at-create` order).
    pub create_data: f64,
    /// Bootstrap config completed → the Machine has bootstrap data (CAPI's Machine controller copies it).
    pub config_data: Option<f64>,
    /// Machine create → provisioned (the clock of the `at-create` order; with `config-ref` it includes the
    /// wait for bootstrap data).
    pub from_create: f64,
}

/// Split the window `[data, provisioned]` of `t` given the host's command intervals. Commands outside the
/// window (the KKCluster's probes before it) do not count; the parts `owner + claim + to_first + between +
/// after_last` add up to `total - host`.
pub fn split(t: &Instants, sessions: &[(f64, f64)]) -> Split {
    let (data, provisioned) = (t.data, t.provisioned);
    let mut inside: Vec<(f64, f64)> = sessions
        .iter()
        .filter(|(s, e)| *s >= data && *e <= provisioned)
        .copied()
        .collect();
    inside.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut union: Vec<(f64, f64)> = Vec::new();
    for (s, e) in inside.iter().copied() {
        match union.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => union.push((s, e)),
        }
    }
    let host: f64 = union.iter().map(|(s, e)| e - s).sum();
    let (first, last) = match (union.first(), union.last()) {
        (Some(f), Some(l)) => (f.0, l.1),
        _ => (provisioned, provisioned),
    };
    let start = t.owned.max(data);
    let claimed = t.claimed.min(first).max(start);
    Split {
        total: provisioned - data,
        host,
        commands: inside.len(),
        owner: start - data,
        claim: claimed - start,
        to_first: first - claimed,
        between: (last - first) - host,
        after_last: provisioned - last,
        create_owner: t.owned - t.created,
        create_data: data - t.created,
        config_data: t.config_done.map(|c| data - c),
        from_create: provisioned - t.created,
    }
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    a: &ControllerArgs,
    client: &Client,
    ns: &str,
    kubeconfig: &Path,
    sandbox: &capkk_sandbox::Sandbox,
    data: &str,
    fixture: &Path,
) -> anyhow::Result<String> {
    let n = a.machines;
    let out = std::fs::canonicalize(&a.out)?;
    let work = out.join("provision");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let mut hosts = Vec::new();
    for h in sandbox.hosts() {
        h.link_up()?;
        let spec = HostSpec::from_sandbox(&h)?;
        spec.install_standins()?;
        install_fake_pm(&spec)?;
        record_sessions(&spec)?;
        hosts.push(spec);
    }
    let arts = artifacts::build(&work.join("artifacts"), a.artifact_mib)?;
    let mirror = capkk_sandbox::mirror::Mirror::start(sandbox)?;
    let components = crate::serve_ours(&arts, &mirror)?;
    let overrides: Vec<_> = components
        .pins
        .iter()
        .map(|(id, _, sha)| json!({"id": id, "checksum": {"value": sha}}))
        .collect();
    let key = std::fs::read_to_string(&sandbox.credentials().ed25519_key)?;
    secret(client, ns, "ssh-auth", &[("privateKey", &key)]).await?;
    secret(
        client,
        ns,
        "bootstrap-data",
        &[("value", data), ("format", "cloud-config")],
    )
    .await?;
    let cname = "bench-0";
    let instances: Vec<_> = hosts
        .iter()
        .map(|h| json!({"name": h.name, "address": h.address, "auth": {"port": 22}}))
        .collect();
    cluster(
        client,
        ns,
        cname,
        instances,
        Some(json!({"host": components.mirror, "overrides": overrides})),
    )
    .await?;

    let log_path = out.join("provision-manager.log");
    let cache = work.join("cache");
    let concurrency = format!("--max-concurrent-hosts={n}");
    let cache_arg = format!("--artifact-cache-dir={}", cache.display());
    let mgr = start_manager(
        &a.manager,
        kubeconfig,
        ns,
        &log_path,
        &a.manager_log,
        &["--ssh-connect-timeout=5s", &concurrency, &cache_arg],
    )?;
    let pid = mgr.0.id();
    // Provisioned, and every host probed (the probes' SSH commands are over before the clock starts).
    let probed = |k: &serde_json::Value| {
        provisioned(k)
            && k["status"]["hosts"]
                .as_array()
                .is_some_and(|h| h.len() == n && h.iter().all(|h| h["reachable"] == true))
    };
    wait_kkclusters(client, ns, 1, Duration::from_secs(a.timeout_s), &log_path, probed).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let load_start = crate::load_average();
    let started_at = SystemTime::now();
    let cpu_before = cpu_s(pid);
    let seen = Arc::new(Mutex::new(Seen::default()));
    // The bench's clock (Instant) against the hosts' (epoch seconds; the hosts share this machine's kernel).
    let (anchor, anchor_epoch) = (Instant::now(), crate::results::epoch(SystemTime::now()));
    let at = |i: Instant| {
        anchor_epoch + i.saturating_duration_since(anchor).as_secs_f64()
            - anchor.saturating_duration_since(i).as_secs_f64()
    };
    let (km_api, _) = capkk_mgmt::dynamic_api(client, INFRA, "KKMachine", ns).await?;
    let (m_api, _) = capkk_mgmt::dynamic_api(client, CAPI, "Machine", ns).await?;
    let watch = tokio::spawn(watch_kkmachines(km_api.clone(), seen.clone()));
    let order = DataOrder::of(&a.data_order);
    let (configs, mut helpers) = bootstrap_provider(order, client, ns, &m_api, &seen).await?;
    let creator = spawn_creator(
        km_api,
        m_api,
        configs,
        ns,
        n,
        artifacts::KUBERNETES_VERSION,
        seen.clone(),
    );
    let mut peak_rss = rss_kib(pid);
    let deadline = Instant::now() + Duration::from_secs(a.timeout_s);
    loop {
        if watch.is_finished() {
            bail!("the KKMachine watch ended");
        }
        if let Some(h) = helpers.iter_mut().find(|h| h.is_finished()) {
            h.await??;
            bail!("the bootstrap provider or the Machine watch ended");
        }
        let done = seen.lock().map(|s| s.provisioned.len()).unwrap_or_default();
        if done >= n || Instant::now() > deadline {
            break;
        }
        peak_rss = peak_rss.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    creator.await.context("creating machines")??;
    let cpu = cpu_s(pid) - cpu_before;
    let load_end = crate::load_average();
    drop(mgr);
    watch.abort();
    helpers.iter().for_each(|h| h.abort());
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();

    // The hosts' command intervals, and the proof that each one ran the bootstrap data.
    let mut sessions = BTreeMap::new();
    for h in &hosts {
        sessions.insert(h.name.clone(), crate::provision::sessions(h)?);
        if h.run(&format!("test -e {}", quote(SENTINEL)), None)?
            .status
            .success()
        {
            continue;
        }
        if seen.provisioned.len() == n {
            bail!(
                "{}: provisioned, but the bootstrap sentinel {SENTINEL} is missing",
                h.name
            );
        }
    }
    let mut splits = BTreeMap::new();
    // Everything the table is computed from, for a closer look (which gaps are which).
    let mut raw = serde_json::Map::new();
    for (m, t) in &seen.provisioned {
        let host = seen
            .provider_id
            .get(m)
            .and_then(|p| p.rsplit('/').next())
            .with_context(|| format!("KKMachine {m} provisioned without a providerID"))?;
        let (Some(cr), Some(d), Some(o), Some(c)) = (
            seen.created.get(m),
            seen.bootstrap.get(m),
            seen.owned.get(m),
            seen.claimed.get(m),
        ) else {
            bail!("KKMachine {m}: its create, bootstrap data, owner reference or claim not seen");
        };
        let s = sessions
            .get(host)
            .with_context(|| format!("KKMachine {m} claimed {host:?}, not a sandbox host"))?;
        let instants = Instants {
            created: at(*cr),
            owned: at(*o),
            config_done: seen.config_done.get(m).map(|i| at(*i)),
            data: at(*d),
            claimed: at(*c),
            provisioned: at(*t),
        };
        let parts = split(&instants, s);
        raw.insert(
            m.clone(),
            json!({"host": host, "instants": instants, "split": parts, "sessions": s}),
        );
        splits.insert(m.clone(), parts);
    }
    let totals = Totals {
        n,
        fixture: fixture.display().to_string(),
        load: format!("{load_start} → {load_end}"),
        cpu,
        peak_rss_mib: peak_rss as f64 / 1024.0,
        artifacts_mib: arts.iter().map(|x| x.bytes.len()).sum::<usize>() as f64 / (1024.0 * 1024.0),
        log: log_path.display().to_string(),
    };
    let summary: serde_json::Map<String, serde_json::Value> = ROWS
        .iter()
        .map(|(key, _, f)| {
            let v: BTreeMap<String, f64> = splits.iter().map(|(k, s)| (k.clone(), f(s))).collect();
            ((*key).to_owned(), crate::results::distribution(&v))
        })
        .collect();
    crate::results::write(
        &out.join("provision-results.json"),
        &crate::results::Meta::new("provision", started_at, &load_start),
        json!({
            "machines": n,
            "provisioned": splits.len(),
            "data_order": a.data_order,
            "artifact_mib": totals.artifacts_mib,
            "manager": {"cpu_s": cpu, "rss_peak_mib": totals.peak_rss_mib},
            "latency_s": summary,
            "per_machine": raw,
        }),
    )?;
    Ok(report(a, &splits, &totals))
}

/// One part of a [`Split`].
type Part = fn(&Split) -> f64;

struct Totals {
    n: usize,
    fixture: String,
    load: String,
    cpu: f64,
    peak_rss_mib: f64,
    artifacts_mib: f64,
    log: String,
}

/// The rows of the report: the key in the results file, the table's label, the value.
const ROWS: [(&str, &str, Part); 13] = [
    (
        "data_to_provisioned",
        "**bootstrap data on the Machine → provisioned**",
        |x| x.total,
    ),
    ("host_work", "host work (the host's own command time)", |x| x.host),
    (
        "data_to_provisioned_minus_host_work",
        "**bootstrap data → provisioned minus host work**",
        |x| x.total - x.host,
    ),
    (
        "data_to_owner_reference",
        "… bootstrap data → owner reference (CAPI; only when it came later)",
        |x| x.owner,
    ),
    (
        "to_claimed",
        "… bootstrap data or owner reference, the later → claimed",
        |x| x.claim,
    ),
    (
        "claimed_to_first_command",
        "… claimed → first host command",
        |x| x.to_first,
    ),
    ("between_commands", "… between host commands", |x| x.between),
    (
        "last_command_to_provisioned",
        "… last host command → provisioned",
        |x| x.after_last,
    ),
    (
        "create_to_owner_reference",
        "Machine create → owner reference (CAPI)",
        |x| x.create_owner,
    ),
    (
        "create_to_data",
        "Machine create → bootstrap data on the Machine",
        |x| x.create_data,
    ),
    (
        "config_complete_to_data",
        "… bootstrap config complete → data on the Machine (CAPI)",
        |x| x.config_data.unwrap_or(f64::NAN),
    ),
    ("create_to_provisioned", "Machine create → provisioned", |x| {
        x.from_create
    }),
    (
        "create_to_provisioned_minus_host_work",
        "Machine create → provisioned minus host work",
        |x| x.from_create - x.host,
    ),
];

fn report(a: &ControllerArgs, splits: &BTreeMap<String, Split>, t: &Totals) -> String {
    let n = t.n;
    let col = |f: Part| -> BTreeMap<String, f64> { splits.iter().map(|(k, v)| (k.clone(), f(v))).collect() };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "capkk-bench controller --provision: {n} KKMachines + Machines, {n} sandbox hosts in one KKCluster, \
         {:.1} MiB of stand-in artifacts from the bench mirror, bootstrap data {} ({}); load average {}",
        t.artifacts_mib, t.fixture, a.data_order, t.load
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "| per machine | p50 | p90 | max | mean |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for (_, what, f) in ROWS {
        let v: BTreeMap<String, f64> = col(f).into_iter().filter(|(_, x)| !x.is_nan()).collect();
        if v.is_empty() {
            continue;
        }
        let mean = v.values().sum::<f64>() / v.len() as f64;
        let _ = writeln!(
            s,
            "| {what} | {:.2} s | {:.2} s | {:.2} s | {mean:.2} s |",
            pct(&v, 0.5),
            pct(&v, 0.9),
            pct(&v, 1.0)
        );
    }
    let commands: Vec<usize> = splits.values().map(|x| x.commands).collect();
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "provisioned: {} of {n}; host commands per machine {}–{}; manager CPU {:.1} s, RSS peak {:.1} MiB \
         (--max-concurrent-hosts={n})",
        splits.len(),
        commands.iter().min().copied().unwrap_or_default(),
        commands.iter().max().copied().unwrap_or_default(),
        t.cpu,
        t.peak_rss_mib
    );
    if splits.len() < n {
        let _ = writeln!(
            s,
            "WARNING: only {} of {n} provisioned within {}s; see {}",
            splits.len(),
            a.timeout_s,
            t.log
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_lines_parse_and_garbage_is_skipped() {
        let s = parse_sessions("100.5 101.25\nnot a line\n102 101\n103.0 103.5\n");
        assert_eq!(s, [(100.5, 101.25), (103.0, 103.5)]);
    }

    fn instants(
        created: f64,
        owned: f64,
        config_done: Option<f64>,
        data: f64,
        claimed: f64,
        provisioned: f64,
    ) -> Instants {
        Instants {
            created,
            owned,
            config_done,
            data,
            claimed,
            provisioned,
        }
    }

    fn parts(s: &Split) -> f64 {
        s.owner + s.claim + s.to_first + s.between + s.after_last
    }

    #[test]
    fn the_window_splits_into_host_work_and_parts_that_add_up_to_the_rest() {
        // At create: data at 10, owner at 11, claimed at 12, commands 13–14, 13.5–15 (overlapping), 16–17,
        // provisioned at 18; a probe before the window does not count.
        let s = split(
            &instants(10.0, 11.0, None, 10.0, 12.0, 18.0),
            &[(5.0, 6.0), (16.0, 17.0), (13.0, 14.0), (13.5, 15.0)],
        );
        assert_eq!(s.total, 8.0);
        assert_eq!(s.host, 3.0, "the union of 13–15 and 16–17");
        assert_eq!(s.commands, 3);
        assert_eq!((s.owner, s.claim, s.to_first), (1.0, 1.0, 1.0));
        assert_eq!((s.between, s.after_last), (1.0, 1.0));
        assert!((parts(&s) - (s.total - s.host)).abs() < 1e-9);
        assert_eq!((s.create_owner, s.create_data, s.from_create), (1.0, 0.0, 8.0));
        assert_eq!(s.config_data, None);
    }

    #[test]
    fn with_a_config_ref_the_clock_starts_when_the_machine_has_data_after_its_owner_reference() {
        // Created at 0, owned at 2, config completed at 2.1, data on the Machine at 3, claimed at 3.5,
        // one command 4–5, provisioned at 6.
        let s = split(&instants(0.0, 2.0, Some(2.1), 3.0, 3.5, 6.0), &[(4.0, 5.0)]);
        assert_eq!((s.total, s.host), (3.0, 1.0));
        assert_eq!(s.owner, 0.0, "the owner reference was there before the data");
        assert_eq!(
            (s.claim, s.to_first, s.between, s.after_last),
            (0.5, 0.5, 0.0, 1.0)
        );
        assert!((parts(&s) - (s.total - s.host)).abs() < 1e-9);
        assert_eq!((s.create_owner, s.create_data, s.from_create), (2.0, 3.0, 6.0));
        assert!((s.config_data.unwrap_or_default() - 0.9).abs() < 1e-9);
    }

    #[test]
    fn without_commands_the_whole_window_is_the_controllers() {
        let s = split(&instants(0.0, 1.0, None, 0.0, 2.0, 5.0), &[]);
        assert_eq!(s.host, 0.0);
        assert_eq!(s.to_first + s.after_last + s.between, 3.0);
    }
}
