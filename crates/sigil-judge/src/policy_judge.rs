//! The judge that enforces the controller's policy snapshot: every
//! ClusterImagePolicy compiled by sigil-compile's compiler and every TrustRoot,
//! evaluated per image with sigil-verifier's `evaluate_image` over a
//! [`RegistryVerifier`] — the same path as `sigil policy test`.
//!
//! The publication contract (see `sigil_api::snapshot`): a snapshot is
//! enforced whole or not at all. A version that fails
//! [`sigil_compile::snapshot::validate`] is refused and logged, and the last good one
//! keeps enforcing; a revision lower than the one in force is ignored, and
//! so is one equal to it with other content (two controllers wrote the same
//! revision: the first one taken stays until a higher revision). The
//! judge is not ready until a first valid snapshot is loaded. Where the
//! snapshot comes from is [`crate::snapshot_source`]'s business.
//!
//! The snapshot in force also bounds where the judge's registry clients may
//! go ([`PolicyRegistries`]): the hosts its ClusterImagePolicies' globs can
//! select, the registries of their `source[].oci`, and `--allow-registry`;
//! for a judgement of a namespace's object ([`crate::tenant`]), also those
//! of that namespace's own ImagePolicies, and never another namespace's.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use sigil_api::snapshot::{PolicySnapshot, SnapshotError};
use sigil_compile::exception::{self, Waiver, is_waived, waived_selecting};
use sigil_policy::eval::{
    AuthorityOutcome, AuthorityVerifier, ImageReadError, ImageResult, PlatformsResult, PolicyResult,
};
use sigil_policy::evaluate_image;
use sigil_policy::glob::{HostPattern, HostSet, ImageName};
use sigil_policy::model::{CompiledAuthority, CompiledPolicy, NoMatchPolicy, ResourceInfo};
use sigil_policy::registry::RegistryVerifier;
use sigil_policy::render;
use sigil_registry::config::ConfigFiles;
use sigil_registry::platforms::PlatformImage;
use sigil_registry::revocation_fetch::{FetchConfig, RevocationFetcher};
use sigil_registry::{
    ClientConfig, ImageRef, MaterialCache, MaterialScope, RegistryClient, RegistryScope, Repository,
};
use sigil_verifier::trust::TrustedRoot;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::exceptions::ExceptionTable;
use crate::judge::{
    AuthorityVerdict, ImageJudge, ObjectInfo, PinnedImage, PolicyOutcome, PolicyVerdict,
    PullSecrets, Verdict, Versions,
};

/// Verifiers (one registry client each) kept per pull-secret identity and
/// snapshot.
const MAX_VERIFIERS: usize = 256;

/// Why a snapshot was not applied.
#[derive(Debug, thiserror::Error)]
pub enum PolicyJudgeError {
    /// The snapshot does not parse or does not validate.
    #[error("{0}; the last good policy snapshot stays in force")]
    Invalid(#[from] SnapshotError),
    /// The registry client could not be built.
    #[error("cannot build the registry client: {0}; check --insecure-registry and --docker-config")]
    Client(String),
    /// The judge's state lock was poisoned by a panic.
    #[error(
        "policy judge state is poisoned by an earlier panic; restart the webhook (or controller)"
    )]
    Poisoned,
}

impl PolicyJudgeError {
    /// A stable label for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_snapshot",
            Self::Client(_) => "client",
            Self::Poisoned => "poisoned",
        }
    }
}

/// What applying a snapshot did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The snapshot is now in force.
    Swapped,
    /// The same content at the same revision is already in force.
    Unchanged,
    /// Its revision is older than the one in force; ignored.
    Stale,
    /// Its revision is the one in force but its content is not (a second
    /// writer); ignored, the snapshot in force stays.
    Conflicting,
}

/// Policies of one scope (the cluster's, or one namespace's), those that
/// take part in admission (`enforce`, `warn`) first, then the `mode: audit`
/// ones from [`Self::audit_start`] on.
#[derive(Default)]
struct PolicySet {
    policies: Vec<CompiledPolicy>,
    /// Where the `mode: audit` policies start in [`Self::policies`].
    audit_start: usize,
    /// Some policy's `match` reads the resource or its labels.
    reads_resource: bool,
    /// Some CIP-level policy reads the object's spec or metadata.
    reads_object: bool,
}

impl PolicySet {
    fn new(policies: Vec<CompiledPolicy>) -> Self {
        let reads_resource = policies.iter().any(|p| !p.matches.is_empty());
        let reads_object = policies.iter().any(|p| {
            p.policy
                .as_ref()
                .is_some_and(|c| c.include_spec || c.include_object_meta)
        });
        let (mut policies, audit): (Vec<CompiledPolicy>, Vec<CompiledPolicy>) =
            policies.into_iter().partition(|p| p.mode.admits());
        let audit_start = policies.len();
        policies.extend(audit);
        Self {
            policies,
            audit_start,
            reads_resource,
            reads_object,
        }
    }

    /// The policies that take part in admission (`enforce`, `warn`).
    fn admission(&self) -> &[CompiledPolicy] {
        self.policies.get(..self.audit_start).unwrap_or_default()
    }

    /// The `mode: audit` policies.
    fn audit_mode(&self) -> &[CompiledPolicy] {
        self.policies.get(self.audit_start..).unwrap_or_default()
    }
}

/// One valid snapshot, compiled, with what verdicts depend on.
struct Loaded {
    revision: u64,
    /// SHA-256 of what the snapshot enforces (all but its `generatedAt`).
    content: [u8; 32],
    /// The ClusterImagePolicies.
    cluster: PolicySet,
    /// Each namespace's ImagePolicies, which apply there besides
    /// [`Self::cluster`].
    namespaced: HashMap<String, PolicySet>,
    /// What authorities without a `trustRootRef` verify against: the
    /// snapshot's default trust root, else its built-in Sigstore root, else
    /// the judge's own (v1 snapshots).
    default_root: TrustedRoot,
    /// The TrustRoot marked default, if any.
    default_name: Option<String>,
    trust_roots: std::collections::BTreeMap<String, TrustedRoot>,
    versions: Versions,
    /// Counts the snapshots swapped in ([`ImageJudge::epoch`]).
    epoch: u64,
    /// `signaturePullSecrets` of every authority, sorted, without repeats.
    signature_secrets: Vec<String>,
    generated_at: Option<time::OffsetDateTime>,
    loaded_at: Instant,
    verifiers: Mutex<HashMap<String, Arc<RegistryVerifier>>>,
    /// The registries this snapshot lets sigil contact for any object.
    hosts: HostSet,
    /// The registries a namespace's own ImagePolicies add, for its objects.
    namespace_hosts: HashMap<String, HostSet>,
    /// The registries `/mutate --pin all` may pin on: those of the
    /// admission policies and `--allow-registry` (an audit-mode policy pins
    /// nothing).
    pin_hosts: HostSet,
    /// Per policy, a hash of everything its verdicts depend on ([`policy_prints`]).
    prints: BTreeMap<String, String>,
    /// The WorkloadKinds, compiled.
    workload_kinds: Arc<sigil_compile::workload_kind::WorkloadKinds>,
}

type Current = Arc<RwLock<Option<Arc<Loaded>>>>;

/// The registry hosts the snapshot in force can select, as every registry
/// client of the judge sees them: swapped with the snapshot, never apart.
#[derive(Debug)]
pub struct PolicyRegistries {
    current: Current,
}

impl Loaded {
    /// The policies of `namespace`'s objects that take part in admission:
    /// the cluster's, then the namespace's own.
    fn admission(&self, namespace: &str) -> impl Iterator<Item = &CompiledPolicy> {
        let own = self.namespaced.get(namespace).map(PolicySet::admission);
        self.cluster
            .admission()
            .iter()
            .chain(own.unwrap_or_default())
    }

    /// The `mode: audit` policies of `namespace`'s objects.
    fn audit_mode(&self, namespace: &str) -> impl Iterator<Item = &CompiledPolicy> {
        let own = self.namespaced.get(namespace).map(PolicySet::audit_mode);
        self.cluster
            .audit_mode()
            .iter()
            .chain(own.unwrap_or_default())
    }

