//! sigil-judge: the one decision "may this image, of this object, run",
//! as the webhook, the audit and the CLI all make it.
//!
//! [`judge`] is the seam (an [`judge::ImageJudge`] turns an image pinned to a
//! digest into a [`judge::Verdict`]); [`policy_judge`] is the judge that
//! enforces the controller's policy snapshot, which [`snapshot_source`]
//! reads from a file or the API; [`cache`] wraps any judge with verdict and
//! tag caches, single flight and deadlines; [`slots`] shares each
//! registry's request slots fairly among namespaces, and [`tenant`] says
//! which namespace a judgement runs for; [`secrets`] finds an object's registry credentials; [`args`] is the
//! settings the webhook and the audit share and the one `build()` that
//! makes their judge; [`metrics`] is what a judging process exports.
//!
//! Admission (HTTP, AdmissionReviews, patches) is `sigil-webhook`'s; what
//! runs and the reports about it are `sigil-audit`'s. Both call the same
//! [`cache::CachedJudge::verdict`], so a verdict can never differ between
//! them for the same image, object, credentials and snapshot. This crate
//! must not depend on either, nor on an HTTP server.
#![forbid(unsafe_code)]

pub mod args;
pub mod cache;
pub mod exceptions;
pub mod judge;
pub mod metrics;
pub mod policy_judge;
pub mod secrets;
pub mod slots;
pub mod snapshot_source;
pub mod tenant;

/// Where the images of kinds besides Kubernetes' own workloads are
/// (WorkloadKinds), as the snapshot carries them.
pub use sigil_compile::workload_kind;
