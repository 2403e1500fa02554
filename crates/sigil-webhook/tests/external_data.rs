//! sigil as a Gatekeeper external-data provider: ProviderRequests shaped as
//! Gatekeeper sends them (several keys, an empty list, another version or
//! kind, oversized bodies) through the provider's router with `oneshot`, each
//! key's verdict compared with `/validate`'s answer for a Pod with that
//! image in the same test; and the provider's own listener on 127.0.0.1,
//! which refuses clients without a certificate or with one from another CA.

// Test glue: helpers outside #[test] functions may unwrap.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{AnyCert, FakeJudge, app_with, config, digest_of, message, post, response, warnings};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use sigil_webhook::admit::AdmissionConfig;
use sigil_webhook::external_data::{
    self, API_VERSION, ExternalDataConfig, ExternalDataSettings, ProviderState,
};
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::ServeLimits;
use sigil_webhook::tls::CertFiles;
use sigil_webhook::{ServerSettings, start};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tower::ServiceExt as _;

/// A ProviderRequest as Gatekeeper's client writes it.
fn provider_request(keys: &[Value]) -> Vec<u8> {
    json!({"apiVersion": API_VERSION, "kind": "ProviderRequest", "request": {"keys": keys}})
        .to_string()
        .into_bytes()
}

/// The provider's router and `/validate`'s, over one judge and one state.
fn routers(
    judge: Arc<FakeJudge>,
    admission: AdmissionConfig,
    provider: ExternalDataConfig,
) -> (Router, Router, common::State) {
    let (webhook, state) = app_with(judge, admission);
    let provider = external_data::router(Arc::new(ProviderState {
        app: state.clone(),
        config: provider,
    }));
    (provider, webhook, state)
}

/// POSTs `body` to the provider; the status and the ProviderResponse's
/// `response`, checked to be well formed.
async fn ask(router: &Router, body: Vec<u8>) -> Value {
    let req = Request::post(external_data::PATH)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "Gatekeeper reads the body of a 200"
    );
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20)
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(answer["apiVersion"], API_VERSION, "{answer}");
    assert_eq!(answer["kind"], "ProviderResponse", "{answer}");
    assert_eq!(answer["response"]["idempotent"], true, "{answer}");
    answer["response"].clone()
}

/// `/validate`'s answer for a Pod `web` in `shop` running `image` in its
/// container `app`: (allowed, message, warnings).
async fn webhook_answer(webhook: &Router, image: &str) -> (bool, String, Vec<String>) {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "pod-gk", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web", "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "web", "namespace": "shop"},
                       "spec": {"containers": [{"name": "app", "image": image}]}}
        }
    });
    let (status, answer) = post(webhook, "/validate", review.to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::OK);
    let resp = response(&answer);
    (
        resp["allowed"].as_bool().unwrap(),
        message(resp),
        warnings(resp),
    )
}

/// What `/validate` must answer for a Pod with `image` if the provider's
/// `item` for it speaks `/validate`'s words: the same allow or deny, the
/// denial's line for the image carrying the item's message (or error), and
/// the same warnings.
fn as_webhook_would_say(image: &str, item: &Value) -> (bool, String, Vec<String>) {
    let value = &item["value"];
    let judged = value.is_object();
    let allowed = judged && value["allowed"] == true;
    let warnings: Vec<String> = value["warnings"]
        .as_array()
        .map(|w| w.iter().map(|w| w.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    if allowed {
        return (true, String::new(), warnings);
    }
    let why = if judged {
        value["message"].as_str().unwrap()
    } else {
        item["error"].as_str().unwrap()
    };
    let at = match value["digest"].as_str() {
        Some(d) if !image.contains('@') => format!("{d}, "),
        _ => String::new(),
    };
    (
        false,
        format!(
            "sigil denied pod shop/web: 1 of 1 image(s) failed verification\n- image {image} ({at}container app): {why}"
        ),
        warnings,
    )
}

fn item_for<'a>(items: &'a [Value], key: &str) -> &'a Value {
    items
        .iter()
        .find(|i| i["key"] == key)
        .unwrap_or_else(|| panic!("no item for {key}: {items:?}"))
}

