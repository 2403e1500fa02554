//! Revocation of the signing chain by OCSP (RFC 6960) and CRL (RFC 5280),
//! as the Notary Project specifies it: for each certificate below the root,
//! OCSP first, falling back to its CRLs when OCSP cannot answer; a
//! certificate with neither is not revocable. The verdict is computed from
//! responses fetched beforehand ([`requests`] says what to fetch, an
//! [`Evidence`] holds what came back), so this module does no input/output:
//! fetching, with its time, size and address bounds and its cache, belongs
//! to sigil's network code.

use std::collections::HashMap;

use aws_lc_rs::digest;
use sigil_verifier::crypto::HashAlgorithm;
use sigil_verifier::der::{self, Tlv};
use sigil_verifier::x509::{Certificate, SignatureAlgorithm, verify_with_algorithm};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer as _, GeneralName, ParsedExtension, X509Certificate};
use x509_parser::revocation_list::CertificateRevocationList;

/// Most OCSP responders or CRL distribution points used per certificate.
pub const MAX_URLS_PER_CERT: usize = 4;
/// Largest CRL read (the fetcher bounds downloads to this too).
pub const MAX_CRL_LEN: usize = 16 * 1024 * 1024;
/// Largest OCSP response read.
pub const MAX_OCSP_LEN: usize = 64 * 1024;

const OID_OCSP_METHOD: &str = "1.3.6.1.5.5.7.48.1";
const OID_OCSP_BASIC: &str = "1.3.6.1.5.5.7.48.1.1";
const OID_EKU_OCSP_SIGNING: &str = "1.3.6.1.5.5.7.3.9";
const OID_SHA1: &str = "1.3.14.3.2.26";
const OID_SHA256: &str = "2.16.840.1.101.3.4.2.1";
const OID_FRESHEST_CRL: &str = "2.5.29.46";
const OID_ISSUING_DP: &str = "2.5.29.28";
const OID_DELTA_CRL_INDICATOR: &str = "2.5.29.27";
const OID_INVALIDITY_DATE: &str = "2.5.29.24";
const OID_REASON_CODE: &str = "2.5.29.21";
const REASON_REMOVE_FROM_CRL: u8 = 8;

/// One thing to fetch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Request {
    /// POST `body` (`application/ocsp-request`) to `url`.
    Ocsp {
        /// The responder.
        url: String,
        /// The DER OCSPRequest.
        body: Vec<u8>,
    },
    /// GET the CRL at `url`.
    Crl {
        /// The distribution point.
        url: String,
    },
    /// AWS Signer's `GetRevocationStatus` (a SigV4-signed GET of
    /// `/revocations?<query>` on `signer.<region>.amazonaws.com`).
    AwsSigner {
        /// The signing profile's region.
        region: String,
        /// The URL-encoded query.
        query: String,
    },
}

/// Responses fetched for [`Request`]s: the body, or why there is none.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    responses: HashMap<Request, Result<Vec<u8>, String>>,
}

impl Evidence {
    /// No responses.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records what fetching `request` gave.
    pub fn insert(&mut self, request: Request, response: Result<Vec<u8>, String>) {
        self.responses.insert(request, response);
    }

    /// The response to `request`, or why there is none.
    pub fn get(&self, request: &Request) -> Result<&[u8], String> {
        match self.responses.get(request) {
            Some(Ok(body)) => Ok(body),
            Some(Err(e)) => Err(e.clone()),
            None => Err("it was not fetched".into()),
        }
    }
}

/// The revocation status of one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Not revoked.
    Good,
    /// Revoked.
    Revoked {
        /// How it was learnt (`OCSP <url>` or `CRL <url>`).
        source: String,
    },
    /// Could not be determined.
    Unknown {
        /// Why, per responder or distribution point.
        reason: String,
    },
    /// Names no OCSP responder and no CRL.
    NotRevocable,
}

/// The verdict over a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No certificate is revoked, every status was determined.
    Good,
    /// A certificate is revoked.
    Revoked {
        /// Its subject.
        subject: String,
        /// How it was learnt.
        source: String,
    },
    /// A status could not be determined.
    Unknown {
        /// The certificate's subject.
        subject: String,
        /// Why.
        reason: String,
    },
}

