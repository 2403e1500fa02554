//! The Notation CLI's configuration directory as users keep it: the trust
//! policy (`trustpolicy.oci.json`, or the older `trustpolicy.json`) and the
//! trust store under `truststore/`, read unchanged.

use std::path::{Path, PathBuf};

use crate::policy::{MAX_POLICY_LEN, PolicyError, TrustPolicy};
use crate::store::{StoreError, TrustStore};

/// The trust policy file names, in the order Notation reads them.
pub const POLICY_FILES: [&str; 2] = ["trustpolicy.oci.json", "trustpolicy.json"];

/// A Notation configuration read from a directory.
#[derive(Debug, Clone)]
pub struct NotationConfig {
    /// The trust policy file read.
    pub policy_file: PathBuf,
    /// That file's text, as read (UTF-8 checked by the parser).
    pub policy_text: String,
    /// Its statements.
    pub policy: TrustPolicy,
    /// The trust store (empty when `truststore/` is absent).
    pub trust_store: TrustStore,
}

/// Why a configuration directory cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Neither trust policy file exists or is readable.
    #[error(
        "{dir} holds neither trustpolicy.oci.json nor trustpolicy.json (the Notation CLI's configuration directory, e.g. ~/.config/notation): {reason}"
    )]
    NoPolicy {
        /// The directory.
        dir: String,
        /// The last read error.
        reason: String,
    },
    /// The trust policy is invalid.
    #[error("{file}: {error}")]
    Policy {
        /// The file.
        file: String,
        /// What is wrong.
        error: PolicyError,
    },
    /// The trust store is invalid.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Reads the trust policy and trust store of a Notation configuration directory.
pub fn load(dir: &Path) -> Result<NotationConfig, ConfigError> {
    let mut reason = String::from("not found");
    for name in POLICY_FILES {
        let file = dir.join(name);
        let bytes = match std::fs::metadata(&file) {
            Ok(meta) if meta.len() > MAX_POLICY_LEN as u64 => {
                reason = format!("{} is larger than {MAX_POLICY_LEN} bytes", file.display());
                continue;
            }
            Ok(_) => match std::fs::read(&file) {
                Ok(bytes) => bytes,
                Err(e) => {
                    reason = format!("{}: {e}", file.display());
                    continue;
                }
            },
            Err(_) => continue,
        };
        let policy = TrustPolicy::parse(&bytes).map_err(|error| ConfigError::Policy {
            file: file.display().to_string(),
            error,
        })?;
        let trust_store = TrustStore::load_dir(&dir.join("truststore"))?;
        return Ok(NotationConfig {
            policy_file: file,
            policy_text: String::from_utf8_lossy(&bytes).into_owned(),
            policy,
            trust_store,
        });
    }
    Err(ConfigError::NoPolicy {
        dir: dir.display().to_string(),
        reason,
    })
}
