//! The CAPKK quick-start samples deserialize into our types and round-trip; generated CRDs are structural,
//! carry the contract label and CAPI-compatible names.

use capkk_api::{KKCluster, KKMachineTemplate, Role, crds};
use serde_json::Value;

fn sample(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../config/samples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn capkk_kkcluster_sample_deserializes_with_defaults_and_round_trips() {
    let kkc: KKCluster = serde_saphyr::from_str(&sample("capkk-kkcluster.yaml")).unwrap();
    assert_eq!(kkc.spec.nodes.instances.len(), 3);
    assert_eq!(kkc.spec.nodes.auth.user.as_deref(), Some("ubuntu"));
    assert_eq!(
        kkc.spec.nodes.auth.port_or_default(),
        22,
        "port defaults like the apiserver does"
    );
    assert_eq!(
        kkc.spec.nodes.auth.timeout, None,
        "no default: an unset timeout is the manager's --ssh-connect-timeout"
    );
    assert_eq!(
        kkc.spec.nodes.instances[0].host_name(),
        "test1",
        "a declared name is the host name"
    );
    let first = &kkc.spec.nodes.instances[0];
    assert_eq!(first.roles(), vec![Role::ControlPlane, Role::Worker]);
    assert_eq!(first.arch.as_deref(), Some("amd64"));
    assert_eq!(first.internal_address(), "192.168.0.3");
    assert_eq!(
        kkc.spec
            .control_plane_load_balancer
            .as_ref()
            .unwrap()
            .host
            .as_deref(),
        Some("192.168.0.100")
    );
    assert_eq!(kkc.spec.distribution.as_deref(), Some("kubernetes"));

    let json = serde_json::to_value(&kkc).unwrap();
    let back: KKCluster = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back.spec, kkc.spec);
    assert_eq!(json["spec"]["nodes"]["instances"][1]["address"], "192.168.0.4");
}

#[test]
fn capkk_kkmachinetemplate_sample_deserializes_with_containerd_and_no_version_so_the_kubernetes_version_decides()
 {
    let kkmt: KKMachineTemplate = serde_saphyr::from_str(&sample("capkk-kkmachinetemplate.yaml")).unwrap();
    let spec = &kkmt.spec.template.spec;
    assert_eq!(spec.roles, vec![Role::ControlPlane]);
    assert_eq!(spec.container_manager.type_.as_deref(), Some("containerd"));
    // No version of its own: the component defaults of the Machine's Kubernetes version apply (resolved when
    // the host is prepared), so none is filled in here.
    assert_eq!(spec.container_manager.version, None);
    assert_eq!(spec.container_manager.crictl_version, None);
    assert_eq!(
        spec.container_manager.cri_socket.as_deref(),
        Some("unix:///var/run/containerd/containerd.sock")
    );
    let repo = spec.repository.as_ref().unwrap();
    assert_eq!(repo.iso.as_deref(), Some("none"));
    assert_eq!(repo.update, Some(false));
    let back: KKMachineTemplate = serde_json::from_value(serde_json::to_value(&kkmt).unwrap()).unwrap();
    assert_eq!(back.spec, kkmt.spec);
}

#[test]
fn secrets_never_show_in_debug_output() {
    let kkc: KKCluster = serde_saphyr::from_str(&sample("capkk-kkcluster.yaml")).unwrap();
    let dbg = format!("{kkc:?}");
    assert!(!dbg.contains("P@88w0rd"), "{dbg}");
    assert!(dbg.contains("<redacted>"));
}

#[test]
fn instance_auth_merges_over_global_field_by_field_and_strips_inline_secrets() {
    let kkc: KKCluster = serde_saphyr::from_str(
        sample("kkcluster-secretref.yaml")
            .split("\n---\n")
            .nth(1)
            .unwrap(),
    )
    .unwrap();
    let global = &kkc.spec.nodes.auth;
    let own = capkk_api::Auth {
        user: Some("admin".into()),
        password: Some("pw".into()),
        ..Default::default()
    };
    let merged = own.merged_over(global);
    assert_eq!(merged.user.as_deref(), Some("admin"));
    assert_eq!(merged.password.as_deref(), Some("pw"));
    assert_eq!(
        merged.secret_ref.as_ref().map(|r| r.name.as_str()),
        Some("hosts-ssh"),
        "CAPKK merges field by field: the Secret is inherited (and read only when no inline credential is set)"
    );
    assert!(merged.without_inline_secrets().password.is_none());
    let none = capkk_api::Auth::default().merged_over(global);
    assert_eq!(none.secret_ref.as_ref().unwrap().name, "hosts-ssh");
}

fn walk_structural(path: &str, schema: &Value, problems: &mut Vec<String>) {
    let obj = schema.as_object().unwrap();
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !obj.contains_key("type") && !int_or_string && !preserve {
        problems.push(format!("{path}: no type"));
    }
    for forbidden in ["$ref", "oneOf", "anyOf", "allOf", "definitions", "$defs"] {
        if obj.contains_key(forbidden) && !int_or_string {
            problems.push(format!("{path}: {forbidden}"));
        }
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            walk_structural(&format!("{path}.{k}"), v, problems);
        }
    }
    if let Some(items) = obj.get("items") {
        walk_structural(&format!("{path}[]"), items, problems);
    }
    if let Some(Value::Object(_)) = obj.get("additionalProperties") {
        walk_structural(&format!("{path}{{}}"), &obj["additionalProperties"], problems);
    }
}

