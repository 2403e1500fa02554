//! sigil-kms: public keys held in a KMS, for `key.kms` authorities.
//!
//! [`uri`] is the grammar of the key references cosign and sigstore
//! policy-controller accept (`hashivault://`, `openbao://`, `awskms://`,
//! `gcpkms://`, `azurekms://`); it needs nothing else and is what `sigil
//! policy lint` checks offline. With the `client` feature (the default),
//! [`fetch_public_key`] asks the KMS for the key's public half through small
//! HTTP clients written for exactly that call: bounded time and body size, no
//! redirects (credentials go to the configured host only), AWS Signature V4
//! and the OAuth token exchanges written here rather than pulled in with a
//! cloud SDK. A request goes only to the provider's documented endpoints,
//! the hosts the admin allowed or set, and addresses the embedding program's
//! guard allows (`destinations`). Settings and credentials come from an [`Env`]: the process
//! environment, overlaid by whoever embeds this crate (the controller adds a
//! credentials Secret's entries).
//!
//! This crate must not depend on Kubernetes crates nor on sigil's verifier:
//! it returns PEM text, and the caller decides what a usable key is.
#![forbid(unsafe_code)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod uri;

#[cfg(feature = "client")]
mod aws;
#[cfg(feature = "client")]
mod azure;
#[cfg(feature = "client")]
pub mod der;
#[cfg(feature = "client")]
mod destinations;
#[cfg(feature = "client")]
mod gcp;
#[cfg(feature = "client")]
mod http;
#[cfg(feature = "client")]
mod vault;

#[cfg(feature = "client")]
pub use destinations::{AddressGuard, HostRule};
#[cfg(feature = "client")]
pub use http::{Http, HttpConfig};
#[cfg(feature = "client")]
pub use sigil_cloud::{Env, sigv4};
pub use uri::{KmsRef, Provider, UriError};

/// Why a public key could not be fetched.
#[cfg(feature = "client")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KmsError {
    /// Settings or credentials are missing or invalid.
    #[error("{provider}: {message}")]
    Config {
        /// The provider.
        provider: Provider,
        /// What is missing and how to provide it.
        message: String,
    },
    /// The service could not be reached (connection, TLS, timeout).
    #[error("{provider}: cannot reach {url}: {reason}")]
    Unreachable {
        /// The provider.
        provider: Provider,
        /// The URL asked (never with credentials).
        url: String,
        /// The transport's error.
        reason: String,
    },
    /// The service answered with an error status.
    #[error("{provider}: {url} answered HTTP {status}: {message}")]
    Refused {
        /// The provider.
        provider: Provider,
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The service's own message, shortened, and what to check.
        message: String,
    },
    /// The answer is not what the service's API documents.
    #[error("{provider}: unexpected answer from {url}: {reason}")]
    Malformed {
        /// The provider.
        provider: Provider,
        /// The URL asked.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// The request would go where sigil sends no KMS credentials: a host
    /// neither documented for the provider nor allowed by the admin, or an
    /// address sigil's egress policy refuses.
    #[error("{provider}: refusing to contact {url}: {reason}")]
    Forbidden {
        /// The provider.
        provider: Provider,
        /// The URL that would have been asked.
        url: String,
        /// Why, and how to allow it.
        reason: String,
    },
    /// The key exists but cannot verify cosign signatures in sigil.
    #[error("{provider}: {reason}")]
    Unsupported {
        /// The provider.
        provider: Provider,
        /// Why, and what key to use instead.
        reason: String,
    },
}

#[cfg(feature = "client")]
impl KmsError {
    /// A short stable label for metrics and condition reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Config { .. } => "config",
            Self::Unreachable { .. } => "unreachable",
            Self::Refused { .. } => "refused",
            Self::Malformed { .. } => "malformed",
            Self::Forbidden { .. } => "forbidden",
            Self::Unsupported { .. } => "unsupported",
        }
    }
}

/// Reads the file `variable` points to, for `provider` (within
/// [`sigil_cloud::env::MAX_FILE_BYTES`]).
#[cfg(feature = "client")]
pub(crate) fn read_file(
    env: &Env,
    provider: Provider,
    variable: &str,
    path: &str,
) -> Result<String, KmsError> {
    env.read_file(variable, path)
        .map_err(|message| KmsError::Config { provider, message })
}

/// A public key fetched from a KMS.
#[cfg(feature = "client")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedKey {
    /// The key as a PEM `PUBLIC KEY` (SubjectPublicKeyInfo).
    pub pem: String,
    /// Which key version the KMS returned, when it says (for messages).
    pub version: Option<String>,
}

/// Fetches the public key `reference` names, with settings from `env`.
#[cfg(feature = "client")]
pub async fn fetch_public_key(
    reference: &KmsRef,
    env: &Env,
    http: &Http,
) -> Result<FetchedKey, KmsError> {
    match reference {
        KmsRef::Vault { key } => vault::public_key(key, env, http).await,
        KmsRef::Aws {
            endpoint,
            key_id,
            region,
        } => aws::public_key(endpoint, key_id, region.as_deref(), env, http).await,
        KmsRef::Gcp { key, version } => gcp::public_key(key, version.as_deref(), env, http).await,
        KmsRef::Azure {
            vault_host,
            key,
            version,
        } => azure::public_key(vault_host, key, version.as_deref(), env, http).await,
    }
}
