//! The HTTP endpoints: `/healthz` (the process runs), `/readyz` (the API
//! server answered the first election round) and `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::error::{Error, Result};
use crate::metrics::Metrics;

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

/// The router (also used by tests through `oneshot`).
pub fn router(metrics: Arc<Metrics>, ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { metrics, ready })
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the API server has not answered yet",
        )
    }
}

async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(now),
    )
}

/// Serves the endpoints on `addr` until `shutdown` resolves.
pub async fn serve(
    addr: &str,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let fail = |reason: String| Error::Serve {
        addr: addr.to_owned(),
        reason,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| fail(format!("{e}; pick another --listen address")))?;
    axum::serve(listener, router(metrics, ready))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| fail(e.to_string()))
}
