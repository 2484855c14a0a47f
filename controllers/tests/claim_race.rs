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
    let client = client().await?;
    let ns = namespace(&client, "race").await?;
    let dir = test_dir("race")?;
    eprintln!("manager logs in {}", dir.display());
    secret(&client, &ns, "ssh-auth", &[("password", PASSWORD_CANARY)]).await?;
    secret(
        &client,
        &ns,
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
    apply(&client, &ns, cluster(&ns, "race", json!({}))).await?;
    apply(&client, &ns, kkcluster(&ns, "race", &hosts, json!({}))).await?;

    let kc = manager_kubeconfig(&client, &ns, &dir).await?;
    let args = [
        "--namespace",
        &ns,
        "--leader-elect=false",
        "--ssh-connect-timeout=2s",
        "--probe-concurrency=10",
    ];
    let mut m1 = Manager::start(&kc, &dir, "m1", &args)?;
    let mut m2 = Manager::start(&kc, &dir, "m2", &args)?;

    eventually("KKCluster provisioned", Duration::from_secs(90), || async {
        let k = get(&client, &ns, INFRA_V, "KKCluster", "race").await?;
        Ok(k.filter(|k| k["status"]["initialization"]["provisioned"] == true)
            .map(|_| ()))
    })
    .await?;

    for i in 0..MACHINES {
        let (km, m) = machine_pair(&ns, "race", &format!("m{i:02}"), "worker", Some("bootstrap-data"));
        apply(&client, &ns, km).await?;
        apply(&client, &ns, m).await?;
    }

    let settled = eventually(
        "10 claims and 10 waiting KKMachines",
        Duration::from_secs(180),
        || async {
            let kms = list(&client, &ns, INFRA_V, "KKMachine").await?;
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
    let kms = list(&client, &ns, INFRA_V, "KKMachine").await?;
    let insts = list(&client, &ns, INFRA_V, "KKInstance").await?;
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
            km["spec"]["providerID"] == json!(format!("kk:///race/{}", name(i))),
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
    assert_no_canary(&client, &ns, &[PASSWORD_CANARY, BOOTSTRAP_CANARY], &logs).await?;
    cleanup_namespace(&client, &ns).await;
    Ok(())
}
