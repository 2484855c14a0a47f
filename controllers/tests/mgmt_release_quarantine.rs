//! Deleting a Machine resets its host and frees it; a host that is unreachable when its Machine is deleted
//! ends quarantined (not claimable) while the Machine goes away. Sandbox SSH hosts, the real CAPI
//! controllers, the manager as a separate process bound to the config/rbac ClusterRole. Also checks the
//! manager's /metrics and /readyz endpoints.

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::{sandbox::*, *};
use serde_json::json;

const BOOTSTRAP_CANARY: &str = "canary-bootstrap-del-5e0c";

fn bootstrap_data() -> String {
    format!(
        "#cloud-config\nwrite_files:\n- path: /etc/kubernetes/capkk-test-marker\n  content: \"{BOOTSTRAP_CANARY}\"\n  permissions: '0600'\nruncmd:\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_resets_and_frees_unreachable_is_quarantined() -> anyhow::Result<()> {
    let Some((env, hosts)) = TestEnv::with_hosts("del", "ctl-del", 2).await? else {
        return Ok(());
    };
    let key = hosts.key.clone();
    env.bootstrap_data("bootstrap-data", &bootstrap_data()).await?;
    env.cluster("d", &hosts.inventory(), json!({"component": hosts.component}))
        .await?;
    for m in ["a", "b"] {
        env.machine("d", m, "worker", Some("bootstrap-data")).await?;
    }
    let ns = env.ns.clone();

    // The pool series name tenants: only the authenticated diagnostics endpoint serves them.
    let scraper = env.metrics_reader_token().await?;
    let (mport, hport) = (free_port()?, free_port()?);
    let mut mgr = env.manager(
        "manager",
        &[
            "--ssh-connect-timeout=3s",
            "--quarantine-after=15s",
            &format!("--diagnostics-address=127.0.0.1:{mport}"),
            &format!("--health-probe-bind-address=127.0.0.1:{hport}"),
        ],
    )?;

    let provisioned = eventually(
        "both KKMachines provisioned",
        Duration::from_secs(240),
        || async {
            let kms = env.list(INFRA_V, "KKMachine").await?;
            let done: Vec<_> = kms
                .iter()
                .filter(|k| k["status"]["initialization"]["provisioned"] == true)
                .cloned()
                .collect();
            Ok((done.len() == 2).then_some(done))
        },
    )
    .await?;
    let host_of = |m: &str| -> String {
        provisioned
            .iter()
            .find(|k| name(k) == m)
            .map(|k| k["spec"]["instanceID"].as_str().unwrap_or("").to_owned())
            .unwrap_or_default()
    };
    let (ia, ib) = (host_of("a"), host_of("b"));
    ensure!(
        !ia.is_empty() && !ib.is_empty() && ia != ib,
        "two hosts: {ia} {ib}"
    );
    // KKInstances are named <kkcluster>.<host>.
    let (ha, hb) = (
        ia.trim_start_matches("d.").to_owned(),
        ib.trim_start_matches("d.").to_owned(),
    );
    let host_a = hosts.sb.host(&ha)?;
    let host_b = hosts.sb.host(&hb)?;
    ensure!(
        inside(&host_a, "cat /etc/kubernetes/capkk-test-marker").contains(BOOTSTRAP_CANARY),
        "bootstrap data ran"
    );

    // Readiness and metrics.
    ensure!(http_get(hport, "/readyz")?.contains("200 OK"), "readyz");
    ensure!(http_get(hport, "/healthz")?.contains("200 OK"), "healthz");
    let metrics = scrape_diagnostics(mport, &scraper).await?;
    for needle in [
        "capkk_reconcile_total{kind=\"KKInstance\"}",
        "capkk_reconcile_duration_seconds_bucket",
        "capkk_ssh_command_duration_seconds_count",
        "capkk_hosts{",
    ] {
        ensure!(metrics.contains(needle), "metrics lack {needle}");
    }

    // 1. Delete Machine a: the host is reset (sentinel, bootstrap files, capkk state gone) and freed.
    env.delete(CAPI_V, "Machine", "a").await?;
    eventually("Machine a gone", Duration::from_secs(120), || async {
        Ok(env.get(CAPI_V, "Machine", "a").await?.is_none().then_some(()))
    })
    .await?;
    ensure!(
        env.get(INFRA_V, "KKInstance", &ia).await?.is_none(),
        "host {ha} freed (KKInstance deleted)"
    );
    let state = inside(
        &host_a,
        "for p in /run/cluster-api/bootstrap-success.complete /etc/kubernetes /var/lib/capkk; do [ -e $p ] && echo present $p; done; echo checked",
    );
    ensure!(state.trim() == "checked", "reset left: {state}");

    // 2. Host b unreachable, delete Machine b: the Machine goes, the host is quarantined.
    host_b.link_down()?;
    env.delete(CAPI_V, "Machine", "b").await?;
    let q = eventually(
        "Machine b gone and host quarantined",
        Duration::from_secs(150),
        || async {
            let m = env.get(CAPI_V, "Machine", "b").await?;
            let i = env.get(INFRA_V, "KKInstance", &ib).await?;
            Ok(match (m, i) {
                (None, Some(i)) if i["spec"]["quarantine"].is_object() => Some(i),
                _ => None,
            })
        },
    )
    .await;
    host_b.link_up()?;
    let q = q?;
    ensure!(
        q["metadata"]["labels"]["kkinstance.infrastructure.cluster.x-k8s.io/quarantined"] == "true",
        "label"
    );
    let owners = q["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        owners.iter().all(|o| o["kind"] != "KKMachine"),
        "released from the KKMachine: {owners:?}"
    );
    ensure!(
        owners.iter().any(|o| o["kind"] == "Cluster" && o["name"] == "d"),
        "still owned by the Cluster (clusterctl move takes it along): {owners:?}"
    );
    ensure!(
        cond_state(&q, "Ready") == ("False".into(), "Quarantined".into()),
        "Ready=False/Quarantined"
    );
    ensure!(
        q["spec"]["quarantine"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("unreachable"),
        "reason: {}",
        q["spec"]["quarantine"]
    );

    // 3. A new Machine gets the freed host, never the quarantined one.
    env.machine("d", "c", "worker", Some("bootstrap-data")).await?;
    let c = eventually(
        "Machine c claims the freed host",
        Duration::from_secs(60),
        || async {
            let k = env.get(INFRA_V, "KKMachine", "c").await?.unwrap_or_default();
            Ok(k["spec"]["instanceID"].as_str().map(str::to_owned))
        },
    )
    .await?;
    ensure!(c == ia, "claimed {c}, expected the freed host {ia}");
    let kkc = eventually(
        "pool metrics count the quarantined host",
        Duration::from_secs(60),
        || async {
            let m = scrape_diagnostics(mport, &scraper).await?;
            Ok(m.contains(&format!(
                "capkk_hosts{{namespace=\"{ns}\",kkcluster=\"d\",state=\"quarantined\"}} 1"
            ))
            .then_some(()))
        },
    )
    .await;
    let logs = vec![mgr.logs()];
    mgr.terminate();
    kkc?;
    env.assert_no_canary(&[BOOTSTRAP_CANARY, key.lines().nth(2).unwrap_or("-")], &logs)
        .await?;
    env.finish().await;
    Ok(())
}
