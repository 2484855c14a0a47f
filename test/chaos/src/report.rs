//! The campaign's report: every fault as it happened, then per kind how many were injected, survived and how
//! long recovery took, and every violation. Written as JSON (the artifact) and Markdown (docs/reliability.md's
//! table is a run's).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    invariants::{CHECKS, Violation},
    plan::FaultKind,
};

/// One injected fault and what followed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// 1-based number in the campaign.
    pub index: usize,
    /// The lifecycle cycle (1-based) and step it fell into.
    pub cycle: usize,
    /// The step's name.
    pub step: String,
    /// What.
    pub kind: FaultKind,
    /// The planned moment (`phase Provisioning`, `after 7s`, ...).
    pub trigger: String,
    /// Whether the moment came before the step was done (else the fault hit the settled step).
    pub trigger_hit: bool,
    /// What the cluster was doing when it fired (KKMachine phases and host steps).
    pub moment: String,
    /// The host it hit, for host faults.
    pub host: Option<String>,
    /// How long it lasted (seconds).
    pub secs: u64,
    /// Seconds since the campaign's start when it fired.
    pub at_secs: f64,
    /// Whether the step reached its goal afterwards and no invariant broke.
    pub survived: bool,
    /// Seconds from the fault's end to the step's goal (None when it was not reached).
    pub recover_secs: Option<f64>,
    /// Invariants broken after it.
    pub violations: Vec<Violation>,
    /// Terminal failures the Machines reported (a cause named: not a violation, but the step did not succeed).
    pub terminal: Vec<String>,
}

/// A kind that could not be injected here, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    /// The kind's name (`host-restart`, `link-latency`).
    pub kind: String,
    /// Why not.
    pub why: String,
}

/// The whole campaign.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The seed (`CHAOS_SEED=` replays it).
    pub seed: u64,
    /// The host source (`containers`, `sandbox`).
    pub source: String,
    /// The fault count asked for.
    pub faults_target: usize,
    /// Lifecycle cycles begun.
    pub cycles: usize,
    /// Seconds from start to end.
    pub elapsed_secs: f64,
    /// `/proc/loadavg`'s 1, 5, 15 minute averages at the start and the end.
    pub load_start: String,
    /// Same, at the end.
    pub load_end: String,
    /// Every fault.
    pub faults: Vec<FaultRecord>,
    /// Violations found outside a fault's own checks (the final checks).
    pub final_violations: Vec<Violation>,
    /// Kinds not injected here.
    pub unavailable: Vec<Unavailable>,
    /// The manager exited on its own (e.g. leadership lost while the API server was frozen, by design) and was
    /// restarted as its Pod's kubelet would: how often.
    pub supervised_restarts: usize,
    /// The largest manager RSS seen (KiB), of any replica.
    pub max_rss_kib: u64,
    /// Manager replicas run (the setup's and those the campaign started beside it, leader election among them).
    #[serde(default)]
    pub replicas: usize,
    /// Why the campaign ended early, if it did.
    pub stopped: Option<String>,
    /// Steps that ran twice on a host by design, each with its reason (a host restart of the campaign killed
    /// their first run): not violations, but never silently ignored.
    #[serde(default)]
    pub allowed_reruns: Vec<String>,
}

/// Per kind: injected, survived, recovery times.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KindSummary {
    /// Injected.
    pub injected: usize,
    /// Survived (goal reached, no violation).
    pub survived: usize,
    /// Their moments were hit before the step was done.
    pub hit: usize,
    /// Recovery times (seconds).
    pub recover: Vec<f64>,
    /// Violations.
    pub violations: usize,
}

impl Report {
    /// Every violation, the faults' and the final ones.
    pub fn violations(&self) -> Vec<&Violation> {
        self.faults
            .iter()
            .flat_map(|f| &f.violations)
            .chain(&self.final_violations)
            .collect()
    }

    /// Whether the campaign passed: the faults asked for were injected, none broke an invariant.
    pub fn passed(&self) -> bool {
        self.violations().is_empty() && self.faults.len() >= self.faults_target && self.stopped.is_none()
    }

    /// Violations per check, every check of [`CHECKS`] (none broken: 0) and any other name found.
    pub fn by_check(&self) -> BTreeMap<&str, usize> {
        let mut out: BTreeMap<&str, usize> = CHECKS.iter().map(|c| (*c, 0)).collect();
        for v in self.violations() {
            *out.entry(v.check.as_str()).or_default() += 1;
        }
        out
    }

