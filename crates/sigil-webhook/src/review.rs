//! AdmissionReview v1 in and out: parsing a request body into an
//! [`AdmissionRequest`] (or a refusal that still carries the request's uid
//! when it can be found), and writing the answer. Every body gets an
//! `AdmissionReview` back; nothing here answers with an HTTP error.

use base64::Engine as _;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The only AdmissionReview version sigil speaks.
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// The kind of an AdmissionReview.
pub const KIND: &str = "AdmissionReview";

/// A body that is not a usable AdmissionReview v1 request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// The request's uid when it could be read, so the API server can match
    /// the answer; empty otherwise.
    pub uid: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// How many leading bytes of an unreadable body are searched for the uid.
const UID_SCAN_BYTES: usize = 64 * 1024;

/// Best effort: the `request.uid` of a body that did not parse as a review
/// (the API server writes it near the start), searched in a bounded prefix.
pub fn find_uid(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return v
            .pointer("/request/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
    }
    let prefix = body.get(..UID_SCAN_BYTES).unwrap_or(body);
    let text = String::from_utf8_lossy(prefix);
    // The first `"uid"` key, then optional blanks, a colon, blanks, a string.
    let Some(rest) = text.find("\"uid\"").and_then(|i| text.get(i + 5..)) else {
        return String::new();
    };
    let Some(rest) = rest.trim_start().strip_prefix(':') else {
        return String::new();
    };
    let Some(rest) = rest.trim_start().strip_prefix('"') else {
        return String::new();
    };
    rest.split('"')
        .next()
        .filter(|uid| {
            uid.len() <= 128 && uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .unwrap_or_default()
        .to_string()
}

/// Parses a request body into an AdmissionReview v1 request.
pub fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, Invalid> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| Invalid {
            uid: find_uid(body),
            message: format!(
                "sigil could not read the AdmissionReview ({e}); the webhook expects an admission.k8s.io/v1 AdmissionReview from the API server"
            ),
        })?;
    let uid = review
        .request
        .as_ref()
        .map(|r| r.uid.clone())
        .unwrap_or_default();
    if review.types.api_version != API_VERSION || review.types.kind != KIND {
        return Err(Invalid {
            uid,
            message: format!(
                "sigil speaks {KIND} {API_VERSION}, got {} {}; set admissionReviewVersions: [\"v1\"] in the webhook configuration",
                display_or_none(&review.types.kind),
                display_or_none(&review.types.api_version)
            ),
        });
    }
    let request: AdmissionRequest<DynamicObject> = review.try_into().map_err(|_| Invalid {
        uid: String::new(),
        message: "the AdmissionReview has no request; nothing to admit".into(),
    })?;
    if request.uid.is_empty() {
        return Err(Invalid {
            uid: String::new(),
            message: "the AdmissionReview request has no uid".into(),
        });
    }
    Ok(request)
}

fn display_or_none(s: &str) -> &str {
    if s.is_empty() { "(none)" } else { s }
}

/// The AdmissionReview v1 sigil answers with. Written by hand rather than
/// with kube's `AdmissionResponse` so that `patch` is the base64 string the
/// API documents (kube serializes the bytes as a JSON array of numbers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// The response.
    pub response: AnswerResponse,
}

/// The `response` of an [`Answer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerResponse {
    /// The request's uid.
    pub uid: String,
    /// Whether the object is admitted.
    pub allowed: bool,
    /// Why not, when denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AnswerStatus>,
    /// Base64 of the JSONPatch, when mutating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// `JSONPatch` when `patch` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// Warnings shown to the client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The `status` of a denial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerStatus {
    /// HTTP-like code the API server reports (403 for a policy denial, 400
    /// for an unreadable review).
    pub code: u16,
    /// `Forbidden` or `BadRequest`.
    pub reason: String,
    /// The message `kubectl` prints.
    pub message: String,
}

impl Answer {
    /// An answer for request `uid`.
    pub fn new(uid: String, allowed: bool) -> Self {
        Self {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            response: AnswerResponse {
                uid,
                allowed,
                status: None,
                patch: None,
                patch_type: None,
                warnings: Vec::new(),
            },
        }
    }

    /// Denies with `message` (code 403 Forbidden).
    #[must_use]
    pub fn denied(mut self, message: String) -> Self {
        self.response.allowed = false;
        self.response.status = Some(AnswerStatus {
            code: 403,
            reason: "Forbidden".into(),
            message,
        });
        self
    }

    /// Attaches a JSONPatch.
    pub fn with_patch(mut self, patch: &json_patch::Patch) -> Result<Self, serde_json::Error> {
        let bytes = serde_json::to_vec(patch)?;
        self.response.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
        self.response.patch_type = Some("JSONPatch".into());
        Ok(self)
    }

    /// The answer to a body that is not a usable request (code 400).
    pub fn invalid(invalid: &Invalid) -> Self {
        let mut answer = Self::new(invalid.uid.clone(), false);
        answer.response.status = Some(AnswerStatus {
            code: 400,
            reason: "BadRequest".into(),
            message: invalid.message.clone(),
        });
        answer
    }
}

/// A JSONPatch replacing the value at each pointer.
pub fn replace_patch(ops: &[(String, String)]) -> Result<json_patch::Patch, serde_json::Error> {
    let ops: Vec<Value> = ops
        .iter()
        .map(|(path, value)| json!({"op": "replace", "path": path, "value": value}))
        .collect();
    serde_json::from_value(Value::Array(ops))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_uid_is_recovered_from_a_truncated_body() {
        let body = br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"abc-123","kind":{"#;
        assert_eq!(find_uid(body), "abc-123");
    }

    #[test]
    fn the_uid_is_recovered_when_the_json_has_blanks_around_the_colon() {
        assert_eq!(find_uid(b"{\"request\": {\"uid\" : \"u-2\", \"kind"), "u-2");
    }

    #[test]
    fn a_uid_with_strange_characters_is_not_echoed() {
        assert_eq!(find_uid(br#"{"request":{"uid":"<script>"#), "");
    }

    #[test]
    fn a_v1beta1_review_is_refused_with_its_uid_and_what_to_configure() {
        let body = br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{"uid":"u1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","userInfo":{},"name":"p"}}"#;
        let err = parse(body).unwrap_err();
        assert_eq!(err.uid, "u1");
        assert!(err.message.contains("admissionReviewVersions"), "{err}");
    }

    #[test]
    fn a_review_without_a_request_is_refused() {
        let err =
            parse(br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#).unwrap_err();
        assert!(err.message.contains("no request"), "{err}");
    }

    #[test]
    fn replace_patches_serialize_as_rfc6902() {
        let p =
            replace_patch(&[("/spec/containers/0/image".into(), "x@sha256:aa".into())]).unwrap();
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "x@sha256:aa"}])
        );
    }
}
