//! Step journaling and progress reporting shared by every service, plus output redaction.

use std::{sync::Mutex, time::Duration};

use capkk_executor::{ExecOutput, ExecRequest, Executor};

use crate::{Error, Result};

/// Bytes of output kept in a journal record (the one limit for every service, provisioning included: the
/// host cuts provisioning output to this many bytes too).
pub const TAIL_BYTES: usize = 2048;

/// One finished step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRecord {
    /// Service phase: bootstrap, repository, binary, containermanager, provisioning, reset.
    pub phase: String,
    /// Step name (stable, human readable).
    pub name: String,
    /// Exit code of the step's command, if it ran one.
    pub exit_code: Option<u32>,
    /// Wall time.
    pub duration: Duration,
    /// Redacted output tail.
    pub output_tail: String,
    /// True when the step found its work already done and ran nothing that changes the host.
    pub skipped: bool,
    /// When the step ended by the host's clock (ms since the Unix epoch), for steps of batched scripts: their
    /// records arrive together when the script ends, so the time they reach the controller says nothing.
    pub host_finished_ms: Option<u64>,
}

/// Receives progress; the controller turns it into "step i/n: name" conditions and status journal.
pub trait Progress: Send + Sync {
    /// A step starts (`index` is 1-based, `total` the number of steps in this phase's plan).
    fn step_started(&self, phase: &str, index: usize, total: usize, name: &str);
    /// A step finished (successfully or not).
    fn step_finished(&self, record: &StepRecord);
}

/// A [`Progress`] that ignores everything.
pub struct NoProgress;

impl Progress for NoProgress {
    fn step_started(&self, _: &str, _: usize, _: usize, _: &str) {}
    fn step_finished(&self, _: &StepRecord) {}
}

/// A [`Progress`] that keeps every record (tests, benchmarks).
#[derive(Default)]
pub struct RecordingProgress {
    /// Records in order.
    pub records: Mutex<Vec<StepRecord>>,
}

impl RecordingProgress {
    /// A copy of the records so far.
    pub fn records(&self) -> Vec<StepRecord> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Progress for RecordingProgress {
    fn step_started(&self, _: &str, _: usize, _: usize, _: &str) {}
    fn step_finished(&self, record: &StepRecord) {
        if let Ok(mut r) = self.records.lock() {
            r.push(record.clone());
        }
    }
}

/// Replaces known secret strings (passwords, tokens, keys) in output with `<redacted>`.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    /// A redactor for these secrets (empty strings and very short ones are ignored).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut r = Self::default();
        for s in secrets {
            r.add(s);
        }
        r
    }

    /// Add a secret.
    pub fn add(&mut self, secret: impl Into<String>) {
        let s = secret.into();
        if s.len() >= 4 && !self.secrets.contains(&s) {
            self.secrets.push(s);
            // Longest first so a secret containing another is replaced whole.
            self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    /// `text` with every secret replaced, and kubeadm tokens / certificate keys masked.
    ///
    /// `text` may be a tail that was cut on the host: a secret cut at its start (only its end survived, at
    /// least 4 bytes of it) is masked too, and so is a PEM private key body whose BEGIN line was cut off.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "<redacted>");
            }
        }
        for s in &self.secrets {
            // The longest proper suffix of the secret the text starts with.
            let cut = (1..s.len().saturating_sub(3))
                .filter(|i| s.is_char_boundary(*i))
                .find(|i| out.starts_with(&s[*i..]));
            if let Some(i) = cut {
                out = format!("<redacted>{}", &out[s.len() - i..]);
            }
        }
        mask_patterns(&out)
    }

    /// The last `max` bytes of `out` (stdout then stderr), redacted *before* it is cut, so a cut never splits
    /// a secret or a key into a part the redactor no longer recognises.
    pub fn redact_tail(&self, out: &capkk_executor::ExecOutput) -> String {
        let full = self.redact(&out.tail(usize::MAX));
        let mut start = full.len().saturating_sub(TAIL_BYTES);
        while !full.is_char_boundary(start) {
            start += 1;
        }
        full[start..].to_owned()
    }
}

/// Mask kubeadm bootstrap tokens (`abcdef.0123456789abcdef`), `--certificate-key <hex>`, and PEM private keys.
fn mask_patterns(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // A tail that starts inside a key (its BEGIN line was cut off): everything up to the END line is key.
    let mut in_key = text.find("-----END").is_some_and(|end| {
        text[end..]
            .lines()
            .next()
            .is_some_and(|l| l.contains("PRIVATE KEY"))
            && !text[..end].contains("-----BEGIN")
    });
    if in_key {
        out.push_str("<redacted private key>\n");
    }
    for line in text.split_inclusive('\n') {
        if line.contains("-----BEGIN") && line.contains("PRIVATE KEY") {
            in_key = true;
            out.push_str("<redacted private key>\n");
            continue;
        }
        if in_key {
            if line.contains("-----END") {
                in_key = false;
            }
            continue;
        }
        out.push_str(&mask_words(line));
    }
    out
}

