//! Where a cloud credential goes: only to the registry host its provider
//! serves (and that host's own token realm), never to another registry the
//! same verification talks to, never along a redirect to blob storage, and
//! a pull secret for the host wins over the provider. Small mocks on
//! 127.0.0.1 record every Authorization header they receive; the provider
//! is ACR through a managed identity endpoint, given the mock registry as an
//! extra host. (The cloud endpoints' own checks are exercised against
//! `sigil-fakecloud` in `registry_cloud.rs`.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use sigil_cloud::Env;
use sigil_registry::client::Descriptor;
use sigil_registry::cloud::hosts::ExtraHost;
use sigil_registry::{
    ClientConfig, Credential, Credentials, Digest, Keychain, KeychainSettings, Limits, ProviderId,
    RegistryClient, RegistryError, Repository,
};

mod common;

use common::{Handler, reply, serve};

const BLOB: &[u8] = b"signature bytes";

/// An ACR-like registry: its exchange turns the managed identity's token
/// into a refresh token, its token realm that into an access token, and its
/// blob answers with a redirect to `storage`.
fn acr_like(storage: String) -> Arc<Handler> {
    Arc::new(move |method, uri, auth, me| {
        let path = uri.path();
        if path == "/oauth2/exchange" && method == Method::POST {
            return reply(200, &[], r#"{"refresh_token":"refresh-for-a"}"#);
        }
        if path == "/oauth2/token" {
            let expected = format!(
                "Basic {}",
                base64_encode("00000000-0000-0000-0000-000000000000:refresh-for-a")
            );
            return if auth == Some(expected.as_str()) {
                reply(200, &[], r#"{"access_token":"access-for-a"}"#)
            } else {
                reply(401, &[], "")
            };
        }
        if auth != Some("Bearer access-for-a") {
            let challenge = format!(r#"Bearer realm="http://{me}/oauth2/token",service="{me}""#);
            return reply(401, &[("www-authenticate", challenge.as_str())], "");
        }
        let location = format!("http://{storage}/bucket/blob?signature=presigned");
        reply(307, &[("location", location.as_str())], "")
    })
}

fn base64_encode(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn keychain(imds: &str, acr_host: &str) -> Arc<Keychain> {
    let settings = KeychainSettings {
        providers: vec![ProviderId::Acr],
        extra_hosts: vec![(ProviderId::Acr, ExtraHost::parse(acr_host).unwrap())],
        insecure_hosts: vec![acr_host.to_string()],
        exchange_timeout: Duration::from_secs(5),
        ..KeychainSettings::default()
    };
    let env = Env::from_pairs([(
        "AZURE_POD_IDENTITY_AUTHORITY_HOST",
        format!("http://{imds}"),
    )]);
    Arc::new(Keychain::new(&settings, env).unwrap())
}

fn client(keychain: Arc<Keychain>, credentials: Credentials) -> RegistryClient {
    RegistryClient::new(ClientConfig {
        allow_insecure_all: true,
        credentials,
        keychain: Some(keychain),
        limits: Limits {
            request_timeout: Duration::from_secs(5),
            total_deadline: Duration::from_secs(10),
            ..Limits::default()
        },
        ..ClientConfig::default()
    })
    .unwrap()
}

fn blob_descriptor() -> Descriptor {
    serde_json::from_value(serde_json::json!({
        "mediaType": "application/octet-stream",
        "digest": Digest::of(BLOB).to_string(),
        "size": BLOB.len(),
    }))
    .unwrap()
}

#[tokio::test]
async fn a_cloud_token_reaches_its_registry_only_never_another_registry_nor_blob_storage() {
    let (imds, imds_seen) = serve(Arc::new(|_, uri, _, _| {
        assert!(uri.path().ends_with("/metadata/identity/oauth2/token"));
        reply(
            200,
            &[],
            r#"{"access_token":"entra-token","expires_in":3600}"#,
        )
    }))
    .await;
    let (storage, storage_seen) =
        serve(Arc::new(|_, _, _, _| reply(200, &[], BLOB.to_vec()))).await;
    let (acr, acr_seen) = serve(acr_like(storage.clone())).await;
    // Another registry in the same verification, which asks for credentials too.
    let (other, other_seen) = serve(Arc::new(|_, _, _, _| {
        reply(401, &[("www-authenticate", r#"Basic realm="other""#)], "")
    }))
    .await;

    let client = client(keychain(&imds, &acr), Credentials::anonymous());
    let session = client.session();
    let repo = Repository::parse(&format!("{acr}/team/app")).unwrap();
    let body = session.blob(&repo, &blob_descriptor()).await.unwrap();
    assert_eq!(body, BLOB);
    let other_repo = Repository::parse(&format!("{other}/team/app")).unwrap();
    let err = session
        .blob(&other_repo, &blob_descriptor())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Denied { status: 401, .. }),
        "{err}"
    );

    // The registry got its own tokens; storage and the other registry got none.
    let acr_auth: Vec<_> = acr_seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(_, a)| a.clone())
        .collect();
    assert!(
        acr_auth.iter().any(|a| a == "Bearer access-for-a"),
        "{acr_auth:?}"
    );
    for (path, auth) in storage_seen.lock().unwrap().iter() {
        assert_eq!(auth, &None, "blob storage got credentials at {path}");
    }
    assert!(!storage_seen.lock().unwrap().is_empty());
    for (path, auth) in other_seen.lock().unwrap().iter() {
        assert_eq!(auth, &None, "another registry got credentials at {path}");
    }
    // The managed identity's token went to the identity endpoint, never to a registry.
    assert_eq!(imds_seen.lock().unwrap().len(), 1);
    let everything: Vec<String> = [&acr_seen, &storage_seen, &other_seen]
        .iter()
        .flat_map(|s| s.lock().unwrap().clone())
        .filter_map(|(_, a)| a)
        .collect();
    assert!(
        !everything.iter().any(|a| a.contains("entra-token")),
        "{everything:?}"
    );
}

#[tokio::test]
async fn a_pull_secret_for_the_host_wins_over_the_cloud_provider() {
    let (imds, imds_seen) = serve(Arc::new(|_, _, _, _| {
        reply(
            200,
            &[],
            r#"{"access_token":"entra-token","expires_in":3600}"#,
        )
    }))
    .await;
    let (registry, seen) = serve(Arc::new(|_, _, auth, _| {
        if auth.is_some_and(|a| a.starts_with("Basic ")) {
            reply(200, &[], BLOB.to_vec())
        } else {
            reply(401, &[("www-authenticate", r#"Basic realm="r""#)], "")
        }
    }))
    .await;
    let mut secrets = Credentials::anonymous();
    secrets.insert(
        &registry,
        Credential::Basic {
            username: "pull".into(),
            password: "secret".into(),
        },
    );
    let client = client(keychain(&imds, &registry), secrets);
    let repo = Repository::parse(&format!("{registry}/team/app")).unwrap();
    client
        .session()
        .blob(&repo, &blob_descriptor())
        .await
        .unwrap();
    let auths: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(_, a)| a.clone())
        .collect();
    assert_eq!(
        auths,
        vec![format!("Basic {}", base64_encode("pull:secret"))]
    );
    assert!(
        imds_seen.lock().unwrap().is_empty(),
        "the provider was asked"
    );
}

#[tokio::test]
async fn a_provider_that_fails_is_a_named_error_never_anonymous_access() {
    // The identity endpoint refuses: the registry must not be read anonymously.
    let (imds, _) = serve(Arc::new(|_, _, _, _| {
        reply(
            400,
            &[],
            r#"{"error":"invalid_request","error_description":"Identity not found"}"#,
        )
    }))
    .await;
    let (registry, seen) = serve(Arc::new(|_, _, auth, _| match auth {
        None => reply(401, &[("www-authenticate", r#"Basic realm="r""#)], ""),
        Some(_) => reply(200, &[], BLOB.to_vec()),
    }))
    .await;
    let client = client(keychain(&imds, &registry), Credentials::anonymous());
    let repo = Repository::parse(&format!("{registry}/team/app")).unwrap();
    let err = client
        .session()
        .blob(&repo, &blob_descriptor())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.reason(), "cloud-credentials", "{text}");
    assert!(err.is_inconclusive());
    assert!(text.contains("acr credentials"), "{text}");
    assert!(text.contains("managed identity (IMDS)"), "{text}");
    assert!(text.contains("Identity not found"), "{text}");
    assert!(text.contains("AcrPull"), "{text}");
    // One anonymous try (which got the challenge), nothing after it.
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn metadata_addresses_stay_refused_as_registries_whatever_the_providers_reach() {
    // A provider may reach the metadata server (here named as Google's and
    // given 169.254.169.254 as an extra host); an image naming that address
    // as its registry is still refused before any request or exchange.
    let settings = KeychainSettings {
        providers: vec![ProviderId::Gcp],
        extra_hosts: vec![(
            ProviderId::Gcp,
            ExtraHost::parse("169.254.169.254").unwrap(),
        )],
        ..KeychainSettings::default()
    };
    let env = Env::from_pairs([("GCE_METADATA_HOST", "169.254.169.254")]);
    let keychain = Arc::new(Keychain::new(&settings, env).unwrap());
    let exchanges = Arc::new(Exchanges::default());
    keychain.observe(exchanges.clone());
    let client = RegistryClient::new(ClientConfig {
        keychain: Some(keychain.clone()),
        ..ClientConfig::default()
    })
    .unwrap();
    for host in [
        "169.254.169.254",
        "[fd00:ec2::254]",
        "169.254.170.23",
        "[fd00:ec2::23]",
        "metadata.google.internal",
    ] {
        let repo = Repository::parse(&format!("{host}/computemetadata/v1")).unwrap();
        let err = client
            .session()
            .blob(&repo, &blob_descriptor())
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "forbidden-address", "{host}: {err}");
    }
    // The provider serves the host, and was never asked.
    assert_eq!(
        keychain.describe("169.254.169.254").unwrap().0,
        ProviderId::Gcp
    );
    assert_eq!(exchanges.0.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// Counts the keychain's exchanges.
#[derive(Debug, Default)]
struct Exchanges(std::sync::atomic::AtomicU32);

impl sigil_registry::cloud::CredentialObserver for Exchanges {
    fn exchanged(&self, _: ProviderId, _: sigil_registry::cloud::cache::Exchange) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
