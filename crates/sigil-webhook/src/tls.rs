//! Serving certificates: loading a PEM certificate chain and key, a rustls
//! resolver whose certificate can be swapped while serving, and the reload
//! loop that polls the mounted files; and, reloaded the same way, the client
//! CA bundle of a listener that requires client certificates (the
//! Gatekeeper provider's).
//!
//! Polling, not inotify: a Kubernetes Secret volume update swaps the
//! `..data` symlink of the directory, which a watch on the file never sees.
//! The loop re-reads both files every interval and swaps the certificate when
//! their content hash changes and they parse and match; a half-written or
//! mismatched pair is logged and the old certificate stays.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use sha2::{Digest as _, Sha256};

/// Largest certificate or key file read.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}; check the mounted TLS secret")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file is larger than any certificate or key.
    #[error("{path} is larger than {MAX_PEM_BYTES} bytes; it is not a PEM certificate or key")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// No certificate in the certificate file.
    #[error("{path} holds no PEM CERTIFICATE block")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no usable key.
    #[error(
        "{path} holds no usable private key ({reason}); expected a PKCS#8, SEC1 or PKCS#1 PEM key"
    )]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Key and certificate do not belong together.
    #[error("the key in {key} does not match the certificate in {cert} ({reason})")]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("cannot configure TLS: {0}")]
    Config(String),
    /// The client CA bundle holds no usable CA certificate.
    #[error(
        "{path} holds no usable CA certificate ({reason}); give the PEM CA that signs the client certificates (Gatekeeper's: ca.crt of the gatekeeper-webhook-server-cert Secret)"
    )]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, TlsError> {
    let read = |source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(read)?.len();
    if len > MAX_PEM_BYTES {
        return Err(TlsError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    std::fs::read(path).map_err(read)
}

/// Content hash, certificate bytes, key bytes.
type PemPair = ([u8; 32], Vec<u8>, Vec<u8>);

/// The certificate and key files and what they hold.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

impl CertFiles {
    /// Reads both files: their content hash and raw bytes.
    fn read(&self) -> Result<PemPair, TlsError> {
        let cert = read_bounded(&self.cert)?;
        let key = read_bounded(&self.key)?;
        let mut h = Sha256::new();
        h.update((cert.len() as u64).to_be_bytes());
        h.update(&cert);
        h.update(&key);
        Ok((h.finalize().into(), cert, key))
    }

    /// Parses a certificate chain and key into a rustls certified key.
    fn parse(&self, cert: &[u8], key: &[u8]) -> Result<CertifiedKey, TlsError> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .filter_map(Result::ok)
            .collect();
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: self.cert.clone(),
            });
        }
        let key_der = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::Key {
            path: self.key.clone(),
            reason: e.to_string(),
        })?;
        let signing =
            rustls::crypto::aws_lc_rs::sign::any_supported_type(&key_der).map_err(|e| {
                TlsError::Key {
                    path: self.key.clone(),
                    reason: e.to_string(),
                }
            })?;
        let certified = CertifiedKey::new(chain, signing);
        certified.keys_match().map_err(|e| TlsError::Mismatch {
            cert: self.cert.clone(),
            key: self.key.clone(),
            reason: e.to_string(),
        })?;
        Ok(certified)
    }

    /// Loads the pair once.
    pub fn load(&self) -> Result<CertifiedKey, TlsError> {
        let (_, cert, key) = self.read()?;
        self.parse(&cert, &key)
    }
}

/// A certificate resolver whose certificate the reload loop swaps.
pub struct ReloadingCert {
    files: CertFiles,
    current: RwLock<(Arc<CertifiedKey>, [u8; 32])>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    /// Loads the files; fails when the initial pair is unusable.
    pub fn load(files: CertFiles) -> Result<Arc<Self>, TlsError> {
        let (hash, cert, key) = files.read()?;
        let certified = files.parse(&cert, &key)?;
        Ok(Arc::new(Self {
            files,
            current: RwLock::new((Arc::new(certified), hash)),
        }))
    }

    /// Re-reads the files; swaps the certificate when they changed and
    /// parse. Returns whether it swapped.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (hash, cert, key) = self.files.read()?;
        if self.current.read().map(|c| c.1 == hash).unwrap_or(false) {
            return Ok(false);
        }
        let certified = self.files.parse(&cert, &key)?;
        if let Ok(mut c) = self.current.write() {
            *c = (Arc::new(certified), hash);
        }
        Ok(true)
    }

    /// Polls the files every `interval` until the process ends.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let file = self.files.cert.clone();
        poll_reloads(self, interval, Self::reload, "serving certificate", &file).await;
    }
}

