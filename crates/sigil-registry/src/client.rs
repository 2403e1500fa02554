//! The registry HTTP client: authentication, limits, digest checks and the
//! round-trip count of one verification.
//!
//! Why not oci-client's `Client`: sigil needs things it does not offer — the
//! referrers API with `Link` pagination and `artifactType` in index entries,
//! hard body-size limits enforced while reading, a per-request timeout inside
//! a total deadline, a digest check of every body fetched by digest, HEAD with
//! `Docker-Content-Digest` and a GET fallback, and a count of round trips. So
//! requests go through reqwest (the HTTP client oci-client itself builds on),
//! configured with rustls on the aws-lc-rs provider ([`crate::tls`]). References are parsed by
//! sigil's own parser (see `reference`), so oci-client is not a dependency.
//!
//! Credentials: a request carries the credential configured for its own host
//! only. A bearer token endpoint (`realm`) gets the credential only when its
//! host is the registry host, or for Docker Hub's own pair (`index.docker.io`
//! → `auth.docker.io`); any other realm is asked for an anonymous token. A
//! realm over plain http is refused unless its host is allowed to be insecure.
//! reqwest drops `Authorization` on redirects to another host, so blob
//! redirects to storage services do not leak it either.
//!
//! Hooks for the embedding program: a [`RequestObserver`] hears the outcome
//! of every exchange (host and status, or the transport failure's class),
//! and extra PEM roots are trusted beside the built-in web roots (private
//! registries behind an internal CA).
//!
//! What may be contacted at all is [`crate::egress`]'s: a [`RegistryScope`]
//! checked when a request to a registry is built, and an [`AddressPolicy`]
//! checked on every address connected to (names through the client's own
//! resolver, literal addresses before each request and redirect).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, HeaderMap, LINK, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use tokio::time::Instant;
use url::Url;

use super::auth::{Challenge, Credential, Credentials, normalize_host, parse_challenge};
use super::cloud::cache::Exchange;
use super::cloud::{CloudError, CredentialObserver, Keychain, ProviderId};
use super::egress::{
    AddressPolicy, AddressRefused, GuardedResolver, Lookup, RegistryScope, ResolveError,
    SystemLookup,
};
use super::mirrors::{MirrorMap, Place};
use super::ratelimit::{RequestBudget, retry_after};
use super::reference::{Digest, Repository};
use super::slots::RequestSlots;

/// Media types sigil accepts for manifests and indexes.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// Bounds on what one verification may cost. Every bound, when hit, is a
/// typed error naming the limit.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest manifest or index body accepted.
    pub max_manifest_bytes: u64,
    /// Largest blob (bundle, signature payload) accepted.
    pub max_blob_bytes: u64,
    /// Most referrers (after filtering) or signature layers considered.
    pub max_referrers: usize,
    /// Most referrers-API pages followed.
    pub max_pages: usize,
    /// Most redirects followed per request.
    pub max_redirects: usize,
    /// Timeout of one request, body included.
    pub request_timeout: Duration,
    /// Deadline of a whole verification (all requests of one session).
    pub total_deadline: Duration,
    /// Bytes all the bodies of one session may add up to: what one
    /// verification can hold in memory, whatever a registry serves.
    pub max_session_bytes: u64,
    /// Requests one session (one verification) may have in flight to one
    /// registry host at once. Discovery starts every request that waits on
    /// no earlier answer together; this bounds how many of them one image
    /// puts on a registry (the process-wide bound is the client's slots).
    pub max_session_requests_per_host: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_manifest_bytes: 4 << 20,
            max_blob_bytes: 16 << 20,
            max_referrers: 128,
            max_pages: 5,
            max_redirects: 5,
            request_timeout: Duration::from_secs(10),
            total_deadline: Duration::from_secs(30),
            max_session_bytes: 32 << 20,
            max_session_requests_per_host: 8,
        }
    }
}

/// A registry request that failed. `reason()` gives a stable label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// One request took longer than the per-request timeout.
    #[error(
        "registry timeout after {after:?} on {url}; the registry is slow or unreachable (raise the request timeout if it is just slow)"
    )]
    Timeout {
        /// The request URL.
        url: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// The verification's total deadline passed.
    #[error("deadline of {deadline:?} for this image passed before {url} answered")]
    Deadline {
        /// The request URL.
        url: String,
        /// The total deadline.
        deadline: Duration,
    },
    /// The connection failed.
    #[error("cannot reach registry at {url}: {reason}")]
    Connect {
        /// The request URL.
        url: String,
        /// Transport error.
        reason: String,
    },
    /// The registry refused access.
    #[error("registry answered {status} for {url}: {hint}")]
    Denied {
        /// The request URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// What to do about it.
        hint: String,
    },
    /// The registry answered with an unexpected status.
    #[error("registry answered {status} for {url}{}", if *.status == 429 { " (rate limited; retry later)" } else { "" })]
    Status {
        /// The request URL.
        url: String,
        /// HTTP status.
        status: u16,
    },
    /// The registry answered 429 Too Many Requests and the review's
    /// deadline leaves no room to wait as it asks.
    #[error(
        "registry answered 429 Too Many Requests (rate limited) for {url}{}; sigil waits within the review's deadline only ({} ms were left). For Docker Hub's anonymous limit, read through a mirror (registryMirrors) or give credentials",
        retry_after.map(|s| format!(" (Retry-After {s} s)")).unwrap_or_default(),
        left.as_millis()
    )]
    RateLimited {
        /// The request URL.
        url: String,
        /// What `Retry-After` asked for, in seconds.
        retry_after: Option<u64>,
        /// What was left of the deadline.
        left: Duration,
    },
    /// sigil's own request budget for the host is spent for longer than
    /// the review's deadline.
    #[error(
        "sigil's request budget for {host} ({per_minute} a minute) is spent: the next request could go in {} ms, after this review's deadline; raise the budget (--registry-request-budget, chart registryRateLimits) or read through a mirror",
        wait.as_millis()
    )]
    RateBudget {
        /// The registry host.
        host: String,
        /// Its budget, requests a minute.
        per_minute: u32,
        /// When the next request could go.
        wait: Duration,
    },
    /// The process already holds as many registry body bytes as it may.
    #[error(
        "sigil already holds {limit} bytes of registry responses {scope}; refusing to read more of {url} now (retry; a registry serving unusually large signatures exhausts its own share first)"
    )]
    MemoryBudget {
        /// The request URL.
        url: String,
        /// Which bound: `from this registry` or `from all registries`.
        scope: &'static str,
        /// The bound in bytes.
        limit: u64,
    },
    /// The bodies of one verification together exceeded their budget.
    #[error(
        "the registry responses for this image add up to more than {limit} bytes (at {url}); refusing to read more"
    )]
    SessionBudget {
        /// The request URL where the budget ran out.
        url: String,
        /// The budget.
        limit: u64,
    },
    /// A body exceeded its size limit.
    #[error("{what} at {url} is larger than the limit of {limit} bytes; refusing to read it")]
    TooLarge {
        /// The request URL.
        url: String,
        /// What was being read.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
    /// The body did not hash to the digest it was fetched by or announced with.
    #[error(
        "content at {url} has digest {found}, not {expected}; the registry served wrong or tampered content"
    )]
    DigestMismatch {
        /// The request URL.
        url: String,
        /// Digest expected.
        expected: String,
        /// Digest of the body.
        found: String,
    },
    /// The body was cut short or the connection broke mid-body.
    #[error("reading the body of {url} failed: {reason}")]
    Body {
        /// The request URL.
        url: String,
        /// Transport error.
        reason: String,
    },
    /// Too many redirects, or a redirect loop.
    #[error("too many redirects (more than {limit}) or a redirect loop at {url}")]
    Redirects {
        /// The request URL.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// More referrers or signature layers than the limit.
    #[error("{what} for {subject} lists more than {limit} entries; refusing to consider them all")]
    TooMany {
        /// What was counted.
        what: &'static str,
        /// The image or tag.
        subject: String,
        /// The limit.
        limit: usize,
    },
    /// More referrers pages than the limit.
    #[error("referrers of {subject} span more than {limit} pages")]
    TooManyPages {
        /// The image.
        subject: String,
        /// The limit.
        limit: usize,
    },
    /// A JSON body did not parse.
    #[error("{what} at {url} is not valid JSON of the expected shape: {reason}")]
    Json {
        /// The request URL.
        url: String,
        /// What was being parsed.
        what: &'static str,
        /// Parser error.
        reason: String,
    },
    /// The bearer-token flow failed.
    #[error("getting a registry token from {realm} failed: {reason}")]
    Token {
        /// The token endpoint.
        realm: String,
        /// What went wrong.
        reason: String,
    },
    /// The registry asks for credentials that a docker credential helper keeps.
    #[error(
        "{host} asks for credentials, and the docker config leaves them to the credential helper `docker-credential-{helper}`; credential helpers are not supported; put an auth entry for {host} in the config (\"auths\": {{\"{host}\": {{\"auth\": \"<base64 of user:password>\"}}}}) or use a pull secret"
    )]
    CredentialHelper {
        /// The registry host.
        host: String,
        /// The helper's name (`desktop`, `ecr-login`, ...).
        helper: String,
    },
    /// A URL could not be built or a server-supplied URL was refused.
    #[error("bad URL {url}: {reason}")]
    Url {
        /// The URL or its base.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A cloud credential provider serves the registry host and could not
    /// give a credential: never turned into anonymous access.
    #[error("registry credentials for {host}: {error}")]
    Credentials {
        /// The registry host.
        host: String,
        /// The provider, the step that failed and the fix.
        error: Box<CloudError>,
    },
    /// The registry host is outside the registries sigil may contact.
    #[error("sigil may not contact registry {host}: {reason}")]
    ForbiddenRegistry {
        /// The registry host.
        host: String,
        /// Why, and how to allow it.
        reason: String,
    },
    /// A connection would reach an address sigil never contacts.
    #[error(
        "refusing to connect for {url}: {refused}; sigil never contacts such addresses for registries (SSRF protection) unless they are explicitly allowed (sigil-webhook --allow-registry-address, chart value registryAccess.allowAddresses)"
    )]
    ForbiddenAddress {
        /// The request URL (a redirect target or token realm included).
        url: String,
        /// The host, the address and its class.
        refused: AddressRefused,
    },
}

