//! Validation and compilation of ClusterImagePolicy and TrustRoot specs into
//! the verifier's policy model. Every problem is reported with the path of
//! the field at fault (`spec.authorities[1].keyless.identities[0].subjectRegExp:
//! invalid regex: …`); all problems are collected, not just the first, and
//! unsupported features are rejected with what to use instead — nothing is
//! silently ignored. The same code runs in the controller and in `sigil
//! policy lint`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use sigil_api::cip::{
    Attestation, Authority, ClusterImagePolicySpec, ConfigMapRef, Identity, KeyRef, KeylessRef,
    MatchResource, NotationRef, Policy, RemotePolicy, Source, TLog,
};
use sigil_api::trustroot::{CertificateAuthority, TransparencyLogInstance, TrustRootSpec};
use sigil_policy::cue::{CIP_LEVEL_NAME, CueFailure, CuePolicy};
use sigil_policy::glob::{Glob, ImageName};
use sigil_policy::model::PolicyProgram;
use sigil_policy::model::{
    AuthorityKind, CaTrust, CipPolicy, CompiledAttestation, CompiledAuthority, CompiledPolicy,
    KeyAuthority, KeyMaterial, KeylessAuthority, LabelOperator, LabelRequirement, LabelSelector,
    Mode, NotationAuthority, PREDICATE_SHORT_NAMES, Platforms, ResourceMatch, SecretRef,
    SignatureSource, StaticAction, TlogPolicy, predicate_type_uri,
};
use sigil_policy::rego::RegoPolicy;
use sigil_verifier::crypto::{HashAlgorithm, PublicKey, pem_decode_all};
use sigil_verifier::identity::{Claim, ClaimPolicy, IdentityMatcher, IdentityPolicy};
use sigil_verifier::x509::Certificate;

/// Resources a `match` entry may name: those sigil's webhook admits.
pub const MATCH_RESOURCES: &[&str] = &[
    "pods",
    "deployments",
    "replicasets",
    "statefulsets",
    "daemonsets",
    "jobs",
    "cronjobs",
    "replicationcontrollers",
];

/// One rejected field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field, e.g. `spec.authorities[0].key.data`.
    pub path: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Why a spec was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// One or more fields are invalid.
    #[error("{}", join(.0))]
    Invalid(Vec<FieldError>),
}

impl CompileError {
    /// The rejected fields.
    pub fn fields(&self) -> &[FieldError] {
        match self {
            Self::Invalid(errors) => errors,
        }
    }
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Reads the PEM a Secret holds and the Rego module a ConfigMap holds; the
/// controller implements it with the Kubernetes API, `sigil policy lint`
/// with [`Offline`].
pub trait SecretResolver {
    /// The PEM text of the Secret's single data entry; `None` when Secrets
    /// cannot be read here (offline), `Some(Err(reason))` when the Secret is
    /// missing or malformed.
    fn resolve(&self, secret: &SecretRef) -> Option<Result<String, String>>;

    /// The Rego module a policy's `configMapRef` names; `None` when
    /// ConfigMaps cannot be read here (offline), `Some(Err(reason))` when the
    /// ConfigMap or its entry is missing.
    fn config_map(&self, _reference: &ConfigMapRef) -> Option<Result<String, String>> {
        None
    }

    /// The PEM public key a `key.kms` URI names; `None` when no KMS can be
    /// asked here (offline), `Some(Err(reason))` when the KMS refused.
    fn kms(&self, _uri: &str) -> Option<Result<String, String>> {
        None
    }

