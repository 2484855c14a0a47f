//! Errors of the connection steps, mapped onto [`capkk_executor::ExecError`].

use std::time::Duration;

use capkk_executor::{ExecError, address::Refusal};

/// Why connecting or talking to a host failed.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    /// TCP connect failed.
    #[error("TCP connect to {host} failed: {source}")]
    ConnectTcp {
        /// Endpoint.
        host: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A connection step did not finish within the connect timeout.
    #[error("{step} with {host} timed out after {after:?}")]
    ConnectTimeout {
        /// Endpoint.
        host: String,
        /// Which step (TCP connect, handshake, authentication, bastion tunnel).
        step: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// The SSH handshake (version exchange, key exchange) failed.
    #[error("SSH handshake with {host} failed: {source}")]
    Handshake {
        /// Endpoint.
        host: String,
        /// Cause.
        #[source]
        source: russh::Error,
    },
    /// The host presented a key that is not pinned.
    #[error("host key of {host} does not match: expected {expected}, the host presented {seen}")]
    VerifyHostKey {
        /// Endpoint.
        host: String,
        /// Pinned fingerprints.
        expected: String,
        /// Presented fingerprint.
        seen: String,
    },
    /// The private key could not be read or decoded (wrong passphrase, bad format, missing file).
    #[error("loading the private key for {user}@{host} failed: {message}")]
    LoadKey {
        /// Endpoint.
        host: String,
        /// Login user.
        user: String,
        /// Why (never contains key material).
        message: String,
    },
    /// The pool's address policy refused the destination; nothing was dialled.
    #[error("{}", ExecError::AddressRefused { address: address.clone(), bastion: *bastion, resolved: *resolved, refusal: *refusal })]
    AddressRefused {
        /// The address as written (no port).
        address: String,
        /// The refused address is the bastion's (set on the way out of the bastion's connection).
        bastion: bool,
        /// `address` is a name (or an alias) that resolved to the refused address.
        resolved: bool,
        /// What the address is.
        refusal: Refusal,
    },
    /// The server rejected the credentials.
    #[error("authentication to {host} as {user} was rejected")]
    Authenticate {
        /// Endpoint.
        host: String,
        /// Login user.
        user: String,
    },
    /// The authentication exchange itself failed.
    #[error("authenticating to {host} failed: {source}")]
    AuthenticateProtocol {
        /// Endpoint.
        host: String,
        /// Cause.
        #[source]
        source: russh::Error,
    },
    /// Opening the tunnel through the bastion failed.
    #[error("opening a tunnel to {host} through bastion {bastion} failed: {message}")]
    OpenTunnel {
        /// Target endpoint.
        host: String,
        /// Bastion endpoint.
        bastion: String,
        /// Why.
        message: String,
    },
    /// Opening a session channel failed (the connection is gone or refused the channel).
    #[error("opening a channel to {host} failed: {source}")]
    OpenChannel {
        /// Endpoint.
        host: String,
        /// Cause.
        #[source]
        source: russh::Error,
    },
    /// A channel request or data transfer failed mid-call.
    #[error("channel I/O with {host} failed: {message}")]
    ChannelIo {
        /// Endpoint.
        host: String,
        /// Why.
        message: String,
    },
}

impl SshError {
    /// This error as met on the way to a target through its bastion: an address refusal is the bastion's.
    pub fn at_bastion(self) -> Self {
        match self {
            SshError::AddressRefused {
                address,
                resolved,
                refusal,
                ..
            } => SshError::AddressRefused {
                address,
                bastion: true,
                resolved,
                refusal,
            },
            other => other,
        }
    }
}

impl From<SshError> for ExecError {
    fn from(e: SshError) -> Self {
        match e {
            SshError::AddressRefused {
                address,
                bastion,
                resolved,
                refusal,
            } => ExecError::AddressRefused {
                address,
                bastion,
                resolved,
                refusal,
            },
            SshError::ConnectTcp { host, source } => ExecError::Connect {
                host,
                message: source.to_string(),
            },
            SshError::ConnectTimeout { ref host, .. } => ExecError::Connect {
                host: host.clone(),
                message: e.to_string(),
            },
            SshError::Handshake { ref host, .. } => ExecError::Connect {
                host: host.clone(),
                message: e.to_string(),
            },
            SshError::VerifyHostKey { host, expected, seen } => {
                ExecError::HostKeyMismatch { host, expected, seen }
            }
            SshError::LoadKey { host, message, .. } => ExecError::Credentials { host, message },
            SshError::Authenticate { host, user } => ExecError::Auth { host, user },
            SshError::AuthenticateProtocol { ref host, .. } => ExecError::Connect {
                host: host.clone(),
                message: e.to_string(),
            },
            SshError::OpenTunnel { ref host, .. } => ExecError::Connect {
                host: host.clone(),
                message: e.to_string(),
            },
            SshError::OpenChannel { ref host, .. } | SshError::ChannelIo { ref host, .. } => {
                ExecError::Disconnected {
                    host: host.clone(),
                    message: e.to_string(),
                }
            }
        }
    }
}
