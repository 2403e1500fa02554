//! Deterministic keys: every key is derived from the kit's seed and a label,
//! so the same seed always mints byte-identical material.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::signature::hazmat::PrehashSigner as _;
use sha2::{Digest as _, Sha256, Sha384};

use crate::der;

/// OID of id-ecPublicKey.
pub(crate) const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
/// OID of the P-256 curve (prime256v1).
pub(crate) const OID_P256: &str = "1.2.840.10045.3.1.7";
/// OID of the P-384 curve (secp384r1).
pub(crate) const OID_P384: &str = "1.3.132.0.34";
/// OID of Ed25519.
pub(crate) const OID_ED25519: &str = "1.3.101.112";
/// OID of ecdsa-with-SHA256.
pub(crate) const OID_ECDSA_SHA256: &str = "1.2.840.10045.4.3.2";
/// OID of ecdsa-with-SHA384.
pub(crate) const OID_ECDSA_SHA384: &str = "1.2.840.10045.4.3.3";

/// Derives 48 bytes of key material from (seed, label, counter).
fn material(seed: u64, label: &str, counter: u32) -> [u8; 48] {
    let mut h = Sha384::new();
    h.update(b"sigil-testkit/v1\0");
    h.update(seed.to_be_bytes());
    h.update(label.as_bytes());
    h.update([0]);
    h.update(counter.to_be_bytes());
    h.finalize().into()
}

/// A signing key of one of the algorithms Sigstore uses, derived from a seed.
#[derive(Clone, Debug)]
pub enum KeyPair {
    /// ECDSA P-256; signatures use SHA-256.
    P256(p256::ecdsa::SigningKey),
    /// ECDSA P-384; signatures use SHA-384.
    P384(p384::ecdsa::SigningKey),
    /// Ed25519 (pure EdDSA).
    Ed25519(ed25519_dalek::SigningKey),
}

impl KeyPair {
    /// A P-256 key derived from `seed` and `label`.
    pub fn p256(seed: u64, label: &str) -> Self {
        let mut counter = 0;
        loop {
            let m = material(seed, label, counter);
            if let Ok(k) = p256::ecdsa::SigningKey::from_slice(m.get(..32).unwrap_or(&m)) {
                return KeyPair::P256(k);
            }
            counter += 1;
        }
    }

    /// A P-384 key derived from `seed` and `label`.
    pub fn p384(seed: u64, label: &str) -> Self {
        let mut counter = 0;
        loop {
            let m = material(seed, label, counter);
            if let Ok(k) = p384::ecdsa::SigningKey::from_slice(&m) {
                return KeyPair::P384(k);
            }
            counter += 1;
        }
    }

    /// An Ed25519 key derived from `seed` and `label`.
    pub fn ed25519(seed: u64, label: &str) -> Self {
        let m = material(seed, label, 0);
        let mut secret = [0u8; 32];
        secret.copy_from_slice(m.get(..32).unwrap_or(&[0u8; 32]));
        KeyPair::Ed25519(ed25519_dalek::SigningKey::from_bytes(&secret))
    }

    /// The private key as PKCS#8 PEM (`PRIVATE KEY`), for signers outside
    /// this crate (notation-go's, in the testkit's Go signer); `None` for
    /// Ed25519, which they do not take.
    pub fn private_key_pkcs8_pem(&self) -> Option<String> {
        use p256::pkcs8::EncodePrivateKey as _;
        let der = match self {
            KeyPair::P256(k) => k.to_pkcs8_der().ok()?,
            KeyPair::P384(k) => k.to_pkcs8_der().ok()?,
            KeyPair::Ed25519(_) => return None,
        };
        Some(pem("PRIVATE KEY", der.as_bytes()))
    }

    /// The raw public key: the uncompressed SEC1 point for ECDSA, the 32-byte key for Ed25519.
    pub fn public_key_raw(&self) -> Vec<u8> {
        match self {
            KeyPair::P256(k) => k
                .verifying_key()
                .to_encoded_point(false)
                .as_bytes()
                .to_vec(),
            KeyPair::P384(k) => k
                .verifying_key()
                .to_encoded_point(false)
                .as_bytes()
                .to_vec(),
            KeyPair::Ed25519(k) => k.verifying_key().to_bytes().to_vec(),
        }
    }

    /// The DER SubjectPublicKeyInfo.
    pub fn spki_der(&self) -> Vec<u8> {
        let alg = match self {
            KeyPair::P256(_) => der::seq([der::oid(OID_EC_PUBLIC_KEY), der::oid(OID_P256)]),
            KeyPair::P384(_) => der::seq([der::oid(OID_EC_PUBLIC_KEY), der::oid(OID_P384)]),
            KeyPair::Ed25519(_) => der::seq([der::oid(OID_ED25519)]),
        };
        der::seq([alg, der::bit_string(&self.public_key_raw())])
    }

