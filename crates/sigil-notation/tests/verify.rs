//! Notary Project signatures minted by the testkit (JWS and COSE, both
//! schemes, timestamps, CRLs and OCSP answers) judged by `verify`, one
//! behaviour per test; each failure names its check.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use sigil_notation::payload::Descriptor;
use sigil_notation::policy::{Check, TrustPolicy};
use sigil_notation::revocation::{Evidence, Request};
use sigil_notation::store::TrustStore;
use sigil_notation::verify::{
    Context, Failure, FailureKind, Verified, revocation_requests, verify_envelope,
};
use sigil_testkit::notation::{self, Format, LeafSpec, NotaryPki, OcspStatus, SignSpec};
use sigil_testkit::tsa::Tsa;
use time::OffsetDateTime;

const DIGEST: &str = "sha256:4f2ad9e0f4a5e6b0a6a07a1bcbd1c9f1f2d4bb7e38b1bf9d0bbc1a6e2e0c0de1";
const SIZE: u64 = 1234;
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const T0: i64 = 1_750_000_000;
const DAY: i64 = 86_400;

fn image() -> Descriptor {
    Descriptor::new(MANIFEST, DIGEST, SIZE)
}

fn at(unix: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(unix).unwrap()
}

fn pki(leaf: &LeafSpec) -> NotaryPki {
    NotaryPki::new(7, "acme", T0 - 100 * DAY, T0 + 3650 * DAY, leaf)
}

fn leaf() -> LeafSpec {
    LeafSpec::new("Acme", "signer", T0 - DAY, T0 + 30 * DAY)
}

fn tsa() -> Tsa {
    Tsa::new(
        7,
        "notation-tsa",
        "https://tsa.example",
        T0 - 100 * DAY,
        T0 + 3650 * DAY,
    )
}

fn store_for(pki: &NotaryPki, tsa: Option<&Tsa>) -> TrustStore {
    let mut store = TrustStore::new();
    store
        .add_file(
            sigil_notation::policy::StoreKind::Ca,
            "acme",
            "root.crt",
            pki.root.cert_pem().as_bytes(),
        )
        .unwrap();
    store
        .add_file(
            sigil_notation::policy::StoreKind::SigningAuthority,
            "acme-sa",
            "root.crt",
            &pki.root.cert_der,
        )
        .unwrap();
    if let Some(tsa) = tsa {
        store
            .add_file(
                sigil_notation::policy::StoreKind::Tsa,
                "stamps",
                "tsa.crt",
                tsa.root.cert_pem().as_bytes(),
            )
            .unwrap();
    }
    store
}

fn policy(level: &str, stores: &[&str], identity: &str, extra: &str) -> TrustPolicy {
    let stores: Vec<String> = stores.iter().map(|s| format!("\"{s}\"")).collect();
    let json = format!(
        r#"{{"version": "1.0", "trustPolicies": [{{
            "name": "acme",
            "registryScopes": ["registry.example/acme/app"],
            "signatureVerification": {{"level": "{level}"{extra}}},
            "trustStores": [{}],
            "trustedIdentities": ["{identity}"]
        }}]}}"#,
        stores.join(", ")
    );
    TrustPolicy::parse(json.as_bytes()).unwrap_or_else(|e| panic!("{e}: {json}"))
}

const ACME: &str = "x509.subject:C=US, ST=WA, O=Acme";

fn judge(
    envelope: &[u8],
    format: Format,
    policy: &TrustPolicy,
    store: &TrustStore,
    evidence: &Evidence,
    now: i64,
) -> Result<Verified, Failure> {
    let statement = policy.applicable("registry.example/acme/app").unwrap();
    let ctx = Context {
        statement,
        trust_store: store,
        revocation: evidence,
        now: at(now),
    };
    verify_envelope(format.media_type(), envelope, &image(), &ctx)
}

fn failure(result: Result<Verified, Failure>) -> Failure {
    match result {
        Err(f) => f,
        Ok(v) => panic!("verified: {v:?}"),
    }
}

