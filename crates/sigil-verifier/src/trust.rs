//! Trust roots: `trusted_root.json` (`application/vnd.dev.sigstore.trustedroot+json;version=0.1`)
//! parsed once into decoded keys and certificates, plus the embedded
//! Sigstore public-good and staging roots and the TUF roots of trust from
//! which sigil-controller keeps them fresh (this crate does no TUF itself).
//!
//! Validity windows (`validFor`) are closed intervals: both `start` and `end`
//! are inside. A key or authority without a `start` is rejected when the root
//! is loaded: a trust root that cannot say when a key became trusted is broken,
//! and treating the missing bound as "forever" would widen trust silently.

use base64::Engine as _;
use serde::Deserialize;
use time::OffsetDateTime;

use crate::crypto::{HashAlgorithm, PublicKey};
use crate::x509::Certificate;

/// The public-good `trusted_root.json` embedded in sigil.
pub const PUBLIC_GOOD_JSON: &str = include_str!("../trust/trusted_root.public-good.json");
/// The staging `trusted_root.json` embedded in sigil.
pub const STAGING_JSON: &str = include_str!("../trust/trusted_root.staging.json");
/// The TUF root of trust (`root.json`) of the public-good TUF repository.
pub const PUBLIC_GOOD_TUF_ROOT: &str = include_str!("../trust/tuf-root.public-good.json");
/// The TUF root of trust (`root.json`) of the staging TUF repository.
pub const STAGING_TUF_ROOT: &str = include_str!("../trust/tuf-root.staging.json");
/// The public-good TUF mirror, which serves `trusted_root.json` as a target.
pub const PUBLIC_GOOD_TUF_MIRROR: &str = "https://tuf-repo-cdn.sigstore.dev";
/// The staging TUF mirror.
pub const STAGING_TUF_MIRROR: &str = "https://tuf-repo-cdn.sigstage.dev";

const MEDIA_TYPE: &str = "application/vnd.dev.sigstore.trustedroot+json;version=0.1";

/// Why a trust root could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustRootError {
    /// The document is not valid JSON of the expected shape.
    #[error("trusted root is not valid JSON of the trustedroot shape: {0}")]
    Json(String),
    /// The media type is missing or not a supported version.
    #[error("unsupported trusted root media type `{0}` (expected `{MEDIA_TYPE}`)")]
    MediaType(String),
    /// A field has an invalid value.
    #[error("trusted root field `{field}`: {reason}")]
    Field {
        /// JSON path of the field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A closed validity interval. `start: None` (never produced by the parser)
/// means "never valid".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidFor {
    /// First instant of validity (inclusive).
    pub start: Option<OffsetDateTime>,
    /// Last instant of validity (inclusive); `None` means open-ended.
    pub end: Option<OffsetDateTime>,
}

impl ValidFor {
    /// Whether `t` lies inside the closed interval.
    pub fn contains(&self, t: OffsetDateTime) -> bool {
        match self.start {
            None => false,
            Some(s) => s <= t && self.end.is_none_or(|e| t <= e),
        }
    }
}

/// A transparency log (Rekor or CT) the root trusts.
#[derive(Debug, Clone)]
pub struct TransparencyLog {
    /// The log's base URL, e.g. `https://rekor.sigstore.dev`.
    pub base_url: String,
    /// Host of the base URL; the signed-note origin of a Rekor v2 log.
    pub origin: String,
    /// Hash used by the log's Merkle tree.
    pub hash_algorithm: HashAlgorithm,
    /// DER SubjectPublicKeyInfo of the log key.
    pub spki_der: Vec<u8>,
    /// The decoded key, when of a supported type.
    pub key: Option<PublicKey>,
    /// The `keyDetails` string from the root (e.g. `PKIX_ED25519`).
    pub key_details: String,
    /// The log ID (`logId.keyId`) as bytes.
    pub log_id: Vec<u8>,
    /// When the key may be used.
    pub valid_for: ValidFor,
}

/// A certificate authority (Fulcio) or timestamp authority.
#[derive(Debug, Clone)]
pub struct CertificateAuthority {
    /// The authority's URI.
    pub uri: String,
    /// Display name from the root's `subject`.
    pub name: String,
    /// The chain, leaf-most first, ending with the root.
    pub chain: Vec<Certificate>,
    /// When the authority may be used.
    pub valid_for: ValidFor,
}

