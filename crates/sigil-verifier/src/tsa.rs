//! RFC 3161 timestamps: parsing a `TimeStampResp` or bare `TimeStampToken`
//! (CMS SignedData over a TSTInfo, RFC 5652 / RFC 5816) and deciding whether
//! one of the trust root's timestamp authorities vouches for its `genTime`.
//!
//! Embedded certificates are only ever candidates for the signer: trust comes
//! solely from `TrustedRoot::timestamp_authorities`. Every validity check is
//! made at `genTime`, never at the current time, because a timestamp proves
//! something about the moment it was issued (an expired TSA chain does not
//! invalidate timestamps issued while it was valid).

use std::borrow::Cow;
use std::collections::HashSet;

use time::OffsetDateTime;

use crate::crypto::HashAlgorithm;
use crate::der::{self, DerError, Tlv};
use crate::trust::{CertificateAuthority, TrustedRoot, ValidFor};
use crate::x509::{Certificate, OID_EKU_TIME_STAMPING, SignatureAlgorithm, verify_with_algorithm};

/// Largest token sigil parses; real tokens are 0.5–6 KiB.
const MAX_TOKEN_LEN: usize = 64 * 1024;
/// Most embedded certificates sigil parses from one token.
const MAX_EMBEDDED_CERTS: usize = 16;

const OID_SIGNED_DATA: &str = "1.2.840.113549.1.7.2";
const OID_TST_INFO: &str = "1.2.840.113549.1.9.16.1.4";
const OID_CONTENT_TYPE: &str = "1.2.840.113549.1.9.3";
const OID_MESSAGE_DIGEST: &str = "1.2.840.113549.1.9.4";
const OID_SIGNING_CERTIFICATE: &str = "1.2.840.113549.1.9.16.2.12";
const OID_SIGNING_CERTIFICATE_V2: &str = "1.2.840.113549.1.9.16.2.47";
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_RSA_ENCRYPTION: &str = "1.2.840.113549.1.1.1";
const OID_SHA1: &str = "1.3.14.3.2.26";
const OID_EXTENDED_KEY_USAGE: &str = "2.5.29.37";

/// A timestamp that verified against the trust root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifiedTimestamp {
    /// The token's `genTime`.
    pub time: OffsetDateTime,
    /// Index of the vouching authority in `TrustedRoot::timestamp_authorities`.
    pub authority: usize,
}

/// Why an RFC 3161 timestamp did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimestampError {
    /// The bytes are not a DER TimeStampResp or TimeStampToken of the RFC 3161 shape.
    #[error(
        "RFC 3161 timestamp is malformed in {what}: {detail}; the bundle's timestamp is corrupt or not an RFC 3161 token"
    )]
    Malformed {
        /// Which structure failed to parse.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The TimeStampResp carries a status other than granted / grantedWithMods.
    #[error(
        "RFC 3161 timestamp response has status {status} (not granted); request a new timestamp from the TSA"
    )]
    NotGranted {
        /// The PKIStatus value.
        status: u64,
    },
    /// An algorithm in the token is not one sigil supports.
    #[error(
        "RFC 3161 timestamp uses unsupported {what} `{oid}`; sigil supports SHA-256/384/512 with ECDSA, RSA PKCS#1 v1.5 or Ed25519"
    )]
    UnsupportedAlgorithm {
        /// Which algorithm slot.
        what: &'static str,
        /// Its dotted OID.
        oid: String,
    },
    /// The token's messageImprint is not the hash of the bundle's signature.
    #[error(
        "RFC 3161 timestamp does not cover this signature: its {algorithm} messageImprint differs from the hash of the bundle's signature bytes; the timestamp belongs to another signature"
    )]
    WrongImprint {
        /// The imprint's hash algorithm.
        algorithm: &'static str,
    },
    /// The signed attributes do not bind the TSTInfo (content-type or message-digest mismatch).
    #[error(
        "RFC 3161 timestamp's signed attributes do not match its TSTInfo: {detail}; the token was altered after signing"
    )]
    ContentMismatch {
        /// Which binding failed.
        detail: String,
    },
    /// The trust root has no timestamp authorities.
    #[error(
        "the trust root has no timestamp authorities, so no RFC 3161 timestamp can be verified; add the TSA to the trust root"
    )]
    NoAuthorities,
    /// No trust-root timestamp authority vouches for the token's signer.
    #[error(
        "RFC 3161 timestamp signer is not trusted: {detail}; only TSAs listed in the trust root are accepted"
    )]
    UntrustedSigner {
        /// Why each candidate failed to anchor.
        detail: String,
    },
    /// The signing-certificate (ESSCertID / ESSCertIDv2) attribute names another certificate.
    #[error(
        "RFC 3161 timestamp's signing-certificate attribute does not match certificate `{subject}`: {detail}"
    )]
    SigningCertificateMismatch {
        /// Subject of the signer certificate checked.
        subject: String,
        /// What differs.
        detail: String,
    },
    /// A TSA certificate lacks the key usage a timestamp signer needs.
    #[error("TSA certificate `{subject}` may not sign timestamps: {detail}")]
    KeyUsage {
        /// Subject of the offending certificate.
        subject: String,
        /// What is missing or wrong.
        detail: String,
    },
    /// The CMS signature over the signed attributes does not verify with the signer's key.
    #[error("RFC 3161 timestamp signature by `{subject}` does not verify: {detail}")]
    BadSignature {
        /// Subject of the signer certificate.
        subject: String,
        /// The verifier's reason.
        detail: String,
    },
    /// `genTime` lies outside a certificate's validity or the authority's `validFor`.
    #[error(
        "RFC 3161 timestamp time {time} is outside the validity of {what} ({window}); the TSA was not trusted at that time"
    )]
    OutsideValidity {
        /// The token's genTime.
        time: OffsetDateTime,
        /// The closed interval it had to fall in.
        window: Window,
        /// Whose window (a certificate or the trust-root authority).
        what: String,
    },
}

/// A closed validity interval shown in [`TimestampError::OutsideValidity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window(pub ValidFor);

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.start {
            Some(s) => write!(f, "{s}")?,
            None => f.write_str("never")?,
        }
        f.write_str(" .. ")?;
        match self.0.end {
            Some(e) => write!(f, "{e}"),
            None => f.write_str("open"),
        }
    }
}

impl TimestampError {
    /// A stable, machine-readable reason (for metrics and denial reasons).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed { .. } => "timestamp_malformed",
            Self::NotGranted { .. } => "timestamp_not_granted",
            Self::UnsupportedAlgorithm { .. } => "timestamp_unsupported_algorithm",
            Self::WrongImprint { .. } => "timestamp_wrong_imprint",
            Self::ContentMismatch { .. } => "timestamp_content_mismatch",
            Self::NoAuthorities => "timestamp_no_authorities",
            Self::UntrustedSigner { .. } => "timestamp_untrusted_signer",
            Self::SigningCertificateMismatch { .. } => "timestamp_signing_certificate_mismatch",
            Self::KeyUsage { .. } => "timestamp_key_usage",
            Self::BadSignature { .. } => "timestamp_bad_signature",
            Self::OutsideValidity { .. } => "timestamp_outside_validity",
        }
    }

    /// How far verification got before this error, so that the failure
    /// reported across several authorities is the most informative one.
    fn progress(&self) -> u8 {
        match self {
            Self::OutsideValidity { .. } => 6,
            Self::BadSignature { .. } => 5,
            Self::SigningCertificateMismatch { .. } => 4,
            Self::KeyUsage { .. } => 3,
            Self::UnsupportedAlgorithm { .. } => 2,
            Self::UntrustedSigner { .. } => 1,
            _ => 0,
        }
    }
}

