//! The snapshot writer: the one place that writes the policy snapshot Secret
//! (contract: [`sigil_api::snapshot`]).
//!
//! It holds what the reconcilers accepted — the last accepted spec of each
//! policy and the material of each trust root — and writes a new revision
//! whenever that changes, in the stored form of
//! [`sigil_api::snapshot::stored`]: the shard Secrets first, the main
//! Secret's manifest last, then it deletes shard Secrets the new manifest
//! does not name. A snapshot too large for every Secret together is refused
//! ([`Error::SnapshotTooLarge`]) and nothing is written, so the revision in
//! force stays whole. A policy whose new generation is rejected is simply
//! not accepted again, so its last good spec stays. After a restart,
//! [`Publisher::recover`] reads the existing Secret first, so the last good
//! specs and the revision counter survive. A trust root that was deleted
//! stays in the snapshot while an accepted policy still refers to it, so a
//! snapshot is always enforceable whole.
//!
//! It also decides the cluster's default trust root: the one live trust
//! root accepted as marked default (a second marked one is refused as a
//! conflict, so the default never flips on the order of reconciles), else
//! the built-in Sigstore root it holds ([`Publisher::accept_sigstore`]).
//!
//! Writes are group commits. A change is queued, and one writer at a time
//! applies every queued change to a copy of the held state and writes one
//! revision carrying all of them; changes that arrive during a write wait
//! for the next one. Each caller gets the revision that holds its change, or
//! its own error: when a write carrying several changes is refused (the
//! webhook would refuse it, or it does not fit), the writer splits those
//! changes in halves until the change at fault is written alone, so only it
//! is rolled back and reported. Applying N policies at once therefore costs a few writes, not
//! N. Each held policy keeps the TrustRoots it names, found when its spec
//! was accepted, so a write compiles the policies once (in
//! [`sigil_compile::snapshot::validate`]), not twice.
//!
//! Slow writes are paced ([`Pace`]): after a write that took at least
//! [`PACED_WRITE`], the next one starts no sooner than twice that time later
//! (at most [`MAX_PAUSE`]). A write, and the webhook's reload of it, cost
//! time in proportion to every policy held, so without a pause a bulk apply
//! of thousands of policies turns into back-to-back writes that each carry a
//! few changes and keep both processes busy; with it, changes pile up during
//! the pause and go out together. With hundreds of policies a write takes a
//! few milliseconds and nothing waits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::Resource as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use sigil_api::snapshot::stored::{self, CHUNK_KEY};
use sigil_api::snapshot::{
    API_VERSION, PolicySnapshot, SECRET_NAME, SnapshotError, SnapshotPolicy, SnapshotSigstore,
    SnapshotTrustRoot, SnapshotWorkloadKind,
};
use sigil_compile::compile::{Offline, compile_policy, trust_root_refs};
use sigil_compile::default_root::{DefaultRoot, DefaultSource};
use sigil_verifier::trust::{TrustedRoot, format_rfc3339};
use tokio::sync::{Mutex, oneshot};

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::names::MANAGER;

/// A trust root as the publisher holds it.
#[derive(Debug, Clone, PartialEq)]
struct HeldTrustRoot {
    root: SnapshotTrustRoot,
    /// False once the TrustRoot object is gone; kept while referenced.
    live: bool,
}

/// A policy as the publisher holds it.
#[derive(Debug, Clone)]
struct HeldPolicy {
    policy: SnapshotPolicy,
    /// The TrustRoots its spec names (none when it does not compile),
    /// found once per accepted spec.
    trust_root_refs: BTreeSet<String>,
}

impl HeldPolicy {
    fn new(policy: SnapshotPolicy) -> Self {
        let trust_root_refs = compile_policy(&policy.key(), &policy.spec, &Offline)
            .map(|compiled| trust_root_refs(&compiled).into_keys().collect())
            .unwrap_or_default();
        Self {
            policy,
            trust_root_refs,
        }
    }
}

/// What the publisher holds; a write works on a copy and the copy replaces
/// it once the write is over.
#[derive(Clone)]
struct State {
    policies: BTreeMap<String, HeldPolicy>,
    trust_roots: BTreeMap<String, HeldTrustRoot>,
    /// The built-in Sigstore instance's root.
    sigstore: SnapshotSigstore,
    /// The accepted WorkloadKinds, by name.
    workload_kinds: BTreeMap<String, SnapshotWorkloadKind>,
    /// The last snapshot written (or recovered).
    written: Option<PolicySnapshot>,
    /// Shard Secrets that may exist (all of them until the first write has
    /// cleaned up).
    shards: BTreeSet<String>,
}

impl State {
    fn default_trust_root(&self) -> Option<&SnapshotTrustRoot> {
        self.trust_roots
            .values()
            .find(|t| t.live && t.root.default)
            .map(|t| &t.root)
    }
}

/// What became of a TrustRoot's default mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultMark {
    /// The TrustRoot is not marked default.
    NotMarked,
    /// It is marked and is the cluster's default trust root.
    Default,
    /// It is marked, but the named TrustRoot already is the default; it is
    /// published as an ordinary trust root until that one is unmarked.
    Conflict(String),
}

/// The default trust root in force, as the policy reconciler checks
/// policies against it.
#[derive(Debug, Clone)]
pub struct DefaultInForce {
    /// The TrustRoot marked default, or `None` for the built-in root.
    pub trust_root: Option<String>,
    /// The built-in Sigstore instance (`public-good`).
    pub instance: String,
    /// The root's material.
    pub root: TrustedRoot,
}

