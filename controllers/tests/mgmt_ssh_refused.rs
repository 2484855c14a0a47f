//! A tenant's host address on the manager's own loopback: the real manager, with its default SSH address
//! policy, refuses the dial before any connection. The KKInstance is `AddressRefused` (condition, event
//! naming `spec.address` and the flag, mirrored on the KKMachine) and is not retried; the KKCluster's probes
//! of the same address on an open and on a closed port read the same, so the manager is no port scanner; a
//! listener the test owns on that port sees no connection. With `--ssh-allow-cidr=127.0.0.0/8` the same
//! host is dialled as before.

mod common;

use std::{
    net::TcpListener,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::ensure;
use common::*;
use serde_json::{Value, json};

const WANT: &str = "spec.address: 127.0.0.1 is a loopback address (allowed only by --ssh-allow-cidr); \
                    refused before dialling";

/// A listener on 127.0.0.1 that counts the connections it accepts and closes each at once.
fn counting_listener() -> anyhow::Result<(u16, Arc<AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if conn.is_ok() {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    Ok((port, hits))
}

/// The probe message of KKCluster `name`'s only host, once a probe reported one.
async fn probe_message(env: &TestEnv, name: &str) -> anyhow::Result<String> {
    let k = env.kkcluster_probed(name, 1).await?;
    Ok(k["status"]["hosts"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Events with `reason` in the namespace, as `kubectl describe` shows them (note or message).
async fn events(env: &TestEnv, reason: &str) -> anyhow::Result<Vec<String>> {
    let mut all = env.list("events.k8s.io/v1", "Event").await?;
    all.extend(env.list("v1", "Event").await?);
    Ok(all
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .map(|e| {
            format!(
                "{} {}",
                e["note"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_on_the_managers_loopback_is_refused_before_any_dial_with_one_message_whatever_the_port()
-> anyhow::Result<()> {
    let env = TestEnv::new("sshref").await?;
    let ns = env.ns.clone();
    let (open, hits) = counting_listener()?;
    // A port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    env.secret("ssh-auth", &[("password", "never-sent-canary")])
        .await?;
    env.bootstrap_data("data", "#cloud-config\n").await?;
    // Two KKClusters list the same address, one on the open port and one on the closed port, under the same
    // host name: their probes must read the same.
    for (name, port) in [("open", open), ("closed", closed)] {
        env.apply(cluster(&ns, name, json!({}))).await?;
        env.apply(kkcluster(
            &ns,
            name,
            &[("h".to_owned(), "127.0.0.1".to_owned(), port)],
            json!({}),
        ))
        .await?;
    }
    // The shipped default: the tests' managers otherwise allow loopback (common::ALLOW_LOOPBACK_SSH).
    let mut mgr = env.manager_shipped_ssh_policy("manager", &[])?;
    env.kkcluster_provisioned("open").await?;
    let (km, m) = machine_pair(&ns, "open", "m1", "worker", Some("data"));
    env.apply(km).await?;
    env.apply(m).await?;
    let inst = env.claimed_instance("m1").await?;

    // Refused by default: terminal, the condition names the field, the address and the flag.
    let i = eventually(
        "AddressRefused on Bootstrapped and the state failed",
        Duration::from_secs(120),
        || async {
            let i = env.get(INFRA_V, "KKInstance", &inst).await?.unwrap_or_default();
            let refused = cond_state(&i, "Bootstrapped").1 == "AddressRefused";
            Ok((refused && i["status"]["state"] == "failed").then_some(i))
        },
    )
    .await?;
    let message = |obj: &Value, type_: &str| {
        condition(obj, type_)
            .and_then(|c| c["message"].as_str())
            .unwrap_or("")
            .to_owned()
    };
    ensure!(
        message(&i, "Bootstrapped") == WANT,
        "condition: {}",
        message(&i, "Bootstrapped")
    );
    ensure!(
        cond_state(&i, "Ready").1 == "AddressRefused",
        "Ready: {:?}",
        condition(&i, "Ready")
    );
    // The contract's failure reaches the KKMachine (and so CAPI's Machine).
    eventually(
        "the KKMachine reports AddressRefused",
        Duration::from_secs(60),
        || async {
            let k = env.get(INFRA_V, "KKMachine", "m1").await?.unwrap_or_default();
            Ok((cond_state(&k, "Ready").1 == "AddressRefused").then_some(()))
        },
    )
    .await?;
    let refused = eventually("an AddressRefused event", Duration::from_secs(60), || async {
        let e = events(&env, "AddressRefused").await?;
        Ok((!e.is_empty()).then_some(e))
    })
    .await?;
    ensure!(
        refused.iter().all(|e| e.contains(WANT)),
        "the event names the field and the flag: {refused:?}"
    );

    // The probes of the open and the closed port: one message, the port's state is not told.
    let (p_open, p_closed) = (
        probe_message(&env, "open").await?,
        probe_message(&env, "closed").await?,
    );
    ensure!(
        p_open == p_closed,
        "probes of an open and a closed port differ: {p_open:?} / {p_closed:?}"
    );
    ensure!(
        p_open.contains("127.0.0.1 is a loopback address") && p_open.contains("refused before dialling"),
        "probe: {p_open}"
    );

    // Not retried: a while later nothing has dialled and host work ran once.
    tokio::time::sleep(Duration::from_secs(10)).await;
    ensure!(
        hits.load(Ordering::SeqCst) == 0,
        "the host's port was connected to"
    );
    let log = mgr.logs();
    let attempts = log.matches("Host work failed terminally").count();
    ensure!(
        attempts == 1,
        "host work ran {attempts} times (log {})",
        mgr.log.display()
    );
    let logs = vec![log];
    mgr.terminate();

    // The operator allows loopback for SSH; the retry annotation runs the host work again and the manager
    // dials the host's port as before (the listener closes at once: an unreachable host, retried).
    let mut mgr = env.manager_shipped_ssh_policy("manager-allowed", &[ALLOW_LOOPBACK_SSH])?;
    env.merge(
        INFRA_V,
        "KKInstance",
        &inst,
        json!({"metadata": {"annotations": {"kkinstance.infrastructure.cluster.x-k8s.io/retry": "1"}}}),
    )
    .await?;
    eventually(
        "the host's port dialled and reported unreachable",
        Duration::from_secs(120),
        || async {
            let i = env.get(INFRA_V, "KKInstance", &inst).await?.unwrap_or_default();
            let (_, reason) = cond_state(&i, "Bootstrapped");
            Ok((hits.load(Ordering::SeqCst) >= 1 && reason == "HostUnreachable").then_some(()))
        },
    )
    .await?;
    let mut logs = logs;
    logs.push(mgr.logs());
    mgr.terminate();
    env.assert_no_canary(&["never-sent-canary"], &logs).await?;
    env.finish().await;
    Ok(())
}
