//! The webhook against mock registries on 127.0.0.1 serving a real cosign
//! signature (`scripts/samples/olareg`) and a fake API server: pull secrets
//! read from Secrets and service accounts and sent only to their registry,
//! signature material shared across policies until its TTL, registry
//! requests counted by host and status, an extra CA for private registries,
//! and `/readyz` following the policy snapshot.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode, Uri};
use base64::Engine as _;
use common::{FakeApi, config, docker_config, message, post, response};
use serde_json::{Value, json};
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::{ClientConfig, Credential, Limits, MaterialCache, RegistryClient, Repository};
use sigil_verifier::trust::TrustedRoot;
use sigil_webhook::admit::Admission;
use sigil_webhook::judge::{
    ImageJudge as _, ObjectInfo, PinnedImage, PullSecretSource, PullSecrets,
};
use sigil_webhook::metrics::Metrics;
use sigil_webhook::policy_judge::PolicyJudge;
use sigil_webhook::secrets::{KubePullSecrets, NoPullSecrets};
use sigil_webhook::server::{AppState, router};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::ServiceExt as _;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
const IMAGE: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

fn reply(status: u16, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Body::from(body))
        .unwrap()
}

/// A registry holding the sample image's cosign signature (new format, by
/// referrer), optionally behind basic auth; it counts requests and keeps
/// every `Authorization` header it was sent.
#[derive(Default)]
struct MockRegistry {
    requests: AtomicUsize,
    authorizations: Mutex<Vec<String>>,
    basic: Option<String>,
}

impl MockRegistry {
    fn answer(&self, uri: &Uri, auth: Option<&str>) -> Response<Body> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        if let Some(a) = auth {
            self.authorizations.lock().unwrap().push(a.to_string());
        }
        if let Some(want) = &self.basic
            && auth != Some(want.as_str())
        {
            return Response::builder()
                .status(401)
                .header("www-authenticate", r#"Basic realm="mock""#)
                .body(Body::empty())
                .unwrap();
        }
        let path = uri.path();
        if path.ends_with(&format!("/referrers/{IMAGE}")) {
            return reply(200, sample("olareg/referrers.json"));
        }
        if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
            return reply(200, sample("olareg/new-sig.manifest.json"));
        }
        if path.ends_with(&format!("/blobs/{SIG_BUNDLE}")) {
            return reply(200, sample("olareg/new-sig.bundle.json"));
        }
        reply(404, b"{}".to_vec())
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Serves `registry` on 127.0.0.1; returns `host:port`.
async fn serve(registry: Arc<MockRegistry>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
        let r = registry.clone();
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            r.answer(&uri, auth.as_deref())
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr.to_string()
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

fn key_policy(name: &str) -> Value {
    let key = String::from_utf8(sample("cosign.pub")).unwrap();
    json!({
        "name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1",
        // The sample was signed offline: no transparency log.
        "spec": {"images": [{"glob": "**"}], "authorities": [{"key": {"data": key}, "ctlog": {}}]},
    })
}

fn snapshot(revision: u64, policies: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "policy.sigil.dev/snapshot/v1",
        "revision": revision,
        "generatedAt": "2026-01-01T00:00:00Z",
        "policies": policies,
        "trustRoots": [],
    }))
    .unwrap()
}

fn client_config(metrics: Option<Arc<Metrics>>) -> ClientConfig {
    ClientConfig {
        allow_insecure_all: true,
        limits: Limits {
            request_timeout: Duration::from_secs(3),
            total_deadline: Duration::from_secs(5),
            ..Limits::default()
        },
        observer: metrics.map(|m| m as _),
        ..ClientConfig::default()
    }
}

fn policy_judge(config: ClientConfig, material: Option<Arc<MaterialCache>>) -> PolicyJudge {
    let root = TrustedRoot::public_good().unwrap();
    let judge = PolicyJudge::new(config, root, "public-good", NoMatchPolicy::Deny).unwrap();
    match material {
        Some(m) => judge.with_material_cache(m),
        None => judge,
    }
}

