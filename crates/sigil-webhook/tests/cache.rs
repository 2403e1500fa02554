//! The verdict and digest caches through the router: reuse, invalidation
//! when the judge's policy hash or trust-root version changes, single flight,
//! negative TTL; and the metrics and health endpoints that report on them.

// Test glue: helpers outside #[test] functions may unwrap.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{FakeJudge, app, app_with, config, fixture, post, response};
use futures_util::future::join_all;
use sigil_webhook::server::metrics_router;
use tower::ServiceExt as _;

#[tokio::test]
async fn a_repeated_review_is_answered_from_the_cache_without_the_judge() {
    let judge = FakeJudge::new();
    let (router, _) = app(judge.clone());
    for _ in 0..5 {
        let (_, answer) = post(&router, "/validate", fixture("pod_good.json")).await;
        assert_eq!(response(&answer)["allowed"], true);
    }
    assert_eq!(judge.calls(), 3, "three distinct images, judged once each");
    assert_eq!(
        judge.resolve_calls.load(Ordering::SeqCst),
        2,
        "two tags, resolved once each"
    );
}

#[tokio::test]
async fn a_policy_change_is_never_answered_from_an_old_verdict() {
    let judge = FakeJudge::new();
    let (router, _) = app(judge.clone());
    let (_, answer) = post(&router, "/validate", fixture("pod.json")).await;
    assert!(common::message(response(&answer)).contains("team-policy@p1"));
    assert_eq!(judge.calls(), 2);
    judge.set_versions("p2", "t1");
    let (_, answer) = post(&router, "/validate", fixture("pod.json")).await;
    let msg = common::message(response(&answer));
    assert!(
        msg.contains("team-policy@p2"),
        "the new policy decided: {msg}"
    );
    assert_eq!(judge.calls(), 4);
}

#[tokio::test]
async fn a_trust_root_change_is_never_answered_from_an_old_verdict() {
    let judge = FakeJudge::new();
    let (router, _) = app(judge.clone());
    post(&router, "/validate", fixture("pod_good.json")).await;
    assert_eq!(judge.calls(), 3);
    judge.set_versions("p1", "t2");
    post(&router, "/validate", fixture("pod_good.json")).await;
    assert_eq!(judge.calls(), 6);
    // Tag resolutions do not depend on policies; they stay cached.
    assert_eq!(judge.resolve_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn concurrent_identical_misses_call_the_judge_once_per_image() {
    let judge = FakeJudge::with_delay(Duration::from_millis(200));
    let (router, _) = app(judge.clone());
    let reviews = (0..32).map(|_| post(&router, "/validate", fixture("pod_good.json")));
    for (status, answer) in join_all(reviews).await {
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&answer)["allowed"], true);
    }
    assert_eq!(judge.calls(), 3);
    assert_eq!(judge.resolve_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn denials_are_cached_only_for_the_negative_ttl() {
    let mut cfg = config();
    cfg.cache.negative_ttl = Duration::from_millis(150);
    let judge = FakeJudge::new();
    let (router, _) = app_with(judge.clone(), cfg);
    post(&router, "/validate", fixture("pod.json")).await;
    post(&router, "/validate", fixture("pod.json")).await;
    assert_eq!(judge.calls(), 2, "both verdicts cached at first");
    tokio::time::sleep(Duration::from_millis(400)).await;
    post(&router, "/validate", fixture("pod.json")).await;
    assert_eq!(judge.calls(), 3, "only the denial was judged again");
}

async fn get(router: &axum::Router, path: &str) -> (StatusCode, String) {
    let resp = router
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn metrics_count_requests_by_kind_and_decision_cache_hits_and_latency() {
    let judge = FakeJudge::new();
    let (router, state) = app(judge);
    post(&router, "/validate", fixture("pod.json")).await;
    post(&router, "/validate", fixture("pod.json")).await;
    post(&router, "/mutate", fixture("pod.json")).await;
    post(&router, "/validate", fixture("pod_delete.json")).await;
    let (status, text) = get(&metrics_router(state), "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        r#"sigil_admission_requests_total{endpoint="validate",operation="CREATE",kind="Pod",decision="denied"} 2"#,
        r#"sigil_admission_requests_total{endpoint="mutate",operation="CREATE",kind="Pod",decision="patched"} 1"#,
        r#"sigil_admission_requests_total{endpoint="validate",operation="DELETE",kind="Pod",decision="skipped"} 1"#,
        r#"sigil_cache_requests_total{cache="verdict",result="miss"} 2"#,
        r#"sigil_cache_requests_total{cache="verdict",result="hit"} 2"#,
        r#"sigil_cache_requests_total{cache="digest",result="hit"} 4"#,
        "sigil_verification_duration_seconds_count 2",
        "sigil_admission_in_flight 0",
        "sigil_policy_snapshot_age_seconds 3.0",
        "sigil_policy_snapshot_revision 7",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
}

#[tokio::test]
async fn readyz_follows_the_judge_and_shutdown() {
    let judge = FakeJudge::new();
    let (router, state) = app(judge.clone());
    assert_eq!(get(&router, "/readyz").await.0, StatusCode::OK);
    assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
    judge.ready.store(false, Ordering::SeqCst);
    let (status, body) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("not loaded"), "{body}");
    assert_eq!(
        get(&router, "/healthz").await.0,
        StatusCode::OK,
        "alive while not ready"
    );
    judge.ready.store(true, Ordering::SeqCst);
    state.shutting_down.store(true, Ordering::SeqCst);
    assert_eq!(
        get(&router, "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}
