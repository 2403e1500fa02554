//! The migration promise, on policy-controller's own example policies (its
//! `test/testdata/policy-controller`, read at run time through
//! `sigil-testdata`, never copied): every file `sigil policy convert` and
//! `sigil policy lint` are given must come out as policy-controller judges
//! it.
//!
//! - `valid/`, `e2e/cip-*` and `tester/`: valid in policy-controller; they
//!   must convert without errors and the result must lint clean
//!   (verdict-difference warnings are allowed and shown).
//! - `invalid/`: rejected by policy-controller; sigil must reject them too,
//!   with a message naming the field its `# ERROR:` lines name (that field,
//!   its parent, or a field inside it).
//! - `empty-authorities/`: valid in policy-controller only with its
//!   non-default `fail-on-empty-authorities: false`; sigil, like its
//!   default, rejects them naming `spec.authorities`.
//! - other YAML (a Deployment): skipped by convert, with a message.
//!
//! The test prints one line per file with its outcome and reason. A file
//! that sigil cannot judge yet because a feature is not built yet is
//! listed in [`WAITING`] with that feature; the test fails
//! naming every other file that is not judged as policy-controller judges
//! it, every listed file that fails for another reason, and every listed
//! file that now passes (remove it from the list).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::{Path, PathBuf};

use serde_json::Value;
use sigil_compile::convert::convert_yaml;
use sigil_compile::lint::lint_yaml;

/// Valid files that still fail, each with the reason (as [`waits_for`]
/// names it): none today. Add a line here only with the feature it waits for.
const WAITING: &[(&str, &str)] = &[];

/// What policy-controller says about a file.
#[derive(Debug)]
enum Expected {
    Valid,
    /// Rejected; the fields its error names.
    Invalid(Vec<String>),
    NotAPolicy,
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The field paths a policy-controller `# ERROR:` line names, made absolute
/// (`keyless.identities` is relative to the only authority).
fn error_fields(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(error) = line.trim_start().strip_prefix("# ERROR:") else {
            continue;
        };
        for token in error.split([' ', ',']) {
            let token = token.trim_end_matches(':');
            if token.starts_with("spec.") || token == "spec" {
                out.push(token.to_owned());
            } else if token.starts_with("keyless.") || token.starts_with("key.") {
                out.push(format!("spec.authorities[0].{token}"));
            }
        }
    }
    out
}

fn expectation(rel: &str, text: &str) -> Expected {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_default();
    let is_policy = docs.iter().any(|d| {
        matches!(
            d.get("kind").and_then(Value::as_str),
            Some("ClusterImagePolicy" | "TrustRoot")
        )
    });
    if !is_policy {
        Expected::NotAPolicy
    } else if rel.starts_with("invalid/") {
        let fields = error_fields(text);
        assert!(
            !fields.is_empty(),
            "{rel}: policy-controller's file names no field in an `# ERROR:` line"
        );
        Expected::Invalid(fields)
    } else if rel.starts_with("empty-authorities/") {
        Expected::Invalid(vec!["spec.authorities".into()])
    } else {
        Expected::Valid
    }
}

/// The field path at the start of an error line (`… invalid: <path>: why`).
fn error_path(line: &str) -> &str {
    let rest = line
        .split_once("unsupported or invalid: ")
        .map_or(line, |(_, r)| r);
    rest.split_once(": ").map_or(rest, |(p, _)| p)
}

/// Whether sigil's `path` names policy-controller's `field`: the same
/// field, its parent (the object a one-of lives in), or a field inside it.
fn names(path: &str, field: &str) -> bool {
    let (path, field) = (path.to_ascii_lowercase(), field.to_ascii_lowercase());
    let parent = field
        .rfind(['.', '['])
        .map_or("", |i| field.get(..i).unwrap_or_default());
    path == field
        || (path == parent && parent != "spec")
        || path.starts_with(&format!("{field}."))
        || path.starts_with(&format!("{field}["))
}

