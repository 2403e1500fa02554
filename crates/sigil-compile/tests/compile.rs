//! Validation and compilation of ClusterImagePolicy and TrustRoot specs: each
//! field's happy path and its error path, with the field path in the message.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use base64::Engine as _;
use sigil_api::ClusterImagePolicySpec;
use sigil_api::cip::{ConfigMapRef, RemotePolicy};
use sigil_api::trustroot::TrustRootSpec;
use sigil_compile::compile::{
    CompileError, MAX_REMOTE_POLICY_BYTES, Offline, SecretResolver, check_remote_policy,
    compile_policy, is_offline_only, namespaced_problems, trust_root_refs, validate_trust_root,
};
use sigil_policy::model::{
    AuthorityKind, CaTrust, CompiledPolicy, KeyMaterial, Mode, Platforms, SecretRef, StaticAction,
    TlogPolicy,
};
use sigil_verifier::crypto::{HashAlgorithm, PublicKey};

const P256: &str = include_str!("data/p256.pub");
const P384: &str = include_str!("data/p384.pub");
const ED25519: &str = include_str!("data/ed.pub");
const RSA: &str = include_str!("data/rsa.pub");
const CA: &str = include_str!("data/ca.pem");

fn indent(text: &str, by: usize) -> String {
    text.lines()
        .map(|l| format!("{}{l}", " ".repeat(by)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn compile_with(yaml: &str, secrets: &dyn SecretResolver) -> Result<CompiledPolicy, CompileError> {
    let spec: ClusterImagePolicySpec =
        serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("bad test YAML: {e}\n{yaml}"));
    compile_policy("test", &spec, secrets)
}

fn compile(yaml: &str) -> CompiledPolicy {
    compile_with(yaml, &Offline).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// The error messages for `yaml`, which must fail.
fn errors(yaml: &str) -> Vec<String> {
    match compile_with(yaml, &Offline) {
        Ok(_) => panic!("expected errors for\n{yaml}"),
        Err(e) => e.fields().iter().map(ToString::to_string).collect(),
    }
}

fn assert_error(yaml: &str, expected: &str) {
    let errs = errors(yaml);
    assert!(
        errs.iter()
            .any(|e| e.starts_with(expected) || e.contains(expected)),
        "expected an error containing {expected:?}, got {errs:#?}"
    );
}

fn keyless(identity: &str) -> String {
    format!(
        "images: [{{glob: \"ghcr.io/**\"}}]\nauthorities:\n- keyless:\n    identities:\n    - {identity}\n"
    )
}

const GHA: &str = "{issuer: \"https://token.actions.githubusercontent.com\", subjectRegExp: \"^https://github.com/sigil-dev/\"}";

fn key_policy(key_fields: &str) -> String {
    format!(
        "images: [{{glob: \"ghcr.io/**\"}}]\nauthorities:\n- name: k\n  key:\n{}\n",
        indent(key_fields, 4)
    )
}

#[test]
fn a_keyless_policy_compiles_to_the_default_trust_root_with_sct_and_tlog() {
    let p = compile(&keyless(GHA));
    assert_eq!(p.name, "test");
    assert_eq!(p.mode, Mode::Enforce);
    let a = &p.authorities[0];
    assert_eq!(a.name, "authority-0");
    assert_eq!(a.tlog, TlogPolicy::Required { trust_root: None });
    let AuthorityKind::Keyless(k) = &a.kind else {
        panic!()
    };
    assert_eq!(k.trust, CaTrust::Default);
    assert!(k.require_sct);
    assert_eq!(k.identities.len(), 1);
}

#[test]
fn images_need_at_least_one_valid_glob() {
    assert_error(
        "images: []\nauthorities: [{static: {action: pass}}]",
        "spec.images: at least one image glob",
    );
    assert_error(
        "images: [{glob: \"ghcr.io/(a|b)\"}]\nauthorities: [{static: {action: pass}}]",
        "spec.images[0].glob: invalid glob `ghcr.io/(a|b)`",
    );
}

#[test]
fn authorities_are_required_and_need_exactly_one_kind() {
    assert_error(
        "images: [{glob: \"**\"}]",
        "spec.authorities: at least one authority is required",
    );
    assert_error(
        "images: [{glob: \"**\"}]\nauthorities: [{name: a}]",
        "spec.authorities[0]: exactly one of key, keyless, notation or static",
    );
    assert_error(
        &format!(
            "images: [{{glob: \"**\"}}]\nauthorities:\n- static: {{action: pass}}\n  keyless: {{identities: [{GHA}]}}"
        ),
        "spec.authorities[0]: exactly one of key, keyless, notation or static",
    );
}

#[test]
fn authority_names_default_to_their_index_and_must_be_unique() {
    let p = compile(
        "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}, {name: x, static: {action: pass}}]",
    );
    assert_eq!(p.authorities[0].name, "authority-0");
    assert_eq!(p.authorities[1].name, "x");
    assert_error(
        "images: [{glob: \"**\"}]\nauthorities: [{name: x, static: {action: pass}}, {name: x, static: {action: fail}}]",
        "spec.authorities[1].name: duplicate authority name `x`",
    );
}

#[test]
fn every_supported_key_type_compiles() {
    for (pem, scheme) in [
        (P256, "ECDSA P-256"),
        (P384, "ECDSA P-384"),
        (ED25519, "Ed25519"),
        (RSA, "RSA"),
    ] {
        let p = compile(&key_policy(&format!("data: |\n{}", indent(pem, 2))));
        let AuthorityKind::Key(k) = &p.authorities[0].kind else {
            panic!()
        };
        let KeyMaterial::Resolved(key) = &k.key else {
            panic!()
        };
        assert_eq!(key.scheme(), scheme);
        assert_eq!(k.hash, None, "no hashAlgorithm: the key type's digest");
    }
}

#[test]
fn an_invalid_key_names_its_field() {
    assert_error(
        &key_policy("data: not a key"),
        "spec.authorities[0].key.data: invalid public key",
    );
    assert_error(
        &key_policy("{}"),
        "spec.authorities[0].key: one of data, secretRef or kms is required",
    );
}

#[test]
fn hash_algorithm_takes_policy_controllers_four_digests_and_defaults_to_the_key_type() {
    let hash_of = |field: &str| {
        let p = compile(&key_policy(&format!("{field}data: |\n{}", indent(P256, 2))));
        let AuthorityKind::Key(k) = &p.authorities[0].kind else {
            panic!()
        };
        k.hash
    };
    assert_eq!(
        hash_of(""),
        None,
        "unset: the digest cosign uses for the key"
    );
    for (value, want) in [
        ("sha224", HashAlgorithm::Sha224),
        ("sha256", HashAlgorithm::Sha256),
        ("sha384", HashAlgorithm::Sha384),
        ("sha512", HashAlgorithm::Sha512),
        // policy-controller lower-cases and trims the value.
        ("\" SHA512 \"", HashAlgorithm::Sha512),
    ] {
        assert_eq!(
            hash_of(&format!("hashAlgorithm: {value}\n")),
            Some(want),
            "{value}"
        );
    }
    for bad in ["md5", "shaINVALID", "sha-256"] {
        assert_error(
            &key_policy(&format!(
                "hashAlgorithm: {bad}\ndata: |\n{}",
                indent(P256, 2)
            )),
            &format!(
                "spec.authorities[0].key.hashAlgorithm: unsupported hashAlgorithm `{bad}`; use \
                 sha224, sha256, sha384 or sha512"
            ),
        );
    }
}

#[test]
fn sha224_with_an_rsa_key_is_refused_at_the_field_because_no_rsa_sha224_check_exists() {
    assert_error(
        &key_policy(&format!(
            "hashAlgorithm: sha224\ndata: |\n{}",
            indent(RSA, 2)
        )),
        "spec.authorities[0].key.hashAlgorithm: sha224 with an RSA key is not supported",
    );
    let p = compile(&key_policy(&format!(
        "hashAlgorithm: sha512\ndata: |\n{}",
        indent(RSA, 2)
    )));
    assert_eq!(p.authorities.len(), 1, "RSA with another digest compiles");
}

struct OneSecret;

impl SecretResolver for OneSecret {
    fn resolve(&self, secret: &SecretRef) -> Option<Result<String, String>> {
        Some(if secret.name == "cosign-pub" {
            Ok(P256.to_owned())
        } else {
            Err("not found; create it or fix secretRef".to_owned())
        })
    }
}

#[test]
fn a_secret_ref_stays_a_reference_offline_and_resolves_through_the_resolver() {
    let yaml = key_policy("secretRef: {name: cosign-pub, namespace: sigil}");
    let p = compile(&yaml);
    let AuthorityKind::Key(k) = &p.authorities[0].kind else {
        panic!()
    };
    assert!(
        matches!(&k.key, KeyMaterial::Secret(s) if s.name == "cosign-pub" && s.namespace == "sigil")
    );
    let p = compile_with(&yaml, &OneSecret).unwrap();
    let AuthorityKind::Key(k) = &p.authorities[0].kind else {
        panic!()
    };
    assert!(matches!(&k.key, KeyMaterial::Resolved(PublicKey::P256(_))));
    let err = compile_with(&key_policy("secretRef: {name: other}"), &OneSecret).unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.authorities[0].key.secretRef: secret other: not found"),
        "{err}"
    );
    assert_error(
        &key_policy(&format!(
            "secretRef: {{name: x}}\ndata: |\n{}",
            indent(P256, 2)
        )),
        "spec.authorities[0].key: set only one of data and secretRef",
    );
}

/// Answers `key.kms` look-ups as the controller does after fetching.
struct FetchedKms(Result<String, String>);

impl SecretResolver for FetchedKms {
    fn resolve(&self, _secret: &SecretRef) -> Option<Result<String, String>> {
        None
    }
    fn kms(&self, _uri: &str) -> Option<Result<String, String>> {
        Some(self.0.clone())
    }
}

#[test]
fn kms_keys_are_syntax_checked_offline_and_left_to_the_controller() {
    let errs = errors(&key_policy(
        "kms: awskms:///arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    ));
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(
        errs[0]
            .starts_with("spec.authorities[0].key.kms: fetched by sigil-controller from the KMS"),
        "{errs:#?}"
    );
    assert_error(
        &key_policy("kms: awskms:///not-a-key"),
        "spec.authorities[0].key.kms: `awskms:///not-a-key` is not a valid awskms key reference: expected awskms://[ENDPOINT]/KEY",
    );
    assert_error(
        &key_policy("kms: k8s://ns/name"),
        "spec.authorities[0].key.kms: `k8s://ns/name` is not a supported KMS URI",
    );
    assert_error(
        &key_policy(
            "kms: hashivault://k
secretRef: {name: x}",
        ),
        "spec.authorities[0].key: set only one of data, secretRef and kms",
    );
}

#[test]
fn a_fetched_kms_key_compiles_like_inline_data_and_a_refusal_names_the_uri() {
    let yaml = key_policy("kms: hashivault://release");
    let compiled = compile_with(&yaml, &FetchedKms(Ok(P256.to_owned()))).unwrap();
    assert!(matches!(
        &compiled.authorities[0].kind,
        AuthorityKind::Key(k) if matches!(k.key, KeyMaterial::Resolved(_))
    ));
    let err = compile_with(&yaml, &FetchedKms(Err("permission denied".into())))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.authorities[0].key.kms: hashivault://release: permission denied"),
        "{err}"
    );
    let err = compile_with(&yaml, &FetchedKms(Ok("not a key".into())))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.authorities[0].key.kms: invalid public key"),
        "{err}"
    );
}

#[test]
fn identities_take_exact_or_regex_issuer_and_subject() {
    compile(&keyless("{issuer: a, subject: b}"));
    compile(&keyless("{issuerRegExp: \"^a$\", subjectRegExp: \"b\"}"));
    assert_error(
        &keyless("{issuer: a, subjectRegExp: \"(\"}"),
        "spec.authorities[0].keyless.identities[0].subjectRegExp: invalid regex:",
    );
    assert_error(
        &keyless("{issuerRegExp: \"[\", subject: b}"),
        "spec.authorities[0].keyless.identities[0].issuerRegExp: invalid regex:",
    );
    assert_error(
        &keyless("{issuer: a, issuerRegExp: a, subject: b}"),
        "spec.authorities[0].keyless.identities[0]: set only one of issuer and issuerRegExp",
    );
    assert_error(
        &keyless("{issuer: a}"),
        "one of subject or subjectRegExp is required",
    );
    assert_error(
        "images: [{glob: \"**\"}]\nauthorities: [{keyless: {identities: []}}]",
        "spec.authorities[0].keyless.identities: at least one identity",
    );
}

#[test]
fn keyless_url_compiles_with_or_without_a_trust_root_the_controller_checks_it_against_the_default()
{
    let with = |extra: &str| {
        format!(
            "images: [{{glob: \"**\"}}]\nauthorities:\n- keyless:\n    identities: [{GHA}]\n{}\n",
            indent(extra, 4)
        )
    };
    compile(&with("url: https://fulcio.sigstore.dev"));
    // A private Fulcio by URL alone, as policy-controller policies name it:
    // whether the cluster's default trust root lists it is the controller's
    // check (default_root::check_instance_urls), not the compiler's.
    let p = compile(&with("url: http://fulcio.fulcio-system.svc"));
    let AuthorityKind::Keyless(k) = &p.authorities[0].kind else {
        panic!()
    };
    assert_eq!(k.trust, CaTrust::Default);
    assert!(trust_root_refs(&p).is_empty());
    let p = compile(&with("url: https://fulcio.example.com\ntrustRootRef: corp"));
    let AuthorityKind::Keyless(k) = &p.authorities[0].kind else {
        panic!()
    };
    assert_eq!(k.trust, CaTrust::TrustRoot("corp".into()));
    assert_eq!(trust_root_refs(&p).keys().collect::<Vec<_>>(), ["corp"]);
    assert_error(
        &with("url: fulcio"),
        "spec.authorities[0].keyless.url: `fulcio` is not an http(s) URL",
    );
    assert_error(
        &with("trustRootRef: Not_A_Name"),
        "spec.authorities[0].keyless.trustRootRef:",
    );
}

#[test]
fn keyless_ca_cert_takes_a_pem_chain() {
    let with = |extra: &str| {
        format!(
            "images: [{{glob: \"**\"}}]\nauthorities:\n- keyless:\n    identities: [{GHA}]\n{}\n",
            indent(extra, 4)
        )
    };
    let p = compile(&with(&format!("ca-cert:\n  data: |\n{}", indent(CA, 4))));
    let AuthorityKind::Keyless(k) = &p.authorities[0].kind else {
        panic!()
    };
    assert!(matches!(&k.trust, CaTrust::CaCert(chain) if chain.len() == 1));
    assert_error(
        &with("ca-cert:\n  data: nothing"),
        "spec.authorities[0].keyless.ca-cert.data: no `-----BEGIN CERTIFICATE-----` block",
    );
    let p = compile(&with("ca-cert:\n  secretRef: {name: corp-ca}"));
    let AuthorityKind::Keyless(k) = &p.authorities[0].kind else {
        panic!()
    };
    assert!(matches!(&k.trust, CaTrust::CaCertSecret(s) if s.name == "corp-ca"));
    assert_error(
        &with(&format!(
            "url: https://fulcio.sigstore.dev\nca-cert:\n  data: |\n{}",
            indent(CA, 4)
        )),
        "spec.authorities[0].keyless: set at most one of url and ca-cert",
    );
}

#[test]
fn insecure_ignore_sct_turns_off_the_sct_requirement() {
    let p = compile(&format!(
        "images: [{{glob: \"**\"}}]\nauthorities:\n- keyless:\n    insecureIgnoreSCT: true\n    identities: [{GHA}]\n"
    ));
    let AuthorityKind::Keyless(k) = &p.authorities[0].kind else {
        panic!()
    };
    assert!(!k.require_sct);
}

#[test]
fn static_actions_are_pass_or_fail_and_take_nothing_else() {
    let p = compile(
        "images: [{glob: \"**\"}]\nauthorities: [{static: {action: fail, message: banned}}]",
    );
    assert!(
        matches!(&p.authorities[0].kind, AuthorityKind::Static(StaticAction::Fail { message: Some(m) }) if m == "banned")
    );
    assert_error(
        "images: [{glob: \"**\"}]\nauthorities: [{static: {action: maybe}}]",
        "spec.authorities[0].static.action: unsupported action `maybe`",
    );
    assert_error(
        "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}, ctlog: {}}]",
        "spec.authorities[0]: a static authority takes no attestations, source or ctlog",
    );
}

#[test]
fn sources_name_a_repository_secrets_and_a_tag_prefix() {
    let with = |source: &str| {
        format!(
            "images: [{{glob: \"**\"}}]\nauthorities:\n- keyless: {{identities: [{GHA}]}}\n  source:\n  - {source}\n"
        )
    };
    let p = compile(&with(
        "{oci: \"registry.local:5000/sigs\", signaturePullSecrets: [{name: regcred}], tagPrefix: \"v1-\"}",
    ));
    let s = &p.authorities[0].sources[0];
    assert_eq!(s.oci.as_deref(), Some("registry.local:5000/sigs"));
    assert_eq!(s.pull_secrets, ["regcred"]);
    assert_eq!(s.tag_prefix.as_deref(), Some("v1-"));
    assert_error(
        &with("{oci: \"ghcr.io/sigs:v1\"}"),
        "spec.authorities[0].source[0].oci: `ghcr.io/sigs:v1` names a tag or digest",
    );
    // Without oci, a source keeps the image's own repository and changes
    // only the credentials or the tag prefix (policy-controller's meaning).
    let p = compile(&with("{signaturePullSecrets: [{name: regcred}]}"));
    let s = &p.authorities[0].sources[0];
    assert_eq!(s.oci, None);
    assert_eq!(s.pull_secrets, ["regcred"]);
    let p = compile(&with("{tagPrefix: sigprefix}"));
    let s = &p.authorities[0].sources[0];
    assert_eq!(
        (s.oci.as_deref(), s.tag_prefix.as_deref()),
        (None, Some("sigprefix"))
    );
    assert_error(
        &with("{oci: ghcr.io/s, tagPrefix: \"a/b\"}"),
        "spec.authorities[0].source[0].tagPrefix:",
    );
    assert_error(
        &with("{oci: ghcr.io/s, signaturePullSecrets: [{name: \"\"}]}"),
        "spec.authorities[0].source[0].signaturePullSecrets[0].name:",
    );
}

#[test]
fn ctlog_empty_disables_the_log_for_keys_only() {
    let key = format!(
        "images: [{{glob: \"**\"}}]\nauthorities:\n- ctlog: {{}}\n  key:\n    data: |\n{}\n",
        indent(P256, 6)
    );
    assert_eq!(compile(&key).authorities[0].tlog, TlogPolicy::Disabled);
    assert_error(
        &format!(
            "images: [{{glob: \"**\"}}]\nauthorities:\n- ctlog: {{}}\n  keyless: {{identities: [{GHA}]}}\n"
        ),
        "spec.authorities[0].ctlog: keyless signatures need a transparency log",
    );
    let p = compile(&format!(
        "images: [{{glob: \"**\"}}]\nauthorities:\n- ctlog: {{trustRootRef: corp}}\n  keyless: {{identities: [{GHA}]}}\n"
    ));
    assert_eq!(
        p.authorities[0].tlog,
        TlogPolicy::Required {
            trust_root: Some("corp".into())
        }
    );
    compile(&format!(
        "images: [{{glob: \"**\"}}]\nauthorities:\n- ctlog: {{url: \"https://rekor.sigstore.dev\"}}\n  keyless: {{identities: [{GHA}]}}\n"
    ));
    let p = compile(&format!(
        "images: [{{glob: \"**\"}}]\nauthorities:\n- ctlog: {{url: \"http://rekor.rekor-system.svc\"}}\n  keyless: {{identities: [{GHA}]}}\n"
    ));
    assert_eq!(
        p.authorities[0].tlog,
        TlogPolicy::Required { trust_root: None }
    );
    assert_error(
        &format!(
            "images: [{{glob: \"**\"}}]\nauthorities:\n- ctlog: {{url: \"rekor\"}}\n  keyless: {{identities: [{GHA}]}}\n"
        ),
        "spec.authorities[0].ctlog.url: `rekor` is not an http(s) URL",
    );
}

#[test]
fn rfc3161_timestamp_and_signature_format_are_accepted() {
    let p = compile(&format!(
        "images: [{{glob: \"**\"}}]\nauthorities:\n- keyless: {{identities: [{GHA}]}}\n  rfc3161timestamp: {{trustRootRef: tsa}}\n  signatureFormat: bundle\n"
    ));
    assert_eq!(
        p.authorities[0].timestamp_trust_root.as_deref(),
        Some("tsa")
    );
    assert_error(
        &format!(
            "images: [{{glob: \"**\"}}]\nauthorities:\n- keyless: {{identities: [{GHA}]}}\n  signatureFormat: protobuf\n"
        ),
        "spec.authorities[0].signatureFormat: unsupported signatureFormat `protobuf`",
    );
}

fn attestation(att: &str) -> String {
    format!(
        "images: [{{glob: \"**\"}}]\nauthorities:\n- name: a\n  keyless: {{identities: [{GHA}]}}\n  attestations:\n{}\n",
        indent(att, 2)
    )
}

const REGO: &str = "package sigstore\ndefault isCompliant := false\nisCompliant if input.predicate.builder.id == \"x\"\n";

#[test]
fn attestation_short_names_expand_and_uris_pass_through() {
    for (short, uri) in [
        ("custom", "https://cosign.sigstore.dev/attestation/v1"),
        ("slsaprovenance", "https://slsa.dev/provenance/v0.2"),
        ("slsaprovenance02", "https://slsa.dev/provenance/v0.2"),
        ("slsaprovenance1", "https://slsa.dev/provenance/v1"),
        ("spdx", "https://spdx.dev/Document"),
        ("spdxjson", "https://spdx.dev/Document"),
        ("cyclonedx", "https://cyclonedx.org/bom"),
        ("link", "https://in-toto.io/Link/v1"),
        ("vuln", "https://cosign.sigstore.dev/attestation/vuln/v1"),
        (
            "https://example.com/custom/v1",
            "https://example.com/custom/v1",
        ),
    ] {
        let p = compile(&attestation(&format!(
            "- {{name: n, predicateType: \"{short}\"}}"
        )));
        assert_eq!(
            p.authorities[0].attestations[0].predicate_type, uri,
            "{short}"
        );
    }
    assert_error(
        &attestation("- {name: n, predicateType: sbom}"),
        "spec.authorities[0].attestations[0].predicateType: `sbom` is neither a predicate type URI nor a cosign short name",
    );
    assert_error(
        &attestation("- {name: \"\", predicateType: vuln}"),
        "spec.authorities[0].attestations[0].name: a name is required",
    );
    assert_error(
        &attestation("- {name: n, predicateType: vuln}\n- {name: n, predicateType: spdx}"),
        "spec.authorities[0].attestations[1].name: duplicate attestation name `n`",
    );
}

#[test]
fn attestation_policies_compile_their_rego_once() {
    let p = compile(&attestation(&format!(
        "- name: n\n  predicateType: slsaprovenance\n  policy:\n    type: rego\n    data: |\n{}",
        indent(REGO, 6)
    )));
    assert!(p.authorities[0].attestations[0].policy.is_some());
    assert_error(
        &attestation(
            "- name: n\n  predicateType: vuln\n  policy: {type: rego, data: \"package sigstore\\nisCompliant if {{\"}",
        ),
        "spec.authorities[0].attestations[0].policy.data: invalid Rego",
    );
    assert_error(
        &attestation("- name: n\n  predicateType: vuln\n  policy: {type: rego}"),
        "spec.authorities[0].attestations[0].policy.data: the Rego policy text is required",
    );
    assert_error(
        &attestation(&format!(
            "- name: n\n  predicateType: vuln\n  policy: {{type: rego, remote: {{url: \"https://x\", sha256sum: {SUM}}}, data: \"package sigstore\\nisCompliant := true\"}}",
        )),
        "spec.authorities[0].attestations[0].policy.remote: set exactly one of data, configMapRef and remote",
    );
    assert_error(
        &attestation(
            "- name: n\n  predicateType: vuln\n  policy: {type: rego, fetchConfigFile: true, data: \"package sigstore\\nisCompliant := true\"}",
        ),
        "spec.authorities[0].attestations[0].policy.fetchConfigFile: only the ClusterImagePolicy-level policy (spec.policy) gets the image's config files",
    );
    assert_error(
        &attestation(
            "- name: n\n  predicateType: vuln\n  policy: {type: rego, includeSpec: true, data: \"package sigstore\\nisCompliant := true\"}",
        ),
        "spec.authorities[0].attestations[0].policy.includeSpec: only the ClusterImagePolicy-level policy",
    );
}

#[test]
fn the_cip_level_policy_compiles_with_its_include_flags() {
    let p = compile(&format!(
        "images: [{{glob: \"**\"}}]\nauthorities: [{{static: {{action: pass}}}}]\npolicy:\n  type: rego\n  includeSpec: true\n  includeObjectMeta: true\n  data: |\n{}",
        indent(REGO, 4)
    ));
    let cip = p.policy.unwrap();
    assert!(cip.include_spec && cip.include_object_meta && !cip.include_type_meta);
    assert!(!cip.fetch_config_file);
    let p = compile(
        "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\npolicy: {type: rego, fetchConfigFile: true, data: \"package sigstore\\nisCompliant := input.config[\\\"linux/amd64\\\"].config.User == \\\"65532\\\"\"}",
    );
    assert!(p.policy.unwrap().fetch_config_file);
    assert_error(
        "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\npolicy: {type: rego, data: \"package other\\nisCompliant := true\"}",
        "spec.policy.data: the Rego module declares package data.other",
    );
}

/// Serves one ConfigMap, `rego`, holding [`REGO`] with the `sigstore` package.
struct OneConfigMap;

impl SecretResolver for OneConfigMap {
    fn resolve(&self, _secret: &SecretRef) -> Option<Result<String, String>> {
        None
    }

    fn config_map(&self, reference: &ConfigMapRef) -> Option<Result<String, String>> {
        Some(if reference.name == "rego" {
            Ok(REGO.to_owned())
        } else {
            Err("not found; create it with the Rego module".to_owned())
        })
    }
}

fn config_map_policy(policy: &str) -> String {
    format!(
        "images: [{{glob: \"**\"}}]\nauthorities: [{{static: {{action: pass}}}}]\npolicy: {policy}"
    )
}

#[test]
fn a_config_map_policy_compiles_the_module_the_resolver_returns() {
    let yaml = config_map_policy("{type: rego, configMapRef: {name: rego, key: policy.rego}}");
    let p = compile_with(&yaml, &OneConfigMap).unwrap();
    assert!(p.policy.is_some());
}

#[test]
fn a_config_map_the_resolver_cannot_read_is_an_error_at_the_config_map_ref() {
    let yaml = config_map_policy("{type: rego, configMapRef: {name: gone, namespace: sigil}}");
    let errs: Vec<String> = compile_with(&yaml, &OneConfigMap)
        .unwrap_err()
        .fields()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        [
            "spec.policy.configMapRef: ConfigMap sigil/gone: not found; create it with the Rego module"
        ]
    );
}

#[test]
fn a_config_map_policy_does_not_compile_offline_and_says_it_is_resolved_in_the_cluster() {
    let yaml = config_map_policy("{type: rego, configMapRef: {name: rego, namespace: sigil}}");
    let err = compile_with(&yaml, &Offline).unwrap_err();
    let [field] = err.fields() else {
        panic!("expected one error, got {err}");
    };
    assert!(is_offline_only(field));
    assert_eq!(
        field.to_string(),
        "spec.policy.configMapRef: resolved by sigil-controller from ConfigMap sigil/rego; it \
         cannot be checked offline — put the module in data to lint it"
    );
    let att = attestation(
        "- name: n\n  predicateType: vuln\n  policy: {type: rego, configMapRef: {name: rego}}",
    );
    assert_error(
        &att,
        "spec.authorities[0].attestations[0].policy.configMapRef: resolved by sigil-controller",
    );
    assert!(compile_with(&att, &OneConfigMap).is_ok());
}

#[test]
fn data_and_config_map_ref_together_are_rejected_by_compile_and_by_the_crd() {
    let yaml = config_map_policy(
        "{type: rego, configMapRef: {name: rego}, data: \"package sigstore\\nisCompliant := true\"}",
    );
    let errs: Vec<String> = compile_with(&yaml, &OneConfigMap)
        .unwrap_err()
        .fields()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        errs[0].starts_with("spec.policy.configMapRef: set exactly one of data and configMapRef"),
        "{errs:?}"
    );
    let files = sigil_api::crds::crd_files().unwrap();
    let (_, crd) = files
        .iter()
        .find(|(n, _)| *n == "clusterimagepolicies.yaml")
        .unwrap();
    assert!(crd.contains(
        "rule: \"[has(self.data), has(self.configMapRef), has(self.remote)].filter(x, x).size() == 1\""
    ));
    assert!(crd.contains("set exactly one of data (the module), configMapRef"));
    assert!(
        !crd.contains("fetchConfigFile is not supported"),
        "fetchConfigFile is supported on spec.policy; the controller refuses it on attestations"
    );
}

