//! Test glue: a fake judge whose verdicts follow the image name, and helpers
//! to send fixtures through the router with `oneshot`.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use sigil_webhook::admit::{Admission, AdmissionConfig};
use sigil_webhook::judge::{ImageJudge, ObjectInfo, PinnedImage, PullSecrets, Verdict, Versions};
use sigil_webhook::metrics::Metrics;
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::{AppState, router};
use tokio::time::Instant;
use tower::ServiceExt as _;

/// Verdicts by image name:
/// - `unsigned` → denied (no signature);
/// - `warn-only` → allowed with a warning (a `mode: warn` policy failed);
/// - `slow` → answers after 30 s (past any test deadline);
/// - `unmatched` → no policy selects it (`no_match` denies);
/// - anything else → allowed.
///
/// Tags resolve to the SHA-256 of the image string, except on host
/// `registry.down`, which fails like a registry answering 503.
pub struct FakeJudge {
    pub judge_calls: AtomicUsize,
    pub resolve_calls: AtomicUsize,
    pub delay: Duration,
    pub versions: Mutex<Versions>,
    pub ready: AtomicBool,
    pub seen_objects: Mutex<Vec<String>>,
    /// The WorkloadKinds the judge reports, as a policy snapshot carries them.
    pub workload_kinds: Mutex<Option<Arc<sigil_webhook::workload_kind::WorkloadKinds>>>,
}

impl FakeJudge {
    pub fn new() -> Arc<Self> {
        Self::with_delay(Duration::ZERO)
    }

    pub fn with_delay(delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            judge_calls: AtomicUsize::new(0),
            resolve_calls: AtomicUsize::new(0),
            delay,
            versions: Mutex::new(Versions {
                policy_hash: "p1".into(),
                trust_root_version: "t1".into(),
            }),
            ready: AtomicBool::new(true),
            seen_objects: Mutex::new(Vec::new()),
            workload_kinds: Mutex::new(None),
        })
    }

    pub fn calls(&self) -> usize {
        self.judge_calls.load(Ordering::SeqCst)
    }

    pub fn set_versions(&self, policy: &str, trust: &str) {
        *self.versions.lock().unwrap() = Versions {
            policy_hash: policy.into(),
            trust_root_version: trust.into(),
        };
    }
}

pub fn digest_of(image: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(image.as_bytes())))
}

impl ImageJudge for FakeJudge {
    fn workload_kinds(&self) -> Option<Arc<sigil_webhook::workload_kind::WorkloadKinds>> {
        self.workload_kinds.lock().unwrap().clone()
    }

