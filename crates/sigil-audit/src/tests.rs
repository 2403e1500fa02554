//! The audit against a scripted judge: every trigger, and pods and
//! policies added, changed and deleted, with the judge's calls counted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use sigil_judge::cache::{CacheConfig, CachedJudge, NoObserver};
use sigil_judge::judge::{
    AuthorityVerdict, ImageJudge, ObjectInfo, PinnedImage, PolicyOutcome, PolicyVerdict,
    PullSecrets, Verdict, Versions,
};
use sigil_judge::policy_judge::InForce;
use sigil_judge::secrets::NoPullSecrets;
use sigil_policy::{CompiledPolicy, Glob, ImageName, Mode, Platforms};
use tokio::time::Instant;

use crate::auditor::Auditor;
use crate::engine::EngineSettings;
use crate::finding::{NO_MATCH_POLICY, Outcome, RUNNING_DIGEST_POLICY};
use crate::scope::{INCLUDE_LABEL, Scope};

/// A judge whose policies and answers the test sets: a policy selects the
/// images its glob matches, and its outcome for an image is scripted by
/// repository (pass when unscripted).
#[derive(Default)]
pub(crate) struct Scripted {
    policies: Mutex<Vec<(String, String)>>,
    /// Names of the policies in `mode: audit`.
    audit_mode: Mutex<Vec<String>>,
    outcomes: Mutex<HashMap<String, PolicyOutcome>>,
    revision: AtomicUsize,
    calls: AtomicUsize,
}

