//! `sigil verify IMAGE`: the cosign-verify-like command. Parses flags into an
//! image policy and a registry client, runs the library's `verify_image`, and
//! prints the verdict as text or JSON. Exit 0 only when verified.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::{Args, ValueEnum};
use sigil_registry::image::{ImagePolicy, ImageVerdict, VerifyImageOptions, verify_image};
use sigil_registry::{
    ClientConfig, Credentials, DiscoveryOptions, Keychain, KeychainSettings, Limits,
    RegistryClient, Repository, Want,
};
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::{TrustedRoot, format_rfc3339};
use sigil_verifier::verify::{SignedContent, SignerPolicy, VerificationPolicy};

/// Output format.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Output {
    /// Human-readable lines.
    Text,
    /// One JSON document.
    Json,
}

/// Flags of `sigil verify`.
#[derive(Args)]
pub(crate) struct VerifyImageArgs {
    /// The image: `registry/repo:tag` or `registry/repo@sha256:...`.
    #[arg(value_name = "IMAGE")]
    image: String,
    /// PEM public key of a managed-key signer.
    #[arg(long, value_name = "PEM", conflicts_with_all = ["certificate_identity", "certificate_identity_regexp"])]
    key: Option<PathBuf>,
    /// Expected certificate identity (SAN), exact match.
    #[arg(long, value_name = "ID")]
    certificate_identity: Option<String>,
    /// Expected certificate identity, regular expression (unanchored, as cosign).
    #[arg(long, value_name = "RE", conflicts_with = "certificate_identity")]
    certificate_identity_regexp: Option<String>,
    /// Expected OIDC issuer, exact match.
    #[arg(long, value_name = "URL")]
    certificate_oidc_issuer: Option<String>,
    #[command(flatten)]
    claims: crate::claims::ClaimArgs,
    /// Expected OIDC issuer, regular expression.
    #[arg(long, value_name = "RE", conflicts_with = "certificate_oidc_issuer")]
    certificate_oidc_issuer_regexp: Option<String>,
    /// Verify an attestation of this predicate type (URI or cosign short name
    /// such as slsaprovenance, spdxjson, cyclonedx, vuln, custom) instead of a signature.
    #[arg(long, visible_alias = "type", value_name = "TYPE")]
    attestation_type: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
    /// Talk plain http to every registry.
    #[arg(long)]
    allow_insecure_registry: bool,
    /// Talk plain http to this registry host (repeatable).
    #[arg(long, value_name = "HOST")]
    insecure_registry: Vec<String>,
    /// Accept key-based signatures without a transparency-log entry (cosign's
    /// --insecure-ignore-tlog). Never the default.
    #[arg(long)]
    insecure_ignore_tlog: bool,
    /// Do not require an embedded SCT in keyless certificates.
    #[arg(long)]
    insecure_ignore_sct: bool,
    /// Docker config with registry credentials (default: ~/.docker/config.json when present).
    #[arg(long, value_name = "FILE")]
    docker_config: Option<PathBuf>,
    /// Repository holding the signatures, when not the image's own (policy `source.oci`).
    #[arg(long, value_name = "REPO")]
    signature_repository: Option<String>,
    /// Prefix of legacy signature tags (policy `tagPrefix`).
    #[arg(long, value_name = "PREFIX", default_value = "")]
    tag_prefix: String,
    /// Total time allowed for the registry, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    timeout: u64,
}

/// Maps cosign's attestation short names to predicate types, as cosign does.
pub(crate) fn predicate_type(name: &str) -> String {
    match name {
        "custom" => "https://cosign.sigstore.dev/attestation/v1",
        "link" => "https://in-toto.io/Link/v1",
        "slsaprovenance" | "slsaprovenance02" => "https://slsa.dev/provenance/v0.2",
        "slsaprovenance1" => "https://slsa.dev/provenance/v1",
        "spdx" | "spdxjson" => "https://spdx.dev/Document",
        "cyclonedx" => "https://cyclonedx.org/bom",
        "vuln" => "https://cosign.sigstore.dev/attestation/vuln/v1",
        "openvex" => "https://openvex.dev/ns",
        other => other,
    }
    .to_string()
}

fn matcher(exact: &Option<String>, re: &Option<String>, what: &str) -> Result<IdentityMatcher> {
    match (exact, re) {
        (Some(s), None) => Ok(IdentityMatcher::Exact(s.clone())),
        (None, Some(r)) => Ok(IdentityMatcher::Regex(
            regex::Regex::new(r)
                .with_context(|| format!("invalid {what} regular expression `{r}`"))?,
        )),
        _ => bail!("give --{what} or --{what}-regexp"),
    }
}

