//! The connection pool and the [`Executor`] implementation.

use std::{
    collections::HashMap,
    fmt,
    future::Future,
    hash::{BuildHasher, Hash, Hasher, RandomState},
    net::{IpAddr, SocketAddr},
    path::Path,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use capkk_executor::{ExecError, ExecOutput, ExecRequest, Executor, FileSource, PutRequest, quote};
use russh::{
    ChannelMsg,
    client::{self, AuthResult, Handle},
    keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate},
};
use secrecy::{ExposeSecret, SecretSlice};
use tokio::{
    io::{AsyncWrite, AsyncWriteExt},
    net::TcpStream,
    sync::Semaphore,
    time::timeout,
};
use tracing::{debug, info, instrument, warn};
use zeroize::Zeroizing;

use crate::{
    config::{Auth, HostKeyPolicy, HostTarget, KeySource, PoolConfig},
    error::SshError,
};

/// A factory of per-host executors sharing one multiplexed SSH connection per
/// (address, port, user, credentials, host-key policy, bastion). Cheap to clone.
#[derive(Clone)]
pub struct SshPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    config: PoolConfig,
    hasher: RandomState,
    slots: Mutex<HashMap<String, Arc<HostSlot>>>,
    connects: AtomicU64,
    refused_sessions: AtomicU64,
}

/// Per-identity state: the live connection (if any), the observed host key, the sudo mode.
struct HostSlot {
    target: HostTarget,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    fingerprint: Mutex<Option<String>>,
    sudo_mode: Mutex<Option<SudoMode>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SudoMode {
    /// `sudo -n`: no password needed (or none configured).
    NoPassword,
    /// `sudo -k -S -p ''` with the password as the first stdin line.
    Password,
}

/// One authenticated SSH connection.
struct Conn {
    handle: Handle<ClientHandler>,
    channels: Arc<Semaphore>,
    /// The bastion connection this one is tunnelled through (kept alive as long as this one).
    _via: Option<Arc<Conn>>,
    /// The IP address the TCP connection reached (`None` through a bastion: the bastion resolved the name).
    peer: Option<std::net::IpAddr>,
    poisoned: AtomicBool,
    id: u64,
}

impl Conn {
    fn usable(&self) -> bool {
        !self.poisoned.load(Ordering::Relaxed) && !self.handle.is_closed()
    }
}

/// Statistics of a pool (for tests and metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// SSH connections established since the pool was created (including bastion connections).
    pub connects: u64,
    /// Distinct connection identities known to the pool.
    pub identities: usize,
    /// Session channels a live server refused (and that were retried).
    pub refused_sessions: u64,
}

/// Who answered on a connection: what [`SshPool::observe`] learned without running a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// SHA256 fingerprint of the host key.
    pub host_key_fingerprint: String,
    /// The IP address the connection reached, when dialled directly (`None` through a bastion).
    pub peer: Option<std::net::IpAddr>,
}

/// What [`SshPool::probe`] learned.
#[derive(Clone, Debug)]
pub struct Probe {
    /// SHA256 fingerprint of the host key.
    pub host_key_fingerprint: String,
    /// Output of `uname -srm`.
    pub uname: String,
    /// Wall time of the probe's exec round trip.
    pub round_trip: Duration,
}

impl fmt::Debug for SshPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshPool")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for SshPool {
    fn default() -> Self {
        Self::new(PoolConfig::default())
    }
}

