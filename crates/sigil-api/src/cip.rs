//! The `ClusterImagePolicy` custom resource (`policy.sigil.dev/v1alpha1`),
//! field for field compatible with sigstore policy-controller's
//! `policy.sigstore.dev/v1beta1` for every feature sigil supports. Fields that
//! policy-controller has and sigil does not support are kept in the schema
//! (so the apiserver does not silently prune them) and rejected by CEL rules
//! and by `sigil_compile::compile` with a message saying what to use instead.

// kube's KubeSchema derive re-declares each struct (with its `pub` fields)
// in a private scope to build the schema; those copies trip this lint.
#![allow(unreachable_pub)]
// `printcolumn(type_ = ...)` repeats by design; clippy reads it as a duplicate.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// ClusterImagePolicy selects images by glob and says which signatures and
/// attestations they need to run in the cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "policy.sigil.dev",
    version = "v1alpha1",
    kind = "ClusterImagePolicy",
    shortname = "cip",
    category = "sigil",
    status = "ClusterImagePolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ClusterImagePolicy selects images by glob and says which signatures and attestations they need to run in the cluster.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the policy compiled and is in force (in audit mode: judged and reported, never enforced)"
    ),
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.mode",
        description = "enforce (deny on failure), warn (admit with a warning) or audit (never affects admission; counted and reported)"
    ),
    printcolumn(
        name = "Pass",
        type_ = "integer",
        json_path = ".status.audit.pass",
        description = "Running containers the audit found passing this policy"
    ),
    printcolumn(
        name = "Fail",
        type_ = "integer",
        json_path = ".status.audit.fail",
        description = "Running containers whose images this policy would deny today"
    ),
    printcolumn(
        name = "Error",
        type_ = "integer",
        json_path = ".status.audit.error",
        description = "Running containers the audit could not judge (a registry failed): never a pass"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterImagePolicySpec {
    /// Images this policy applies to. An image matched by several policies
    /// must satisfy all of them.
    #[schemars(length(min = 1, max = 128))]
    pub images: Vec<ImagePattern>,
    /// Authorities that may vouch for a matched image; any one passing
    /// satisfies the policy (unless a CIP-level `policy` asks for more).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub authorities: Vec<Authority>,
    /// A Rego or CUE policy evaluated over the results of the authorities
    /// that passed (only when at least one passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// `enforce` (default, filled in by the API server so `kubectl get cip`
    /// shows it) denies images that fail; `warn` admits them with an
    /// admission warning; `audit` (sigil's extension, not in
    /// policy-controller) never affects admission: the webhook counts its
    /// verdicts in `sigil_admission_audit_mode_verdicts_total` and the audit reports
    /// them, so it shows what the policy would deny before it is enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["enforce", "warn", "audit"], "default" = "enforce"))]
    pub mode: Option<String>,
    /// Restricts the policy to some resources; empty applies it to every
    /// resource sigil admits.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub match_: Vec<MatchResource>,
    /// What must satisfy the policy when an image is a multi-platform index
    /// (sigil's extension, not in policy-controller): `named` (default)
    /// the digest the workload names, as policy-controller does; `every`
    /// each platform image the index lists, on its own signatures and
    /// attestations (the index's own are not consulted, and one failing
    /// platform denies the image, naming the platform); `namedOrEvery` the
    /// named digest, or else every platform image. An image that is not an
    /// index is judged by its own digest whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["named", "every", "namedOrEvery"]))]
    pub platforms: Option<String>,
}

/// Drops the `default` schemars derives from `#[serde(default)]`, for fields
/// whose default would not pass their own schema.
fn no_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

/// An image glob.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct ImagePattern {
    /// Glob over normalized image references: `*` matches within one path
    /// segment, `**` across segments; `nginx` normalizes to
    /// `index.docker.io/library/nginx`, and a bare `*` means
    /// `index.docker.io/library/*`.
    #[schemars(length(min = 1), regex(pattern = r"^[a-zA-Z0-9_:/*.\-]+$"))]
    pub glob: String,
}

