//! `sigil policy`: offline checks of ClusterImagePolicy, ImagePolicy, TrustRoot and WorkloadKind files
//! (`lint`), conversion from sigstore policy-controller that keeps its
//! verdicts (`convert`), both with exactly the validation the controller
//! applies, and live evaluation of images against policies (`test`) through
//! the webhook's evaluation code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use sigil_api::cip::{ClusterImagePolicySpec, Policy, RemotePolicy};
use sigil_compile::compile::{MAX_REMOTE_POLICY_BYTES, SecretResolver, check_remote_policy};
use sigil_compile::default_root::{DefaultRoot, DefaultSource, check_instance_urls};
use sigil_compile::exception::{
    ExceptionRules, Exceptions, is_waived, parse_duration, waived_selecting,
};
use sigil_policy::glob::ImageName;
use sigil_policy::model::{CompiledPolicy, Mode, NoMatchPolicy, ResourceInfo};
use sigil_policy::registry::RegistryVerifier;
use sigil_policy::{ImageResult, evaluate_image, render};
use sigil_registry::revocation_fetch::{FetchConfig, RevocationFetcher};
use sigil_registry::{ClientConfig, RegistryClient, Repository};
use sigil_verifier::trust::TrustedRoot;

use crate::notation_config;
use crate::policy_files::{PolicyDocument, policy_documents, read};
use crate::verdict::Verdict;
use crate::verify_image::credentials;

