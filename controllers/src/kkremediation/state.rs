//! What a KKRemediation does next, decided from its strategy, its status (what survives a restart), the
//! attempt running now and the outcome of the last one. Pure: no I/O, table-tested below.
//!
//! Semantics (CAPM3's Metal3Remediation for `retryLimit` and `timeout`): attempts are numbered from 1 to
//! `retryLimit`; each starts a tier (`Tiered`: restart the services first, reboot after) and is followed by
//! up to `timeout`, counted from its start, for the Node to recover (CAPI deletes the KKRemediation once the
//! Machine is healthy again). When `timeout` passes after the last attempt, or the last attempt failed on the
//! host, the Machine is handed to its owner, which deletes and replaces it.

use std::time::Duration;

use capkk_api::{RemediationPhase, RemediationStrategy, RemediationTier, consts::reasons};

pub(crate) use crate::context::attempts::AttemptOutcome;

/// What the reconcile knows.
#[derive(Clone, Debug)]
pub(crate) struct Inputs<'a> {
    /// `spec.strategy`.
    pub strategy: &'a RemediationStrategy,
    /// `status.phase`.
    pub phase: Option<RemediationPhase>,
    /// `status.retryCount`: attempts started.
    pub retry_count: u32,
    /// Time since `status.lastRemediated` (None: never started).
    pub since_last: Option<Duration>,
    /// An attempt runs now.
    pub running: bool,
    /// The outcome of attempt `retry_count`, when this manager saw it end.
    pub outcome: Option<&'a AttemptOutcome>,
    /// The Machine is being deleted (its owner already replaces it).
    pub machine_deleting: bool,
    /// Why there is no host to work on (None: the Machine's KKMachine holds a KKInstance).
    pub no_host: Option<String>,
}

/// The next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nothing more to do (given up already, or the Machine goes anyway).
    Done,
    /// An attempt works on the host.
    Running,
    /// Start attempt `attempt` with `tier`.
    Start {
        /// 1-based.
        attempt: u32,
        /// What it does.
        tier: RemediationTier,
    },
    /// Wait for the Node (or for CAPI to delete this object) this long.
    Wait(Duration),
    /// Hand the Machine to its owner for replacement.
    GiveUp {
        /// Condition reason.
        reason: &'static str,
        /// Why, for the condition and the event.
        message: String,
        /// `Exhausted` (attempts used) or `Failed` (nothing to remediate).
        phase: RemediationPhase,
    },
}

