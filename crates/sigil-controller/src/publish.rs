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
//! not accepted again, so its last good spec stays.
//!
//! Recovery never starts empty. After a restart or a handover,
//! [`Publisher::recover`] reads the stored snapshot before anything is
//! written (a first write waits for it), so the last good specs and the
//! revision counter survive. A read that fails (an API error on the main
//! Secret or on one shard) is an error the caller retries; only content
//! that is really corrupt, read twice alike, is discarded
//! ([`Recovered::Discarded`], which the caller reports in an Event and a
//! metric), and then the revision continues above the stored one.
//!
//! Writes are fenced ([`crate::fenced`]): each Secret write checks the
//! Lease right before it goes out and is conditioned on the
//! `resourceVersion` this replica last saw of that Secret, so a controller
//! that lost the Lease, or one that has not seen another controller's write
//! (a rolling update), cannot replace the snapshot or delete the shards
//! another wrote; its write fails with [`Error::WriteConflict`] and it reads
//! the Secrets again before its next write. A trust root that was deleted
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

use k8s_openapi::api::core::v1::Secret;
use sigil_api::cip::ClusterImagePolicySpec;
use sigil_api::snapshot::stored::{self, CHUNK_KEY};
use sigil_api::snapshot::{
    API_VERSION, PolicySnapshot, SECRET_NAME, SnapshotError, SnapshotPolicy, SnapshotSigstore,
    SnapshotTrustRoot, SnapshotWorkloadKind,
};
use sigil_compile::compile::{Offline, compile_policy, trust_root_refs};
use sigil_compile::default_root::{DefaultRoot, DefaultSource};
use sigil_verifier::trust::{TrustedRoot, format_rfc3339};
use tokio::sync::{Mutex, oneshot};

use crate::budget::TenantBudget;
use crate::error::{Error, Result};
use crate::fenced::{SecretWriter, Seen};
use crate::metrics::Metrics;

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
    /// The JSON it adds to the snapshot ([`TenantBudget`]).
    bytes: usize,
}

impl HeldPolicy {
    fn new(policy: SnapshotPolicy) -> Self {
        let trust_root_refs = compile_policy(&policy.key(), &policy.spec, &Offline)
            .map(|compiled| trust_root_refs(&compiled).into_keys().collect())
            .unwrap_or_default();
        Self {
            bytes: json_bytes(&policy),
            policy,
            trust_root_refs,
        }
    }
}

/// The length of `policy`'s JSON in the snapshot.
fn json_bytes(policy: &SnapshotPolicy) -> usize {
    serde_json::to_vec(policy).map_or(0, |json| json.len())
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
    secrets: SecretWriter,
    metrics: Arc<Metrics>,
    budget: TenantBudget,
    state: Mutex<State>,
    /// Changes waiting for the next write.
    queue: Mutex<Vec<Queued>>,
    /// Held by the one write (or recovery) in progress.
    writer: Mutex<Writer>,
}

/// What the write in progress holds: its pace, and what this replica last
/// saw of the Secrets it writes.
#[derive(Default)]
struct Writer {
    pace: Pace,
    /// Whether the stored snapshot was read into the held state.
    recovered: bool,
    /// What was last seen of the main Secret; `None` after a refused write,
    /// until it is read again.
    main: Option<Seen>,
    /// What was last seen of each shard Secret of both sets.
    shards: BTreeMap<String, Seen>,
    /// After a refused write, the stored content is another's: the next
    /// write goes out even if the held content looks unchanged.
    must_write: bool,
}

/// What [`Publisher::recover`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// No snapshot Secret: a first start.
    FirstStart,
    /// The stored snapshot of this revision, now held.
    Snapshot(u64),
    /// The stored content is corrupt (read twice alike): nothing of it is
    /// held, and the next revision is above the stored one's.
    Discarded {
        /// Why it did not load.
        reason: String,
        /// The revision the next write continues from.
        floor: u64,
    },
}