impl RegistryError {
    /// A stable, short label for metrics and machine-readable output.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "registry-timeout",
            Self::Deadline { .. } => "deadline",
            Self::Connect { .. } => "registry-unreachable",
            Self::Denied { .. } => "registry-denied",
            Self::Status { .. } => "registry-status",
            Self::TooLarge { .. } => "too-large",
            Self::SessionBudget { .. } => "session-budget",
            Self::MemoryBudget { .. } => "memory-budget",
            Self::DigestMismatch { .. } => "content-digest-mismatch",
            Self::Body { .. } => "truncated-body",
            Self::Redirects { .. } => "redirects",
            Self::TooMany { .. } => "too-many-entries",
            Self::TooManyPages { .. } => "too-many-pages",
            Self::Json { .. } => "bad-json",
            Self::Token { .. } => "token",
            Self::CredentialHelper { .. } => "credential-helper",
            Self::Credentials { .. } => "cloud-credentials",
            Self::RateLimited { .. } => "rate-limited",
            Self::RateBudget { .. } => "rate-budget",
            Self::Url { .. } => "bad-url",
            Self::ForbiddenRegistry { .. } => "forbidden-registry",
            Self::ForbiddenAddress { .. } => "forbidden-address",
        }
    }

    /// Whether this failure says nothing about the image: the registry did
    /// not answer in time, could not be reached, refused access, answered
    /// with an unexpected status (5xx, 429), broke off a body, or sigil had
    /// no memory left for it. Asked again later (or with credentials), the
    /// same image may verify. Content the registry did serve but that is
    /// wrong (bad JSON, wrong digest, too large) and refusals by sigil's
    /// own egress policy are answers, not outages.
    pub fn is_inconclusive(&self) -> bool {
        matches!(
            self,
            Self::Timeout { .. }
                | Self::Deadline { .. }
                | Self::Connect { .. }
                | Self::Denied { .. }
                | Self::Status { .. }
                | Self::Body { .. }
                | Self::MemoryBudget { .. }
                | Self::Token { .. }
                | Self::Credentials { .. }
                | Self::RateLimited { .. }
                | Self::RateBudget { .. }
        )
    }
}

/// An OCI descriptor (also an index entry), with the fields sigil reads.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the referenced content.
    #[serde(default)]
    pub media_type: String,
    /// Digest of the referenced content.
    pub digest: String,
    /// Size in bytes.
    #[serde(default)]
    pub size: i64,
    /// Artifact type (index entries of the referrers API).
    #[serde(default)]
    pub artifact_type: Option<String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The platform an index entry runs on.
    #[serde(default)]
    pub platform: Option<Platform>,
}

/// The platform of an index entry (OCI image index `platform`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Default)]
pub struct Platform {
    /// Operating system (`linux`, `windows`).
    #[serde(default)]
    pub os: String,
    /// CPU architecture (`amd64`, `arm64`).
    #[serde(default)]
    pub architecture: String,
    /// CPU variant (`v7`), if any.
    #[serde(default)]
    pub variant: Option<String>,
    /// Operating system version (Windows images), if any.
    #[serde(default, rename = "os.version")]
    pub os_version: Option<String>,
}

impl std::fmt::Display for Platform {
    /// `os/architecture[/variant][:os.version]`, as go-containerregistry
    /// and `docker`/`crane` write a platform.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.os.is_empty() {
            "unknown"
        } else {
            &self.os
        })?;
        if !self.architecture.is_empty() {
            write!(f, "/{}", self.architecture)?;
        }
        if let Some(variant) = self.variant.as_deref().filter(|v| !v.is_empty()) {
            write!(f, "/{variant}")?;
        }
        if let Some(version) = self.os_version.as_deref().filter(|v| !v.is_empty()) {
            write!(f, ":{version}")?;
        }
        Ok(())
    }
}

/// An image manifest or index, with the fields sigil reads.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Media type, if written.
    #[serde(default)]
    pub media_type: Option<String>,
    /// Artifact type, if written.
    #[serde(default)]
    pub artifact_type: Option<String>,
    /// Config descriptor (manifests).
    #[serde(default)]
    pub config: Option<Descriptor>,
    /// Layers (manifests).
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// Entries (indexes).
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
    /// Subject (OCI 1.1 referrers).
    #[serde(default)]
    pub subject: Option<Descriptor>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// What one registry exchange came to, as a [`RequestObserver`] hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// The registry answered with this HTTP status (the body may still fail).
    Status(u16),
    /// No answer: `timeout`, `connect` (refused, TLS, DNS), `redirects`, or
    /// `forbidden` (sigil refused the address).
    Failed(&'static str),
}

/// What one use of the shared cache ([`crate::shared_cache`]) came to, for
/// metrics ([`RequestObserver::shared_cache`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SharedCacheEvent {
    /// A read found a valid entry.
    Hit,
    /// A read found no entry.
    Miss,
    /// A read found an entry that failed its MAC, was expired or could not
    /// be decoded; it was ignored.
    Rejected,
    /// A read failed or took too long.
    Error,
    /// A read was not made: the cache is pausing after failures.
    Skipped,
    /// A write was stored.
    Stored,
    /// A write failed or took too long.
    WriteError,
    /// A write was not made: pausing after failures, too many writes in
    /// flight, or the entry is larger than the bound.
    WriteSkipped,
}

impl SharedCacheEvent {
    /// `get` or `set`.
    pub fn operation(self) -> &'static str {
        match self {
            Self::Hit | Self::Miss | Self::Rejected | Self::Error | Self::Skipped => "get",
            Self::Stored | Self::WriteError | Self::WriteSkipped => "set",
        }
    }

    /// `hit`, `miss`, `rejected`, `error`, `skipped` or `stored`.
    pub fn result(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Miss => "miss",
            Self::Rejected => "rejected",
            Self::Error | Self::WriteError => "error",
            Self::Skipped | Self::WriteSkipped => "skipped",
            Self::Stored => "stored",
        }
    }
}

/// Hears every registry exchange (token requests included), for metrics.
/// Called on the request's task: keep it cheap and never block.
pub trait RequestObserver: Send + Sync + fmt::Debug {
    /// `host` is the request URL's `host[:port]` (before redirects);
    /// `waited` is the time from sending the request to its response's
    /// headers or its failure (zero when sigil refused the address).
    fn observe(&self, host: &str, outcome: RequestOutcome, waited: Duration);

    /// A cloud credential provider issued, refreshed or failed to give a
    /// registry credential (see [`crate::cloud`]); by default not counted.
    fn credential_exchange(&self, _provider: ProviderId, _outcome: Exchange) {}