#[tokio::test]
async fn each_key_gets_the_verdict_and_words_validate_gives_a_pod_with_that_image() {
    let signed_pinned = format!(
        "registry.test/team/app@{}",
        digest_of("registry.test/team/app:1.0")
    );
    let images = [
        signed_pinned.as_str(),
        "registry.test/team/app:1.0",
        "registry.test/team/unsigned:2.0",
        "registry.test/team/warn-only:3",
        "registry.test/team/unmatched:1",
        "registry.down/team/app:1",
        "registry.test/team/app@sha256:not-hex",
        "Not A Reference!",
    ];
    for admission in [config(), common::strict_config()] {
        let judge = FakeJudge::new();
        let (provider, webhook, state) = routers(
            judge.clone(),
            admission.clone(),
            ExternalDataConfig::default(),
        );
        let keys: Vec<Value> = images.iter().map(|i| json!(format!("shop#{i}"))).collect();
        let answer = ask(&provider, provider_request(&keys)).await;
        assert_eq!(answer["systemError"], "", "{answer}");
        let items = answer["items"].as_array().unwrap();
        assert_eq!(items.len(), images.len(), "one item per key: {answer}");
        for (item, key) in items.iter().zip(&keys) {
            assert_eq!(&item["key"], key, "items come in the keys' order");
        }
        for image in images {
            let item = item_for(items, &format!("shop#{image}"));
            let expected = as_webhook_would_say(image, item);
            let got = webhook_answer(&webhook, image).await;
            assert_eq!(
                got, expected,
                "allow_unpinned={}: {image}: the provider said {item}",
                admission.allow_unpinned
            );
        }
        let unsigned = item_for(items, "shop#registry.test/team/unsigned:2.0");
        if admission.allow_unpinned {
            assert_eq!(unsigned["value"]["allowed"], false, "{unsigned}");
            assert_eq!(unsigned["value"]["outcome"], "denied");
            assert!(
                unsigned["value"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("authority release-key (key): no signature found"),
                "{unsigned}"
            );
            let signed = item_for(items, &format!("shop#{signed_pinned}"));
            assert_eq!(signed["value"]["allowed"], true, "{signed}");
            assert_eq!(signed["value"]["outcome"], "allowed", "{signed}");
            assert!(signed.get("error").is_none(), "{signed}");
            let warned = item_for(items, "shop#registry.test/team/warn-only:3");
            assert_eq!(warned["value"]["outcome"], "warned", "{warned}");
        } else {
            assert!(
                unsigned["error"]
                    .as_str()
                    .unwrap()
                    .contains("reached validation as a tag"),
                "with pinning on, a tag is refused as /validate refuses it: {unsigned}"
            );
        }
        let down = item_for(items, "shop#registry.down/team/app:1");
        if admission.allow_unpinned {
            assert!(
                down["error"].as_str().unwrap().contains("503"),
                "a key that could not be judged says why in `error`: {down}"
            );
        }
        let metrics = state.admission.metrics().encode();
        assert!(
            metrics.contains("sigil_external_data_requests_total{outcome=\"answered\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("sigil_external_data_keys_total{outcome=\"error\"}"),
            "{metrics}"
        );
    }
}

#[tokio::test]
async fn a_bare_image_is_judged_by_cluster_policies_and_an_excluded_namespace_is_skipped() {
    let judge = FakeJudge::new();
    let (provider, _, _) = routers(judge.clone(), config(), ExternalDataConfig::default());
    let keys = [
        json!("registry.test/team/unsigned:2.0"),
        json!("kube-system#registry.test/team/unsigned:2.0"),
        json!("registry.test/team/unsigned:2.0"),
    ];
    let answer = ask(&provider, provider_request(&keys)).await;
    let items = answer["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["value"]["outcome"], "denied", "{answer}");
    assert_eq!(items[0], items[2], "a repeated key gets the same answer");
    assert_eq!(items[1]["value"]["allowed"], true, "{answer}");
    assert_eq!(items[1]["value"]["outcome"], "skipped", "{answer}");
    let seen = judge.seen_objects.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec!["pod /(generated name)".to_string()],
        "judged once, as a Pod outside any namespace; never for kube-system"
    );
}

#[tokio::test]
async fn malformed_keys_get_an_error_each_and_the_others_still_their_verdict() {
    let (provider, _, _) = routers(FakeJudge::new(), config(), ExternalDataConfig::default());
    let keys = [
        json!(42),
        json!(""),
        json!("Shop#registry.test/team/app:1.0"),
        json!("shop#"),
        json!("x".repeat(5000)),
        json!("shop#registry.test/team/app:1.0"),
    ];
    let answer = ask(&provider, provider_request(&keys)).await;
    assert_eq!(answer["systemError"], "", "{answer}");
    let items = answer["items"].as_array().unwrap();
    assert_eq!(items.len(), keys.len());
    let errors: Vec<&str> = items[..5]
        .iter()
        .map(|i| {
            assert!(i.get("value").is_none(), "{i}");
            i["error"].as_str().unwrap()
        })
        .collect();
    assert!(
        errors[0].contains("a number, not a string"),
        "{}",
        errors[0]
    );
    assert!(errors[1].contains("names no image"), "{}", errors[1]);
    assert!(
        errors[2].contains("`Shop` before `#` is not a namespace name"),
        "{}",
        errors[2]
    );
    assert!(errors[3].contains("names no image"), "{}", errors[3]);
    assert!(
        errors[4].contains("more than sigil's limit of 4096"),
        "{}",
        errors[4]
    );
    assert_eq!(items[5]["value"]["allowed"], true, "{answer}");
    assert_eq!(items[0]["key"], 42, "a key is echoed as it was sent");
}

#[tokio::test]
async fn an_empty_or_missing_key_list_gets_no_items_and_no_error() {
    let (provider, _, state) = routers(FakeJudge::new(), config(), ExternalDataConfig::default());
    for body in [
        provider_request(&[]),
        // Gatekeeper's client omits an empty list (`omitempty`).
        json!({"apiVersion": API_VERSION, "kind": "ProviderRequest", "request": {}})
            .to_string()
            .into_bytes(),
    ] {
        let answer = ask(&provider, body).await;
        assert_eq!(answer["items"], json!([]), "{answer}");
        assert_eq!(answer["systemError"], "", "{answer}");
    }
    assert!(
        state
            .admission
            .metrics()
            .encode()
            .contains("sigil_external_data_requests_total{outcome=\"answered\"} 2")
    );
}

#[tokio::test]
async fn another_version_or_kind_unreadable_or_oversized_requests_get_a_system_error() {
    let bounds = ExternalDataConfig {
        max_keys: 3,
        max_body_bytes: 4096,
        ..ExternalDataConfig::default()
    };
    let (provider, _, state) = routers(FakeJudge::new(), config(), bounds);
    let cases: Vec<(Vec<u8>, &str)> =
        vec![
        (
            json!({"apiVersion": "externaldata.gatekeeper.sh/v1alpha1", "kind": "ProviderRequest",
                   "request": {"keys": ["nginx"]}})
            .to_string()
            .into_bytes(),
            "got ProviderRequest externaldata.gatekeeper.sh/v1alpha1",
        ),
        (
            json!({"apiVersion": API_VERSION, "kind": "ProviderResponse", "response": {}})
                .to_string()
                .into_bytes(),
            "got ProviderResponse",
        ),
        (b"{\"apiVersion\": ".to_vec(), "could not read the ProviderRequest"),
        (
            provider_request(&[json!("a"), json!("b"), json!("c"), json!("d")]),
            "4 keys, more than sigil's limit of 3",
        ),
        (
            provider_request(&[json!("x".repeat(5000))]),
            "larger than sigil's limit of 4096 bytes",
        ),
    ];
    for (body, expected) in cases {
        let answer = ask(&provider, body).await;
        let why = answer["systemError"].as_str().unwrap();
        assert!(why.contains(expected), "{why}");
        assert_eq!(answer["items"], json!([]), "{answer}");
    }
    let metrics = state.admission.metrics().encode();
    assert!(
        metrics.contains("sigil_external_data_requests_total{outcome=\"system-error\"} 5"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_key_still_unjudged_at_the_deadline_gets_an_error_within_the_timeout() {
    let bounds = ExternalDataConfig {
        timeout: Duration::from_secs(1),
        margin: Duration::from_millis(500),
        ..ExternalDataConfig::default()
    };
    let (provider, _, _) = routers(FakeJudge::new(), config(), bounds);
    let keys = [
        json!("registry.test/team/slow:1"),
        json!("registry.test/team/app:1.0"),
    ];
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        ask(&provider, provider_request(&keys)),
    )
    .await
    .expect("the provider answers by its deadline");
    let items = answer["items"].as_array().unwrap();
    let why = items[0]["error"].as_str().unwrap();
    assert!(
        why.contains("registry registry.test may be slow or unreachable"),
        "{answer}"
    );
    assert!(
        why.contains("raise the Gatekeeper Provider's spec.timeout") && why.contains("now 1s"),
        "the cause names the provider's own timeout, not the webhook's: {why}"
    );
    assert_eq!(items[1]["value"]["allowed"], true, "{answer}");
}

// --- the listener: mutual TLS on 127.0.0.1 ---

/// A CA and a client certificate it issued, as Gatekeeper's cert-controller
/// makes them (RSA, server and client authentication).
struct ClientPki {
    ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// Another certificate of the same CA, without the client-authentication
    /// usage (Gatekeeper adds it only when its external data is on).
    server_only: Option<Box<ClientPki>>,
}

/// A leaf certificate for Gatekeeper's webhook Service signed by `issuer`.
fn leaf_of(
    issuer: &Issuer<'_, &KeyPair>,
    ca_pem: &str,
    usages: Vec<ExtendedKeyUsagePurpose>,
) -> ClientPki {
    let leaf_key = KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
    let mut leaf = CertificateParams::new(vec![
        "gatekeeper-webhook-service.gatekeeper-system.svc".into(),
    ])
    .unwrap();
    leaf.extended_key_usages = usages;
    let leaf_cert = leaf.signed_by(&leaf_key, issuer).unwrap();
    ClientPki {
        ca_pem: ca_pem.to_string(),
        chain: vec![leaf_cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        server_only: None,
    }
}

fn client_pki(name: &str) -> ClientPki {
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, format!("{name}-ca"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::from_params(&ca, &ca_key);
    let mut pki = leaf_of(
        &issuer,
        &ca_pem,
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    );
    pki.server_only = Some(Box::new(leaf_of(
        &issuer,
        &ca_pem,
        vec![ExtendedKeyUsagePurpose::ServerAuth],
    )));
    pki
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn connector(identity: Option<&ClientPki>) -> TlsConnector {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)));
    let mut config = match identity {
        Some(pki) => builder
            .with_client_auth_cert(pki.chain.clone(), pki.key.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// POSTs `body` to the provider over TLS as `identity`; the raw HTTP answer,
/// or why none came.
async fn post_tls(
    addr: SocketAddr,
    identity: Option<&ClientPki>,
    body: &[u8],
) -> Result<String, String> {
    let exchange = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let mut tls = connector(identity)
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            external_data::PATH,
            body.len()
        );
        tls.write_all(head.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(body).await.map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        tls.read_to_end(&mut answer)
            .await
            .map_err(|e| format!("read: {e}"))?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| "no answer within 10 s".to_string())?
}

/// A directory with a serving pair for 127.0.0.1 and `client_ca` as the
/// provider's client CA bundle, and the server started on it (certificate
/// files polled every 100 ms).
async fn serve_provider(
    client_ca: &str,
) -> (TempDir, sigil_webhook::Running<FakeJudge, NoPullSecrets>) {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "sigil-gk-mtls-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let serving = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    std::fs::write(dir.0.join("tls.crt"), serving.cert.pem()).unwrap();
    std::fs::write(dir.0.join("tls.key"), serving.signing_key.serialize_pem()).unwrap();
    std::fs::write(dir.0.join("client-ca.crt"), client_ca).unwrap();
    let settings = ServerSettings {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: "127.0.0.1:0".parse().unwrap(),
        cert: CertFiles {
            cert: dir.0.join("tls.crt"),
            key: dir.0.join("tls.key"),
        },
        cert_poll: Duration::from_millis(100),
        admission: config(),
        limits: ServeLimits {
            drain: Duration::from_secs(5),
            ..ServeLimits::default()
        },
        external_data: Some(ExternalDataSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            client_ca: dir.0.join("client-ca.crt"),
            config: ExternalDataConfig::default(),
        }),
    };
    let running = start(FakeJudge::new(), NoPullSecrets, settings)
        .await
        .unwrap();
    (dir, running)
}

/// Whether `identity` gets an HTTP answer from the provider at `addr`.
async fn served(addr: SocketAddr, identity: &ClientPki) -> bool {
    let body = provider_request(&[json!("registry.test/team/app:1.0")]);
    post_tls(addr, Some(identity), &body)
        .await
        .is_ok_and(|answer| answer.starts_with("HTTP/1.1 200"))
}

#[tokio::test]
async fn the_provider_listener_serves_only_clients_with_a_certificate_from_its_ca() {
    let gatekeeper = client_pki("gatekeeper");
    let stranger = client_pki("stranger");
    let (_dir, running) = serve_provider(&gatekeeper.ca_pem).await;
    let addr = running.external_data_addr.expect("the provider listens");
    assert_ne!(addr, running.addr, "a listener of its own");
    let body = provider_request(&[json!("registry.test/team/unsigned:2.0")]);

    let accepted = post_tls(addr, Some(&gatekeeper), &body).await.unwrap();
    assert!(accepted.starts_with("HTTP/1.1 200"), "{accepted}");
    let json_start = accepted.find("\r\n\r\n").unwrap() + 4;
    let answer: Value = serde_json::from_str(&accepted[json_start..]).unwrap();
    assert_eq!(answer["kind"], "ProviderResponse", "{answer}");
    assert_eq!(
        answer["response"]["items"][0]["value"]["outcome"], "denied",
        "{answer}"
    );

    let server_only = gatekeeper.server_only.as_deref().unwrap();
    for (who, identity) in [
        ("no certificate", None),
        ("another CA", Some(&stranger)),
        (
            "a certificate of the CA not for client authentication",
            Some(server_only),
        ),
    ] {
        match post_tls(addr, identity, &body).await {
            Err(_) => {}
            Ok(answer) => assert!(
                !answer.contains("HTTP/1.1"),
                "a client with {who} got an HTTP answer: {answer}"
            ),
        }
    }
    // The admission port itself asks for no client certificate.
    assert!(post_tls(running.addr, None, b"").await.is_ok());
    running.shutdown().await;
}

#[tokio::test]
async fn a_client_ca_file_without_a_certificate_stops_the_start_and_names_the_file() {
    let dir = std::env::temp_dir().join(format!("sigil-gk-noca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = TempDir(dir);
    let serving = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    std::fs::write(dir.0.join("tls.crt"), serving.cert.pem()).unwrap();
    std::fs::write(dir.0.join("tls.key"), serving.signing_key.serialize_pem()).unwrap();
    std::fs::write(dir.0.join("empty.crt"), "not a certificate\n").unwrap();
    let settings = ServerSettings {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: "127.0.0.1:0".parse().unwrap(),
        cert: CertFiles {
            cert: dir.0.join("tls.crt"),
            key: dir.0.join("tls.key"),
        },
        cert_poll: Duration::from_secs(60),
        admission: config(),
        limits: ServeLimits::default(),
        external_data: Some(ExternalDataSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            client_ca: dir.0.join("empty.crt"),
            config: ExternalDataConfig::default(),
        }),
    };
    let Err(err) = start(FakeJudge::new(), NoPullSecrets, settings).await else {
        panic!("started without a client CA");
    };
    let text = err.to_string();
    assert!(text.contains("empty.crt"), "{text}");
    assert!(text.contains("gatekeeper-webhook-server-cert"), "{text}");
}

// --- the chart's ConstraintTemplate, evaluated against the provider ---

/// The Rego of the chart's SigilVerifiedImages ConstraintTemplate, for the
/// Provider named `sigil`.
fn template_rego() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/sigil/templates/gatekeeper.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find("      rego: |\n")
        .expect("the template has a rego block")
        + 14;
    let block: Vec<&str> = text[start..]
        .lines()
        .take_while(|l| !l.starts_with("{{-"))
        .map(|l| l.strip_prefix("        ").unwrap_or(l))
        .collect();
    block.join("\n").replace("{{ $gk.providerName }}", "sigil")
}

/// Evaluates the template's violations for `review` (Gatekeeper's
/// `input.review`), its `external_data` answered with what the provider
/// answers for the keys sent; also returns the keys the Rego sent.
async fn violations(provider: &Router, review: Value) -> (Vec<String>, Vec<String>) {
    // Gatekeeper turns a ProviderResponse into this for Rego.
    let spec = review["object"]["spec"].clone();
    let pod_spec = if spec.get("template").is_some() {
        spec["template"]["spec"].clone()
    } else {
        spec
    };
    let namespace = review["namespace"].as_str().unwrap_or_default().to_string();
    let mut images: Vec<String> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| pod_spec[list].as_array().cloned().unwrap_or_default())
        .map(|c| c["image"].as_str().unwrap().to_string())
        .collect();
    images.sort();
    images.dedup();
    let keys: Vec<Value> = images
        .iter()
        .map(|i| json!(format!("{namespace}#{i}")))
        .collect();
    let answer = ask(provider, provider_request(&keys)).await;
    let items = answer["items"].as_array().unwrap().clone();
    let system_error = answer["systemError"].clone();
    let sent: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let seen = sent.clone();
    let external_data = move |args: Vec<regorus::Value>| -> anyhow::Result<regorus::Value> {
        let request: Value = serde_json::from_str(&args[0].to_json_str()?)?;
        assert_eq!(request["provider"], "sigil");
        let mut responses = Vec::new();
        let mut errors = Vec::new();
        for key in request["keys"].as_array().unwrap() {
            seen.lock().unwrap().push(key.as_str().unwrap().to_string());
            let item = items.iter().find(|i| &i["key"] == key).unwrap();
            match item.get("value") {
                Some(v) => responses.push(json!([key, v])),
                None => errors.push(json!([key, item["error"]])),
            }
        }
        let rego = json!({"responses": responses, "errors": errors,
                          "status_code": 200, "system_error": system_error});
        regorus::Value::from_json_str(&rego.to_string())
    };
    let mut engine = regorus::Engine::new();
    engine.set_rego_v0(true);
    engine
        .add_policy("template.rego".into(), template_rego())
        .unwrap();
    engine
        .add_extension("external_data".into(), 1, Box::new(external_data))
        .unwrap();
    engine
        .set_input(regorus::Value::from_json_str(&json!({"review": review}).to_string()).unwrap());
    let result = engine
        .eval_rule("data.sigilverifiedimages.violation".into())
        .unwrap();
    let result: Value = serde_json::from_str(&result.to_json_str().unwrap()).unwrap();
    let mut messages: Vec<String> = result
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["msg"].as_str().unwrap().to_string())
        .collect();
    messages.sort();
    let mut sent = sent.lock().unwrap().clone();
    sent.sort();
    (messages, sent)
}

#[tokio::test]
async fn the_chart_template_reports_each_denied_image_of_every_container_list_in_sigils_words() {
    let (provider, webhook, _) = routers(FakeJudge::new(), config(), ExternalDataConfig::default());
    let review = json!({
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "shop", "operation": "CREATE",
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                   "spec": {
                       "initContainers": [{"name": "init", "image": "registry.down/team/init:1"}],
                       "containers": [{"name": "app", "image": "registry.test/team/app:1.0"},
                                      {"name": "side", "image": "registry.test/team/unsigned:2.0"}],
                       "ephemeralContainers": [{"name": "dbg", "image": "registry.test/team/unmatched:1"}]}}
    });
    let (messages, sent) = violations(&provider, review).await;
    assert_eq!(
        sent,
        [
            "shop#registry.down/team/init:1",
            "shop#registry.test/team/app:1.0",
            "shop#registry.test/team/unmatched:1",
            "shop#registry.test/team/unsigned:2.0",
        ],
        "one key per image of every list, with the namespace"
    );
    // The words after the image are those of /validate's line for it.
    let mut expected = Vec::new();
    for image in [
        "registry.down/team/init:1",
        "registry.test/team/unmatched:1",
        "registry.test/team/unsigned:2.0",
    ] {
        let (allowed, message, _) = webhook_answer(&webhook, image).await;
        assert!(!allowed, "{image}");
        let (_, why) = message.split_once("container app): ").unwrap();
        expected.push(format!("sigil denied image {image}: {why}"));
    }
    expected.sort();
    assert_eq!(messages, expected);

    let deployment = json!({
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "namespace": "shop", "operation": "CREATE",
        "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                   "spec": {"template": {"spec": {"containers": [
                       {"name": "app", "image": "registry.test/team/app:1.0"}]}}}}
    });
    let (messages, sent) = violations(&provider, deployment).await;
    assert_eq!(
        sent,
        ["shop#registry.test/team/app:1.0"],
        "a pod template's images too"
    );
    assert!(
        messages.is_empty(),
        "an admitted image is no violation: {messages:?}"
    );
}

