//! Public keys, signature checks and digests: the one place that knows which
//! curves and schemes sigil accepts (ECDSA P-256/P-384, Ed25519, RSA PKCS#1
//! v1.5), and the one place that calls the crypto module.
//!
//! The module is AWS-LC through aws-lc-rs, the same one rustls uses for every
//! TLS connection of the binaries; builds with the `fips` feature link its
//! FIPS 140-3 module instead ([`CryptoModule`] says which one is running).
//! There is no second implementation of a primitive in the production graph,
//! so a FIPS build verifies nothing outside the module.
//!
//! Keys are decoded and validated once, from DER SubjectPublicKeyInfo or PEM,
//! and reused for every verification, so the hot path never parses key
//! material. An artifact given only by its SHA-256 is checked with AWS-LC's
//! pre-hashed verification; its FIPS service indicator does not count that
//! service as approved (the module did not compute the digest itself), which
//! [`PublicKey::verify_prehash`] documents for callers.

use std::sync::{Arc, OnceLock};

use aws_lc_rs::digest;
use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::signature::{self, ParsedPublicKey, VerificationAlgorithm};

use crate::der;

/// A hash function used by a signature scheme or a message digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlgorithm {
    /// SHA-224 (only for managed-key ECDSA signatures, `hashAlgorithm: sha224`).
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
        digest::digest(self.aws_lc(), data).as_ref().to_vec()
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

    fn aws_lc(self) -> &'static digest::Algorithm {
        match self {
            Self::Sha224 => &digest::SHA224,
            Self::Sha256 => &digest::SHA256,
            Self::Sha384 => &digest::SHA384,
            Self::Sha512 => &digest::SHA512,
        }
    }

    /// Slot of this hash in a key's per-hash parsed forms. SHA-224 shares
    /// SHA-256's: it is checked through that form (see
    /// [`PublicKey::verify_sha224`]).
    fn slot(self) -> usize {
        match self {
            Self::Sha224 | Self::Sha256 => 0,
            Self::Sha384 => 1,
            Self::Sha512 => 2,
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

/// The key material behind every [`PublicKey`] variant: the SubjectPublicKeyInfo
/// it was decoded from and the module's parsed key for each hash it has been
/// used with. Clones share the parsed keys.
#[derive(Clone)]
pub struct KeyMaterial(Arc<Inner>);

struct Inner {
    spki: Vec<u8>,
    /// The subjectPublicKey bits: an EC point, a raw Ed25519 key or a DER
    /// RSAPublicKey.
    raw: Vec<u8>,
    /// One parsed key per hash (AWS-LC binds the hash to the parsed key);
    /// the key's default hash is parsed when it is decoded, which validates
    /// it, and the others on first use.
    parsed: [OnceLock<Option<ParsedPublicKey>>; 3],
}

impl KeyMaterial {
    /// The DER SubjectPublicKeyInfo the key was decoded from.
    pub fn spki_der(&self) -> &[u8] {
        &self.0.spki
    }

    /// The raw public key: the SEC1 point of an ECDSA key, the 32 bytes of an
    /// Ed25519 key, the DER RSAPublicKey of an RSA key.
    pub fn raw(&self) -> &[u8] {
        &self.0.raw
    }
}

/// A decoded public key.
#[derive(Clone)]
pub enum PublicKey {
    /// ECDSA over NIST P-256.
    P256(KeyMaterial),
    /// ECDSA over NIST P-384.
    P384(KeyMaterial),
    /// Ed25519 (signs the whole message).
    Ed25519(KeyMaterial),
    /// RSA (2048 to 8192 bits), PKCS#1 v1.5 signatures.
    Rsa(KeyMaterial),
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.scheme())
    }
}

const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";
const OID_ED25519: &str = "1.3.101.112";
const OID_RSA: &str = "1.2.840.113549.1.1.1";
/// The DER SubjectPublicKeyInfo of an Ed25519 key up to its 32 key bytes
/// (RFC 8410, section 4).
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
const RSA_BITS: std::ops::RangeInclusive<usize> = 2048..=8192;

