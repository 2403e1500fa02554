//! `sigil`: the command line for people. Verifies bundles and images, lints,
//! converts and tests policies, audits and diagnoses a cluster, with exactly
//! the verifier and judge the admission webhook uses.

mod audit_cmd;
mod claims;
mod completion;
mod doctor;
mod notation_cmd;
mod notation_config;
mod policy_cmd;
mod policy_files;
mod preview_cmd;
mod verdict;
mod verify_image;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use sigil_compile::default_root::DefaultSource;
use sigil_verifier::bundle::Bundle;
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::{TrustedRoot, format_rfc3339};
use sigil_verifier::verify::{Artifact, SignedContent, VerificationPolicy, verify_bundle};
use verdict::Verdict;

/// Verify Sigstore signatures the way the sigil admission controller does.
#[derive(Parser)]
#[command(name = "sigil", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The CUE module (`cue.wasm`) that checks and evaluates `type: cue`
    /// policies. Default: $SIGIL_CUE_MODULE, else `../lib/sigil/cue.wasm`
    /// beside this binary. Without it CUE policies cannot be checked.
    #[arg(long, global = true, value_name = "PATH")]
    cue_module: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Verify a Sigstore bundle against an artifact (sigstore-conformance CLI protocol).
    VerifyBundle(Box<VerifyBundleArgs>),
    /// Verify a Notary Project signature envelope (JWS or COSE) against an
    /// image manifest with the Notation CLI's trust policy and trust store.
    VerifyNotation(Box<notation_cmd::VerifyNotationArgs>),
    /// Verify an image's signatures or attestations in its registry (like `cosign verify`).
    Verify(Box<VerifyArgs>),
    /// Lint ClusterImagePolicy/TrustRoot/WorkloadKind files, convert from policy-controller, Kyverno and Ratify.
    Policy(policy_cmd::PolicyArgs),
    /// Judge what runs in a cluster by its policies or local policy files,
    /// as admission would (reads only; exit 1 if something enforced would be denied).
    Audit(Box<audit_cmd::AuditArgs>),
    /// Check an installation through the current kube context and explain
    /// what is wrong (exit 1 if a check failed).
    Doctor(Box<doctor::DoctorArgs>),
    /// Print a shell completion script.
    Completion(completion::CompletionArgs),
    /// Write man pages for sigil and every subcommand (`make man`).
    #[command(hide = true)]
    Manpages(completion::ManArgs),
}

/// `sigil verify`: with `--key`/`--certificate-identity` like `cosign
/// verify`; with `--policy` the image is judged by ClusterImagePolicies as
/// the webhook judges it, with `--notation-config` by a Notation trust policy
/// (exit 0 allow, 3 allow with warnings, 1 deny).
#[derive(Args)]
struct VerifyArgs {
    #[command(flatten)]
    image: verify_image::VerifyImageArgs,
    #[command(flatten)]
    policy: policy_cmd::PolicySetArgs,
    /// Use the embedded Sigstore staging trust root.
    #[arg(long, conflicts_with = "trusted_root_file")]
    staging: bool,
    /// A trusted_root.json to use instead of the embedded public-good root
    /// (with --policy: for authorities without a trustRootRef).
    #[arg(long = "trusted-root", value_name = "FILE")]
    trusted_root_file: Option<PathBuf>,
}

