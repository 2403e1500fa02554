//! The caching layer around any [`ImageJudge`]: verdicts keyed by image
//! reference with digest + policy hash + trust-root version + the identity
//! of the pull secrets' credentials (+ the judge's object key), tag→digest
//! resolutions keyed by image and that identity; both moka caches with bounded capacity, single flight for
//! concurrent misses, a short TTL for anything but a clean allow, and a bound
//! on concurrent judge calls per registry host.
//!
//! Deadlines are enforced here: a lookup that does not finish by its deadline
//! is an error (never cached) that the admission logic turns into a denial.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moka::Expiry;
use moka::future::Cache;
use tokio::sync::Semaphore;
use tokio::time::Instant;

pub use crate::judge::registry_host;
use crate::judge::{ImageJudge, ObjectInfo, PinnedImage, PullSecrets, Verdict, Versions};

/// Registry hosts tracked for concurrency bounds; beyond this, new hosts
/// share one overflow semaphore.
const MAX_HOSTS: usize = 1024;

/// Cache sizes and lifetimes.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Verdicts kept at most.
    pub verdict_capacity: u64,
    /// Tag resolutions kept at most.
    pub digest_capacity: u64,
    /// Lifetime of a clean allow.
    pub positive_ttl: Duration,
    /// Lifetime of a denial or warning (new signatures may appear).
    pub negative_ttl: Duration,
    /// Lifetime of a tag→digest resolution (tags move).
    pub digest_ttl: Duration,
    /// Judge or resolve calls in flight per registry host.
    pub per_host_concurrency: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            verdict_capacity: 200_000,
            digest_capacity: 50_000,
            positive_ttl: Duration::from_secs(600),
            negative_ttl: Duration::from_secs(10),
            digest_ttl: Duration::from_secs(30),
            per_host_concurrency: 16,
        }
    }
}

