//! Embedded Signed Certificate Timestamps (RFC 6962 §3.3): parsing the SCT
//! list a Fulcio leaf carries in extension 1.3.6.1.4.1.11129.2.4.2, rebuilding
//! the precertificate TBS the CT log actually signed, and checking each SCT
//! against the CT log keys of the trust root.
//!
//! This module also owns the tiny bounds-checked DER TLV reader/writer that
//! sigil uses where x509-parser does not expose what it needs (re-encoding a
//! TBSCertificate, reading Fulcio's DER string extensions).

use time::OffsetDateTime;

use crate::crypto::{HashAlgorithm, sha256};
use crate::trust::{TransparencyLog, TrustedRoot, format_rfc3339};
use crate::x509::{Certificate, OID_SCT_LIST, SignatureAlgorithm, verify_with_algorithm};

/// DER content bytes of the OID 1.3.6.1.4.1.11129.2.4.2 (embedded SCT list).
const SCT_OID_DER: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0xd6, 0x79, 0x02, 0x04, 0x02];

/// Largest TBSCertificate an SCT can cover: its length is a TLS `uint24`.
const MAX_TBS_LEN: usize = (1 << 24) - 1;

/// A successfully verified SCT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifiedSct {
    /// Index of the CT log that issued it in `TrustedRoot::ctlogs`.
    pub log: usize,
    /// The SCT's timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
}

/// Why no embedded SCT could be verified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SctError {
    /// The certificate has no embedded SCT list extension.
    #[error(
        "certificate {cert} has no embedded SCT (extension {OID_SCT_LIST}); it was not logged to \
         certificate transparency, so it is trusted only with the SCT check turned off: \
         `insecureIgnoreSCT: true` in the policy's keyless authority, or `--insecure-ignore-sct` \
         on the command line"
    )]
    Missing {
        /// Description of the certificate.
        cert: String,
    },
    /// The trust root lists no CT log, so no SCT can verify against it.
    #[error(
        "the trust root lists no certificate transparency log, so no SCT of certificate {cert} can \
         verify against it (a private Sigstore instance such as GitHub's logs no certificates); \
         trust its certificates without an SCT by turning the SCT check off: \
         `insecureIgnoreSCT: true` in the policy's keyless authority, or `--insecure-ignore-sct` \
         on the command line"
    )]
    NoCtLogs {
        /// Description of the certificate.
        cert: String,
    },
    /// The SCT extension or list is not well formed.
    #[error("embedded SCT list of certificate {cert} is malformed: {reason}")]
    Malformed {
        /// Description of the certificate.
        cert: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No SCT in the list names a CT log that the trust root knows.
    #[error(
        "no embedded SCT of certificate {cert} comes from a CT log in the trust root (SCT log IDs: \
         {log_ids}); use the trust root of the Sigstore instance that issued the certificate"
    )]
    UnknownLog {
        /// Description of the certificate.
        cert: String,
        /// Hex log IDs of the SCTs found.
        log_ids: String,
    },
    /// The SCT's timestamp lies outside the CT log key's `validFor`.
    #[error(
        "SCT from CT log {log} has timestamp {timestamp}, outside the log key's validity in the \
         trust root; the certificate was logged with a key that was not trusted at that time"
    )]
    LogKeyNotValid {
        /// The CT log's base URL.
        log: String,
        /// The SCT timestamp (RFC 3339).
        timestamp: String,
    },
    /// The SCT's version or algorithm pair is not supported, or the log key cannot be used.
    #[error("SCT from CT log {log} cannot be checked: {reason}")]
    Unsupported {
        /// The CT log's base URL (or hex log ID).
        log: String,
        /// What is unsupported.
        reason: String,
    },
    /// The SCT signature does not verify with the CT log key.
    #[error(
        "SCT signature from CT log {log} does not verify over certificate {cert}: {reason}; the \
         certificate or its SCT was altered, or the trust root holds the wrong CT log key"
    )]
    BadSignature {
        /// The CT log's base URL.
        log: String,
        /// Description of the certificate.
        cert: String,
        /// The signature failure.
        reason: String,
    },
}

