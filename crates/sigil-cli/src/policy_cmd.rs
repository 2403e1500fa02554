//! `sigil policy`: offline checks of ClusterImagePolicy and TrustRoot files
//! (`lint`), conversion from sigstore policy-controller (`convert`), both with
//! exactly the validation the controller applies, and live evaluation of
//! images against policies (`test`) through the webhook's evaluation code.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use sigil_verifier::oci::{ClientConfig, Credentials, RegistryClient, Repository};
use sigil_verifier::policy::glob::ImageName;
use sigil_verifier::policy::model::{CompiledPolicy, NoMatchPolicy, ResourceInfo};
use sigil_verifier::policy::registry::RegistryVerifier;
use sigil_verifier::policy::{evaluate_image, render};
use sigil_verifier::trust::TrustedRoot;

/// `sigil policy` arguments.
#[derive(Args)]
pub(crate) struct PolicyArgs {
    #[command(subcommand)]
    command: PolicyCommand,
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Validate ClusterImagePolicy and TrustRoot YAML files offline, with the cluster's rules.
    Lint {
        /// YAML files (several documents per file allowed).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Convert policy.sigstore.dev (v1alpha1, v1beta1) objects to policy.sigil.dev/v1alpha1.
    ///
    /// The converted YAML goes to standard output; anything sigil does not
    /// support goes to standard error, and then the exit status is 1.
    Convert {
        /// YAML files with policy-controller objects.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Evaluate images against ClusterImagePolicies live, as the webhook would for a Pod.
    ///
    /// Exit status 0 when admitted (warnings are printed), 1 when denied.
    Test(TestArgs),
}

#[derive(Args)]
struct TestArgs {
    /// ClusterImagePolicy YAML files.
    #[arg(long = "policy", required = true, value_name = "FILE")]
    policies: Vec<PathBuf>,
    /// A TrustRoot a policy names, as NAME=trusted_root.json.
    #[arg(long = "trust-root", value_name = "NAME=FILE")]
    trust_roots: Vec<String>,
    /// What happens to an image no policy matches.
    #[arg(long, value_enum, default_value = "deny")]
    no_match: NoMatch,
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

#[derive(Clone, Copy, ValueEnum)]
enum NoMatch {
    Deny,
    Warn,
    Allow,
}

/// Runs `sigil policy …`.
pub(crate) fn run(args: &PolicyArgs) -> Result<()> {
    match &args.command {
        PolicyCommand::Lint { files } => lint(files),
        PolicyCommand::Convert { files } => convert(files),
        PolicyCommand::Test(args) => test(args),
    }
}

fn read(path: &PathBuf) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

fn lint(files: &[PathBuf]) -> Result<()> {
    let mut problems = 0;
    for path in files {
        let reports = sigil_api::lint::lint_yaml(&read(path)?)
            .with_context(|| format!("{}", path.display()))?;
        for r in reports {
            let what = format!("{}: {} {}", path.display(), r.kind, r.name);
            for note in &r.notes {
                println!("{what}: note: {note}");
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

fn convert(files: &[PathBuf]) -> Result<()> {
    let mut problems = 0;
    let mut first = true;
    for path in files {
        let c = sigil_api::convert::convert_yaml(&read(path)?)
            .with_context(|| format!("{}", path.display()))?;
        if c.converted > 0 {
            if !first {
                println!("---");
            }
            first = false;
            print!("{}", c.yaml);
        }
        for line in &c.report {
            eprintln!("{}: {line}", path.display());
        }
        problems += c.report.len();
    }
    if problems > 0 {
        bail!("{problems} item(s) need attention before the converted policies can be applied");
    }
    Ok(())
}

fn load_policies(files: &[PathBuf]) -> Result<Vec<CompiledPolicy>> {
    let mut out = Vec::new();
    for path in files {
        let text = read(path)?;
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("{} is not YAML", path.display()))?;
        for doc in docs {
            if doc.get("kind").and_then(|k| k.as_str()) != Some("ClusterImagePolicy") {
                continue;
            }
            let cip: sigil_api::ClusterImagePolicy = serde_json::from_value(doc)
                .with_context(|| format!("{}: invalid ClusterImagePolicy", path.display()))?;
            let name = cip.metadata.name.clone().unwrap_or_default();
            let compiled =
                sigil_api::compile::compile_policy(&name, &cip.spec, &sigil_api::compile::Offline)
                    .with_context(|| format!("{}: ClusterImagePolicy {name}", path.display()))?;
            out.push(compiled);
        }
    }
    if out.is_empty() {
        bail!("no ClusterImagePolicy found in the --policy files");
    }
    Ok(out)
}

fn credentials(path: Option<&PathBuf>) -> Result<Credentials> {
    let path = match path {
        Some(p) => p.clone(),
        None => {
            let default = std::env::var_os("DOCKER_CONFIG")
                .map(|d| PathBuf::from(d).join("config.json"))
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
                });
            match default {
                Some(p) if p.exists() => p,
                _ => return Ok(Credentials::anonymous()),
            }
        }
    };
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    Credentials::from_docker_config_json(&bytes)
        .with_context(|| format!("invalid docker config {}", path.display()))
}

fn test(args: &TestArgs) -> Result<()> {
    let policies = load_policies(&args.policies)?;
    let mut roots = BTreeMap::new();
    for spec in &args.trust_roots {
        let (name, file) = spec
            .split_once('=')
            .with_context(|| format!("--trust-root {spec}: expected NAME=FILE"))?;
        let root = TrustedRoot::from_json(&read(&PathBuf::from(file))?)
            .with_context(|| format!("invalid trusted root {file}"))?;
        roots.insert(name.to_owned(), root);
    }
    // One client pins tags, the verifier owns another: both share nothing
    // but their configuration.
    let client = client_for(args)?;
    let verifier = RegistryVerifier::new(client_for(args)?, TrustedRoot::public_good()?, roots);
    let no_match = match args.no_match {
        NoMatch::Deny => NoMatchPolicy::Deny,
        NoMatch::Warn => NoMatchPolicy::Warn,
        NoMatch::Allow => NoMatchPolicy::Allow,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut denied = 0;
    for input in &args.images {
        let image = rt.block_on(pin_digest(&client, input))?;
        let resource = ResourceInfo {
            version: "v1".into(),
            resource: "pods".into(),
            kind: "Pod".into(),
            ..ResourceInfo::default()
        };
        let result = rt.block_on(evaluate_image(
            &verifier, &policies, &image, &resource, no_match,
        ));
        let verdict = render(&format!("image {input}"), std::slice::from_ref(&result));
        for w in &verdict.warnings {
            println!("warn: {w}");
        }
        match &verdict.message {
            None => println!("allow: {image}"),
            Some(message) => {
                denied += 1;
                println!("deny: {message}");
            }
        }
    }
    if denied > 0 {
        bail!("{denied} image(s) denied");
    }
    Ok(())
}

fn client_for(args: &TestArgs) -> Result<RegistryClient> {
    Ok(RegistryClient::new(ClientConfig {
        credentials: credentials(args.docker_config.as_ref())?,
        insecure_hosts: args.insecure_registry.clone(),
        ..ClientConfig::default()
    })?)
}

/// Parses `input` and resolves its tag to a digest when it has none, as the
/// webhook's `/mutate` does before `/validate` sees the image.
async fn pin_digest(client: &RegistryClient, input: &str) -> Result<ImageName> {
    let mut image = ImageName::parse(input)?;
    if image.digest.is_none() {
        let repo = Repository::parse(&image.repository_name())?;
        let tag = image.tag.clone().unwrap_or_else(|| "latest".into());
        let digest = client
            .session()
            .resolve_tag(&repo, &tag)
            .await?
            .with_context(|| format!("{input}: tag {tag} not found"))?;
        image.digest = Some(digest.to_string());
    }
    Ok(image)
}
