//! Offline linting of ClusterImagePolicy, TrustRoot and WorkloadKind YAML (`sigil policy
//! lint`): parse every document of a file, refuse unknown fields (the
//! apiserver would silently prune them), and apply exactly the validation and
//! compilation the controller applies, with Secrets left unresolved and
//! ConfigMap-held and remote modules reported as notes. A policy-controller
//! object is linted as `sigil policy convert` would convert it, with a
//! warning wherever the two would judge it differently.

use serde_json::Value;
use sigil_api::{ClusterImagePolicy, ClusterImagePolicySpec, ImagePolicy, TrustRoot, WorkloadKind};
use sigil_policy::model::{
    AuthorityKind, CaTrust, CompiledPolicy, KeyMaterial, Platforms, PolicyProgram,
};
use sigil_policy::rego::RegoError;

use crate::compile::{
    Offline, compile_policy, is_offline_only, namespaced_problems, validate_trust_root,
};
use crate::default_root::{DEFAULT_ANNOTATION, instance_mismatches};
use crate::verdicts::{keep_verdicts, refusal};
use crate::workload_kind::compile_workload_kind;

/// The API version sigil serves.
pub const API_VERSION: &str = "policy.sigil.dev/v1alpha1";

/// Why a file could not be linted at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LintError {
    /// The text is not YAML.
    #[error("not valid YAML: {0}")]
    Yaml(String),
}

/// The findings for one YAML document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DocumentReport {
    /// Position of the document in the file (0-based).
    pub index: usize,
    /// `kind` of the document.
    pub kind: String,
    /// `metadata.name` of the document.
    pub name: String,
    /// Problems that make the cluster reject the object.
    pub errors: Vec<String>,
    /// Facts worth knowing that are not errors (e.g. Secrets resolved only in-cluster).
    pub notes: Vec<String>,
    /// Where policy-controller and sigil would judge a policy-controller
    /// object differently, converted or not.
    pub warnings: Vec<String>,
}

/// Lints every document of a YAML stream.
pub fn lint_yaml(text: &str) -> Result<Vec<DocumentReport>, LintError> {
    lint_yaml_with(text, Probe::No)
}

/// Whether linting also runs each Rego policy once, in the Rego sandbox, on
/// an empty document ([`rego_bound_problems`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Parse and compile only.
    No,
    /// Also evaluate each Rego policy once (`sigil policy lint`: its
    /// binary serves as its own Rego worker).
    Rego,
}

/// [`lint_yaml`], with `probe` deciding whether Rego policies are run.
pub fn lint_yaml_with(text: &str, probe: Probe) -> Result<Vec<DocumentReport>, LintError> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| LintError::Yaml(e.to_string()))?;
    Ok(documents
        .iter()
        .enumerate()
        .map(|(index, doc)| lint_document_with(index, doc, probe))
        .collect())
}

/// Lints one document given as JSON.
pub fn lint_document(index: usize, doc: &Value) -> DocumentReport {
    lint_document_with(index, doc, Probe::No)
}