/// `sigil policy` arguments.
#[derive(Args)]
pub(crate) struct PolicyArgs {
    #[command(subcommand)]
    command: PolicyCommand,
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Validate ClusterImagePolicy, ImagePolicy, TrustRoot and WorkloadKind YAML files offline, with the cluster's rules.
    ///
    /// policy-controller objects are checked as `convert` would convert them,
    /// with a warning wherever the two would judge them differently. A
    /// Notation trust policy document (`trustpolicy.oci.json`,
    /// `trustpolicy.json`, or JSON with `trustPolicies`) is validated as the
    /// `notation` authority validates it, its errors naming the field.
    Lint {
        /// YAML files (several documents per file allowed), or Notation
        /// trust policy JSON files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Convert policy.sigstore.dev (v1alpha1, v1beta1) objects, Kyverno's image verification and Ratify's Notation verifiers to policy.sigil.dev/v1alpha1.
    ///
    /// The converted YAML goes to standard output. Where the two judge a
    /// policy differently, conversion writes sigil's explicit form of
    /// policy-controller's behaviour (`changed:` lines on standard error), or
    /// says that it cannot (`warning:` lines, exit status 3). Anything sigil
    /// does not support is an `error:` line, and then the exit status is 1.
    /// Kyverno's ClusterPolicy and Policy `verifyImages` rules and
    /// ImageValidatingPolicies become ClusterImagePolicies (ImagePolicies for
    /// a namespaced Policy); a requirement that does not map is an `error:`
    /// and is left out, never weakened (docs/migration-kyverno.md). Ratify's
    /// `notation` Verifiers become policies with a notation authority, their
    /// trust stores filled from the KeyManagementProviders (and
    /// CertificateStores) found in any of the files (docs/notation.md).
    Convert {
        /// YAML files with policy-controller, Kyverno or Ratify objects.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Add `trustRootRef: NAME` to every authority whose keyless.url or
        /// ctlog.url is not a public-good instance (instead of relying on the
        /// cluster's default trust root).
        #[arg(long = "trust-root", value_name = "NAME")]
        trust_root: Option<String>,
    },
    /// Evaluate images against ClusterImagePolicies and ImagePolicies live, as the webhook would for a Pod.
    ///
    /// Exit status 0 when admitted, 3 when admitted with warnings (warn-mode
    /// failures, noMatchPolicy warn), 1 when denied or on errors.
    Test(Box<TestArgs>),
    /// Show what policies not yet applied would deny among what runs in the cluster.
    ///
    /// Judges the ClusterImagePolicy and ImagePolicy files alone (not the cluster's
    /// policies), each as if enforced, against the running digests of the
    /// pods in the audited namespaces, as `sigil audit` does; prints every
    /// result and a summary (images checked, containers that would be
    /// denied, by namespace and workload). Reads the cluster (kubeconfig
    /// like kubectl), writes nothing. Exit status 0, or 4 with
    /// --fail-on-deny when something would be denied; 1 on errors.
    Preview(Box<crate::preview_cmd::PreviewArgs>),
}

#[derive(Args)]
struct TestArgs {
    #[command(flatten)]
    policy: PolicySetArgs,
    /// Docker config with registry credentials (default: $DOCKER_CONFIG or ~/.docker).
    #[arg(long, value_name = "FILE")]
    docker_config: Option<PathBuf>,
    /// Talk plain http to this registry host (repeatable).
    #[arg(long, value_name = "HOST")]
    insecure_registry: Vec<String>,
    /// Images to evaluate (tags are resolved to digests first).
    #[arg(required = true, value_name = "IMAGE")]
    images: Vec<String>,
}

/// The policy flags `sigil policy test` and `sigil verify --policy` share.
#[derive(Args)]
pub(crate) struct PolicySetArgs {
    /// ClusterImagePolicy and ImagePolicy YAML files (other kinds in them
    /// are skipped).
    #[arg(long = "policy", value_name = "FILE")]
    pub(crate) policies: Vec<PathBuf>,
    /// The namespace the image is admitted in: the ImagePolicies of that
    /// namespace apply besides every ClusterImagePolicy.
    #[arg(long, value_name = "NAMESPACE", default_value = "default")]
    namespace: String,
    /// A TrustRoot a policy names (trustRootRef), as NAME=trusted_root.json.
    #[arg(long = "trust-root", value_name = "NAME=FILE", requires = "policies")]
    trust_roots: Vec<String>,
    /// The --trust-root that is the cluster's default trust root: authorities
    /// without trustRootRef verify against it, and their keyless.url and
    /// ctlog.url must name its instances (as in a cluster with a TrustRoot
    /// annotated policy.sigil.dev/default-trust-root).
    #[arg(
        long = "default-trust-root",
        value_name = "NAME",
        requires = "trust_roots"
    )]
    default_trust_root: Option<String>,
    /// What happens to an image no policy matches (the webhook's noMatchPolicy).
    #[arg(long, value_enum, default_value = "deny")]
    no_match: NoMatch,
    /// The Notation CLI's configuration directory (`trustpolicy.oci.json`
    /// and `truststore/`, e.g. ~/.config/notation). Alone, it is the policy:
    /// every image needs a Notary Project signature its trust policy
    /// accepts. With --policy, it stands in for the ConfigMaps and Secrets
    /// that `notation` authorities name (trustPolicyRef, and trust stores by
    /// configMapRef or secretRef).
    #[arg(long, value_name = "DIR")]
    pub(crate) notation_config: Option<PathBuf>,
    /// The workload the images belong to, as KIND/NAME (`Deployment/web`):
    /// the ImagePolicyExceptions of the --policy files (in --namespace) that
    /// name it and the image waive the policies they name, as at admission.
    #[arg(long, value_name = "KIND/NAME")]
    workload: Option<String>,
    /// A namespace where ImagePolicyExceptions count, as the chart's
    /// exceptions.namespaces (repeatable; `*`, the default: every namespace).
    #[arg(
        long = "exception-namespace",
        value_name = "NAMESPACE",
        default_value = "*"
    )]
    exception_namespaces: Vec<String>,
    /// How long after its creation an exception may count at most, as the
    /// chart's exceptions.maxDuration (an exception file without a
    /// creationTimestamp counts as created now).
    #[arg(long, value_name = "DURATION", default_value = "168h")]
    exception_max_duration: String,
}

impl PolicySetArgs {
    /// Whether these flags say what to judge by (policy files, or a
    /// Notation configuration directory standing alone).
    pub(crate) fn given(&self) -> bool {
        !self.policies.is_empty() || self.notation_config.is_some()
    }

