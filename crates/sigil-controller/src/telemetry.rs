//! Logging: `sigil-runtime`'s subscriber, the shape every sigil binary logs
//! in (`RUST_LOG`-filtered, stderr, text or flat JSON lines).

use crate::config::LogFormat;

/// Installs the global subscriber; fails when one is already installed.
pub fn init(format: LogFormat) -> Result<(), String> {
    sigil_runtime::try_init_logging(format)
}
