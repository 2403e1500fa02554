//! Keep-alive connections end after a bounded number of answers or age, so
//! that the API server's reused connections spread over replicas: driven by
//! reqwest over TLS on 127.0.0.1 (HTTP/1.1 and HTTP/2), hundreds of reviews,
//! every one answered, connections counted by the server's metrics, and a
//! slow review in flight when its connection reaches its bound still
//! answered in full.

// Test glue: helpers outside #[test] functions may unwrap.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{AnyCert, FakeJudge, config, fixture};
use rustls::ClientConfig;
use sigil_webhook::metrics::ConnectionLabels;
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::{Recycle, ServeLimits};
use sigil_webhook::tls::CertFiles;
use sigil_webhook::{Running, ServerSettings, start};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Http {
    One,
    Two,
}

/// A keep-alive client speaking `http` (by ALPN), like the API server's.
fn client(http: Http) -> reqwest::Client {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = match http {
        Http::One => vec![b"http/1.1".to_vec()],
        Http::Two => vec![b"h2".to_vec()],
    };
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// The serving pair in a temporary directory, removed on drop.
struct Certificates {
    dir: std::path::PathBuf,
}

impl Certificates {
    fn new() -> Self {
        let pair = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "sigil-webhook-connections-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tls.crt"), pair.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), pair.signing_key.serialize_pem()).unwrap();
        Self { dir }
    }

    fn files(&self) -> CertFiles {
        CertFiles {
            cert: self.dir.join("tls.crt"),
            key: self.dir.join("tls.key"),
        }
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn serve(
    judge: Arc<FakeJudge>,
    certificates: &Certificates,
    recycle: Recycle,
) -> Running<FakeJudge, NoPullSecrets> {
    let settings = ServerSettings {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: "127.0.0.1:0".parse().unwrap(),
        cert: certificates.files(),
        cert_poll: Duration::from_secs(60),
        admission: config(),
        limits: ServeLimits {
            drain: Duration::from_secs(5),
            recycle,
            ..ServeLimits::default()
        },
        external_data: None,
    };
    start(judge, NoPullSecrets, settings).await.unwrap()
}

/// Ten answers a connection, ±20%: 8 to 12.
const TEN_ANSWERS: Recycle = Recycle {
    max_requests: 10,
    max_age: None,
    jitter_percent: 20,
};

struct Answered {
    /// Whether the answer said `Connection: close`.
    closes: bool,
}

/// Sends one review and asserts that it was answered: HTTP 200, an allowed
/// AdmissionReview for the fixture's uid.
async fn review(
    client: &reqwest::Client,
    running: &Running<FakeJudge, NoPullSecrets>,
    body: &[u8],
) -> Answered {
    let response = client
        .post(format!(
            "https://127.0.0.1:{}/validate",
            running.addr.port()
        ))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .unwrap_or_else(|e| panic!("a review failed: {e:?}"));
    assert_eq!(response.status(), 200);
    let closes = response
        .headers()
        .get("connection")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let answer: serde_json::Value =
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(answer["response"]["uid"], "pod-good");
    Answered { closes }
}

fn opened(running: &Running<FakeJudge, NoPullSecrets>) -> u64 {
    running.state.admission.metrics().connections.get()
}

fn closed(running: &Running<FakeJudge, NoPullSecrets>, reason: &'static str) -> u64 {
    running
        .state
        .admission
        .metrics()
        .connections_closed
        .get_or_create(&ConnectionLabels { reason })
        .get()
}

/// The server counts a connection closed when its task ends, just after the
/// client read the last answer: wait (bounded) for the count to reach `want`.
async fn wait_closed(
    running: &Running<FakeJudge, NoPullSecrets>,
    reason: &'static str,
    want: u64,
) -> u64 {
    for _ in 0..250 {
        if closed(running, reason) >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    closed(running, reason)
}

fn answered_reviews(running: &Running<FakeJudge, NoPullSecrets>) -> u64 {
    running
        .state
        .admission
        .metrics()
        .encode()
        .lines()
        .filter(|l| l.starts_with("sigil_admission_requests_total{endpoint=\"validate\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn over_http1_every_review_is_answered_and_connections_reopen_after_their_share() {
    let certificates = Certificates::new();
    let running = serve(FakeJudge::new(), &certificates, TEN_ANSWERS).await;
    let client = client(Http::One);
    let body = fixture("pod_good.json");
    let mut closes = 0u64;
    for _ in 0..300 {
        if review(&client, &running, &body).await.closes {
            closes += 1;
        }
    }
    assert_eq!(answered_reviews(&running), 300);
    // One client, one connection at a time: each served 8 to 12 answers,
    // the last possibly fewer.
    let connections = opened(&running);
    assert!(
        (25..=38).contains(&connections),
        "{connections} connections for 300 reviews"
    );
    assert!(
        closes == connections || closes + 1 == connections,
        "{closes} answers said Connection: close over {connections} connections"
    );
    assert_eq!(wait_closed(&running, "requests", closes).await, closes);
    assert_eq!(closed(&running, "error"), 0);
    running.shutdown().await;
}

#[tokio::test]
async fn over_http2_every_review_is_answered_and_a_goaway_moves_the_client_to_a_new_connection() {
    let certificates = Certificates::new();
    let running = serve(FakeJudge::new(), &certificates, TEN_ANSWERS).await;
    let client = client(Http::Two);
    let body = fixture("pod_good.json");
    for _ in 0..300 {
        let answered = review(&client, &running, &body).await;
        assert!(!answered.closes, "HTTP/2 has no Connection header");
    }
    assert_eq!(answered_reviews(&running), 300);
    let connections = opened(&running);
    assert!(
        (25..=38).contains(&connections),
        "{connections} connections for 300 reviews"
    );
    let ended = wait_closed(&running, "requests", connections - 1).await;
    assert!(
        ended + 1 >= connections,
        "{ended} of {connections} ended by the server"
    );
    assert_eq!(closed(&running, "error"), 0);
    running.shutdown().await;
}

/// Eight clients at once, like the API servers of a control plane, each
/// with its own connections.
#[tokio::test]
async fn concurrent_clients_get_every_review_answered_while_their_connections_roll() {
    let certificates = Certificates::new();
    let running = Arc::new(serve(FakeJudge::new(), &certificates, TEN_ANSWERS).await);
    let body = Arc::new(fixture("pod_good.json"));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (running, body) = (running.clone(), body.clone());
        // Half over HTTP/1.1, half over HTTP/2; each HTTP/2 client sends
        // four reviews at a time on its connection.
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let client = client(Http::One);
                for _ in 0..60 {
                    review(&client, &running, &body).await;
                }
            } else {
                let client = client(Http::Two);
                for _ in 0..15 {
                    let batch = (0..4).map(|_| review(&client, &running, &body));
                    futures_util::future::join_all(batch).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(answered_reviews(&running), 480);
    // 60 reviews per client, at most 12 per connection: 5 or more each.
    let connections = opened(&running);
    assert!(connections >= 40, "{connections} connections for 8 clients");
    assert_eq!(
        closed(&running, "error"),
        0,
        "{}",
        running.state.admission.metrics().encode()
    );
    let running = Arc::into_inner(running).unwrap();
    running.shutdown().await;
}

/// A connection that reaches its age while a review is in flight is not cut:
/// the review is answered in full and the connection ends after it
/// (HTTP/1.1: that answer says `Connection: close`; HTTP/2: a GOAWAY that
/// lets the stream finish).
#[tokio::test]
async fn a_slow_review_in_flight_when_its_connection_ages_out_is_answered_in_full() {
    let certificates = Certificates::new();
    // Each review takes at least 600 ms; the connections' age bound is
    // 100 ms, so every connection passes it while its review is in flight.
    let judge = FakeJudge::with_delay(Duration::from_millis(600));
    let recycle = Recycle {
        max_requests: 0,
        max_age: Some(Duration::from_millis(100)),
        jitter_percent: 0,
    };
    let running = serve(judge.clone(), &certificates, recycle).await;
    let body = fixture("pod_good.json");
    let one = client(Http::One);
    let two = client(Http::Two);
    for round in 0..2 {
        // New policy versions: the cached verdicts are stale, so the judge
        // works (slowly) on every round.
        judge.set_versions(&format!("p{round}-1"), "t1");
        let answered = review(&one, &running, &body).await;
        assert!(
            answered.closes,
            "the answer after the age bound says Connection: close"
        );
        judge.set_versions(&format!("p{round}-2"), "t1");
        let batch = (0..3).map(|_| review(&two, &running, &body));
        futures_util::future::join_all(batch).await;
    }
    assert_eq!(answered_reviews(&running), 8);
    let aged = wait_closed(&running, "age", 4).await;
    assert!(
        aged >= 4,
        "{aged} connections ended by age:\n{}",
        running.state.admission.metrics().encode()
    );
    assert_eq!(closed(&running, "error"), 0);
    running.shutdown().await;
}
