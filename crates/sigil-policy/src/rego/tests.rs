//! Rego's language rules, and each bound of the sandbox: a policy that
//! crosses one is an error naming it, the worker that crossed it is
//! replaced, and the next evaluation is answered.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::future::Future as _;
use std::time::Duration;

use serde_json::json;

use super::*;

fn compile(source: &str) -> RegoPolicy {
    RegoPolicy::compile("t", source).unwrap_or_else(|e| panic!("{e}"))
}

/// A sandbox of its own, with `limits`, on the test worker.
fn sandbox(limits: Limits) -> RegoSandbox {
    let mut config = testing::config().unwrap_or_else(|e| panic!("{e}"));
    config.limits = limits;
    config.workers = 1;
    RegoSandbox::new(config)
}

fn in_sandbox(sandbox: &RegoSandbox, body: &str) -> RegoPolicy {
    RegoPolicy::compile_with(sandbox, "t", &format!("package sigstore\n{body}\n"))
        .unwrap_or_else(|e| panic!("{e}"))
}

const PASS: &str = "package sigstore\nisCompliant := true\n";

/// A set of two values built over 2.5 billion iterations: no memory to
/// speak of, only time.
const LOOP: &str = "isCompliant if count({x | some i in numbers.range(1, 50000); \
                    some j in numbers.range(1, 50000); x := (i + j) % 2}) > 5";

/// After a bound was crossed, the sandbox still answers.
async fn still_answers(sandbox: &RegoSandbox) {
    let p = RegoPolicy::compile_with(sandbox, "ok", PASS).unwrap();
    assert!(p.evaluate(&json!({})).await.unwrap().compliant);
}

#[tokio::test]
async fn a_boolean_is_compliant_rule_in_v1_syntax_evaluates() {
    let p = compile(
        "package sigstore\ndefault isCompliant := false\nisCompliant if input.predicate.ok == true\n",
    );
    let ok = p.evaluate(&json!({"predicate": {"ok": true}})).await;
    assert!(ok.unwrap().compliant);
    let not_ok = p.evaluate(&json!({"predicate": {"ok": false}})).await;
    assert!(!not_ok.unwrap().compliant);
}

#[tokio::test]
async fn v0_syntax_as_policy_controller_examples_use_it_is_accepted() {
    let p = compile(
        "package sigstore\ndefault isCompliant = false\nisCompliant {\n  input.predicate.ok == true\n}\n",
    );
    let v = p.evaluate(&json!({"predicate": {"ok": true}})).await;
    assert!(v.unwrap().compliant);
}

#[tokio::test]
async fn an_object_result_carries_error_and_warning() {
    let p = compile(
        r#"package sigstore
isCompliant := {"result": false, "error": "too old", "warning": "check builder"}
"#,
    );
    let v = p.evaluate(&json!({})).await.unwrap();
    assert_eq!(
        v,
        RegoVerdict {
            compliant: false,
            error: Some("too old".into()),
            warning: Some("check builder".into())
        }
    );
}

#[tokio::test]
async fn an_undefined_rule_is_not_compliant() {
    let p = compile("package sigstore\nisCompliant if input.x == 1\n");
    let v = p.evaluate(&json!({})).await.unwrap();
    assert!(!v.compliant);
    assert!(v.error.unwrap().contains("undefined"));
}

#[test]
fn wrong_package_missing_rule_and_syntax_errors_are_refused() {
    let err = RegoPolicy::compile("t", "package other\nisCompliant := true\n").unwrap_err();
    assert!(matches!(err, RegoError::Package { .. }), "{err}");
    assert!(err.to_string().contains("package sigstore"));
    let err = RegoPolicy::compile("t", "package sigstore\nallow := true\n").unwrap_err();
    assert_eq!(err, RegoError::NoRule);
    let err = RegoPolicy::compile("t", "package sigstore\nisCompliant if {{{\n").unwrap_err();
    assert!(matches!(err, RegoError::Parse(_)), "{err}");
}

#[test]
fn a_module_over_the_size_bound_is_refused_naming_it() {
    // A comment fills the module to one byte past the bound.
    let head = "package sigstore\nisCompliant := true\n# ";
    let source = format!("{head}{}", "x".repeat(MAX_MODULE_BYTES + 1 - head.len()));
    let err = RegoPolicy::compile("t", &source).unwrap_err();
    assert_eq!(err, RegoError::TooLarge(MAX_MODULE_BYTES + 1));
    assert!(err.to_string().contains("the limit is 1 MiB"), "{err}");
    // At the bound, the same module compiles.
    compile(&source[..MAX_MODULE_BYTES]);
}

