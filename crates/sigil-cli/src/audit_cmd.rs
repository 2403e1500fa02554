//! `sigil audit`: what runs in a cluster, judged by the cluster's policies
//! (the policy snapshot the webhook enforces) or by local ClusterImagePolicy
//! files, through the webhook's judge and verdict cache (`sigil-judge`) and
//! the in-cluster audit's engine (`sigil-audit`), so the answer is the one
//! admission and the reports give. It reads the cluster (kubeconfig like
//! kubectl) and writes nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::{Args, ValueEnum};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use sigil_api::snapshot::{self, PolicySnapshot, SECRET_NAME, SnapshotPolicy, SnapshotTrustRoot};
use sigil_audit::auditor::Auditor;
use sigil_audit::engine::EngineSettings;
use sigil_audit::finding::Finding;
use sigil_audit::installed::{self, Installed};
use sigil_audit::print;
use sigil_audit::scope::{Scope, ScopeArgs};
use sigil_judge::cache::{CacheConfig, CachedJudge, NoObserver};
use sigil_judge::policy_judge::PolicyJudge;
use sigil_judge::secrets::{AnyPullSecrets, KubePullSecrets, NoPullSecrets};
use sigil_policy::NoMatchPolicy;
use sigil_registry::{ClientConfig, Limits};
use sigil_verifier::trust::TrustedRoot;

use crate::policy_files::{PolicyDocument, policy_documents, read};
use crate::verdict::Verdict;

/// How long a pod's pull secrets, once read, serve other pods naming the
/// same ones: the whole audit, which reads each set once.
const PULL_SECRET_TTL: Duration = Duration::from_secs(300);

/// The Deployments (and webhook configuration) the chart installs.
const AUDIT_DEPLOYMENT: &str = "sigil-audit";
const WEBHOOK: &str = "sigil-webhook";

/// How `sigil audit` prints.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Output {
    /// An aligned table with a summary line.
    Table,
    /// The results as a JSON array.
    Json,
}

/// What an image no policy selects gets.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum NoMatch {
    Deny,
    Warn,
    Allow,
}

/// `sigil audit`.
#[derive(Args)]
pub(crate) struct AuditArgs {
    /// ClusterImagePolicy and ImagePolicy YAML files to judge with ("what
    /// breaks if I enforce these"); without, the cluster's policy snapshot is
    /// used.
    #[arg(long = "policy", value_name = "FILE")]
    policies: Vec<PathBuf>,
    /// A TrustRoot the --policy files name, as NAME=trusted_root.json.
    #[arg(long = "trust-root", value_name = "NAME=FILE", requires = "policies")]
    trust_roots: Vec<String>,
    /// The --trust-root that is the cluster's default trust root.
    #[arg(long, value_name = "NAME", requires = "trust_roots")]
    default_trust_root: Option<String>,
    /// Judge as the installed sigil does: its policy snapshot and the
    /// settings its chart gave the audit (or, without the audit, the
    /// webhook): noMatchPolicy, namespaceSelection, the excluded
    /// namespaces, audit.unenforcedNamespaces. Needs `get` on Deployments
    /// in --sigil-namespace (and on ValidatingWebhookConfigurations without
    /// the audit).
    #[arg(long, conflicts_with_all = ["policies", "no_match", "namespace_selection", "excluded"])]
    from_cluster: bool,
    /// What an image no policy selects gets (the chart's noMatchPolicy;
    /// --from-cluster reads the installed value).
    #[arg(long, value_enum, default_value = "deny")]
    no_match: NoMatch,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Output,
}

