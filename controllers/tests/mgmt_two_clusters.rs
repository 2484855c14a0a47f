//! Two KKClusters in one namespace. No SSH needed (the hosts are loopback addresses on a closed port: claiming
//! does not connect).
//! - Each may have a host called `node1`: claims are named `<kkcluster>.<host>`, so both are claimed.
//! - An address both list is provisioned for one of them only: the second claim is refused and both
//!   KKClusters report the shared address (condition + event).

mod common;

use std::time::Duration;

use anyhow::{anyhow, bail, ensure};
use common::*;
use serde_json::{Value, json};

const SHARED: &str = "127.0.5.9";

/// `spec.instanceID` of KKMachine `km` (empty while it has not claimed).
fn claim(km: &Value) -> &str {
    km["spec"]["instanceID"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_kkclusters_each_claim_their_own_host_of_the_same_name() -> anyhow::Result<()> {
    let env = TestEnv::new("samename").await?;
    env.secret("ssh-auth", &[("password", "canary-pw-two-c3")])
        .await?;
    env.bootstrap_data("data", "#cloud-config\n").await?;
    env.cluster("a", &[("node1".into(), "127.0.5.1".into(), 1)], json!({}))
        .await?;
    env.cluster("b", &[("node1".into(), "127.0.5.2".into(), 1)], json!({}))
        .await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=2s"])?;
    env.kkcluster_provisioned("a").await?;
    env.kkcluster_provisioned("b").await?;
    env.machine("a", "a1", "worker", Some("data")).await?;
    env.claimed_instance("a1").await?;
    env.machine("b", "b1", "worker", Some("data")).await?;
    let (a1, b1) = eventually("a1 and b1 claimed", Duration::from_secs(60), || async {
        let a1 = env.get(INFRA_V, "KKMachine", "a1").await?.unwrap_or_default();
        let b1 = env.get(INFRA_V, "KKMachine", "b1").await?.unwrap_or_default();
        if !claim(&b1).is_empty() {
            return Ok(Some((a1, b1)));
        }
        // Said on timeout.
        Err(anyhow!(
            "a1 claimed {:?}; b1 has no claim, its HostClaimed condition: {}",
            claim(&a1),
            condition(&b1, "HostClaimed").cloned().unwrap_or_default()
        ))
    })
    .await?;
    ensure!(
        (claim(&a1), claim(&b1)) == ("a.node1", "b.node1"),
        "claims named <kkcluster>.<host>: a1 {:?}, b1 {:?}",
        claim(&a1),
        claim(&b1)
    );
    let mut names: Vec<String> = env.list(INFRA_V, "KKInstance").await?.iter().map(name).collect();
    names.sort();
    ensure!(names == ["a.node1", "b.node1"], "KKInstances: {names:?}");
    let logs = vec![mgr.logs()];
    mgr.terminate();
    env.assert_no_canary(&["canary-pw-two-c3"], &logs).await?;
    env.finish().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_address_in_two_kkclusters_is_claimed_once_and_reported_on_both() -> anyhow::Result<()> {
    let env = TestEnv::new("sharedaddr").await?;
    env.secret("ssh-auth", &[("password", "canary-pw-two-d4")])
        .await?;
    env.bootstrap_data("data", "#cloud-config\n").await?;
    // Different host names for the same address: the name of a claim cannot be what refuses the second one.
    env.cluster("a", &[("x".into(), SHARED.into(), 1)], json!({}))
        .await?;
    env.cluster("b", &[("y".into(), SHARED.into(), 1)], json!({}))
        .await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=2s"])?;
    env.kkcluster_provisioned("a").await?;
    env.kkcluster_provisioned("b").await?;

    // Cluster a takes the address first.
    env.machine("a", "a1", "worker", Some("data")).await?;
    let held = env.claimed_instance("a1").await?;
    env.machine("b", "b1", "worker", Some("data")).await?;
    let b1 = eventually("b1 claimed or refused", Duration::from_secs(60), || async {
        let b1 = env.get(INFRA_V, "KKMachine", "b1").await?.unwrap_or_default();
        let refused = cond_state(&b1, "HostClaimed") == ("False".into(), "AddressInUse".into());
        Ok((refused || !claim(&b1).is_empty()).then_some(b1))
    })
    .await?;
    let mut failed: Vec<String> = Vec::new();
    let msg = condition(&b1, "HostClaimed")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    if !claim(&b1).is_empty() {
        failed.push(format!(
            "b1 claimed {:?}, the address {SHARED} that {held} (KKCluster a) holds",
            claim(&b1)
        ));
    } else if !(msg.contains(SHARED) && msg.contains(&held)) {
        failed.push(format!(
            "the refusal names the address and its holder {held}: {msg}"
        ));
    }
    let claims: Vec<String> = env.list(INFRA_V, "KKInstance").await?.iter().map(name).collect();
    if claims.len() != 1 {
        failed.push(format!("the shared address is claimed once: {claims:?}"));
    }

    // Both KKClusters say which address they share with whom, with an event.
    for (k, other) in [("a", "b"), ("b", "a")] {
        let reported = eventually(
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
        .await;
        match reported {
            Ok(kkc) => {
                let m = condition(&kkc, "AddressesUnique")
                    .and_then(|c| c["message"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                if !(m.contains(SHARED) && m.contains(&format!("KKCluster {other}"))) {
                    failed.push(format!(
                        "KKCluster {k}'s AddressesUnique names {SHARED} and {other}: {m}"
                    ));
                }
            }
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    let events = env.list("events.k8s.io/v1", "Event").await?;
    for k in ["a", "b"] {
        if !events.iter().any(|e| {
            e["reason"] == "AddressInUse"
                && e["regarding"]["kind"] == "KKCluster"
                && e["regarding"]["name"] == k
        }) {
            failed.push(format!("no AddressInUse event on KKCluster {k}"));
        }
    }
    let logs = vec![mgr.logs()];
    mgr.terminate();
    env.assert_no_canary(&["canary-pw-two-d4"], &logs).await?;
    if !failed.is_empty() {
        bail!("{} check(s) failed:\n- {}", failed.len(), failed.join("\n- "));
    }
    env.finish().await;
    Ok(())
}
