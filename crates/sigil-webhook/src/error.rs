//! The library's error type: what stopped the server from starting.

use std::net::SocketAddr;

/// Why the webhook could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is missing or invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The serving certificate could not be loaded.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The static judge could not be built.
    #[error(transparent)]
    Judge(#[from] crate::static_judge::StaticJudgeError),
    /// The policy snapshot judge could not be built.
    #[error(transparent)]
    PolicyJudge(#[from] crate::policy_judge::PolicyJudgeError),
    /// The metrics and health port could not be bound.
    #[error(transparent)]
    AdminBind(#[from] sigil_runtime::admin::BindError),
    /// The admission (HTTPS) address could not be bound.
    #[error("cannot listen on {addr}: {source}; is another process using the port?")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Signal handlers could not be installed.
    #[error("cannot install the SIGTERM handler: {0}")]
    Signal(std::io::Error),
}

impl Error {
    /// A stable label for logs and exit reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Config(_) => "config",
            Self::Tls(_) => "tls",
            Self::Judge(_) => "judge",
            Self::PolicyJudge(e) => e.reason(),
            Self::Bind { .. } | Self::AdminBind(_) => "bind",
            Self::Signal(_) => "signal",
        }
    }
}

impl From<sigil_judge::args::SetupError> for Error {
    fn from(e: sigil_judge::args::SetupError) -> Self {
        match e {
            sigil_judge::args::SetupError::Config(msg) => Self::Config(msg),
            sigil_judge::args::SetupError::PolicyJudge(e) => Self::PolicyJudge(e),
        }
    }
}