impl SctError {
    /// How much a failure tells the user: when several SCTs fail, the one that
    /// got furthest (a trusted log whose signature did not verify) is reported.
    fn rank(&self) -> u8 {
        match self {
            Self::Missing { .. } | Self::NoCtLogs { .. } | Self::Malformed { .. } => 0,
            Self::UnknownLog { .. } => 1,
            Self::Unsupported { .. } => 2,
            Self::LogKeyNotValid { .. } => 3,
            Self::BadSignature { .. } => 4,
        }
    }
}

/// Verifies the embedded SCTs of `leaf`, issued by `issuer`, against the CT
/// logs of `root`. Succeeds with the first SCT from a trusted log whose
/// signature verifies and whose timestamp lies inside that log key's validity.
pub fn verify_embedded_scts(
    leaf: &Certificate,
    issuer: &Certificate,
    root: &TrustedRoot,
) -> Result<VerifiedSct, SctError> {
    let cert = describe(leaf);
    let malformed = |reason: String| SctError::Malformed {
        cert: cert.clone(),
        reason,
    };
    if root.ctlogs.is_empty() {
        return Err(SctError::NoCtLogs { cert });
    }
    let ext = leaf
        .extension(OID_SCT_LIST)
        .ok_or_else(|| SctError::Missing { cert: cert.clone() })?;
    let list = der_octet_string(&ext.value).map_err(|e| malformed(e.to_string()))?;
    let scts = parse_sct_list(list).map_err(|e| malformed(e.to_string()))?;

    // Only rebuild the precertificate when some SCT is from a known log: the
    // rebuild is the costly part and unknown logs fail regardless.
    let mut precert: Option<Vec<u8>> = None;
    let issuer_key_hash = sha256(&issuer.spki_der);
    let mut best: Option<SctError> = None;
    let keep = |e: SctError, best: &mut Option<SctError>| {
        if best.as_ref().is_none_or(|b| e.rank() > b.rank()) {
            *best = Some(e);
        }
    };

    for sct in &scts {
        if sct.version != 0 {
            keep(
                SctError::Unsupported {
                    log: "(unidentified log)".into(),
                    reason: format!("SCT version {} (only v1 is defined)", sct.version),
                },
                &mut best,
            );
            continue;
        }
        let logs: Vec<(usize, &TransparencyLog)> = root
            .ctlogs
            .iter()
            .enumerate()
            .filter(|(_, l)| l.log_id == sct.log_id)
            .collect();
        if logs.is_empty() {
            keep(
                SctError::UnknownLog {
                    cert: cert.clone(),
                    log_ids: scts
                        .iter()
                        .filter(|s| s.version == 0)
                        .map(|s| hex::encode(s.log_id))
                        .collect::<Vec<_>>()
                        .join(", "),
                },
                &mut best,
            );
            continue;
        }
        let tbs = match &precert {
            Some(t) => t,
            None => precert.insert(precert_tbs(&leaf.tbs).map_err(|e| malformed(e.to_string()))?),
        };
        for (index, log) in logs {
            match check_one(sct, log, tbs, &issuer_key_hash, &cert) {
                Ok(()) => {
                    return Ok(VerifiedSct {
                        log: index,
                        timestamp_ms: sct.timestamp_ms,
                    });
                }
                Err(e) => keep(e, &mut best),
            }
        }
    }
    Err(best.unwrap_or(SctError::Malformed {
        cert,
        reason: "the SCT list is empty".into(),
    }))
}

/// Checks one SCT against one candidate log.
fn check_one(
    sct: &Sct<'_>,
    log: &TransparencyLog,
    precert_tbs: &[u8],
    issuer_key_hash: &[u8; 32],
    cert: &str,
) -> Result<(), SctError> {
    let log_name = log.base_url.clone();
    let unsupported = |reason: String| SctError::Unsupported {
        log: log_name.clone(),
        reason,
    };
    let timestamp = i128::from(sct.timestamp_ms)
        .checked_mul(1_000_000)
        .and_then(|ns| OffsetDateTime::from_unix_timestamp_nanos(ns).ok())
        .ok_or_else(|| {
            unsupported(format!(
                "SCT timestamp {} ms is out of range",
                sct.timestamp_ms
            ))
        })?;
    if !log.valid_for.contains(timestamp) {
        return Err(SctError::LogKeyNotValid {
            log: log_name,
            timestamp: format_rfc3339(timestamp),
        });
    }
    let alg = sct_algorithm(sct.hash_alg, sct.sig_alg).ok_or_else(|| {
        unsupported(format!(
            "hash/signature algorithm pair ({}, {}) is not supported",
            sct.hash_alg, sct.sig_alg
        ))
    })?;
    let key = log
        .key
        .as_ref()
        .ok_or_else(|| unsupported(format!("log key `{}` is not supported", log.key_details)))?;
    let signed =
        signed_data(sct, precert_tbs, issuer_key_hash).map_err(|e| unsupported(e.to_string()))?;
    verify_with_algorithm(key, alg, &signed, sct.signature).map_err(|e| SctError::BadSignature {
        log: log_name,
        cert: cert.to_owned(),
        reason: e.to_string(),
    })
}

