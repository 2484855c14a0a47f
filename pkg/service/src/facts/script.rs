//! Batched host scripts: many journaled steps in one SSH round trip.
//!
//! A [`Script`] is a list of named steps, each an idempotent POSIX shell snippet. The whole script is sent on
//! stdin to `sh -s` (privileged) in **one** exec; each step runs in its own `set -e` subshell with stderr
//! merged into stdout, framed by marker lines so the caller can journal one [`StepRecord`] per step (name,
//! exit code, duration, redacted output tail). A step sets `CHANGED=1` when it altered the host; a step that
//! changed nothing is journaled as `skipped`. The script stops at the first failing step; a step that exits
//! with [`crate::error::RETRY_LATER_EXIT`] fails as [`Error::RetryLater`] (transient), any other as
//! [`Error::CommandFailed`] (terminal).
//!
//! Helpers available to every step body (defined in [`PRELUDE`], `pkg/service/host/lib/prelude.sh`):
//! - `put_file PATH MODE SHA256 BASE64` writes a file only when its content or mode differs (atomic rename),
//!   and sets `CHANGED=1` when it wrote;
//! - `retry_later MESSAGE` fails the step as [`Error::RetryLater`] (transient);
//! - `mismatch ARTIFACT EXPECTED ACTUAL` reports a checksum mismatch in a machine-readable line and fails.

use std::time::Duration;

use capkk_executor::{ExecRequest, Executor, quote};
use sha2::{Digest, Sha256};

use crate::{
    Error, Result,
    host::{MARK, Vars, tpl},
    journal::{Progress, Redactor, StepRecord, TAIL_BYTES},
};

/// Shell functions defined before the first step (`pkg/service/host/lib/prelude.sh`).
pub const PRELUDE: &str = tpl::PRELUDE;

/// One named step of a [`Script`].
#[derive(Clone, Debug)]
pub struct ScriptStep {
    /// Stable step name (journal).
    pub name: String,
    /// Shell snippet; every interpolated value must already be quoted with [`quote`].
    pub body: String,
}

/// An ordered list of steps run in one exec.
#[derive(Clone, Debug, Default)]
pub struct Script {
    steps: Vec<ScriptStep>,
}

/// A checksum mismatch reported by a step through the `mismatch` helper.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedMismatch {
    /// Artifact name.
    pub artifact: String,
    /// Expected digest.
    pub expected: String,
    /// Digest found on the host.
    pub actual: String,
}

/// What a finished script produced.
#[derive(Clone, Debug, Default)]
pub struct ScriptOutcome {
    /// One record per step that ran, in order.
    pub records: Vec<StepRecord>,
    /// Names of the steps that changed something.
    pub changed: Vec<String>,
}

impl ScriptOutcome {
    /// True when at least one step changed the host.
    pub fn any_changed(&self) -> bool {
        !self.changed.is_empty()
    }

    /// True when step `name` changed the host.
    pub fn step_changed(&self, name: &str) -> bool {
        self.changed.iter().any(|c| c == name)
    }
}

impl Script {
    /// An empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a step.
    pub fn step(&mut self, name: impl Into<String>, body: impl Into<String>) -> &mut Self {
        self.steps.push(ScriptStep {
            name: name.into(),
            body: body.into(),
        });
        self
    }

    /// True when there are no steps.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Step names in order.
    pub fn names(&self) -> Vec<String> {
        self.steps.iter().map(|s| s.name.clone()).collect()
    }

    /// The full shell text sent on stdin: the prelude (after `RETRY_LATER_EXIT`), then each step framed by `lib/step-open.sh` and
    /// `lib/step-close.sh` (begin/changed/end markers, a `set -e` subshell, stop at the first failure).
    pub fn render(&self) -> String {
        let mut s = Vars::new()
            .var("RETRY_LATER_EXIT", crate::error::RETRY_LATER_EXIT.to_string())
            .render(PRELUDE);
        for step in &self.steps {
            s.push_str(&Vars::new().var("STEP", &step.name).render(tpl::STEP_OPEN));
            s.push_str(&step.body);
            if !step.body.ends_with('\n') {
                s.push('\n');
            }
            s.push_str(tpl::STEP_CLOSE);
        }
        s
    }