#[tokio::test]
async fn a_renewed_gatekeeper_ca_is_trusted_without_a_restart_and_the_old_one_no_longer() {
    let old = client_pki("gatekeeper-old");
    let new = client_pki("gatekeeper-new");
    let (dir, running) = serve_provider(&old.ca_pem).await;
    let addr = running.external_data_addr.unwrap();
    assert!(served(addr, &old).await);
    assert!(
        !served(addr, &new).await,
        "not trusted before the bundle changes"
    );

    // The mounted Secret is updated in one step (a rename here).
    let tmp = dir.0.join("client-ca.crt.tmp");
    std::fs::write(&tmp, &new.ca_pem).unwrap();
    std::fs::rename(&tmp, dir.0.join("client-ca.crt")).unwrap();
    let mut trusted = false;
    for _ in 0..100 {
        if served(addr, &new).await {
            trusted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(trusted, "the new CA was not picked up within 10 s");
    assert!(
        !served(addr, &old).await,
        "the replaced CA is no longer trusted"
    );

    // A bundle that does not parse leaves the one in force.
    std::fs::write(&tmp, "not a certificate\n").unwrap();
    std::fs::rename(&tmp, dir.0.join("client-ca.crt")).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(served(addr, &new).await);
    running.shutdown().await;
}
