//! Denial of service by inputs: the worst inputs an attacker controls —
//! the largest and the most deeply nested AdmissionReviews, every container
//! list and image volume full, and a hostile registry answering every
//! verification with the most referrers, each with a large bundle — are
//! answered (allowed, or denied with a cause), never crash, within bounded
//! time and memory. The peak RSS (VmHWM) of this process after each phase
//! is printed; performance is reported, not asserted.
//!
//! One test in its own binary, so the peak RSS is this test's alone.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Response, Uri};
use common::{FakeJudge, app_with, config, message, post, response};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::egress::{AddressPolicy, parse_net};
use sigil_registry::{ClientConfig, Limits, MemoryBudget};
use sigil_verifier::trust::TrustedRoot;
use sigil_webhook::admit::{Admission, AdmissionConfig};
use sigil_webhook::images::MAX_CONTAINERS;
use sigil_webhook::metrics::Metrics;
use sigil_webhook::policy_judge::PolicyJudge;
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::{AppState, router};
use tokio::net::TcpListener;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn report(phase: &str, started: Instant) {
    println!(
        "{phase}: {:.0} ms, peak RSS so far {:.1} MiB",
        started.elapsed().as_secs_f64() * 1000.0,
        peak_rss_mib()
    );
}

fn review(spec: Value, padding: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "worst-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "big", "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "mallory"},
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "big", "namespace": "shop",
                             "annotations": {"padding": "x".repeat(padding)}},
                "spec": spec,
            },
        },
    }))
    .unwrap()
}

fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A registry answering any image with `REFERRERS` bundle referrers whose
/// manifests are valid (their digests match) and share one large bundle
/// blob. Bodies are shared `Bytes`, so the registry's own memory stays out
/// of the measurement.
struct Hostile {
    referrers: Bytes,
    manifests: Vec<(String, Bytes)>,
    blob_digest: String,
    blob: Bytes,
}

const REFERRERS: usize = 128;
const BUNDLE_BYTES: usize = 1 << 20;