/// Calls `reload` on `this` every `interval` (at least 100 ms) until the
/// process ends, off the reactor threads (file reads block), and logs each
/// swap and each failure of `what`, read from `file`; a failure keeps what
/// was in force.
async fn poll_reloads<T: Send + Sync + 'static>(
    this: Arc<T>,
    interval: Duration,
    reload: fn(&T) -> Result<bool, TlsError>,
    what: &'static str,
    file: &std::path::Path,
) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(100)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let target = this.clone();
        match tokio::task::spawn_blocking(move || reload(&target)).await {
            Ok(Ok(true)) => tracing::info!(file = %file.display(), "{what} reloaded"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = %e,
                file = %file.display(),
                "{what} not reloaded; keeping the previous one"
            ),
            Err(e) => tracing::warn!(error = %e, "{what} reload task failed"),
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.0.clone())
    }
}

/// A rustls server configuration (aws-lc-rs provider, TLS 1.2 and 1.3, h2 and
/// http/1.1) serving `cert`.
pub fn server_config(cert: Arc<ReloadingCert>) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(sigil_registry::tls::provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The CA certificates in the PEM bundle `pem` (read from `path`) that
/// client certificates must chain to.
fn client_roots(path: &Path, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    let mut refused = Vec::new();
    for (i, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let added = cert
            .map_err(|e| e.to_string())
            .and_then(|der| roots.add(der).map_err(|e| e.to_string()));
        if let Err(why) = added {
            refused.push(format!("certificate {}: {why}", i + 1));
        }
    }
    if roots.is_empty() {
        let reason = if refused.is_empty() {
            "no PEM CERTIFICATE block".to_string()
        } else {
            refused.join("; ")
        };
        return Err(TlsError::ClientCa {
            path: path.to_path_buf(),
            reason,
        });
    }
    Ok(roots)
}

/// The client CA bundle of a mutual-TLS listener, re-read when its file
/// changes, as [`ReloadingCert`] does for the serving pair: when Gatekeeper
/// renews its CA and the mounted copy is updated, clients with the new
/// CA's certificates are served without a restart. A bundle that does not
/// parse is logged and the previous one stays.
pub struct ReloadingClientCa {
    path: PathBuf,
    provider: Arc<rustls::crypto::CryptoProvider>,
    current: RwLock<(Arc<dyn ClientCertVerifier>, [u8; 32])>,
}

impl fmt::Debug for ReloadingClientCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingClientCa")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ReloadingClientCa {
    /// Reads the bundle at `path`; fails when it holds no usable CA.
    pub fn load(path: &Path) -> Result<Arc<Self>, TlsError> {
        let provider = Arc::new(sigil_registry::tls::provider());
        let pem = read_bounded(path)?;
        let verifier = Self::verifier(path, &pem, &provider)?;
        Ok(Arc::new(Self {
            path: path.to_path_buf(),
            provider,
            current: RwLock::new((verifier, Sha256::digest(&pem).into())),
        }))
    }

    fn verifier(
        path: &Path,
        pem: &[u8],
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        let roots = client_roots(path, pem)?;
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TlsError::ClientCa {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })
    }

    /// Re-reads the bundle; swaps the verifier when it changed and parses.
    /// Returns whether it swapped.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let pem = read_bounded(&self.path)?;
        let hash: [u8; 32] = Sha256::digest(&pem).into();
        if self.current.read().map(|c| c.1 == hash).unwrap_or(false) {
            return Ok(false);
        }
        let verifier = Self::verifier(&self.path, &pem, &self.provider)?;
        if let Ok(mut c) = self.current.write() {
            *c = (verifier, hash);
        }
        Ok(true)
    }

    /// Polls the bundle every `interval` until the process ends.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let file = self.path.clone();
        poll_reloads(self, interval, Self::reload, "client CA bundle", &file).await;
    }

    /// The verifier in force; a poisoned lock (a panic while swapping,
    /// which cannot happen) refuses every client rather than none.
    fn get(&self) -> Result<Arc<dyn ClientCertVerifier>, rustls::Error> {
        self.current
            .read()
            .map(|c| c.0.clone())
            .map_err(|_| rustls::Error::General("client CA bundle unavailable".into()))
    }
}

impl ClientCertVerifier for ReloadingClientCa {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    // The subjects would have to outlive a swap of the bundle; the hint is
    // optional, and Gatekeeper presents its one certificate regardless.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.get()?
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// [`server_config`] that requires every client to present a certificate
/// that `clients` accepts (mutual TLS): a connection without one, or with
/// one from another CA, fails its handshake.
pub fn mutual_tls_config(
    cert: Arc<ReloadingCert>,
    clients: Arc<ReloadingClientCa>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(sigil_registry::tls::provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(clients)
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
