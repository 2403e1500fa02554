//! What converting another tool's policies (Kyverno's, Ratify's) into
//! sigil's shares: the result of one document, and the policy objects and
//! names written.

use serde_json::{Map, Value, json};

use crate::lint::API_VERSION;

/// One document of another tool (Kyverno, Ratify), converted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ForeignConversion {
    /// ClusterImagePolicies, or ImagePolicies for a namespaced object.
    pub objects: Vec<Value>,
    /// How the tool's fields were written in sigil's terms.
    pub changes: Vec<String>,
    /// Where sigil judges more strictly or otherwise differently.
    pub warnings: Vec<String>,
    /// Requirements that do not map, each left out with the reason.
    pub unmapped: Vec<String>,
}

/// The string at JSON `pointer` in `v`, empty when absent or not a string.
pub fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A Kubernetes name from parts: lowercase, `[a-z0-9-.]`, at most 253.
pub(crate) fn object_name(parts: &[&str]) -> String {
    let joined = parts
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("-");
    let mut out: String = joined
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect();
    out.truncate(253);
    let trimmed = out.trim_matches(|c| c == '-' || c == '.');
    if trimmed.is_empty() {
        "converted".into()
    } else {
        trimmed.to_string()
    }
}

/// A sigil policy document, annotated with the tool it was converted from.
pub(crate) fn policy_object(
    name: &str,
    namespace: Option<&str>,
    globs: &[String],
    mode: &str,
    authorities: Vec<Value>,
    from: &str,
) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), Value::from(name));
    if let Some(ns) = namespace {
        metadata.insert("namespace".into(), Value::from(ns));
    }
    metadata.insert(
        "annotations".into(),
        json!({ "policy.sigil.dev/converted-from": from }),
    );
    let images: Vec<Value> = globs.iter().map(|g| json!({ "glob": g })).collect();
    let mut spec = Map::new();
    spec.insert("images".into(), Value::Array(images));
    spec.insert("authorities".into(), Value::Array(authorities));
    if mode != "enforce" {
        spec.insert("mode".into(), Value::from(mode));
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": if namespace.is_some() { "ImagePolicy" } else { "ClusterImagePolicy" },
        "metadata": metadata,
        "spec": spec,
    })
}
