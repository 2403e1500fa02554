//! Test fixtures: an in-memory Kubernetes API server behind `tower-test`,
//! so every reconcile path runs without a cluster. It stores objects by
//! path, answers GET/POST/PUT/PATCH/DELETE like the API server does for
//! them (404, 409 on a stale `resourceVersion` — in an update, an apply or
//! a delete's preconditions —, server-side apply and merge patches as JSON
//! merges, status subresources, 422 for a Secret over 1 MiB), lists
//! collections and ends watches at once, and records every request for
//! assertions.
#![allow(unreachable_pub, dead_code, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One request the fake API server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub body: Value,
}

#[derive(Default)]
struct Store {
    objects: BTreeMap<String, Value>,
    requests: Vec<Recorded>,
    resource_version: u64,
    /// Object paths whose writes are refused as invalid, with the message.
    refusals: BTreeMap<String, String>,
    /// Object paths every request to which RBAC refuses (403).
    forbidden: std::collections::BTreeSet<String>,
    /// Object paths whose next GETs fail with this status, once each.
    failing: BTreeMap<String, Vec<StatusCode>>,
}

/// The fake API server's state, shared with the test.
#[derive(Clone, Default)]
pub struct FakeApi {
    store: Arc<Mutex<Store>>,
}

pub const NS: &str = "sigil-system";

pub fn secret_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/secrets/{name}")
}
pub fn configmap_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/configmaps/{name}")
}
pub fn cip_path(name: &str) -> String {
    format!("/apis/policy.sigil.dev/v1alpha1/clusterimagepolicies/{name}")
}
pub fn trustroot_path(name: &str) -> String {
    format!("/apis/policy.sigil.dev/v1alpha1/trustroots/{name}")
}
pub fn lease_path(name: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{name}")
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn ok(code: StatusCode, obj: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(obj).unwrap()))
        .unwrap()
}

/// Whether `path` names a single object (an odd number of segments after
/// the group/version prefix means a collection).
fn is_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = if segments[0] == "api" {
        &segments[2..]
    } else {
        &segments[3..]
    };
    let rest = if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        &rest[2..]
    } else {
        rest
    };
    rest.len() == 1
}

