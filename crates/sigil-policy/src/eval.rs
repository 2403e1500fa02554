//! Policy evaluation for one image: which compiled policies apply, what each
//! authority yields through the [`AuthorityVerifier`] seam, attestation and
//! CIP-level policies (Rego or CUE, over the documents policy-controller
//! builds, see [`crate::document`]), warn mode and `noMatchPolicy`, into a
//! structured [`ImageResult`]. Everything here is plain code over the
//! trait, so it is tested with a fake verifier and no registry.
//!
//! The rules (policy-controller's):
//! - every policy whose globs select the image (and whose `match` selects the
//!   resource) must pass;
//! - a policy passes when at least one authority passes and, if it has a
//!   CIP-level `policy`, that policy passes over the passing authorities;
//! - an authority without `attestations` passes with at least one verified
//!   signature; one with `attestations` passes when, for every listed
//!   attestation, at least one verified statement of that predicate type
//!   satisfies its policy (signatures alone are then not enough);
//! - a failing `mode: warn` policy becomes warnings; an image no policy
//!   selects follows `noMatchPolicy`;
//! - sigil's `platforms: every` judges each platform image of an index by
//!   the policy instead of the index (`namedOrEvery`: the index, or else
//!   each platform image); a policy whose platforms failed fails;
//! - a `mode: audit` policy (sigil's extension) is evaluated like the others
//!   but never decides: its result is kept for whoever counts or reports
//!   it, and an image only audit-mode policies select follows
//!   `noMatchPolicy` as if none did.

use std::collections::BTreeMap;
use std::future::Future;

use futures_util::future::join_all;

use crate::document::{Document, StatementShape, attestation_document, policy_document};
use crate::glob::ImageName;
use crate::model::{
    AuthorityKind, AuthorityMatch, AuthorityResult, CipPolicy, CompiledAttestation,
    CompiledAuthority, CompiledPolicy, Mode, NoMatchPolicy, Platforms, PolicyProgram, ResourceInfo,
    StaticAction, VerifiedAttestation, VerifiedSignature,
};
use crate::rego::RegoVerdict;
pub use sigil_registry::config::ConfigFiles;
pub use sigil_registry::platforms::PlatformImage;

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
///   nothing verified or an unresolved reference (Secret, TrustRoot)
///   prevented verification, and [`AuthorityOutcome::Inconclusive`] when
///   nothing verified because a registry did not answer (unreachable,
///   timeout, 5xx, access refused). Both deny at admission; the audit
///   reports the second as an error rather than a failure. Static
///   authorities are never passed to the verifier.
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

    /// The config files of `image` (which carries a digest) by platform,
    /// for a CIP-level policy with `fetchConfigFile`: read from the same
    /// registry with the same credentials as its signatures, after at least
    /// one authority passed.
    fn config_files(
        &self,
        image: &ImageName,
    ) -> impl Future<Output = Result<ConfigFiles, ImageReadError>> + Send;

    /// The platform images of `image` (which carries a digest) when it is
    /// a multi-platform index, `None` when it is not one: for a policy
    /// with `platforms: every` or `namedOrEvery` (sigil's extension). Read
    /// from the same registry with the same credentials as its signatures,
    /// within the same bounds.
    fn platform_images(
        &self,
        image: &ImageName,
    ) -> impl Future<Output = Result<Option<Vec<PlatformImage>>, ImageReadError>> + Send;
}

/// Why something a policy reads besides signatures (an image's config
/// files, an index's platforms) could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReadError {
    /// What failed, for the denial message.
    pub reason: String,
    /// A registry did not answer: the policy's verdict is unknown (the
    /// audit reports an error, admission still denies).
    pub inconclusive: bool,
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
    /// Nothing verified because a registry did not answer (or refused
    /// access): the outcome says nothing about the image's signatures.
    Inconclusive(String),
}

/// The verdict for one image.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageResult {
    /// The image as admitted.
    pub image: String,
    /// One entry per applicable policy.
    pub policies: Vec<PolicyResult>,
    /// Set when no enforce- or warn-mode ClusterImagePolicy applied (a
    /// namespace's ImagePolicy never counts): what `noMatchPolicy` decided (`mode: audit` policies may still have
    /// results in [`Self::policies`]).
    pub no_match: Option<NoMatchPolicy>,
}

