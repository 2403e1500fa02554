//! Fulcio certificate chain validation: decides whether a leaf certificate was
//! issued by a certificate authority of the trust root that was valid at the
//! verified signing time, through that authority's own chain.
//!
//! Only the trust root supplies CA certificates. Intermediates a bundle carries
//! (v0.1/v0.2 `x509CertificateChain`) are never trusted on their own: each must
//! be byte-identical to a certificate of the authority that matched, and a
//! bundle that carries a root is rejected outright.

use time::OffsetDateTime;

use crate::sct::describe;
use crate::trust::{CertificateAuthority, TrustedRoot, format_rfc3339};
use crate::x509::{Certificate, OID_EKU_CODE_SIGNING};

/// OID of `anyExtendedKeyUsage`.
const OID_EKU_ANY: &str = "2.5.29.37.0";

/// Critical extensions a Fulcio leaf may carry: key usage, subject alternative
/// name, basic constraints, extended key usage. Any other critical extension
/// means the leaf asks for semantics sigil does not implement.
const LEAF_CRITICAL_ALLOWED: &[&str] = &["2.5.29.15", "2.5.29.17", "2.5.29.19", "2.5.29.37"];

/// Which trust-root authority issued a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainMatch {
    /// Index into `TrustedRoot::certificate_authorities`.
    pub authority: usize,
    /// Index, in that authority's `chain`, of the certificate that signed the leaf.
    pub issuer: usize,
}

/// Why a leaf certificate does not chain to the trust root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// The bundle's certificate chain contains a self-issued (root) certificate.
    #[error(
        "bundle carries a root certificate ({cert}); roots must come from the trust root, so \
         remove it from the bundle's certificate chain"
    )]
    BundleCarriesRoot {
        /// Description of the root certificate.
        cert: String,
    },
    /// The trust root has no certificate authorities at all.
    #[error(
        "the trust root has no certificate authorities, so no certificate can be verified; use a \
         trust root with Fulcio CAs or verify with a key"
    )]
    NoAuthorities,
    /// The leaf certificate is itself a CA.
    #[error(
        "signing certificate {cert} is a CA certificate (basicConstraints cA=true); a signing certificate must be a leaf"
    )]
    LeafIsCa {
        /// Description of the leaf.
        cert: String,
    },
    /// The leaf lacks the codeSigning extended key usage.
    #[error(
        "signing certificate {cert} lacks the codeSigning extended key usage; it was not issued for signing artifacts"
    )]
    LeafNotCodeSigning {
        /// Description of the leaf.
        cert: String,
    },
    /// The leaf's key usage does not allow digitalSignature.
    #[error(
        "signing certificate {cert} lacks the digitalSignature key usage; it was not issued for signing"
    )]
    LeafNotDigitalSignature {
        /// Description of the leaf.
        cert: String,
    },
    /// The leaf carries a critical extension sigil does not understand.
    #[error(
        "signing certificate {cert} has critical extension {oid}, which sigil does not understand; it is not a Fulcio certificate sigil can trust"
    )]
    LeafUnknownCriticalExtension {
        /// Description of the leaf.
        cert: String,
        /// Dotted OID of the extension.
        oid: String,
    },
    /// A certificate is not valid at the signing time.
    #[error(
        "certificate {cert} is valid from {not_before} to {not_after}, but the signature was made \
         at {at}; the certificate had expired or was not yet valid when signing"
    )]
    NotValidAt {
        /// Description of the certificate.
        cert: String,
        /// Start of validity (RFC 3339).
        not_before: String,
        /// End of validity (RFC 3339).
        not_after: String,
        /// The signing time (RFC 3339).
        at: String,
    },
    /// No authority of the trust root has a certificate named like the leaf's issuer.
    #[error(
        "signing certificate with serial {serial} was issued by `{issuer}`, which is not a \
         certificate authority of the trust root; use the trust root of the Sigstore instance \
         that issued it"
    )]
    UnknownIssuer {
        /// The leaf's serial number, hex.
        serial: String,
        /// The leaf's issuer name.
        issuer: String,
    },
    /// The matching authority was not valid at the signing time.
    #[error(
        "certificate authority {authority} is named as the signing certificate's issuer, but the \
         trust root trusts it only {valid_for} and the signature was made at {at}"
    )]
    AuthorityNotValidAt {
        /// The authority's URI and name.
        authority: String,
        /// The authority's `validFor`, for the message.
        valid_for: String,
        /// The signing time (RFC 3339).
        at: String,
    },
    /// The leaf's signature does not verify with the would-be issuer's key.
    #[error(
        "signing certificate {cert} is not signed by `{issuer}` of certificate authority \
         {authority}: {reason}; the certificate was altered or comes from another CA"
    )]
    LeafSignature {
        /// Description of the leaf.
        cert: String,
        /// Subject of the would-be issuer.
        issuer: String,
        /// The authority's URI and name.
        authority: String,
        /// The signature failure.
        reason: String,
    },
    /// A CA certificate of the trust root does not qualify as a CA.
    #[error(
        "certificate {cert} of certificate authority {authority} cannot issue certificates: {reason}; fix the trust root"
    )]
    BadCa {
        /// Description of the CA certificate.
        cert: String,
        /// The authority's URI and name.
        authority: String,
        /// What it lacks.
        reason: String,
    },
    /// A CA certificate of the trust root is not signed by the next one.
    #[error("certificate authority {authority}'s chain is broken: {reason}; fix the trust root")]
    BrokenAuthorityChain {
        /// The authority's URI and name.
        authority: String,
        /// What failed.
        reason: String,
    },
    /// A bundle certificate is not part of the authority that issued the leaf.
    #[error(
        "bundle carries certificate {cert}, which is not part of certificate authority \
         {authority} that issued the signing certificate; intermediates must come from the trust \
         root, so remove it from the bundle"
    )]
    UntrustedBundleCertificate {
        /// Description of the bundle certificate.
        cert: String,
        /// The authority's URI and name.
        authority: String,
    },
}

