//! Policy evaluation for one image: which compiled policies apply, what each
//! authority yields through the [`AuthorityVerifier`] seam, attestation and
//! CIP-level Rego, warn mode and `noMatchPolicy`, into a structured
//! [`ImageResult`]. Everything here is plain code over the trait, so it is
//! tested with a fake verifier and no registry.
//!
//! The rules (policy-controller's):
//! - every policy whose globs select the image (and whose `match` selects the
//!   resource) must pass;
//! - a policy passes when at least one authority passes and, if it has a
//!   CIP-level `policy`, that Rego is compliant over the passing authorities;
//! - an authority without `attestations` passes with at least one verified
//!   signature; one with `attestations` passes when, for every listed
//!   attestation, at least one verified statement of that predicate type
//!   satisfies its Rego (signatures alone are then not enough);
//! - a failing `mode: warn` policy becomes warnings; an image no policy
//!   selects follows `noMatchPolicy`.

use std::collections::BTreeMap;
use std::future::Future;

use futures_util::future::join_all;
use serde_json::{Map, Value, json};

use crate::glob::ImageName;
use crate::model::{
    AuthorityKind, CompiledAttestation, CompiledAuthority, CompiledPolicy, Mode, NoMatchPolicy,
    ResourceInfo, StaticAction,
};
use sigil_verifier::dsse::Statement;
use sigil_verifier::identity::FulcioIdentity;

/// Verifies an image's signatures and attestations for one authority: the
/// seam between policy evaluation and OCI discovery plus bundle verification.
///
/// Expected semantics of an implementation:
/// - `image` always carries a digest; verify that digest, never a tag;
/// - discover both formats (bundle referrers and the `sha256-<hex>` fallback
///   tag, legacy `.sig`/`.att` tags), honouring `authority.sources`
///   (`oci` repository, `tagPrefix`, `pullSecrets`);
/// - verify each candidate against the authority's trust material (key with
///   its hash, or keyless identities with the CA/TrustRoot, SCT and tlog
///   requirements, `timestamp_trust_root`); candidates that fail are dropped,
///   their reasons kept for the failure message;
/// - return every verified plain signature in `signatures` and every verified
///   DSSE in-toto statement whose predicate type is not cosign's signature
///   predicate in `attestations` (the evaluation filters by predicate type);
/// - return [`AuthorityOutcome::Failed`] with a user-facing reason when
///   nothing verified or a registry error, timeout or unresolved reference
///   (Secret, TrustRoot) prevented verification. Static authorities are never
///   passed to the verifier.
///
/// The verifier owns deadlines, caching and single flight; it is called once
/// per (image, authority) and calls for one image run concurrently.
pub trait AuthorityVerifier: Sync {
    /// Verifies `image` for `authority`.
    fn verify(
        &self,
        image: &ImageName,
        authority: &CompiledAuthority,
    ) -> impl Future<Output = AuthorityOutcome> + Send;
}

/// What the verifier established for one authority.
#[derive(Debug, Clone)]
pub enum AuthorityOutcome {
    /// Verification ran; these signatures and attestations verified.
    Verified {
        /// Verified plain signatures.
        signatures: Vec<VerifiedSignature>,
        /// Verified attestations (in-toto statements).
        attestations: Vec<VerifiedAttestation>,
        /// Why other candidates did not verify; used when nothing matches.
        rejected: Vec<String>,
    },
    /// Nothing could be verified, for this reason.
    Failed(String),
}

/// A verified signature.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedSignature {
    /// A stable identifier (bundle or signature-layer digest).
    pub id: String,
    /// The Fulcio identity, for keyless signatures.
    pub identity: Option<FulcioIdentity>,
}

/// A verified attestation.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedAttestation {
    /// A stable identifier (bundle or attestation-layer digest).
    pub id: String,
    /// The Fulcio identity, for keyless attestations.
    pub identity: Option<FulcioIdentity>,
    /// The verified in-toto statement.
    pub statement: Statement,
}

/// The verdict for one image.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageResult {
    /// The image as admitted.
    pub image: String,
    /// One entry per applicable policy.
    pub policies: Vec<PolicyResult>,
    /// Set when no policy applied: what `noMatchPolicy` decided.
    pub no_match: Option<NoMatchPolicy>,
}