#[derive(Args)]
struct VerifyBundleArgs {
    /// The Sigstore bundle (JSON).
    #[arg(long, value_name = "FILE")]
    bundle: PathBuf,
    /// Expected certificate identity (SAN), exact match.
    #[arg(
        long,
        value_name = "ID",
        requires = "certificate_oidc_issuer",
        conflicts_with = "key"
    )]
    certificate_identity: Option<String>,
    /// Expected OIDC issuer, exact match.
    #[arg(long, value_name = "URL", requires = "certificate_identity")]
    certificate_oidc_issuer: Option<String>,
    #[command(flatten)]
    claims: claims::ClaimArgs,
    /// Do not require an embedded SCT in the certificate (cosign's flag; for
    /// private instances whose trust root lists no CT log).
    #[arg(long, requires = "certificate_identity")]
    insecure_ignore_sct: bool,
    /// PEM public key of a managed-key signer.
    #[arg(long, value_name = "PEM")]
    key: Option<PathBuf>,
    /// A trusted_root.json to use instead of the embedded public-good root.
    /// When it lists no transparency log (a private instance such as
    /// GitHub's), keyless bundles are verified with their RFC 3161
    /// timestamps as the only source of signing time.
    #[arg(long, value_name = "FILE", conflicts_with = "staging")]
    trusted_root: Option<PathBuf>,
    /// Use the embedded Sigstore staging trust root.
    #[arg(long)]
    staging: bool,
    /// The artifact: a file path, or `sha256:<64 hex>` when no such file exists.
    #[arg(value_name = "FILE_OR_DIGEST")]
    artifact: String,
}