    /// A request to `host` met a rate limit: `retried` (a 429 waited out),
    /// `gave-up` (a 429 whose wait the deadline has no room for), `waited`
    /// or `spent` (sigil's own request budget); by default not counted.
    fn rate_limited(&self, _host: &str, _outcome: &'static str) {}

    /// Discovery of one image's signatures or attestations (one
    /// [`Want`](crate::Want)) fetched from the registries, `round_trips`
    /// long on its critical path ([`Discovery::round_trips`](crate::Discovery::round_trips));
    /// answers from the material cache are not heard. By default not counted.
    fn discovered(&self, _round_trips: u32) {}

    /// One read or write of the shared cache ([`crate::shared_cache`]); by
    /// default not counted.
    fn shared_cache(&self, _event: SharedCacheEvent) {}
}

/// Carries the keychain's exchanges to the client's [`RequestObserver`].
#[derive(Debug)]
struct ExchangeObserver(Arc<dyn RequestObserver>);

impl CredentialObserver for ExchangeObserver {
    fn exchanged(&self, provider: ProviderId, outcome: Exchange) {
        self.0.credential_exchange(provider, outcome);
    }
}

/// How to reach registries.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// Credentials per registry host.
    pub credentials: Credentials,
    /// Talk plain http to every registry (`--allow-insecure-registry`).
    pub allow_insecure_all: bool,
    /// Hosts to talk plain http to (`--insecure-registry HOST`).
    pub insecure_hosts: Vec<String>,
    /// Bounds.
    pub limits: Limits,
    /// PEM certificates trusted as roots in addition to the built-in web
    /// roots (a private registry's CA). Empty: the built-in roots only.
    pub extra_roots_pem: Vec<u8>,
    /// Told about every exchange, when set.
    pub observer: Option<Arc<dyn RequestObserver>>,
    /// Which addresses connections may reach (default:
    /// [`AddressPolicy::standard`]).
    pub addresses: AddressPolicy,
    /// Which registry hosts requests may start at; `None`: any.
    pub scope: Option<Arc<dyn RegistryScope>>,
    /// How names are looked up; `None`: the system resolver.
    pub lookup: Option<Arc<dyn Lookup>>,
    /// Body bytes all sessions of all clients sharing it may hold at once;
    /// `None`: only each session's own bound.
    pub budget: Option<Arc<MemoryBudget>>,
    /// Request slots per registry host, shared by the clients given the
    /// same; `None`: no bound besides the callers'.
    pub slots: Option<Arc<dyn RequestSlots>>,
    /// Cloud credential providers, asked for hosts `credentials` has nothing
    /// for (a pull secret keeps precedence); `None`: none.
    pub keychain: Option<Arc<Keychain>>,
    /// Mirrors and pull-through caches: where a repository is read, in
    /// order ([`crate::mirrors`]); `None`: every repository where it is.
    pub mirrors: Option<Arc<MirrorMap>>,
    /// Requests per minute per registry host, shared by every client and
    /// session holding it ([`crate::ratelimit`]); `None`: no bound.
    pub request_budget: Option<Arc<RequestBudget>>,
}

/// Registry body bytes that the sessions sharing it may hold at once, in
/// all and per registry host; a session gives its bytes back when it ends.
/// A read past either bound fails at once rather than wait, so a registry
/// serving huge bodies uses up its own share and gets denials while other
/// registries keep their room, and memory stays bounded whatever the
/// registries serve.
#[derive(Debug)]
pub struct MemoryBudget {
    total: u64,
    per_host: u64,
    held: Mutex<(u64, HashMap<String, u64>)>,
}

impl MemoryBudget {
    /// At most `total` bytes in all, `per_host` from any one host.
    pub fn new(total: u64, per_host: u64) -> Self {
        Self {
            total,
            per_host: per_host.min(total),
            held: Mutex::new((0, HashMap::new())),
        }
    }

    /// Bytes held now, in all.
    pub fn held(&self) -> u64 {
        self.held.lock().map(|h| h.0).unwrap_or(0)
    }

    fn take(&self, host: &str, n: u64) -> Result<(), (&'static str, u64)> {
        let Ok(mut held) = self.held.lock() else {
            return Err(("from all registries", self.total));
        };
        let (all, hosts) = &mut *held;
        let mine = hosts.get(host).copied().unwrap_or(0);
        if mine + n > self.per_host {
            return Err(("from this registry", self.per_host));
        }
        if *all + n > self.total {
            return Err(("from all registries", self.total));
        }
        *all += n;
        hosts.insert(host.to_string(), mine + n);
        Ok(())
    }

    fn give_back(&self, host: &str, n: u64) {
        if let Ok(mut held) = self.held.lock() {
            let (all, hosts) = &mut *held;
            *all = all.saturating_sub(n);
            if let Some(mine) = hosts.get_mut(host) {
                *mine = mine.saturating_sub(n);
                if *mine == 0 {
                    hosts.remove(host);
                }
            }
        }
    }
}

/// A registry client for one credential set. Cheap to share; tokens are cached.
#[derive(Debug)]
pub struct RegistryClient {
    http: reqwest::Client,
    credentials: Credentials,
    allow_insecure_all: bool,
    insecure_hosts: HashSet<String>,
    limits: Limits,
    // Authorization header per (host, repository), learnt from challenges.
    auth_cache: Mutex<HashMap<(String, String), String>>,
    // (host, repository) pairs that answered a request without a challenge.
    open: Mutex<HashSet<(String, String)>>,
    observer: Option<Arc<dyn RequestObserver>>,
    addresses: Arc<AddressPolicy>,
    scope: Option<Arc<dyn RegistryScope>>,
    budget: Option<Arc<MemoryBudget>>,
    slots: Option<Arc<dyn RequestSlots>>,
    keychain: Option<Arc<Keychain>>,
    mirrors: Option<Arc<MirrorMap>>,
    request_budget: Option<Arc<RequestBudget>>,
}

/// A fetched response body.
#[derive(Debug)]
pub struct Fetched {
    /// HTTP status.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body, within its limit.
    pub body: Vec<u8>,
    /// The final URL.
    pub url: String,
}

/// One verification's use of the client: its deadline and round-trip count.
#[derive(Debug)]
pub struct Session<'a> {
    client: &'a RegistryClient,
    deadline: Instant,
    round_trips: AtomicU32,
    /// Body bytes read so far, against [`Limits::max_session_bytes`].
    bytes_read: AtomicU64,
    /// Bytes taken from the shared [`MemoryBudget`], per host, given back
    /// when the session ends.
    taken: Mutex<HashMap<String, u64>>,
    /// Requests in flight per registry host, against
    /// [`Limits::max_session_requests_per_host`].
    in_flight: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// One token exchange at a time per (host, repository) among this
    /// session's requests: those that meet the same challenge together
    /// wait for the first one's token instead of each fetching their own.
    token_gates: Mutex<HashMap<(String, String), TokenGate>>,
    /// Where mirrored repositories were looked for, per repository as the
    /// policies name it: `place: outcome`, for the denial's words.
    trail: Mutex<Vec<(String, String)>>,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let Some(budget) = &self.client.budget else {
            return;
        };
        if let Ok(taken) = self.taken.get_mut() {
            for (host, n) in taken.drain() {
                budget.give_back(&host, n);
            }
        }
    }
}

