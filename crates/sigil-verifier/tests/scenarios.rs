//! Verification scenarios per concern, on material minted offline by
//! sigil-testkit: each test builds one situation (a missing SCT, an expired
//! certificate, a Rekor v2 entry without a timestamp, …) and checks both the
//! verdict and the reason, so a regression in one check cannot hide behind
//! another.

// Test glue: a failed fixture build should abort loudly.
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs
)]

use sigil_testkit::{
    BundleSpec, BundleVersion, ChainSpec, Content, MintedBundle, SctSpec, TimestampSpec, TlogSpec,
    TrustRootSpec, TsaOptions, V1Kind, V2Kind, ValidFor,
};
use sigil_verifier::bundle::Bundle;
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{
    Artifact, SignedContent, TimeSource, VerificationPolicy, VerifiedBundle, VerifyError,
    verify_bundle,
};

const ARTIFACT: &[u8] = b"sigil scenario artifact\n";

struct Kit {
    kit: sigil_testkit::Testkit,
    root: TrustedRoot,
}

fn kit() -> Kit {
    let kit = sigil_testkit::Testkit::new(7);
    let root = TrustedRoot::from_json(&kit.trusted_root_json()).expect("testkit root loads");
    Kit { kit, root }
}

fn exact(spec: &BundleSpec) -> VerificationPolicy {
    VerificationPolicy::keyless(IdentityPolicy {
        subject: IdentityMatcher::Exact(spec.identity.as_str().to_owned()),
        issuer: IdentityMatcher::Exact(spec.oidc_issuer.clone()),
        claims: Vec::new(),
    })
}

fn message(k: &Kit, spec: &BundleSpec) -> MintedBundle {
    k.kit
        .sign(spec, Content::Message(ARTIFACT.to_vec()))
        .expect("mint")
}

fn dsse(k: &Kit, spec: &BundleSpec) -> MintedBundle {
    k.kit
        .sign(
            spec,
            Content::in_toto(
                ARTIFACT,
                "https://slsa.dev/provenance/v1",
                serde_json::json!({"buildDefinition": {"buildType": "https://example.com/build"}}),
            ),
        )
        .expect("mint")
}

fn run(
    k: &Kit,
    minted: &MintedBundle,
    policy: &VerificationPolicy,
) -> Result<VerifiedBundle, VerifyError> {
    let bundle = Bundle::from_json(minted.json.as_bytes()).expect("testkit bundle parses");
    verify_bundle(
        &bundle,
        Artifact::Bytes(ARTIFACT),
        policy,
        &k.root,
        time::OffsetDateTime::now_utc(),
    )
}

fn reason(r: Result<VerifiedBundle, VerifyError>) -> &'static str {
    match r {
        Ok(_) => "verified",
        Err(e) => e.reason(),
    }
}

#[test]
fn message_signatures_verify_in_every_bundle_version() {
    let k = kit();
    for version in [
        BundleVersion::V01,
        BundleVersion::V02,
        BundleVersion::V03,
        BundleVersion::V03Alt,
    ] {
        let spec = BundleSpec {
            version,
            ..BundleSpec::default()
        };
        let v = run(&k, &message(&k, &spec), &exact(&spec))
            .unwrap_or_else(|e| panic!("{version:?}: {e}"));
        assert_eq!(v.content, SignedContent::MessageSignature);
        assert!(v.log_index.is_some());
        assert!(matches!(
            v.verified_times.first(),
            Some((_, TimeSource::IntegratedTime { .. }))
        ));
    }
}

#[test]
fn verified_facts_carry_identity_issuer_github_fields_and_time() {
    let k = kit();
    let spec = BundleSpec::default();
    let v = run(&k, &message(&k, &spec), &exact(&spec)).unwrap();
    let id = v.identity.expect("keyless identity");
    assert_eq!(id.subject, spec.identity.as_str());
    assert_eq!(id.issuer.as_deref(), Some(spec.oidc_issuer.as_str()));
    let gh = spec.github.as_ref().unwrap();
    assert_eq!(
        id.extensions.github_workflow_repository.as_deref(),
        Some(gh.repository.as_str())
    );
    assert_eq!(
        id.extensions.source_repository_ref.as_deref(),
        Some(gh.git_ref.as_str())
    );
    let signed = v.signing_time.expect("verified time").unix_timestamp();
    assert!(signed >= spec.signing_time && signed <= spec.signing_time + 600);
}

