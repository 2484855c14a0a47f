//! The invariants checked after every fault, as pure functions of what the driver read (API objects as JSON,
//! a host's probe output, log text), so that each can be tested on fixtures. Each check has a name (the
//! report counts violations by it) and says in its message what is wrong and where.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Every Machine reaches Running (with a Node) or a terminal condition naming its cause, within the bound.
pub const MACHINES_SETTLE: &str = "machines-ready-or-terminal";
/// No host is claimed by two KKInstances (by address, or split between its host-key and address Leases).
pub const NO_DOUBLE_CLAIM: &str = "no-double-claim";
/// After the Cluster's deletion no KKInstance and no host-claim Lease of its namespace is left.
pub const NO_LEFTOVER_CLAIM: &str = "no-claim-left-after-delete";
/// A host without a claim carries nothing of a node (owned paths, services, processes).
pub const HOST_CLEAN: &str = "reset-host-clean";
/// No secret value (SSH private key, bootstrap token) in the manager's log, events or status.
pub const NO_SECRET_LEAK: &str = "no-secret-in-logs-events-status";
/// The manager's resident memory stays below the bound.
pub const RSS_BOUNDED: &str = "manager-rss-bounded";
/// No command item of a host's provisioning journal ran twice, except one whose first run the campaign killed
/// by restarting that host while it ran (the provider re-runs such a step by design).
pub const NO_COMMAND_TWICE: &str = "no-command-ran-twice";
/// A killed leader's Lease is taken by another running replica while it is down (longer than the Lease).
pub const LEADER_TAKEN_OVER: &str = "leader-taken-over";

/// Every check, in the report's order.
pub const CHECKS: [&str; 8] = [
    MACHINES_SETTLE,
    NO_DOUBLE_CLAIM,
    NO_LEFTOVER_CLAIM,
    HOST_CLEAN,
    NO_COMMAND_TWICE,
    NO_SECRET_LEAK,
    RSS_BOUNDED,
    LEADER_TAKEN_OVER,
];

/// `leader-taken-over`: the Lease's holders read while the killed leader `killed` was down for `down_secs`
/// (in order; an unreadable Lease left out). Another replica must have held it by the end.
pub fn leader_taken_over(killed: &str, holders: &[String], down_secs: u64) -> Option<Violation> {
    if holders.iter().any(|h| !h.is_empty() && h != killed) {
        return None;
    }
    Some(Violation {
        check: LEADER_TAKEN_OVER.into(),
        message: format!(
            "leader {killed} killed: no other replica took the Lease in {down_secs} s (holders read: {})",
            if holders.is_empty() {
                "none".to_owned()
            } else {
                holders.join(", ")
            }
        ),
    })
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// The check's name (one of this module's constants).
    pub check: String,
    /// What is wrong, where.
    pub message: String,
}

impl Violation {
    fn new(check: &str, message: impl Into<String>) -> Self {
        Self {
            check: check.to_owned(),
            message: message.into(),
        }
    }
}

fn items(list: &Value) -> &[Value] {
    list.get("items")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or_default()
}

/// Where the Machines of a cluster stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// `want` Machines, all Running with a Node.
    Ready,
    /// Every Machine Running or failed terminally with a cause (the causes).
    Terminal(Vec<String>),
    /// Not there yet (what is missing).
    NotYet(String),
}

/// Whether the cluster's `want` Machines (`machines`, `kkmachines`: `kubectl get -o json` lists of the
/// cluster's namespace) are settled: Running with a `nodeRef`, or their KKMachine `Failed` with a condition
/// that names a reason. A KKMachine Failed without any reason is not a settled state: it is reported as not
/// yet, and the bound turns it into a violation.
pub fn machines_settled(machines: &Value, kkmachines: &Value, want: usize) -> Settled {
    let kk: BTreeMap<&str, &Value> = items(kkmachines)
        .iter()
        .map(|m| (s(m, &["metadata", "name"]), m))
        .collect();
    let ms = items(machines);
    if ms.len() != want {
        return Settled::NotYet(format!("{} Machines, want {want}", ms.len()));
    }
    let mut pending = Vec::new();
    let mut terminal = Vec::new();
    for m in ms {
        let name = s(m, &["metadata", "name"]);
        let phase = s(m, &["status", "phase"]);
        if phase == "Running" && !s(m, &["status", "nodeRef", "name"]).is_empty() {
            continue;
        }
        let infra = s(m, &["spec", "infrastructureRef", "name"]);
        let kkm = kk.get(infra);
        let kk_phase = kkm.map(|k| s(k, &["status", "phase"])).unwrap_or_default();
        if kk_phase == "Failed" {
            let cause = kkm
                .and_then(|k| k.pointer("/status/conditions"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|c| s(c, &["status"]) == "False" && !s(c, &["reason"]).is_empty())
                .map(|c| format!("{}: {}", s(c, &["reason"]), s(c, &["message"])))
                .next();
            if let Some(cause) = cause {
                terminal.push(format!("Machine {name} (KKMachine {infra}) failed: {cause}"));
                continue;
            }
            pending.push(format!(
                "Machine {name}: KKMachine {infra} Failed without a condition naming the cause"
            ));
            continue;
        }
        let step = kkm.map(|k| s(k, &["status", "step"])).unwrap_or_default();
        pending.push(format!(
            "Machine {name} {phase:?} (KKMachine {infra} {kk_phase:?}{})",
            if step.is_empty() {
                String::new()
            } else {
                format!(", step {step}")
            }
        ));
    }
    match (pending.is_empty(), terminal.is_empty()) {
        (true, true) => Settled::Ready,
        (true, false) => Settled::Terminal(terminal),
        (false, _) => Settled::NotYet(pending.join("; ")),
    }
}

/// A test host as the fleet or sandbox knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostId {
    /// Its name.
    pub name: String,
    /// The address the clusters list it by.
    pub address: String,
    /// Its SSH host key fingerprint (`SHA256:...`).
    pub fingerprint: String,
}

