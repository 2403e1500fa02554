//! notation-core-go's public test data (read at run time from `../shared`
//! through sigil-testdata, never copied here): the JWS and COSE conformance
//! envelopes, CRL distribution point certificates, a DigiCert timestamp
//! token and TSA chain, and certificate files in PEM and DER.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::PathBuf;

use sigil_notation::algorithm::Algorithm;
use sigil_notation::envelope::{self, Format, SigningScheme};
use sigil_notation::policy::StoreKind;
use sigil_notation::revocation::{self, Evidence, Request, Status};
use sigil_notation::store::TrustStore;
use sigil_verifier::tsa::{TimestampError, verify_rfc3161_to_roots};
use sigil_verifier::x509::Certificate;
use time::OffsetDateTime;
use time::macros::datetime;

fn data(path: &str) -> Vec<u8> {
    let root: PathBuf = sigil_testdata::notation_core_go().unwrap_or_else(|e| panic!("{e}"));
    std::fs::read(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn attribute<'a>(env: &'a envelope::Envelope, key: &str) -> &'a envelope::Attribute {
    env.attribute(key)
        .unwrap_or_else(|| panic!("no attribute {key}: {:?}", env.extended))
}

#[test]
fn the_jws_conformance_envelope_reads_as_notation_core_go_signed_it() {
    let env = sigil_notation::decode::envelope(
        envelope::MEDIA_TYPE_JWS,
        &data("signature/jws/testdata/conformance.json"),
    )
    .unwrap();
    assert_eq!(env.format, Format::Jws);
    assert_eq!(env.algorithm, Algorithm::Es256);
    assert_eq!(env.scheme, SigningScheme::X509);
    assert_eq!(env.signing_time, datetime!(2022-08-29 13:50:00 UTC));
    assert_eq!(env.expiry, Some(datetime!(2099-08-30 13:50:00 UTC)));
    assert!(attribute(&env, "signedCritKey1").critical);
    for key in ["signedKey1", "signedKey2", "signedKey3", "signedKey4"] {
        assert!(!attribute(&env, key).critical, "{key}");
    }
    assert_eq!(env.payload, br#"{"key":"hello JWS"}"#);
    assert_eq!(
        env.signing_agent.as_deref(),
        Some("NotationConformanceTest/1.0.0")
    );
    // The conformance envelope carries no chain (the test signer's key is made at run time).
    assert!(env.chain.is_empty());
    let err = env.verify_integrity().unwrap_err();
    assert!(err.to_string().contains("x5chain"), "{err}");
}

#[test]
fn the_cose_conformance_output_reads_as_notation_core_go_signed_it() {
    let doc: serde_json::Value =
        serde_json::from_slice(&data("signature/cose/testdata/conformance.json")).unwrap();
    let cbor = hex::decode(doc["expectedOutput"]["cborHex"].as_str().unwrap()).unwrap();
    let env = sigil_notation::decode::envelope(envelope::MEDIA_TYPE_COSE, &cbor).unwrap();
    assert_eq!(env.algorithm, Algorithm::Ps384);
    assert_eq!(env.scheme, SigningScheme::X509);
    let signing = doc["signingTime"].as_i64().unwrap();
    let expiry = doc["expiry"].as_i64().unwrap();
    assert_eq!(
        env.signing_time,
        OffsetDateTime::from_unix_timestamp(signing).unwrap()
    );
    assert_eq!(
        env.expiry,
        Some(OffsetDateTime::from_unix_timestamp(expiry).unwrap())
    );
    assert!(attribute(&env, "signedCritKey1").critical);
    assert!(!attribute(&env, "signedKey1").critical);
    assert_eq!(env.payload, b"hello COSE");
    assert_eq!(env.signature.len(), 384, "an RSA-3072 PSS signature");
    // The Sig_structure: ["Signature1", protected, h'', payload].
    let protected = hex::decode(doc["protectedHeaders"]["cborHex"].as_str().unwrap()).unwrap();
    assert!(env.signed_bytes.starts_with(b"\x84\x6aSignature1"));
    assert!(
        env.signed_bytes
            .windows(protected.len())
            .any(|w| w == protected)
    );
}

#[test]
fn a_certificate_naming_a_freshest_crl_has_an_unknown_status_and_its_crl_is_requested() {
    let pem =
        String::from_utf8(data("revocation/crl/testdata/certificateWithDeltaCRL.cer")).unwrap();
    let cert = Certificate::from_pem_chain(&pem).unwrap().remove(0);
    let requests = revocation::requests(&[cert.clone(), cert.clone()]);
    assert!(
        requests
            .iter()
            .any(|r| matches!(r, Request::Crl { url } if url.starts_with("http://localhost"))),
        "{requests:?}"
    );
    let now = datetime!(2024-06-01 00:00 UTC);
    match revocation::status(&cert, &cert, &Evidence::new(), now, None) {
        Status::Unknown { reason } => assert!(reason.contains("delta"), "{reason}"),
        other => panic!("expected unknown, got {other:?}"),
    }
}

#[test]
fn trust_store_files_in_pem_der_and_concatenated_der_load_and_non_roots_are_refused() {
    let mut store = TrustStore::new();
    for file in [
        "x509/testdata/pem.crt",
        "x509/testdata/der.der",
        "x509/testdata/multi-der.der",
        "x509/testdata/multi-pem.crt",
        "x509/testdata/openssl-minimum-self-signed.pem",
        "x509/testdata/timestamp_intermediate.crt",
    ] {
        store
            .add_file(StoreKind::Ca, "vectors", file, &data(file))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(store.certificates(StoreKind::Ca, "vectors").unwrap().len() >= 8);
    let leaf = store.add_file(
        StoreKind::Ca,
        "vectors",
        "leaf",
        &data("x509/testdata/timestamp_leaf.crt"),
    );
    assert!(
        leaf.unwrap_err()
            .to_string()
            .contains("neither a CA certificate nor self-signed")
    );

    store
        .add_file(
            StoreKind::Tsa,
            "digicert",
            "root",
            &data("x509/testdata/timestamp_root.crt"),
        )
        .unwrap();
    store
        .add_file(
            StoreKind::Tsa,
            "digicert",
            "root2",
            &data("internal/timestamp/testdata/tsaRootCert.cer"),
        )
        .unwrap();
    let intermediate = store.add_file(
        StoreKind::Tsa,
        "digicert",
        "int",
        &data("x509/testdata/timestamp_intermediate.crt"),
    );
    assert!(
        intermediate
            .unwrap_err()
            .to_string()
            .contains("tsa store holds roots only")
    );
}

#[test]
fn digicerts_timestamp_token_parses_and_is_refused_for_data_it_does_not_cover() {
    let token = data("internal/timestamp/testdata/TimeStampTokenWithInvalidSignature.p7s");
    let root = Certificate::from_der(&data("internal/timestamp/testdata/tsaRootCert.cer")).unwrap();
    match verify_rfc3161_to_roots(&token, b"not the stamped signature", &[root]) {
        Err(TimestampError::WrongImprint { .. }) => {}
        other => panic!("expected a wrong imprint, got {other:?}"),
    }
}
