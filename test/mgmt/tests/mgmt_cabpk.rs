//! The real kubeadm bootstrap provider (CABPK) produces bootstrap data for a Cluster whose infrastructure is
//! a KKCluster: init data for the first control-plane Machine, join data for a second control-plane Machine
//! and a worker Machine. With `CAPKK_WRITE_FIXTURES=1` (`make fixtures`) the decoded outputs are saved to
//! test/fixtures/cabpk/ for the provisioning tests.
//!
//! How the flow is driven (only the CAPI controllers' own inputs are set by the test):
//! - KKCluster with spec.controlPlaneEndpoint and status.initialization.provisioned=true (what our
//!   infrastructure controller will do); CAPI core copies both into the Cluster.
//! - Control-plane Machine + KubeadmConfig (no control plane provider): CABPK takes the init lock and writes
//!   the init data plus the cluster certificates (<cluster>-ca, -etcd, -proxy, -sa Secrets).
//! - CABPK switches to join data once the Cluster has the ControlPlaneInitialized condition. CAPI core sets it
//!   when a control-plane Machine has a Node, which needs a running workload cluster; the test sets the
//!   condition on the Cluster status instead (CAPI core never flips a True condition back).
//! - Join configs carry an explicit bootstrap token: CABPK would otherwise create one in the workload cluster.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Kubernetes version of the Machines (the workload cluster version the fixtures are rendered for).
const WORKLOAD_VERSION: &str = "v1.34.4";
/// Bootstrap token put into the join configurations (a fixed, well-formed dummy).
const JOIN_TOKEN: &str = "abcdef.0123456789abcdef";
const CRI_SOCKET: &str = "unix:///var/run/containerd/containerd.sock";
const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

fn fixtures_dir() -> PathBuf {
    capkk_mgmt::repo_root().join("test/fixtures/cabpk")
}

fn machine(ns: &str, cluster: &str, name: &str, control_plane: bool) -> Value {
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "clusterName": cluster,
            "version": WORKLOAD_VERSION,
            "bootstrap": {"configRef": {
                "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name
            }},
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKMachine", "name": name
            }
        }
    })
}

fn kk_machine(ns: &str, cluster: &str, name: &str, role: &str) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "KKMachine",
        "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "spec": {"roles": [role]}
    })
}

fn kubeadm_config(ns: &str, cluster: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "spec": spec
    })
}

/// Creates KKMachine, KubeadmConfig and Machine for one node.
async fn node(
    client: &Client,
    ns: &str,
    cluster: &str,
    name: &str,
    cp: bool,
    config: Value,
) -> anyhow::Result<()> {
    let role = if cp { "control-plane" } else { "worker" };
    common::create(client, ns, kk_machine(ns, cluster, name, role)).await?;
    common::create(client, ns, kubeadm_config(ns, cluster, name, config)).await?;
    common::create(client, ns, machine(ns, cluster, name, cp)).await?;
    Ok(())
}

