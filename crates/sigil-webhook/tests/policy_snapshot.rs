//! The policy snapshot judge end to end without a cluster: a snapshot file
//! loaded and polled, reviews through the router against an unreachable
//! registry on 127.0.0.1, refusal of invalid snapshots, versions that move
//! with every revision, and readiness.

// Test glue: helpers outside #[test] functions may unwrap.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use common::{config, message, post, response};
use serde_json::{Value, json};
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::{ClientConfig, Limits};
use sigil_verifier::trust::TrustedRoot;
use sigil_webhook::admit::Admission;
use sigil_webhook::judge::ImageJudge as _;
use sigil_webhook::metrics::Metrics;
use sigil_webhook::policy_judge::{Applied, PolicyJudge};
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::{AppState, router};
use sigil_webhook::snapshot_source::file_source;

const KEY: &str = include_str!("data/p256.pub");
/// Nothing listens on port 1: every registry call fails at once, locally.
const IMAGE: &str =
    "127.0.0.1:1/shop/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn snapshot(revision: u64, policies: Value) -> Value {
    json!({
        "apiVersion": "policy.sigil.dev/snapshot/v1",
        "revision": revision,
        "generatedAt": "2026-01-01T00:00:00Z",
        "policies": policies,
        "trustRoots": [],
    })
}

fn key_policy(name: &str, glob: &str) -> Value {
    json!({
        "name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1",
        "spec": {"images": [{"glob": glob}], "authorities": [{"key": {"data": KEY}}]},
    })
}

fn judge() -> Arc<PolicyJudge> {
    let client = ClientConfig {
        insecure_hosts: vec!["127.0.0.1:1".into()],
        limits: Limits {
            request_timeout: Duration::from_secs(2),
            total_deadline: Duration::from_secs(2),
            ..Limits::default()
        },
        ..ClientConfig::default()
    };
    let root = TrustedRoot::public_good().unwrap();
    Arc::new(PolicyJudge::new(client, root, "public-good", NoMatchPolicy::Allow).unwrap())
}

fn app(judge: Arc<PolicyJudge>) -> Router {
    let admission = Admission::new(judge, NoPullSecrets, config(), Arc::new(Metrics::new()));
    router(AppState::new(admission))
}

fn pod_review(image: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "pod-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web", "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
        },
    }))
    .unwrap()
}

/// A file in the temp directory unique to this test process.
fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sigil-snapshot-{}-{name}.json", std::process::id()))
}

