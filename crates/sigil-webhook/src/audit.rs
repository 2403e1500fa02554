//! `sigil-webhook --audit`: the admission binary run as the in-cluster
//! audit instead of the admission server. It builds the very judge
//! admission builds (same flags, same policy snapshot, same verdict cache
//! settings and pull secrets) and hands it to `sigil-audit`'s loop, so an
//! audit result and an admission answer cannot differ for the same inputs.
//! Its plain-HTTP port serves `/metrics` (the audit's and the judge's),
//! `/healthz` and `/readyz` (ready once a policy snapshot is in force).
//!
//! One audit writes a cluster's reports: the chart runs one replica with
//! the Recreate strategy, so two never race over the same report objects.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use clap::ArgAction;
use clap::builder::TypedValueParser as _;
use prometheus_client::registry::Registry;
use sigil_audit::auditor::Auditor;
use sigil_audit::engine::EngineSettings;
use sigil_audit::metrics::AuditMetrics;
use sigil_audit::report::{self, Flavor};
use sigil_audit::runtime::RuntimeSettings;
use sigil_audit::scope::{Scope, Selection};
use sigil_judge::cache::CachedJudge;
use sigil_judge::judge::{ImageJudge as _, PullSecretSource};
use sigil_judge::policy_judge::PolicyJudge;

use crate::config::Args;
use crate::error::Error;
use crate::metrics::Metrics;

/// The audit mode's settings (`--audit` and the `--audit-*` flags; the
/// judge's flags are admission's).
#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// Run the in-cluster audit instead of the admission server: judge
    /// what already runs (each container's running digest) with the
    /// policy snapshot admission enforces and write the results as report
    /// objects. Needs --policy-snapshot-secret (or --policy-snapshot-file);
    /// serves only --metrics-listen. Run one replica: it owns the reports.
    #[arg(long)]
    pub audit: bool,
    /// Seconds between re-verifications of every running image (signatures
    /// are added and revoked, certificates expire); policy and pod changes
    /// are audited when they happen, whatever this is.
    #[arg(long, default_value_t = 6 * 3600, value_parser = clap::value_parser!(u64).range(60..=7 * 86400))]
    pub audit_interval_seconds: u64,
    /// Seconds changes are gathered before an audit pass, so a rollout of
    /// many pods costs one pass.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub audit_settle_seconds: u64,
    /// How admission selects namespaces (the chart's namespaceSelection):
    /// the namespaces it guards are audited as enforced.
    #[arg(long, value_enum, default_value = "opt-in")]
    pub audit_namespace_selection: Selection,
    /// Also audit the namespaces admission does not guard yet (their
    /// results say enforced=false): what would break if they opted in.
    /// --namespace and --exclude-namespace are never audited.
    #[arg(long)]
    pub audit_unenforced_namespaces: bool,
    /// The report API written: openreports (openreports.io/v1alpha1
    /// Report and ClusterReport; Kyverno 1.15+, Policy Reporter) or
    /// wgpolicyk8s (wgpolicyk8s.io/v1alpha2 PolicyReport and
    /// ClusterPolicyReport, for older consumers).
    #[arg(long, value_enum, default_value = "openreports")]
    pub audit_report_format: Flavor,
    /// Also write the cluster-wide report (per policy, the worst outcome
    /// over every audited namespace).
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub audit_cluster_report: bool,
    /// Results per report object; a namespace with more is split over
    /// objects sigil-audit, sigil-audit-1, ...
    #[arg(long, default_value_t = report::DEFAULT_MAX_RESULTS, value_parser = clap::value_parser!(u64).range(1..=5000).map(|n| usize::try_from(n).unwrap_or(5000)))]
    pub audit_report_max_results: usize,
    /// Distinct running images judged at once (each registry host is
    /// further bounded by --per-host-concurrency).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256).map(|n| usize::try_from(n).unwrap_or(256)))]
    pub audit_concurrency: usize,
}

