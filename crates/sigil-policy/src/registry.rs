//! The production [`AuthorityVerifier`]: maps a compiled authority onto the
//! image verifier (OCI discovery of both formats plus bundle verification)
//! and its trust roots, so the webhook and `sigil policy test` evaluate
//! policies through exactly the same code.

use crate::eval::{AuthorityOutcome, AuthorityVerifier, ImageReadError};
use crate::glob::ImageName;
use crate::model::{
    AuthorityKind, CaTrust, CompiledAuthority, KeyMaterial, TlogPolicy, VerifiedAttestation,
    VerifiedSignature,
};
use futures_util::future::join_all;
use sigil_registry::config::{ConfigFiles, config_files};
use sigil_registry::image::{ImagePolicy, VerifyImageOptions, verify_image};
use sigil_registry::platforms::{PlatformImage, platform_images};
use sigil_registry::revocation_fetch::RevocationFetcher;
use sigil_registry::{
    Digest, DiscoveryOptions, ImageRef, MaterialScope, RegistryClient, Repository, Want,
};
use sigil_verifier::trust::{CertificateAuthority, TrustedRoot, ValidFor};
use sigil_verifier::verify::{SignedContent, SignerPolicy, VerificationPolicy};
use sigil_verifier::x509::Certificate;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Verifies authorities against registries with the trust roots it holds.
pub struct RegistryVerifier {
    client: RegistryClient,
    default_root: TrustedRoot,
    trust_roots: BTreeMap<String, TrustedRoot>,
    material: Option<MaterialScope>,
    revocation: Option<Arc<RevocationFetcher>>,
}

impl RegistryVerifier {
    /// A verifier using `client`, `default_root` for authorities that name
    /// no TrustRoot (the cluster's default: a TrustRoot marked default, else
    /// the Sigstore public-good root), and `trust_roots` by TrustRoot name.
    pub fn new(
        client: RegistryClient,
        default_root: TrustedRoot,
        trust_roots: BTreeMap<String, TrustedRoot>,
    ) -> Self {
        Self {
            client,
            default_root,
            trust_roots,
            material: None,
            revocation: None,
        }
    }

    /// Fetches the CRLs and OCSP answers Notary Project signatures' revocation
    /// checks read through `fetcher`; without one, a certificate that names
    /// a CRL or OCSP responder has an unknown revocation status.
    pub fn with_revocation(mut self, fetcher: Arc<RevocationFetcher>) -> Self {
        self.revocation = Some(fetcher);
        self
    }

    /// Shares discovered signature material through `scope` (whose
    /// credentials identity must be that of `client`).
    pub fn with_material(mut self, scope: MaterialScope) -> Self {
        self.material = Some(scope);
        self
    }

    fn named(&self, name: &str) -> Result<&TrustedRoot, String> {
        self.trust_roots.get(name).ok_or_else(|| {
            format!("TrustRoot {name} is not loaded; create it or check the trustRootRef")
        })
    }

    /// The trust root an authority verifies against: its CA source, with the
    /// logs and timestamp authorities of the TrustRoots it names for those.
    fn root_for(&self, a: &CompiledAuthority) -> Result<TrustedRoot, String> {
        let mut root = match &a.kind {
            AuthorityKind::Keyless(k) => match &k.trust {
                CaTrust::Default => self.default_root.clone(),
                CaTrust::TrustRoot(name) => self.named(name)?.clone(),
                CaTrust::CaCert(chain) => {
                    let mut root = self.default_root.clone();
                    let chain = chain
                        .iter()
                        .map(|der| Certificate::from_der(der).map_err(|e| e.to_string()))
                        .collect::<Result<Vec<_>, _>>()?;
                    // The CA is trusted while every certificate of its chain is valid.
                    let valid_for = ValidFor {
                        start: chain.iter().map(|c| c.not_before).max(),
                        end: chain.iter().map(|c| c.not_after).min(),
                    };
                    root.certificate_authorities = vec![CertificateAuthority {
                        uri: "ca-cert".into(),
                        name: "keyless.ca-cert".into(),
                        chain,
                        valid_for,
                    }];
                    root
                }
                CaTrust::Unusable(reason) => return Err(reason.clone()),
                CaTrust::CaCertSecret(secret) => {
                    return Err(format!("the ca-cert in {secret} is not resolved yet"));
                }
            },
            _ => self.default_root.clone(),
        };
        if let TlogPolicy::Required {
            trust_root: Some(name),
        } = &a.tlog
        {
            root.tlogs = self.named(name)?.tlogs.clone();
        }
        if let Some(name) = &a.timestamp_trust_root {
            root.timestamp_authorities = self.named(name)?.timestamp_authorities.clone();
        }
        Ok(root)
    }

