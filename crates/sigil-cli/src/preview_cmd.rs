//! `sigil policy preview`: what ClusterImagePolicy files not yet applied
//! would deny among what runs in the current cluster. The files alone are
//! judged (not the cluster's policies: `sigil audit` answers for those),
//! each as if it were enforced, over the running digests of the pods of
//! the audited namespaces, through `sigil audit`'s path
//! ([`crate::audit_cmd::judge_running`]: the webhook's judge and the
//! audit's engine), so a preview and the later admissions give the same
//! words. It reads the cluster and writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Args;
use serde::Serialize;
use sigil_api::snapshot::SnapshotPolicy;
use sigil_audit::finding::{Finding, NO_MATCH_POLICY, Outcome, RUNNING_DIGEST_POLICY};
use sigil_audit::print;
use sigil_judge::exceptions::ExceptionTable;
use sigil_judge::policy_judge::PolicyJudge;
use sigil_policy::NoMatchPolicy;
use sigil_verifier::trust::TrustedRoot;

use crate::audit_cmd::{ClusterArgs, Output, files_snapshot, judge_running, kube_client};
use crate::verdict::Verdict;

/// `sigil policy preview`.
#[derive(Args)]
pub(crate) struct PreviewArgs {
    /// ClusterImagePolicy and ImagePolicy YAML files to preview (other kinds
    /// in them are skipped); each policy is judged as if its mode were
    /// enforce, an ImagePolicy in its namespace only.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// A TrustRoot the files name (trustRootRef), as NAME=trusted_root.json.
    #[arg(long = "trust-root", value_name = "NAME=FILE")]
    trust_roots: Vec<String>,
    /// The --trust-root that is the cluster's default trust root.
    #[arg(long, value_name = "NAME", requires = "trust_roots")]
    default_trust_root: Option<String>,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Output,
    /// Exit with status 4 when the policies would deny a running container
    /// in a namespace admission guards (for CI); without it the exit
    /// status is 0 whatever they would deny (1 on errors).
    #[arg(long)]
    fail_on_deny: bool,
    /// A namespace where the files' ImagePolicyExceptions count, as the
    /// chart's exceptions.namespaces (repeatable; `*`, the default: every
    /// namespace). An exception waives the policies it names for the
    /// workloads and images it names until its expiresAt, as at admission.
    #[arg(
        long = "exception-namespace",
        value_name = "NAMESPACE",
        default_value = "*"
    )]
    exception_namespaces: Vec<String>,
    /// How long after its creation an exception may count at most, as the
    /// chart's exceptions.maxDuration.
    #[arg(long, value_name = "DURATION", default_value = "168h")]
    exception_max_duration: String,
}

/// A workload with containers the policies would deny.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeniedWorkload {
    /// Its namespace.
    pub(crate) namespace: String,
    /// `deployment/web`, `pod/x`, …
    pub(crate) workload: String,
    /// Its containers (`list/name`) that would be denied.
    pub(crate) containers: Vec<String>,
    /// Its pods running them.
    pub(crate) pods: usize,
}

/// What a preview comes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Summary {
    /// The policies previewed.
    pub(crate) policies: Vec<String>,
    /// Distinct running images (image at its digest) the policies judged.
    pub(crate) images_checked: usize,
    /// Running containers (per workload and digest) the policies judged.
    pub(crate) containers_checked: usize,
    /// Of those, the ones admission would deny (a `fail` or `error` of a
    /// previewed policy, in a namespace admission guards).
    pub(crate) would_deny: usize,
    /// Of `would_deny`, those that failed only for want of an answer (a
    /// registry did not answer): admission denies them too.
    pub(crate) unverifiable: usize,
    /// Containers whose running digest is unknown: not judged.
    pub(crate) unknown_digest: usize,
    /// Would-deny containers per namespace.
    pub(crate) by_namespace: BTreeMap<String, usize>,
    /// The workloads they belong to.
    pub(crate) workloads: Vec<DeniedWorkload>,
}

/// What identifies a running container across policies.
type ContainerKey = (String, String, String, String, String);

fn container_key(f: &Finding) -> ContainerKey {
    (
        f.namespace.clone(),
        format!(
            "{}/{}",
            f.workload.kind.to_ascii_lowercase(),
            f.workload.name
        ),
        format!("{}/{}", f.list.label(), f.container),
        f.image.clone(),
        f.digest.clone(),
    )
}