    /// The ImagePolicyExceptions of the --policy files, checked as the
    /// webhook checks them with these flags' rules, and the names the
    /// --workload goes by.
    fn exceptions(&self, now: time::OffsetDateTime) -> Result<(Exceptions, Vec<(String, String)>)> {
        let max = parse_duration(&self.exception_max_duration)
            .map_err(|e| anyhow::anyhow!("--exception-max-duration: {e}"))?;
        let rules = ExceptionRules::new(&self.exception_namespaces, max)
            .map_err(|e| anyhow::anyhow!("--exception-max-duration: {e}"))?;
        let exceptions = crate::policy_files::load_exceptions(&self.policies, &rules, now)?;
        let workload = match &self.workload {
            None => Vec::new(),
            Some(w) => {
                let (kind, name) = w
                    .split_once('/')
                    .filter(|(k, n)| !k.is_empty() && !n.is_empty() && !n.contains('/'))
                    .with_context(|| {
                        format!("--workload {w}: expected KIND/NAME, e.g. Deployment/web")
                    })?;
                vec![(kind.to_owned(), name.to_owned())]
            }
        };
        if !exceptions.is_empty() && workload.is_empty() {
            eprintln!(
                "note: the --policy files hold ImagePolicyExceptions, which name workloads; give \
                 --workload KIND/NAME to judge the images as that workload's"
            );
        }
        Ok((exceptions, workload))
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum NoMatch {
    Deny,
    Warn,
    Allow,
}

/// Runs `sigil policy …`; `test` returns its verdict, the others `Allow`
/// when they succeed.
pub(crate) fn run(args: &PolicyArgs) -> Result<Verdict> {
    match &args.command {
        PolicyCommand::Lint { files } => lint(files).map(|()| Verdict::Allow),
        PolicyCommand::Preview(args) => crate::preview_cmd::run(args, TrustedRoot::public_good()?),
        PolicyCommand::Convert { files, trust_root } => {
            let options = sigil_compile::convert::ConvertOptions {
                trust_root: trust_root.clone(),
                ..Default::default()
            };
            convert(files, &options)
        }
        PolicyCommand::Test(args) => {
            let (credentials, source) = credentials(args.docker_config.as_deref())?;
            let client = ClientConfig {
                credentials,
                insecure_hosts: args.insecure_registry.clone(),
                keychain: crate::verify_image::laptop_keychain(
                    &args.insecure_registry,
                    sigil_registry::Limits::default().total_deadline,
                )?,
                ..ClientConfig::default()
            };
            evaluate(
                &args.policy,
                (
                    TrustedRoot::public_good()?,
                    DefaultSource::Builtin("public-good"),
                ),
                &client,
                &source,
                &args.images,
            )
        }
    }
}

/// Whether `text` (read from `path`) is a Notation trust policy document:
/// a file named as Notation names them, or JSON with `trustPolicies`.
fn is_trust_policy(path: &Path, text: &str) -> bool {
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| sigil_notation::config::POLICY_FILES.contains(&n));
    named
        || serde_json::from_str::<serde_json::Value>(text)
            .is_ok_and(|v| v.get("trustPolicies").is_some())
}

fn lint(files: &[PathBuf]) -> Result<()> {
    let mut problems = 0;
    for path in files {
        let text = read(path)?;
        if is_trust_policy(path, &text) {
            let what = format!("{}: Notation trust policy", path.display());
            match sigil_notation::policy::TrustPolicy::parse(text.as_bytes()) {
                Ok(policy) => println!("{what}: ok ({} statement(s))", policy.statements.len()),
                Err(e) => {
                    println!("{what}: error: {e}");
                    problems += 1;
                }
            }
            continue;
        }
        let reports = sigil_compile::lint::lint_yaml_with(&text, sigil_compile::lint::Probe::Rego)
            .with_context(|| format!("{}", path.display()))?;
        for r in reports {
            let what = format!("{}: {} {}", path.display(), r.kind, r.name);
            for note in &r.notes {
                println!("{what}: note: {note}");
            }
            for warning in &r.warnings {
                println!("{what}: warning: {warning}");
            }
            if r.errors.is_empty() {
                println!("{what}: ok");
            }
            for e in &r.errors {
                println!("{what}: error: {e}");
            }
            problems += r.errors.len();
        }
    }
    if problems > 0 {
        bail!("{problems} problem(s) found");
    }
    Ok(())
}

fn convert(files: &[PathBuf], options: &sigil_compile::convert::ConvertOptions) -> Result<Verdict> {
    let mut problems = 0;
    let mut warnings = 0;
    let mut first = true;
    let texts = files.iter().map(|p| read(p)).collect::<Result<Vec<_>>>()?;
    for (i, (path, text)) in files.iter().zip(&texts).enumerate() {
        // Ratify's Verifiers name providers that may live in the other files.
        let options = sigil_compile::convert::ConvertOptions {
            companions: texts
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, t)| t.clone())
                .collect(),
            ..options.clone()
        };
        let c = sigil_compile::convert::convert_yaml_with(text, &options)
            .with_context(|| format!("{}", path.display()))?;
        if c.converted > 0 {
            if !first {
                println!("---");
            }
            first = false;
            print!("{}", c.yaml);
        }
        for line in &c.changes {
            eprintln!("{}: changed: {line}", path.display());
        }
        for line in &c.warnings {
            eprintln!("{}: warning: {line}", path.display());
        }
        for line in &c.report {
            eprintln!("{}: error: {line}", path.display());
        }
        problems += c.report.len();
        warnings += c.warnings.len();
    }
    if problems > 0 {
        bail!("{problems} item(s) need attention before the converted policies can be applied");
    }
    if warnings > 0 {
        eprintln!(
            "{warnings} place(s) where sigil will judge differently from the converted \
             policies' tool; review the warnings above"
        );
        return Ok(Verdict::Warn);
    }
    Ok(Verdict::Allow)
}

