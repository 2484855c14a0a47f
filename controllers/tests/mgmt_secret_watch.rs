//! Secret → KKInstance wake-up, on the real plane with a sandbox host and the manager bound to config/rbac only
//! (`get` on Secrets, no `list`/`watch`): a KKInstance whose host work found a referenced Secret missing fails
//! with `CredentialsUnavailable`; creating that Secret retries it through the manager's by-name Secret check
//! (no retry annotation by anyone else, no timer: without the check it stays failed) and the host is
//! provisioned.

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::{sandbox::cloud_config, *};
use serde_json::json;

const RETRY: &str = "kkinstance.infrastructure.cluster.x-k8s.io/retry";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creating_a_missing_credentials_secret_retries_the_kkinstance_that_needed_it() -> anyhow::Result<()> {
    let Some((env, hosts)) = TestEnv::with_hosts("secwatch", "ctl-secw", 1).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    env.bootstrap_data("bd", &cloud_config(&[])).await?;
    // Registry credentials from a Secret that does not exist yet (read only by host work, not by probes).
    env.apply(cluster(&ns, "s", json!({}))).await?;
    env.apply(kkcluster(
        &ns,
        "s",
        &hosts.inventory(),
        json!({"component": hosts.component, "registry": {"auth": {"secretRef": {"name": "late-registry"}}}}),
    ))
    .await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=5s"])?;
    env.kkcluster_provisioned("s").await?;
    let (km, m) = machine_pair(&ns, "s", "m1", "worker", Some("bd"));
    env.apply(km).await?;
    env.apply(m).await?;
    let inst_name = env.claimed_instance("m1").await?;
    let failed = eventually(
        "CredentialsUnavailable (registry Secret missing)",
        Duration::from_secs(180),
        || async {
            let i = env
                .get(INFRA_V, "KKInstance", &inst_name)
                .await?
                .unwrap_or_default();
            Ok((cond_state(&i, "Ready").1 == "CredentialsUnavailable").then_some(i))
        },
    )
    .await?;
    ensure!(
        failed["status"]["state"] == "failed",
        "terminal: {}",
        failed["status"]
    );

    env.secret(
        "late-registry",
        &[("username", "u"), ("password", "registry-pw-secw")],
    )
    .await?;
    eventually(
        "m1 provisioned after the Secret appeared",
        Duration::from_secs(180),
        || async {
            let k = env.get(INFRA_V, "KKMachine", "m1").await?.unwrap_or_default();
            Ok((k["status"]["initialization"]["provisioned"] == true).then_some(()))
        },
    )
    .await?;
    let i = env
        .get(INFRA_V, "KKInstance", &inst_name)
        .await?
        .unwrap_or_default();
    ensure!(
        i["metadata"]["annotations"].get(RETRY).is_none(),
        "the retry the watch set was consumed: {}",
        i["metadata"]["annotations"]
    );
    ensure!(
        mgr.logs().contains("Secret changed: retrying"),
        "the manager says why it retried"
    );
    env.assert_no_canary(&["registry-pw-secw"], &[mgr.logs()]).await?;
    mgr.terminate();
    env.finish().await;
    Ok(())
}
