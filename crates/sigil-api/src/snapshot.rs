//! The policy snapshot: the contract between the controller, which writes it,
//! and the webhook, which enforces it.
//!
//! The controller (the leader only) keeps one Secret, [`SECRET_NAME`] in
//! sigil's namespace, whose [`SECRET_KEY`] entry holds a [`PolicySnapshot`] as
//! JSON. The snapshot is self-contained: every `key.secretRef`, `ca-cert`
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
//!   ([`crate::default_root::check_instance_urls`]). That check is the
//!   controller's, not part of [`PolicySnapshot::validate`]: when the
//!   default changes, a policy whose URLs no longer match gets
//!   `Ready=False` and keeps its place at its last accepted spec (verified
//!   against the new default, whose instances it does not name), so a
//!   change of the default can never make a snapshot unenforceable.
//!
//! What the webhook does with it: watch the Secret through the API (a watch
//! delivers within about a second), run [`PolicySnapshot::validate`] on every
//! version, swap in a valid one whose revision is newer than the one it
//! holds, keep the last good one in memory when the Secret is invalid or
//! missing, and read it once before reporting ready. Verdicts are cached
//! under a version of everything trust-related in the snapshot (trust
//! roots, which one is the default, the built-in root), so a change of the
//! default is never answered from an old verdict.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sigil_policy::model::{AuthorityKind, CaTrust, CompiledPolicy, KeyMaterial};
use sigil_verifier::trust::TrustedRoot;

use crate::cip::ClusterImagePolicySpec;
use crate::compile::{Offline, compile_policy, trust_root_refs};

/// `apiVersion` of the snapshot document the controller writes.
pub const API_VERSION: &str = "policy.sigil.dev/snapshot/v2";
/// The previous `apiVersion`, still read: a v1 document has no default trust
/// root and no built-in root, so the webhook's embedded root is the default.
/// A v1 reader refuses v2 documents, so an older webhook keeps its last good
/// snapshot instead of enforcing a default trust root it would ignore.
pub const API_VERSION_V1: &str = "policy.sigil.dev/snapshot/v1";
/// Name of the Secret holding the snapshot, in sigil's namespace.
pub const SECRET_NAME: &str = "sigil-policy-snapshot";
/// Data key of the snapshot inside the Secret.
pub const SECRET_KEY: &str = "snapshot.json";
/// Largest snapshot accepted: the size limit of a Secret.
pub const MAX_BYTES: usize = 1024 * 1024;

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
    /// The accepted ClusterImagePolicies, by name.
    pub policies: Vec<SnapshotPolicy>,
    /// The loaded TrustRoots, by name.
    pub trust_roots: Vec<SnapshotTrustRoot>,
    /// The built-in Sigstore instance's trust root, the default when no
    /// trust root is marked default; absent in v1 documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigstore: Option<SnapshotSigstore>,
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

/// One accepted ClusterImagePolicy.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPolicy {
    /// The policy's name.
    pub name: String,
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

/// A snapshot that passed [`PolicySnapshot::validate`], ready to enforce.
#[derive(Debug, Clone)]
pub struct ValidSnapshot {
    /// The snapshot's revision.
    pub revision: u64,
    /// Every policy, compiled, by name.
    pub policies: BTreeMap<String, CompiledPolicy>,
    /// Every trust root, parsed, by name.
    pub trust_roots: BTreeMap<String, TrustedRoot>,
    /// The trust root marked default, if any (a key of `trust_roots`).
    pub default_trust_root: Option<String>,
    /// The built-in Sigstore instance's root, parsed, when the snapshot
    /// carries one.
    pub sigstore: Option<TrustedRoot>,
}

impl ValidSnapshot {
    /// The root authorities without a `trustRootRef` verify against: the
    /// default trust root, else the built-in instance's root, else
    /// `fallback` (the reader's embedded root, for v1 documents).
    pub fn default_root(&self, fallback: &TrustedRoot) -> TrustedRoot {
        self.default_trust_root
            .as_ref()
            .and_then(|name| self.trust_roots.get(name))
            .or(self.sigstore.as_ref())
            .unwrap_or(fallback)
            .clone()
    }
}

/// Why a snapshot cannot be enforced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The document is larger than a Secret can be.
    #[error("policy snapshot is {0} bytes, more than the {MAX_BYTES} a Secret holds")]
    TooLarge(usize),
    /// The document is not JSON of the snapshot shape.
    #[error(
        "policy snapshot in secret {SECRET_NAME} key {SECRET_KEY} is not valid JSON: {0}; the controller rewrites it on its next reconcile"
    )]
    Json(String),
    /// The document has another `apiVersion`.
    #[error(
        "policy snapshot apiVersion is `{0}`, expected `{API_VERSION}` (or `{API_VERSION_V1}` without v2 fields); run a webhook and controller of the same release"
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
    #[error("policy snapshot: ClusterImagePolicy `{name}` does not compile: {reason}")]
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

