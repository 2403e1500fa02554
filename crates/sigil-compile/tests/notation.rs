//! `notation:` authorities from policy text to verdict: compiled (with the
//! trust policy's field paths in their errors), then judged through the
//! registry verifier against a registry on 127.0.0.1 holding an image and
//! Notary Project signatures minted by the testkit, and rendered as the
//! webhook renders denials.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;

use serde_json::json;
use sigil_api::ClusterImagePolicySpec;
use sigil_compile::compile::{Offline, compile_policy, is_offline_only, namespaced_problems};
use sigil_policy::model::{AuthorityKind, CompiledPolicy, NoMatchPolicy, ResourceInfo};
use sigil_policy::registry::RegistryVerifier;
use sigil_policy::{ImageName, evaluate_image, render};
use sigil_registry::{ClientConfig, Digest, RegistryClient};
use sigil_testkit::notation::{self, Format, LeafSpec, NotaryPki, RegistryImage};
use sigil_testkit::tuf::Mirror;
use sigil_verifier::trust::TrustedRoot;

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DAY: i64 = 86_400;
const ACME: &str = "x509.subject: C=US, ST=WA, O=Acme";

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn pki(seed: u64, org: &str) -> NotaryPki {
    let t = now();
    NotaryPki::new(
        seed,
        "acme",
        t - 100 * DAY,
        t + 3650 * DAY,
        &LeafSpec::new(org, "signer", t - DAY, t + 30 * DAY),
    )
}

fn trust_policy(scope: &str, identity: &str) -> String {
    json!({
        "version": "1.0",
        "trustPolicies": [{
            "name": "acme-images",
            "registryScopes": [scope],
            "signatureVerification": {"level": "strict"},
            "trustStores": ["ca:acme"],
            "trustedIdentities": [identity],
        }]
    })
    .to_string()
}

fn spec(trust_policy: &str, root_pem: &str) -> ClusterImagePolicySpec {
    serde_json::from_value(json!({
        "images": [{"glob": "**"}],
        "authorities": [{
            "name": "acme",
            "notation": {
                "trustPolicy": trust_policy,
                "trustStores": [{"name": "ca/acme", "certificates": root_pem}],
            },
        }],
    }))
    .unwrap()
}

fn compile(spec: &ClusterImagePolicySpec) -> CompiledPolicy {
    compile_policy("notation", spec, &Offline).unwrap_or_else(|e| panic!("{e}"))
}

fn errors(spec: &ClusterImagePolicySpec) -> Vec<String> {
    match compile_policy("notation", spec, &Offline) {
        Ok(_) => panic!("expected errors"),
        Err(e) => e.fields().iter().map(ToString::to_string).collect(),
    }
}

/// Serves `image` with `envelopes` pushed as its Notary Project signature
/// referrers on 127.0.0.1 (the referrers API); the server stops when the
/// returned mirror is dropped.
fn serve(image: &RegistryImage, envelopes: Vec<(Format, Vec<u8>)>) -> Mirror {
    let mut image = image.clone();
    for (format, envelope) in envelopes {
        image.push_signature(format, envelope);
    }
    Mirror::serve("127.0.0.1:0", image.files()).unwrap()
}

fn sign(pki: &NotaryPki, format: Format, image: &RegistryImage) -> Vec<u8> {
    notation::sign(pki, &image.spec(format, now() - 60))
}

/// Judges `host/acme/app@digest` by `policy` as the webhook does: `Ok` when
/// admitted, else the denial message.
async fn judge(policy: &CompiledPolicy, host: &str, image: &RegistryImage) -> Result<(), String> {
    let client = RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        ..Default::default()
    })
    .unwrap();
    let verifier =
        RegistryVerifier::new(client, TrustedRoot::public_good().unwrap(), BTreeMap::new());
    let name = ImageName::parse(&format!("{host}/acme/app@{}", image.digest)).unwrap();
    let resource = ResourceInfo {
        version: "v1".into(),
        resource: "pods".into(),
        kind: "Pod".into(),
        name: "app".into(),
        namespace: "default".into(),
        ..Default::default()
    };
    let result = evaluate_image(&verifier, [policy], &name, &resource, NoMatchPolicy::Deny).await;
    let verdict = render("Pod default/app", &[result]);
    if verdict.allowed {
        Ok(())
    } else {
        Err(verdict.message.unwrap_or_default())
    }
}

