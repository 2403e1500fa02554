//! One slow registry never delays admissions for images on other
//! registries: reviews for a registry that accepts connections and never
//! answers are in flight (more of them than its per-host bound) while a
//! load of reviews for a fast registry runs through the same webhook. Every
//! fast review is answered — allowed — before the first slow one is; the
//! slow ones are denied at the deadline, naming the registry. And one
//! namespace whose ImagePolicy sends its signature lookups to a hanging host
//! never holds the slots of the registry its images are on: another
//! namespace's images there are admitted before any of its own is
//! answered. Latencies are printed, not asserted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Response, Uri};
use common::{config, message, post, response};
use futures_util::StreamExt as _;
use serde_json::json;
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::egress::{AddressPolicy, parse_net};
use sigil_registry::{ClientConfig, Limits};
use sigil_verifier::trust::TrustedRoot;
use sigil_webhook::admit::{Admission, AdmissionConfig};
use sigil_webhook::metrics::Metrics;
use sigil_webhook::policy_judge::PolicyJudge;
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::{AppState, router};
use sigil_webhook::slots::HostSlots;
use tokio::net::TcpListener;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
const IMAGE: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";

const SLOW_REVIEWS: usize = 48;
const FAST_REVIEWS: usize = 64;
const CONCURRENCY: usize = 16;

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

/// The sample image and its real signature, under any repository name.
async fn fast_registry() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = Router::new().fallback(|uri: Uri| async move {
        let path = uri.path();
        let body = if path.ends_with(&format!("/referrers/{IMAGE}")) {
            Some(sample("olareg/referrers.json"))
        } else if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
            Some(sample("olareg/new-sig.manifest.json"))
        } else if path.ends_with(&format!("/blobs/{SIG_BUNDLE}")) {
            Some(sample("olareg/new-sig.bundle.json"))
        } else {
            None
        };
        match body {
            Some(b) => Response::builder().status(200).body(Body::from(b)).unwrap(),
            None => Response::builder().status(404).body(Body::empty()).unwrap(),
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Accepts connections and never answers.
async fn hanging_registry() -> String {
    hanging_registry_counting().await.0
}

/// A [`hanging_registry`] that counts the connections it accepted.
async fn hanging_registry_counting() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (addr, accepted)
}

fn review(uid: String, image: String) -> Vec<u8> {
    review_in("shop", uid, image)
}

fn review_in(namespace: &str, uid: String, image: String) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "p", "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "ci"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "p", "namespace": namespace},
                       "spec": {"containers": [{"name": "c", "image": image}]}},
        },
    }))
    .unwrap()
}