fn policy(args: &VerifyImageArgs, root: &TrustedRoot) -> Result<ImagePolicy> {
    let keyless = args.certificate_identity.is_some() || args.certificate_identity_regexp.is_some();
    let verification = match (&args.key, keyless) {
        (Some(path), false) => {
            if args.claims.any() {
                bail!("certificate claims apply to keyless signatures; drop them or --key");
            }
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read key {}", path.display()))?;
            let key = PublicKey::from_pem(&pem)
                .with_context(|| format!("invalid public key {}", path.display()))?;
            VerificationPolicy {
                signer: SignerPolicy::Key(key),
                require_tlog: !args.insecure_ignore_tlog,
                key_hash: None,
            }
        }
        (None, true) => {
            if args.insecure_ignore_tlog {
                bail!(
                    "--insecure-ignore-tlog applies to --key only; keyless signatures need a transparency log entry (or, with a trusted root that lists no log, an RFC 3161 timestamp)"
                );
            }
            let identity = IdentityPolicy {
                subject: matcher(
                    &args.certificate_identity,
                    &args.certificate_identity_regexp,
                    "certificate-identity",
                )?,
                issuer: matcher(
                    &args.certificate_oidc_issuer,
                    &args.certificate_oidc_issuer_regexp,
                    "certificate-oidc-issuer",
                )?,
                claims: args.claims.policies()?,
            };
            VerificationPolicy::keyless_under(root, identity, !args.insecure_ignore_sct)
        }
        _ => bail!(
            "give either --key PEM, or --certificate-identity[-regexp] with --certificate-oidc-issuer[-regexp]"
        ),
    };
    let want = match &args.attestation_type {
        Some(t) => Want::Attestations(predicate_type(t)),
        None => Want::Signatures,
    };
    Ok(ImagePolicy { verification, want })
}

/// Registry credentials from the docker config at `path`, or the default
/// one (`$DOCKER_CONFIG/config.json`, `~/.docker/config.json`) when present;
/// anonymous otherwise. Also says where they came from, for messages.
pub(crate) fn credentials(path: Option<&Path>) -> Result<(Credentials, String)> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => {
            let default = std::env::var_os("DOCKER_CONFIG")
                .map(|d| PathBuf::from(d).join("config.json"))
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
                });
            match default {
                Some(p) if p.exists() => p,
                _ => {
                    return Ok((
                        Credentials::anonymous(),
                        "anonymous access (no docker config found)".into(),
                    ));
                }
            }
        }
    };
    let bytes = std::fs::read(&path)
        .with_context(|| format!("cannot read docker config {}", path.display()))?;
    let credentials = Credentials::from_docker_config_json(&bytes)
        .with_context(|| format!("invalid docker config {}", path.display()))?;
    Ok((credentials, format!("the docker config {}", path.display())))
}

/// The credential sources a laptop has besides the docker config's inline
/// entries: the cloud providers with a laptop's own sources (AWS profiles,
/// gcloud's application-default credentials) and the docker credential
/// helpers the docker config names, as cosign and crane use them.
pub(crate) fn laptop_keychain(
    insecure_hosts: &[String],
    timeout: Duration,
) -> Result<Option<Arc<Keychain>>> {
    let settings = KeychainSettings {
        laptop: true,
        insecure_hosts: insecure_hosts.to_vec(),
        exchange_timeout: timeout,
        ..KeychainSettings::default()
    };
    let keychain = Keychain::new(&settings, sigil_registry::cloud::Env::from_process())
        .map_err(|e| anyhow::anyhow!("registry credential providers: {e}"))?;
    Ok(Some(Arc::new(keychain)))
}

impl VerifyImageArgs {
    /// The image argument.
    pub(crate) fn image(&self) -> &str {
        &self.image
    }

    /// Whether any flag that describes a signer or what to verify was given
    /// (they do not combine with `--policy`).
    pub(crate) fn names_a_signer(&self) -> bool {
        self.key.is_some()
            || self.certificate_identity.is_some()
            || self.certificate_identity_regexp.is_some()
            || self.certificate_oidc_issuer.is_some()
            || self.certificate_oidc_issuer_regexp.is_some()
            || self.claims.any()
            || self.attestation_type.is_some()
            || self.insecure_ignore_tlog
            || self.insecure_ignore_sct
            || self.signature_repository.is_some()
            || !self.tag_prefix.is_empty()
            || matches!(self.output, Output::Json)
    }