/// A registry holding `envelopes` for a fresh image, judged by a policy
/// trusting `trusted`'s root with `identity` for repository scope `scope`
/// (`{host}` is replaced by the registry's address).
async fn judged(
    envelopes: impl FnOnce(&RegistryImage) -> Vec<(Format, Vec<u8>)>,
    trusted: &NotaryPki,
    scope: &str,
    identity: &str,
) -> Result<(), String> {
    let image = RegistryImage::new("acme/app", "judged");
    let registry = serve(&image, envelopes(&image));
    let host = registry.addr().to_string();
    let policy = compile(&spec(
        &trust_policy(&scope.replace("{host}", &host), identity),
        &trusted.root.cert_pem(),
    ));
    judge(&policy, &host, &image).await
}

#[tokio::test]
async fn an_image_with_a_jws_or_cose_notation_signature_is_admitted() {
    let acme = pki(1, "Acme");
    for format in [Format::Jws, Format::Cose] {
        let verdict = judged(
            |image| vec![(format, sign(&acme, format, image))],
            &acme,
            "{host}/acme/app",
            ACME,
        )
        .await;
        assert_eq!(verdict, Ok(()), "{format:?}");
    }
}

#[tokio::test]
async fn an_unsigned_image_is_denied_saying_where_sigil_looked() {
    let acme = pki(1, "Acme");
    let denial = judged(|_| Vec::new(), &acme, "{host}/acme/app", ACME)
        .await
        .unwrap_err();
    assert!(
        denial.contains(
            "authority acme (notation): trust policy statement `acme-images`: no Notary Project \
             signature found (looked in referrers API of 127.0.0.1:"
        ),
        "{denial}"
    );
}

#[tokio::test]
async fn a_signature_of_another_image_is_denied_as_an_integrity_failure() {
    let acme = pki(1, "Acme");
    let denial = judged(
        |image| {
            let mut other = image.spec(Format::Jws, now() - 60);
            other.digest = Digest::of(b"another image").to_string();
            vec![(Format::Jws, notation::sign(&acme, &other))]
        },
        &acme,
        "{host}/acme/app",
        ACME,
    )
    .await
    .unwrap_err();
    let expected = format!(
        "Notary Project integrity check failed: the signature is for another artifact: its target \
         digest is `{}`",
        Digest::of(b"another image")
    );
    assert!(
        denial.contains(
            "authority acme (notation): trust policy statement `acme-images`: 127.0.0.1:"
        ) && denial.contains(&expected),
        "{denial}"
    );
}

#[tokio::test]
async fn a_tampered_envelope_is_denied_as_an_integrity_failure() {
    let acme = pki(1, "Acme");
    let denial = judged(
        |image| {
            let mut envelope: serde_json::Value =
                serde_json::from_slice(&sign(&acme, Format::Jws, image)).unwrap();
            // Another payload under the original signature.
            let forged = notation::payload(MANIFEST, &image.digest, 1);
            envelope["payload"] = base64_url(&forged).into();
            vec![(Format::Jws, serde_json::to_vec(&envelope).unwrap())]
        },
        &acme,
        "{host}/acme/app",
        ACME,
    )
    .await
    .unwrap_err();
    assert!(
        denial.contains("authority acme (notation): ")
            && denial.contains("Notary Project integrity check failed:"),
        "{denial}"
    );
    assert!(!denial.contains("authenticity"), "{denial}");
}

fn base64_url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[tokio::test]
async fn a_signer_outside_the_trusted_identities_is_denied_naming_its_subject() {
    let mallory = pki(1, "Mallory");
    let denial = judged(
        |image| vec![(Format::Jws, sign(&mallory, Format::Jws, image))],
        &mallory,
        "{host}/acme/app",
        ACME,
    )
    .await
    .unwrap_err();
    assert!(
        denial.contains(
            "Notary Project authenticity check failed: signing certificate `C=US, CN=signer, \
             O=Mallory, ST=WA` matches none of the trusted identities of statement \
             `acme-images`"
        ),
        "{denial}"
    );
}

