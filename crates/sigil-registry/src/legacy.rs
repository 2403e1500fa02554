//! cosign's legacy signature storage (`sha256-<hex>.sig` / `.att` tags):
//! turns a simple-signing layer or a DSSE attestation layer, with its cosign
//! annotations, into a Sigstore bundle and verifies it with the same core as
//! new-format bundles.
//!
//! A simple-signing signature covers the payload bytes, not the image; the
//! image is bound only through `critical.image.docker-manifest-digest`, which
//! is therefore checked against the digest being verified after the
//! signature verifies. The Rekor bundle annotation becomes a v0.1-style log
//! entry (SET, no inclusion proof), so the core checks its SET and that its
//! body matches this signature, key and payload. A managed key's signature
//! (over the payload, or over the DSSE PAE of an `.att` layer) is checked
//! with the policy's `hashAlgorithm`, as policy-controller checks it, else
//! with the digest cosign uses for the key's type.
//!
//! RFC 3161 timestamps (`dev.sigstore.cosign/rfc3161timestamp`, JSON
//! `{"SignedRFC3161Timestamp":"<base64 TimeStampResp>"}`) cover what cosign
//! timestamps: the raw (decoded) signature bytes of a `.sig` layer, and the
//! whole DSSE envelope of an `.att` layer, which has no separate signature
//! annotation (cosign's `VerifyRFC3161Timestamp` falls back to the payload).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;
use time::OffsetDateTime;

use crate::Digest;
use sigil_verifier::bundle::{
    Bundle, BundleVersion, Content, DsseEnvelope, SigningMaterial, TlogEntry,
};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{
    Artifact, VerificationPolicy, VerifiedBundle, VerifyError, verify_bundle,
};
use sigil_verifier::x509::Certificate;

/// Layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Layer annotation holding the PEM signing certificate.
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// Layer annotation holding the PEM chain above the certificate (not used:
/// the chain comes from the trusted root).
pub const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
/// Layer annotation holding the Rekor bundle (SET and entry).
pub const REKOR_BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
/// Layer annotation holding an RFC 3161 timestamp.
pub const TIMESTAMP_ANNOTATION: &str = "dev.sigstore.cosign/rfc3161timestamp";
/// `critical.type` of a cosign image signature payload.
pub const SIMPLE_SIGNING_TYPE: &str = "cosign container image signature";

/// Why a legacy signature did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LegacyError {
    /// A required annotation is missing or empty.
    #[error("layer annotation `{0}` is missing or empty")]
    MissingAnnotation(&'static str),
    /// An annotation does not decode.
    #[error("layer annotation `{annotation}` is malformed: {reason}")]
    BadAnnotation {
        /// The annotation.
        annotation: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The simple-signing payload is malformed.
    #[error("simple-signing payload is not valid: {0}")]
    Payload(String),
    /// The payload names another image.
    #[error(
        "signed payload is for image {found}, not {expected}; the signature was made for another image (copied or moved)"
    )]
    DigestMismatch {
        /// The image being verified.
        expected: String,
        /// The digest in the payload.
        found: String,
    },
    /// The DSSE envelope is malformed.
    #[error("DSSE attestation layer is not a valid envelope: {0}")]
    Envelope(String),
    /// The core verification failed.
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

impl LegacyError {
    /// A stable, short label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingAnnotation(_) => "missing-annotation",
            Self::BadAnnotation { .. } => "bad-annotation",
            Self::Payload(_) => "bad-payload",
            Self::DigestMismatch { .. } => "image-digest-mismatch",
            Self::Envelope(_) => "bad-envelope",
            Self::Verify(e) => e.reason(),
        }
    }
}

#[derive(Deserialize)]
struct RekorBundle {
    #[serde(rename = "SignedEntryTimestamp")]
    set: String,
    #[serde(rename = "Payload")]
    payload: RekorPayload,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RekorPayload {
    body: String,
    integrated_time: i64,
    log_index: i64,
    #[serde(rename = "logID")]
    log_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BodyKind {
    kind: String,
    api_version: String,
}

#[derive(Deserialize)]
struct TimestampAnnotation {
    #[serde(rename = "SignedRFC3161Timestamp")]
    signed: String,
}

fn b64(annotation: &'static str, s: &str) -> Result<Vec<u8>, LegacyError> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| LegacyError::BadAnnotation {
            annotation,
            reason: format!("not base64: {e}"),
        })
}