fn malformed(what: &'static str) -> impl Fn(DerError) -> TimestampError {
    move |e| TimestampError::Malformed {
        what,
        detail: e.to_string(),
    }
}

fn malformed_msg(what: &'static str, detail: impl Into<String>) -> TimestampError {
    TimestampError::Malformed {
        what,
        detail: detail.into(),
    }
}

/// How the SignerInfo names its certificate.
#[derive(Debug, Clone, Copy)]
enum SignerId<'a> {
    /// Issuer Name DER and serial number contents.
    IssuerSerial { issuer: &'a [u8], serial: &'a [u8] },
    /// Subject key identifier.
    KeyId(&'a [u8]),
}

impl SignerId<'_> {
    fn matches(&self, cert: &Certificate) -> bool {
        match self {
            Self::IssuerSerial { issuer, serial } => {
                cert.issuer_der == *issuer && cert.serial == *serial
            }
            Self::KeyId(id) => cert.subject_key_id.as_deref() == Some(*id),
        }
    }
}

/// One ESSCertID / ESSCertIDv2 naming the signing certificate.
#[derive(Debug, Clone, Copy)]
struct EssCertId<'a> {
    /// The hash over the certificate DER; `None` for SHA-1, which sigil does
    /// not compute (it carries no SHA-1), so only `issuer_serial` binds then.
    hash: Option<HashAlgorithm>,
    cert_hash: &'a [u8],
    /// Issuer Name DER and serial contents, when the IssuerSerial is present.
    issuer_serial: Option<(&'a [u8], &'a [u8])>,
}

/// The parts of a token that verification reads.
struct Token<'a> {
    gen_time: OffsetDateTime,
    imprint_hash: HashAlgorithm,
    hashed_message: &'a [u8],
    /// DER of the TSTInfo (the eContent octets the message-digest covers).
    tst_info: &'a [u8],
    /// DER of each embedded X.509 certificate, in token order.
    certificates: Vec<&'a [u8]>,
    sid: SignerId<'a>,
    digest: HashAlgorithm,
    /// The signed attributes as encoded (`[0] IMPLICIT` tag included).
    signed_attrs: &'a [u8],
    content_type: String,
    message_digest: &'a [u8],
    ess: Vec<EssCertId<'a>>,
    signature_algorithm: SignatureAlgorithm,
    signature: &'a [u8],
}

/// Verifies an RFC 3161 timestamp over `signed_data` (the bundle's signature
/// bytes) against the trust root's timestamp authorities.
///
/// `token` is a DER TimeStampResp or a bare TimeStampToken (ContentInfo).
/// Every authority is tried; on failure the most specific error is returned.
pub fn verify_rfc3161(
    token: &[u8],
    signed_data: &[u8],
    root: &TrustedRoot,
) -> Result<VerifiedTimestamp, TimestampError> {
    let tok = parse_token(token)?;
    let embedded = embedded_certificates(&tok, root)?;
    check_binding(&tok, signed_data)?;

    let mut best: Option<TimestampError> = None;
    for (index, authority) in root.timestamp_authorities.iter().enumerate() {
        match verify_with_authority(&tok, &embedded, authority) {
            Ok(()) => {
                return Ok(VerifiedTimestamp {
                    time: tok.gen_time,
                    authority: index,
                });
            }
            Err(e) => keep_most_specific(&mut best, e),
        }
    }
    Err(best.unwrap_or(TimestampError::NoAuthorities))
}

/// A timestamp whose signer chains to one of a set of trusted roots.
#[derive(Debug, Clone)]
pub struct AnchoredTimestamp {
    /// The token's `genTime`.
    pub time: OffsetDateTime,
    /// The TSA path that verified: the signing certificate first, the
    /// trusted root last (one certificate when the root signed itself).
    pub chain: Vec<Certificate>,
}

/// Verifies an RFC 3161 timestamp over `signed_data` against trusted TSA
/// root certificates, the way a Notary Project trust store of type `tsa`
/// holds them: the signer may chain to a root through intermediates the
/// token carries (each link verified; an embedded certificate adds no trust
/// of its own, it only completes the path to a root). Every certificate of
/// the path must be valid at `genTime`, and the signer must carry the
/// RFC 3161 timeStamping key usage, as [`verify_rfc3161`] requires.
pub fn verify_rfc3161_to_roots(
    token: &[u8],
    signed_data: &[u8],
    roots: &[Certificate],
) -> Result<AnchoredTimestamp, TimestampError> {
    let tok = parse_token(token)?;
    let embedded: Vec<Certificate> = tok
        .certificates
        .iter()
        .map(|der| {
            Certificate::from_der(der).map_err(|e| malformed_msg("certificates", e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    check_binding(&tok, signed_data)?;
    if roots.is_empty() {
        return Err(TimestampError::NoAuthorities);
    }
    let signers: Vec<&Certificate> = embedded
        .iter()
        .chain(roots.iter())
        .filter(|c| tok.sid.matches(c))
        .collect();
    if signers.is_empty() {
        return Err(TimestampError::UntrustedSigner {
            detail: "no certificate in the token or among the trusted TSA roots matches the \
                     token's signer identifier"
                .into(),
        });
    }
    let mut best: Option<TimestampError> = None;
    for signer in signers {
        for root in roots {
            let path = match path_to_root(signer, &embedded, root) {
                Ok(path) => path,
                Err(e) => {
                    keep_most_specific(&mut best, e);
                    continue;
                }
            };
            let authority = CertificateAuthority {
                uri: String::new(),
                name: root.subject.clone(),
                chain: path.iter().skip(1).map(|c| (*c).clone()).collect(),
                valid_for: ValidFor {
                    start: Some(root.not_before),
                    end: Some(root.not_after),
                },
            };
            let authority = if authority.chain.is_empty() {
                CertificateAuthority {
                    chain: vec![root.clone()],
                    ..authority
                }
            } else {
                authority
            };
            match verify_candidate(&tok, signer, &authority) {
                Ok(()) => {
                    return Ok(AnchoredTimestamp {
                        time: tok.gen_time,
                        chain: path.into_iter().cloned().collect(),
                    });
                }
                Err(e) => keep_most_specific(&mut best, e),
            }
        }
    }
    Err(best.unwrap_or(TimestampError::NoAuthorities))
}

/// The path from `signer` up to `root` through `embedded` CA certificates,
/// each link's signature checked; `signer` itself when it is the root.
fn path_to_root<'c>(
    signer: &'c Certificate,
    embedded: &'c [Certificate],
    root: &'c Certificate,
) -> Result<Vec<&'c Certificate>, TimestampError> {
    let mut path = vec![signer];
    let mut current = signer;
    for _ in 0..=MAX_EMBEDDED_CERTS {
        if current.der == root.der {
            return Ok(path);
        }
        if current.verify_issued_by(root).is_ok() {
            path.push(root);
            return Ok(path);
        }
        let next = embedded.iter().find(|c| {
            c.is_ca && !path.iter().any(|p| p.der == c.der) && current.verify_issued_by(c).is_ok()
        });
        match next {
            Some(issuer) => {
                path.push(issuer);
                current = issuer;
            }
            None => break,
        }
    }
    Err(TimestampError::UntrustedSigner {
        detail: format!(
            "certificate `{}` (issuer `{}`) does not chain to trusted TSA root `{}`",
            signer.subject, signer.issuer, root.subject
        ),
    })
}

/// Checks that the token covers `signed_data` and that its signed
/// attributes bind its TSTInfo.
fn check_binding(tok: &Token<'_>, signed_data: &[u8]) -> Result<(), TimestampError> {
    let imprint = tok.imprint_hash.digest(signed_data);
    if imprint != tok.hashed_message {
        return Err(TimestampError::WrongImprint {
            algorithm: tok.imprint_hash.name(),
        });
    }
    if tok.content_type != OID_TST_INFO {
        return Err(TimestampError::ContentMismatch {
            detail: format!(
                "content-type attribute is `{}`, not id-ct-TSTInfo",
                tok.content_type
            ),
        });
    }
    if tok.digest.digest(tok.tst_info) != tok.message_digest {
        return Err(TimestampError::ContentMismatch {
            detail: format!(
                "message-digest attribute is not the {} of the TSTInfo",
                tok.digest.name()
            ),
        });
    }
    Ok(())
}

/// The token's embedded certificates, parsed. One byte-equal to a trust-root
/// TSA certificate (what Sigstore's TSA embeds) is that certificate, already
/// parsed; any other is parsed here, and a malformed one fails the token.
fn embedded_certificates<'r>(
    tok: &Token<'_>,
    root: &'r TrustedRoot,
) -> Result<Vec<Cow<'r, Certificate>>, TimestampError> {
    tok.certificates
        .iter()
        .map(|&der| {
            let known = root
                .timestamp_authorities
                .iter()
                .flat_map(|a| a.chain.iter())
                .find(|c| c.der == der);
            match known {
                Some(cert) => Ok(Cow::Borrowed(cert)),
                None => Certificate::from_der(der)
                    .map(Cow::Owned)
                    .map_err(|e| malformed_msg("certificates", e.to_string())),
            }
        })
        .collect()
}

