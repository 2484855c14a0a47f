//! The executor trait: the only way the service layer reaches a host.
//!
//! The SSH client (`capkk-ssh`) implements [`Executor`]; unit tests of plan rendering may use a fake.
//! A command that runs and exits non-zero is *data* ([`ExecOutput::exit_code`]), never an `Err`:
//! errors are reserved for "the command could not be run or its result could not be observed".
//!
//! [`address`] holds where a transport may connect: the address classification the SSH pool and
//! controller-side downloads share.

use std::{fmt, path::PathBuf, time::Duration};

use async_trait::async_trait;

pub mod address;

/// Default per-call timeout when a request does not set one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Default cap on captured stdout and stderr, each.
pub const DEFAULT_OUTPUT_LIMIT: usize = 4 * 1024 * 1024;

/// One command to run on a host through `sh -c`.
///
/// `command` is a shell command line; every argument interpolated into it must be quoted with [`quote`].
/// File contents and secrets go on `stdin`, never into `command`.
#[derive(Clone)]
pub struct ExecRequest {
    /// The shell command line.
    pub command: String,
    /// Bytes fed to the command's standard input (then EOF). Treated as secret: never printed.
    pub stdin: Option<Vec<u8>>,
    /// Run with root privileges (`sudo` for a non-root login user; as-is for root).
    pub privileged: bool,
    /// Hard limit for the whole call; on expiry the call fails with [`ExecError::Timeout`].
    pub timeout: Duration,
    /// Cap on captured stdout and stderr, each; further bytes are dropped and `truncated` is set.
    pub output_limit: usize,
}

impl ExecRequest {
    /// A command run as the login user, with the default timeout and output cap.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            stdin: None,
            privileged: false,
            timeout: DEFAULT_TIMEOUT,
            output_limit: DEFAULT_OUTPUT_LIMIT,
        }
    }

    /// The same command, run with root privileges.
    pub fn sudo(mut self) -> Self {
        self.privileged = true;
        self
    }

    /// Feed these bytes on standard input.
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// Set the per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set the output cap (per stream).
    pub fn output_limit(mut self, limit: usize) -> Self {
        self.output_limit = limit;
        self
    }
}

impl fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecRequest")
            .field("command", &self.command)
            .field(
                "stdin",
                &self.stdin.as_ref().map(|s| format!("<{} bytes>", s.len())),
            )
            .field("privileged", &self.privileged)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What a finished command produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit status; `None` when the remote side reported no status (e.g. killed by a signal).
    pub exit_code: Option<u32>,
    /// Captured standard output (at most the request's `output_limit` bytes).
    pub stdout: Vec<u8>,
    /// Captured standard error (at most the request's `output_limit` bytes).
    pub stderr: Vec<u8>,
    /// True when either stream was cut at the output cap.
    pub truncated: bool,
    /// Wall time of the call.
    pub duration: Duration,
}

impl ExecOutput {
    /// True when the command exited with status 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// Standard output as lossy UTF-8.
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Standard error as lossy UTF-8.
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// The last `max` bytes of stdout+stderr as text, for conditions and journals (caller redacts).
    pub fn tail(&self, max: usize) -> String {
        let mut all = self.stdout.clone();
        if !self.stderr.is_empty() {
            if !all.is_empty() && !all.ends_with(b"\n") {
                all.push(b'\n');
            }
            all.extend_from_slice(&self.stderr);
        }
        let start = all.len().saturating_sub(max);
        String::from_utf8_lossy(&all[start..]).into_owned()
    }
}

/// Where the bytes of an upload come from.
#[derive(Clone)]
pub enum FileSource {
    /// In-memory bytes (small files, rendered configs). Treated as secret: never printed.
    Bytes(Vec<u8>),
    /// A local file streamed in chunks (large artifacts from the controller-side cache).
    Path(PathBuf),
}