/// `FAST_REVIEWS` reviews of distinct images on `fast` (numbered from
/// `first`), `CONCURRENCY` at a time: (latency, answered at, allowed) each,
/// and the wall time of the whole load.
async fn fast_load(
    router: &Router,
    fast: &str,
    first: usize,
    start: Instant,
) -> (Vec<(Duration, Duration, bool)>, Duration) {
    let began = Instant::now();
    let results = futures_util::stream::iter(first..first + FAST_REVIEWS)
        .map(|i| {
            let router = router.clone();
            let body = review(format!("fast-{i}"), format!("{fast}/team/app{i}@{IMAGE}"));
            async move {
                let sent = Instant::now();
                let (_, answer) = post(&router, "/validate", body).await;
                let allowed = response(&answer)["allowed"] == true;
                (sent.elapsed(), start.elapsed(), allowed)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    (results, began.elapsed())
}

fn summary(results: &[(Duration, Duration, bool)], total: Duration) -> String {
    let mut latencies: Vec<Duration> = results.iter().map(|(l, _, _)| *l).collect();
    latencies.sort();
    format!(
        "{:.0} reviews/s, latency p50 {:?} p99 {:?} max {:?}",
        results.len() as f64 / total.as_secs_f64(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1],
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_registry_does_not_delay_admissions_for_other_registries_under_load() {
    let fast = fast_registry().await;
    let slow = hanging_registry().await;
    let judge = PolicyJudge::new(
        ClientConfig {
            allow_insecure_all: true,
            addresses: AddressPolicy::without_loopback().allow(parse_net("127.0.0.0/8").unwrap()),
            limits: Limits {
                request_timeout: Duration::from_secs(10),
                total_deadline: Duration::from_secs(10),
                ..Limits::default()
            },
            slots: Some(Arc::new(HostSlots::new(CONCURRENCY))),
            ..ClientConfig::default()
        },
        TrustedRoot::public_good().unwrap(),
        "public-good",
        NoMatchPolicy::Deny,
    )
    .unwrap();
    let key = String::from_utf8(sample("cosign.pub")).unwrap();
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
    // The chart's default timeout (10 s) and margin: a 9 s deadline.
    let admission = Admission::new(
        Arc::new(judge),
        NoPullSecrets,
        AdmissionConfig {
            timeout: Duration::from_secs(10),
            ..config()
        },
        Arc::new(Metrics::new()),
    );
    let router = router(AppState::new(admission));
    let start = Instant::now();

    // The same load alone first, for comparison.
    let (alone, alone_total) = fast_load(&router, &fast, 10_000, start).await;
    assert!(alone.iter().all(|(_, _, ok)| *ok));
    let start = Instant::now();

    // Slow reviews first, three times the per-host bound, each a distinct
    // image so none is coalesced with another.
    let slow_tasks: Vec<_> = (0..SLOW_REVIEWS)
        .map(|i| {
            let router = router.clone();
            let body = review(format!("slow-{i}"), format!("{slow}/team/app{i}@{IMAGE}"));
            tokio::spawn(async move {
                let (_, answer) = post(&router, "/validate", body).await;
                (answer, start.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The load: distinct images (no verdict or material cache hit), 16 at a
    // time, as an API server under load would send them.
    let (fast_results, fast_total) = fast_load(&router, &fast, 0, start).await;

    let mut slow_results = Vec::new();
    for t in slow_tasks {
        slow_results.push(t.await.unwrap());
    }

    assert!(
        fast_results.iter().all(|(_, _, ok)| *ok),
        "every fast image is admitted"
    );
    let last_fast = fast_results.iter().map(|(_, at, _)| *at).max().unwrap();
    let first_slow = slow_results.iter().map(|(_, at)| *at).min().unwrap();
    assert!(
        last_fast < first_slow,
        "the fast load finished ({last_fast:?}) before any slow review was answered ({first_slow:?})"
    );
    for (answer, _) in &slow_results {
        let resp = response(answer);
        assert_eq!(resp["allowed"], false, "{resp}");
        let msg = message(resp);
        assert!(
            msg.contains(&format!("registry {slow}")) && msg.contains("deadline"),
            "the denial names the registry that did not answer: {msg}"
        );
    }
    let last_slow = slow_results.iter().map(|(_, at)| *at).max().unwrap();
    assert!(
        last_slow < Duration::from_secs(12),
        "slow reviews are bounded by the deadline: {last_slow:?}"
    );

    println!(
        "{FAST_REVIEWS} cold reviews for a fast registry, {CONCURRENCY} at a time: alone {}; \
         while {SLOW_REVIEWS} reviews wait on a hanging registry {}; those denied between \
         {first_slow:?} and {last_slow:?}",
        summary(&alone, alone_total),
        summary(&fast_results, fast_total),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaces_hanging_signature_source_never_holds_the_slots_of_anothers_registry() {
    let fast = fast_registry().await;
    let (slow, accepted) = hanging_registry_counting().await;
    let judge = PolicyJudge::new(
        ClientConfig {
            allow_insecure_all: true,
            addresses: AddressPolicy::without_loopback().allow(parse_net("127.0.0.0/8").unwrap()),
            limits: Limits {
                request_timeout: Duration::from_secs(5),
                total_deadline: Duration::from_secs(5),
                ..Limits::default()
            },
            slots: Some(Arc::new(HostSlots::new(CONCURRENCY))),
            ..ClientConfig::default()
        },
        TrustedRoot::public_good().unwrap(),
        "public-good",
        NoMatchPolicy::Deny,
    )
    .unwrap();
    let key = String::from_utf8(sample("cosign.pub")).unwrap();
    let authority = |source: Option<String>| {
        let mut a = json!({"name": "release", "key": {"data": key}, "ctlog": {}});
        if let Some(oci) = source {
            a["source"] = json!([{"oci": oci}]);
        }
        a
    };
    // The cluster requires the signature beside each image; namespace
    // `noisy` requires one from a repository on a host that never answers.
    judge
        .apply_bytes(
            &serde_json::to_vec(&json!({
                "apiVersion": "policy.sigil.dev/snapshot/v3", "revision": 1,
                "generatedAt": "2026-01-01T00:00:00Z", "trustRoots": [],
                "policies": [
                    {"name": "all", "uid": "u1", "generation": 1, "resourceVersion": "1",
                     "spec": {"images": [{"glob": "**"}], "authorities": [authority(None)]}},
                    {"name": "hanging-source", "namespace": "noisy", "uid": "u2",
                     "generation": 1, "resourceVersion": "1",
                     "spec": {"images": [{"glob": format!("{fast}/**")}],
                              "authorities": [authority(Some(format!("{slow}/sigs")))]}},
                ],
            }))
            .unwrap(),
        )
        .unwrap();
    let admission = Admission::new(
        Arc::new(judge),
        NoPullSecrets,
        AdmissionConfig {
            timeout: Duration::from_secs(6),
            ..config()
        },
        Arc::new(Metrics::new()),
    );
    let router = router(AppState::new(admission));
    let start = Instant::now();

    // Three times the per-host bound of distinct images on the fast
    // registry, judged in `noisy`: each one waits on the hanging host.
    let noisy: Vec<_> = (0..3 * CONCURRENCY)
        .map(|i| {
            let router = router.clone();
            let body = review_in(
                "noisy",
                format!("noisy-{i}"),
                format!("{fast}/noisy/app{i}@{IMAGE}"),
            );
            tokio::spawn(async move {
                let (_, answer) = post(&router, "/validate", body).await;
                (answer, start.elapsed())
            })
        })
        .collect();
    // Until they hold every slot the hanging host has (bounded wait).
    for _ in 0..200 {
        if accepted.load(Ordering::SeqCst) >= CONCURRENCY {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(accepted.load(Ordering::SeqCst) >= CONCURRENCY);

    // Another namespace's images on the fast registry, all at once.
    let quiet: Vec<_> = (0..CONCURRENCY)
        .map(|i| {
            let router = router.clone();
            let body = review_in(
                "quiet",
                format!("quiet-{i}"),
                format!("{fast}/quiet/app{i}@{IMAGE}"),
            );
            tokio::spawn(async move {
                let (_, answer) = post(&router, "/validate", body).await;
                (answer, start.elapsed())
            })
        })
        .collect();
    let mut quiet_results = Vec::new();
    for t in quiet {
        quiet_results.push(t.await.unwrap());
    }
    let mut noisy_results = Vec::new();
    for t in noisy {
        noisy_results.push(t.await.unwrap());
    }

    for (answer, _) in &quiet_results {
        assert_eq!(response(answer)["allowed"], true, "{answer}");
    }
    let last_quiet = quiet_results.iter().map(|(_, at)| *at).max().unwrap();
    let first_noisy = noisy_results.iter().map(|(_, at)| *at).min().unwrap();
    assert!(
        last_quiet < first_noisy,
        "namespace quiet was answered ({last_quiet:?}) before any review of namespace noisy \
         ({first_noisy:?}), which waited on the hanging host"
    );
    for (answer, _) in &noisy_results {
        let resp = response(answer);
        assert_eq!(resp["allowed"], false, "{resp}");
        assert!(message(resp).contains("deadline"), "{}", message(resp));
    }
    println!(
        "{CONCURRENCY} reviews in namespace quiet all admitted by {last_quiet:?}; the \
         {} of namespace noisy denied at the deadline from {first_noisy:?}",
        noisy_results.len()
    );
}