#[test]
fn dsse_statements_bind_the_artifact_through_every_rekor_v1_kind() {
    let k = kit();
    for kind in [V1Kind::Dsse, V1Kind::Intoto] {
        let spec = BundleSpec {
            tlog: TlogSpec::RekorV1(kind),
            ..BundleSpec::default()
        };
        let v =
            run(&k, &dsse(&k, &spec), &exact(&spec)).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let SignedContent::Dsse { statement, .. } = v.content else {
            panic!("expected DSSE content");
        };
        assert_eq!(statement.predicate_type, "https://slsa.dev/provenance/v1");
        assert!(
            statement.subject[0].name.is_none(),
            "cosign v3 subjects have no name"
        );
    }
}

#[test]
fn an_attestation_for_another_artifact_is_rejected() {
    let k = kit();
    let spec = BundleSpec::default();
    let minted = dsse(&k, &spec);
    let bundle = Bundle::from_json(minted.json.as_bytes()).unwrap();
    let err = verify_bundle(
        &bundle,
        Artifact::Bytes(b"another artifact"),
        &exact(&spec),
        &k.root,
        time::OffsetDateTime::now_utc(),
    )
    .unwrap_err();
    assert_eq!(err.reason(), "statement-mismatch");
}

#[test]
fn rekor_v2_entries_verify_with_a_timestamp_with_or_without_embedded_certificates() {
    let k = kit();
    for timestamp in [TimestampSpec::embedded(), TimestampSpec::without_certs()] {
        for kind in [V2Kind::HashedRekord, V2Kind::Dsse] {
            let spec = BundleSpec {
                tlog: TlogSpec::RekorV2(kind),
                timestamp,
                ..BundleSpec::default()
            };
            let minted = if kind == V2Kind::Dsse {
                dsse(&k, &spec)
            } else {
                message(&k, &spec)
            };
            let v = run(&k, &minted, &exact(&spec))
                .unwrap_or_else(|e| panic!("{kind:?} {timestamp:?}: {e}"));
            assert!(matches!(
                v.verified_times.as_slice(),
                [(_, TimeSource::Rfc3161 { .. })]
            ));
        }
    }
}

#[test]
fn a_rekor_v2_entry_without_a_timestamp_has_no_verified_time() {
    let k = kit();
    let spec = BundleSpec {
        tlog: TlogSpec::RekorV2(V2Kind::HashedRekord),
        timestamp: TimestampSpec::None,
        ..BundleSpec::default()
    };
    assert_eq!(
        reason(run(&k, &message(&k, &spec), &exact(&spec))),
        "no-verified-time"
    );
}

#[test]
fn a_keyless_bundle_without_a_log_entry_is_rejected() {
    let k = kit();
    let spec = BundleSpec {
        tlog: TlogSpec::None,
        timestamp: TimestampSpec::embedded(),
        ..BundleSpec::default()
    };
    assert_eq!(
        reason(run(&k, &message(&k, &spec), &exact(&spec))),
        "no-tlog-entry"
    );
}

#[test]
fn scts_must_come_from_a_trusted_ct_log() {
    let k = kit();
    for sct in [SctSpec::None, SctSpec::Untrusted] {
        let spec = BundleSpec {
            sct: sct.clone(),
            ..BundleSpec::default()
        };
        assert_eq!(
            reason(run(&k, &message(&k, &spec), &exact(&spec))),
            "sct",
            "{sct:?}"
        );
    }
    let spec = BundleSpec {
        sct: SctSpec::WithExtensions(vec![1, 2, 3]),
        ..BundleSpec::default()
    };
    assert_eq!(
        reason(run(&k, &message(&k, &spec), &exact(&spec))),
        "verified"
    );
}

#[test]
fn a_policy_may_waive_the_sct_like_insecure_ignore_sct() {
    let k = kit();
    let spec = BundleSpec {
        sct: SctSpec::None,
        ..BundleSpec::default()
    };
    let mut policy = exact(&spec);
    if let sigil_verifier::verify::SignerPolicy::Keyless { require_sct, .. } = &mut policy.signer {
        *require_sct = false;
    }
    assert_eq!(reason(run(&k, &message(&k, &spec), &policy)), "verified");
}

