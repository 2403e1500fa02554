//! The caching layer around any [`ImageJudge`]: verdicts keyed by image
//! reference with digest + what the verdict depends on
//! ([`ImageJudge::verdict_versions`]: for the snapshot judge, the policies
//! that select the image and the trust roots they use) + the identity of
//! the pull secrets' credentials (+ the judge's object key), tag→digest
//! resolutions keyed by image and that identity; both moka caches with
//! bounded capacity, single flight for concurrent misses, and a short TTL
//! for anything but a clean allow.
//!
//! Deadlines are enforced here: a lookup that does not finish by its deadline
//! is an error (never cached) that the admission logic turns into a denial.
//! Each judgement runs as its object's namespace ([`crate::tenant::in_namespace`]),
//! so the registry requests it makes share each host's slots fairly with
//! other namespaces' (the slots themselves are the registry client's, taken
//! per request for the host contacted).

use std::sync::Arc;
use std::time::Duration;

use moka::Expiry;
use moka::future::Cache;
use tokio::time::Instant;

pub use crate::judge::registry_host;
use crate::judge::{ImageJudge, ObjectInfo, PinnedImage, PullSecrets, Verdict, Versions};
use crate::tenant::in_namespace;

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
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            verdict_capacity: 200_000,
            digest_capacity: 50_000,
            positive_ttl: Duration::from_secs(600),
            negative_ttl: Duration::from_secs(10),
            digest_ttl: Duration::from_secs(30),
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

/// Why a judgement left nothing in the verdict cache.
#[derive(Debug, Clone)]
enum Miss {
    /// No verdict: the caller gets the error.
    Lookup(LookupError),
    /// A verdict judged while a new snapshot came in: the answer for this
    /// caller, but not cached under a key the snapshot before computed.
    Superseded(Arc<Verdict>),
}

