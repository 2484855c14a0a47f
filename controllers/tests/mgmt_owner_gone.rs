//! Deletion does not wait for owners that are already gone: a KKMachine whose Machine was removed, and a
//! KKCluster whose Cluster was removed, are still cleaned up and lose their finalizers. No SSH needed (the
//! hosts are loopback addresses on a closed port; nothing is claimed because the Machine never gets
//! bootstrap data).

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::*;
use serde_json::json;

/// Remove an object's finalizers and delete it until it is really gone (CAPI's controllers may put their
/// finalizer back in between).
async fn force_delete(env: &TestEnv, api_version: &str, kind: &str, name: &str) -> anyhow::Result<()> {
    eventually(
        &format!("{kind} {name} gone"),
        Duration::from_secs(60),
        || async {
            if env.get(api_version, kind, name).await?.is_none() {
                return Ok(Some(()));
            }
            let _ = env
                .merge(api_version, kind, name, json!({"metadata": {"finalizers": null}}))
                .await;
            let _ = env.delete(api_version, kind, name).await;
            Ok(None)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletion_completes_when_the_owner_is_already_gone() -> anyhow::Result<()> {
    let env = TestEnv::new("ownergone").await?;
    env.secret("ssh-auth", &[("password", "canary-pw-ownergone-5a")])
        .await?;
    env.cluster("g", &[("g1".into(), "127.0.4.1".into(), 1)], json!({}))
        .await?;
    env.machine("g", "w", "worker", None).await?;
    // The strict order: the worker waits for its bootstrap data before it claims anything.
    let mut mgr = env.manager(
        "manager",
        &[
            "--ssh-connect-timeout=2s",
            "--prepare-before-bootstrap-data=false",
        ],
    )?;

    env.kkcluster_provisioned("g").await?;
    let km = eventually(
        "KKMachine reconciled (finalizer, waiting for bootstrap data)",
        Duration::from_secs(60),
        || async {
            let k = env.get(INFRA_V, "KKMachine", "w").await?.unwrap_or_default();
            Ok((cond_state(&k, "Ready").1 == "WaitingForBootstrapData").then_some(k))
        },
    )
    .await?;
    ensure!(
        km["metadata"]["finalizers"].to_string().contains("kkmachine"),
        "the KKMachine carries its finalizer: {}",
        km["metadata"]
    );

    // The Machine goes first (its finalizers stripped), then the KKMachine is deleted.
    force_delete(&env, CAPI_V, "Machine", "w").await?;
    let _ = env.delete(INFRA_V, "KKMachine", "w").await;
    eventually(
        "KKMachine deleted without its Machine",
        Duration::from_secs(60),
        || async { Ok(env.get(INFRA_V, "KKMachine", "w").await?.is_none().then_some(())) },
    )
    .await?;

    // Same for the KKCluster without its Cluster.
    force_delete(&env, CAPI_V, "Cluster", "g").await?;
    let _ = env.delete(INFRA_V, "KKCluster", "g").await;
    eventually(
        "KKCluster deleted without its Cluster",
        Duration::from_secs(60),
        || async { Ok(env.get(INFRA_V, "KKCluster", "g").await?.is_none().then_some(())) },
    )
    .await?;
    ensure!(mgr.running(), "the manager kept running");
    mgr.terminate();
    env.finish().await;
    Ok(())
}
