//! Gatekeeper's external data (`externaldata.gatekeeper.sh/v1beta1`): sigil
//! as a provider. Gatekeeper POSTs a `ProviderRequest` whose keys are image
//! references; sigil answers a `ProviderResponse` with one item per key whose
//! `value` is the verdict `/validate` gives that image in a Pod, in the same
//! words ([`Admission::judge_images`]), or whose `error` says why the image
//! could not be judged. A request that cannot be answered at all (not JSON,
//! another apiVersion or kind, too large, too many keys) gets a
//! `systemError` and no items. Every body gets a `ProviderResponse` with
//! HTTP 200, as Gatekeeper reads the body whatever the status.
//!
//! Namespaces: a key carries no object, so a bare image is judged as the
//! image of a Pod no namespace's ImagePolicy applies to (ClusterImagePolicies
//! only, anonymous registry access plus the policies'
//! `signaturePullSecrets`). A key written `NAMESPACE#IMAGE` is judged as the
//! image of a Pod in that namespace, exactly as `/validate` judges one: that
//! namespace's ImagePolicies apply too, and its `default` service account's
//! pull secrets are used. `#` never occurs in an image reference, so the
//! two forms cannot be confused; the chart's ConstraintTemplate sends the
//! second.
//!
//! The listener (see [`crate::start`]) requires a client certificate that
//! chains to the configured CA bundle (Gatekeeper's webhook CA): this module
//! only sees requests that passed that check.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::future::join_all;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::admit::{Admission, Deadline, ImageAnswer, printable};
use crate::judge::{ImageJudge, ObjectInfo, PullSecretSource, PullSecrets};
use crate::metrics::{ExternalDataKeyLabels, ExternalDataRequestLabels};
use crate::secrets::ObjectSecrets;
use crate::server::{self, AppState, BodyError};

/// The only external-data API version sigil speaks.
pub const API_VERSION: &str = "externaldata.gatekeeper.sh/v1beta1";
/// The kind of Gatekeeper's request.
pub const REQUEST_KIND: &str = "ProviderRequest";
/// The kind of sigil's answer.
pub const RESPONSE_KIND: &str = "ProviderResponse";
/// The path Gatekeeper's `Provider` names in `spec.url`.
pub const PATH: &str = "/verify";
/// Longest key read, in bytes: far above any image reference (a name of at
/// most 255 characters, a tag, a digest) with a namespace in front.
pub const MAX_KEY_BYTES: usize = 4096;
/// Separates a namespace from the image in a key (`shop#ghcr.io/org/app:1`).
pub const NAMESPACE_SEPARATOR: char = '#';

/// Bounds and deadline of the provider.
#[derive(Debug, Clone)]
pub struct ExternalDataConfig {
    /// The `Provider`'s `spec.timeout`: Gatekeeper stops waiting then.
    pub timeout: Duration,
    /// Kept free of that timeout to write the answer and cross the network
    /// (at most half of it).
    pub margin: Duration,
    /// Most keys in one request.
    pub max_keys: usize,
    /// Largest request body read, in bytes.
    pub max_body_bytes: usize,
}

impl Default for ExternalDataConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3),
            margin: Duration::from_millis(500),
            max_keys: 1024,
            max_body_bytes: 1 << 20,
        }
    }
}

impl ExternalDataConfig {
    /// The margin kept: [`Self::margin`], at most half the timeout.
    fn kept(&self) -> Duration {
        self.margin.min(self.timeout / 2)
    }

    /// The deadline of a request received at `start`.
    pub fn deadline(&self, start: Instant) -> Instant {
        start + self.timeout.saturating_sub(self.kept())
    }

    /// [`Self::deadline`] with the setting it comes from, which the cause
    /// of an image left unjudged at it tells the user to raise.
    fn due(&self, start: Instant) -> Deadline {
        Deadline {
            at: self.deadline(start),
            timeout: self.timeout,
            margin: self.kept(),
            setting: "the Gatekeeper Provider's spec.timeout (chart value gatekeeper.timeoutSeconds; keep it below Gatekeeper's validatingWebhookTimeoutSeconds)",
        }
    }
}

/// The provider's listener: where, whose client certificates, what bounds.
#[derive(Debug, Clone)]
pub struct ExternalDataSettings {
    /// HTTPS address.
    pub listen: std::net::SocketAddr,
    /// PEM CA bundle client certificates must chain to.
    pub client_ca: std::path::PathBuf,
    /// Bounds and deadline.
    pub config: ExternalDataConfig,
}

