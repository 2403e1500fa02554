//! The signing certificate chain: its shape (leaf first, each certificate
//! issued by the next, ending in a self-signed root), the Notary Project
//! certificate requirements for the signing certificate and its CAs, and
//! whether it leads to the trust store.

use sigil_verifier::x509::Certificate;
use time::OffsetDateTime;

const OID_KEY_USAGE: &str = "2.5.29.15";
const OID_BASIC_CONSTRAINTS: &str = "2.5.29.19";
/// Extended key usages a code signing certificate must not carry: serverAuth,
/// clientAuth, emailProtection, timeStamping, OCSPSigning.
const EXCLUDED_EKUS: [(&str, &str); 5] = [
    ("1.3.6.1.5.5.7.3.1", "serverAuth"),
    ("1.3.6.1.5.5.7.3.2", "clientAuth"),
    ("1.3.6.1.5.5.7.3.4", "emailProtection"),
    ("1.3.6.1.5.5.7.3.8", "timeStamping"),
    ("1.3.6.1.5.5.7.3.9", "OCSPSigning"),
];

/// Why a chain is not a valid code signing chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("certificate chain: {0}")]
pub struct ChainError(pub String);

/// Checks the chain's shape and the certificate requirements (not validity
/// in time, which depends on the signing time the other checks establish).
pub fn validate_code_signing_chain(chain: &[Certificate]) -> Result<(), ChainError> {
    let fail = |m: String| Err(ChainError(m));
    let Some((leaf, _)) = chain.split_first() else {
        return fail("the chain is empty".into());
    };
    if chain.len() == 1 {
        if !leaf.is_self_signed() {
            return fail(format!(
                "the only certificate, `{}`, is not self-signed",
                leaf.subject
            ));
        }
        return check_leaf(leaf);
    }
    let last = chain.len() - 1;
    for (i, cert) in chain.iter().enumerate() {
        if i == last {
            if !cert.is_self_signed() {
                return fail(format!(
                    "the last certificate, `{}`, is not a self-signed root; the chain must end with its root",
                    cert.subject
                ));
            }
        } else {
            if cert.is_self_signed() {
                let what = if i == 0 { "signing" } else { "intermediate" };
                return fail(format!(
                    "the {what} certificate `{}` is self-signed; only the last certificate may be",
                    cert.subject
                ));
            }
            let Some(parent) = chain.get(i + 1) else {
                return fail("the chain ends early".into());
            };
            if let Err(e) = cert.verify_issued_by(parent) {
                return fail(format!(
                    "`{}` is not issued by `{}`: {e}",
                    cert.subject, parent.subject
                ));
            }
        }
        if i == 0 {
            check_leaf(cert)?;
        } else {
            check_ca(cert, i - 1)?;
        }
    }
    Ok(())
}

fn check_leaf(cert: &Certificate) -> Result<(), ChainError> {
    let fail = |m: &str| {
        Err(ChainError(format!(
            "signing certificate `{}`: {m}",
            cert.subject
        )))
    };
    if cert.is_ca {
        return fail("is a CA certificate (basicConstraints cA=true); it must be a leaf");
    }
    let Some(ku) = cert.extension(OID_KEY_USAGE) else {
        return fail("has no key usage extension");
    };
    if !ku.critical {
        return fail("its key usage extension is not critical");
    }
    if cert.digital_signature != Some(true) {
        return fail("its key usage lacks digitalSignature");
    }
    if cert.key_cert_sign == Some(true) {
        return fail("its key usage allows keyCertSign, which a signing certificate must not");
    }
    if let Some(ekus) = &cert.extended_key_usages {
        for (oid, name) in EXCLUDED_EKUS {
            if ekus.iter().any(|e| e == oid) {
                return fail(&format!(
                    "its extended key usage includes {name}, which a code signing certificate must not"
                ));
            }
        }
    }
    Ok(())
}

fn check_ca(cert: &Certificate, below: usize) -> Result<(), ChainError> {
    let fail = |m: String| {
        Err(ChainError(format!(
            "CA certificate `{}`: {m}",
            cert.subject
        )))
    };
    if cert.extension(OID_BASIC_CONSTRAINTS).is_none() || !cert.is_ca {
        return fail("is not a CA (basicConstraints cA=true is required)".into());
    }
    if let Some(limit) = cert.path_len
        && (limit as usize) < below
    {
        return fail(format!(
            "its pathLenConstraint {limit} allows fewer CAs below it than the chain has ({below})"
        ));
    }
    let Some(ku) = cert.extension(OID_KEY_USAGE) else {
        return fail("has no key usage extension".into());
    };
    if !ku.critical {
        return fail("its key usage extension is not critical".into());
    }
    if cert.key_cert_sign != Some(true) {
        return fail("its key usage lacks keyCertSign".into());
    }
    Ok(())
}

/// The first certificate of the chain that the trust store holds (by DER).
pub fn trusted_anchor<'c>(
    chain: &'c [Certificate],
    trusted: &[&Certificate],
) -> Option<&'c Certificate> {
    chain
        .iter()
        .find(|c| trusted.iter().any(|t| t.der == c.der))
}

/// The first certificate of `chain` not valid at `at`.
pub fn invalid_at(chain: &[Certificate], at: OffsetDateTime) -> Option<&Certificate> {
    chain.iter().find(|c| !c.is_valid_at(at))
}
