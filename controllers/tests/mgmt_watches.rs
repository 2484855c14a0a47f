//! Watches instead of polls, and claims decided from the manager's cache, counted on the real plane (no SSH:
//! the hosts are loopback addresses on a closed port, and claiming does not connect). KKMachines waiting for
//! their KKCluster are not reconciled while nothing changes (the KKCluster's watch wakes them when it is
//! provisioned; a poll reconciles each of them every few seconds), and claiming N hosts does not LIST the
//! namespace's KKInstances from the apiserver N times (the manager's cache decides; the create is the lock).
//! Both are counts, not durations: the manager's `capkk_reconcile_total` and the apiserver's
//! `apiserver_request_total`. The manager runs with the flags the Cluster API Operator passes (CAPI's names),
//! and its controller-runtime style families (`controller_runtime_reconcile_*`) count the same reconciles.
//! Every check runs and all failures are reported together.

mod common;

use std::time::Duration;

use anyhow::bail;
use common::*;
use serde_json::json;

/// Machines and hosts.
const N: usize = 12;
/// How long nothing changes while the KKMachines wait (shorter than the manager's safety-net requeue of a
/// waiting KKMachine, longer than a poll would wait).
const QUIET: Duration = Duration::from_secs(25);

/// `capkk_reconcile_total{kind}` from the manager's /metrics.
fn reconciles(metrics: &str, kind: &str) -> u64 {
    let prefix = format!("capkk_reconcile_total{{kind=\"{kind}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse::<f64>().ok())
        .unwrap_or_default() as u64
}

/// The value of the series `series` (name and labels, exactly as exposed) in `metrics`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse::<f64>()
            .ok()
    })
}

