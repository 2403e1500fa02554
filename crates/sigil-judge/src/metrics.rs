//! The Prometheus metrics of a judging process, the webhook or the audit
//! (prometheus-client): admission requests by endpoint, operation, kind and
//! decision (the webhook's); verification latency; cache hits and misses;
//! reviews in flight; policy snapshot age and revision; registry requests by
//! host and status, and their wait for an answer; the round trips on a
//! signature discovery's critical path; the admission server's TLS
//! connections opened and closed, by reason (the webhook's); registry
//! credentials from cloud providers issued, refreshed or failed, by provider;
//! reads and writes of the shared cache of signature material, by result;
//! the verdicts of
//! `mode: audit` policies on the images admission requests carry, by policy
//! and outcome (the webhook's); Gatekeeper external-data requests and their
//! keys by outcome (the webhook's provider); the build and crypto module
//! (`sigil_build_info`).
//! Label values are constants, HTTP status codes, registry hosts capped at
//! [`MAX_REGISTRY_HOSTS`], or policy names capped at
//! [`MAX_AUDIT_MODE_POLICIES`], so cardinality is bounded whatever the input.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use sigil_registry::cloud::cache::Exchange;
use sigil_registry::{ProviderId, RequestObserver, RequestOutcome, SharedCacheEvent};

use crate::exceptions::ExceptionTable;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of `sigil_admission_requests`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `validate` or `mutate`.
    pub endpoint: &'static str,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `unknown`.
    pub operation: &'static str,
    /// One of the supported kinds, or `other`.
    pub kind: &'static str,
    /// `allowed`, `denied`, `warned`, `patched`, `skipped` or `invalid`.
    pub decision: &'static str,
}

/// Labels of `sigil_cache_requests`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `verdict` or `digest`.
    pub cache: &'static str,
    /// `hit` or `miss`.
    pub result: &'static str,
}

/// Registry hosts named in `sigil_registry_requests_total`; further hosts
/// (images may name any host) are counted as `other`.
pub const MAX_REGISTRY_HOSTS: usize = 64;

/// Labels of `sigil_registry_requests`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryLabels {
    /// `host[:port]` of the request, or `other` past [`MAX_REGISTRY_HOSTS`].
    pub host: String,
    /// The HTTP status (`200`, `404`, ...) or the failure: `timeout`,
    /// `connect`, `redirects`.
    pub status: String,
}

/// Labels of `sigil_registry_credential_exchanges`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CredentialLabels {
    /// `ecr`, `gcp`, `acr` or `docker-credential-helper`.
    pub provider: &'static str,
    /// `issued` (none was held), `refreshed` (replaced before it expired)
    /// or `failed`.
    pub outcome: &'static str,
}

/// Labels of `sigil_registry_rate_limited`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RateLimitLabels {
    /// `host[:port]`, or `other` past [`MAX_REGISTRY_HOSTS`].
    pub host: String,
    /// `retried` (a 429 waited out), `gave-up` (a 429 the deadline had no
    /// room for), `waited` or `spent` (sigil's own request budget).
    pub outcome: &'static str,
}

/// Labels of `sigil_shared_cache_requests`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SharedCacheLabels {
    /// `get` or `set`.
    pub operation: &'static str,
    /// `hit`, `miss`, `rejected` (an entry failing its MAC, expired or
    /// unreadable: ignored), `error`, `skipped` (pausing after failures, or
    /// a write dropped) or `stored`.
    pub result: &'static str,
}

/// Policies named in `sigil_admission_audit_mode_verdicts_total`; further policies
/// are counted as `other`.
pub const MAX_AUDIT_MODE_POLICIES: usize = 64;

/// Labels of `sigil_admission_audit_mode_verdicts`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuditModeLabels {
    /// The `mode: audit` ClusterImagePolicy, `other` past
    /// [`MAX_AUDIT_MODE_POLICIES`], or `unknown` when the image could not be
    /// judged before any policy answered (its tag did not resolve, the
    /// deadline passed).
    pub policy: String,
    /// `pass`, `warn`, `fail` (admission would deny it if the policy were
    /// enforced), `error` (it could not be judged: a registry did not
    /// answer, the deadline passed).
    pub outcome: &'static str,
}

