//! Secret → KKInstance: a change of a Secret a KKInstance reads (SSH credentials of the host or its bastion,
//! registry credentials, bootstrap data) wakes that KKInstance instead of leaving it to a timer.
//!
//! The manager never lists or watches Secrets: it reads the metadata (resourceVersion, never the data) of
//! each Secret a KKInstance names, by name, every `--secret-poll-interval` ([`poll`]); the data is read by name
//! when used. So the ClusterRole grants `get` on Secrets and no `list`/`watch` (config/rbac/role.yaml), and a
//! Secret no KKInstance names is never requested (docs/security.md has the cost and the trade-off).
//!
//! What a change does to each KKInstance that references the Secret:
//! - a pending retry after a transient failure is due at once (the input it waited for may be there now);
//! - a terminal `CredentialsUnavailable` failure (a referenced Secret was missing or lacked its keys) is
//!   retried as if the retry annotation had been set: the changed Secret is the fix that failure asked for.
//!   Every other terminal failure still waits for the retry annotation.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use capkk_api::{
    Auth,
    consts::{FAILED_ANNOTATION, RETRY_ANNOTATION, reasons},
    kkcluster::KKCluster,
    kkinstance::KKInstance,
};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt, runtime::reflector::ObjectRef};
use tracing::{debug, info, warn};

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
    // A name that is no object name is never requested (its reader reports the field instead).
    names
        .into_iter()
        .filter(|n| capkk_api::is_dns_subdomain(n))
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

/// What the last metadata read of a Secret found: its resourceVersion, or `None` when it did not exist.
type Seen = HashMap<(String, String), Option<String>>;

/// What a read of a Secret means for its readers.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    /// Read before with the same result, or gone (a deleted Secret fixes nothing).
    None,
    /// Read for the first time, and it exists: only the readers still waiting for it are woken, those failed
    /// for want of credentials or with a retry pending after a transient failure (either may have failed a
    /// moment before the Secret was created); every other reader reconciled at start.
    First,
    /// Created after a read found it missing, or updated.
    Changed,
}

/// Records the result of a read of `key` (`rv` is `None` when the Secret does not exist) and says what it
/// changed.
fn observe(seen: &mut Seen, key: (String, String), rv: Option<String>) -> Change {
    match seen.insert(key, rv.clone()) {
        None if rv.is_some() => Change::First,
        None => Change::None,
        Some(old) if rv.is_some() && old != rv => Change::Changed,
        Some(_) => Change::None,
    }
}

/// The Secrets (namespace, name) the known KKInstances read, each once.
fn referenced_now(ctx: &Context) -> BTreeSet<(String, String)> {
    let clusters = ctx.stores.clusters.clone();
    let mut keys = BTreeSet::new();
    for inst in ctx.stores.instances.state() {
        let ns = inst.namespace().unwrap_or_default();
        let kkc = inst
            .spec
            .cluster_name
            .as_deref()
            .and_then(|c| clusters.get(&ObjectRef::new(c).within(&ns)));
        for name in referenced(&inst, kkc.as_deref()) {
            keys.insert((ns.clone(), name));
        }
    }
    keys
}

