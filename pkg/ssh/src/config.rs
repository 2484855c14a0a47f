//! Targets, credentials, host-key policy and pool settings. Secret bytes are `secrecy`'s [`SecretSlice`]:
//! zeroized on drop, redacted in Debug, read only through [`ExposeSecret::expose_secret`].

use std::{fmt, path::PathBuf, time::Duration};

use secrecy::{ExposeSecret, SecretSlice};

/// The UTF-8 text of secret bytes, or `None` when they are not valid UTF-8. Keep the borrow short; never log it.
pub(crate) fn expose_str(secret: &SecretSlice<u8>) -> Option<&str> {
    std::str::from_utf8(secret.expose_secret()).ok()
}

/// Where a private key comes from.
#[derive(Clone)]
pub enum KeySource {
    /// OpenSSH / PEM / PuTTY key text (e.g. from a Kubernetes Secret).
    Bytes(SecretSlice<u8>),
    /// A key file on the controller's file system.
    File(PathBuf),
}

impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Bytes(_) => f.write_str("Bytes(<redacted>)"),
            KeySource::File(p) => write!(f, "File({})", p.display()),
        }
    }
}

/// How to authenticate as the login user.
#[derive(Clone)]
pub enum Auth {
    /// Password authentication.
    Password(SecretSlice<u8>),
    /// Public-key authentication (ed25519, rsa, ecdsa), with an optional passphrase for an encrypted key.
    PrivateKey {
        /// The key.
        key: KeySource,
        /// Passphrase of an encrypted key.
        passphrase: Option<SecretSlice<u8>>,
    },
}

impl Auth {
    /// Password authentication.
    pub fn password(password: impl Into<Vec<u8>>) -> Self {
        Auth::Password(SecretSlice::from(password.into()))
    }

    /// An unencrypted private key given as text.
    pub fn key_bytes(key: impl Into<Vec<u8>>) -> Self {
        Auth::PrivateKey {
            key: KeySource::Bytes(SecretSlice::from(key.into())),
            passphrase: None,
        }
    }

    /// A private key read from a file.
    pub fn key_file(path: impl Into<PathBuf>) -> Self {
        Auth::PrivateKey {
            key: KeySource::File(path.into()),
            passphrase: None,
        }
    }