impl PublicKey {
    /// Decodes and validates a DER SubjectPublicKeyInfo.
    pub fn from_spki_der(der: &[u8]) -> Result<Self, KeyError> {
        let malformed = |reason: String| KeyError::Malformed(reason);
        let (algorithm, curve, raw) =
            split_spki(der).map_err(|e| malformed(format!("not a SubjectPublicKeyInfo: {e}")))?;
        let make = |raw: &[u8]| {
            KeyMaterial(Arc::new(Inner {
                spki: der.to_vec(),
                raw: raw.to_vec(),
                parsed: Default::default(),
            }))
        };
        let key = match (algorithm.as_str(), curve.as_deref()) {
            (OID_EC_PUBLIC_KEY, Some(OID_P256)) => Self::P256(make(raw)),
            (OID_EC_PUBLIC_KEY, Some(OID_P384)) => Self::P384(make(raw)),
            (OID_EC_PUBLIC_KEY, other) => {
                return Err(malformed(format!(
                    "ECDSA curve {} is not supported (P-256 and P-384 are)",
                    other.unwrap_or("(none given)")
                )));
            }
            (OID_ED25519, _) => Self::Ed25519(make(raw)),
            (OID_RSA, _) => {
                let bits = rsa_modulus_bits(raw)
                    .map_err(|e| malformed(format!("RSA key is not a DER RSAPublicKey: {e}")))?;
                if !RSA_BITS.contains(&bits) {
                    return Err(malformed(format!(
                        "RSA key of {bits} bits; sigil accepts {} to {} bits",
                        RSA_BITS.start(),
                        RSA_BITS.end()
                    )));
                }
                Self::Rsa(make(raw))
            }
            (other, _) => {
                return Err(malformed(format!(
                    "key algorithm {other} is not supported; expected an ECDSA P-256/P-384, \
                     Ed25519 or RSA SubjectPublicKeyInfo"
                )));
            }
        };
        // Parsing the default form validates the key (the point is on its
        // curve, the Ed25519 key has 32 bytes), so a bad key fails here and
        // not at its first signature.
        if key.parsed(key.default_hash()).is_none() {
            return Err(malformed(format!(
                "the {} key is not valid (AWS-LC rejected it)",
                key.scheme()
            )));
        }
        Ok(key)
    }

