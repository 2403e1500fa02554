//! The namespaced `ImagePolicyException` (`policy.sigil.dev/v1alpha1`,
//! sigil's extension): for a limited time, named images of named workloads
//! in the exception's own namespace are not judged by the named policies.
//!
//! What makes one take effect is decided by whoever enforces it (the webhook
//! and the audit, each with its own clock; `sigil_compile::exception`), not
//! by a status the controller writes, so admission and reports agree and
//! nothing waits on the controller:
//! - its namespace is one the cluster's admin allows exceptions in (the
//!   chart's `exceptions.namespaces`); RBAC decides who may create one;
//! - `expiresAt` is required and lies at most the admin's maximum (the
//!   chart's `exceptions.maxDuration`) after the object's creation; the
//!   exception stops counting at that instant, whatever else happens;
//! - it names the policies it waives: ClusterImagePolicies by name, this
//!   namespace's ImagePolicies by name too. It never waives a policy it
//!   does not name, and never makes an image no policy selects pass the
//!   cluster's `noMatchPolicy`.

// kube's derive re-declares the struct in a private scope for the schema.
#![allow(unreachable_pub)]
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// ImagePolicyException lets named images of named workloads in its
/// namespace run without passing the named policies, until it expires.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "policy.sigil.dev",
    version = "v1alpha1",
    kind = "ImagePolicyException",
    namespaced,
    category = "sigil",
    shortname = "ipe",
    derive = "PartialEq",
    derive = "Default",
    doc = "ImagePolicyException lets named images of named workloads in its namespace run without passing the named ClusterImagePolicies or ImagePolicies, until expiresAt (sigil's extension). It counts only in namespaces the cluster's admin allows and for at most the admin's maximum duration after its creation.",
    printcolumn(
        name = "Policies",
        type_ = "string",
        json_path = ".spec.policies",
        description = "The policies waived"
    ),
    printcolumn(
        name = "Expires",
        type_ = "date",
        json_path = ".spec.expiresAt",
        description = "When the exception stops counting"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.policies.all(p, !p.contains('/') && !p.contains('*'))").message("name each policy by its name: a ClusterImagePolicy's, or an ImagePolicy's of this namespace (no namespace, no globs)"),
    validation = Rule::new("self.workloads.all(w, !w.name.contains('/'))").message("a workload is named by its name alone (or a glob of names), without a namespace: an exception covers workloads of its own namespace only")
)]
pub struct ImagePolicyExceptionSpec {
    /// The policies waived: ClusterImagePolicy names, or names of
    /// ImagePolicies in this namespace. Every other policy still judges the
    /// images.
    #[schemars(length(min = 1, max = 32), inner(length(min = 1, max = 253)))]
    pub policies: Vec<String>,
    /// The images waived, as globs in the syntax of a ClusterImagePolicy's
    /// `images[].glob` (`ghcr.io/vendor/sidecar*`, `registry.local/**`).
    #[schemars(length(min = 1, max = 32), inner(length(min = 1, max = 512)))]
    pub images: Vec<String>,
    /// The workloads whose images are waived; each names a kind and a name
    /// (a glob: `*` any run of characters). A Pod counts as its own name,
    /// as the object that controls it (`ownerReferences` with `controller:
    /// true`), and, when that is a ReplicaSet of a Deployment, as that
    /// Deployment.
    #[schemars(length(min = 1, max = 32))]
    pub workloads: Vec<ExceptionWorkload>,
    /// When the exception stops counting, an RFC 3339 time
    /// (`2026-12-31T18:00:00Z`); at most the admin's maximum duration after
    /// the object was created.
    #[schemars(extend("format" = "date-time"))]
    pub expires_at: String,
    /// Why the exception exists, shown in admission warnings and the audit's
    /// reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub reason: Option<String>,
}

/// One workload an exception covers.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionWorkload {
    /// The kind (`Deployment`, `StatefulSet`, `Job`, `Pod`, or a
    /// WorkloadKind's kind).
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// The object's name, or a glob of names (`frontend`, `batch-*`, `*`).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The name an exception goes by in warnings, metrics and reports:
/// `NAMESPACE/NAME`.
pub fn qualified_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use kube::CustomResourceExt as _;

    use super::*;

    #[test]
    fn the_crd_is_namespaced_and_requires_policies_images_workloads_and_an_expiry() {
        let crd = serde_json::to_value(ImagePolicyException::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let required: Vec<&str> = spec["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for field in ["policies", "images", "workloads", "expiresAt"] {
            assert!(
                required.contains(&field),
                "{field} not required: {required:?}"
            );
        }
        assert_eq!(spec["properties"]["images"]["minItems"], 1);
    }

    #[test]
    fn a_document_reads_back_as_written() {
        let yaml = r#"
apiVersion: policy.sigil.dev/v1alpha1
kind: ImagePolicyException
metadata: {name: vendor-sidecar, namespace: team-a}
spec:
  policies: [signed-images]
  images: ["ghcr.io/vendor/sidecar*"]
  workloads: [{kind: Deployment, name: frontend}]
  expiresAt: "2026-12-08T12:00:00Z"
  reason: vendor signs from next release
"#;
        let e: ImagePolicyException = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(e.spec.workloads[0].kind, "Deployment");
        assert_eq!(e.spec.expires_at, "2026-12-08T12:00:00Z");
        assert_eq!(
            qualified_name("team-a", "vendor-sidecar"),
            "team-a/vendor-sidecar"
        );
    }
}
