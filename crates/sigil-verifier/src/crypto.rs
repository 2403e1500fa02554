//! Public keys and signature checks: the one place that knows which curves and
//! schemes sigil accepts (ECDSA P-256/P-384, Ed25519, RSA PKCS#1 v1.5).
//!
//! Keys are decoded once, from DER SubjectPublicKeyInfo or PEM, and then reused
//! for every verification, so the hot path never parses key material.
//!
//! ECDSA over whole messages is checked with ring, whose P-256 and P-384 code is
//! several times faster than the portable RustCrypto implementations; those
//! remain for key decoding and for pre-hashed digests, which ring cannot take.

use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use p256::pkcs8::DecodePublicKey as _;
use sha2::{Digest as _, Sha224, Sha256, Sha384, Sha512};

/// A hash function used by a signature scheme or a message digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlgorithm {
    /// SHA-224 (only for managed-key signatures, `hashAlgorithm: sha224`).
    Sha224,
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl HashAlgorithm {
    /// Hashes `data` with this algorithm.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha224 => Sha224::digest(data).to_vec(),
            Self::Sha256 => Sha256::digest(data).to_vec(),
            Self::Sha384 => Sha384::digest(data).to_vec(),
            Self::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// Length of this algorithm's output in bytes.
    pub fn output_len(self) -> usize {
        match self {
            Self::Sha224 => 28,
            Self::Sha256 => 32,
            Self::Sha384 => 48,
            Self::Sha512 => 64,
        }
    }

    /// Lower-case name as used in Rekor bodies (`sha256`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha224 => "sha224",
            Self::Sha256 => "sha256",
            Self::Sha384 => "sha384",
            Self::Sha512 => "sha512",
        }
    }
}

/// Why a key could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The bytes are not a DER SubjectPublicKeyInfo of a supported algorithm.
    #[error("unsupported or malformed public key: {0}")]
    Malformed(String),
    /// The PEM text has no `PUBLIC KEY` block or its base64 is invalid.
    #[error("invalid PEM public key: {0}")]
    Pem(String),
}

/// Why a signature check failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The signature bytes are not a valid encoding for the key's scheme.
    #[error("malformed {scheme} signature")]
    Malformed {
        /// The key's scheme name.
        scheme: &'static str,
    },
    /// The signature is well formed but does not verify.
    #[error("{scheme} signature does not verify")]
    Invalid {
        /// The key's scheme name.
        scheme: &'static str,
    },
    /// The key type cannot verify a pre-hashed message (Ed25519) or this hash.
    #[error("{scheme} key cannot verify a {what}")]
    Unsupported {
        /// The key's scheme name.
        scheme: &'static str,
        /// What was asked of the key.
        what: &'static str,
    },
}

/// A decoded public key.
#[derive(Clone)]
pub enum PublicKey {
    /// ECDSA over NIST P-256.
    P256(p256::ecdsa::VerifyingKey),
    /// ECDSA over NIST P-384.
    P384(p384::ecdsa::VerifyingKey),
    /// Ed25519 (signs the whole message).
    Ed25519(ed25519_dalek::VerifyingKey),
    /// RSA, PKCS#1 v1.5 signatures.
    Rsa(Box<rsa::RsaPublicKey>),
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.scheme())
    }
}

impl PublicKey {
    /// Decodes a DER SubjectPublicKeyInfo.
    pub fn from_spki_der(der: &[u8]) -> Result<Self, KeyError> {
        if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_der(der) {
            return Ok(Self::P256(k));
        }
        if let Ok(k) = p384::ecdsa::VerifyingKey::from_public_key_der(der) {
            return Ok(Self::P384(k));
        }
        if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_der(der) {
            return Ok(Self::Ed25519(k));
        }
        if let Ok(k) = rsa::RsaPublicKey::from_public_key_der(der) {
            return Ok(Self::Rsa(Box::new(k)));
        }
        Err(KeyError::Malformed(
            "expected an ECDSA P-256/P-384, Ed25519 or RSA SubjectPublicKeyInfo".into(),
        ))
    }