/// A `ProviderResponse`.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderResponse {
    /// [`API_VERSION`].
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    /// [`RESPONSE_KIND`].
    pub kind: &'static str,
    /// The answer.
    pub response: ResponseBody,
}

/// The `response` of a [`ProviderResponse`].
#[derive(Debug, Clone, Serialize)]
pub struct ResponseBody {
    /// The same keys get the same answer while the policies, trust roots
    /// and signatures stay as they are; Gatekeeper caches items for its
    /// `--external-data-provider-response-cache-ttl`.
    pub idempotent: bool,
    /// One item per key, in the request's order.
    pub items: Vec<Item>,
    /// Why the request as a whole could not be answered; empty otherwise.
    #[serde(rename = "systemError")]
    pub system_error: String,
}

/// The answer for one key.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    /// The key as sent.
    pub key: Value,
    /// The verdict, when the image was judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<KeyVerdict>,
    /// Why the key could not be judged; empty when it was.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The verdict on one key's image, in `/validate`'s words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyVerdict {
    /// Whether the image may run.
    pub allowed: bool,
    /// `allowed`, `warned`, `denied`, or `skipped` (a namespace sigil never
    /// acts in, as `/validate` allows everything there untouched).
    pub outcome: &'static str,
    /// The digest judged, when one was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When denied: why, exactly as the image's line of `/validate`'s
    /// denial gives it after `- image IMAGE (...): `.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The admission warnings `/validate` gives for the image.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl ProviderResponse {
    fn new(items: Vec<Item>, system_error: String) -> Self {
        Self {
            api_version: API_VERSION,
            kind: RESPONSE_KIND,
            response: ResponseBody {
                idempotent: true,
                items,
                system_error,
            },
        }
    }

    /// A response with no items that says why the request was refused.
    pub fn system_error(why: String) -> Self {
        Self::new(Vec::new(), why)
    }
}

/// What a key asks about: an image, and the namespace of the Pod it is
/// judged in (`None`: ClusterImagePolicies only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key<'a> {
    /// The namespace before [`NAMESPACE_SEPARATOR`], if any.
    pub namespace: Option<&'a str>,
    /// The image reference.
    pub image: &'a str,
}

/// Whether `s` is a Kubernetes namespace name (an RFC 1123 label).
fn is_namespace_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Reads a key: `IMAGE` or `NAMESPACE#IMAGE`. The error says what is wrong
/// with it and how a key is written.
pub fn parse_key(key: &str) -> Result<Key<'_>, String> {
    if key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "the key is {} bytes long, more than sigil's limit of {MAX_KEY_BYTES}; a key is an image reference, optionally after `NAMESPACE{NAMESPACE_SEPARATOR}`",
            key.len()
        ));
    }
    let (namespace, image) = match key.split_once(NAMESPACE_SEPARATOR) {
        Some((namespace, image)) => {
            if !is_namespace_name(namespace) {
                return Err(format!(
                    "`{}` before `{NAMESPACE_SEPARATOR}` is not a namespace name (lowercase letters, digits and `-`, at most 63); write the key as NAMESPACE{NAMESPACE_SEPARATOR}IMAGE or as IMAGE alone",
                    printable(namespace)
                ));
            }
            (Some(namespace), image)
        }
        None => (None, key),
    };
    if image.trim().is_empty() {
        return Err(format!(
            "the key names no image; send image references (`ghcr.io/org/app@sha256:...`), optionally as NAMESPACE{NAMESPACE_SEPARATOR}IMAGE"
        ));
    }
    Ok(Key { namespace, image })
}

/// A pull-secret source for images judged outside any namespace: no object
/// credentials (there is no Pod whose service account could name some),
/// and the policies' `signaturePullSecrets` from `S` as usual.
struct ClusterScope<S>(Arc<S>);

impl<S: PullSecretSource> PullSecretSource for ClusterScope<S> {
    async fn pull_secrets(
        &self,
        _namespace: &str,
        _secret_names: &[String],
        _service_account: &str,
        _deadline: Instant,
    ) -> Result<PullSecrets, String> {
        Ok(PullSecrets::anonymous())
    }

    async fn signature_pull_secrets(
        &self,
        secret_names: &[String],
        deadline: Instant,
    ) -> Result<PullSecrets, String> {
        self.0.signature_pull_secrets(secret_names, deadline).await
    }
}

