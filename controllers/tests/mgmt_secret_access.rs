//! Least privilege on Secrets, on the real plane: the rendered default install grants the manager `get` on
//! Secrets and never `list` or `watch` (RBAC cannot narrow those to some Secrets, not even by label), the
//! apiserver refuses both to the manager's token, and the manager, bound to exactly config/rbac, still notices
//! a change of a Secret a KKInstance reads (a metadata GET by name) while never asking for a Secret no
//! KKInstance names.

mod common;

use std::{path::PathBuf, process::Command, time::Duration};

use anyhow::{Context, ensure};
use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, WatchParams},
    config::Kubeconfig,
};
use serde_json::{Value, json};

/// `kubectl kustomize config/default` with the pinned kubectl, as `make release-manifests` renders it.
fn render_default() -> anyhow::Result<Vec<Value>> {
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
    let dir = capkk_mgmt::repo_root().join("config/default");
    let out = Command::new(&kubectl).arg("kustomize").arg(&dir).output()?;
    ensure!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(capkk_mgmt::parse_yaml_docs(
        &String::from_utf8(out.stdout)?,
        "config/default",
    )?)
}

/// The verbs `role` grants on core Secrets (through `secrets`, `*` resources or `*` groups).
fn secret_verbs(role: &Value) -> Vec<String> {
    let has = |list: &Value, want: &str| {
        list.as_array()
            .is_some_and(|a| a.iter().any(|x| x == want || x == "*"))
    };
    role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| has(&r["apiGroups"], "") && has(&r["resources"], "secrets"))
        .flat_map(|r| r["verbs"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_rendered_default_install_grants_the_manager_no_list_or_watch_of_secrets() -> anyhow::Result<()> {
    let docs = render_default()?;
    let kind = |d: &Value| d["kind"].as_str().unwrap_or_default().to_owned();
    // Every ClusterRole bound to the manager's ServiceAccount, by ClusterRoleBinding or RoleBinding.
    let bound: Vec<String> = docs
        .iter()
        .filter(|d| matches!(kind(d).as_str(), "ClusterRoleBinding" | "RoleBinding"))
        .filter(|b| {
            b["subjects"].as_array().is_some_and(|s| {
                s.iter().any(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"]
                            .as_str()
                            .is_some_and(|n| n.ends_with("controller-manager"))
                })
            })
        })
        .filter_map(|b| b["roleRef"]["name"].as_str().map(str::to_owned))
        .collect();
    ensure!(!bound.is_empty(), "the install binds roles to its ServiceAccount");
    let mut saw_get = false;
    for d in docs
        .iter()
        .filter(|d| matches!(kind(d).as_str(), "ClusterRole" | "Role"))
    {
        let verbs = secret_verbs(d);
        let role = name(d);
        let aggregated_to_capi = d["metadata"]["labels"]
            .get("cluster.x-k8s.io/aggregate-to-manager")
            .is_some();
        if !bound.contains(&role) && !aggregated_to_capi {
            continue;
        }
        for v in ["list", "watch", "*"] {
            ensure!(
                !verbs.iter().any(|x| x == v),
                "{} {role} grants `{v}` on Secrets: {verbs:?}",
                kind(d)
            );
        }
        saw_get |= verbs.iter().any(|x| x == "get");
    }
    ensure!(saw_get, "the manager still reads Secrets by name (get)");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_manager_reads_only_the_secrets_its_kkinstances_name_and_notices_their_changes_without_listing()
-> anyhow::Result<()> {
    let env = TestEnv::new("secaccess").await?;
    let ns = env.ns.clone();
    // What `kubectl apply` leaves in a Secret's annotations: its whole data, visible to a metadata watch.
    let unread_canary = "canary-unread-secret-5d";
    env.secret("unrelated", &[("password", unread_canary)]).await?;
    Api::<Secret>::namespaced(env.client.clone(), &ns)
        .patch(
            "unrelated",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": format!("{{\"data\":{{\"password\":\"{unread_canary}\"}}}}")
            }}})),
        )
        .await?;
    env.secret("read-ssh", &[("password", "canary-read-secret-a1")])
        .await?;

    // The manager's own token: get yes, list and watch no (in its namespace and across the cluster).
    let kc = Kubeconfig::read_from(env.manager_kubeconfig())?;
    let token_client =
        Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)?;
    Api::<Secret>::namespaced(token_client.clone(), &ns)
        .get("read-ssh")
        .await
        .context("the manager reads a Secret by name")?;
    let forbidden = |r: Result<(), kube::Error>, what: &str| -> anyhow::Result<()> {
        match r {
            Err(kube::Error::Api(e)) if e.code == 403 => Ok(()),
            Err(e) => anyhow::bail!("{what}: expected 403 Forbidden, got {e}"),
            Ok(()) => anyhow::bail!("{what}: the manager could do it"),
        }
    };
    let in_ns: Api<Secret> = Api::namespaced(token_client.clone(), &ns);
    let all: Api<Secret> = Api::all(token_client.clone());
    forbidden(
        in_ns.list(&ListParams::default()).await.map(|_| ()),
        "list Secrets in its namespace",
    )?;
    forbidden(
        all.list(&ListParams::default()).await.map(|_| ()),
        "list Secrets across the cluster",
    )?;
    forbidden(
        in_ns.list_metadata(&ListParams::default()).await.map(|_| ()),
        "list Secret metadata",
    )?;
    let watched = async {
        let mut s = all.watch(&WatchParams::default(), "0").await?.boxed();
        s.try_next().await.map(|_| ())
    };
    forbidden(watched.await, "watch Secrets across the cluster")?;

    // A KKInstance naming `read-ssh` (no owner: the manager only waits for one, and reads what it names).
    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKInstance",
        "metadata": {"name": "lone", "namespace": ns},
        "spec": {"name": "lone", "address": "127.0.3.1",
                 "auth": {"user": "root", "port": 1, "secretRef": {"name": "read-ssh"}}}
    }))
    .await?;
    let mut mgr = env.manager("manager", &["--secret-poll-interval=1s", "--v=2"])?;
    let result = async {
        eventually(
            "the manager reads read-ssh's metadata",
            Duration::from_secs(60),
            || async {
                Ok(mgr
                    .logs()
                    .lines()
                    .any(|l| l.contains("Secret read") && l.contains("read-ssh"))
                    .then_some(()))
            },
        )
        .await?;
        Api::<Secret>::namespaced(env.client.clone(), &ns)
            .patch(
                "read-ssh",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"password": "canary-read-secret-a2"}})),
            )
            .await?;
        eventually(
            "the manager notices read-ssh changed",
            Duration::from_secs(60),
            || async {
                Ok(mgr
                    .logs()
                    .lines()
                    .any(|l| l.contains("Secret changed") && l.contains("read-ssh"))
                    .then_some(()))
            },
        )
        .await?;
        // A few more rounds: the unnamed Secret is never asked for, and nothing was refused.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let logs = mgr.logs();
        ensure!(
            !logs.contains("unrelated"),
            "the manager never asked for a Secret no KKInstance names"
        );
        ensure!(
            !logs.contains("orbidden"),
            "the manager never tried what its role does not grant: {}",
            logs.lines()
                .filter(|l| l.contains("orbidden"))
                .take(3)
                .collect::<Vec<_>>()
                .join("\n")
        );
        env.assert_no_canary(
            &[unread_canary, "canary-read-secret-a1", "canary-read-secret-a2"],
            &[logs],
        )
        .await
    }
    .await;
    mgr.terminate();
    result?;
    env.finish().await;
    Ok(())
}
