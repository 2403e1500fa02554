//! sigil-verifier: Sigstore bundle verification for sigil.
//!
//! This crate owns everything that decides whether a signature is genuine:
//! trust roots, bundle parsing, certificate chains, transparency-log proofs,
//! timestamps, and the verification policy. It has no Kubernetes dependencies.
#![forbid(unsafe_code)]

pub mod bundle;
pub mod chain;
pub mod checkpoint;
pub mod crypto;
pub mod der;
pub mod dsse;
pub mod identity;
pub mod image;
pub mod legacy;
pub mod merkle;
pub mod oci;
pub mod policy;
pub mod sct;
#[cfg(test)]
mod test_support;
pub mod tlog;
pub mod trust;
pub mod tsa;
pub mod verify;
pub mod x509;
