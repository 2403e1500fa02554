//! Offline lint and policy-controller conversion, on the shipped examples
//! and on fixtures.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::Path;

use sigil_compile::convert::convert_yaml;
use sigil_compile::lint::lint_yaml;

#[test]
fn every_shipped_example_lints_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        for r in lint_yaml(&std::fs::read_to_string(&path).unwrap()).unwrap() {
            assert!(
                r.errors.is_empty(),
                "{}: {} {}: {:#?}",
                path.display(),
                r.kind,
                r.name,
                r.errors
            );
            seen += 1;
        }
    }
    assert!(
        seen >= 7,
        "expected the six example files (seven objects), linted {seen}"
    );
}

#[test]
fn unknown_fields_are_reported_with_their_path() {
    let yaml = "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {name: x}\nspec:\n  images: [{glob: \"**\"}]\n  authorities:\n  - static: {action: pass}\n    keyles: {identities: []}\n";
    let r = &lint_yaml(yaml).unwrap()[0];
    assert_eq!(
        r.errors,
        ["spec.authorities[0].keyles: unknown field; the cluster would drop it silently"]
    );
}

#[test]
fn policy_controller_objects_are_pointed_to_convert() {
    let yaml = "apiVersion: policy.sigstore.dev/v1beta1\nkind: ClusterImagePolicy\nmetadata: {name: x}\nspec: {images: [{glob: \"**\"}]}\n";
    let r = &lint_yaml(yaml).unwrap()[0];
    assert!(
        r.errors[0].contains("run `sigil policy convert`"),
        "{:?}",
        r.errors
    );
}

#[test]
fn a_policy_controller_object_in_audit_mode_is_an_error_as_convert_refuses_it() {
    let yaml = "apiVersion: policy.sigstore.dev/v1beta1\nkind: ClusterImagePolicy\nmetadata: {name: x}\nspec: {mode: audit, images: [{glob: \"**\"}], authorities: [{static: {action: pass}}]}\n";
    let r = &lint_yaml(yaml).unwrap()[0];
    assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
    assert!(
        r.errors[0].contains("run `sigil policy convert`"),
        "{:?}",
        r.errors
    );
    assert!(
        r.errors[1].starts_with(
            "`sigil policy convert` does not convert it: spec.mode: `audit` is sigil's extension"
        ),
        "{:?}",
        r.errors
    );
    let sigil = yaml.replace("policy.sigstore.dev/v1beta1", "policy.sigil.dev/v1alpha1");
    let r = &lint_yaml(&sigil).unwrap()[0];
    assert!(
        r.errors.is_empty(),
        "sigil's own object may be in audit mode: {:?}",
        r.errors
    );
}

#[test]
fn lint_reports_compile_errors_and_unresolved_secrets_as_notes() {
    let yaml = "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {name: x}\nspec:\n  images: [{glob: \"**\"}]\n  authorities:\n  - key: {secretRef: {name: cosign-pub}}\n  - keyless: {identities: [{issuer: a, subjectRegExp: \"(\"}]}\n";
    let r = &lint_yaml(yaml).unwrap()[0];
    assert!(
        r.errors[0]
            .starts_with("spec.authorities[1].keyless.identities[0].subjectRegExp: invalid regex:"),
        "{:?}",
        r.errors
    );
    let yaml = yaml.replace("subjectRegExp: \"(\"", "subject: b");
    let r = &lint_yaml(&yaml).unwrap()[0];
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(
        r.notes[0].contains("secret cosign-pub is read by the controller"),
        "{:?}",
        r.notes
    );
}

#[test]
fn lint_notes_a_config_map_policy_instead_of_failing_and_still_reports_real_errors() {
    let yaml = "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {name: x}\nspec:\n  images: [{glob: \"**\"}]\n  authorities: [{static: {action: pass}}]\n  policy: {type: rego, configMapRef: {name: rego}}\n";
    let r = &lint_yaml(yaml).unwrap()[0];
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(
        r.notes[0].starts_with("spec.policy.configMapRef: resolved by sigil-controller"),
        "{:?}",
        r.notes
    );
    let r = &lint_yaml(&yaml.replace("action: pass", "action: maybe")).unwrap()[0];
    assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
    assert!(
        r.errors[0].starts_with("spec.authorities[0].static.action"),
        "{:?}",
        r.errors
    );
}