fn mask_words(line: &str) -> String {
    let mut result = String::with_capacity(line.len());
    let mut prev_was_cert_key = false;
    for (i, word) in line.split(' ').enumerate() {
        if i > 0 {
            result.push(' ');
        }
        let bare = word.trim_end_matches(['\n', '\r', ',', '"', '\'']);
        let is_token = {
            let b = bare.as_bytes();
            b.len() == 23
                && b[6] == b'.'
                && bare
                    .split('.')
                    .all(|p| p.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
        };
        let is_hex_key = prev_was_cert_key && bare.len() >= 32 && bare.bytes().all(|c| c.is_ascii_hexdigit());
        if is_token || is_hex_key {
            result.push_str("<redacted>");
            result.push_str(&word[bare.len()..]);
        } else if let Some(v) = bare.strip_prefix("--certificate-key=") {
            let _ = v;
            result.push_str("--certificate-key=<redacted>");
            result.push_str(&word[bare.len()..]);
        } else {
            result.push_str(word);
        }
        prev_was_cert_key = bare == "--certificate-key";
    }
    result
}

/// Runs service steps through an executor and journals them.
pub struct StepRunner<'a> {
    /// The host.
    pub exec: &'a dyn Executor,
    /// Where records go.
    pub progress: &'a dyn Progress,
    /// Secret masking for output tails.
    pub redactor: &'a Redactor,
    /// Phase name for records.
    pub phase: &'a str,
}

impl StepRunner<'_> {
    /// Run one privileged command as step `name`; a non-zero exit becomes [`Error::CommandFailed`].
    pub async fn run(&self, name: &str, req: ExecRequest) -> Result<ExecOutput> {
        let out = self.run_allow_failure(name, req.clone()).await?;
        if !out.success() {
            return Err(Error::CommandFailed {
                step: name.to_owned(),
                command: req.command,
                exit_code: out.exit_code,
                output_tail: self.redactor.redact_tail(&out),
            });
        }
        Ok(out)
    }

    /// Run one command as step `name` and journal it; the exit code is returned as data.
    pub async fn run_allow_failure(&self, name: &str, req: ExecRequest) -> Result<ExecOutput> {
        let out = self.exec.exec(req).await.map_err(|e| Error::exec(name, e))?;
        self.progress.step_finished(&StepRecord {
            phase: self.phase.to_owned(),
            name: name.to_owned(),
            exit_code: out.exit_code,
            duration: out.duration,
            output_tail: self.redactor.redact_tail(&out),
            skipped: false,
            host_finished_ms: None,
        });
        Ok(out)
    }

    /// Journal a step that needed no command (already done, or local work).
    pub fn record_skip(&self, name: &str, why: &str) {
        self.progress.step_finished(&StepRecord {
            phase: self.phase.to_owned(),
            name: name.to_owned(),
            exit_code: None,
            duration: Duration::ZERO,
            output_tail: why.to_owned(),
            skipped: true,
            host_finished_ms: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_secrets_tokens_and_keys() {
        let r = Redactor::new(["hunter2-canary"]);
        let text = "pw hunter2-canary\nkubeadm join --token abcdef.0123456789abcdef --certificate-key 0123456789abcdef0123456789abcdef0123456789abcdef\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nafter\n";
        let out = r.redact(text);
        assert!(!out.contains("hunter2"), "{out}");
        assert!(!out.contains("abcdef.0123456789abcdef"), "{out}");
        assert!(!out.contains("0123456789abcdef0123456789abcdef0123"), "{out}");
        assert!(!out.contains("MIIE"), "{out}");
        assert!(out.contains("after"));
        assert!(out.contains("kubeadm join --token <redacted>"));
    }

    #[test]
    fn secrets_and_keys_cut_at_the_tail_boundary_are_still_redacted() {
        let r = Redactor::new(["hunter2-canary-password"]);
        // A host-side tail that begins in the middle of the secret.
        assert_eq!(r.redact("ary-password ok\n"), "<redacted> ok\n");
        // A key whose BEGIN line was cut off.
        let out = r.redact("Zm9vYmFy\nYmF6\n-----END OPENSSH PRIVATE KEY-----\nafter\n");
        assert!(!out.contains("Zm9v") && !out.contains("YmF6"), "{out}");
        assert!(out.contains("after"));
        // Output longer than a tail: redacted first, then cut.
        let secret = "s3cr3t-".repeat(40);
        let r = Redactor::new([secret.clone()]);
        let mut stdout = vec![b'x'; TAIL_BYTES - 10];
        stdout.extend_from_slice(secret.as_bytes());
        stdout.extend_from_slice(b"\nend\n");
        let out = capkk_executor::ExecOutput {
            stdout,
            ..Default::default()
        };
        let tail = r.redact_tail(&out);
        assert!(!tail.contains("s3cr3t"), "{tail}");
        assert!(tail.len() <= TAIL_BYTES && tail.ends_with("<redacted>\nend\n"));
    }
}