#[tokio::test]
async fn a_chain_to_another_root_is_denied_as_untrusted() {
    let acme = pki(1, "Acme");
    let stranger = pki(2, "Acme");
    let denial = judged(
        |image| vec![(Format::Jws, sign(&stranger, Format::Jws, image))],
        &acme,
        "{host}/acme/app",
        ACME,
    )
    .await
    .unwrap_err();
    assert!(
        denial.contains(
            "Notary Project authenticity check failed: the certificate chain (signing \
             certificate `"
        ) && denial.contains("does not lead to trust stores ca:acme"),
        "{denial}"
    );
}

#[tokio::test]
async fn a_repository_no_statement_covers_is_denied_naming_it() {
    let acme = pki(1, "Acme");
    let denial = judged(
        |image| vec![(Format::Jws, sign(&acme, Format::Jws, image))],
        &acme,
        "registry.example/other/app",
        ACME,
    )
    .await
    .unwrap_err();
    assert!(
        denial.contains(
            "authority acme (notation): no statement of the trust policy applies to repository \
             127.0.0.1:"
        ) && denial.contains("/acme/app; add it to a statement's registryScopes"),
        "{denial}"
    );
}

#[test]
fn a_notation_authority_compiles_its_trust_policy_and_stores() {
    let acme = pki(1, "Acme");
    let policy = compile(&spec(
        &trust_policy("registry.example/acme/app", ACME),
        &acme.root.cert_pem(),
    ));
    let AuthorityKind::Notation(n) = &policy.authorities[0].kind else {
        panic!("not a notation authority");
    };
    assert_eq!(n.policy.statements[0].name, "acme-images");
    assert_eq!(n.trust_store.names(), ["ca:acme"]);
}

#[test]
fn a_trust_policy_error_names_the_authority_and_the_trust_policy_field() {
    let acme = pki(1, "Acme");
    let bad = trust_policy("registry.example/acme/app", ACME).replace("strict", "paranoid");
    let errs = errors(&spec(&bad, &acme.root.cert_pem()));
    assert_eq!(
        errs,
        [
            "spec.authorities[0].notation.trustPolicy: trust policy field \
          `trustPolicies[0].signatureVerification.level`: `paranoid` is not strict, permissive, \
          audit or skip"
        ]
    );
}

#[test]
fn a_store_the_trust_policy_names_must_be_given() {
    let acme = pki(1, "Acme");
    let mut s = spec(
        &trust_policy("registry.example/acme/app", ACME),
        &acme.root.cert_pem(),
    );
    s.authorities[0].notation.as_mut().unwrap().trust_stores[0].name = "ca/other".into();
    assert_eq!(
        errors(&s),
        [
            "spec.authorities[0].notation.trustPolicy: trust policy field \
          `trustPolicies[0].trustStores[0]` names `ca:acme`, which trustStores does not give; add \
          an entry with name `ca/acme` and its certificates"
        ]
    );
}

#[test]
fn trust_store_entries_are_checked_by_name_and_content() {
    let acme = pki(1, "Acme");
    let mut s = spec(
        &trust_policy("registry.example/acme/app", ACME),
        &acme.root.cert_pem(),
    );
    let stores = &mut s.authorities[0].notation.as_mut().unwrap().trust_stores;
    stores[0].name = "root:acme".into();
    let errs = errors(&s);
    assert!(
        errs[0].starts_with(
            "spec.authorities[0].notation.trustStores[0].name: `root:acme` is not TYPE/NAME; use \
             ca/NAME, signingAuthority/NAME or tsa/NAME"
        ),
        "{errs:?}"
    );
    let mut s = spec(
        &trust_policy("registry.example/acme/app", ACME),
        &acme.leaf.cert_pem(),
    );
    let errs = errors(&s);
    assert!(
        errs[0].starts_with(
            "spec.authorities[0].notation.trustStores[0].certificates: trust store ca:acme file \
             certificates: `"
        ) && errs[0].ends_with("is neither a CA certificate nor self-signed"),
        "{errs:?}"
    );
    s.authorities[0].notation.as_mut().unwrap().trust_stores[0].certificates = Some("MIIB".into());
    assert!(
        errors(&s)[0]
            .starts_with("spec.authorities[0].notation.trustStores[0].certificates: is not PEM")
    );
}

