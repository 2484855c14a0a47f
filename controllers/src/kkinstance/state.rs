//! The host state machine: where a KKInstance is, decided from what survives a restart or `clusterctl
//! move` (spec, annotations), whether its KKMachine recorded the claim, and the host work running now.
//! Pure: no I/O, table-tested below.

use std::collections::BTreeSet;

use capkk_api::{
    InstanceState, KKInstance,
    consts::{
        COMPLETED_PHASES_ANNOTATION, FAILED_ANNOTATION, RELEASE_ANNOTATION, RESET_DONE_ANNOTATION,
        RETRY_ANNOTATION, TOUCHED_ANNOTATION, conditions as cond,
    },
};
use kube::ResourceExt;

use crate::{context::TaskKind, services::Phase};

/// Whether the owning KKMachine recorded this KKInstance as its claim (`spec.instanceID`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClaimRecord {
    /// The KKMachine names this KKInstance: host work may run.
    Recorded,
    /// The KKMachine exists but names nothing or another KKInstance (a claim that lost a race is deleted by
    /// its KKMachine before anything touches the host).
    Unrecorded,
    /// The controlling KKMachine is not visible (yet, or it is being garbage-collected).
    OwnerMissing,
    /// No controlling KKMachine at all.
    NoOwner,
}

/// Where a KKInstance is in its life cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HostState {
    /// `spec.quarantine` is set: the host stays out of the pool until a person deletes the KKInstance.
    Quarantined,
    /// Released or deleted, and the host is clean (reset done, or host work never started): free it.
    Free,
    /// Released or deleted, and the host needs a reset; the host task running now, if any.
    Releasing(Option<TaskKind>),
    /// No controlling KKMachine: nothing to do.
    Orphaned,
    /// The KKMachine has not recorded this claim (yet).
    AwaitingClaimRecord,
    /// The KKMachine is not visible (yet).
    AwaitingOwner,
    /// Host work runs.
    Busy(TaskKind),
    /// Every phase finished (the bootstrap sentinel exists).
    Provisioned,
    /// Every phase but provisioning finished and the spec names no bootstrap data yet
    /// (`--prepare-before-bootstrap-data`): the host is prepared and waits for its KKMachine to hand the
    /// bootstrap data over.
    AwaitingBootstrapData,
    /// Host work failed terminally; stays so until the retry annotation.
    FailedTerminal {
        /// The condition reason recorded with the failure.
        reason: String,
    },
    /// The retry annotation is set: clear the failure and start again.
    RetryRequested,
    /// Ready for (more) host work.
    Provisionable,
}

impl HostState {
    /// The `status.state` to report.
    pub(crate) fn reported(&self, inst: &KKInstance) -> InstanceState {
        match self {
            HostState::Quarantined => InstanceState::Quarantined,
            HostState::Free => InstanceState::Cleaned,
            HostState::Releasing(_) | HostState::Busy(TaskKind::Reset) => InstanceState::Cleaning,
            HostState::Busy(TaskKind::Provision) => {
                let provisioning = inst
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|c| c.type_ == cond::PROVISIONED))
                    .is_some_and(|c| c.status == "False");
                if provisioning {
                    InstanceState::Provisioning
                } else {
                    InstanceState::Bootstrapping
                }
            }
            HostState::Provisioned => InstanceState::Running,
            HostState::FailedTerminal { .. } => InstanceState::Failed,
            HostState::Orphaned
            | HostState::AwaitingClaimRecord
            | HostState::AwaitingOwner
            | HostState::AwaitingBootstrapData
            | HostState::RetryRequested
            | HostState::Provisionable => InstanceState::Pending,
        }
    }
}

