//! TLS connections for `axum::serve`, shared by the HTTPS endpoints (the runtime extension's hooks and the
//! diagnostics endpoint): the handshake runs in `accept`, bounded, and a failed one is logged and skipped so
//! that one bad client never stops the server.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tracing::{debug, error, warn};

/// Where a listener gets its TLS configuration for each connection.
pub(crate) type ConfigSource = Box<dyn Fn() -> anyhow::Result<Arc<rustls::ServerConfig>> + Send + Sync>;

/// A TCP listener whose accepted connections are TLS streams.
pub(crate) struct TlsListener {
    tcp: tokio::net::TcpListener,
    config: ConfigSource,
    what: &'static str,
}

/// Bound on a handshake: a client that connects and says nothing must not hold an accept slot.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl TlsListener {
    /// Accept on `tcp`, asking `config` for the TLS configuration of every connection (a source that reads
    /// files picks up a renewed certificate without a restart). `what` names the endpoint in logs.
    pub(crate) fn new(tcp: tokio::net::TcpListener, config: ConfigSource, what: &'static str) -> TlsListener {
        TlsListener { tcp, config, what }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let what = self.what;
        loop {
            let (stream, peer) = match self.tcp.accept().await {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "{what}: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let cfg = match (self.config)() {
                Ok(c) => c,
                Err(e) => {
                    error!(error = %format!("{e:#}"), "{what}: no usable certificate");
                    continue;
                }
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, peer),
                Ok(Err(e)) => debug!(%peer, error = %e, "{what}: TLS handshake failed"),
                Err(_) => debug!(%peer, "{what}: TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