impl Miss {
    fn answer(self) -> Result<Arc<Verdict>, LookupError> {
        match self {
            Self::Lookup(e) => Err(e),
            Self::Superseded(v) => Ok(v),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct VerdictKey {
    reference: String,
    versions: Versions,
    object: String,
    /// [`PullSecrets::identity`]: a verdict never answers for other
    /// credentials (a denial for lack of access must not deny an object
    /// that has it).
    credentials: String,
    /// The `mode: audit` policies' verdict ([`ImageJudge::judge_audit_mode`])
    /// rather than admission's.
    audit_mode: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DigestKey {
    image: String,
    secrets: String,
    /// [`ImageJudge::registry_scope_key`]: a refusal to contact a registry
    /// that another namespace's own policies allow never answers for it.
    scope: String,
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

    /// The namespace of the object they belong to: the registry requests
    /// made with them count as that namespace's ([`crate::slots`]).
    fn namespace(&self) -> &str {
        ""
    }
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

/// An [`ImageJudge`] with caches, single flight and deadlines.
pub struct CachedJudge<J> {
    judge: Arc<J>,
    verdicts: Cache<VerdictKey, Arc<Verdict>>,
    digests: Cache<DigestKey, Result<String, String>>,
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
        Self {
            judge,
            verdicts,
            digests,
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
    /// the same keys, single flight and deadline as [`Self::verdict`].
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
        // The epoch first: a verdict is cached only if no new snapshot came
        // between this read and the end of its judgement, so its key and
        // the judgement saw the same policies.
        let epoch = self.judge.epoch();
        let versions = self.judge.verdict_versions(image, object);
        let secrets = read_secrets(secrets, deadline, budget_ms).await?;
        let compute = in_namespace(&object.namespace, async {
            let started = Instant::now();
            let verdict = if audit_mode {
                self.judge
                    .judge_audit_mode(image, object, &secrets, deadline)
                    .await
            } else {
                self.judge.judge(image, object, &secrets, deadline).await
            };
            self.metrics.verified(started.elapsed().as_secs_f64());
            let verdict = Arc::new(verdict);
            if self.judge.epoch() == epoch {
                Ok(verdict)
            } else {
                Err(Miss::Superseded(verdict))
            }
        });
        let bounded = async {
            tokio::time::timeout_at(deadline, compute)
                .await
                .unwrap_or(Err(Miss::Lookup(LookupError::Deadline { budget_ms })))
        };
        let Some(object_key) = self.judge.object_key(object) else {
            self.metrics.cache_lookup("verdict", false);
            return bounded.await.or_else(Miss::answer);
        };
        let key = VerdictKey {
            reference: image.reference(),
            versions,
            object: object_key,
            credentials: secrets.identity(),
            audit_mode,
        };
        // A waiter coalesced onto another caller's miss still honours its own deadline.
        let entry = tokio::time::timeout_at(
            deadline,
            self.verdicts.entry(key).or_try_insert_with(bounded),
        )
        .await
        .map_err(|_| LookupError::Deadline { budget_ms })?;
        match entry {
            Ok(entry) => {
                self.metrics.cache_lookup("verdict", !entry.is_fresh());
                Ok(entry.into_value())
            }
            Err(miss) => {
                self.metrics.cache_lookup("verdict", false);
                Miss::answer((*miss).clone())
            }
        }
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
        let namespace = secrets.namespace();
        let secrets = read_secrets(secrets, deadline, budget_ms).await?;
        let key = DigestKey {
            image: image.to_string(),
            secrets: secrets.id.clone(),
            scope: self.judge.registry_scope_key(namespace),
        };
        let compute = in_namespace(namespace, async {
            Ok::<_, LookupError>(self.judge.resolve(image, &secrets, deadline).await)
        });
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
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use super::*;
    use crate::judge::Verdict;

    /// A judge during whose first judgement a new snapshot comes in, and
    /// whose registry `own.test` only namespace `team-a`'s policies allow
    /// (as [`crate::policy_judge`]'s scope does).
    #[derive(Default)]
    struct Scripted {
        calls: AtomicUsize,
        epoch: AtomicU64,
    }

    impl ImageJudge for Scripted {
        async fn judge(
            &self,
            _image: &PinnedImage,
            _object: &ObjectInfo,
            _secrets: &PullSecrets,
            _deadline: Instant,
        ) -> Verdict {
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                self.epoch.fetch_add(1, Ordering::SeqCst);
            }
            Verdict::allow(vec!["p".into()])
        }
        async fn resolve(
            &self,
            _image: &str,
            _secrets: &PullSecrets,
            _deadline: Instant,
        ) -> Result<String, String> {
            let namespace = crate::tenant::current();
            if namespace.as_ref() == "team-a" {
                Ok("sha256:aa".into())
            } else {
                Err(format!("own.test is not allowed for namespace {namespace}"))
            }
        }
        fn registry_scope_key(&self, namespace: &str) -> String {
            if namespace == "team-a" {
                namespace.into()
            } else {
                String::new()
            }
        }
        fn matches(&self, _image: &str, _object: &ObjectInfo) -> bool {
            true
        }
        fn no_match(&self, _image: &str) -> Verdict {
            Verdict::deny(Vec::new(), vec!["none".into()])
        }
        fn versions(&self) -> Versions {
            Versions {
                policy_hash: "same".into(),
                trust_root_version: "same".into(),
            }
        }
        fn epoch(&self) -> u64 {
            self.epoch.load(Ordering::SeqCst)
        }
        fn ready(&self) -> bool {
            true
        }
    }

    /// No pull secrets, for an object of the namespace it holds.
    struct AnonymousIn(&'static str);

    impl SecretsOnce for AnonymousIn {
        async fn get(&self, _deadline: Instant) -> Result<PullSecrets, String> {
            Ok(PullSecrets::anonymous())
        }
        fn namespace(&self) -> &str {
            self.0
        }
    }

    #[tokio::test]
    async fn a_verdict_judged_while_a_new_snapshot_came_in_answers_but_is_not_cached() {
        let judge = Arc::new(Scripted::default());
        let cache = CachedJudge::new(judge.clone(), &CacheConfig::default(), Arc::new(NoObserver));
        let image = PinnedImage {
            image: "registry.test/app@sha256:aa".into(),
            digest: "sha256:aa".into(),
        };
        let gvk = kube::core::GroupVersionKind::gvk("", "v1", "Pod");
        let object = ObjectInfo {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            sub_resource: String::new(),
            kind: "Pod".into(),
            namespace: "shop".into(),
            name: "web".into(),
            labels: Default::default(),
            pull_secret_names: Vec::new(),
            service_account: "default".into(),
            object: Arc::new(kube::core::DynamicObject::new(
                "web",
                &kube::core::ApiResource::from_gvk(&gvk),
            )),
        };
        let deadline = || Instant::now() + Duration::from_secs(30);
        for want_calls in [1, 2, 2] {
            let v = cache
                .verdict(&image, &object, &AnonymousIn("shop"), deadline())
                .await
                .unwrap();
            assert!(v.allowed);
            assert_eq!(judge.calls.load(Ordering::SeqCst), want_calls);
        }
    }

    #[tokio::test]
    async fn a_tag_refused_in_one_namespace_is_still_resolved_where_its_registry_is_allowed() {
        let cache = CachedJudge::new(
            Arc::new(Scripted::default()),
            &CacheConfig::default(),
            Arc::new(NoObserver),
        );
        let deadline = || Instant::now() + Duration::from_secs(30);
        let refused = cache
            .resolve("own.test/app:1", &AnonymousIn("team-b"), deadline())
            .await
            .unwrap();
        assert!(refused.unwrap_err().contains("team-b"));
        let resolved = cache
            .resolve("own.test/app:1", &AnonymousIn("team-a"), deadline())
            .await
            .unwrap();
        assert_eq!(resolved, Ok("sha256:aa".to_string()));
        // Namespaces sharing the cluster's scope still share the cache.
        let shared = cache
            .resolve("own.test/app:1", &AnonymousIn("team-c"), deadline())
            .await
            .unwrap();
        assert!(shared.unwrap_err().contains("team-b"), "cached for team-b");
    }

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
