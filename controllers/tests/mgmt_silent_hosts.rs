//! Hosts that accept TCP connections but never speak SSH (a listener in this test holds every connection
//! open and sends nothing), with the manager's `--ssh-connect-timeout` at an hour: a KKCluster is provisioned
//! without waiting for the probes of such hosts (they report later, in the background), and a host's own
//! `auth.timeout` ends its connect. No sandbox needed.

mod common;

use std::net::{TcpListener, TcpStream};

use anyhow::ensure;
use common::*;
use serde_json::{Value, json};

/// A listener on `address` (any free port) that accepts connections and keeps them open without a word;
/// returns its port. The thread ends with the test process.
fn silent_listener(address: &str) -> anyhow::Result<u16> {
    let l = TcpListener::bind((address, 0))?;
    let port = l.local_addr()?.port();
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
        }
    });
    Ok(port)
}

/// The probe of host `name` in a KKCluster's status.
fn probe<'a>(kkc: &'a Value, name: &str) -> Option<&'a Value> {
    kkc["status"]["hosts"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kkcluster_is_provisioned_while_the_probes_of_its_silent_hosts_still_run() -> anyhow::Result<()> {
    let env = TestEnv::new("silentprobe").await?;
    env.secret("ssh-auth", &[("password", "canary-pw-silent-7d")])
        .await?;
    // Two silent hosts probed one at a time: each probe gives up after the manager's probe timeout, so the
    // probe results come well after the KKCluster's first reconcile, which must not wait for them.
    let mut hosts = Vec::new();
    for i in 1..=2 {
        let address = format!("127.0.7.{i}");
        let port = silent_listener(&address)?;
        hosts.push((format!("s{i}"), address, port));
    }
    env.cluster("s", &hosts, json!({})).await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=1h", "--probe-concurrency=1"])?;

    let first = env.kkcluster_provisioned("s").await?;
    ensure!(
        first["status"]["hosts"].as_array().is_none_or(|h| h.is_empty()),
        "the KKCluster was reported provisioned only together with its probe results (the reconcile waited \
         for the probes): {}",
        first["status"]
    );
    ensure!(
        cond_state(&first, "HostsReachable").0 == "Unknown",
        "HostsReachable is Unknown while the probes run: {:?}",
        condition(&first, "HostsReachable")
    );
    // The probes still report, in the background.
    let probed = env.kkcluster_probed("s", 2).await?;
    for (name, ..) in &hosts {
        let p = probe(&probed, name).cloned().unwrap_or_default();
        ensure!(p["reachable"] == false, "probe of silent host {name}: {p}");
    }
    ensure!(
        cond_state(&probed, "HostsReachable").0 == "False",
        "HostsReachable after the probes: {:?}",
        condition(&probed, "HostsReachable")
    );
    let logs = vec![mgr.logs()];
    mgr.terminate();
    env.assert_no_canary(&["canary-pw-silent-7d"], &logs).await?;
    env.finish().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hosts_auth_timeout_ends_its_connect_instead_of_the_managers_connect_timeout() -> anyhow::Result<()>
{
    let env = TestEnv::new("silenttimeout").await?;
    env.secret("ssh-auth", &[("password", "canary-pw-silent-8e")])
        .await?;
    let address = "127.0.7.9";
    let port = silent_listener(address)?;
    let mut kkc = kkcluster(&env.ns, "t", &[("t1".into(), address.into(), port)], json!({}));
    kkc["spec"]["nodes"]["instances"][0]["auth"]["timeout"] = json!("2s");
    env.apply(cluster(&env.ns, "t", json!({}))).await?;
    env.apply(kkc).await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=1h"])?;

    let k = env.kkcluster_probed("t", 1).await?;
    let p = probe(&k, "t1").cloned().unwrap_or_default();
    let message = p["message"].as_str().unwrap_or_default();
    ensure!(
        p["reachable"] == false && message.contains("timed out after 2s"),
        "the probe's connect gave up after the host's auth.timeout (2s), not the manager's hour: {p}"
    );
    let logs = vec![mgr.logs()];
    mgr.terminate();
    env.assert_no_canary(&["canary-pw-silent-8e"], &logs).await?;
    env.finish().await;
    Ok(())
}
