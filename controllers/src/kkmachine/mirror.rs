//! The KKInstance's progress mirrored into the KKMachine status: the contract fields (`provisioned`,
//! addresses), the phase and the `Ready` summary.

use std::net::IpAddr;

use capkk_api::{
    InstanceState, KKInstance, KKMachineStatus, MachineAddress, MachinePhase,
    consts::{FAILED_ANNOTATION, conditions as cond, reasons},
};
use kube::ResourceExt;

use crate::conditions;

/// Whether this reconcile is the first to report the KKMachine provisioned (`before` is the status it
/// read, `now` the one it will write).
pub(crate) fn newly_provisioned(before: Option<&KKMachineStatus>, now: &KKMachineStatus) -> bool {
    let provisioned = |s: Option<&KKMachineStatus>| {
        s.and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.provisioned)
            == Some(true)
    };
    provisioned(Some(now)) && !provisioned(before)
}

/// The machine addresses of a host: InternalIP, ExternalIP (ExternalDNS when the SSH address is a name),
/// Hostname.
pub(crate) fn addresses(inst: &KKInstance) -> Vec<MachineAddress> {
    let internal = inst
        .spec
        .internal_address
        .clone()
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| inst.spec.address.clone());
    let external_type = if inst.spec.address.parse::<IpAddr>().is_ok() {
        "ExternalIP"
    } else {
        "ExternalDNS"
    };
    let mut addrs = vec![
        MachineAddress {
            type_: "InternalIP".into(),
            address: internal,
        },
        MachineAddress {
            type_: external_type.into(),
            address: inst.spec.address.clone(),
        },
        MachineAddress {
            type_: "Hostname".into(),
            address: inst.spec.name.clone(),
        },
    ];
    addrs.dedup();
    addrs
}

/// True when the KKInstance's status says its host is provisioned.
pub(crate) fn instance_provisioned(inst: &KKInstance) -> bool {
    inst.status.as_ref().is_some_and(|s| {
        conditions::is_true(&s.conditions, cond::PROVISIONED) || s.state == Some(InstanceState::Running)
    })
}