    /// Decodes the first `PUBLIC KEY` block of a PEM document.
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        let der = pem_decode(pem, "PUBLIC KEY").map_err(KeyError::Pem)?;
        Self::from_spki_der(&der)
    }

    /// A short name of the key's scheme, for messages.
    pub fn scheme(&self) -> &'static str {
        match self {
            Self::P256(_) => "ECDSA P-256",
            Self::P384(_) => "ECDSA P-384",
            Self::Ed25519(_) => "Ed25519",
            Self::Rsa(_) => "RSA",
        }
    }

    /// The hash this key's scheme uses when signing a whole message.
    pub fn default_hash(&self) -> HashAlgorithm {
        match self {
            Self::P384(_) => HashAlgorithm::Sha384,
            Self::Ed25519(_) => HashAlgorithm::Sha512,
            Self::P256(_) | Self::Rsa(_) => HashAlgorithm::Sha256,
        }
    }

    /// Verifies `signature` over `message`, hashing with `hash` for ECDSA and
    /// RSA (Ed25519 always signs the message itself). ECDSA signatures are DER.
    pub fn verify(
        &self,
        message: &[u8],
        signature: &[u8],
        hash: HashAlgorithm,
    ) -> Result<(), SignatureError> {
        match self {
            Self::Ed25519(k) => {
                let sig = ed25519_dalek::Signature::from_slice(signature).map_err(|_| {
                    SignatureError::Malformed {
                        scheme: self.scheme(),
                    }
                })?;
                k.verify_strict(message, &sig)
                    .map_err(|_| SignatureError::Invalid {
                        scheme: self.scheme(),
                    })
            }
            Self::P256(k) if matches!(hash, HashAlgorithm::Sha256 | HashAlgorithm::Sha384) => {
                let alg = if hash == HashAlgorithm::Sha256 {
                    &ring::signature::ECDSA_P256_SHA256_ASN1
                } else {
                    &ring::signature::ECDSA_P256_SHA384_ASN1
                };
                ring_verify(
                    alg,
                    k.to_encoded_point(false).as_bytes(),
                    message,
                    signature,
                    self.scheme(),
                )
            }
            Self::P384(k) if matches!(hash, HashAlgorithm::Sha256 | HashAlgorithm::Sha384) => {
                let alg = if hash == HashAlgorithm::Sha384 {
                    &ring::signature::ECDSA_P384_SHA384_ASN1
                } else {
                    &ring::signature::ECDSA_P384_SHA256_ASN1
                };
                ring_verify(
                    alg,
                    k.to_encoded_point(false).as_bytes(),
                    message,
                    signature,
                    self.scheme(),
                )
            }
            _ => self.verify_prehash(&hash.digest(message), signature, hash),
        }
    }

    /// Verifies `signature` over an already computed `digest` of the message
    /// (hashed with `hash`). Ed25519 keys cannot do this.
    pub fn verify_prehash(
        &self,
        digest: &[u8],
        signature: &[u8],
        hash: HashAlgorithm,
    ) -> Result<(), SignatureError> {
        let scheme = self.scheme();
        if digest.len() != hash.output_len() {
            return Err(SignatureError::Invalid { scheme });
        }
        match self {
            Self::P256(k) => {
                let sig = p256::ecdsa::Signature::from_der(signature)
                    .map_err(|_| SignatureError::Malformed { scheme })?;
                k.verify_prehash(digest, &sig)
                    .map_err(|_| SignatureError::Invalid { scheme })
            }
            Self::P384(k) => {
                let sig = p384::ecdsa::Signature::from_der(signature)
                    .map_err(|_| SignatureError::Malformed { scheme })?;
                k.verify_prehash(digest, &sig)
                    .map_err(|_| SignatureError::Invalid { scheme })
            }
            Self::Rsa(k) => {
                let scheme_obj = match hash {
                    HashAlgorithm::Sha224 => rsa::Pkcs1v15Sign::new::<Sha224>(),
                    HashAlgorithm::Sha256 => rsa::Pkcs1v15Sign::new::<Sha256>(),
                    HashAlgorithm::Sha384 => rsa::Pkcs1v15Sign::new::<Sha384>(),
                    HashAlgorithm::Sha512 => rsa::Pkcs1v15Sign::new::<Sha512>(),
                };
                k.verify(scheme_obj, digest, signature)
                    .map_err(|_| SignatureError::Invalid { scheme })
            }
            Self::Ed25519(_) => Err(SignatureError::Unsupported {
                scheme,
                what: "pre-hashed digest",
            }),
        }
    }
}

/// ECDSA (ASN.1 DER signature) verification with ring. ring folds "malformed"
/// and "invalid" into one error; a signature that is not even DER is told
/// apart first so that messages stay precise.
fn ring_verify(
    alg: &'static ring::signature::EcdsaVerificationAlgorithm,
    point: &[u8],
    message: &[u8],
    signature: &[u8],
    scheme: &'static str,
) -> Result<(), SignatureError> {
    if p384::ecdsa::Signature::from_der(signature).is_err()
        && p256::ecdsa::Signature::from_der(signature).is_err()
    {
        return Err(SignatureError::Malformed { scheme });
    }
    ring::signature::UnparsedPublicKey::new(alg, point)
        .verify(message, signature)
        .map_err(|_| SignatureError::Invalid { scheme })
}

/// Decodes the first PEM block with the given label (`CERTIFICATE`, `PUBLIC KEY`).
pub fn pem_decode(pem: &str, label: &str) -> Result<Vec<u8>, String> {
    pem_decode_all(pem, label)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("no `-----BEGIN {label}-----` block found"))
}

/// Decodes every PEM block with the given label, in order.
pub fn pem_decode_all(pem: &str, label: &str) -> Result<Vec<Vec<u8>>, String> {
    use base64::Engine as _;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(&begin) {
        let after = rest.get(start + begin.len()..).unwrap_or_default();
        let Some(stop) = after.find(&end) else {
            return Err(format!("`{begin}` without a matching `{end}`"));
        };
        let body: String = after
            .get(..stop)
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .map_err(|e| format!("invalid base64 in PEM block: {e}"))?;
        out.push(der);
        rest = after.get(stop + end.len()..).unwrap_or_default();
    }
    Ok(out)
}

/// SHA-256 of `data` as a fixed array.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const P256_PEM: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAExRRST79+PsrRBnGAI4cMu6Omz2Jh
fwlMW+gIutNKVRaMyS4rQKvgngc5p8UbLj55pVHhIoAxi/SRgURZI0J3Xw==
-----END PUBLIC KEY-----";

    #[test]
    fn decodes_a_p256_pem_key() {
        let key = PublicKey::from_pem(P256_PEM).unwrap();
        assert_eq!(key.scheme(), "ECDSA P-256");
    }

    #[test]
    fn rejects_garbage_keys_with_a_reason() {
        assert!(matches!(
            PublicKey::from_spki_der(b"nope"),
            Err(KeyError::Malformed(_))
        ));
        assert!(matches!(
            PublicKey::from_pem("hello"),
            Err(KeyError::Pem(_))
        ));
    }

    #[test]
    fn malformed_signature_is_an_error_not_a_panic() {
        let key = PublicKey::from_pem(P256_PEM).unwrap();
        assert!(key.verify(b"m", b"", HashAlgorithm::Sha256).is_err());
        assert!(
            key.verify_prehash(&[0; 31], b"\x30\x00", HashAlgorithm::Sha256)
                .is_err()
        );
    }
}
