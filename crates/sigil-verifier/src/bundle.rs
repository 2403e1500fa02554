//! Sigstore bundles (`dev.sigstore.bundle.v1.Bundle`, media types v0.1–v0.3 in
//! both spellings) parsed from their protobuf-JSON form into decoded bytes.
//!
//! Parsing checks shape only: versions, required fields per version, base64 and
//! integer syntax. Whether anything verifies is decided by the `verify` module.

use base64::Engine as _;
use serde::Deserialize;

use crate::x509::{Certificate, CertificateError};

/// Why a bundle could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// The bundle is not valid JSON of the bundle shape.
    #[error("bundle is not valid JSON of the Sigstore bundle shape: {0}")]
    Json(String),
    /// The media type is not a known bundle version.
    #[error("unsupported bundle media type `{0}` (sigil reads bundle v0.1, v0.2 and v0.3)")]
    MediaType(String),
    /// A field is missing, malformed or not allowed in this bundle version.
    #[error("bundle field `{field}`: {reason}")]
    Field {
        /// JSON path of the field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A certificate in the bundle does not parse.
    #[error("bundle field `{field}`: {cause}")]
    Certificate {
        /// JSON path of the certificate.
        field: String,
        /// The parse failure.
        cause: CertificateError,
    },
}

/// The bundle format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum BundleVersion {
    /// v0.1: SET required, inclusion proof optional.
    V0_1,
    /// v0.2: inclusion proof required.
    V0_2,
    /// v0.3: single leaf certificate instead of a chain.
    V0_3,
}

impl BundleVersion {
    /// Maps a media type to a version; both the legacy
    /// `application/vnd.dev.sigstore.bundle+json;version=0.x` and the
    /// `application/vnd.dev.sigstore.bundle.v0.x+json` spellings are accepted.
    pub fn from_media_type(mt: &str) -> Option<Self> {
        Some(match mt {
            "application/vnd.dev.sigstore.bundle+json;version=0.1"
            | "application/vnd.dev.sigstore.bundle.v0.1+json" => Self::V0_1,
            "application/vnd.dev.sigstore.bundle+json;version=0.2"
            | "application/vnd.dev.sigstore.bundle.v0.2+json" => Self::V0_2,
            "application/vnd.dev.sigstore.bundle+json;version=0.3"
            | "application/vnd.dev.sigstore.bundle.v0.3+json" => Self::V0_3,
            _ => return None,
        })
    }
}

/// Every bundle media type spelling sigil understands.
pub const BUNDLE_MEDIA_TYPES: &[&str] = &[
    "application/vnd.dev.sigstore.bundle+json;version=0.1",
    "application/vnd.dev.sigstore.bundle.v0.1+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
    "application/vnd.dev.sigstore.bundle.v0.2+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle.v0.3+json",
];

/// The key material that signed the bundle.
#[derive(Debug, Clone)]
pub enum SigningMaterial {
    /// A certificate chain, leaf first (v0.1/v0.2 `x509CertificateChain`, or a
    /// v0.3 `certificate` as a one-element chain).
    Certificates(Vec<Certificate>),
    /// A managed key, identified by an optional hint; the key itself comes
    /// from the verification policy.
    PublicKey {
        /// The bundle's `publicKey.hint`, if any.
        hint: Option<String>,
    },
}

/// A Rekor log entry as carried in the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlogEntry {
    /// `logIndex`.
    pub log_index: i64,
    /// `logId.keyId`.
    pub log_id: Vec<u8>,
    /// `kindVersion.kind` (e.g. `hashedrekord`).
    pub kind: String,
    /// `kindVersion.version` (e.g. `0.0.1`).
    pub version: String,
    /// `integratedTime` (Unix seconds); 0 when absent (Rekor v2).
    pub integrated_time: i64,
    /// `inclusionPromise.signedEntryTimestamp`, if any.
    pub signed_entry_timestamp: Option<Vec<u8>>,
    /// `inclusionProof`, if any.
    pub inclusion_proof: Option<InclusionProof>,
    /// `canonicalizedBody`, decoded.
    pub canonicalized_body: Vec<u8>,
}

/// An RFC 9162 inclusion proof with its checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InclusionProof {
    /// Index of the leaf in the tree.
    pub log_index: i64,
    /// Root hash the proof leads to.
    pub root_hash: Vec<u8>,
    /// Tree size the root hash is for.
    pub tree_size: i64,
    /// Audit path, leaf to root.
    pub hashes: Vec<Vec<u8>>,
    /// The signed-note checkpoint text, if any.
    pub checkpoint: Option<String>,
}

/// A DSSE envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DsseEnvelope {
    /// The payload, decoded.
    pub payload: Vec<u8>,
    /// `payloadType`.
    pub payload_type: String,
    /// Signatures (`sig` decoded, `keyid` as given).
    pub signatures: Vec<(Vec<u8>, Option<String>)>,
}