impl fmt::Debug for FileSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileSource::Bytes(b) => write!(f, "Bytes(<{} bytes>)", b.len()),
            FileSource::Path(p) => write!(f, "Path({})", p.display()),
        }
    }
}

/// An atomic file upload: written to a temporary file beside `path`, then mode/owner set, then renamed.
#[derive(Clone, Debug)]
pub struct PutRequest {
    /// Absolute destination path on the host.
    pub path: String,
    /// Where the content comes from.
    pub source: FileSource,
    /// Permission bits (e.g. `0o644`).
    pub mode: u32,
    /// `user:group` (or `user`) owning the file; `None` keeps the writer's default.
    pub owner: Option<String>,
    /// Write with root privileges.
    pub privileged: bool,
    /// Create missing parent directories.
    pub create_parents: bool,
    /// Hard limit for the whole transfer.
    pub timeout: Duration,
}

impl PutRequest {
    /// Upload in-memory bytes to `path` with `mode`, privileged, creating parents.
    pub fn bytes(path: impl Into<String>, data: impl Into<Vec<u8>>, mode: u32) -> Self {
        Self {
            path: path.into(),
            source: FileSource::Bytes(data.into()),
            mode,
            owner: None,
            privileged: true,
            create_parents: true,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Upload a local file to `path` with `mode`, privileged, creating parents.
    pub fn file(path: impl Into<String>, local: impl Into<PathBuf>, mode: u32) -> Self {
        Self {
            source: FileSource::Path(local.into()),
            ..Self::bytes(path, Vec::new(), mode)
        }
    }

    /// Set the owner (`user:group`).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
}

/// Why a call could not be carried out. A command's own non-zero exit is not an error.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// TCP connect / SSH handshake failed (host down, refused, unreachable). Transient.
    #[error("connecting to {host} failed: {message}")]
    Connect {
        /// The address dialled.
        host: String,
        /// Why.
        message: String,
    },
    /// The address policy refused the destination before any connection was attempted: nothing was dialled,
    /// so the outcome says nothing about the host or its port. Terminal until the address or the policy
    /// changes.
    #[error("{}", refused_text(address, *bastion, *resolved, refusal))]
    AddressRefused {
        /// The address as written (no port: the message is the same whatever port was asked for).
        address: String,
        /// The refused address is the bastion's, not the target's.
        bastion: bool,
        /// `address` is a name that resolved to the refused address (else it is the address itself).
        resolved: bool,
        /// What the address is.
        refusal: address::Refusal,
    },
    /// The server rejected our credentials. Terminal until the credentials change.
    #[error("authentication to {host} as {user} was rejected")]
    Auth {
        /// The address dialled.
        host: String,
        /// The login user.
        user: String,
    },
    /// Our own credentials could not be loaded (a key that does not decode, a `privateKeyPath` that is not
    /// allowed). Nothing was sent. Terminal until the spec or the Secret changes.
    #[error("loading the credentials for {host} failed: {message}")]
    Credentials {
        /// The address dialled.
        host: String,
        /// Why (never key material).
        message: String,
    },
    /// The host presented a key other than the pinned one. Nothing was sent. Terminal.
    #[error("host key of {host} does not match: expected {expected}, the host presented {seen}")]
    HostKeyMismatch {
        /// The address dialled.
        host: String,
        /// The pinned fingerprint(s).
        expected: String,
        /// The fingerprint the host presented.
        seen: String,
    },
    /// The call did not finish within its timeout. Transient.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What timed out (command line is not included: it may be long).
        what: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// The connection broke during the call. Transient.
    #[error("connection to {host} lost: {message}")]
    Disconnected {
        /// The address.
        host: String,
        /// Why.
        message: String,
    },
    /// Privilege escalation failed (sudo asked for a password that was wrong or missing). Terminal.
    #[error("sudo on {host} failed: {message}")]
    Sudo {
        /// The address.
        host: String,
        /// Why.
        message: String,
    },
    /// A local I/O problem (reading an upload source, writing a download).
    #[error("local I/O for {path} failed: {source}")]
    LocalIo {
        /// The local path.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file transfer's remote side failed (non-zero exit of the receiving command).
    #[error("transfer of {path} failed (exit {exit_code:?}): {message}")]
    Transfer {
        /// The remote path.
        path: String,
        /// Exit code of the remote helper command.
        exit_code: Option<u32>,
        /// Tail of its output.
        message: String,
    },
    /// Anything else from the SSH protocol layer.
    #[error("ssh protocol error with {host}: {message}")]
    Protocol {
        /// The address.
        host: String,
        /// Why.
        message: String,
    },
}

/// `[bastion ]<address> is|resolves to <what it is>; refused before dialling`.
fn refused_text(address: &str, bastion: bool, resolved: bool, refusal: &address::Refusal) -> String {
    format!(
        "{}{address} {} {refusal}; refused before dialling",
        if bastion { "bastion " } else { "" },
        if resolved { "resolves to" } else { "is" }
    )
}

impl ExecError {
    /// True when retrying later may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ExecError::Connect { .. }
                | ExecError::Timeout { .. }
                | ExecError::Disconnected { .. }
                | ExecError::Protocol { .. }
        )
    }
}