fn keep_most_specific(best: &mut Option<TimestampError>, e: TimestampError) {
    if best.as_ref().is_none_or(|b| e.progress() > b.progress()) {
        *best = Some(e);
    }
}

fn verify_with_authority(
    tok: &Token<'_>,
    embedded: &[Cow<'_, Certificate>],
    authority: &CertificateAuthority,
) -> Result<(), TimestampError> {
    // Candidates: embedded certificates first (they are what the TSA says it
    // used), then the authority's own certificates; duplicates by DER once.
    let mut candidates: Vec<&Certificate> = Vec::new();
    for cert in embedded
        .iter()
        .map(AsRef::as_ref)
        .chain(authority.chain.iter())
    {
        if tok.sid.matches(cert) && !candidates.iter().any(|c| c.der == cert.der) {
            candidates.push(cert);
        }
    }
    if candidates.is_empty() {
        return Err(TimestampError::UntrustedSigner {
            detail: format!(
                "no certificate in the token or in trust-root TSA `{}` matches the token's signer identifier",
                authority_name(authority)
            ),
        });
    }
    let mut best = None;
    for cert in candidates {
        match verify_candidate(tok, cert, authority) {
            Ok(()) => return Ok(()),
            Err(e) => keep_most_specific(&mut best, e),
        }
    }
    Err(best.unwrap_or(TimestampError::NoAuthorities))
}

fn authority_name(authority: &CertificateAuthority) -> &str {
    if authority.name.is_empty() {
        &authority.uri
    } else {
        &authority.name
    }
}

fn verify_candidate(
    tok: &Token<'_>,
    signer: &Certificate,
    authority: &CertificateAuthority,
) -> Result<(), TimestampError> {
    let path = anchor(signer, authority)?;
    check_signing_certificate(tok, signer)?;
    check_key_usage(&path)?;

    let key = signer
        .public_key
        .as_ref()
        .ok_or_else(|| TimestampError::UnsupportedAlgorithm {
            what: "TSA certificate key",
            oid: format!("in certificate `{}`", signer.subject),
        })?;
    // The signature covers the DER of the SET OF attributes: the same bytes
    // with the universal SET tag instead of the [0] IMPLICIT tag.
    let mut signed = tok.signed_attrs.to_vec();
    if let Some(tag) = signed.first_mut() {
        *tag = der::SET;
    }
    verify_with_algorithm(key, tok.signature_algorithm, &signed, tok.signature).map_err(|e| {
        TimestampError::BadSignature {
            subject: signer.subject.clone(),
            detail: e.to_string(),
        }
    })?;

    for cert in &path {
        if !cert.is_valid_at(tok.gen_time) {
            return Err(TimestampError::OutsideValidity {
                time: tok.gen_time,
                window: Window(ValidFor {
                    start: Some(cert.not_before),
                    end: Some(cert.not_after),
                }),
                what: format!("TSA certificate `{}`", cert.subject),
            });
        }
    }
    if !authority.valid_for.contains(tok.gen_time) {
        return Err(TimestampError::OutsideValidity {
            time: tok.gen_time,
            window: Window(authority.valid_for),
            what: format!(
                "trust-root timestamp authority `{}` (validFor)",
                authority_name(authority)
            ),
        });
    }
    Ok(())
}

/// The path from `signer` to the authority's root, every link verified. The
/// signer must be one of the authority's certificates (byte-equal) or be
/// issued by one of them; an embedded certificate is never an issuer.
fn anchor<'c>(
    signer: &'c Certificate,
    authority: &'c CertificateAuthority,
) -> Result<Vec<&'c Certificate>, TimestampError> {
    let chain = &authority.chain;
    let untrusted = |detail: String| TimestampError::UntrustedSigner { detail };
    let mut path: Vec<&Certificate> = Vec::with_capacity(chain.len() + 1);
    let trusted_from = match chain.iter().position(|c| c.der == signer.der) {
        Some(i) => i,
        None => {
            let issuer = chain
                .iter()
                .position(|c| c.is_ca && signer.verify_issued_by(c).is_ok())
                .ok_or_else(|| {
                    untrusted(format!(
                        "certificate `{}` (issuer `{}`) is neither in nor issued by trust-root TSA `{}`",
                        signer.subject,
                        signer.issuer,
                        authority_name(authority)
                    ))
                })?;
            path.push(signer);
            issuer
        }
    };
    let trusted: Vec<&Certificate> = chain.iter().skip(trusted_from).collect();
    for pair in trusted.windows(2) {
        let [child, parent] = pair else { continue };
        if !parent.is_ca {
            return Err(untrusted(format!(
                "trust-root TSA `{}` lists `{}` as an issuer but it is not a CA",
                authority_name(authority),
                parent.subject
            )));
        }
        crate::x509::verify_trust_link(child, parent)
            .map_err(|e| untrusted(format!("trust-root TSA chain does not verify: {e}")))?;
    }
    path.extend(trusted);
    Ok(path)
}

