//! `sigil-audit`, the in-cluster audit as a program of its own: it builds
//! the very judge admission builds (`sigil-judge`'s `JudgeArgs`: the same
//! flags, the same policy snapshot, verdict cache settings and pull
//! secrets) and runs [`crate::runtime`]'s loop with it, so an audit result
//! and an admission answer cannot differ for the same inputs. Its
//! plain-HTTP port serves `/metrics` (the audit's and the judge's),
//! `/healthz` and `/readyz` (ready once a policy snapshot is in force).
//!
//! One audit writes a cluster's reports: the chart runs one replica with
//! the Recreate strategy, so two never race over the same report objects.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::ArgAction;
use clap::builder::TypedValueParser as _;
use prometheus_client::registry::Registry;
use sigil_judge::args::{Judge, JudgeArgs, SetupError};
use sigil_judge::cache::{CacheConfig, CachedJudge};
use sigil_judge::judge::ImageJudge as _;
use sigil_judge::metrics::Metrics;
use sigil_judge::policy_judge::PolicyJudge;
use sigil_runtime::LogFormat;
use sigil_runtime::admin::{self, Admin, AdminListener, BindError};
use sigil_runtime::shutdown;

use crate::auditor::Auditor;
use crate::engine::EngineSettings;
use crate::metrics::AuditMetrics;
use crate::report::{self, Flavor};
use crate::runtime::RuntimeSettings;
use crate::scope::{Scope, ScopeArgs};

/// `sigil-audit`: the in-cluster audit. It judges what already runs (each
/// container's running digest) with the policy snapshot admission enforces
/// and writes the results as report objects. Run one replica: it owns the
/// reports.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "sigil-audit", version, about)]
pub struct Args {
    /// Plain-HTTP address of `/metrics`, `/healthz`, `/readyz`.
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Seconds between re-verifications of every running image (signatures
    /// are added and revoked, certificates expire); policy and pod changes
    /// are audited when they happen, whatever this is.
    #[arg(long, alias = "audit-interval-seconds", default_value_t = 6 * 3600, value_parser = clap::value_parser!(u64).range(60..=7 * 86400))]
    pub interval_seconds: u64,
    /// Seconds changes are gathered before an audit pass, so a rollout of
    /// many pods costs one pass.
    #[arg(long, alias = "audit-settle-seconds", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub settle_seconds: u64,
    /// Which namespaces are audited, as admission selects them.
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// The report API written: openreports (openreports.io/v1alpha1
    /// Report and ClusterReport; Kyverno 1.15+, Policy Reporter) or
    /// wgpolicyk8s (wgpolicyk8s.io/v1alpha2 PolicyReport and
    /// ClusterPolicyReport, for older consumers).
    #[arg(
        long,
        alias = "audit-report-format",
        value_enum,
        default_value = "openreports"
    )]
    pub report_format: Flavor,
    /// Also write the cluster-wide report (per policy, the worst outcome
    /// over every audited namespace).
    #[arg(long, alias = "audit-cluster-report", default_value_t = true, action = ArgAction::Set)]
    pub cluster_report: bool,
    /// Results per report object; a namespace with more is split over
    /// objects sigil-audit, sigil-audit-1, ...
    #[arg(long, alias = "audit-report-max-results", default_value_t = report::DEFAULT_MAX_RESULTS, value_parser = clap::value_parser!(u64).range(1..=5000).map(|n| usize::try_from(n).unwrap_or(5000)))]
    pub report_max_results: usize,
    /// Distinct running images judged at once (each registry host is
    /// further bounded by --per-host-concurrency).
    #[arg(long, alias = "audit-concurrency", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256).map(|n| usize::try_from(n).unwrap_or(256)))]
    pub concurrency: usize,
    /// The judge's settings, the webhook's.
    #[command(flatten)]
    pub judge: JudgeArgs,
}

/// How long a pass under way at SIGTERM may take to finish writing its
/// reports (the chart gives the pod 10 seconds to stop); a pass cut short
/// is redone by the next run, which adopts what this one wrote.
const PASS_DRAIN: Duration = Duration::from_secs(5);

/// Why the audit could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The judge could not be built from the settings.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The metrics and health port could not be bound.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// Signal handlers could not be installed.
    #[error("cannot install the SIGTERM handler: {0}")]
    Signal(std::io::Error),
    /// The API watches ended.
    #[error("the audit's watches ended; restarting the process resumes it")]
    WatchesEnded,
}

