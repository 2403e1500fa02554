//! sigil-api: the `policy.sigil.dev/v1alpha1` Kubernetes API. It owns the
//! `ClusterImagePolicy`, namespaced `ImagePolicy`, `TrustRoot` and
//! `WorkloadKind` custom resources ([`cip`], [`image_policy`], [`trustroot`],
//! [`workloadkind`]), their generated CRDs ([`crds`], written by the `crdgen`
//! binary) and the policy snapshot the controller publishes for the webhook
//! ([`snapshot`]): types and documents, no judgement; and policy-controller's
//! own resources as the controller reads them when it serves them
//! ([`sigstore`]).
//!
//! It depends only on kube, k8s-openapi, serde and schemars (and the JSON and
//! YAML serializers, gzip and SHA-256 for the snapshot's stored form), never on another sigil crate, so anything that only
//! needs the types gets them without the verifier, the registry client, the
//! policy engines or KMS. Validation and compilation of these types, linting,
//! conversion from policy-controller and the default trust root are in
//! `sigil-compile`.
#![forbid(unsafe_code)]

pub mod cip;
pub mod crds;
pub mod exception;
pub mod image_policy;
pub mod sigstore;
pub mod snapshot;
pub mod trustroot;
pub mod workloadkind;

pub use cip::{ClusterImagePolicy, ClusterImagePolicySpec};
pub use exception::{ImagePolicyException, ImagePolicyExceptionSpec};
pub use image_policy::{ImagePolicy, ImagePolicySpec};
pub use trustroot::{TrustRoot, TrustRootSpec};
pub use workloadkind::{WorkloadKind, WorkloadKindSpec};
