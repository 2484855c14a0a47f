//! The skip policy of every test that needs something of the machine (root, sshd, a management plane, ...).
//!
//! A test that cannot run **fails** and names what is missing: a green run must mean the work was done. The
//! only way out is explicit: `CAPKK_ALLOW_SKIP=1` turns the failure into a skip, which is announced on
//! stderr and appended to the file named by `CAPKK_SKIP_LOG` (one `reason<TAB>test` line per skipped test),
//! so that `make test` can end with a line counting the skips by reason even though cargo hides the stderr of
//! passing tests. Go tests (test/kubeadm-sim) follow the same rules and write to the same log.
//!
//! ```no_run
//! # fn missing_tools() -> Option<String> { None }
//! if capkk_sandbox::skip::unless_available("sandbox hosts", missing_tools()) {
//!     return; // only with CAPKK_ALLOW_SKIP=1
//! }
//! ```

use std::{
    fs,
    io::Write,
    path::{Path, PathBuf},
};

/// Environment variable that allows skipping (value `1`); anything else makes a missing prerequisite fail.
pub const ALLOW_SKIP_ENV: &str = "CAPKK_ALLOW_SKIP";
/// Environment variable naming the file that skipped tests are appended to.
pub const SKIP_LOG_ENV: &str = "CAPKK_SKIP_LOG";

/// Whether the user opted out of the no-skip rule (`CAPKK_ALLOW_SKIP=1`).
pub fn allowed() -> bool {
    std::env::var(ALLOW_SKIP_ENV).is_ok_and(|v| v == "1")
}

/// What to do with a test whose prerequisites are `missing`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Everything is there: run the test.
    Run,
    /// Skip it (only when skipping was allowed); the message says why.
    Skip(String),
    /// Fail it; the message names what is missing and how to get it.
    Fail(String),
}

/// The policy as a pure function: `what` names the facility ("sandbox hosts"), `missing` is `None` when it
/// is available or the reason it is not.
pub fn decide(what: &str, missing: Option<&str>, allow_skip: bool) -> Decision {
    match missing {
        None => Decision::Run,
        Some(reason) if allow_skip => Decision::Skip(format!("{what} unavailable ({reason})")),
        Some(reason) => Decision::Fail(format!(
            "{what} cannot run here: {reason}. Run `make deps` as root (it installs the missing packages), \
             or set {ALLOW_SKIP_ENV}=1 to skip such tests on purpose (make test then counts them)"
        )),
    }
}

/// Apply the policy for the calling test: returns `false` when the test can run, `true` when it must return
/// early (skip allowed and recorded), and panics with the reason otherwise.
#[track_caller]
pub fn unless_available(what: &str, missing: Option<String>) -> bool {
    match decide(what, missing.as_deref(), allowed()) {
        Decision::Run => false,
        Decision::Skip(reason) => {
            let test = current_test();
            eprintln!("SKIPPED {test}: {reason}");
            // The log is the only trace of a skip under cargo: not being able to write it is a failure.
            if let Some(log) = std::env::var_os(SKIP_LOG_ENV)
                && let Err(e) = record(Path::new(&log), &test, &reason)
            {
                panic!(
                    "skipping {test}: cannot append to {}: {e}",
                    PathBuf::from(log).display()
                );
            }
            true
        }
        Decision::Fail(message) => panic!("{message}"),
    }
}

/// Append one skipped test to `log` as `reason<TAB>test` (tabs and newlines in either are replaced).
pub fn record(log: &Path, test: &str, reason: &str) -> std::io::Result<()> {
    if let Some(dir) = log.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    // One write per line with O_APPEND: lines of tests running in parallel do not interleave.
    let line = format!("{}\t{}\n", clean(reason), clean(test));
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?
        .write_all(line.as_bytes())
}

/// The running test's name (libtest names each test's thread after it), or the executable's name.
fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map(str::to_owned)
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        })
        .unwrap_or_else(|| "unknown test".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_prerequisite_fails_unless_skipping_is_allowed() {
        assert_eq!(decide("sandbox hosts", None, false), Decision::Run);
        assert_eq!(decide("sandbox hosts", None, true), Decision::Run);
        match decide("sandbox hosts", Some("missing: sshd (openssh-server)"), false) {
            Decision::Fail(m) => {
                assert!(m.contains("sshd (openssh-server)"), "{m}");
                assert!(m.contains("make deps") && m.contains(ALLOW_SKIP_ENV), "{m}");
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        assert_eq!(
            decide("sandbox hosts", Some("missing: root"), true),
            Decision::Skip("sandbox hosts unavailable (missing: root)".into())
        );
    }

    #[test]
    fn skips_are_appended_one_line_each_with_reason_and_test() {
        let dir = std::env::temp_dir().join(format!("capkk-skip-log-{}", std::process::id()));
        let log = dir.join("sub/skips.log");
        record(&log, "a::b", "sandbox hosts unavailable (missing: root)").unwrap();
        record(&log, "c\td", "two\nlines").unwrap();
        let text = fs::read_to_string(&log).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            text,
            "sandbox hosts unavailable (missing: root)\ta::b\ntwo lines\tc d\n"
        );
    }
}