#[test]
fn crds_are_structural_labelled_and_named_like_capi_expects() {
    let expected = [
        "kkclusters",
        "kkclustertemplates",
        "kkmachines",
        "kkmachinetemplates",
        "kkinstances",
        "kkremediations",
        "kkremediationtemplates",
    ];
    let all = crds();
    assert_eq!(all.len(), expected.len());
    for (crd, plural) in all.iter().zip(expected) {
        let name = crd.metadata.name.as_deref().unwrap();
        assert_eq!(name, format!("{plural}.infrastructure.cluster.x-k8s.io"));
        assert_eq!(crd.spec.names.plural, plural);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["cluster-api".to_string()][..])
        );
        let labels = crd.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
            Some("v1beta1")
        );
        assert_eq!(crd.spec.versions.len(), 1);
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1beta1");
        assert!(v.served && v.storage);
        let schema =
            serde_json::to_value(v.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap()).unwrap();
        let mut problems = Vec::new();
        walk_structural(plural, &schema, &mut problems);
        assert!(problems.is_empty(), "{plural} not structural: {problems:#?}");
    }
}

#[test]
fn printer_columns_show_progress_and_with_wide_output_the_resolved_runtime() {
    let by_kind = |k: &str| crds().into_iter().find(|c| c.spec.names.kind == k).unwrap();
    let cols = |k: &str| -> Vec<String> {
        by_kind(k).spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect()
    };
    assert_eq!(
        cols("KKMachine"),
        [
            "Cluster",
            "Instance",
            "Provisioned",
            "Phase",
            "Step",
            "Containerd",
            "Sandbox",
            "Age"
        ]
    );
    assert_eq!(cols("KKInstance"), ["Host", "Address", "State", "Step", "Age"]);
    let short = |k: &str| by_kind(k).spec.names.short_names.unwrap_or_default();
    assert_eq!(short("KKCluster"), ["kkc"]);
    assert_eq!(short("KKClusterTemplate"), ["kkct"]);
    assert_eq!(short("KKMachine"), ["kkm"]);
    assert_eq!(short("KKMachineTemplate"), ["kkmt"]);
    assert_eq!(short("KKInstance"), ["kki"]);
}

#[test]
fn checked_in_crds_match_the_types() {
    for crd in crds() {
        let path = format!(
            "{}/../config/crd/bases/{}",
            env!("CARGO_MANIFEST_DIR"),
            capkk_api::crd_file_name(&crd)
        );
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        let fresh = format!("---\n{}", capkk_api::crd_yaml(&crd).unwrap());
        assert!(on_disk == fresh, "{path} is stale: run `make crds`");
    }
}

#[test]
fn durations_parse_like_go() {
    use capkk_api::parse_duration_seconds as p;
    assert_eq!(p("30s"), Some(30));
    assert_eq!(p("1m30s"), Some(90));
    assert_eq!(p("2h"), Some(7200));
    assert_eq!(p("500ms"), Some(1));
    assert_eq!(p("abc"), None);
    assert_eq!(p("10x"), None);
    assert_eq!(p(""), None);
}

#[test]
fn a_duration_too_large_for_64_bits_is_unparsable_rather_than_a_panic_or_a_wrapped_value() {
    use capkk_api::parse_duration_seconds as p;
    // 9,999,999,999,999 h is 3.6e19 ms: more than u64::MAX (1.8e19).
    assert_eq!(p("9999999999999h"), None);
    assert_eq!(
        p("5124095576030h5124095576030h"),
        None,
        "the sum overflows, each part does not"
    );
    assert_eq!(p("1h"), Some(3600));
}

/// Every `timeout` property (global, per-host and bastion `auth`) in `schema`, with its path.
fn timeout_schemas<'a>(path: &str, schema: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let p = format!("{path}.{k}");
            if k == "timeout" && path.ends_with(".auth") {
                out.push((p.clone(), v));
            }
            timeout_schemas(&p, v, out);
        }
    }
    if let Some(items) = schema.get("items") {
        timeout_schemas(&format!("{path}[]"), items, out);
    }
}

#[test]
fn no_auth_timeout_is_defaulted_so_the_managers_connect_timeout_applies_when_unset() {
    let mut found = Vec::new();
    let schemas: Vec<Value> = crds()
        .iter()
        .map(|crd| {
            serde_json::to_value(
                crd.spec.versions[0]
                    .schema
                    .as_ref()
                    .unwrap()
                    .open_api_v3_schema
                    .as_ref()
                    .unwrap(),
            )
            .unwrap()
        })
        .collect();
    for (crd, schema) in crds().iter().zip(&schemas) {
        timeout_schemas(crd.metadata.name.as_deref().unwrap(), schema, &mut found);
    }
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert!(
        paths.iter().any(|p| p.ends_with("spec.nodes.auth.timeout"))
            && paths
                .iter()
                .any(|p| p.ends_with("spec.nodes.instances[].auth.timeout"))
            && paths
                .iter()
                .any(|p| p.ends_with("spec.nodes.bastion.auth.timeout")),
        "{paths:?}"
    );
    for (path, schema) in &found {
        assert!(
            schema.get("default").is_none(),
            "{path} has a schema default: every host would carry it and --ssh-connect-timeout would never apply"
        );
    }
}
