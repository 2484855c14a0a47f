//! KKMachineTemplate / KKClusterTemplate immutability as the provider components install it, on the real
//! kube-apiserver and CAPI topology controller of the local plane.
//!
//! The rule is a ValidatingAdmissionPolicy (config/admission, part of config/default = what clusterctl
//! deploys), not a CRD CEL rule: CRD rules see neither the request nor `metadata.annotations`, so they also
//! refused CAPI's topology dry-run and a ClusterClass-based Cluster could never rotate to a new template.
//! Shown here: an ordinary spec edit is refused with a message naming the kind and what to do instead; only a
//! dry-run request carrying `topology.cluster.x-k8s.io/dry-run` (what CAPI's topology controller sends, see
//! CAPI's `topology.ShouldSkipImmutabilityChecks`) passes, and it stores nothing; and a Cluster of the shipped
//! ClusterClass `kubekey` rotates its control-plane KKMachineTemplate when the class points at a new one.

mod common;

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const GROUP_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const DRY_RUN_ANNOTATION: &str = "topology.cluster.x-k8s.io/dry-run";
/// How long the apiserver may take to start enforcing a newly created policy and binding.
const POLICY_PROPAGATION: Duration = Duration::from_secs(60);

/// `config/default` rendered by the plane's kubectl (kustomize built in), as `make release-manifests` does.
async fn provider_components() -> anyhow::Result<Vec<Value>> {
    let kubectl = capkk_mgmt::bin_dir().await?.join("kubectl");
    ensure!(
        kubectl.is_file(),
        "{} is missing: build it with `make mgmt-bin`",
        kubectl.display()
    );
    let out = tokio::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(capkk_mgmt::repo_root().join("config/default"))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("run kubectl kustomize")?;
    ensure!(
        out.status.success(),
        "kubectl kustomize config/default: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(capkk_mgmt::parse_yaml_docs(
        &String::from_utf8_lossy(&out.stdout),
        "kubectl kustomize config/default",
    )?)
}

fn admission_docs(components: &[Value]) -> Vec<Value> {
    components
        .iter()
        .filter(|d| {
            d["apiVersion"] == "admissionregistration.k8s.io/v1"
                && d["kind"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
        })
        .cloned()
        .collect()
}

/// Installs the CRDs and the admission objects of the rendered components, and waits until a spec edit of a
/// KKMachineTemplate in `ns` is refused (the apiserver loads policies asynchronously). The probe edits are
/// dry-runs, so nothing changes while the policy is not yet enforced.
async fn install(client: &Client, ns: &str) -> anyhow::Result<()> {
    common::install_capkk_crds(client).await?;
    let docs = admission_docs(&provider_components().await?);
    ensure!(
        docs.len() == 2,
        "config/default renders {} admission objects, expected the policy and its binding",
        docs.len()
    );
    for doc in &docs {
        capkk_mgmt::apply(client, "", doc).await?;
    }
    let api = templates(client, ns, "KKMachineTemplate");
    let probe = "policy-probe";
    api.create(
        &PostParams::default(),
        &serde_json::from_value(machine_template(probe, &["worker"]))?,
    )
    .await
    .context("create the probe KKMachineTemplate")?;
    common::eventually(
        "the template policy to refuse a KKMachineTemplate spec edit",
        POLICY_PROPAGATION,
        || async {
            let mut obj = serde_json::to_value(api.get(probe).await?)?;
            obj["spec"]["template"]["spec"]["roles"] = json!(["control-plane"]);
            match update(&api, obj, true).await? {
                Ok(_) => Ok(None),
                Err(_) => Ok(Some(())),
            }
        },
    )
    .await
}

fn templates(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let ar = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        kind,
    ));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn machine_template(name: &str, roles: &[&str]) -> Value {
    json!({
        "apiVersion": GROUP_VERSION, "kind": "KKMachineTemplate", "metadata": {"name": name},
        "spec": {"template": {"spec": {"roles": roles}}}
    })
}

fn cluster_template(name: &str) -> Value {
    json!({
        "apiVersion": GROUP_VERSION, "kind": "KKClusterTemplate", "metadata": {"name": name},
        "spec": {"template": {"spec": {"nodes": {
            "auth": {"user": "root", "privateKeyPath": "/root/.ssh/id_ed25519"},
            "instances": [{"name": "cp-1", "address": "198.18.0.11"}]
        }}}}
    })
}

/// Edits a template's `spec.template.spec` in place.
type Edit = fn(&mut Value);

/// PUT `obj` (dry-run or not): the stored/returned object, or the API's refusal message.
async fn update(
    api: &Api<DynamicObject>,
    obj: Value,
    dry_run: bool,
) -> anyhow::Result<Result<Value, String>> {
    let obj: DynamicObject = serde_json::from_value(obj)?;
    let name = obj.metadata.name.clone().context("metadata.name")?;
    let pp = PostParams {
        dry_run,
        ..PostParams::default()
    };
    match api.replace(&name, &pp, &obj).await {
        Ok(o) => Ok(Ok(serde_json::to_value(o)?)),
        Err(kube::Error::Api(status)) => Ok(Err(status.message)),
        Err(e) => Err(e.into()),
    }
}

