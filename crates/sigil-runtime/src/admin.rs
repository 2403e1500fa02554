//! The admin endpoints every long-running sigil binary serves on its plain
//! HTTP port: `/healthz` (the process answers), `/readyz` (the program says
//! whether it is ready, and why not) and `/metrics` (its OpenMetrics text).
//! One router, so the three programs answer probes and scrapes alike; what
//! "ready" means and which metrics there are stays each program's own,
//! behind [`Admin`]. [`AdminListener`] binds the port and serves the
//! router until the program's [`Shutdown`], the same way in every binary.

use std::fmt;
use std::future::IntoFuture as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::{TcpListener, ToSocketAddrs};

use crate::shutdown::{Shutdown, within};

/// The content type of the `/metrics` answer.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a program tells its admin endpoints.
pub trait Admin: Send + Sync + 'static {
    /// `Ok(text)` when the program is ready (`/readyz` answers 200 with the
    /// text), `Err(reason)` when not (503 with the reason).
    fn readiness(&self) -> Result<&'static str, &'static str>;

    /// The OpenMetrics exposition `/metrics` serves, ending in `# EOF`.
    fn metrics(&self) -> String;
}

/// The router of `/healthz`, `/readyz` and `/metrics` over `admin` (also
/// what tests call through `oneshot`).
pub fn router<A: Admin>(admin: Arc<A>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<A>))
        .route("/metrics", get(metrics::<A>))
        .with_state(admin)
}

/// `/healthz`: the process runs and answers.
pub async fn healthz() -> &'static str {
    "ok"
}

/// `/readyz` of `admin`: 200 when ready, 503 with the reason otherwise.
pub async fn readyz<A: Admin>(State(admin): State<Arc<A>>) -> (StatusCode, &'static str) {
    readiness_answer(admin.readiness())
}

/// The `/readyz` answer for a readiness (for a router of the program's
/// own that also serves `/readyz`).
pub fn readiness_answer(
    readiness: Result<&'static str, &'static str>,
) -> (StatusCode, &'static str) {
    match readiness {
        Ok(text) => (StatusCode::OK, text),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

async fn metrics<A: Admin>(State(admin): State<Arc<A>>) -> Response {
    ([(header::CONTENT_TYPE, OPENMETRICS)], admin.metrics()).into_response()
}

/// The admin port could not be bound.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot listen on {addr} (--{flag}): {source}; is another process using the port? \
     free it or give --{flag} another address"
)]
pub struct BindError {
    /// The address as given.
    pub addr: String,
    /// The flag that gave it, without its dashes.
    pub flag: &'static str,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

/// How long the admin server waits, once the shutdown began, for the
/// answers in flight (a probe or a scrape takes milliseconds; a client that
/// holds its request open does not hold up the process).
pub const DRAIN: Duration = Duration::from_secs(5);

/// The admin port, bound: a program binds it while starting, so a taken
/// port stops the start with a message naming the flag to change.
#[derive(Debug)]
pub struct AdminListener {
    listener: TcpListener,
    addr: SocketAddr,
    drain: Duration,
}

impl AdminListener {
    /// Binds `addr`, the value of the program's `--{flag}`.
    pub async fn bind<A: ToSocketAddrs + fmt::Display>(
        addr: A,
        flag: &'static str,
    ) -> Result<Self, BindError> {
        let fail = |source| BindError {
            addr: addr.to_string(),
            flag,
            source,
        };
        let listener = TcpListener::bind(&addr).await.map_err(fail)?;
        let bound = listener.local_addr().map_err(fail)?;
        Ok(Self {
            listener,
            addr: bound,
            drain: DRAIN,
        })
    }

    /// The address actually bound (the port chosen for `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Another bound than [`DRAIN`] for the answers in flight at shutdown.
    #[must_use]
    pub fn with_drain(mut self, bound: Duration) -> Self {
        self.drain = bound;
        self
    }

