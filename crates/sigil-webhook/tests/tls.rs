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

use common::{FakeJudge, config, fixture};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::ServeLimits;
use sigil_webhook::tls::CertFiles;
use sigil_webhook::{Running, ServerSettings, start};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Accepts any server certificate: the test reads which one was served.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

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
