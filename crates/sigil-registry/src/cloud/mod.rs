//! Registry credentials from cloud identities, chosen by registry host: the
//! credentials a node's kubelet gets from its cloud for images whose pods
//! carry no pull secret. One [`Provider`] per source, registered in one
//! place ([`Keychain::new`]), in the shape of go-containerregistry's
//! `authn.Keychain` and Flux's `fluxcd/pkg/auth`:
//!
//! - [`ecr`]: Amazon ECR (every private host form, and ECR Public), with AWS
//!   credentials from [`aws`] (IRSA, EKS Pod Identity, environment keys,
//!   IMDSv2; AWS profiles on a laptop) and SigV4 `GetAuthorizationToken`;
//! - [`gcp`]: Artifact Registry and Container Registry, with a Google access
//!   token (the GKE metadata server, workload identity federation;
//!   application-default credentials on a laptop);
//! - [`azure`]: Azure Container Registry, with an Entra ID token (workload
//!   identity, managed identity) exchanged for an ACR refresh token;
//! - [`helper`]: docker credential helpers, on a laptop only: programs the
//!   in-cluster binaries never run.
//!
//! A pod's pull secret (or any docker config entry for the host) always
//! wins: the client asks the keychain only for hosts it has no credential
//! for, and only after the registry asked for one. Tokens are cached per
//! identity and registry and refreshed before they expire ([`cache`]). A
//! provider that applies and fails gives an error naming the provider, the
//! step and the fix ([`CloudError`]); it never turns into anonymous access.
//!
//! The providers reach their metadata and token endpoints (169.254.169.254,
//! 169.254.170.23, ...) with their own HTTP client ([`http`]); the registry
//! client's address policy ([`crate::egress`]) keeps refusing those
//! addresses as registries, and a provider's token goes only to the
//! registry host it was issued for.

pub mod aws;
pub mod azure;
pub mod cache;
pub mod ecr;
pub mod gcp;
pub mod helper;
pub mod hosts;
pub mod http;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
pub use sigil_cloud::Env;

use crate::auth::Credential;
use cache::{Exchange, Timed, TokenCache};
use hosts::ExtraHost;
use http::Http;

/// A credential source, as flags, metrics and messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProviderId {
    /// Amazon ECR.
    Ecr,
    /// Google Artifact Registry and Container Registry.
    Gcp,
    /// Azure Container Registry.
    Acr,
    /// A docker credential helper (laptops only).
    Helper,
}

impl ProviderId {
    /// The cloud providers, in the order they are registered.
    pub const CLOUDS: [ProviderId; 3] = [Self::Ecr, Self::Gcp, Self::Acr];

    /// The name flags, metrics and messages use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ecr => "ecr",
            Self::Gcp => "gcp",
            Self::Acr => "acr",
            Self::Helper => "docker-credential-helper",
        }
    }

    /// Parses a cloud provider's name (`ecr`, `gcp`, `acr`).
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::CLOUDS
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| {
                format!("`{s}` is not a registry credential provider; use ecr, gcp or acr")
            })
    }
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What kind of failure, for metrics and for whether to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Settings or credentials are missing or invalid.
    Config,
    /// An endpoint could not be reached.
    Unreachable,
    /// An endpoint answered with an error.
    Refused,
    /// An answer was not what the API documents.
    Malformed,
    /// An endpoint did not answer in time.
    Timeout,
}

impl ErrorKind {
    /// A stable label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Unreachable => "unreachable",
            Self::Refused => "refused",
            Self::Malformed => "malformed",
            Self::Timeout => "timeout",
        }
    }
}

/// Why a provider could not give a registry credential: the provider, the
/// step that failed, why, and what to do. Never holds a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{provider} credentials: {step} failed: {reason}; {fix}")]
pub struct CloudError {
    /// The provider.
    pub provider: ProviderId,
    /// What kind of failure.
    pub kind: ErrorKind,
    /// The step that failed (`AWS credentials from IRSA (STS
    /// AssumeRoleWithWebIdentity)`, `ECR GetAuthorizationToken`, ...).
    pub step: String,
    /// What went wrong, with the URL or file concerned.
    pub reason: String,
    /// What to do about it.
    pub fix: String,
}