    async fn judge(
        &self,
        image: &PinnedImage,
        object: &ObjectInfo,
        _secrets: &PullSecrets,
        _deadline: Instant,
    ) -> Verdict {
        self.judge_calls.fetch_add(1, Ordering::SeqCst);
        self.seen_objects.lock().unwrap().push(object.display());
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let policy = {
            let v = self.versions.lock().unwrap();
            format!("team-policy@{}", v.policy_hash)
        };
        if image.image.contains("slow") {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        if image.image.contains("unsigned") {
            Verdict::deny(
                vec![policy.clone()],
                vec![format!(
                    "policy {policy}, authority release-key (key): no signature found for {}\n  (looked for bundle referrers and sha256-….sig)",
                    image.reference()
                )],
            )
        } else if image.image.contains("warn-only") {
            Verdict::warn(
                vec!["legacy".into()],
                vec!["policy legacy (mode: warn) failed: no signature found".into()],
            )
        } else {
            Verdict::allow(vec![policy])
        }
    }

    async fn resolve(
        &self,
        image: &str,
        _secrets: &PullSecrets,
        _deadline: Instant,
    ) -> Result<String, String> {
        self.resolve_calls.fetch_add(1, Ordering::SeqCst);
        if image.starts_with("registry.down/") {
            return Err(format!(
                "registry registry.down answered 503 Service Unavailable to HEAD https://registry.down/v2/team/app/manifests/1 (image {image})"
            ));
        }
        Ok(digest_of(image))
    }

    fn matches(&self, image: &str, _object: &ObjectInfo) -> bool {
        !image.contains("unmatched")
    }

    fn no_match(&self, image: &str) -> Verdict {
        Verdict::deny(
            Vec::new(),
            vec![format!(
                "no policy selects {image} and noMatchPolicy is deny"
            )],
        )
    }

    fn versions(&self) -> Versions {
        self.versions.lock().unwrap().clone()
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    fn snapshot_age(&self) -> Option<Duration> {
        Some(Duration::from_secs(3))
    }

    fn snapshot_revision(&self) -> Option<u64> {
        Some(7)
    }
}

pub type State = Arc<AppState<FakeJudge, NoPullSecrets>>;

/// The fixtures send tags to `/validate` to exercise resolution, as with
/// pinning off; the tests of the unpinned-image denial use
/// [`strict_config`], the default.
pub fn config() -> AdmissionConfig {
    AdmissionConfig {
        allow_unpinned: true,
        ..strict_config()
    }
}

/// The default settings: a selected tag reaching `/validate` is denied.
pub fn strict_config() -> AdmissionConfig {
    AdmissionConfig {
        excluded_namespaces: vec!["kube-system".into(), "sigil-system".into()],
        ..AdmissionConfig::default()
    }
}

pub fn app_with(judge: Arc<FakeJudge>, config: AdmissionConfig) -> (Router, State) {
    let admission = Admission::new(judge, NoPullSecrets, config, Arc::new(Metrics::new()));
    let state = AppState::new(admission);
    (router(state.clone()), state)
}

pub fn app(judge: Arc<FakeJudge>) -> (Router, State) {
    app_with(judge, config())
}

pub fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

/// POSTs `body` to `path`; returns the status and the parsed JSON answer.
pub async fn post(router: &Router, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20)
        .await
        .unwrap();
    let json: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "answer is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, json)
}

/// The `response` of an AdmissionReview answer, checked to be well formed.
pub fn response(answer: &Value) -> &Value {
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1", "{answer}");
    assert_eq!(answer["kind"], "AdmissionReview", "{answer}");
    &answer["response"]
}

pub fn message(resp: &Value) -> String {
    resp["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

pub fn warnings(resp: &Value) -> Vec<String> {
    resp["warnings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The decoded JSONPatch of a `/mutate` answer.
pub fn patch(resp: &Value) -> Value {
    use base64::Engine as _;
    let Some(b64) = resp["patch"].as_str() else {
        return Value::Null;
    };
    assert_eq!(resp["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// A fake API server: objects by path, a status per path to fail with, and a
/// count of requests.
#[derive(Clone, Default)]
pub struct FakeApi {
    pub objects: Arc<Mutex<BTreeMap<String, Value>>>,
    pub failing: Arc<Mutex<BTreeMap<String, u16>>>,
    pub requests: Arc<AtomicUsize>,
}

fn api_status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": reason, "reason": reason, "code": code})
}

impl FakeApi {
    pub fn put_secret(&self, namespace: &str, name: &str, type_: &str, key: &str, payload: &Value) {
        let data = base64::engine::general_purpose::STANDARD.encode(payload.to_string());
        self.objects.lock().unwrap().insert(
            format!("/api/v1/namespaces/{namespace}/secrets/{name}"),
            json!({"apiVersion": "v1", "kind": "Secret", "type": type_,
                   "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"), "resourceVersion": "7"},
                   "data": {key: data}}),
        );
    }

    pub fn put_service_account(&self, namespace: &str, name: &str, secrets: &[&str]) {
        let refs: Vec<Value> = secrets.iter().map(|s| json!({"name": s})).collect();
        self.objects.lock().unwrap().insert(
            format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}"),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": name, "namespace": namespace}, "imagePullSecrets": refs}),
        );
    }

    pub fn fail(&self, path: &str, code: u16) {
        self.failing.lock().unwrap().insert(path.to_string(), code);
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let api = api.clone();
            async move {
                api.requests.fetch_add(1, Ordering::SeqCst);
                let path = req.uri().path().to_string();
                let failing = api.failing.lock().unwrap().get(&path).copied();
                let (code, body) = match (failing, api.objects.lock().unwrap().get(&path)) {
                    (Some(code), _) => (code, api_status(code, "InternalError")),
                    (None, Some(o)) => (200, o.clone()),
                    (None, None) => (404, api_status(404, "NotFound")),
                };
                Ok::<_, Infallible>(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                )
            }
        });
        kube::Client::new(service, "default")
    }
}

pub fn docker_config(host: &str, user: &str, password: &str) -> Value {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    json!({"auths": {host: {"auth": auth}}})
}

/// Accepts any server certificate: the tests serve self-signed ones and
/// read which one was served.
#[derive(Debug)]
pub struct AnyCert(pub Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
