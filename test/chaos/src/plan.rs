//! What the campaign injects, when and for how long: every choice drawn from the seeded [`Rng`], so that a
//! seed and a host source replay the same plan. Whether a trigger is met in time depends on the machine (a
//! fast step can finish before the phase a fault waits for): the report says per fault whether it was.

use serde::{Deserialize, Serialize};

use crate::rng::Rng;

/// A kind of fault. Each is real: a process killed or frozen, packets dropped, a host restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The manager process SIGKILLed, restarted after the fault's seconds with its own command line and
    /// environment (as its Pod's kubelet would).
    ManagerKill,
    /// The management plane's kube-apiserver frozen (SIGSTOP) for the fault's seconds, then continued: every
    /// client's requests hang, watches stall, the manager's leader Lease cannot be renewed.
    ApiserverStop,
    /// A host's incoming SSH (TCP port 22) dropped in its network namespace for the fault's seconds: new and
    /// pooled connections stall (packets lost, no reset).
    SshCut,
    /// A host's sshd stopped for the fault's seconds (new connections refused), then started again.
    SshdStop,
    /// A node container restarted (power cycle: every process gone, disk kept) while its phase runs.
    HostRestart,
    /// With two manager replicas, the one holding the leader Lease SIGKILLed (its Lease not released: the
    /// other takes over once it expires), restarted after the fault's seconds (longer than the Lease) as its
    /// Pod's kubelet would.
    LeaderKill,
    /// A host's artifact staging directory (`/var/lib/capkk/staging`) full for the fault's seconds: an empty
    /// file system without a free byte mounted over it, so every upload or download into it fails with
    /// ENOSPC (the node's own root file system is the machine's disk, which the campaign must not fill).
    DiskFull,
}

impl FaultKind {
    /// Every kind, in the report's order.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::ManagerKill,
        FaultKind::ApiserverStop,
        FaultKind::SshCut,
        FaultKind::SshdStop,
        FaultKind::HostRestart,
        FaultKind::LeaderKill,
        FaultKind::DiskFull,
    ];

    /// Its name in logs and reports (`manager-kill`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::ManagerKill => "manager-kill",
            FaultKind::ApiserverStop => "apiserver-stop",
            FaultKind::SshCut => "ssh-cut",
            FaultKind::SshdStop => "sshd-stop",
            FaultKind::HostRestart => "host-restart",
            FaultKind::LeaderKill => "leader-kill",
            FaultKind::DiskFull => "disk-full",
        }
    }

    /// The span of its duration in seconds (the issue's: API server 5-60 s, SSH cut 5-120 s); a host
    /// restart's length is the restart's own.
    pub fn seconds(self) -> (u64, u64) {
        match self {
            FaultKind::ManagerKill => (0, 10),
            FaultKind::ApiserverStop => (5, 60),
            FaultKind::SshCut => (5, 120),
            FaultKind::SshdStop => (5, 60),
            FaultKind::HostRestart => (0, 0),
            // Longer than the manager's 15 s Lease: a replica restarted sooner comes back under its own
            // identity (its Pod's name) and takes its Lease back at once, so the other never takes over.
            FaultKind::LeaderKill => (20, 30),
            FaultKind::DiskFull => (5, 60),
        }
    }

    /// Whether it acts on one host (the plan then picks which).
    pub fn on_host(self) -> bool {
        matches!(
            self,
            FaultKind::SshCut | FaultKind::SshdStop | FaultKind::HostRestart | FaultKind::DiskFull
        )
    }
}

/// A step of the cluster's lifecycle; the campaign runs them in this order, in a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// The cluster applied; every Machine Running.
    Create,
    /// The MachineDeployment one replica down; its host reset.
    ScaleDown,
    /// The MachineDeployment one replica up again, on the freed host.
    ScaleUp,
    /// The Cluster deleted; every host reset, every claim released.
    Delete,
}

impl Step {
    /// One lifecycle, in order.
    pub const CYCLE: [Step; 4] = [Step::Create, Step::ScaleDown, Step::ScaleUp, Step::Delete];

    /// Its name in logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Step::Create => "create",
            Step::ScaleDown => "scale-down",
            Step::ScaleUp => "scale-up",
            Step::Delete => "delete",
        }
    }
}

/// When a fault fires within its step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// Right after the step's action (the apply, scale or delete).
    AtStart,
    /// This many seconds after it.
    AfterSecs(u64),
    /// When a KKMachine of the cluster is first seen in this phase (`Claimed`, `Provisioning`, `Deleting`).
    Phase(String),
    /// When a KKMachine's host work reports a step (`status.step`, e.g. the binaries' install or `kubeadm
    /// join`): a fault in the middle of host work.
    HostWork,
    /// When a KKMachine's host work reports a step whose name holds this text (`binary`: the artifacts'
    /// upload and install).
    HostStep(String),
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trigger::AtStart => write!(f, "at start"),
            Trigger::AfterSecs(s) => write!(f, "after {s}s"),
            Trigger::Phase(p) => write!(f, "phase {p}"),
            Trigger::HostWork => write!(f, "during host work"),
            Trigger::HostStep(s) => write!(f, "during host step {s}"),
        }
    }
}

/// One planned fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSpec {
    /// What.
    pub kind: FaultKind,
    /// When within the step.
    pub trigger: Trigger,
    /// For how long (seconds).
    pub secs: u64,
    /// Which host (an index the driver takes modulo the hosts it can choose from), for host faults.
    pub host_draw: u64,
}