/// Reads and compiles every ClusterImagePolicy and ImagePolicy of `files`,
/// as the controller would (an ImagePolicy named `NAMESPACE/NAME`, applying
/// in its namespace only): Secrets stay unresolved references, remote policy
/// modules are fetched and checked against their sha256sum, URLs are checked
/// against the `default` trust root.
fn load_policies(
    files: &[PathBuf],
    notation_dir: Option<&Path>,
    rt: &tokio::runtime::Runtime,
    default: &DefaultRoot<'_>,
) -> Result<Vec<CompiledPolicy>> {
    let notation = notation_dir
        .map(|dir| notation_config::load(dir).map(|config| (dir, config)))
        .transpose()?;
    let mut specs = Vec::new();
    let mut resolved = 0;
    for path in files {
        for PolicyDocument {
            kind,
            name,
            namespace,
            spec,
        } in policy_documents(path)?
        {
            let name = match &namespace {
                None => name,
                Some(ns) => {
                    let problems = sigil_compile::compile::namespaced_problems(&spec, ns);
                    if !problems.is_empty() {
                        bail!(
                            "{}: ImagePolicy {ns}/{name}: {}",
                            path.display(),
                            problems.join("; ")
                        );
                    }
                    sigil_api::image_policy::qualified_name(ns, &name)
                }
            };
            let mismatches = check_instance_urls(&spec, default);
            let lines: Vec<String> = mismatches.iter().map(ToString::to_string).collect();
            match default.source {
                _ if lines.is_empty() => {}
                // A --trusted-root file stands in for the built-in root
                // (tests, other instances): say what a cluster would refuse.
                DefaultSource::File(_) => {
                    for line in &lines {
                        eprintln!(
                            "note: {}: {kind} {name}: {line} (a cluster refuses this \
                             policy unless its default trust root lists the URL)",
                            path.display()
                        );
                    }
                }
                DefaultSource::TrustRoot(_) => {
                    bail!("{}: {kind} {name}: {}", path.display(), lines.join("; "))
                }
                DefaultSource::Builtin(_) => bail!(
                    "{}: {kind} {name}: {} (here: give that TrustRoot with \
                     --trust-root NAME=FILE and --default-trust-root NAME)",
                    path.display(),
                    lines.join("; ")
                ),
            }
            let mut spec = spec;
            if let Some((dir, config)) = &notation {
                resolved += notation_config::resolve(&mut spec, config, dir)
                    .with_context(|| format!("{}: {kind} {name}", path.display()))?;
            }
            specs.push((path.clone(), kind, name, namespace, spec));
        }
    }
    match &notation {
        Some((dir, config)) if files.is_empty() => specs.push((
            dir.join(config.policy_file.file_name().unwrap_or_default()),
            "ClusterImagePolicy",
            notation_config::POLICY_NAME.to_owned(),
            None,
            notation_config::policy(config),
        )),
        Some((dir, _)) if resolved == 0 => eprintln!(
            "note: no notation authority in the --policy files reads a trustPolicyRef, \
             configMapRef or secretRef, so --notation-config {} is not used",
            dir.display()
        ),
        _ => {}
    }
    let resolver = CliResolver {
        rt,
        env: sigil_kms::Env::from_process(),
        http: sigil_kms::Http::default(),
        remote: rt.block_on(fetch_remote_policies(
            specs.iter().map(|(_, _, _, _, spec)| spec),
        )),
    };
    let mut out = Vec::new();
    for (path, kind, name, namespace, spec) in &specs {
        let mut compiled = sigil_compile::compile::compile_policy(name, spec, &resolver)
            .map_err(|e| {
                if notation.is_none() && notation_config::references(spec) {
                    anyhow::anyhow!(
                        "{e} (here: --notation-config DIR gives them from the Notation CLI's \
                         configuration directory)"
                    )
                } else {
                    anyhow::Error::new(e)
                }
            })
            .with_context(|| format!("{}: {kind} {name}", path.display()))?;
        compiled.namespace.clone_from(namespace);
        out.push(compiled);
    }
    if out.is_empty() {
        bail!("no ClusterImagePolicy or ImagePolicy found in the --policy files");
    }
    Ok(out)
}

