//! Envelopes made by notation-go, the Notary Project's reference library
//! (the testkit's Go signer, `crates/sigil-testkit/notation-signer`), judged
//! by `sigil verify-notation` and by `sigil verify --notation-config` against
//! a registry on 127.0.0.1: what the reference implementation signs, sigil
//! accepts, and each wrong one is denied naming the check that failed.
//!
//! Ignored by default: they need the signer, which `make test-registry`
//! builds (scripts/install-tools.sh notation-signer) and names in
//! `SIGIL_NOTATION_SIGNER`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    clippy::indexing_slicing
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use common::sigil;
use sigil_testkit::notation::{Format, LeafSpec, NotaryPki, RegistryImage};
use sigil_testkit::tuf::Mirror;

mod common;

const DAY: i64 = 86_400;
const ACME: &str = "x509.subject:C=US, ST=WA, O=Acme";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn signer() -> PathBuf {
    std::env::var_os("SIGIL_NOTATION_SIGNER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "SIGIL_NOTATION_SIGNER is not set: build the signer with \
                 `scripts/install-tools.sh notation-signer` and name it there"
            )
        })
}

/// A PKI whose leaf signs for Acme, its key and chain in `dir` as the
/// Go signer reads them, and a Notation configuration trusting its root
/// for `scope` with `identity`.
struct Fixture {
    dir: PathBuf,
}