/// Maps the TLS `HashAlgorithm` and `SignatureAlgorithm` bytes (RFC 5246
/// §7.4.1.4.1) to a scheme sigil can verify; (8, 7) is TLS 1.3's ed25519
/// code point (RFC 8446), which Static CT logs may use.
fn sct_algorithm(hash: u8, sig: u8) -> Option<SignatureAlgorithm> {
    if (hash, sig) == (8, 7) {
        return Some(SignatureAlgorithm::Ed25519);
    }
    let hash = match hash {
        4 => HashAlgorithm::Sha256,
        5 => HashAlgorithm::Sha384,
        6 => HashAlgorithm::Sha512,
        _ => return None,
    };
    match sig {
        1 => Some(SignatureAlgorithm::RsaPkcs1(hash)),
        3 => Some(SignatureAlgorithm::Ecdsa(hash)),
        _ => None,
    }
}

/// The RFC 6962 §3.2 `digitally-signed` struct of a precert entry.
fn signed_data(
    sct: &Sct<'_>,
    precert_tbs: &[u8],
    issuer_key_hash: &[u8; 32],
) -> Result<Vec<u8>, DerError> {
    if precert_tbs.len() > MAX_TBS_LEN {
        return Err(DerError("precertificate TBS longer than 2^24-1 bytes"));
    }
    let ext_len =
        u16::try_from(sct.extensions.len()).map_err(|_| DerError("SCT extensions too long"))?;
    let tbs_len = u32::try_from(precert_tbs.len()).map_err(|_| DerError("TBS too long"))?;
    let mut out = Vec::with_capacity(precert_tbs.len() + sct.extensions.len() + 48);
    out.push(0); // sct_version v1
    out.push(0); // signature_type certificate_timestamp
    out.extend_from_slice(&sct.timestamp_ms.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes()); // entry_type precert_entry
    out.extend_from_slice(issuer_key_hash);
    out.extend_from_slice(tbs_len.to_be_bytes().get(1..).unwrap_or_default());
    out.extend_from_slice(precert_tbs);
    out.extend_from_slice(&ext_len.to_be_bytes());
    out.extend_from_slice(sct.extensions);
    Ok(out)
}

/// One SCT as serialised inside the list (RFC 6962 §3.2).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sct<'a> {
    version: u8,
    log_id: [u8; 32],
    timestamp_ms: u64,
    extensions: &'a [u8],
    hash_alg: u8,
    sig_alg: u8,
    signature: &'a [u8],
}

/// Parses a TLS-encoded `SignedCertificateTimestampList`.
fn parse_sct_list(input: &[u8]) -> Result<Vec<Sct<'_>>, DerError> {
    let mut outer = TlsReader(input);
    let mut list = TlsReader(outer.vec16()?);
    if !outer.0.is_empty() {
        return Err(DerError("trailing bytes after the SCT list"));
    }
    let mut out = Vec::new();
    while !list.0.is_empty() {
        let mut r = TlsReader(list.vec16()?);
        let version = r.u8()?;
        if version != 0 {
            // Later SCT versions may be laid out differently; keep only what
            // identifies them so the failure can be reported.
            out.push(Sct {
                version,
                log_id: [0; 32],
                timestamp_ms: 0,
                extensions: &[],
                hash_alg: 0,
                sig_alg: 0,
                signature: &[],
            });
            continue;
        }
        let log_id: [u8; 32] = r
            .take(32)?
            .try_into()
            .map_err(|_| DerError("SCT log ID is not 32 bytes"))?;
        let timestamp_ms = u64::from_be_bytes(
            r.take(8)?
                .try_into()
                .map_err(|_| DerError("SCT timestamp is not 8 bytes"))?,
        );
        let extensions = r.vec16()?;
        let hash_alg = r.u8()?;
        let sig_alg = r.u8()?;
        let signature = r.vec16()?;
        if !r.0.is_empty() {
            return Err(DerError("trailing bytes after an SCT"));
        }
        out.push(Sct {
            version,
            log_id,
            timestamp_ms,
            extensions,
            hash_alg,
            sig_alg,
            signature,
        });
    }
    if out.is_empty() {
        return Err(DerError("the SCT list is empty"));
    }
    Ok(out)
}