/// Waits for CABPK's bootstrap Secret of `config_name` and returns (format, decoded value).
async fn bootstrap_data(client: &Client, ns: &str, config_name: &str) -> anyhow::Result<(String, String)> {
    let (configs, _) =
        capkk_mgmt::dynamic_api(client, "bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", ns).await?;
    let secret_name = common::eventually(
        &format!("KubeadmConfig {ns}/{config_name} status.dataSecretName"),
        Duration::from_secs(90),
        || async {
            let cfg = configs.get(config_name).await?;
            Ok(cfg.data["status"]["dataSecretName"].as_str().map(str::to_owned))
        },
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets.get(&secret_name).await?;
    let labels = secret.labels();
    ensure!(
        labels.get("cluster.x-k8s.io/cluster-name").is_some(),
        "bootstrap secret carries the cluster label"
    );
    ensure!(
        secret.type_.as_deref() == Some("cluster.x-k8s.io/secret"),
        "bootstrap secret type: {:?}",
        secret.type_
    );
    let data = secret.data.unwrap_or_default();
    let get = |key: &str| -> anyhow::Result<String> {
        let bytes = data
            .get(key)
            .with_context(|| format!("bootstrap secret {secret_name} has no `{key}`"))?;
        Ok(String::from_utf8(bytes.0.clone())?)
    };
    Ok((get("format")?, get("value")?))
}

/// Checks the cloud-config shape the provisioning code relies on and returns the write_files paths.
fn check_cloud_config(
    kind: &str,
    value: &str,
    kubeadm_file: &str,
    kubeadm_cmd: &str,
) -> anyhow::Result<Vec<String>> {
    ensure!(value.contains("#cloud-config"), "{kind}: no #cloud-config header");
    let doc: Value = serde_saphyr::from_str(value).with_context(|| format!("{kind}: not YAML"))?;
    let files = doc["write_files"]
        .as_array()
        .with_context(|| format!("{kind}: no write_files"))?;
    let mut paths = Vec::new();
    for f in files {
        let path = f["path"]
            .as_str()
            .with_context(|| format!("{kind}: write_files entry without path"))?;
        ensure!(f.get("content").is_some(), "{kind}: {path} has no content");
        paths.push(path.to_owned());
    }
    ensure!(
        paths.iter().any(|p| p == kubeadm_file),
        "{kind}: write_files lacks {kubeadm_file}: {paths:?}"
    );
    let kubeadm_yaml = files
        .iter()
        .find(|f| f["path"] == kubeadm_file)
        .and_then(|f| f["content"].as_str())
        .unwrap_or_default();
    ensure!(
        kubeadm_yaml.contains("apiVersion: kubeadm.k8s.io/"),
        "{kind}: {kubeadm_file} is not a kubeadm config"
    );
    let runcmd: Vec<String> = doc["runcmd"]
        .as_array()
        .with_context(|| format!("{kind}: no runcmd"))?
        .iter()
        .map(|c| match c {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    ensure!(
        runcmd.iter().any(|c| c.contains(kubeadm_cmd)),
        "{kind}: runcmd lacks `{kubeadm_cmd}`: {runcmd:?}"
    );
    ensure!(
        runcmd.iter().any(|c| c.contains(SENTINEL)),
        "{kind}: runcmd lacks the sentinel {SENTINEL}: {runcmd:?}"
    );
    Ok(paths)
}

/// Marks the Cluster's control plane initialized (the v1beta2 condition CABPK checks).
async fn mark_control_plane_initialized(client: &Client, ns: &str, cluster: &str) -> anyhow::Result<()> {
    let (clusters, _) = capkk_mgmt::dynamic_api(client, "cluster.x-k8s.io/v1beta2", "Cluster", ns).await?;
    for _ in 0..20 {
        let mut obj = clusters.get(cluster).await?;
        let now = k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)?
            .to_string();
        let condition = json!({
            "type": "ControlPlaneInitialized",
            "status": "True",
            "reason": "Initialized",
            "message": "",
            "lastTransitionTime": now,
            "observedGeneration": obj.metadata.generation.unwrap_or(1)
        });
        let conditions = obj.data["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut conditions: Vec<Value> = conditions
            .into_iter()
            .filter(|c| c["type"] != "ControlPlaneInitialized")
            .collect();
        conditions.push(condition);
        obj.data["status"]["conditions"] = Value::Array(conditions);
        match clusters
            .replace_status(cluster, &PostParams::default(), &obj)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("could not update Cluster {ns}/{cluster} status: conflicts")
}

#[tokio::test]
async fn cabpk_renders_init_and_join_bootstrap_data_for_a_kkcluster() -> anyhow::Result<()> {
    let client = common::client().await?;
    common::install_capkk_crds(&client).await?;
    let ns = common::namespace(&client, "cabpk").await?;
    let cluster = "demo";

    // Infrastructure: a KKCluster that our controller would have marked provisioned.
    common::create(
        &client,
        &ns,
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "KKCluster",
            "metadata": {"name": cluster, "namespace": ns},
            "spec": {
                "nodes": {
                    "auth": {"user": "root", "privateKeyPath": "/root/.ssh/id_ed25519"},
                    "instances": [
                        {"name": "cp-0", "address": "198.18.0.10", "roles": ["control-plane"]},
                        {"name": "cp-1", "address": "198.18.0.11", "roles": ["control-plane"]},
                        {"name": "worker-0", "address": "198.18.0.20", "roles": ["worker"]}
                    ]
                },
                "controlPlaneEndpoint": {"host": "198.18.0.10", "port": 6443}
            }
        }),
    )
    .await?;
    let (kkclusters, _) = capkk_mgmt::dynamic_api(
        &client,
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "KKCluster",
        &ns,
    )
    .await?;
    kkclusters
        .patch_status(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"initialization": {"provisioned": true}}})),
        )
        .await
        .context("patch KKCluster status.initialization.provisioned")?;

    common::create(
        &client,
        &ns,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": cluster, "namespace": ns},
            "spec": {
                "clusterNetwork": {
                    "pods": {"cidrBlocks": ["10.244.0.0/16"]},
                    "services": {"cidrBlocks": ["10.96.0.0/12"]},
                    "serviceDomain": "cluster.local"
                },
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KKCluster", "name": cluster
                }
            }
        }),
    )
    .await?;
    let (clusters, _) = capkk_mgmt::dynamic_api(&client, "cluster.x-k8s.io/v1beta2", "Cluster", &ns).await?;
    common::eventually(
        "Cluster infrastructureProvisioned + controlPlaneEndpoint",
        Duration::from_secs(60),
        || async {
            let c = clusters.get(cluster).await?;
            let provisioned = c.data["status"]["initialization"]["infrastructureProvisioned"] == json!(true);
            let endpoint = c.data["spec"]["controlPlaneEndpoint"]["host"] == json!("198.18.0.10");
            Ok((provisioned && endpoint).then_some(()))
        },
    )
    .await?;

    // Init: the first control-plane machine.
    let init_spec = json!({
        "clusterConfiguration": {
            "apiServer": {"certSANs": ["198.18.0.10"]}
        },
        "initConfiguration": {
            "nodeRegistration": {"criSocket": CRI_SOCKET, "name": "cp-0"}
        }
    });
    node(&client, &ns, cluster, "demo-cp-0", true, init_spec).await?;
    let (format, init) = bootstrap_data(&client, &ns, "demo-cp-0").await?;
    assert_eq!(format, "cloud-config");
    let init_files = check_cloud_config(
        "init",
        &init,
        "/run/kubeadm/kubeadm.yaml",
        "kubeadm init --config /run/kubeadm/kubeadm.yaml",
    )?;
    for pki in [
        "/etc/kubernetes/pki/ca.crt",
        "/etc/kubernetes/pki/ca.key",
        "/etc/kubernetes/pki/etcd/ca.crt",
    ] {
        assert!(
            init_files.iter().any(|p| p == pki),
            "init writes {pki}: {init_files:?}"
        );
    }
    assert!(init.contains("kind: InitConfiguration") && init.contains("kind: ClusterConfiguration"));
    assert!(
        init.contains("controlPlaneEndpoint: 198.18.0.10:6443"),
        "endpoint from the KKCluster"
    );
    assert!(init.contains(&format!("kubernetesVersion: {WORKLOAD_VERSION}")));
    // CABPK stored the cluster certificates it generated.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for suffix in ["ca", "etcd", "proxy", "sa"] {
        secrets
            .get(&format!("{cluster}-{suffix}"))
            .await
            .with_context(|| format!("{cluster}-{suffix} secret"))?;
    }

    // Join: after the control plane counts as initialized.
    mark_control_plane_initialized(&client, &ns, cluster).await?;
    let join = |name: &str, cp: bool| {
        let mut spec = json!({
            "joinConfiguration": {
                "nodeRegistration": {"criSocket": CRI_SOCKET, "name": name},
                "discovery": {"bootstrapToken": {"token": JOIN_TOKEN}}
            }
        });
        if cp {
            spec["joinConfiguration"]["controlPlane"] = json!({"localAPIEndpoint": {"bindPort": 6443}});
        }
        spec
    };
    node(&client, &ns, cluster, "demo-cp-1", true, join("cp-1", true)).await?;
    node(
        &client,
        &ns,
        cluster,
        "demo-worker-0",
        false,
        join("worker-0", false),
    )
    .await?;
    // A worker using the KubeadmConfig features real templates use: files (plain, base64, appended),
    // pre/post commands, users, NTP, and the cloud-init Jinja hostname instead of a fixed node name.
    let mut full = join("{{ ds.meta_data.local_hostname }}", false);
    full["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"] =
        json!([{"name": "node-labels", "value": "capkk.io/pool=full"}]);
    full["files"] = json!([
        {"path": "/etc/capkk/plain.conf", "content": "key=value\nquote='single' \"double\"\n",
         "owner": "root:root", "permissions": "0644"},
        {"path": "/etc/capkk/encoded.bin", "content": "aGVsbG8gZnJvbSBjYXBray1ycwo=", "encoding": "base64",
         "permissions": "0600"},
        {"path": "/etc/capkk/append.conf", "content": "appended line\n", "append": true}
    ]);
    full["preKubeadmCommands"] = json!(["echo pre-kubeadm > /tmp/pre", "systemctl restart containerd"]);
    full["postKubeadmCommands"] = json!(["echo post-kubeadm > /tmp/post"]);
    full["users"] = json!([{"name": "capkk", "sudo": "ALL=(ALL) NOPASSWD:ALL",
        "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc2t0N0lFvDu4fZp0Fq6m0g8aZl6u3D4b7s8q9w0e1r capkk@test"]}]);
    full["ntp"] = json!({"enabled": true, "servers": ["198.18.0.1"]});
    node(&client, &ns, cluster, "demo-worker-1", false, full).await?;

    let join_cmd = "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml";
    let join_file = "/run/kubeadm/kubeadm-join-config.yaml";
    let (format, join_cp) = bootstrap_data(&client, &ns, "demo-cp-1").await?;
    assert_eq!(format, "cloud-config");
    let cp_files = check_cloud_config("join control plane", &join_cp, join_file, join_cmd)?;
    assert!(
        cp_files.iter().any(|p| p == "/etc/kubernetes/pki/ca.key"),
        "CP join carries the CA: {cp_files:?}"
    );
    assert!(
        join_cp.contains("controlPlane:"),
        "JoinConfiguration.controlPlane set"
    );

    let (format, join_worker) = bootstrap_data(&client, &ns, "demo-worker-0").await?;
    assert_eq!(format, "cloud-config");
    let worker_files = check_cloud_config("join worker", &join_worker, join_file, join_cmd)?;
    assert!(
        !worker_files.iter().any(|p| p.ends_with(".key")),
        "worker gets no private keys: {worker_files:?}"
    );
    let (format, join_full) = bootstrap_data(&client, &ns, "demo-worker-1").await?;
    assert_eq!(format, "cloud-config");
    let full_files = check_cloud_config("join worker (full)", &join_full, join_file, join_cmd)?;
    for path in [
        "/etc/capkk/plain.conf",
        "/etc/capkk/encoded.bin",
        "/etc/capkk/append.conf",
    ] {
        assert!(
            full_files.iter().any(|p| p == path),
            "user file {path}: {full_files:?}"
        );
    }
    for needle in [
        "echo pre-kubeadm",
        "echo post-kubeadm",
        "users:",
        "ntp:",
        "ds.meta_data.local_hostname",
    ] {
        assert!(join_full.contains(needle), "full worker data contains {needle}");
    }
    for data in [&join_cp, &join_worker, &join_full] {
        assert!(data.contains("kind: JoinConfiguration"));
        assert!(
            data.contains("apiServerEndpoint: 198.18.0.10:6443"),
            "discovery endpoint from the Cluster"
        );
        assert!(data.contains("caCertHashes:"), "CABPK pins the CA hash");
    }

    if std::env::var_os("CAPKK_WRITE_FIXTURES").is_some() {
        write_fixtures(&BTreeMap::from([
            ("init-control-plane.yaml", init.as_str()),
            ("join-control-plane.yaml", join_cp.as_str()),
            ("join-worker.yaml", join_worker.as_str()),
            ("join-worker-full.yaml", join_full.as_str()),
        ]))?;
    }
    Ok(())
}

