//! The audit's state and its one judging path: the pods that run, what each
//! of their containers was judged, and the verdicts held per distinct
//! (image at its running digest, what the policies read of the pod,
//! credentials). Cost grows with those distinct keys, not with pods: 10,000
//! pods over 200 digests ask the judge 200 times.
//!
//! Every verdict comes from [`CachedJudge::verdict`] exactly as `/validate`
//! asks for it (same judge, same cache keys, same single flight, same
//! per-registry bound), after the same `matches` / `no_match` split, so a
//! result here and an admission answer cannot differ for the same inputs.
//! Images `mode: audit` policies select are also judged by those through
//! [`CachedJudge::audit_mode_verdict`], as the webhook judges them after
//! answering.
//!
//! Verdicts stay held across snapshots until [`Engine::invalidate`] drops
//! those a change can affect (the caller decides which, from the policies'
//! globs and prints), or [`Engine::invalidate_all`] drops everything (the
//! periodic re-verification). Nothing here talks to the API server.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use sigil_judge::cache::{CachedJudge, SecretsOnce};
use sigil_judge::judge::{
    ImageJudge, ObjectInfo, PinnedImage, PullSecretSource, PullSecrets, Verdict,
};
use sigil_judge::secrets::ObjectSecrets;
use sigil_policy::glob::ImageName;
use tokio::time::Instant;

use crate::finding::{self, Finding, Judgement, Site};
use crate::scope::Coverage;
use crate::workload::{OwnerIndex, RunningContainer, RunningPod};

/// How the engine judges.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Time one verification may take (the admission deadline's role).
    pub deadline: Duration,
    /// Distinct images judged at once (each registry host is further
    /// bounded by the cache's per-host limit).
    pub concurrency: usize,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(30),
            concurrency: 32,
        }
    }
}

/// What one [`Engine::evaluate`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvalStats {
    /// Containers that needed a judgement.
    pub containers: usize,
    /// Distinct keys among them that no held verdict answered: the judge
    /// (through its cache) was asked this many times.
    pub judged: usize,
    /// Containers answered from a held verdict.
    pub reused: usize,
}

/// The identity of a held verdict: what `/validate`'s cache keys on,
/// besides the snapshot's versions (held verdicts are dropped instead).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct HeldKey {
    reference: String,
    object: String,
    credentials: String,
}

struct PodState {
    pod: RunningPod,
    coverage: Coverage,
    /// Per container of `pod.containers`, once judged.
    judged: Vec<Option<Arc<Judged>>>,
}

#[derive(Debug)]
struct Judged {
    key: Option<HeldKey>,
    judgement: Judgement,
    /// How the `mode: audit` policies judged it; `None` when none selects it.
    audit_mode: Option<Result<Arc<Verdict>, String>>,
}

/// The pods the audit covers and what they were judged.
pub struct Engine<J, S> {
    cache: Arc<CachedJudge<J>>,
    secrets: Arc<S>,
    settings: EngineSettings,
    pods: BTreeMap<(String, String), PodState>,
    held: HashMap<HeldKey, Arc<Judged>>,
    dirty: BTreeSet<String>,
}

/// Credentials already read, handed to the cache.
struct Known(PullSecrets);

impl SecretsOnce for Known {
    async fn get(&self, _deadline: Instant) -> Result<PullSecrets, String> {
        Ok(self.0.clone())
    }
}

fn same_workload_inputs(a: &RunningPod, b: &RunningPod) -> bool {
    a.uid == b.uid
        && a.containers == b.containers
        && a.labels == b.labels
        && a.pull_secret_names == b.pull_secret_names
        && a.service_account == b.service_account
}

fn object_info(pod: &RunningPod) -> ObjectInfo {
    ObjectInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        sub_resource: String::new(),
        kind: "Pod".into(),
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        labels: pod.labels.clone(),
        pull_secret_names: pod.pull_secret_names.clone(),
        service_account: pod.service_account.clone(),
        object: pod.object.clone(),
    }
}

/// One container waiting for a verdict, with all its judge call needs.
struct Pending {
    pod: (String, String),
    index: usize,
    key: HeldKey,
    selecting: Vec<String>,
    pinned: PinnedImage,
    object: Arc<ObjectInfo>,
    secrets: PullSecrets,
    /// `noMatchPolicy`'s verdict when no admission policy selects the image
    /// (only `mode: audit` ones do).
    no_match: Option<Arc<Verdict>>,
    /// Some `mode: audit` policy selects the image.
    audit_mode: bool,
}