#[test]
fn jws_and_cose_signatures_of_the_image_verify_with_a_trusted_timestamp() {
    let pki = pki(&leaf());
    let tsa = tsa();
    let store = store_for(&pki, Some(&tsa));
    let policy = policy("strict", &["ca:acme", "tsa:stamps"], ACME, "");
    for format in [Format::Jws, Format::Cose] {
        let mut spec = SignSpec::new(format, DIGEST, SIZE, T0);
        spec.timestamp = Some((tsa.clone(), T0 + 5));
        let envelope = notation::sign(&pki, &spec);
        let verified = judge(
            &envelope,
            format,
            &policy,
            &store,
            &Evidence::new(),
            T0 + 60,
        )
        .unwrap_or_else(|f| panic!("{format:?}: {f}"));
        assert!(verified.verified);
        assert_eq!(verified.timestamp, Some(at(T0 + 5)), "{format:?}");
        assert!(verified.signer.contains("signer"), "{}", verified.signer);
    }
}

#[test]
fn a_signature_of_another_digest_fails_integrity_naming_the_target() {
    let pki = pki(&leaf());
    let store = store_for(&pki, None);
    let policy = policy("strict", &["ca:acme"], ACME, "");
    for format in [Format::Jws, Format::Cose] {
        let other = DIGEST.replace("4f2a", "0000");
        let envelope = notation::sign(&pki, &SignSpec::new(format, &other, SIZE, T0));
        let f = failure(judge(
            &envelope,
            format,
            &policy,
            &store,
            &Evidence::new(),
            T0 + 60,
        ));
        assert_eq!(f.check, Check::Integrity);
        assert_eq!(f.kind.reason(), "notation_target_mismatch");
        assert!(f.to_string().contains("target digest"), "{f}");
        let bigger = notation::sign(&pki, &SignSpec::new(format, DIGEST, SIZE + 1, T0));
        let f = failure(judge(
            &bigger,
            format,
            &policy,
            &store,
            &Evidence::new(),
            T0 + 60,
        ));
        assert!(f.to_string().contains("target size"), "{f}");
    }
}

#[test]
fn every_flipped_byte_of_the_signature_or_payload_fails_integrity() {
    let pki = pki(&leaf());
    let store = store_for(&pki, None);
    let policy = policy("audit", &["ca:acme"], ACME, "");
    for format in [Format::Jws, Format::Cose] {
        let envelope = notation::sign(&pki, &SignSpec::new(format, DIGEST, SIZE, T0));
        assert!(judge(&envelope, format, &policy, &store, &Evidence::new(), T0).is_ok());
        let mut rejected = 0;
        for i in 0..envelope.len() {
            let mut tampered = envelope.clone();
            tampered[i] ^= 0x01;
            // Unsigned parts (the signing agent, JSON whitespace, base64
            // padding bits) may change; every other byte must be refused.
            if let Err(f) = judge(&tampered, format, &policy, &store, &Evidence::new(), T0) {
                assert_eq!(f.check, Check::Integrity, "byte {i}: {f}");
                rejected += 1;
            }
        }
        assert!(
            rejected * 10 > envelope.len() * 8,
            "{format:?}: only {rejected} of {} rejected",
            envelope.len()
        );
    }
}

#[test]
fn an_unknown_critical_attribute_fails_and_a_non_critical_one_does_not() {
    let pki = pki(&leaf());
    let store = store_for(&pki, None);
    let policy = policy("strict", &["ca:acme"], ACME, "");
    for format in [Format::Jws, Format::Cose] {
        let mut spec = SignSpec::new(format, DIGEST, SIZE, T0);
        spec.extended = vec![("com.example.note".into(), "hello".into(), false)];
        assert!(
            judge(
                &notation::sign(&pki, &spec),
                format,
                &policy,
                &store,
                &Evidence::new(),
                T0
            )
            .is_ok()
        );
        spec.extended = vec![("com.example.mustUnderstand".into(), "x".into(), true)];
        let f = failure(judge(
            &notation::sign(&pki, &spec),
            format,
            &policy,
            &store,
            &Evidence::new(),
            T0,
        ));
        assert_eq!(
            f.kind,
            FailureKind::UnknownCriticalAttribute("com.example.mustUnderstand".into())
        );
        assert!(f.to_string().contains("integrity check failed"), "{f}");
    }
}

#[test]
fn an_expired_signature_fails_under_strict_and_is_logged_under_permissive() {
    let pki = pki(&leaf());
    let store = store_for(&pki, None);
    for format in [Format::Jws, Format::Cose] {
        let mut spec = SignSpec::new(format, DIGEST, SIZE, T0);
        spec.expiry = Some(T0 + 3600);
        let envelope = notation::sign(&pki, &spec);
        let strict = policy("strict", &["ca:acme"], ACME, "");
        assert!(
            judge(
                &envelope,
                format,
                &strict,
                &store,
                &Evidence::new(),
                T0 + 60
            )
            .is_ok()
        );
        let f = failure(judge(
            &envelope,
            format,
            &strict,
            &store,
            &Evidence::new(),
            T0 + 7200,
        ));
        assert_eq!(f.check, Check::Expiry);
        assert!(f.to_string().contains("expired"), "{f}");
        let permissive = policy("permissive", &["ca:acme"], ACME, "");
        let v = judge(
            &envelope,
            format,
            &permissive,
            &store,
            &Evidence::new(),
            T0 + 7200,
        )
        .unwrap();
        assert_eq!(v.logged.first().map(|l| l.check), Some(Check::Expiry));
    }
}

