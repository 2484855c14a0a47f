//! Workload clusters: one cached client per Cluster (built from the `<cluster>-kubeconfig` Secret, rebuilt
//! when the Secret changes) and a watch on its Nodes that wakes the KKMachine whose Node just registered, so
//! the providerID is patched when the Node appears instead of on a poll.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::{
    Api, Client, ResourceExt,
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{WatchStreamExt, reflector::ObjectRef, watcher},
};
use tracing::{debug, info};

use capkk_api::{KKMachine, consts::CLUSTER_NAME_LABEL};

use crate::error::{Error, Result};

/// Bound on connecting to a workload cluster's API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one read from a workload cluster's API server (a watch's long poll is bounded by its own
/// server-side timeout, below this).
const READ_TIMEOUT: Duration = Duration::from_secs(295);

/// Wakes the KKMachines a Node event concerns.
pub type Wake = Arc<dyn Fn(&Node) + Send + Sync>;

struct Entry {
    /// `resourceVersion` of the kubeconfig Secret the client was built from.
    version: String,
    client: Client,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

/// Cached workload clients and their Node watches, by `(namespace, cluster)`.
#[derive(Default)]
pub struct WorkloadClients {
    entries: Mutex<HashMap<(String, String), Entry>>,
}

impl WorkloadClients {
    /// The client of workload cluster `cluster` in `ns`; `None` while its kubeconfig Secret does not exist.
    /// Built once per Secret version; building it starts a Node watch that calls `wake` for every Node
    /// event.
    pub async fn client(&self, mgmt: &Client, ns: &str, cluster: &str, wake: Wake) -> Result<Option<Client>> {
        let name = format!("{cluster}-kubeconfig");
        let secrets: Api<Secret> = Api::namespaced(mgmt.clone(), ns);
        let Some(secret) = secrets
            .get_opt(&name)
            .await
            .map_err(Error::kube(format!("get Secret {ns}/{name}")))?
        else {
            self.forget(ns, cluster);
            return Ok(None);
        };
        let version = secret.resource_version().unwrap_or_default();
        let key = (ns.to_owned(), cluster.to_owned());
        if let Some(e) = self.entries.lock().ok().and_then(|m| {
            m.get(&key)
                .filter(|e| e.version == version && !e.watch.is_finished())
                .map(|e| e.client.clone())
        }) {
            return Ok(Some(e));
        }
        let client = build_client(cluster, &secret).await?;
        info!(%ns, %cluster, "Watching the workload cluster's Nodes");
        let watch = tokio::spawn(watch_nodes(client.clone(), cluster.to_owned(), wake));
        if let Ok(mut m) = self.entries.lock() {
            m.insert(
                key,
                Entry {
                    version,
                    client: client.clone(),
                    watch,
                },
            );
        }
        Ok(Some(client))
    }

    /// Drop the client and stop the watch of `cluster` (its kubeconfig is gone, the cluster is deleted).
    pub fn forget(&self, ns: &str, cluster: &str) {
        if let Ok(mut m) = self.entries.lock()
            && m.remove(&(ns.to_owned(), cluster.to_owned())).is_some()
        {
            debug!(%ns, %cluster, "Stopped watching the workload cluster");
        }
    }

    /// Number of cached clients (each with one Node watch).
    pub fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// True when no client is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

async fn build_client(cluster: &str, secret: &Secret) -> Result<Client> {
    let werr = |m: String| Error::WorkloadCluster {
        cluster: cluster.to_owned(),
        message: m,
    };
    let name = secret.name_any();
    let Some(value) = secret.data.as_ref().and_then(|d| d.get("value")) else {
        return Err(werr(format!("Secret {name} has no key `value`")));
    };
    let text = String::from_utf8(value.0.clone())
        .map_err(|_| werr(format!("Secret {name} `value` is not UTF-8")))?;
    let kubeconfig = Kubeconfig::from_yaml(&text).map_err(|e| werr(format!("parsing kubeconfig: {e}")))?;
    crate::workload_kubeconfig::check(&kubeconfig).map_err(|e| werr(format!("Secret {name}: {e}")))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| werr(format!("kubeconfig: {e}")))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    Client::try_from(config).map_err(|e| werr(format!("client: {e}")))
}

/// Watch the Nodes (until aborted; an unreachable cluster is retried with backoff) and call `wake` for each
/// Node that appears or changes.
async fn watch_nodes(client: Client, cluster: String, wake: Wake) {
    let nodes: Api<Node> = Api::all(client);
    let mut events = watcher(nodes, watcher::Config::default().timeout(290))
        .default_backoff()
        .boxed();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => wake(&n),
            Ok(_) => {}
            Err(e) => debug!(%cluster, error = %e, "Workload Node watch failed; retrying"),
        }
    }
}

