//! Support for sigil's end-to-end suite (`tests/e2e.rs`): a client for the
//! cluster named by `KUBECONFIG`, the registry fixtures made by
//! `e2e/registry-fixtures.sh`, and the few operations the scenarios repeat
//! (apply a policy, try a pod, wait for a condition).
//!
//! Every request goes through the API server, so admission runs exactly as
//! for `kubectl`: the suite sees sigil's answer as a user does, warnings
//! included. Requests are raw JSON on purpose: the suite must not depend on
//! sigil's own API types to describe what a user writes.
//!
//! Environment:
//! - `KUBECONFIG`: the cluster (sigil installed, its webhook registered).
//! - `SIGIL_REGISTRY_FIXTURES`: the fixture file of `e2e/registry-fixtures.sh`.
//! - `SIGIL_E2E_REGISTRY_ALIAS` (optional): `HOST:PORT=NAME:PORT[,...]`, how
//!   the cluster names a registry the host pushed to (kind: the host pushes to
//!   `127.0.0.1:5001`, pods and the webhook see `sigil-registry:5000`).
//! - `SIGIL_E2E_NAMESPACE` (default `sigil-system`): sigil's namespace.
//! - `SIGIL_E2E_WEBHOOK_BIN` (local runs): the `sigil-webhook` binary, for the
//!   scenario that stops a webhook of its own under load.
//! - `SIGIL_E2E_CONTAINERD_SOCK` (node runs): the node's containerd socket
//!   ([`node`]).

// Reading a `serde_json::Value` by index never panics (a missing key reads
// as `Null`); the one write goes through `labelled`, which checks the shape.
#![allow(clippy::indexing_slicing)]

pub mod doctor;
pub mod load;
pub mod node;

pub use doctor::sigil_bin;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::client::Body;
use serde_json::{Value, json};
use sigil_testkit::cosign::{self, OciManifest};
use sigil_testkit::registry::Pusher;
use sigil_testkit::{BundleSpec, Testkit};

/// The label every object the suite creates carries, so a run can clean up
/// after an earlier one that was interrupted.
pub const E2E_LABEL: &str = "sigil-e2e";

const CIP_PATH: &str = "/apis/policy.sigil.dev/v1alpha1/clusterimagepolicies";
const TRUST_ROOT_PATH: &str = "/apis/policy.sigil.dev/v1alpha1/trustroots";
/// ImagePolicies of every namespace.
pub const IMAGE_POLICY_PATH: &str = "/apis/policy.sigil.dev/v1alpha1/imagepolicies";

/// The path of ImagePolicy `name` in `namespace`.
pub fn image_policy_path(namespace: &str, name: &str) -> String {
    format!("/apis/policy.sigil.dev/v1alpha1/namespaces/{namespace}/imagepolicies/{name}")
}
/// policy-controller's ClusterImagePolicies (served when the chart's
/// `policyController.serve` is on).
pub const SIGSTORE_CIP_PATH: &str = "/apis/policy.sigstore.dev/v1alpha1/clusterimagepolicies";
/// policy-controller's TrustRoots.
pub const SIGSTORE_TRUST_ROOT_PATH: &str = "/apis/policy.sigstore.dev/v1alpha1/trustroots";
const FIELD_MANAGER: &str = "sigil-e2e";

/// The registry fixtures: `NAME=value` lines written by
/// `e2e/registry-fixtures.sh`, with registry aliases applied.
#[derive(Debug, Clone)]
pub struct Fixtures {
    values: HashMap<String, String>,
    aliases: Vec<(String, String)>,
}

impl Fixtures {
    /// Reads `SIGIL_REGISTRY_FIXTURES` and `SIGIL_E2E_REGISTRY_ALIAS`.
    pub fn from_env() -> anyhow::Result<Self> {
        let path = std::env::var("SIGIL_REGISTRY_FIXTURES").map_err(|_| {
            anyhow!("SIGIL_REGISTRY_FIXTURES is not set: run the suite through e2e/run-local.sh or e2e/kind.sh")
        })?;
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read the registry fixtures {path}"))?;
        let values = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let aliases = match std::env::var("SIGIL_E2E_REGISTRY_ALIAS") {
            Ok(spec) => parse_aliases(&spec)?,
            Err(_) => Vec::new(),
        };
        Ok(Fixtures { values, aliases })
    }

