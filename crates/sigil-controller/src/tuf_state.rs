//! TUF client state that survives restarts: for each TUF repository the
//! controller follows (the built-in Sigstore instance's, and each `remote`
//! or `repository` TrustRoot's), the newest verified `root.json` and the
//! versions of the last verified timestamp, snapshot and targets, kept in
//! one Secret in sigil's namespace ([`DEFAULT_SECRET`]).
//!
//! Starting each update from this state is what makes rollback protection
//! hold across restarts and leader changes: a mirror that serves an older
//! root, timestamp or snapshot than one sigil already verified is refused
//! (TUF specification 5.3–5.5), not silently accepted by a fresh process
//! that starts over from the embedded root of trust.
//!
//! A Secret rather than a ConfigMap although nothing in it is secret: who
//! can write it can choose the root sigil trusts, so it gets the protection
//! of the policy snapshot Secret, which already decides everything the
//! webhook enforces. Only the leader writes it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::Resource as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::error::{Error, Result};
use crate::names::MANAGER;
use crate::tuf::TufState;

/// Name of the Secret holding the TUF state, in sigil's namespace.
pub const DEFAULT_SECRET: &str = "sigil-tuf-state";
/// Annotation of that Secret saying where the built-in Sigstore root in
/// force comes from (`kubectl describe secret sigil-tuf-state`).
pub const STATUS_ANNOTATION: &str = "policy.sigil.dev/sigstore-root";

/// One repository's state as stored: the TUF state plus the initial root
/// it was reached from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct Stored {
    /// SHA-256 (hex) of the initial `root.json` the chain of roots started
    /// from; the state counts only for that initial root.
    initial_root_sha256: String,
    /// The newest verified `root.json`.
    root: String,
    root_version: u64,
    timestamp_version: u64,
    snapshot_version: u64,
    targets_version: u64,
    timestamp_expires: String,
}

impl Stored {
    fn new(initial_root: &[u8], state: &TufState) -> Option<Self> {
        Some(Self {
            initial_root_sha256: hex::encode(sigil_verifier::crypto::sha256(initial_root)),
            root: String::from_utf8(state.root.clone()).ok()?,
            root_version: state.root_version,
            timestamp_version: state.timestamp_version,
            snapshot_version: state.snapshot_version,
            targets_version: state.targets_version,
            timestamp_expires: state.timestamp_expires.clone(),
        })
    }

    fn state(&self) -> TufState {
        TufState {
            root: self.root.clone().into_bytes(),
            root_version: self.root_version,
            timestamp_version: self.timestamp_version,
            snapshot_version: self.snapshot_version,
            targets_version: self.targets_version,
            timestamp_expires: self.timestamp_expires.clone(),
        }
    }
}

#[derive(Default)]
struct Held {
    states: BTreeMap<String, Stored>,
    status: Option<String>,
}

/// The TUF state of every repository, in memory and in the Secret.
pub struct TufStore {
    api: Api<Secret>,
    namespace: String,
    name: String,
    held: Mutex<Held>,
}

/// The Secret data key of a repository's state.
fn data_key(repository: &str) -> String {
    format!("{repository}.json")
}

