//! DSSE envelopes and the in-toto statements they carry: the pre-authentication
//! encoding that signatures cover, and the statement fields that bind an
//! attestation to an artifact digest.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The payload type of an in-toto statement.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// in-toto Statement `_type` values sigil accepts.
pub const STATEMENT_TYPES: &[&str] = &[
    "https://in-toto.io/Statement/v1",
    "https://in-toto.io/Statement/v0.1",
];

/// Why a DSSE payload is not a usable in-toto statement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    /// The envelope's payload type is not in-toto.
    #[error("DSSE payload type is `{0}`, expected `{IN_TOTO_PAYLOAD_TYPE}`")]
    PayloadType(String),
    /// The payload is not a JSON in-toto statement.
    #[error("DSSE payload is not an in-toto statement: {0}")]
    Json(String),
    /// The statement `_type` is unknown.
    #[error("unsupported in-toto statement type `{0}`")]
    StatementType(String),
    /// No subject carries the expected digest.
    #[error(
        "no in-toto subject has sha256 digest {expected} (subjects: {found}); the attestation is for another artifact"
    )]
    SubjectMismatch {
        /// The digest that was expected (hex).
        expected: String,
        /// The subjects' sha256 digests (hex), comma separated.
        found: String,
    },
}

/// The DSSE pre-authentication encoding (PAE) of a payload: what DSSE
/// signatures actually cover.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// One in-toto subject. cosign v3 writes subjects without `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// Optional artifact name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Digests by algorithm name (`sha256` → hex).
    #[serde(default)]
    pub digest: BTreeMap<String, String>,
}

/// An in-toto statement (v0.1 or v1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    /// `_type`.
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// Subjects the statement is about.
    #[serde(default)]
    pub subject: Vec<Subject>,
    /// `predicateType` URI.
    #[serde(rename = "predicateType", default)]
    pub predicate_type: String,
    /// The predicate, as JSON.
    #[serde(default)]
    pub predicate: serde_json::Value,
}

impl Statement {
    /// Parses a DSSE payload as an in-toto statement.
    pub fn from_payload(payload_type: &str, payload: &[u8]) -> Result<Self, StatementError> {
        if payload_type != IN_TOTO_PAYLOAD_TYPE {
            return Err(StatementError::PayloadType(payload_type.to_owned()));
        }
        let st: Self =
            serde_json::from_slice(payload).map_err(|e| StatementError::Json(e.to_string()))?;
        if !STATEMENT_TYPES.contains(&st.statement_type.as_str()) {
            return Err(StatementError::StatementType(st.statement_type));
        }
        Ok(st)
    }

    /// Checks that some subject has the given SHA-256 digest.
    pub fn require_subject_sha256(&self, digest: &[u8; 32]) -> Result<(), StatementError> {
        let want = hex::encode(digest);
        let hit = self.subject.iter().any(|s| {
            s.digest
                .get("sha256")
                .is_some_and(|d| d.eq_ignore_ascii_case(&want))
        });
        if hit {
            return Ok(());
        }
        let found = self
            .subject
            .iter()
            .filter_map(|s| s.digest.get("sha256").map(String::as_str))
            .collect::<Vec<_>>()
            .join(", ");
        Err(StatementError::SubjectMismatch {
            expected: want,
            found: if found.is_empty() {
                "none with sha256".into()
            } else {
                found
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_specification_example() {
        // Example from the DSSE protocol description: type "http://example.com/HelloWorld", body "hello world".
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn a_subject_without_name_binds_its_digest() {
        let d = [7u8; 32];
        let payload = serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"digest": {"sha256": hex::encode(d)}}],
            "predicateType": "https://sigstore.dev/cosign/sign/v1",
            "predicate": {}
        })
        .to_string();
        let st = Statement::from_payload(IN_TOTO_PAYLOAD_TYPE, payload.as_bytes()).unwrap();
        st.require_subject_sha256(&d).unwrap();
        let err = st.require_subject_sha256(&[8u8; 32]).unwrap_err();
        assert!(matches!(err, StatementError::SubjectMismatch { .. }));
    }

    #[test]
    fn other_payload_types_and_statement_types_are_rejected() {
        assert!(matches!(
            Statement::from_payload("text/plain", b"{}"),
            Err(StatementError::PayloadType(_))
        ));
        assert!(matches!(
            Statement::from_payload(IN_TOTO_PAYLOAD_TYPE, br#"{"_type":"x"}"#),
            Err(StatementError::StatementType(_))
        ));
    }
}