/// LIST requests of `resource` the apiserver served so far (all clients, all namespaces).
async fn apiserver_lists(env: &TestEnv, resource: &str) -> anyhow::Result<u64> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = env.client.request_text(req).await?;
    let needle = format!("resource=\"{resource}\"");
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{") && l.contains(&needle) && l.contains("verb=\"LIST\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_kkmachines_are_woken_by_their_kkcluster_not_polled_and_claims_do_not_list_kkinstances()
-> anyhow::Result<()> {
    let env = TestEnv::new("watches").await?;
    env.secret("ssh-auth", &[("password", "canary-pw-watches-2b")])
        .await?;
    env.bootstrap_data("data", "#cloud-config\n").await?;
    // Worker hosts only and no endpoint: the KKCluster cannot be provisioned until one is set.
    let hosts: Vec<(String, String, u16)> = (1..=N)
        .map(|i| (format!("w{i}"), format!("127.0.8.{i}"), 1))
        .collect();
    let mut kkc = kkcluster(&env.ns, "w", &hosts, json!({}));
    for h in kkc["spec"]["nodes"]["instances"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        h["roles"] = json!(["worker"]);
    }
    env.apply(cluster(&env.ns, "w", json!({}))).await?;
    env.apply(kkc).await?;
    for i in 1..=N {
        env.machine("w", &format!("m{i}"), "worker", Some("data")).await?;
    }
    let mport = free_port()?;
    let hport = free_port()?;
    // What the Cluster API Operator writes from an InfrastructureProvider's spec.manager (leader election
    // off: the test's ServiceAccount may not hold a Lease), with CAPI's flag names.
    let mut mgr = env.manager(
        "manager",
        &[
            &format!("--metrics-bind-addr=127.0.0.1:{mport}"),
            &format!("--health-addr=127.0.0.1:{hport}"),
            "--leader-elect=false",
            "--leader-elect-lease-duration=137s",
            "--leader-elect-renew-deadline=107s",
            "--leader-elect-retry-period=26s",
            "--max-concurrent-reconciles=5",
            "--kkmachine.infrastructure.cluster.x-k8s.io-concurrency=4",
            "--sync-period=600s",
            "--profiler-address=localhost:6060",
            "--v=1",
            "--feature-gates=MachinePool=true",
            "--webhook-port=9443",
            "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
            "--ssh-connect-timeout=2s",
        ],
    )?;
    eventually(
        &format!("{N} KKMachines waiting for the KKCluster"),
        Duration::from_secs(60),
        || async {
            let waiting = env
                .list(INFRA_V, "KKMachine")
                .await?
                .iter()
                .filter(|k| cond_state(k, "Ready").1 == "WaitingForClusterInfrastructure")
                .count();
            Ok((waiting == N).then_some(()))
        },
    )
    .await?;
    let mut failed: Vec<String> = Vec::new();

    // Nothing changes for a while: the waiting KKMachines must not be reconciled. (The pause first lets any
    // short requeue from before the wait, e.g. of a KKMachine that was reconciled before CAPI set its owner,
    // run out.)
    tokio::time::sleep(Duration::from_secs(12)).await;
    let before = reconciles(&http_get(mport, "/metrics")?, "KKMachine");
    tokio::time::sleep(QUIET).await;
    let idle = reconciles(&http_get(mport, "/metrics")?, "KKMachine") - before;
    eprintln!("{idle} KKMachine reconciles in {QUIET:?} of waiting");
    if idle >= N as u64 {
        failed.push(format!(
            "{idle} KKMachine reconciles in {QUIET:?} while {N} KKMachines waited and nothing changed: they are \
             polled (the KKCluster's watch should wake them)"
        ));
    }

    // The KKCluster gets an endpoint and is provisioned: its watch wakes the KKMachines, which claim a host
    // each.
    let lists_before = apiserver_lists(&env, "kkinstances").await?;
    env.merge(
        INFRA_V,
        "KKCluster",
        "w",
        json!({"spec": {"controlPlaneEndpoint": {"host": "127.0.8.100", "port": 6443}}}),
    )
    .await?;
    eventually(
        &format!("{N} KKMachines claimed a host"),
        Duration::from_secs(90),
        || async {
            let claimed = env
                .list(INFRA_V, "KKMachine")
                .await?
                .iter()
                .filter(|k| k["spec"]["instanceID"].is_string())
                .count();
            Ok((claimed == N).then_some(()))
        },
    )
    .await?;
    let lists = apiserver_lists(&env, "kkinstances").await? - lists_before;
    eprintln!("{lists} KKInstance LISTs at the apiserver while {N} hosts were claimed");
    // Other clients (e.g. the namespace controller removing earlier tests' namespaces) LIST KKInstances too.
    if lists >= N as u64 / 2 {
        failed.push(format!(
            "the apiserver served {lists} KKInstance LISTs while {N} hosts were claimed: claims read the \
             apiserver instead of the manager's cache"
        ));
    }
    // The controller-runtime families, with the values of this run.
    let metrics = http_get(mport, "/metrics")?;
    let kkm_total: f64 = ["success", "requeue_after", "error"]
        .iter()
        .filter_map(|r| {
            sample(
                &metrics,
                &format!("controller_runtime_reconcile_total{{controller=\"kkmachine\",result=\"{r}\"}}"),
            )
        })
        .sum();
    let ours = reconciles(&metrics, "KKMachine") as f64;
    eprintln!("controller_runtime_reconcile_total for kkmachine: {kkm_total}; capkk_reconcile_total: {ours}");
    // The two counters are bumped one after the other, not under the scrape's lock: one reconcile ending
    // during the scrape may be in one and not yet in the other.
    if kkm_total < N as f64 || (kkm_total - ours).abs() > 1.0 {
        failed.push(format!(
            "controller_runtime_reconcile_total{{controller=\"kkmachine\"}} sums to {kkm_total}, \
             capkk_reconcile_total{{kind=\"KKMachine\"}} is {ours}: both count every reconcile of {N}+"
        ));
    }
    for (series, want) in [
        (
            "controller_runtime_max_concurrent_reconciles{controller=\"kkmachine\"}",
            Some(4.0),
        ),
        (
            "controller_runtime_max_concurrent_reconciles{controller=\"kkinstance\"}",
            Some(5.0),
        ),
        (
            "controller_runtime_max_concurrent_reconciles{controller=\"kkcluster\"}",
            Some(5.0),
        ),
        (
            "controller_runtime_reconcile_errors_total{controller=\"kkmachine\"}",
            None,
        ),
        (
            "controller_runtime_active_workers{controller=\"kkinstance\"}",
            None,
        ),
    ] {
        match (sample(&metrics, series), want) {
            (None, _) => failed.push(format!("/metrics lacks {series}")),
            (Some(v), Some(w)) if v != w => failed.push(format!("{series} is {v}, not {w}")),
            _ => {}
        }
    }
    for controller in ["kkcluster", "kkmachine", "kkinstance"] {
        let series =
            format!("controller_runtime_reconcile_time_seconds_count{{controller=\"{controller}\"}}");
        match sample(&metrics, &series) {
            Some(n) if n >= 1.0 => {}
            other => failed.push(format!("{series} is {other:?}: no reconcile timed")),
        }
    }
    if !http_get(hport, "/readyz")?.contains("200 OK") {
        failed.push("/readyz on --health-addr does not answer 200".into());
    }
    let log = mgr.logs();
    for flag in [
        "--profiler-address",
        "--feature-gates",
        "--webhook-port",
        "--webhook-cert-dir",
    ] {
        if !log
            .lines()
            .any(|l| l.contains("flag accepted but ignored") && l.contains(flag))
        {
            failed.push(format!("the manager ignored {flag} without saying so in its log"));
        }
    }
    let logs = vec![log];
    mgr.terminate();
    env.assert_no_canary(&["canary-pw-watches-2b"], &logs).await?;
    if !failed.is_empty() {
        bail!("{} check(s) failed:\n- {}", failed.len(), failed.join("\n- "));
    }
    env.finish().await;
    Ok(())
}
