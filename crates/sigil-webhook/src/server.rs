//! HTTP: the axum routers (admission on HTTPS, metrics and health on a plain
//! port), bounded request-body reading, the rustls accept loop with
//! handshake timeouts and a connection bound, keep-alive connections ended
//! after a bounded number of answers or age (with jitter, so that load
//! spreads over replicas), and graceful shutdown that answers in-flight
//! reviews, closes keep-alive connections only where the client cannot race
//! the close, and gives up after a bound.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::metrics::gauge::Gauge;
use rustls::ServerConfig;
use sigil_runtime::admin::{self, Admin};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use crate::admit::{Admission, Endpoint};
use crate::judge::{ImageJudge, PullSecretSource};
use crate::metrics::{ConnectionLabels, Metrics, RequestLabels};
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
    /// When connections are ended while serving, so that load spreads over
    /// replicas.
    pub recycle: Recycle,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            drain: Duration::from_secs(20),
            keep_alive_grace: Duration::from_secs(2),
            recycle: Recycle::default(),
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

    fn registry_keychain(&self) -> Option<Arc<sigil_registry::Keychain>> {
        self.admission.cache().judge().registry_keychain()
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
pub(crate) enum BodyError {
    TooLarge(Vec<u8>),
    Read(String),
}

/// Reads at most `limit` bytes by `deadline`; on overflow returns what was read.
pub(crate) async fn read_body(
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

/// Why the server ended a connection: the `reason` label of
/// `sigil_webhook_connections_closed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// It answered its share of requests ([`Recycle::max_requests`]).
    Requests,
    /// It reached its age ([`Recycle::max_age`]).
    Age,
    /// The server is shutting down.
    Shutdown,
}

impl CloseReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::Age => "age",
            Self::Shutdown => "shutdown",
        }
    }
}

/// When a keep-alive connection is ended, so that the API server opens a new
/// one, which the Service may send to another replica: the API server keeps
/// reusing an idle connection, so without an end one replica can get every
/// review. An HTTP/1.1 connection is ended only by an answer that says
/// `Connection: close` (never while idle, which an HTTP/1.1 client could
/// race with its next POST); an HTTP/2 one by a GOAWAY, after which the
/// streams in flight still finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recycle {
    /// Answers after which a connection is ended; 0: no bound.
    pub max_requests: u64,
    /// Age after which a connection's next answer ends it; `None`: no bound.
    pub max_age: Option<Duration>,
    /// Both bounds are drawn per connection within this many percent either
    /// side (at most 50), so that the connections of a replica, and of
    /// replicas started together, do not all end at once.
    pub jitter_percent: u8,
}

impl Recycle {
    /// No bound: connections live until the client or a shutdown ends them.
    pub const OFF: Self = Self {
        max_requests: 0,
        max_age: None,
        jitter_percent: 0,
    };
}

impl Default for Recycle {
    /// 100 answers or 30 s, ±20% (docs/installation.md, "Load over
    /// replicas", says why).
    fn default() -> Self {
        Self {
            max_requests: 100,
            max_age: Some(Duration::from_secs(30)),
            jitter_percent: 20,
        }
    }
}

/// The bounds of one connection, drawn from [`Recycle`] when it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionBudget {
    /// Answers after which it ends; 0: no bound.
    pub requests: u64,
    /// Age after which its next answer ends it.
    pub age: Option<Duration>,
}

impl ConnectionBudget {
    /// Draws the bounds of a connection: `random` is uniform over `u64`;
    /// each bound is scaled by a factor in `1 ± jitter_percent/100`.
    pub fn draw(recycle: &Recycle, random: u64) -> Self {
        // 53 random bits make a float in [0, 1) exactly.
        let unit = (random >> 11) as f64 / (1u64 << 53) as f64;
        let jitter = f64::from(recycle.jitter_percent.min(50)) / 100.0;
        let factor = 1.0 + jitter * (2.0 * unit - 1.0);
        let requests = if recycle.max_requests == 0 {
            0
        } else {
            // Within u64 by construction: factor <= 1.5.
            ((recycle.max_requests as f64 * factor).round() as u64).max(1)
        };
        Self {
            requests,
            age: recycle.max_age.map(|age| age.mul_f64(factor)),
        }
    }

