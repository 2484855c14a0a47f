//! `--max-concurrent-hosts=1`: two hosts are worked on one after the other. The bootstrap data records, on
//! each host, when its slow command ran; the two windows must not overlap.

mod common;

use std::time::Duration;

use anyhow::ensure;
use capkk_sandbox::{Sandbox, SandboxConfig, skip_unless_supported};
use common::{sandbox::*, *};
use serde_json::json;

const DATA: &str = "#cloud-config\nruncmd:\n- date +%s.%N > /root/capkk-window\n- sleep 4\n- date +%s.%N >> /root/capkk-window\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hosts_are_worked_on_one_at_a_time() -> anyhow::Result<()> {
    if skip_unless_supported() {
        return Ok(());
    }
    let sb = Sandbox::shared(&SandboxConfig::new("ctl-conc", 2))?;
    for h in sb.hosts() {
        h.link_up()?;
        install_fakes(&h)?;
        h.sh_inside("rm -f /root/capkk-window")?;
    }
    let client = client().await?;
    let ns = namespace(&client, "conc").await?;
    let dir = test_dir("conc")?;
    let mirror = Mirror::start(&sb)?;
    let component = publish_standins(&mirror, &dir, "amd64")?;
    let key = std::fs::read_to_string(&sb.credentials().ed25519_key)?;
    secret(&client, &ns, "ssh-auth", &[("privateKey", &key)]).await?;
    secret(
        &client,
        &ns,
        "data",
        &[("value", DATA), ("format", "cloud-config")],
    )
    .await?;
    let hosts: Vec<(String, String, u16)> = sb
        .hosts()
        .iter()
        .map(|h| (h.info.name.clone(), h.address().to_owned(), 22))
        .collect();
    apply(&client, &ns, cluster(&ns, "c", json!({}))).await?;
    apply(
        &client,
        &ns,
        kkcluster(&ns, "c", &hosts, json!({"component": component})),
    )
    .await?;
    for m in ["m1", "m2"] {
        let (km, mm) = machine_pair(&ns, "c", m, "worker", Some("data"));
        apply(&client, &ns, km).await?;
        apply(&client, &ns, mm).await?;
    }
    let kc = manager_kubeconfig(&client, &ns, &dir).await?;
    let cache = dir.join("cache");
    let mut mgr = Manager::start(
        &kc,
        &dir,
        "manager",
        &[
            "--namespace",
            &ns,
            "--max-concurrent-hosts=1",
            "--ssh-connect-timeout=5s",
            "--artifact-cache-dir",
            cache.to_str().unwrap_or("/tmp"),
        ],
    )?;
    eventually("both provisioned", Duration::from_secs(120), || async {
        let kms = list(&client, &ns, INFRA_V, "KKMachine").await?;
        Ok((kms
            .iter()
            .filter(|k| k["status"]["initialization"]["provisioned"] == true)
            .count()
            == 2)
            .then_some(()))
    })
    .await?;
    let mut windows = Vec::new();
    for h in sb.hosts() {
        let text = inside(&h, "cat /root/capkk-window");
        let v: Vec<f64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        ensure!(v.len() == 2, "window on {}: {text:?}", h.info.name);
        windows.push((v[0], v[1]));
    }
    windows.sort_by(|a, b| a.0.total_cmp(&b.0));
    ensure!(windows[0].1 <= windows[1].0, "host work overlapped: {windows:?}");
    mgr.terminate();
    cleanup_namespace(&client, &ns).await;
    Ok(())
}
