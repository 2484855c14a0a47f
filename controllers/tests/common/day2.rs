//! Day-2 tests on sandbox hosts (upgrades, remediation): a workload cluster brought up by the real CAPI
//! controllers (KubeadmControlPlane + MachineDeployment) and the provider, with the kubeadm simulator
//! (test/kubeadm-sim) as kubeadm and a kubelet stand-in that reports its Node Ready with its own version, for
//! two Kubernetes releases published on the sandbox mirror, so that a host can move from one to the other.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, ensure};
use capkk_sandbox::Host;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::{Api, Client, config::Kubeconfig};
use serde_json::{Value, json};

use super::{sandbox::*, *};

/// The control plane's release: the management plane's kube-apiserver, which the simulator runs.
pub const NEW: &str = "v1.36.3";
/// The workers' release before the upgrade (one minor below).
pub const OLD: &str = "v1.35.2";

/// The kubeadm simulator of release `version` (`kubeadm version` answers it; join registers its Node with
/// it), etcd and kube-apiserver embedded; built by test/kubeadm-sim/build.sh (reused when unchanged).
pub fn kubeadm_simulator(bin_dir: &std::path::Path, version: &str) -> anyhow::Result<Vec<u8>> {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("kubeadm-sim-{version}/kubeadm"));
    let script = capkk_mgmt::repo_root().join("test/kubeadm-sim/build.sh");
    let status = std::process::Command::new("nice")
        .args(["-n", "10", "bash"])
        .arg(&script)
        .arg(&out)
        .arg(bin_dir)
        .arg(version)
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(
        status.success(),
        "{} failed ({status}): Go is needed",
        script.display()
    );
    Ok(std::fs::read(&out)?)
}

/// The kubelet stand-in of release `version`: answers `--version` as a kubelet does, and as a service runs the
/// simulator's status loop (`kubeadm kubelet`), which reports the Node Ready with this version.
pub fn kubelet_standin(version: &str) -> Vec<u8> {
    format!(
        "#!/bin/sh\n# capkk stand-in kubelet {version}\nif [ \"$1\" = --version ]; then echo 'Kubernetes {version}'; exit 0; fi\n\
         exec /usr/local/bin/kubeadm kubelet --kubelet-version {version} --interval 3s\n"
    )
    .into_bytes()
}

/// The sandbox hosts' `spec.component`: the stand-ins of [`publish_standins`], with kubeadm (the simulator),
/// kubelet ([`kubelet_standin`]) and kubectl published for each of `releases`, their overrides pinned per
/// version.
pub async fn publish_releases(env: &TestEnv, hosts: &Hosts, releases: &[&str]) -> anyhow::Result<Value> {
    let bin = capkk_mgmt::bin_dir().await?;
    let mut component = hosts.component.clone();
    let mut overrides: Vec<Value> = component["overrides"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|o| !["kubeadm", "kubelet", "kubectl"].contains(&o["id"].as_str().unwrap_or_default()))
        .collect();
    for v in releases {
        let kubeadm = kubeadm_simulator(&bin, v)?;
        let kubectl = format!("#!/bin/sh\n# capkk stand-in kubectl {v}\nexit 0\n").into_bytes();
        for (id, body) in [
            ("kubeadm", kubeadm),
            ("kubelet", kubelet_standin(v)),
            ("kubectl", kubectl),
        ] {
            overrides.push(json!({"id": id, "version": v, "checksum": {"value": sha(&body)}}));
            hosts.mirror.put(
                &format!("/kubernetes-release/release/{v}/bin/linux/amd64/{id}"),
                body,
            );
        }
    }
    component["overrides"] = Value::Array(overrides);
    let _ = env;
    Ok(component)
}

/// How the MachineDeployment rolls: `(maxSurge, maxUnavailable)`.
pub type Rollout = (i64, i64);

/// Cluster `name`: one control-plane host (KubeadmControlPlane at [`NEW`]) and `workers` worker hosts
/// (MachineDeployment `<name>-md` with `workers` replicas at `worker_version`, rolling as `rollout`), the
/// first host the control plane's.
pub async fn workload_cluster(
    env: &TestEnv,
    hosts: &Hosts,
    component: &Value,
    name: &str,
    worker_version: &str,
    workers: usize,
    rollout: Rollout,
) -> anyhow::Result<()> {
    let ns = env.ns.clone();
    let instances: Vec<Value> = hosts
        .sb
        .hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            json!({"name": h.info.name, "address": h.address(),
                   "roles": [if i == 0 { "control-plane" } else { "worker" }]})
        })
        .collect();
    let node_name = json!({"nodeRegistration": {"name": "{{ ds.meta_data.local_hostname }}"}});
    env.apply(json!({
        "apiVersion": CAPI_V, "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/12"]}},
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": format!("{name}-cp")},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKCluster", "name": name}
        }
    }))
    .await?;
    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKCluster",
        "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": name}},
        "spec": {
            "nodes": {"auth": {"user": "root", "secretRef": {"name": "ssh-auth"}}, "instances": instances},
            "component": component
        }
    }))
    .await?;
    for (tpl, role) in [
        (format!("{name}-cp"), "control-plane"),
        (format!("{name}-md"), "worker"),
    ] {
        env.apply(json!({
            "apiVersion": INFRA_V, "kind": "KKMachineTemplate",
            "metadata": {"name": tpl, "namespace": ns},
            "spec": {"template": {"spec": {"roles": [role]}}}
        }))
        .await?;
    }
    env.apply(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {"name": format!("{name}-cp"), "namespace": ns},
        "spec": {
            "replicas": 1,
            "version": NEW,
            "machineTemplate": {"spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachineTemplate", "name": format!("{name}-cp")}}},
            "kubeadmConfigSpec": {"initConfiguration": node_name, "joinConfiguration": node_name}
        }
    }))
    .await?;
    // CAPI's MachineSet preflight refuses to create a worker whose minor differs from the control plane's
    // (kubeadm joins only at the control plane's minor); a worker one minor behind is what a cluster has after
    // its control plane's upgrade, and what the worker's upgrade starts from: the test makes it directly.
    let annotations = if worker_version == NEW {
        json!({})
    } else {
        json!({"machineset.cluster.x-k8s.io/skip-preflight-checks": "KubeadmVersionSkew"})
    };
    env.apply(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
        "metadata": {"name": format!("{name}-md"), "namespace": ns, "annotations": annotations},
        "spec": {"template": {"spec": {"joinConfiguration": node_name}}}
    }))
    .await?;
    let labels = json!({"cluster.x-k8s.io/cluster-name": name, "cluster.x-k8s.io/deployment-name": format!("{name}-md")});
    env.apply(json!({
        "apiVersion": CAPI_V, "kind": "MachineDeployment",
        "metadata": {"name": format!("{name}-md"), "namespace": ns},
        "spec": {
            "clusterName": name,
            "replicas": workers,
            "selector": {"matchLabels": labels},
            "rollout": {"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": rollout.0, "maxUnavailable": rollout.1}}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": name,
                    "version": worker_version,
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": format!("{name}-md")}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachineTemplate", "name": format!("{name}-md")}
                }
            }
        }
    }))
    .await?;
    Ok(())
}