/// One way to establish that an image is trusted: a key, a keyless
/// (Fulcio) identity, a Notary Project trust policy, or a static verdict.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("[has(self.key), has(self.keyless), has(self.static), has(self.notation)].filter(x, x).size() == 1").message("exactly one of key, keyless, notation or static must be set"),
    validation = Rule::new("!has(self.static) || (!has(self.attestations) && !has(self.source) && !has(self.ctlog))").message("a static authority takes no attestations, source or ctlog"),
    validation = Rule::new("!has(self.notation) || (!has(self.attestations) && !has(self.source) && !has(self.ctlog) && !has(self.rfc3161timestamp))").message("a notation authority takes no attestations, source, ctlog or rfc3161timestamp; its trust policy says what is verified")
)]
pub struct Authority {
    /// Name used by the CIP-level policy (`authorityMatches.<name>`);
    /// defaults to `authority-<index>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Verify signatures with a public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<KeyRef>,
    /// Verify Fulcio-certified (keyless) signatures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyless: Option<KeylessRef>,
    /// Pass or fail without looking at signatures.
    #[serde(default, rename = "static", skip_serializing_if = "Option::is_none")]
    pub static_: Option<StaticRef>,
    /// Verify Notary Project (Notation) signatures with a Notation trust
    /// policy and trust store, as the Notation CLI and Ratify keep them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notation: Option<NotationRef>,
    /// Where signatures are stored, when not next to the image.
    #[serde(default, rename = "source", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub sources: Vec<Source>,
    /// Transparency log (Rekor) trust; `ctlog: {}` turns the log requirement
    /// off (key authorities only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctlog: Option<TLog>,
    /// Attestations the image must carry; when set, the authority is
    /// satisfied by these attestations rather than plain signatures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub attestations: Vec<Attestation>,
    /// Timestamp authorities for RFC 3161 signed timestamps.
    #[serde(
        default,
        rename = "rfc3161timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub rfc3161_timestamp: Option<Rfc3161Timestamp>,
    /// Accepted for compatibility (`legacy` or `bundle`); sigil always looks
    /// for both formats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["legacy", "bundle"]))]
    pub signature_format: Option<String>,
}

/// A Notary Project authority: the Notation CLI's (or Ratify's) trust policy
/// document and the certificates of its trust stores, unchanged. An image
/// passes when one of its Notary Project signatures (OCI referrers with
/// artifactType `application/vnd.cncf.notary.signature`) verifies under the
/// trust policy statement whose `registryScopes` name the image's
/// repository (else the `*` statement).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.trustPolicy) != has(self.trustPolicyRef)").message("set exactly one of trustPolicy and trustPolicyRef")
)]
pub struct NotationRef {
    /// The trust policy document as JSON text: the content of
    /// `trustpolicy.oci.json` (or `trustpolicy.json`), `version: "1.0"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 65536))]
    pub trust_policy: Option<String>,
    /// A ConfigMap entry holding the trust policy document instead (`key`
    /// may be omitted when the ConfigMap has one entry). Read from sigil's
    /// namespace, or from an ImagePolicy's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_policy_ref: Option<ConfigMapRef>,
    /// The trust stores the trust policy's `trustStores` name, one entry per
    /// named store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub trust_stores: Vec<NotationTrustStore>,
}

/// One named trust store: the files of a Notation trust store directory
/// `truststore/x509/TYPE/NAME/`, inline or as the entries of a ConfigMap or
/// Secret.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("[has(self.certificates), has(self.configMapRef), has(self.secretRef)].filter(x, x).size() == 1").message("set exactly one of certificates, configMapRef and secretRef")
)]
pub struct NotationTrustStore {
    /// `TYPE/NAME` as the directory under `truststore/x509/` is laid out:
    /// `ca/NAME`, `signingAuthority/NAME` or `tsa/NAME`; the trust policy
    /// names it `TYPE:NAME`.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^(ca|signingAuthority|tsa)/[a-zA-Z0-9_.\-]+$")
    )]
    pub name: String,
    /// The store's certificates in PEM (one or more `CERTIFICATE` blocks):
    /// root or intermediate CA certificates, or self-signed signing
    /// certificates; roots only for a `tsa` store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 262144))]
    pub certificates: Option<String>,
    /// A ConfigMap whose every data entry is one PEM certificate file of the
    /// store (as `kubectl create configmap NAME --from-file=DIR` makes it
    /// from the store's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ObjectReference>,
    /// A Secret whose every data entry is one PEM certificate file of the
    /// store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<ObjectReference>,
}