#[test]
fn kinds_and_api_versions_other_than_sigils_are_errors() {
    let r = lint_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").unwrap();
    assert!(r[0].errors[0].starts_with("apiVersion: expected policy.sigil.dev/v1alpha1"));
    let r = lint_yaml("apiVersion: policy.sigil.dev/v1alpha1\nkind: Policy\nmetadata: {name: x}\n")
        .unwrap();
    assert!(
        r[0].errors[0].starts_with(
            "kind: expected ClusterImagePolicy, ImagePolicy, TrustRoot or WorkloadKind"
        )
    );
}

#[test]
fn conversion_rewrites_api_version_and_reports_what_sigil_does_not_support() {
    // The fixture's attestation policy is CUE, checked by the CUE module.
    sigil_cue::testing::engine().unwrap_or_else(|e| panic!("{e}"));
    let c = convert_yaml(include_str!("data/policy-controller.yaml")).unwrap();
    assert_eq!(c.converted, 2);
    assert!(
        c.yaml.contains("apiVersion: policy.sigil.dev/v1alpha1"),
        "{}",
        c.yaml
    );
    assert!(
        !c.yaml.contains("resourceVersion") && !c.yaml.contains("status:"),
        "{}",
        c.yaml
    );
    assert!(
        c.yaml.contains("team: platform"),
        "labels are kept: {}",
        c.yaml
    );
    let report = c.report.join("\n");
    assert!(!report.contains("key.kms"), "KMS keys convert: {report}");
    assert!(
        !report.contains("spec.authorities[1].attestations[0].policy"),
        "the CUE attestation policy converts: {report}"
    );
    assert!(
        report.contains("document 2 (ConfigMap unrelated): skipped"),
        "{report}"
    );
    assert!(
        !report.contains("keyless-gha"),
        "the keyless policy converts cleanly: {report}"
    );

    let converted = lint_yaml(&c.yaml).unwrap();
    assert!(converted[0].errors.is_empty(), "{:?}", converted[0].errors);
}

#[test]
fn kms_keys_lint_clean_with_a_note_and_bad_uris_are_errors() {
    let doc = |uri: &str| {
        format!(
            "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {{name: kms}}\n\
             spec:\n  images: [{{glob: \"**\"}}]\n  authorities:\n  - key: {{kms: \"{uri}\"}}\n"
        )
    };
    for uri in [
        "hashivault://release",
        "awskms:///arn:aws:kms:us-east-1:111122223333:alias/release",
        "gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k",
        "azurekms://v.vault.azure.net/release",
    ] {
        let r = lint_yaml(&doc(uri)).unwrap();
        assert!(r[0].errors.is_empty(), "{uri}: {:?}", r[0].errors);
        assert!(
            r[0].notes
                .iter()
                .any(|n| n.contains("fetched by sigil-controller from the KMS") && n.contains(uri)),
            "{uri}: {:?}",
            r[0].notes
        );
    }
    let r = lint_yaml(&doc("gcpkms://projects/p")).unwrap();
    assert!(
        r[0].errors[0].contains("not a valid gcpkms key reference"),
        "{:?}",
        r[0].errors
    );
}

const P384_PEM: &str = include_str!("data/p384.pub");
const P256_PEM: &str = include_str!("data/p256.pub");

