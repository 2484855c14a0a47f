//! test/lib/heartbeat.sh (the "no silent minute" wrapper of long builds and boots) and `longest-gap`, the tool
//! that measures what it is for. Plain tier: needs bash only.

use std::{
    path::PathBuf,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `script` in bash with test/lib/heartbeat.sh sourced and a heartbeat every `secs` seconds.
fn bash(script: &str, secs: &str) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail; source test/lib/heartbeat.sh; {script}"
        ))
        .current_dir(repo())
        .env("CAPKK_HEARTBEAT_SECS", secs)
        .output()
        .expect("bash runs")
}

fn heartbeats(stderr: &[u8], label: &str) -> Vec<u64> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{label}: still running, ")))
        .map(|rest| rest.split('s').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn a_long_command_gets_a_line_with_its_elapsed_time_until_it_ends_and_keeps_its_exit_status() {
    let out = bash(
        "heartbeat 'go build' bash -c 'echo built; sleep 3.5; exit 3'",
        "1",
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "built\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let beats = heartbeats(&out.stderr, "go build");
    assert!(beats.len() >= 2, "{stderr}");
    assert!(
        beats.windows(2).all(|w| w[0] < w[1]),
        "elapsed times grow: {stderr}"
    );
    assert!(stderr.contains("(load "), "{stderr}");
}

#[test]
fn a_logged_command_stays_quiet_and_its_heartbeat_shows_the_log_s_last_line() {
    let dir = std::env::temp_dir().join(format!("capkk-heartbeat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("build.log");
    let out = bash(
        &format!(
            "heartbeat --log {} 'make build' bash -c 'echo \"   Compiling kube v5\"; sleep 2.5; echo done'",
            log.display()
        ),
        "1",
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.is_empty(),
        "the command's output goes to the log: {out:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("make build: still running, ") && stderr.contains(" | Compiling kube v5\n"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "   Compiling kube v5\ndone\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_short_command_returns_at_once_and_leaves_no_process_holding_the_output_open() {
    // A 60 s heartbeat: its sleep would hold the caller's pipe for a minute if it kept our stderr.
    let t0 = Instant::now();
    let out = bash("heartbeat label true", "60");
    assert!(out.status.success(), "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(20), "took {:?}", t0.elapsed());
    assert!(heartbeats(&out.stderr, "label").is_empty());
}

#[test]
fn executed_as_a_make_recipe_runs_the_command_under_a_heartbeat() {
    let out = Command::new("test/lib/heartbeat.sh")
        .args(["node-artifacts", "bash", "-c", "sleep 2.5; exit 4"])
        .current_dir(repo())
        .env("CAPKK_HEARTBEAT_SECS", "1")
        .output()
        .expect("heartbeat.sh runs");
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(!heartbeats(&out.stderr, "node-artifacts").is_empty(), "{out:?}");
}

/// Runs `script` (with test/lib/heartbeat.sh sourced) piped through `longest-gap`; returns its report.
fn longest_gap_of(script: &str) -> String {
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source test/lib/heartbeat.sh; {{ {script}; }} 2>&1 | \"$GAP\" --top 1"
        ))
        .current_dir(repo())
        .env("CAPKK_HEARTBEAT_SECS", "1")
        .env("GAP", env!("CARGO_BIN_EXE_longest-gap"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stderr).unwrap()
}

fn gap_secs(report: &str) -> f64 {
    let line = report
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("no gap in {report}"));
    line.trim()
        .trim_end_matches(" s")
        .parse()
        .unwrap_or_else(|_| panic!("{report}"))
}

#[test]
fn longest_gap_reports_a_silent_step_and_the_heartbeat_shortens_it() {
    let silent = longest_gap_of("echo start; sleep 4; echo end");
    assert!(silent.starts_with("longest-gap: 2 lines in "), "{silent}");
    assert!(gap_secs(&silent) >= 3.9, "{silent}");
    assert!(
        silent.contains("after  line 1 (+") && silent.contains("): start"),
        "{silent}"
    );
    assert!(
        silent.contains("before line 2 (+") && silent.contains("): end"),
        "{silent}"
    );

    let beating = longest_gap_of("echo start; heartbeat step sleep 4; echo end");
    assert!(gap_secs(&beating) < 3.0, "{beating}");
}

#[test]
fn longest_gap_reads_its_own_log_back() {
    let dir = std::env::temp_dir().join(format!("capkk-longest-gap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("run.log");
    std::fs::write(&log, "[+0.500] a\n[+2.000] b\n[+9.300] c\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_longest-gap"))
        .args(["--top", "1", "--read"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(report.starts_with("longest-gap: 3 lines in 9.3 s"), "{report}");
    assert!(report.contains("\n      7.3 s\n"), "{report}");
    assert!(report.contains("after  line 2 (+2.0 s): b\n"), "{report}");
    assert!(report.contains("before line 3 (+9.3 s): c\n"), "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}