impl Scripted {
    fn selecting(&self, image: &str) -> Vec<String> {
        let Ok(name) = ImageName::parse(image) else {
            return Vec::new();
        };
        self.policies
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, glob)| Glob::compile(glob).unwrap().matches(&name))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// The policies of one mode that select `image`: `mode: audit` ones
    /// when `audit`, the others otherwise.
    fn selecting_in(&self, image: &str, audit: bool) -> Vec<String> {
        let audit_mode = self.audit_mode.lock().unwrap().clone();
        self.selecting(image)
            .into_iter()
            .filter(|p| audit_mode.contains(p) == audit)
            .collect()
    }

    pub(crate) fn set_audit_mode(&self, policy: &str) {
        self.audit_mode.lock().unwrap().push(policy.to_string());
    }

    /// The scripted results of the policies of one mode for `image`.
    fn results(&self, image: &PinnedImage, audit: bool) -> Vec<PolicyVerdict> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let repository = image
            .image
            .split(':')
            .next()
            .unwrap_or_default()
            .to_string();
        let outcome = self
            .outcomes
            .lock()
            .unwrap()
            .get(&repository)
            .copied()
            .unwrap_or(PolicyOutcome::Pass);
        let mode = if audit { Mode::Audit } else { Mode::Enforce };
        self.selecting_in(&image.image, audit)
            .into_iter()
            .map(|policy| PolicyVerdict {
                message: match (outcome, audit) {
                    (PolicyOutcome::Pass | PolicyOutcome::Warn, _) => String::new(),
                    (_, false) => {
                        format!("policy {policy} failed: authority k (key): no signature found")
                    }
                    (_, true) => format!(
                        "policy {policy} (mode: audit) failed: authority k (key): no signature found"
                    ),
                },
                policy,
                mode,
                outcome,
                authorities: vec![AuthorityVerdict {
                    name: "k".into(),
                    kind: "key",
                    passed: outcome == PolicyOutcome::Pass,
                }],
            })
            .collect()
    }

    pub(crate) fn set_outcome(&self, repository: &str, outcome: PolicyOutcome) {
        self.outcomes
            .lock()
            .unwrap()
            .insert(repository.to_string(), outcome);
    }

    /// The policies in force as the real judge publishes them; `prints`
    /// stand for everything a policy's verdicts depend on.
    pub(crate) fn in_force(&self, prints: &[(&str, &str)]) -> InForce {
        let policies = self
            .policies
            .lock()
            .unwrap()
            .iter()
            .map(|(name, glob)| {
                let print = prints
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or("p0", |(_, p)| p);
                let compiled = CompiledPolicy {
                    name: name.clone(),
                    namespace: None,
                    images: vec![Glob::compile(glob).unwrap()],
                    authorities: Vec::new(),
                    policy: None,
                    mode: Mode::Enforce,
                    matches: Vec::new(),
                    platforms: Platforms::Named,
                };
                (name.clone(), (print.to_string(), compiled))
            })
            .collect();
        InForce {
            revision: self.revision.fetch_add(1, Ordering::SeqCst) as u64 + 1,
            versions: self.versions(),
            policies,
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl ImageJudge for Scripted {
    async fn judge(
        &self,
        image: &PinnedImage,
        _object: &ObjectInfo,
        _secrets: &PullSecrets,
        _deadline: Instant,
    ) -> Verdict {
        let results = self.results(image, false);
        Verdict {
            allowed: !results
                .iter()
                .any(|r| matches!(r.outcome, PolicyOutcome::Fail | PolicyOutcome::Inconclusive)),
            reasons: results
                .iter()
                .filter(|r| !r.message.is_empty())
                .map(|r| r.message.clone())
                .collect(),
            policies: results.iter().map(|r| r.policy.clone()).collect(),
            results,
            ..Verdict::default()
        }
    }

    async fn resolve(
        &self,
        image: &str,
        _secrets: &PullSecrets,
        _deadline: Instant,
    ) -> Result<String, String> {
        Err(format!("the audit never resolves tags ({image})"))
    }

    async fn judge_audit_mode(
        &self,
        image: &PinnedImage,
        _object: &ObjectInfo,
        _secrets: &PullSecrets,
        _deadline: Instant,
    ) -> Verdict {
        let results = self.results(image, true);
        Verdict {
            allowed: true,
            policies: results.iter().map(|r| r.policy.clone()).collect(),
            results,
            ..Verdict::default()
        }
    }

    fn matches(&self, image: &str, _object: &ObjectInfo) -> bool {
        !self.selecting_in(image, false).is_empty()
    }

    fn audit_mode_matches(&self, image: &str, _object: &ObjectInfo) -> bool {
        !self.selecting_in(image, true).is_empty()
    }

    fn no_match(&self, _image: &str) -> Verdict {
        Verdict::allow(Vec::new())
    }

    fn versions(&self) -> Versions {
        Versions {
            policy_hash: format!("r{}", self.revision.load(Ordering::SeqCst)),
            trust_root_version: String::new(),
        }
    }

    fn ready(&self) -> bool {
        true
    }
}

pub(crate) fn digest(n: usize) -> String {
    format!("sha256:{n:064x}")
}

/// A running pod of deployment `app` with one container running `image`
/// at digest number `d`.
fn pod(namespace: &str, name: &str, image: &str, d: usize) -> Pod {
    let repository = image.split(':').next().unwrap_or_default();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "app-5d", "uid": "rs-app", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": image}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "image": image,
            "imageID": format!("{repository}@{}", digest(d)), "ready": true, "restartCount": 0}]}
    }))
    .unwrap()
}

pub(crate) fn included() -> BTreeMap<String, String> {
    BTreeMap::from([(INCLUDE_LABEL.to_string(), "true".to_string())])
}

pub(crate) struct Fixture {
    pub(crate) judge: Arc<Scripted>,
    pub(crate) auditor: Auditor<Scripted, NoPullSecrets>,
}

/// An auditor over `policies` that has seen nothing yet: no namespace,
/// no policy snapshot.
pub(crate) fn bare_fixture(policies: &[(&str, &str)]) -> Fixture {
    let judge = Arc::new(Scripted::default());
    *judge.policies.lock().unwrap() = policies
        .iter()
        .map(|(n, g)| ((*n).to_string(), (*g).to_string()))
        .collect();
    let cache = Arc::new(CachedJudge::new(
        judge.clone(),
        &CacheConfig::default(),
        Arc::new(NoObserver),
    ));
    let auditor = Auditor::new(
        cache,
        Arc::new(NoPullSecrets),
        EngineSettings::default(),
        Scope::default(),
    );
    Fixture { judge, auditor }
}

fn fixture(policies: &[(&str, &str)]) -> Fixture {
    let mut f = bare_fixture(policies);
    f.auditor.namespace_applied("shop", included());
    let first = f.judge.in_force(&[]);
    f.auditor.snapshot_applied(first);
    f
}

fn outcomes(f: &Fixture) -> Vec<(String, String, Outcome)> {
    f.auditor
        .findings(None)
        .into_iter()
        .map(|x| (x.image, x.policy, x.outcome))
        .collect()
}