impl Args {
    /// The namespaces the audit covers, as admission selects them.
    pub fn audit_scope(&self) -> Scope {
        Scope {
            selection: self.audit.audit_namespace_selection,
            excluded: self.admission().excluded_namespaces,
            unenforced: self.audit.audit_unenforced_namespaces,
        }
    }

    /// How the audit loop runs.
    pub fn audit_settings(&self) -> RuntimeSettings {
        RuntimeSettings {
            interval: Duration::from_secs(self.audit.audit_interval_seconds),
            settle: Duration::from_secs(self.audit.audit_settle_seconds),
            flavor: self.audit.audit_report_format,
            cluster_report: self.audit.audit_cluster_report,
            max_results: self.audit.audit_report_max_results,
        }
    }

    /// How the audit judges: admission's deadline, the audit's concurrency.
    pub fn audit_engine(&self) -> EngineSettings {
        EngineSettings {
            deadline: Duration::from_secs(self.timeout_seconds),
            concurrency: self.audit.audit_concurrency,
        }
    }
}

/// What the audit's metrics port serves from.
struct Served {
    judge: Arc<PolicyJudge>,
    judge_metrics: Arc<Metrics>,
    audit_registry: Registry,
}

/// The judge's metrics and the audit's in one exposition: the judge's
/// text without its closing `# EOF`, then the audit's with it.
fn exposition(judge_metrics: &Metrics, audit_registry: &Registry) -> String {
    let mut text = judge_metrics.encode();
    if let Some(open) = text.strip_suffix("# EOF\n") {
        text.truncate(open.len());
    }
    // Writing into a String cannot fail; an error would only truncate.
    let _ = prometheus_client::encoding::text::encode(&mut text, audit_registry);
    text
}

async fn metrics(State(s): State<Arc<Served>>) -> Response {
    s.judge_metrics.snapshot_age.set(
        s.judge
            .snapshot_age()
            .map_or(-1.0, |d: Duration| d.as_secs_f64()),
    );
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        exposition(&s.judge_metrics, &s.audit_registry),
    )
        .into_response()
}

async fn readyz(State(s): State<Arc<Served>>) -> (StatusCode, &'static str) {
    if s.judge.ready() {
        (StatusCode::OK, "ready")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "no policy snapshot in force yet: the audit waits for it",
        )
    }
}

fn router(served: Arc<Served>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(served)
}

/// Waits until `judge` has a policy snapshot in force: judging before
/// would report every image as an error ("not ready") for a moment.
async fn snapshot_loaded(judge: &PolicyJudge) {
    let mut revisions = judge.subscribe();
    let mut told = false;
    while judge.in_force().is_none() {
        if !told {
            tracing::info!("audit waits for the policy snapshot");
            told = true;
        }
        if revisions.changed().await.is_err() {
            return;
        }
    }
}

