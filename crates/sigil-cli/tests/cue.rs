//! `sigil policy lint` and `sigil policy test` with CUE policies, offline:
//! a static authority needs no registry, so the CIP-level CUE policy alone
//! decides. With the module built from this checkout, and without one.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

const IMAGE: &str = "ghcr.io/sigil-dev/demo@sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sigil-cli-cue-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A ClusterImagePolicy that admits the image by a static authority, then
/// asks `cue` (a CIP-level CUE policy) about the authorities' results.
fn write_policy(dir: &Path, cue: &str) -> String {
    let indented: String = cue.lines().map(|l| format!("      {l}\n")).collect();
    let yaml = format!(
        "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata:\n  name: cue-gate\nspec:\n  images:\n  - glob: \"ghcr.io/sigil-dev/**\"\n  authorities:\n  - name: allow\n    static: {{action: pass}}\n  policy:\n    type: cue\n    data: |\n{indented}"
    );
    let path = dir.join("policy.yaml");
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

/// `sigil ARGS` with `module` as the CUE module: exit status and output.
fn sigil(module: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .arg("--cue-module")
        .arg(module)
        .args(args)
        .env("DOCKER_CONFIG", "/nonexistent")
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn module() -> PathBuf {
    sigil_cue::testing::module_path().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn policy_test_admits_and_denies_by_a_cip_level_cue_policy() {
    let dir = scratch("test");
    let admits = write_policy(&dir, "authorityMatches: allow: static: true");
    let (code, out) = sigil(&module(), &["policy", "test", "--policy", &admits, IMAGE]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("allow:"), "{out}");

    // The static authority passed, so the document says `static: true`.
    let denies = write_policy(&dir, "authorityMatches: allow: static: false");
    let (code, out) = sigil(&module(), &["policy", "test", "--policy", &denies, IMAGE]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "failed evaluating cue policy for ClusterImagePolicy: failed to evaluate the policy \
             with error: authorityMatches.allow.static: conflicting values true and false"
        ),
        "{out}"
    );
    // `reviewed` passed no authority, so it is absent from the document and
    // the constraint on it is added, not required: only a wrong value fails.
    let absent_is_fine = write_policy(&dir, "authorityMatches: reviewed: static: true");
    let (code, out) = sigil(
        &module(),
        &["policy", "test", "--policy", &absent_is_fine, IMAGE],
    );
    assert_eq!(code, 0, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lint_reports_a_cue_policy_that_does_not_compile_with_its_line() {
    let dir = scratch("lint");
    let ok = write_policy(&dir, "authorityMatches: allow: static: true");
    let (code, out) = sigil(&module(), &["policy", "lint", &ok]);
    assert_eq!(code, 0, "{out}");

    let broken = write_policy(
        &dir,
        "authorityMatches: allow: static: true\nx: \"unterminated",
    );
    let (code, out) = sigil(&module(), &["policy", "lint", &broken]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("spec.policy.data: failed to compile the cue policy with error:"),
        "{out}"
    );
    assert!(out.contains("(line 2 column"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_the_module_lint_notes_it_and_test_refuses_the_policy() {
    let dir = scratch("missing");
    let missing = dir.join("no-such-cue.wasm");
    let policy = write_policy(&dir, "authorityMatches: allow: static: true");
    let (code, out) = sigil(&missing, &["policy", "lint", &policy]);
    assert_eq!(code, 0, "{out}");
    let expected = format!("this sigil has no CUE module at {}", missing.display());
    assert!(out.contains(&expected), "{out}");

    let (code, out) = sigil(&missing, &["policy", "test", "--policy", &policy, IMAGE]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains(&expected), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}