#[tokio::test]
async fn pods_sharing_a_digest_cost_one_verification_and_one_result_per_workload() {
    let mut f = fixture(&[("signed", "r.example/**")]);
    for i in 0..50 {
        f.auditor
            .pod_applied(&pod("shop", &format!("app-{i}"), "r.example/app:1", 1));
    }
    let stats = f.auditor.run().await;
    assert_eq!(f.judge.calls(), 1, "{stats:?}");
    assert_eq!((stats.containers, stats.judged), (50, 1));
    let found = f.auditor.findings(Some("shop"));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].pods, 50);
    assert_eq!(found[0].outcome, Outcome::Pass);
    assert_eq!(
        found[0].workload.kind, "ReplicaSet",
        "its owner is not known yet"
    );
}

#[tokio::test]
async fn audit_mode_policies_are_reported_as_such_and_never_as_denials() {
    let mut f = fixture(&[("signed", "r.example/**"), ("preview", "r.example/**")]);
    f.judge.set_audit_mode("preview");
    f.judge.set_outcome("r.example/evil", PolicyOutcome::Fail);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    f.auditor.run().await;
    let found = f.auditor.findings(None);
    let seen: Vec<(&str, &str, Outcome)> = found
        .iter()
        .map(|x| (x.policy.as_str(), x.mode.as_str(), x.outcome))
        .collect();
    assert_eq!(
        seen,
        [
            ("preview", "audit", Outcome::Pass),
            ("signed", "enforce", Outcome::Pass)
        ]
    );
    f.auditor
        .pod_applied(&pod("shop", "b", "r.example/evil:1", 2));
    f.auditor.run().await;
    let preview: Vec<_> = f
        .auditor
        .findings(None)
        .into_iter()
        .filter(|x| x.image == "r.example/evil:1" && x.policy == "preview")
        .collect();
    assert_eq!(preview.len(), 1);
    assert_eq!(preview[0].outcome, Outcome::Fail);
    assert!(
        preview[0]
            .message
            .starts_with("policy preview (mode: audit) failed: "),
        "{}",
        preview[0].message
    );
    assert!(!preview[0].denies(), "an audit-mode failure denies nothing");
    assert_eq!(f.judge.calls(), 4, "each image judged once per mode");
}

#[tokio::test]
async fn an_image_only_audit_mode_policies_select_has_both_no_match_and_audit_results() {
    let mut f = fixture(&[("preview", "r.example/**")]);
    f.judge.set_audit_mode("preview");
    f.judge.set_outcome("r.example/app", PolicyOutcome::Fail);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    f.auditor.run().await;
    let found = f.auditor.findings(None);
    let seen: Vec<(&str, &str, Outcome)> = found
        .iter()
        .map(|x| (x.policy.as_str(), x.mode.as_str(), x.outcome))
        .collect();
    assert_eq!(
        seen,
        [
            (NO_MATCH_POLICY, "allow", Outcome::Skip),
            ("preview", "audit", Outcome::Fail)
        ]
    );
    assert!(!crate::print::would_deny(&found));
    assert_eq!(f.judge.calls(), 1, "only the audit-mode judgement ran");
}

#[tokio::test]
async fn an_audit_mode_failure_is_counted_under_its_mode_apart_from_enforced_ones() {
    use crate::metrics::AuditMetrics;
    use crate::report::{Flavor, Writer};
    use crate::runtime::{RuntimeSettings, pass};

    let mut f = fixture(&[("signed", "r.example/**"), ("preview", "r.example/**")]);
    f.judge.set_audit_mode("preview");
    f.judge.set_outcome("r.example/evil", PolicyOutcome::Fail);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/evil:1", 1));
    let mut writer = Writer::new(
        writes(Arc::new(Mutex::new(Vec::new())), ""),
        Flavor::OpenReports,
    );
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = AuditMetrics::new(&mut registry);
    pass(
        &mut f.auditor,
        &mut writer,
        &metrics,
        &RuntimeSettings::default(),
    )
    .await
    .unwrap();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(
            r#"sigil_audit_results{namespace="shop",policy="signed",mode="enforce",outcome="fail"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"sigil_audit_results{namespace="shop",policy="preview",mode="audit",outcome="fail"} 1"#
        ),
        "{text}"
    );
}