#[test]
fn a_log_time_after_the_certificate_expired_is_rejected() {
    let k = kit();
    let spec = BundleSpec {
        integrated_time: Some(BundleSpec::default().signing_time + 601),
        ..BundleSpec::default()
    };
    assert_eq!(
        reason(run(&k, &message(&k, &spec), &exact(&spec))),
        "certificate-chain"
    );
}

#[test]
fn a_timestamp_after_the_certificate_expired_is_rejected() {
    let k = kit();
    let base = BundleSpec::rekor_v2();
    let spec = BundleSpec {
        timestamp: TimestampSpec::Rfc3161(TsaOptions {
            embed_certs: true,
            gen_time: Some(base.signing_time + 601),
            wrong_imprint: false,
        }),
        ..base
    };
    assert_eq!(
        reason(run(&k, &message(&k, &spec), &exact(&spec))),
        "certificate-chain"
    );
}

#[test]
fn a_timestamp_over_other_bytes_is_rejected() {
    let k = kit();
    let spec = BundleSpec {
        timestamp: TimestampSpec::Rfc3161(TsaOptions {
            embed_certs: false,
            gen_time: None,
            wrong_imprint: true,
        }),
        ..BundleSpec::rekor_v2()
    };
    assert_eq!(
        reason(run(&k, &message(&k, &spec), &exact(&spec))),
        "timestamp"
    );
}

#[test]
fn a_bundle_chain_that_carries_the_root_is_rejected() {
    let k = kit();
    let ok = BundleSpec {
        version: BundleVersion::V01,
        chain: ChainSpec::WithIntermediate,
        ..BundleSpec::default()
    };
    assert_eq!(reason(run(&k, &message(&k, &ok), &exact(&ok))), "verified");
    let spec = BundleSpec {
        chain: ChainSpec::WithRoot,
        ..ok
    };
    assert_eq!(
        reason(run(&k, &message(&k, &spec), &exact(&spec))),
        "certificate-chain"
    );
}

#[test]
fn identity_and_issuer_are_matched_exactly_or_by_regex() {
    let k = kit();
    let spec = BundleSpec::email("alice@example.com", "https://accounts.example.com");
    let minted = message(&k, &spec);
    assert_eq!(reason(run(&k, &minted, &exact(&spec))), "verified");
    let regex = |s: &str, i: &str| {
        VerificationPolicy::keyless(IdentityPolicy {
            subject: IdentityMatcher::Regex(regex::Regex::new(s).unwrap()),
            issuer: IdentityMatcher::Regex(regex::Regex::new(i).unwrap()),
            claims: Vec::new(),
        })
    };
    assert_eq!(
        reason(run(
            &k,
            &minted,
            &regex("^alice@example\\.com$", "^https://accounts\\.")
        )),
        "verified"
    );
    assert_eq!(reason(run(&k, &minted, &regex("^bob@", ".*"))), "identity");
    let wrong_issuer = VerificationPolicy::keyless(IdentityPolicy {
        subject: IdentityMatcher::Exact("alice@example.com".into()),
        issuer: IdentityMatcher::Exact("https://token.actions.githubusercontent.com".into()),
        claims: Vec::new(),
    });
    assert_eq!(reason(run(&k, &minted, &wrong_issuer)), "identity");
}

#[test]
fn managed_key_bundles_need_the_right_key() {
    let k = kit();
    let spec = BundleSpec::managed_key();
    let minted = message(&k, &spec);
    let key = PublicKey::from_pem(minted.public_key_pem.as_deref().unwrap()).unwrap();
    let v = run(&k, &minted, &VerificationPolicy::key(key)).unwrap();
    assert!(v.identity.is_none());
    let other = sigil_testkit::Testkit::new(8);
    let other_key = PublicKey::from_pem(&other.managed_public_key_pem()).unwrap();
    assert_eq!(
        reason(run(&k, &minted, &VerificationPolicy::key(other_key))),
        "bad-signature"
    );
    assert_eq!(reason(run(&k, &minted, &exact(&spec))), "signer-mismatch");
}

#[test]
fn material_from_another_trust_root_is_rejected() {
    let k = kit();
    let spec = BundleSpec::default();
    let minted = message(&k, &spec);
    let other = kit_with_seed(99);
    let bundle = Bundle::from_json(minted.json.as_bytes()).unwrap();
    let err = verify_bundle(
        &bundle,
        Artifact::Bytes(ARTIFACT),
        &exact(&spec),
        &other,
        time::OffsetDateTime::now_utc(),
    )
    .unwrap_err();
    assert_eq!(err.reason(), "tlog");
}

