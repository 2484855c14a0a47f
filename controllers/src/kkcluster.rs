//! KKCluster reconciler: owner Cluster, pause, inventory validation, addresses shared with other
//! KKClusters, host probes (background), control-plane endpoint, `status.initialization.provisioned`;
//! deletion waits for every KKMachine and claimed KKInstance.

use std::{collections::HashSet, sync::Arc};

use async_trait::async_trait;
use capkk_api::{
    ApiEndpoint, HostProbe, KKCluster, KKClusterStatus, KKInstance, KKMachine, Role,
    consts::{KKCLUSTER_FINALIZER, KKCLUSTER_NAME_LABEL, conditions as cond, reasons},
};
use capkk_executor::ExecRequest;
use futures::{StreamExt, stream};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::json;
use tracing::{info, warn};

use crate::{
    capi::{Cluster, capi_owner},
    conditions,
    context::Context,
    error::{Error, Result},
    hosts::{self, HostDial},
    reconcile::{Owner, Reconciler, requeue},
};

/// The owner Cluster.
pub struct ClusterOwner(pub Cluster);

#[async_trait]
impl Reconciler for KKCluster {
    const KIND: &'static str = "KKCluster";
    const FINALIZER: &'static str = KKCLUSTER_FINALIZER;
    type Status = KKClusterStatus;
    type Owner = ClusterOwner;

    crate::status_accessors!(KKClusterStatus);

    async fn owner(&self, ctx: &Context) -> Result<Owner<ClusterOwner>> {
        let Some(owner) = capi_owner(&self.metadata, "Cluster").cloned() else {
            return Ok(Owner::Missing {
                what: "the owner Cluster to set its ownerReference".into(),
                retry: None,
            });
        };
        let ns = self.namespace().unwrap_or_default();
        match crate::capi::cluster(ctx, &ns, &owner.name).await? {
            Some(c) => Ok(Owner::Found(ClusterOwner(c))),
            None => Ok(Owner::Missing {
                what: format!("Cluster {}", owner.name),
                retry: Some(requeue::OWNER_MISSING),
            }),
        }
    }

    fn owner_paused(owner: &ClusterOwner) -> bool {
        owner.0.spec.paused == Some(true)
    }

    async fn apply(
        obj: Arc<Self>,
        owner: ClusterOwner,
        ctx: &Arc<Context>,
        status: &mut KKClusterStatus,
    ) -> Result<Action> {
        apply(obj, &owner.0, ctx, status).await
    }

    async fn cleanup(
        obj: Arc<Self>,
        _owner: Option<ClusterOwner>,
        ctx: &Arc<Context>,
        status: &mut KKClusterStatus,
    ) -> Result<Action> {
        cleanup(obj, ctx, status).await
    }
}

