//! The shared cache as the webhook and the audit set it up: judges built by
//! `JudgeArgs::build` from the flags the chart passes, enforcing a policy
//! snapshot file, against a mock registry on 127.0.0.1 serving the signed
//! sample image (`scripts/samples`). With the cache down a judge admits
//! and counts the error in `sigil_shared_cache_requests_total`; with a real
//! `redis-server` (ignored by default, run by `make test-registry`) a second
//! judge admits with no registry request.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Response, StatusCode, Uri};
use clap::Parser;
use serde_json::json;
use sigil_judge::args::{Judge, JudgeArgs};
use sigil_judge::judge::{ImageJudge as _, ObjectInfo, PinnedImage, PullSecrets, Verdict};
use sigil_judge::metrics::{Metrics, SharedCacheLabels};
use sigil_judge::policy_judge::PolicyJudge;
use sigil_registry::Digest;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
const SIGNED: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const UNSIGNED: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";
const LEGACY_LAYER: &str =
    "sha256:eee991a554d37e3b5ccc432e67ef08e1412c9467957d0acea8ead054793e07f3";
/// The most any wait here may take before the test fails.
const BOUND: Duration = Duration::from_secs(20);

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

/// A registry holding the signed sample image and nothing for other
/// digests; counts requests.
async fn registry() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let sig_tag = Digest::parse(SIGNED).unwrap().tag_stem() + ".sig";
    let app = Router::new().fallback(move |uri: Uri| {
        let (counted, sig_tag) = (counted.clone(), sig_tag.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            let path = uri.path();
            let ok = |body: Vec<u8>| Response::new(Body::from(body));
            if path.ends_with(&format!("/referrers/{SIGNED}")) {
                return ok(sample("olareg/referrers.json"));
            }
            if path.contains("/referrers/") {
                return ok(br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#.to_vec());
            }
            for (suffix, file) in [
                (format!("/manifests/{SIG_MANIFEST}"), "new-sig.manifest.json"),
                (format!("/blobs/{SIG_BUNDLE}"), "new-sig.bundle.json"),
                (format!("/manifests/{sig_tag}"), "legacy-sig.manifest.json"),
                (format!("/blobs/{LEGACY_LAYER}"), "legacy-sig.layer.json"),
            ] {
                if path.ends_with(&suffix) {
                    return ok(sample(&format!("olareg/{file}")));
                }
            }
            let mut r = Response::new(Body::from("not found"));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, requests)
}

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    judge: JudgeArgs,
}

/// A directory with the policy snapshot (every image needs the sample's
/// cosign key) and a shared cache key.
fn files(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sigil-judge-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = String::from_utf8(sample("cosign.pub")).unwrap();
    let snapshot = json!({
        "apiVersion": "policy.sigil.dev/snapshot/v1", "revision": 1,
        "generatedAt": "2026-01-01T00:00:00Z", "trustRoots": [],
        "policies": [{"name": "all", "uid": "u", "generation": 1, "resourceVersion": "1",
                      "spec": {"images": [{"glob": "**"}],
                               "authorities": [{"key": {"data": key}, "ctlog": {}}]}}],
    });
    std::fs::write(
        dir.join("snapshot.json"),
        serde_json::to_vec(&snapshot).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("mac-key"),
        "an example key of more than 32 bytes\n",
    )
    .unwrap();
    dir
}

/// One replica: a judge built from the flags with the shared cache at
/// `url`, once its snapshot is in force.
struct Replica {
    judge: Arc<PolicyJudge>,
    source: JoinHandle<()>,
    metrics: Arc<Metrics>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.source.abort();
    }
}