impl TufStore {
    /// A store writing Secret `name` in `namespace`.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            held: Mutex::default(),
        }
    }

    /// Loads the persisted state; returns how many repositories it holds.
    /// A missing Secret is a first start; an entry that does not parse is
    /// logged and skipped (that repository starts over from its initial
    /// root: whoever could corrupt the entry could as well have written an
    /// older valid one, so refusing to work would protect nothing).
    pub async fn recover(&self) -> Result<usize> {
        let secret = self.api.get_opt(&self.name).await.map_err(|e| {
            Error::kube(
                format!("reading TUF state Secret {}/{}", self.namespace, self.name),
                e,
            )
        })?;
        let mut held = self.held.lock().await;
        let Some(secret) = secret else {
            return Ok(0);
        };
        held.status = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STATUS_ANNOTATION))
            .cloned();
        for (key, value) in secret.data.unwrap_or_default() {
            let Some(repository) = key.strip_suffix(".json") else {
                continue;
            };
            match serde_json::from_slice::<Stored>(&value.0) {
                Ok(stored) => {
                    held.states.insert(repository.to_owned(), stored);
                }
                Err(e) => tracing::warn!(
                    secret = %self.name, key, error = %e,
                    "TUF state entry unreadable; that repository starts over from its initial root"
                ),
            }
        }
        Ok(held.states.len())
    }

    /// The state to start `repository`'s next update from: the last
    /// verified one, when it was reached from `initial_root`.
    pub async fn previous(&self, repository: &str, initial_root: &[u8]) -> Option<TufState> {
        let wanted = hex::encode(sigil_verifier::crypto::sha256(initial_root));
        self.held
            .lock()
            .await
            .states
            .get(repository)
            .filter(|s| s.initial_root_sha256 == wanted)
            .map(Stored::state)
    }

    /// Records a verified update and persists it when it changed anything.
    pub async fn record(
        &self,
        repository: &str,
        initial_root: &[u8],
        state: &TufState,
    ) -> Result<()> {
        let Some(stored) = Stored::new(initial_root, state) else {
            return Err(Error::Tuf(crate::tuf::TufError::Malformed {
                file: format!("{repository}: root.json"),
                reason: "not UTF-8".into(),
            }));
        };
        let mut held = self.held.lock().await;
        if held.states.get(repository) == Some(&stored) {
            return Ok(());
        }
        let previous = held.states.insert(repository.to_owned(), stored);
        if let Err(e) = self.write(&held).await {
            // Memory must not run ahead of what a restart would find.
            match previous {
                Some(p) => held.states.insert(repository.to_owned(), p),
                None => held.states.remove(repository),
            };
            return Err(e);
        }
        Ok(())
    }

    /// Forgets the state of a repository no longer followed (a deleted
    /// TrustRoot), so that a TrustRoot created again under the same name
    /// starts from the root of trust its spec gives.
    pub async fn forget(&self, repository: &str) -> Result<()> {
        let mut held = self.held.lock().await;
        if held.states.remove(repository).is_some() {
            self.write(&held).await?;
        }
        Ok(())
    }

    /// Keeps only the repositories `keep` accepts (after a restart, those
    /// of TrustRoots deleted while the controller was down).
    pub async fn retain(&self, keep: impl Fn(&str) -> bool) -> Result<()> {
        let mut held = self.held.lock().await;
        let before = held.states.len();
        held.states.retain(|repository, _| keep(repository));
        if held.states.len() != before {
            self.write(&held).await?;
        }
        Ok(())
    }

    /// Sets the one-line status of the built-in Sigstore root (written as an
    /// annotation of the Secret when it changed).
    pub async fn set_status(&self, status: &str) -> Result<()> {
        let mut held = self.held.lock().await;
        if held.status.as_deref() == Some(status) {
            return Ok(());
        }
        let previous = held.status.replace(status.to_owned());
        if let Err(e) = self.write(&held).await {
            held.status = previous;
            return Err(e);
        }
        Ok(())
    }

    /// The persisted state of `repository`'s timestamp expiry, for metrics.
    pub async fn timestamp_expires(&self, repository: &str) -> Option<String> {
        self.held
            .lock()
            .await
            .states
            .get(repository)
            .map(|s| s.timestamp_expires.clone())
    }

    async fn write(&self, held: &Held) -> Result<()> {
        let data: BTreeMap<String, ByteString> = held
            .states
            .iter()
            .map(|(repository, stored)| {
                let json = serde_json::to_vec_pretty(stored).unwrap_or_default();
                (data_key(repository), ByteString(json))
            })
            .collect();
        let mut annotations = BTreeMap::new();
        if let Some(status) = &held.status {
            annotations.insert(STATUS_ANNOTATION.to_owned(), status.clone());
        }
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_owned(),
                        MANAGER.to_owned(),
                    )]
                    .into(),
                ),
                annotations: Some(annotations),
                ..Default::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(data),
            ..Default::default()
        };
        let mut body = serde_json::to_value(&secret).map_err(|e| Error::Snapshot(e.to_string()))?;
        if let Some(obj) = body.as_object_mut() {
            obj.insert("apiVersion".into(), Secret::API_VERSION.into());
            obj.insert("kind".into(), Secret::KIND.into());
        }
        self.api
            .patch(
                &self.name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(|e| {
                Error::kube(
                    format!("writing TUF state Secret {}/{}", self.namespace, self.name),
                    e,
                )
            })?;
        Ok(())
    }
}
