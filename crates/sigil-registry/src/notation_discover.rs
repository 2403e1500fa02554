//! Notary Project signatures found for an image: OCI referrers with
//! artifactType `application/vnd.cncf.notary.signature` (through the
//! referrers API, or the `sha256-<hex>` fallback tag where it is absent),
//! each a manifest whose subject is the image and whose one layer is the
//! envelope (JWS or COSE). Found through the same [`Session`] as Sigstore's
//! material, so the same credentials, limits, deadline and egress rules
//! apply; judging the envelopes is `sigil-notation`'s job.

use crate::client::{Descriptor, RegistryError, Session};
use crate::reference::{Digest, Repository};

/// The artifact type of a Notary Project signature manifest.
pub const ARTIFACT_TYPE: &str = "application/vnd.cncf.notary.signature";
/// The envelope media types a signature layer may have.
pub const ENVELOPE_TYPES: [&str; 2] = ["application/jose+json", "application/cose"];
/// Largest envelope fetched (notation refuses larger signatures too).
pub const MAX_ENVELOPE_BYTES: i64 = 4 * 1024 * 1024;

/// One signature manifest found, and its envelope or why it is unusable.
#[derive(Debug, Clone)]
pub struct NotationSignature {
    /// `repo@digest` of the signature manifest.
    pub location: String,
    /// The envelope's media type.
    pub media_type: String,
    /// The envelope, or why it could not be had.
    pub envelope: Result<Vec<u8>, String>,
}

/// What a search found.
#[derive(Debug, Default)]
pub struct NotationDiscovery {
    /// Signature manifests, in listing order.
    pub signatures: Vec<NotationSignature>,
    /// Where sigil looked, for a "no signature found" message.
    pub looked_in: Vec<String>,
    /// Failures that stopped a listing.
    pub errors: Vec<(String, RegistryError)>,
}

/// Finds the Notary Project signatures of `repo@digest`.
pub async fn discover_notation(
    session: &Session<'_>,
    repo: &Repository,
    digest: &Digest,
) -> NotationDiscovery {
    let mut out = NotationDiscovery::default();
    let entries = match session.referrers(repo, digest).await {
        Ok(Some(entries)) => {
            out.looked_in
                .push(format!("referrers API of {repo}@{digest}"));
            entries
        }
        Ok(None) => {
            let tag = digest.tag_stem();
            out.looked_in
                .push(format!("referrers fallback tag {repo}:{tag}"));
            match session.manifest(repo, &tag, None).await {
                Ok(Some((_, _, index))) => index.manifests,
                Ok(None) => return out,
                Err(e) => {
                    out.errors.push((format!("{repo}:{tag}"), e));
                    return out;
                }
            }
        }
        Err(e) => {
            out.errors
                .push((format!("referrers API of {repo}@{digest}"), e));
            return out;
        }
    };
    for entry in entries {
        // Some registries list an empty artifactType: those manifests are read to tell.
        let at = entry.artifact_type.as_deref().unwrap_or("");
        if !(at.is_empty() || at == ARTIFACT_TYPE) {
            continue;
        }
        if let Some(found) = fetch(session, repo, digest, &entry).await {
            out.signatures.push(found);
        }
    }
    out
}