    /// Run the script as one privileged exec; journal every step under `phase`.
    ///
    /// A failing step becomes [`Error::CommandFailed`] ([`Error::RetryLater`] when it exited with
    /// [`crate::error::RETRY_LATER_EXIT`], [`Error::ChecksumMismatch`] when it reported one through
    /// `mismatch`); steps after it do not run.
    pub async fn run(
        &self,
        exec: &dyn Executor,
        phase: &str,
        progress: &dyn Progress,
        redactor: &Redactor,
        timeout: Duration,
    ) -> Result<ScriptOutcome> {
        if self.steps.is_empty() {
            return Ok(ScriptOutcome::default());
        }
        let total = self.steps.len();
        for (i, step) in self.steps.iter().enumerate() {
            progress.step_started(phase, i + 1, total, &step.name);
        }
        let req = ExecRequest::new("sh -s")
            .sudo()
            .stdin(self.render())
            .timeout(timeout);
        let first = self.steps[0].name.clone();
        let out = exec
            .exec(req)
            .await
            .map_err(|e| Error::exec(format!("{phase}/{first}"), e))?;
        let parsed = parse_output(&out.stdout_str(), phase, redactor);
        let mut outcome = ScriptOutcome::default();
        for p in &parsed {
            progress.step_finished(&p.record);
            if p.changed {
                outcome.changed.push(p.record.name.clone());
            }
            outcome.records.push(p.record.clone());
        }
        if let Some(m) = parsed.iter().find_map(|p| p.mismatch.clone()) {
            return Err(Error::ChecksumMismatch {
                artifact: m.artifact,
                expected: m.expected,
            });
        }
        if let Some(failed) = parsed.iter().find(|p| p.record.exit_code != Some(0)) {
            if failed.record.exit_code == Some(crate::error::RETRY_LATER_EXIT) {
                return Err(Error::RetryLater {
                    step: format!("{phase}/{}", failed.record.name),
                    output_tail: failed.record.output_tail.clone(),
                });
            }
            return Err(Error::CommandFailed {
                step: format!("{phase}/{}", failed.record.name),
                command: format!("{phase} script step {}", failed.record.name),
                exit_code: failed.record.exit_code,
                output_tail: failed.record.output_tail.clone(),
            });
        }
        if !out.success() || parsed.len() != total {
            // The shell itself died (syntax error, killed) or output was cut: report the whole script.
            let name = self
                .steps
                .get(parsed.len())
                .map(|s| s.name.clone())
                .unwrap_or_else(|| "script".into());
            return Err(Error::CommandFailed {
                step: format!("{phase}/{name}"),
                command: format!("{phase} script"),
                exit_code: out.exit_code,
                output_tail: redactor.redact_tail(&out),
            });
        }
        Ok(outcome)
    }
}

struct ParsedStep {
    record: StepRecord,
    changed: bool,
    mismatch: Option<ReportedMismatch>,
}