    /// The public key as a PEM `PUBLIC KEY` block.
    pub fn public_key_pem(&self) -> String {
        pem("PUBLIC KEY", &self.spki_der())
    }

    /// SHA-256 of the DER SubjectPublicKeyInfo (the Rekor v1 / CT log ID).
    pub fn spki_sha256(&self) -> [u8; 32] {
        Sha256::digest(self.spki_der()).into()
    }

    /// Signs `message`: ECDSA (DER signature) with the curve's usual hash, or Ed25519 (64 bytes).
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        match self {
            KeyPair::P256(k) => {
                let s: p256::ecdsa::Signature = k.sign(message);
                s.to_der().as_bytes().to_vec()
            }
            KeyPair::P384(k) => {
                let s: p384::ecdsa::Signature = k.sign(message);
                s.to_der().as_bytes().to_vec()
            }
            KeyPair::Ed25519(k) => {
                use ed25519_dalek::Signer as _;
                k.sign(message).to_bytes().to_vec()
            }
        }
    }

    /// Signs an already computed digest (ECDSA only; Ed25519 signs the digest
    /// bytes as a message). Returns `None` if the digest length does not suit the curve.
    pub fn sign_prehash(&self, digest: &[u8]) -> Option<Vec<u8>> {
        match self {
            KeyPair::P256(k) => {
                let s: p256::ecdsa::Signature = k.sign_prehash(digest).ok()?;
                Some(s.to_der().as_bytes().to_vec())
            }
            KeyPair::P384(k) => {
                let s: p384::ecdsa::Signature = k.sign_prehash(digest).ok()?;
                Some(s.to_der().as_bytes().to_vec())
            }
            KeyPair::Ed25519(_) => Some(self.sign(digest)),
        }
    }

    /// The DER AlgorithmIdentifier of this key's X.509 / CMS signature algorithm.
    pub fn signature_algorithm_der(&self) -> Vec<u8> {
        match self {
            KeyPair::P256(_) => der::seq([der::oid(OID_ECDSA_SHA256)]),
            KeyPair::P384(_) => der::seq([der::oid(OID_ECDSA_SHA384)]),
            KeyPair::Ed25519(_) => der::seq([der::oid(OID_ED25519)]),
        }
    }

    /// The trust root `keyDetails` name (`PKIX_ECDSA_P256_SHA_256`, ...).
    pub fn key_details(&self) -> &'static str {
        match self {
            KeyPair::P256(_) => "PKIX_ECDSA_P256_SHA_256",
            KeyPair::P384(_) => "PKIX_ECDSA_P384_SHA_384",
            KeyPair::Ed25519(_) => "PKIX_ED25519",
        }
    }
}

/// PEM-armours `der` with 64-character lines and a trailing newline, the
/// layout OpenSSL and Python's `cryptography` produce.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = B64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_and_label_give_the_same_key() {
        assert_eq!(
            KeyPair::p256(7, "a").spki_der(),
            KeyPair::p256(7, "a").spki_der()
        );
        assert_ne!(
            KeyPair::p256(7, "a").spki_der(),
            KeyPair::p256(7, "b").spki_der()
        );
        assert_ne!(
            KeyPair::p384(7, "a").spki_der(),
            KeyPair::p384(8, "a").spki_der()
        );
    }

    #[test]
    fn ecdsa_signatures_are_deterministic_and_verify() {
        use p256::ecdsa::signature::Verifier as _;
        let k = KeyPair::p256(1, "x");
        let s1 = k.sign(b"hello");
        assert_eq!(s1, k.sign(b"hello"));
        let KeyPair::P256(sk) = &k else {
            unreachable!()
        };
        let sig = p256::ecdsa::Signature::from_der(&s1).unwrap();
        sk.verifying_key().verify(b"hello", &sig).unwrap();
    }

    #[test]
    fn spki_parses_with_the_pkcs8_decoder() {
        use p256::pkcs8::DecodePublicKey as _;
        let k = KeyPair::p256(3, "y");
        p256::PublicKey::from_public_key_der(&k.spki_der()).unwrap();
        let k = KeyPair::p384(3, "y");
        p384::PublicKey::from_public_key_der(&k.spki_der()).unwrap();
        let k = KeyPair::ed25519(3, "y");
        ed25519_dalek::VerifyingKey::from_public_key_der(&k.spki_der()).unwrap();
    }
}
