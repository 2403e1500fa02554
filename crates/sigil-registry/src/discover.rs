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

use futures_util::future::{join, join_all};
use moka::future::Cache;

use super::client::{Descriptor, Manifest, RegistryError, Session};
use super::reference::{Digest, Repository};
use super::shared_cache::SharedCache;
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
    /// Round trips on the critical path: the longest chain of registry
    /// requests of which each waited on the one before (a referrer's
    /// manifest on the referrers list, its blob on the manifest). An
    /// unsigned image costs 1 (2 where the registry has no referrers API
    /// and the fallback tag is asked after its 404), a legacy signature 2
    /// (tag, layer), a bundle referrer 3 (list, manifest, blob). A request
    /// counts once however many exchanges it took (auth challenge and
    /// token, 429 waits, the pages of one referrers list).
    pub round_trips: u32,
}

impl Discovery {
    /// Appends `part`'s findings after this one's (its round trips are the
    /// caller's to combine).
    fn append(&mut self, part: Discovery) {
        self.candidates.extend(part.candidates);
        self.looked_in.extend(part.looked_in);
        self.skipped.extend(part.skipped);
        self.errors.extend(part.errors);
    }
}

fn is_bundle_type(t: &str) -> bool {
    BUNDLE_MEDIA_TYPES.contains(&t)
}

/// How discovery's independent requests run. Through a mirror rule each
/// read goes place by place and leaves a trail in the order reads were
/// made, which the denial quotes; there requests run one after another so
/// the words stay the same from one admission to the next. Elsewhere they
/// run together, bounded per host by
/// [`Limits::max_session_requests_per_host`](crate::Limits::max_session_requests_per_host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    Together,
    InTurn,
}

impl Pace {
    /// Runs `parts`, answering in their order whatever order they finish in.
    async fn all<F: Future>(self, parts: Vec<F>) -> Vec<F::Output> {
        match self {
            Self::Together => join_all(parts).await,
            Self::InTurn => {
                let mut out = Vec::with_capacity(parts.len());
                for part in parts {
                    out.push(part.await);
                }
                out
            }
        }
    }

    /// The critical path of parts run in this pace, given each one's.
    fn chain(self, parts: impl IntoIterator<Item = u32>) -> u32 {
        match self {
            Self::Together => parts.into_iter().max().unwrap_or(0),
            Self::InTurn => parts.into_iter().sum(),
        }
    }
}

/// Discovers candidates for `digest` of `image_repo`.
pub async fn discover(
    session: &Session<'_>,
    image_repo: &Repository,
    digest: &Digest,
    want: &Want,
    options: &DiscoveryOptions,
) -> Discovery {
    discover_sharing(session, image_repo, digest, want, options, None).await
}

/// The referrers API's answer about one image.
type ListAnswer = Result<Option<Vec<Descriptor>>, RegistryError>;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ListKey {
    credentials: String,
    repository: String,
    digest: Digest,
}

/// Referrers lists being fetched, shared by the discoveries of one image
/// (for several wants, several policies) that ask at the same time.
#[derive(Clone, Copy)]
struct SharedLists<'a> {
    flights: &'a Cache<ListKey, ()>,
    credentials: &'a str,
}

impl SharedLists<'_> {
    /// The referrers of `digest`: fetched through `session`, or the answer
    /// of a fetch for the same image already under way. The answer travels
    /// as moka's error so that it reaches the waiting callers and is never
    /// kept: a list asked later is asked again.
    async fn referrers(
        self,
        session: &Session<'_>,
        repo: &Repository,
        digest: &Digest,
    ) -> ListAnswer {
        let key = ListKey {
            credentials: self.credentials.to_string(),
            repository: repo.to_string(),
            digest: *digest,
        };
        let fetch = async { Err::<(), ListAnswer>(session.referrers(repo, digest).await) };
        match self.flights.try_get_with(key, fetch).await {
            Err(answer) => (*answer).clone(),
            // Never reached: the fetch never answers Ok, so nothing is kept.
            Ok(()) => session.referrers(repo, digest).await,
        }
    }
}