/// A well-formed SHA-256 that no test module has.
const SUM: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Serves remote modules: [`REGO`] for `https://policies.example/ok.rego`,
/// a fetch failure otherwise.
struct Remote;

impl SecretResolver for Remote {
    fn resolve(&self, _secret: &SecretRef) -> Option<Result<String, String>> {
        None
    }

    fn remote_policy(&self, remote: &RemotePolicy) -> Option<Result<String, String>> {
        Some(if remote.url == "https://policies.example/ok.rego" {
            check_remote_policy(remote, REGO.as_bytes())
        } else {
            Err("connection refused".into())
        })
    }
}

fn rego_sum() -> String {
    hex::encode(sigil_verifier::crypto::sha256(REGO.as_bytes()))
}

#[test]
fn a_remote_policy_compiles_the_module_the_resolver_fetched_and_checked() {
    let yaml = config_map_policy(&format!(
        "{{type: rego, remote: {{url: \"https://policies.example/ok.rego\", sha256sum: {}}}}}",
        rego_sum()
    ));
    assert!(compile_with(&yaml, &Remote).unwrap().policy.is_some());

    let wrong = config_map_policy(&format!(
        "{{type: rego, remote: {{url: \"https://policies.example/ok.rego\", sha256sum: {SUM}}}}}"
    ));
    let err = compile_with(&wrong, &Remote).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "spec.policy.remote: https://policies.example/ok.rego: the content's sha256 is {}, \
             not the sha256sum {SUM}",
            rego_sum()
        )),
        "{err}"
    );
    let gone = config_map_policy(&format!(
        "{{type: rego, remote: {{url: \"https://policies.example/gone\", sha256sum: {SUM}}}}}"
    ));
    assert_eq!(
        compile_with(&gone, &Remote).unwrap_err().to_string(),
        "spec.policy.remote: https://policies.example/gone: connection refused"
    );
}