impl ImageResult {
    /// Whether the image may run (no enforced failure, no denying no-match).
    pub fn allowed(&self) -> bool {
        self.no_match != Some(NoMatchPolicy::Deny)
            && self
                .policies
                .iter()
                .all(|p| p.passed || p.mode != Mode::Enforce)
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
    /// The CIP-level policy could not run because the image's config files
    /// could not be read from an unavailable registry.
    pub policy_inconclusive: bool,
    /// Warnings raised by Rego policies (`warning` of `isCompliant`; CUE
    /// has none).
    pub warnings: Vec<String>,
    /// Set when the policy judged the platform images of an index (its
    /// `platforms` is `every`, or `namedOrEvery` and the named digest
    /// failed); `authorities` and `policy_error` above are then the named
    /// digest's result, empty for `every`.
    pub platforms: Option<PlatformsResult>,
}

/// How the platform images of an index fared under one policy.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformsResult {
    /// The policy's `platforms`: [`Platforms::Every`], or
    /// [`Platforms::NamedOrEvery`] when the named digest was judged first
    /// and failed.
    pub rule: Platforms,
    /// Each platform image's result in index order, or why the index's
    /// platforms could not be listed.
    pub images: Result<Vec<PlatformResult>, ImageReadError>,
}

impl PlatformsResult {
    /// Whether every platform image passed.
    pub fn passed(&self) -> bool {
        self.images
            .as_ref()
            .is_ok_and(|images| !images.is_empty() && images.iter().all(|i| i.result.passed))
    }

    /// Whether the platforms failed only for want of an answer: the index
    /// could not be read, or no platform failed on what was read and some
    /// could not be checked.
    pub fn inconclusive(&self) -> bool {
        match &self.images {
            Err(e) => e.inconclusive,
            Ok(images) => {
                let failing = || images.iter().filter(|i| !i.result.passed);
                failing().any(|i| i.result.inconclusive())
                    && failing().all(|i| i.result.inconclusive())
            }
        }
    }
}

/// One platform image's result under a policy.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformResult {
    /// The platform as the index lists it (`linux/arm64`).
    pub platform: String,
    /// The platform image's digest.
    pub digest: String,
    /// The policy's result for that image alone (`platforms` unset).
    pub result: PolicyResult,
}

impl PolicyResult {
    /// Whether the policy failed only for want of an answer: no authority
    /// passed and at least one could not be checked because a registry did
    /// not answer (it might have passed). Such a failure still denies at
    /// admission; the audit reports it as an error, never as a pass.
    pub fn inconclusive(&self) -> bool {
        let named = self.policy_inconclusive || self.authorities.iter().any(|a| a.inconclusive);
        !self.passed
            && match &self.platforms {
                None => named,
                // `namedOrEvery`: either way might have passed.
                Some(p) => (p.rule == Platforms::NamedOrEvery && named) || p.inconclusive(),
            }
    }
}

/// Evaluates every applicable policy for `image` (which must carry a digest
/// for anything but static authorities) admitted as part of `resource`.
pub async fn evaluate_image<'p, V: AuthorityVerifier>(
    verifier: &V,
    policies: impl IntoIterator<Item = &'p CompiledPolicy>,
    image: &ImageName,
    resource: &ResourceInfo,
    no_match: NoMatchPolicy,
) -> ImageResult {
    let applicable: Vec<&CompiledPolicy> = policies
        .into_iter()
        .filter(|p| p.matches_image(image) && p.matches_resource(resource))
        .collect();
    // A namespace's ImagePolicy adds requirements; it never stands in for
    // the cluster policy `noMatchPolicy` asks for.
    let admitting = applicable
        .iter()
        .any(|p| p.mode.admits() && p.namespace.is_none());
    let results = join_all(
        applicable
            .iter()
            .map(|p| evaluate_policy(verifier, p, image, resource)),
    )
    .await;
    ImageResult {
        image: image.original.clone(),
        policies: results,
        no_match: (!admitting).then_some(no_match),
    }
}

