//! sigil-controller: parse settings, install the aws-lc-rs crypto provider, run.
use clap::{CommandFactory as _, FromArgMatches as _};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let version = sigil_registry::tls::version_text(env!("CARGO_PKG_VERSION"));
    let matches = sigil_controller::Args::command()
        .version(&*Box::leak(version.into_boxed_str()))
        .get_matches();
    let args = sigil_controller::Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let module = sigil_registry::tls::install_provider()?;
    sigil_controller::telemetry::init(args.log_format).map_err(anyhow::Error::msg)?;
    tracing::info!(crypto_module = %module, fips = module.fips_mode, "crypto provider installed");
    sigil_controller::run(args).await?;
    Ok(())
}
