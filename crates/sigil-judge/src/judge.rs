//! The seam between whoever asks about an image (the admission server, the
//! audit) and whatever decides about it: [`ImageJudge`] (verdicts, tag
//! resolution, policy matching, readiness) and [`PullSecretSource`]
//! (registry credentials of the object the image belongs to).
//!
//! The callers, the cache ([`crate::cache`]) and the tests only know these
//! traits; the policy engine plugs in by implementing [`ImageJudge`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::core::DynamicObject;
use sigil_compile::workload_kind::WorkloadKinds;
use sigil_policy::model::{CompiledPolicy, Mode};
use sigil_registry::Credentials;
use tokio::time::Instant;

/// An image of the admitted object, pinned to the digest that will run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PinnedImage {
    /// The image as written in the object (`ghcr.io/x/y:1.0` or `...@sha256:...`).
    pub image: String,
    /// The digest that runs: `sha256:<64 hex>`, from the reference or resolved.
    pub digest: String,
}

impl PinnedImage {
    /// The reference to verify: the written image without its tag's digest
    /// ambiguity, i.e. `repository[:tag]@digest`.
    pub fn reference(&self) -> String {
        if self.image.contains('@') {
            self.image.clone()
        } else {
            format!("{}@{}", self.image, self.digest)
        }
    }
}

/// What the judge may know about the object an image belongs to.
#[derive(Debug, Clone)]
pub struct ObjectInfo {
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (`pods`, `deployments`, ...).
    pub resource: String,
    /// Subresource (`ephemeralcontainers`), empty for the object itself.
    pub sub_resource: String,
    /// Kind (`Pod`, `Deployment`, ...).
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name (may be empty for objects named by `generateName`).
    pub name: String,
    /// The object's labels.
    pub labels: BTreeMap<String, String>,
    /// Names of the pod template's `imagePullSecrets`.
    pub pull_secret_names: Vec<String>,
    /// The pod template's service account (`default` when unset).
    pub service_account: String,
    /// The whole object as admitted, for policies that look at metadata or spec.
    pub object: Arc<DynamicObject>,
}

impl ObjectInfo {
    /// `kind namespace/name`, as messages name the object.
    pub fn display(&self) -> String {
        let name = if self.name.is_empty() {
            "(generated name)"
        } else {
            &self.name
        };
        format!(
            "{} {}/{}",
            self.kind.to_ascii_lowercase(),
            self.namespace,
            name
        )
    }
}

/// The judge's decision for one image.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Whether the image may run.
    pub allowed: bool,
    /// When denied: why, one entry per policy or authority tried
    /// (`policy p, authority a (key): no signature found ...`).
    pub reasons: Vec<String>,
    /// Admission warnings (warn-mode failures, notes), without the image name.
    pub warnings: Vec<String>,
    /// Names of the policies that applied, for logs.
    pub policies: Vec<String>,
    /// How each policy that applied judged the image, for the audit's
    /// reports; empty for judges that do not report per policy and for
    /// images no policy selects.
    pub results: Vec<PolicyVerdict>,
}

/// How one ClusterImagePolicy judged an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyVerdict {
    /// The policy's name.
    pub policy: String,
    /// The policy's mode: `Audit` results come only from
    /// [`ImageJudge::judge_audit_mode`] and never decide admission.
    pub mode: Mode,
    /// What it decided.
    pub outcome: PolicyOutcome,
    /// The authorities tried, in policy order.
    pub authorities: Vec<AuthorityVerdict>,
    /// What admission says about it: the denial reason or warning exactly
    /// as the webhook words it (`policy p failed: authority a (key): ...`);
    /// for a pass, empty or the policy's warnings.
    pub message: String,
}

/// One authority of a [`PolicyVerdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityVerdict {
    /// The authority's name.
    pub name: String,
    /// `key`, `keyless` or `static`.
    pub kind: &'static str,
    /// Whether it vouched for the image.
    pub passed: bool,
}

