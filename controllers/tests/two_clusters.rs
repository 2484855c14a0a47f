//! Two KKClusters in one namespace: each may have a host called `node1` (claims are named
//! `<kkcluster>.<host>`), and an address both list is provisioned for one of them only — the second claim is
//! refused and both KKClusters report the shared address (condition + event). No SSH needed (the hosts are
//! loopback addresses on a closed port: claiming does not connect).

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::*;
use serde_json::json;

const SHARED: &str = "127.0.5.9";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_host_names_are_claimed_in_both_clusters_and_a_shared_address_once() -> anyhow::Result<()> {
    let env = TestEnv::new("twoclusters").await?;
    env.secret("ssh-auth", &[("password", "canary-pw-two-c3")])
        .await?;
    env.bootstrap_data("data", "#cloud-config\n").await?;
    env.cluster(
        "a",
        &[
            ("node1".into(), "127.0.5.1".into(), 1),
            ("shared".into(), SHARED.into(), 1),
        ],
        json!({}),
    )
    .await?;
    env.cluster(
        "b",
        &[
            ("node1".into(), "127.0.5.2".into(), 1),
            ("other".into(), SHARED.into(), 1),
        ],
        json!({}),
    )
    .await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=2s"])?;
    env.kkcluster_provisioned("a").await?;
    env.kkcluster_provisioned("b").await?;

    // Cluster a takes both its hosts, the shared address included.
    for m in ["a1", "a2"] {
        env.machine("a", m, "worker", Some("data")).await?;
    }
    eventually("a1 and a2 claimed", Duration::from_secs(60), || async {
        let a1 = env.get(INFRA_V, "KKMachine", "a1").await?.unwrap_or_default();
        let a2 = env.get(INFRA_V, "KKMachine", "a2").await?.unwrap_or_default();
        Ok((a1["spec"]["instanceID"].is_string() && a2["spec"]["instanceID"].is_string()).then_some(()))
    })
    .await?;

    // Cluster b gets its own node1, and is refused the address a holds.
    for m in ["b1", "b2"] {
        env.machine("b", m, "worker", Some("data")).await?;
    }
    let (b_claimed, b_refused) = eventually("b: one claim, one refusal", Duration::from_secs(60), || async {
        let kms: Vec<_> = env
            .list(INFRA_V, "KKMachine")
            .await?
            .into_iter()
            .filter(|k| name(k).starts_with('b'))
            .collect();
        let claimed: Vec<_> = kms
            .iter()
            .filter(|k| k["spec"]["instanceID"].is_string())
            .cloned()
            .collect();
        let refused: Vec<_> = kms
            .iter()
            .filter(|k| cond_state(k, "HostClaimed") == ("False".into(), "AddressInUse".into()))
            .cloned()
            .collect();
        Ok((claimed.len() == 1 && refused.len() == 1).then_some((claimed, refused)))
    })
    .await?;
    ensure!(
        b_claimed[0]["spec"]["instanceID"] == "b.node1",
        "b claimed its own node1: {}",
        b_claimed[0]["spec"]
    );
    let msg = condition(&b_refused[0], "HostClaimed")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    ensure!(
        msg.contains(SHARED) && msg.contains("a.shared"),
        "the refusal names the address and its holder: {msg}"
    );

    let insts = env.list(INFRA_V, "KKInstance").await?;
    let mut names: Vec<String> = insts.iter().map(name).collect();
    names.sort();
    ensure!(
        names == ["a.node1", "a.shared", "b.node1"],
        "claims named <kkcluster>.<host>, the shared address once: {names:?}"
    );

    // Both KKClusters say which address they share with whom, with an event.
    for (k, other) in [("a", "b"), ("b", "a")] {
        let kkc = eventually(
            &format!("KKCluster {k} reports the shared address"),
            Duration::from_secs(60),
            || async {
                let c = env.get(INFRA_V, "KKCluster", k).await?.unwrap_or_default();
                Ok(
                    (cond_state(&c, "AddressesUnique") == ("False".into(), "AddressInUse".into()))
                        .then_some(c),
                )
            },
        )
        .await?;
        let m = condition(&kkc, "AddressesUnique")
            .and_then(|c| c["message"].as_str())
            .unwrap_or_default()
            .to_owned();
        ensure!(
            m.contains(SHARED) && m.contains(&format!("KKCluster {other}")),
            "KKCluster {k}: {m}"
        );
    }
    let events = env.list("events.k8s.io/v1", "Event").await?;
    for k in ["a", "b"] {
        ensure!(
            events.iter().any(|e| e["reason"] == "AddressInUse"
                && e["regarding"]["kind"] == "KKCluster"
                && e["regarding"]["name"] == k),
            "an AddressInUse event on KKCluster {k}"
        );
    }
    let logs = vec![mgr.logs()];
    mgr.terminate();
    env.assert_no_canary(&["canary-pw-two-c3"], &logs).await?;
    env.finish().await;
    Ok(())
}