    /// The module a policy's `remote` names, already checked against its
    /// `sha256sum` ([`check_remote_policy`]); `None` when URLs are not
    /// fetched here (offline), `Some(Err(reason))` when the fetch failed.
    fn remote_policy(&self, _remote: &RemotePolicy) -> Option<Result<String, String>> {
        None
    }
}

/// How the message of an offline `key.kms` begins: [`is_offline_only`]
/// lets `sigil policy lint` report it as a note.
pub const KMS_OFFLINE: &str = "fetched by sigil-controller from the KMS";

/// How the message of an offline `configMapRef` begins: compiling it needs
/// the cluster, which [`is_offline_only`] lets `sigil policy lint` tell apart
/// from a real error.
pub const CONFIG_MAP_OFFLINE: &str = "resolved by sigil-controller from ConfigMap";

/// How the message of a notation trust store's unresolved `configMapRef` or
/// `secretRef` begins (see [`CONFIG_MAP_OFFLINE`]).
pub const NOTATION_STORE_OFFLINE: &str = "read by sigil-controller from";

/// How the message of a CUE policy begins when this process has no CUE
/// module (`sigil policy lint` from a `cargo install`ed CLI): the policy
/// could not be checked, which is not an error in the policy.
pub const CUE_MODULE_MISSING: &str = "this sigil has no CUE module at ";

/// How the message of an offline `remote` policy begins (see
/// [`CONFIG_MAP_OFFLINE`]).
pub const REMOTE_OFFLINE: &str = "fetched by sigil-controller from";

/// The largest remote policy module accepted: far more than any policy
/// needs, and small enough for the snapshot Secret (1 MiB in all).
pub const MAX_REMOTE_POLICY_BYTES: usize = 256 * 1024;

/// Whether `error` only says a `configMapRef` or `remote` policy could not be
/// read offline, or that a CUE policy could not be checked for want of the
/// CUE module.
pub fn is_offline_only(error: &FieldError) -> bool {
    (error.path.ends_with(".configMapRef") && error.message.starts_with(CONFIG_MAP_OFFLINE))
        || (error.path.ends_with(".trustPolicyRef")
            && error.message.starts_with(CONFIG_MAP_OFFLINE))
        || ((error.path.ends_with(".configMapRef") || error.path.ends_with(".secretRef"))
            && error.message.starts_with(NOTATION_STORE_OFFLINE))
        || (error.path.ends_with(".kms") && error.message.starts_with(KMS_OFFLINE))
        || (error.path.ends_with(".remote") && error.message.starts_with(REMOTE_OFFLINE))
        || error.message.starts_with(CUE_MODULE_MISSING)
}

/// Checks fetched `body` against a `remote` policy: at most
/// [`MAX_REMOTE_POLICY_BYTES`], SHA-256 equal to `sha256sum`, UTF-8 text.
/// Returns the module, or why it is refused. The controller and the CLI
/// both accept a remote policy only through this check.
pub fn check_remote_policy(remote: &RemotePolicy, body: &[u8]) -> Result<String, String> {
    if body.len() > MAX_REMOTE_POLICY_BYTES {
        return Err(format!(
            "the content is {} bytes, more than the {MAX_REMOTE_POLICY_BYTES} bytes a policy \
             may have",
            body.len()
        ));
    }
    let got = hex::encode(sigil_verifier::crypto::sha256(body));
    if !got.eq_ignore_ascii_case(remote.sha256sum.trim()) {
        return Err(format!(
            "the content's sha256 is {got}, not the sha256sum {}; if the policy changed on \
             purpose, review it and set sha256sum to the new value",
            remote.sha256sum.trim()
        ));
    }
    String::from_utf8(body.to_vec()).map_err(|_| "the content is not UTF-8 text".to_owned())
}

/// A resolver for offline use: Secrets stay unresolved references.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offline;

impl SecretResolver for Offline {
    fn resolve(&self, _secret: &SecretRef) -> Option<Result<String, String>> {
        None
    }
}

/// Collects field errors while walking a spec.
#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// What an ImagePolicy in `namespace` may not do that a ClusterImagePolicy
/// may, one line per field: name a Secret or ConfigMap in another namespace
/// (a tenant reads only its own), name `signaturePullSecrets` (the webhook
/// would read them from sigil's namespace; signatures are fetched with the
/// workload's own pull secrets, which live in the policy's namespace), or
/// name a `key.kms` (the controller would fetch it with the cluster's KMS
/// credentials, sending them to a host the tenant chose). Empty when the
/// spec is fit for a namespace.
pub fn namespaced_problems(spec: &ClusterImagePolicySpec, namespace: &str) -> Vec<String> {
    // (field path, kind, name, namespace as written) of every reference.
    type Reference<'a> = (String, &'static str, &'a str, &'a str);
    fn config_map<'a>(path: String, p: &'a Option<Policy>, out: &mut Vec<Reference<'a>>) {
        if let Some(r) = p.as_ref().and_then(|p| p.config_map_ref.as_ref()) {
            let ns = r.namespace.as_deref().unwrap_or_default();
            out.push((format!("{path}.configMapRef"), "ConfigMap", &r.name, ns));
        }
    }
    let mut references: Vec<Reference<'_>> = Vec::new();
    config_map("spec.policy".into(), &spec.policy, &mut references);
    for (i, a) in spec.authorities.iter().enumerate() {
        for (j, att) in a.attestations.iter().enumerate() {
            config_map(
                format!("spec.authorities[{i}].attestations[{j}].policy"),
                &att.policy,
                &mut references,
            );
        }
    }
    for (i, a) in spec.authorities.iter().enumerate() {
        let Some(n) = &a.notation else { continue };
        if let Some(r) = &n.trust_policy_ref {
            let ns = r.namespace.as_deref().unwrap_or_default();
            let path = format!("spec.authorities[{i}].notation.trustPolicyRef");
            references.push((path, "ConfigMap", &r.name, ns));
        }
        for (j, store) in n.trust_stores.iter().enumerate() {
            let at = format!("spec.authorities[{i}].notation.trustStores[{j}]");
            if let Some(r) = &store.config_map_ref {
                references.push((
                    format!("{at}.configMapRef"),
                    "ConfigMap",
                    &r.name,
                    &r.namespace,
                ));
            }
            if let Some(r) = &store.secret_ref {
                references.push((format!("{at}.secretRef"), "Secret", &r.name, &r.namespace));
            }
        }
    }
    let mut problems = Vec::new();
    for (i, a) in spec.authorities.iter().enumerate() {
        let keys = [
            ("key", a.key.as_ref()),
            (
                "keyless.ca-cert",
                a.keyless.as_ref().and_then(|k| k.ca_cert.as_ref()),
            ),
        ];
        for (field, key) in keys {
            if let Some(r) = key.and_then(|k| k.secret_ref.as_ref()) {
                let path = format!("spec.authorities[{i}].{field}.secretRef");
                references.push((path, "Secret", &r.name, &r.namespace));
            }
        }
        if a.key.as_ref().is_some_and(|k| k.kms.is_some()) {
            problems.push(format!(
                "spec.authorities[{i}].key.kms: an ImagePolicy cannot name a KMS key: sigil's \
                 controller would fetch it with the cluster's KMS credentials, not the \
                 namespace's; put the public key in key.data or in a Secret of this namespace \
                 (key.secretRef), or ask an admin for a ClusterImagePolicy"
            ));
        }
        for (j, source) in a.sources.iter().enumerate() {
            if !source.signature_pull_secrets.is_empty() {
                problems.push(format!(
                    "spec.authorities[{i}].source[{j}].signaturePullSecrets: an ImagePolicy cannot \
                     name pull secrets for signatures; they are fetched with the workload's own \
                     pull secrets (its imagePullSecrets or its service account's, in this \
                     namespace): remove the field"
                ));
            }
        }
    }
    let elsewhere = references
        .into_iter()
        .filter(|(_, _, _, ns)| !ns.is_empty() && *ns != namespace)
        .map(|(path, kind, name, ns)| {
            format!(
                "{path}: {kind} {ns}/{name} is outside the ImagePolicy's namespace `{namespace}`; \
                 an ImagePolicy reads {kind}s only from its own namespace: create it there and \
                 leave the namespace out"
            )
        });
    elsewhere.chain(problems).collect()
}

/// Validates `spec` and compiles it into the verifier's model. `name` is the
/// ClusterImagePolicy's name (an ImagePolicy's `NAMESPACE/NAME`).
pub fn compile_policy(
    name: &str,
    spec: &ClusterImagePolicySpec,
    secrets: &dyn SecretResolver,
) -> Result<CompiledPolicy, CompileError> {
    let mut errs = Errors::default();

    if spec.images.is_empty() {
        errs.add("spec.images", "at least one image glob is required");
    }
    let images = spec
        .images
        .iter()
        .enumerate()
        .filter_map(|(i, image)| {
            Glob::compile(&image.glob)
                .map_err(|e| errs.add(format!("spec.images[{i}].glob"), e.to_string()))
                .ok()
        })
        .collect();

    if spec.authorities.is_empty() {
        errs.add(
            "spec.authorities",
            "at least one authority is required; to admit matched images without signatures use \
             `static: {action: pass}`",
        );
    }
    let mut names = BTreeSet::new();
    let mut authorities = Vec::with_capacity(spec.authorities.len());
    for (i, authority) in spec.authorities.iter().enumerate() {
        let path = format!("spec.authorities[{i}]");
        let name = if authority.name.is_empty() {
            format!("authority-{i}")
        } else {
            authority.name.clone()
        };
        if !names.insert(name.clone()) {
            errs.add(
                format!("{path}.name"),
                format!("duplicate authority name `{name}`; names must be unique within a policy"),
            );
        }
        if let Some(a) = compile_authority(&path, name, authority, secrets, &mut errs) {
            authorities.push(a);
        }
    }

    let policy = spec
        .policy
        .as_ref()
        .and_then(|p| {
            let label = format!("{name}.policy");
            compile_program(
                "spec.policy",
                &label,
                CIP_LEVEL_NAME,
                p,
                true,
                secrets,
                &mut errs,
            )
        })
        .map(|(program, p)| CipPolicy {
            program,
            include_spec: p.include_spec.unwrap_or(false),
            include_object_meta: p.include_object_meta.unwrap_or(false),
            include_type_meta: p.include_type_meta.unwrap_or(false),
            fetch_config_file: p.fetch_config_file.unwrap_or(false),
        });

    let mode = match spec.mode.as_deref() {
        None | Some("") | Some("enforce") => Mode::Enforce,
        Some("warn") => Mode::Warn,
        Some("audit") => Mode::Audit,
        Some(other) => {
            errs.add(
                "spec.mode",
                format!("unsupported mode `{other}`; use `enforce`, `warn` or `audit`"),
            );
            Mode::Enforce
        }
    };

    let platforms = match spec.platforms.as_deref() {
        None | Some("") | Some("named") => Platforms::Named,
        Some("every") => Platforms::Every,
        Some("namedOrEvery") => Platforms::NamedOrEvery,
        Some(other) => {
            errs.add(
                "spec.platforms",
                format!(
                    "unsupported value `{other}`; use `named` (the digest the workload names), \
                     `every` (every platform image of an index) or `namedOrEvery`"
                ),
            );
            Platforms::Named
        }
    };

    let matches = spec
        .match_
        .iter()
        .enumerate()
        .filter_map(|(i, m)| compile_match(&format!("spec.match[{i}]"), m, &mut errs))
        .collect();

    if errs.0.is_empty() {
        Ok(CompiledPolicy {
            name: name.to_owned(),
            namespace: None,
            images,
            authorities,
            policy,
            mode,
            matches,
            platforms,
        })
    } else {
        Err(CompileError::Invalid(errs.0))
    }
}