/// RFC 3161 §2.3: the signer's certificate has exactly one EKU, timeStamping,
/// marked critical (every Sigstore and conformance TSA certificate does). An
/// intermediate that restricts its EKUs must still allow timeStamping; one
/// without the extension is unrestricted. The root is the trust anchor.
fn check_key_usage(path: &[&Certificate]) -> Result<(), TimestampError> {
    let Some((signer, above)) = path.split_first() else {
        return Ok(());
    };
    let fail = |cert: &Certificate, detail: &str| TimestampError::KeyUsage {
        subject: cert.subject.clone(),
        detail: detail.to_owned(),
    };
    let critical = signer
        .extension(OID_EXTENDED_KEY_USAGE)
        .is_some_and(|e| e.critical);
    if !critical {
        return Err(fail(
            signer,
            "the extended key usage extension must be present and critical (RFC 3161 §2.3)",
        ));
    }
    match signer.extended_key_usages.as_deref() {
        Some([only]) if only == OID_EKU_TIME_STAMPING => {}
        _ => {
            return Err(fail(
                signer,
                "the extended key usage must be timeStamping and nothing else (RFC 3161 §2.3)",
            ));
        }
    }
    let intermediates = above.split_last().map(|(_, mid)| mid).unwrap_or_default();
    for cert in intermediates {
        if cert.extended_key_usages.is_some() && !cert.has_eku(OID_EKU_TIME_STAMPING) {
            return Err(fail(
                cert,
                "this intermediate restricts extended key usage and does not allow timeStamping",
            ));
        }
    }
    Ok(())
}

fn check_signing_certificate(tok: &Token<'_>, signer: &Certificate) -> Result<(), TimestampError> {
    let fail = |detail: String| TimestampError::SigningCertificateMismatch {
        subject: signer.subject.clone(),
        detail,
    };
    for ess in &tok.ess {
        if let Some(h) = ess.hash
            && h.digest(&signer.der) != ess.cert_hash
        {
            return Err(fail(format!("its {} differs from certHash", h.name())));
        }
        if let Some((issuer, serial)) = ess.issuer_serial
            && (issuer != signer.issuer_der.as_slice() || serial != signer.serial.as_slice())
        {
            return Err(fail(
                "its issuer and serial differ from issuerSerial".into(),
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

fn parse_token(input: &[u8]) -> Result<Token<'_>, TimestampError> {
    if input.len() > MAX_TOKEN_LEN {
        return Err(malformed_msg(
            "token",
            format!(
                "{} bytes is more than the {MAX_TOKEN_LEN} sigil accepts",
                input.len()
            ),
        ));
    }
    let outer = der::parse_single(input).map_err(malformed("token"))?;
    if outer.tag != der::SEQUENCE {
        return Err(malformed_msg("token", "does not start with a SEQUENCE"));
    }
    let mut r = outer.reader();
    // A TimeStampResp starts with the PKIStatusInfo SEQUENCE, a ContentInfo
    // with its contentType OID.
    let content_info = match r.peek_tag() {
        Some(der::SEQUENCE) => {
            let status = r
                .read(der::SEQUENCE, "PKIStatusInfo")
                .map_err(malformed("TimeStampResp"))?;
            check_status(&status)?;
            let token = r
                .read(der::SEQUENCE, "timeStampToken")
                .map_err(malformed("TimeStampResp"))?;
            r.finish().map_err(malformed("TimeStampResp"))?;
            token
        }
        _ => outer,
    };
    parse_content_info(&content_info)
}

fn check_status(status: &Tlv<'_>) -> Result<(), TimestampError> {
    let m = malformed("PKIStatusInfo");
    let mut r = status.reader();
    let value = r
        .read(der::INTEGER, "status")
        .and_then(|t| t.small_uint())
        .map_err(&m)?;
    r.read_optional(der::SEQUENCE).map_err(&m)?;
    r.read_optional(der::BIT_STRING).map_err(&m)?;
    r.finish().map_err(&m)?;
    // 0 granted, 1 grantedWithMods: both carry a token.
    if value > 1 {
        return Err(TimestampError::NotGranted { status: value });
    }
    Ok(())
}

fn parse_content_info<'a>(ci: &Tlv<'a>) -> Result<Token<'a>, TimestampError> {
    let m = malformed("ContentInfo");
    let mut r = ci.reader();
    let oid = r
        .read(der::OID, "contentType")
        .and_then(|t| t.oid())
        .map_err(&m)?;
    if oid != OID_SIGNED_DATA {
        return Err(malformed_msg(
            "ContentInfo",
            format!("content type `{oid}` is not signedData"),
        ));
    }
    let explicit = r.read(der::context(0, true), "[0] content").map_err(&m)?;
    r.finish().map_err(&m)?;
    let mut inner = explicit.reader();
    let signed_data = inner.read(der::SEQUENCE, "SignedData").map_err(&m)?;
    inner.finish().map_err(&m)?;
    parse_signed_data(&signed_data)
}

fn parse_signed_data<'a>(sd: &Tlv<'a>) -> Result<Token<'a>, TimestampError> {
    let m = malformed("SignedData");
    let mut r = sd.reader();
    let version = r
        .read(der::INTEGER, "version")
        .and_then(|t| t.small_uint())
        .map_err(&m)?;
    // RFC 5652 §5.1: content other than id-data means version 3 or higher.
    if !(3..=5).contains(&version) {
        return Err(malformed_msg(
            "SignedData",
            format!("version {version} (TSTInfo content requires 3, 4 or 5)"),
        ));
    }
    let digest_algorithms = r.read(der::SET, "digestAlgorithms").map_err(&m)?;
    let mut algs = digest_algorithms.reader();
    while !algs.is_empty() {
        algorithm_identifier(
            &algs
                .read(der::SEQUENCE, "AlgorithmIdentifier")
                .map_err(&m)?,
        )?;
    }

    let encap = r.read(der::SEQUENCE, "encapContentInfo").map_err(&m)?;
    let me = malformed("encapContentInfo");
    let mut er = encap.reader();
    let e_type = er
        .read(der::OID, "eContentType")
        .and_then(|t| t.oid())
        .map_err(&me)?;
    if e_type != OID_TST_INFO {
        return Err(malformed_msg(
            "encapContentInfo",
            format!("eContentType `{e_type}` is not id-ct-TSTInfo"),
        ));
    }
    let explicit = er
        .read(der::context(0, true), "[0] eContent")
        .map_err(&me)?;
    er.finish().map_err(&me)?;
    let mut xr = explicit.reader();
    let e_content = xr
        .read(der::OCTET_STRING, "eContent OCTET STRING")
        .map_err(&me)?;
    xr.finish().map_err(&me)?;
    let tst_info = e_content.value;
    let (gen_time, imprint_hash, hashed_message) = parse_tst_info(tst_info)?;

    let mut certificates = Vec::new();
    if let Some(set) = r.read_optional(der::context(0, true)).map_err(&m)? {
        let mc = malformed("certificates");
        let mut cr = set.reader();
        while !cr.is_empty() {
            let choice = cr.read_any().map_err(&mc)?;
            // Only plain X.509 certificates can sign; attribute and other
            // certificate choices ([0]..[3]) are skipped.
            match choice.tag {
                der::SEQUENCE => {
                    if certificates.len() >= MAX_EMBEDDED_CERTS {
                        return Err(malformed_msg(
                            "certificates",
                            format!("more than {MAX_EMBEDDED_CERTS} certificates"),
                        ));
                    }
                    certificates.push(choice.raw);
                }
                0xa0..=0xa3 => {}
                other => {
                    return Err(malformed_msg(
                        "certificates",
                        format!("unexpected tag 0x{other:02x} at offset {}", choice.offset),
                    ));
                }
            }
        }
    }
    // CRLs are not used: revocation of TSA certificates is the trust root's job.
    r.read_optional(der::context(1, true)).map_err(&m)?;

    let infos = r.read(der::SET, "signerInfos").map_err(&m)?;
    r.finish().map_err(&m)?;
    let mut ir = infos.reader();
    let info = ir.read(der::SEQUENCE, "SignerInfo").map_err(&m)?;
    if !ir.is_empty() {
        return Err(malformed_msg(
            "SignedData",
            "more than one SignerInfo; an RFC 3161 token has exactly one signer",
        ));
    }
    let signer = parse_signer_info(&info)?;

    Ok(Token {
        gen_time,
        imprint_hash,
        hashed_message,
        tst_info,
        certificates,
        sid: signer.sid,
        digest: signer.digest,
        signed_attrs: signer.signed_attrs,
        content_type: signer.content_type,
        message_digest: signer.message_digest,
        ess: signer.ess,
        signature_algorithm: signer.signature_algorithm,
        signature: signer.signature,
    })
}

