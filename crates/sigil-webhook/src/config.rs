//! Command-line settings of `sigil-webhook` and their translation into the
//! library's configuration (admission, caches, server bounds, the static
//! judge's policy and registry client).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use sha2::{Digest as _, Sha256};
use sigil_policy::glob::HostPattern;
use sigil_registry::egress::{AddressPolicy, parse_net};
use sigil_registry::image::ImagePolicy;
use sigil_registry::{ClientConfig, Credentials, Limits, MemoryBudget, Want};
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{SignerPolicy, VerificationPolicy};

use crate::admit::{AdmissionConfig, PinMode};
use crate::cache::CacheConfig;
use crate::error::Error;
use crate::server::ServeLimits;
use crate::static_judge::{NoMatch, StaticPolicy};

/// Which images `/mutate` pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PinArg {
    /// Images some policy selects.
    Matched,
    /// Every image.
    All,
    /// None.
    Off,
}

/// Where registry credentials of admitted objects come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PullSecretsArg {
    /// The pod template's `imagePullSecrets` (or its service account's) and
    /// the policies' `signaturePullSecrets`, read through the API.
    Kube,
    /// None: anonymous (plus `--docker-config`).
    None,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `sigil-webhook`: the admission server.
#[derive(Debug, Clone, Parser)]
#[command(name = "sigil-webhook", version, about)]
pub struct Args {
    /// HTTPS address of `/validate`, `/mutate`, `/healthz`, `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Plain-HTTP address of `/metrics`, `/healthz`, `/readyz`.
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    /// PEM serving certificate chain (reloaded when the file changes).
    /// Required unless --audit.
    #[arg(long, value_name = "PEM", required_unless_present = "audit")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of the serving certificate. Required unless --audit.
    #[arg(long, value_name = "PEM", required_unless_present = "audit")]
    pub tls_key: Option<PathBuf>,
    /// How often the certificate files are checked for changes, in seconds.
    #[arg(long, default_value_t = 5)]
    pub cert_poll_seconds: u64,
    /// The webhook configurations' `timeoutSeconds` (1..=30).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=30))]
    pub timeout_seconds: u64,
    /// Milliseconds of that timeout kept to answer and cross the network.
    #[arg(long, default_value_t = 1000)]
    pub deadline_margin_ms: u64,
    /// sigil's own namespace; never acted on.
    #[arg(long, default_value = "sigil-system")]
    pub namespace: String,
    /// Other namespaces never acted on (repeatable).
    #[arg(long = "exclude-namespace", default_value = "kube-system")]
    pub exclude_namespaces: Vec<String>,
    /// Which images `/mutate` pins to digests.
    #[arg(long, value_enum, default_value = "matched")]
    pub pin: PinArg,
    /// Pin tags to digests in workload templates (Deployment, StatefulSet,
    /// DaemonSet, ReplicaSet, Job, CronJob, ReplicationController) too. Off
    /// by default: templates stay as written, so GitOps tools see no drift;
    /// their tags are verified at what they point to, and the Pods they
    /// create are pinned.
    #[arg(long)]
    pub pin_templates: bool,
    /// Admit (after verifying what the tag points to now) an image a policy
    /// selects that reaches `/validate` as a tag although `--pin` is on.
    /// Off by default: it means another mutating webhook rewrote the image
    /// after sigil's, or pinning did not run, and the kubelet could pull a
    /// different image later.
    #[arg(long)]
    pub allow_unpinned: bool,
    /// Largest AdmissionReview body read, in bytes.
    #[arg(long, default_value_t = 7 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Seconds a drain may take after SIGTERM.
    #[arg(long, default_value_t = 20)]
    pub drain_seconds: u64,
    /// Verdicts cached at most.
    #[arg(long, default_value_t = 200_000)]
    pub verdict_cache_size: u64,
    /// Seconds a clean allow stays cached.
    #[arg(long, default_value_t = 600)]
    pub verdict_ttl_seconds: u64,
    /// Seconds a denial or warning stays cached.
    #[arg(long, default_value_t = 10)]
    pub negative_ttl_seconds: u64,
    /// Seconds a tag→digest resolution stays cached.
    #[arg(long, default_value_t = 30)]
    pub digest_ttl_seconds: u64,
    /// Registry calls in flight per registry host.
    #[arg(long, default_value_t = 16)]
    pub per_host_concurrency: usize,
    /// MiB of registry responses held at once, from all registries: a
    /// bound on memory whatever registries serve (reads past it are
    /// denials, never waits).
    #[arg(long, default_value_t = 96)]
    pub registry_memory_mib: u64,
    /// MiB of registry responses held at once from any one registry host.
    #[arg(long, default_value_t = 32)]
    pub registry_memory_per_host_mib: u64,
    /// Name of the static policy in messages.
    #[arg(long, default_value = "sigil-static")]
    pub policy_name: String,
    /// Image globs the static policy selects (repeatable).
    #[arg(long = "image-glob", default_value = "**")]
    pub image_globs: Vec<String>,
    /// PEM public key that must have signed (managed-key authority).
    #[arg(long, value_name = "PEM", conflicts_with_all = ["certificate_identity", "certificate_identity_regexp"])]
    pub key: Option<PathBuf>,
    /// Keyless: expected certificate identity (exact).
    #[arg(long)]
    pub certificate_identity: Option<String>,
    /// Keyless: expected certificate identity (unanchored regex, as cosign).
    #[arg(long, conflicts_with = "certificate_identity")]
    pub certificate_identity_regexp: Option<String>,
    /// Keyless: expected OIDC issuer (exact).
    #[arg(long)]
    pub certificate_oidc_issuer: Option<String>,
    /// Keyless: expected OIDC issuer (regex).
    #[arg(long, conflicts_with = "certificate_oidc_issuer")]
    pub certificate_oidc_issuer_regexp: Option<String>,
    /// Accept key signatures without a transparency-log entry (never the default).
    #[arg(long)]
    pub insecure_ignore_tlog: bool,
    /// `mode: warn`: failures become admission warnings.
    #[arg(long)]
    pub warn: bool,
    /// What images no glob selects get.
    #[arg(long, value_enum, default_value = "deny")]
    pub no_match: NoMatch,
    /// Trusted root JSON (default: the embedded Sigstore public-good root).
    /// With a policy snapshot it is only the fallback: a v2 snapshot's
    /// default trust root or built-in Sigstore root takes precedence.
    #[arg(long, value_name = "JSON")]
    pub trusted_root: Option<PathBuf>,
    /// Talk plain HTTP to this registry host (repeatable; for local registries).
    #[arg(long, value_name = "HOST")]
    pub insecure_registry: Vec<String>,
    /// A registry host sigil may contact besides those the policies' globs
    /// and `source[].oci` select (repeatable; `*` within a name, e.g.
    /// `mirror.example:5000` or `*.corp.example`).
    #[arg(long, value_name = "HOST")]
    pub allow_registry: Vec<String>,
    /// Addresses registries may be at although sigil refuses them by
    /// default (loopback, link-local and cloud metadata, unspecified), as
    /// CIDRs or single addresses (repeatable; e.g. 127.0.0.0/8 for a
    /// registry on the host when the webhook runs there).
    #[arg(long, value_name = "CIDR")]
    pub allow_registry_address: Vec<String>,
    /// More addresses sigil never contacts for registries, e.g. the
    /// cluster's Service and Pod ranges (repeatable).
    #[arg(long, value_name = "CIDR")]
    pub deny_registry_address: Vec<String>,
    /// Docker config with node-wide registry credentials.
    #[arg(long, value_name = "FILE")]
    pub docker_config: Option<PathBuf>,
    /// Where admitted objects' registry credentials come from: `kube` reads
    /// their pull secrets (needs get on secrets and serviceaccounts).
    #[arg(long, value_enum, default_value = "none")]
    pub pull_secrets: PullSecretsArg,
    /// With `--pull-secrets kube`: read Secrets and ServiceAccounts only in
    /// these namespaces (repeatable); objects elsewhere pull anonymously.
    /// Unset: any namespace (needs cluster-wide `get`).
    #[arg(long, value_name = "NAMESPACE")]
    pub pull_secret_namespace: Vec<String>,
    /// Seconds a set of pull secrets read through the API stays cached.
    #[arg(long, default_value_t = 30)]
    pub pull_secret_ttl_seconds: u64,
    /// Seconds discovered signature material (referrers, bundles, legacy
    /// signatures) of a digest stays cached; 0 disables the cache.
    #[arg(long, default_value_t = 30)]
    pub signature_ttl_seconds: u64,
    /// PEM CA certificates trusted for registries in addition to the
    /// built-in web roots (private registries).
    #[arg(long, value_name = "PEM")]
    pub registry_ca_file: Option<PathBuf>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Enforce the policy snapshot in this file (the controller's
    /// `snapshot.json`), polled for changes; for local runs and tests.
    #[arg(long, value_name = "PATH", conflicts_with = "policy_snapshot_secret")]
    pub policy_snapshot_file: Option<PathBuf>,
    /// Enforce the policy snapshot the controller publishes in this Secret,
    /// watched through the API.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub policy_snapshot_secret: Option<String>,
    /// How often `--policy-snapshot-file` is checked for changes, in seconds.
    #[arg(long, default_value_t = 2)]
    pub snapshot_poll_seconds: u64,
    /// The CUE module (`cue.wasm`) that evaluates `type: cue` policies,
    /// read only once a policy uses CUE. Default: $SIGIL_CUE_MODULE, else
    /// `../lib/sigil/cue.wasm` beside this binary
    /// (`/usr/local/lib/sigil/cue.wasm` in the image).
    #[arg(long, value_name = "PATH")]
    pub cue_module: Option<PathBuf>,
    /// Threads evaluating CUE policies, each with its own instance of the
    /// module (about 20 MiB at rest, up to --cue-memory-limit-mib).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub cue_workers: u64,
    /// Memory one CUE evaluation may use, in MiB; beyond it the evaluation
    /// fails (the image is denied) and its instance is replaced.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(32..=4096))]
    pub cue_memory_limit_mib: u64,
    /// Time one CUE evaluation may take, in milliseconds; its fuel budget
    /// (the deterministic bound) follows from it.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=60000))]
    pub cue_time_limit_ms: u64,
    /// The audit mode.
    #[command(flatten)]
    pub audit: crate::audit::AuditArgs,
}

fn matcher(
    exact: &Option<String>,
    re: &Option<String>,
    flag: &str,
) -> Result<IdentityMatcher, Error> {
    match (exact, re) {
        (Some(s), None) => Ok(IdentityMatcher::Exact(s.clone())),
        (None, Some(r)) => regex::Regex::new(r)
            .map(IdentityMatcher::Regex)
            .map_err(|e| {
                Error::Config(format!(
                    "--{flag}-regexp `{r}` is not a regular expression: {e}"
                ))
            }),
        _ => Err(Error::Config(format!("give --{flag} or --{flag}-regexp"))),
    }
}

/// Where the policy snapshot comes from, when the webhook enforces one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotFrom {
    /// A file, polled.
    File(PathBuf),
    /// A Secret, watched.
    Secret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl Args {
    /// The policy snapshot source, or `None` for the flag-only static policy.
    pub fn snapshot_from(&self) -> Result<Option<SnapshotFrom>, Error> {
        if let Some(path) = &self.policy_snapshot_file {
            return Ok(Some(SnapshotFrom::File(path.clone())));
        }
        let Some(spec) = &self.policy_snapshot_secret else {
            return Ok(None);
        };
        match spec.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Some(SnapshotFrom::Secret {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                }))
            }
            _ => Err(Error::Config(format!(
                "--policy-snapshot-secret `{spec}`: expected NAMESPACE/NAME, e.g. sigil-system/sigil-policy-snapshot"
            ))),
        }
    }

    /// Where the CUE module is and what one CUE evaluation may use.
    pub fn cue_config(&self) -> sigil_cue::CueConfig {
        let mut config = match &self.cue_module {
            Some(path) => sigil_cue::CueConfig::new(path),
            None => sigil_cue::CueConfig::from_env(),
        };
        config.limits = sigil_cue::Limits {
            memory_bytes: usize::try_from(self.cue_memory_limit_mib << 20).unwrap_or(usize::MAX),
            ..sigil_cue::Limits::for_time(Duration::from_millis(self.cue_time_limit_ms))
        };
        config.workers = usize::try_from(self.cue_workers).unwrap_or(1);
        config
    }

    /// What images no policy selects get, in the policy engine's terms.
    pub fn no_match_policy(&self) -> sigil_policy::model::NoMatchPolicy {
        use sigil_policy::model::NoMatchPolicy;
        match self.no_match {
            NoMatch::Deny => NoMatchPolicy::Deny,
            NoMatch::Warn => NoMatchPolicy::Warn,
            NoMatch::Allow => NoMatchPolicy::Allow,
        }
    }

    /// Admission settings.
    pub fn admission(&self) -> AdmissionConfig {
        let mut excluded = self.exclude_namespaces.clone();
        excluded.push(self.namespace.clone());
        AdmissionConfig {
            timeout: Duration::from_secs(self.timeout_seconds),
            margin: Duration::from_millis(self.deadline_margin_ms),
            excluded_namespaces: excluded,
            pin: match self.pin {
                PinArg::Matched => PinMode::Matched,
                PinArg::All => PinMode::All,
                PinArg::Off => PinMode::Off,
            },
            pin_templates: self.pin_templates,
            max_body_bytes: self.max_body_bytes,
            allow_unpinned: self.allow_unpinned,
            cache: CacheConfig {
                verdict_capacity: self.verdict_cache_size,
                digest_capacity: (self.verdict_cache_size / 4).max(1024),
                positive_ttl: Duration::from_secs(self.verdict_ttl_seconds),
                negative_ttl: Duration::from_secs(self.negative_ttl_seconds),
                digest_ttl: Duration::from_secs(self.digest_ttl_seconds),
                per_host_concurrency: self.per_host_concurrency,
            },
        }
    }

    /// Server bounds.
    pub fn serve_limits(&self) -> ServeLimits {
        ServeLimits {
            drain: Duration::from_secs(self.drain_seconds),
            ..ServeLimits::default()
        }
    }

    /// The static policy.
    pub fn static_policy(&self) -> Result<StaticPolicy, Error> {
        let keyless =
            self.certificate_identity.is_some() || self.certificate_identity_regexp.is_some();
        let (verification, authority, signer) = match (&self.key, keyless) {
            (Some(path), false) => {
                let pem = std::fs::read_to_string(path).map_err(|e| {
                    Error::Config(format!("cannot read --key {}: {e}", path.display()))
                })?;
                let key = PublicKey::from_pem(&pem).map_err(|e| {
                    Error::Config(format!("--key {} is not a public key: {e}", path.display()))
                })?;
                (
                    VerificationPolicy {
                        signer: SignerPolicy::Key(key),
                        require_tlog: !self.insecure_ignore_tlog,
                        key_hash: None,
                    },
                    "key",
                    format!("key:{}", hex::encode(Sha256::digest(pem.as_bytes()))),
                )
            }
            (None, true) => {
                let identity = IdentityPolicy {
                    subject: matcher(
                        &self.certificate_identity,
                        &self.certificate_identity_regexp,
                        "certificate-identity",
                    )?,
                    issuer: matcher(
                        &self.certificate_oidc_issuer,
                        &self.certificate_oidc_issuer_regexp,
                        "certificate-oidc-issuer",
                    )?,
                };
                (
                    VerificationPolicy {
                        signer: SignerPolicy::Keyless {
                            identities: vec![identity],
                            require_sct: true,
                        },
                        require_tlog: true,
                        key_hash: None,
                    },
                    "keyless",
                    format!(
                        "keyless:{:?}:{:?}:{:?}:{:?}",
                        self.certificate_identity,
                        self.certificate_identity_regexp,
                        self.certificate_oidc_issuer,
                        self.certificate_oidc_issuer_regexp
                    ),
                )
            }
            _ => {
                return Err(Error::Config(
                    "give either --key PEM, or --certificate-identity[-regexp] with --certificate-oidc-issuer[-regexp]".into(),
                ));
            }
        };
        let fingerprint = format!(
            "{}|{}|{signer}|tlog={}|warn={}|nomatch={:?}",
            self.policy_name,
            self.image_globs.join(","),
            !self.insecure_ignore_tlog,
            self.warn,
            self.no_match
        );
        Ok(StaticPolicy {
            name: self.policy_name.clone(),
            globs: self.image_globs.clone(),
            authority: authority.into(),
            image_policy: ImagePolicy {
                verification,
                want: Want::Signatures,
            },
            warn: self.warn,
            no_match: self.no_match,
            fingerprint,
            allowed_registries: self.allowed_registries()?,
        })
    }

    /// `--allow-registry`, compiled.
    pub fn allowed_registries(&self) -> Result<Vec<HostPattern>, Error> {
        self.allow_registry
            .iter()
            .map(|h| {
                HostPattern::allow(h).map_err(|_| {
                    Error::Config(format!(
                        "--allow-registry `{h}` is not a registry host (letters, digits, `-_.:[]`, `*` within a name), e.g. mirror.example:5000 or *.corp.example"
                    ))
                })
            })
            .collect()
    }

    /// The addresses registries may be at: everything but loopback,
    /// link-local, metadata, unspecified and multicast, adjusted by
    /// `--allow-registry-address` and `--deny-registry-address`.
    pub fn address_policy(&self) -> Result<AddressPolicy, Error> {
        let mut policy = AddressPolicy::without_loopback();
        for (flag, values, allow) in [
            (
                "--allow-registry-address",
                &self.allow_registry_address,
                true,
            ),
            (
                "--deny-registry-address",
                &self.deny_registry_address,
                false,
            ),
        ] {
            for v in values {
                let net = parse_net(v).map_err(|e| Error::Config(format!("{flag}: {e}")))?;
                policy = if allow {
                    policy.allow(net)
                } else {
                    policy.deny(net)
                };
            }
        }
        Ok(policy)
    }

    /// The trust root and an identifier of its content.
    pub fn trust_root(&self) -> Result<(TrustedRoot, String), Error> {
        match &self.trusted_root {
            Some(path) => {
                let json = std::fs::read_to_string(path).map_err(|e| {
                    Error::Config(format!(
                        "cannot read --trusted-root {}: {e}",
                        path.display()
                    ))
                })?;
                let root = TrustedRoot::from_json(&json).map_err(|e| {
                    Error::Config(format!("--trusted-root {} is invalid: {e}", path.display()))
                })?;
                Ok((root, hex::encode(Sha256::digest(json.as_bytes()))))
            }
            None => {
                let root = TrustedRoot::public_good()
                    .map_err(|e| Error::Config(format!("embedded trust root: {e}")))?;
                Ok((
                    root,
                    concat!("public-good@sigil-", env!("CARGO_PKG_VERSION")).to_string(),
                ))
            }
        }
    }

    /// The registry client settings (node-wide credentials, insecure hosts,
    /// limits within the admission deadline).
    pub fn client_config(&self) -> Result<ClientConfig, Error> {
        let credentials = match &self.docker_config {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| {
                    Error::Config(format!(
                        "cannot read --docker-config {}: {e}",
                        path.display()
                    ))
                })?;
                Credentials::from_docker_config_json(&bytes).map_err(|e| {
                    Error::Config(format!("--docker-config {}: {e}", path.display()))
                })?
            }
            None => Credentials::anonymous(),
        };
        let extra_roots_pem = match &self.registry_ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    Error::Config(format!(
                        "cannot read --registry-ca-file {}: {e}",
                        path.display()
                    ))
                })?;
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(Error::Config(format!(
                        "--registry-ca-file {} holds no PEM certificate",
                        path.display()
                    )));
                }
                pem
            }
            None => Vec::new(),
        };
        let budget = Duration::from_secs(self.timeout_seconds);
        Ok(ClientConfig {
            credentials,
            allow_insecure_all: false,
            insecure_hosts: self.insecure_registry.clone(),
            limits: Limits {
                request_timeout: budget,
                total_deadline: budget,
                ..Limits::default()
            },
            extra_roots_pem,
            observer: None,
            addresses: self.address_policy()?,
            scope: None,
            lookup: None,
            budget: Some(std::sync::Arc::new(MemoryBudget::new(
                self.registry_memory_mib.saturating_mul(1 << 20),
                self.registry_memory_per_host_mib.saturating_mul(1 << 20),
            ))),
        })
    }
}
