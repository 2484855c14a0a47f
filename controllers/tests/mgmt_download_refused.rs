//! A tenant's override URL pointing at the manager's own loopback: the real manager refuses the
//! controller-side download with `DownloadRefused` (condition and event naming the override URL field and
//! the flag), never contacting the listener; the operator's `--download-allow-loopback` plus the retry
//! annotation lets the same URL through.

mod common;

use std::{
    io::{Read, Write},
    net::TcpListener,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::ensure;
use common::{sandbox::*, *};
use serde_json::json;

const FIELD: &str = "spec.component.overrides[id=kubeadm].url";

/// Serves `body` to every request on 127.0.0.1 (one response per connection) and counts the connections.
fn loopback_mirror(body: Vec<u8>) -> anyhow::Result<(u16, Arc<AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            seen.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(&body);
        }
    });
    Ok((port, hits))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_override_url_on_the_managers_loopback_is_refused_naming_the_field_until_the_operator_allows_it()
-> anyhow::Result<()> {
    let Some((env, hosts)) = TestEnv::with_hosts("dlref", "ctl-dlref", 1).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    let (port, hits) = loopback_mirror(kubeadm_standin())?;
    let url = format!("http://127.0.0.1:{port}/kubeadm");
    let mut component = hosts.component.clone();
    let kubeadm = component["overrides"]
        .as_array_mut()
        .and_then(|o| o.iter_mut().find(|o| o["id"] == "kubeadm"))
        .ok_or_else(|| anyhow::anyhow!("no kubeadm override in {}", hosts.component))?;
    kubeadm["url"] = json!(url);
    env.bootstrap_data(
        "data",
        "#cloud-config\nruncmd:\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n",
    )
    .await?;
    env.apply(cluster(&ns, "d", json!({}))).await?;
    env.apply(kkcluster(
        &ns,
        "d",
        &hosts.inventory(),
        json!({"component": component}),
    ))
    .await?;
    let mut mgr = env.manager("manager", &[])?;
    env.kkcluster_provisioned("d").await?;
    let (km, m) = machine_pair(&ns, "d", "m1", "worker", Some("data"));
    env.apply(km).await?;
    env.apply(m).await?;
    let inst = env.claimed_instance("m1").await?;

    // Refused by default: a terminal condition naming the field, the URL and why. The host task writes the
    // condition and the next reconcile classifies the state as failed: two status writes, so both are waited for
    // (a read between them saw `bootstrapping`).
    let i = eventually(
        "DownloadRefused on BinariesReady and the state failed",
        Duration::from_secs(180),
        || async {
            let i = env.get(INFRA_V, "KKInstance", &inst).await?.unwrap_or_default();
            let refused = cond_state(&i, "BinariesReady").1 == "DownloadRefused";
            Ok((refused && i["status"]["state"] == "failed").then_some(i))
        },
    )
    .await?;
    let msg = condition(&i, "BinariesReady")
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_owned();
    for part in [
        FIELD,
        url.as_str(),
        "127.0.0.1 is a loopback address (allowed only by --download-allow-loopback)",
    ] {
        ensure!(msg.contains(part), "the condition says {part:?}: {msg}");
    }
    // The event, as `kubectl describe` shows it.
    let event = eventually("a DownloadRefused event", Duration::from_secs(60), || async {
        let mut all = env.list("events.k8s.io/v1", "Event").await?;
        all.extend(env.list("v1", "Event").await?);
        Ok(all.into_iter().find(|e| e["reason"] == "DownloadRefused"))
    })
    .await?;
    let text = format!("{} {}", event["note"], event["message"]);
    ensure!(
        text.contains(FIELD) && text.contains("--download-allow-loopback"),
        "event: {event}"
    );
    ensure!(
        hits.load(Ordering::SeqCst) == 0,
        "the loopback listener was contacted"
    );

    // The operator opts in to loopback; the retry annotation runs the host work again and the download
    // reaches the listener.
    mgr.terminate();
    let mut mgr = env.manager("manager-loopback", &["--download-allow-loopback"])?;
    env.merge(
        INFRA_V,
        "KKInstance",
        &inst,
        json!({"metadata": {"annotations": {"kkinstance.infrastructure.cluster.x-k8s.io/retry": "1"}}}),
    )
    .await?;
    eventually(
        "binaries installed from loopback",
        Duration::from_secs(180),
        || async {
            let i = env.get(INFRA_V, "KKInstance", &inst).await?.unwrap_or_default();
            Ok((cond_state(&i, "BinariesReady").0 == "True").then_some(()))
        },
    )
    .await?;
    ensure!(
        hits.load(Ordering::SeqCst) >= 1,
        "the download went to the loopback listener"
    );
    let logs = vec![mgr.logs()];
    mgr.terminate();
    env.assert_no_canary(&[&hosts.key_canary()], &logs).await?;
    env.finish().await;
    Ok(())
}
