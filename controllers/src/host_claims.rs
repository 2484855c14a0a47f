//! Host identity: one host is one host, whichever namespace, KKCluster or manager lists it.
//!
//! A KKInstance is a claim inside its namespace only (its name is the lock there), and an address is only a
//! string: `10.0.0.5` in namespace A and `node5.example` in namespace B are the same machine. So before
//! anything runs on a host, the KKInstance takes two Leases in one well-known namespace
//! (`--host-claim-namespace`): one named after the SSH host key the connection saw, one after the address
//! the connection reached. Creating them is create-if-absent, so the API server decides every race, between
//! reconciles, namespaces and managers alike (the host-key Lease decides; see [`claim`]); the loser is refused
//! without a command run on the host.
//!
//! Why Leases in one namespace: tenants get no rights there (they cannot forge or delete a claim), every
//! manager sharing the management cluster can be given the same Role, and no CRD is needed. Why both keys:
//! the host key follows the machine across addresses and names; the address catches a host whose key changed
//! (re-installed) while a claim on the old key is still held.
//!
//! A Lease names its holder (KKInstance namespace/name and UID, and its KKCluster). It is released when the
//! KKInstance goes (after its reset), and taken over when its holder no longer exists (a manager that died
//! between the claim and recording it, a namespace deleted with its finalizers stripped). `clusterctl move`
//! takes no Lease along: the moved KKInstance (a new UID on the target cluster) claims again at its next
//! connection, from what it observes then.

use std::{net::IpAddr, time::Duration};

use capkk_api::KKInstance;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams, Preconditions},
};
use sha2::{Digest, Sha256};

/// Label on every host-claim Lease: what it is keyed by (`host-key` or `address`).
pub const HOST_CLAIM_LABEL: &str = "infrastructure.cluster.x-k8s.io/host-claim";
/// Annotation: the holder KKInstance's UID (a KKInstance re-created under the same name is another claim).
pub const HOLDER_UID_ANNOTATION: &str = "infrastructure.cluster.x-k8s.io/holder-uid";
/// Annotation: the holder's KKCluster (for the refusal message).
pub const HOLDER_KKCLUSTER_ANNOTATION: &str = "infrastructure.cluster.x-k8s.io/holder-kkcluster";
/// Annotation: the key itself (host-key fingerprint or address), for people reading the Lease.
pub const HOST_IDENTITY_ANNOTATION: &str = "infrastructure.cluster.x-k8s.io/host-identity";

/// How a host is known: the fingerprint of its SSH host key and the address the connection reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIdentity {
    /// SHA256 fingerprint of the host key.
    pub host_key: String,
    /// The normalized address (see [`normalize_address`]).
    pub address: String,
}

impl HostIdentity {
    /// The identity of a host dialled at `address` that showed `host_key`; `peer` is the IP address the
    /// connection reached (direct dials), `bastion` the bastion's address when dialled through one.
    pub fn new(host_key: &str, address: &str, peer: Option<IpAddr>, bastion: Option<&str>) -> Self {
        Self {
            host_key: host_key.to_owned(),
            address: normalize_address(address, peer, bastion),
        }
    }

    /// `(kind, Lease name, key)` of each Lease the identity needs, host key first: the host-key Lease decides
    /// a race (see [`claim`]).
    pub fn leases(&self) -> [(&'static str, String, &str); 2] {
        [
            ("host-key", lease_name("key", &self.host_key), &self.host_key),
            ("address", lease_name("addr", &self.address), &self.address),
        ]
    }
}

/// The address a host is known by: the IP address the connection reached when there is one (a DNS name and
/// the address it resolves to are the same host; `::ffff:a.b.c.d` is `a.b.c.d`), else the address as
/// written, lowercased and without a trailing dot. Behind a bastion the bastion resolves and routes, so the
/// address is only meaningful with it: `via <bastion>/<address>`.
pub fn normalize_address(address: &str, peer: Option<IpAddr>, bastion: Option<&str>) -> String {
    let written = address.trim().trim_end_matches('.').to_ascii_lowercase();
    let literal = written
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    let host = match peer.or(literal) {
        Some(ip) => ip.to_canonical().to_string(),
        None => written,
    };
    match bastion {
        Some(b) => format!("via {}/{host}", normalize_address(b, None, None)),
        None => host,
    }
}

/// The Lease name for `key`: a digest, since keys hold characters a name may not (`SHA256:…/+`), and a
/// cryptographic one, since a tenant chooses addresses and must not make one collide with another's host.
pub fn lease_name(kind: &str, key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    format!("capkk-host-{kind}-{}", hex::encode(&digest[..20]))
}

/// The KKInstance a claim is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub instance: String,
    /// Its UID.
    pub uid: String,
    /// Its KKCluster.
    pub kkcluster: String,
}

