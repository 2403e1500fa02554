//! The one HTTP path every provider uses: bounded time and body size, no
//! redirects (a token must never follow a redirect to another host), errors
//! that name the URL but never a credential, and the service's own error
//! message passed on, shortened.

use std::time::Duration;

use reqwest::{Method, RequestBuilder, StatusCode};

use crate::{KmsError, Provider};

/// The largest response body read; public keys and tokens are a few KiB.
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How much of a service's error text is kept in a message.
const MAX_ERROR_TEXT: usize = 300;

/// Limits of KMS requests.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Time for one request, connection included.
    pub timeout: Duration,
    /// Time to connect.
    pub connect_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Makes KMS requests within [`HttpConfig`]'s limits.
#[derive(Debug, Clone, Default)]
pub struct Http {
    config: HttpConfig,
}

/// A response that arrived whole.
pub(crate) struct Response {
    pub(crate) status: StatusCode,
    pub(crate) body: Vec<u8>,
}

impl Http {
    /// A client with these limits.
    pub fn new(config: HttpConfig) -> Self {
        Self { config }
    }

    /// A reqwest client for one fetch; `extra_ca` is a PEM bundle trusted in
    /// addition to the web PKI roots (a private Vault's CA).
    pub(crate) fn client(
        &self,
        provider: Provider,
        extra_ca: Option<(&str, &str)>,
    ) -> Result<reqwest::Client, KmsError> {
        // reqwest has no provider of its own; the binaries install aws-lc-rs
        // at start, and a race with another installer leaves one in place.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        }
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(self.config.timeout)
            .connect_timeout(self.config.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("sigil-kms/", env!("CARGO_PKG_VERSION")));
        if let Some((variable, pem)) = extra_ca {
            let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| {
                KmsError::Config {
                    provider,
                    message: format!("{variable}: not a PEM certificate bundle: {e}"),
                }
            })?;
            if certs.is_empty() {
                return Err(KmsError::Config {
                    provider,
                    message: format!("{variable}: no certificate in the file"),
                });
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        builder.build().map_err(|e| KmsError::Config {
            provider,
            message: format!("cannot build the HTTP client: {e}"),
        })
    }

    /// Sends `request` (to `url`, named in errors) and reads the whole
    /// body. Statuses are returned, not judged: see [`Response::ok`].
    pub(crate) async fn send(
        &self,
        provider: Provider,
        url: &str,
        request: RequestBuilder,
    ) -> Result<Response, KmsError> {
        let unreachable = |reason: String| KmsError::Unreachable {
            provider,
            url: url.to_owned(),
            reason,
        };
        let mut response = request
            .send()
            .await
            .map_err(|e| unreachable(describe(&e)))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unreachable(describe(&e)))?
        {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(KmsError::Malformed {
                    provider,
                    url: url.to_owned(),
                    reason: format!("response larger than {MAX_BODY_BYTES} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response { status, body })
    }

    /// Sends and requires a 2xx answer, parsing its body as JSON.
    pub(crate) async fn json(
        &self,
        provider: Provider,
        url: &str,
        request: RequestBuilder,
        hint: &str,
    ) -> Result<serde_json::Value, KmsError> {
        self.send(provider, url, request)
            .await?
            .ok(provider, url, hint)?
            .json(provider, url)
    }
}

impl Response {
    /// The response when its status is 2xx, else [`KmsError::Refused`]
    /// carrying the service's message and `hint` (what to check).
    pub(crate) fn ok(self, provider: Provider, url: &str, hint: &str) -> Result<Self, KmsError> {
        if self.status.is_success() {
            return Ok(self);
        }
        if self.status.is_redirection() {
            return Err(KmsError::Refused {
                provider,
                url: url.to_owned(),
                status: self.status.as_u16(),
                message: "redirects are not followed (credentials stay with the configured host); \
                          point the setting at the final address"
                    .into(),
            });
        }
        let text = service_message(&self.body);
        let message = match (text.is_empty(), hint.is_empty()) {
            (true, _) => hint.to_owned(),
            (false, true) => text,
            (false, false) => format!("{text}; {hint}"),
        };
        Err(KmsError::Refused {
            provider,
            url: url.to_owned(),
            status: self.status.as_u16(),
            message,
        })
    }

    /// The body as JSON.
    pub(crate) fn json(self, provider: Provider, url: &str) -> Result<serde_json::Value, KmsError> {
        serde_json::from_slice(&self.body).map_err(|e| KmsError::Malformed {
            provider,
            url: url.to_owned(),
            reason: format!("not JSON: {e}"),
        })
    }
}

/// The error text a service put in its body: the usual JSON error fields
/// when present, else the text itself; one line, shortened, printable only.
fn service_message(body: &[u8]) -> String {
    let text = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) => json_error(&v).unwrap_or_else(|| v.to_string()),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
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
    // Vault: {"errors": [..]}; AWS: {"__type", "message"}; Google:
    // {"error": {"message"}}; Azure: {"error": {"code", "message"}};
    // OAuth: {"error", "error_description"}.
    if let Some(errors) = v.get("errors").and_then(|e| e.as_array()) {
        let texts: Vec<String> = errors
            .iter()
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
            .collect();
        return Some(texts.join("; "));
    }
    let text =
        |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
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

/// reqwest's error with its causes (the useful part is often the source:
/// "connection refused", "certificate unknown", "timed out").
fn describe(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut text = if e.is_timeout() {
        "timed out".to_owned()
    } else {
        e.to_string()
    };
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// A JSON string field of `v`, or a [`KmsError::Malformed`] naming it.
pub(crate) fn field<'v>(
    provider: Provider,
    url: &str,
    v: &'v serde_json::Value,
    name: &str,
) -> Result<&'v str, KmsError> {
    v.get(name)
        .and_then(|x| x.as_str())
        .ok_or_else(|| KmsError::Malformed {
            provider,
            url: url.to_owned(),
            reason: format!("no string field `{name}`"),
        })
}

/// The method for requests without a body.
pub(crate) const GET: Method = Method::GET;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_errors_are_reduced_to_their_message() {
        assert_eq!(
            service_message(br#"{"errors":["permission denied"]}"#),
            "permission denied"
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
        let long = service_message(&vec![b'x'; 1000]);
        assert_eq!(long.chars().count(), MAX_ERROR_TEXT + 1);
        assert_eq!(service_message(b"line1\nline2\x07"), "line1 line2");
    }
}