/// What one policy decided about an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyOutcome {
    /// It passed without remarks.
    Pass,
    /// It passed with warnings (Rego `warning`).
    Warn,
    /// A registry did not answer (or refused access), so nothing could be
    /// verified: denied at admission, never a pass.
    Inconclusive,
    /// It failed.
    Fail,
    /// An ImagePolicyException waives it for this image of this workload:
    /// it did not judge the image ([`PolicyVerdict::message`] names the
    /// exception and its expiry).
    Skipped,
}

impl PolicyOutcome {
    /// Its name in logs and metric labels: `pass`, `warn`, `error`
    /// (inconclusive), `fail` or `skip` (waived by an exception), as the
    /// audit's reports spell them.
    pub fn label(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Warn => "warn",
            Self::Inconclusive => "error",
            Self::Fail => "fail",
            Self::Skipped => "skip",
        }
    }
}

impl Verdict {
    /// An allow without remarks.
    pub fn allow(policies: Vec<String>) -> Self {
        Self {
            allowed: true,
            policies,
            ..Self::default()
        }
    }

    /// A denial with reasons.
    pub fn deny(policies: Vec<String>, reasons: Vec<String>) -> Self {
        Self {
            allowed: false,
            reasons,
            policies,
            ..Self::default()
        }
    }

    /// An allow with warnings (`mode: warn`).
    pub fn warn(policies: Vec<String>, warnings: Vec<String>) -> Self {
        Self {
            allowed: true,
            warnings,
            policies,
            ..Self::default()
        }
    }

    /// `self` with an `Inconclusive` result for each of `policies` (`mode:
    /// audit` ones that could not be judged), worded with `cause`.
    pub fn unjudged(mut self, policies: &[&CompiledPolicy], cause: &str) -> Self {
        for p in policies {
            self.policies.push(p.name.clone());
            self.results.push(PolicyVerdict {
                policy: p.name.clone(),
                mode: p.mode,
                outcome: PolicyOutcome::Inconclusive,
                authorities: Vec::new(),
                message: format!(
                    "policy {} (mode: {}) could not be judged: {cause}",
                    p.name,
                    p.mode.as_str()
                ),
            });
        }
        self
    }

    /// Whether the verdict is clean: allowed with no warnings and no policy
    /// result short of a pass (an audit-mode failure admits, yet is not
    /// clean). Other verdicts are cached only briefly, since a retry may see
    /// new signatures.
    pub fn is_clean(&self) -> bool {
        self.allowed
            && self.warnings.is_empty()
            && self
                .results
                .iter()
                .all(|r| matches!(r.outcome, PolicyOutcome::Pass | PolicyOutcome::Warn))
    }

    /// What the verdict comes to.
    pub fn outcome(&self) -> Outcome {
        if !self.allowed {
            Outcome::Denied
        } else if self.warnings.is_empty() {
            Outcome::Allowed
        } else {
            Outcome::Warned
        }
    }
}

/// What a verdict, or an object's admission, comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Admitted without remarks.
    Allowed,
    /// Admitted with warnings.
    Warned,
    /// Refused.
    Denied,
}

impl Outcome {
    /// Its name in logs and metric labels: `allowed`, `warned`, `denied`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Warned => "warned",
            Self::Denied => "denied",
        }
    }
}

/// The versions of everything a verdict depends on besides the image. A
/// verdict cached under other versions is never reused, so a policy or
/// trust-root change cannot be answered from an old verdict.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Versions {
    /// A hash of the policy set in force.
    pub policy_hash: String,
    /// The version of the trust roots in force.
    pub trust_root_version: String,
}

/// Registry credentials for one admitted object: its own (its pull secrets
/// or its service account's), and apart from them the policies'
/// `signaturePullSecrets`, which only the signature fetches of the
/// authorities naming them use.
#[derive(Debug, Clone, Default)]
pub struct PullSecrets {
    /// The object's own credentials per registry host (anonymous when
    /// none): everything about the image itself (its tag, its config, its
    /// platforms) is read with these alone.
    pub credentials: Credentials,
    /// A stable identity of [`Self::credentials`] (a hash of the secrets'
    /// names, uids, resource versions and contents; never a secret), so
    /// clients are reused only for the same credentials.
    pub id: String,
    /// Why some of the object's pull secrets were not read (a namespace
    /// outside `--pull-secret-namespace`), told to the user as a warning.
    pub note: Option<String>,
    /// The policies' `signaturePullSecrets` (Secrets in sigil's namespace),
    /// by Secret name: an authority whose `source` names some of them
    /// fetches its signatures and attestations with them, for the hosts
    /// the object has no credentials of its own for. Never used for another
    /// policy's fetches, nor for what a policy reads about the image itself.
    pub signature: BTreeMap<String, SignatureSecret>,
}