#[test]
fn a_remote_policy_does_not_compile_offline_and_says_the_controller_fetches_it() {
    let yaml = config_map_policy(&format!(
        "{{type: rego, remote: {{url: \"https://policies.example/ok.rego\", sha256sum: {SUM}}}}}"
    ));
    let err = compile_with(&yaml, &Offline).unwrap_err();
    let [field] = err.fields() else {
        panic!("expected one error, got {err}");
    };
    assert!(is_offline_only(field), "{field}");
    assert!(
        field.to_string().starts_with(
            "spec.policy.remote: fetched by sigil-controller from https://policies.example/ok.rego"
        ),
        "{field}"
    );
}

#[test]
fn a_remote_policy_needs_an_http_url_with_a_host_and_a_sha256() {
    for (remote, expected) in [
        (
            format!("{{url: \"ftp://x/p\", sha256sum: {SUM}}}"),
            "spec.policy.remote.url: `ftp://x/p` is not an http(s) URL with a host",
        ),
        (
            format!("{{url: \"https:///p\", sha256sum: {SUM}}}"),
            "spec.policy.remote.url: `https:///p` is not an http(s) URL with a host",
        ),
        (
            "{url: \"https://x/p\", sha256sum: abc}".to_owned(),
            "spec.policy.remote.sha256sum: `abc` is not a SHA-256 in hex",
        ),
    ] {
        assert_error(
            &config_map_policy(&format!("{{type: rego, remote: {remote}}}")),
            expected,
        );
    }
}