    /// What the policies of `namespace`'s objects read about an object:
    /// (the resource and its labels, its spec and metadata). A namespace's
    /// own policies change this for its objects only.
    fn reads(&self, namespace: &str) -> (bool, bool) {
        let own = self.namespaced.get(namespace);
        (
            self.cluster.reads_resource || own.is_some_and(|s| s.reads_resource),
            self.cluster.reads_object || own.is_some_and(|s| s.reads_object),
        )
    }

    /// A hash of each policy that selects `name` of `resource` in
    /// `resource.namespace` (admission and `mode: audit` alike), by its
    /// print: what a verdict on it depends on.
    fn selecting_prints(&self, name: &ImageName, resource: &ResourceInfo) -> String {
        let mut h = Sha256::new();
        let selecting = self
            .admission(&resource.namespace)
            .chain(self.audit_mode(&resource.namespace))
            .filter(|p| p.matches_image(name) && p.matches_resource(resource));
        for p in selecting {
            h.update(p.name.as_bytes());
            h.update([0]);
            h.update(
                self.prints
                    .get(&p.name)
                    .map_or("", String::as_str)
                    .as_bytes(),
            );
            h.update([0]);
        }
        hex::encode(h.finalize())
    }

    /// Every policy of every scope.
    fn all(&self) -> impl Iterator<Item = &CompiledPolicy> {
        self.cluster
            .policies
            .iter()
            .chain(self.namespaced.values().flat_map(|s| &s.policies))
    }
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

impl RegistryScope for PolicyRegistries {
    fn permits(&self, host: &str) -> Result<(), String> {
        let loaded = self.current.read().ok().and_then(|c| c.clone());
        let Some(loaded) = loaded else {
            return Err("no policy snapshot is loaded yet, so no registry may be contacted".into());
        };
        if loaded.hosts.contains(host) {
            return Ok(());
        }
        let namespace = crate::tenant::current();
        if loaded
            .namespace_hosts
            .get(namespace.as_ref())
            .is_some_and(|own| own.contains(host))
        {
            return Ok(());
        }
        let own = if namespace.is_empty() {
            String::new()
        } else {
            format!(", nor an ImagePolicy of namespace {namespace}")
        };
        Err(format!(
            "no ClusterImagePolicy in force can select images on {host}{own} (their images[].glob and source[].oci name other registries) and it is not allowed by --allow-registry (chart value registryAccess.allowHosts); sigil contacts no other registry"
        ))
    }
}

/// The registries `policies` can make sigil contact, plus `allowed`.
fn registry_hosts<'a>(
    policies: impl IntoIterator<Item = &'a CompiledPolicy>,
    allowed: &[HostPattern],
) -> HostSet {
    let policies: Vec<&CompiledPolicy> = policies.into_iter().collect();
    let mut set = HostSet::new();
    for glob in policies.iter().flat_map(|p| &p.images) {
        set.add_glob(glob);
    }
    let sources = policies
        .iter()
        .flat_map(|p| &p.authorities)
        .flat_map(|a| &a.sources)
        .filter_map(|s| s.oci.as_deref());
    for oci in sources {
        if let Ok(repo) = Repository::parse(oci) {
            set.add_host(&repo.host);
        }
    }
    for pattern in allowed {
        set.add_pattern(pattern.clone());
    }
    set
}

/// The policies of the snapshot in force, by name, each with the hash of
/// everything its verdicts depend on ([`PolicyJudge::in_force`]).
#[derive(Debug, Clone)]
pub struct InForce {
    /// The snapshot's revision.
    pub revision: u64,
    /// What every verdict of this snapshot is cached under.
    pub versions: Versions,
    /// Each policy's print and compiled form.
    pub policies: BTreeMap<String, (String, CompiledPolicy)>,
}

impl InForce {
    /// The policies whose verdicts `self` and `newer` may give differently:
    /// added, removed, or with another print.
    pub fn changed_policies<'a>(&'a self, newer: &'a InForce) -> Vec<&'a CompiledPolicy> {
        let mut out = Vec::new();
        for (name, (print, policy)) in &self.policies {
            match newer.policies.get(name) {
                Some((p, newer_policy)) if p != print => {
                    out.push(policy);
                    out.push(newer_policy);
                }
                Some(_) => {}
                None => out.push(policy),
            }
        }
        for (name, (_, policy)) in &newer.policies {
            if !self.policies.contains_key(name) {
                out.push(policy);
            }
        }
        out
    }
}

/// Per policy, a hash of everything its verdicts depend on: its accepted
/// spec, the material of every TrustRoot it names, and what authorities
/// naming no TrustRoot verify against (the judge's built-in root and any
/// snapshot field besides policies and trust roots). A trust-root entry
/// that carries more than its name, generation and material is marked
/// (for instance as the cluster's default) and may apply to any policy, so
/// its material counts for all of them.
fn policy_prints(
    snapshot: &PolicySnapshot,
    compiled: &BTreeMap<String, CompiledPolicy>,
    public_good_id: &str,
) -> BTreeMap<String, String> {
    let mut rest = serde_json::to_value(snapshot).unwrap_or_default();
    let mut roots = BTreeMap::new();
    let mut marked = Vec::new();
    if let Some(obj) = rest.as_object_mut() {
        for key in ["policies", "revision", "generatedAt"] {
            obj.remove(key);
        }
        let entries = obj.remove("trustRoots").unwrap_or_default();
        for entry in entries.as_array().into_iter().flatten() {
            let name = entry["name"].as_str().unwrap_or_default().to_string();
            let plain = entry.as_object().is_some_and(|e| {
                e.keys()
                    .all(|k| matches!(k.as_str(), "name" | "generation" | "trustedRootJson"))
            });
            if !plain {
                marked.push(entry.clone());
            }
            roots.insert(name, entry["trustedRootJson"].to_string());
        }
    }
    let default_print = sha256_hex(
        format!(
            "{public_good_id}\0{rest}\0{}",
            serde_json::Value::from(marked)
        )
        .as_bytes(),
    );
    snapshot
        .policies
        .iter()
        .map(|p| {
            let mut h = Sha256::new();
            h.update(default_print.as_bytes());
            h.update(
                serde_json::to_string(&p.spec)
                    .unwrap_or_default()
                    .as_bytes(),
            );
            let key = p.key();
            if let Some(c) = compiled.get(&key) {
                for name in sigil_compile::compile::trust_root_refs(c).into_keys() {
                    h.update([0]);
                    h.update(name.as_bytes());
                    h.update([0]);
                    h.update(
                        roots
                            .get(&name)
                            .map_or("missing", String::as_str)
                            .as_bytes(),
                    );
                }
            }
            (key, hex::encode(h.finalize()))
        })
        .collect()
}

/// The snapshot-driven judge. Cheap to share behind an `Arc`; the snapshot
/// in force is swapped atomically.
pub struct PolicyJudge {
    current: Current,
    /// `--allow-registry`: hosts contacted besides those policies select.
    allowed_registries: Vec<HostPattern>,
    base: ClientConfig,
    public_good: TrustedRoot,
    public_good_id: String,
    no_match: NoMatchPolicy,
    /// Resolves tags (anonymous and per pull-secret identity).
    resolvers: Mutex<HashMap<String, Arc<RegistryClient>>>,
    /// Signature material shared across snapshots and policies.
    material: Option<Arc<MaterialCache>>,
    /// Fetches (and caches) the CRLs and OCSP answers of Notary Project
    /// signatures, under the registry clients' address rules.
    revocation: Arc<RevocationFetcher>,
    /// The revision in force, for whoever must act on a change (the audit).
    revision: watch::Sender<u64>,
    /// The ImagePolicyExceptions in force, if this process enforces any.
    exceptions: Option<Arc<ExceptionTable>>,
}

