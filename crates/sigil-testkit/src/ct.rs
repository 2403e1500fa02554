//! A test Certificate Transparency log that issues RFC 6962 v1 SCTs for
//! precertificates, to be embedded in Fulcio-like leaf certificates.

use crate::der;
use crate::keys::KeyPair;
use crate::x509::{Extension, OID_SCT_LIST};

/// A CT log with a P-256 key; its log ID is SHA-256 of the DER SPKI.
#[derive(Clone, Debug)]
pub struct CtLog {
    /// The log's signing key.
    pub key: KeyPair,
    /// Base URL written into the trusted root.
    pub base_url: String,
}

impl CtLog {
    /// A CT log whose key is derived from `seed` and `label`.
    pub fn new(seed: u64, label: &str, base_url: &str) -> Self {
        CtLog {
            key: KeyPair::p256(seed, label),
            base_url: base_url.to_owned(),
        }
    }

    /// The RFC 6962 log ID.
    pub fn log_id(&self) -> [u8; 32] {
        self.key.spki_sha256()
    }

    /// The bytes an SCT signature covers for a precertificate entry
    /// (RFC 6962 §3.2 `digitally-signed` struct, precert_entry).
    pub fn signed_data(
        timestamp_ms: u64,
        issuer_key_hash: &[u8; 32],
        precert_tbs: &[u8],
        extensions: &[u8],
    ) -> Vec<u8> {
        let mut out = vec![0u8, 0u8]; // sct_version v1, signature_type certificate_timestamp
        out.extend(timestamp_ms.to_be_bytes());
        out.extend(1u16.to_be_bytes()); // entry_type precert_entry
        out.extend_from_slice(issuer_key_hash);
        out.extend(u24(precert_tbs.len()));
        out.extend_from_slice(precert_tbs);
        out.extend(u16_len(extensions.len()));
        out.extend_from_slice(extensions);
        out
    }

    /// Issues a serialized SCT over a precertificate TBS (the final TBS
    /// without the SCT list extension) and the issuer's key hash.
    pub fn sct(
        &self,
        timestamp_ms: u64,
        issuer_key_hash: &[u8; 32],
        precert_tbs: &[u8],
        extensions: &[u8],
    ) -> Vec<u8> {
        let signature = self.key.sign(&Self::signed_data(
            timestamp_ms,
            issuer_key_hash,
            precert_tbs,
            extensions,
        ));
        let mut out = vec![0u8]; // v1
        out.extend(self.log_id());
        out.extend(timestamp_ms.to_be_bytes());
        out.extend(u16_len(extensions.len()));
        out.extend_from_slice(extensions);
        out.push(4); // hash sha256
        out.push(3); // signature ecdsa
        out.extend(u16_len(signature.len()));
        out.extend(signature);
        out
    }
}

/// The SCT list extension (non-critical) holding the given serialized SCTs.
pub fn sct_list_extension(scts: &[Vec<u8>]) -> Extension {
    let mut list = Vec::new();
    for sct in scts {
        list.extend(u16_len(sct.len()));
        list.extend_from_slice(sct);
    }
    let mut tls = u16_len(list.len()).to_vec();
    tls.extend(list);
    Extension::new(OID_SCT_LIST, false, der::octet_string(&tls))
}

fn u24(len: usize) -> [u8; 3] {
    let b = (len as u32).to_be_bytes();
    [b[1], b[2], b[3]]
}

fn u16_len(len: usize) -> [u8; 2] {
    (len as u16).to_be_bytes()
}
