//! Reading the policy files the CLI is given: ClusterImagePolicies and
//! ImagePolicies out of multi-document YAML, for `sigil policy test` and
//! `verify --policy` as for `sigil audit --policy` and `sigil policy preview`,
//! and the ImagePolicyExceptions among them.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use sigil_api::cip::ClusterImagePolicySpec;

pub(crate) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// A ClusterImagePolicy or ImagePolicy of a policy file.
pub(crate) struct PolicyDocument {
    /// `ClusterImagePolicy` or `ImagePolicy`.
    pub(crate) kind: &'static str,
    /// `metadata.name` (empty when absent).
    pub(crate) name: String,
    /// An ImagePolicy's namespace, never empty; `None` for a
    /// ClusterImagePolicy.
    pub(crate) namespace: Option<String>,
    pub(crate) spec: ClusterImagePolicySpec,
}

/// The ClusterImagePolicies and ImagePolicies of the YAML file `path`, in
/// order; other kinds are skipped. An ImagePolicy must say its namespace.
pub(crate) fn policy_documents(path: &Path) -> Result<Vec<PolicyDocument>> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&read(path)?)
        .with_context(|| format!("{} is not YAML", path.display()))?;
    let mut out = Vec::new();
    for doc in docs {
        match doc.get("kind").and_then(|k| k.as_str()) {
            Some("ClusterImagePolicy") => {
                let cip: sigil_api::ClusterImagePolicy = serde_json::from_value(doc)
                    .with_context(|| format!("{}: invalid ClusterImagePolicy", path.display()))?;
                out.push(PolicyDocument {
                    kind: "ClusterImagePolicy",
                    name: cip.metadata.name.unwrap_or_default(),
                    namespace: None,
                    spec: cip.spec,
                });
            }
            Some("ImagePolicy") => {
                let ip: sigil_api::ImagePolicy = serde_json::from_value(doc)
                    .with_context(|| format!("{}: invalid ImagePolicy", path.display()))?;
                let name = ip.metadata.name.unwrap_or_default();
                let Some(namespace) = ip.metadata.namespace.filter(|ns| !ns.is_empty()) else {
                    bail!(
                        "{}: ImagePolicy {name} has no metadata.namespace; give the namespace it \
                         applies in",
                        path.display()
                    );
                };
                out.push(PolicyDocument {
                    kind: "ImagePolicy",
                    name,
                    namespace: Some(namespace),
                    spec: ip.spec.policy,
                });
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The ImagePolicyExceptions of the YAML file `path`, in order; other kinds
/// are skipped. Each must say its namespace.
pub(crate) fn exception_documents(path: &Path) -> Result<Vec<sigil_api::ImagePolicyException>> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&read(path)?)
        .with_context(|| format!("{} is not YAML", path.display()))?;
    let mut out = Vec::new();
    for doc in docs {
        if doc.get("kind").and_then(|k| k.as_str()) != Some("ImagePolicyException") {
            continue;
        }
        let e: sigil_api::ImagePolicyException = serde_json::from_value(doc)
            .with_context(|| format!("{}: invalid ImagePolicyException", path.display()))?;
        if e.metadata.namespace.as_deref().is_none_or(str::is_empty) {
            bail!(
                "{}: ImagePolicyException {} has no metadata.namespace; give the namespace whose \
                 workloads it covers",
                path.display(),
                e.metadata.name.as_deref().unwrap_or_default()
            );
        }
        out.push(e);
    }
    Ok(out)
}

/// The exceptions of `files`, checked with `rules` at `now` as the webhook
/// checks them; a refused one is an error naming it and why.
pub(crate) fn load_exceptions(
    files: &[std::path::PathBuf],
    rules: &sigil_compile::exception::ExceptionRules,
    now: time::OffsetDateTime,
) -> Result<sigil_compile::exception::Exceptions> {
    let mut compiled = Vec::new();
    for path in files {
        for e in exception_documents(path)? {
            compiled.push(
                sigil_compile::exception::compile(&e, rules, now)
                    .map_err(|why| anyhow::anyhow!("{}: {why}", path.display()))?,
            );
        }
    }
    Ok(sigil_compile::exception::Exceptions::new(compiled))
}
