//! `verify_image` against real registries (olareg with the referrers API,
//! docker-registry without) holding images signed by real cosign v3, in both
//! formats. Fixtures come from `e2e/registry-fixtures.sh`, which runs these
//! ignored tests with `SIGIL_REGISTRY_FIXTURES` set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;

use sigil_verifier::crypto::PublicKey;
use sigil_verifier::image::{
    ImageError, ImagePolicy, ImageVerdict, VerifyImageOptions, verify_image,
};
use sigil_verifier::oci::{CandidateFormat, ClientConfig, RegistryClient, Want};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{SignerPolicy, VerificationPolicy};

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
    let pem = std::fs::read_to_string(&f[key]).unwrap();
    ImagePolicy {
        verification: VerificationPolicy {
            signer: SignerPolicy::Key(PublicKey::from_pem(&pem).unwrap()),
            require_tlog: false,
        },
        want,
    }
}

async fn run(image: &str, p: &ImagePolicy) -> Result<ImageVerdict, ImageError> {
    let client = RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        ..Default::default()
    })
    .unwrap();
    let root = TrustedRoot::public_good().unwrap();
    verify_image(image, p, &root, &client, &VerifyImageOptions::default()).await
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