impl ImageResult {
    /// Whether the image may run (no enforced failure, no denying no-match).
    pub fn allowed(&self) -> bool {
        self.no_match != Some(NoMatchPolicy::Deny)
            && self
                .policies
                .iter()
                .all(|p| p.passed || p.mode == Mode::Warn)
    }
}

/// The outcome of one policy for one image.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyResult {
    /// The ClusterImagePolicy's name.
    pub name: String,
    /// Its mode.
    pub mode: Mode,
    /// Whether it passed.
    pub passed: bool,
    /// One entry per authority, in policy order.
    pub authorities: Vec<AuthorityResult>,
    /// Why the CIP-level policy failed, when it did.
    pub policy_error: Option<String>,
    /// Warnings raised by Rego policies (`warning` of `isCompliant`).
    pub warnings: Vec<String>,
}

/// The outcome of one authority.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorityResult {
    /// The authority's name.
    pub name: String,
    /// `key`, `keyless` or `static`.
    pub kind: &'static str,
    /// `Ok` with the matched material, or the reason it failed.
    pub outcome: Result<AuthorityMatch, String>,
}

/// What a passing authority matched: the input of the CIP-level policy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuthorityMatch {
    /// Verified signatures (empty for attestation authorities and statics).
    pub signatures: Vec<VerifiedSignature>,
    /// Attestations that satisfied their policies, by attestation name.
    pub attestations: BTreeMap<String, Vec<VerifiedAttestation>>,
}

/// Evaluates every applicable policy for `image` (which must carry a digest
/// for anything but static authorities) admitted as part of `resource`.
pub async fn evaluate_image<V: AuthorityVerifier>(
    verifier: &V,
    policies: &[CompiledPolicy],
    image: &ImageName,
    resource: &ResourceInfo,
    no_match: NoMatchPolicy,
) -> ImageResult {
    let applicable: Vec<&CompiledPolicy> = policies
        .iter()
        .filter(|p| p.matches_image(image) && p.matches_resource(resource))
        .collect();
    if applicable.is_empty() {
        return ImageResult {
            image: image.original.clone(),
            policies: Vec::new(),
            no_match: Some(no_match),
        };
    }
    let results = join_all(
        applicable
            .iter()
            .map(|p| evaluate_policy(verifier, p, image, resource)),
    )
    .await;
    ImageResult {
        image: image.original.clone(),
        policies: results,
        no_match: None,
    }
}

/// Evaluates one policy for `image`.
pub async fn evaluate_policy<V: AuthorityVerifier>(
    verifier: &V,
    policy: &CompiledPolicy,
    image: &ImageName,
    resource: &ResourceInfo,
) -> PolicyResult {
    let evaluated = join_all(
        policy
            .authorities
            .iter()
            .map(|a| evaluate_authority(verifier, a, image)),
    )
    .await;
    let mut warnings = Vec::new();
    let mut authorities = Vec::with_capacity(evaluated.len());
    for (result, mut authority_warnings) in evaluated {
        warnings.append(&mut authority_warnings);
        authorities.push(result);
    }
    let any_passed = authorities.iter().any(|a| a.outcome.is_ok());
    let mut policy_error = None;
    if any_passed && let Some(cip) = &policy.policy {
        let document = policy_document(&authorities, cip, resource);
        match cip.rego.evaluate(&document) {
            Ok(v) => {
                warnings.extend(v.warning);
                if !v.compliant {
                    policy_error = Some(v.error.unwrap_or_else(|| {
                        "the ClusterImagePolicy's policy is not compliant (isCompliant is false)"
                            .into()
                    }));
                }
            }
            Err(e) => policy_error = Some(e.to_string()),
        }
    }
    PolicyResult {
        name: policy.name.clone(),
        mode: policy.mode,
        passed: any_passed && policy_error.is_none(),
        authorities,
        policy_error,
        warnings,
    }
}