/// The worker Machines of MachineDeployment `<cluster>-md` (not being deleted).
pub async fn workers(env: &TestEnv, cluster: &str) -> anyhow::Result<Vec<Value>> {
    let md = format!("{cluster}-md");
    Ok(env
        .list(CAPI_V, "Machine")
        .await?
        .into_iter()
        .filter(|m| {
            m["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] == md.as_str()
                && m["metadata"]["deletionTimestamp"].is_null()
        })
        .collect())
}

/// Waits until the cluster's `n` workers run with a Node and returns them.
pub async fn workers_running(
    env: &TestEnv,
    cluster: &str,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Value>> {
    let r = eventually(
        &format!("{n} worker Machine(s) of {cluster} Running with a Node"),
        timeout,
        || async {
            let ms = workers(env, cluster).await?;
            Ok((ms.len() == n
                && ms
                    .iter()
                    .all(|m| m["status"]["phase"] == "Running" && !m["status"]["nodeRef"]["name"].is_null()))
            .then_some(ms))
        },
    )
    .await;
    match r {
        Ok(ms) => Ok(ms),
        Err(e) => {
            let ms = env.list(CAPI_V, "Machine").await.unwrap_or_default();
            let summary: Vec<String> = ms
                .iter()
                .map(|m| {
                    format!(
                        "{} phase={} version={} conditions={}",
                        m["metadata"]["name"],
                        m["status"]["phase"],
                        m["spec"]["version"],
                        m["status"]["conditions"]
                    )
                })
                .collect();
            let insts = env.list(INFRA_V, "KKInstance").await.unwrap_or_default();
            let isum: Vec<String> = insts
                .iter()
                .map(|i| {
                    format!(
                        "{} {} {}",
                        i["metadata"]["name"], i["status"]["phase"], i["status"]["conditions"]
                    )
                })
                .collect();
            anyhow::bail!(
                "{e:#}\nMachines:\n{}\nKKInstances:\n{}",
                summary.join("\n"),
                isum.join("\n")
            )
        }
    }
}

/// A client of the workload cluster (CAPI's `<cluster>-kubeconfig` Secret).
pub async fn workload_client(env: &TestEnv, cluster: &str) -> anyhow::Result<Client> {
    let s: Secret = env.api::<Secret>().get(&format!("{cluster}-kubeconfig")).await?;
    let value = s
        .data
        .and_then(|d| d.get("value").cloned())
        .context("the kubeconfig Secret has no value")?;
    let kc = Kubeconfig::from_yaml(std::str::from_utf8(&value.0)?)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(Client::try_from(cfg)?)
}

/// The workload Node `name`.
pub async fn node(workload: &Client, name: &str) -> anyhow::Result<Node> {
    Ok(Api::<Node>::all(workload.clone()).get(name).await?)
}

/// `(kubeletVersion, Ready status)` of a Node.
pub fn node_state(n: &Node) -> (String, String) {
    let st = n.status.clone().unwrap_or_default();
    let version = st.node_info.map(|i| i.kubelet_version).unwrap_or_default();
    let ready = st
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status)
        .unwrap_or_default();
    (version, ready)
}

/// What the host's kubelet binary answers to `--version`.
pub fn host_kubelet_version(host: &Host<'_>) -> String {
    inside(host, "/usr/local/bin/kubelet --version").trim().to_owned()
}

/// The sandbox host whose address is `address`.
pub fn host_at<'a>(hosts: &'a Hosts, address: &str) -> anyhow::Result<Host<'a>> {
    hosts
        .sb
        .hosts()
        .into_iter()
        .find(|h| h.address() == address)
        .with_context(|| format!("no sandbox host at {address}"))
}

/// The worker host (the second one: the first is the control plane's).
pub fn worker_host(hosts: &Hosts) -> Host<'_> {
    hosts.sb.hosts().remove(1)
}

/// The KKMachine of a Machine.
pub fn kkmachine_of(m: &Value) -> String {
    m["spec"]["infrastructureRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
