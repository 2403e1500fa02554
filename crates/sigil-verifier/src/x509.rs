//! An owned, pre-digested X.509 certificate: everything verification reads
//! from a certificate is extracted once at parse time (key, validity, names,
//! constraints, extensions), so trust material parsed at start-up is reused
//! without re-parsing and without borrowing from the input buffer.

use time::OffsetDateTime;
use x509_parser::prelude::{FromDer as _, GeneralName, ParsedExtension, X509Certificate};

use crate::crypto::{HashAlgorithm, PublicKey, SignatureError};

/// OID of the extended key usage `codeSigning`.
pub const OID_EKU_CODE_SIGNING: &str = "1.3.6.1.5.5.7.3.3";
/// OID of the extended key usage `timeStamping`.
pub const OID_EKU_TIME_STAMPING: &str = "1.3.6.1.5.5.7.3.8";
/// OID of the embedded SCT list extension (RFC 6962).
pub const OID_SCT_LIST: &str = "1.3.6.1.4.1.11129.2.4.2";

/// Why a certificate could not be parsed or checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    /// The DER does not parse as an X.509 certificate.
    #[error("malformed X.509 certificate: {0}")]
    Malformed(String),
    /// The certificate's public key is of an unsupported type.
    #[error("unsupported certificate public key: {0}")]
    UnsupportedKey(String),
    /// The certificate's signature algorithm is not one sigil accepts.
    #[error("unsupported certificate signature algorithm {0}")]
    UnsupportedAlgorithm(String),
    /// The certificate is not signed by the given issuer.
    #[error("certificate `{subject}` is not signed by `{issuer}`: {reason}")]
    BadSignature {
        /// Subject of the certificate checked.
        subject: String,
        /// Subject of the would-be issuer.
        issuer: String,
        /// What failed.
        reason: String,
    },
}

/// The signature algorithm a certificate (or CMS signer) was signed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureAlgorithm {
    /// ECDSA with the given hash.
    Ecdsa(HashAlgorithm),
    /// RSA PKCS#1 v1.5 with the given hash.
    RsaPkcs1(HashAlgorithm),
    /// Ed25519.
    Ed25519,
}

impl SignatureAlgorithm {
    /// Maps a signature algorithm OID (dotted) to a supported algorithm.
    pub fn from_oid(oid: &str) -> Option<Self> {
        Some(match oid {
            "1.2.840.10045.4.3.2" => Self::Ecdsa(HashAlgorithm::Sha256),
            "1.2.840.10045.4.3.3" => Self::Ecdsa(HashAlgorithm::Sha384),
            "1.2.840.10045.4.3.4" => Self::Ecdsa(HashAlgorithm::Sha512),
            "1.2.840.113549.1.1.11" => Self::RsaPkcs1(HashAlgorithm::Sha256),
            "1.2.840.113549.1.1.12" => Self::RsaPkcs1(HashAlgorithm::Sha384),
            "1.2.840.113549.1.1.13" => Self::RsaPkcs1(HashAlgorithm::Sha512),
            "1.3.101.112" => Self::Ed25519,
            _ => return None,
        })
    }

    /// The hash the algorithm applies to the signed data.
    pub fn hash(self) -> HashAlgorithm {
        match self {
            Self::Ecdsa(h) | Self::RsaPkcs1(h) => h,
            Self::Ed25519 => HashAlgorithm::Sha512,
        }
    }
}

/// One X.509 extension, raw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    /// Dotted OID.
    pub oid: String,
    /// Whether the extension is marked critical.
    pub critical: bool,
    /// The extension value (contents of the OCTET STRING).
    pub value: Vec<u8>,
}

