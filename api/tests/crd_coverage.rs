//! Every string field of the generated CRDs (config/crd/bases) is bounded at admission: it has a `pattern`,
//! an `enum`, a `format` or a `maxLength`. A tenant's string reaches a path, a request, a host file or a
//! script; an unbounded one is an admission gap. A new field without a bound fails here until it gets one
//! (or, when it is truly free text nobody renders, an entry in [`FREE_TEXT`] saying why).

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

/// Strings that may stay unbounded, by path in any kind (list items as `[]`, map values as `{}`). None is read
/// back into a path, a request, a host file or a script.
const FREE_TEXT: &[&str] = &[
    // Controller-written status (conditions, probes, journal, host facts, progress, the Node reference):
    // a length bound here would make the controller's own status write fail, and nothing renders them.
    "status.conditions[].message",
    "status.conditions[].reason",
    "status.conditions[].status",
    "status.conditions[].type",
    "status.failureDomains[].attributes{}",
    "status.failureDomains[].name",
    "status.hostInfo.arch",
    "status.hostInfo.initSystem",
    "status.hostInfo.os",
    "status.hostInfo.osVersion",
    "status.hosts[].arch",
    "status.hosts[].hostKey",
    "status.hosts[].message",
    "status.hosts[].name",
    "status.hosts[].os",
    "status.journal[].name",
    "status.journal[].outputTail",
    "status.journal[].phase",
    "status.nodeRef.apiVersion",
    "status.nodeRef.fieldPath",
    "status.nodeRef.kind",
    "status.nodeRef.name",
    "status.nodeRef.namespace",
    "status.nodeRef.resourceVersion",
    "status.nodeRef.uid",
    "status.step",
    // The resolved component versions (KKMachine): each is a spec value the CRD already validated or a value
    // of the defaults table; a bound here could only make the controller's own status write fail.
    "status.components.containerd",
    "status.components.crictl",
    "status.components.defaulted[]",
    "status.components.kubernetesVersion",
    "status.components.runc",
    "status.components.sandboxImage",
    // Written by the controller when a reset fails (an error text); shown to people, never rendered.
    "spec.quarantine.reason",
    // Autoscale-from-zero hints (Quantities) read by the autoscaler, not by capkk-rs.
    "status.capacity{}",
    // Template metadata: copied onto created objects, where the apiserver validates labels and annotations.
    "spec.template.metadata.annotations{}",
    "spec.template.metadata.labels{}",
];

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/crd/bases")
}

/// Every CRD file under config/crd/bases, parsed (one document per file).
fn crds() -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(crd_dir())
        .expect("config/crd/bases")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no CRD under {}", crd_dir().display());
    files
        .iter()
        .map(|f| serde_saphyr::from_str(&std::fs::read_to_string(f).unwrap()).unwrap())
        .collect()
}

fn bounded(schema: &Value) -> bool {
    ["pattern", "enum", "format", "maxLength"]
        .iter()
        .any(|k| schema.get(k).is_some())
}

/// The `(kind, path)` of every unbounded string under `schema`.
fn unbounded(kind: &str, path: &str, schema: &Value, out: &mut BTreeSet<(String, String)>) {
    let is_string = schema["type"] == "string" || schema["x-kubernetes-int-or-string"] == true;
    if is_string && !bounded(schema) {
        out.insert((kind.to_owned(), path.to_owned()));
    }
    if let Some(props) = schema["properties"].as_object() {
        for (k, p) in props {
            let sub = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            unbounded(kind, &sub, p, out);
        }
    }
    if schema["items"].is_object() {
        unbounded(kind, &format!("{path}[]"), &schema["items"], out);
    }
    if schema["additionalProperties"].is_object() {
        unbounded(kind, &format!("{path}{{}}"), &schema["additionalProperties"], out);
    }
}

fn storage_schema(crd: &Value) -> &Value {
    crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .map_or(&Value::Null, |v| &v["schema"]["openAPIV3Schema"])
}

#[test]
fn every_string_field_of_the_crds_has_a_pattern_an_enum_a_format_or_a_max_length() {
    let mut found = BTreeSet::new();
    let mut strings = 0;
    for crd in crds() {
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut all = BTreeSet::new();
        count_strings(storage_schema(&crd), &mut strings);
        unbounded(&kind, "", storage_schema(&crd), &mut all);
        found.extend(all);
    }
    assert!(
        strings > 50,
        "the walk found only {strings} string fields: is the schema empty?"
    );
    let missing: Vec<String> = found
        .iter()
        .filter(|(_, path)| !FREE_TEXT.contains(&path.as_str()))
        .map(|(kind, path)| format!("{kind}: {path}"))
        .collect();
    let stale: Vec<&&str> = FREE_TEXT
        .iter()
        .filter(|f| !found.iter().any(|(_, path)| path == *f))
        .collect();
    assert!(
        missing.is_empty(),
        "string fields without a pattern, enum, format or maxLength (bound them in api/src and run \
         `make crds`, or list them in FREE_TEXT with the reason):\n{}",
        missing.join("\n")
    );
    assert!(
        stale.is_empty(),
        "FREE_TEXT entries that are bounded or gone: {stale:#?}"
    );
}

fn count_strings(schema: &Value, n: &mut usize) {
    if schema["type"] == "string" {
        *n += 1;
    }
    if let Some(props) = schema["properties"].as_object() {
        props.values().for_each(|p| count_strings(p, n));
    }
    for k in ["items", "additionalProperties"] {
        if schema[k].is_object() {
            count_strings(&schema[k], n);
        }
    }
}