/// What the bundle signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// A signature over an artifact's bytes, with the artifact's digest.
    MessageSignature {
        /// `messageDigest` as (algorithm, digest), if given.
        digest: Option<(String, Vec<u8>)>,
        /// The signature.
        signature: Vec<u8>,
    },
    /// A DSSE envelope (usually an in-toto statement).
    Dsse(DsseEnvelope),
}

/// A parsed bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The media type as written.
    pub media_type: String,
    /// The version the media type names.
    pub version: BundleVersion,
    /// The signing key material.
    pub signing: SigningMaterial,
    /// Rekor entries.
    pub tlog_entries: Vec<TlogEntry>,
    /// RFC 3161 timestamp tokens (DER).
    pub rfc3161_timestamps: Vec<Vec<u8>>,
    /// What the RFC 3161 timestamps cover when it is not the signature.
    /// Always `None` for a Sigstore bundle; cosign's legacy attestations
    /// timestamp the whole DSSE envelope instead.
    pub timestamped_message: Option<Vec<u8>>,
    /// The signed content.
    pub content: Content,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBundle {
    media_type: Option<String>,
    verification_material: Option<RawMaterial>,
    message_signature: Option<RawMessageSignature>,
    dsse_envelope: Option<RawDsse>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMaterial {
    x509_certificate_chain: Option<RawChain>,
    certificate: Option<RawBytes>,
    public_key: Option<RawHint>,
    #[serde(default)]
    tlog_entries: Vec<RawTlogEntry>,
    timestamp_verification_data: Option<RawTsData>,
}

#[derive(Deserialize)]
struct RawChain {
    #[serde(default)]
    certificates: Vec<RawBytes>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBytes {
    raw_bytes: Option<String>,
}

#[derive(Deserialize)]
struct RawHint {
    hint: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTsData {
    #[serde(default)]
    rfc3161_timestamps: Vec<RawSignedTimestamp>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSignedTimestamp {
    signed_timestamp: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTlogEntry {
    log_index: Option<serde_json::Value>,
    log_id: Option<RawKeyId>,
    kind_version: Option<RawKindVersion>,
    integrated_time: Option<serde_json::Value>,
    inclusion_promise: Option<RawPromise>,
    inclusion_proof: Option<RawProof>,
    canonicalized_body: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKeyId {
    key_id: Option<String>,
}

#[derive(Deserialize)]
struct RawKindVersion {
    kind: Option<String>,
    version: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPromise {
    signed_entry_timestamp: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawProof {
    log_index: Option<serde_json::Value>,
    root_hash: Option<String>,
    tree_size: Option<serde_json::Value>,
    #[serde(default)]
    hashes: Vec<String>,
    checkpoint: Option<RawCheckpoint>,
}

#[derive(Deserialize)]
struct RawCheckpoint {
    envelope: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMessageSignature {
    message_digest: Option<RawDigest>,
    signature: Option<String>,
}

#[derive(Deserialize)]
struct RawDigest {
    algorithm: Option<String>,
    digest: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDsse {
    payload: Option<String>,
    payload_type: Option<String>,
    #[serde(default)]
    signatures: Vec<RawDsseSig>,
}

#[derive(Deserialize)]
struct RawDsseSig {
    sig: Option<String>,
    keyid: Option<String>,
}

fn field(path: &str, reason: impl Into<String>) -> BundleError {
    BundleError::Field {
        field: path.to_owned(),
        reason: reason.into(),
    }
}

/// Decodes standard base64 (padding optional, as protobuf-JSON allows), also
/// accepting the URL-safe alphabet, which protobuf-JSON parsers accept too.
///
/// ASCII whitespace is skipped, as Go's and Python's decoders do: some signers
/// wrap long base64 values with newlines.
pub(crate) fn decode_b64(path: &str, s: &str) -> Result<Vec<u8>, BundleError> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    // Bundles carry standard, padded base64 without line breaks: decode that
    // at once; anything else (whitespace, which the decoder refuses, or
    // another alphabet) takes the lenient path below.
    if let Ok(bytes) = STANDARD.decode(s) {
        return Ok(bytes);
    }
    let compact;
    let s = if s.bytes().any(|b| b.is_ascii_whitespace()) {
        compact = s
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect::<String>();
        compact.as_str()
    } else {
        s
    };
    STANDARD
        .decode(s)
        .or_else(|_| STANDARD_NO_PAD.decode(s))
        .or_else(|_| URL_SAFE.decode(s))
        .or_else(|_| URL_SAFE_NO_PAD.decode(s))
        .map_err(|e| field(path, format!("invalid base64: {e}")))
}

fn required_b64(path: &str, s: Option<&String>) -> Result<Vec<u8>, BundleError> {
    let s = s.ok_or_else(|| field(path, "missing"))?;
    decode_b64(path, s)
}

/// protobuf-JSON int64: a decimal string or a JSON number.
fn int64(path: &str, v: Option<&serde_json::Value>) -> Result<Option<i64>, BundleError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => s
            .parse::<i64>()
            .map(Some)
            .map_err(|_| field(path, format!("`{s}` is not an integer"))),
        Some(serde_json::Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| field(path, format!("`{n}` is not a 64-bit integer"))),
        Some(other) => Err(field(path, format!("expected an integer, got {other}"))),
    }
}

fn non_negative(path: &str, v: Option<&serde_json::Value>) -> Result<i64, BundleError> {
    match int64(path, v)? {
        None => Ok(0),
        Some(n) if n < 0 => Err(field(path, format!("{n} is negative"))),
        Some(n) => Ok(n),
    }
}

fn certificate(path: &str, raw: &RawBytes) -> Result<Certificate, BundleError> {
    let der = required_b64(&format!("{path}.rawBytes"), raw.raw_bytes.as_ref())?;
    Certificate::from_der(&der).map_err(|cause| BundleError::Certificate {
        field: path.to_owned(),
        cause,
    })
}

fn tlog_entry(i: usize, raw: &RawTlogEntry) -> Result<TlogEntry, BundleError> {
    let p = format!("verificationMaterial.tlogEntries[{i}]");
    let kv = raw
        .kind_version
        .as_ref()
        .ok_or_else(|| field(&format!("{p}.kindVersion"), "missing"))?;
    let inclusion_proof = raw
        .inclusion_proof
        .as_ref()
        .map(|proof| -> Result<InclusionProof, BundleError> {
            let pp = format!("{p}.inclusionProof");
            Ok(InclusionProof {
                log_index: non_negative(&format!("{pp}.logIndex"), proof.log_index.as_ref())?,
                root_hash: required_b64(&format!("{pp}.rootHash"), proof.root_hash.as_ref())?,
                tree_size: non_negative(&format!("{pp}.treeSize"), proof.tree_size.as_ref())?,
                hashes: proof
                    .hashes
                    .iter()
                    .enumerate()
                    .map(|(j, h)| decode_b64(&format!("{pp}.hashes[{j}]"), h))
                    .collect::<Result<_, _>>()?,
                checkpoint: proof.checkpoint.as_ref().and_then(|c| c.envelope.clone()),
            })
        })
        .transpose()?;
    Ok(TlogEntry {
        log_index: non_negative(&format!("{p}.logIndex"), raw.log_index.as_ref())?,
        log_id: required_b64(
            &format!("{p}.logId.keyId"),
            raw.log_id.as_ref().and_then(|l| l.key_id.as_ref()),
        )?,
        kind: kv.kind.clone().unwrap_or_default(),
        version: kv.version.clone().unwrap_or_default(),
        integrated_time: non_negative(
            &format!("{p}.integratedTime"),
            raw.integrated_time.as_ref(),
        )?,
        signed_entry_timestamp: raw
            .inclusion_promise
            .as_ref()
            .and_then(|pr| pr.signed_entry_timestamp.as_ref())
            .map(|s| decode_b64(&format!("{p}.inclusionPromise.signedEntryTimestamp"), s))
            .transpose()?,
        inclusion_proof,
        canonicalized_body: required_b64(
            &format!("{p}.canonicalizedBody"),
            raw.canonicalized_body.as_ref(),
        )?,
    })
}

impl Bundle {
    /// Parses a bundle from its JSON text.
    pub fn from_json(json: &[u8]) -> Result<Self, BundleError> {
        let raw: RawBundle =
            serde_json::from_slice(json).map_err(|e| BundleError::Json(e.to_string()))?;
        let media_type = raw.media_type.unwrap_or_default();
        let version = BundleVersion::from_media_type(&media_type)
            .ok_or_else(|| BundleError::MediaType(media_type.clone()))?;
        let vm = raw
            .verification_material
            .ok_or_else(|| field("verificationMaterial", "missing"))?;

        let signing = match (&vm.x509_certificate_chain, &vm.certificate, &vm.public_key) {
            (Some(chain), None, None) => {
                if version >= BundleVersion::V0_3 {
                    // v0.3 replaced the chain with a single leaf; a chain there
                    // is a malformed bundle, not a variant to guess at.
                    return Err(field(
                        "verificationMaterial.x509CertificateChain",
                        "not allowed in a v0.3 bundle (use `certificate`)",
                    ));
                }
                let certs = chain
                    .certificates
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        certificate(
                            &format!("verificationMaterial.x509CertificateChain.certificates[{i}]"),
                            c,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if certs.is_empty() {
                    return Err(field(
                        "verificationMaterial.x509CertificateChain.certificates",
                        "empty certificate chain",
                    ));
                }
                SigningMaterial::Certificates(certs)
            }
            (None, Some(cert), None) => SigningMaterial::Certificates(vec![certificate(
                "verificationMaterial.certificate",
                cert,
            )?]),
            (None, None, Some(pk)) => SigningMaterial::PublicKey {
                hint: pk.hint.clone(),
            },
            (None, None, None) => {
                return Err(field(
                    "verificationMaterial",
                    "no certificate, certificate chain or public key",
                ));
            }
            _ => {
                return Err(field(
                    "verificationMaterial",
                    "more than one of certificate, x509CertificateChain and publicKey",
                ));
            }
        };

        let tlog_entries = vm
            .tlog_entries
            .iter()
            .enumerate()
            .map(|(i, e)| tlog_entry(i, e))
            .collect::<Result<Vec<_>, _>>()?;
        let rfc3161_timestamps = vm
            .timestamp_verification_data
            .as_ref()
            .map(|d| {
                d.rfc3161_timestamps
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        required_b64(
                            &format!(
                                "verificationMaterial.timestampVerificationData.rfc3161Timestamps[{i}].signedTimestamp"
                            ),
                            t.signed_timestamp.as_ref(),
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?
            .unwrap_or_default();

        let content = match (raw.message_signature, raw.dsse_envelope) {
            (Some(ms), None) => Content::MessageSignature {
                digest: ms
                    .message_digest
                    .map(|d| -> Result<_, BundleError> {
                        Ok((
                            d.algorithm.unwrap_or_default(),
                            required_b64(
                                "messageSignature.messageDigest.digest",
                                d.digest.as_ref(),
                            )?,
                        ))
                    })
                    .transpose()?,
                signature: required_b64("messageSignature.signature", ms.signature.as_ref())?,
            },
            (None, Some(env)) => Content::Dsse(DsseEnvelope {
                payload: required_b64("dsseEnvelope.payload", env.payload.as_ref())?,
                payload_type: env
                    .payload_type
                    .ok_or_else(|| field("dsseEnvelope.payloadType", "missing"))?,
                signatures: env
                    .signatures
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        Ok((
                            required_b64(
                                &format!("dsseEnvelope.signatures[{i}].sig"),
                                s.sig.as_ref(),
                            )?,
                            s.keyid.clone().filter(|k| !k.is_empty()),
                        ))
                    })
                    .collect::<Result<_, BundleError>>()?,
            }),
            (None, None) => {
                return Err(field(
                    "messageSignature",
                    "bundle has neither messageSignature nor dsseEnvelope",
                ));
            }
            (Some(_), Some(_)) => {
                return Err(field(
                    "dsseEnvelope",
                    "bundle has both messageSignature and dsseEnvelope",
                ));
            }
        };

        Ok(Self {
            media_type,
            version,
            signing,
            tlog_entries,
            rfc3161_timestamps,
            timestamped_message: None,
            content,
        })
    }

    /// The leaf certificate, when the bundle is certificate-based.
    pub fn leaf_certificate(&self) -> Option<&Certificate> {
        match &self.signing {
            SigningMaterial::Certificates(c) => c.first(),
            SigningMaterial::PublicKey { .. } => None,
        }
    }

    /// The signature bytes that timestamps and log entries are bound to: the
    /// message signature, or the (single) DSSE signature.
    pub fn signature_bytes(&self) -> Option<&[u8]> {
        match &self.content {
            Content::MessageSignature { signature, .. } => Some(signature),
            Content::Dsse(env) => env.signatures.first().map(|(s, _)| s.as_slice()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_media_type_spellings_map_to_the_same_version() {
        assert_eq!(
            BundleVersion::from_media_type("application/vnd.dev.sigstore.bundle.v0.3+json"),
            Some(BundleVersion::V0_3)
        );
        assert_eq!(
            BundleVersion::from_media_type("application/vnd.dev.sigstore.bundle+json;version=0.3"),
            Some(BundleVersion::V0_3)
        );
        assert_eq!(
            BundleVersion::from_media_type("application/vnd.dev.sigstore.bundle+json;version=0.4"),
            None
        );
    }

    #[test]
    fn malformed_json_and_unknown_versions_are_rejected() {
        assert!(matches!(Bundle::from_json(b"{"), Err(BundleError::Json(_))));
        assert!(matches!(
            Bundle::from_json(
                br#"{"mediaType":"application/vnd.dev.sigstore.bundle+json;version=0.9"}"#
            ),
            Err(BundleError::MediaType(_))
        ));
    }

    #[test]
    fn negative_integers_are_rejected() {
        let err = non_negative("x", Some(&serde_json::json!("-1"))).unwrap_err();
        assert!(err.to_string().contains("negative"));
    }
}
