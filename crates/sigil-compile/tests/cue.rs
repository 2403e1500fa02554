//! CUE policies at compile time: accepted at both levels and from every
//! source, refused with the field and the line when they cannot compile on
//! their own (policy-controller would deny every image they apply to), and
//! every CUE policy of policy-controller's examples accepted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use sigil_api::ClusterImagePolicySpec;
use sigil_api::cip::ConfigMapRef;
use sigil_compile::compile::{CompileError, Offline, SecretResolver, compile_policy};
use sigil_compile::convert::convert_yaml;
use sigil_policy::model::{CompiledPolicy, PolicyProgram, SecretRef};

fn engine() {
    sigil_cue::testing::engine().unwrap_or_else(|e| panic!("{e}"));
}

fn compile_with(yaml: &str, resolver: &dyn SecretResolver) -> Result<CompiledPolicy, CompileError> {
    engine();
    let spec: ClusterImagePolicySpec = serde_saphyr::from_str(yaml).unwrap();
    compile_policy("cue", &spec, resolver)
}

const ATTESTATION: &str = r#"images: [{glob: "**"}]
authorities:
- name: builder
  key: {secretRef: {name: cosign-pub}}
  attestations:
  - name: custom
    predicateType: custom
    policy:
      type: cue
      data: |
        predicateType: "https://cosign.sigstore.dev/attestation/v1"
        predicate: Data: "ok"
"#;

#[test]
fn a_cue_attestation_policy_compiles_and_keeps_the_predicate_type_as_written() {
    let p = compile_with(ATTESTATION, &Offline).unwrap();
    let att = &p.authorities[0].attestations[0];
    assert_eq!(
        att.predicate_type,
        "https://cosign.sigstore.dev/attestation/v1"
    );
    assert_eq!(att.predicate_type_name, "custom");
    match &att.policy {
        Some(PolicyProgram::Cue(cue)) => assert_eq!(cue.name(), "custom"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cip_level_cue_policy_compiles_with_its_include_flags() {
    let yaml = "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\npolicy:\n  type: cue\n  includeTypeMeta: true\n  data: |\n    typemeta: kind: \"Pod\"\n";
    let p = compile_with(yaml, &Offline).unwrap();
    let cip = p.policy.unwrap();
    assert!(cip.include_type_meta);
    assert_eq!(cip.program.language(), "cue");
}

/// Answers every ConfigMap with one CUE text.
struct Cue(&'static str);

impl SecretResolver for Cue {
    fn resolve(&self, _: &SecretRef) -> Option<Result<String, String>> {
        None
    }
    fn config_map(&self, _: &ConfigMapRef) -> Option<Result<String, String>> {
        Some(Ok(self.0.to_owned()))
    }
}

#[test]
fn a_cue_policy_in_a_config_map_is_compiled_and_checked_like_inline_text() {
    let yaml = "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\npolicy: {type: cue, configMapRef: {name: policies, key: cue}}\n";
    let p = compile_with(
        yaml,
        &Cue("config: \"linux/amd64\": config: User: \"65532\"\n"),
    )
    .unwrap();
    assert_eq!(p.policy.unwrap().program.language(), "cue");

    let err = compile_with(yaml, &Cue("config: User: \"65532\n")).unwrap_err();
    let fields = err.fields();
    assert_eq!(fields[0].path, "spec.policy.configMapRef");
    assert!(
        fields[0]
            .message
            .starts_with("failed to compile the cue policy with error: "),
        "{}",
        fields[0]
    );
}

#[test]
fn a_cue_policy_that_does_not_compile_alone_is_refused_with_its_field_and_line() {
    // A top-level `if` over a field only the document has: cosign compiles
    // the policy alone first, so this policy fails on every input.
    let yaml = ATTESTATION.replace(
        "predicate: Data: \"ok\"",
        "predicate: Data: string\n        if predicate.Data != \"ok\" { fail: true & false }",
    );
    let err = compile_with(&yaml, &Offline).unwrap_err();
    let field = &err.fields()[0];
    assert_eq!(
        field.path,
        "spec.authorities[0].attestations[0].policy.data"
    );
    assert_eq!(
        field.message,
        "failed to compile the cue policy with error: non-concrete value string in operand to != \
         (line 3 column 4); a CUE policy must compile on its own (policy-controller would deny \
         every image it applies to)"
    );
}

#[test]
fn only_rego_and_cue_are_policy_types() {
    let err =
        compile_with(&ATTESTATION.replace("type: cue", "type: jsonnet"), &Offline).unwrap_err();
    assert_eq!(
        err.fields()[0].to_string(),
        "spec.authorities[0].attestations[0].policy.type: unsupported policy type `jsonnet`; use `rego` or `cue`"
    );
}

/// Every file of policy-controller's examples that holds a CUE policy.
fn example_files_with_cue() -> Vec<std::path::PathBuf> {
    let dir = sigil_testdata::policy_controller_testdata().unwrap_or_else(|e| panic!("{e}"));
    let mut files = Vec::new();
    for sub in ["valid", "e2e"] {
        for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let cue = text.contains("type: cue") || text.contains("type: \"cue\"");
            // A `policy.remote` text is fetched by the controller from its
            // URL (not reachable in tests); the others are in the file.
            if path.extension().is_some_and(|e| e == "yaml") && cue && !text.contains("remote:") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_cue_policy_in_policy_controllers_examples_is_accepted() {
    engine();
    let files = example_files_with_cue();
    assert!(files.len() >= 10, "found {} files with CUE", files.len());
    assert!(
        files
            .iter()
            .any(|p| p.ends_with(Path::new("e2e/cip-include-typemeta.yaml"))),
        "{files:?}"
    );
    let mut problems = Vec::new();
    for path in &files {
        let conversion = convert_yaml(&std::fs::read_to_string(path).unwrap()).unwrap();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        problems.extend(
            conversion
                .report
                .iter()
                .filter(|line| is_about_cue(line))
                .map(|line| format!("{name}: {line}")),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A report line about a policy's language, text or source, not about the
/// features other parts of sigil handle (`remote`, `fetchConfigFile`).
fn is_about_cue(line: &str) -> bool {
    [
        ".policy.type",
        ".policy.data",
        ".policy.configMapRef",
        "policy: ",
    ]
    .iter()
    .any(|needle| line.contains(needle))
        || line.contains("cue")
        || line.contains("CUE")
}