    /// Whether the answer to the `served`th request (counting from 1) of a
    /// connection that is `age` old ends it, and why.
    pub fn ends_after(&self, served: u64, age: Duration) -> Option<CloseReason> {
        if self.requests != 0 && served >= self.requests {
            Some(CloseReason::Requests)
        } else if self.age.is_some_and(|limit| age >= limit) {
            Some(CloseReason::Age)
        } else {
            None
        }
    }
}

/// A uniform `u64` for the jitter: the standard library's randomly keyed
/// SipHash over a sequence number; the jitter only has to differ between
/// connections and processes, not resist prediction.
fn jitter_seed(sequence: u64) -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u64(sequence);
    h.finish()
}

/// What one connection's service and its task share.
struct ConnectionState {
    budget: ConnectionBudget,
    opened: Instant,
    served: AtomicU64,
    /// Why the server ended the connection, once it decided to.
    ending: OnceLock<CloseReason>,
    /// Tells the task to send an HTTP/2 GOAWAY.
    goaway: Notify,
}

impl ConnectionState {
    fn new(budget: ConnectionBudget, opened: Instant) -> Self {
        Self {
            budget,
            opened,
            served: AtomicU64::new(0),
            ending: OnceLock::new(),
            goaway: Notify::new(),
        }
    }

    /// Counts an answer and says whether it ends the connection. For
    /// HTTP/1.x the answer then carries `Connection: close`; for HTTP/2 the
    /// task is told to send a GOAWAY (and shutdown's GOAWAY is left to the
    /// end of the keep-alive grace, as the client retries what it did not
    /// send).
    fn answered(&self, http1: bool, draining: bool, now: Instant) -> bool {
        let served = self
            .served
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let reason = if draining && http1 {
            Some(CloseReason::Shutdown)
        } else {
            self.budget
                .ends_after(served, now.saturating_duration_since(self.opened))
        };
        let Some(reason) = reason else {
            return false;
        };
        let first = self.ending.set(reason).is_ok();
        if !http1 && first {
            self.goaway.notify_one();
        }
        true
    }

    fn end(&self, reason: CloseReason) {
        let _ = self.ending.set(reason);
    }
}

/// Answers one request with `router` and decides whether the answer ends
/// its connection (see [`ConnectionState::answered`]).
async fn answer(
    router: Router,
    connection: Arc<ConnectionState>,
    draining: Arc<AtomicBool>,
    request: Request<Incoming>,
) -> Result<Response, Infallible> {
    let http1 = request.version() < Version::HTTP_2;
    let Ok(mut response) = router.oneshot(request).await;
    if connection.answered(http1, draining.load(Ordering::Relaxed), Instant::now()) && http1 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(response)
}

/// Serves `router` over TLS on `listener` until `shutdown` completes, then
/// drains for at most `limits.drain`: for the first `limits.keep_alive_grace`
/// of it (or until no connection is left) it still serves and accepts, each
/// HTTP/1.1 answer closing its connection; then it stops accepting, closes
/// idle connections (HTTP/2: GOAWAY) and waits for the reviews in flight.
/// Meanwhile connections end by `limits.recycle`; `metrics` counts them.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    router: Router,
    limits: ServeLimits,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    // Every served connection holds a receiver: `closed()` is the drain's end.
    let (stop, stop_rx) = watch::channel(false);
    let max_connections = limits.max_connections.max(1);
    let connections = Arc::new(Semaphore::new(max_connections));
    let draining = Arc::new(AtomicBool::new(false));
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
    let mut sequence: u64 = 0;
    tokio::pin!(shutdown);
    let begin_grace = |end: &mut Option<Instant>| {
        draining.store(true, Ordering::Relaxed);
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
        sequence = sequence.wrapping_add(1);
        let budget = ConnectionBudget::draw(&limits.recycle, jitter_seed(sequence));
        let task = Connection {
            acceptor: acceptor.clone(),
            router: router.clone(),
            builder: builder.clone(),
            draining: draining.clone(),
            metrics: metrics.clone(),
            stop: stop_rx.clone(),
            handshake_timeout: limits.handshake_timeout,
            budget,
        };
        tokio::spawn(async move {
            let _permit = permit;
            task.serve(stream, peer).await;
        });
    }
    drop(listener);
    drop(stop_rx);
    let left = limits
        .drain
        .saturating_sub(grace_end.map_or(Duration::ZERO, |end| {
            grace.saturating_sub(end.saturating_duration_since(Instant::now()))
        }));
    // No receiver left (no connection) makes `send` fail: nothing to drain.
    let _ = stop.send(true);
    if tokio::time::timeout(left, stop.closed()).await.is_err() {
        tracing::warn!(
            drain_seconds = limits.drain.as_secs(),
            "connections still open after the drain period; closing them"
        );
    }
}

