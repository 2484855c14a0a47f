//! Host preparation before the bootstrap data (issue 28) against the real CAPI controllers: a worker Machine
//! (its KubeadmConfig a join, so CABPK writes its bootstrap data only once the control plane is initialized)
//! gets its host claimed and prepared (bootstrap, binaries, containerd, packages: the host journal's
//! completed phases) while its Cluster has no control plane at all; the KubeadmControlPlane is created only
//! after that, brings the control plane up on its own host (the kubeadm simulator), CABPK writes the
//! worker's join, and the worker's host then runs provisioning alone (the phases before it are not run
//! again) and becomes the Machine's Node.

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::{day2::*, sandbox::inside, *};
use serde_json::{Value, json};

const CLUSTER: &str = "pe";
const PREPARED: &str = "bootstrap,binary,containermanager,repository,loadbalancer";
const COMPLETED: &str = "kkinstance.infrastructure.cluster.x-k8s.io/completed-phases";
const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workers_host_is_prepared_before_the_control_plane_exists_and_provisioned_once_its_join_is_written()
-> anyhow::Result<()> {
    let Some((env, hosts)) = TestEnv::with_hosts("prepearly", "ctl-prepearly", 2).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    let component = publish_releases(&env, &hosts, &[NEW]).await?;
    let cp_host = hosts.sb.hosts().remove(0);
    let w_host = worker_host(&hosts);
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
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/12"]}},
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "pe-cp"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKCluster", "name": CLUSTER}
        }
    }))
    .await?;
    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKCluster",
        "metadata": {"name": CLUSTER, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "spec": {
            "nodes": {"auth": {"user": "root", "secretRef": {"name": "ssh-auth"}}, "instances": instances},
            "component": component
        }
    }))
    .await?;
    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKMachineTemplate",
        "metadata": {"name": "pe-cp", "namespace": ns},
        "spec": {"template": {"spec": {"roles": ["control-plane"]}}}
    }))
    .await?;
    // The worker: a Machine of its own with a join KubeadmConfig (no MachineDeployment: its preflight checks
    // would hold the Machine back while there is no control plane, which is the point here).
    env.apply(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
        "metadata": {"name": "pe-w", "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "spec": {"joinConfiguration": node_name}
    }))
    .await?;
    env.apply(json!({
        "apiVersion": INFRA_V, "kind": "KKMachine",
        "metadata": {"name": "pe-w", "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "spec": {"roles": ["worker"]}
    }))
    .await?;
    env.apply(json!({
        "apiVersion": CAPI_V, "kind": "Machine",
        "metadata": {"name": "pe-w", "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "spec": {
            "clusterName": CLUSTER,
            "version": NEW,
            "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "pe-w"}},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachine", "name": "pe-w"}
        }
    }))
    .await?;
    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=5s"])?;

    // Prepared, per the host journal (the completed-phases annotation), and waiting.
    let w_inst = env.claimed_instance("pe-w").await?;
    ensure!(
        w_inst == format!("{CLUSTER}.{}", w_host.info.name),
        "the worker claimed the worker host: {w_inst}"
    );
    let prepared = eventually(
        "the worker's host prepared and waiting for its bootstrap data",
        Duration::from_secs(240),
        || async {
            let i = env.get(INFRA_V, "KKInstance", &w_inst).await?.unwrap_or_default();
            Ok((i["metadata"]["annotations"][COMPLETED] == PREPARED
                && cond_state(&i, "Ready").1 == "WaitingForBootstrapData")
                .then_some(i))
        },
    )
    .await;
    let prepared = match prepared {
        Ok(i) => i,
        Err(e) => {
            let insts = env.list(INFRA_V, "KKInstance").await.unwrap_or_default();
            anyhow::bail!(
                "{e:#}\nKKInstances: {}",
                serde_json::to_string_pretty(&insts).unwrap_or_default()
            );
        }
    };
    ensure!(
        prepared["spec"].get("bootstrapDataSecretRef").is_none(),
        "no bootstrap data named yet: {}",
        prepared["spec"]
    );
    let machine = env.get(CAPI_V, "Machine", "pe-w").await?.unwrap_or_default();
    ensure!(
        machine["spec"]["bootstrap"]["dataSecretName"].is_null(),
        "CABPK has not written the join: {}",
        machine["spec"]["bootstrap"]
    );
    ensure!(
        cond_state(&machine, "InfrastructureReady").0 != "True",
        "infrastructure is not ready before the bootstrap data ran: {:?}",
        condition(&machine, "InfrastructureReady")
    );
    let cluster = env.get(CAPI_V, "Cluster", CLUSTER).await?.unwrap_or_default();
    ensure!(
        cond_state(&cluster, "ControlPlaneInitialized").0 != "True",
        "no control plane yet: {:?}",
        condition(&cluster, "ControlPlaneInitialized")
    );
    let km = env.get(INFRA_V, "KKMachine", "pe-w").await?.unwrap_or_default();
    ensure!(
        km["status"]["initialization"]["provisioned"] != true,
        "the KKMachine is not provisioned: {}",
        km["status"]
    );
    ensure!(
        cond_state(&km, "Ready").1 == "WaitingForBootstrapData",
        "the KKMachine says why it waits: {:?}",
        condition(&km, "Ready")
    );
    ensure!(
        km["spec"]["providerID"] == json!(format!("kk:///{CLUSTER}/{}", w_host.info.name)),
        "providerID recorded with the claim: {}",
        km["spec"]
    );
    ensure!(
        inside(&w_host, "test -x /usr/local/bin/kubelet && echo yes").contains("yes"),
        "the binaries are on the worker host"
    );
    ensure!(
        inside(&w_host, &format!("test -e {SENTINEL} && echo yes || echo no")).contains("no"),
        "nothing provisioned the worker host"
    );

    // The control plane comes; CABPK writes the worker's join; the prepared host runs it.
    env.apply(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {"name": "pe-cp", "namespace": ns},
        "spec": {
            "replicas": 1,
            "version": NEW,
            "machineTemplate": {"spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachineTemplate", "name": "pe-cp"}}},
            "kubeadmConfigSpec": {"initConfiguration": node_name, "joinConfiguration": node_name}
        }
    }))
    .await?;
    let running = eventually(
        "the worker Machine Running with a Node",
        Duration::from_secs(420),
        || async {
            let m = env.get(CAPI_V, "Machine", "pe-w").await?.unwrap_or_default();
            Ok((m["status"]["phase"] == "Running" && !m["status"]["nodeRef"]["name"].is_null()).then_some(m))
        },
    )
    .await;
    if let Err(e) = running {
        let ms = env.list(CAPI_V, "Machine").await.unwrap_or_default();
        let insts = env.list(INFRA_V, "KKInstance").await.unwrap_or_default();
        anyhow::bail!(
            "{e:#}\nMachines: {}\nKKInstances: {}",
            serde_json::to_string_pretty(&ms).unwrap_or_default(),
            serde_json::to_string_pretty(&insts).unwrap_or_default()
        );
    }
    let cp_inst = env
        .list(INFRA_V, "KKInstance")
        .await?
        .into_iter()
        .find(|i| i["metadata"]["name"] != w_inst.as_str());
    ensure!(
        cp_inst.as_ref().map(name) == Some(format!("{CLUSTER}.{}", cp_host.info.name)),
        "the control plane is on the control-plane host: {:?}",
        cp_inst.as_ref().map(name)
    );
    let inst = env.get(INFRA_V, "KKInstance", &w_inst).await?.unwrap_or_default();
    ensure!(
        inst["metadata"]["annotations"][COMPLETED] == format!("{PREPARED},provisioning"),
        "every phase recorded: {}",
        inst["metadata"]["annotations"]
    );
    ensure!(
        inst["spec"]["bootstrapDataSecretRef"]["name"] == "pe-w",
        "the join was handed over: {}",
        inst["spec"]
    );
    ensure!(
        inside(&w_host, &format!("cat {SENTINEL}")).contains("success"),
        "the worker host ran its bootstrap data"
    );
    // The phases of the preparation ran once: provisioning alone followed.
    let logs = mgr.logs();
    for step in [
        "step 1/6: bootstrap",
        "step 2/6: binary",
        "step 6/6: provisioning",
    ] {
        let runs = logs
            .lines()
            .filter(|l| l.contains(&w_inst) && l.contains(&format!("Running {step}")))
            .count();
        ensure!(runs == 1, "{step} ran {runs} times on the worker host");
    }
    mgr.terminate();
    env.finish().await;
    Ok(())
}