impl Holder {
    /// The holder of claims made for `inst`.
    pub fn of(inst: &KKInstance) -> Self {
        Self {
            namespace: inst.namespace().unwrap_or_default(),
            instance: inst.name_any(),
            uid: inst.uid().unwrap_or_default(),
            kkcluster: inst.spec.cluster_name.clone().unwrap_or_default(),
        }
    }

    /// `namespace/name`, the Lease's `holderIdentity`.
    pub fn identity(&self) -> String {
        format!("{}/{}", self.namespace, self.instance)
    }

    fn from_lease(lease: &Lease) -> Self {
        let identity = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default();
        let (namespace, instance) = identity.split_once('/').unwrap_or(("", identity.as_str()));
        let annotation = |k: &str| lease.annotations().get(k).cloned().unwrap_or_default();
        Self {
            namespace: namespace.to_owned(),
            instance: instance.to_owned(),
            uid: annotation(HOLDER_UID_ANNOTATION),
            kkcluster: annotation(HOLDER_KKCLUSTER_ANNOTATION),
        }
    }
}

/// The outcome of [`claim`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The holder holds every Lease of the host (names, for [`release`]).
    Held(Vec<String>),
    /// Another KKInstance holds the host.
    Refused {
        /// Who holds it.
        holder: Holder,
        /// By what the host was recognized (`host-key SHA256:…` or `address 10.0.0.5`).
        by: String,
    },
}

impl Outcome {
    /// The refusal as a condition message (None when held).
    pub fn refusal(&self) -> Option<String> {
        match self {
            Outcome::Held(_) => None,
            Outcome::Refused { holder, by } => Some(format!(
                "the host ({by}) is held by KKInstance {}/{} of KKCluster {}/{}: one host is provisioned for \
                 one claim at a time, whichever namespace lists it; nothing was run on it",
                holder.namespace, holder.instance, holder.namespace, holder.kkcluster
            )),
        }
    }
}

/// How long a claim that holds the host-key Lease waits for the address Lease to be given back before it is
/// refused (see [`claim`]).
pub const ADDRESS_RACE_WAIT: Duration = Duration::from_secs(5);

/// Take both Leases of `id` for `holder` in `lease_ns`, or learn who holds the host. Leases this call created
/// are given back when it is refused (a half-held host would block both claimants).
///
/// Both are requested at once (one API round trip instead of two, each a few hundred milliseconds on a loaded
/// API server while many hosts are claimed). The host-key Lease decides: it is created once, so of claims
/// racing for one host exactly one holds it, and the others are refused and give back the address Lease they
/// may have created meanwhile. The holder of the host-key Lease that finds the address Lease held waits for it
/// (up to [`ADDRESS_RACE_WAIT`]) before it is refused too: the other may be such a loser, about to give it
/// back, or a claim of another machine that had this address.
pub async fn claim(
    client: &Client,
    lease_ns: &str,
    id: &HostIdentity,
    holder: &Holder,
) -> Result<Outcome, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), lease_ns);
    let [(key_kind, key_name, key), (addr_kind, addr_name, addr)] = id.leases();
    let (by_key, mut by_addr) = tokio::join!(
        acquire(client, &leases, key_kind, &key_name, key, holder),
        acquire(client, &leases, addr_kind, &addr_name, addr, holder),
    );
    let mut created = Vec::new();
    if matches!(by_key, Ok(Acquired::Created)) {
        created.push(key_name.clone());
    }
    if matches!(by_addr, Ok(Acquired::Created)) {
        created.push(addr_name.clone());
    }
    match by_key {
        Ok(Acquired::Created | Acquired::Already) => {}
        Ok(Acquired::HeldBy(other)) => {
            release(client, lease_ns, &created, &holder.uid).await?;
            return Ok(Outcome::Refused {
                holder: other,
                by: format!("{key_kind} {key}"),
            });
        }
        Err(e) => {
            // Best effort: a Lease left behind is taken over once this holder is gone.
            let _ = release(client, lease_ns, &created, &holder.uid).await;
            return Err(e);
        }
    }
    let deadline = tokio::time::Instant::now() + ADDRESS_RACE_WAIT;
    let mut pause = Duration::from_millis(50);
    loop {
        match by_addr {
            Ok(Acquired::Created | Acquired::Already) => return Ok(Outcome::Held(vec![key_name, addr_name])),
            Ok(Acquired::HeldBy(other)) if tokio::time::Instant::now() + pause > deadline => {
                release(client, lease_ns, &created, &holder.uid).await?;
                return Ok(Outcome::Refused {
                    holder: other,
                    by: format!("{addr_kind} {addr}"),
                });
            }
            Ok(Acquired::HeldBy(_)) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                by_addr = acquire(client, &leases, addr_kind, &addr_name, addr, holder).await;
            }
            Err(e) => {
                let _ = release(client, lease_ns, &created, &holder.uid).await;
                return Err(e);
            }
        }
    }
}

