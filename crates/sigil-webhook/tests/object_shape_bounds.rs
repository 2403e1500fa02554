//! Denial of service by object shape at `/mutate`: an object of a
//! WorkloadKind made as wide as its body allows — a million empty steps
//! under the kind's `spec.steps[*].image`, about 3 MiB — costs no more than
//! reading the review itself. Its path stops at its match bound before
//! making a match too many; unbounded, the million matches (each with its
//! JSON pointer and field path) cost 100–200 MB per review.
//!
//! Measured by this process's peak RSS (VmHWM, reset through
//! /proc/self/clear_refs): the same review with the million items in a
//! field no path reads is the baseline. One test in its own binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::Arc;

use common::{config, message, post, response};
use serde_json::{Value, json};
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::ClientConfig;
use sigil_testkit::peak;
use sigil_verifier::trust::TrustedRoot;
use sigil_webhook::admit::Admission;
use sigil_webhook::metrics::Metrics;
use sigil_webhook::policy_judge::PolicyJudge;
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::{AppState, router};

/// MiB the peak RSS grows by while `f` runs.
async fn peak_growth_mib<F: Future<Output = Value>>(f: F) -> (f64, Value) {
    peak::reset().unwrap();
    let before = peak::kib().unwrap();
    let answer = f.await;
    ((peak::kib().unwrap() - before) as f64 / 1024.0, answer)
}

fn task_review(spec: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "wide-1",
            "kind": {"group": "tekton.dev", "version": "v1", "kind": "Task"},
            "resource": {"group": "tekton.dev", "version": "v1", "resource": "tasks"},
            "name": "wide", "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "mallory"},
            "object": {"apiVersion": "tekton.dev/v1", "kind": "Task",
                       "metadata": {"name": "wide", "namespace": "shop"}, "spec": spec},
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn a_million_empty_steps_cost_mutate_no_more_than_reading_the_review() {
    let client = ClientConfig {
        insecure_hosts: vec!["127.0.0.1:1".into()],
        ..ClientConfig::default()
    };
    let root = TrustedRoot::public_good().unwrap();
    let judge = PolicyJudge::new(client, root, "public-good", NoMatchPolicy::Allow).unwrap();
    let snapshot = json!({
        "apiVersion": "policy.sigil.dev/snapshot/v3", "revision": 1,
        "generatedAt": "2026-01-01T00:00:00Z", "trustRoots": [],
        "policies": [{"name": "gate", "uid": "uid-gate", "generation": 1, "resourceVersion": "1",
            "spec": {"images": [{"glob": "127.0.0.1:1/**"}],
                     "authorities": [{"name": "gate", "static": {"action": "pass"}}]}}],
        "workloadKinds": [{"name": "tasks", "generation": 1, "spec": {
            "group": "tekton.dev", "version": "v1", "kind": "Task", "resource": "tasks",
            "images": ["spec.steps[*].image"]}}],
    });
    judge.apply_bytes(snapshot.to_string().as_bytes()).unwrap();
    let admission = Admission::new(
        Arc::new(judge),
        NoPullSecrets,
        config(),
        Arc::new(Metrics::new()),
    );
    let router = router(AppState::new(admission));

    let empty: Vec<Value> = (0..1_000_000).map(|_| json!({})).collect();
    let read_only = task_review(json!({"notRead": empty}));
    let wide = task_review(json!({"steps": empty}));
    drop(empty);
    assert!(wide.len() < 4 << 20, "{} bytes", wide.len());

    // The baseline: the same bytes, in a field no path reads.
    let (baseline, answer) =
        peak_growth_mib(async { post(&router, "/mutate", read_only.clone()).await.1 }).await;
    assert_eq!(response(&answer)["allowed"], true, "{answer}");

    let (wide_growth, answer) =
        peak_growth_mib(async { post(&router, "/mutate", wide.clone()).await.1 }).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{answer}");
    let text = message(resp);
    assert!(
        text.contains("spec.steps[*].image has more than 512 entries"),
        "{text}"
    );
    println!(
        "/mutate of a {:.1} MiB Task: a million steps under spec.steps[*].image grew the peak \
         RSS by {wide_growth:.1} MiB; the same items in a field no path reads by {baseline:.1} MiB",
        wide.len() as f64 / 1048576.0
    );
    assert!(
        wide_growth < baseline + 16.0,
        "reaching a million steps grew the peak RSS by {wide_growth:.1} MiB, reading the review \
         alone by {baseline:.1} MiB"
    );
}