impl FakeApi {
    /// A client talking to a new fake API server.
    pub fn start() -> (Client, FakeApi) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api = FakeApi::default();
        let server = api.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let response = server.handle(request).await;
                send.send_response(response);
            }
        });
        (Client::new(service, NS), api)
    }

    /// Stores `obj` at `path` (seeding), stamping a resourceVersion and uid.
    pub fn put(&self, path: &str, mut obj: Value) {
        let mut s = self.store.lock().unwrap();
        s.resource_version += 1;
        let rv = s.resource_version.to_string();
        let meta = obj["metadata"].as_object_mut().unwrap();
        meta.insert("resourceVersion".into(), rv.into());
        meta.entry("uid")
            .or_insert_with(|| format!("uid-{path}").into());
        s.objects.insert(path.to_owned(), obj);
    }

    /// Refuses every write of the object at `path` (not its status) as the
    /// API server refuses an object its validation rejects: 422 Invalid.
    pub fn refuse(&self, path: &str, message: &str) {
        self.store
            .lock()
            .unwrap()
            .refusals
            .insert(path.to_owned(), message.to_owned());
    }

    /// Refuses every request to `path` as RBAC refuses a verb the caller
    /// was not granted: 403 Forbidden.
    pub fn forbid(&self, path: &str) {
        self.store.lock().unwrap().forbidden.insert(path.to_owned());
    }

    /// Fails the next GET of the object at `path` with `code` (each call
    /// queues one failure), as an API server that times out on etcd does.
    pub fn fail_next_get(&self, path: &str, code: StatusCode) {
        self.store
            .lock()
            .unwrap()
            .failing
            .entry(path.to_owned())
            .or_default()
            .push(code);
    }

    /// The object stored at `path`.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.store.lock().unwrap().objects.get(path).cloned()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.store.lock().unwrap().requests.clone()
    }

    /// Requests with `method` whose path starts with `prefix`.
    pub fn requests_to(&self, method: Method, prefix: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.starts_with(prefix))
            .collect()
    }

    /// Events published so far (their `note`s).
    pub fn event_notes(&self) -> Vec<(String, String)> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.contains("/events"))
            .map(|r| {
                (
                    r.body["reason"].as_str().unwrap_or_default().to_owned(),
                    r.body["note"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    async fn handle(&self, request: Request<Body>) -> Response<Body> {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let query = request.uri().query().unwrap_or_default().to_owned();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        let mut s = self.store.lock().unwrap();
        s.requests.push(Recorded {
            method: method.clone(),
            path: path.clone(),
            body: body.clone(),
        });
        let (object_path, subresource) = match path.strip_suffix("/status") {
            Some(p) if !is_collection(&path) => (p.to_owned(), true),
            _ => (path.clone(), false),
        };
        if s.forbidden.contains(&object_path) {
            return status(StatusCode::FORBIDDEN, "Forbidden", "forbidden by RBAC");
        }
        if method == Method::GET
            && let Some(codes) = s.failing.get_mut(&path)
            && !codes.is_empty()
        {
            let code = codes.remove(0);
            return status(code, "InternalError", "injected failure");
        }
        if matches!(method, Method::POST | Method::PUT | Method::PATCH)
            && path.contains("/secrets")
            && let Some(too_long) = secret_too_long(&body)
        {
            return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &too_long);
        }
        if matches!(method, Method::POST | Method::PUT | Method::PATCH)
            && !subresource
            && let Some(message) = s.refusals.get(&object_path)
        {
            return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message);
        }
        match method {
            Method::GET if is_collection(&path) => {
                if query.contains("watch=true") {
                    return ok(StatusCode::OK, &Value::Null).map(|_| Body::empty());
                }
                let items: Vec<Value> = s
                    .objects
                    .iter()
                    .filter(|(p, _)| p.rsplit_once('/').is_some_and(|(dir, _)| dir == path))
                    .map(|(_, v)| v.clone())
                    .collect();
                let rv = s.resource_version.to_string();
                ok(
                    StatusCode::OK,
                    &json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}),
                )
            }
            Method::GET => match s.objects.get(&object_path) {
                Some(obj) => ok(StatusCode::OK, obj),
                None => status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{path} not found"),
                ),
            },
            Method::POST => {
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or("generated")
                    .to_owned();
                let target = format!("{path}/{name}");
                if s.objects.contains_key(&target) {
                    return status(
                        StatusCode::CONFLICT,
                        "AlreadyExists",
                        &format!("{target} exists"),
                    );
                }
                s.resource_version += 1;
                let mut obj = body;
                obj["metadata"]["resourceVersion"] = s.resource_version.to_string().into();
                s.objects.insert(target, obj.clone());
                ok(StatusCode::CREATED, &obj)
            }
            Method::PUT => {
                let Some(current) = s.objects.get(&object_path) else {
                    return status(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        &format!("{path} not found"),
                    );
                };
                let want = body["metadata"]["resourceVersion"].as_str();
                if want.is_some() && want != current["metadata"]["resourceVersion"].as_str() {
                    return status(
                        StatusCode::CONFLICT,
                        "Conflict",
                        "the object has been modified",
                    );
                }
                s.resource_version += 1;
                let mut obj = body;
                obj["metadata"]["resourceVersion"] = s.resource_version.to_string().into();
                s.objects.insert(object_path, obj.clone());
                ok(StatusCode::OK, &obj)
            }
            Method::PATCH => {
                let apply = query.contains("fieldManager");
                let exists = s.objects.contains_key(&object_path);
                if !exists && (subresource || !apply) {
                    return status(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        &format!("{path} not found"),
                    );
                }
                // A resourceVersion in the patch is a precondition.
                if let Some(want) = body["metadata"]["resourceVersion"].as_str() {
                    let current = s
                        .objects
                        .get(&object_path)
                        .and_then(|o| o["metadata"]["resourceVersion"].as_str());
                    if current != Some(want) {
                        return status(
                            StatusCode::CONFLICT,
                            "Conflict",
                            "the object has been modified; please apply your changes to the latest version and try again",
                        );
                    }
                }
                s.resource_version += 1;
                let rv = s.resource_version.to_string();
                let obj = s
                    .objects
                    .entry(object_path)
                    .or_insert_with(|| json!({"metadata": {}}));
                if subresource {
                    merge(obj, &json!({"status": body["status"]}));
                } else if apply {
                    // Server-side apply by the object's only manager: what
                    // it applies replaces what it applied before (entries a
                    // map no longer lists are gone); metadata merges.
                    for (k, v) in body.as_object().into_iter().flatten() {
                        if k == "metadata" {
                            merge(&mut obj[k.as_str()], v);
                        } else {
                            obj[k.as_str()] = v.clone();
                        }
                    }
                } else {
                    merge(obj, &body);
                }
                obj["metadata"]["resourceVersion"] = rv.into();
                let obj = obj.clone();
                ok(StatusCode::OK, &obj)
            }
            Method::DELETE
                if body["preconditions"]["resourceVersion"]
                    .as_str()
                    .is_some_and(|want| {
                        s.objects.get(&object_path).is_some_and(|o| {
                            o["metadata"]["resourceVersion"].as_str() != Some(want)
                        })
                    }) =>
            {
                status(
                    StatusCode::CONFLICT,
                    "Conflict",
                    "Precondition failed: ResourceVersion in precondition does not match",
                )
            }
            Method::DELETE => match s.objects.remove(&object_path) {
                Some(obj) => ok(StatusCode::OK, &obj),
                None => status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{path} not found"),
                ),
            },
            _ => status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "unsupported",
            ),
        }
    }
}

