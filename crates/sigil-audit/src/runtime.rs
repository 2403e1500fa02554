//! The in-cluster audit loop: watches pods, namespaces, ReplicaSets and
//! Jobs, follows the policy snapshot's revision, re-verifies on an
//! interval, and after each burst of changes settles judges what changed
//! and writes the reports of the namespaces whose results moved.
//!
//! Where it runs: the `sigil-audit` program ([`crate::program`]), the chart's audit Deployment
//! (`audit.enabled`), a single replica with the Recreate strategy, so
//! exactly one writer owns the reports and admission's replicas stay free
//! of background work. It builds the webhook's judge from the same
//! snapshot Secret with the same flags. Least privilege: get,
//! list, watch on pods, namespaces, replicasets and jobs; get, list, watch
//! on the one snapshot Secret (by name) and, for pull secrets, get on
//! Secrets and ServiceAccounts of the namespaces admission may read them in;
//! list (to adopt an earlier run's reports), create (an apply that
//! creates), patch, delete on its report kinds
//! (`reports`/`clusterreports` or `policyreports`/`clusterpolicyreports`);
//! patch on `clusterimagepolicies/status` (each policy's audit counts, the
//! Pass and Fail columns of `kubectl get cip`); nothing else.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{StreamExt as _, stream};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use sigil_judge::exceptions::ExceptionTable;
use sigil_judge::judge::{ImageJudge, PullSecretSource};
use sigil_judge::policy_judge::InForce;
use sigil_runtime::shutdown::Shutdown;
use tokio::sync::watch;

use crate::auditor::Auditor;
use crate::engine::EvalStats;
use crate::metrics::AuditMetrics;
use crate::report::{self, Flavor, WriteError, Writer};

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// Every image is judged again this often (the verdict cache's TTL
    /// still applies).
    pub interval: Duration,
    /// Changes are gathered this long before a pass, so a rollout of many
    /// pods costs one pass.
    pub settle: Duration,
    /// The report API.
    pub flavor: Flavor,
    /// Also write the cluster-wide report.
    pub cluster_report: bool,
    /// Results per report part.
    pub max_results: usize,
    /// The ImagePolicyExceptions the judge enforces: every image is judged
    /// again when they change and when one expires, so reports follow
    /// admission.
    pub exceptions: Option<Arc<ExceptionTable>>,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(6 * 3600),
            settle: Duration::from_secs(5),
            flavor: Flavor::OpenReports,
            cluster_report: true,
            max_results: report::DEFAULT_MAX_RESULTS,
            exceptions: None,
        }
    }
}

/// What one [`pass`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassStats {
    /// The judging.
    pub eval: EvalStats,
    /// Report parts applied.
    pub applied: usize,
    /// Report parts deleted.
    pub deleted: usize,
    /// ClusterImagePolicy statuses written (their audit counts changed).
    pub policy_statuses: usize,
}

fn now() -> (i64, f64) {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        since.as_secs_f64(),
    )
}