impl Args {
    /// The namespaces the audit covers, as admission selects them.
    pub fn audit_scope(&self) -> Scope {
        self.scope.scope(self.judge.excluded_namespaces())
    }

    /// How the audit loop runs.
    pub fn runtime_settings(&self) -> RuntimeSettings {
        RuntimeSettings {
            interval: Duration::from_secs(self.interval_seconds),
            settle: Duration::from_secs(self.settle_seconds),
            flavor: self.report_format,
            cluster_report: self.cluster_report,
            max_results: self.report_max_results,
            exceptions: None,
        }
    }

    /// How the audit judges: admission's deadline, the audit's concurrency.
    pub fn engine_settings(&self) -> EngineSettings {
        EngineSettings {
            deadline: Duration::from_secs(self.judge.timeout_seconds),
            concurrency: self.concurrency,
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

impl Admin for Served {
    fn readiness(&self) -> Result<&'static str, &'static str> {
        if self.judge.ready() {
            Ok("ready")
        } else {
            Err("no policy snapshot in force yet: the audit waits for it")
        }
    }

    fn metrics(&self) -> String {
        self.judge_metrics.snapshot_age.set(
            self.judge
                .snapshot_age()
                .map_or(-1.0, |d: Duration| d.as_secs_f64()),
        );
        exposition(&self.judge_metrics, &self.audit_registry)
    }

    fn registry_keychain(&self) -> Option<Arc<sigil_registry::Keychain>> {
        self.judge.registry_keychain()
    }
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

/// Runs the audit until the process is told to stop (SIGTERM).
pub async fn run(args: Args) -> Result<(), ProgramError> {
    let judge_metrics = Arc::new(Metrics::new());
    let judging = args.judge.build(judge_metrics.clone()).await?;
    if let Some(table) = judging.exceptions.clone() {
        judge_metrics.track_exceptions(table);
    }
    let (judge, source) = match judging.judge {
        Judge::Snapshot { judge, source } => (judge, source),
        Judge::NoSnapshot { .. } => {
            return Err(SetupError::Config(
                "sigil-audit judges with the policy snapshot admission enforces: give \
                 --policy-snapshot-secret NAMESPACE/NAME (or --policy-snapshot-file)"
                    .into(),
            )
            .into());
        }
    };
    let mut kube = judging.kube;
    let outcome = audit(
        &args,
        kube.get("the audit").await,
        judge,
        judging.secrets,
        judge_metrics,
        judging.exceptions,
    )
    .await;
    source.abort();
    outcome
}

async fn audit(
    args: &Args,
    client: Result<kube::Client, SetupError>,
    judge: Arc<PolicyJudge>,
    secrets: sigil_judge::secrets::AnyPullSecrets,
    judge_metrics: Arc<Metrics>,
    exceptions: Option<Arc<sigil_judge::exceptions::ExceptionTable>>,
) -> Result<(), ProgramError> {
    let client = client?;
    let listen = args.metrics_listen;
    let mut audit_registry = Registry::default();
    let audit_metrics = AuditMetrics::new(&mut audit_registry);
    let served = Arc::new(Served {
        judge: judge.clone(),
        judge_metrics: judge_metrics.clone(),
        audit_registry,
    });
    let admin_port = AdminListener::bind(listen, "metrics-listen").await?;
    let metrics_addr = admin_port.local_addr();
    let shutdown = shutdown::on_termination().map_err(ProgramError::Signal)?;
    let serve = admin_port.serve(admin::router(served), shutdown.clone());
    let server = tokio::spawn(async move {
        if let Err(e) = serve.await {
            tracing::warn!(error = %e, "audit metrics server stopped");
        }
    });
    let cache = Arc::new(CachedJudge::new(
        judge.clone(),
        // No tag is resolved: the audit judges the digests that run.
        &args.judge.cache_config(CacheConfig::default().digest_ttl),
        judge_metrics,
    ));
    let auditor = Auditor::new(
        cache,
        Arc::new(secrets),
        args.engine_settings(),
        args.audit_scope(),
    );
    let mut settings = args.runtime_settings();
    settings.exceptions = exceptions;
    tracing::info!(
        %metrics_addr,
        format = ?settings.flavor,
        interval_seconds = settings.interval.as_secs(),
        unenforced = args.scope.unenforced_namespaces,
        "sigil audit starting"
    );
    let audit = async {
        tokio::select! {
            () = snapshot_loaded(&judge) => {}
            () = shutdown.requested() => return,
        }
        let revisions = judge.subscribe();
        let in_force = || judge.in_force();
        crate::runtime::run(
            client,
            auditor,
            revisions,
            in_force,
            audit_metrics,
            settings,
            shutdown.clone(),
        )
        .await;
    };
    let mut audit = std::pin::pin!(audit);
    let outcome = tokio::select! {
        () = &mut audit => {
            if shutdown.is_requested() {
                Ok(())
            } else {
                Err(ProgramError::WatchesEnded)
            }
        }
        () = shutdown.requested() => {
            shutdown::within(PASS_DRAIN, "the audit pass under way", audit).await;
            Ok(())
        }
    };
    if outcome.is_ok() {
        // Stops by itself on the shutdown, within the admin drain bound.
        let _ = server.await;
    } else {
        server.abort();
    }
    tracing::info!("audit stopped");
    outcome
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser as _;

    use super::*;
    use crate::scope::Selection;

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let mut argv = vec!["sigil-audit"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv)
    }

    #[test]
    fn the_audit_needs_no_serving_certificate_and_knows_no_admission_flags() {
        assert!(parse(&["--policy-snapshot-secret=sigil-system/snap"]).is_ok());
        for admission_only in ["--tls-cert=c", "--pin=all", "--key=k.pem", "--audit"] {
            let err = parse(&[admission_only]).unwrap_err();
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{admission_only}: {err}"
            );
        }
    }

    #[test]
    fn audit_flags_become_the_scope_and_loop_settings() {
        let args = parse(&[
            "--namespace=sigil",
            "--exclude-namespace=kube-system",
            "--exclude-namespace=infra",
            "--namespace-selection=opt-out",
            "--unenforced-namespaces",
            "--report-format=wgpolicyk8s",
            "--cluster-report=false",
            "--interval-seconds=600",
            "--settle-seconds=0",
            "--report-max-results=50",
            "--timeout-seconds=7",
        ])
        .unwrap();
        assert_eq!(
            args.audit_scope(),
            Scope {
                selection: Selection::OptOut,
                excluded: vec!["kube-system".into(), "infra".into(), "sigil".into()],
                unenforced: true,
                policy_controller_namespaces: false,
            }
        );
        let s = args.runtime_settings();
        assert_eq!(s.flavor, Flavor::PolicyReport);
        assert!(!s.cluster_report);
        assert_eq!(s.interval, Duration::from_secs(600));
        assert_eq!(s.settle, Duration::ZERO);
        assert_eq!(s.max_results, 50);
        assert_eq!(args.engine_settings().deadline, Duration::from_secs(7));
    }

    #[test]
    fn the_old_audit_prefixed_flags_still_parse_to_the_same_settings() {
        let old = parse(&[
            "--audit-namespace-selection=opt-out",
            "--audit-unenforced-namespaces",
            "--audit-report-format=wgpolicyk8s",
            "--audit-cluster-report=false",
            "--audit-interval-seconds=600",
            "--audit-settle-seconds=0",
            "--audit-report-max-results=50",
            "--audit-concurrency=3",
        ])
        .unwrap();
        let new = parse(&[
            "--namespace-selection=opt-out",
            "--unenforced-namespaces",
            "--report-format=wgpolicyk8s",
            "--cluster-report=false",
            "--interval-seconds=600",
            "--settle-seconds=0",
            "--report-max-results=50",
            "--concurrency=3",
        ])
        .unwrap();
        assert_eq!(old.audit_scope(), new.audit_scope());
        assert_eq!(
            format!("{:?}", old.runtime_settings()),
            format!("{:?}", new.runtime_settings())
        );
        assert_eq!(old.concurrency, new.concurrency);
        let help = <Args as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        assert!(!help.contains("--audit-"), "old names stay hidden: {help}");
    }

    #[test]
    fn audit_defaults_follow_admissions_opt_in_and_write_openreports() {
        let args = parse(&[]).unwrap();
        let scope = args.audit_scope();
        assert_eq!(scope.selection, Selection::OptIn);
        assert!(!scope.unenforced);
        assert!(scope.excluded.contains(&"sigil-system".to_string()));
        let s = args.runtime_settings();
        assert_eq!(s.flavor, Flavor::OpenReports);
        assert!(s.cluster_report);
        assert_eq!(s.interval, Duration::from_secs(6 * 3600));
    }

    #[test]
    fn an_interval_under_a_minute_is_refused_with_the_flag_named() {
        let err = parse(&["--interval-seconds=5"]).unwrap_err();
        assert!(err.to_string().contains("--interval-seconds"), "{err}");
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
