//! Fetching what certificate revocation checks read: CRLs (GET) and OCSP
//! answers (POST of a DER request), for Notary Project signatures. The
//! checks themselves are `sigil-notation`'s; this module only fetches, under
//! the same egress rules as registry traffic (the guarded resolver and the
//! address policy, literal addresses checked before each request and
//! redirect), bounded in time, size and redirects, with successful answers
//! cached for a while so admissions do not fetch the same CRL again.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use moka::future::Cache;
use url::Url;

use crate::egress::{AddressPolicy, GuardedResolver, Lookup, SystemLookup};

/// Longest URL fetched.
pub const MAX_URL_LEN: usize = 2048;
/// Redirects followed per fetch.
pub const MAX_REDIRECTS: usize = 3;

/// Bounds and caching of the fetcher.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Which addresses may be contacted.
    pub addresses: AddressPolicy,
    /// How names are looked up; `None`: the system resolver.
    pub lookup: Option<Arc<dyn Lookup>>,
    /// Whole-exchange time bound per fetch.
    pub timeout: Duration,
    /// Largest body read (a CRL may be large; an OCSP answer is small).
    pub max_bytes: usize,
    /// How long a successful answer is reused.
    pub ttl: Duration,
    /// Most answers cached.
    pub max_entries: u64,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            addresses: AddressPolicy::standard(),
            lookup: None,
            timeout: Duration::from_secs(3),
            max_bytes: 16 * 1024 * 1024,
            ttl: Duration::from_secs(300),
            max_entries: 1024,
        }
    }
}

/// Why a revocation answer could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The URL is unusable.
    #[error("revocation URL `{url}` cannot be fetched: {reason}")]
    Url {
        /// The URL (cut to its bound).
        url: String,
        /// Why.
        reason: String,
    },
    /// The address policy forbids the target.
    #[error("revocation URL `{url}` is refused: {reason}")]
    Refused {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// No answer in time.
    #[error("revocation URL `{url}` did not answer within {seconds}s")]
    Timeout {
        /// The URL.
        url: String,
        /// The bound.
        seconds: u64,
    },
    /// Connection or protocol failure, or a non-success status.
    #[error("revocation URL `{url}`: {reason}")]
    Transport {
        /// The URL.
        url: String,
        /// What happened.
        reason: String,
    },
    /// The body is larger than allowed.
    #[error("revocation URL `{url}` answered more than {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The bound.
        limit: usize,
    },
}

type Key = (String, Vec<u8>);

/// A fetcher of CRLs and OCSP answers.
#[derive(Clone)]
pub struct RevocationFetcher {
    http: reqwest::Client,
    config: FetchConfig,
    addresses: Arc<AddressPolicy>,
    cache: Cache<Key, Arc<Vec<u8>>>,
}

impl std::fmt::Debug for RevocationFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevocationFetcher")
            .field("config", &self.config)
            .finish()
    }
}

fn literal_refusal(policy: &AddressPolicy, url: &Url) -> Option<String> {
    let address = match url.host()? {
        url::Host::Ipv4(a) => IpAddr::V4(a),
        url::Host::Ipv6(a) => IpAddr::V6(a),
        url::Host::Domain(_) => return None,
    };
    policy
        .check(address)
        .err()
        .map(|class| format!("{address} is {}", class.describe()))
}

