//! Prometheus metrics (prometheus-client): reconciliations, errors by
//! reason, policies by state, trust-root age and last refresh, TUF updates
//! (last success, timestamp expiry, failures, freezes), the built-in
//! Sigstore root's source, snapshot revision (and corrupt snapshots
//! replaced), leadership and certificate expiry; the build and crypto module (`sigil_controller_build_info`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels naming a controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `policy`, `trustroot` or `tls`.
    pub controller: String,
}

/// Labels of a failed reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `policy`, `trustroot` or `tls`.
    pub controller: String,
    /// [`crate::Error::metric_label`].
    pub reason: String,
}

/// Labels of a policy state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// `ready` or `not_ready`.
    pub state: String,
}

/// Labels naming a TrustRoot.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TrustRootLabels {
    /// The TrustRoot's name.
    pub trust_root: String,
}

/// Labels naming a TUF repository (`sigstore.public-good`, `trustroot.<name>`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RepositoryLabels {
    /// The repository, as the TUF state Secret keys it.
    pub repository: String,
}

/// Labels of a failed TUF update.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TufFailureLabels {
    /// The repository.
    pub repository: String,
    /// [`crate::tuf::TufError::reason`]: `fetch`, `rollback`, `expired`, ….
    pub reason: String,
}

/// Labels of the built-in Sigstore root's source.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SigstoreLabels {
    /// `public-good` or `staging`.
    pub instance: String,
    /// `tuf`, `embedded_fallback` or `embedded_offline`.
    pub source: String,
}

/// The sources the built-in root's material can come from.
pub const SIGSTORE_SOURCES: &[&str] = &["tuf", "embedded_fallback", "embedded_offline"];