async fn discover_sharing(
    session: &Session<'_>,
    image_repo: &Repository,
    digest: &Digest,
    want: &Want,
    options: &DiscoveryOptions,
    shared: Option<SharedLists<'_>>,
) -> Discovery {
    let repo = options.signature_repository.as_ref().unwrap_or(image_repo);
    let pace = if session.mirrored(repo) {
        Pace::InTurn
    } else {
        Pace::Together
    };
    // Through mirrors the list's reads leave a trail in the session that
    // asked; another session waiting for its answer would lose it.
    let shared = shared.filter(|_| pace == Pace::Together);
    let suffix = match want {
        Want::Signatures => "sig",
        Want::Attestations(_) => "att",
    };
    let tag = format!("{}{}.{suffix}", options.tag_prefix, digest.tag_stem());
    // The referrers and the legacy tag wait on nothing: both start at once.
    // Each on the heap: joined inline, the two state machines made one
    // future large enough to overflow a runtime worker's stack in debug
    // builds (a webhook judging six images at once aborted).
    let referrers = Box::pin(discover_referrers(
        session, repo, digest, want, pace, shared,
    ));
    let legacy = Box::pin(discover_legacy(session, repo, &tag, want, pace));
    let (referrers, legacy) = match pace {
        Pace::Together => join(referrers, legacy).await,
        Pace::InTurn => (referrers.await, legacy.await),
    };
    let mut out = Discovery {
        round_trips: pace.chain([referrers.round_trips, legacy.round_trips]),
        ..Discovery::default()
    };
    out.append(referrers);
    out.append(legacy);
    // Through mirrors: each place looked at, for the denial's words.
    out.looked_in.extend(session.mirror_trail(repo));
    session.client().observe_discovery(out.round_trips);
    out
}

/// The referrers list, or the `sha256-<hex>` fallback tag's index where
/// the registry has no referrers API, with the round trips it took.
///
/// The fallback tag is asked only after the API's 404, not beside it: most
/// registries have the API, and a manifest GET the answer does not need
/// would cost every discovery a request (Docker Hub counts manifest GETs
/// as pulls against its rate limit).
async fn referrer_list(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
    shared: Option<SharedLists<'_>>,
    out: &mut Discovery,
) -> Option<(Vec<Descriptor>, CandidateFormat)> {
    out.round_trips = 1;
    let answer = match shared {
        Some(lists) => lists.referrers(session, repo, digest).await,
        None => session.referrers(repo, digest).await,
    };
    match answer {
        Ok(Some(entries)) => {
            out.looked_in
                .push(format!("referrers API of {repo}@{digest}"));
            Some((entries, CandidateFormat::BundleReferrer))
        }
        Ok(None) => {
            let tag = digest.tag_stem();
            out.looked_in
                .push(format!("referrers fallback tag {repo}:{tag}"));
            out.round_trips = 2;
            match session.manifest(repo, &tag, None).await {
                Ok(Some((_, _, index))) => {
                    Some((index.manifests, CandidateFormat::BundleFallbackTag))
                }
                Ok(None) => None,
                Err(e) => {
                    out.errors.push((format!("{repo}:{tag}"), e));
                    None
                }
            }
        }
        Err(e) => {
            out.errors
                .push((format!("referrers API of {repo}@{digest}"), e));
            None
        }
    }
}

async fn discover_referrers(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
    want: &Want,
    pace: Pace,
    shared: Option<SharedLists<'_>>,
) -> Discovery {
    let limits = session.client().limits().clone();
    let mut out = Discovery::default();
    let Some((entries, format)) = referrer_list(session, repo, digest, shared, &mut out).await
    else {
        return out;
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
        return out;
    }
    let parts = entries
        .iter()
        .map(|entry| referrer_part(session, repo, digest, entry, want, format))
        .collect();
    let parts = pace.all(parts).await;
    let listed = out.round_trips;
    out.round_trips = listed + pace.chain(parts.iter().map(|p| p.round_trips));
    for part in parts {
        out.append(part);
    }
    out
}

