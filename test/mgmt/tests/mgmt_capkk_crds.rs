//! Our CRDs (config/crd/bases, or `$CAPKK_CRD_DIR`) on the real kube-apiserver: they install, the samples
//! in config/samples are accepted with the schema defaults applied, every CEL rule rejects a bad object
//! with its message, CAPI resolves KKCluster references through the CRDs' contract label, and CAPKK users'
//! YAML applies unchanged (CAPKK v3.1.12's cluster template rendered by the real clusterctl with the CAPI
//! book's environment; objects as `kubectl get -o yaml` exports them from a CAPKK cluster).

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const GROUP_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";

fn crd_dir() -> PathBuf {
    std::env::var_os("CAPKK_CRD_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| capkk_mgmt::repo_root().join("config/crd/bases"))
}

/// Every CRD file, parsed.
fn crds() -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(crd_dir())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "yaml"))
    {
        out.extend(capkk_mgmt::read_yaml_docs(f)?);
    }
    Ok(out)
}

fn storage_schema(crd: &Value) -> &Value {
    crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"] == json!(true)))
        .map_or(&Value::Null, |v| &v["schema"]["openAPIV3Schema"])
}

#[tokio::test]
async fn crds_install_and_carry_the_capi_contract_label() -> anyhow::Result<()> {
    let client = common::client().await?;
    let names = common::install_capkk_crds(&client).await?;
    let want: BTreeSet<&str> = [
        "kkclusters",
        "kkclustertemplates",
        "kkinstances",
        "kkmachines",
        "kkmachinetemplates",
        "kkremediations",
        "kkremediationtemplates",
    ]
    .into_iter()
    .collect();
    let got: BTreeSet<&str> = names.iter().filter_map(|n| n.split('.').next()).collect();
    assert_eq!(got, want, "installed CRDs");
    for crd in crds()? {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(
            crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"], "v1beta1",
            "{name}: contract label"
        );
    }
    Ok(())
}