#[tokio::test]
async fn the_provider_components_carry_the_template_policy_and_its_binding() -> anyhow::Result<()> {
    let docs = admission_docs(&provider_components().await?);
    let policy = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .context("config/default renders no ValidatingAdmissionPolicy")?;
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
        .context("config/default renders no ValidatingAdmissionPolicyBinding")?;
    assert_eq!(
        binding["spec"]["policyName"], policy["metadata"]["name"],
        "the binding names the (prefixed) policy"
    );
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    for d in [policy, binding] {
        assert_eq!(
            d["metadata"]["labels"]["cluster.x-k8s.io/provider"], "infrastructure-kubekey",
            "clusterctl needs the provider label on {}",
            d["kind"]
        );
        assert!(
            d["metadata"].get("namespace").is_none(),
            "{} is cluster-scoped: {}",
            d["kind"],
            d["metadata"]
        );
    }
    let rules = &policy["spec"]["matchConstraints"]["resourceRules"];
    assert_eq!(rules[0]["operations"], json!(["UPDATE"]), "{rules}");
    assert_eq!(
        rules[0]["resources"],
        json!(["kkmachinetemplates", "kkclustertemplates"]),
        "{rules}"
    );
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    Ok(())
}

#[tokio::test]
async fn a_template_spec_edit_is_refused_unless_it_is_capis_topology_dry_run() -> anyhow::Result<()> {
    let client = common::client().await?;
    let ns = common::namespace(&client, "tmpl-policy").await?;
    install(&client, &ns).await?;
    let cases: [(&str, Value, Edit); 2] = [
        ("KKMachineTemplate", machine_template("mt", &["worker"]), |s| {
            s["roles"] = json!(["control-plane"])
        }),
        ("KKClusterTemplate", cluster_template("ct"), |s| {
            s["nodes"]["instances"][0]["address"] = json!("198.18.0.12")
        }),
    ];
    for (kind, obj, edit) in cases {
        let api = templates(&client, &ns, kind);
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let stored = serde_json::to_value(
            api.create(&PostParams::default(), &serde_json::from_value(obj)?)
                .await
                .with_context(|| format!("create {kind}"))?,
        )?;
        let original_spec = stored["spec"].clone();
        let edited = |annotated: bool| {
            let mut o = stored.clone();
            edit(&mut o["spec"]["template"]["spec"]);
            if annotated {
                o["metadata"]["annotations"] = json!({DRY_RUN_ANNOTATION: ""});
            }
            o
        };

        let msg = match update(&api, edited(false), false).await? {
            Ok(o) => bail!("{kind}: an ordinary spec edit was accepted: {}", o["spec"]),
            Err(m) => m,
        };
        let want = format!(
            "{kind} {name}: spec.template is immutable: create a new {kind} and reference it instead"
        );
        assert!(msg.contains(&want), "{kind}: refusal {msg:?} lacks {want:?}");
        for (what, annotated, dry_run) in [
            ("annotated, not a dry-run", true, false),
            ("a dry-run without the annotation", false, true),
        ] {
            if let Ok(o) = update(&api, edited(annotated), dry_run).await? {
                bail!("{kind}: a spec edit {what} was accepted: {}", o["spec"]);
            }
        }
        let dry = match update(&api, edited(true), true).await? {
            Ok(o) => o,
            Err(m) => bail!("{kind}: CAPI's topology dry-run was refused: {m}"),
        };
        assert_ne!(
            dry["spec"], original_spec,
            "{kind}: the dry-run answers with the edited spec"
        );
        let now = serde_json::to_value(api.get(&name).await?)?;
        assert_eq!(now["spec"], original_spec, "{kind}: the dry-run stored nothing");

        // Metadata stays editable (labels, annotations, owner references are not the template).
        let mut labelled = now.clone();
        labelled["metadata"]["labels"] = json!({"team": "a"});
        if let Err(m) = update(&api, labelled, false).await? {
            bail!("{kind}: a label edit was refused: {m}");
        }
    }
    Ok(())
}

