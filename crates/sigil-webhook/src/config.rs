//! Command-line settings of `sigil-webhook` and their translation into the
//! library's configuration (admission, server bounds, the static judge's
//! policy). The judge's own settings (registry client, trust root, caches,
//! policy snapshot) are `sigil-judge`'s [`JudgeArgs`], shared with the audit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use sha2::{Digest as _, Sha256};
use sigil_judge::args::JudgeArgs;
pub use sigil_judge::args::{PullSecretsArg, SnapshotFrom};
use sigil_registry::Want;
use sigil_registry::image::ImagePolicy;
use sigil_runtime::LogFormat;
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::verify::{SignerPolicy, VerificationPolicy};

use crate::admit::{AdmissionConfig, PinMode};
use crate::error::Error;
use crate::external_data::{ExternalDataConfig, ExternalDataSettings};
use crate::server::{Recycle, ServeLimits};
use crate::static_judge::StaticPolicy;

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
    #[arg(long, value_name = "PEM")]
    pub tls_cert: PathBuf,
    /// PEM private key of the serving certificate.
    #[arg(long, value_name = "PEM")]
    pub tls_key: PathBuf,
    /// How often the certificate files are checked for changes, in seconds.
    #[arg(long, default_value_t = 5)]
    pub cert_poll_seconds: u64,
    /// Milliseconds of --timeout-seconds kept to answer and cross the network.
    #[arg(long, default_value_t = 1000)]
    pub deadline_margin_ms: u64,
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
    /// End a keep-alive connection after this many answers (0: never), so
    /// that the API server opens a new one, which may reach another replica.
    /// HTTP/1.1: the last answer says `Connection: close`; HTTP/2: a GOAWAY
    /// after the streams in flight. A review is never cut.
    #[arg(long, default_value_t = 100)]
    pub connection_max_requests: u64,
    /// End a keep-alive connection at its first answer after this age, in
    /// seconds (0: never); HTTP/2 connections get a GOAWAY at that age.
    #[arg(long, default_value_t = 30)]
    pub connection_max_age_seconds: u64,
    /// Draw both connection bounds per connection within this many percent
    /// either side, so that connections do not end in lockstep (0-50).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u8).range(0..=50))]
    pub connection_jitter_percent: u8,
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
    /// Seconds a tag→digest resolution stays cached.
    #[arg(long, default_value_t = 30)]
    pub digest_ttl_seconds: u64,
    /// HTTPS address of the Gatekeeper external-data provider (`POST
    /// /verify`, answering Gatekeeper's ProviderRequests with the verdicts
    /// of `/validate`); off unless given. Needs --gatekeeper-client-ca.
    #[arg(long, requires = "gatekeeper_client_ca")]
    pub gatekeeper_listen: Option<SocketAddr>,
    /// PEM CA bundle every client of --gatekeeper-listen must present a
    /// certificate of (mutual TLS): Gatekeeper's own CA, `ca.crt` of its
    /// gatekeeper-webhook-server-cert Secret. Re-read when it changes
    /// (polled every --cert-poll-seconds).
    #[arg(long, value_name = "PEM", requires = "gatekeeper_listen")]
    pub gatekeeper_client_ca: Option<PathBuf>,
    /// The Gatekeeper Provider's spec.timeout, in seconds: the provider
    /// answers within it, less a margin (--deadline-margin-ms, at most
    /// half of it).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=30))]
    pub gatekeeper_timeout_seconds: u64,
    /// Most keys (images) in one Gatekeeper request.
    #[arg(long, default_value_t = 1024)]
    pub gatekeeper_max_keys: usize,
    /// Largest Gatekeeper request body read, in bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub gatekeeper_max_body_bytes: usize,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// The judge's settings, shared with `sigil-audit`.
    #[command(flatten)]
    pub judge: JudgeArgs,
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

impl Args {
    /// Admission settings.
    pub fn admission(&self) -> AdmissionConfig {
        AdmissionConfig {
            timeout: Duration::from_secs(self.judge.timeout_seconds),
            margin: Duration::from_millis(self.deadline_margin_ms),
            excluded_namespaces: self.judge.excluded_namespaces(),
            pin: match self.pin {
                PinArg::Matched => PinMode::Matched,
                PinArg::All => PinMode::All,
                PinArg::Off => PinMode::Off,
            },
            pin_templates: self.pin_templates,
            max_body_bytes: self.max_body_bytes,
            allow_unpinned: self.allow_unpinned,
            cache: self
                .judge
                .cache_config(Duration::from_secs(self.digest_ttl_seconds)),
        }
    }

    /// The Gatekeeper provider's listener and bounds, when it is on.
    pub fn external_data(&self) -> Option<ExternalDataSettings> {
        let listen = self.gatekeeper_listen?;
        let client_ca = self.gatekeeper_client_ca.clone()?;
        Some(ExternalDataSettings {
            listen,
            client_ca,
            config: ExternalDataConfig {
                timeout: Duration::from_secs(self.gatekeeper_timeout_seconds),
                margin: Duration::from_millis(self.deadline_margin_ms),
                max_keys: self.gatekeeper_max_keys.max(1),
                max_body_bytes: self.gatekeeper_max_body_bytes,
            },
        })
    }

    /// Server bounds.
    pub fn serve_limits(&self) -> ServeLimits {
        ServeLimits {
            drain: Duration::from_secs(self.drain_seconds),
            recycle: Recycle {
                max_requests: self.connection_max_requests,
                max_age: (self.connection_max_age_seconds != 0)
                    .then(|| Duration::from_secs(self.connection_max_age_seconds)),
                jitter_percent: self.connection_jitter_percent,
            },
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
                    claims: Vec::new(),
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
            self.judge.no_match
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
            no_match: self.judge.no_match,
            fingerprint,
            allowed_registries: self.judge.allowed_registries()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let base = ["sigil-webhook", "--tls-cert", "c.pem", "--tls-key", "k.pem"];
        Args::try_parse_from(base.iter().chain(extra))
    }

    #[test]
    fn the_gatekeeper_provider_is_off_unless_its_listener_and_client_ca_are_both_given() {
        assert!(parse(&[]).unwrap().external_data().is_none());
        assert!(parse(&["--gatekeeper-listen", "0.0.0.0:8444"]).is_err());
        assert!(parse(&["--gatekeeper-client-ca", "ca.crt"]).is_err());
        let args = parse(&[
            "--gatekeeper-listen",
            "0.0.0.0:8444",
            "--gatekeeper-client-ca",
            "ca.crt",
            "--gatekeeper-timeout-seconds",
            "5",
            "--gatekeeper-max-keys",
            "0",
            "--deadline-margin-ms",
            "700",
        ])
        .unwrap();
        let gk = args.external_data().unwrap();
        assert_eq!(gk.listen, "0.0.0.0:8444".parse().unwrap());
        assert_eq!(gk.client_ca, PathBuf::from("ca.crt"));
        assert_eq!(gk.config.timeout, Duration::from_secs(5));
        assert_eq!(gk.config.margin, Duration::from_millis(700));
        assert_eq!(gk.config.max_keys, 1, "at least one key is allowed");
        assert!(parse(&["--gatekeeper-timeout-seconds", "31"]).is_err());
    }
}