impl SshPool {
    /// A pool with these settings.
    pub fn new(config: PoolConfig) -> Self {
        Self {
            inner: Arc::new(PoolInner {
                config,
                hasher: RandomState::new(),
                slots: Mutex::new(HashMap::new()),
                connects: AtomicU64::new(0),
                refused_sessions: AtomicU64::new(0),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    /// An executor for `target`. Executors for the same identity share one connection (opened lazily).
    pub fn executor(&self, target: &HostTarget) -> Arc<dyn Executor> {
        Arc::new(self.ssh_executor(target))
    }

    /// Like [`SshPool::executor`], returning the concrete type (host key, download to file).
    pub fn ssh_executor(&self, target: &HostTarget) -> SshExecutor {
        SshExecutor {
            pool: self.inner.clone(),
            slot: self.inner.slot(target),
        }
    }

    /// The host-key fingerprint seen on the latest connection to `target` (for trust-on-first-use persistence).
    pub fn observed_fingerprint(&self, target: &HostTarget) -> Option<String> {
        self.inner.slot(target).fingerprint.lock().ok()?.clone()
    }

    /// Connect (or reuse the connection) and report who answered, without running anything on the host: the
    /// host key and the address reached identify the host before anyone decides to work on it.
    pub async fn observe(&self, target: &HostTarget) -> Result<Observed, ExecError> {
        let slot = self.inner.slot(target);
        let conn = self.inner.connection(&slot).await?;
        let host_key_fingerprint = slot
            .fingerprint
            .lock()
            .ok()
            .and_then(|f| f.clone())
            .ok_or_else(|| ExecError::Connect {
                host: target.endpoint(),
                message: "connected without seeing a host key".into(),
            })?;
        Ok(Observed {
            host_key_fingerprint,
            peer: conn.peer,
        })
    }

    /// Connect (or reuse the connection), run `uname -srm` and report the host key and round trip.
    pub async fn probe(&self, target: &HostTarget, within: Duration) -> Result<Probe, ExecError> {
        let exec = self.ssh_executor(target);
        let start = Instant::now();
        let out = exec.exec(ExecRequest::new("uname -srm").timeout(within)).await?;
        let round_trip = start.elapsed();
        Ok(Probe {
            host_key_fingerprint: exec.host_key_fingerprint().unwrap_or_default(),
            uname: out.stdout_str().trim().to_owned(),
            round_trip,
        })
    }

    /// Connection counters.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            connects: self.inner.connects.load(Ordering::Relaxed),
            identities: self.inner.slots.lock().map(|s| s.len()).unwrap_or(0),
            refused_sessions: self.inner.refused_sessions.load(Ordering::Relaxed),
        }
    }

    /// Forget `target`'s identity: its pooled connection closes once in-flight calls finish (e.g. when the
    /// machine is deleted or its credentials change).
    pub fn evict(&self, target: &HostTarget) {
        let id = self.inner.identity(target);
        self.inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Forget every identity of `owner` ([`HostTarget::owner`]) that dials `address` (its KKInstance was
    /// deleted): their connections close once in-flight calls finish, and the next use starts from the caller's
    /// host-key policy again. Other owners' connections to the address stay.
    pub fn evict_address(&self, owner: Option<&str>, address: &str) {
        self.inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, s| s.target.address != address || s.target.owner.as_deref() != owner);
    }

    /// Drop every pooled connection (in-flight calls keep theirs until they finish).
    pub async fn close_all(&self) {
        let slots: Vec<_> = self
            .inner
            .slots
            .lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        for slot in slots {
            slot.conn.lock().await.take();
        }
    }
}

/// `[owner] ` for an owned target, empty otherwise: slots and routes of different owners never compare equal.
fn owner_prefix(t: &HostTarget) -> String {
    t.owner.as_deref().map(|o| format!("[{o}] ")).unwrap_or_default()
}

impl PoolInner {
    /// The identity of a target: address, port, user, a keyed hash of the credentials, host-key policy, bastion.
    fn identity(&self, t: &HostTarget) -> String {
        let mut h = self.hasher.build_hasher();
        match &t.auth {
            Auth::Password(p) => {
                0u8.hash(&mut h);
                p.expose_secret().hash(&mut h);
            }
            Auth::PrivateKey { key, passphrase } => {
                1u8.hash(&mut h);
                match key {
                    KeySource::Bytes(b) => b.expose_secret().hash(&mut h),
                    KeySource::File(p) => p.hash(&mut h),
                }
                passphrase.as_ref().map(|p| p.expose_secret()).hash(&mut h);
            }
        }
        t.sudo_password.as_ref().map(|p| p.expose_secret()).hash(&mut h);
        format!("{:?}", t.host_key).hash(&mut h);
        // A changed connect timeout gets a new slot (the old one goes like rotated credentials): a pooled
        // slot keeps the target it was created with and reconnects with its limit.
        t.connect_timeout.hash(&mut h);
        let mut id = format!(
            "{}{}@{}:{}#{:016x}",
            owner_prefix(t),
            t.user,
            t.address,
            t.port,
            h.finish()
        );
        if let Some(b) = &t.bastion {
            id.push_str(" via ");
            id.push_str(&self.identity(b));
        }
        id
    }

    /// Who is dialled, and how the host key is checked, without the credentials: two slots with the same
    /// route and different identities mean the credentials changed.
    fn route(t: &HostTarget) -> String {
        let mut r = format!(
            "{}{}@{}:{} {:?}",
            owner_prefix(t),
            t.user,
            t.address,
            t.port,
            t.host_key
        );
        if let Some(b) = &t.bastion {
            r.push_str(" via ");
            r.push_str(&Self::route(b));
        }
        r
    }

    fn slot(&self, target: &HostTarget) -> Arc<HostSlot> {
        let id = self.identity(target);
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if !slots.contains_key(&id)
            && let Some(promoted) = self.promote_trusted(&mut slots, target)
        {
            slots.insert(id.clone(), promoted);
        }
        if !slots.contains_key(&id) {
            // New credentials for a known route (a rotated Secret): the old slot and its connection go.
            let route = Self::route(target);
            slots.retain(|_, s| Self::route(&s.target) != route);
        }
        slots
            .entry(id)
            .or_insert_with(|| {
                Arc::new(HostSlot {
                    target: target.clone(),
                    conn: tokio::sync::Mutex::new(None),
                    fingerprint: Mutex::new(None),
                    sudo_mode: Mutex::new(None),
                })
            })
            .clone()
    }

    /// A target pinned to the key that a trust-on-first-use connection to the same host (same login,
    /// credentials and limits) saw takes over that connection: it is the connection the pinned target would
    /// have made, and the key was checked on it. Without this the first claim of a host opened a second
    /// connection right after the KKCluster's first probe had opened one (the probe trusts on first use;
    /// the claim pins the key the probe recorded). The trust-on-first-use slot goes.
    fn promote_trusted(
        &self,
        slots: &mut HashMap<String, Arc<HostSlot>>,
        target: &HostTarget,
    ) -> Option<Arc<HostSlot>> {
        let HostKeyPolicy::Pinned(keys) = &target.host_key else {
            return None;
        };
        let tofu = HostTarget {
            host_key: HostKeyPolicy::TrustOnFirstUse,
            ..target.clone()
        };
        let tofu_id = self.identity(&tofu);
        let old = slots.get(&tofu_id)?;
        let seen = old.fingerprint.lock().ok()?.clone()?;
        if !keys.contains(&seen) {
            return None;
        }
        // Busy connecting (or reconnecting): leave it, the pinned target connects on its own.
        let conn = old.conn.try_lock().ok()?.take();
        let sudo_mode = *old.sudo_mode.lock().unwrap_or_else(|e| e.into_inner());
        slots.remove(&tofu_id);
        Some(Arc::new(HostSlot {
            target: target.clone(),
            conn: tokio::sync::Mutex::new(conn),
            fingerprint: Mutex::new(Some(seen)),
            sudo_mode: Mutex::new(sudo_mode),
        }))
    }

    /// The slot's live connection, connecting (through the bastion, if any) when there is none or it died.
    fn connection<'a>(
        self: &'a Arc<Self>,
        slot: &'a Arc<HostSlot>,
    ) -> Pin<Box<dyn Future<Output = Result<Arc<Conn>, SshError>> + Send + 'a>> {
        Box::pin(async move {
            let mut guard = slot.conn.lock().await;
            if let Some(conn) = guard.as_ref()
                && conn.usable()
            {
                return Ok(conn.clone());
            }
            if guard.take().is_some() {
                debug!(target = %slot.target.display_name(), "replacing a dead connection");
            }
            let conn = Arc::new(self.connect(slot).await?);
            *guard = Some(conn.clone());
            Ok(conn)
        })
    }

    #[instrument(level = "debug", skip_all, fields(target = %slot.target.display_name()))]
    async fn connect(self: &Arc<Self>, slot: &Arc<HostSlot>) -> Result<Conn, SshError> {
        let t = &slot.target;
        let host = t.endpoint();
        let cfg = &self.config;
        // Each step (tunnel, TCP connect, handshake, authentication) is bounded by the target's own limit when it
        // has one (a host's `auth.timeout`), else by the pool's.
        let limit = t.connect_timeout.unwrap_or(cfg.connect_timeout);
        let ssh_config = Arc::new(client::Config {
            keepalive_interval: Some(cfg.keepalive_interval),
            keepalive_max: cfg.keepalive_max,
            inactivity_timeout: None,
            nodelay: cfg.tcp_nodelay,
            ..Default::default()
        });
        // Trust on first use means the *first* key: once this slot saw one, a reconnect (a dropped link in a
        // long task, the next probe) accepts only that key, whatever the caller recorded so far.
        let first_seen = slot.fingerprint.lock().ok().and_then(|f| f.clone());
        let policy = match (&t.host_key, first_seen) {
            (HostKeyPolicy::TrustOnFirstUse, Some(first)) => HostKeyPolicy::Pinned(vec![first]),
            (p, _) => p.clone(),
        };
        let seen = Arc::new(Mutex::new(None::<String>));
        let handler = ClientHandler {
            policy: policy.clone(),
            seen: seen.clone(),
        };

        // Decoding an encrypted key runs a deliberately slow KDF (bcrypt-pbkdf): do it before the clock of
        // the connection starts and off the async runtime, so a busy machine neither times out the
        // authentication step nor stalls other connections while it decodes.
        let key = match &t.auth {
            Auth::PrivateKey { key, passphrase } => Some(load_key(key, passphrase.as_ref(), t).await?),
            Auth::Password(_) => None,
        };

        let mut via = None;
        let mut peer = None;
        let connected = if let Some(bastion) = &t.bastion {
            let bslot = self.slot(bastion);
            // The bastion is dialled directly, so its address passed the policy there. The target behind it
            // is not checked: the bastion dials it, in the tenant's network, not from the manager's.
            let bconn = self.connection(&bslot).await.map_err(SshError::at_bastion)?;
            let channel = timeout(
                limit,
                bconn
                    .handle
                    .channel_open_direct_tcpip(t.address.clone(), u32::from(t.port), "127.0.0.1", 0),
            )
            .await
            .map_err(|_| SshError::ConnectTimeout {
                host: host.clone(),
                step: "bastion tunnel",
                after: limit,
            })?
            .map_err(|e| {
                // The bastion refusing (target down) is fine; anything else means its connection is unhealthy.
                if !matches!(e, russh::Error::ChannelOpenFailure(_)) {
                    bconn.poisoned.store(true, Ordering::Relaxed);
                }
                SshError::OpenTunnel {
                    host: host.clone(),
                    bastion: bastion.endpoint(),
                    message: e.to_string(),
                }
            })?;
            via = Some(bconn);
            timeout(
                limit,
                client::connect_stream(ssh_config, channel.into_stream(), handler),
            )
            .await
        } else {
            // Resolved once, every address checked, and only the checked addresses dialled: a name cannot
            // resolve elsewhere between the check and the connect (DNS rebinding).
            let dial = async {
                let addrs = checked_addrs(cfg, t).await?;
                TcpStream::connect(&addrs[..])
                    .await
                    .map_err(|source| SshError::ConnectTcp {
                        host: host.clone(),
                        source,
                    })
            };
            let tcp = timeout(limit, dial)
                .await
                .map_err(|_| SshError::ConnectTimeout {
                    host: host.clone(),
                    step: "TCP connect",
                    after: limit,
                })??;
            // Without TCP_NODELAY every exec round trip waits on Nagle + delayed ACK (make bench-ssh-latency
            // measures both; docs/benchmarks.md).
            if let Err(e) = tcp.set_nodelay(cfg.tcp_nodelay) {
                warn!(%host, "setting TCP_NODELAY failed: {e}");
            }
            peer = tcp.peer_addr().ok().map(|a| a.ip().to_canonical());
            timeout(limit, client::connect_stream(ssh_config, tcp, handler)).await
        };
        let observed = seen.lock().map(|s| s.clone()).unwrap_or(None);
        let mut handle = match connected {
            Err(_) => {
                return Err(SshError::ConnectTimeout {
                    host,
                    step: "SSH handshake",
                    after: limit,
                });
            }
            Ok(Err(source)) => {
                if let (HostKeyPolicy::Pinned(expected), Some(seen)) = (&policy, observed.clone())
                    && !expected.contains(&seen)
                {
                    warn!(%host, %seen, "host key mismatch; refusing to authenticate");
                    return Err(SshError::VerifyHostKey {
                        host,
                        expected: expected.join(","),
                        seen,
                    });
                }
                return Err(SshError::Handshake { host, source });
            }
            Ok(Ok(h)) => h,
        };
        if let Some(fp) = &observed
            && let Ok(mut f) = slot.fingerprint.lock()
        {
            *f = Some(fp.clone());
        }

        let authenticated = timeout(limit, authenticate(&mut handle, t, key))
            .await
            .map_err(|_| SshError::ConnectTimeout {
                host: host.clone(),
                step: "authentication",
                after: limit,
            })??;
        if !authenticated {
            return Err(SshError::Authenticate {
                host,
                user: t.user.clone(),
            });
        }
        let id = self.connects.fetch_add(1, Ordering::Relaxed) + 1;
        info!(%host, user = %t.user, conn = id, host_key = observed.as_deref().unwrap_or(""), "connected");
        Ok(Conn {
            handle,
            channels: Arc::new(Semaphore::new(cfg.max_channels.max(1))),
            _via: via,
            peer,
            poisoned: AtomicBool::new(false),
            id,
        })
    }
}

/// The addresses a direct dial to `t` may go to: a static alias ([`PoolConfig::host_aliases`]), the address
/// itself, or what the system resolver answers for the name, once; every one of them must pass the pool's
/// [`PoolConfig::addresses`], else nothing is dialled and the refusal is one error whatever the port (no
/// port-scan oracle: nothing was connected to).
async fn checked_addrs(cfg: &PoolConfig, t: &HostTarget) -> Result<Vec<SocketAddr>, SshError> {
    let name = t.address.trim();
    let literal = name
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    let alias = cfg.host_aliases.get(&name.to_ascii_lowercase()).copied();
    let (addrs, resolved): (Vec<SocketAddr>, bool) = match literal.or(alias) {
        Some(ip) => (vec![SocketAddr::new(ip, t.port)], literal.is_none()),
        None => {
            let found =
                tokio::net::lookup_host((name, t.port))
                    .await
                    .map_err(|source| SshError::ConnectTcp {
                        host: t.endpoint(),
                        source,
                    })?;
            (found.collect(), true)
        }
    };
    if addrs.is_empty() {
        return Err(SshError::ConnectTcp {
            host: t.endpoint(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "the name has no address"),
        });
    }
    for a in &addrs {
        if let Some(refusal) = cfg.addresses.refusal(a.ip()) {
            debug!(target = %t.display_name(), address = %a.ip(), %refusal, "dial refused by the address policy");
            return Err(SshError::AddressRefused {
                address: name.to_owned(),
                bastion: false,
                resolved,
                refusal,
            });
        }
    }
    Ok(addrs)
}

/// Authenticates as `t.user` with its password or with `key` (the target's private key, decoded beforehand).
async fn authenticate(
    handle: &mut Handle<ClientHandler>,
    t: &HostTarget,
    key: Option<PrivateKey>,
) -> Result<bool, SshError> {
    let host = t.endpoint();
    let proto = |source| SshError::AuthenticateProtocol {
        host: host.clone(),
        source,
    };
    let result = match &t.auth {
        Auth::Password(p) => {
            let pw = Zeroizing::new(crate::config::expose_str(p).unwrap_or_default().to_owned());
            handle
                .authenticate_password(t.user.clone(), pw.as_str())
                .await
                .map_err(proto)?
        }
        Auth::PrivateKey { .. } => {
            let Some(key) = key else {
                return Err(SshError::LoadKey {
                    host: t.endpoint(),
                    user: t.user.clone(),
                    message: "the key was not decoded before authentication".into(),
                });
            };
            let hash = if key.algorithm().is_rsa() {
                handle
                    .best_supported_rsa_hash()
                    .await
                    .map_err(proto)?
                    .flatten()
                    .or(Some(HashAlg::Sha256))
            } else {
                None
            };
            handle
                .authenticate_publickey(t.user.clone(), PrivateKeyWithHashAlg::new(Arc::new(key), hash))
                .await
                .map_err(proto)?
        }
    };
    Ok(matches!(result, AuthResult::Success))
}

/// Reads (files: confined and size-capped, see [`crate::keyfile`]) and decodes the private key. The decoding
/// runs on a blocking thread under the caller's tracing dispatcher and span, so whatever it logs is captured
/// (and checked for secrets) like the rest of the connection's output.
async fn load_key(
    key: &KeySource,
    passphrase: Option<&SecretSlice<u8>>,
    t: &HostTarget,
) -> Result<PrivateKey, SshError> {
    let err = |message: String| SshError::LoadKey {
        host: t.endpoint(),
        user: t.user.clone(),
        message,
    };
    let (text, origin) = match key {
        KeySource::Bytes(b) => (
            Zeroizing::new(
                crate::config::expose_str(b)
                    .ok_or_else(|| err("key is not UTF-8 text".into()))?
                    .to_owned(),
            ),
            None,
        ),
        KeySource::File(p) => {
            let bytes = crate::keyfile::read_key_file(p, crate::keyfile::MAX_KEY_BYTES)
                .await
                .map_err(err)?;
            let text = crate::config::expose_str(&bytes)
                .ok_or_else(|| err(format!("{} is not UTF-8 text", p.display())))?
                .to_owned();
            (Zeroizing::new(text), Some(p.display().to_string()))
        }
    };
    let passphrase = passphrase
        .and_then(crate::config::expose_str)
        .map(|p| Zeroizing::new(p.to_owned()));
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    let span = tracing::Span::current();
    let decoded = tokio::task::spawn_blocking(move || {
        tracing::dispatcher::with_default(&dispatch, || {
            span.in_scope(|| {
                let passphrase = passphrase.as_ref().map(|p| p.as_str());
                russh::keys::decode_secret_key(&text, passphrase).or_else(|e| {
                    match crate::short_scalar::pad_short_p256_scalar(&text, passphrase) {
                        Some(padded) => russh::keys::decode_secret_key(&padded, None),
                        None => Err(e),
                    }
                })
            })
        })
    })
    .await
    .map_err(|e| err(format!("decoding task failed: {e}")))?;
    decoded.map_err(|e| match origin {
        Some(p) => err(format!("decoding {p} failed: {e}")),
        None => err(format!("decoding failed: {e}")),
    })
}

/// russh callbacks: host-key verification.
struct ClientHandler {
    policy: HostKeyPolicy,
    seen: Arc<Mutex<Option<String>>>,
}

impl client::Handler for ClientHandler {
    type Error = russh::Error;

