//! `verify_image` against real registries (olareg with the referrers API,
//! docker-registry without) holding images signed by real cosign v3, in both
//! formats. Fixtures come from `e2e/registry-fixtures.sh`, which runs these
//! ignored tests with `SIGIL_REGISTRY_FIXTURES` set.
//!
//! Keyless signatures come from the testkit (its Fulcio CA, Rekor v1 log and
//! TSA): each keyless test pushes its own small images and their signatures,
//! in cosign's new and legacy formats, to the running registries with plain
//! HTTP PUTs (below), then verifies with the testkit's trusted root.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;

use sigil_registry::image::{
    ImageError, ImagePolicy, ImageVerdict, VerifyImageOptions, verify_image,
};
use sigil_registry::{CandidateFormat, ClientConfig, RegistryClient, Want};
use sigil_testkit::cosign::{self, OciManifest};
use sigil_testkit::registry::Pusher;
use sigil_testkit::{BundleSpec, Testkit, TimestampSpec, TsaOptions};
use sigil_verifier::crypto::{HashAlgorithm, PublicKey};
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{SignerPolicy, TimeSource, VerificationPolicy};

fn fixtures() -> HashMap<String, String> {
    let path =
        std::env::var("SIGIL_REGISTRY_FIXTURES").expect("run through e2e/registry-fixtures.sh");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn policy(f: &HashMap<String, String>, key: &str, want: Want) -> ImagePolicy {
    policy_with_hash(f, key, want, None)
}

/// A managed-key policy whose key signed over `hash` (a policy's
/// `hashAlgorithm`; `None`: the key type's own digest).
fn policy_with_hash(
    f: &HashMap<String, String>,
    key: &str,
    want: Want,
    hash: Option<HashAlgorithm>,
) -> ImagePolicy {
    let pem = std::fs::read_to_string(&f[key]).unwrap();
    ImagePolicy {
        verification: VerificationPolicy {
            signer: SignerPolicy::Key(PublicKey::from_pem(&pem).unwrap()),
            require_tlog: false,
            key_hash: hash,
        },
        want,
    }
}

async fn run(image: &str, p: &ImagePolicy) -> Result<ImageVerdict, ImageError> {
    run_with(image, p, &TrustedRoot::public_good().unwrap()).await
}

async fn run_with(
    image: &str,
    p: &ImagePolicy,
    root: &TrustedRoot,
) -> Result<ImageVerdict, ImageError> {
    let client = RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        ..Default::default()
    })
    .unwrap();
    verify_image(image, p, root, &client, &VerifyImageOptions::default()).await
}

