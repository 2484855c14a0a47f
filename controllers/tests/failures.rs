//! Failure handling on sandbox hosts: a host whose key does not match the pinned fingerprint is refused
//! (HostKeyMismatch, nothing sent); a failing bootstrap command is a terminal condition naming the command,
//! exit code and output tail, that stays until the documented retry annotation is set.

mod common;

use std::time::Duration;

use anyhow::ensure;
use capkk_sandbox::{Sandbox, SandboxConfig, skip_unless_supported};
use common::{sandbox::*, *};
use serde_json::json;

const WRONG_KEY: &str = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn host_key_mismatch_and_terminal_command_failure_with_retry() -> anyhow::Result<()> {
    if skip_unless_supported() {
        return Ok(());
    }
    let sb = Sandbox::shared(&SandboxConfig::new("ctl-fail", 2))?;
    for h in sb.hosts() {
        h.link_up()?;
        install_fakes(&h)?;
    }
    let (h1, h2) = (sb.hosts().remove(0), sb.hosts().remove(1));
    let client = client().await?;
    let ns = namespace(&client, "fail").await?;
    let dir = test_dir("fail")?;
    eprintln!("manager logs in {}", dir.display());
    let mirror = Mirror::start(&sb)?;
    let component = publish_standins(&mirror, &dir, "amd64")?;
    let key = std::fs::read_to_string(&sb.credentials().ed25519_key)?;
    secret(&client, &ns, "ssh-auth", &[("privateKey", &key)]).await?;
    secret(
        &client,
        &ns,
        "bad-data",
        &[
            ("value", "#cloud-config\nruncmd:\n- echo boom-output; exit 3\n"),
            ("format", "cloud-config"),
        ],
    )
    .await?;
    let mut kkc = kkcluster(
        &ns,
        "f",
        &[
            (h1.info.name.clone(), h1.address().to_owned(), 22),
            (h2.info.name.clone(), h2.address().to_owned(), 22),
        ],
        json!({"component": component}),
    );
    kkc["spec"]["nodes"]["instances"][0]["hostKeys"] = json!([WRONG_KEY]);
    apply(&client, &ns, cluster(&ns, "f", json!({}))).await?;
    apply(&client, &ns, kkc).await?;

    let kc = manager_kubeconfig(&client, &ns, &dir).await?;
    let cache = dir.join("cache");
    let mut mgr = Manager::start(
        &kc,
        &dir,
        "manager",
        &[
            "--namespace",
            &ns,
            "--ssh-connect-timeout=5s",
            "--artifact-cache-dir",
            cache.to_str().unwrap_or("/tmp"),
        ],
    )?;

    // The probe already reports the mismatch.
    let k = eventually("KKCluster provisioned", Duration::from_secs(90), || async {
        let k = get(&client, &ns, INFRA_V, "KKCluster", "f").await?;
        Ok(k.filter(|k| k["status"]["initialization"]["provisioned"] == true))
    })
    .await?;
    let p1 = k["status"]["hosts"]
        .as_array()
        .and_then(|h| h.iter().find(|p| p["name"] == h1.info.name.as_str()))
        .cloned()
        .unwrap_or_default();
    ensure!(
        p1["reachable"] == false && p1["message"].as_str().unwrap_or("").contains("does not match"),
        "probe of the pinned host: {p1}"
    );

    // Machine 1 gets host 1 (first in the inventory): refused, terminal.
    let (km, m) = machine_pair(&ns, "f", "m1", "worker", Some("bad-data"));
    apply(&client, &ns, km).await?;
    apply(&client, &ns, m).await?;
    let i1 = eventually("HostKeyMismatch on host 1", Duration::from_secs(90), || async {
        let i = get(&client, &ns, INFRA_V, "KKInstance", &h1.info.name)
            .await?
            .unwrap_or_default();
        Ok((cond_state(&i, "Ready").1 == "HostKeyMismatch").then_some(i))
    })
    .await?;
    ensure!(
        i1["status"]["state"] == "failed",
        "state failed: {}",
        i1["status"]["state"]
    );
    ensure!(i1["spec"].get("hostKey").is_none(), "no key trusted");
    ensure!(
        !inside(&h1, "ls /var/lib/capkk 2>/dev/null; echo .").contains("provisioning"),
        "nothing ran on host 1"
    );

    // Machine 2 gets host 2: the bootstrap command fails -> terminal condition with command, exit, output.
    let (km, m) = machine_pair(&ns, "f", "m2", "worker", Some("bad-data"));
    apply(&client, &ns, km).await?;
    apply(&client, &ns, m).await?;
    let i2 = eventually("CommandFailed on host 2", Duration::from_secs(180), || async {
        let i = get(&client, &ns, INFRA_V, "KKInstance", &h2.info.name)
            .await?
            .unwrap_or_default();
        Ok((cond_state(&i, "Provisioned").1 == "CommandFailed").then_some(i))
    })
    .await?;
    let msg = condition(&i2, "Provisioned")
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_owned();
    ensure!(
        msg.contains("exit 3") && msg.contains("exited with 3") && msg.contains("boom-output"),
        "failure message: {msg}"
    );
    // The KKMachine mirrors its KKInstance in its own (later) reconcile.
    eventually(
        "CommandFailed mirrored into the KKMachine",
        Duration::from_secs(60),
        || async {
            let k2 = get(&client, &ns, INFRA_V, "KKMachine", "m2")
                .await?
                .unwrap_or_default();
            Ok((cond_state(&k2, "InstanceReady") == ("False".into(), "CommandFailed".into())).then_some(()))
        },
    )
    .await?;
    // Stays failed (no retry loop).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let again = get(&client, &ns, INFRA_V, "KKInstance", &h2.info.name)
        .await?
        .unwrap_or_default();
    ensure!(
        cond_state(&again, "Provisioned").1 == "CommandFailed",
        "still terminal"
    );
    ensure!(
        inside(
            &h2,
            "test -e /run/cluster-api/bootstrap-success.complete && echo yes; echo ."
        )
        .trim()
            == ".",
        "no sentinel"
    );

    // Fix the data, set the retry annotation: it provisions.
    let good = "#cloud-config\nruncmd:\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n";
    merge(
        &client,
        &ns,
        "v1",
        "Secret",
        "bad-data",
        json!({"stringData": {"value": good}}),
    )
    .await?;
    merge(
        &client,
        &ns,
        INFRA_V,
        "KKInstance",
        &h2.info.name,
        json!({"metadata": {"annotations": {"kkinstance.infrastructure.cluster.x-k8s.io/retry": "1"}}}),
    )
    .await?;
    eventually("m2 provisioned after retry", Duration::from_secs(120), || async {
        let k = get(&client, &ns, INFRA_V, "KKMachine", "m2")
            .await?
            .unwrap_or_default();
        Ok((k["status"]["initialization"]["provisioned"] == true).then_some(()))
    })
    .await?;
    let i2 = get(&client, &ns, INFRA_V, "KKInstance", &h2.info.name)
        .await?
        .unwrap_or_default();
    ensure!(
        i2["metadata"]["annotations"]
            .get("kkinstance.infrastructure.cluster.x-k8s.io/retry")
            .is_none(),
        "retry annotation consumed"
    );
    // The workload Node gets spec.providerID through the <cluster>-kubeconfig Secret (the management plane
    // stands in for the workload cluster: a Node object named after the host, no providerID yet).
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let node_name = h2.info.name.clone();
    let _ = nodes.delete(&node_name, &Default::default()).await;
    eventually("old Node gone", Duration::from_secs(30), || async {
        Ok(nodes.get_opt(&node_name).await?.is_none().then_some(()))
    })
    .await?;
    let node: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": node_name}}))?;
    nodes.create(&Default::default(), &node).await?;
    let plane = capkk_mgmt::ManagementPlane::shared().await?;
    let admin_kc = std::fs::read_to_string(plane.kubeconfig_path())?;
    secret(&client, &ns, "f-kubeconfig", &[("value", &admin_kc)]).await?;
    let pid = eventually("Node providerID patched", Duration::from_secs(90), || async {
        let n = nodes.get(&node_name).await?;
        Ok(n.spec.and_then(|s| s.provider_id))
    })
    .await?;
    ensure!(pid == format!("kk:///f/{node_name}"), "Node providerID {pid}");
    let _ = nodes.delete(&node_name, &Default::default()).await;

    let logs = vec![mgr.logs()];
    mgr.terminate();
    assert_no_canary(&client, &ns, &[key.lines().nth(2).unwrap_or("-")], &logs).await?;
    cleanup_namespace(&client, &ns).await;
    Ok(())
}