/// One read of the stored snapshot: what was seen of its Secrets, and what
/// loaded (`None` when there is no main Secret).
struct StoredRead {
    main: Seen,
    shards: BTreeMap<String, Seen>,
    loaded: Option<std::result::Result<PolicySnapshot, SnapshotError>>,
    /// The revision the main Secret's annotation names, if any.
    annotated: Option<u64>,
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
    /// it decides one. A policy past its namespace's share of the snapshot
    /// is refused here, before anything is written.
    fn apply(&self, state: &mut State, budget: &TenantBudget) -> Result<Option<DefaultMark>> {
        Ok(match self {
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
                            bytes: json_bytes(policy),
                        },
                        _ => HeldPolicy::new(policy.as_ref().clone()),
                    };
                    budget.admit(
                        &key,
                        held.bytes,
                        state
                            .policies
                            .iter()
                            .map(|(key, held)| (key.as_str(), held.bytes)),
                    )?;
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
                match state.trust_roots.get_mut(name) {
                    Some(t) => {
                        t.root.default = mark == DefaultMark::Default;
                        Some(mark)
                    }
                    None => None,
                }
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
        })
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
            // Trust material that did not fit is not held either, so what is
            // held never runs ahead of what was written.
            Self::AcceptTrustRoot(_)
            | Self::AcceptSigstore(_)
            | Self::MarkTrustRootDefault { .. } => {
                matches!(error, Error::SnapshotTooLarge(_))
            }
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
        Error::WriteConflict(m) => Error::WriteConflict(m.clone()),
        Error::SnapshotUnreadable(m) => Error::SnapshotUnreadable(m.clone()),
        Error::NotLeader(m) => Error::NotLeader(m.clone()),
        Error::SnapshotBudget(m) => Error::SnapshotBudget(m.clone()),
        // `flush` returns none of the other kinds.
        other => Error::Snapshot(other.to_string()),
    }
}

impl Publisher {
    /// A publisher writing through `secrets` (sigil's namespace), holding
    /// `sigstore` (the built-in instance's embedded root) until told better.
    pub fn new(secrets: SecretWriter, metrics: Arc<Metrics>, sigstore: SnapshotSigstore) -> Self {
        Self {
            secrets,
            metrics,
            budget: TenantBudget::default(),
            state: Mutex::new(State {
                policies: BTreeMap::new(),
                trust_roots: BTreeMap::new(),
                sigstore,
                workload_kinds: BTreeMap::new(),
                written: None,
            }),
            queue: Mutex::new(Vec::new()),
            writer: Mutex::new(Writer::default()),
        }
    }

    /// The publisher with ImagePolicies held to `budget`.
    pub fn with_budget(mut self, budget: TenantBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Loads the stored snapshot, so its policies and trust roots stay
    /// published until reconciled and its revision continues. Errors are
    /// read errors, to retry (nothing is held or written meanwhile); only
    /// content that is corrupt twice alike is discarded.
    pub async fn recover(&self) -> Result<Recovered> {
        let mut writer = self.writer.lock().await;
        self.recover_locked(&mut writer).await
    }

    async fn recover_locked(&self, writer: &mut Writer) -> Result<Recovered> {
        let mut read = self.read_stored().await?;
        if matches!(read.loaded, Some(Err(_))) {
            // Read again: content that changed meanwhile was being written
            // (a controller still finishing its write), not corrupt.
            let again = self.read_stored().await?;
            if again.main != read.main {
                return Err(Error::SnapshotUnreadable(format!(
                    "Secret {SECRET_NAME} changed while it was read"
                )));
            }
            read = again;
        }
        let mut state = self.state.lock().await;
        let recovered = match read.loaded {
            None => Recovered::FirstStart,
            Some(Ok(snapshot)) => {
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
                Recovered::Snapshot(revision)
            }
            Some(Err(e)) => {
                // The revision continues above the stored one (its
                // annotation, else the clock in seconds, which is above any
                // counter started from it earlier), so the webhook, which
                // ignores lower revisions, takes the next write.
                let now = u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp())
                    .unwrap_or_default();
                let floor = read.annotated.unwrap_or_default().max(now);
                state.written = Some(PolicySnapshot {
                    revision: floor,
                    ..PolicySnapshot::empty()
                });
                Recovered::Discarded {
                    reason: e.to_string(),
                    floor,
                }
            }
        };
        writer.main = Some(read.main);
        writer.shards = read.shards;
        writer.recovered = true;
        writer.must_write = matches!(recovered, Recovered::Discarded { .. });
        Ok(recovered)
    }

