//! A planted registry credential never leaves the request it authenticates:
//! the webhook is driven through every path that handles it (pull secrets
//! read through the API, basic auth, a bearer-token exchange, refused
//! credentials, a redirect to another host, a malformed pull secret,
//! signature pull secrets, pinning and verification), with every log line
//! at TRACE level captured, and then every output — the logs in text and
//! JSON, `/metrics`, every AdmissionReview answer (denial messages and
//! warnings) — is searched for the credential in each form it takes.
//!
//! One test in its own binary: the log capture is process-wide.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, Response, Uri};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use common::{FakeApi, docker_config, post, response};
use serde_json::{Value, json};
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::{ClientConfig, Limits};
use sigil_verifier::trust::TrustedRoot;
use sigil_webhook::admit::{Admission, AdmissionConfig};
use sigil_webhook::metrics::Metrics;
use sigil_webhook::policy_judge::PolicyJudge;
use sigil_webhook::secrets::KubePullSecrets;
use sigil_webhook::server::{AppState, metrics_router, router};
use tokio::net::TcpListener;
use tower::ServiceExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

const USER: &str = "robot-planted";
const PASSWORD: &str = "pl4nted-Pa55w0rd-7f3a9c";
const TOKEN: &str = "pl4nted-t0ken-c0ffee-42";
const SIG_USER: &str = "sig-robot";
const SIG_PASSWORD: &str = "pl4nted-sig-Pa55-99e1";

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
const IMAGE: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Every event of every crate at TRACE, as text and as JSON.
fn capture_logs() -> Captured {
    let captured = Captured::default();
    let (text, json) = (captured.clone(), captured.clone());
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::TRACE)
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || text.clone()),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(move || json.clone()),
        );
    tracing::subscriber::set_global_default(subscriber).unwrap();
    captured
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{user}:{password}")))
}

/// How a registry authenticates.
#[derive(Clone)]
enum Auth {
    /// Basic with this header.
    Basic(String),
    /// A bearer token from `/token` on itself, given for this basic header.
    Token(String),
    /// Basic with this header, and blobs redirected to another host
    /// (storage), which must see no credential.
    BasicRedirectingBlobsTo(String, Arc<Mutex<String>>),
    /// Nothing.
    Open,
}

struct Mock {
    auth: Auth,
    authorizations: Mutex<Vec<String>>,
    requests: AtomicUsize,
}