fn compile_authority(
    path: &str,
    name: String,
    a: &Authority,
    secrets: &dyn SecretResolver,
    errs: &mut Errors,
) -> Option<CompiledAuthority> {
    let set = [
        a.key.is_some(),
        a.keyless.is_some(),
        a.static_.is_some(),
        a.notation.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if set != 1 {
        errs.add(
            path,
            "exactly one of key, keyless, notation or static must be set",
        );
        // What else is wrong with the parts that are there, all at once.
        if let Some(key) = &a.key {
            compile_key(&format!("{path}.key"), key, secrets, errs);
        }
        if let Some(keyless) = &a.keyless {
            compile_keyless(&format!("{path}.keyless"), keyless, errs);
        }
        return None;
    }
    if let Some(format) = a.signature_format.as_deref()
        && !matches!(format, "" | "legacy" | "bundle")
    {
        errs.add(
            format!("{path}.signatureFormat"),
            format!(
                "unsupported signatureFormat `{format}`; use `legacy` or `bundle` (sigil looks \
                     for both either way)"
            ),
        );
    }
    let kind = if let Some(key) = &a.key {
        compile_key(&format!("{path}.key"), key, secrets, errs).map(AuthorityKind::Key)
    } else if let Some(keyless) = &a.keyless {
        compile_keyless(&format!("{path}.keyless"), keyless, errs).map(AuthorityKind::Keyless)
    } else if let Some(notation) = &a.notation {
        if !a.attestations.is_empty()
            || !a.sources.is_empty()
            || a.ctlog.is_some()
            || a.rfc3161_timestamp.is_some()
        {
            errs.add(
                path,
                "a notation authority takes no attestations, source, ctlog or rfc3161timestamp; \
                 its trust policy says what is verified",
            );
        }
        compile_notation(&format!("{path}.notation"), notation, secrets, errs)
            .map(AuthorityKind::Notation)
    } else if let Some(s) = &a.static_ {
        if !a.attestations.is_empty() || !a.sources.is_empty() || a.ctlog.is_some() {
            errs.add(
                path,
                "a static authority takes no attestations, source or ctlog",
            );
        }
        match s.action.as_str() {
            "pass" => Some(AuthorityKind::Static(StaticAction::Pass)),
            "fail" => Some(AuthorityKind::Static(StaticAction::Fail {
                message: s.message.clone().filter(|m| !m.is_empty()),
            })),
            other => {
                errs.add(
                    format!("{path}.static.action"),
                    format!("unsupported action `{other}`; use `pass` or `fail`"),
                );
                None
            }
        }
    } else {
        None
    };

    let sources = a
        .sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| compile_source(&format!("{path}.source[{i}]"), s, errs))
        .collect();
    let tlog = compile_tlog(&format!("{path}.ctlog"), a.ctlog.as_ref(), errs);
    if tlog == TlogPolicy::Disabled && a.keyless.is_some() {
        errs.add(
            format!("{path}.ctlog"),
            "keyless signatures need a transparency log to prove when they were made; remove \
             `ctlog: {}` or set ctlog.trustRootRef",
        );
    }
    let timestamp_trust_root = a.rfc3161_timestamp.as_ref().and_then(|t| {
        t.trust_root_ref.as_deref().and_then(|r| {
            check_object_name(&format!("{path}.rfc3161timestamp.trustRootRef"), r, errs)
        })
    });

    let mut attestation_names = BTreeSet::new();
    let attestations = a
        .attestations
        .iter()
        .enumerate()
        .filter_map(|(i, att)| {
            let p = format!("{path}.attestations[{i}]");
            if !att.name.is_empty() && !attestation_names.insert(att.name.clone()) {
                errs.add(
                    format!("{p}.name"),
                    format!("duplicate attestation name `{}`", att.name),
                );
            }
            compile_attestation(&p, &name, att, secrets, errs)
        })
        .collect();

    Some(CompiledAuthority {
        name,
        kind: kind?,
        sources,
        tlog,
        timestamp_trust_root,
        attestations,
    })
}

