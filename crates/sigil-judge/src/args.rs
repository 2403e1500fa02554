//! The settings every judging program shares (`JudgeArgs`, flattened into
//! `sigil-webhook`'s and `sigil-audit`'s flags) and the one [`JudgeArgs::build`]
//! that turns them into a judge: the registry client, the trust root, the
//! pull-secret source and, given a snapshot source, the policy snapshot
//! judge fed from it. Admission and the audit build their judge here, so the
//! same flags mean the same judgement in both.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use sha2::{Digest as _, Sha256};
use sigil_compile::exception::ExceptionRules;
use sigil_policy::glob::HostPattern;
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::cloud::hosts::ExtraHost;
use sigil_registry::egress::{AddressPolicy, parse_net};
use sigil_registry::mirrors::MirrorMap;
use sigil_registry::ratelimit::RequestBudget;
use sigil_registry::{
    ClientConfig, Credentials, Keychain, KeychainSettings, Limits, MemoryBudget, ProviderId,
    RequestObserver, SharedCache, SharedCacheConfig, SharedCacheError,
};
use sigil_verifier::trust::TrustedRoot;
use tokio::task::JoinHandle;

use crate::cache::CacheConfig;
use crate::exceptions::ExceptionTable;
use crate::policy_judge::{PolicyJudge, PolicyJudgeError};
use crate::secrets::{AnyPullSecrets, KubePullSecrets, NoPullSecrets};
use crate::slots::HostSlots;
use crate::snapshot_source;

/// What an image no policy selects gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NoMatch {
    /// Deny it.
    Deny,
    /// Allow it with a warning.
    Warn,
    /// Allow it.
    Allow,
}

/// Where registry credentials of judged objects come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PullSecretsArg {
    /// The pod template's `imagePullSecrets` (or its service account's) and
    /// the policies' `signaturePullSecrets`, read through the API.
    Kube,
    /// None: anonymous (plus `--docker-config`).
    None,
}

/// Why a judge could not be built from its settings.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A setting is missing or invalid, or the API is out of reach.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The policy snapshot judge could not be built.
    #[error(transparent)]
    PolicyJudge(#[from] PolicyJudgeError),
}

