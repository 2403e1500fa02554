//! The `WorkloadKind` custom resource (`policy.sigil.dev/v1alpha1`, sigil's
//! extension; policy-controller has no equivalent): a kind of object outside
//! Kubernetes' own workloads (an Argo Rollout, a Knative Service, a Tekton
//! Task, an operator's CRD) whose images sigil admits like a Pod's, and
//! where in the object those images are.

// kube's KubeSchema derive re-declares each struct (with its `pub` fields)
// in a private scope to build the schema; those copies trip this lint.
#![allow(unreachable_pub)]
// `printcolumn(type_ = ...)` repeats by design; clippy reads it as a duplicate.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// WorkloadKind makes sigil admit the images of one more kind of object:
/// the controller adds the kind to sigil's webhook configurations, and the
/// webhook judges the images found where the WorkloadKind says (pod specs
/// and image fields), or where a built-in (`builtin`) knows them to be.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "policy.sigil.dev",
    version = "v1alpha1",
    kind = "WorkloadKind",
    category = "sigil",
    shortname = "wlk",
    status = "WorkloadKindStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "WorkloadKind makes sigil admit the images of one more kind of object (an Argo Rollout, a Knative Service, a Tekton Task, an operator's CRD): the controller adds the kind to sigil's webhook configurations and the webhook judges the images found in the pod specs and image fields the WorkloadKind names, or where a built-in knows them to be.",
    printcolumn(
        name = "Kind",
        type_ = "string",
        json_path = ".status.kind",
        description = "The kind admitted, as group/version/kind"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the kind is admitted by sigil's webhook"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.builtin) || (has(self.group) && has(self.version) && has(self.kind) && has(self.resource))").message("without builtin, group, version, kind and resource are all required"),
    validation = Rule::new("has(self.builtin) || has(self.podSpecs) || has(self.images)").message("without builtin, name where the images are: podSpecs, images or both")
)]
pub struct WorkloadKindSpec {
    /// A kind sigil knows: `ArgoRollout` (argoproj.io/v1alpha1 Rollout),
    /// `KnativeService` and `KnativeConfiguration` (serving.knative.dev/v1),
    /// `TektonTask` and `TektonTaskRun` (tekton.dev/v1),
    /// `KubeVirtVirtualMachine` (kubevirt.io/v1 VirtualMachine). It gives
    /// the group, version, kind, resource and where the images are; a
    /// `version` set here replaces its version, and `podSpecs` and `images`
    /// set here are looked at besides its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ArgoRollout", "KnativeService", "KnativeConfiguration", "TektonTask", "TektonTaskRun", "KubeVirtVirtualMachine"]))]
    pub builtin: Option<String>,
    /// The kind's API group (`argoproj.io`); not a group of Kubernetes' own
    /// workloads, which sigil always admits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The version the webhook registers for (`v1alpha1`); requests in
    /// other versions of the same resource reach it converted to this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The kind (`Rollout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The plural resource name (`rollouts`), as webhook rules name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// Field paths of pod specs in the object (`spec.template.spec`): each
    /// one's containers, init containers, ephemeral containers and image
    /// volumes are judged, as in a Pod. A path is field names joined by
    /// dots; `[*]` follows every item of a list, `*` every value of a map,
    /// `[N]` one item (`spec.replicaSpecs.*.template.spec`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub pod_specs: Vec<String>,
    /// Field paths of image references in the object
    /// (`spec.steps[*].image`), in the same syntax as `podSpecs`; each must
    /// end at a string.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub images: Vec<String>,
}

/// Observed state of a WorkloadKind.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadKindStatus {
    /// The generation the controller last accepted or refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The kind admitted, `group/version/Kind`, once accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `Ready`: True when the kind is in sigil's webhook configurations and
    /// the policy snapshot (`Accepted`); False with the reason (`Invalid`,
    /// `Conflict`, `WebhookNotUpdated`) and what to do otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