/// Walks `schema` alongside `obj` and returns the paths where a schema default is missing from `obj`
/// (only below objects that exist in `obj`).
fn missing_defaults(schema: &Value, obj: &Value, path: &str, out: &mut Vec<String>) {
    match obj {
        Value::Object(map) => {
            let Some(props) = schema["properties"].as_object() else {
                return;
            };
            for (key, sub) in props {
                let child = format!("{path}.{key}");
                match map.get(key) {
                    Some(v) => missing_defaults(sub, v, &child, out),
                    None if sub.get("default").is_some() => out.push(child),
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                missing_defaults(&schema["items"], item, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Collects the paths (in `stored`) whose value was filled from a schema default, i.e. absent in `sent`.
fn defaulted(schema: &Value, sent: &Value, stored: &Value, path: &str, out: &mut Vec<String>) {
    let (Some(stored_map), Some(props)) = (stored.as_object(), schema["properties"].as_object()) else {
        if let (Some(a), Some(b)) = (sent.as_array(), stored.as_array()) {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                defaulted(&schema["items"], x, y, &format!("{path}[{i}]"), out);
            }
        }
        return;
    };
    for (key, sub) in props {
        let child = format!("{path}.{key}");
        match (sent.get(key), stored_map.get(key)) {
            (None, Some(_)) if sub.get("default").is_some() => out.push(child),
            (Some(a), Some(b)) => defaulted(sub, a, b, &child, out),
            _ => {}
        }
    }
}

#[tokio::test]
async fn samples_are_accepted_with_schema_defaults_applied() -> anyhow::Result<()> {
    let client = common::client().await?;
    common::install_capkk_crds(&client).await?;
    let schemas: Vec<(String, Value)> = crds()?
        .iter()
        .map(|c| {
            (
                c["spec"]["names"]["kind"].as_str().unwrap_or_default().to_owned(),
                storage_schema(c).clone(),
            )
        })
        .collect();
    let dir = capkk_mgmt::repo_root().join("config/samples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut checked = 0;
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "yaml"))
    {
        let ns = common::namespace(&client, "samples").await?;
        for mut doc in capkk_mgmt::read_yaml_docs(file)? {
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            doc["metadata"]["namespace"] = json!(ns);
            let stored = common::create(&client, &ns, doc.clone())
                .await
                .with_context(|| format!("sample {} ({kind}) rejected", file.display()))?;
            let Some((_, schema)) = schemas.iter().find(|(k, _)| *k == kind) else {
                continue;
            };
            let stored = serde_json::to_value(&stored)?;
            let mut missing = Vec::new();
            missing_defaults(schema, &stored, "", &mut missing);
            assert!(
                missing.is_empty(),
                "{}: {kind} stored without defaults at {missing:?}",
                file.display()
            );
            let mut filled = Vec::new();
            defaulted(schema, &doc, &stored, "", &mut filled);
            eprintln!(
                "{}: {kind} accepted; defaults applied at {filled:?}",
                file.display()
            );
            assert!(
                !filled.is_empty(),
                "{}: {kind}: no schema default was applied",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 3,
        "expected the KKCluster and KKMachineTemplate samples, checked {checked}"
    );
    Ok(())
}

#[tokio::test]
async fn schema_defaults_fill_an_omitted_auth_block() -> anyhow::Result<()> {
    let client = common::client().await?;
    common::install_capkk_crds(&client).await?;
    let ns = common::namespace(&client, "defaults").await?;
    let mut obj = kk_cluster("defaults");
    obj["spec"]["nodes"]["instances"][0]["auth"] = json!({"password": "per-instance"});
    obj["spec"]["nodes"]["instances"][1]["auth"] = json!({"privateKeyPath": "/root/.ssh/id"});
    obj["spec"]["nodes"].as_object_mut().map(|n| n.remove("auth"));
    let stored = common::create(&client, &ns, obj).await?;
    let auth = &stored.data["spec"]["nodes"]["auth"];
    assert_eq!(auth["user"], "root", "{auth}");
    assert_eq!(auth["port"], 22, "{auth}");
    assert!(
        auth.get("timeout").is_none(),
        "no timeout default (the manager's --ssh-connect-timeout applies): {auth}"
    );
    assert_eq!(stored.data["spec"]["distribution"], "kubernetes");
    Ok(())
}

// ---- CEL rules -------------------------------------------------------------------------------------------

fn kk_cluster_spec() -> Value {
    json!({
        "nodes": {
            "auth": {"user": "ubuntu", "privateKeyPath": "/root/.ssh/id_ed25519"},
            "instances": [
                {"name": "cp-1", "address": "198.18.0.11", "internalAddress": "10.0.0.11"},
                {"name": "worker-1", "address": "198.18.0.21", "internalAddress": "10.0.0.21"}
            ]
        },
        "controlPlaneLoadBalancer": {"host": "198.18.0.100"}
    })
}

fn kk_cluster(name: &str) -> Value {
    json!({"apiVersion": GROUP_VERSION, "kind": "KKCluster", "metadata": {"name": name}, "spec": kk_cluster_spec()})
}

fn base(kind: &str, name: &str) -> Value {
    let spec = match kind {
        "KKCluster" => kk_cluster_spec(),
        "KKClusterTemplate" => json!({"template": {"spec": kk_cluster_spec()}}),
        "KKInstance" => json!({"name": "cp-1", "address": "198.18.0.11"}),
        "KKMachine" => json!({"roles": ["worker"]}),
        "KKMachineTemplate" => json!({"template": {"spec": {"roles": ["worker"]}}}),
        "KKRemediation" => json!({"strategy": {"retryLimit": 2, "timeout": "300s"}}),
        "KKRemediationTemplate" => json!({"template": {"spec": {"strategy": {"timeout": "5m"}}}}),
        other => panic!("no base object for {other}"),
    };
    json!({"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec})
}

/// When the bad value is applied: at creation, or as an update of a valid object.
#[derive(Clone, Copy, Debug)]
enum When {
    Create,
    /// `setup` runs on the object before creation, `bad` on the stored object before the update.
    Update(Edit),
}

struct Case {
    kind: &'static str,
    /// The rule's message, or for a `pattern` the apiserver's `<path> in body should match`.
    message: String,
    when: When,
    /// Makes the object invalid; gets the spec (for KKClusterTemplate: spec.template.spec).
    bad: Edit,
}

/// Edits an object (or its spec) in place.
type Edit = fn(&mut Value);

fn cluster_rules() -> Vec<(&'static str, When, Edit)> {
    vec![
        (
            "spec.controlPlaneLoadBalancer is immutable once set",
            When::Update(|_| {}),
            |s| s["controlPlaneLoadBalancer"]["host"] = json!("198.18.0.101"),
        ),
        (
            "spec.nodes.auth must set one of password, privateKey, privateKeyPath, secret or secretRef (or every instance must set its own auth)",
            When::Create,
            |s| s["nodes"]["auth"] = json!({"user": "ubuntu"}),
        ),
        (
            "bastion.address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number",
            When::Create,
            |s| s["nodes"]["bastion"] = json!({"address": "999.0.0.1"}),
        ),
        // Issue 43: inet_aton's legacy IPv4 forms pass as DNS names and resolve to 127.0.0.1.
        (
            "bastion.address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number",
            When::Create,
            |s| s["nodes"]["bastion"] = json!({"address": "0x7f.1"}),
        ),
        (
            "spec.nodes.instances[].address must be unique",
            When::Create,
            |s| s["nodes"]["instances"][1]["address"] = json!("198.18.0.11"),
        ),
        (
            "spec.nodes.instances[].internalAddress must be unique",
            When::Create,
            |s| s["nodes"]["instances"][1]["internalAddress"] = json!("10.0.0.11"),
        ),
        (
            "spec.nodes.instances[].address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number",
            When::Create,
            |s| s["nodes"]["instances"][0]["address"] = json!("999.0.0.1"),
        ),
        (
            "spec.nodes.instances[].address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number",
            When::Create,
            |s| s["nodes"]["instances"][0]["address"] = json!("0x7f.1"),
        ),
        (
            "spec.nodes.instances[].address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number",
            When::Create,
            |s| s["nodes"]["instances"][0]["address"] = json!("0x7f000001"),
        ),
        (
            "spec.nodes.instances[].address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number",
            When::Create,
            |s| s["nodes"]["instances"][0]["address"] = json!("0177.0.0.1"),
        ),
        (
            "spec.nodes.instances[].address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number",
            When::Create,
            |s| s["nodes"]["instances"][0]["address"] = json!("127.1"),
        ),
        (
            "spec.nodes.instances[].address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number",
            When::Create,
            |s| s["nodes"]["instances"][0]["address"] = json!("2130706433"),
        ),
        // Issue 43: a path, fragment, port or space in the endpoint reaches the Cluster, the kubeconfig's URL
        // and kubeadm's configuration.
        (
            "controlPlaneLoadBalancer.host must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number, without port or path",
            When::Create,
            |s| s["controlPlaneLoadBalancer"]["host"] = json!("vip.example/api#x"),
        ),
        (
            "controlPlaneLoadBalancer.host must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number, without port or path",
            When::Create,
            |s| s["controlPlaneLoadBalancer"]["host"] = json!("198.18.0.100:6443"),
        ),
        (
            "controlPlaneLoadBalancer.host must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number, without port or path",
            When::Create,
            |s| s["controlPlaneLoadBalancer"]["host"] = json!("0x7f.1"),
        ),
        // Issue 41: the VIP the provider serves is an IPv4 literal (keepalived's virtual_ipaddress, haproxy's
        // bind), never a name or an IPv6 address; the Keepalived-only fields are refused on an external one.
        (
            "controlPlaneLoadBalancer.host must be an IPv4 address (the VIP) when type is Keepalived",
            When::Create,
            |s| s["controlPlaneLoadBalancer"] = json!({"host": "vip.example", "type": "Keepalived"}),
        ),
        (
            "controlPlaneLoadBalancer.host must be an IPv4 address (the VIP) when type is Keepalived",
            When::Create,
            |s| s["controlPlaneLoadBalancer"] = json!({"host": "fd00::100", "type": "Keepalived"}),
        ),
        (
            "controlPlaneLoadBalancer.host must be an IPv4 address (the VIP) when type is Keepalived",
            When::Create,
            |s| s["controlPlaneLoadBalancer"] = json!({"type": "Keepalived"}),
        ),
        (
            "controlPlaneLoadBalancer.port, interface and virtualRouterID apply only to type Keepalived",
            When::Create,
            |s| s["controlPlaneLoadBalancer"] = json!({"host": "198.18.0.100", "port": 8443}),
        ),
        (
            "controlPlaneLoadBalancer.port, interface and virtualRouterID apply only to type Keepalived",
            When::Create,
            |s| {
                s["controlPlaneLoadBalancer"] =
                    json!({"host": "198.18.0.100", "type": "External", "interface": "eth0"})
            },
        ),
        (
            "spec.controlPlaneLoadBalancer is immutable once set",
            When::Update(|_| {}),
            |s| s["controlPlaneLoadBalancer"]["type"] = json!("Keepalived"),
        ),
        (
            "controlPlaneEndpoint.host must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number, without port or path",
            When::Create,
            |s| s["controlPlaneEndpoint"] = json!({"host": "vip example", "port": 6443}),
        ),
        (
            "controlPlaneEndpoint.host must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number, without port or path",
            When::Create,
            |s| s["controlPlaneEndpoint"] = json!({"host": "vip.example?x=1", "port": 6443}),
        ),
        (
            "spec.nodes.instances[].internalAddress must be a valid IP address",
            When::Create,
            |s| s["nodes"]["instances"][0]["internalAddress"] = json!("not-an-ip"),
        ),
        ("spec.nodes.instances[].name must be unique", When::Create, |s| {
            s["nodes"]["instances"][1]["name"] = json!("cp-1")
        }),
        (
            "spec.nodes.instances[].name must be a lower-case DNS label (a-z, 0-9, '-')",
            When::Create,
            |s| s["nodes"]["instances"][0]["name"] = json!("Bad_Name"),
        ),
    ]
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (message, when, bad) in cluster_rules() {
        cases.push(Case {
            kind: "KKCluster",
            message: message.into(),
            when,
            bad,
        });
        cases.push(Case {
            kind: "KKClusterTemplate",
            message: message.into(),
            when,
            bad,
        });
    }
    for (family, path, bad) in pattern_rules() {
        let kinds: &[(&'static str, &str)] = match family {
            "cluster" => &[
                ("KKCluster", "spec."),
                ("KKClusterTemplate", "spec.template.spec."),
            ],
            "instance" => &[("KKInstance", "spec.")],
            // The machine's runtime and repository settings are copied into the KKInstance it claims.
            _ => &[
                ("KKMachine", "spec."),
                ("KKMachineTemplate", "spec.template.spec."),
                ("KKInstance", "spec."),
            ],
        };
        for &(kind, prefix) in kinds {
            cases.push(Case {
                kind,
                message: format!("{prefix}{path} in body should match"),
                when: When::Create,
                bad,
            });
        }
    }
    // A remediation's timeout: a duration in s/m/h, from 30s to 24h.
    for (kind, prefix) in [
        ("KKRemediation", "spec."),
        ("KKRemediationTemplate", "spec.template.spec."),
    ] {
        cases.push(Case {
            kind,
            message: format!("{prefix}strategy.timeout in body should match"),
            when: When::Create,
            bad: |s| s["strategy"] = json!({"timeout": "5 min"}),
        });
        cases.push(Case {
            kind,
            message: "timeout must be between 30s and 24h".into(),
            when: When::Create,
            bad: |s| s["strategy"] = json!({"timeout": "10s"}),
        });
    }
    // Pinned host keys are copied from a KKCluster into every KKInstance: a list bounded in items and in
    // item length, so that one object cannot make every copy large.
    for (family, path, bad) in host_key_bounds() {
        let kinds: &[(&'static str, &str)] = if family == "cluster" {
            &[
                ("KKCluster", "spec."),
                ("KKClusterTemplate", "spec.template.spec."),
            ]
        } else {
            &[("KKInstance", "spec.")]
        };
        for &(kind, prefix) in kinds {
            cases.push(Case {
                kind,
                message: format!("{prefix}{path}"),
                when: When::Create,
                bad,
            });
        }
    }
    cases.extend([
        Case {
            kind: "KKInstance",
            message: "spec.name and spec.address are immutable".into(),
            when: When::Update(|_| {}),
            bad: |s| s["address"] = json!("198.18.0.12"),
        },
        Case {
            kind: "KKInstance",
            message: "spec.hostKey is immutable once recorded; delete the KKInstance to re-trust a host"
                .into(),
            when: When::Update(|s| {
                s["hostKey"] = json!("SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s")
            }),
            bad: |s| s["hostKey"] = json!("SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU"),
        },
        Case {
            kind: "KKCluster",
            message: "spec.nodes.auth.timeout in body should be less than or equal to 3600000000000".into(),
            when: When::Create,
            bad: |s| s["nodes"]["auth"]["timeout"] = json!(i64::MAX),
        },
        Case {
            kind: "KKInstance",
            message: "bastion.address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number".into(),
            when: When::Create,
            bad: |s| s["bastion"] = json!({"address": "999.0.0.1"}),
        },
        Case {
            kind: "KKInstance",
            message: "bastion.address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number".into(),
            when: When::Create,
            bad: |s| s["bastion"] = json!({"address": "0x7f000001"}),
        },
        Case {
            kind: "KKInstance",
            message: "spec.address must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number"
                .into(),
            // spec.address is immutable: a new object.
            when: When::Create,
            bad: |s| s["address"] = json!("0x7f.1"),
        },
        Case {
            kind: "KKInstance",
            message: "spec.internalAddress must be an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number".into(),
            when: When::Create,
            bad: |s| s["internalAddress"] = json!("0177.0.0.1"),
        },
        // Issue 43: names that become a request path's segment.
        Case {
            kind: "KKInstance",
            message: "spec.name in body should match".into(),
            when: When::Create,
            bad: |s| s["name"] = json!("cp-1?watch=1"),
        },
        Case {
            kind: "KKMachine",
            message: "spec.instanceID in body should match".into(),
            when: When::Create,
            bad: |s| s["instanceID"] = json!("?watch=true&timeoutSeconds=86400"),
        },
        Case {
            kind: "KKMachineTemplate",
            message: "spec.template.spec.instanceID in body should match".into(),
            when: When::Create,
            bad: |s| s["instanceID"] = json!("a/b"),
        },
        // Issue 43: a template's claim fields would make every KKMachine made from it target one host.
        Case {
            kind: "KKMachineTemplate",
            message: "spec.template.spec.instanceID must not be set in a template: it names one host, which every KKMachine made from it would claim".into(),
            when: When::Create,
            bad: |s| s["instanceID"] = json!("c.cp-1"),
        },
        Case {
            kind: "KKMachineTemplate",
            message: "spec.template.spec.providerID must not be set in a template: it names one host, which every KKMachine made from it would claim".into(),
            when: When::Create,
            bad: |s| s["providerID"] = json!("kk:///c/cp-1"),
        },
        Case {
            kind: "KKMachine",
            message: "spec.providerID is immutable once set".into(),
            when: When::Update(|s| s["providerID"] = json!("kk://ns/cp-1")),
            bad: |s| s["providerID"] = json!("kk://ns/cp-2"),
        },
        Case {
            kind: "KKMachine",
            message: "spec.instanceID is immutable once set".into(),
            when: When::Update(|s| s["instanceID"] = json!("cp-1")),
            bad: |s| s["instanceID"] = json!("cp-2"),
        },
    ]);
    cases
}

/// Every field with an OpenAPI `pattern` (values that reach a host or a file name) and a value it refuses:
/// (`cluster` or `machine`, path under the spec with `[0]` for list items, edit of the spec).
fn pattern_rules() -> Vec<(&'static str, &'static str, Edit)> {
    fn ov(s: &mut Value, field: &str, v: Value) {
        s["component"]["overrides"] = json!([{"id": "kubeadm"}]);
        s["component"]["overrides"][0][field] = v;
    }
    vec![
        ("cluster", "nodes.instances[0].hostKeys[0]", |s| {
            s["nodes"]["instances"][0]["hostKeys"] = json!(["MD5:aa:bb"])
        }),
        ("cluster", "component.host", |s| {
            s["component"]["host"] = json!("file:///etc")
        }),
        // Issue 41: the VIP's interface reaches keepalived's configuration.
        ("cluster", "controlPlaneLoadBalancer.interface", |s| {
            s["controlPlaneLoadBalancer"] =
                json!({"host": "198.18.0.100", "type": "Keepalived", "interface": "eth0\n}\nx {"})
        }),
        ("cluster", "component.overrides[0].id", |s| {
            s["component"]["overrides"] = json!([{"id": "../kubeadm"}])
        }),
        ("cluster", "component.overrides[0].arch", |s| {
            ov(s, "arch", json!("amd64;id"))
        }),
        ("cluster", "component.overrides[0].version", |s| {
            ov(s, "version", json!("v1.32.0'; touch /tmp/x; '"))
        }),
        ("cluster", "component.overrides[0].url", |s| {
            ov(s, "url", json!("file:///etc/passwd"))
        }),
        ("cluster", "component.overrides[0].path", |s| {
            ov(s, "path", json!("a b"))
        }),
        ("cluster", "component.overrides[0].checksum.value", |s| {
            ov(
                s,
                "checksum",
                json!({"value": "/var/run/secrets/kubernetes.io/serviceaccount/token"}),
            )
        }),
        ("cluster", "component.overrides[0].checksum.path", |s| {
            ov(s, "checksum", json!({"path": "a b"}))
        }),
        ("cluster", "registry.privateRegistry", |s| {
            s["registry"]["privateRegistry"] = json!("..")
        }),
        ("cluster", "registry.insecureRegistries[0]", |s| {
            s["registry"]["insecureRegistries"] = json!(["."])
        }),
        ("cluster", "registry.registryMirrors[0]", |s| {
            s["registry"]["registryMirrors"] = json!(["mirror.example"])
        }),
        // Issue 25's admission gaps: a traversal in a key path, a Secret name that would reach the request
        // path, a timeout that overflows, unbounded bastion keys, a newline in a host file's path.
        ("cluster", "nodes.auth.privateKeyPath", |s| {
            s["nodes"]["auth"]["privateKeyPath"] = json!("../other-tenant/id_ed25519")
        }),
        ("cluster", "nodes.instances[0].auth.privateKeyPath", |s| {
            s["nodes"]["instances"][0]["auth"] = json!({"privateKeyPath": "keys/../../etc/shadow"})
        }),
        ("cluster", "nodes.bastion.auth.privateKeyPath", |s| {
            s["nodes"]["bastion"] = json!({"address": "198.18.0.1", "auth": {"privateKeyPath": "/keys/.."}})
        }),
        ("cluster", "nodes.auth.secret", |s| {
            s["nodes"]["auth"]["secret"] = json!("ssh?labelSelector=x")
        }),
        ("cluster", "nodes.instances[0].auth.secret", |s| {
            s["nodes"]["instances"][0]["auth"] = json!({"secret": "a/b"})
        }),
        ("cluster", "nodes.bastion.auth.secret", |s| {
            s["nodes"]["bastion"] = json!({"address": "198.18.0.1", "auth": {"secret": ".."}})
        }),
        ("cluster", "nodes.auth.secretRef.name", |s| {
            s["nodes"]["auth"]["secretRef"] = json!({"name": "ssh%2F.."})
        }),
        ("cluster", "nodes.instances[0].auth.secretRef.name", |s| {
            s["nodes"]["instances"][0]["auth"] = json!({"secretRef": {"name": "Upper"}})
        }),
        ("cluster", "nodes.bastion.auth.secretRef.name", |s| {
            s["nodes"]["bastion"] = json!({"address": "198.18.0.1", "auth": {"secretRef": {"name": "a?b"}}})
        }),
        ("cluster", "nodes.auth.timeout", |s| {
            s["nodes"]["auth"]["timeout"] = json!("9999999999999h")
        }),
        ("cluster", "nodes.instances[0].auth.timeout", |s| {
            s["nodes"]["instances"][0]["auth"] = json!({"timeout": "30 s"})
        }),
        ("cluster", "nodes.bastion.auth.timeout", |s| {
            s["nodes"]["bastion"] = json!({"address": "198.18.0.1", "auth": {"timeout": "1d"}})
        }),
        (
            "cluster",
            "nodes.bastion.hostKeys[0]",
            |s| s["nodes"]["bastion"] = json!({"address": "198.18.0.1", "hostKeys": ["ssh-ed25519 AAAA\nx"]}),
        ),
        ("cluster", "component.zone", |s| {
            s["component"]["zone"] = json!("cn/../x")
        }),
        ("cluster", "registry.auth.caFile", |s| {
            s["registry"]["auth"] = json!({"caFile": "/etc/ca.pem\"\n  skip_verify = true"})
        }),
        ("cluster", "registry.auth.certFile", |s| {
            s["registry"]["auth"] = json!({"certFile": "/etc/c.pem\nx"})
        }),
        ("cluster", "registry.auth.keyFile", |s| {
            s["registry"]["auth"] = json!({"keyFile": "/etc/k.pem\rx"})
        }),
        ("cluster", "registry.auth.certsPath", |s| {
            s["registry"]["auth"] = json!({"certsPath": "/etc/certs\n"})
        }),
        ("cluster", "registry.auth.secretRef.name", |s| {
            s["registry"]["auth"] = json!({"secretRef": {"name": "reg/../x"}})
        }),
        ("machine", "containerManager.version", |s| {
            s["containerManager"]["version"] = json!("1.7.13$(id)")
        }),
        ("machine", "containerManager.criSocket", |s| {
            s["containerManager"]["criSocket"] = json!("unix:///run/x.sock; id")
        }),
        ("machine", "containerManager.criSocket", |s| {
            s["containerManager"]["criSocket"] = json!("unix:///run/../etc/shadow")
        }),
        ("machine", "containerManager.crictlVersion", |s| {
            s["containerManager"]["crictlVersion"] = json!("-v1.29.0")
        }),
        ("machine", "containerManager.criDockerdVersion", |s| {
            s["containerManager"]["criDockerdVersion"] = json!("0.3 ")
        }),
        ("machine", "containerManager.runcVersion", |s| {
            s["containerManager"]["runcVersion"] = json!("v1.1.12'")
        }),
        ("machine", "containerManager.sandboxImage", |s| {
            s["containerManager"]["sandboxImage"] = json!("pause:3.9\"\nx")
        }),
        ("machine", "repository.iso", |s| {
            s["repository"]["iso"] = json!("../etc/passwd")
        }),
        ("machine", "repository.packages[0]", |s| {
            s["repository"]["packages"] = json!(["-oDebug"])
        }),
        ("instance", "kubernetesVersion", |s| {
            s["kubernetesVersion"] = json!("v1.32.0 && id")
        }),
        ("instance", "auth.privateKeyPath", |s| {
            s["auth"] = json!({"privateKeyPath": "../../etc/shadow"})
        }),
        ("instance", "auth.secret", |s| {
            s["auth"] = json!({"secret": "a/b"})
        }),
        ("instance", "auth.secretRef.name", |s| {
            s["auth"] = json!({"secretRef": {"name": "a?b"}})
        }),
        ("instance", "auth.timeout", |s| {
            s["auth"] = json!({"timeout": "1y"})
        }),
        (
            "instance",
            "bastion.auth.privateKeyPath",
            |s| s["bastion"] = json!({"address": "198.18.0.1", "auth": {"privateKeyPath": "a/../../b"}}),
        ),
        ("instance", "bastion.auth.secret", |s| {
            s["bastion"] = json!({"address": "198.18.0.1", "auth": {"secret": "A"}})
        }),
        (
            "instance",
            "bastion.auth.secretRef.name",
            |s| s["bastion"] = json!({"address": "198.18.0.1", "auth": {"secretRef": {"name": "x/y"}}}),
        ),
        ("instance", "bastion.auth.timeout", |s| {
            s["bastion"] = json!({"address": "198.18.0.1", "auth": {"timeout": "-1s"}})
        }),
        ("instance", "bastion.hostKeys[0]", |s| {
            s["bastion"] = json!({"address": "198.18.0.1", "hostKeys": ["anything"]})
        }),
        ("instance", "hostKeys[0]", |s| {
            s["hostKeys"] = json!(["MD5:aa:bb"])
        }),
        ("instance", "hostKey", |s| s["hostKey"] = json!("ssh-rsa AAAA\nx")),
        ("instance", "clusterName", |s| s["clusterName"] = json!("../c")),
        ("instance", "arch", |s| s["arch"] = json!("amd64;id")),
        ("instance", "bootstrapDataSecretRef.name", |s| {
            s["bootstrapDataSecretRef"] = json!({"name": "data?watch=1"})
        }),
        ("machine", "providerID", |s| {
            s["providerID"] = json!("kk:///c/n\nx")
        }),
    ]
}

/// A fingerprint the `hostKeys` pattern accepts.
const FINGERPRINT: &str = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s";

/// Nine fingerprints, one more than `hostKeys` holds (`maxItems: 8`).
fn nine_keys() -> Value {
    json!(vec![FINGERPRINT; 9])
}

/// A 101-byte item (`maxLength: 100`).
fn long_key() -> Value {
    json!([format!("{FINGERPRINT}{}", "A".repeat(101 - FINGERPRINT.len()))])
}

/// The size bounds of every `hostKeys` list: (`cluster` or `instance`, the apiserver's `<path>: Too ...`
/// message under the spec, edit of the spec).
fn host_key_bounds() -> Vec<(&'static str, &'static str, Edit)> {
    vec![
        (
            "cluster",
            "nodes.bastion.hostKeys: Too many: 9: must have at most 8 items",
            |s| s["nodes"]["bastion"] = json!({"address": "198.18.0.1", "hostKeys": nine_keys()}),
        ),
        (
            "cluster",
            "nodes.bastion.hostKeys[0]: Too long: may not be more than 100 bytes",
            |s| s["nodes"]["bastion"] = json!({"address": "198.18.0.1", "hostKeys": long_key()}),
        ),
        (
            "cluster",
            "nodes.instances[0].hostKeys: Too many: 9: must have at most 8 items",
            |s| s["nodes"]["instances"][0]["hostKeys"] = nine_keys(),
        ),
        (
            "cluster",
            "nodes.instances[0].hostKeys[0]: Too long: may not be more than 100 bytes",
            |s| s["nodes"]["instances"][0]["hostKeys"] = long_key(),
        ),
        (
            "instance",
            "bastion.hostKeys: Too many: 9: must have at most 8 items",
            |s| s["bastion"] = json!({"address": "198.18.0.1", "hostKeys": nine_keys()}),
        ),
        (
            "instance",
            "bastion.hostKeys[0]: Too long: may not be more than 100 bytes",
            |s| s["bastion"] = json!({"address": "198.18.0.1", "hostKeys": long_key()}),
        ),
        (
            "instance",
            "hostKeys: Too many: 9: must have at most 8 items",
            |s| s["hostKeys"] = nine_keys(),
        ),
        (
            "instance",
            "hostKeys[0]: Too long: may not be more than 100 bytes",
            |s| s["hostKeys"] = long_key(),
        ),
    ]
}

/// The part of the object a case's functions edit.
fn target<'a>(kind: &str, obj: &'a mut Value) -> &'a mut Value {
    match kind {
        "KKClusterTemplate" | "KKMachineTemplate" | "KKRemediationTemplate" => {
            &mut obj["spec"]["template"]["spec"]
        }
        _ => &mut obj["spec"],
    }
}

/// Every (kind, message) of an x-kubernetes-validations rule in the CRDs, and every `pattern` as
/// (kind, `<path> in body should match`), list items as `[0]`.
fn cel_rules() -> anyhow::Result<BTreeSet<(String, String)>> {
    fn walk(kind: &str, path: &str, schema: &Value, out: &mut BTreeSet<(String, String)>) {
        if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
            for r in rules {
                let message = r["message"]
                    .as_str()
                    .unwrap_or("<rule without message>")
                    .to_owned();
                out.insert((kind.to_owned(), message));
            }
        }
        if schema["pattern"].is_string() {
            out.insert((kind.to_owned(), format!("{path} in body should match")));
        }
        if let Some(props) = schema["properties"].as_object() {
            for (k, p) in props {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(kind, &sub, p, out);
            }
        }
        if schema["items"].is_object() {
            walk(kind, &format!("{path}[0]"), &schema["items"], out);
        }
        if schema["additionalProperties"].is_object() {
            walk(kind, &format!("{path}[*]"), &schema["additionalProperties"], out);
        }
    }
    let mut out = BTreeSet::new();
    for crd in crds()? {
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        walk(&kind, "", storage_schema(&crd), &mut out);
    }
    Ok(out)
}

#[test]
fn every_cel_rule_has_a_rejection_case() -> anyhow::Result<()> {
    let rules = cel_rules()?;
    // Cases of numeric and size bounds (`maximum`, `maxItems`, `maxLength`) are extra: the walk lists rules
    // and patterns only.
    let covered: BTreeSet<(String, String)> = cases()
        .iter()
        .filter(|c| !c.message.contains(" in body should be less than") && !c.message.contains(": Too "))
        .map(|c| (c.kind.to_owned(), c.message.clone()))
        .collect();
    let uncovered: Vec<_> = rules.difference(&covered).collect();
    let stale: Vec<_> = covered.difference(&rules).collect();
    assert!(
        uncovered.is_empty(),
        "CEL rules without a case in tests/mgmt_capkk_crds.rs: {uncovered:#?}"
    );
    assert!(
        stale.is_empty(),
        "cases for rules no longer in the CRDs: {stale:#?}"
    );
    Ok(())
}

async fn api_for(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        kind,
    ));
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn run_case(client: &Client, ns: &str, i: usize, case: &Case) -> anyhow::Result<String> {
    let name = format!("cel-{i}");
    let api = api_for(client, ns, case.kind).await;
    let mut obj = base(case.kind, &name);
    obj["metadata"]["namespace"] = json!(ns);
    match case.when {
        When::Create => {
            (case.bad)(target(case.kind, &mut obj));
            common::create_rejected(client, ns, obj).await
        }
        When::Update(setup) => {
            setup(target(case.kind, &mut obj));
            common::create(client, ns, obj)
                .await
                .context("create the valid object")?;
            let stored = api.get(&name).await?;
            let mut edited = serde_json::to_value(&stored)?;
            (case.bad)(target(case.kind, &mut edited));
            let edited: DynamicObject = serde_json::from_value(edited)?;
            match api.replace(&name, &PostParams::default(), &edited).await {
                Ok(o) => bail!("update of {} accepted: {:?}", o.name_any(), o.data["spec"]),
                Err(kube::Error::Api(status)) => Ok(status.message),
                Err(e) => Err(e.into()),
            }
        }
    }
}

#[tokio::test]
async fn every_cel_rule_rejects_a_bad_object_with_its_message() -> anyhow::Result<()> {
    let client = common::client().await?;
    common::install_capkk_crds(&client).await?;
    let ns = common::namespace(&client, "cel").await?;
    // The valid base objects must be accepted, or every rejection below would prove nothing.
    for kind in [
        "KKCluster",
        "KKClusterTemplate",
        "KKInstance",
        "KKMachine",
        "KKMachineTemplate",
        "KKRemediation",
        "KKRemediationTemplate",
    ] {
        let mut obj = base(kind, &format!("valid-{}", kind.to_lowercase()));
        obj["metadata"]["namespace"] = json!(ns);
        common::create(&client, &ns, obj)
            .await
            .with_context(|| format!("valid {kind} rejected"))?;
    }
    let mut failures = Vec::new();
    for (i, case) in cases().iter().enumerate() {
        match run_case(&client, &ns, i, case).await {
            Ok(msg) if msg.contains(&case.message) => {}
            Ok(msg) => failures.push(format!(
                "{} `{}`: rejected with another message: {msg}",
                case.kind, case.message
            )),
            Err(e) => failures.push(format!("{} `{}`: {e:#}", case.kind, case.message)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} CEL cases failed:\n{}",
        failures.len(),
        cases().len(),
        failures.join("\n")
    );
    Ok(())
}

/// The other side of issue 43's rules: IP literals (IPv4, IPv6), DNS names in any case, the zero endpoint CAPKK
/// writes, and a KKMachine created with its claim (`clusterctl move` re-creates it so) are accepted.
#[tokio::test]
async fn host_and_name_fields_accept_ip_literals_dns_names_and_a_moved_claim() -> anyhow::Result<()> {
    let client = common::client().await?;
    common::install_capkk_crds(&client).await?;
    let ns = common::namespace(&client, "hosts-ok").await?;
    let clusters: [(&str, Value, Value, Value); 5] = [
        (
            "v4",
            json!("198.18.0.11"),
            json!({"host": "198.18.0.100"}),
            json!({"host": "198.18.0.100", "port": 6443}),
        ),
        (
            "v6",
            json!("fd00::a:1"),
            json!({"host": "fd00::100"}),
            json!({"host": "fd00::100", "port": 6443}),
        ),
        (
            "dns",
            json!("Node-1.Example.com"),
            json!({"host": "vip.example.com"}),
            json!({"host": "api.cluster-1.example", "port": 6443}),
        ),
        (
            "zero",
            json!("node1x"),
            json!({"host": ""}),
            json!({"host": "", "port": 0}),
        ),
        // Issue 41: the endpoint the provider serves, every field set (the ha flavor's shape).
        (
            "keepalived",
            json!("198.18.0.11"),
            json!({"host": "198.18.0.100", "type": "Keepalived", "port": 8443, "interface": "enp0s1.100", "virtualRouterID": 255}),
            json!({"host": "198.18.0.100", "port": 8443}),
        ),
    ];
    for (name, address, lb, ep) in clusters {
        let mut obj = kk_cluster(name);
        obj["metadata"]["namespace"] = json!(ns);
        obj["spec"]["nodes"]["instances"][0]["address"] = address.clone();
        obj["spec"]["nodes"]["bastion"] = json!({"address": address});
        obj["spec"]["controlPlaneLoadBalancer"] = lb;
        obj["spec"]["controlPlaneEndpoint"] = ep;
        common::create(&client, &ns, obj)
            .await
            .with_context(|| format!("valid KKCluster {name} rejected"))?;
    }
    let mut moved = base("KKMachine", "moved");
    moved["metadata"]["namespace"] = json!(ns);
    moved["spec"]["instanceID"] = json!("c.cp-1");
    moved["spec"]["providerID"] = json!("kk:///c/cp-1");
    common::create(&client, &ns, moved)
        .await
        .context("a KKMachine re-created with its claim (clusterctl move) was rejected")?;
    let mut inst = base("KKInstance", "c.node-1");
    inst["metadata"]["namespace"] = json!(ns);
    inst["spec"]["address"] = json!("node-1.example.com");
    inst["spec"]["internalAddress"] = json!("198.18.0.12");
    common::create(&client, &ns, inst)
        .await
        .context("valid KKInstance rejected")?;
    Ok(())
}

#[tokio::test]
async fn capi_resolves_kkcluster_references_through_the_contract_label() -> anyhow::Result<()> {
    let client = common::client().await?;
    common::install_capkk_crds(&client).await?;
    let ns = common::namespace(&client, "contract").await?;
    common::create(
        &client,
        &ns,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": "c", "namespace": ns},
            "spec": {
                "paused": true,
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKCluster", "name": "c"}
            }
        }),
    )
    .await?;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"));
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &ar);
    let old = common::eventually("v1beta1 view of the Cluster", Duration::from_secs(30), || async {
        Ok(Some(api.get("c").await?))
    })
    .await?;
    assert_eq!(old.data["spec"]["infrastructureRef"]["apiVersion"], GROUP_VERSION);
    Ok(())
}

// ---- CAPKK users' YAML ------------------------------------------------------------------------------------

/// The environment of the CAPI book's KubeKey quick start (plus the variables clusterctl's flags set).
const CAPI_BOOK_ENV: &[(&str, &str)] = &[
    ("KKZONE", ""),
    ("USER_NAME", "ubuntu"),
    ("PASSWORD", "P@88w0rd"),
    (
        "INSTANCES",
        "[{address: 192.168.100.3}, {address: 192.168.100.4}]",
    ),
    ("CONTROL_PLANE_ENDPOINT_IP", "192.168.100.100"),
];

/// Renders `template` with the real clusterctl (`generate cluster --from`) and the CAPI book's environment.
async fn clusterctl_render(template: &std::path::Path, cluster: &str, ns: &str) -> anyhow::Result<String> {
    clusterctl_render_with(template, cluster, ns, CAPI_BOOK_ENV, 1).await
}

/// Renders `template` with the real clusterctl, `env` and `control_planes` control-plane replicas.
async fn clusterctl_render_with(
    template: &std::path::Path,
    cluster: &str,
    ns: &str,
    env: &[(&str, &str)],
    control_planes: u32,
) -> anyhow::Result<String> {
    let plane = capkk_mgmt::ManagementPlane::shared().await?;
    let clusterctl = capkk_mgmt::bin_dir().await?.join("clusterctl");
    anyhow::ensure!(
        clusterctl.is_file(),
        "{} is missing: build it with `make mgmt-bin`",
        clusterctl.display()
    );
    // A private HOME: no clusterctl.yaml or overrides of whoever runs the test apply.
    let home = tempfile::tempdir()?;
    let mut cmd = tokio::process::Command::new(&clusterctl);
    cmd.args(["generate", "cluster", cluster, "--from"])
        .arg(template)
        .args(["--target-namespace", ns, "--kubernetes-version", "v1.32.0"])
        .arg("--control-plane-machine-count")
        .arg(control_planes.to_string())
        .args(["--worker-machine-count", "1"])
        .arg("--kubeconfig")
        .arg(plane.kubeconfig_path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .context("clusterctl generate cluster timed out")??;
    anyhow::ensure!(
        out.status.success(),
        "clusterctl generate cluster failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[tokio::test]
async fn capkk_v3_cluster_template_rendered_with_the_capi_book_environment_is_accepted() -> anyhow::Result<()>
{
    let client = common::client().await?;
    common::install_capkk_crds(&client).await?;
    let ns = common::namespace(&client, "capkk-book").await?;
    let template = capkk_mgmt::repo_root().join("test/fixtures/capkk/cluster-template-v3.1.12.yaml");
    let rendered = clusterctl_render(&template, "capkk-book", &ns).await?;
    let docs = capkk_mgmt::parse_yaml_docs(&rendered, "clusterctl generate cluster")?;
    let kinds: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| k.starts_with("KK")).count(),
        3,
        "KKCluster + 2 KKMachineTemplates in {kinds:?}"
    );
    for mut doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        doc["metadata"]["namespace"] = json!(ns);
        common::create(&client, &ns, doc)
            .await
            .with_context(|| format!("the apiserver rejected CAPKK's {kind}"))?;
    }
    // The KKCluster as stored: hosts without names stay without names (the spec is not rewritten), the
    // controller's view derives them from the addresses, and the global auth got CAPKK's defaults.
    let api = api_for(&client, &ns, "KKCluster").await;
    let stored = api.get("capkk-book").await?;
    let instances = stored.data["spec"]["nodes"]["instances"]
        .as_array()
        .context("spec.nodes.instances")?;
    let addresses: Vec<&str> = instances.iter().filter_map(|h| h["address"].as_str()).collect();
    assert_eq!(addresses, ["192.168.100.3", "192.168.100.4"]);
    for h in instances {
        assert!(
            h.get("name").is_none() && h.get("auth").is_none(),
            "no name and no per-host auth is written into the stored spec: {h}"
        );
    }
    let kkc: capkk_api::KKCluster = serde_json::from_value(serde_json::to_value(&stored)?)?;
    let names: Vec<String> = kkc.spec.nodes.instances.iter().map(|h| h.host_name()).collect();
    assert_eq!(names, ["192-168-100-3", "192-168-100-4"]);
    let auth = &kkc.spec.nodes.auth;
    assert_eq!(auth.user.as_deref(), Some("ubuntu"));
    assert_eq!(auth.port, Some(22), "schema default on the global auth");
    assert_eq!(
        auth.timeout, None,
        "no timeout default: the manager's --ssh-connect-timeout (30 s, CAPKK's default) applies"
    );
    assert_eq!(
        kkc.spec.component.as_ref().and_then(|c| c.zone.as_deref()),
        Some("")
    );
    Ok(())
}

/// A KKCluster as `kubectl get kkcluster -o yaml` prints it from a CAPKK v3 cluster: the webhook's defaults
/// (random host names, internalAddress/arch/roles, global auth with the timeout in nanoseconds), `auth: {}` on
/// every host (Go marshals the non-pointer struct), the zero `controlPlaneEndpoint`, the `registry` with its
/// zero-valued fields, and a status.
fn capkk_exported_kkcluster(name: &str) -> Value {
    json!({
        "apiVersion": GROUP_VERSION,
        "kind": "KKCluster",
        "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": name}},
        "spec": {
            "distribution": "kubernetes",
            "component": {"zone": "cn", "overrides": [{"id": "kubeadm", "version": "v1.24.0", "checksum": {}}]},
            "controlPlaneEndpoint": {"host": "", "port": 0},
            "controlPlaneLoadBalancer": {"host": "192.168.100.100"},
            "nodes": {
                "auth": {"user": "ubuntu", "password": "Qcloud@123", "port": 22, "timeout": 30_000_000_000_i64},
                "instances": [
                    {"name": "kk-instance-x7k2p", "address": "192.168.100.3", "internalAddress": "192.168.100.3",
                     "arch": "amd64", "roles": ["control-plane", "worker"], "auth": {}},
                    {"name": "kk-instance-q9m4d", "address": "192.168.100.4", "internalAddress": "192.168.100.4",
                     "arch": "amd64", "roles": ["control-plane", "worker"], "auth": {}}
                ]
            },
            "registry": {
                "apiVersion": "", "kind": "",
                "privateRegistry": "", "namespaceOverride": "",
                "auth": {"username": "", "password": "", "insecureSkipVerify": false, "plainHTTP": false, "certsPath": ""}
            }
        },
        "status": {"ready": true, "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
    })
}

#[tokio::test]
async fn a_capkk_exported_kkcluster_with_empty_host_auth_round_trips_and_keeps_the_global_user()
-> anyhow::Result<()> {
    let client = common::client().await?;
    common::install_capkk_crds(&client).await?;
    let ns = common::namespace(&client, "capkk-export").await?;
    let mut sent = capkk_exported_kkcluster("exported");
    sent["metadata"]["namespace"] = json!(ns);
    common::create(&client, &ns, sent.clone())
        .await
        .context("the apiserver rejected a CAPKK-exported KKCluster")?;
    let api = api_for(&client, &ns, "KKCluster").await;
    let stored = api.get("exported").await?;
    assert_eq!(
        stored.data["spec"]["nodes"]["instances"], sent["spec"]["nodes"]["instances"],
        "every host keeps `auth: {{}}` exactly: no per-host default (user: root) is injected"
    );
    assert_eq!(
        stored.data["spec"]["registry"], sent["spec"]["registry"],
        "registry TypeMeta accepted"
    );
    assert_eq!(
        stored.data["spec"]["nodes"]["auth"],
        sent["spec"]["nodes"]["auth"]
    );
    // The controller's typed view reads it (the nanosecond timeout does not fit a 32-bit IntOrString) and the
    // per-host merge keeps the global user.
    let kkc: capkk_api::KKCluster = serde_json::from_value(serde_json::to_value(&stored)?)?;
    for h in &kkc.spec.nodes.instances {
        let merged = h
            .auth
            .clone()
            .unwrap_or_default()
            .merged_over(&kkc.spec.nodes.auth);
        assert_eq!(merged.user_or_default(), "ubuntu", "{}", h.host_name());
        assert_eq!(merged.password.as_deref(), Some("Qcloud@123"));
    }
    assert_eq!(kkc.spec.nodes.auth.timeout_seconds(), Some(30));
    // Round trip: the object read back and written again is unchanged (same generation, same spec).
    let generation = stored.metadata.generation;
    let again = api.replace("exported", &PostParams::default(), &stored).await?;
    assert_eq!(
        again.metadata.generation, generation,
        "a re-apply of the read object changes nothing"
    );
    assert_eq!(again.data["spec"], stored.data["spec"]);
    // The typed object serialized back is accepted too (what the controller would write in a patch).
    let typed = serde_json::to_value(&kkc)?;
    assert_eq!(typed["spec"]["nodes"]["instances"][0]["auth"], json!({}));
    assert_eq!(
        typed["spec"]["nodes"]["auth"]["timeout"],
        json!(30_000_000_000_i64)
    );

    // A CAPKK-defaulted KKMachineTemplate (containerd 1.6.4, crictl v1.24.0) is accepted as is.
    let kkmt = json!({
        "apiVersion": GROUP_VERSION, "kind": "KKMachineTemplate",
        "metadata": {"name": "exported-md-0", "namespace": ns},
        "spec": {"template": {"spec": {
            "roles": ["worker"],
            "containerManager": {"type": "containerd", "version": "1.6.4", "criSocket": "unix:///var/run/containerd/containerd.sock", "crictlVersion": "v1.24.0"},
            "repository": {"iso": "none", "update": false}
        }}}
    });
    let stored = common::create(&client, &ns, kkmt.clone()).await?;
    assert_eq!(
        stored.data["spec"]["template"]["spec"]["containerManager"],
        kkmt["spec"]["template"]["spec"]["containerManager"]
    );
    Ok(())
}

/// Issue 41: `--flavor ha` (templates/cluster-template-ha.yaml) rendered by the real clusterctl with only the VIP
/// given is accepted by the apiserver: the KKCluster asks the provider to serve the endpoint (Keepalived, haproxy
/// on 8443) and the optional variables' `null` defaults leave their fields unset for the controller.
#[tokio::test]
async fn the_ha_flavor_renders_a_keepalived_endpoint_the_apiserver_accepts() -> anyhow::Result<()> {
    let client = common::client().await?;
    common::install_capkk_crds(&client).await?;
    let ns = common::namespace(&client, "ha-flavor").await?;
    let template = capkk_mgmt::repo_root().join("templates/cluster-template-ha.yaml");
    let env = [
        (
            "KUBEKEY_INSTANCES",
            "[{name: cp-1, address: 198.18.5.11, roles: [control-plane]}, {name: cp-2, address: 198.18.5.12, roles: [control-plane]}, {name: cp-3, address: 198.18.5.13, roles: [control-plane]}, {name: w-1, address: 198.18.5.21, roles: [worker]}]",
        ),
        ("CONTROL_PLANE_VIP", "198.18.5.200"),
    ];
    let rendered = clusterctl_render_with(&template, "ha", &ns, &env, 3).await?;
    let docs = capkk_mgmt::parse_yaml_docs(&rendered, "clusterctl generate cluster --flavor ha")?;
    for mut doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        if kind == "KubeadmControlPlane" {
            assert_eq!(doc["spec"]["replicas"], 3, "--control-plane-machine-count");
        }
        doc["metadata"]["namespace"] = json!(ns);
        common::create(&client, &ns, doc)
            .await
            .with_context(|| format!("the apiserver rejected the ha flavor's {kind}"))?;
    }
    let stored = api_for(&client, &ns, "KKCluster").await.get("ha").await?;
    let kkc: capkk_api::KKCluster = serde_json::from_value(serde_json::to_value(&stored)?)?;
    // The optional variables' `null` is stored as null (the fields are nullable) and read as unset.
    assert_eq!(
        kkc.spec.control_plane_load_balancer,
        Some(capkk_api::LoadBalancer {
            host: Some("198.18.5.200".into()),
            type_: Some("Keepalived".into()),
            port: Some(8443),
            interface: None,
            virtual_router_id: None,
        }),
        "as stored: {}",
        stored.data["spec"]["controlPlaneLoadBalancer"]
    );
    Ok(())
}