/// The Pod the images of one namespace's keys are judged as: unnamed, without
/// labels, one container per image, the `default` service account.
fn pod_of(namespace: &str, images: &[&str]) -> ObjectInfo {
    let gvk = GroupVersionKind::gvk("", "v1", "Pod");
    let mut object = DynamicObject::new("", &ApiResource::from_gvk(&gvk));
    object.metadata.name = None;
    if !namespace.is_empty() {
        object.metadata.namespace = Some(namespace.to_string());
    }
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("key-{i}"), "image": image}))
        .collect();
    object.data = json!({"spec": {"containers": containers}});
    ObjectInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        sub_resource: String::new(),
        kind: "Pod".into(),
        namespace: namespace.to_string(),
        name: String::new(),
        labels: BTreeMap::new(),
        pull_secret_names: Vec::new(),
        service_account: "default".into(),
        object: Arc::new(object),
    }
}

fn verdict_of(answer: ImageAnswer) -> Result<KeyVerdict, String> {
    let message = answer.reasons.join("; ");
    if !answer.judged {
        return Err(message);
    }
    Ok(KeyVerdict {
        allowed: answer.allowed,
        outcome: answer.outcome.label(),
        digest: answer.digest,
        message,
        warnings: answer.warnings,
    })
}

/// Judges the images of one namespace's keys (`""`: outside any
/// namespace), in `/validate`'s words.
async fn judge_namespace<J: ImageJudge, S: PullSecretSource>(
    admission: &Admission<J, S>,
    namespace: &str,
    images: &[&str],
    due: &Deadline,
) -> Vec<Result<KeyVerdict, String>> {
    if !namespace.is_empty()
        && admission
            .config()
            .excluded_namespaces
            .iter()
            .any(|n| n == namespace)
    {
        let skipped = KeyVerdict {
            allowed: true,
            outcome: "skipped",
            digest: None,
            message: String::new(),
            warnings: Vec::new(),
        };
        return images.iter().map(|_| Ok(skipped.clone())).collect();
    }
    let object = pod_of(namespace, images);
    let signature = admission.cache().judge().signature_pull_secrets();
    let answers = if namespace.is_empty() {
        let source = ClusterScope(admission.pull_secrets().clone());
        let secrets = ObjectSecrets::new(&source, &object, signature);
        admission.judge_images(&object, images, &secrets, due).await
    } else {
        let secrets = ObjectSecrets::new(admission.pull_secrets().as_ref(), &object, signature);
        admission.judge_images(&object, images, &secrets, due).await
    };
    answers.into_iter().map(verdict_of).collect()
}

