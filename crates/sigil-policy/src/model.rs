//! The compiled policy model: what a validated ClusterImagePolicy becomes, in
//! terms the verifier and the evaluation understand, with every string
//! already parsed (globs, keys, regular expressions, Rego) so admission never
//! parses policy text. Nothing here knows about Kubernetes objects; names of
//! Secrets and TrustRoots are plain strings the controller resolves.
//!
//! It also holds what evaluation establishes about an image's authorities
//! ([`VerifiedSignature`], [`VerifiedAttestation`], [`AuthorityResult`]):
//! [`crate::eval`] produces them and [`crate::document`] turns them into the
//! documents CIP-level policies read, so both import them from here rather
//! than from each other.

use std::collections::BTreeMap;

use crate::cue::CuePolicy;
use crate::glob::{Glob, ImageName};
use crate::rego::RegoPolicy;
use sigil_verifier::crypto::{HashAlgorithm, PublicKey};
use sigil_verifier::dsse::Statement;
use sigil_verifier::identity::FulcioIdentity;
use sigil_verifier::identity::IdentityPolicy;

/// One compiled ClusterImagePolicy.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    /// The ClusterImagePolicy's name, or an ImagePolicy's `NAMESPACE/NAME`.
    pub name: String,
    /// An ImagePolicy's namespace: the policy applies only to objects
    /// admitted there, and never makes an image "matched" for the cluster's
    /// `noMatchPolicy`. `None` for a ClusterImagePolicy.
    pub namespace: Option<String>,
    /// Images the policy applies to (any glob selects).
    pub images: Vec<Glob>,
    /// Authorities; any one passing satisfies the policy (without a
    /// CIP-level `policy`).
    pub authorities: Vec<CompiledAuthority>,
    /// The CIP-level policy over the authority results.
    pub policy: Option<CipPolicy>,
    /// Enforce, warn or audit.
    pub mode: Mode,
    /// Resource filters; empty means every resource sigil admits.
    pub matches: Vec<ResourceMatch>,
    /// What must pass when the image is a multi-platform index.
    pub platforms: Platforms,
}

impl CompiledPolicy {
    /// Whether any of the policy's globs selects `image`.
    pub fn matches_image(&self, image: &ImageName) -> bool {
        self.images.iter().any(|g| g.matches(image))
    }

    /// Whether the policy applies to the admitted resource: an ImagePolicy
    /// only in its own namespace, and, when the policy has `match` entries,
    /// only to the resources one of them selects.
    pub fn matches_resource(&self, resource: &ResourceInfo) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| ns == resource.namespace)
            && (self.matches.is_empty() || self.matches.iter().any(|m| m.matches(resource)))
    }
}

/// What happens when a policy fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Deny admission.
    #[default]
    Enforce,
    /// Admit, with the failure as an admission warning.
    Warn,
    /// sigil's extension: never affect admission (no denial, no warning,
    /// no pinning); the verdict is only counted by the webhook and reported
    /// by the audit, so an admin sees what the policy would deny before
    /// enforcing it.
    Audit,
}

impl Mode {
    /// `enforce`, `warn` or `audit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::Warn => "warn",
            Self::Audit => "audit",
        }
    }

    /// Whether a policy in this mode takes part in admission (enforce and
    /// warn do; audit never does).
    pub fn admits(self) -> bool {
        self != Self::Audit
    }
}

/// What must satisfy a policy when the image is a multi-platform index
/// (sigil's `platforms` extension); an image that is not an index is always
/// judged by its own digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Platforms {
    /// The digest the workload names (policy-controller's behaviour): an
    /// index passes on its own signatures, whatever its platforms carry.
    #[default]
    Named,
    /// Every platform image the index lists, each on its own signatures
    /// and attestations; the index's own are not consulted.
    Every,
    /// The digest the workload names, or else every platform image.
    NamedOrEvery,
}

impl Platforms {
    /// `named`, `every` or `namedOrEvery`, as the policy spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Named => "named",
            Self::Every => "every",
            Self::NamedOrEvery => "namedOrEvery",
        }
    }
}

