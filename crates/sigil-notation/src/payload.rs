//! The signed payload: `{"targetArtifact": <OCI descriptor>}`. A signature
//! is for an image only when the descriptor's media type, digest and size
//! are the image manifest's own.

use serde::Deserialize;

/// An OCI descriptor, as far as a target is identified.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The manifest's media type.
    pub media_type: String,
    /// `sha256:<hex>` (or another algorithm).
    pub digest: String,
    /// The manifest's size in bytes.
    pub size: u64,
    /// Annotations the signer added (user metadata).
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl Descriptor {
    /// A descriptor of the given manifest.
    pub fn new(media_type: &str, digest: &str, size: u64) -> Self {
        Self {
            media_type: media_type.to_owned(),
            digest: digest.to_owned(),
            size,
            annotations: Default::default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Payload {
    target_artifact: Descriptor,
}

/// Why the payload does not name the image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Not the payload document.
    #[error("signed payload is not a Notary Project payload document ({0})")]
    Malformed(String),
    /// A descriptor field differs from the image's.
    #[error(
        "the signature is for another artifact: its target {field} is `{signed}`, the image's is `{actual}`"
    )]
    Mismatch {
        /// `digest`, `size` or `mediaType`.
        field: &'static str,
        /// The signed value.
        signed: String,
        /// The image's value.
        actual: String,
    },
}

/// Reads the payload's target descriptor.
pub fn target(payload: &[u8]) -> Result<Descriptor, PayloadError> {
    serde_json::from_slice::<Payload>(payload)
        .map(|p| p.target_artifact)
        .map_err(|e| PayloadError::Malformed(e.to_string()))
}

/// Checks that the signed target is `image`.
pub fn check_target(signed: &Descriptor, image: &Descriptor) -> Result<(), PayloadError> {
    let fields = [
        ("digest", signed.digest.clone(), image.digest.clone()),
        ("size", signed.size.to_string(), image.size.to_string()),
        (
            "mediaType",
            signed.media_type.clone(),
            image.media_type.clone(),
        ),
    ];
    for (field, signed, actual) in fields {
        if signed != actual {
            return Err(PayloadError::Mismatch {
                field,
                signed,
                actual,
            });
        }
    }
    Ok(())
}