/// Parses a Notation authority's trust policy and trust stores, and checks
/// that every store a statement names is given.
fn compile_notation(
    path: &str,
    n: &NotationRef,
    secrets: &dyn SecretResolver,
    errs: &mut Errors,
) -> Option<NotationAuthority> {
    use sigil_notation::policy::{StoreKind, TrustPolicy};
    use sigil_notation::store::TrustStore;

    let text = match (&n.trust_policy, &n.trust_policy_ref) {
        (Some(text), None) => Some((format!("{path}.trustPolicy"), text.clone())),
        (None, Some(r)) => {
            let at = format!("{path}.trustPolicyRef");
            match secrets.config_map(r) {
                Some(Ok(text)) => Some((at, text)),
                Some(Err(reason)) => {
                    errs.add(at, reason);
                    None
                }
                None => {
                    errs.add(
                        at,
                        format!(
                            "{CONFIG_MAP_OFFLINE} {}/{} (the trust policy cannot be checked offline)",
                            r.namespace.as_deref().unwrap_or("(sigil's namespace)"),
                            r.name
                        ),
                    );
                    None
                }
            }
        }
        _ => {
            errs.add(path, "set exactly one of trustPolicy and trustPolicyRef");
            None
        }
    };
    let policy = text.and_then(|(at, text)| match TrustPolicy::parse(text.as_bytes()) {
        Ok(policy) => Some(policy),
        Err(e) => {
            errs.add(at, e.to_string());
            None
        }
    });
    let mut trust_store = TrustStore::new();
    let mut names = BTreeSet::new();
    for (i, store) in n.trust_stores.iter().enumerate() {
        let at = format!("{path}.trustStores[{i}]");
        let parsed = store
            .name
            .split_once('/')
            .and_then(|(kind, name)| Some((StoreKind::parse(kind)?, name)))
            .filter(|(_, name)| {
                !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            });
        let Some((kind, name)) = parsed else {
            errs.add(
                format!("{at}.name"),
                format!(
                    "`{}` is not TYPE/NAME; use ca/NAME, signingAuthority/NAME or tsa/NAME (the \
                     directory under the Notation trust store's x509/), NAME of letters, digits, \
                     `_`, `.` and `-`",
                    store.name
                ),
            );
            continue;
        };
        if !names.insert((kind, name.to_owned())) {
            errs.add(
                format!("{at}.name"),
                format!(
                    "`{}` is given twice; put all of a store's certificates in one entry",
                    store.name
                ),
            );
            continue;
        }
        let certificates = match (
            &store.certificates,
            &store.config_map_ref,
            &store.secret_ref,
        ) {
            (Some(pem), None, None) => pem,
            (None, Some(r), None) | (None, None, Some(r)) => {
                let (field, kind) = if store.config_map_ref.is_some() {
                    ("configMapRef", "ConfigMap")
                } else {
                    ("secretRef", "Secret")
                };
                let ns = if r.namespace.is_empty() {
                    "(sigil's namespace)"
                } else {
                    &r.namespace
                };
                errs.add(
                    format!("{at}.{field}"),
                    format!(
                        "{NOTATION_STORE_OFFLINE} {kind} {ns}/{} (the certificates cannot be \
                         checked offline)",
                        r.name
                    ),
                );
                continue;
            }
            _ => {
                errs.add(
                    at,
                    "set exactly one of certificates, configMapRef and secretRef",
                );
                continue;
            }
        };
        if !certificates.trim_start().starts_with("-----BEGIN") {
            errs.add(
                format!("{at}.certificates"),
                "is not PEM; give the store's certificates as `-----BEGIN CERTIFICATE-----` \
                 blocks",
            );
            continue;
        }
        if let Err(e) = trust_store.add_file(kind, name, "certificates", certificates.as_bytes()) {
            errs.add(format!("{at}.certificates"), e.to_string());
        }
    }
    let policy = policy?;
    for (i, statement) in policy.statements.iter().enumerate() {
        for (j, store) in statement.trust_stores.iter().enumerate() {
            if !names.contains(&(store.kind, store.name.clone())) {
                errs.add(
                    format!("{path}.trustPolicy"),
                    format!(
                        "trust policy field `trustPolicies[{i}].trustStores[{j}]` names \
                         `{kind}:{name}`, which trustStores does not give; add an entry with name \
                         `{kind}/{name}` and its certificates",
                        kind = store.kind.as_str(),
                        name = store.name
                    ),
                );
            }
        }
    }
    Some(NotationAuthority {
        policy,
        trust_store,
    })
}

fn compile_key(
    path: &str,
    key: &KeyRef,
    secrets: &dyn SecretResolver,
    errs: &mut Errors,
) -> Option<KeyAuthority> {
    let hash = key_hash_algorithm(path, key.hash_algorithm.as_deref(), errs);
    let key = key_source(path, key, errs)?;
    let material = match key {
        Pem::Inline(pem) => {
            KeyMaterial::Resolved(parse_public_key(&format!("{path}.data"), &pem, errs)?)
        }
        Pem::Kms(uri) => {
            match secrets.kms(&uri) {
                Some(Ok(pem)) => {
                    KeyMaterial::Resolved(parse_public_key(&format!("{path}.kms"), &pem, errs)?)
                }
                Some(Err(reason)) => {
                    errs.add(format!("{path}.kms"), format!("{uri}: {reason}"));
                    return None;
                }
                None => {
                    errs.add(
                    format!("{path}.kms"),
                    format!("{KMS_OFFLINE} {uri} (syntax checked; the key cannot be fetched offline)"),
                );
                    return None;
                }
            }
        }
        Pem::Secret(secret) => match secrets.resolve(&secret) {
            None => KeyMaterial::Secret(secret),
            Some(Ok(pem)) => {
                KeyMaterial::Resolved(parse_public_key(&format!("{path}.secretRef"), &pem, errs)?)
            }
            Some(Err(reason)) => {
                errs.add(format!("{path}.secretRef"), format!("{secret}: {reason}"));
                return None;
            }
        },
    };
    if let (Some(HashAlgorithm::Sha224), KeyMaterial::Resolved(PublicKey::Rsa(_))) =
        (hash, &material)
    {
        // AWS-LC, sigil's one crypto module, has no RSA PKCS#1 v1.5 SHA-224
        // check; refusing here beats denying every image at admission.
        errs.add(
            format!("{path}.hashAlgorithm"),
            "sha224 with an RSA key is not supported (sigil's crypto module verifies RSA \
             signatures over sha256, sha384 or sha512); re-sign with one of those and set it here"
                .to_owned(),
        );
        return None;
    }
    Some(KeyAuthority {
        key: material,
        hash,
    })
}

/// Parses `hashAlgorithm` as policy-controller does (case and surrounding
/// blanks ignored); unset or empty is `None`, the key type's own digest.
fn key_hash_algorithm(path: &str, value: Option<&str>, errs: &mut Errors) -> Option<HashAlgorithm> {
    let value = value?;
    match value.trim().to_ascii_lowercase().as_str() {
        "" => None,
        "sha224" => Some(HashAlgorithm::Sha224),
        "sha256" => Some(HashAlgorithm::Sha256),
        "sha384" => Some(HashAlgorithm::Sha384),
        "sha512" => Some(HashAlgorithm::Sha512),
        _ => {
            errs.add(
                format!("{path}.hashAlgorithm"),
                format!(
                    "unsupported hashAlgorithm `{value}`; use sha224, sha256, sha384 or sha512 \
                     (the digest the key signed over), or remove the field"
                ),
            );
            None
        }
    }
}

/// A PEM given inline, by Secret or by KMS URI.
enum Pem {
    Inline(String),
    Secret(SecretRef),
    Kms(String),
}

