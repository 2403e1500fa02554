//! The webhook's Prometheus metrics (prometheus-client): admission requests
//! by endpoint, operation, kind and decision; verification latency; cache
//! hits and misses; reviews in flight; policy snapshot age. Every label value
//! is a constant, so cardinality is bounded whatever the input.

use std::sync::atomic::AtomicU64;

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
        Self {
            registry,
            requests,
            verification,
            cache,
            in_flight,
            snapshot_age,
        }
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
        let mut out = String::new();
        // Writing into a String cannot fail; an error would only truncate.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
