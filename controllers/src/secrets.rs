//! Secret → KKInstance: a change of a Secret a KKInstance reads (SSH credentials of the host or its bastion,
//! registry credentials, bootstrap data) wakes that KKInstance instead of leaving it to a timer.
//!
//! The watch is metadata-only (`PartialObjectMeta<Secret>`: names and resourceVersions, never the data), so
//! the manager's memory does not grow with the Secrets of the namespace; the data is still read by name when
//! used. It needs `list` and `watch` on Secrets (config/rbac/role.yaml; docs/security.md says what that grants).
//!
//! What a change does to each KKInstance that references the Secret:
//! - a pending retry after a transient failure is due at once (the input it waited for may be there now);
//! - a terminal `CredentialsUnavailable` failure (a referenced Secret was missing or lacked its keys) is
//!   retried as if the retry annotation had been set: the changed Secret is the fix that failure asked for.
//!   Every other terminal failure still waits for the retry annotation.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use capkk_api::{
    Auth,
    consts::{FAILED_ANNOTATION, RETRY_ANNOTATION, reasons},
    kkcluster::KKCluster,
    kkinstance::KKInstance,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, reflector::ObjectRef, watcher},
};
use tracing::{info, warn};

use crate::{context::Context, hosts, kkinstance::annotate};

fn auth_refs<'a>(auth: Option<&'a Auth>, out: &mut BTreeSet<&'a str>) {
    let Some(a) = auth else { return };
    if let Some(r) = a.secret_ref.as_ref() {
        out.insert(r.name.as_str());
    }
    if let Some(s) = a.secret.as_deref() {
        out.insert(s);
    }
}

/// The names of the Secrets (in its namespace) `inst` reads: its SSH credentials and its bastion's, resolved as
/// the host work resolves them ([`hosts::instance_auth_and_bastion`]), the KKCluster's registry credentials
/// and the bootstrap data.
pub(crate) fn referenced(inst: &KKInstance, kkc: Option<&KKCluster>) -> BTreeSet<String> {
    let (auth, bastion) = hosts::instance_auth_and_bastion(inst, kkc);
    let mut names = BTreeSet::new();
    auth_refs(auth.as_ref(), &mut names);
    auth_refs(bastion.as_ref().and_then(|b| b.auth.as_ref()), &mut names);
    if let Some(r) = kkc
        .and_then(|c| c.spec.registry.as_ref())
        .and_then(|r| r.auth.as_ref())
        .and_then(|a| a.secret_ref.as_ref())
    {
        names.insert(r.name.as_str());
    }
    if let Some(r) = inst.spec.bootstrap_data_secret_ref.as_ref() {
        names.insert(r.name.as_str());
    }
    names
        .into_iter()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The KKInstances among `instances` that read the Secret `ns/name`; `kkcluster` looks up a KKInstance's
/// KKCluster (`spec.clusterName`) in the same namespace.
pub(crate) fn referencing<'a>(
    ns: &str,
    name: &str,
    instances: &'a [Arc<KKInstance>],
    kkcluster: impl Fn(&str) -> Option<Arc<KKCluster>>,
) -> Vec<&'a Arc<KKInstance>> {
    instances
        .iter()
        .filter(|i| i.namespace().as_deref() == Some(ns))
        .filter(|i| {
            let kkc = i.spec.cluster_name.as_deref().and_then(&kkcluster);
            referenced(i, kkc.as_deref()).contains(name)
        })
        .collect()
}

/// Whether a watch event is a change worth acting on: a Secret seen before with another resourceVersion, or
/// one created after the initial list. The initial list itself only records versions (every KKInstance is
/// reconciled at start anyway), so a re-list does not retry anything by itself.
fn changed(
    seen: &mut HashMap<(String, String), String>,
    meta: &PartialObjectMeta<Secret>,
    initial: bool,
) -> bool {
    let key = (meta.namespace().unwrap_or_default(), meta.name_any());
    let rv = meta.resource_version().unwrap_or_default();
    match seen.insert(key, rv.clone()) {
        Some(old) => old != rv && !initial,
        None => !initial,
    }
}

/// Runs the metadata watch of Secrets (in `namespace`, or everywhere) until the manager stops.
pub(crate) async fn watch(client: Client, namespace: Option<String>, ctx: Arc<Context>) {
    // An Api of PartialObjectMeta makes metadata-only list and watch requests.
    let api: Api<PartialObjectMeta<Secret>> = match &namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let mut seen: HashMap<(String, String), String> = HashMap::new();
    let mut initial = false;
    let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
    loop {
        let event = match events.try_next().await {
            Ok(Some(e)) => e,
            Ok(None) => return,
            Err(e) => {
                warn!(error = %e, "Secret watch failed; it retries with backoff");
                continue;
            }
        };
        let meta = match event {
            watcher::Event::Init => {
                initial = true;
                continue;
            }
            watcher::Event::InitDone => {
                initial = false;
                continue;
            }
            watcher::Event::Delete(m) => {
                seen.remove(&(m.namespace().unwrap_or_default(), m.name_any()));
                continue;
            }
            watcher::Event::InitApply(m) | watcher::Event::Apply(m) => m,
        };
        if changed(&mut seen, &meta, initial) {
            wake(&ctx, &meta.namespace().unwrap_or_default(), &meta.name_any()).await;
        }
    }
}