/// Why a cached lookup produced no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The deadline passed first.
    #[error("did not finish within the admission deadline ({budget_ms} ms left when it started)")]
    Deadline {
        /// Milliseconds that were left at the start of the lookup.
        budget_ms: u128,
    },
    /// Pull secrets could not be read.
    #[error("{0}")]
    Secrets(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct VerdictKey {
    reference: String,
    versions: Versions,
    object: String,
    /// [`PullSecrets::id`]: a verdict never answers for other credentials
    /// (a denial for lack of access must not deny an object that has it).
    credentials: String,
    /// The `mode: audit` policies' verdict ([`ImageJudge::judge_audit_mode`])
    /// rather than admission's.
    audit_mode: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DigestKey {
    image: String,
    secrets: String,
}

struct VerdictExpiry {
    positive: Duration,
    negative: Duration,
}

impl Expiry<VerdictKey, Arc<Verdict>> for VerdictExpiry {
    fn expire_after_create(
        &self,
        _key: &VerdictKey,
        value: &Arc<Verdict>,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(if value.is_clean() {
            self.positive
        } else {
            self.negative
        })
    }
}

struct DigestExpiry {
    positive: Duration,
    negative: Duration,
}

impl Expiry<DigestKey, Result<String, String>> for DigestExpiry {
    fn expire_after_create(
        &self,
        _key: &DigestKey,
        value: &Result<String, String>,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(if value.is_ok() {
            self.positive
        } else {
            self.negative
        })
    }
}

/// Where the pull secrets of a review come from: looked up at most once per
/// review (sources cache across reviews), before any cache lookup, since
/// their identity is part of every key.
pub trait SecretsOnce: Sync {
    /// The object's pull secrets.
    fn get(
        &self,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<PullSecrets, String>> + Send;
}

/// The object's pull secrets, within `deadline`.
async fn read_secrets(
    secrets: &impl SecretsOnce,
    deadline: Instant,
    budget_ms: u128,
) -> Result<PullSecrets, LookupError> {
    match tokio::time::timeout_at(deadline, secrets.get(deadline)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(LookupError::Secrets(e)),
        Err(_) => Err(LookupError::Deadline { budget_ms }),
    }
}

/// An [`ImageJudge`] with caches, single flight, deadlines and per-host bounds.
pub struct CachedJudge<J> {
    judge: Arc<J>,
    verdicts: Cache<VerdictKey, Arc<Verdict>>,
    digests: Cache<DigestKey, Result<String, String>>,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    overflow: Arc<Semaphore>,
    per_host: usize,
    metrics: Arc<dyn JudgeObserver>,
}

/// Hears what the cache does, for metrics: time spent judging on a miss and
/// every lookup. Called on the lookup's task: keep it cheap.
pub trait JudgeObserver: Send + Sync {
    /// The judge took `seconds` for one image (a verdict-cache miss).
    fn verified(&self, seconds: f64);
    /// A lookup in `cache` (`verdict` or `digest`) was a hit or a miss.
    fn cache_lookup(&self, cache: &'static str, hit: bool);
}

/// An observer that records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl JudgeObserver for NoObserver {
    fn verified(&self, _seconds: f64) {}
    fn cache_lookup(&self, _cache: &'static str, _hit: bool) {}
}

impl<J: ImageJudge> CachedJudge<J> {
    /// Wraps `judge`, telling `metrics` about every lookup.
    pub fn new(judge: Arc<J>, config: &CacheConfig, metrics: Arc<dyn JudgeObserver>) -> Self {
        let verdicts = Cache::builder()
            .max_capacity(config.verdict_capacity)
            .expire_after(VerdictExpiry {
                positive: config.positive_ttl,
                negative: config.negative_ttl,
            })
            .build();
        let digests = Cache::builder()
            .max_capacity(config.digest_capacity)
            .expire_after(DigestExpiry {
                positive: config.digest_ttl,
                negative: config.negative_ttl,
            })
            .build();
        let per_host = config.per_host_concurrency.max(1);
        Self {
            judge,
            verdicts,
            digests,
            hosts: Mutex::new(HashMap::new()),
            overflow: Arc::new(Semaphore::new(per_host)),
            per_host,
            metrics,
        }
    }

    /// The wrapped judge.
    pub fn judge(&self) -> &J {
        &self.judge
    }

    /// Verdicts currently cached (approximate; for tests and benchmarks).
    pub async fn cached_verdicts(&self) -> u64 {
        self.verdicts.run_pending_tasks().await;
        self.verdicts.entry_count()
    }

    fn host_semaphore(&self, image: &str) -> Arc<Semaphore> {
        let host = registry_host(image);
        let Ok(mut hosts) = self.hosts.lock() else {
            return self.overflow.clone();
        };
        if let Some(s) = hosts.get(host) {
            return s.clone();
        }
        if hosts.len() >= MAX_HOSTS {
            return self.overflow.clone();
        }
        let s = Arc::new(Semaphore::new(self.per_host));
        hosts.insert(host.to_string(), s.clone());
        s
    }

    /// The verdict for `image` of `object`, from the cache or the judge.
    pub async fn verdict(
        &self,
        image: &PinnedImage,
        object: &ObjectInfo,
        secrets: &impl SecretsOnce,
        deadline: Instant,
    ) -> Result<Arc<Verdict>, LookupError> {
        self.lookup(image, object, secrets, deadline, false).await
    }

    /// How the `mode: audit` policies judge `image` of `object`
    /// ([`ImageJudge::judge_audit_mode`]), from the cache or the judge, with
    /// the same keys, single flight, deadline and per-host bound as
    /// [`Self::verdict`].
    pub async fn audit_mode_verdict(
        &self,
        image: &PinnedImage,
        object: &ObjectInfo,
        secrets: &impl SecretsOnce,
        deadline: Instant,
    ) -> Result<Arc<Verdict>, LookupError> {
        self.lookup(image, object, secrets, deadline, true).await
    }

    async fn lookup(
        &self,
        image: &PinnedImage,
        object: &ObjectInfo,
        secrets: &impl SecretsOnce,
        deadline: Instant,
        audit_mode: bool,
    ) -> Result<Arc<Verdict>, LookupError> {
        let budget_ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis();
        let versions = self.judge.versions();
        let secrets = read_secrets(secrets, deadline, budget_ms).await?;
        let compute = async {
            let permit = self.host_semaphore(&image.image);
            let _permit = permit.acquire().await;
            let started = Instant::now();
            let verdict = if audit_mode {
                self.judge
                    .judge_audit_mode(image, object, &secrets, deadline)
                    .await
            } else {
                self.judge.judge(image, object, &secrets, deadline).await
            };
            self.metrics.verified(started.elapsed().as_secs_f64());
            Ok::<_, LookupError>(Arc::new(verdict))
        };
        let bounded = async {
            tokio::time::timeout_at(deadline, compute)
                .await
                .unwrap_or(Err(LookupError::Deadline { budget_ms }))
        };
        let Some(object_key) = self.judge.object_key(object) else {
            self.metrics.cache_lookup("verdict", false);
            return bounded.await;
        };
        let key = VerdictKey {
            reference: image.reference(),
            versions,
            object: object_key,
            credentials: secrets.id.clone(),
            audit_mode,
        };
        // A waiter coalesced onto another caller's miss still honours its own deadline.
        let entry = tokio::time::timeout_at(
            deadline,
            self.verdicts.entry(key).or_try_insert_with(bounded),
        )
        .await
        .map_err(|_| LookupError::Deadline { budget_ms })?
        .map_err(|e| (*e).clone())?;
        self.metrics.cache_lookup("verdict", !entry.is_fresh());
        Ok(entry.into_value())
    }

    /// The digest `image` (a tag) resolves to, from the cache or the judge.
    /// The outer `Err` is a lookup failure; the inner one the judge's cause.
    pub async fn resolve(
        &self,
        image: &str,
        secrets: &impl SecretsOnce,
        deadline: Instant,
    ) -> Result<Result<String, String>, LookupError> {
        let budget_ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis();
        let secrets = read_secrets(secrets, deadline, budget_ms).await?;
        let key = DigestKey {
            image: image.to_string(),
            secrets: secrets.id.clone(),
        };
        let compute = async {
            let permit = self.host_semaphore(image);
            let _permit = permit.acquire().await;
            Ok::<_, LookupError>(self.judge.resolve(image, &secrets, deadline).await)
        };
        let bounded = async {
            tokio::time::timeout_at(deadline, compute)
                .await
                .unwrap_or(Err(LookupError::Deadline { budget_ms }))
        };
        let entry = tokio::time::timeout_at(
            deadline,
            self.digests.entry(key).or_try_insert_with(bounded),
        )
        .await
        .map_err(|_| LookupError::Deadline { budget_ms })?
        .map_err(|e| (*e).clone())?;
        self.metrics.cache_lookup("digest", !entry.is_fresh());
        Ok(entry.into_value())
    }
}

#[cfg(test)]
mod tests {
    use super::registry_host;

    #[test]
    fn registry_hosts_are_told_apart_from_docker_hub_paths() {
        assert_eq!(registry_host("nginx"), "docker.io");
        assert_eq!(registry_host("library/nginx:1"), "docker.io");
        assert_eq!(registry_host("ghcr.io/x/y:1"), "ghcr.io");
        assert_eq!(
            registry_host("127.0.0.1:5000/x@sha256:aa"),
            "127.0.0.1:5000"
        );
        assert_eq!(registry_host("localhost/x"), "localhost");
    }
}