/// SHA-256 of everything `snapshot` enforces: all but its revision and
/// `generatedAt`, so two writers' equal revisions compare by content.
fn content_digest(snapshot: &PolicySnapshot) -> [u8; 32] {
    let enforced = (
        &snapshot.api_version,
        &snapshot.policies,
        &snapshot.trust_roots,
        &snapshot.sigstore,
        &snapshot.workload_kinds,
    );
    Sha256::digest(serde_json::to_vec(&enforced).unwrap_or_default()).into()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl PolicyJudge {
    /// A judge without a snapshot (not ready). `public_good` verifies
    /// authorities that name no TrustRoot when the snapshot says nothing
    /// better (v2 snapshots carry the default trust root or the built-in
    /// Sigstore root as the controller keeps it); `public_good_id` identifies
    /// it in verdict cache keys; `no_match` is what unselected images get.
    pub fn new(
        base: ClientConfig,
        public_good: TrustedRoot,
        public_good_id: &str,
        no_match: NoMatchPolicy,
    ) -> Result<Self, PolicyJudgeError> {
        let current: Current = Arc::new(RwLock::new(None));
        let mut base = base;
        base.scope = Some(Arc::new(PolicyRegistries {
            current: current.clone(),
        }));
        // Fail at start, not at the first admission, if TLS cannot be set up.
        let anonymous = RegistryClient::new(base.clone())
            .map_err(|e| PolicyJudgeError::Client(e.to_string()))?;
        let mut resolvers = HashMap::new();
        resolvers.insert(String::new(), Arc::new(anonymous));
        let revocation = RevocationFetcher::new(FetchConfig {
            addresses: base.addresses.clone(),
            lookup: base.lookup.clone(),
            ..FetchConfig::default()
        })
        .map_err(|e| PolicyJudgeError::Client(e.to_string()))?;
        Ok(Self {
            current,
            allowed_registries: Vec::new(),
            base,
            public_good,
            public_good_id: public_good_id.to_string(),
            no_match,
            resolvers: Mutex::new(resolvers),
            material: None,
            revocation: Arc::new(revocation),
            revision: watch::Sender::new(0),
            exceptions: None,
        })
    }

    /// Enforces the ImagePolicyExceptions `table` holds: a policy an
    /// exception waives for an image of a workload does not judge it until
    /// the exception expires, by this process's clock.
    pub fn with_exceptions(mut self, table: Arc<ExceptionTable>) -> Self {
        self.exceptions = Some(table);
        self
    }

    /// The policies waived now for `image` of `object`.
    fn waivers(&self, object: &ObjectInfo, image: &ImageName) -> Vec<Waiver> {
        let Some(table) = &self.exceptions else {
            return Vec::new();
        };
        let exceptions = table.current();
        if !exceptions.in_namespace(&object.namespace) {
            return Vec::new();
        }
        let workloads = exception::workload_names(&object.kind, &object.object.metadata);
        exceptions.waivers(
            &object.namespace,
            &workloads,
            image,
            time::OffsetDateTime::now_utc(),
        )
    }

    /// Shares discovered signature material through `cache`, across
    /// policies, authorities and snapshots (keyed by credentials identity,
    /// repository and digest).
    pub fn with_material_cache(mut self, cache: Arc<MaterialCache>) -> Self {
        self.material = Some(cache);
        self
    }

    /// Lets the registry clients contact hosts matching `patterns` besides
    /// those the policies select (`--allow-registry`); applies from the
    /// next snapshot on, so set it before loading one.
    pub fn with_allowed_registries(mut self, patterns: Vec<HostPattern>) -> Self {
        self.allowed_registries = patterns;
        self
    }

    /// Parses, validates and applies the bytes of a `snapshot.json`.
    pub fn apply_bytes(&self, bytes: &[u8]) -> Result<Applied, PolicyJudgeError> {
        self.apply(&PolicySnapshot::from_slice(bytes)?)
    }

    /// Validates `snapshot` and puts it in force when its revision is not
    /// older than the one in force. On error nothing changes.
    pub fn apply(&self, snapshot: &PolicySnapshot) -> Result<Applied, PolicyJudgeError> {
        let valid = sigil_compile::snapshot::validate(snapshot)?;
        let default_root = valid.default_root(&self.public_good);
        let policy_hash = format!(
            "r{}:{}",
            valid.revision,
            sha256_hex(
                serde_json::to_string(&snapshot.policies)
                    .unwrap_or_default()
                    .as_bytes()
            )
        );
        // Everything trust-related the snapshot decides: the trust roots
        // with their default mark and the built-in root. A change of the
        // default is then never answered from an old verdict.
        let trust_root_version = format!(
            "{}+{}",
            self.public_good_id,
            sha256_hex(
                serde_json::to_string(&(&snapshot.trust_roots, &snapshot.sigstore))
                    .unwrap_or_default()
                    .as_bytes()
            )
        );
        let versions = Versions {
            policy_hash,
            trust_root_version,
        };
        let content = content_digest(snapshot);
        let mut current = self
            .current
            .write()
            .map_err(|_| PolicyJudgeError::Poisoned)?;
        if let Some(held) = current.as_ref() {
            if valid.revision < held.revision {
                return Ok(Applied::Stale);
            }
            if valid.revision == held.revision && content != held.content {
                return Ok(Applied::Conflicting);
            }
            if held.versions == versions {
                return Ok(Applied::Unchanged);
            }
        }
        let prints = policy_prints(snapshot, &valid.policies, &self.public_good_id);
        let all: Vec<CompiledPolicy> = valid.policies.into_values().collect();
        let (cluster, scoped): (Vec<CompiledPolicy>, Vec<CompiledPolicy>) =
            all.into_iter().partition(|p| p.namespace.is_none());
        // A namespace's ImagePolicies widen the registries contacted for its
        // own objects only.
        let hosts = registry_hosts(&cluster, &self.allowed_registries);
        let mut by_namespace: HashMap<String, Vec<CompiledPolicy>> = HashMap::new();
        for p in scoped {
            let ns = p.namespace.clone().unwrap_or_default();
            by_namespace.entry(ns).or_default().push(p);
        }
        let cluster = PolicySet::new(cluster);
        let namespace_hosts = by_namespace
            .iter()
            .map(|(ns, policies)| (ns.clone(), registry_hosts(policies, &[])))
            .collect();
        let namespaced = by_namespace
            .into_iter()
            .map(|(ns, policies)| (ns, PolicySet::new(policies)))
            .collect();
        // Pull secrets for signatures come from sigil's namespace: only the
        // cluster's policies may name them (the snapshot refuses them in an
        // ImagePolicy).
        let mut signature_secrets: Vec<String> = cluster
            .policies
            .iter()
            .flat_map(|p| &p.authorities)
            .flat_map(|a| &a.sources)
            .flat_map(|s| s.pull_secrets.iter().cloned())
            .collect();
        signature_secrets.sort();
        signature_secrets.dedup();
        let generated_at = sigil_verifier::trust::parse_rfc3339(&snapshot.generated_at);
        // A namespace's policy never makes sigil pin tags elsewhere.
        let pin_hosts = registry_hosts(cluster.admission(), &self.allowed_registries);
        *current = Some(Arc::new(Loaded {
            prints,
            hosts,
            namespace_hosts,
            pin_hosts,
            revision: valid.revision,
            content,
            cluster,
            namespaced,
            default_root,
            default_name: valid.default_trust_root,
            trust_roots: valid.trust_roots,
            versions,
            epoch: current.as_ref().map_or(0, |held| held.epoch) + 1,
            signature_secrets,
            generated_at,
            loaded_at: Instant::now(),
            verifiers: Mutex::new(HashMap::new()),
            workload_kinds: Arc::new(valid.workload_kinds),
        }));
        drop(current);
        self.revision.send_replace(valid.revision);
        Ok(Applied::Swapped)
    }

    /// The revision in force, if any.
    pub fn revision(&self) -> Option<u64> {
        self.loaded().map(|l| l.revision)
    }

    /// Changes to the revision in force: the receiver sees the revision of
    /// every snapshot swapped in (0 until the first).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }

    /// The policies in force with what each one's verdicts depend on, so a
    /// caller that keeps verdicts across snapshots (the audit) can tell
    /// which images a new snapshot can judge differently; `None` before the
    /// first snapshot.
    pub fn in_force(&self) -> Option<InForce> {
        let loaded = self.loaded()?;
        Some(InForce {
            revision: loaded.revision,
            versions: loaded.versions.clone(),
            policies: loaded
                .all()
                .map(|p| {
                    let print = loaded.prints.get(&p.name).cloned().unwrap_or_default();
                    (p.name.clone(), (print, p.clone()))
                })
                .collect(),
        })
    }

    /// The TrustRoot that is the default in force, if one is marked.
    pub fn default_trust_root(&self) -> Option<String> {
        self.loaded().and_then(|l| l.default_name.clone())
    }

    fn loaded(&self) -> Option<Arc<Loaded>> {
        self.current.read().ok().and_then(|c| c.clone())
    }

    fn credentials_key(secrets: &PullSecrets) -> String {
        if secrets.credentials.is_empty() {
            String::new()
        } else {
            secrets.id.clone()
        }
    }

    fn config_for(&self, credentials: &sigil_registry::Credentials) -> ClientConfig {
        let mut config = self.base.clone();
        config.credentials.merge(credentials.clone());
        config
    }

    /// The verifier with the object's own credentials.
    fn verifier(
        &self,
        loaded: &Loaded,
        secrets: &PullSecrets,
    ) -> Result<Arc<RegistryVerifier>, String> {
        self.verifier_for(loaded, Self::credentials_key(secrets), &secrets.credentials)
    }

    /// The verifier with `credentials`, kept under `key` (their identity)
    /// for the snapshot's life.
    fn verifier_for(
        &self,
        loaded: &Loaded,
        key: String,
        credentials: &sigil_registry::Credentials,
    ) -> Result<Arc<RegistryVerifier>, String> {
        let mut verifiers = loaded.verifiers.lock().map_err(|_| {
            "verifier table poisoned; restart the webhook (or controller)".to_string()
        })?;
        if let Some(v) = verifiers.get(&key) {
            return Ok(v.clone());
        }
        let client =
            RegistryClient::new(self.config_for(credentials)).map_err(|e| e.to_string())?;
        let mut verifier = RegistryVerifier::new(
            client,
            loaded.default_root.clone(),
            loaded.trust_roots.clone(),
        )
        .with_revocation(self.revocation.clone());
        if let Some(cache) = &self.material {
            verifier = verifier.with_material(MaterialScope {
                cache: cache.clone(),
                credentials_id: key.clone(),
            });
        }
        let verifier = Arc::new(verifier);
        if verifiers.len() >= MAX_VERIFIERS {
            verifiers.clear();
        }
        verifiers.insert(key, verifier.clone());
        Ok(verifier)
    }

    fn resolver(&self, secrets: &PullSecrets) -> Result<Arc<RegistryClient>, String> {
        let key = Self::credentials_key(secrets);
        let mut resolvers = self.resolvers.lock().map_err(|_| {
            "registry client table poisoned; restart the webhook (or controller)".to_string()
        })?;
        if let Some(c) = resolvers.get(&key) {
            return Ok(c.clone());
        }
        let client = Arc::new(
            RegistryClient::new(self.config_for(&secrets.credentials))
                .map_err(|e| e.to_string())?,
        );
        if resolvers.len() >= MAX_VERIFIERS {
            resolvers.retain(|k, _| k.is_empty());
        }
        resolvers.insert(key, client.clone());
        Ok(client)
    }

    /// What the policies of `loaded` may read about `object`.
    fn resource(loaded: &Loaded, object: &ObjectInfo) -> ResourceInfo {
        let mut r = ResourceInfo {
            group: object.group.clone(),
            version: object.version.clone(),
            resource: object.resource.clone(),
            kind: object.kind.clone(),
            name: object.name.clone(),
            namespace: object.namespace.clone(),
            labels: object.labels.clone(),
            ..ResourceInfo::default()
        };
        if loaded.reads(&object.namespace).1 {
            r.metadata = serde_json::to_value(&object.object.metadata).unwrap_or_default();
            r.spec = object.object.data.get("spec").cloned().unwrap_or_default();
        }
        r
    }

    fn no_match_verdict(&self) -> Verdict {
        match self.no_match {
            NoMatchPolicy::Allow => Verdict::allow(Vec::new()),
            NoMatchPolicy::Warn => Verdict::warn(Vec::new(), vec![render::NO_MATCH_WARNED.into()]),
            NoMatchPolicy::Deny => Verdict::deny(Vec::new(), vec![render::NO_MATCH_DENIED.into()]),
        }
    }
}

/// `verdict` with a `Skipped` result for each waived policy that selects
/// the image (and, when `warn`, an admission warning naming the exception).
/// When the waived policies were the only ones selecting the image, it is
/// admitted: the image was selected, so `noMatchPolicy` does not apply.
fn with_waivers(mut verdict: Verdict, waived: &[(&CompiledPolicy, Waiver)], warn: bool) -> Verdict {
    if waived.is_empty() {
        return verdict;
    }
    if verdict.results.is_empty() {
        verdict = Verdict::allow(Vec::new());
    }
    for (policy, waiver) in waived {
        verdict.policies.push(policy.name.clone());
        if warn {
            verdict.warnings.push(waiver.warning());
        }
        verdict.results.push(PolicyVerdict {
            policy: policy.name.clone(),
            mode: policy.mode,
            outcome: PolicyOutcome::Skipped,
            authorities: Vec::new(),
            message: waiver.words(),
        });
    }
    verdict
}

/// Maps an evaluation result onto the server's verdict, worded by
/// `sigil_policy::render` (the wording `sigil policy test` prints too).
fn verdict_of(result: &ImageResult, no_match: Verdict) -> Verdict {
    // Unmatched and no namespace's policy judged it either.
    if result.no_match.is_some() && result.policies.is_empty() {
        return no_match;
    }
    let words = render::image_words(result);
    Verdict {
        allowed: result.allowed(),
        reasons: words.reasons,
        warnings: words.warnings,
        policies: result.policies.iter().map(|p| p.name.clone()).collect(),
        results: result.policies.iter().map(policy_verdict).collect(),
    }
}

/// One policy's part of a verdict, worded as [`verdict_of`] words it.
fn policy_verdict(p: &PolicyResult) -> PolicyVerdict {
    let outcome = if p.passed {
        if p.warnings.is_empty() {
            PolicyOutcome::Pass
        } else {
            PolicyOutcome::Warn
        }
    } else if p.inconclusive() {
        PolicyOutcome::Inconclusive
    } else {
        PolicyOutcome::Fail
    };
    let mut message: Vec<String> = render::policy_warnings(p).collect();
    message.extend(render::policy_failure(p));
    PolicyVerdict {
        policy: p.name.clone(),
        mode: p.mode,
        outcome,
        authorities: authority_verdicts(p),
        message: message.join("; "),
    }
}

/// Each authority's part: how it fared on the named digest, or, where the
/// policy judged only the platform images of an index (`platforms:
/// every`), whether it passed on every one of them.
fn authority_verdicts(p: &PolicyResult) -> Vec<AuthorityVerdict> {
    let platform_images = match &p.platforms {
        Some(PlatformsResult {
            images: Ok(images), ..
        }) if p.authorities.is_empty() => images.as_slice(),
        _ => &[],
    };
    let Some(first) = platform_images.first() else {
        return p
            .authorities
            .iter()
            .map(|a| AuthorityVerdict {
                name: a.name.clone(),
                kind: a.kind,
                passed: a.outcome.is_ok(),
            })
            .collect();
    };
    first
        .result
        .authorities
        .iter()
        .enumerate()
        .map(|(i, a)| AuthorityVerdict {
            name: a.name.clone(),
            kind: a.kind,
            passed: platform_images.iter().all(|image| {
                image
                    .result
                    .authorities
                    .get(i)
                    .is_some_and(|b| b.outcome.is_ok())
            }),
        })
        .collect()
}

/// The verifier of one judgement: the object's own credentials for
/// everything, except that an authority whose `source` names
/// `signaturePullSecrets` fetches its signatures and attestations with
/// those too ([`PullSecrets::for_signatures`]). What a policy reads about
/// the image itself (its config files, its platforms) and every other
/// authority's material come with the object's own credentials only, so a
/// policy never sees what the object's pulls could not read.
struct Routed<'a> {
    judge: &'a PolicyJudge,
    loaded: &'a Loaded,
    secrets: &'a PullSecrets,
    own: Arc<RegistryVerifier>,
}