/// The KKMachines of `cluster` in `ns` a Node event concerns: the Node has no providerID yet and is named
/// after the KKMachine's host (the providerID `kk:///<kkcluster>/<host>` ends with the Node's name). A Node
/// registered under another name is matched by address on the KKMachine's next resync.
pub fn node_to_kkmachines(
    kkms: &[Arc<KKMachine>],
    ns: &str,
    cluster: &str,
    node: &Node,
) -> Vec<ObjectRef<KKMachine>> {
    if node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .is_some_and(|p| !p.is_empty())
    {
        return Vec::new();
    }
    let suffix = format!("/{}", node.name_any());
    kkms.iter()
        .filter(|m| {
            m.namespace().as_deref() == Some(ns)
                && m.labels().get(CLUSTER_NAME_LABEL).map(String::as_str) == Some(cluster)
                && m.spec
                    .provider_id
                    .as_deref()
                    .is_some_and(|p| p.ends_with(&suffix))
        })
        .map(|m| ObjectRef::from_obj(&**m))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kkm(name: &str, cluster: &str, pid: Option<&str>) -> Arc<KKMachine> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "KKMachine",
                "metadata": {"name": name, "namespace": "ns", "labels": {CLUSTER_NAME_LABEL: cluster}},
                "spec": {"providerID": pid},
            }))
            .unwrap(),
        )
    }

    fn node(name: &str, pid: Option<&str>) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"providerID": pid},
        }))
        .unwrap()
    }

    #[test]
    fn a_new_node_wakes_only_the_kkmachine_of_its_host_in_its_cluster() {
        let kkms = [
            kkm("a", "c1", Some("kk:///c1/node1")),
            kkm("b", "c1", Some("kk:///c1/node2")),
            kkm("c", "c2", Some("kk:///c2/node1")),
            kkm("d", "c1", None),
            kkm("e", "c1", Some("kk:///c1/xnode1")),
        ];
        let woken: Vec<String> = node_to_kkmachines(&kkms, "ns", "c1", &node("node1", None))
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(woken, ["a"]);
        assert!(node_to_kkmachines(&kkms, "other", "c1", &node("node1", None)).is_empty());
    }

    #[test]
    fn a_node_that_already_carries_a_provider_id_wakes_nobody() {
        let kkms = [kkm("a", "c1", Some("kk:///c1/node1"))];
        assert!(node_to_kkmachines(&kkms, "ns", "c1", &node("node1", Some("kk:///c1/node1"))).is_empty());
    }

    fn kubeconfig_secret(version: &str, server: &str) -> Secret {
        let kc = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: w\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: w\n  context:\n    cluster: w\n    user: u\ncurrent-context: w\n"
        );
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "w-kubeconfig", "namespace": "ns", "resourceVersion": version},
            "data": {"value": k8s_openapi::ByteString(kc.into_bytes())},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_kubeconfig_with_an_exec_plugin_is_refused_and_a_plain_one_builds_a_client() {
        assert!(
            build_client("w", &kubeconfig_secret("1", "https://198.18.0.1:6443"))
                .await
                .is_ok()
        );
        let mut s = kubeconfig_secret("1", "https://198.18.0.1:6443");
        let text = String::from_utf8(s.data.as_ref().unwrap()["value"].0.clone()).unwrap();
        let exec = text.replace(
            "    token: t\n",
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n",
        );
        s.data
            .as_mut()
            .unwrap()
            .insert("value".into(), k8s_openapi::ByteString(exec.into_bytes()));
        assert!(matches!(
            build_client("w", &s).await,
            Err(Error::WorkloadCluster { .. })
        ));
    }
}