/// A bounds-checked reader over TLS presentation-language bytes.
struct TlsReader<'a>(&'a [u8]);

impl<'a> TlsReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DerError> {
        let head = self.0.get(..n).ok_or(DerError("truncated SCT data"))?;
        self.0 = self.0.get(n..).unwrap_or_default();
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, DerError> {
        self.take(1)?
            .first()
            .copied()
            .ok_or(DerError("truncated SCT data"))
    }

    /// An opaque vector with a `uint16` length prefix.
    fn vec16(&mut self) -> Result<&'a [u8], DerError> {
        let len = self.take(2)?;
        let len = u16::from_be_bytes(len.try_into().map_err(|_| DerError("truncated SCT data"))?);
        self.take(usize::from(len))
    }
}

/// Rebuilds the precertificate TBSCertificate a CT log signed (RFC 6962 §3.2):
/// the leaf's TBS with the SCT list extension removed, every enclosing DER
/// length recomputed, and all other bytes left untouched.
fn precert_tbs(tbs: &[u8]) -> Result<Vec<u8>, DerError> {
    let (outer, rest) = read_tlv(tbs)?;
    if outer.tag != TAG_SEQUENCE || !rest.is_empty() {
        return Err(DerError("TBSCertificate is not a single DER SEQUENCE"));
    }
    let mut body = Vec::with_capacity(tbs.len());
    let mut found = false;
    let mut fields = outer.content;
    while !fields.is_empty() {
        let (field, next) = read_tlv(fields)?;
        fields = next;
        if field.tag != TAG_EXTENSIONS {
            body.extend_from_slice(field.raw);
            continue;
        }
        let (seq, after) = read_tlv(field.content)?;
        if seq.tag != TAG_SEQUENCE || !after.is_empty() {
            return Err(DerError("certificate extensions are not a DER SEQUENCE"));
        }
        let mut kept = Vec::with_capacity(seq.content.len());
        let mut exts = seq.content;
        while !exts.is_empty() {
            let (ext, next) = read_tlv(exts)?;
            exts = next;
            let (oid, _) = read_tlv(ext.content)?;
            if ext.tag != TAG_SEQUENCE || oid.tag != TAG_OID {
                return Err(DerError(
                    "a certificate extension is not SEQUENCE { OID, ... }",
                ));
            }
            if oid.content == SCT_OID_DER {
                found = true;
            } else {
                kept.extend_from_slice(ext.raw);
            }
        }
        // An empty `[3] Extensions` is invalid DER (SIZE 1..MAX); a CA that
        // embedded only SCTs signed a precert without the field at all.
        if !kept.is_empty() {
            let mut seq_out = Vec::with_capacity(kept.len() + 4);
            write_tlv(&mut seq_out, TAG_SEQUENCE, &kept);
            write_tlv(&mut body, TAG_EXTENSIONS, &seq_out);
        }
    }
    if !found {
        return Err(DerError(
            "TBSCertificate has no SCT list extension to remove",
        ));
    }
    let mut out = Vec::with_capacity(body.len() + 4);
    write_tlv(&mut out, TAG_SEQUENCE, &body);
    Ok(out)
}

/// Unwraps a DER OCTET STRING that must be the whole input.
fn der_octet_string(input: &[u8]) -> Result<&[u8], DerError> {
    let (tlv, rest) = read_tlv(input)?;
    if tlv.tag != TAG_OCTET_STRING || !rest.is_empty() {
        return Err(DerError("extension value is not a single DER OCTET STRING"));
    }
    Ok(tlv.content)
}

