//! The Notary Project trust store: named sets of certificates by type,
//! laid out on disk as `x509/{ca,signingAuthority,tsa}/NAME/*` (PEM files,
//! DER files, or DER certificates concatenated). Only CA certificates and
//! self-signed signing certificates may be trusted; a `tsa` store holds
//! self-signed roots only.

use std::collections::BTreeMap;
use std::path::Path;

use sigil_verifier::der;
use sigil_verifier::x509::Certificate;

use crate::policy::StoreKind;

/// Largest certificate file read.
pub const MAX_FILE_LEN: usize = 1024 * 1024;
/// Most files read from one named store.
pub const MAX_FILES: usize = 256;
/// Most certificates read from one file.
pub const MAX_CERTS_PER_FILE: usize = 64;

/// Why a trust store cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A file could not be read.
    #[error("trust store file {path}: {reason}")]
    Io {
        /// The file or directory.
        path: String,
        /// The system's message or the bound exceeded.
        reason: String,
    },
    /// A file holds no certificate or a malformed one.
    #[error("trust store {kind}:{name} file {file}: {reason}")]
    Certificate {
        /// Store type.
        kind: &'static str,
        /// Store name.
        name: String,
        /// File name.
        file: String,
        /// What is wrong.
        reason: String,
    },
}

/// Named certificate sets by type.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    stores: BTreeMap<(StoreKind, String), Vec<Certificate>>,
}

impl TrustStore {
    /// An empty trust store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The certificates of store `kind:name`, if it exists.
    pub fn certificates(&self, kind: StoreKind, name: &str) -> Option<&[Certificate]> {
        self.stores.get(&(kind, name.to_owned())).map(Vec::as_slice)
    }

    /// The names of the stores, as `type:name`.
    pub fn names(&self) -> Vec<String> {
        self.stores
            .keys()
            .map(|(k, n)| format!("{}:{n}", k.as_str()))
            .collect()
    }

    /// Every named store with its certificates, by type then name.
    pub fn stores(&self) -> impl Iterator<Item = (StoreKind, &str, &[Certificate])> {
        self.stores
            .iter()
            .map(|((kind, name), certs)| (*kind, name.as_str(), certs.as_slice()))
    }

    /// Adds one file's certificates (PEM or DER) to store `kind:name`.
    pub fn add_file(
        &mut self,
        kind: StoreKind,
        name: &str,
        file: &str,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let fail = |reason: String| StoreError::Certificate {
            kind: kind.as_str(),
            name: name.to_owned(),
            file: file.to_owned(),
            reason,
        };
        if bytes.len() > MAX_FILE_LEN {
            return Err(fail(format!(
                "{} bytes is more than the {MAX_FILE_LEN} sigil reads",
                bytes.len()
            )));
        }
        let ders = split_certificates(bytes).map_err(&fail)?;
        if ders.is_empty() {
            return Err(fail("holds no certificate".into()));
        }
        if ders.len() > MAX_CERTS_PER_FILE {
            return Err(fail(format!(
                "{} certificates is more than the {MAX_CERTS_PER_FILE} sigil reads",
                ders.len()
            )));
        }
        let mut certs = Vec::with_capacity(ders.len());
        for der in ders {
            let cert = Certificate::from_der(&der).map_err(|e| fail(e.to_string()))?;
            let self_signed = cert.is_self_signed();
            if kind == StoreKind::Tsa && !(cert.is_ca && self_signed) {
                return Err(fail(format!(
                    "`{}` is not a self-signed root CA; a tsa store holds roots only",
                    cert.subject
                )));
            }
            if !cert.is_ca && !self_signed {
                return Err(fail(format!(
                    "`{}` is neither a CA certificate nor self-signed",
                    cert.subject
                )));
            }
            certs.push(cert);
        }
        let entry = self.stores.entry((kind, name.to_owned())).or_default();
        if entry.len() + certs.len() > MAX_FILES * MAX_CERTS_PER_FILE {
            return Err(fail("the store holds too many certificates".into()));
        }
        entry.extend(certs);
        Ok(())
    }

    /// Reads the Notation layout under `dir` (the `truststore` directory,
    /// holding `x509/`). Missing type directories are empty stores; files
    /// are read in name order; symbolic links are refused, as notation does.
    pub fn load_dir(dir: &Path) -> Result<Self, StoreError> {
        let mut store = Self::new();
        for kind in [StoreKind::Ca, StoreKind::SigningAuthority, StoreKind::Tsa] {
            let type_dir = dir.join("x509").join(kind.as_str());
            if !type_dir.is_dir() {
                continue;
            }
            for named in sorted_entries(&type_dir)? {
                if !named.is_dir() {
                    continue;
                }
                let name = named
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let files = sorted_entries(&named)?;
                if files.len() > MAX_FILES {
                    return Err(StoreError::Io {
                        path: named.display().to_string(),
                        reason: format!(
                            "{} files is more than the {MAX_FILES} sigil reads",
                            files.len()
                        ),
                    });
                }
                for file in files {
                    let meta = std::fs::symlink_metadata(&file).map_err(|e| io(&file, e))?;
                    if meta.file_type().is_symlink() {
                        return Err(StoreError::Io {
                            path: file.display().to_string(),
                            reason: "is a symbolic link; trust store files must be regular files"
                                .into(),
                        });
                    }
                    if !meta.is_file() {
                        continue;
                    }
                    if meta.len() > MAX_FILE_LEN as u64 {
                        return Err(StoreError::Io {
                            path: file.display().to_string(),
                            reason: format!(
                                "{} bytes is more than the {MAX_FILE_LEN} sigil reads",
                                meta.len()
                            ),
                        });
                    }
                    let bytes = std::fs::read(&file).map_err(|e| io(&file, e))?;
                    let file_name = file
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    store.add_file(kind, &name, &file_name, &bytes)?;
                }
            }
        }
        Ok(store)
    }
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

fn sorted_entries(dir: &Path) -> Result<Vec<std::path::PathBuf>, StoreError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        out.push(entry.map_err(|e| io(dir, e))?.path());
        if out.len() > MAX_FILES * 4 {
            return Err(StoreError::Io {
                path: dir.display().to_string(),
                reason: format!("more than {} entries", MAX_FILES * 4),
            });
        }
    }
    out.sort();
    Ok(out)
}

/// The DER certificates of a PEM document or of concatenated DER.
pub(crate) fn split_certificates(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let trimmed = bytes
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .copied()
        .collect::<Vec<_>>();
    if trimmed.starts_with(b"-----BEGIN") {
        let text = std::str::from_utf8(bytes).map_err(|_| "PEM file is not UTF-8".to_owned())?;
        return sigil_verifier::crypto::pem_decode_all(text, "CERTIFICATE");
    }
    let mut reader = der::Reader::new(bytes);
    let mut out = Vec::new();
    while !reader.is_empty() {
        let tlv = reader
            .read_any()
            .map_err(|e| format!("not PEM and not DER certificates: {e}"))?;
        out.push(tlv.raw.to_vec());
        if out.len() > MAX_CERTS_PER_FILE {
            break;
        }
    }
    Ok(out)
}