    /// An Ed25519 key from its 32 raw bytes (as TUF and signed notes carry it).
    pub fn ed25519_from_bytes(raw: &[u8; 32]) -> Result<Self, KeyError> {
        let mut spki = ED25519_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(raw);
        Self::from_spki_der(&spki)
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

    /// The key material (SubjectPublicKeyInfo, raw key).
    pub fn material(&self) -> &KeyMaterial {
        match self {
            Self::P256(m) | Self::P384(m) | Self::Ed25519(m) | Self::Rsa(m) => m,
        }
    }

    /// The DER SubjectPublicKeyInfo the key was decoded from.
    pub fn spki_der(&self) -> &[u8] {
        self.material().spki_der()
    }

    /// The key re-encoded as AWS-LC writes a SubjectPublicKeyInfo (EC points
    /// uncompressed, RSA with NULL parameters): the form Rekor records, so
    /// that keys given in another valid encoding still compare equal.
    pub fn canonical_spki_der(&self) -> Option<Vec<u8>> {
        let der = self.parsed(self.default_hash())?.as_der().ok()?;
        Some(der.as_ref().to_vec())
    }

    /// Verifies `signature` over `message`, hashing with `hash` for ECDSA and
    /// RSA (Ed25519 always signs the message itself). ECDSA signatures are DER.
    pub fn verify(
        &self,
        message: &[u8],
        signature: &[u8],
        hash: HashAlgorithm,
    ) -> Result<(), SignatureError> {
        let scheme = self.scheme();
        if hash == HashAlgorithm::Sha224 && !matches!(self, Self::Ed25519(_)) {
            return self.verify_sha224(&hash.digest(message), signature);
        }
        self.check_encoding(signature)?;
        self.parsed(hash)
            .ok_or(SignatureError::Invalid { scheme })?
            .verify_sig(message, signature)
            .map_err(|_| SignatureError::Invalid { scheme })
    }

    /// Verifies `signature` over an already computed `digest` of the message
    /// (hashed with `hash`). Ed25519 keys cannot do this.
    ///
    /// In a FIPS build this is AWS-LC's pre-hashed verification, which its
    /// service indicator does not report as approved: prefer [`Self::verify`]
    /// whenever the message itself is at hand.
    pub fn verify_prehash(
        &self,
        digest: &[u8],
        signature: &[u8],
        hash: HashAlgorithm,
    ) -> Result<(), SignatureError> {
        let scheme = self.scheme();
        if let Self::Ed25519(_) = self {
            return Err(SignatureError::Unsupported {
                scheme,
                what: "pre-hashed digest",
            });
        }
        if hash == HashAlgorithm::Sha224 {
            if digest.len() != hash.output_len() {
                return Err(SignatureError::Invalid { scheme });
            }
            return self.verify_sha224(digest, signature);
        }
        let digest = digest::Digest::import_less_safe(digest, hash.aws_lc())
            .map_err(|_| SignatureError::Invalid { scheme })?;
        self.check_encoding(signature)?;
        self.parsed(hash)
            .ok_or(SignatureError::Invalid { scheme })?
            .verify_digest_sig(&digest, signature)
            .map_err(|_| SignatureError::Invalid { scheme })
    }

    /// Verifies an ECDSA signature over a SHA-224 `digest`.
    ///
    /// aws-lc-rs has no P-256/P-384 SHA-224 algorithm, and its pre-hashed
    /// verification takes only a digest of the parsed key's own hash. ECDSA
    /// signs the integer of the digest's leftmost bits, no more than the
    /// curve order has (FIPS 186-5, 6.4.1); 256 bits fit both curves whole,
    /// so the 28 digest bytes behind four zero bytes are the same integer,
    /// and the SHA-256 form checks exactly the SHA-224 signature. RSA
    /// PKCS#1 v1.5 names the hash inside the signed block, so no such
    /// equivalence exists for it and AWS-LC offers no RSA SHA-224 check.
    fn verify_sha224(&self, digest: &[u8], signature: &[u8]) -> Result<(), SignatureError> {
        let scheme = self.scheme();
        match self {
            Self::P256(_) | Self::P384(_) => {}
            Self::Rsa(_) | Self::Ed25519(_) => {
                return Err(SignatureError::Unsupported {
                    scheme,
                    what: "SHA-224 signature (AWS-LC verifies SHA-224 only for ECDSA keys)",
                });
            }
        }
        // A digest of another length than 28 bytes makes 32 fail to import.
        let widened: Vec<u8> = [0u8; 4].iter().chain(digest).copied().collect();
        let digest = digest::Digest::import_less_safe(&widened, &digest::SHA256)
            .map_err(|_| SignatureError::Invalid { scheme })?;
        self.check_encoding(signature)?;
        self.parsed(HashAlgorithm::Sha256)
            .ok_or(SignatureError::Invalid { scheme })?
            .verify_digest_sig(&digest, signature)
            .map_err(|_| SignatureError::Invalid { scheme })
    }

    /// AWS-LC folds "malformed" and "invalid" into one error; a signature that
    /// is not even well encoded is told apart first so that messages stay
    /// precise.
    fn check_encoding(&self, signature: &[u8]) -> Result<(), SignatureError> {
        let well_formed = match self {
            Self::P256(_) | Self::P384(_) => ecdsa_der_well_formed(signature),
            Self::Ed25519(_) => signature.len() == 64,
            Self::Rsa(_) => true,
        };
        if well_formed {
            Ok(())
        } else {
            Err(SignatureError::Malformed {
                scheme: self.scheme(),
            })
        }
    }

    /// The module's parsed key for `hash`, parsed on first use.
    fn parsed(&self, hash: HashAlgorithm) -> Option<&ParsedPublicKey> {
        let (m, alg): (_, &'static dyn VerificationAlgorithm) = match (self, hash) {
            (Self::P256(m), HashAlgorithm::Sha256) => (m, &signature::ECDSA_P256_SHA256_ASN1),
            (Self::P256(m), HashAlgorithm::Sha384) => (m, &signature::ECDSA_P256_SHA384_ASN1),
            (Self::P256(m), HashAlgorithm::Sha512) => (m, &signature::ECDSA_P256_SHA512_ASN1),
            (Self::P384(m), HashAlgorithm::Sha256) => (m, &signature::ECDSA_P384_SHA256_ASN1),
            (Self::P384(m), HashAlgorithm::Sha384) => (m, &signature::ECDSA_P384_SHA384_ASN1),
            (Self::P384(m), HashAlgorithm::Sha512) => (m, &signature::ECDSA_P384_SHA512_ASN1),
            (Self::Rsa(m), HashAlgorithm::Sha256) => (m, &signature::RSA_PKCS1_2048_8192_SHA256),
            (Self::Rsa(m), HashAlgorithm::Sha384) => (m, &signature::RSA_PKCS1_2048_8192_SHA384),
            (Self::Rsa(m), HashAlgorithm::Sha512) => (m, &signature::RSA_PKCS1_2048_8192_SHA512),
            // Checked through the SHA-256 form, see `verify_sha224`.
            (Self::P256(_) | Self::P384(_) | Self::Rsa(_), HashAlgorithm::Sha224) => return None,
            // Ed25519 hashes internally: one parsed form, whatever `hash` says.
            (Self::Ed25519(m), _) => {
                return m.0.parsed[0]
                    .get_or_init(|| ParsedPublicKey::new(&signature::ED25519, &m.0.spki).ok())
                    .as_ref();
            }
        };
        m.0.parsed
            .get(hash.slot())?
            .get_or_init(|| ParsedPublicKey::new(alg, &m.0.spki).ok())
            .as_ref()
    }
}

/// Splits a SubjectPublicKeyInfo into its algorithm OID, the named-curve OID
/// of an EC key, and the subjectPublicKey bits.
fn split_spki(spki: &[u8]) -> Result<(String, Option<String>, &[u8]), der::DerError> {
    let outer = der::parse_single(spki)?;
    let mut fields = outer.reader();
    if outer.tag != der::SEQUENCE {
        return Err(der::DerError::UnexpectedTag {
            expected: "SubjectPublicKeyInfo SEQUENCE",
            found: outer.tag,
            at: 0,
        });
    }
    let alg = fields.read(der::SEQUENCE, "AlgorithmIdentifier")?;
    let key = fields.read(der::BIT_STRING, "subjectPublicKey BIT STRING")?;
    fields.finish()?;
    let mut alg_fields = alg.reader();
    let oid = alg_fields.read(der::OID, "algorithm OID")?.oid()?;
    let curve = match alg_fields.read_optional(der::OID)? {
        Some(c) => Some(c.oid()?),
        None => None,
    };
    // The first octet counts unused bits; keys are whole octets.
    let raw = match key.value.split_first() {
        Some((0, raw)) => raw,
        _ => {
            return Err(der::DerError::InvalidValue {
                what: "BIT STRING",
                at: key.offset,
                reason: "a public key must be a whole number of octets",
            });
        }
    };
    Ok((oid, curve, raw))
}

/// The bit length of an RSAPublicKey's modulus.
fn rsa_modulus_bits(rsa_public_key: &[u8]) -> Result<usize, der::DerError> {
    let seq = der::parse_single(rsa_public_key)?;
    let mut fields = seq.reader();
    let modulus = fields.read(der::INTEGER, "RSA modulus")?;
    fields.read(der::INTEGER, "RSA public exponent")?;
    fields.finish()?;
    let digits = match modulus.integer_bytes()? {
        [0, rest @ ..] => rest,
        all => all,
    };
    Ok(match digits.first() {
        Some(top) => digits.len() * 8 - top.leading_zeros() as usize,
        None => 0,
    })
}

/// Whether `sig` is a DER ECDSA-Sig-Value: a SEQUENCE of two positive,
/// minimally encoded INTEGERs and nothing else.
fn ecdsa_der_well_formed(sig: &[u8]) -> bool {
    let positive = |t: &der::Tlv<'_>| {
        t.integer_bytes().is_ok_and(|b| {
            b.first().is_some_and(|top| top & 0x80 == 0) && b.iter().any(|&x| x != 0)
        })
    };
    let Ok(seq) = der::parse_single(sig) else {
        return false;
    };
    if seq.tag != der::SEQUENCE {
        return false;
    }
    let mut fields = seq.reader();
    let (Ok(r), Ok(s)) = (
        fields.read(der::INTEGER, "r"),
        fields.read(der::INTEGER, "s"),
    ) else {
        return false;
    };
    fields.finish().is_ok() && positive(&r) && positive(&s)
}