#[test]
fn deeply_nested_modules_are_refused_in_the_compiling_process_without_a_crash() {
    // The parse runs in the process that compiles the policy (the
    // controller, the webhook): nesting deep enough to overflow a recursive
    // parser's stack must be an error there, not an abort.
    // regorus bounds brackets itself; a run of unary minus signs, on one
    // line or over many, is sigil's bound.
    let depth = 200_000;
    for (open, close) in [("[", "]"), ("(", ")"), ("{", "}"), ("-", ""), ("-\n", "")] {
        let source = format!(
            "package sigstore\nisCompliant if count({}1{}) > 0\n",
            open.repeat(depth),
            close.repeat(depth)
        );
        assert!(source.len() < MAX_MODULE_BYTES);
        let err = RegoPolicy::compile("t", &source).unwrap_err();
        assert!(matches!(err, RegoError::Parse(_)), "{open:?}: {err}");
        let bound = if open.starts_with('-') {
            "has more than 32 `-` signs in a row; sigil accepts at most 32"
        } else {
            "nests brackets more than 12 deep; sigil accepts at most 12"
        };
        assert!(err.to_string().contains(bound), "{open:?}: {err}");
    }
    // The worst the bounds let through (12 levels, each after 32 minus
    // signs) compiles, in bounded time.
    let worst = format!(
        "package sigstore\nisCompliant if {}1{} > 0\n",
        format!("{}[", "-".repeat(engine::MAX_MINUS_RUN)).repeat(engine::MAX_NESTING - 1),
        "]".repeat(engine::MAX_NESTING - 1)
    );
    let _ = RegoPolicy::compile("t", &worst);
    // Below the bound, minus signs still parse; in strings and comments
    // they are not counted.
    let fine = format!(
        "package sigstore\n# {dashes}\nisCompliant if {{\n  x := \"{dashes}\"\n  count(x) > {minus}1\n}}\n",
        dashes = "-".repeat(1000),
        minus = "- ".repeat(engine::MAX_MINUS_RUN - 1),
    );
    compile(&fine);
}

#[tokio::test]
async fn a_non_boolean_result_is_a_shape_error() {
    let p = compile("package sigstore\nisCompliant := 3\n");
    let err = p.evaluate(&json!({})).await.unwrap_err();
    assert!(matches!(err, RegoError::Shape(_)), "{err}");
}

#[tokio::test]
async fn long_error_texts_are_cut_in_the_answer_and_print_is_harmless() {
    let p = compile(
        "package sigstore\n\
         long := concat(\"\", [\"e\" | some _ in numbers.range(1, 10000)])\n\
         isCompliant := {\"result\": false, \"error\": long} if { print(\"forged\\nlog line\") }\n",
    );
    let v = p.evaluate(&json!({})).await.unwrap();
    let error = v.error.unwrap();
    assert_eq!(
        error.chars().count(),
        wire::MAX_TEXT_CHARS + 1,
        "cut, with an ellipsis"
    );
    assert!(error.ends_with('…'));
}

