//! Verifying an image: resolve its digest, discover every signature (or
//! attestation) candidate in both cosign formats, verify each one, and
//! aggregate. One failing candidate never hides a passing one; when none
//! passes, the error lists every candidate with its format, location and
//! why it failed; when none exists, it says where discovery looked.

use std::fmt;

use time::OffsetDateTime;

use crate::discover::discover;
use crate::legacy::{verify_legacy_attestation, verify_simple_signing};
use crate::{
    CandidateFormat, Digest, DiscoveryOptions, ImageRef, Material, MaterialScope, ReferenceError,
    RegistryClient, RegistryError, Want,
};
use sigil_verifier::bundle::Bundle;
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{
    Artifact, SignedContent, VerificationPolicy, VerifiedBundle, verify_bundle,
};

/// What an image must carry.
#[derive(Debug, Clone)]
pub struct ImagePolicy {
    /// Who must have signed, and how.
    pub verification: VerificationPolicy,
    /// A signature, or an attestation of a predicate type.
    pub want: Want,
}

/// Per-call options.
#[derive(Debug, Clone, Default)]
pub struct VerifyImageOptions {
    /// Where signatures are stored (`source.oci`, `tagPrefix`).
    pub discovery: DiscoveryOptions,
    /// The current time (defaults to the clock); only bounds log times from the future.
    pub now: Option<OffsetDateTime>,
    /// Where discovered material is shared between verifications, if anywhere.
    pub material: Option<MaterialScope>,
}

/// A candidate that verified.
#[derive(Debug, Clone)]
pub struct VerifiedCandidate {
    /// How it was stored.
    pub format: CandidateFormat,
    /// Where it was found.
    pub location: String,
    /// What the core established.
    pub verified: VerifiedBundle,
}

/// A candidate that did not verify, or a place that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedCandidate {
    /// How it was stored (`None` for a place that could not be read).
    pub format: Option<CandidateFormat>,
    /// Where it was found.
    pub location: String,
    /// A stable label.
    pub label: &'static str,
    /// Why it failed.
    pub reason: String,
}

/// The longest reason kept for one rejected candidate. Parser errors may
/// quote what a registry served; 128 candidates quoting a megabyte each
/// would make a denial (and the memory holding it) as large as the bodies.
const MAX_REASON_BYTES: usize = 512;

fn capped(mut reason: String) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let mut end = MAX_REASON_BYTES;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let cut = reason.len() - end;
    reason.truncate(end);
    reason.push_str(&format!("… ({cut} more bytes)"));
    reason
}

impl fmt::Display for RejectedCandidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.format {
            Some(format) => write!(f, "{format} at {}: {}", self.location, self.reason),
            None => write!(f, "could not read {}: {}", self.location, self.reason),
        }
    }
}

/// A verified image.
#[derive(Debug, Clone)]
pub struct ImageVerdict {
    /// The reference as normalized.
    pub image: String,
    /// The verified digest.
    pub digest: Digest,
    /// Every candidate that verified (at least one).
    pub verified: Vec<VerifiedCandidate>,
    /// Candidates that did not (for the record).
    pub rejected: Vec<RejectedCandidate>,
    /// Registry round trips made, tag resolution and tokens included.
    pub round_trips: u32,
}

fn list(items: &[RejectedCandidate]) -> String {
    items.iter().map(|r| format!("\n  - {r}")).collect()
}