/// Checks the Secrets the KKInstances read, by name, until the manager stops: every `interval` one
/// metadata-only GET per referenced Secret (spread over the interval), and a changed resourceVersion wakes
/// its readers.
///
/// The manager neither lists nor watches Secrets: RBAC cannot narrow `list`/`watch` to some Secrets (a label
/// selector is not part of the authorization), so a watch, even a label-selected one, needs read access to
/// every Secret in scope. With `get` only, a Secret no KKInstance names is never requested.
pub(crate) async fn poll(client: Client, ctx: Arc<Context>, interval: Duration) {
    let mut seen = Seen::new();
    loop {
        let keys = referenced_now(&ctx);
        seen.retain(|k, _| keys.contains(k));
        if keys.is_empty() {
            tokio::time::sleep(interval).await;
            continue;
        }
        let gap = interval / u32::try_from(keys.len()).unwrap_or(u32::MAX);
        for (ns, name) in keys {
            let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
            match api.get_metadata_opt(&name).await {
                Ok(meta) => {
                    let rv = meta.map(|m| m.resource_version().unwrap_or_default());
                    debug!(secret = %name, namespace = %ns, resource_version = ?rv, "Secret read (metadata)");
                    match observe(&mut seen, (ns.clone(), name.clone()), rv) {
                        Change::None => {}
                        Change::First => wake(&ctx, &ns, &name, true).await,
                        Change::Changed => {
                            info!(secret = %name, namespace = %ns, "Secret changed: waking the KKInstances that read it");
                            wake(&ctx, &ns, &name, false).await;
                        }
                    }
                }
                // Read again next round; the Secret's readers report their own read errors.
                Err(e) => {
                    debug!(secret = %name, namespace = %ns, error = %e, "reading a Secret's metadata failed")
                }
            }
            tokio::time::sleep(gap).await;
        }
    }
}

/// Whether a reader of a Secret is woken: on any change, yes; on the first read of the Secret, only a reader
/// still waiting for it (host work failed for want of credentials, or a retry pending after a transient
/// failure), so that the first round after a start does not reconcile every KKInstance again.
fn wakes(first_read: bool, credentials_failed: bool, retry_pending: bool) -> bool {
    !first_read || credentials_failed || retry_pending
}

/// Wakes the KKInstances that read `ns/name` (see the module docs for what that does); on the `first_read`
/// of the Secret, only those still waiting for it ([`wakes`]).
async fn wake(ctx: &Arc<Context>, ns: &str, name: &str, first_read: bool) {
    let instances = ctx.stores.instances.state();
    let clusters = ctx.stores.clusters.clone();
    let hits = referencing(ns, name, &instances, |c| {
        clusters.get(&ObjectRef::new(c).within(ns))
    });
    for inst in hits {
        let credentials_failed = inst.annotations().get(FAILED_ANNOTATION).map(String::as_str)
            == Some(reasons::CREDENTIALS_UNAVAILABLE);
        let uid = inst.uid().unwrap_or_default();
        if !wakes(first_read, credentials_failed, ctx.tasks.retry(&uid).is_some()) {
            continue;
        }
        ctx.tasks.retry_now(&uid);
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

    fn key(name: &str) -> (String, String) {
        ("ns".into(), name.into())
    }

    #[test]
    fn the_first_read_of_a_secret_wakes_only_the_readers_still_waiting_for_it_and_a_change_wakes_all() {
        assert!(wakes(true, true, false), "failed for want of credentials");
        assert!(
            wakes(true, false, true),
            "a retry pending after a transient failure"
        );
        assert!(
            !wakes(true, false, false),
            "nothing to wait for: reconciled at start"
        );
        assert!(wakes(false, false, false), "changed: every reader");
    }

    #[test]
    fn the_first_read_of_a_secret_is_told_apart_from_a_change_and_each_change_counts_once() {
        let mut seen = Seen::new();
        let rv = |v: &str| Some(v.to_owned());
        assert_eq!(observe(&mut seen, key("a"), rv("1")), Change::First);
        assert_eq!(
            observe(&mut seen, key("a"), rv("1")),
            Change::None,
            "same version"
        );
        assert_eq!(observe(&mut seen, key("a"), rv("2")), Change::Changed, "updated");
        assert_eq!(observe(&mut seen, key("b"), None), Change::None, "missing");
        assert_eq!(
            observe(&mut seen, key("b"), rv("5")),
            Change::Changed,
            "created after a read found it missing"
        );
        assert_eq!(
            observe(&mut seen, key("a"), None),
            Change::None,
            "deleted: nothing to retry"
        );
        assert_eq!(
            observe(&mut seen, key("a"), rv("7")),
            Change::Changed,
            "created again"
        );
    }
}