/// The credentials one `signaturePullSecrets` Secret holds.
#[derive(Debug, Clone, Default)]
pub struct SignatureSecret {
    /// Credentials per registry host.
    pub credentials: Credentials,
    /// Their identity, as [`PullSecrets::id`].
    pub id: String,
}

/// The [`PullSecrets::id`] of anonymous access.
pub const ANONYMOUS: &str = "anonymous";

impl PullSecrets {
    /// No credentials.
    pub fn anonymous() -> Self {
        Self {
            credentials: Credentials::anonymous(),
            id: ANONYMOUS.into(),
            note: None,
            signature: BTreeMap::new(),
        }
    }

    /// The identity of everything here, the signature secrets included:
    /// what verdicts are cached under, so a verdict never answers for
    /// other credentials.
    pub fn identity(&self) -> String {
        let mut out = self.id.clone();
        for (name, secret) in &self.signature {
            out.push_str(&format!("+{name}={}", secret.id));
        }
        out
    }

    /// The credentials an authority whose sources name `secret_names`
    /// fetches signatures with, and their identity: the object's own, and
    /// for hosts it has none for, those of the named Secrets (the first
    /// named wins a host both name). `None` when the authority names none
    /// this object's secrets hold.
    pub fn for_signatures(&self, secret_names: &[String]) -> Option<(Credentials, String)> {
        let named: Vec<(&String, &SignatureSecret)> = secret_names
            .iter()
            .filter_map(|n| self.signature.get_key_value(n))
            .filter(|(_, s)| !s.credentials.is_empty())
            .collect();
        if named.is_empty() {
            return None;
        }
        let mut credentials = Credentials::anonymous();
        let mut id = format!("{}+signatures", self.id);
        for (name, secret) in named.iter().rev() {
            credentials.merge(secret.credentials.clone());
            id.push_str(&format!("+{name}={}", secret.id));
        }
        // `merge` lets the merged-in side win: the object's own last.
        credentials.merge(self.credentials.clone());
        Some((credentials, id))
    }
}

