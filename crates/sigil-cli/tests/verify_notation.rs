//! `sigil verify-notation`: testkit-minted Notary Project envelopes (JWS and
//! COSE) judged with a Notation configuration directory laid out as the
//! Notation CLI keeps it, the revocation CRL served on 127.0.0.1.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    clippy::indexing_slicing
)]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::sigil;
use sigil_testkit::notation::{self, Format, LeafSpec, NotaryPki, SignSpec};
use sigil_testkit::tsa::Tsa;

mod common;

const DAY: i64 = 86_400;
const MANIFEST: &[u8] = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}"#;

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn digest(bytes: &[u8]) -> String {
    format!(
        "sha256:{}",
        hex::encode(sigil_verifier::crypto::sha256(bytes))
    )
}

fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("verify-notation-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("truststore/x509/ca/acme")).unwrap();
    std::fs::create_dir_all(dir.join("truststore/x509/tsa/stamps")).unwrap();
    dir
}

struct Fixture {
    dir: PathBuf,
    pki: NotaryPki,
    tsa: Tsa,
}

fn fixture(test: &str, crl_url: Option<String>, identity: &str, revocation: &str) -> Fixture {
    let dir = scratch(test);
    let t = now();
    let mut leaf = LeafSpec::new("Acme", "release signer", t - DAY, t + 30 * DAY);
    leaf.crl_url = crl_url;
    let pki = NotaryPki::new(11, "cli", t - 100 * DAY, t + 3650 * DAY, &leaf);
    let tsa = Tsa::new(
        11,
        "cli-tsa",
        "https://tsa.example",
        t - 100 * DAY,
        t + 3650 * DAY,
    );
    std::fs::write(
        dir.join("truststore/x509/ca/acme/root.crt"),
        pki.root.cert_pem(),
    )
    .unwrap();
    std::fs::write(
        dir.join("truststore/x509/tsa/stamps/tsa.crt"),
        tsa.root.cert_pem(),
    )
    .unwrap();
    let policy = serde_json::json!({
        "version": "1.0",
        "trustPolicies": [{
            "name": "acme-images",
            "registryScopes": ["registry.example/acme/app"],
            "signatureVerification": {"level": "strict", "override": {"revocation": revocation}},
            "trustStores": ["ca:acme", "tsa:stamps"],
            "trustedIdentities": [identity]
        }]
    });
    std::fs::write(dir.join("trustpolicy.oci.json"), policy.to_string()).unwrap();
    std::fs::write(dir.join("manifest.json"), MANIFEST).unwrap();
    Fixture { dir, pki, tsa }
}

fn sign(f: &Fixture, format: Format) -> PathBuf {
    let mut spec = SignSpec::new(format, &digest(MANIFEST), MANIFEST.len() as u64, now() - 60);
    spec.timestamp = Some((f.tsa.clone(), now() - 50));
    let name = if format == Format::Cose {
        "signature.cose"
    } else {
        "signature.jws"
    };
    let path = f.dir.join(name);
    std::fs::write(&path, notation::sign(&f.pki, &spec)).unwrap();
    path
}

fn run(f: &Fixture, envelope: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "verify-notation".to_owned(),
        "--notation-config".into(),
        f.dir.display().to_string(),
        "--envelope".into(),
        envelope.display().to_string(),
        "--repository".into(),
        "registry.example/acme/app".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args.push(f.dir.join("manifest.json").display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, text) = sigil(&f.dir, &args);
    (code.unwrap_or(-1), text)
}

const ACME: &str = "x509.subject:C=US, ST=WA, O=Acme";

#[test]
fn jws_and_cose_envelopes_verify_against_the_manifest_with_the_notation_configuration() {
    let f = fixture("ok", None, ACME, "enforce");
    for format in [Format::Jws, Format::Cose] {
        let envelope = sign(&f, format);
        let (code, text) = run(&f, &envelope, &[]);
        assert_eq!(code, 0, "{format:?}: {text}");
        assert!(
            text.contains("Verified OK") && text.contains("trusted timestamp"),
            "{text}"
        );
        assert!(text.contains("acme-images (strict)"), "{text}");
    }
}

#[test]
fn another_manifest_or_another_signer_is_denied_naming_the_check() {
    let f = fixture("deny", None, ACME, "enforce");
    let envelope = sign(&f, Format::Jws);
    std::fs::write(f.dir.join("manifest.json"), [MANIFEST, b" "].concat()).unwrap();
    let (code, text) = run(&f, &envelope, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("integrity check failed") && text.contains("target digest"),
        "{text}"
    );

    let other = fixture(
        "identity",
        None,
        "x509.subject:C=US, ST=WA, O=Other",
        "enforce",
    );
    let envelope = sign(&other, Format::Cose);
    let (code, text) = run(&other, &envelope, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("authenticity check failed") && text.contains("O=Acme"),
        "{text}"
    );
}