fn indented(pem: &str, by: usize) -> String {
    pem.lines()
        .map(|l| format!("{}{l}", " ".repeat(by)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A policy-controller policy with one of each default that changes a
/// verdict when only `apiVersion` changes.
fn policy_controller_policy() -> String {
    format!(
        "apiVersion: policy.sigstore.dev/v1beta1
kind: ClusterImagePolicy
metadata: {{name: pc}}
spec:
  images:
  - glob: \"ghcr.io/acme/app\"
  - glob: \"ghcr.io/acme/**\"
  match:
  - {{resource: deployments, version: v1}}
  authorities:
  - name: no-log-key
    key:
      data: |
{p256}
  - name: p384-key
    key:
      data: |
{p384}
    ctlog: {{url: https://rekor.sigstore.dev}}
  - name: secret-key
    key: {{secretRef: {{name: cosign-pub, namespace: cosign-system}}}}
    rfc3161timestamp: {{trustRootRef: tsa}}
    ctlog: {{url: https://rekor.sigstore.dev}}
  - name: private
    keyless:
      trustRootRef: corp
      identities: [{{issuer: https://issuer.corp, subject: ci@corp}}]
    source:
    - signaturePullSecrets: [{{name: regcred}}]
  - name: ca
    keyless:
      ca-cert: {{data: x}}
      identities: [{{issuer: a, subject: b}}]
    signatureFormat: bundle
",
        p256 = indented(P256_PEM, 8),
        p384 = indented(P384_PEM, 8)
    )
}

#[test]
fn conversion_writes_policy_controllers_defaults_explicitly_and_says_what_it_cannot_keep() {
    let c = convert_yaml(&policy_controller_policy()).unwrap();
    let changes = c.changes.join("\n");
    let warnings = c.warnings.join("\n");
    for expected in [
        "spec.authorities[0].ctlog: added `ctlog: {}`: policy-controller does not check the \
         transparency log for a key authority without ctlog",
        "spec.authorities[1].key.hashAlgorithm: set to `sha256`, policy-controller's default: \
         without it sigil would verify this P-384 key's signatures over sha384",
        "spec.authorities[2].key.hashAlgorithm: set to `sha256`",
        "spec.authorities[2].key.secretRef.namespace: removed `cosign-system`",
        "spec.authorities[2].ctlog: replaced by `ctlog: {}`: with rfc3161timestamp set, \
         policy-controller does not check the transparency log",
    ] {
        assert!(
            changes.contains(expected),
            "missing {expected:?} in\n{changes}"
        );
    }
    assert!(
        !changes.contains("spec.authorities[0].key.hashAlgorithm"),
        "a P-256 key keeps the default: {changes}"
    );
    for expected in [
        "spec.images[0].glob: policy-controller matches `ghcr.io/acme/app` against the \
         digest-pinned image",
        "spec.match[0]: this entry has no group for a resource outside the core group",
        "spec.authorities[3].ctlog: set to `{trustRootRef: corp}`",
        "spec.authorities[3].source[0].signaturePullSecrets: policy-controller reads regcred \
         from the namespace of the object being admitted",
        "spec.authorities[4].keyless.ca-cert: policy-controller admits nothing",
        "spec.authorities[4].signatureFormat: policy-controller looks only for bundle signatures",
    ] {
        assert!(
            warnings.contains(expected),
            "missing {expected:?} in\n{warnings}"
        );
    }
    assert!(
        !warnings.contains("spec.images[1]"),
        "`**` selects pinned images in both: {warnings}"
    );

    let converted: Vec<serde_json::Value> = serde_saphyr::from_multiple(&c.yaml).unwrap();
    let a = &converted[0]["spec"]["authorities"];
    assert_eq!(a[0]["ctlog"], serde_json::json!({}));
    assert_eq!(a[1]["key"]["hashAlgorithm"], "sha256");
    assert_eq!(
        a[1]["ctlog"]["url"], "https://rekor.sigstore.dev",
        "a named log stays"
    );
    assert_eq!(a[2]["ctlog"], serde_json::json!({}));
    assert!(a[2]["key"]["secretRef"].get("namespace").is_none());
    assert_eq!(a[3]["ctlog"], serde_json::json!({"trustRootRef": "corp"}));
}

#[test]
fn lint_of_an_unconverted_policy_controller_file_warns_about_every_verdict_difference() {
    let converted = convert_yaml(&policy_controller_policy()).unwrap();
    let r = &lint_yaml(&policy_controller_policy()).unwrap()[0];
    assert!(
        r.errors[0].contains("run `sigil policy convert`"),
        "{:?}",
        r.errors
    );
    assert_eq!(
        r.warnings.len(),
        converted.changes.len() + converted.warnings.len(),
        "{:#?}",
        r.warnings
    );
    assert!(
        r.warnings.iter().any(|w| w.starts_with(
            "spec.authorities[0].ctlog: `sigil policy convert` keeps policy-controller's verdict \
             here: added `ctlog: {}`"
        )),
        "{:#?}",
        r.warnings
    );
    assert!(
        r.warnings.iter().any(|w| w.starts_with(
            "spec.authorities[4].keyless.ca-cert: policy-controller and sigil judge this \
             differently: policy-controller admits nothing"
        )),
        "{:#?}",
        r.warnings
    );
    // The converted objects' own errors are reported too (a `ca-cert` that
    // is no PEM).
    assert!(
        r.errors
            .iter()
            .any(|e| e.starts_with("spec.authorities[4].keyless.ca-cert.data:")),
        "{:?}",
        r.errors
    );
}

#[test]
fn a_sigil_policy_gets_no_policy_controller_warnings() {
    let yaml = policy_controller_policy().replace(
        "apiVersion: policy.sigstore.dev/v1beta1",
        "apiVersion: policy.sigil.dev/v1alpha1",
    );
    for r in lint_yaml(&yaml).unwrap() {
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }
}

#[test]
fn a_keyless_authority_with_ctlog_empty_is_refused_and_the_difference_explained() {
    let yaml = "apiVersion: policy.sigstore.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {name: x}\nspec:\n  images: [{glob: \"**\"}]\n  authorities:\n  - keyless: {identities: [{issuer: a, subject: b}]}\n    ctlog: {}\n    rfc3161timestamp: {trustRootRef: tsa}\n";
    let c = convert_yaml(yaml).unwrap();
    assert!(
        c.report
            .iter()
            .any(|e| e
                .contains("spec.authorities[0].ctlog: keyless signatures need a transparency log")),
        "{:?}",
        c.report
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("spec.authorities[0].rfc3161timestamp: policy-controller does not check the transparency log of a keyless authority")),
        "{:?}",
        c.warnings
    );
}

#[test]
fn invalid_signature_pull_secret_names_are_accepted_as_policy_controller_does_and_noted() {
    let yaml = "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {name: x}\nspec:\n  images: [{glob: \"**\"}]\n  authorities:\n  - keyless: {identities: [{issuer: a, subject: b}]}\n    source:\n    - signaturePullSecrets: [{name: examplePullSecret}]\n";
    let r = &lint_yaml(yaml).unwrap()[0];
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("`examplePullSecret` is not a valid Secret name")),
        "{:?}",
        r.notes
    );
}

const PRIVATE_SIGSTORE: &str = "apiVersion: policy.sigstore.dev/v1beta1
kind: ClusterImagePolicy
metadata: {name: private}
spec:
  images: [{glob: \"**\"}]
  authorities:
  - keyless:
      url: http://fulcio.fulcio-system.svc
      identities: [{issuerRegExp: .*kubernetes.default.*, subjectRegExp: .*}]
    ctlog:
      url: http://rekor.rekor-system.svc
  - keyless:
      url: https://fulcio.sigstore.dev
      identities: [{issuer: https://token.actions.githubusercontent.com, subjectRegExp: .*}]
    ctlog:
      url: https://rekor.sigstore.dev
";

#[test]
fn a_private_instance_named_by_url_lints_clean_with_a_note_about_the_default_trust_root() {
    let c = convert_yaml(PRIVATE_SIGSTORE).unwrap();
    assert!(c.report.is_empty(), "{:?}", c.report);
    assert!(c.changes.is_empty(), "{:?}", c.changes);
    let r = &lint_yaml(&c.yaml).unwrap()[0];
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
    assert!(
        r.notes[0].starts_with(
            "spec.authorities[0].keyless.url: `http://fulcio.fulcio-system.svc` is not a \
             public-good Fulcio (it lists https://fulcio.sigstore.dev); the cluster accepts it \
             only when its default trust root lists it"
        ),
        "{}",
        r.notes[0]
    );
    assert!(
        r.notes[1].starts_with("spec.authorities[0].ctlog.url:"),
        "{}",
        r.notes[1]
    );
}

#[test]
fn convert_with_a_trust_root_adds_references_only_where_a_url_is_not_public_good() {
    let options = sigil_compile::convert::ConvertOptions {
        trust_root: Some("corp-sigstore".into()),
        ..Default::default()
    };
    let c = sigil_compile::convert::convert_yaml_with(PRIVATE_SIGSTORE, &options).unwrap();
    assert!(c.report.is_empty(), "{:?}", c.report);
    assert_eq!(c.changes.len(), 2, "{:?}", c.changes);
    assert!(
        c.changes[0].ends_with(
            "spec.authorities[0].keyless.trustRootRef: set to `corp-sigstore`, as keyless.url \
             `http://fulcio.fulcio-system.svc` is not a public-good instance"
        ),
        "{}",
        c.changes[0]
    );
    let doc: serde_json::Value = serde_saphyr::from_str(&c.yaml).unwrap();
    let authorities = &doc["spec"]["authorities"];
    assert_eq!(authorities[0]["keyless"]["trustRootRef"], "corp-sigstore");
    assert_eq!(authorities[0]["ctlog"]["trustRootRef"], "corp-sigstore");
    assert!(authorities[1]["keyless"].get("trustRootRef").is_none());
    assert!(authorities[1]["ctlog"].get("trustRootRef").is_none());
    let r = &lint_yaml(&c.yaml).unwrap()[0];
    assert!(r.errors.is_empty() && r.notes.is_empty(), "{r:?}");
}

#[test]
fn conversion_drops_fetch_config_file_from_attestation_policies_where_policy_controller_ignores_it()
{
    let yaml = "apiVersion: policy.sigstore.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {name: att}\nspec:\n  images: [{glob: \"registry.example/**\"}]\n  authorities:\n  - name: a\n    keyless: {url: \"https://fulcio.sigstore.dev\", identities: [{issuer: \"https://accounts.google.com\", subject: \"dev@example.com\"}]}\n    ctlog: {url: \"https://rekor.sigstore.dev\"}\n    attestations:\n    - name: prov\n      predicateType: slsaprovenance\n      policy:\n        type: rego\n        fetchConfigFile: true\n        data: 'package sigstore\n\n          isCompliant := true'\n  policy:\n    type: rego\n    fetchConfigFile: true\n    data: 'package sigstore\n\n      isCompliant := true'\n";
    let c = convert_yaml(yaml).unwrap();
    let change = "spec.authorities[0].attestations[0].policy.fetchConfigFile: removed";
    assert!(
        c.changes.iter().any(|l| l.contains(change)),
        "{:?}",
        c.changes
    );
    let converted: Vec<serde_json::Value> = serde_saphyr::from_multiple(&c.yaml).unwrap();
    let spec = &converted[0]["spec"];
    assert!(
        spec["authorities"][0]["attestations"][0]["policy"]
            .get("fetchConfigFile")
            .is_none()
    );
    assert_eq!(spec["policy"]["fetchConfigFile"], serde_json::json!(true));
    let lint = lint_yaml(&c.yaml).unwrap();
    assert!(lint[0].errors.is_empty(), "{:?}", lint[0].errors);
}

#[test]
fn a_keyless_ca_cert_from_a_kms_lints_clean_with_a_note_that_its_authority_admits_nothing() {
    let yaml = "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {name: kms-ca}\nspec:\n  images: [{glob: \"registry.example/**\"}]\n  authorities:\n  - name: ca\n    keyless:\n      identities: [{issuer: \"https://accounts.google.com\", subject: \"dev@example.com\"}]\n      ca-cert: {kms: \"awskms:///arn:aws:kms:us-east-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab\"}\n";
    let r = lint_yaml(yaml).unwrap();
    assert!(r[0].errors.is_empty(), "{:?}", r[0].errors);
    assert!(
        r[0].notes
            .iter()
            .any(|n| n.starts_with(
                "authority ca: spec.authorities[0].keyless.ca-cert.kms (awskms:///arn:aws:kms:"
            ) && n.contains("this authority admits nothing (as in policy-controller)")),
        "{:?}",
        r[0].notes
    );
    let compiled = sigil_compile::compile::compile_policy(
        "kms-ca",
        &serde_saphyr::from_str::<sigil_api::ClusterImagePolicy>(yaml)
            .unwrap()
            .spec,
        &sigil_compile::compile::Offline,
    )
    .unwrap();
    assert!(matches!(
        &compiled.authorities[0].kind,
        sigil_policy::model::AuthorityKind::Keyless(k)
            if matches!(&k.trust, sigil_policy::model::CaTrust::Unusable(_))
    ));
}

#[test]
fn platforms_is_sigils_extension_so_conversion_drops_it_and_lint_notes_where_it_changes_nothing() {
    let pc = "apiVersion: policy.sigstore.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {name: multi}\nspec:\n  images: [{glob: \"registry.example/**\"}]\n  platforms: every\n  authorities:\n  - keyless: {url: \"https://fulcio.sigstore.dev\", identities: [{issuer: \"https://accounts.google.com\", subject: \"dev@example.com\"}]}\n    ctlog: {url: \"https://rekor.sigstore.dev\"}\n";
    let c = convert_yaml(pc).unwrap();
    assert!(
        c.changes
            .iter()
            .any(|l| l.contains("spec.platforms: removed (\"every\"): sigil's extension")),
        "{:?}",
        c.changes
    );
    let converted: Vec<serde_json::Value> = serde_saphyr::from_multiple(&c.yaml).unwrap();
    assert!(
        converted[0]["spec"].get("platforms").is_none(),
        "{}",
        c.yaml
    );
    let lint = lint_yaml(pc).unwrap();
    assert!(
        lint[0]
            .warnings
            .iter()
            .any(|w| w.starts_with("spec.platforms: `sigil policy convert` keeps")),
        "{:?}",
        lint[0].warnings
    );

    let sigil = "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {name: multi}\nspec:\n  images: [{glob: \"registry.example/**\"}]\n  platforms: every\n  authorities: [{static: {action: pass}}]\n";
    let r = lint_yaml(sigil).unwrap();
    assert!(r[0].errors.is_empty(), "{:?}", r[0].errors);
    assert!(
        r[0].notes
            .iter()
            .any(|n| n.starts_with("spec.platforms: `every` changes nothing here")),
        "{:?}",
        r[0].notes
    );
    let r = lint_yaml(&sigil.replace("platforms: every", "platforms: all")).unwrap();
    assert!(
        r[0].errors
            .iter()
            .any(|e| e.starts_with("spec.platforms: unsupported value `all`")),
        "{:?}",
        r[0].errors
    );
}

#[test]
fn a_workload_kind_is_linted_as_the_controller_accepts_it() {
    let r = lint_yaml(
        "apiVersion: policy.sigil.dev/v1alpha1\nkind: WorkloadKind\nmetadata: {name: rollouts}\n\
         spec: {builtin: ArgoRollout}\n---\n\
         apiVersion: policy.sigil.dev/v1alpha1\nkind: WorkloadKind\nmetadata: {name: bad}\n\
         spec: {group: example.dev, version: v1, kind: Pipeline, resource: pipelines, images: ['spec.steps[x].image'], extra: 1}\n",
    )
    .unwrap();
    assert!(r[0].errors.is_empty(), "{:?}", r[0].errors);
    assert!(
        r[0].notes[0].contains("admits the images of argoproj.io/v1alpha1/Rollout (rollouts) found at pod spec spec.template.spec"),
        "{:?}",
        r[0].notes
    );
    assert!(
        r[1].errors.iter().any(|e| e.contains("spec.extra")),
        "{:?}",
        r[1].errors
    );
    assert!(
        r[1].errors
            .iter()
            .any(|e| e.contains("images[0]: field path `spec.steps[x].image` is invalid")),
        "{:?}",
        r[1].errors
    );
}

#[test]
fn a_workload_kind_is_not_converted_because_policy_controller_has_no_equivalent() {
    let c = convert_yaml(
        "apiVersion: policy.sigil.dev/v1alpha1\nkind: WorkloadKind\nmetadata: {name: rollouts}\nspec: {builtin: ArgoRollout}\n",
    )
    .unwrap();
    assert_eq!(c.converted, 0);
    assert!(
        c.report[0]
            .contains("WorkloadKind is sigil's extension and policy-controller has no equivalent"),
        "{:?}",
        c.report
    );
}

#[test]
fn an_image_policy_is_not_converted_because_policy_controller_has_no_equivalent() {
    let c = convert_yaml(
        "apiVersion: policy.sigil.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {name: team, namespace: a}\nspec: {images: [{glob: '**'}], authorities: [{static: {action: pass}}]}\n",
    )
    .unwrap();
    assert_eq!(c.converted, 0);
    assert!(
        c.report[0].contains("ImagePolicy (a namespace's policy) is sigil's extension"),
        "{:?}",
        c.report
    );
}