#[tokio::test]
async fn an_unsigned_image_is_denied_naming_the_policy_of_the_snapshot_file() {
    let path = temp_file("deny");
    std::fs::write(
        &path,
        snapshot(1, json!([key_policy("require-signed", "**")])).to_string(),
    )
    .unwrap();
    let judge = judge();
    let poll = file_source(judge.clone(), path.clone(), Duration::from_secs(60)).await;
    drop(poll);
    assert!(judge.ready());
    let (_, answer) = post(&app(judge), "/validate", pod_review(IMAGE)).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{answer}");
    let msg = message(resp);
    assert!(msg.contains("require-signed"), "the policy is named: {msg}");
    assert!(msg.contains(IMAGE), "the image is named: {msg}");
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn an_invalid_snapshot_file_is_refused_and_the_last_good_one_keeps_enforcing() {
    let path = temp_file("invalid");
    std::fs::write(
        &path,
        snapshot(1, json!([key_policy("require-signed", "**")])).to_string(),
    )
    .unwrap();
    let judge = judge();
    let poll =
        tokio::spawn(file_source(judge.clone(), path.clone(), Duration::from_millis(100)).await);
    let before = judge.versions();
    let mut broken = key_policy("require-signed", "**");
    broken["spec"]["authorities"][0]["key"]["data"] = json!("not a key");
    std::fs::write(&path, snapshot(2, json!([broken])).to_string()).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::fs::write(&path, "{ not json").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    poll.abort();
    assert_eq!(judge.revision(), Some(1));
    assert_eq!(judge.versions(), before);
    let (_, answer) = post(&app(judge), "/validate", pod_review(IMAGE)).await;
    let msg = message(response(&answer));
    assert!(msg.contains("require-signed"), "still enforced: {msg}");
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn a_new_snapshot_revision_is_never_answered_from_an_old_verdict() {
    let judge = judge();
    let router = app(judge.clone());
    let elsewhere = snapshot(1, json!([key_policy("other", "registry.example/**")]));
    judge.apply_bytes(elsewhere.to_string().as_bytes()).unwrap();
    let v1 = judge.versions();
    let (_, answer) = post(&router, "/validate", pod_review(IMAGE)).await;
    assert_eq!(response(&answer)["allowed"], true, "no policy selects it");
    let everything = snapshot(2, json!([key_policy("require-signed", "**")]));
    assert_eq!(
        judge
            .apply_bytes(everything.to_string().as_bytes())
            .unwrap(),
        Applied::Swapped
    );
    assert_ne!(judge.versions(), v1);
    let (_, answer) = post(&router, "/validate", pod_review(IMAGE)).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "the new revision decided: {answer}");
    assert!(message(resp).contains("require-signed"));
}

#[tokio::test]
async fn the_judge_is_not_ready_until_a_first_snapshot_and_ignores_older_revisions() {
    let judge = judge();
    assert!(!judge.ready());
    assert_eq!(judge.snapshot_age(), None);
    let rev5 = snapshot(5, json!([key_policy("a", "**")]));
    judge.apply_bytes(rev5.to_string().as_bytes()).unwrap();
    assert!(judge.ready());
    assert!(judge.snapshot_age().is_some());
    let rev4 = snapshot(4, json!([]));
    assert_eq!(
        judge.apply_bytes(rev4.to_string().as_bytes()).unwrap(),
        Applied::Stale
    );
    assert_eq!(
        judge.apply_bytes(rev5.to_string().as_bytes()).unwrap(),
        Applied::Unchanged
    );
    assert_eq!(judge.revision(), Some(5));
}

/// A Secret holding `snapshot` the way the controller writes it.
fn secret(resource_version: &str, snapshot: &Value) -> Value {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(snapshot.to_string());
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "sigil-policy-snapshot", "namespace": "sigil-system",
                     "resourceVersion": resource_version},
        "data": {"snapshot.json": data},
    })
}

