//! sigil-api: the `policy.sigil.dev/v1alpha1` Kubernetes API. It owns the
//! `ClusterImagePolicy` and `TrustRoot` custom resources ([`cip`],
//! [`trustroot`]), their generated CRDs ([`crds`]), validation and
//! compilation into the verifier's policy model ([`compile`]), the cluster's
//! default trust root ([`default_root`]), offline linting of YAML files
//! ([`lint`]) and conversion from policy-controller's API ([`convert`]) that
//! keeps its verdicts where sigil can ([`verdicts`]), and policy-controller's
//! own resources as the controller serves them ([`sigstore`]).
#![forbid(unsafe_code)]

pub mod cip;
pub mod compile;
pub mod convert;
pub mod crds;
pub mod default_root;
pub mod lint;
pub mod sigstore;
pub mod snapshot;
pub mod trustroot;
pub mod verdicts;

pub use cip::{ClusterImagePolicy, ClusterImagePolicySpec};
pub use trustroot::{TrustRoot, TrustRootSpec};