impl CloudError {
    /// An error of `kind` at `step`.
    pub fn new(
        provider: ProviderId,
        kind: ErrorKind,
        step: impl Into<String>,
        reason: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            provider,
            kind,
            step: step.into(),
            reason: reason.into(),
            fix: fix.into(),
        }
    }

    /// A settings error at `step`.
    pub fn config(
        provider: ProviderId,
        step: impl Into<String>,
        reason: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::new(provider, ErrorKind::Config, step, reason, fix)
    }
}

/// One credential source: which registry hosts it serves and how it gets a
/// credential for one of them.
pub trait Provider: Send + Sync + fmt::Debug {
    /// Its name.
    fn id(&self) -> ProviderId;
    /// The cache key of `host`'s credential (identity and registry) when
    /// this provider serves `host`.
    fn serves(&self, host: &str) -> Option<String>;
    /// Gets a credential for `host` (called once per flight, by the cache).
    fn fetch(
        self: Arc<Self>,
        host: String,
    ) -> BoxFuture<'static, Result<Timed<Credential>, CloudError>>;
    /// Where its identity comes from, e.g. `IRSA role arn:aws:iam::1:role/x
    /// (AWS_WEB_IDENTITY_TOKEN_FILE)`; never a secret.
    fn source(&self) -> String;
    /// What to check when a registry refuses the credential it gave.
    fn refused_fix(&self) -> &'static str;
}

/// What the providers are built from. Its `Debug` shows variable names,
/// never their values.
#[derive(Debug)]
pub struct Context {
    /// Settings by environment variable name.
    pub env: Env,
    /// The providers' HTTP client.
    pub http: Http,
    /// The CLI on a laptop: AWS profiles, gcloud application-default
    /// credentials and docker credential helpers are sources too.
    pub laptop: bool,
    /// How long one token exchange may take.
    pub exchange_timeout: Duration,
    /// Hosts reached over plain HTTP (tests, local registries).
    pub insecure_hosts: Vec<String>,
}

impl Context {
    /// `https://host`, or `http://host` for a host marked insecure.
    pub fn registry_base(&self, host: &str) -> String {
        let insecure = self
            .insecure_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host));
        format!("{}://{host}", if insecure { "http" } else { "https" })
    }
}

/// Which providers may run, and for which hosts.
#[derive(Debug, Clone)]
pub struct KeychainSettings {
    /// The cloud providers that may run (each for its own hosts).
    pub providers: Vec<ProviderId>,
    /// More hosts per provider: private endpoints, proxies in front of a
    /// cloud registry.
    pub extra_hosts: Vec<(ProviderId, ExtraHost)>,
    /// The CLI on a laptop (see [`Context::laptop`]).
    pub laptop: bool,
    /// PEM roots trusted besides the web roots (private endpoints).
    pub extra_roots_pem: Vec<u8>,
    /// Hosts reached over plain HTTP.
    pub insecure_hosts: Vec<String>,
    /// How long one token exchange may take (the review's deadline).
    pub exchange_timeout: Duration,
}

impl Default for KeychainSettings {
    /// Every cloud provider for its own hosts, in a cluster.
    fn default() -> Self {
        Self {
            providers: ProviderId::CLOUDS.to_vec(),
            extra_hosts: Vec::new(),
            laptop: false,
            extra_roots_pem: Vec::new(),
            insecure_hosts: Vec::new(),
            exchange_timeout: Duration::from_secs(10),
        }
    }
}

/// Hears the outcome of every token exchange, for metrics.
pub trait CredentialObserver: Send + Sync + fmt::Debug {
    /// `provider` issued, refreshed or failed to give a credential.
    fn exchanged(&self, provider: ProviderId, outcome: Exchange);
}

struct Entry {
    provider: Arc<dyn Provider>,
    cache: TokenCache<Credential>,
}

/// The registered providers, each with its token cache. Shared by every
/// registry client of a process (`Arc`), so a token is fetched once.
pub struct Keychain {
    entries: Vec<Entry>,
    helpers: Option<Entry>,
    observer: Arc<OnceLock<Arc<dyn CredentialObserver>>>,
}

impl fmt::Debug for Keychain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keychain")
            .field(
                "providers",
                &self
                    .entries
                    .iter()
                    .map(|e| e.provider.id())
                    .collect::<Vec<_>>(),
            )
            .field("helpers", &self.helpers.is_some())
            .finish()
    }
}

