//! Running test binaries several at a time (`parallel-tests`, `make test-integration INTEGRATION_JOBS=N`).
//!
//! The selection is built once (`cargo test --no-run --message-format=json`, [`executables`]); every binary it
//! names runs, each with its output in its own file, printed whole when it ends. [`plan`] orders them: the
//! binaries that must run alone first, one at a time ([`MUST_RUN_ALONE`]), then the others longest first (by
//! the seconds of their last run, [`parse_times`]; a binary without a time first, as if it were the longest).
//!
//! What two integration binaries share when they run at once, and how each risk is handled, is a table in
//! docs/testing.md ("Parallel integration runs"): here, [`MUST_RUN_ALONE`] (API-server-wide counts) and, with
//! `CAPKK_CRD_DIR` set (other CRDs replacing the ones every binary installs), everything alone; the test
//! helpers keep the rest apart (namespaces, sandbox names and slots, ports from port 0, the kubeadm
//! simulator's build).

use std::{collections::BTreeMap, fmt::Write as _, path::PathBuf};

/// Integration binaries that run with no other binary at the same time, and why.
pub const MUST_RUN_ALONE: &[(&str, &str)] = &[
    (
        "mgmt_watches",
        "counts the KKInstance LISTs the API server serves to all clients",
    ),
    (
        "mgmt_diagnostics",
        "counts the TokenReviews the API server answers to all clients",
    ),
];

/// One test executable of the selection.
#[derive(Clone, Debug, PartialEq)]
pub struct TestBinary {
    /// The test target's name (`--test NAME`).
    pub name: String,
    /// The executable cargo built.
    pub path: PathBuf,
    /// Its package's directory (cargo runs a test binary there).
    pub package_dir: PathBuf,
}

/// The test executables in the output of `cargo test --no-run --message-format=json` (one JSON message a
/// line; other lines are ignored): integration test targets only (`kind` `test`), by target name.
pub fn executables(messages: &str) -> Vec<TestBinary> {
    let mut out: Vec<TestBinary> = messages
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| {
            m["reason"] == "compiler-artifact"
                && m["profile"]["test"] == true
                && m["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "test"))
        })
        .filter_map(|m| {
            let manifest = PathBuf::from(m["manifest_path"].as_str()?);
            Some(TestBinary {
                name: m["target"]["name"].as_str()?.to_owned(),
                path: PathBuf::from(m["executable"].as_str()?),
                package_dir: manifest.parent()?.to_owned(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// The names of `--test NAME` (or `--test=NAME`) in cargo test selection arguments.
pub fn selected_tests(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--test" {
            if let Some(n) = it.next() {
                out.push(n.clone());
            }
        } else if let Some(n) = a.strip_prefix("--test=") {
            out.push(n.to_owned());
        }
    }
    out
}

/// Seconds per binary from a times file (`NAME<TAB>SECONDS` lines, as [`format_times`] writes them); other
/// lines are ignored.
pub fn parse_times(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let (name, secs) = l.split_once('\t')?;
            Some((name.to_owned(), secs.trim().parse().ok()?))
        })
        .collect()
}

/// A times file of `times`, one `NAME<TAB>SECONDS` line each, sorted by name.
pub fn format_times(times: &BTreeMap<String, f64>) -> String {
    times.iter().fold(String::new(), |mut s, (n, t)| {
        let _ = writeln!(s, "{n}\t{t:.1}");
        s
    })
}

/// One binary's place in the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The binary's name.
    pub name: String,
    /// Nothing else runs while it runs.
    pub alone: bool,
}

/// The order of the run: the binaries that must run alone (those of `alone`, or all when `all_alone`) first,
/// by name; then the others, longest first by `times` (one without a time before all others; equal: by
/// name).
pub fn plan(names: &[String], times: &BTreeMap<String, f64>, alone: &[&str], all_alone: bool) -> Vec<Step> {
    let is_alone = |n: &str| all_alone || alone.contains(&n);
    let mut first: Vec<&String> = names.iter().filter(|n| is_alone(n)).collect();
    first.sort();
    let mut rest: Vec<&String> = names.iter().filter(|n| !is_alone(n)).collect();
    let secs = |n: &str| times.get(n).copied().unwrap_or(f64::INFINITY);
    rest.sort_by(|a, b| secs(b).total_cmp(&secs(a)).then(a.cmp(b)));
    first
        .into_iter()
        .map(|n| Step {
            name: n.clone(),
            alone: true,
        })
        .chain(rest.into_iter().map(|n| Step {
            name: n.clone(),
            alone: false,
        }))
        .collect()
}

/// Whether the next step of a plan may start now, with `running` binaries running (`running_alone`: one of
/// them must run alone) and at most `jobs` at a time. Steps start in the plan's order: a step that must run
/// alone waits until nothing runs, and nothing starts beside it.
pub fn may_start(next: &Step, running: usize, running_alone: bool, jobs: usize) -> bool {
    if next.alone {
        running == 0
    } else {
        !running_alone && running < jobs.max(1)
    }
}

/// How one binary ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The binary's name.
    pub name: String,
    /// `ok`, `FAILED (exit N)`, `FAILED (signal N)` or `FAILED (cannot run: ...)`.
    pub result: String,
    /// Its wall time.
    pub secs: f64,
}