/// A parsed certificate with its verification-relevant fields.
#[derive(Debug, Clone)]
pub struct Certificate {
    /// The full DER encoding.
    pub der: Vec<u8>,
    /// The DER of the TBSCertificate (what the issuer signed).
    pub tbs: Vec<u8>,
    /// The signature algorithm, when supported.
    pub signature_algorithm: Option<SignatureAlgorithm>,
    /// Dotted OID of the signature algorithm (for messages).
    pub signature_algorithm_oid: String,
    /// The issuer's signature bytes.
    pub signature: Vec<u8>,
    /// DER SubjectPublicKeyInfo.
    pub spki_der: Vec<u8>,
    /// The subject public key, when of a supported type.
    pub public_key: Option<PublicKey>,
    /// DER of the subject Name.
    pub subject_der: Vec<u8>,
    /// DER of the issuer Name.
    pub issuer_der: Vec<u8>,
    /// Human-readable subject, for messages.
    pub subject: String,
    /// Human-readable issuer, for messages.
    pub issuer: String,
    /// Serial number, big-endian bytes.
    pub serial: Vec<u8>,
    /// Start of validity (inclusive).
    pub not_before: OffsetDateTime,
    /// End of validity (inclusive).
    pub not_after: OffsetDateTime,
    /// Basic constraints `cA`.
    pub is_ca: bool,
    /// Basic constraints `pathLenConstraint`.
    pub path_len: Option<u32>,
    /// Key usage `keyCertSign`, when the extension is present.
    pub key_cert_sign: Option<bool>,
    /// Key usage `digitalSignature`, when the extension is present.
    pub digital_signature: Option<bool>,
    /// Extended key usages (dotted OIDs), when the extension is present.
    pub extended_key_usages: Option<Vec<String>>,
    /// SAN URIs.
    pub san_uris: Vec<String>,
    /// SAN e-mail addresses.
    pub san_emails: Vec<String>,
    /// SAN DNS names.
    pub san_dns: Vec<String>,
    /// SAN otherName values that are UTF8Strings (Fulcio's username SAN), raw.
    pub san_other: Vec<(String, Vec<u8>)>,
    /// Subject key identifier.
    pub subject_key_id: Option<Vec<u8>>,
    /// Authority key identifier (keyIdentifier field).
    pub authority_key_id: Option<Vec<u8>>,
    /// Every extension, raw, in order.
    pub extensions: Vec<Extension>,
}