/// Draws the campaign's faults from its seed.
#[derive(Clone, Debug)]
pub struct Planner {
    rng: Rng,
    kinds: Vec<FaultKind>,
    max_secs: u64,
}

impl Planner {
    /// A planner over `kinds` (the ones the host source allows) whose faults last at most `max_secs`.
    pub fn new(seed: u64, kinds: Vec<FaultKind>, max_secs: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            kinds,
            max_secs,
        }
    }

    /// The next fault, for a fault within `step`. Every call draws the same number of values, so that the
    /// plan does not depend on what an earlier fault turned out to be.
    pub fn next(&mut self, step: Step) -> Option<FaultSpec> {
        let kind_draw = self.rng.next_u64();
        let trigger_draw = self.rng.next_u64();
        let secs_draw = self.rng.next_u64();
        let host_draw = self.rng.next_u64();
        if self.kinds.is_empty() {
            return None;
        }
        let kind = self.kinds[(kind_draw % self.kinds.len() as u64) as usize];
        let triggers: Vec<Trigger> = match step {
            Step::Create | Step::ScaleUp => vec![
                Trigger::AtStart,
                Trigger::AfterSecs(1 + trigger_draw % 20),
                Trigger::Phase("Claimed".into()),
                Trigger::Phase("Provisioning".into()),
                Trigger::HostWork,
                Trigger::HostWork,
            ],
            Step::ScaleDown | Step::Delete => vec![
                Trigger::AtStart,
                Trigger::AfterSecs(1 + trigger_draw % 10),
                Trigger::Phase("Deleting".into()),
            ],
        };
        let mut trigger = triggers[((trigger_draw >> 32) % triggers.len() as u64) as usize].clone();
        // A full disk matters where artifacts are written: aimed at their upload while a host is set up
        // (at a removal, the reset meets it wherever it is).
        if kind == FaultKind::DiskFull && matches!(step, Step::Create | Step::ScaleUp) {
            trigger = Trigger::HostStep("binary".into());
        }
        let (lo, hi) = kind.seconds();
        let hi = hi.min(self.max_secs).max(lo.min(self.max_secs));
        let lo = lo.min(hi);
        let secs = lo + secs_draw % (hi - lo + 1);
        Some(FaultSpec {
            kind,
            trigger,
            secs,
            host_draw,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(seed: u64, kinds: &[FaultKind], n: usize) -> Vec<FaultSpec> {
        let mut p = Planner::new(seed, kinds.to_vec(), 30);
        (0..n)
            .map(|i| p.next(Step::CYCLE[i % 4]).expect("kinds given"))
            .collect()
    }

    #[test]
    fn a_seed_replays_the_same_plan() {
        assert_eq!(plan(2026, &FaultKind::ALL, 50), plan(2026, &FaultKind::ALL, 50));
        assert_ne!(plan(2026, &FaultKind::ALL, 50), plan(2027, &FaultKind::ALL, 50));
    }

    #[test]
    fn only_the_allowed_kinds_are_drawn_and_every_one_of_them_is() {
        let kinds = [FaultKind::ManagerKill, FaultKind::SshCut];
        let faults = plan(1, &kinds, 200);
        assert!(faults.iter().all(|f| kinds.contains(&f.kind)));
        for k in kinds {
            assert!(faults.iter().any(|f| f.kind == k), "{} never drawn", k.name());
        }
        assert_eq!(Planner::new(1, vec![], 30).next(Step::Create), None);
    }

    #[test]
    fn durations_stay_within_the_kind_and_the_cap() {
        for f in plan(99, &FaultKind::ALL, 500) {
            let (lo, hi) = f.kind.seconds();
            assert!(f.secs <= 30, "{f:?} exceeds the cap");
            assert!(f.secs >= lo.min(30) && f.secs <= hi, "{f:?}");
        }
    }

    #[test]
    fn removal_steps_never_wait_for_a_provisioning_phase() {
        let mut p = Planner::new(5, FaultKind::ALL.to_vec(), 30);
        for _ in 0..200 {
            let f = p.next(Step::Delete).expect("kinds given");
            assert!(!matches!(f.trigger, Trigger::HostWork), "{f:?}");
            if let Trigger::Phase(ph) = &f.trigger {
                assert_eq!(ph, "Deleting");
            }
        }
    }

    #[test]
    fn the_plan_does_not_depend_on_the_kinds_offered_for_its_timing() {
        // Two sources (with and without host restarts) draw the same triggers and durations' randomness:
        // only the kind differs, so a seed's moments are comparable across sources (a full disk's own aim
        // aside).
        let a = plan(8, &FaultKind::ALL, 40);
        let b = plan(8, &FaultKind::ALL[..4], 40);
        let mut compared = 0;
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.host_draw, y.host_draw);
            if x.kind != FaultKind::DiskFull {
                assert_eq!(x.trigger, y.trigger);
                compared += 1;
            }
        }
        assert!(compared > 20, "only {compared} triggers compared");
    }

    #[test]
    fn a_full_disk_is_aimed_at_the_artifacts_upload_while_hosts_are_set_up() {
        let mut p = Planner::new(3, vec![FaultKind::DiskFull], 30);
        for step in Step::CYCLE.iter().cycle().take(40) {
            let f = p.next(*step).expect("kinds given");
            match step {
                Step::Create | Step::ScaleUp => assert_eq!(f.trigger, Trigger::HostStep("binary".into())),
                Step::ScaleDown | Step::Delete => {
                    assert!(!matches!(f.trigger, Trigger::HostStep(_)), "{f:?}")
                }
            }
        }
    }
}