#[test]
fn a_chain_outside_the_trust_store_fails_authenticity() {
    let pki = pki(&leaf());
    let stranger = NotaryPki::new(8, "stranger", T0 - 100 * DAY, T0 + 3650 * DAY, &leaf());
    let store = store_for(&stranger, None);
    let policy = policy("strict", &["ca:acme"], ACME, "");
    let envelope = notation::sign(&pki, &SignSpec::new(Format::Jws, DIGEST, SIZE, T0));
    let f = failure(judge(
        &envelope,
        Format::Jws,
        &policy,
        &store,
        &Evidence::new(),
        T0,
    ));
    assert_eq!(f.check, Check::Authenticity);
    assert_eq!(f.kind.reason(), "notation_untrusted_chain");
    assert!(f.to_string().contains("ca:acme"), "{f}");
    // audit logs authenticity failures.
    let audit = policy_audit();
    let v = judge(&envelope, Format::Jws, &audit, &store, &Evidence::new(), T0).unwrap();
    assert_eq!(v.logged.first().map(|l| l.check), Some(Check::Authenticity));
}

fn policy_audit() -> TrustPolicy {
    policy("audit", &["ca:acme"], ACME, "")
}

#[test]
fn a_signer_outside_the_trusted_identities_fails_authenticity_naming_the_subject() {
    let pki = pki(&LeafSpec::new("Mallory", "signer", T0 - DAY, T0 + 30 * DAY));
    let store = store_for(&pki, None);
    let policy = policy("strict", &["ca:acme"], ACME, "");
    let envelope = notation::sign(&pki, &SignSpec::new(Format::Cose, DIGEST, SIZE, T0));
    let f = failure(judge(
        &envelope,
        Format::Cose,
        &policy,
        &store,
        &Evidence::new(),
        T0,
    ));
    assert_eq!(f.check, Check::Authenticity);
    assert_eq!(f.kind.reason(), "notation_identity");
    assert!(f.to_string().contains("O=Mallory"), "{f}");
}

#[test]
fn an_expired_signing_certificate_fails_without_a_timestamp_and_passes_with_one() {
    let pki = pki(&leaf());
    let tsa = tsa();
    let later = T0 + 60 * DAY;
    for format in [Format::Jws, Format::Cose] {
        let plain = notation::sign(&pki, &SignSpec::new(format, DIGEST, SIZE, T0));
        let no_tsa = policy("strict", &["ca:acme"], ACME, "");
        let store = store_for(&pki, Some(&tsa));
        let f = failure(judge(
            &plain,
            format,
            &no_tsa,
            &store,
            &Evidence::new(),
            later,
        ));
        assert_eq!(f.check, Check::AuthenticTimestamp);
        assert!(f.to_string().contains("current time"), "{f}");

        let with_tsa = policy("strict", &["ca:acme", "tsa:stamps"], ACME, "");
        let f = failure(judge(
            &plain,
            format,
            &with_tsa,
            &store,
            &Evidence::new(),
            later,
        ));
        assert_eq!(f.kind, FailureKind::NoTimestamp);

        let mut spec = SignSpec::new(format, DIGEST, SIZE, T0);
        spec.timestamp = Some((tsa.clone(), T0 + 5));
        let stamped = notation::sign(&pki, &spec);
        let v = judge(&stamped, format, &with_tsa, &store, &Evidence::new(), later).unwrap();
        assert_eq!(v.judged_at, Some(at(T0 + 5)));

        // A timestamp after the certificate expired vouches for nothing.
        spec.timestamp = Some((tsa.clone(), T0 + 40 * DAY));
        let late = notation::sign(&pki, &spec);
        let f = failure(judge(
            &late,
            format,
            &with_tsa,
            &store,
            &Evidence::new(),
            later,
        ));
        assert_eq!(f.check, Check::AuthenticTimestamp);
        assert!(f.to_string().contains("trusted timestamp"), "{f}");
    }
}