impl RevocationFetcher {
    /// Builds a fetcher. Fails only if the HTTP client cannot be set up.
    pub fn new(config: FetchConfig) -> Result<Self, FetchError> {
        let addresses = Arc::new(config.addresses.clone());
        let redirect_addresses = addresses.clone();
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                return attempt.error("too many redirects");
            }
            match literal_refusal(&redirect_addresses, attempt.url()) {
                Some(refused) => attempt.error(refused),
                None => attempt.follow(),
            }
        });
        let lookup = config
            .lookup
            .clone()
            .unwrap_or_else(|| Arc::new(SystemLookup));
        crate::tls::default_provider();
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(policy)
            .dns_resolver(Arc::new(GuardedResolver::new(lookup, addresses.clone())))
            .connect_timeout(config.timeout)
            .user_agent(concat!("sigil/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::Transport {
                url: String::new(),
                reason: format!("cannot build the HTTP client: {e}"),
            })?;
        let cache = Cache::builder()
            .max_capacity(config.max_entries)
            .time_to_live(config.ttl)
            .build();
        Ok(Self {
            http,
            config,
            addresses,
            cache,
        })
    }

    /// GETs `url` (a CRL distribution point).
    pub async fn get(&self, url: &str) -> Result<Arc<Vec<u8>>, FetchError> {
        self.fetch(url, None).await
    }

    /// POSTs a DER OCSP request to `url`.
    pub async fn post_ocsp(&self, url: &str, body: &[u8]) -> Result<Arc<Vec<u8>>, FetchError> {
        self.fetch(url, Some(body)).await
    }

    async fn fetch(&self, url: &str, body: Option<&[u8]>) -> Result<Arc<Vec<u8>>, FetchError> {
        let shown = || url.chars().take(MAX_URL_LEN).collect::<String>();
        if url.len() > MAX_URL_LEN {
            return Err(FetchError::Url {
                url: shown(),
                reason: format!("longer than {MAX_URL_LEN} bytes"),
            });
        }
        let parsed = Url::parse(url).map_err(|e| FetchError::Url {
            url: shown(),
            reason: e.to_string(),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(FetchError::Url {
                url: shown(),
                reason: "only http and https are fetched".into(),
            });
        }
        if let Some(reason) = literal_refusal(&self.addresses, &parsed) {
            return Err(FetchError::Refused {
                url: shown(),
                reason,
            });
        }
        let key: Key = (url.to_owned(), body.map(<[u8]>::to_vec).unwrap_or_default());
        if let Some(hit) = self.cache.get(&key).await {
            return Ok(hit);
        }
        let seconds = self.config.timeout.as_secs().max(1);
        let exchange = self.exchange(parsed, body);
        let bytes = match tokio::time::timeout(self.config.timeout, exchange).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(FetchError::Timeout {
                    url: shown(),
                    seconds,
                });
            }
        };
        let bytes = Arc::new(bytes);
        self.cache.insert(key, bytes.clone()).await;
        Ok(bytes)
    }

    async fn exchange(&self, url: Url, body: Option<&[u8]>) -> Result<Vec<u8>, FetchError> {
        let shown = url.to_string();
        let transport = |e: reqwest::Error| FetchError::Transport {
            url: shown.clone(),
            reason: error_chain(&e),
        };
        let request = match body {
            Some(b) => self
                .http
                .post(url.clone())
                .header("content-type", "application/ocsp-request")
                .header("accept", "application/ocsp-response")
                .body(b.to_vec()),
            None => self.http.get(url.clone()),
        };
        let response = request.send().await.map_err(transport)?;
        if !response.status().is_success() {
            return Err(FetchError::Transport {
                url: shown,
                reason: format!("HTTP status {}", response.status()),
            });
        }
        let limit = self.config.max_bytes;
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(FetchError::TooLarge { url: shown, limit });
        }
        let mut out = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            if out.len() + chunk.len() > limit {
                return Err(FetchError::TooLarge { url: shown, limit });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut next = e.source();
    for _ in 0..6 {
        let Some(cause) = next else { break };
        parts.push(cause.to_string());
        next = cause.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::routing::{get, post};

    use super::*;

    async fn serve(router: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{addr}")
    }

    fn fetcher(max_bytes: usize, timeout_ms: u64) -> RevocationFetcher {
        RevocationFetcher::new(FetchConfig {
            timeout: Duration::from_millis(timeout_ms),
            max_bytes,
            ..FetchConfig::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_crl_is_fetched_once_and_then_served_from_the_cache() {
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let base = serve(Router::new().route(
            "/leaf.crl",
            get(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { vec![0x30u8, 0x00] }
            }),
        ))
        .await;
        let f = fetcher(1024, 2000);
        let url = format!("{base}/leaf.crl");
        assert_eq!(*f.get(&url).await.unwrap(), vec![0x30, 0x00]);
        assert_eq!(*f.get(&url).await.unwrap(), vec![0x30, 0x00]);
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_ocsp_request_is_posted_with_its_body() {
        let base = serve(Router::new().route(
            "/ocsp",
            post(|body: axum::body::Bytes| async move { body.to_vec() }),
        ))
        .await;
        let f = fetcher(1024, 2000);
        let answer = f
            .post_ocsp(&format!("{base}/ocsp"), b"request")
            .await
            .unwrap();
        assert_eq!(answer.as_slice(), b"request");
    }

    #[tokio::test]
    async fn a_body_over_the_bound_is_refused_naming_the_bound() {
        let base = serve(Router::new().route("/big.crl", get(|| async { vec![0u8; 4096] }))).await;
        let err = fetcher(1024, 2000)
            .get(&format!("{base}/big.crl"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, FetchError::TooLarge { limit: 1024, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("1024 bytes"), "{err}");
    }

    #[tokio::test]
    async fn a_hanging_responder_is_cut_at_the_time_bound() {
        let base = serve(Router::new().route(
            "/slow.crl",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                vec![0u8]
            }),
        ))
        .await;
        let err = fetcher(1024, 300)
            .get(&format!("{base}/slow.crl"))
            .await
            .unwrap_err();
        assert!(matches!(err, FetchError::Timeout { .. }), "{err}");
    }

    #[tokio::test]
    async fn metadata_addresses_and_other_schemes_are_never_contacted() {
        let f = fetcher(1024, 2000);
        let err = f
            .get("http://169.254.169.254/latest/meta-data")
            .await
            .unwrap_err();
        assert!(matches!(err, FetchError::Refused { .. }), "{err}");
        assert!(err.to_string().contains("link-local"), "{err}");
        let err = f.get("ldap://ca.example/crl").await.unwrap_err();
        assert!(matches!(err, FetchError::Url { .. }), "{err}");
        let err = f.get("http://127.0.0.1:9/missing.crl").await.unwrap_err();
        assert!(matches!(err, FetchError::Transport { .. }), "{err}");
    }
}