fn object(namespace: &str, pull_secrets: &[&str]) -> ObjectInfo {
    let dynamic: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": namespace}, "spec": {},
    }))
    .unwrap();
    ObjectInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        sub_resource: String::new(),
        kind: "Pod".into(),
        namespace: namespace.into(),
        name: "web".into(),
        labels: BTreeMap::new(),
        pull_secret_names: pull_secrets.iter().map(|s| (*s).to_string()).collect(),
        service_account: "default".into(),
        object: Arc::new(dynamic),
    }
}

fn pinned(host: &str) -> PinnedImage {
    PinnedImage {
        image: format!("{host}/test/app@{IMAGE}"),
        digest: IMAGE.into(),
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(8)
}

fn source(api: &FakeApi) -> KubePullSecrets {
    KubePullSecrets::new(api.client(), "sigil-system", Duration::from_secs(30))
}

fn basic_for(s: &PullSecrets, host: &str) -> Option<(String, String)> {
    match s.credentials.for_host(host) {
        Some(Credential::Basic { username, password }) => {
            Some((username.clone(), password.clone()))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Pull secrets.

#[tokio::test]
async fn dockerconfigjson_and_dockercfg_secrets_bind_credentials_to_their_hosts() {
    let api = FakeApi::default();
    api.put_secret(
        "shop",
        "new",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &docker_config("r1.example", "u1", "p1"),
    );
    let legacy = docker_config("r2.example:5000", "u2", "p2")["auths"].clone();
    api.put_secret(
        "shop",
        "old",
        "kubernetes.io/dockercfg",
        ".dockercfg",
        &legacy,
    );
    api.put_secret(
        "shop",
        "opaque",
        "Opaque",
        ".dockerconfigjson",
        &docker_config("r3.example", "u3", "p3"),
    );
    let names: Vec<String> = ["new", "old", "opaque"].map(String::from).to_vec();
    let s = source(&api)
        .pull_secrets("shop", &names, "default", deadline())
        .await
        .unwrap();
    assert_eq!(
        basic_for(&s, "r1.example"),
        Some(("u1".into(), "p1".into()))
    );
    assert_eq!(
        basic_for(&s, "r2.example:5000"),
        Some(("u2".into(), "p2".into()))
    );
    assert_eq!(
        basic_for(&s, "r3.example"),
        None,
        "Opaque secrets are not pull secrets"
    );
    assert!(s.id.starts_with("kube:"), "{}", s.id);
    assert!(
        !s.id.contains("p1") && !s.id.contains("u1"),
        "the id is a hash"
    );
    assert!(!format!("{s:?}").contains("p1"), "Debug redacts passwords");
}

#[tokio::test]
async fn the_service_accounts_secrets_are_used_when_the_pod_names_none() {
    let api = FakeApi::default();
    api.put_secret(
        "shop",
        "sa-cred",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &docker_config("r1.example", "sa", "pw"),
    );
    api.put_service_account("shop", "builder", &["sa-cred"]);
    let s = source(&api)
        .pull_secrets("shop", &[], "builder", deadline())
        .await
        .unwrap();
    assert_eq!(
        basic_for(&s, "r1.example"),
        Some(("sa".into(), "pw".into()))
    );
}

#[tokio::test]
async fn missing_secrets_and_service_accounts_are_skipped_like_the_kubelet_does() {
    let api = FakeApi::default();
    let s = source(&api)
        .pull_secrets("shop", &["gone".into()], "default", deadline())
        .await
        .unwrap();
    assert!(s.credentials.is_empty());
    assert_eq!(s.id, "anonymous");
    let s = source(&api)
        .pull_secrets("shop", &[], "nobody", deadline())
        .await
        .unwrap();
    assert_eq!(s.id, "anonymous");
}

#[tokio::test]
async fn an_api_error_fails_the_lookup_naming_the_secret_and_is_not_cached() {
    let api = FakeApi::default();
    api.fail("/api/v1/namespaces/shop/secrets/regcred", 500);
    let src = source(&api);
    let err = src
        .pull_secrets("shop", &["regcred".into()], "default", deadline())
        .await
        .unwrap_err();
    assert!(err.contains("shop/regcred"), "{err}");
    api.failing.lock().unwrap().clear();
    let ok = src
        .pull_secrets("shop", &["regcred".into()], "default", deadline())
        .await;
    assert!(ok.is_ok(), "the failure was not cached: {ok:?}");
}

#[tokio::test]
async fn a_malformed_pull_secret_is_an_error_that_does_not_echo_its_content() {
    let api = FakeApi::default();
    api.put_secret(
        "shop",
        "broken",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &json!({"auths": {"r1.example": {"auth": "c2VjcmV0LXdpdGhvdXQtY29sb24="}}}),
    );
    let err = source(&api)
        .pull_secrets("shop", &["broken".into()], "default", deadline())
        .await
        .unwrap_err();
    assert!(err.contains("shop/broken"), "{err}");
    assert!(
        !err.contains("secret-without-colon") && !err.contains("c2VjcmV0"),
        "{err}"
    );
}

#[tokio::test]
async fn pull_secrets_are_read_once_per_ttl() {
    let api = FakeApi::default();
    api.put_secret(
        "shop",
        "regcred",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &docker_config("r1.example", "u", "p"),
    );
    let src = source(&api);
    for _ in 0..5 {
        src.pull_secrets("shop", &["regcred".into()], "default", deadline())
            .await
            .unwrap();
    }
    assert_eq!(api.requests(), 1);
}

#[tokio::test]
async fn pull_secrets_outside_the_listed_namespaces_are_never_read() {
    let api = FakeApi::default();
    for ns in ["shop", "other"] {
        api.put_secret(
            ns,
            "regcred",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            &docker_config("r1.example", "u", "p"),
        );
        api.put_service_account(ns, "default", &["regcred"]);
    }
    let src = source(&api).only_in(vec!["shop".into()]);
    // Elsewhere: no Secret, no ServiceAccount read; anonymous, with a note
    // only when the object names pull secrets.
    let s = src
        .pull_secrets("other", &["regcred".into()], "default", deadline())
        .await
        .unwrap();
    assert_eq!(s.id, "anonymous");
    let note = s.note.unwrap();
    assert!(
        note.contains("namespace other") && note.contains("webhook.pullSecretNamespaces"),
        "{note}"
    );
    let s = src
        .pull_secrets("other", &[], "default", deadline())
        .await
        .unwrap();
    assert!(s.credentials.is_empty() && s.note.is_none());
    assert_eq!(api.requests(), 0, "nothing was read in namespace other");
    // Listed: read as usual.
    let s = src
        .pull_secrets("shop", &["regcred".into()], "default", deadline())
        .await
        .unwrap();
    assert!(basic_for(&s, "r1.example").is_some());
    assert!(api.requests() > 0);

    // Through a review: the object is verified anonymously and told why.
    let registry = Arc::new(MockRegistry::default());
    let host = serve(registry.clone()).await;
    let judge = policy_judge(client_config(None), None);
    judge
        .apply_bytes(&snapshot(1, json!([key_policy("signed")])))
        .unwrap();
    let admission = Admission::new(
        Arc::new(judge),
        source(&api).only_in(vec!["shop".into()]),
        config(),
        Arc::new(Metrics::new()),
    );
    let app = router(AppState::new(admission));
    let (_, answer) = post(
        &app,
        "/validate",
        pod_review("other", &[format!("{host}/test/app@{IMAGE}")], &["regcred"]),
    )
    .await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], true, "{answer}");
    assert!(
        common::warnings(resp)
            .iter()
            .any(|w| w.contains("did not read the pull secrets")),
        "{answer}"
    );
}

#[tokio::test]
async fn signature_pull_secrets_are_read_from_sigils_own_namespace() {
    let api = FakeApi::default();
    api.put_secret(
        "sigil-system",
        "sigs",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &docker_config("sigs.example", "s", "t"),
    );
    let s = source(&api)
        .signature_pull_secrets(&["sigs".into()], deadline())
        .await
        .unwrap();
    assert_eq!(
        basic_for(&s, "sigs.example"),
        Some(("s".into(), "t".into()))
    );
}

fn pod_review(namespace: &str, images: &[String], pull_secrets: &[&str]) -> Vec<u8> {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    let secrets: Vec<Value> = pull_secrets.iter().map(|s| json!({"name": s})).collect();
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "pod-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web", "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {"containers": containers, "imagePullSecrets": secrets},
            },
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn pull_secret_credentials_reach_only_their_registry_and_admit_a_private_image() {
    let private = Arc::new(MockRegistry {
        basic: Some(basic("robot", "s3cret")),
        ..MockRegistry::default()
    });
    let public = Arc::new(MockRegistry::default());
    let private_host = serve(private.clone()).await;
    let public_host = serve(public.clone()).await;
    let api = FakeApi::default();
    api.put_secret(
        "shop",
        "regcred",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &docker_config(&private_host, "robot", "s3cret"),
    );
    let judge = policy_judge(client_config(None), None);
    judge
        .apply_bytes(&snapshot(1, json!([key_policy("signed")])))
        .unwrap();
    let admission = Admission::new(
        Arc::new(judge),
        source(&api),
        config(),
        Arc::new(Metrics::new()),
    );
    let app = router(AppState::new(admission));
    let images = [
        format!("{private_host}/test/app@{IMAGE}"),
        format!("{public_host}/test/app@{IMAGE}"),
    ];

    let (_, answer) = post(&app, "/validate", pod_review("shop", &images, &["regcred"])).await;
    assert_eq!(response(&answer)["allowed"], true, "{answer}");
    assert!(public.requests() > 0);
    assert!(
        public.authorizations.lock().unwrap().is_empty(),
        "the public registry never sees the private one's credentials"
    );
    assert!(
        private
            .authorizations
            .lock()
            .unwrap()
            .iter()
            .all(|a| *a == basic("robot", "s3cret"))
    );

    // The same image in a namespace without the secret: denied for lack of
    // access, never answered from the verdict cached for "shop".
    let (_, answer) = post(&app, "/validate", pod_review("other", &images[..1], &[])).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{answer}");
    assert!(message(resp).contains("401"), "{}", message(resp));
}

#[tokio::test]
async fn an_api_error_reading_pull_secrets_denies_with_the_cause() {
    let registry = Arc::new(MockRegistry::default());
    let host = serve(registry.clone()).await;
    let api = FakeApi::default();
    api.fail("/api/v1/namespaces/shop/secrets/regcred", 403);
    let judge = policy_judge(client_config(None), None);
    judge
        .apply_bytes(&snapshot(1, json!([key_policy("signed")])))
        .unwrap();
    let admission = Admission::new(
        Arc::new(judge),
        source(&api),
        config(),
        Arc::new(Metrics::new()),
    );
    let app = router(AppState::new(admission));
    let image = format!("{host}/test/app@{IMAGE}");
    let (_, answer) = post(
        &app,
        "/validate",
        pod_review("shop", &[image], &["regcred"]),
    )
    .await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{answer}");
    let msg = message(resp);
    assert!(
        msg.contains("cannot read pull secrets") && msg.contains("shop/regcred"),
        "{msg}"
    );
    assert_eq!(
        registry.requests(),
        0,
        "nothing is fetched without the credentials"
    );
}

// ---------------------------------------------------------------------------
// Signature material cache and the registry request metric.

#[tokio::test]
async fn another_policy_reuses_the_signature_material_until_its_ttl() {
    let registry = Arc::new(MockRegistry::default());
    let host = serve(registry.clone()).await;
    let metrics = Arc::new(Metrics::new());
    let material = Arc::new(MaterialCache::new(Duration::from_millis(400), 100));
    let judge = policy_judge(client_config(Some(metrics.clone())), Some(material));
    let object = object("shop", &[]);
    let anonymous = PullSecrets::anonymous();

    // Two policies in one snapshot: evaluated concurrently, fetched once.
    judge
        .apply_bytes(&snapshot(1, json!([key_policy("a"), key_policy("b")])))
        .unwrap();
    let v = judge
        .judge(&pinned(&host), &object, &anonymous, deadline())
        .await;
    assert!(v.allowed, "{v:?}");
    let first = registry.requests();
    assert!(
        first > 0 && first <= 4,
        "{first} round trips for a cold image"
    );

    // A policy change: the verdict cache misses, the material does not.
    judge
        .apply_bytes(&snapshot(2, json!([key_policy("c")])))
        .unwrap();
    let v = judge
        .judge(&pinned(&host), &object, &anonymous, deadline())
        .await;
    assert!(v.allowed, "{v:?}");
    assert_eq!(
        registry.requests(),
        first,
        "no registry request for cached material"
    );

    // Other credentials never share it.
    let other = PullSecrets {
        credentials: {
            let mut c = sigil_registry::Credentials::anonymous();
            c.insert("elsewhere.example", Credential::Bearer("t".into()));
            c
        },
        id: "kube:other".into(),
        ..PullSecrets::default()
    };
    let v = judge
        .judge(&pinned(&host), &object, &other, deadline())
        .await;
    assert!(v.allowed, "{v:?}");
    assert_eq!(registry.requests(), 2 * first);

    // After the TTL, new signatures may exist: fetched again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v = judge
        .judge(&pinned(&host), &object, &anonymous, deadline())
        .await;
    assert!(v.allowed, "{v:?}");
    assert_eq!(registry.requests(), 3 * first);

    // Every request was counted by host and status.
    let counted: u64 = ["200", "404"]
        .iter()
        .map(|s| metrics.registry_count(&host, s))
        .sum();
    assert_eq!(counted, registry.requests() as u64);
    assert!(
        metrics.registry_count(&host, "404") >= 1,
        "the legacy .sig tag is absent"
    );
    let text = metrics.encode();
    assert!(
        text.contains(&format!(
            r#"sigil_registry_requests_total{{host="{host}",status="200"}}"#
        )),
        "{text}"
    );
    // And each one's wait for its answer was timed.
    assert!(
        text.contains(&format!(
            "sigil_registry_request_duration_seconds_count {}\n",
            registry.requests()
        )),
        "{text}"
    );
}

#[tokio::test]
async fn without_the_material_cache_every_verdict_fetches_again() {
    let registry = Arc::new(MockRegistry::default());
    let host = serve(registry.clone()).await;
    let judge = policy_judge(client_config(None), None);
    judge
        .apply_bytes(&snapshot(1, json!([key_policy("a")])))
        .unwrap();
    let object = object("shop", &[]);
    let anonymous = PullSecrets::anonymous();
    judge
        .judge(&pinned(&host), &object, &anonymous, deadline())
        .await;
    let first = registry.requests();
    judge
        .judge(&pinned(&host), &object, &anonymous, deadline())
        .await;
    assert_eq!(registry.requests(), 2 * first);
}

#[tokio::test]
async fn an_unreachable_registry_is_counted_as_a_connect_failure() {
    let metrics = Arc::new(Metrics::new());
    let client = RegistryClient::new(client_config(Some(metrics.clone()))).unwrap();
    let repo = Repository::parse("127.0.0.1:1/test/app").unwrap();
    let r = client.session().resolve_tag(&repo, "v1").await;
    assert!(r.is_err());
    assert!(metrics.registry_count("127.0.0.1:1", "connect") >= 1);
}

// ---------------------------------------------------------------------------
// An extra CA for private registries.

struct TestPki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

fn pki() -> TestPki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sigil test registry CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let server = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
    TestPki {
        ca_pem: ca.pem(),
        server: Arc::new(server),
    }
}

/// Serves `registry` over TLS on 127.0.0.1; returns `host:port`.
async fn serve_tls(registry: Arc<MockRegistry>, tls: Arc<rustls::ServerConfig>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(move |uri: Uri| {
        let r = registry.clone();
        async move { r.answer(&uri, None) }
    });
    tokio::spawn(sigil_webhook::server::serve_tls(
        listener,
        tls,
        app,
        sigil_webhook::server::ServeLimits::default(),
        Arc::new(sigil_webhook::metrics::Metrics::new()),
        std::future::pending(),
    ));
    addr.to_string()
}

#[tokio::test]
async fn a_private_registry_ca_is_trusted_only_when_given() {
    let pki = pki();
    let registry = Arc::new(MockRegistry::default());
    let host = serve_tls(registry.clone(), pki.server.clone()).await;
    let reference = format!("{host}/test/app@{IMAGE}");
    let policy = sigil_registry::image::ImagePolicy {
        verification: sigil_verifier::verify::VerificationPolicy {
            signer: sigil_verifier::verify::SignerPolicy::Key(
                sigil_verifier::crypto::PublicKey::from_pem(
                    &String::from_utf8(sample("cosign.pub")).unwrap(),
                )
                .unwrap(),
            ),
            require_tlog: false,
            key_hash: None,
        },
        want: sigil_registry::Want::Signatures,
    };
    let root = TrustedRoot::public_good().unwrap();
    let verify = |config: ClientConfig| {
        let reference = reference.clone();
        let policy = policy.clone();
        let root = root.clone();
        async move {
            let client = RegistryClient::new(config).unwrap();
            sigil_registry::image::verify_image(
                &reference,
                &policy,
                &root,
                &client,
                &sigil_registry::image::VerifyImageOptions::default(),
            )
            .await
        }
    };
    let https = |extra: Vec<u8>, metrics: Option<Arc<Metrics>>| ClientConfig {
        extra_roots_pem: extra,
        allow_insecure_all: false,
        ..client_config(metrics)
    };

    let metrics = Arc::new(Metrics::new());
    let refused = verify(https(Vec::new(), Some(metrics.clone()))).await;
    let err = refused.expect_err("an unknown CA is refused");
    assert!(err.to_string().contains("cannot reach registry"), "{err}");
    assert_eq!(
        registry.requests(),
        0,
        "no request got through the TLS handshake"
    );
    assert!(metrics.registry_count(&host, "connect") >= 1);

    let accepted = verify(https(pki.ca_pem.clone().into_bytes(), None)).await;
    assert!(accepted.is_ok(), "{accepted:?}");
    assert!(registry.requests() > 0);
}

#[test]
fn an_extra_ca_bundle_without_certificates_is_refused() {
    let r = RegistryClient::new(ClientConfig {
        extra_roots_pem: b"not a certificate".to_vec(),
        ..ClientConfig::default()
    });
    assert!(r.is_err());
}

// ---------------------------------------------------------------------------
// Readiness follows the snapshot.

#[tokio::test]
async fn readyz_is_unavailable_until_the_policy_snapshot_is_loaded() {
    let judge = Arc::new(policy_judge(client_config(None), None));
    let admission = Admission::new(
        judge.clone(),
        NoPullSecrets,
        config(),
        Arc::new(Metrics::new()),
    );
    let app = router(AppState::new(admission));
    let status = |app: Router| async move {
        let req = http::Request::get("/readyz").body(Body::empty()).unwrap();
        app.oneshot(req).await.unwrap().status()
    };
    assert_eq!(status(app.clone()).await, StatusCode::SERVICE_UNAVAILABLE);
    judge
        .apply_bytes(&snapshot(1, json!([key_policy("a")])))
        .unwrap();
    assert_eq!(status(app).await, StatusCode::OK);
}