impl Hostile {
    fn new(subject_for_all: &str) -> Self {
        let blob = format!("{{\"mediaType\":\"{}\"}}", "a".repeat(BUNDLE_BYTES)).into_bytes();
        let blob_digest = digest_of(&blob);
        let bundle = "application/vnd.dev.sigstore.bundle.v0.3+json";
        let manifests: Vec<(String, Bytes)> = (0..REFERRERS)
            .map(|i| {
                let m = serde_json::to_vec(&json!({
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "artifactType": bundle,
                    "config": {"mediaType": "application/vnd.oci.empty.v1+json",
                               "digest": digest_of(b"{}"), "size": 2},
                    "layers": [{"mediaType": bundle, "digest": blob_digest, "size": blob.len()}],
                    "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                "digest": subject_for_all, "size": 1},
                    "annotations": {"n": i.to_string()},
                }))
                .unwrap();
                (digest_of(&m), Bytes::from(m))
            })
            .collect();
        let entries: Vec<Value> = manifests
            .iter()
            .map(|(d, m)| {
                json!({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                 "digest": d, "size": m.len(), "artifactType": bundle})
            })
            .collect();
        let referrers = serde_json::to_vec(&json!({"schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries}))
        .unwrap();
        Self {
            referrers: Bytes::from(referrers),
            manifests,
            blob_digest,
            blob: Bytes::from(blob),
        }
    }

    fn answer(&self, uri: &Uri) -> Response<Body> {
        let path = uri.path();
        let body = if path.contains("/referrers/") {
            Some(self.referrers.clone())
        } else if path.ends_with(&self.blob_digest) {
            Some(self.blob.clone())
        } else {
            self.manifests
                .iter()
                .find(|(d, _)| path.ends_with(d.as_str()))
                .map(|(_, m)| m.clone())
        };
        match body {
            Some(b) => Response::builder().status(200).body(Body::from(b)).unwrap(),
            None => Response::builder().status(404).body(Body::empty()).unwrap(),
        }
    }
}

async fn serve_hostile(h: Arc<Hostile>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = Router::new().fallback(move |uri: Uri| {
        let h = h.clone();
        async move { h.answer(&uri) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worst_case_inputs_are_answered_within_bounded_memory_and_time() {
    println!("baseline: peak RSS {:.1} MiB", peak_rss_mib());

    // 1. The widest review: every list full of distinct images, padded to
    // just under the body limit.
    let list = |prefix: &str| -> Vec<Value> {
        (0..MAX_CONTAINERS)
            .map(|i| json!({"name": format!("{prefix}{i}"), "image": format!("registry.test/{prefix}/app{i}:1")}))
            .collect()
    };
    let volumes: Vec<Value> = (0..MAX_CONTAINERS)
        .map(|i| json!({"name": format!("v{i}"), "image": {"reference": format!("registry.test/vol/data{i}:1")}}))
        .collect();
    let spec = json!({"initContainers": list("init"), "containers": list("main"),
                      "ephemeralContainers": list("debug"), "volumes": volumes});
    let unpadded = review(spec.clone(), 0).len();
    let limit = AdmissionConfig::default().max_body_bytes;
    let body = review(spec, limit - unpadded - 1024);
    let judge = FakeJudge::new();
    let (small_app, _) = app_with(judge.clone(), config());
    let started = Instant::now();
    let (_, answer) = post(&small_app, "/validate", body).await;
    assert_eq!(
        response(&answer)["allowed"],
        true,
        "{}",
        message(response(&answer))
    );
    assert_eq!(judge.calls(), 4 * MAX_CONTAINERS, "every image judged");
    report(
        &format!(
            "widest review ({} images, {:.1} MiB)",
            4 * MAX_CONTAINERS,
            limit as f64 / 1048576.0
        ),
        started,
    );

    // 2. The deepest review that fits: nesting a parser could recurse on.
    let depth = limit / 2 - 1024;
    let mut deep = String::with_capacity(limit);
    deep.push_str(r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"deep-1","object":"#);
    deep.push_str(&"[".repeat(depth));
    deep.push_str(&"]".repeat(depth));
    deep.push_str("}}");
    let started = Instant::now();
    let (_, answer) = post(&small_app, "/validate", deep.into_bytes()).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{resp}");
    assert_eq!(resp["uid"], "deep-1");
    report(&format!("deepest review ({depth} levels)"), started);

    // 3. Over the limit, streamed (as a client would send it): refused
    // without being read whole.
    let started = Instant::now();
    let chunk = Bytes::from(vec![b' '; 1 << 20]);
    let chunks = (0..8 * limit / (1 << 20)).map(move |_| Ok::<_, std::io::Error>(chunk.clone()));
    let req = axum::http::Request::post("/validate")
        .header("content-type", "application/json")
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .unwrap();
    let resp = tower::ServiceExt::oneshot(small_app.clone(), req)
        .await
        .unwrap();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(response(&answer)["allowed"], false, "{answer}");
    report("review streamed at 8x the body limit", started);

    // 4. A hostile registry: every image has 128 referrers, each with a
    // 1 MiB bundle; 32 reviews of distinct images at once.
    let subject = format!("sha256:{}", "0".repeat(64));
    let hostile = Arc::new(Hostile::new(&subject));
    let host = serve_hostile(hostile).await;
    let judge = PolicyJudge::new(
        ClientConfig {
            allow_insecure_all: true,
            addresses: AddressPolicy::without_loopback().allow(parse_net("127.0.0.0/8").unwrap()),
            limits: Limits {
                request_timeout: Duration::from_secs(8),
                total_deadline: Duration::from_secs(8),
                ..Limits::default()
            },
            // The webhook's defaults (--registry-memory-mib, --registry-memory-per-host-mib).
            budget: Some(Arc::new(MemoryBudget::new(96 << 20, 32 << 20))),
            ..ClientConfig::default()
        },
        TrustedRoot::public_good().unwrap(),
        "public-good",
        NoMatchPolicy::Deny,
    )
    .unwrap();
    let key = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/samples/cosign.pub"
    ))
    .unwrap();
    judge
        .apply_bytes(
            &serde_json::to_vec(&json!({
                "apiVersion": "policy.sigil.dev/snapshot/v1", "revision": 1,
                "generatedAt": "2026-01-01T00:00:00Z", "trustRoots": [],
                "policies": [{"name": "all", "uid": "u", "generation": 1, "resourceVersion": "1",
                              "spec": {"images": [{"glob": "**"}],
                                       "authorities": [{"key": {"data": key}, "ctlog": {}}]}}],
            }))
            .unwrap(),
        )
        .unwrap();
    let admission = Admission::new(
        Arc::new(judge),
        NoPullSecrets,
        AdmissionConfig {
            timeout: Duration::from_secs(10),
            ..config()
        },
        Arc::new(Metrics::new()),
    );
    let hostile_app = router(AppState::new(admission));
    let started = Instant::now();
    let reviews = (0..32).map(|i| {
        let router = hostile_app.clone();
        let image = format!("{host}/hostile/app{i}@{subject}");
        async move {
            let body = review(json!({"containers": [{"name": "c", "image": image}]}), 0);
            post(&router, "/validate", body).await.1
        }
    });
    let answers = futures_util::future::join_all(reviews).await;
    let mut causes = std::collections::BTreeMap::<String, usize>::new();
    for a in &answers {
        let resp = response(a);
        assert_eq!(resp["allowed"], false, "{resp}");
        let msg = message(resp);
        assert!(
            msg.len() <= 40 << 10,
            "a denial stays small: {} bytes",
            msg.len()
        );
        let cause = [
            "add up to more than",
            "sigil already holds",
            "no signature",
            "deadline",
        ]
        .iter()
        .find(|c| msg.contains(*c))
        .map_or_else(|| msg.chars().take(160).collect(), |c| (*c).to_string());
        *causes.entry(cause).or_default() += 1;
    }
    report(
        &format!(
            "hostile registry: 32 concurrent images x {REFERRERS} referrers x {} KiB bundles; denials by cause {causes:?}",
            BUNDLE_BYTES / 1024
        ),
        started,
    );
}