impl RegistryClient {
    /// Builds a client. Fails only if the TLS stack cannot be set up.
    pub fn new(config: ClientConfig) -> Result<Self, RegistryError> {
        let max = config.limits.max_redirects;
        let addresses = Arc::new(config.addresses.clone());
        let redirect_addresses = addresses.clone();
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            let downgrade = attempt.url().scheme() == "http"
                && attempt
                    .previous()
                    .last()
                    .is_some_and(|u| u.scheme() == "https");
            if attempt.previous().len() > max || downgrade {
                return attempt.error("too many redirects or a redirect from https to http");
            }
            // Names are checked by the resolver; literal addresses never reach it.
            match literal_refused(&redirect_addresses, attempt.url()) {
                Some(refused) => attempt.error(refused),
                None => attempt.follow(),
            }
        });
        let lookup = config
            .lookup
            .clone()
            .unwrap_or_else(|| Arc::new(SystemLookup));
        let resolver = GuardedResolver::new(lookup, addresses.clone());
        let build_error = |reason: String| RegistryError::Connect {
            url: String::new(),
            reason,
        };
        if let (Some(keychain), Some(observer)) = (&config.keychain, &config.observer) {
            keychain.observe(Arc::new(ExchangeObserver(observer.clone())));
        }
        // reqwest takes rustls's process default and has no fallback of its own.
        crate::tls::default_provider();
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(policy)
            .dns_resolver(Arc::new(resolver))
            .connect_timeout(config.limits.request_timeout)
            .user_agent(concat!("sigil/", env!("CARGO_PKG_VERSION")));
        if !config.extra_roots_pem.is_empty() {
            let roots = reqwest::Certificate::from_pem_bundle(&config.extra_roots_pem)
                .map_err(|e| build_error(format!("the extra CA bundle is not PEM: {e}")))?;
            if roots.is_empty() {
                return Err(build_error(
                    "the extra CA bundle holds no PEM certificate".into(),
                ));
            }
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
        }
        let http = builder
            .build()
            .map_err(|e| build_error(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            credentials: config.credentials,
            allow_insecure_all: config.allow_insecure_all,
            insecure_hosts: config
                .insecure_hosts
                .iter()
                .map(|h| normalize_host(h))
                .collect(),
            limits: config.limits,
            auth_cache: Mutex::new(HashMap::new()),
            open: Mutex::new(HashSet::new()),
            observer: config.observer,
            addresses,
            scope: config.scope,
            budget: config.budget,
            slots: config.slots,
            keychain: config.keychain,
            mirrors: config.mirrors,
            request_budget: config.request_budget,
        })
    }

    fn rate_limited(&self, url: &Url, outcome: &'static str) {
        if let Some(observer) = &self.observer {
            observer.rate_limited(&host_port(url), outcome);
        }
    }

    fn observe(&self, url: &Url, outcome: RequestOutcome, waited: Duration) {
        let Some(observer) = &self.observer else {
            return;
        };
        let host = url.host_str().unwrap_or("");
        match url.port() {
            Some(port) => observer.observe(&format!("{host}:{port}"), outcome, waited),
            None => observer.observe(host, outcome, waited),
        }
    }

    /// Tells the observer, if any, that a discovery took `round_trips`
    /// round trips on its critical path.
    pub(crate) fn observe_discovery(&self, round_trips: u32) {
        if let Some(observer) = &self.observer {
            observer.discovered(round_trips);
        }
    }

    /// The client's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Starts a session whose deadline is the limits' total deadline from now.
    pub fn session(&self) -> Session<'_> {
        Session {
            client: self,
            deadline: Instant::now() + self.limits.total_deadline,
            round_trips: AtomicU32::new(0),
            bytes_read: AtomicU64::new(0),
            taken: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
            token_gates: Mutex::new(HashMap::new()),
            trail: Mutex::new(Vec::new()),
        }
    }

    fn insecure(&self, host: &str) -> bool {
        self.allow_insecure_all || self.insecure_hosts.contains(&normalize_host(host))
    }

    /// The base URL of a registry host.
    pub fn base_url(&self, host: &str) -> Result<Url, RegistryError> {
        let scheme = if self.insecure(host) { "http" } else { "https" };
        let s = format!("{scheme}://{host}/");
        Url::parse(&s).map_err(|e| RegistryError::Url {
            url: s,
            reason: e.to_string(),
        })
    }
}

fn cached_auth(client: &RegistryClient, key: &(String, String)) -> Option<String> {
    client
        .auth_cache
        .lock()
        .ok()
        .and_then(|m| m.get(key).cloned())
}

/// Held while one request chooses the Authorization header of a (host,
/// repository) after a challenge.
type TokenGate = Arc<tokio::sync::Mutex<()>>;

/// Repositories a client remembers answering without a challenge. Images
/// name any repository; past this the record starts over, which costs only
/// the sharing (a session's first request to a repository goes alone).
const MAX_LEARNT_REPOSITORIES: usize = 4096;

/// Whether `key` answered without a challenge before.
fn is_open(client: &RegistryClient, key: &(String, String)) -> bool {
    client.open.lock().is_ok_and(|open| open.contains(key))
}

fn mark_open(client: &RegistryClient, key: &(String, String)) {
    if let Ok(mut open) = client.open.lock() {
        if open.len() >= MAX_LEARNT_REPOSITORIES && !open.contains(key) {
            open.clear();
        }
        open.insert(key.clone());
    }
}

fn store_auth(client: &RegistryClient, key: (String, String), value: String) {
    if let Ok(mut m) = client.auth_cache.lock() {
        m.insert(key, value);
    }
}