/// Validate the inventory; the error names the field.
pub fn validate(kkc: &KKCluster) -> Result<()> {
    let invalid = |field: String, message: String| Err(Error::InvalidSpec { field, message });
    match kkc.spec.distribution.as_deref().unwrap_or("kubernetes") {
        "kubernetes" | "k8s" => {}
        "k3s" => {
            return invalid(
                "spec.distribution".into(),
                "k3s is not supported by capkk-rs; use kubernetes".into(),
            );
        }
        other => {
            return invalid(
                "spec.distribution".into(),
                format!("unknown distribution {other:?}"),
            );
        }
    }
    let mut names = HashSet::new();
    let mut addrs = HashSet::new();
    if kkc.spec.nodes.instances.is_empty() {
        return invalid(
            "spec.nodes.instances".into(),
            "the inventory lists no hosts".into(),
        );
    }
    for (i, h) in kkc.spec.nodes.instances.iter().enumerate() {
        let f = format!("spec.nodes.instances[{i}]");
        // The effective name: the declared one, else the one derived from the address (never written back).
        let name = h.host_name();
        if !capkk_api::is_dns_label(&name) {
            return invalid(
                format!("{f}.name"),
                format!("{name:?} is not a lower-case DNS label"),
            );
        }
        if !names.insert(name.clone()) {
            let how = if h.name.as_deref().is_some_and(|n| !n.is_empty()) {
                "duplicate host name"
            } else {
                "the host name derived from the address collides with another host's"
            };
            return invalid(format!("{f}.name"), format!("{how}: {name:?}"));
        }
        if h.address.trim().is_empty() {
            return invalid(format!("{f}.address"), "must be set".into());
        }
        if !addrs.insert(h.address.as_str()) {
            return invalid(
                format!("{f}.address"),
                format!("duplicate address {:?}", h.address),
            );
        }
        if h.roles().is_empty() {
            return invalid(format!("{f}.roles"), "must name at least one role".into());
        }
        if !hosts::host_auth(kkc, h).has_credentials() {
            return invalid(
                format!("{f}.auth"),
                "no credentials: set spec.nodes.auth or the host's auth (password, privateKey, privateKeyPath, secret or secretRef)".into(),
            );
        }
        if let Some(arch) = h.arch.as_deref()
            && !matches!(arch, "amd64" | "arm64")
        {
            return invalid(format!("{f}.arch"), format!("{arch:?} is not amd64 or arm64"));
        }
    }
    Ok(())
}

/// The endpoint to publish: the user's, else the load balancer's, else the first control-plane host's.
pub fn desired_endpoint(kkc: &KKCluster, cluster: &Cluster) -> Option<ApiEndpoint> {
    if let Some(ep) = kkc.spec.control_plane_endpoint.as_ref().filter(|e| e.is_set()) {
        return Some(ep.clone());
    }
    let port = cluster
        .spec
        .cluster_network
        .as_ref()
        .and_then(|n| n.api_server_port)
        .filter(|p| *p > 0)
        .unwrap_or(6443);
    let user_port = kkc
        .spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.port)
        .filter(|p| *p > 0);
    let host = kkc
        .spec
        .control_plane_load_balancer
        .as_ref()
        .and_then(|lb| lb.host.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| {
            kkc.spec
                .nodes
                .instances
                .iter()
                .find(|h| Role::ControlPlane.served_by(&h.roles()))
                .map(|h| h.internal_address().to_owned())
        })?;
    Some(ApiEndpoint {
        host: Some(host),
        port: Some(user_port.unwrap_or(port)),
    })
}

fn go_arch(uname_m: &str) -> &str {
    match uname_m {
        "x86_64" => "amd64",
        "aarch64" | "arm64" => "arm64",
        other => other,
    }
}

async fn probe_host(
    ctx: &Context,
    kkc: &KKCluster,
    host: &capkk_api::InstanceInfo,
    recorded: Option<String>,
) -> HostProbe {
    let ns = kkc.namespace().unwrap_or_default();
    let host_name = host.host_name();
    let mut probe = HostProbe {
        name: host_name.clone(),
        ..Default::default()
    };
    let auth = hosts::host_auth(kkc, host);
    let bastion = hosts::effective_bastion(kkc);
    let dial = HostDial {
        name: &host_name,
        address: &host.address,
        auth: &auth,
        pinned: &host.host_keys,
        recorded: recorded.as_deref(),
        bastion: bastion.as_ref(),
    };
    // The recorded key stays recorded whatever this probe sees (a mismatch must not re-trust next time).
    probe.host_key = recorded.clone();
    let target = match hosts::target(&ctx.client, &ns, &dial).await {
        Ok(t) => t,
        Err(e) => {
            probe.message = Some(e.to_string());
            return probe;
        }
    };
    let exec = ctx.ssh.executor(&target);
    let req = ExecRequest::new("uname -m; . /etc/os-release 2>/dev/null && echo \"$ID $VERSION_ID\"")
        .timeout(ctx.settings.probe_timeout);
    let start = std::time::Instant::now();
    let res = tokio::time::timeout(ctx.settings.probe_timeout, exec.exec(req)).await;
    ctx.metrics.ssh_command(start.elapsed());
    probe.host_key = recorded.or_else(|| ctx.ssh.observed_fingerprint(&target));
    match res {
        Err(_) => probe.message = Some(format!("no answer within {:?}", ctx.settings.probe_timeout)),
        Ok(Err(e)) => probe.message = Some(e.to_string()),
        Ok(Ok(out)) if !out.success() => {
            probe.reachable = true;
            probe.message = Some(format!("probe command exited {:?}", out.exit_code));
        }
        Ok(Ok(out)) => {
            probe.reachable = true;
            let text = out.stdout_str();
            let mut lines = text.lines();
            let arch = lines.next().map(|a| go_arch(a.trim()).to_owned());
            probe.os = lines
                .next()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty());
            let declared = host.arch.as_deref().unwrap_or("amd64");
            if let Some(a) = arch.as_deref()
                && a != declared
            {
                probe.message = Some(format!(
                    "host architecture is {a} but spec.nodes.instances[{host_name}].arch is {declared}"
                ));
            }
            probe.arch = arch;
        }
    }
    probe
}

