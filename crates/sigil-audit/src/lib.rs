//! sigil-audit: what already runs, judged against the policies in force.
//!
//! [`workload`] reads what runs from pods (the digest in each container's
//! status, the owning workload); [`scope`] says which namespaces count, as
//! admission selects them; [`engine`] judges each distinct running image
//! once through `sigil-judge`'s cached judge, the very path `/validate`
//! takes; [`auditor`] turns API events and snapshot changes into the
//! smallest re-judgement; [`finding`] words each (workload, container,
//! policy) result as a denial would; [`program`] is the `sigil-audit`
//! binary: its flags (the judge's are `sigil-judge`'s `JudgeArgs`, the
//! webhook's), its metrics port and its run until SIGTERM; [`installed`]
//! reads those settings back from an installed chart.
//!
//! This crate judges nothing itself and must not depend on `sigil-webhook`
//! (admission's HTTP side) or reimplement any verification.
#![forbid(unsafe_code)]

pub mod auditor;
pub mod cluster;
pub mod engine;
pub mod finding;
pub mod installed;
pub mod metrics;
pub mod print;
pub mod program;
pub mod report;
pub mod runtime;
pub mod scope;
pub mod workload;

#[cfg(test)]
mod runtime_tests;
#[cfg(test)]
mod tests;
