//! The policy judge (as the webhook, the audit and the CLI use it) on a
//! snapshot with a `notation:` authority, against a registry on 127.0.0.1
//! holding an image and testkit-minted Notary Project signatures, and the
//! signing certificate's CRL served beside them: the revocation answer is
//! fetched by the judge's own fetcher.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Response, Uri};
use serde_json::{Value, json};
use sigil_judge::judge::{ImageJudge as _, ObjectInfo, PinnedImage, PullSecrets, Verdict};
use sigil_judge::policy_judge::PolicyJudge;
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::{ClientConfig, Digest};
use sigil_testkit::notation::{self, Format, LeafSpec, NotaryPki, SignSpec};
use sigil_verifier::trust::TrustedRoot;
use tokio::time::Instant;

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const ARTIFACT_TYPE: &str = "application/vnd.cncf.notary.signature";
const DAY: i64 = 86_400;

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn desc(media_type: &str, bytes: &[u8]) -> Value {
    json!({"mediaType": media_type, "digest": Digest::of(bytes).to_string(), "size": bytes.len()})
}

/// A registry on 127.0.0.1 holding one image signed (JWS) by a PKI whose
/// signing certificate names a CRL served by the same server.
struct Signed {
    host: String,
    digest: Digest,
    root_pem: String,
    /// Requests for the CRL so far.
    crl_fetches: Arc<AtomicUsize>,
}