/// The findings a preview shows: every result but the `noMatchPolicy`
/// pseudo-policy's (images the previewed policies do not select).
pub(crate) fn shown(findings: Vec<Finding>) -> Vec<Finding> {
    findings
        .into_iter()
        .filter(|f| f.policy != NO_MATCH_POLICY)
        .collect()
}

/// Sums up the `findings` of `policies`.
pub(crate) fn summarize(policies: Vec<String>, findings: &[Finding]) -> Summary {
    let mut images = BTreeSet::new();
    let mut containers = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    // Per would-deny container: whether some policy failed outright (not
    // only for want of an answer), and its pods.
    let mut denied: BTreeMap<ContainerKey, (bool, usize)> = BTreeMap::new();
    for f in findings {
        let key = container_key(f);
        if f.policy == RUNNING_DIGEST_POLICY {
            unknown.insert(key);
            continue;
        }
        images.insert((f.image.clone(), f.digest.clone()));
        containers.insert(key.clone());
        if f.enforced && matches!(f.outcome, Outcome::Fail | Outcome::Error) {
            let entry = denied.entry(key).or_insert((false, f.pods));
            entry.0 |= f.outcome == Outcome::Fail;
            entry.1 = entry.1.max(f.pods);
        }
    }
    let mut by_namespace = BTreeMap::new();
    let mut workloads: BTreeMap<(String, String), DeniedWorkload> = BTreeMap::new();
    for ((namespace, workload, container, _, _), (_, pods)) in &denied {
        *by_namespace.entry(namespace.clone()).or_insert(0) += 1;
        let w = workloads
            .entry((namespace.clone(), workload.clone()))
            .or_insert_with(|| DeniedWorkload {
                namespace: namespace.clone(),
                workload: workload.clone(),
                containers: Vec::new(),
                pods: 0,
            });
        if !w.containers.contains(container) {
            w.containers.push(container.clone());
        }
        w.pods = w.pods.max(*pods);
    }
    Summary {
        policies,
        images_checked: images.len(),
        containers_checked: containers.len(),
        would_deny: denied.len(),
        unverifiable: denied.values().filter(|(failed, _)| !failed).count(),
        unknown_digest: unknown.len(),
        by_namespace,
        workloads: workloads.into_values().collect(),
    }
}

/// The summary as lines under the table.
pub(crate) fn summary_text(s: &Summary) -> String {
    let mut out = format!(
        "\npreview of {} (each judged as if enforced): {} image(s) checked in {} container(s); \
         {} container(s) would be denied",
        s.policies.join(", "),
        s.images_checked,
        s.containers_checked,
        s.would_deny
    );
    if s.unverifiable > 0 {
        out.push_str(&format!(
            " ({} of them only because a registry did not answer)",
            s.unverifiable
        ));
    }
    out.push('\n');
    if s.unknown_digest > 0 {
        out.push_str(&format!(
            "{} container(s) not judged: their running digest is unknown\n",
            s.unknown_digest
        ));
    }
    for (namespace, n) in &s.by_namespace {
        out.push_str(&format!(
            "namespace {namespace}: {n} container(s) would be denied\n"
        ));
        for w in s.workloads.iter().filter(|w| &w.namespace == namespace) {
            out.push_str(&format!(
                "  {} ({} pod(s)): {}\n",
                w.workload,
                w.pods,
                w.containers.join(", ")
            ));
        }
    }
    out
}

/// `judge` enforcing the ImagePolicyExceptions of the files, checked with
/// the flags' rules as the cluster would check them.
fn with_file_exceptions(judge: PolicyJudge, args: &PreviewArgs) -> Result<PolicyJudge> {
    let max = sigil_compile::exception::parse_duration(&args.exception_max_duration)
        .map_err(|e| anyhow::anyhow!("--exception-max-duration: {e}"))?;
    let rules = sigil_compile::exception::ExceptionRules::new(&args.exception_namespaces, max)
        .map_err(|e| anyhow::anyhow!("--exception-max-duration: {e}"))?;
    let mut objects = Vec::new();
    for path in &args.files {
        objects.extend(crate::policy_files::exception_documents(path)?);
    }
    if objects.is_empty() {
        return Ok(judge);
    }
    let table = ExceptionTable::new(rules);
    table.replace(&objects, time::OffsetDateTime::now_utc());
    if let Some((name, why)) = table.refused().into_iter().next() {
        anyhow::bail!("ImagePolicyException {name}: {why}");
    }
    Ok(judge.with_exceptions(Arc::new(table)))
}

/// Runs `sigil policy preview`.
pub(crate) fn run(args: &PreviewArgs, public_good: TrustedRoot) -> Result<Verdict> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(preview(args, public_good))
}

