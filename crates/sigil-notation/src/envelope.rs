//! A Notary Project signature envelope, whatever its format: what was signed,
//! by which certificate chain, with which signed attributes. `jws` and `cose`
//! read their format into this one shape (`decode` picks by media type); [`Envelope::verify_integrity`]
//! checks the signature over the bytes the format says were signed.

use sigil_verifier::x509::Certificate;
use time::OffsetDateTime;

use crate::algorithm::{Algorithm, KeyError, SigningKey};

/// Media type of a JWS envelope.
pub const MEDIA_TYPE_JWS: &str = "application/jose+json";
/// Media type of a COSE envelope.
pub const MEDIA_TYPE_COSE: &str = "application/cose";
/// The only payload content type a Notary Project signature carries.
pub const PAYLOAD_CONTENT_TYPE: &str = "application/vnd.cncf.notary.payload.v1+json";
/// Largest envelope read (notation itself refuses signatures over 4 MiB).
pub const MAX_ENVELOPE_LEN: usize = 4 * 1024 * 1024;
/// Most certificates read from one envelope's chain.
pub const MAX_CHAIN_LEN: usize = 16;

/// Header names the specification reserves.
pub(crate) const SIGNING_SCHEME: &str = "io.cncf.notary.signingScheme";
pub(crate) const SIGNING_TIME: &str = "io.cncf.notary.signingTime";
pub(crate) const AUTHENTIC_SIGNING_TIME: &str = "io.cncf.notary.authenticSigningTime";
pub(crate) const EXPIRY: &str = "io.cncf.notary.expiry";
pub(crate) const SIGNING_AGENT: &str = "io.cncf.notary.signingAgent";
pub(crate) const TIMESTAMP_SIGNATURE: &str = "io.cncf.notary.timestampSignature";

/// The two signing schemes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningScheme {
    /// `notary.x509`: the signing time is the signer's claim; a timestamp
    /// countersignature may vouch for it.
    X509,
    /// `notary.x509.signingAuthority`: a signing authority vouches for the
    /// signing time itself (`authenticSigningTime`).
    SigningAuthority,
}

impl SigningScheme {
    /// From the header value.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "notary.x509" => Some(Self::X509),
            "notary.x509.signingAuthority" => Some(Self::SigningAuthority),
            _ => None,
        }
    }

    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::X509 => "notary.x509",
            Self::SigningAuthority => "notary.x509.signingAuthority",
        }
    }
}

/// A signed attribute the specification does not reserve.
#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    /// The header name.
    pub key: String,
    /// Its value, as JSON (COSE values converted).
    pub value: serde_json::Value,
    /// Whether the signer listed it as critical.
    pub critical: bool,
}

/// The envelope formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JWS JSON serialization.
    Jws,
    /// COSE_Sign1.
    Cose,
}

impl Format {
    /// From an envelope media type.
    pub fn from_media_type(media_type: &str) -> Option<Self> {
        match media_type {
            MEDIA_TYPE_JWS => Some(Self::Jws),
            MEDIA_TYPE_COSE => Some(Self::Cose),
            _ => None,
        }
    }

    /// The media type.
    pub fn media_type(self) -> &'static str {
        match self {
            Self::Jws => MEDIA_TYPE_JWS,
            Self::Cose => MEDIA_TYPE_COSE,
        }
    }
}

/// A parsed envelope.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// Its format.
    pub format: Format,
    /// The algorithm the signer named.
    pub algorithm: Algorithm,
    /// The exact bytes the signature covers (JWS signing input, COSE Sig_structure).
    pub signed_bytes: Vec<u8>,
    /// The signature value.
    pub signature: Vec<u8>,
    /// The payload (the target descriptor document).
    pub payload: Vec<u8>,
    /// The signing scheme.
    pub scheme: SigningScheme,
    /// `signingTime` (notary.x509) or `authenticSigningTime` (signingAuthority).
    pub signing_time: OffsetDateTime,
    /// `expiry`, when set.
    pub expiry: Option<OffsetDateTime>,
    /// Signed attributes the specification does not reserve.
    pub extended: Vec<Attribute>,
    /// The certificate chain, signing certificate first.
    pub chain: Vec<Certificate>,
    /// The RFC 3161 timestamp countersignature over the signature value, if any.
    pub timestamp: Option<Vec<u8>>,
    /// The unsigned `signingAgent`, if any.
    pub signing_agent: Option<String>,
}

/// Why an envelope is not a well-formed Notary Project signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The media type is neither JWS nor COSE.
    #[error(
        "signature envelope media type `{0}` is not a Notary Project envelope (application/jose+json or application/cose)"
    )]
    MediaType(String),
    /// Larger than [`MAX_ENVELOPE_LEN`].
    #[error(
        "signature envelope of {0} bytes is larger than the {MAX_ENVELOPE_LEN} bytes sigil reads"
    )]
    TooLarge(usize),
    /// The bytes do not have the format's shape.
    #[error("{format} signature envelope is malformed: {detail}")]
    Malformed {
        /// `JWS` or `COSE`.
        format: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A required header is missing or has the wrong type.
    #[error("{format} signature envelope header `{header}` {problem}")]
    Header {
        /// `JWS` or `COSE`.
        format: &'static str,
        /// The header name.
        header: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A certificate of the chain does not parse.
    #[error("certificate {index} of the signature's chain does not parse: {detail}")]
    Certificate {
        /// Position in the chain (0 is the signing certificate).
        index: usize,
        /// The parser's message.
        detail: String,
    },
    /// The signature does not verify over the signed bytes.
    #[error("signature integrity: {0}")]
    Integrity(KeyError),
}

impl EnvelopeError {
    pub(crate) fn header(format: Format, header: &str, problem: impl Into<String>) -> Self {
        Self::Header {
            format: format_name(format),
            header: header.to_owned(),
            problem: problem.into(),
        }
    }

    pub(crate) fn malformed(format: Format, detail: impl Into<String>) -> Self {
        Self::Malformed {
            format: format_name(format),
            detail: detail.into(),
        }
    }
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::Jws => "JWS",
        Format::Cose => "COSE",
    }
}