/// Splits an AlgorithmIdentifier into its OID and optional parameters.
fn algorithm_identifier<'a>(alg: &Tlv<'a>) -> Result<(String, Option<Tlv<'a>>), TimestampError> {
    let m = malformed("AlgorithmIdentifier");
    let mut r = alg.reader();
    let oid = r
        .read(der::OID, "algorithm")
        .and_then(|t| t.oid())
        .map_err(&m)?;
    let params = if r.is_empty() {
        None
    } else {
        Some(r.read_any().map_err(&m)?)
    };
    r.finish().map_err(&m)?;
    Ok((oid, params))
}

/// A digest AlgorithmIdentifier (parameters absent or NULL).
fn digest_algorithm(alg: &Tlv<'_>, what: &'static str) -> Result<HashAlgorithm, TimestampError> {
    let (oid, params) = algorithm_identifier(alg)?;
    if let Some(p) = params {
        if p.tag != der::NULL {
            return Err(malformed_msg(
                what,
                "digest algorithm parameters must be absent or NULL",
            ));
        }
        p.null().map_err(malformed(what))?;
    }
    hash_from_oid(&oid).ok_or(TimestampError::UnsupportedAlgorithm { what, oid })
}

fn hash_from_oid(oid: &str) -> Option<HashAlgorithm> {
    match oid {
        "2.16.840.1.101.3.4.2.1" => Some(HashAlgorithm::Sha256),
        "2.16.840.1.101.3.4.2.2" => Some(HashAlgorithm::Sha384),
        "2.16.840.1.101.3.4.2.3" => Some(HashAlgorithm::Sha512),
        _ => None,
    }
}

type TstFields<'a> = (OffsetDateTime, HashAlgorithm, &'a [u8]);

fn parse_tst_info(bytes: &[u8]) -> Result<TstFields<'_>, TimestampError> {
    let m = malformed("TSTInfo");
    let tst = der::parse_single(bytes).map_err(&m)?;
    if tst.tag != der::SEQUENCE {
        return Err(malformed_msg("TSTInfo", "is not a SEQUENCE"));
    }
    let mut r = tst.reader();
    let version = r
        .read(der::INTEGER, "version")
        .and_then(|t| t.small_uint())
        .map_err(&m)?;
    if version != 1 {
        return Err(malformed_msg(
            "TSTInfo",
            format!("version {version} (must be 1)"),
        ));
    }
    r.read(der::OID, "policy")
        .and_then(|t| t.oid())
        .map_err(&m)?;
    let imprint = r.read(der::SEQUENCE, "messageImprint").map_err(&m)?;
    let mut ir = imprint.reader();
    let alg = ir.read(der::SEQUENCE, "hashAlgorithm").map_err(&m)?;
    let imprint_hash = digest_algorithm(&alg, "messageImprint hash algorithm")?;
    let hashed = ir.read(der::OCTET_STRING, "hashedMessage").map_err(&m)?;
    ir.finish().map_err(&m)?;
    r.read(der::INTEGER, "serialNumber")
        .and_then(|t| t.integer_bytes())
        .map_err(&m)?;
    let gen_time = r
        .read(der::GENERALIZED_TIME, "genTime")
        .and_then(|t| t.generalized_time())
        .map_err(&m)?;
    r.read_optional(der::SEQUENCE).map_err(&m)?; // accuracy
    if let Some(ordering) = r.read_optional(der::BOOLEAN).map_err(&m)? {
        ordering.boolean().map_err(&m)?;
    }
    if let Some(nonce) = r.read_optional(der::INTEGER).map_err(&m)? {
        nonce.integer_bytes().map_err(&m)?;
    }
    r.read_optional(der::context(0, true)).map_err(&m)?; // tsa
    r.read_optional(der::context(1, true)).map_err(&m)?; // extensions
    r.finish().map_err(&m)?;
    Ok((gen_time, imprint_hash, hashed.value))
}

struct SignerFields<'a> {
    sid: SignerId<'a>,
    digest: HashAlgorithm,
    signed_attrs: &'a [u8],
    content_type: String,
    message_digest: &'a [u8],
    ess: Vec<EssCertId<'a>>,
    signature_algorithm: SignatureAlgorithm,
    signature: &'a [u8],
}

fn parse_signer_info<'a>(info: &Tlv<'a>) -> Result<SignerFields<'a>, TimestampError> {
    let m = malformed("SignerInfo");
    let mut r = info.reader();
    let version = r
        .read(der::INTEGER, "version")
        .and_then(|t| t.small_uint())
        .map_err(&m)?;
    let sid = match r.peek_tag() {
        Some(der::SEQUENCE) => {
            let ias = r.read_any().map_err(&m)?;
            let mut ir = ias.reader();
            let issuer = ir.read(der::SEQUENCE, "issuer Name").map_err(&m)?;
            let serial = ir
                .read(der::INTEGER, "serialNumber")
                .and_then(|t| t.integer_bytes())
                .map_err(&m)?;
            ir.finish().map_err(&m)?;
            SignerId::IssuerSerial {
                issuer: issuer.raw,
                serial,
            }
        }
        Some(t) if t == der::context(0, false) => SignerId::KeyId(r.read_any().map_err(&m)?.value),
        _ => {
            return Err(malformed_msg(
                "SignerInfo",
                "signer identifier is neither issuerAndSerialNumber nor subjectKeyIdentifier",
            ));
        }
    };
    // RFC 5652 §5.3: version 1 goes with issuerAndSerialNumber, 3 with a key id.
    let expected = match sid {
        SignerId::IssuerSerial { .. } => 1,
        SignerId::KeyId(_) => 3,
    };
    if version != expected {
        return Err(malformed_msg(
            "SignerInfo",
            format!("version {version} does not match its signer identifier (expected {expected})"),
        ));
    }
    let digest_alg = r.read(der::SEQUENCE, "digestAlgorithm").map_err(&m)?;
    let digest = digest_algorithm(&digest_alg, "SignerInfo digest algorithm")?;
    let attrs = r
        .read(der::context(0, true), "signedAttrs (required by RFC 3161)")
        .map_err(&m)?;
    let sig_alg = r.read(der::SEQUENCE, "signatureAlgorithm").map_err(&m)?;
    let signature = r.read(der::OCTET_STRING, "signature").map_err(&m)?.value;
    r.read_optional(der::context(1, true)).map_err(&m)?; // unsignedAttrs
    r.finish().map_err(&m)?;

    let (sig_oid, params) = algorithm_identifier(&sig_alg)?;
    // ECDSA and Ed25519 take no parameters, RSA PKCS#1 v1.5 a NULL; anything
    // else (RSASSA-PSS parameters) is an algorithm sigil does not support.
    if let Some(p) = params {
        if p.tag != der::NULL {
            return Err(TimestampError::UnsupportedAlgorithm {
                what: "SignerInfo signature algorithm parameters",
                oid: sig_oid,
            });
        }
        p.null()
            .map_err(malformed("SignerInfo signatureAlgorithm"))?;
    }
    // Some TSAs name only the key type; the hash is then the digest algorithm.
    let signature_algorithm = match sig_oid.as_str() {
        OID_EC_PUBLIC_KEY => SignatureAlgorithm::Ecdsa(digest),
        OID_RSA_ENCRYPTION => SignatureAlgorithm::RsaPkcs1(digest),
        other => SignatureAlgorithm::from_oid(other).ok_or_else(|| {
            TimestampError::UnsupportedAlgorithm {
                what: "SignerInfo signature algorithm",
                oid: sig_oid.clone(),
            }
        })?,
    };

    let attributes = parse_signed_attrs(&attrs)?;
    Ok(SignerFields {
        sid,
        digest,
        signed_attrs: attrs.raw,
        content_type: attributes.content_type,
        message_digest: attributes.message_digest,
        ess: attributes.ess,
        signature_algorithm,
        signature,
    })
}

