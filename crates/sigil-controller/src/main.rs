//! sigil-controller: parse settings, install the aws-lc-rs crypto provider, run.
use sigil_runtime::start;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Started again by itself as a Rego worker (the sandbox that evaluates
    // each Rego policy once for its status): serve as one and exit.
    sigil_policy::rego::serve_if_requested();
    let args: sigil_controller::Args = start::parse_args(env!("CARGO_PKG_VERSION"));
    let module = start::install_provider()?;
    sigil_runtime::try_init_logging(args.log_format).map_err(anyhow::Error::msg)?;
    start::report_crypto_module(&module);
    // Before any policy compiles: CUE policies are checked with this module.
    sigil_cue::configure_shared(args.cue_config())?;
    sigil_policy::rego::configure_shared(args.rego_config())?;
    sigil_controller::run(args).await?;
    Ok(())
}
