//! A private Sigstore deployment as policy-controller users run it, judged
//! by the snapshot judge: a policy that names the deployment's Fulcio and
//! Rekor by in-cluster URL without any `trustRootRef`, an image signed by
//! that deployment (minted by the testkit, its Rekor v1 naming checkpoints
//! by its pod name) in a mock registry on 127.0.0.1, and a snapshot whose
//! default trust root is the deployment's. Without the default mark the same
//! signature is judged against the built-in public-good root and denied.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Response, Uri};
use serde_json::{Value, json};
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::{ClientConfig, Limits};
use sigil_testkit::cosign::{self, OciManifest};
use sigil_testkit::{BundleSpec, EPOCH_2020, EPOCH_2040, Identity, Testkit};
use sigil_verifier::trust::{PUBLIC_GOOD_JSON, TrustedRoot};
use sigil_webhook::judge::{ImageJudge as _, ObjectInfo, PinnedImage, PullSecrets};
use sigil_webhook::policy_judge::PolicyJudge;
use tokio::net::TcpListener;
use tokio::time::Instant;

const REPO: &str = "demo/app";

/// The testkit as a private deployment reached at in-cluster URLs, its Rekor
/// server signing checkpoints under its pod name.
fn private_sigstore() -> Testkit {
    let mut kit = Testkit::new(61);
    kit.fulcio = sigil_testkit::fulcio::FulcioCa::new(
        61,
        "fulcio",
        "http://fulcio.fulcio-system.svc",
        EPOCH_2020,
        EPOCH_2040,
    );
    kit.rekor_v1 =
        sigil_testkit::rekor::RekorV1::new(61, "rekor-v1", "http://rekor.rekor-system.svc")
            .with_hostname("rekor-server-7d9c8b5f4-x2x4l");
    kit
}

/// A registry serving an image and its cosign v3 signature by referrer.
struct Served {
    host: String,
    image: OciManifest,
}

async fn serve(kit: &Testkit) -> Served {
    let image = cosign::image("private-sigstore");
    let spec = BundleSpec {
        identity: Identity::Uri(
            "https://kubernetes.io/namespaces/default/serviceaccounts/default".into(),
        ),
        oidc_issuer: "https://kubernetes.default.svc.cluster.local".into(),
        github: None,
        ..BundleSpec::default()
    };
    let minted = cosign::image_signature_bundle(kit, &spec, &image.sha256()).unwrap();
    let referrer = cosign::bundle_referrer(
        minted.json.as_bytes(),
        cosign::COSIGN_SIGN_PREDICATE,
        image.descriptor(),
    );
    let mut files: BTreeMap<String, (&'static str, Vec<u8>)> = BTreeMap::new();
    let mut referrer_desc = referrer.descriptor();
    referrer_desc["artifactType"] = json!(cosign::BUNDLE_V03);
    files.insert(
        format!("/v2/{REPO}/referrers/{}", image.digest()),
        (
            cosign::OCI_INDEX,
            serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": cosign::OCI_INDEX,
                "manifests": [referrer_desc]}))
            .unwrap(),
        ),
    );
    for m in [&image, &referrer] {
        files.insert(
            format!("/v2/{REPO}/manifests/{}", m.digest()),
            (m.media_type, m.json.clone()),
        );
        for blob in &m.blobs {
            files.insert(
                format!("/v2/{REPO}/blobs/{}", cosign::digest_of(blob)),
                ("application/octet-stream", blob.clone()),
            );
        }
    }
    let files = Arc::new(files);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let app = Router::new().fallback(move |uri: Uri| {
        let files = files.clone();
        async move {
            match files.get(uri.path()) {
                Some((media_type, body)) => Response::builder()
                    .status(200)
                    .header("content-type", *media_type)
                    .header("docker-content-digest", cosign::digest_of(body))
                    .body(Body::from(body.clone()))
                    .unwrap(),
                None => Response::builder()
                    .status(404)
                    .body(Body::from("{}"))
                    .unwrap(),
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Served { host, image }
}

/// policy-controller's keyless example: the private Fulcio and Rekor by URL,
/// Kubernetes service-account identities, no trustRootRef.
fn private_keyless_policy() -> Value {
    json!({
        "name": "image-policy-keyless", "uid": "uid-1", "generation": 1, "resourceVersion": "1",
        "spec": {"images": [{"glob": "**"}], "authorities": [{
            "keyless": {"url": "http://fulcio.fulcio-system.svc", "identities": [{
                "issuerRegExp": ".*kubernetes.default.*",
                "subjectRegExp": ".*kubernetes.io/namespaces/default/serviceaccounts/default"}]},
            "ctlog": {"url": "http://rekor.rekor-system.svc"}}]},
    })
}

fn snapshot(revision: u64, kit: &Testkit, default: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "policy.sigil.dev/snapshot/v2",
        "revision": revision,
        "generatedAt": "2026-01-01T00:00:00Z",
        "policies": [private_keyless_policy()],
        "trustRoots": [{"name": "private-sigstore", "generation": 1,
            "trustedRootJson": kit.trusted_root_json(), "default": default}],
        "sigstore": {"instance": "public-good", "source": "embedded",
            "trustedRootJson": PUBLIC_GOOD_JSON},
    }))
    .unwrap()
}