impl ChainError {
    /// How far verification got before this failure; with several
    /// authorities, the failure from the one that got furthest is reported.
    fn rank(&self) -> u8 {
        match self {
            Self::UnknownIssuer { .. } | Self::NoAuthorities => 0,
            Self::LeafSignature { .. } => 1,
            Self::AuthorityNotValidAt { .. } => 2,
            Self::NotValidAt { .. } | Self::BadCa { .. } | Self::BrokenAuthorityChain { .. } => 3,
            Self::UntrustedBundleCertificate { .. } => 4,
            Self::BundleCarriesRoot { .. }
            | Self::LeafIsCa { .. }
            | Self::LeafNotCodeSigning { .. }
            | Self::LeafNotDigitalSignature { .. }
            | Self::LeafUnknownCriticalExtension { .. } => 5,
        }
    }
}

/// Verifies that `leaf` chains to a certificate authority of `root` that was
/// valid at `at`, the verified signing time (never "now": Fulcio certificates
/// live ten minutes). `bundle_chain` is what the bundle carried after the
/// leaf; it adds no trust and is only checked for consistency.
///
/// Every authority is tried, since a trust root may hold several with the
/// same names (e.g. across key rotations); the first that verifies wins.
pub fn verify_fulcio_chain(
    leaf: &Certificate,
    bundle_chain: &[Certificate],
    root: &TrustedRoot,
    at: OffsetDateTime,
) -> Result<ChainMatch, ChainError> {
    if let Some(r) = bundle_chain.iter().find(|c| c.subject_der == c.issuer_der) {
        return Err(ChainError::BundleCarriesRoot { cert: describe(r) });
    }
    check_leaf(leaf, at)?;
    if root.certificate_authorities.is_empty() {
        return Err(ChainError::NoAuthorities);
    }
    let mut best: Option<ChainError> = None;
    for (index, authority) in root.certificate_authorities.iter().enumerate() {
        match try_authority(leaf, bundle_chain, authority, at) {
            Ok(issuer) => {
                return Ok(ChainMatch {
                    authority: index,
                    issuer,
                });
            }
            Err(e) => {
                if best.as_ref().is_none_or(|b| e.rank() > b.rank()) {
                    best = Some(e);
                }
            }
        }
    }
    Err(best.unwrap_or(ChainError::NoAuthorities))
}

