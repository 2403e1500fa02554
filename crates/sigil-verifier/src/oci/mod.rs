//! OCI registries: image references, the registry client (auth, limits,
//! digest checks), and discovery of signatures and attestations stored
//! beside an image in both cosign formats.

pub mod auth;
pub mod client;
pub mod discover;
pub mod reference;

pub use auth::{Credential, Credentials};
pub use client::{
    ClientConfig, Limits, RegistryClient, RegistryError, RequestObserver, RequestOutcome, Session,
};
pub use discover::{
    Candidate, CandidateFormat, Discovery, DiscoveryOptions, Material, MaterialCache,
    MaterialScope, Want,
};
pub use reference::{Digest, ImageRef, ReferenceError, Repository};
