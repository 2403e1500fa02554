//! The sigstore-conformance bundle-verification cases, run in-process through
//! the library API (the CLI run of the same cases is `make conformance`).
//! The case files stay in ../shared; they are read at run time, never copied.

// Test and benchmark glue: a failed fixture load should abort loudly.
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs
)]

use std::path::Path;

use sigil_verifier::bundle::Bundle;
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{Artifact, VerificationPolicy, verify_bundle};

const DEFAULT_IDENTITY: &str = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main";
const DEFAULT_ISSUER: &str = "https://token.actions.githubusercontent.com";

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

/// Runs one case of `cases`; `Ok` means verified.
fn run_case(cases: &Path, dir: &Path, digest_mode: bool) -> Result<(), String> {
    let root = match std::fs::read_to_string(dir.join("trusted_root.json")) {
        Ok(json) => TrustedRoot::from_json(&json).map_err(|e| e.to_string())?,
        Err(_) => TrustedRoot::public_good().map_err(|e| e.to_string())?,
    };
    let bundle_json = std::fs::read(dir.join("bundle.sigstore.json")).map_err(|e| e.to_string())?;
    let bundle = Bundle::from_json(&bundle_json).map_err(|e| e.to_string())?;
    let policy = match read_trimmed(&dir.join("key.pub")) {
        Some(pem) => VerificationPolicy::key(PublicKey::from_pem(&pem).map_err(|e| e.to_string())?),
        None => VerificationPolicy::keyless(IdentityPolicy {
            subject: IdentityMatcher::Exact(
                read_trimmed(&dir.join("identity")).unwrap_or_else(|| DEFAULT_IDENTITY.into()),
            ),
            issuer: IdentityMatcher::Exact(
                read_trimmed(&dir.join("issuer")).unwrap_or_else(|| DEFAULT_ISSUER.into()),
            ),
            claims: Vec::new(),
        }),
    };
    let artifact_path = if dir.join("artifact").exists() {
        dir.join("artifact")
    } else {
        cases.join("a.txt")
    };
    let bytes = std::fs::read(artifact_path).map_err(|e| e.to_string())?;
    let artifact = if digest_mode {
        Artifact::Sha256(sigil_verifier::crypto::sha256(&bytes))
    } else {
        Artifact::Bytes(&bytes)
    };
    verify_bundle(
        &bundle,
        artifact,
        &policy,
        &root,
        time::OffsetDateTime::now_utc(),
    )
    .map(|_| ())
    .map_err(|e| e.to_string())
}

#[test]
fn every_conformance_case_gets_the_expected_verdict_in_path_and_digest_mode()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = sigil_testdata::sigstore_conformance()?;
    let mut names: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names.len() >= 70,
        "expected the full conformance suite, found {} cases",
        names.len()
    );
    let mut wrong = Vec::new();
    for name in &names {
        let expect_ok = !name.ends_with("_fail");
        for digest_mode in [false, true] {
            let got = run_case(&dir, &dir.join(name), digest_mode);
            if got.is_ok() != expect_ok {
                wrong.push(format!(
                    "{name} ({}): expected {}, got {:?}",
                    if digest_mode { "digest" } else { "path" },
                    if expect_ok { "verified" } else { "rejected" },
                    got
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong verdicts:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    Ok(())
}
