//! HTTP: the axum routers (admission on HTTPS, metrics and health on a plain
//! port), bounded request-body reading, the rustls accept loop with
//! handshake timeouts and a connection bound, and graceful shutdown that
//! answers in-flight reviews, closes keep-alive connections only where the
//! client cannot race the close, and gives up after a bound.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::BodyExt as _;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::gauge::Gauge;
use rustls::ServerConfig;
use sigil_runtime::admin::{self, Admin};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::admit::{Admission, Endpoint};
use crate::judge::{ImageJudge, PullSecretSource};
use crate::metrics::RequestLabels;
use crate::review::{self, Answer, Invalid};

/// Bounds of the HTTPS server.
#[derive(Debug, Clone)]
pub struct ServeLimits {
    /// Connections served at once; further ones wait in the accept queue.
    pub max_connections: usize,
    /// Time allowed for a TLS handshake.
    pub handshake_timeout: Duration,
    /// Time allowed to read request headers.
    pub header_timeout: Duration,
    /// Time allowed for in-flight reviews after shutdown begins.
    pub drain: Duration,
    /// The first part of `drain` in which HTTP/1.1 keep-alive connections
    /// are closed only by the server's answer (`Connection: close`), not
    /// while idle; the server keeps accepting meanwhile.
    pub keep_alive_grace: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            drain: Duration::from_secs(20),
            keep_alive_grace: Duration::from_secs(2),
        }
    }
}

/// Shared state of the routers.
pub struct AppState<J, S> {
    /// The admission logic.
    pub admission: Admission<J, S>,
    /// Set when shutdown begins: `/readyz` then fails so endpoints drop us.
    pub shutting_down: AtomicBool,
}

impl<J, S> AppState<J, S> {
    /// Wraps the admission logic.
    pub fn new(admission: Admission<J, S>) -> Arc<Self> {
        Arc::new(Self {
            admission,
            shutting_down: AtomicBool::new(false),
        })
    }
}

/// The HTTPS router: `/validate`, `/mutate`, `/healthz`, `/readyz` (the
/// probes answer as on the plain port, through sigil-runtime's handlers).
pub fn router<J: ImageJudge, S: PullSecretSource>(state: Arc<AppState<J, S>>) -> Router {
    Router::new()
        .route("/validate", post(validate::<J, S>))
        .route("/mutate", post(mutate::<J, S>))
        .route("/healthz", get(admin::healthz))
        .route("/readyz", get(admin::readyz::<AppState<J, S>>))
        .with_state(state)
}

/// The plain-HTTP router: `/metrics`, `/healthz`, `/readyz`, sigil-runtime's
/// admin router over the admission state.
pub fn metrics_router<J: ImageJudge, S: PullSecretSource>(state: Arc<AppState<J, S>>) -> Router {
    admin::router(state)
}

impl<J: ImageJudge, S: PullSecretSource> Admin for AppState<J, S> {
    fn readiness(&self) -> Result<&'static str, &'static str> {
        if self.shutting_down.load(Ordering::Relaxed) {
            Err("shutting down")
        } else if self.admission.ready() {
            Ok("ready")
        } else {
            Err("policies or trust roots not loaded yet")
        }
    }

    fn metrics(&self) -> String {
        let m = self.admission.metrics();
        let judge = self.admission.cache().judge();
        m.snapshot_age
            .set(judge.snapshot_age().map_or(-1.0, |d| d.as_secs_f64()));
        let revision = judge.snapshot_revision();
        m.snapshot_revision
            .set(revision.and_then(|r| i64::try_from(r).ok()).unwrap_or(-1));
        m.encode()
    }
}

async fn validate<J: ImageJudge, S: PullSecretSource>(
    State(app): State<Arc<AppState<J, S>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    admit(&app, Endpoint::Validate, &headers, body).await
}

async fn mutate<J: ImageJudge, S: PullSecretSource>(
    State(app): State<Arc<AppState<J, S>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    admit(&app, Endpoint::Mutate, &headers, body).await
}

/// Decrements the in-flight gauge however the handler ends.
struct InFlight(Gauge);

impl InFlight {
    fn enter(g: &Gauge) -> Self {
        g.inc();
        Self(g.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Why a body was not read.
enum BodyError {
    TooLarge(Vec<u8>),
    Read(String),
}

/// Reads at most `limit` bytes by `deadline`; on overflow returns what was read.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    deadline: Instant,
) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge(Vec::new()));
    }
    let read = async {
        let mut body = body;
        let mut buf: Vec<u8> = Vec::with_capacity(declared.map_or(16 * 1024, |n| n as usize));
        // Bounded: every iteration consumes a frame, the total is capped at
        // `limit`, and the whole read at the deadline.
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                if buf.len().saturating_add(data.len()) > limit {
                    return Err(BodyError::TooLarge(buf));
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(buf))
    };
    tokio::time::timeout_at(deadline, read)
        .await
        .unwrap_or_else(|_| {
            Err(BodyError::Read(
                "the body did not arrive before the deadline".into(),
            ))
        })
}

