//! The HTTPS endpoints' server (the runtime extension's hooks and the diagnostics endpoint): axum-server's
//! loop, which accepts a TCP connection and hands it at once to a task of its own, with our TLS acceptor and
//! limits, so that no client can stall another:
//!
//! - at most [`Limits::max_connections`] connections at once, handshaking ones included: one more is closed
//!   at once (a file descriptor each, and the manager has SSH connections to keep);
//! - the TLS handshake within [`Limits::handshake`], in the connection's task (never in the accept loop);
//! - each request's head within [`Limits::header_read`], the first one's and each next one's on a kept-alive
//!   connection (so it is also how long a connection may idle between requests);
//! - a connection on which no byte moves either way for [`Limits::idle`] is closed (a body that stops
//!   arriving, an answer the client does not read).
//!
//! The TLS configuration is asked for each connection (a source that reads files picks up a renewed
//! certificate without a restart); a failed handshake is logged and the connection dropped.

use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::{OwnedSemaphorePermit, Semaphore, watch},
    time::{Instant, Sleep},
};
use tracing::{debug, error, warn};

/// Where a listener gets its TLS configuration for each connection.
pub(crate) type ConfigSource = Box<dyn Fn() -> anyhow::Result<Arc<rustls::ServerConfig>> + Send + Sync>;

/// How long and how many connections an HTTPS endpoint keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// A TLS handshake must end within this.
    pub handshake: Duration,
    /// A request's head must arrive within this (from the connection's start or the previous answer).
    pub header_read: Duration,
    /// A connection on which no byte moves either way for this long is closed.
    pub idle: Duration,
    /// Connections at once (handshaking, reading, answering or kept alive); more are closed on accept.
    pub max_connections: usize,
}

impl Default for Limits {
    /// CAPI's hook calls time out after 10 s and a scraper's after 10 s by default: a client that has not
    /// sent its request's head by then is not one of them. 64 connections per endpoint is far above what CAPI
    /// (one client per manager) and a few scrapers open.
    fn default() -> Self {
        Limits {
            handshake: Duration::from_secs(10),
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(30),
            max_connections: 64,
        }
    }
}

/// How long connections may finish their requests after shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serve `router` over TLS on `tcp` (a configuration from `config` for each connection) within `limits`, in
/// a task of its own until `shutdown`. `what` names the endpoint in logs.
pub(crate) fn serve(
    tcp: tokio::net::TcpListener,
    config: ConfigSource,
    router: axum::Router,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    what: &'static str,
) {
    let acceptor = TlsAcceptor {
        config: Arc::new(config),
        limits,
        slots: Arc::new(Semaphore::new(limits.max_connections)),
        warned_full: Arc::new(Mutex::new(None)),
        what,
    };
    let handle = axum_server::Handle::<SocketAddr>::new();
    let mut server = axum_server::Server::from_listener(tcp)
        .acceptor(acceptor)
        .handle(handle.clone())
        .accept_error_handler(move |peer, e| debug!(?peer, error = %e, "{what}: connection not served"))
        // The ALPN offered is http/1.1 only: no protocol detection, so the header timeout starts at once.
        .http1_only();
    server
        .http_builder()
        .http1()
        .header_read_timeout(limits.header_read);
    tokio::spawn(async move {
        let _ = shutdown.wait_for(|v| *v).await;
        handle.graceful_shutdown(Some(SHUTDOWN_GRACE));
    });
    tokio::spawn(async move {
        if let Err(e) = server.serve(router.into_make_service()).await {
            error!(error = %e, "{what} server failed");
        }
    });
}

/// The TLS side of a connection, within the limits; runs in the connection's own task.
#[derive(Clone)]
struct TlsAcceptor {
    config: Arc<ConfigSource>,
    limits: Limits,
    slots: Arc<Semaphore>,
    /// When the connection cap was last reported (once a minute at most: a flood must not flood the log).
    warned_full: Arc<Mutex<Option<Instant>>>,
    what: &'static str,
}

