//! Conversion of sigstore policy-controller objects (`policy.sigstore.dev`
//! v1alpha1 and v1beta1 ClusterImagePolicy and TrustRoot) into sigil's
//! `policy.sigil.dev/v1alpha1`, keeping policy-controller's verdicts.
//!
//! The specs share field names, so conversion rewrites `apiVersion`, keeps
//! only the user-owned metadata and drops status. Where the two judge the
//! same spec differently, conversion writes sigil's explicit form of
//! policy-controller's behaviour and reports the change (a [`VerdictNote`]
//! with `kept`), or, where sigil cannot express that behaviour, says so (a
//! note without `kept`). The converted objects are then linted: whatever
//! sigil does not support is listed, never silently dropped.
//! [`crate::verdicts`] says where the two differ.

use serde_json::{Map, Value};

use crate::lint::{API_VERSION, LintError, lint_document};
use crate::verdicts::{VerdictNote, keep_verdicts};

/// API versions of policy-controller that convert.
pub const SOURCE_VERSIONS: &[&str] = &[
    "policy.sigstore.dev/v1alpha1",
    "policy.sigstore.dev/v1beta1",
];

/// The converted documents and what needs attention.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Conversion {
    /// The converted objects as a YAML stream.
    pub yaml: String,
    /// One line per problem: unsupported or invalid fields, skipped documents.
    pub report: Vec<String>,
    /// Rewrites that keep policy-controller's verdicts, one line each.
    pub changes: Vec<String>,
    /// Verdict differences conversion could not remove, one line each.
    pub warnings: Vec<String>,
    /// How many documents converted.
    pub converted: usize,
}

/// Why a conversion failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The input is not YAML.
    #[error(transparent)]
    Input(#[from] LintError),
    /// The output could not be rendered.
    #[error("cannot render the converted objects as YAML: {0}")]
    Output(String),
}

/// Converts every policy-controller document of a YAML stream.
pub fn convert_yaml(text: &str) -> Result<Conversion, ConvertError> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(text)
        .map_err(|e| ConvertError::Input(LintError::Yaml(e.to_string())))?;
    let mut out = Vec::new();
    let mut c = Conversion::default();
    for (index, doc) in documents.iter().enumerate() {
        let api_version = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let label = format!("document {index} ({kind} {name})");
        if !SOURCE_VERSIONS.contains(&api_version)
            || !matches!(kind, "ClusterImagePolicy" | "TrustRoot")
        {
            c.report.push(format!(
                "{label}: skipped; only {} ClusterImagePolicy and TrustRoot objects convert",
                SOURCE_VERSIONS.join(" and ")
            ));
            continue;
        }
        let (converted, notes) = convert_document(doc);
        for note in notes {
            let line = format!("{label}: {note}");
            if note.kept {
                c.changes.push(line);
            } else {
                c.warnings.push(line);
            }
        }
        let lint = lint_document(index, &converted);
        c.report.extend(
            lint.errors
                .iter()
                .map(|e| format!("{label}: unsupported or invalid: {e}")),
        );
        out.push(converted);
    }
    c.yaml =
        serde_saphyr::to_string_multiple(&out).map_err(|e| ConvertError::Output(e.to_string()))?;
    c.converted = out.len();
    Ok(c)
}

/// Converts one document (already known to be a policy-controller object)
/// and says where verdicts would differ.
pub fn convert_document(doc: &Value) -> (Value, Vec<VerdictNote>) {
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::from(API_VERSION));
    out.insert(
        "kind".into(),
        doc.get("kind").cloned().unwrap_or(Value::Null),
    );
    let mut metadata = Map::new();
    if let Some(Value::Object(m)) = doc.get("metadata") {
        for key in ["name", "labels", "annotations"] {
            if let Some(v) = m.get(key) {
                metadata.insert(key.into(), v.clone());
            }
        }
    }
    out.insert("metadata".into(), Value::Object(metadata));
    let mut spec = doc
        .get("spec")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let notes = if doc.get("kind").and_then(Value::as_str) == Some("ClusterImagePolicy") {
        keep_verdicts(&mut spec)
    } else {
        Vec::new()
    };
    out.insert("spec".into(), spec);
    (Value::Object(out), notes)
}