impl AuthorityVerifier for Routed<'_> {
    async fn verify(&self, image: &ImageName, authority: &CompiledAuthority) -> AuthorityOutcome {
        let names: Vec<String> = authority
            .sources
            .iter()
            .flat_map(|s| s.pull_secrets.iter().cloned())
            .collect();
        let Some((credentials, key)) = self.secrets.for_signatures(&names) else {
            return self.own.verify(image, authority).await;
        };
        match self.judge.verifier_for(self.loaded, key, &credentials) {
            Ok(v) => v.verify(image, authority).await,
            Err(e) => AuthorityOutcome::Failed(e),
        }
    }

    async fn config_files(&self, image: &ImageName) -> Result<ConfigFiles, ImageReadError> {
        self.own.config_files(image).await
    }

    async fn platform_images(
        &self,
        image: &ImageName,
    ) -> Result<Option<Vec<PlatformImage>>, ImageReadError> {
        self.own.platform_images(image).await
    }
}

impl ImageJudge for PolicyJudge {
    fn registry_keychain(&self) -> Option<Arc<sigil_registry::Keychain>> {
        self.base.keychain.clone()
    }

    async fn judge(
        &self,
        image: &PinnedImage,
        object: &ObjectInfo,
        secrets: &PullSecrets,
        deadline: Instant,
    ) -> Verdict {
        let Some(loaded) = self.loaded() else {
            return Verdict::deny(
                Vec::new(),
                vec!["no policy snapshot is loaded yet; the webhook is not ready".into()],
            );
        };
        let reference = image.reference();
        let name = match ImageName::parse(&reference) {
            Ok(n) => n,
            Err(e) => return Verdict::deny(Vec::new(), vec![e.to_string()]),
        };
        let verifier = match self.verifier(&loaded, secrets) {
            Ok(own) => Routed {
                judge: self,
                loaded: &loaded,
                secrets,
                own,
            },
            Err(e) => return Verdict::deny(Vec::new(), vec![e]),
        };
        let resource = Self::resource(&loaded, object);
        let waivers = self.waivers(object, &name);
        let run = evaluate_image(
            &verifier,
            loaded
                .admission(&object.namespace)
                .filter(|p| !is_waived(&waivers, p)),
            &name,
            &resource,
            self.no_match,
        );
        let verdict = match tokio::time::timeout_at(deadline, run).await {
            Ok(result) => verdict_of(&result, self.no_match_verdict()),
            Err(_) => {
                return Verdict::deny(Vec::new(), vec![crate::judge::deadline_passed(&reference)]);
            }
        };
        let waived = waived_selecting(
            loaded.admission(&object.namespace),
            &waivers,
            &name,
            &resource,
        );
        with_waivers(verdict, &waived, true)
    }