impl Certificate {
    /// Parses a DER certificate. Trailing bytes are an error.
    pub fn from_der(der: &[u8]) -> Result<Self, CertificateError> {
        let (rest, cert) = X509Certificate::from_der(der)
            .map_err(|e| CertificateError::Malformed(e.to_string()))?;
        if !rest.is_empty() {
            return Err(CertificateError::Malformed(format!(
                "{} trailing bytes after the certificate",
                rest.len()
            )));
        }
        let tbs = cert.tbs_certificate.as_ref().to_vec();
        let sig_oid = oid_text(&cert.signature_algorithm.algorithm)?;
        let spki_der = cert.public_key().raw.to_vec();
        let public_key = PublicKey::from_spki_der(&spki_der).ok();
        let validity = cert.validity();
        let mut out = Self {
            der: der.to_vec(),
            tbs,
            signature_algorithm: SignatureAlgorithm::from_oid(&sig_oid),
            signature_algorithm_oid: sig_oid,
            signature: cert.signature_value.data.to_vec(),
            spki_der,
            public_key,
            subject_der: cert.subject().as_raw().to_vec(),
            issuer_der: cert.issuer().as_raw().to_vec(),
            subject: cert.subject().to_string(),
            issuer: cert.issuer().to_string(),
            serial: cert.raw_serial().to_vec(),
            not_before: validity.not_before.to_datetime(),
            not_after: validity.not_after.to_datetime(),
            is_ca: false,
            path_len: None,
            key_cert_sign: None,
            digital_signature: None,
            extended_key_usages: None,
            san_uris: Vec::new(),
            san_emails: Vec::new(),
            san_dns: Vec::new(),
            san_other: Vec::new(),
            subject_key_id: None,
            authority_key_id: None,
            extensions: Vec::new(),
        };
        let mut seen = std::collections::HashSet::new();
        for ext in cert.extensions() {
            let oid = oid_text(&ext.oid)?;
            if !seen.insert(ext.oid.as_bytes()) {
                return Err(CertificateError::Malformed(format!(
                    "extension {oid} appears more than once"
                )));
            }
            match ext.parsed_extension() {
                ParsedExtension::BasicConstraints(bc) => {
                    out.is_ca = bc.ca;
                    out.path_len = bc.path_len_constraint;
                }
                ParsedExtension::KeyUsage(ku) => {
                    out.key_cert_sign = Some(ku.key_cert_sign());
                    out.digital_signature = Some(ku.digital_signature());
                }
                ParsedExtension::ExtendedKeyUsage(eku) => {
                    let mut v = Vec::new();
                    if eku.code_signing {
                        v.push(OID_EKU_CODE_SIGNING.to_owned());
                    }
                    if eku.time_stamping {
                        v.push(OID_EKU_TIME_STAMPING.to_owned());
                    }
                    if eku.any {
                        v.push("2.5.29.37.0".to_owned());
                    }
                    if eku.server_auth {
                        v.push("1.3.6.1.5.5.7.3.1".to_owned());
                    }
                    if eku.client_auth {
                        v.push("1.3.6.1.5.5.7.3.2".to_owned());
                    }
                    if eku.email_protection {
                        v.push("1.3.6.1.5.5.7.3.4".to_owned());
                    }
                    if eku.ocsp_signing {
                        v.push("1.3.6.1.5.5.7.3.9".to_owned());
                    }
                    for other in &eku.other {
                        v.push(oid_text(other)?);
                    }
                    out.extended_key_usages = Some(v);
                }
                ParsedExtension::SubjectAlternativeName(san) => {
                    for name in &san.general_names {
                        match name {
                            GeneralName::URI(u) => out.san_uris.push((*u).to_owned()),
                            GeneralName::RFC822Name(e) => out.san_emails.push((*e).to_owned()),
                            GeneralName::DNSName(d) => out.san_dns.push((*d).to_owned()),
                            GeneralName::OtherName(oid, value) => {
                                out.san_other.push((oid_text(oid)?, value.to_vec()))
                            }
                            _ => {}
                        }
                    }
                }
                ParsedExtension::SubjectKeyIdentifier(id) => {
                    out.subject_key_id = Some(id.0.to_vec());
                }
                ParsedExtension::AuthorityKeyIdentifier(aki) => {
                    out.authority_key_id = aki.key_identifier.as_ref().map(|k| k.0.to_vec());
                }
                ParsedExtension::ParseError { error } if ext.critical => {
                    return Err(CertificateError::Malformed(format!(
                        "critical extension {oid} does not parse: {error}"
                    )));
                }
                _ => {}
            }
            out.extensions.push(Extension {
                oid,
                critical: ext.critical,
                value: ext.value.to_vec(),
            });
        }
        Ok(out)
    }

    /// Parses every certificate of a PEM document, in order.
    pub fn from_pem_chain(pem: &str) -> Result<Vec<Self>, CertificateError> {
        crate::crypto::pem_decode_all(pem, "CERTIFICATE")
            .map_err(CertificateError::Malformed)?
            .iter()
            .map(|der| Self::from_der(der))
            .collect()
    }

    /// The raw value of the extension with this dotted OID, if present.
    pub fn extension(&self, oid: &str) -> Option<&Extension> {
        self.extensions.iter().find(|e| e.oid == oid)
    }

    /// Whether `at` lies within the certificate's validity (both ends inclusive).
    pub fn is_valid_at(&self, at: OffsetDateTime) -> bool {
        self.not_before <= at && at <= self.not_after
    }

    /// Whether the certificate is self-issued and self-signed.
    pub fn is_self_signed(&self) -> bool {
        self.subject_der == self.issuer_der && self.verify_issued_by(self).is_ok()
    }

    /// Whether the extended key usage extension lists `oid`.
    pub fn has_eku(&self, oid: &str) -> bool {
        self.extended_key_usages
            .as_ref()
            .is_some_and(|v| v.iter().any(|o| o == oid))
    }

    /// Checks that `issuer`'s name matches this certificate's issuer and that
    /// `issuer`'s key signed this certificate.
    pub fn verify_issued_by(&self, issuer: &Certificate) -> Result<(), CertificateError> {
        let fail = |reason: String| CertificateError::BadSignature {
            subject: self.subject.clone(),
            issuer: issuer.subject.clone(),
            reason,
        };
        if self.issuer_der != issuer.subject_der {
            return Err(fail("issuer name does not match".into()));
        }
        let key = issuer
            .public_key
            .as_ref()
            .ok_or_else(|| fail("issuer key type unsupported".into()))?;
        let alg = self.signature_algorithm.ok_or_else(|| {
            CertificateError::UnsupportedAlgorithm(self.signature_algorithm_oid.clone())
        })?;
        verify_with_algorithm(key, alg, &self.tbs, &self.signature).map_err(|e| fail(e.to_string()))
    }
}

