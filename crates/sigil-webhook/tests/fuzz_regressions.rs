//! Inputs the `admission_review` fuzz target (fuzz/) crashed on, kept as
//! regression tests on stable: each file under
//! `tests/data/fuzz-regressions/admission_review/` goes through both
//! admission endpoints with the fuzz target's fake judge and must satisfy
//! the same properties (`tests/fuzz/admission.rs`): `/validate` never allows
//! an image the judge did not approve, `/mutate` only pins images in place.

#[path = "fuzz/admission.rs"]
mod admission;

use std::path::{Path, PathBuf};

fn inputs(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no regression inputs in {}", dir.display());
    files
}

fn check_all(dir: &str) {
    for path in inputs(dir) {
        let body = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let outcome = std::panic::catch_unwind(|| admission::check(&body));
        assert!(
            outcome.is_ok(),
            "{}: the admission properties fail on this input (see the panic above)",
            path.display()
        );
    }
}

#[test]
fn every_admission_input_the_fuzzer_crashed_on_keeps_the_admission_properties() {
    check_all("tests/data/fuzz-regressions/admission_review");
}
