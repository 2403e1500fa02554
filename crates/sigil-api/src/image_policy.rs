//! The namespaced `ImagePolicy` (`policy.sigil.dev/v1alpha1`, sigil's
//! extension: policy-controller has no namespaced policy). Its spec is a
//! ClusterImagePolicy's, field for field; what differs is where it applies
//! and what it may read:
//!
//! - it applies only to objects admitted in its own namespace, in addition
//!   to every ClusterImagePolicy that selects the image: a tenant can add
//!   requirements, never remove one. It never counts as the policy that
//!   selects an image for the cluster's `noMatchPolicy`, so an image no
//!   cluster policy selects is still treated as unmatched;
//! - the Secrets (`key.secretRef`, `keyless.ca-cert.secretRef`) and
//!   ConfigMaps (`policy.configMapRef`) it names are read from its own
//!   namespace only; `source[].signaturePullSecrets` are refused (signatures
//!   are fetched with the workload's own pull secrets, which live in the
//!   same namespace);
//! - trust roots only by reference (`trustRootRef`) to cluster TrustRoots.
//!
//! In the snapshot, verdicts, metrics and audit reports it is named
//! `NAMESPACE/NAME` ([`qualified_name`]); a ClusterImagePolicy's name
//! cannot contain `/`, so the two never collide.

// kube's derive re-declares the struct in a private scope for the schema.
#![allow(unreachable_pub)]
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::cip::{ClusterImagePolicySpec, ClusterImagePolicyStatus};

/// ImagePolicy adds signature and attestation requirements for the images
/// run in its own namespace, on top of the cluster's ClusterImagePolicies.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "policy.sigil.dev",
    version = "v1alpha1",
    kind = "ImagePolicy",
    namespaced,
    category = "sigil",
    status = "ClusterImagePolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ImagePolicy adds signature and attestation requirements for the images run in its own namespace, on top of the cluster's ClusterImagePolicies (sigil's extension).",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the policy compiled and is in force in this namespace"
    ),
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.mode",
        description = "enforce (deny on failure), warn (admit with a warning) or audit (never affects admission; counted and reported)"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why the policy is or is not in force"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ImagePolicySpec {
    /// The same fields as a ClusterImagePolicy's spec.
    #[serde(flatten)]
    pub policy: ClusterImagePolicySpec,
}

/// The name an ImagePolicy goes by wherever policies of both scopes are
/// listed together: `NAMESPACE/NAME`.
pub fn qualified_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use kube::CustomResourceExt as _;

    use super::*;
    use crate::ClusterImagePolicy;

    #[test]
    fn its_schema_is_a_cluster_image_policys_and_it_is_namespaced() {
        let ip = serde_json::to_value(ImagePolicy::crd()).unwrap();
        let cip = serde_json::to_value(ClusterImagePolicy::crd()).unwrap();
        assert_eq!(ip["spec"]["scope"], "Namespaced");
        let schema = |crd: &serde_json::Value| {
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
        };
        let (mut ip_spec, mut cip_spec) = (schema(&ip), schema(&cip));
        // Only the descriptions of the top-level object differ.
        ip_spec.as_object_mut().unwrap().remove("description");
        cip_spec.as_object_mut().unwrap().remove("description");
        assert_eq!(ip_spec, cip_spec);
    }

    #[test]
    fn its_spec_reads_as_a_cluster_image_policys() {
        let ip: ImagePolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "policy.sigil.dev/v1alpha1",
            "kind": "ImagePolicy",
            "metadata": {"name": "extra", "namespace": "team-a"},
            "spec": {"images": [{"glob": "**"}], "mode": "warn",
                     "authorities": [{"key": {"secretRef": {"name": "k"}}}]}
        }))
        .unwrap();
        assert_eq!(ip.spec.policy.images[0].glob, "**");
        assert_eq!(ip.spec.policy.mode.as_deref(), Some("warn"));
        assert_eq!(qualified_name("team-a", "extra"), "team-a/extra");
    }
}