/// What `sigil doctor` learns about one registry host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialCheck {
    /// The provider that serves the host, if any.
    pub provider: Option<ProviderId>,
    /// Where its identity comes from.
    pub source: String,
    /// Seconds the token has left, or why none could be had.
    pub result: Result<u64, String>,
}

impl Keychain {
    /// The providers `settings` allow, reading their settings from `env`.
    /// This is the one place providers are registered.
    pub fn new(settings: &KeychainSettings, env: Env) -> Result<Self, String> {
        let http = Http::new(&settings.extra_roots_pem, settings.exchange_timeout)?;
        let context = Arc::new(Context {
            env,
            http,
            laptop: settings.laptop,
            exchange_timeout: settings.exchange_timeout,
            insecure_hosts: settings.insecure_hosts.clone(),
        });
        let extra = |id: ProviderId| -> Vec<ExtraHost> {
            settings
                .extra_hosts
                .iter()
                .filter(|(p, _)| *p == id)
                .map(|(_, h)| h.clone())
                .collect()
        };
        let observer: Arc<OnceLock<Arc<dyn CredentialObserver>>> = Arc::new(OnceLock::new());
        let entry = |provider: Arc<dyn Provider>| {
            let id = provider.id();
            let seen = observer.clone();
            let cache = TokenCache::new(id, settings.exchange_timeout).on_exchange(Arc::new(
                move |_key: &str, outcome| {
                    if let Some(o) = seen.get() {
                        o.exchanged(id, outcome);
                    }
                },
            ));
            Entry { provider, cache }
        };
        let aws = Arc::new(aws::AwsCredentials::new(context.clone()));
        let mut entries = Vec::new();
        for id in ProviderId::CLOUDS {
            if !settings.providers.contains(&id) {
                continue;
            }
            let provider: Arc<dyn Provider> = match id {
                ProviderId::Ecr => Arc::new(ecr::Ecr::new(context.clone(), aws.clone(), extra(id))),
                ProviderId::Gcp => Arc::new(gcp::Google::new(context.clone(), extra(id))),
                ProviderId::Acr => Arc::new(azure::Acr::new(context.clone(), extra(id))),
                ProviderId::Helper => continue,
            };
            entries.push(entry(provider));
        }
        let helpers = settings
            .laptop
            .then(|| entry(Arc::new(helper::Helpers::new(context.clone()))));
        Ok(Self {
            entries,
            helpers,
            observer,
        })
    }

    /// Tells `observer` about every exchange from now on (once; later calls
    /// keep the first observer).
    pub fn observe(&self, observer: Arc<dyn CredentialObserver>) {
        let _ = self.observer.set(observer);
    }

    fn entry_for(&self, host: &str) -> Option<(&Entry, String)> {
        self.entries
            .iter()
            .find_map(|e| e.provider.serves(host).map(|key| (e, key)))
    }

    /// The credential for `host` from the provider that serves it: `None`
    /// when none does (the client then goes on anonymously, as before).
    /// `helper` is the docker credential helper the docker config names for
    /// `host`; it runs only on a laptop, and there it comes first, as the
    /// user chose it. The caller waits at most `wait`.
    pub async fn credential(
        &self,
        host: &str,
        helper: Option<&str>,
        wait: Duration,
    ) -> Option<Result<Credential, CloudError>> {
        if let (Some(entry), Some(name)) = (&self.helpers, helper) {
            let key = format!("{name}\u{0}{host}");
            let target = format!("{name}\u{0}{host}");
            let provider = entry.provider.clone();
            return Some(
                entry
                    .cache
                    .get(&key, wait, move || provider.fetch(target))
                    .await,
            );
        }
        let (entry, key) = self.entry_for(host)?;
        let provider = entry.provider.clone();
        let host = host.to_string();
        Some(
            entry
                .cache
                .get(&key, wait, move || provider.fetch(host))
                .await,
        )
    }

    /// The provider serving `host` and where its identity comes from.
    pub fn describe(&self, host: &str) -> Option<(ProviderId, String)> {
        self.entry_for(host)
            .map(|(e, _)| (e.provider.id(), e.provider.source()))
    }

