//! The serving certificate against the webhooks' caBundle, verified as the
//! API server verifies it (WebPKI path building to the caBundle's roots, for
//! the name the API server calls), and the chain a webhook serves at a URL.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use time::OffsetDateTime;

/// The process's crypto provider (aws-lc-rs, FIPS in a FIPS build), or
/// aws-lc-rs where none is installed (unit tests).
fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
}

/// Certificates of a PEM text (a caBundle may also be a single DER
/// certificate).
pub(crate) fn certificates(bytes: &[u8]) -> Vec<CertificateDer<'static>> {
    let pem: Vec<_> = CertificateDer::pem_slice_iter(bytes)
        .filter_map(Result::ok)
        .collect();
    if pem.is_empty() && bytes.first() == Some(&0x30) {
        return vec![CertificateDer::from(bytes.to_vec())];
    }
    pem
}

/// Verifies `chain` (leaf first) against the roots of `ca_bundle` for
/// `server_name` at `now`.
pub(crate) fn verify(
    ca_bundle: &[u8],
    chain: &[CertificateDer<'static>],
    server_name: &str,
    now: UnixTime,
) -> Result<(), String> {
    let mut roots = RootCertStore::empty();
    let cas = certificates(ca_bundle);
    if cas.is_empty() {
        return Err("the caBundle holds no certificate".into());
    }
    let (_, refused) = roots.add_parsable_certificates(cas);
    if roots.is_empty() {
        return Err(format!(
            "none of the caBundle's certificates is a usable CA ({refused} refused)"
        ));
    }
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err("no certificate in the serving chain".into());
    };
    let name = ServerName::try_from(server_name.to_owned())
        .map_err(|e| format!("{server_name} is not a DNS name or IP address: {e}"))?;
    let provider = provider();
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| format!("cannot build a verifier from the caBundle: {e}"))?;
    verifier
        .verify_server_cert(leaf, intermediates, &name, &[], now)
        .map(|_| ())
        .map_err(|e| describe(&e))
}

/// The rustls error in the words an admin searches for.
fn describe(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => {
            "signed by a CA that is not in the caBundle (unknown issuer)".into()
        }
        rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "the certificate has expired".into()
        }
        rustls::Error::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "the certificate is not valid yet".into()
        }
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => "the certificate is not valid for that name (subjectAltName)".into(),
        other => other.to_string(),
    }
}

/// The leaf's subject and notAfter.
pub(crate) fn leaf_facts(leaf: &CertificateDer<'_>) -> Option<(String, OffsetDateTime)> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let not_after =
        OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp()).ok()?;
    Some((cert.subject().to_string(), not_after))
}

/// Accepts any chain and keeps it: the chain is judged afterwards by
/// [`verify`], so that the report can say why it fails.
#[derive(Debug)]
struct Recorder {
    provider: Arc<rustls::crypto::CryptoProvider>,
    seen: std::sync::Mutex<Vec<CertificateDer<'static>>>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(end_entity.clone().into_owned());
            seen.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Host and port of an `https://` URL.
pub(crate) fn host_port(url: &str) -> Result<(String, u16), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("{url} is not a URL: {e}"))?;
    if parsed.scheme() != "https" {
        return Err(format!(
            "{url}: the API server calls webhooks over https only"
        ));
    }
    let host = match parsed.host() {
        Some(url::Host::Ipv6(a)) => a.to_string(),
        Some(h) => h.to_string(),
        None => return Err(format!("{url} has no host")),
    };
    Ok((host, parsed.port_or_known_default().unwrap_or(443)))
}

