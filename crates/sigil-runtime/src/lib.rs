//! sigil-runtime: the process plumbing of sigil's long-running binaries
//! (the admission webhook, the in-cluster audit, the controller), written
//! once so they log in one shape and stop the same way: the `--log-format`
//! setting and the subscriber it installs, the admin endpoints (health,
//! readiness, metrics: [`admin`]), the command line's `--version` and the
//! crypto provider ([`start`]), and SIGTERM with the graceful shutdown it
//! starts ([`shutdown`]).
//!
//! It knows nothing of admission, policies or Kubernetes. Of sigil's crates
//! it uses only the verifier (the crypto module it reports) and the registry
//! (the crypto provider it installs, [`start`]).
#![forbid(unsafe_code)]

pub mod admin;
pub mod shutdown;
pub mod start;

/// Log output format (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the log subscriber of a sigil binary: `RUST_LOG` filters (info
/// by default), lines go to stderr, and `--log-format json` writes one flat
/// JSON object per event (`timestamp`, `level`, `target`, `message` and the
/// event's fields side by side), the one shape every sigil binary logs in.
/// Fails when a subscriber is already installed.
pub fn try_init_logging(format: LogFormat) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    }
    .map_err(|e| format!("installing the log subscriber: {e}"))
}

/// [`try_init_logging`], keeping an already installed subscriber (tests
/// that start a server twice).
pub fn init_logging(format: LogFormat) {
    let _ = try_init_logging(format);
}
