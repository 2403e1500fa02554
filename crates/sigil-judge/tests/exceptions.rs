//! ImagePolicyExceptions in the snapshot judge, through the verdict cache
//! as admission uses it: a waived policy does not judge the image of the
//! workload named, the answer warns naming the exception and its expiry,
//! and at the expiry (by the judge's own clock) the image is judged again
//! and denied, never answered from the verdict cached under the exception.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;
use sigil_api::exception::{ExceptionWorkload, ImagePolicyException, ImagePolicyExceptionSpec};
use sigil_compile::exception::ExceptionRules;
use sigil_judge::cache::{CacheConfig, CachedJudge, NoObserver, SecretsOnce};
use sigil_judge::exceptions::ExceptionTable;
use sigil_judge::judge::{ImageJudge, ObjectInfo, PinnedImage, PolicyOutcome, PullSecrets};
use sigil_judge::policy_judge::PolicyJudge;
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::ClientConfig;
use sigil_verifier::trust::{TrustedRoot, format_rfc3339};
use time::OffsetDateTime;
use tokio::time::Instant;

const DIGEST: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// Two cluster policies with static authorities (no registry is
/// contacted): `signed` fails every image of registry.test, `base` passes
/// them; `other` selects a registry no test image comes from.
fn judge(table: Arc<ExceptionTable>) -> Arc<PolicyJudge> {
    let root = TrustedRoot::public_good().unwrap();
    let judge = PolicyJudge::new(
        ClientConfig::default(),
        root,
        "public-good",
        NoMatchPolicy::Deny,
    )
    .unwrap()
    .with_exceptions(table);
    let policy = |name: &str, glob: &str, action: &str, mode: &str| {
        json!({
            "name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1",
            "spec": {
                "images": [{"glob": glob}],
                "authorities": [{"name": "gate", "static": {"action": action}}],
                "mode": mode,
            },
        })
    };
    let snapshot = json!({
        "apiVersion": "policy.sigil.dev/snapshot/v1",
        "revision": 1,
        "generatedAt": "2026-01-01T00:00:00Z",
        "policies": [
            policy("signed", "registry.test/vendor/**", "fail", "enforce"),
            policy("base", "registry.test/**", "pass", "enforce"),
            policy("preview", "registry.test/vendor/**", "fail", "audit"),
        ],
        "trustRoots": [],
    });
    judge.apply_bytes(snapshot.to_string().as_bytes()).unwrap();
    Arc::new(judge)
}

fn exception(name: &str, expires: OffsetDateTime, policies: &[&str]) -> ImagePolicyException {
    let mut e = ImagePolicyException::new(
        name,
        ImagePolicyExceptionSpec {
            policies: policies.iter().map(|p| p.to_string()).collect(),
            images: vec!["registry.test/vendor/sidecar*".into()],
            workloads: vec![ExceptionWorkload {
                kind: "Deployment".into(),
                name: "web".into(),
            }],
            expires_at: format_rfc3339(expires),
            reason: Some("vendor signs from 2.0".into()),
        },
    );
    e.metadata.namespace = Some("shop".into());
    e
}

