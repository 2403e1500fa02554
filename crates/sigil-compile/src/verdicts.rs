//! Where sigstore policy-controller and sigil judge the same
//! ClusterImagePolicy spec differently, and sigil's explicit form of
//! policy-controller's behaviour where sigil can express it.
//! [`keep_verdicts`] rewrites a policy-controller spec (as JSON) and lists
//! every difference; `sigil policy convert` applies it and `sigil policy
//! lint` reports it for files not yet converted.
//!
//! The behaviour is policy-controller v0.15.1's, read in its source
//! (`pkg/webhook/validator.go`: `checkOptsFromAuthority`,
//! `rekorClientAndKeysFromAuthority`, `ValidatePolicySignaturesForAuthority`;
//! `pkg/webhook/validation.go`: `valid`; `pkg/apis/config/image_policies.go`:
//! `GetMatchingPolicies`; `pkg/apis/glob/glob.go`) and the cosign v3.0.5 it
//! builds with (`pkg/cosign/verify.go`: `verifyInternal`). README.md
//! ("Migrating from policy-controller") lists every difference and why it
//! remains.

use std::fmt;

use serde_json::{Map, Value};
use sigil_verifier::crypto::PublicKey;

/// A place where policy-controller and sigil judge a spec differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerdictNote {
    /// Path of the field at fault, e.g. `spec.authorities[0].ctlog`.
    pub path: String,
    /// What differs and what conversion did about it.
    pub message: String,
    /// True when conversion rewrote the spec so that sigil keeps
    /// policy-controller's verdict; false when it cannot.
    pub kept: bool,
}

impl fmt::Display for VerdictNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Why a policy-controller object must not be converted at all, if it must
/// not: a ClusterImagePolicy in `mode: audit`. That mode is sigil's own
/// extension; policy-controller refuses the object (it knows `enforce` and
/// `warn`), and a conversion must neither invent nor carry sigil's
/// extensions, so the converted object is never in audit mode.
pub fn refusal(doc: &Value) -> Option<String> {
    let is_policy = doc.get("kind").and_then(Value::as_str) == Some("ClusterImagePolicy");
    let mode = doc.pointer("/spec/mode").and_then(Value::as_str);
    (is_policy && mode == Some("audit")).then(|| {
        "spec.mode: `audit` is sigil's extension, not a policy-controller mode \
         (policy-controller accepts enforce and warn and refuses this object); set enforce or \
         warn here, or write the policy as a policy.sigil.dev ClusterImagePolicy with mode: audit"
            .to_string()
    })
}

/// Rewrites a policy-controller ClusterImagePolicy spec (JSON) into sigil's
/// explicit form of the same verdicts, and lists every difference: the ones
/// rewritten (`kept`) and the ones sigil cannot express.
pub fn keep_verdicts(spec: &mut Value) -> Vec<VerdictNote> {
    let mut notes = Notes::default();
    if let Some(images) = spec.get("images").and_then(Value::as_array) {
        for (i, image) in images.iter().enumerate() {
            if let Some(glob) = image.get("glob").and_then(Value::as_str) {
                check_glob(&format!("spec.images[{i}].glob"), glob, &mut notes);
            }
        }
    }
    if let Some(entries) = spec.get("match").and_then(Value::as_array) {
        for (i, m) in entries.iter().enumerate() {
            check_match(&format!("spec.match[{i}]"), m, &mut notes);
        }
    }
    if let Some(Value::Array(authorities)) = spec.get_mut("authorities") {
        for (i, a) in authorities.iter_mut().enumerate() {
            authority(&format!("spec.authorities[{i}]"), a, &mut notes);
            attestation_config_files(&format!("spec.authorities[{i}]"), a, &mut notes);
        }
    }
    if let Some(policy) = spec.get_mut("policy") {
        config_map_namespace("spec.policy", policy, &mut notes);
    }
    platforms(spec, &mut notes);
    notes.0
}

/// `platforms` is sigil's extension: policy-controller's API server prunes
/// the field (its schema does not know it) and judges the digest the
/// workload names, so the converted policy does not carry it either.
fn platforms(spec: &mut Value, notes: &mut Notes) {
    if let Some(value) = spec.as_object_mut().and_then(|f| f.remove("platforms")) {
        notes.kept(
            "spec.platforms",
            format!(
                "removed ({value}): sigil's extension, which policy-controller prunes and never \
                 applies (it judges the digest the workload names, as the converted policy \
                 does); to require every platform of an index, set platforms on the \
                 policy.sigil.dev policy"
            ),
        );
    }
}

