//! sigstore policy-controller's own resources, `policy.sigstore.dev`
//! ClusterImagePolicy (v1alpha1, also served as v1beta1) and TrustRoot
//! (v1alpha1), as sigil's controller reads them when it serves them as they
//! are (the chart's `policyController.serve`).
//!
//! sigil never interprets these specs field by field here: the controller
//! hands each object, as JSON, to the same conversion `sigil policy convert`
//! runs (`sigil_compile::convert::convert_document`) and enforces the result. So
//! the spec is kept whole and untyped, and the CRDs the chart installs (when
//! policy-controller's are absent) preserve unknown fields: nothing a user
//! wrote is pruned before sigil has said what it does with it.
//!
//! The status is the part sigil writes: `observedGeneration` and conditions
//! in the shape policy-controller's CRDs declare (a superset of
//! `metav1.Condition`'s fields). Conditions another controller wrote in a
//! shape sigil does not read are skipped rather than failing the object.

// kube's CustomResource derive re-declares the spec in a private scope.
#![allow(unreachable_pub)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// The API group of policy-controller's resources.
pub const GROUP: &str = "policy.sigstore.dev";

/// The ValidatingWebhookConfiguration and MutatingWebhookConfiguration
/// policy-controller installs; while either exists, policy-controller is
/// enforcing these objects itself.
pub const WEBHOOK_CONFIGURATION: &str = "policy.sigstore.dev";

/// The namespace label policy-controller's webhooks select on.
pub const INCLUDE_LABEL: &str = "policy.sigstore.dev/include";

/// A policy-controller ClusterImagePolicy, its spec kept as written.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "policy.sigstore.dev",
    version = "v1alpha1",
    kind = "ClusterImagePolicy",
    plural = "clusterimagepolicies",
    root = "SigstoreClusterImagePolicy",
    status = "SigstoreStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct SigstoreClusterImagePolicySpec {
    /// Every field of the spec, as the API server returned it.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// A policy-controller TrustRoot, its spec kept as written.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "policy.sigstore.dev",
    version = "v1alpha1",
    kind = "TrustRoot",
    plural = "trustroots",
    root = "SigstoreTrustRoot",
    status = "SigstoreStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct SigstoreTrustRootSpec {
    /// Every field of the spec, as the API server returned it.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// What sigil reports on a policy-controller object it serves.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SigstoreStatus {
    /// The generation sigil last converted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (enforced by sigil, or why not) and `Converted` (what the
    /// conversion changed to keep policy-controller's verdicts, and where
    /// they differ).
    #[serde(
        default,
        deserialize_with = "readable_conditions",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub conditions: Vec<Condition>,
}

/// The conditions of `raw` that parse as `metav1.Condition`; others (a
/// different controller's shape) are skipped.
fn readable_conditions<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Condition>, D::Error> {
    let raw: Option<Vec<Value>> = Option::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| serde_json::from_value(c).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource as _;
    use serde_json::json;

    #[test]
    fn a_policy_keeps_every_field_of_its_spec_and_reads_its_api_version() {
        let doc = json!({
            "apiVersion": "policy.sigstore.dev/v1alpha1",
            "kind": "ClusterImagePolicy",
            "metadata": {"name": "github-policy", "generation": 3},
            "spec": {
                "images": [{"glob": "**"}],
                "authorities": [{"keyless": {"url": "https://fulcio.githubapp.com"}}],
                "somethingNew": {"kept": true}
            }
        });
        let cip: SigstoreClusterImagePolicy = serde_json::from_value(doc.clone()).unwrap();
        assert_eq!(
            SigstoreClusterImagePolicy::api_version(&()),
            "policy.sigstore.dev/v1alpha1"
        );
        assert_eq!(serde_json::to_value(&cip).unwrap()["spec"], doc["spec"]);
    }

    #[test]
    fn conditions_in_another_controllers_shape_are_skipped_not_fatal() {
        let doc = json!({
            "apiVersion": "policy.sigstore.dev/v1alpha1",
            "kind": "TrustRoot",
            "metadata": {"name": "github"},
            "spec": {"remote": {"mirror": "https://tuf-repo.github.com"}},
            "status": {
                "observedGeneration": 1,
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {
                        "type": "Ready", "status": "False", "reason": "Invalid",
                        "message": "m", "lastTransitionTime": "2026-12-01T00:00:00Z"
                    }
                ]
            }
        });
        let root: SigstoreTrustRoot = serde_json::from_value(doc).unwrap();
        let status = root.status.unwrap();
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.conditions.len(), 1);
        assert_eq!(status.conditions[0].reason, "Invalid");
    }
}