#[test]
fn a_timestamp_from_an_untrusted_tsa_fails_the_authentic_timestamp_check() {
    let pki = pki(&leaf());
    let trusted = tsa();
    let rogue = Tsa::new(
        9,
        "rogue-tsa",
        "https://rogue.example",
        T0 - 100 * DAY,
        T0 + 3650 * DAY,
    );
    let store = store_for(&pki, Some(&trusted));
    let policy = policy("strict", &["ca:acme", "tsa:stamps"], ACME, "");
    let mut spec = SignSpec::new(Format::Jws, DIGEST, SIZE, T0);
    spec.timestamp = Some((rogue, T0 + 5));
    let f = failure(judge(
        &notation::sign(&pki, &spec),
        Format::Jws,
        &policy,
        &store,
        &Evidence::new(),
        T0 + 60,
    ));
    assert_eq!(f.check, Check::AuthenticTimestamp);
    assert_eq!(f.kind.reason(), "notation_timestamp");
}

#[test]
fn the_signing_authority_scheme_trusts_signing_authority_stores_only() {
    let pki = pki(&leaf());
    let store = store_for(&pki, None);
    for format in [Format::Jws, Format::Cose] {
        let mut spec = SignSpec::new(format, DIGEST, SIZE, T0);
        spec.scheme = "notary.x509.signingAuthority";
        let envelope = notation::sign(&pki, &spec);
        let sa = policy("strict", &["signingAuthority:acme-sa"], ACME, "");
        let v = judge(
            &envelope,
            format,
            &sa,
            &store,
            &Evidence::new(),
            T0 + 60 * DAY,
        )
        .unwrap();
        assert_eq!(
            v.judged_at,
            Some(at(T0)),
            "judged at the authentic signing time"
        );
        let ca = policy("strict", &["ca:acme"], ACME, "");
        let f = failure(judge(&envelope, format, &ca, &store, &Evidence::new(), T0));
        assert_eq!(f.check, Check::Authenticity);
    }
}

fn revocable_pki() -> NotaryPki {
    let mut spec = leaf();
    spec.ocsp_url = Some("http://127.0.0.1:9/ocsp".into());
    spec.crl_url = Some("http://127.0.0.1:9/leaf.crl".into());
    pki(&spec)
}

fn evidence_with(
    pki: &NotaryPki,
    envelope: &[u8],
    ocsp: Option<OcspStatus>,
    crl_revoked: Option<bool>,
) -> Evidence {
    let parsed = sigil_notation::decode::envelope("application/jose+json", envelope).unwrap();
    let mut evidence = Evidence::new();
    for request in revocation_requests(&parsed) {
        let response = match &request {
            Request::Ocsp { body, .. } => match ocsp {
                Some(status) => Ok(notation::ocsp_response(
                    &pki.intermediate,
                    &notation::cert_id_of_request(body),
                    status,
                    T0,
                    T0 + 7 * DAY,
                )),
                None => Err("connection refused".into()),
            },
            Request::Crl { .. } => match crl_revoked {
                Some(revoked) => {
                    let list = if revoked {
                        vec![(pki.leaf.serial.clone(), T0 - 10)]
                    } else {
                        vec![]
                    };
                    Ok(notation::crl(&pki.intermediate, &list, T0, T0 + 7 * DAY))
                }
                None => Err("connection refused".into()),
            },
            Request::AwsSigner { .. } => Err("not an AWS Signer signature".into()),
        };
        evidence.insert(request, response);
    }
    evidence
}

