//! The Runtime Extension's HTTPS endpoint: CAPI's runtime client POSTs JSON requests to
//! `/hooks.runtime.cluster.x-k8s.io/v1alpha1/<hook>[/<handler>]` and accepts only HTTPS, verifying the
//! certificate against the ExtensionConfig's `caBundle` (cert-manager injects it, see
//! `config/runtime-extension/`).
//!
//! The certificate (`tls.crt`, `tls.key` in the cert dir, as a mounted Secret) is read again for every
//! connection, so a renewal by cert-manager is picked up without a restart.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::Context as _;
use axum::{Json, Router, extract::State, routing::post};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::info;

use super::{decide, update};
use crate::context::Context;

/// Path prefix of every hook.
pub(crate) const PREFIX: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1";

/// The handlers this extension registers: (name, hook, timeout seconds). `UpdateMachine` answers from a
/// background task, so every call is short.
pub(crate) const HANDLERS: [(&str, &str, i32); 3] = [
    ("can-update-machine", "CanUpdateMachine", 10),
    ("can-update-machine-set", "CanUpdateMachineSet", 10),
    ("update-machine", "UpdateMachine", 10),
];

/// The `DiscoveryResponse`.
pub(crate) fn discovery() -> Value {
    let handlers: Vec<Value> = HANDLERS
        .iter()
        .map(|(name, hook, timeout)| {
            json!({
                "name": name,
                "requestHook": {"apiVersion": decide::HOOKS_API_VERSION, "hook": hook},
                "timeoutSeconds": timeout,
                "failurePolicy": "Fail",
            })
        })
        .collect();
    json!({
        "apiVersion": decide::HOOKS_API_VERSION,
        "kind": "DiscoveryResponse",
        "status": "Success",
        "handlers": handlers,
    })
}

/// What the handlers need: the manager's context for `UpdateMachine` (None in tests of the decisions only).
#[derive(Clone)]
pub(crate) struct Hooks {
    ctx: Option<Arc<Context>>,
}

/// A hook request's JSON body. CAPI's runtime client POSTs JSON without a `Content-Type` header, which axum's
/// `Json` extractor refuses (415): the body is parsed whatever the header says.
pub(crate) struct HookRequest(pub(crate) Value);

impl<S: Send + Sync> axum::extract::FromRequest<S> for HookRequest {
    type Rejection = (axum::http::StatusCode, String);

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = axum::body::Bytes::from_request(req, state).await.map_err(|e| {
            (
                axum::http::StatusCode::BAD_REQUEST,
                format!("reading the request: {e}"),
            )
        })?;
        serde_json::from_slice(&body).map(HookRequest).map_err(|e| {
            (
                axum::http::StatusCode::BAD_REQUEST,
                format!("the request is not JSON: {e}"),
            )
        })
    }
}

/// The router of the hooks (HTTP; [`serve`] puts it behind TLS).
pub(crate) fn router(ctx: Option<Arc<Context>>) -> Router {
    Router::new()
        .route(&format!("{PREFIX}/discovery"), post(|| async { Json(discovery()) }))
        .route(
            &format!("{PREFIX}/canupdatemachine/{{handler}}"),
            post(|HookRequest(req): HookRequest| async move {
                let (resp, answer) = decide::can_update_machine(&req);
                info!(machine = %req["current"]["machine"]["metadata"]["name"], ?answer, "CanUpdateMachine");
                Json(resp)
            }),
        )
        .route(
            &format!("{PREFIX}/canupdatemachineset/{{handler}}"),
            post(|HookRequest(req): HookRequest| async move {
                let (resp, answer) = decide::can_update_machine_set(&req);
                info!(machineset = %req["current"]["machineSet"]["metadata"]["name"], ?answer, "CanUpdateMachineSet");
                Json(resp)
            }),
        )
        .route(
            &format!("{PREFIX}/updatemachine/{{handler}}"),
            post(|State(h): State<Hooks>, HookRequest(req): HookRequest| async move {
                let resp = match h.ctx {
                    Some(ctx) => update::update_machine(ctx, &req).await,
                    None => json!({"apiVersion": decide::HOOKS_API_VERSION, "kind": "UpdateMachineResponse",
                        "status": "Failure", "message": "no controller context", "retryAfterSeconds": 0}),
                };
                info!(machine = %req["desired"]["machine"]["metadata"]["name"], status = %resp["status"],
                    retry_after = %resp["retryAfterSeconds"], message = %resp["message"], "UpdateMachine");
                Json(resp)
            }),
        )
        .with_state(Hooks { ctx })
}