/// Evaluates one policy for `image`, and for the platform images of an
/// index as the policy's `platforms` asks.
pub async fn evaluate_policy<V: AuthorityVerifier>(
    verifier: &V,
    policy: &CompiledPolicy,
    image: &ImageName,
    resource: &ResourceInfo,
) -> PolicyResult {
    match policy.platforms {
        Platforms::Named => evaluate_digest(verifier, policy, image, resource).await,
        Platforms::Every => match platform_images(verifier, image).await.transpose() {
            None => evaluate_digest(verifier, policy, image, resource).await,
            Some(listed) => {
                let platforms =
                    evaluate_platforms(verifier, policy, image, resource, listed, Platforms::Every)
                        .await;
                with_platforms(
                    PolicyResult {
                        name: policy.name.clone(),
                        mode: policy.mode,
                        passed: false,
                        authorities: Vec::new(),
                        policy_error: None,
                        policy_inconclusive: false,
                        warnings: Vec::new(),
                        platforms: None,
                    },
                    platforms,
                )
            }
        },
        Platforms::NamedOrEvery => {
            let named = evaluate_digest(verifier, policy, image, resource).await;
            if named.passed {
                return named;
            }
            match platform_images(verifier, image).await.transpose() {
                None => named,
                Some(listed) => {
                    let rule = Platforms::NamedOrEvery;
                    let platforms =
                        evaluate_platforms(verifier, policy, image, resource, listed, rule).await;
                    with_platforms(named, platforms)
                }
            }
        }
    }
}

/// The platform images of `image`, which must carry a digest.
async fn platform_images<V: AuthorityVerifier>(
    verifier: &V,
    image: &ImageName,
) -> Result<Option<Vec<PlatformImage>>, ImageReadError> {
    if image.digest.is_none() {
        return Err(ImageReadError {
            reason: format!("platforms: {}", unpinned(image)),
            inconclusive: false,
        });
    }
    verifier.platform_images(image).await
}

/// Judges each listed platform image by the policy alone.
async fn evaluate_platforms<V: AuthorityVerifier>(
    verifier: &V,
    policy: &CompiledPolicy,
    index: &ImageName,
    resource: &ResourceInfo,
    listed: Result<Vec<PlatformImage>, ImageReadError>,
    rule: Platforms,
) -> PlatformsResult {
    let images = match listed {
        Ok(images) => images,
        Err(e) => {
            return PlatformsResult {
                rule,
                images: Err(e),
            };
        }
    };
    let results = join_all(images.iter().map(|p| async move {
        let digest = p.digest.to_string();
        let image = ImageName {
            original: format!("{}@{digest}", index.repository_name()),
            tag: None,
            digest: Some(digest.clone()),
            ..index.clone()
        };
        PlatformResult {
            platform: p.platform.clone(),
            digest,
            result: evaluate_digest(verifier, policy, &image, resource).await,
        }
    }))
    .await;
    PlatformsResult {
        rule,
        images: Ok(results),
    }
}

/// `result` with the platforms' verdict: passed when it passed itself
/// (`namedOrEvery`) or every platform did; the platforms' warnings added.
fn with_platforms(mut result: PolicyResult, platforms: PlatformsResult) -> PolicyResult {
    result.passed = result.passed || platforms.passed();
    if let Ok(images) = &platforms.images {
        for image in images {
            result.warnings.extend(
                image
                    .result
                    .warnings
                    .iter()
                    .map(|w| format!("platform {}: {w}", image.platform)),
            );
        }
    }
    result.platforms = Some(platforms);
    result
}

/// Evaluates one policy for the digest `image` names.
async fn evaluate_digest<V: AuthorityVerifier>(
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
    let mut policy_inconclusive = false;
    if any_passed && let Some(cip) = &policy.policy {
        let verdict = match cip_config(verifier, cip, image).await {
            Ok(config) => {
                let document = policy_document(&authorities, cip, resource, config.as_ref());
                run(&cip.program, &document).await
            }
            Err(e) => {
                policy_inconclusive = e.inconclusive;
                Err(e.reason)
            }
        };
        match verdict {
            Ok(v) => {
                warnings.extend(v.warning);
                if !v.compliant {
                    policy_error = Some(v.error.unwrap_or_else(|| {
                        "the ClusterImagePolicy's policy is not compliant (isCompliant is false)"
                            .into()
                    }));
                }
            }
            Err(e) => policy_error = Some(e),
        }
    }
    PolicyResult {
        name: policy.name.clone(),
        mode: policy.mode,
        passed: any_passed && policy_error.is_none(),
        authorities,
        policy_error,
        policy_inconclusive,
        warnings,
        platforms: None,
    }
}