    async fn check_server_key(&mut self, key: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        let fp = key.public_key().fingerprint(HashAlg::Sha256).to_string();
        let ok = match &self.policy {
            HostKeyPolicy::Pinned(list) => list.iter().any(|p| p.trim() == fp),
            HostKeyPolicy::TrustOnFirstUse => true,
        };
        if let Ok(mut s) = self.seen.lock() {
            *s = Some(fp);
        }
        Ok(ok)
    }
}

/// How long to wait for the channel to close after the command's exit status (see `run_raw`).
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// Where a command's stdin comes from (in-memory bytes may be secret: zeroized when dropped).
enum Input {
    None,
    Bytes(Zeroizing<Vec<u8>>),
    File(tokio::fs::File),
}

/// Write `input` to `out` (a channel's writer) in writes of `chunk` bytes.
///
/// Whole chunks, which russh cuts into packets of the server's maximum size (32 KiB for OpenSSH); not
/// `ChannelWriteHalf::data()`, which copies through tokio::io::copy's 8 KiB buffer, one 8 KiB packet per write.
/// The packet size matters to sshd, not to the network: sshd appends each data packet to the channel's buffer,
/// growing it by that packet into a new allocation, and while the command drains it slower than the network
/// fills it (an upload's `cat`) the buffer grows towards the 2 MiB window. In a new sshd, glibc serves each of
/// those allocations past its 128 KiB mmap threshold from fresh pages until the first such buffer is freed, so
/// the first large upload on a connection has sshd fault in memory once per packet: a quarter as often with
/// full-size packets (docs/benchmarks.md, "Uploads on a fresh connection").
async fn feed_stdin<W: AsyncWrite + Unpin>(input: Input, chunk: usize, out: &mut W) -> std::io::Result<()> {
    match input {
        Input::None => {}
        Input::Bytes(b) => {
            for part in b.chunks(chunk) {
                out.write_all(part).await?;
            }
        }
        Input::File(f) => {
            let mut reader = tokio::io::BufReader::with_capacity(chunk, f);
            tokio::io::copy_buf(&mut reader, out).await?;
        }
    }
    Ok(())
}

/// Where a command's stdout goes.
enum Sink<'a> {
    Capture,
    File(&'a mut tokio::fs::File, &'a Path),
}