struct SignedAttrs<'a> {
    content_type: String,
    message_digest: &'a [u8],
    ess: Vec<EssCertId<'a>>,
}

fn parse_signed_attrs<'a>(attrs: &Tlv<'a>) -> Result<SignedAttrs<'a>, TimestampError> {
    let m = malformed("signedAttrs");
    let mut seen: HashSet<String> = HashSet::new();
    let mut content_type = None;
    let mut message_digest = None;
    let mut ess = Vec::new();
    let mut r = attrs.reader();
    while !r.is_empty() {
        let attr = r.read(der::SEQUENCE, "Attribute").map_err(&m)?;
        let mut ar = attr.reader();
        let oid = ar
            .read(der::OID, "attrType")
            .and_then(|t| t.oid())
            .map_err(&m)?;
        let values = ar.read(der::SET, "attrValues").map_err(&m)?;
        ar.finish().map_err(&m)?;
        // RFC 5652 §5.3: an attribute type appears at most once.
        if seen.contains(&oid) {
            return Err(malformed_msg(
                "signedAttrs",
                format!("attribute {oid} appears twice"),
            ));
        }
        let single = || -> Result<Tlv<'a>, TimestampError> {
            let mut vr = values.reader();
            let v = vr.read_any().map_err(&m)?;
            if !vr.is_empty() {
                return Err(malformed_msg(
                    "signedAttrs",
                    format!("attribute {oid} must have exactly one value"),
                ));
            }
            Ok(v)
        };
        match oid.as_str() {
            OID_CONTENT_TYPE => {
                let v = single()?;
                if v.tag != der::OID {
                    return Err(malformed_msg(
                        "signedAttrs",
                        "content-type value is not an OID",
                    ));
                }
                content_type = Some(v.oid().map_err(&m)?);
            }
            OID_MESSAGE_DIGEST => {
                let v = single()?;
                if v.tag != der::OCTET_STRING {
                    return Err(malformed_msg(
                        "signedAttrs",
                        "message-digest value is not an OCTET STRING",
                    ));
                }
                message_digest = Some(v.value);
            }
            OID_SIGNING_CERTIFICATE => ess.push(parse_signing_certificate(&single()?, false)?),
            OID_SIGNING_CERTIFICATE_V2 => ess.push(parse_signing_certificate(&single()?, true)?),
            _ => {}
        }
        seen.insert(oid);
    }
    Ok(SignedAttrs {
        content_type: content_type
            .ok_or_else(|| malformed_msg("signedAttrs", "no content-type attribute"))?,
        message_digest: message_digest
            .ok_or_else(|| malformed_msg("signedAttrs", "no message-digest attribute"))?,
        ess,
    })
}

/// SigningCertificate(V2) ::= SEQUENCE { certs SEQUENCE OF ESSCertID(v2), policies OPTIONAL };
/// the first ESSCertID names the signing certificate (RFC 2634 §5.4, RFC 5035).
fn parse_signing_certificate<'a>(
    value: &Tlv<'a>,
    v2: bool,
) -> Result<EssCertId<'a>, TimestampError> {
    let what = if v2 {
        "SigningCertificateV2 attribute"
    } else {
        "SigningCertificate attribute"
    };
    let m = malformed(what);
    if value.tag != der::SEQUENCE {
        return Err(malformed_msg(what, "is not a SEQUENCE"));
    }
    let mut r = value.reader();
    let certs = r.read(der::SEQUENCE, "certs").map_err(&m)?;
    r.read_optional(der::SEQUENCE).map_err(&m)?; // policies
    r.finish().map_err(&m)?;
    let mut cr = certs.reader();
    let first = cr.read(der::SEQUENCE, "ESSCertID").map_err(&m)?;
    let mut er = first.reader();
    let hash = if v2 {
        match er.read_optional(der::SEQUENCE).map_err(&m)? {
            // DEFAULT {id-sha256}
            None => Some(HashAlgorithm::Sha256),
            Some(alg) => {
                let (oid, _) = algorithm_identifier(&alg)?;
                if oid == OID_SHA1 {
                    None
                } else {
                    Some(
                        hash_from_oid(&oid).ok_or(TimestampError::UnsupportedAlgorithm {
                            what: "ESSCertIDv2 hash algorithm",
                            oid,
                        })?,
                    )
                }
            }
        }
    } else {
        None
    };
    let cert_hash = er.read(der::OCTET_STRING, "certHash").map_err(&m)?.value;
    let issuer_serial = match er.read_optional(der::SEQUENCE).map_err(&m)? {
        None => None,
        Some(is) => Some(parse_issuer_serial(&is, what)?),
    };
    er.finish().map_err(&m)?;
    Ok(EssCertId {
        hash,
        cert_hash,
        issuer_serial,
    })
}

