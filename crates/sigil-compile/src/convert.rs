//! Conversion of sigstore policy-controller objects (`policy.sigstore.dev`
//! v1alpha1 and v1beta1 ClusterImagePolicy and TrustRoot) into sigil's
//! `policy.sigil.dev/v1alpha1`, keeping policy-controller's verdicts; of
//! Kyverno's image verification ([`crate::kyverno`]); and of Ratify's
//! Notation verifiers with the resources they name ([`crate::ratify`]).
//!
//! The specs share field names, so conversion rewrites `apiVersion`, keeps
//! only the user-owned metadata and drops status. Where the two judge the
//! same spec differently, conversion writes sigil's explicit form of
//! policy-controller's behaviour and reports the change (a [`VerdictNote`]
//! with `kept`), or, where sigil cannot express that behaviour, says so (a
//! note without `kept`). The converted objects are then linted: whatever
//! sigil does not support is listed, never silently dropped.
//! [`crate::verdicts`] says where the two differ.
//!
//! With [`ConvertOptions::trust_root`], authorities that name a Fulcio or
//! Rekor by a URL the public-good root does not list (a private Sigstore,
//! which policy-controller finds through its cluster-wide TUF root) get an
//! explicit `trustRootRef` to that TrustRoot, for users who prefer
//! references to a cluster default trust root.

use serde_json::{Map, Value};
use sigil_api::cip::Authority;
use sigil_verifier::trust::TrustedRoot;

use crate::default_root::{default_urls, instances, same_instance};
use crate::lint::{API_VERSION, LintError, lint_document};
use crate::verdicts::{VerdictNote, keep_verdicts, refusal};

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
    /// One line per change beyond the apiVersion: rewrites that keep
    /// policy-controller's verdicts, `trustRootRef`s added.
    pub changes: Vec<String>,
    /// Verdict differences conversion could not remove, one line each.
    pub warnings: Vec<String>,
    /// How many documents converted.
    pub converted: usize,
}

/// What a conversion may add.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConvertOptions {
    /// A TrustRoot to name in `trustRootRef` wherever an authority names a
    /// Fulcio or Rekor URL that the public-good root does not list.
    pub trust_root: Option<String>,
    /// Other YAML streams converted in the same run (the other files): the
    /// Ratify KeyManagementProviders, CertificateStores and Policies in them
    /// count for this stream's Verifiers, as they would in one cluster.
    pub companions: Vec<String>,
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
    convert_yaml_with(text, &ConvertOptions::default())
}

/// Converts every policy-controller document of a YAML stream with `options`.
pub fn convert_yaml_with(text: &str, options: &ConvertOptions) -> Result<Conversion, ConvertError> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(text)
        .map_err(|e| ConvertError::Input(LintError::Yaml(e.to_string())))?;
    let mut out = Vec::new();
    let mut c = Conversion::default();
    // A companion that is not YAML is reported when it is converted itself.
    let companions = options
        .companions
        .iter()
        .filter_map(|text| serde_saphyr::from_multiple::<Value>(text).ok())
        .flatten();
    let all: Vec<Value> = documents.iter().cloned().chain(companions).collect();
    let ratify = crate::ratify::Inventory::of(&all);
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
        if kind == "WorkloadKind" {
            c.report.push(format!(
                "{label}: not converted: WorkloadKind is sigil's extension and policy-controller \
                 has no equivalent (it admits only Pods and Kubernetes' own workloads); apply it \
                 as {API_VERSION} as it is, `sigil policy lint` checks it"
            ));
            continue;
        }
        if kind == "ImagePolicy" {
            c.report.push(format!(
                "{label}: not converted: ImagePolicy (a namespace's policy) is sigil's extension \
                 and no policy-controller release has an equivalent; write it as {API_VERSION} \
                 with a ClusterImagePolicy's spec and its namespace, `sigil policy lint` checks it"
            ));
            continue;
        }
        let foreign = if crate::kyverno::is_kyverno(doc) {
            Some(crate::kyverno::convert_kyverno(doc))
        } else if crate::ratify::is_ratify(doc) {
            Some(crate::ratify::convert_ratify(doc, &ratify))
        } else {
            None
        };
        if let Some(k) = foreign {
            c.changes
                .extend(k.changes.iter().map(|l| format!("{label}: {l}")));
            c.warnings
                .extend(k.warnings.iter().map(|l| format!("{label}: {l}")));
            c.report
                .extend(k.unmapped.iter().map(|l| format!("{label}: {l}")));
            for converted in k.objects {
                let lint = lint_document(index, &converted);
                let made = format!(
                    "{} {}",
                    crate::foreign::text(&converted, "/kind"),
                    crate::foreign::text(&converted, "/metadata/name")
                );
                c.report.extend(lint.errors.iter().map(|e| {
                    format!("{label}: the converted {made} is unsupported or invalid: {e}")
                }));
                out.push(converted);
            }
            continue;
        }
        if !SOURCE_VERSIONS.contains(&api_version)
            || !matches!(kind, "ClusterImagePolicy" | "TrustRoot")
        {
            c.report.push(format!(
                "{label}: skipped; only {} ClusterImagePolicy and TrustRoot objects, \
                 Kyverno's ClusterPolicy, Policy and ImageValidatingPolicy, and Ratify's \
                 Verifiers with their Stores, Policies and KeyManagementProviders, convert",
                SOURCE_VERSIONS.join(" and ")
            ));
            continue;
        }
        if let Some(why) = refusal(doc) {
            c.report.push(format!("{label}: not converted: {why}"));
            continue;
        }
        let (mut converted, notes) = convert_document(doc);
        for note in notes {
            let line = format!("{label}: {note}");
            if note.kept {
                c.changes.push(line);
            } else {
                c.warnings.push(line);
            }
        }
        if let (Some(name), "ClusterImagePolicy") = (&options.trust_root, kind) {
            c.changes.extend(
                add_trust_root_refs(&mut converted, name)
                    .into_iter()
                    .map(|change| format!("{label}: {change}")),
            );
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
/// and says where verdicts would differ. Check
/// [`refusal`](crate::verdicts::refusal) first.
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
        log_hash_names(&mut spec);
        Vec::new()
    };
    out.insert("spec".into(), spec);
    (Value::Object(out), notes)
}

