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
}

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
