//! `sigil-webhook`: parse flags, install the aws-lc-rs crypto provider, run.

use anyhow::Context as _;
use sigil_runtime::start;

fn main() -> anyhow::Result<()> {
    // Started again by itself as a Rego worker (the sandbox that evaluates
    // policies' Rego): serve as one and exit, before anything else.
    sigil_policy::rego::serve_if_requested();
    let args: sigil_webhook::Args = start::parse_args(env!("CARGO_PKG_VERSION"));
    let module = start::install_provider()?;
    sigil_runtime::init_logging(args.log_format);
    start::report_crypto_module(&module);
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime
        .block_on(sigil_webhook::run(args))
        .context("sigil-webhook failed")
}