    /// The raw fixture value `key` (file paths, host-side registry addresses).
    pub fn raw(&self, key: &str) -> anyhow::Result<String> {
        self.values
            .get(key)
            .cloned()
            .ok_or_else(|| anyhow!("the registry fixtures have no {key}"))
    }

    /// The fixture `key` as the cluster names it (registry alias applied).
    pub fn get(&self, key: &str) -> anyhow::Result<String> {
        Ok(self.in_cluster(&self.raw(key)?))
    }

    /// `reference` with its host-side registry replaced by the cluster's name.
    pub fn in_cluster(&self, reference: &str) -> String {
        for (from, to) in &self.aliases {
            if let Some(rest) = reference.strip_prefix(from.as_str())
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return format!("{to}{rest}");
            }
        }
        reference.to_string()
    }

    /// The PEM text of the harness's cosign public key `KEY1` or `KEY2`.
    pub fn key_pem(&self, which: &str) -> anyhow::Result<String> {
        let path = self.raw(which)?;
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {which} at {path}"))
    }
}

fn parse_aliases(spec: &str) -> anyhow::Result<Vec<(String, String)>> {
    spec.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
                .filter(|(a, b)| !a.is_empty() && !b.is_empty())
                .ok_or_else(|| {
                    anyhow!("SIGIL_E2E_REGISTRY_ALIAS: `{pair}` is not HOST:PORT=NAME:PORT")
                })
        })
        .collect()
}

/// One answer of the API server.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// The `Warning` headers' texts (admission warnings among them).
    pub warnings: Vec<String>,
    /// The JSON body (`Null` when there was none or it was not JSON).
    pub body: Value,
}

impl Reply {
    /// Whether the request succeeded.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The `Status` message of a failed request.
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or("")
    }

    /// Fails with the whole answer unless the request succeeded.
    pub fn expect_ok(self, what: &str) -> anyhow::Result<Self> {
        if self.ok() {
            Ok(self)
        } else {
            bail!("{what}: HTTP {}: {}", self.status, self.describe())
        }
    }

    /// A one-line description for assertion messages.
    pub fn describe(&self) -> String {
        let body = if self.message().is_empty() {
            self.body.to_string()
        } else {
            self.message().to_string()
        };
        format!(
            "status {} warnings {:?} body {}",
            self.status, self.warnings, body
        )
    }
}

/// A `Warning` header's text: `299 - "text"` → `text`.
fn warning_text(header: &str) -> String {
    let rest = header
        .split_once(' ')
        .and_then(|(_, r)| r.split_once(' '))
        .map_or(header, |(_, r)| r);
    let rest = rest.trim();
    rest.strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .unwrap_or(rest)
        .replace("\\\"", "\"")
}

/// The cluster the suite runs against.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
    /// sigil's namespace.
    pub sigil_namespace: String,
}

impl Cluster {
    /// What every scenario starts from: a connection, the fixtures, the
    /// opted-in namespace `ns`, and no policies left by earlier scenarios.
    pub async fn fresh_scenario(ns: &str) -> anyhow::Result<(Self, Fixtures)> {
        let cluster = Self::connect().await?;
        let fx = Fixtures::from_env()?;
        cluster.namespace(ns, true).await?;
        cluster.clear_policies().await?;
        Ok((cluster, fx))
    }

    /// Connects with `KUBECONFIG` (or the in-cluster configuration).
    pub async fn connect() -> anyhow::Result<Self> {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let client = kube::Client::try_default()
            .await
            .context("cannot build a Kubernetes client from KUBECONFIG")?;
        let sigil_namespace =
            std::env::var("SIGIL_E2E_NAMESPACE").unwrap_or_else(|_| "sigil-system".into());
        Ok(Cluster {
            client,
            sigil_namespace,
        })
    }