/// The image's config files when the CIP-level policy asks for them
/// (`fetchConfigFile`), else `None`.
async fn cip_config<V: AuthorityVerifier>(
    verifier: &V,
    cip: &CipPolicy,
    image: &ImageName,
) -> Result<Option<ConfigFiles>, ImageReadError> {
    if !cip.fetch_config_file {
        return Ok(None);
    }
    if image.digest.is_none() {
        return Err(ImageReadError {
            reason: format!("fetchConfigFile: {}", unpinned(image)),
            inconclusive: false,
        });
    }
    verifier.config_files(image).await.map(Some)
}

/// Why an image without a digest cannot be verified.
fn unpinned(image: &ImageName) -> String {
    format!(
        "image {} is not pinned to a digest; sigil verifies digests only (its /mutate webhook \
         pins tags, or write image@sha256:…)",
        image.original
    )
}

/// Evaluates one authority; returns its result and Rego warnings.
async fn evaluate_authority<V: AuthorityVerifier>(
    verifier: &V,
    authority: &CompiledAuthority,
    image: &ImageName,
) -> (AuthorityResult, Vec<String>) {
    let mut inconclusive = false;
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
        AuthorityKind::Key(_) | AuthorityKind::Keyless(_) | AuthorityKind::Notation(_) => {
            let kind = match authority.kind {
                AuthorityKind::Key(_) => "key",
                AuthorityKind::Notation(_) => "notation",
                _ => "keyless",
            };
            if image.digest.is_none() {
                (kind, Err(unpinned(image)), Vec::new())
            } else {
                let (outcome, warnings) = match verifier.verify(image, authority).await {
                    AuthorityOutcome::Failed(reason) => (Err(reason), Vec::new()),
                    AuthorityOutcome::Inconclusive(reason) => {
                        inconclusive = true;
                        (Err(reason), Vec::new())
                    }
                    AuthorityOutcome::Verified {
                        signatures,
                        attestations,
                        rejected,
                    } => check_verified(authority, signatures, attestations, &rejected).await,
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
            inconclusive,
        },
        warnings,
    )
}

/// Runs a policy on a document: Rego's verdict, or CUE's pass (a CUE
/// failure is the error). Both run on their own bounded pools (Rego in
/// worker processes, CUE on WebAssembly threads); this only waits.
async fn run(program: &PolicyProgram, document: &Document) -> Result<RegoVerdict, String> {
    match program {
        PolicyProgram::Rego(rego) => rego
            .evaluate(&document.json)
            .await
            .map_err(|e| e.to_string()),
        PolicyProgram::Cue(cue) => cue.evaluate(&document.bytes).await.map(|()| RegoVerdict {
            compliant: true,
            error: None,
            warning: None,
        }),
    }
}

/// Applies the authority's signature/attestation requirements to what verified.
async fn check_verified(
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
                ..AuthorityMatch::default()
            }),
            Vec::new(),
        );
    }
    let mut matched = BTreeMap::new();
    let mut predicate_types = BTreeMap::new();
    let mut warnings = Vec::new();
    for wanted in &authority.attestations {
        match check_attestation(wanted, &attestations, &mut warnings).await {
            Ok(passing) => {
                matched.insert(wanted.name.clone(), passing);
                predicate_types.insert(wanted.name.clone(), wanted.predicate_type_name.clone());
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
            predicate_types,
        }),
        warnings,
    )
}

/// Returns the statements of the wanted type that satisfy its policy, each
/// judged on the document policy-controller would build for it.
async fn check_attestation(
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
    let Some(program) = &wanted.policy else {
        return Ok(candidates.into_iter().cloned().collect());
    };
    let shape = StatementShape::for_predicate_type(&wanted.predicate_type_name);
    let mut first_error = None;
    let mut passing = Vec::new();
    for candidate in candidates {
        let document = match attestation_document(&candidate.statement, shape) {
            Ok(d) => d,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        match run(program, &document).await {
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
                first_error.get_or_insert(e);
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
