//! The policy snapshot: the contract between the controller, which writes it,
//! and the webhook, which enforces it. This module owns the document (its
//! shape, the Secret it lives in, parsing and its errors); checking that a
//! snapshot can be enforced compiles its policies and so lives above the
//! API types, in `sigil_compile::snapshot::validate`.
//!
//! The controller (the leader only) keeps one Secret, [`SECRET_NAME`] in
//! sigil's namespace, holding a [`PolicySnapshot`] gzip-compressed under a
//! manifest, spilling over shard Secrets when it outgrows one
//! ([`stored`] says how and why; releases before it wrote plain JSON under
//! [`SECRET_KEY`], which is still read). The snapshot is self-contained: every `key.secretRef`, `ca-cert`
//! Secret and ConfigMap-referenced policy is resolved inline, and every
//! TrustRoot is given as `trusted_root.json` text, so the webhook needs no
//! other object to enforce it.
//!
//! Guarantees the controller gives:
//! - only policies that compiled (`Ready=True`) are in it; when a policy's new
//!   generation is rejected the snapshot keeps its last accepted spec, so the
//!   webhook never enforces a rejected version and keeps enforcing the last
//!   good one;
//! - `revision` grows by one with every write and never goes back, also
//!   across controller restarts (the controller recovers the last snapshot
//!   from the Secret before it writes).
//!
//! - at most one trust root is marked [`SnapshotTrustRoot::default`]: the
//!   cluster's default trust root (a TrustRoot annotated
//!   `policy.sigil.dev/default-trust-root: "true"`), which every authority
//!   without a `trustRootRef` verifies against; without one, those
//!   authorities verify against [`PolicySnapshot::sigstore`], the built-in
//!   Sigstore instance's root as the controller last verified it through TUF
//!   (or its embedded copy). A default trust root stays in the snapshot
//!   while it is the default, like a referenced one.
//! - every policy was accepted against the default in force when it was
//!   reconciled: its `keyless.url` and `ctlog.url` without `trustRootRef`
//!   name instances that default lists
//!   (`sigil_compile::default_root::check_instance_urls`). That check is the
//!   controller's, not part of `sigil_compile::snapshot::validate`: when the
//!   default changes, a policy whose URLs no longer match gets
//!   `Ready=False` and keeps its place at its last accepted spec (verified
//!   against the new default, whose instances it does not name), so a
//!   change of the default can never make a snapshot unenforceable.
//!
//! What the webhook does with it: watch the Secret through the API (a watch
//! delivers within about a second), run `sigil_compile::snapshot::validate` on every
//! version, swap in a valid one whose revision is newer than the one it
//! holds, keep the last good one in memory when the Secret is invalid or
//! missing, and read it once before reporting ready. Verdicts are cached
//! under a version of everything trust-related in the snapshot (trust
//! roots, which one is the default, the built-in root), so a change of the
//! default is never answered from an old verdict.

use serde::{Deserialize, Serialize};

use crate::cip::ClusterImagePolicySpec;
use crate::workloadkind::WorkloadKindSpec;

pub mod stored;

/// `apiVersion` of a snapshot document that holds a namespace's ImagePolicy
/// or a WorkloadKind. A v2 reader refuses it, so an older webhook keeps its
/// last good snapshot instead of enforcing a namespace's policy in every
/// namespace (where it would also count as selecting images for
/// `noMatchPolicy`) or reading a WorkloadKind as absent.
pub const API_VERSION: &str = "policy.sigil.dev/snapshot/v3";
/// `apiVersion` of a snapshot document without ImagePolicies and
/// WorkloadKinds: what the controller writes while there are none, so a
/// webhook of the previous release keeps taking policy changes.
pub const API_VERSION_V2: &str = "policy.sigil.dev/snapshot/v2";
/// The first `apiVersion`, still read: a v1 document has no default trust
/// root and no built-in root, so the webhook's embedded root is the default.
/// A v1 reader refuses v2 documents, so an older webhook keeps its last good
/// snapshot instead of enforcing a default trust root it would ignore.
pub const API_VERSION_V1: &str = "policy.sigil.dev/snapshot/v1";
/// Name of the Secret holding the snapshot, in sigil's namespace.
pub const SECRET_NAME: &str = "sigil-policy-snapshot";
/// Data key of the snapshot as plain JSON, the format written before
/// [`stored`]'s (still read).
pub const SECRET_KEY: &str = "snapshot.json";
/// The size limit of a Secret: bounds one stored value.
pub const MAX_BYTES: usize = 1024 * 1024;
pub use stored::MAX_DECODED_BYTES;