/// Addresses of `kkc` that another KKCluster of the namespace also lists: `(address, host, other KKCluster,
/// other host)`, in inventory order.
pub fn shared_addresses(kkc: &KKCluster, others: &[KKCluster]) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    for h in &kkc.spec.nodes.instances {
        for o in others.iter().filter(|o| o.name_any() != kkc.name_any()) {
            if let Some(oh) = o
                .spec
                .nodes
                .instances
                .iter()
                .find(|x| x.address.trim().eq_ignore_ascii_case(h.address.trim()))
            {
                out.push((h.address.clone(), h.host_name(), o.name_any(), oh.host_name()));
            }
        }
    }
    out
}

async fn apply(
    kkc: Arc<KKCluster>,
    cluster: &Cluster,
    ctx: &Arc<Context>,
    status: &mut KKClusterStatus,
) -> Result<Action> {
    let ns = kkc.namespace().unwrap_or_default();
    let name = kkc.name_any();
    let api: Api<KKCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let gen_ = kkc.metadata.generation;

    if let Err(e) = validate(&kkc) {
        let reason = if e.to_string().contains("not supported") {
            reasons::UNSUPPORTED
        } else {
            reasons::INVALID_SPEC
        };
        warn!(error = %e, "Refusing an invalid inventory");
        conditions::set(
            &mut status.conditions,
            cond::READY,
            false,
            reason,
            e.to_string(),
            gen_,
        );
        status.observed_generation = gen_;
        ctx.event(&*kkc, true, reason, "Validate", e.to_string()).await;
        return Ok(Action::await_change());
    }

    // Endpoint.
    let Some(endpoint) = desired_endpoint(&kkc, cluster) else {
        conditions::set(
            &mut status.conditions,
            cond::ENDPOINT_READY,
            false,
            reasons::INVALID_SPEC,
            "no control-plane endpoint: set spec.controlPlaneEndpoint or spec.controlPlaneLoadBalancer.host, or give a host the control-plane role",
            gen_,
        );
        return Ok(Action::await_change());
    };
    if kkc.spec.control_plane_endpoint.as_ref() != Some(&endpoint) {
        let patch = json!({ "spec": { "controlPlaneEndpoint": endpoint } });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube(format!(
                "set KKCluster {name} spec.controlPlaneEndpoint"
            )))?;
        info!(host = ?endpoint.host, port = ?endpoint.port, "Setting the control-plane endpoint");
    }
    conditions::set(
        &mut status.conditions,
        cond::ENDPOINT_READY,
        true,
        reasons::READY,
        format!(
            "{}:{}",
            endpoint.host.clone().unwrap_or_default(),
            endpoint.port.unwrap_or(6443)
        ),
        gen_,
    );

    // Addresses another KKCluster also lists: whichever claims such a host first holds it, the other's
    // claim is refused (KKMachine). Both KKClusters say so.
    let others = ctx.stores.clusters_in(&ns).await;
    let shared = shared_addresses(&kkc, &others);
    if shared.is_empty() {
        conditions::set(
            &mut status.conditions,
            cond::ADDRESSES_UNIQUE,
            true,
            reasons::READY,
            "",
            gen_,
        );
    } else {
        let list: Vec<String> = shared
            .iter()
            .map(|(a, h, o, oh)| format!("{a} (host {h}) is also host {oh} of KKCluster {o}"))
            .collect();
        let msg = format!(
            "{}; a host is provisioned for one KKCluster at a time: the other's claim is refused",
            list.join("; ")
        );
        let changed =
            conditions::get(&status.conditions, cond::ADDRESSES_UNIQUE).is_none_or(|c| c.message != msg);
        conditions::set(
            &mut status.conditions,
            cond::ADDRESSES_UNIQUE,
            false,
            reasons::ADDRESS_IN_USE,
            &msg,
            gen_,
        );
        if changed {
            warn!("{msg}");
            ctx.event(&*kkc, true, reasons::ADDRESS_IN_USE, "Validate", msg)
                .await;
        }
    }

    // This KKCluster's claims (the probes keep the host keys they pinned).
    let all: Vec<Arc<KKInstance>> = ctx
        .stores
        .instances_in(&ns)
        .await
        .into_iter()
        .filter(|i| i.spec.cluster_name.as_deref() == Some(name.as_str()))
        .collect();

    // Probes run in the background (100 unreachable hosts must not hold a reconcile for minutes) and
    // report here through the registry.
    let uid = kkc.uid().unwrap_or_default();
    if ctx.probes.due(&uid, gen_, ctx.settings.probe_interval) {
        start_probes(ctx, &kkc, &all);
    }
    match ctx.probes.latest(&uid) {
        Some(probes) => {
            let bad: Vec<String> = probes
                .iter()
                .filter(|p| !p.reachable || p.message.is_some())
                .map(|p| {
                    format!(
                        "{}: {}",
                        p.name,
                        p.message.clone().unwrap_or_else(|| "unreachable".into())
                    )
                })
                .collect();
            if bad.is_empty() {
                conditions::set(
                    &mut status.conditions,
                    cond::HOSTS_REACHABLE,
                    true,
                    reasons::READY,
                    format!("{} hosts answered", probes.len()),
                    gen_,
                );
            } else {
                conditions::set(
                    &mut status.conditions,
                    cond::HOSTS_REACHABLE,
                    false,
                    reasons::UNREACHABLE,
                    bad.join("; "),
                    gen_,
                );
            }
            status.hosts = probes;
        }
        None if conditions::get(&status.conditions, cond::HOSTS_REACHABLE).is_none() => {
            conditions::set_raw(
                &mut status.conditions,
                cond::HOSTS_REACHABLE,
                "Unknown",
                reasons::IN_PROGRESS,
                format!("probing {} hosts", kkc.spec.nodes.instances.len()),
                gen_,
            );
        }
        None => {}
    }

    status.initialization = Some(capkk_api::Initialization {
        provisioned: Some(true),
    });
    conditions::set(
        &mut status.conditions,
        cond::READY,
        true,
        reasons::READY,
        "",
        gen_,
    );
    status.observed_generation = gen_;
    Ok(Action::requeue(ctx.settings.probe_interval))
}

