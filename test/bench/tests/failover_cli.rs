//! `capkk-bench failover report` as test/vm/real.sh calls it: the row, and the verdict as the exit status.
//!
//! Being an integration test also makes `cargo test --no-run` (`make build`) build the `capkk-bench` binary
//! itself, with the tests' feature set: the real tiers run it from that build (without a test of its own,
//! cargo built only the binary's unit-test harness, and CI's real tiers found no `capkk-bench`).

use std::{path::PathBuf, process::Command};

/// A probe log (named per test: the tests run in parallel) of a failover at t=100: cp-1 held the VIP, cp-2 holds it from 103.2; the API went unanswered
/// from 100.0 to 103.4 (3.5 s since its last answer at 99.9); the workload never missed.
fn log(name: &str) -> PathBuf {
    let mut text = String::new();
    for i in 0..100 {
        let t = 95.0 + f64::from(i) / 10.0;
        let holder = if i < 82 { "cp-1" } else { "cp-2" };
        let api = if (50..84).contains(&i) { "fail" } else { "ok" };
        text.push_str(&format!("{t:.3} vip ok 0.000 {holder}\n"));
        text.push_str(&format!("{t:.3} api {api} 0.000 -\n"));
        text.push_str(&format!("{t:.3} workload ok 0.000 hello\n"));
    }
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}.log", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

fn report(log: &PathBuf, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capkk-bench"))
        .args(["failover", "report", "--since", "100", "--log"])
        .arg(log)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn the_report_prints_a_row_naming_the_holders_and_the_api_gap() {
    let log = log("row");
    let out = report(&log, &["--label", "containers 1", "--header"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "a markdown header (two lines) and one row: {stdout}"
    );
    assert!(lines[0].starts_with("| run | VIP holder |"), "{stdout}");
    assert!(
        lines[2].starts_with("| containers 1 | cp-1 → cp-2 | 3.2 | 3.5 |"),
        "{stdout}"
    );
    std::fs::remove_file(log).unwrap();
}

#[test]
fn a_gap_within_the_bound_passes_quietly_and_one_past_it_fails_naming_the_api() {
    let log = log("verdict");
    let pass = report(&log, &["--max-gap-s", "5", "--quiet"]);
    assert!(pass.status.success(), "{pass:?}");
    assert!(pass.stdout.is_empty() && pass.stderr.is_empty(), "{pass:?}");

    let fail = report(&log, &["--max-gap-s", "3", "--quiet"]);
    let stderr = String::from_utf8_lossy(&fail.stderr);
    assert_eq!(fail.status.code(), Some(1), "{fail:?}");
    assert!(
        stderr.starts_with("failover: ") && stderr.contains("the API went unanswered for 3.5 s"),
        "{stderr}"
    );
    assert!(fail.stdout.is_empty(), "{fail:?}");
    std::fs::remove_file(log).unwrap();
}
