//! Warm admission load: the HTTPS webhook on 127.0.0.1 (in process, real
//! rustls and hyper stack, aws-lc-rs provider) answering `/validate` for a pod
//! with three digest-pinned images whose verdicts are cached, driven by
//! keep-alive HTTP/1.1 clients over TLS. Bounded in count and time.
//!
//! `SIGIL_LOAD_REVIEWS` (default 50000), `SIGIL_LOAD_CONNECTIONS` (16),
//! `SIGIL_LOAD_SECONDS` (30, hard stop), `SIGIL_LOAD_MAX_REQUESTS` (the
//! server's `--connection-max-requests`, 100 by default; 0 keeps every
//! connection open, a client reconnects when an answer says
//! `Connection: close`). Run: `cargo bench -p sigil-webhook --bench admission_load`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use sigil_webhook::admit::AdmissionConfig;
use sigil_webhook::judge::{ImageJudge, ObjectInfo, PinnedImage, PullSecrets, Verdict, Versions};
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::{Recycle, ServeLimits};
use sigil_webhook::tls::CertFiles;
use sigil_webhook::{ServerSettings, start};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Allows everything instantly and counts calls (must stay at 3).
struct AllowJudge(AtomicUsize);

impl ImageJudge for AllowJudge {
    async fn judge(
        &self,
        _: &PinnedImage,
        _: &ObjectInfo,
        _: &PullSecrets,
        _: tokio::time::Instant,
    ) -> Verdict {
        self.0.fetch_add(1, Ordering::Relaxed);
        Verdict::allow(vec!["bench".into()])
    }
    async fn resolve(
        &self,
        _: &str,
        _: &PullSecrets,
        _: tokio::time::Instant,
    ) -> Result<String, String> {
        Err("bench images are pinned".into())
    }
    fn matches(&self, _: &str, _: &ObjectInfo) -> bool {
        true
    }
    fn no_match(&self, _: &str) -> Verdict {
        Verdict::allow(Vec::new())
    }
    fn versions(&self) -> Versions {
        Versions {
            policy_hash: "bench".into(),
            trust_root_version: "bench".into(),
        }
    }
    fn ready(&self) -> bool {
        true
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn review() -> Vec<u8> {
    let d = |c: &str| format!("sha256:{}", c.repeat(64));
    let body = serde_json::json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "bench-0001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web", "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "app", "image": format!("registry.local/team/app@{}", d("a"))},
                    {"name": "proxy", "image": format!("registry.local/team/proxy@{}", d("b"))},
                    {"name": "metrics", "image": format!("registry.local/team/metrics@{}", d("c"))}]}},
            "oldObject": null, "dryRun": false
        }
    });
    serde_json::to_vec(&body).unwrap()
}

fn connector() -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(std::env::temp_dir().join("sigil-bench-ca.pem")).unwrap();
    for c in rustls_pki_types::pem::PemObject::pem_slice_iter(&ca) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Writes a CA and a serving certificate for 127.0.0.1 signed by it.
fn certificates() -> CertFiles {
    let dir = std::env::temp_dir();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("sigil-bench-ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("sigil-bench.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("sigil-bench.key"), key.serialize_pem()).unwrap();
    CertFiles {
        cert: dir.join("sigil-bench.crt"),
        key: dir.join("sigil-bench.key"),
    }
}