    async fn judge_audit_mode(
        &self,
        image: &PinnedImage,
        object: &ObjectInfo,
        secrets: &PullSecrets,
        deadline: Instant,
    ) -> Verdict {
        let Some(loaded) = self.loaded() else {
            return Verdict::allow(Vec::new());
        };
        let reference = image.reference();
        let name = match ImageName::parse(&reference) {
            Ok(n) => n,
            Err(e) => return Verdict::allow(Vec::new()).unjudged(&[], &e.to_string()),
        };
        let resource = Self::resource(&loaded, object);
        let selecting: Vec<&CompiledPolicy> = loaded
            .audit_mode(&object.namespace)
            .filter(|p| p.matches_image(&name) && p.matches_resource(&resource))
            .collect();
        let verifier = match self.verifier(&loaded, secrets) {
            Ok(own) => Routed {
                judge: self,
                loaded: &loaded,
                secrets,
                own,
            },
            Err(e) => return Verdict::allow(Vec::new()).unjudged(&selecting, &e),
        };
        let waivers = self.waivers(object, &name);
        let run = evaluate_image(
            &verifier,
            loaded
                .audit_mode(&object.namespace)
                .filter(|p| !is_waived(&waivers, p)),
            &name,
            &resource,
            NoMatchPolicy::Allow,
        );
        let waived = waived_selecting(
            loaded.audit_mode(&object.namespace),
            &waivers,
            &name,
            &resource,
        );
        match tokio::time::timeout_at(deadline, run).await {
            Ok(result) => with_waivers(
                Verdict {
                    allowed: true,
                    policies: result.policies.iter().map(|p| p.name.clone()).collect(),
                    results: result.policies.iter().map(policy_verdict).collect(),
                    ..Verdict::default()
                },
                &waived,
                false,
            ),
            Err(_) => {
                let judged: Vec<&CompiledPolicy> = selecting
                    .into_iter()
                    .filter(|p| !is_waived(&waivers, p))
                    .collect();
                with_waivers(
                    Verdict::allow(Vec::new())
                        .unjudged(&judged, &crate::judge::deadline_passed(&reference)),
                    &waived,
                    false,
                )
            }
        }
    }

    async fn resolve(
        &self,
        image: &str,
        secrets: &PullSecrets,
        deadline: Instant,
    ) -> Result<String, String> {
        if let Some(digest) = crate::judge::digest_of(image)? {
            return Ok(digest);
        }
        crate::judge::resolve_tag(&*self.resolver(secrets)?, image, deadline).await
    }

    fn matches(&self, image: &str, object: &ObjectInfo) -> bool {
        let Some(loaded) = self.loaded() else {
            return false;
        };
        let Ok(name) = ImageName::parse(image) else {
            return false;
        };
        let resource = Self::resource(&loaded, object);
        loaded
            .admission(&object.namespace)
            .any(|p| p.matches_image(&name) && p.matches_resource(&resource))
    }

    fn audit_mode_matches(&self, image: &str, object: &ObjectInfo) -> bool {
        let Some(loaded) = self.loaded() else {
            return false;
        };
        if loaded.audit_mode(&object.namespace).next().is_none() {
            return false;
        }
        let Ok(name) = ImageName::parse(image) else {
            return false;
        };
        let resource = Self::resource(&loaded, object);
        loaded
            .audit_mode(&object.namespace)
            .any(|p| p.matches_image(&name) && p.matches_resource(&resource))
    }

    fn registry_permitted(&self, image: &str) -> bool {
        let Some(loaded) = self.loaded() else {
            return false;
        };
        ImageRef::parse(image).is_ok_and(|r| loaded.pin_hosts.contains(&r.repository.host))
    }

    fn registry_scope_key(&self, namespace: &str) -> String {
        match self.loaded() {
            Some(loaded) if loaded.namespace_hosts.contains_key(namespace) => namespace.to_string(),
            _ => String::new(),
        }
    }

    fn no_match(&self, _image: &str) -> Verdict {
        self.no_match_verdict()
    }

    fn versions(&self) -> Versions {
        self.loaded().map_or_else(
            || Versions {
                policy_hash: "none".into(),
                trust_root_version: self.public_good_id.clone(),
            },
            |l| l.versions.clone(),
        )
    }

    fn verdict_versions(&self, image: &PinnedImage, object: &ObjectInfo) -> Versions {
        let Some(loaded) = self.loaded() else {
            return self.versions();
        };
        let Ok(name) = ImageName::parse(&image.reference()) else {
            // Judged as a denial whatever the policies say; keyed by all.
            return loaded.versions.clone();
        };
        // Each print covers the policy's spec, the trust roots it names and
        // whatever authorities naming none verify against: the policies
        // that select the image say everything its verdict depends on.
        // An image none selects gets `noMatchPolicy`, which no snapshot sets.
        // The waivers in force now are part of the key: a verdict judged
        // under an exception never answers once it has expired (the key
        // then names no waiver) or for a workload it does not cover.
        let waived: String = self
            .waivers(object, &name)
            .iter()
            .map(|w| {
                format!(
                    "|{}={}@{}",
                    w.policy,
                    w.exception,
                    w.expires_at.unix_timestamp()
                )
            })
            .collect();
        Versions {
            policy_hash: format!(
                "selecting:{}{waived}",
                loaded.selecting_prints(&name, &Self::resource(&loaded, object))
            ),
            trust_root_version: self.public_good_id.clone(),
        }
    }