/// Every policy and trust root the webhook enforces, at one revision.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PolicySnapshot {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Grows by one with every write; a reader ignores a revision lower than
    /// the one it holds.
    pub revision: u64,
    /// When the controller wrote this revision (RFC 3339).
    pub generated_at: String,
    /// The accepted ClusterImagePolicies and ImagePolicies, by
    /// [`SnapshotPolicy::key`].
    pub policies: Vec<SnapshotPolicy>,
    /// The loaded TrustRoots, by name.
    pub trust_roots: Vec<SnapshotTrustRoot>,
    /// The built-in Sigstore instance's trust root, the default when no
    /// trust root is marked default; absent in v1 documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigstore: Option<SnapshotSigstore>,
    /// The accepted WorkloadKinds, by name: kinds besides Kubernetes' own
    /// workloads whose images the webhook admits; absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_kinds: Vec<SnapshotWorkloadKind>,
}

/// One accepted WorkloadKind.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotWorkloadKind {
    /// The WorkloadKind's name.
    pub name: String,
    /// The accepted generation.
    pub generation: i64,
    /// The accepted spec.
    pub spec: WorkloadKindSpec,
}

/// The built-in Sigstore instance's `trusted_root.json` as the controller
/// holds it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSigstore {
    /// `public-good` or `staging`.
    pub instance: String,
    /// `tuf` when verified from the instance's TUF mirror, `embedded` when it
    /// is the copy built into sigil (offline mode, or the mirror was never
    /// reached).
    pub source: String,
    /// The Sigstore `trusted_root.json` document.
    pub trusted_root_json: String,
}

/// One accepted ClusterImagePolicy, or a namespace's ImagePolicy.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPolicy {
    /// The policy's name.
    pub name: String,
    /// An ImagePolicy's namespace, where alone it applies; empty for a
    /// ClusterImagePolicy.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The policy object's UID.
    pub uid: String,
    /// The accepted generation (may be older than the object's current one
    /// when a later generation was rejected).
    pub generation: i64,
    /// The object's resourceVersion when it was accepted.
    pub resource_version: String,
    /// The accepted spec with every Secret and ConfigMap reference resolved
    /// inline.
    pub spec: ClusterImagePolicySpec,
}

/// One loaded TrustRoot.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotTrustRoot {
    /// The TrustRoot's name, as `trustRootRef`s name it.
    pub name: String,
    /// The TrustRoot generation the material comes from.
    pub generation: i64,
    /// The Sigstore `trusted_root.json` document.
    pub trusted_root_json: String,
    /// This is the cluster's default trust root.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
}

