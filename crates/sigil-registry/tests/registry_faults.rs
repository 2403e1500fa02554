//! Registry faults a real registry will not produce on demand, from a mock
//! registry on 127.0.0.1: each must end in a clear error within the deadline,
//! never in "verified". The happy paths use real cosign output from
//! `scripts/samples/olareg` (image, signature referrer, bundle, public key).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Response, Uri};
use sigil_registry::image::{
    ImageError, ImagePolicy, ImageVerdict, VerifyImageOptions, verify_image,
};
use sigil_registry::{
    ClientConfig, Credential, Credentials, Limits, RegistryClient, RegistryError, Want,
};
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{SignerPolicy, VerificationPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
const IMAGE: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

type Handler = dyn Fn(&Method, &Uri, Option<&str>) -> Response<Body> + Send + Sync;

/// Serves `handler` on 127.0.0.1 and returns `host:port`.
async fn mock(handler: Arc<Handler>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(
        move |method: Method, uri: Uri, headers: axum::http::HeaderMap| {
            let h = handler.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                h(&method, &uri, auth.as_deref())
            }
        },
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr.to_string()
}

fn reply(status: u16, body: impl Into<Vec<u8>>) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Body::from(body.into()))
        .unwrap()
}

fn index(entries: &[(&str, &str)]) -> Vec<u8> {
    let m: Vec<_> = entries
        .iter()
        .map(|(d, at)| serde_json::json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 1, "artifactType": at}))
        .collect();
    serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": m})).unwrap()
}

const BUNDLE_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

/// A registry holding the sample image's real cosign signature.
fn signed_registry(path: &str) -> Option<Response<Body>> {
    if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
        return Some(reply(200, sample("olareg/new-sig.manifest.json")));
    }
    if path.ends_with(&format!("/blobs/{SIG_BUNDLE}")) {
        return Some(reply(200, sample("olareg/new-sig.bundle.json")));
    }
    None
}

fn limits() -> Limits {
    Limits {
        request_timeout: Duration::from_millis(800),
        total_deadline: Duration::from_secs(3),
        ..Limits::default()
    }
}

async fn verify_with(
    host: &str,
    reference: &str,
    limits: Limits,
    credentials: Credentials,
) -> Result<ImageVerdict, ImageError> {
    let client = RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        limits,
        credentials,
        ..Default::default()
    })
    .unwrap();
    let key = PublicKey::from_pem(&String::from_utf8(sample("cosign.pub")).unwrap()).unwrap();
    let policy = ImagePolicy {
        verification: VerificationPolicy {
            signer: SignerPolicy::Key(key),
            require_tlog: false,
        },
        want: Want::Signatures,
    };
    let root = TrustedRoot::public_good().unwrap();
    let _ = host;
    verify_image(
        reference,
        &policy,
        &root,
        &client,
        &VerifyImageOptions::default(),
    )
    .await
}

async fn verify(host: &str) -> Result<ImageVerdict, ImageError> {
    verify_with(
        host,
        &format!("{host}/test/app@{IMAGE}"),
        limits(),
        Credentials::anonymous(),
    )
    .await
}

fn registry_error(r: Result<ImageVerdict, ImageError>) -> RegistryError {
    match r {
        Err(ImageError::Registry { error, .. }) => error,
        Err(e) => panic!("expected a registry error, got: {e}"),
        Ok(v) => panic!("verified: {v:?}"),
    }
}

#[tokio::test]
async fn the_sample_signature_verifies_through_paginated_referrers_and_a_broken_candidate_does_not_hide_it()
 {
    let host = mock(Arc::new(|_, uri: &Uri, _| {
        let path = uri.path();
        if let Some(r) = signed_registry(path) {
            return r;
        }
        if path.contains("/referrers/") {
            // Page 1: a referrer whose manifest is missing; page 2: the real one.
            if uri.query().is_some_and(|q| q.contains("page=2")) {
                return reply(200, index(&[(SIG_MANIFEST, BUNDLE_TYPE)]));
            }
            let missing = format!("sha256:{}", "ab".repeat(32));
            return Response::builder()
                .status(200)
                .header("link", format!("<{path}?page=2>; rel=\"next\""))
                .body(Body::from(index(&[(&missing, BUNDLE_TYPE)])))
                .unwrap();
        }
        reply(404, "not found")
    }))
    .await;
    let v = verify(&host).await.unwrap();
    assert_eq!(v.verified.len(), 1);
    assert_eq!(v.rejected.len(), 1, "{:?}", v.rejected);
    assert!(v.rejected[0].reason.contains("missing"), "{:?}", v.rejected);
}