/// The KKInstance claiming a host: `ns/name` (uid).
/// The holder uids (`holder-uid` annotations) of the host-claim Leases held for `namespace` now: taken before
/// a campaign, the claims an earlier run left (not this run's leftovers).
pub fn claims_held_for(leases: &Value, namespace: &str) -> BTreeSet<String> {
    let prefix = format!("{namespace}/");
    items(leases)
        .iter()
        .map(lease_holder)
        .filter(|(holder, _)| holder.starts_with(&prefix))
        .map(|(_, uid)| uid)
        .collect()
}

fn lease_holder(lease: &Value) -> (String, String) {
    (
        s(lease, &["spec", "holderIdentity"]).to_owned(),
        s(
            lease,
            &[
                "metadata",
                "annotations",
                "infrastructure.cluster.x-k8s.io/holder-uid",
            ],
        )
        .to_owned(),
    )
}

fn lease_identity(lease: &Value) -> &str {
    s(
        lease,
        &[
            "metadata",
            "annotations",
            "infrastructure.cluster.x-k8s.io/host-identity",
        ],
    )
}

/// Hosts claimed twice: two KKInstances (`kkinstances`, every namespace) listing one address, or a host whose
/// host-key Lease and address Lease (`leases`: the host-claim Leases) name different holders.
pub fn double_claims(kkinstances: &Value, leases: &Value, hosts: &[HostId]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut by_address: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for i in items(kkinstances) {
        by_address
            .entry(s(i, &["spec", "address"]))
            .or_default()
            .push(format!(
                "{}/{}",
                s(i, &["metadata", "namespace"]),
                s(i, &["metadata", "name"])
            ));
    }
    for (addr, holders) in by_address {
        if holders.len() > 1 {
            out.push(Violation::new(
                NO_DOUBLE_CLAIM,
                format!(
                    "host {addr} is claimed by {} KKInstances: {}",
                    holders.len(),
                    holders.join(", ")
                ),
            ));
        }
    }
    for h in hosts {
        let find = |id: &str| {
            items(leases)
                .iter()
                .find(|l| lease_identity(l) == id)
                .map(lease_holder)
        };
        if let (Some(by_key), Some(by_addr)) = (find(&h.fingerprint), find(&h.address))
            && by_key != by_addr
        {
            out.push(Violation::new(
                NO_DOUBLE_CLAIM,
                format!(
                    "host {} is split between two claims: its host-key Lease is held by {} (uid {}), its address \
                     Lease by {} (uid {})",
                    h.name, by_key.0, by_key.1, by_addr.0, by_addr.1
                ),
            ));
        }
    }
    out
}

/// How many of `hosts` have both their host-key and their address Lease among `leases` (what
/// [`double_claims`] could compare: a check that finds no pair compares nothing, and the driver says so).
pub fn claimed_pairs(leases: &Value, hosts: &[HostId]) -> usize {
    let has = |id: &str| items(leases).iter().any(|l| lease_identity(l) == id);
    hosts
        .iter()
        .filter(|h| has(&h.fingerprint) && has(&h.address))
        .count()
}

/// What the deletion of the cluster in `namespace` left: KKInstances there, host-claim Leases held for it.
pub fn leftover_claims(
    kkinstances: &Value,
    leases: &Value,
    namespace: &str,
    before: &BTreeSet<String>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for i in items(kkinstances) {
        if s(i, &["metadata", "namespace"]) == namespace {
            out.push(Violation::new(
                NO_LEFTOVER_CLAIM,
                format!(
                    "KKInstance {namespace}/{} still exists after the Cluster was deleted (phase {:?})",
                    s(i, &["metadata", "name"]),
                    s(i, &["status", "phase"])
                ),
            ));
        }
    }
    let prefix = format!("{namespace}/");
    for l in items(leases) {
        let (holder, uid) = lease_holder(l);
        if holder.starts_with(&prefix) && !before.contains(&uid) {
            out.push(Violation::new(
                NO_LEFTOVER_CLAIM,
                format!(
                    "host-claim Lease {} ({}) is still held by {holder} (uid {uid}) after the Cluster was deleted",
                    s(l, &["metadata", "name"]),
                    lease_identity(l)
                ),
            ));
        }
    }
    out
}

/// The probe run inside a host (`host-probe.sh`): prints one line per thing a reset host must not carry, then
/// its end marker.
pub const HOST_PROBE: &str = include_str!("host-probe.sh");
/// The probe's last line when it ran to its end.
pub const PROBE_END: &str = "capkk-chaos-probe-end";

/// The probe script for `owned_paths` (the product's, [`capkk_service::bootstrap::OWNED_PATHS`]): the
/// quoted list prepended as a variable, the script itself a file.
pub fn host_probe_script(owned_paths: &[&str]) -> String {
    // One path a line, the whole list quoted once: the script reads it line by line.
    format!(
        "OWNED_PATHS={}\n{HOST_PROBE}",
        shell_quote(&owned_paths.join("\n"))
    )
}

/// `value` in single quotes for `sh`.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Whether host `host`'s probe output says it is clean: every line but the end marker is something left; no end
/// marker means the probe did not run through (a host that cannot be inspected is not known to be clean).
pub fn host_clean(host: &str, probe_output: &str) -> Option<Violation> {
    host_clean_against(host, probe_output, &[])
}

