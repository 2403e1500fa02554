//! What the audit does on each trigger: a pod started, changed or went
//! away, a namespace's labels or an owner changed, a new policy snapshot
//! came into force, the re-verification interval passed. Each trigger only
//! marks what it can affect; [`Auditor::run`] then judges what is marked,
//! each distinct image once, through the [`Engine`].
//!
//! A new snapshot re-judges only the images some added, removed or changed
//! policy selects (by the policies' prints, which cover their trust roots),
//! so rotating a key out of one TrustRoot costs the images of the policies
//! that name it. Nothing here talks to the API server: the runtime feeds
//! the events in, and tests feed them by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sigil_judge::cache::CachedJudge;
use sigil_judge::judge::{ImageJudge, PullSecretSource};
use sigil_judge::policy_judge::InForce;
use sigil_policy::glob::ImageName;

use crate::engine::{Engine, EngineSettings, EvalStats};
use crate::finding::Finding;
use crate::scope::Scope;
use crate::workload::{OwnerIndex, running_pod};

/// Namespaces remembered at most (their labels decide coverage).
const MAX_NAMESPACES: usize = 100_000;

/// The audit's state between API events.
pub struct Auditor<J, S> {
    engine: Engine<J, S>,
    owners: OwnerIndex,
    scope: Scope,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Pods seen before their namespace, judged once it is known.
    waiting: BTreeMap<(String, String), Pod>,
    in_force: Option<InForce>,
    /// Pods seen since a relist started, until it is done.
    relisted: Option<BTreeSet<(String, String)>>,
}

impl<J: ImageJudge, S: PullSecretSource> Auditor<J, S> {
    /// An auditor judging through `cache` (the webhook's judge and cache
    /// type), reading pull secrets from `secrets`, over `scope`.
    pub fn new(
        cache: Arc<CachedJudge<J>>,
        secrets: Arc<S>,
        settings: EngineSettings,
        scope: Scope,
    ) -> Self {
        Self {
            engine: Engine::new(cache, secrets, settings),
            owners: OwnerIndex::default(),
            scope,
            namespaces: BTreeMap::new(),
            waiting: BTreeMap::new(),
            in_force: None,
            relisted: None,
        }
    }

    /// The engine (for counts).
    pub fn engine(&self) -> &Engine<J, S> {
        &self.engine
    }

    /// A namespace was created or relabelled: its pods are covered as the
    /// scope says now.
    pub fn namespace_applied(&mut self, name: &str, labels: BTreeMap<String, String>) {
        let coverage = self.scope.coverage(name, &labels);
        if self.namespaces.len() < MAX_NAMESPACES || self.namespaces.contains_key(name) {
            self.namespaces.insert(name.to_string(), labels);
        }
        self.engine.set_coverage(name, coverage);
        let keys: Vec<_> = self
            .waiting
            .range((name.to_string(), String::new())..)
            .take_while(|((ns, _), _)| ns == name)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(pod) = self.waiting.remove(&key) {
                self.pod_applied(&pod);
            }
        }
    }

    /// A namespace went away (its pods' deletions follow).
    pub fn namespace_deleted(&mut self, name: &str) {
        self.namespaces.remove(name);
        self.engine.set_coverage(name, None);
    }

    /// A pod was created or changed (a container started, an ephemeral
    /// container was added, labels changed).
    pub fn pod_applied(&mut self, pod: &Pod) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        if let Some(seen) = &mut self.relisted {
            seen.insert((namespace.clone(), name.clone()));
        }
        let Some(running) = running_pod(pod) else {
            self.engine.remove_pod(&namespace, &name);
            return;
        };
        let Some(labels) = self.namespaces.get(&namespace) else {
            self.waiting.insert((namespace, name), pod.clone());
            return;
        };
        let coverage = self.scope.coverage(&namespace, labels);
        self.engine.upsert_pod(running, coverage);
    }

    /// A pod was deleted: its results go.
    pub fn pod_deleted(&mut self, namespace: &str, name: &str) {
        self.waiting
            .remove(&(namespace.to_string(), name.to_string()));
        self.engine.remove_pod(namespace, name);
    }

    /// The pod watch restarted from a fresh list.
    pub fn relist_started(&mut self) {
        self.relisted = Some(BTreeSet::new());
    }

    /// The fresh list is complete: pods it did not name are gone.
    pub fn relist_done(&mut self) {
        if let Some(seen) = self.relisted.take() {
            self.waiting.retain(|k, _| seen.contains(k));
            self.engine.retain_pods(&seen);
        }
    }

    /// Marks `namespace`'s report as to be written again (a write failed).
    pub fn mark_dirty(&mut self, namespace: &str) {
        self.engine.touch(namespace);
    }

    /// A ReplicaSet or Job was created or changed: results of its pods name
    /// its owner.
    pub fn owner_applied(&mut self, meta: &ObjectMeta) {
        if let Some(uid) = &meta.uid {
            self.owners.set(uid, meta);
            self.engine
                .touch(meta.namespace.as_deref().unwrap_or_default());
        }
    }

    /// A ReplicaSet or Job went away.
    pub fn owner_deleted(&mut self, meta: &ObjectMeta) {
        if let Some(uid) = &meta.uid {
            self.owners.remove(uid);
            self.engine
                .touch(meta.namespace.as_deref().unwrap_or_default());
        }
    }

    /// A policy snapshot came into force: the images that an added,
    /// removed or changed policy selects are judged again; the others keep
    /// their verdicts. The first snapshot re-judges everything (what was
    /// judged before it was "not ready"). Returns the containers marked.
    pub fn snapshot_applied(&mut self, newer: InForce) -> usize {
        let marked = match &self.in_force {
            None => self.engine.invalidate_all(),
            Some(older) if older.revision == newer.revision => 0,
            Some(older) => {
                let changed = older.changed_policies(&newer);
                self.engine
                    .invalidate(|image| changed.iter().any(|p| p.matches_image(image)))
            }
        };
        self.in_force = Some(newer);
        marked
    }

    /// ImagePolicyExceptions were added, changed or removed, or one
    /// expired: every image is judged again (verdicts whose waivers still
    /// hold come from the cache).
    pub fn exceptions_changed(&mut self) -> usize {
        self.engine.invalidate_all()
    }

    /// The re-verification interval passed: every image is judged again
    /// (signatures are added and removed, certificates and roots expire).
    pub fn interval_elapsed(&mut self) -> usize {
        self.engine.invalidate_all()
    }

    /// Judges every container that waits for a judgement.
    pub async fn run(&mut self) -> EvalStats {
        let in_force = self.in_force.as_ref();
        let selecting = |image: &str| -> Vec<String> {
            let (Some(f), Ok(name)) = (in_force, ImageName::parse(image)) else {
                return Vec::new();
            };
            // Admission's policies: an error before any of them answered
            // is theirs, never an audit-mode policy's.
            f.policies
                .iter()
                .filter(|(_, (_, p))| p.mode.admits() && p.matches_image(&name))
                .map(|(n, _)| n.clone())
                .collect()
        };
        self.engine.evaluate(&selecting).await
    }

    /// The names of the policies in force (none before a snapshot).
    pub fn policy_names(&self) -> Vec<String> {
        self.in_force
            .as_ref()
            .map(|f| f.policies.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Namespaces whose results may have changed since the last call.
    pub fn take_dirty(&mut self) -> BTreeSet<String> {
        self.engine.take_dirty()
    }

    /// The results of `namespace` (all when `None`).
    pub fn findings(&self, namespace: Option<&str>) -> Vec<Finding> {
        self.engine.findings(&self.owners, namespace)
    }
}