/// Evaluates one authority; returns its result and Rego warnings.
async fn evaluate_authority<V: AuthorityVerifier>(
    verifier: &V,
    authority: &CompiledAuthority,
    image: &ImageName,
) -> (AuthorityResult, Vec<String>) {
    let (kind, outcome, warnings) = match &authority.kind {
        AuthorityKind::Static(StaticAction::Pass) => {
            ("static", Ok(AuthorityMatch::default()), Vec::new())
        }
        AuthorityKind::Static(StaticAction::Fail { message }) => (
            "static",
            Err(message
                .clone()
                .unwrap_or_else(|| "disallowed by a static fail authority".into())),
            Vec::new(),
        ),
        AuthorityKind::Key(_) | AuthorityKind::Keyless(_) => {
            let kind = if matches!(authority.kind, AuthorityKind::Key(_)) {
                "key"
            } else {
                "keyless"
            };
            if image.digest.is_none() {
                let reason = format!(
                    "image {} is not pinned to a digest; sigil verifies digests only \
                     (its /mutate webhook pins tags, or write image@sha256:…)",
                    image.original
                );
                (kind, Err(reason), Vec::new())
            } else {
                let (outcome, warnings) = match verifier.verify(image, authority).await {
                    AuthorityOutcome::Failed(reason) => (Err(reason), Vec::new()),
                    AuthorityOutcome::Verified {
                        signatures,
                        attestations,
                        rejected,
                    } => check_verified(authority, signatures, attestations, &rejected),
                };
                (kind, outcome, warnings)
            }
        }
    };
    (
        AuthorityResult {
            name: authority.name.clone(),
            kind,
            outcome,
        },
        warnings,
    )
}

/// Applies the authority's signature/attestation requirements to what verified.
fn check_verified(
    authority: &CompiledAuthority,
    signatures: Vec<VerifiedSignature>,
    attestations: Vec<VerifiedAttestation>,
    rejected: &[String],
) -> (Result<AuthorityMatch, String>, Vec<String>) {
    let rejected_note = || {
        if rejected.is_empty() {
            String::new()
        } else {
            format!(" (rejected: {})", rejected.join("; "))
        }
    };
    if authority.attestations.is_empty() {
        if signatures.is_empty() {
            return (
                Err(format!("no verified signature{}", rejected_note())),
                Vec::new(),
            );
        }
        return (
            Ok(AuthorityMatch {
                signatures,
                attestations: BTreeMap::new(),
            }),
            Vec::new(),
        );
    }
    let mut matched = BTreeMap::new();
    let mut warnings = Vec::new();
    for wanted in &authority.attestations {
        match check_attestation(wanted, &attestations, &mut warnings) {
            Ok(passing) => {
                matched.insert(wanted.name.clone(), passing);
            }
            Err(reason) => {
                let found: Vec<&str> = attestations
                    .iter()
                    .map(|a| a.statement.predicate_type.as_str())
                    .collect();
                let found = if found.is_empty() {
                    format!("no verified attestations{}", rejected_note())
                } else {
                    format!("verified predicate types: {}", found.join(", "))
                };
                return (
                    Err(format!("attestation {}: {reason}; {found}", wanted.name)),
                    warnings,
                );
            }
        }
    }
    (
        Ok(AuthorityMatch {
            signatures,
            attestations: matched,
        }),
        warnings,
    )
}