    /// Reads the main Secret and the shards its manifest names, and what
    /// is there of every other shard Secret. An API error on any of them is
    /// an error ([`SnapshotError::is_transient`] included); content that
    /// does not load is in [`StoredRead::loaded`].
    async fn read_stored(&self) -> Result<StoredRead> {
        let (main, secret) = self.secrets.read(SECRET_NAME).await?;
        let mut shards = BTreeMap::new();
        let (loaded, annotated) = match &secret {
            None => (None, None),
            Some(secret) => {
                let annotated = revision_annotation(secret);
                let empty = BTreeMap::new();
                let data = secret.data.as_ref().unwrap_or(&empty);
                let seen = std::sync::Mutex::new(BTreeMap::new());
                let loaded = stored::load(
                    SECRET_NAME,
                    |key| data.get(key).map(|b| b.0.as_slice()),
                    |name| self.read_shard(name, &seen),
                )
                .await;
                shards = seen.into_inner().unwrap_or_default();
                match loaded {
                    Err(e) if e.is_transient() => {
                        return Err(Error::SnapshotUnreadable(e.to_string()));
                    }
                    loaded => (Some(loaded), annotated),
                }
            }
        };
        for name in stored::all_shards(SECRET_NAME) {
            if let std::collections::btree_map::Entry::Vacant(entry) = shards.entry(name) {
                let (seen, _) = self.secrets.read(entry.key()).await?;
                entry.insert(seen);
            }
        }
        Ok(StoredRead {
            main,
            shards,
            loaded,
            annotated,
        })
    }