/// Copy the KKInstance's progress into the KKMachine status. `reported_provisioned`: this manager's host
/// work reported the host provisioned, and the KKInstance in the cache may not say so yet.
pub(crate) fn mirror(
    status: &mut KKMachineStatus,
    inst: &KKInstance,
    reported_provisioned: bool,
    gen_: Option<i64>,
) {
    let ist = inst.status.clone().unwrap_or_default();
    conditions::set_ready(
        &mut status.conditions,
        cond::HOST_CLAIMED,
        format!("host {} ({})", inst.spec.name, inst.spec.address),
        gen_,
    );
    let ready = conditions::get(&ist.conditions, cond::READY);
    if inst.annotations().get(FAILED_ANNOTATION).map(String::as_str) == Some(reasons::HOST_IN_USE) {
        // The KKInstance is this namespace's claim, but the host is another's (same host key or address,
        // any namespace): the machine has no host, and says whose it is.
        let msg = ready.map(|c| c.message.clone()).unwrap_or_default();
        conditions::set(
            &mut status.conditions,
            cond::HOST_CLAIMED,
            false,
            reasons::HOST_IN_USE,
            msg,
            gen_,
        );
    }
    match ready {
        Some(c) => conditions::set_raw(
            &mut status.conditions,
            cond::INSTANCE_READY,
            &c.status,
            &c.reason,
            c.message.clone(),
            gen_,
        ),
        None => conditions::set_raw(
            &mut status.conditions,
            cond::INSTANCE_READY,
            "Unknown",
            reasons::IN_PROGRESS,
            "waiting for the KKInstance to report",
            gen_,
        ),
    }
    // `Running` is re-derived from the KKInstance's annotations, so it holds again after `clusterctl move`
    // (which copies neither status); the `Provisioned` condition is host work's own report.
    let provisioned = reported_provisioned
        || instance_provisioned(inst)
        || status.initialization.as_ref().and_then(|i| i.provisioned) == Some(true);
    if provisioned {
        status.initialization = Some(capkk_api::Initialization {
            provisioned: Some(true),
        });
        status.addresses = addresses(inst);
    }
    status.step = ist.step.clone();
    status.phase = Some(match (provisioned, ist.state) {
        (_, Some(InstanceState::Quarantined | InstanceState::Failed)) => MachinePhase::Failed,
        (true, _) => MachinePhase::Provisioned,
        (false, None | Some(InstanceState::Pending)) => MachinePhase::Claimed,
        (false, _) => MachinePhase::Provisioning,
    });
    let instance_ready = ready.is_some_and(|c| c.status == "True");
    if provisioned && instance_ready {
        conditions::set_ready(&mut status.conditions, cond::READY, "", gen_);
    } else {
        let (reason, msg) = ready
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap_or_else(|| (reasons::IN_PROGRESS.into(), "host work pending".into()));
        conditions::set(&mut status.conditions, cond::READY, false, &reason, msg, gen_);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kkmachine::test_objects::*;
    use capkk_api::{KKInstanceStatus, consts::COMPLETED_PHASES_ANNOTATION};

    #[test]
    fn a_dns_address_is_reported_as_external_dns() {
        let mut i = claim_of("a", "n", "node.example.com");
        i.spec.internal_address = Some("10.0.0.5".into());
        let types: Vec<(String, String)> = addresses(&i).into_iter().map(|a| (a.type_, a.address)).collect();
        assert_eq!(
            types,
            [
                ("InternalIP".to_owned(), "10.0.0.5".to_owned()),
                ("ExternalDNS".to_owned(), "node.example.com".to_owned()),
                ("Hostname".to_owned(), "n".to_owned()),
            ]
        );
        let ip = claim_of("a", "n", "10.0.0.6");
        assert!(
            addresses(&ip)
                .iter()
                .any(|a| a.type_ == "ExternalIP" && a.address == "10.0.0.6")
        );
    }

    #[test]
    fn provisioned_is_reported_before_the_workload_node_is_looked_for() {
        let provisioned = KKMachineStatus {
            initialization: Some(capkk_api::Initialization {
                provisioned: Some(true),
            }),
            ..Default::default()
        };
        let pending = KKMachineStatus::default();
        assert!(newly_provisioned(None, &provisioned));
        assert!(newly_provisioned(Some(&pending), &provisioned));
        assert!(
            !newly_provisioned(Some(&provisioned), &provisioned),
            "reported already: now the Node"
        );
        assert!(!newly_provisioned(Some(&pending), &pending));
    }

    #[test]
    fn mirror_maps_the_instance_state_to_the_machine_phase() {
        let cases = [
            (None, vec![], MachinePhase::Claimed),
            (Some(InstanceState::Pending), vec![], MachinePhase::Claimed),
            (
                Some(InstanceState::Bootstrapping),
                vec![],
                MachinePhase::Provisioning,
            ),
            (
                Some(InstanceState::Failed),
                vec![cond(cond::READY, "False", reasons::COMMAND_FAILED)],
                MachinePhase::Failed,
            ),
            (Some(InstanceState::Quarantined), vec![], MachinePhase::Failed),
            (
                Some(InstanceState::Running),
                vec![
                    cond(cond::PROVISIONED, "True", reasons::READY),
                    cond(cond::READY, "True", reasons::READY),
                ],
                MachinePhase::Provisioned,
            ),
        ];
        for (state, conds, want) in cases {
            let mut i = claim_of("a", "n", "10.0.0.1");
            i.status = Some(KKInstanceStatus {
                state,
                conditions: conds,
                ..Default::default()
            });
            let mut st = KKMachineStatus::default();
            mirror(&mut st, &i, false, Some(1));
            assert_eq!(st.phase, Some(want), "{state:?}");
        }
    }

    #[test]
    fn a_moved_host_reports_provisioned_again_from_its_annotations() {
        // After `clusterctl move` neither status exists; the KKInstance's annotations say every phase ran.
        let mut i = claim_of("a", "n", "10.0.0.1");
        i.metadata.annotations = Some(
            [(
                COMPLETED_PHASES_ANNOTATION.to_owned(),
                "bootstrap,repository,binary,containermanager,provisioning".to_owned(),
            )]
            .into(),
        );
        let state = crate::kkinstance::classify(&i, crate::kkinstance::ClaimRecord::Recorded, None);
        assert_eq!(state, crate::kkinstance::HostState::Provisioned);
        i.status = Some(KKInstanceStatus {
            state: Some(state.reported(&i)),
            conditions: vec![cond(cond::READY, "True", reasons::READY)],
            ..Default::default()
        });
        let mut st = KKMachineStatus::default();
        mirror(&mut st, &i, false, Some(1));
        assert_eq!(st.initialization.as_ref().and_then(|x| x.provisioned), Some(true));
        assert_eq!(st.phase, Some(MachinePhase::Provisioned));
        assert!(conditions::is_true(&st.conditions, cond::READY));
    }

    #[test]
    fn mirror_copies_a_terminal_failure_and_provisioned_sets_the_contract_fields() {
        let mut i = claim_of("a", "n", "10.0.0.1");
        i.status = Some(KKInstanceStatus {
            state: Some(InstanceState::Failed),
            conditions: vec![cond(cond::READY, "False", reasons::COMMAND_FAILED)],
            ..Default::default()
        });
        let mut st = KKMachineStatus::default();
        mirror(&mut st, &i, false, Some(1));
        let ir = conditions::get(&st.conditions, cond::INSTANCE_READY).unwrap();
        assert_eq!(
            (ir.status.as_str(), ir.reason.as_str()),
            ("False", reasons::COMMAND_FAILED)
        );
        assert!(!conditions::is_true(&st.conditions, cond::READY));
        assert!(st.initialization.is_none() && st.addresses.is_empty());

        i.status = Some(KKInstanceStatus {
            state: Some(InstanceState::Running),
            conditions: vec![
                cond(cond::PROVISIONED, "True", reasons::READY),
                cond(cond::READY, "True", reasons::READY),
            ],
            ..Default::default()
        });
        mirror(&mut st, &i, false, Some(1));
        assert_eq!(st.initialization.as_ref().and_then(|x| x.provisioned), Some(true));
        assert!(conditions::is_true(&st.conditions, cond::READY));
        assert_eq!(st.addresses.len(), 3);
    }

    #[test]
    fn a_host_reported_provisioned_by_host_work_is_provisioned_before_the_kkinstance_says_so() {
        let mut i = claim_of("a", "n", "10.0.0.1");
        i.status = Some(KKInstanceStatus {
            state: Some(InstanceState::Provisioning),
            step: Some("step 5/5: provisioning".into()),
            ..Default::default()
        });
        let mut st = KKMachineStatus::default();
        mirror(&mut st, &i, true, Some(1));
        assert_eq!(st.initialization.as_ref().and_then(|x| x.provisioned), Some(true));
        assert_eq!(st.phase, Some(MachinePhase::Provisioned));
        assert!(!st.addresses.is_empty());
        assert!(
            !conditions::is_true(&st.conditions, cond::READY),
            "Ready waits for the KKInstance's own Ready"
        );
        assert!(!instance_provisioned(&i));
    }
}
