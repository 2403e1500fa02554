//! The engine's behaviour on the module built from this checkout: verdicts
//! and texts, every bound, instance replacement, concurrency, and the
//! module checks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::engine::check_description;
use crate::guest::Description;
use crate::{CueConfig, CueEngine, CueFailure, Position, testing};

const CUSTOM: &str = r#"{"_type":"https://in-toto.io/Statement/v0.1","predicateType":"https://cosign.sigstore.dev/attestation/v1","subject":[{"name":"","digest":{"sha256":"4a"}}],"predicate":{"Data":"hello","Timestamp":"2026-01-01T00:00:00Z"}}"#;

const DATA_POLICY: &str = "predicateType: \"https://cosign.sigstore.dev/attestation/v1\"\npredicate: {\n  Data: \"hello\"\n}\n";

fn config() -> CueConfig {
    testing::config().unwrap_or_else(|e| panic!("{e}"))
}

/// An engine of its own, for tests that count instances or change bounds.
fn engine_with(change: impl FnOnce(&mut CueConfig)) -> CueEngine {
    let mut config = config();
    change(&mut config);
    CueEngine::new(config)
}

fn shared_engine() -> CueEngine {
    testing::engine().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_satisfied_policy_passes_and_a_violated_one_fails_with_cosigns_text() {
    let engine = shared_engine();
    engine.evaluate(DATA_POLICY, CUSTOM.as_bytes()).unwrap();

    let other = CUSTOM.replace("\"hello\"", "\"bye\"");
    let failure = engine.evaluate(DATA_POLICY, other.as_bytes()).unwrap_err();
    assert_eq!(
        failure.to_string(),
        "failed to evaluate the policy with error: predicate.Data: conflicting values \"bye\" and \"hello\""
    );
    let CueFailure::Violation(d) = &failure else {
        panic!("{failure:?}")
    };
    assert_eq!(d.errors.len(), 1);
    assert_eq!(d.errors[0].path, "predicate.Data");
    assert_eq!(
        d.first_position(),
        Some(Position { line: 3, column: 9 }),
        "the position is in the policy, not the document"
    );
}

#[test]
fn a_field_the_document_lacks_is_added_not_required() {
    // Validate() without Concrete: an absent field with a bound passes, as
    // in policy-controller (and unlike `cue vet` on a JSON file).
    let policy = "import \"time\"\npredicate: Missing: <time.Parse(time.RFC3339, \"2049-10-09T17:10:27Z\")\n";
    shared_engine().evaluate(policy, CUSTOM.as_bytes()).unwrap();
}

#[test]
fn a_policy_that_does_not_compile_alone_fails_with_its_line() {
    let engine = shared_engine();
    let failure = engine.compile("x: \"unterminated\n").unwrap_err();
    assert!(
        failure
            .to_string()
            .starts_with("failed to compile the cue policy with error: "),
        "{failure}"
    );
    assert_eq!(failure.reason(), "policy");
    let d = failure.diagnostics().unwrap();
    assert_eq!(d.first_position().map(|p| p.line), Some(1), "{d:?}");

    // Compiled alone, a reference to a field only the document has does
    // not resolve: the same policy fails at evaluation too.
    let alone = "ok: predicate.Data & \"hello\"\n";
    let failure = engine.compile(alone).unwrap_err();
    assert!(
        failure
            .to_string()
            .contains("reference \"predicate\" not found"),
        "{failure}"
    );
    let failure = engine.evaluate(alone, CUSTOM.as_bytes()).unwrap_err();
    assert!(matches!(failure, CueFailure::Policy(_)), "{failure:?}");
    engine.compile(DATA_POLICY).unwrap();
}

#[test]
fn a_document_that_is_not_cue_fails_at_the_input_stage() {
    let failure = shared_engine()
        .evaluate(DATA_POLICY, b"{\"a\": ")
        .unwrap_err();
    assert!(matches!(failure, CueFailure::Input(_)), "{failure:?}");
    assert!(
        failure
            .to_string()
            .starts_with("failed to compile the attestation data with error: "),
        "{failure}"
    );
}

#[test]
fn a_runaway_policy_is_stopped_at_its_fuel_budget_and_the_instance_replaced() {
    let engine = engine_with(|c| {
        c.workers = 1;
        c.limits.fuel = 3_000_000_000;
        c.limits.time = Duration::from_secs(600);
    });
    let runaway = "import \"list\"\nx: list.Range(0, 20000000, 1)\n";
    let failure = engine.evaluate(runaway, CUSTOM.as_bytes()).unwrap_err();
    assert!(matches!(failure, CueFailure::TimeLimit(_)), "{failure:?}");
    assert!(
        failure.to_string().contains("3000000000 units of fuel"),
        "{failure}"
    );
    let stats = engine.stats();
    assert_eq!(stats.instances_started, 1);
    assert_eq!(
        stats.instances_dropped, 1,
        "a stopped instance is never reused"
    );

    engine.evaluate(DATA_POLICY, CUSTOM.as_bytes()).unwrap();
    let stats = engine.stats();
    assert_eq!(
        stats.instances_started, 2,
        "a fresh instance serves the next request"
    );
    assert_eq!(stats.instances_dropped, 1);
}

#[test]
fn fuel_makes_the_stopping_point_the_same_on_every_run() {
    let engine = engine_with(|c| c.workers = 1);
    engine.evaluate(DATA_POLICY, CUSTOM.as_bytes()).unwrap();
    let first = engine.stats().last_fuel;
    engine.evaluate(DATA_POLICY, CUSTOM.as_bytes()).unwrap();
    let second = engine.stats().last_fuel;
    assert!(first > 0);
    // The Go runtime's own work (its collector) varies a little between
    // runs of one instance; the policy's work does not.
    let spread = first.abs_diff(second) as f64 / first as f64;
    assert!(spread < 0.5, "fuel {first} then {second}");
}

#[test]
fn a_runaway_policy_is_stopped_at_its_wall_clock_limit() {
    let engine = engine_with(|c| {
        c.workers = 1;
        c.limits.fuel = u64::MAX;
        c.limits.time = Duration::from_millis(300);
    });
    let runaway = "import \"list\"\nx: list.Range(0, 200000000, 1)\n";
    let started = Instant::now();
    let failure = engine.evaluate(runaway, CUSTOM.as_bytes()).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(failure, CueFailure::TimeLimit(_)), "{failure:?}");
    assert!(failure.to_string().contains("300ms"), "{failure}");
    // The deadline is checked every ~10 ms of guest work; the first
    // request also starts the instance (not counted against the limit).
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert_eq!(engine.stats().instances_dropped, 1);
}

