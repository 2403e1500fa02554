//! The shared cache between replicas, against a real `redis-server` on
//! 127.0.0.1 (started per test, no persistence, killed at the end) and a
//! mock registry serving real cosign output from `scripts/samples/olareg`:
//! a second replica verifies a signed image with no registry request; what
//! an attacker writes into the cache never makes an image verify that
//! would not; a cache that is down, silent, or killed and restarted never
//! fails a verification.
//!
//! The tests that need `redis-server` are ignored by default and run by
//! `make test-registry` (which installs it); the ones with a fake server
//! run everywhere. Waits are bounded generously and nothing asserts a time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Response, StatusCode, Uri};
use sigil_registry::image::{
    ImageError, ImagePolicy, ImageVerdict, VerifyImageOptions, verify_image,
};
use sigil_registry::{
    ClientConfig, Digest, Limits, MaterialCache, MaterialKey, MaterialScope, RegistryClient,
    Repository, RequestObserver, RequestOutcome, SharedCache, SharedCacheConfig, SharedCacheEvent,
    Want,
};
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{SignerPolicy, VerificationPolicy};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
/// The sample image, signed with `cosign.pub` in both formats.
const SIGNED: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
/// An image the registry holds no signature for.
const UNSIGNED: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";
const LEGACY_LAYER: &str =
    "sha256:eee991a554d37e3b5ccc432e67ef08e1412c9467957d0acea8ead054793e07f3";
const TTL: Duration = Duration::from_secs(60);
const KEY: [u8; 32] = [7; 32];
/// The most any wait in these tests may take before the test fails.
const BOUND: Duration = Duration::from_secs(20);

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

fn reply(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Body::from(body))
        .unwrap()
}

/// A registry holding the signed sample image (a bundle referrer and a
/// legacy `.sig` tag) and nothing for any other digest; counts requests.
async fn registry() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let sig_tag = Digest::parse(SIGNED).unwrap().tag_stem() + ".sig";
    let app = Router::new().fallback(move |uri: Uri| {
        let (counted, sig_tag) = (counted.clone(), sig_tag.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            let path = uri.path();
            let found = |file: &str| reply(StatusCode::OK, sample(&format!("olareg/{file}")));
            if path.ends_with(&format!("/referrers/{SIGNED}")) {
                return found("referrers.json");
            }
            if path.contains("/referrers/") {
                let empty = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
                return reply(StatusCode::OK, empty.to_vec());
            }
            for (suffix, file) in [
                (format!("/manifests/{SIG_MANIFEST}"), "new-sig.manifest.json"),
                (format!("/blobs/{SIG_BUNDLE}"), "new-sig.bundle.json"),
                (format!("/manifests/{sig_tag}"), "legacy-sig.manifest.json"),
                (format!("/blobs/{LEGACY_LAYER}"), "legacy-sig.layer.json"),
            ] {
                if path.ends_with(&suffix) {
                    return found(file);
                }
            }
            reply(StatusCode::NOT_FOUND, b"not found".to_vec())
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, requests)
}

/// Counts what a replica's shared cache reports.
#[derive(Debug, Default)]
struct Heard(Mutex<HashMap<SharedCacheEvent, usize>>);

impl Heard {
    fn count(&self, event: SharedCacheEvent) -> usize {
        self.0.lock().unwrap().get(&event).copied().unwrap_or(0)
    }
}

impl RequestObserver for Heard {
    fn observe(&self, _host: &str, _outcome: RequestOutcome, _waited: Duration) {}

    fn shared_cache(&self, event: SharedCacheEvent) {
        *self.0.lock().unwrap().entry(event).or_default() += 1;
    }
}

/// One replica: its own registry client and local material cache, in
/// front of the shared cache at `url` signed with `key`.
struct Replica {
    client: RegistryClient,
    material: Arc<MaterialCache>,
    shared: SharedCache,
    heard: Arc<Heard>,
}

fn replica_with(config: SharedCacheConfig) -> Replica {
    let heard = Arc::new(Heard::default());
    let shared = SharedCache::new(config, Some(heard.clone() as _)).unwrap();
    let client = RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        limits: Limits {
            request_timeout: Duration::from_secs(5),
            total_deadline: Duration::from_secs(20),
            ..Limits::default()
        },
        ..Default::default()
    })
    .unwrap();
    let material =
        Arc::new(MaterialCache::with_byte_budget(TTL, 1 << 20).with_shared(shared.clone()));
    Replica {
        client,
        material,
        shared,
        heard,
    }
}