/// Probe every host of `kkc` in a tracked background task; the result is kept in the probe registry and
/// the KKCluster is reconciled again to report it.
/// Free, claimed and quarantined hosts of `kkc`, given its claims (the `capkk_hosts` gauge).
pub fn pool_counts(kkc: &KKCluster, claims: &[Arc<KKInstance>]) -> (i64, i64, i64) {
    let quarantined = claims.iter().filter(|i| i.spec.quarantine.is_some()).count() as i64;
    let claimed = claims.len() as i64 - quarantined;
    let total = kkc.spec.nodes.instances.len() as i64;
    ((total - claimed - quarantined).max(0), claimed, quarantined)
}

/// Set the `capkk_hosts` gauge of every cached KKCluster from the caches, when metrics are scraped (the
/// only place it is computed: the counts change with KKInstances, and a KKInstance change does not wake its
/// KKCluster). A deleted KKCluster's series go with it.
pub fn record_pools(metrics: &crate::metrics::Metrics, stores: &crate::context::Stores) {
    let instances = stores.instances.state();
    let pools: Vec<_> = stores
        .clusters
        .state()
        .iter()
        .map(|kkc| {
            let (ns, name) = (kkc.namespace(), kkc.name_any());
            let claims: Vec<Arc<KKInstance>> = instances
                .iter()
                .filter(|i| i.namespace() == ns && i.spec.cluster_name.as_deref() == Some(name.as_str()))
                .cloned()
                .collect();
            let (free, claimed, quarantined) = pool_counts(kkc, &claims);
            (ns.unwrap_or_default(), name, free, claimed, quarantined)
        })
        .collect();
    metrics.set_pools(&pools);
}