/// Why an image was not verified. `reason()` gives a stable label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The reference does not parse.
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    /// The tag does not exist.
    #[error("image {image} not found in the registry (404); check the name and tag")]
    NotFound {
        /// The image.
        image: String,
    },
    /// The registry failed before any candidate could be examined.
    #[error("{image}: {error}")]
    Registry {
        /// The image.
        image: String,
        /// The failure.
        error: RegistryError,
        /// Round trips made.
        round_trips: u32,
    },
    /// Nothing was found.
    #[error("no {what} found for {image}@{digest} (looked in {}){}", looked_in.join(", "), if skipped.is_empty() { String::new() } else { format!("; ignored other predicate types: {}", skipped.join(", ")) })]
    NoSignature {
        /// The image.
        image: String,
        /// Its digest.
        digest: Digest,
        /// "signature" or "attestation of type ...".
        what: String,
        /// Where discovery looked.
        looked_in: Vec<String>,
        /// Referrers of other predicate types.
        skipped: Vec<String>,
        /// Round trips made.
        round_trips: u32,
    },
    /// Candidates exist, none verified.
    #[error("no {what} of {image}@{digest} verified ({} candidate(s)):{}", rejected.len(), list(rejected))]
    NothingVerified {
        /// The image.
        image: String,
        /// Its digest.
        digest: Digest,
        /// "signature" or "attestation of type ...".
        what: String,
        /// Every candidate with the reason.
        rejected: Vec<RejectedCandidate>,
        /// Round trips made.
        round_trips: u32,
    },
}

impl ImageError {
    /// A stable, short label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Reference(_) => "bad-reference",
            Self::NotFound { .. } => "image-not-found",
            Self::Registry { error, .. } => error.reason(),
            Self::NoSignature { .. } => "no-signature",
            Self::NothingVerified { .. } => "not-verified",
        }
    }

    /// Whether the failure says nothing about the image's signatures: the
    /// registry failed before any candidate was examined, or nothing
    /// verified while some place discovery had to read could not be read
    /// (the signature that would verify may be there). See
    /// [`RegistryError::is_inconclusive`].
    pub fn is_inconclusive(&self) -> bool {
        match self {
            Self::Registry { error, .. } => error.is_inconclusive(),
            Self::NothingVerified { rejected, .. } => rejected
                .iter()
                .any(|r| r.format.is_none() && INCONCLUSIVE_LABELS.contains(&r.label)),
            Self::Reference(_) | Self::NotFound { .. } | Self::NoSignature { .. } => false,
        }
    }
}

/// The [`RegistryError::reason`] labels of inconclusive failures, as a
/// place that could not be read carries them.
const INCONCLUSIVE_LABELS: &[&str] = &[
    "registry-timeout",
    "deadline",
    "registry-unreachable",
    "registry-denied",
    "registry-status",
    "truncated-body",
    "memory-budget",
    "token",
];

fn describe(want: &Want) -> String {
    match want {
        Want::Signatures => "signature".into(),
        Want::Attestations(p) => format!("attestation of type {p}"),
    }
}

/// Checks that a verified bundle is what `want` asks for.
fn check_content(v: &VerifiedBundle, want: &Want) -> Result<(), (&'static str, String)> {
    let wanted = match want {
        Want::Signatures => crate::discover::COSIGN_SIGN_PREDICATE,
        Want::Attestations(p) => p.as_str(),
    };
    match &v.content {
        SignedContent::Dsse { statement, .. } if statement.predicate_type == wanted => Ok(()),
        SignedContent::Dsse { statement, .. } => Err((
            "predicate-type",
            format!(
                "signed statement has predicate type {}, not {wanted}",
                statement.predicate_type
            ),
        )),
        SignedContent::MessageSignature => Err((
            "not-an-image-signature",
            "bundle holds a message signature, not an in-toto statement about the image".into(),
        )),
    }
}