async fn fetch(
    session: &Session<'_>,
    repo: &Repository,
    image: &Digest,
    entry: &Descriptor,
) -> Option<NotationSignature> {
    let location = format!("{repo}@{}", entry.digest);
    let unusable = |why: String| NotationSignature {
        location: location.clone(),
        media_type: String::new(),
        envelope: Err(why),
    };
    let expected = match Digest::parse(&entry.digest) {
        Ok(d) => d,
        Err(e) => return Some(unusable(e.to_string())),
    };
    let manifest = match session.manifest(repo, &entry.digest, Some(expected)).await {
        Ok(Some((_, _, m))) => m,
        Ok(None) => {
            return Some(unusable(
                "the signature manifest is listed but missing (404)".into(),
            ));
        }
        Err(e) => return Some(unusable(e.to_string())),
    };
    let is_notation = manifest.artifact_type.as_deref() == Some(ARTIFACT_TYPE)
        || manifest
            .config
            .as_ref()
            .is_some_and(|c| c.media_type == ARTIFACT_TYPE);
    if !is_notation {
        // An unlabelled referrer of another kind (a Sigstore bundle): not ours.
        return None;
    }
    if manifest.subject.as_ref().map(|s| s.digest.as_str()) != Some(image.to_string().as_str()) {
        return Some(unusable(format!(
            "its subject is not {image}; a signature manifest must name the image it signs"
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Some(unusable(format!(
            "it has {} layers; a Notary Project signature manifest has exactly one, the envelope",
            manifest.layers.len()
        )));
    };
    if !ENVELOPE_TYPES.contains(&layer.media_type.as_str()) {
        return Some(unusable(format!(
            "its layer's media type `{}` is not application/jose+json or application/cose",
            layer.media_type
        )));
    }
    if layer.size > MAX_ENVELOPE_BYTES {
        return Some(unusable(format!(
            "its envelope of {} bytes is larger than the {MAX_ENVELOPE_BYTES} sigil reads",
            layer.size
        )));
    }
    Some(NotationSignature {
        location: location.clone(),
        media_type: layer.media_type.clone(),
        envelope: session.blob(repo, layer).await.map_err(|e| e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )]

    use std::collections::HashMap;
    use std::sync::Arc;

    use axum::Router;
    use axum::body::Body;
    use axum::http::{Response, Uri};

    use super::*;
    use crate::{ClientConfig, RegistryClient};

    const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

    fn desc(media_type: &str, bytes: &[u8]) -> serde_json::Value {
        serde_json::json!({"mediaType": media_type, "digest": Digest::of(bytes).to_string(), "size": bytes.len()})
    }

    /// A registry holding an image, one JWS and one COSE signature of it, a
    /// Sigstore bundle referrer, and a signature manifest for another image.
    async fn registry(referrers_api: bool) -> (String, Digest, HashMap<String, Vec<u8>>) {
        let image = br#"{"schemaVersion":2}"#.to_vec();
        let image_digest = Digest::of(&image);
        let mut blobs: HashMap<String, Vec<u8>> = HashMap::new();
        let mut manifests: Vec<(Vec<u8>, &str)> = Vec::new();
        let empty = b"{}".to_vec();
        blobs.insert(Digest::of(&empty).to_string(), empty.clone());
        for (envelope_type, envelope, subject) in [
            (
                "application/jose+json",
                b"{\"jws\":1}".to_vec(),
                image_digest.to_string(),
            ),
            (
                "application/cose",
                b"\xd2\x84cose".to_vec(),
                image_digest.to_string(),
            ),
            (
                "application/jose+json",
                b"{\"other\":1}".to_vec(),
                Digest::of(b"other").to_string(),
            ),
        ] {
            blobs.insert(Digest::of(&envelope).to_string(), envelope.clone());
            let m = serde_json::json!({
                "schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": ARTIFACT_TYPE,
                "config": desc("application/vnd.oci.empty.v1+json", &empty),
                "layers": [desc(envelope_type, &envelope)],
                "subject": {"mediaType": MANIFEST_TYPE, "digest": subject, "size": image.len()},
            });
            manifests.push((serde_json::to_vec(&m).unwrap(), ARTIFACT_TYPE));
        }
        let bundle = serde_json::json!({"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
            "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json", "layers": []});
        manifests.push((
            serde_json::to_vec(&bundle).unwrap(),
            "application/vnd.dev.sigstore.bundle.v0.3+json",
        ));
        let index = serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": manifests.iter().map(|(m, at)| {
                let mut d = desc(MANIFEST_TYPE, m);
                d["artifactType"] = (*at).into();
                d
            }).collect::<Vec<_>>()});
        let mut by_ref: HashMap<String, Vec<u8>> = manifests
            .iter()
            .map(|(m, _)| (Digest::of(m).to_string(), m.clone()))
            .collect();
        let index = serde_json::to_vec(&index).unwrap();
        if !referrers_api {
            by_ref.insert(image_digest.tag_stem(), index.clone());
        }
        let state = Arc::new((by_ref, blobs.clone(), index, referrers_api));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(move |uri: Uri| {
            let s = state.clone();
            async move {
                let path = uri.path().to_owned();
                let found = if let Some(rest) = path.strip_prefix("/v2/acme/app/referrers/") {
                    let _ = rest;
                    s.3.then(|| s.2.clone())
                } else if let Some(r) = path.strip_prefix("/v2/acme/app/manifests/") {
                    s.0.get(r).cloned()
                } else if let Some(d) = path.strip_prefix("/v2/acme/app/blobs/") {
                    s.1.get(d).cloned()
                } else if path == "/v2/" {
                    Some(Vec::new())
                } else {
                    None
                };
                match found {
                    Some(body) => Response::builder()
                        .status(200)
                        .body(Body::from(body))
                        .unwrap(),
                    None => Response::builder().status(404).body(Body::empty()).unwrap(),
                }
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr.to_string(), image_digest, blobs)
    }

    async fn found(referrers_api: bool) -> (NotationDiscovery, Digest) {
        let (host, digest, _) = registry(referrers_api).await;
        let client = RegistryClient::new(ClientConfig {
            allow_insecure_all: true,
            ..Default::default()
        })
        .unwrap();
        let session = client.session();
        let repo = Repository::parse(&format!("{host}/acme/app")).unwrap();
        (discover_notation(&session, &repo, &digest).await, digest)
    }

    #[tokio::test]
    async fn jws_and_cose_signatures_are_found_and_other_referrers_left_alone() {
        for api in [true, false] {
            let (d, _) = found(api).await;
            assert!(d.errors.is_empty(), "{:?}", d.errors);
            let usable: Vec<_> = d.signatures.iter().filter(|s| s.envelope.is_ok()).collect();
            let types: Vec<&str> = usable.iter().map(|s| s.media_type.as_str()).collect();
            assert_eq!(
                types,
                ["application/jose+json", "application/cose"],
                "referrers API {api}"
            );
            assert_eq!(usable[0].envelope.as_deref().unwrap(), b"{\"jws\":1}");
            // The signature of another image is reported, never used.
            let other: Vec<_> = d
                .signatures
                .iter()
                .filter_map(|s| s.envelope.as_ref().err())
                .collect();
            assert_eq!(other.len(), 1, "{:?}", d.signatures);
            assert!(other[0].contains("its subject is not"), "{}", other[0]);
            let looked = d.looked_in.join(" ");
            assert!(
                looked.contains(if api { "referrers API" } else { "fallback tag" }),
                "{looked}"
            );
        }
    }
}