/// Answers the keys of a request: each distinct image of each namespace is
/// judged once, all namespaces at once, by `due`.
pub async fn answer_keys<J: ImageJudge, S: PullSecretSource>(
    admission: &Admission<J, S>,
    keys: &[Value],
    due: &Deadline,
) -> Vec<Item> {
    // Namespace ("" for none) → its distinct images, in order of appearance.
    let mut wanted: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let parsed: Vec<Result<Key<'_>, String>> = keys
        .iter()
        .map(|k| match k {
            Value::String(s) => parse_key(s),
            other => Err(format!(
                "the key is {}, not a string; send image references as strings",
                json_type(other)
            )),
        })
        .collect();
    for key in parsed.iter().flatten() {
        let images = wanted.entry(key.namespace.unwrap_or_default()).or_default();
        if !images.contains(&key.image) {
            images.push(key.image);
        }
    }
    let judged = join_all(wanted.iter().map(|(namespace, images)| async move {
        let verdicts = judge_namespace(admission, namespace, images, due).await;
        (
            *namespace,
            images.iter().copied().zip(verdicts).collect::<Vec<_>>(),
        )
    }))
    .await;
    let verdicts: BTreeMap<(&str, &str), Result<KeyVerdict, String>> = judged
        .into_iter()
        .flat_map(|(namespace, answers)| {
            answers
                .into_iter()
                .map(move |(image, verdict)| ((namespace, image), verdict))
        })
        .collect();
    keys.iter()
        .zip(parsed.iter())
        .map(|(key, parsed)| {
            let verdict = match parsed {
                Ok(k) => verdicts
                    .get(&(k.namespace.unwrap_or_default(), k.image))
                    .cloned()
                    .unwrap_or_else(|| {
                        Err(
                            "sigil lost the verdict of this key; this is a bug, please report it"
                                .to_string(),
                        )
                    }),
                Err(why) => Err(why.clone()),
            };
            match verdict {
                Ok(v) => Item {
                    key: key.clone(),
                    value: Some(v),
                    error: String::new(),
                },
                Err(why) => Item {
                    key: key.clone(),
                    value: None,
                    error: why,
                },
            }
        })
        .collect()
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Reads a `ProviderRequest` body: its keys, or why it cannot be answered.
pub fn parse_request(body: &[u8], max_keys: usize) -> Result<Vec<Value>, String> {
    let request: Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "sigil could not read the {REQUEST_KIND} ({e}); it expects a {API_VERSION} {REQUEST_KIND} from Gatekeeper"
        )
    })?;
    let api_version = request.get("apiVersion").and_then(Value::as_str);
    let kind = request.get("kind").and_then(Value::as_str);
    if api_version != Some(API_VERSION) || kind != Some(REQUEST_KIND) {
        return Err(format!(
            "sigil speaks {REQUEST_KIND} {API_VERSION}, got {} {}; use Gatekeeper v3.11 or newer with a Provider of apiVersion {API_VERSION}",
            kind.map_or_else(|| "no kind".to_string(), printable),
            api_version.map_or_else(|| "no apiVersion".to_string(), printable),
        ));
    }
    // Gatekeeper omits an empty key list (`omitempty`).
    let keys = match request.pointer("/request/keys") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(keys)) => keys,
        Some(other) => {
            return Err(format!(
                "request.keys is {}, not a list of image references",
                json_type(other)
            ));
        }
    };
    if keys.len() > max_keys {
        return Err(format!(
            "the {REQUEST_KIND} has {} keys, more than sigil's limit of {max_keys}; raise --gatekeeper-max-keys (chart value gatekeeper.maxKeys) if objects with that many images are expected",
            keys.len()
        ));
    }
    Ok(keys.clone())
}

/// Answers one request body: always a [`ProviderResponse`], counted in
/// metrics.
pub async fn respond<J: ImageJudge, S: PullSecretSource>(
    admission: &Admission<J, S>,
    config: &ExternalDataConfig,
    body: &[u8],
    start: Instant,
) -> ProviderResponse {
    let metrics = admission.metrics();
    let keys = match parse_request(body, config.max_keys) {
        Ok(keys) => keys,
        Err(why) => {
            tracing::warn!(error = %why, "external-data request refused");
            metrics
                .external_data_requests
                .get_or_create(&ExternalDataRequestLabels {
                    outcome: "system-error",
                })
                .inc();
            return ProviderResponse::system_error(why);
        }
    };
    let items = answer_keys(admission, &keys, &config.due(start)).await;
    for item in &items {
        let outcome = match &item.value {
            Some(v) => v.outcome,
            None => "error",
        };
        tracing::info!(
            key = %printable(item.key.as_str().unwrap_or("(not a string)")),
            outcome,
            error = %item.error,
            "external-data verdict"
        );
        metrics
            .external_data_keys
            .get_or_create(&ExternalDataKeyLabels { outcome })
            .inc();
    }
    metrics
        .external_data_requests
        .get_or_create(&ExternalDataRequestLabels {
            outcome: "answered",
        })
        .inc();
    ProviderResponse::new(items, String::new())
}

/// What the provider's router holds.
pub struct ProviderState<J, S> {
    /// The webhook's state: its judge, caches, settings and metrics.
    pub app: Arc<AppState<J, S>>,
    /// The provider's bounds.
    pub config: ExternalDataConfig,
}

/// The provider's router: `POST /verify`.
pub fn router<J: ImageJudge, S: PullSecretSource>(state: Arc<ProviderState<J, S>>) -> Router {
    Router::new()
        .route(PATH, post(verify::<J, S>))
        .with_state(state)
}