/// Why a snapshot cannot be enforced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The document is larger than a reader accepts.
    #[error(
        "policy snapshot is {0} bytes of JSON, more than the {MAX_DECODED_BYTES} a reader accepts"
    )]
    TooLarge(usize),
    /// The compressed document is larger than every Secret it may use
    /// together.
    #[error(
        "policy snapshot is {decoded} bytes of JSON, {stored} compressed, more than the {} bytes its {} Secrets hold together; remove or merge policies (the previous revision stays in force)",
        stored::MAX_STORED_BYTES,
        1 + stored::SHARDS_PER_SET
    )]
    StoredTooLarge {
        /// Length of the JSON.
        decoded: usize,
        /// Length compressed.
        stored: usize,
    },
    /// The Secret holds neither a manifest nor plain JSON.
    #[error(
        "policy snapshot Secret {SECRET_NAME} has neither {} nor {SECRET_KEY}; is the controller running?",
        stored::MANIFEST_KEY
    )]
    NoData,
    /// The manifest cannot be followed.
    #[error(
        "policy snapshot manifest is invalid: {0}; the controller rewrites it on its next write"
    )]
    Manifest(String),
    /// A Secret holding a chunk could not be read (an API error, not its
    /// content): reading again may succeed.
    #[error(
        "policy snapshot chunk in Secret {secret} could not be read: {reason}; reading it again"
    )]
    Unreadable {
        /// The Secret.
        secret: String,
        /// The API error.
        reason: String,
    },
    /// A chunk is missing or does not match the manifest.
    #[error(
        "policy snapshot chunk in Secret {secret} {problem}; the last good snapshot stays until the next revision"
    )]
    Chunk {
        /// The Secret that should hold it.
        secret: String,
        /// What is wrong.
        problem: String,
    },
    /// The compressed chunks do not decode.
    #[error("policy snapshot does not decompress: {0}")]
    Gzip(String),
    /// The document is not JSON of the snapshot shape.
    #[error(
        "policy snapshot in secret {SECRET_NAME} key {SECRET_KEY} is not valid JSON: {0}; the controller rewrites it on its next reconcile"
    )]
    Json(String),
    /// The document has another `apiVersion`.
    #[error(
        "policy snapshot apiVersion is `{0}`, expected `{API_VERSION}` (or `{API_VERSION_V2}` without ImagePolicies and WorkloadKinds, `{API_VERSION_V1}` without v2 fields either); run a webhook and controller of the same release"
    )]
    ApiVersion(String),
    /// Two entries share a name.
    #[error("policy snapshot lists {kind} `{name}` twice")]
    Duplicate {
        /// `policy` or `trust root`.
        kind: &'static str,
        /// The repeated name.
        name: String,
    },
    /// A policy does not compile.
    #[error("policy snapshot: policy `{name}` does not compile: {reason}")]
    Policy {
        /// The policy's name.
        name: String,
        /// The compiler's message.
        reason: String,
    },
    /// A trust root does not parse.
    #[error("policy snapshot: TrustRoot `{name}` is not a valid trusted_root.json: {reason}")]
    TrustRoot {
        /// The trust root's name.
        name: String,
        /// The parser's message.
        reason: String,
    },
    /// More than one trust root is marked default.
    #[error(
        "policy snapshot marks TrustRoots {} as default; at most one may be, the controller never writes this",
        .0.join(", ")
    )]
    SeveralDefaults(Vec<String>),
    /// A WorkloadKind does not compile.
    #[error("policy snapshot: WorkloadKind `{name}` does not compile: {reason}")]
    WorkloadKind {
        /// The WorkloadKind's name.
        name: String,
        /// The compiler's message.
        reason: String,
    },
    /// The built-in Sigstore root does not parse.
    #[error(
        "policy snapshot: the built-in Sigstore {instance} root is not a valid trusted_root.json: {reason}"
    )]
    Sigstore {
        /// `public-good` or `staging`.
        instance: String,
        /// The parser's message.
        reason: String,
    },
}

impl SnapshotError {
    /// Whether the error came from reading, not from what was read: the
    /// same snapshot read again may load (a reader retries it rather than
    /// waiting for the next revision, and the controller never takes it for
    /// a corrupt snapshot).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreadable { .. })
    }
}

impl SnapshotPolicy {
    /// The name the policy goes by among policies of both scopes: its name,
    /// or `NAMESPACE/NAME` for an ImagePolicy.
    pub fn key(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            crate::image_policy::qualified_name(&self.namespace, &self.name)
        }
    }
}