impl DefaultInForce {
    /// The view the checks in [`sigil_compile::default_root`] take.
    pub fn view(&self) -> DefaultRoot<'_> {
        DefaultRoot {
            source: match &self.trust_root {
                Some(name) => DefaultSource::TrustRoot(name),
                None => DefaultSource::Builtin(&self.instance),
            },
            root: &self.root,
        }
    }
}

/// Writes the policy snapshot Secret.
pub struct Publisher {
    api: Api<Secret>,
    namespace: String,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
    /// Changes waiting for the next write.
    queue: Mutex<Vec<Queued>>,
    /// Held by the one write in progress, with when the next may start.
    writer: Mutex<Pace>,
}

/// The shortest write that makes the next one wait (see [`Pace`]).
pub const PACED_WRITE: Duration = Duration::from_millis(50);

/// The longest pause between two writes: how much later than its change a
/// policy may be published because the writes before it were slow.
pub const MAX_PAUSE: Duration = Duration::from_secs(3);

/// When the next write may start: after a write that took at least
/// [`PACED_WRITE`], twice its duration after it ended (at most
/// [`MAX_PAUSE`]), so slow writes take at most a third of the time however
/// few changes each carries; after a faster one, at once.
#[derive(Debug, Default)]
struct Pace {
    next: Option<tokio::time::Instant>,
}

impl Pace {
    /// Records a write that started at `started` and ended now.
    fn wrote(&mut self, started: tokio::time::Instant) {
        let now = tokio::time::Instant::now();
        let took = now.saturating_duration_since(started);
        self.next = (took >= PACED_WRITE).then(|| now + took.saturating_mul(2).min(MAX_PAUSE));
    }

    /// Waits until the next write may start.
    async fn wait(&self) {
        if let Some(next) = self.next {
            tokio::time::sleep_until(next).await;
        }
    }
}

/// A change waiting for a write, and where its caller waits for the result.
struct Queued {
    change: Change,
    reply: oneshot::Sender<Result<Published>>,
}

/// What a caller gets back once its change is written.
struct Published {
    revision: u64,
    /// The default mark decided for an accepted or re-marked trust root.
    mark: Option<DefaultMark>,
}

/// One change a reconciler asks for.
enum Change {
    AcceptPolicy(Box<SnapshotPolicy>),
    RemovePolicy(String),
    RetainPolicies {
        /// Whether `live` lists ImagePolicies (else ClusterImagePolicies).
        namespaced: bool,
        /// The keys of that kind that still exist.
        live: BTreeSet<String>,
    },
    AcceptTrustRoot(SnapshotTrustRoot),
    MarkTrustRootDefault {
        name: String,
        marked: bool,
    },
    RemoveTrustRoot(String),
    RetainTrustRoots(BTreeSet<String>),
    AcceptSigstore(SnapshotSigstore),
    SetWorkloadKinds(Vec<SnapshotWorkloadKind>),
}

impl Change {
    /// Applies the change to `state`; returns the default mark decided, if
    /// it decides one.
    fn apply(&self, state: &mut State) -> Option<DefaultMark> {
        match self {
            Self::AcceptPolicy(policy) => {
                // A status write bumps resourceVersion; that alone is no new
                // version.
                let key = policy.key();
                let unchanged = state.policies.get(&key).is_some_and(|held| {
                    held.policy.uid == policy.uid
                        && held.policy.generation == policy.generation
                        && held.policy.spec == policy.spec
                });
                if !unchanged {
                    let held = match state.policies.get(&key) {
                        Some(held) if held.policy.spec == policy.spec => HeldPolicy {
                            policy: policy.as_ref().clone(),
                            trust_root_refs: held.trust_root_refs.clone(),
                        },
                        _ => HeldPolicy::new(policy.as_ref().clone()),
                    };
                    state.policies.insert(key, held);
                }
                None
            }
            Self::RemovePolicy(name) => {
                state.policies.remove(name);
                None
            }
            Self::RetainPolicies { namespaced, live } => {
                // Keys with a `/` are ImagePolicies'; each kind's list
                // governs its own.
                state
                    .policies
                    .retain(|key, _| key.contains('/') != *namespaced || live.contains(key));
                None
            }
            Self::AcceptTrustRoot(root) => {
                let mark = Publisher::decide_default(state, &root.name, root.default);
                let mut root = root.clone();
                root.default = mark == DefaultMark::Default;
                state
                    .trust_roots
                    .insert(root.name.clone(), HeldTrustRoot { root, live: true });
                Some(mark)
            }
            Self::MarkTrustRootDefault { name, marked } => {
                let mark = Publisher::decide_default(state, name, *marked);
                let t = state.trust_roots.get_mut(name)?;
                t.root.default = mark == DefaultMark::Default;
                Some(mark)
            }
            Self::RemoveTrustRoot(name) => {
                if let Some(t) = state.trust_roots.get_mut(name) {
                    t.live = false;
                    t.root.default = false;
                }
                None
            }
            Self::RetainTrustRoots(live) => {
                for (name, t) in state.trust_roots.iter_mut() {
                    t.live = live.contains(name);
                    t.root.default &= t.live;
                }
                None
            }
            Self::AcceptSigstore(sigstore) => {
                state.sigstore = sigstore.clone();
                None
            }
            Self::SetWorkloadKinds(kinds) => {
                state.workload_kinds = kinds.iter().map(|k| (k.name.clone(), k.clone())).collect();
                None
            }
        }
    }