fn replica(url: &str, key: &[u8]) -> Replica {
    replica_with(config(url, key))
}

fn config(url: &str, key: &[u8]) -> SharedCacheConfig {
    let mut config = SharedCacheConfig::new(url, key.to_vec());
    // Generous for a loaded test machine; short pauses so that tests
    // see the cache again soon after a failure.
    config.read_wait = Duration::from_secs(2);
    config.write_wait = Duration::from_secs(2);
    config.backoff = Duration::from_millis(50);
    config
}

impl Replica {
    async fn verify(&self, host: &str, digest: &str) -> Result<ImageVerdict, ImageError> {
        let key = PublicKey::from_pem(&String::from_utf8(sample("cosign.pub")).unwrap()).unwrap();
        let policy = ImagePolicy {
            verification: VerificationPolicy {
                signer: SignerPolicy::Key(key),
                require_tlog: false,
                key_hash: None,
            },
            want: Want::Signatures,
        };
        let options = VerifyImageOptions {
            material: Some(MaterialScope {
                cache: self.material.clone(),
                credentials_id: String::new(),
            }),
            ..Default::default()
        };
        let image = format!("{host}/test/app@{digest}");
        let root = TrustedRoot::public_good().unwrap();
        let verdict = verify_image(&image, &policy, &root, &self.client, &options);
        tokio::time::timeout(BOUND, verdict)
            .await
            .expect("a verification outlived the test's bound")
    }