fn json_response(review: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(review) {
        Ok(bytes) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response(),
        // Serializing these plain structures cannot fail in practice; still
        // answer with an AdmissionReview the API server can read.
        Err(e) => {
            let fallback = serde_json::json!({
                "apiVersion": review::API_VERSION, "kind": review::KIND,
                "response": {"uid": "", "allowed": false, "status": {"message": format!("sigil could not write its answer: {e}")}}
            });
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                fallback.to_string(),
            )
                .into_response()
        }
    }
}

async fn admit<J: ImageJudge, S: PullSecretSource>(
    app: &AppState<J, S>,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let start = Instant::now();
    let admission = &app.admission;
    let _in_flight = InFlight::enter(&admission.metrics().in_flight);
    let config = admission.config();
    let deadline = config.deadline(start);
    match read_body(headers, body, config.max_body_bytes, deadline).await {
        Ok(bytes) => json_response(&admission.review(endpoint, &bytes, start).await),
        Err(e) => {
            let invalid = match e {
                BodyError::TooLarge(prefix) => Invalid {
                    uid: review::find_uid(&prefix),
                    message: format!(
                        "the AdmissionReview is larger than sigil's limit of {} bytes; raise --max-body-bytes if objects this large are expected",
                        config.max_body_bytes
                    ),
                },
                BodyError::Read(why) => Invalid {
                    uid: String::new(),
                    message: format!("sigil could not read the request body: {why}"),
                },
            };
            tracing::warn!(endpoint = endpoint.label(), uid = %invalid.uid, error = %invalid, "admission review refused");
            admission
                .metrics()
                .requests
                .get_or_create(&RequestLabels {
                    endpoint: endpoint.label(),
                    operation: "unknown",
                    kind: "other",
                    decision: "invalid",
                })
                .inc();
            json_response(&Answer::invalid(&invalid))
        }
    }
}

/// Marks HTTP/1.x answers `Connection: close` once shutdown has begun, so
/// that the client stops reusing the connection. An HTTP/1.1 client (an API
/// server with HTTP/2 turned off, or a proxy in front of the webhook) does
/// not retry a POST that met a keep-alive connection the server closed while
/// idle ("EOF"); HTTP/2 clients get a GOAWAY instead, after which they retry
/// on a new connection what the server did not take.
async fn close_when_draining(
    State(closing): State<Arc<AtomicBool>>,
    request: Request,
    next: Next,
) -> Response {
    let http1 = request.version() < Version::HTTP_2;
    let mut response = next.run(request).await;
    if http1 && closing.load(Ordering::Relaxed) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Serves `router` over TLS on `listener` until `shutdown` completes, then
/// drains for at most `limits.drain`: for the first `limits.keep_alive_grace`
/// of it (or until no connection is left) it still serves and accepts, each
/// HTTP/1.1 answer closing its connection; then it stops accepting, closes
/// idle connections (HTTP/2: GOAWAY) and waits for the reviews in flight.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    router: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let max_connections = limits.max_connections.max(1);
    let connections = Arc::new(Semaphore::new(max_connections));
    let closing = Arc::new(AtomicBool::new(false));
    let router = router.layer(middleware::from_fn_with_state(
        closing.clone(),
        close_when_draining,
    ));
    let grace = limits.keep_alive_grace.min(limits.drain);
    // Set when shutdown begins: the end of the keep-alive grace.
    let mut grace_end: Option<Instant> = None;
    let mut check = tokio::time::interval(Duration::from_millis(50));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    let begin_grace = |end: &mut Option<Instant>| {
        closing.store(true, Ordering::Relaxed);
        *end = Some(Instant::now() + grace);
    };
    loop {
        let grace_over = tokio::time::sleep_until(grace_end.unwrap_or_else(Instant::now));
        let permit = tokio::select! {
            () = &mut shutdown, if grace_end.is_none() => {
                begin_grace(&mut grace_end);
                continue;
            }
            () = grace_over, if grace_end.is_some() => break,
            p = connections.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let grace_over = tokio::time::sleep_until(grace_end.unwrap_or_else(Instant::now));
        let (stream, peer) = tokio::select! {
            () = &mut shutdown, if grace_end.is_none() => {
                begin_grace(&mut grace_end);
                continue;
            }
            () = grace_over, if grace_end.is_some() => break,
            // The grace ends early once no connection is left (this loop
            // holds one permit itself).
            _ = check.tick(), if grace_end.is_some() => {
                if connections.available_permits() + 1 >= max_connections {
                    break;
                }
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off briefly.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let handshake_timeout = limits.handshake_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let conn = builder
                .serve_connection(TokioIo::new(tls), service)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let left = limits
        .drain
        .saturating_sub(grace_end.map_or(Duration::ZERO, |end| {
            grace.saturating_sub(end.saturating_duration_since(Instant::now()))
        }));
    if tokio::time::timeout(left, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            drain_seconds = limits.drain.as_secs(),
            "connections still open after the drain period; closing them"
        );
    }
}
