//! The process's TLS crypto provider: rustls on aws-lc-rs, the module
//! sigil-verifier checks signatures with, so that a process has one crypto
//! module for everything (registries, the API server, the webhook's own
//! listener).
//!
//! The binaries install it once at start (`sigil_runtime::start::install_provider`,
//! which also fails closed when a FIPS build's module is not in FIPS mode).
//! The registry client installs it itself when the embedding program did not
//! (tests, library users), as kube's client does: reqwest is built without a
//! provider of its own and would otherwise refuse to build a client.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// The rustls provider sigil uses: aws-lc-rs's default (in a FIPS build its
/// cipher suites, key exchanges and signature algorithms are the FIPS ones).
pub fn provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// The process default provider, installing [`provider`] first when the
/// embedding program installed none.
pub fn default_provider() -> Arc<CryptoProvider> {
    if let Some(p) = CryptoProvider::get_default() {
        return Arc::clone(p);
    }
    // Losing a race to another thread's install is fine: either way a
    // provider is in place now.
    let _ = provider().install_default();
    CryptoProvider::get_default()
        .map(Arc::clone)
        .unwrap_or_else(|| Arc::new(provider()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_is_fips_exactly_in_fips_builds() {
        assert_eq!(provider().fips(), cfg!(feature = "fips"));
    }

    #[test]
    fn a_default_provider_is_always_available() {
        let p = default_provider();
        assert!(!p.cipher_suites.is_empty());
        assert!(CryptoProvider::get_default().is_some());
    }
}