fn start_probes(ctx: &Arc<Context>, kkc: &KKCluster, claims: &[Arc<KKInstance>]) {
    let uid = kkc.uid().unwrap_or_default();
    let recorded: Vec<Option<String>> = kkc
        .spec
        .nodes
        .instances
        .iter()
        .map(|h| {
            claims
                .iter()
                .find(|i| i.spec.name == h.host_name())
                .and_then(|i| i.spec.host_key.clone())
                // An unclaimed host keeps the key its first probe saw (no re-trust on every probe).
                .or_else(|| hosts::probed_host_key(kkc, h))
        })
        .collect();
    let task_ctx = ctx.clone();
    let task_kkc = kkc.clone();
    let task_uid = uid.clone();
    let handle = tokio::spawn(async move {
        let ctx = task_ctx;
        let kkc = task_kkc;
        let futs: Vec<_> = kkc
            .spec
            .nodes
            .instances
            .iter()
            .zip(recorded)
            .map(|(h, r)| probe_host(&ctx, &kkc, h, r))
            .collect();
        let probes: Vec<HostProbe> = stream::iter(futs)
            .buffered(ctx.settings.probe_concurrency.max(1))
            .collect()
            .await;
        ctx.probes.finish(&task_uid, probes);
        ctx.trigger_cluster(&kkc.name_any(), &kkc.namespace().unwrap_or_default());
    });
    ctx.probes.start(&uid, kkc.metadata.generation, handle);
}

