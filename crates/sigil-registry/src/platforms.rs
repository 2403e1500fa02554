//! The platform images of a multi-platform image (an OCI image index or a
//! Docker manifest list), for policies that require every platform to be
//! signed (`platforms: every`, sigil's extension).
//!
//! A container runtime pulls the entry of an index whose `platform` matches
//! its node, so that entry's descriptor names the platform a denial reports.
//! BuildKit's attestation manifests (`vnd.docker.reference.type:
//! attestation-manifest`, platform `unknown/unknown`) are listed in the
//! index but never run: they are left out. An index inside an index is
//! refused (runtimes do not resolve one either), so is an index that lists
//! no image at all: "every platform passed" must never hold vacuously.
//!
//! Only the index is fetched, by digest and checked against it, within the
//! session's deadline and byte budget; the entries' own manifests are what
//! the caller then verifies, by their digests.

use crate::client::{Descriptor, Manifest, RegistryError, Session};
use crate::config::{INDEX_TYPES, MAX_PLATFORMS, Shape, shape};
use crate::reference::{Digest, Repository};

/// The annotation BuildKit writes on the index entries of its attestation
/// manifests, and the value it gives them.
const REFERENCE_TYPE: (&str, &str) = ("vnd.docker.reference.type", "attestation-manifest");

/// One runnable entry of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformImage {
    /// The entry's platform as runtimes and `crane` write it
    /// (`linux/arm/v7`), `unknown` when the entry names none.
    pub platform: String,
    /// The entry's manifest digest.
    pub digest: Digest,
}

/// Why the platform images of an index could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum PlatformsError {
    /// The registry failed or served something that does not check out.
    #[error("reading the platforms of {image}: {error}")]
    Registry {
        /// The image (`repository@digest`).
        image: String,
        /// What went wrong.
        #[source]
        error: RegistryError,
    },
    /// The image is not in the registry.
    #[error("reading the platforms of {image}: the registry has no manifest with that digest")]
    NotFound {
        /// The image.
        image: String,
    },
    /// The index lists more images than sigil verifies one by one.
    #[error(
        "reading the platforms of {image}: its index lists {count} images, more than the {limit} \
         sigil verifies one by one; require the index's own signature (platforms: named)"
    )]
    TooMany {
        /// The image.
        image: String,
        /// Runnable entries listed.
        count: usize,
        /// [`MAX_PLATFORMS`].
        limit: usize,
    },
    /// An entry is itself an index.
    #[error(
        "reading the platforms of {image}: entry {digest} is an index inside the index; sigil \
         verifies the images of one level, as runtimes pull them"
    )]
    Nested {
        /// The image.
        image: String,
        /// The nested index.
        digest: String,
    },
    /// An entry's digest does not parse.
    #[error("reading the platforms of {image}: entry `{digest}` has an unusable digest: {reason}")]
    BadEntry {
        /// The image.
        image: String,
        /// The entry's digest as written.
        digest: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The index lists no runnable image.
    #[error("reading the platforms of {image}: its index lists no image a runtime could pull")]
    Empty {
        /// The image.
        image: String,
    },
}

impl PlatformsError {
    /// Whether the failure says nothing about the image (a registry outage,
    /// see [`RegistryError::is_inconclusive`]).
    pub fn is_inconclusive(&self) -> bool {
        matches!(self, Self::Registry { error, .. } if error.is_inconclusive())
    }
}

/// The platform images of `repo@digest`: `None` when it is not an index (an
/// image manifest, or anything else, is judged by its own digest).
pub async fn platform_images(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
) -> Result<Option<Vec<PlatformImage>>, PlatformsError> {
    let image = format!("{repo}@{digest}");
    match session
        .manifest(repo, &digest.to_string(), Some(*digest))
        .await
    {
        Ok(Some((_, _, manifest))) => entries_of(&manifest, &image),
        Ok(None) => Err(PlatformsError::NotFound { image }),
        Err(error) => Err(PlatformsError::Registry { image, error }),
    }
}