/// Checks the data/secretRef/kms one-of of a KeyRef.
fn key_source(path: &str, key: &KeyRef, errs: &mut Errors) -> Option<Pem> {
    if let Some(uri) = &key.kms {
        if key.data.is_some() || key.secret_ref.is_some() {
            errs.add(path, "set only one of data, secretRef and kms");
            return None;
        }
        match sigil_kms::KmsRef::parse(uri) {
            Err(e) => {
                errs.add(format!("{path}.kms"), e.to_string());
                return None;
            }
            // As policy-controller: a policy names an AWS key by its ARN, so
            // the region is in the policy, not in the controller's
            // environment. Key IDs and alias names stay valid for the CLI.
            Ok(sigil_kms::KmsRef::Aws { key_id, .. }) if !key_id.starts_with("arn:") => {
                errs.add(
                    format!("{path}.kms"),
                    format!(
                        "`{uri}` names an AWS key by `{key_id}`; a ClusterImagePolicy names it by \
                         its ARN, which carries the region: \
                         awskms://[ENDPOINT]/arn:aws:kms:REGION:ACCOUNT:key/ID or \
                         awskms://[ENDPOINT]/arn:aws:kms:REGION:ACCOUNT:alias/NAME"
                    ),
                );
                return None;
            }
            Ok(_) => {}
        }
        return Some(Pem::Kms(uri.clone()));
    }
    match (&key.data, &key.secret_ref) {
        (Some(data), None) => Some(Pem::Inline(data.clone())),
        (None, Some(secret)) => {
            if secret.name.is_empty() {
                errs.add(
                    format!("{path}.secretRef.name"),
                    "the Secret's name is required",
                );
                return None;
            }
            Some(Pem::Secret(SecretRef {
                namespace: secret.namespace.clone(),
                name: secret.name.clone(),
            }))
        }
        (Some(_), Some(_)) => {
            errs.add(path, "set only one of data and secretRef");
            None
        }
        (None, None) => {
            errs.add(path, "one of data, secretRef or kms is required");
            None
        }
    }
}

fn parse_public_key(path: &str, pem: &str, errs: &mut Errors) -> Option<PublicKey> {
    PublicKey::from_pem(pem)
        .map_err(|e| {
            errs.add(
                path,
                format!(
                    "invalid public key: {e}; expected a PEM `PUBLIC KEY` (ECDSA P-256/P-384, \
                     Ed25519 or RSA), e.g. from `cosign public-key`"
                ),
            )
        })
        .ok()
}

fn compile_keyless(path: &str, k: &KeylessRef, errs: &mut Errors) -> Option<KeylessAuthority> {
    if k.identities.is_empty() {
        errs.add(
            format!("{path}.identities"),
            "at least one identity (issuer/issuerRegExp and subject/subjectRegExp) is required",
        );
    }
    let identities: Vec<IdentityPolicy> = k
        .identities
        .iter()
        .enumerate()
        .filter_map(|(i, id)| compile_identity(&format!("{path}.identities[{i}]"), id, errs))
        .collect();
    let trust_root = k
        .trust_root_ref
        .as_deref()
        .and_then(|r| check_object_name(&format!("{path}.trustRootRef"), r, errs));
    if k.url.is_some() && k.ca_cert.is_some() {
        errs.add(path, "set at most one of url and ca-cert");
    }
    // Trust never comes from the URL. Without trustRootRef it must name a
    // Fulcio of the cluster's default trust root, which only the controller
    // knows: `default_root::check_instance_urls` checks it there.
    if let Some(url) = &k.url {
        check_url(&format!("{path}.url"), url, errs);
    }
    let trust = if let Some(ca) = &k.ca_cert {
        let p = format!("{path}.ca-cert");
        match key_source(&p, ca, errs)? {
            Pem::Inline(pem) => {
                CaTrust::CaCert(parse_cert_chain(&format!("{p}.data"), &pem, errs)?)
            }
            Pem::Secret(secret) => CaTrust::CaCertSecret(secret),
            // Accepted as policy-controller accepts it, with its verdict:
            // nothing passes this authority. `sigil policy lint` says so.
            Pem::Kms(uri) => CaTrust::Unusable(format!(
                "{p}.kms ({uri}): a KMS holds keys, not certificate chains, so no certificate \
                 can chain to it and this authority admits nothing (as in policy-controller); \
                 set ca-cert.data or ca-cert.secretRef to the CA's PEM chain"
            )),
        }
    } else if let Some(name) = trust_root {
        CaTrust::TrustRoot(name)
    } else {
        CaTrust::Default
    };
    Some(KeylessAuthority {
        identities,
        trust,
        require_sct: !k.insecure_ignore_sct.unwrap_or(false),
    })
}

fn parse_cert_chain(path: &str, pem: &str, errs: &mut Errors) -> Option<Vec<Vec<u8>>> {
    let ders = match pem_decode_all(pem, "CERTIFICATE") {
        Ok(ders) if !ders.is_empty() => ders,
        Ok(_) => {
            errs.add(
                path,
                "no `-----BEGIN CERTIFICATE-----` block found; give the PEM chain",
            );
            return None;
        }
        Err(e) => {
            errs.add(path, format!("invalid PEM certificate chain: {e}"));
            return None;
        }
    };
    for (i, der) in ders.iter().enumerate() {
        if let Err(e) = Certificate::from_der(der) {
            errs.add(
                path,
                format!("certificate {i} of the chain is invalid: {e}"),
            );
            return None;
        }
    }
    Some(ders)
}

fn compile_identity(path: &str, id: &Identity, errs: &mut Errors) -> Option<IdentityPolicy> {
    let issuer = matcher(path, "issuer", &id.issuer, &id.issuer_reg_exp, errs);
    let subject = matcher(path, "subject", &id.subject, &id.subject_reg_exp, errs);
    let claims = compile_claims(&format!("{path}.claims"), &id.claims, errs);
    Some(IdentityPolicy {
        subject: subject?,
        issuer: issuer?,
        claims: claims?,
    })
}

/// The certificate claims of an identity: `name: value` for an exact value,
/// `nameRegExp: pattern` for a regular expression, one of the two per claim.
fn compile_claims(
    path: &str,
    claims: &BTreeMap<String, String>,
    errs: &mut Errors,
) -> Option<Vec<ClaimPolicy>> {
    let before = errs.len();
    let mut by_claim: BTreeMap<Claim, (Option<String>, Option<String>)> = BTreeMap::new();
    for (key, value) in claims {
        let (name, is_regex) = match key.strip_suffix("RegExp") {
            Some(base) => (base, true),
            None => (key.as_str(), false),
        };
        let Some(claim) = Claim::from_name(name) else {
            let known: Vec<&str> = Claim::all().map(Claim::name).collect();
            errs.add(
                format!("{path}.{key}"),
                format!(
                    "unknown certificate claim `{name}`; use one of {} (each also as \
                     <name>RegExp)",
                    known.join(", ")
                ),
            );
            continue;
        };
        let slot = by_claim.entry(claim).or_default();
        if is_regex {
            slot.1 = Some(value.clone());
        } else {
            slot.0 = Some(value.clone());
        }
    }
    let compiled: Vec<ClaimPolicy> = by_claim
        .into_iter()
        .filter_map(|(claim, (exact, regex))| {
            let expected = matcher(path, claim.name(), &exact, &regex, errs)?;
            Some(ClaimPolicy { claim, expected })
        })
        .collect();
    (errs.len() == before).then_some(compiled)
}

