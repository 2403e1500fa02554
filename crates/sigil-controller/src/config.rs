//! Command-line and environment settings.

use std::time::Duration;

use clap::{Parser, ValueEnum};
use sigil_runtime::LogFormat;

/// sigil-controller's settings.
#[derive(Parser, Debug, Clone)]
#[command(name = "sigil-controller", version, about)]
pub struct Args {
    /// sigil's namespace: where the snapshot, TLS and referenced Secrets and
    /// ConfigMaps, and the Lease live.
    #[arg(long, env = "POD_NAMESPACE", default_value = "sigil-system")]
    pub namespace: String,
    /// This replica's identity in the Lease (the pod name).
    #[arg(long, env = "POD_NAME", default_value = "sigil-controller")]
    pub identity: String,
    /// Address of the metrics and health endpoints.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "sigil-controller")]
    pub lease_name: String,
    /// How long a Lease stays valid without renewal (seconds); a standby
    /// takes over within this time after the leader dies.
    #[arg(
        long = "lease-duration-seconds",
        alias = "lease-duration-secs",
        default_value_t = 15
    )]
    pub lease_duration_secs: u64,
    /// How long the leader keeps leading while renewals fail (seconds);
    /// shorter than the lease duration so it stops before a standby starts.
    #[arg(
        long = "renew-deadline-seconds",
        alias = "renew-deadline-secs",
        default_value_t = 10
    )]
    pub renew_deadline_secs: u64,
    /// How often the Lease is renewed or its acquisition retried (seconds).
    #[arg(
        long = "retry-period-seconds",
        alias = "retry-period-secs",
        default_value_t = 2
    )]
    pub retry_period_secs: u64,
    /// How often remote TrustRoots, and the built-in Sigstore root, are
    /// refreshed from their TUF mirror (seconds).
    #[arg(
        long = "trust-root-refresh-seconds",
        alias = "trust-root-refresh-secs",
        default_value_t = 3600
    )]
    pub trust_root_refresh_secs: u64,
    /// The Sigstore instance whose trust root authorities without a
    /// trustRootRef verify against while no TrustRoot is annotated
    /// policy.sigil.dev/default-trust-root: its TUF root of trust and its
    /// trusted_root.json (the fallback) are built into sigil.
    #[arg(long, value_enum, default_value_t = SigstoreInstance::PublicGood)]
    pub sigstore_instance: SigstoreInstance,
    /// The TUF mirror that root is kept fresh from (default: the instance's,
    /// https://tuf-repo-cdn.sigstore.dev for public-good).
    #[arg(long, value_name = "URL", conflicts_with = "tuf_offline")]
    pub tuf_mirror: Option<String>,
    /// Never contact a TUF mirror for the built-in root and use the copy
    /// built into sigil (air-gapped clusters; update sigil to update it).
    #[arg(long)]
    pub tuf_offline: bool,
    /// How long one request to a TUF mirror may take (seconds); connecting
    /// takes at most 5 of them.
    #[arg(
        long = "tuf-timeout-seconds",
        alias = "tuf-timeout-secs",
        default_value_t = 10
    )]
    pub tuf_timeout_secs: u64,
    /// Name of the Secret, in sigil's namespace, that keeps each TUF
    /// repository's trusted root and last verified versions across restarts
    /// (rollback protection).
    #[arg(long, default_value = "sigil-tuf-state")]
    pub tuf_state_secret: String,
    /// How many bytes of the policy snapshot (as JSON) one namespace's
    /// ImagePolicies may take together; a change past it is refused on that
    /// ImagePolicy's status (Ready=False/SnapshotBudget).
    #[arg(long, value_name = "BYTES", default_value_t = crate::budget::DEFAULT_PER_NAMESPACE)]
    pub image_policy_snapshot_bytes_per_namespace: usize,
    /// How many bytes of the policy snapshot the ImagePolicies of all
    /// namespaces may take together (at most half the snapshot: the rest is
    /// kept for ClusterImagePolicies, TrustRoots and the built-in root).
    #[arg(long, value_name = "BYTES", default_value_t = crate::budget::DEFAULT_TOTAL)]
    pub image_policy_snapshot_bytes: usize,
    /// Who keeps the webhook's serving certificate and the configurations'
    /// caBundle: this controller, or something else (cert-manager, or a
    /// webhook run out of cluster whose configuration carries its own
    /// caBundle).
    #[arg(long, value_enum, default_value_t = WebhookTls::Managed)]
    pub webhook_tls: WebhookTls,
    /// Same as `--webhook-tls external` (kept for existing installs).
    #[arg(long, conflicts_with = "webhook_tls")]
    pub cert_manager: bool,
    /// Name of the webhook's Service (its DNS names go into the certificate).
    #[arg(long, default_value = "sigil-webhook")]
    pub webhook_service: String,
    /// The CUE module (`cue.wasm`) that checks `type: cue` policies when
    /// they are compiled, read only once a policy uses CUE. Default:
    /// $SIGIL_CUE_MODULE, else `../lib/sigil/cue.wasm` beside this binary
    /// (`/usr/local/lib/sigil/cue.wasm` in the image). Without it a CUE
    /// policy is not Ready and its status names the path.
    #[arg(long, value_name = "PATH")]
    pub cue_module: Option<std::path::PathBuf>,
    /// Memory a Rego policy may use when the controller evaluates it once
    /// on an empty document (its status says when it crosses a bound
    /// there), in MiB: keep it equal to the webhook's
    /// --rego-memory-limit-mib.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(32..=4096))]
    pub rego_memory_limit_mib: u64,
    /// Time that evaluation may take, in milliseconds: keep it equal to the
    /// webhook's --rego-time-limit-ms.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60000))]
    pub rego_time_limit_ms: u64,
    /// Name of the Secret holding the webhook's CA and serving certificate.
    #[arg(long, default_value = "sigil-webhook-tls")]
    pub webhook_tls_secret: String,
    /// Name of sigil's MutatingWebhookConfiguration.
    #[arg(long, default_value = "sigil-webhook")]
    pub mutating_webhook: String,
    /// Name of sigil's ValidatingWebhookConfiguration.
    #[arg(long, default_value = "sigil-webhook")]
    pub validating_webhook: String,
    /// A Gatekeeper external-data Provider (externaldata.gatekeeper.sh)
    /// whose spec.caBundle is kept equal to the webhook's CA, as both
    /// configurations' are: sigil's Gatekeeper provider serves the webhook's
    /// certificate. Only while this controller manages the webhook's TLS.
    #[arg(long, value_name = "NAME")]
    pub gatekeeper_provider: Option<String>,
    /// How often the certificates are checked (seconds); webhook
    /// configuration changes are also watched.
    #[arg(
        long = "tls-check-seconds",
        alias = "tls-check-secs",
        default_value_t = 600
    )]
    pub tls_check_secs: u64,
    /// How often a `key.kms` public key is fetched again (seconds); while
    /// the KMS cannot be reached the last good key stays in force and the
    /// policy is retried every 30 s.
    #[arg(
        long = "kms-refresh-seconds",
        alias = "kms-refresh-secs",
        default_value_t = 300
    )]
    pub kms_refresh_secs: u64,
    /// Time for one KMS request (seconds).
    #[arg(
        long = "kms-timeout-seconds",
        alias = "kms-timeout-secs",
        default_value_t = 10
    )]
    pub kms_timeout_secs: u64,
    /// A Secret in sigil's namespace whose entries (VAULT_ADDR, VAULT_TOKEN,
    /// AWS_ACCESS_KEY_ID, GOOGLE_APPLICATION_CREDENTIALS, AZURE_CLIENT_ID, …)
    /// set that provider's KMS settings over the controller's environment,
    /// as PROVIDER=NAME with PROVIDER one of hashivault, awskms, gcpkms,
    /// azurekms (repeatable).
    #[arg(long, value_name = "PROVIDER=NAME", value_parser = crate::kms::parse_credentials_flag)]
    pub kms_credentials_secret: Vec<(sigil_kms::Provider, String)>,
    /// A host a `key.kms` reference may name besides the provider's
    /// documented endpoints (Azure `*.vault.azure.net` and its sovereign
    /// clouds, the regional AWS KMS and STS endpoints, Google's): a private
    /// endpoint or an emulator, as host, host:port or *.domain (repeatable).
    /// Hosts the KMS settings themselves name (VAULT_ADDR,
    /// AWS_ENDPOINT_URL_KMS, …) need no listing.
    #[arg(long, value_name = "HOST", value_parser = sigil_kms::HostRule::parse)]
    pub kms_allow_host: Vec<sigil_kms::HostRule>,
    /// Addresses the controller's own fetches (KMS keys, `policy.remote`
    /// modules) may reach although refused by default: link-local and cloud
    /// metadata addresses, and loopback for what an ImagePolicy names; as
    /// CIDRs or single addresses (repeatable).
    #[arg(long, value_name = "CIDR", value_parser = address_flag)]
    pub allow_address: Vec<String>,
    /// More addresses the controller's own fetches never reach, e.g. the
    /// cluster's Service and Pod ranges (repeatable).
    #[arg(long, value_name = "CIDR", value_parser = address_flag)]
    pub deny_address: Vec<String>,
    /// A registry namespaces' ImagePolicies may name in their image globs
    /// and `source[].oci` (repeatable; `*` within a name, e.g.
    /// `registry.example:5000` or `*.corp.example`). Unset: the registries
    /// the ClusterImagePolicies name. An ImagePolicy naming another is not
    /// Ready (`RegistryNotAllowed`) and is not enforced.
    #[arg(long, value_name = "HOST", value_parser = crate::tenant_registries::registry_flag)]
    pub image_policy_registry: Vec<String>,
    /// Serve policy-controller's own objects as they are: convert each
    /// policy.sigstore.dev ClusterImagePolicy and TrustRoot into the
    /// policy.sigil.dev object of the same name (as `sigil policy convert`
    /// does) and report on the source whether sigil enforces it. Refused
    /// while policy-controller's webhook configuration exists. Off: objects
    /// converted earlier are deleted.
    #[arg(long)]
    pub serve_policy_controller_objects: bool,
}