    /// What to check when a registry refuses `host`'s cloud credential.
    pub fn refused_fix(&self, host: &str) -> Option<&'static str> {
        self.entry_for(host).map(|(e, _)| e.provider.refused_fix())
    }

    /// Which provider serves `host` and whether it can give a credential
    /// now (fetching one if none is held), for `sigil doctor`; the token is
    /// never part of the answer.
    pub async fn check(&self, host: &str, wait: Duration) -> CredentialCheck {
        let Some((entry, key)) = self.entry_for(host) else {
            return CredentialCheck {
                provider: None,
                source: "none: anonymous unless a pull secret names the host".into(),
                result: Err("no credential provider serves this host".into()),
            };
        };
        let result = match self.credential(host, None, wait).await {
            Some(Ok(_)) => Ok(entry.cache.held_life(&key).map_or(0, |d| d.as_secs())),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("no credential provider serves this host".into()),
        };
        CredentialCheck {
            provider: Some(entry.provider.id()),
            source: entry.provider.source(),
            result,
        }
    }
}

/// Whether the machine's firmware says it runs on `vendor`'s cloud (DMI,
/// as the clouds' SDKs tell where they run before trying a metadata
/// endpoint that elsewhere would only time out).
pub fn firmware_says(vendor: &str) -> bool {
    ["sys_vendor", "product_name", "bios_vendor"]
        .iter()
        .filter_map(|f| std::fs::read(format!("/sys/class/dmi/id/{f}")).ok())
        .any(|bytes| {
            bytes.len() < 256
                && String::from_utf8_lossy(&bytes)
                    .to_ascii_lowercase()
                    .contains(vendor)
        })
}

/// The token cache's key of a provider serving `host` as `identity` (its
/// token source, empty when it has none yet): tokens are kept per identity
/// and registry.
pub fn identity_key(identity: Option<String>, host: &str) -> String {
    format!(
        "{}\u{0}{}",
        identity.unwrap_or_default(),
        host.to_ascii_lowercase()
    )
}

/// The `exp` claim of a JWT, read without checking its signature: only to
/// know how long a token its issuer handed us may be cached.
pub fn jwt_expiry(token: &str) -> Option<i64> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    if payload.len() > 16 * 1024 {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&bytes).ok()?;
    claims.get("exp")?.as_i64()
}

/// The life left until `expires_at` (Unix seconds), from the wall clock;
/// `None` when already past.
pub fn life_until(expires_at: i64) -> Option<Duration> {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    u64::try_from(expires_at.checked_sub(now)?)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// The life left until an RFC 3339 time (`2026-01-01T00:00:00Z`).
pub fn life_until_rfc3339(text: &str) -> Option<Duration> {
    let t =
        time::OffsetDateTime::parse(text.trim(), &time::format_description::well_known::Rfc3339)
            .ok()?;
    life_until(t.unix_timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_names_round_trip_and_unknown_ones_are_refused_with_the_choices() {
        for p in ProviderId::CLOUDS {
            assert_eq!(ProviderId::parse(p.name()), Ok(p));
        }
        let err = ProviderId::parse("oracle").unwrap_err();
        assert!(err.contains("ecr, gcp or acr"), "{err}");
    }

    #[test]
    fn a_cloud_error_names_the_provider_the_step_and_the_fix() {
        let e = CloudError::config(
            ProviderId::Ecr,
            "AWS credentials",
            "none found",
            "annotate the ServiceAccount",
        );
        assert_eq!(
            e.to_string(),
            "ecr credentials: AWS credentials failed: none found; annotate the ServiceAccount"
        );
    }

    #[test]
    fn jwt_expiry_reads_the_exp_claim_and_nothing_else() {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let token = format!("{}.{}.sig", b64("{}"), b64(r#"{"exp": 1700000000}"#));
        assert_eq!(jwt_expiry(&token), Some(1_700_000_000));
        assert_eq!(jwt_expiry("opaque-refresh-token"), None);
        assert_eq!(jwt_expiry(&format!("a.{}.c", b64("[1]"))), None);
        assert_eq!(life_until(0), None);
        assert!(life_until_rfc3339("2999-01-01T00:00:00Z").is_some());
        assert_eq!(life_until_rfc3339("2000-01-01T00:00:00Z"), None);
        assert_eq!(life_until_rfc3339("tomorrow"), None);
    }
}
