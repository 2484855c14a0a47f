//! Addresses a KKCluster shares with another KKCluster of its namespace: whichever claims such a host first
//! holds it, and both KKClusters report the overlap.

use capkk_api::{
    KKCluster, KKClusterStatus,
    consts::{conditions as cond, reasons},
};
use kube::ResourceExt;
use tracing::warn;

use crate::{conditions, context::Context};

/// Addresses of `kkc` that another KKCluster of the namespace also lists: `(address, host, other KKCluster,
/// other host)`, in inventory order.
pub(crate) fn shared_addresses(
    kkc: &KKCluster,
    others: &[KKCluster],
) -> Vec<(String, String, String, String)> {
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

/// Set `AddressesUnique` on `status` from the KKClusters of the namespace; an overlap is also an event, once
/// per change of the message.
pub(crate) async fn report_shared_addresses(kkc: &KKCluster, ctx: &Context, status: &mut KKClusterStatus) {
    let ns = kkc.namespace().unwrap_or_default();
    let gen_ = kkc.metadata.generation;
    let others = ctx.stores.clusters_in(&ns).await;
    let shared = shared_addresses(kkc, &others);
    if shared.is_empty() {
        conditions::set_ready(&mut status.conditions, cond::ADDRESSES_UNIQUE, "", gen_);
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
            ctx.event(kkc, true, reasons::ADDRESS_IN_USE, "Validate", msg)
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kkcluster::test_objects::*;

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
}