/// Whether a connection's error is the client closing or resetting it (an
/// HTTP/2 client drops a spare connection it opened while another was being
/// set up; a client stops reading), rather than an HTTP protocol error.
fn client_went_away(error: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                ErrorKind::BrokenPipe
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::UnexpectedEof
            );
        }
        cause = e.source();
    }
    false
}

/// One accepted TCP connection and what serving it needs.
struct Connection {
    acceptor: TlsAcceptor,
    router: Router,
    builder: Arc<auto::Builder<TokioExecutor>>,
    draining: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
    handshake_timeout: Duration,
    budget: ConnectionBudget,
}

impl Connection {
    /// The TLS handshake, then HTTP until the client, the budget or the
    /// drain ends the connection.
    async fn serve(self, stream: TcpStream, peer: SocketAddr) {
        let Self {
            acceptor,
            router,
            builder,
            draining,
            metrics,
            mut stop,
            handshake_timeout,
            budget,
        } = self;
        let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(stream));
        let tls = tokio::select! {
            done = handshake => match done {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            },
            // A handshake under way when the drain begins is not waited for.
            _ = stop.wait_for(|stop| *stop) => return,
        };
        metrics.connections.inc();
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
        let state = Arc::new(ConnectionState::new(budget, Instant::now()));
        let service = {
            let state = state.clone();
            service_fn(move |request| {
                answer(router.clone(), state.clone(), draining.clone(), request)
            })
        };
        let conn = builder.serve_connection(TokioIo::new(tls), service);
        tokio::pin!(conn);
        // HTTP/1.1 connections reach their age at their next answer; an
        // HTTP/2 one gets its GOAWAY at that age, idle or not.
        let mut age_timer = match (h2, budget.age) {
            (true, Some(age)) => Some(Box::pin(tokio::time::sleep_until(state.opened + age))),
            _ => None,
        };
        let mut ended = false;
        let outcome = loop {
            tokio::select! {
                outcome = conn.as_mut() => break outcome,
                _ = stop.wait_for(|stop| *stop), if !ended => {
                    state.end(CloseReason::Shutdown);
                    conn.as_mut().graceful_shutdown();
                    ended = true;
                }
                () = state.goaway.notified(), if !ended => {
                    conn.as_mut().graceful_shutdown();
                    ended = true;
                }
                () = async { if let Some(t) = age_timer.as_mut() { t.await } }, if age_timer.is_some() && !ended => {
                    age_timer = None;
                    state.end(CloseReason::Age);
                    conn.as_mut().graceful_shutdown();
                    ended = true;
                }
            }
        };
        let reason = match (state.ending.get(), &outcome) {
            (Some(r), _) => r.label(),
            (None, Ok(())) => "client",
            (None, Err(e)) if client_went_away(e.as_ref()) => "client",
            (None, Err(_)) => "error",
        };
        if let Err(e) = outcome {
            tracing::debug!(%peer, error = %e, cause = ?e, "connection ended with an error");
        }
        metrics
            .connections_closed
            .get_or_create(&ConnectionLabels { reason })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn without_jitter_a_connection_gets_exactly_the_configured_bounds() {
        let recycle = Recycle {
            jitter_percent: 0,
            ..Recycle::default()
        };
        for random in [0, u64::MAX / 3, u64::MAX] {
            let budget = ConnectionBudget::draw(&recycle, random);
            assert_eq!(budget.requests, 100);
            assert_eq!(budget.age, Some(30 * SECOND));
        }
    }