    /// The client, for what the helpers here do not cover (watches).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// One request; `body` is sent as JSON with `content_type`.
    pub async fn raw(
        &self,
        method: http::Method,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Reply> {
        let bytes = match body {
            Some(v) => serde_json::to_vec(v)?,
            None => Vec::new(),
        };
        let request = http::Request::builder()
            .method(method.clone())
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::ACCEPT, "application/json")
            .body(Body::from(bytes))
            .with_context(|| format!("cannot build {method} {path}"))?;
        let response = self
            .client
            .send(request)
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all(http::header::WARNING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(warning_text)
            .collect();
        let bytes = response
            .into_body()
            .collect_bytes()
            .await
            .with_context(|| format!("reading the answer to {method} {path}"))?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Reply {
            status,
            warnings,
            body,
        })
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> anyhow::Result<Reply> {
        self.raw(http::Method::GET, path, "application/json", None)
            .await
    }

    /// The chart's webhook pods in sigil's namespace, as the API server
    /// lists them; none when the webhook runs outside the cluster
    /// (`e2e/run-local.sh`).
    pub async fn webhook_pods(&self) -> anyhow::Result<Vec<Value>> {
        let ns = &self.sigil_namespace;
        let list = self
            .get(&format!(
                "/api/v1/namespaces/{ns}/pods?labelSelector=app.kubernetes.io%2Fcomponent%3Dwebhook"
            ))
            .await?;
        Ok(list.body["items"].as_array().cloned().unwrap_or_default())
    }

    /// A pod's metrics text, read through the API server's pod proxy from
    /// its container port named `metrics`.
    pub async fn pod_metrics(&self, pod: &Value) -> anyhow::Result<String> {
        let ns = &self.sigil_namespace;
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let port = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_array().into_iter().flatten())
            .find(|p| p["name"] == "metrics")
            .and_then(|p| p["containerPort"].as_u64())
            .ok_or_else(|| anyhow!("webhook pod {name} names no metrics port"))?;
        self.get_text(&format!(
            "/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/metrics"
        ))
        .await
    }

    /// The policy snapshot revision each ready webhook pod enforces
    /// (`sigil_policy_snapshot_revision`); empty when the webhook runs
    /// outside the cluster. A pod that is not ready, or is terminating,
    /// takes no admissions and is left out.
    pub async fn webhook_revisions(&self) -> anyhow::Result<Vec<(String, Option<i64>)>> {
        let mut out = Vec::new();
        for pod in self.webhook_pods().await? {
            let ready = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            if !ready || !pod["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let text = self.pod_metrics(&pod).await?;
            let revision = text.lines().find_map(|line| {
                line.strip_prefix("sigil_policy_snapshot_revision ")
                    .and_then(|v| v.trim().parse::<i64>().ok())
            });
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            out.push((name.to_owned(), revision));
        }
        Ok(out)
    }

    /// Waits (bounded by `timeout`) until every ready webhook replica
    /// enforces the same policy snapshot: after one replica answered with a
    /// new policy, the next admission may land on another that has not
    /// loaded it yet.
    pub async fn webhook_replicas_agree(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_for(
            "the webhook replicas to enforce one policy snapshot",
            timeout,
            async || {
                let seen = self.webhook_revisions().await?;
                let first = seen.first().map(|(_, r)| *r);
                Ok(
                    if seen.iter().all(|(_, r)| r.is_some() && Some(*r) == first) {
                        Ok(())
                    } else {
                        Err(format!("{seen:?}"))
                    },
                )
            },
        )
        .await
    }

    /// `GET path` of a plain-text resource (a pod's log).
    pub async fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .with_context(|| format!("cannot build GET {path}"))?;
        self.client
            .request_text(request)
            .await
            .with_context(|| format!("GET {path}"))
    }

