//! `/validate` and `/mutate` through the router with `oneshot`, on the
//! AdmissionReview fixtures under `tests/data/`, with a fake judge.

// Test glue: helpers outside #[test] functions may unwrap.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::time::Duration;

use axum::http::StatusCode;
use common::{
    FakeJudge, app, app_with, config, digest_of, fixture, message, patch, post, response, warnings,
};
use serde_json::{Value, json};

const KINDS: [&str; 8] = [
    "pod.json",
    "deployment.json",
    "replicaset.json",
    "statefulset.json",
    "daemonset.json",
    "job.json",
    "cronjob.json",
    "replicationcontroller.json",
];

#[tokio::test]
async fn every_supported_kind_is_denied_for_its_unsigned_image_and_names_it() {
    for name in KINDS {
        let judge = FakeJudge::new();
        let (router, _) = app(judge.clone());
        let (status, answer) = post(&router, "/validate", fixture(name)).await;
        assert_eq!(status, StatusCode::OK, "{name}");
        let resp = response(&answer);
        assert_eq!(resp["allowed"], false, "{name}: {resp}");
        assert_eq!(resp["status"]["code"], 403, "{name}");
        let msg = message(resp);
        assert!(msg.starts_with("sigil denied "), "{name}: {msg}");
        assert!(
            msg.contains("1 of 2 image(s) failed verification"),
            "{name}: {msg}"
        );
        assert!(
            msg.contains("- image registry.test/team/unsigned:2.0 (sha256:"),
            "{name}: {msg}"
        );
        assert!(msg.contains("container helper"), "{name}: {msg}");
        assert!(
            msg.contains("authority release-key (key): no signature found"),
            "{name}: {msg}"
        );
        assert!(
            !msg.contains("registry.test/team/app:1.0"),
            "{name}: the good image is not listed: {msg}"
        );
        assert_eq!(judge.calls(), 2, "{name}: one judge call per image");
    }
}

#[tokio::test]
async fn mutate_pins_pods_and_leaves_workload_templates_as_written_by_default() {
    for name in KINDS {
        let judge = FakeJudge::new();
        let (router, _) = app_with(judge.clone(), common::strict_config());
        let (_, answer) = post(&router, "/mutate", fixture(name)).await;
        let resp = response(&answer);
        assert_eq!(resp["allowed"], true, "{name}: {resp}");
        if name == "pod.json" {
            assert_eq!(patch(resp).as_array().map(Vec::len), Some(2), "{name}");
        } else {
            assert!(resp.get("patch").is_none(), "{name}: {resp}");
            assert_eq!(
                judge
                    .resolve_calls
                    .load(std::sync::atomic::Ordering::SeqCst),
                0,
                "{name}: a template left as written costs no registry request"
            );
        }
    }
}