/// Describes a certificate for messages; Fulcio leaves have an empty subject.
pub(crate) fn describe(cert: &Certificate) -> String {
    if cert.subject.is_empty() {
        format!(
            "with serial {} issued by `{}`",
            hex::encode(&cert.serial),
            cert.issuer
        )
    } else {
        format!("`{}`", cert.subject)
    }
}

/// DER tag of SEQUENCE.
pub(crate) const TAG_SEQUENCE: u8 = 0x30;
/// DER tag of OBJECT IDENTIFIER.
pub(crate) const TAG_OID: u8 = 0x06;
/// DER tag of OCTET STRING.
pub(crate) const TAG_OCTET_STRING: u8 = 0x04;
/// DER tag of UTF8String.
pub(crate) const TAG_UTF8_STRING: u8 = 0x0c;
/// DER tag of PrintableString.
pub(crate) const TAG_PRINTABLE_STRING: u8 = 0x13;
/// DER tag of IA5String.
pub(crate) const TAG_IA5_STRING: u8 = 0x16;
/// DER tag of `[0] EXPLICIT` (constructed, context-specific 0).
pub(crate) const TAG_EXPLICIT_0: u8 = 0xa0;
/// DER tag of the TBSCertificate `[3] EXPLICIT Extensions`.
const TAG_EXTENSIONS: u8 = 0xa3;

/// A malformed DER or TLS encoding; the text says what was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DerError(pub(crate) &'static str);

impl std::fmt::Display for DerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// One DER TLV, borrowed from its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tlv<'a> {
    /// The identifier octet (single-byte tags only).
    pub(crate) tag: u8,
    /// The value bytes.
    pub(crate) content: &'a [u8],
    /// Tag, length and value, exactly as encoded.
    pub(crate) raw: &'a [u8],
}

/// Reads one DER TLV from the front of `input`, returning it and the rest.
/// Rejects high tag numbers, indefinite and non-minimal lengths, and lengths
/// running past the input, so that re-encoding reproduces the signed bytes.
pub(crate) fn read_tlv(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), DerError> {
    let (&tag, rest) = input
        .split_first()
        .ok_or(DerError("truncated DER: no tag"))?;
    if tag & 0x1f == 0x1f {
        return Err(DerError("DER high tag numbers are not supported"));
    }
    let (&first, mut rest) = rest
        .split_first()
        .ok_or(DerError("truncated DER: no length"))?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 {
            return Err(DerError("indefinite DER length"));
        }
        if n > 4 {
            return Err(DerError("DER length longer than 4 bytes"));
        }
        let bytes = rest.get(..n).ok_or(DerError("truncated DER length"))?;
        rest = rest.get(n..).unwrap_or_default();
        if bytes.first() == Some(&0) {
            return Err(DerError("non-minimal DER length"));
        }
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        if len < 0x80 {
            return Err(DerError("non-minimal DER length"));
        }
        len
    };
    let content = rest
        .get(..len)
        .ok_or(DerError("DER value runs past its input"))?;
    let header = input.len() - rest.len();
    let raw = input
        .get(..header + len)
        .ok_or(DerError("DER value runs past its input"))?;
    Ok((
        Tlv { tag, content, raw },
        rest.get(len..).unwrap_or_default(),
    ))
}

