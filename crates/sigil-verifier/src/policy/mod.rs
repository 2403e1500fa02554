//! Image policies: the compiled model a ClusterImagePolicy becomes
//! ([`model`]), image globs ([`glob`]), Rego ([`rego`]), evaluation of an
//! image against the policies through the [`eval::AuthorityVerifier`] seam
//! ([`eval`]), and the admission answer ([`render`]).
//!
//! This module knows nothing of Kubernetes objects: `sigil-api` compiles
//! CRDs into these types, and the webhook and CLI feed images in.

pub mod eval;
pub mod glob;
pub mod model;
pub mod registry;
pub mod rego;
pub mod render;

#[cfg(test)]
mod tests;

pub use eval::{
    AuthorityOutcome, AuthorityResult, AuthorityVerifier, ImageResult, PolicyResult,
    VerifiedAttestation, VerifiedSignature, evaluate_image,
};
pub use glob::{Glob, GlobError, ImageName};
pub use model::{CompiledAuthority, CompiledPolicy, Mode, NoMatchPolicy, ResourceInfo};
pub use rego::{RegoError, RegoPolicy};
pub use render::{AdmissionVerdict, render};