/// Decides about images. Implementations own verification and policy; the
/// server owns deadlines, caching, single flight and concurrency bounds
/// (see [`crate::cache::CachedJudge`]).
pub trait ImageJudge: Send + Sync + 'static {
    /// The verdict for `image`, already pinned to a digest, of `object`.
    /// Must answer by `deadline`; the caller stops waiting then and denies.
    fn judge(
        &self,
        image: &PinnedImage,
        object: &ObjectInfo,
        secrets: &PullSecrets,
        deadline: Instant,
    ) -> impl Future<Output = Verdict> + Send;

    /// Resolves a tag to its digest (`sha256:<hex>`) with the object's pull
    /// secrets; `Err` carries a user-facing cause.
    fn resolve(
        &self,
        image: &str,
        secrets: &PullSecrets,
        deadline: Instant,
    ) -> impl Future<Output = Result<String, String>> + Send;

    /// Whether any policy that takes part in admission (`enforce` or
    /// `warn`) selects `image` of `object`. Only such images are pinned by
    /// `/mutate` and verified by `/validate`.
    fn matches(&self, image: &str, object: &ObjectInfo) -> bool;

    /// The registry credential providers this judge reads registries with
    /// (for `sigil doctor`'s question through the admin port); `None`: none.
    fn registry_keychain(&self) -> Option<std::sync::Arc<sigil_registry::Keychain>> {
        None
    }

    /// Whether any `mode: audit` policy selects `image` of `object`: such
    /// images get [`judge_audit_mode`](Self::judge_audit_mode) besides (or,
    /// when [`matches`](Self::matches) is false, instead of) a verdict.
    fn audit_mode_matches(&self, image: &str, object: &ObjectInfo) -> bool {
        let _ = (image, object);
        false
    }

    /// How the `mode: audit` policies that select `image` (pinned) of
    /// `object` judge it: a verdict that always allows, with no reasons or
    /// warnings, whose [`Verdict::results`] are those policies' results
    /// (a policy that could not be judged in time is `Inconclusive`). Never
    /// part of an admission answer; the webhook counts it, the audit
    /// reports it.
    fn judge_audit_mode(
        &self,
        image: &PinnedImage,
        object: &ObjectInfo,
        secrets: &PullSecrets,
        deadline: Instant,
    ) -> impl Future<Output = Verdict> + Send {
        let _ = (image, object, secrets, deadline);
        std::future::ready(Verdict::allow(Vec::new()))
    }

    /// Whether `image`'s registry is one sigil may contact (a host some
    /// policy can select, or an allowed one). `/mutate --pin all` leaves
    /// the others unpinned rather than fetch from them.
    fn registry_permitted(&self, image: &str) -> bool {
        let _ = image;
        true
    }

    /// Which registries judgements for `namespace` may contact, as a key: a
    /// namespace whose own policies widen them gets a key of its own, so a
    /// tag resolved (or refused) for one namespace never answers for
    /// another. Default: one scope for all.
    fn registry_scope_key(&self, namespace: &str) -> String {
        let _ = namespace;
        String::new()
    }

    /// The verdict for an image no policy selects (`noMatchPolicy`).
    fn no_match(&self, image: &str) -> Verdict;

    /// The versions verdicts currently depend on. Must be read before the
    /// policy snapshot a following [`judge`](Self::judge) call uses (versions
    /// only move forward), so a cached verdict is never older than its key.
    fn versions(&self) -> Versions;

    /// What the verdict for `image` of `object` depends on now, for its
    /// cache key: a judge that knows which of its policies select the image
    /// names only those (and the trust roots they use), so a change of any
    /// other policy leaves this verdict cached. Default: [`Self::versions`].
    fn verdict_versions(&self, image: &PinnedImage, object: &ObjectInfo) -> Versions {
        let _ = (image, object);
        self.versions()
    }

    /// A number that changes whenever the policies in force may have (a
    /// new snapshot). A verdict is cached only when it did not change
    /// between [`Self::verdict_versions`] and the end of the judgement, so
    /// a cached verdict was judged by exactly the policies its key names.
    /// Default: 0, for judges whose policies never change.
    fn epoch(&self) -> u64 {
        0
    }

    /// What about `object` a verdict depends on (for instance the resource
    /// rules of matching policies), or `None` when verdicts for this object
    /// must not be cached (a policy reads the object's spec).
    fn object_key(&self, object: &ObjectInfo) -> Option<String> {
        let _ = object;
        Some(String::new())
    }

    /// Names of the Secrets (in sigil's own namespace) the policies in force
    /// pull signatures with (`source[].signaturePullSecrets`), each read
    /// apart into [`PullSecrets::signature`].
    fn signature_pull_secrets(&self) -> Vec<String> {
        Vec::new()
    }

    /// The WorkloadKinds in force (kinds besides Kubernetes' own workloads
    /// whose images are admitted, and where those images are), `None` when
    /// the judge has none.
    fn workload_kinds(&self) -> Option<Arc<WorkloadKinds>> {
        None
    }

    /// Whether policies and trust roots are loaded.
    fn ready(&self) -> bool;

    /// Age of the policy snapshot in force, when the judge has one.
    fn snapshot_age(&self) -> Option<Duration> {
        None
    }

    /// Revision of the policy snapshot in force, when the judge has one.
    fn snapshot_revision(&self) -> Option<u64> {
        None
    }
}