#[tokio::test]
async fn the_secret_watch_applies_each_valid_version_the_api_server_delivers() {
    use http::{Request, Response};
    use kube::client::Body;

    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let rev1 = secret("10", &snapshot(1, json!([key_policy("first", "**")])));
    let rev2 = secret("11", &snapshot(2, json!([key_policy("second", "**")])));
    let server = tokio::spawn(async move {
        // Watches after the first are held open, as an idle API server does.
        let mut held = Vec::new();
        let mut watches = 0;
        for _ in 0..16 {
            let Some((request, send)) = handle.next_request().await else {
                return;
            };
            let query = request.uri().query().unwrap_or_default().to_owned();
            assert!(
                query.contains("fieldSelector=metadata.name%3Dsigil-policy-snapshot"),
                "{query}"
            );
            let body = if !query.contains("watch=") {
                json!({"apiVersion": "v1", "kind": "SecretList",
                       "metadata": {"resourceVersion": "10"}, "items": [rev1]})
                .to_string()
            } else if watches == 0 {
                watches += 1;
                format!("{}\n", json!({"type": "MODIFIED", "object": rev2}))
            } else {
                held.push(send);
                continue;
            };
            send.send_response(Response::new(Body::from(body.into_bytes())));
        }
    });
    let client = kube::Client::new(service, "sigil-system");
    let judge = judge();
    let watch = tokio::spawn(sigil_webhook::snapshot_source::secret_source(
        judge.clone(),
        kube::Api::namespaced(client, "sigil-system"),
        "sigil-policy-snapshot".into(),
    ));
    let mut seen = None;
    for _ in 0..100 {
        seen = judge.revision();
        if seen == Some(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    watch.abort();
    server.abort();
    assert_eq!(seen, Some(2), "revision 2 applied within a second");
    assert!(judge.ready());
}

#[tokio::test]
async fn a_shard_read_that_fails_once_is_read_again_without_waiting_for_a_new_version() {
    use base64::Engine as _;
    use http::{Request, Response, StatusCode};
    use kube::client::Body;
    use sigil_api::snapshot::stored::{self, CHUNK_KEY};
    use sigil_api::snapshot::{PolicySnapshot, SnapshotTrustRoot};

    // A snapshot over two Secrets: a trust root padded with about 1 MiB
    // that gzip cannot shrink (the parser ignores the unknown field).
    let mut state = 7u64;
    let padding: String = (0..1200 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b'!' + u8::try_from(state % 90).unwrap())
        })
        .collect();
    let mut root: Value = serde_json::from_str(sigil_verifier::trust::PUBLIC_GOOD_JSON).unwrap();
    root["padding"] = padding.into();
    let mut snapshot = PolicySnapshot {
        revision: 7,
        generated_at: "2026-01-01T00:00:00Z".into(),
        trust_roots: vec![SnapshotTrustRoot {
            name: "big".into(),
            generation: 1,
            trusted_root_json: root.to_string(),
            default: false,
        }],
        ..PolicySnapshot::empty()
    };
    snapshot.api_version = snapshot.needed_api_version().to_owned();
    let encoded = stored::encode(&snapshot, "sigil-policy-snapshot").unwrap();
    assert_eq!(encoded.shards.len(), 1, "one shard beside the main Secret");
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let main_data: serde_json::Map<String, Value> = encoded
        .main
        .iter()
        .map(|(k, v)| (k.clone(), b64(v).into()))
        .collect();
    let main = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "sigil-policy-snapshot", "namespace": "sigil-system",
                     "resourceVersion": "20"},
        "data": main_data,
    });
    let (shard_name, chunk) = encoded.shards[0].clone();
    let shard = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": shard_name, "namespace": "sigil-system", "resourceVersion": "19"},
        "data": {CHUNK_KEY: b64(&chunk)},
    });

    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let shard_path = format!("/api/v1/namespaces/sigil-system/secrets/{shard_name}");
    let server = tokio::spawn(async move {
        // The watch is held open with nothing new: no second version comes.
        let mut held = Vec::new();
        let mut shard_gets = 0;
        while let Some((request, send)) = handle.next_request().await {
            let query = request.uri().query().unwrap_or_default().to_owned();
            let path = request.uri().path().to_owned();
            let (status, body) = if path == shard_path {
                shard_gets += 1;
                if shard_gets == 1 {
                    let failure = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "etcdserver: request timed out", "code": 503});
                    (StatusCode::SERVICE_UNAVAILABLE, failure.to_string())
                } else {
                    (StatusCode::OK, shard.to_string())
                }
            } else if !query.contains("watch=") {
                let list = json!({"apiVersion": "v1", "kind": "SecretList",
                    "metadata": {"resourceVersion": "20"}, "items": [main]});
                (StatusCode::OK, list.to_string())
            } else {
                held.push(send);
                continue;
            };
            let response = Response::builder()
                .status(status)
                .body(Body::from(body.into_bytes()))
                .unwrap();
            send.send_response(response);
        }
    });
    let client = kube::Client::new(service, "sigil-system");
    let judge = judge();
    let watch = tokio::spawn(sigil_webhook::snapshot_source::secret_source(
        judge.clone(),
        kube::Api::namespaced(client, "sigil-system"),
        "sigil-policy-snapshot".into(),
    ));
    let mut seen = None;
    for _ in 0..100 {
        seen = judge.revision();
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watch.abort();
    server.abort();
    assert_eq!(
        seen,
        Some(7),
        "revision 7 loaded once its shard was read again"
    );
}

fn object(labels: &[(&str, &str)]) -> sigil_webhook::judge::ObjectInfo {
    let dynamic: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": IMAGE}]},
    }))
    .unwrap();
    sigil_webhook::judge::ObjectInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        sub_resource: String::new(),
        kind: "Pod".into(),
        namespace: "shop".into(),
        name: "web".into(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        pull_secret_names: Vec::new(),
        service_account: "default".into(),
        object: Arc::new(dynamic),
    }
}