fn kit_with_seed(seed: u64) -> TrustedRoot {
    TrustedRoot::from_json(&sigil_testkit::Testkit::new(seed).trusted_root_json()).unwrap()
}

#[test]
fn a_log_key_outside_its_validity_window_is_not_trusted() {
    let k = kit();
    let spec = BundleSpec::default();
    let minted = message(&k, &spec);
    let window = ValidFor {
        start: spec.signing_time + 3600,
        end: None,
    };
    let root = TrustedRoot::from_json(&k.kit.trusted_root_json_with(&TrustRootSpec {
        rekor_v1: Some(window),
        ..TrustRootSpec::default()
    }))
    .unwrap();
    let bundle = Bundle::from_json(minted.json.as_bytes()).unwrap();
    let err = verify_bundle(
        &bundle,
        Artifact::Bytes(ARTIFACT),
        &exact(&spec),
        &root,
        time::OffsetDateTime::now_utc(),
    )
    .unwrap_err();
    assert_eq!(err.reason(), "tlog");
}

#[test]
fn digest_mode_and_path_mode_agree() {
    let k = kit();
    let spec = BundleSpec::default();
    let minted = message(&k, &spec);
    let bundle = Bundle::from_json(minted.json.as_bytes()).unwrap();
    let now = time::OffsetDateTime::now_utc();
    let by_digest = verify_bundle(
        &bundle,
        Artifact::Sha256(sigil_verifier::crypto::sha256(ARTIFACT)),
        &exact(&spec),
        &k.root,
        now,
    )
    .unwrap();
    let by_bytes = run(&k, &minted, &exact(&spec)).unwrap();
    assert_eq!(by_digest.log_index, by_bytes.log_index);
    assert_eq!(by_digest.signing_time, by_bytes.signing_time);
}

/// A kit whose Rekor v1 log is a private deployment's: reached at an
/// in-cluster URL and naming its checkpoints by the server's pod name.
fn private_rekor_kit() -> Kit {
    let mut kit = sigil_testkit::Testkit::new(7);
    kit.rekor_v1 =
        sigil_testkit::rekor::RekorV1::new(7, "rekor-v1", "http://rekor.rekor-system.svc")
            .with_hostname("rekor-server-7d9c8b5f4-x2x4l");
    let root = TrustedRoot::from_json(&kit.trusted_root_json()).expect("testkit root loads");
    Kit { kit, root }
}

const CHECKPOINT: &str = "/verificationMaterial/tlogEntries/0/inclusionProof/checkpoint/envelope";

fn proof_of(json: &serde_json::Value) -> (u64, [u8; 32]) {
    use base64::Engine as _;
    let proof = json
        .pointer("/verificationMaterial/tlogEntries/0/inclusionProof")
        .unwrap();
    let size = proof["treeSize"].as_str().unwrap().parse().unwrap();
    let root = base64::engine::general_purpose::STANDARD
        .decode(proof["rootHash"].as_str().unwrap())
        .unwrap();
    (size, root.try_into().unwrap())
}

/// Verifies `minted` with its checkpoint replaced by `checkpoint`.
fn run_with_checkpoint(
    k: &Kit,
    minted: &MintedBundle,
    spec: &BundleSpec,
    checkpoint: String,
) -> Result<VerifiedBundle, VerifyError> {
    let mut json = minted.value();
    *json.pointer_mut(CHECKPOINT).unwrap() = checkpoint.into();
    let bundle = Bundle::from_json(&serde_json::to_vec(&json).unwrap()).unwrap();
    verify_bundle(
        &bundle,
        Artifact::Bytes(ARTIFACT),
        &exact(spec),
        &k.root,
        time::OffsetDateTime::now_utc(),
    )
}