/// The judge's settings, shared by admission and the audit.
#[derive(Debug, Clone, clap::Args)]
pub struct JudgeArgs {
    /// sigil's own namespace; never acted on.
    #[arg(long, default_value = "sigil-system")]
    pub namespace: String,
    /// Other namespaces never acted on (repeatable).
    #[arg(long = "exclude-namespace", default_value = "kube-system")]
    pub exclude_namespaces: Vec<String>,
    /// The webhook configurations' `timeoutSeconds` (1..=30): the time one
    /// image's judgement may take.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=30))]
    pub timeout_seconds: u64,
    /// Verdicts cached at most.
    #[arg(long, default_value_t = 200_000)]
    pub verdict_cache_size: u64,
    /// Seconds a clean allow stays cached.
    #[arg(long, default_value_t = 600)]
    pub verdict_ttl_seconds: u64,
    /// Seconds a denial or warning stays cached.
    #[arg(long, default_value_t = 10)]
    pub negative_ttl_seconds: u64,
    /// Registry requests in flight per registry host, shared fairly among
    /// namespaces (a slot is held only while a request to that host runs).
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
    /// What images no policy selects get.
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
    /// registry on the host when sigil runs there).
    #[arg(long, value_name = "CIDR")]
    pub allow_registry_address: Vec<String>,
    /// More addresses sigil never contacts for registries, e.g. the
    /// cluster's Service and Pod ranges (repeatable).
    #[arg(long, value_name = "CIDR")]
    pub deny_registry_address: Vec<String>,
    /// Docker config with node-wide registry credentials.
    #[arg(long, value_name = "FILE")]
    pub docker_config: Option<PathBuf>,
    /// A cloud provider that may give registry credentials for its own
    /// hosts, from sigil's own cloud identity, when a pod's pull secrets
    /// have none for the host (repeatable: ecr, gcp, acr; `none` for no
    /// provider). ecr: `<account>.dkr.ecr.<region>.amazonaws.com` in every
    /// form, and public.ecr.aws; gcp: gcr.io, `*.gcr.io`,
    /// `<location>-docker.pkg.dev`; acr: `*.azurecr.io`, `.cn`, `.us`.
    #[arg(
        long = "registry-credential-provider",
        value_name = "PROVIDER",
        default_values = ["ecr", "gcp", "acr"]
    )]
    pub registry_credential_providers: Vec<String>,
    /// A registry host a provider also serves, as PROVIDER=HOST (repeatable;
    /// `*.` for any name below a domain), e.g. acr=registry.corp.example for
    /// a private endpoint or proxy in front of a cloud registry.
    #[arg(long = "registry-credential-host", value_name = "PROVIDER=HOST")]
    pub registry_credential_hosts: Vec<String>,
    /// Requests per minute sigil sends to any one registry host (0: no
    /// bound): a storm of new images waits for the budget within each
    /// review's deadline rather than spend the registry's quota.
    #[arg(long, default_value_t = 0)]
    pub registry_requests_per_minute: u32,
    /// A registry host's own budget, as HOST=N requests per minute
    /// (repeatable; 0 for no bound), e.g. docker.io=60.
    #[arg(long = "registry-request-budget", value_name = "HOST=N")]
    pub registry_request_budgets: Vec<String>,
    /// A registry mirror or pull-through cache, as PREFIX=PLACE[,PLACE...]
    /// (repeatable): a repository under the registry or repository PREFIX
    /// the policies name is read at each place in turn (`[http://]host[/path]`,
    /// Harbor's proxy cache as `harbor.example.com/dockerhub-proxy`); the
    /// upstream only where listed, e.g.
    /// `docker.io=harbor.example.com/dockerhub-proxy,docker.io`.
    #[arg(long = "registry-mirror", value_name = "PREFIX=PLACES")]
    pub registry_mirrors: Vec<String>,
    /// Mirrors in the nodes' own form (repeatable): a containerd `certs.d`
    /// directory (`DIR/<registry>/hosts.toml`) or CRI-O's `registries.conf`.
    #[arg(long = "registry-mirror-config", value_name = "PATH")]
    pub registry_mirror_configs: Vec<PathBuf>,
    /// Where judged objects' registry credentials come from: `kube` reads
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
    /// A Redis or Valkey that webhook replicas and the audit share the
    /// signature material they discover through, so a digest fetched by one
    /// is warm in all: `redis://[user[:password]@]host[:port][/db]`, or
    /// `rediss://` for TLS. Entries are named and signed with the key in
    /// --shared-cache-key-file and verified again when read; when the cache
    /// is slow or down, sigil reads the registries. Needs
    /// --signature-ttl-seconds above 0 (entries expire with it).
    #[arg(long, value_name = "URL", requires = "shared_cache_key_file")]
    pub shared_cache_url: Option<String>,
    /// File holding the key that names and signs shared cache entries (at
    /// least 32 bytes, the same for every replica and the audit; a cache
    /// several clusters share needs a key per cluster).
    #[arg(long, value_name = "FILE")]
    pub shared_cache_key_file: Option<PathBuf>,
    /// File holding the shared cache's password (`AUTH`), used instead of
    /// one in --shared-cache-url.
    #[arg(long, value_name = "FILE")]
    pub shared_cache_password_file: Option<PathBuf>,
    /// PEM CA certificates trusted for a `rediss://` shared cache besides
    /// the built-in web roots.
    #[arg(long, value_name = "PEM")]
    pub shared_cache_ca_file: Option<PathBuf>,
    /// Milliseconds a read of the shared cache may take before sigil asks
    /// the registry instead; after a failure the cache is left alone for a
    /// while (1 s, doubling up to 30 s).
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub shared_cache_wait_ms: u64,
    /// PEM CA certificates trusted for registries in addition to the
    /// built-in web roots (private registries).
    #[arg(long, value_name = "PEM")]
    pub registry_ca_file: Option<PathBuf>,
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
    /// Worker processes evaluating Rego policies (this binary started
    /// again, each bounded by --rego-memory-limit-mib), started when a
    /// first Rego policy is evaluated.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub rego_workers: u64,
    /// Memory one Rego evaluation may use (its worker's heap, document
    /// included), in MiB; beyond it the evaluation fails (the image is
    /// denied, naming the limit) and the worker is replaced.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(32..=4096))]
    pub rego_memory_limit_mib: u64,
    /// Time one Rego evaluation may take, in milliseconds; a built-in that
    /// has not returned a quarter later (at least 250 ms) is killed with
    /// its worker.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60000))]
    pub rego_time_limit_ms: u64,
    /// A namespace where ImagePolicyExceptions count (repeatable; `*`:
    /// every namespace). Without one, no exception counts and none is read.
    #[arg(long = "exception-namespace")]
    pub exception_namespaces: Vec<String>,
    /// How long after its creation an ImagePolicyException may count at
    /// most (`168h`, `7d`, `1h30m`); one whose expiresAt lies later is
    /// refused.
    #[arg(long, default_value = "168h")]
    pub exception_max_duration: String,
}