    /// Server-side apply of `doc` at `path` (the object's own URL).
    pub async fn apply(&self, path: &str, doc: &Value) -> anyhow::Result<Reply> {
        let url = format!("{path}?fieldManager={FIELD_MANAGER}&force=true");
        self.raw(
            http::Method::PATCH,
            &url,
            "application/apply-patch+yaml",
            Some(doc),
        )
        .await
    }

    /// `DELETE path`; a missing object is not an error.
    pub async fn delete(&self, path: &str) -> anyhow::Result<()> {
        let reply = self
            .raw(http::Method::DELETE, path, "application/json", None)
            .await?;
        if reply.ok() || reply.status == 404 {
            Ok(())
        } else {
            bail!("DELETE {path}: {}", reply.describe())
        }
    }

    /// `POST` of `doc` into the collection at `path`; `dry_run` asks the API
    /// server to run admission (sigil's webhooks included: they declare
    /// `sideEffects: None`) without storing anything.
    pub async fn create(&self, path: &str, doc: &Value, dry_run: bool) -> anyhow::Result<Reply> {
        let url = if dry_run {
            format!("{path}?dryRun=All")
        } else {
            path.to_string()
        };
        self.raw(http::Method::POST, &url, "application/json", Some(doc))
            .await
    }

    /// Creates (or updates) namespace `name`, opted in to sigil when
    /// `opted_in`, and waits for its `default` ServiceAccount when a
    /// controller-manager makes one.
    pub async fn namespace(&self, name: &str, opted_in: bool) -> anyhow::Result<()> {
        let mut labels = BTreeMap::from([(E2E_LABEL.to_string(), "true".to_string())]);
        if opted_in {
            labels.insert("policy.sigil.dev/include".into(), "true".into());
        }
        let doc = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
        });
        self.apply(&format!("/api/v1/namespaces/{name}"), &doc)
            .await?
            .expect_ok(&format!("namespace {name}"))?;
        Ok(())
    }

    /// Tries to create a pod running `images` in `namespace` (dry run).
    pub async fn try_pod(&self, namespace: &str, images: &[&str]) -> anyhow::Result<Reply> {
        self.create(
            &format!("/api/v1/namespaces/{namespace}/pods"),
            &pod("e2e", images),
            true,
        )
        .await
    }

    /// Applies `cip` (a ClusterImagePolicy document), labelled for cleanup.
    pub async fn apply_policy(&self, cip: &Value) -> anyhow::Result<()> {
        self.apply_labelled(CIP_PATH, "ClusterImagePolicy", cip)
            .await
    }

    /// Applies `policy` (an ImagePolicy document with its namespace),
    /// labelled for cleanup.
    pub async fn apply_image_policy(&self, policy: &Value) -> anyhow::Result<()> {
        let (Some(namespace), Some(name)) = (
            policy["metadata"]["namespace"].as_str(),
            policy["metadata"]["name"].as_str(),
        ) else {
            bail!("ImagePolicy without metadata.namespace and name: {policy}");
        };
        self.apply(&image_policy_path(namespace, name), &labelled(policy)?)
            .await?
            .expect_ok(&format!("applying ImagePolicy {namespace}/{name}"))?;
        Ok(())
    }

    /// Applies an ImagePolicyException in `namespace` naming `policies`,
    /// the `images` globs and the `workloads` (kind, name), expiring
    /// `seconds` from now (whole seconds); returns `expiresAt` as written.
    pub async fn apply_exception(
        &self,
        namespace: &str,
        name: &str,
        policies: &[&str],
        images: &[&str],
        workloads: &[(&str, &str)],
        seconds: i64,
    ) -> anyhow::Result<String> {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let expires = k8s_openapi::jiff::Timestamp::from_second(now + seconds)?.to_string();
        let doc = serde_json::json!({
            "apiVersion": "policy.sigil.dev/v1alpha1",
            "kind": "ImagePolicyException",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "policies": policies,
                "images": images,
                "workloads": workloads
                    .iter()
                    .map(|(kind, name)| serde_json::json!({"kind": kind, "name": name}))
                    .collect::<Vec<_>>(),
                "expiresAt": expires,
                "reason": "sigil e2e",
            },
        });
        self.apply(
            &format!(
                "/apis/policy.sigil.dev/v1alpha1/namespaces/{namespace}/imagepolicyexceptions/{name}"
            ),
            &labelled(&doc)?,
        )
        .await?
        .expect_ok(&format!("applying ImagePolicyException {namespace}/{name}"))?;
        Ok(expires)
    }

    /// Applies `trust_root` (a TrustRoot document), labelled for cleanup.
    pub async fn apply_trust_root(&self, trust_root: &Value) -> anyhow::Result<()> {
        self.apply_labelled(TRUST_ROOT_PATH, "TrustRoot", trust_root)
            .await
    }

    /// Applies the cluster-scoped `doc` of `kind` into `collection`, with
    /// the suite's cleanup label.
    async fn apply_labelled(
        &self,
        collection: &str,
        kind: &str,
        doc: &Value,
    ) -> anyhow::Result<()> {
        let name = doc["metadata"]["name"]
            .as_str()
            .ok_or_else(|| anyhow!("{kind} without metadata.name: {doc}"))?;
        self.apply(&format!("{collection}/{name}"), &labelled(doc)?)
            .await?
            .expect_ok(&format!("applying {kind} {name}"))?;
        Ok(())
    }

    /// Applies a policy-controller object (`policy.sigstore.dev`, at the
    /// version it names) of `kind` as it is, labelled for cleanup.
    pub async fn apply_sigstore(&self, kind: &str, doc: &Value) -> anyhow::Result<()> {
        let plural = match kind {
            "ClusterImagePolicy" => "clusterimagepolicies",
            "TrustRoot" => "trustroots",
            other => return Err(anyhow!("{other} is not a policy-controller kind")),
        };
        let api_version = doc["apiVersion"]
            .as_str()
            .filter(|v| v.starts_with("policy.sigstore.dev/"))
            .ok_or_else(|| anyhow!("{kind} is not a policy.sigstore.dev object: {doc}"))?;
        self.apply_labelled(&format!("/apis/{api_version}/{plural}"), kind, doc)
            .await
    }

    /// Deletes every ClusterImagePolicy, ImagePolicy and TrustRoot the suite
    /// made, sigil's and policy-controller's (where that API is served), and sigil's
    /// converted copies of the latter.
    pub async fn clear_policies(&self) -> anyhow::Result<()> {
        for path in [
            SIGSTORE_CIP_PATH,
            SIGSTORE_TRUST_ROOT_PATH,
            CIP_PATH,
            TRUST_ROOT_PATH,
        ] {
            let list = self
                .get(&format!("{path}?labelSelector={E2E_LABEL}%3Dtrue"))
                .await?;
            if list.status == 404 && path.contains("sigstore") {
                continue;
            }
            let list = list.expect_ok(&format!("listing {path}"))?;
            for item in list.body["items"].as_array().into_iter().flatten() {
                if let Some(name) = item["metadata"]["name"].as_str() {
                    self.delete(&format!("{path}/{name}")).await?;
                }
            }
        }
        let list = self
            .get(&format!(
                "{IMAGE_POLICY_PATH}?labelSelector={E2E_LABEL}%3Dtrue"
            ))
            .await?
            .expect_ok("listing ImagePolicies")?;
        for item in list.body["items"].as_array().into_iter().flatten() {
            let meta = &item["metadata"];
            if let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) {
                self.delete(&image_policy_path(ns, name)).await?;
            }
        }
        // sigil's copies of policy-controller's objects go with their
        // sources; a scenario after one that failed half-way must not meet
        // one that is still on its way out.
        for path in [CIP_PATH, TRUST_ROOT_PATH] {
            let list = self
                .get(&format!(
                    "{path}?labelSelector=policy.sigil.dev%2Fconverted-from"
                ))
                .await?
                .expect_ok(&format!("listing {path}"))?;
            for item in list.body["items"].as_array().into_iter().flatten() {
                if let Some(name) = item["metadata"]["name"].as_str() {
                    self.delete(&format!("{path}/{name}")).await?;
                }
            }
        }
        Ok(())
    }

    /// The `Ready` condition of ClusterImagePolicy `name` once its
    /// `observedGeneration` has caught up: `(status, reason, message)`.
    pub async fn policy_ready(
        &self,
        name: &str,
    ) -> anyhow::Result<Option<(String, String, String)>> {
        self.ready_at(&format!("{CIP_PATH}/{name}")).await
    }

    /// The `Ready` condition of the object at `path` once its
    /// `observedGeneration` has caught up: `(status, reason, message)`.
    pub async fn ready_at(&self, path: &str) -> anyhow::Result<Option<(String, String, String)>> {
        let reply = self.get(path).await?;
        if !reply.ok() {
            return Ok(None);
        }
        let generation = reply.body["metadata"]["generation"].as_i64();
        let observed = reply.body["status"]["observedGeneration"].as_i64();
        if generation.is_none() || generation != observed {
            return Ok(None);
        }
        let conditions = reply.body["status"]["conditions"].as_array();
        Ok(conditions.into_iter().flatten().find_map(|c| {
            (c["type"] == "Ready").then(|| {
                let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
                (s("status"), s("reason"), s("message"))
            })
        }))
    }

    /// Events in `namespace` whose `involvedObject` has `kind`.
    pub async fn events(&self, namespace: &str, kind: &str) -> anyhow::Result<Vec<Value>> {
        let reply = self
            .get(&format!("/api/v1/namespaces/{namespace}/events"))
            .await?
            .expect_ok("listing events")?;
        Ok(reply.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["kind"] == kind)
            .cloned()
            .collect())
    }
}

