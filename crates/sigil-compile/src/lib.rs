//! sigil-compile: what sigil makes of its Kubernetes API types ([`sigil_api`]).
//! It validates ClusterImagePolicy and TrustRoot specs and compiles them into
//! the policy model ([`compile`]), checks that a policy snapshot can be
//! enforced ([`snapshot`]), knows the cluster's default trust root
//! ([`default_root`]), lints YAML files offline ([`lint`]) and converts
//! policy-controller's API ([`convert`]), keeping its verdicts where sigil can
//! ([`verdicts`]), Kyverno's image verification ([`kyverno`]) and Ratify's Notation verifiers
//! ([`ratify`]). It compiles WorkloadKinds (kinds besides Kubernetes'
//! own workloads whose images sigil admits, and where those images are) in
//! [`workload_kind`]. It says which registries a namespace's ImagePolicy
//! may name ([`registries`]).
//!
//! The controller, the judge and the CLI share it, so a policy is accepted by
//! `sigil policy lint` exactly when the controller accepts it. It must not
//! depend on kube's client: compiling a policy reads no cluster and fetches
//! nothing (Secrets, KMS keys and remote modules come through a resolver the
//! caller passes in).
#![forbid(unsafe_code)]

pub mod compile;
pub mod convert;
pub mod default_root;
pub mod exception;
pub mod foreign;
pub mod kyverno;
pub mod lint;
pub mod ratify;
pub mod registries;
pub mod snapshot;
pub mod verdicts;
pub mod workload_kind;