/// `der` as one PEM block with the given label, 64 base64 characters a line.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
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
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// SHA-256 of the concatenation of `parts`, without building it.
pub fn sha256_parts(parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = digest::Context::new(&digest::SHA256);
    for p in parts {
        ctx.update(p);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// Which crypto module this build uses, as the binaries report it (in
/// `--version`, a startup log line and a metric label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CryptoModule {
    /// AWS-LC's version as the linked library reports it (`1.66.2`).
    pub version: String,
    /// Whether this build links AWS-LC's FIPS 140-3 module (the `fips` feature).
    pub fips_build: bool,
    /// Whether the module reports FIPS mode (a FIPS module whose power-on
    /// self-tests and integrity check passed).
    pub fips_mode: bool,
}

/// Why the crypto module must not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModuleError {
    /// A FIPS build whose module does not report FIPS mode.
    #[error(
        "this is a FIPS build of sigil but AWS-LC {version} does not report FIPS mode; \
         refusing to run (rebuild with `make release-fips`, or run a non-FIPS build)"
    )]
    FipsModeOff {
        /// The linked AWS-LC version.
        version: String,
    },
}

impl CryptoModule {
    /// The module linked into this process.
    pub fn current() -> Self {
        Self {
            version: aws_lc_rs::awslc_version().to_owned(),
            fips_build: cfg!(feature = "fips"),
            fips_mode: aws_lc_rs::try_fips_mode().is_ok(),
        }
    }