/// Writes a TrustRoot's log `hashAlgorithm`s the way sigil's TrustRoot
/// names them: policy-controller takes the RFC 4055 names (`sha-256`,
/// `SHA-384`), sigil `sha256`, `sha384` and `sha512`. Any other value stays
/// as it is, for the API server's validation to name.
fn log_hash_names(spec: &mut Value) {
    for logs in ["tLogs", "ctLogs"] {
        let Some(list) = spec
            .pointer_mut(&format!("/sigstoreKeys/{logs}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for log in list {
            let Some(name) = log.get("hashAlgorithm").and_then(Value::as_str) else {
                continue;
            };
            let sigil = match name.to_ascii_lowercase().replace('-', "").as_str() {
                "sha256" => "sha256",
                "sha384" => "sha384",
                "sha512" => "sha512",
                _ => continue,
            };
            if let Some(obj) = log.as_object_mut() {
                obj.insert("hashAlgorithm".into(), Value::from(sigil));
            }
        }
    }
}

/// Sets `trustRootRef: name` on each authority of a converted policy whose
/// `keyless.url` or `ctlog.url` would verify against the default trust root
/// and names an instance the public-good root does not list; returns one
/// line per reference added.
fn add_trust_root_refs(doc: &mut Value, name: &str) -> Vec<String> {
    let Ok(public_good) = TrustedRoot::public_good() else {
        return Vec::new();
    };
    let (cas, logs) = instances(&public_good);
    let listed = |list: &[&str], url: &str| list.iter().any(|l| same_instance(l, url));
    let mut changes = Vec::new();
    let Some(authorities) = doc
        .pointer_mut("/spec/authorities")
        .and_then(Value::as_array_mut)
    else {
        return changes;
    };
    for (i, a) in authorities.iter_mut().enumerate() {
        let Ok(typed) = serde_json::from_value::<Authority>(a.clone()) else {
            continue;
        };
        let (fulcio, rekor) = default_urls(&typed);
        let wanted = [
            ("keyless", fulcio.filter(|u| !listed(&cas, u))),
            ("ctlog", rekor.filter(|u| !listed(&logs, u))),
        ];
        for (field, url) in wanted {
            let Some(url) = url else { continue };
            if let Some(obj) = a.get_mut(field).and_then(Value::as_object_mut) {
                obj.insert("trustRootRef".into(), Value::from(name));
                changes.push(format!(
                    "spec.authorities[{i}].{field}.trustRootRef: set to `{name}`, as \
                     {field}.url `{url}` is not a public-good instance"
                ));
            }
        }
    }
    changes
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use serde_json::json;

    use super::convert_document;

    #[test]
    fn a_policy_controller_policy_in_audit_mode_is_not_converted() {
        let yaml = concat!(
            "apiVersion: policy.sigstore.dev/v1beta1\nkind: ClusterImagePolicy\n",
            "metadata: {name: p}\nspec:\n  mode: audit\n  images: [{glob: \"**\"}]\n",
            "  authorities: [{static: {action: pass}}]\n",
        );
        let c = super::convert_yaml(yaml).unwrap();
        assert_eq!(c.converted, 0);
        assert!(!c.yaml.contains("audit"), "{}", c.yaml);
        assert_eq!(c.report.len(), 1, "{:?}", c.report);
        assert!(
            c.report[0].starts_with(
                "document 0 (ClusterImagePolicy p): not converted: spec.mode: `audit` is sigil's"
            ),
            "{:?}",
            c.report
        );
        let warn = super::convert_yaml(&yaml.replace("mode: audit", "mode: warn")).unwrap();
        assert_eq!(warn.converted, 1);
        assert!(warn.report.is_empty(), "{:?}", warn.report);
    }

    #[test]
    fn a_trust_roots_rfc_4055_hash_names_are_written_as_sigil_names_them() {
        let log = |url: &str, hash: &str| json!({"baseURL": url, "hashAlgorithm": hash, "publicKey": "eA=="});
        let doc = json!({
            "apiVersion": "policy.sigstore.dev/v1alpha1", "kind": "TrustRoot", "metadata": {"name": "t"},
            "spec": {"sigstoreKeys": {
                "tLogs": [log("https://rekor.example", "sha-256"), log("https://rekor2.example", "SHA-384")],
                "ctLogs": [log("https://ct.example", "sha512"), log("https://ct2.example", "md5")],
            }},
        });
        let (out, notes) = convert_document(&doc);
        assert!(notes.is_empty(), "{notes:?}");
        let keys = &out["spec"]["sigstoreKeys"];
        assert_eq!(keys["tLogs"][0]["hashAlgorithm"], "sha256");
        assert_eq!(keys["tLogs"][1]["hashAlgorithm"], "sha384");
        assert_eq!(keys["ctLogs"][0]["hashAlgorithm"], "sha512");
        // Left for the API server's validation to name.
        assert_eq!(keys["ctLogs"][1]["hashAlgorithm"], "md5");
        assert_eq!(out["apiVersion"], "policy.sigil.dev/v1alpha1");
    }
}