/// A Pod of Deployment `deployment` (through its ReplicaSet), in `shop`.
fn pod_of(deployment: &str) -> ObjectInfo {
    let gvk = GroupVersionKind::gvk("", "v1", "Pod");
    let mut object = DynamicObject::new("pod-x", &ApiResource::from_gvk(&gvk));
    object.metadata.labels = Some([("pod-template-hash".to_string(), "5f6d".to_string())].into());
    object.metadata.owner_references = Some(vec![OwnerReference {
        kind: "ReplicaSet".into(),
        name: format!("{deployment}-5f6d"),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    ObjectInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        sub_resource: String::new(),
        kind: "Pod".into(),
        namespace: "shop".into(),
        name: "pod-x".into(),
        labels: BTreeMap::new(),
        pull_secret_names: Vec::new(),
        service_account: "default".into(),
        object: Arc::new(object),
    }
}

fn sidecar() -> PinnedImage {
    PinnedImage {
        image: "registry.test/vendor/sidecar:1".into(),
        digest: DIGEST.into(),
    }
}

struct Anonymous;

impl SecretsOnce for Anonymous {
    async fn get(&self, _deadline: Instant) -> Result<PullSecrets, String> {
        Ok(PullSecrets::anonymous())
    }
    fn namespace(&self) -> &str {
        "shop"
    }
}

fn later() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn rules() -> ExceptionRules {
    ExceptionRules::new(&["shop".into()], Duration::from_secs(3600)).unwrap()
}

#[tokio::test]
async fn a_waived_policy_admits_with_a_warning_until_the_expiry_then_the_image_is_denied() {
    let table = Arc::new(ExceptionTable::new(rules()));
    let judge = judge(table.clone());
    let cache = CachedJudge::new(judge.clone(), &CacheConfig::default(), Arc::new(NoObserver));

    // Without an exception: `signed` denies the sidecar.
    let denied = cache
        .verdict(&sidecar(), &pod_of("web"), &Anonymous, later())
        .await
        .unwrap();
    assert!(!denied.allowed, "{denied:?}");

    // Waived for 3 seconds, for Deployment web only.
    let expires = OffsetDateTime::now_utc() + time::Duration::seconds(3);
    table.replace(
        [&exception(
            "vendor-sidecar",
            expires,
            &["signed", "preview"],
        )],
        OffsetDateTime::now_utc(),
    );
    let waived = cache
        .verdict(&sidecar(), &pod_of("web"), &Anonymous, later())
        .await
        .unwrap();
    assert!(waived.allowed, "{waived:?}");
    assert!(waived.reasons.is_empty());
    let warning = format!(
        "policy signed waived: admitted by exception shop/vendor-sidecar until {} (vendor signs from 2.0)",
        format_rfc3339(expires)
    );
    assert_eq!(waived.warnings, [warning]);
    let outcomes: Vec<(&str, PolicyOutcome)> = waived
        .results
        .iter()
        .map(|r| (r.policy.as_str(), r.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("base", PolicyOutcome::Pass),
            ("signed", PolicyOutcome::Skipped)
        ]
    );
    assert!(
        waived.results[1]
            .message
            .starts_with("admitted by exception shop/vendor-sidecar until")
    );

    // Another Deployment's pod is still denied; the same pod again is
    // waived (from the cache or not, the same answer).
    let other = cache
        .verdict(&sidecar(), &pod_of("api"), &Anonymous, later())
        .await
        .unwrap();
    assert!(!other.allowed, "{other:?}");
    let again = cache
        .verdict(&sidecar(), &pod_of("web"), &Anonymous, later())
        .await
        .unwrap();
    assert!(again.allowed);

    // The audit-mode policy the exception names is reported as skipped.
    let audit = judge
        .judge_audit_mode(
            &sidecar(),
            &pod_of("web"),
            &PullSecrets::anonymous(),
            later(),
        )
        .await;
    assert_eq!(audit.results.len(), 1, "{audit:?}");
    assert_eq!(audit.results[0].outcome, PolicyOutcome::Skipped);
    assert!(
        audit.warnings.is_empty(),
        "audit mode never warns admission"
    );

    // Past the expiry: judged again and denied, nothing removed the
    // exception.
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    let expired = cache
        .verdict(&sidecar(), &pod_of("web"), &Anonymous, later())
        .await
        .unwrap();
    assert!(!expired.allowed, "{expired:?}");
    assert!(
        expired
            .reasons
            .iter()
            .any(|r| r.contains("policy signed failed")),
        "{expired:?}"
    );
    assert!(expired.warnings.is_empty());
}

#[tokio::test]
async fn an_exception_never_stands_in_for_a_policy_it_does_not_name_or_for_no_match() {
    let table = Arc::new(ExceptionTable::new(rules()));
    let judge = judge(table.clone());
    let in_an_hour = OffsetDateTime::now_utc() + time::Duration::minutes(59);
    // Waives `base` only: `signed` still denies.
    table.replace(
        [&exception("base-only", in_an_hour, &["base"])],
        OffsetDateTime::now_utc(),
    );
    let v = judge
        .judge(
            &sidecar(),
            &pod_of("web"),
            &PullSecrets::anonymous(),
            later(),
        )
        .await;
    assert!(!v.allowed, "{v:?}");
    assert!(v.reasons.iter().any(|r| r.contains("policy signed failed")));

    // Waiving every policy that selects the image admits it (the image was
    // selected, noMatchPolicy does not apply) ...
    table.replace(
        [&exception("all", in_an_hour, &["base", "signed"])],
        OffsetDateTime::now_utc(),
    );
    let v = judge
        .judge(
            &sidecar(),
            &pod_of("web"),
            &PullSecrets::anonymous(),
            later(),
        )
        .await;
    assert!(v.allowed, "{v:?}");
    assert_eq!(v.warnings.len(), 2);
    // ... but an image no policy selects is still denied by noMatchPolicy
    // whatever an exception names.
    let mut exc = exception("unmatched", in_an_hour, &["base", "signed"]);
    exc.spec.images = vec!["elsewhere.test/**".into()];
    table.replace([&exc], OffsetDateTime::now_utc());
    let unselected = PinnedImage {
        image: "elsewhere.test/app:1".into(),
        digest: DIGEST.into(),
    };
    let v = judge
        .judge(
            &unselected,
            &pod_of("web"),
            &PullSecrets::anonymous(),
            later(),
        )
        .await;
    assert!(!v.allowed, "{v:?}");

    // Outside the allowed namespaces, or longer than the maximum: refused,
    // nothing waived.
    let mut elsewhere = exception("elsewhere", in_an_hour, &["signed", "base"]);
    elsewhere.metadata.namespace = Some("tools".into());
    let too_long = exception(
        "too-long",
        OffsetDateTime::now_utc() + time::Duration::hours(2),
        &["signed", "base"],
    );
    table.replace([&elsewhere, &too_long], OffsetDateTime::now_utc());
    assert_eq!(table.refused().len(), 2);
    let v = judge
        .judge(
            &sidecar(),
            &pod_of("web"),
            &PullSecrets::anonymous(),
            later(),
        )
        .await;
    assert!(!v.allowed, "{v:?}");
}