fn main() -> ExitCode {
    // Started again by itself as a Rego worker (the sandbox that evaluates
    // policies' Rego): serve as one and exit, before anything else.
    sigil_policy::rego::serve_if_requested();
    let cli: Cli = sigil_runtime::start::parse_args(env!("CARGO_PKG_VERSION"));
    // Before any signature or TLS: a FIPS build must not run outside FIPS mode.
    if let Err(e) = sigil_runtime::start::install_provider() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    if let Some(module) = &cli.cue_module
        && let Err(e) = sigil_cue::configure_shared(sigil_cue::CueConfig::new(module))
    {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::VerifyBundle(args) => verify_bundle_cmd(&args).map(|()| Verdict::Allow),
        Command::VerifyNotation(args) => notation_cmd::run(&args),
        Command::Verify(args) if args.policy.given() => verify_policy(&args),
        Command::Verify(args) => load_root(args.trusted_root_file.as_deref(), args.staging)
            .and_then(|root| verify_image::run(&args.image, &root))
            .map(|verified| {
                if verified {
                    Verdict::Allow
                } else {
                    Verdict::Deny
                }
            }),
        Command::Policy(args) => policy_cmd::run(&args),
        Command::Audit(args) => load_root(None, false).and_then(|root| audit_cmd::run(&args, root)),
        Command::Doctor(args) => doctor::run(&args),
        Command::Completion(args) => Ok(completion::completion(&args, Cli::command())),
        Command::Manpages(args) => completion::write_pages(&args, Cli::command()),
    };
    match result {
        // Verdicts other than Allow are already printed; only the status remains.
        Ok(verdict) => ExitCode::from(verdict.exit_code()),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `sigil verify --policy FILE... IMAGE`: the image judged by policies,
/// through the same evaluation as `sigil policy test`.
fn verify_policy(args: &VerifyArgs) -> Result<Verdict> {
    if args.image.names_a_signer() {
        let (flag, from) = if args.policy.policies.is_empty() {
            ("--notation-config", "the Notation trust policy")
        } else {
            ("--policy", "the ClusterImagePolicies")
        };
        bail!(
            "{flag} takes the signers from {from}: drop --key, --certificate-*, --type, \
             --insecure-ignore-*, --signature-repository, --tag-prefix and --output, or drop \
             {flag}"
        );
    }
    let root = load_root(args.trusted_root_file.as_deref(), args.staging)?;
    let file = args
        .trusted_root_file
        .as_deref()
        .map(|p| p.display().to_string());
    let builtin = match (&file, args.staging) {
        (Some(path), _) => DefaultSource::File(path),
        (None, true) => DefaultSource::Builtin("staging"),
        (None, false) => DefaultSource::Builtin("public-good"),
    };
    let (client, source) = args.image.client_config()?;
    policy_cmd::evaluate(
        &args.policy,
        (root, builtin),
        &client,
        &source,
        &[args.image.image().to_owned()],
    )
}

fn load_root(trusted_root: Option<&Path>, staging: bool) -> Result<TrustedRoot> {
    match trusted_root {
        Some(path) => {
            let json = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read trusted root {}", path.display()))?;
            TrustedRoot::from_json(&json)
                .with_context(|| format!("invalid trusted root {}", path.display()))
        }
        None if staging => Ok(TrustedRoot::staging()?),
        None => Ok(TrustedRoot::public_good()?),
    }
}

/// Parses `sha256:<64 hex>` into a digest.
fn parse_digest(s: &str) -> Option<[u8; 32]> {
    let hex_part = s.strip_prefix("sha256:")?;
    if hex_part.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out).ok()?;
    Some(out)
}

fn verify_bundle_cmd(args: &VerifyBundleArgs) -> Result<()> {
    let root = load_root(args.trusted_root.as_deref(), args.staging)?;
    let bundle_json = std::fs::read(&args.bundle)
        .with_context(|| format!("cannot read bundle {}", args.bundle.display()))?;
    let bundle = Bundle::from_json(&bundle_json)
        .with_context(|| format!("invalid bundle {}", args.bundle.display()))?;

    let policy = match (
        &args.key,
        &args.certificate_identity,
        &args.certificate_oidc_issuer,
    ) {
        (Some(key), None, None) => {
            if args.claims.any() {
                bail!("certificate claims apply to keyless bundles; drop them or --key");
            }
            let pem = std::fs::read_to_string(key)
                .with_context(|| format!("cannot read key {}", key.display()))?;
            let key = PublicKey::from_pem(&pem)
                .with_context(|| format!("invalid public key {}", key.display()))?;
            VerificationPolicy::key(key)
        }
        (None, Some(id), Some(issuer)) => VerificationPolicy::keyless_under(
            &root,
            IdentityPolicy {
                subject: IdentityMatcher::Exact(id.clone()),
                issuer: IdentityMatcher::Exact(issuer.clone()),
                claims: args.claims.policies()?,
            },
            !args.insecure_ignore_sct,
        ),
        _ => {
            bail!("give either --key PEM, or --certificate-identity with --certificate-oidc-issuer")
        }
    };

    let path = Path::new(&args.artifact);
    let bytes;
    let artifact = match parse_digest(&args.artifact) {
        Some(d) if !path.exists() => Artifact::Sha256(d),
        _ => {
            bytes = std::fs::read(path)
                .with_context(|| format!("cannot read artifact {}", path.display()))?;
            Artifact::Bytes(&bytes)
        }
    };

    let verified = verify_bundle(
        &bundle,
        artifact,
        &policy,
        &root,
        time::OffsetDateTime::now_utc(),
    )
    .with_context(|| format!("{} did not verify", args.bundle.display()))?;

    println!("Verified OK: {}", args.bundle.display());
    if let Some(id) = &verified.identity {
        println!("  identity:  {}", id.subject);
        println!("  issuer:    {}", id.issuer.as_deref().unwrap_or("(none)"));
    } else {
        println!("  signer:    managed key");
    }
    if let SignedContent::Dsse { statement, .. } = &verified.content {
        println!("  predicate: {}", statement.predicate_type);
    }
    match verified.verified_times.first() {
        Some((t, source)) => println!("  signed at: {} ({source})", format_rfc3339(*t)),
        None => println!("  signed at: (no verified time)"),
    }
    match verified.log_index {
        Some(idx) => println!(
            "  log index: {idx} ({})",
            verified.log_url.as_deref().unwrap_or("unknown log")
        ),
        None if root.tlogs.is_empty() => {
            println!("  log:       none (the trusted root lists no transparency log)");
        }
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_arguments_need_sha256_and_64_hex_characters() {
        assert!(parse_digest(&format!("sha256:{}", "ab".repeat(32))).is_some());
        assert!(parse_digest(&format!("sha512:{}", "ab".repeat(32))).is_none());
        assert!(parse_digest("sha256:abc").is_none());
        assert!(parse_digest(&format!("sha256:{}", "zz".repeat(32))).is_none());
    }
}