/// A ConfigMap or Secret by name, in sigil's namespace (an ImagePolicy's own
/// for an ImagePolicy).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct ObjectReference {
    /// The object's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The object's namespace; it must be the one references are read
    /// from, which is also the default when unset.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// A public key: inline PEM or a Secret holding it.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("[has(self.data), has(self.secretRef), has(self.kms)].filter(x, x).size() == 1").message("exactly one of data, secretRef or kms must be set")
)]
pub struct KeyRef {
    /// PEM public key (ECDSA P-256/P-384, Ed25519 or RSA) or, under
    /// `ca-cert`, a PEM certificate chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// A Secret whose single data entry holds the PEM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// A KMS-held key, as cosign names it: `hashivault://NAME`,
    /// `openbao://NAME`, `awskms://[ENDPOINT]/ARN` (a key or alias ARN),
    /// `gcpkms://projects/P/locations/L/keyRings/R/cryptoKeys/K[/cryptoKeyVersions/V]`
    /// or `azurekms://VAULT_HOST/KEY[/VERSION]`. The controller fetches the
    /// public key (credentials from its KMS settings), refreshes it and keeps
    /// the last good one while the KMS cannot be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub kms: Option<String>,
    /// Digest algorithm the key signed over (`sha224`, `sha256`, `sha384` or
    /// `sha512`), for ECDSA and RSA keys; Ed25519 keys sign the message
    /// itself and ignore it. When set, signatures in both formats verify
    /// with exactly this digest, as policy-controller verifies them. When
    /// unset, sigil verifies with the digest cosign signs with for the key's
    /// type: sha256 for P-256 and RSA keys, sha384 for P-384 keys (where
    /// policy-controller would use sha256; `sigil policy convert` writes
    /// `sha256` for such keys to keep its verdicts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_algorithm: Option<String>,
}

/// A Secret by name and namespace.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct SecretReference {
    /// The Secret's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The Secret's namespace; sigil's own namespace when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// Keyless verification: Fulcio certificates with expected identities.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!(has(self.url) && has(self.ca__dash__cert))").message("set at most one of url and ca-cert"),
    validation = Rule::new("has(self.identities)").message("identities: at least one identity (issuer or issuerRegExp, and subject or subjectRegExp) is required")
)]
pub struct KeylessRef {
    /// Fulcio URL. Trust does not come from the URL: without `trustRootRef`
    /// it must name a certificate authority of the cluster's default trust
    /// root (the TrustRoot annotated `policy.sigil.dev/default-trust-root:
    /// "true"`, else the Sigstore public-good root, whose Fulcio is
    /// `https://fulcio.sigstore.dev`); host and port are compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Accepted signer identities; any one suffices.
    // Defaulted so that a missing list is reported with its path by the
    // compiler; the schema gets no default (it would not validate).
    #[serde(default)]
    #[schemars(length(min = 1, max = 32), transform = no_default)]
    pub identities: Vec<Identity>,
    /// A CA certificate chain (PEM, inline or in a Secret) instead of Fulcio's.
    #[serde(default, rename = "ca-cert", skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<KeyRef>,
    /// TrustRoot whose certificate authorities and CT logs to use; the
    /// cluster's default trust root when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_root_ref: Option<String>,
    /// Do not require an embedded SCT in the certificate.
    #[serde(
        default,
        rename = "insecureIgnoreSCT",
        skip_serializing_if = "Option::is_none"
    )]
    pub insecure_ignore_sct: Option<bool>,
}

