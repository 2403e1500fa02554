//! Discovery's round trips and concurrency, against mock registries on
//! 127.0.0.1 serving real cosign output from `scripts/samples/olareg`: how
//! long the chain of dependent requests is for an unsigned image, a legacy
//! signature and a bundle referrer; that independent requests are in flight
//! together, never more per host than the bound; and that the candidates
//! come out in the listing's order whichever request finished first.
//! Nothing here reads a clock: the mocks count what reaches them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode, Uri};
use sigil_registry::image::{
    ImageError, ImagePolicy, ImageVerdict, VerifyImageOptions, verify_image,
};
use sigil_registry::{
    CandidateFormat, ClientConfig, Digest, Discovery, DiscoveryOptions, Limits, Material,
    RegistryClient, Repository, RequestObserver, RequestOutcome, Want,
};
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{SignerPolicy, VerificationPolicy};
use tokio::net::TcpListener;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
const IMAGE: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";
const LEGACY_LAYER: &str =
    "sha256:eee991a554d37e3b5ccc432e67ef08e1412c9467957d0acea8ead054793e07f3";
const BUNDLE_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

/// A mock's answer to one request, sent after `delay`.
struct Answer {
    status: StatusCode,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    delay: Duration,
}

/// What a mock saw: every path, and the most requests it held at once.
#[derive(Debug, Default)]
struct Traffic {
    paths: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Traffic {
    fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    fn count(&self, part: &str) -> usize {
        self.paths
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.contains(part))
            .count()
    }
}

/// Serves `answer` on 127.0.0.1, each answer after its delay, counting
/// the requests in flight; returns `host:port` and the traffic.
async fn registry(
    answer: impl Fn(&Uri, Option<&str>) -> Answer + Send + Sync + 'static,
) -> (String, Arc<Traffic>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let traffic = Arc::new(Traffic::default());
    let answer = Arc::new(answer);
    let seen = traffic.clone();
    let app = Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
        let (answer, seen) = (answer.clone(), seen.clone());
        async move {
            seen.paths.lock().unwrap().push(uri.to_string());
            let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.max_in_flight.fetch_max(now, Ordering::SeqCst);
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
            let a = answer(&uri, auth);
            tokio::time::sleep(a.delay).await;
            seen.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut r = Response::builder().status(a.status);
            for (k, v) in a.headers {
                r = r.header(k, v);
            }
            r.body(Body::from(a.body)).unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, traffic)
}

fn ok(body: Vec<u8>) -> Answer {
    Answer {
        status: StatusCode::OK,
        headers: Vec::new(),
        body,
        delay: Duration::ZERO,
    }
}

fn not_found() -> Answer {
    Answer {
        status: StatusCode::NOT_FOUND,
        body: b"not found".to_vec(),
        ..ok(Vec::new())
    }
}

fn index(entries: &[(String, &str)]) -> Vec<u8> {
    let m: Vec<_> = entries
        .iter()
        .map(|(d, at)| serde_json::json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 1, "artifactType": at}))
        .collect();
    serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": m})).unwrap()
}

/// The legacy tag of the sample image.
fn sig_tag() -> String {
    Digest::parse(IMAGE).unwrap().tag_stem() + ".sig"
}

/// Counts the discoveries the client reports, and their round trips.
#[derive(Debug, Default)]
struct Heard {
    discoveries: AtomicU32,
    round_trips: AtomicU32,
}

impl RequestObserver for Heard {
    fn observe(&self, _host: &str, _outcome: RequestOutcome, _waited: Duration) {}

    fn discovered(&self, round_trips: u32) {
        self.discoveries.fetch_add(1, Ordering::SeqCst);
        self.round_trips.store(round_trips, Ordering::SeqCst);
    }
}

fn client(limits: Limits, heard: Option<Arc<Heard>>) -> RegistryClient {
    RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        limits,
        observer: heard.map(|h| h as _),
        ..Default::default()
    })
    .unwrap()
}

fn limits() -> Limits {
    Limits {
        request_timeout: Duration::from_secs(5),
        total_deadline: Duration::from_secs(20),
        ..Limits::default()
    }
}