    /// Per kind, in [`FaultKind::ALL`]'s order (kinds never injected left out).
    pub fn by_kind(&self) -> BTreeMap<FaultKind, KindSummary> {
        let mut out: BTreeMap<FaultKind, KindSummary> = BTreeMap::new();
        for f in &self.faults {
            let k = out.entry(f.kind).or_default();
            k.injected += 1;
            k.survived += usize::from(f.survived);
            k.hit += usize::from(f.trigger_hit);
            k.violations += f.violations.len();
            k.recover.extend(f.recover_secs);
        }
        out
    }

    /// The report as Markdown: the summary table, the violations, every fault.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let violations = self.violations();
        md.push_str(&format!(
            "**Seed {}** (`CHAOS_SEED={}` replays it) on {} hosts: {} faults injected of {} asked, {} cycles, {} \
             violations, {:.0} s; load average {} at the start, {} at the end. Result: **{}**.\n\n",
            self.seed,
            self.seed,
            self.source,
            self.faults.len(),
            self.faults_target,
            self.cycles,
            violations.len(),
            self.elapsed_secs,
            self.load_start,
            self.load_end,
            if self.passed() { "passed" } else { "FAILED" }
        ));
        md.push_str(
            "| fault | injected | moment hit | survived | recovery median (s) | recovery max (s) | violations |\n\
             |---|---|---|---|---|---|---|\n",
        );
        for (kind, k) in self.by_kind() {
            let mut r = k.recover.clone();
            r.sort_by(f64::total_cmp);
            let med = r.get(r.len() / 2).map_or("-".into(), |v| format!("{v:.1}"));
            let max = r.last().map_or("-".into(), |v| format!("{v:.1}"));
            md.push_str(&format!(
                "| {} | {} | {} | {} | {med} | {max} | {} |\n",
                kind.name(),
                k.injected,
                k.hit,
                k.survived,
                k.violations
            ));
        }
        for u in &self.unavailable {
            md.push_str(&format!("| {} | not injected: {} | | | | | |\n", u.kind, u.why));
        }
        md.push_str(&format!(
            "\nManager replicas: {}; restarts by supervision (a replica exited on its own): {}; largest manager RSS: \
             {} MiB.\n",
            self.replicas,
            self.supervised_restarts,
            self.max_rss_kib / 1024
        ));
        let by_check = self.by_check();
        md.push_str(&format!(
            "\nViolations per check: {}.\n",
            CHECKS
                .iter()
                .chain(by_check.keys().filter(|k| !CHECKS.contains(k)))
                .map(|c| format!("`{c}` {}", by_check.get(c).copied().unwrap_or(0)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if !self.allowed_reruns.is_empty() {
            md.push_str("\nSteps run again by design (not violations):\n\n");
            for a in &self.allowed_reruns {
                md.push_str(&format!("- {a}\n"));
            }
        }
        if let Some(why) = &self.stopped {
            md.push_str(&format!("\nStopped early: {why}\n"));
        }
        if !violations.is_empty() {
            md.push_str("\nViolations:\n\n");
            for v in violations {
                md.push_str(&format!("- `{}`: {}\n", v.check, v.message));
            }
        }
        md.push_str(
            "\n| # | cycle/step | fault | moment planned | hit | cluster then | host | s | recovered after (s) | result |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
        );
        for f in &self.faults {
            let result = if !f.violations.is_empty() {
                format!(
                    "VIOLATION: {}",
                    f.violations
                        .iter()
                        .map(|v| v.check.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else if !f.terminal.is_empty() {
                format!("terminal: {}", f.terminal.join("; "))
            } else if f.survived {
                "survived".into()
            } else {
                "not recovered".into()
            };
            md.push_str(&format!(
                "| {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                f.index,
                f.cycle,
                f.step,
                f.kind.name(),
                f.trigger,
                if f.trigger_hit { "yes" } else { "no" },
                f.moment.replace('|', "/"),
                f.host.as_deref().unwrap_or("-"),
                f.secs,
                f.recover_secs.map_or("-".into(), |s| format!("{s:.1}")),
                result
            ));
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::{NO_COMMAND_TWICE, NO_SECRET_LEAK};

    fn record(
        index: usize,
        kind: FaultKind,
        recover: Option<f64>,
        violations: Vec<Violation>,
    ) -> FaultRecord {
        FaultRecord {
            index,
            cycle: 1,
            step: "create".into(),
            kind,
            trigger: "phase Provisioning".into(),
            trigger_hit: true,
            moment: "kk-a Provisioning (containerd)".into(),
            host: kind.on_host().then(|| "h1".into()),
            secs: 7,
            at_secs: 1.0,
            survived: recover.is_some() && violations.is_empty(),
            recover_secs: recover,
            violations,
            terminal: vec![],
        }
    }

    fn report(faults: Vec<FaultRecord>) -> Report {
        Report {
            seed: 42,
            source: "sandbox".into(),
            faults_target: 3,
            cycles: 1,
            elapsed_secs: 100.0,
            load_start: "1.00 1.00 1.00".into(),
            load_end: "2.00 1.50 1.00".into(),
            faults,
            final_violations: vec![],
            unavailable: vec![Unavailable {
                kind: "link-latency".into(),
                why: "no netem in this kernel".into(),
            }],
            supervised_restarts: 0,
            max_rss_kib: 40 * 1024,
            replicas: 2,
            stopped: None,
            allowed_reruns: vec![],
        }
    }

    #[test]
    fn a_campaign_without_violations_passes_and_counts_per_kind() {
        let r = report(vec![
            record(1, FaultKind::ManagerKill, Some(3.0), vec![]),
            record(2, FaultKind::ManagerKill, Some(9.0), vec![]),
            record(3, FaultKind::SshCut, Some(20.0), vec![]),
        ]);
        assert!(r.passed());
        let k = &r.by_kind()[&FaultKind::ManagerKill];
        assert_eq!((k.injected, k.survived, k.recover.len()), (2, 2, 2));
        let md = r.to_markdown();
        assert!(
            md.contains("| manager-kill | 2 | 2 | 2 | 9.0 | 9.0 | 0 |"),
            "{md}"
        );
        assert!(
            md.contains("| link-latency | not injected: no netem in this kernel"),
            "{md}"
        );
        assert!(md.contains("Result: **passed**"), "{md}");
        assert!(
            md.contains("`no-command-ran-twice` 0, `no-secret-in-logs-events-status` 0"),
            "{md}"
        );
    }

    #[test]
    fn a_violation_or_too_few_faults_fails_the_campaign() {
        let v = Violation {
            check: NO_SECRET_LEAK.into(),
            message: "SSH private key body line 1 appears in manager.log (line 9)".into(),
        };
        let r = report(vec![
            record(1, FaultKind::ApiserverStop, None, vec![v]),
            record(2, FaultKind::SshdStop, Some(1.0), vec![]),
            record(3, FaultKind::SshdStop, Some(1.0), vec![]),
        ]);
        assert!(!r.passed());
        let md = r.to_markdown();
        assert!(md.contains("Result: **FAILED**"), "{md}");
        assert!(
            md.contains("- `no-secret-in-logs-events-status`: SSH private key"),
            "{md}"
        );
        assert!(md.contains("VIOLATION: no-secret-in-logs-events-status"), "{md}");
        let short = report(vec![record(1, FaultKind::SshCut, Some(1.0), vec![])]);
        assert!(!short.passed(), "1 fault of 3 asked is not a campaign");
    }

    #[test]
    fn a_command_run_twice_is_counted_under_its_check_and_an_allowed_rerun_is_listed_not_counted() {
        let v = Violation {
            check: NO_COMMAND_TWICE.into(),
            message: "host h1: command step aa of plan p started 2 times".into(),
        };
        let mut r = report(vec![
            record(1, FaultKind::SshCut, Some(1.0), vec![v]),
            record(2, FaultKind::HostRestart, Some(1.0), vec![]),
            record(3, FaultKind::HostRestart, Some(1.0), vec![]),
        ]);
        r.allowed_reruns.push(
            "host h2: command step bb of plan q ran again 1 time(s) after the host restart of fault #2"
                .into(),
        );
        assert!(!r.passed());
        assert_eq!(r.by_check()[NO_COMMAND_TWICE], 1);
        assert_eq!(r.by_check()[NO_SECRET_LEAK], 0);
        let md = r.to_markdown();
        assert!(md.contains("`no-command-ran-twice` 1,"), "{md}");
        assert!(
            md.contains("Steps run again by design (not violations):\n\n- host h2: command step bb"),
            "{md}"
        );
        r.faults[0].violations.clear();
        assert!(r.passed(), "an allowed re-run alone does not fail the campaign");
    }

    #[test]
    fn the_json_artifact_reads_back_to_the_same_report() {
        let mut r = report(vec![record(1, FaultKind::HostRestart, Some(30.5), vec![])]);
        r.allowed_reruns.push("host h1: command step aa ran again".into());
        let text = serde_json::to_string_pretty(&r).expect("serializes");
        assert!(text.contains("\"kind\": \"host-restart\""), "{text}");
        assert_eq!(serde_json::from_str::<Report>(&text).expect("parses"), r);
    }
}