/// Checks what makes a certificate a Fulcio signing leaf, independently of
/// who issued it.
fn check_leaf(leaf: &Certificate, at: OffsetDateTime) -> Result<(), ChainError> {
    let cert = || describe(leaf);
    if leaf.is_ca {
        return Err(ChainError::LeafIsCa { cert: cert() });
    }
    if let Some(ext) = leaf
        .extensions
        .iter()
        .find(|e| e.critical && !LEAF_CRITICAL_ALLOWED.contains(&e.oid.as_str()))
    {
        return Err(ChainError::LeafUnknownCriticalExtension {
            cert: cert(),
            oid: ext.oid.clone(),
        });
    }
    if !leaf.has_eku(OID_EKU_CODE_SIGNING) {
        return Err(ChainError::LeafNotCodeSigning { cert: cert() });
    }
    if leaf.digital_signature != Some(true) {
        return Err(ChainError::LeafNotDigitalSignature { cert: cert() });
    }
    check_validity(leaf, at)
}

fn check_validity(cert: &Certificate, at: OffsetDateTime) -> Result<(), ChainError> {
    if cert.is_valid_at(at) {
        return Ok(());
    }
    Err(ChainError::NotValidAt {
        cert: describe(cert),
        not_before: format_rfc3339(cert.not_before),
        not_after: format_rfc3339(cert.not_after),
        at: format_rfc3339(at),
    })
}

fn authority_name(a: &CertificateAuthority) -> String {
    if a.name.is_empty() {
        format!("`{}`", a.uri)
    } else {
        format!("`{}` ({})", a.uri, a.name)
    }
}

/// Tries one authority; returns the index of the leaf's issuer in its chain.
fn try_authority(
    leaf: &Certificate,
    bundle_chain: &[Certificate],
    authority: &CertificateAuthority,
    at: OffsetDateTime,
) -> Result<usize, ChainError> {
    // Names (and key identifiers, when both sides have them) select the
    // candidates cheaply, so authorities of other instances cost no signature
    // check and do not drown the useful failure.
    let candidates: Vec<(usize, &Certificate)> = authority
        .chain
        .iter()
        .enumerate()
        .filter(|(_, ca)| {
            ca.subject_der == leaf.issuer_der
                && match (&leaf.authority_key_id, &ca.subject_key_id) {
                    (Some(aki), Some(ski)) => aki == ski,
                    _ => true,
                }
        })
        .collect();
    if candidates.is_empty() {
        return Err(ChainError::UnknownIssuer {
            serial: hex::encode(&leaf.serial),
            issuer: leaf.issuer.clone(),
        });
    }
    if !authority.valid_for.contains(at) {
        let valid_for = match (authority.valid_for.start, authority.valid_for.end) {
            (None, _) => "never (its validFor has no start)".to_owned(),
            (Some(s), None) => format!("from {}", format_rfc3339(s)),
            (Some(s), Some(e)) => format!("from {} to {}", format_rfc3339(s), format_rfc3339(e)),
        };
        return Err(ChainError::AuthorityNotValidAt {
            authority: authority_name(authority),
            valid_for,
            at: format_rfc3339(at),
        });
    }
    let mut best: Option<ChainError> = None;
    for (index, issuer) in candidates {
        let result = leaf
            .verify_issued_by(issuer)
            .map_err(|e| ChainError::LeafSignature {
                cert: describe(leaf),
                issuer: issuer.subject.clone(),
                authority: authority_name(authority),
                reason: e.to_string(),
            })
            .and_then(|()| check_ca_path(authority, index, at))
            .and_then(|()| check_bundle_chain(bundle_chain, authority));
        match result {
            Ok(()) => return Ok(index),
            Err(e) => {
                if best.as_ref().is_none_or(|b| e.rank() > b.rank()) {
                    best = Some(e);
                }
            }
        }
    }
    Err(best.unwrap_or(ChainError::NoAuthorities))
}