/// Limits under which memory runs out long before time, however loaded
/// the machine.
fn memory_bound() -> Limits {
    Limits {
        time: Duration::from_secs(60),
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_range_too_large_for_memory_is_stopped_at_the_memory_bound() {
    let sandbox = sandbox(memory_bound());
    let p = in_sandbox(
        &sandbox,
        "isCompliant if count(numbers.range(0, 2000000000)) > 0",
    );
    let err = p.evaluate(&json!({})).await.unwrap_err();
    assert_eq!(err, RegoError::MemoryLimit { mib: 128 });
    assert_eq!(
        err.to_string(),
        "the Rego evaluation exceeded its memory limit of 128 MiB; simplify the policy or the document"
    );
    still_answers(&sandbox).await;
    let stats = sandbox.stats();
    assert_eq!(
        (stats.workers_started, stats.workers_lost),
        (2, 1),
        "{stats:?}"
    );
}

#[tokio::test]
async fn strings_arrays_and_sprintf_that_outgrow_memory_are_stopped_at_the_memory_bound() {
    let sandbox = sandbox(memory_bound());
    // Each doubles or squares what it holds until an allocation fails.
    let string = "s := concat(\"\", [\"a\" | some _ in numbers.range(1, 1000)])\n\
                  isCompliant if count(replace(replace(replace(s, \"a\", s), \"a\", s), \"a\", s)) > 0";
    let array = (1..=40)
        .map(|i| format!("a{i} := array.concat(a{0}, a{0})\n", i - 1))
        .collect::<String>();
    let array = format!("a0 := numbers.range(1, 1000)\n{array}isCompliant if count(a40) > 0");
    let sprintf = "isCompliant if sprintf(\"%0999999999d\", [1]) != \"\"";
    for body in [string, &array, sprintf] {
        let p = in_sandbox(&sandbox, body);
        let err = p.evaluate(&json!({})).await.unwrap_err();
        assert_eq!(err, RegoError::MemoryLimit { mib: 128 }, "{body}");
    }
    still_answers(&sandbox).await;
}

#[tokio::test]
async fn a_comprehension_that_loops_too_long_is_stopped_at_the_time_bound() {
    let sandbox = sandbox(Limits {
        time: Duration::from_millis(200),
        ..Limits::default()
    });
    let p = in_sandbox(&sandbox, LOOP);
    let err = p.evaluate(&json!({})).await.unwrap_err();
    assert_eq!(
        err,
        RegoError::TimeLimit {
            limit: Duration::from_millis(200)
        }
    );
    assert_eq!(
        err.to_string(),
        "the Rego evaluation exceeded its time limit of 200ms; simplify the policy or the document"
    );
    still_answers(&sandbox).await;
}

#[tokio::test]
async fn a_built_in_that_runs_past_the_time_bound_is_killed() {
    // Memory enough for the whole range: only the clock can stop it, and
    // regorus' own timer is not checked inside numbers.range.
    let sandbox = sandbox(Limits {
        time: Duration::from_millis(50),
        memory_bytes: 2 << 30,
        ..Limits::default()
    });
    let p = in_sandbox(
        &sandbox,
        "isCompliant if count(numbers.range(0, 60000000)) > 0",
    );
    let err = p.evaluate(&json!({})).await.unwrap_err();
    assert_eq!(
        err,
        RegoError::TimeLimit {
            limit: Duration::from_millis(50)
        }
    );
    assert_eq!(sandbox.stats().workers_lost, 1, "the worker was killed");
    still_answers(&sandbox).await;
}

#[tokio::test]
async fn a_worker_that_never_answers_is_killed_at_the_deadline() {
    // A program that greets as a worker and then ignores every request:
    // the parent's deadline alone ends it.
    let dir = std::env::temp_dir().join(format!("sigil-rego-mute-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("mute-worker");
    std::fs::write(
        &program,
        "#!/bin/sh\nprintf '\\000\\000\\000\\023sigil-rego-worker/1'\nwhile read -r _; do :; done\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut config = SandboxConfig::new(&program);
    config.workers = 1;
    config.limits.time = Duration::from_millis(10);
    let sandbox = RegoSandbox::new(config);
    let p = RegoPolicy::compile_with(&sandbox, "t", PASS).unwrap();
    let err = p.evaluate(&json!({})).await.unwrap_err();
    assert_eq!(
        err,
        RegoError::TimeLimit {
            limit: Duration::from_millis(10)
        }
    );
    assert_eq!(sandbox.stats().workers_lost, 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_panic_in_a_built_in_is_an_error_and_the_worker_keeps_serving() {
    let sandbox = sandbox(Limits::default());
    // regorus 0.14 takes any Unicode digit for a sprintf width, then
    // expects an ASCII one.
    let p = in_sandbox(
        &sandbox,
        "isCompliant if sprintf(\"%\u{663}d\", [1]) != \"\"",
    );
    let err = p.evaluate(&json!({})).await.unwrap_err();
    assert!(matches!(err, RegoError::Crashed(_)), "{err}");
    assert!(
        err.to_string()
            .starts_with("the Rego evaluator failed: regorus panicked"),
        "{err}"
    );
    still_answers(&sandbox).await;
    assert_eq!(
        sandbox.stats().workers_lost,
        0,
        "a caught panic keeps the worker"
    );
}

#[tokio::test]
async fn a_document_over_the_input_bound_is_refused_before_any_worker_sees_it() {
    let sandbox = sandbox(Limits {
        max_input_bytes: 1024,
        ..Limits::default()
    });
    let p = RegoPolicy::compile_with(&sandbox, "t", PASS).unwrap();
    let err = p
        .evaluate(&json!({"blob": "x".repeat(2000)}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegoError::InputTooLarge { limit: 1024, .. }),
        "{err}"
    );
    assert_eq!(sandbox.stats().workers_started, 0);
}

#[tokio::test]
async fn a_full_queue_refuses_more_evaluations_naming_the_bound() {
    let mut config = testing::config().unwrap();
    config.workers = 1;
    config.queue = 1;
    config.limits.time = Duration::from_secs(2);
    let sandbox = RegoSandbox::new(config);
    let slow =
        RegoPolicy::compile_with(&sandbox, "slow", &format!("package sigstore\n{LOOP}\n")).unwrap();
    // One held by the worker, one waiting: the third finds the queue full.
    // The first two are polled once so that they are queued, in order.
    let input = json!({});
    let mut first = Box::pin(slow.evaluate(&input));
    let mut second = Box::pin(slow.evaluate(&input));
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(first.as_mut().poll(&mut cx).is_pending());
    // Let the worker take the first request off the queue.
    for _ in 0..500 {
        if sandbox.stats().workers_started == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(second.as_mut().poll(&mut cx).is_pending());
    let third = slow.evaluate(&json!({})).await.unwrap_err();
    assert_eq!(third, RegoError::Busy(1));
    assert_eq!(
        third.to_string(),
        "1 Rego evaluations are already waiting; sigil refuses more until they finish"
    );
}

#[tokio::test]
async fn a_program_that_is_not_a_worker_is_reported_unavailable() {
    let mut config = SandboxConfig::new("/bin/true");
    config.workers = 1;
    let sandbox = RegoSandbox::new(config);
    let p = RegoPolicy::compile_with(&sandbox, "t", PASS).unwrap();
    let err = p.evaluate(&json!({})).await.unwrap_err();
    assert!(matches!(err, RegoError::Unavailable(_)), "{err}");
    assert!(
        err.to_string()
            .contains("/bin/true: it exited without greeting"),
        "{err}"
    );
}
