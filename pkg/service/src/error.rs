//! The service layer's error type. A command that ran and failed is [`Error::CommandFailed`]
//! (terminal: it stays in a condition until the spec changes); an unreachable host is [`Error::Exec`]
//! with a transient [`capkk_executor::ExecError`].

use capkk_executor::ExecError;

/// The exit code by which a host script's step says "failed, retry later" (the prelude's `retry_later`): its
/// failure is [`Error::RetryLater`], not a terminal [`Error::CommandFailed`]. Not sysexits' 75 (EX_TEMPFAIL): the reset's
/// `remove-paths` exits 75 for a volume still mounted, which must stay terminal (the host is quarantined).
pub const RETRY_LATER_EXIT: u32 = 99;

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a service step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The executor could not run the step (connection, auth, timeout...).
    #[error("running step {step} failed: {source}")]
    Exec {
        /// Step name.
        step: String,
        /// What the executor reported.
        #[source]
        source: ExecError,
    },
    /// The step's command ran and exited non-zero.
    #[error("step {step} failed: `{command}` exited with {exit_code:?}: {output_tail}")]
    CommandFailed {
        /// Step name.
        step: String,
        /// The command (never contains secrets: those go on stdin).
        command: String,
        /// Exit code.
        exit_code: Option<u32>,
        /// Redacted tail of the output.
        output_tail: String,
    },
    /// A step's command failed in a way that retrying later may fix without a spec change: it exited with
    /// [`RETRY_LATER_EXIT`] (a host download cut short or written to a full disk). Transient.
    #[error("step {step} failed, retried later: {output_tail}")]
    RetryLater {
        /// Step name.
        step: String,
        /// Redacted tail of the output (what failed, e.g. curl's `(23) Failure writing output`).
        output_tail: String,
    },
    /// The input (spec, bootstrap data) is invalid; `field` names what to fix.
    #[error("invalid {field}: {message}")]
    InvalidInput {
        /// The offending field, e.g. `spec.containerManager.type`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A requested option is not implemented.
    #[error("unsupported: {what}")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// The bootstrap data could not be turned into a plan.
    #[error("parsing bootstrap data failed: {0}")]
    Plan(#[from] capkk_cloudinit::Error),
    /// Downloading an artifact failed.
    #[error("downloading {url} failed: {message}")]
    Download {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// A controller-side download was refused before connecting: its destination is one the manager must
    /// not be made a client of (its loopback, link-local and metadata addresses, the cluster's own ranges)
    /// or is off the operator's allow-list. Terminal: the spec or the manager's flags must change.
    #[error("download from {url} ({field}) refused: {reason}")]
    DownloadRefused {
        /// The field that named the URL, e.g. `spec.component.overrides[id=kubeadm].url`.
        field: String,
        /// The URL, without userinfo.
        url: String,
        /// Why, naming the kind of address and the flag that governs it (never the address a name
        /// resolved to).
        reason: String,
    },
    /// An artifact's SHA-256 did not match; nothing was installed. The digest of what was fetched is not
    /// carried: a tenant who can set the URL and read the condition would learn the digest of any body the
    /// manager can fetch, set it as the expected checksum and get that body installed.
    #[error("checksum mismatch for {artifact}: the download does not match the expected checksum {expected}")]
    ChecksumMismatch {
        /// The artifact id and version.
        artifact: String,
        /// Expected hex digest.
        expected: String,
    },
    /// The host is not what the spec says (arch mismatch, unknown OS...).
    #[error("host check failed: {message}")]
    HostMismatch {
        /// What differs.
        message: String,
    },
    /// Another run on the host still holds the lock (e.g. a provisioning step that outlived a dropped
    /// connection). Transient: retry later.
    #[error("host busy: {message}")]
    HostBusy {
        /// What is holding the host.
        message: String,
    },
    /// A rebooted host did not answer with a new boot ID in time (it may still be booting, or be gone).
    #[error("host {host} did not come back within {waited:?} of the reboot: {last}")]
    HostNotBack {
        /// The host.
        host: String,
        /// How long it was waited for.
        waited: std::time::Duration,
        /// The last poll's answer or error.
        last: String,
    },
    /// Local I/O (controller-side cache).
    #[error("local I/O on {path} failed: {source}")]
    LocalIo {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// True when retrying later may succeed without a spec change.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Exec { source, .. } => source.is_transient(),
            Error::Download { .. }
            | Error::LocalIo { .. }
            | Error::HostBusy { .. }
            | Error::RetryLater { .. } => true,
            _ => false,
        }
    }

    /// Wrap an executor error for `step`.
    pub fn exec(step: impl Into<String>, source: ExecError) -> Self {
        Error::Exec {
            step: step.into(),
            source,
        }
    }
}