/// One compiled authority.
#[derive(Debug, Clone)]
pub struct CompiledAuthority {
    /// The authority's name (`authority-<index>` when the policy gave none).
    pub name: String,
    /// Who may sign, or a static verdict.
    pub kind: AuthorityKind,
    /// Where signatures live; empty means next to the image.
    pub sources: Vec<SignatureSource>,
    /// Transparency-log requirement.
    pub tlog: TlogPolicy,
    /// TrustRoot whose timestamp authorities verify RFC 3161 timestamps
    /// (`rfc3161timestamp.trustRootRef`); `None` uses the authority's trust root.
    pub timestamp_trust_root: Option<String>,
    /// Attestations required; when non-empty the authority is satisfied by
    /// them alone (as in policy-controller), not by plain signatures.
    pub attestations: Vec<CompiledAttestation>,
}

/// Who may sign.
#[derive(Debug, Clone)]
pub enum AuthorityKind {
    /// A managed key.
    Key(KeyAuthority),
    /// Fulcio certificates.
    Keyless(KeylessAuthority),
    /// No verification: a fixed verdict.
    Static(StaticAction),
    /// Notary Project signatures under a Notation trust policy.
    Notation(NotationAuthority),
}

/// A Notary Project authority: the parsed trust policy and its trust stores.
#[derive(Debug, Clone)]
pub struct NotationAuthority {
    /// The trust policy document, validated.
    pub policy: sigil_notation::policy::TrustPolicy,
    /// Every store the trust policy names, with its certificates.
    pub trust_store: sigil_notation::store::TrustStore,
}

/// A managed-key authority.
#[derive(Debug, Clone)]
pub struct KeyAuthority {
    /// The key, or the Secret that holds it.
    pub key: KeyMaterial,
    /// Digest algorithm the key signed over (`hashAlgorithm`); `None` when
    /// the policy does not say, which verifies with the digest cosign signs
    /// with for the key's type.
    pub hash: Option<HashAlgorithm>,
}

/// A public key, inline or still to be read from a Secret.
#[derive(Debug, Clone)]
pub enum KeyMaterial {
    /// The decoded key.
    Resolved(PublicKey),
    /// A Secret the controller has not resolved yet; verification against it
    /// fails with a message naming the Secret.
    Secret(SecretRef),
}

/// A reference to a Kubernetes Secret, by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SecretRef {
    /// The Secret's namespace (sigil's own namespace when empty).
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
}

impl std::fmt::Display for SecretRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "secret {}", self.name)
        } else {
            write!(f, "secret {}/{}", self.namespace, self.name)
        }
    }
}

/// A keyless authority.
#[derive(Debug, Clone)]
pub struct KeylessAuthority {
    /// Accepted identities; any one suffices.
    pub identities: Vec<IdentityPolicy>,
    /// Which CAs certificates must chain to.
    pub trust: CaTrust,
    /// Whether an embedded SCT is required (`insecureIgnoreSCT` turns it off).
    pub require_sct: bool,
}

/// Where a keyless authority's CA comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaTrust {
    /// The cluster's default trust root: the TrustRoot marked as default,
    /// else the Sigstore public-good root (kept fresh through TUF by the
    /// controller, embedded in sigil as the fallback).
    Default,
    /// A TrustRoot object, by name.
    TrustRoot(String),
    /// A PEM certificate chain given inline (`ca-cert.data`), as DER,
    /// leaf-most first and root last.
    CaCert(Vec<Vec<u8>>),
    /// A PEM chain in a Secret, resolved by the controller.
    CaCertSecret(SecretRef),
    /// No CA can be trusted, for this reason (`ca-cert.kms`: a KMS holds
    /// keys, not certificate chains). The authority never passes, as in
    /// policy-controller, which accepts such a policy and admits nothing
    /// through it.
    Unusable(String),
}

/// Transparency-log requirement of an authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlogPolicy {
    /// A log entry must verify against the logs of this TrustRoot, or the
    /// authority's own trust root when `None`.
    Required {
        /// `ctlog.trustRootRef`.
        trust_root: Option<String>,
    },
    /// No log entry is needed (`ctlog: {}`, managed keys only).
    Disabled,
}

/// A fixed verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaticAction {
    /// Always passes.
    Pass,
    /// Always fails, with the policy's message.
    Fail {
        /// `static.message`.
        message: Option<String>,
    },
}

/// Where an authority's signatures are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureSource {
    /// Repository holding signatures (`source.oci`), or the image's own.
    pub oci: Option<String>,
    /// Secrets (in sigil's own namespace, as policy-controller reads them
    /// from its own) to pull signatures with; the webhook resolves them, the
    /// CLI uses its docker config instead.
    pub pull_secrets: Vec<String>,
    /// Prefix of legacy `sha256-<hex>.sig` tags.
    pub tag_prefix: Option<String>,
}

