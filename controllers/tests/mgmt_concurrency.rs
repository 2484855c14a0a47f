//! `--max-concurrent-hosts=1`: two hosts are worked on one after the other. The bootstrap data records, on
//! each host, when its slow command ran; the two windows must not overlap.

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::{sandbox::*, *};
use serde_json::json;

const DATA: &str = "#cloud-config\nruncmd:\n- date +%s.%N > /root/capkk-window\n- sleep 4\n- date +%s.%N >> /root/capkk-window\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hosts_are_worked_on_one_at_a_time() -> anyhow::Result<()> {
    let Some((env, hosts)) = TestEnv::with_hosts("conc", "ctl-conc", 2).await? else {
        return Ok(());
    };
    for h in hosts.sb.hosts() {
        h.sh_inside("rm -f /root/capkk-window")?;
    }
    env.bootstrap_data("data", DATA).await?;
    env.cluster("c", &hosts.inventory(), json!({"component": hosts.component}))
        .await?;
    for m in ["m1", "m2"] {
        env.machine("c", m, "worker", Some("data")).await?;
    }
    let mut mgr = env.manager(
        "manager",
        &["--max-concurrent-hosts=1", "--ssh-connect-timeout=5s"],
    )?;
    eventually("both provisioned", Duration::from_secs(120), || async {
        let kms = env.list(INFRA_V, "KKMachine").await?;
        Ok((kms
            .iter()
            .filter(|k| k["status"]["initialization"]["provisioned"] == true)
            .count()
            == 2)
            .then_some(()))
    })
    .await?;
    let mut windows = Vec::new();
    for h in hosts.sb.hosts() {
        let text = inside(&h, "cat /root/capkk-window");
        let v: Vec<f64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        ensure!(v.len() == 2, "window on {}: {text:?}", h.info.name);
        windows.push((v[0], v[1]));
    }
    windows.sort_by(|a, b| a.0.total_cmp(&b.0));
    ensure!(windows[0].1 <= windows[1].0, "host work overlapped: {windows:?}");
    mgr.terminate();
    env.finish().await;
    Ok(())
}
