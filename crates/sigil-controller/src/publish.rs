//! The snapshot writer: the one place that writes the policy snapshot Secret
//! (contract: [`sigil_api::snapshot`]).
//!
//! It holds what the reconcilers accepted — the last accepted spec of each
//! policy and the material of each trust root — and writes a new revision
//! whenever that changes. A policy whose new generation is rejected is simply
//! not accepted again, so its last good spec stays. After a restart,
//! [`Publisher::recover`] reads the existing Secret first, so the last good
//! specs and the revision counter survive. A trust root that was deleted
//! stays in the snapshot while an accepted policy still refers to it, so a
//! snapshot is always enforceable whole.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::Resource as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use sigil_api::compile::{Offline, compile_policy, trust_root_refs};
use sigil_api::snapshot::{
    API_VERSION, PolicySnapshot, SECRET_KEY, SECRET_NAME, SnapshotPolicy, SnapshotTrustRoot,
};
use tokio::sync::Mutex;

use crate::context::MANAGER;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// A trust root as the publisher holds it.
#[derive(Debug, Clone, PartialEq)]
struct HeldTrustRoot {
    root: SnapshotTrustRoot,
    /// False once the TrustRoot object is gone; kept while referenced.
    live: bool,
}

#[derive(Default)]
struct State {
    policies: BTreeMap<String, SnapshotPolicy>,
    trust_roots: BTreeMap<String, HeldTrustRoot>,
    /// The last snapshot written (or recovered).
    written: Option<PolicySnapshot>,
}

/// Writes the policy snapshot Secret.
pub struct Publisher {
    api: Api<Secret>,
    namespace: String,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
}

