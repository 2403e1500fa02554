//! Discovery of an image's signatures and attestations: OCI 1.1 referrers
//! (API, or the `sha256-<hex>` tag-schema fallback) holding Sigstore bundles,
//! and cosign's legacy `sha256-<hex>.sig` / `.att` tags.
//!
//! Discovery only fetches (with every body's digest checked); it decides
//! nothing about trust. A candidate that cannot be fetched or is malformed is
//! kept, marked unusable with the reason, so the final verdict can list it.
//!
//! [`MaterialCache`] keeps what discovery fetched per credential set,
//! repository and digest for a short time, so several policies or a policy
//! change do not fetch the same signatures again.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use moka::future::Cache;

use super::client::{Descriptor, Manifest, RegistryError, Session};
use super::reference::{Digest, Repository};
use sigil_verifier::bundle::BUNDLE_MEDIA_TYPES;

/// cosign's predicate type for a plain image signature in the new format.
pub const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// Layer media type of a legacy simple-signing payload.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// Layer media type of a legacy attestation (DSSE envelope).
pub const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";
/// Artifact type of cosign v2's experimental OCI 1.1 legacy-payload referrers.
pub const COSIGN_SIG_ARTIFACT_TYPE: &str = "application/vnd.dev.cosign.artifact.sig.v1+json";
/// Annotation carrying a referrer's predicate type (informational; the signed statement decides).
pub const PREDICATE_TYPE_ANNOTATION: &str = "dev.sigstore.bundle.predicateType";

/// What discovery looks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Want {
    /// Signatures: predicate `https://sigstore.dev/cosign/sign/v1` bundles and `.sig` layers.
    Signatures,
    /// Attestations of this predicate type: bundles and `.att` layers.
    Attestations(String),
}

impl Want {
    fn predicate(&self) -> &str {
        match self {
            Self::Signatures => COSIGN_SIGN_PREDICATE,
            Self::Attestations(p) => p,
        }
    }
}

/// Where signatures are looked for, as policy-controller's `source`.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryOptions {
    /// Repository holding the signatures (`source.oci`), when not the image's own.
    pub signature_repository: Option<Repository>,
    /// Prefix of the legacy tags (`tagPrefix`).
    pub tag_prefix: String,
}

/// How a candidate was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidateFormat {
    /// A Sigstore bundle found through the referrers API.
    BundleReferrer,
    /// A Sigstore bundle found through the `sha256-<hex>` fallback tag.
    BundleFallbackTag,
    /// A legacy simple-signing layer (`.sig` tag or a cosign v2 experimental referrer).
    LegacySignature,
    /// A legacy DSSE attestation layer (`.att` tag).
    LegacyAttestation,
}

impl fmt::Display for CandidateFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BundleReferrer => "sigstore bundle (OCI referrer)",
            Self::BundleFallbackTag => "sigstore bundle (referrers fallback tag)",
            Self::LegacySignature => "cosign legacy signature",
            Self::LegacyAttestation => "cosign legacy attestation",
        })
    }
}

/// The fetched material of a candidate.
#[derive(Debug, Clone)]
pub enum Material {
    /// A Sigstore bundle (JSON).
    Bundle(Vec<u8>),
    /// A simple-signing payload with its layer annotations.
    SimpleSigning {
        /// The payload bytes, exactly as signed.
        payload: Vec<u8>,
        /// The layer's annotations (signature, certificate, chain, bundle, timestamp).
        annotations: BTreeMap<String, String>,
    },
    /// A DSSE envelope (JSON) with its layer annotations.
    Dsse {
        /// The envelope JSON.
        envelope: Vec<u8>,
        /// The layer's annotations.
        annotations: BTreeMap<String, String>,
    },
    /// Could not be fetched or is not of the expected shape.
    Unusable(String),
}

/// One signature or attestation found for the image.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// How it was stored.
    pub format: CandidateFormat,
    /// Where: `registry/repo@sha256:...` of the referrer, or `registry/repo:tag` and layer.
    pub location: String,
    /// The material.
    pub material: Material,
}

/// Everything discovery saw.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// Candidates of the wanted kind.
    pub candidates: Vec<Candidate>,
    /// Where discovery looked, for "no signature found" messages.
    pub looked_in: Vec<String>,
    /// Referrers skipped because their annotations name another predicate type.
    pub skipped: Vec<String>,
    /// Places that could not be read (the rest of discovery went on).
    pub errors: Vec<(String, RegistryError)>,
}