/// Pull secrets that can never be read (RBAC refuses them).
struct Refusing;

impl sigil_judge::judge::PullSecretSource for Refusing {
    async fn pull_secrets(
        &self,
        _namespace: &str,
        _secret_names: &[String],
        _service_account: &str,
        _deadline: Instant,
    ) -> Result<PullSecrets, String> {
        Err("secrets are forbidden".into())
    }
}

#[tokio::test]
async fn unreadable_pull_secrets_are_an_audit_mode_error_never_a_denial_of_an_image_only_it_selects()
 {
    let judge = Arc::new(Scripted::default());
    *judge.policies.lock().unwrap() = vec![("preview".into(), "r.example/**".into())];
    judge.set_audit_mode("preview");
    let cache = Arc::new(CachedJudge::new(
        judge.clone(),
        &CacheConfig::default(),
        Arc::new(NoObserver),
    ));
    let mut auditor = Auditor::new(
        cache,
        Arc::new(Refusing),
        EngineSettings::default(),
        Scope::default(),
    );
    auditor.namespace_applied("shop", included());
    auditor.snapshot_applied(judge.in_force(&[]));
    auditor.pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    auditor.run().await;
    let found = auditor.findings(None);
    let seen: Vec<(&str, &str, Outcome)> = found
        .iter()
        .map(|x| (x.policy.as_str(), x.mode.as_str(), x.outcome))
        .collect();
    assert_eq!(
        seen,
        [
            (NO_MATCH_POLICY, "allow", Outcome::Skip),
            (crate::finding::VERIFICATION_POLICY, "audit", Outcome::Error)
        ]
    );
    assert!(
        found[1].message.contains("secrets are forbidden"),
        "{found:?}"
    );
    assert!(!crate::print::would_deny(&found));
    assert_eq!(judge.calls(), 0, "nothing could be judged");
}

#[tokio::test]
async fn results_name_the_deployment_once_its_replicaset_is_seen() {
    let mut f = fixture(&[("signed", "r.example/**")]);
    f.auditor
        .pod_applied(&pod("shop", "app-1", "r.example/app:1", 1));
    f.auditor.run().await;
    f.auditor.take_dirty();
    let rs: ObjectMeta = serde_json::from_value(
        json!({"name": "app-5d", "namespace": "shop", "uid": "rs-app",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "app",
            "uid": "dep-app", "controller": true}]}),
    )
    .unwrap();
    f.auditor.owner_applied(&rs);
    assert!(f.auditor.take_dirty().contains("shop"));
    let w = &f.auditor.findings(None)[0].workload;
    assert_eq!((w.kind.as_str(), w.name.as_str()), ("Deployment", "app"));
    assert_eq!(f.judge.calls(), 1, "renaming judges nothing again");
}

#[tokio::test]
async fn a_pod_start_judges_only_its_new_image_and_a_deletion_removes_its_result() {
    let mut f = fixture(&[("signed", "r.example/**")]);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    f.auditor.run().await;
    f.judge.set_outcome("r.example/evil", PolicyOutcome::Fail);
    f.auditor.take_dirty();
    f.auditor
        .pod_applied(&pod("shop", "b", "r.example/evil:1", 2));
    let stats = f.auditor.run().await;
    assert_eq!((stats.containers, stats.judged), (1, 1));
    assert_eq!(f.judge.calls(), 2);
    assert_eq!(
        outcomes(&f),
        [
            ("r.example/app:1".into(), "signed".into(), Outcome::Pass),
            ("r.example/evil:1".into(), "signed".into(), Outcome::Fail),
        ]
    );
    let fail = &f.auditor.findings(None)[1];
    assert!(
        fail.message.contains("no signature found"),
        "{}",
        fail.message
    );
    assert!(f.auditor.take_dirty().contains("shop"));

    f.auditor.pod_deleted("shop", "b");
    assert!(f.auditor.take_dirty().contains("shop"));
    assert_eq!(outcomes(&f).len(), 1);
    f.auditor.run().await;
    assert_eq!(
        f.auditor.engine().held_count(),
        1,
        "a verdict no running container uses is forgotten at the next pass"
    );
}