/// The chain served at `url` (a TLS handshake, nothing sent after it).
pub(crate) async fn served_chain(
    url: &str,
    timeout: Duration,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let (host, port) = host_port(url)?;
    let provider = provider();
    let recorder = Arc::new(Recorder {
        provider: provider.clone(),
        seen: std::sync::Mutex::new(Vec::new()),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(recorder.clone())
        .with_no_client_auth();
    let name = ServerName::try_from(host.clone()).map_err(|e| format!("{host}: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let handshake = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
        connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake with {host}:{port} failed: {e}"))
    };
    tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| {
            format!("{host}:{port} did not complete a TLS handshake within {timeout:?}")
        })??;
    let seen = recorder.seen.lock().map(|s| s.clone()).unwrap_or_default();
    if seen.is_empty() {
        return Err(format!("{host}:{port} presented no certificate"));
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    };

    use super::*;

    struct Ca {
        params: CertificateParams,
        key: KeyPair,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("key: {e}"));
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let pem = params
            .self_signed(&key)
            .unwrap_or_else(|e| panic!("CA: {e}"))
            .pem();
        Ca { params, key, pem }
    }

    /// A leaf for `names` signed by `ca`: its DER and key.
    fn leaf(ca: &Ca, names: &[&str]) -> (CertificateDer<'static>, KeyPair) {
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("key: {e}"));
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap_or_else(|e| panic!("names: {e}"));
        params
            .distinguished_name
            .push(DnType::CommonName, "sigil-webhook");
        let issuer = Issuer::from_params(&ca.params, &ca.key);
        let cert = params
            .signed_by(&key, &issuer)
            .unwrap_or_else(|e| panic!("leaf: {e}"));
        (cert.der().clone(), key)
    }

    const SVC: &str = "sigil-webhook.sigil-system.svc";

    #[test]
    fn a_chain_verifies_against_its_own_ca_for_its_name_only() {
        let good = ca("sigil CA");
        let other = ca("another CA");
        let (cert, _) = leaf(&good, &[SVC]);
        let chain = [cert];
        assert_eq!(
            verify(good.pem.as_bytes(), &chain, SVC, UnixTime::now()),
            Ok(())
        );
        let wrong_ca = verify(other.pem.as_bytes(), &chain, SVC, UnixTime::now());
        assert!(
            wrong_ca
                .as_ref()
                .is_err_and(|e| e.contains("unknown issuer")),
            "{wrong_ca:?}"
        );
        let wrong_name = verify(
            good.pem.as_bytes(),
            &chain,
            "other.sigil-system.svc",
            UnixTime::now(),
        );
        assert!(
            wrong_name
                .as_ref()
                .is_err_and(|e| e.contains("not valid for that name")),
            "{wrong_name:?}"
        );
        // Either CA of a bundle may be the one.
        let both = format!("{}{}", other.pem, good.pem);
        assert_eq!(
            verify(both.as_bytes(), &chain, SVC, UnixTime::now()),
            Ok(())
        );
        let empty = verify(b"not pem", &chain, SVC, UnixTime::now());
        assert!(empty.is_err_and(|e| e.contains("no certificate")));
    }

    #[test]
    fn the_leaf_facts_name_its_subject_and_expiry() {
        let (cert, _) = leaf(&ca("sigil CA"), &[SVC]);
        let (subject, not_after) = leaf_facts(&cert).unwrap_or_else(|| panic!("no facts"));
        assert!(subject.contains("sigil-webhook"), "{subject}");
        assert!(not_after > OffsetDateTime::now_utc(), "{not_after}");
    }

    #[test]
    fn only_https_urls_name_a_webhook() {
        assert_eq!(
            host_port("https://127.0.0.1:8443/validate"),
            Ok(("127.0.0.1".into(), 8443))
        );
        assert_eq!(
            host_port("https://hook.example"),
            Ok(("hook.example".into(), 443))
        );
        assert!(host_port("http://127.0.0.1:1").is_err());
        assert!(host_port("not a url").is_err());
    }

    #[tokio::test]
    async fn the_chain_served_at_a_url_is_read_and_judged_afterwards() {
        let ca = ca("sigil CA");
        let (cert, key) = leaf(&ca, &["127.0.0.1"]);
        let der_key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
            .unwrap_or_else(|e| panic!("key: {e}"));
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|e| panic!("{e}"))
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], der_key)
            .unwrap_or_else(|e| panic!("{e}"));
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let server = tokio::spawn(async move {
            if let Ok((tcp, _)) = listener.accept().await {
                let _ = acceptor.accept(tcp).await;
            }
        });
        let url = format!("https://127.0.0.1:{port}");
        let chain = served_chain(&url, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(chain, vec![cert]);
        assert_eq!(
            verify(ca.pem.as_bytes(), &chain, "127.0.0.1", UnixTime::now()),
            Ok(())
        );
        let _ = server.await;
        // Nothing listens there any more.
        let refused = served_chain(&url, Duration::from_secs(5)).await;
        assert!(refused.is_err_and(|e| e.contains("cannot connect")));
    }
}