/// What compiling policy files needs from outside: `key.kms` public keys,
/// fetched with this process's environment (VAULT_ADDR, AWS_REGION,
/// GOOGLE_APPLICATION_CREDENTIALS, AZURE_CLIENT_ID, …) as cosign does, and
/// the remote policy modules by (url, sha256sum), fetched and checked
/// beforehand. Secrets stay unresolved references.
struct CliResolver<'a> {
    rt: &'a tokio::runtime::Runtime,
    env: sigil_kms::Env,
    http: sigil_kms::Http,
    remote: BTreeMap<(String, String), Result<String, String>>,
}

impl SecretResolver for CliResolver<'_> {
    fn resolve(&self, _secret: &sigil_policy::model::SecretRef) -> Option<Result<String, String>> {
        None
    }

    fn kms(&self, uri: &str) -> Option<Result<String, String>> {
        // The compiler checked the syntax before asking.
        let reference = sigil_kms::KmsRef::parse(uri).ok()?;
        let fetched = self.rt.block_on(sigil_kms::fetch_public_key(
            &reference, &self.env, &self.http,
        ));
        Some(fetched.map(|k| k.pem).map_err(|e| e.to_string()))
    }

    fn remote_policy(&self, remote: &RemotePolicy) -> Option<Result<String, String>> {
        self.remote
            .get(&(remote.url.clone(), remote.sha256sum.clone()))
            .cloned()
    }
}

/// How long fetching one remote policy module may take.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetches every remote policy module of `specs` (bounded in size and
/// time) and checks it as the controller does ([`check_remote_policy`]).
async fn fetch_remote_policies<'a>(
    specs: impl Iterator<Item = &'a ClusterImagePolicySpec>,
) -> BTreeMap<(String, String), Result<String, String>> {
    let mut out = BTreeMap::new();
    let remotes: Vec<&RemotePolicy> = specs
        .flat_map(|spec| {
            let attestations = spec
                .authorities
                .iter()
                .flat_map(|a| a.attestations.iter().filter_map(|att| att.policy.as_ref()));
            spec.policy.iter().chain(attestations)
        })
        .filter_map(|p: &Policy| p.remote.as_ref())
        .collect();
    if remotes.is_empty() {
        return out;
    }
    let client = reqwest::Client::builder()
        .connect_timeout(REMOTE_TIMEOUT)
        .timeout(REMOTE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::limited(3))
        .build();
    for remote in remotes {
        let key = (remote.url.clone(), remote.sha256sum.clone());
        if out.contains_key(&key) {
            continue;
        }
        let module = match &client {
            Ok(client) => fetch_remote(client, remote).await,
            Err(e) => Err(format!("cannot build the HTTP client: {e}")),
        };
        out.insert(key, module);
    }
    out
}

async fn fetch_remote(client: &reqwest::Client, remote: &RemotePolicy) -> Result<String, String> {
    let fetch = async {
        let mut response = client
            .get(remote.url.trim())
            .send()
            .await
            .map_err(|e| format!("cannot fetch it: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("the server answered HTTP {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("cannot read it: {e}"))?
        {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_REMOTE_POLICY_BYTES {
                return Err(format!(
                    "the content is larger than the {MAX_REMOTE_POLICY_BYTES} bytes a policy may have"
                ));
            }
        }
        check_remote_policy(remote, &body)
    };
    tokio::time::timeout(REMOTE_TIMEOUT, fetch)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no complete answer within {} s",
                REMOTE_TIMEOUT.as_secs()
            ))
        })
}