#[test]
fn fetched_content_is_checked_for_its_hash_size_and_text() {
    let remote = |sum: &str| RemotePolicy {
        url: "https://x/p".into(),
        sha256sum: sum.into(),
    };
    assert_eq!(
        check_remote_policy(&remote(&rego_sum().to_uppercase()), REGO.as_bytes()).unwrap(),
        REGO
    );
    let err = check_remote_policy(&remote(SUM), REGO.as_bytes()).unwrap_err();
    assert!(err.contains(&format!("not the sha256sum {SUM}")), "{err}");
    let big = vec![b'x'; MAX_REMOTE_POLICY_BYTES + 1];
    let err = check_remote_policy(&remote(SUM), &big).unwrap_err();
    assert!(err.contains("more than the 262144 bytes"), "{err}");
    let binary = [0xff, 0xfe];
    let sum = hex::encode(sigil_verifier::crypto::sha256(&binary));
    assert_eq!(
        check_remote_policy(&remote(&sum), &binary).unwrap_err(),
        "the content is not UTF-8 text"
    );
}

#[test]
fn mode_is_enforce_warn_or_audit() {
    let p =
        compile("images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\nmode: warn");
    assert_eq!(p.mode, Mode::Warn);
    let p =
        compile("images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\nmode: audit");
    assert_eq!(p.mode, Mode::Audit);
    assert_error(
        "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\nmode: dryrun",
        "spec.mode: unsupported mode `dryrun`; use `enforce`, `warn` or `audit`",
    );
}

