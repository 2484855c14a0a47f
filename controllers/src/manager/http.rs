//! The manager's HTTP endpoints: `/metrics`, `/healthz` and `/readyz`.

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

use crate::{context::Stores, metrics::Metrics};

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

/// Serve `/metrics` on `metrics`, and `/healthz` and `/readyz` on `health` (`None`: not served), until
/// `shutdown`.
pub(super) async fn serve_endpoints(
    state: &Http,
    metrics: Option<SocketAddr>,
    health: Option<SocketAddr>,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<()> {
    if let Some(addr) = metrics {
        let r = Router::new()
            .route("/metrics", get(metrics_handler))
            .with_state(state.clone());
        serve(addr, r, shutdown.clone(), "metrics").await?;
    }
    if let Some(addr) = health {
        let r = Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(state.clone());
        serve(addr, r, shutdown.clone(), "health").await?;
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

async fn serve(
    addr: SocketAddr,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
    what: &'static str,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {what} on {addr}"))?;
    info!(%addr, "{what} endpoint listening");
    tokio::spawn(async move {
        let res = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|v| *v).await;
            })
            .await;
        if let Err(e) = res {
            error!(error = %e, "{what} server failed");
        }
    });
    Ok(())
}
