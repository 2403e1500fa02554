//! Mirrors and pull-through caches: the image is named by its upstream (as
//! the policies name it) and read at its mirror, with real cosign output
//! (`scripts/samples/olareg`). Mock registries on 127.0.0.1 count what
//! reaches them, so "the upstream is never contacted" is a count of zero.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Response;
use common::{Handler, Seen, reply, serve};
use sigil_registry::image::{ImageError, ImagePolicy, VerifyImageOptions, verify_image};
use sigil_registry::mirrors::MirrorMap;
use sigil_registry::{ClientConfig, DiscoveryOptions, Limits, RegistryClient, Repository, Want};
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{SignerPolicy, VerificationPolicy};

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
const IMAGE: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";
const BUNDLE_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

fn referrers() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": SIG_MANIFEST, "size": 1, "artifactType": BUNDLE_TYPE}],
    }))
    .unwrap()
}

fn empty_referrers() -> Vec<u8> {
    br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#
        .to_vec()
}

/// A registry holding the signed sample image under the repository `name`;
/// without `signature`, a pull-through cache that has the image only.
fn registry(name: &'static str, signature: bool) -> Arc<Handler> {
    Arc::new(move |_, uri, _, _| {
        let path = uri.path();
        let Some(rest) = path.strip_prefix(&format!("/v2/{name}/")) else {
            return reply(404, &[], "");
        };
        let answer: Option<Response<Body>> = if rest == format!("manifests/{IMAGE}") {
            Some(reply(
                200,
                &[("content-type", "application/vnd.oci.image.manifest.v1+json")],
                sample("olareg/image.manifest.json"),
            ))
        } else if rest == format!("referrers/{IMAGE}") {
            Some(reply(
                200,
                &[("content-type", "application/vnd.oci.image.index.v1+json")],
                if signature {
                    referrers()
                } else {
                    empty_referrers()
                },
            ))
        } else if signature && rest == format!("manifests/{SIG_MANIFEST}") {
            Some(reply(200, &[], sample("olareg/new-sig.manifest.json")))
        } else if signature && rest == format!("blobs/{SIG_BUNDLE}") {
            Some(reply(200, &[], sample("olareg/new-sig.bundle.json")))
        } else {
            None
        };
        answer.unwrap_or_else(|| reply(404, &[], ""))
    })
}

fn policy() -> ImagePolicy {
    let key = PublicKey::from_pem(&String::from_utf8(sample("cosign.pub")).unwrap()).unwrap();
    ImagePolicy {
        verification: VerificationPolicy {
            signer: SignerPolicy::Key(key),
            require_tlog: false,
            key_hash: None,
        },
        want: Want::Signatures,
    }
}

fn client(rules: &[String]) -> RegistryClient {
    let mut mirrors = MirrorMap::new();
    for r in rules {
        mirrors.add_rule(r).unwrap();
    }
    RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        mirrors: Some(Arc::new(mirrors)),
        limits: Limits {
            request_timeout: Duration::from_secs(3),
            total_deadline: Duration::from_secs(6),
            ..Limits::default()
        },
        ..ClientConfig::default()
    })
    .unwrap()
}

async fn verify(
    client: &RegistryClient,
    image: &str,
    options: &VerifyImageOptions,
) -> Result<(), ImageError> {
    let root = TrustedRoot::public_good().unwrap();
    verify_image(image, &policy(), &root, client, options)
        .await
        .map(|_| ())
}

fn count(seen: &Seen) -> usize {
    seen.lock().unwrap().len()
}

#[tokio::test]
async fn an_image_named_by_its_upstream_is_verified_from_its_mirror_alone() {
    let (upstream, upstream_seen) = serve(registry("test/app", true)).await;
    // Harbor's proxy-cache form: the project `dockerhub-proxy` holds the upstream's repositories.
    let (mirror, mirror_seen) = serve(registry("dockerhub-proxy/test/app", true)).await;
    let client = client(&[format!("{upstream}=http://{mirror}/dockerhub-proxy")]);
    verify(
        &client,
        &format!("{upstream}/test/app@{IMAGE}"),
        &VerifyImageOptions::default(),
    )
    .await
    .unwrap();
    assert!(count(&mirror_seen) >= 3);
    assert_eq!(count(&upstream_seen), 0, "the upstream was contacted");
}

#[tokio::test]
async fn signatures_a_pull_through_cache_lacks_are_read_upstream_where_allowed() {
    let (upstream, upstream_seen) = serve(registry("test/app", true)).await;
    let (cache, cache_seen) = serve(registry("test/app", false)).await;
    let allowed = client(&[format!("{upstream}=http://{cache},{upstream}")]);
    verify(
        &allowed,
        &format!("{upstream}/test/app@{IMAGE}"),
        &VerifyImageOptions::default(),
    )
    .await
    .unwrap();
    assert!(count(&cache_seen) >= 1);
    assert!(count(&upstream_seen) >= 1);

    // Where the upstream is not allowed, the denial names each place it looked.
    let before = count(&upstream_seen);
    let forbidden = client(&[format!("{upstream}=http://{cache}")]);
    let err = verify(
        &forbidden,
        &format!("{upstream}/test/app@{IMAGE}"),
        &VerifyImageOptions::default(),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ImageError::NoSignature { .. }), "{text}");
    assert!(
        text.contains(&format!("{cache}/test/app (mirror): no referrers")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{upstream}/test/app (upstream): not contacted, the mirror setting allows no upstream"
        )),
        "{text}"
    );
    assert_eq!(count(&upstream_seen), before, "the upstream was contacted");
}

