//! Criterion benchmarks of whole-bundle verification on public material from
//! the sigstore-conformance suite (read from ../shared at run time):
//! - a public-good DSSE bundle: Fulcio chain + SCT + Rekor v1 inclusion proof +
//!   checkpoint + SET;
//! - a v0.3 message-signature bundle logged to Rekor v2 with an RFC 3161
//!   timestamp (chain + SCT + inclusion proof + Ed25519 checkpoint + TSA).
//!
//! Parsing the bundle is measured separately from verifying it, because the
//! webhook parses once and may verify against several policies.
//!
//! The single signature checks the bundles are made of are measured too
//! (`signature/...`, fresh keys; ECDSA over a 1 KiB message like a
//! certificate's TBS, Ed25519 over 256 bytes like a checkpoint's note), so that
//! a bundle's median can be read against the floor its checks set.
//!
//! `two_p384/...` measures the floor of the Rekor v2 + TSA bundle, its two
//! independent P-384 checks (the leaf by the Fulcio intermediate, over a
//! 1 KiB TBS; the timestamp token, over 256 bytes of signed attributes), run
//! one after the other on the caller's thread (`sequential`), or in parallel:
//! the second on a thread spawned for it (`scoped_thread`, `std::thread::scope`)
//! or handed to a warm worker thread that waits for work, as a runtime's
//! blocking pool does (`warm_worker`). Throughput at saturation is
//! `benches/saturation.rs`.

// Test and benchmark glue: a failed fixture load should abort loudly.
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

mod common;

use std::path::PathBuf;

use common::Check;
use criterion::{Criterion, criterion_group, criterion_main};
use sigil_verifier::bundle::Bundle;
use sigil_verifier::crypto::{HashAlgorithm, PublicKey};
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{Artifact, VerificationPolicy, verify_bundle};

const IDENTITY: &str = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main";
const ISSUER: &str = "https://token.actions.githubusercontent.com";

fn case(name: &str) -> PathBuf {
    // Where the cases are, or a message saying where it looked and what to run.
    sigil_testdata::sigstore_conformance()
        .unwrap_or_else(|missing| panic!("{missing}"))
        .join(name)
}

struct Fixture {
    bundle_json: Vec<u8>,
    root: TrustedRoot,
    artifact: Vec<u8>,
}

fn fixture(name: &str) -> Fixture {
    let dir = case(name);
    let root = match std::fs::read_to_string(dir.join("trusted_root.json")) {
        Ok(json) => TrustedRoot::from_json(&json).expect("case trusted root"),
        Err(_) => TrustedRoot::public_good().expect("embedded root"),
    };
    let artifact_path = if dir.join("artifact").exists() {
        dir.join("artifact")
    } else {
        dir.join("../a.txt")
    };
    Fixture {
        bundle_json: std::fs::read(dir.join("bundle.sigstore.json")).expect("bundle"),
        root,
        artifact: std::fs::read(artifact_path).expect("artifact"),
    }
}

/// One signature check through sigil's own key type, as the verifier makes it.
fn bench_signature(
    c: &mut Criterion,
    label: &str,
    signing: &'static aws_lc_rs::signature::EcdsaSigningAlgorithm,
    hash: HashAlgorithm,
) {
    use aws_lc_rs::encoding::AsDer as _;
    use aws_lc_rs::signature::KeyPair as _;
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let pair = aws_lc_rs::signature::EcdsaKeyPair::generate(signing).expect("key generation");
    let spki = pair.public_key().as_der().expect("public key DER");
    let key = PublicKey::from_spki_der(spki.as_ref()).expect("sigil parses the key");
    let message = vec![0x5a_u8; 1024];
    let sig = pair.sign(&rng, &message).expect("signing");
    key.verify(&message, sig.as_ref(), hash)
        .expect("benchmark signature verifies");
    c.bench_function(&format!("signature/{label}"), |b| {
        b.iter(|| key.verify(std::hint::black_box(&message), sig.as_ref(), hash))
    });
}

