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
//! - Secrets are `secrecy`'s [`SecretSlice`] (zeroized on drop, redacted in Debug, read only through
//!   [`ExposeSecret::expose_secret`]); nothing secret is traced.
//!   (russh itself copies a login password into a plain `String` for the duration of the auth request.)
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use capkk_executor::{ExecRequest, Executor, PutRequest};
//! use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, SshPool};
//!
//! # async fn demo(key_pem: String) -> Result<(), capkk_executor::ExecError> {
//! let pool = SshPool::default(); // one per controller, in its Context
//! let bastion = HostTarget::new("198.18.7.254", "root", Auth::key_bytes(key_pem.as_str()));
//! let target = HostTarget::new("198.19.7.11", "ubuntu", Auth::key_bytes(key_pem.as_str()))
//!     .host_key(HostKeyPolicy::pinned("SHA256:Xs0m0Bq1Q0m3b1u9eJ2zFh3TBKQ9QYhBv8V2m3ZKc0s"))
//!     .sudo_password("from-a-secret")
//!     .via(bastion);
//! let host: Arc<dyn Executor> = pool.executor(&target);
//! let out = host.exec(ExecRequest::new("uname -r").timeout(Duration::from_secs(30))).await?;
//! assert!(out.success());
//! host.put(PutRequest::bytes("/etc/kubernetes/kubeadm.yaml", "...", 0o600)).await?; // sudo, atomic
//! # Ok(()) }
//! ```

mod client;
mod config;
mod error;
pub mod keyfile;
mod short_scalar;

pub use client::{Observed, PoolStats, Probe, SshExecutor, SshPool};
pub use config::{Auth, HostKeyPolicy, HostTarget, KeySource, PoolConfig};
pub use error::SshError;
pub use secrecy::{ExposeSecret, SecretSlice};