impl<J: ImageJudge, S: PullSecretSource> Engine<J, S> {
    /// An engine judging through `cache` with credentials from `secrets`.
    pub fn new(cache: Arc<CachedJudge<J>>, secrets: Arc<S>, settings: EngineSettings) -> Self {
        Self {
            cache,
            secrets,
            settings,
            pods: BTreeMap::new(),
            held: HashMap::new(),
            dirty: BTreeSet::new(),
        }
    }

    /// Pods covered.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Distinct verdicts held.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Adds or updates a pod (`coverage` `None`: its namespace is not
    /// audited, so it is dropped). A pod whose containers, digests, labels
    /// and credentials are unchanged keeps its judgements.
    pub fn upsert_pod(&mut self, pod: RunningPod, coverage: Option<Coverage>) {
        let key = (pod.namespace.clone(), pod.name.clone());
        let Some(coverage) = coverage else {
            self.remove_pod(&key.0, &key.1);
            return;
        };
        if let Some(held) = self.pods.get_mut(&key)
            && same_workload_inputs(&held.pod, &pod)
        {
            if held.coverage != coverage || held.pod.owner != pod.owner {
                self.dirty.insert(key.0.clone());
            }
            held.coverage = coverage;
            held.pod = pod;
            return;
        }
        self.dirty.insert(key.0.clone());
        let judged = vec![None; pod.containers.len()];
        self.pods.insert(
            key,
            PodState {
                pod,
                coverage,
                judged,
            },
        );
    }

    /// Removes a pod and its results.
    pub fn remove_pod(&mut self, namespace: &str, name: &str) {
        if self
            .pods
            .remove(&(namespace.to_string(), name.to_string()))
            .is_some()
        {
            self.dirty.insert(namespace.to_string());
        }
    }

    /// Drops every pod not in `keep` (a relist finished: the others were
    /// deleted while the watch was down).
    pub fn retain_pods(&mut self, keep: &BTreeSet<(String, String)>) {
        let gone: Vec<(String, String)> = self
            .pods
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for (ns, name) in gone {
            self.remove_pod(&ns, &name);
        }
    }

