//! The shipped RBAC's reach over Leases and the host pool, on the real API server's authorizer:
//! - the manager's leader-election Role (config/rbac/leader_election_role.yaml) writes its own Lease only: a
//!   manager bound to it (and to the host-claim Role of the same namespace, as installed) elects itself from
//!   scratch (create, get, update) and cannot update or patch another Lease there, a host claim included;
//! - the ClusterRole aggregated into CAPI core's manager role (config/rbac/aggregate_to_capi.yaml) reads
//!   KKInstances and never creates, updates, patches or deletes one, while CAPI keeps what it needs on the
//!   kinds it does write.

mod common;

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use common::*;
use k8s_openapi::api::{authorization::v1::SubjectAccessReview, coordination::v1::Lease};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

/// The manager's default leader Lease.
const LEASE: &str = "capkk-manager-leader";

/// Whether `result` is the API server's 403.
fn forbidden<T: std::fmt::Debug>(result: &Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(e)) if e.code == 403)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_manager_elects_itself_from_scratch_but_cannot_write_another_lease_of_its_namespace()
-> anyhow::Result<()> {
    // kustomize renames objects, not resourceNames: the installed Role names the Lease the manager uses.
    let raw =
        capkk_mgmt::read_yaml_docs(&capkk_mgmt::repo_root().join("config/rbac/leader_election_role.yaml"))?
            .remove(0);
    let rendered = render_config("default").await?;
    let installed = rendered
        .iter()
        .find(|d| d["kind"] == "Role" && name(d).ends_with("leader-election-role"))
        .context("config/default renders the leader-election Role")?;
    ensure!(
        installed["rules"] == raw["rules"],
        "the rendered Role's rules are the file's: {} vs {}",
        installed["rules"],
        raw["rules"]
    );

    // The test's ServiceAccount has the leader-election Role in the test namespace (TestEnv applies the
    // file); the host-claim Role joins it there, as both live in the manager's namespace when installed.
    let env = TestEnv::new("rbacscope").await?;
    let ns = env.ns.clone();
    let (sa_ns, sa) = env.service_account();
    let mut hc =
        capkk_mgmt::read_yaml_docs(&capkk_mgmt::repo_root().join("config/rbac/host_claim_role.yaml"))?
            .remove(0);
    hc["metadata"] = json!({"name": "capkk-test-host-claims", "namespace": ns});
    env.apply(hc).await?;
    env.apply(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "capkk-test-host-claims", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "capkk-test-host-claims"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]
    }))
    .await?;

    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &ns);
    ensure!(
        leases.get_opt(LEASE).await?.is_none(),
        "no Lease before the manager"
    );
    let mut mgr = env.manager(
        "leader",
        &[
            "--leader-elect",
            "--leader-election-namespace",
            &ns,
            "--lease-duration=8s",
            "--renew-deadline=6s",
            "--retry-period=1s",
        ],
    )?;
    let renewed_at = |l: &Lease| {
        let spec = l.spec.clone().unwrap_or_default();
        spec.holder_identity
            .filter(|h| !h.is_empty())
            .and(spec.renew_time)
            .map(|t| t.0.to_string())
    };
    let first = eventually(
        "the manager creates its Lease and holds it",
        Duration::from_secs(60),
        || async { Ok(leases.get_opt(LEASE).await?.as_ref().and_then(renewed_at)) },
    )
    .await?;
    eventually(
        "the manager renews its Lease (get and update)",
        Duration::from_secs(30),
        || async {
            Ok(leases
                .get_opt(LEASE)
                .await?
                .as_ref()
                .and_then(renewed_at)
                .filter(|t| *t != first))
        },
    )
    .await?;
    ensure!(
        mgr.running() && mgr.logs().contains("became leader"),
        "the manager leads:\n{}",
        mgr.logs()
    );

    // Another Lease of the namespace, e.g. a host claim or another component's leader Lease: the manager's
    // token may read it (the host-claim Role's get) but neither update nor patch it.
    let other = "capkk-host-key-0123456789abcdef";
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": other, "namespace": ns},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600}
    }))?;
    leases.create(&PostParams::default(), &lease).await?;
    let as_manager: Api<Lease> = Api::namespaced(env.manager_client().await?, &ns);
    let mut stolen = leases.get(other).await?;
    if let Some(spec) = stolen.spec.as_mut() {
        spec.holder_identity = Some("capkk-manager".into());
    }
    let update = as_manager.replace(other, &PostParams::default(), &stolen).await;
    ensure!(
        forbidden(&update),
        "the manager's token updated another Lease: {update:?}"
    );
    let patch = as_manager
        .patch(
            other,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "capkk-manager"}})),
        )
        .await;
    ensure!(
        forbidden(&patch),
        "the manager's token patched another Lease: {patch:?}"
    );
    let kept = leases.get(other).await?;
    ensure!(
        kept.spec.and_then(|s| s.holder_identity).as_deref() == Some("someone-else"),
        "the other Lease is unchanged"
    );
    // Its own Lease it still writes with the same token.
    let mut own = as_manager.get(LEASE).await?;
    own.metadata.annotations = Some([("capkk.test/touched".to_owned(), "yes".to_owned())].into());
    as_manager
        .replace(LEASE, &PostParams::default(), &own)
        .await
        .context("the manager's token updates its own Lease")?;

    mgr.terminate();
    env.finish().await;
    Ok(())
}

