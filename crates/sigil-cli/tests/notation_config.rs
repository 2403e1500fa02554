//! `--notation-config DIR` on `sigil verify` and `sigil policy test`: an
//! image on a registry on 127.0.0.1 carrying testkit-minted Notary Project
//! signatures as OCI referrers, judged with the Notation CLI's configuration
//! directory as the whole policy, or standing in for the ConfigMaps and
//! Secrets a policy file's `notation` authority names.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    clippy::indexing_slicing
)]

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use common::sigil;
use sigil_testkit::notation::{self, Format, LeafSpec, NotaryPki, RegistryImage};
use sigil_testkit::tuf::Mirror;

mod common;

const DAY: i64 = 86_400;

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A registry holding `acme/app` images: one signed with JWS, one with
/// COSE, one unsigned; and a Notation configuration directory trusting the
/// signer's root for `acme/app` on that registry.
struct Setup {
    dir: PathBuf,
    mirror: Mirror,
    jws: String,
    cose: String,
    unsigned: String,
}

impl Setup {
    fn host(&self) -> String {
        self.mirror.addr().to_string()
    }

    fn image(&self, digest: &str) -> String {
        format!("{}/acme/app@{digest}", self.host())
    }
}

fn setup(test: &str, identity: &str) -> Setup {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("notation-config-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    let store = dir.join("config/truststore/x509/ca/acme");
    std::fs::create_dir_all(&store).unwrap();
    let t = now();
    let leaf = LeafSpec::new("Acme", "release signer", t - DAY, t + 30 * DAY);
    let pki = NotaryPki::new(31, "notation-config", t - 100 * DAY, t + 3650 * DAY, &leaf);
    std::fs::write(store.join("root.crt"), pki.root.cert_pem()).unwrap();

    let mut files = std::collections::BTreeMap::new();
    let mut digests = Vec::new();
    for (label, format) in [
        ("jws", Some(Format::Jws)),
        ("cose", Some(Format::Cose)),
        ("unsigned", None),
    ] {
        let mut image = RegistryImage::new("acme/app", label);
        if let Some(format) = format {
            let envelope = notation::sign(&pki, &image.spec(format, t - 60));
            image.push_signature(format, envelope);
        }
        digests.push(image.digest.clone());
        files.extend(image.files());
    }
    let mirror = Mirror::serve("127.0.0.1:0", files).unwrap();
    let policy = serde_json::json!({
        "version": "1.0",
        "trustPolicies": [{
            "name": "acme-images",
            "registryScopes": [format!("{}/acme/app", mirror.addr())],
            "signatureVerification": {"level": "strict"},
            "trustStores": ["ca:acme"],
            "trustedIdentities": [identity]
        }]
    });
    std::fs::write(
        dir.join("config/trustpolicy.oci.json"),
        serde_json::to_vec_pretty(&policy).unwrap(),
    )
    .unwrap();
    let [jws, cose, unsigned] = <[String; 3]>::try_from(digests).unwrap();
    Setup {
        dir,
        mirror,
        jws,
        cose,
        unsigned,
    }
}

const ACME: &str = "x509.subject:C=US, ST=WA, O=Acme";

/// `sigil verify --notation-config DIR IMAGE` against the setup's registry.
fn verify(s: &Setup, digest: &str, extra: &[&str]) -> (Option<i32>, String) {
    let config = s.dir.join("config").display().to_string();
    let host = s.host();
    let image = s.image(digest);
    let mut args = vec![
        "verify",
        "--notation-config",
        &config,
        "--insecure-registry",
        &host,
    ];
    args.extend_from_slice(extra);
    args.push(&image);
    sigil(&s.dir, &args)
}

#[test]
fn sigil_verify_with_a_notation_config_admits_images_signed_as_jws_and_as_cose() {
    let s = setup("admits", ACME);
    for digest in [&s.jws, &s.cose] {
        let (code, out) = verify(&s, digest, &[]);
        assert_eq!(code, Some(0), "{out}");
        assert!(
            out.contains(&format!("allow: {}", s.image(digest))),
            "{out}"
        );
        assert!(out.contains("notation-config"), "{out}");
    }
}

#[test]
fn sigil_verify_with_a_notation_config_denies_an_unsigned_image_saying_none_was_found() {
    let s = setup("unsigned", ACME);
    let (code, out) = verify(&s, &s.unsigned, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("deny:"), "{out}");
    assert!(out.contains("Notary Project signature"), "{out}");
}

#[test]
fn sigil_verify_with_a_notation_config_denies_a_signer_outside_the_trusted_identities() {
    let s = setup("identity", "x509.subject:C=US, ST=WA, O=Other");
    let (code, out) = verify(&s, &s.jws, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("deny:"), "{out}");
    assert!(
        out.contains("matches none of the trusted identities of statement `acme-images`"),
        "{out}"
    );
}

#[test]
fn sigil_verify_refuses_signer_flags_beside_a_notation_config() {
    let s = setup("flags", ACME);
    let key = s.dir.join("key.pem");
    std::fs::write(&key, "unused").unwrap();
    let (code, out) = verify(&s, &s.jws, &["--key", key.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--notation-config takes the signers from the Notation trust policy"),
        "{out}"
    );
}

#[test]
fn a_missing_notation_config_names_the_directory_and_the_files_it_needs() {
    let s = setup("missing", ACME);
    let (code, out) = sigil(
        &s.dir,
        &[
            "verify",
            "--notation-config",
            s.dir.join("nowhere").to_str().unwrap(),
            &s.image(&s.jws),
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("--notation-config"), "{out}");
    assert!(out.contains("trustpolicy.oci.json"), "{out}");
}

/// A ClusterImagePolicy whose notation authority reads its trust policy
/// and its `ca/acme` store from the cluster; `store` names the store.
fn referencing_policy(s: &Setup, store: &str) -> PathBuf {
    let path = s
        .dir
        .join(format!("policy-{}.yaml", store.replace('/', "-")));
    let yaml = format!(
        "apiVersion: policy.sigstore.dev/v1beta1
kind: ClusterImagePolicy
metadata:
  name: acme-notation
spec:
  images:
  - glob: \"{}/acme/**\"
  authorities:
  - name: notary
    notation:
      trustPolicyRef:
        name: notation-trust-policy
      trustStores:
      - name: {store}
        configMapRef:
          name: acme-roots
",
        s.host()
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

fn policy_test(s: &Setup, policy: &Path, config: bool, digest: &str) -> (Option<i32>, String) {
    let host = s.host();
    let config_dir = s.dir.join("config").display().to_string();
    let image = s.image(digest);
    let mut args = vec![
        "policy",
        "test",
        "--policy",
        policy.to_str().unwrap(),
        "--insecure-registry",
        &host,
    ];
    if config {
        args.extend(["--notation-config", &config_dir]);
    }
    args.push(&image);
    sigil(&s.dir, &args)
}

#[test]
fn policy_test_reads_a_notation_authoritys_configmaps_from_the_notation_config() {
    let s = setup("policy-test", ACME);
    let policy = referencing_policy(&s, "ca/acme");

    let (code, out) = policy_test(&s, &policy, true, &s.cose);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("allow:"), "{out}");
    assert!(out.contains("acme-notation"), "{out}");

    let (code, out) = policy_test(&s, &policy, true, &s.unsigned);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("deny:"), "{out}");

    // Without the directory the references cannot be read offline.
    let (code, out) = policy_test(&s, &policy, false, &s.cose);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("trustPolicyRef"), "{out}");
    assert!(
        out.contains("here: --notation-config DIR gives them"),
        "{out}"
    );
}

#[test]
fn a_referenced_store_the_notation_config_lacks_is_named_with_its_field() {
    let s = setup("no-store", ACME);
    let policy = referencing_policy(&s, "ca/other");
    let (code, out) = policy_test(&s, &policy, true, &s.cose);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("spec.authorities[0].notation.trustStores[0] (ca/other)"),
        "{out}"
    );
    assert!(out.contains("truststore/x509/ca/other"), "{out}");
}

#[test]
fn a_ratify_verifier_converted_from_two_files_judges_as_the_notation_config_does() {
    let s = setup("ratify", ACME);
    let trust_policy = std::fs::read_to_string(s.dir.join("config/trustpolicy.oci.json")).unwrap();
    let document: serde_json::Value = serde_json::from_str(&trust_policy).unwrap();
    let document = document.to_string().replace("ca:acme", "ca:ca-certs");
    let verifier = s.dir.join("verifier.yaml");
    std::fs::write(
        &verifier,
        format!(
            "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: Verifier\nmetadata:\n  name: \
             verifier-notation\nspec:\n  name: notation\n  artifactTypes: \
             application/vnd.cncf.notary.signature\n  parameters:\n    verificationCertStores:\n      \
             ca:\n        ca-certs: [acme-root]\n    trustPolicyDoc: {document}\n---\n\
             apiVersion: config.ratify.deislabs.io/v1beta1\nkind: Policy\nmetadata:\n  name: \
             ratify-policy\nspec:\n  type: config-policy\n  parameters:\n    \
             artifactVerificationPolicies:\n      application/vnd.cncf.notary.signature: any\n"
        ),
    )
    .unwrap();
    let root =
        std::fs::read_to_string(s.dir.join("config/truststore/x509/ca/acme/root.crt")).unwrap();
    let provider = s.dir.join("providers.yaml");
    let value: String = root.lines().map(|l| format!("      {l}\n")).collect();
    std::fs::write(
        &provider,
        format!(
            "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: KeyManagementProvider\n\
             metadata:\n  name: acme-root\nspec:\n  type: inline\n  parameters:\n    \
             contentType: certificate\n    value: |\n{value}"
        ),
    )
    .unwrap();

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(["policy", "convert"])
        .arg(&verifier)
        .arg(&provider)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let converted = s.dir.join("converted.yaml");
    std::fs::write(&converted, &out.stdout).unwrap();

    let (code, text) = policy_test(&s, &converted, false, &s.jws);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("allow:") && text.contains("ratify-verifier-notation"),
        "{text}"
    );
    let (code, text) = policy_test(&s, &converted, false, &s.unsigned);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("no Notary Project signature found"), "{text}");
}
