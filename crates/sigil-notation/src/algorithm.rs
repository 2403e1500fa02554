//! The signature algorithms of the Notary Project specification and the key
//! each one requires: RSASSA-PSS with SHA-256/384/512 for RSA keys of
//! 2048/3072/4096 bits, ECDSA with SHA-256/384/512 for P-256/P-384/P-521.
//! The algorithm an envelope names must be the one its signing key implies.

use aws_lc_rs::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use sigil_verifier::der::{self, Reader};

const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_RSA: &str = "1.2.840.113549.1.1.1";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";
const OID_P521: &str = "1.3.132.0.35";

/// A Notary Project signature algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// RSASSA-PSS with SHA-256 (RSA 2048).
    Ps256,
    /// RSASSA-PSS with SHA-384 (RSA 3072).
    Ps384,
    /// RSASSA-PSS with SHA-512 (RSA 4096).
    Ps512,
    /// ECDSA P-256 with SHA-256.
    Es256,
    /// ECDSA P-384 with SHA-384.
    Es384,
    /// ECDSA P-521 with SHA-512.
    Es512,
}

impl Algorithm {
    /// From a JWS `alg` value.
    pub fn from_jws(name: &str) -> Option<Self> {
        Some(match name {
            "PS256" => Self::Ps256,
            "PS384" => Self::Ps384,
            "PS512" => Self::Ps512,
            "ES256" => Self::Es256,
            "ES384" => Self::Es384,
            "ES512" => Self::Es512,
            _ => return None,
        })
    }

    /// From a COSE algorithm identifier (RFC 9053, RFC 8230).
    pub fn from_cose(id: i64) -> Option<Self> {
        Some(match id {
            -37 => Self::Ps256,
            -38 => Self::Ps384,
            -39 => Self::Ps512,
            -7 => Self::Es256,
            -35 => Self::Es384,
            -36 => Self::Es512,
            _ => return None,
        })
    }

    /// The JWS name, used in messages for both envelope formats.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ps256 => "PS256",
            Self::Ps384 => "PS384",
            Self::Ps512 => "PS512",
            Self::Es256 => "ES256",
            Self::Es384 => "ES384",
            Self::Es512 => "ES512",
        }
    }

    fn aws_lc(self) -> &'static dyn VerificationAlgorithm {
        match self {
            Self::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
            Self::Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
            Self::Ps512 => &signature::RSA_PSS_2048_8192_SHA512,
            Self::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
            Self::Es384 => &signature::ECDSA_P384_SHA384_FIXED,
            Self::Es512 => &signature::ECDSA_P521_SHA512_FIXED,
        }
    }
}

/// Why a signing key cannot be used or a signature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The SubjectPublicKeyInfo does not parse.
    #[error("the signing certificate's public key does not parse: {0}")]
    Malformed(String),
    /// A key type or size outside the specification.
    #[error(
        "the signing certificate's key ({0}) is not one the Notary Project allows (RSA 2048/3072/4096, ECDSA P-256/P-384/P-521)"
    )]
    Unsupported(String),
    /// The envelope names another algorithm than the key implies.
    #[error(
        "the envelope's algorithm {named} does not match the signing key, which requires {implied}"
    )]
    Mismatch {
        /// The algorithm the envelope names.
        named: &'static str,
        /// The algorithm the key implies.
        implied: &'static str,
    },
    /// The signature does not verify.
    #[error("the {0} signature does not verify with the signing certificate's key")]
    BadSignature(&'static str),
}

/// A signing key: the algorithm it implies and its raw public key.
#[derive(Debug, Clone)]
pub struct SigningKey {
    /// The only algorithm this key may sign with.
    pub algorithm: Algorithm,
    /// The subjectPublicKey bits (an EC point or a PKCS#1 RSAPublicKey).
    raw: Vec<u8>,
}

impl SigningKey {
    /// Reads a DER SubjectPublicKeyInfo.
    pub fn from_spki(spki: &[u8]) -> Result<Self, KeyError> {
        let bad = |e: der::DerError| KeyError::Malformed(e.to_string());
        let outer = der::parse_single(spki).map_err(bad)?;
        let mut r = outer.reader();
        let alg = r.read(der::SEQUENCE, "AlgorithmIdentifier").map_err(bad)?;
        let bits = r.read(der::BIT_STRING, "subjectPublicKey").map_err(bad)?;
        r.finish().map_err(bad)?;
        let mut ar = alg.reader();
        let oid = ar
            .read(der::OID, "algorithm")
            .and_then(|t| t.oid())
            .map_err(bad)?;
        let params = if ar.is_empty() {
            None
        } else {
            Some(ar.read_any().map_err(bad)?)
        };
        let raw = match bits.value.split_first() {
            Some((0, rest)) => rest.to_vec(),
            _ => {
                return Err(KeyError::Malformed(
                    "subjectPublicKey has unused bits".into(),
                ));
            }
        };
        let algorithm = match oid.as_str() {
            OID_EC_PUBLIC_KEY => {
                let curve = params
                    .filter(|p| p.tag == der::OID)
                    .map(|p| p.oid())
                    .transpose()
                    .map_err(bad)?
                    .unwrap_or_default();
                match curve.as_str() {
                    OID_P256 => Algorithm::Es256,
                    OID_P384 => Algorithm::Es384,
                    OID_P521 => Algorithm::Es512,
                    other => return Err(KeyError::Unsupported(format!("ECDSA curve {other}"))),
                }
            }
            OID_RSA => match rsa_bits(&raw).map_err(bad)? {
                2048 => Algorithm::Ps256,
                3072 => Algorithm::Ps384,
                4096 => Algorithm::Ps512,
                bits => return Err(KeyError::Unsupported(format!("RSA {bits} bits"))),
            },
            other => return Err(KeyError::Unsupported(format!("key algorithm {other}"))),
        };
        Ok(Self { algorithm, raw })
    }

    /// Verifies `signature` over `message` under `named`, which must be the
    /// algorithm the key implies.
    pub fn verify(
        &self,
        named: Algorithm,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), KeyError> {
        if named != self.algorithm {
            return Err(KeyError::Mismatch {
                named: named.name(),
                implied: self.algorithm.name(),
            });
        }
        UnparsedPublicKey::new(named.aws_lc(), &self.raw)
            .verify(message, signature)
            .map_err(|_| KeyError::BadSignature(named.name()))
    }
}

/// The modulus size of a PKCS#1 RSAPublicKey, in bits.
fn rsa_bits(raw: &[u8]) -> Result<usize, der::DerError> {
    let key = der::parse_single(raw)?;
    let mut r: Reader<'_> = key.reader();
    let modulus = r.read(der::INTEGER, "modulus")?.integer_bytes()?;
    let significant: Vec<u8> = modulus.iter().copied().skip_while(|&b| b == 0).collect();
    Ok(match significant.first() {
        Some(&top) => (significant.len() - 1) * 8 + (8 - top.leading_zeros() as usize),
        None => 0,
    })
}