const REGS: [&str; 2] = ["OLAREG", "DOCKREG"];

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn new_format_signatures_verify_on_both_registries_within_the_round_trip_budget() {
    let f = fixtures();
    for r in REGS {
        let v = run(
            &f[&format!("{r}_NEW")],
            &policy(&f, "KEY1", Want::Signatures),
        )
        .await
        .unwrap();
        let format = v.verified[0].format;
        match r {
            "OLAREG" => {
                assert_eq!(format, CandidateFormat::BundleReferrer);
                // referrers list, referrer manifest, bundle blob, legacy .sig probe.
                assert!(v.round_trips <= 4, "{r}: {} round trips", v.round_trips);
            }
            _ => assert_eq!(format, CandidateFormat::BundleFallbackTag),
        }
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn legacy_signatures_verify_on_both_registries() {
    let f = fixtures();
    for r in REGS {
        let v = run(
            &f[&format!("{r}_LEGACY")],
            &policy(&f, "KEY1", Want::Signatures),
        )
        .await
        .unwrap();
        assert_eq!(
            v.verified[0].format,
            CandidateFormat::LegacySignature,
            "{r}"
        );
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn attestations_verify_in_both_formats_but_do_not_count_as_signatures() {
    let f = fixtures();
    let slsa = Want::Attestations("https://slsa.dev/provenance/v0.2".into());
    for r in REGS {
        let image = &f[&format!("{r}_ATT")];
        let v = run(image, &policy(&f, "KEY1", slsa.clone())).await.unwrap();
        let formats: Vec<_> = v.verified.iter().map(|c| c.format).collect();
        assert!(
            formats.contains(&CandidateFormat::LegacyAttestation),
            "{r}: {formats:?}"
        );
        assert_eq!(formats.len(), 2, "{r}: {formats:?}");
        let e = run(image, &policy(&f, "KEY1", Want::Signatures))
            .await
            .unwrap_err();
        assert!(matches!(e, ImageError::NoSignature { .. }), "{r}: {e}");
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn unsigned_images_are_rejected_saying_where_sigil_looked() {
    let f = fixtures();
    for r in REGS {
        let e = run(
            &f[&format!("{r}_UNSIGNED")],
            &policy(&f, "KEY1", Want::Signatures),
        )
        .await
        .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ImageError::NoSignature { .. }), "{r}: {msg}");
        assert!(msg.contains(".sig"), "{msg}");
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn signatures_by_another_key_are_rejected_in_both_formats() {
    let f = fixtures();
    for r in REGS {
        let image = &f[&format!("{r}_OTHER")];
        let e = run(image, &policy(&f, "KEY1", Want::Signatures))
            .await
            .unwrap_err();
        let ImageError::NothingVerified { rejected, .. } = &e else {
            panic!("{r}: {e}")
        };
        assert_eq!(rejected.len(), 2, "{r}: {e}");
        assert!(
            run(image, &policy(&f, "KEY2", Want::Signatures))
                .await
                .is_ok()
        );
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn signatures_moved_onto_another_image_are_rejected_in_both_formats() {
    let f = fixtures();
    for r in REGS {
        let e = run(
            &f[&format!("{r}_MOVED")],
            &policy(&f, "KEY1", Want::Signatures),
        )
        .await
        .unwrap_err();
        let ImageError::NothingVerified { rejected, .. } = &e else {
            panic!("{r}: {e}")
        };
        assert_eq!(rejected.len(), 2, "{r}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("statement") || msg.contains("subject"),
            "{msg}"
        );
        assert!(msg.contains("another image"), "{msg}");
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn tags_resolve_to_the_digest_that_is_verified() {
    let f = fixtures();
    for r in REGS {
        let image = format!("{}/test/app:new", f[r]);
        let v = run(&image, &policy(&f, "KEY1", Want::Signatures))
            .await
            .unwrap();
        assert!(f[&format!("{r}_NEW")].ends_with(&v.digest.to_string()));
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn key_signatures_without_a_log_entry_fail_unless_the_tlog_is_waived() {
    let f = fixtures();
    let mut p = policy(&f, "KEY1", Want::Signatures);
    p.verification.require_tlog = true;
    let e = run(&f["OLAREG_NEW"], &p).await.unwrap_err();
    assert!(e.to_string().contains("transparency log"), "{e}");
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn cosigns_p384_signatures_verify_over_sha384_in_both_formats_and_not_over_sha256() {
    let f = fixtures();
    for r in REGS {
        for image in ["SHA384", "SHA384_LEGACY"] {
            let image = &f[&format!("{r}_{image}")];
            for hash in [Some(HashAlgorithm::Sha384), None] {
                run(
                    image,
                    &policy_with_hash(&f, "P384KEY", Want::Signatures, hash),
                )
                .await
                .unwrap_or_else(|e| panic!("{r} {image} {hash:?}: {e}"));
            }
            // policy-controller's default digest: what `sigil policy convert`
            // writes for a P-384 key, so cosign's SHA-384 signatures are
            // refused as policy-controller refuses them.
            let e = run(
                image,
                &policy_with_hash(&f, "P384KEY", Want::Signatures, Some(HashAlgorithm::Sha256)),
            )
            .await
            .unwrap_err();
            assert_eq!(e.reason(), "not-verified", "{r} {image}: {e}");
        }
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn sha224_and_sha512_key_signatures_verify_only_with_that_hash_algorithm() {
    let f = fixtures();
    for r in REGS {
        for (image, key, hash) in [
            ("SHA224_LEGACY", "HASHKEY", HashAlgorithm::Sha224),
            ("SHA512_LEGACY", "HASHKEY", HashAlgorithm::Sha512),
            ("RSA_SHA512_LEGACY", "RSAKEY", HashAlgorithm::Sha512),
        ] {
            let image = &f[&format!("{r}_{image}")];
            let v = run(
                image,
                &policy_with_hash(&f, key, Want::Signatures, Some(hash)),
            )
            .await
            .unwrap_or_else(|e| panic!("{r} {image} {hash:?}: {e}"));
            assert_eq!(v.verified[0].format, CandidateFormat::LegacySignature);
            for other in [
                None,
                Some(HashAlgorithm::Sha256),
                Some(HashAlgorithm::Sha384),
            ] {
                let e = run(image, &policy_with_hash(&f, key, Want::Signatures, other))
                    .await
                    .unwrap_err();
                assert_eq!(e.reason(), "not-verified", "{r} {image} {other:?}: {e}");
                assert!(e.to_string().contains("signature does not verify"), "{e}");
            }
        }
    }
}

// ---- keyless: testkit material pushed to the real registries ----

/// The testkit's pusher for `repo` on `registry` (127.0.0.1 only).
fn pusher(registry: &str, repo: &str) -> Pusher {
    Pusher::new(registry, repo).unwrap()
}

const KEYLESS_REPO: &str = "test/keyless";

fn keyless_policy(identity: &str, issuer: &str) -> ImagePolicy {
    ImagePolicy {
        verification: VerificationPolicy::keyless(IdentityPolicy {
            subject: IdentityMatcher::Exact(identity.into()),
            issuer: IdentityMatcher::Exact(issuer.into()),
            claims: Vec::new(),
        }),
        want: Want::Signatures,
    }
}

/// The testkit, its trusted root, and the spec every keyless signature uses.
fn kit() -> (Testkit, TrustedRoot, BundleSpec, ImagePolicy) {
    let kit = Testkit::new(31);
    let root = TrustedRoot::from_json(&kit.trusted_root_json()).unwrap();
    let spec = BundleSpec::default();
    let policy = keyless_policy(spec.identity.as_str(), &spec.oidc_issuer);
    (kit, root, spec, policy)
}

/// Pushes a fresh image named by `label`; its digest reference and manifest.
async fn push_image(registry: &str, label: &str) -> (String, OciManifest) {
    let img = cosign::image(label);
    pusher(registry, KEYLESS_REPO)
        .manifest(&img, &img.digest())
        .await
        .unwrap();
    (format!("{registry}/{KEYLESS_REPO}@{}", img.digest()), img)
}

/// Signs `signed` in the new format and pushes the referrer with `subject`
/// as its subject (normally the same image).
async fn push_new_format(
    registry: &str,
    kit: &Testkit,
    spec: &BundleSpec,
    signed: &OciManifest,
    subject: &OciManifest,
) {
    let minted = cosign::image_signature_bundle(kit, spec, &signed.sha256()).unwrap();
    let referrer = cosign::bundle_referrer(
        minted.json.as_bytes(),
        cosign::COSIGN_SIGN_PREDICATE,
        subject.descriptor(),
    );
    pusher(registry, KEYLESS_REPO)
        .referrer(&referrer, &subject.digest())
        .await
        .unwrap();
}

/// Signs `signed` in the legacy format and pushes the `.sig` manifest under
/// the tag of `under` (normally the same image).
async fn push_legacy(
    registry: &str,
    kit: &Testkit,
    spec: &BundleSpec,
    signed: &OciManifest,
    under: &OciManifest,
) -> cosign::LegacySignature {
    let reference = format!("{registry}/{KEYLESS_REPO}");
    let sig = cosign::legacy_signature(kit, spec, &reference, &signed.digest()).unwrap();
    let m = cosign::legacy_signature_manifest(std::slice::from_ref(&sig));
    pusher(registry, KEYLESS_REPO)
        .manifest(&m, &cosign::legacy_signature_tag(&under.digest()))
        .await
        .unwrap();
    sig
}

/// Both formats, each on its own image; (new-format image, legacy image).
async fn keyless_images(registry: &str, label: &str) -> (String, String) {
    let (kit, _, spec, _) = kit();
    let (new_ref, new_img) = push_image(registry, &format!("{label}-new")).await;
    push_new_format(registry, &kit, &spec, &new_img, &new_img).await;
    let (legacy_ref, legacy_img) = push_image(registry, &format!("{label}-legacy")).await;
    push_legacy(registry, &kit, &spec, &legacy_img, &legacy_img).await;
    (new_ref, legacy_ref)
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn keyless_signatures_verify_in_both_formats_on_both_registries_with_the_testkit_root() {
    let f = fixtures();
    let (_, root, spec, policy) = kit();
    for r in REGS {
        let (new_ref, legacy_ref) = keyless_images(&f[r], "keyless-ok").await;
        let v = run_with(&new_ref, &policy, &root).await.unwrap();
        let expected = match r {
            "OLAREG" => CandidateFormat::BundleReferrer,
            _ => CandidateFormat::BundleFallbackTag,
        };
        assert_eq!(v.verified[0].format, expected, "{r}");
        let v = run_with(&legacy_ref, &policy, &root).await.unwrap();
        assert_eq!(
            v.verified[0].format,
            CandidateFormat::LegacySignature,
            "{r}"
        );
        let id = v.verified[0].verified.identity.as_ref().unwrap();
        assert_eq!(id.subject, spec.identity.as_str(), "{r}");
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn keyless_signatures_by_another_identity_or_issuer_are_rejected_in_both_formats() {
    let f = fixtures();
    let (_, root, spec, _) = kit();
    let wrong_identity = keyless_policy(
        "https://github.com/evil/repo/.github/workflows/x.yml@refs/heads/main",
        &spec.oidc_issuer,
    );
    let wrong_issuer = keyless_policy(spec.identity.as_str(), "https://accounts.example.com");
    for r in REGS {
        let (new_ref, legacy_ref) = keyless_images(&f[r], "keyless-identity").await;
        for image in [&new_ref, &legacy_ref] {
            for (what, p) in [("identity", &wrong_identity), ("issuer", &wrong_issuer)] {
                let e = run_with(image, p, &root).await.unwrap_err();
                assert!(
                    matches!(e, ImageError::NothingVerified { .. }),
                    "{r} {what}: {e}"
                );
                assert!(e.to_string().contains(what), "{r} {what}: {e}");
            }
        }
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn keyless_signatures_are_rejected_under_another_trust_root_in_both_formats() {
    let f = fixtures();
    let (_, _, _, policy) = kit();
    let other = TrustedRoot::from_json(&Testkit::new(32).trusted_root_json()).unwrap();
    for r in REGS {
        let (new_ref, legacy_ref) = keyless_images(&f[r], "keyless-root").await;
        for image in [&new_ref, &legacy_ref] {
            let e = run_with(image, &policy, &other).await.unwrap_err();
            assert!(matches!(e, ImageError::NothingVerified { .. }), "{r}: {e}");
        }
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn keyless_signatures_moved_onto_another_image_are_rejected_in_both_formats() {
    let f = fixtures();
    let (kit, root, spec, policy) = kit();
    for r in REGS {
        let reg = &f[r];
        let (_, signed) = push_image(reg, "keyless-moved-source").await;
        let (target_ref, target) = push_image(reg, "keyless-moved-target").await;
        push_new_format(reg, &kit, &spec, &signed, &target).await;
        push_legacy(reg, &kit, &spec, &signed, &target).await;
        let e = run_with(&target_ref, &policy, &root).await.unwrap_err();
        let ImageError::NothingVerified { rejected, .. } = &e else {
            panic!("{r}: {e}")
        };
        assert_eq!(rejected.len(), 2, "{r}: {e}");
        for c in rejected {
            assert!(c.reason.contains("another"), "{r}: {c}");
        }
    }
}

#[tokio::test]
#[ignore = "needs e2e/registry-fixtures.sh"]
async fn legacy_keyless_signatures_with_an_rfc3161_timestamp_over_the_raw_signature_verify() {
    let f = fixtures();
    let (kit, root, spec, policy) = kit();
    let with_tsa = BundleSpec {
        timestamp: TimestampSpec::without_certs(),
        ..spec.clone()
    };
    let wrong_imprint = BundleSpec {
        timestamp: TimestampSpec::Rfc3161(TsaOptions {
            embed_certs: false,
            gen_time: None,
            wrong_imprint: true,
        }),
        ..spec
    };
    for r in REGS {
        let reg = &f[r];
        let (good_ref, good) = push_image(reg, "keyless-tsa").await;
        let sig = push_legacy(reg, &kit, &with_tsa, &good, &good).await;
        assert!(sig.annotations.contains_key(cosign::RFC3161_ANNOTATION));
        let v = run_with(&good_ref, &policy, &root).await.unwrap();
        let times = &v.verified[0].verified.verified_times;
        assert!(
            times
                .iter()
                .any(|(_, s)| matches!(s, TimeSource::Rfc3161 { .. })),
            "{r}: {times:?}"
        );

        let (bad_ref, bad) = push_image(reg, "keyless-tsa-wrong-imprint").await;
        push_legacy(reg, &kit, &wrong_imprint, &bad, &bad).await;
        let e = run_with(&bad_ref, &policy, &root).await.unwrap_err();
        assert!(e.to_string().contains("timestamp"), "{r}: {e}");
    }
}