#[tokio::test]
async fn a_pod_update_that_changes_nothing_judged_keeps_its_verdicts() {
    let mut f = fixture(&[("signed", "r.example/**")]);
    let p = pod("shop", "a", "r.example/app:1", 1);
    f.auditor.pod_applied(&p);
    f.auditor.run().await;
    f.auditor.take_dirty();
    f.auditor.pod_applied(&p);
    assert!(f.auditor.take_dirty().is_empty());
    // A restart onto another digest is a new image to judge.
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 7));
    f.auditor.run().await;
    assert_eq!(f.judge.calls(), 2);
    assert_eq!(f.auditor.findings(None)[0].digest, digest(7));
}

#[tokio::test]
async fn a_changed_policy_rejudges_only_the_images_it_selects() {
    let mut f = fixture(&[("apps", "r.example/app*"), ("tools", "r.example/tool*")]);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    f.auditor
        .pod_applied(&pod("shop", "t", "r.example/tool:1", 2));
    f.auditor.run().await;
    assert_eq!(f.judge.calls(), 2);

    // A key rotated out of the TrustRoot `tools` names: its print moves.
    f.judge.set_outcome("r.example/tool", PolicyOutcome::Fail);
    let rotated = f.judge.in_force(&[("tools", "p1")]);
    assert_eq!(f.auditor.snapshot_applied(rotated), 1);
    let stats = f.auditor.run().await;
    assert_eq!((stats.containers, stats.judged), (1, 1));
    assert_eq!(f.judge.calls(), 3, "the app image was not judged again");
    assert_eq!(
        outcomes(&f),
        [
            ("r.example/app:1".into(), "apps".into(), Outcome::Pass),
            ("r.example/tool:1".into(), "tools".into(), Outcome::Fail),
        ]
    );

    // The same prints under a newer revision change nothing.
    let same = f.judge.in_force(&[("tools", "p1")]);
    assert_eq!(f.auditor.snapshot_applied(same), 0);
}

#[tokio::test]
async fn an_added_policy_rejudges_the_images_it_now_selects_and_a_deleted_one_its_own() {
    let mut f = fixture(&[("apps", "r.example/app*")]);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    f.auditor
        .pod_applied(&pod("shop", "o", "other.example/x:1", 2));
    f.auditor.run().await;
    assert_eq!(
        f.judge.calls(),
        1,
        "an image no policy selects is not verified"
    );
    assert!(outcomes(&f).contains(&(
        "other.example/x:1".into(),
        NO_MATCH_POLICY.into(),
        Outcome::Skip
    )));

    f.judge
        .policies
        .lock()
        .unwrap()
        .push(("others".into(), "other.example/**".into()));
    let added = f.judge.in_force(&[]);
    assert_eq!(f.auditor.snapshot_applied(added), 1);
    f.auditor.run().await;
    assert_eq!(f.judge.calls(), 2);
    assert!(outcomes(&f).contains(&("other.example/x:1".into(), "others".into(), Outcome::Pass)));

    f.judge
        .policies
        .lock()
        .unwrap()
        .retain(|(n, _)| n != "others");
    let removed = f.judge.in_force(&[]);
    assert_eq!(f.auditor.snapshot_applied(removed), 1);
    f.auditor.run().await;
    assert!(outcomes(&f).contains(&(
        "other.example/x:1".into(),
        NO_MATCH_POLICY.into(),
        Outcome::Skip
    )));
}

#[tokio::test]
async fn the_interval_rejudges_every_distinct_image_once() {
    let mut f = fixture(&[("signed", "r.example/**")]);
    for i in 0..10 {
        f.auditor
            .pod_applied(&pod("shop", &format!("p{i}"), "r.example/app:1", i % 3));
    }
    f.auditor.run().await;
    assert_eq!(f.judge.calls(), 3);
    assert_eq!(f.auditor.interval_elapsed(), 10);
    f.judge.set_outcome("r.example/app", PolicyOutcome::Fail);
    let stats = f.auditor.run().await;
    assert_eq!(stats.judged, 3);
    // The cache still holds the verdicts of this snapshot: the interval
    // re-verifies only once they expire (the cache's TTL), never by
    // bypassing the webhook's cache.
    assert_eq!(f.judge.calls(), 3);
}

