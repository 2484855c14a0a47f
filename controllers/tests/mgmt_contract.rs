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
    let env = TestEnv::new("contract").await?;
    let ns = env.ns.clone();
    env.secret("ssh-auth", &[("password", "canary-pw-contract-77")])
        .await?;
    env.secret(
        "bootstrap-data",
        &[("value", "#cloud-config\n"), ("format", "cloud-config")],
    )
    .await?;
    let hosts: Vec<(String, String, u16)> = (1..=2)
        .map(|i| (format!("p{i}"), format!("127.0.2.{i}"), 1))
        .collect();
    env.apply(cluster(&ns, "p", json!({}))).await?;
    // Inline password (CAPKK form): it must never be copied into a KKInstance, status, event or log.
    let mut p = kkcluster(
        &ns,
        "p",
        &hosts,
        json!({"controlPlaneLoadBalancer": {"host": "vip.example.test"}}),
    );
    p["spec"]["nodes"]["auth"] = json!({"user": "root", "password": INLINE_CANARY});
    env.apply(p).await?;
    // k3s is accepted by the schema for CAPKK compatibility and refused with a clear condition.
    env.apply(cluster(&ns, "k3s", json!({}))).await?;
    let k3s = kkcluster(
        &ns,
        "k3s",
        &[("k1".into(), "127.0.2.5".into(), 1)],
        json!({"distribution": "k3s"}),
    );
    env.apply(k3s).await?;
    let mut ext = kkcluster(&ns, "ext", &[("e1".into(), "127.0.2.9".into(), 1)], json!({}));
    ext["metadata"]["annotations"] = json!({"cluster.x-k8s.io/managed-by": "someone-else"});
    env.apply(cluster(&ns, "ext", json!({}))).await?;
    env.apply(ext).await?;

    // The strict order: the worker waits for its bootstrap data before it claims anything.
    let mut mgr = env.manager(
        "manager",
        &[
            "--ssh-connect-timeout=2s",
            "--prepare-before-bootstrap-data=false",
        ],
    )?;

    env.kkcluster_provisioned("p").await?;
    // Probes run in the background and report later.
    let kkc = env.kkcluster_probed("p", 2).await?;
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
            let c = env.get(CAPI_V, "Cluster", "p").await?;
            Ok(c.filter(|c| {
                c["status"]["initialization"]["infrastructureProvisioned"] == true
                    && c["spec"]["controlPlaneEndpoint"]["host"] == "vip.example.test"
            }))
        },
    )
    .await?;

    // A Machine without bootstrap data waits.
    let (km, m) = machine_pair(&ns, "p", "w1", "worker", None);
    env.apply(km).await?;
    env.apply(m).await?;
    eventually(
        "KKMachine waits for bootstrap data",
        Duration::from_secs(60),
        || async {
            let k = env.get(INFRA_V, "KKMachine", "w1").await?.unwrap_or_default();
            Ok((cond_state(&k, "Ready").1 == "WaitingForBootstrapData").then_some(()))
        },
    )
    .await?;

    // Pause the Cluster, then hand out bootstrap data: nothing is claimed while paused.
    env.merge(CAPI_V, "Cluster", "p", json!({"spec": {"paused": true}}))
        .await?;
    eventually("Paused conditions", Duration::from_secs(60), || async {
        let k = env.get(INFRA_V, "KKMachine", "w1").await?.unwrap_or_default();
        let c = env.get(INFRA_V, "KKCluster", "p").await?.unwrap_or_default();
        Ok((cond_state(&k, "Paused").0 == "True" && cond_state(&c, "Paused").0 == "True").then_some(()))
    })
    .await?;
    env.merge(
        CAPI_V,
        "Machine",
        "w1",
        json!({"spec": {"bootstrap": {"dataSecretName": "bootstrap-data"}}}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let k = env.get(INFRA_V, "KKMachine", "w1").await?.unwrap_or_default();
    ensure!(
        k["spec"].get("instanceID").is_none(),
        "no claim while paused: {}",
        k["spec"]
    );
    ensure!(
        env.list(INFRA_V, "KKInstance").await?.is_empty(),
        "no KKInstance while paused"
    );

    // Unpause: the claim happens.
    env.merge(CAPI_V, "Cluster", "p", json!({"spec": {"paused": false}}))
        .await?;
    let k = eventually("claim after unpause", Duration::from_secs(60), || async {
        let k = env.get(INFRA_V, "KKMachine", "w1").await?.unwrap_or_default();
        Ok((k["spec"]["instanceID"].is_string() && cond_state(&k, "Paused").0 != "True").then_some(k))
    })
    .await?;
    ensure!(
        cond_state(&k, "Paused").0 == "False" || condition(&k, "Paused").is_none(),
        "unpaused"
    );

    // The externally managed KKCluster was never touched.
    let e = env.get(INFRA_V, "KKCluster", "ext").await?.unwrap_or_default();
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

    let inst = env.list(INFRA_V, "KKInstance").await?;
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

    // k3s: not provisioned, Ready=False/Unsupported naming the field (its own reconcile: wait for it).
    let k3s = eventually("KKCluster k3s refused", Duration::from_secs(60), || async {
        let k = env.get(INFRA_V, "KKCluster", "k3s").await?.unwrap_or_default();
        if cond_state(&k, "Ready") == ("False".into(), "Unsupported".into()) {
            return Ok(Some(k));
        }
        // Said on timeout.
        Err(anyhow::anyhow!("Ready: {:?}", condition(&k, "Ready")))
    })
    .await?;
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
    ensure!(
        logs[0].contains("INFO") && !logs[0].contains('\u{1b}'),
        "the manager logs to a file without terminal colour codes"
    );
    env.assert_no_canary(&["canary-pw-contract-77", INLINE_CANARY], &logs)
        .await?;
    env.finish().await;
    Ok(())
}
