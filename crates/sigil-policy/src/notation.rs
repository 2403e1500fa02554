//! A `notation:` authority judged against a registry: the image's Notary
//! Project signatures found through the verifier's registry session
//! (`sigil_registry::notation_discover`), their revocation answers fetched
//! under the egress rules, and each envelope judged by
//! `sigil_notation::verify` under the trust policy statement that applies to
//! the image's repository. One signature that verifies passes the authority.

use sigil_notation::payload::Descriptor;
use sigil_notation::policy::{Check, Level};
use sigil_notation::revocation::{Evidence, Request};
use sigil_notation::verify::{Context, revocation_requests, verify};
use sigil_registry::notation_discover::discover_notation;
use sigil_registry::revocation_fetch::RevocationFetcher;
use sigil_registry::{Digest, Repository, Session};
use time::OffsetDateTime;

use crate::eval::AuthorityOutcome;
use crate::model::{NotationAuthority, VerifiedSignature};

/// Media types of a manifest that does not name its own.
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// Judges `repo@digest` for a Notation authority. `Err` is the reason the
/// authority fails; registry failures that say nothing about the image are
/// [`AuthorityOutcome::Inconclusive`].
pub(crate) async fn verify_notation(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
    authority: &NotationAuthority,
    revocation: Option<&RevocationFetcher>,
    now: OffsetDateTime,
) -> Result<AuthorityOutcome, String> {
    let repository = repo.to_string();
    let Some(statement) = authority.policy.applicable(&repository) else {
        return Err(format!(
            "no statement of the trust policy applies to repository {repository}; add it to a \
             statement's registryScopes or add a statement with registryScopes [\"*\"]"
        ));
    };
    if statement.verification.level == Level::Skip {
        return Ok(AuthorityOutcome::Verified {
            signatures: vec![VerifiedSignature {
                id: format!(
                    "trust policy statement `{}` (level skip): not verified",
                    statement.name
                ),
                identity: None,
            }],
            attestations: Vec::new(),
            rejected: Vec::new(),
        });
    }
    let image = match session
        .manifest(repo, &digest.to_string(), Some(*digest))
        .await
    {
        Ok(Some((bytes, _, manifest))) => {
            let media_type = manifest.media_type.unwrap_or_else(|| {
                if manifest.manifests.is_empty() {
                    OCI_MANIFEST.to_owned()
                } else {
                    OCI_INDEX.to_owned()
                }
            });
            Descriptor::new(&media_type, &digest.to_string(), bytes.len() as u64)
        }
        Ok(None) => return Err(format!("image {repo}@{digest} not found in its registry")),
        Err(e) => {
            let reason = format!("reading the manifest of {repo}@{digest}: {e}");
            return if e.is_inconclusive() {
                Ok(AuthorityOutcome::Inconclusive(reason))
            } else {
                Err(reason)
            };
        }
    };
    let found = discover_notation(session, repo, digest).await;
    let mut rejected = Vec::new();
    let mut signatures = Vec::new();
    for signature in &found.signatures {
        let bytes = match &signature.envelope {
            Ok(bytes) => bytes,
            Err(why) => {
                rejected.push(format!("{}: {why}", signature.location));
                continue;
            }
        };
        let envelope = match sigil_notation::decode::envelope(&signature.media_type, bytes) {
            Ok(envelope) => envelope,
            Err(e) => {
                rejected.push(format!(
                    "{}: Notary Project integrity check failed: {e}",
                    signature.location
                ));
                continue;
            }
        };
        // The revocation URLs come from the envelope's own certificates: they
        // are fetched only for a signature that passed every check before
        // revocation, so an untrusted chain makes sigil contact nothing.
        let judge = |evidence: &Evidence| {
            let ctx = Context {
                statement,
                trust_store: &authority.trust_store,
                revocation: evidence,
                now,
            };
            verify(&envelope, &image, &ctx)
        };
        let mut outcome = judge(&Evidence::new());
        if matches!(&outcome, Err(f) if f.check == Check::Revocation) {
            let evidence = gather(revocation_requests(&envelope), revocation).await;
            outcome = judge(&evidence);
        }
        match outcome {
            // Failures of checks the statement only logs do not fail the
            // signature; admission has no log of them to write to.
            Ok(_) => signatures.push(VerifiedSignature {
                id: signature.location.clone(),
                identity: None,
            }),
            Err(failure) => rejected.push(format!("{}: {failure}", signature.location)),
        }
    }
    if signatures.is_empty() {
        let inconclusive = found.errors.iter().any(|(_, e)| e.is_inconclusive());
        let mut reasons = rejected;
        reasons.extend(found.errors.iter().map(|(at, e)| format!("{at}: {e}")));
        if found.signatures.is_empty() && found.errors.is_empty() {
            reasons.push(format!(
                "no Notary Project signature found (looked in {})",
                found.looked_in.join(", ")
            ));
        }
        let reason = format!(
            "trust policy statement `{}`: {}",
            statement.name,
            reasons.join("; ")
        );
        return if inconclusive {
            Ok(AuthorityOutcome::Inconclusive(reason))
        } else {
            Err(reason)
        };
    }
    Ok(AuthorityOutcome::Verified {
        signatures,
        attestations: Vec::new(),
        rejected,
    })
}

/// Fetches the revocation answers an envelope's checks read; without a
/// fetcher each is unknown, which fails or is logged as the trust policy's
/// level says.
async fn gather(requests: Vec<Request>, fetcher: Option<&RevocationFetcher>) -> Evidence {
    let mut evidence = Evidence::new();
    for request in requests {
        let answer = match (fetcher, &request) {
            (None, _) => Err("sigil fetches no CRL or OCSP answer here".to_owned()),
            (Some(f), Request::Crl { url }) => f
                .get(url)
                .await
                .map(|b| b.to_vec())
                .map_err(|e| e.to_string()),
            (Some(f), Request::Ocsp { url, body }) => f
                .post_ocsp(url, body)
                .await
                .map(|b| b.to_vec())
                .map_err(|e| e.to_string()),
            (Some(_), Request::AwsSigner { .. }) => {
                Err("sigil does not call AWS Signer's revocation API".to_owned())
            }
        };
        evidence.insert(request, answer);
    }
    evidence
}