/// The API server's refusal of a Secret whose data passes 1 MiB, if `body`
/// is one.
fn secret_too_long(body: &Value) -> Option<String> {
    use base64::Engine as _;
    const MAX: usize = 1024 * 1024;
    let total: usize = body["data"]
        .as_object()?
        .values()
        .filter_map(Value::as_str)
        .map(|b64| {
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_or(0, |v| v.len())
        })
        .sum();
    (total > MAX)
        .then(|| format!("Secret \"x\" is invalid: data: Too long: must have at most {MAX} bytes"))
}

/// A leading context on `client` whose settings `configure` changed.
pub fn context_with(
    client: Client,
    configure: impl FnOnce(&mut crate::Args),
) -> (
    Arc<crate::Context>,
    tokio::sync::mpsc::UnboundedReceiver<crate::context::TrustChange>,
) {
    let mut args = crate::Args {
        namespace: NS.into(),
        identity: "replica-a".into(),
        tuf_offline: true,
        ..crate::Args::default()
    };
    configure(&mut args);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (_, leading_rx) = tokio::sync::watch::channel(true);
    let ctx = crate::Context::new(
        client,
        args,
        Arc::new(crate::metrics::Metrics::default()),
        leading_rx,
        tx,
    );
    (Arc::new(ctx), rx)
}