/// Who handles webhook TLS.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookTls {
    /// The controller issues the certificate into the TLS Secret and writes
    /// `caBundle` into the webhook configurations.
    Managed,
    /// Something else does; the controller touches neither.
    External,
}

/// A Sigstore instance sigil has the TUF root of trust of.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigstoreInstance {
    /// The public-good instance (fulcio.sigstore.dev, rekor.sigstore.dev).
    PublicGood,
    /// The staging instance (sigstage.dev), for testing.
    Staging,
}

impl SigstoreInstance {
    /// `public-good` or `staging`.
    pub fn name(self) -> &'static str {
        match self {
            Self::PublicGood => "public-good",
            Self::Staging => "staging",
        }
    }

    /// The embedded TUF root of trust (`root.json`).
    pub fn tuf_root(self) -> &'static str {
        match self {
            Self::PublicGood => sigil_verifier::trust::PUBLIC_GOOD_TUF_ROOT,
            Self::Staging => sigil_verifier::trust::STAGING_TUF_ROOT,
        }
    }

    /// The instance's TUF mirror.
    pub fn tuf_mirror(self) -> &'static str {
        match self {
            Self::PublicGood => sigil_verifier::trust::PUBLIC_GOOD_TUF_MIRROR,
            Self::Staging => sigil_verifier::trust::STAGING_TUF_MIRROR,
        }
    }

    /// The embedded `trusted_root.json`, used until the mirror is reached.
    pub fn embedded_trusted_root(self) -> &'static str {
        match self {
            Self::PublicGood => sigil_verifier::trust::PUBLIC_GOOD_JSON,
            Self::Staging => sigil_verifier::trust::STAGING_JSON,
        }
    }
}

