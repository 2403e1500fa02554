//! The HTTP endpoints: `/healthz` (the process runs), `/readyz` (the API
//! server answered the first election round) and `/metrics`, served by
//! sigil-runtime's admin router like the webhook's and the audit's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use sigil_runtime::admin::{self, Admin, AdminListener};
use sigil_runtime::shutdown::Shutdown;

use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// What the controller's admin endpoints read.
struct Endpoints {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

impl Admin for Endpoints {
    fn readiness(&self) -> std::result::Result<&'static str, &'static str> {
        if self.ready.load(Ordering::Relaxed) {
            Ok("ok")
        } else {
            Err("the API server has not answered yet")
        }
    }

    fn metrics(&self) -> String {
        self.metrics
            .encode(time::OffsetDateTime::now_utc().unix_timestamp())
    }
}

/// The router (also used by tests through `oneshot`): sigil-runtime's admin
/// endpoints over the controller's metrics and readiness.
pub fn router(metrics: Arc<Metrics>, ready: Arc<AtomicBool>) -> Router {
    admin::router(Arc::new(Endpoints { metrics, ready }))
}

/// Serves the endpoints on the bound `admin` port until `shutdown`.
pub async fn serve(
    admin: AdminListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    shutdown: Shutdown,
) -> Result<()> {
    let addr = admin.local_addr();
    admin
        .serve(router(metrics, ready), shutdown)
        .await
        .map_err(|e| Error::Serve {
            addr: addr.to_string(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt as _;

    use super::*;

    async fn get(router: Router, path: &str) -> (StatusCode, String) {
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn healthz_is_ok_and_readyz_waits_for_the_api_server() {
        let metrics = Arc::new(Metrics::default());
        let ready = Arc::new(AtomicBool::new(false));
        let app = router(metrics, ready.clone());
        assert_eq!(get(app.clone(), "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(app.clone(), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        ready.store(true, Ordering::Relaxed);
        assert_eq!(get(app, "/readyz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_show_reconciliations_errors_policy_states_and_trust_root_age() {
        let metrics = Arc::new(Metrics::default());
        metrics.reconciled("policy");
        metrics.failed("policy", "kube");
        metrics.policy_state("a", Some(true));
        metrics.policy_state("b", Some(false));
        metrics.trust_root_refreshed("own", 1);
        let (status, text) = get(router(metrics, Arc::default()), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        for line in [
            "sigil_controller_reconciliations_total{controller=\"policy\"} 1",
            "sigil_controller_reconcile_errors_total{controller=\"policy\",reason=\"kube\"} 1",
            "sigil_controller_policies{state=\"ready\"} 1",
            "sigil_controller_policies{state=\"not_ready\"} 1",
            "sigil_controller_trust_root_last_refresh_timestamp_seconds{trust_root=\"own\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        assert!(text.contains("sigil_controller_trust_root_age_seconds{trust_root=\"own\"}"));
    }
}