/// One Ed25519 check through sigil's key type, as a Rekor v2 checkpoint's is
/// made (Ed25519 ignores the hash argument).
fn bench_ed25519(c: &mut Criterion) {
    use aws_lc_rs::encoding::AsDer as _;
    use aws_lc_rs::signature::KeyPair as _;
    let pair = aws_lc_rs::signature::Ed25519KeyPair::generate().expect("key generation");
    let spki = pair.public_key().as_der().expect("public key DER");
    let key = PublicKey::from_spki_der(spki.as_ref()).expect("sigil parses the key");
    // A checkpoint's note body is a few hundred bytes.
    let message = vec![0x5a_u8; 256];
    let sig = pair.sign(&message);
    key.verify(&message, sig.as_ref(), HashAlgorithm::Sha256)
        .expect("benchmark signature verifies");
    c.bench_function("signature/ed25519", |b| {
        b.iter(|| {
            key.verify(
                std::hint::black_box(&message),
                sig.as_ref(),
                HashAlgorithm::Sha256,
            )
        })
    });
}

/// The two P-384 checks of a Rekor v2 + TSA bundle, sequential and parallel.
fn bench_two_p384(c: &mut Criterion) {
    use std::sync::Arc;
    use std::sync::mpsc;
    let leaf = Arc::new(Check::p384(1024));
    let token = Arc::new(Check::p384(256));
    assert!(leaf.run() && token.run());
    let mut group = c.benchmark_group("two_p384");
    group.bench_function("sequential", |b| b.iter(|| leaf.run() && token.run()));
    group.bench_function("scoped_thread", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                let other = s.spawn(|| token.run());
                let here = leaf.run();
                here && other.join().unwrap_or(false)
            })
        })
    });
    // A worker thread parked on a channel, woken for each verification.
    let (work, inbox) = mpsc::channel::<mpsc::Sender<bool>>();
    let worker = {
        let token = token.clone();
        std::thread::spawn(move || {
            for reply in inbox {
                let _ = reply.send(token.run());
            }
        })
    };
    group.bench_function("warm_worker", |b| {
        b.iter(|| {
            let (reply, answer) = mpsc::channel();
            work.send(reply).expect("worker alive");
            let here = leaf.run();
            here && answer.recv().unwrap_or(false)
        })
    });
    group.finish();
    drop(work);
    worker.join().expect("worker ends");
}

fn bench(c: &mut Criterion) {
    bench_two_p384(c);
    bench_signature(
        c,
        "ecdsa_p384_sha384",
        &aws_lc_rs::signature::ECDSA_P384_SHA384_ASN1_SIGNING,
        HashAlgorithm::Sha384,
    );
    bench_signature(
        c,
        "ecdsa_p256_sha256",
        &aws_lc_rs::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        HashAlgorithm::Sha256,
    );
    bench_ed25519(c);
    let policy = VerificationPolicy::keyless(IdentityPolicy {
        subject: IdentityMatcher::Exact(IDENTITY.into()),
        issuer: IdentityMatcher::Exact(ISSUER.into()),
        claims: Vec::new(),
    });
    let now = time::OffsetDateTime::now_utc();
    for (label, name) in [
        (
            "dsse_rekor_v1_set_proof_checkpoint",
            "happy-path-intoto-in-dsse-v3",
        ),
        ("message_rekor_v2_tsa", "rekor2-happy-path"),
    ] {
        let f = fixture(name);
        let bundle = Bundle::from_json(&f.bundle_json).expect("bundle parses");
        let digest = sigil_verifier::crypto::sha256(&f.artifact);
        verify_bundle(&bundle, Artifact::Sha256(digest), &policy, &f.root, now)
            .expect("benchmark bundle verifies");
        c.bench_function(&format!("parse/{label}"), |b| {
            b.iter(|| Bundle::from_json(std::hint::black_box(&f.bundle_json)))
        });
        c.bench_function(&format!("verify/{label}"), |b| {
            b.iter(|| {
                verify_bundle(
                    std::hint::black_box(&bundle),
                    Artifact::Sha256(digest),
                    &policy,
                    &f.root,
                    now,
                )
            })
        });
        c.bench_function(&format!("parse_and_verify/{label}"), |b| {
            b.iter(|| {
                let bundle = Bundle::from_json(std::hint::black_box(&f.bundle_json))?;
                verify_bundle(&bundle, Artifact::Sha256(digest), &policy, &f.root, now)
                    .map_err(|e| sigil_verifier::bundle::BundleError::Json(e.to_string()))
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