impl Outcome {
    /// Whether it passed.
    pub fn ok(&self) -> bool {
        self.result == "ok"
    }
}

/// The summary printed at the end: one line per binary in the order they ended, then the total.
pub fn summary(outcomes: &[Outcome], jobs: usize, wall: f64) -> String {
    let failed = outcomes.iter().filter(|o| !o.ok()).count();
    let mut s = format!(
        "==== parallel-tests: {} binaries, {jobs} at a time\n",
        outcomes.len()
    );
    let _ = writeln!(s, "{:<28} {:<40} {:>8}", "binary", "result", "seconds");
    for o in outcomes {
        let _ = writeln!(s, "{:<28} {:<40} {:>8.0}", o.name, o.result, o.secs);
    }
    let total = if failed == 0 {
        "ok".to_owned()
    } else {
        format!("{failed} failed")
    };
    let _ = writeln!(s, "{:<28} {:<40} {:>8.0}", "total (wall)", total, wall);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_executables_are_the_integration_test_targets_of_cargos_messages() {
        let msgs = r#"{"reason":"compiler-artifact","manifest_path":"/w/controllers/Cargo.toml","target":{"kind":["test"],"name":"mgmt_inplace"},"profile":{"test":true},"executable":"/t/debug/deps/mgmt_inplace-1a"}
{"reason":"compiler-artifact","manifest_path":"/w/controllers/Cargo.toml","target":{"kind":["lib"],"name":"capkk_controllers"},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","manifest_path":"/w/controllers/Cargo.toml","target":{"kind":["bin"],"name":"manager"},"profile":{"test":false},"executable":"/t/debug/manager"}
{"reason":"compiler-artifact","manifest_path":"/w/test/mgmt/Cargo.toml","target":{"kind":["test"],"name":"mgmt_plane"},"profile":{"test":true},"executable":"/t/debug/deps/mgmt_plane-2b"}
   Compiling something (not JSON)
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            executables(msgs),
            vec![
                TestBinary {
                    name: "mgmt_inplace".into(),
                    path: "/t/debug/deps/mgmt_inplace-1a".into(),
                    package_dir: "/w/controllers".into(),
                },
                TestBinary {
                    name: "mgmt_plane".into(),
                    path: "/t/debug/deps/mgmt_plane-2b".into(),
                    package_dir: "/w/test/mgmt".into(),
                },
            ]
        );
    }

    #[test]
    fn the_selection_names_every_test_target_in_either_spelling() {
        let args = names(&[
            "--test",
            "mgmt_a",
            "--test=mgmt_b",
            "--no-fail-fast",
            "--test",
            "mgmt_c",
        ]);
        assert_eq!(selected_tests(&args), names(&["mgmt_a", "mgmt_b", "mgmt_c"]));
    }

    #[test]
    fn the_alone_binaries_come_first_then_the_longest_with_an_unknown_one_before_all() {
        let times = parse_times("mgmt_a\t10.0\nmgmt_b\t114.2\nmgmt_w\t43\nnot a line\nmgmt_c\t60.5\n");
        let steps = plan(
            &names(&["mgmt_a", "mgmt_b", "mgmt_c", "mgmt_new", "mgmt_w"]),
            &times,
            &["mgmt_w"],
            false,
        );
        let order: Vec<(&str, bool)> = steps.iter().map(|s| (s.name.as_str(), s.alone)).collect();
        assert_eq!(
            order,
            vec![
                ("mgmt_w", true),
                ("mgmt_new", false),
                ("mgmt_b", false),
                ("mgmt_c", false),
                ("mgmt_a", false)
            ]
        );
        assert!(
            plan(&names(&["mgmt_a", "mgmt_b"]), &times, &[], true)
                .iter()
                .all(|s| s.alone)
        );
    }

    #[test]
    fn an_alone_step_waits_for_an_empty_machine_and_nothing_joins_it() {
        let alone = Step {
            name: "w".into(),
            alone: true,
        };
        let other = Step {
            name: "a".into(),
            alone: false,
        };
        assert!(may_start(&alone, 0, false, 3));
        assert!(!may_start(&alone, 1, false, 3));
        assert!(!may_start(&other, 1, true, 3));
        assert!(may_start(&other, 2, false, 3));
        assert!(!may_start(&other, 3, false, 3));
    }

    #[test]
    fn times_round_trip_through_their_file() {
        let times: BTreeMap<String, f64> = [("b".to_owned(), 2.04), ("a".to_owned(), 114.0)].into();
        let text = format_times(&times);
        assert_eq!(text, "a\t114.0\nb\t2.0\n");
        assert_eq!(parse_times(&text)["a"], 114.0);
    }

    #[test]
    fn the_summary_lists_each_binary_and_counts_the_failures() {
        let s = summary(
            &[
                Outcome {
                    name: "mgmt_a".into(),
                    result: "ok".into(),
                    secs: 12.4,
                },
                Outcome {
                    name: "mgmt_b".into(),
                    result: "FAILED (exit 101)".into(),
                    secs: 80.0,
                },
            ],
            3,
            81.0,
        );
        assert!(s.contains("2 binaries, 3 at a time"), "{s}");
        assert!(
            s.contains("mgmt_b                       FAILED (exit 101)"),
            "{s}"
        );
        assert!(s.contains("total (wall)                 1 failed"), "{s}");
    }
}