fn parse_output(stdout: &str, phase: &str, redactor: &Redactor) -> Vec<ParsedStep> {
    let mut done = Vec::new();
    let mut current: Option<(String, String, bool, Option<ReportedMismatch>)> = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix(MARK) {
            let mut words = rest.splitn(2, ' ');
            let verb = words.next().unwrap_or_default();
            let args = words.next().unwrap_or_default();
            match verb {
                "begin" => {
                    current = Some((args.to_owned(), String::new(), false, None));
                    continue;
                }
                "changed" if args.is_empty() => {
                    if let Some(c) = current.as_mut() {
                        c.2 = true;
                    }
                    continue;
                }
                "mismatch" => {
                    let parts: Vec<&str> = args.splitn(3, ' ').collect();
                    if let (Some(c), [expected, actual, artifact]) = (current.as_mut(), parts.as_slice()) {
                        c.3 = Some(ReportedMismatch {
                            artifact: (*artifact).to_owned(),
                            expected: (*expected).to_owned(),
                            actual: (*actual).to_owned(),
                        });
                    }
                    continue;
                }
                "end" => {
                    let mut it = args.rsplitn(4, ' ');
                    let at = it.next().and_then(|v| v.parse::<u64>().ok()).filter(|v| *v > 0);
                    let ms = it.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    let rc = it.next().and_then(|v| v.parse::<u32>().ok());
                    if let Some((name, text, changed, mismatch)) = current.take() {
                        // Redacted whole, then cut: a cut must not split a secret.
                        let text = redactor.redact(text.trim_matches('\n'));
                        let start = text.len().saturating_sub(TAIL_BYTES);
                        let start = (start..=text.len())
                            .find(|i| text.is_char_boundary(*i))
                            .unwrap_or(0);
                        done.push(ParsedStep {
                            record: StepRecord {
                                phase: phase.to_owned(),
                                name,
                                exit_code: rc,
                                duration: Duration::from_millis(ms),
                                output_tail: text[start..].to_owned(),
                                skipped: rc == Some(0) && !changed,
                                host_finished_ms: at,
                            },
                            changed,
                            mismatch,
                        });
                    }
                    continue;
                }
                _ => {}
            }
        }
        if let Some(c) = current.as_mut() {
            c.1.push_str(line);
            c.1.push('\n');
        }
    }
    done
}

/// Hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// A `put_file` call writing `content` to `path` with `mode` (e.g. `0o644`) when it differs.
pub fn put_file(path: &str, mode: u32, content: &[u8]) -> String {
    use base64::Engine as _;
    format!(
        "put_file {} {:o} {} {}\n",
        quote(path),
        mode,
        sha256_hex(content),
        quote(&base64::engine::general_purpose::STANDARD.encode(content))
    )
}

/// A file a step would write: path, mode and content digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedFile {
    /// Absolute path.
    pub path: String,
    /// Permission bits.
    pub mode: u32,
    /// Hex SHA-256 of the content.
    pub sha256: String,
}

impl ExpectedFile {
    /// Expect `content` at `path` with `mode`.
    pub fn new(path: &str, mode: u32, content: &[u8]) -> Self {
        Self {
            path: path.to_owned(),
            mode,
            sha256: sha256_hex(content),
        }
    }
}

/// A read-only probe printing `@@file:<path>=<mode> <sha256>` (or `@@file:<path>=missing`) per file, so a
/// service can tell in its probe exec whether a config step would change anything.
pub fn file_probe(files: &[ExpectedFile]) -> String {
    Vars::new()
        .args(files.iter().flat_map(|f| [f.path.clone(), probe_label(&f.path)]))
        .render(tpl::FILE_PROBE)
}

fn probe_label(path: &str) -> String {
    path.replace(['\'', '"', '$', '`', '\\', '\n'], "_")
}