/// Labels of `sigil_webhook_connections_closed`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionLabels {
    /// `requests` or `age` (the server ended it to spread load), `shutdown`,
    /// `client` (the client closed it) or `error`.
    pub reason: &'static str,
}

/// Labels of `sigil_external_data_requests`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExternalDataRequestLabels {
    /// `answered` (one item per key) or `system-error` (the request as a
    /// whole was refused: unreadable, another version, too large).
    pub outcome: &'static str,
}

/// Labels of `sigil_external_data_keys`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExternalDataKeyLabels {
    /// `allowed`, `warned`, `denied`, `skipped` (a namespace sigil never
    /// acts in) or `error` (the key could not be judged).
    pub outcome: &'static str,
}

/// Every metric the webhook exports, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Admission requests answered.
    pub requests: Family<RequestLabels, Counter>,
    /// Time spent by the judge on one image (cache misses only), in seconds.
    pub verification: Histogram,
    /// Cache lookups.
    pub cache: Family<CacheLabels, Counter>,
    /// Reviews being answered.
    pub in_flight: Gauge,
    /// Age of the policy snapshot in force, in seconds (`-1` when unknown).
    pub snapshot_age: Gauge<f64, AtomicU64>,
    /// Revision of the policy snapshot in force (`-1` when none), so that
    /// `sigil doctor` can tell whether each replica loaded the latest one.
    pub snapshot_revision: Gauge<i64>,
    /// Registry requests by host and status.
    pub registry_requests: Family<RegistryLabels, Counter>,
    /// Time from sending a registry request to its response's headers (or
    /// its failure), in seconds.
    pub registry_wait: Histogram,
    /// Round trips on the critical path of each discovery of an image's
    /// signatures or attestations fetched from its registry.
    pub discovery_round_trips: Histogram,
    /// Registry credentials from cloud providers, by provider and outcome.
    pub credential_exchanges: Family<CredentialLabels, Counter>,
    /// Registry requests that met a rate limit, by host and outcome.
    pub rate_limited: Family<RateLimitLabels, Counter>,
    /// TLS connections of the admission server (handshake done).
    pub connections: Counter,
    /// Those connections ended, by reason.
    pub connections_closed: Family<ConnectionLabels, Counter>,
    /// Verdicts of `mode: audit` policies, by policy and outcome.
    pub audit_mode_verdicts: Family<AuditModeLabels, Counter>,
    /// Audit-mode judgements not made because too many were in flight.
    pub audit_mode_skipped: Counter,
    /// Reads and writes of the shared cache, by operation and result.
    pub shared_cache: Family<SharedCacheLabels, Counter>,
    /// Gatekeeper external-data requests, by outcome.
    pub external_data_requests: Family<ExternalDataRequestLabels, Counter>,
    /// Keys of those requests, by outcome.
    pub external_data_keys: Family<ExternalDataKeyLabels, Counter>,
    /// ImagePolicyExceptions by state: active, expired, refused.
    pub exceptions: Family<ExceptionStateLabels, Gauge>,
    /// When each active exception stops counting (Unix seconds).
    pub exception_expiry: Family<ExceptionLabels, Gauge>,
    registry_hosts: Mutex<HashSet<String>>,
    audit_mode_policies: Mutex<HashSet<String>>,
    exception_table: Mutex<Option<Arc<ExceptionTable>>>,
}

/// Labels of `sigil_exceptions`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExceptionStateLabels {
    /// `active` (counts now), `expired` (past its expiresAt) or `refused`
    /// (by the admin's rules, or invalid).
    pub state: &'static str,
}