/// What one listed referrer holds, if it is one discovery wants.
async fn referrer_part(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
    entry: &Descriptor,
    want: &Want,
    format: CandidateFormat,
) -> Discovery {
    let mut out = Discovery::default();
    // Filter here rather than with `?artifactType=`: the API takes one
    // value per request and sigil accepts several spellings; some
    // registries also report an empty artifactType, so those are fetched.
    let at = entry.artifact_type.as_deref().unwrap_or("");
    if !(at.is_empty() || is_bundle_type(at) || at == COSIGN_SIG_ARTIFACT_TYPE) {
        return out;
    }
    if let Some(p) = entry.annotations.get(PREDICATE_TYPE_ANNOTATION)
        && p != want.predicate()
    {
        out.skipped.push(format!("{repo}@{} ({p})", entry.digest));
        return out;
    }
    let location = format!("{repo}@{}", entry.digest);
    fetch_referrer(
        session, repo, digest, entry, want, format, location, &mut out,
    )
    .await;
    out
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
    out.round_trips = 1;
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
        let pace = if session.mirrored(repo) {
            Pace::InTurn
        } else {
            Pace::Together
        };
        let layers = layer_candidates(
            session,
            repo,
            &manifest,
            want,
            CandidateFormat::LegacySignature,
            &location,
            pace,
        )
        .await;
        out.round_trips += layers.round_trips;
        out.append(layers);
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
    out.round_trips += 1;
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
    pace: Pace,
) -> Discovery {
    let mut out = Discovery {
        round_trips: 1,
        ..Discovery::default()
    };
    out.looked_in.push(format!("{repo}:{tag}"));
    let manifest = match session.manifest(repo, tag, None).await {
        Ok(Some((_, _, m))) => m,
        Ok(None) => return out,
        Err(e) => {
            out.errors.push((format!("{repo}:{tag}"), e));
            return out;
        }
    };
    let format = match want {
        Want::Signatures => CandidateFormat::LegacySignature,
        Want::Attestations(_) => CandidateFormat::LegacyAttestation,
    };
    let layers = layer_candidates(
        session,
        repo,
        &manifest,
        want,
        format,
        &format!("{repo}:{tag}"),
        pace,
    )
    .await;
    out.round_trips += layers.round_trips;
    out.append(layers);
    out
}

/// The candidates among `manifest`'s layers, their blobs fetched in `pace`.
async fn layer_candidates(
    session: &Session<'_>,
    repo: &Repository,
    manifest: &Manifest,
    want: &Want,
    format: CandidateFormat,
    location: &str,
    pace: Pace,
) -> Discovery {
    let mut out = Discovery::default();
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
        return out;
    }
    let parts = manifest
        .layers
        .iter()
        .enumerate()
        .map(|(i, layer)| layer_part(session, repo, i, layer, want, format, location))
        .collect();
    let parts = pace.all(parts).await;
    out.round_trips = pace.chain(parts.iter().map(|p| p.round_trips));
    for part in parts {
        out.append(part);
    }
    out
}

/// Layer `i` of a signature manifest at `location`, if it is a candidate.
async fn layer_part(
    session: &Session<'_>,
    repo: &Repository,
    i: usize,
    layer: &Descriptor,
    want: &Want,
    format: CandidateFormat,
    location: &str,
) -> Discovery {
    let mut out = Discovery::default();
    let media = match want {
        Want::Signatures => SIMPLE_SIGNING_MEDIA_TYPE,
        Want::Attestations(_) => DSSE_MEDIA_TYPE,
    };
    if layer.media_type != media {
        return out;
    }
    if let (Want::Attestations(p), Some(lp)) = (want, layer.annotations.get("predicateType"))
        && lp != p
    {
        out.skipped.push(format!("{location} layer {i} ({lp})"));
        return out;
    }
    let loc = format!("{location} layer {i} ({})", layer.digest);
    out.round_trips = 1;
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
    out
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

/// What one cached discovery is for: the credential set it was read with,
/// the signature repository, the image digest, the wanted kind and the tag
/// prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MaterialKey {
    pub(crate) credentials: String,
    pub(crate) repository: String,
    pub(crate) digest: Digest,
    pub(crate) want: Want,
    pub(crate) tag_prefix: String,
}

impl MaterialKey {
    /// The key of `want` for `digest` in `repository`, read with the
    /// credentials identified by `credentials_id`.
    pub fn new(
        credentials_id: &str,
        repository: &Repository,
        digest: &Digest,
        want: &Want,
        tag_prefix: &str,
    ) -> Self {
        Self {
            credentials: credentials_id.to_string(),
            repository: repository.to_string(),
            digest: *digest,
            want: want.clone(),
            tag_prefix: tag_prefix.to_string(),
        }
    }
}

