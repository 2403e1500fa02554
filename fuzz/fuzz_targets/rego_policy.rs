//! Rego policy text, with the sandbox's bounds on: the module is compiled
//! in this process as the controller and the webhook compile it (parse,
//! package and rule checks; no input may panic or abort it), then
//! evaluated in the Rego sandbox on an empty document and on an attestation
//! document, under a 64 MiB memory and 200 ms time limit. Whatever the text
//! does, the evaluation answers: a verdict, or an error; an error about a
//! bound names the bound the sandbox was given; and after any failure the
//! sandbox still answers a harmless policy.
//!
//! The sandbox's workers are this very binary started again: `init` serves
//! as a worker when started as one (`sigil_policy::rego::WORKER_ARG`).
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use sigil_policy::rego::{Limits, RegoError, RegoPolicy, RegoSandbox, SandboxConfig};

const MEMORY_MIB: u64 = 64;
const TIME: Duration = Duration::from_millis(200);

fn sandbox() -> &'static RegoSandbox {
    static SANDBOX: OnceLock<RegoSandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let program = std::env::current_exe().expect("the fuzz target's own path");
        let mut config = SandboxConfig::new(program);
        config.workers = 1;
        config.queue = 4;
        config.limits = Limits {
            memory_bytes: MEMORY_MIB << 20,
            time: TIME,
            max_input_bytes: 1 << 20,
        };
        RegoSandbox::new(config)
    })
}

fn harmless() -> &'static RegoPolicy {
    static HARMLESS: OnceLock<RegoPolicy> = OnceLock::new();
    HARMLESS.get_or_init(|| {
        RegoPolicy::compile_with(
            sandbox(),
            "harmless",
            "package sigstore\nisCompliant := true\n",
        )
        .expect("the harmless policy compiles")
    })
}

fuzz_target!(
    init: sigil_policy::rego::serve_if_requested(),
    |data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(policy) = RegoPolicy::compile_with(sandbox(), "fuzz", text) else {
            return;
        };
        let statement = json!({
            "_type": "https://in-toto.io/Statement/v1",
            "predicateType": "https://slsa.dev/provenance/v1",
            "subject": [{"digest": {"sha256": "4a"}}],
            "predicate": {"buildDefinition": {"buildType": "x"}, "runDetails": {}},
        });
        let mut failed = false;
        for input in [json!({}), statement] {
            match policy.evaluate_blocking(&input) {
                Ok(_) => {}
                Err(e) => {
                    failed = true;
                    match e {
                        RegoError::MemoryLimit { mib } => assert_eq!(mib, MEMORY_MIB, "{e}"),
                        RegoError::TimeLimit { limit } => assert_eq!(limit, TIME, "{e}"),
                        RegoError::Unavailable(_) => panic!("the sandbox is gone: {e}"),
                        _ => {}
                    }
                    assert!(!e.to_string().is_empty());
                }
            }
        }
        if failed {
            let v = harmless()
                .evaluate_blocking(&json!({}))
                .unwrap_or_else(|e| panic!("the sandbox did not recover: {e}"));
            assert!(v.compliant);
        }
    }
);