/// Appends the DER encoding of `tag` + minimal length + `content`.
pub(crate) fn write_tlv(out: &mut Vec<u8>, tag: u8, content: &[u8]) {
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        let significant = bytes.get(skip..).unwrap_or_default();
        out.push(0x80 | significant.len() as u8);
        out.extend_from_slice(significant);
    }
    out.extend_from_slice(content);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::test_support::{at_issuance, case_leaf_and_root, chain_issuer};
    use proptest::prelude::*;

    fn verify_case(case: &str) -> Result<VerifiedSct, SctError> {
        let (certs, root) = case_leaf_and_root(case);
        let leaf = certs.first().unwrap();
        let issuer = chain_issuer(leaf, &certs, &root, at_issuance(leaf));
        verify_embedded_scts(leaf, &issuer, &root)
    }

    #[test]
    fn happy_path_scts_verify_against_the_public_good_ct_log() {
        for case in [
            "happy-path-v0.1",
            "happy-path-v0.2",
            "happy-path-v0.3",
            "happy-path-intoto-in-dsse-v3",
        ] {
            let r = verify_case(case);
            let sct = r.unwrap_or_else(|e| panic!("{case}: {e}"));
            let root = TrustedRoot::public_good().unwrap();
            assert_eq!(
                root.ctlogs[sct.log].base_url, "https://ctfe.sigstore.dev/2022",
                "{case}"
            );
        }
    }

    #[test]
    fn happy_path_v0_3_sct_timestamp_is_read() {
        let r = verify_case("happy-path-v0.3");
        let sct = r.unwrap();
        // 2024-03-19T17:26:26.470Z.
        assert_eq!(sct.timestamp_ms, 0x0000_018e_57c0_07a6);
    }

    #[test]
    fn an_sct_with_extensions_verifies() {
        let r = verify_case("bundle-with-sct-with-extensions");
        let sct = r.unwrap();
        assert_eq!(sct.log, 0);
    }

    #[test]
    fn a_trust_root_with_the_wrong_ct_key_fails() {
        let r = verify_case("invalid-ct-key_fail");
        let err = r.unwrap_err();
        assert!(
            matches!(
                err,
                SctError::UnknownLog { .. } | SctError::BadSignature { .. }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_flipped_sct_signature_byte_fails() {
        let (certs, root) = case_leaf_and_root("happy-path-v0.3");
        let mut leaf = certs.first().unwrap().clone();
        let issuer = chain_issuer(&leaf, &certs, &root, at_issuance(&leaf));
        let ext = leaf
            .extensions
            .iter_mut()
            .find(|e| e.oid == OID_SCT_LIST)
            .unwrap();
        // The last byte of the list is the last byte of the ECDSA `s` value.
        *ext.value.last_mut().unwrap() ^= 0x01;
        let err = verify_embedded_scts(&leaf, &issuer, &root).unwrap_err();
        assert!(matches!(err, SctError::BadSignature { .. }), "{err}");
    }

    #[test]
    fn a_flipped_tbs_byte_fails_the_sct() {
        let (certs, root) = case_leaf_and_root("happy-path-v0.3");
        let mut der = certs.first().unwrap().der.clone();
        // First byte of the serial number: 30 82 LL LL 30 82 LL LL A0 03 02 01 02 02 14 <serial>.
        der[15] ^= 0x01;
        let leaf = Certificate::from_der(&der).unwrap();
        let issuer = root.certificate_authorities[1].chain[0].clone();
        let err = verify_embedded_scts(&leaf, &issuer, &root).unwrap_err();
        assert!(matches!(err, SctError::BadSignature { .. }), "{err}");
    }

    #[test]
    fn a_wrong_issuer_key_fails_the_sct() {
        let (certs, root) = case_leaf_and_root("happy-path-v0.3");
        let wrong_issuer = root.certificate_authorities[1].chain[1].clone();
        let err = verify_embedded_scts(&certs[0], &wrong_issuer, &root).unwrap_err();
        assert!(matches!(err, SctError::BadSignature { .. }), "{err}");
    }

    #[test]
    fn an_sct_outside_the_log_key_validity_fails() {
        let (certs, mut root) = case_leaf_and_root("happy-path-v0.3");
        let issuer = root.certificate_authorities[1].chain[0].clone();
        for log in &mut root.ctlogs {
            log.valid_for.end = crate::trust::parse_rfc3339("2024-03-19T17:26:26Z");
        }
        let err = verify_embedded_scts(&certs[0], &issuer, &root).unwrap_err();
        assert!(matches!(err, SctError::LogKeyNotValid { .. }), "{err}");
        assert!(err.to_string().contains("2024-03-19T17:26:26.47Z"), "{err}");
    }

    #[test]
    fn a_certificate_without_scts_is_missing_not_malformed() {
        let root = TrustedRoot::public_good().unwrap();
        let ca = &root.certificate_authorities[1].chain;
        let err = verify_embedded_scts(&ca[0], &ca[1], &root).unwrap_err();
        assert!(matches!(err, SctError::Missing { .. }), "{err}");
    }

    #[test]
    fn a_missing_sct_names_the_policy_field_and_the_command_line_flag() {
        let root = TrustedRoot::public_good().unwrap();
        let ca = &root.certificate_authorities[1].chain;
        let err = verify_embedded_scts(&ca[0], &ca[1], &root).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`insecureIgnoreSCT: true`"), "{text}");
        assert!(text.contains("`--insecure-ignore-sct`"), "{text}");
    }

    #[test]
    fn a_trust_root_without_ct_logs_says_no_sct_can_verify_even_for_a_logged_certificate() {
        let (certs, mut root) = case_leaf_and_root("happy-path-v0.3");
        let issuer = root.certificate_authorities[1].chain[0].clone();
        root.ctlogs.clear();
        let err = verify_embedded_scts(&certs[0], &issuer, &root).unwrap_err();
        assert!(matches!(err, SctError::NoCtLogs { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("the trust root lists no certificate transparency log"),
            "{text}"
        );
        assert!(text.contains("`--insecure-ignore-sct`"), "{text}");
    }

    #[test]
    fn the_precert_tbs_drops_only_the_sct_extension() {
        let (certs, _) = case_leaf_and_root("happy-path-v0.3");
        let leaf = &certs[0];
        let pre = precert_tbs(&leaf.tbs).unwrap();
        let ext_len = leaf.extension(OID_SCT_LIST).unwrap().value.len();
        assert!(pre.len() < leaf.tbs.len() - ext_len);
        let (rest, parsed) =
            <x509_parser::certificate::TbsCertificate<'_> as x509_parser::prelude::FromDer<
                '_,
                x509_parser::error::X509Error,
            >>::from_der(&pre)
            .unwrap();
        assert!(rest.is_empty());
        let oids: Vec<String> = parsed
            .extensions()
            .iter()
            .map(|e| e.oid.to_id_string())
            .collect();
        assert!(!oids.iter().any(|o| o == OID_SCT_LIST));
        assert_eq!(oids.len(), leaf.extensions.len() - 1);
        assert!(precert_tbs(&pre).is_err(), "no SCT left to remove");
    }

    #[test]
    fn der_reader_rejects_bad_lengths() {
        assert!(read_tlv(&[]).is_err());
        assert!(read_tlv(&[0x30]).is_err());
        assert!(read_tlv(&[0x30, 0x80, 0x00, 0x00]).is_err(), "indefinite");
        assert!(
            read_tlv(&[0x30, 0x81, 0x05, 1, 2, 3, 4, 5]).is_err(),
            "non-minimal"
        );
        assert!(read_tlv(&[0x30, 0x82, 0x00, 0x81]).is_err(), "leading zero");
        assert!(read_tlv(&[0x30, 0x03, 0x01]).is_err(), "runs past input");
        assert!(read_tlv(&[0x1f, 0x01, 0x00]).is_err(), "high tag");
        let (tlv, rest) = read_tlv(&[0x04, 0x01, 0xaa, 0xbb]).unwrap();
        assert_eq!(
            (tlv.tag, tlv.content, tlv.raw, rest),
            (4, &[0xaa][..], &[4, 1, 0xaa][..], &[0xbb][..])
        );
    }

    #[test]
    fn der_writer_round_trips_long_lengths() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let content = vec![7u8; len];
            let mut out = Vec::new();
            write_tlv(&mut out, 0x04, &content);
            let (tlv, rest) = read_tlv(&out).unwrap();
            assert!(rest.is_empty());
            assert_eq!(tlv.content.len(), len);
            assert_eq!(tlv.raw, &out[..]);
        }
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_sct_list(&bytes);
            let _ = precert_tbs(&bytes);
            let _ = read_tlv(&bytes);
        }

        #[test]
        fn truncated_sct_lists_are_errors(cut in 0usize..200) {
            let (certs, _) = case_leaf_and_root("happy-path-v0.3");
            let list = der_octet_string(&certs[0].extension(OID_SCT_LIST).unwrap().value).unwrap().to_vec();
            let cut = cut.min(list.len().saturating_sub(1));
            prop_assert!(parse_sct_list(&list[..cut]).is_err());
        }
    }
}