fn is_bundle_type(t: &str) -> bool {
    BUNDLE_MEDIA_TYPES.contains(&t)
}

/// Discovers candidates for `digest` of `image_repo`.
pub async fn discover(
    session: &Session<'_>,
    image_repo: &Repository,
    digest: &Digest,
    want: &Want,
    options: &DiscoveryOptions,
) -> Discovery {
    let repo = options.signature_repository.as_ref().unwrap_or(image_repo);
    let mut out = Discovery::default();
    discover_referrers(session, repo, digest, want, &mut out).await;
    let suffix = match want {
        Want::Signatures => "sig",
        Want::Attestations(_) => "att",
    };
    let tag = format!("{}{}.{suffix}", options.tag_prefix, digest.tag_stem());
    discover_legacy(session, repo, &tag, want, &mut out).await;
    // Through mirrors: each place looked at, for the denial's words.
    out.looked_in.extend(session.mirror_trail(repo));
    out
}

async fn discover_referrers(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
    want: &Want,
    out: &mut Discovery,
) {
    let limits = session.client().limits().clone();
    let (entries, format) = match session.referrers(repo, digest).await {
        Ok(Some(entries)) => {
            out.looked_in
                .push(format!("referrers API of {repo}@{digest}"));
            (entries, CandidateFormat::BundleReferrer)
        }
        Ok(None) => {
            let tag = digest.tag_stem();
            out.looked_in
                .push(format!("referrers fallback tag {repo}:{tag}"));
            match session.manifest(repo, &tag, None).await {
                Ok(Some((_, _, index))) => (index.manifests, CandidateFormat::BundleFallbackTag),
                Ok(None) => return,
                Err(e) => {
                    out.errors.push((format!("{repo}:{tag}"), e));
                    return;
                }
            }
        }
        Err(e) => {
            out.errors
                .push((format!("referrers API of {repo}@{digest}"), e));
            return;
        }
    };
    if entries.len() > limits.max_referrers {
        out.errors.push((
            format!("{repo}:{}", digest.tag_stem()),
            RegistryError::TooMany {
                what: "referrers index",
                subject: format!("{repo}@{digest}"),
                limit: limits.max_referrers,
            },
        ));
        return;
    }
    for entry in entries {
        // Filter here rather than with `?artifactType=`: the API takes one
        // value per request and sigil accepts several spellings; some
        // registries also report an empty artifactType, so those are fetched.
        let at = entry.artifact_type.as_deref().unwrap_or("");
        if !(at.is_empty() || is_bundle_type(at) || at == COSIGN_SIG_ARTIFACT_TYPE) {
            continue;
        }
        if let Some(p) = entry.annotations.get(PREDICATE_TYPE_ANNOTATION)
            && p != want.predicate()
        {
            out.skipped.push(format!("{repo}@{} ({p})", entry.digest));
            continue;
        }
        let location = format!("{repo}@{}", entry.digest);
        fetch_referrer(session, repo, digest, &entry, want, format, location, out).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn fetch_referrer(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
    entry: &Descriptor,
    want: &Want,
    format: CandidateFormat,
    location: String,
    out: &mut Discovery,
) {
    let unusable = |format, location: &str, why: String| Candidate {
        format,
        location: location.to_string(),
        material: Material::Unusable(why),
    };
    let expected = match Digest::parse(&entry.digest) {
        Ok(d) => d,
        Err(e) => {
            out.candidates
                .push(unusable(format, &location, e.to_string()));
            return;
        }
    };
    let manifest = match session.manifest(repo, &entry.digest, Some(expected)).await {
        Ok(Some((_, _, m))) => m,
        Ok(None) => {
            out.candidates.push(unusable(
                format,
                &location,
                "referrer manifest is listed but missing (404)".into(),
            ));
            return;
        }
        Err(e) => {
            out.candidates
                .push(unusable(format, &location, e.to_string()));
            return;
        }
    };
    // The referrer must say it is about this image, whatever the listing said.
    match manifest.subject.as_ref().map(|s| s.digest.as_str()) {
        Some(s) if s == digest.to_string() => {}
        other => {
            out.candidates.push(unusable(
                format,
                &location,
                format!(
                    "referrer subject is {}, not the image {digest}",
                    other.unwrap_or("missing")
                ),
            ));
            return;
        }
    }
    if let Some(p) = manifest.annotations.get(PREDICATE_TYPE_ANNOTATION)
        && p != want.predicate()
    {
        out.skipped.push(format!("{location} ({p})"));
        return;
    }
    let legacy = is_legacy_referrer(&manifest);
    if legacy {
        if *want != Want::Signatures {
            return;
        }
        layer_candidates(
            session,
            repo,
            &manifest,
            want,
            CandidateFormat::LegacySignature,
            &location,
            out,
        )
        .await;
        return;
    }
    if !is_bundle_manifest(&manifest) {
        // Not a Sigstore artifact (an SBOM, say): not a candidate.
        return;
    }
    let Some(layer) = manifest
        .layers
        .iter()
        .find(|l| is_bundle_type(&l.media_type))
    else {
        out.candidates.push(unusable(
            format,
            &location,
            "bundle referrer has no bundle layer".into(),
        ));
        return;
    };
    let material = match session.blob(repo, layer).await {
        Ok(b) => Material::Bundle(b),
        Err(e) => Material::Unusable(format!("bundle layer {}: {e}", layer.digest)),
    };
    out.candidates.push(Candidate {
        format,
        location,
        material,
    });
}

fn is_bundle_manifest(m: &Manifest) -> bool {
    m.artifact_type.as_deref().is_some_and(is_bundle_type)
        || m.config
            .as_ref()
            .is_some_and(|c| is_bundle_type(&c.media_type))
        || m.layers.iter().any(|l| is_bundle_type(&l.media_type))
}

fn is_legacy_referrer(m: &Manifest) -> bool {
    m.artifact_type.as_deref() == Some(COSIGN_SIG_ARTIFACT_TYPE)
        || m.config
            .as_ref()
            .is_some_and(|c| c.media_type == COSIGN_SIG_ARTIFACT_TYPE)
}

async fn discover_legacy(
    session: &Session<'_>,
    repo: &Repository,
    tag: &str,
    want: &Want,
    out: &mut Discovery,
) {
    out.looked_in.push(format!("{repo}:{tag}"));
    let manifest = match session.manifest(repo, tag, None).await {
        Ok(Some((_, _, m))) => m,
        Ok(None) => return,
        Err(e) => {
            out.errors.push((format!("{repo}:{tag}"), e));
            return;
        }
    };
    let format = match want {
        Want::Signatures => CandidateFormat::LegacySignature,
        Want::Attestations(_) => CandidateFormat::LegacyAttestation,
    };
    layer_candidates(
        session,
        repo,
        &manifest,
        want,
        format,
        &format!("{repo}:{tag}"),
        out,
    )
    .await;
}

async fn layer_candidates(
    session: &Session<'_>,
    repo: &Repository,
    manifest: &Manifest,
    want: &Want,
    format: CandidateFormat,
    location: &str,
    out: &mut Discovery,
) {
    let limit = session.client().limits().max_referrers;
    if manifest.layers.len() > limit {
        out.errors.push((
            location.to_string(),
            RegistryError::TooMany {
                what: "signature layers",
                subject: location.to_string(),
                limit,
            },
        ));
        return;
    }
    let media = match want {
        Want::Signatures => SIMPLE_SIGNING_MEDIA_TYPE,
        Want::Attestations(_) => DSSE_MEDIA_TYPE,
    };
    for (i, layer) in manifest.layers.iter().enumerate() {
        if layer.media_type != media {
            continue;
        }
        if let (Want::Attestations(p), Some(lp)) = (want, layer.annotations.get("predicateType"))
            && lp != p
        {
            out.skipped.push(format!("{location} layer {i} ({lp})"));
            continue;
        }
        let loc = format!("{location} layer {i} ({})", layer.digest);
        let material = match session.blob(repo, layer).await {
            Ok(bytes) => match want {
                Want::Signatures => Material::SimpleSigning {
                    payload: bytes,
                    annotations: layer.annotations.clone(),
                },
                Want::Attestations(_) => Material::Dsse {
                    envelope: bytes,
                    annotations: layer.annotations.clone(),
                },
            },
            Err(e) => Material::Unusable(e.to_string()),
        };
        out.candidates.push(Candidate {
            format,
            location: loc,
            material,
        });
    }
}

/// What a cached discovery costs beyond its material (keys, strings, maps).
const ENTRY_OVERHEAD: usize = 512;

impl Discovery {
    /// Bytes of fetched material the discovery holds.
    pub fn material_bytes(&self) -> usize {
        self.candidates
            .iter()
            .map(|c| match &c.material {
                Material::Bundle(b) => b.len(),
                Material::SimpleSigning {
                    payload,
                    annotations,
                } => {
                    payload.len()
                        + annotations
                            .iter()
                            .map(|(k, v)| k.len() + v.len())
                            .sum::<usize>()
                }
                Material::Dsse {
                    envelope,
                    annotations,
                } => {
                    envelope.len()
                        + annotations
                            .iter()
                            .map(|(k, v)| k.len() + v.len())
                            .sum::<usize>()
                }
                Material::Unusable(why) => why.len(),
            })
            .sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct MaterialKey {
    credentials: String,
    repository: String,
    digest: Digest,
    want: Want,
    tag_prefix: String,
}

/// Discovery results per (credential set, signature repository, digest,
/// wanted kind, tag prefix), kept for a short TTL: new signatures can appear,
/// so nothing is kept long. Concurrent misses for one key share one fetch.
/// A discovery that hit a registry error or an unusable candidate is shared
/// with the callers waiting for it but not kept, and so is one that found
/// nothing: a signature pushed after a denial counts as soon as the
/// verdict cache forgets the denial (its negative TTL), not a material TTL
/// later. Bounded by `capacity`.
pub struct MaterialCache {
    entries: Cache<MaterialKey, Discovery>,
}

impl fmt::Debug for MaterialCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaterialCache")
            .field("ttl", &self.entries.policy().time_to_live())
            .finish_non_exhaustive()
    }
}

/// A [`MaterialCache`] and the identity of the credentials a client reads
/// with, so material read with one credential set never serves another.
#[derive(Debug, Clone)]
pub struct MaterialScope {
    /// The shared cache.
    pub cache: Arc<MaterialCache>,
    /// A stable identity of the client's credentials (never the credentials).
    pub credentials_id: String,
}

impl MaterialCache {
    /// A cache keeping discoveries `ttl`, at most `capacity` of them.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        let capacity = u64::try_from(capacity.max(1)).unwrap_or(u64::MAX);
        Self {
            entries: Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                .build(),
        }
    }

    /// A cache keeping discoveries `ttl` whose material adds up to at most
    /// `max_bytes` (each entry also counts a fixed overhead): a registry
    /// serving large bundles fills it sooner, never past the bound.
    pub fn with_byte_budget(ttl: Duration, max_bytes: u64) -> Self {
        Self {
            entries: Cache::builder()
                .max_capacity(max_bytes.max(1))
                .weigher(|_key, found: &Discovery| {
                    u32::try_from(found.material_bytes() + ENTRY_OVERHEAD).unwrap_or(u32::MAX)
                })
                .time_to_live(ttl)
                .build(),
        }
    }

    /// [`discover`] through the cache, for a client whose credentials are
    /// identified by `credentials_id`.
    pub async fn discover(
        &self,
        credentials_id: &str,
        session: &Session<'_>,
        image_repo: &Repository,
        digest: &Digest,
        want: &Want,
        options: &DiscoveryOptions,
    ) -> Discovery {
        let repo = options.signature_repository.as_ref().unwrap_or(image_repo);
        let key = MaterialKey {
            credentials: credentials_id.to_string(),
            repository: repo.to_string(),
            digest: *digest,
            want: want.clone(),
            tag_prefix: options.tag_prefix.clone(),
        };
        // A transient result travels as the error: moka hands it to the
        // callers already waiting and does not keep it.
        let fetch = async {
            let found = discover(session, image_repo, digest, want, options).await;
            let transient = !found.errors.is_empty()
                || found.candidates.is_empty()
                || found
                    .candidates
                    .iter()
                    .any(|c| matches!(c.material, Material::Unusable(_)));
            if transient { Err(found) } else { Ok(found) }
        };
        match self.entries.try_get_with(key, fetch).await {
            Ok(found) => found,
            Err(transient) => (*transient).clone(),
        }
    }
}