#[test]
fn rekor_v1_entries_of_a_private_deployment_verify_with_the_servers_hostname_as_origin() {
    let k = private_rekor_kit();
    for (label, spec, minted) in [
        (
            "message",
            BundleSpec::default(),
            message(&k, &BundleSpec::default()),
        ),
        {
            let spec = BundleSpec {
                tlog: TlogSpec::RekorV1(V1Kind::Dsse),
                ..BundleSpec::default()
            };
            let minted = dsse(&k, &spec);
            ("dsse", spec, minted)
        },
    ] {
        let checkpoint = minted
            .value()
            .pointer(CHECKPOINT)
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            checkpoint.starts_with("rekor-server-7d9c8b5f4-x2x4l - ")
                && checkpoint.contains("\u{2014} rekor-server-7d9c8b5f4-x2x4l "),
            "{label}: {checkpoint}"
        );
        let v = run(&k, &minted, &exact(&spec)).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert!(v.log_index.is_some(), "{label}");
    }
}

#[test]
fn a_private_rekor_v1_checkpoint_under_another_key_or_for_another_tree_is_rejected() {
    let k = private_rekor_kit();
    let spec = BundleSpec::default();
    let minted = message(&k, &spec);
    let (size, root) = proof_of(&minted.value());
    let rekor = &k.kit.rekor_v1;
    let note =
        |origin: &str, size: u64, root: &[u8; 32], signer: &sigil_testkit::rekor::RekorV1| {
            let body = sigil_testkit::rekor::checkpoint_body(origin, size, root);
            let mut sig = signer.sign_checkpoint(&body);
            // Under the trusted log's key hint, whoever signed.
            sig.data.splice(..4, rekor.log_id()[..4].iter().copied());
            sigil_testkit::rekor::signed_note(&body, &[sig])
        };
    // The control: re-signed exactly as minted, it verifies.
    run_with_checkpoint(
        &k,
        &minted,
        &spec,
        note(&rekor.origin(), size, &root, rekor),
    )
    .unwrap();

    let impostor = sigil_testkit::rekor::RekorV1 {
        key: sigil_testkit::KeyPair::p256(8, "rekor-v1"),
        ..rekor.clone()
    };
    let mut other_root = root;
    other_root[0] ^= 1;
    for (what, checkpoint, wanted) in [
        (
            "signed by another key",
            note(&rekor.origin(), size, &root, &impostor),
            "does not verify",
        ),
        (
            "another root hash",
            note(&rekor.origin(), size, &other_root, rekor),
            "root hash",
        ),
        (
            "another tree size",
            note(&rekor.origin(), size + 1, &root, rekor),
            "tree size",
        ),
        (
            "an origin without a tree id",
            note("rekor-server-7d9c8b5f4-x2x4l", size, &root, rekor),
            "<rekor hostname> - <tree id>",
        ),
    ] {
        let err = run_with_checkpoint(&k, &minted, &spec, checkpoint)
            .err()
            .unwrap_or_else(|| panic!("a checkpoint {what} verified"));
        assert_eq!(err.reason(), "tlog", "{what}: {err}");
        assert!(err.to_string().contains(wanted), "{what}: {err}");
    }
}

#[test]
fn a_rekor_v2_checkpoint_with_another_origin_is_rejected_although_the_log_key_signed_it() {
    use sigil_testkit::rekor::{NoteSignature, checkpoint_body, signed_note};
    let k = kit();
    let spec = BundleSpec::rekor_v2();
    let minted = message(&k, &spec);
    let (size, root) = proof_of(&minted.value());
    let log = &k.kit.rekor_v2;
    let note = |origin: &str, name: &str| {
        let body = checkpoint_body(origin, size, &root);
        let mut data = log.log_id()[..4].to_vec();
        data.extend(log.key.sign(body.as_bytes()));
        signed_note(
            &body,
            &[NoteSignature {
                name: name.to_owned(),
                data,
            }],
        )
    };
    run_with_checkpoint(&k, &minted, &spec, note(&log.origin(), &log.origin())).unwrap();
    for (origin, name) in [
        ("log2025-1-pod-0", log.origin()),
        ("log2025-1-pod-0", "log2025-1-pod-0".to_owned()),
        (&*format!("{} - 1", log.origin()), log.origin()),
        (&*log.origin(), "log2025-1-pod-0".to_owned()),
    ] {
        let err = run_with_checkpoint(&k, &minted, &spec, note(origin, &name))
            .err()
            .unwrap_or_else(|| panic!("origin `{origin}` signed as `{name}` verified"));
        assert_eq!(err.reason(), "tlog", "{origin} / {name}: {err}");
    }
}
