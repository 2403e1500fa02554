//! `sigil verify-bundle` on a bundle of a private Sigstore instance without a
//! transparency log (GitHub-shaped, minted by the testkit): the trusted root
//! decides whether the timestamp alone may prove the signing time, and the
//! certificate-claim flags narrow the accepted signer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;

use sigil_testkit::{BundleSpec, Content, GithubWorkflow, Testkit, TrustRootSpec};

const ARTIFACT: &[u8] = b"sigil verify-bundle private repository artifact\n";
const IDENTITY: &str = "https://github.com/acme/app/.github/workflows/release.yml@refs/heads/main";

fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("verify-bundle-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the artifact, a GitHub-shaped bundle over it, and the instance's
/// timestamp-only trusted root and a root that also lists logs.
fn fixture(test: &str) -> PathBuf {
    let dir = scratch(test);
    let kit = Testkit::github_private(0x22);
    let spec = BundleSpec::github_private(GithubWorkflow::new(
        "acme/app",
        ".github/workflows/release.yml",
        "refs/heads/main",
        "0123456789abcdef0123456789abcdef01234567",
    ));
    let minted = kit
        .sign(
            &spec,
            Content::in_toto(
                ARTIFACT,
                "https://slsa.dev/provenance/v1",
                serde_json::json!({}),
            ),
        )
        .unwrap();
    std::fs::write(dir.join("artifact"), ARTIFACT).unwrap();
    std::fs::write(dir.join("bundle.json"), &minted.json).unwrap();
    std::fs::write(
        dir.join("github.json"),
        kit.trusted_root_json_with(&TrustRootSpec::timestamp_only()),
    )
    .unwrap();
    std::fs::write(dir.join("with-logs.json"), kit.trusted_root_json()).unwrap();
    dir
}

fn verify_bundle(dir: &Path, root: &str, extra: &[&str]) -> (i32, String) {
    let bundle = dir.join("bundle.json");
    let root = dir.join(root);
    let artifact = dir.join("artifact");
    let mut args = vec![
        "verify-bundle",
        "--bundle",
        bundle.to_str().unwrap(),
        "--trusted-root",
        root.to_str().unwrap(),
        "--certificate-identity",
        IDENTITY,
        "--certificate-oidc-issuer",
        "https://token.actions.githubusercontent.com",
    ];
    args.extend_from_slice(extra);
    args.push(artifact.to_str().unwrap());
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(&args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_trusted_root_without_logs_lets_the_timestamp_prove_the_signing_time() {
    let dir = fixture("timestamp");
    let (code, text) = verify_bundle(
        &dir,
        "github.json",
        &[
            "--insecure-ignore-sct",
            "--certificate-claim",
            "sourceRepositoryURI=https://github.com/acme/app",
            "--certificate-claim-regexp",
            "sourceRepositoryRef=^refs/heads/main$",
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("Verified OK"), "{text}");
    assert!(
        text.contains(
            "signed at: 2025-10-09T08:53:21Z (RFC 3161 timestamp from https://timestamp.githubapp.test/"
        ),
        "{text}"
    );
    assert!(
        text.contains("log:       none (the trusted root lists no transparency log)"),
        "{text}"
    );
}

#[test]
fn the_same_bundle_needs_a_log_entry_under_a_trusted_root_that_lists_a_log() {
    let dir = fixture("with-logs");
    let (code, text) = verify_bundle(&dir, "with-logs.json", &["--insecure-ignore-sct"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("bundle has no transparency log entry"),
        "{text}"
    );
}

#[test]
fn without_insecure_ignore_sct_a_certificate_of_an_instance_without_ct_is_refused() {
    let dir = fixture("sct");
    let (code, text) = verify_bundle(&dir, "github.json", &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("the trust root lists no certificate transparency log"),
        "{text}"
    );
    assert!(text.contains("`--insecure-ignore-sct`"), "{text}");
}

#[test]
fn a_claim_of_another_repository_is_refused_naming_the_claim() {
    let dir = fixture("claim");
    let (code, text) = verify_bundle(
        &dir,
        "github.json",
        &[
            "--insecure-ignore-sct",
            "--certificate-github-workflow-repository",
            "acme/other",
        ],
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("githubWorkflowRepository (1.3.6.1.4.1.57264.1.5) is `acme/app`")
            && text.contains("`acme/other`"),
        "{text}"
    );
}