#[tokio::test]
async fn a_registry_outage_is_an_error_result_never_a_pass() {
    let mut f = fixture(&[("signed", "r.example/**")]);
    f.judge
        .set_outcome("r.example/app", PolicyOutcome::Inconclusive);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    f.auditor.run().await;
    assert_eq!(
        outcomes(&f),
        [("r.example/app:1".into(), "signed".into(), Outcome::Error)]
    );
}

#[tokio::test]
async fn a_container_whose_digest_cannot_be_told_is_an_error() {
    let mut f = fixture(&[("signed", "r.example/**")]);
    let mut p = pod("shop", "a", "r.example/app:1", 1);
    if let Some(s) = p
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
    {
        s[0].image_id = digest(1);
    }
    f.auditor.pod_applied(&p);
    f.auditor.run().await;
    assert_eq!(f.judge.calls(), 0);
    assert_eq!(
        outcomes(&f),
        [(
            "r.example/app:1".into(),
            RUNNING_DIGEST_POLICY.into(),
            Outcome::Error
        )]
    );
}

#[tokio::test]
async fn namespaces_follow_admissions_selection_and_wait_for_their_labels() {
    let mut f = fixture(&[("signed", "r.example/**")]);
    // A pod seen before its namespace is judged once the namespace is known.
    f.auditor
        .pod_applied(&pod("late", "a", "r.example/app:1", 1));
    f.auditor.run().await;
    assert!(f.auditor.findings(None).is_empty());
    f.auditor.namespace_applied("late", included());
    f.auditor.run().await;
    assert_eq!(f.auditor.findings(Some("late")).len(), 1);

    // Opting out drops its results; pods of unlabelled namespaces never count.
    f.auditor.namespace_applied("late", BTreeMap::new());
    assert!(f.auditor.findings(Some("late")).is_empty());
    f.auditor.namespace_applied("plain", BTreeMap::new());
    f.auditor
        .pod_applied(&pod("plain", "b", "r.example/app:1", 1));
    f.auditor.run().await;
    assert!(f.auditor.findings(Some("plain")).is_empty());
    f.auditor.namespace_deleted("shop");
    assert_eq!(f.auditor.engine().pod_count(), 0);
}

#[tokio::test]
async fn the_what_would_break_view_reports_unguarded_namespaces_as_not_enforced() {
    let judge = Arc::new(Scripted::default());
    *judge.policies.lock().unwrap() = vec![("signed".into(), "r.example/**".into())];
    let cache = Arc::new(CachedJudge::new(
        judge.clone(),
        &CacheConfig::default(),
        Arc::new(NoObserver),
    ));
    let scope = Scope {
        unenforced: true,
        ..Scope::default()
    };
    let mut auditor = Auditor::new(
        cache,
        Arc::new(NoPullSecrets),
        EngineSettings::default(),
        scope,
    );
    auditor.snapshot_applied(judge.in_force(&[]));
    auditor.namespace_applied("plain", BTreeMap::new());
    auditor.namespace_applied("shop", included());
    auditor.pod_applied(&pod("plain", "a", "r.example/app:1", 1));
    auditor.pod_applied(&pod("shop", "b", "r.example/app:1", 1));
    auditor.run().await;
    let enforced: Vec<(String, bool)> = auditor
        .findings(None)
        .into_iter()
        .map(|f| (f.namespace, f.enforced))
        .collect();
    assert_eq!(enforced, [("plain".into(), false), ("shop".into(), true)]);
    assert_eq!(judge.calls(), 1);
}