/// An expected signer: issuer and subject, each exact or a regular expression.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.issuer) != has(self.issuerRegExp)").message("set exactly one of issuer and issuerRegExp"),
    validation = Rule::new("has(self.subject) != has(self.subjectRegExp)").message("set exactly one of subject and subjectRegExp")
)]
pub struct Identity {
    /// The OIDC issuer, exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The certificate subject (SAN), exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Regular expression (RE2 syntax, unanchored like cosign) for the issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_reg_exp: Option<String>,
    /// Regular expression (RE2 syntax, unanchored like cosign) for the subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_reg_exp: Option<String>,
    /// sigil's extension (policy-controller has no such field): Fulcio
    /// certificate claims that must all match as well, keyed by their
    /// sigstore-go names (`sourceRepositoryURI`, `sourceRepositoryRef`,
    /// `sourceRepositoryOwnerURI`, `sourceRepositoryVisibilityAtSigning`,
    /// `buildSignerURI`, `buildSignerDigest`, `runnerEnvironment`,
    /// `buildTrigger`, …: Fulcio extensions 1.3.6.1.4.1.57264.1.2 to .1.23).
    /// A key names an exact value; the same name followed by `RegExp`
    /// (`buildSignerURIRegExp`) takes a regular expression, unanchored like
    /// subjectRegExp. A certificate without the claim does not match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claims: BTreeMap<String, String>,
}

/// A fixed verdict.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct StaticRef {
    /// `pass` admits matched images, `fail` denies them.
    #[schemars(extend("enum" = ["pass", "fail"]))]
    pub action: String,
    /// Message shown when `action` is `fail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where signatures and attestations are stored.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// Repository (`registry/path`, no tag) holding the signatures; the
    /// image's own repository when unset (a source may then only change the
    /// credentials or the tag prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<String>,
    /// Secrets (docker config JSON) in sigil's own namespace that the
    /// webhook reads to pull signatures from `oci` (or from the image's own
    /// repository when `oci` is unset); a Secret that does not exist is
    /// ignored, as the kubelet ignores missing pull secrets.
    /// policy-controller reads them from the admitted object's namespace
    /// instead. `sigil policy test`
    /// and `sigil verify --policy` do not read Secrets: they pull with the
    /// local docker config and say so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub signature_pull_secrets: Vec<LocalObjectReference>,
    /// Prefix of legacy signature tags (`<prefix>sha256-<hex>.sig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_prefix: Option<String>,
}

/// An object in the same namespace, by name.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct LocalObjectReference {
    /// The object's name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// Transparency log trust.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TLog {
    /// Rekor URL. Without `trustRootRef` (here or on `keyless`) it must name
    /// a transparency log of the cluster's default trust root (public-good:
    /// `https://rekor.sigstore.dev`); host and port are compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// TrustRoot whose transparency logs to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_root_ref: Option<String>,
}

/// RFC 3161 timestamp authority trust.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rfc3161Timestamp {
    /// TrustRoot whose timestamp authorities to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_root_ref: Option<String>,
}

/// An attestation the image must carry.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Attestation {
    /// Name used by the CIP-level policy (`attestations.<name>`).
    #[schemars(length(min = 1))]
    pub name: String,
    /// In-toto predicate type URI, or a cosign short name (custom,
    /// slsaprovenance, slsaprovenance02, slsaprovenance1, spdx, spdxjson,
    /// cyclonedx, link, vuln, openvex).
    #[schemars(length(min = 1))]
    pub predicate_type: String,
    /// Rego or CUE evaluated over each verified statement of that type: the
    /// whole in-toto statement as policy-controller re-encodes it (Rego's
    /// `input`; `input.predicate` is the predicate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
}