    /// A shard Secret's chunk, `None` when it is missing; records what was
    /// seen of it.
    async fn read_shard(
        &self,
        name: String,
        seen: &std::sync::Mutex<BTreeMap<String, Seen>>,
    ) -> Result<Option<Vec<u8>>, String> {
        let (now, secret) = self.secrets.read(&name).await.map_err(|e| e.to_string())?;
        if let Ok(mut seen) = seen.lock() {
            seen.insert(name, now);
        }
        Ok(secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove(CHUNK_KEY))
            .map(|b| b.0))
    }

    /// Makes the writer ready for a write: the stored snapshot recovered
    /// (a first write before [`Publisher::recover`] waits for it), and after
    /// a refused write what is stored now read again, its revision taken as
    /// a floor.
    async fn ready_to_write(&self, writer: &mut Writer) -> Result<()> {
        if !writer.recovered {
            let recovered = self.recover_locked(writer).await?;
            if let Recovered::Discarded { reason, .. } = recovered {
                tracing::warn!(
                    reason,
                    "stored policy snapshot is corrupt; it will be replaced"
                );
            }
            return Ok(());
        }
        if writer.main.is_some() {
            return Ok(());
        }
        let (main, secret) = self.secrets.read(SECRET_NAME).await?;
        let mut shards = BTreeMap::new();
        for name in stored::all_shards(SECRET_NAME) {
            let (seen, _) = self.secrets.read(&name).await?;
            shards.insert(name, seen);
        }
        let stored_revision = secret.as_ref().and_then(revision_annotation);
        if let Some(theirs) = stored_revision {
            let mut state = self.state.lock().await;
            let written = state.written.get_or_insert_with(PolicySnapshot::empty);
            written.revision = written.revision.max(theirs);
        }
        writer.main = Some(main);
        writer.shards = shards;
        writer.must_write = true;
        Ok(())
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

    /// Shows `visit` the spec of each accepted ClusterImagePolicy (not the
    /// namespaces' ImagePolicies), under the publisher's lock: keep it short.
    pub async fn visit_cluster_policies(&self, mut visit: impl FnMut(&ClusterImagePolicySpec)) {
        let state = self.state.lock().await;
        for held in state.policies.values() {
            if held.policy.namespace.is_empty() {
                visit(&held.policy.spec);
            }
        }
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
            let mut writer = self.writer.lock().await;
            // Changes queued meanwhile go out with this one.
            writer.pace.wait().await;
            // Empty when the write before this one carried the change.
            let batch = std::mem::take(&mut *self.queue.lock().await);
            if !batch.is_empty() {
                match self.ready_to_write(&mut writer).await {
                    Ok(()) => {
                        // Paced by what the write costs, not the reads before.
                        let started = tokio::time::Instant::now();
                        self.write_batch(&mut writer, batch).await;
                        writer.pace.wrote(started);
                    }
                    // Nothing is written before the stored snapshot is
                    // known: every caller retries.
                    Err(e) => {
                        for queued in batch {
                            let _ = queued.reply.send(Err(duplicate(&e)));
                        }
                    }
                }
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
    async fn write_batch(&self, writer: &mut Writer, batch: Vec<Queued>) {
        let mut parts = vec![batch];
        while let Some(mut part) = parts.pop() {
            if part.len() == 1
                && let Some(queued) = part.pop()
            {
                self.write_one(writer, queued).await;
                continue;
            }
            if let Some(mut refused) = self.try_batch(writer, part).await {
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
    async fn try_batch(&self, writer: &mut Writer, batch: Vec<Queued>) -> Option<Vec<Queued>> {
        let mut next = self.state.lock().await.clone();
        let mut marks: Vec<Option<DefaultMark>> = Vec::with_capacity(batch.len());
        let mut applied = Vec::with_capacity(batch.len());
        for queued in batch {
            match queued.change.apply(&mut next, &self.budget) {
                Ok(mark) => {
                    marks.push(mark);
                    applied.push(queued);
                }
                // Refused on its own: the others go out without it.
                Err(e) => {
                    let _ = queued.reply.send(Err(e));
                }
            }
        }
        let batch = applied;
        if batch.is_empty() {
            return None;
        }
        match self.flush(writer, &mut next).await {
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
    async fn write_one(&self, writer: &mut Writer, queued: Queued) {
        let mut next = self.state.lock().await.clone();
        let mark = match queued.change.apply(&mut next, &self.budget) {
            Ok(mark) => mark,
            Err(e) => {
                let _ = queued.reply.send(Err(e));
                return;
            }
        };
        let result = self.flush(writer, &mut next).await;
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
    async fn flush(&self, writer: &mut Writer, state: &mut State) -> Result<u64> {
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
            && !writer.must_write
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
        let what = format!("writing policy snapshot revision {} to", candidate.revision);
        let refused = |writer: &mut Writer, e: Error| {
            if matches!(e, Error::WriteConflict(_)) {
                // Another controller wrote: read everything again first.
                writer.main = None;
            }
            e
        };
        for (name, chunk) in &encoded.shards {
            let seen = writer.shards.get(name).cloned().unwrap_or(Seen::Absent);
            let data = [(CHUNK_KEY.to_owned(), chunk.clone())].into();
            match self
                .secrets
                .write(name, &seen, data, annotations(candidate.revision), &what)
                .await
            {
                Ok(now) => writer.shards.insert(name.clone(), now),
                Err(e) => return Err(refused(writer, e)),
            };
        }
        let seen = writer.main.clone().unwrap_or(Seen::Absent);
        match self
            .secrets
            .write(
                SECRET_NAME,
                &seen,
                encoded.main.clone(),
                annotations(candidate.revision),
                &what,
            )
            .await
        {
            Ok(now) => writer.main = Some(now),
            Err(e) => return Err(refused(writer, e)),
        }
        writer.must_write = false;
        let used: BTreeSet<&str> = encoded.shards.iter().map(|(n, _)| n.as_str()).collect();
        let stale: Vec<(String, Seen)> = writer
            .shards
            .iter()
            .filter(|(n, seen)| !used.contains(n.as_str()) && **seen != Seen::Absent)
            .map(|(n, seen)| (n.clone(), seen.clone()))
            .collect();
        for (name, seen) in stale {
            match self
                .secrets
                .delete(&name, &seen, "deleting stale policy snapshot shard")
                .await
            {
                Ok(()) => {
                    writer.shards.insert(name, Seen::Absent);
                }
                Err(e) => {
                    // Left for the next write: a stale shard is never read,
                    // the manifest does not name it. One changed since it
                    // was seen was written by another controller: read
                    // everything again before the next write.
                    tracing::warn!(secret = name, error = %e, "stale policy snapshot shard not deleted");
                    if matches!(e, Error::WriteConflict(_)) {
                        writer.main = None;
                    }
                }
            }
        }
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

/// The annotations of a snapshot Secret written for `revision`: its
/// revision, readable without decoding the content.
fn annotations(revision: u64) -> BTreeMap<String, String> {
    [(REVISION_ANNOTATION.to_owned(), revision.to_string())].into()
}

/// The annotation every snapshot Secret carries with its revision.
pub const REVISION_ANNOTATION: &str = "policy.sigil.dev/snapshot-revision";

/// The revision a snapshot Secret's annotation names.
fn revision_annotation(secret: &Secret) -> Option<u64> {
    secret
        .metadata
        .annotations
        .as_ref()?
        .get(REVISION_ANNOTATION)?
        .parse()
        .ok()
}

/// The current time in RFC 3339.
pub fn now_rfc3339() -> String {
    format_rfc3339(time::OffsetDateTime::now_utc())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use http::{Method, StatusCode};
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

    /// Secrets written (created or applied) or deleted, in order, after
    /// request `from`.
    fn writes(api: &FakeApi, from: usize) -> Vec<(Method, String)> {
        api.requests()
            .into_iter()
            .skip(from)
            .filter(|r| matches!(r.method, Method::PATCH | Method::DELETE | Method::POST))
            .filter(|r| r.path.contains("/secrets"))
            .map(|r| {
                let name = match r.body["metadata"]["name"].as_str() {
                    Some(name) if r.method == Method::POST => name,
                    _ => r.path.rsplit('/').next().unwrap(),
                };
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
            if name.starts_with(&format!("{SECRET_NAME}-{other}"))
                && matches!(*method, Method::PATCH | Method::POST)
            {
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
        assert_eq!(
            restarted.publisher.recover().await.unwrap(),
            Recovered::Snapshot(written)
        );
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
        assert_eq!(
            ctx.publisher.recover().await.unwrap(),
            Recovered::Snapshot(41)
        );
    }

    #[tokio::test]
    async fn a_shard_get_that_fails_once_during_recovery_is_retried_not_taken_for_a_corrupt_snapshot()
     {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client.clone(), true);
        let glob = || serde_json::json!([{"glob": "**"}]);
        ctx.publisher
            .accept_trust_root(padded_root("big", 2400, 7))
            .await
            .unwrap();
        ctx.publisher
            .accept_policy(key_policy("kept", glob()))
            .await
            .unwrap();
        let before = stored_snapshot(&api).unwrap();
        let shard = manifest(&api).chunks[1].secret.clone();

        // The next leader starts; the API server fails one shard GET.
        let (next, _rx2, _leading2) = context(client, true);
        api.fail_next_get(&secret_path(&shard), StatusCode::SERVICE_UNAVAILABLE);
        let err = next.publisher.recover().await.unwrap_err();
        assert!(matches!(err, Error::SnapshotUnreadable(_)), "{err}");
        assert!(next.publisher.policy("kept").await.is_none());
        // While the snapshot is not read, nothing is published.
        let from = api.requests().len();
        api.fail_next_get(&secret_path(&shard), StatusCode::SERVICE_UNAVAILABLE);
        let refused = next
            .publisher
            .accept_policy(key_policy("early", glob()))
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::SnapshotUnreadable(_)), "{refused}");
        assert!(writes(&api, from).is_empty(), "{:?}", writes(&api, from));
        assert_eq!(stored_snapshot(&api).unwrap(), before);

        // Read again, it recovers whole and continues from it.
        assert_eq!(
            next.publisher.recover().await.unwrap(),
            Recovered::Snapshot(before.revision)
        );
        next.publisher
            .accept_policy(key_policy("added", glob()))
            .await
            .unwrap();
        let after = stored_snapshot(&api).unwrap();
        assert_eq!(after.revision, before.revision + 1);
        let names: BTreeSet<&str> = after.policies.iter().map(|p| p.name.as_str()).collect();
        // The change refused while recovering is not held: its reconcile
        // is retried.
        assert_eq!(names, ["added", "kept"].into());
        assert!(after.trust_roots.iter().any(|t| t.name == "big"));
    }

    #[tokio::test]
    async fn a_corrupt_snapshot_read_twice_alike_is_discarded_and_the_revision_continues_above_it()
    {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client.clone(), true);
        ctx.publisher
            .accept_trust_root(padded_root("big", 2400, 7))
            .await
            .unwrap();
        let shard = manifest(&api).chunks[1].secret.clone();
        // A shard that is not the one the manifest names.
        let mut tampered = api.get(&secret_path(&shard)).unwrap();
        tampered["data"][CHUNK_KEY] = "AAAA".into();
        api.put(&secret_path(&shard), tampered);
        let mut main = api.get(&secret_path(SECRET_NAME)).unwrap();
        let far =
            u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp()).unwrap() + 1_000_000;
        main["metadata"]["annotations"][REVISION_ANNOTATION] = far.to_string().into();
        api.put(&secret_path(SECRET_NAME), main);

        let (next, _rx2, _leading2) = context(client, true);
        let recovered = next.publisher.recover().await.unwrap();

        let Recovered::Discarded { reason, floor } = recovered else {
            panic!("{recovered:?}");
        };
        assert!(reason.contains(&shard), "{reason}");
        assert_eq!(floor, far, "above the revision its annotation names");
        next.publisher
            .accept_policy(key_policy("p", serde_json::json!([{"glob": "**"}])))
            .await
            .unwrap();
        assert_eq!(stored_snapshot(&api).unwrap().revision, far + 1);
    }

    #[tokio::test]
    async fn two_controllers_writing_in_turn_leave_the_newer_snapshot_when_the_stale_one_writes_last()
     {
        let (client, api) = FakeApi::start();
        let glob = || serde_json::json!([{"glob": "**"}]);
        // The controller before a rolling update: it recovered and wrote.
        let (old, _rx, old_leading) = context(client.clone(), true);
        old.publisher
            .accept_policy(key_policy("strict", glob()))
            .await
            .unwrap();
        // The new one takes over, recovers that and writes on top of it.
        let (new, _rx2, _leading2) = context(client.clone(), true);
        new.publisher.recover().await.unwrap();
        new.publisher
            .accept_policy(key_policy("added", glob()))
            .await
            .unwrap();
        let newest = stored_snapshot(&api).unwrap();

        // The old one, which has not seen that write and still believes it
        // leads (a paused process), writes last: the same next revision.
        let err = old.publisher.remove_policy("strict").await.unwrap_err();

        assert!(matches!(err, Error::WriteConflict(_)), "{err}");
        assert!(
            err.to_string().contains("another controller wrote it"),
            "{err}"
        );
        assert_eq!(stored_snapshot(&api).unwrap(), newest);
        // Once its Lease is gone it writes nothing at all, not even after
        // reading again.
        old_leading.send(false).unwrap();
        let from = api.requests().len();
        let err = old.publisher.remove_policy("strict").await.unwrap_err();
        assert!(matches!(err, Error::NotLeader(_)), "{err}");
        assert_eq!(stored_snapshot(&api).unwrap(), newest);
        assert!(writes(&api, from).is_empty(), "{:?}", writes(&api, from));
    }

    #[tokio::test]
    async fn a_leader_that_lost_the_lease_writes_nothing_even_where_the_secrets_are_as_it_last_saw_them()
     {
        let (client, api) = FakeApi::start();
        let glob = || serde_json::json!([{"glob": "**"}]);
        let (ctx, _rx, leading) = context(client, true);
        for name in ["strict", "other"] {
            ctx.publisher
                .accept_policy(key_policy(name, glob()))
                .await
                .unwrap();
        }
        let before = stored_snapshot(&api).unwrap();

        // The Lease is gone while a reconcile that began as leader is still
        // running (a slow KMS or mirror); nobody has written since, so only
        // the Lease check stands between it and the Secret.
        leading.send(false).unwrap();
        let from = api.requests().len();
        let err = ctx.publisher.remove_policy("strict").await.unwrap_err();

        assert!(matches!(err, Error::NotLeader(_)), "{err}");
        assert!(writes(&api, from).is_empty(), "{:?}", writes(&api, from));
        assert_eq!(stored_snapshot(&api).unwrap(), before);
    }

    #[tokio::test]
    async fn a_new_leader_whose_watch_has_listed_only_some_policies_still_publishes_every_stored_one()
     {
        let (client, api) = FakeApi::start();
        let glob = || serde_json::json!([{"glob": "**"}]);
        let (old, _rx, old_leading) = context(client.clone(), true);
        for name in ["a", "b", "c"] {
            old.publisher
                .accept_policy(key_policy(name, glob()))
                .await
                .unwrap();
        }
        let stored = stored_snapshot(&api).unwrap();
        old_leading.send(false).unwrap();

        // The next leader's cache holds only `a` so far, and its reconcile
        // writes before anything called `recover`: the write reads the
        // stored snapshot first.
        let (new, _rx2, _leading2) = context(client, true);
        let mut changed = key_policy("a", serde_json::json!([{"glob": "ghcr.io/**"}]));
        changed.generation = 2;
        new.publisher.accept_policy(changed).await.unwrap();

        let after = stored_snapshot(&api).unwrap();
        let names: Vec<&str> = after.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(after.revision, stored.revision + 1);
        assert_eq!(after.policies[0].generation, 2);
    }

    #[tokio::test]
    async fn a_built_in_root_update_that_does_not_fit_is_not_held_either() {
        let (client, _api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        let publisher = &ctx.publisher;
        // Fills the Secrets to some 70 KiB under the limit.
        publisher
            .accept_trust_root(padded_root("padding", 8_430, 7))
            .await
            .unwrap();
        let held = publisher.sigstore().await;
        let larger = SnapshotSigstore {
            source: crate::names::TUF.into(),
            trusted_root_json: padded_root("x", 200, 9).trusted_root_json,
            ..held.clone()
        };

        let err = publisher.accept_sigstore(larger).await.unwrap_err();

        assert!(matches!(err, Error::SnapshotTooLarge(_)), "{err}");
        assert_eq!(
            publisher.sigstore().await,
            held,
            "what is held is what was written"
        );
    }

    /// A namespaced policy of about `pad` bytes of image globs.
    fn tenant_policy(namespace: &str, name: &str, pad: usize) -> SnapshotPolicy {
        let globs: Vec<serde_json::Value> = (0..pad / 50)
            .map(
                |i| serde_json::json!({"glob": format!("registry.example.com/team/app-{i:04}/**")}),
            )
            .collect();
        SnapshotPolicy {
            namespace: namespace.into(),
            ..key_policy(name, globs.into())
        }
    }

    #[tokio::test]
    async fn image_policies_past_their_share_are_refused_alone_and_the_clusters_changes_still_fit()
    {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |args| {
            args.image_policy_snapshot_bytes_per_namespace = 4 * 1024;
            args.image_policy_snapshot_bytes = 8 * 1024;
        });
        let publisher = &ctx.publisher;
        publisher
            .accept_policy(tenant_policy("a", "one", 2000))
            .await
            .unwrap();
        // One namespace's second large policy passes its share; a batch
        // carrying it writes the others.
        let answers = accept_all(
            publisher,
            vec![
                tenant_policy("a", "two", 2000),
                tenant_policy("b", "one", 2000),
                key_policy("cluster", serde_json::json!([{"glob": "**"}])),
            ],
        )
        .await;
        let refused = answers[0].as_ref().unwrap_err();
        assert!(matches!(refused, Error::SnapshotBudget(_)), "{refused}");
        assert!(
            refused.to_string().contains("namespace a would take"),
            "{refused}"
        );
        assert!(answers[1].is_ok() && answers[2].is_ok(), "{answers:?}");
        // All namespaces together: the third one's policy does not fit.
        publisher
            .accept_policy(tenant_policy("c", "one", 2000))
            .await
            .unwrap();
        let err = publisher
            .accept_policy(tenant_policy("d", "one", 2000))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("all namespaces"), "{err}");
        assert!(!err.to_string().contains("namespace a"), "{err}");
        // The cluster's own changes are not held to the tenants' share.
        publisher
            .accept_trust_root(padded_root("big", 600, 3))
            .await
            .unwrap();
        let snapshot = stored_snapshot(&api).unwrap();
        let names: BTreeSet<String> = snapshot.policies.iter().map(SnapshotPolicy::key).collect();
        assert_eq!(
            names,
            ["a/one", "b/one", "c/one", "cluster"]
                .map(str::to_owned)
                .into()
        );
        assert!(snapshot.trust_roots.iter().any(|t| t.name == "big"));
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

    /// Lets the next write start at once, however long the last one took
    /// on a loaded machine.
    async fn unpace(publisher: &Publisher) {
        publisher.writer.lock().await.pace = Pace::default();
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
        unpace(publisher).await;

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

    // Paused time: however slow the machine, no write is slow enough to be
    // paced, so `b` takes `c` with it.
    #[tokio::test(start_paused = true)]
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
            let mut writer = publisher.writer.lock().await;
            writer.pace.next = Some(tokio::time::Instant::now() + Duration::from_millis(400));
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