/// Runs the audit with `judge` (fed by a snapshot source the caller
/// started) until the process is told to stop.
pub(crate) async fn run<S: PullSecretSource>(
    args: &Args,
    client: kube::Client,
    judge: Arc<PolicyJudge>,
    secrets: S,
    judge_metrics: Arc<Metrics>,
    listen: SocketAddr,
) -> Result<(), Error> {
    let mut audit_registry = Registry::default();
    let audit_metrics = AuditMetrics::new(&mut audit_registry);
    let served = Arc::new(Served {
        judge: judge.clone(),
        judge_metrics: judge_metrics.clone(),
        audit_registry,
    });
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| Error::Bind {
            addr: listen,
            source,
        })?;
    let metrics_addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: listen,
        source,
    })?;
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(served)).await {
            tracing::warn!(error = %e, "audit metrics server stopped");
        }
    });
    let cache = Arc::new(CachedJudge::new(
        judge.clone(),
        &args.admission().cache,
        judge_metrics,
    ));
    let auditor = Auditor::new(
        cache,
        Arc::new(secrets),
        args.audit_engine(),
        args.audit_scope(),
    );
    let settings = args.audit_settings();
    tracing::info!(
        %metrics_addr,
        format = ?settings.flavor,
        interval_seconds = settings.interval.as_secs(),
        unenforced = args.audit.audit_unenforced_namespaces,
        "sigil audit starting"
    );
    let audit = async {
        snapshot_loaded(&judge).await;
        let revisions = judge.subscribe();
        let in_force = || judge.in_force();
        sigil_audit::runtime::run(
            client,
            auditor,
            revisions,
            in_force,
            audit_metrics,
            settings,
        )
        .await;
    };
    let outcome = tokio::select! {
        () = audit => Err(Error::Config(
            "the audit's watches ended; restarting the process resumes it".into(),
        )),
        r = crate::termination() => r,
    };
    server.abort();
    tracing::info!("audit stopped");
    outcome
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser as _;

    use super::*;
    use crate::metrics::Metrics;

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let mut argv = vec!["sigil-webhook"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv)
    }

    #[test]
    fn audit_mode_needs_no_serving_certificate_but_admission_does() {
        let args = parse(&["--audit", "--policy-snapshot-secret=sigil-system/snap"]).unwrap();
        assert!(args.audit.audit);
        assert!(args.tls_cert.is_none());
        let err = parse(&["--policy-snapshot-secret=sigil-system/snap"]).unwrap_err();
        assert!(err.to_string().contains("--tls-cert"), "{err}");
    }

    #[test]
    fn audit_flags_become_the_scope_and_loop_settings() {
        let args = parse(&[
            "--audit",
            "--namespace=sigil",
            "--exclude-namespace=kube-system",
            "--exclude-namespace=infra",
            "--audit-namespace-selection=opt-out",
            "--audit-unenforced-namespaces",
            "--audit-report-format=wgpolicyk8s",
            "--audit-cluster-report=false",
            "--audit-interval-seconds=600",
            "--audit-settle-seconds=0",
            "--audit-report-max-results=50",
            "--timeout-seconds=7",
        ])
        .unwrap();
        assert_eq!(
            args.audit_scope(),
            Scope {
                selection: Selection::OptOut,
                excluded: vec!["kube-system".into(), "infra".into(), "sigil".into()],
                unenforced: true,
            }
        );
        let s = args.audit_settings();
        assert_eq!(s.flavor, Flavor::PolicyReport);
        assert!(!s.cluster_report);
        assert_eq!(s.interval, Duration::from_secs(600));
        assert_eq!(s.settle, Duration::ZERO);
        assert_eq!(s.max_results, 50);
        assert_eq!(args.audit_engine().deadline, Duration::from_secs(7));
    }

    #[test]
    fn audit_defaults_follow_admissions_opt_in_and_write_openreports() {
        let args = parse(&["--audit"]).unwrap();
        let scope = args.audit_scope();
        assert_eq!(scope.selection, Selection::OptIn);
        assert!(!scope.unenforced);
        assert!(scope.excluded.contains(&"sigil-system".to_string()));
        let s = args.audit_settings();
        assert_eq!(s.flavor, Flavor::OpenReports);
        assert!(s.cluster_report);
        assert_eq!(s.interval, Duration::from_secs(6 * 3600));
    }

    #[test]
    fn an_interval_under_a_minute_is_refused_with_the_flag_named() {
        let err = parse(&["--audit", "--audit-interval-seconds=5"]).unwrap_err();
        assert!(
            err.to_string().contains("--audit-interval-seconds"),
            "{err}"
        );
    }

    #[test]
    fn the_exposition_carries_both_metric_sets_and_one_eof() {
        let judge_metrics = Metrics::new();
        let mut registry = Registry::default();
        let audit = AuditMetrics::new(&mut registry);
        audit.pass_done(0.5, true, 3, 1_700_000_000.0);
        let text = exposition(&judge_metrics, &registry);
        assert!(text.contains("sigil_build_info"), "{text}");
        assert!(
            text.contains("sigil_audit_last_success_timestamp_seconds 1700000000"),
            "{text}"
        );
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