fn fixture(test: &str, scope: &str, identity: &str) -> Fixture {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("notation-go-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("config/truststore/x509/ca/acme")).unwrap();
    let t = now();
    let leaf = LeafSpec::new("Acme", "release signer", t - DAY, t + 30 * DAY);
    let pki = NotaryPki::new(41, "notation-go", t - 100 * DAY, t + 3650 * DAY, &leaf);
    std::fs::write(
        dir.join("leaf.key"),
        pki.leaf.key.private_key_pkcs8_pem().unwrap(),
    )
    .unwrap();
    let chain: String = [&pki.leaf, &pki.intermediate, &pki.root]
        .iter()
        .map(|c| c.cert_pem())
        .collect();
    std::fs::write(dir.join("chain.pem"), chain).unwrap();
    std::fs::write(
        dir.join("config/truststore/x509/ca/acme/root.crt"),
        pki.root.cert_pem(),
    )
    .unwrap();
    let policy = serde_json::json!({
        "version": "1.0",
        "trustPolicies": [{
            "name": "acme-images",
            "registryScopes": [scope],
            "signatureVerification": {"level": "strict"},
            "trustStores": ["ca:acme"],
            "trustedIdentities": [identity]
        }]
    });
    std::fs::write(dir.join("config/trustpolicy.oci.json"), policy.to_string()).unwrap();
    Fixture { dir }
}

/// notation-go's envelope over `image`, in `format`, expiring `expiry`
/// from now when given.
fn go_sign(f: &Fixture, image: &RegistryImage, format: Format, expiry: Option<&str>) -> Vec<u8> {
    let size = image.manifest.len().to_string();
    let mut args = vec![
        "-key".to_owned(),
        f.dir.join("leaf.key").display().to_string(),
        "-chain".into(),
        f.dir.join("chain.pem").display().to_string(),
        "-format".into(),
        if format == Format::Jws { "jws" } else { "cose" }.into(),
        "-digest".into(),
        image.digest.clone(),
        "-size".into(),
        size,
    ];
    if let Some(expiry) = expiry {
        args.extend(["-expiry".to_owned(), expiry.to_owned()]);
    }
    let out = Command::new(signer()).args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "notation-signer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `sigil verify-notation` of `envelope` against `image`'s manifest.
fn verify_envelope(
    f: &Fixture,
    image: &RegistryImage,
    envelope: &[u8],
    format: Format,
) -> (Option<i32>, String) {
    let name = if format == Format::Jws {
        "sig.jws"
    } else {
        "sig.cose"
    };
    std::fs::write(f.dir.join(name), envelope).unwrap();
    std::fs::write(f.dir.join("manifest.json"), &image.manifest).unwrap();
    let config = f.dir.join("config").display().to_string();
    let envelope = f.dir.join(name).display().to_string();
    let manifest = f.dir.join("manifest.json").display().to_string();
    sigil(
        &f.dir,
        &[
            "verify-notation",
            "--notation-config",
            &config,
            "--envelope",
            &envelope,
            "--repository",
            "registry.example/acme/app",
            &manifest,
        ],
    )
}

#[test]
#[ignore = "needs notation-go's signer (SIGIL_NOTATION_SIGNER); make test-registry runs it"]
fn notation_go_envelopes_in_jws_and_cose_verify() {
    let f = fixture("verify", "registry.example/acme/app", ACME);
    let image = RegistryImage::new("acme/app", "notation-go");
    for format in [Format::Jws, Format::Cose] {
        let envelope = go_sign(&f, &image, format, Some("24h"));
        let (code, text) = verify_envelope(&f, &image, &envelope, format);
        assert_eq!(code, Some(0), "{format:?}: {text}");
        assert!(text.contains("Verified OK"), "{text}");
        assert!(text.contains("acme-images (strict)"), "{text}");
    }
}

#[test]
#[ignore = "needs notation-go's signer (SIGIL_NOTATION_SIGNER); make test-registry runs it"]
fn notation_go_envelopes_for_another_image_another_signer_or_past_their_expiry_are_denied() {
    let f = fixture("deny", "registry.example/acme/app", ACME);
    let image = RegistryImage::new("acme/app", "notation-go");
    let other = RegistryImage::new("acme/app", "another image");
    for format in [Format::Jws, Format::Cose] {
        // Signed for another manifest: the integrity check names the digest.
        let envelope = go_sign(&f, &other, format, None);
        let (code, text) = verify_envelope(&f, &image, &envelope, format);
        assert_eq!(code, Some(1), "{text}");
        assert!(text.contains("integrity"), "{text}");
        assert!(text.contains(&other.digest), "{text}");

        // Expired: notation-go's shortest expiry, then past it.
        let envelope = go_sign(&f, &image, format, Some("1s"));
        std::thread::sleep(std::time::Duration::from_millis(2_100));
        let (code, text) = verify_envelope(&f, &image, &envelope, format);
        assert_eq!(code, Some(1), "{format:?}: {text}");
        assert!(text.contains("expir"), "{text}");
    }
    // The same root trusted for another identity only.
    let policy = std::fs::read_to_string(f.dir.join("config/trustpolicy.oci.json"))
        .unwrap()
        .replace("O=Acme", "O=Other");
    std::fs::write(f.dir.join("config/trustpolicy.oci.json"), policy).unwrap();
    let envelope = go_sign(&f, &image, Format::Cose, None);
    let (code, text) = verify_envelope(&f, &image, &envelope, Format::Cose);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("matches none of the trusted identities"),
        "{text}"
    );
}

#[test]
#[ignore = "needs notation-go's signer (SIGIL_NOTATION_SIGNER); make test-registry runs it"]
fn an_image_notation_go_signed_is_admitted_from_its_registry_and_a_tampered_one_is_not() {
    let mirror = Mirror::serve("127.0.0.1:0", Default::default()).unwrap();
    let host = mirror.addr().to_string();
    let f = fixture("registry", &format!("{host}/acme/app"), ACME);
    let mut signed = RegistryImage::new("acme/app", "signed");
    let envelope = go_sign(&f, &signed, Format::Jws, None);
    signed.push_signature(Format::Jws, envelope.clone());
    // The same envelope with one byte of its signature changed.
    let mut tampered = RegistryImage::new("acme/app", "tampered");
    let mut forged = go_sign(&f, &tampered, Format::Cose, None);
    let last = forged.len() - 1;
    forged[last] ^= 0x01;
    tampered.push_signature(Format::Cose, forged);
    let mut files = signed.files();
    files.extend(tampered.files());
    mirror.replace(files);

    let config = f.dir.join("config").display().to_string();
    for (image, admitted) in [(&signed, true), (&tampered, false)] {
        let reference = format!("{host}/acme/app@{}", image.digest);
        let (code, text) = sigil(
            &f.dir,
            &[
                "verify",
                "--notation-config",
                &config,
                "--insecure-registry",
                &host,
                &reference,
            ],
        );
        if admitted {
            assert_eq!(code, Some(0), "{text}");
            assert!(text.contains(&format!("allow: {reference}")), "{text}");
        } else {
            assert_eq!(code, Some(1), "{text}");
            assert!(text.contains("deny:"), "{text}");
            assert!(text.contains("integrity"), "{text}");
        }
    }
}