/// The feature a failing valid file waits for, from sigil's error paths.
fn waits_for(errors: &[String]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = errors
        .iter()
        .map(|e| {
            let path = error_path(e);
            if path.ends_with(".type") || path.contains(".policy") {
                "a CUE or Rego policy"
            } else if path.ends_with(".kms") {
                "a KMS key"
            } else {
                "something else"
            }
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[test]
fn every_policy_controller_example_is_judged_as_policy_controller_judges_it() {
    let dir = match sigil_testdata::policy_controller_testdata() {
        Ok(dir) => dir,
        Err(missing) => panic!("{missing}"),
    };
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    let mut seen = Vec::new();
    for path in files(&dir) {
        let rel = path
            .strip_prefix(&dir)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(&path).unwrap();
        let expected = expectation(&rel, &text);
        let conversion = match convert_yaml(&text) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{rel}: convert failed as a whole: {e}"));
                continue;
            }
        };
        let (ok, reason) = match &expected {
            Expected::Valid => {
                // The converted YAML must lint clean on its own too (what a
                // user applies); convert already reports the same errors.
                let mut errors = conversion.report.clone();
                if errors.is_empty() {
                    for r in lint_yaml(&conversion.yaml).unwrap() {
                        errors.extend(r.errors.iter().map(|e| {
                            format!(
                                "lint of the converted {} {}: unsupported or invalid: {e}",
                                r.kind, r.name
                            )
                        }));
                    }
                }
                if errors.is_empty() && conversion.converted > 0 {
                    (
                        true,
                        format!(
                            "converted and lints clean; {} change(s) keep policy-controller's \
                             verdicts, {} difference(s) remain",
                            conversion.changes.len(),
                            conversion.warnings.len()
                        ),
                    )
                } else {
                    (
                        false,
                        format!(
                            "waits for {}: {}",
                            waits_for(&errors).join(", "),
                            errors
                                .iter()
                                .map(|e| e.lines().next().unwrap_or_default())
                                .collect::<Vec<_>>()
                                .join(" | ")
                        ),
                    )
                }
            }
            Expected::Invalid(fields) => {
                // The most precise error first: the field itself, then its
                // parent (where a one-of is reported), then one inside it.
                let named = conversion
                    .report
                    .iter()
                    .filter_map(|e| {
                        let path = error_path(e).to_ascii_lowercase();
                        fields
                            .iter()
                            .filter(|f| names(&path, f))
                            .map(|f| {
                                let f = f.to_ascii_lowercase();
                                match (path == f, f.starts_with(&format!("{path}."))) {
                                    (true, _) => 0,
                                    (false, true) => 1,
                                    (false, false) => 2,
                                }
                            })
                            .min()
                            .map(|rank| (rank, e))
                    })
                    .min_by_key(|(rank, _)| *rank)
                    .map(|(_, e)| e);
                match named {
                    Some(e) => (
                        true,
                        format!("rejected: {}", e.lines().next().unwrap_or_default()),
                    ),
                    None if conversion.report.is_empty() => (
                        false,
                        format!(
                            "accepted, but policy-controller rejects it naming {}",
                            fields.join(", ")
                        ),
                    ),
                    None => (
                        false,
                        format!(
                            "rejected without naming {} (policy-controller's field): {}",
                            fields.join(", "),
                            conversion.report.join(" | ")
                        ),
                    ),
                }
            }
            Expected::NotAPolicy => {
                let skipped = conversion.converted == 0
                    && conversion.report.iter().any(|r| r.contains("skipped"));
                (skipped, conversion.report.join(" | "))
            }
        };
        let waiting = WAITING
            .iter()
            .find(|(file, _)| *file == rel)
            .map(|(_, w)| *w);
        let verdict = match (ok, waiting) {
            (true, None) => "ok  ",
            (false, None) => {
                failures.push(format!("{rel}: {reason}"));
                "FAIL"
            }
            (true, Some(w)) => {
                failures.push(format!(
                    "{rel}: passes now; delete its line (waiting for {w}) from WAITING"
                ));
                "PASS"
            }
            (false, Some(w)) if reason.starts_with(&format!("waits for {w}: ")) => "wait",
            (false, Some(w)) => {
                failures.push(format!(
                    "{rel}: listed as waiting for {w}, but fails otherwise: {reason}"
                ));
                "FAIL"
            }
        };
        lines.push(format!("{verdict} {rel} ({expected:?}): {reason}"));
        seen.push(rel);
    }
    for (file, w) in WAITING {
        if !seen.iter().any(|r| r == file) {
            failures.push(format!(
                "{file}: listed as waiting for {w}, but policy-controller's test data has no such file"
            ));
        }
    }
    println!("{}", lines.join("\n"));
    assert!(
        lines.len() >= 80,
        "expected policy-controller's 86 example files, found {}",
        lines.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} policy-controller examples are not judged as policy-controller judges them:\n{}",
        failures.len(),
        lines.len(),
        failures.join("\n")
    );
}

#[test]
fn error_lines_name_absolute_fields() {
    assert_eq!(
        error_fields(
            "# ERROR:missing field(s): spec.authorities[0].keyless.identities[0].subject, spec.authorities[0].keyless.identities[0].subjectRegExp\n"
        ),
        [
            "spec.authorities[0].keyless.identities[0].subject",
            "spec.authorities[0].keyless.identities[0].subjectRegExp"
        ]
    );
    assert_eq!(
        error_fields("# ERROR:keyless.identities: Invalid value\n"),
        ["spec.authorities[0].keyless.identities"]
    );
}

#[test]
fn a_field_is_named_by_itself_its_parent_or_a_field_inside_it() {
    let field = "spec.authorities[0].key.data";
    assert!(names("spec.authorities[0].key.data", field));
    assert!(names("spec.authorities[0].key", field));
    assert!(names("spec.authorities[0].key.data.x", field));
    assert!(
        !names("spec.authorities[0]", field),
        "a grandparent is too vague"
    );
    assert!(!names("spec.authorities[0].key.kms", field));
    assert!(names("spec.authorities[0]", "spec.authorities[0].key"));
    assert!(names(
        "spec.authorities[0].key.secretRef",
        "spec.authorities[0].key.secretref"
    ));
    assert!(!names("spec", "spec.authorities"), "`spec` names no field");
}