/// The phases recorded as finished on the host (annotation; a restarted or moved manager skips them).
pub(crate) fn completed(inst: &KKInstance) -> BTreeSet<String> {
    inst.annotations()
        .get(COMPLETED_PHASES_ANNOTATION)
        .map(|s| {
            s.split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// True when the host may be dirty (host work started and no reset finished since).
pub(crate) fn needs_reset(inst: &KKInstance) -> bool {
    let a = inst.annotations();
    a.contains_key(TOUCHED_ANNOTATION) && !a.contains_key(RESET_DONE_ANNOTATION)
}

/// Decide the state of `inst`. Precedence: quarantine, release/deletion, claim record, running work,
/// finished, failed, prepared and waiting for the bootstrap data, ready to work.
pub(crate) fn classify(inst: &KKInstance, claim: ClaimRecord, task: Option<TaskKind>) -> HostState {
    let a = inst.annotations();
    if inst.spec.quarantine.is_some() {
        return HostState::Quarantined;
    }
    if a.contains_key(RELEASE_ANNOTATION) || inst.metadata.deletion_timestamp.is_some() {
        return if needs_reset(inst) {
            HostState::Releasing(task)
        } else {
            HostState::Free
        };
    }
    match claim {
        ClaimRecord::NoOwner => return HostState::Orphaned,
        ClaimRecord::OwnerMissing => return HostState::AwaitingOwner,
        ClaimRecord::Unrecorded => return HostState::AwaitingClaimRecord,
        ClaimRecord::Recorded => {}
    }
    if let Some(k) = task {
        return HostState::Busy(k);
    }
    if completed(inst).contains(Phase::Provisioning.name()) {
        return HostState::Provisioned;
    }
    if a.contains_key(RETRY_ANNOTATION) {
        return HostState::RetryRequested;
    }
    // Terminal means terminal: the failure is an annotation, not a condition compared with the generation
    // (recording the host key on first use bumps the generation and must not count as a spec change).
    if let Some(reason) = a.get(FAILED_ANNOTATION) {
        return HostState::FailedTerminal {
            reason: reason.clone(),
        };
    }
    if prepared(inst) && inst.spec.bootstrap_data_secret_ref.is_none() {
        return HostState::AwaitingBootstrapData;
    }
    HostState::Provisionable
}

/// True when every phase that needs no bootstrap data is recorded as completed.
pub(crate) fn prepared(inst: &KKInstance) -> bool {
    let done = completed(inst);
    Phase::ALL
        .iter()
        .filter(|p| !p.needs_bootstrap_data())
        .all(|p| done.contains(p.name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capkk_api::{KKInstanceSpec, KKInstanceStatus, Quarantine};
    use k8s_openapi::{
        apimachinery::pkg::apis::meta::v1::{Condition, Time},
        jiff::Timestamp,
    };

    const R: ClaimRecord = ClaimRecord::Recorded;

    fn inst(annotations: &[(&str, &str)]) -> KKInstance {
        let mut i = KKInstance::new(
            "c.node1",
            KKInstanceSpec {
                bootstrap_data_secret_ref: Some(capkk_api::SecretRef { name: "data".into() }),
                ..Default::default()
            },
        );
        i.metadata.generation = Some(1);
        i.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        i
    }

    /// A claim made before the bootstrap data existed: the spec names none.
    fn without_data(annotations: &[(&str, &str)]) -> KKInstance {
        let mut i = inst(annotations);
        i.spec.bootstrap_data_secret_ref = None;
        i
    }

    fn quarantined() -> KKInstance {
        let mut i = inst(&[(TOUCHED_ANNOTATION, "true")]);
        i.spec.quarantine = Some(Quarantine {
            reason: "unreachable".into(),
            since: None,
        });
        i
    }

    fn deleted(a: &[(&str, &str)]) -> KKInstance {
        let mut i = inst(a);
        i.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        i
    }

    #[test]
    fn the_state_follows_the_documented_precedence() {
        use HostState::*;
        use TaskKind::*;
        let touched = (TOUCHED_ANNOTATION, "true");
        let release = (RELEASE_ANNOTATION, "now");
        let reset = (RESET_DONE_ANNOTATION, "now");
        let done = (
            COMPLETED_PHASES_ANNOTATION,
            "bootstrap,repository,binary,containermanager,loadbalancer,provisioning",
        );
        let partial = (COMPLETED_PHASES_ANNOTATION, "bootstrap,repository");
        let prepared = (
            COMPLETED_PHASES_ANNOTATION,
            "bootstrap,binary,containermanager,repository,loadbalancer",
        );
        let failed = (FAILED_ANNOTATION, "CommandFailed");
        let retry = (RETRY_ANNOTATION, "1");
        let table: Vec<(&str, KKInstance, ClaimRecord, Option<TaskKind>, HostState)> = vec![
            (
                "quarantine wins over everything",
                quarantined(),
                R,
                Some(Provision),
                Quarantined,
            ),
            (
                "a quarantined host stays so while deleted",
                {
                    let mut q = quarantined();
                    q.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
                    q
                },
                ClaimRecord::NoOwner,
                None,
                Quarantined,
            ),
            (
                "release of an untouched host frees it",
                inst(&[release]),
                R,
                None,
                Free,
            ),
            (
                "release of a touched host resets it",
                inst(&[release, touched]),
                R,
                None,
                Releasing(None),
            ),
            (
                "release while provisioning stops that work",
                inst(&[release, touched]),
                R,
                Some(Provision),
                Releasing(Some(Provision)),
            ),
            (
                "release while resetting waits",
                inst(&[release, touched]),
                R,
                Some(Reset),
                Releasing(Some(Reset)),
            ),
            (
                "release after a reset frees it",
                inst(&[release, touched, reset]),
                R,
                None,
                Free,
            ),
            (
                "deletion of a touched host resets it",
                deleted(&[touched]),
                ClaimRecord::NoOwner,
                None,
                Releasing(None),
            ),
            (
                "deletion of an untouched host frees it",
                deleted(&[]),
                ClaimRecord::OwnerMissing,
                None,
                Free,
            ),
            (
                "no owner: nothing to do",
                inst(&[]),
                ClaimRecord::NoOwner,
                None,
                Orphaned,
            ),
            (
                "owner not visible: wait",
                inst(&[]),
                ClaimRecord::OwnerMissing,
                None,
                AwaitingOwner,
            ),
            (
                "unrecorded claim: wait, never work",
                inst(&[]),
                ClaimRecord::Unrecorded,
                None,
                AwaitingClaimRecord,
            ),
            (
                "running work is busy",
                inst(&[touched, partial]),
                R,
                Some(Provision),
                Busy(Provision),
            ),
            (
                "every phase done is provisioned",
                inst(&[touched, done]),
                R,
                None,
                Provisioned,
            ),
            (
                "some phases done continues",
                inst(&[touched, partial]),
                R,
                None,
                Provisionable,
            ),
            (
                "a failure is terminal",
                inst(&[touched, failed]),
                R,
                None,
                FailedTerminal {
                    reason: "CommandFailed".into(),
                },
            ),
            (
                "the retry annotation clears a failure",
                inst(&[touched, failed, retry]),
                R,
                None,
                RetryRequested,
            ),
            (
                "a fresh claim is provisionable",
                inst(&[]),
                R,
                None,
                Provisionable,
            ),
            (
                "a host prepared before its bootstrap data waits for it",
                without_data(&[touched, prepared]),
                R,
                None,
                AwaitingBootstrapData,
            ),
            (
                "a host partly prepared before its bootstrap data goes on preparing",
                without_data(&[touched, partial]),
                R,
                None,
                Provisionable,
            ),
            (
                "a prepared host whose bootstrap data is named provisions",
                inst(&[touched, prepared]),
                R,
                None,
                Provisionable,
            ),
            (
                "a prepared host released before its bootstrap data is reset",
                without_data(&[touched, prepared, release]),
                R,
                None,
                Releasing(None),
            ),
            (
                "a prepared host that failed stays failed",
                without_data(&[touched, prepared, failed]),
                R,
                None,
                FailedTerminal {
                    reason: "CommandFailed".into(),
                },
            ),
        ];
        for (what, i, claim, task, want) in table {
            assert_eq!(classify(&i, claim, task), want, "{what}");
        }
    }

    #[test]
    fn a_terminal_failure_stays_terminal_after_the_host_key_is_recorded() {
        // Recording the host key on first use patches the spec: the generation moves past the one the
        // failure's conditions observed. That is not a retry.
        let mut i = inst(&[(TOUCHED_ANNOTATION, "true"), (FAILED_ANNOTATION, "CommandFailed")]);
        i.status = Some(KKInstanceStatus {
            conditions: vec![Condition {
                type_: cond::PROVISIONED.into(),
                status: "False".into(),
                reason: "CommandFailed".into(),
                message: "exit 3".into(),
                observed_generation: Some(1),
                last_transition_time: Time(Timestamp::now()),
            }],
            ..Default::default()
        });
        i.spec.host_key = Some("SHA256:abc".into());
        i.metadata.generation = Some(2);
        assert_eq!(
            classify(&i, ClaimRecord::Recorded, None),
            HostState::FailedTerminal {
                reason: "CommandFailed".into()
            }
        );
        assert_eq!(
            classify(&i, ClaimRecord::Recorded, None).reported(&i),
            InstanceState::Failed
        );
    }

    #[test]
    fn busy_reports_provisioning_once_the_bootstrap_data_runs() {
        let mut i = inst(&[(TOUCHED_ANNOTATION, "true")]);
        let busy = HostState::Busy(TaskKind::Provision);
        assert_eq!(busy.reported(&i), InstanceState::Bootstrapping);
        i.status = Some(KKInstanceStatus {
            conditions: vec![Condition {
                type_: cond::PROVISIONED.into(),
                status: "False".into(),
                reason: "InProgress".into(),
                message: "step 5/5".into(),
                observed_generation: Some(1),
                last_transition_time: Time(Timestamp::now()),
            }],
            ..Default::default()
        });
        assert_eq!(busy.reported(&i), InstanceState::Provisioning);
        assert_eq!(
            HostState::Busy(TaskKind::Reset).reported(&i),
            InstanceState::Cleaning
        );
    }
}