/// `templates/clusterclass-kubekey.yaml` (the class clusterctl adds for `--flavor topology`) in `ns`.
fn shipped_clusterclass(ns: &str) -> anyhow::Result<Vec<Value>> {
    let path = capkk_mgmt::repo_root().join("templates/clusterclass-kubekey.yaml");
    let text = std::fs::read_to_string(&path)?.replace("${NAMESPACE}", ns);
    Ok(capkk_mgmt::parse_yaml_docs(&text, &path.display().to_string())?)
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[tokio::test]
async fn a_clusterclass_cluster_rotates_to_a_new_control_plane_kkmachinetemplate() -> anyhow::Result<()> {
    let client = common::client().await?;
    let ns = common::namespace(&client, "tmpl-rotate").await?;
    install(&client, &ns).await?;
    for doc in shipped_clusterclass(&ns)? {
        common::create(&client, &ns, doc).await?;
    }
    let (classes, _) =
        capkk_mgmt::dynamic_api(&client, "cluster.x-k8s.io/v1beta2", "ClusterClass", &ns).await?;
    common::eventually(
        "CAPI to reconcile the ClusterClass kubekey (VariablesReady)",
        Duration::from_secs(60),
        || async {
            let cc = serde_json::to_value(classes.get("kubekey").await?)?;
            Ok(condition(&cc, "VariablesReady")
                .filter(|c| c["status"] == "True")
                .map(|_| ()))
        },
    )
    .await?;
    // No manager runs: the KKCluster never becomes ready, so KCP creates no Machine; the topology
    // controller still owns KCP's spec, which is what rotation changes.
    let cluster = "rot";
    common::create(
        &client,
        &ns,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": cluster, "namespace": ns},
            "spec": {"topology": {
                "classRef": {"name": "kubekey"},
                "version": "v1.34.1",
                "controlPlane": {"replicas": 1},
                "variables": [{"name": "instances", "value": [{"name": "cp-1", "address": "198.18.0.11"}]}]
            }}
        }),
    )
    .await?;
    let (kcps, _) = capkk_mgmt::dynamic_api(
        &client,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
        &ns,
    )
    .await?;
    let (clusters, _) = capkk_mgmt::dynamic_api(&client, "cluster.x-k8s.io/v1beta2", "Cluster", &ns).await?;
    let infra_ref = |kcp: &DynamicObject| {
        kcp.data["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"]
            .as_str()
            .map(str::to_owned)
    };
    // The topology controller names the KubeadmControlPlane `<cluster>-<random>`: found via the Cluster.
    let (kcp, first) = common::eventually(
        "the topology controller to create the KubeadmControlPlane",
        Duration::from_secs(90),
        || async {
            let c = clusters.get(cluster).await?;
            let Some(kcp) = c.data["spec"]["controlPlaneRef"]["name"].as_str() else {
                return Ok(None);
            };
            let first = kcps.get_opt(kcp).await?.as_ref().and_then(infra_ref);
            Ok(first.map(|f| (kcp.to_owned(), f)))
        },
    )
    .await?;
    let api = templates(&client, &ns, "KKMachineTemplate");
    let first_spec = api.get(&first).await?.data["spec"]["template"].clone();
    assert_eq!(
        first_spec["spec"]["roles"],
        json!(["control-plane"]),
        "{first_spec}"
    );

    // The rotation a user does: a new class template (templates are immutable), the class pointed at it.
    let mut v2 = machine_template("kubekey-control-plane-v2", &["control-plane"]);
    v2["spec"]["template"]["metadata"] = json!({"labels": {"capkk.test/rotation": "v2"}});
    common::create(&client, &ns, v2).await?;
    classes
        .patch(
            "kubekey",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"controlPlane": {"machineInfrastructure": {
                "templateRef": {"name": "kubekey-control-plane-v2"}
            }}}})),
        )
        .await
        .context("point the ClusterClass at the new KKMachineTemplate")?;

    let rotated = common::eventually(
        "KCP to reference a new KKMachineTemplate",
        Duration::from_secs(120),
        || async { Ok(infra_ref(&kcps.get(&kcp).await?).filter(|n| *n != first)) },
    )
    .await;
    let rotated = match rotated {
        Ok(n) => n,
        Err(e) => {
            // The topology controller's own account of why (e.g. a refused dry-run) is the useful part.
            let c = serde_json::to_value(clusters.get(cluster).await?)?;
            bail!(
                "{e:#}; Cluster TopologyReconciled: {}",
                condition(&c, "TopologyReconciled").unwrap_or(&Value::Null)
            );
        }
    };
    let new_spec = api.get(&rotated).await?.data["spec"]["template"].clone();
    assert_eq!(
        new_spec["metadata"]["labels"]["capkk.test/rotation"], "v2",
        "the new cluster template {rotated} is a copy of the new class template: {new_spec}"
    );
    common::eventually(
        "the Cluster's TopologyReconciled condition to be True",
        Duration::from_secs(60),
        || async {
            let c = serde_json::to_value(clusters.get(cluster).await?)?;
            Ok(condition(&c, "TopologyReconciled")
                .filter(|c| c["status"] == "True")
                .map(|_| ()))
        },
    )
    .await?;
    // Nothing to tear down by hand: no manager ran, so no finalizer of ours holds the objects.
    clusters
        .delete(cluster, &Default::default())
        .await
        .context("delete the Cluster")?;
    Ok(())
}