fn lint_document_with(index: usize, doc: &Value, probe: Probe) -> DocumentReport {
    let text = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut report = DocumentReport {
        index,
        kind: text(doc, "kind"),
        name: doc
            .get("metadata")
            .map(|m| text(m, "name"))
            .unwrap_or_default(),
        ..DocumentReport::default()
    };
    let api_version = text(doc, "apiVersion");
    if api_version.starts_with("policy.sigstore.dev/") {
        report.errors.push(format!(
            "apiVersion: {api_version} is sigstore policy-controller's API; run `sigil policy \
             convert` to get a {API_VERSION} object"
        ));
        if matches!(report.kind.as_str(), "ClusterImagePolicy" | "TrustRoot") {
            lint_as_converted(doc, &mut report);
        }
        return report;
    }
    if api_version != API_VERSION {
        report.errors.push(format!(
            "apiVersion: expected {API_VERSION}, found `{api_version}`"
        ));
        return report;
    }
    if report.name.is_empty() {
        report
            .errors
            .push("metadata.name: a name is required".into());
    }
    match report.kind.as_str() {
        "ClusterImagePolicy" => match serde_json::from_value::<ClusterImagePolicy>(doc.clone()) {
            Ok(cip) => lint_policy_spec(doc, &cip.spec, probe, &mut report),
            Err(e) => report.errors.push(format!("spec: {e}")),
        },
        "ImagePolicy" => match serde_json::from_value::<ImagePolicy>(doc.clone()) {
            Ok(ip) => {
                lint_policy_spec(doc, &ip.spec.policy, probe, &mut report);
                match ip.metadata.namespace.as_deref() {
                    Some(ns) if !ns.is_empty() => report
                        .errors
                        .extend(namespaced_problems(&ip.spec.policy, ns)),
                    _ => report.notes.push(
                        "metadata.namespace: not set; the ImagePolicy applies in the namespace \
                         kubectl applies it to (its Secrets and ConfigMaps are read there)"
                            .into(),
                    ),
                }
            }
            Err(e) => report.errors.push(format!("spec: {e}")),
        },
        "TrustRoot" => match serde_json::from_value::<TrustRoot>(doc.clone()) {
            Ok(root) => {
                unknown_fields(
                    doc.get("spec"),
                    serde_json::to_value(&root.spec).ok().as_ref(),
                    "spec",
                    &mut report.errors,
                );
                if let Err(e) = validate_trust_root(&root.spec) {
                    report
                        .errors
                        .extend(e.fields().iter().map(ToString::to_string));
                }
            }
            Err(e) => report.errors.push(format!("spec: {e}")),
        },
        "WorkloadKind" => match serde_json::from_value::<WorkloadKind>(doc.clone()) {
            Ok(kind) => {
                unknown_fields(
                    doc.get("spec"),
                    serde_json::to_value(&kind.spec).ok().as_ref(),
                    "spec",
                    &mut report.errors,
                );
                match compile_workload_kind(&report.name, &kind.spec) {
                    Ok(compiled) => report.notes.push(format!(
                        "sigil's extension (policy-controller has no equivalent): admits the \
                         images of {} ({}) found at {}",
                        compiled.gvk(),
                        compiled.resource,
                        compiled
                            .pod_specs
                            .iter()
                            .map(|p| format!("pod spec {p}"))
                            .chain(compiled.images.iter().map(|p| format!("image {p}")))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    Err(e) => report.errors.push(format!("spec: {e}")),
                }
            }
            Err(e) => report.errors.push(format!("spec: {e}")),
        },
        other => report.errors.push(format!(
            "kind: expected ClusterImagePolicy, ImagePolicy, TrustRoot or WorkloadKind, found `{other}`"
        )),
    }
    report
}

/// Lints the spec of a ClusterImagePolicy or ImagePolicy: fields the type
/// does not know, compile errors, and notes about what only the cluster
/// can check.
fn lint_policy_spec(
    doc: &Value,
    spec: &ClusterImagePolicySpec,
    probe: Probe,
    report: &mut DocumentReport,
) {
    unknown_fields(
        doc.get("spec"),
        serde_json::to_value(spec).ok().as_ref(),
        "spec",
        &mut report.errors,
    );
    match compile_policy(&report.name, spec, &Offline) {
        Ok(compiled) => {
            report.notes.extend(unresolved_secrets(&compiled));
            report.notes.extend(impossible_secret_names(&compiled));
            report.notes.extend(default_root_notes(spec));
            report.notes.extend(unusable_authorities(&compiled));
            report.notes.extend(idle_platforms(&compiled));
            if probe == Probe::Rego {
                report.errors.extend(rego_bound_problems(&compiled));
            }
        }
        // A ConfigMap-held module can only be checked in the cluster: that
        // alone is worth a note, not a failure.
        Err(e) => {
            for field in e.fields() {
                if is_offline_only(field) {
                    report.notes.push(field.to_string());
                } else {
                    report.errors.push(field.to_string());
                }
            }
        }
    }
}

/// Each Rego program of `policy` evaluated once, in the Rego sandbox, on an
/// empty document: one that crosses a bound there (memory, time, a crash
/// of the evaluator) is reported, as it most likely crosses it on every
/// document. Other outcomes on an empty document (undefined, false, an
/// error about a missing field) say nothing about real documents and are
/// not reported.
pub fn rego_bound_problems(policy: &CompiledPolicy) -> Vec<String> {
    let cip = policy
        .policy
        .as_ref()
        .map(|cip| ("spec.policy".to_owned(), &cip.program));
    let attestations = policy.authorities.iter().enumerate().flat_map(|(i, a)| {
        a.attestations
            .iter()
            .enumerate()
            .filter_map(move |(j, at)| {
                at.policy
                    .as_ref()
                    .map(|p| (format!("spec.authorities[{i}].attestations[{j}].policy"), p))
            })
    });
    cip.into_iter()
        .chain(attestations)
        .filter_map(|(field, program)| {
            let PolicyProgram::Rego(rego) = program else {
                return None;
            };
            let error = rego
                .evaluate_blocking(&Value::Object(Default::default()))
                .err()?;
            matches!(
                error,
                RegoError::TimeLimit { .. } | RegoError::MemoryLimit { .. } | RegoError::Crashed(_)
            )
            .then(|| {
                format!(
                    "{field}: evaluated on an empty document, {error}; sigil denies every \
                     image whose policy crosses a bound"
                )
            })
        })
        .collect()
}

/// Authorities that can never pass, each with why.
fn unusable_authorities(policy: &CompiledPolicy) -> Vec<String> {
    policy
        .authorities
        .iter()
        .filter_map(|a| match &a.kind {
            AuthorityKind::Keyless(k) => match &k.trust {
                CaTrust::Unusable(reason) => Some(format!("authority {}: {reason}", a.name)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// `platforms` beyond `named` on a policy whose authorities are all
/// static: every platform image gets the same fixed verdict, so the field
/// changes nothing but adds a read of the index.
fn idle_platforms(policy: &CompiledPolicy) -> Option<String> {
    let all_static = policy
        .authorities
        .iter()
        .all(|a| matches!(a.kind, AuthorityKind::Static(_)));
    (policy.platforms != Platforms::Named && all_static && policy.policy.is_none()).then(|| {
        format!(
            "spec.platforms: `{}` changes nothing here: every authority is static, so each \
             platform image gets the index's verdict; remove it",
            policy.platforms.as_str()
        )
    })
}

/// Lints a policy-controller object as its conversion, and warns where the
/// two would judge it differently.
fn lint_as_converted(doc: &Value, report: &mut DocumentReport) {
    if let Some(why) = refusal(doc) {
        report
            .errors
            .push(format!("`sigil policy convert` does not convert it: {why}"));
        return;
    }
    let mut converted = doc.clone();
    if let Value::Object(fields) = &mut converted {
        fields.insert("apiVersion".into(), Value::from(API_VERSION));
        if report.kind == "ClusterImagePolicy"
            && let Some(spec) = fields.get_mut("spec")
        {
            report.warnings.extend(keep_verdicts(spec).iter().map(|n| {
                if n.kept {
                    format!(
                        "{}: `sigil policy convert` keeps policy-controller's verdict here: {}",
                        n.path, n.message
                    )
                } else {
                    format!(
                        "{}: policy-controller and sigil judge this differently: {}",
                        n.path, n.message
                    )
                }
            }));
        }
    }
    let inner = lint_document(report.index, &converted);
    report.errors.extend(inner.errors);
    report.notes.extend(inner.notes);
}

/// Reports keys of `input` that the typed round trip dropped: fields sigil
/// does not know (typos, features of other APIs).
fn unknown_fields(
    input: Option<&Value>,
    known: Option<&Value>,
    path: &str,
    errors: &mut Vec<String>,
) {
    match (input, known) {
        (Some(Value::Object(input)), Some(Value::Object(known))) => {
            for (key, value) in input {
                let child = format!("{path}.{key}");
                match known.get(key) {
                    Some(k) => unknown_fields(Some(value), Some(k), &child, errors),
                    None if is_empty(value) => {}
                    None => errors.push(format!(
                        "{child}: unknown field; the cluster would drop it silently"
                    )),
                }
            }
        }
        (Some(Value::Array(input)), Some(Value::Array(known))) => {
            for (i, (value, k)) in input.iter().zip(known).enumerate() {
                unknown_fields(Some(value), Some(k), &format!("{path}[{i}]"), errors);
            }
        }
        (Some(Value::Object(input)), None) if !input.is_empty() => {
            errors.push(format!(
                "{path}: unknown field; the cluster would drop it silently"
            ));
        }
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

/// `signaturePullSecrets` that no Secret can be named (not a lowercase DNS
/// subdomain): they add no credentials.
fn impossible_secret_names(policy: &CompiledPolicy) -> Vec<String> {
    let valid = |name: &str| {
        !name.is_empty()
            && name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let mut notes = Vec::new();
    for a in &policy.authorities {
        for (i, s) in a.sources.iter().enumerate() {
            for name in s.pull_secrets.iter().filter(|n| !valid(n)) {
                notes.push(format!(
                    "authority {} source[{i}]: `{name}` is not a valid Secret name (lowercase \
                     letters, digits, `-` and `.`), so no Secret can have it and it adds no \
                     credentials",
                    a.name
                ));
            }
        }
    }
    notes
}

/// URLs that only a cluster whose default TrustRoot lists them accepts:
/// offline, the default is unknown, so they are checked against the
/// embedded public-good root and reported as notes, not errors.
fn default_root_notes(spec: &sigil_api::ClusterImagePolicySpec) -> Vec<String> {
    let Ok(public_good) = sigil_verifier::trust::TrustedRoot::public_good() else {
        return Vec::new();
    };
    instance_mismatches(spec, &public_good)
        .into_iter()
        .map(|m| {
            format!(
                "{}: `{}` is not a public-good {} ({}); the cluster accepts it only when its \
                 default trust root lists it (a TrustRoot annotated {DEFAULT_ANNOTATION}: \"true\"), \
                 or with trustRootRef",
                m.path, m.url, m.what, m.lists
            )
        })
        .collect()
}

fn unresolved_secrets(policy: &CompiledPolicy) -> Vec<String> {
    policy
        .authorities
        .iter()
        .filter_map(|a| match &a.kind {
            AuthorityKind::Key(k) => match &k.key {
                KeyMaterial::Secret(secret) => Some(format!(
                    "authority {}: the key in {secret} is read by the controller in the cluster",
                    a.name
                )),
                KeyMaterial::Resolved(_) => None,
            },
            _ => None,
        })
        .collect()
}