/// Runs commands and moves files on one host.
#[async_trait]
pub trait Executor: Send + Sync {
    /// Run a command; a non-zero exit is returned as data in [`ExecOutput`].
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, ExecError>;

    /// Upload a file atomically (temp file, mode, owner, rename). Returns the bytes sent.
    async fn put(&self, req: PutRequest) -> Result<u64, ExecError>;

    /// Download a file, at most `limit` bytes (larger → [`ExecError::Transfer`]).
    async fn get(&self, path: &str, limit: usize, privileged: bool) -> Result<Vec<u8>, ExecError>;

    /// A short, non-secret name of the host for logs (`user@address`).
    fn target(&self) -> String;

    /// Run a command with root privileges. Same as `exec(req.sudo())`.
    async fn sudo(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        self.exec(req.sudo()).await
    }
}

/// Quote one argument for a POSIX shell: the result is always a single word with the same bytes.
///
/// ```
/// assert_eq!(capkk_executor::quote("a b"), "'a b'");
/// assert_eq!(capkk_executor::quote("it's"), r#"'it'\''s'"#);
/// assert_eq!(capkk_executor::quote("/etc/hosts"), "/etc/hosts");
/// ```
pub fn quote(arg: &str) -> String {
    let safe = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if safe {
        return arg.to_owned();
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('\'');
    for c in arg.chars() {
        if c == '\'' {
            out.push_str(r"'\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Quote every argument and join them with spaces.
pub fn quote_all<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    args.into_iter()
        .map(|a| quote(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn quoted_arguments_survive_a_real_shell() {
        let nasty = [
            "",
            "a b",
            "it's",
            "$(rm -rf /)",
            "`x`",
            "a\nb",
            "*",
            "--x=1",
            "\\",
            "\"q\"",
        ];
        for arg in nasty {
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", quote(arg)))
                .output()
                .expect("sh runs");
            assert_eq!(String::from_utf8(out.stdout).unwrap(), arg, "argument {arg:?}");
        }
    }

    #[test]
    fn debug_output_hides_stdin_and_bytes() {
        let req = ExecRequest::new("cat").stdin("hunter2-canary");
        assert!(!format!("{req:?}").contains("hunter2"));
        let put = PutRequest::bytes("/x", "hunter2-canary", 0o600);
        assert!(!format!("{put:?}").contains("hunter2"));
    }

    #[test]
    fn tail_joins_streams_and_keeps_the_end() {
        let out = ExecOutput {
            exit_code: Some(1),
            stdout: b"first\nsecond".to_vec(),
            stderr: b"boom".to_vec(),
            ..Default::default()
        };
        assert_eq!(out.tail(100), "first\nsecond\nboom");
        assert_eq!(out.tail(4), "boom");
        assert!(!out.success());
    }
}