/// Where the policy snapshot comes from, when one is enforced.
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

/// One API client for everything a judging process reads from the
/// cluster, created on first use (in-cluster config or KUBECONFIG).
#[derive(Default)]
pub struct KubeClient(Option<kube::Client>);

impl KubeClient {
    /// The client; `why` names the setting that needs it in the error.
    pub async fn get(&mut self, why: &str) -> Result<kube::Client, SetupError> {
        if let Some(c) = &self.0 {
            return Ok(c.clone());
        }
        let client = kube::Client::try_default().await.map_err(|e| {
            SetupError::Config(format!(
                "cannot reach the Kubernetes API for {why}: {e}; run in a cluster or set KUBECONFIG"
            ))
        })?;
        self.0 = Some(client.clone());
        Ok(client)
    }
}

/// The judge a process enforces, as [`JudgeArgs::build`] made it.
pub enum Judge {
    /// The controller's policy snapshot, kept current by `source` (abort it
    /// when the process stops judging).
    Snapshot {
        /// The judge.
        judge: Arc<PolicyJudge>,
        /// The task feeding it snapshots.
        source: JoinHandle<()>,
    },
    /// No snapshot source is given: the caller judges by other means (the
    /// webhook's flag-only static policy) with these.
    NoSnapshot {
        /// The registry client settings (boxed: the other variant is small).
        client_config: Box<ClientConfig>,
        /// The trust root.
        root: TrustedRoot,
        /// An identifier of the trust root's content.
        root_id: String,
    },
}

/// What [`JudgeArgs::build`] gives a judging process.
pub struct Judging {
    /// The judge.
    pub judge: Judge,
    /// The ImagePolicyExceptions the judge enforces, when
    /// `--exception-namespace` names any (kept current by a watch).
    pub exceptions: Option<Arc<ExceptionTable>>,
    /// The pull-secret source.
    pub secrets: AnyPullSecrets,
    /// The API client, when one was needed so far (or is asked for later).
    pub kube: KubeClient,
}

/// Bytes of signature material the material cache keeps: a few KiB per
/// image for real signatures (thousands of images), and a hard bound
/// however large the bundles a registry serves.
pub const MATERIAL_BYTES: u64 = 32 << 20;

fn config(msg: String) -> SetupError {
    SetupError::Config(msg)
}

/// A Secret's file content without the line end an editor or `echo` adds.
fn trimmed(mut bytes: Vec<u8>) -> Vec<u8> {
    while bytes.last().is_some_and(|b| matches!(b, b'\n' | b'\r')) {
        bytes.pop();
    }
    bytes
}

