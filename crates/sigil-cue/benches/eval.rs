//! What one CUE evaluation costs in the engine sigil ships (wasmi running
//! cuelang.org/go): criterion on three policies users write (two from
//! policy-controller's examples, one with a regex) and a pass over every
//! corpus case that sigil judges as `cue vet` does, printed as median and
//! p90 per evaluation (wall time: on a shared machine, read it with the
//! load average). `make
//! bench-cue`; the module comes from `scripts/build-cue-wasm.sh` or
//! $SIGIL_CUE_MODULE.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use serde_json::Value;
use sigil_cue::{CueEngine, testing};

struct Case {
    name: String,
    policy: String,
    input: Vec<u8>,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// The case's policy: inline, or a field of one of policy-controller's
/// example files (read from the public test data, never copied).
fn policy_of(dir: &Path) -> String {
    if let Ok(text) = std::fs::read_to_string(dir.join("policy.cue")) {
        return text;
    }
    let reference: Value =
        serde_json::from_slice(&std::fs::read(dir.join("policy-ref.json")).unwrap()).unwrap();
    let data = sigil_testdata::policy_controller_testdata().unwrap_or_else(|e| panic!("{e}"));
    let file = data.join(reference["file"].as_str().unwrap());
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(&file).unwrap()).unwrap();
    docs[0]
        .pointer(reference["pointer"].as_str().unwrap())
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{}: no CUE text at {reference}", file.display()))
        .to_owned()
}

/// Every case sigil judges as `cue vet` does; those with a deliberate
/// `sigil` verdict are left out (three exist to hit the time and memory
/// bounds, so they would measure the bounds, not evaluation).
fn cases() -> Vec<Case> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .filter_map(|dir| {
            let meta: Value =
                serde_json::from_slice(&std::fs::read(dir.join("case.json")).unwrap()).unwrap();
            meta.get("sigil").is_none().then(|| Case {
                name: dir.file_name().unwrap().to_string_lossy().into_owned(),
                policy: policy_of(&dir),
                input: std::fs::read(dir.join("input.json")).unwrap(),
            })
        })
        .collect()
}

fn engine() -> CueEngine {
    let engine = testing::engine().unwrap_or_else(|e| panic!("{e}"));
    engine.load().unwrap_or_else(|e| panic!("{e}"));
    engine
}

fn single(c: &mut Criterion) {
    let engine = engine();
    let cases = cases();
    let mut group = c.benchmark_group("cue");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(5));
    for (label, name) in [
        ("evaluate/vuln_window_pass", "005-vuln-window-pass"),
        ("evaluate/cip_two_signatures_pass", "031-cip-two-pass"),
        ("evaluate/regex_fail", "058-x-regex-fail"),
    ] {
        let case = cases.iter().find(|c| c.name == name).unwrap();
        group.bench_function(label, |b| {
            b.iter(|| engine.evaluate(&case.policy, &case.input))
        });
    }
    group.finish();
}

/// Median and p90 of single evaluations over the whole corpus, each case
/// evaluated `ROUNDS` times after one warm-up round.
fn corpus_summary() {
    const ROUNDS: usize = 5;
    let engine = engine();
    let cases = cases();
    for case in &cases {
        let _ = engine.evaluate(&case.policy, &case.input);
    }
    let mut times: Vec<Duration> = Vec::with_capacity(cases.len() * ROUNDS);
    for _ in 0..ROUNDS {
        for case in &cases {
            let start = Instant::now();
            let _ = engine.evaluate(&case.policy, &case.input);
            times.push(start.elapsed());
        }
    }
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "cue corpus: {} cases x {ROUNDS} rounds, one evaluation: median {:.2?}, p90 {:.2?}, max {:.2?}",
        cases.len(),
        at(0.5),
        at(0.9),
        at(1.0)
    );
}

criterion_group!(benches, single);

fn main() {
    corpus_summary();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
