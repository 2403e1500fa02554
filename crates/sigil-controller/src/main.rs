//! sigil-controller: parse settings, install the ring crypto provider, run.
use clap::Parser as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = sigil_controller::Args::parse();
    sigil_controller::telemetry::init(args.log_format).map_err(anyhow::Error::msg)?;
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a rustls crypto provider was already installed"))?;
    sigil_controller::run(args).await?;
    Ok(())
}