/// A required attestation.
#[derive(Debug, Clone)]
pub struct CompiledAttestation {
    /// The attestation's name (key in the CIP-level policy document).
    pub name: String,
    /// The in-toto predicate type URI (short names already expanded).
    pub predicate_type: String,
    /// The predicate type as the policy writes it (a cosign short name or
    /// a URI): it decides how policy-controller re-encodes the statement
    /// ([`crate::document::StatementShape`]) and is what the CIP-level
    /// document reports.
    pub predicate_type_name: String,
    /// Evaluated over each matching statement; `None` accepts any.
    pub policy: Option<PolicyProgram>,
}

/// A policy in one of the two languages policy-controller supports.
// A program is built once per policy when it compiles and then shared, never
// moved per admission, so the size of the Rego variant costs nothing worth a
// Box at every construction site.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum PolicyProgram {
    /// `type: rego`.
    Rego(RegoPolicy),
    /// `type: cue`.
    Cue(CuePolicy),
}

impl PolicyProgram {
    /// `rego` or `cue`.
    pub fn language(&self) -> &'static str {
        match self {
            Self::Rego(_) => "rego",
            Self::Cue(_) => "cue",
        }
    }
}

/// The CIP-level policy.
#[derive(Debug, Clone)]
pub struct CipPolicy {
    /// The policy.
    pub program: PolicyProgram,
    /// Whether the admitted object's `spec` is in the document.
    pub include_spec: bool,
    /// Whether its `metadata` is.
    pub include_object_meta: bool,
    /// Whether its `apiVersion` and `kind` are.
    pub include_type_meta: bool,
    /// Whether the image's config files are (`fetchConfigFile`), under
    /// `config` by platform.
    pub fetch_config_file: bool,
}

/// The admitted resource, as far as policies look at it.
#[derive(Debug, Clone, Default)]
pub struct ResourceInfo {
    /// API group (`apps`, empty for core).
    pub group: String,
    /// API version (`v1`).
    pub version: String,
    /// Plural resource (`deployments`).
    pub resource: String,
    /// `kind` (`Deployment`).
    pub kind: String,
    /// The object's name, for messages.
    pub name: String,
    /// The object's namespace.
    pub namespace: String,
    /// The object's labels.
    pub labels: BTreeMap<String, String>,
    /// The object's `metadata` (for `includeObjectMeta`).
    pub metadata: serde_json::Value,
    /// The object's `spec` (for `includeSpec`).
    pub spec: serde_json::Value,
}

/// One `match` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceMatch {
    /// API group; empty matches any.
    pub group: String,
    /// API version; empty matches any.
    pub version: String,
    /// Plural resource; empty matches any.
    pub resource: String,
    /// Label selector on the admitted object.
    pub selector: Option<LabelSelector>,
}

impl ResourceMatch {
    /// Whether the resource matches every field that is set.
    pub fn matches(&self, r: &ResourceInfo) -> bool {
        let field = |want: &str, have: &str| want.is_empty() || want == have;
        field(&self.group, &r.group)
            && field(&self.version, &r.version)
            && field(&self.resource, &r.resource)
            && self.selector.as_ref().is_none_or(|s| s.matches(&r.labels))
    }
}

/// A Kubernetes label selector.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    /// Labels that must have exactly these values.
    pub match_labels: BTreeMap<String, String>,
    /// Further requirements; all must hold.
    pub match_expressions: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: LabelOperator,
    /// Values for `In` and `NotIn`.
    pub values: Vec<String>,
}

/// A label selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOperator {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl LabelRequirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            LabelOperator::In => value.is_some_and(|v| self.values.contains(v)),
            LabelOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            LabelOperator::Exists => value.is_some(),
            LabelOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// What to do with an image no policy selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoMatchPolicy {
    /// Deny admission (the default).
    #[default]
    Deny,
    /// Admit with a warning.
    Warn,
    /// Admit silently.
    Allow,
}

/// Cosign's predicate short names and the URIs they stand for.
pub const PREDICATE_SHORT_NAMES: &[(&str, &str)] = &[
    ("custom", "https://cosign.sigstore.dev/attestation/v1"),
    ("slsaprovenance", "https://slsa.dev/provenance/v0.2"),
    ("slsaprovenance02", "https://slsa.dev/provenance/v0.2"),
    ("slsaprovenance1", "https://slsa.dev/provenance/v1"),
    ("spdx", "https://spdx.dev/Document"),
    ("spdxjson", "https://spdx.dev/Document"),
    ("cyclonedx", "https://cyclonedx.org/bom"),
    ("link", "https://in-toto.io/Link/v1"),
    ("vuln", "https://cosign.sigstore.dev/attestation/vuln/v1"),
    ("openvex", "https://openvex.dev/ns"),
];