/// Verifies `reference` against `policy` with material from `client`.
pub async fn verify_image(
    reference: &str,
    policy: &ImagePolicy,
    root: &TrustedRoot,
    client: &RegistryClient,
    options: &VerifyImageOptions,
) -> Result<ImageVerdict, ImageError> {
    let image_ref = ImageRef::parse(reference)?;
    // Messages name the image by repository and tag; the digest follows it.
    let image = match &image_ref.tag {
        Some(tag) => format!("{}:{tag}", image_ref.repository),
        None => image_ref.repository.to_string(),
    };
    let session = client.session();
    let registry_err = |error, session: &crate::Session<'_>| ImageError::Registry {
        image: image.clone(),
        error,
        round_trips: session.round_trips(),
    };
    let digest = match (&image_ref.digest, &image_ref.tag) {
        (Some(d), _) => *d,
        (None, Some(tag)) => match session.resolve_tag(&image_ref.repository, tag).await {
            Ok(Some(d)) => d,
            Ok(None) => return Err(ImageError::NotFound { image }),
            Err(e) => return Err(registry_err(e, &session)),
        },
        (None, None) => return Err(ImageError::NotFound { image }),
    };

    let found = match &options.material {
        Some(m) => {
            m.cache
                .discover(
                    &m.credentials_id,
                    &session,
                    &image_ref.repository,
                    &digest,
                    &policy.want,
                    &options.discovery,
                )
                .await
        }
        None => {
            discover(
                &session,
                &image_ref.repository,
                &digest,
                &policy.want,
                &options.discovery,
            )
            .await
        }
    };
    if found.candidates.is_empty() {
        if let Some((_, error)) = found.errors.into_iter().next() {
            return Err(registry_err(error, &session));
        }
        return Err(ImageError::NoSignature {
            image,
            digest,
            what: describe(&policy.want),
            looked_in: found.looked_in,
            skipped: found.skipped,
            round_trips: session.round_trips(),
        });
    }

    let now = options.now.unwrap_or_else(OffsetDateTime::now_utc);
    let mut verified = Vec::new();
    let mut rejected: Vec<RejectedCandidate> = found
        .errors
        .into_iter()
        .map(|(location, e)| RejectedCandidate {
            format: None,
            location,
            label: e.reason(),
            reason: capped(e.to_string()),
        })
        .collect();
    for c in found.candidates {
        let outcome = match &c.material {
            Material::Unusable(why) => Err(("unusable", why.clone())),
            Material::Bundle(json) => Bundle::from_json(json)
                .map_err(|e| ("bad-bundle", e.to_string()))
                .and_then(|b| {
                    verify_bundle(
                        &b,
                        Artifact::Sha256(digest.bytes()),
                        &policy.verification,
                        root,
                        now,
                    )
                    .map_err(|e| (e.reason(), e.to_string()))
                })
                .and_then(|v| check_content(&v, &policy.want).map(|()| v)),
            Material::SimpleSigning {
                payload,
                annotations,
            } => verify_simple_signing(
                payload,
                annotations,
                &digest,
                &policy.verification,
                root,
                now,
            )
            .map_err(|e| (e.reason(), e.to_string())),
            Material::Dsse {
                envelope,
                annotations,
            } => verify_legacy_attestation(
                envelope,
                annotations,
                &digest,
                &policy.verification,
                root,
                now,
            )
            .map_err(|e| (e.reason(), e.to_string()))
            .and_then(|v| check_content(&v, &policy.want).map(|()| v)),
        };
        match outcome {
            Ok(v) => verified.push(VerifiedCandidate {
                format: c.format,
                location: c.location,
                verified: v,
            }),
            Err((label, reason)) => rejected.push(RejectedCandidate {
                format: Some(c.format),
                location: c.location,
                label,
                reason: capped(reason),
            }),
        }
    }
    if verified.is_empty() {
        return Err(ImageError::NothingVerified {
            image,
            digest,
            what: describe(&policy.want),
            rejected,
            round_trips: session.round_trips(),
        });
    }
    Ok(ImageVerdict {
        image,
        digest,
        verified,
        rejected,
        round_trips: session.round_trips(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing, clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use crate::egress::{AddressClass, AddressRefused};

    fn every_registry_error() -> Vec<RegistryError> {
        let url = || "https://r.example/v2/x/manifests/y".to_string();
        vec![
            RegistryError::Timeout {
                url: url(),
                after: Duration::from_secs(1),
            },
            RegistryError::Deadline {
                url: url(),
                deadline: Duration::from_secs(1),
            },
            RegistryError::Connect {
                url: url(),
                reason: "refused".into(),
            },
            RegistryError::Denied {
                url: url(),
                status: 401,
                hint: "log in".into(),
            },
            RegistryError::Status {
                url: url(),
                status: 503,
            },
            RegistryError::MemoryBudget {
                url: url(),
                scope: "from all registries",
                limit: 1,
            },
            RegistryError::SessionBudget {
                url: url(),
                limit: 1,
            },
            RegistryError::TooLarge {
                url: url(),
                what: "manifest",
                limit: 1,
            },
            RegistryError::DigestMismatch {
                url: url(),
                expected: "a".into(),
                found: "b".into(),
            },
            RegistryError::Body {
                url: url(),
                reason: "cut".into(),
            },
            RegistryError::Redirects {
                url: url(),
                limit: 5,
            },
            RegistryError::TooMany {
                what: "referrers",
                subject: "x".into(),
                limit: 1,
            },
            RegistryError::TooManyPages {
                subject: "x".into(),
                limit: 1,
            },
            RegistryError::Json {
                url: url(),
                what: "manifest",
                reason: "eof".into(),
            },
            RegistryError::Token {
                realm: url(),
                reason: "500".into(),
            },
            RegistryError::CredentialHelper {
                host: "r.example".into(),
                helper: "desktop".into(),
            },
            RegistryError::Url {
                url: url(),
                reason: "bad".into(),
            },
            RegistryError::ForbiddenRegistry {
                host: "r.example".into(),
                reason: "no policy".into(),
            },
            RegistryError::ForbiddenAddress {
                url: url(),
                refused: AddressRefused {
                    host: "r.example".into(),
                    address: std::net::IpAddr::from([169, 254, 169, 254]),
                    class: AddressClass::Metadata,
                },
            },
        ]
    }

    #[test]
    fn an_unreadable_place_is_inconclusive_exactly_when_its_registry_error_is() {
        let digest = Digest::parse(&format!("sha256:{}", "a".repeat(64))).unwrap();
        for error in every_registry_error() {
            let place = RejectedCandidate {
                format: None,
                location: "r.example/x:sha256-a.sig".into(),
                label: error.reason(),
                reason: error.to_string(),
            };
            let unread = ImageError::NothingVerified {
                image: "r.example/x".into(),
                digest,
                what: "signature".into(),
                rejected: vec![place],
                round_trips: 1,
            };
            assert_eq!(
                unread.is_inconclusive(),
                error.is_inconclusive(),
                "{}",
                error.reason()
            );
            let failed = ImageError::Registry {
                image: "r.example/x".into(),
                error: error.clone(),
                round_trips: 1,
            };
            assert_eq!(failed.is_inconclusive(), error.is_inconclusive());
        }
    }

    #[test]
    fn outages_are_inconclusive_and_wrong_content_or_sigils_own_refusals_are_not() {
        let by_reason: std::collections::BTreeMap<&str, bool> = every_registry_error()
            .iter()
            .map(|e| (e.reason(), e.is_inconclusive()))
            .collect();
        for outage in [
            "registry-unreachable",
            "registry-timeout",
            "registry-status",
        ] {
            assert!(by_reason[outage], "{outage}");
        }
        for answer in [
            "bad-json",
            "content-digest-mismatch",
            "forbidden-address",
            "forbidden-registry",
        ] {
            assert!(!by_reason[answer], "{answer}");
        }
    }

    #[test]
    fn a_candidate_that_failed_verification_is_not_inconclusive() {
        let digest = Digest::parse(&format!("sha256:{}", "b".repeat(64))).unwrap();
        let rejected = ImageError::NothingVerified {
            image: "r.example/x".into(),
            digest,
            what: "signature".into(),
            rejected: vec![RejectedCandidate {
                format: Some(CandidateFormat::BundleReferrer),
                location: "r.example/x@sha256:c".into(),
                label: "registry-status",
                reason: "a bundle whose text happens to read like an outage".into(),
            }],
            round_trips: 1,
        };
        assert!(!rejected.is_inconclusive());
        let none = ImageError::NoSignature {
            image: "r.example/x".into(),
            digest,
            what: "signature".into(),
            looked_in: vec![],
            skipped: vec![],
            round_trips: 1,
        };
        assert!(!none.is_inconclusive());
    }
}