#[test]
fn a_memory_hog_is_stopped_at_the_memory_limit() {
    let engine = engine_with(|c| {
        c.workers = 1;
        c.limits.memory_bytes = 96 << 20;
    });
    let hog = "import \"strings\"\nx: strings.Repeat(\"a\", 300000000)\n";
    let failure = engine.evaluate(hog, CUSTOM.as_bytes()).unwrap_err();
    assert_eq!(failure, CueFailure::MemoryLimit { mib: 96 }, "{failure}");
    assert_eq!(engine.stats().instances_dropped, 1);
    engine.evaluate(DATA_POLICY, CUSTOM.as_bytes()).unwrap();
}

/// The blow-ups the Rego sandbox is tested against, in CUE: one request
/// for more memory than the instance has, a string doubled forty times, a
/// list of ten million items, a comprehension over ten billion pairs. Each
/// ends at a bound that names itself, and the engine answers the next
/// request. A size no memory could hold (a terabyte) is refused by Go
/// itself, which CUE reports as the policy's error.
#[test]
fn blow_ups_like_the_rego_ones_end_at_a_named_bound() {
    let engine = engine_with(|c| {
        c.workers = 1;
        c.limits = crate::Limits {
            memory_bytes: 96 << 20,
            ..crate::Limits::for_time(Duration::from_secs(1))
        };
    });
    let doubled = (1..=40)
        .map(|i| format!("s{i}: s{0} + s{0}\n", i - 1))
        .collect::<String>();
    let cases = [
        (
            "one huge allocation",
            "import \"strings\"\nx: strings.Repeat(\"a\", 2147483648)\n".to_owned(),
        ),
        ("a doubled string", format!("s0: \"aaaaaaaa\"\n{doubled}")),
        (
            "ten million items",
            "import \"list\"\nx: list.Repeat([1], 10000000)\n".to_owned(),
        ),
        (
            "a comprehension",
            "import \"list\"\nx: [for i in list.Range(0, 100000, 1) for j in list.Range(0, 100000, 1) {i * j}]\n"
                .to_owned(),
        ),
    ];
    for (what, policy) in cases {
        let failure = engine.evaluate(&policy, CUSTOM.as_bytes()).unwrap_err();
        println!("{what}: {failure}");
        assert!(
            matches!(
                failure,
                CueFailure::MemoryLimit { mib: 96 } | CueFailure::TimeLimit(_)
            ),
            "{what}: {failure:?}"
        );
        engine.evaluate(DATA_POLICY, CUSTOM.as_bytes()).unwrap();
    }
    let impossible = "import \"strings\"\nx: strings.Repeat(\"a\", 1099511627776)\n";
    let failure = engine.evaluate(impossible, CUSTOM.as_bytes()).unwrap_err();
    assert!(
        failure.to_string().contains("makeslice: len out of range"),
        "{failure}"
    );
    engine.evaluate(DATA_POLICY, CUSTOM.as_bytes()).unwrap();
}

#[test]
fn oversized_policies_and_documents_are_refused_before_anything_runs() {
    let engine = engine_with(|c| {
        c.limits.max_policy_bytes = 64;
        c.limits.max_input_bytes = 128;
    });
    let failure = engine.evaluate(&"x: 1\n".repeat(20), b"{}").unwrap_err();
    assert_eq!(
        failure,
        CueFailure::PolicyTooLarge {
            size: 100,
            limit: 64
        }
    );
    let failure = engine.evaluate(DATA_POLICY, &[b' '; 200]).unwrap_err();
    assert_eq!(
        failure,
        CueFailure::InputTooLarge {
            size: 200,
            limit: 128
        }
    );
    assert!(!engine.is_loaded(), "the module is not even read");
}