/// Returns the statements of the wanted type that satisfy its policy.
fn check_attestation(
    wanted: &CompiledAttestation,
    attestations: &[VerifiedAttestation],
    warnings: &mut Vec<String>,
) -> Result<Vec<VerifiedAttestation>, String> {
    let candidates: Vec<&VerifiedAttestation> = attestations
        .iter()
        .filter(|a| a.statement.predicate_type == wanted.predicate_type)
        .collect();
    if candidates.is_empty() {
        return Err(format!(
            "no verified attestation with predicateType {}",
            wanted.predicate_type
        ));
    }
    let Some(rego) = &wanted.policy else {
        return Ok(candidates.into_iter().cloned().collect());
    };
    let mut first_error = None;
    let mut passing = Vec::new();
    for candidate in candidates {
        let input = match serde_json::to_value(&candidate.statement) {
            Ok(v) => v,
            Err(e) => {
                first_error.get_or_insert_with(|| format!("statement is not JSON: {e}"));
                continue;
            }
        };
        match rego.evaluate(&input) {
            Ok(v) if v.compliant => {
                warnings.extend(
                    v.warning
                        .map(|w| format!("attestation {}: {w}", wanted.name)),
                );
                passing.push(candidate.clone());
            }
            Ok(v) => {
                first_error.get_or_insert_with(|| {
                    v.error
                        .unwrap_or_else(|| "policy is not compliant (isCompliant is false)".into())
                });
            }
            Err(e) => {
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    if passing.is_empty() {
        Err(format!(
            "no {} attestation satisfies its policy: {}",
            wanted.predicate_type,
            first_error.unwrap_or_default()
        ))
    } else {
        Ok(passing)
    }
}

/// Builds the document the CIP-level policy sees, shaped like
/// policy-controller's: `authorityMatches.<name>.signatures[]` and
/// `authorityMatches.<name>.attestations.<attestation name>[]`, each entry
/// with `id`, `subject`, `issuer` and the GitHub workflow fields under
/// policy-controller's names (plus all Fulcio extensions under
/// `extensions`, and `predicateType`/`predicate` for attestations); then
/// `spec`, `metadata`, `apiVersion`/`kind` when the policy includes them.
pub fn policy_document(
    authorities: &[AuthorityResult],
    cip: &crate::model::CipPolicy,
    resource: &ResourceInfo,
) -> Value {
    let mut matches = Map::new();
    for a in authorities {
        let Ok(m) = &a.outcome else { continue };
        let signatures: Vec<Value> = m
            .signatures
            .iter()
            .map(|s| signer_fields(&s.id, s.identity.as_ref()))
            .collect();
        let mut attestations = Map::new();
        for (name, list) in &m.attestations {
            let entries = list
                .iter()
                .map(|att| {
                    let mut v = signer_fields(&att.id, att.identity.as_ref());
                    if let Some(obj) = v.as_object_mut() {
                        obj.insert("predicateType".into(), json!(att.statement.predicate_type));
                        obj.insert("predicate".into(), att.statement.predicate.clone());
                    }
                    v
                })
                .collect();
            attestations.insert(name.clone(), Value::Array(entries));
        }
        matches.insert(
            a.name.clone(),
            json!({"signatures": signatures, "attestations": attestations}),
        );
    }
    let mut doc = Map::new();
    doc.insert("authorityMatches".into(), Value::Object(matches));
    if cip.include_spec {
        doc.insert("spec".into(), resource.spec.clone());
    }
    if cip.include_object_meta {
        doc.insert("metadata".into(), resource.metadata.clone());
    }
    if cip.include_type_meta {
        let api_version = if resource.group.is_empty() {
            resource.version.clone()
        } else {
            format!("{}/{}", resource.group, resource.version)
        };
        doc.insert("apiVersion".into(), json!(api_version));
        doc.insert("kind".into(), json!(resource.kind));
    }
    Value::Object(doc)
}

fn signer_fields(id: &str, identity: Option<&FulcioIdentity>) -> Value {
    let mut v = Map::new();
    v.insert("id".into(), json!(id));
    let (subject, issuer) = identity.map_or((String::new(), String::new()), |i| {
        (i.subject.clone(), i.issuer.clone().unwrap_or_default())
    });
    v.insert("subject".into(), json!(subject));
    v.insert("issuer".into(), json!(issuer));
    if let Some(i) = identity {
        let e = &i.extensions;
        let github = [
            ("githubWorkflowTrigger", &e.github_workflow_trigger),
            ("githubWorkflowSha", &e.github_workflow_sha),
            ("githubWorkflowName", &e.github_workflow_name),
            ("githubWorkflowRepo", &e.github_workflow_repository),
            ("githubWorkflowRef", &e.github_workflow_ref),
        ];
        for (key, value) in github {
            if let Some(value) = value {
                v.insert(key.into(), json!(value));
            }
        }
        if let Ok(ext) = serde_json::to_value(e) {
            v.insert("extensions".into(), ext);
        }
    }
    Value::Object(v)
}