    /// Serves `router` (HTTP/1.1) until `shutdown` is requested, then stops
    /// accepting, closes idle connections and lets the answers in flight
    /// finish within the drain bound.
    pub async fn serve(self, router: Router, shutdown: Shutdown) -> std::io::Result<()> {
        let server = axum::serve(self.listener, router)
            .with_graceful_shutdown(shutdown.wait())
            .into_future();
        tokio::pin!(server);
        tokio::select! {
            served = &mut server => return served,
            () = shutdown.requested() => {}
        }
        within(self.drain, "an admin endpoint's answer", server)
            .await
            .unwrap_or(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicBool, Ordering};

    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt as _;

    use super::*;

    struct Program {
        ready: AtomicBool,
    }

    impl Admin for Program {
        fn readiness(&self) -> Result<&'static str, &'static str> {
            if self.ready.load(Ordering::Relaxed) {
                Ok("ready")
            } else {
                Err("not loaded yet")
            }
        }

        fn metrics(&self) -> String {
            "up 1\n# EOF\n".to_owned()
        }
    }

    async fn get(app: Router, path: &str) -> (StatusCode, Option<String>, String) {
        let response = app
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let kind = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, kind, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn healthz_answers_readyz_says_why_not_and_metrics_are_openmetrics() {
        let program = Arc::new(Program {
            ready: AtomicBool::new(false),
        });
        let app = router(program.clone());
        assert_eq!(get(app.clone(), "/healthz").await.2, "ok");
        let (status, _, text) = get(app.clone(), "/readyz").await;
        assert_eq!(
            (status, text.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "not loaded yet")
        );
        program.ready.store(true, Ordering::Relaxed);
        let (status, _, text) = get(app.clone(), "/readyz").await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "ready"));
        let (status, kind, text) = get(app, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(kind.as_deref(), Some(OPENMETRICS));
        assert_eq!(text, "up 1\n# EOF\n");
    }

    #[tokio::test]
    async fn a_taken_port_is_refused_naming_the_address_and_the_flag() {
        let taken = AdminListener::bind("127.0.0.1:0", "metrics-listen")
            .await
            .unwrap();
        let addr = taken.local_addr();
        let err = AdminListener::bind(addr, "metrics-listen")
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("cannot listen on {addr} (--metrics-listen): ")),
            "{text}"
        );
        assert!(
            text.ends_with("give --metrics-listen another address"),
            "{text}"
        );
    }

    async fn http_get(addr: SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        tcp.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn the_admin_port_answers_over_tcp_until_the_shutdown() {
        let program = Arc::new(Program {
            ready: AtomicBool::new(true),
        });
        let port = AdminListener::bind("127.0.0.1:0", "listen").await.unwrap();
        let addr = port.local_addr();
        let (trigger, shutdown) = crate::shutdown::channel();
        let serving = tokio::spawn(port.serve(router(program), shutdown));
        let answer = http_get(addr, "/healthz").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
        let answer = http_get(addr, "/readyz").await;
        assert!(answer.ends_with("ready"), "{answer}");

        trigger.trigger();
        tokio::time::timeout(std::time::Duration::from_secs(5), serving)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn an_answer_still_in_flight_at_shutdown_is_given_the_drain_bound_and_no_more() {
        use tokio::io::AsyncWriteExt as _;
        let slow = Router::new().route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                "late"
            }),
        );
        let port = AdminListener::bind("127.0.0.1:0", "listen")
            .await
            .unwrap()
            .with_drain(Duration::from_millis(300));
        let addr = port.local_addr();
        let (trigger, shutdown) = crate::shutdown::channel();
        let serving = tokio::spawn(port.serve(slow, shutdown));
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        // The request reaches its handler before the shutdown begins.
        tokio::time::sleep(Duration::from_millis(100)).await;

        let started = std::time::Instant::now();
        trigger.trigger();
        tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300),
            "stopped before the bound: {took:?}"
        );
        assert!(
            took < Duration::from_secs(3),
            "waited past the bound: {took:?}"
        );
    }
}