/// A read-only fake API server: lists of namespaces, ReplicaSets, Jobs and
/// pods (pods in pages of one), recording every request.
fn cluster(seen: Arc<Mutex<Vec<String>>>) -> kube::Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let seen = seen.clone();
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or_default().to_string();
            seen.lock().unwrap().push(format!("{method} {path}"));
            let list = |kind: &str, items: Vec<serde_json::Value>, next: &str| json!({"kind": kind, "apiVersion": "v1", "metadata": {"continue": next}, "items": items});
            let body = match path.as_str() {
                "/api/v1/namespaces" => list(
                    "NamespaceList",
                    vec![
                        json!({"metadata": {"name": "shop", "labels": {INCLUDE_LABEL: "true"}}}),
                        json!({"metadata": {"name": "kube-system", "labels": {INCLUDE_LABEL: "true"}}}),
                    ],
                    "",
                ),
                "/apis/apps/v1/replicasets" => list(
                    "ReplicaSetList",
                    vec![
                        json!({"metadata": {"name": "app-5d", "namespace": "shop", "uid": "rs-app",
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                            "name": "app", "uid": "dep-app", "controller": true}]}}),
                    ],
                    "",
                ),
                "/apis/batch/v1/jobs" => list("JobList", vec![], ""),
                "/api/v1/pods" if !query.contains("continue=") => list(
                    "PodList",
                    vec![serde_json::to_value(pod("shop", "a", "r.example/app:1", 1)).unwrap()],
                    "page2",
                ),
                "/api/v1/pods" => list(
                    "PodList",
                    vec![
                        serde_json::to_value(pod("shop", "b", "r.example/app:1", 1)).unwrap(),
                        serde_json::to_value(pod("kube-system", "c", "r.example/app:1", 1))
                            .unwrap(),
                    ],
                    "",
                ),
                _ => json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                    "reason": "NotFound", "message": "not found"}),
            };
            let status = if body["kind"] == "Status" { 404 } else { 200 };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            )
        }
    });
    kube::Client::new(service, "default")
}

#[tokio::test]
async fn a_one_shot_audit_reads_the_cluster_page_by_page_and_writes_nothing() {
    let judge = Arc::new(Scripted::default());
    *judge.policies.lock().unwrap() = vec![("signed".into(), "r.example/**".into())];
    let cache = Arc::new(CachedJudge::new(
        judge.clone(),
        &CacheConfig::default(),
        Arc::new(NoObserver),
    ));
    let mut auditor = Auditor::new(
        cache,
        Arc::new(NoPullSecrets),
        EngineSettings::default(),
        Scope::default(),
    );
    auditor.snapshot_applied(judge.in_force(&[]));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let stats = crate::cluster::read_cluster(&cluster(seen.clone()), &mut auditor)
        .await
        .unwrap();
    assert_eq!((stats.namespaces, stats.owners, stats.pods), (2, 1, 3));
    assert_eq!(stats.requests, 5, "two pages of pods");
    assert!(seen.lock().unwrap().iter().all(|r| r.starts_with("GET ")));
    auditor.run().await;
    let found = auditor.findings(None);
    assert_eq!(found.len(), 1, "kube-system is never audited");
    assert_eq!(
        (
            found[0].workload.kind.as_str(),
            found[0].workload.name.as_str(),
            found[0].pods
        ),
        ("Deployment", "app", 2)
    );
    assert_eq!(judge.calls(), 1);
    let table = crate::print::table(&found);
    assert!(table.contains("deployment/app"), "{table}");
    assert!(table.contains("1 results: 1 pass, 0 fail"), "{table}");
    assert!(!crate::print::would_deny(&found));
}

#[tokio::test]
async fn a_failing_list_names_the_resource_and_what_to_check() {
    let judge = Arc::new(Scripted::default());
    let cache = Arc::new(CachedJudge::new(
        judge,
        &CacheConfig::default(),
        Arc::new(NoObserver),
    ));
    let mut auditor = Auditor::new(
        cache,
        Arc::new(NoPullSecrets),
        EngineSettings::default(),
        Scope::default(),
    );
    let service = tower::service_fn(|_req: http::Request<kube::client::Body>| async {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
            "reason": "Forbidden", "message": "namespaces is forbidden"});
        Ok::<_, std::convert::Infallible>(
            http::Response::builder()
                .status(403)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(
                    serde_json::to_vec(&status).unwrap(),
                ))
                .unwrap(),
        )
    });
    let err = crate::cluster::read_cluster(&kube::Client::new(service, "default"), &mut auditor)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot list namespaces"), "{err}");
    assert!(err.contains("check the kubeconfig context"), "{err}");
}

/// A fake API server answering writes with what was sent, failing those
/// whose path contains `fail_path`, recording `METHOD path`.
fn writes(seen: Arc<Mutex<Vec<String>>>, fail_path: &'static str) -> kube::Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let seen = seen.clone();
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            seen.lock().unwrap().push(format!("{method} {path}"));
            let bytes = http_body_util::BodyExt::collect(req.into_body())
                .await
                .unwrap()
                .to_bytes();
            let (status, body) = if !fail_path.is_empty() && path.contains(fail_path) {
                (
                    500,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                        "reason": "InternalError", "message": "etcd is down"}),
                )
            } else if bytes.is_empty() {
                (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                )
            } else {
                (200, serde_json::from_slice(&bytes).unwrap())
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            )
        }
    });
    kube::Client::new(service, "default")
}

