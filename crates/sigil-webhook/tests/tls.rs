//! The HTTPS server on 127.0.0.1: certificate hot reload through a
//! Secret-volume-style symlink swap, a review over TLS, and a graceful
//! shutdown that still answers the review in flight.

// Test glue: helpers outside #[test] functions may unwrap.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{AnyCert, FakeJudge, config, fixture};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::ServeLimits;
use sigil_webhook::tls::CertFiles;
use sigil_webhook::{Running, ServerSettings, start};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

fn connector() -> TlsConnector {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

struct Pair {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

fn new_pair() -> Pair {
    let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    Pair {
        cert_pem: c.cert.pem(),
        key_pem: c.signing_key.serialize_pem(),
        der: c.cert.der().to_vec(),
    }
}

/// A directory laid out like a mounted Secret: `tls.crt` and `tls.key` are
/// symlinks into `..data`, itself a symlink to a timestamped directory that
/// an update replaces atomically.
struct SecretVolume {
    dir: PathBuf,
    generation: u32,
}

impl SecretVolume {
    fn new(pair: &Pair) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "sigil-webhook-tls-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut v = Self { dir, generation: 0 };
        v.update(&pair.cert_pem, &pair.key_pem);
        std::os::unix::fs::symlink("..data/tls.crt", v.dir.join("tls.crt")).unwrap();
        std::os::unix::fs::symlink("..data/tls.key", v.dir.join("tls.key")).unwrap();
        v
    }

    fn update(&mut self, cert: &str, key: &str) {
        self.generation += 1;
        let name = format!("..2026_{}", self.generation);
        let data = self.dir.join(&name);
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("tls.crt"), cert).unwrap();
        std::fs::write(data.join("tls.key"), key).unwrap();
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }

    fn files(&self) -> CertFiles {
        CertFiles {
            cert: self.dir.join("tls.crt"),
            key: self.dir.join("tls.key"),
        }
    }
}

impl Drop for SecretVolume {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

async fn serve(judge: Arc<FakeJudge>, files: CertFiles) -> Running<FakeJudge, NoPullSecrets> {
    let settings = ServerSettings {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: "127.0.0.1:0".parse().unwrap(),
        cert: files,
        cert_poll: Duration::from_millis(100),
        admission: config(),
        limits: ServeLimits {
            drain: Duration::from_secs(5),
            ..ServeLimits::default()
        },
        external_data: None,
    };
    start(judge, NoPullSecrets, settings).await.unwrap()
}

async fn served_cert(addr: SocketAddr) -> Vec<u8> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = connector()
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

async fn wait_for_cert(addr: SocketAddr, want: &[u8]) -> bool {
    for _ in 0..50 {
        if served_cert(addr).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// POSTs over TLS with HTTP/1.1 and returns (status line, body).
async fn post_tls(addr: SocketAddr, path: &str, body: &[u8]) -> (String, String) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = connector()
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(body).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

fn path_exists(p: &Path) -> bool {
    std::fs::metadata(p).is_ok()
}

#[tokio::test]
async fn a_renewed_certificate_is_served_after_the_secret_volume_swaps_its_symlink() {
    let (a, b) = (new_pair(), new_pair());
    let mut volume = SecretVolume::new(&a);
    assert!(path_exists(&volume.files().cert));
    let running = serve(FakeJudge::new(), volume.files()).await;
    assert_eq!(served_cert(running.addr).await, a.der);

    volume.update(&b.cert_pem, &b.key_pem);
    assert!(
        wait_for_cert(running.addr, &b.der).await,
        "certificate B never served"
    );

    // A pair whose key does not match is refused; B stays in service.
    let c = new_pair();
    volume.update(&a.cert_pem, &c.key_pem);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(served_cert(running.addr).await, b.der);
    running.shutdown().await;
}

#[tokio::test]
async fn a_review_over_tls_is_answered_and_shutdown_drains_it() {
    let pair = new_pair();
    let volume = SecretVolume::new(&pair);
    let judge = FakeJudge::with_delay(Duration::from_millis(600));
    let running = serve(judge.clone(), volume.files()).await;
    let addr = running.addr;
    let in_flight =
        tokio::spawn(async move { post_tls(addr, "/validate", &fixture("pod_good.json")).await });
    // Shut down while the judge is still working on the review.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(judge.calls() > 0, "the review reached the judge");
    running.shutdown().await;
    let (status, body) = in_flight.await.unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(answer["response"]["uid"], "pod-good");
    // Nothing listens any more.
    assert!(TcpStream::connect(addr).await.is_err());
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn open_tls(addr: SocketAddr) -> Tls {
    let tcp = TcpStream::connect(addr).await.unwrap();
    connector()
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap()
}

/// One keep-alive request on `tls` and its answer: the status line, the
/// lower-cased headers and the body (read by its Content-Length).
async fn exchange(tls: &mut Tls, path: &str, body: &[u8]) -> (String, Vec<String>, String) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(body).await.unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut byte))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 1, "the connection ended inside the answer's head");
        buf.push(byte[0]);
    }
    let text = String::from_utf8(buf).unwrap();
    let mut lines = text.lines();
    let status = lines.next().unwrap().to_string();
    let headers: Vec<String> = lines
        .filter(|l| !l.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let length: usize = headers
        .iter()
        .find_map(|h| h.strip_prefix("content-length:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0u8; length];
    tls.read_exact(&mut body).await.unwrap();
    (status, headers, String::from_utf8(body).unwrap())
}

fn closes(headers: &[String]) -> bool {
    headers.iter().any(|h| h == "connection: close")
}

/// An HTTP/1.1 caller (an API server with HTTP/2 off) does not retry a POST
/// sent on a keep-alive connection the server has just closed: a drain must
/// not close a connection while it is idle, but close it after an answer.
#[tokio::test]
async fn a_drain_answers_a_kept_alive_connection_and_closes_it_after_the_answer() {
    let pair = new_pair();
    let volume = SecretVolume::new(&pair);
    let running = serve(FakeJudge::new(), volume.files()).await;
    let addr = running.addr;
    let review = fixture("pod_good.json");
    let mut kept = open_tls(addr).await;
    let (status, headers, _) = exchange(&mut kept, "/validate", &review).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(!closes(&headers), "{headers:?}");
    // Idle from here on, through the start of the drain.
    let mut idle = open_tls(addr).await;

    let stopping = tokio::spawn(running.shutdown());
    // The drain has begun once a new keep-alive exchange is told to close.
    let mut began = false;
    for _ in 0..100 {
        let mut probe = open_tls(addr).await;
        if closes(&exchange(&mut probe, "/validate", &review).await.1) {
            began = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        began,
        "no answer said Connection: close after shutdown began"
    );

    // The connection that was idle when the drain began still gets its
    // answer, which closes it.
    let (status, headers, body) = exchange(&mut kept, "/validate", &review).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(closes(&headers), "{headers:?}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), kept.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "bytes after a Connection: close answer");

    // A connection that stays idle through the grace is closed after it,
    // and the drain ends within its bound.
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .unwrap()
        .unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "the idle connection was not closed");
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn the_metrics_port_serves_plain_http() {
    let pair = new_pair();
    let volume = SecretVolume::new(&pair);
    let running = serve(FakeJudge::new(), volume.files()).await;
    let mut tcp = TcpStream::connect(running.metrics_addr).await.unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    assert!(out.contains("sigil_admission_in_flight"), "{out}");
    running.shutdown().await;
}