fn judge() -> PolicyJudge {
    let config = ClientConfig {
        allow_insecure_all: true,
        limits: Limits {
            request_timeout: Duration::from_secs(3),
            total_deadline: Duration::from_secs(5),
            ..Limits::default()
        },
        ..ClientConfig::default()
    };
    let root = TrustedRoot::public_good().unwrap();
    PolicyJudge::new(config, root, "public-good", NoMatchPolicy::Deny).unwrap()
}

fn pod() -> ObjectInfo {
    let dynamic: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "demo", "namespace": "default"}, "spec": {},
    }))
    .unwrap();
    ObjectInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        sub_resource: String::new(),
        kind: "Pod".into(),
        namespace: "default".into(),
        name: "demo".into(),
        labels: BTreeMap::new(),
        pull_secret_names: Vec::new(),
        service_account: "default".into(),
        object: Arc::new(dynamic),
    }
}

#[tokio::test]
async fn a_policy_naming_a_private_sigstore_by_url_admits_its_signature_under_the_default_trust_root()
 {
    let kit = private_sigstore();
    let served = serve(&kit).await;
    let judge = judge();
    let image = PinnedImage {
        image: format!("{}/{REPO}@{}", served.host, served.image.digest()),
        digest: served.image.digest(),
    };
    let deadline = || Instant::now() + Duration::from_secs(8);

    judge.apply_bytes(&snapshot(1, &kit, true)).unwrap();
    assert_eq!(
        judge.default_trust_root().as_deref(),
        Some("private-sigstore")
    );
    let with_default = judge.versions();
    let v = judge
        .judge(&image, &pod(), &PullSecrets::anonymous(), deadline())
        .await;
    assert!(v.allowed, "{v:?}");
    assert_eq!(v.policies, ["image-policy-keyless"]);

    // The same snapshot content but nothing marked default: the authority
    // now verifies against the built-in public-good root, which does not
    // know the private Fulcio.
    judge.apply_bytes(&snapshot(2, &kit, false)).unwrap();
    assert_eq!(judge.default_trust_root(), None);
    assert_ne!(
        judge.versions().trust_root_version,
        with_default.trust_root_version,
        "the default mark is part of the trust-root version of cached verdicts"
    );
    let v = judge
        .judge(&image, &pod(), &PullSecrets::anonymous(), deadline())
        .await;
    assert!(!v.allowed, "{v:?}");
    let reasons = v.reasons.join("\n");
    assert!(
        reasons.contains("policy image-policy-keyless failed")
            && reasons.contains("authority-0 (keyless)")
            && reasons.contains("which the trusted root does not contain"),
        "{reasons}"
    );
}
