//! sigil-cloud: what sigil's clients of cloud services share.
//!
//! `sigil-kms` fetches public keys from cloud KMSes and `sigil-registry`
//! gets registry credentials from cloud identities (ECR, Artifact Registry,
//! ACR); both sign AWS requests with [`sigv4`], read their settings from an
//! [`Env`] (environment variables by the cloud SDKs' names, overlaid by the
//! embedding program) and read the token files those settings point to
//! within one bound ([`env::MAX_FILE_BYTES`]), read the fields of STS's XML
//! answers ([`xml_text`]), read the subject token of a Google workload
//! identity federation file ([`subject_token`]) and build its exchange
//! ([`google_sts_form`]), and pass a service's own
//! error message on, in one line ([`service_message`]).
//!
//! This crate does no I/O but reading those files: no network, no async, no
//! Kubernetes; each client keeps its own HTTP path, bounds and errors.
#![forbid(unsafe_code)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod env;
pub mod sigv4;

pub use env::Env;

/// The text of the first `<name>…</name>` element of an AWS XML answer
/// (STS answers in XML; the credential fields are plain text without
/// markup), with XML's five entities decoded; `None` when absent, empty or
/// holding markup.
pub fn xml_text(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml.get(start..)?.find(&close)?;
    let text = xml.get(start..end)?.trim();
    (!text.is_empty() && !text.contains('<')).then(|| {
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&")
    })
}

/// The subject token in `raw`, the content of an `external_account`
/// file's `credential_source`, as its `format` says: the text itself
/// (`text`, the default), or the string field `subject_token_field_name` of
/// a JSON document (`json`). The error says what is missing.
pub fn subject_token(raw: &str, format: Option<&serde_json::Value>) -> Result<String, String> {
    let kind = format.and_then(|f| f.get("type")).and_then(|t| t.as_str());
    if kind != Some("json") {
        let token = raw.trim();
        return if token.is_empty() {
            Err("the subject token is empty".into())
        } else {
            Ok(token.to_owned())
        };
    }
    let name = format
        .and_then(|f| f.get("subject_token_field_name"))
        .and_then(|n| n.as_str())
        .unwrap_or("");
    serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| v.get(name).and_then(|t| t.as_str()).map(str::to_owned))
        .ok_or_else(|| format!("no string field `{name}` in the subject token's JSON"))
}

/// OAuth scope of every Google Cloud API.
pub const GOOGLE_CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The form of Google STS's token exchange (`token_url` of an
/// `external_account` file) for an access token of
/// [`GOOGLE_CLOUD_PLATFORM`]: the file's `audience` and
/// `subject_token_type`, and the subject token read from its source.
pub fn google_sts_form<'a>(
    audience: &'a str,
    subject_token: &'a str,
    subject_token_type: &'a str,
) -> [(&'static str, &'a str); 6] {
    [
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        ("audience", audience),
        ("scope", GOOGLE_CLOUD_PLATFORM),
        (
            "requested_token_type",
            "urn:ietf:params:oauth:token-type:access_token",
        ),
        ("subject_token", subject_token),
        ("subject_token_type", subject_token_type),
    ]
}

/// How much of a service's error text a message keeps.
pub const MAX_ERROR_TEXT: usize = 300;

/// The error text a cloud service put in an error answer's body: the usual
/// JSON error fields when present, the `Code: Message` of an AWS XML error,
/// else the text itself; one line, at most [`MAX_ERROR_TEXT`] characters
/// (then `…`), control characters replaced by spaces.
pub fn service_message(body: &[u8]) -> String {
    let text = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) => json_error(&v).unwrap_or_else(|| v.to_string()),
        Err(_) => {
            let raw = String::from_utf8_lossy(body);
            match (xml_text(&raw, "Code"), xml_text(&raw, "Message")) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (None, Some(m)) => m,
                _ => raw.into_owned(),
            }
        }
    };
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_ERROR_TEXT)
        .collect();
    if text.chars().count() > MAX_ERROR_TEXT {
        line.push('…');
    }
    line.trim().to_owned()
}