/// Finds registry credentials for an object from the names its pod template
/// carries. Reading Secrets needs the API server; see
/// [`crate::secrets`] for the implementations.
pub trait PullSecretSource: Send + Sync + 'static {
    /// Credentials from `secret_names` in `namespace` and from the
    /// `imagePullSecrets` of `service_account`. Errors are user-facing.
    fn pull_secrets(
        &self,
        namespace: &str,
        secret_names: &[String],
        service_account: &str,
        deadline: Instant,
    ) -> impl Future<Output = Result<PullSecrets, String>> + Send;

    /// Credentials from the policies' `signaturePullSecrets`, Secrets named
    /// `secret_names` in sigil's own namespace. A source that reads no
    /// Secrets answers anonymous.
    fn signature_pull_secrets(
        &self,
        secret_names: &[String],
        deadline: Instant,
    ) -> impl Future<Output = Result<PullSecrets, String>> + Send {
        let _ = (secret_names, deadline);
        std::future::ready(Ok(PullSecrets::anonymous()))
    }
}

/// The digest an image reference already names, if any; an unparsable
/// reference is an error naming it.
pub fn digest_of(image: &str) -> Result<Option<String>, String> {
    let reference = sigil_registry::reference::ImageRef::parse(image).map_err(|e| e.to_string())?;
    Ok(reference.digest.map(|d| d.to_string()))
}

/// Resolves `image`'s tag (`latest` when none) to a digest with `client`,
/// within `deadline`: the one tag-resolution path of every judge.
pub async fn resolve_tag(
    client: &sigil_registry::RegistryClient,
    image: &str,
    deadline: Instant,
) -> Result<String, String> {
    let reference = sigil_registry::reference::ImageRef::parse(image).map_err(|e| e.to_string())?;
    let tag = reference.tag.clone().unwrap_or_else(|| "latest".into());
    let session = client.session();
    let run = session.resolve_tag(&reference.repository, &tag);
    match tokio::time::timeout_at(deadline, run).await {
        Ok(Ok(Some(d))) => Ok(d.to_string()),
        Ok(Ok(None)) => Err(format!(
            "tag {tag} of {} not found in the registry (404); check the name and tag",
            reference.repository
        )),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(deadline_passed(image)),
    }
}

/// Why registry work for `image` was cut off by the admission deadline: the
/// one wording of every judge, naming the registry that did not answer.
pub fn deadline_passed(image: &str) -> String {
    format!(
        "registry {} did not answer before the admission deadline (slow or unreachable); \
         retry, or raise the webhook timeout",
        registry_host(image)
    )
}

/// The registry host of an image reference, as far as it can be told without
/// parsing (`nginx` → `docker.io`); only used to pick a concurrency bound
/// and to name the registry in messages.
pub fn registry_host(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use sigil_registry::Credential;

    use super::*;

    fn bearer(host: &str, token: &str) -> Credentials {
        let mut c = Credentials::anonymous();
        c.insert(host, Credential::Bearer(token.into()));
        c
    }

    fn token(c: &Credentials, host: &str) -> Option<String> {
        match c.for_host(host) {
            Some(Credential::Bearer(t)) => Some(t.clone()),
            _ => None,
        }
    }

    #[test]
    fn signature_secrets_serve_only_their_authorities_and_never_over_the_objects_own() {
        let mut secrets = PullSecrets {
            credentials: bearer("registry.example", "pod"),
            id: "kube:pod".into(),
            ..PullSecrets::default()
        };
        for (name, token) in [("first", "a"), ("second", "b")] {
            let mut c = bearer("registry.example", token);
            c.merge(bearer("sigs.example", token));
            secrets.signature.insert(
                name.into(),
                SignatureSecret {
                    credentials: c,
                    id: format!("kube:{name}"),
                },
            );
        }
        // Not named by the authority: nothing but the object's own.
        assert!(secrets.for_signatures(&[]).is_none());
        assert!(secrets.for_signatures(&["unknown".into()]).is_none());
        let (c, id) = secrets
            .for_signatures(&["second".into(), "first".into()])
            .unwrap();
        assert_eq!(token(&c, "registry.example").as_deref(), Some("pod"));
        assert_eq!(token(&c, "sigs.example").as_deref(), Some("b"));
        assert_ne!(id, secrets.id);
        // Verdicts are kept apart by every credential they may have used.
        assert_ne!(secrets.identity(), PullSecrets::anonymous().identity());
        assert!(secrets.identity().contains("first=kube:first"));
    }
}