fn write_fixtures(files: &BTreeMap<&str, &str>) -> anyhow::Result<()> {
    let dir = fixtures_dir();
    std::fs::create_dir_all(&dir)?;
    for (name, content) in files {
        std::fs::write(dir.join(name), content)?;
        eprintln!("wrote {}", dir.join(name).display());
    }
    Ok(())
}

/// The committed fixtures are real CABPK output of the same shape the live test checks.
#[test]
fn committed_fixtures_have_the_cabpk_cloud_config_shape() -> anyhow::Result<()> {
    let dir = fixtures_dir();
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .with_context(|| format!("read {} (capture with `make fixtures`)", dir.join(name).display()))
    };
    let init = read("init-control-plane.yaml")?;
    check_cloud_config(
        "init fixture",
        &init,
        "/run/kubeadm/kubeadm.yaml",
        "kubeadm init --config /run/kubeadm/kubeadm.yaml",
    )?;
    let join_cmd = "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml";
    for name in [
        "join-control-plane.yaml",
        "join-worker.yaml",
        "join-worker-full.yaml",
    ] {
        check_cloud_config(
            name,
            &read(name)?,
            "/run/kubeadm/kubeadm-join-config.yaml",
            join_cmd,
        )?;
    }
    let readme = read("README.md")?;
    assert!(
        readme.contains("cluster-api v1.14"),
        "README names the CAPI version"
    );
    Ok(())
}
