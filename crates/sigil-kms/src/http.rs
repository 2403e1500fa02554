//! The one HTTP path every provider uses: bounded time and body size, no
//! redirects (a token must never follow a redirect to another host), errors
//! that name the URL but never a credential, and the service's own error
//! message passed on, shortened.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, StatusCode};

use crate::destinations::{AddressGuard, Destinations, GuardResolver, HostRule, Origin};
use crate::{KmsError, Provider};

/// The largest response body read; public keys and tokens are a few KiB.
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Limits of KMS requests, and where they may go.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Time for one request, connection included.
    pub timeout: Duration,
    /// Time to connect.
    pub connect_timeout: Duration,
    /// Hosts a key reference may name besides the provider's documented
    /// endpoints (`--kms-allow-host`): private endpoints, a local emulator.
    pub allowed_hosts: Vec<HostRule>,
    /// The addresses connections may reach; `None`: any (the CLI on a
    /// user's machine).
    pub guard: Option<Arc<dyn AddressGuard>>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            allowed_hosts: Vec::new(),
            guard: None,
        }
    }
}

/// Makes KMS requests within [`HttpConfig`]'s limits, to the destinations
/// it allows.
#[derive(Debug, Clone, Default)]
pub struct Http {
    config: HttpConfig,
    destinations: Destinations,
}

/// A response that arrived whole.
pub(crate) struct Response {
    pub(crate) status: StatusCode,
    pub(crate) body: Vec<u8>,
}

impl Http {
    /// A client with these limits.
    pub fn new(config: HttpConfig) -> Self {
        let destinations = Destinations {
            allowed: config.allowed_hosts.clone(),
            guard: config.guard.clone(),
        };
        Self {
            config,
            destinations,
        }
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
        if let Some(guard) = &self.config.guard {
            builder = builder.dns_resolver(Arc::new(GuardResolver(guard.clone())));
        }
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

    /// `Ok` when `url`, whose host `origin` chose, may be asked; a provider
    /// checks a host the key reference names before it obtains a token, so
    /// that no credential is exchanged for a request that cannot be sent.
    pub(crate) fn permit(
        &self,
        provider: Provider,
        url: &str,
        origin: Origin,
    ) -> Result<(), KmsError> {
        self.destinations
            .check(provider, url, origin)
            .map_err(|reason| KmsError::Forbidden {
                provider,
                url: url.to_owned(),
                reason,
            })
    }

    /// Sends `request` (to `url`, whose host `origin` chose; named in
    /// errors) and reads the whole body, once `url` passed the destination
    /// checks. Statuses are returned, not judged: see [`Response::ok`].
    pub(crate) async fn send(
        &self,
        provider: Provider,
        url: &str,
        origin: Origin,
        request: RequestBuilder,
    ) -> Result<Response, KmsError> {
        self.permit(provider, url, origin)?;
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
        origin: Origin,
        request: RequestBuilder,
        hint: &str,
    ) -> Result<serde_json::Value, KmsError> {
        self.send(provider, url, origin, request)
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
        let text = sigil_cloud::service_message(&self.body);
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