async fn cleanup(kkc: Arc<KKCluster>, ctx: &Context, status: &mut KKClusterStatus) -> Result<Action> {
    let ns = kkc.namespace().unwrap_or_default();
    let name = kkc.name_any();
    let lp = ListParams::default();
    let machines: Api<KKMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let instances: Api<KKInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let ms: Vec<String> = machines
        .list(&lp)
        .await
        .map_err(Error::kube("list KKMachines"))?
        .items
        .into_iter()
        .filter(|m| m.labels().get(KKCLUSTER_NAME_LABEL) == Some(&name))
        .map(|m| m.name_any())
        .collect();
    let is: Vec<String> = instances
        .list(&lp)
        .await
        .map_err(Error::kube("list KKInstances"))?
        .items
        .into_iter()
        .filter(|i| {
            (i.spec.cluster_name.as_deref() == Some(&name)
                || i.labels().get(KKCLUSTER_NAME_LABEL) == Some(&name))
                && i.spec.quarantine.is_none()
        })
        .map(|i| i.name_any())
        .collect();
    if ms.is_empty() && is.is_empty() {
        info!("No KKMachine or claimed KKInstance left; removing the finalizer");
        ctx.probes.forget(&kkc.uid().unwrap_or_default());
        // The workload cluster's cached client and Node watch go with it.
        if let Some(cluster) = crate::capi::capi_owner(&kkc.metadata, "Cluster")
            .map(|o| o.name.clone())
            .or_else(|| kkc.labels().get(capkk_api::consts::CLUSTER_NAME_LABEL).cloned())
        {
            ctx.workloads.forget(&ns, &cluster);
        }
        return Ok(Action::await_change());
    }
    let msg = format!("waiting for KKMachines {ms:?} and KKInstances {is:?} to be deleted");
    info!("{msg}");
    conditions::set(
        &mut status.conditions,
        cond::READY,
        false,
        reasons::DELETING,
        msg,
        kkc.metadata.generation,
    );
    Err(Error::pending(
        "KKMachines/KKInstances of this KKCluster",
        requeue::CLEANUP_POLL,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capkk_api::{Auth, InstanceInfo, KKClusterSpec, LoadBalancer, Nodes};

    fn kkc(hosts: Vec<InstanceInfo>) -> KKCluster {
        KKCluster::new(
            "c",
            KKClusterSpec {
                nodes: Nodes {
                    auth: Auth {
                        password: Some("pw".into()),
                        ..Default::default()
                    },
                    bastion: None,
                    instances: hosts,
                },
                ..Default::default()
            },
        )
    }

    fn host(name: &str, addr: &str) -> InstanceInfo {
        InstanceInfo {
            name: Some(name.to_owned()).filter(|n| !n.is_empty()),
            address: addr.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_host_pool_gauges_follow_the_kkinstance_cache_without_a_kkcluster_reconcile() {
        use kube::runtime::{reflector, watcher::Event};
        let mut c = kkc(vec![
            host("a", "10.0.0.1"),
            host("b", "10.0.0.2"),
            host("d", "10.0.0.3"),
        ]);
        c.metadata.namespace = Some("ns".into());
        let claim = |host: &str, quarantined: bool| {
            let mut i = KKInstance::new(
                &format!("c.{host}"),
                capkk_api::KKInstanceSpec {
                    name: host.into(),
                    cluster_name: Some("c".into()),
                    ..Default::default()
                },
            );
            i.metadata.namespace = Some("ns".into());
            i.spec.quarantine = quarantined.then(|| capkk_api::Quarantine {
                reason: "unreachable".into(),
                since: None,
            });
            i
        };
        let (instances, mut iw) = reflector::store::<KKInstance>();
        let (clusters, mut cw) = reflector::store::<KKCluster>();
        let stores = crate::context::Stores {
            instances,
            clusters,
            machines: reflector::store().0,
            capi_machines: reflector::store().0,
            capi_clusters: reflector::store().0,
        };
        cw.apply_watcher_event(&Event::Apply(c));
        iw.apply_watcher_event(&Event::Apply(claim("a", false)));
        let m = crate::metrics::Metrics::new();
        record_pools(&m, &stores);
        let gauge = |m: &crate::metrics::Metrics, state: &str, v: i64| {
            m.encode().contains(&format!(
                "capkk_hosts{{namespace=\"ns\",kkcluster=\"c\",state=\"{state}\"}} {v}\n"
            ))
        };
        assert!(gauge(&m, "free", 2) && gauge(&m, "claimed", 1) && gauge(&m, "quarantined", 0));
        // A host quarantined (its KKInstance changed, the KKCluster did not): the next scrape counts it.
        iw.apply_watcher_event(&Event::Apply(claim("b", true)));
        record_pools(&m, &stores);
        assert!(gauge(&m, "free", 1) && gauge(&m, "claimed", 1) && gauge(&m, "quarantined", 1));
        // The KKCluster deleted: its series are gone at the next scrape, not frozen at their last values.
        let gone = stores.clusters.state()[0].as_ref().clone();
        cw.apply_watcher_event(&Event::Delete(gone));
        record_pools(&m, &stores);
        assert!(!m.encode().contains("kkcluster=\"c\""), "{}", m.encode());
    }

    #[test]
    fn hosts_without_a_name_validate_and_a_derived_name_collision_is_named() {
        assert!(validate(&kkc(vec![host("", "10.0.0.1"), host("", "10.0.0.2")])).is_ok());
        let e = validate(&kkc(vec![host("10-0-0-1", "10.0.0.9"), host("", "10.0.0.1")])).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("spec.nodes.instances[1].name"), "{msg}");
        assert!(msg.contains("derived from the address"), "{msg}");
    }

    #[test]
    fn validation_names_the_field() {
        let e = validate(&kkc(vec![host("a", "1.1.1.1"), host("a", "1.1.1.2")])).unwrap_err();
        assert!(e.to_string().contains("spec.nodes.instances[1].name"), "{e}");
        let e = validate(&kkc(vec![host("a", "1.1.1.1"), host("b", "1.1.1.1")])).unwrap_err();
        assert!(e.to_string().contains("spec.nodes.instances[1].address"), "{e}");
        let e = validate(&kkc(vec![host("A_x", "1.1.1.1")])).unwrap_err();
        assert!(e.to_string().contains("spec.nodes.instances[0].name"), "{e}");
        let mut k = kkc(vec![host("a", "1.1.1.1")]);
        k.spec.nodes.auth = Auth::default();
        let e = validate(&k).unwrap_err();
        assert!(e.to_string().contains("spec.nodes.instances[0].auth"), "{e}");
        k.spec.distribution = Some("k3s".into());
        assert!(
            validate(&k)
                .unwrap_err()
                .to_string()
                .contains("spec.distribution")
        );
        assert!(validate(&kkc(vec![host("a", "1.1.1.1")])).is_ok());
    }

    #[test]
    fn an_address_listed_by_two_kkclusters_is_reported_on_both() {
        let mut a = kkc(vec![host("node1", "10.0.0.1"), host("node2", "10.0.0.2")]);
        a.metadata.name = Some("a".into());
        let mut b = kkc(vec![host("node1", "10.0.0.9"), host("x", "10.0.0.2")]);
        b.metadata.name = Some("b".into());
        let all = vec![a.clone(), b.clone()];
        assert_eq!(
            shared_addresses(&a, &all),
            vec![("10.0.0.2".into(), "node2".into(), "b".into(), "x".into())]
        );
        assert_eq!(
            shared_addresses(&b, &all),
            vec![("10.0.0.2".into(), "x".into(), "a".into(), "node2".into())]
        );
        // The same host name in two KKClusters is fine.
        let mut c = kkc(vec![host("node1", "10.0.0.3")]);
        c.metadata.name = Some("c".into());
        assert!(shared_addresses(&c, &[a, b, c.clone()]).is_empty());
    }

    #[test]
    fn endpoint_prefers_user_then_lb_then_first_control_plane() {
        let cluster = Cluster::new("c", Default::default());
        let mut k = kkc(vec![
            InstanceInfo {
                roles: Some(vec![Role::Worker]),
                ..host("w", "10.0.0.2")
            },
            host("cp", "10.0.0.1"),
        ]);
        let ep = desired_endpoint(&k, &cluster).unwrap();
        assert_eq!((ep.host.as_deref(), ep.port), (Some("10.0.0.1"), Some(6443)));
        k.spec.control_plane_load_balancer = Some(LoadBalancer {
            host: Some("vip.example".into()),
        });
        let mut c2 = cluster.clone();
        c2.spec.cluster_network = Some(crate::capi::ClusterNetwork {
            api_server_port: Some(7443),
        });
        let ep = desired_endpoint(&k, &c2).unwrap();
        assert_eq!((ep.host.as_deref(), ep.port), (Some("vip.example"), Some(7443)));
        k.spec.control_plane_endpoint = Some(ApiEndpoint {
            host: Some("user".into()),
            port: Some(1),
        });
        assert_eq!(desired_endpoint(&k, &c2).unwrap().host.as_deref(), Some("user"));
    }
}