/// What `sigil audit` and `sigil policy preview` share: where the cluster
/// and sigil are, which namespaces count, how registries are reached.
#[derive(Args)]
pub(crate) struct ClusterArgs {
    /// The namespace sigil runs in (its policy snapshot Secret is there;
    /// its pods are never audited).
    #[arg(long, default_value = "sigil-system")]
    pub(crate) sigil_namespace: String,
    /// Which namespaces are audited: --namespace-selection and
    /// --unenforced-namespaces, named as in sigil-audit and the chart.
    #[command(flatten)]
    pub(crate) scope: ScopeArgs,
    /// A namespace admission never acts in (repeatable; kube-system and
    /// --sigil-namespace always are).
    #[arg(long = "exclude-namespace", value_name = "NAME")]
    pub(crate) excluded: Vec<String>,
    /// The kubeconfig context (default: the current one).
    #[arg(long)]
    pub(crate) context: Option<String>,
    /// Docker config with registry credentials (default: $DOCKER_CONFIG or
    /// ~/.docker), used besides each pod's pull secrets.
    #[arg(long, value_name = "FILE")]
    pub(crate) docker_config: Option<PathBuf>,
    /// Do not read pods' imagePullSecrets (or their service accounts') and
    /// policies' signaturePullSecrets: images are fetched with the docker
    /// config only. By default they are read as the webhook reads them,
    /// which needs `get` on secrets and serviceaccounts.
    #[arg(long)]
    pub(crate) no_pull_secrets: bool,
    /// Talk plain http to this registry host (repeatable).
    #[arg(long, value_name = "HOST")]
    pub(crate) insecure_registry: Vec<String>,
    /// Seconds one image's verification may take.
    #[arg(long, default_value_t = 30)]
    pub(crate) timeout: u64,
}

impl ClusterArgs {
    /// The registry client settings: the docker config's credentials,
    /// --insecure-registry, --timeout.
    pub(crate) fn client_config(&self) -> Result<ClientConfig> {
        let (credentials, _source) =
            crate::verify_image::credentials(self.docker_config.as_deref())?;
        Ok(ClientConfig {
            credentials,
            insecure_hosts: self.insecure_registry.clone(),
            keychain: crate::verify_image::laptop_keychain(
                &self.insecure_registry,
                Duration::from_secs(self.timeout.max(1)),
            )?,
            limits: Limits {
                total_deadline: Duration::from_secs(self.timeout.max(1)),
                ..Limits::default()
            },
            ..ClientConfig::default()
        })
    }

    /// The namespaces audited, from the flags.
    pub(crate) fn scope(&self) -> Scope {
        let mut excluded = vec!["kube-system".to_owned(), self.sigil_namespace.clone()];
        excluded.extend(self.excluded.iter().cloned());
        self.scope.scope(excluded)
    }
}

/// A snapshot of the --policy files, as the controller would publish it.
fn local_snapshot(args: &AuditArgs) -> Result<PolicySnapshot> {
    files_snapshot(
        &args.policies,
        &args.trust_roots,
        args.default_trust_root.as_deref(),
        "--policy files",
    )
}

/// A snapshot of the ClusterImagePolicies and ImagePolicies in `files` with
/// the TrustRoots
/// `trust_roots` (`NAME=trusted_root.json`), as the controller would
/// publish it; `what` names the files in errors.
pub(crate) fn files_snapshot(
    files: &[PathBuf],
    trust_roots_args: &[String],
    default_trust_root: Option<&str>,
    what: &str,
) -> Result<PolicySnapshot> {
    let mut policies = Vec::new();
    for path in files {
        for PolicyDocument {
            kind,
            name,
            namespace,
            spec,
        } in policy_documents(path)?
        {
            if name.is_empty() {
                bail!("{}: a {kind} has no metadata.name", path.display());
            }
            policies.push(SnapshotPolicy {
                name,
                namespace: namespace.unwrap_or_default(),
                spec,
                ..SnapshotPolicy::default()
            });
        }
    }
    if policies.is_empty() {
        bail!("no ClusterImagePolicy or ImagePolicy found in the {what}");
    }
    let mut trust_roots = Vec::new();
    for spec in trust_roots_args {
        let (name, file) = spec.split_once('=').with_context(|| {
            format!(
                "--trust-root {spec}: expected NAME=FILE (a TrustRoot name and a trusted_root.json)"
            )
        })?;
        trust_roots.push(SnapshotTrustRoot {
            name: name.to_owned(),
            generation: 1,
            trusted_root_json: read(Path::new(file))?,
            default: default_trust_root == Some(name),
        });
    }
    if let Some(name) = default_trust_root
        && !trust_roots.iter().any(|t| t.name == name)
    {
        bail!("--default-trust-root {name}: no --trust-root {name}=FILE is given");
    }
    Ok(PolicySnapshot {
        api_version: snapshot::API_VERSION.to_owned(),
        revision: 1,
        policies,
        trust_roots,
        ..PolicySnapshot::default()
    })
}

