//! Property tests: no input, however malformed, makes parsing or verification
//! panic. Inputs are random bytes and mutations of real conformance bundles and
//! trust roots (read from ../shared at run time).

// Test and benchmark glue: a failed fixture load should abort loudly.
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::path::PathBuf;

use base64::Engine as _;
use proptest::prelude::*;
use sigil_verifier::bundle::Bundle;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{Artifact, VerificationPolicy, verify_bundle};
use sigil_verifier::x509::Certificate;

fn case(name: &str) -> PathBuf {
    // Where the cases are, or a message saying where it looked and what to run.
    sigil_testdata::sigstore_conformance()
        .unwrap_or_else(|missing| panic!("{missing}"))
        .join(name)
        .join("bundle.sigstore.json")
}

const CASES: &[&str] = &[
    "happy-path-v0.1",
    "happy-path-v0.2",
    "happy-path-v0.3",
    "happy-path-intoto-in-dsse-v3",
    "rekor2-happy-path",
    "rekor2-dsse-happy-path",
    "managed-key-happy-path",
];

fn bundles() -> Vec<String> {
    CASES
        .iter()
        .map(|c| std::fs::read_to_string(case(c)).expect("conformance bundle"))
        .collect()
}

fn policy() -> VerificationPolicy {
    VerificationPolicy::keyless(IdentityPolicy {
        subject: IdentityMatcher::Regex(regex::Regex::new(".*").expect("regex")),
        issuer: IdentityMatcher::Regex(regex::Regex::new(".*").expect("regex")),
        claims: Vec::new(),
    })
}

/// Every JSON string leaf of a value, as a path of keys/indices.
fn string_paths(v: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                path.push(k.clone());
                string_paths(v, path, out);
                path.pop();
            }
        }
        serde_json::Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                path.push(i.to_string());
                string_paths(v, path, out);
                path.pop();
            }
        }
        serde_json::Value::String(_) => out.push(path.clone()),
        _ => {}
    }
}

fn at_mut<'a>(v: &'a mut serde_json::Value, path: &[String]) -> Option<&'a mut serde_json::Value> {
    path.iter().try_fold(v, |v, k| match v {
        serde_json::Value::Object(m) => m.get_mut(k),
        serde_json::Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    })
}

fn run(json: &[u8], root: &TrustedRoot) {
    if let Ok(b) = Bundle::from_json(json) {
        let now = time::OffsetDateTime::now_utc();
        let _ = verify_bundle(&b, Artifact::Bytes(b"x"), &policy(), root, now);
        let _ = verify_bundle(&b, Artifact::Sha256([0; 32]), &policy(), root, now);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_any_parser(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Bundle::from_json(&data);
        let _ = TrustedRoot::from_json(&String::from_utf8_lossy(&data));
        let _ = Certificate::from_der(&data);
        let _ = sigil_verifier::crypto::PublicKey::from_spki_der(&data);
        let _ = sigil_verifier::checkpoint::parse_checkpoint(&String::from_utf8_lossy(&data));
        if let Ok(root) = TrustedRoot::public_good() {
            let _ = sigil_verifier::tsa::verify_rfc3161(&data, b"sig", &root);
        }
    }

    #[test]
    fn mutated_text_of_real_bundles_never_panics(which in 0..CASES.len(), pos in any::<usize>(), byte in any::<u8>()) {
        let root = TrustedRoot::public_good().expect("embedded root");
        let mut json = bundles()[which].clone().into_bytes();
        let i = pos % json.len();
        json[i] = byte;
        run(&json, &root);
    }

    #[test]
    fn mutated_decoded_fields_of_real_bundles_never_panic(
        which in 0..CASES.len(),
        field in any::<usize>(),
        pos in any::<usize>(),
        byte in any::<u8>(),
        truncate in any::<bool>(),
    ) {
        let root = TrustedRoot::public_good().expect("embedded root");
        let mut v: serde_json::Value = serde_json::from_str(&bundles()[which]).expect("json");
        let mut paths = Vec::new();
        string_paths(&v, &mut Vec::new(), &mut paths);
        let path = &paths[field % paths.len()];
        if let Some(serde_json::Value::String(s)) = at_mut(&mut v, path) {
            let b64 = base64::engine::general_purpose::STANDARD;
            let mut raw = b64.decode(s.as_bytes()).unwrap_or_else(|_| s.clone().into_bytes());
            if !raw.is_empty() {
                let i = pos % raw.len();
                if truncate { raw.truncate(i); } else { raw[i] ^= byte | 1; }
            }
            *s = b64.encode(&raw);
        }
        run(v.to_string().as_bytes(), &root);
    }

    #[test]
    fn mutated_trust_roots_never_panic(pos in any::<usize>(), byte in any::<u8>()) {
        let mut json = sigil_verifier::trust::PUBLIC_GOOD_JSON.as_bytes().to_vec();
        let i = pos % json.len();
        json[i] = byte;
        if let Ok(root) = TrustedRoot::from_json(&String::from_utf8_lossy(&json)) {
            run(bundles()[0].as_bytes(), &root);
        }
    }
}