#[test]
fn a_notation_authority_takes_no_sigstore_fields() {
    let acme = pki(1, "Acme");
    let mut s = spec(
        &trust_policy("registry.example/acme/app", ACME),
        &acme.root.cert_pem(),
    );
    s.authorities[0].ctlog = Some(Default::default());
    assert!(
        errors(&s).contains(
            &"spec.authorities[0]: a notation authority takes no attestations, source, ctlog or \
              rfc3161timestamp; its trust policy says what is verified"
                .to_owned()
        )
    );
}

#[tokio::test]
async fn a_skip_statement_admits_an_unsigned_image_as_notation_does() {
    let image = RegistryImage::new("acme/app", "unsigned");
    let registry = serve(&image, Vec::new());
    let host = registry.addr().to_string();
    let skip = json!({
        "version": "1.0",
        "trustPolicies": [{
            "name": "unchecked",
            "registryScopes": [format!("{host}/acme/app")],
            "signatureVerification": {"level": "skip"},
        }]
    })
    .to_string();
    let spec: ClusterImagePolicySpec = serde_json::from_value(json!({
        "images": [{"glob": "**"}],
        "authorities": [{"name": "acme", "notation": {"trustPolicy": skip}}],
    }))
    .unwrap();
    assert_eq!(judge(&compile(&spec), &host, &image).await, Ok(()));
}

#[test]
fn configmap_and_secret_references_are_left_to_the_controller_and_lint_says_so() {
    let spec: ClusterImagePolicySpec = serde_json::from_value(json!({
        "images": [{"glob": "**"}],
        "authorities": [{"name": "acme", "notation": {
            "trustPolicyRef": {"name": "notation-policy", "key": "trustpolicy.oci.json"},
            "trustStores": [
                {"name": "ca/acme", "configMapRef": {"name": "acme-ca"}},
                {"name": "tsa/stamps", "secretRef": {"name": "stamps", "namespace": "sigil-system"}},
            ],
        }}],
    }))
    .unwrap();
    let Err(e) = compile_policy("notation", &spec, &Offline) else {
        panic!("compiled offline without the referenced objects");
    };
    let fields: Vec<String> = e.fields().iter().map(ToString::to_string).collect();
    assert!(e.fields().iter().all(is_offline_only), "{fields:#?}");
    assert_eq!(
        fields,
        [
            "spec.authorities[0].notation.trustPolicyRef: resolved by sigil-controller from \
             ConfigMap (sigil's namespace)/notation-policy (the trust policy cannot be checked \
             offline)",
            "spec.authorities[0].notation.trustStores[0].configMapRef: read by sigil-controller \
             from ConfigMap (sigil's namespace)/acme-ca (the certificates cannot be checked \
             offline)",
            "spec.authorities[0].notation.trustStores[1].secretRef: read by sigil-controller from \
             Secret sigil-system/stamps (the certificates cannot be checked offline)",
        ]
    );
}

#[test]
fn a_trust_store_with_two_sources_is_refused() {
    let acme = pki(1, "Acme");
    let mut s = spec(
        &trust_policy("registry.example/acme/app", ACME),
        &acme.root.cert_pem(),
    );
    s.authorities[0].notation.as_mut().unwrap().trust_stores[0].secret_ref =
        Some(sigil_api::cip::ObjectReference {
            name: "acme".into(),
            namespace: String::new(),
        });
    assert_eq!(
        errors(&s),
        [
            "spec.authorities[0].notation.trustStores[0]: set exactly one of certificates, \
          configMapRef and secretRef"
        ]
    );
}