#[test]
fn verdicts_are_shared_across_objects_unless_a_policy_reads_the_object() {
    let judge = judge();
    judge
        .apply_bytes(
            snapshot(1, json!([key_policy("shop", "127.0.0.1:1/shop/**")]))
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    // No policy matches on resources or labels: one verdict serves every object.
    assert_eq!(
        judge.object_key(&object(&[("team", "a")])),
        judge.object_key(&object(&[("team", "b")]))
    );

    let mut by_label = key_policy("labelled", "127.0.0.1:1/shop/**");
    by_label["spec"]["match"] = json!([{
        "resource": "pods", "version": "v1",
        "selector": {"matchLabels": {"team": "a"}},
    }]);
    judge
        .apply_bytes(snapshot(2, json!([by_label])).to_string().as_bytes())
        .unwrap();
    // A label selector decides whether the policy applies: objects whose
    // labels differ must not share a verdict.
    let a = judge.object_key(&object(&[("team", "a")]));
    let b = judge.object_key(&object(&[("team", "b")]));
    assert!(a.is_some() && b.is_some());
    assert_ne!(a, b);
    assert_eq!(a, judge.object_key(&object(&[("team", "a")])));
}

/// A policy with one static authority: no registry is contacted.
fn static_policy(name: &str, mode: &str, action: &str) -> Value {
    json!({
        "name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1",
        "spec": {
            "images": [{"glob": "127.0.0.1:1/**"}],
            "authorities": [{"name": "gate", "static": {"action": action}}],
            "mode": mode,
        },
    })
}

/// The state of a webhook whose judge enforces `policies` with `no_match`.
fn state_with(
    no_match: NoMatchPolicy,
    policies: Value,
) -> Arc<AppState<PolicyJudge, NoPullSecrets>> {
    let client = ClientConfig {
        insecure_hosts: vec!["127.0.0.1:1".into()],
        ..ClientConfig::default()
    };
    let root = TrustedRoot::public_good().unwrap();
    let judge = PolicyJudge::new(client, root, "public-good", no_match).unwrap();
    judge
        .apply_bytes(snapshot(1, policies).to_string().as_bytes())
        .unwrap();
    let admission = Admission::new(
        Arc::new(judge),
        NoPullSecrets,
        config(),
        Arc::new(Metrics::new()),
    );
    AppState::new(admission)
}

#[tokio::test]
async fn an_audit_mode_failure_neither_denies_nor_warns_and_is_counted() {
    let state = state_with(
        NoMatchPolicy::Deny,
        json!([
            static_policy("gate", "enforce", "pass"),
            static_policy("preview", "audit", "fail"),
        ]),
    );
    let app = router(state.clone());
    for _ in 0..2 {
        let (_, answer) = post(&app, "/validate", pod_review(IMAGE)).await;
        let resp = response(&answer);
        assert_eq!(resp["allowed"], true, "{answer}");
        assert!(resp.get("warnings").is_none(), "{answer}");
    }
    state.admission.audit_mode_settled().await;
    let metrics = state.admission.metrics();
    assert_eq!(
        metrics.audit_mode_count("preview", "fail"),
        2,
        "each review counts"
    );
    assert_eq!(
        metrics.audit_mode_count("gate", "pass"),
        0,
        "enforced policies are not"
    );
    let text = metrics.encode();
    assert!(
        text.contains(
            r#"sigil_admission_audit_mode_verdicts_total{policy="preview",outcome="fail"} 2"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn an_image_only_audit_mode_policies_select_gets_no_match_policy_at_admission() {
    let state = state_with(
        NoMatchPolicy::Deny,
        json!([static_policy("preview", "audit", "pass")]),
    );
    let app = router(state.clone());
    let (_, answer) = post(&app, "/validate", pod_review(IMAGE)).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{answer}");
    let msg = message(resp);
    assert!(
        msg.contains(sigil_policy::render::NO_MATCH_DENIED),
        "noMatchPolicy deny decides: {msg}"
    );
    assert!(!msg.contains("preview"), "{msg}");
    state.admission.audit_mode_settled().await;
    assert_eq!(
        state
            .admission
            .metrics()
            .audit_mode_count("preview", "pass"),
        1
    );
}

#[tokio::test]
async fn mutate_pins_nothing_for_an_audit_mode_policy() {
    let state = state_with(
        NoMatchPolicy::Allow,
        json!([static_policy("preview", "audit", "fail")]),
    );
    let app = router(state.clone());
    let (_, answer) = post(&app, "/mutate", pod_review("127.0.0.1:1/shop/app:1")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], true, "{answer}");
    assert!(resp.get("patch").is_none(), "no pin: {answer}");
    assert_eq!(
        state
            .admission
            .metrics()
            .audit_mode_count("preview", "fail"),
        0,
        "/mutate judges nothing"
    );
}

/// An AdmissionReview of `kind` (`group`/`version`, resource `resource`)
/// named `name` whose object is `spec`.
fn review_of(group: &str, kind: &str, resource: &str, name: &str, spec: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": format!("{kind}-1"),
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "name": name, "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": format!("{group}/v1"), "kind": kind,
                "metadata": {"name": name, "namespace": "shop"},
                "spec": spec,
            },
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn kinds_of_the_snapshot_s_workload_kinds_are_judged_and_others_are_refused() {
    let judge = judge();
    let mut doc = snapshot(1, json!([key_policy("require-signed", "127.0.0.1:1/**")]));
    doc["apiVersion"] = json!("policy.sigil.dev/snapshot/v3");
    doc["workloadKinds"] = json!([
        {"name": "rollouts", "generation": 1, "spec": {"builtin": "ArgoRollout", "version": "v1"}},
        {"name": "pipelines", "generation": 1, "spec": {"group": "ci.example.dev", "version": "v1",
            "kind": "Pipeline", "resource": "pipelines", "images": ["spec.stages[*].image"]}},
    ]);
    assert_eq!(
        judge.apply_bytes(doc.to_string().as_bytes()).unwrap(),
        Applied::Swapped
    );
    let router = app(judge.clone());

    let rollout = review_of(
        "argoproj.io",
        "Rollout",
        "rollouts",
        "web",
        json!({"template": {"spec": {"containers": [{"name": "app", "image": IMAGE}]}}}),
    );
    let (_, answer) = post(&router, "/validate", rollout.clone()).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{answer}");
    let msg = message(resp);
    assert!(msg.starts_with("sigil denied rollout shop/web"), "{msg}");
    assert!(
        msg.contains(&format!("image {IMAGE} (container app)")),
        "{msg}"
    );

    let pipeline = json!({"stages": [{"name": "test", "image": "docker.io/library/busybox:1"}, {"name": "build", "image": IMAGE}]});
    let (_, answer) = post(
        &router,
        "/validate",
        review_of("ci.example.dev", "Pipeline", "pipelines", "ci", pipeline),
    )
    .await;
    let msg = message(response(&answer));
    assert!(
        msg.starts_with("sigil denied pipeline shop/ci: 1 of 2 image(s)"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(
            "image {IMAGE} (field spec.stages[1].image): policy require-signed failed"
        )),
        "the field path is named: {msg}"
    );

    // A kind no WorkloadKind names is refused unread: only a WorkloadKind's
    // rule sends one, and the webhook has not loaded it.
    let (_, answer) = post(
        &router,
        "/validate",
        review_of(
            "argoproj.io",
            "Experiment",
            "experiments",
            "x",
            json!({"image": IMAGE}),
        ),
    )
    .await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{answer}");
    assert!(
        message(resp).contains("holds no WorkloadKind for that kind"),
        "{answer}"
    );

    // The WorkloadKind gone from the snapshot (and the controller removing
    // its rule): a Rollout still sent is refused, never admitted unread.
    doc["revision"] = json!(2);
    doc["workloadKinds"] = json!([]);
    judge.apply_bytes(doc.to_string().as_bytes()).unwrap();
    let (_, answer) = post(&router, "/validate", rollout).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{answer}");
    assert!(
        message(resp).contains(
            "was sent an object of kind Rollout (argoproj.io/v1) but its policy snapshot"
        ),
        "{answer}"
    );
}

#[tokio::test]
async fn a_snapshot_whose_workload_kinds_conflict_is_refused_whole() {
    let judge = judge();
    let mut doc = snapshot(1, json!([]));
    doc["apiVersion"] = json!("policy.sigil.dev/snapshot/v3");
    doc["workloadKinds"] = json!([
        {"name": "a", "generation": 1, "spec": {"builtin": "KnativeService"}},
        {"name": "b", "generation": 1, "spec": {"builtin": "KnativeService"}},
    ]);
    let e = judge.apply_bytes(doc.to_string().as_bytes()).unwrap_err();
    assert!(e.to_string().contains("WorkloadKind `b`"), "{e}");
    assert!(!judge.ready());
}