impl Envelope {
    /// The signing certificate.
    pub fn signing_certificate(&self) -> Option<&Certificate> {
        self.chain.first()
    }

    /// Checks the signature over the signed bytes with the signing
    /// certificate's key, and that the named algorithm is the key's.
    pub fn verify_integrity(&self) -> Result<(), EnvelopeError> {
        let leaf = self.chain.first().ok_or_else(|| {
            EnvelopeError::header(
                self.format,
                "x5chain",
                "is missing or empty; a Notary Project signature carries its certificate chain",
            )
        })?;
        let key = SigningKey::from_spki(&leaf.spki_der).map_err(EnvelopeError::Integrity)?;
        key.verify(self.algorithm, &self.signed_bytes, &self.signature)
            .map_err(EnvelopeError::Integrity)
    }

    /// The extended attribute named `key`, if signed.
    pub fn attribute(&self, key: &str) -> Option<&Attribute> {
        self.extended.iter().find(|a| a.key == key)
    }
}

/// Parses the chain's DER certificates, bounded by [`MAX_CHAIN_LEN`]. An
/// empty chain parses (the conformance envelopes carry none) and fails
/// verification.
pub(crate) fn parse_chain(
    format: Format,
    ders: &[&[u8]],
) -> Result<Vec<Certificate>, EnvelopeError> {
    if ders.len() > MAX_CHAIN_LEN {
        return Err(EnvelopeError::header(
            format,
            "x5chain",
            format!(
                "has {} certificates, more than the {MAX_CHAIN_LEN} sigil reads",
                ders.len()
            ),
        ));
    }
    ders.iter()
        .enumerate()
        .map(|(index, der)| {
            Certificate::from_der(der).map_err(|e| EnvelopeError::Certificate {
                index,
                detail: e.to_string(),
            })
        })
        .collect()
}

/// The times and scheme a signature's protected header must carry,
/// checked the same way for both formats.
pub(crate) struct SignedTimes {
    pub scheme: SigningScheme,
    pub signing_time: OffsetDateTime,
    pub expiry: Option<OffsetDateTime>,
}

/// Checks the reserved attributes' presence and criticality. `critical`
/// says whether a present header is listed in `crit`.
pub(crate) fn check_reserved(
    format: Format,
    scheme: Option<&str>,
    signing_time: Option<OffsetDateTime>,
    authentic_time: Option<OffsetDateTime>,
    expiry: Option<OffsetDateTime>,
    critical: &dyn Fn(&str) -> bool,
) -> Result<SignedTimes, EnvelopeError> {
    let scheme_text =
        scheme.ok_or_else(|| EnvelopeError::header(format, SIGNING_SCHEME, "is missing"))?;
    let scheme = SigningScheme::parse(scheme_text).ok_or_else(|| {
        EnvelopeError::header(
            format,
            SIGNING_SCHEME,
            format!("is `{scheme_text}`, neither notary.x509 nor notary.x509.signingAuthority"),
        )
    })?;
    if !critical(SIGNING_SCHEME) {
        return Err(EnvelopeError::header(
            format,
            SIGNING_SCHEME,
            "is not marked critical",
        ));
    }
    let signing_time = match scheme {
        SigningScheme::X509 => {
            if authentic_time.is_some() {
                return Err(EnvelopeError::header(
                    format,
                    AUTHENTIC_SIGNING_TIME,
                    "is present under notary.x509, which uses signingTime",
                ));
            }
            signing_time.ok_or_else(|| EnvelopeError::header(format, SIGNING_TIME, "is missing"))?
        }
        SigningScheme::SigningAuthority => {
            if signing_time.is_some() {
                return Err(EnvelopeError::header(
                    format,
                    SIGNING_TIME,
                    "is present under notary.x509.signingAuthority, which uses authenticSigningTime",
                ));
            }
            if !critical(AUTHENTIC_SIGNING_TIME) {
                return Err(EnvelopeError::header(
                    format,
                    AUTHENTIC_SIGNING_TIME,
                    "is missing or not marked critical",
                ));
            }
            authentic_time.ok_or_else(|| {
                EnvelopeError::header(format, AUTHENTIC_SIGNING_TIME, "is missing")
            })?
        }
    };
    if let Some(e) = expiry {
        if !critical(EXPIRY) {
            return Err(EnvelopeError::header(
                format,
                EXPIRY,
                "is not marked critical",
            ));
        }
        if e <= signing_time {
            return Err(EnvelopeError::header(
                format,
                EXPIRY,
                "is not after the signing time",
            ));
        }
    }
    Ok(SignedTimes {
        scheme,
        signing_time,
        expiry,
    })
}

/// Whether `key` is a header the specification reserves in the protected header.
pub(crate) fn is_reserved(key: &str) -> bool {
    matches!(
        key,
        SIGNING_SCHEME | SIGNING_TIME | AUTHENTIC_SIGNING_TIME | EXPIRY
    )
}