/// [`host_clean`], ignoring what the host carried before the campaign (`baseline`: its probe's lines then, taken
/// only while it had no claim). A sandbox host's root is an overlay of the machine's, which may have its own
/// `/etc/cni` (podman's): that is the host's, not a leftover; a node container starts from a pristine image
/// and has an empty baseline.
pub fn host_clean_against(host: &str, probe_output: &str, baseline: &[String]) -> Option<Violation> {
    let lines: Vec<&str> = probe_output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.last() != Some(&PROBE_END) {
        return Some(Violation::new(
            HOST_CLEAN,
            format!(
                "host {host}: the probe did not run to its end (output: {:?})",
                probe_output.trim()
            ),
        ));
    }
    let left: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| *l != PROBE_END && !baseline.iter().any(|b| b == l))
        .collect();
    (!left.is_empty()).then(|| {
        Violation::new(
            HOST_CLEAN,
            format!("host {host} has no claim but is not reset: {}", left.join("; ")),
        )
    })
}

/// The journal reader run inside a host (`host-journals.sh`): prints each provisioning journal under a marker
/// naming its plan hash, then its end marker.
pub const JOURNALS_PROBE: &str = include_str!("host-journals.sh");
/// The journal reader's last line when it ran to its end.
pub const JOURNALS_END: &str = "capkk-chaos-journals-end";
const JOURNAL_HEAD: &str = "capkk-chaos-journal ";
const JOURNAL_UNREADABLE: &str = "capkk-chaos-journal-unreadable";

/// The journal reader for the provisioning service's state dir (`state_dir`:
/// [`capkk_service::provisioning::STATE_DIR`]), quoted and prepended as a variable; the script itself a file.
pub fn journals_script(state_dir: &str) -> String {
    format!("D={}\n{JOURNALS_PROBE}", shell_quote(state_dir))
}

/// A host's provisioning journals by plan hash, from the journal reader's output. An error when the reader did
/// not run to its end or could not read a journal: a host whose journals cannot be read is not known to be fine.
pub fn parse_journals(output: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut ended = false;
    for line in output.lines() {
        if ended && !line.trim().is_empty() {
            return Err(format!("output after the end marker: {line:?}"));
        }
        if line == JOURNALS_END {
            ended = true;
        } else if let Some(plan) = line.strip_prefix(JOURNAL_HEAD) {
            out.insert(plan.to_owned(), String::new());
            current = Some(plan.to_owned());
        } else if line == JOURNAL_UNREADABLE {
            return Err(format!(
                "journal {} could not be read",
                current.as_deref().unwrap_or("?")
            ));
        } else if let Some(plan) = &current {
            let text = out.entry(plan.clone()).or_default();
            text.push_str(line);
            text.push('\n');
        } else if !line.trim().is_empty() {
            return Err(format!("a line before the first journal: {line:?}"));
        }
    }
    if !ended {
        return Err(format!(
            "the journal reader did not run to its end (output: {:?})",
            output.trim()
        ));
    }
    Ok(out)
}

/// How often a step ran according to one journal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepRuns {
    /// `<id> start` lines: a command item journals one right before it runs (non-command steps never do).
    pub starts: usize,
    /// `<id> <exit code>` lines: written after the step ran (a command item whatever its exit code, a
    /// non-command step only when it succeeded).
    pub exits: usize,
    /// Runs cut short: a `start` followed by another `start` of the same step with no exit code between (its
    /// process died, and a later run started it again).
    pub interrupted: usize,
    /// The last `start` has no exit code after it: the step runs now, or its process died and no run resumed
    /// it yet. Neither is a second run.
    pub open: bool,
}

/// Every step of a journal (`<step-id> start`, `<step-id> <exit code>`, `provisioned`) with its runs; an error
/// naming the first line that is none of these.
pub fn step_runs(journal: &str) -> Result<BTreeMap<String, StepRuns>, String> {
    let mut out: BTreeMap<String, StepRuns> = BTreeMap::new();
    for (n, line) in journal.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line == "provisioned" {
            continue;
        }
        let bad = || format!("line {} is not a journal line: {line:?}", n + 1);
        let (id, what) = line.split_once(' ').ok_or_else(bad)?;
        if id.is_empty() || what.contains(' ') {
            return Err(bad());
        }
        let r = out.entry(id.to_owned()).or_default();
        if what == "start" {
            if r.open {
                r.interrupted += 1;
            }
            r.starts += 1;
            r.open = true;
        } else if !what.is_empty() && what.bytes().all(|b| b.is_ascii_digit()) {
            r.exits += 1;
            r.open = false;
        } else {
            return Err(bad());
        }
    }
    Ok(out)
}

/// One host restart the campaign injected, and the command steps it caught running: `(plan hash, step id)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restart {
    /// The fault's number in the campaign.
    pub fault: usize,
    /// The steps it caught.
    pub caught: BTreeSet<(String, String)>,
}

/// The command steps a host restart caught running, from the host's journals read right before the restart
/// (`before`) and right after it, once its SSH was back (`after`): a step whose last `start` had no exit code in
/// either read (in the one after: killed, or already resumed and running again), or one with more runs cut short
/// after than before (killed, resumed and finished between the restart and the read). A step that started in the
/// moment between the read and the power cut is seen by the read after.
pub fn caught_by_restart(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> BTreeSet<(String, String)> {
    let runs = |journals: &BTreeMap<String, String>| -> BTreeMap<(String, String), StepRuns> {
        journals
            .iter()
            .flat_map(|(plan, text)| {
                step_runs(text)
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |(id, r)| ((plan.clone(), id), r))
            })
            .collect()
    };
    let (b, a) = (runs(before), runs(after));
    let open = b.iter().chain(&a).filter(|(_, r)| r.open).map(|(k, _)| k.clone());
    let cut = a
        .iter()
        .filter(|(k, r)| r.interrupted > b.get(*k).map_or(0, |x| x.interrupted))
        .map(|(k, _)| k.clone());
    open.chain(cut).collect()
}

