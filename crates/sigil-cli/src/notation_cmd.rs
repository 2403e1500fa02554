//! `sigil verify-notation`: one Notary Project signature envelope checked
//! offline against an image manifest (or its digest, size and media type)
//! with the Notation CLI's own configuration directory, by the same
//! `sigil_notation::verify` the webhook's Notation authority uses. CRLs and
//! OCSP answers are fetched under sigil's egress rules unless `--offline`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use sigil_notation::envelope::{MEDIA_TYPE_COSE, MEDIA_TYPE_JWS};
use sigil_notation::payload::Descriptor;
use sigil_notation::revocation::{Evidence, Request};
use sigil_notation::verify::{Context, revocation_requests, verify};
use sigil_registry::revocation_fetch::{FetchConfig, RevocationFetcher};

use crate::verdict::Verdict;

/// Largest envelope or manifest file read.
const MAX_FILE: u64 = 4 * 1024 * 1024;

#[derive(Args)]
pub(crate) struct VerifyNotationArgs {
    /// The Notation CLI's configuration directory (`trustpolicy.oci.json` or
    /// `trustpolicy.json`, and `truststore/`), e.g. ~/.config/notation.
    #[arg(long, value_name = "DIR")]
    notation_config: PathBuf,
    /// The signature envelope (the signature manifest's layer).
    #[arg(long, value_name = "FILE")]
    envelope: PathBuf,
    /// The envelope's media type; by default from the file name (`.cose`
    /// is COSE, anything else JWS).
    #[arg(long, value_name = "TYPE", value_parser = [MEDIA_TYPE_JWS, MEDIA_TYPE_COSE])]
    envelope_type: Option<String>,
    /// The repository the trust policy's registryScopes are matched against
    /// (`registry/repository`); without it only a `*` statement applies.
    #[arg(long, value_name = "REPOSITORY")]
    repository: Option<String>,
    /// With a digest as the artifact: the manifest's size in bytes.
    #[arg(long, value_name = "BYTES")]
    size: Option<u64>,
    /// With a digest as the artifact: the manifest's media type.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "application/vnd.oci.image.manifest.v1+json"
    )]
    manifest_media_type: String,
    /// Fetch no CRL or OCSP answer: a revocation check then cannot be made,
    /// and fails or is logged as the trust policy's level says.
    #[arg(long)]
    offline: bool,
    /// The image manifest file, or `sha256:<64 hex>` with --size.
    #[arg(value_name = "MANIFEST_OR_DIGEST")]
    artifact: String,
}

fn read_bounded(path: &Path, what: &str) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    if meta.len() > MAX_FILE {
        bail!("{what} {} is larger than {MAX_FILE} bytes", path.display());
    }
    std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

fn target(args: &VerifyNotationArgs) -> Result<Descriptor> {
    let path = Path::new(&args.artifact);
    if args.artifact.starts_with("sha256:") && !path.exists() {
        let hex_part = args.artifact.trim_start_matches("sha256:");
        if hex_part.len() != 64 || !hex_part.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("{} is not sha256:<64 hex>", args.artifact);
        }
        let size = args
            .size
            .context("a digest needs --size (the manifest's size in bytes)")?;
        return Ok(Descriptor::new(
            &args.manifest_media_type,
            &args.artifact,
            size,
        ));
    }
    let bytes = read_bounded(path, "manifest")?;
    let media_type = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| {
            v.get("mediaType")
                .and_then(|m| m.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| args.manifest_media_type.clone());
    let digest = format!(
        "sha256:{}",
        hex::encode(sigil_verifier::crypto::sha256(&bytes))
    );
    Ok(Descriptor::new(&media_type, &digest, bytes.len() as u64))
}

/// Fetches every revocation answer the envelope needs (none with `offline`).
fn gather(requests: Vec<Request>, offline: bool) -> Result<Evidence> {
    let mut evidence = Evidence::new();
    if offline || requests.is_empty() {
        return Ok(evidence);
    }
    let fetcher = RevocationFetcher::new(FetchConfig::default())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    for request in requests {
        let answer = match &request {
            Request::Crl { url } => runtime
                .block_on(fetcher.get(url))
                .map(|b| b.to_vec())
                .map_err(|e| e.to_string()),
            Request::Ocsp { url, body } => runtime
                .block_on(fetcher.post_ocsp(url, body))
                .map(|b| b.to_vec())
                .map_err(|e| e.to_string()),
            Request::AwsSigner { .. } => {
                Err("sigil does not call AWS Signer's revocation API from the CLI".to_owned())
            }
        };
        evidence.insert(request, answer);
    }
    Ok(evidence)
}

pub(crate) fn run(args: &VerifyNotationArgs) -> Result<Verdict> {
    let config = sigil_notation::config::load(&args.notation_config)?;
    let repository = args.repository.as_deref().unwrap_or("");
    let Some(statement) = config.policy.applicable(repository) else {
        bail!(
            "no statement of {} applies to repository `{repository}`; name the repository with --repository or add a `*` scope",
            config.policy_file.display()
        );
    };
    let media_type = match &args.envelope_type {
        Some(t) => t.clone(),
        None if args.envelope.extension().is_some_and(|e| e == "cose") => {
            MEDIA_TYPE_COSE.to_owned()
        }
        None => MEDIA_TYPE_JWS.to_owned(),
    };
    let bytes = read_bounded(&args.envelope, "envelope")?;
    let target = target(args)?;
    let now = time::OffsetDateTime::now_utc();
    let envelope = match sigil_notation::decode::envelope(&media_type, &bytes) {
        Ok(env) => Some(env),
        Err(_) if statement.verification.level == sigil_notation::policy::Level::Skip => None,
        Err(e) => {
            println!(
                "Denied: {}: Notary Project integrity check failed: {e}",
                args.envelope.display()
            );
            return Ok(Verdict::Deny);
        }
    };
    let evidence = match &envelope {
        Some(env) => gather(revocation_requests(env), args.offline)?,
        None => Evidence::new(),
    };
    let ctx = Context {
        statement,
        trust_store: &config.trust_store,
        revocation: &evidence,
        now,
    };
    let outcome = match &envelope {
        Some(env) => verify(env, &target, &ctx),
        None => sigil_notation::verify::verify_envelope(&media_type, &bytes, &target, &ctx),
    };
    match outcome {
        Ok(v) if !v.verified => {
            println!(
                "Skipped: trust policy statement `{}` has level skip",
                statement.name
            );
            Ok(Verdict::Warn)
        }
        Ok(v) => {
            println!(
                "Verified OK: {} ({})",
                args.envelope.display(),
                target.digest
            );
            println!(
                "  statement: {} ({})",
                statement.name,
                statement.verification.level.as_str()
            );
            println!("  signer:    {}", v.signer);
            if let Some(profile) = &v.aws_signer_profile {
                println!("  AWS Signer profile: {profile}");
            }
            if let Some(at) = v.judged_at {
                let basis = if v.timestamp.is_some() {
                    "trusted timestamp"
                } else if v.scheme
                    == Some(sigil_notation::envelope::SigningScheme::SigningAuthority)
                {
                    "authentic signing time"
                } else {
                    "current time"
                };
                println!("  judged at: {at} ({basis})");
            }
            for logged in &v.logged {
                println!("  logged:    {logged}");
            }
            Ok(if v.logged.is_empty() {
                Verdict::Allow
            } else {
                Verdict::Warn
            })
        }
        Err(f) => {
            println!("Denied: {}: {f}", args.envelope.display());
            Ok(Verdict::Deny)
        }
    }
}
