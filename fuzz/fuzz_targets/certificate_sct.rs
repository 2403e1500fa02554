//! Certificates (DER, or a PEM chain) and their embedded SCT lists: parsing,
//! the Fulcio identity extensions, issuance checks against the testkit CA,
//! embedded SCTs against the testkit CT log, and the Fulcio chain.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sigil_fuzz::fixture;
use sigil_verifier::chain::verify_fulcio_chain;
use sigil_verifier::identity::fulcio_identity;
use sigil_verifier::sct::verify_embedded_scts;
use sigil_verifier::x509::Certificate;

fuzz_target!(|data: &[u8]| {
    let certs = if data.starts_with(b"-----BEGIN") {
        match std::str::from_utf8(data).map(Certificate::from_pem_chain) {
            Ok(Ok(c)) => c,
            _ => return,
        }
    } else {
        match Certificate::from_der(data) {
            Ok(c) => vec![c],
            Err(_) => return,
        }
    };
    let f = fixture();
    let signing_time =
        time::OffsetDateTime::from_unix_timestamp(sigil_testkit::DEFAULT_SIGNING_TIME)
            .unwrap_or(f.now);
    for cert in certs.iter().take(4) {
        let _ = fulcio_identity(cert);
        let _ = (cert.is_self_signed(), cert.is_valid_at(f.now));
        for authority in f.root.certificate_authorities.iter().chain(
            f.conformance_roots
                .iter()
                .flat_map(|r| r.certificate_authorities.iter()),
        ) {
            for issuer in authority.chain.iter().take(2) {
                let _ = cert.verify_issued_by(issuer);
                let _ = verify_embedded_scts(cert, issuer, &f.root);
            }
        }
        let _ = verify_fulcio_chain(
            cert,
            certs.get(1..).unwrap_or_default(),
            &f.root,
            signing_time,
        );
    }
});
