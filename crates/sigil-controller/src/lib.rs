//! sigil-controller: reconciles `ClusterImagePolicy` and `TrustRoot` objects
//! and publishes what it accepted to the webhook as one snapshot Secret
//! ([`publish`], contract in [`sigil_api::snapshot`]), with the built-in
//! Sigstore root kept fresh through TUF ([`sigstore_root`], state persisted
//! by [`tuf_state`]); keeps the webhook's
//! TLS certificate and the `caBundle` of its webhook configurations
//! ([`tls`]); admits WorkloadKinds, adding their kinds to those
//! configurations' rules ([`workload_kinds`]); and does all of that only while it holds the leader Lease
//! ([`leader`]). [`run`] wires it together with metrics, health endpoints and
//! graceful shutdown.
#![forbid(unsafe_code)]
// Test modules (and the test-only fixtures) may unwrap: a failed fixture
// should abort the test loudly. Declared once here rather than per module.
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod budget;
pub mod config;
pub mod context;
pub mod egress;
pub mod error;
pub mod fenced;
pub mod kms;
pub mod kms_resolve;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod policy;
pub mod prune;
pub mod publish;
pub mod remote_policy;
pub mod resync;
pub mod run;
pub mod server;
pub mod sigstore_keys;
pub mod sigstore_objects;
pub mod sigstore_root;
pub mod status;
pub mod tenant_references;
pub mod tenant_registries;
pub mod tls;
pub mod trustroot;
pub mod tuf;
pub mod tuf_state;
pub mod workload_kinds;

#[cfg(test)]
mod fixtures;

pub use config::Args;
pub use context::Context;
pub use error::{Error, Result};
pub use run::run;