/// Certificate links already verified in this process, keyed by the SHA-256
/// of the child's and the parent's DER. Only links between trust-root
/// certificates go through here: every admission re-checks the same one or
/// two CA links, a P-384 check costs most of a millisecond, and a signature
/// over identical bytes with an identical key cannot change its verdict. Only
/// successes are kept, and the set is bounded.
static VERIFIED_TRUST_LINKS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashSet<[u8; 64]>>,
> = std::sync::LazyLock::new(Default::default);

/// Bound on [`VERIFIED_TRUST_LINKS`]; trust roots hold a handful of authorities.
const MAX_VERIFIED_TRUST_LINKS: usize = 1024;

/// [`Certificate::verify_issued_by`] for links between trust-root
/// certificates, remembered once verified (see [`VERIFIED_TRUST_LINKS`]).
/// Never use it for bundle-supplied certificates.
pub fn verify_trust_link(
    child: &Certificate,
    parent: &Certificate,
) -> Result<(), CertificateError> {
    let mut key = [0u8; 64];
    let (c, p) = key.split_at_mut(32);
    c.copy_from_slice(&crate::crypto::sha256(&child.der));
    p.copy_from_slice(&crate::crypto::sha256(&parent.der));
    // A poisoned lock only costs the cache, never the check.
    if VERIFIED_TRUST_LINKS
        .lock()
        .is_ok_and(|set| set.contains(&key))
    {
        return Ok(());
    }
    child.verify_issued_by(parent)?;
    if let Ok(mut set) = VERIFIED_TRUST_LINKS.lock() {
        if set.len() >= MAX_VERIFIED_TRUST_LINKS {
            set.clear();
        }
        set.insert(key);
    }
    Ok(())
}

/// Verifies `signature` over `data` with `key` under the given algorithm,
/// refusing algorithm/key mismatches (e.g. an RSA algorithm with an EC key).
pub fn verify_with_algorithm(
    key: &PublicKey,
    alg: SignatureAlgorithm,
    data: &[u8],
    signature: &[u8],
) -> Result<(), SignatureError> {
    let matches = matches!(
        (key, alg),
        (
            PublicKey::P256(_) | PublicKey::P384(_),
            SignatureAlgorithm::Ecdsa(_)
        ) | (PublicKey::Rsa(_), SignatureAlgorithm::RsaPkcs1(_))
            | (PublicKey::Ed25519(_), SignatureAlgorithm::Ed25519)
    );
    if !matches {
        return Err(SignatureError::Unsupported {
            scheme: key.scheme(),
            what: "signature of a different algorithm",
        });
    }
    key.verify(data, signature, alg.hash())
}