fn json_error(v: &serde_json::Value) -> Option<String> {
    // Vault: {"errors": ["..."]}; OCI registries: {"errors": [{"code",
    // "message"}]}; AWS: {"__type", "message"}; Google: {"error":
    // {"message"}}; Azure: {"error": {"code", "message"}}; OAuth and Entra:
    // {"error", "error_description"}.
    let text =
        |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    if let Some(errors) = v.get("errors").and_then(|e| e.as_array()) {
        let texts: Vec<String> = errors
            .iter()
            .map(|e| match e.as_str() {
                Some(s) => s.to_owned(),
                None => text(e, "message")
                    .or_else(|| text(e, "code"))
                    .unwrap_or_else(|| e.to_string()),
            })
            .collect();
        return Some(texts.join("; "));
    }
    if let Some(error) = v.get("error").filter(|e| e.is_object()) {
        return text(error, "message").or_else(|| text(error, "code"));
    }
    if let Some(description) = text(v, "error_description") {
        return Some(description);
    }
    let kind = text(v, "__type").or_else(|| text(v, "error"));
    let message = text(v, "message").or_else(|| text(v, "Message"));
    match (kind, message) {
        (Some(k), Some(m)) => Some(format!("{k}: {m}")),
        (k, m) => k.or(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_token_is_the_text_or_the_named_field_of_a_json_document() {
        assert_eq!(subject_token(" eyJ.a.b \n", None), Ok("eyJ.a.b".into()));
        let json = serde_json::json!({"type": "json", "subject_token_field_name": "id_token"});
        assert_eq!(
            subject_token(r#"{"id_token": "t"}"#, Some(&json)),
            Ok("t".into())
        );
        assert!(
            subject_token(r#"{"other": "t"}"#, Some(&json))
                .unwrap_err()
                .contains("id_token")
        );
        assert!(subject_token("  ", None).is_err());
    }

    #[test]
    fn service_errors_are_reduced_to_their_message_in_each_services_shape() {
        assert_eq!(
            service_message(br#"{"errors":["permission denied"]}"#),
            "permission denied"
        );
        assert_eq!(
            service_message(br#"{"errors":[{"code":"UNAUTHORIZED","message":"wrong audience"}]}"#),
            "wrong audience"
        );
        assert_eq!(
            service_message(br#"{"__type":"NotFoundException","message":"Alias x is not found."}"#),
            "NotFoundException: Alias x is not found."
        );
        assert_eq!(
            service_message(br#"{"error":{"code":403,"message":"Permission denied on resource"}}"#),
            "Permission denied on resource"
        );
        assert_eq!(
            service_message(
                br#"{"error":"invalid_client","error_description":"AADSTS7000215: bad secret"}"#
            ),
            "AADSTS7000215: bad secret"
        );
        assert_eq!(
            service_message(
                b"<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>\
                  <Message>Incorrect token audience</Message></Error></ErrorResponse>"
            ),
            "InvalidIdentityToken: Incorrect token audience"
        );
        let long = service_message(&vec![b'x'; 1000]);
        assert_eq!(long.chars().count(), MAX_ERROR_TEXT + 1);
        assert_eq!(service_message(b"line1\nline2\x07"), "line1 line2");
    }

    #[test]
    fn sts_credentials_are_read_from_the_xml_answer() {
        let xml = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>\
                   <Credentials><AccessKeyId>ASIA1</AccessKeyId>\
                   <SecretAccessKey>s/e&amp;c&amp;lt;</SecretAccessKey><SessionToken>tok</SessionToken>\
                   <Expiration>2026-01-01T00:00:00Z</Expiration>\
                   </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
        assert_eq!(xml_text(xml, "AccessKeyId").as_deref(), Some("ASIA1"));
        // `&amp;lt;` is the text `&lt;`, not `<`: `&amp;` is decoded last.
        assert_eq!(
            xml_text(xml, "SecretAccessKey").as_deref(),
            Some("s/e&c&lt;")
        );
        assert_eq!(
            xml_text(xml, "Expiration").as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(xml_text(xml, "Missing"), None);
        assert_eq!(xml_text("<A><B>x</B></A>", "A"), None);
        assert_eq!(xml_text("<A>  </A>", "A"), None);
    }
}
