//! `sigil-audit`: parse flags, install the aws-lc-rs crypto provider, run.

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _};

fn main() -> anyhow::Result<()> {
    let version = sigil_registry::tls::version_text(env!("CARGO_PKG_VERSION"));
    let matches = sigil_audit::program::Args::command()
        .version(&*Box::leak(version.into_boxed_str()))
        .get_matches();
    let args = sigil_audit::program::Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let module = sigil_registry::tls::install_provider()?;
    sigil_runtime::init_logging(args.log_format);
    tracing::info!(crypto_module = %module, fips = module.fips_mode, "crypto provider installed");
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime
        .block_on(sigil_audit::program::run(args))
        .context("sigil-audit failed")
}