/// With `pin_templates` (`--pin-templates`, chart value `webhook.pinTemplates`);
/// by default only Pods are pinned (the test above).
#[tokio::test]
async fn every_supported_kind_has_its_tags_pinned_by_mutate() {
    let pointers = [
        ("pod.json", "/spec/containers"),
        ("deployment.json", "/spec/template/spec/containers"),
        ("replicaset.json", "/spec/template/spec/containers"),
        ("statefulset.json", "/spec/template/spec/containers"),
        ("daemonset.json", "/spec/template/spec/containers"),
        ("job.json", "/spec/template/spec/containers"),
        (
            "cronjob.json",
            "/spec/jobTemplate/spec/template/spec/containers",
        ),
        (
            "replicationcontroller.json",
            "/spec/template/spec/containers",
        ),
    ];
    for (name, base) in pointers {
        let (router, _) = app_with(
            FakeJudge::new(),
            sigil_webhook::admit::AdmissionConfig {
                pin_templates: true,
                ..config()
            },
        );
        let (_, answer) = post(&router, "/mutate", fixture(name)).await;
        let resp = response(&answer);
        assert_eq!(resp["allowed"], true, "{name}: {resp}");
        let good = "registry.test/team/app:1.0";
        let bad = "registry.test/team/unsigned:2.0";
        assert_eq!(
            patch(resp),
            json!([
                {"op": "replace", "path": format!("{base}/0/image"), "value": format!("{good}@{}", digest_of(good))},
                {"op": "replace", "path": format!("{base}/1/image"), "value": format!("{bad}@{}", digest_of(bad))},
            ]),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_pod_with_mixed_results_gets_one_line_per_failing_image_across_init_regular_and_ephemeral_containers()
 {
    let judge = FakeJudge::new();
    let (router, _) = app(judge.clone());
    let (_, answer) = post(&router, "/validate", fixture("pod_mixed.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false);
    let msg = message(resp);
    let lines: Vec<&str> = msg.lines().collect();
    assert_eq!(lines.len(), 3, "summary + two failing images: {msg}");
    assert_eq!(
        lines[0],
        "sigil denied pod shop/mixed: 2 of 4 image(s) failed verification"
    );
    assert!(
        lines[1].starts_with("- image registry.test/team/unsigned-init:3 (sha256:"),
        "{msg}"
    );
    assert!(
        lines[1].contains("init container migrate): policy team-policy@p1"),
        "{msg}"
    );
    assert!(
        lines[2].starts_with("- image registry.test/tools/unsigned-debug:1 ("),
        "{msg}"
    );
    assert!(lines[2].contains("ephemeral container debug"), "{msg}");
    // The multi-line reason of the judge is flattened onto its image's line.
    assert!(
        lines[2].ends_with("(looked for bundle referrers and sha256-….sig)"),
        "{msg}"
    );
    // app:1.0 is used twice but judged once; the pinned sidecar is not resolved.
    assert_eq!(judge.calls(), 4);
    assert_eq!(
        judge
            .resolve_calls
            .load(std::sync::atomic::Ordering::SeqCst),
        3
    );
}

#[tokio::test]
async fn unpinned_images_that_pass_are_admitted_with_a_warning_naming_the_verified_digest() {
    let (router, _) = app(FakeJudge::new());
    let (_, answer) = post(&router, "/validate", fixture("pod_good.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], true, "{resp}");
    let w = warnings(resp);
    assert_eq!(w.len(), 2, "{w:?}");
    let app = "registry.test/team/app:1.0";
    assert!(
        w.iter()
            .any(|x| x.contains(app) && x.contains(&digest_of(app))),
        "{w:?}"
    );
}

#[tokio::test]
async fn mutate_pins_tags_of_init_containers_and_leaves_digests_alone() {
    let (router, _) = app(FakeJudge::new());
    let (_, answer) = post(&router, "/mutate", fixture("pod_good.json")).await;
    let resp = response(&answer);
    let init = "registry.test/team/init:1";
    let app = "registry.test/team/app:1.0";
    assert_eq!(
        patch(resp),
        json!([
            {"op": "replace", "path": "/spec/initContainers/0/image", "value": format!("{init}@{}", digest_of(init))},
            {"op": "replace", "path": "/spec/containers/0/image", "value": format!("{app}@{}", digest_of(app))},
        ])
    );
}

#[tokio::test]
async fn mutate_leaves_images_no_policy_selects_unpinned() {
    let mut body: Value = serde_json::from_slice(&fixture("pod_good.json")).unwrap();
    body["request"]["object"]["spec"]["initContainers"][0]["image"] =
        json!("registry.test/unmatched/init:1");
    let (router, _) = app(FakeJudge::new());
    let (_, answer) = post(&router, "/mutate", serde_json::to_vec(&body).unwrap()).await;
    let p = patch(response(&answer));
    assert_eq!(p.as_array().map(Vec::len), Some(1), "{p}");
    assert_eq!(p[0]["path"], "/spec/containers/0/image");
}

#[tokio::test]
async fn pin_mode_off_mutates_nothing() {
    let mut cfg = config();
    cfg.pin = sigil_webhook::admit::PinMode::Off;
    let (router, _) = app_with(FakeJudge::new(), cfg);
    let (_, answer) = post(&router, "/mutate", fixture("pod_good.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], true);
    assert!(resp.get("patch").is_none(), "{resp}");
}

#[tokio::test]
async fn the_ephemeralcontainers_subresource_is_verified() {
    let (router, _) = app(FakeJudge::new());
    let (_, answer) = post(
        &router,
        "/validate",
        fixture("pod_ephemeralcontainers.json"),
    )
    .await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false);
    assert_eq!(resp["uid"], "pod-eph");
    assert!(
        message(resp).contains("ephemeral container debug"),
        "{resp}"
    );
    let (_, answer) = post(&router, "/mutate", fixture("pod_ephemeralcontainers.json")).await;
    let p = patch(response(&answer));
    assert_eq!(p[0]["path"], "/spec/ephemeralContainers/0/image", "{p}");
}

#[tokio::test]
async fn delete_status_and_scale_requests_are_allowed_without_asking_the_judge() {
    for name in [
        "pod_delete.json",
        "pod_status.json",
        "deployment_scale.json",
    ] {
        let judge = FakeJudge::new();
        let (router, _) = app(judge.clone());
        for path in ["/validate", "/mutate"] {
            let (status, answer) = post(&router, path, fixture(name)).await;
            assert_eq!(status, StatusCode::OK);
            let resp = response(&answer);
            assert_eq!(resp["allowed"], true, "{name} {path}: {resp}");
            assert!(resp.get("patch").is_none());
        }
        assert_eq!(judge.calls(), 0, "{name}");
        assert_eq!(
            judge
                .resolve_calls
                .load(std::sync::atomic::Ordering::SeqCst),
            0
        );
    }
}

#[tokio::test]
async fn an_update_that_changes_no_image_is_skipped() {
    let judge = FakeJudge::new();
    let (router, _) = app(judge.clone());
    let (_, answer) = post(
        &router,
        "/validate",
        fixture("deployment_update_unchanged.json"),
    )
    .await;
    assert_eq!(response(&answer)["allowed"], true);
    assert_eq!(judge.calls(), 0);
}

#[tokio::test]
async fn an_update_that_changes_an_image_is_verified() {
    let judge = FakeJudge::new();
    let (router, _) = app(judge.clone());
    let (_, answer) = post(
        &router,
        "/validate",
        fixture("deployment_update_image.json"),
    )
    .await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false);
    assert!(
        message(resp).contains("registry.test/team/unsigned:2.1"),
        "{resp}"
    );
}

#[tokio::test]
async fn kube_system_and_sigil_s_own_namespace_are_never_acted_on() {
    for name in ["pod_kube_system.json", "pod_own_namespace.json"] {
        let judge = FakeJudge::new();
        let (router, _) = app(judge.clone());
        let (_, answer) = post(&router, "/validate", fixture(name)).await;
        assert_eq!(response(&answer)["allowed"], true, "{name}");
        assert_eq!(judge.calls(), 0, "{name}");
    }
}

#[tokio::test]
async fn a_kind_sent_without_a_workload_kind_for_it_is_refused_unread() {
    // Only a WorkloadKind's rule sends other kinds; one the webhook has not
    // loaded yet is not admitted with its images unread.
    let judge = FakeJudge::new();
    let (router, _) = app(judge.clone());
    let (_, answer) = post(&router, "/validate", fixture("configmap.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false);
    let message = resp["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "was sent an object of kind ConfigMap (core/v1) but its policy snapshot holds no WorkloadKind"
        ),
        "{message}"
    );
    assert_eq!(judge.calls(), 0);
}

#[tokio::test]
async fn warn_mode_failures_admit_with_warnings() {
    let (router, _) = app(FakeJudge::new());
    let (_, answer) = post(&router, "/validate", fixture("pod_warn.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], true);
    let w = warnings(resp);
    assert!(
        w.iter().any(|x| x.starts_with(
            "image registry.test/legacy/warn-only:1: policy legacy (mode: warn) failed"
        )),
        "{w:?}"
    );
}

#[tokio::test]
async fn a_judge_slower_than_the_deadline_is_a_denial_with_the_cause() {
    let mut cfg = config();
    cfg.timeout = Duration::from_secs(1);
    cfg.margin = Duration::from_millis(700);
    let (router, _) = app_with(FakeJudge::new(), cfg);
    let started = std::time::Instant::now();
    let (status, answer) = post(&router, "/validate", fixture("pod_slow.json")).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered at the deadline"
    );
    assert_eq!(status, StatusCode::OK);
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false);
    let msg = message(resp);
    assert!(
        msg.contains("verification did not finish within the admission deadline"),
        "{msg}"
    );
    assert!(msg.contains("raise the webhook's timeoutSeconds"), "{msg}");
}

#[tokio::test]
async fn a_registry_fault_while_pinning_is_a_denial_with_the_cause() {
    let (router, _) = app(FakeJudge::new());
    let (_, answer) = post(&router, "/mutate", fixture("pod_registry_down.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false);
    let msg = message(resp);
    assert!(msg.contains("- image registry.down/team/app:1: cannot pin the tag to a digest: registry registry.down answered 503"), "{msg}");
    let (_, answer) = post(&router, "/validate", fixture("pod_registry_down.json")).await;
    let msg = message(response(&answer));
    assert!(
        msg.contains("cannot resolve the tag to a digest: registry registry.down answered 503"),
        "{msg}"
    );
}

#[tokio::test]
async fn an_image_no_policy_selects_follows_the_judge_s_no_match_verdict() {
    let mut body: Value = serde_json::from_slice(&fixture("pod_warn.json")).unwrap();
    body["request"]["object"]["spec"]["containers"][0]["image"] =
        json!("registry.test/unmatched/x:1");
    let judge = FakeJudge::new();
    let (router, _) = app(judge.clone());
    let (_, answer) = post(&router, "/validate", serde_json::to_vec(&body).unwrap()).await;
    let msg = message(response(&answer));
    assert!(
        msg.contains("no policy selects registry.test/unmatched/x:1 and noMatchPolicy is deny"),
        "{msg}"
    );
    assert_eq!(judge.calls(), 0);
    assert_eq!(
        judge
            .resolve_calls
            .load(std::sync::atomic::Ordering::SeqCst),
        0,
        "unmatched images are not resolved"
    );
}

#[tokio::test]
async fn malformed_reviews_are_answered_200_with_a_denial_and_their_uid() {
    let cases = [
        (
            "truncated.json",
            "pod-truncated",
            "could not read the AdmissionReview",
        ),
        (
            "malformed_operation.json",
            "pod-malformed",
            "could not read the AdmissionReview",
        ),
        ("no_request.json", "", "no request"),
        ("pod_v1beta1.json", "pod-v1beta1", "admissionReviewVersions"),
    ];
    for (name, uid, needle) in cases {
        let (router, _) = app(FakeJudge::new());
        for path in ["/validate", "/mutate"] {
            let (status, answer) = post(&router, path, fixture(name)).await;
            assert_eq!(status, StatusCode::OK, "{name}");
            let resp = response(&answer);
            assert_eq!(resp["allowed"], false, "{name}");
            assert_eq!(resp["uid"], uid, "{name}");
            assert_eq!(resp["status"]["code"], 400, "{name}");
            assert!(message(resp).contains(needle), "{name}: {resp}");
        }
    }
}

#[tokio::test]
async fn bodies_that_are_not_json_at_all_still_get_an_admission_review() {
    let (router, _) = app(FakeJudge::new());
    for body in [
        Vec::new(),
        b"\xff\xfe garbage".to_vec(),
        b"[1,2,3]".to_vec(),
        b"null".to_vec(),
    ] {
        let (status, answer) = post(&router, "/validate", body).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&answer)["allowed"], false);
    }
}

#[tokio::test]
async fn an_object_whose_containers_are_not_a_list_is_denied_with_the_pointer() {
    let (router, _) = app(FakeJudge::new());
    let (_, answer) = post(
        &router,
        "/validate",
        fixture("pod_containers_not_a_list.json"),
    )
    .await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false);
    assert!(
        message(resp).contains("/spec/containers is not a list of containers"),
        "{resp}"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_answered_200_with_a_denial_and_its_uid() {
    let mut cfg = config();
    cfg.max_body_bytes = 4096;
    let (router, state) = app_with(FakeJudge::new(), cfg);
    // Edited as text so the uid stays first, where the API server writes it.
    let text = String::from_utf8(fixture("pod.json")).unwrap();
    let big = format!(
        "\"annotations\": {{\"big\": \"{}\"}}, \"labels\": {{",
        "x".repeat(100_000)
    );
    let bytes = text.replacen("\"labels\": {", &big, 1).into_bytes();
    assert!(bytes.len() > 100_000);
    // Sent as a stream of chunks without Content-Length, so the server has
    // to stop reading at its limit.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(1000).map(|c| Ok(c.to_vec())).collect();
    let req = axum::http::Request::post("/validate")
        .body(axum::body::Body::from_stream(futures_util::stream::iter(
            chunks,
        )))
        .unwrap();
    let resp = tower::ServiceExt::oneshot(router.clone(), req)
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let answer: Value = serde_json::from_slice(
        &axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap(),
    )
    .unwrap();
    let r = response(&answer);
    assert_eq!(r["allowed"], false);
    assert_eq!(r["uid"], "pod-1");
    assert!(
        message(r).contains("larger than sigil's limit of 4096 bytes"),
        "{r}"
    );
    // With a Content-Length over the limit the body is not read at all.
    let (status, answer) = post(&router, "/validate", bytes).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(response(&answer)["allowed"], false);
    let metrics = state.admission.metrics().encode();
    assert!(metrics.contains(r#"sigil_admission_requests_total{endpoint="validate",operation="unknown",kind="other",decision="invalid"} 2"#), "{metrics}");
}

/// A FakeJudge whose snapshot carries WorkloadKinds for Argo Rollouts and
/// Tekton Tasks.
fn judge_with_workload_kinds() -> std::sync::Arc<FakeJudge> {
    let judge = FakeJudge::new();
    let kinds: Vec<sigil_api::snapshot::SnapshotWorkloadKind> = ["ArgoRollout", "TektonTask"]
        .iter()
        .map(|b| sigil_api::snapshot::SnapshotWorkloadKind {
            name: b.to_lowercase(),
            generation: 1,
            spec: serde_json::from_value(json!({"builtin": b})).unwrap(),
        })
        .collect();
    *judge.workload_kinds.lock().unwrap() = Some(std::sync::Arc::new(
        sigil_webhook::workload_kind::WorkloadKinds::compile(&kinds).unwrap(),
    ));
    judge
}

fn task_review(operation: &str, steps: Value, old_steps: Option<Value>) -> Vec<u8> {
    let object = |steps: &Value| {
        json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
            "metadata": {"name": "build", "namespace": "ci"}, "spec": {"steps": steps}})
    };
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "task-1",
            "kind": {"group": "tekton.dev", "version": "v1", "kind": "Task"},
            "resource": {"group": "tekton.dev", "version": "v1", "resource": "tasks"},
            "name": "build", "namespace": "ci", "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object(&steps),
            "oldObject": old_steps.as_ref().map(object),
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn a_workload_kind_s_image_fields_are_denied_by_field_path_and_pinned_like_templates() {
    let judge = judge_with_workload_kinds();
    let (router, _) = app(judge.clone());
    let steps = json!([
        {"name": "compile", "image": "registry.test/team/app:1.0"},
        {"name": "push", "image": "registry.test/team/unsigned:2.0"}]);
    let (_, answer) = post(
        &router,
        "/validate",
        task_review("CREATE", steps.clone(), None),
    )
    .await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{resp}");
    let msg = message(resp);
    assert!(
        msg.starts_with("sigil denied task ci/build: 1 of 2 image(s)"),
        "{msg}"
    );
    assert!(
        msg.contains("- image registry.test/team/unsigned:2.0 (sha256:"),
        "{msg}"
    );
    assert!(msg.contains("field spec.steps[1].image): policy"), "{msg}");

    // Pinned only with --pin-templates, as workload templates are: the
    // Pods the kind's controller creates are pinned when they are created.
    let (_, answer) = post(
        &router,
        "/mutate",
        task_review("CREATE", steps.clone(), None),
    )
    .await;
    assert!(response(&answer).get("patch").is_none(), "{answer}");
    let (router, _) = app_with(
        judge_with_workload_kinds(),
        sigil_webhook::admit::AdmissionConfig {
            pin_templates: true,
            ..config()
        },
    );
    let (_, answer) = post(
        &router,
        "/mutate",
        task_review("CREATE", steps.clone(), None),
    )
    .await;
    let good = "registry.test/team/app:1.0";
    let bad = "registry.test/team/unsigned:2.0";
    assert_eq!(
        patch(response(&answer)),
        json!([
            {"op": "replace", "path": "/spec/steps/0/image", "value": format!("{good}@{}", digest_of(good))},
            {"op": "replace", "path": "/spec/steps/1/image", "value": format!("{bad}@{}", digest_of(bad))},
        ])
    );

    // An update that changes no image is skipped, as for Kubernetes' kinds.
    let calls = judge.calls();
    let (router, _) = app(judge.clone());
    let (_, answer) = post(
        &router,
        "/validate",
        task_review("UPDATE", steps.clone(), Some(steps)),
    )
    .await;
    assert_eq!(response(&answer)["allowed"], true, "{answer}");
    assert_eq!(judge.calls(), calls, "nothing judged");
}

#[tokio::test]
async fn a_rollout_is_judged_through_its_pod_template_and_a_kind_without_a_workload_kind_is_refused()
 {
    let judge = judge_with_workload_kinds();
    let (router, _) = app(judge.clone());
    let mut review: Value = serde_json::from_slice(&fixture("deployment.json")).unwrap();
    review["request"]["kind"] =
        json!({"group": "argoproj.io", "version": "v1alpha1", "kind": "Rollout"});
    review["request"]["resource"] =
        json!({"group": "argoproj.io", "version": "v1alpha1", "resource": "rollouts"});
    review["request"]["object"]["apiVersion"] = json!("argoproj.io/v1alpha1");
    review["request"]["object"]["kind"] = json!("Rollout");
    let (_, answer) = post(&router, "/validate", serde_json::to_vec(&review).unwrap()).await;
    let msg = message(response(&answer));
    assert!(msg.starts_with("sigil denied rollout "), "{msg}");
    assert!(msg.contains("container helper"), "{msg}");
    assert_eq!(judge.calls(), 2, "both images judged");

    review["request"]["kind"]["kind"] = json!("AnalysisRun");
    let (_, answer) = post(&router, "/validate", serde_json::to_vec(&review).unwrap()).await;
    assert_eq!(response(&answer)["allowed"], false, "{answer}");
    let msg = message(response(&answer));
    assert!(
        msg.contains("was sent an object of kind AnalysisRun (argoproj.io/v1alpha1) but its policy snapshot holds no WorkloadKind"),
        "{msg}"
    );
    assert_eq!(
        judge.calls(),
        2,
        "a kind no WorkloadKind names is refused unread, not judged"
    );
}
