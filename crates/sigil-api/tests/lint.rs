//! Offline lint and policy-controller conversion, on the shipped examples
//! and on fixtures.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::Path;

use sigil_api::convert::convert_yaml;
use sigil_api::lint::lint_yaml;

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
    assert!(r[0].errors[0].starts_with("kind: expected ClusterImagePolicy or TrustRoot"));
}

#[test]
fn conversion_rewrites_api_version_and_reports_what_sigil_does_not_support() {
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
    assert!(report.contains("document 1 (ClusterImagePolicy legacy): unsupported or invalid: spec.authorities[0].key.kms: KMS keys are not supported"), "{report}");
    assert!(
        report.contains(
            "spec.authorities[1].attestations[0].policy.type: CUE policies are not supported"
        ),
        "{report}"
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
    let options = sigil_api::convert::ConvertOptions {
        trust_root: Some("corp-sigstore".into()),
    };
    let c = sigil_api::convert::convert_yaml_with(PRIVATE_SIGSTORE, &options).unwrap();
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