    /// Changes how a namespace is covered; `None` drops its pods.
    pub fn set_coverage(&mut self, namespace: &str, coverage: Option<Coverage>) {
        let keys: Vec<(String, String)> = self
            .pods
            .range((namespace.to_string(), String::new())..)
            .take_while(|((ns, _), _)| ns == namespace)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            match coverage {
                None => {
                    self.pods.remove(&key);
                    self.dirty.insert(key.0);
                }
                Some(c) => {
                    if let Some(p) = self.pods.get_mut(&key)
                        && p.coverage != c
                    {
                        p.coverage = c;
                        self.dirty.insert(key.0);
                    }
                }
            }
        }
    }

    /// Marks `namespace`'s results as possibly changed (an owner there was
    /// learned or forgotten, so its workloads are named differently).
    pub fn touch(&mut self, namespace: &str) {
        if !self.dirty.contains(namespace) {
            self.dirty.insert(namespace.to_string());
        }
    }

    /// Drops the judgements of every image `affected` says a change can
    /// judge differently; they are judged again by the next
    /// [`evaluate`](Self::evaluate). Returns how many containers that is.
    pub fn invalidate(&mut self, affected: impl Fn(&ImageName) -> bool) -> usize {
        let mut dropped = 0;
        self.held.clear();
        for ((ns, _), p) in &mut self.pods {
            for (c, judged) in p.pod.containers.iter().zip(p.judged.iter_mut()) {
                let Some(j) = judged else { continue };
                let hit = match &j.judgement {
                    Judgement::UnknownDigest(_) => false,
                    _ => ImageName::parse(&reference(c)).map_or(true, |n| affected(&n)),
                };
                if hit {
                    *judged = None;
                    dropped += 1;
                    self.dirty.insert(ns.clone());
                } else if let Some(key) = &j.key {
                    self.held.insert(key.clone(), j.clone());
                }
            }
        }
        dropped
    }

    /// Drops every judgement (periodic re-verification: signatures may have
    /// been removed or added, certificates and trust roots expire).
    pub fn invalidate_all(&mut self) -> usize {
        self.invalidate(|_| true)
    }

    /// Whether some container waits for a judgement.
    pub fn pending(&self) -> bool {
        self.pods
            .values()
            .any(|p| p.judged.iter().any(Option::is_none))
    }

    /// Judges every container that has no judgement, each distinct key once.
    /// `selecting` names the policies whose globs select an image, for
    /// errors that come before any policy answered.
    pub async fn evaluate(
        &mut self,
        selecting: &(dyn Fn(&str) -> Vec<String> + Sync),
    ) -> EvalStats {
        let judge = self.cache.judge();
        let signature_secrets = judge.signature_pull_secrets();
        let mut stats = EvalStats::default();
        let mut waiting: Vec<Pending> = Vec::new();
        let mut answered: Vec<((String, String), usize, Arc<Judged>)> = Vec::new();
        for (key, state) in &self.pods {
            if state.judged.iter().all(Option::is_some) {
                continue;
            }
            let object = Arc::new(object_info(&state.pod));
            let object_key = judge.object_key(&object);
            let mut credentials: Option<Result<PullSecrets, String>> = None;
            for (i, c) in state.pod.containers.iter().enumerate() {
                if state.judged.get(i).is_some_and(Option::is_some) {
                    continue;
                }
                stats.containers += 1;
                let mut answer = |judgement| {
                    answered.push((
                        key.clone(),
                        i,
                        Arc::new(Judged {
                            key: None,
                            judgement,
                            audit_mode: None,
                        }),
                    ));
                };
                let digest = match &c.digest {
                    Ok(d) => d.clone(),
                    Err(why) => {
                        answer(Judgement::UnknownDigest(why.clone()));
                        continue;
                    }
                };
                let admitted = judge.matches(&c.image, &object);
                let audit_mode = judge.audit_mode_matches(&c.image, &object);
                let no_match = (!admitted).then(|| Arc::new(judge.no_match(&c.image)));
                if let (Some(verdict), false) = (&no_match, audit_mode) {
                    answer(Judgement::NoMatch {
                        setting: no_match_setting(verdict),
                        verdict: verdict.clone(),
                    });
                    continue;
                }
                if credentials.is_none() {
                    let read = ObjectSecrets::new(
                        self.secrets.as_ref(),
                        &object,
                        signature_secrets.clone(),
                    );
                    credentials = Some(read.get(Instant::now() + self.settings.deadline).await);
                }
                let secrets = match credentials.clone() {
                    Some(Ok(s)) => s,
                    Some(Err(cause)) => {
                        let cause = format!("cannot read pull secrets: {cause}");
                        // Admission reads no credentials for an image only
                        // audit-mode policies select: it gets noMatchPolicy.
                        let judgement = match &no_match {
                            Some(verdict) => Judgement::NoMatch {
                                setting: no_match_setting(verdict),
                                verdict: verdict.clone(),
                            },
                            None => Judgement::Judged {
                                selecting: selecting(&c.image),
                                verdict: Err(cause.clone()),
                            },
                        };
                        answered.push((
                            key.clone(),
                            i,
                            Arc::new(Judged {
                                key: None,
                                judgement,
                                audit_mode: audit_mode.then_some(Err(cause)),
                            }),
                        ));
                        continue;
                    }
                    None => PullSecrets::anonymous(),
                };
                let pinned = PinnedImage {
                    image: strip_digest(&c.image).to_string(),
                    digest,
                };
                let held_key = HeldKey {
                    reference: pinned.reference(),
                    object: object_key
                        .clone()
                        .unwrap_or_else(|| format!("pod:{}", state.pod.uid)),
                    credentials: secrets.id.clone(),
                };
                if let Some(j) = self.held.get(&held_key) {
                    stats.reused += 1;
                    answered.push((key.clone(), i, j.clone()));
                    continue;
                }
                waiting.push(Pending {
                    pod: key.clone(),
                    index: i,
                    key: held_key,
                    selecting: selecting(&c.image),
                    pinned,
                    object: object.clone(),
                    secrets,
                    no_match,
                    audit_mode,
                });
            }
        }
        // One judge call per distinct key; the containers sharing it wait.
        let mut seen = std::collections::HashSet::new();
        let jobs: Vec<&Pending> = waiting.iter().filter(|w| seen.insert(&w.key)).collect();
        stats.reused += waiting.len() - jobs.len();
        stats.judged = jobs.len();
        let deadline = self.settings.deadline;
        let cache = &self.cache;
        let results: Vec<(HeldKey, Arc<Judged>)> = futures_util::stream::iter(jobs)
            .map(|w| async move {
                let secrets = Known(w.secrets.clone());
                let judgement = match &w.no_match {
                    Some(verdict) => Judgement::NoMatch {
                        setting: no_match_setting(verdict),
                        verdict: verdict.clone(),
                    },
                    None => Judgement::Judged {
                        selecting: w.selecting.clone(),
                        verdict: cache
                            .verdict(&w.pinned, &w.object, &secrets, Instant::now() + deadline)
                            .await
                            .map_err(|e| e.to_string()),
                    },
                };
                let audit_mode = if w.audit_mode {
                    Some(
                        cache
                            .audit_mode_verdict(
                                &w.pinned,
                                &w.object,
                                &secrets,
                                Instant::now() + deadline,
                            )
                            .await
                            .map_err(|e| e.to_string()),
                    )
                } else {
                    None
                };
                let judged = Arc::new(Judged {
                    key: Some(w.key.clone()),
                    judgement,
                    audit_mode,
                });
                (w.key.clone(), judged)
            })
            .buffer_unordered(self.settings.concurrency.max(1))
            .collect()
            .await;
        self.held.extend(results);
        for w in &waiting {
            if let Some(j) = self.held.get(&w.key) {
                answered.push((w.pod.clone(), w.index, j.clone()));
            }
        }
        for (pod, i, judged) in answered {
            if let Some(state) = self.pods.get_mut(&pod)
                && let Some(slot) = state.judged.get_mut(i)
            {
                *slot = Some(judged);
                self.dirty.insert(pod.0);
            }
        }
        // Verdicts no running container uses any more are forgotten.
        let live: std::collections::HashSet<HeldKey> = self
            .pods
            .values()
            .flat_map(|p| p.judged.iter().flatten())
            .filter_map(|j| j.key.clone())
            .collect();
        self.held.retain(|k, _| live.contains(k));
        stats
    }

    /// Namespaces whose results may have changed since the last call.
    pub fn take_dirty(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.dirty)
    }

    /// Every namespace with covered pods.
    pub fn namespaces(&self) -> BTreeSet<String> {
        self.pods.keys().map(|(ns, _)| ns.clone()).collect()
    }

    /// The results of `namespace` (every namespace when `None`), merged
    /// per workload, container, digest and policy, in report order.
    pub fn findings(&self, owners: &OwnerIndex, namespace: Option<&str>) -> Vec<Finding> {
        let pods: Box<dyn Iterator<Item = &PodState>> = match namespace {
            Some(ns) => Box::new(
                self.pods
                    .range((ns.to_string(), String::new())..)
                    .take_while(move |((n, _), _)| n == ns)
                    .map(|(_, p)| p),
            ),
            None => Box::new(self.pods.values()),
        };
        let mut out = Vec::new();
        for p in pods {
            let workload = owners.workload(&p.pod);
            for (c, judged) in p.pod.containers.iter().zip(&p.judged) {
                let Some(j) = judged else { continue };
                let site = Site {
                    namespace: &p.pod.namespace,
                    workload: &workload,
                    list: c.list,
                    container: &c.name,
                    image: &c.image,
                    digest: c.digest.as_deref().unwrap_or(""),
                    coverage: p.coverage,
                };
                out.extend(finding::findings(&site, &j.judgement));
                out.extend(finding::audit_mode_findings(&site, j.audit_mode.as_ref()));
            }
        }
        finding::aggregate(out)
    }
}

/// `repo[:tag]` of an image written `repo[:tag][@digest]`: the running
/// digest replaces whatever digest the spec named.
fn strip_digest(image: &str) -> &str {
    image.rsplit_once('@').map_or(image, |(repo, _)| repo)
}

/// The reference the judge verifies for a container.
fn reference(c: &RunningContainer) -> String {
    match &c.digest {
        Ok(d) => format!("{}@{d}", strip_digest(&c.image)),
        Err(_) => c.image.clone(),
    }
}

/// `noMatchPolicy`'s value, as its verdict shows it.
fn no_match_setting(v: &sigil_judge::judge::Verdict) -> &'static str {
    if !v.allowed {
        "deny"
    } else if !v.warnings.is_empty() {
        "warn"
    } else {
        "allow"
    }
}