fn json_response(response: &ProviderResponse) -> Response {
    let body = serde_json::to_vec(response).unwrap_or_else(|e| {
        // Plain strings and booleans cannot fail to serialize; still answer
        // with something Gatekeeper can read.
        json!({"apiVersion": API_VERSION, "kind": RESPONSE_KIND,
               "response": {"idempotent": true, "items": [], "systemError": format!("sigil could not write its answer: {e}")}})
        .to_string()
        .into_bytes()
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

async fn verify<J: ImageJudge, S: PullSecretSource>(
    State(state): State<Arc<ProviderState<J, S>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let start = Instant::now();
    let admission = &state.app.admission;
    let config = &state.config;
    let deadline = config.deadline(start);
    match server::read_body(&headers, body, config.max_body_bytes, deadline).await {
        Ok(bytes) => json_response(&respond(admission, config, &bytes, start).await),
        Err(e) => {
            let why = match e {
                BodyError::TooLarge(_) => format!(
                    "the {REQUEST_KIND} is larger than sigil's limit of {} bytes; raise --gatekeeper-max-body-bytes (chart value gatekeeper.maxBodyBytes) if requests this large are expected",
                    config.max_body_bytes
                ),
                BodyError::Read(why) => {
                    format!("sigil could not read the {REQUEST_KIND} body: {why}")
                }
            };
            tracing::warn!(error = %why, "external-data request refused");
            admission
                .metrics()
                .external_data_requests
                .get_or_create(&ExternalDataRequestLabels {
                    outcome: "system-error",
                })
                .inc();
            json_response(&ProviderResponse::system_error(why))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_an_image_or_a_namespace_and_an_image() {
        assert_eq!(
            parse_key("ghcr.io/org/app:1.0"),
            Ok(Key {
                namespace: None,
                image: "ghcr.io/org/app:1.0"
            })
        );
        assert_eq!(
            parse_key("shop#team-a/nginx"),
            Ok(Key {
                namespace: Some("shop"),
                image: "team-a/nginx"
            })
        );
        for bad in ["", "  ", "shop#", "Shop#nginx", "-x#nginx", "a b#nginx"] {
            let err = parse_key(bad).unwrap_err();
            assert!(err.contains("NAMESPACE#IMAGE"), "{bad:?}: {err}");
        }
        let long = "a".repeat(MAX_KEY_BYTES + 1);
        assert!(parse_key(&long).unwrap_err().contains("limit of 4096"));
    }

    #[test]
    fn requests_of_another_version_or_kind_or_with_too_many_keys_are_refused() {
        let request = |api: &str, kind: &str, keys: Value| {
            json!({"apiVersion": api, "kind": kind, "request": {"keys": keys}}).to_string()
        };
        assert_eq!(
            parse_request(
                request(API_VERSION, REQUEST_KIND, json!(["a", "b"])).as_bytes(),
                2
            ),
            Ok(vec![json!("a"), json!("b")])
        );
        let old = parse_request(
            request(
                "externaldata.gatekeeper.sh/v1alpha1",
                REQUEST_KIND,
                json!([]),
            )
            .as_bytes(),
            2,
        )
        .unwrap_err();
        assert!(
            old.contains("got ProviderRequest externaldata.gatekeeper.sh/v1alpha1"),
            "{old}"
        );
        let kind = parse_request(request(API_VERSION, RESPONSE_KIND, json!([])).as_bytes(), 2)
            .unwrap_err();
        assert!(kind.contains("got ProviderResponse"), "{kind}");
        let many = parse_request(
            request(API_VERSION, REQUEST_KIND, json!(["a", "b", "c"])).as_bytes(),
            2,
        )
        .unwrap_err();
        assert!(
            many.contains("3 keys, more than sigil's limit of 2"),
            "{many}"
        );
        assert!(
            parse_request(b"{", 2)
                .unwrap_err()
                .contains("could not read")
        );
        let not_list = parse_request(
            request(API_VERSION, REQUEST_KIND, json!("nginx")).as_bytes(),
            2,
        )
        .unwrap_err();
        assert!(not_list.contains("request.keys is a string"), "{not_list}");
        let empty = json!({"apiVersion": API_VERSION, "kind": REQUEST_KIND, "request": {}});
        assert_eq!(
            parse_request(empty.to_string().as_bytes(), 2),
            Ok(Vec::new())
        );
    }

    #[test]
    fn the_deadline_keeps_at_most_half_the_timeout_as_margin() {
        let start = Instant::now();
        let config = ExternalDataConfig {
            timeout: Duration::from_secs(1),
            margin: Duration::from_secs(5),
            ..ExternalDataConfig::default()
        };
        assert_eq!(config.deadline(start), start + Duration::from_millis(500));
        let config = ExternalDataConfig::default();
        assert_eq!(config.deadline(start), start + Duration::from_millis(2500));
    }
}
