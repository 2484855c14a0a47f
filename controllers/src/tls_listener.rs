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

#[cfg(test)]
mod tests {
    use rustls::{
        DigitallySignedStruct, SignatureScheme,
        client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        crypto::CryptoProvider,
        pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime},
    };

    use super::*;

    /// A client that takes any certificate (the handshake's version and suite are under test, not the name).
    #[derive(Debug)]
    struct AnyCertificate(Arc<CryptoProvider>);

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