#[test]
fn match_entries_take_supported_resources_and_label_selectors() {
    let base = "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\n";
    let p = compile(&format!(
        "{base}match:\n- group: apps\n  version: v1\n  resource: deployments\n  selector:\n    matchLabels: {{team: a}}\n    matchExpressions:\n    - {{key: tier, operator: In, values: [web]}}\n"
    ));
    let m = &p.matches[0];
    assert_eq!(
        (m.group.as_str(), m.resource.as_str()),
        ("apps", "deployments")
    );
    assert_eq!(m.selector.as_ref().unwrap().match_expressions.len(), 1);
    assert_error(
        &format!("{base}match: [{{resource: services}}]"),
        "spec.match[0].resource: unsupported resource `services`",
    );
    assert_error(
        &format!("{base}match: [{{selector: {{matchLabels: {{a: b}}}}}}]"),
        "spec.match[0].selector: a selector needs a resource, group or version",
    );
    assert_error(
        &format!(
            "{base}match: [{{resource: pods, selector: {{matchExpressions: [{{key: a, operator: Near}}]}}}}]"
        ),
        "spec.match[0].selector.matchExpressions[0].operator: unsupported operator `Near`",
    );
    assert_error(
        &format!(
            "{base}match: [{{resource: pods, selector: {{matchExpressions: [{{key: a, operator: In}}]}}}}]"
        ),
        "spec.match[0].selector.matchExpressions[0].values: In and NotIn need at least one value",
    );
}