impl Default for Args {
    fn default() -> Self {
        Self::parse_from(["sigil-controller"])
    }
}

impl Args {
    /// Where the CUE module is: `--cue-module`, else
    /// [`sigil_cue::CueConfig::from_env`].
    pub fn cue_config(&self) -> sigil_cue::CueConfig {
        match &self.cue_module {
            Some(path) => sigil_cue::CueConfig::new(path),
            None => sigil_cue::CueConfig::from_env(),
        }
    }

    /// The Rego sandbox of the status check: one worker process, this
    /// binary started again, bounded as the webhook's are by default.
    pub fn rego_config(&self) -> sigil_policy::rego::SandboxConfig {
        let mut config = sigil_policy::rego::SandboxConfig::this_binary();
        config.workers = 1;
        config.limits.memory_bytes = self.rego_memory_limit_mib << 20;
        config.limits.time = Duration::from_millis(self.rego_time_limit_ms);
        config
    }
    /// Lease validity.
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(self.lease_duration_secs.max(1))
    }
    /// Renew deadline.
    pub fn renew_deadline(&self) -> Duration {
        Duration::from_secs(self.renew_deadline_secs.max(1))
    }
    /// Retry period.
    pub fn retry_period(&self) -> Duration {
        Duration::from_secs(self.retry_period_secs.max(1))
    }
    /// Remote trust-root refresh interval.
    pub fn trust_root_refresh(&self) -> Duration {
        Duration::from_secs(self.trust_root_refresh_secs.max(60))
    }
    /// How soon a failed TUF refresh of the built-in root is retried: the
    /// refresh interval, at most five minutes.
    pub fn tuf_retry(&self) -> Duration {
        self.trust_root_refresh().min(Duration::from_secs(300))
    }
    /// The share of the policy snapshot ImagePolicies may take.
    pub fn budget(&self) -> crate::budget::TenantBudget {
        crate::budget::TenantBudget::new(
            self.image_policy_snapshot_bytes_per_namespace,
            self.image_policy_snapshot_bytes,
        )
    }
    /// The bound on one TUF mirror request.
    pub fn tuf_timeout(&self) -> Duration {
        Duration::from_secs(self.tuf_timeout_secs.clamp(1, 120))
    }
    /// The mirror the built-in root is refreshed from, or `None` offline.
    pub fn tuf_mirror_url(&self) -> Option<String> {
        if self.tuf_offline {
            return None;
        }
        Some(
            self.tuf_mirror
                .clone()
                .unwrap_or_else(|| self.sigstore_instance.tuf_mirror().to_owned()),
        )
    }
    /// Whether this controller keeps the webhook certificate and `caBundle`
    /// (`--webhook-tls managed` without `--cert-manager`).
    pub fn manages_webhook_tls(&self) -> bool {
        self.webhook_tls == WebhookTls::Managed && !self.cert_manager
    }
    /// KMS key refresh interval.
    pub fn kms_refresh(&self) -> Duration {
        Duration::from_secs(self.kms_refresh_secs.max(10))
    }
    /// Time for one KMS request.
    pub fn kms_timeout(&self) -> Duration {
        Duration::from_secs(self.kms_timeout_secs.max(1))
    }
    /// TLS check interval.
    pub fn tls_check(&self) -> Duration {
        Duration::from_secs(self.tls_check_secs.max(10))
    }
}