fn matcher(
    path: &str,
    field: &str,
    exact: &Option<String>,
    regex: &Option<String>,
    errs: &mut Errors,
) -> Option<IdentityMatcher> {
    let exact = exact.as_deref().filter(|s| !s.is_empty());
    let regex = regex.as_deref().filter(|s| !s.is_empty());
    match (exact, regex) {
        (Some(e), None) => Some(IdentityMatcher::Exact(e.to_owned())),
        (None, Some(r)) => match regex::RegexBuilder::new(r).size_limit(1 << 20).build() {
            Ok(re) => Some(IdentityMatcher::Regex(re)),
            Err(e) => {
                // The regex crate's message spans lines; status and admission
                // messages are single lines.
                let reason = e
                    .to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                errs.add(
                    format!("{path}.{field}RegExp"),
                    format!("invalid regex: {reason}"),
                );
                None
            }
        },
        (Some(_), Some(_)) => {
            errs.add(path, format!("set only one of {field} and {field}RegExp"));
            None
        }
        (None, None) => {
            errs.add(
                path,
                format!(
                    "one of {field} or {field}RegExp is required; sigil does not accept any \
                     {field} (write `{field}RegExp: \".*\"` if you really mean that)"
                ),
            );
            None
        }
    }
}

fn compile_source(path: &str, s: &Source, errs: &mut Errors) -> Option<SignatureSource> {
    let oci = match s.oci.as_deref().filter(|o| !o.is_empty()) {
        Some(oci) => {
            match ImageName::parse(oci) {
                Ok(r)
                    if !oci.contains('@')
                        && !oci
                            .rsplit('/')
                            .next()
                            .is_some_and(|last| last.contains(':')) =>
                {
                    Some(r.repository_name())
                }
                Ok(_) => {
                    errs.add(
                    format!("{path}.oci"),
                    format!("`{oci}` names a tag or digest; give the repository only (registry/path)"),
                );
                    None
                }
                Err(e) => {
                    errs.add(format!("{path}.oci"), e.to_string());
                    None
                }
            }
        }
        // policy-controller's meaning: the image's own repository, with the
        // source's credentials or tag prefix.
        None => None,
    };
    // policy-controller asks only for a name; one that is no valid Secret
    // name names no Secret, which the webhook ignores like a missing one
    // (and `sigil policy lint` notes).
    for (i, secret) in s.signature_pull_secrets.iter().enumerate() {
        if secret.name.trim().is_empty() || secret.name.len() > 253 {
            errs.add(
                format!("{path}.signaturePullSecrets[{i}].name"),
                "a Secret name (at most 253 characters) is required",
            );
        }
    }
    if let Some(prefix) = &s.tag_prefix
        && (prefix.len() > 64
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)))
    {
        errs.add(
            format!("{path}.tagPrefix"),
            "a tag prefix may hold at most 64 letters, digits, `_`, `.` and `-`",
        );
    }
    Some(SignatureSource {
        oci,
        pull_secrets: s
            .signature_pull_secrets
            .iter()
            .map(|s| s.name.clone())
            .collect(),
        tag_prefix: s.tag_prefix.clone().filter(|p| !p.is_empty()),
    })
}

fn compile_tlog(path: &str, t: Option<&TLog>, errs: &mut Errors) -> TlogPolicy {
    let Some(t) = t else {
        return TlogPolicy::Required { trust_root: None };
    };
    let trust_root = t
        .trust_root_ref
        .as_deref()
        .and_then(|r| check_object_name(&format!("{path}.trustRootRef"), r, errs));
    match (&t.url, &trust_root) {
        (None, None) => TlogPolicy::Disabled,
        (Some(url), None) => {
            // Checked against the default trust root's logs by the
            // controller (`default_root::check_instance_urls`).
            check_url(&format!("{path}.url"), url, errs);
            TlogPolicy::Required { trust_root: None }
        }
        (url, Some(_)) => {
            if let Some(url) = url {
                check_url(&format!("{path}.url"), url, errs);
            }
            TlogPolicy::Required { trust_root }
        }
    }
}

fn compile_attestation(
    path: &str,
    authority: &str,
    att: &Attestation,
    secrets: &dyn SecretResolver,
    errs: &mut Errors,
) -> Option<CompiledAttestation> {
    if att.name.is_empty() {
        errs.add(format!("{path}.name"), "a name is required");
    }
    let predicate_type = predicate_type_uri(&att.predicate_type);
    if predicate_type.is_empty() {
        errs.add(
            format!("{path}.predicateType"),
            "a predicate type is required",
        );
    } else if !predicate_type.contains(':') {
        let names: Vec<&str> = PREDICATE_SHORT_NAMES.iter().map(|(n, _)| *n).collect();
        errs.add(
            format!("{path}.predicateType"),
            format!(
                "`{predicate_type}` is neither a predicate type URI nor a cosign short name ({})",
                names.join(", ")
            ),
        );
    }
    let policy = match &att.policy {
        Some(p) => Some(
            compile_program(
                &format!("{path}.policy"),
                &format!("{authority}.{}", att.name),
                &att.name,
                p,
                false,
                secrets,
                errs,
            )?
            .0,
        ),
        None => None,
    };
    Some(CompiledAttestation {
        name: att.name.clone(),
        predicate_type: predicate_type.to_owned(),
        predicate_type_name: att.predicate_type.clone(),
        policy,
    })
}