#[derive(Default)]
struct Notes(Vec<VerdictNote>);

impl Notes {
    fn kept(&mut self, path: &str, message: impl Into<String>) {
        self.0.push(VerdictNote {
            path: path.to_owned(),
            message: message.into(),
            kept: true,
        });
    }

    fn differs(&mut self, path: &str, message: impl Into<String>) {
        self.0.push(VerdictNote {
            path: path.to_owned(),
            message: message.into(),
            kept: false,
        });
    }
}

/// policy-controller reads `fetchConfigFile` only on the CIP-level policy;
/// on an attestation's policy it changes nothing, and sigil refuses it there
/// rather than let it look effective.
fn attestation_config_files(path: &str, a: &mut Value, notes: &mut Notes) {
    let Some(Value::Array(attestations)) = a.get_mut("attestations") else {
        return;
    };
    for (j, att) in attestations.iter_mut().enumerate() {
        let Some(Value::Object(policy)) = att.get_mut("policy") else {
            continue;
        };
        if policy.remove("fetchConfigFile").is_some() {
            notes.kept(
                &format!("{path}.attestations[{j}].policy.fetchConfigFile"),
                "removed: policy-controller ignores it on an attestation's policy (only the \
                 ClusterImagePolicy-level spec.policy gets the image's config files), and sigil \
                 refuses it there",
            );
        }
    }
}

/// A string field, empty strings read as unset (as policy-controller reads them).
fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

fn is_object(v: &Value, key: &str) -> bool {
    matches!(v.get(key), Some(Value::Object(_)))
}

fn authority(path: &str, a: &mut Value, notes: &mut Notes) {
    let Value::Object(fields) = a else {
        return;
    };
    let timestamped = fields
        .get("rfc3161timestamp")
        .and_then(|t| text(t, "trustRootRef"))
        .is_some();
    let format = fields
        .get("signatureFormat")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let ctlog_path = format!("{path}.ctlog");
    let log_named = fields
        .get("ctlog")
        .is_some_and(|c| text(c, "url").is_some() || text(c, "trustRootRef").is_some());
    let has_ctlog = fields.get("ctlog").is_some_and(|c| !c.is_null());

    if let Some(key) = fields.get_mut("key").filter(|k| k.is_object()) {
        key_hash(&format!("{path}.key"), key, notes);
        secret_namespace(&format!("{path}.key"), key, notes);
        if timestamped && log_named {
            fields.insert("ctlog".into(), Value::Object(Map::new()));
            notes.kept(
                &ctlog_path,
                "replaced by `ctlog: {}`: with rfc3161timestamp set, policy-controller does not \
                 check the transparency log at all (it verifies an RFC 3161 timestamp when the \
                 signature has one); sigil would require a log entry",
            );
        } else if !has_ctlog {
            fields.insert("ctlog".into(), Value::Object(Map::new()));
            let why = if timestamped {
                "with rfc3161timestamp set and no ctlog"
            } else {
                "without ctlog"
            };
            notes.kept(
                &ctlog_path,
                format!(
                    "added `ctlog: {{}}`: policy-controller does not check the transparency log \
                     for a key authority {why} (it admits signatures made with `cosign sign \
                     --tlog-upload=false`); sigil requires a log entry unless ctlog is `{{}}`. \
                     sigil still checks a log entry that is present (against the public-good \
                     Rekor), which policy-controller ignores: an entry from a log sigil does not \
                     trust fails"
                ),
            );
        }
        if format == "bundle" {
            notes.differs(
                &format!("{path}.signatureFormat"),
                "policy-controller admits nothing through a key authority with `signatureFormat: \
                 bundle` (its new-bundle verifier takes keyless authorities only); sigil verifies \
                 this key's signatures in both formats",
            );
        }
    } else if fields.get("keyless").is_some_and(Value::is_object) {
        keyless(path, fields, timestamped, has_ctlog, log_named, notes);
    }
    if matches!(format.as_str(), "legacy" | "bundle") && !fields.contains_key("static") {
        let other = if format == "legacy" {
            "new-format bundles (OCI referrers)"
        } else {
            "legacy `.sig`/`.att` signatures"
        };
        notes.differs(
            &format!("{path}.signatureFormat"),
            format!(
                "policy-controller looks only for {format} signatures here; sigil always looks \
                 for both formats, so it also admits {other}"
            ),
        );
    }
    if let Some(Value::Array(sources)) = fields.get("source") {
        for (j, source) in sources.iter().enumerate() {
            let names: Vec<&str> = source
                .get("signaturePullSecrets")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|s| text(s, "name"))
                .collect();
            if !names.is_empty() {
                notes.differs(
                    &format!("{path}.source[{j}].signaturePullSecrets"),
                    format!(
                        "policy-controller reads {} from the namespace of the object being \
                         admitted; sigil reads them from its own namespace and pulls without a \
                         Secret that is not there: copy them into sigil's namespace",
                        names.join(", ")
                    ),
                );
            }
        }
    }
    if let Some(Value::Array(attestations)) = fields.get_mut("attestations") {
        for (j, att) in attestations.iter_mut().enumerate() {
            if let Some(policy) = att.get_mut("policy") {
                config_map_namespace(&format!("{path}.attestations[{j}].policy"), policy, notes);
            }
        }
    }
}