/// The TLS configuration from `dir/tls.crt` and `dir/tls.key` (PEM).
pub(crate) fn tls_config(
    dir: &std::path::Path,
    tls: &crate::tls_listener::TlsOptions,
) -> anyhow::Result<rustls::ServerConfig> {
    let crt = dir.join("tls.crt");
    let key = dir.join("tls.key");
    let certs = CertificateDer::pem_file_iter(&crt)
        .with_context(|| format!("reading {}", crt.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", crt.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{} holds no certificate", crt.display());
    let key = PrivateKeyDer::from_pem_file(&key).with_context(|| format!("reading {}", key.display()))?;
    let mut cfg = tls
        .server_config()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the certificate and key do not match")?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Serve the hooks on `addr` over TLS with the certificate in `cert_dir` until `shutdown`; returns the bound
/// address. The certificate must be readable at start (a typo in the flag fails the manager, not CAPI later).
pub(crate) async fn serve(
    addr: SocketAddr,
    cert_dir: PathBuf,
    tls: crate::tls_listener::TlsOptions,
    ctx: Option<Arc<Context>>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<SocketAddr> {
    tls_config(&cert_dir, &tls).context("runtime extension certificate (--runtime-extension-cert-dir)")?;
    let tcp = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the runtime extension on {addr}"))?;
    let bound = tcp.local_addr()?;
    info!(addr = %bound, cert_dir = %cert_dir.display(), "runtime extension (in-place update hooks) listening");
    crate::tls_listener::serve(
        tcp,
        Box::new(move || tls_config(&cert_dir, &tls).map(Arc::new)),
        router(ctx),
        crate::tls_listener::Limits::default(),
        shutdown,
        "runtime extension",
    );
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A CA and a serving certificate for 127.0.0.1 signed by it (openssl, as cert-manager would issue
    /// them); returns the CA's PEM.
    fn issue(dir: &std::path::Path) -> Vec<u8> {
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("openssl runs (hack/deps.list)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=test-ca",
        ]);
        run(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            "/CN=capkk-runtime-extension",
        ]);
        std::fs::write(
            dir.join("ext"),
            "subjectAltName=IP:127.0.0.1,DNS:capkk-runtime-extension.capkk-system.svc\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "tls.crt",
            "-days",
            "1",
            "-extfile",
            "ext",
        ]);
        std::fs::read(dir.join("ca.crt")).unwrap()
    }

    /// POST `body` to `path` over TLS, trusting only `ca`; returns the JSON body of the answer.
    async fn post(addr: SocketAddr, ca: &[u8], path: &str, body: &Value) -> Value {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca) {
            roots.add(c.unwrap()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::from(addr.ip());
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .expect("the server's certificate verifies against the CA");
        let body = body.to_string();
        // As CAPI's runtime client sends it: no Content-Type header.
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        let text = String::from_utf8_lossy(&out);
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
    }

    #[tokio::test]
    async fn the_hooks_answer_requests_without_a_content_type_as_capi_sends_them_over_tls_and_discovery_lists_them()
     {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = std::env::temp_dir().join(format!("capkk-rtext-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca = issue(&dir);
        let (_tx, rx) = watch::channel(false);
        let addr = serve(
            "127.0.0.1:0".parse().unwrap(),
            dir.clone(),
            Default::default(),
            None,
            rx,
        )
        .await
        .unwrap();

        let d = post(
            addr,
            &ca,
            &format!("{PREFIX}/discovery"),
            &json!({"apiVersion": decide::HOOKS_API_VERSION, "kind": "DiscoveryRequest"}),
        )
        .await;
        assert_eq!(d["kind"], "DiscoveryResponse");
        let hooks: Vec<(&str, &str)> = d["handlers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["name"].as_str().unwrap(),
                    h["requestHook"]["hook"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            hooks,
            [
                ("can-update-machine", "CanUpdateMachine"),
                ("can-update-machine-set", "CanUpdateMachineSet"),
                ("update-machine", "UpdateMachine"),
            ]
        );
        // CAPI calls <prefix>/<hook in lower case>/<handler name>.
        let spec = |v: &str| json!({"clusterName": "c", "version": v});
        let ms = |v: &str| json!({"metadata": {"name": "ms"}, "spec": {"template": {"spec": spec(v)}}});
        let req = json!({
            "current": {"machineSet": ms("v1.35.2"), "infrastructureMachineTemplate": {}, "bootstrapConfigTemplate": {}},
            "desired": {"machineSet": ms("v1.36.3"), "infrastructureMachineTemplate": {}, "bootstrapConfigTemplate": {}},
        });
        let a = post(
            addr,
            &ca,
            &format!("{PREFIX}/canupdatemachineset/can-update-machine-set"),
            &req,
        )
        .await;
        assert_eq!(a["status"], "Success");
        assert_eq!(a["machineSetPatch"]["patchType"], "JSONPatch");
        // A certificate the client does not trust is refused.
        let other = tempfile_dir("other");
        let wrong_ca = issue(&other);
        let cfg = {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&wrong_ca) {
                roots.add(c.unwrap()).unwrap();
            }
            rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth()
        };
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let refused = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(rustls::pki_types::ServerName::from(addr.ip()), tcp)
            .await;
        assert!(refused.is_err(), "a client trusting another CA connected");
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&other);
    }

    fn tempfile_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("capkk-rtext-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_cert_dir_without_a_certificate_fails_naming_the_file() {
        let d = tempfile_dir("empty");
        let e = format!("{:#}", tls_config(&d, &Default::default()).unwrap_err());
        assert!(e.contains("tls.crt"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