/// What [`commands_ran_once`] found on a host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalVerdict {
    /// Steps that ran twice without a campaign restart to explain it.
    pub violations: Vec<Violation>,
    /// Steps that ran again because a host restart of the campaign killed their first run (by design: the
    /// provisioning service re-runs a command item whose process died with the host), each with its reason.
    pub allowed: Vec<String>,
    /// Command runs compared (`start` lines), so that a check that compared nothing says so.
    pub command_runs: usize,
}

/// Whether every step of host `host`'s provisioning `journals` (by plan hash) ran at most once:
/// - a step with two exit codes in one journal completed twice: always a violation (a completed step is
///   journaled under the host-wide lock and never runs again; a retry drops a failed item's lines before it
///   re-runs it, so it leaves one exit code);
/// - a command item with a run cut short (a `start` followed by another `start`) ran again: allowed only as
///   often as host restarts of the campaign (`restarts`, this host's) caught that step running, and then
///   reported as allowed with its fault; otherwise a violation (a dropped connection, a manager restart or a
///   stopped sshd never interrupt a step: hang-ups are ignored and the host journals the step's end).
///
/// A journal line that is none of the three forms is a violation too: a journal that cannot be read is not
/// known to be fine.
pub fn commands_ran_once(
    host: &str,
    journals: &BTreeMap<String, String>,
    restarts: &[Restart],
) -> JournalVerdict {
    let mut v = JournalVerdict::default();
    for (plan, text) in journals {
        let runs = match step_runs(text) {
            Ok(r) => r,
            Err(e) => {
                v.violations.push(Violation::new(
                    NO_COMMAND_TWICE,
                    format!("host {host}: journal {plan}: {e}"),
                ));
                continue;
            }
        };
        for (id, r) in runs {
            v.command_runs += r.starts;
            if r.exits > 1 {
                v.violations.push(Violation::new(
                    NO_COMMAND_TWICE,
                    format!(
                        "host {host}: step {id} of plan {plan} completed {} times (the journal has {} exit codes \
                         for it, {} starts)",
                        r.exits, r.exits, r.starts
                    ),
                ));
            }
            if r.interrupted == 0 {
                continue;
            }
            let by: Vec<usize> = restarts
                .iter()
                .filter(|x| x.caught.contains(&(plan.clone(), id.clone())))
                .map(|x| x.fault)
                .collect();
            let faults = by.iter().map(|f| format!("#{f}")).collect::<Vec<_>>().join(", ");
            if r.interrupted > by.len() {
                v.violations.push(Violation::new(
                    NO_COMMAND_TWICE,
                    format!(
                        "host {host}: command step {id} of plan {plan} started {} times: {} run(s) cut short and run \
                         again, but {} (without a host restart of the campaign, a step is never cut short)",
                        r.starts,
                        r.interrupted,
                        if by.is_empty() {
                            "the campaign never restarted the host while it ran".to_owned()
                        } else {
                            format!(
                                "the campaign's host restarts caught it running only {} time(s) (fault {faults})",
                                by.len()
                            )
                        }
                    ),
                ));
            } else {
                v.allowed.push(format!(
                    "host {host}: command step {id} of plan {plan} ran again {} time(s) after the host restart of \
                     fault {faults} killed its run (the provider re-runs a step whose process died with the host: \
                     `start` without an exit code)",
                    r.interrupted
                ));
            }
        }
    }
    v
}

/// A secret value to look for, and what it is (for the message; never the value itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Secret {
    /// What it is (`SSH private key line 3`, `bootstrap token abcdef`).
    pub what: String,
    /// The value.
    pub value: String,
}

/// The lines of a PEM/OpenSSH private key's body that identify it (at least 20 characters: shorter ones could
/// match by chance).
pub fn private_key_secrets(pem: &str) -> Vec<Secret> {
    pem.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----") && l.len() >= 20)
        .enumerate()
        .map(|(i, l)| Secret {
            what: format!("SSH private key body line {}", i + 1),
            value: l.to_owned(),
        })
        .collect()
}

/// The bootstrap tokens (`[a-z0-9]{6}.[a-z0-9]{16}`) in `text` (CABPK's bootstrap data): each as the whole
/// token and its secret part alone (only the id may be shown).
pub fn bootstrap_token_secrets(text: &str) -> Vec<Secret> {
    let b = text.as_bytes();
    let tok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let mut out: Vec<Secret> = Vec::new();
    for (dot, _) in text.match_indices('.') {
        if dot < 6 || dot + 17 > b.len() {
            continue;
        }
        let (id, secret) = (&b[dot - 6..dot], &b[dot + 1..dot + 17]);
        let bounded = (dot == 6 || !tok(b[dot - 7])) && (dot + 17 == b.len() || !tok(b[dot + 17]));
        if bounded && id.iter().all(|c| tok(*c)) && secret.iter().all(|c| tok(*c)) {
            let id = String::from_utf8_lossy(id).into_owned();
            let secret = String::from_utf8_lossy(secret).into_owned();
            if out.iter().any(|s| s.value == secret) {
                continue;
            }
            out.push(Secret {
                what: format!("bootstrap token {id} (whole)"),
                value: format!("{id}.{secret}"),
            });
            out.push(Secret {
                what: format!("bootstrap token {id} (secret part)"),
                value: secret,
            });
        }
    }
    out
}