    /// Waits (bounded) until this replica's background writes stored `n`
    /// entries.
    async fn stored(&self, n: usize) {
        let waited = tokio::time::timeout(BOUND, async {
            while self.heard.count(SharedCacheEvent::Stored) < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        waited.await.unwrap_or_else(|_| {
            panic!(
                "{n} entries not stored within the bound: {:?}",
                self.heard.0.lock().unwrap()
            )
        });
    }
}

fn key_of(host: &str, digest: &str) -> MaterialKey {
    MaterialKey::new(
        "",
        &Repository::parse(&format!("{host}/test/app")).unwrap(),
        &Digest::parse(digest).unwrap(),
        &Want::Signatures,
        "",
    )
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `redis-server` on 127.0.0.1 with no persistence, killed when dropped.
struct Redis {
    port: u16,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Redis {
    fn start() -> Self {
        Self::start_with(Vec::new())
    }

    /// With `extra` arguments; `{port}` in them stands for the port.
    fn start_with(extra: Vec<String>) -> Self {
        let mut redis = Self {
            port: free_port(),
            extra,
            child: None,
        };
        redis.launch();
        redis
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn launch(&mut self) {
        let port = self.port.to_string();
        let extra = self.extra.iter().map(|a| a.replace("{port}", &port));
        let plain = if self.extra.is_empty() {
            vec!["--port".to_string(), port.clone()]
        } else {
            Vec::new()
        };
        let child = Command::new("redis-server")
            .args(plain)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (Debian's redis-server package; `make test-registry` installs it)");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + BOUND;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not listen on {} within the bound",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// One command, the reply's raw bytes (a status line or a bulk body).
    async fn call(&self, args: &[&[u8]]) -> Vec<u8> {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        let mut io = BufReader::new(stream);
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            request.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            request.extend_from_slice(a);
            request.extend_from_slice(b"\r\n");
        }
        io.get_mut().write_all(&request).await.unwrap();
        let mut line = String::new();
        io.read_line(&mut line).await.unwrap();
        let Some(len) = line.strip_prefix('$') else {
            return line.trim_end().as_bytes().to_vec();
        };
        let Ok(len) = len.trim_end().parse::<usize>() else {
            return Vec::new();
        };
        let mut body = vec![0; len + 2];
        io.read_exact(&mut body).await.unwrap();
        body.truncate(len);
        body
    }

    async fn set(&self, name: &str, value: &[u8]) {
        assert_eq!(self.call(&[b"SET", name.as_bytes(), value]).await, b"+OK");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server on PATH; run by `make test-registry`"]
async fn a_second_replica_verifies_a_signed_image_with_no_registry_request() {
    let redis = Redis::start();
    let (host, requests) = registry().await;
    let first = replica(&redis.url(), &KEY);
    let verdict = first.verify(&host, SIGNED).await.unwrap();
    assert_eq!(verdict.verified.len(), 2, "{verdict:?}");
    assert!(requests.load(Ordering::SeqCst) > 0);
    first.stored(1).await;

    // The entry expires in Redis with the local TTL.
    let name = first.shared.entry_name(&key_of(&host, SIGNED));
    let pttl: i64 = String::from_utf8(redis.call(&[b"PTTL", name.as_bytes()]).await)
        .unwrap()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    assert!(pttl > 0 && pttl <= 60_000, "PTTL {pttl}");

    let before = requests.load(Ordering::SeqCst);
    let second = replica(&redis.url(), &KEY);
    let verdict = second.verify(&host, SIGNED).await.unwrap();
    assert_eq!(verdict.verified.len(), 2, "{verdict:?}");
    assert_eq!(
        requests.load(Ordering::SeqCst),
        before,
        "registry asked again"
    );
    assert_eq!(second.heard.count(SharedCacheEvent::Hit), 1);

    // Another cluster's key shares the server but not the entries.
    let other = replica(&redis.url(), &[9; 32]);
    assert_eq!(other.verify(&host, SIGNED).await.unwrap().verified.len(), 2);
    assert_eq!(other.heard.count(SharedCacheEvent::Miss), 1);
    assert!(requests.load(Ordering::SeqCst) > before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server on PATH; run by `make test-registry`"]
async fn a_cache_written_by_an_attacker_never_admits_an_image_sigil_would_deny() {
    let redis = Redis::start();
    let (host, _) = registry().await;
    let honest = replica(&redis.url(), &KEY);
    assert!(matches!(
        honest.verify(&host, UNSIGNED).await,
        Err(ImageError::NoSignature { .. })
    ));
    honest.verify(&host, SIGNED).await.unwrap();
    honest.stored(1).await;
    let signed_name = honest.shared.entry_name(&key_of(&host, SIGNED));
    let unsigned_name = honest.shared.entry_name(&key_of(&host, UNSIGNED));
    let signed_value = redis.call(&[b"GET", signed_name.as_bytes()]).await;
    assert!(signed_value.starts_with(b"sgl1"), "{signed_value:?}");

    // Without the key: the signed image's entry moved to the unsigned one,
    // its content under a made-up MAC, a MAC over the content alone,
    // truncations and garbage.
    let content = &signed_value[36..];
    let mut zero_mac = b"sgl1".to_vec();
    zero_mac.extend_from_slice(&[0; 32]);
    zero_mac.extend_from_slice(content);
    let mut flipped = signed_value.clone();
    let last = flipped.len() - 2;
    flipped[last] ^= 1;
    let forgeries: Vec<(&str, Vec<u8>)> = vec![
        ("moved from the signed image", signed_value.clone()),
        ("content under a zero MAC", zero_mac),
        ("one byte changed", flipped),
        ("magic only", b"sgl1".to_vec()),
        ("cut short", signed_value[..40].to_vec()),
        ("garbage", vec![0xff; 4096]),
        ("empty", Vec::new()),
    ];
    for (what, value) in &forgeries {
        redis.set(&unsigned_name, value).await;
        let fresh = replica(&redis.url(), &KEY);
        let verdict = fresh.verify(&host, UNSIGNED).await;
        assert!(
            matches!(verdict, Err(ImageError::NoSignature { .. })),
            "{what}: {verdict:?}"
        );
        assert_eq!(fresh.heard.count(SharedCacheEvent::Rejected), 1, "{what}");
    }
    // Garbage at the signed image's own entry: ignored, the registry asked.
    redis.set(&signed_name, b"garbage").await;
    let fresh = replica(&redis.url(), &KEY);
    assert_eq!(fresh.verify(&host, SIGNED).await.unwrap().verified.len(), 2);
    assert_eq!(fresh.heard.count(SharedCacheEvent::Rejected), 1);

    // With the key (a stolen one): the signed image's genuine signatures
    // stored as the unsigned image's. They are signatures over another
    // digest, and verification says so.
    let thief = replica(&redis.url(), &KEY);
    let genuine = sigil_registry::discover::discover(
        &thief.client.session(),
        &Repository::parse(&format!("{host}/test/app")).unwrap(),
        &Digest::parse(SIGNED).unwrap(),
        &Want::Signatures,
        &Default::default(),
    )
    .await;
    assert_eq!(genuine.candidates.len(), 2);
    thief
        .shared
        .store(&key_of(&host, UNSIGNED), &genuine, TTL)
        .await
        .unwrap();
    let fresh = replica(&redis.url(), &KEY);
    let verdict = fresh.verify(&host, UNSIGNED).await;
    assert_eq!(fresh.heard.count(SharedCacheEvent::Hit), 1);
    assert!(
        matches!(verdict, Err(ImageError::NothingVerified { .. })),
        "{verdict:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_cache_that_is_down_never_fails_a_verification() {
    let (host, _) = registry().await;
    // Nothing listens there.
    let down = replica(&format!("redis://127.0.0.1:{}", free_port()), &KEY);
    assert_eq!(down.verify(&host, SIGNED).await.unwrap().verified.len(), 2);
    assert!(down.heard.count(SharedCacheEvent::Error) >= 1);
    assert!(matches!(
        down.verify(&host, UNSIGNED).await,
        Err(ImageError::NoSignature { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_cache_that_never_answers_costs_a_bounded_wait_then_a_pause() {
    let (host, _) = registry().await;
    // Accepts connections, reads nothing, answers nothing.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let mut settings = config(&url, &KEY);
    settings.read_wait = Duration::from_millis(25);
    settings.backoff = Duration::from_secs(60);
    let stuck = replica_with(settings);
    assert_eq!(stuck.verify(&host, SIGNED).await.unwrap().verified.len(), 2);
    assert_eq!(stuck.heard.count(SharedCacheEvent::Error), 1);
    // Pausing: the next miss does not wait for it.
    assert!(matches!(
        stuck.verify(&host, UNSIGNED).await,
        Err(ImageError::NoSignature { .. })
    ));
    assert_eq!(stuck.heard.count(SharedCacheEvent::Skipped), 1);
    assert_eq!(stuck.heard.count(SharedCacheEvent::Error), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server on PATH; run by `make test-registry`"]
async fn a_shared_cache_killed_and_restarted_stays_correct() {
    let mut redis = Redis::start();
    let (host, _) = registry().await;
    let first = replica(&redis.url(), &KEY);
    first.verify(&host, SIGNED).await.unwrap();
    first.stored(1).await;

    redis.kill();
    let during = replica(&redis.url(), &KEY);
    assert_eq!(
        during.verify(&host, SIGNED).await.unwrap().verified.len(),
        2
    );
    assert!(during.heard.count(SharedCacheEvent::Error) >= 1);
    assert!(matches!(
        during.verify(&host, UNSIGNED).await,
        Err(ImageError::NoSignature { .. })
    ));

    // Restarted empty on the same port: after its pause the same replica
    // writes again, and a fresh one reads what it wrote.
    redis.launch();
    let again = tokio::time::timeout(BOUND, async {
        loop {
            tokio::time::sleep(Duration::from_millis(60)).await;
            let probe =
                MaterialCache::with_byte_budget(TTL, 1 << 20).with_shared(during.shared.clone());
            let probe = Replica {
                client: RegistryClient::new(ClientConfig {
                    allow_insecure_all: true,
                    ..Default::default()
                })
                .unwrap(),
                material: Arc::new(probe),
                shared: during.shared.clone(),
                heard: during.heard.clone(),
            };
            assert_eq!(probe.verify(&host, SIGNED).await.unwrap().verified.len(), 2);
            if during.heard.count(SharedCacheEvent::Stored) > 0 {
                break;
            }
        }
    });
    again
        .await
        .expect("the restarted server was never written to within the bound");
    let after = replica(&redis.url(), &KEY);
    assert_eq!(after.verify(&host, SIGNED).await.unwrap().verified.len(), 2);
    assert_eq!(after.heard.count(SharedCacheEvent::Hit), 1);
    assert!(matches!(
        after.verify(&host, UNSIGNED).await,
        Err(ImageError::NoSignature { .. })
    ));
}

/// A CA, and a certificate for `localhost` it issued: (CA PEM, cert PEM, key PEM).
fn tls_files() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server on PATH; run by `make test-registry`"]
async fn replicas_share_over_tls_with_a_password_and_a_wrong_one_or_an_unknown_ca_only_costs_the_registry()
 {
    let dir = std::env::temp_dir().join(format!("sigil-shared-cache-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, cert, key) = tls_files();
    for (name, pem) in [("ca.pem", &ca), ("cert.pem", &cert), ("key.pem", &key)] {
        std::fs::write(dir.join(name), pem).unwrap();
    }
    let file = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let redis = Redis::start_with(vec![
        "--port".into(),
        "0".into(),
        "--tls-port".into(),
        "{port}".into(),
        "--tls-cert-file".into(),
        file("cert.pem"),
        "--tls-key-file".into(),
        file("key.pem"),
        "--tls-ca-cert-file".into(),
        file("ca.pem"),
        "--tls-auth-clients".into(),
        "no".into(),
        "--requirepass".into(),
        "s3cret".into(),
    ]);
    let (host, requests) = registry().await;
    let url = format!("rediss://localhost:{}", redis.port);
    let tls = |password: &str, ca: &str| {
        let mut c = config(&url, &KEY);
        c.password = Some(password.to_string());
        c.ca_pem = ca.as_bytes().to_vec();
        replica_with(c)
    };
    let first = tls("s3cret", &ca);
    assert_eq!(first.verify(&host, SIGNED).await.unwrap().verified.len(), 2);
    first.stored(1).await;
    let before = requests.load(Ordering::SeqCst);
    let second = tls("s3cret", &ca);
    assert_eq!(
        second.verify(&host, SIGNED).await.unwrap().verified.len(),
        2
    );
    assert_eq!(second.heard.count(SharedCacheEvent::Hit), 1);
    assert_eq!(requests.load(Ordering::SeqCst), before);

    for (what, password, roots) in [
        ("a wrong password", "wrong", ca.as_str()),
        ("an unknown CA", "s3cret", ""),
    ] {
        let refused = tls(password, roots);
        assert_eq!(
            refused.verify(&host, SIGNED).await.unwrap().verified.len(),
            2,
            "{what}"
        );
        assert_eq!(refused.heard.count(SharedCacheEvent::Error), 1, "{what}");
        assert_eq!(refused.heard.count(SharedCacheEvent::Hit), 0, "{what}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
