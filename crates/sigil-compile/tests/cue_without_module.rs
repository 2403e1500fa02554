//! A process without the CUE module (a `cargo install`ed CLI): the
//! controller cannot accept a CUE policy, and `sigil policy lint` notes
//! that the text was not checked instead of failing. Its own test binary,
//! because the module is a per-process setting.
#![allow(clippy::unwrap_used, clippy::panic)]

use sigil_api::ClusterImagePolicySpec;
use sigil_compile::compile::{Offline, compile_policy, is_offline_only};
use sigil_compile::lint::lint_yaml;
use sigil_cue::{CueConfig, configure_shared};

const MISSING: &str = "/nonexistent/sigil/lib/cue.wasm";

fn without_module() {
    configure_shared(CueConfig::new(MISSING)).unwrap();
}

const SPEC: &str = "images: [{glob: \"**\"}]\nauthorities: [{static: {action: pass}}]\npolicy: {type: cue, data: \"typemeta: kind: \\\"Pod\\\"\"}\n";

#[test]
fn the_controller_refuses_a_cue_policy_and_names_the_missing_module() {
    without_module();
    let spec: ClusterImagePolicySpec = serde_saphyr::from_str(SPEC).unwrap();
    let err = compile_policy("p", &spec, &Offline).unwrap_err();
    let field = &err.fields()[0];
    assert_eq!(field.path, "spec.policy.data");
    assert!(
        field
            .message
            .starts_with(&format!("this sigil has no CUE module at {MISSING}: ")),
        "{field}"
    );
    assert!(is_offline_only(field), "lint treats it as a note: {field}");
}

#[test]
fn lint_notes_that_the_cue_text_was_not_checked() {
    without_module();
    let yaml = format!(
        "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata: {{name: x}}\nspec:\n{}",
        SPEC.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    let report = &lint_yaml(&yaml).unwrap()[0];
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(
        report.notes[0].contains("this sigil has no CUE module at"),
        "{:?}",
        report.notes
    );
}
