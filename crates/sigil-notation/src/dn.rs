//! Distinguished names for `x509.subject` trusted identities: an RFC 4514
//! string parsed into attribute/value pairs, and the signing certificate's
//! subject read into the same form. An identity matches when each of its
//! attributes has the same value in the subject (a subset match), as the
//! Notary Project trust policy specifies.

use std::collections::BTreeMap;

use x509_parser::prelude::{FromDer as _, X509Certificate};

/// Attributes every identity must name.
const MANDATORY: [&str; 3] = ["C", "ST", "O"];
/// Longest distinguished name read.
pub const MAX_DN_LEN: usize = 4096;

/// A distinguished name as attribute type → value (types upper-cased keywords).
pub type Dn = BTreeMap<String, String>;

/// Why a distinguished name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnError {
    /// Not RFC 4514.
    #[error("distinguished name `{dn}` is not valid RFC 4514: {reason}")]
    Syntax {
        /// The input.
        dn: String,
        /// What is wrong.
        reason: String,
    },
    /// A required attribute is missing.
    #[error(
        "distinguished name `{dn}` has no `{attribute}`; an x509.subject identity must name at least C, ST (or S) and O"
    )]
    Mandatory {
        /// The input.
        dn: String,
        /// The missing attribute.
        attribute: &'static str,
    },
}

fn syntax(dn: &str, reason: impl Into<String>) -> DnError {
    DnError::Syntax {
        dn: dn.to_owned(),
        reason: reason.into(),
    }
}

/// Parses an `x509.subject` value.
pub fn parse(dn: &str) -> Result<Dn, DnError> {
    if dn.len() > MAX_DN_LEN {
        return Err(syntax(dn, format!("longer than {MAX_DN_LEN} bytes")));
    }
    if dn.contains("=#") {
        return Err(syntax(dn, "hex-encoded values (`=#`) are not supported"));
    }
    let mut out = Dn::new();
    for rdn in split_unescaped(dn, &[',', ';']) {
        if split_unescaped(&rdn, &['+']).len() > 1 {
            return Err(syntax(dn, "multi-valued RDNs (`+`) are not supported"));
        }
        let (kind, value) = rdn
            .split_once('=')
            .ok_or_else(|| syntax(dn, format!("`{}` has no `=`", rdn.trim())))?;
        let kind = normalise_type(kind.trim());
        if kind.is_empty() {
            return Err(syntax(dn, "an attribute type is empty"));
        }
        let value = unescape(value.trim()).map_err(|r| syntax(dn, r))?;
        if out.insert(kind.clone(), value).is_some() {
            return Err(syntax(dn, format!("attribute `{kind}` appears twice")));
        }
    }
    if out.is_empty() {
        return Err(syntax(dn, "it is empty"));
    }
    for attribute in MANDATORY {
        if out.get(attribute).is_none_or(String::is_empty) {
            return Err(DnError::Mandatory {
                dn: dn.to_owned(),
                attribute,
            });
        }
    }
    Ok(out)
}

/// Whether every attribute of `identity` has the same value in `subject`.
pub fn is_subset(identity: &Dn, subject: &Dn) -> bool {
    identity.iter().all(|(k, v)| subject.get(k) == Some(v))
}

/// The subject of a DER certificate in the same form; `None` when it cannot
/// be read or repeats an attribute (which no identity can then match).
pub fn subject_of(cert_der: &[u8]) -> Option<Dn> {
    let (_, cert) = X509Certificate::from_der(cert_der).ok()?;
    let mut out = Dn::new();
    for rdn in cert.subject().iter() {
        for attr in rdn.iter() {
            let oid = attr.attr_type().to_id_string();
            let kind = match oid.as_str() {
                "2.5.4.3" => "CN",
                "2.5.4.6" => "C",
                "2.5.4.8" => "ST",
                "2.5.4.7" => "L",
                "2.5.4.10" => "O",
                "2.5.4.11" => "OU",
                "2.5.4.9" => "STREET",
                "2.5.4.17" => "POSTALCODE",
                "2.5.4.5" => "SERIALNUMBER",
                other => other,
            }
            .to_owned();
            let value = attr.as_str().ok()?.to_owned();
            if out.insert(kind, value).is_some() {
                return None;
            }
        }
    }
    Some(out)
}

/// A subject for messages: `C=US, ST=WA, O=...` in the certificate's order.
pub fn display(dn: &Dn) -> String {
    dn.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn normalise_type(kind: &str) -> String {
    let upper = kind.to_ascii_uppercase();
    match upper.as_str() {
        "S" => "ST".to_owned(),
        "CN" | "C" | "ST" | "L" | "O" | "OU" | "STREET" | "POSTALCODE" | "SERIALNUMBER" => upper,
        _ => kind.to_owned(),
    }
}

/// Splits on separators that are neither escaped nor inside quotes.
fn split_unescaped(s: &str, seps: &[char]) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    let mut quoted = false;
    for c in s.chars() {
        if escaped {
            current.push('\\');
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
            current.push(c);
        } else if !quoted && seps.contains(&c) {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    if escaped {
        current.push('\\');
    }
    parts.push(current);
    parts
}

fn unescape(value: &str) -> Result<String, String> {
    let inner = match value.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .ok_or_else(|| format!("value `{value}` opens a quote it does not close"))?,
        None => value,
    };
    let mut bytes = Vec::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let Some(next) = chars.next() else {
            return Err(format!("value `{value}` ends with a lone backslash"));
        };
        if next.is_ascii_hexdigit() {
            let low = chars
                .next()
                .filter(char::is_ascii_hexdigit)
                .ok_or_else(|| format!("value `{value}` has a broken hex escape"))?;
            let pair: String = [next, low].iter().collect();
            bytes.push(u8::from_str_radix(&pair, 16).map_err(|e| e.to_string())?);
        } else {
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(next.encode_utf8(&mut buf).as_bytes());
        }
    }
    String::from_utf8(bytes).map_err(|_| format!("value `{value}` is not UTF-8 after unescaping"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_escapes_quotes_and_the_s_alias() {
        let dn = parse(r#"C=US, S=WA, O=Acme\, Inc., CN="a+b""#).unwrap_or_default();
        assert_eq!(dn.get("ST").map(String::as_str), Some("WA"));
        assert_eq!(dn.get("O").map(String::as_str), Some("Acme, Inc."));
        assert_eq!(dn.get("CN").map(String::as_str), Some("a+b"));
    }

    #[test]
    fn refuses_what_the_trust_policy_specification_refuses() {
        assert!(matches!(
            parse("C=US, O=Acme"),
            Err(DnError::Mandatory {
                attribute: "ST",
                ..
            })
        ));
        assert!(matches!(
            parse("C=US, ST=WA, O=A, O=B"),
            Err(DnError::Syntax { .. })
        ));
        assert!(matches!(
            parse("C=US+ST=WA, O=A"),
            Err(DnError::Syntax { .. })
        ));
        assert!(matches!(
            parse("C=US, ST=WA, O=#0403"),
            Err(DnError::Syntax { .. })
        ));
    }

    #[test]
    fn an_identity_matches_a_superset_subject_only() {
        let id = parse("C=US, ST=WA, O=Acme").unwrap_or_default();
        let subject = parse("C=US, ST=WA, O=Acme, CN=signer").unwrap_or_default();
        let other = parse("C=US, ST=WA, O=Acme Two, CN=signer").unwrap_or_default();
        assert!(is_subset(&id, &subject));
        assert!(!is_subset(&id, &other));
    }
}