#[tokio::test]
async fn a_pass_writes_the_reports_of_changed_namespaces_and_the_metrics() {
    use crate::metrics::AuditMetrics;
    use crate::report::{Flavor, Writer};
    use crate::runtime::{RuntimeSettings, pass};

    let mut f = fixture(&[("signed", "r.example/**")]);
    f.auditor.namespace_applied("web", included());
    f.judge.set_outcome("r.example/evil", PolicyOutcome::Fail);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    f.auditor
        .pod_applied(&pod("web", "b", "r.example/evil:1", 2));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut writer = Writer::new(writes(seen.clone(), ""), Flavor::OpenReports);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = AuditMetrics::new(&mut registry);
    let settings = RuntimeSettings::default();
    let stats = pass(&mut f.auditor, &mut writer, &metrics, &settings)
        .await
        .unwrap();
    assert_eq!((stats.eval.judged, stats.applied, stats.deleted), (2, 3, 0));
    assert_eq!(stats.policy_statuses, 1);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "PATCH /apis/openreports.io/v1alpha1/namespaces/shop/reports/sigil-audit",
            "PATCH /apis/openreports.io/v1alpha1/namespaces/web/reports/sigil-audit",
            "PATCH /apis/openreports.io/v1alpha1/clusterreports/sigil-audit",
            "PATCH /apis/policy.sigil.dev/v1alpha1/clusterimagepolicies/signed/status",
        ]
    );
    assert_eq!(metrics.violations(), 1);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"sigil_audit_results{namespace="web",policy="signed",mode="enforce",outcome="fail"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("sigil_audit_last_success_timestamp_seconds"),
        "{text}"
    );

    // Nothing changed: no write. The failing pod goes: web's report goes.
    seen.lock().unwrap().clear();
    pass(&mut f.auditor, &mut writer, &metrics, &settings)
        .await
        .unwrap();
    assert!(seen.lock().unwrap().is_empty());
    f.auditor.pod_deleted("web", "b");
    let stats = pass(&mut f.auditor, &mut writer, &metrics, &settings)
        .await
        .unwrap();
    assert_eq!(
        (stats.applied, stats.deleted),
        (1, 1),
        "cluster report, web deleted"
    );
    assert_eq!(stats.policy_statuses, 1, "signed's counts lost their fail");
    assert_eq!(metrics.violations(), 0);
}

#[tokio::test]
async fn a_failed_report_write_is_retried_at_the_next_pass() {
    use crate::metrics::AuditMetrics;
    use crate::report::{Flavor, Writer};
    use crate::runtime::{RuntimeSettings, pass};

    let mut f = fixture(&[("signed", "r.example/**")]);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut broken = Writer::new(
        writes(seen.clone(), "/namespaces/shop/"),
        Flavor::OpenReports,
    );
    let metrics = AuditMetrics::new(&mut prometheus_client::registry::Registry::default());
    let settings = RuntimeSettings::default();
    let err = pass(&mut f.auditor, &mut broken, &metrics, &settings)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot write report Report sigil-audit (namespace shop)"),
        "{err}"
    );
    let mut healed = Writer::new(writes(seen, ""), Flavor::OpenReports);
    let stats = pass(&mut f.auditor, &mut healed, &metrics, &settings)
        .await
        .unwrap();
    assert_eq!(
        stats.applied, 2,
        "shop's report again, and the cluster report"
    );
}

#[tokio::test]
async fn pods_missing_from_a_relist_are_dropped() {
    let mut f = fixture(&[("signed", "r.example/**")]);
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    f.auditor
        .pod_applied(&pod("shop", "b", "r.example/app:1", 1));
    f.auditor.run().await;
    f.auditor.relist_started();
    f.auditor
        .pod_applied(&pod("shop", "a", "r.example/app:1", 1));
    f.auditor.relist_done();
    assert_eq!(f.auditor.engine().pod_count(), 1);
    assert_eq!(f.auditor.findings(None)[0].pods, 1);
}
