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
//! body matches this signature, key and payload.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;
use time::OffsetDateTime;

use crate::bundle::{Bundle, BundleVersion, Content, DsseEnvelope, SigningMaterial, TlogEntry};
use crate::oci::Digest;
use crate::trust::TrustedRoot;
use crate::verify::{Artifact, VerificationPolicy, VerifiedBundle, VerifyError, verify_bundle};
use crate::x509::Certificate;

/// Layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Layer annotation holding the PEM signing certificate.
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// Layer annotation holding the PEM chain above the certificate.
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
            let mut certs =
                Certificate::from_pem_chain(pem).map_err(|e| LegacyError::BadAnnotation {
                    annotation: CERTIFICATE_ANNOTATION,
                    reason: e.to_string(),
                })?;
            if let Some(chain) = non_empty(annotations, CHAIN_ANNOTATION) {
                certs.extend(Certificate::from_pem_chain(chain).map_err(|e| {
                    LegacyError::BadAnnotation {
                        annotation: CHAIN_ANNOTATION,
                        reason: e.to_string(),
                    }
                })?);
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
    let digest = crate::crypto::sha256(payload).to_vec();
    Ok(legacy_bundle(
        signing,
        tlog,
        ts,
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
    let bundle = legacy_bundle(signing, tlog, ts, Content::Dsse(env));
    Ok(verify_bundle(
        &bundle,
        Artifact::Sha256(image.bytes()),
        policy,
        root,
        now,
    )?)
}