/// What one channel run produced.
struct RunResult {
    exit_code: Option<u32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
    stdout_bytes: u64,
}

/// Runs commands and moves files on one host over the pooled connection.
#[derive(Clone)]
pub struct SshExecutor {
    pool: Arc<PoolInner>,
    slot: Arc<HostSlot>,
}

impl fmt::Debug for SshExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshExecutor")
            .field("target", &self.slot.target)
            .finish()
    }
}

impl SshExecutor {
    /// The SHA256 fingerprint of the host key seen on the latest connection (`None` before the first).
    pub fn host_key_fingerprint(&self) -> Option<String> {
        self.slot.fingerprint.lock().ok()?.clone()
    }

    /// The target this executor talks to.
    pub fn host_target(&self) -> &HostTarget {
        &self.slot.target
    }

    fn host(&self) -> String {
        self.slot.target.endpoint()
    }

    fn is_root(&self) -> bool {
        self.slot.target.user == "root"
    }

    /// Download `path` into the local file `local` without holding it in memory. Returns the bytes written.
    #[instrument(skip_all, fields(target = %self.target(), path))]
    pub async fn get_to_file(
        &self,
        path: &str,
        local: &Path,
        privileged: bool,
        within: Duration,
    ) -> Result<u64, ExecError> {
        let what = format!("download of {path}");
        let work = async {
            let mut file = tokio::fs::File::create(local)
                .await
                .map_err(|source| ExecError::LocalIo {
                    path: local.display().to_string(),
                    source,
                })?;
            let cmd = format!("cat -- {}", quote(path));
            let res = self
                .run(
                    &cmd,
                    Input::None,
                    privileged,
                    usize::MAX,
                    Sink::File(&mut file, local),
                )
                .await?;
            file.flush().await.map_err(|source| ExecError::LocalIo {
                path: local.display().to_string(),
                source,
            })?;
            if res.exit_code != Some(0) {
                return Err(ExecError::Transfer {
                    path: path.to_owned(),
                    exit_code: res.exit_code,
                    message: String::from_utf8_lossy(&res.stderr).trim().to_owned(),
                });
            }
            Ok(res.stdout_bytes)
        };
        timeout(within, work)
            .await
            .unwrap_or_else(|_| Err(self.timed_out(what, within)))
    }

    fn timed_out(&self, what: String, after: Duration) -> ExecError {
        // The cancelled call's `PoisonOnDrop` has already retired the connection it was using.
        warn!(target = %self.target(), %what, ?after, "timed out");
        ExecError::Timeout {
            what: format!("{what} on {}", self.target()),
            after,
        }
    }

