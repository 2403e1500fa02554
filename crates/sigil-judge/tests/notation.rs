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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sigil_judge::judge::{ImageJudge as _, ObjectInfo, PinnedImage, PullSecrets, Verdict};
use sigil_judge::policy_judge::PolicyJudge;
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::ClientConfig;
use sigil_testkit::notation::{self, Format, LeafSpec, NotaryPki, RegistryImage};
use sigil_testkit::tuf::Mirror;
use sigil_verifier::trust::TrustedRoot;
use tokio::time::Instant;

const DAY: i64 = 86_400;

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// A registry on 127.0.0.1 holding one image signed (JWS) by a PKI whose
/// signing certificate names a CRL served by the same server.
struct Signed {
    host: String,
    digest: String,
    root_pem: String,
    registry: Mirror,
}

impl Signed {
    /// Requests for the CRL so far.
    fn crl_fetches(&self) -> usize {
        self.registry
            .requests()
            .iter()
            .filter(|path| path.starts_with("crl/"))
            .count()
    }
}

/// Serves the signed image; the CRL revokes the signing certificate when
/// `revoked`.
fn signed_image(revoked: bool) -> Signed {
    // Bound first: the certificate names the CRL's address.
    let registry = Mirror::serve("127.0.0.1:0", BTreeMap::new()).unwrap();
    let host = registry.addr().to_string();
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

    let mut image = RegistryImage::new("acme/app", "judged");
    let envelope = notation::sign(&pki, &image.spec(Format::Jws, t - 60));
    image.push_signature(Format::Jws, envelope);
    let mut files = image.files();
    files.insert("crl/leaf.crl".into(), crl);
    registry.replace(files);
    Signed {
        host,
        digest: image.digest,
        root_pem: pki.root.cert_pem(),
        registry,
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
    let mut signed = signed_image(revoked);
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
        digest: signed.digest.clone(),
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
    assert_eq!(signed.crl_fetches(), 1);
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
    assert_eq!(signed.crl_fetches(), 0);
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
