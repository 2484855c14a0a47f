//! `--watch-filter`: only objects labelled `cluster.x-k8s.io/watch-filter=<value>` are reconciled.

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_labelled_objects_are_reconciled() -> anyhow::Result<()> {
    let env = TestEnv::new("filter").await?;
    let ns = env.ns.clone();
    env.secret("ssh-auth", &[("password", "canary-pw-filter-0d")])
        .await?;
    for (name, label) in [("blue", true), ("other", false)] {
        env.apply(cluster(&ns, name, json!({}))).await?;
        let mut k = kkcluster(
            &ns,
            name,
            &[(
                format!("{name}-1"),
                format!("127.0.3.{}", if label { 1 } else { 2 }),
                1,
            )],
            json!({}),
        );
        if label {
            k["metadata"]["labels"]["cluster.x-k8s.io/watch-filter"] = json!("blue");
        }
        env.apply(k).await?;
    }
    let mut mgr = env.manager(
        "manager",
        &[
            "--watch-filter=blue",
            "--log-format=json",
            "--ssh-connect-timeout=2s",
        ],
    )?;
    env.kkcluster_provisioned("blue").await?;
    // CAPI changes both Clusters (owner references, phases): give the manager time to (wrongly) act.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let other = env.get(INFRA_V, "KKCluster", "other").await?.unwrap_or_default();
    ensure!(
        other["metadata"].get("finalizers").is_none(),
        "unlabelled KKCluster has no finalizer: {}",
        other["metadata"]
    );
    ensure!(
        other.get("status").is_none_or(|s| s.is_null() || s == &json!({})),
        "unlabelled KKCluster has no status"
    );
    mgr.terminate();
    // --log-format=json: every line is one JSON object with a level and a message.
    let logs = mgr.logs();
    ensure!(logs.lines().count() > 3, "the manager logged");
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| anyhow::anyhow!("not JSON ({e}): {line}"))?;
        ensure!(v["level"].is_string(), "no level in {line}");
    }
    env.finish().await;
    Ok(())
}
