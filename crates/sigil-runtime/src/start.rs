//! What every sigil binary does first, written once: its command line with
//! the one `--version` text (the release and the crypto module), and the
//! crypto provider installed, checked and reported before any signature or
//! TLS. Which provider that is stays `sigil-registry`'s decision
//! ([`sigil_registry::tls::provider`]), since its client needs one even
//! where no binary installed it.

use clap::{CommandFactory, FromArgMatches};
use sigil_verifier::crypto::{CryptoModule, ModuleError};

/// Why the provider could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The crypto module must not be used (a FIPS build not in FIPS mode).
    #[error(transparent)]
    Module(#[from] ModuleError),
    /// A FIPS build whose rustls provider offers a non-approved algorithm.
    #[error(
        "this is a FIPS build of sigil but the rustls provider is not in FIPS mode \
         (a cipher suite, key exchange or signature algorithm is not approved); refusing to run"
    )]
    TlsNotFips,
    /// Another provider was installed first.
    #[error(
        "a rustls crypto provider was already installed before sigil's; \
         sigil installs aws-lc-rs once at start"
    )]
    AlreadyInstalled,
}

/// The binaries' `--version` text: their version and the crypto module.
pub fn version_text(package_version: &str) -> String {
    format!("{package_version}\ncrypto: {}", CryptoModule::current())
}

/// Parses the process's command line into `A`, with [`version_text`] as
/// its `--version`; exits with clap's message on a usage error, `--help`
/// or `--version`.
pub fn parse_args<A: CommandFactory + FromArgMatches>(package_version: &str) -> A {
    // clap keeps the text for the life of the process, as a binary's
    // `--version` is; this runs once per process.
    let version: &'static str = Box::leak(version_text(package_version).into_boxed_str());
    let matches = A::command().version(version).get_matches();
    A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Checks the crypto module and installs sigil's rustls provider as the
/// process default; returns the module for [`report_crypto_module`]. A FIPS
/// build fails closed when its module is not in FIPS mode.
pub fn install_provider() -> Result<CryptoModule, ProviderError> {
    let module = CryptoModule::current();
    module.check()?;
    let provider = sigil_registry::tls::provider();
    if module.fips_build && !provider.fips() {
        return Err(ProviderError::TlsNotFips);
    }
    provider
        .install_default()
        .map_err(|_| ProviderError::AlreadyInstalled)?;
    Ok(module)
}

/// Logs which crypto module the process runs with (once logging is set up).
pub fn report_crypto_module(module: &CryptoModule) {
    tracing::info!(crypto_module = %module, fips = module.fips_mode, "crypto provider installed");
}
