//! sigil-registry: OCI registries for sigil.
//!
//! This crate owns everything between an image reference and the signed
//! material stored beside the image: reference parsing ([`reference`](mod@reference)), the
//! registry client with its auth, limits and digest checks ([`auth`],
//! [`client`]), mirrors and pull-through caches ([`mirrors`]), rate limits
//! ([`ratelimit`]), registry credentials from cloud identities chosen by
//! registry host ([`cloud`]: ECR, Artifact Registry, ACR), what it may
//! contact ([`egress`]: registry hosts and network addresses, the SSRF
//! defence), how many requests may run per host ([`slots`]), discovery of
//! signatures and attestations in both cosign formats ([`discover`]),
//! cosign's legacy signature layers ([`legacy`]), Notary Project signature
//! manifests ([`notation_discover`]) and the CRLs and OCSP answers their
//! checks read ([`revocation_fetch`]), and
//! verifying an image's candidates with `sigil-verifier` ([`image`]), the
//! discoveries replicas share through Redis or Valkey ([`shared_cache`]:
//! MAC'd entries, nothing in them trusted), and the process's rustls
//! crypto provider, aws-lc-rs ([`tls`]).
//!
//! It must not depend on Kubernetes or on policy evaluation: callers say
//! which signer an image needs; this crate finds and checks the material.
#![forbid(unsafe_code)]

pub mod auth;
pub mod client;
pub mod cloud;
pub mod config;
pub mod discover;
pub mod egress;
pub mod image;
pub mod legacy;
pub mod mirrors;
pub mod notation_discover;
pub mod platforms;
pub mod ratelimit;
pub mod reference;
pub mod revocation_fetch;
pub mod shared_cache;
pub mod slots;
pub mod tls;

pub use auth::{Credential, Credentials};
pub use client::{
    ClientConfig, Limits, MemoryBudget, RegistryClient, RegistryError, RequestObserver,
    RequestOutcome, Session,
};
pub use cloud::{CloudError, Keychain, KeychainSettings, ProviderId};
pub use discover::{
    Candidate, CandidateFormat, Discovery, DiscoveryOptions, Material, MaterialCache, MaterialKey,
    MaterialScope, Want,
};
pub use egress::{AddressPolicy, Lookup, RegistryScope};
pub use reference::{Digest, ImageRef, ReferenceError, Repository};
pub use shared_cache::{SharedCache, SharedCacheConfig, SharedCacheError, SharedCacheEvent};
pub use slots::{RequestSlots, Slot};