/// A kept discovery and how long it is kept: the cache's TTL for one
/// fetched from the registry, what is left of it for one read from the
/// shared cache (so that material never outlives one TTL after its fetch).
#[derive(Debug, Clone)]
struct Kept {
    found: Discovery,
    ttl: Duration,
}

struct KeptFor;

impl moka::Expiry<MaterialKey, Kept> for KeptFor {
    fn expire_after_create(
        &self,
        _key: &MaterialKey,
        value: &Kept,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// Discovery results per (credential set, signature repository, digest,
/// wanted kind, tag prefix), kept for a short TTL: new signatures can appear,
/// so nothing is kept long. Concurrent misses for one key share one fetch.
/// A discovery that hit a registry error or an unusable candidate is shared
/// with the callers waiting for it but not kept, and so is one that found
/// nothing: a signature pushed after a denial counts as soon as the
/// verdict cache forgets the denial (its negative TTL), not a material TTL
/// later. Bounded by `capacity`. Discoveries of one image for several
/// wanted kinds that run at the same time share one referrers-list request.
///
/// With a [`SharedCache`], a local miss asks it first (within its bounded
/// wait) and a discovery fetched from the registry that this cache keeps
/// is written there too, with the same TTL.
pub struct MaterialCache {
    entries: Cache<MaterialKey, Kept>,
    /// Referrers lists in flight (nothing kept), see `SharedLists`.
    lists: Cache<ListKey, ()>,
    ttl: Duration,
    shared: Option<SharedCache>,
}

/// Referrers lists one process may be fetching for different images at
/// once and still share; nothing stays in it after the answer.
const LIST_FLIGHTS: u64 = 1024;

impl fmt::Debug for MaterialCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaterialCache")
            .field("ttl", &self.ttl)
            .field("shared", &self.shared)
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
                .expire_after(KeptFor)
                .build(),
            lists: Cache::new(LIST_FLIGHTS),
            ttl,
            shared: None,
        }
    }

    /// A cache keeping discoveries `ttl` whose material adds up to at most
    /// `max_bytes` (each entry also counts a fixed overhead): a registry
    /// serving large bundles fills it sooner, never past the bound.
    pub fn with_byte_budget(ttl: Duration, max_bytes: u64) -> Self {
        Self {
            entries: Cache::builder()
                .max_capacity(max_bytes.max(1))
                .weigher(|_key, kept: &Kept| {
                    u32::try_from(kept.found.material_bytes() + ENTRY_OVERHEAD).unwrap_or(u32::MAX)
                })
                .expire_after(KeptFor)
                .build(),
            lists: Cache::new(LIST_FLIGHTS),
            ttl,
            shared: None,
        }
    }

    /// This cache in front of `shared`, which replicas and the audit share.
    pub fn with_shared(mut self, shared: SharedCache) -> Self {
        self.shared = Some(shared);
        self
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
        let key = MaterialKey::new(credentials_id, repo, digest, want, &options.tag_prefix);
        let ttl = self.ttl;
        // A transient result travels as the error: moka hands it to the
        // callers already waiting and does not keep it.
        let fetch = async {
            if let Some(shared) = &self.shared
                && let Some((found, left)) = shared.get(&key, ttl).await
            {
                return Ok(Kept { found, ttl: left });
            }
            let shared = SharedLists {
                flights: &self.lists,
                credentials: credentials_id,
            };
            let found =
                discover_sharing(session, image_repo, digest, want, options, Some(shared)).await;
            let transient = !found.errors.is_empty()
                || found.candidates.is_empty()
                || found
                    .candidates
                    .iter()
                    .any(|c| matches!(c.material, Material::Unusable(_)));
            if transient {
                return Err(found);
            }
            if let Some(shared) = &self.shared {
                shared.put(&key, &found, ttl);
            }
            Ok(Kept { found, ttl })
        };
        match self.entries.try_get_with(key.clone(), fetch).await {
            Ok(kept) => kept.found,
            Err(transient) => (*transient).clone(),
        }
    }
}
