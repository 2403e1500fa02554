//! X.509 certificates built by hand: names, the extensions Fulcio and TSAs
//! use, TBSCertificate assembly and signing.

use sha2::{Digest as _, Sha256};

use crate::der;
use crate::keys::{KeyPair, pem};

/// OID of the embedded SCT list extension (RFC 6962).
pub const OID_SCT_LIST: &str = "1.3.6.1.4.1.11129.2.4.2";
/// OID of the id-kp-codeSigning extended key usage.
pub const OID_EKU_CODE_SIGNING: &str = "1.3.6.1.5.5.7.3.3";
/// OID of the id-kp-timeStamping extended key usage.
pub const OID_EKU_TIME_STAMPING: &str = "1.3.6.1.5.5.7.3.8";

/// A distinguished name of at most country, state, organization and common
/// name (Sigstore's CAs use O and CN; Notary Project identities need C, ST, O).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Name {
    /// `C=` (PrintableString).
    pub country: Option<String>,
    /// `ST=` (PrintableString).
    pub state: Option<String>,
    /// `O=` (PrintableString).
    pub organization: Option<String>,
    /// `CN=` (PrintableString).
    pub common_name: Option<String>,
}

impl Name {
    /// A name with both organization and common name.
    pub fn new(organization: &str, common_name: &str) -> Self {
        Name {
            organization: Some(organization.to_owned()),
            common_name: Some(common_name.to_owned()),
            ..Name::default()
        }
    }

    /// `C=country, ST=state, O=organization, CN=common_name`.
    pub fn full(country: &str, state: &str, organization: &str, common_name: &str) -> Self {
        Name {
            country: Some(country.to_owned()),
            state: Some(state.to_owned()),
            organization: Some(organization.to_owned()),
            common_name: Some(common_name.to_owned()),
        }
    }

    /// The empty name (Fulcio leaves have an empty subject).
    pub fn empty() -> Self {
        Name::default()
    }

    /// DER `Name` (RDNSequence, one attribute per RDN).
    pub fn to_der(&self) -> Vec<u8> {
        let mut rdns = Vec::new();
        for (oid, value) in [("2.5.4.6", &self.country), ("2.5.4.8", &self.state)] {
            if let Some(v) = value {
                rdns.push(der::set_of([der::seq([der::oid(oid), der::printable(v)])]));
            }
        }
        if let Some(o) = &self.organization {
            rdns.push(der::set_of([der::seq([
                der::oid("2.5.4.10"),
                der::printable(o),
            ])]));
        }
        if let Some(cn) = &self.common_name {
            rdns.push(der::set_of([der::seq([
                der::oid("2.5.4.3"),
                der::printable(cn),
            ])]));
        }
        der::seq(rdns)
    }
}

/// One certificate extension with its already encoded value (the content of `extnValue`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extension {
    /// Dotted OID.
    pub oid: String,
    /// Whether the extension is marked critical.
    pub critical: bool,
    /// The bytes wrapped by the `extnValue` OCTET STRING.
    pub value: Vec<u8>,
}

impl Extension {
    /// An extension from its parts.
    pub fn new(oid: &str, critical: bool, value: Vec<u8>) -> Self {
        Extension {
            oid: oid.to_owned(),
            critical,
            value,
        }
    }

    /// DER `Extension`.
    pub fn to_der(&self) -> Vec<u8> {
        let mut parts = vec![der::oid(&self.oid)];
        if self.critical {
            parts.push(der::boolean(true));
        }
        parts.push(der::octet_string(&self.value));
        der::seq(parts)
    }

    /// basicConstraints (critical); `path_len` only for CAs.
    pub fn basic_constraints(ca: bool, path_len: Option<u64>) -> Self {
        let mut inner = Vec::new();
        if ca {
            inner.push(der::boolean(true));
            if let Some(p) = path_len {
                inner.push(der::uint64(p));
            }
        }
        Extension::new("2.5.29.19", true, der::seq(inner))
    }

    /// keyUsage (critical) with the given bit numbers (0 digitalSignature, 5 keyCertSign, 6 cRLSign).
    pub fn key_usage(bits: &[u8]) -> Self {
        Extension::new("2.5.29.15", true, der::named_bits(bits))
    }

    /// extKeyUsage with the given purpose OIDs.
    pub fn ext_key_usage(critical: bool, oids: &[&str]) -> Self {
        Extension::new(
            "2.5.29.37",
            critical,
            der::seq(oids.iter().map(|o| der::oid(o))),
        )
    }

    /// subjectKeyIdentifier: the first 20 bytes of SHA-256 over the public key bits (RFC 7093 §2 method 1).
    pub fn subject_key_id(key: &KeyPair) -> Self {
        Extension::new("2.5.29.14", false, der::octet_string(&key_id(key)))
    }

    /// authorityKeyIdentifier naming the issuer's key identifier.
    pub fn authority_key_id(issuer: &KeyPair) -> Self {
        Extension::new(
            "2.5.29.35",
            false,
            der::seq([der::ctx_primitive(0, &key_id(issuer))]),
        )
    }

