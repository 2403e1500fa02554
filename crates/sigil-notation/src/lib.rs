//! sigil-notation: Notary Project signatures (the Notary Project
//! specification v1.1) for sigil, beside `sigil-verifier`'s Sigstore ones.
//!
//! This crate owns the envelopes (JWS `application/jose+json` and COSE
//! `application/cose`), the signing schemes `notary.x509` and
//! `notary.x509.signingAuthority`, the trust policy (`trustpolicy.oci.json`,
//! `trustpolicy.json`) and trust store (`x509/{ca,signingAuthority,tsa}/NAME`),
//! OCSP and CRL revocation checking, AWS Signer's signatures, and
//! [`verify::verify`], which judges one signature for one image.
//!
//! It shares X.509 and RFC 3161 code with `sigil-verifier` and must not
//! depend on Kubernetes, the network or an async runtime: finding signatures
//! and fetching revocation responses is `sigil-registry`'s job; the time and
//! the fetched responses are passed in.
#![forbid(unsafe_code)]

pub mod algorithm;
pub mod aws_signer;
pub mod cbor;
pub mod chain;
pub mod config;
pub mod cose;
pub mod decode;
pub mod dn;
pub mod envelope;
pub mod jws;
pub mod payload;
pub mod policy;
pub mod revocation;
pub mod store;
pub mod verify;

/// The artifact type of a Notary Project signature manifest.
pub const ARTIFACT_TYPE: &str = "application/vnd.cncf.notary.signature";