impl<S: Send + 'static> axum_server::accept::Accept<TcpStream, S> for TlsAcceptor {
    type Stream = Bounded<tokio_rustls::server::TlsStream<TcpStream>>;
    type Service = S;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, S)>> + Send>>;

    fn accept(&self, tcp: TcpStream, service: S) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let what = this.what;
            let Ok(slot) = this.slots.clone().try_acquire_owned() else {
                this.report_full();
                return Err(io::Error::other("connection limit reached"));
            };
            let cfg = (this.config)().map_err(|e| {
                error!(error = %format!("{e:#}"), "{what}: no usable certificate");
                io::Error::other("no usable certificate")
            })?;
            let handshake = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp);
            let tls = match tokio::time::timeout(this.limits.handshake, handshake).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return Err(io::Error::other(format!("TLS handshake failed: {e}"))),
                Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")),
            };
            Ok((Bounded::new(tls, this.limits.idle, slot), service))
        })
    }
}

impl TlsAcceptor {
    fn report_full(&self) {
        let now = Instant::now();
        let Ok(mut last) = self.warned_full.lock() else {
            return;
        };
        if last.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(60)) {
            *last = Some(now);
            warn!(
                max_connections = self.limits.max_connections,
                "{}: connection limit reached; new connections are closed until some end", self.what
            );
        }
    }
}

/// A connection that holds one of the endpoint's connection slots and fails once no byte has moved either
/// way for `idle`.
pub(crate) struct Bounded<S> {
    inner: S,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    _slot: OwnedSemaphorePermit,
}

impl<S> Bounded<S> {
    fn new(inner: S, idle: Duration, slot: OwnedSemaphorePermit) -> Bounded<S> {
        Bounded {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
            _slot: slot,
        }
    }

    fn moved(&mut self) {
        let next = Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    /// What a pending operation returns: still pending, or the idle limit's error once it has passed.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.moved();
                Poll::Ready(r)
            }
            Poll::Pending => this.pending(cx),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                this.moved();
                Poll::Ready(r)
            }
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                this.moved();
                Poll::Ready(r)
            }
            Poll::Pending => this.pending(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => this.pending(cx),
        }
    }
}