/// The dotted form of an OID in a certificate. Arcs wider than 64 bits
/// (legal, never seen in Sigstore material) take asn1-rs's own path; an OID
/// that is not minimally encoded is refused, as DER requires (Go's parser,
/// and so cosign's, refuses it too), so that equal OIDs have equal bytes.
fn oid_text(oid: &x509_parser::der_parser::oid::Oid<'_>) -> Result<String, CertificateError> {
    match crate::der::dotted_oid(oid.as_bytes()) {
        Ok(text) => Ok(text),
        Err(crate::der::OidError::TooWide) => Ok(oid.to_id_string()),
        Err(e) => Err(CertificateError::Malformed(format!(
            "object identifier {} is not valid DER: {}",
            hex::encode(oid.as_bytes()),
            e.reason()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_a_malformed_certificate() {
        assert!(matches!(
            Certificate::from_der(&[0x30, 0x03, 0x02, 0x01, 0x01]),
            Err(CertificateError::Malformed(_))
        ));
    }

    #[test]
    fn oid_text_agrees_with_asn1_rs_on_every_oid_of_the_embedded_roots() {
        let mut checked = 0;
        for root in [
            crate::trust::TrustedRoot::public_good().unwrap(),
            crate::trust::TrustedRoot::staging().unwrap(),
        ] {
            let authorities = root
                .certificate_authorities
                .iter()
                .chain(&root.timestamp_authorities);
            for cert in authorities.flat_map(|a| &a.chain) {
                let (_, x) = X509Certificate::from_der(&cert.der).unwrap();
                let alg = &x.signature_algorithm.algorithm;
                assert_eq!(oid_text(alg).unwrap(), alg.to_id_string());
                for ext in x.extensions() {
                    assert_eq!(oid_text(&ext.oid).unwrap(), ext.oid.to_id_string());
                    checked += 1;
                }
            }
        }
        assert!(checked >= 20, "only {checked} extensions compared");
    }

    /// A Fulcio-style leaf with `extra` extensions after Fulcio's own.
    fn leaf_with(extra: Vec<sigil_testkit::x509::Extension>) -> Vec<u8> {
        use sigil_testkit::fulcio::{FulcioCa, LeafRequest};
        use sigil_testkit::keys::KeyPair;
        use sigil_testkit::x509::Identity;
        let ca = FulcioCa::new(7, "dup", "https://fulcio.example", 0, 4_000_000_000);
        let key = KeyPair::p256(7, "dup-leaf");
        ca.issue(&LeafRequest {
            public_key: &key,
            identity: Identity::Email("dev@example.com".into()),
            oidc_issuer: Some("https://issuer.example".into()),
            not_before: 1_700_000_000,
            lifetime_secs: 600,
            github: None,
            scts: vec![],
            extra_extensions: extra,
        })
        .cert_der
    }

    const SECOND_ISSUER: &str = "https://other.example";

    #[test]
    fn a_repeated_extension_is_malformed_and_names_its_oid() {
        use sigil_testkit::fulcio::fulcio_utf8;
        // One 1.3.6.1.4.1.57264.1.8 extension parses; a second copy does not.
        assert!(Certificate::from_der(&leaf_with(vec![])).is_ok());
        let doubled = leaf_with(vec![fulcio_utf8(8, SECOND_ISSUER)]);
        match Certificate::from_der(&doubled) {
            Err(CertificateError::Malformed(m)) => {
                assert_eq!(m, "extension 1.3.6.1.4.1.57264.1.8 appears more than once")
            }
            other => panic!("expected a malformed certificate, got {other:?}"),
        }
    }

    #[test]
    fn an_oid_with_a_redundant_octet_cannot_hide_a_repeated_extension() {
        use sigil_testkit::fulcio::fulcio_utf8;
        let mut der = leaf_with(vec![fulcio_utf8(8, SECOND_ISSUER)]);
        // The second 1.3.6.1.4.1.57264.1.8: its OID, then an OCTET STRING
        // around a UTF8String. Re-encoded with a redundant 0x80 octet in the
        // 57264 arc and the value one byte shorter, so every length around
        // it stays right.
        let oid = [
            0x06, 0x0a, 0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xbf, 0x30, 0x01, 0x08,
        ];
        let at = der
            .windows(oid.len())
            .rposition(|w| w == oid)
            .expect("the second extension's OID");
        let len = u8::try_from(SECOND_ISSUER.len()).unwrap();
        let value_at = at + oid.len();
        assert_eq!(der[value_at..value_at + 4], [0x04, len + 2, 0x0c, len]);
        let old_end = value_at + 4 + usize::from(len);
        let mut patched = vec![
            0x06, 0x0b, 0x2b, 0x06, 0x01, 0x04, 0x01, 0x80, 0x83, 0xbf, 0x30, 0x01, 0x08,
        ];
        patched.extend_from_slice(&[0x04, len + 1, 0x0c, len - 1]);
        patched.extend_from_slice(&SECOND_ISSUER.as_bytes()[..usize::from(len) - 1]);
        assert_eq!(patched.len(), old_end - at);
        der.splice(at..old_end, patched);
        match Certificate::from_der(&der) {
            Err(CertificateError::Malformed(m)) => assert_eq!(
                m,
                "object identifier 2b060104018083bf300108 is not valid DER: arc with a redundant leading 0x80 octet"
            ),
            other => panic!("expected a malformed certificate, got {other:?}"),
        }
    }
}
