//! sigil-policy: image policy evaluation for sigil.
//!
//! This crate owns the decision "may this image run": the compiled model a
//! ClusterImagePolicy becomes ([`model`]), image globs ([`glob`]), Rego
//! ([`rego`]) and CUE ([`cue`], evaluated by `sigil-cue`), the documents
//! both languages see, built as policy-controller builds them
//! ([`document`]), evaluation of an image against the policies through the
//! [`eval::AuthorityVerifier`] seam ([`eval`]), the registry-backed verifier
//! behind that seam ([`registry`]), and the admission answer ([`render`](mod@render)).
//!
//! It must not depend on Kubernetes: `sigil-compile` compiles CRDs into these
//! types, and the webhook, the CLI and the audit feed images in. Signature
//! verification is `sigil-verifier`'s (Sigstore) and `sigil-notation`'s
//! (Notary Project), and registry access `sigil-registry`'s.
#![forbid(unsafe_code)]

pub mod cue;
pub mod document;
pub mod eval;
pub mod glob;
pub mod model;
mod notation;
pub mod registry;
pub mod rego;
pub mod render;
mod wildcard;

#[cfg(test)]
mod tests;

pub use cue::CuePolicy;
pub use eval::{
    AuthorityOutcome, AuthorityVerifier, ConfigFiles, ImageReadError, ImageResult, PlatformImage,
    PlatformResult, PlatformsResult, PolicyResult, evaluate_image,
};
pub use glob::{Glob, GlobError, ImageName};
pub use model::{
    AuthorityResult, CompiledAuthority, CompiledPolicy, Mode, NoMatchPolicy, Platforms,
    PolicyProgram, ResourceInfo, VerifiedAttestation, VerifiedSignature,
};
pub use rego::{RegoError, RegoPolicy};
pub use render::{AdmissionVerdict, render};
