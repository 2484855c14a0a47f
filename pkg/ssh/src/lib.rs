//! SSH client on russh: pooled connections, exec/sudo/upload, host-key policy, bastion, timeouts.
//!
//! - [`SshPool`] keeps one multiplexed connection per identity (address, port, user, credentials, host-key
//!   policy, bastion), with TCP_NODELAY, SSH keepalives, at most [`PoolConfig::max_channels`] concurrent
//!   channels, and transparent replacement of a dead connection on the next call.
//! - [`SshExecutor`] implements [`capkk_executor::Executor`]: `exec` returns exit code, stdout and stderr (a
//!   non-zero exit is data), bounded by the request's timeout and output cap; `privileged` runs through
//!   `sudo -n` or, with a sudo password, `sudo -k -S -p ''` with the password as the first stdin line (never on a
//!   command line); `put` streams a file to a temp file beside the destination, sets mode/owner and renames it.
//! - Host keys are pinned by SHA-256 fingerprint (`SHA256:...` as `ssh-keygen -lf` prints) or trusted on first
//!   use; a mismatch fails with [`capkk_executor::ExecError::HostKeyMismatch`] before credentials are sent.
//! - Secrets ([`Secret`]) are zeroized on drop and redacted in Debug/Display; nothing secret is traced.

mod client;
mod config;
mod error;

pub use client::{PoolStats, Probe, SshExecutor, SshPool};
pub use config::{Auth, HostKeyPolicy, HostTarget, KeySource, PoolConfig, Secret};
pub use error::SshError;