    /// The same key, decrypted with this passphrase.
    pub fn with_passphrase(self, passphrase: impl Into<Vec<u8>>) -> Self {
        match self {
            Auth::PrivateKey { key, .. } => Auth::PrivateKey {
                key,
                passphrase: Some(SecretSlice::from(passphrase.into())),
            },
            other => other,
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Password(_) => f.write_str("Password(<redacted>)"),
            Auth::PrivateKey { key, passphrase } => f
                .debug_struct("PrivateKey")
                .field("key", key)
                .field("passphrase", &passphrase.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

/// Which host keys to accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostKeyPolicy {
    /// Accept only a host key whose SHA-256 fingerprint (`SHA256:<base64 without padding>`, as printed by
    /// `ssh-keygen -lf`) is one of these. Anything else fails with `ExecError::HostKeyMismatch` before any
    /// credential or command is sent.
    Pinned(Vec<String>),
    /// Accept whatever key the host presents and record its fingerprint (read it with
    /// `SshPool::observed_fingerprint` / `SshExecutor::host_key_fingerprint`) so the caller can persist it and
    /// pin it from then on.
    TrustOnFirstUse,
}

impl HostKeyPolicy {
    /// Pin one fingerprint.
    pub fn pinned(fingerprint: impl Into<String>) -> Self {
        HostKeyPolicy::Pinned(vec![fingerprint.into()])
    }
}

/// One SSH destination: address, login, credentials, host-key policy, optional sudo password and bastion.
#[derive(Clone)]
pub struct HostTarget {
    /// IP address or DNS name.
    pub address: String,
    /// TCP port (usually 22).
    pub port: u16,
    /// Login user.
    pub user: String,
    /// Credentials.
    pub auth: Auth,
    /// Host-key policy.
    pub host_key: HostKeyPolicy,
    /// Password for `sudo` when the login user is not root and sudo asks for one.
    pub sudo_password: Option<SecretSlice<u8>>,
    /// Jump host: the connection to this target is tunnelled through an SSH connection to the bastion.
    pub bastion: Option<Box<HostTarget>>,
    /// Bound on TCP connect + SSH handshake + authentication for this target (e.g. a KKCluster host's
    /// `auth.timeout`); `None`: the pool's [`PoolConfig::connect_timeout`].
    pub connect_timeout: Option<Duration>,
    /// Whose connection this is (e.g. the namespace of the object naming the host; not secret): the pool never
    /// shares, replaces or evicts a slot across owners, so one tenant's changes cannot drop another's
    /// connections.
    pub owner: Option<String>,
}

impl HostTarget {
    /// A target on port 22 with trust-on-first-use host keys.
    pub fn new(address: impl Into<String>, user: impl Into<String>, auth: Auth) -> Self {
        Self {
            address: address.into(),
            port: 22,
            user: user.into(),
            auth,
            host_key: HostKeyPolicy::TrustOnFirstUse,
            sudo_password: None,
            bastion: None,
            connect_timeout: None,
            owner: None,
        }
    }

    /// Set the owner (see [`HostTarget::owner`]).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Set the port.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Set the host-key policy.
    pub fn host_key(mut self, policy: HostKeyPolicy) -> Self {
        self.host_key = policy;
        self
    }

    /// Set the sudo password.
    pub fn sudo_password(mut self, password: impl Into<Vec<u8>>) -> Self {
        self.sudo_password = Some(SecretSlice::from(password.into()));
        self
    }

    /// Bound connecting to this target by `limit` instead of the pool's connect timeout.
    pub fn connect_timeout(mut self, limit: Duration) -> Self {
        self.connect_timeout = Some(limit);
        self
    }

    /// Reach this target through `bastion`.
    pub fn via(mut self, bastion: HostTarget) -> Self {
        self.bastion = Some(Box::new(bastion));
        self
    }

    /// `user@address:port` (non-secret).
    pub fn display_name(&self) -> String {
        format!("{}@{}:{}", self.user, self.address, self.port)
    }

    /// `address:port` (non-secret).
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.address, self.port)
    }

    /// Every secret this target (and its bastion) carries, as text to hand to an output redactor: login
    /// password, sudo password, key passphrase, and each line of an inline private key.
    pub fn secret_texts(&self) -> Vec<String> {
        let text = |s: &SecretSlice<u8>| String::from_utf8_lossy(s.expose_secret()).into_owned();
        let mut out = Vec::new();
        match &self.auth {
            Auth::Password(p) => out.push(text(p)),
            Auth::PrivateKey { key, passphrase } => {
                if let KeySource::Bytes(k) = key {
                    out.extend(
                        text(k)
                            .lines()
                            .filter(|l| !l.starts_with("-----"))
                            .map(|l| l.trim().to_owned()),
                    );
                }
                out.extend(passphrase.as_ref().map(text));
            }
        }
        out.extend(self.sudo_password.as_ref().map(text));
        if let Some(b) = &self.bastion {
            out.extend(b.secret_texts());
        }
        out.retain(|s| !s.is_empty());
        out
    }
}

impl fmt::Debug for HostTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostTarget")
            .field("address", &self.address)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("auth", &self.auth)
            .field("host_key", &self.host_key)
            .field(
                "sudo_password",
                &self.sudo_password.as_ref().map(|_| "<redacted>"),
            )
            .field("bastion", &self.bastion)
            .field("connect_timeout", &self.connect_timeout)
            .field("owner", &self.owner)
            .finish()
    }
}

/// Pool-wide settings.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Bound on TCP connect + SSH handshake + authentication (default 30 s).
    pub connect_timeout: Duration,
    /// Send an SSH keepalive after this long without traffic from the server (default 15 s).
    pub keepalive_interval: Duration,
    /// Close the connection after this many unanswered keepalives (default 3).
    pub keepalive_max: usize,
    /// Concurrent channels per connection (default 8; OpenSSH's `MaxSessions` defaults to 10).
    pub max_channels: usize,
    /// Size of the writes a file upload (and any stdin) is streamed in (default 64 KiB; at least 1 KiB). russh
    /// sends each write as packets of the server's maximum packet size (32 KiB for OpenSSH), so a smaller chunk
    /// means smaller packets, and sshd pays per packet for the data it buffers (docs/benchmarks.md, "Uploads on
    /// a fresh connection").
    pub chunk_size: usize,
    /// Set TCP_NODELAY on direct connections (default true; without it every exec round trip waits on
    /// Nagle's algorithm + delayed ACKs). Only benchmarks turn it off, to compare.
    pub tcp_nodelay: bool,
    /// Static host aliases (lowercase name -> IP address), consulted before the system resolver on direct
    /// dials: the operator's answer for sites without DNS for their hosts (the manager's `--ssh-host-alias`),
    /// and a name the tests resolve without touching `/etc/hosts`. Empty by default.
    pub host_aliases: std::collections::BTreeMap<String, std::net::IpAddr>,
    /// Which addresses a direct dial may reach (a bastion's included; a target behind a bastion is the
    /// bastion's to dial). Checked on every address the target's name resolves to (or its alias), before
    /// any connection. The default refuses loopback besides the classes no policy allows (link-local,
    /// metadata, unspecified, multicast); the manager sets `--ssh-deny-cidr` and `--ssh-allow-cidr` here.
    pub addresses: capkk_executor::address::AddressPolicy,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(15),
            keepalive_max: 3,
            max_channels: 8,
            chunk_size: 64 * 1024,
            tcp_nodelay: true,
            host_aliases: Default::default(),
            addresses: Default::default(),
        }
    }
}
