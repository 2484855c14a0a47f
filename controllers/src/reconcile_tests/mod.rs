//! Reconcile unit tests: the real reconcilers against the scripted API server and the fake host seams of
//! [`crate::fixtures`]. Each test states one decision of a claim, a mirror, a cleanup or the host state
//! machine, and the exact requests it takes; together they run in milliseconds. The process tests in
//! `controllers/tests/` show the same behaviours end to end against the real apiserver and sandbox hosts.

mod inplace;
mod kkinstance;
mod kkmachine;
mod kkremediation;

use std::{future::Future, sync::Arc};

use capkk_api::{
    Auth, InstanceInfo, KKCluster, KKClusterSpec, KKClusterStatus, KKInstance, KKInstanceSpec, KKMachine,
    KKMachineSpec, Nodes,
    consts::{CLUSTER_NAME_LABEL, KKCLUSTER_NAME_LABEL, KKINSTANCE_FINALIZER, KKMACHINE_FINALIZER},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::runtime::controller::Action;

use crate::{
    Result,
    capi::{Cluster, ClusterSpec, ContractRef, Machine, MachineBootstrap, MachineSpec},
    context::Context,
    fixtures::{ApiServer, NS, controller_ref, stored},
    reconcile::{Reconciler, reconcile},
};

/// The paths the reconcilers use, under [`NS`].
fn path(plural: &str, name: &str) -> String {
    let group = match plural {
        "machines" | "clusters" => "cluster.x-k8s.io/v1beta2",
        _ => capkk_api::API_VERSION,
    };
    let base = if plural == "secrets" {
        "/api/v1".to_owned()
    } else {
        format!("/apis/{group}")
    };
    match name {
        "" => format!("{base}/namespaces/{NS}/{plural}"),
        n => format!("{base}/namespaces/{NS}/{plural}/{n}"),
    }
}

const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";

/// CAPI Cluster `c` whose infrastructure is KKCluster `c`.
fn capi_cluster() -> Cluster {
    stored(Cluster::new(
        "c",
        ClusterSpec {
            infrastructure_ref: Some(ContractRef {
                api_group: capkk_api::GROUP.into(),
                kind: "KKCluster".into(),
                name: "c".into(),
            }),
            ..Default::default()
        },
    ))
}

/// The provisioned KKCluster `c` with inline credentials (no Secret is read) and `hosts` as `(name, address)`.
fn kkcluster(hosts: &[(&str, &str)]) -> KKCluster {
    kkcluster_named("c", hosts)
}

fn kkcluster_named(name: &str, hosts: &[(&str, &str)]) -> KKCluster {
    let mut k = stored(KKCluster::new(
        name,
        KKClusterSpec {
            nodes: Nodes {
                auth: Auth {
                    user: Some("root".into()),
                    password: Some("fixture-password".into()),
                    ..Default::default()
                },
                bastion: None,
                instances: hosts
                    .iter()
                    .map(|(n, a)| InstanceInfo {
                        name: Some((*n).into()),
                        address: (*a).into(),
                        ..Default::default()
                    })
                    .collect(),
            },
            ..Default::default()
        },
    ));
    k.status = Some(KKClusterStatus {
        initialization: Some(capkk_api::Initialization {
            provisioned: Some(true),
        }),
        ..Default::default()
    });
    k
}

/// CAPI Machine `m` of Cluster `c`, pointing at KKMachine `m`, with bootstrap data in Secret `data`.
fn machine() -> Machine {
    let mut m = stored(Machine::new(
        "m",
        MachineSpec {
            cluster_name: "c".into(),
            bootstrap: MachineBootstrap {
                data_secret_name: Some("data".into()),
                ..Default::default()
            },
            infrastructure_ref: Some(ContractRef {
                api_group: capkk_api::GROUP.into(),
                kind: "KKMachine".into(),
                name: "m".into(),
            }),
            version: Some("v1.34.1".into()),
            provider_id: None,
        },
    ));
    m.metadata.labels = Some([(CLUSTER_NAME_LABEL.to_owned(), "c".to_owned())].into());
    m
}

/// KKMachine `m` owned by Machine `m`, labelled for Cluster and KKCluster `c`, finalizer in place.
fn kkmachine() -> KKMachine {
    let mut km = stored(KKMachine::new("m", KKMachineSpec::default()));
    let owner = machine();
    km.metadata.owner_references = Some(vec![OwnerReference {
        controller: Some(true),
        ..controller_ref(&owner)
    }]);
    km.metadata.labels = Some(
        [
            (CLUSTER_NAME_LABEL.to_owned(), "c".to_owned()),
            (KKCLUSTER_NAME_LABEL.to_owned(), "c".to_owned()),
        ]
        .into(),
    );
    km.metadata.finalizers = Some(vec![KKMACHINE_FINALIZER.into()]);
    km
}

/// The KKInstance `c.<host>` claimed by `owner`, finalizer in place, annotations `annotations`.
fn claim(owner: &KKMachine, host: &str, address: &str, annotations: &[(&str, &str)]) -> KKInstance {
    let mut i = stored(KKInstance::new(
        &format!("c.{host}"),
        KKInstanceSpec {
            name: host.into(),
            address: address.into(),
            cluster_name: Some("c".into()),
            provider_id: Some(format!("kk:///c/{host}")),
            bootstrap_data_secret_ref: Some(capkk_api::SecretRef { name: "data".into() }),
            ..Default::default()
        },
    ));
    i.metadata.owner_references = Some(vec![controller_ref(owner)]);
    i.metadata.labels = Some(
        [
            (CLUSTER_NAME_LABEL.to_owned(), "c".to_owned()),
            (KKCLUSTER_NAME_LABEL.to_owned(), "c".to_owned()),
        ]
        .into(),
    );
    i.metadata.finalizers = Some(vec![KKINSTANCE_FINALIZER.into()]);
    i.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    i
}

/// `obj` deleted (a deletion timestamp; the finalizers keep it).
fn deleted<K: kube::Resource>(mut obj: K) -> K {
    obj.meta_mut().deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    obj
}

/// Reconcile `obj` while `script` answers the API server, and check that the reconcile asked for nothing
/// beyond the script.
async fn scripted<K, F, Fut>(ctx: Arc<Context>, api: ApiServer, obj: K, script: F) -> Result<Action>
where
    K: Reconciler,
    F: FnOnce(ApiServer) -> Fut,
    Fut: Future<Output = ApiServer> + Send + 'static,
{
    let server = api.script(script);
    let res = reconcile(Arc::new(obj), ctx.clone()).await;
    server.finish(ctx).await;
    res
}
