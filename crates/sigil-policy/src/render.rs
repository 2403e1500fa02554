//! Rendering of image results as the admission answer: allow or deny, the
//! denial message that names the object, each failing image, each policy and
//! authority tried and why it failed, and the warnings (warn-mode failures,
//! Rego warnings, `noMatchPolicy: warn`).

use std::fmt::Write as _;

use crate::eval::{ImageResult, PolicyResult};
use crate::model::{Mode, NoMatchPolicy};

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

/// Combines the results of every image of `object` (e.g. `deployment
/// default/web`) into the admission answer.
pub fn render(object: &str, results: &[ImageResult]) -> AdmissionVerdict {
    let mut denial = String::new();
    let mut warnings = Vec::new();
    for image in results {
        match image.no_match {
            Some(NoMatchPolicy::Deny) => {
                let _ = write!(
                    denial,
                    "\n- image {}: no ClusterImagePolicy matches it and noMatchPolicy is deny; \
                     add a policy whose images[].glob matches it",
                    image.image
                );
            }
            Some(NoMatchPolicy::Warn) => warnings.push(format!(
                "image {} matches no ClusterImagePolicy (noMatchPolicy: warn)",
                image.image
            )),
            Some(NoMatchPolicy::Allow) | None => {}
        }
        for policy in &image.policies {
            warnings.extend(
                policy
                    .warnings
                    .iter()
                    .map(|w| format!("image {}: policy {}: {w}", image.image, policy.name)),
            );
            if policy.passed {
                continue;
            }
            match policy.mode {
                Mode::Enforce => {
                    let _ = write!(
                        denial,
                        "\n- image {}: policy {} failed:{}",
                        image.image,
                        policy.name,
                        reasons(policy, "\n    ")
                    );
                }
                Mode::Warn => warnings.push(format!(
                    "image {}: policy {} (mode: warn) failed:{}",
                    image.image,
                    policy.name,
                    reasons(policy, " ")
                )),
            }
        }
    }
    let allowed = results.iter().all(ImageResult::allowed);
    AdmissionVerdict {
        allowed,
        message: (!allowed).then(|| format!("sigil denied {object}:{denial}")),
        warnings,
    }
}

/// The failure reasons of a policy, each on its own `sep`-prefixed line.
fn reasons(policy: &PolicyResult, sep: &str) -> String {
    let mut out = String::new();
    for a in &policy.authorities {
        match &a.outcome {
            Err(reason) => {
                let _ = write!(out, "{sep}authority {} ({}): {reason}", a.name, a.kind);
            }
            Ok(_) if policy.policy_error.is_some() => {
                let _ = write!(out, "{sep}authority {} ({}): passed", a.name, a.kind);
            }
            Ok(_) => {}
        }
    }
    if let Some(e) = &policy.policy_error {
        let _ = write!(out, "{sep}policy: {e}");
    }
    out
}
