//! First must-show: Cluster + KKCluster + KubeadmControlPlane with a KKMachineTemplate, against the local
//! management plane with the real CAPI core/CABPK/KCP controllers and a sandbox SSH host. KCP creates the
//! Machine, CABPK renders real init bootstrap data, the KKMachine claims the host, the KKInstance runs
//! bootstrap -> repository -> binary (stand-ins from a local mirror, SHA-256 verified) -> containerd ->
//! provisioning (the real CABPK cloud-config; the kubeadm stand-in records its arguments and config), the
//! sentinel is written, the KKMachine is provisioned with providerID and addresses and the Machine shows
//! InfrastructureReady. The manager runs as a separate process with exactly the ClusterRole of config/rbac.

mod common;

use std::time::Duration;

use anyhow::ensure;
use capkk_sandbox::{Sandbox, SandboxConfig, skip_unless_supported};
use common::{sandbox::*, *};
use serde_json::json;

const PASSWORD_CANARY: &str = "canary-pw-kcp-3b9d17";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kcp_machine_is_provisioned_on_a_sandbox_host() -> anyhow::Result<()> {
    if skip_unless_supported() {
        return Ok(());
    }
    let sb = Sandbox::shared(&SandboxConfig::new("ctl-kcp", 1))?;
    let host = sb.hosts().remove(0);
    install_fakes(&host)?;
    let client = client().await?;
    let ns = namespace(&client, "kcp").await?;
    let dir = test_dir("kcp")?;
    eprintln!("manager logs in {}", dir.display());
    let mirror = Mirror::start(&sb)?;
    let component = publish_standins(&mirror, &dir, "amd64")?;

    let key = std::fs::read_to_string(&sb.credentials().ed25519_key)?;
    let key_canary: String = key.lines().nth(2).unwrap_or_default().to_owned();
    secret(
        &client,
        &ns,
        "ssh-auth",
        &[("privateKey", &key), ("password", PASSWORD_CANARY)],
    )
    .await?;
    let hosts = vec![(host.info.name.clone(), host.address().to_owned(), 22)];
    apply(
        &client,
        &ns,
        cluster(
            &ns,
            "kcp",
            json!({"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "kcp-cp"}}),
        ),
    )
    .await?;
    apply(
        &client,
        &ns,
        kkcluster(&ns, "kcp", &hosts, json!({"component": component})),
    )
    .await?;
    apply(
        &client,
        &ns,
        json!({
            "apiVersion": INFRA_V, "kind": "KKMachineTemplate",
            "metadata": {"name": "kcp-cp", "namespace": ns},
            "spec": {"template": {"spec": {"roles": ["control-plane"]}}}
        }),
    )
    .await?;
    apply(
        &client,
        &ns,
        json!({
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

    let kc = manager_kubeconfig(&client, &ns, &dir).await?;
    let cache = dir.join("cache");
    let mut mgr = Manager::start(
        &kc,
        &dir,
        "manager",
        &[
            "--namespace",
            &ns,
            "--ssh-connect-timeout=5s",
            "--artifact-cache-dir",
            cache.to_str().unwrap_or("/tmp"),
        ],
    )?;

    let kkc = eventually("KKCluster provisioned", Duration::from_secs(120), || async {
        let k = get(&client, &ns, INFRA_V, "KKCluster", "kcp").await?;
        Ok(k.filter(|k| k["status"]["initialization"]["provisioned"] == true))
    })
    .await?;
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

    let km = eventually("KKMachine provisioned", Duration::from_secs(300), || async {
        let kms = list(&client, &ns, INFRA_V, "KKMachine").await?;
        Ok(kms
            .into_iter()
            .find(|k| k["status"]["initialization"]["provisioned"] == true))
    })
    .await;
    let km = match km {
        Ok(k) => k,
        Err(e) => {
            let insts = list(&client, &ns, INFRA_V, "KKInstance")
                .await
                .unwrap_or_default();
            anyhow::bail!(
                "{e:#}\nKKInstances: {}",
                serde_json::to_string_pretty(&insts).unwrap_or_default()
            );
        }
    };
    let inst_name = km["spec"]["instanceID"].as_str().unwrap_or_default().to_owned();
    ensure!(
        inst_name == host.info.name,
        "claimed the sandbox host: {inst_name}"
    );
    ensure!(
        km["spec"]["providerID"] == json!(format!("kk:///kcp/{inst_name}")),
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
        cfg.contains(&format!("name: '{inst_name}'")) || cfg.contains(&format!("name: {inst_name}\n")),
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

    // KKInstance: every phase True, host key trusted on first use, journal in status.
    let inst = get(&client, &ns, INFRA_V, "KKInstance", &inst_name)
        .await?
        .unwrap_or_default();
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
            .starts_with("step 5/5"),
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
        let m = get(&client, &ns, CAPI_V, "Machine", &machine_name).await?;
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
    assert_no_canary(
        &client,
        &ns,
        &[
            PASSWORD_CANARY,
            &key_canary,
            "BEGIN CERTIFICATE",
            "BEGIN RSA PRIVATE KEY",
        ],
        &logs,
    )
    .await?;
    cleanup_namespace(&client, &ns).await;
    Ok(())
}