/// Labels of `sigil_exception_expiry_timestamp_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExceptionLabels {
    /// The exception's namespace.
    pub namespace: String,
    /// The exception's name.
    pub exception: String,
}

/// Active exceptions given a series of their own in
/// `sigil_exception_expiry_timestamp_seconds` (those expiring first); the
/// count in `sigil_exceptions` covers all of them.
pub const MAX_EXCEPTION_SERIES: usize = 500;

/// The `build` info metric's labels: the version and the crypto module, so a
/// dashboard can tell FIPS replicas from the others.
fn build_info() -> prometheus_client::metrics::info::Info<Vec<(&'static str, String)>> {
    let module = sigil_verifier::crypto::CryptoModule::current();
    prometheus_client::metrics::info::Info::new(vec![
        ("version", env!("CARGO_PKG_VERSION").to_owned()),
        ("crypto_module", module.label().to_owned()),
        ("crypto_version", module.version.clone()),
        ("fips_mode", module.fips_mode.to_string()),
    ])
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers the metrics.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sigil");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "admission_requests",
            "Admission reviews answered, by endpoint, operation, kind and decision",
            requests.clone(),
        );
        // 0.5 ms .. ~16 s: a cache-warm judge is sub-millisecond, a cold one
        // is bounded by the webhook deadline.
        let verification = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "verification_duration_seconds",
            "Time to judge one image on a verdict-cache miss",
            verification.clone(),
        );
        let cache = Family::<CacheLabels, Counter>::default();
        registry.register(
            "cache_requests",
            "Verdict and digest cache lookups, by cache and result",
            cache.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "admission_in_flight",
            "Admission reviews being answered",
            in_flight.clone(),
        );
        let snapshot_age = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "policy_snapshot_age_seconds",
            "Age of the policy snapshot in force (-1 when the judge has none)",
            snapshot_age.clone(),
        );
        let snapshot_revision = Gauge::<i64>::default();
        registry.register(
            "policy_snapshot_revision",
            "Revision of the policy snapshot in force (-1 when the judge has none)",
            snapshot_revision.clone(),
        );
        let registry_requests = Family::<RegistryLabels, Counter>::default();
        registry.register(
            "registry_requests",
            "Registry HTTP requests (token requests included), by host and status or failure",
            registry_requests.clone(),
        );
        // 1 ms .. ~33 s: a registry next door answers in a millisecond, a
        // slow one is cut by the request timeout.
        let registry_wait = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "registry_request_duration_seconds",
            "Time from sending a registry HTTP request to its response headers or its failure",
            registry_wait.clone(),
        );
        // 1, 2, 3 .. 8 and beyond: an unsigned image costs 1, a bundle
        // referrer 3; more means requests waiting on one another (mirrors
        // read in turn, a referrer of a legacy signature).
        let discovery_round_trips = Histogram::new([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0]);
        registry.register(
            "registry_discovery_round_trips",
            "Registry round trips on the critical path of one discovery of an image's signatures or attestations (the longest chain of requests each waiting on the one before), for discoveries fetched from the registry",
            discovery_round_trips.clone(),
        );
        let credential_exchanges = Family::<CredentialLabels, Counter>::default();
        registry.register(
            "registry_credential_exchanges",
            "Registry credentials from cloud providers (ECR, Artifact Registry, ACR), by provider and outcome: issued, refreshed (before it expired), failed",
            credential_exchanges.clone(),
        );
        let rate_limited = Family::<RateLimitLabels, Counter>::default();
        registry.register(
            "registry_rate_limited",
            "Registry requests that met a rate limit, by host and outcome: retried (a 429 waited out within the deadline), gave-up (a 429 the deadline had no room for), waited or spent (sigil's own per-host request budget)",
            rate_limited.clone(),
        );
        let connections = Counter::default();
        registry.register(
            "webhook_connections",
            "TLS connections of the admission server (handshake done)",
            connections.clone(),
        );
        let connections_closed = Family::<ConnectionLabels, Counter>::default();
        registry.register(
            "webhook_connections_closed",
            "Admission server connections ended, by reason: requests or age (ended by the server to spread load over replicas), shutdown, client, error",
            connections_closed.clone(),
        );
        let audit_mode_verdicts = Family::<AuditModeLabels, Counter>::default();
        registry.register(
            "admission_audit_mode_verdicts",
            "Verdicts of mode: audit ClusterImagePolicies on the images of admission requests (never part of the answer), by policy and outcome: pass, warn, fail (would deny), error",
            audit_mode_verdicts.clone(),
        );
        let audit_mode_skipped = Counter::default();
        registry.register(
            "admission_audit_mode_skipped",
            "Images of admission requests whose mode: audit policies were not judged because too many such judgements were in flight",
            audit_mode_skipped.clone(),
        );
        let shared_cache = Family::<SharedCacheLabels, Counter>::default();
        registry.register(
            "shared_cache_requests",
            "Reads (get) and writes (set) of the shared cache of signature material, by result: hit, miss, rejected (an entry failing its MAC, expired or unreadable, ignored), error (failed or past the wait), skipped (pausing after failures, or a write dropped), stored",
            shared_cache.clone(),
        );
        let external_data_requests = Family::<ExternalDataRequestLabels, Counter>::default();
        registry.register(
            "external_data_requests",
            "Gatekeeper external-data requests answered by the provider, by outcome: answered, system-error (refused as a whole)",
            external_data_requests.clone(),
        );
        let external_data_keys = Family::<ExternalDataKeyLabels, Counter>::default();
        registry.register(
            "external_data_keys",
            "Keys (images) of Gatekeeper external-data requests, by outcome: allowed, warned, denied, skipped, error (not judged)",
            external_data_keys.clone(),
        );
        let exceptions = Family::<ExceptionStateLabels, Gauge>::default();
        registry.register(
            "exceptions",
            "ImagePolicyExceptions this process reads, by state: active (counts now), expired (past its expiresAt), refused (outside the allowed namespaces, beyond the maximum duration, or invalid)",
            exceptions.clone(),
        );
        let exception_expiry = Family::<ExceptionLabels, Gauge>::default();
        registry.register(
            "exception_expiry_timestamp_seconds",
            "When each active ImagePolicyException stops counting, in Unix seconds",
            exception_expiry.clone(),
        );
        registry.register(
            "build",
            "Version and crypto module of this binary",
            build_info(),
        );
        Self {
            registry,
            requests,
            verification,
            cache,
            in_flight,
            snapshot_age,
            snapshot_revision,
            registry_requests,
            registry_wait,
            discovery_round_trips,
            credential_exchanges,
            rate_limited,
            connections,
            connections_closed,
            audit_mode_verdicts,
            audit_mode_skipped,
            shared_cache,
            external_data_requests,
            external_data_keys,
            exceptions,
            exception_expiry,
            registry_hosts: Mutex::new(HashSet::new()),
            audit_mode_policies: Mutex::new(HashSet::new()),
            exception_table: Mutex::new(None),
        }
    }

    /// Exports the state of `table` (read at every scrape, so expiries
    /// show when they happen).
    pub fn track_exceptions(&self, table: Arc<ExceptionTable>) {
        if let Ok(mut slot) = self.exception_table.lock() {
            *slot = Some(table);
        }
    }

    /// Sets the exception gauges from the tracked table at `now`.
    fn observe_exceptions(&self, now: time::OffsetDateTime) {
        let Some(table) = self.exception_table.lock().ok().and_then(|t| t.clone()) else {
            return;
        };
        let counts = table.counts(now);
        for (state, n) in [
            ("active", counts.active),
            ("expired", counts.expired),
            ("refused", counts.refused),
        ] {
            self.exceptions
                .get_or_create(&ExceptionStateLabels { state })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let current = table.current();
        let mut active: Vec<_> = current.all().filter(|e| now < e.expires_at).collect();
        active.sort_by_key(|e| e.expires_at);
        self.exception_expiry.clear();
        for e in active.into_iter().take(MAX_EXCEPTION_SERIES) {
            let name = e
                .name
                .strip_prefix(&format!("{}/", e.namespace))
                .unwrap_or(&e.name)
                .to_string();
            self.exception_expiry
                .get_or_create(&ExceptionLabels {
                    namespace: e.namespace.clone(),
                    exception: name,
                })
                .set(e.expires_at.unix_timestamp());
        }
    }

    /// Counts one verdict of the `mode: audit` policy `policy`; `outcome`
    /// is `pass`, `warn`, `fail` or `error`.
    pub fn audit_mode_verdict(&self, policy: &str, outcome: &'static str) {
        let policy = capped(&self.audit_mode_policies, policy, MAX_AUDIT_MODE_POLICIES);
        self.audit_mode_verdicts
            .get_or_create(&AuditModeLabels { policy, outcome })
            .inc();
    }

    /// Verdicts of the `mode: audit` policy `policy` counted with
    /// `outcome` (for tests and `sigil doctor`).
    pub fn audit_mode_count(&self, policy: &str, outcome: &'static str) -> u64 {
        self.audit_mode_verdicts
            .get(&AuditModeLabels {
                policy: policy.to_string(),
                outcome,
            })
            .map_or(0, |c| c.get())
    }

    /// The host label for `host`: itself while fewer than
    /// [`MAX_REGISTRY_HOSTS`] hosts were seen, else `other`.
    fn host_label(&self, host: &str) -> String {
        capped(&self.registry_hosts, host, MAX_REGISTRY_HOSTS)
    }

    /// Registry requests counted for `host` with `status` (for tests and
    /// benchmarks).
    pub fn registry_count(&self, host: &str, status: &str) -> u64 {
        self.registry_requests
            .get(&RegistryLabels {
                host: host.to_string(),
                status: status.to_string(),
            })
            .map_or(0, |c| c.get())
    }

    /// Counts a cache lookup.
    pub fn cache_lookup(&self, cache: &'static str, hit: bool) {
        self.cache
            .get_or_create(&CacheLabels {
                cache,
                result: if hit { "hit" } else { "miss" },
            })
            .inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        self.observe_exceptions(time::OffsetDateTime::now_utc());
        let mut out = String::new();
        // Writing into a String cannot fail; an error would only truncate.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// `value` as a label: itself while fewer than `max` values were seen (or
/// when it was seen before), else `other`.
fn capped(seen: &Mutex<HashSet<String>>, value: &str, max: usize) -> String {
    let Ok(mut seen) = seen.lock() else {
        return "other".into();
    };
    if seen.contains(value) {
        return value.to_string();
    }
    if seen.len() >= max {
        return "other".into();
    }
    seen.insert(value.to_string());
    value.to_string()
}

impl crate::cache::JudgeObserver for Metrics {
    fn verified(&self, seconds: f64) {
        self.verification.observe(seconds);
    }

    fn cache_lookup(&self, cache: &'static str, hit: bool) {
        Metrics::cache_lookup(self, cache, hit);
    }
}

impl RequestObserver for Metrics {
    fn observe(&self, host: &str, outcome: RequestOutcome, waited: std::time::Duration) {
        self.registry_wait.observe(waited.as_secs_f64());
        let status = match outcome {
            RequestOutcome::Status(code) => code.to_string(),
            RequestOutcome::Failed(class) => class.to_string(),
        };
        self.registry_requests
            .get_or_create(&RegistryLabels {
                host: self.host_label(host),
                status,
            })
            .inc();
    }

    fn rate_limited(&self, host: &str, outcome: &'static str) {
        self.rate_limited
            .get_or_create(&RateLimitLabels {
                host: self.host_label(host),
                outcome,
            })
            .inc();
    }

    fn discovered(&self, round_trips: u32) {
        self.discovery_round_trips.observe(f64::from(round_trips));
    }

    fn shared_cache(&self, event: SharedCacheEvent) {
        self.shared_cache
            .get_or_create(&SharedCacheLabels {
                operation: event.operation(),
                result: event.result(),
            })
            .inc();
    }

    fn credential_exchange(&self, provider: ProviderId, outcome: Exchange) {
        let outcome = match outcome {
            Exchange::Issued => "issued",
            Exchange::Refreshed => "refreshed",
            Exchange::Failed => "failed",
        };
        self.credential_exchanges
            .get_or_create(&CredentialLabels {
                provider: provider.name(),
                outcome,
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn shared_cache_uses_are_counted_by_operation_and_result() {
        let m = Metrics::new();
        for event in [
            SharedCacheEvent::Hit,
            SharedCacheEvent::Hit,
            SharedCacheEvent::Rejected,
            SharedCacheEvent::Error,
            SharedCacheEvent::Stored,
            SharedCacheEvent::WriteSkipped,
        ] {
            m.shared_cache(event);
        }
        let text = m.encode();
        for line in [
            r#"sigil_shared_cache_requests_total{operation="get",result="hit"} 2"#,
            r#"sigil_shared_cache_requests_total{operation="get",result="rejected"} 1"#,
            r#"sigil_shared_cache_requests_total{operation="get",result="error"} 1"#,
            r#"sigil_shared_cache_requests_total{operation="set",result="stored"} 1"#,
            r#"sigil_shared_cache_requests_total{operation="set",result="skipped"} 1"#,
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
    }

    #[test]
    fn registry_hosts_past_the_cap_are_counted_as_other() {
        let m = Metrics::new();
        for i in 0..MAX_REGISTRY_HOSTS + 5 {
            m.observe(
                &format!("r{i}.example"),
                RequestOutcome::Status(200),
                Duration::from_millis(3),
            );
        }
        m.observe(
            "r0.example",
            RequestOutcome::Failed("timeout"),
            Duration::from_secs(5),
        );
        assert_eq!(m.registry_count("r0.example", "200"), 1);
        assert_eq!(m.registry_count("r0.example", "timeout"), 1);
        assert_eq!(m.registry_count("other", "200"), 5);
        let text = m.encode();
        assert!(
            text.contains(r#"sigil_registry_requests_total{host="r1.example",status="200"} 1"#),
            "{text}"
        );
        // Every exchange is timed: 69 of 3 ms and one of 5 s.
        let count = MAX_REGISTRY_HOSTS + 6;
        assert!(
            text.contains(&format!(
                "sigil_registry_request_duration_seconds_count {count}\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "sigil_registry_request_duration_seconds_bucket{{le=\"0.004\"}} {}\n",
                count - 1
            )),
            "{text}"
        );
    }

    #[test]
    fn credential_exchanges_are_counted_by_provider_and_outcome() {
        let m = Metrics::new();
        m.credential_exchange(ProviderId::Ecr, Exchange::Issued);
        m.credential_exchange(ProviderId::Ecr, Exchange::Refreshed);
        m.credential_exchange(ProviderId::Ecr, Exchange::Refreshed);
        m.credential_exchange(ProviderId::Acr, Exchange::Failed);
        m.rate_limited("index.docker.io", "retried");
        let text = m.encode();
        assert!(
            text.contains(
                r#"sigil_registry_rate_limited_total{host="index.docker.io",outcome="retried"} 1"#
            ),
            "{text}"
        );
        for line in [
            r#"sigil_registry_credential_exchanges_total{provider="ecr",outcome="issued"} 1"#,
            r#"sigil_registry_credential_exchanges_total{provider="ecr",outcome="refreshed"} 2"#,
            r#"sigil_registry_credential_exchanges_total{provider="acr",outcome="failed"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn the_charts_dashboard_and_alerts_ask_only_for_series_the_webhook_exports() {
        let m = Metrics::new();
        // One sample of every family (an empty one is not exposed).
        m.requests
            .get_or_create(&RequestLabels {
                endpoint: "validate",
                operation: "CREATE",
                kind: "Pod",
                decision: "denied",
            })
            .inc();
        m.verification.observe(0.001);
        m.cache_lookup("verdict", true);
        m.in_flight.set(1);
        m.snapshot_age.set(2.0);
        m.snapshot_revision.set(3);
        m.observe(
            "registry.example",
            RequestOutcome::Status(200),
            Duration::from_millis(1),
        );
        m.connections.inc();
        m.connections_closed
            .get_or_create(&ConnectionLabels { reason: "age" })
            .inc();
        m.audit_mode_verdict("p", "fail");
        m.audit_mode_skipped.inc();
        m.discovered(1);
        m.shared_cache
            .get_or_create(&SharedCacheLabels {
                operation: "get",
                result: "hit",
            })
            .inc();
        // One exception that counts for the next hour: the gauges come
        // from the tracked table at every scrape.
        let rules = sigil_compile::exception::ExceptionRules::new(
            &["team-a".into()],
            std::time::Duration::from_secs(7200),
        )
        .unwrap();
        let table = Arc::new(ExceptionTable::new(rules));
        let mut e = sigil_api::exception::ImagePolicyException::new(
            "sidecar",
            sigil_api::exception::ImagePolicyExceptionSpec {
                policies: vec!["signed".into()],
                images: vec!["registry.test/**".into()],
                workloads: vec![sigil_api::exception::ExceptionWorkload {
                    kind: "Pod".into(),
                    name: "*".into(),
                }],
                expires_at: sigil_verifier::trust::format_rfc3339(
                    time::OffsetDateTime::now_utc() + time::Duration::hours(1),
                ),
                reason: None,
            },
        );
        e.metadata.namespace = Some("team-a".into());
        table.replace([&e], time::OffsetDateTime::now_utc());
        m.track_exceptions(table);
        let exposition = m.encode();
        assert!(
            exposition.contains("sigil_exceptions{state=\"active\"} 1")
                && exposition.contains(
                    "sigil_exception_expiry_timestamp_seconds{namespace=\"team-a\",exception=\"sidecar\"}"
                ),
            "{exposition}"
        );
        let missing = sigil_testkit::metrics::unexported(&exposition, |name| {
            !name.starts_with("sigil_controller_") && !name.starts_with("sigil_audit_")
        });
        assert!(missing.is_empty(), "{missing:#?}\nexported:\n{exposition}");
    }

    #[test]
    fn discoveries_are_counted_by_their_round_trips_on_the_critical_path() {
        let m = Metrics::new();
        // An unsigned image, then two bundle referrers.
        for round_trips in [1, 3, 3] {
            m.discovered(round_trips);
        }
        let text = m.encode();
        for line in [
            "sigil_registry_discovery_round_trips_count 3\n",
            "sigil_registry_discovery_round_trips_sum 7.0\n",
            "sigil_registry_discovery_round_trips_bucket{le=\"1.0\"} 1\n",
            "sigil_registry_discovery_round_trips_bucket{le=\"2.0\"} 1\n",
            "sigil_registry_discovery_round_trips_bucket{le=\"3.0\"} 3\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn audit_mode_policies_past_the_cap_are_counted_as_other() {
        let m = Metrics::new();
        for i in 0..MAX_AUDIT_MODE_POLICIES + 3 {
            m.audit_mode_verdict(&format!("p{i}"), "fail");
        }
        m.audit_mode_verdict("p0", "pass");
        assert_eq!(m.audit_mode_count("p0", "fail"), 1);
        assert_eq!(m.audit_mode_count("p0", "pass"), 1);
        assert_eq!(m.audit_mode_count("other", "fail"), 3);
        let text = m.encode();
        assert!(
            text.contains(
                r#"sigil_admission_audit_mode_verdicts_total{policy="p1",outcome="fail"} 1"#
            ),
            "{text}"
        );
    }
}
