//! The one HTTP path of the credential providers: their own client (not the
//! registry client, whose address policy refuses the metadata endpoints
//! these providers exist to reach), no redirects (a token never follows one
//! to another host), every answer read within [`MAX_BODY_BYTES`], each
//! request within its timeout, and errors that name the provider, the step
//! and the URL, never a credential.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder};

use super::{CloudError, ErrorKind, ProviderId};

/// The largest answer read: tokens and credentials are a few KiB.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The providers' HTTP client.
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
    timeout: Duration,
}

/// An answer read whole.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Vec<u8>,
}

impl Http {
    /// A client trusting the web roots and `extra_roots_pem` (a private
    /// endpoint's CA), each request within `timeout`.
    pub fn new(extra_roots_pem: &[u8], timeout: Duration) -> Result<Self, String> {
        crate::tls::default_provider();
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .user_agent(concat!("sigil/", env!("CARGO_PKG_VERSION")));
        if !extra_roots_pem.is_empty() {
            let roots = reqwest::Certificate::from_pem_bundle(extra_roots_pem)
                .map_err(|e| format!("the extra CA bundle is not PEM: {e}"))?;
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
        }
        let client = builder
            .build()
            .map_err(|e| format!("cannot build the credential providers' HTTP client: {e}"))?;
        Ok(Self { client, timeout })
    }

    /// A request, bounded by the client's timeout unless the caller sets a
    /// shorter one (metadata endpoints answer in milliseconds or not at all).
    pub fn request(&self, method: Method, url: &str) -> RequestBuilder {
        self.client.request(method, url).timeout(self.timeout)
    }

    /// Sends `request` to `url` for `provider`'s `step` and reads the
    /// answer: that of a 2xx status, else a refusal with the service's
    /// message and `fix` ([`Answer::ok`]).
    pub async fn fetch(
        &self,
        provider: ProviderId,
        step: &str,
        url: &str,
        request: RequestBuilder,
        fix: &str,
    ) -> Result<Answer, CloudError> {
        let fail = |kind: ErrorKind, reason: String| {
            CloudError::new(provider, kind, step, format!("{url}: {reason}"), fix)
        };
        let mut response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                fail(ErrorKind::Timeout, "no answer in time".into())
            } else {
                fail(ErrorKind::Unreachable, describe(&e))
            }
        })?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| fail(ErrorKind::Unreachable, describe(&e)))?
        {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(fail(
                    ErrorKind::Malformed,
                    format!("answer larger than {MAX_BODY_BYTES} bytes"),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Answer {
            status,
            headers,
            body,
        }
        .ok(provider, step, url, fix)
    }

    /// A form `POST` to `url`, fetched (see [`fetch`](Self::fetch)).
    pub async fn post_form(
        &self,
        provider: ProviderId,
        step: &str,
        url: &str,
        pairs: &[(&str, &str)],
        fix: &str,
    ) -> Result<Answer, CloudError> {
        let request = self
            .request(Method::POST, url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(pairs));
        self.fetch(provider, step, url, request, fix).await
    }
}

impl Answer {
    /// The answer when its status is 2xx; else a refusal carrying the
    /// service's own message (shortened) and `fix`.
    pub fn ok(
        self,
        provider: ProviderId,
        step: &str,
        url: &str,
        fix: &str,
    ) -> Result<Self, CloudError> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        let reason = if (300..400).contains(&self.status) {
            format!(
                "{url} answered HTTP {} (a redirect, which is not followed: credentials stay \
                 with the endpoint configured)",
                self.status
            )
        } else {
            let text = sigil_cloud::service_message(&self.body);
            if text.is_empty() {
                format!("{url} answered HTTP {}", self.status)
            } else {
                format!("{url} answered HTTP {}: {text}", self.status)
            }
        };
        Err(CloudError::new(
            provider,
            ErrorKind::Refused,
            step,
            reason,
            fix,
        ))
    }

    /// The body as JSON.
    pub fn json(
        &self,
        provider: ProviderId,
        step: &str,
        url: &str,
    ) -> Result<serde_json::Value, CloudError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            CloudError::new(
                provider,
                ErrorKind::Malformed,
                step,
                format!("{url} answered with something that is not JSON: {e}"),
                "check that the endpoint setting points at the service itself",
            )
        })
    }
}

/// reqwest's error with its causes ("connection refused", "certificate
/// unknown"), without the URL it repeats.
fn describe(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut parts: Vec<String> = Vec::new();
    let mut source = e.source();
    // Bounded: error chains are a handful of levels deep.
    for _ in 0..6 {
        let Some(s) = source else { break };
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}

/// A string field of a JSON answer, or an error naming it.
pub fn field<'v>(
    provider: ProviderId,
    step: &str,
    url: &str,
    v: &'v serde_json::Value,
    name: &str,
) -> Result<&'v str, CloudError> {
    v.get(name)
        .and_then(|x| x.as_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            CloudError::new(
                provider,
                ErrorKind::Malformed,
                step,
                format!("{url} answered without the string field `{name}`"),
                "check that the endpoint setting points at the service itself",
            )
        })
}

/// A form body (`application/x-www-form-urlencoded`).
pub fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}