#[test]
fn a_match_version_of_star_is_policy_controllers_wildcard_for_any_version() {
    let base = "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\n";
    let p = compile(&format!(
        "{base}match: [{{resource: pods, version: \"*\", selector: {{matchLabels: {{a: b}}}}}}]"
    ));
    assert_eq!(p.matches[0].version, "", "empty matches any version");
    // A selector with only `version: "*"` still names something to apply to.
    assert!(
        compile_with(
            &format!("{base}match: [{{version: \"*\", selector: {{matchLabels: {{a: b}}}}}}]"),
            &Offline
        )
        .is_ok()
    );
}

#[test]
fn every_error_of_a_policy_is_reported_at_once() {
    let errs =
        errors("images: [{glob: \"a b\"}]\nauthorities: [{static: {action: maybe}}]\nmode: dryrun");
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn trust_root(yaml: &str) -> Result<(), CompileError> {
    let spec: TrustRootSpec = serde_saphyr::from_str(yaml).unwrap();
    validate_trust_root(&spec)
}

#[test]
fn a_trust_root_with_own_keys_validates_every_key_and_chain() {
    let good = format!(
        "sigstoreKeys:\n  certificateAuthorities:\n  - {{uri: \"https://fulcio.corp\", certChain: \"{}\"}}\n  tLogs:\n  - {{baseURL: \"https://rekor.corp\", hashAlgorithm: sha256, publicKey: \"{}\"}}\n  ctLogs:\n  - {{baseURL: \"https://ctfe.corp\", publicKey: \"{}\"}}\n",
        b64(CA),
        b64(P256),
        b64(P384)
    );
    trust_root(&good).unwrap();
    let bad = good.replace(&b64(P256), &b64("junk"));
    let err = trust_root(&bad).unwrap_err().to_string();
    assert!(
        err.contains("spec.sigstoreKeys.tLogs[0].publicKey: invalid public key"),
        "{err}"
    );
    let bad = good.replace(&b64(CA), "%%%");
    let err = trust_root(&bad).unwrap_err().to_string();
    assert!(
        err.contains("spec.sigstoreKeys.certificateAuthorities[0].certChain: not base64"),
        "{err}"
    );
}

#[test]
fn a_trust_root_needs_exactly_one_source() {
    let err = trust_root("{}").unwrap_err().to_string();
    assert!(
        err.contains("spec: exactly one of remote, repository, sigstoreKeys or trustedRoot"),
        "{err}"
    );
    let root = b64("{\"signed\": {\"_type\": \"root\"}, \"signatures\": []}");
    trust_root(&format!(
        "remote: {{mirror: \"https://tuf.corp\", root: \"{root}\"}}"
    ))
    .unwrap();
    let err = trust_root(&format!(
        "remote: {{mirror: \"https://tuf.corp\", root: \"{}\"}}",
        b64("[]")
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("spec.remote.root: not a base64-encoded TUF root.json"),
        "{err}"
    );
    trust_root(&format!(
        "repository: {{root: \"{root}\", mirrorFS: \"{}\"}}",
        b64("tar")
    ))
    .unwrap();
}

#[test]
fn identities_may_require_certificate_claims_exactly_or_by_regex() {
    let p = compile(&keyless(
        "{issuer: \"https://token.actions.githubusercontent.com\", subjectRegExp: \"^https://github.com/acme/\", \
         claims: {sourceRepositoryURI: \"https://github.com/acme/app\", buildSignerURIRegExp: \"^https://github.com/acme/app/\\\\.github/workflows/release\\\\.yml@\", sourceRepositoryVisibilityAtSigning: private}}",
    ));
    let AuthorityKind::Keyless(k) = &p.authorities[0].kind else {
        panic!()
    };
    let claims = &k.identities[0].claims;
    let names: Vec<&str> = claims.iter().map(|c| c.claim.name()).collect();
    assert_eq!(
        names,
        [
            "buildSignerURI",
            "sourceRepositoryURI",
            "sourceRepositoryVisibilityAtSigning"
        ]
    );
    assert!(
        claims[0]
            .expected
            .matches("https://github.com/acme/app/.github/workflows/release.yml@refs/heads/main")
    );
    assert!(
        !claims[0]
            .expected
            .matches("https://github.com/acme/app/.github/workflows/other.yml@refs/heads/main")
    );
    assert!(claims[1].expected.matches("https://github.com/acme/app"));
    assert!(!claims[1].expected.matches("https://github.com/acme/app2"));
}

#[test]
fn an_unknown_or_doubly_given_claim_names_its_field() {
    let base = "issuer: \"https://token.actions.githubusercontent.com\", subjectRegExp: \".*\"";
    assert_error(
        &keyless(&format!("{{{base}, claims: {{sourceRepo: x}}}}")),
        "authorities[0].keyless.identities[0].claims.sourceRepo: unknown certificate claim `sourceRepo`",
    );
    assert_error(
        &keyless(&format!(
            "{{{base}, claims: {{runnerEnvironment: github-hosted, runnerEnvironmentRegExp: \"^github\"}}}}"
        )),
        "set only one of runnerEnvironment and runnerEnvironmentRegExp",
    );
    assert_error(
        &keyless(&format!(
            "{{{base}, claims: {{buildTriggerRegExp: \"(\"}}}}"
        )),
        "claims.buildTriggerRegExp: invalid regex",
    );
}

#[test]
fn a_trust_root_may_be_a_trusted_root_document_given_as_it_is() {
    let json = sigil_verifier::trust::PUBLIC_GOOD_JSON;
    let ok: TrustRootSpec =
        serde_json::from_value(serde_json::json!({"trustedRoot": {"data": json}})).unwrap();
    validate_trust_root(&ok).unwrap();
    let cm: TrustRootSpec = serde_json::from_value(
        serde_json::json!({"trustedRoot": {"configMapRef": {"name": "github-root"}}}),
    )
    .unwrap();
    validate_trust_root(&cm).unwrap();

    let broken: TrustRootSpec =
        serde_json::from_value(serde_json::json!({"trustedRoot": {"data": "{}"}})).unwrap();
    let err = validate_trust_root(&broken).unwrap_err().to_string();
    assert!(
        err.contains("spec.trustedRoot.data: not a usable trusted_root.json"),
        "{err}"
    );

    let both: TrustRootSpec = serde_json::from_value(
        serde_json::json!({"trustedRoot": {"data": json}, "remote": {"mirror": "https://tuf.example", "root": "e30="}}),
    )
    .unwrap();
    let err = validate_trust_root(&both).unwrap_err().to_string();
    assert!(
        err.contains("exactly one of remote, repository, sigstoreKeys or trustedRoot"),
        "{err}"
    );
}

#[test]
fn a_remote_trusted_root_target_must_be_a_file_name() {
    let spec = |target: &str| -> TrustRootSpec {
        serde_json::from_value(serde_json::json!({"remote": {
            "mirror": "https://tuf-repo.github.com/",
            "root": base64::engine::general_purpose::STANDARD.encode("{\"signed\": {}}"),
            "trustedRootTarget": target,
        }}))
        .unwrap()
    };
    for bad in ["../etc/passwd.json", "a/b.json", "trusted_root.txt", ""] {
        let err = validate_trust_root(&spec(bad)).unwrap_err().to_string();
        assert!(
            err.contains("spec.remote.trustedRootTarget"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn platforms_says_what_of_an_index_must_pass_and_defaults_to_the_named_digest() {
    let base = "images: [{glob: \"**\"}]\nauthorities: [{keyless: {url: \"https://fulcio.sigstore.dev\", identities: [{issuer: \"https://accounts.google.com\", subject: \"dev@example.com\"}]}}]\n";
    assert_eq!(compile(base).platforms, Platforms::Named);
    for (value, want) in [
        ("named", Platforms::Named),
        ("every", Platforms::Every),
        ("namedOrEvery", Platforms::NamedOrEvery),
    ] {
        assert_eq!(
            compile(&format!("{base}platforms: {value}\n")).platforms,
            want
        );
        assert_eq!(want.as_str(), value);
    }
    assert_error(
        &format!("{base}platforms: any\n"),
        "spec.platforms: unsupported value `any`; use `named`",
    );
}

#[test]
fn an_image_policy_reads_only_its_own_namespace_and_names_no_signature_pull_secrets() {
    let spec: ClusterImagePolicySpec = serde_saphyr::from_str(
        r#"
images: [{glob: "**"}]
policy: {type: rego, configMapRef: {name: shared, namespace: sigil-system}}
authorities:
  - key: {secretRef: {name: team-key}}
  - key: {secretRef: {name: other-key, namespace: team-b}}
    attestations:
      - {name: sbom, predicateType: spdx, policy: {type: cue, configMapRef: {name: own, namespace: team-a}}}
  - keyless: {url: "https://fulcio.sigstore.dev", identities: [{issuer: i, subject: s}]}
    source: [{oci: registry.test/sigs, signaturePullSecrets: [{name: creds}]}]
"#,
    )
    .unwrap();
    assert_eq!(
        namespaced_problems(&spec, "team-a"),
        [
            "spec.policy.configMapRef: ConfigMap sigil-system/shared is outside the ImagePolicy's \
             namespace `team-a`; an ImagePolicy reads ConfigMaps only from its own namespace: \
             create it there and leave the namespace out",
            "spec.authorities[1].key.secretRef: Secret team-b/other-key is outside the \
             ImagePolicy's namespace `team-a`; an ImagePolicy reads Secrets only from its own \
             namespace: create it there and leave the namespace out",
            "spec.authorities[2].source[0].signaturePullSecrets: an ImagePolicy cannot name pull \
             secrets for signatures; they are fetched with the workload's own pull secrets (its \
             imagePullSecrets or its service account's, in this namespace): remove the field",
        ]
    );
    let fit: ClusterImagePolicySpec = serde_saphyr::from_str(
        "images: [{glob: \"**\"}]\nauthorities: [{key: {secretRef: {name: k, namespace: team-a}}}]\n",
    )
    .unwrap();
    assert!(namespaced_problems(&fit, "team-a").is_empty());
}

#[test]
fn an_image_policy_names_no_kms_key_since_the_controller_would_fetch_it_with_its_own_credentials() {
    let spec: ClusterImagePolicySpec = serde_saphyr::from_str(
        r#"
images: [{glob: "registry.test/team-a/**"}]
authorities:
  - key: {kms: "azurekms://attacker.example/signing"}
  - key: {kms: "awskms://kms.attacker.example/alias/signing"}
"#,
    )
    .unwrap();
    let problems = namespaced_problems(&spec, "team-a");
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(
        problems[0],
        "spec.authorities[0].key.kms: an ImagePolicy cannot name a KMS key: sigil's controller \
         would fetch it with the cluster's KMS credentials, not the namespace's; put the public \
         key in key.data or in a Secret of this namespace (key.secretRef), or ask an admin for a \
         ClusterImagePolicy"
    );
    assert!(
        problems[1].starts_with("spec.authorities[1].key.kms: "),
        "{problems:?}"
    );
}