    fn epoch(&self) -> u64 {
        // Both only grow: their sum moves whenever either does, so no
        // verdict judged across an exception change is cached.
        self.loaded().map_or(0, |l| l.epoch)
            + self.exceptions.as_ref().map_or(0, |t| t.generation())
    }

    fn object_key(&self, object: &ObjectInfo) -> Option<String> {
        let Some(loaded) = self.loaded() else {
            return Some(String::new());
        };
        // Objects of a namespace with ImagePolicies are judged by more
        // policies than the cluster's: their verdicts are kept apart.
        let scoped = loaded.namespaced.contains_key(&object.namespace);
        let (reads_resource, reads_object) = loaded.reads(&object.namespace);
        if !reads_resource && !reads_object && !scoped {
            return Some(String::new());
        }
        // A hash of exactly what the policies may read, so one object's
        // verdict never answers for another that reads differently.
        let mut h = Sha256::new();
        for part in [
            &object.group,
            &object.version,
            &object.resource,
            &object.kind,
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        for (k, v) in &object.labels {
            h.update(k.as_bytes());
            h.update([1]);
            h.update(v.as_bytes());
            h.update([0]);
        }
        if scoped {
            h.update(b"namespace\0");
            h.update(object.namespace.as_bytes());
            h.update([0]);
        }
        if reads_object {
            let r = Self::resource(&loaded, object);
            h.update(r.metadata.to_string().as_bytes());
            h.update([0]);
            h.update(r.spec.to_string().as_bytes());
        }
        Some(hex::encode(h.finalize()))
    }

    fn signature_pull_secrets(&self) -> Vec<String> {
        self.loaded()
            .map(|l| l.signature_secrets.clone())
            .unwrap_or_default()
    }

    fn workload_kinds(&self) -> Option<Arc<sigil_compile::workload_kind::WorkloadKinds>> {
        self.loaded().map(|l| l.workload_kinds.clone())
    }

    fn ready(&self) -> bool {
        self.loaded().is_some()
    }

    fn snapshot_revision(&self) -> Option<u64> {
        self.revision()
    }

    fn snapshot_age(&self) -> Option<Duration> {
        let loaded = self.loaded()?;
        if let Some(at) = loaded.generated_at {
            let age = time::OffsetDateTime::now_utc() - at;
            if let Ok(d) = Duration::try_from(age) {
                return Some(d);
            }
        }
        Some(loaded.loaded_at.elapsed())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use std::collections::BTreeMap;

    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    use serde_json::json;
    use sigil_policy::model::Mode;

    use super::*;

    const IMAGE: &str = "registry.test/shop/app";
    const DIGEST: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    /// A policy with one static authority (no registry is ever contacted).
    fn policy(name: &str, mode: &str, action: &str) -> serde_json::Value {
        json!({
            "name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1",
            "spec": {
                "images": [{"glob": "registry.test/**"}],
                "authorities": [{"name": "gate", "static": {"action": action}}],
                "mode": mode,
            },
        })
    }

    fn judge(no_match: NoMatchPolicy, policies: serde_json::Value) -> PolicyJudge {
        let root = TrustedRoot::public_good().unwrap();
        let judge =
            PolicyJudge::new(ClientConfig::default(), root, "public-good", no_match).unwrap();
        let snapshot = json!({
            "apiVersion": "policy.sigil.dev/snapshot/v1",
            "revision": 1,
            "generatedAt": "2026-01-01T00:00:00Z",
            "policies": policies,
            "trustRoots": [],
        });
        judge
            .apply_bytes(snapshot.to_string().as_bytes())
            .expect("the snapshot loads");
        judge
    }

    #[test]
    fn an_equal_revision_is_taken_only_with_the_same_content() {
        let judge = judge(
            NoMatchPolicy::Deny,
            json!([policy("strict", "enforce", "fail")]),
        );
        let held = judge.versions();
        let at_revision_one = |policies: serde_json::Value, generated_at: &str| {
            json!({
                "apiVersion": "policy.sigil.dev/snapshot/v1",
                "revision": 1,
                "generatedAt": generated_at,
                "policies": policies,
                "trustRoots": [],
            })
            .to_string()
        };

        // A second controller's write of the same revision, other content.
        let other = at_revision_one(
            json!([policy("lenient", "enforce", "pass")]),
            "2026-01-01T00:00:05Z",
        );
        assert_eq!(
            judge.apply_bytes(other.as_bytes()).unwrap(),
            Applied::Conflicting
        );
        assert_eq!(judge.versions(), held, "the snapshot in force stays");

        // The same content written again (another generatedAt) changes nothing.
        let again = at_revision_one(
            json!([policy("strict", "enforce", "fail")]),
            "2026-01-01T00:00:09Z",
        );
        assert_eq!(
            judge.apply_bytes(again.as_bytes()).unwrap(),
            Applied::Unchanged
        );
        assert_eq!(judge.revision(), Some(1));
    }

    fn pod() -> ObjectInfo {
        let gvk = GroupVersionKind::gvk("", "v1", "Pod");
        ObjectInfo {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            sub_resource: String::new(),
            kind: "Pod".into(),
            namespace: "shop".into(),
            name: "web".into(),
            labels: BTreeMap::new(),
            pull_secret_names: Vec::new(),
            service_account: "default".into(),
            object: Arc::new(DynamicObject::new("web", &ApiResource::from_gvk(&gvk))),
        }
    }

    fn pinned() -> PinnedImage {
        PinnedImage {
            image: format!("{IMAGE}:1"),
            digest: DIGEST.into(),
        }
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[tokio::test]
    async fn a_failing_audit_mode_policy_is_left_out_of_the_admission_verdict() {
        let judge = judge(
            NoMatchPolicy::Deny,
            json!([
                policy("gate", "enforce", "pass"),
                policy("preview", "audit", "fail")
            ]),
        );
        let image = format!("{IMAGE}:1");
        assert!(judge.matches(&image, &pod()));
        assert!(judge.audit_mode_matches(&image, &pod()));
        let secrets = PullSecrets::anonymous();
        let verdict = judge.judge(&pinned(), &pod(), &secrets, later()).await;
        assert!(verdict.allowed, "{verdict:?}");
        assert!(verdict.warnings.is_empty() && verdict.reasons.is_empty());
        assert_eq!(verdict.policies, ["gate"]);
        let audit = judge
            .judge_audit_mode(&pinned(), &pod(), &secrets, later())
            .await;
        assert!(audit.allowed && audit.reasons.is_empty() && audit.warnings.is_empty());
        assert_eq!(audit.results.len(), 1, "{audit:?}");
        let r = &audit.results[0];
        assert_eq!(
            (r.policy.as_str(), r.mode, r.outcome),
            ("preview", Mode::Audit, PolicyOutcome::Fail)
        );
        assert!(
            r.message.starts_with(
                "policy preview (mode: audit) failed: authority gate (static): disallowed"
            ),
            "{}",
            r.message
        );
        assert!(
            !audit.is_clean(),
            "a failure is cached briefly, like a denial"
        );
    }

    #[tokio::test]
    async fn an_image_only_audit_mode_policies_select_is_unmatched_for_admission() {
        let judge = judge(
            NoMatchPolicy::Deny,
            json!([policy("preview", "audit", "pass")]),
        );
        let image = format!("{IMAGE}:1");
        assert!(!judge.matches(&image, &pod()), "no pinning, no /validate");
        assert!(
            !judge.registry_permitted(&image),
            "--pin all does not pin for it"
        );
        assert!(judge.audit_mode_matches(&image, &pod()));
        let secrets = PullSecrets::anonymous();
        let verdict = judge.judge(&pinned(), &pod(), &secrets, later()).await;
        assert!(!verdict.allowed);
        assert_eq!(verdict.reasons, [render::NO_MATCH_DENIED]);
        let audit = judge
            .judge_audit_mode(&pinned(), &pod(), &secrets, later())
            .await;
        assert_eq!(audit.results.len(), 1);
        assert_eq!(audit.results[0].outcome, PolicyOutcome::Pass);
        assert!(audit.is_clean());
    }

    #[tokio::test]
    async fn without_audit_mode_policies_nothing_is_judged_for_them() {
        let judge = judge(
            NoMatchPolicy::Allow,
            json!([policy("gate", "warn", "fail")]),
        );
        assert!(!judge.audit_mode_matches(&format!("{IMAGE}:1"), &pod()));
        let audit = judge
            .judge_audit_mode(&pinned(), &pod(), &PullSecrets::anonymous(), later())
            .await;
        assert!(audit.results.is_empty());
        let verdict = judge
            .judge(&pinned(), &pod(), &PullSecrets::anonymous(), later())
            .await;
        assert!(verdict.allowed);
        assert_eq!(verdict.warnings.len(), 1, "warn mode still warns");
    }
}

#[cfg(test)]
mod namespaced_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use std::collections::BTreeMap;

    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    use serde_json::json;

    use super::*;

    const IMAGE: &str = "registry.test/shop/app";
    const DIGEST: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    /// A snapshot entry with one static authority; `namespace` empty for a
    /// ClusterImagePolicy.
    fn entry(namespace: &str, name: &str, mode: &str, action: &str) -> serde_json::Value {
        json!({
            "name": name, "namespace": namespace, "uid": format!("uid-{namespace}-{name}"),
            "generation": 1, "resourceVersion": "1",
            "spec": {
                "images": [{"glob": "registry.test/**"}],
                "authorities": [{"name": "gate", "static": {"action": action}}],
                "mode": mode,
            },
        })
    }

    fn judge(no_match: NoMatchPolicy, policies: serde_json::Value) -> PolicyJudge {
        let root = TrustedRoot::public_good().unwrap();
        let judge =
            PolicyJudge::new(ClientConfig::default(), root, "public-good", no_match).unwrap();
        let snapshot = json!({
            "apiVersion": "policy.sigil.dev/snapshot/v3", "revision": 1,
            "generatedAt": "2026-01-01T00:00:00Z", "policies": policies, "trustRoots": [],
        });
        judge
            .apply_bytes(snapshot.to_string().as_bytes())
            .expect("the snapshot loads");
        judge
    }

    fn pod_in(namespace: &str) -> ObjectInfo {
        let gvk = GroupVersionKind::gvk("", "v1", "Pod");
        ObjectInfo {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            sub_resource: String::new(),
            kind: "Pod".into(),
            namespace: namespace.into(),
            name: "web".into(),
            labels: BTreeMap::new(),
            pull_secret_names: Vec::new(),
            service_account: "default".into(),
            object: Arc::new(DynamicObject::new("web", &ApiResource::from_gvk(&gvk))),
        }
    }

    async fn verdict(judge: &PolicyJudge, namespace: &str) -> Verdict {
        let image = PinnedImage {
            image: format!("{IMAGE}:1"),
            digest: DIGEST.into(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        judge
            .judge(
                &image,
                &pod_in(namespace),
                &PullSecrets::anonymous(),
                deadline,
            )
            .await
    }

    #[tokio::test]
    async fn a_namespaces_policy_adds_a_requirement_there_and_nowhere_else() {
        let judge = judge(
            NoMatchPolicy::Deny,
            json!([
                entry("", "cluster-gate", "enforce", "pass"),
                entry("team-a", "stricter", "enforce", "fail")
            ]),
        );
        let in_a = verdict(&judge, "team-a").await;
        assert!(!in_a.allowed, "{in_a:?}");
        assert_eq!(in_a.policies, ["cluster-gate", "team-a/stricter"]);
        assert_eq!(
            in_a.reasons,
            [
                "policy team-a/stricter failed: authority gate (static): disallowed by a static fail authority"
            ]
        );
        let in_b = verdict(&judge, "team-b").await;
        assert!(in_b.allowed, "{in_b:?}");
        assert_eq!(in_b.policies, ["cluster-gate"]);
    }

    #[tokio::test]
    async fn a_namespaces_policy_never_removes_a_requirement() {
        // A cluster policy that fails stays failed whatever the namespace
        // adds, and a namespace's passing policy does not stand in for the
        // cluster policy `noMatchPolicy: deny` asks for.
        let judge_failing = judge(
            NoMatchPolicy::Deny,
            json!([
                entry("", "cluster-gate", "enforce", "fail"),
                entry("team-a", "anything", "enforce", "pass")
            ]),
        );
        let v = verdict(&judge_failing, "team-a").await;
        assert!(!v.allowed);
        assert_eq!(v.policies, ["cluster-gate", "team-a/anything"]);

        let only_tenant = judge(
            NoMatchPolicy::Deny,
            json!([entry("team-a", "anything", "enforce", "pass")]),
        );
        let image = format!("{IMAGE}:1");
        assert!(only_tenant.matches(&image, &pod_in("team-a")));
        assert!(!only_tenant.matches(&image, &pod_in("team-b")));
        let v = verdict(&only_tenant, "team-a").await;
        assert!(!v.allowed, "{v:?}");
        assert_eq!(v.reasons, [render::NO_MATCH_DENIED]);

        // With noMatchPolicy: warn, the namespace's failing policy denies
        // and the unmatched warning stays.
        let warn = judge(
            NoMatchPolicy::Warn,
            json!([entry("team-a", "stricter", "enforce", "fail")]),
        );
        let v = verdict(&warn, "team-a").await;
        assert!(!v.allowed);
        assert_eq!(v.warnings, [render::NO_MATCH_WARNED]);
        assert_eq!(v.reasons.len(), 1);
        assert!(v.reasons[0].starts_with("policy team-a/stricter failed"));
        let v = verdict(&warn, "team-b").await;
        assert!(v.allowed && v.reasons.is_empty());
        assert_eq!(v.warnings, [render::NO_MATCH_WARNED]);
    }

    #[test]
    fn verdicts_in_a_namespace_with_policies_of_its_own_are_cached_apart() {
        let judge = judge(
            NoMatchPolicy::Deny,
            json!([
                entry("", "cluster-gate", "enforce", "pass"),
                entry("team-a", "stricter", "enforce", "fail")
            ]),
        );
        let a = judge.object_key(&pod_in("team-a")).unwrap();
        let b = judge.object_key(&pod_in("team-b")).unwrap();
        let c = judge.object_key(&pod_in("team-c")).unwrap();
        assert_ne!(a, b, "team-a's verdict must never answer for team-b");
        assert_eq!(
            b, c,
            "namespaces without policies share the cluster's verdicts"
        );
        assert_eq!(b, "");
    }

    #[tokio::test]
    async fn a_namespaces_audit_mode_policy_is_judged_only_for_the_audit() {
        let judge = judge(
            NoMatchPolicy::Allow,
            json!([
                entry("", "cluster-gate", "enforce", "pass"),
                entry("team-a", "preview", "audit", "fail")
            ]),
        );
        let image = format!("{IMAGE}:1");
        assert!(judge.audit_mode_matches(&image, &pod_in("team-a")));
        assert!(!judge.audit_mode_matches(&image, &pod_in("team-b")));
        let v = verdict(&judge, "team-a").await;
        assert!(v.allowed && v.reasons.is_empty() && v.warnings.is_empty());
        let pinned = PinnedImage {
            image,
            digest: DIGEST.into(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let audit = judge
            .judge_audit_mode(
                &pinned,
                &pod_in("team-a"),
                &PullSecrets::anonymous(),
                deadline,
            )
            .await;
        assert_eq!(audit.results.len(), 1);
        assert_eq!(audit.results[0].policy, "team-a/preview");
        assert_eq!(audit.results[0].outcome, PolicyOutcome::Fail);
    }

    /// Counts the judgements a [`CachedJudge`] runs (its cache misses).
    #[derive(Default)]
    struct Judgements(std::sync::atomic::AtomicUsize);

    impl crate::cache::JudgeObserver for Judgements {
        fn verified(&self, _seconds: f64) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        fn cache_lookup(&self, _cache: &'static str, _hit: bool) {}
    }

    /// A snapshot of `revision` with `policies` and `trust_roots`.
    fn snapshot(
        revision: u64,
        policies: serde_json::Value,
        trust_roots: serde_json::Value,
    ) -> Vec<u8> {
        json!({
            "apiVersion": "policy.sigil.dev/snapshot/v3", "revision": revision,
            "generatedAt": "2026-01-01T00:00:00Z", "policies": policies,
            "trustRoots": trust_roots,
        })
        .to_string()
        .into_bytes()
    }

    struct Cached {
        judge: Arc<PolicyJudge>,
        cache: crate::cache::CachedJudge<PolicyJudge>,
        judgements: Arc<Judgements>,
    }

    impl Cached {
        fn new(policies: serde_json::Value) -> Self {
            let judge = Arc::new(judge(NoMatchPolicy::Deny, policies));
            let judgements = Arc::new(Judgements::default());
            let cache = crate::cache::CachedJudge::new(
                judge.clone(),
                &crate::cache::CacheConfig::default(),
                judgements.clone(),
            );
            Self {
                judge,
                cache,
                judgements,
            }
        }

        fn apply(&self, revision: u64, policies: serde_json::Value) {
            self.judge
                .apply_bytes(&snapshot(revision, policies, json!([])))
                .unwrap();
        }

        /// The verdict in `namespace` and whether the judge ran for it.
        async fn verdict(&self, namespace: &str) -> (bool, bool) {
            let before = self.judgements.0.load(std::sync::atomic::Ordering::SeqCst);
            let image = PinnedImage {
                image: format!("{IMAGE}:1"),
                digest: DIGEST.into(),
            };
            let object = pod_in(namespace);
            let secrets = crate::secrets::ObjectSecrets::new(
                &crate::secrets::NoPullSecrets,
                &object,
                Vec::new(),
            );
            let v = self
                .cache
                .verdict(
                    &image,
                    &object,
                    &secrets,
                    Instant::now() + Duration::from_secs(30),
                )
                .await
                .unwrap();
            let after = self.judgements.0.load(std::sync::atomic::Ordering::SeqCst);
            (v.allowed, after > before)
        }
    }

    #[tokio::test]
    async fn a_namespaces_policy_edit_leaves_other_namespaces_verdicts_cached() {
        let cached = Cached::new(json!([
            entry("", "cluster-gate", "enforce", "pass"),
            entry("team-a", "own", "enforce", "pass"),
        ]));
        assert_eq!(cached.verdict("team-b").await, (true, true));
        assert_eq!(cached.verdict("team-a").await, (true, true));
        assert_eq!(cached.verdict("team-b").await, (true, false));

        // team-a tightens its own policy, and adds one.
        cached.apply(
            2,
            json!([
                entry("", "cluster-gate", "enforce", "pass"),
                entry("team-a", "own", "enforce", "fail"),
                entry("team-a", "another", "enforce", "pass"),
            ]),
        );
        assert_eq!(
            cached.verdict("team-b").await,
            (true, false),
            "team-b's verdict stays cached"
        );
        assert_eq!(
            cached.verdict("team-a").await,
            (false, true),
            "team-a's is judged again, by its new policy"
        );
    }

    #[tokio::test]
    async fn a_change_of_a_policy_that_selects_the_image_is_never_answered_from_an_old_verdict() {
        let pass = json!([entry("", "cluster-gate", "enforce", "pass")]);
        let fail = json!([entry("", "cluster-gate", "enforce", "fail")]);
        let cached = Cached::new(pass.clone());
        assert_eq!(cached.verdict("team-b").await, (true, true));
        cached.apply(2, fail);
        assert_eq!(cached.verdict("team-b").await, (false, true));
        // Back to the first spec: judged again too (the clean allow of
        // revision 1 could serve it, and nothing older ever does).
        cached.apply(3, pass);
        assert!(cached.verdict("team-b").await.0);
        // A policy that does not select the image leaves it cached...
        cached.apply(
            4,
            json!([
                entry("", "cluster-gate", "enforce", "pass"),
                {"name": "elsewhere", "uid": "u-e", "generation": 1, "resourceVersion": "1",
                 "spec": {"images": [{"glob": "other.test/**"}],
                          "authorities": [{"static": {"action": "fail"}}]}},
            ]),
        );
        assert_eq!(cached.verdict("team-b").await, (true, false));
        // ...and a new one that selects it does not.
        cached.apply(
            5,
            json!([
                entry("", "cluster-gate", "enforce", "pass"),
                entry("", "newly-required", "enforce", "fail"),
            ]),
        );
        assert_eq!(cached.verdict("team-b").await, (false, true));
    }

    /// A trust root's JSON: the public-good root with a marker that makes
    /// its material differ.
    fn trust_root(name: &str, marker: &str) -> serde_json::Value {
        let mut root: serde_json::Value =
            serde_json::from_str(sigil_verifier::trust::PUBLIC_GOOD_JSON).unwrap();
        root["marker"] = json!(marker);
        json!({"name": name, "generation": 1, "trustedRootJson": root.to_string()})
    }

    #[test]
    fn a_verdicts_key_follows_the_trust_roots_its_policies_use_and_no_other() {
        let keyless = |name: &str, root: &str| {
            json!({"name": name, "uid": format!("u-{name}"), "generation": 1,
                   "resourceVersion": "1",
                   "spec": {"images": [{"glob": "registry.test/**"}],
                            "authorities": [{"keyless": {
                                "trustRootRef": root,
                                "identities": [{"issuer": "https://issuer.example",
                                                "subject": "ci@example.com"}]}}]}})
        };
        let policies = json!([keyless("uses-a", "root-a")]);
        let judge = judge(NoMatchPolicy::Deny, json!([]));
        let image = PinnedImage {
            image: format!("{IMAGE}:1"),
            digest: DIGEST.into(),
        };
        let object = pod_in("team-b");
        // Revisions above the one `judge` starts from: an equal revision
        // with other content is not taken.
        let key = |revision: u64, roots: serde_json::Value| {
            judge
                .apply_bytes(&snapshot(revision, policies.clone(), roots))
                .unwrap();
            judge.verdict_versions(&image, &object)
        };
        let first = key(
            2,
            json!([trust_root("root-a", "1"), trust_root("root-b", "1")]),
        );
        let other_changed = key(
            3,
            json!([trust_root("root-a", "1"), trust_root("root-b", "2")]),
        );
        assert_eq!(first, other_changed, "root-b is not used: verdicts stay");
        let used_changed = key(
            4,
            json!([trust_root("root-a", "2"), trust_root("root-b", "2")]),
        );
        assert_ne!(other_changed, used_changed, "root-a is used: verdicts go");
        // Marked as the cluster's default, any root may apply to any policy.
        let mut default_b = trust_root("root-b", "2");
        default_b["default"] = json!(true);
        let default_changed = key(5, json!([trust_root("root-a", "2"), default_b]));
        assert_ne!(used_changed, default_changed);
    }

    #[tokio::test]
    async fn a_namespaces_registries_are_contacted_for_its_own_objects_only() {
        let mut own = entry("team-a", "own", "enforce", "pass");
        own["spec"]["images"] = json!([{"glob": "team-a.registry.test/**"}]);
        let key = include_str!("../../../scripts/samples/cosign.pub");
        own["spec"]["authorities"] = json!([{"name": "k", "key": {"data": key},
            "source": [{"oci": "sigs.team-a.test/sigs"}]}]);
        let judge = judge(
            NoMatchPolicy::Deny,
            json!([entry("", "cluster-gate", "enforce", "pass"), own]),
        );
        let scope = PolicyRegistries {
            current: judge.current.clone(),
        };
        for host in ["team-a.registry.test", "sigs.team-a.test"] {
            assert!(
                crate::tenant::in_namespace("team-a", async { scope.permits(host) })
                    .await
                    .is_ok(),
                "{host} for team-a"
            );
            let err = crate::tenant::in_namespace("team-b", async { scope.permits(host) })
                .await
                .unwrap_err();
            assert!(
                err.contains("nor an ImagePolicy of namespace team-b"),
                "{err}"
            );
            assert!(scope.permits(host).is_err(), "{host} outside any namespace");
        }
        // Tags resolved for team-a are cached apart from everyone else's.
        assert_eq!(judge.registry_scope_key("team-a"), "team-a");
        assert_eq!(judge.registry_scope_key("team-b"), "");
        // The cluster's registries, for everyone.
        assert!(
            crate::tenant::in_namespace("team-b", async { scope.permits("registry.test") })
                .await
                .is_ok()
        );
    }
}