fn non_empty<'a>(a: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    a.get(key)
        .map(String::as_str)
        .filter(|s| !s.trim().is_empty())
}

/// Signer material, log entries and RFC 3161 tokens read from annotations.
type Evidence = (SigningMaterial, Vec<TlogEntry>, Vec<Vec<u8>>);

/// Reads the signer material and log/timestamp evidence from the annotations.
fn evidence(annotations: &BTreeMap<String, String>) -> Result<Evidence, LegacyError> {
    let signing = match non_empty(annotations, CERTIFICATE_ANNOTATION) {
        Some(pem) => {
            // The leaf alone: the chain annotation is whatever Fulcio
            // returned, root included, and trust in it must come from the
            // trusted root anyway (as sigstore-go and cosign's trusted-root
            // path do, which ignore it).
            let certs =
                Certificate::from_pem_chain(pem).map_err(|e| LegacyError::BadAnnotation {
                    annotation: CERTIFICATE_ANNOTATION,
                    reason: e.to_string(),
                })?;
            if certs.len() > 1 {
                return Err(LegacyError::BadAnnotation {
                    annotation: CERTIFICATE_ANNOTATION,
                    reason: format!("holds {} certificates, not one", certs.len()),
                });
            }
            if certs.is_empty() {
                return Err(LegacyError::BadAnnotation {
                    annotation: CERTIFICATE_ANNOTATION,
                    reason: "no certificate".into(),
                });
            }
            SigningMaterial::Certificates(certs)
        }
        None => SigningMaterial::PublicKey { hint: None },
    };
    let mut tlog = Vec::new();
    if let Some(json) = non_empty(annotations, REKOR_BUNDLE_ANNOTATION) {
        let bad = |reason: String| LegacyError::BadAnnotation {
            annotation: REKOR_BUNDLE_ANNOTATION,
            reason,
        };
        let rb: RekorBundle = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        let body = b64(REKOR_BUNDLE_ANNOTATION, &rb.payload.body)?;
        let kind: BodyKind =
            serde_json::from_slice(&body).map_err(|e| bad(format!("entry body: {e}")))?;
        tlog.push(TlogEntry {
            log_index: rb.payload.log_index,
            log_id: hex::decode(rb.payload.log_id.trim())
                .map_err(|e| bad(format!("logID is not hex: {e}")))?,
            kind: kind.kind,
            version: kind.api_version,
            integrated_time: rb.payload.integrated_time,
            signed_entry_timestamp: Some(b64(REKOR_BUNDLE_ANNOTATION, &rb.set)?),
            inclusion_proof: None,
            canonicalized_body: body,
        });
    }
    let mut timestamps = Vec::new();
    if let Some(json) = non_empty(annotations, TIMESTAMP_ANNOTATION) {
        let t: TimestampAnnotation =
            serde_json::from_str(json).map_err(|e| LegacyError::BadAnnotation {
                annotation: TIMESTAMP_ANNOTATION,
                reason: e.to_string(),
            })?;
        timestamps.push(b64(TIMESTAMP_ANNOTATION, &t.signed)?);
    }
    Ok((signing, tlog, timestamps))
}

fn legacy_bundle(
    signing: SigningMaterial,
    tlog: Vec<TlogEntry>,
    timestamps: Vec<Vec<u8>>,
    timestamped_message: Option<Vec<u8>>,
    content: Content,
) -> Bundle {
    Bundle {
        media_type: "application/vnd.dev.sigstore.bundle+json;version=0.1".into(),
        // v0.1 semantics: a SET suffices, no inclusion proof is required,
        // which is what cosign's legacy Rekor bundle annotation carries.
        version: BundleVersion::V0_1,
        signing,
        tlog_entries: tlog,
        rfc3161_timestamps: timestamps,
        timestamped_message,
        content,
    }
}