/// `doc` with the suite's cleanup label added to `metadata.labels`.
fn labelled(doc: &Value) -> anyhow::Result<Value> {
    let mut doc = doc.clone();
    let metadata = doc
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| anyhow!("document without metadata object"))?;
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| anyhow!("metadata.labels is not an object"))?;
    labels.insert(E2E_LABEL.into(), json!("true"));
    Ok(doc)
}

/// The webhook's metrics address (`e2e/run-local.sh` exports it first in
/// `SIGIL_E2E_METRICS`).
pub fn webhook_metrics() -> Option<String> {
    std::env::var("SIGIL_E2E_METRICS")
        .ok()
        .and_then(|m| m.split_whitespace().next().map(str::to_owned))
}

/// A pod document running `images` (one container each).
pub fn pod(name: &str, images: &[&str]) -> Value {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {E2E_LABEL: "true"}},
        "spec": {"containers": containers},
    })
}

/// Polls `probe` every 100 ms until it yields a value or `timeout` passes;
/// the error names `what` and the last observation.
pub async fn wait_for<T, F>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: AsyncFnMut() -> anyhow::Result<Result<T, String>>,
{
    let start = Instant::now();
    loop {
        let last = match probe().await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(seen)) => seen,
            Err(e) => format!("error: {e:#}"),
        };
        if start.elapsed() > timeout {
            bail!("{what}: not within {timeout:?}; last seen: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A ClusterImagePolicy named `name` selecting `glob`, with `authorities`.
pub fn policy(name: &str, glob: &str, authorities: Value) -> Value {
    json!({
        "apiVersion": "policy.sigil.dev/v1alpha1",
        "kind": "ClusterImagePolicy",
        "metadata": {"name": name},
        "spec": {"images": [{"glob": glob}], "authorities": authorities},
    })
}

/// A key authority on `pem`. cosign signed the fixtures offline, so there
/// is no log entry and the authority waives it with `ctlog: {}`.
pub fn key_authority(name: &str, pem: &str) -> Value {
    json!({"name": name, "key": {"data": pem}, "ctlog": {}})
}

/// The first ClusterImagePolicy of `deploy/examples/<file>`, its globs
/// replaced by `glob`.
pub fn example_policy(file: &str, glob: &str) -> anyhow::Result<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/examples")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut doc = docs
        .into_iter()
        .find(|d| d["kind"] == "ClusterImagePolicy")
        .ok_or_else(|| anyhow!("{} has no ClusterImagePolicy", path.display()))?;
    doc["spec"]["images"] = json!([{ "glob": glob }]);
    Ok(doc)
}

/// Pushes a fresh image to `registry` (host side, `127.0.0.1:PORT`) and a
/// keyless signature by the testkit for it in the new bundle format and,
/// for a second image, in the legacy format. Returns both references by
/// digest, host side.
pub async fn push_keyless(
    registry: &str,
    repo: &str,
    kit: &Testkit,
    spec: &BundleSpec,
    label: &str,
) -> anyhow::Result<[String; 2]> {
    let push = Pusher::new(registry, repo).map_err(|e| anyhow!("{e}"))?;
    let new: OciManifest = cosign::image(&format!("{label}-new"));
    let legacy: OciManifest = cosign::image(&format!("{label}-legacy"));
    for image in [&new, &legacy] {
        push.manifest(image, &image.digest())
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    let minted =
        cosign::image_signature_bundle(kit, spec, &new.sha256()).map_err(|e| anyhow!("{e}"))?;
    let referrer = cosign::bundle_referrer(
        minted.json.as_bytes(),
        cosign::COSIGN_SIGN_PREDICATE,
        new.descriptor(),
    );
    push.referrer(&referrer, &new.digest())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let full_repo = format!("{registry}/{repo}");
    let signature = cosign::legacy_signature(kit, spec, &full_repo, &legacy.digest())
        .map_err(|e| anyhow!("{e}"))?;
    let manifest = cosign::legacy_signature_manifest(std::slice::from_ref(&signature));
    push.manifest(&manifest, &cosign::legacy_signature_tag(&legacy.digest()))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    Ok([
        format!("{full_repo}@{}", new.digest()),
        format!("{full_repo}@{}", legacy.digest()),
    ])
}

/// Pushes a fresh image to `registry` (host side) and, unless `spec` is
/// `None`, an attestation of `predicate_type` for it as a bundle referrer,
/// the way `actions/attest-build-provenance` pushes one (cosign v3's
/// layout). Returns the image reference by digest, host side.
pub async fn push_attested(
    registry: &str,
    repo: &str,
    kit: &Testkit,
    spec: Option<&BundleSpec>,
    predicate_type: &str,
    predicate: Value,
    label: &str,
) -> anyhow::Result<String> {
    let push = Pusher::new(registry, repo).map_err(|e| anyhow!("{e}"))?;
    let image: OciManifest = cosign::image(label);
    push.manifest(&image, &image.digest())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    if let Some(spec) = spec {
        let statement =
            sigil_testkit::in_toto_statement(&image.sha256(), predicate_type, predicate);
        let minted = kit
            .sign(
                spec,
                sigil_testkit::Content::Dsse {
                    payload_type: sigil_testkit::IN_TOTO_PAYLOAD_TYPE.to_owned(),
                    payload: statement,
                },
            )
            .map_err(|e| anyhow!("{e}"))?;
        let referrer =
            cosign::bundle_referrer(minted.json.as_bytes(), predicate_type, image.descriptor());
        push.referrer(&referrer, &image.digest())
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    Ok(format!("{registry}/{repo}@{}", image.digest()))
}

/// A TrustRoot named `name` whose `sigstoreKeys` describe the testkit's
/// Sigstore (its CA, Rekor and CT log keys), as an administrator would
/// write it for a private deployment.
pub fn testkit_trust_root(name: &str, kit: &Testkit) -> anyhow::Result<Value> {
    let mut keys = sigstore_keys(&kit.trusted_root_json())?;
    // The scenarios that use it verify by log entry; timestamps stay out.
    if let Some(keys) = keys.as_object_mut() {
        keys.remove("timestampAuthorities");
    }
    Ok(json!({
        "apiVersion": "policy.sigil.dev/v1alpha1",
        "kind": "TrustRoot",
        "metadata": {"name": name},
        "spec": {"sigstoreKeys": keys},
    }))
}

/// The `sigstoreKeys` of a TrustRoot (sigil's and policy-controller's
/// shape) holding what the trusted root `trusted_root_json` lists: its CAs,
/// timestamp authorities, Rekor and CT log keys.
pub fn sigstore_keys(trusted_root_json: &str) -> anyhow::Result<Value> {
    let root: Value = serde_json::from_str(trusted_root_json)?;
    let pem_b64 = |label: &str, der_b64: &str| -> anyhow::Result<String> {
        let der = STANDARD.decode(der_b64)?;
        Ok(STANDARD.encode(pem(label, &der)))
    };
    let logs = |field: &str| -> anyhow::Result<Vec<Value>> {
        root[field]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                let key = l["publicKey"]["rawBytes"]
                    .as_str()
                    .ok_or_else(|| anyhow!("{field}: log without publicKey.rawBytes"))?;
                Ok(json!({
                    "baseURL": l["baseUrl"],
                    "hashAlgorithm": "sha256",
                    "publicKey": pem_b64("PUBLIC KEY", key)?,
                }))
            })
            .collect()
    };
    let authorities = |field: &str| -> anyhow::Result<Vec<Value>> {
        root[field]
            .as_array()
            .into_iter()
            .flatten()
            .map(chain_authority)
            .collect()
    };
    Ok(json!({
        "certificateAuthorities": authorities("certificateAuthorities")?,
        "timestampAuthorities": authorities("timestampAuthorities")?,
        "tLogs": logs("tlogs")?,
        "ctLogs": logs("ctlogs")?,
    }))
}

/// One certificate authority of a trusted root as a TrustRoot's
/// `sigstoreKeys` entry (its chain as base64 PEM).
fn chain_authority(ca: &Value) -> anyhow::Result<Value> {
    let mut chain = String::new();
    for cert in ca["certChain"]["certificates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let der = cert["rawBytes"]
            .as_str()
            .ok_or_else(|| anyhow!("certificate without rawBytes"))?;
        chain.push_str(&pem("CERTIFICATE", &STANDARD.decode(der)?));
    }
    Ok(json!({
        "subject": {
            "organization": ca["subject"]["organization"].as_str().unwrap_or("sigil test"),
            "commonName": ca["subject"]["commonName"].as_str().unwrap_or("sigil test CA"),
        },
        "uri": ca["uri"],
        "certChain": STANDARD.encode(chain),
    }))
}

/// PEM text of `der` under `label`.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    let mut rest = b64.as_str();
    while !rest.is_empty() {
        let (line, tail) = rest.split_at(rest.len().min(64));
        out.push_str(line);
        out.push('\n');
        rest = tail;
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_headers_lose_code_agent_and_quotes() {
        assert_eq!(
            warning_text(r#"299 - "image x: policy p failed""#),
            "image x: policy p failed"
        );
        assert_eq!(warning_text("plain"), "plain");
    }

    #[test]
    fn aliases_replace_only_a_whole_registry_host() {
        let f = Fixtures {
            values: HashMap::from([(
                "A".to_string(),
                "127.0.0.1:5001/test/app@sha256:00".to_string(),
            )]),
            aliases: parse_aliases("127.0.0.1:5001=sigil-registry:5000").unwrap(),
        };
        assert_eq!(
            f.get("A").unwrap(),
            "sigil-registry:5000/test/app@sha256:00"
        );
        assert_eq!(f.in_cluster("127.0.0.1:50011/x"), "127.0.0.1:50011/x");
        assert!(parse_aliases("nonsense").is_err());
    }

    #[test]
    fn pem_lines_are_64_characters() {
        let text = pem("PUBLIC KEY", &[7u8; 100]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.first(), Some(&"-----BEGIN PUBLIC KEY-----"));
        assert_eq!(lines.get(1).map(|l| l.len()), Some(64));
        assert_eq!(lines.last(), Some(&"-----END PUBLIC KEY-----"));
    }
}