async fn replica(dir: &Path, registry: &str, url: &str) -> Replica {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let flags = Flags::try_parse_from([
        "sigil-webhook".to_string(),
        format!("--policy-snapshot-file={}", path("snapshot.json")),
        "--snapshot-poll-seconds=1".into(),
        format!("--shared-cache-url={url}"),
        format!("--shared-cache-key-file={}", path("mac-key")),
        format!("--insecure-registry={registry}"),
        format!("--allow-registry={registry}"),
        "--allow-registry-address=127.0.0.0/8".into(),
        "--registry-credential-provider=none".into(),
    ])
    .unwrap();
    let metrics = Arc::new(Metrics::new());
    let judging = flags.judge.build(metrics.clone()).await.unwrap();
    let Judge::Snapshot { judge, source } = judging.judge else {
        panic!("a snapshot file gives a snapshot judge");
    };
    let loaded = tokio::time::timeout(BOUND, async {
        while judge.in_force().is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    loaded
        .await
        .expect("the snapshot file was not loaded within the bound");
    Replica {
        judge,
        source,
        metrics,
    }
}

impl Replica {
    async fn judge(&self, registry: &str, digest: &str) -> Verdict {
        let image = PinnedImage {
            image: format!("{registry}/team/app@{digest}"),
            digest: digest.to_string(),
        };
        let (object, secrets) = (object(), PullSecrets::anonymous());
        let deadline = Instant::now() + Duration::from_secs(9);
        let verdict = self.judge.judge(&image, &object, &secrets, deadline);
        tokio::time::timeout(BOUND, verdict)
            .await
            .expect("a judgement outlived the test's bound")
    }

    fn shared(&self, operation: &'static str, result: &'static str) -> u64 {
        self.metrics
            .shared_cache
            .get(&SharedCacheLabels { operation, result })
            .map_or(0, |c| c.get())
    }
}

fn object() -> ObjectInfo {
    let dynamic: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"}, "spec": {},
    }))
    .unwrap();
    ObjectInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        sub_resource: String::new(),
        kind: "Pod".into(),
        namespace: "shop".into(),
        name: "web".into(),
        labels: BTreeMap::new(),
        pull_secret_names: Vec::new(),
        service_account: "default".into(),
        object: Arc::new(dynamic),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_judge_whose_shared_cache_is_down_admits_and_denies_as_without_it_and_counts_the_error() {
    let dir = files("down");
    let (registry, _) = registry().await;
    let url = format!("redis://127.0.0.1:{}", free_port());
    let replica = replica(&dir, &registry, &url).await;
    let signed = replica.judge(&registry, SIGNED).await;
    assert!(signed.allowed, "{signed:?}");
    assert!(replica.shared("get", "error") >= 1);
    let unsigned = replica.judge(&registry, UNSIGNED).await;
    assert!(!unsigned.allowed, "{unsigned:?}");
    assert!(
        unsigned.reasons.iter().any(|r| r.contains("no signature")),
        "{unsigned:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `redis-server` on 127.0.0.1 without persistence, killed when dropped.
struct Redis(Child, u16);

impl Redis {
    fn start() -> Self {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (Debian's redis-server package; `make test-registry` installs it)");
        let deadline = std::time::Instant::now() + BOUND;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not listen within the bound"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self(child, port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server on PATH; run by `make test-registry`"]
async fn a_second_judge_admits_what_the_first_verified_with_no_registry_request() {
    let redis = Redis::start();
    let dir = files("shared");
    let (registry, requests) = registry().await;
    let url = format!("redis://127.0.0.1:{}", redis.1);
    let first = replica(&dir, &registry, &url).await;
    let verdict = first.judge(&registry, SIGNED).await;
    assert!(verdict.allowed, "{verdict:?}");
    let stored = tokio::time::timeout(BOUND, async {
        while first.shared("set", "stored") == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    stored.await.expect("nothing stored within the bound");

    let before = requests.load(Ordering::SeqCst);
    let second = replica(&dir, &registry, &url).await;
    let verdict = second.judge(&registry, SIGNED).await;
    assert!(verdict.allowed, "{verdict:?}");
    assert_eq!(
        requests.load(Ordering::SeqCst),
        before,
        "registry asked again"
    );
    assert_eq!(second.shared("get", "hit"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