impl PolicySnapshot {
    /// An empty snapshot at revision 0.
    pub fn empty() -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            ..Self::default()
        }
    }

    /// Parses the Secret's `snapshot.json` bytes (without validating policies).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, SnapshotError> {
        if bytes.len() > MAX_BYTES {
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

    /// Compiles every policy through sigil-api's compiler and parses every
    /// trust root. A snapshot is enforced whole or not at all: any error
    /// rejects it, and the reader keeps the snapshot it had.
    pub fn validate(&self) -> Result<ValidSnapshot, SnapshotError> {
        self.check_api_version()?;
        let mut trust_roots = BTreeMap::new();
        for root in &self.trust_roots {
            let parsed = TrustedRoot::from_json(&root.trusted_root_json).map_err(|e| {
                SnapshotError::TrustRoot {
                    name: root.name.clone(),
                    reason: e.to_string(),
                }
            })?;
            if trust_roots.insert(root.name.clone(), parsed).is_some() {
                return Err(SnapshotError::Duplicate {
                    kind: "trust root",
                    name: root.name.clone(),
                });
            }
        }
        let defaults: Vec<String> = self
            .trust_roots
            .iter()
            .filter(|t| t.default)
            .map(|t| t.name.clone())
            .collect();
        if defaults.len() > 1 {
            return Err(SnapshotError::SeveralDefaults(defaults));
        }
        let sigstore = self
            .sigstore
            .as_ref()
            .map(|s| {
                TrustedRoot::from_json(&s.trusted_root_json).map_err(|e| SnapshotError::Sigstore {
                    instance: s.instance.clone(),
                    reason: e.to_string(),
                })
            })
            .transpose()?;
        let mut policies = BTreeMap::new();
        for p in &self.policies {
            let invalid = |reason: String| SnapshotError::Policy {
                name: p.name.clone(),
                reason,
            };
            let compiled =
                compile_policy(&p.name, &p.spec, &Offline).map_err(|e| invalid(e.to_string()))?;
            if let Some(secret) = unresolved_secret(&compiled) {
                return Err(invalid(format!(
                    "{secret} is not resolved inline; the controller resolves Secrets before publishing"
                )));
            }
            let missing: BTreeSet<String> = trust_root_refs(&compiled)
                .into_keys()
                .filter(|name| !trust_roots.contains_key(name))
                .collect();
            if !missing.is_empty() {
                return Err(invalid(format!(
                    "refers to TrustRoot(s) {} that the snapshot does not hold",
                    missing.into_iter().collect::<Vec<_>>().join(", ")
                )));
            }
            if policies.insert(p.name.clone(), compiled).is_some() {
                return Err(SnapshotError::Duplicate {
                    kind: "policy",
                    name: p.name.clone(),
                });
            }
        }
        Ok(ValidSnapshot {
            revision: self.revision,
            policies,
            trust_roots,
            default_trust_root: defaults.into_iter().next(),
            sigstore,
        })
    }

    fn check_api_version(&self) -> Result<(), SnapshotError> {
        match self.api_version.as_str() {
            API_VERSION => Ok(()),
            // A v1 document cannot carry the v2 fields' meaning.
            API_VERSION_V1
                if self.sigstore.is_none() && !self.trust_roots.iter().any(|t| t.default) =>
            {
                Ok(())
            }
            _ => Err(SnapshotError::ApiVersion(self.api_version.clone())),
        }
    }

    /// The trust root marked default, if any.
    pub fn default_trust_root(&self) -> Option<&SnapshotTrustRoot> {
        self.trust_roots.iter().find(|t| t.default)
    }
}

