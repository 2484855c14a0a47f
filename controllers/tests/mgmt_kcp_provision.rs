//! First must-show: Cluster + KKCluster + KubeadmControlPlane with a KKMachineTemplate, against the local
//! management plane with the real CAPI core/CABPK/KCP controllers and a sandbox SSH host. KCP creates the
//! Machine, CABPK renders real init bootstrap data, the KKMachine claims the host, the KKInstance runs
//! bootstrap -> binary (stand-ins from a local mirror, SHA-256 verified) -> containerd -> repository (the
//! image pre-pull alongside) -> provisioning (the real CABPK cloud-config; the kubeadm stand-in records its
//! arguments and config), the sentinel is written, the KKMachine is provisioned with providerID and addresses
//! and the Machine shows InfrastructureReady. The manager runs as a separate process with exactly the ClusterRole of config/rbac.
//! The host is listed without a name, as CAPKK's templates do: its name is derived from the address and is
//! the claim's host part, the providerID's, and the `local_hostname` (the Node name) kubeadm gets.

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::{sandbox::*, *};
use serde_json::json;

const PASSWORD_CANARY: &str = "canary-pw-kcp-3b9d17";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kcp_machine_is_provisioned_on_a_sandbox_host() -> anyhow::Result<()> {
    let Some((env, sandbox)) = TestEnv::with_hosts("kcp", "ctl-kcp", 1).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    let host = sandbox.sb.hosts().remove(0);
    let component = sandbox.component.clone();
    let key_canary = sandbox.key_canary();
    // A password next to the key: it must never be used or leak.
    env.merge(
        "v1",
        "Secret",
        "ssh-auth",
        json!({"stringData": {"password": PASSWORD_CANARY}}),
    )
    .await?;
    let hosts = sandbox.inventory();
    env.apply(cluster(
            &ns,
            "kcp",
            json!({"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "kcp-cp"}}),
        ),
    )
    .await?;
    // CAPKK's shape: `instances: [{address: ...}]`, no name.
    let mut kkc = kkcluster(&ns, "kcp", &hosts, json!({"component": component}));
    let listed = kkc["spec"]["nodes"]["instances"][0]
        .as_object_mut()
        .and_then(|h| h.remove("name"));
    ensure!(listed.is_some(), "the inventory named the host: {kkc}");
    env.apply(kkc).await?;
    // The documented rule (docs/capkk-migration.md) for an IPv4 address.
    let node_name = host.address().replace('.', "-");
    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKMachineTemplate",
        "metadata": {"name": "kcp-cp", "namespace": ns},
        "spec": {"template": {"spec": {"roles": ["control-plane"]}}}
    }))
    .await?;
    env.apply(json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": "kcp-cp", "namespace": ns},
            "spec": {
                "replicas": 1,
                "version": K8S,
                "machineTemplate": {"spec": {"infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachineTemplate", "name": "kcp-cp"}}},
                "kubeadmConfigSpec": {
                    "initConfiguration": {"nodeRegistration": {"name": "{{ ds.meta_data.local_hostname }}"}}
                }
            }
        }),
    )
    .await?;

    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=5s"])?;

    env.kkcluster_provisioned("kcp").await?;
    let kkc = env.kkcluster_probed("kcp", 1).await?;
    ensure!(
        kkc["spec"]["controlPlaneEndpoint"]["host"] == host.address(),
        "endpoint from the control-plane host: {}",
        kkc["spec"]["controlPlaneEndpoint"]
    );
    ensure!(
        kkc["spec"]["controlPlaneEndpoint"]["port"] == 6443,
        "default port"
    );
    let probe = kkc["status"]["hosts"][0].clone();
    ensure!(
        probe["reachable"] == true && probe["hostKey"] == host.fingerprint(),
        "probe: {probe}"
    );
    ensure!(probe["arch"] == "amd64", "probe arch: {probe}");
    ensure!(
        probe["name"] == node_name.as_str(),
        "probe under the derived name: {probe}"
    );

    let km = eventually("KKMachine provisioned", Duration::from_secs(300), || async {
        let kms = env.list(INFRA_V, "KKMachine").await?;
        Ok(kms
            .into_iter()
            .find(|k| k["status"]["initialization"]["provisioned"] == true))
    })
    .await;
    let km = match km {
        Ok(k) => k,
        Err(e) => {
            let insts = env.list(INFRA_V, "KKInstance").await.unwrap_or_default();
            anyhow::bail!(
                "{e:#}\nKKInstances: {}",
                serde_json::to_string_pretty(&insts).unwrap_or_default()
            );
        }
    };
    let inst_name = km["spec"]["instanceID"].as_str().unwrap_or_default().to_owned();
    ensure!(
        inst_name == format!("kcp.{node_name}"),
        "claimed the sandbox host: {inst_name}"
    );
    ensure!(
        km["spec"]["providerID"] == json!(format!("kk:///kcp/{node_name}")),
        "providerID {}",
        km["spec"]["providerID"]
    );
    let addrs = km["status"]["addresses"].to_string();
    for t in ["InternalIP", "ExternalIP", "Hostname"] {
        ensure!(addrs.contains(t), "addresses lack {t}: {addrs}");
    }
    ensure!(addrs.contains(host.address()), "addresses: {addrs}");

    // The host ran the real CABPK init data.
    let args = inside(&host, &format!("cat {KUBEADM_ARGS_LOG}"));
    ensure!(
        args.contains("init --config /run/kubeadm/kubeadm.yaml"),
        "kubeadm args: {args}"
    );
    let cfg = inside(&host, &format!("cat {KUBEADM_CONFIG_COPY}"));
    ensure!(
        cfg.contains("kind: InitConfiguration") && cfg.contains("kind: ClusterConfiguration"),
        "kubeadm config: {cfg}"
    );
    ensure!(
        cfg.contains(&format!("name: '{node_name}'")) || cfg.contains(&format!("name: {node_name}\n")),
        "jinja local_hostname rendered: {cfg}"
    );
    ensure!(
        inside(&host, "cat /run/cluster-api/bootstrap-success.complete").contains("success"),
        "sentinel"
    );
    ensure!(
        inside(&host, "test -x /usr/local/bin/kubelet && echo yes").contains("yes"),
        "binary service installed kubelet"
    );

    // KKInstance: every phase True, host key trusted on first use, journal in status. (Ready is the
    // reconciler's summary; it follows the host work's last write.)
    let inst = eventually("KKInstance Ready", Duration::from_secs(30), || async {
        let i = env.get(INFRA_V, "KKInstance", &inst_name).await?;
        Ok(i.filter(|i| cond_state(i, "Ready").0 == "True"))
    })
    .await?;
    for c in [
        "Bootstrapped",
        "RepositoryReady",
        "BinariesReady",
        "CRIReady",
        "Provisioned",
        "Ready",
    ] {
        ensure!(
            cond_state(&inst, c).0 == "True",
            "KKInstance {c}: {:?}",
            condition(&inst, c)
        );
    }
    ensure!(
        inst["status"]["hostInfo"]["arch"] == "amd64" && inst["status"]["hostInfo"]["os"].is_string(),
        "hostInfo: {}",
        inst["status"]["hostInfo"]
    );
    ensure!(
        inst["spec"]["name"] == node_name.as_str(),
        "KKInstance spec.name (the hostname): {}",
        inst["spec"]["name"]
    );
    let stored = env.get(INFRA_V, "KKCluster", "kcp").await?.unwrap_or_default();
    ensure!(
        stored["spec"]["nodes"]["instances"][0].get("name").is_none(),
        "the derived name is never written into the user's spec: {}",
        stored["spec"]["nodes"]["instances"][0]
    );
    ensure!(
        inst["spec"]["hostKey"] == host.fingerprint(),
        "TOFU host key recorded: {}",
        inst["spec"]["hostKey"]
    );
    ensure!(
        inst["status"]["journal"]
            .as_array()
            .is_some_and(|j| !j.is_empty()),
        "journal in status"
    );
    ensure!(
        inst["status"]["step"]
            .as_str()
            .unwrap_or("")
            .starts_with("step 6/6"),
        "step: {}",
        inst["status"]["step"]
    );
    ensure!(
        inst["metadata"]["annotations"]
            .get("clusterctl.cluster.x-k8s.io/block-move")
            .is_none(),
        "block-move removed"
    );

    // CAPI picked it up.
    let machine_name = km["metadata"]["ownerReferences"][0]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let machine = eventually("Machine InfrastructureReady", Duration::from_secs(60), || async {
        let m = env.get(CAPI_V, "Machine", &machine_name).await?;
        Ok(m.filter(|m| {
            cond_state(m, "InfrastructureReady").0 == "True" && m["spec"]["providerID"].is_string()
        }))
    })
    .await?;
    ensure!(
        machine["spec"]["providerID"] == km["spec"]["providerID"],
        "Machine providerID {}",
        machine["spec"]["providerID"]
    );

    let logs = vec![mgr.logs()];
    mgr.terminate();
    env.assert_no_canary(
        &[
            PASSWORD_CANARY,
            &key_canary,
            "BEGIN CERTIFICATE",
            "BEGIN RSA PRIVATE KEY",
        ],
        &logs,
    )
    .await?;
    env.finish().await;
    Ok(())
}
