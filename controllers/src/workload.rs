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
/// Bound on one read or write of a plain request (GET, LIST, PATCH) to a workload cluster's API server.
/// A stuck request fails after this and the reconcile retries, instead of holding a KKMachine's
/// providerID step for the Node watch's ~5 min. Why 30 s: CAPI's own workload clients give up after 10 s,
/// and kubeadm's fixed 10 s failed against a loaded control plane on emulated (TCG) VMs that still served
/// everything within seconds to tens of seconds; 30 s keeps such a slow but working API server usable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Server-side bound on the Node watch's long poll, in seconds.
const WATCH_TIMEOUT_SECS: u32 = 290;
/// Bound on one read of the Node watch: longer than its long poll, so a quiet watch is not cut short.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 5);

/// Wakes the KKMachines a Node event concerns.
pub(crate) type Wake = Arc<dyn Fn(&Node) + Send + Sync>;

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
pub(crate) struct WorkloadClients {
    entries: Mutex<HashMap<(String, String), Entry>>,
}

impl WorkloadClients {
    /// The client of workload cluster `cluster` in `ns`; `None` while its kubeconfig Secret does not exist.
    /// Built once per Secret version; building it starts a Node watch that calls `wake` for every Node
    /// event.
    pub(crate) async fn client(
        &self,
        mgmt: &Client,
        ns: &str,
        cluster: &str,
        wake: Wake,
    ) -> Result<Option<Client>> {
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
        let Clients {
            requests: client,
            watch,
        } = build_clients(cluster, &secret).await?;
        info!(%ns, %cluster, "Watching the workload cluster's Nodes");
        let watch = tokio::spawn(watch_nodes(watch, cluster.to_owned(), wake));
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
    pub(crate) fn forget(&self, ns: &str, cluster: &str) {
        if let Ok(mut m) = self.entries.lock()
            && m.remove(&(ns.to_owned(), cluster.to_owned())).is_some()
        {
            debug!(%ns, %cluster, "Stopped watching the workload cluster");
        }
    }
}

/// The two clients of one workload cluster, from the same kubeconfig: they differ only in how long a read
/// may wait.
struct Clients {
    /// For plain requests: bounded by [`REQUEST_TIMEOUT`].
    requests: Client,
    /// For the Node watch: its long poll is answered only when a Node changes or the poll ends.
    watch: Client,
}

async fn build_clients(cluster: &str, secret: &Secret) -> Result<Clients> {
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
    let mut watch_config = config.clone();
    watch_config.read_timeout = Some(WATCH_READ_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.write_timeout = Some(REQUEST_TIMEOUT);
    // Count the read timeout from when the request is sent, not from when its pooled connection went idle
    // (which would fail a request handed a connection that sat idle for almost 30 s).
    config.reset_reader_on_write = true;
    // The tenant's API server answers: its responses are bounded (crate::bounded_body).
    let build = |c: kube::Config| {
        kube::client::ClientBuilder::try_from(c)
            .map(|b| {
                b.with_layer(&crate::bounded_body::limit_layer(
                    crate::bounded_body::WORKLOAD_MAX_RESPONSE_BYTES,
                ))
                .build()
            })
            .map_err(|e| werr(format!("client: {e}")))
    };
    Ok(Clients {
        requests: build(config)?,
        watch: build(watch_config)?,
    })
}

/// Watch the Nodes (until aborted; an unreachable cluster is retried with backoff) and call `wake` for each
/// Node that appears or changes.
async fn watch_nodes(client: Client, cluster: String, wake: Wake) {
    let nodes: Api<Node> = Api::all(client);
    let mut events = watcher(nodes, watcher::Config::default().timeout(WATCH_TIMEOUT_SECS))
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
pub(crate) fn node_to_kkmachines(
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
            build_clients("w", &kubeconfig_secret("1", "https://198.18.0.1:6443"))
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
            build_clients("w", &s).await,
            Err(Error::WorkloadCluster { .. })
        ));
    }

    #[tokio::test]
    async fn both_workload_clients_refuse_a_nodelist_over_the_response_cap_instead_of_reading_it() {
        // A valid NodeList just over the cap (Nodes of about 1 KiB): read whole, it would decode fine, so
        // only the bound on the clients this module builds can refuse it.
        let nodes = crate::bounded_body::WORKLOAD_MAX_RESPONSE_BYTES / 1000 + 1024;
        let (server, _) = crate::bounded_body::tests::huge_nodelist_server(nodes).await;
        let Clients { requests, watch } = build_clients("w", &kubeconfig_secret("1", &server))
            .await
            .unwrap();
        for (which, client) in [("requests", requests), ("watch", watch)] {
            let err = Api::<Node>::all(client)
                .list(&Default::default())
                .await
                .map(|l| l.items.len())
                .expect_err(which);
            let text = err.to_string();
            assert!(
                text.contains(&format!(
                    "larger than {} bytes",
                    crate::bounded_body::WORKLOAD_MAX_RESPONSE_BYTES
                )),
                "{which}: {text}"
            );
        }
    }

    /// GETs a Node through `client` from an API server that accepts the connection and never answers;
    /// returns the error and the time it took on tokio's paused clock (which jumps to the next timer
    /// whenever nothing can run: the timeouts decide the result, never the machine's speed).
    async fn get_from_a_silent_server(
        client: Client,
        listener: &tokio::net::TcpListener,
    ) -> (kube::Error, Duration) {
        let start = tokio::time::Instant::now();
        let get = tokio::spawn(async move { Api::<Node>::all(client).get("n").await });
        // Keep the runtime busy until the connection is up: a paused clock must not jump over the connect
        // timeout while the kernel completes the handshake.
        let (_conn, _) = loop {
            tokio::select! {
                biased;
                accepted = listener.accept() => break accepted.unwrap(),
                () = tokio::task::yield_now() => {}
            }
        };
        let err = get
            .await
            .unwrap()
            .expect_err("a server that never answers yields no Node");
        (err, start.elapsed())
    }

    fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
        let mut cause = Some(e);
        while let Some(c) = cause {
            if c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            {
                return true;
            }
            cause = c.source();
        }
        false
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_the_workload_api_server_never_answers_fails_before_a_quiet_node_watch_would_end() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = format!("http://{}", listener.local_addr().unwrap());
        let Clients { requests, watch } = build_clients("w", &kubeconfig_secret("1", &server))
            .await
            .unwrap();
        let long_poll = Duration::from_secs(WATCH_TIMEOUT_SECS.into());

        let (err, waited) = get_from_a_silent_server(requests, &listener).await;
        assert!(timed_out(&err), "expected a read timeout, got {err:?}");
        assert!(
            waited < long_poll,
            "a plain request waited {waited:?}, as long as the Node watch's long poll ({long_poll:?})"
        );

        let (err, waited) = get_from_a_silent_server(watch, &listener).await;
        assert!(timed_out(&err), "expected a read timeout, got {err:?}");
        assert!(
            waited > long_poll,
            "the Node watch's client gave up after {waited:?}, before its long poll ({long_poll:?}) ends"
        );
    }
}