    #[test]
    fn jitter_spreads_the_bounds_within_the_percentage_either_side() {
        let recycle = Recycle::default();
        let low = ConnectionBudget::draw(&recycle, 0);
        let high = ConnectionBudget::draw(&recycle, u64::MAX);
        assert_eq!(low.requests, 80);
        assert_eq!(low.age, Some(24 * SECOND));
        assert_eq!(high.requests, 120);
        assert!(
            high.age
                .is_some_and(|a| a > 35 * SECOND && a <= 36 * SECOND)
        );
        let mut seen = std::collections::BTreeSet::new();
        for sequence in 0..200 {
            let b = ConnectionBudget::draw(&recycle, jitter_seed(sequence));
            assert!((80..=120).contains(&b.requests), "{b:?}");
            assert!(
                b.age
                    .is_some_and(|a| (24 * SECOND..=36 * SECOND).contains(&a)),
                "{b:?}"
            );
            seen.insert(b.requests);
        }
        assert!(seen.len() > 10, "connections drew {seen:?}");
    }

    #[test]
    fn a_jitter_above_half_is_capped_and_a_connection_answers_at_least_once() {
        let recycle = Recycle {
            max_requests: 1,
            max_age: None,
            jitter_percent: 200,
        };
        let budget = ConnectionBudget::draw(&recycle, 0);
        assert_eq!(budget.requests, 1);
        assert_eq!(budget.age, None);
        let wide = Recycle {
            max_requests: 100,
            ..recycle
        };
        assert_eq!(ConnectionBudget::draw(&wide, 0).requests, 50);
    }

    #[test]
    fn the_answer_that_uses_up_the_budget_ends_the_connection() {
        let budget = ConnectionBudget {
            requests: 3,
            age: Some(10 * SECOND),
        };
        assert_eq!(budget.ends_after(1, Duration::ZERO), None);
        assert_eq!(budget.ends_after(2, 9 * SECOND), None);
        assert_eq!(budget.ends_after(3, SECOND), Some(CloseReason::Requests));
        assert_eq!(budget.ends_after(1, 10 * SECOND), Some(CloseReason::Age));
        let unbounded = ConnectionBudget {
            requests: 0,
            age: None,
        };
        assert_eq!(unbounded.ends_after(u64::MAX, 1_000_000 * SECOND), None);
        let off = ConnectionBudget::draw(&Recycle::OFF, 12345);
        assert_eq!(off, unbounded);
    }

    #[test]
    fn an_http1_answer_past_the_age_closes_and_an_http2_one_asks_for_a_goaway() {
        let opened = Instant::now();
        let budget = ConnectionBudget {
            requests: 0,
            age: Some(30 * SECOND),
        };
        let h1 = ConnectionState::new(budget, opened);
        assert!(!h1.answered(true, false, opened + 29 * SECOND));
        assert!(h1.answered(true, false, opened + 31 * SECOND));
        assert_eq!(h1.ending.get(), Some(&CloseReason::Age));

        let h2 = ConnectionState::new(budget, opened);
        assert!(h2.answered(false, false, opened + 31 * SECOND));
        // The GOAWAY request is stored for the connection's task.
        let notified = h2.goaway.notified();
        tokio::pin!(notified);
        assert!(notified.as_mut().enable());
    }

    #[test]
    fn during_a_drain_every_http1_answer_closes_its_connection() {
        let opened = Instant::now();
        let state = ConnectionState::new(ConnectionBudget::draw(&Recycle::OFF, 0), opened);
        assert!(!state.answered(true, false, opened));
        assert!(state.answered(true, true, opened));
        assert_eq!(state.ending.get(), Some(&CloseReason::Shutdown));
        // HTTP/2 keeps serving through the grace; its GOAWAY comes after.
        let h2 = ConnectionState::new(ConnectionBudget::draw(&Recycle::OFF, 0), opened);
        assert!(!h2.answered(false, true, opened));
    }
}
