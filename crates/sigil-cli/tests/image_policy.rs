//! A namespace's ImagePolicy in `sigil policy test` and `sigil policy lint`:
//! it applies in the namespace given with `--namespace` only, on top of
//! the ClusterImagePolicies, and lint refuses what it may not name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{scratch, sigil};

const IMAGE: &str = "registry.test/shop/app@sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

const POLICIES: &str = r#"apiVersion: policy.sigil.dev/v1alpha1
kind: ClusterImagePolicy
metadata: {name: open}
spec:
  images: [{glob: "registry.test/**"}]
  authorities: [{name: gate, static: {action: pass}}]
---
apiVersion: policy.sigil.dev/v1alpha1
kind: ImagePolicy
metadata: {name: stricter, namespace: team-a}
spec:
  images: [{glob: "registry.test/**"}]
  authorities: [{name: gate, static: {action: fail}}]
"#;

#[test]
fn policy_test_applies_an_image_policy_in_its_namespace_only() {
    let dir = scratch("test");
    let file = dir.join("policies.yaml");
    std::fs::write(&file, POLICIES).unwrap();
    let file = file.to_str().unwrap();

    let (code, out) = sigil(
        &dir,
        &[
            "policy",
            "test",
            "--policy",
            file,
            "--namespace",
            "team-a",
            IMAGE,
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("policy team-a/stricter failed: authority gate (static): disallowed"),
        "{out}"
    );

    for namespace in ["team-b", "default"] {
        let (code, out) = sigil(
            &dir,
            &[
                "policy",
                "test",
                "--policy",
                file,
                "--namespace",
                namespace,
                IMAGE,
            ],
        );
        assert_eq!(code, Some(0), "{namespace}: {out}");
    }
}

#[test]
fn lint_refuses_an_image_policy_reaching_outside_its_namespace() {
    let dir = scratch("lint");
    let file = dir.join("borrow.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: policy.sigil.dev/v1alpha1
kind: ImagePolicy
metadata: {name: borrow, namespace: team-a}
spec:
  images: [{glob: "**"}]
  authorities:
    - key: {secretRef: {name: release-key, namespace: sigil-system}}
"#,
    )
    .unwrap();
    let (code, out) = sigil(&dir, &["policy", "lint", file.to_str().unwrap()]);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains(
            "spec.authorities[0].key.secretRef: Secret sigil-system/release-key is outside the \
             ImagePolicy's namespace `team-a`"
        ),
        "{out}"
    );
}
