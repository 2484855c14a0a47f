//! No silent skip: on a machine without sshd the sandbox tests fail and name the package, `make deps` names it
//! too, and only `CAPKK_ALLOW_SKIP=1` turns the failure into a skip that is counted. "A machine without sshd" is
//! a `PATH` that hides it: every other required command is linked into a directory of its own.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use capkk_sandbox::{REQUIRED_TOOLS, find_tool, skip, skip_unless_supported, unsupported_reason};

/// A directory with links to every command the sandbox needs except `hidden`.
fn path_without(hidden: &str, dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let extra = [
        "sh", "bash", "python3", "cargo", "rustc", "go", "sort", "awk", "sed", "head", "cut", "tr", "grep",
    ];
    for tool in REQUIRED_TOOLS.iter().map(|(t, _)| *t).chain(extra) {
        if tool != hidden
            && let Some(p) = find_tool(tool)
        {
            std::os::unix::fs::symlink(p, bin.join(tool)).unwrap();
        }
    }
    bin
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("capkk-prereq-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// Run the test `name` of this very binary in a child process with `path` as PATH.
fn run_child_test(name: &str, path: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("PATH", path)
        .env_remove(skip::ALLOW_SKIP_ENV)
        .env_remove(skip::SKIP_LOG_ENV);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What every sandbox test does first, as a test of its own: on this machine sandbox hosts can be built.
#[test]
fn sandbox_hosts_can_be_built_on_this_machine() {
    if skip_unless_supported() {
        return;
    }
    assert_eq!(unsupported_reason(), None);
    assert!(find_tool("sshd").unwrap().is_absolute());
}

#[test]
fn without_sshd_a_sandbox_test_fails_and_names_openssh_server() {
    let dir = tempdir("fail");
    let out = run_child_test(
        "sandbox_hosts_can_be_built_on_this_machine",
        &path_without("sshd", &dir),
        &[],
    );
    let all = text(&out);
    fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success(), "the test passed without sshd:\n{all}");
    assert!(all.contains("sshd (openssh-server)"), "{all}");
    assert!(
        all.contains("make deps") && all.contains("CAPKK_ALLOW_SKIP=1"),
        "{all}"
    );
    assert!(all.contains("1 failed"), "{all}");
}

#[test]
fn with_skipping_allowed_the_skip_is_recorded_with_its_reason() {
    let dir = tempdir("skip");
    let log = dir.join("skips.log");
    let out = run_child_test(
        "sandbox_hosts_can_be_built_on_this_machine",
        &path_without("sshd", &dir),
        &[
            (skip::ALLOW_SKIP_ENV, "1"),
            (skip::SKIP_LOG_ENV, log.to_str().unwrap()),
        ],
    );
    let all = text(&out);
    let recorded = fs::read_to_string(&log).unwrap_or_default();
    fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("SKIPPED sandbox_hosts_can_be_built_on_this_machine"),
        "{all}"
    );
    let lines: Vec<&str> = recorded.lines().collect();
    assert_eq!(lines.len(), 1, "{recorded}");
    let (reason, test) = lines[0].split_once('\t').unwrap();
    assert!(
        reason.starts_with("sandbox hosts unavailable (missing: ")
            && reason.contains("sshd (openssh-server)")
    );
    assert_eq!(test, "sandbox_hosts_can_be_built_on_this_machine");
}

#[test]
fn make_deps_names_openssh_server_when_sshd_is_hidden() {
    let dir = tempdir("deps");
    let bin = path_without("sshd", &dir);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/deps.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--check")
        .env("CAPKK_DEPS_PATH", &bin)
        .output()
        .unwrap();
    let all = text(&out);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("missing: openssh-server (no sshd)"), "{all}");
    assert!(
        all.contains("apt-get install -y --no-install-recommends openssh-server"),
        "{all}"
    );
}
