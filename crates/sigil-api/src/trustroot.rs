//! The `TrustRoot` custom resource (`policy.sigil.dev/v1alpha1`): the
//! Sigstore trust material a keyless authority, transparency log or timestamp
//! authority may refer to by name, compatible with policy-controller's
//! `TrustRoot`. Byte fields are base64 strings, as Go's `[]byte` marshals.

// kube's KubeSchema derive re-declares each struct (with its `pub` fields)
// in a private scope to build the schema; those copies trip this lint.
#![allow(unreachable_pub)]
// `printcolumn(type_ = ...)` repeats by design; clippy reads it as a duplicate.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// TrustRoot holds the keys and certificates sigil trusts for one Sigstore
/// instance: your own (`sigstoreKeys`), a TUF mirror (`remote`), or a
/// serialized TUF repository for air-gapped clusters (`repository`).
/// Authorities name it in `trustRootRef`; the one TrustRoot annotated
/// `policy.sigil.dev/default-trust-root: "true"` is the cluster's default
/// trust root, used by every authority without `trustRootRef` (without one,
/// the Sigstore public-good root, kept fresh through TUF, is the default).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "policy.sigil.dev",
    version = "v1alpha1",
    kind = "TrustRoot",
    category = "sigil",
    status = "TrustRootStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "TrustRoot holds the keys and certificates sigil trusts for one Sigstore instance. Authorities name it in trustRootRef; the one TrustRoot annotated policy.sigil.dev/default-trust-root: \"true\" is the cluster's default trust root, used by every authority without trustRootRef (without one, the Sigstore public-good root, kept fresh through TUF, is the default).",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the trust root loaded"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.remote), has(self.repository), has(self.sigstoreKeys), has(self.trustedRoot)].filter(x, x).size() == 1").message("exactly one of remote, repository, sigstoreKeys or trustedRoot must be set"))]
pub struct TrustRootSpec {
    /// A TUF mirror and its initial root, refreshed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<Remote>,
    /// A serialized TUF repository (air-gapped clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<Repository>,
    /// Bring-your-own Fulcio CAs, Rekor and CT logs, and TSAs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigstore_keys: Option<SigstoreKeys>,
    /// sigil's extension (policy-controller has no such field): a
    /// `trusted_root.json` taken as it is, as `gh attestation trusted-root`
    /// and `cosign trusted-root create` print it, for clusters that cannot
    /// reach any TUF mirror. Nothing refreshes it: replace it when the
    /// instance rotates its keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_root: Option<TrustedRootSource>,
}

/// Where a `trusted_root.json` given as it is comes from.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.data) != has(self.configMapRef)").message("set exactly one of data and configMapRef"))]
pub struct TrustedRootSource {
    /// The `trusted_root.json` document itself (JSON text, not base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// A ConfigMap in sigil's namespace holding the document; the controller
    /// reads it again at every trust-root refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<TrustedRootConfigMap>,
}

/// A ConfigMap entry holding a `trusted_root.json`.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrustedRootConfigMap {
    /// The ConfigMap's name (in sigil's namespace).
    #[schemars(length(min = 1))]
    pub name: String,
    /// The entry holding the document; may be omitted when the ConfigMap has
    /// exactly one entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A TUF mirror.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Remote {
    /// The initial trusted `root.json`, base64-encoded.
    #[schemars(length(min = 1))]
    pub root: String,
    /// The mirror's URL, e.g. `https://tuf-repo-cdn.sigstore.dev`.
    #[schemars(length(min = 1))]
    pub mirror: String,
    /// The TUF target holding the trusted root; `trusted_root.json` when
    /// unset. GitHub's mirror serves one per trust domain
    /// (`<domain>.trusted_root.json` for GHE.com).
    #[serde(
        default,
        rename = "trustedRootTarget",
        skip_serializing_if = "Option::is_none"
    )]
    pub trusted_root_target: Option<String>,
}

/// A serialized TUF repository.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Repository {
    /// The initial trusted `root.json`, base64-encoded.
    #[schemars(length(min = 1))]
    pub root: String,
    /// The repository (metadata and targets) as a gzipped tar, base64-encoded.
    #[serde(rename = "mirrorFS")]
    #[schemars(length(min = 1))]
    pub mirror_fs: String,
    /// Directory of the targets inside the archive; `targets` when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<String>,
}

/// Trust material given directly.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SigstoreKeys {
    /// Certificate authorities (Fulcio) that issue signing certificates.
    #[serde(default)]
    pub certificate_authorities: Vec<CertificateAuthority>,
    /// Transparency logs (Rekor).
    #[serde(default, rename = "tLogs", skip_serializing_if = "Vec::is_empty")]
    pub tlogs: Vec<TransparencyLogInstance>,
    /// Certificate transparency logs.
    #[serde(default, rename = "ctLogs", skip_serializing_if = "Vec::is_empty")]
    pub ctlogs: Vec<TransparencyLogInstance>,
    /// RFC 3161 timestamp authorities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timestamp_authorities: Vec<CertificateAuthority>,
}

/// A certificate authority or timestamp authority.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertificateAuthority {
    /// The authority's distinguished name.
    #[serde(default)]
    pub subject: DistinguishedName,
    /// The authority's URI.
    #[serde(default)]
    pub uri: String,
    /// PEM certificate chain, leaf-most first, root last; base64-encoded.
    #[schemars(length(min = 1))]
    pub cert_chain: String,
}

/// A distinguished name.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DistinguishedName {
    /// Organization (O).
    #[serde(default)]
    pub organization: String,
    /// Common name (CN).
    #[serde(default)]
    pub common_name: String,
}

/// A transparency log.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TransparencyLogInstance {
    /// The log's base URL.
    #[serde(rename = "baseURL")]
    #[schemars(length(min = 1))]
    pub base_url: String,
    /// Hash algorithm of the log's Merkle tree: sha256 (default), sha384 or sha512.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["sha256", "sha384", "sha512"]))]
    pub hash_algorithm: Option<String>,
    /// PEM public key of the log, base64-encoded.
    #[schemars(length(min = 1))]
    pub public_key: String,
}

/// Observed state of a TrustRoot.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrustRootStatus {
    /// The generation the controller last loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: True when the trust material is loaded (reason `StaleMaterial`
    /// when a refresh failed and earlier material stays in force). `Fresh`:
    /// whether the last load or refresh succeeded (`MetadataExpired`,
    /// `Rollback`, `MirrorUnreachable`, `LoadFailed`, `Invalid`). `Default`,
    /// on a TrustRoot annotated as the default: whether it is the cluster's
    /// default trust root (`Conflict` when another one already is).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