/// Walks the authority's chain from the leaf's issuer (`from`) to its root.
fn check_ca_path(
    authority: &CertificateAuthority,
    from: usize,
    at: OffsetDateTime,
) -> Result<(), ChainError> {
    let path = authority.chain.get(from..).unwrap_or_default();
    let bad = |ca: &Certificate, reason: String| ChainError::BadCa {
        cert: describe(ca),
        authority: authority_name(authority),
        reason,
    };
    // RFC 5280 §4.2.1.9: pathLenConstraint counts the non-self-issued
    // intermediates below a CA, the leaf excluded.
    let mut intermediates_below: u32 = 0;
    let mut certs = path.iter().peekable();
    while let Some(ca) = certs.next() {
        check_validity(ca, at)?;
        if !ca.is_ca {
            return Err(bad(ca, "basicConstraints cA is not true".into()));
        }
        if ca.key_cert_sign != Some(true) {
            return Err(bad(ca, "key usage lacks keyCertSign".into()));
        }
        if let Some(limit) = ca.path_len
            && intermediates_below > limit
        {
            return Err(bad(
                ca,
                format!(
                    "pathLenConstraint {limit} allows fewer than the {intermediates_below} \
                         intermediate(s) below it"
                ),
            ));
        }
        // Extended key usage nests (as in the Web PKI and Go's verifier): a CA
        // restricted to other usages cannot vouch for a code-signing leaf.
        if ca.extended_key_usages.as_ref().is_some_and(|v| {
            !v.iter()
                .any(|o| o == OID_EKU_CODE_SIGNING || o == OID_EKU_ANY)
        }) {
            return Err(bad(
                ca,
                "its extended key usage does not include codeSigning".into(),
            ));
        }
        match certs.peek() {
            Some(parent) => {
                crate::x509::verify_trust_link(ca, parent).map_err(|e| {
                    ChainError::BrokenAuthorityChain {
                        authority: authority_name(authority),
                        reason: e.to_string(),
                    }
                })?;
            }
            None => {
                // The anchor is trusted because the trust root lists it, not
                // because of its self-signature (RFC 5280 §6.1 never checks
                // it); requiring it to be self-issued catches truncated chains.
                if ca.subject_der != ca.issuer_der {
                    return Err(ChainError::BrokenAuthorityChain {
                        authority: authority_name(authority),
                        reason: format!(
                            "its last certificate {} is not a root (issued by `{}`)",
                            describe(ca),
                            ca.issuer
                        ),
                    });
                }
            }
        }
        if ca.subject_der != ca.issuer_der {
            intermediates_below = intermediates_below.saturating_add(1);
        }
    }
    Ok(())
}

fn check_bundle_chain(
    bundle_chain: &[Certificate],
    authority: &CertificateAuthority,
) -> Result<(), ChainError> {
    match bundle_chain
        .iter()
        .find(|c| !authority.chain.iter().any(|ca| ca.der == c.der))
    {
        None => Ok(()),
        Some(c) => Err(ChainError::UntrustedBundleCertificate {
            cert: describe(c),
            authority: authority_name(authority),
        }),
    }
}

/// Conformance material shared by the tests of `chain`, `sct` and `identity`.
#[cfg(test)]
pub(crate) mod test_support {
    use time::OffsetDateTime;

    use crate::trust::TrustedRoot;
    use crate::x509::Certificate;

    pub(crate) use crate::test_support::case_leaf_and_root;

    /// A time inside the leaf's ten-minute validity.
    pub(crate) fn at_issuance(leaf: &Certificate) -> OffsetDateTime {
        leaf.not_before + time::Duration::seconds(30)
    }