/// Where a certificate's revocation can be checked.
#[derive(Debug, Clone, Default)]
struct Endpoints {
    ocsp: Vec<String>,
    crl: Vec<String>,
    freshest_crl: bool,
}

fn endpoints(cert: &Certificate) -> Endpoints {
    let mut out = Endpoints::default();
    let Ok((_, x)) = X509Certificate::from_der(&cert.der) else {
        return out;
    };
    for ext in x.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::AuthorityInfoAccess(aia) => {
                for desc in aia.iter() {
                    if desc.access_method.to_id_string() == OID_OCSP_METHOD
                        && let GeneralName::URI(uri) = &desc.access_location
                    {
                        out.ocsp.push((*uri).to_owned());
                    }
                }
            }
            ParsedExtension::CRLDistributionPoints(points) => {
                for point in points.iter() {
                    if let Some(x509_parser::extensions::DistributionPointName::FullName(names)) =
                        &point.distribution_point
                    {
                        for name in names {
                            if let GeneralName::URI(uri) = name {
                                out.crl.push((*uri).to_owned());
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        if ext.oid.to_id_string() == OID_FRESHEST_CRL {
            out.freshest_crl = true;
        }
    }
    out.ocsp.truncate(MAX_URLS_PER_CERT);
    out.crl.truncate(MAX_URLS_PER_CERT);
    out
}

/// What to fetch to check `chain` (signing certificate first, root last).
pub fn requests(chain: &[Certificate]) -> Vec<Request> {
    let mut out = Vec::new();
    for pair in chain.windows(2) {
        let [cert, issuer] = pair else { continue };
        let ends = endpoints(cert);
        for url in &ends.ocsp {
            out.push(Request::Ocsp {
                url: url.clone(),
                body: ocsp_request(cert, issuer),
            });
        }
        for url in &ends.crl {
            out.push(Request::Crl { url: url.clone() });
        }
    }
    out
}

/// Checks `chain` against the fetched `evidence` at `now`. A revocation
/// dated after an authentic `signing_time` (its invalidity date, when the
/// issuer gives one) does not affect a signature made before it.
pub fn check(
    chain: &[Certificate],
    evidence: &Evidence,
    now: OffsetDateTime,
    signing_time: Option<OffsetDateTime>,
) -> Verdict {
    let mut unknown: Option<Verdict> = None;
    for pair in chain.windows(2) {
        let [cert, issuer] = pair else { continue };
        match status(cert, issuer, evidence, now, signing_time) {
            Status::Good | Status::NotRevocable => {}
            Status::Revoked { source } => {
                return Verdict::Revoked {
                    subject: cert.subject.clone(),
                    source,
                };
            }
            Status::Unknown { reason } => {
                unknown.get_or_insert(Verdict::Unknown {
                    subject: cert.subject.clone(),
                    reason,
                });
            }
        }
    }
    unknown.unwrap_or(Verdict::Good)
}

/// The status of one certificate: OCSP, then its CRLs.
pub fn status(
    cert: &Certificate,
    issuer: &Certificate,
    evidence: &Evidence,
    now: OffsetDateTime,
    signing_time: Option<OffsetDateTime>,
) -> Status {
    let ends = endpoints(cert);
    if ends.ocsp.is_empty() && ends.crl.is_empty() {
        return Status::NotRevocable;
    }
    let mut reasons = Vec::new();
    for url in &ends.ocsp {
        let request = Request::Ocsp {
            url: url.clone(),
            body: ocsp_request(cert, issuer),
        };
        let outcome = evidence
            .get(&request)
            .and_then(|body| ocsp_status(body, cert, issuer, now, signing_time));
        match outcome {
            Ok(OcspStatus::Good) => return Status::Good,
            Ok(OcspStatus::Revoked) => {
                return Status::Revoked {
                    source: format!("OCSP {url}"),
                };
            }
            Ok(OcspStatus::Unknown) => {
                reasons.push(format!("OCSP {url} does not know the certificate"))
            }
            Err(e) => reasons.push(format!("OCSP {url}: {e}")),
        }
    }
    if ends.crl.is_empty() {
        return Status::Unknown {
            reason: reasons.join("; "),
        };
    }
    if ends.freshest_crl {
        reasons.push(
            "the certificate names a freshest (delta) CRL, which sigil does not support".into(),
        );
        return Status::Unknown {
            reason: reasons.join("; "),
        };
    }
    let mut all_good = true;
    for url in &ends.crl {
        let request = Request::Crl { url: url.clone() };
        let outcome = evidence
            .get(&request)
            .and_then(|body| crl_status(body, cert, issuer, now, signing_time));
        match outcome {
            Ok(true) => {
                return Status::Revoked {
                    source: format!("CRL {url}"),
                };
            }
            Ok(false) => {}
            Err(e) => {
                all_good = false;
                reasons.push(format!("CRL {url}: {e}"));
            }
        }
    }
    if all_good {
        Status::Good
    } else {
        Status::Unknown {
            reason: reasons.join("; "),
        }
    }
}

// ---------------------------------------------------------------------------
// CRL
// ---------------------------------------------------------------------------

/// Whether `cert` is revoked according to the DER CRL `body` from `issuer`.
pub fn crl_status(
    body: &[u8],
    cert: &Certificate,
    issuer: &Certificate,
    now: OffsetDateTime,
    signing_time: Option<OffsetDateTime>,
) -> Result<bool, String> {
    if body.len() > MAX_CRL_LEN {
        return Err(format!(
            "{} bytes is more than the {MAX_CRL_LEN} sigil reads",
            body.len()
        ));
    }
    let (rest, crl) =
        CertificateRevocationList::from_der(body).map_err(|e| format!("not a DER CRL: {e}"))?;
    if !rest.is_empty() {
        return Err("trailing bytes after the CRL".into());
    }
    if crl.issuer().as_raw() != issuer.subject_der.as_slice() {
        return Err(format!(
            "issued by `{}`, not by `{}`",
            crl.issuer(),
            issuer.subject
        ));
    }
    let alg_oid = crl.signature_algorithm.algorithm.to_id_string();
    let alg = SignatureAlgorithm::from_oid(&alg_oid)
        .ok_or_else(|| format!("signature algorithm {alg_oid} is not supported"))?;
    let key = issuer
        .public_key
        .as_ref()
        .ok_or("the issuer's key type is not supported")?;
    verify_with_algorithm(
        key,
        alg,
        crl.tbs_cert_list.as_ref(),
        &crl.signature_value.data,
    )
    .map_err(|e| format!("not signed by `{}`: {e}", issuer.subject))?;
    let next = crl.next_update().ok_or("has no nextUpdate")?.to_datetime();
    if now > next {
        return Err(format!("expired at {next} (nextUpdate)"));
    }
    if crl.last_update().to_datetime() > now {
        return Err("its thisUpdate is in the future".into());
    }
    for ext in crl.extensions() {
        let oid = ext.oid.to_id_string();
        if ext.critical && oid != OID_ISSUING_DP && oid != OID_DELTA_CRL_INDICATOR {
            return Err(format!(
                "has critical extension {oid}, which sigil does not support"
            ));
        }
        if oid == OID_DELTA_CRL_INDICATOR {
            return Err("is a delta CRL, which sigil does not support as a base CRL".into());
        }
    }
    let serial = strip_sign(&cert.serial);
    for entry in crl.iter_revoked_certificates() {
        if strip_sign(entry.raw_serial()) != serial {
            continue;
        }
        let mut invalidity = None;
        let mut reason = None;
        for ext in entry.extensions() {
            let oid = ext.oid.to_id_string();
            match ext.parsed_extension() {
                ParsedExtension::InvalidityDate(t) => invalidity = Some(t.to_datetime()),
                ParsedExtension::ReasonCode(code) => reason = Some(code.0),
                _ if ext.critical && oid != OID_INVALIDITY_DATE && oid != OID_REASON_CODE => {
                    return Err(format!(
                        "revocation entry has critical extension {oid}, which sigil does not support"
                    ));
                }
                _ => {}
            }
        }
        if let (Some(signed), Some(invalid)) = (signing_time, invalidity)
            && signed < invalid
        {
            return Ok(false);
        }
        if reason == Some(REASON_REMOVE_FROM_CRL) {
            continue;
        }
        return Ok(true);
    }
    Ok(false)
}

fn strip_sign(serial: &[u8]) -> &[u8] {
    match serial {
        [0, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    }
}

// ---------------------------------------------------------------------------
// OCSP
// ---------------------------------------------------------------------------

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(content);
    out
}

fn sha1(data: &[u8]) -> Vec<u8> {
    digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, data)
        .as_ref()
        .to_vec()
}

/// The subjectPublicKey bits of a SubjectPublicKeyInfo (what issuerKeyHash hashes).
fn spki_key_bits(spki: &[u8]) -> Option<&[u8]> {
    let outer = der::parse_single(spki).ok()?;
    let mut r = outer.reader();
    r.read(der::SEQUENCE, "algorithm").ok()?;
    let bits = r.read(der::BIT_STRING, "subjectPublicKey").ok()?;
    bits.value.get(1..)
}

/// The DER OCSPRequest for `cert` (CertID with SHA-1, as notation and most
/// responders use).
pub fn ocsp_request(cert: &Certificate, issuer: &Certificate) -> Vec<u8> {
    let alg = tlv(
        der::SEQUENCE,
        &[tlv(der::OID, &oid_der_sha1()), tlv(der::NULL, &[])].concat(),
    );
    let key_hash = sha1(spki_key_bits(&issuer.spki_der).unwrap_or_default());
    let cert_id = tlv(
        der::SEQUENCE,
        &[
            alg,
            tlv(der::OCTET_STRING, &sha1(&issuer.subject_der)),
            tlv(der::OCTET_STRING, &key_hash),
            tlv(der::INTEGER, &cert.serial),
        ]
        .concat(),
    );
    let request = tlv(der::SEQUENCE, &cert_id);
    let list = tlv(der::SEQUENCE, &request);
    let tbs = tlv(der::SEQUENCE, &list);
    tlv(der::SEQUENCE, &tbs)
}

fn oid_der_sha1() -> Vec<u8> {
    // 1.3.14.3.2.26
    vec![0x2b, 0x0e, 0x03, 0x02, 0x1a]
}

enum OcspStatus {
    Good,
    Revoked,
    Unknown,
}

fn bad(what: &'static str) -> impl Fn(der::DerError) -> String {
    move |e| format!("malformed {what}: {e}")
}

fn ocsp_status(
    body: &[u8],
    cert: &Certificate,
    issuer: &Certificate,
    now: OffsetDateTime,
    signing_time: Option<OffsetDateTime>,
) -> Result<OcspStatus, String> {
    if body.len() > MAX_OCSP_LEN {
        return Err(format!(
            "{} bytes is more than the {MAX_OCSP_LEN} sigil reads",
            body.len()
        ));
    }
    let outer = der::parse_single(body).map_err(bad("OCSPResponse"))?;
    let mut r = outer.reader();
    let status = r
        .read(0x0a, "responseStatus")
        .map_err(bad("OCSPResponse"))?;
    if status.value != [0] {
        return Err(format!(
            "the responder answered status {:?} (not successful)",
            status.value
        ));
    }
    let explicit = r
        .read(der::context(0, true), "responseBytes")
        .map_err(bad("OCSPResponse"))?;
    let mut er = explicit.reader();
    let rb = er
        .read(der::SEQUENCE, "ResponseBytes")
        .map_err(bad("OCSPResponse"))?;
    let mut rbr = rb.reader();
    let kind = rbr
        .read(der::OID, "responseType")
        .and_then(|t| t.oid())
        .map_err(bad("ResponseBytes"))?;
    if kind != OID_OCSP_BASIC {
        return Err(format!("response type {kind} is not id-pkix-ocsp-basic"));
    }
    let inner = rbr
        .read(der::OCTET_STRING, "response")
        .map_err(bad("ResponseBytes"))?;
    let basic = der::parse_single(inner.value).map_err(bad("BasicOCSPResponse"))?;
    let mut br = basic.reader();
    let tbs = br
        .read(der::SEQUENCE, "tbsResponseData")
        .map_err(bad("BasicOCSPResponse"))?;
    let sig_alg = br
        .read(der::SEQUENCE, "signatureAlgorithm")
        .map_err(bad("BasicOCSPResponse"))?;
    let sig = br
        .read(der::BIT_STRING, "signature")
        .map_err(bad("BasicOCSPResponse"))?;
    let certs = br
        .read_optional(der::context(0, true))
        .map_err(bad("BasicOCSPResponse"))?;

    let alg_oid = sig_alg
        .reader()
        .read(der::OID, "algorithm")
        .and_then(|t| t.oid())
        .map_err(bad("signatureAlgorithm"))?;
    let alg = SignatureAlgorithm::from_oid(&alg_oid)
        .ok_or_else(|| format!("signature algorithm {alg_oid} is not supported"))?;
    let signature = sig.value.get(1..).unwrap_or_default();
    let signer = responder(issuer, certs, now)?;
    let key = signer
        .public_key
        .as_ref()
        .ok_or("the responder's key type is not supported")?;
    verify_with_algorithm(key, alg, tbs.raw, signature)
        .map_err(|e| format!("the response signature does not verify: {e}"))?;

    let mut tr = tbs.reader();
    tr.read_optional(der::context(0, true))
        .map_err(bad("ResponseData"))?;
    tr.read_any().map_err(bad("ResponseData"))?; // responderID
    tr.read(der::GENERALIZED_TIME, "producedAt")
        .map_err(bad("ResponseData"))?;
    let responses = tr
        .read(der::SEQUENCE, "responses")
        .map_err(bad("ResponseData"))?;
    let mut rr = responses.reader();
    while !rr.is_empty() {
        let single = rr
            .read(der::SEQUENCE, "SingleResponse")
            .map_err(bad("responses"))?;
        if let Some(found) = single_response(&single, cert, issuer, now, signing_time)? {
            return Ok(found);
        }
    }
    Err("the response does not mention the certificate".into())
}

/// The certificate that signed the response: the issuer itself, or a
/// delegated responder the issuer certified for OCSP signing.
fn responder(
    issuer: &Certificate,
    certs: Option<Tlv<'_>>,
    now: OffsetDateTime,
) -> Result<Certificate, String> {
    let Some(certs) = certs else {
        return Ok(issuer.clone());
    };
    let mut outer = certs.reader();
    let seq = outer.read(der::SEQUENCE, "certs").map_err(bad("certs"))?;
    let mut r = seq.reader();
    let mut delegated = None;
    let mut count = 0;
    while !r.is_empty() && count < 8 {
        count += 1;
        let c = r.read(der::SEQUENCE, "Certificate").map_err(bad("certs"))?;
        let cert =
            Certificate::from_der(c.raw).map_err(|e| format!("responder certificate: {e}"))?;
        if cert.der == issuer.der {
            return Ok(issuer.clone());
        }
        if delegated.is_none() {
            delegated = Some(cert);
        }
    }
    let Some(cert) = delegated else {
        return Ok(issuer.clone());
    };
    cert.verify_issued_by(issuer).map_err(|e| {
        format!("the responder certificate is not issued by the certificate's issuer: {e}")
    })?;
    if !cert.has_eku(OID_EKU_OCSP_SIGNING) {
        return Err(format!(
            "responder certificate `{}` lacks the OCSPSigning extended key usage",
            cert.subject
        ));
    }
    if !cert.is_valid_at(now) {
        return Err(format!(
            "responder certificate `{}` is not valid now",
            cert.subject
        ));
    }
    Ok(cert)
}

fn single_response(
    single: &Tlv<'_>,
    cert: &Certificate,
    issuer: &Certificate,
    now: OffsetDateTime,
    signing_time: Option<OffsetDateTime>,
) -> Result<Option<OcspStatus>, String> {
    let mut r = single.reader();
    let cert_id = r
        .read(der::SEQUENCE, "certID")
        .map_err(bad("SingleResponse"))?;
    let mut cr = cert_id.reader();
    let alg = cr
        .read(der::SEQUENCE, "hashAlgorithm")
        .map_err(bad("CertID"))?;
    let alg_oid = alg
        .reader()
        .read(der::OID, "algorithm")
        .and_then(|t| t.oid())
        .map_err(bad("CertID"))?;
    let name_hash = cr
        .read(der::OCTET_STRING, "issuerNameHash")
        .map_err(bad("CertID"))?;
    let key_hash = cr
        .read(der::OCTET_STRING, "issuerKeyHash")
        .map_err(bad("CertID"))?;
    let serial = cr
        .read(der::INTEGER, "serialNumber")
        .map_err(bad("CertID"))?;
    let hash = |data: &[u8]| -> Option<Vec<u8>> {
        match alg_oid.as_str() {
            OID_SHA1 => Some(sha1(data)),
            OID_SHA256 => Some(HashAlgorithm::Sha256.digest(data)),
            _ => None,
        }
    };
    let key_bits = spki_key_bits(&issuer.spki_der).unwrap_or_default();
    let matches = serial.value == cert.serial.as_slice()
        && hash(&issuer.subject_der).as_deref() == Some(name_hash.value)
        && hash(key_bits).as_deref() == Some(key_hash.value);
    if !matches {
        return Ok(None);
    }
    let status = r.read_any().map_err(bad("SingleResponse"))?;
    let this_update = r
        .read(der::GENERALIZED_TIME, "thisUpdate")
        .and_then(|t| t.generalized_time())
        .map_err(bad("SingleResponse"))?;
    let next_update = match r
        .read_optional(der::context(0, true))
        .map_err(bad("SingleResponse"))?
    {
        Some(explicit) => Some(
            explicit
                .reader()
                .read(der::GENERALIZED_TIME, "nextUpdate")
                .and_then(|t| t.generalized_time())
                .map_err(bad("SingleResponse"))?,
        ),
        None => None,
    };
    let mut invalidity = None;
    if let Some(explicit) = r
        .read_optional(der::context(1, true))
        .map_err(bad("SingleResponse"))?
    {
        let mut er = explicit.reader();
        let exts = er
            .read(der::SEQUENCE, "singleExtensions")
            .map_err(bad("SingleResponse"))?;
        let mut xr = exts.reader();
        while !xr.is_empty() {
            let ext = xr
                .read(der::SEQUENCE, "Extension")
                .map_err(bad("singleExtensions"))?;
            let mut e = ext.reader();
            let oid = e
                .read(der::OID, "extnID")
                .and_then(|t| t.oid())
                .map_err(bad("Extension"))?;
            let critical = match e.read_optional(der::BOOLEAN).map_err(bad("Extension"))? {
                Some(b) => b.boolean().map_err(bad("Extension"))?,
                None => false,
            };
            let value = e
                .read(der::OCTET_STRING, "extnValue")
                .map_err(bad("Extension"))?;
            if oid == OID_INVALIDITY_DATE {
                invalidity = der::parse_single(value.value)
                    .and_then(|t| t.generalized_time())
                    .ok();
            } else if critical {
                return Err(format!(
                    "the response has critical extension {oid}, which sigil does not support"
                ));
            }
        }
    }
    if this_update > now {
        return Err("the response's thisUpdate is in the future".into());
    }
    if let Some(next) = next_update
        && now > next
    {
        return Err(format!("the response expired at {next} (nextUpdate)"));
    }
    Ok(Some(match status.tag {
        0x80 => OcspStatus::Good,
        0xa1 => {
            let mut sr = status.reader();
            sr.read(der::GENERALIZED_TIME, "revocationTime")
                .and_then(|t| t.generalized_time())
                .map_err(bad("RevokedInfo"))?;
            match (signing_time, invalidity) {
                (Some(signed), Some(invalid)) if signed < invalid => OcspStatus::Good,
                _ => OcspStatus::Revoked,
            }
        }
        0x82 => OcspStatus::Unknown,
        other => return Err(format!("certStatus has unexpected tag 0x{other:02x}")),
    }))
}
