//! The manager's HTTP endpoints: `/metrics` (plain, or behind the diagnostics endpoint's TLS and
//! authentication, [`super::diagnostics`]), `/healthz` and `/readyz` (plain: the kubelet probes them).
//! Plain `/metrics` leaves out the host pool series, which name tenants' namespaces and KKClusters
//! ([`Exposure`]).

use std::{
    net::SocketAddr,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
};

use anyhow::Context as _;
use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio::sync::watch;
use tracing::{error, info};

use super::{args::MetricsEndpoint, diagnostics};
use crate::{
    context::Stores,
    metrics::{Exposure, Metrics},
};

/// What the endpoints read.
#[derive(Clone)]
pub(super) struct Http {
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Set once the management cluster's API server answers.
    pub ready: Arc<AtomicBool>,
    /// The controllers' caches, once they exist (the host pool gauges are computed from them per scrape).
    pub stores: Arc<OnceLock<Stores>>,
}

/// Serve `/metrics` as `metrics` says (`client` reviews the requests of a secure endpoint), and `/healthz`
/// and `/readyz` on `health` (`None`: not served), until `shutdown`.
pub(super) async fn serve_endpoints(
    state: &Http,
    client: &kube::Client,
    metrics: MetricsEndpoint,
    tls: &crate::tls_listener::TlsOptions,
    health: Option<SocketAddr>,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let metrics_router = |exposure: Exposure| {
        Router::new()
            .route(
                "/metrics",
                get(move |s: State<Http>| metrics_handler(s, exposure)),
            )
            .with_state(state.clone())
    };
    match metrics {
        MetricsEndpoint::Off => info!("/metrics is not served"),
        MetricsEndpoint::Plain(addr) => {
            info!(
                "plain /metrics leaves out the host pool series (capkk_hosts): they name tenants' namespaces"
            );
            let r = metrics_router(Exposure::Anonymous);
            serve(addr, r, None, shutdown.clone(), "metrics").await?;
        }
        MetricsEndpoint::Secure(addr) => {
            // Only routed paths are reviewed: any other path is a 404 without an API request.
            let r =
                metrics_router(Exposure::Authenticated).route_layer(axum::middleware::from_fn_with_state(
                    diagnostics::Reviewer::new(client.clone()),
                    diagnostics::authorize,
                ));
            let tls = diagnostics::self_signed_config(addr, tls)?;
            serve(addr, r, Some(tls), shutdown.clone(), "diagnostics").await?;
        }
    }
    if let Some(addr) = health {
        let r = Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(state.clone());
        serve(addr, r, None, shutdown.clone(), "health").await?;
    }
    Ok(())
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(h): State<Http>) -> impl IntoResponse {
    if h.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// `/metrics` for a reader of `exposure`; the pool series are computed only for a reader who gets them.
async fn metrics_handler(State(h): State<Http>, exposure: Exposure) -> impl IntoResponse {
    if exposure == Exposure::Authenticated
        && let Some(stores) = h.stores.get()
    {
        crate::kkcluster::pool::record_pools(&h.metrics, stores);
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.encode(exposure),
    )
}

/// Serve `router` on `addr`, over TLS when `tls` is given, in a task of its own until `shutdown`.
async fn serve(
    addr: SocketAddr,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    mut shutdown: watch::Receiver<bool>,
    what: &'static str,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {what} on {addr}"))?;
    // The bound address, not the asked one: with port 0 it says which port was chosen.
    let bound = listener.local_addr()?;
    info!(addr = %bound, tls = tls.is_some(), "{what} endpoint listening");
    match tls {
        Some(cfg) => crate::tls_listener::serve(
            listener,
            Box::new(move || Ok(cfg.clone())),
            router,
            crate::tls_listener::Limits::default(),
            shutdown,
            what,
        ),
        None => {
            tokio::spawn(async move {
                let stopped = async move {
                    let _ = shutdown.wait_for(|v| *v).await;
                };
                if let Err(e) = axum::serve(listener, router)
                    .with_graceful_shutdown(stopped)
                    .await
                {
                    error!(error = %e, "{what} server failed");
                }
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tls_listener::testing::{free_addr, request, tls_connect};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_sends_nothing_or_no_headers_does_not_stop_the_diagnostics_endpoint_answering_another()
     {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let state = Http {
            metrics: Arc::new(Metrics::new()),
            ready: Arc::default(),
            stores: Arc::default(),
        };
        // A request without a token is refused without a review: the API server is never asked.
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let addr = free_addr();
        let (_tx, rx) = watch::channel(false);
        serve_endpoints(
            &state,
            &client,
            MetricsEndpoint::Secure(addr),
            &Default::default(),
            None,
            &rx,
        )
        .await
        .unwrap();
        // The manager's diagnostics endpoint with its default limits (10 s for a handshake and for headers).
        // One client connects and sends nothing: another is answered meanwhile, not after the handshake limit.
        let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let status = request(addr, "GET", "/metrics", "", Duration::from_secs(5)).await;
        assert!(
            status.as_deref().is_ok_and(|s| s.starts_with("HTTP/1.1 401")),
            "another client's request while one sends nothing: {status:?}"
        );
        // One client completes its handshake and sends no headers: nor is a new handshake held up meanwhile.
        let _no_headers = tokio::time::timeout(Duration::from_secs(5), tls_connect(addr))
            .await
            .expect("a handshake while another client sends nothing")
            .unwrap();
        for _ in 0..3 {
            let status = request(addr, "GET", "/metrics", "", Duration::from_secs(5)).await;
            assert!(
                status.as_deref().is_ok_and(|s| s.starts_with("HTTP/1.1 401")),
                "another client's request while two stall: {status:?}"
            );
        }
    }
}