/// Whether `user` may `verb` `resource` of our group in namespace `ns`, as the API server's authorizer says.
async fn allowed(client: &Client, user: &str, verb: &str, resource: &str, ns: &str) -> anyhow::Result<bool> {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "groups": ["system:authenticated"],
            "resourceAttributes": {
                "group": "infrastructure.cluster.x-k8s.io", "resource": resource, "verb": verb, "namespace": ns
            }
        }
    }))?;
    let out = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(out.status.is_some_and(|s| s.allowed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn capis_aggregated_role_reads_kkinstances_and_never_writes_them() -> anyhow::Result<()> {
    let docs = render_config("default").await?;
    let aggregated: Vec<&Value> = docs
        .iter()
        .filter(|d| {
            d["kind"] == "ClusterRole"
                && d["metadata"]["labels"]["cluster.x-k8s.io/aggregate-to-manager"] == "true"
        })
        .collect();
    ensure!(
        aggregated.len() == 1,
        "config/default aggregates one ClusterRole into CAPI's manager role: {}",
        aggregated.len()
    );
    // Applied under a test name and without the aggregation label (the plane's CAPI must not get it), bound
    // to a user standing for CAPI core's ServiceAccount.
    let client = client().await?;
    let role_name = "capkk-test-capi-aggregated";
    let user = "capkk-test-capi-core";
    let mut role = aggregated[0].clone();
    role["metadata"] = json!({"name": role_name});
    apply(&client, "", role).await?;
    apply(
        &client,
        "",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": role_name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
        }),
    )
    .await?;
    let result = async {
        let ns = "tenant-a";
        // The binding reaches the authorizer shortly after it is created.
        eventually("the binding is in force", Duration::from_secs(30), || async {
            Ok(allowed(&client, user, "get", "kkmachines", ns)
                .await?
                .then_some(()))
        })
        .await?;
        let mut wrong = Vec::new();
        for (resource, verbs, want) in [
            ("kkinstances", &["get", "list", "watch"][..], true),
            (
                "kkinstances",
                &["create", "update", "patch", "delete", "deletecollection"][..],
                false,
            ),
            // What CAPI does write: owner references and deletion of infrastructure machines and clusters,
            // clones of templates, the MachineHealthCheck's KKRemediations.
            (
                "kkmachines",
                &["get", "list", "watch", "create", "patch", "update", "delete"][..],
                true,
            ),
            ("kkclusters", &["get", "patch", "update", "delete"][..], true),
            ("kkmachinetemplates", &["get", "create"][..], true),
            ("kkremediations", &["create", "delete"][..], true),
        ] {
            for verb in verbs {
                if allowed(&client, user, verb, resource, ns).await? != want {
                    wrong.push(format!("{verb} {resource}: allowed={}", !want));
                }
            }
        }
        if !wrong.is_empty() {
            bail!("CAPI's aggregated role, as the API server authorizes it: {wrong:?}");
        }
        Ok(())
    }
    .await;
    let _ = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone())
        .delete(role_name, &DeleteParams::default())
        .await;
    result
}