/// Decide. Precedence: finished, Machine deleting, attempt running, no host, first attempt, last attempt
/// failed, waiting, next attempt, give up.
pub(crate) fn decide(i: &Inputs<'_>) -> Decision {
    if matches!(
        i.phase,
        Some(RemediationPhase::Exhausted | RemediationPhase::Failed)
    ) || i.machine_deleting
    {
        return Decision::Done;
    }
    if i.running {
        return Decision::Running;
    }
    let limit = i.strategy.retry_limit();
    if let Some(why) = &i.no_host {
        return Decision::GiveUp {
            reason: reasons::NO_HOST,
            message: format!("nothing to remediate on a host: {why}"),
            phase: RemediationPhase::Failed,
        };
    }
    let tier = |attempt: u32| i.strategy.type_.tier(attempt);
    if i.retry_count == 0 {
        return Decision::Start {
            attempt: 1,
            tier: tier(1),
        };
    }
    let exhausted = |what: String| Decision::GiveUp {
        reason: reasons::RETRY_LIMIT_REACHED,
        message: format!("{what} after attempt {} of {limit}", i.retry_count),
        phase: RemediationPhase::Exhausted,
    };
    if i.retry_count >= limit
        && let Some(AttemptOutcome::Failed { message, .. }) = i.outcome
    {
        return exhausted(format!("the last attempt failed ({message})"));
    }
    let timeout = Duration::from_secs(i.strategy.timeout_seconds());
    let since = i.since_last.unwrap_or(timeout);
    if since < timeout {
        return Decision::Wait(timeout - since);
    }
    if i.retry_count >= limit {
        return exhausted(format!("the Machine is still unhealthy {} s", timeout.as_secs()));
    }
    Decision::Start {
        attempt: i.retry_count + 1,
        tier: tier(i.retry_count + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capkk_api::RemediationType;

    fn strategy(type_: RemediationType, limit: i32) -> RemediationStrategy {
        RemediationStrategy {
            type_,
            retry_limit: limit,
            timeout: "300s".into(),
        }
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn the_decision_follows_the_documented_precedence() {
        use Decision::*;
        use RemediationTier::*;
        let tiered = strategy(RemediationType::Tiered, 2);
        let reboot_only = strategy(RemediationType::Reboot, 3);
        let ok = AttemptOutcome::Succeeded("active".into());
        let failed = AttemptOutcome::Failed {
            reason: reasons::UNREACHABLE,
            message: "connection refused".into(),
        };
        let base = Inputs {
            strategy: &tiered,
            phase: None,
            retry_count: 0,
            since_last: None,
            running: false,
            outcome: None,
            machine_deleting: false,
            no_host: None,
        };
        let give_up = |reason, phase| move |d: &Decision| matches!(d, GiveUp { reason: r, phase: p, .. } if *r == reason && *p == phase);
        type Check = Box<dyn Fn(&Decision) -> bool>;
        let is = |want: Decision| -> Check { Box::new(move |d: &Decision| *d == want) };
        let table: Vec<(&str, Inputs<'_>, Check)> = vec![
            (
                "a new remediation restarts the services first",
                base.clone(),
                is(Start {
                    attempt: 1,
                    tier: RestartServices,
                }),
            ),
            (
                "a reboot-only strategy reboots first",
                Inputs {
                    strategy: &reboot_only,
                    ..base.clone()
                },
                is(Start {
                    attempt: 1,
                    tier: Reboot,
                }),
            ),
            (
                "a running attempt is waited for",
                Inputs {
                    retry_count: 1,
                    since_last: secs(10),
                    running: true,
                    ..base.clone()
                },
                is(Running),
            ),
            (
                "after a successful restart the Node gets the rest of the timeout",
                Inputs {
                    retry_count: 1,
                    since_last: secs(100),
                    outcome: Some(&ok),
                    phase: Some(RemediationPhase::Running),
                    ..base.clone()
                },
                is(Wait(Duration::from_secs(200))),
            ),
            (
                "a failed first attempt still waits before the next one",
                Inputs {
                    retry_count: 1,
                    since_last: secs(5),
                    outcome: Some(&failed),
                    ..base.clone()
                },
                is(Wait(Duration::from_secs(295))),
            ),
            (
                "once the timeout passed the next attempt reboots",
                Inputs {
                    retry_count: 1,
                    since_last: secs(300),
                    outcome: Some(&ok),
                    ..base.clone()
                },
                is(Start {
                    attempt: 2,
                    tier: Reboot,
                }),
            ),
            (
                "a restarted manager that lost the outcome waits out the attempt's timeout",
                Inputs {
                    retry_count: 1,
                    since_last: secs(30),
                    phase: Some(RemediationPhase::Running),
                    ..base.clone()
                },
                is(Wait(Duration::from_secs(270))),
            ),
            (
                "the last attempt's timeout passing gives up",
                Inputs {
                    retry_count: 2,
                    since_last: secs(301),
                    outcome: Some(&ok),
                    ..base.clone()
                },
                Box::new(give_up(reasons::RETRY_LIMIT_REACHED, RemediationPhase::Exhausted)),
            ),
            (
                "a failed last attempt gives up at once",
                Inputs {
                    retry_count: 2,
                    since_last: secs(20),
                    outcome: Some(&failed),
                    ..base.clone()
                },
                Box::new(give_up(reasons::RETRY_LIMIT_REACHED, RemediationPhase::Exhausted)),
            ),
            (
                "a Machine without a host is handed over at once",
                Inputs {
                    no_host: Some("KKMachine m holds no host".into()),
                    ..base.clone()
                },
                Box::new(give_up(reasons::NO_HOST, RemediationPhase::Failed)),
            ),
            (
                "given up is final",
                Inputs {
                    retry_count: 2,
                    since_last: secs(1000),
                    phase: Some(RemediationPhase::Exhausted),
                    ..base.clone()
                },
                is(Done),
            ),
            (
                "a Machine being deleted needs nothing more, even mid-attempt",
                Inputs {
                    retry_count: 1,
                    running: true,
                    machine_deleting: true,
                    ..base.clone()
                },
                is(Done),
            ),
        ];
        for (what, inputs, check) in table {
            let d = decide(&inputs);
            assert!(check(&d), "{what}: got {d:?}");
        }
    }

    #[test]
    fn a_retry_limit_of_one_restarts_once_then_gives_up_after_the_timeout() {
        let s = strategy(RemediationType::Tiered, 1);
        let ok = AttemptOutcome::Succeeded("active".into());
        let mut i = Inputs {
            strategy: &s,
            phase: None,
            retry_count: 0,
            since_last: None,
            running: false,
            outcome: None,
            machine_deleting: false,
            no_host: None,
        };
        assert_eq!(
            decide(&i),
            Decision::Start {
                attempt: 1,
                tier: RemediationTier::RestartServices
            }
        );
        i.retry_count = 1;
        i.outcome = Some(&ok);
        i.since_last = Some(Duration::from_secs(299));
        assert_eq!(decide(&i), Decision::Wait(Duration::from_secs(1)));
        i.since_last = Some(Duration::from_secs(300));
        match decide(&i) {
            Decision::GiveUp { message, .. } => {
                assert!(message.contains("attempt 1 of 1"), "{message}")
            }
            d => panic!("{d:?}"),
        }
    }
}
