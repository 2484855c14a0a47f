//! Claim race: 20 KKMachines for 10 matching hosts, two manager processes at once (leader election off, so
//! both reconcile everything) -> exactly 10 claims, no host twice, no KKMachine with two hosts; the other
//! 10 wait with HostClaimed=False/NoHostAvailable. Runs against the local management plane with the real
//! CAPI controllers; each manager runs as its own process with a ServiceAccount bound to exactly the
//! ClusterRole in config/rbac. The hosts are loopback addresses on a closed port: claiming needs no SSH.

mod common;

use std::{collections::HashSet, time::Duration};

use anyhow::ensure;
use common::*;
use serde_json::json;

const HOSTS: usize = 10;
const MACHINES: usize = 20;
const PASSWORD_CANARY: &str = "canary-pw-4f1d0c77";
const BOOTSTRAP_CANARY: &str = "canary-bootstrap-9a2e51";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_machines_ten_hosts_two_managers() -> anyhow::Result<()> {
    let env = TestEnv::new("race").await?;
    let ns = env.ns.clone();
    env.secret("ssh-auth", &[("password", PASSWORD_CANARY)]).await?;
    env.secret(
        "bootstrap-data",
        &[
            ("value", &format!("#cloud-config\n# {BOOTSTRAP_CANARY}\n")),
            ("format", "cloud-config"),
        ],
    )
    .await?;
    let hosts: Vec<(String, String, u16)> = (1..=HOSTS)
        .map(|i| (format!("host{i:02}"), format!("127.0.1.{i}"), 1))
        .collect();
    env.apply(cluster(&ns, "race", json!({}))).await?;
    env.apply(kkcluster(&ns, "race", &hosts, json!({}))).await?;

    let args = [
        "--leader-elect=false",
        "--ssh-connect-timeout=2s",
        "--probe-concurrency=10",
    ];
    let mut m1 = env.manager("m1", &args)?;
    let mut m2 = env.manager("m2", &args)?;

    env.kkcluster_provisioned("race").await?;

    for i in 0..MACHINES {
        env.machine("race", &format!("m{i:02}"), "worker", Some("bootstrap-data"))
            .await?;
    }

    let settled = eventually(
        "10 claims and 10 waiting KKMachines",
        Duration::from_secs(180),
        || async {
            let kms = env.list(INFRA_V, "KKMachine").await?;
            let claimed = kms.iter().filter(|k| k["spec"]["instanceID"].is_string()).count();
            let waiting = kms
                .iter()
                .filter(|k| !k["spec"]["instanceID"].is_string())
                .filter(|k| cond_state(k, "HostClaimed") == ("False".into(), "NoHostAvailable".into()))
                .count();
            Ok((claimed == HOSTS && waiting == MACHINES - HOSTS).then_some(kms))
        },
    )
    .await?;
    ensure!(m1.running() && m2.running(), "both managers are still running");

    // Stable: give both managers time to make any further (wrong) claim, then check everything.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let kms = env.list(INFRA_V, "KKMachine").await?;
    let insts = env.list(INFRA_V, "KKInstance").await?;
    ensure!(
        insts.len() == HOSTS,
        "{} KKInstances, expected {HOSTS}",
        insts.len()
    );
    let mut owners = HashSet::new();
    for i in &insts {
        let owner = i["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|o| o.iter().find(|o| o["controller"] == true))
            .map(|o| o["name"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_default();
        ensure!(owners.insert(owner.clone()), "KKMachine {owner} holds two hosts");
        let km = kms
            .iter()
            .find(|k| name(k) == owner)
            .ok_or_else(|| anyhow::anyhow!("owner {owner} missing"))?;
        ensure!(
            km["spec"]["instanceID"] == i["metadata"]["name"],
            "KKMachine {owner} records {} but owns {}",
            km["spec"]["instanceID"],
            name(i)
        );
        ensure!(
            name(i) == format!("race.{}", i["spec"]["name"].as_str().unwrap_or_default()),
            "KKInstance named <kkcluster>.<host>: {}",
            name(i)
        );
        ensure!(
            km["spec"]["providerID"]
                == json!(format!(
                    "kk:///race/{}",
                    i["spec"]["name"].as_str().unwrap_or_default()
                )),
            "providerID of {owner}: {}",
            km["spec"]["providerID"]
        );
        ensure!(
            i["spec"].get("auth").and_then(|a| a.get("password")).is_none(),
            "no password copied"
        );
    }
    let recorded: Vec<&str> = kms
        .iter()
        .filter_map(|k| k["spec"]["instanceID"].as_str())
        .collect();
    let unique: HashSet<&&str> = recorded.iter().collect();
    ensure!(
        recorded.len() == HOSTS && unique.len() == HOSTS,
        "claims: {recorded:?}"
    );
    for k in kms.iter().filter(|k| !k["spec"]["instanceID"].is_string()) {
        let c = condition(k, "HostClaimed").cloned().unwrap_or_default();
        ensure!(
            c["message"].as_str().unwrap_or("").contains("no free host"),
            "waiting KKMachine {} explains itself: {c}",
            name(k)
        );
    }
    drop(settled);
    let logs = vec![m1.logs(), m2.logs()];
    m1.terminate();
    m2.terminate();
    env.assert_no_canary(&[PASSWORD_CANARY, BOOTSTRAP_CANARY], &logs)
        .await?;
    env.finish().await;
    Ok(())
}