#[tokio::test]
async fn a_mirror_that_serves_other_bytes_is_a_digest_failure_not_a_reason_to_ask_the_upstream() {
    let (upstream, upstream_seen) = serve(registry("test/app", true)).await;
    let (mirror, _) = serve(Arc::new(|_, uri, _, _| {
        let path = uri.path();
        if path.contains("/referrers/") {
            return reply(200, &[], referrers());
        }
        if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
            let mut body = sample("olareg/new-sig.manifest.json");
            body.push(b' ');
            return reply(200, &[], body);
        }
        reply(404, &[], "")
    }))
    .await;
    let client = client(&[format!("{upstream}=http://{mirror},{upstream}")]);
    let err = verify(
        &client,
        &format!("{upstream}/test/app@{IMAGE}"),
        &VerifyImageOptions::default(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("has digest") || err.contains("tampered"),
        "{err}"
    );
    // The upstream was asked for nothing the mirror had answered wrongly.
    let asked: Vec<String> = upstream_seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    assert!(!asked.iter().any(|p| p.contains(SIG_MANIFEST)), "{asked:?}");
}

#[tokio::test]
async fn a_mirror_that_is_down_is_passed_over_for_the_next_place_and_named() {
    let (upstream, _) = serve(registry("test/app", true)).await;
    // A port nothing listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let passing = client(&[format!("{upstream}=http://{dead},{upstream}")]);
    verify(
        &passing,
        &format!("{upstream}/test/app@{IMAGE}"),
        &VerifyImageOptions::default(),
    )
    .await
    .unwrap();
    // Nothing anywhere: the failure of the dead mirror is the answer.
    let nowhere = client(&[format!("{upstream}=http://{dead}")]);
    let err = verify(
        &nowhere,
        &format!("{upstream}/test/app@{IMAGE}"),
        &VerifyImageOptions::default(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains(&dead), "{err}");
}

#[tokio::test]
async fn source_oci_signature_repositories_go_through_the_same_mapping() {
    let (upstream, upstream_seen) = serve(registry("test/app", false)).await;
    let (mirror, mirror_seen) = serve(registry("proxy/signatures/app", true)).await;
    // The image at the upstream has no signatures; source.oci names
    // `{upstream}/signatures/app`, which the mirror holds.
    let client = client(&[format!(
        "{upstream}/signatures=http://{mirror}/proxy/signatures"
    )]);
    let options = VerifyImageOptions {
        discovery: DiscoveryOptions {
            signature_repository: Some(
                Repository::parse(&format!("{upstream}/signatures/app")).unwrap(),
            ),
            tag_prefix: String::new(),
        },
        ..VerifyImageOptions::default()
    };
    verify(&client, &format!("{upstream}/test/app@{IMAGE}"), &options)
        .await
        .unwrap();
    assert!(count(&mirror_seen) >= 3);
    let asked: Vec<String> = upstream_seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    assert!(!asked.iter().any(|p| p.contains("signatures")), "{asked:?}");
}

#[tokio::test]
async fn through_a_mirror_discovery_asks_in_turn_so_its_trail_reads_the_same_each_time() {
    let (upstream, _) = serve(registry("test/app", true)).await;
    let (mirror, mirror_seen) = serve(registry("dockerhub-proxy/test/app", true)).await;
    let client = client(&[format!("{upstream}=http://{mirror}/dockerhub-proxy")]);
    let repo = Repository::parse(&format!("{upstream}/test/app")).unwrap();
    let digest = sigil_registry::Digest::parse(IMAGE).unwrap();
    let session = client.session();
    let found = sigil_registry::discover::discover(
        &session,
        &repo,
        &digest,
        &Want::Signatures,
        &DiscoveryOptions::default(),
    )
    .await;
    assert_eq!(found.candidates.len(), 1, "{found:?}");
    // One after another: the list, its manifest, the blob, then the .sig tag.
    assert_eq!(found.round_trips, 4);
    let paths: Vec<String> = mirror_seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    let tag = format!("{}.sig", digest.tag_stem());
    let expected = [
        format!("referrers/{IMAGE}"),
        format!("manifests/{SIG_MANIFEST}"),
        format!("blobs/{SIG_BUNDLE}"),
        format!("manifests/{tag}"),
    ];
    assert_eq!(paths.len(), expected.len(), "{paths:?}");
    for (path, want) in paths.iter().zip(&expected) {
        assert!(
            path.ends_with(want.as_str()),
            "{path} is not {want}: {paths:?}"
        );
    }
}
