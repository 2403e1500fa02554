//! Test-only access to the sigstore-conformance cases, read at run time
//! (never copied into the repository; `sigil-testdata` finds them). Missing
//! material is a test failure, not a skip: a test that silently checks
//! nothing is worse than none.

use std::path::PathBuf;

use crate::bundle::{Bundle, SigningMaterial};
use crate::trust::TrustedRoot;
use crate::x509::Certificate;

/// The sigstore-conformance `bundle-verify` directory. When it is nowhere,
/// the test fails with `sigil-testdata`'s message: where it looked and what
/// to run.
pub(crate) fn conformance_dir() -> PathBuf {
    sigil_testdata::sigstore_conformance().unwrap_or_else(|missing| panic!("{missing}"))
}

/// A conformance case's parsed bundle.
pub(crate) fn case_bundle(case: &str) -> Bundle {
    let json = std::fs::read(conformance_dir().join(case).join("bundle.sigstore.json"))
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    Bundle::from_json(&json).unwrap_or_else(|e| panic!("{case}: {e}"))
}

/// A conformance case's trust root: its own `trusted_root.json`, else the
/// embedded public-good root.
pub(crate) fn case_root(case: &str) -> TrustedRoot {
    match std::fs::read_to_string(conformance_dir().join(case).join("trusted_root.json")) {
        Ok(json) => TrustedRoot::from_json(&json).unwrap_or_else(|e| panic!("{case}: {e}")),
        Err(_) => TrustedRoot::public_good().expect("embedded root"),
    }
}

/// The certificates a certificate-based case carries (leaf first) and its
/// trust root.
pub(crate) fn case_leaf_and_root(case: &str) -> (Vec<Certificate>, TrustedRoot) {
    let certs = match case_bundle(case).signing {
        SigningMaterial::Certificates(c) => c,
        SigningMaterial::PublicKey { .. } => panic!("{case} is not certificate-based"),
    };
    (certs, case_root(case))
}
