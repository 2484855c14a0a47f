//! The namespaced RBAC variant (`config/namespaced`, rendered with the pinned kubectl's kustomize): its
//! manager ClusterRole is granted by a RoleBinding in the watched namespace only, and no ClusterRoleBinding
//! gives it anything. A manager running with `--namespace X` and exactly those permissions does its work in X
//! (reads the SSH Secret there, writes status, keeps its lease) and cannot read a Secret of another
//! namespace, nor list Secrets across the cluster.

mod common;

use std::{path::PathBuf, process::Command};

use anyhow::{Context, ensure};
use common::*;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, config::Kubeconfig};
use serde_json::{Value, json};

/// `kubectl kustomize config/namespaced` with `CAPKK_WATCH_NAMESPACE` set to `ns` (as clusterctl would).
fn render_namespaced(ns: &str) -> anyhow::Result<Vec<Value>> {
    let bin = Command::new("bash")
        .arg(capkk_mgmt::script_path())
        .arg("bin-dir")
        .output()
        .context("running mgmt.sh bin-dir")?;
    ensure!(bin.status.success(), "mgmt.sh bin-dir failed");
    let kubectl = PathBuf::from(String::from_utf8(bin.stdout)?.trim()).join("kubectl");
    ensure!(
        kubectl.is_file(),
        "{} is missing: build the pinned binaries with `make mgmt-up`",
        kubectl.display()
    );
    let dir = capkk_mgmt::repo_root().join("config/namespaced");
    let out = Command::new(&kubectl).arg("kustomize").arg(&dir).output()?;
    ensure!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?.replace("${CAPKK_WATCH_NAMESPACE}", ns);
    Ok(capkk_mgmt::parse_yaml_docs(&text, "config/namespaced")?)
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

/// The manager ClusterRole and its bindings in the rendered variant, after checking that nothing binds the
/// role cluster-wide and the Deployment watches exactly `ns`.
fn namespaced_grant(ns: &str) -> anyhow::Result<Grant> {
    let docs = render_namespaced(ns)?;
    let deployment = docs
        .iter()
        .find(|d| kind(d) == "Deployment")
        .context("the variant has a Deployment")?;
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    ensure!(
        args.as_array()
            .is_some_and(|a| a.iter().any(|x| x == &json!(format!("--namespace={ns}")))),
        "the Deployment runs the manager with --namespace={ns}: {args}"
    );
    // The manager's ClusterRole is the one a RoleBinding in the watched namespace grants.
    let role_name = docs
        .iter()
        .find(|d| kind(d) == "RoleBinding" && d["metadata"]["namespace"] == json!(ns))
        .and_then(|b| b["roleRef"]["name"].as_str())
        .context("the variant binds a role in the watched namespace")?
        .to_owned();
    let role = docs
        .iter()
        .find(|d| kind(d) == "ClusterRole" && name(d) == role_name)
        .with_context(|| format!("the variant has the ClusterRole {role_name}"))?
        .clone();
    let refers = |d: &Value| d["roleRef"]["name"] == json!(role_name);
    let cluster_wide: Vec<String> = docs
        .iter()
        .filter(|d| kind(d) == "ClusterRoleBinding" && refers(d))
        .map(name)
        .collect();
    ensure!(
        cluster_wide.is_empty(),
        "no ClusterRoleBinding of {role_name} in the namespaced variant: {cluster_wide:?}"
    );
    let bindings: Vec<Value> = docs
        .iter()
        .filter(|d| kind(d) == "RoleBinding" && refers(d))
        .cloned()
        .collect();
    ensure!(
        bindings.len() == 1 && bindings[0]["metadata"]["namespace"] == json!(ns),
        "exactly one RoleBinding of {role_name}, in {ns}: {bindings:?}"
    );
    Ok(Grant::Namespaced { role, bindings })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manager_with_the_namespaced_role_works_in_its_namespace_and_cannot_read_other_secrets()
-> anyhow::Result<()> {
    let env = TestEnv::granted("nsrbac", namespaced_grant).await?;
    let ns = env.ns.clone();
    // Another tenant's namespace with a Secret the manager must not be able to read.
    let admin = env.client.clone();
    let other = namespace(&admin, "nsrbac-other").await?;
    secret(
        &admin,
        &other,
        "ssh-auth",
        &[("password", "canary-pw-other-tenant-7e")],
    )
    .await?;

    env.secret("ssh-auth", &[("password", "canary-pw-nsrbac-2c")])
        .await?;
    env.apply(cluster(&ns, "a", json!({}))).await?;
    env.apply(kkcluster(
        &ns,
        "a",
        &[("a-1".to_owned(), "127.0.3.1".to_owned(), 1)],
        json!({}),
    ))
    .await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=2s"])?;
    let result = async {
        // It works in its namespace: the KKCluster is provisioned and its host probed with the Secret read
        // there (the probe fails on the network, not on credentials).
        env.kkcluster_provisioned("a").await?;
        let k = env.kkcluster_probed("a", 1).await?;
        let probe = k["status"]["hosts"][0].to_string();
        ensure!(
            !probe.to_lowercase().contains("credential") && !probe.to_lowercase().contains("forbidden"),
            "the host probe got its credentials: {probe}"
        );

        // Its own token: Secrets of its namespace yes, of another namespace or across the cluster no.
        let kc = Kubeconfig::read_from(env.manager_kubeconfig())?;
        let client = Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)?;
        Api::<Secret>::namespaced(client.clone(), &ns)
            .get("ssh-auth")
            .await
            .context("the manager reads a Secret of its namespace")?;
        let forbidden = |r: Result<_, kube::Error>, what: &str| -> anyhow::Result<()> {
            match r {
                Err(kube::Error::Api(e)) if e.code == 403 => Ok(()),
                Err(e) => anyhow::bail!("{what}: expected 403 Forbidden, got {e}"),
                Ok(_) => anyhow::bail!("{what}: the manager could do it"),
            }
        };
        forbidden(
            Api::<Secret>::namespaced(client.clone(), &other)
                .get("ssh-auth")
                .await
                .map(|_| ()),
            "get a Secret of another namespace",
        )?;
        forbidden(
            Api::<Secret>::all(client.clone())
                .list(&Default::default())
                .await
                .map(|_| ()),
            "list Secrets across the cluster",
        )?;
        let logs = mgr.logs();
        ensure!(
            !logs.contains("forbidden") && !logs.contains("Forbidden"),
            "the manager never hit a permission error in its namespace: {}",
            logs.lines()
                .filter(|l| l.contains("orbidden"))
                .take(3)
                .collect::<Vec<_>>()
                .join("\n")
        );
        Ok(())
    }
    .await;
    mgr.terminate();
    cleanup_namespace(&admin, &other).await;
    result?;
    env.finish().await;
    Ok(())
}
