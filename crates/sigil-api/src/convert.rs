//! Conversion of sigstore policy-controller objects (`policy.sigstore.dev`
//! v1alpha1 and v1beta1 ClusterImagePolicy and TrustRoot) into sigil's
//! `policy.sigil.dev/v1alpha1`. The specs share field names, so conversion
//! rewrites `apiVersion`, keeps only the user-owned metadata, drops status,
//! and then lints the result: whatever sigil does not support (CUE, KMS,
//! remote policies, …) is listed in the report, never silently dropped.

use serde_json::{Map, Value};

use crate::lint::{API_VERSION, LintError, lint_document};

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
    /// One line per problem: unsupported fields and skipped documents.
    pub report: Vec<String>,
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
    let mut report = Vec::new();
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
            report.push(format!(
                "{label}: skipped; only {} ClusterImagePolicy and TrustRoot objects convert",
                SOURCE_VERSIONS.join(" and ")
            ));
            continue;
        }
        let converted = convert_document(doc);
        let lint = lint_document(index, &converted);
        report.extend(
            lint.errors
                .iter()
                .map(|e| format!("{label}: unsupported or invalid: {e}")),
        );
        out.push(converted);
    }
    let yaml =
        serde_saphyr::to_string_multiple(&out).map_err(|e| ConvertError::Output(e.to_string()))?;
    Ok(Conversion {
        yaml,
        report,
        converted: out.len(),
    })
}

/// Converts one document (already known to be a policy-controller object).
pub fn convert_document(doc: &Value) -> Value {
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
    out.insert(
        "spec".into(),
        doc.get("spec")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new())),
    );
    Value::Object(out)
}