/// Serves `body` to at most `count` requests on 127.0.0.1, then stops.
fn serve(body: Vec<u8>, count: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(count) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/pkix-crl\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    format!("http://{addr}/leaf.crl")
}

#[test]
fn a_revoked_signing_certificate_is_denied_through_its_crl_and_offline_the_status_is_unknown() {
    // The CRL needs the issuer, so the PKI is minted first with a placeholder URL
    // only to learn the serial; the keys and names derive from the seed alone.
    let listener_url = {
        let probe = fixture(
            "revoked-probe",
            Some("http://127.0.0.1:9/x".into()),
            ACME,
            "enforce",
        );
        let t = now();
        let crl = notation::crl(
            &probe.pki.intermediate,
            &[(probe.pki.leaf.serial.clone(), t - 3600)],
            t - 3600,
            t + DAY,
        );
        serve(crl, 4)
    };
    let f = fixture("revoked", Some(listener_url), ACME, "enforce");
    let envelope = sign(&f, Format::Jws);
    let (code, text) = run(&f, &envelope, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("revocation check failed")
            && text.contains("is revoked (CRL http://127.0.0.1"),
        "{text}"
    );

    let (code, text) = run(&f, &envelope, &["--offline"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("could not be determined"), "{text}");
    let logged = fixture(
        "revoked-logged",
        Some("http://127.0.0.1:9/leaf.crl".into()),
        ACME,
        "log",
    );
    let envelope = sign(&logged, Format::Jws);
    let (code, text) = run(&logged, &envelope, &["--offline"]);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("logged:") && text.contains("revocation"),
        "{text}"
    );
}

#[test]
fn a_repository_no_statement_covers_is_an_error_naming_it_and_the_fix() {
    let f = fixture("scope", None, ACME, "enforce");
    let file = f.dir.join("trustpolicy.oci.json");
    let policy = std::fs::read_to_string(&file)
        .unwrap()
        .replace("registry.example/acme/app", "registry.example/other/app");
    std::fs::write(&file, policy).unwrap();
    let envelope = sign(&f, Format::Jws);
    let (code, text) = run(&f, &envelope, &[]);
    assert_eq!(code, 1, "{text}");
    let expected = format!(
        "error: no statement of {} applies to repository `registry.example/acme/app`; name the \
         repository with --repository or add a `*` scope",
        f.dir.join("trustpolicy.oci.json").display()
    );
    assert!(text.contains(&expected), "{text}");
}

#[test]
fn a_chain_to_a_root_outside_the_trust_store_is_denied_as_untrusted() {
    let f = fixture("untrusted", None, ACME, "enforce");
    let t = now();
    let stranger = NotaryPki::new(
        12,
        "stranger",
        t - 100 * DAY,
        t + 3650 * DAY,
        &LeafSpec::new("Acme", "release signer", t - DAY, t + 30 * DAY),
    );
    std::fs::write(
        f.dir.join("truststore/x509/ca/acme/root.crt"),
        stranger.root.cert_pem(),
    )
    .unwrap();
    let envelope = sign(&f, Format::Jws);
    let (code, text) = run(&f, &envelope, &[]);
    assert_eq!(code, 1, "{text}");
    let expected = format!(
        "Denied: {}: Notary Project authenticity check failed: the certificate chain (signing \
         certificate `C=US, ST=WA, O=Acme, CN=release signer`) does not lead to trust stores ca:acme",
        envelope.display()
    );
    assert!(text.contains(&expected), "{text}");
}

fn lint(path: &Path) -> (i32, String) {
    let dir = path.parent().unwrap();
    let (code, text) = sigil(dir, &["policy", "lint", path.to_str().unwrap()]);
    (code.unwrap_or(-1), text)
}

#[test]
fn policy_lint_validates_a_notation_trust_policy_naming_the_field() {
    let f = fixture("lint", None, ACME, "enforce");
    let file = f.dir.join("trustpolicy.oci.json");
    let (code, text) = lint(&file);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!(
            "{}: Notation trust policy: ok (1 statement(s))",
            file.display()
        )),
        "{text}"
    );

    let bad = std::fs::read_to_string(&file)
        .unwrap()
        .replace("\"revocation\":\"enforce\"", "\"integrity\":\"log\"");
    let other = f.dir.join("policy.json");
    std::fs::write(&other, bad).unwrap();
    let (code, text) = lint(&other);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!(
            "{}: Notation trust policy: error: trust policy field \
             `trustPolicies[0].signatureVerification.override.integrity`: integrity cannot be \
             overridden",
            other.display()
        )),
        "{text}"
    );
}