/// The policy snapshot the webhook enforces, from the controller's Secrets.
async fn cluster_snapshot(client: &kube::Client, namespace: &str) -> Result<PolicySnapshot> {
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
    let secret = secrets.get(SECRET_NAME).await.with_context(|| {
        format!(
            "cannot read the policy snapshot Secret {namespace}/{SECRET_NAME}; give \
             --sigil-namespace where sigil runs, a context that may read it, or judge with \
             local --policy files"
        )
    })?;
    sigil_judge::snapshot_source::load_secret(&secrets, &secret)
        .await
        .with_context(|| {
            format!("cannot read the policy snapshot in Secret {namespace}/{SECRET_NAME}")
        })
}

/// The settings the chart gave the installed audit (Deployment
/// `sigil-audit`) or, when the audit does not run, the webhook (Deployment
/// and ValidatingWebhookConfiguration `sigil-webhook`).
async fn installed_settings(client: &kube::Client, namespace: &str) -> Result<Installed> {
    let deployments: kube::Api<Deployment> = kube::Api::namespaced(client.clone(), namespace);
    let args_of = |d: &Deployment| -> Vec<String> {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.containers.first())
            .and_then(|c| c.args.clone())
            .unwrap_or_default()
    };
    let audit = deployments
        .get_opt(AUDIT_DEPLOYMENT)
        .await
        .with_context(|| format!("cannot read Deployment {namespace}/{AUDIT_DEPLOYMENT}; give a context that may get Deployments there, or the settings as flags instead of --from-cluster"))?;
    if let Some(audit) = audit {
        return installed::from_audit_args(&args_of(&audit)).with_context(|| {
            format!("the arguments of Deployment {namespace}/{AUDIT_DEPLOYMENT} do not parse as sigil-audit's")
        });
    }
    let webhook = deployments
        .get_opt(WEBHOOK)
        .await
        .with_context(|| format!("cannot read Deployment {namespace}/{WEBHOOK}"))?
        .with_context(|| {
            format!(
                "neither Deployment {namespace}/{AUDIT_DEPLOYMENT} nor {namespace}/{WEBHOOK} exists: \
                 is sigil installed in {namespace}? Give --sigil-namespace, or the settings as flags"
            )
        })?;
    let configs: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client.clone());
    let config = configs.get(WEBHOOK).await.with_context(|| {
        format!("cannot read ValidatingWebhookConfiguration {WEBHOOK} (its namespaceSelector is the namespace selection)")
    })?;
    let selector = config
        .webhooks
        .as_deref()
        .and_then(|w| w.first())
        .and_then(|w| w.namespace_selector.as_ref());
    let selection = selector.and_then(installed::selection_of).with_context(|| {
        format!(
            "the namespaceSelector of ValidatingWebhookConfiguration {WEBHOOK} is not one the chart \
             renders; give --namespace-selection and the other settings as flags"
        )
    })?;
    let policy_controller_namespaces = config
        .webhooks
        .iter()
        .flatten()
        .filter_map(|w| w.namespace_selector.as_ref())
        .any(installed::selects_policy_controller_namespaces);
    installed::from_webhook_args(&args_of(&webhook), selection, policy_controller_namespaces)
        .with_context(|| {
            format!(
                "the arguments of Deployment {namespace}/{WEBHOOK} do not parse as sigil-webhook's"
            )
        })
}

pub(crate) async fn kube_client(context: Option<&str>) -> Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let config = match kube::Config::from_kubeconfig(&options).await {
        Ok(c) => c,
        Err(_) if context.is_none() => kube::Config::infer()
            .await
            .context("no kubeconfig (set KUBECONFIG or ~/.kube/config) and not in a cluster")?,
        Err(e) => return Err(e).context("cannot load the kubeconfig context"),
    };
    kube::Client::try_from(config).context("cannot create a Kubernetes client")
}