/// A policy: Rego (package `sigstore`, rule `isCompliant`) or CUE (the
/// document must unify with it, as in policy-controller).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.type == 'rego' || self.type == 'cue'").message("type must be rego or cue"),
    validation = Rule::new("[has(self.data), has(self.configMapRef), has(self.remote)].filter(x, x).size() == 1").message("set exactly one of data (the module), configMapRef (a ConfigMap in sigil's namespace holding it) and remote (a URL pinned by its sha256sum)")
)]
pub struct Policy {
    /// The policy language: `rego` or `cue`.
    #[serde(rename = "type")]
    #[schemars(length(max = 16))]
    pub type_: String,
    /// The policy text (a Rego module or CUE). Exactly one of `data`,
    /// `configMapRef` and `remote` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The module fetched from a URL by the controller and pinned by its
    /// SHA-256: the controller refuses any other content, and keeps
    /// enforcing the last content it verified while the URL cannot be
    /// reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemotePolicy>,
    /// A ConfigMap in sigil's namespace holding the policy text; the
    /// controller reads it and reconciles again when it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapRef>,
    /// CIP-level only: add the image's config files (OCI image
    /// configuration: user, entrypoint, environment, labels), read from its
    /// registry, to the input under `config`, keyed by platform
    /// (`linux/amd64`, one entry per platform of a multi-platform image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_config_file: Option<bool>,
    /// CIP-level only: add the admitted object's `spec` to the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_spec: Option<bool>,
    /// CIP-level only: add the admitted object's `metadata` to the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_object_meta: Option<bool>,
    /// CIP-level only: add the admitted object's `kind` and `apiVersion`
    /// under `typemeta` (as policy-controller does: not for bare Pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_type_meta: Option<bool>,
}

/// A policy module at a URL, pinned by the SHA-256 of its content
/// (policy-controller's field names).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RemotePolicy {
    /// `https://` (or `http://`: the content is checked against `sha256sum`
    /// either way) URL of the module.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://[^\s]+$"))]
    pub url: String,
    /// Lower-case hex SHA-256 of the module's bytes, as `sha256sum` prints it.
    #[schemars(regex(pattern = r"^[0-9a-fA-F]{64}$"))]
    pub sha256sum: String,
}

/// A ConfigMap entry holding a policy's text (policy-controller's field names).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct ConfigMapRef {
    /// The ConfigMap's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The ConfigMap's namespace; it must be sigil's own, which is also the
    /// default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The entry holding the module; may be omitted when the ConfigMap has
    /// exactly one entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Selects admitted resources by group, version, resource and labels.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[x_kube(validation = Rule::new("!has(self.selector) || has(self.resource) || has(self.group) || has(self.version)").message("a selector needs a resource, group or version to apply to"))]
pub struct MatchResource {
    /// API group (empty for the core group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// API version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Plural resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["pods", "deployments", "replicasets", "statefulsets", "daemonsets", "jobs", "cronjobs", "replicationcontrollers"]))]
    pub resource: Option<String>,
    /// Labels the admitted object must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Observed state of a ClusterImagePolicy.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterImagePolicyStatus {
    /// The generation the controller last compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: True when the policy compiled and is in force (enforced; for
    /// `mode: audit`, judged and reported but never enforced, as its message
    /// says); False with the reason (`Invalid`, `UnresolvedReference`, …) and
    /// message otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// What the audit (the chart's `audit.enabled`) last found for this
    /// policy over what runs in the audited namespaces. Written by the
    /// audit, not the controller; absent while no audit runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<PolicyAuditSummary>,
}

/// The audit's results for one policy: one per running (workload,
/// container) whose image the policy selects, by outcome.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyAuditSummary {
    /// Results whose running image satisfies the policy.
    #[serde(default)]
    pub pass: i64,
    /// Results whose running image the policy would deny at admission
    /// today (or warn about, for a policy in warn mode).
    #[serde(default)]
    pub fail: i64,
    /// Results that pass with warnings.
    #[serde(default)]
    pub warn: i64,
    /// Results that could not be judged (a registry failed, no running
    /// digest): never counted as passing.
    #[serde(default)]
    pub error: i64,
}
