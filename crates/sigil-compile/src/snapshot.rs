//! Whether a policy snapshot can be enforced: [`validate`] compiles each of
//! its policies and parses each of its trust roots into a [`ValidSnapshot`].
//! The document itself, and the errors that refuse it, are the contract in
//! [`sigil_api::snapshot`], which depends on nothing here.

use std::collections::{BTreeMap, BTreeSet};

use sigil_api::snapshot::{PolicySnapshot, SnapshotError};
use sigil_policy::model::{AuthorityKind, CaTrust, CompiledPolicy, KeyMaterial};
use sigil_verifier::trust::TrustedRoot;

use crate::compile::{Offline, compile_policy, trust_root_refs};
use crate::workload_kind::WorkloadKinds;

/// A snapshot that passed [`validate`], ready to enforce.
#[derive(Debug, Clone)]
pub struct ValidSnapshot {
    /// The snapshot's revision.
    pub revision: u64,
    /// Every policy, compiled, by [`sigil_api::snapshot::SnapshotPolicy::key`]
    /// (`NAMESPACE/NAME` for an ImagePolicy).
    pub policies: BTreeMap<String, CompiledPolicy>,
    /// Every trust root, parsed, by name.
    pub trust_roots: BTreeMap<String, TrustedRoot>,
    /// The trust root marked default, if any (a key of `trust_roots`).
    pub default_trust_root: Option<String>,
    /// The built-in Sigstore instance's root, parsed, when the snapshot
    /// carries one.
    pub sigstore: Option<TrustedRoot>,
    /// The WorkloadKinds, compiled.
    pub workload_kinds: WorkloadKinds,
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

/// Compiles every policy of `snapshot` through [`crate::compile`] and parses
/// every trust root. A snapshot is enforced whole or not at all: any error
/// rejects it, and the reader keeps the snapshot it had.
pub fn validate(snapshot: &PolicySnapshot) -> Result<ValidSnapshot, SnapshotError> {
    snapshot.check_api_version()?;
    let mut trust_roots = BTreeMap::new();
    for root in &snapshot.trust_roots {
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
    let defaults: Vec<String> = snapshot
        .trust_roots
        .iter()
        .filter(|t| t.default)
        .map(|t| t.name.clone())
        .collect();
    if defaults.len() > 1 {
        return Err(SnapshotError::SeveralDefaults(defaults));
    }
    let sigstore = snapshot
        .sigstore
        .as_ref()
        .map(|s| {
            TrustedRoot::from_json(&s.trusted_root_json).map_err(|e| SnapshotError::Sigstore {
                instance: s.instance.clone(),
                reason: e.to_string(),
            })
        })
        .transpose()?;
    let workload_kinds = WorkloadKinds::compile(&snapshot.workload_kinds)?;
    let mut policies = BTreeMap::new();
    for p in &snapshot.policies {
        let key = p.key();
        let invalid = |reason: String| SnapshotError::Policy {
            name: key.clone(),
            reason,
        };
        let mut compiled =
            compile_policy(&key, &p.spec, &Offline).map_err(|e| invalid(e.to_string()))?;
        if !p.namespace.is_empty() {
            if let Some(problem) = crate::compile::namespaced_problems(&p.spec, &p.namespace)
                .into_iter()
                .next()
            {
                return Err(invalid(problem));
            }
            compiled.namespace = Some(p.namespace.clone());
        }
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
        if policies.insert(key.clone(), compiled).is_some() {
            return Err(SnapshotError::Duplicate {
                kind: "policy",
                name: key,
            });
        }
    }
    Ok(ValidSnapshot {
        revision: snapshot.revision,
        policies,
        trust_roots,
        default_trust_root: defaults.into_iter().next(),
        sigstore,
        workload_kinds,
    })
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
    use sigil_api::snapshot::{
        API_VERSION_V1, SnapshotPolicy, SnapshotSigstore, SnapshotTrustRoot,
    };

    const KEY: &str = include_str!("../tests/data/p256.pub");

    fn policy(name: &str, key: serde_json::Value) -> SnapshotPolicy {
        SnapshotPolicy {
            name: name.into(),
            namespace: String::new(),
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
        let valid = validate(&parsed).unwrap();
        assert_eq!(valid.revision, 3);
        assert!(valid.policies.contains_key("p"));
    }

    #[test]
    fn an_image_policy_is_held_under_its_namespace_beside_a_cluster_policy_of_its_name() {
        let cluster = policy("p", serde_json::json!({"data": KEY}));
        let mut tenant = policy("p", serde_json::json!({"data": KEY}));
        tenant.namespace = "team-a".into();
        let valid = validate(&snapshot(vec![cluster, tenant.clone()])).unwrap();
        assert_eq!(valid.policies["p"].namespace, None);
        assert_eq!(
            valid.policies["team-a/p"].namespace.as_deref(),
            Some("team-a")
        );
        assert_eq!(valid.policies["team-a/p"].name, "team-a/p");
        let err = validate(&snapshot(vec![tenant.clone(), tenant])).unwrap_err();
        assert_eq!(
            err,
            SnapshotError::Duplicate {
                kind: "policy",
                name: "team-a/p".into()
            }
        );
    }

    #[test]
    fn an_image_policy_naming_signature_pull_secrets_is_refused() {
        // The webhook reads signaturePullSecrets from sigil's namespace: a
        // tenant's policy must never make it use those credentials.
        let mut tenant = policy("p", serde_json::json!({"data": KEY}));
        tenant.namespace = "team-a".into();
        tenant.spec.authorities[0].sources = vec![
            serde_json::from_value(serde_json::json!({
                "oci": "registry.test/sigs", "signaturePullSecrets": [{"name": "sigil-creds"}]}))
            .unwrap(),
        ];
        let err = validate(&snapshot(vec![tenant])).unwrap_err().to_string();
        assert!(
            err.starts_with("policy snapshot: policy `team-a/p` does not compile: spec.authorities[0].source[0].signaturePullSecrets: an ImagePolicy cannot name pull secrets"),
            "{err}"
        );
    }

    #[test]
    fn a_policy_with_an_unresolved_secret_is_refused() {
        let s = snapshot(vec![policy(
            "p",
            serde_json::json!({"secretRef": {"name": "k"}}),
        )]);
        let err = validate(&s).unwrap_err();
        assert!(err.to_string().contains("not resolved inline"), "{err}");
    }

    #[test]
    fn a_policy_that_does_not_compile_or_names_a_missing_trust_root_is_refused() {
        let s = snapshot(vec![policy("p", serde_json::json!({"data": "junk"}))]);
        assert!(matches!(validate(&s), Err(SnapshotError::Policy { .. })));
        let mut p = policy("k", serde_json::json!({"data": KEY}));
        p.spec.authorities[0].ctlog = Some(sigil_api::cip::TLog {
            url: None,
            trust_root_ref: Some("private".into()),
        });
        let err = validate(&snapshot(vec![p])).unwrap_err();
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
        let valid = validate(&s).unwrap();
        assert_eq!(valid.default_trust_root.as_deref(), Some("corp"));
        let staging_root = TrustedRoot::from_json(staging).unwrap();
        assert_eq!(count(&valid.default_root(&fallback)), count(&staging_root));

        s.trust_roots = vec![root("other", public_good, false)];
        s.sigstore = Some(SnapshotSigstore {
            instance: "staging".into(),
            source: "embedded".into(),
            trusted_root_json: staging.into(),
        });
        let valid = validate(&s).unwrap();
        assert_eq!(valid.default_trust_root, None);
        assert_eq!(count(&valid.default_root(&fallback)), count(&staging_root));

        s.sigstore = None;
        assert_eq!(
            count(&validate(&s).unwrap().default_root(&fallback)),
            count(&fallback)
        );
    }

    #[test]
    fn two_defaults_or_an_unparsable_builtin_root_are_refused() {
        let json = sigil_verifier::trust::PUBLIC_GOOD_JSON;
        let mut s = snapshot(vec![]);
        s.trust_roots = vec![root("a", json, true), root("b", json, true)];
        assert_eq!(
            validate(&s).unwrap_err(),
            SnapshotError::SeveralDefaults(vec!["a".into(), "b".into()])
        );
        s.trust_roots.clear();
        s.sigstore = Some(SnapshotSigstore {
            instance: "public-good".into(),
            source: "tuf".into(),
            trusted_root_json: "{}".into(),
        });
        assert!(matches!(validate(&s), Err(SnapshotError::Sigstore { .. })));
    }

    #[test]
    fn a_v1_document_is_read_unless_it_carries_v2_fields() {
        let mut s = snapshot(vec![policy("p", serde_json::json!({"data": KEY}))]);
        s.api_version = API_VERSION_V1.into();
        let parsed = PolicySnapshot::from_slice(s.to_json().as_bytes()).unwrap();
        assert_eq!(validate(&parsed).unwrap().default_trust_root, None);
        s.trust_roots = vec![root("corp", sigil_verifier::trust::PUBLIC_GOOD_JSON, true)];
        assert!(matches!(
            PolicySnapshot::from_slice(s.to_json().as_bytes()),
            Err(SnapshotError::ApiVersion(_))
        ));
    }

    #[test]
    fn a_policy_naming_a_private_instance_by_url_is_enforceable_the_url_is_the_controllers_check() {
        let mut p = policy("k", serde_json::json!({"data": KEY}));
        p.spec.authorities[0].ctlog = Some(sigil_api::cip::TLog {
            url: Some("http://rekor.rekor-system.svc".into()),
            trust_root_ref: None,
        });
        validate(&snapshot(vec![p])).unwrap();
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
            validate(&snapshot(vec![p.clone(), p])),
            Err(SnapshotError::Duplicate { .. })
        ));
    }
}
