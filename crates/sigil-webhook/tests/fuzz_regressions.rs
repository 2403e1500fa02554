//! The `admission_review` fuzz target's properties (`tests/fuzz/admission.rs`,
//! shared with `fuzz/`) on stable: every AdmissionReview fixture of this
//! crate goes through both endpoints with the target's fake judge:
//! `/validate` never allows an image the judge did not approve, `/mutate`
//! only pins images in place, and nothing panics. Inputs the fuzzer fails on
//! are to be kept next to the fixtures and replayed the same way.
#![allow(clippy::panic)]

#[path = "fuzz/admission.rs"]
mod admission;

use std::path::{Path, PathBuf};

fn files_in(dir: &str, extension: Option<&str>) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| extension.is_none_or(|x| p.extension().is_some_and(|e| e == x)))
        .collect();
    files.sort();
    files
}

fn failures(files: &[PathBuf]) -> Vec<String> {
    files
        .iter()
        .filter_map(|path| {
            let body = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            std::panic::catch_unwind(|| admission::check(&body))
                .err()
                .map(|_| path.display().to_string())
        })
        .collect()
}

#[test]
fn every_admission_review_fixture_keeps_the_admission_properties() {
    let fixtures = files_in("tests/data", Some("json"));
    assert!(
        fixtures.len() >= 20,
        "expected the crate's AdmissionReview fixtures under tests/data, found {}",
        fixtures.len()
    );
    let failed = failures(&fixtures);
    assert!(
        failed.is_empty(),
        "the admission properties fail on these fixtures (see the panics above): {failed:?}"
    );
}