/// The first Secret reference a compiled policy still holds, if any.
fn unresolved_secret(policy: &CompiledPolicy) -> Option<String> {
    policy.authorities.iter().find_map(|a| match &a.kind {
        AuthorityKind::Key(k) => match &k.key {
            KeyMaterial::Secret(s) => Some(s.to_string()),
            KeyMaterial::Resolved(_) => None,
        },
        AuthorityKind::Keyless(k) => match &k.trust {
            CaTrust::CaCertSecret(s) => Some(s.to_string()),
            _ => None,
        },
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::*;

    const KEY: &str = include_str!("../tests/data/p256.pub");

    fn policy(name: &str, key: serde_json::Value) -> SnapshotPolicy {
        SnapshotPolicy {
            name: name.into(),
            uid: format!("uid-{name}"),
            generation: 1,
            resource_version: "1".into(),
            spec: serde_json::from_value(serde_json::json!({
                "images": [{"glob": "**"}], "authorities": [{"key": key}]}))
            .unwrap(),
        }
    }

    fn snapshot(policies: Vec<SnapshotPolicy>) -> PolicySnapshot {
        PolicySnapshot {
            revision: 3,
            generated_at: "2026-01-01T00:00:00Z".into(),
            policies,
            ..PolicySnapshot::empty()
        }
    }

    #[test]
    fn a_snapshot_round_trips_through_json_and_validates() {
        let s = snapshot(vec![policy("p", serde_json::json!({"data": KEY}))]);
        let parsed = PolicySnapshot::from_slice(s.to_json().as_bytes()).unwrap();
        assert_eq!(parsed, s);
        let valid = parsed.validate().unwrap();
        assert_eq!(valid.revision, 3);
        assert!(valid.policies.contains_key("p"));
    }

    #[test]
    fn a_policy_with_an_unresolved_secret_is_refused() {
        let s = snapshot(vec![policy(
            "p",
            serde_json::json!({"secretRef": {"name": "k"}}),
        )]);
        let err = s.validate().unwrap_err();
        assert!(err.to_string().contains("not resolved inline"), "{err}");
    }

    #[test]
    fn a_policy_that_does_not_compile_or_names_a_missing_trust_root_is_refused() {
        let s = snapshot(vec![policy("p", serde_json::json!({"data": "junk"}))]);
        assert!(matches!(s.validate(), Err(SnapshotError::Policy { .. })));
        let mut p = policy("k", serde_json::json!({"data": KEY}));
        p.spec.authorities[0].ctlog = Some(crate::cip::TLog {
            url: None,
            trust_root_ref: Some("private".into()),
        });
        let err = snapshot(vec![p]).validate().unwrap_err();
        assert!(err.to_string().contains("private"), "{err}");
    }

    fn root(name: &str, json: &str, default: bool) -> SnapshotTrustRoot {
        SnapshotTrustRoot {
            name: name.into(),
            generation: 1,
            trusted_root_json: json.into(),
            default,
        }
    }

    #[test]
    fn authorities_without_a_trust_root_ref_use_the_marked_default_else_the_builtin_root() {
        let staging = sigil_verifier::trust::STAGING_JSON;
        let public_good = sigil_verifier::trust::PUBLIC_GOOD_JSON;
        let fallback = TrustedRoot::from_json(public_good).unwrap();
        let count = |r: &TrustedRoot| r.certificate_authorities.len() + r.tlogs.len();

        let mut s = snapshot(vec![]);
        s.trust_roots = vec![
            root("corp", staging, true),
            root("other", public_good, false),
        ];
        let valid = s.validate().unwrap();
        assert_eq!(valid.default_trust_root.as_deref(), Some("corp"));
        let staging_root = TrustedRoot::from_json(staging).unwrap();
        assert_eq!(count(&valid.default_root(&fallback)), count(&staging_root));

        s.trust_roots = vec![root("other", public_good, false)];
        s.sigstore = Some(SnapshotSigstore {
            instance: "staging".into(),
            source: "embedded".into(),
            trusted_root_json: staging.into(),
        });
        let valid = s.validate().unwrap();
        assert_eq!(valid.default_trust_root, None);
        assert_eq!(count(&valid.default_root(&fallback)), count(&staging_root));

        s.sigstore = None;
        assert_eq!(
            count(&s.validate().unwrap().default_root(&fallback)),
            count(&fallback)
        );
    }

    #[test]
    fn two_defaults_or_an_unparsable_builtin_root_are_refused() {
        let json = sigil_verifier::trust::PUBLIC_GOOD_JSON;
        let mut s = snapshot(vec![]);
        s.trust_roots = vec![root("a", json, true), root("b", json, true)];
        assert_eq!(
            s.validate().unwrap_err(),
            SnapshotError::SeveralDefaults(vec!["a".into(), "b".into()])
        );
        s.trust_roots.clear();
        s.sigstore = Some(SnapshotSigstore {
            instance: "public-good".into(),
            source: "tuf".into(),
            trusted_root_json: "{}".into(),
        });
        assert!(matches!(s.validate(), Err(SnapshotError::Sigstore { .. })));
    }

    #[test]
    fn a_v1_document_is_read_unless_it_carries_v2_fields() {
        let mut s = snapshot(vec![policy("p", serde_json::json!({"data": KEY}))]);
        s.api_version = API_VERSION_V1.into();
        let parsed = PolicySnapshot::from_slice(s.to_json().as_bytes()).unwrap();
        assert_eq!(parsed.validate().unwrap().default_trust_root, None);
        s.trust_roots = vec![root("corp", sigil_verifier::trust::PUBLIC_GOOD_JSON, true)];
        assert!(matches!(
            PolicySnapshot::from_slice(s.to_json().as_bytes()),
            Err(SnapshotError::ApiVersion(_))
        ));
    }

    #[test]
    fn a_policy_naming_a_private_instance_by_url_is_enforceable_the_url_is_the_controllers_check() {
        let mut p = policy("k", serde_json::json!({"data": KEY}));
        p.spec.authorities[0].ctlog = Some(crate::cip::TLog {
            url: Some("http://rekor.rekor-system.svc".into()),
            trust_root_ref: None,
        });
        snapshot(vec![p]).validate().unwrap();
    }

    #[test]
    fn another_api_version_or_a_duplicate_name_is_refused() {
        let mut s = snapshot(vec![]);
        s.api_version = "policy.sigil.dev/snapshot/v9".into();
        assert!(matches!(
            PolicySnapshot::from_slice(s.to_json().as_bytes()),
            Err(SnapshotError::ApiVersion(_))
        ));
        let p = policy("p", serde_json::json!({"data": KEY}));
        assert!(matches!(
            snapshot(vec![p.clone(), p]).validate(),
            Err(SnapshotError::Duplicate { .. })
        ));
    }
}