fn basic_header(username: &str, password: &str) -> String {
    let raw = format!("{username}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

fn credential_header(c: &Credential) -> String {
    match c {
        Credential::Basic { username, password } => basic_header(username, password),
        Credential::Bearer(t) => format!("Bearer {t}"),
    }
}

/// Whether credentials for `registry_host` may be sent to a token realm on `realm_host`.
pub fn realm_may_receive_credentials(registry_host: &str, realm_host: &str) -> bool {
    let (r, t) = (normalize_host(registry_host), normalize_host(realm_host));
    r == t || (r == "index.docker.io" && t == "auth.docker.io")
}

#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

impl Session<'_> {
    /// Registry round trips made so far (token requests included).
    pub fn round_trips(&self) -> u32 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// The client.
    pub fn client(&self) -> &RegistryClient {
        self.client
    }

    /// This session's gate of `key`'s token exchanges.
    fn token_gate(&self, key: &(String, String)) -> TokenGate {
        // Nothing panics while holding the map, so a poisoned lock still holds a sound map.
        let mut gates = self
            .token_gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        gates.entry(key.clone()).or_default().clone()
    }

    /// This session's semaphore for `host`.
    fn host_permits(&self, host: &str) -> Arc<tokio::sync::Semaphore> {
        let bound = self.client.limits.max_session_requests_per_host.max(1);
        // Nothing panics while holding the map, so a poisoned lock still holds a sound map.
        let mut hosts = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        hosts
            .entry(normalize_host(host))
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(bound)))
            .clone()
    }

    /// Whether a mirror rule covers `repo` (its reads go place by place
    /// and leave a trail, in the order they were made).
    pub fn mirrored(&self, repo: &Repository) -> bool {
        self.places(repo).is_some()
    }

    fn timeout_for(&self, url: &str) -> Result<Duration, RegistryError> {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(RegistryError::Deadline {
                url: url.to_string(),
                deadline: self.client.limits.total_deadline,
            });
        }
        Ok(remaining.min(self.client.limits.request_timeout))
    }

    /// One HTTP exchange, body read within `max` bytes and the timeout.
    async fn exchange(
        &self,
        method: Method,
        url: &Url,
        accept: &str,
        auth: Option<&str>,
        max: u64,
        what: &'static str,
    ) -> Result<Fetched, RegistryError> {
        let u = url.to_string();
        if let Some(refused) = literal_refused(&self.client.addresses, url) {
            self.client
                .observe(url, RequestOutcome::Failed("forbidden"), Duration::ZERO);
            return Err(RegistryError::ForbiddenAddress { url: u, refused });
        }
        if let Some(budget) = &self.client.request_budget {
            let host = host_port(url);
            let left = self.deadline.saturating_duration_since(Instant::now());
            match budget.reserve(&host, Instant::now(), left) {
                Ok(wait) if wait.is_zero() => {}
                Ok(wait) => {
                    self.client.rate_limited(url, "waited");
                    tokio::time::sleep(wait).await;
                }
                Err(wait) => {
                    self.client.rate_limited(url, "spent");
                    return Err(RegistryError::RateBudget {
                        per_minute: budget.per_minute(&host),
                        host,
                        wait,
                    });
                }
            }
        }
        let timeout = self.timeout_for(&u)?;
        let per_request = timeout == self.client.limits.request_timeout;
        let expired = || {
            if per_request {
                RegistryError::Timeout {
                    url: u.clone(),
                    after: timeout,
                }
            } else {
                RegistryError::Deadline {
                    url: u.clone(),
                    deadline: self.client.limits.total_deadline,
                }
            }
        };
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let mut req = self
            .client
            .http
            .request(method, url.clone())
            .header(ACCEPT, accept);
        if let Some(a) = auth {
            req = req.header(AUTHORIZATION, a);
        }
        // Exactly one observation per exchange: the status once headers
        // arrive, or the class of failure if they never do.
        let observed = AtomicBool::new(false);
        let sent = Instant::now();
        let note = |outcome| {
            if !observed.swap(true, Ordering::Relaxed) {
                self.client.observe(url, outcome, sent.elapsed());
            }
        };
        let work = async {
            let mut resp = req.send().await.map_err(|e| {
                if let Some(refused) = refused_in(&e) {
                    note(RequestOutcome::Failed("forbidden"));
                    RegistryError::ForbiddenAddress {
                        url: u.clone(),
                        refused,
                    }
                } else if e.is_redirect() {
                    note(RequestOutcome::Failed("redirects"));
                    RegistryError::Redirects {
                        url: u.clone(),
                        limit: self.client.limits.max_redirects,
                    }
                } else {
                    note(RequestOutcome::Failed(if e.is_timeout() {
                        "timeout"
                    } else {
                        "connect"
                    }));
                    RegistryError::Connect {
                        url: u.clone(),
                        reason: error_chain(&e),
                    }
                }
            })?;
            let status = resp.status();
            note(RequestOutcome::Status(status.as_u16()));
            let headers = resp.headers().clone();
            let final_url = resp.url().to_string();
            let declared = headers
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > max) {
                return Err(RegistryError::TooLarge {
                    url: final_url,
                    what,
                    limit: max,
                });
            }
            let budget = self.client.limits.max_session_bytes;
            let mut body = Vec::new();
            // Bounded: the loop ends when the body ends or passes `max`.
            while let Some(chunk) = resp.chunk().await.map_err(|e| RegistryError::Body {
                url: final_url.clone(),
                reason: error_chain(&e),
            })? {
                if body.len() as u64 + chunk.len() as u64 > max {
                    return Err(RegistryError::TooLarge {
                        url: final_url,
                        what,
                        limit: max,
                    });
                }
                let before = self
                    .bytes_read
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                if before + chunk.len() as u64 > budget {
                    return Err(RegistryError::SessionBudget {
                        url: final_url,
                        limit: budget,
                    });
                }
                self.take_budget(url, chunk.len() as u64)
                    .map_err(|(scope, limit)| RegistryError::MemoryBudget {
                        url: final_url.clone(),
                        scope,
                        limit,
                    })?;
                body.extend_from_slice(&chunk);
            }
            Ok(Fetched {
                status,
                headers,
                body,
                url: final_url,
            })
        };
        tokio::time::timeout(timeout, work).await.map_err(|_| {
            note(RequestOutcome::Failed("timeout"));
            expired()
        })?
    }

    /// Takes `n` bytes for `url`'s host from the shared budget, if any.
    fn take_budget(&self, url: &Url, n: u64) -> Result<(), (&'static str, u64)> {
        let Some(budget) = &self.client.budget else {
            return Ok(());
        };
        let host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (h, None) => h.unwrap_or_default().to_string(),
            (None, Some(_)) => String::new(),
        };
        budget.take(&host, n)?;
        if let Ok(mut taken) = self.taken.lock() {
            *taken.entry(host).or_insert(0) += n;
        }
        Ok(())
    }

    /// A request to a registry on behalf of `repo`, answering auth challenges.
    pub async fn request(
        &self,
        method: Method,
        url: &Url,
        repo: &Repository,
        accept: &str,
        max: u64,
        what: &'static str,
    ) -> Result<Fetched, RegistryError> {
        let key = (normalize_host(&repo.host), repo.name.clone());
        let wait_gate = || async {
            let gate = self.token_gate(&key);
            tokio::time::timeout_at(self.deadline, gate.lock_owned())
                .await
                .map_err(|_| RegistryError::Deadline {
                    url: url.to_string(),
                    deadline: self.client.limits.total_deadline,
                })
        };
        // This session's first requests to a repository go through its
        // gate one at a time until the client has learnt whether the
        // repository asks for a token, so requests started together share
        // one challenge and one token exchange instead of each meeting its
        // own. The gate is the session's, not the client's: a registry
        // that hangs on one verification's first request holds up no other
        // verification; and it is taken before the slots, so waiting for
        // it holds none.
        let mut held = None;
        if cached_auth(self.client, &key).is_none() && !is_open(self.client, &key) {
            held = Some(wait_gate().await?);
        }
        // One of this session's places at the host, then one slot of the
        // registry's, for the whole exchange, both waited for within the
        // session's deadline.
        let permits = self.host_permits(&repo.host);
        let _permit = tokio::time::timeout_at(self.deadline, permits.acquire_owned())
            .await
            .map_err(|_| RegistryError::Deadline {
                url: url.to_string(),
                deadline: self.client.limits.total_deadline,
            })?
            // The semaphore is never closed; a closed one would mean no bound.
            .ok();
        let _slot = match &self.client.slots {
            Some(slots) => Some(
                tokio::time::timeout_at(self.deadline, slots.acquire(&repo.host))
                    .await
                    .map_err(|_| RegistryError::Deadline {
                        url: url.to_string(),
                        deadline: self.client.limits.total_deadline,
                    })?,
            ),
            None => None,
        };
        let mut auth = cached_auth(self.client, &key);
        if let Some(cached) = &auth
            && let Some(fresh) = self.fresh_cloud_basic(&repo.host, cached).await
        {
            store_auth(self.client, key.clone(), fresh.clone());
            auth = Some(fresh);
        }
        if auth.is_some() || is_open(self.client, &key) {
            held = None;
        }
        let first = self
            .patient_exchange(method.clone(), url, accept, auth.as_deref(), max, what)
            .await?;
        if first.status != StatusCode::UNAUTHORIZED {
            if auth.is_none() {
                mark_open(self.client, &key);
            }
            return self.check_status(first, url);
        }
        let challenge = first
            .headers
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_challenge);
        // Requests that met this challenge together share one token: the
        // first through the gate fetches it, the others find it cached. The
        // gate is held only while the header is chosen, not for the retry.
        let header = {
            let _gate = match held.take() {
                Some(guard) => guard,
                None => wait_gate().await?,
            };
            match cached_auth(self.client, &key) {
                Some(learnt) if auth.as_deref() != Some(learnt.as_str()) => learnt,
                _ => {
                    let header = self.answer_challenge(url, repo, challenge).await?;
                    if auth.as_deref() == Some(header.as_str()) {
                        return Err(self.denied(url, 401, repo));
                    }
                    store_auth(self.client, key, header.clone());
                    header
                }
            }
        };
        let second = self
            .patient_exchange(method, url, accept, Some(&header), max, what)
            .await?;
        self.check_status(second, url)
    }

    /// The Authorization header that answers `challenge` (a token fetched
    /// for `repo`, or the credential for Basic).
    async fn answer_challenge(
        &self,
        url: &Url,
        repo: &Repository,
        challenge: Option<Challenge>,
    ) -> Result<String, RegistryError> {
        let credential = self.credential_for(&repo.host).await?;
        match challenge {
            Some(Challenge::Bearer { realm, service, .. }) => {
                self.token(
                    &repo.host,
                    &repo.name,
                    &realm,
                    service.as_deref(),
                    credential.as_ref(),
                )
                .await
            }
            Some(Challenge::Basic) => match &credential {
                Some(c) => Ok(credential_header(c)),
                None => Err(self.denied(url, 401, repo)),
            },
            None => Err(self.denied(url, 401, repo)),
        }
    }

    /// [`exchange`](Self::exchange), waiting out a registry's 429 as its
    /// `Retry-After` asks (one second without it), at most twice, while the
    /// deadline leaves room; else the 429 is the answer.
    async fn patient_exchange(
        &self,
        method: Method,
        url: &Url,
        accept: &str,
        auth: Option<&str>,
        max: u64,
        what: &'static str,
    ) -> Result<Fetched, RegistryError> {
        const RETRIES: usize = 2;
        for attempt in 0..=RETRIES {
            let f = self
                .exchange(method.clone(), url, accept, auth, max, what)
                .await?;
            if f.status != StatusCode::TOO_MANY_REQUESTS {
                return Ok(f);
            }
            let now_unix = time::OffsetDateTime::now_utc().unix_timestamp();
            let header = f.headers.get("retry-after").and_then(|v| v.to_str().ok());
            let asked = retry_after(header, now_unix);
            let wait = asked.unwrap_or(Duration::from_secs(1));
            let left = self.deadline.saturating_duration_since(Instant::now());
            // Room for the wait and for the answer after it.
            if attempt == RETRIES || wait + Duration::from_millis(200) >= left {
                self.client.rate_limited(url, "gave-up");
                return Err(RegistryError::RateLimited {
                    url: url.to_string(),
                    retry_after: asked.map(|d| d.as_secs()),
                    left,
                });
            }
            self.client.rate_limited(url, "retried");
            tokio::time::sleep(wait).await;
        }
        Err(RegistryError::RateLimited {
            url: url.to_string(),
            retry_after: None,
            left: self.deadline.saturating_duration_since(Instant::now()),
        })
    }

    /// Keeps a cloud credential fresh while it is in use: asking the
    /// keychain on each request to a host it serves starts the background
    /// refresh in time (a cache lookup otherwise). When the registry took
    /// the credential itself (Basic, as ECR) and the keychain has replaced
    /// it, the new header, so no request goes out with a token about to
    /// expire; a bearer token of the registry's own is renewed through its
    /// realm when the registry refuses it.
    async fn fresh_cloud_basic(&self, host: &str, cached: &str) -> Option<String> {
        let keychain = self.client.keychain.as_ref()?;
        let credentials = &self.client.credentials;
        if credentials.for_host(host).is_some() {
            return None;
        }
        let wait = self.deadline.saturating_duration_since(Instant::now());
        let helper = credentials.helper_for(host);
        let fresh = keychain.credential(host, helper, wait).await?.ok()?;
        let header = credential_header(&fresh);
        (cached.starts_with("Basic ") && header.starts_with("Basic ") && header != cached)
            .then_some(header)
    }

    /// The credential for `host`: a docker config's or pull secret's entry
    /// first; else the cloud provider (or, on a laptop, the credential
    /// helper) serving it, asked within what is left of the deadline; else
    /// none. A host whose credentials a helper keeps, where helpers do not
    /// run and no provider serves it, is an error naming the helper.
    async fn credential_for(&self, host: &str) -> Result<Option<Credential>, RegistryError> {
        let credentials = &self.client.credentials;
        if let Some(c) = credentials.for_host(host) {
            return Ok(Some(c.clone()));
        }
        let helper = credentials.helper_for(host);
        if let Some(keychain) = &self.client.keychain {
            let wait = self.deadline.saturating_duration_since(Instant::now());
            if let Some(result) = keychain.credential(host, helper, wait).await {
                return result
                    .map(Some)
                    .map_err(|error| RegistryError::Credentials {
                        host: host.to_string(),
                        error: Box::new(error),
                    });
            }
        }
        match helper {
            Some(helper) => Err(RegistryError::CredentialHelper {
                host: host.to_string(),
                helper: helper.to_string(),
            }),
            None => Ok(None),
        }
    }

    fn denied(&self, url: &Url, status: u16, repo: &Repository) -> RegistryError {
        let have = self.client.credentials.for_host(&repo.host).is_some();
        let cloud = (!have)
            .then_some(self.client.keychain.as_ref())
            .flatten()
            .and_then(|k| Some((k.describe(&repo.host)?, k.refused_fix(&repo.host)?)));
        let hint = match (status, have, cloud) {
            (401, false, Some(((provider, source), fix))) => {
                format!("the {provider} credentials from {source} were refused for {repo}; {fix}")
            }
            (401, false, None) => format!(
                "anonymous access to {repo} was refused; give credentials for {} (docker config or pull secret)",
                repo.host
            ),
            (401, true, _) => format!("the credentials for {} were refused; check them", repo.host),
            _ => format!(
                "access to {repo} is forbidden for these credentials; check the pull secret's permissions"
            ),
        };
        RegistryError::Denied {
            url: url.to_string(),
            status,
            hint,
        }
    }

    fn check_status(&self, f: Fetched, url: &Url) -> Result<Fetched, RegistryError> {
        let s = f.status.as_u16();
        if f.status.is_success() || s == 404 {
            return Ok(f);
        }
        if s == 401 || s == 403 {
            return Err(RegistryError::Denied {
                url: url.to_string(),
                status: s,
                hint: "access forbidden; check the registry credentials and their permissions"
                    .into(),
            });
        }
        Err(RegistryError::Status {
            url: url.to_string(),
            status: s,
        })
    }

    async fn token(
        &self,
        host: &str,
        repo: &str,
        realm: &str,
        service: Option<&str>,
        credential: Option<&Credential>,
    ) -> Result<String, RegistryError> {
        let terr = |reason: String| RegistryError::Token {
            realm: realm.to_string(),
            reason,
        };
        let mut url = Url::parse(realm).map_err(|e| terr(format!("realm is not a URL: {e}")))?;
        let realm_host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            (None, _) => return Err(terr("realm has no host".into())),
        };
        match url.scheme() {
            "https" => {}
            "http" if self.client.insecure(&realm_host) => {}
            s => {
                return Err(terr(format!(
                    "realm scheme `{s}` is not allowed; only https (or http for hosts marked insecure)"
                )));
            }
        }
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = service {
                q.append_pair("service", s);
            }
            // Our own scope, never the challenge's: sigil only ever pulls.
            q.append_pair("scope", &format!("repository:{repo}:pull"));
        }
        let auth = match credential {
            Some(c) if realm_may_receive_credentials(host, &realm_host) => {
                Some(credential_header(c))
            }
            _ => None,
        };
        let f = self
            .exchange(
                Method::GET,
                &url,
                "application/json",
                auth.as_deref(),
                1 << 20,
                "token response",
            )
            .await?;
        if !f.status.is_success() {
            return Err(terr(format!(
                "token endpoint answered {}",
                f.status.as_u16()
            )));
        }
        let t: TokenResponse = serde_json::from_slice(&f.body)
            .map_err(|e| terr(format!("bad token response: {e}")))?;
        let token = t
            .token
            .or(t.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| terr("no token in the response".into()))?;
        Ok(format!("Bearer {token}"))
    }

    /// Where `repo` is read, in order, when a mirror rule covers it.
    fn places(&self, repo: &Repository) -> Option<Vec<Place>> {
        self.client.mirrors.as_ref()?.places(repo)
    }

    /// Notes what `place` answered for `repo` (once per place and outcome).
    fn note(&self, repo: &Repository, place: &Place, outcome: &str) {
        if let Ok(mut trail) = self.trail.lock() {
            let entry = (repo.to_string(), format!("{place}: {outcome}"));
            if !trail.contains(&entry) && trail.len() < 64 {
                trail.push(entry);
            }
        }
    }

    /// Where `repo` was looked for through its mirrors and what each place
    /// answered (`harbor.example.com/proxy/library/nginx (mirror): not
    /// found`), and the upstream when the setting forbids reading it.
    pub fn mirror_trail(&self, repo: &Repository) -> Vec<String> {
        let key = repo.to_string();
        let mut out: Vec<String> = self
            .trail
            .lock()
            .map(|t| {
                t.iter()
                    .filter(|(r, _)| *r == key)
                    .map(|(_, e)| e.clone())
                    .collect()
            })
            .unwrap_or_default();
        if let Some(places) = self.places(repo)
            && !out.is_empty()
            && !places.iter().any(|p| p.upstream)
        {
            out.push(format!(
                "{repo} (upstream): not contacted, the mirror setting allows no upstream"
            ));
        }
        out
    }

    /// Reads `repo` at each of its places in turn, until one has it: `get`
    /// answers `Ok(None)` where it is absent. A place that fails for an
    /// outage (unreachable, refused, 5xx) is noted and the next one tried;
    /// content that does not check out (a wrong digest) fails at once,
    /// whichever place served it. Absent everywhere: `Ok(None)`, unless
    /// some place failed, then that failure.
    async fn across<T, F, Fut>(
        &self,
        repo: &Repository,
        places: Vec<Place>,
        by_digest: bool,
        get: F,
    ) -> Result<Option<T>, RegistryError>
    where
        F: Fn(Repository) -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, RegistryError>>,
    {
        if places.is_empty() {
            return Err(blocked(repo));
        }
        let mut failed = None;
        for place in places.into_iter().filter(|p| p.serves(by_digest)) {
            match get(place.repository.clone()).await {
                Ok(Some(found)) => {
                    self.note(repo, &place, "found");
                    return Ok(Some(found));
                }
                Ok(None) => self.note(repo, &place, "not found"),
                Err(e) if passes_over(&e) => {
                    self.note(repo, &place, e.reason());
                    failed.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// Resolves a tag to a digest (through the repository's mirrors, when
    /// a rule covers it): HEAD with `Docker-Content-Digest`, or GET and
    /// SHA-256 of the body when the header is missing. `None` when the tag
    /// does not exist.
    pub async fn resolve_tag(
        &self,
        repo: &Repository,
        tag: &str,
    ) -> Result<Option<Digest>, RegistryError> {
        match self.places(repo) {
            None => self.resolve_tag_here(repo, tag).await,
            Some(places) => {
                self.across(repo, places, false, |r| async move {
                    self.resolve_tag_here(&r, tag).await
                })
                .await
            }
        }
    }

    /// Fetches a manifest by tag or digest (through the repository's
    /// mirrors, when a rule covers it). By digest, the body must hash to
    /// it; by tag, it must hash to `Docker-Content-Digest` when the
    /// registry sends one. `None` on 404.
    pub async fn manifest(
        &self,
        repo: &Repository,
        reference: &str,
        expected: Option<Digest>,
    ) -> Result<Option<(Vec<u8>, Digest, Manifest)>, RegistryError> {
        match self.places(repo) {
            None => self.manifest_here(repo, reference, expected).await,
            Some(places) => {
                let by_digest = Digest::parse(reference).is_ok();
                self.across(repo, places, by_digest, |r| async move {
                    self.manifest_here(&r, reference, expected).await
                })
                .await
            }
        }
    }

    /// Fetches a blob by descriptor (through the repository's mirrors, when
    /// a rule covers it): size checked against the limit before the
    /// request, digest checked after. A missing blob is an error.
    pub async fn blob(
        &self,
        repo: &Repository,
        desc: &Descriptor,
    ) -> Result<Vec<u8>, RegistryError> {
        let Some(places) = self.places(repo) else {
            return self.blob_here(repo, desc).await;
        };
        let found = self
            .across(repo, places, true, |r| async move {
                match self.blob_here(&r, desc).await {
                    Err(RegistryError::Status { status: 404, .. }) => Ok(None),
                    other => other.map(Some),
                }
            })
            .await?;
        found.ok_or_else(|| RegistryError::Status {
            url: format!("{repo}/blobs/{}", desc.digest),
            status: 404,
        })
    }

    /// Lists referrers of `digest` through the referrers API (at each of
    /// the repository's places in turn, when a mirror rule covers it: a
    /// pull-through cache holds only what was pulled through it, so an
    /// empty list there sends the question on to the next place), following
    /// `Link` pagination on the same origin. `None` when the API is absent
    /// (404), so the caller falls back to the tag schema.
    pub async fn referrers(
        &self,
        repo: &Repository,
        digest: &Digest,
    ) -> Result<Option<Vec<Descriptor>>, RegistryError> {
        let Some(places) = self.places(repo) else {
            return self.referrers_here(repo, digest).await;
        };
        if places.is_empty() {
            return Err(blocked(repo));
        }
        let (mut some_without_api, mut failed) = (false, None);
        for place in places.into_iter().filter(|p| p.serves(true)) {
            match self.referrers_here(&place.repository, digest).await {
                Ok(Some(list)) if !list.is_empty() => {
                    self.note(repo, &place, "referrers found");
                    return Ok(Some(list));
                }
                Ok(Some(_)) => self.note(repo, &place, "no referrers"),
                Ok(None) => {
                    self.note(repo, &place, "no referrers API");
                    some_without_api = true;
                }
                Err(e) if passes_over(&e) => {
                    self.note(repo, &place, e.reason());
                    failed.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        // Nowhere with referrers: where a place has no referrers API, its
        // signatures may sit under the fallback tag, which the caller reads
        // next (through the same places).
        match (some_without_api, failed) {
            (true, _) => Ok(None),
            (false, Some(e)) => Err(e),
            (false, None) => Ok(Some(Vec::new())),
        }
    }

    fn v2_url(&self, repo: &Repository, tail: &str) -> Result<Url, RegistryError> {
        if let Some(scope) = &self.client.scope {
            scope
                .permits(&repo.host)
                .map_err(|reason| RegistryError::ForbiddenRegistry {
                    host: repo.host.clone(),
                    reason,
                })?;
        }
        let base = self.client.base_url(&repo.host)?;
        let path = format!("v2/{}/{tail}", repo.name);
        base.join(&path).map_err(|e| RegistryError::Url {
            url: path,
            reason: e.to_string(),
        })
    }

    /// Resolves a tag to a digest: HEAD with `Docker-Content-Digest`, or GET
    /// and SHA-256 of the body when the header is missing. `None` when the
    /// tag does not exist.
    async fn resolve_tag_here(
        &self,
        repo: &Repository,
        tag: &str,
    ) -> Result<Option<Digest>, RegistryError> {
        let url = self.v2_url(repo, &format!("manifests/{tag}"))?;
        let max = self.client.limits.max_manifest_bytes;
        let head = self
            .request(Method::HEAD, &url, repo, MANIFEST_ACCEPT, max, "manifest")
            .await;
        match head {
            Ok(f) if f.status == StatusCode::NOT_FOUND => return Ok(None),
            Ok(f) if f.status.is_success() => {
                if let Some(d) = header_digest(&f.headers) {
                    return Ok(Some(d));
                }
            }
            // Some registries refuse HEAD (405) or fail it; GET decides.
            Ok(_) | Err(RegistryError::Status { .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(self
            .manifest_here(repo, tag, None)
            .await?
            .map(|(_, d, _)| d))
    }

    /// Fetches a manifest by tag or digest. By digest, the body must hash to
    /// it; by tag, it must hash to `Docker-Content-Digest` when the registry
    /// sends one. `None` on 404.
    async fn manifest_here(
        &self,
        repo: &Repository,
        reference: &str,
        expected: Option<Digest>,
    ) -> Result<Option<(Vec<u8>, Digest, Manifest)>, RegistryError> {
        let url = self.v2_url(repo, &format!("manifests/{reference}"))?;
        let max = self.client.limits.max_manifest_bytes;
        let f = self
            .request(Method::GET, &url, repo, MANIFEST_ACCEPT, max, "manifest")
            .await?;
        if f.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let found = Digest::of(&f.body);
        let announced = header_digest(&f.headers);
        for want in [expected, announced].into_iter().flatten() {
            if want != found {
                return Err(RegistryError::DigestMismatch {
                    url: url.to_string(),
                    expected: want.to_string(),
                    found: found.to_string(),
                });
            }
        }
        let m: Manifest = serde_json::from_slice(&f.body).map_err(|e| RegistryError::Json {
            url: url.to_string(),
            what: "manifest",
            reason: e.to_string(),
        })?;
        Ok(Some((f.body, found, m)))
    }

    /// Fetches a blob by descriptor: size checked against the limit before
    /// the request, digest checked after. A missing blob is an error.
    async fn blob_here(
        &self,
        repo: &Repository,
        desc: &Descriptor,
    ) -> Result<Vec<u8>, RegistryError> {
        let max = self.client.limits.max_blob_bytes;
        let url = self.v2_url(repo, &format!("blobs/{}", desc.digest))?;
        let expected = Digest::parse(&desc.digest).map_err(|e| RegistryError::Url {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        if desc.size < 0 || desc.size as u64 > max {
            return Err(RegistryError::TooLarge {
                url: url.to_string(),
                what: "blob",
                limit: max,
            });
        }
        let f = self
            .request(Method::GET, &url, repo, "*/*", max, "blob")
            .await?;
        if f.status == StatusCode::NOT_FOUND {
            return Err(RegistryError::Status {
                url: url.to_string(),
                status: 404,
            });
        }
        let found = Digest::of(&f.body);
        if found != expected {
            return Err(RegistryError::DigestMismatch {
                url: url.to_string(),
                expected: expected.to_string(),
                found: found.to_string(),
            });
        }
        Ok(f.body)
    }

    /// Lists referrers of `digest` through the referrers API, following
    /// `Link` pagination on the same origin. `None` when the API is absent
    /// (404), so the caller falls back to the tag schema.
    async fn referrers_here(
        &self,
        repo: &Repository,
        digest: &Digest,
    ) -> Result<Option<Vec<Descriptor>>, RegistryError> {
        let limits = &self.client.limits;
        let mut url = self.v2_url(repo, &format!("referrers/{digest}"))?;
        let origin = url.origin();
        let mut out = Vec::new();
        let subject = format!("{repo}@{digest}");
        for page in 0..limits.max_pages {
            let f = self
                .request(
                    Method::GET,
                    &url,
                    repo,
                    "application/vnd.oci.image.index.v1+json",
                    limits.max_manifest_bytes,
                    "referrers list",
                )
                .await?;
            if f.status == StatusCode::NOT_FOUND {
                // A 404 on a later page is a broken registry, not an absent API.
                return if page == 0 {
                    Ok(None)
                } else {
                    Err(RegistryError::Status {
                        url: url.to_string(),
                        status: 404,
                    })
                };
            }
            let index: Manifest =
                serde_json::from_slice(&f.body).map_err(|e| RegistryError::Json {
                    url: url.to_string(),
                    what: "referrers list",
                    reason: e.to_string(),
                })?;
            out.extend(index.manifests);
            if out.len() > limits.max_referrers {
                return Err(RegistryError::TooMany {
                    what: "referrers list",
                    subject,
                    limit: limits.max_referrers,
                });
            }
            let Some(next) = next_link(&f.headers) else {
                return Ok(Some(out));
            };
            let next_url = url.join(&next).map_err(|e| RegistryError::Url {
                url: next.clone(),
                reason: e.to_string(),
            })?;
            if next_url.origin() != origin {
                return Err(RegistryError::Url {
                    url: next_url.to_string(),
                    reason: "referrers pagination points to another host; refusing to follow"
                        .into(),
                });
            }
            url = next_url;
        }
        Err(RegistryError::TooManyPages {
            subject,
            limit: limits.max_pages,
        })
    }
}

/// `host[:port]` of `url`.
fn host_port(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (h, _) => h.unwrap_or_default().to_string(),
    }
}

/// Whether a place of a mirrored repository that failed with `e` is passed
/// over for the next one: an outage (unreachable, refused, 5xx, rate
/// limited) or a host sigil may not contact; never content that does not
/// check out.
fn passes_over(e: &RegistryError) -> bool {
    e.is_inconclusive() || matches!(e, RegistryError::ForbiddenRegistry { .. })
}

/// The error for a repository the mirror setting blocks.
fn blocked(repo: &Repository) -> RegistryError {
    RegistryError::ForbiddenRegistry {
        host: repo.host.clone(),
        reason: "the registry mirror setting blocks this registry (CRI-O `blocked = true`)".into(),
    }
}

/// The refusal of `url`'s host when it is a literal address `policy`
/// forbids, or the name of a metadata server standing for one.
fn literal_refused(policy: &AddressPolicy, url: &Url) -> Option<AddressRefused> {
    let address = match url.host()? {
        url::Host::Ipv4(a) => std::net::IpAddr::V4(a),
        url::Host::Ipv6(a) => std::net::IpAddr::V6(a),
        url::Host::Domain(name) => crate::egress::metadata_name(name)?,
    };
    policy.check(address).err().map(|class| AddressRefused {
        host: url.host_str().unwrap_or_default().to_string(),
        address,
        class,
    })
}

/// The address refusal somewhere in a transport error's causes, if any.
fn refused_in(e: &(dyn std::error::Error + 'static)) -> Option<AddressRefused> {
    let mut level = Some(e);
    // Bounded: transport error chains are a handful of levels deep.
    for _ in 0..8 {
        let current = level?;
        if let Some(r) = current.downcast_ref::<AddressRefused>() {
            return Some(r.clone());
        }
        if let Some(ResolveError::Refused(r)) = current.downcast_ref::<ResolveError>() {
            return Some(r.clone());
        }
        level = current.source();
    }
    None
}

fn header_digest(h: &HeaderMap) -> Option<Digest> {
    h.get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| Digest::parse(s.trim()).ok())
}

/// The `rel="next"` target of a `Link` header, if any.
pub fn next_link(h: &HeaderMap) -> Option<String> {
    for v in h.get_all(LINK) {
        let Ok(s) = v.to_str() else { continue };
        for part in s.split(',') {
            let mut pieces = part.split(';');
            let target = pieces.next()?.trim();
            let is_next = pieces.any(|p| {
                let p = p.trim().to_ascii_lowercase();
                p == "rel=\"next\"" || p == "rel=next"
            });
            if is_next {
                return target
                    .strip_prefix('<')
                    .and_then(|t| t.strip_suffix('>'))
                    .map(str::to_string);
            }
        }
    }
    None
}

/// The causes of a transport error, outermost first, without the layers
/// that only wrap: reqwest's "error sending request for url (...)" (the URL
/// is in sigil's own message) and hyper's "client error (Connect)". What is
/// left names the cause: `tcp connect error: Connection refused (os error
/// 111)`, `invalid peer certificate: UnknownIssuer`, ...
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut levels = vec![e.to_string()];
    let mut src = e.source();
    // Bounded: error chains are short, and we stop after a few levels anyway.
    for _ in 0..5 {
        let Some(inner) = src else { break };
        levels.push(inner.to_string());
        src = inner.source();
    }
    let wrapper =
        |l: &String| l.starts_with("error sending request") || l.starts_with("client error (");
    let causes: Vec<&str> = levels
        .iter()
        .filter(|l| !wrapper(l))
        .map(String::as_str)
        .collect();
    if causes.is_empty() {
        levels.join(": ")
    } else {
        causes.join(": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[derive(Debug)]
    struct Level(&'static str, Option<Box<Level>>);
    impl std::fmt::Display for Level {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Level {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1
                .as_deref()
                .map(|l| l as &(dyn std::error::Error + 'static))
        }
    }

    #[test]
    fn transport_errors_name_their_cause_without_the_wrappers() {
        let refused = Level(
            "error sending request for url (https://r.example/v2/)",
            Some(Box::new(Level(
                "client error (Connect)",
                Some(Box::new(Level(
                    "tcp connect error",
                    Some(Box::new(Level("Connection refused (os error 111)", None))),
                ))),
            ))),
        );
        assert_eq!(
            error_chain(&refused),
            "tcp connect error: Connection refused (os error 111)"
        );
        let only_wrappers = Level("error sending request for url (x)", None);
        assert_eq!(
            error_chain(&only_wrappers),
            "error sending request for url (x)"
        );
    }

    #[test]
    fn link_headers_yield_the_next_page_only() {
        let mut h = HeaderMap::new();
        h.insert(
            LINK,
            HeaderValue::from_static(r#"</v2/a/referrers/sha256:x?n=2&last=b>; rel="next""#),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("/v2/a/referrers/sha256:x?n=2&last=b")
        );
        h.insert(LINK, HeaderValue::from_static(r#"</prev>; rel="prev""#));
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn credentials_go_to_a_token_realm_only_on_the_registry_host_or_docker_hubs_pair() {
        assert!(realm_may_receive_credentials("r.example", "r.example"));
        assert!(realm_may_receive_credentials("docker.io", "auth.docker.io"));
        assert!(!realm_may_receive_credentials(
            "r.example",
            "auth.r.example"
        ));
        assert!(!realm_may_receive_credentials(
            "r.example:5000",
            "r.example:5001"
        ));
        assert!(!realm_may_receive_credentials("ghcr.io", "auth.docker.io"));
    }

    #[test]
    fn default_limits_match_the_documented_bounds() {
        let l = Limits::default();
        assert_eq!(l.max_manifest_bytes, 4 * 1024 * 1024);
        assert_eq!(l.max_blob_bytes, 16 * 1024 * 1024);
        assert_eq!(l.max_referrers, 128);
        assert_eq!(l.max_pages, 5);
        assert!(l.request_timeout <= l.total_deadline);
        assert_eq!(l.max_session_bytes, 32 * 1024 * 1024);
        assert!(l.max_session_bytes >= l.max_blob_bytes);
    }

    #[test]
    fn the_memory_budget_bounds_each_host_and_the_total_and_takes_bytes_back() {
        let b = MemoryBudget::new(100, 60);
        assert_eq!(b.take("a", 50), Ok(()));
        assert_eq!(b.take("a", 20), Err(("from this registry", 60)));
        assert_eq!(b.take("b", 40), Ok(()));
        assert_eq!(b.take("c", 20), Err(("from all registries", 100)));
        assert_eq!(b.held(), 90);
        b.give_back("a", 50);
        assert_eq!(b.take("c", 20), Ok(()));
        assert_eq!(b.held(), 60);
    }

    #[test]
    fn plain_http_is_used_only_for_hosts_marked_insecure() {
        let c = RegistryClient::new(ClientConfig {
            insecure_hosts: vec!["127.0.0.1:5000".into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.base_url("127.0.0.1:5000").unwrap().scheme(), "http");
        assert_eq!(c.base_url("127.0.0.1:5001").unwrap().scheme(), "https");
        let c = RegistryClient::new(ClientConfig {
            allow_insecure_all: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.base_url("r.example").unwrap().scheme(), "http");
    }
}