    /// Whether a write that failed with `error` must leave this change out
    /// of the held state: a policy the webhook would refuse, or one that
    /// does not fit, must not block the others; trust material that does
    /// not fit must not block the policies.
    fn rolls_back_on(&self, error: &Error) -> bool {
        match self {
            Self::AcceptPolicy(_) => {
                matches!(error, Error::Snapshot(_) | Error::SnapshotTooLarge(_))
            }
            Self::AcceptTrustRoot(_) => matches!(error, Error::SnapshotTooLarge(_)),
            Self::SetWorkloadKinds(_) => {
                matches!(error, Error::Snapshot(_) | Error::SnapshotTooLarge(_))
            }
            _ => false,
        }
    }
}

/// Whether `error` concerns the content of a write (and so one of the
/// changes it carried) rather than the API server.
fn blames_content(error: &Error) -> bool {
    matches!(error, Error::Snapshot(_) | Error::SnapshotTooLarge(_))
}

/// The same error for another caller of the same write.
fn duplicate(error: &Error) -> Error {
    match error {
        Error::Kube { action, source } => Error::Kube {
            action: action.clone(),
            source: Box::new(match source.as_ref() {
                kube::Error::Api(status) => kube::Error::Api(status.clone()),
                other => kube::Error::Service(other.to_string().into()),
            }),
        },
        Error::Snapshot(m) => Error::Snapshot(m.clone()),
        Error::SnapshotTooLarge(m) => Error::SnapshotTooLarge(m.clone()),
        // `flush` returns none of the other kinds.
        other => Error::Snapshot(other.to_string()),
    }
}

