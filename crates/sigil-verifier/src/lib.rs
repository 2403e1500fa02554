//! sigil-verifier: Sigstore bundle verification for sigil.
//!
//! This crate owns everything that decides whether a Sigstore bundle is
//! genuine: trust roots, bundle parsing, certificate chains, SCTs,
//! transparency-log proofs and checkpoints, timestamps, and the signer policy
//! a bundle is checked against.
//!
//! It must not depend on Kubernetes, on the network or on an async runtime:
//! fetching signatures from registries is `sigil-registry`'s job, deciding
//! which images need which signers is `sigil-policy`'s.
#![forbid(unsafe_code)]

pub mod bundle;
pub mod chain;
pub mod checkpoint;
pub mod crypto;
pub mod der;
pub mod dsse;
pub mod identity;
pub mod merkle;
pub mod sct;
#[cfg(test)]
mod test_support;
pub mod tlog;
pub mod trust;
pub mod tsa;
pub mod verify;
pub mod x509;