fn keyless(
    path: &str,
    fields: &mut Map<String, Value>,
    timestamped: bool,
    has_ctlog: bool,
    log_named: bool,
    notes: &mut Notes,
) {
    let Some(k) = fields.get_mut("keyless") else {
        return;
    };
    let trust_root = text(k, "trustRootRef").map(str::to_owned);
    // A chain from a KMS cannot exist: sigil admits nothing through that
    // authority either (`CaTrust::Unusable`), so the verdicts agree.
    let ca_from_kms = k.get("ca-cert").is_some_and(|c| text(c, "kms").is_some());
    if is_object(k, "ca-cert") && text(k, "url").is_none() && !ca_from_kms {
        notes.differs(
            &format!("{path}.keyless.ca-cert"),
            "policy-controller admits nothing through a keyless authority with ca-cert and no url \
             (it verifies keyless signatures only when keyless.url is set, and never uses \
             ca-cert); sigil verifies certificates against this CA chain",
        );
    }
    if let Some(ca) = k.get_mut("ca-cert").filter(|c| c.is_object()) {
        secret_namespace(&format!("{path}.keyless.ca-cert"), ca, notes);
    }
    let ctlog_path = format!("{path}.ctlog");
    if timestamped {
        notes.differs(
            &format!("{path}.rfc3161timestamp"),
            "policy-controller does not check the transparency log of a keyless authority with \
             rfc3161timestamp: it takes the signing time from an RFC 3161 timestamp (or, without \
             one, the current time); sigil takes it from the timestamp only when the authority's \
             trust root lists no transparency log (a private instance such as GitHub's), requires \
             a log entry against a trust root that lists one, and denies a signature with \
             neither",
        );
    } else if has_ctlog && !log_named {
        notes.differs(
            &ctlog_path,
            "policy-controller does not check the transparency log here (`ctlog` names no log) \
             and checks the certificate against the current time, which admits a keyless \
             signature only while its certificate is valid; sigil refuses keyless authorities \
             without a log: remove `ctlog: {}` (a log entry is then required) or name the log",
        );
    } else if !has_ctlog && let Some(root) = trust_root {
        let mut ctlog = Map::new();
        ctlog.insert("trustRootRef".into(), Value::String(root.clone()));
        fields.insert("ctlog".into(), Value::Object(ctlog));
        notes.differs(
            &ctlog_path,
            format!(
                "set to `{{trustRootRef: {root}}}`, what sigil does anyway: require a log entry \
                 from that TrustRoot's logs and check the certificate at the logged time. \
                 policy-controller skips the transparency log for a keyless authority with a \
                 trustRootRef and no ctlog, and checks the certificate against the current time \
                 instead: it admits a signature without a log entry while its certificate is \
                 valid (Fulcio's: 10 minutes) and denies it afterwards"
            ),
        );
    }
}