/// The TLS versions and cipher suites of the HTTPS endpoints, from CAPI's `--tls-min-version` and
/// `--tls-cipher-suites` (the names Go and CAPI use).
#[derive(Clone, Debug)]
pub(crate) struct TlsOptions {
    versions: Vec<&'static rustls::SupportedProtocolVersion>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

/// `--tls-min-version`'s values, CAPI's.
const VERSIONS: [&str; 4] = ["VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"];

/// The IANA name of a suite as Go and CAPI's flag spell it (rustls prefixes TLS 1.3's with `TLS13_`).
fn suite_name(s: &rustls::SupportedCipherSuite) -> String {
    let name = format!("{:?}", s.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

impl TlsOptions {
    /// Parse the flags. TLS 1.0 and 1.1 are never offered, so `VersionTLS10` and `VersionTLS11` mean what
    /// `VersionTLS12` means. The cipher suites restrict TLS 1.2; TLS 1.3's are not configurable (as in Go,
    /// whose names for them are accepted). An unknown or unsupported name is refused, naming the ones there are.
    pub(crate) fn new(min_version: &str, cipher_suites: &[String]) -> Result<TlsOptions, String> {
        let tls13_only = match min_version {
            "VersionTLS13" => true,
            v if VERSIONS.contains(&v) => false,
            other => {
                return Err(format!(
                    "--tls-min-version {other:?}: possible values are {}",
                    VERSIONS.join(", ")
                ));
            }
        };
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        let names: Vec<&str> = cipher_suites
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect();
        if !names.is_empty() {
            let known: Vec<String> = provider.cipher_suites.iter().map(suite_name).collect();
            if let Some(bad) = names.iter().find(|n| !known.iter().any(|k| k == *n)) {
                return Err(format!(
                    "--tls-cipher-suites: {bad:?} is not a supported cipher suite; supported: {}",
                    known.join(", ")
                ));
            }
            provider.cipher_suites.retain(|s| {
                s.version() == &rustls::version::TLS13 || names.contains(&suite_name(s).as_str())
            });
        }
        let tls12 = !tls13_only
            && provider
                .cipher_suites
                .iter()
                .any(|s| s.version() == &rustls::version::TLS12);
        let mut versions = vec![&rustls::version::TLS13];
        if tls12 {
            versions.push(&rustls::version::TLS12);
        }
        Ok(TlsOptions {
            versions,
            provider: Arc::new(provider),
        })
    }

    /// A server configuration builder with these versions and suites.
    pub(crate) fn server_config(
        &self,
    ) -> anyhow::Result<rustls::ConfigBuilder<rustls::ServerConfig, rustls::WantsVerifier>> {
        Ok(rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&self.versions)?)
    }
}

impl Default for TlsOptions {
    /// CAPI's defaults: TLS 1.2 and 1.3, the default suites.
    fn default() -> Self {
        TlsOptions {
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
            provider: Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
        }
    }
}

/// Clients for the tests of the HTTPS endpoints (here, the hook server's and the diagnostics endpoint's).
#[cfg(test)]
pub(crate) mod testing {
    use std::{net::SocketAddr, sync::Arc, time::Duration};

    use rustls::{
        DigitallySignedStruct, SignatureScheme,
        client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        crypto::CryptoProvider,
        pki_types::{CertificateDer, ServerName, UnixTime},
    };
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };

    /// A client that takes any certificate (the handshake's version and suite are under test, not the name).
    #[derive(Debug)]
    pub(crate) struct AnyCertificate(pub(crate) Arc<CryptoProvider>);

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
        }
        fn verify_tls13_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    /// A TLS client that takes any certificate.
    pub(crate) fn client_config() -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .unwrap()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth(),
        )
    }

    /// A connection to `addr` with its TLS handshake done.
    pub(crate) async fn tls_connect(
        addr: SocketAddr,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(addr).await?;
        tokio_rustls::TlsConnector::from(client_config())
            .connect(ServerName::from(addr.ip()), tcp)
            .await
    }

    /// `method path` with `body` over a new TLS connection (closed after the answer): the answer's status
    /// line, or why there is none within `within`.
    pub(crate) async fn request(
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &str,
        within: Duration,
    ) -> Result<String, String> {
        let exchange = async {
            let mut tls = tls_connect(addr).await.map_err(|e| format!("connecting: {e}"))?;
            let req = format!(
                "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            tls.write_all(req.as_bytes())
                .await
                .map_err(|e| format!("sending: {e}"))?;
            let mut out = Vec::new();
            let _ = tls.read_to_end(&mut out).await;
            let text = String::from_utf8_lossy(&out).into_owned();
            match text.lines().next() {
                Some(status) if status.starts_with("HTTP/1.1 ") => Ok(status.to_owned()),
                _ => Err(format!("no answer: {text:?}")),
            }
        };
        match tokio::time::timeout(within, exchange).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {within:?}")),
        }
    }

    /// Whether the server closes `conn` within `within` (its reads end, or fail).
    pub(crate) async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
        conn: &mut S,
        within: Duration,
    ) -> bool {
        let mut buf = Vec::new();
        tokio::time::timeout(within, conn.read_to_end(&mut buf))
            .await
            .is_ok()
    }

    /// A free port on 127.0.0.1 (for a server that binds the address it is given).
    pub(crate) fn free_addr() -> SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::{testing::*, *};

    /// The (version, suite) a client offering `versions` and `suites` (all by default) agrees on with a server
    /// built from `opts`, or why the handshake failed.
    async fn handshake(
        opts: &TlsOptions,
        versions: &[&'static rustls::SupportedProtocolVersion],
        suites: &[&str],
    ) -> Result<(String, String), String> {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
        let server = opts
            .server_config()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        if !suites.is_empty() {
            provider
                .cipher_suites
                .retain(|s| suites.contains(&suite_name(s).as_str()));
        }
        let provider = Arc::new(provider);
        let client = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let accept = tokio_rustls::TlsAcceptor::from(Arc::new(server)).accept(a);
        let connect = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from("localhost").unwrap(), b);
        let (server, client) = tokio::join!(accept, connect);
        let (_, conn) = client.map_err(|e| e.to_string())?.into_inner();
        server.map_err(|e| e.to_string())?;
        Ok((
            format!("{:?}", conn.protocol_version().unwrap()),
            suite_name(&conn.negotiated_cipher_suite().unwrap()),
        ))
    }

    /// The hook server's router behind [`serve`] on 127.0.0.1 with `limits` and a self-signed certificate.
    async fn hook_server(limits: Limits) -> SocketAddr {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
        let mut cfg = TlsOptions::default()
            .server_config()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cfg = Arc::new(cfg);
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        // The server runs as long as the test's runtime.
        std::mem::forget(tx);
        serve(
            tcp,
            Box::new(move || Ok(cfg.clone())),
            crate::inplace::server::router(None),
            limits,
            rx,
            "runtime extension",
        );
        addr
    }

    /// A hook request that needs no controller context.
    async fn discovery(addr: SocketAddr) -> Result<String, String> {
        let path = format!("{}/discovery", crate::inplace::server::PREFIX);
        request(addr, "POST", &path, "{}", Duration::from_secs(5)).await
    }

    /// Limits that never end a connection during a test, but for those given.
    const LONG: Limits = Limits {
        handshake: Duration::from_secs(30),
        header_read: Duration::from_secs(30),
        idle: Duration::from_secs(30),
        max_connections: 64,
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_sends_nothing_or_no_headers_does_not_stop_the_hook_server_answering_another() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = std::env::temp_dir().join(format!("capkk-stall-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        // PEM by hand: rcgen is built without its `pem` feature.
        let pem = |label: &str, der: &[u8]| {
            use base64::Engine as _;
            let b64 = base64::engine::general_purpose::STANDARD.encode(der);
            let lines: Vec<&str> = b64
                .as_bytes()
                .chunks(64)
                .map(|c| std::str::from_utf8(c).unwrap())
                .collect();
            format!(
                "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
                lines.join("\n")
            )
        };
        std::fs::write(dir.join("tls.crt"), pem("CERTIFICATE", cert.cert.der())).unwrap();
        std::fs::write(
            dir.join("tls.key"),
            pem("PRIVATE KEY", &cert.signing_key.serialize_der()),
        )
        .unwrap();
        let (_tx, rx) = watch::channel(false);
        // The manager's hook server, with its default limits (a 10 s handshake limit and header limit).
        let addr = crate::inplace::server::serve(
            "127.0.0.1:0".parse().unwrap(),
            dir.clone(),
            Default::default(),
            None,
            rx,
        )
        .await
        .unwrap();
        // One client connects and sends nothing: another is answered meanwhile, not after the handshake limit
        // (the discovery request's own limit is 5 s). Before ce85f2d the handshake ran in accept(), serially.
        let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let status = discovery(addr).await;
        assert!(
            status.as_deref().is_ok_and(|s| s.starts_with("HTTP/1.1 200")),
            "another client's request while one sends nothing: {status:?}"
        );
        // One client completes its handshake and sends no headers: nor is a new handshake held up meanwhile.
        let _no_headers = tokio::time::timeout(Duration::from_secs(5), tls_connect(addr))
            .await
            .expect("a handshake while another client sends nothing")
            .unwrap();
        for _ in 0..3 {
            let status = discovery(addr).await;
            assert!(
                status.as_deref().is_ok_and(|s| s.starts_with("HTTP/1.1 200")),
                "another client's request while two stall: {status:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_beyond_the_cap_are_closed_and_one_is_served_again_once_another_ends() {
        let addr = hook_server(Limits {
            max_connections: 2,
            ..LONG
        })
        .await;
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(tls_connect(addr).await.expect("a connection within the cap"));
        }
        let third = discovery(addr).await;
        assert!(third.is_err(), "a third connection was served: {third:?}");
        drop(held.pop());
        // The server sees the close when it next reads; the slot is free then.
        let start = tokio::time::Instant::now();
        loop {
            match discovery(addr).await {
                Ok(status) => {
                    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
                    break;
                }
                Err(e) if start.elapsed() > Duration::from_secs(10) => {
                    panic!("no connection served after one of two ended: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_is_closed_when_its_handshake_or_headers_do_not_come_or_no_byte_moves_for_the_idle_limit()
     {
        let addr = hook_server(Limits {
            handshake: Duration::from_secs(1),
            header_read: Duration::from_secs(1),
            idle: Duration::from_secs(2),
            max_connections: 64,
        })
        .await;
        let bound = Duration::from_secs(8);
        // Connects and sends nothing: the handshake limit.
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        // Completes the handshake and sends no request: the header limit.
        let mut no_headers = tls_connect(addr).await.unwrap();
        // Sends a head and part of its body: the idle limit.
        let mut no_body = tls_connect(addr).await.unwrap();
        let head = format!(
            "POST {}/discovery HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{",
            crate::inplace::server::PREFIX
        );
        no_body.write_all(head.as_bytes()).await.unwrap();
        // Kept alive after one answer, then idle: the header limit again.
        let mut kept = tls_connect(addr).await.unwrap();
        let req = format!(
            "POST {}/discovery HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}",
            crate::inplace::server::PREFIX
        );
        kept.write_all(req.as_bytes()).await.unwrap();
        let mut first = [0u8; 12];
        kept.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
        let (a, b, c, d) = tokio::join!(
            closed_within(&mut silent, bound),
            closed_within(&mut no_headers, bound),
            closed_within(&mut no_body, bound),
            closed_within(&mut kept, bound),
        );
        assert_eq!(
            (a, b, c, d),
            (true, true, true, true),
            "closed within {bound:?}: (no handshake, no headers, no body, kept alive and idle)"
        );
    }

    const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
    const BOTH: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

    #[tokio::test]
    async fn the_minimum_tls_version_refuses_an_older_client_and_capis_default_takes_tls_1_2() {
        let default = TlsOptions::new("VersionTLS12", &[]).unwrap();
        assert_eq!(handshake(&default, TLS12, &[]).await.unwrap().0, "TLSv1_2");
        assert_eq!(handshake(&default, BOTH, &[]).await.unwrap().0, "TLSv1_3");
        // Below 1.2 nothing is ever offered: VersionTLS10 is CAPI's default's equal.
        let old = TlsOptions::new("VersionTLS10", &[]).unwrap();
        assert_eq!(handshake(&old, TLS12, &[]).await.unwrap().0, "TLSv1_2");
        let tls13 = TlsOptions::new("VersionTLS13", &[]).unwrap();
        let err = handshake(&tls13, TLS12, &[]).await.unwrap_err();
        assert!(err.contains("ProtocolVersion"), "{err}");
        assert_eq!(handshake(&tls13, BOTH, &[]).await.unwrap().0, "TLSv1_3");
        let err = TlsOptions::new("VersionTLS14", &[]).unwrap_err();
        assert!(
            err.contains("--tls-min-version \"VersionTLS14\"") && err.contains("VersionTLS13"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn the_cipher_suites_restrict_tls_1_2_and_an_unknown_name_is_refused_naming_the_supported_ones() {
        let wanted = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256";
        let other = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256";
        let opts = TlsOptions::new(
            "VersionTLS12",
            &[format!(" {wanted}"), "TLS_AES_128_GCM_SHA256".into()],
        )
        .unwrap();
        assert_eq!(
            handshake(&opts, TLS12, &[]).await.unwrap(),
            ("TLSv1_2".to_owned(), wanted.to_owned())
        );
        let err = handshake(&opts, TLS12, &[other]).await.unwrap_err();
        assert!(err.contains("HandshakeFailure"), "{err}");
        // TLS 1.3's suites are not restricted (as in Go).
        assert_eq!(
            handshake(&opts, BOTH, &["TLS_AES_256_GCM_SHA384"])
                .await
                .unwrap()
                .0,
            "TLSv1_3"
        );
        let err = TlsOptions::new("VersionTLS12", &["TLS_RSA_WITH_RC4_128_SHA".into()]).unwrap_err();
        assert!(
            err.contains("\"TLS_RSA_WITH_RC4_128_SHA\" is not a supported cipher suite")
                && err.contains(other),
            "{err}"
        );
    }
}