#[derive(Deserialize)]
struct SimpleSigning {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: CriticalImage,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct CriticalImage {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// Builds the bundle of a legacy `.sig` layer: a message signature over the payload.
pub fn simple_signing_bundle(
    payload: &[u8],
    annotations: &BTreeMap<String, String>,
) -> Result<Bundle, LegacyError> {
    let sig = non_empty(annotations, SIGNATURE_ANNOTATION)
        .ok_or(LegacyError::MissingAnnotation(SIGNATURE_ANNOTATION))?;
    let signature = b64(SIGNATURE_ANNOTATION, sig)?;
    let (signing, tlog, ts) = evidence(annotations)?;
    let digest = sigil_verifier::crypto::sha256(payload).to_vec();
    Ok(legacy_bundle(
        signing,
        tlog,
        ts,
        None,
        Content::MessageSignature {
            digest: Some(("SHA2_256".into(), digest)),
            signature,
        },
    ))
}

/// Verifies a legacy `.sig` layer for `image`: signature, log/time evidence
/// and signer through the core, then the payload's binding to `image`.
pub fn verify_simple_signing(
    payload: &[u8],
    annotations: &BTreeMap<String, String>,
    image: &Digest,
    policy: &VerificationPolicy,
    root: &TrustedRoot,
    now: OffsetDateTime,
) -> Result<VerifiedBundle, LegacyError> {
    let bundle = simple_signing_bundle(payload, annotations)?;
    let verified = verify_bundle(&bundle, Artifact::Bytes(payload), policy, root, now)?;
    // Only now is the payload trusted enough to read.
    let p: SimpleSigning =
        serde_json::from_slice(payload).map_err(|e| LegacyError::Payload(e.to_string()))?;
    if p.critical.kind != SIMPLE_SIGNING_TYPE {
        return Err(LegacyError::Payload(format!(
            "critical.type is `{}`, not `{SIMPLE_SIGNING_TYPE}`",
            p.critical.kind
        )));
    }
    let found =
        Digest::parse(&p.critical.image.digest).map_err(|e| LegacyError::Payload(e.to_string()))?;
    if found != *image {
        return Err(LegacyError::DigestMismatch {
            expected: image.to_string(),
            found: found.to_string(),
        });
    }
    Ok(verified)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnvelope {
    payload: String,
    payload_type: String,
    signatures: Vec<RawSig>,
}

#[derive(Deserialize)]
struct RawSig {
    sig: String,
    #[serde(default)]
    keyid: Option<String>,
}

/// Verifies a legacy `.att` layer (a DSSE envelope): the core checks the
/// envelope signature and that the in-toto subject names `image`.
pub fn verify_legacy_attestation(
    envelope: &[u8],
    annotations: &BTreeMap<String, String>,
    image: &Digest,
    policy: &VerificationPolicy,
    root: &TrustedRoot,
    now: OffsetDateTime,
) -> Result<VerifiedBundle, LegacyError> {
    let raw: RawEnvelope =
        serde_json::from_slice(envelope).map_err(|e| LegacyError::Envelope(e.to_string()))?;
    let decode = |s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| LegacyError::Envelope(format!("not base64: {e}")))
    };
    let mut signatures = Vec::with_capacity(raw.signatures.len());
    for s in &raw.signatures {
        signatures.push((decode(&s.sig)?, s.keyid.clone()));
    }
    let env = DsseEnvelope {
        payload: decode(&raw.payload)?,
        payload_type: raw.payload_type,
        signatures,
    };
    let (signing, tlog, ts) = evidence(annotations)?;
    let bundle = legacy_bundle(
        signing,
        tlog,
        ts,
        Some(envelope.to_vec()),
        Content::Dsse(env),
    );
    Ok(verify_bundle(
        &bundle,
        Artifact::Sha256(image.bytes()),
        policy,
        root,
        now,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigil_testkit::cosign::{RFC3161_ANNOTATION, legacy_signature, rekor_bundle_annotation};
    use sigil_testkit::tsa::TimestampRequest;
    use sigil_testkit::{
        BundleSpec, Content as KitContent, Testkit, TimestampSpec, TlogSpec, V1Kind,
    };
    use sigil_verifier::crypto::HashAlgorithm;
    use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};

    const IMAGE: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";

    fn setup() -> (Testkit, TrustedRoot, BundleSpec, VerificationPolicy, Digest) {
        let kit = Testkit::new(41);
        let root = TrustedRoot::from_json(&kit.trusted_root_json()).expect("testkit root loads");
        let spec = BundleSpec::default();
        let policy = VerificationPolicy::keyless(IdentityPolicy {
            subject: IdentityMatcher::Exact(spec.identity.as_str().into()),
            issuer: IdentityMatcher::Exact(spec.oidc_issuer.clone()),
            claims: Vec::new(),
        });
        let image = Digest::parse(IMAGE).expect("digest parses");
        (kit, root, spec, policy, image)
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    #[test]
    fn a_sig_layer_timestamp_covers_the_raw_signature_bytes() {
        let (kit, root, spec, policy, image) = setup();
        let spec = BundleSpec {
            timestamp: TimestampSpec::without_certs(),
            ..spec
        };
        let sig = legacy_signature(&kit, &spec, "r.io/app", IMAGE).expect("mints");
        let verified = verify_simple_signing(
            &sig.payload,
            &sig.annotations,
            &image,
            &policy,
            &root,
            now(),
        )
        .expect("verifies");
        assert!(
            verified
                .verified_times
                .iter()
                .any(|(_, s)| matches!(s, sigil_verifier::verify::TimeSource::Rfc3161 { .. }))
        );

        // The same token over the base64 text of the signature is refused.
        let b64_text = sig.annotations[SIGNATURE_ANNOTATION].clone().into_bytes();
        let token = kit.tsa.timestamp(&TimestampRequest {
            message: b64_text,
            gen_time: spec.signing_time + 1,
            embed_certs: false,
            imprint_override: None,
        });
        let mut annotations = sig.annotations.clone();
        annotations.insert(
            RFC3161_ANNOTATION.into(),
            sigil_testkit::cosign::rfc3161_annotation(&token),
        );
        let e = verify_simple_signing(&sig.payload, &annotations, &image, &policy, &root, now())
            .expect_err("a timestamp over other bytes is refused");
        assert_eq!(e.reason(), "timestamp", "{e}");
    }

    /// A keyless legacy `.att` layer for `IMAGE`, timestamped over `which`.
    fn attestation(
        kit: &Testkit,
        spec: &BundleSpec,
        over_envelope: bool,
    ) -> (Vec<u8>, BTreeMap<String, String>) {
        let spec = BundleSpec {
            tlog: TlogSpec::RekorV1(V1Kind::Intoto),
            ..spec.clone()
        };
        let digest = Digest::parse(IMAGE).expect("digest").bytes();
        let statement = sigil_testkit::in_toto_statement(
            &digest,
            "https://slsa.dev/provenance/v0.2",
            serde_json::json!({}),
        );
        let minted = kit
            .sign(
                &spec,
                KitContent::Dsse {
                    payload_type: sigil_testkit::IN_TOTO_PAYLOAD_TYPE.into(),
                    payload: statement,
                },
            )
            .expect("mints");
        let envelope = minted
            .envelope
            .as_ref()
            .map(|e| e.to_json().to_string())
            .expect("dsse")
            .into_bytes();
        let mut annotations = BTreeMap::new();
        let leaf = minted.leaf.as_ref().expect("keyless");
        annotations.insert(CERTIFICATE_ANNOTATION.into(), leaf.cert_pem());
        let entry = minted.tlog_entry.as_ref().expect("logged");
        annotations.insert(
            REKOR_BUNDLE_ANNOTATION.into(),
            rekor_bundle_annotation(entry).expect("rekor v1"),
        );
        let message = if over_envelope {
            envelope.clone()
        } else {
            minted.signature.clone()
        };
        let token = kit.tsa.timestamp(&TimestampRequest {
            message,
            gen_time: spec.signing_time + 1,
            embed_certs: false,
            imprint_override: None,
        });
        annotations.insert(
            TIMESTAMP_ANNOTATION.into(),
            sigil_testkit::cosign::rfc3161_annotation(&token),
        );
        (envelope, annotations)
    }

    #[test]
    fn an_att_layer_timestamp_covers_the_whole_envelope_as_cosign_writes_it() {
        let (kit, root, spec, policy, image) = setup();
        let (envelope, annotations) = attestation(&kit, &spec, true);
        verify_legacy_attestation(&envelope, &annotations, &image, &policy, &root, now())
            .expect("a timestamp over the envelope verifies");
        let (envelope, annotations) = attestation(&kit, &spec, false);
        let e = verify_legacy_attestation(&envelope, &annotations, &image, &policy, &root, now())
            .expect_err("cosign never timestamps the bare DSSE signature of a legacy attestation");
        assert_eq!(e.reason(), "timestamp", "{e}");
    }

    /// A managed-key `.sig` layer for `IMAGE` without a log entry, its
    /// signature made over the `hash` of cosign's payload.
    fn key_signature(
        key: &sigil_testkit::KeyPair,
        hash: HashAlgorithm,
    ) -> (Vec<u8>, BTreeMap<String, String>) {
        let payload = sigil_testkit::cosign::simple_signing_payload("r.io/app", IMAGE);
        let sig = key.sign_prehash(&hash.digest(&payload)).expect("signs");
        let mut annotations = BTreeMap::new();
        annotations.insert(
            SIGNATURE_ANNOTATION.into(),
            base64::engine::general_purpose::STANDARD.encode(sig),
        );
        (payload, annotations)
    }

    fn key_policy(key: &sigil_testkit::KeyPair, hash: Option<HashAlgorithm>) -> VerificationPolicy {
        VerificationPolicy {
            key_hash: hash,
            require_tlog: false,
            ..VerificationPolicy::key(
                sigil_verifier::crypto::PublicKey::from_pem(&key.public_key_pem()).expect("key"),
            )
        }
    }

    #[test]
    fn a_sig_layer_verifies_with_the_hash_algorithm_its_signature_was_made_with() {
        let (_, root, _, _, image) = setup();
        let key = sigil_testkit::KeyPair::p256(41, "hash");
        for signed in [
            HashAlgorithm::Sha224,
            HashAlgorithm::Sha256,
            HashAlgorithm::Sha384,
            HashAlgorithm::Sha512,
        ] {
            let (payload, annotations) = key_signature(&key, signed);
            verify_simple_signing(
                &payload,
                &annotations,
                &image,
                &key_policy(&key, Some(signed)),
                &root,
                now(),
            )
            .unwrap_or_else(|e| panic!("{signed:?}: {e}"));
            let other = if signed == HashAlgorithm::Sha512 {
                HashAlgorithm::Sha256
            } else {
                HashAlgorithm::Sha512
            };
            let e = verify_simple_signing(
                &payload,
                &annotations,
                &image,
                &key_policy(&key, Some(other)),
                &root,
                now(),
            )
            .expect_err("another digest does not verify");
            assert_eq!(e.reason(), "bad-signature", "{signed:?}: {e}");
        }
    }

    #[test]
    fn an_att_layer_verifies_with_the_hash_algorithm_its_envelope_was_signed_with() {
        let (_, root, _, _, image) = setup();
        let key = sigil_testkit::KeyPair::p256(41, "hash");
        let digest = Digest::parse(IMAGE).expect("digest").bytes();
        let statement = sigil_testkit::in_toto_statement(
            &digest,
            "https://slsa.dev/provenance/v0.2",
            serde_json::json!({}),
        );
        let payload_type = sigil_testkit::IN_TOTO_PAYLOAD_TYPE;
        let pae = sigil_verifier::dsse::pae(payload_type, &statement);
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let sig = key
            .sign_prehash(&HashAlgorithm::Sha224.digest(&pae))
            .expect("signs");
        let envelope = serde_json::json!({
            "payload": b64(&statement),
            "payloadType": payload_type,
            "signatures": [{"sig": b64(&sig), "keyid": ""}],
        })
        .to_string()
        .into_bytes();
        let annotations = BTreeMap::new();
        verify_legacy_attestation(
            &envelope,
            &annotations,
            &image,
            &key_policy(&key, Some(HashAlgorithm::Sha224)),
            &root,
            now(),
        )
        .expect("verifies over sha224");
        let e = verify_legacy_attestation(
            &envelope,
            &annotations,
            &image,
            &key_policy(&key, None),
            &root,
            now(),
        )
        .expect_err("the P-256 default, sha256, does not verify it");
        assert_eq!(e.reason(), "bad-signature", "{e}");
    }
}
