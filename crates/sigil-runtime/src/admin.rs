//! The admin endpoints every long-running sigil binary serves on its plain
//! HTTP port: `/healthz` (the process answers), `/readyz` (the program says
//! whether it is ready, and why not), `/metrics` (its OpenMetrics text) and
//! `/registry-credentials?host=H` (which cloud provider serves a registry
//! host and whether it can get a token now, never the token: what `sigil
//! doctor` reports).
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
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::{TcpListener, ToSocketAddrs};

use sigil_registry::Keychain;

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

    /// The registry credential providers the program judges with, for
    /// `/registry-credentials`; `None`: it has none.
    fn registry_keychain(&self) -> Option<Arc<Keychain>> {
        None
    }
}

/// The router of `/healthz`, `/readyz` and `/metrics` over `admin` (also
/// what tests call through `oneshot`).
pub fn router<A: Admin>(admin: Arc<A>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<A>))
        .route("/metrics", get(metrics::<A>))
        .route("/registry-credentials", get(registry_credentials::<A>))
        .with_state(admin)
}

/// The longest registry host `/registry-credentials` takes.
pub const MAX_HOST_CHARS: usize = 255;
/// How long `/registry-credentials` waits for a provider's token.
pub const CREDENTIAL_CHECK_WAIT: Duration = Duration::from_secs(8);

/// The `host` query parameter: a registry host (letters, digits, `.-:[]`,
/// `%3A` for `:`), at most [`MAX_HOST_CHARS`].
fn host_parameter(uri: &Uri) -> Result<String, String> {
    let raw = uri
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("host=")))
        .ok_or("give the registry host: /registry-credentials?host=HOST")?;
    let host = raw
        .replace("%3A", ":")
        .replace("%3a", ":")
        .replace("%5B", "[")
        .replace("%5b", "[")
        .replace("%5D", "]")
        .replace("%5d", "]");
    if host.is_empty()
        || host.len() > MAX_HOST_CHARS
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
    {
        return Err(format!(
            "`host` must be a registry host of at most {MAX_HOST_CHARS} characters (letters, \
             digits, `.-:[]`)"
        ));
    }
    Ok(host.to_ascii_lowercase())
}

/// `/registry-credentials?host=H`: the provider serving `H`, where its
/// identity comes from, and whether it can give a token now (fetching one
/// if none is held), as one JSON object; never the token.
async fn registry_credentials<A: Admin>(State(admin): State<Arc<A>>, uri: Uri) -> Response {
    let host = match host_parameter(&uri) {
        Ok(h) => h,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    let json = |body: serde_json::Value| {
        (
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    };
    let Some(keychain) = admin.registry_keychain() else {
        return json(serde_json::json!({
            "host": host, "provider": null, "ok": false,
            "source": "no cloud provider may run (--registry-credential-provider none)",
            "error": "no credential provider serves this host",
        }));
    };
    let check = keychain.check(&host, CREDENTIAL_CHECK_WAIT).await;
    let (ok, seconds_left, error) = match check.result {
        Ok(s) => (true, Some(s), None),
        Err(e) => (false, None, Some(e)),
    };
    json(serde_json::json!({
        "host": host,
        "provider": check.provider.map(|p| p.name()),
        "source": check.source,
        "ok": ok,
        "secondsLeft": seconds_left,
        "error": error,
    }))
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

    #[test]
    fn the_credential_check_takes_a_registry_host_and_nothing_else() {
        let host = |q: &str| host_parameter(&q.parse::<Uri>().unwrap());
        assert_eq!(
            host("/registry-credentials?host=Reg.AzureCR.io").unwrap(),
            "reg.azurecr.io"
        );
        assert_eq!(
            host("/registry-credentials?x=1&host=10.0.0.1%3A5000").unwrap(),
            "10.0.0.1:5000"
        );
        assert!(host("/registry-credentials").is_err());
        assert!(host("/registry-credentials?host=").is_err());
        assert!(host("/registry-credentials?host=a/b").is_err());
        assert!(host(&format!("/registry-credentials?host={}", "a".repeat(256))).is_err());
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

    struct Judging(Option<Arc<Keychain>>);

    impl Admin for Judging {
        fn readiness(&self) -> Result<&'static str, &'static str> {
            Ok("ready")
        }

        fn metrics(&self) -> String {
            "# EOF\n".to_owned()
        }

        fn registry_keychain(&self) -> Option<Arc<Keychain>> {
            self.0.clone()
        }
    }

    #[tokio::test]
    async fn registry_credentials_name_the_provider_and_its_failure_never_a_token() {
        let env = sigil_registry::cloud::Env::from_pairs([("AWS_EC2_METADATA_DISABLED", "true")]);
        let keychain = Keychain::new(&sigil_registry::KeychainSettings::default(), env).unwrap();
        let app = router(Arc::new(Judging(Some(Arc::new(keychain)))));
        let (status, kind, text) = get(
            app.clone(),
            "/registry-credentials?host=123456789012.dkr.ecr.us-east-1.amazonaws.com",
        )
        .await;
        assert_eq!(
            (status, kind.as_deref()),
            (StatusCode::OK, Some("application/json"))
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["provider"], "ecr");
        assert_eq!(v["ok"], false);
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("no source is configured"),
            "{text}"
        );
        let (_, _, text) = get(app.clone(), "/registry-credentials?host=ghcr.io").await;
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["provider"], serde_json::Value::Null);
        let (status, _, _) = get(app, "/registry-credentials?host=a%2Fb").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let none = router(Arc::new(Judging(None)));
        let (_, _, text) = get(none, "/registry-credentials?host=reg.azurecr.io").await;
        assert!(
            text.contains("--registry-credential-provider none"),
            "{text}"
        );
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