/// Sends one request on a keep-alive connection and reads the response:
/// whether it allowed the review, and whether it closes the connection.
async fn round_trip(
    tls: &mut tokio_rustls::client::TlsStream<TcpStream>,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> (bool, bool) {
    tls.write_all(request).await.unwrap();
    buf.clear();
    let mut chunk = [0u8; 8192];
    loop {
        let n = tls.read(&mut chunk).await.unwrap();
        if n == 0 {
            return (false, true);
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        if buf.len() >= end + 4 + len {
            let allowed = head.starts_with("http/1.1 200")
                && buf[end + 4..].windows(14).any(|w| w == b"\"allowed\":true");
            return (allowed, head.lines().any(|l| l == "connection: close"));
        }
    }
}

fn main() {
    let total = env("SIGIL_LOAD_REVIEWS", 50_000) as usize;
    let conns = env("SIGIL_LOAD_CONNECTIONS", 16) as usize;
    let max_time = Duration::from_secs(env("SIGIL_LOAD_SECONDS", 30));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let files = certificates();
        let judge = Arc::new(AllowJudge(AtomicUsize::new(0)));
        let settings = ServerSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            metrics_listen: "127.0.0.1:0".parse().unwrap(),
            cert: files,
            cert_poll: Duration::from_secs(5),
            admission: AdmissionConfig::default(),
            limits: ServeLimits {
                recycle: Recycle {
                    max_requests: env("SIGIL_LOAD_MAX_REQUESTS", Recycle::default().max_requests),
                    ..Recycle::default()
                },
                ..ServeLimits::default()
            },
            external_data: None,
        };
        let running = start(judge.clone(), NoPullSecrets, settings).await.unwrap();
        let addr = running.addr;
        let body = review();
        let request = Arc::new(
            [format!(
                "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes(), body]
            .concat(),
        );
        let issued = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let deadline = started + max_time;
        let mut tasks = Vec::new();
        for _ in 0..conns {
            let (request, issued, connector) = (request.clone(), issued.clone(), connector());
            tasks.push(tokio::spawn(async move {
                let mut tls = None;
                let mut lat = Vec::new();
                let mut buf = Vec::with_capacity(8192);
                while issued.fetch_add(1, Ordering::Relaxed) < total && Instant::now() < deadline {
                    let t = Instant::now();
                    // A new connection (TLS handshake included) counts in
                    // the latency of the review that needs it.
                    let conn = match tls.as_mut() {
                        Some(c) => c,
                        None => {
                            let tcp = TcpStream::connect(addr).await.unwrap();
                            tcp.set_nodelay(true).unwrap();
                            let c = connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await.unwrap();
                            tls.insert(c)
                        }
                    };
                    let (allowed, closes) = round_trip(conn, &request, &mut buf).await;
                    assert!(allowed, "review not allowed");
                    if closes {
                        tls = None;
                    }
                    lat.push(t.elapsed());
                }
                lat
            }));
        }
        let mut lat: Vec<Duration> = Vec::new();
        for t in tasks {
            lat.extend(t.await.unwrap());
        }
        let elapsed = started.elapsed();
        lat.sort();
        let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
        println!(
            "warm /validate, pod with 3 images, TLS 127.0.0.1, {conns} keep-alive clients, {} TLS connections: {} reviews in {:.2}s = {:.0} reviews/s; p50 {:?} p90 {:?} p99 {:?} max {:?}; judge calls {}",
            running.state.admission.metrics().connections.get(),
            lat.len(),
            elapsed.as_secs_f64(),
            lat.len() as f64 / elapsed.as_secs_f64(),
            pct(0.50),
            pct(0.90),
            pct(0.99),
            lat[lat.len() - 1],
            judge.0.load(Ordering::Relaxed)
        );
        fill_cache(&running).await;
        running.shutdown().await;
    });
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

struct NoSecrets;

impl sigil_webhook::cache::SecretsOnce for NoSecrets {
    async fn get(&self, _: tokio::time::Instant) -> Result<PullSecrets, String> {
        Ok(PullSecrets::default())
    }
}

/// Caches `SIGIL_LOAD_CACHED` (100000) distinct verdicts and reports the RSS growth.
async fn fill_cache(running: &sigil_webhook::Running<AllowJudge, NoPullSecrets>) {
    let n = env("SIGIL_LOAD_CACHED", 100_000);
    let object: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"}, "spec": {}
    }))
    .unwrap();
    let info = ObjectInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        sub_resource: String::new(),
        kind: "Pod".into(),
        namespace: "shop".into(),
        name: "web".into(),
        labels: Default::default(),
        pull_secret_names: Vec::new(),
        service_account: "default".into(),
        object: Arc::new(object),
    };
    let cache = running.state.admission.cache();
    let before = rss_mib();
    let started = Instant::now();
    for i in 0..n {
        let digest = format!("sha256:{i:064x}");
        let image = PinnedImage {
            image: format!("registry.local/team/app-{}@{digest}", i % 100),
            digest,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        cache
            .verdict(&image, &info, &NoSecrets, deadline)
            .await
            .unwrap();
    }
    let cached = cache.cached_verdicts().await;
    println!(
        "{cached} distinct verdicts cached in {:.2}s; process RSS {before:.1} MiB -> {:.1} MiB",
        started.elapsed().as_secs_f64(),
        rss_mib()
    );
}