enum Acquired {
    Created,
    Already,
    HeldBy(Holder),
}

async fn acquire(
    client: &Client,
    leases: &Api<Lease>,
    kind: &str,
    name: &str,
    key: &str,
    holder: &Holder,
) -> Result<Acquired, kube::Error> {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(HOST_CLAIM_LABEL.to_owned(), kind.to_owned())].into()),
            annotations: Some(
                [
                    (HOLDER_UID_ANNOTATION.to_owned(), holder.uid.clone()),
                    (HOLDER_KKCLUSTER_ANNOTATION.to_owned(), holder.kkcluster.clone()),
                    (HOST_IDENTITY_ANNOTATION.to_owned(), key.to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.identity()),
            ..Default::default()
        }),
    };
    // Two rounds: the second follows the takeover of a Lease whose holder is gone.
    for _ in 0..2 {
        match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => return Ok(Acquired::Created),
            Err(e) if is_status(&e, 409) => {}
            Err(e) => return Err(e),
        }
        let Some(current) = leases.get_opt(name).await? else {
            continue; // released meanwhile: create again
        };
        let other = Holder::from_lease(&current);
        if other.uid == holder.uid && other.identity() == holder.identity() {
            return Ok(Acquired::Already);
        }
        if !holder_gone(client, &other).await {
            return Ok(Acquired::HeldBy(other));
        }
        delete_as_read(leases, name, &current).await?;
    }
    // Lost the takeover race twice: whoever holds it now is the holder.
    match leases.get_opt(name).await? {
        Some(current) => Ok(Acquired::HeldBy(Holder::from_lease(&current))),
        None => Ok(Acquired::HeldBy(Holder {
            namespace: String::new(),
            instance: "(released during the claim)".into(),
            uid: String::new(),
            kkcluster: String::new(),
        })),
    }
}

/// True only when the holder KKInstance certainly no longer exists (not found, or a new object under its
/// name). Anything else (no right to read that namespace, an error) counts as held: a false "gone" would
/// let two claims run on one host.
async fn holder_gone(client: &Client, holder: &Holder) -> bool {
    // Written by a manager, but a path segment all the same: a name that is no object name counts as held.
    if !capkk_api::is_dns_subdomain(&holder.namespace) || !capkk_api::is_dns_subdomain(&holder.instance) {
        return false;
    }
    let api: Api<KKInstance> = Api::namespaced(client.clone(), &holder.namespace);
    match api.get_opt(&holder.instance).await {
        Ok(None) => true,
        Ok(Some(i)) => i.uid().as_deref() != Some(holder.uid.as_str()),
        Err(_) => false,
    }
}

/// Give back the Leases `names` held by the KKInstance with UID `uid` (ones held by another are left alone).
pub async fn release(
    client: &Client,
    lease_ns: &str,
    names: &[String],
    uid: &str,
) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), lease_ns);
    for name in names {
        let Some(current) = leases.get_opt(name).await? else {
            continue;
        };
        if current
            .annotations()
            .get(HOLDER_UID_ANNOTATION)
            .map(String::as_str)
            != Some(uid)
        {
            continue;
        }
        delete_as_read(&leases, name, &current).await?;
    }
    Ok(())
}