    /// The registry client's configuration (credentials, plain-http hosts,
    /// deadlines) and where its credentials came from.
    pub(crate) fn client_config(&self) -> Result<(ClientConfig, String)> {
        let limits = Limits {
            total_deadline: Duration::from_secs(self.timeout.max(1)),
            request_timeout: Duration::from_secs(self.timeout.clamp(1, 10)),
            ..Limits::default()
        };
        let (credentials, source) = credentials(self.docker_config.as_deref())?;
        let config = ClientConfig {
            credentials,
            allow_insecure_all: self.allow_insecure_registry,
            insecure_hosts: self.insecure_registry.clone(),
            keychain: laptop_keychain(&self.insecure_registry, limits.total_deadline)?,
            limits,
            ..ClientConfig::default()
        };
        Ok((config, source))
    }
}

/// Runs `sigil verify`; returns whether the image verified.
pub(crate) fn run(args: &VerifyImageArgs, root: &TrustedRoot) -> Result<bool> {
    let policy = policy(args, root)?;
    let client = RegistryClient::new(args.client_config()?.0)?;
    let signature_repository = args
        .signature_repository
        .as_deref()
        .map(Repository::parse)
        .transpose()
        .context("invalid --signature-repository")?;
    let options = VerifyImageOptions {
        discovery: DiscoveryOptions {
            signature_repository,
            tag_prefix: args.tag_prefix.clone(),
        },
        ..VerifyImageOptions::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(verify_image(&args.image, &policy, root, &client, &options));
    match (result, args.output) {
        (Ok(v), Output::Text) => {
            print_text(&v);
            Ok(true)
        }
        (Ok(v), Output::Json) => {
            println!("{}", serde_json::to_string_pretty(&verdict_json(&v))?);
            Ok(true)
        }
        (Err(e), Output::Text) => {
            eprintln!("error: {e}");
            Ok(false)
        }
        (Err(e), Output::Json) => {
            let j = serde_json::json!({"verified": false, "image": args.image, "reason": e.reason(), "error": e.to_string()});
            println!("{}", serde_json::to_string_pretty(&j)?);
            Ok(false)
        }
    }
}

fn print_text(v: &ImageVerdict) {
    println!("Verified OK: {}@{}", v.image, v.digest);
    for c in &v.verified {
        println!("  - {} at {}", c.format, c.location);
        match &c.verified.identity {
            Some(id) => println!(
                "    identity:  {} (issuer {})",
                id.subject,
                id.issuer.as_deref().unwrap_or("none")
            ),
            None => println!("    signer:    managed key"),
        }
        if let SignedContent::Dsse { statement, .. } = &c.verified.content {
            println!("    predicate: {}", statement.predicate_type);
        }
        match c.verified.verified_times.first() {
            Some((t, source)) => println!("    signed at: {} ({source})", format_rfc3339(*t)),
            None => println!("    signed at: (no verified time)"),
        }
        if let Some(i) = c.verified.log_index {
            println!("    log index: {i}");
        }
    }
    for r in &v.rejected {
        println!("  (not verified) {r}");
    }
    println!("  registry round trips: {}", v.round_trips);
}

fn verdict_json(v: &ImageVerdict) -> serde_json::Value {
    let verified: Vec<_> = v
        .verified
        .iter()
        .map(|c| {
            let predicate = match &c.verified.content {
                SignedContent::Dsse { statement, .. } => Some(statement.predicate_type.clone()),
                SignedContent::MessageSignature => None,
            };
            serde_json::json!({
                "format": c.format.to_string(),
                "location": c.location,
                "identity": c.verified.identity.as_ref().map(|i| &i.subject),
                "issuer": c.verified.identity.as_ref().and_then(|i| i.issuer.as_ref()),
                "predicateType": predicate,
                "signingTime": c.verified.signing_time.map(|t| t.unix_timestamp()),
                "logIndex": c.verified.log_index,
            })
        })
        .collect();
    let rejected: Vec<_> = v
        .rejected
        .iter()
        .map(|r| serde_json::json!({"format": r.format.map(|f| f.to_string()), "location": r.location, "reason": r.label, "error": r.reason}))
        .collect();
    serde_json::json!({
        "verified": true,
        "image": format!("{}@{}", v.image, v.digest),
        "digest": v.digest.to_string(),
        "signatures": verified,
        "rejected": rejected,
        "roundTrips": v.round_trips,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosign_short_attestation_names_map_to_their_predicate_types() {
        assert_eq!(
            predicate_type("slsaprovenance"),
            "https://slsa.dev/provenance/v0.2"
        );
        assert_eq!(
            predicate_type("slsaprovenance1"),
            "https://slsa.dev/provenance/v1"
        );
        assert_eq!(predicate_type("spdxjson"), "https://spdx.dev/Document");
        assert_eq!(predicate_type("cyclonedx"), "https://cyclonedx.org/bom");
        assert_eq!(
            predicate_type("custom"),
            "https://cosign.sigstore.dev/attestation/v1"
        );
        assert_eq!(
            predicate_type("https://example.com/p"),
            "https://example.com/p"
        );
    }
}