#[test]
fn an_image_policy_reads_notation_objects_only_from_its_namespace() {
    let spec: ClusterImagePolicySpec = serde_json::from_value(json!({
        "images": [{"glob": "**"}],
        "authorities": [{"name": "acme", "notation": {
            "trustPolicyRef": {"name": "notation-policy"},
            "trustStores": [{"name": "ca/acme", "secretRef": {"name": "acme", "namespace": "sigil-system"}}],
        }}],
    }))
    .unwrap();
    assert_eq!(
        namespaced_problems(&spec, "team-a"),
        [
            "spec.authorities[0].notation.trustStores[0].secretRef: Secret sigil-system/acme is \
          outside the ImagePolicy's namespace `team-a`; an ImagePolicy reads Secrets only from \
          its own namespace: create it there and leave the namespace out"
        ]
    );
}

/// The one policy `yaml` converts to, compiled.
fn converted(yaml: &str) -> CompiledPolicy {
    let c = sigil_compile::convert::convert_yaml(yaml).unwrap();
    assert!(c.report.is_empty(), "{:?}", c.report);
    let objects: Vec<serde_json::Value> = serde_saphyr::from_multiple(&c.yaml).unwrap();
    assert_eq!(objects.len(), 1, "{}", c.yaml);
    compile(&serde_json::from_value(objects[0]["spec"].clone()).unwrap())
}

fn pem_block(pem: &str, spaces: usize) -> String {
    let pad = " ".repeat(spaces);
    pem.trim().lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// A converted policy admits the image `acme` (whose root it trusts) signed
/// and denies one signed under another root, as the tool it came from would.
async fn admits_acme_denies_mallory(policy: &CompiledPolicy, acme: &NotaryPki) {
    let mallory = pki(2, "Mallory");
    let image = RegistryImage::new("acme/app", "converted");
    for (signer, admitted) in [(acme, true), (&mallory, false)] {
        let registry = serve(
            &image,
            vec![(Format::Cose, sign(signer, Format::Cose, &image))],
        );
        let host = registry.addr().to_string();
        let verdict = judge(policy, &host, &image).await;
        assert_eq!(verdict.is_ok(), admitted, "{verdict:?}");
        if !admitted {
            assert!(
                verdict
                    .unwrap_err()
                    .contains("Notary Project authenticity check failed"),
            );
        }
    }
}

#[tokio::test]
async fn a_converted_kyverno_notary_rule_judges_as_kyvernos_trust_policy_does() {
    // One PKI: minted twice, a second boundary between would make two roots.
    let acme = pki(1, "Acme");
    let rule = format!(
        "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata:\n  name: notary\nspec:\n  \
         validationFailureAction: Enforce\n  rules:\n  - name: signed\n    match:\n      any:\n      \
         - resources:\n          kinds: [Pod]\n    verifyImages:\n    - type: Notary\n      \
         imageReferences: [\"*\"]\n      attestors:\n      - entries:\n        - certificates:\n            \
         cert: |-\n{}",
        pem_block(&acme.root.cert_pem(), 14)
    );
    admits_acme_denies_mallory(&converted(&rule), &acme).await;
}

#[tokio::test]
async fn a_converted_ratify_verifier_judges_with_its_trust_policy_and_providers() {
    let acme = pki(1, "Acme");
    let stream = format!(
        "apiVersion: config.ratify.deislabs.io/v1beta1\nkind: Verifier\nmetadata:\n  name: \
         verifier-notation\nspec:\n  name: notation\n  artifactTypes: \
         application/vnd.cncf.notary.signature\n  parameters:\n    verificationCertStores:\n      \
         ca:\n        ca-certs: [acme-root]\n    trustPolicyDoc:\n      version: \"1.0\"\n      \
         trustPolicies:\n      - name: default\n        registryScopes: [\"*\"]\n        \
         signatureVerification: {{level: strict}}\n        trustStores: [\"ca:ca-certs\"]\n        \
         trustedIdentities: [\"{ACME}\"]\n---\napiVersion: config.ratify.deislabs.io/v1beta1\nkind: \
         KeyManagementProvider\nmetadata:\n  name: acme-root\nspec:\n  type: inline\n  parameters:\n    \
         contentType: certificate\n    value: |\n{}",
        pem_block(&acme.root.cert_pem(), 6)
    );
    admits_acme_denies_mallory(&converted(&stream), &acme).await;
}
