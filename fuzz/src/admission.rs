//! The admission property and its harness. The code lives with the
//! webhook's tests so that the stable regression tests
//! (`crates/sigil-webhook/tests/fuzz_regressions.rs`) run the very same
//! checks on every input the fuzzer ever crashed on.

#[path = "../../crates/sigil-webhook/tests/fuzz/admission.rs"]
mod shared;

pub use shared::*;