/// A parsed trusted root.
#[derive(Debug, Clone)]
pub struct TrustedRoot {
    /// Rekor logs.
    pub tlogs: Vec<TransparencyLog>,
    /// Certificate transparency logs.
    pub ctlogs: Vec<TransparencyLog>,
    /// Fulcio-like certificate authorities.
    pub certificate_authorities: Vec<CertificateAuthority>,
    /// RFC 3161 timestamp authorities.
    pub timestamp_authorities: Vec<CertificateAuthority>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRoot {
    media_type: Option<String>,
    #[serde(default)]
    tlogs: Vec<RawLog>,
    #[serde(default)]
    ctlogs: Vec<RawLog>,
    #[serde(default)]
    certificate_authorities: Vec<RawCa>,
    #[serde(default)]
    timestamp_authorities: Vec<RawCa>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLog {
    #[serde(default)]
    base_url: String,
    #[serde(default)]
    hash_algorithm: Option<String>,
    public_key: RawPublicKey,
    log_id: RawLogId,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPublicKey {
    raw_bytes: Option<String>,
    #[serde(default)]
    key_details: String,
    valid_for: Option<RawValidFor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLogId {
    key_id: String,
}

#[derive(Deserialize)]
struct RawValidFor {
    start: Option<String>,
    end: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCa {
    #[serde(default)]
    subject: Option<RawSubject>,
    #[serde(default)]
    uri: String,
    cert_chain: RawChain,
    valid_for: Option<RawValidFor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSubject {
    organization: Option<String>,
    common_name: Option<String>,
}

#[derive(Deserialize)]
struct RawChain {
    #[serde(default)]
    certificates: Vec<RawCert>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCert {
    raw_bytes: String,
}

fn b64(field: &str, s: &str) -> Result<Vec<u8>, TrustRootError> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| TrustRootError::Field {
            field: field.to_owned(),
            reason: format!("invalid base64: {e}"),
        })
}

/// Parses an RFC 3339 timestamp as used in trust roots and bundles.
pub fn parse_rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

/// Writes `t` as RFC 3339, the one form of a time in sigil's messages,
/// statuses and reports. A time RFC 3339 cannot express (a year before 0,
/// as a forged log entry may claim) is written as Unix seconds instead.
pub fn format_rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

fn valid_for(field: &str, raw: Option<&RawValidFor>) -> Result<ValidFor, TrustRootError> {
    let parse =
        |name: &str, v: Option<&String>| -> Result<Option<OffsetDateTime>, TrustRootError> {
            v.map(|s| {
                parse_rfc3339(s).ok_or_else(|| TrustRootError::Field {
                    field: format!("{field}.validFor.{name}"),
                    reason: format!("`{s}` is not an RFC 3339 time"),
                })
            })
            .transpose()
        };
    let start = parse("start", raw.and_then(|r| r.start.as_ref()))?;
    if start.is_none() {
        return Err(TrustRootError::Field {
            field: format!("{field}.validFor.start"),
            reason: "missing; every key and authority needs the time its trust starts".into(),
        });
    }
    Ok(ValidFor {
        start,
        end: parse("end", raw.and_then(|r| r.end.as_ref()))?,
    })
}

fn hash_algorithm(field: &str, s: Option<&str>) -> Result<HashAlgorithm, TrustRootError> {
    match s.unwrap_or("SHA2_256") {
        "SHA2_256" => Ok(HashAlgorithm::Sha256),
        "SHA2_384" => Ok(HashAlgorithm::Sha384),
        "SHA2_512" => Ok(HashAlgorithm::Sha512),
        other => Err(TrustRootError::Field {
            field: format!("{field}.hashAlgorithm"),
            reason: format!("unsupported hash algorithm `{other}`"),
        }),
    }
}

fn host_of(url: &str) -> String {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .unwrap_or(url);
    rest.split('/').next().unwrap_or_default().to_owned()
}

fn log(field: String, raw: &RawLog) -> Result<TransparencyLog, TrustRootError> {
    let spki_der = match &raw.public_key.raw_bytes {
        Some(s) => b64(&format!("{field}.publicKey.rawBytes"), s)?,
        None => Vec::new(),
    };
    Ok(TransparencyLog {
        origin: host_of(&raw.base_url),
        base_url: raw.base_url.clone(),
        hash_algorithm: hash_algorithm(&field, raw.hash_algorithm.as_deref())?,
        key: PublicKey::from_spki_der(&spki_der).ok(),
        spki_der,
        key_details: raw.public_key.key_details.clone(),
        log_id: b64(&format!("{field}.logId.keyId"), &raw.log_id.key_id)?,
        valid_for: valid_for(
            &format!("{field}.publicKey"),
            raw.public_key.valid_for.as_ref(),
        )?,
    })
}

fn authority(field: String, raw: &RawCa) -> Result<CertificateAuthority, TrustRootError> {
    let mut chain = Vec::with_capacity(raw.cert_chain.certificates.len());
    for (i, c) in raw.cert_chain.certificates.iter().enumerate() {
        let f = format!("{field}.certChain.certificates[{i}]");
        let der = b64(&f, &c.raw_bytes)?;
        chain.push(
            Certificate::from_der(&der).map_err(|e| TrustRootError::Field {
                field: f,
                reason: e.to_string(),
            })?,
        );
    }
    if chain.is_empty() {
        return Err(TrustRootError::Field {
            field: format!("{field}.certChain"),
            reason: "no certificates".into(),
        });
    }
    let name = raw
        .subject
        .as_ref()
        .map(|s| {
            [s.organization.as_deref(), s.common_name.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("/")
        })
        .unwrap_or_default();
    Ok(CertificateAuthority {
        uri: raw.uri.clone(),
        name,
        chain,
        valid_for: valid_for(&field, raw.valid_for.as_ref())?,
    })
}

impl TrustedRoot {
    /// Parses a `trusted_root.json` document.
    pub fn from_json(json: &str) -> Result<Self, TrustRootError> {
        let raw: RawRoot =
            serde_json::from_str(json).map_err(|e| TrustRootError::Json(e.to_string()))?;
        match raw.media_type.as_deref() {
            Some(MEDIA_TYPE) => {}
            other => return Err(TrustRootError::MediaType(other.unwrap_or("").to_owned())),
        }
        Ok(Self {
            tlogs: raw
                .tlogs
                .iter()
                .enumerate()
                .map(|(i, l)| log(format!("tlogs[{i}]"), l))
                .collect::<Result<_, _>>()?,
            ctlogs: raw
                .ctlogs
                .iter()
                .enumerate()
                .map(|(i, l)| log(format!("ctlogs[{i}]"), l))
                .collect::<Result<_, _>>()?,
            certificate_authorities: raw
                .certificate_authorities
                .iter()
                .enumerate()
                .map(|(i, c)| authority(format!("certificateAuthorities[{i}]"), c))
                .collect::<Result<_, _>>()?,
            timestamp_authorities: raw
                .timestamp_authorities
                .iter()
                .enumerate()
                .map(|(i, c)| authority(format!("timestampAuthorities[{i}]"), c))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The embedded Sigstore public-good trust root.
    pub fn public_good() -> Result<Self, TrustRootError> {
        Self::from_json(PUBLIC_GOOD_JSON)
    }

    /// The embedded Sigstore staging trust root.
    pub fn staging() -> Result<Self, TrustRootError> {
        Self::from_json(STAGING_JSON)
    }

    /// The Rekor logs whose log ID equals `log_id`.
    pub fn tlogs_by_id<'a>(
        &'a self,
        log_id: &'a [u8],
    ) -> impl Iterator<Item = &'a TransparencyLog> {
        self.tlogs.iter().filter(move |l| l.log_id == log_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_written_as_rfc3339_and_one_before_year_0_as_unix_seconds() {
        let t = parse_rfc3339("2026-01-02T03:04:05Z").unwrap();
        assert_eq!(format_rfc3339(t), "2026-01-02T03:04:05Z");
        let before = OffsetDateTime::from_unix_timestamp(-62_167_219_201).unwrap();
        assert_eq!(format_rfc3339(before), "-62167219201");
    }

    #[test]
    fn embedded_roots_load() {
        let pg = TrustedRoot::public_good().unwrap();
        assert_eq!(pg.tlogs.len(), 2);
        assert!(pg.tlogs.iter().all(|l| l.key.is_some()));
        assert_eq!(pg.tlogs[1].origin, "log2025-1.rekor.sigstore.dev");
        assert_eq!(pg.certificate_authorities.len(), 2);
        assert_eq!(pg.timestamp_authorities.len(), 1);
        let st = TrustedRoot::staging().unwrap();
        assert!(!st.ctlogs.is_empty());
    }

    #[test]
    fn embedded_tuf_roots_are_root_metadata_with_signatures() {
        for (name, text) in [
            ("public-good", PUBLIC_GOOD_TUF_ROOT),
            ("staging", STAGING_TUF_ROOT),
        ] {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(v["signed"]["_type"], "root", "{name}");
            assert!(v["signed"]["version"].as_u64().unwrap() >= 1, "{name}");
            assert!(!v["signatures"].as_array().unwrap().is_empty(), "{name}");
        }
    }

    #[test]
    fn valid_for_is_closed_and_needs_a_start() {
        let t = |s| parse_rfc3339(s).unwrap();
        let v = ValidFor {
            start: Some(t("2024-01-01T00:00:00Z")),
            end: Some(t("2024-12-31T23:59:59Z")),
        };
        assert!(v.contains(t("2024-01-01T00:00:00Z")));
        assert!(v.contains(t("2024-12-31T23:59:59Z")));
        assert!(!v.contains(t("2025-01-01T00:00:00Z")));
        assert!(!v.contains(t("2023-12-31T23:59:59Z")));
        let no_start = ValidFor {
            start: None,
            end: None,
        };
        assert!(!no_start.contains(t("2024-06-01T00:00:00Z")));
    }

    #[test]
    fn wrong_media_type_and_bad_json_are_rejected() {
        assert!(matches!(
            TrustedRoot::from_json("{\"mediaType\":\"x\"}"),
            Err(TrustRootError::MediaType(_))
        ));
        assert!(matches!(
            TrustedRoot::from_json("{"),
            Err(TrustRootError::Json(_))
        ));
    }
}