/// policy-controller verifies with sha256 unless told; sigil takes the
/// key type's own digest (sha384 for P-384 keys). Written explicitly where
/// that could differ: P-384 keys and keys sigil cannot see offline.
fn key_hash(path: &str, key: &mut Value, notes: &mut Notes) {
    if text(key, "hashAlgorithm").is_some() {
        return;
    }
    let why = match text(key, "data") {
        Some(pem) => match PublicKey::from_pem(pem) {
            Ok(PublicKey::P384(_)) => "this P-384 key's",
            _ => return,
        },
        // A Secret's or a KMS key's type is not known here.
        None => "the key's, should it be P-384,",
    };
    if let Value::Object(fields) = key {
        fields.insert("hashAlgorithm".into(), Value::from("sha256"));
        notes.kept(
            &format!("{path}.hashAlgorithm"),
            format!(
                "set to `sha256`, policy-controller's default: without it sigil would verify \
                 {why} signatures over sha384, as cosign makes them, where policy-controller \
                 expects sha256"
            ),
        );
    }
}

/// sigil reads referenced Secrets and ConfigMaps from its own namespace only.
fn secret_namespace(path: &str, key: &mut Value, notes: &mut Notes) {
    if let Some(secret) = key.get_mut("secretRef") {
        drop_namespace(&format!("{path}.secretRef"), "Secret", secret, notes);
    }
}

fn config_map_namespace(path: &str, policy: &mut Value, notes: &mut Notes) {
    if let Some(cm) = policy.get_mut("configMapRef") {
        drop_namespace(&format!("{path}.configMapRef"), "ConfigMap", cm, notes);
    }
}

fn drop_namespace(path: &str, kind: &str, reference: &mut Value, notes: &mut Notes) {
    let Value::Object(fields) = reference else {
        return;
    };
    let Some(namespace) = fields
        .remove("namespace")
        .and_then(|n| n.as_str().map(str::to_owned))
        .filter(|n| !n.is_empty())
    else {
        return;
    };
    let name = fields
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    notes.kept(
        &format!("{path}.namespace"),
        format!(
            "removed `{namespace}`: sigil reads the {kind} from its own namespace, as \
             policy-controller reads it from its own; copy {kind} {namespace}/{name} into sigil's \
             namespace"
        ),
    );
}

/// policy-controller matches a glob against the digest-pinned image as a
/// whole (`registry/repo@sha256:…`, the tag dropped), so only globs whose
/// last segment ends in a wildcard and names no tag can select anything
/// once its webhook has pinned the image; sigil also tries the repository
/// and the tag.
fn check_glob(path: &str, glob: &str, notes: &mut Notes) {
    let last = glob.rsplit('/').next().unwrap_or(glob);
    let selects_pinned = glob.ends_with("**") || (last.ends_with('*') && !last.contains(':'));
    if !selects_pinned {
        notes.differs(
            path,
            format!(
                "policy-controller matches `{glob}` against the digest-pinned image \
                 (registry/repo@sha256:…) and so selects no image with it once its webhook has \
                 pinned the image; sigil also matches the repository and tag, so this policy \
                 applies to images policy-controller leaves to its no-match policy. End the glob \
                 with `*` or `**` to mean the same in both"
            ),
        );
    }
}

/// policy-controller compares resource, version and group exactly (only
/// `version: "*"` is a wildcard, and an empty group is the core group);
/// sigil reads an empty field as any.
fn check_match(path: &str, m: &Value, notes: &mut Notes) {
    let resource = text(m, "resource");
    let version = text(m, "version");
    let group = text(m, "group");
    let core = matches!(resource, Some("pods" | "replicationcontrollers"));
    let mut nothing = Vec::new();
    if resource.is_none() {
        nothing.push("no resource");
    }
    if version.is_none() {
        nothing.push("no version (use \"*\" for any)");
    }
    if group.is_none() && resource.is_some() && !core {
        nothing.push("no group for a resource outside the core group");
    }
    if !nothing.is_empty() {
        notes.differs(
            path,
            format!(
                "this entry has {}: policy-controller compares resource, version and group \
                 exactly, so it selects no resource there; sigil reads an empty field as any, so \
                 the policy applies here",
                nothing.join(", ")
            ),
        );
    }
}