    /// Decide (once per identity) whether sudo needs the password.
    async fn sudo_mode(&self) -> Result<SudoMode, ExecError> {
        if self.slot.target.sudo_password.is_none() {
            return Ok(SudoMode::NoPassword);
        }
        if let Some(mode) = *self.slot.sudo_mode.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(mode);
        }
        let probe = self
            .run_raw("sudo -n -k true", Input::None, 4096, Sink::Capture)
            .await?;
        let mode = if probe.exit_code == Some(0) {
            SudoMode::NoPassword
        } else {
            SudoMode::Password
        };
        debug!(target = %self.target(), ?mode, "sudo mode");
        *self.slot.sudo_mode.lock().unwrap_or_else(|e| e.into_inner()) = Some(mode);
        Ok(mode)
    }

    /// Run `command` (privileged if asked), mapping sudo's own refusals onto [`ExecError::Sudo`].
    async fn run(
        &self,
        command: &str,
        input: Input,
        privileged: bool,
        limit: usize,
        sink: Sink<'_>,
    ) -> Result<RunResult, ExecError> {
        if !privileged || self.is_root() {
            // Always POSIX sh, whatever the login shell is.
            return self
                .run_raw(&format!("exec sh -c {}", quote(command)), input, limit, sink)
                .await;
        }
        let mode = self.sudo_mode().await?;
        let (line, gate) = match mode {
            SudoMode::NoPassword => (format!("sudo -n -- sh -c {}", quote(command)), None),
            SudoMode::Password => {
                // The password goes to sudo only when sudo prints our one-time prompt, never to the command:
                // the command's stdin starts after it announced itself (marker) on stderr.
                let nonce = format!(
                    "{:016x}",
                    self.pool.hasher.hash_one((Instant::now(), command.len()))
                );
                let gate = SudoGate {
                    prompt: format!("[capkk-sudo-{nonce}]"),
                    marker: format!("capkk-started-{nonce}"),
                    password: Zeroizing::new(
                        self.slot
                            .target
                            .sudo_password
                            .as_ref()
                            .map(|p| p.expose_secret().to_vec())
                            .unwrap_or_default(),
                    ),
                };
                let inner = format!("printf '%s\\n' {} >&2; exec sh -c \"$1\"", gate.marker);
                let line = format!(
                    "sudo -k -S -p {} -- sh -c {} sh {}",
                    quote(&gate.prompt),
                    quote(&inner),
                    quote(command)
                );
                (line, Some(gate))
            }
        };
        let res = self.run_raw_gated(&line, input, gate, limit, sink).await?;
        if res.exit_code == Some(1) {
            let err = String::from_utf8_lossy(&res.stderr);
            let refused = [
                "a password is required",
                "incorrect password",
                "Sorry, try again",
                "is not in the sudoers file",
                "not allowed to execute",
                "no password was provided",
                "a terminal is required",
            ];
            if let Some(line) = err
                .lines()
                .find(|l| l.starts_with("sudo:") || l.starts_with("Sorry, try again"))
                && refused.iter().any(|r| err.contains(r))
            {
                return Err(ExecError::Sudo {
                    host: self.host(),
                    message: line.trim().to_owned(),
                });
            }
        }
        Ok(res)
    }

    /// One channel: exec `command`, send `input` then EOF, collect output until the channel closes.
    async fn run_raw(
        &self,
        command: &str,
        input: Input,
        limit: usize,
        sink: Sink<'_>,
    ) -> Result<RunResult, ExecError> {
        self.run_raw_gated(command, input, None, limit, sink).await
    }

    /// Like [`Self::run_raw`]; with a [`SudoGate`], stdin waits until stderr shows sudo's one-time prompt
    /// (then the password is sent, once) or the command's start marker (then `input` follows); both are
    /// removed from the returned stderr. A failure to open the channel on a pooled connection is retried
    /// once on a fresh connection (nothing was sent yet, so this is safe).
    async fn run_raw_gated(
        &self,
        command: &str,
        input: Input,
        gate: Option<SudoGate>,
        limit: usize,
        sink: Sink<'_>,
    ) -> Result<RunResult, ExecError> {
        let host = self.host();
        let mut attempt = 0;
        let mut refusals = 0u32;
        let (conn, _permit, channel, mut guard) = loop {
            let conn = self.pool.connection(&self.slot).await.map_err(ExecError::from)?;
            let permit =
                conn.channels
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| ExecError::Disconnected {
                        host: host.clone(),
                        message: "pool closed".into(),
                    })?;
            // Armed until the call completes: a call cancelled mid-flight (timeout) or failing retires the
            // connection, so a half-dead link is not handed to the next call.
            let mut guard = PoisonOnDrop(Some(conn.clone()));
            match conn.handle.channel_open_session().await {
                Ok(ch) => break (conn, permit, ch, guard),
                // A live connection whose server refuses a session (e.g. its MaxSessions is momentarily full
                // while a just-closed session is torn down): back off and retry on the same connection.
                Err(russh::Error::ChannelOpenFailure(reason))
                    if !conn.handle.is_closed() && refusals < 20 =>
                {
                    guard.disarm();
                    refusals += 1;
                    self.pool.refused_sessions.fetch_add(1, Ordering::Relaxed);
                    debug!(%host, conn = conn.id, ?reason, refusals, "session refused; retrying");
                    drop(permit);
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(refusals.min(10)))).await;
                }
                // Anything else means the connection is gone: replace it once (nothing was sent yet).
                Err(e) => {
                    conn.poisoned.store(true, Ordering::Relaxed);
                    attempt += 1;
                    if attempt >= 2 {
                        return Err(SshError::OpenChannel { host, source: e }.into());
                    }
                    debug!(%host, conn = conn.id, "channel open failed ({e}); reconnecting");
                }
            }
        };
        let io_err = |message: String| ExecError::Disconnected {
            host: host.clone(),
            message,
        };
        channel
            .exec(true, command.as_bytes())
            .await
            .map_err(|e| io_err(format!("exec request: {e}")))?;
        let (mut read, write) = channel.split();
        let chunk = self.pool.config.chunk_size.max(1024);
        let (gate_tx, mut gate_rx) = tokio::sync::mpsc::unbounded_channel::<GateEvent>();
        let gate_info = gate.as_ref().map(|g| (g.prompt.clone(), g.marker.clone()));
        let writer = async {
            if let Some(g) = &gate {
                let mut sent = false;
                loop {
                    match gate_rx.recv().await {
                        Some(GateEvent::Prompt) if !sent => {
                            let mut line = Zeroizing::new(g.password.to_vec());
                            line.push(b'\n');
                            write.data(&line[..]).await?;
                            sent = true;
                        }
                        // Asked again (a wrong password): never send it twice; EOF makes sudo give up.
                        Some(GateEvent::Prompt) | None => return write.eof().await,
                        Some(GateEvent::Started) => break,
                    }
                }
            }
            feed_stdin(input, chunk, &mut write.make_writer()).await?;
            write.eof().await
        };
        let mut sink = sink;
        let reader = async {
            let mut res = RunResult {
                exit_code: None,
                stdout: Vec::new(),
                stderr: Vec::new(),
                truncated: false,
                stdout_bytes: 0,
            };
            let mut closed = false;
            let mut got_exit = false;
            let (mut scan, mut prompts_seen, mut started) = (Vec::<u8>::new(), 0usize, false);
            loop {
                // After the exit status, output still in flight keeps arriving; but a background process that
                // inherited stdout/stderr would hold the channel open for its whole life: stop waiting once
                // the channel has been idle for EXIT_GRACE after the command itself exited.
                let next = if got_exit {
                    match timeout(EXIT_GRACE, read.wait()).await {
                        Ok(m) => m,
                        Err(_) => {
                            debug!(%host, "channel still open {EXIT_GRACE:?} after the exit status; not waiting");
                            closed = true;
                            break;
                        }
                    }
                } else {
                    read.wait().await
                };
                let Some(msg) = next else { break };
                match msg {
                    ChannelMsg::Data { data } => {
                        res.stdout_bytes += data.len() as u64;
                        match &mut sink {
                            Sink::Capture => append_capped(&mut res.stdout, &data, limit, &mut res.truncated),
                            Sink::File(f, p) => {
                                f.write_all(&data).await.map_err(|source| ExecError::LocalIo {
                                    path: p.display().to_string(),
                                    source,
                                })?
                            }
                        }
                    }
                    ChannelMsg::ExtendedData { data, .. } => {
                        append_capped(&mut res.stderr, &data, limit, &mut res.truncated);
                        if let Some((prompt, marker)) = &gate_info
                            && !started
                        {
                            scan.extend_from_slice(&data);
                            let text = String::from_utf8_lossy(&scan);
                            let prompts = text.matches(prompt.as_str()).count();
                            for _ in prompts_seen..prompts {
                                let _ = gate_tx.send(GateEvent::Prompt);
                            }
                            prompts_seen = prompts;
                            if text.contains(marker.as_str()) {
                                started = true;
                                let _ = gate_tx.send(GateEvent::Started);
                            }
                        }
                    }
                    ChannelMsg::ExitStatus { exit_status } => {
                        res.exit_code = Some(exit_status);
                        got_exit = true;
                    }
                    ChannelMsg::ExitSignal { signal_name, .. } => {
                        got_exit = true;
                        debug!(%host, ?signal_name, "command killed by signal");
                    }
                    ChannelMsg::Failure => {
                        return Err(io_err("the server refused the exec request".into()));
                    }
                    ChannelMsg::Close => {
                        closed = true;
                        break;
                    }
                    _ => {}
                }
            }
            if !closed && !got_exit {
                return Err(io_err("channel ended before the command finished".into()));
            }
            if let Some((prompt, marker)) = &gate_info {
                let text = String::from_utf8_lossy(&res.stderr)
                    .replace(prompt.as_str(), "")
                    .replace(&format!("{marker}\n"), "");
                res.stderr = text.into_bytes();
            }
            Ok(res)
        };
        // Feed stdin while collecting output; when the command is done, stop feeding (it may exit without
        // reading all of its stdin, and then no window adjustment will ever come for the rest).
        let mut writer = std::pin::pin!(writer);
        let mut reader = std::pin::pin!(reader);
        let mut writing = true;
        loop {
            tokio::select! {
                written = &mut writer, if writing => {
                    writing = false;
                    if let Err(e) = written {
                        debug!(%host, conn = conn.id, "writing stdin stopped early: {e}");
                    }
                }
                result = &mut reader => {
                    if writing {
                        debug!(%host, conn = conn.id, "the command finished before reading all of its stdin");
                    }
                    if result.is_ok() {
                        guard.disarm();
                    }
                    return result;
                }
            }
        }
    }
}