/// IssuerSerial ::= SEQUENCE { issuer GeneralNames, serialNumber INTEGER },
/// where the issuer must be a single directoryName ([4] EXPLICIT Name).
fn parse_issuer_serial<'a>(
    is: &Tlv<'a>,
    what: &'static str,
) -> Result<(&'a [u8], &'a [u8]), TimestampError> {
    let m = malformed(what);
    let mut r = is.reader();
    let names = r.read(der::SEQUENCE, "issuer GeneralNames").map_err(&m)?;
    let serial = r
        .read(der::INTEGER, "serialNumber")
        .and_then(|t| t.integer_bytes())
        .map_err(&m)?;
    r.finish().map_err(&m)?;
    let mut nr = names.reader();
    let dir = nr
        .read(der::context(4, true), "directoryName")
        .map_err(&m)?;
    nr.finish().map_err(&m)?;
    let mut dr = dir.reader();
    let name = dr.read(der::SEQUENCE, "Name").map_err(&m)?;
    dr.finish().map_err(&m)?;
    Ok((name.raw, serial))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::parse_rfc3339;

    use crate::test_support::conformance_dir as cases_dir;

    struct Case {
        token: Vec<u8>,
        signed: Vec<u8>,
        root: TrustedRoot,
    }

    fn case(name: &str) -> Case {
        use base64::Engine as _;
        let dir = cases_dir().join(name);
        let bundle: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("bundle.sigstore.json")).unwrap())
                .unwrap();
        // Read the fields directly: one case wraps its base64 at 76 columns.
        let b64 = |v: &serde_json::Value| {
            let s: String = v
                .as_str()
                .unwrap()
                .chars()
                .filter(|c| !c.is_ascii_whitespace())
                .collect();
            base64::engine::general_purpose::STANDARD.decode(s).unwrap()
        };
        let token = b64(
            &bundle["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"][0]["signedTimestamp"],
        );
        let signed = match bundle.get("messageSignature") {
            Some(m) => b64(&m["signature"]),
            None => b64(&bundle["dsseEnvelope"]["signatures"][0]["sig"]),
        };
        let root = std::fs::read_to_string(dir.join("trusted_root.json")).unwrap();
        Case {
            token,
            signed,
            root: TrustedRoot::from_json(&root).unwrap(),
        }
    }

    fn verify(c: &Case) -> Result<VerifiedTimestamp, TimestampError> {
        verify_rfc3161(&c.token, &c.signed, &c.root)
    }

    fn t(s: &str) -> OffsetDateTime {
        parse_rfc3339(s).unwrap()
    }

    #[test]
    fn valid_conformance_tokens_verify_with_their_gen_time() {
        for (name, time) in [
            ("rekor2-happy-path", "2025-06-12T12:02:20Z"),
            ("rekor2-dsse-happy-path", "2026-05-13T19:23:33Z"),
            (
                "rekor2-timestamp-with-embedded-cert",
                "2025-08-06T18:51:36Z",
            ),
            (
                "rekor2-timestamp-without-embedded-cert",
                "2025-08-06T19:03:51Z",
            ),
            (
                "trust-root-tsa-validity-end-inclusive",
                "2025-06-12T12:02:20Z",
            ),
            // The timestamp itself is fine; the bundle fails because genTime
            // is outside the signing certificate, which the caller checks.
            (
                "rekor2-timestamp-with-incorrect-time_fail",
                "2025-07-15T10:33:31Z",
            ),
            (
                "intoto-tsa-timestamp-outside-cert-validity_fail",
                "2023-02-02T00:00:00Z",
            ),
        ] {
            let got = verify(&case(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got.time, t(time), "{name}");
            assert_eq!(got.authority, 0, "{name}");
        }
    }

    #[test]
    fn an_expired_tsa_chain_still_vouches_for_times_inside_its_validity() {
        // The chain expired minutes after issuing this token; validity is
        // judged at genTime, so the timestamp stays good.
        let got = verify(&case("rekor2-timestamp-with-expired-cert-chain")).unwrap();
        assert_eq!(got.time, t("2025-08-07T15:32:26Z"));
    }

    #[test]
    fn a_token_issued_after_the_tsa_chain_expired_is_outside_validity() {
        let err = verify(&case("rekor2-timestamp-outside-tsa-cert-validity_fail")).unwrap_err();
        let TimestampError::OutsideValidity { time, window, what } = &err else {
            panic!("wrong error: {err}");
        };
        assert_eq!(*time, t("2025-08-07T15:38:32Z"));
        assert_eq!(window.0.end, Some(t("2025-08-07T15:37:08Z")));
        assert!(what.contains("Test TSA Timestamping"), "{what}");
    }

    #[test]
    fn a_token_outside_the_trust_root_validity_is_rejected() {
        let err = verify(&case(
            "rekor2-timestamp-outside-trust-root-tsa-validity_fail",
        ))
        .unwrap_err();
        let TimestampError::OutsideValidity { window, what, .. } = &err else {
            panic!("wrong error: {err}");
        };
        assert_eq!(window.0.end, Some(t("2025-06-01T00:00:00Z")));
        assert!(what.contains("validFor"), "{what}");
        assert_eq!(err.reason(), "timestamp_outside_validity");
    }

    #[test]
    fn a_token_for_another_signature_has_the_wrong_imprint() {
        let err = verify(&case("rekor2-timestamp-payload-mismatch_fail")).unwrap_err();
        assert!(
            matches!(
                err,
                TimestampError::WrongImprint {
                    algorithm: "sha256"
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn tokens_from_tsas_outside_the_trust_root_are_untrusted_even_with_embedded_certs() {
        for name in [
            "rekor2-timestamp-untrusted-tsa-with-embedded-cert_fail",
            "rekor2-timestamp-untrusted-tsa-without-embedded-cert_fail",
        ] {
            let err = verify(&case(name)).unwrap_err();
            assert!(
                matches!(err, TimestampError::UntrustedSigner { .. }),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn an_embedded_certificate_equal_to_a_trust_root_one_is_not_parsed_again() {
        let c = case("rekor2-happy-path");
        let tok = parse_token(&c.token).unwrap();
        let embedded = embedded_certificates(&tok, &c.root).unwrap();
        assert_eq!(embedded.len(), 1);
        assert!(matches!(&embedded[0], Cow::Borrowed(cert)
            if std::ptr::eq(*cert, &c.root.timestamp_authorities[0].chain[0])));

        // A TSA the trust root does not know: its certificate is parsed, and
        // it is still only a candidate, never trusted for being embedded.
        let other = case("rekor2-timestamp-untrusted-tsa-with-embedded-cert_fail");
        let tok = parse_token(&other.token).unwrap();
        let embedded = embedded_certificates(&tok, &other.root).unwrap();
        assert!(!embedded.is_empty());
        assert!(embedded.iter().all(|c| matches!(c, Cow::Owned(_))));
    }

    #[test]
    fn a_malformed_embedded_certificate_fails_the_token() {
        let c = case("rekor2-happy-path");
        let signer = &c.root.timestamp_authorities[0].chain[0].der;
        let at = c
            .token
            .windows(signer.len())
            .position(|w| w == signer.as_slice())
            .expect("the happy-path token embeds the trust root's TSA certificate");
        let cert = der::parse_single(signer).unwrap();
        let tbs = cert.reader().read_any().unwrap();
        let version = tbs.reader().read_any().unwrap();
        assert_eq!(version.tag, der::context(0, true));
        // The [0] version becomes an OCTET STRING of the same length: the DER
        // around it still parses, the certificate no longer does, and it is no
        // longer byte-equal to the trust root's.
        let mut token = c.token.clone();
        token[at + version.offset] = der::OCTET_STRING;
        let err = verify_rfc3161(&token, &c.signed, &c.root).unwrap_err();
        assert!(
            matches!(
                &err,
                TimestampError::Malformed {
                    what: "certificates",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_bare_time_stamp_token_verifies_like_the_response_around_it() {
        let c = case("rekor2-happy-path");
        let outer = der::parse_single(&c.token).unwrap();
        let mut r = outer.reader();
        r.read_any().unwrap();
        let bare = r.read_any().unwrap().raw.to_vec();
        let got = verify_rfc3161(&bare, &c.signed, &c.root).unwrap();
        assert_eq!(got, verify(&c).unwrap());
    }

    #[test]
    fn a_rejected_response_reports_its_status() {
        let c = case("rekor2-happy-path");
        let resp = [0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x02];
        assert_eq!(
            verify_rfc3161(&resp, &c.signed, &c.root),
            Err(TimestampError::NotGranted { status: 2 })
        );
    }

    #[test]
    fn a_root_without_tsas_cannot_verify_anything() {
        let mut c = case("rekor2-happy-path");
        c.root.timestamp_authorities.clear();
        assert_eq!(verify(&c), Err(TimestampError::NoAuthorities));
    }

    #[test]
    fn every_authority_is_tried_and_the_index_of_the_one_that_vouches_is_returned() {
        let mut c = case("rekor2-happy-path");
        let other = case("intoto-tsa-timestamp-outside-cert-validity_fail");
        c.root
            .timestamp_authorities
            .insert(0, other.root.timestamp_authorities[0].clone());
        assert_eq!(verify(&c).unwrap().authority, 1);
    }

    #[test]
    fn the_most_specific_failure_across_authorities_is_reported() {
        let mut c = case("rekor2-timestamp-outside-trust-root-tsa-validity_fail");
        let other = case("intoto-tsa-timestamp-outside-cert-validity_fail");
        c.root
            .timestamp_authorities
            .insert(0, other.root.timestamp_authorities[0].clone());
        c.root
            .timestamp_authorities
            .push(other.root.timestamp_authorities[0].clone());
        let err = verify(&c).unwrap_err();
        assert!(
            matches!(err, TimestampError::OutsideValidity { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_trust_root_chain_whose_links_do_not_verify_is_untrusted() {
        let mut c = case("rekor2-timestamp-without-embedded-cert");
        let other = case("intoto-tsa-timestamp-outside-cert-validity_fail");
        // The right leaf under a foreign root: the leaf is present, the path is not.
        let foreign_root = other.root.timestamp_authorities[0].chain[1].clone();
        c.root.timestamp_authorities[0].chain[1] = foreign_root;
        let err = verify(&c).unwrap_err();
        assert!(
            matches!(err, TimestampError::UntrustedSigner { .. }),
            "{err}"
        );
    }

    #[test]
    fn the_signer_needs_a_critical_time_stamping_only_eku() {
        let happy = case("rekor2-happy-path");
        let chain = &happy.root.timestamp_authorities[0].chain;
        assert!(check_key_usage(&[&chain[0], &chain[1]]).is_ok());
        // A CA certificate without EKU cannot sign timestamps.
        let err = check_key_usage(&[&chain[1]]).unwrap_err();
        assert!(matches!(err, TimestampError::KeyUsage { .. }), "{err}");
        // The expired chain's intermediate lists timeStamping, but not critically.
        let expired = case("rekor2-timestamp-with-expired-cert-chain");
        let chain = &expired.root.timestamp_authorities[0].chain;
        assert!(check_key_usage(&[&chain[0], &chain[1], &chain[2]]).is_ok());
        let err = check_key_usage(&[&chain[1], &chain[2]]).unwrap_err();
        assert!(err.to_string().contains("critical"), "{err}");
    }

    #[test]
    fn the_signing_certificate_attribute_must_name_the_signer() {
        let c = case("rekor2-happy-path");
        let tok = parse_token(&c.token).unwrap();
        assert_eq!(tok.ess.len(), 1);
        let chain = &c.root.timestamp_authorities[0].chain;
        assert!(check_signing_certificate(&tok, &chain[0]).is_ok());
        let err = check_signing_certificate(&tok, &chain[1]).unwrap_err();
        assert!(
            matches!(err, TimestampError::SigningCertificateMismatch { .. }),
            "{err}"
        );
    }

    #[test]
    fn signer_identifiers_match_by_issuer_and_serial_or_key_id() {
        let c = case("rekor2-happy-path");
        let tok = parse_token(&c.token).unwrap();
        let chain = &c.root.timestamp_authorities[0].chain;
        assert!(tok.sid.matches(&chain[0]));
        assert!(!tok.sid.matches(&chain[1]));
        let ski = chain[0].subject_key_id.clone().unwrap();
        assert!(SignerId::KeyId(&ski).matches(&chain[0]));
        assert!(!SignerId::KeyId(&ski).matches(&chain[1]));
    }

    #[test]
    fn truncated_and_oversized_tokens_are_malformed_not_panics() {
        let c = case("rekor2-happy-path");
        for len in 0..c.token.len() {
            let err = verify_rfc3161(&c.token[..len], &c.signed, &c.root).unwrap_err();
            assert!(
                matches!(err, TimestampError::Malformed { .. }),
                "{len}: {err}"
            );
        }
        let mut long = c.token.clone();
        long.push(0);
        assert!(matches!(
            verify_rfc3161(&long, &c.signed, &c.root),
            Err(TimestampError::Malformed { .. })
        ));
        let huge = vec![0u8; MAX_TOKEN_LEN + 1];
        assert!(matches!(
            verify_rfc3161(&huge, &c.signed, &c.root),
            Err(TimestampError::Malformed { .. })
        ));
    }

    /// Byte ranges of a token that no signature covers: the response status,
    /// the SignedData version and digestAlgorithms, and the certificates set.
    fn unsigned_spans(token: &[u8]) -> Vec<std::ops::Range<usize>> {
        let span = |t: &Tlv<'_>| t.offset..t.offset + t.raw.len();
        let outer = der::parse_single(token).unwrap();
        let mut r = outer.reader();
        let status = r.read_any().unwrap();
        let ci = r.read_any().unwrap();
        let mut cr = ci.reader();
        cr.read_any().unwrap();
        let explicit = cr.read_any().unwrap();
        let sd = explicit.reader().read_any().unwrap();
        let mut sr = sd.reader();
        let version = sr.read_any().unwrap();
        let algs = sr.read_any().unwrap();
        sr.read_any().unwrap();
        let mut spans = vec![span(&status), span(&version), span(&algs)];
        if let Some(certs) = sr.read_optional(der::context(0, true)).unwrap() {
            spans.push(span(&certs));
        }
        spans
    }

    #[test]
    fn no_single_byte_change_can_alter_a_verified_time() {
        let sweep = |name: &'static str| {
            let c = case(name);
            let good = verify(&c).unwrap();
            let unsigned = unsigned_spans(&c.token);
            let mut still_valid = 0;
            for pos in 0..c.token.len() {
                // One flip per byte, varying which bits, keeps the sweep fast
                // in debug builds (each surviving flip costs an ECDSA check).
                let mask = [0x01u8, 0x80, 0xff][pos % 3];
                let mut token = c.token.clone();
                token[pos] ^= mask;
                if let Ok(got) = verify_rfc3161(&token, &c.signed, &c.root) {
                    assert_eq!(got, good, "{name}: flip {mask:#04x} at {pos}");
                    assert!(
                        unsigned.iter().any(|s| s.contains(&pos)),
                        "{name}: flip {mask:#04x} at {pos} is in signed bytes yet verifies"
                    );
                    still_valid += 1;
                }
            }
            // Sanity: the sweep did reach unsigned bytes (e.g. the status).
            assert!(still_valid > 0, "{name}");
        };
        std::thread::scope(|s| {
            s.spawn(|| sweep("rekor2-happy-path"));
            s.spawn(|| sweep("rekor2-timestamp-without-embedded-cert"));
        });
    }

    static HAPPY: std::sync::LazyLock<Case> =
        std::sync::LazyLock::new(|| case("rekor2-happy-path"));

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_are_rejected_without_panicking(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2048)
        ) {
            proptest::prop_assert!(verify_rfc3161(&bytes, &HAPPY.signed, &HAPPY.root).is_err());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        #[test]
        fn several_byte_changes_never_yield_another_time(
            edits in proptest::collection::vec((proptest::num::usize::ANY, 1u8..=255), 1..4)
        ) {
            let mut token = HAPPY.token.clone();
            for (pos, mask) in &edits {
                let i = pos % token.len();
                token[i] ^= mask;
            }
            if let Ok(got) = verify_rfc3161(&token, &HAPPY.signed, &HAPPY.root) {
                proptest::prop_assert_eq!(got.time, t("2025-06-12T12:02:20Z"));
            }
        }
    }
}