/// Delete Lease `name` only as it was read (`current`): one changed or taken over meanwhile is kept, and one
/// already gone is fine.
async fn delete_as_read(leases: &Api<Lease>, name: &str, current: &Lease) -> Result<(), kube::Error> {
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: current.uid(),
            resource_version: current.resource_version(),
        }),
        ..Default::default()
    };
    match leases.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(e) => Err(e),
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dns_name_and_the_address_it_reached_are_one_host_and_written_forms_of_an_address_agree() {
        let ip: IpAddr = "198.18.5.11".parse().unwrap();
        assert_eq!(normalize_address("198.18.5.11", Some(ip), None), "198.18.5.11");
        assert_eq!(normalize_address("Node5.Example.", Some(ip), None), "198.18.5.11");
        let mapped: IpAddr = "::ffff:198.18.5.11".parse().unwrap();
        assert_eq!(normalize_address("node5", Some(mapped), None), "198.18.5.11");
        assert_eq!(normalize_address(" [FD00::A:1] ", None, None), "fd00::a:1");
        assert_eq!(normalize_address("Node5.Example.", None, None), "node5.example");
        assert_eq!(
            normalize_address("10.0.0.5", None, Some("Bastion.Example")),
            "via bastion.example/10.0.0.5",
            "behind a bastion an address means something else than on the manager's network"
        );
    }

    #[test]
    fn lease_names_are_valid_object_names_and_differ_by_kind_and_key() {
        let id = HostIdentity::new("SHA256:abc/+def", "10.0.0.5", None, None);
        let [(k1, key, _), (k2, addr, _)] = id.leases();
        assert_eq!((k1, k2), ("host-key", "address"));
        for n in [&key, &addr] {
            assert!(capkk_api::is_dns_subdomain(n) && n.len() <= 63, "{n}");
        }
        assert_ne!(key, addr);
        assert_ne!(key, lease_name("key", "SHA256:abc/+deg"));
    }

    #[test]
    fn a_refusal_names_the_holders_namespace_and_kkcluster() {
        let o = Outcome::Refused {
            holder: Holder {
                namespace: "tenant-a".into(),
                instance: "c.node5".into(),
                uid: "u".into(),
                kkcluster: "c".into(),
            },
            by: "host-key SHA256:x".into(),
        };
        let m = o.refusal().unwrap();
        assert!(
            m.contains("tenant-a/c.node5") && m.contains("KKCluster tenant-a/c") && m.contains("SHA256:x"),
            "{m}"
        );
        assert_eq!(Outcome::Held(vec![]).refusal(), None);
    }

    /// A scripted API server for [`claim`]: the Leases in `held` (name → holder) exist; `frees_after` is how
    /// many refused creates of each held Lease pass before its holder gives it back. Every KKInstance a Lease
    /// names exists (its holder is alive).
    mod api {
        use std::{
            collections::BTreeMap,
            sync::{Arc, Mutex},
        };

        use serde_json::{Value, json};

        use super::*;
        use crate::fixtures::{Served, TestContext};

        pub(super) const NS: &str = "capkk-host-claims";

        pub(super) fn lease(name: &str, h: &Holder) -> Value {
            json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": { "name": name, "namespace": NS, "uid": format!("lease-{name}"),
                    "resourceVersion": "1",
                    "annotations": { HOLDER_UID_ANNOTATION: h.uid, HOLDER_KKCLUSTER_ANNOTATION: h.kkcluster } },
                "spec": { "holderIdentity": h.identity() },
            })
        }

        pub(super) fn serve(
            t: TestContext,
            held: Vec<(String, Holder)>,
            frees_after: usize,
        ) -> (Client, Served) {
            let state = Arc::new(Mutex::new((
                BTreeMap::<String, Value>::new(),
                BTreeMap::<String, usize>::new(),
            )));
            {
                let mut s = state.lock().unwrap();
                for (name, h) in &held {
                    s.0.insert(name.clone(), lease(name, h));
                }
            }
            let client = t.ctx.client.clone();
            let served = t.api.serve_calls(move |call| {
                let mut s = state.lock().unwrap();
                let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
                let name = call.path.strip_prefix(&format!("{leases}/")).map(str::to_owned);
                match (call.method.as_str(), name) {
                    ("POST", None) if call.path == leases => {
                        let name = call.body["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        let (leases, refusals) = &mut *s;
                        match leases.entry(name.clone()) {
                            std::collections::btree_map::Entry::Occupied(taken) => {
                                let refused = refusals.entry(name.clone()).or_default();
                                *refused += 1;
                                if *refused > frees_after && held.iter().any(|(n, _)| *n == name) {
                                    taken.remove();
                                }
                                call.already_exists();
                            }
                            std::collections::btree_map::Entry::Vacant(free) => {
                                let body = call.body.clone();
                                free.insert(body.clone());
                                call.created(&body);
                            }
                        }
                        None
                    }
                    ("GET", Some(name)) => {
                        match s.0.get(&name) {
                            Some(l) => call.reply(&l.clone()),
                            None => call.not_found(),
                        }
                        None
                    }
                    ("DELETE", Some(name)) => {
                        s.0.remove(&name);
                        call.reply(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
                        None
                    }
                    ("GET", None) if call.path.contains("/kkinstances/") => {
                        // Every holder is alive: its KKInstance exists with the UID the Lease names.
                        let path = call.path.clone();
                        let (ns, name) = path
                            .split_once("/namespaces/")
                            .and_then(|(_, rest)| rest.split_once("/kkinstances/"))
                            .unwrap_or_default();
                        call.reply(&json!({
                            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "KKInstance",
                            "metadata": { "name": name, "namespace": ns, "uid": format!("uid-{name}") },
                            "spec": { "name": "node", "address": "198.18.0.1" },
                        }));
                        None
                    }
                    _ => Some(call),
                }
            });
            (client, served)
        }
    }

    fn holder(name: &str) -> Holder {
        Holder {
            namespace: format!("ns-{name}"),
            instance: name.into(),
            uid: format!("uid-{name}"),
            kkcluster: format!("kkc-{name}"),
        }
    }

    fn deleted(requests: &[(String, String, serde_json::Value)]) -> Vec<String> {
        requests
            .iter()
            .filter(|(m, _, _)| m == "DELETE")
            .map(|(_, p, _)| p.rsplit('/').next().unwrap_or_default().to_owned())
            .collect()
    }

    fn refused(by_holder: &str, by: &str) -> Outcome {
        Outcome::Refused {
            holder: holder(by_holder),
            by: by.into(),
        }
    }

    /// One claim of host `198.18.0.1` (host key `SHA256:key`) by "me" against the scripted API server.
    struct Run {
        out: Outcome,
        took: Duration,
        deleted: Vec<String>,
        key: String,
        addr: String,
    }

    /// Claim as "me" while the Leases `held(key, addr)` names exist (see [`api::serve`] for `frees_after`).
    async fn claim_with(held: impl FnOnce(&str, &str) -> Vec<(String, Holder)>, frees_after: usize) -> Run {
        let id = HostIdentity::new("SHA256:key", "198.18.0.1", None, None);
        let [(_, key, _), (_, addr, _)] = id.leases();
        let t = crate::fixtures::TestContext::new();
        let (client, served) = api::serve(t, held(&key, &addr), frees_after);
        let started = tokio::time::Instant::now();
        let out = claim(&client, api::NS, &id, &holder("me")).await.unwrap();
        let took = started.elapsed();
        Run {
            out,
            took,
            deleted: deleted(&served.finish()),
            key,
            addr,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_host_key_holder_takes_the_address_lease_a_racing_loser_gives_back() {
        // Another claim created the address Lease in the same instant; refused on the host key, it gives it
        // back after the first two tries.
        let r = claim_with(|_, addr| vec![(addr.to_owned(), holder("loser"))], 2).await;
        assert_eq!(r.out, Outcome::Held(vec![r.key, r.addr]));
        assert!(r.took < ADDRESS_RACE_WAIT, "{:?}", r.took);
        assert!(r.deleted.is_empty(), "nothing of this claim given back");
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_lease_another_claim_keeps_refuses_the_host_after_the_wait_and_gives_back_the_host_key()
     {
        let r = claim_with(|_, addr| vec![(addr.to_owned(), holder("other"))], usize::MAX).await;
        assert_eq!(r.out, refused("other", "address 198.18.0.1"));
        assert!(
            r.took >= ADDRESS_RACE_WAIT / 2 && r.took <= ADDRESS_RACE_WAIT,
            "{:?}",
            r.took
        );
        assert_eq!(r.deleted, [r.key], "the host-key Lease it created is given back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_key_held_by_another_refuses_at_once_and_gives_back_the_address_lease_created_beside_it() {
        let r = claim_with(|key, _| vec![(key.to_owned(), holder("winner"))], usize::MAX).await;
        assert_eq!(r.out, refused("winner", "host-key SHA256:key"));
        assert_eq!(r.took, Duration::ZERO, "no wait");
        assert_eq!(r.deleted, [r.addr]);
    }
}