/// Reads `NAME=trusted_root.json` arguments.
fn trust_roots(specs: &[String]) -> Result<BTreeMap<String, TrustedRoot>> {
    let mut roots = BTreeMap::new();
    for spec in specs {
        let (name, file) = spec.split_once('=').with_context(|| {
            format!(
                "--trust-root {spec}: expected NAME=FILE (a TrustRoot name and a trusted_root.json)"
            )
        })?;
        let root = TrustedRoot::from_json(&read(Path::new(file))?).with_context(|| {
            format!("--trust-root {spec}: {file} is not a valid trusted_root.json")
        })?;
        roots.insert(name.to_owned(), root);
    }
    Ok(roots)
}

/// Says plainly which policy settings this command handles differently
/// from the webhook: Secrets it cannot read.
fn note_pull_secrets(policies: &[CompiledPolicy], credential_source: &str) {
    for p in policies {
        for a in &p.authorities {
            for (i, s) in a.sources.iter().enumerate() {
                if !s.pull_secrets.is_empty() {
                    eprintln!(
                        "note: policy {} authority {} source[{i}]: signaturePullSecrets ({}) are \
                         read by the webhook in the admitted object's namespace; this command \
                         does not read Secrets and pulls with {credential_source} instead",
                        p.name,
                        a.name,
                        s.pull_secrets.join(", ")
                    );
                }
            }
        }
    }
}

