//! A WorkloadKind path over an object made to be wide — a million empty
//! Tekton steps, about 3 MiB of JSON — is refused at its match bound
//! having made that many matches, not a million: the bound is checked
//! before each match is allocated. Measured by this process's peak RSS
//! (VmHWM, reset through /proc/self/clear_refs), so one test in its own
//! binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use sigil_compile::workload_kind::{FieldPath, MAX_MATCHES};
use sigil_testkit::peak;

#[test]
fn a_million_items_under_a_wildcard_cost_the_match_bound_not_a_million_matches() {
    let steps: Vec<Value> = (0..1_000_000).map(|_| json!({})).collect();
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                      "spec": {"steps": steps}});
    let path = FieldPath::parse("spec.steps[*].image").unwrap();
    let every_step = FieldPath::parse("spec.steps[*]").unwrap();

    peak::reset().unwrap();
    let before = peak::kib().unwrap();
    // The path through the steps to their images: each step is a match of
    // the wildcard, before `image` is looked up.
    let refused = path.reach(&task).unwrap_err();
    let refused_too = every_step.reach(&task).unwrap_err();
    let grown_mib = (peak::kib().unwrap() - before) as f64 / 1024.0;

    assert_eq!(refused.path, "spec.steps[*].image");
    assert_eq!(refused_too.path, "spec.steps[*]");
    println!("a million steps: refused at {MAX_MATCHES} matches; peak RSS grew {grown_mib:.1} MiB");
    // Unbounded, each of the million matches holds two strings (its JSON
    // pointer and path) and a reference: well over 100 MiB.
    assert!(
        grown_mib < 8.0,
        "reaching a million items grew the peak RSS by {grown_mib:.1} MiB"
    );
}