impl JudgeArgs {
    /// Builds the judge these settings describe: configures CUE and the Rego
    /// sandbox, reads the trust root and registry settings, makes the
    /// pull-secret source and, with a snapshot source, starts the policy
    /// snapshot judge fed by it. Registry requests are reported to
    /// `observer`.
    pub async fn build(&self, observer: Arc<dyn RequestObserver>) -> Result<Judging, SetupError> {
        // Before any policy compiles; the module itself is read only when a
        // policy uses CUE.
        sigil_cue::configure_shared(self.cue_config()).map_err(|e| config(e.to_string()))?;
        sigil_policy::rego::configure_shared(self.rego_config())
            .map_err(|e| config(e.to_string()))?;
        let mut client_config = self.client_config()?;
        let shared = self.shared_cache(observer.clone())?;
        client_config.observer = Some(observer);
        let mut kube = KubeClient::default();
        let secrets = match self.pull_secrets {
            PullSecretsArg::None => AnyPullSecrets::None(NoPullSecrets),
            PullSecretsArg::Kube => {
                let mut source = KubePullSecrets::new(
                    kube.get("--pull-secrets kube").await?,
                    &self.namespace,
                    Duration::from_secs(self.pull_secret_ttl_seconds),
                );
                if !self.pull_secret_namespace.is_empty() {
                    source = source.only_in(self.pull_secret_namespace.clone());
                }
                AnyPullSecrets::Kube(Box::new(source))
            }
        };
        let (root, root_id) = self.trust_root()?;
        let Some(from) = self.snapshot_from()? else {
            return Ok(Judging {
                exceptions: None,
                judge: Judge::NoSnapshot {
                    client_config: Box::new(client_config),
                    root,
                    root_id,
                },
                secrets,
                kube,
            });
        };
        let mut judge = PolicyJudge::new(client_config, root, &root_id, self.no_match_policy())?
            .with_allowed_registries(self.allowed_registries()?);
        if self.signature_ttl_seconds > 0 {
            let mut material = sigil_registry::MaterialCache::with_byte_budget(
                Duration::from_secs(self.signature_ttl_seconds),
                MATERIAL_BYTES,
            );
            if let Some(shared) = shared {
                material = material.with_shared(shared);
            }
            judge = judge.with_material_cache(Arc::new(material));
        }
        let rules = self.exception_rules()?;
        let exceptions = if rules.enabled() {
            let table = Arc::new(ExceptionTable::new(rules));
            let client = kube.get("--exception-namespace").await?;
            tokio::spawn(crate::exceptions::watch(
                table.clone(),
                kube::Api::all(client),
            ));
            judge = judge.with_exceptions(table.clone());
            Some(table)
        } else {
            None
        };
        let judge = Arc::new(judge);
        let source = match from {
            SnapshotFrom::File(path) => {
                let poll = Duration::from_secs(self.snapshot_poll_seconds.max(1));
                tokio::spawn(snapshot_source::file_source(judge.clone(), path, poll).await)
            }
            SnapshotFrom::Secret { namespace, name } => {
                let client = kube.get("--policy-snapshot-secret").await?;
                let api = kube::Api::namespaced(client, &namespace);
                tokio::spawn(snapshot_source::secret_source(judge.clone(), api, name))
            }
        };
        Ok(Judging {
            exceptions,
            judge: Judge::Snapshot { judge, source },
            secrets,
            kube,
        })
    }

    /// Where ImagePolicyExceptions count and for how long
    /// (`--exception-namespace`, `--exception-max-duration`).
    pub fn exception_rules(&self) -> Result<ExceptionRules, SetupError> {
        let max = sigil_compile::exception::parse_duration(&self.exception_max_duration)
            .map_err(|e| config(format!("--exception-max-duration: {e}")))?;
        ExceptionRules::new(&self.exception_namespaces, max)
            .map_err(|e| config(format!("--exception-max-duration: {e}")))
    }