#[test]
fn revocation_by_ocsp_then_crl_follows_the_policy_level() {
    let pki = revocable_pki();
    let store = store_for(&pki, None);
    let strict = policy("strict", &["ca:acme"], ACME, "");
    let envelope = notation::sign(&pki, &SignSpec::new(Format::Jws, DIGEST, SIZE, T0));
    let now = T0 + 60;
    let run = |e: &Evidence, p: &TrustPolicy| judge(&envelope, Format::Jws, p, &store, e, now);

    assert!(
        run(
            &evidence_with(&pki, &envelope, Some(OcspStatus::Good), None),
            &strict
        )
        .is_ok()
    );

    let f = failure(run(
        &evidence_with(
            &pki,
            &envelope,
            Some(OcspStatus::Revoked(T0 - 10)),
            Some(false),
        ),
        &strict,
    ));
    assert_eq!(f.check, Check::Revocation);
    assert_eq!(f.kind.reason(), "notation_revoked");
    assert!(f.to_string().contains("OCSP"), "{f}");

    // OCSP unreachable: the CRL decides.
    let f = failure(run(
        &evidence_with(&pki, &envelope, None, Some(true)),
        &strict,
    ));
    assert!(f.to_string().contains("CRL"), "{f}");
    assert!(run(&evidence_with(&pki, &envelope, None, Some(false)), &strict).is_ok());
    let unknown = evidence_with(&pki, &envelope, Some(OcspStatus::Unknown), Some(false));
    assert!(
        run(&unknown, &strict).is_ok(),
        "an OCSP `unknown` falls back to the CRL"
    );

    // Neither answers: unknown fails under strict, is logged under permissive.
    let nothing = evidence_with(&pki, &envelope, None, None);
    let f = failure(run(&nothing, &strict));
    assert_eq!(f.kind.reason(), "notation_revocation_unknown");
    assert!(f.to_string().contains("connection refused"), "{f}");
    let permissive = policy("permissive", &["ca:acme"], ACME, "");
    let v = run(&nothing, &permissive).unwrap();
    assert_eq!(v.logged.first().map(|l| l.check), Some(Check::Revocation));
    let skip = policy(
        "strict",
        &["ca:acme"],
        ACME,
        r#", "override": {"revocation": "skip"}"#,
    );
    assert!(run(&nothing, &skip).unwrap().logged.is_empty());
}

#[test]
fn a_crl_or_ocsp_answer_signed_by_another_ca_or_expired_is_no_answer() {
    let pki = revocable_pki();
    let other = NotaryPki::new(9, "other", T0 - 100 * DAY, T0 + 3650 * DAY, &leaf());
    let store = store_for(&pki, None);
    let strict = policy("strict", &["ca:acme"], ACME, "");
    let envelope = notation::sign(&pki, &SignSpec::new(Format::Jws, DIGEST, SIZE, T0));
    let parsed = sigil_notation::decode::envelope("application/jose+json", &envelope).unwrap();
    let mut forged = Evidence::new();
    for request in revocation_requests(&parsed) {
        let response = match &request {
            Request::Ocsp { body, .. } => notation::ocsp_response(
                &other.intermediate,
                &notation::cert_id_of_request(body),
                OcspStatus::Good,
                T0,
                T0 + DAY,
            ),
            _ => notation::crl(&pki.intermediate, &[], T0 - 10 * DAY, T0 - 9 * DAY),
        };
        forged.insert(request, Ok(response));
    }
    let f = failure(judge(
        &envelope,
        Format::Jws,
        &strict,
        &store,
        &forged,
        T0 + 60,
    ));
    assert_eq!(f.kind.reason(), "notation_revocation_unknown");
    let text = f.to_string();
    assert!(
        text.contains("does not verify") || text.contains("not issued"),
        "{text}"
    );
    assert!(text.contains("expired"), "{text}");
}

#[test]
fn a_skip_level_verifies_nothing() {
    let json = r#"{"version": "1.0", "trustPolicies": [{"name": "off", "registryScopes": ["*"], "signatureVerification": {"level": "skip"}}]}"#;
    let policy = TrustPolicy::parse(json.as_bytes()).unwrap();
    let statement = policy.applicable("registry.example/acme/app").unwrap();
    let ctx = Context {
        statement,
        trust_store: &TrustStore::new(),
        revocation: &Evidence::new(),
        now: at(T0),
    };
    let v = verify_envelope("application/jose+json", b"not even json", &image(), &ctx).unwrap();
    assert!(!v.verified);
}

const PROFILE: &str = "arn:aws:signer:us-west-2:123456789012:/signing-profiles/acme_app";

fn aws_spec(format: Format) -> SignSpec {
    let mut spec = SignSpec::new(format, DIGEST, SIZE, T0);
    spec.scheme = "notary.x509.signingAuthority";
    spec.extended = vec![
        (
            "io.cncf.notary.verificationPlugin".into(),
            "com.amazonaws.signer.notation.plugin".into(),
            true,
        ),
        (
            "com.amazonaws.signer.signingProfileVersion".into(),
            format!("{PROFILE}/a1b2c3"),
            true,
        ),
        (
            "com.amazonaws.signer.signingJob".into(),
            "arn:aws:signer:us-west-2:123456789012:/signing-jobs/0f1e2d".into(),
            true,
        ),
    ];
    spec
}

