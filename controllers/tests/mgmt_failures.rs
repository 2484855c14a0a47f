//! Failure handling on sandbox hosts: a host whose key does not match the pinned fingerprint is refused
//! (HostKeyMismatch, nothing sent); a failing bootstrap command is a terminal condition naming the command,
//! exit code and output tail, that stays until the documented retry annotation is set (recording the host key
//! on first use, a spec change, does not retry it); the retry runs the failed command again on the fixed host.

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::{sandbox::*, *};
use serde_json::json;

/// Appended on host 2 each time the failing bootstrap command runs.
const RUNS: &str = "/root/capkk-fail-runs";
/// The host fix the failing bootstrap command needs (like a kernel config kubeadm's preflight reads).
const FIXED: &str = "/root/capkk-fixed";
const WRONG_KEY: &str = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn host_key_mismatch_and_terminal_command_failure_with_retry() -> anyhow::Result<()> {
    let Some((env, hosts)) = TestEnv::with_hosts("fail", "ctl-fail", 2).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    let (h1, h2) = (hosts.sb.hosts().remove(0), hosts.sb.hosts().remove(1));
    h2.sh_inside(&format!("rm -f {RUNS} {FIXED}"))?;
    // CABPK's shape: the sentinel is written only when the command succeeds.
    env.bootstrap_data(
        "bad-data",
        &format!(
            "#cloud-config\nruncmd:\n- echo run >> {RUNS}; test -e {FIXED} || {{ echo boom-output; exit 3; }}; mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"
        ),
    )
    .await?;
    let mut kkc = kkcluster(
        &ns,
        "f",
        &hosts.inventory(),
        json!({"component": hosts.component}),
    );
    kkc["spec"]["nodes"]["instances"][0]["hostKeys"] = json!([WRONG_KEY]);
    env.apply(cluster(&ns, "f", json!({}))).await?;
    env.apply(kkc).await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=5s"])?;

    // The probe already reports the mismatch (probes run in the background: wait for them).
    env.kkcluster_provisioned("f").await?;
    let k = env.kkcluster_probed("f", 2).await?;
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
    env.apply(km).await?;
    env.apply(m).await?;
    let i1_name = env.claimed_instance("m1").await?;
    let i1 = eventually("HostKeyMismatch on host 1", Duration::from_secs(90), || async {
        let i = env
            .get(INFRA_V, "KKInstance", &i1_name)
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
    env.apply(km).await?;
    env.apply(m).await?;
    let i2_name = env.claimed_instance("m2").await?;
    let i2 = eventually("CommandFailed on host 2", Duration::from_secs(180), || async {
        let i = env
            .get(INFRA_V, "KKInstance", &i2_name)
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
            let k2 = env.get(INFRA_V, "KKMachine", "m2").await?.unwrap_or_default();
            Ok((cond_state(&k2, "InstanceReady") == ("False".into(), "CommandFailed".into())).then_some(()))
        },
    )
    .await?;
    // Terminal means terminal: recording the host key on first use is a spec change (a new generation). Once
    // the manager has reconciled that generation (Ready observed it) the KKInstance is still failed, and the
    // failing command ran once. (A manager that takes the new generation for a retry runs the command again
    // first, and reports failed at that generation only after the second run.)
    let again = eventually(
        "the KKInstance failed at the generation that recorded the host key",
        Duration::from_secs(90),
        || async {
            let i = env
                .get(INFRA_V, "KKInstance", &i2_name)
                .await?
                .unwrap_or_default();
            let ready_gen = condition(&i, "Ready").map(|c| c["observedGeneration"].clone());
            if i["spec"]["hostKey"].is_string()
                && i["status"]["state"] == "failed"
                && ready_gen.as_ref() == Some(&i["metadata"]["generation"])
            {
                return Ok(Some(i));
            }
            // Said on timeout.
            Err(anyhow::anyhow!(
                "hostKey {}, generation {}, Ready observed {ready_gen:?}, state {}, runs {:?}",
                i["spec"]["hostKey"],
                i["metadata"]["generation"],
                i["status"]["state"],
                inside(&h2, &format!("cat {RUNS}"))
            ))
        },
    )
    .await?;
    ensure!(
        cond_state(&again, "Provisioned").1 == "CommandFailed",
        "still terminal: {:?}",
        condition(&again, "Provisioned")
    );
    let runs = inside(&h2, &format!("cat {RUNS}"));
    ensure!(runs == "run\n", "the failing command ran once: {runs:?}");
    ensure!(
        inside(
            &h2,
            "test -e /run/cluster-api/bootstrap-success.complete && echo yes; echo ."
        )
        .trim()
            == ".",
        "no sentinel"
    );

    // Fix the host (the bootstrap data stays the same), set the retry annotation: the failed command runs
    // again and provisions.
    inside(&h2, &format!("touch {FIXED}"));
    env.merge(
        INFRA_V,
        "KKInstance",
        &i2_name,
        json!({"metadata": {"annotations": {"kkinstance.infrastructure.cluster.x-k8s.io/retry": "1"}}}),
    )
    .await?;
    eventually("m2 provisioned after retry", Duration::from_secs(120), || async {
        let k = env.get(INFRA_V, "KKMachine", "m2").await?.unwrap_or_default();
        Ok((k["status"]["initialization"]["provisioned"] == true).then_some(()))
    })
    .await?;
    let i2 = env
        .get(INFRA_V, "KKInstance", &i2_name)
        .await?
        .unwrap_or_default();
    ensure!(
        i2["metadata"]["annotations"]
            .get("kkinstance.infrastructure.cluster.x-k8s.io/retry")
            .is_none(),
        "retry annotation consumed"
    );
    let runs = inside(&h2, &format!("cat {RUNS}"));
    ensure!(
        runs == "run\nrun\n",
        "the retry ran the failed command again: {runs:?}"
    );
    let logs = vec![mgr.logs()];
    mgr.terminate();
    env.assert_no_canary(&[&hosts.key_canary()], &logs).await?;
    env.finish().await;
    Ok(())
}