/// Checks `--allow-address` / `--deny-address` values when they are parsed
/// (the egress module reads them again, already checked).
fn address_flag(value: &str) -> Result<String, String> {
    sigil_registry::egress::parse_net(value).map(|_| value.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("sigil-controller").chain(flags.iter().copied()))
    }

    #[test]
    fn time_flags_end_in_seconds_and_the_old_secs_names_still_parse() {
        let new = parse(&[
            "--lease-duration-seconds=20",
            "--renew-deadline-seconds=12",
            "--retry-period-seconds=3",
            "--trust-root-refresh-seconds=7200",
            "--tuf-timeout-seconds=4",
            "--tls-check-seconds=60",
            "--kms-refresh-seconds=120",
            "--kms-timeout-seconds=5",
        ])
        .unwrap();
        let old = parse(&[
            "--lease-duration-secs=20",
            "--renew-deadline-secs=12",
            "--retry-period-secs=3",
            "--trust-root-refresh-secs=7200",
            "--tuf-timeout-secs=4",
            "--tls-check-secs=60",
            "--kms-refresh-secs=120",
            "--kms-timeout-secs=5",
        ])
        .unwrap();
        assert_eq!(format!("{new:?}"), format!("{old:?}"));
        assert_eq!(new.lease_duration_secs, 20);
        assert_eq!(new.kms_timeout_secs, 5);
        let help = <Args as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        assert!(!help.contains("-secs"), "old names stay hidden: {help}");
    }

    #[test]
    fn webhook_tls_is_managed_by_default() {
        assert!(parse(&[]).unwrap().manages_webhook_tls());
        assert!(
            parse(&["--webhook-tls", "managed"])
                .unwrap()
                .manages_webhook_tls()
        );
    }

    #[test]
    fn webhook_tls_external_and_the_cert_manager_alias_turn_management_off() {
        let external = parse(&["--webhook-tls", "external"]).unwrap();
        assert_eq!(external.webhook_tls, WebhookTls::External);
        assert!(!external.manages_webhook_tls());
        assert!(!parse(&["--cert-manager"]).unwrap().manages_webhook_tls());
    }

    #[test]
    fn kms_credentials_secrets_are_named_per_provider() {
        let args = parse(&[
            "--kms-credentials-secret",
            "hashivault=vault-token",
            "--kms-credentials-secret",
            "openbao=bao",
        ])
        .unwrap();
        assert_eq!(
            args.kms_credentials_secret,
            vec![
                (sigil_kms::Provider::Vault, "vault-token".to_owned()),
                (sigil_kms::Provider::Vault, "bao".to_owned())
            ]
        );
        let err = parse(&["--kms-credentials-secret", "s3=x"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a KMS provider"), "{err}");
        assert!(parse(&["--kms-credentials-secret", "awskms"]).is_err());
    }

    #[test]
    fn the_builtin_root_follows_the_public_good_mirror_unless_told_otherwise() {
        let default = parse(&[]).unwrap();
        assert_eq!(default.sigstore_instance, SigstoreInstance::PublicGood);
        assert_eq!(
            default.tuf_mirror_url().as_deref(),
            Some("https://tuf-repo-cdn.sigstore.dev")
        );
        let staging = parse(&["--sigstore-instance", "staging"]).unwrap();
        assert_eq!(
            staging.tuf_mirror_url().as_deref(),
            Some("https://tuf-repo-cdn.sigstage.dev")
        );
        let own = parse(&["--tuf-mirror", "http://tuf.tuf-system.svc"]).unwrap();
        assert_eq!(
            own.tuf_mirror_url().as_deref(),
            Some("http://tuf.tuf-system.svc")
        );
        assert_eq!(parse(&["--tuf-offline"]).unwrap().tuf_mirror_url(), None);
        assert!(parse(&["--tuf-offline", "--tuf-mirror", "http://m"]).is_err());
    }

    #[test]
    fn cert_manager_alias_cannot_be_combined_with_an_explicit_webhook_tls() {
        assert!(parse(&["--cert-manager", "--webhook-tls", "managed"]).is_err());
        assert!(parse(&["--webhook-tls", "bogus"]).is_err());
    }
}