#[test]
fn concurrent_evaluations_each_get_their_own_verdict() {
    let engine = engine_with(|c| c.workers = 2);
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let data = if i % 2 == 0 { "hello" } else { "other" };
                let doc = CUSTOM.replace("\"hello\"", &format!("\"{data}\""));
                (i, engine.evaluate(DATA_POLICY, doc.as_bytes()))
            })
        })
        .collect();
    for t in threads {
        let (i, verdict) = t.join().unwrap();
        if i % 2 == 0 {
            assert_eq!(verdict, Ok(()), "request {i}");
        } else {
            let failure = verdict.unwrap_err();
            assert!(
                failure.to_string().contains("\"other\""),
                "request {i}: {failure}"
            );
        }
    }
    let stats = engine.stats();
    assert_eq!(stats.requests, 8);
    assert!(stats.instances_started <= 2, "{stats:?}");
}

#[test]
fn a_full_queue_refuses_more_requests() {
    let engine = engine_with(|c| {
        c.workers = 1;
        c.queue = 1;
        c.limits.fuel = u64::MAX;
        c.limits.time = Duration::from_secs(2);
    });
    engine.load().unwrap();
    let slow = "import \"list\"\nx: list.Range(0, 200000000, 1)\n";
    let busy = engine.evaluate_async(slow, CUSTOM.as_bytes());
    let waiting = engine.evaluate_async(slow, CUSTOM.as_bytes());
    let refused = engine.evaluate_async(DATA_POLICY, CUSTOM.as_bytes()).wait();
    assert_eq!(refused, Err(CueFailure::Busy(1)));
    drop(waiting);
    assert!(matches!(busy.wait(), Err(CueFailure::TimeLimit(_))));
}

/// Wakes the thread that polls.
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

#[test]
fn an_evaluation_can_be_awaited_without_an_async_runtime_thread() {
    let engine = shared_engine();
    let mut pending = engine.evaluate_async(DATA_POLICY, CUSTOM.as_bytes());
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let verdict = loop {
        match std::pin::Pin::new(&mut pending).poll(&mut cx) {
            Poll::Ready(v) => break v,
            Poll::Pending => std::thread::park_timeout(Duration::from_millis(50)),
        }
    };
    assert_eq!(verdict, Ok(()));
}

#[test]
fn compile_verdicts_are_remembered_by_the_policy_text() {
    let engine = engine_with(|c| c.workers = 1);
    engine.compile(DATA_POLICY).unwrap();
    engine.compile("x: \"broken\n").unwrap_err();
    let before = engine.stats().requests;
    engine.compile(DATA_POLICY).unwrap();
    engine.compile("x: \"broken\n").unwrap_err();
    assert_eq!(engine.stats().requests, before, "no worker was asked again");
}

#[test]
fn a_missing_module_is_unavailable_and_names_its_path() {
    let engine = CueEngine::new(CueConfig::new("/nonexistent/sigil/cue.wasm"));
    let failure = engine.evaluate(DATA_POLICY, CUSTOM.as_bytes()).unwrap_err();
    let text = failure.to_string();
    assert!(
        text.starts_with("this sigil has no CUE module at /nonexistent/sigil/cue.wasm: "),
        "{text}"
    );
    assert!(text.contains("scripts/build-cue-wasm.sh"), "{text}");
    assert!(engine.is_loaded());
}

#[test]
fn a_webassembly_file_that_is_not_the_cue_module_is_refused() {
    let dir = std::env::temp_dir().join(format!("sigil-cue-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty_module = dir.join("empty.wasm");
    std::fs::write(&empty_module, b"\0asm\x01\0\0\0").unwrap();
    let not_wasm = dir.join("text.wasm");
    std::fs::write(&not_wasm, b"hello").unwrap();

    let failure = CueEngine::new(CueConfig::new(&empty_module))
        .load()
        .unwrap_err();
    assert!(
        failure
            .to_string()
            .contains("not sigil's CUE module: it has no export `_initialize`"),
        "{failure}"
    );
    let failure = CueEngine::new(CueConfig::new(&not_wasm))
        .load()
        .unwrap_err();
    assert!(
        failure.to_string().contains("not a WebAssembly module"),
        "{failure}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_module_reports_the_cue_release_policy_controller_uses() {
    let info = shared_engine().load().unwrap();
    assert_eq!(info.cue_version, crate::CUE_VERSION);
    assert_eq!(info.sha256.len(), 64);

    let other = Description {
        abi: 1,
        cue: "v0.17.1".into(),
        go: "go1.26".into(),
    };
    let refusal = check_description(&other).unwrap_err();
    assert!(
        refusal.contains("built from cuelang.org/go v0.17.1"),
        "{refusal}"
    );
    assert!(refusal.contains("v0.15.4"), "{refusal}");
}