/// Password sudo: the one-time prompt sudo prints, the marker the command prints once sudo let it run, and
/// the password (sent only after the prompt).
struct SudoGate {
    prompt: String,
    marker: String,
    password: Zeroizing<Vec<u8>>,
}

/// What the reader saw on stderr, for the stdin writer of a [`SudoGate`]d call.
enum GateEvent {
    Prompt,
    Started,
}

/// Marks a connection unusable for new calls when dropped while still armed.
struct PoisonOnDrop(Option<Arc<Conn>>);

impl PoisonOnDrop {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for PoisonOnDrop {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            debug!(
                conn = conn.id,
                "retiring the connection of an interrupted or failed call"
            );
            conn.poisoned.store(true, Ordering::Relaxed);
        }
    }
}

fn append_capped(buf: &mut Vec<u8>, data: &[u8], limit: usize, truncated: &mut bool) {
    let room = limit.saturating_sub(buf.len());
    if data.len() > room {
        *truncated = true;
    }
    buf.extend_from_slice(&data[..data.len().min(room)]);
}

/// The receiving side of an upload: new parent dirs get 0755 (umask 022); the temp file is created 0600 by
/// `mktemp`, filled from stdin, given its mode and owner, and only then renamed over the destination.
fn upload_script(req: &PutRequest) -> String {
    let path = quote(&req.path);
    let mut s = String::from("set -e; umask 022; ");
    s.push_str(&format!("p={path}; d=$(dirname -- \"$p\"); "));
    if req.create_parents {
        s.push_str("mkdir -p -- \"$d\"; ");
    }
    s.push_str("t=$(mktemp -- \"$d/.capkk-upload.XXXXXX\"); trap 'rm -f -- \"$t\"' EXIT; cat > \"$t\"; ");
    s.push_str(&format!("chmod {:o} -- \"$t\"; ", req.mode & 0o7777));
    if let Some(owner) = &req.owner {
        s.push_str(&format!("chown -- {} \"$t\"; ", quote(owner)));
    }
    s.push_str("n=$(wc -c < \"$t\"); mv -f -- \"$t\" \"$p\"; trap - EXIT; echo \"$n\"");
    s
}