async fn preview(args: &PreviewArgs, public_good: TrustedRoot) -> Result<Verdict> {
    let mut snapshot = files_snapshot(
        &args.files,
        &args.trust_roots,
        args.default_trust_root.as_deref(),
        "files to preview",
    )?;
    // What a policy would deny is what it denies once enforced, whatever
    // mode the file gives it for now.
    for p in &mut snapshot.policies {
        p.spec.mode = Some("enforce".into());
    }
    let policies: Vec<String> = snapshot.policies.iter().map(SnapshotPolicy::key).collect();
    let client = kube_client(args.cluster.context.as_deref()).await?;
    // Images the files do not select are none of the preview's business.
    let judge = PolicyJudge::new(
        args.cluster.client_config()?,
        public_good,
        "embedded",
        NoMatchPolicy::Allow,
    )
    .context("cannot set up the policy judge")?;
    let judge = with_file_exceptions(judge, args)?;
    judge.apply(&snapshot).with_context(|| {
        format!(
            "the files to preview do not load ({}); `sigil policy lint` says what to fix",
            args.files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let findings = shown(
        judge_running(
            &client,
            &args.cluster,
            Arc::new(judge),
            args.cluster.scope(),
        )
        .await?,
    );
    let summary = summarize(policies, &findings);
    match args.output {
        Output::Table => print!("{}{}", print::table(&findings), summary_text(&summary)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "summary": summary,
                "results": findings,
            }))
            .context("cannot print the preview")?
        ),
    }
    Ok(if args.fail_on_deny && summary.would_deny > 0 {
        Verdict::WouldDeny
    } else {
        Verdict::Allow
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use sigil_audit::workload::{ContainerList, Workload};

    use super::*;

    fn finding(workload: &str, container: &str, policy: &str, outcome: Outcome) -> Finding {
        Finding {
            namespace: "shop".into(),
            workload: Workload {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: workload.into(),
                uid: format!("uid-{workload}"),
            },
            list: ContainerList::Main,
            container: container.into(),
            image: format!("r.example/{container}:1"),
            digest: format!("sha256:{container}"),
            policy: policy.into(),
            mode: "enforce".into(),
            authorities: Vec::new(),
            outcome,
            message: String::new(),
            enforced: true,
            pods: 2,
        }
    }

    #[test]
    fn the_summary_counts_each_denied_container_once_by_namespace_and_workload() {
        let mut unguarded = finding("batch", "job", "signed", Outcome::Fail);
        unguarded.namespace = "lab".into();
        unguarded.enforced = false;
        let findings = vec![
            finding("web", "app", "signed", Outcome::Fail),
            finding("web", "app", "attested", Outcome::Fail),
            finding("web", "proxy", "signed", Outcome::Pass),
            finding("api", "api", "signed", Outcome::Error),
            finding("api", "sidecar", RUNNING_DIGEST_POLICY, Outcome::Error),
            unguarded,
        ];
        let s = summarize(vec!["signed".into(), "attested".into()], &findings);
        assert_eq!(s.images_checked, 4);
        assert_eq!(s.containers_checked, 4);
        assert_eq!(s.would_deny, 2, "{s:?}");
        assert_eq!(s.unverifiable, 1, "api only failed for want of an answer");
        assert_eq!(s.unknown_digest, 1);
        assert_eq!(s.by_namespace, BTreeMap::from([("shop".to_string(), 2)]));
        let names: Vec<&str> = s.workloads.iter().map(|w| w.workload.as_str()).collect();
        assert_eq!(names, ["deployment/api", "deployment/web"]);
        assert_eq!(s.workloads[1].containers, ["containers/app"]);
        let text = summary_text(&s);
        assert!(
            text.contains("4 image(s) checked in 4 container(s); 2 container(s) would be denied (1 of them only because a registry did not answer)"),
            "{text}"
        );
        assert!(
            text.contains("  deployment/web (2 pod(s)): containers/app\n"),
            "{text}"
        );
    }

    #[test]
    fn images_the_previewed_policies_do_not_select_are_not_shown() {
        let findings = shown(vec![
            finding("web", "app", NO_MATCH_POLICY, Outcome::Skip),
            finding("web", "app", "signed", Outcome::Pass),
        ]);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].policy, "signed");
        let s = summarize(vec!["signed".into()], &findings);
        assert_eq!((s.containers_checked, s.would_deny), (1, 0));
        assert!(s.workloads.is_empty());
    }
}
