//! `key.kms` in the controller: which credentials each KMS provider uses
//! (the process environment, overlaid by a Secret in sigil's namespace named
//! per provider), and the cache of fetched public keys. A key is fetched when
//! a policy compiles, fetched again once it is older than the refresh
//! interval (or the credentials changed), and while the KMS cannot be
//! reached the last good key stays in force and the policy's `Ready`
//! condition says so. The clients themselves are in `sigil-kms`; putting the
//! keys into a policy, with the credentials Secret read through the
//! controller's context, is [`crate::kms_resolve`]'s (this service is held by
//! the context and so imports nothing of it).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use sigil_api::cip::ClusterImagePolicySpec;
use sigil_kms::{Env, Http, HttpConfig, KmsError, KmsRef, Provider};
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::trust::format_rfc3339;
use tokio::sync::Mutex;

/// Parses `--kms-credentials-secret PROVIDER=NAME`.
pub fn parse_credentials_flag(value: &str) -> std::result::Result<(Provider, String), String> {
    let (provider, name) = value.split_once('=').ok_or_else(|| {
        format!("`{value}`: expected PROVIDER=SECRET_NAME, e.g. hashivault=vault-token")
    })?;
    let provider = Provider::from_name(provider).ok_or_else(|| {
        format!("`{provider}` is not a KMS provider; use hashivault, awskms, gcpkms or azurekms")
    })?;
    if name.is_empty() {
        return Err(format!("`{value}`: the Secret's name is missing"));
    }
    Ok((provider, name.to_owned()))
}

/// The last good key of one URI and how the latest attempt went.
#[derive(Debug, Clone)]
struct Entry {
    pem: String,
    version: Option<String>,
    fetched: Instant,
    fetched_at: time::OffsetDateTime,
    credentials: u64,
    /// Since when, and why, fetching fails; `None` while it works.
    failing: Option<(time::OffsetDateTime, String)>,
}

/// What a look-up gives a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A key fetched within the refresh interval.
    Fresh(String),
    /// The last good key, kept because fetching a newer one failed; the text
    /// says since when and why.
    Stale(String, String),
    /// No key: the first fetch failed.
    Failed(String),
}

/// Fetched KMS public keys and the settings to fetch them.
pub struct KmsKeys {
    http: Http,
    refresh: Duration,
    process: Env,
    secrets: BTreeMap<Provider, String>,
    cache: Mutex<BTreeMap<String, Entry>>,
}

impl KmsKeys {
    /// Keys fetched within `http`'s limits and destinations, refreshed
    /// every `refresh`, with `secrets` naming each provider's credentials
    /// Secret.
    pub fn new(
        http: HttpConfig,
        refresh: Duration,
        process: Env,
        secrets: BTreeMap<Provider, String>,
    ) -> Self {
        Self {
            http: Http::new(http),
            refresh,
            process,
            secrets,
            cache: Mutex::default(),
        }
    }

    /// How often keys are fetched again.
    pub fn refresh(&self) -> Duration {
        self.refresh
    }

    /// The credentials Secret configured for `provider`.
    pub fn secret_for(&self, provider: Provider) -> Option<&str> {
        self.secrets.get(&provider).map(String::as_str)
    }

    /// The key `uri` names, with `overlay` (a credentials Secret's entries)
    /// over the process environment.
    pub async fn lookup(
        &self,
        reference: &KmsRef,
        uri: &str,
        overlay: &BTreeMap<String, String>,
    ) -> Lookup {
        let fingerprint = {
            let mut h = DefaultHasher::new();
            overlay.hash(&mut h);
            h.finish()
        };
        let cached = self.cache.lock().await.get(uri).cloned();
        if let Some(entry) = &cached
            && entry.failing.is_none()
            && entry.credentials == fingerprint
            && entry.fetched.elapsed() < self.refresh
        {
            return Lookup::Fresh(entry.pem.clone());
        }
        let mut env = self.process.clone();
        for (k, v) in overlay {
            env.set(k.clone(), v.clone());
        }
        let fetched = sigil_kms::fetch_public_key(reference, &env, &self.http)
            .await
            .and_then(|key| match PublicKey::from_pem(&key.pem) {
                Ok(_) => Ok(key),
                Err(e) => Err(KmsError::Unsupported {
                    provider: reference.provider(),
                    reason: format!(
                        "the KMS returned a key sigil cannot use ({e}); use an ECDSA P-256/P-384, \
                         Ed25519 or RSA key"
                    ),
                }),
            });
        let now = time::OffsetDateTime::now_utc();
        let mut cache = self.cache.lock().await;
        match fetched {
            Ok(key) => {
                if cached.as_ref().is_some_and(|c| c.pem != key.pem) {
                    tracing::info!(%uri, version = ?key.version, "KMS key changed");
                }
                cache.insert(
                    uri.to_owned(),
                    Entry {
                        pem: key.pem.clone(),
                        version: key.version,
                        fetched: Instant::now(),
                        fetched_at: now,
                        credentials: fingerprint,
                        failing: None,
                    },
                );
                Lookup::Fresh(key.pem)
            }
            Err(e) => {
                tracing::warn!(%uri, error = %e, "fetching a KMS key failed");
                match cache.get_mut(uri) {
                    Some(entry) => {
                        let since = entry.failing.as_ref().map_or(now, |(since, _)| *since);
                        entry.failing = Some((since, e.to_string()));
                        Lookup::Stale(entry.pem.clone(), stale_message(uri, entry))
                    }
                    None => Lookup::Failed(e.to_string()),
                }
            }
        }
    }
}

fn stale_message(uri: &str, entry: &Entry) -> String {
    let (since, why) = entry
        .failing
        .as_ref()
        .map(|(since, why)| (format_rfc3339(*since), why.as_str()))
        .unwrap_or_default();
    format!(
        "KMS key {uri} cannot be fetched since {since}: {why}; the webhook keeps enforcing the \
         last good key{}, fetched at {}",
        entry
            .version
            .as_deref()
            .map(|v| format!(" (version {v})"))
            .unwrap_or_default(),
        format_rfc3339(entry.fetched_at)
    )
}

impl KmsKeys {
    /// For each KMS key of `spec` whose last good key is in force because
    /// fetching fails: why, and since when.
    pub async fn degraded(&self, spec: &ClusterImagePolicySpec) -> Vec<String> {
        let cache = self.cache.lock().await;
        let mut out = Vec::new();
        for (i, a) in spec.authorities.iter().enumerate() {
            if let Some(uri) = a.key.as_ref().and_then(|k| k.kms.as_deref())
                && let Some(entry) = cache.get(uri).filter(|e| e.failing.is_some())
            {
                out.push(format!(
                    "spec.authorities[{i}].key.kms: {}",
                    stale_message(uri, entry)
                ));
            }
        }
        out
    }
}