impl Mock {
    fn answer(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Response<Body> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if let Some(a) = &auth {
            self.authorizations.lock().unwrap().push(a.clone());
        }
        let path = uri.path();
        let host = headers
            .get("host")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        match &self.auth {
            Auth::Basic(want) if auth.as_deref() != Some(want) => {
                return status(401, &[("www-authenticate", r#"Basic realm="mock""#.into())]);
            }
            Auth::Token(want_basic) => {
                if path == "/token" {
                    if auth.as_deref() != Some(want_basic) {
                        return status(401, &[]);
                    }
                    return json_reply(&json!({"token": TOKEN}));
                }
                if auth.as_deref() != Some(&format!("Bearer {TOKEN}")) {
                    return status(
                        401,
                        &[(
                            "www-authenticate",
                            format!(r#"Bearer realm="http://{host}/token",service="mock""#),
                        )],
                    );
                }
            }
            Auth::BasicRedirectingBlobsTo(want, _) if auth.as_deref() != Some(want) => {
                return status(401, &[("www-authenticate", r#"Basic realm="mock""#.into())]);
            }
            Auth::BasicRedirectingBlobsTo(_, storage) if path.contains("/blobs/") => {
                let to = storage.lock().unwrap().clone();
                return status(307, &[("location", format!("http://{to}/storage{path}"))]);
            }
            _ => {}
        }
        let body = if path.ends_with(&format!("/referrers/{IMAGE}")) {
            sample("olareg/referrers.json")
        } else if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
            sample("olareg/new-sig.manifest.json")
        } else if path.ends_with(&format!("/blobs/{SIG_BUNDLE}")) {
            sample("olareg/new-sig.bundle.json")
        } else if path.contains("/manifests/") && !path.contains("sha256") {
            // Any tag is the sample image.
            let mut r = status(200, &[("docker-content-digest", IMAGE.into())]);
            if method != Method::HEAD {
                *r.body_mut() = Body::from("{}");
            }
            return r;
        } else {
            return status(404, &[]);
        };
        Response::builder()
            .status(200)
            .body(Body::from(body))
            .unwrap()
    }
}

fn status(code: u16, headers: &[(&str, String)]) -> Response<Body> {
    let mut b = Response::builder().status(code);
    for (k, v) in headers {
        b = b.header(*k, v);
    }
    b.body(Body::empty()).unwrap()
}

fn json_reply(v: &Value) -> Response<Body> {
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap()
}

async fn serve(auth: Auth) -> (Arc<Mock>, String) {
    let mock = Arc::new(Mock {
        auth,
        authorizations: Mutex::new(Vec::new()),
        requests: AtomicUsize::new(0),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let served = mock.clone();
    let app = Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap| {
        let m = served.clone();
        async move { m.answer(&method, &uri, &headers) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (mock, addr)
}

/// A key policy; with `signatures` = (repository, secret), signatures are
/// read from that repository with that signature pull secret.
fn policy(name: &str, glob: &str, signatures: Option<(&str, &str)>) -> Value {
    let key = String::from_utf8(sample("cosign.pub")).unwrap();
    let mut authority = json!({"key": {"data": key}, "ctlog": {}});
    if let Some((oci, secret)) = signatures {
        authority["source"] = json!([{"oci": oci, "signaturePullSecrets": [{"name": secret}]}]);
    }
    json!({
        "name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1",
        "spec": {"images": [{"glob": glob}], "authorities": [authority]},
    })
}

fn review(uid: &str, images: &[String], pull_secrets: &[&str]) -> Vec<u8> {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    let secrets: Vec<Value> = pull_secrets.iter().map(|s| json!({"name": s})).collect();
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web", "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"containers": containers, "imagePullSecrets": secrets},
            },
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn planted_credentials_appear_in_no_log_metric_or_admission_answer() {
    let logs = capture_logs();
    let (basic_reg, basic_host) = serve(Auth::Basic(basic(USER, PASSWORD))).await;
    let (token_reg, token_host) = serve(Auth::Token(basic(USER, PASSWORD))).await;
    let (refusing_reg, refusing_host) = serve(Auth::Basic(basic(USER, "another-password"))).await;
    let storage_cell = Arc::new(Mutex::new(String::new()));
    let (redirecting_reg, redirecting_host) = serve(Auth::BasicRedirectingBlobsTo(
        basic(USER, PASSWORD),
        storage_cell.clone(),
    ))
    .await;
    let (storage, storage_host) = serve(Auth::Open).await;
    *storage_cell.lock().unwrap() = storage_host.clone();
    let (sig_reg, sig_host) = serve(Auth::Basic(basic(SIG_USER, SIG_PASSWORD))).await;

    // One pull secret for the pod's registries; one signature pull secret.
    let mut auths = serde_json::Map::new();
    for host in [&basic_host, &token_host, &refusing_host, &redirecting_host] {
        auths.insert(
            host.clone(),
            docker_config(host, USER, PASSWORD)["auths"][host.as_str()].clone(),
        );
    }
    let pod_config = json!({"auths": auths});
    let api = FakeApi::default();
    api.put_secret(
        "shop",
        "regcred",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &pod_config,
    );
    api.put_secret(
        "sigil-system",
        "sigcred",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &docker_config(&sig_host, SIG_USER, SIG_PASSWORD),
    );
    // Malformed: the password without its user (no colon in `auth`).
    api.put_secret(
        "shop",
        "broken",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &json!({"auths": {basic_host.clone(): {"auth": STANDARD.encode(PASSWORD)}}}),
    );

    let metrics = Arc::new(Metrics::new());
    let judge = PolicyJudge::new(
        ClientConfig {
            allow_insecure_all: true,
            addresses: sigil_registry::AddressPolicy::standard(),
            observer: Some(metrics.clone()),
            limits: Limits {
                request_timeout: Duration::from_secs(3),
                total_deadline: Duration::from_secs(5),
                ..Limits::default()
            },
            ..ClientConfig::default()
        },
        TrustedRoot::public_good().unwrap(),
        "public-good",
        NoMatchPolicy::Deny,
    )
    .unwrap();
    judge
        .apply_bytes(
            &serde_json::to_vec(&json!({
                "apiVersion": "policy.sigil.dev/snapshot/v1", "revision": 1,
                "generatedAt": "2026-01-01T00:00:00Z", "trustRoots": [],
                "policies": [
                    policy("pods", "127.0.0.1:*/team/**", None),
                    policy(
                        "signatures",
                        &format!("{sig_host}/sig/**"),
                        Some((&format!("{sig_host}/sig/signatures"), "sigcred")),
                    ),
                ],
            }))
            .unwrap(),
        )
        .unwrap();
    let secrets = KubePullSecrets::new(api.client(), "sigil-system", Duration::from_secs(30));
    let admission = Admission::new(
        Arc::new(judge),
        secrets,
        AdmissionConfig {
            excluded_namespaces: vec!["kube-system".into(), "sigil-system".into()],
            ..AdmissionConfig::default()
        },
        metrics.clone(),
    );
    let state = AppState::new(admission);
    let app = router(state.clone());

    let mut answers = Vec::new();
    let mut send = async |path: &str, body: Vec<u8>| {
        let (_, answer) = post(&app, path, body).await;
        answers.push(answer.to_string());
        answer
    };
    let pinned = |host: &str| format!("{host}/team/app@{IMAGE}");
    // Allowed through basic auth and through a token exchange.
    for host in [&basic_host, &token_host] {
        let a = send("/validate", review("ok", &[pinned(host)], &["regcred"])).await;
        assert_eq!(response(&a)["allowed"], true, "{host}: {a}");
    }
    // Tags pinned with the credentials.
    let a = send(
        "/mutate",
        review(
            "pin",
            &[
                format!("{basic_host}/team/app:1"),
                format!("{token_host}/team/app:1"),
            ],
            &["regcred"],
        ),
    )
    .await;
    assert_eq!(response(&a)["allowed"], true, "{a}");
    // Credentials refused: a denial naming the registry, not the secret.
    let a = send(
        "/validate",
        review("refused", &[pinned(&refusing_host)], &["regcred"]),
    )
    .await;
    assert_eq!(response(&a)["allowed"], false, "{a}");
    // A blob redirect to another host.
    let a = send(
        "/validate",
        review("redirect", &[pinned(&redirecting_host)], &["regcred"]),
    )
    .await;
    assert_eq!(response(&a)["allowed"], true, "{a}");
    // A malformed pull secret.
    let a = send(
        "/validate",
        review("broken", &[pinned(&basic_host)], &["broken"]),
    )
    .await;
    assert_eq!(response(&a)["allowed"], false, "{a}");
    // Signature pull secrets, for a registry of their own.
    let a = send(
        "/validate",
        review("sig", &[format!("{sig_host}/sig/app@{IMAGE}")], &[]),
    )
    .await;
    assert_eq!(response(&a)["allowed"], true, "{a}");

    // The credentials were really used: each registry saw them, the storage
    // host behind the redirect did not.
    assert!(
        basic_reg
            .authorizations
            .lock()
            .unwrap()
            .contains(&basic(USER, PASSWORD))
    );
    assert!(
        token_reg
            .authorizations
            .lock()
            .unwrap()
            .contains(&basic(USER, PASSWORD))
    );
    assert!(
        refusing_reg
            .authorizations
            .lock()
            .unwrap()
            .contains(&basic(USER, PASSWORD))
    );
    assert!(
        redirecting_reg
            .authorizations
            .lock()
            .unwrap()
            .contains(&basic(USER, PASSWORD))
    );
    assert!(
        storage.requests.load(Ordering::SeqCst) > 0,
        "the redirect was followed"
    );
    assert!(
        storage.authorizations.lock().unwrap().is_empty(),
        "no credential crossed the redirect to another host"
    );
    assert!(
        sig_reg
            .authorizations
            .lock()
            .unwrap()
            .contains(&basic(SIG_USER, SIG_PASSWORD))
    );

    let metrics_text = {
        let req = Request::get("/metrics").body(Body::empty()).unwrap();
        let resp = metrics_router(state).oneshot(req).await.unwrap();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    };
    assert!(
        metrics_text.contains("sigil_registry_requests_total"),
        "{metrics_text}"
    );
    let log_text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(log_text.contains("admission decision"), "the capture works");

    let forms = [
        PASSWORD.to_string(),
        TOKEN.to_string(),
        SIG_PASSWORD.to_string(),
        STANDARD.encode(format!("{USER}:{PASSWORD}")),
        STANDARD_NO_PAD.encode(format!("{USER}:{PASSWORD}")),
        STANDARD.encode(format!("{SIG_USER}:{SIG_PASSWORD}")),
        STANDARD.encode(PASSWORD),
        STANDARD.encode(pod_config.to_string()),
    ];
    let outputs = [
        ("logs (text and JSON, TRACE)", log_text.as_str()),
        ("/metrics", metrics_text.as_str()),
        ("admission answers", &answers.join("\n")),
    ];
    for (what, text) in outputs {
        for form in &forms {
            assert!(
                !text.contains(form.as_str()),
                "{what} contain a planted credential ({form})"
            );
        }
    }
    println!(
        "searched {} bytes of logs, {} of metrics, {} answers for {} credential forms: none found",
        log_text.len(),
        metrics_text.len(),
        answers.len(),
        forms.len()
    );
}