/// Compiles a `policy` block (attestation or CIP level) in its language.
/// `label` names a Rego module; `name` is what policy-controller calls a
/// CUE policy in its messages (the attestation's name, or
/// `ClusterImagePolicy`).
fn compile_program<'p>(
    path: &str,
    label: &str,
    name: &str,
    p: &'p Policy,
    cip_level: bool,
    secrets: &dyn SecretResolver,
    errs: &mut Errors,
) -> Option<(PolicyProgram, &'p Policy)> {
    let before = errs.0.len();
    match p.type_.as_str() {
        "rego" | "cue" => {}
        other => errs.add(
            format!("{path}.type"),
            format!("unsupported policy type `{other}`; use `rego` or `cue`"),
        ),
    }
    if !cip_level {
        let object = "only the ClusterImagePolicy-level policy (spec.policy) can include the \
                      admitted object";
        for (field, set, why) in [
            (
                "fetchConfigFile",
                p.fetch_config_file.is_some(),
                "only the ClusterImagePolicy-level policy (spec.policy) gets the image's config \
                 files (policy-controller ignores the field here); move it to spec.policy or \
                 remove it",
            ),
            ("includeSpec", p.include_spec.is_some(), object),
            ("includeObjectMeta", p.include_object_meta.is_some(), object),
            ("includeTypeMeta", p.include_type_meta.is_some(), object),
        ] {
            if set {
                errs.add(format!("{path}.{field}"), why);
            }
        }
    }
    if p.remote.is_some() && (p.data.is_some() || p.config_map_ref.is_some()) {
        errs.add(
            format!("{path}.remote"),
            "set exactly one of data, configMapRef and remote: remove remote to use the other \
             source of the module, or the others to fetch it from the URL",
        );
        return None;
    }
    let (field, module) = match (&p.data, &p.config_map_ref) {
        (_, None) if p.remote.is_some() => {
            let field = format!("{path}.remote");
            let remote = p.remote.as_ref()?;
            if !check_remote_fields(&field, remote, errs) {
                return None;
            }
            match secrets.remote_policy(remote) {
                Some(Ok(module)) => (field, module),
                Some(Err(reason)) => {
                    errs.add(field, format!("{}: {reason}", remote.url));
                    return None;
                }
                None => {
                    errs.add(
                        field,
                        format!(
                            "{REMOTE_OFFLINE} {} (pinned by sha256 {}); it cannot be checked \
                             offline — put the module in data to lint it",
                            remote.url, remote.sha256sum
                        ),
                    );
                    return None;
                }
            }
        }
        (Some(_), Some(_)) => {
            errs.add(
                format!("{path}.configMapRef"),
                "set exactly one of data and configMapRef: remove data to read the module from \
                 the ConfigMap, or configMapRef to use the inline module",
            );
            return None;
        }
        (_, Some(reference)) => {
            let field = format!("{path}.configMapRef");
            let ns = reference
                .namespace
                .as_deref()
                .unwrap_or("<sigil's namespace>");
            let cm = format!("{ns}/{}", reference.name);
            match secrets.config_map(reference) {
                Some(Ok(module)) => (field, module),
                Some(Err(reason)) => {
                    errs.add(field, format!("ConfigMap {cm}: {reason}"));
                    return None;
                }
                None => {
                    errs.add(
                        field,
                        format!(
                            "{CONFIG_MAP_OFFLINE} {cm}; it cannot be checked offline — put the \
                             module in data to lint it"
                        ),
                    );
                    return None;
                }
            }
        }
        (data, None) => match data.as_deref().filter(|d| !d.trim().is_empty()) {
            Some(data) => (format!("{path}.data"), data.to_owned()),
            None => {
                errs.add(
                    format!("{path}.data"),
                    format!(
                        "the {} policy text is required: set data, or configMapRef to read it \
                         from a ConfigMap",
                        if p.type_ == "cue" { "CUE" } else { "Rego" }
                    ),
                );
                return None;
            }
        },
    };
    let program = if p.type_ == "cue" {
        // policy-controller's first step: the policy must compile on its
        // own. One that does not would deny every image it applies to; sigil
        // refuses it when the ClusterImagePolicy is applied instead.
        CuePolicy::compile(name, &field, &module)
            .map(PolicyProgram::Cue)
            .map_err(|failure| errs.add(&field, cue_compile_message(&failure)))
            .ok()?
    } else {
        RegoPolicy::compile(label, &module)
            .map(PolicyProgram::Rego)
            .map_err(|e| errs.add(&field, e.to_string()))
            .ok()?
    };
    (errs.0.len() == before).then_some((program, p))
}

/// What a CUE policy that sigil refuses gets as its field message.
fn cue_compile_message(failure: &CueFailure) -> String {
    match failure {
        CueFailure::Policy(d) => {
            let at = d
                .first_position()
                .map(|p| format!(" (line {} column {})", p.line, p.column))
                .unwrap_or_default();
            format!(
                "{}{at}; a CUE policy must compile on its own (policy-controller would deny \
                 every image it applies to)",
                d.message
            )
        }
        other => other.to_string(),
    }
}

/// Checks a `remote` policy's URL and hash; true when both are well formed.
fn check_remote_fields(path: &str, remote: &RemotePolicy, errs: &mut Errors) -> bool {
    let before = errs.0.len();
    let url = remote.url.trim();
    let host = ["https://", "http://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme))
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    if url.len() > 2048 || url.chars().any(char::is_whitespace) || host.is_none_or(str::is_empty) {
        errs.add(
            format!("{path}.url"),
            format!("`{url}` is not an http(s) URL with a host"),
        );
    }
    let sum = remote.sha256sum.trim();
    if sum.len() != 64 || !sum.bytes().all(|b| b.is_ascii_hexdigit()) {
        errs.add(
            format!("{path}.sha256sum"),
            format!(
                "`{sum}` is not a SHA-256 in hex (64 characters); compute it with `sha256sum` \
                 over the module"
            ),
        );
    }
    errs.0.len() == before
}

fn compile_match(path: &str, m: &MatchResource, errs: &mut Errors) -> Option<ResourceMatch> {
    let resource = m.resource.clone().unwrap_or_default();
    if !resource.is_empty() && !MATCH_RESOURCES.contains(&resource.as_str()) {
        errs.add(
            format!("{path}.resource"),
            format!(
                "unsupported resource `{resource}`; sigil admits {}",
                MATCH_RESOURCES.join(", ")
            ),
        );
    }
    let group = m.group.clone().unwrap_or_default();
    // policy-controller's only wildcard; sigil's is the empty field.
    let version = m.version.clone().filter(|v| v != "*").unwrap_or_default();
    if m.selector.is_some()
        && resource.is_empty()
        && group.is_empty()
        && m.version.as_deref().unwrap_or_default().is_empty()
    {
        errs.add(
            format!("{path}.selector"),
            "a selector needs a resource, group or version to apply to",
        );
    }
    let selector = m
        .selector
        .as_ref()
        .and_then(|s| compile_selector(&format!("{path}.selector"), s, errs));
    if m.selector.is_some() && selector.is_none() {
        return None;
    }
    Some(ResourceMatch {
        group,
        version,
        resource,
        selector,
    })
}

fn compile_selector(
    path: &str,
    s: &meta::LabelSelector,
    errs: &mut Errors,
) -> Option<LabelSelector> {
    let mut ok = true;
    let mut match_expressions = Vec::new();
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        let values = e.values.clone().unwrap_or_default();
        let operator = match e.operator.as_str() {
            "In" => LabelOperator::In,
            "NotIn" => LabelOperator::NotIn,
            "Exists" => LabelOperator::Exists,
            "DoesNotExist" => LabelOperator::DoesNotExist,
            other => {
                errs.add(
                    format!("{p}.operator"),
                    format!(
                        "unsupported operator `{other}`; use In, NotIn, Exists or DoesNotExist"
                    ),
                );
                ok = false;
                continue;
            }
        };
        let needs_values = matches!(operator, LabelOperator::In | LabelOperator::NotIn);
        if needs_values == values.is_empty() {
            errs.add(
                format!("{p}.values"),
                if needs_values {
                    "In and NotIn need at least one value"
                } else {
                    "Exists and DoesNotExist take no values"
                },
            );
            ok = false;
        }
        match_expressions.push(LabelRequirement {
            key: e.key.clone(),
            operator,
            values,
        });
    }
    ok.then(|| LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions,
    })
}