#[tokio::test]
async fn error_statuses_end_in_typed_errors_naming_the_cause() {
    for (status, want) in [
        (401u16, "anonymous access"),
        (403, "forbidden"),
        (429, "rate limited"),
        (500, "500"),
    ] {
        let host = mock(Arc::new(move |_, _, _| reply(status, "no"))).await;
        let e = registry_error(verify(&host).await);
        assert!(e.to_string().contains(want), "{status}: {e}");
    }
}

#[tokio::test]
async fn a_missing_tag_is_reported_as_image_not_found() {
    let host = mock(Arc::new(|_, _, _| reply(404, "not found"))).await;
    let e = verify_with(
        &host,
        &format!("{host}/test/app:v1"),
        limits(),
        Credentials::anonymous(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ImageError::NotFound { .. }), "{e}");
}

#[tokio::test]
async fn an_unsigned_image_says_where_sigil_looked() {
    let host = mock(Arc::new(|_, _, _| reply(404, "not found"))).await;
    let e = verify(&host).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ImageError::NoSignature { .. }), "{msg}");
    assert!(
        msg.contains("referrers fallback tag") && msg.contains(".sig"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_slow_registry_times_out_within_the_deadline() {
    let host = mock(Arc::new(|_, _, _| {
        std::thread::sleep(Duration::from_millis(1500));
        reply(404, "")
    }))
    .await;
    let started = Instant::now();
    let e = registry_error(verify(&host).await);
    assert!(matches!(e, RegistryError::Timeout { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(4));
}

/// A raw server that answers every connection with `head` and then `body`
/// slowly or cut short.
async fn raw(head: String, body: Vec<u8>, delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        for _ in 0..20 {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let (head, body) = (head.clone(), body.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(head.as_bytes()).await;
                for b in body.chunks(if delay.is_zero() { 1 << 16 } else { 8 }) {
                    tokio::time::sleep(delay).await;
                    if s.write_all(b).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn truncated_bodies_are_errors_not_short_documents() {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4000\r\nConnection: close\r\n\r\n".to_string();
    let host = raw(head, b"{\"manifests\":[".to_vec(), Duration::ZERO).await;
    let e = registry_error(verify(&host).await);
    assert!(matches!(e, RegistryError::Body { .. }), "{e}");
}

#[tokio::test]
async fn a_body_that_trickles_in_times_out() {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 800\r\n\r\n"
        .to_string();
    let host = raw(head, vec![b' '; 800], Duration::from_millis(50)).await;
    let started = Instant::now();
    let e = registry_error(verify(&host).await);
    assert!(
        matches!(
            e,
            RegistryError::Timeout { .. } | RegistryError::Deadline { .. }
        ),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn a_manifest_whose_content_does_not_match_its_digest_is_refused() {
    let host = mock(Arc::new(|_, uri: &Uri, _| {
        let path = uri.path();
        if path.contains("/referrers/") {
            return reply(200, index(&[(SIG_MANIFEST, BUNDLE_TYPE)]));
        }
        if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
            // Same JSON, one byte of whitespace more: another digest.
            let mut body = sample("olareg/new-sig.manifest.json");
            body.push(b' ');
            return reply(200, body);
        }
        reply(404, "")
    }))
    .await;
    let e = verify(&host).await.unwrap_err();
    assert!(e.to_string().contains("tampered"), "{e}");
}

#[tokio::test]
async fn a_wrong_docker_content_digest_on_a_tag_is_refused() {
    let host = mock(Arc::new(|m: &Method, uri: &Uri, _| {
        if uri.path().ends_with("/manifests/v1") && m == Method::GET {
            return Response::builder()
                .status(200)
                .header("docker-content-digest", SIG_MANIFEST)
                .body(Body::from(sample("olareg/image.manifest.json")))
                .unwrap();
        }
        reply(405, "")
    }))
    .await;
    let e = registry_error(
        verify_with(
            &host,
            &format!("{host}/test/app:v1"),
            limits(),
            Credentials::anonymous(),
        )
        .await,
    );
    assert!(matches!(e, RegistryError::DigestMismatch { .. }), "{e}");
}

#[tokio::test]
async fn a_referrer_pointing_to_a_missing_blob_is_listed_as_a_failed_candidate() {
    let host = mock(Arc::new(|_, uri: &Uri, _| {
        let path = uri.path();
        if path.contains("/referrers/") {
            return reply(200, index(&[(SIG_MANIFEST, BUNDLE_TYPE)]));
        }
        if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
            return reply(200, sample("olareg/new-sig.manifest.json"));
        }
        reply(404, "")
    }))
    .await;
    let e = verify(&host).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ImageError::NothingVerified { .. }), "{msg}");
    assert!(msg.contains(SIG_BUNDLE) && msg.contains("404"), "{msg}");
}

#[tokio::test]
async fn oversized_responses_are_refused_with_or_without_a_content_length() {
    let big = vec![b' '; 5 << 20];
    let host = mock(Arc::new(move |_, _, _| reply(200, big.clone()))).await;
    let e = registry_error(verify(&host).await);
    assert!(matches!(e, RegistryError::TooLarge { .. }), "{e}");
    let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_string();
    let mut body = Vec::new();
    for _ in 0..600 {
        body.extend_from_slice(b"2000\r\n");
        body.extend_from_slice(&[b' '; 0x2000]);
        body.extend_from_slice(b"\r\n");
    }
    let host = raw(head, body, Duration::ZERO).await;
    let small = Limits {
        max_manifest_bytes: 1 << 20,
        ..limits()
    };
    let e = registry_error(
        verify_with(
            &host,
            &format!("{host}/test/app@{IMAGE}"),
            small,
            Credentials::anonymous(),
        )
        .await,
    );
    assert!(matches!(e, RegistryError::TooLarge { .. }), "{e}");
}

#[tokio::test]
async fn redirect_loops_end_after_the_redirect_limit() {
    let host = mock(Arc::new(|_, uri: &Uri, _| {
        Response::builder()
            .status(307)
            .header("location", uri.path().to_string())
            .body(Body::empty())
            .unwrap()
    }))
    .await;
    let e = registry_error(verify(&host).await);
    assert!(matches!(e, RegistryError::Redirects { .. }), "{e}");
}

#[tokio::test]
async fn a_huge_referrers_list_is_refused() {
    let entries: Vec<String> = (0..200).map(|i| format!("sha256:{i:064x}")).collect();
    let body = index(
        &entries
            .iter()
            .map(|d| (d.as_str(), BUNDLE_TYPE))
            .collect::<Vec<_>>(),
    );
    let host = mock(Arc::new(move |_, uri: &Uri, _| {
        if uri.path().contains("/referrers/") {
            reply(200, body.clone())
        } else {
            reply(404, "")
        }
    }))
    .await;
    let e = registry_error(verify(&host).await);
    assert!(matches!(e, RegistryError::TooMany { .. }), "{e}");
}

#[tokio::test]
async fn endless_pagination_stops_at_the_page_limit() {
    let host = mock(Arc::new(|_, uri: &Uri, _| {
        if uri.path().contains("/referrers/") {
            let n: u32 = uri
                .query()
                .and_then(|q| q.strip_prefix("p="))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            return Response::builder()
                .status(200)
                .header(
                    "link",
                    format!("<{}?p={}>; rel=\"next\"", uri.path(), n + 1),
                )
                .body(Body::from(index(&[])))
                .unwrap();
        }
        reply(404, "")
    }))
    .await;
    let e = registry_error(verify(&host).await);
    assert!(matches!(e, RegistryError::TooManyPages { .. }), "{e}");
}

#[tokio::test]
async fn bearer_tokens_are_fetched_with_credentials_only_from_the_registry_host() {
    // The token realm lives on another port of 127.0.0.1: another host, so
    // it must be asked anonymously even though credentials exist.
    let realm = mock(Arc::new(|_, _, auth: Option<&str>| {
        if auth.is_some() {
            return reply(500, "credentials leaked to another host");
        }
        reply(200, r#"{"token":"anon-token"}"#)
    }))
    .await;
    let realm_url = format!("http://{realm}/token");
    let host = mock(Arc::new(move |_, uri: &Uri, auth: Option<&str>| {
        if auth != Some("Bearer anon-token") {
            return Response::builder()
                .status(401)
                .header(
                    "www-authenticate",
                    format!(r#"Bearer realm="{realm_url}",service="mock""#),
                )
                .body(Body::empty())
                .unwrap();
        }
        if let Some(r) = signed_registry(uri.path()) {
            return r;
        }
        if uri.path().contains("/referrers/") {
            return reply(200, index(&[(SIG_MANIFEST, BUNDLE_TYPE)]));
        }
        reply(404, "")
    }))
    .await;
    let mut creds = Credentials::anonymous();
    creds.insert(
        &host,
        Credential::Basic {
            username: "u".into(),
            password: "p".into(),
        },
    );
    let client_limits = Limits {
        max_redirects: 2,
        ..limits()
    };
    let v = verify_with(
        &host,
        &format!("{host}/test/app@{IMAGE}"),
        client_limits,
        creds,
    )
    .await
    .unwrap();
    assert_eq!(v.verified.len(), 1);
    // referrers 401 + token + referrers + manifest + blob + .sig (token cached).
    assert!(v.round_trips <= 6, "{}", v.round_trips);
}

#[tokio::test]
async fn basic_credentials_are_sent_to_their_own_registry() {
    let host = mock(Arc::new(|_, uri: &Uri, auth: Option<&str>| {
        // "u:p" in base64.
        if auth != Some("Basic dTpw") {
            return Response::builder()
                .status(401)
                .header("www-authenticate", r#"Basic realm="mock""#)
                .body(Body::empty())
                .unwrap();
        }
        if let Some(r) = signed_registry(uri.path()) {
            return r;
        }
        if uri.path().contains("/referrers/") {
            return reply(200, index(&[(SIG_MANIFEST, BUNDLE_TYPE)]));
        }
        reply(404, "")
    }))
    .await;
    let e = registry_error(verify(&host).await);
    assert!(e.to_string().contains("give credentials"), "{e}");
    let mut creds = Credentials::anonymous();
    creds.insert(
        &host,
        Credential::Basic {
            username: "u".into(),
            password: "p".into(),
        },
    );
    assert!(
        verify_with(&host, &format!("{host}/test/app@{IMAGE}"), limits(), creds)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_registry_asking_for_credentials_kept_by_a_credential_helper_names_the_helper() {
    let host = mock(Arc::new(|_, _: &Uri, _: Option<&str>| {
        Response::builder()
            .status(401)
            .header("www-authenticate", r#"Basic realm="mock""#)
            .body(Body::empty())
            .unwrap()
    }))
    .await;
    let config = format!(r#"{{"auths": {{"{host}": {{}}}}, "credsStore": "desktop"}}"#);
    let creds = Credentials::from_docker_config_json(config.as_bytes()).unwrap();
    let e = registry_error(
        verify_with(&host, &format!("{host}/test/app@{IMAGE}"), limits(), creds).await,
    );
    assert!(
        matches!(&e, RegistryError::CredentialHelper { helper, .. } if helper == "desktop"),
        "{e}"
    );
    let msg = e.to_string();
    assert!(msg.contains("docker-credential-desktop"), "{msg}");
    assert!(
        msg.contains("credential helpers are not supported"),
        "{msg}"
    );
}