/// The controller's metrics.
pub struct Metrics {
    registry: Registry,
    reconciliations: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    policies: Family<StateLabels, Gauge>,
    trust_root_last_refresh: Family<TrustRootLabels, Gauge>,
    trust_root_age: Family<TrustRootLabels, Gauge>,
    snapshot_revision: Gauge,
    snapshot_discarded: Counter,
    leader: Gauge,
    cert_expiry: Gauge,
    tuf_last_update: Family<RepositoryLabels, Gauge>,
    tuf_timestamp_expiry: Family<RepositoryLabels, Gauge>,
    tuf_metadata_expired: Family<RepositoryLabels, Gauge>,
    tuf_failures: Family<TufFailureLabels, Counter>,
    sigstore_root: Family<SigstoreLabels, Gauge>,
    policy_states: Mutex<BTreeMap<String, bool>>,
    refreshed_at: Mutex<BTreeMap<String, i64>>,
}

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
        let mut registry = Registry::with_prefix("sigil_controller");
        let m = Self {
            reconciliations: Family::default(),
            errors: Family::default(),
            policies: Family::default(),
            trust_root_last_refresh: Family::default(),
            trust_root_age: Family::default(),
            snapshot_revision: Gauge::default(),
            snapshot_discarded: Counter::default(),
            leader: Gauge::default(),
            cert_expiry: Gauge::default(),
            tuf_last_update: Family::default(),
            tuf_timestamp_expiry: Family::default(),
            tuf_metadata_expired: Family::default(),
            tuf_failures: Family::default(),
            sigstore_root: Family::default(),
            policy_states: Mutex::default(),
            refreshed_at: Mutex::default(),
            registry: Registry::default(),
        };
        registry.register(
            "reconciliations",
            "Reconciliations run, by controller",
            m.reconciliations.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciliations that failed, by controller and reason",
            m.errors.clone(),
        );
        registry.register(
            "policies",
            "ClusterImagePolicies by state (ready: compiled and published)",
            m.policies.clone(),
        );
        registry.register(
            "trust_root_last_refresh_timestamp_seconds",
            "Unix time of the last successful load or refresh of each TrustRoot",
            m.trust_root_last_refresh.clone(),
        );
        registry.register(
            "trust_root_age_seconds",
            "Seconds since each TrustRoot was last loaded or refreshed successfully",
            m.trust_root_age.clone(),
        );
        registry.register(
            "snapshot_revision",
            "Revision of the last policy snapshot written",
            m.snapshot_revision.clone(),
        );
        registry.register(
            "snapshot_discarded",
            "Stored policy snapshots a leader found corrupt at its start (read twice alike) and \
             replaced rather than recovered: policies not reconciled since were not enforced",
            m.snapshot_discarded.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease",
            m.leader.clone(),
        );
        registry.register(
            "webhook_certificate_expiry_timestamp_seconds",
            "Unix time at which the webhook serving certificate expires",
            m.cert_expiry.clone(),
        );
        registry.register(
            "tuf_last_update_timestamp_seconds",
            "Unix time of the last verified TUF update, by repository",
            m.tuf_last_update.clone(),
        );
        registry.register(
            "tuf_timestamp_expiry_timestamp_seconds",
            "Unix time at which the trusted TUF timestamp metadata expires, by repository; \
             in the past means the mirror is frozen or unreachable for longer than its lifetime",
            m.tuf_timestamp_expiry.clone(),
        );
        registry.register(
            "tuf_metadata_expired",
            "1 while the last TUF update of a repository failed because the mirror served \
             expired metadata (a freeze attack or an unmaintained mirror)",
            m.tuf_metadata_expired.clone(),
        );
        registry.register(
            "tuf_update_failures",
            "TUF updates that failed, by repository and reason (fetch, rollback, expired, \
             signature, ...)",
            m.tuf_failures.clone(),
        );
        registry.register(
            "sigstore_root",
            "1 for where the built-in Sigstore root in force comes from: tuf, \
             embedded_fallback (mirror not reached yet) or embedded_offline (--tuf-offline)",
            m.sigstore_root.clone(),
        );
        registry.register(
            "build",
            "Version and crypto module of this binary",
            build_info(),
        );
        Self { registry, ..m }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding a metrics lock leaves plain numbers behind.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Metrics {
    /// Counts a reconciliation.
    pub fn reconciled(&self, controller: &str) {
        self.reconciliations
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .inc();
    }

    /// Counts a failed reconciliation.
    pub fn failed(&self, controller: &str, reason: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                controller: controller.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Records whether a policy is ready (`None` forgets a deleted one).
    pub fn policy_state(&self, name: &str, ready: Option<bool>) {
        let mut states = lock(&self.policy_states);
        match ready {
            Some(r) => {
                states.insert(name.to_owned(), r);
            }
            None => {
                states.remove(name);
            }
        }
        let ready = states.values().filter(|r| **r).count();
        let not_ready = states.len().saturating_sub(ready);
        for (state, n) in [("ready", ready), ("not_ready", not_ready)] {
            self.policies
                .get_or_create(&StateLabels {
                    state: state.into(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Records a successful trust-root load at Unix time `at`.
    pub fn trust_root_refreshed(&self, name: &str, at: i64) {
        lock(&self.refreshed_at).insert(name.to_owned(), at);
        self.trust_root_last_refresh
            .get_or_create(&TrustRootLabels {
                trust_root: name.into(),
            })
            .set(at);
    }

    /// Forgets a deleted trust root.
    pub fn trust_root_removed(&self, name: &str) {
        lock(&self.refreshed_at).remove(name);
        let labels = TrustRootLabels {
            trust_root: name.into(),
        };
        self.trust_root_last_refresh.remove(&labels);
        self.trust_root_age.remove(&labels);
    }

    /// Records a verified TUF update of `repository` at Unix time `at`,
    /// whose timestamp metadata expires at `expires` (Unix time).
    pub fn tuf_updated(&self, repository: &str, at: i64, expires: Option<i64>) {
        let labels = RepositoryLabels {
            repository: repository.into(),
        };
        self.tuf_last_update.get_or_create(&labels).set(at);
        if let Some(expires) = expires {
            self.tuf_timestamp_expiry
                .get_or_create(&labels)
                .set(expires);
        }
        self.tuf_metadata_expired.get_or_create(&labels).set(0);
    }

    /// Records the expiry of the trusted timestamp of `repository` (after a
    /// restart, from the persisted state).
    pub fn tuf_timestamp_expires(&self, repository: &str, expires: i64) {
        self.tuf_timestamp_expiry
            .get_or_create(&RepositoryLabels {
                repository: repository.into(),
            })
            .set(expires);
    }

    /// Counts a failed TUF update of `repository`.
    pub fn tuf_failed(&self, repository: &str, reason: &str) {
        self.tuf_failures
            .get_or_create(&TufFailureLabels {
                repository: repository.into(),
                reason: reason.into(),
            })
            .inc();
        self.tuf_metadata_expired
            .get_or_create(&RepositoryLabels {
                repository: repository.into(),
            })
            .set(i64::from(reason == "expired"));
    }

    /// Forgets a repository no longer followed.
    pub fn tuf_removed(&self, repository: &str) {
        let labels = RepositoryLabels {
            repository: repository.into(),
        };
        self.tuf_last_update.remove(&labels);
        self.tuf_timestamp_expiry.remove(&labels);
        self.tuf_metadata_expired.remove(&labels);
    }

    /// Records where the built-in Sigstore root in force comes from (one of
    /// [`SIGSTORE_SOURCES`]).
    pub fn sigstore_source(&self, instance: &str, source: &str) {
        for s in SIGSTORE_SOURCES {
            self.sigstore_root
                .get_or_create(&SigstoreLabels {
                    instance: instance.into(),
                    source: (*s).into(),
                })
                .set(i64::from(*s == source));
        }
    }

    /// Records the revision of the snapshot just written.
    pub fn snapshot_written(&self, revision: u64) {
        self.snapshot_revision
            .set(i64::try_from(revision).unwrap_or(i64::MAX));
    }

    /// Counts a stored snapshot found corrupt and replaced.
    pub fn snapshot_discarded(&self) {
        self.snapshot_discarded.inc();
    }

    /// Records leadership.
    pub fn leading(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Records the serving certificate's expiry (Unix time).
    pub fn certificate_expiry(&self, at: i64) {
        self.cert_expiry.set(at);
    }

    /// The OpenMetrics text, with ages computed at `now` (Unix time).
    pub fn encode(&self, now: i64) -> String {
        for (name, at) in lock(&self.refreshed_at).iter() {
            self.trust_root_age
                .get_or_create(&TrustRootLabels {
                    trust_root: name.clone(),
                })
                .set(now.saturating_sub(*at));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_dashboard_and_alerts_ask_only_for_series_the_controller_exports() {
        let m = Metrics::default();
        // One sample of every family (an empty one is not exposed).
        m.reconciled("policy");
        m.failed("policy", "kube");
        m.policy_state("p", Some(true));
        m.policy_state("q", None);
        m.trust_root_refreshed("root", 1_700_000_000);
        m.tuf_updated("sigstore.public-good", 1_700_000_000, Some(1_800_000_000));
        m.tuf_failed("sigstore.public-good", "expired");
        m.sigstore_source("public-good", "tuf");
        m.snapshot_written(3);
        m.leading(true);
        m.certificate_expiry(1_800_000_000);
        let exposition = m.encode(1_700_000_100);
        let missing = sigil_testkit::metrics::unexported(&exposition, |name| {
            name.starts_with("sigil_controller_")
        });
        assert!(missing.is_empty(), "{missing:#?}\nexported:\n{exposition}");
    }
}
