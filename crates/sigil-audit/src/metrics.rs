//! The audit's Prometheus metrics: results by namespace, policy, mode and
//! outcome (violations are `outcome="fail"`), how long an audit pass took,
//! when one last succeeded, and the API writes it cost.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::finding::{Finding, Outcome};

/// Labels of a result count.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ResultLabels {
    /// The pods' namespace.
    pub namespace: String,
    /// The policy (or pseudo-policy).
    pub policy: String,
    /// The policy's mode: `enforce`, `warn`, `audit` (a `fail` under `audit`
    /// or `warn` denies nothing at admission), or `allow` for the
    /// pseudo-policies.
    pub mode: String,
    /// `pass`, `fail`, `warn`, `error`, `skip`.
    pub outcome: String,
}

/// Labels of a report write.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// `apply` or `delete`.
    pub operation: String,
}

/// The audit's metrics.
#[derive(Clone)]
pub struct AuditMetrics {
    results: Family<ResultLabels, Gauge>,
    duration: Histogram,
    last_success: Gauge<f64, AtomicU64>,
    writes: Family<WriteLabels, Counter>,
    judged: Counter,
    shown: Arc<std::sync::Mutex<BTreeSet<ResultLabels>>>,
}

impl AuditMetrics {
    /// Metrics registered in `registry` under `sigil_audit_`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            results: Family::default(),
            duration: Histogram::new([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0]),
            last_success: Gauge::default(),
            writes: Family::default(),
            judged: Counter::default(),
            shown: Arc::default(),
        };
        let sub = registry.sub_registry_with_prefix("sigil_audit");
        sub.register(
            "results",
            "Audit results by namespace, policy, the policy's mode and outcome (fail: a violation)",
            m.results.clone(),
        );
        sub.register(
            "duration_seconds",
            "Time one audit pass took (judging and writing reports)",
            m.duration.clone(),
        );
        sub.register(
            "last_success_timestamp_seconds",
            "Unix time the last audit pass finished without error",
            m.last_success.clone(),
        );
        sub.register(
            "report_writes",
            "Report objects applied or deleted",
            m.writes.clone(),
        );
        sub.register(
            "images_judged",
            "Distinct running images judged (through the verdict cache)",
            m.judged.clone(),
        );
        m
    }

    /// Sets the result counts of `namespace` to those of `findings`; labels
    /// it no longer has drop to zero rather than linger.
    pub fn set_namespace(&self, namespace: &str, findings: &[Finding]) {
        let mut counts: std::collections::BTreeMap<ResultLabels, i64> = Default::default();
        for f in findings {
            *counts
                .entry(ResultLabels {
                    namespace: namespace.to_string(),
                    policy: f.policy.clone(),
                    mode: f.mode.clone(),
                    outcome: f.outcome.as_str().to_string(),
                })
                .or_default() += i64::try_from(f.pods).unwrap_or(i64::MAX);
        }
        let Ok(mut shown) = self.shown.lock() else {
            return;
        };
        let stale: Vec<ResultLabels> = shown
            .iter()
            .filter(|l| l.namespace == namespace && !counts.contains_key(*l))
            .cloned()
            .collect();
        for l in stale {
            self.results.remove(&l);
            shown.remove(&l);
        }
        for (l, n) in counts {
            self.results.get_or_create(&l).set(n);
            shown.insert(l);
        }
    }

    /// Records a finished pass.
    pub fn pass_done(&self, seconds: f64, ok: bool, judged: usize, now_unix: f64) {
        self.duration.observe(seconds);
        self.judged.inc_by(judged as u64);
        if ok {
            self.last_success.set(now_unix);
        }
    }

    /// Counts report writes.
    pub fn wrote(&self, applied: usize, deleted: usize) {
        for (operation, n) in [("apply", applied), ("delete", deleted)] {
            if n > 0 {
                self.writes
                    .get_or_create(&WriteLabels {
                        operation: operation.into(),
                    })
                    .inc_by(n as u64);
            }
        }
    }

    /// Violations (`fail` results, counted in pods) currently shown.
    pub fn violations(&self) -> i64 {
        let Ok(shown) = self.shown.lock() else {
            return 0;
        };
        shown
            .iter()
            .filter(|l| l.outcome == Outcome::Fail.as_str())
            .map(|l| self.results.get_or_create(l).get())
            .sum()
    }
}