fn check_url(path: &str, url: &str, errs: &mut Errors) {
    let valid = ["https://", "http://"].iter().any(|scheme| {
        url.strip_prefix(scheme)
            .is_some_and(|rest| !rest.is_empty())
    }) && !url.chars().any(char::is_whitespace);
    if !valid {
        errs.add(path, format!("`{url}` is not an http(s) URL"));
    }
}

/// Checks a Kubernetes object name (DNS subdomain) and returns it.
fn check_object_name(path: &str, name: &str, errs: &mut Errors) -> Option<String> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b))
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if valid {
        Some(name.to_owned())
    } else {
        errs.add(
            path,
            format!(
                "`{name}` is not a Kubernetes object name (lowercase letters, digits, `-` and `.`)"
            ),
        );
        None
    }
}

/// Validates a TrustRoot spec: exactly one source, and every key, certificate
/// chain and root decodes.
pub fn validate_trust_root(spec: &TrustRootSpec) -> Result<(), CompileError> {
    let mut errs = Errors::default();
    let set = [
        spec.remote.is_some(),
        spec.repository.is_some(),
        spec.sigstore_keys.is_some(),
        spec.trusted_root.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if set != 1 {
        errs.add(
            "spec",
            "exactly one of remote, repository, sigstoreKeys or trustedRoot must be set",
        );
    }
    if let Some(remote) = &spec.remote {
        check_url("spec.remote.mirror", &remote.mirror, &mut errs);
        check_root_json("spec.remote.root", &remote.root, &mut errs);
        if let Some(target) = &remote.trusted_root_target
            && (target.is_empty()
                || target.contains('/')
                || target.contains("..")
                || !target.ends_with(".json"))
        {
            errs.add(
                "spec.remote.trustedRootTarget",
                format!(
                    "`{target}` is not a TUF target file name; give a name such as \
                     trusted_root.json or <domain>.trusted_root.json"
                ),
            );
        }
    }
    if let Some(source) = &spec.trusted_root {
        match (&source.data, &source.config_map_ref) {
            (Some(json), None) => {
                if let Err(e) = sigil_verifier::trust::TrustedRoot::from_json(json) {
                    errs.add(
                        "spec.trustedRoot.data",
                        format!("not a usable trusted_root.json: {e}"),
                    );
                }
            }
            (None, Some(cm)) if cm.name.is_empty() => {
                errs.add(
                    "spec.trustedRoot.configMapRef.name",
                    "the ConfigMap's name is required",
                );
            }
            (None, Some(_)) => {}
            _ => errs.add(
                "spec.trustedRoot",
                "set exactly one of data and configMapRef",
            ),
        }
    }
    if let Some(repo) = &spec.repository {
        check_root_json("spec.repository.root", &repo.root, &mut errs);
        decode_base64("spec.repository.mirrorFS", &repo.mirror_fs, &mut errs);
    }
    if let Some(keys) = &spec.sigstore_keys {
        let lists: [(&str, &[CertificateAuthority]); 2] = [
            ("certificateAuthorities", &keys.certificate_authorities),
            ("timestampAuthorities", &keys.timestamp_authorities),
        ];
        for (field, list) in lists {
            for (i, ca) in list.iter().enumerate() {
                let path = format!("spec.sigstoreKeys.{field}[{i}].certChain");
                if let Some(pem) = decode_base64_text(&path, &ca.cert_chain, &mut errs) {
                    parse_cert_chain(&path, &pem, &mut errs);
                }
            }
        }
        let logs: [(&str, &[TransparencyLogInstance]); 2] =
            [("tLogs", &keys.tlogs), ("ctLogs", &keys.ctlogs)];
        for (field, list) in logs {
            for (i, log) in list.iter().enumerate() {
                let path = format!("spec.sigstoreKeys.{field}[{i}]");
                check_url(&format!("{path}.baseURL"), &log.base_url, &mut errs);
                if let Some(h) = log.hash_algorithm.as_deref()
                    && !matches!(h, "sha256" | "sha384" | "sha512")
                {
                    errs.add(
                        format!("{path}.hashAlgorithm"),
                        format!("unsupported hashAlgorithm `{h}`; use sha256, sha384 or sha512"),
                    );
                }
                let key_path = format!("{path}.publicKey");
                if let Some(pem) = decode_base64_text(&key_path, &log.public_key, &mut errs) {
                    parse_public_key(&key_path, &pem, &mut errs);
                }
            }
        }
        if keys.certificate_authorities.is_empty()
            && keys.timestamp_authorities.is_empty()
            && keys.tlogs.is_empty()
        {
            errs.add(
                "spec.sigstoreKeys",
                "no certificate authorities, timestamp authorities or transparency logs: this trust \
                 root could verify nothing",
            );
        }
    }
    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(CompileError::Invalid(errs.0))
    }
}

fn decode_base64(path: &str, value: &str, errs: &mut Errors) -> Option<Vec<u8>> {
    let compact: String = value.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| {
            errs.add(
                path,
                format!("not base64 ({e}); byte fields hold base64, e.g. `base64 -w0 < file`"),
            )
        })
        .ok()
}

fn decode_base64_text(path: &str, value: &str, errs: &mut Errors) -> Option<String> {
    let bytes = decode_base64(path, value, errs)?;
    String::from_utf8(bytes)
        .map_err(|_| errs.add(path, "the base64 does not decode to PEM text"))
        .ok()
}

fn check_root_json(path: &str, value: &str, errs: &mut Errors) {
    if let Some(bytes) = decode_base64(path, value, errs)
        && serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("signed").cloned())
            .is_none()
    {
        errs.add(
            path,
            "not a base64-encoded TUF root.json (no `signed` object)",
        );
    }
}

/// Returns the names of the TrustRoots a compiled policy refers to, so the
/// controller can watch them and report missing ones.
pub fn trust_root_refs(policy: &CompiledPolicy) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in &policy.authorities {
        let mut add = |name: &str| out.entry(name.to_owned()).or_default().push(a.name.clone());
        if let AuthorityKind::Keyless(k) = &a.kind
            && let CaTrust::TrustRoot(name) = &k.trust
        {
            add(name);
        }
        if let TlogPolicy::Required {
            trust_root: Some(name),
        } = &a.tlog
        {
            add(name);
        }
        if let Some(name) = &a.timestamp_trust_root {
            add(name);
        }
    }
    out
}