async fn discover_in(host: &str, client: &RegistryClient, want: &Want) -> Discovery {
    let repo = Repository::parse(&format!("{host}/test/app")).unwrap();
    let session = client.session();
    sigil_registry::discover::discover(
        &session,
        &repo,
        &Digest::parse(IMAGE).unwrap(),
        want,
        &DiscoveryOptions::default(),
    )
    .await
}

async fn verify(host: &str) -> Result<ImageVerdict, ImageError> {
    let key = PublicKey::from_pem(&String::from_utf8(sample("cosign.pub")).unwrap()).unwrap();
    let policy = ImagePolicy {
        verification: VerificationPolicy {
            signer: SignerPolicy::Key(key),
            require_tlog: false,
            key_hash: None,
        },
        want: Want::Signatures,
    };
    verify_image(
        &format!("{host}/test/app@{IMAGE}"),
        &policy,
        &TrustedRoot::public_good().unwrap(),
        &client(limits(), None),
        &VerifyImageOptions::default(),
    )
    .await
}

#[tokio::test]
async fn an_unsigned_image_costs_one_round_trip_where_the_referrers_api_answers() {
    let (host, _) = registry(|uri, _| {
        if uri.path().contains("/referrers/") {
            return ok(index(&[]));
        }
        not_found()
    })
    .await;
    let heard = Arc::new(Heard::default());
    let found = discover_in(
        &host,
        &client(limits(), Some(heard.clone())),
        &Want::Signatures,
    )
    .await;
    assert_eq!(found.round_trips, 1, "{found:?}");
    assert!(found.candidates.is_empty() && found.errors.is_empty());
    assert_eq!(
        found.looked_in,
        [
            format!("referrers API of {host}/test/app@{IMAGE}"),
            format!("{host}/test/app:{}", sig_tag()),
        ]
    );
    assert_eq!(heard.discoveries.load(Ordering::SeqCst), 1);
    assert_eq!(heard.round_trips.load(Ordering::SeqCst), 1);
    let e = verify(&host).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "no signature found for {host}/test/app@{IMAGE} (looked in referrers API of {host}/test/app@{IMAGE}, {host}/test/app:{})",
            sig_tag()
        )
    );
}