/// One audit pass: judges what waits, writes the reports of the namespaces
/// whose results changed (and the cluster report), updates the metrics. A
/// failed write puts its namespace back, so the next pass retries it.
pub async fn pass<J: ImageJudge, S: PullSecretSource>(
    auditor: &mut Auditor<J, S>,
    writer: &mut Writer,
    metrics: &AuditMetrics,
    settings: &RuntimeSettings,
) -> Result<PassStats, WriteError> {
    let started = std::time::Instant::now();
    let (seconds, unix) = now();
    let mut stats = PassStats {
        eval: auditor.run().await,
        ..PassStats::default()
    };
    let dirty = auditor.take_dirty();
    let mut failed: Option<WriteError> = None;
    let mut retry = BTreeSet::new();
    for ns in &dirty {
        let findings = auditor.findings(Some(ns));
        metrics.set_namespace(ns, &findings);
        let parts = report::namespace_parts(ns, &findings, settings.max_results);
        match writer.write(Some(ns), &parts, seconds).await {
            Ok(w) => {
                stats.applied += w.applied;
                stats.deleted += w.deleted;
            }
            Err(e) => {
                retry.insert(ns.clone());
                failed.get_or_insert(e);
            }
        }
    }
    if settings.cluster_report && !dirty.is_empty() {
        let all = auditor.findings(None);
        match writer
            .write(None, &[report::cluster_part(&all)], seconds)
            .await
        {
            Ok(w) => stats.applied += w.applied,
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    let policies = auditor.policy_names();
    if !dirty.is_empty() || !writer.policy_status_covers(&policies) {
        let counts = report::policy_counts(&auditor.findings(None), &policies);
        match writer.write_policy_status(&counts).await {
            Ok(n) => stats.policy_statuses = n,
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    for ns in retry {
        auditor.mark_dirty(&ns);
    }
    metrics.wrote(stats.applied, stats.deleted);
    metrics.pass_done(
        started.elapsed().as_secs_f64(),
        failed.is_none(),
        stats.eval.judged,
        unix,
    );
    match failed {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

// Boxed: the events carry whole objects of very different sizes.
enum Change {
    Pod(Box<watcher::Event<Pod>>),
    Namespace(Box<watcher::Event<Namespace>>),
    ReplicaSet(Box<watcher::Event<ReplicaSet>>),
    Job(Box<watcher::Event<Job>>),
}

fn apply<J: ImageJudge, S: PullSecretSource>(auditor: &mut Auditor<J, S>, change: Change) {
    use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
    match change {
        Change::Pod(e) => match *e {
            Apply(p) | InitApply(p) => auditor.pod_applied(&p),
            Delete(p) => auditor.pod_deleted(
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default(),
            ),
            // A relist: pods deleted while the watch was down are those
            // missing from it once it is done.
            Init => auditor.relist_started(),
            InitDone => auditor.relist_done(),
        },
        Change::Namespace(e) => match *e {
            Apply(n) | InitApply(n) => {
                if let Some(name) = &n.metadata.name {
                    auditor.namespace_applied(name, n.metadata.labels.clone().unwrap_or_default());
                }
            }
            Delete(n) => {
                if let Some(name) = &n.metadata.name {
                    auditor.namespace_deleted(name);
                }
            }
            Init | InitDone => {}
        },
        Change::ReplicaSet(e) => match *e {
            Apply(o) | InitApply(o) => auditor.owner_applied(&o.metadata),
            Delete(o) => auditor.owner_deleted(&o.metadata),
            Init | InitDone => {}
        },
        Change::Job(e) => match *e {
            Apply(o) | InitApply(o) => auditor.owner_applied(&o.metadata),
            Delete(o) => auditor.owner_deleted(&o.metadata),
            Init | InitDone => {}
        },
    }
}

/// Runs the audit until `shutdown` is requested (a pass under way is
/// finished first) or the watches end: `revisions` is the judge's revision
/// channel, `in_force` reads the policies in force after a change.
pub async fn run<J: ImageJudge, S: PullSecretSource>(
    client: kube::Client,
    mut auditor: Auditor<J, S>,
    mut revisions: watch::Receiver<u64>,
    in_force: impl Fn() -> Option<InForce>,
    metrics: AuditMetrics,
    settings: RuntimeSettings,
    shutdown: Shutdown,
) {
    let config = watcher::Config::default();
    let pods = watcher(Api::<Pod>::all(client.clone()), config.clone())
        .default_backoff()
        .map(|e| e.map(|x| Change::Pod(Box::new(x))));
    let namespaces = watcher(Api::<Namespace>::all(client.clone()), config.clone())
        .default_backoff()
        .map(|e| e.map(|x| Change::Namespace(Box::new(x))));
    let replica_sets = watcher(Api::<ReplicaSet>::all(client.clone()), config.clone())
        .default_backoff()
        .map(|e| e.map(|x| Change::ReplicaSet(Box::new(x))));
    let jobs = watcher(Api::<Job>::all(client.clone()), config)
        .default_backoff()
        .map(|e| e.map(|x| Change::Job(Box::new(x))));
    let mut changes = stream::select_all([
        pods.boxed(),
        namespaces.boxed(),
        replica_sets.boxed(),
        jobs.boxed(),
    ]);
    let mut writer = Writer::new(client, settings.flavor);
    // A restarted audit owns what the previous one wrote: namespaces whose
    // pods went away meanwhile get their reports deleted by the first pass.
    match writer.adopt_written().await {
        Ok(namespaces) => {
            for ns in &namespaces {
                auditor.mark_dirty(ns);
            }
            tracing::info!(
                namespaces = namespaces.len(),
                "adopted the reports of an earlier run"
            );
        }
        Err(e) => tracing::warn!(error = %e, "stale reports of an earlier run may remain"),
    }
    let mut interval = tokio::time::interval(settings.interval.max(Duration::from_secs(60)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut due: Option<tokio::time::Instant> = None;
    if let Some(f) = in_force() {
        auditor.snapshot_applied(f);
    }
    let mut exception_changes = settings.exceptions.as_ref().map(|t| t.subscribe());
    loop {
        let settle = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let exceptions_moved = async {
            match (&settings.exceptions, exception_changes.as_mut()) {
                (Some(table), Some(changes)) => {
                    let now = time::OffsetDateTime::now_utc();
                    let expiry = table.next_expiry(now).map(|t| {
                        // Just past the instant, so the judge sees it expired.
                        let wait = (t - now).whole_milliseconds().max(0) + 1_000;
                        tokio::time::Instant::now()
                            + Duration::from_millis(u64::try_from(wait).unwrap_or(u64::MAX))
                    });
                    tokio::select! {
                        changed = changes.changed() => {
                            if changed.is_err() {
                                std::future::pending::<()>().await;
                            }
                        }
                        () = async {
                            match expiry {
                                Some(at) => tokio::time::sleep_until(at).await,
                                None => std::future::pending().await,
                            }
                        } => {}
                    }
                }
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.requested() => return,
            change = changes.next() => match change {
                Some(Ok(c)) => {
                    apply(&mut auditor, c);
                    due.get_or_insert_with(|| tokio::time::Instant::now() + settings.settle);
                }
                Some(Err(e)) => tracing::warn!(error = %e, "watch failed; retried with backoff"),
                None => return,
            },
            changed = revisions.changed() => {
                if changed.is_err() {
                    return;
                }
                if let Some(f) = in_force() {
                    let marked = auditor.snapshot_applied(f);
                    tracing::info!(marked, "policy snapshot changed: re-judging the images it can affect");
                    due.get_or_insert_with(|| tokio::time::Instant::now() + settings.settle);
                }
            },
            () = exceptions_moved => {
                let marked = auditor.exceptions_changed();
                tracing::info!(marked, "exceptions changed or one expired: judging every image again");
                due.get_or_insert_with(|| tokio::time::Instant::now() + settings.settle);
            },
            _ = interval.tick() => {
                let marked = auditor.interval_elapsed();
                tracing::debug!(marked, "re-verification interval");
                due.get_or_insert_with(tokio::time::Instant::now);
            },
            () = settle => {
                // No new pass once the shutdown began (both may be ready).
                if shutdown.is_requested() {
                    return;
                }
                due = None;
                match pass(&mut auditor, &mut writer, &metrics, &settings).await {
                    Ok(s) => tracing::info!(
                        judged = s.eval.judged,
                        containers = s.eval.containers,
                        applied = s.applied,
                        deleted = s.deleted,
                        policy_statuses = s.policy_statuses,
                        "audit pass done"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "audit pass could not write every report; retrying");
                        due = Some(tokio::time::Instant::now() + settings.settle.max(Duration::from_secs(10)));
                    }
                }
            },
        }
    }
}