/// Serves the signed image; the CRL revokes the signing certificate when
/// `revoked`.
async fn signed_image(revoked: bool) -> Signed {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let t = now();
    let mut leaf = LeafSpec::new("Acme", "signer", t - DAY, t + 30 * DAY);
    leaf.crl_url = Some(format!("http://{host}/crl/leaf.crl"));
    let pki = NotaryPki::new(21, "judge", t - 100 * DAY, t + 3650 * DAY, &leaf);
    let revocations = if revoked {
        vec![(pki.leaf.serial.clone(), t - 3600)]
    } else {
        Vec::new()
    };
    let crl = notation::crl(&pki.intermediate, &revocations, t - 7200, t + DAY);

    let image = json!({"schemaVersion": 2, "mediaType": MANIFEST,
        "config": desc("application/vnd.oci.image.config.v1+json", b"{}"), "layers": []})
    .to_string()
    .into_bytes();
    let digest = Digest::of(&image);
    let spec = SignSpec::new(Format::Jws, &digest.to_string(), image.len() as u64, t - 60);
    let envelope = notation::sign(&pki, &spec);
    let empty = b"{}".to_vec();
    let signature = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": MANIFEST, "artifactType": ARTIFACT_TYPE,
        "config": desc("application/vnd.oci.empty.v1+json", &empty),
        "layers": [desc(Format::Jws.media_type(), &envelope)],
        "subject": desc(MANIFEST, &image),
    }))
    .unwrap();
    let mut entry = desc(MANIFEST, &signature);
    entry["artifactType"] = ARTIFACT_TYPE.into();
    let referrers = serde_json::to_vec(&json!({"schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [entry]}))
    .unwrap();

    let mut paths: HashMap<String, Vec<u8>> = HashMap::new();
    paths.insert(format!("/v2/acme/app/manifests/{digest}"), image);
    paths.insert(format!("/v2/acme/app/referrers/{digest}"), referrers);
    paths.insert(
        format!("/v2/acme/app/manifests/{}", Digest::of(&signature)),
        signature,
    );
    paths.insert(
        format!("/v2/acme/app/blobs/{}", Digest::of(&envelope)),
        envelope,
    );
    paths.insert(format!("/v2/acme/app/blobs/{}", Digest::of(&empty)), empty);
    paths.insert("/crl/leaf.crl".into(), crl);
    paths.insert("/v2/".into(), Vec::new());
    let paths = Arc::new(paths);
    let crl_fetches = Arc::new(AtomicUsize::new(0));
    let counter = crl_fetches.clone();
    let app = Router::new().fallback(move |uri: Uri| {
        let paths = paths.clone();
        let counter = counter.clone();
        async move {
            if uri.path().starts_with("/crl/") {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            match paths.get(uri.path()) {
                Some(body) => Response::builder()
                    .status(200)
                    .body(Body::from(body.clone()))
                    .unwrap(),
                None => Response::builder().status(404).body(Body::empty()).unwrap(),
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Signed {
        host,
        digest,
        root_pem: pki.root.cert_pem(),
        crl_fetches,
    }
}

fn snapshot(signed: &Signed) -> Vec<u8> {
    let trust_policy = json!({
        "version": "1.0",
        "trustPolicies": [{
            "name": "acme-images",
            "registryScopes": [format!("{}/acme/app", signed.host)],
            "signatureVerification": {"level": "strict"},
            "trustStores": ["ca:acme"],
            "trustedIdentities": ["x509.subject: C=US, ST=WA, O=Acme"],
        }]
    })
    .to_string();
    serde_json::to_vec(&json!({
        "apiVersion": "policy.sigil.dev/snapshot/v1",
        "revision": 1,
        "generatedAt": "2026-01-01T00:00:00Z",
        "policies": [{
            "name": "notation", "uid": "uid-notation", "generation": 1, "resourceVersion": "1",
            "spec": {"images": [{"glob": "**"}], "authorities": [{"name": "acme", "notation": {
                "trustPolicy": trust_policy,
                "trustStores": [{"name": "ca/acme", "certificates": signed.root_pem}],
            }}]},
        }],
        "trustRoots": [],
    }))
    .unwrap()
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

/// Judges the signed image; with `trusted_root`, the trust store holds
/// that root instead of the signer's.
async fn judged(revoked: bool, trusted_root: Option<String>) -> (Verdict, Signed) {
    let mut signed = signed_image(revoked).await;
    if let Some(root) = trusted_root {
        signed.root_pem = root;
    }
    let config = ClientConfig {
        allow_insecure_all: true,
        ..ClientConfig::default()
    };
    let judge = PolicyJudge::new(
        config,
        TrustedRoot::public_good().unwrap(),
        "public-good",
        NoMatchPolicy::Deny,
    )
    .unwrap();
    judge.apply_bytes(&snapshot(&signed)).unwrap();
    let image = PinnedImage {
        image: format!("{}/acme/app@{}", signed.host, signed.digest),
        digest: signed.digest.to_string(),
    };
    let verdict = judge
        .judge(
            &image,
            &object(),
            &PullSecrets::anonymous(),
            Instant::now() + Duration::from_secs(8),
        )
        .await;
    (verdict, signed)
}

#[tokio::test]
async fn a_notation_signed_image_whose_certificate_its_crl_does_not_revoke_is_admitted() {
    let (verdict, signed) = judged(false, None).await;
    assert!(verdict.allowed, "{verdict:?}");
    assert_eq!(signed.crl_fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_crl_of_a_chain_outside_the_trust_store_is_never_fetched() {
    let t = now();
    let stranger = NotaryPki::new(
        22,
        "stranger",
        t - 100 * DAY,
        t + 3650 * DAY,
        &LeafSpec::new("Acme", "signer", t - DAY, t + 30 * DAY),
    );
    let (verdict, signed) = judged(false, Some(stranger.root.cert_pem())).await;
    assert!(!verdict.allowed, "{verdict:?}");
    let reasons = verdict.reasons.join("\n");
    assert!(
        reasons.contains("does not lead to trust stores ca:acme"),
        "{reasons}"
    );
    assert_eq!(signed.crl_fetches.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_notation_signature_whose_certificate_its_crl_revokes_is_denied_naming_the_crl() {
    let (verdict, signed) = judged(true, None).await;
    assert!(!verdict.allowed, "{verdict:?}");
    let reasons = verdict.reasons.join("\n");
    let expected = format!(
        "authority acme (notation): trust policy statement `acme-images`: {host}/acme/app@sha256:",
        host = signed.host
    );
    assert!(reasons.contains(&expected), "{reasons}");
    assert!(
        reasons.contains(&format!(
            "Notary Project revocation check failed: certificate `C=US, ST=WA, O=Acme, \
             CN=signer` is revoked (CRL http://{}/crl/leaf.crl)",
            signed.host
        )),
        "{reasons}"
    );
}