/// Judges what runs in the namespaces of `scope` with `judge` (its
/// snapshot applied) through the audit's engine: the findings `sigil audit`
/// prints and `sigil policy preview` sums up. Reads the cluster, writes
/// nothing.
pub(crate) async fn judge_running(
    client: &kube::Client,
    cluster: &ClusterArgs,
    judge: Arc<PolicyJudge>,
    scope: Scope,
) -> Result<Vec<Finding>> {
    let in_force = judge
        .in_force()
        .context("no policy snapshot is in force after loading one")?;
    let cache = Arc::new(CachedJudge::new(
        judge,
        &CacheConfig::default(),
        Arc::new(NoObserver),
    ));
    let settings = EngineSettings {
        deadline: Duration::from_secs(cluster.timeout.max(1)),
        ..EngineSettings::default()
    };
    let secrets = if cluster.no_pull_secrets {
        AnyPullSecrets::None(NoPullSecrets)
    } else {
        AnyPullSecrets::Kube(Box::new(KubePullSecrets::new(
            client.clone(),
            &cluster.sigil_namespace,
            PULL_SECRET_TTL,
        )))
    };
    let mut auditor = Auditor::new(cache, Arc::new(secrets), settings, scope);
    auditor.snapshot_applied(in_force);
    sigil_audit::cluster::read_cluster(client, &mut auditor).await?;
    auditor.run().await;
    Ok(auditor.findings(None))
}

/// Runs `sigil audit`: exit 0 when nothing enforced would be denied, 1
/// when something would.
pub(crate) fn run(args: &AuditArgs, public_good: TrustedRoot) -> Result<Verdict> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(audit(args, public_good))
}

async fn audit(args: &AuditArgs, public_good: TrustedRoot) -> Result<Verdict> {
    let cluster = &args.cluster;
    let client = kube_client(cluster.context.as_deref()).await?;
    let base = cluster.client_config()?;
    let installed = if args.from_cluster {
        let installed = installed_settings(&client, &cluster.sigil_namespace).await?;
        eprintln!(
            "settings of the installed sigil: noMatchPolicy {:?}, namespaceSelection {:?}, \
             excluded namespaces {}, unenforced namespaces {}",
            installed.no_match,
            installed.scope.selection,
            installed.scope.excluded.join(","),
            if installed.scope.unenforced || cluster.scope.unenforced_namespaces {
                "audited"
            } else {
                "not audited"
            }
        );
        Some(installed)
    } else {
        None
    };
    let no_match = match (&installed, args.no_match) {
        (Some(installed), _) => installed.no_match,
        (None, NoMatch::Deny) => NoMatchPolicy::Deny,
        (None, NoMatch::Warn) => NoMatchPolicy::Warn,
        (None, NoMatch::Allow) => NoMatchPolicy::Allow,
    };
    let judge = Arc::new(
        PolicyJudge::new(base, public_good, "embedded", no_match)
            .context("cannot set up the policy judge")?,
    );
    if args.policies.is_empty() {
        let snapshot = cluster_snapshot(&client, &cluster.sigil_namespace).await?;
        judge
            .apply(&snapshot)
            .context("the cluster's policy snapshot does not load")?;
    } else {
        judge
            .apply(&local_snapshot(args)?)
            .context("the --policy files do not load")?;
    }
    let scope = match installed {
        Some(mut installed) => {
            // Asking for the unguarded namespaces too is this run's choice.
            installed.scope.unenforced |= cluster.scope.unenforced_namespaces;
            installed.scope
        }
        None => cluster.scope(),
    };
    let findings = judge_running(&client, cluster, judge, scope).await?;
    match args.output {
        Output::Table => print!("{}", print::table(&findings)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&findings).context("cannot print the results")?
        ),
    }
    Ok(if print::would_deny(&findings) {
        Verdict::Deny
    } else {
        Verdict::Allow
    })
}