#[async_trait]
impl Executor for SshExecutor {
    #[instrument(skip_all, fields(target = %self.target(), privileged = req.privileged))]
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        let start = Instant::now();
        let input = req
            .stdin
            .map(|b| Input::Bytes(Zeroizing::new(b)))
            .unwrap_or(Input::None);
        let work = self.run(
            &req.command,
            input,
            req.privileged,
            req.output_limit,
            Sink::Capture,
        );
        let res = match timeout(req.timeout, work).await {
            Ok(r) => r?,
            Err(_) => return Err(self.timed_out("command".into(), req.timeout)),
        };
        debug!(exit = ?res.exit_code, stdout = res.stdout.len(), stderr = res.stderr.len(), "exec done");
        Ok(ExecOutput {
            exit_code: res.exit_code,
            stdout: res.stdout,
            stderr: res.stderr,
            truncated: res.truncated,
            duration: start.elapsed(),
        })
    }

    #[instrument(skip_all, fields(target = %self.target(), path = %req.path, mode = format!("{:o}", req.mode)))]
    async fn put(&self, req: PutRequest) -> Result<u64, ExecError> {
        let (input, size) = match &req.source {
            FileSource::Bytes(b) => (Input::Bytes(Zeroizing::new(b.clone())), b.len() as u64),
            FileSource::Path(p) => {
                let f = tokio::fs::File::open(p)
                    .await
                    .map_err(|source| ExecError::LocalIo {
                        path: p.display().to_string(),
                        source,
                    })?;
                let size = f
                    .metadata()
                    .await
                    .map_err(|source| ExecError::LocalIo {
                        path: p.display().to_string(),
                        source,
                    })?
                    .len();
                (Input::File(f), size)
            }
        };
        let script = upload_script(&req);
        let work = self.run(&script, input, req.privileged, 64 * 1024, Sink::Capture);
        let res = match timeout(req.timeout, work).await {
            Ok(r) => r?,
            Err(_) => return Err(self.timed_out(format!("upload of {}", req.path), req.timeout)),
        };
        if res.exit_code != Some(0) {
            return Err(ExecError::Transfer {
                path: req.path.clone(),
                exit_code: res.exit_code,
                message: String::from_utf8_lossy(&res.stderr).trim().to_owned(),
            });
        }
        let written: u64 = String::from_utf8_lossy(&res.stdout)
            .trim()
            .parse()
            .unwrap_or(u64::MAX);
        if written != size {
            return Err(ExecError::Transfer {
                path: req.path.clone(),
                exit_code: res.exit_code,
                message: format!("sent {size} bytes but the host wrote {written}"),
            });
        }
        debug!(bytes = size, "uploaded");
        Ok(size)
    }

    #[instrument(skip_all, fields(target = %self.target(), path))]
    async fn get(&self, path: &str, limit: usize, privileged: bool) -> Result<Vec<u8>, ExecError> {
        let cmd = format!("cat -- {}", quote(path));
        let within = capkk_executor::DEFAULT_TIMEOUT;
        let work = self.run(&cmd, Input::None, privileged, limit, Sink::Capture);
        let res = match timeout(within, work).await {
            Ok(r) => r?,
            Err(_) => return Err(self.timed_out(format!("download of {path}"), within)),
        };
        if res.exit_code != Some(0) {
            return Err(ExecError::Transfer {
                path: path.to_owned(),
                exit_code: res.exit_code,
                message: String::from_utf8_lossy(&res.stderr).trim().to_owned(),
            });
        }
        if res.stdout_bytes > limit as u64 {
            return Err(ExecError::Transfer {
                path: path.to_owned(),
                exit_code: res.exit_code,
                message: format!("file is larger than the limit of {limit} bytes"),
            });
        }
        Ok(res.stdout)
    }

    fn target(&self) -> String {
        format!("{}@{}", self.slot.target.user, self.slot.target.address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capkk_executor::address::{AddressPolicy, Refusal};

    #[test]
    fn identity_separates_credentials_and_hides_them() {
        let pool = SshPool::default();
        let a = HostTarget::new("198.18.0.11", "root", Auth::password("canary-pw-1"));
        let b = HostTarget::new("198.18.0.11", "root", Auth::password("canary-pw-2"));
        let ia = pool.inner.identity(&a);
        assert_ne!(ia, pool.inner.identity(&b));
        assert_eq!(ia, pool.inner.identity(&a.clone()));
        assert!(!ia.contains("canary"));
        let via = b.clone().via(a.clone());
        assert!(pool.inner.identity(&via).contains(" via "));
    }

    #[test]
    fn a_rotated_credential_evicts_the_old_slot_and_a_deleted_host_is_forgotten() {
        let pool = SshPool::default();
        let old = HostTarget::new("198.18.0.11", "root", Auth::password("canary-pw-1"));
        let new = HostTarget::new("198.18.0.11", "root", Auth::password("canary-pw-2"));
        let other = HostTarget::new("198.18.0.12", "root", Auth::password("canary-pw-1"));
        let _ = pool.ssh_executor(&old);
        let _ = pool.ssh_executor(&other);
        assert_eq!(pool.stats().identities, 2);
        let _ = pool.ssh_executor(&new);
        assert_eq!(pool.stats().identities, 2, "the old credentials' slot is gone");
        let ids: Vec<String> = pool.inner.slots.lock().unwrap().keys().cloned().collect();
        assert!(!ids.contains(&pool.inner.identity(&old)));
        assert!(ids.contains(&pool.inner.identity(&new)));
        pool.evict_address(None, "198.18.0.12");
        assert_eq!(pool.stats().identities, 1);
    }

    #[test]
    fn one_owner_forgetting_an_address_or_rotating_its_credentials_leaves_another_owners_connections() {
        let pool = SshPool::default();
        let host = HostTarget::new("198.18.0.11", "root", Auth::password("canary-pw-1"));
        let a = host.clone().owner("tenant-a");
        let b = host.clone().owner("tenant-b");
        assert_ne!(pool.inner.identity(&a), pool.inner.identity(&b));
        let _ = pool.ssh_executor(&a);
        let _ = pool.ssh_executor(&b);
        assert_eq!(pool.stats().identities, 2, "one slot per owner");
        // b's credentials change: only b's old slot goes.
        let b_rotated =
            HostTarget::new("198.18.0.11", "root", Auth::password("canary-pw-2")).owner("tenant-b");
        let _ = pool.ssh_executor(&b_rotated);
        let ids = || -> Vec<String> { pool.inner.slots.lock().unwrap().keys().cloned().collect() };
        assert!(
            ids().contains(&pool.inner.identity(&a)),
            "a's slot survived b's rotation"
        );
        assert!(!ids().contains(&pool.inner.identity(&b)));
        // b deletes its host: a's connection to the same address stays.
        pool.evict_address(Some("tenant-b"), "198.18.0.11");
        assert_eq!(ids(), [pool.inner.identity(&a)]);
        pool.evict_address(Some("tenant-a"), "198.18.0.11");
        assert_eq!(pool.stats().identities, 0);
    }

    #[test]
    fn a_target_pinned_to_the_key_a_trusted_connection_saw_takes_that_connection_over() {
        let pool = SshPool::default();
        let tofu = HostTarget::new("198.18.0.11", "root", Auth::password("canary-pw-1"));
        let pinned = HostTarget {
            host_key: HostKeyPolicy::pinned("SHA256:seen"),
            ..tofu.clone()
        };
        let other_key = HostTarget {
            host_key: HostKeyPolicy::pinned("SHA256:other"),
            ..tofu.clone()
        };
        // Nothing seen yet (no connection): the pinned target gets a slot of its own.
        let first = pool.inner.slot(&tofu);
        let _ = pool.inner.slot(&pinned);
        assert_eq!(pool.stats().identities, 2);
        pool.inner
            .slots
            .lock()
            .unwrap()
            .remove(&pool.inner.identity(&pinned));
        // The trusted connection saw a key; a target pinned to another key does not take it over.
        *first.fingerprint.lock().unwrap() = Some("SHA256:seen".into());
        *first.sudo_mode.lock().unwrap() = Some(SudoMode::NoPassword);
        let _ = pool.inner.slot(&other_key);
        assert_eq!(pool.stats().identities, 2);
        pool.inner
            .slots
            .lock()
            .unwrap()
            .remove(&pool.inner.identity(&other_key));
        // The target pinned to the key it saw does, with what was learnt on it.
        let took = pool.inner.slot(&pinned);
        assert_eq!(pool.stats().identities, 1, "the trust-on-first-use slot is gone");
        assert!(matches!(took.target.host_key, HostKeyPolicy::Pinned(_)));
        assert_eq!(pool.observed_fingerprint(&pinned).as_deref(), Some("SHA256:seen"));
        assert_eq!(*took.sudo_mode.lock().unwrap(), Some(SudoMode::NoPassword));
        // Other credentials never take a trusted connection over.
        let again = pool.inner.slot(&tofu);
        *again.fingerprint.lock().unwrap() = Some("SHA256:seen".into());
        let rotated = HostTarget {
            auth: Auth::password("canary-pw-2"),
            ..pinned.clone()
        };
        let fresh = pool.inner.slot(&rotated);
        assert!(fresh.fingerprint.lock().unwrap().is_none());
    }

    /// A local listener that accepts connections and never says a word: every SSH handshake with it hangs.
    async fn silent_listener() -> (u16, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((sock, _)) = listener.accept().await {
                held.push(sock);
            }
        });
        (port, task)
    }

    /// A pool config whose policy allows loopback (the tests' listeners are there).
    fn loopback_allowed(config: PoolConfig) -> PoolConfig {
        PoolConfig {
            addresses: AddressPolicy {
                allow: vec!["127.0.0.0/8".parse().unwrap(), "::1".parse().unwrap()],
                ..Default::default()
            },
            ..config
        }
    }

    async fn connect_error(pool: &SshPool, target: &HostTarget) -> String {
        match pool.executor(target).exec(ExecRequest::new("true")).await {
            Err(ExecError::Connect { message, .. }) => message,
            other => panic!("expected a connect error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_target_connect_timeout_bounds_the_handshake_instead_of_the_pool_default() {
        let (port, listener) = silent_listener().await;
        let pool = SshPool::new(loopback_allowed(PoolConfig {
            connect_timeout: Duration::from_secs(600),
            ..Default::default()
        }));
        let t = HostTarget::new("127.0.0.1", "root", Auth::password("pw"))
            .port(port)
            .connect_timeout(Duration::from_millis(300));
        let message = connect_error(&pool, &t).await;
        assert!(
            message.contains("SSH handshake") && message.contains("timed out after 300ms"),
            "{message}"
        );

        // Without its own limit the target gets the pool's.
        let pool = SshPool::new(loopback_allowed(PoolConfig {
            connect_timeout: Duration::from_millis(200),
            ..Default::default()
        }));
        let plain = HostTarget::new("127.0.0.1", "root", Auth::password("pw")).port(port);
        let message = connect_error(&pool, &plain).await;
        assert!(message.contains("timed out after 200ms"), "{message}");
        listener.abort();
    }

    /// A local listener that counts the connections it accepts and holds them open without a word.
    async fn counting_listener() -> (u16, Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicU64::new(0));
        let seen = hits.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((sock, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                held.push(sock);
            }
        });
        (port, hits, task)
    }

    /// A loopback port nothing listens on.
    async fn closed_port() -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    }

    async fn exec_error(pool: &SshPool, target: &HostTarget) -> ExecError {
        match pool.executor(target).exec(ExecRequest::new("true")).await {
            Err(e) => e,
            Ok(out) => panic!("expected an error, the command ran: {out:?}"),
        }
    }

    #[tokio::test]
    async fn a_loopback_target_is_refused_before_any_connection_with_one_message_whatever_the_port() {
        let (open, hits, listener) = counting_listener().await;
        let closed = closed_port().await;
        let pool = SshPool::new(PoolConfig {
            connect_timeout: Duration::from_secs(2),
            ..Default::default()
        });
        let mut messages = Vec::new();
        for port in [open, closed] {
            let err = exec_error(
                &pool,
                &HostTarget::new("127.0.0.1", "root", Auth::password("pw")).port(port),
            )
            .await;
            assert!(
                matches!(
                    &err,
                    ExecError::AddressRefused { address, bastion: false, resolved: false, refusal: Refusal::Loopback }
                        if address == "127.0.0.1"
                ),
                "{err:?}"
            );
            assert!(!err.is_transient(), "a refusal is not retried by itself");
            messages.push(err.to_string());
        }
        assert_eq!(
            messages[0], messages[1],
            "an open and a closed port read the same"
        );
        assert_eq!(
            messages[0],
            "127.0.0.1 is a loopback address; refused before dialling"
        );
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "nothing connected to the listener"
        );
        assert_eq!(pool.stats().connects, 0);
        listener.abort();
    }

    #[tokio::test]
    async fn a_name_or_an_alias_resolving_to_a_refused_address_is_refused_and_not_dialled() {
        let (port, hits, listener) = counting_listener().await;
        let pool = SshPool::new(PoolConfig {
            host_aliases: [("node1.example".to_owned(), "127.0.0.1".parse().unwrap())].into(),
            ..Default::default()
        });
        for name in ["localhost", "node1.example", "NODE1.example"] {
            let err = exec_error(
                &pool,
                &HostTarget::new(name, "root", Auth::password("pw")).port(port),
            )
            .await;
            assert!(
                matches!(
                    &err,
                    ExecError::AddressRefused {
                        resolved: true,
                        refusal: Refusal::Loopback,
                        ..
                    }
                ),
                "{name}: {err:?}"
            );
            assert!(
                err.to_string()
                    .starts_with(&format!("{name} resolves to a loopback address")),
                "{err}"
            );
        }
        // An alias is checked like any answer: one to the metadata service is refused whatever is allowed.
        let pool = SshPool::new(loopback_allowed(PoolConfig {
            host_aliases: [("meta.example".to_owned(), "169.254.169.254".parse().unwrap())].into(),
            ..Default::default()
        }));
        let err = exec_error(
            &pool,
            &HostTarget::new("meta.example", "root", Auth::password("pw")),
        )
        .await;
        assert!(
            matches!(
                &err,
                ExecError::AddressRefused {
                    refusal: Refusal::LinkLocal,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "nothing connected to the listener"
        );
        listener.abort();
    }

    #[tokio::test]
    async fn a_refused_bastion_is_reported_as_the_bastions_and_neither_host_is_dialled() {
        let (port, hits, listener) = counting_listener().await;
        let pool = SshPool::default();
        let t = HostTarget::new("198.18.0.11", "root", Auth::password("pw"))
            .via(HostTarget::new("127.0.0.1", "root", Auth::password("pw")).port(port));
        let err = exec_error(&pool, &t).await;
        assert!(
            matches!(&err, ExecError::AddressRefused { address, bastion: true, .. } if address == "127.0.0.1"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("bastion 127.0.0.1 is a loopback address"),
            "{err}"
        );
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        listener.abort();
    }

    #[tokio::test]
    async fn an_allowed_loopback_range_lets_the_same_target_be_dialled() {
        let (port, hits, listener) = counting_listener().await;
        let pool = SshPool::new(loopback_allowed(PoolConfig {
            connect_timeout: Duration::from_millis(300),
            ..Default::default()
        }));
        for address in ["127.0.0.1", "localhost"] {
            let err = exec_error(
                &pool,
                &HostTarget::new(address, "root", Auth::password("pw")).port(port),
            )
            .await;
            assert!(
                matches!(&err, ExecError::Connect { message, .. } if message.contains("SSH handshake")),
                "dialled, then the silent listener timed the handshake out: {err:?}"
            );
        }
        assert_eq!(hits.load(Ordering::SeqCst), 2, "both dials reached the listener");
        listener.abort();
    }

    #[test]
    fn a_changed_connect_timeout_is_a_new_identity_on_the_same_route() {
        let pool = SshPool::default();
        let a = HostTarget::new("198.18.0.11", "root", Auth::password("pw"));
        let b = a.clone().connect_timeout(Duration::from_secs(5));
        assert_ne!(pool.inner.identity(&a), pool.inner.identity(&b));
        assert_eq!(PoolInner::route(&a), PoolInner::route(&b));
    }

    #[test]
    fn target_secrets_reach_the_redactor_list() {
        let t = HostTarget::new(
            "h",
            "u",
            Auth::key_bytes(
                "-----BEGIN OPENSSH PRIVATE KEY-----\nKEYLINE-CANARY\n-----END OPENSSH PRIVATE KEY-----\n",
            )
            .with_passphrase("PASS-CANARY"),
        )
        .sudo_password("SUDO-CANARY")
        .via(HostTarget::new("b", "u", Auth::password("PW-CANARY")));
        let mut s = t.secret_texts();
        s.sort();
        assert_eq!(s, ["KEYLINE-CANARY", "PASS-CANARY", "PW-CANARY", "SUDO-CANARY"]);
    }

    #[test]
    fn debug_output_redacts_every_secret() {
        let t = HostTarget::new(
            "h",
            "u",
            Auth::key_bytes("KEY-CANARY").with_passphrase("PASS-CANARY"),
        )
        .sudo_password("SUDO-CANARY")
        .via(HostTarget::new("b", "u", Auth::password("PW-CANARY")));
        let text = format!("{t:?} {:?}", SecretSlice::from(b"S-CANARY".to_vec()));
        assert!(!text.contains("CANARY"), "{text}");
    }

    #[test]
    fn upload_script_quotes_path_and_owner() {
        let req = PutRequest::bytes("/etc/it's here/x", b"data".to_vec(), 0o640).owner("root:root");
        let s = upload_script(&req);
        assert!(s.contains(r"p='/etc/it'\''s here/x'"), "{s}");
        assert!(s.contains("chmod 640"));
        assert!(s.contains("chown -- root:root"));
        assert!(!s.contains("data"));
    }

    /// Records the size of every write.
    #[derive(Default)]
    struct WriteSizes(Vec<usize>);

    impl AsyncWrite for WriteSizes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.push(buf.len());
            std::task::Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn stdin_reaches_the_channel_in_whole_chunks_not_in_small_copies() {
        const CHUNK: usize = 64 * 1024;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("artifact");
        std::fs::write(&path, vec![7u8; 3 * CHUNK + 100]).unwrap();
        let file = tokio::fs::File::open(&path).await.unwrap();
        let mut out = WriteSizes::default();
        feed_stdin(Input::File(file), CHUNK, &mut out).await.unwrap();
        assert_eq!(out.0, [CHUNK, CHUNK, CHUNK, 100]);

        let mut out = WriteSizes::default();
        let bytes = Zeroizing::new(vec![1u8; CHUNK + 5]);
        feed_stdin(Input::Bytes(bytes), CHUNK, &mut out).await.unwrap();
        assert_eq!(out.0, [CHUNK, 5]);
    }

    #[test]
    fn output_cap_truncates() {
        let mut buf = Vec::new();
        let mut t = false;
        append_capped(&mut buf, b"hello", 3, &mut t);
        append_capped(&mut buf, b"world", 3, &mut t);
        assert_eq!(buf, b"hel");
        assert!(t);
    }
}