/// True when the output of [`file_probe`] shows every file with its expected mode and digest.
pub fn files_match(probe_output: &str, files: &[ExpectedFile]) -> bool {
    files.iter().all(|f| {
        let want = format!("@@file:{}={:o} {}", probe_label(&f.path), f.mode, f.sha256);
        probe_output.lines().any(|l| l == want)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_steps_changes_and_mismatches() {
        let out = "\n@@capkk begin one\nhello\n@@capkk changed\n\n@@capkk end one 0 12 1764236400123\n\
                   \n@@capkk begin two\n@@capkk end two 0 1 0\n\
                   \n@@capkk begin three\nbad thing\n@@capkk mismatch aa bb kubeadm v1.2.3\n\n@@capkk end three 65 3 0\n";
        let p = parse_output(out, "binary", &Redactor::default());
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].record.name, "one");
        assert!(p[0].changed && !p[0].record.skipped);
        assert_eq!(p[0].record.output_tail, "hello");
        assert_eq!(p[0].record.duration, Duration::from_millis(12));
        assert_eq!(p[0].record.host_finished_ms, Some(1_764_236_400_123));
        assert_eq!(
            p[1].record.host_finished_ms, None,
            "a host whose date cannot tell nanoseconds reports 0"
        );
        assert!(p[1].record.skipped);
        assert_eq!(p[2].record.exit_code, Some(65));
        assert_eq!(
            p[2].mismatch,
            Some(ReportedMismatch {
                artifact: "kubeadm v1.2.3".into(),
                expected: "aa".into(),
                actual: "bb".into()
            })
        );
    }

    #[test]
    fn file_probe_detects_content_and_mode() {
        let dir = std::env::temp_dir().join(format!("capkk-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.conf");
        std::fs::write(&path, b"x=1\n").unwrap();
        let p = path.to_str().unwrap();
        let run = |files: &[ExpectedFile]| {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(file_probe(files))
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        std::process::Command::new("chmod")
            .args(["644", p])
            .status()
            .unwrap();
        let good = [ExpectedFile::new(p, 0o644, b"x=1\n")];
        assert!(files_match(&run(&good), &good));
        let other_mode = [ExpectedFile::new(p, 0o600, b"x=1\n")];
        assert!(!files_match(&run(&other_mode), &other_mode));
        let other_content = [ExpectedFile::new(p, 0o644, b"x=2\n")];
        assert!(!files_match(&run(&other_content), &other_content));
        let missing = [ExpectedFile::new("/nonexistent/capkk", 0o644, b"")];
        assert!(!files_match(&run(&missing), &missing));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rendered_script_runs_in_a_real_shell() {
        let dir = std::env::temp_dir().join(format!("capkk-script-{}", std::process::id()));
        let path = dir.join("f.txt");
        let mut s = Script::new();
        s.step("write", put_file(path.to_str().unwrap(), 0o640, b"content\n"));
        s.step("again", put_file(path.to_str().unwrap(), 0o640, b"content\n"));
        s.step("fail", "echo about to fail\nfalse\necho never");
        s.step("not-reached", "echo nope");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(s.render())
            .output()
            .unwrap();
        let p = parse_output(&String::from_utf8_lossy(&out.stdout), "t", &Redactor::default());
        assert_eq!(p.len(), 3, "{}", String::from_utf8_lossy(&out.stdout));
        assert!(p[0].changed);
        assert!(!p[1].changed && p[1].record.skipped);
        assert_eq!(p[2].record.exit_code, Some(1));
        assert!(p[2].record.output_tail.contains("about to fail"));
        assert!(!p[2].record.output_tail.contains("never"));
        assert_eq!(std::fs::read(&path).unwrap(), b"content\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn put_file_never_exposes_a_credentials_file_while_writing_it() {
        let dir = std::env::temp_dir().join(format!("capkk-put-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let log = dir.join("modes");
        let real = String::from_utf8(
            std::process::Command::new("sh")
                .args(["-c", "command -v base64"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        // A base64 in front of the real one, logging the mode of the file it writes (the temp file).
        std::fs::write(
            bin.join("base64"),
            format!(
                "#!/bin/sh\nexec 3>&1\nstat -L -c %a /proc/self/fd/3 >> {}\nexec 3>&-\nexec {} \"$@\"\n",
                log.display(),
                real.trim()
            ),
        )
        .unwrap();
        std::process::Command::new("chmod")
            .arg("755")
            .arg(bin.join("base64"))
            .status()
            .unwrap();
        let target = dir.join("certs.d/registry.local/hosts.toml");
        let mut s = Script::new();
        s.step(
            "auth",
            put_file(target.to_str().unwrap(), 0o600, b"Authorization = \"Basic x\"\n"),
        );
        s.step(
            "public",
            put_file(dir.join("pub").to_str().unwrap(), 0o644, b"x\n"),
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(s.render())
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()),
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "600\n600\n");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(dir.join("pub")).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