    /// The trust-root certificate that issued the leaf, via the chain check.
    pub(crate) fn chain_issuer(
        leaf: &Certificate,
        certs: &[Certificate],
        root: &TrustedRoot,
        at: OffsetDateTime,
    ) -> Certificate {
        let m =
            super::verify_fulcio_chain(leaf, certs.get(1..).unwrap_or_default(), root, at).unwrap();
        root.certificate_authorities[m.authority].chain[m.issuer].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{at_issuance, case_leaf_and_root};
    use super::*;
    use crate::trust::parse_rfc3339;

    fn verify_case(case: &str) -> Result<ChainMatch, ChainError> {
        let (certs, root) = case_leaf_and_root(case);
        let leaf = &certs[0];
        verify_fulcio_chain(leaf, &certs[1..], &root, at_issuance(leaf))
    }

    #[test]
    fn happy_path_leaves_chain_to_the_public_good_fulcio_intermediate() {
        for case in [
            "happy-path-v0.1",
            "happy-path-v0.2",
            "happy-path-v0.3",
            "happy-path-v0.3-new-mediaType",
            "happy-path-intoto-in-dsse-v3",
        ] {
            let r = verify_case(case);
            let m = r.unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(
                m,
                ChainMatch {
                    authority: 1,
                    issuer: 0
                },
                "{case}"
            );
        }
    }

    #[test]
    fn a_custom_trust_root_with_an_rsa_ca_is_honoured() {
        let r = verify_case("bundle-with-sct-with-extensions");
        let m = r.unwrap();
        assert_eq!(
            m,
            ChainMatch {
                authority: 0,
                issuer: 0
            }
        );
    }

    #[test]
    fn a_bundle_carrying_a_root_is_rejected() {
        let r = verify_case("bundle-with-root-cert_fail");
        let err = r.unwrap_err();
        assert!(matches!(err, ChainError::BundleCarriesRoot { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("roots must come from the trust root")
        );
    }

    #[test]
    fn a_bundle_intermediate_must_be_the_trust_roots_own() {
        let (certs, root) = case_leaf_and_root("happy-path-v0.3");
        let at = at_issuance(&certs[0]);
        let trusted = root.certificate_authorities[1].chain[0].clone();
        assert!(verify_fulcio_chain(&certs[0], &[trusted], &root, at).is_ok());
        // The bundle-with-root-cert_fail intermediate has the same name and
        // key as the public-good one but different bytes.
        let (other, _) = case_leaf_and_root("bundle-with-root-cert_fail");
        let foreign = other
            .iter()
            .find(|c| c.is_ca && c.subject_der != c.issuer_der)
            .unwrap()
            .clone();
        let err = verify_fulcio_chain(&certs[0], &[foreign], &root, at).unwrap_err();
        assert!(
            matches!(err, ChainError::UntrustedBundleCertificate { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_leaf_verified_after_its_expiry_fails() {
        let (certs, root) = case_leaf_and_root("happy-path-v0.3");
        let leaf = &certs[0];
        for at in [
            leaf.not_after + time::Duration::seconds(1),
            leaf.not_before - time::Duration::seconds(1),
        ] {
            let err = verify_fulcio_chain(leaf, &[], &root, at).unwrap_err();
            assert!(matches!(err, ChainError::NotValidAt { .. }), "{err}");
        }
        // Both ends of the validity are inside.
        assert!(verify_fulcio_chain(leaf, &[], &root, leaf.not_after).is_ok());
        assert!(verify_fulcio_chain(leaf, &[], &root, leaf.not_before).is_ok());
    }

    #[test]
    fn an_authority_outside_its_valid_for_is_not_trusted() {
        let (certs, mut root) = case_leaf_and_root("happy-path-v0.3");
        for ca in &mut root.certificate_authorities {
            ca.valid_for.end = parse_rfc3339("2024-01-01T00:00:00Z");
        }
        let err = verify_fulcio_chain(&certs[0], &[], &root, at_issuance(&certs[0])).unwrap_err();
        assert!(
            matches!(err, ChainError::AuthorityNotValidAt { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_leaf_not_yet_valid_at_the_log_time_fails() {
        // The case's leaf claims 2030 while its log entry is from 2023-02-01.
        let (certs, root) = case_leaf_and_root("intoto-expired-certificate_fail");
        let at = parse_rfc3339("2023-02-01T00:00:00Z").unwrap();
        let err = verify_fulcio_chain(&certs[0], &[], &root, at).unwrap_err();
        assert!(matches!(err, ChainError::NotValidAt { .. }), "{err}");
        assert!(err.to_string().contains("2030-01-01T00:00:00Z"), "{err}");
    }

    #[test]
    fn a_flipped_tbs_byte_breaks_the_chain() {
        let (certs, root) = case_leaf_and_root("happy-path-v0.3");
        let mut der = certs[0].der.clone();
        // First byte of the serial number: 30 82 LL LL 30 82 LL LL A0 03 02 01 02 02 14 <serial>.
        der[15] ^= 0x01;
        let leaf = Certificate::from_der(&der).unwrap();
        let err = verify_fulcio_chain(&leaf, &[], &root, at_issuance(&leaf)).unwrap_err();
        assert!(matches!(err, ChainError::LeafSignature { .. }), "{err}");
    }

    #[test]
    fn a_leaf_from_another_instance_names_its_issuer() {
        let (certs, _) = case_leaf_and_root("bundle-with-sct-with-extensions");
        let root = TrustedRoot::public_good().unwrap();
        let err = verify_fulcio_chain(&certs[0], &[], &root, at_issuance(&certs[0])).unwrap_err();
        assert!(matches!(err, ChainError::UnknownIssuer { .. }), "{err}");
        assert!(err.to_string().contains("fulcio.test"), "{err}");
    }

    #[test]
    fn a_ca_certificate_is_not_a_signing_leaf() {
        let root = TrustedRoot::public_good().unwrap();
        let intermediate = &root.certificate_authorities[1].chain[0];
        let at = intermediate.not_before + time::Duration::days(1);
        let err = verify_fulcio_chain(intermediate, &[], &root, at).unwrap_err();
        assert!(matches!(err, ChainError::LeafIsCa { .. }), "{err}");
    }

    #[test]
    fn leaf_usages_and_critical_extensions_are_enforced() {
        let (certs, root) = case_leaf_and_root("happy-path-v0.3");
        let at = at_issuance(&certs[0]);

        let mut no_eku = certs[0].clone();
        no_eku.extended_key_usages = Some(vec!["1.3.6.1.5.5.7.3.1".into()]);
        let err = verify_fulcio_chain(&no_eku, &[], &root, at).unwrap_err();
        assert!(
            matches!(err, ChainError::LeafNotCodeSigning { .. }),
            "{err}"
        );

        let mut no_ds = certs[0].clone();
        no_ds.digital_signature = Some(false);
        let err = verify_fulcio_chain(&no_ds, &[], &root, at).unwrap_err();
        assert!(
            matches!(err, ChainError::LeafNotDigitalSignature { .. }),
            "{err}"
        );

        let mut critical = certs[0].clone();
        critical
            .extensions
            .iter_mut()
            .find(|e| e.oid == "1.3.6.1.4.1.57264.1.8")
            .unwrap()
            .critical = true;
        let err = verify_fulcio_chain(&critical, &[], &root, at).unwrap_err();
        assert!(
            matches!(err, ChainError::LeafUnknownCriticalExtension { .. }),
            "{err}"
        );
    }

    #[test]
    fn ca_constraints_in_the_trust_root_are_enforced() {
        let (certs, root) = case_leaf_and_root("happy-path-v0.3");
        let at = at_issuance(&certs[0]);
        let with = |f: &dyn Fn(&mut Certificate)| {
            let mut r = root.clone();
            f(&mut r.certificate_authorities[1].chain[0]);
            verify_fulcio_chain(&certs[0], &[], &r, at).unwrap_err()
        };
        for err in [
            with(&|c| c.is_ca = false),
            with(&|c| c.key_cert_sign = Some(false)),
            with(&|c| c.extended_key_usages = Some(vec!["1.3.6.1.5.5.7.3.8".into()])),
        ] {
            assert!(matches!(err, ChainError::BadCa { .. }), "{err}");
        }
        let mut r = root.clone();
        r.certificate_authorities[1].chain[1].path_len = Some(0);
        r.certificate_authorities[1].chain[0].path_len = None;
        let err = verify_fulcio_chain(&certs[0], &[], &r, at).unwrap_err();
        assert!(err.to_string().contains("pathLenConstraint"), "{err}");
        let mut r = root.clone();
        r.certificate_authorities[1].chain.pop();
        let err = verify_fulcio_chain(&certs[0], &[], &r, at).unwrap_err();
        assert!(
            matches!(err, ChainError::BrokenAuthorityChain { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_tampered_trust_root_intermediate_fails_even_after_a_cached_success() {
        let (certs, root) = case_leaf_and_root("happy-path-v0.3");
        let at = at_issuance(&certs[0]);
        assert!(verify_fulcio_chain(&certs[0], &[], &root, at).is_ok());
        let mut r = root.clone();
        let mut der = r.certificate_authorities[1].chain[0].der.clone();
        // The last byte of the DER is the last byte of the signature.
        *der.last_mut().unwrap() ^= 0x01;
        r.certificate_authorities[1].chain[0] = Certificate::from_der(&der).unwrap();
        let err = verify_fulcio_chain(&certs[0], &[], &r, at).unwrap_err();
        assert!(
            matches!(err, ChainError::BrokenAuthorityChain { .. }),
            "{err}"
        );
        assert!(verify_fulcio_chain(&certs[0], &[], &root, at).is_ok());
    }

    #[test]
    fn an_empty_trust_root_says_so() {
        let (certs, mut root) = case_leaf_and_root("happy-path-v0.3");
        root.certificate_authorities.clear();
        let err = verify_fulcio_chain(&certs[0], &[], &root, at_issuance(&certs[0])).unwrap_err();
        assert_eq!(err, ChainError::NoAuthorities);
    }
}