impl PolicySnapshot {
    /// An empty snapshot at revision 0.
    pub fn empty() -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            ..Self::default()
        }
    }

    /// Parses the snapshot's JSON (without validating policies).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, SnapshotError> {
        if bytes.len() > MAX_DECODED_BYTES {
            return Err(SnapshotError::TooLarge(bytes.len()));
        }
        let snapshot: Self =
            serde_json::from_slice(bytes).map_err(|e| SnapshotError::Json(e.to_string()))?;
        snapshot.check_api_version()?;
        Ok(snapshot)
    }

    /// The JSON text stored in the Secret.
    pub fn to_json(&self) -> String {
        // Serializing plain structs of strings and integers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Refuses a document of another `apiVersion`, and an older document
    /// that carries fields of a newer one.
    pub fn check_api_version(&self) -> Result<(), SnapshotError> {
        let v2_fields = self.sigstore.is_some() || self.trust_roots.iter().any(|t| t.default);
        match self.api_version.as_str() {
            API_VERSION => Ok(()),
            // Older documents cannot carry the newer fields' meaning.
            API_VERSION_V2 if !self.needs_v3() => Ok(()),
            API_VERSION_V1 if !self.needs_v3() && !v2_fields => Ok(()),
            _ => Err(SnapshotError::ApiVersion(self.api_version.clone())),
        }
    }

    /// Whether the document holds a namespace's ImagePolicy.
    pub fn namespaced(&self) -> bool {
        self.policies.iter().any(|p| !p.namespace.is_empty())
    }

    /// Whether the document holds what only a v3 reader understands: a
    /// namespace's ImagePolicy or a WorkloadKind.
    fn needs_v3(&self) -> bool {
        self.namespaced() || !self.workload_kinds.is_empty()
    }

    /// The oldest `apiVersion` that can carry this document: v3 only when it
    /// holds an ImagePolicy or a WorkloadKind, so webhooks of the previous
    /// release read it until then.
    pub fn needed_api_version(&self) -> &'static str {
        if self.needs_v3() {
            API_VERSION
        } else {
            API_VERSION_V2
        }
    }

    /// The trust root marked default, if any.
    pub fn default_trust_root(&self) -> Option<&SnapshotTrustRoot> {
        self.trust_roots.iter().find(|t| t.default)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::*;

    /// Policy `p`: one key authority (not a PEM: nothing here compiles it)
    /// for every image.
    pub(in crate::snapshot) fn policy_p() -> SnapshotPolicy {
        SnapshotPolicy {
            name: "p".into(),
            namespace: String::new(),
            uid: "uid-p".into(),
            generation: 1,
            resource_version: "1".into(),
            spec: serde_json::from_value(serde_json::json!({
                "images": [{"glob": "**"}], "authorities": [{"key": {"data": "k"}}]}))
            .unwrap(),
        }
    }

    fn snapshot() -> PolicySnapshot {
        PolicySnapshot {
            revision: 3,
            generated_at: "2026-01-01T00:00:00Z".into(),
            policies: vec![policy_p()],
            ..PolicySnapshot::empty()
        }
    }

    fn default_root() -> SnapshotTrustRoot {
        SnapshotTrustRoot {
            name: "corp".into(),
            generation: 1,
            trusted_root_json: "{}".into(),
            default: true,
        }
    }

    #[test]
    fn a_snapshot_round_trips_through_json() {
        let s = snapshot();
        assert_eq!(
            PolicySnapshot::from_slice(s.to_json().as_bytes()).unwrap(),
            s
        );
    }

    #[test]
    fn a_v1_document_is_read_unless_it_carries_v2_fields() {
        let mut s = snapshot();
        s.api_version = API_VERSION_V1.into();
        PolicySnapshot::from_slice(s.to_json().as_bytes()).unwrap();
        s.trust_roots = vec![default_root()];
        assert!(matches!(
            PolicySnapshot::from_slice(s.to_json().as_bytes()),
            Err(SnapshotError::ApiVersion(_))
        ));
    }

    #[test]
    fn a_namespaces_policy_needs_v3_and_older_documents_cannot_carry_one() {
        let mut s = snapshot();
        assert_eq!(s.needed_api_version(), API_VERSION_V2);
        s.api_version = API_VERSION_V2.into();
        PolicySnapshot::from_slice(s.to_json().as_bytes()).unwrap();
        let mut tenant = policy_p();
        tenant.namespace = "team-a".into();
        s.policies.push(tenant);
        assert_eq!(s.needed_api_version(), API_VERSION);
        for old in [API_VERSION_V2, API_VERSION_V1] {
            s.api_version = old.into();
            assert!(matches!(
                PolicySnapshot::from_slice(s.to_json().as_bytes()),
                Err(SnapshotError::ApiVersion(_))
            ));
        }
        s.api_version = API_VERSION.into();
        PolicySnapshot::from_slice(s.to_json().as_bytes()).unwrap();
    }

    #[test]
    fn a_workload_kind_needs_v3_too() {
        let mut s = snapshot();
        s.workload_kinds.push(SnapshotWorkloadKind {
            name: "rollouts".into(),
            generation: 1,
            spec: WorkloadKindSpec::default(),
        });
        assert_eq!(s.needed_api_version(), API_VERSION);
        s.api_version = API_VERSION_V2.into();
        assert!(matches!(
            PolicySnapshot::from_slice(s.to_json().as_bytes()),
            Err(SnapshotError::ApiVersion(_))
        ));
    }

    #[test]
    fn another_api_version_or_an_oversized_document_is_refused() {
        let mut s = snapshot();
        s.api_version = "policy.sigil.dev/snapshot/v9".into();
        assert!(matches!(
            PolicySnapshot::from_slice(s.to_json().as_bytes()),
            Err(SnapshotError::ApiVersion(_))
        ));
        assert_eq!(
            PolicySnapshot::from_slice(&vec![b' '; MAX_DECODED_BYTES + 1]),
            Err(SnapshotError::TooLarge(MAX_DECODED_BYTES + 1))
        );
    }

    #[test]
    fn the_default_trust_root_is_the_one_marked_default() {
        let mut s = snapshot();
        assert!(s.default_trust_root().is_none());
        s.trust_roots = vec![default_root()];
        assert_eq!(
            s.default_trust_root().map(|t| t.name.as_str()),
            Some("corp")
        );
    }
}