impl Publisher {
    /// A publisher writing into `namespace`.
    pub fn new(client: Client, namespace: &str, metrics: Arc<Metrics>) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            metrics,
            state: Mutex::default(),
        }
    }

    /// Loads the last snapshot from the Secret, so its policies and trust
    /// roots stay published until reconciled and its revision continues.
    /// A missing Secret is a first start; an unreadable one is logged and
    /// replaced (its revision is lost, so the next one starts above the
    /// current time in seconds, which is above any earlier counter).
    pub async fn recover(&self) -> Result<Option<u64>> {
        let secret = self.api.get_opt(SECRET_NAME).await.map_err(|e| {
            Error::kube(
                format!("reading Secret {}/{SECRET_NAME}", self.namespace),
                e,
            )
        })?;
        let mut state = self.state.lock().await;
        let Some(secret) = secret else {
            return Ok(None);
        };
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(SECRET_KEY))
            .map(|b| b.0.clone())
            .unwrap_or_default();
        match PolicySnapshot::from_slice(&bytes) {
            Ok(snapshot) => {
                for p in &snapshot.policies {
                    state.policies.insert(p.name.clone(), p.clone());
                }
                for t in &snapshot.trust_roots {
                    state.trust_roots.insert(
                        t.name.clone(),
                        HeldTrustRoot {
                            root: t.clone(),
                            live: true,
                        },
                    );
                }
                let revision = snapshot.revision;
                self.metrics.snapshot_written(revision);
                state.written = Some(snapshot);
                Ok(Some(revision))
            }
            Err(e) => {
                tracing::warn!(error = %e, "existing policy snapshot is unreadable; it will be replaced");
                let floor = u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp())
                    .unwrap_or_default();
                state.written = Some(PolicySnapshot {
                    revision: floor,
                    ..PolicySnapshot::empty()
                });
                Ok(None)
            }
        }
    }

    /// The accepted version of a policy, if any.
    pub async fn policy(&self, name: &str) -> Option<SnapshotPolicy> {
        self.state.lock().await.policies.get(name).cloned()
    }

    /// The published material of a trust root, if any.
    pub async fn trust_root(&self, name: &str) -> Option<SnapshotTrustRoot> {
        self.state
            .lock()
            .await
            .trust_roots
            .get(name)
            .filter(|t| t.live)
            .map(|t| t.root.clone())
    }

    /// The revision last written.
    pub async fn revision(&self) -> u64 {
        self.state
            .lock()
            .await
            .written
            .as_ref()
            .map_or(0, |s| s.revision)
    }

    /// Publishes a policy version that compiled; returns the revision that
    /// holds it.
    pub async fn accept_policy(&self, policy: SnapshotPolicy) -> Result<u64> {
        let mut state = self.state.lock().await;
        let name = policy.name.clone();
        // A status write bumps resourceVersion; that alone is no new version.
        if let Some(held) = state.policies.get(&name)
            && held.uid == policy.uid
            && held.generation == policy.generation
            && held.spec == policy.spec
        {
            return self.flush(&mut state).await;
        }
        let previous = state.policies.insert(name.clone(), policy);
        let result = self.flush(&mut state).await;
        if let Err(Error::Snapshot(_)) = &result {
            // A policy the webhook would refuse must not block the others.
            match previous {
                Some(p) => state.policies.insert(name, p),
                None => state.policies.remove(&name),
            };
        }
        result
    }

    /// Stops publishing a deleted policy.
    pub async fn remove_policy(&self, name: &str) -> Result<u64> {
        let mut state = self.state.lock().await;
        state.policies.remove(name);
        self.flush(&mut state).await
    }

    /// Keeps only the policies named in `live` (after a restart, policies
    /// deleted while the controller was down).
    pub async fn retain_policies(&self, live: &BTreeSet<String>) -> Result<u64> {
        let mut state = self.state.lock().await;
        state.policies.retain(|name, _| live.contains(name));
        self.flush(&mut state).await
    }

    /// Publishes trust material that loaded and verified.
    pub async fn accept_trust_root(&self, root: SnapshotTrustRoot) -> Result<u64> {
        let mut state = self.state.lock().await;
        state
            .trust_roots
            .insert(root.name.clone(), HeldTrustRoot { root, live: true });
        self.flush(&mut state).await
    }

    /// Stops publishing a deleted trust root (once no policy refers to it).
    pub async fn remove_trust_root(&self, name: &str) -> Result<u64> {
        let mut state = self.state.lock().await;
        if let Some(t) = state.trust_roots.get_mut(name) {
            t.live = false;
        }
        self.flush(&mut state).await
    }

    /// Keeps only the trust roots named in `live`.
    pub async fn retain_trust_roots(&self, live: &BTreeSet<String>) -> Result<u64> {
        let mut state = self.state.lock().await;
        for (name, t) in state.trust_roots.iter_mut() {
            t.live = live.contains(name);
        }
        self.flush(&mut state).await
    }

    /// Writes a new revision when the content changed.
    async fn flush(&self, state: &mut State) -> Result<u64> {
        // Trust roots that accepted policies still need stay, deleted or not.
        let mut needed = BTreeSet::new();
        for p in state.policies.values() {
            if let Ok(compiled) = compile_policy(&p.name, &p.spec, &Offline) {
                needed.extend(trust_root_refs(&compiled).into_keys());
            }
        }
        state
            .trust_roots
            .retain(|name, t| t.live || needed.contains(name));
        let written = state.written.clone().unwrap_or_else(PolicySnapshot::empty);
        let candidate = PolicySnapshot {
            api_version: API_VERSION.to_owned(),
            revision: written.revision.saturating_add(1),
            generated_at: now_rfc3339(),
            policies: state.policies.values().cloned().collect(),
            trust_roots: state.trust_roots.values().map(|t| t.root.clone()).collect(),
        };
        if state.written.is_some()
            && candidate.policies == written.policies
            && candidate.trust_roots == written.trust_roots
        {
            return Ok(written.revision);
        }
        // Never publish what the webhook would refuse.
        candidate
            .validate()
            .map_err(|e| Error::Snapshot(e.to_string()))?;
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(SECRET_NAME.to_owned()),
                namespace: Some(self.namespace.clone()),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_owned(),
                        MANAGER.to_owned(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(
                [(
                    SECRET_KEY.to_owned(),
                    ByteString(candidate.to_json().into_bytes()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let mut body = serde_json::to_value(&secret).map_err(|e| Error::Snapshot(e.to_string()))?;
        if let Some(obj) = body.as_object_mut() {
            obj.insert("apiVersion".into(), Secret::API_VERSION.into());
            obj.insert("kind".into(), Secret::KIND.into());
        }
        self.api
            .patch(
                SECRET_NAME,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(|e| {
                Error::kube(
                    format!(
                        "writing policy snapshot revision {} to Secret {}/{SECRET_NAME}",
                        candidate.revision, self.namespace
                    ),
                    e,
                )
            })?;
        tracing::info!(
            revision = candidate.revision,
            policies = candidate.policies.len(),
            trust_roots = candidate.trust_roots.len(),
            "policy snapshot written"
        );
        self.metrics.snapshot_written(candidate.revision);
        let revision = candidate.revision;
        state.written = Some(candidate);
        Ok(revision)
    }
}

/// The current time in RFC 3339.
pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}