    /// subjectAltName (critical, as the subject is empty) holding one URI or email.
    pub fn subject_alt_name(identity: &Identity) -> Self {
        let general_name = match identity {
            Identity::Email(e) => der::ctx_primitive(1, e.as_bytes()),
            Identity::Uri(u) => der::ctx_primitive(6, u.as_bytes()),
        };
        Extension::new("2.5.29.17", true, der::seq([general_name]))
    }
}

/// The key identifier this crate uses for SKI/AKI.
pub fn key_id(key: &KeyPair) -> Vec<u8> {
    let digest = Sha256::digest(key.public_key_raw());
    digest.get(..20).unwrap_or(&digest[..]).to_vec()
}

/// A certificate's signing identity, carried in the SAN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// SAN URI, e.g. a GitHub workflow ref `https://github.com/o/r/.github/workflows/w.yml@refs/heads/main`.
    Uri(String),
    /// SAN rfc822Name, e.g. `alice@example.com`.
    Email(String),
}

impl Identity {
    /// The identity string as a verifier would compare it.
    pub fn as_str(&self) -> &str {
        match self {
            Identity::Uri(s) | Identity::Email(s) => s,
        }
    }
}

/// Everything that goes into a TBSCertificate.
#[derive(Clone, Debug)]
pub struct CertTemplate {
    /// Serial number as an unsigned big-endian magnitude (at most 20 bytes).
    pub serial: Vec<u8>,
    /// Issuer name.
    pub issuer: Name,
    /// Subject name.
    pub subject: Name,
    /// notBefore, Unix seconds.
    pub not_before: i64,
    /// notAfter, Unix seconds.
    pub not_after: i64,
    /// DER SubjectPublicKeyInfo of the subject.
    pub spki: Vec<u8>,
    /// Extensions, in order.
    pub extensions: Vec<Extension>,
}

impl CertTemplate {
    /// DER TBSCertificate (v3) to be signed by `issuer_key`.
    pub fn tbs_der(&self, issuer_key: &KeyPair) -> Vec<u8> {
        let mut parts = vec![
            der::ctx_constructed(0, &der::uint64(2)),
            der::uint(&self.serial),
            issuer_key.signature_algorithm_der(),
            self.issuer.to_der(),
            der::seq([
                der::x509_time(self.not_before),
                der::x509_time(self.not_after),
            ]),
            self.subject.to_der(),
            self.spki.clone(),
        ];
        if !self.extensions.is_empty() {
            let exts = der::seq(self.extensions.iter().map(Extension::to_der));
            parts.push(der::ctx_constructed(3, &exts));
        }
        der::seq(parts)
    }

    /// Signs the TBSCertificate with `issuer_key` and returns the DER certificate.
    pub fn sign(&self, issuer_key: &KeyPair) -> Vec<u8> {
        sign_tbs(&self.tbs_der(issuer_key), issuer_key)
    }
}

/// Wraps a DER TBSCertificate into a signed Certificate.
pub fn sign_tbs(tbs: &[u8], issuer_key: &KeyPair) -> Vec<u8> {
    let signature = issuer_key.sign(tbs);
    der::seq([
        tbs.to_vec(),
        issuer_key.signature_algorithm_der(),
        der::bit_string(&signature),
    ])
}

/// A serial number derived from a label (positive, 16 bytes, first byte below 0x80).
pub fn serial_from(seed: u64, label: &str) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"sigil-testkit/serial\0");
    h.update(seed.to_be_bytes());
    h.update(label.as_bytes());
    let d = h.finalize();
    let mut serial = d.get(..16).unwrap_or(&d[..]).to_vec();
    if let Some(first) = serial.first_mut() {
        *first = (*first & 0x7f) | 0x01;
    }
    serial
}

/// A certificate together with its key (for CA and TSA certificates).
#[derive(Clone, Debug)]
pub struct CertifiedKey {
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// The certificate's subject name.
    pub name: Name,
    /// The certified key.
    pub key: KeyPair,
    /// Serial number magnitude.
    pub serial: Vec<u8>,
}

impl CertifiedKey {
    /// The certificate as PEM.
    pub fn cert_pem(&self) -> String {
        pem("CERTIFICATE", &self.cert_der)
    }
}

/// Creates a self-signed CA certificate (basicConstraints CA, keyCertSign + cRLSign).
pub fn self_signed_ca(
    seed: u64,
    label: &str,
    key: KeyPair,
    name: Name,
    not_before: i64,
    not_after: i64,
) -> CertifiedKey {
    let serial = serial_from(seed, label);
    let template = CertTemplate {
        serial: serial.clone(),
        issuer: name.clone(),
        subject: name.clone(),
        not_before,
        not_after,
        spki: key.spki_der(),
        extensions: vec![
            Extension::key_usage(&[5, 6]),
            Extension::basic_constraints(true, Some(1)),
            Extension::subject_key_id(&key),
        ],
    };
    let cert_der = template.sign(&key);
    CertifiedKey {
        cert_der,
        name,
        key,
        serial,
    }
}