impl Publisher {
    /// A publisher writing into `namespace`, holding `sigstore` (the
    /// built-in instance's embedded root) until told better.
    pub fn new(
        client: Client,
        namespace: &str,
        metrics: Arc<Metrics>,
        sigstore: SnapshotSigstore,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            metrics,
            state: Mutex::new(State {
                policies: BTreeMap::new(),
                trust_roots: BTreeMap::new(),
                sigstore,
                workload_kinds: BTreeMap::new(),
                written: None,
                shards: stored::all_shards(SECRET_NAME).into_iter().collect(),
            }),
            queue: Mutex::new(Vec::new()),
            writer: Mutex::new(Pace::default()),
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
        let _writer = self.writer.lock().await;
        let mut state = self.state.lock().await;
        let Some(secret) = secret else {
            return Ok(None);
        };
        let data = secret.data.unwrap_or_default();
        let loaded = stored::load(
            SECRET_NAME,
            |key| data.get(key).map(|b| b.0.as_slice()),
            |name| self.read_shard(name),
        )
        .await;
        match loaded {
            Ok(snapshot) => {
                for p in &snapshot.policies {
                    state.policies.insert(p.key(), HeldPolicy::new(p.clone()));
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
                // A root verified through TUF before the restart stays in
                // force until the next update: falling back to the older
                // embedded copy would be a rollback a mirror could cause by
                // going quiet.
                if let Some(sigstore) = &snapshot.sigstore
                    && sigstore.instance == state.sigstore.instance
                {
                    state.sigstore = sigstore.clone();
                }
                state.workload_kinds = snapshot
                    .workload_kinds
                    .iter()
                    .map(|k| (k.name.clone(), k.clone()))
                    .collect();
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

    /// A shard Secret's chunk, `None` when it is missing.
    async fn read_shard(&self, name: String) -> Result<Option<Vec<u8>>, String> {
        let secret = self.api.get_opt(&name).await.map_err(|e| e.to_string())?;
        Ok(secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove(CHUNK_KEY))
            .map(|b| b.0))
    }

    /// The accepted version of a policy (by [`SnapshotPolicy::key`]), if any.
    pub async fn policy(&self, name: &str) -> Option<SnapshotPolicy> {
        self.state
            .lock()
            .await
            .policies
            .get(name)
            .map(|held| held.policy.clone())
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
        Ok(self
            .submit(Change::AcceptPolicy(Box::new(policy)))
            .await?
            .revision)
    }

    /// Stops publishing a deleted policy (by [`SnapshotPolicy::key`]).
    pub async fn remove_policy(&self, name: &str) -> Result<u64> {
        Ok(self
            .submit(Change::RemovePolicy(name.to_owned()))
            .await?
            .revision)
    }

    /// Keeps, of the ClusterImagePolicies (or, with `namespaced`, of the
    /// ImagePolicies), only those whose keys are in `live` (after a restart,
    /// policies deleted while the controller was down).
    pub async fn retain_policies(&self, namespaced: bool, live: &BTreeSet<String>) -> Result<u64> {
        Ok(self
            .submit(Change::RetainPolicies {
                namespaced,
                live: live.clone(),
            })
            .await?
            .revision)
    }

    /// Publishes trust material that loaded and verified; `root.default`
    /// asks for it to be the default trust root.
    pub async fn accept_trust_root(&self, root: SnapshotTrustRoot) -> Result<DefaultMark> {
        let published = self.submit(Change::AcceptTrustRoot(root)).await?;
        Ok(published.mark.unwrap_or(DefaultMark::NotMarked))
    }

    /// Sets only the default mark of a published trust root whose new
    /// generation failed to load (the annotation may still change); `None`
    /// when nothing of it is published.
    pub async fn mark_trust_root_default(
        &self,
        name: &str,
        marked: bool,
    ) -> Result<Option<DefaultMark>> {
        if !self
            .state
            .lock()
            .await
            .trust_roots
            .get(name)
            .is_some_and(|t| t.live)
        {
            return Ok(None);
        }
        let change = Change::MarkTrustRootDefault {
            name: name.to_owned(),
            marked,
        };
        Ok(self.submit(change).await?.mark)
    }

    fn decide_default(state: &State, name: &str, marked: bool) -> DefaultMark {
        if !marked {
            return DefaultMark::NotMarked;
        }
        match state.default_trust_root() {
            Some(other) if other.name != name => DefaultMark::Conflict(other.name.clone()),
            _ => DefaultMark::Default,
        }
    }

    /// Stops publishing a deleted trust root (once no policy refers to it);
    /// a deleted default stops being the default.
    pub async fn remove_trust_root(&self, name: &str) -> Result<u64> {
        Ok(self
            .submit(Change::RemoveTrustRoot(name.to_owned()))
            .await?
            .revision)
    }

    /// Keeps only the trust roots named in `live`.
    pub async fn retain_trust_roots(&self, live: &BTreeSet<String>) -> Result<u64> {
        Ok(self
            .submit(Change::RetainTrustRoots(live.clone()))
            .await?
            .revision)
    }

    /// Publishes the built-in Sigstore instance's root.
    pub async fn accept_sigstore(&self, sigstore: SnapshotSigstore) -> Result<u64> {
        Ok(self
            .submit(Change::AcceptSigstore(sigstore))
            .await?
            .revision)
    }

    /// Publishes exactly these WorkloadKinds (every accepted one: the
    /// reconciler decides the whole set at once, as kinds conflict with
    /// each other); returns the revision that holds them.
    pub async fn set_workload_kinds(&self, kinds: Vec<SnapshotWorkloadKind>) -> Result<u64> {
        Ok(self.submit(Change::SetWorkloadKinds(kinds)).await?.revision)
    }

    /// The WorkloadKinds published, by name.
    pub async fn workload_kinds(&self) -> BTreeMap<String, SnapshotWorkloadKind> {
        self.state.lock().await.workload_kinds.clone()
    }

    /// The built-in Sigstore instance's root as held.
    pub async fn sigstore(&self) -> SnapshotSigstore {
        self.state.lock().await.sigstore.clone()
    }

    /// The default trust root in force.
    pub async fn default_in_force(&self) -> DefaultInForce {
        let (trust_root, instance, json) = {
            let state = self.state.lock().await;
            let instance = state.sigstore.instance.clone();
            match state.default_trust_root() {
                Some(t) => (Some(t.name.clone()), instance, t.trusted_root_json.clone()),
                None => (None, instance, state.sigstore.trusted_root_json.clone()),
            }
        };
        // Held material was parsed when it was accepted; an unparsable one
        // cannot be held, and then the embedded public-good root stands in.
        let root = TrustedRoot::from_json(&json)
            .or_else(|_| TrustedRoot::public_good())
            .unwrap_or(TrustedRoot {
                tlogs: Vec::new(),
                ctlogs: Vec::new(),
                certificate_authorities: Vec::new(),
                timestamp_authorities: Vec::new(),
            });
        DefaultInForce {
            trust_root,
            instance,
            root,
        }
    }

    /// An identity of the default trust root in force (which one and its
    /// material): when it changes, policies are checked again.
    pub async fn default_id(&self) -> String {
        let state = self.state.lock().await;
        let (name, json) = match state.default_trust_root() {
            Some(t) => (t.name.as_str(), t.trusted_root_json.as_str()),
            None => ("", state.sigstore.trusted_root_json.as_str()),
        };
        format!(
            "{name}:{}",
            hex::encode(sigil_verifier::crypto::sha256(json.as_bytes()))
        )
    }

    /// Queues `change` and waits for the write that carries it; the caller
    /// that finds no write in progress does the write.
    async fn submit(&self, change: Change) -> Result<Published> {
        let (reply, result) = oneshot::channel();
        self.queue.lock().await.push(Queued { change, reply });
        {
            let mut pace = self.writer.lock().await;
            // Changes queued meanwhile go out with this one.
            pace.wait().await;
            // Empty when the write before this one carried the change.
            let batch = std::mem::take(&mut *self.queue.lock().await);
            if !batch.is_empty() {
                let started = tokio::time::Instant::now();
                self.write_batch(batch).await;
                pace.wrote(started);
            }
        }
        // Only a write cancelled mid-way drops the answer; nothing of it
        // was committed to the held state.
        result.await.unwrap_or(Err(Error::SnapshotInterrupted))
    }

    /// Writes one revision with every change of `batch` and answers each
    /// caller. When the content is refused, the changes are split in halves
    /// (in order) until the change at fault is written alone, so only it is
    /// rolled back and reported, in a number of writes that grows with the
    /// logarithm of the batch rather than its size.
    async fn write_batch(&self, batch: Vec<Queued>) {
        let mut parts = vec![batch];
        while let Some(mut part) = parts.pop() {
            if part.len() == 1
                && let Some(queued) = part.pop()
            {
                self.write_one(queued).await;
                continue;
            }
            if let Some(mut refused) = self.try_batch(part).await {
                tracing::info!(
                    changes = refused.len(),
                    "policy snapshot refused; writing its changes in halves to find the one at fault"
                );
                let second = refused.split_off(refused.len() / 2);
                parts.push(second);
                parts.push(refused);
            }
        }
    }

    /// Writes several changes as one revision and answers their callers;
    /// gives them back unanswered when the content is refused.
    async fn try_batch(&self, batch: Vec<Queued>) -> Option<Vec<Queued>> {
        let mut next = self.state.lock().await.clone();
        let marks: Vec<Option<DefaultMark>> =
            batch.iter().map(|q| q.change.apply(&mut next)).collect();
        match self.flush(&mut next).await {
            Ok(revision) => {
                *self.state.lock().await = next;
                for (queued, mark) in batch.into_iter().zip(marks) {
                    // A caller that stopped waiting needs no answer.
                    let _ = queued.reply.send(Ok(Published { revision, mark }));
                }
                None
            }
            Err(e) if blames_content(&e) => Some(batch),
            Err(e) => {
                // The API server failed the write: every change stays held
                // (as a single one would) and every caller retries.
                *self.state.lock().await = next;
                for queued in batch {
                    let _ = queued.reply.send(Err(duplicate(&e)));
                }
                None
            }
        }
    }

    /// Writes one change alone: the revision that holds it, or its error
    /// (rolling it back when its kind asks to).
    async fn write_one(&self, queued: Queued) {
        let mut next = self.state.lock().await.clone();
        let mark = queued.change.apply(&mut next);
        let result = self.flush(&mut next).await;
        let keep = match &result {
            Ok(_) => true,
            Err(e) => !queued.change.rolls_back_on(e),
        };
        if keep {
            *self.state.lock().await = next;
        }
        let _ = queued
            .reply
            .send(result.map(|revision| Published { revision, mark }));
    }

    /// Writes a new revision when the content changed.
    async fn flush(&self, state: &mut State) -> Result<u64> {
        // Trust roots that accepted policies still need stay, deleted or not.
        let needed: BTreeSet<String> = state
            .policies
            .values()
            .flat_map(|held| held.trust_root_refs.iter().cloned())
            .collect();
        state
            .trust_roots
            .retain(|name, t| t.live || needed.contains(name));
        let written = state.written.clone().unwrap_or_else(PolicySnapshot::empty);
        let mut candidate = PolicySnapshot {
            api_version: API_VERSION.to_owned(),
            revision: written.revision.saturating_add(1),
            generated_at: now_rfc3339(),
            policies: state
                .policies
                .values()
                .map(|held| held.policy.clone())
                .collect(),
            trust_roots: state.trust_roots.values().map(|t| t.root.clone()).collect(),
            sigstore: Some(state.sigstore.clone()),
            workload_kinds: state.workload_kinds.values().cloned().collect(),
        };
        candidate.api_version = candidate.needed_api_version().to_owned();
        if state.written.is_some()
            && candidate.policies == written.policies
            && candidate.trust_roots == written.trust_roots
            && candidate.sigstore == written.sigstore
            && candidate.workload_kinds == written.workload_kinds
        {
            return Ok(written.revision);
        }
        // Never publish what the webhook would refuse.
        sigil_compile::snapshot::validate(&candidate)
            .map_err(|e| Error::Snapshot(e.to_string()))?;
        let encoded = stored::encode(&candidate, SECRET_NAME).map_err(|e| match e {
            SnapshotError::TooLarge(_) | SnapshotError::StoredTooLarge { .. } => {
                Error::SnapshotTooLarge(e.to_string())
            }
            other => Error::Snapshot(other.to_string()),
        })?;
        // Shards first, the manifest last: readers never follow a manifest
        // to chunks that are not there yet.
        for (name, chunk) in &encoded.shards {
            self.apply_secret(
                name,
                candidate.revision,
                [(CHUNK_KEY.to_owned(), chunk.clone())].into(),
            )
            .await?;
        }
        self.apply_secret(SECRET_NAME, candidate.revision, encoded.main.clone())
            .await?;
        let used: BTreeSet<&str> = encoded.shards.iter().map(|(n, _)| n.as_str()).collect();
        let stale: Vec<String> = state
            .shards
            .iter()
            .filter(|n| !used.contains(n.as_str()))
            .cloned()
            .collect();
        for name in stale {
            match self.api.delete(&name, &Default::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    // Left for the next write: a stale shard is never read,
                    // the manifest does not name it.
                    tracing::warn!(secret = name, error = %e, "stale policy snapshot shard not deleted");
                    continue;
                }
            }
            state.shards.remove(&name);
        }
        state.shards.extend(used.into_iter().map(str::to_owned));
        tracing::info!(
            revision = candidate.revision,
            policies = candidate.policies.len(),
            trust_roots = candidate.trust_roots.len(),
            json_bytes = encoded.decoded_bytes,
            stored_bytes = encoded.stored_bytes,
            secrets = 1 + encoded.shards.len(),
            "policy snapshot written"
        );
        self.metrics.snapshot_written(candidate.revision);
        let revision = candidate.revision;
        state.written = Some(candidate);
        Ok(revision)
    }
}

impl Publisher {
    /// Writes Secret `name` with `data` by server-side apply (keys this
    /// manager wrote before and `data` lacks are dropped).
    async fn apply_secret(
        &self,
        name: &str,
        revision: u64,
        data: BTreeMap<String, Vec<u8>>,
    ) -> Result<()> {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_owned(),
                        MANAGER.to_owned(),
                    )]
                    .into(),
                ),
                annotations: Some(
                    [(
                        "policy.sigil.dev/snapshot-revision".to_owned(),
                        revision.to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
            ..Default::default()
        };
        let mut body = serde_json::to_value(&secret).map_err(|e| Error::Snapshot(e.to_string()))?;
        if let Some(obj) = body.as_object_mut() {
            obj.insert("apiVersion".into(), Secret::API_VERSION.into());
            obj.insert("kind".into(), Secret::KIND.into());
        }
        self.api
            .patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(|e| {
                Error::kube(
                    format!(
                        "writing policy snapshot revision {revision} to Secret {}/{name}",
                        self.namespace
                    ),
                    e,
                )
            })?;
        Ok(())
    }
}

/// The current time in RFC 3339.
pub fn now_rfc3339() -> String {
    format_rfc3339(time::OffsetDateTime::now_utc())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use http::Method;
    use sigil_api::snapshot::stored::{MANIFEST_KEY, Manifest};

    use super::*;
    use crate::fixtures::*;

    /// A valid trust root padded with `kib` KiB of text gzip cannot shrink
    /// much (the parser ignores the unknown field).
    fn padded_root(name: &str, kib: usize, seed: u64) -> SnapshotTrustRoot {
        let mut state = seed | 1;
        let padding: String = (0..kib * 1024)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b'!' + u8::try_from(state % 90).unwrap())
            })
            .collect();
        let mut root: serde_json::Value = serde_json::from_str(
            crate::config::SigstoreInstance::PublicGood.embedded_trusted_root(),
        )
        .unwrap();
        root["padding"] = padding.into();
        SnapshotTrustRoot {
            name: name.into(),
            generation: 1,
            trusted_root_json: root.to_string(),
            default: false,
        }
    }

    fn manifest(api: &FakeApi) -> Manifest {
        serde_json::from_slice(&secret_data(api, SECRET_NAME, MANIFEST_KEY).unwrap()).unwrap()
    }

    /// Paths written (PATCH) or deleted, in order, after request `from`.
    fn writes(api: &FakeApi, from: usize) -> Vec<(Method, String)> {
        api.requests()
            .into_iter()
            .skip(from)
            .filter(|r| r.method == Method::PATCH || r.method == Method::DELETE)
            .filter(|r| r.path.contains("/secrets/"))
            .map(|r| {
                let name = r
                    .path
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .split('?')
                    .next()
                    .unwrap();
                (r.method, name.to_owned())
            })
            .collect()
    }

    #[tokio::test]
    async fn a_snapshot_larger_than_a_secret_is_written_shards_first_and_the_old_set_is_deleted_after()
     {
        let (api, (ctx, _rx, _leading)) = first_revision().await;
        let publisher = &ctx.publisher;
        // About 2 MiB compressed: the main Secret and two shards.
        publisher
            .accept_trust_root(padded_root("big", 2400, 7))
            .await
            .unwrap();
        let first = manifest(&api);
        assert_eq!(first.chunks.len(), 3, "{first:?}");
        let set = if first.revision % 2 == 1 { 'a' } else { 'b' };
        let other = if set == 'a' { 'b' } else { 'a' };
        assert_eq!(first.chunks[1].secret, format!("{SECRET_NAME}-{set}1"));
        assert!(
            stored_snapshot(&api)
                .unwrap()
                .trust_roots
                .iter()
                .any(|t| t.name == "big")
        );

        // The next revision goes to the other set, written before the
        // manifest; the first set is deleted only after the manifest moved.
        let from = api.requests().len();
        publisher
            .accept_trust_root(padded_root("big", 2400, 8))
            .await
            .unwrap();
        let second = manifest(&api);
        assert_eq!(second.revision, first.revision + 1);
        let writes = writes(&api, from);
        let main_at = writes
            .iter()
            .position(|(m, n)| *m == Method::PATCH && n == SECRET_NAME)
            .unwrap();
        for (i, (method, name)) in writes.iter().enumerate() {
            if name.starts_with(&format!("{SECRET_NAME}-{other}")) && *method == Method::PATCH {
                assert!(i < main_at, "{writes:?}");
            }
            if *method == Method::DELETE {
                assert!(i > main_at, "{writes:?}");
            }
        }
        assert!(
            api.get(&secret_path(&format!("{SECRET_NAME}-{set}1")))
                .is_none()
        );
        assert!(
            api.get(&secret_path(&format!("{SECRET_NAME}-{other}2")))
                .is_some()
        );
        let read = stored_snapshot(&api).unwrap();
        assert_eq!(read.revision, second.revision);

        // Back under one Secret: every shard is gone.
        publisher.remove_trust_root("big").await.unwrap();
        assert_eq!(manifest(&api).chunks.len(), 1);
        for name in stored::all_shards(SECRET_NAME) {
            assert!(api.get(&secret_path(&name)).is_none(), "{name}");
        }
    }

    #[tokio::test]
    async fn a_snapshot_too_large_for_every_secret_is_refused_and_the_previous_one_stays() {
        let (api, (ctx, _rx, _leading)) = first_revision().await;
        let publisher = &ctx.publisher;
        let before = stored_snapshot(&api).unwrap();
        let from = api.requests().len();
        // About 9 MiB compressed, more than 8 Secrets of 900 KiB.
        let err = publisher
            .accept_trust_root(padded_root("huge", 11_000, 9))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::SnapshotTooLarge(_)), "{err}");
        assert!(
            err.to_string().contains("remove or merge policies"),
            "{err}"
        );
        assert!(writes(&api, from).is_empty(), "nothing is written");
        assert_eq!(stored_snapshot(&api).unwrap(), before);
        // It is not held either, so the next change publishes without it.
        assert!(publisher.trust_root("huge").await.is_none());
        publisher
            .accept_policy(SnapshotPolicy {
                name: "p".into(),
                namespace: String::new(),
                uid: "uid-p".into(),
                generation: 1,
                resource_version: "1".into(),
                spec: serde_json::from_value(serde_json::json!({
                    "images": [{"glob": "**"}], "authorities": [{"key": {"data": P256_PUB}}]}))
                .unwrap(),
            })
            .await
            .unwrap();
        assert_eq!(stored_snapshot(&api).unwrap().policies.len(), 1);
    }

    #[tokio::test]
    async fn a_restarted_controller_recovers_a_sharded_snapshot_and_an_old_plain_one() {
        let (client, _api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client.clone(), true);
        ctx.publisher
            .accept_sigstore(ctx.publisher.sigstore().await)
            .await
            .unwrap();
        ctx.publisher
            .accept_trust_root(padded_root("big", 2400, 7))
            .await
            .unwrap();
        let written = ctx.publisher.revision().await;
        let (restarted, _rx, _leading) = context(client.clone(), true);
        assert_eq!(restarted.publisher.recover().await.unwrap(), Some(written));
        assert!(restarted.publisher.trust_root("big").await.is_some());

        // A Secret an older controller wrote: plain JSON only.
        let (client, api) = FakeApi::start();
        let mut old = PolicySnapshot::empty();
        old.revision = 41;
        api.put(
            &secret_path(SECRET_NAME),
            secret(
                SECRET_NAME,
                &[(sigil_api::snapshot::SECRET_KEY, &old.to_json())],
            ),
        );
        let (ctx, _rx, _leading) = context(client, true);
        assert_eq!(ctx.publisher.recover().await.unwrap(), Some(41));
    }

    /// A leading controller's context over a fake API server, its
    /// publisher having written the first revision (the built-in Sigstore
    /// root alone).
    async fn first_revision() -> (
        FakeApi,
        (
            Arc<crate::Context>,
            tokio::sync::mpsc::UnboundedReceiver<crate::context::TrustChange>,
            tokio::sync::watch::Sender<bool>,
        ),
    ) {
        let (client, api) = FakeApi::start();
        let started = context(client, true);
        let publisher = &started.0.publisher;
        publisher
            .accept_sigstore(publisher.sigstore().await)
            .await
            .unwrap();
        (api, started)
    }

    fn key_policy(name: &str, images: serde_json::Value) -> SnapshotPolicy {
        SnapshotPolicy {
            name: name.into(),
            namespace: String::new(),
            uid: format!("uid-{name}"),
            generation: 1,
            resource_version: "1".into(),
            spec: serde_json::from_value(serde_json::json!({
                "images": images, "authorities": [{"key": {"data": P256_PUB}}]}))
            .unwrap(),
        }
    }

    /// Main Secret writes (one per revision) after request `from`.
    fn revisions_written(api: &FakeApi, from: usize) -> usize {
        writes(api, from)
            .iter()
            .filter(|(m, n)| *m == Method::PATCH && n == SECRET_NAME)
            .count()
    }

    /// Calls `accept_policy` for every policy at once; the answers in order.
    async fn accept_all(publisher: &Publisher, policies: Vec<SnapshotPolicy>) -> Vec<Result<u64>> {
        futures_util::future::join_all(policies.into_iter().map(|p| publisher.accept_policy(p)))
            .await
    }

    #[tokio::test]
    async fn many_concurrent_accepts_are_written_in_a_few_revisions_that_end_holding_all_of_them() {
        let (api, (ctx, _rx, _leading)) = first_revision().await;
        let publisher = &ctx.publisher;
        let from = api.requests().len();
        let policies: Vec<SnapshotPolicy> = (0..50)
            .map(|i| key_policy(&format!("p{i}"), serde_json::json!([{"glob": "**"}])))
            .collect();

        let answers = accept_all(publisher, policies).await;

        let written = revisions_written(&api, from);
        assert!(written <= 3, "{written} revisions for 50 accepts");
        let last = publisher.revision().await;
        for answer in answers {
            let revision = answer.unwrap();
            assert!(revision <= last);
        }
        let snapshot = stored_snapshot(&api).unwrap();
        assert_eq!(snapshot.revision, last);
        assert_eq!(snapshot.policies.len(), 50);
        sigil_compile::snapshot::validate(&snapshot).unwrap();
    }

    #[tokio::test]
    async fn a_policy_the_webhook_would_refuse_in_a_concurrent_batch_is_refused_alone() {
        let (api, (ctx, _rx, _leading)) = first_revision().await;
        let publisher = &ctx.publisher;
        let mut policies: Vec<SnapshotPolicy> = (0..20)
            .map(|i| key_policy(&format!("p{i}"), serde_json::json!([{"glob": "**"}])))
            .collect();
        // A Secret reference the controller did not resolve inline.
        policies[7].spec = serde_json::from_value(serde_json::json!({
            "images": [{"glob": "**"}], "authorities": [{"key": {"secretRef": {"name": "k"}}}]}))
        .unwrap();

        let from = api.requests().len();

        let answers = accept_all(publisher, policies).await;

        let written = revisions_written(&api, from);
        assert!(written < 19, "{written} revisions for 20 accepts");
        for (i, answer) in answers.iter().enumerate() {
            if i == 7 {
                assert!(matches!(answer, Err(Error::Snapshot(_))), "{answer:?}");
            } else {
                assert!(answer.is_ok(), "p{i}: {answer:?}");
            }
        }
        assert!(publisher.policy("p7").await.is_none());
        let snapshot = stored_snapshot(&api).unwrap();
        let names: BTreeSet<String> = snapshot.policies.iter().map(|p| p.name.clone()).collect();
        assert_eq!(names.len(), 19);
        assert!(!names.contains("p7"));
        sigil_compile::snapshot::validate(&snapshot).unwrap();
    }

    #[tokio::test]
    async fn a_policy_that_does_not_fit_in_a_concurrent_batch_is_refused_alone() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        let publisher = &ctx.publisher;
        // Fills the Secrets to some 70 KiB under the limit.
        publisher
            .accept_trust_root(padded_root("padding", 8_430, 7))
            .await
            .unwrap();
        let mut policies: Vec<SnapshotPolicy> = (0..4)
            .map(|i| key_policy(&format!("p{i}"), serde_json::json!([{"glob": "**"}])))
            .collect();
        // 200 KiB of image globs, about 125 KiB compressed.
        let mut state = 11u64;
        let images: Vec<serde_json::Value> = (0..200)
            .map(|_| {
                let noise: String = (0..1000)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        char::from(b'a' + u8::try_from(state % 26).unwrap())
                    })
                    .collect();
                serde_json::json!({"glob": format!("registry.example.com/{noise}/**")})
            })
            .collect();
        policies[3] = key_policy("p3", images.into());

        let answers = accept_all(publisher, policies).await;

        for (i, answer) in answers.iter().enumerate() {
            if i == 3 {
                assert!(
                    matches!(answer, Err(Error::SnapshotTooLarge(_))),
                    "{answer:?}"
                );
            } else {
                assert!(answer.is_ok(), "p{i}: {answer:?}");
            }
        }
        assert!(publisher.policy("p3").await.is_none());
        let snapshot = stored_snapshot(&api).unwrap();
        assert_eq!(snapshot.policies.len(), 3);
        assert!(snapshot.policies.iter().all(|p| p.name != "p3"));
    }

    #[tokio::test]
    async fn a_remove_during_a_write_in_progress_is_in_the_next_revision() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        let publisher = &ctx.publisher;
        let first = key_policy("first", serde_json::json!([{"glob": "**"}]));
        publisher.accept_policy(first).await.unwrap();
        let held = publisher.revision().await;

        // The accept takes the writer; the remove queues behind its write.
        let second = key_policy("second", serde_json::json!([{"glob": "**"}]));
        let (accepted, removed) = tokio::join!(publisher.accept_policy(second), async {
            tokio::task::yield_now().await;
            publisher.remove_policy("first").await
        });

        let accepted = accepted.unwrap();
        let removed = removed.unwrap();
        assert_eq!(accepted, held + 1);
        assert_eq!(removed, held + 2);
        let snapshot = stored_snapshot(&api).unwrap();
        assert_eq!(snapshot.revision, removed);
        let names: Vec<&str> = snapshot.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["second"]);
    }

    #[tokio::test]
    async fn a_write_cancelled_mid_way_answers_the_other_changes_it_carried_with_an_interruption() {
        let (client, _api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        let publisher = &ctx.publisher;
        let glob = || serde_json::json!([{"glob": "**"}]);
        let mut a = Box::pin(publisher.accept_policy(key_policy("a", glob())));
        let mut b = Box::pin(publisher.accept_policy(key_policy("b", glob())));
        let mut c = Box::pin(publisher.accept_policy(key_policy("c", glob())));
        // `a` writes alone; `b` and `c` queue behind it.
        assert!(futures_util::poll!(a.as_mut()).is_pending());
        assert!(futures_util::poll!(b.as_mut()).is_pending());
        assert!(futures_util::poll!(c.as_mut()).is_pending());
        a.await.unwrap();
        // `b` takes the writer and starts the write carrying `b` and `c`.
        assert!(futures_util::poll!(b.as_mut()).is_pending());
        drop(b);

        let err = c.await.unwrap_err();

        assert!(matches!(err, Error::SnapshotInterrupted), "{err}");
        assert!(publisher.policy("b").await.is_none());
        assert!(publisher.policy("c").await.is_none());
        assert!(publisher.policy("a").await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn slow_writes_pause_the_next_one_and_fast_ones_do_not() {
        let mut pace = Pace::default();
        let started = tokio::time::Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        pace.wrote(started);
        assert!(pace.next.is_none(), "a 10 ms write makes nothing wait");

        let started = tokio::time::Instant::now();
        tokio::time::advance(Duration::from_millis(400)).await;
        pace.wrote(started);
        let ended = tokio::time::Instant::now();
        assert_eq!(pace.next, Some(ended + Duration::from_millis(800)));
        pace.wait().await;
        assert_eq!(
            tokio::time::Instant::now(),
            ended + Duration::from_millis(800)
        );

        let started = tokio::time::Instant::now();
        tokio::time::advance(Duration::from_secs(20)).await;
        pace.wrote(started);
        assert_eq!(pace.next, Some(tokio::time::Instant::now() + MAX_PAUSE));
    }

    #[tokio::test]
    async fn changes_made_during_a_pause_go_out_in_one_revision() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        let publisher = &ctx.publisher;
        let glob = || serde_json::json!([{"glob": "**"}]);
        publisher
            .accept_policy(key_policy("first", glob()))
            .await
            .unwrap();
        let held = publisher.revision().await;
        // As if that write had taken 200 ms: the next waits 400 ms.
        {
            let mut pace = publisher.writer.lock().await;
            pace.next = Some(tokio::time::Instant::now() + Duration::from_millis(400));
        }
        let started = tokio::time::Instant::now();

        let (a, b, c) = tokio::join!(
            publisher.accept_policy(key_policy("a", glob())),
            publisher.accept_policy(key_policy("b", glob())),
            publisher.accept_policy(key_policy("c", glob())),
        );

        assert!(started.elapsed() >= Duration::from_millis(400));
        assert_eq!([a.unwrap(), b.unwrap(), c.unwrap()], [held + 1; 3]);
        assert_eq!(stored_snapshot(&api).unwrap().policies.len(), 4);
    }
}