/// Expands a cosign short name to its predicate type URI; other values are
/// returned unchanged (they are URIs already).
pub fn predicate_type_uri(name: &str) -> &str {
    PREDICATE_SHORT_NAMES
        .iter()
        .find(|(short, _)| *short == name)
        .map_or(name, |(_, uri)| uri)
}

/// A verified signature.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedSignature {
    /// A stable identifier (bundle or signature-layer digest).
    pub id: String,
    /// The Fulcio identity, for keyless signatures.
    pub identity: Option<FulcioIdentity>,
}

/// A verified attestation.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedAttestation {
    /// A stable identifier (bundle or attestation-layer digest).
    pub id: String,
    /// The Fulcio identity, for keyless attestations.
    pub identity: Option<FulcioIdentity>,
    /// The verified in-toto statement.
    pub statement: Statement,
}

/// The outcome of one authority.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorityResult {
    /// The authority's name.
    pub name: String,
    /// `key`, `keyless` or `static`.
    pub kind: &'static str,
    /// `Ok` with the matched material, or the reason it failed.
    pub outcome: Result<AuthorityMatch, String>,
    /// The failure was [`crate::eval::AuthorityOutcome::Inconclusive`]: a registry did
    /// not answer, so the image may well carry what the authority needs.
    pub inconclusive: bool,
}

/// What a passing authority matched: the input of the CIP-level policy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuthorityMatch {
    /// Verified signatures (empty for attestation authorities and statics).
    pub signatures: Vec<VerifiedSignature>,
    /// Attestations that satisfied their policies, by attestation name.
    pub attestations: BTreeMap<String, Vec<VerifiedAttestation>>,
    /// The predicate type of each attestation name as the policy writes it.
    pub predicate_types: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn short_predicate_names_expand_as_cosign_expands_them() {
        assert_eq!(
            predicate_type_uri("slsaprovenance"),
            "https://slsa.dev/provenance/v0.2"
        );
        assert_eq!(
            predicate_type_uri("slsaprovenance1"),
            "https://slsa.dev/provenance/v1"
        );
        assert_eq!(predicate_type_uri("spdxjson"), "https://spdx.dev/Document");
        assert_eq!(
            predicate_type_uri("vuln"),
            "https://cosign.sigstore.dev/attestation/vuln/v1"
        );
        assert_eq!(
            predicate_type_uri("https://example.com/p/v1"),
            "https://example.com/p/v1"
        );
    }

    #[test]
    fn label_selectors_apply_every_operator() {
        let have = labels(&[("team", "a"), ("tier", "web")]);
        let req = |key: &str, operator, values: &[&str]| LabelRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        };
        assert!(req("team", LabelOperator::In, &["a", "b"]).matches(&have));
        assert!(!req("team", LabelOperator::In, &["c"]).matches(&have));
        assert!(req("team", LabelOperator::NotIn, &["c"]).matches(&have));
        assert!(req("absent", LabelOperator::NotIn, &["c"]).matches(&have));
        assert!(req("tier", LabelOperator::Exists, &[]).matches(&have));
        assert!(req("absent", LabelOperator::DoesNotExist, &[]).matches(&have));
        let selector = LabelSelector {
            match_labels: labels(&[("team", "a")]),
            match_expressions: vec![req("tier", LabelOperator::In, &["db"])],
        };
        assert!(!selector.matches(&have));
    }

    #[test]
    fn resource_matches_check_only_the_fields_that_are_set() {
        let deployment = ResourceInfo {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            labels: labels(&[("env", "prod")]),
            ..ResourceInfo::default()
        };
        let m = |resource: &str, selector: Option<LabelSelector>| ResourceMatch {
            group: String::new(),
            version: String::new(),
            resource: resource.into(),
            selector,
        };
        assert!(m("deployments", None).matches(&deployment));
        assert!(!m("pods", None).matches(&deployment));
        let prod = LabelSelector {
            match_labels: labels(&[("env", "prod")]),
            ..LabelSelector::default()
        };
        assert!(m("", Some(prod)).matches(&deployment));
    }
}
