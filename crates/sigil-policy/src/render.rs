//! The one wording of a verdict. The webhook's denial and warnings, the
//! audit's report messages and `sigil policy test`/`sigil verify --policy`
//! all word an image's result through these functions, so the CLI prints
//! the very words a user got from the cluster: per policy
//! [`policy_failure`] and [`policy_warnings`], per image [`image_words`]
//! (what an image's result says, without its name), per object
//! [`denial`] and [`image_line`], and [`render`], which puts them together
//! for a set of images.

use crate::eval::{ImageResult, PolicyResult};
use crate::model::{Mode, NoMatchPolicy, Platforms};

/// Why an image no policy selects is denied (`noMatchPolicy: deny`).
pub const NO_MATCH_DENIED: &str = "no ClusterImagePolicy matches it and noMatchPolicy is deny; \
     add a policy whose images[].glob matches it";

/// The warning of an image no policy selects (`noMatchPolicy: warn`).
pub const NO_MATCH_WARNED: &str = "matches no ClusterImagePolicy (noMatchPolicy: warn)";

/// The admission answer for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionVerdict {
    /// Whether the object is admitted.
    pub allowed: bool,
    /// The denial message (only when denied).
    pub message: Option<String>,
    /// Admission warnings, one line each.
    pub warnings: Vec<String>,
}

/// What one image's result says, without the image's name: the reasons it
/// is denied (empty when admitted) and its warnings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageWords {
    /// One entry per enforcing policy that failed, or the no-match denial.
    pub reasons: Vec<String>,
    /// Warn-mode failures, policies' warnings, the no-match warning.
    pub warnings: Vec<String>,
}

/// A failed policy's reasons in one line: each failed authority, then the
/// policy's own error (`authority a (key): ...; policy: ...`). When the
/// policy's own check (Rego, CUE) failed, the authorities that passed are
/// named too: they are what that check saw. When the policy judged the
/// platforms of an index, each failing platform follows with its own
/// reasons (`platform linux/arm64 (sha256:…): authority a (key): ...`),
/// after the index's (`the index itself: ...`) for `namedOrEvery`.
fn reasons(policy: &PolicyResult) -> String {
    let Some(platforms) = &policy.platforms else {
        return digest_reasons(policy);
    };
    let mut parts = Vec::new();
    if platforms.rule == Platforms::NamedOrEvery {
        parts.push(format!(
            "the index itself: {}; and not every platform passed",
            digest_reasons(policy)
        ));
    }
    match &platforms.images {
        Err(e) => parts.push(format!("platforms: {}", e.reason)),
        Ok(images) => parts.extend(images.iter().filter(|i| !i.result.passed).map(|i| {
            format!(
                "platform {} ({}): {}",
                i.platform,
                i.digest,
                digest_reasons(&i.result)
            )
        })),
    }
    if parts.is_empty() {
        parts.push("no platform image passed".into());
    }
    parts.join("; ")
}

/// The reasons of one digest's judgement.
fn digest_reasons(policy: &PolicyResult) -> String {
    let mut parts: Vec<String> = policy
        .authorities
        .iter()
        .filter_map(|a| match &a.outcome {
            Err(why) => Some(format!("authority {} ({}): {why}", a.name, a.kind)),
            Ok(_) if policy.policy_error.is_some() => {
                Some(format!("authority {} ({}): passed", a.name, a.kind))
            }
            Ok(_) => None,
        })
        .collect();
    if let Some(e) = &policy.policy_error {
        parts.push(format!("policy: {e}"));
    }
    if parts.is_empty() {
        parts.push("no authority passed".into());
    }
    parts.join("; ")
}

/// A policy's failure (`policy p failed: ...`, `policy p (mode: warn)
/// failed: ...`, `policy p (mode: audit) failed: ...`), or `None` when it
/// passed.
pub fn policy_failure(policy: &PolicyResult) -> Option<String> {
    if policy.passed {
        return None;
    }
    Some(match policy.mode {
        Mode::Enforce => format!("policy {} failed: {}", policy.name, reasons(policy)),
        Mode::Warn | Mode::Audit => format!(
            "policy {} (mode: {}) failed: {}",
            policy.name,
            policy.mode.as_str(),
            reasons(policy)
        ),
    })
}

/// A policy's own warnings (Rego or CUE `warning`), as `policy p: ...`.
pub fn policy_warnings(policy: &PolicyResult) -> impl Iterator<Item = String> + '_ {
    policy
        .warnings
        .iter()
        .map(|w| format!("policy {}: {w}", policy.name))
}

/// What `result` says about its image at admission, without naming it.
/// `mode: audit` policies say nothing here: admission never hears of them
/// (their words are [`policy_failure`]'s, for the audit and the metrics).
pub fn image_words(result: &ImageResult) -> ImageWords {
    let mut words = ImageWords::default();
    match result.no_match {
        Some(NoMatchPolicy::Deny) => words.reasons.push(NO_MATCH_DENIED.into()),
        Some(NoMatchPolicy::Warn) => words.warnings.push(NO_MATCH_WARNED.into()),
        Some(NoMatchPolicy::Allow) | None => {}
    }
    for policy in result.policies.iter().filter(|p| p.mode.admits()) {
        words.warnings.extend(policy_warnings(policy));
        if let Some(failure) = policy_failure(policy) {
            match policy.mode {
                Mode::Enforce => words.reasons.push(failure),
                Mode::Warn | Mode::Audit => words.warnings.push(failure),
            }
        }
    }
    words
}

/// The first line of a denial: `sigil denied {object}: {failed} of
/// {total} image(s) failed verification`.
pub fn denial(object: &str, failed: usize, total: usize) -> String {
    format!("sigil denied {object}: {failed} of {total} image(s) failed verification")
}

/// One denied image's line under [`denial`]: `\n- image {image}{context}:
/// {reasons}`, the reasons joined by `; `; `context` is what the caller
/// knows besides (the webhook's ` (digest, container name)`).
pub fn image_line(image: &str, context: &str, reasons: &[String]) -> String {
    format!("\n- image {image}{context}: {}", reasons.join("; "))
}

/// An image's warning as an admission warning: `image {image}: {warning}`.
pub fn image_warning(image: &str, warning: &str) -> String {
    format!("image {image}: {warning}")
}

/// Combines the results of every image of `object` (e.g. `pod
/// default/web`) into the admission answer, worded as the webhook words it.
pub fn render(object: &str, results: &[ImageResult]) -> AdmissionVerdict {
    let mut lines = String::new();
    let mut failed = 0;
    let mut warnings = Vec::new();
    for result in results {
        let words = image_words(result);
        warnings.extend(
            words
                .warnings
                .iter()
                .map(|w| image_warning(&result.image, w)),
        );
        if !words.reasons.is_empty() {
            failed += 1;
            lines.push_str(&image_line(&result.image, "", &words.reasons));
        }
    }
    let allowed = results.iter().all(ImageResult::allowed);
    AdmissionVerdict {
        allowed,
        message: (!allowed).then(|| format!("{}{lines}", denial(object, failed, results.len()))),
        warnings,
    }
}