    async fn verify_authority(
        &self,
        image: &ImageName,
        a: &CompiledAuthority,
    ) -> Result<AuthorityOutcome, String> {
        let (signer, key_hash) = match &a.kind {
            AuthorityKind::Key(k) => match &k.key {
                KeyMaterial::Resolved(key) => (SignerPolicy::Key(key.clone()), k.hash),
                KeyMaterial::Secret(secret) => {
                    return Err(format!("the key in {secret} is not resolved yet"));
                }
            },
            AuthorityKind::Keyless(k) => (
                SignerPolicy::Keyless {
                    identities: k.identities.clone(),
                    require_sct: k.require_sct,
                },
                None,
            ),
            AuthorityKind::Static(_) => return Err("static authorities verify nothing".into()),
            AuthorityKind::Notation(n) => {
                let (repo, digest) = pinned_reference(image).map_err(|e| e.reason)?;
                let session = self.client.session();
                return crate::notation::verify_notation(
                    &session,
                    &repo,
                    &digest,
                    n,
                    self.revocation.as_deref(),
                    time::OffsetDateTime::now_utc(),
                )
                .await;
            }
        };
        let root = self.root_for(a)?;
        // A keyless authority whose trust root lists no transparency log (a
        // private instance, such as GitHub's for private repositories) takes
        // its signing time from the RFC 3161 timestamps it names; the
        // verifier still refuses this against a root that lists a log.
        let timestamp_only = matches!(a.kind, AuthorityKind::Keyless(_))
            && a.timestamp_trust_root.is_some()
            && root.tlogs.is_empty();
        let verification = VerificationPolicy {
            signer,
            require_tlog: a.tlog != TlogPolicy::Disabled && !timestamp_only,
            key_hash,
        };
        let reference = image
            .pinned()
            .ok_or_else(|| format!("image {} has no digest", image.original))?;
        let mut discoveries = Vec::new();
        if a.sources.is_empty() {
            discoveries.push(DiscoveryOptions::default());
        }
        for s in &a.sources {
            discoveries.push(DiscoveryOptions {
                signature_repository: s
                    .oci
                    .as_deref()
                    .map(Repository::parse)
                    .transpose()
                    .map_err(|e| e.to_string())?,
                tag_prefix: s.tag_prefix.clone().unwrap_or_default(),
            });
        }
        let mut wants = Vec::new();
        if a.attestations.is_empty() {
            wants.push(Want::Signatures);
        }
        for att in &a.attestations {
            let want = Want::Attestations(att.predicate_type.clone());
            if !wants.contains(&want) {
                wants.push(want);
            }
        }
        // Each (source, want) pair reads the registry on its own: they run
        // together (each verification bounded per host by the client's
        // limits and slots) and are read back in order, so the outcome and
        // its words do not depend on which answered first.
        let pairs: Vec<(&Want, ImagePolicy, VerifyImageOptions)> = discoveries
            .iter()
            .flat_map(|discovery| {
                wants.iter().map(|want| {
                    let policy = ImagePolicy {
                        verification: verification.clone(),
                        want: want.clone(),
                    };
                    let options = VerifyImageOptions {
                        discovery: discovery.clone(),
                        now: None,
                        material: self.material.clone(),
                    };
                    (want, policy, options)
                })
            })
            .collect();
        let verdicts = join_all(pairs.iter().map(|(_, policy, options)| {
            verify_image(&reference, policy, &root, &self.client, options)
        }))
        .await;
        let mut signatures = Vec::new();
        let mut attestations = Vec::new();
        let mut rejected = Vec::new();
        let mut inconclusive = false;
        for ((want, _, _), verdict) in pairs.iter().zip(verdicts) {
            match verdict {
                Ok(verdict) => {
                    rejected.extend(verdict.rejected.iter().map(ToString::to_string));
                    for c in verdict.verified {
                        let id = c.location.clone();
                        let identity = c.verified.identity.clone();
                        match (*want, c.verified.content) {
                            (Want::Signatures, _) => {
                                signatures.push(VerifiedSignature { id, identity });
                            }
                            (Want::Attestations(_), SignedContent::Dsse { statement, .. }) => {
                                attestations.push(VerifiedAttestation {
                                    id,
                                    identity,
                                    statement: *statement,
                                });
                            }
                            (Want::Attestations(_), SignedContent::MessageSignature) => {}
                        }
                    }
                }
                Err(e) => {
                    inconclusive |= e.is_inconclusive();
                    rejected.push(e.to_string());
                }
            }
        }
        if signatures.is_empty() && attestations.is_empty() {
            if inconclusive {
                return Ok(AuthorityOutcome::Inconclusive(rejected.join("; ")));
            }
            return Err(rejected.join("; "));
        }
        Ok(AuthorityOutcome::Verified {
            signatures,
            attestations,
            rejected,
        })
    }
}

impl AuthorityVerifier for RegistryVerifier {
    async fn verify(&self, image: &ImageName, authority: &CompiledAuthority) -> AuthorityOutcome {
        self.verify_authority(image, authority)
            .await
            .unwrap_or_else(AuthorityOutcome::Failed)
    }

    async fn config_files(&self, image: &ImageName) -> Result<ConfigFiles, ImageReadError> {
        let (repository, digest) = pinned_reference(image)?;
        let session = self.client.session();
        config_files(&session, &repository, &digest)
            .await
            .map_err(|e| ImageReadError {
                reason: e.to_string(),
                inconclusive: e.is_inconclusive(),
            })
    }

    async fn platform_images(
        &self,
        image: &ImageName,
    ) -> Result<Option<Vec<PlatformImage>>, ImageReadError> {
        let (repository, digest) = pinned_reference(image)?;
        let session = self.client.session();
        platform_images(&session, &repository, &digest)
            .await
            .map_err(|e| ImageReadError {
                reason: e.to_string(),
                inconclusive: e.is_inconclusive(),
            })
    }
}

/// The repository and digest of an image that carries one.
fn pinned_reference(image: &ImageName) -> Result<(Repository, Digest), ImageReadError> {
    let unusable = |reason: String| ImageReadError {
        reason,
        inconclusive: false,
    };
    let reference = image
        .pinned()
        .ok_or_else(|| unusable(format!("image {} has no digest", image.original)))?;
    let parsed = ImageRef::parse(&reference).map_err(|e| unusable(e.to_string()))?;
    let digest = parsed
        .digest
        .ok_or_else(|| unusable(format!("image {reference} has no digest")))?;
    Ok((parsed.repository, digest))
}