/// Evaluates `images` against the policies of `set` live, through the
/// webhook's code path (`evaluate_image` over a [`RegistryVerifier`]), prints
/// one verdict per image with the rendered admission message, and returns
/// the worst verdict. `builtin` (a root and what it is) verifies authorities
/// without a trustRootRef unless `--default-trust-root` names another;
/// `credential_source` names where credentials came from.
pub(crate) fn evaluate(
    set: &PolicySetArgs,
    builtin: (TrustedRoot, DefaultSource<'_>),
    client: &ClientConfig,
    credential_source: &str,
    images: &[String],
) -> Result<Verdict> {
    if !set.given() {
        bail!(
            "give at least one --policy FILE with a ClusterImagePolicy or ImagePolicy, or \
             --notation-config DIR"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let roots = trust_roots(&set.trust_roots)?;
    let (default_root, source) = match &set.default_trust_root {
        Some(name) => {
            let root = roots.get(name).cloned().with_context(|| {
                format!("--default-trust-root {name}: no --trust-root {name}=FILE is given")
            })?;
            (root, DefaultSource::TrustRoot(name))
        }
        None => builtin,
    };
    let policies = load_policies(
        &set.policies,
        set.notation_config.as_deref(),
        &rt,
        &DefaultRoot {
            source,
            root: &default_root,
        },
    )?;
    note_pull_secrets(&policies, credential_source);
    let now = time::OffsetDateTime::now_utc();
    let (exceptions, workload) = set.exceptions(now)?;
    // One client pins tags, the verifier owns another: both share nothing
    // but their configuration.
    let pinning = RegistryClient::new(client.clone())?;
    let revocation = RevocationFetcher::new(FetchConfig {
        addresses: client.addresses.clone(),
        lookup: client.lookup.clone(),
        ..FetchConfig::default()
    })?;
    let verifier = RegistryVerifier::new(RegistryClient::new(client.clone())?, default_root, roots)
        .with_revocation(Arc::new(revocation));
    let no_match = match set.no_match {
        NoMatch::Deny => NoMatchPolicy::Deny,
        NoMatch::Warn => NoMatchPolicy::Warn,
        NoMatch::Allow => NoMatchPolicy::Allow,
    };
    let resource = ResourceInfo {
        version: "v1".into(),
        resource: "pods".into(),
        kind: "Pod".into(),
        namespace: set.namespace.clone(),
        ..ResourceInfo::default()
    };
    let mut worst = Verdict::Allow;
    for input in images {
        let image = rt.block_on(pin_digest(&pinning, input))?;
        let waivers = exceptions.waivers(&set.namespace, &workload, &image, now);
        let waived = waived_selecting(policies.iter(), &waivers, &image, &resource);
        let judging = policies.iter().filter(|p| !is_waived(&waivers, p));
        let mut result = rt.block_on(evaluate_image(
            &verifier, judging, &image, &resource, no_match,
        ));
        if !waived.is_empty() && result.policies.is_empty() {
            // Selected, every selecting policy waived: not a no-match.
            result.no_match = None;
        }
        let mut verdict = render(&format!("image {input}"), std::slice::from_ref(&result));
        for (p, w) in &waived {
            if p.mode.admits() {
                verdict
                    .warnings
                    .push(render::image_warning(&result.image, &w.warning()));
            } else {
                println!(
                    "audit: policy {} (mode: audit) skipped: {}",
                    p.name,
                    w.words()
                );
            }
        }
        for w in &verdict.warnings {
            println!("warn: {w}");
        }
        // Never part of the verdict, as at admission; shown so a policy in
        // audit mode can be tried before it is enforced.
        for p in result.policies.iter().filter(|p| !p.mode.admits()) {
            match render::policy_failure(p) {
                Some(failure) => println!("audit: {failure}"),
                None => println!("audit: policy {} (mode: audit) passed", p.name),
            }
        }
        let this = match &verdict.message {
            Some(message) => {
                println!("deny: {message}");
                Verdict::Deny
            }
            None => {
                let mut by = admitted_by(&result);
                if !waived.is_empty() {
                    let names: Vec<&str> = waived.iter().map(|(p, _)| p.name.as_str()).collect();
                    if result.policies.is_empty() {
                        by = format!("policies waived by exception: {}", names.join(", "));
                    } else {
                        by.push_str(&format!("; waived by exception: {}", names.join(", ")));
                    }
                }
                println!("allow: {image} ({by})");
                if verdict.warnings.is_empty() {
                    Verdict::Allow
                } else {
                    Verdict::Warn
                }
            }
        };
        worst = worst.max(this);
    }
    Ok(worst)
}

/// Which policies admitted an image, for the `allow:` line.
fn admitted_by(result: &ImageResult) -> String {
    if let Some(no_match) = result.no_match {
        let how = match no_match {
            NoMatchPolicy::Allow => "allow",
            NoMatchPolicy::Warn => "warn",
            NoMatchPolicy::Deny => "deny",
        };
        return format!("no policy matches; noMatchPolicy {how}");
    }
    let names: Vec<String> = result
        .policies
        .iter()
        .filter(|p| p.mode.admits())
        .map(|p| match (p.passed, p.mode) {
            (true, _) => format!("{} passed", p.name),
            (false, Mode::Warn) => format!("{} failed in warn mode", p.name),
            (false, Mode::Enforce | Mode::Audit) => format!("{} failed", p.name),
        })
        .collect();
    format!("policies: {}", names.join(", "))
}

/// Parses `input` and resolves its tag to a digest when it has none, as the
/// webhook's `/mutate` does before `/validate` sees the image.
async fn pin_digest(client: &RegistryClient, input: &str) -> Result<ImageName> {
    let mut image =
        ImageName::parse(input).with_context(|| format!("{input} is not an image reference"))?;
    if image.digest.is_none() {
        let repo = Repository::parse(&image.repository_name())?;
        let tag = image.tag.clone().unwrap_or_else(|| "latest".into());
        let digest = client
            .session()
            .resolve_tag(&repo, &tag)
            .await
            .with_context(|| format!("{input}: cannot resolve tag {tag} to a digest"))?
            .with_context(|| {
                format!("{input}: tag {tag} not found; push it or give image@sha256:<digest>")
            })?;
        image.digest = Some(digest.to_string());
    }
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_combine_to_the_worst_and_map_to_distinct_exit_statuses() {
        assert_eq!(Verdict::Allow.max(Verdict::Warn), Verdict::Warn);
        assert_eq!(Verdict::Warn.max(Verdict::Deny), Verdict::Deny);
        let codes = [Verdict::Allow, Verdict::Warn, Verdict::Deny].map(Verdict::exit_code);
        assert_eq!(codes, [0, 3, 1]);
    }
}