#[tokio::test]
async fn an_unsigned_image_costs_two_round_trips_where_the_fallback_tag_follows_a_404() {
    let (host, traffic) = registry(|_, _| not_found()).await;
    let found = discover_in(&host, &client(limits(), None), &Want::Signatures).await;
    assert_eq!(found.round_trips, 2, "{found:?}");
    assert_eq!(
        found.looked_in,
        [
            format!(
                "referrers fallback tag {host}/test/app:{}",
                Digest::parse(IMAGE).unwrap().tag_stem()
            ),
            format!("{host}/test/app:{}", sig_tag()),
        ]
    );
    // The API, its fallback tag and the legacy tag: one request each.
    assert_eq!(traffic.paths.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_legacy_signature_costs_two_round_trips() {
    let tag = sig_tag();
    let (host, _) = registry(move |uri, _| {
        let path = uri.path();
        if path.contains("/referrers/") {
            return ok(index(&[]));
        }
        if path.ends_with(&format!("/manifests/{tag}")) {
            return ok(sample("olareg/legacy-sig.manifest.json"));
        }
        if path.ends_with(&format!("/blobs/{LEGACY_LAYER}")) {
            return ok(sample("olareg/legacy-sig.layer.json"));
        }
        not_found()
    })
    .await;
    let found = discover_in(&host, &client(limits(), None), &Want::Signatures).await;
    assert_eq!(found.round_trips, 2, "{found:?}");
    assert!(found.errors.is_empty(), "{:?}", found.errors);
    assert_eq!(found.candidates.len(), 1);
    let c = &found.candidates[0];
    assert_eq!(c.format, CandidateFormat::LegacySignature);
    assert_eq!(
        c.location,
        format!("{host}/test/app:{} layer 0 ({LEGACY_LAYER})", sig_tag())
    );
    match &c.material {
        Material::SimpleSigning {
            payload,
            annotations,
        } => {
            assert_eq!(payload, &sample("olareg/legacy-sig.layer.json"));
            assert!(annotations.contains_key("dev.cosignproject.cosign/signature"));
        }
        other => panic!("not a simple-signing candidate: {other:?}"),
    }
    let v = verify(&host).await.unwrap();
    assert_eq!(v.verified.len(), 1);
    assert_eq!(v.verified[0].format, CandidateFormat::LegacySignature);
}

#[tokio::test]
async fn a_bundle_referrer_costs_three_round_trips() {
    let (host, traffic) = registry(|uri, _| {
        let path = uri.path();
        if path.contains("/referrers/") {
            // The real listing: the signature and a provenance attestation.
            return ok(sample("olareg/referrers.json"));
        }
        if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
            return ok(sample("olareg/new-sig.manifest.json"));
        }
        if path.ends_with(&format!("/blobs/{SIG_BUNDLE}")) {
            return ok(sample("olareg/new-sig.bundle.json"));
        }
        not_found()
    })
    .await;
    let found = discover_in(&host, &client(limits(), None), &Want::Signatures).await;
    assert_eq!(found.round_trips, 3, "{found:?}");
    assert_eq!(found.candidates.len(), 1);
    assert_eq!(found.candidates[0].format, CandidateFormat::BundleReferrer);
    assert_eq!(
        found.candidates[0].location,
        format!("{host}/test/app@{SIG_MANIFEST}")
    );
    assert!(
        matches!(&found.candidates[0].material, Material::Bundle(b) if *b == sample("olareg/new-sig.bundle.json"))
    );
    // The attestation's listing names its predicate type: never fetched.
    assert_eq!(found.skipped.len(), 1, "{:?}", found.skipped);
    assert!(found.skipped[0].contains("https://slsa.dev/provenance/v0.2"));
    assert_eq!(traffic.count("/manifests/sha256:954e9e"), 0);
    let v = verify(&host).await.unwrap();
    assert_eq!(v.verified.len(), 1);
    assert_eq!(v.verified[0].format, CandidateFormat::BundleReferrer);
    // Requests made, not the chain: the list, the .sig tag, manifest, blob.
    assert_eq!(v.round_trips, 4);
}

/// A referrer manifest of the sample signature told apart by `n`, with its digest.
fn numbered_referrer(n: usize) -> (String, Vec<u8>) {
    let mut m: serde_json::Value =
        serde_json::from_slice(&sample("olareg/new-sig.manifest.json")).unwrap();
    m["annotations"]["test.sigil.dev/n"] = serde_json::json!(n.to_string());
    let body = serde_json::to_vec(&m).unwrap();
    (Digest::of(&body).to_string(), body)
}

/// A registry listing `n` referrers of the sample signature, each request
/// answered after `delay(path)`.
async fn many_referrers(
    n: usize,
    delay: impl Fn(&str) -> Duration + Send + Sync + 'static,
) -> (String, Arc<Traffic>, Vec<String>) {
    let referrers: Vec<(String, Vec<u8>)> = (0..n).map(numbered_referrer).collect();
    let listing = index(
        &referrers
            .iter()
            .map(|(d, _)| (d.clone(), BUNDLE_TYPE))
            .collect::<Vec<_>>(),
    );
    let digests = referrers.iter().map(|(d, _)| d.clone()).collect();
    let (host, traffic) = registry(move |uri, _| {
        let path = uri.path();
        let answer = if path.contains("/referrers/") {
            ok(listing.clone())
        } else if path.ends_with(&format!("/blobs/{SIG_BUNDLE}")) {
            ok(sample("olareg/new-sig.bundle.json"))
        } else if let Some((_, body)) = referrers
            .iter()
            .find(|(d, _)| path.ends_with(&format!("/manifests/{d}")))
        {
            ok(body.clone())
        } else {
            not_found()
        };
        Answer {
            delay: delay(path),
            ..answer
        }
    })
    .await;
    (host, traffic, digests)
}

#[tokio::test]
async fn independent_requests_run_together_within_the_bound_per_host() {
    let (host, traffic, digests) = many_referrers(6, |_| Duration::from_millis(200)).await;
    let bounded = Limits {
        max_session_requests_per_host: 3,
        ..limits()
    };
    let found = discover_in(&host, &client(bounded, None), &Want::Signatures).await;
    assert_eq!(found.candidates.len(), 6, "{found:?}");
    assert!(
        found
            .candidates
            .iter()
            .all(|c| matches!(c.material, Material::Bundle(_)))
    );
    // Six manifests and six blobs, each blob after its manifest.
    assert_eq!(found.round_trips, 3);
    assert_eq!(traffic.count("/manifests/sha256:"), 6);
    assert_eq!(traffic.count("/blobs/"), 6);
    // Six manifests waiting on none of each other fill the bound; the
    // referrers list and the .sig tag alone would make two.
    let most = traffic.max_in_flight();
    assert!(
        most > 2,
        "the referrers' manifests were fetched one at a time"
    );
    assert!(most <= 3, "{most} requests in flight past the bound of 3");
    assert_eq!(
        found
            .candidates
            .iter()
            .map(|c| c.location.clone())
            .collect::<Vec<_>>(),
        digests
            .iter()
            .map(|d| format!("{host}/test/app@{d}"))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_bound_of_one_request_per_host_keeps_discovery_to_one_request_at_a_time() {
    let (host, traffic, _) = many_referrers(4, |_| Duration::from_millis(200)).await;
    let one = Limits {
        max_session_requests_per_host: 1,
        ..limits()
    };
    let found = discover_in(&host, &client(one, None), &Want::Signatures).await;
    assert_eq!(found.candidates.len(), 4, "{found:?}");
    assert_eq!(traffic.max_in_flight(), 1);
    // The chain is the same: the bound delays requests, it orders none.
    assert_eq!(found.round_trips, 3);
}

#[tokio::test]
async fn candidates_keep_the_listing_order_whichever_answer_comes_first() {
    // The first-listed referrer answers last, the last-listed first.
    let (host, _, digests) = many_referrers(5, |path| {
        let n = (0..5)
            .find(|n| path.ends_with(&format!("/manifests/{}", numbered_referrer(*n).0)))
            .map_or(0, |n| 5 - n);
        Duration::from_millis(60 * n as u64)
    })
    .await;
    let first = discover_in(&host, &client(limits(), None), &Want::Signatures).await;
    let second = discover_in(&host, &client(limits(), None), &Want::Signatures).await;
    let locations = |d: &Discovery| {
        d.candidates
            .iter()
            .map(|c| c.location.clone())
            .collect::<Vec<_>>()
    };
    let listed: Vec<String> = digests
        .iter()
        .map(|d| format!("{host}/test/app@{d}"))
        .collect();
    assert_eq!(locations(&first), listed);
    assert_eq!(locations(&second), listed);
}

#[tokio::test]
async fn requests_started_together_share_one_token_exchange() {
    let tokens = Arc::new(AtomicUsize::new(0));
    let issued = tokens.clone();
    let referrers: Vec<(String, Vec<u8>)> = (0..4).map(numbered_referrer).collect();
    let listing = index(
        &referrers
            .iter()
            .map(|(d, _)| (d.clone(), BUNDLE_TYPE))
            .collect::<Vec<_>>(),
    );
    let realm: Arc<Mutex<String>> = Arc::default();
    let realm_url = realm.clone();
    let (host, traffic) = registry(move |uri, auth| {
        let path = uri.path();
        if path == "/token" {
            issued.fetch_add(1, Ordering::SeqCst);
            return ok(br#"{"token":"t"}"#.to_vec());
        }
        if auth != Some("Bearer t") {
            let realm = realm_url.lock().unwrap().clone();
            return Answer {
                status: StatusCode::UNAUTHORIZED,
                headers: vec![(
                    "www-authenticate",
                    format!(r#"Bearer realm="{realm}",service="mock""#),
                )],
                ..ok(Vec::new())
            };
        }
        if path.contains("/referrers/") {
            return ok(listing.clone());
        }
        if path.ends_with(&format!("/blobs/{SIG_BUNDLE}")) {
            return ok(sample("olareg/new-sig.bundle.json"));
        }
        match referrers
            .iter()
            .find(|(d, _)| path.ends_with(&format!("/manifests/{d}")))
        {
            Some((_, body)) => ok(body.clone()),
            None => not_found(),
        }
    })
    .await;
    *realm.lock().unwrap() = format!("http://{host}/token");
    let found = discover_in(&host, &client(limits(), None), &Want::Signatures).await;
    assert_eq!(found.candidates.len(), 4, "{found:?}");
    assert!(
        found
            .candidates
            .iter()
            .all(|c| matches!(c.material, Material::Bundle(_))),
        "{found:?}"
    );
    assert_eq!(tokens.load(Ordering::SeqCst), 1);
    // One challenge: the requests after the first waited for its token.
    let challenged = traffic.paths.lock().unwrap().len() - 1 - 4 - 4 - 2;
    assert_eq!(challenged, 1, "{:?}", traffic.paths.lock().unwrap());
}

#[tokio::test]
async fn discoveries_of_one_image_for_several_wants_share_one_referrers_list() {
    const PROVENANCE: &str = "https://slsa.dev/provenance/v0.2";
    const ATT_MANIFEST: &str =
        "sha256:954e9edfb7705838febf15ea1022512d75acd5992963a69cde5aa7059b2613a0";
    const ATT_BUNDLE: &str =
        "sha256:34f8a0f00327d2b6a2c6e97f92c24f348d001cf15962b5f75aa36b1a925a485e";
    let (host, traffic) = registry(|uri, _| {
        let path = uri.path();
        if path.contains("/referrers/") {
            // Slow enough that both discoveries ask while it is in flight.
            return Answer {
                delay: Duration::from_millis(200),
                ..ok(sample("olareg/referrers.json"))
            };
        }
        for (suffix, file) in [
            (
                format!("/manifests/{SIG_MANIFEST}"),
                "new-sig.manifest.json",
            ),
            (format!("/blobs/{SIG_BUNDLE}"), "new-sig.bundle.json"),
            (
                format!("/manifests/{ATT_MANIFEST}"),
                "new-att.manifest.json",
            ),
            (format!("/blobs/{ATT_BUNDLE}"), "new-att.bundle.json"),
        ] {
            if path.ends_with(&suffix) {
                return ok(sample(&format!("olareg/{file}")));
            }
        }
        not_found()
    })
    .await;
    let cache = sigil_registry::MaterialCache::new(Duration::from_secs(60), 16);
    let client = client(limits(), None);
    let repo = Repository::parse(&format!("{host}/test/app")).unwrap();
    let digest = Digest::parse(IMAGE).unwrap();
    let options = DiscoveryOptions::default();
    let (sig_session, att_session) = (client.session(), client.session());
    let attestations = Want::Attestations(PROVENANCE.into());
    let (signatures, provenance) = tokio::join!(
        cache.discover(
            "anonymous",
            &sig_session,
            &repo,
            &digest,
            &Want::Signatures,
            &options
        ),
        cache.discover(
            "anonymous",
            &att_session,
            &repo,
            &digest,
            &attestations,
            &options
        ),
    );
    assert_eq!(traffic.count("/referrers/"), 1);
    for (found, manifest) in [(&signatures, SIG_MANIFEST), (&provenance, ATT_MANIFEST)] {
        assert_eq!(found.candidates.len(), 1, "{found:?}");
        assert_eq!(
            found.candidates[0].location,
            format!("{host}/test/app@{manifest}")
        );
        assert!(matches!(found.candidates[0].material, Material::Bundle(_)));
        assert_eq!(found.round_trips, 3);
    }
    // Each skipped the other's referrer by its listed predicate type.
    assert_eq!(signatures.skipped.len(), 1);
    assert_eq!(provenance.skipped.len(), 1);
    // Nothing is kept: a list asked later is asked again (another tag
    // prefix, so the material cache holds nothing for it either).
    let third = client.session();
    let prefixed = DiscoveryOptions {
        tag_prefix: "x-".into(),
        ..DiscoveryOptions::default()
    };
    let again = cache
        .discover(
            "anonymous",
            &third,
            &repo,
            &digest,
            &Want::Signatures,
            &prefixed,
        )
        .await;
    assert_eq!(again.candidates.len(), 1);
    assert_eq!(traffic.count("/referrers/"), 2);
}