/// The runnable entries of `manifest` (the manifest of `image`), or `None`
/// when it is not an index.
pub fn entries_of(
    manifest: &Manifest,
    image: &str,
) -> Result<Option<Vec<PlatformImage>>, PlatformsError> {
    let Shape::Index(entries) = shape(manifest) else {
        return Ok(None);
    };
    let runnable: Vec<&Descriptor> = entries
        .iter()
        .filter(|e| {
            e.annotations.get(REFERENCE_TYPE.0).map(String::as_str) != Some(REFERENCE_TYPE.1)
        })
        .collect();
    if runnable.is_empty() {
        return Err(PlatformsError::Empty {
            image: image.to_owned(),
        });
    }
    if runnable.len() > MAX_PLATFORMS {
        return Err(PlatformsError::TooMany {
            image: image.to_owned(),
            count: runnable.len(),
            limit: MAX_PLATFORMS,
        });
    }
    runnable
        .into_iter()
        .map(|entry| {
            if INDEX_TYPES.contains(&entry.media_type.as_str()) {
                return Err(PlatformsError::Nested {
                    image: image.to_owned(),
                    digest: entry.digest.clone(),
                });
            }
            let digest = Digest::parse(&entry.digest).map_err(|e| PlatformsError::BadEntry {
                image: image.to_owned(),
                digest: entry.digest.chars().take(100).collect(),
                reason: e.to_string(),
            })?;
            Ok(PlatformImage {
                platform: entry
                    .platform
                    .as_ref()
                    .map_or_else(|| "unknown".to_owned(), ToString::to_string),
                digest,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

    fn manifest(v: Value) -> Manifest {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("test manifest: {e}"))
    }

    fn index(entries: Value) -> Manifest {
        manifest(json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": entries,
        }))
    }

    fn listed(m: &Manifest) -> Vec<(String, String)> {
        match entries_of(m, "r.example/app@sha256:…") {
            Ok(Some(images)) => images
                .into_iter()
                .map(|i| (i.platform, i.digest.to_string()))
                .collect(),
            other => panic!("expected platform images, got {other:?}"),
        }
    }

    #[test]
    fn an_index_lists_its_platforms_as_runtimes_name_them() {
        let m = index(json!([
            {"mediaType": MANIFEST, "digest": D1, "size": 1,
             "platform": {"os": "linux", "architecture": "amd64"}},
            {"mediaType": MANIFEST, "digest": D2, "size": 1,
             "platform": {"os": "linux", "architecture": "arm", "variant": "v7"}},
            {"mediaType": MANIFEST, "digest": D2, "size": 1,
             "platform": {"os": "windows", "architecture": "amd64", "os.version": "10.0.20348.2113"}},
            {"mediaType": MANIFEST, "digest": D1, "size": 1},
        ]));
        assert_eq!(
            listed(&m),
            [
                ("linux/amd64".to_owned(), D1.to_owned()),
                ("linux/arm/v7".to_owned(), D2.to_owned()),
                ("windows/amd64:10.0.20348.2113".to_owned(), D2.to_owned()),
                ("unknown".to_owned(), D1.to_owned()),
            ]
        );
    }

    #[test]
    fn buildkits_attestation_manifests_are_not_platforms() {
        let m = index(json!([
            {"mediaType": MANIFEST, "digest": D1, "size": 1,
             "platform": {"os": "linux", "architecture": "arm64"}},
            {"mediaType": MANIFEST, "digest": D2, "size": 1,
             "platform": {"os": "unknown", "architecture": "unknown"},
             "annotations": {"vnd.docker.reference.type": "attestation-manifest",
                             "vnd.docker.reference.digest": D1}},
        ]));
        assert_eq!(listed(&m), [("linux/arm64".to_owned(), D1.to_owned())]);
    }

    #[test]
    fn an_image_manifest_is_not_an_index() {
        let m = manifest(json!({
            "schemaVersion": 2, "mediaType": MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": D1, "size": 1},
            "layers": [],
        }));
        assert!(matches!(entries_of(&m, "i"), Ok(None)));
    }

    #[test]
    fn indexes_every_platform_could_not_be_checked_for_are_refused() {
        let only_attestations = index(json!([
            {"mediaType": MANIFEST, "digest": D2, "size": 1,
             "annotations": {"vnd.docker.reference.type": "attestation-manifest"}},
        ]));
        for m in [only_attestations, index(json!([]))] {
            assert!(
                matches!(entries_of(&m, "i"), Err(PlatformsError::Empty { .. })),
                "{m:?}"
            );
        }
        let nested = index(json!([
            {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": D1, "size": 1},
        ]));
        let err = entries_of(&nested, "r.example/app@x").unwrap_err();
        assert!(matches!(err, PlatformsError::Nested { .. }));
        assert!(err.to_string().contains(D1), "{err}");
        let bad = index(json!([{"mediaType": MANIFEST, "digest": "md5:abc", "size": 1}]));
        assert!(matches!(
            entries_of(&bad, "i"),
            Err(PlatformsError::BadEntry { .. })
        ));
        let many: Vec<Value> = (0..=MAX_PLATFORMS)
            .map(|_| json!({"mediaType": MANIFEST, "digest": D1, "size": 1}))
            .collect();
        let err = entries_of(&index(Value::Array(many)), "i").unwrap_err();
        assert!(
            matches!(err, PlatformsError::TooMany { count, .. } if count == MAX_PLATFORMS + 1),
            "{err}"
        );
        assert!(!err.is_inconclusive());
    }
}