    /// The shared cache `--shared-cache-url` names (reporting to
    /// `observer`), or `None` without one.
    pub fn shared_cache(
        &self,
        observer: Arc<dyn RequestObserver>,
    ) -> Result<Option<SharedCache>, SetupError> {
        let Some(url) = &self.shared_cache_url else {
            return Ok(None);
        };
        if self.signature_ttl_seconds == 0 {
            return Err(config(
                "--shared-cache-url needs the material cache: set --signature-ttl-seconds above 0 (entries expire with it)".into(),
            ));
        }
        let read = |flag: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| {
                config(format!(
                    "cannot read {flag} {}: {e}; mount the shared cache Secret there",
                    path.display()
                ))
            })
        };
        let Some(key_file) = &self.shared_cache_key_file else {
            return Err(config(
                "--shared-cache-url needs --shared-cache-key-file: a file of at least 32 random bytes, the same for every replica and the audit".into(),
            ));
        };
        let mut settings = SharedCacheConfig::new(
            url.clone(),
            trimmed(read("--shared-cache-key-file", key_file)?),
        );
        if let Some(path) = &self.shared_cache_password_file {
            let password = trimmed(read("--shared-cache-password-file", path)?);
            settings.password = Some(String::from_utf8(password).map_err(|_| {
                config(format!(
                    "--shared-cache-password-file {} is not UTF-8 text",
                    path.display()
                ))
            })?);
        }
        if let Some(path) = &self.shared_cache_ca_file {
            settings.ca_pem = read("--shared-cache-ca-file", path)?;
        }
        settings.read_wait = Duration::from_millis(self.shared_cache_wait_ms);
        SharedCache::new(settings, Some(observer))
            .map(Some)
            .map_err(|e| {
                let flag = match e {
                    SharedCacheError::Key(_) => "--shared-cache-key-file",
                    SharedCacheError::CaFile(_) => "--shared-cache-ca-file",
                    _ => "--shared-cache-url",
                };
                config(format!("{flag}: {e}"))
            })
    }

    /// The namespaces never acted on: `--exclude-namespace` and sigil's own.
    pub fn excluded_namespaces(&self) -> Vec<String> {
        let mut excluded = self.exclude_namespaces.clone();
        excluded.push(self.namespace.clone());
        excluded
    }

    /// The verdict and tag caches' settings. Tags are resolved only at
    /// admission (the audit judges running digests), so the webhook passes
    /// its own `--digest-ttl-seconds` as `digest_ttl`.
    pub fn cache_config(&self, digest_ttl: Duration) -> CacheConfig {
        CacheConfig {
            verdict_capacity: self.verdict_cache_size,
            digest_capacity: (self.verdict_cache_size / 4).max(1024),
            positive_ttl: Duration::from_secs(self.verdict_ttl_seconds),
            negative_ttl: Duration::from_secs(self.negative_ttl_seconds),
            digest_ttl,
        }
    }

    /// The policy snapshot source, or `None` when none is given.
    pub fn snapshot_from(&self) -> Result<Option<SnapshotFrom>, SetupError> {
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
            _ => Err(config(format!(
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

    /// The Rego sandbox: workers that are this binary started again, and
    /// what one evaluation may use.
    pub fn rego_config(&self) -> sigil_policy::rego::SandboxConfig {
        let mut config = sigil_policy::rego::SandboxConfig::this_binary();
        config.workers = usize::try_from(self.rego_workers).unwrap_or(1);
        config.limits.memory_bytes = self.rego_memory_limit_mib << 20;
        config.limits.time = Duration::from_millis(self.rego_time_limit_ms);
        config
    }

    /// What images no policy selects get, in the policy engine's terms.
    pub fn no_match_policy(&self) -> NoMatchPolicy {
        match self.no_match {
            NoMatch::Deny => NoMatchPolicy::Deny,
            NoMatch::Warn => NoMatchPolicy::Warn,
            NoMatch::Allow => NoMatchPolicy::Allow,
        }
    }

    /// `--allow-registry`, compiled, and the mirrors' hosts (sigil reads
    /// there what the policies name elsewhere).
    pub fn allowed_registries(&self) -> Result<Vec<HostPattern>, SetupError> {
        let mirror_hosts = self
            .mirrors()?
            .map(|m| m.mirror_hosts())
            .unwrap_or_default();
        self.allow_registry
            .iter()
            .chain(mirror_hosts.iter())
            .map(|h| {
                HostPattern::allow(h).map_err(|_| {
                    config(format!(
                        "--allow-registry `{h}` is not a registry host (letters, digits, `-_.:[]`, `*` within a name), e.g. mirror.example:5000 or *.corp.example"
                    ))
                })
            })
            .collect()
    }

    /// The addresses registries may be at: everything but loopback,
    /// link-local, metadata, unspecified and multicast, adjusted by
    /// `--allow-registry-address` and `--deny-registry-address`.
    pub fn address_policy(&self) -> Result<AddressPolicy, SetupError> {
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
                let net = parse_net(v).map_err(|e| config(format!("{flag}: {e}")))?;
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
    pub fn trust_root(&self) -> Result<(TrustedRoot, String), SetupError> {
        match &self.trusted_root {
            Some(path) => {
                let json = std::fs::read_to_string(path).map_err(|e| {
                    config(format!(
                        "cannot read --trusted-root {}: {e}",
                        path.display()
                    ))
                })?;
                let root = TrustedRoot::from_json(&json).map_err(|e| {
                    config(format!("--trusted-root {} is invalid: {e}", path.display()))
                })?;
                Ok((root, hex::encode(Sha256::digest(json.as_bytes()))))
            }
            None => {
                let root = TrustedRoot::public_good()
                    .map_err(|e| config(format!("embedded trust root: {e}")))?;
                Ok((
                    root,
                    concat!("public-good@sigil-", env!("CARGO_PKG_VERSION")).to_string(),
                ))
            }
        }
    }

    /// The request budget of `--registry-requests-per-minute` and
    /// `--registry-request-budget`; `None` when neither bounds anything.
    pub fn request_budget(&self) -> Result<Option<Arc<RequestBudget>>, SetupError> {
        let mut per_host = Vec::new();
        for spec in &self.registry_request_budgets {
            let parsed = spec
                .split_once('=')
                .and_then(|(h, n)| Some((h.trim(), n.trim().parse::<u32>().ok()?)))
                .filter(|(h, _)| !h.is_empty());
            let (host, n) = parsed.ok_or_else(|| {
                config(format!(
                    "--registry-request-budget `{spec}`: expected HOST=N (requests a minute), e.g. docker.io=60"
                ))
            })?;
            per_host.push((host.to_string(), n));
        }
        let bounded = self.registry_requests_per_minute > 0 || per_host.iter().any(|(_, n)| *n > 0);
        Ok(bounded.then(|| {
            Arc::new(RequestBudget::new(
                self.registry_requests_per_minute,
                per_host,
            ))
        }))
    }

    /// The mirrors of `--registry-mirror-config` and `--registry-mirror`
    /// (rules given later replace earlier ones for the same prefix);
    /// `None` when none is set.
    pub fn mirrors(&self) -> Result<Option<Arc<MirrorMap>>, SetupError> {
        let mut map = MirrorMap::new();
        for path in &self.registry_mirror_configs {
            map.add_path(path)
                .map_err(|e| config(format!("--registry-mirror-config: {e}")))?;
        }
        for rule in &self.registry_mirrors {
            map.add_rule(rule)
                .map_err(|e| config(format!("--registry-mirror: {e}")))?;
        }
        Ok((!map.is_empty()).then(|| Arc::new(map)))
    }

    /// The cloud credential providers `--registry-credential-provider` and
    /// `--registry-credential-host` allow, with their settings from the
    /// process environment; `None` when none may run.
    pub fn keychain(&self, extra_roots_pem: &[u8]) -> Result<Option<Arc<Keychain>>, SetupError> {
        let mut providers = Vec::new();
        for name in &self.registry_credential_providers {
            if name.trim() == "none" {
                continue;
            }
            let id = ProviderId::parse(name)
                .map_err(|e| config(format!("--registry-credential-provider: {e}, or none")))?;
            if !providers.contains(&id) {
                providers.push(id);
            }
        }
        if self
            .registry_credential_providers
            .iter()
            .any(|p| p.trim() == "none")
        {
            providers.clear();
        }
        let mut extra_hosts = Vec::new();
        for spec in &self.registry_credential_hosts {
            let (name, host) = spec.split_once('=').ok_or_else(|| {
                config(format!(
                    "--registry-credential-host `{spec}`: expected PROVIDER=HOST, e.g. acr=registry.corp.example"
                ))
            })?;
            let id = ProviderId::parse(name)
                .map_err(|e| config(format!("--registry-credential-host `{spec}`: {e}")))?;
            if !providers.contains(&id) {
                return Err(config(format!(
                    "--registry-credential-host `{spec}`: the provider {id} is not enabled by                      --registry-credential-provider"
                )));
            }
            let host = ExtraHost::parse(host)
                .map_err(|e| config(format!("--registry-credential-host `{spec}`: {e}")))?;
            extra_hosts.push((id, host));
        }
        if providers.is_empty() {
            return Ok(None);
        }
        let settings = KeychainSettings {
            providers,
            extra_hosts,
            laptop: false,
            extra_roots_pem: extra_roots_pem.to_vec(),
            insecure_hosts: self.insecure_registry.clone(),
            exchange_timeout: Duration::from_secs(self.timeout_seconds),
        };
        Keychain::new(&settings, sigil_registry::cloud::Env::from_process())
            .map(|k| Some(Arc::new(k)))
            .map_err(config)
    }

    /// The registry client settings (node-wide credentials, insecure hosts,
    /// limits within the judgement's deadline, cloud credential providers).
    pub fn client_config(&self) -> Result<ClientConfig, SetupError> {
        let credentials = match &self.docker_config {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| {
                    config(format!(
                        "cannot read --docker-config {}: {e}",
                        path.display()
                    ))
                })?;
                Credentials::from_docker_config_json(&bytes)
                    .map_err(|e| config(format!("--docker-config {}: {e}", path.display())))?
            }
            None => Credentials::anonymous(),
        };
        let extra_roots_pem = match &self.registry_ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    config(format!(
                        "cannot read --registry-ca-file {}: {e}",
                        path.display()
                    ))
                })?;
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(config(format!(
                        "--registry-ca-file {} holds no PEM certificate",
                        path.display()
                    )));
                }
                pem
            }
            None => Vec::new(),
        };
        let budget = Duration::from_secs(self.timeout_seconds);
        let keychain = self.keychain(&extra_roots_pem)?;
        let mirrors = self.mirrors()?;
        let mut insecure_hosts = self.insecure_registry.clone();
        insecure_hosts.extend(mirrors.iter().flat_map(|m| m.insecure_hosts()));
        Ok(ClientConfig {
            credentials,
            allow_insecure_all: false,
            insecure_hosts,
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
            budget: Some(Arc::new(MemoryBudget::new(
                self.registry_memory_mib.saturating_mul(1 << 20),
                self.registry_memory_per_host_mib.saturating_mul(1 << 20),
            ))),
            slots: Some(Arc::new(HostSlots::new(self.per_host_concurrency))),
            keychain,
            mirrors,
            request_budget: self.request_budget()?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        judge: JudgeArgs,
    }

    fn judge_args(flags: &[&str]) -> JudgeArgs {
        Flags::try_parse_from(std::iter::once("sigil-webhook").chain(flags.iter().copied()))
            .unwrap()
            .judge
    }

    /// A file under the system's temporary directory, unique to `name`
    /// and this process.
    fn temp_file(name: &str, content: &[u8]) -> PathBuf {
        let path = std::env::temp_dir().join(format!("sigil-args-{}-{name}", std::process::id()));
        std::fs::write(&path, content).unwrap();
        path
    }

    fn shared_cache(flags: &[&str]) -> Result<Option<SharedCache>, String> {
        judge_args(flags)
            .shared_cache(Arc::new(crate::metrics::Metrics::new()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_shared_cache_is_built_from_its_flags_and_bad_ones_name_the_flag() {
        assert!(shared_cache(&[]).unwrap().is_none());
        let key = temp_file("key", b"0123456789abcdef0123456789abcdef\n");
        let key = key.to_str().unwrap();
        let password = temp_file("password", b"s3cret\n");
        let password = password.to_str().unwrap();
        let built = shared_cache(&[
            "--shared-cache-url",
            "redis://cache.sigil-system:6379",
            "--shared-cache-key-file",
            key,
            "--shared-cache-password-file",
            password,
        ])
        .unwrap();
        assert!(built.is_some());
        // The line end is not part of the key: 32 bytes are enough.
        let short = temp_file("short", b"too short\n");
        for (flags, expected) in [
            (
                vec![
                    "--shared-cache-url",
                    "redis://c",
                    "--shared-cache-key-file",
                    short.to_str().unwrap(),
                ],
                "--shared-cache-key-file: the MAC key has 9 bytes",
            ),
            (
                vec![
                    "--shared-cache-url",
                    "redis://c",
                    "--shared-cache-key-file",
                    "/nonexistent/key",
                ],
                "cannot read --shared-cache-key-file /nonexistent/key",
            ),
            (
                vec![
                    "--shared-cache-url",
                    "http://c",
                    "--shared-cache-key-file",
                    key,
                ],
                "--shared-cache-url: `http://c/` has scheme `http`",
            ),
            (
                vec![
                    "--shared-cache-url",
                    "redis://c",
                    "--shared-cache-key-file",
                    key,
                    "--signature-ttl-seconds",
                    "0",
                ],
                "set --signature-ttl-seconds above 0",
            ),
            (
                vec![
                    "--shared-cache-url",
                    "rediss://c",
                    "--shared-cache-key-file",
                    key,
                    "--shared-cache-ca-file",
                    password,
                ],
                "--shared-cache-ca-file: the CA file holds no PEM certificate",
            ),
        ] {
            let err = shared_cache(&flags).unwrap_err();
            assert!(err.contains(expected), "{flags:?}: {err}");
        }
        // Without a key file the URL is refused by the parser itself.
        assert!(
            Flags::try_parse_from(["sigil-webhook", "--shared-cache-url", "redis://c"]).is_err()
        );
    }

    #[test]
    fn every_cloud_provider_runs_by_default_and_none_turns_them_off() {
        let keychain = judge_args(&[]).keychain(&[]).unwrap().unwrap();
        for (host, provider) in [
            (
                "123456789012.dkr.ecr.us-east-1.amazonaws.com",
                ProviderId::Ecr,
            ),
            ("europe-docker.pkg.dev", ProviderId::Gcp),
            ("reg.azurecr.io", ProviderId::Acr),
        ] {
            assert_eq!(keychain.describe(host).map(|(p, _)| p), Some(provider));
        }
        assert_eq!(keychain.describe("ghcr.io"), None);
        let none = judge_args(&["--registry-credential-provider", "none"]);
        assert!(none.keychain(&[]).unwrap().is_none());
        let ecr_only = judge_args(&["--registry-credential-provider", "ecr"])
            .keychain(&[])
            .unwrap()
            .unwrap();
        assert_eq!(ecr_only.describe("reg.azurecr.io"), None);
    }

    #[test]
    fn extra_hosts_go_to_an_enabled_provider_and_bad_ones_are_refused_with_the_form() {
        let args = judge_args(&[
            "--registry-credential-provider",
            "acr",
            "--registry-credential-host",
            "acr=registry.corp.example:5000",
        ]);
        let keychain = args.keychain(&[]).unwrap().unwrap();
        assert_eq!(
            keychain
                .describe("registry.corp.example:5000")
                .map(|(p, _)| p),
            Some(ProviderId::Acr)
        );
        for (flags, expected) in [
            (
                vec!["--registry-credential-host", "registry.corp.example"],
                "expected PROVIDER=HOST",
            ),
            (
                vec!["--registry-credential-host", "oci=registry.corp.example"],
                "ecr, gcp or acr",
            ),
            (
                vec![
                    "--registry-credential-provider",
                    "ecr",
                    "--registry-credential-host",
                    "acr=r.example",
                ],
                "not enabled",
            ),
            (vec!["--registry-credential-provider", "oracle"], "or none"),
        ] {
            let err = judge_args(&flags).keychain(&[]).unwrap_err().to_string();
            assert!(err.contains(expected), "{flags:?}: {err}");
        }
    }
}