/// Wakes the KKInstances that read `ns/name` (see the module docs for what that does).
async fn wake(ctx: &Arc<Context>, ns: &str, name: &str) {
    let instances = ctx.stores.instances.state();
    let clusters = ctx.stores.clusters.clone();
    let hits = referencing(ns, name, &instances, |c| {
        clusters.get(&ObjectRef::new(c).within(ns))
    });
    for inst in hits {
        let uid = inst.uid().unwrap_or_default();
        ctx.tasks.retry_now(&uid);
        let credentials_failed = inst.annotations().get(FAILED_ANNOTATION).map(String::as_str)
            == Some(reasons::CREDENTIALS_UNAVAILABLE);
        if credentials_failed && !inst.annotations().contains_key(RETRY_ANNOTATION) {
            info!(kkinstance = %inst.name_any(), secret = %name, "Secret changed: retrying the host work that found no credentials");
            let api: Api<KKInstance> = Api::namespaced(ctx.client.clone(), ns);
            let why = format!("Secret {name} changed");
            if let Err(e) = annotate(&api, &inst.name_any(), &[(RETRY_ANNOTATION, Some(why))]).await {
                warn!(kkinstance = %inst.name_any(), error = %e, "Setting the retry annotation failed");
            }
        }
        let _ = ctx
            .triggers
            .instances
            .unbounded_send(ObjectRef::from_obj(&**inst));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kkc(spec: serde_json::Value) -> KKCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "KKCluster",
            "metadata": {"name": "c", "namespace": "ns"}, "spec": spec
        }))
        .expect("KKCluster")
    }

    fn inst(spec: serde_json::Value) -> KKInstance {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "KKInstance",
            "metadata": {"name": "c.h1", "namespace": "ns"}, "spec": spec
        }))
        .expect("KKInstance")
    }

    fn names(s: BTreeSet<String>) -> Vec<String> {
        s.into_iter().collect()
    }

    #[test]
    fn a_kkinstance_reads_its_hosts_bastions_registrys_and_bootstrap_secrets_through_its_kkcluster() {
        let c = kkc(serde_json::json!({
            "nodes": {
                "auth": {"user": "root", "secretRef": {"name": "global-ssh"}},
                "bastion": {"address": "198.18.0.254", "auth": {"secretRef": {"name": "bastion-ssh"}}},
                "instances": [
                    {"name": "h1", "address": "198.18.0.11", "auth": {"secretRef": {"name": "h1-ssh"}}},
                    {"name": "h2", "address": "198.18.0.12"}
                ]
            },
            "registry": {"auth": {"secretRef": {"name": "registry"}}}
        }));
        let i = inst(serde_json::json!({
            "name": "h1", "address": "198.18.0.11", "clusterName": "c",
            "bootstrapDataSecretRef": {"name": "bd"}
        }));
        assert_eq!(
            names(referenced(&i, Some(&c))),
            ["bastion-ssh", "bd", "h1-ssh", "registry"]
        );
        // A host without its own auth inherits the global Secret.
        let i2 = inst(serde_json::json!({"name": "h2", "address": "198.18.0.12", "clusterName": "c"}));
        assert_eq!(
            names(referenced(&i2, Some(&c))),
            ["bastion-ssh", "global-ssh", "registry"]
        );
    }

    #[test]
    fn without_its_kkcluster_a_kkinstance_reads_the_references_it_carries() {
        let i = inst(serde_json::json!({
            "name": "h1", "address": "198.18.0.11", "clusterName": "gone",
            "auth": {"user": "root", "secretRef": {"name": "kept-ssh"}},
            "bastion": {"address": "198.18.0.254", "auth": {"secretRef": {"name": "kept-bastion"}}}
        }));
        assert_eq!(names(referenced(&i, None)), ["kept-bastion", "kept-ssh"]);
    }

    #[test]
    fn only_the_kkinstances_of_the_secrets_namespace_that_read_it_are_woken() {
        let c = Arc::new(kkc(serde_json::json!({
            "nodes": {"auth": {"user": "root", "secretRef": {"name": "ssh"}},
                      "instances": [{"name": "h1", "address": "198.18.0.11"}]}
        })));
        let mut other_ns =
            inst(serde_json::json!({"name": "h1", "address": "198.18.0.11", "clusterName": "c"}));
        other_ns.metadata.namespace = Some("elsewhere".into());
        let all = vec![
            Arc::new(inst(
                serde_json::json!({"name": "h1", "address": "198.18.0.11", "clusterName": "c"}),
            )),
            Arc::new(other_ns),
        ];
        let lookup = |n: &str| (n == "c").then(|| c.clone());
        assert_eq!(referencing("ns", "ssh", &all, lookup).len(), 1);
        assert!(referencing("ns", "unrelated", &all, lookup).is_empty());
    }

    fn meta(name: &str, rv: &str) -> PartialObjectMeta<Secret> {
        let mut m = PartialObjectMeta::<Secret>::default();
        m.metadata.name = Some(name.into());
        m.metadata.namespace = Some("ns".into());
        m.metadata.resource_version = Some(rv.into());
        m
    }

    #[test]
    fn the_initial_list_only_records_versions_and_later_changes_count_once() {
        let mut seen = HashMap::new();
        assert!(!changed(&mut seen, &meta("a", "1"), true), "initial list");
        assert!(!changed(&mut seen, &meta("a", "1"), false), "same version");
        assert!(changed(&mut seen, &meta("a", "2"), false), "updated");
        assert!(
            changed(&mut seen, &meta("b", "5"), false),
            "created after the list"
        );
        assert!(
            !changed(&mut seen, &meta("a", "3"), true),
            "a re-list retries nothing"
        );
    }
}
