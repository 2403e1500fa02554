//! Keyless bundles of a private Sigstore instance without a transparency log,
//! shaped like GitHub's for private repositories' artifact attestations
//! (`sigil_testkit::Testkit::github_private`): the RFC 3161 timestamp is the
//! only source of signing time, there is no SCT, and certificate claims name
//! the repository and workflow. Each test checks the verdict and its reason.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs
)]

use sigil_testkit::{
    BundleSpec, Content, DEFAULT_SIGNING_TIME, EPOCH_2020, GithubWorkflow, MintedBundle, SctSpec,
    Testkit, TimestampSpec, TlogSpec, TrustRootSpec, V1Kind,
};
use sigil_verifier::bundle::Bundle;
use sigil_verifier::identity::{Claim, ClaimPolicy, IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{
    Artifact, SignerPolicy, TimeSource, VerificationPolicy, VerifiedBundle, VerifyError,
    verify_bundle,
};

const ARTIFACT: &[u8] = b"sigil private-repository image manifest\n";
const SLSA_V1: &str = "https://slsa.dev/provenance/v1";

fn workflow(repository: &str) -> GithubWorkflow {
    GithubWorkflow::new(
        repository,
        ".github/workflows/release.yml",
        "refs/heads/main",
        "0123456789abcdef0123456789abcdef01234567",
    )
}

fn provenance(kit: &Testkit, spec: &BundleSpec) -> MintedBundle {
    kit.sign(
        spec,
        Content::in_toto(
            ARTIFACT,
            SLSA_V1,
            serde_json::json!({"buildDefinition": {"buildType": "https://actions.github.io/buildtypes/workflow/v1"}}),
        ),
    )
    .expect("mint")
}

fn timestamp_only_root(kit: &Testkit) -> TrustedRoot {
    TrustedRoot::from_json(&kit.trusted_root_json_with(&TrustRootSpec::timestamp_only()))
        .expect("root loads")
}

/// What GitHub's trust-policies chart asks: the workflow identity by regular
/// expression, no SCT, and (here) the claims `gh attestation verify --repo`
/// checks.
fn github_policy(repository: &str, claims: Vec<ClaimPolicy>) -> VerificationPolicy {
    let subject = regex::Regex::new(&format!(
        "^https://github.com/{}/\\.github/workflows/.*",
        regex::escape(repository)
    ))
    .unwrap();
    VerificationPolicy {
        signer: SignerPolicy::Keyless {
            identities: vec![IdentityPolicy {
                subject: IdentityMatcher::Regex(subject),
                issuer: IdentityMatcher::Exact(sigil_testkit::GITHUB_ISSUER.into()),
                claims,
            }],
            require_sct: false,
        },
        require_tlog: false,
        key_hash: None,
    }
}

fn claim(claim: Claim, value: &str) -> ClaimPolicy {
    ClaimPolicy {
        claim,
        expected: IdentityMatcher::Exact(value.into()),
    }
}

fn verify(
    minted: &MintedBundle,
    policy: &VerificationPolicy,
    root: &TrustedRoot,
) -> Result<VerifiedBundle, VerifyError> {
    let bundle = Bundle::from_json(minted.json.as_bytes()).expect("bundle parses");
    verify_bundle(
        &bundle,
        Artifact::Bytes(ARTIFACT),
        policy,
        root,
        time::OffsetDateTime::now_utc(),
    )
}

/// Why the bundle `kit` mints for `spec` is refused under `policy` and the
/// kit's timestamp-only root.
fn refusal(kit: &Testkit, spec: &BundleSpec, policy: &VerificationPolicy) -> VerifyError {
    verify(&provenance(kit, spec), policy, &timestamp_only_root(kit)).unwrap_err()
}

#[test]
fn a_private_repository_attestation_verifies_with_its_timestamp_as_the_only_time_source() {
    let kit = Testkit::github_private(22);
    let spec = BundleSpec::github_private(workflow("acme/app"));
    let minted = provenance(&kit, &spec);
    assert!(
        !minted.json.contains("tlogEntries\": [{"),
        "{}",
        minted.json
    );
    let verified = verify(
        &minted,
        &github_policy(
            "acme/app",
            vec![
                claim(Claim::SourceRepositoryUri, "https://github.com/acme/app"),
                claim(Claim::SourceRepositoryVisibilityAtSigning, "private"),
            ],
        ),
        &timestamp_only_root(&kit),
    )
    .unwrap();
    assert_eq!(verified.log_index, None);
    let [(t, source)] = verified.verified_times.as_slice() else {
        panic!("one verified time expected: {:?}", verified.verified_times);
    };
    assert_eq!(t.unix_timestamp(), DEFAULT_SIGNING_TIME + 1);
    assert!(
        matches!(source, TimeSource::Rfc3161 { authority } if authority.contains("githubapp")),
        "{source:?}"
    );
    let id = verified.identity.unwrap();
    assert_eq!(
        id.extensions.source_repository_uri.as_deref(),
        Some("https://github.com/acme/app")
    );
}

#[test]
fn the_github_shaped_timestamp_authority_signs_with_sha384() {
    let kit = Testkit::github_private(22);
    let minted = provenance(&kit, &BundleSpec::github_private(workflow("acme/app")));
    let bundle: serde_json::Value = serde_json::from_str(&minted.json).unwrap();
    let token = bundle["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"][0]
        ["signedTimestamp"]
        .as_str()
        .unwrap();
    use base64::Engine as _;
    let der = base64::engine::general_purpose::STANDARD
        .decode(token)
        .unwrap();
    // id-sha384 (2.16.840.1.101.3.4.2.2) as a DER OID: the signer's digest.
    let sha384 = [
        0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02,
    ];
    assert!(der.windows(sha384.len()).any(|w| w == sha384));
}

#[test]
fn a_policy_that_requires_a_log_still_refuses_the_bundle() {
    let kit = Testkit::github_private(22);
    let minted = provenance(&kit, &BundleSpec::github_private(workflow("acme/app")));
    let policy = VerificationPolicy {
        require_tlog: true,
        ..github_policy("acme/app", vec![])
    };
    let err = verify(&minted, &policy, &timestamp_only_root(&kit)).unwrap_err();
    assert_eq!(err, VerifyError::NoTlogEntry);
}

#[test]
fn against_a_root_that_lists_a_log_a_keyless_bundle_without_an_entry_is_refused() {
    // Nothing changes for public-good-shaped roots: without a log entry the
    // bundle is refused even when the policy does not ask for one.
    let kit = Testkit::github_private(22);
    let minted = provenance(&kit, &BundleSpec::github_private(workflow("acme/app")));
    let with_logs = TrustedRoot::from_json(&kit.trusted_root_json()).unwrap();
    let err = verify(&minted, &github_policy("acme/app", vec![]), &with_logs).unwrap_err();
    assert_eq!(err, VerifyError::NoTlogEntry);
}

#[test]
fn without_a_timestamp_nothing_vouches_for_the_signing_time() {
    let kit = Testkit::github_private(22);
    let spec = BundleSpec {
        timestamp: TimestampSpec::None,
        ..BundleSpec::github_private(workflow("acme/app"))
    };
    let err = refusal(&kit, &spec, &github_policy("acme/app", vec![]));
    assert_eq!(err.reason(), "no-timestamp");
    assert!(
        err.to_string().contains("lists no transparency log"),
        "{err}"
    );
}

#[test]
fn a_log_entry_from_a_log_the_trust_root_does_not_list_is_refused_not_skipped() {
    let kit = Testkit::github_private(22);
    let spec = BundleSpec {
        tlog: TlogSpec::RekorV1(V1Kind::Auto),
        ..BundleSpec::github_private(workflow("acme/app"))
    };
    let err = refusal(&kit, &spec, &github_policy("acme/app", vec![]));
    assert_eq!(err.reason(), "tlog", "{err}");
}

#[test]
fn an_sct_is_still_required_unless_the_policy_waives_it() {
    let kit = Testkit::github_private(22);
    let minted = provenance(&kit, &BundleSpec::github_private(workflow("acme/app")));
    let mut policy = github_policy("acme/app", vec![]);
    if let SignerPolicy::Keyless { require_sct, .. } = &mut policy.signer {
        *require_sct = true;
    }
    let err = verify(&minted, &policy, &timestamp_only_root(&kit)).unwrap_err();
    assert_eq!(err.reason(), "sct", "{err}");
    // With an SCT from a CT log the root does not list, the same.
    let spec = BundleSpec {
        sct: SctSpec::Trusted,
        ..BundleSpec::github_private(workflow("acme/app"))
    };
    let err = refusal(&kit, &spec, &policy);
    assert_eq!(err.reason(), "sct", "{err}");
}

#[test]
fn another_repositorys_attestation_fails_on_the_claim_it_does_not_match() {
    let kit = Testkit::github_private(22);
    let minted = provenance(&kit, &BundleSpec::github_private(workflow("acme/other")));
    // The identity regex accepts any acme repository; the claim pins one.
    let mut policy = github_policy("acme/app", vec![]);
    if let SignerPolicy::Keyless { identities, .. } = &mut policy.signer {
        identities[0].subject =
            IdentityMatcher::Regex(regex::Regex::new("^https://github.com/acme/").unwrap());
        identities[0].claims = vec![claim(
            Claim::SourceRepositoryUri,
            "https://github.com/acme/app",
        )];
    }
    let err = verify(&minted, &policy, &timestamp_only_root(&kit)).unwrap_err();
    assert_eq!(err.reason(), "identity");
    let text = err.to_string();
    assert!(
        text.contains("sourceRepositoryURI (1.3.6.1.4.1.57264.1.12)")
            && text.contains("`https://github.com/acme/other`")
            && text.contains("`https://github.com/acme/app`"),
        "{text}"
    );
}

#[test]
fn a_certificate_without_a_required_claim_does_not_match() {
    let kit = Testkit::github_private(22);
    let spec = BundleSpec {
        tlog: TlogSpec::None,
        sct: SctSpec::None,
        timestamp: TimestampSpec::without_certs(),
        ..BundleSpec::email("dev@example.com", "https://accounts.example.com")
    };
    let policy = VerificationPolicy {
        signer: SignerPolicy::Keyless {
            identities: vec![IdentityPolicy {
                subject: IdentityMatcher::Exact("dev@example.com".into()),
                issuer: IdentityMatcher::Exact("https://accounts.example.com".into()),
                claims: vec![claim(Claim::RunnerEnvironment, "github-hosted")],
            }],
            require_sct: false,
        },
        require_tlog: false,
        key_hash: None,
    };
    let err = refusal(&kit, &spec, &policy);
    let text = err.to_string();
    assert!(
        text.contains("has no claim runnerEnvironment (1.3.6.1.4.1.57264.1.11)"),
        "{text}"
    );
}

#[test]
fn a_tsa_certificate_that_expired_since_still_vouches_for_a_stamp_made_inside_its_validity() {
    // GitHub's older TSA leaves have expired; their stamps stay good.
    let expiry = DEFAULT_SIGNING_TIME + 3_600;
    let kit = Testkit::github_private(22).with_tsa_validity(EPOCH_2020, expiry);
    let root = timestamp_only_root(&kit);
    let minted = provenance(&kit, &BundleSpec::github_private(workflow("acme/app")));
    verify(&minted, &github_policy("acme/app", vec![]), &root).unwrap();

    // A stamp dated after that expiry is refused.
    let mut spec = BundleSpec::github_private(workflow("acme/app"));
    spec.timestamp = TimestampSpec::Rfc3161(sigil_testkit::TsaOptions {
        embed_certs: false,
        gen_time: Some(expiry + 1),
        wrong_imprint: false,
    });
    spec.signing_time = expiry - 60;
    let err = verify(
        &provenance(&kit, &spec),
        &github_policy("acme/app", vec![]),
        &root,
    )
    .unwrap_err();
    assert_eq!(err.reason(), "timestamp", "{err}");
}

/// A trusted root listing two Fulcio CA generations with overlapping
/// validity (`older` first), and a TSA.
fn two_generations(older: &Testkit, newer: &Testkit) -> TrustedRoot {
    let spec = TrustRootSpec::timestamp_only();
    let mut root: serde_json::Value =
        serde_json::from_str(&older.trusted_root_json_with(&spec)).unwrap();
    let next: serde_json::Value =
        serde_json::from_str(&newer.trusted_root_json_with(&spec)).unwrap();
    let cas = root["certificateAuthorities"].as_array_mut().unwrap();
    cas[0]["validFor"] =
        serde_json::json!({"start": "2020-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"});
    cas.push(next["certificateAuthorities"][0].clone());
    TrustedRoot::from_json(&root.to_string()).unwrap()
}

#[test]
fn with_overlapping_fulcio_generations_each_leaf_chains_to_the_one_that_issued_it() {
    let older = Testkit::github_private(22);
    let mut newer = Testkit::github_private(23);
    // The same TSA for both generations, as GitHub rotates CAs and TSAs apart.
    newer.tsa = older.tsa.clone();
    let root = two_generations(&older, &newer);
    let spec = BundleSpec::github_private(workflow("acme/app"));
    for kit in [&older, &newer] {
        verify(
            &provenance(kit, &spec),
            &github_policy("acme/app", vec![]),
            &root,
        )
        .unwrap();
    }
    // A root listing only the older generation refuses the newer one's leaf.
    let only_older = timestamp_only_root(&older);
    let err = verify(
        &provenance(&newer, &spec),
        &github_policy("acme/app", vec![]),
        &only_older,
    )
    .unwrap_err();
    assert_eq!(err.reason(), "certificate-chain", "{err}");
}
