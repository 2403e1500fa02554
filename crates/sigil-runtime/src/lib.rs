//! sigil-runtime: the process plumbing of sigil's long-running binaries
//! (the admission webhook and the in-cluster audit), written once so they
//! log in one shape and stop the same way: the `--log-format` setting and
//! the subscriber it installs, and the wait for SIGTERM.
//!
//! It knows nothing of admission, policies or Kubernetes: it must not
//! depend on any other sigil crate.
#![forbid(unsafe_code)]

/// Log output format (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the log subscriber (`RUST_LOG` filters; info by default).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // A second call (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Resolves on SIGTERM or Ctrl-C; fails only when the handlers cannot be
/// installed.
pub async fn termination() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    Ok(())
}
