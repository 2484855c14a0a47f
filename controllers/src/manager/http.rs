//! The manager's HTTP endpoints: `/metrics` (plain, or behind the diagnostics endpoint's TLS and
//! authentication, [`super::diagnostics`]), `/healthz` and `/readyz` (plain: the kubelet probes them).

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
use crate::{context::Stores, metrics::Metrics, tls_listener::TlsListener};

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
    let metrics_router = || {
        Router::new()
            .route("/metrics", get(metrics_handler))
            .with_state(state.clone())
    };
    match metrics {
        MetricsEndpoint::Off => info!("/metrics is not served"),
        MetricsEndpoint::Plain(addr) => {
            serve(addr, metrics_router(), None, shutdown.clone(), "metrics").await?;
        }
        MetricsEndpoint::Secure(addr) => {
            // Only routed paths are reviewed: any other path is a 404 without an API request.
            let r = metrics_router().route_layer(axum::middleware::from_fn_with_state(
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

async fn metrics_handler(State(h): State<Http>) -> impl IntoResponse {
    if let Some(stores) = h.stores.get() {
        crate::kkcluster::pool::record_pools(&h.metrics, stores);
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.encode(),
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
    let stopped = async move {
        let _ = shutdown.wait_for(|v| *v).await;
    };
    tokio::spawn(async move {
        let res = match tls {
            Some(cfg) => {
                let tls = TlsListener::new(listener, Box::new(move || Ok(cfg.clone())), what);
                axum::serve(tls, router).with_graceful_shutdown(stopped).await
            }
            None => {
                axum::serve(listener, router)
                    .with_graceful_shutdown(stopped)
                    .await
            }
        };
        if let Err(e) = res {
            error!(error = %e, "{what} server failed");
        }
    });
    Ok(())
}