/// Every secret of `secrets` found in `text` (from `source`: the manager's log, the events, an object's
/// status). The message names the secret and the line number, never the value.
pub fn secret_leaks(source: &str, text: &str, secrets: &[Secret]) -> Vec<Violation> {
    let mut out = Vec::new();
    for sec in secrets.iter().filter(|s| s.value.len() >= 16) {
        if let Some((n, _)) = text.lines().enumerate().find(|(_, l)| l.contains(&sec.value)) {
            out.push(Violation::new(
                NO_SECRET_LEAK,
                format!("{} appears in {source} (line {})", sec.what, n + 1),
            ));
        }
    }
    out
}

/// `VmRSS` of a `/proc/<pid>/status` text, in KiB.
pub fn rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// A violation when `rss_kib` exceeds `max_kib`.
pub fn rss_bounded(rss_kib: u64, max_kib: u64) -> Option<Violation> {
    (rss_kib > max_kib).then(|| {
        Violation::new(
            RSS_BOUNDED,
            format!(
                "the manager's RSS is {} MiB, above the bound of {} MiB",
                rss_kib / 1024,
                max_kib / 1024
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn machine(name: &str, phase: &str, node: Option<&str>) -> Value {
        let mut status = json!({"phase": phase});
        if let Some(n) = node {
            status["nodeRef"] = json!({"name": n});
        }
        json!({"metadata": {"name": name}, "spec": {"infrastructureRef": {"name": format!("kk-{name}")}},
               "status": status})
    }

    fn kkmachine(name: &str, phase: &str, conditions: Value) -> Value {
        json!({"metadata": {"name": format!("kk-{name}")},
               "status": {"phase": phase, "step": "kubeadm", "conditions": conditions}})
    }

    #[test]
    fn machines_running_with_nodes_are_settled() {
        let ms = json!({"items": [machine("a", "Running", Some("n1")), machine("b", "Running", Some("n2"))]});
        assert_eq!(machines_settled(&ms, &json!({"items": []}), 2), Settled::Ready);
        match machines_settled(&ms, &json!({"items": []}), 3) {
            Settled::NotYet(m) => assert!(m.contains("2 Machines, want 3"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_provisioning_machine_is_not_settled_and_the_message_names_its_step() {
        let ms = json!({"items": [machine("a", "Running", Some("n1")), machine("b", "Provisioning", None)]});
        let kk = json!({"items": [kkmachine("b", "Provisioning", json!([]))]});
        match machines_settled(&ms, &kk, 2) {
            Settled::NotYet(m) => assert!(m.contains("Machine b") && m.contains("step kubeadm"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failed_machine_with_a_reason_is_terminal_and_without_one_is_not() {
        let ms = json!({"items": [machine("b", "Provisioning", None)]});
        let with = json!({"items": [kkmachine("b", "Failed", json!([
            {"type": "Ready", "status": "True", "reason": "Ignored"},
            {"type": "HostProvisioned", "status": "False", "reason": "BootstrapFailed", "message": "kubeadm exited 1"}]))]});
        match machines_settled(&ms, &with, 1) {
            Settled::Terminal(c) => assert!(c[0].contains("BootstrapFailed: kubeadm exited 1"), "{c:?}"),
            other => panic!("{other:?}"),
        }
        let without = json!({"items": [kkmachine("b", "Failed", json!([]))]});
        match machines_settled(&ms, &without, 1) {
            Settled::NotYet(m) => assert!(m.contains("without a condition naming the cause"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    fn lease(name: &str, identity: &str, holder: &str, uid: &str) -> Value {
        json!({"metadata": {"name": name, "annotations": {
                 "infrastructure.cluster.x-k8s.io/host-identity": identity,
                 "infrastructure.cluster.x-k8s.io/holder-uid": uid}},
               "spec": {"holderIdentity": holder}})
    }

    fn hosts() -> Vec<HostId> {
        vec![HostId {
            name: "h1".into(),
            address: "198.18.3.11".into(),
            fingerprint: "SHA256:abc".into(),
        }]
    }

    #[test]
    fn one_claim_per_host_passes_and_two_are_named() {
        let one = json!({"items": [
            {"metadata": {"namespace": "ns", "name": "c.h1"}, "spec": {"address": "198.18.3.11"}},
            {"metadata": {"namespace": "ns", "name": "c.h2"}, "spec": {"address": "198.18.3.12"}}]});
        let leases = json!({"items": [lease("k", "SHA256:abc", "ns/c.h1", "u1"),
                                      lease("a", "198.18.3.11", "ns/c.h1", "u1")]});
        assert_eq!(double_claims(&one, &leases, &hosts()), vec![]);
        let two = json!({"items": [
            {"metadata": {"namespace": "ns", "name": "c.h1"}, "spec": {"address": "198.18.3.11"}},
            {"metadata": {"namespace": "other", "name": "d.h1"}, "spec": {"address": "198.18.3.11"}}]});
        let v = double_claims(&two, &leases, &hosts());
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("ns/c.h1, other/d.h1"), "{v:?}");
        assert_eq!(v[0].check, NO_DOUBLE_CLAIM);
    }

    #[test]
    fn a_host_whose_two_leases_name_different_holders_is_a_double_claim() {
        let leases = json!({"items": [lease("k", "SHA256:abc", "ns/c.h1", "u1"),
                                      lease("a", "198.18.3.11", "ns/c.h1", "u2")]});
        assert_eq!(claimed_pairs(&leases, &hosts()), 1);
        assert_eq!(claimed_pairs(&json!({"items": []}), &hosts()), 0);
        let v = double_claims(&json!({"items": []}), &leases, &hosts());
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].message.contains("split between two claims"), "{v:?}");
    }

    #[test]
    fn claims_left_after_delete_are_named_and_other_namespaces_ignored() {
        let insts = json!({"items": [{"metadata": {"namespace": "ns", "name": "c.h1"}, "status": {"phase": "Deleting"}}]});
        let leases = json!({"items": [lease("capkk-host-key-1", "SHA256:abc", "ns/c.h1", "u1"),
                                      lease("capkk-host-key-2", "SHA256:def", "other/x", "u9")]});
        let none = BTreeSet::new();
        let v = leftover_claims(&insts, &leases, "ns", &none);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].message.contains("KKInstance ns/c.h1"));
        assert!(v[1].message.contains("capkk-host-key-1"));
        assert_eq!(
            leftover_claims(&json!({"items": []}), &leases, "third", &none),
            vec![]
        );
        // A claim held before the campaign began (an earlier, interrupted run's) is not this run's leftover;
        // the same Lease taken by a KKInstance of this run (another holder uid) is.
        let before = BTreeSet::from(["u1".to_owned()]);
        assert_eq!(
            leftover_claims(&json!({"items": []}), &leases, "ns", &before),
            vec![]
        );
        let retaken = json!({"items": [lease("capkk-host-key-1", "SHA256:abc", "ns/c.h1", "u7")]});
        assert_eq!(
            leftover_claims(&json!({"items": []}), &retaken, "ns", &before).len(),
            1
        );
    }

    #[test]
    fn a_clean_probe_passes_and_anything_left_or_a_cut_probe_fails() {
        assert_eq!(host_clean("h", &format!("\n{PROBE_END}\n")), None);
        let v = host_clean(
            "h",
            &format!("left /etc/kubernetes\nkubelet-active\n{PROBE_END}\n"),
        )
        .expect("dirty");
        assert!(
            v.message.contains("left /etc/kubernetes; kubelet-active"),
            "{v:?}"
        );
        let v = host_clean("h", "left /etc/kubernetes\n").expect("cut");
        assert!(v.message.contains("did not run to its end"), "{v:?}");
    }

    #[test]
    fn what_a_host_carried_before_the_campaign_is_not_a_leftover() {
        let baseline = vec!["left /etc/cni".to_owned()];
        let out = format!("left /etc/cni\n{PROBE_END}\n");
        assert_eq!(host_clean_against("h", &out, &baseline), None);
        let out = format!("left /etc/cni\nleft /etc/kubernetes\n{PROBE_END}\n");
        let v = host_clean_against("h", &out, &baseline).expect("a new path is left");
        assert!(v.message.ends_with("not reset: left /etc/kubernetes"), "{v:?}");
        assert!(host_clean("h", &format!("left /etc/cni\n{PROBE_END}")).is_some());
    }

    #[test]
    fn the_probe_script_quotes_every_path() {
        let s = host_probe_script(&["/etc/kubernetes", "/it's"]);
        assert!(s.starts_with("OWNED_PATHS='/etc/kubernetes\n/it'\\''s'\n"), "{s}");
        assert!(s.ends_with(&format!("{PROBE_END}\n")) || s.contains(PROBE_END));
    }

    #[test]
    fn the_probe_script_reports_a_path_left_behind_and_ends_with_its_marker() {
        let dir = std::env::temp_dir().join(format!("capkk-chaos-probe-{}", std::process::id()));
        let left = dir.join("etc/kubernetes");
        std::fs::create_dir_all(&left).expect("temp dir");
        let gone = dir.join("var/lib/etcd");
        let paths = [left.to_str().expect("utf-8"), gone.to_str().expect("utf-8")];
        let out = std::process::Command::new("sh")
            .args(["-c", &host_probe_script(&paths)])
            .output()
            .expect("sh runs");
        std::fs::remove_dir_all(&dir).expect("cleanup");
        let text = String::from_utf8_lossy(&out.stdout);
        // The machine's own services and processes may show up (node containers of other runs share its
        // /proc): only the paths and the end marker are asserted here.
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("left")).collect();
        assert_eq!(lines, [format!("left {}", left.display())], "{text}");
        assert_eq!(text.lines().last(), Some(PROBE_END), "{text}");
        let v = host_clean("h", &text).expect("a left path is a violation");
        assert!(v.message.contains("etc/kubernetes"), "{v:?}");
    }

    /// The journal of a provisioned worker node container (kubeadm join, then two postKubeadmCommands items),
    /// as `cat` printed it on a running cluster: write_files steps journal only their exit code, command items
    /// `start` then their exit code, and `provisioned` follows the item that wrote the sentinel.
    const WORKER_JOURNAL: &str = "e846bd589a01d289 0\na296d956b881c45f 0\n0c1d2e3f40516273 0\n1a2b3c4d5e6f7081 0\n\
        2b3c4d5e6f708192 0\n3c4d5e6f708192a3 0\n4d5e6f708192a3b4 0\n5e6f708192a3b4c5 0\n6f708192a3b4c5d6 0\n\
        708192a3b4c5d6e7 0\n8192a3b4c5d6e7f8 0\ne2577ab3f86790e0 start\ne2577ab3f86790e0 0\nprovisioned\n\
        dc82d2f2e2c30ab7 start\ndc82d2f2e2c30ab7 0\na39eb958d7e88e1b start\na39eb958d7e88e1b 0\n";

    fn journals(plan: &str, text: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(plan.to_owned(), text.to_owned())])
    }

    #[test]
    fn the_journal_of_a_provisioned_node_shows_every_step_ran_once() {
        let runs = step_runs(WORKER_JOURNAL).expect("parses");
        assert_eq!(runs.len(), 14);
        assert_eq!(
            runs["e846bd589a01d289"],
            StepRuns {
                starts: 0,
                exits: 1,
                interrupted: 0,
                open: false
            }
        );
        assert_eq!(
            runs["dc82d2f2e2c30ab7"],
            StepRuns {
                starts: 1,
                exits: 1,
                interrupted: 0,
                open: false
            }
        );
        let v = commands_ran_once("h1", &journals("p1", WORKER_JOURNAL), &[]);
        assert_eq!(
            v,
            JournalVerdict {
                violations: vec![],
                allowed: vec![],
                command_runs: 3
            }
        );
    }

    #[test]
    fn a_command_started_twice_without_a_restart_of_its_host_is_a_violation() {
        let text =
            format!("{WORKER_JOURNAL}f00dfeedf00dfeed start\nf00dfeedf00dfeed start\nf00dfeedf00dfeed 0\n");
        let v = commands_ran_once("h1", &journals("p1", &text), &[]);
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert_eq!(v.violations[0].check, NO_COMMAND_TWICE);
        assert!(
            v.violations[0].message.contains(
                "host h1: command step f00dfeedf00dfeed of plan p1 started 2 times: 1 run(s) cut short"
            ) && v.violations[0].message.contains("never restarted the host"),
            "{v:?}"
        );
        assert!(v.allowed.is_empty());
    }

    #[test]
    fn a_restart_of_another_step_or_another_plan_does_not_excuse_a_repeated_start() {
        let text = "aa start\naa start\naa 0\nbb start\nbb 0\n";
        let other = Restart {
            fault: 4,
            caught: BTreeSet::from([
                ("p1".to_owned(), "bb".to_owned()),
                ("p0".to_owned(), "aa".to_owned()),
            ]),
        };
        let v = commands_ran_once("h1", &journals("p1", text), &[other]);
        assert_eq!(v.violations.len(), 1, "{v:?}");
    }

    #[test]
    fn a_step_rerun_after_the_campaign_restarted_its_host_while_it_ran_is_allowed_and_reported() {
        let before = journals("p1", "w1 0\naa start\n");
        let after = journals("p1", "w1 0\naa start\n");
        let caught = caught_by_restart(&before, &after);
        assert_eq!(caught, BTreeSet::from([("p1".to_owned(), "aa".to_owned())]));
        let restart = Restart { fault: 3, caught };
        let text = "w1 0\naa start\naa start\naa 0\nprovisioned\n";
        let v = commands_ran_once("h1", &journals("p1", text), std::slice::from_ref(&restart));
        assert!(v.violations.is_empty(), "{v:?}");
        assert_eq!(v.allowed.len(), 1);
        assert!(
            v.allowed[0].starts_with(
                "host h1: command step aa of plan p1 ran again 1 time(s) after the host restart of fault #3"
            ),
            "{v:?}"
        );
        // One restart excuses one cut-short run, not two.
        let twice = "aa start\naa start\naa start\naa 0\n";
        let v = commands_ran_once("h1", &journals("p1", twice), &[restart]);
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(
            v.violations[0].message.contains("only 1 time(s) (fault #3)"),
            "{v:?}"
        );
    }

    #[test]
    fn a_restart_catches_a_step_started_just_before_it_or_already_resumed_after_it() {
        // Started between the read before and the power cut: open only in the read after.
        let c = caught_by_restart(&journals("p", "aa 0\n"), &journals("p", "aa 0\nbb start\n"));
        assert_eq!(c, BTreeSet::from([("p".to_owned(), "bb".to_owned())]));
        // Started after the read before, killed, resumed and finished before the read after: one more run cut
        // short than before (the rule that alone sees it).
        let c = caught_by_restart(
            &journals("p", "aa 0\n"),
            &journals("p", "aa 0\nbb start\nbb start\nbb 0\n"),
        );
        assert_eq!(c, BTreeSet::from([("p".to_owned(), "bb".to_owned())]));
        // Finished steps are not caught.
        let c = caught_by_restart(
            &journals("p", "bb start\nbb 0\n"),
            &journals("p", "bb start\nbb 0\n"),
        );
        assert!(c.is_empty(), "{c:?}");
    }

    #[test]
    fn a_step_running_now_or_failed_once_is_not_a_second_run() {
        let v = commands_ran_once("h1", &journals("p", "aa start\naa 1\nbb start\n"), &[]);
        assert_eq!(
            v,
            JournalVerdict {
                violations: vec![],
                allowed: vec![],
                command_runs: 2
            }
        );
    }

    #[test]
    fn a_step_completed_twice_is_a_violation_even_after_a_restart() {
        let restart = Restart {
            fault: 1,
            caught: BTreeSet::from([("p".to_owned(), "aa".to_owned())]),
        };
        let v = commands_ran_once(
            "h1",
            &journals("p", "w1 0\nw1 0\naa start\naa 0\naa start\naa 0\n"),
            &[restart],
        );
        assert_eq!(v.violations.len(), 2, "{v:?}");
        assert!(
            v.violations[0]
                .message
                .contains("step aa of plan p completed 2 times"),
            "{v:?}"
        );
        assert!(
            v.violations[1]
                .message
                .contains("step w1 of plan p completed 2 times"),
            "{v:?}"
        );
    }

    #[test]
    fn a_journal_line_of_another_form_is_a_violation_naming_it() {
        let v = commands_ran_once("h1", &journals("p", "aa start\naa ok\n"), &[]);
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(
            v.violations[0]
                .message
                .contains("line 2 is not a journal line: \"aa ok\""),
            "{v:?}"
        );
    }

    #[test]
    fn the_journal_reader_output_is_split_by_plan_and_a_cut_read_is_an_error() {
        let out = format!(
            "capkk-chaos-journal p1\naa start\naa 0\n\ncapkk-chaos-journal p2\nbb 0\n\n{JOURNALS_END}\n"
        );
        let j = parse_journals(&out).expect("parses");
        assert_eq!(j.keys().collect::<Vec<_>>(), ["p1", "p2"]);
        assert_eq!(step_runs(&j["p1"]).expect("p1")["aa"].exits, 1);
        assert_eq!(parse_journals(&format!("{JOURNALS_END}\n")), Ok(BTreeMap::new()));
        let cut = parse_journals("capkk-chaos-journal p1\naa start\n").expect_err("no end marker");
        assert!(cut.contains("did not run to its end"), "{cut}");
        let bad = parse_journals(&format!(
            "capkk-chaos-journal p1\ncapkk-chaos-journal-unreadable\n{JOURNALS_END}\n"
        ))
        .expect_err("unreadable");
        assert!(bad.contains("journal p1 could not be read"), "{bad}");
    }

    #[test]
    fn the_journal_reader_prints_the_journals_of_its_state_dir_quoted() {
        let dir = std::env::temp_dir().join(format!("capkk-chaos-journals-{} it's", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("p1.journal"), WORKER_JOURNAL).expect("journal");
        // A last line without its newline (a cut write) must not run into the next marker.
        std::fs::write(dir.join("p2.journal"), "aa start").expect("journal");
        std::fs::write(dir.join("p1.aa.tail"), "not a journal").expect("tail");
        let script = journals_script(dir.to_str().expect("utf-8"));
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .expect("sh runs");
        std::fs::remove_dir_all(&dir).expect("cleanup");
        let text = String::from_utf8_lossy(&out.stdout);
        let j = parse_journals(&text).expect("parses");
        assert_eq!(j.keys().collect::<Vec<_>>(), ["p1", "p2"], "{text}");
        assert_eq!(j["p1"].trim_end(), WORKER_JOURNAL.trim_end());
        assert!(step_runs(&j["p2"]).expect("p2")["aa"].open);
        // No state dir at all (a host never provisioned, or reset): no journal, and the read still ends.
        let gone = journals_script("/nonexistent/capkk-chaos");
        let out = std::process::Command::new("sh")
            .args(["-c", &gone])
            .output()
            .expect("sh runs");
        assert_eq!(
            parse_journals(&String::from_utf8_lossy(&out.stdout)),
            Ok(BTreeMap::new())
        );
    }

    #[test]
    fn key_lines_and_tokens_are_found_in_logs_and_never_printed() {
        let pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\nshort\n-----END OPENSSH PRIVATE KEY-----\n";
        let mut secrets = private_key_secrets(pem);
        assert_eq!(secrets.len(), 1);
        secrets.extend(bootstrap_token_secrets(
            "kubeadm join 1.2.3.4:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:x",
        ));
        assert_eq!(secrets.len(), 3, "{secrets:?}");
        assert_eq!(secrets[1].value, "abcdef.0123456789abcdef");
        let log = "line one\nconnected\ntoken 0123456789abcdef leaked here\n";
        let v = secret_leaks("manager.log", log, &secrets);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            v[0].message,
            "bootstrap token abcdef (secret part) appears in manager.log (line 3)"
        );
        assert!(!v[0].message.contains("0123456789abcdef"));
        assert_eq!(secret_leaks("events", "nothing here", &secrets), vec![]);
    }

    #[test]
    fn token_scanning_skips_longer_words_and_version_strings() {
        assert_eq!(
            bootstrap_token_secrets("v1.36.3 and xabcdef.0123456789abcdef"),
            vec![]
        );
        assert_eq!(bootstrap_token_secrets("abcdef.0123456789abcdefg"), vec![]);
        assert_eq!(bootstrap_token_secrets("\"abcdef.0123456789abcdef\"").len(), 2);
    }

    #[test]
    fn rss_is_read_from_proc_status_and_bounded() {
        let status = "Name:\tmanager\nVmPeak:\t  900 kB\nVmRSS:\t   51200 kB\n";
        assert_eq!(rss_kib(status), Some(51200));
        assert_eq!(rss_kib("Name: x\n"), None);
        assert_eq!(rss_bounded(51200, 512 * 1024), None);
        let v = rss_bounded(600 * 1024, 512 * 1024).expect("above");
        assert_eq!(
            v.message,
            "the manager's RSS is 600 MiB, above the bound of 512 MiB"
        );
    }

    #[test]
    fn a_killed_leader_must_be_followed_by_another_holder() {
        let h = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(leader_taken_over("m", &h(&["m", "m", "m-b"]), 20), None);
        let v = leader_taken_over("m", &h(&["m", "m", ""]), 20).expect("nobody took over");
        assert_eq!(v.check, LEADER_TAKEN_OVER);
        assert!(
            v.message.contains("m killed") && v.message.contains("20 s"),
            "{}",
            v.message
        );
        assert!(
            leader_taken_over("m", &[], 20).is_some(),
            "no read is no takeover"
        );
    }
}
