//! The host choice of a claim: which hosts of the KKCluster a KKMachine may try, and which addresses are
//! refused because another KKCluster holds them. Pure decisions on the cached objects.

use std::borrow::Borrow;

use capkk_api::{
    InstanceInfo, KKCluster, KKInstance, KKMachine, Role, consts::CONTROL_PLANE_LABEL, names::instance_name,
};
use kube::ResourceExt;

use crate::capi::Machine;

/// The roles a host must serve: the KKMachine's, else derived from the Machine's control-plane label.
pub(crate) fn wanted_roles(km: &KKMachine, machine: &Machine) -> Vec<Role> {
    if !km.spec.roles.is_empty() {
        return km.spec.roles.clone();
    }
    if machine.labels().contains_key(CONTROL_PLANE_LABEL) {
        vec![Role::ControlPlane]
    } else {
        vec![Role::Worker]
    }
}

/// True when `i` claims `host` of KKCluster `kkc` (by name `<kkc>.<host>`, or by spec for claims named
/// after the bare host by earlier versions).
fn claims_host(i: &KKInstance, kkc: &str, host: &str) -> bool {
    i.name_any() == instance_name(kkc, host)
        || (i.spec.name == host && i.spec.cluster_name.as_deref() == Some(kkc))
}

/// The KKInstance of another KKCluster that holds `address`, if any. Deleted ones still hold it (their
/// host is being reset), quarantined ones too.
pub(crate) fn address_holder<'a, I: Borrow<KKInstance>>(
    all: &'a [I],
    kkc: &str,
    address: &str,
) -> Option<&'a KKInstance> {
    all.iter().map(Borrow::borrow).find(|i: &&KKInstance| {
        i.spec.address.eq_ignore_ascii_case(address.trim()) && i.spec.cluster_name.as_deref() != Some(kkc)
    })
}

/// The hosts of `kkc` a KKMachine with `roles` may try, in inventory order, and the free ones refused because
/// another KKCluster holds their address. A host is taken when any KKInstance claims it.
pub(crate) fn choose_hosts<'a, I: Borrow<KKInstance>>(
    kkc: &'a KKCluster,
    roles: &[Role],
    all: &[I],
) -> (Vec<&'a InstanceInfo>, Vec<String>) {
    let kkc_name = kkc.name_any();
    let mut candidates = Vec::new();
    let mut refused = Vec::new();
    for h in kkc
        .spec
        .nodes
        .instances
        .iter()
        .filter(|h| roles.iter().any(|r| r.served_by(&h.roles())))
        .filter(|h| {
            !all.iter()
                .any(|i| claims_host(i.borrow(), &kkc_name, &h.host_name()))
        })
    {
        match address_holder(all, &kkc_name, &h.address) {
            Some(holder) => refused.push(format!(
                "{} ({}) is held by KKInstance {} of KKCluster {}",
                h.host_name(),
                h.address,
                holder.name_any(),
                holder.spec.cluster_name.clone().unwrap_or_default()
            )),
            None => candidates.push(h),
        }
    }
    (candidates, refused)
}

/// True when a KKCluster of `kkclusters` other than `kkc` (same namespace) lists `address`: only then can a
/// claim of another KKCluster compete for it.
pub(crate) fn address_listed_elsewhere<I: Borrow<KKCluster>>(
    kkclusters: &[I],
    kkc: &KKCluster,
    address: &str,
) -> bool {
    let address = address.trim();
    kkclusters.iter().map(Borrow::borrow).any(|o: &KKCluster| {
        o.namespace() == kkc.namespace()
            && o.name_any() != kkc.name_any()
            && o.spec
                .nodes
                .instances
                .iter()
                .any(|h| h.address.trim().eq_ignore_ascii_case(address))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kkmachine::test_objects::*;

    #[test]
    fn host_choice_skips_taken_hosts_and_refuses_addresses_of_other_kkclusters() {
        let a = kkc(
            "a",
            vec![
                host("node1", "10.0.0.1"),
                host("node2", "10.0.0.2"),
                host("node3", "10.0.0.3"),
            ],
        );
        let all = vec![
            // node1 of KKCluster a is taken; b's node1 is another host.
            claim_of("a", "node1", "10.0.0.1"),
            claim_of("b", "node1", "10.0.1.1"),
            // b holds node3's address.
            claim_of("b", "x", "10.0.0.3"),
        ];
        let (candidates, refused) = choose_hosts(&a, &[Role::Worker], &all);
        let names: Vec<String> = candidates.iter().map(|h| h.host_name()).collect();
        assert_eq!(names, ["node2"]);
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0].contains("10.0.0.3") && refused[0].contains("b.x"),
            "{}",
            refused[0]
        );
    }

    #[test]
    fn only_an_address_another_kkcluster_of_the_namespace_lists_can_be_claimed_concurrently() {
        let mut a = kkc("a", vec![host("node1", "10.0.0.1"), host("node2", "10.0.0.2")]);
        let mut b = kkc("b", vec![host("x", " 10.0.0.2 ")]);
        let mut c = kkc("c", vec![host("y", "10.0.0.1")]);
        a.metadata.namespace = Some("ns".into());
        b.metadata.namespace = Some("ns".into());
        c.metadata.namespace = Some("other".into());
        let all = [a.clone(), b, c];
        assert!(address_listed_elsewhere(&all, &a, "10.0.0.2"));
        assert!(
            !address_listed_elsewhere(&all, &a, "10.0.0.1"),
            "its own listing and another namespace's do not count"
        );
        let mut named = kkc("d", vec![host("z", "Node.Example")]);
        named.metadata.namespace = Some("ns".into());
        assert!(address_listed_elsewhere(&[named], &a, "node.example"));
    }

    #[test]
    fn host_choice_honours_roles_and_legacy_claim_names() {
        let mut cp = host("cp", "10.0.0.1");
        cp.roles = Some(vec![Role::ControlPlane]);
        let a = kkc("a", vec![cp, host("w", "10.0.0.2")]);
        // A claim from before 0.2 is named after the bare host.
        let mut legacy = claim_of("a", "w", "10.0.0.2");
        legacy.metadata.name = Some("w".into());
        let (candidates, refused) = choose_hosts(&a, &[Role::ControlPlane], &[legacy.clone()]);
        assert_eq!(candidates.len(), 1);
        assert_eq!(candidates[0].host_name(), "cp");
        assert!(refused.is_empty());
        let (candidates, _) = choose_hosts(&a, &[Role::Worker], &[legacy]);
        // `cp` defaults to no worker role here; `w` is taken by the legacy claim.
        assert!(candidates.iter().all(|h| h.host_name() != "w"));
    }
}
