//! CAPI contract behaviour against the local management plane (no SSH needed: the hosts are loopback
//! addresses on a closed port): pause stops work (Paused condition, no claim until unpaused) and an
//! externally-managed KKCluster is left alone (no finalizer, no status).

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::*;
use serde_json::json;

const INLINE_CANARY: &str = "canary-inline-pw-1c4b";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_stops_work_and_externally_managed_is_skipped() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = namespace(&client, "contract").await?;
    let dir = test_dir("contract")?;
    eprintln!("manager logs in {}", dir.display());
    secret(&client, &ns, "ssh-auth", &[("password", "canary-pw-contract-77")]).await?;
    secret(
        &client,
        &ns,
        "bootstrap-data",
        &[("value", "#cloud-config\n"), ("format", "cloud-config")],
    )
    .await?;
    let hosts: Vec<(String, String, u16)> = (1..=2)
        .map(|i| (format!("p{i}"), format!("127.0.2.{i}"), 1))
        .collect();
    apply(&client, &ns, cluster(&ns, "p", json!({}))).await?;
    // Inline password (CAPKK form): it must never be copied into a KKInstance, status, event or log.
    let mut p = kkcluster(
        &ns,
        "p",
        &hosts,
        json!({"controlPlaneLoadBalancer": {"host": "vip.example.test"}}),
    );
    p["spec"]["nodes"]["auth"] = json!({"user": "root", "password": INLINE_CANARY});
    apply(&client, &ns, p).await?;
    // k3s is accepted by the schema for CAPKK compatibility and refused with a clear condition.
    apply(&client, &ns, cluster(&ns, "k3s", json!({}))).await?;
    let k3s = kkcluster(
        &ns,
        "k3s",
        &[("k1".into(), "127.0.2.5".into(), 1)],
        json!({"distribution": "k3s"}),
    );
    apply(&client, &ns, k3s).await?;
    let mut ext = kkcluster(&ns, "ext", &[("e1".into(), "127.0.2.9".into(), 1)], json!({}));
    ext["metadata"]["annotations"] = json!({"cluster.x-k8s.io/managed-by": "someone-else"});
    apply(&client, &ns, cluster(&ns, "ext", json!({}))).await?;
    apply(&client, &ns, ext).await?;

    let kc = manager_kubeconfig(&client, &ns, &dir).await?;
    let mut mgr = Manager::start(
        &kc,
        &dir,
        "manager",
        &["--namespace", &ns, "--ssh-connect-timeout=2s"],
    )?;

    let kkc = eventually("KKCluster provisioned", Duration::from_secs(90), || async {
        let k = get(&client, &ns, INFRA_V, "KKCluster", "p").await?;
        Ok(k.filter(|k| k["status"]["initialization"]["provisioned"] == true))
    })
    .await?;
    ensure!(
        kkc["spec"]["controlPlaneEndpoint"] == json!({"host": "vip.example.test", "port": 6443}),
        "endpoint from the LB: {}",
        kkc["spec"]["controlPlaneEndpoint"]
    );
    ensure!(
        cond_state(&kkc, "Paused") == ("False".into(), "NotPaused".into()),
        "Paused=False"
    );
    ensure!(
        cond_state(&kkc, "HostsReachable").0 == "False",
        "hosts are unreachable"
    );
    // CAPI copies the endpoint and the provisioned flag into the Cluster.
    eventually(
        "Cluster infrastructure provisioned",
        Duration::from_secs(60),
        || async {
            let c = get(&client, &ns, CAPI_V, "Cluster", "p").await?;
            Ok(c.filter(|c| {
                c["status"]["initialization"]["infrastructureProvisioned"] == true
                    && c["spec"]["controlPlaneEndpoint"]["host"] == "vip.example.test"
            }))
        },
    )
    .await?;

    // A Machine without bootstrap data waits.
    let (km, m) = machine_pair(&ns, "p", "w1", "worker", None);
    apply(&client, &ns, km).await?;
    apply(&client, &ns, m).await?;
    eventually(
        "KKMachine waits for bootstrap data",
        Duration::from_secs(60),
        || async {
            let k = get(&client, &ns, INFRA_V, "KKMachine", "w1")
                .await?
                .unwrap_or_default();
            Ok((cond_state(&k, "Ready").1 == "WaitingForBootstrapData").then_some(()))
        },
    )
    .await?;

    // Pause the Cluster, then hand out bootstrap data: nothing is claimed while paused.
    merge(
        &client,
        &ns,
        CAPI_V,
        "Cluster",
        "p",
        json!({"spec": {"paused": true}}),
    )
    .await?;
    eventually("Paused conditions", Duration::from_secs(60), || async {
        let k = get(&client, &ns, INFRA_V, "KKMachine", "w1")
            .await?
            .unwrap_or_default();
        let c = get(&client, &ns, INFRA_V, "KKCluster", "p")
            .await?
            .unwrap_or_default();
        Ok((cond_state(&k, "Paused").0 == "True" && cond_state(&c, "Paused").0 == "True").then_some(()))
    })
    .await?;
    merge(
        &client,
        &ns,
        CAPI_V,
        "Machine",
        "w1",
        json!({"spec": {"bootstrap": {"dataSecretName": "bootstrap-data"}}}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let k = get(&client, &ns, INFRA_V, "KKMachine", "w1")
        .await?
        .unwrap_or_default();
    ensure!(
        k["spec"].get("instanceID").is_none(),
        "no claim while paused: {}",
        k["spec"]
    );
    ensure!(
        list(&client, &ns, INFRA_V, "KKInstance").await?.is_empty(),
        "no KKInstance while paused"
    );

    // Unpause: the claim happens.
    merge(
        &client,
        &ns,
        CAPI_V,
        "Cluster",
        "p",
        json!({"spec": {"paused": false}}),
    )
    .await?;
    let k = eventually("claim after unpause", Duration::from_secs(60), || async {
        let k = get(&client, &ns, INFRA_V, "KKMachine", "w1")
            .await?
            .unwrap_or_default();
        Ok((k["spec"]["instanceID"].is_string() && cond_state(&k, "Paused").0 != "True").then_some(k))
    })
    .await?;
    ensure!(
        cond_state(&k, "Paused").0 == "False" || condition(&k, "Paused").is_none(),
        "unpaused"
    );

    // The externally managed KKCluster was never touched.
    let e = get(&client, &ns, INFRA_V, "KKCluster", "ext")
        .await?
        .unwrap_or_default();
    ensure!(
        e["metadata"].get("finalizers").is_none(),
        "no finalizer on the external KKCluster: {}",
        e["metadata"]
    );
    ensure!(
        e.get("status").is_none_or(|s| s.is_null() || s == &json!({})),
        "no status: {}",
        e["status"]
    );
    ensure!(
        e["spec"].get("controlPlaneEndpoint").is_none(),
        "no endpoint written"
    );

    let inst = list(&client, &ns, INFRA_V, "KKInstance").await?;
    ensure!(inst.len() == 1, "one claim");
    ensure!(
        inst[0]["spec"]["auth"].get("password").is_none(),
        "inline password not copied: {}",
        inst[0]["spec"]["auth"]
    );
    ensure!(
        inst[0]["spec"]["clusterName"] == "p",
        "the KKInstance reads credentials from its KKCluster"
    );

    // k3s: not provisioned, Ready=False/Unsupported naming the field.
    let k3s = get(&client, &ns, INFRA_V, "KKCluster", "k3s")
        .await?
        .unwrap_or_default();
    ensure!(
        cond_state(&k3s, "Ready") == ("False".into(), "Unsupported".into()),
        "k3s refused: {:?}",
        condition(&k3s, "Ready")
    );
    ensure!(
        condition(&k3s, "Ready")
            .and_then(|c| c["message"].as_str())
            .unwrap_or("")
            .contains("spec.distribution"),
        "names the field"
    );
    ensure!(
        k3s["status"]["initialization"]["provisioned"] != true,
        "k3s cluster not provisioned"
    );

    let logs = vec![mgr.logs()];
    mgr.terminate();
    assert_no_canary(&client, &ns, &["canary-pw-contract-77", INLINE_CANARY], &logs).await?;
    cleanup_namespace(&client, &ns).await;
    Ok(())
}