fn aws_evidence(envelope: &[u8], format: Format, answer: Result<&str, &str>) -> Evidence {
    let parsed = sigil_notation::decode::envelope(format.media_type(), envelope).unwrap();
    let mut evidence = Evidence::new();
    for request in revocation_requests(&parsed) {
        match &request {
            Request::AwsSigner { region, query } => {
                assert_eq!(region, "us-west-2");
                assert!(
                    query.contains("platformId=Notation-OCI-SHA384-ECDSA"),
                    "{query}"
                );
                assert!(
                    query.contains("profileVersionArn=arn%3Aaws%3Asigner"),
                    "{query}"
                );
                assert_eq!(query.matches("certificateHashes=").count(), 3, "{query}");
            }
            other => panic!("an AWS Signer signature asks AWS Signer, not {other:?}"),
        }
        evidence.insert(
            request,
            answer.map(|a| a.as_bytes().to_vec()).map_err(str::to_owned),
        );
    }
    evidence
}

#[test]
fn aws_signer_signatures_are_judged_by_profile_and_aws_signers_revocation_answer() {
    let pki = pki(&leaf());
    let store = store_for(&pki, None);
    for format in [Format::Jws, Format::Cose] {
        let envelope = notation::sign(&pki, &aws_spec(format));
        let by_profile = policy("strict", &["signingAuthority:acme-sa"], PROFILE, "");
        let good = aws_evidence(&envelope, format, Ok(r#"{"revokedEntities": []}"#));
        let v = judge(&envelope, format, &by_profile, &store, &good, T0 + 60)
            .unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(
            v.aws_signer_profile.as_deref(),
            Some(format!("{PROFILE}/a1b2c3").as_str())
        );

        let by_version = policy(
            "strict",
            &["signingAuthority:acme-sa"],
            &format!("{PROFILE}/a1b2c3"),
            "",
        );
        assert!(judge(&envelope, format, &by_version, &store, &good, T0 + 60).is_ok());
        let other_version = policy(
            "strict",
            &["signingAuthority:acme-sa"],
            &format!("{PROFILE}/ffffff"),
            "",
        );
        let f = failure(judge(
            &envelope,
            format,
            &other_version,
            &store,
            &good,
            T0 + 60,
        ));
        assert_eq!(
            (f.check, f.kind.reason()),
            (Check::Authenticity, "notation_aws_signer")
        );
        let wildcard = policy("strict", &["signingAuthority:acme-sa"], "*", "");
        let f = failure(judge(&envelope, format, &wildcard, &store, &good, T0 + 60));
        assert!(
            f.to_string().contains("cannot be used with AWS Signer"),
            "{f}"
        );

        let revoked = aws_evidence(
            &envelope,
            format,
            Ok(
                r#"{"revokedEntities": [ "arn:aws:signer:us-west-2:123456789012:/signing-jobs/0f1e2d" ]}"#,
            ),
        );
        let f = failure(judge(
            &envelope,
            format,
            &by_profile,
            &store,
            &revoked,
            T0 + 60,
        ));
        assert_eq!(
            (f.check, f.kind.reason()),
            (Check::Revocation, "notation_revoked")
        );
        assert!(f.to_string().contains("signing-jobs/0f1e2d"), "{f}");
        let down = aws_evidence(&envelope, format, Err("AWS Signer did not answer"));
        let f = failure(judge(
            &envelope,
            format,
            &by_profile,
            &store,
            &down,
            T0 + 60,
        ));
        assert_eq!(f.kind.reason(), "notation_revocation_unknown");

        // Without the trust store's root and without AWS Signer's own root, nothing is trusted.
        let f = failure(judge(
            &envelope,
            format,
            &by_profile,
            &TrustStore::new(),
            &good,
            T0 + 60,
        ));
        assert_eq!(f.kind.reason(), "notation_missing_trust_store");
    }
}

#[test]
fn a_signature_naming_another_verification_plugin_fails_naming_it() {
    let pki = pki(&leaf());
    let store = store_for(&pki, None);
    let policy = policy("strict", &["ca:acme"], ACME, "");
    let mut spec = SignSpec::new(Format::Jws, DIGEST, SIZE, T0);
    spec.extended = vec![(
        "io.cncf.notary.verificationPlugin".into(),
        "com.example.plugin".into(),
        true,
    )];
    let f = failure(judge(
        &notation::sign(&pki, &spec),
        Format::Jws,
        &policy,
        &store,
        &Evidence::new(),
        T0,
    ));
    assert_eq!(f.kind, FailureKind::Plugin("com.example.plugin".into()));
}