    /// A stable label for metrics: `aws-lc` or `aws-lc-fips`.
    pub fn label(&self) -> &'static str {
        if self.fips_build {
            "aws-lc-fips"
        } else {
            "aws-lc"
        }
    }

    /// Fails closed: a FIPS build runs only on a module in FIPS mode.
    pub fn check(&self) -> Result<(), ModuleError> {
        if self.fips_build && !self.fips_mode {
            return Err(ModuleError::FipsModeOff {
                version: self.version.clone(),
            });
        }
        Ok(())
    }
}

impl std::fmt::Display for CryptoModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.fips_build, self.fips_mode) {
            (true, true) => write!(f, "AWS-LC {} (FIPS 140-3 module, FIPS mode)", self.version),
            (true, false) => write!(
                f,
                "AWS-LC {} (FIPS 140-3 module, NOT in FIPS mode)",
                self.version
            ),
            (false, _) => write!(f, "AWS-LC {} (not FIPS)", self.version),
        }
    }
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

    use sigil_testkit::der as tk;
    use sigil_testkit::keys::KeyPair;

    fn key_of(k: &KeyPair) -> PublicKey {
        PublicKey::from_spki_der(&k.spki_der()).unwrap()
    }

    // The testkit signs with RustCrypto, so these check AWS-LC against an
    // independent implementation.
    #[test]
    fn verifies_messages_signed_by_an_independent_implementation() {
        for (k, scheme) in [
            (KeyPair::p256(1, "m"), "ECDSA P-256"),
            (KeyPair::p384(1, "m"), "ECDSA P-384"),
            (KeyPair::ed25519(1, "m"), "Ed25519"),
        ] {
            let key = key_of(&k);
            assert_eq!(key.scheme(), scheme);
            let sig = k.sign(b"message");
            key.verify(b"message", &sig, key.default_hash()).unwrap();
            assert_eq!(
                key.verify(b"massage", &sig, key.default_hash()),
                Err(SignatureError::Invalid { scheme })
            );
        }
    }

    #[test]
    fn verifies_prehashed_digests_with_the_hash_they_were_made_with() {
        for k in [KeyPair::p256(2, "d"), KeyPair::p384(2, "d")] {
            let key = key_of(&k);
            for hash in [HashAlgorithm::Sha256, HashAlgorithm::Sha384] {
                let digest = hash.digest(b"artifact");
                let sig = k.sign_prehash(&digest).unwrap();
                key.verify_prehash(&digest, &sig, hash).unwrap();
                // The same signature over the same bytes, hashed by the module.
                key.verify(b"artifact", &sig, hash).unwrap();
                let other = hash.digest(b"other");
                assert!(key.verify_prehash(&other, &sig, hash).is_err());
            }
        }
    }

    #[test]
    fn a_digest_of_the_wrong_length_does_not_verify() {
        let k = KeyPair::p256(3, "l");
        let digest = HashAlgorithm::Sha256.digest(b"x");
        let sig = k.sign_prehash(&digest).unwrap();
        let key = key_of(&k);
        assert!(
            key.verify_prehash(&digest, &sig, HashAlgorithm::Sha384)
                .is_err()
        );
    }

    #[test]
    fn ed25519_refuses_prehashed_digests() {
        let key = key_of(&KeyPair::ed25519(4, "p"));
        assert!(matches!(
            key.verify_prehash(&[0; 64], &[0; 64], HashAlgorithm::Sha512),
            Err(SignatureError::Unsupported { .. })
        ));
    }

    #[test]
    fn ecdsa_signatures_that_are_not_der_are_malformed_not_invalid() {
        let key = key_of(&KeyPair::p256(5, "s"));
        let scheme = "ECDSA P-256";
        let zero_r = tk::seq([tk::tlv(0x02, &[0]), tk::uint(&[1])]);
        let trailing = [tk::seq([tk::uint(&[1]), tk::uint(&[1])]), vec![0]].concat();
        for bad in [&b""[..], b"\x30\x00", &zero_r, &trailing, &[0x30; 70]] {
            assert_eq!(
                key.verify(b"m", bad, HashAlgorithm::Sha256),
                Err(SignatureError::Malformed { scheme }),
                "{bad:02x?}"
            );
        }
    }

    #[test]
    fn ed25519_keys_from_raw_bytes_match_their_spki_form() {
        let k = KeyPair::ed25519(6, "raw");
        let raw: [u8; 32] = k.public_key_raw().try_into().unwrap();
        let key = PublicKey::ed25519_from_bytes(&raw).unwrap();
        assert_eq!(key.spki_der(), k.spki_der());
        assert_eq!(key.material().raw(), raw);
        key.verify(b"note", &k.sign(b"note"), HashAlgorithm::Sha512)
            .unwrap();
    }

    #[test]
    fn a_compressed_point_key_compares_equal_to_its_uncompressed_form() {
        let k = KeyPair::p256(7, "c");
        let point = k.public_key_raw();
        let (x, y) = point[1..].split_at(32);
        let compressed = [&[2 | (y[31] & 1)][..], x].concat();
        let spki = tk::seq([
            tk::seq([tk::oid(OID_EC_PUBLIC_KEY), tk::oid(OID_P256)]),
            tk::bit_string(&compressed),
        ]);
        let key = PublicKey::from_spki_der(&spki).unwrap();
        assert_eq!(key.canonical_spki_der().unwrap(), k.spki_der());
        key.verify(b"m", &k.sign(b"m"), HashAlgorithm::Sha256)
            .unwrap();
    }

    #[test]
    fn rejects_points_off_the_curve_when_decoding() {
        let k = KeyPair::p256(8, "o");
        let mut point = k.public_key_raw();
        point[64] ^= 1;
        let spki = tk::seq([
            tk::seq([tk::oid(OID_EC_PUBLIC_KEY), tk::oid(OID_P256)]),
            tk::bit_string(&point),
        ]);
        let err = PublicKey::from_spki_der(&spki).unwrap_err();
        assert!(err.to_string().contains("not valid"), "{err}");
    }

    #[test]
    fn names_unsupported_curves_and_short_rsa_keys() {
        let p521 = tk::seq([
            tk::seq([tk::oid(OID_EC_PUBLIC_KEY), tk::oid("1.3.132.0.35")]),
            tk::bit_string(&[4; 133]),
        ]);
        let err = PublicKey::from_spki_der(&p521).unwrap_err();
        assert!(err.to_string().contains("1.3.132.0.35"), "{err}");

        let modulus = [&[0xc1][..], &[0x55; 127]].concat();
        let rsa1024 = tk::seq([
            tk::seq([tk::oid(OID_RSA), tk::null()]),
            tk::bit_string(&tk::seq([tk::uint(&modulus), tk::uint(&[1, 0, 1])])),
        ]);
        let err = PublicKey::from_spki_der(&rsa1024).unwrap_err();
        assert!(err.to_string().contains("1024 bits"), "{err}");
    }

    #[test]
    fn rsa_pkcs1_signatures_verify_for_every_hash_and_prehashed() {
        use aws_lc_rs::rsa::KeySize;
        use aws_lc_rs::signature::{KeyPair as _, RsaKeyPair};
        let pair = RsaKeyPair::generate(KeySize::Rsa2048).unwrap();
        let spki = pair.public_key().as_der().unwrap();
        let key = PublicKey::from_spki_der(spki.as_ref()).unwrap();
        assert_eq!(key.scheme(), "RSA");
        let rng = aws_lc_rs::rand::SystemRandom::new();
        for (hash, enc) in [
            (HashAlgorithm::Sha256, &signature::RSA_PKCS1_SHA256),
            (HashAlgorithm::Sha384, &signature::RSA_PKCS1_SHA384),
            (HashAlgorithm::Sha512, &signature::RSA_PKCS1_SHA512),
        ] {
            let mut sig = vec![0; pair.public_modulus_len()];
            pair.sign(enc, &rng, b"rsa", &mut sig).unwrap();
            key.verify(b"rsa", &sig, hash).unwrap();
            key.verify_prehash(&hash.digest(b"rsa"), &sig, hash)
                .unwrap();
            assert!(key.verify(b"rsb", &sig, hash).is_err());
        }
        // No SHA-224 RSA check exists in the module: refused as such, not
        // reported as a bad signature.
        let mut sig = vec![0; pair.public_modulus_len()];
        pair.sign(&signature::RSA_PKCS1_SHA256, &rng, b"rsa", &mut sig)
            .unwrap();
        for got in [
            key.verify(b"rsa", &sig, HashAlgorithm::Sha224),
            key.verify_prehash(
                &HashAlgorithm::Sha224.digest(b"rsa"),
                &sig,
                HashAlgorithm::Sha224,
            ),
        ] {
            assert!(
                matches!(got, Err(SignatureError::Unsupported { scheme: "RSA", .. })),
                "{got:?}"
            );
        }
    }

    #[test]
    fn ecdsa_sha224_signatures_verify_only_with_their_own_digest() {
        for k in [KeyPair::p256(9, "sha224"), KeyPair::p384(9, "sha224")] {
            let key = key_of(&k);
            let digest = HashAlgorithm::Sha224.digest(b"message");
            let sig = k.sign_prehash(&digest).unwrap();
            key.verify(b"message", &sig, HashAlgorithm::Sha224).unwrap();
            key.verify_prehash(&digest, &sig, HashAlgorithm::Sha224)
                .unwrap();
            assert!(key.verify(b"messagf", &sig, HashAlgorithm::Sha224).is_err());
            // The same bytes as a SHA-256 digest are another integer.
            assert!(key.verify(b"message", &sig, HashAlgorithm::Sha256).is_err());
            assert!(
                key.verify_prehash(&digest[..27], &sig, HashAlgorithm::Sha224)
                    .is_err()
            );
        }
    }

    #[test]
    fn digests_match_known_answers() {
        assert_eq!(
            hex::encode(sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(sha256_parts(&[b"a", b"", b"bc"]), sha256(b"abc"));
        assert_eq!(HashAlgorithm::Sha384.digest(b"abc").len(), 48);
        assert_eq!(
            hex::encode(&HashAlgorithm::Sha512.digest(b"abc")[..8]),
            "ddaf35a193617aba"
        );
    }

    #[test]
    fn a_fips_build_refuses_to_run_outside_fips_mode() {
        let module = |fips_build, fips_mode| CryptoModule {
            version: "1.0.0".into(),
            fips_build,
            fips_mode,
        };
        assert!(matches!(
            module(true, false).check(),
            Err(ModuleError::FipsModeOff { .. })
        ));
        assert!(module(true, true).check().is_ok());
        assert!(module(false, false).check().is_ok());
        assert_eq!(module(true, true).label(), "aws-lc-fips");
    }

    #[test]
    fn the_running_module_is_the_one_this_build_links() {
        let m = CryptoModule::current();
        assert_eq!(m.fips_build, cfg!(feature = "fips"));
        assert_eq!(m.fips_mode, cfg!(feature = "fips"));
        assert!(m.check().is_ok());
        assert!(m.to_string().starts_with("AWS-LC "), "{m}");
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
