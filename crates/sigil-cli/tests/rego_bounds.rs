//! The Rego bomb of the threat model through the `sigil` command: `sigil
//! policy lint` runs each Rego policy once in the sandbox and refuses one
//! that crosses a bound, naming it and the field; `sigil policy test`
//! denies the image naming the bound instead of aborting (it aborted with
//! "memory allocation of 48000000024 bytes failed" before the sandbox).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{scratch, sigil};

const IMAGE: &str =
    "registry.test/app@sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd";

const BOMBS: &str = r#"apiVersion: policy.sigil.dev/v1alpha1
kind: ClusterImagePolicy
metadata: {name: rego-bomb}
spec:
  images: [{glob: "registry.test/**"}]
  authorities: [{name: anyone, static: {action: pass}}]
  policy:
    type: rego
    data: |
      package sigstore
      isCompliant if count(numbers.range(0, 2000000000)) > 0
---
apiVersion: policy.sigil.dev/v1alpha1
kind: ImagePolicy
metadata: {name: tenant-bomb, namespace: team-a}
spec:
  images: [{glob: "registry.test/**"}]
  authorities:
    - name: ci
      keyless:
        url: https://fulcio.sigstore.dev
        identities: [{issuer: "https://token.actions.githubusercontent.com", subject: "x"}]
      attestations:
        - name: provenance
          predicateType: https://slsa.dev/provenance/v1
          policy:
            type: rego
            data: |
              package sigstore
              isCompliant if sprintf("%0999999999d", [1]) != ""
---
apiVersion: policy.sigil.dev/v1alpha1
kind: ClusterImagePolicy
metadata: {name: harmless}
spec:
  images: [{glob: "other.test/**"}]
  authorities: [{name: anyone, static: {action: pass}}]
  policy:
    type: rego
    data: |
      package sigstore
      isCompliant if input.nothing.here
"#;

#[test]
fn lint_refuses_rego_that_crosses_a_bound_and_policy_test_denies_without_aborting() {
    let dir = scratch("rego-bounds");
    let file = dir.join("bombs.yaml");
    std::fs::write(&file, BOMBS).unwrap();
    let file = file.to_str().unwrap();

    let (code, out) = sigil(&dir, &["policy", "lint", file]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "ClusterImagePolicy rego-bomb: error: spec.policy: evaluated on an empty document, \
             the Rego evaluation exceeded its memory limit of 128 MiB"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "ImagePolicy tenant-bomb: error: spec.authorities[0].attestations[0].policy: \
             evaluated on an empty document, the Rego evaluation exceeded its memory limit of 128 MiB"
        ),
        "{out}"
    );
    assert!(out.contains("ClusterImagePolicy harmless: ok"), "{out}");

    let (code, out) = sigil(&dir, &["policy", "test", "--policy", file, IMAGE]);
    assert_eq!(code, Some(1), "a denial, not an abort: {out}");
    assert!(
        out.contains("policy rego-bomb failed")
            && out.contains("the Rego evaluation exceeded its memory limit of 128 MiB"),
        "{out}"
    );
    assert!(!out.contains("memory allocation of"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}
