//! `sigil-webhook`: parse flags, install the ring crypto provider, run.

use anyhow::{Context as _, anyhow};
use clap::Parser as _;

fn main() -> anyhow::Result<()> {
    let args = sigil_webhook::Args::parse();
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow!("a rustls crypto provider was already installed"))?;
    sigil_webhook::init_logging(args.log_format);
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime
        .block_on(sigil_webhook::run(args))
        .context("sigil-webhook failed")
}
