//! Registry answers built to exhaust the client: nesting a JSON parser could
//! recurse on (manifests, referrers lists, bundles), and more body bytes for
//! one verification than it may hold. Each ends in a typed error or an
//! unusable candidate, never a crash.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Response, Uri};
use serde_json::{Value, json};
use sigil_registry::image::{ImageError, ImagePolicy, VerifyImageOptions, verify_image};
use sigil_registry::{ClientConfig, Limits, RegistryClient, RegistryError, Repository, Want};
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{SignerPolicy, VerificationPolicy};
use tokio::net::TcpListener;

const SUBJECT: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

type Handler = dyn Fn(&str) -> Option<Vec<u8>> + Send + Sync;

async fn mock(handler: Arc<Handler>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = Router::new().fallback(move |uri: Uri| {
        let h = handler.clone();
        async move {
            match h(uri.path()) {
                Some(b) => Response::builder().status(200).body(Body::from(b)).unwrap(),
                None => Response::builder().status(404).body(Body::empty()).unwrap(),
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn digest(bytes: &[u8]) -> String {
    sigil_registry::Digest::of(bytes).to_string()
}

fn nested(depth: usize) -> Vec<u8> {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
}

fn client(limits: Limits) -> RegistryClient {
    RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        limits,
        ..ClientConfig::default()
    })
    .unwrap()
}

/// A bundle referrer of SUBJECT whose layer is `blob`; returns the
/// referrers list, the manifest and their digests.
fn referrer(blob: &[u8], n: usize) -> (String, Vec<u8>) {
    let m = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": BUNDLE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest(b"{}"), "size": 2},
        "layers": [{"mediaType": BUNDLE, "digest": digest(blob), "size": blob.len()}],
        "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": SUBJECT, "size": 1},
        "annotations": {"n": n.to_string()},
    }))
    .unwrap();
    (digest(&m), m)
}

fn index(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let list: Vec<Value> = entries
        .iter()
        .map(|(d, m)| json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": m.len(), "artifactType": BUNDLE}))
        .collect();
    serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": list})).unwrap()
}

async fn verify(
    host: &str,
    limits: Limits,
) -> Result<sigil_registry::image::ImageVerdict, ImageError> {
    let key = PublicKey::from_pem(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/samples/cosign.pub"
        ))
        .unwrap(),
    )
    .unwrap();
    let policy = ImagePolicy {
        verification: VerificationPolicy {
            signer: SignerPolicy::Key(key),
            require_tlog: false,
        },
        want: Want::Signatures,
    };
    verify_image(
        &format!("{host}/team/app@{SUBJECT}"),
        &policy,
        &TrustedRoot::public_good().unwrap(),
        &client(limits),
        &VerifyImageOptions::default(),
    )
    .await
}

#[tokio::test]
async fn deeply_nested_manifests_and_referrer_lists_are_json_errors_not_crashes() {
    let deep = nested(1 << 20);
    let host = mock(Arc::new(move |_: &str| Some(deep.clone()))).await;
    let c = client(Limits::default());
    let repo = Repository::parse(&format!("{host}/team/app")).unwrap();
    let session = c.session();
    let e = session.manifest(&repo, "v1", None).await.unwrap_err();
    assert!(matches!(e, RegistryError::Json { .. }), "{e}");
    let d = sigil_registry::Digest::parse(SUBJECT).unwrap();
    let e = session.referrers(&repo, &d).await.unwrap_err();
    assert!(matches!(e, RegistryError::Json { .. }), "{e}");
}

#[tokio::test]
async fn a_deeply_nested_bundle_is_an_unusable_candidate_not_a_crash() {
    let blob = nested(1 << 20);
    let (rd, rm) = referrer(&blob, 0);
    let list = index(&[(rd.clone(), rm.clone())]);
    let blob_digest = digest(&blob);
    let host = mock(Arc::new(move |path: &str| {
        if path.contains("/referrers/") {
            Some(list.clone())
        } else if path.ends_with(&rd) {
            Some(rm.clone())
        } else if path.ends_with(&blob_digest) {
            Some(blob.clone())
        } else {
            None
        }
    }))
    .await;
    let r = verify(&host, Limits::default()).await;
    let e = r.expect_err("a nested bundle verifies nothing");
    assert!(matches!(e, ImageError::NothingVerified { .. }), "{e}");
}

#[tokio::test]
async fn the_bodies_of_one_verification_stop_at_the_session_budget() {
    // 40 referrers with a 1 MiB bundle each: 40 MiB against a 4 MiB budget.
    let blob = format!("{{\"x\":\"{}\"}}", "a".repeat(1 << 20)).into_bytes();
    let referrers: Vec<(String, Vec<u8>)> = (0..40).map(|n| referrer(&blob, n)).collect();
    let list = index(&referrers);
    let blob_digest = digest(&blob);
    let host = mock(Arc::new(move |path: &str| {
        if path.contains("/referrers/") {
            return Some(list.clone());
        }
        if path.ends_with(&blob_digest) {
            return Some(blob.clone());
        }
        referrers
            .iter()
            .find(|(d, _)| path.ends_with(d.as_str()))
            .map(|(_, m)| m.clone())
    }))
    .await;
    let limits = Limits {
        max_session_bytes: 4 << 20,
        request_timeout: Duration::from_secs(5),
        total_deadline: Duration::from_secs(10),
        ..Limits::default()
    };
    let e = verify(&host, limits).await.expect_err("nothing verifies");
    let text = e.to_string();
    assert!(text.contains("add up to more than 4194304 bytes"), "{text}");
}