/// A leading (or not) context on `client`, and the receiver of its
/// trust-root change notices.
pub fn context(
    client: Client,
    leading: bool,
) -> (
    Arc<crate::Context>,
    tokio::sync::mpsc::UnboundedReceiver<crate::context::TrustChange>,
    tokio::sync::watch::Sender<bool>,
) {
    // Tests reach no network: the built-in root stays the embedded copy
    // unless a test points a context at a mirror on 127.0.0.1.
    let args = crate::Args {
        namespace: NS.into(),
        identity: "replica-a".into(),
        tuf_offline: true,
        ..crate::Args::default()
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (leading_tx, leading_rx) = tokio::sync::watch::channel(leading);
    let ctx = crate::Context::new(
        client,
        args,
        Arc::new(crate::metrics::Metrics::default()),
        leading_rx,
        tx,
    );
    (Arc::new(ctx), rx, leading_tx)
}

/// A PEM P-256 public key.
pub const P256_PUB: &str = include_str!("../../sigil-compile/tests/data/p256.pub");
/// Another PEM public key (Ed25519).
pub const ED_PUB: &str = include_str!("../../sigil-compile/tests/data/ed.pub");
/// A PEM CA certificate.
pub const CA_PEM: &str = include_str!("../../sigil-compile/tests/data/ca.pem");

/// A ClusterImagePolicy object at `generation` with `spec`.
pub fn cip(name: &str, generation: i64, spec: Value) -> Value {
    json!({
        "apiVersion": "policy.sigil.dev/v1alpha1",
        "kind": "ClusterImagePolicy",
        "metadata": {"name": name, "generation": generation, "uid": format!("uid-{name}")},
        "spec": spec,
    })
}

/// The path of ImagePolicy `name` in `namespace`.
pub fn image_policy_path(namespace: &str, name: &str) -> String {
    format!("/apis/policy.sigil.dev/v1alpha1/namespaces/{namespace}/imagepolicies/{name}")
}

/// An ImagePolicy object.
pub fn image_policy(namespace: &str, name: &str, generation: i64, spec: Value) -> Value {
    json!({
        "apiVersion": "policy.sigil.dev/v1alpha1",
        "kind": "ImagePolicy",
        "metadata": {"name": name, "namespace": namespace, "generation": generation,
                     "uid": format!("uid-{namespace}-{name}")},
        "spec": spec,
    })
}

/// The path of Secret `name` in `namespace`.
pub fn secret_path_in(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/secrets/{name}")
}

/// A Secret in sigil's namespace with `data` (plain text values).
pub fn secret(name: &str, data: &[(&str, &str)]) -> Value {
    use base64::Engine as _;
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| {
            (
                (*k).to_owned(),
                base64::engine::general_purpose::STANDARD.encode(v).into(),
            )
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": data})
}

/// A data value of the Secret at `name` in the fake API server.
pub fn secret_data(api: &FakeApi, name: &str, key: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let secret = api.get(&secret_path(name))?;
    let b64 = secret["data"][key].as_str()?;
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// The policy snapshot currently stored in the fake API server, read as
/// the webhook reads it (manifest, then shards).
pub fn stored_snapshot(api: &FakeApi) -> Option<sigil_api::snapshot::PolicySnapshot> {
    use sigil_api::snapshot::stored::{CHUNK_KEY, MANIFEST_KEY, Stored};
    use sigil_api::snapshot::{SECRET_KEY, SECRET_NAME};
    let main: BTreeMap<&str, Vec<u8>> = [MANIFEST_KEY, CHUNK_KEY, SECRET_KEY]
        .into_iter()
        .filter_map(|k| Some((k, secret_data(api, SECRET_NAME, k)?)))
        .collect();
    if main.is_empty() {
        return None;
    }
    match Stored::read(SECRET_NAME, |k| main.get(k).map(Vec::as_slice)).unwrap() {
        Stored::Plain(bytes) => {
            Some(sigil_api::snapshot::PolicySnapshot::from_slice(bytes).unwrap())
        }
        Stored::Manifest { manifest, first } => {
            let shards: Vec<Option<Vec<u8>>> = manifest
                .shards()
                .map(|name| secret_data(api, name, CHUNK_KEY))
                .collect();
            Some(manifest.assemble(first, &shards).unwrap())
        }
    }
}

/// Reads back the object at `path` as `K` (what the next reconcile sees).
pub fn object<K: serde::de::DeserializeOwned>(api: &FakeApi, path: &str) -> Arc<K> {
    Arc::new(serde_json::from_value(api.get(path).unwrap()).unwrap())
}

pub use sigil_testkit::tuf::{TufRepo, seed_key, sign};

/// Files of a mirror, shared with the test that changes them.
pub type MirrorFiles = Arc<Mutex<BTreeMap<String, Vec<u8>>>>;

/// A TUF mirror on 127.0.0.1 serving the files in the shared map; returns
/// its URL.
pub async fn serve_mirror(files: MirrorFiles) -> String {
    use axum::extract::{Path, State};
    use axum::http::StatusCode;
    async fn file(
        State(files): State<MirrorFiles>,
        Path(path): Path<String>,
    ) -> Result<Vec<u8>, StatusCode> {
        files
            .lock()
            .unwrap()
            .get(&path)
            .cloned()
            .ok_or(StatusCode::NOT_FOUND)
    }
    let app = axum::Router::new()
        .route("/{*path}", axum::routing::get(file))
        .with_state(files);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}
