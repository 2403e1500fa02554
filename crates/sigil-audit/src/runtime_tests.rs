//! [`runtime::run`] end to end against a fake API server that lists and
//! watches like a real one (resource versions, a watch that replays what
//! happened after the version it was asked from) and stores the reports it
//! is sent: pods added, changed and deleted and a policy change must show
//! in the report objects, which are patched in place, never recreated.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::{Bytes, Frame};
use serde_json::{Value, json};
use sigil_judge::judge::PolicyOutcome;
use sigil_judge::policy_judge::InForce;
use tokio::sync::watch;

use crate::metrics::AuditMetrics;
use crate::report::{Flavor, MANAGED_BY};
use crate::runtime::{self, RuntimeSettings};
use crate::tests::{bare_fixture, digest, included};

const PODS: &str = "/api/v1/pods";
const NAMESPACES: &str = "/api/v1/namespaces";
const REPLICA_SETS: &str = "/apis/apps/v1/replicasets";
const JOBS: &str = "/apis/batch/v1/jobs";
const REPORTS: &str = "/apis/openreports.io/v1alpha1/reports";
const CLUSTER_REPORTS: &str = "/apis/openreports.io/v1alpha1/clusterreports";
/// Status writes of ClusterImagePolicies, stored apart from the policies.
const POLICY_STATUS: &str = "/apis/policy.sigil.dev/v1alpha1/clusterimagepolicies/status";

/// What the fake API server holds: objects by (collection, namespace,
/// name), every change as a watch event, every request seen.
#[derive(Default)]
struct Store {
    version: u64,
    objects: BTreeMap<(String, String, String), Value>,
    events: Vec<(u64, String, &'static str, Value)>,
    requests: Vec<String>,
}

#[derive(Clone)]
struct FakeApi {
    store: Arc<Mutex<Store>>,
    changed: Arc<watch::Sender<u64>>,
}

fn kind_of(collection: &str) -> (&'static str, &'static str) {
    match collection {
        PODS => ("v1", "Pod"),
        NAMESPACES => ("v1", "Namespace"),
        REPLICA_SETS => ("apps/v1", "ReplicaSet"),
        JOBS => ("batch/v1", "Job"),
        REPORTS => ("openreports.io/v1alpha1", "Report"),
        POLICY_STATUS => ("policy.sigil.dev/v1alpha1", "ClusterImagePolicy"),
        _ => ("openreports.io/v1alpha1", "ClusterReport"),
    }
}

/// The collection, namespace and name a write is for.
fn report_target(path: &str) -> Option<(String, String, String)> {
    if let Some(rest) = path.strip_prefix("/apis/policy.sigil.dev/v1alpha1/clusterimagepolicies/") {
        let name = rest.strip_suffix("/status")?;
        return Some((POLICY_STATUS.to_string(), String::new(), name.to_string()));
    }
    let rest = path.strip_prefix("/apis/openreports.io/v1alpha1/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["namespaces", ns, "reports", name] => {
            Some((REPORTS.to_string(), (*ns).to_string(), (*name).to_string()))
        }
        ["clusterreports", name] => Some((
            CLUSTER_REPORTS.to_string(),
            String::new(),
            (*name).to_string(),
        )),
        _ => None,
    }
}

fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

type Frames = futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>>;

fn once(status: u16, body: &Value) -> http::Response<StreamBody<Frames>> {
    let bytes = Bytes::from(body.to_string());
    let frames: Frames = Box::pin(futures_util::stream::iter([Ok(Frame::data(bytes))]));
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(StreamBody::new(frames))
        .unwrap()
}

impl FakeApi {
    fn new() -> Self {
        Self {
            store: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
        }
    }

    /// Creates or replaces an object, as a watch event.
    fn put(&self, collection: &str, mut object: Value) {
        let mut s = self.store.lock().unwrap();
        s.version += 1;
        let version = s.version;
        let (api_version, kind) = kind_of(collection);
        object["apiVersion"] = json!(api_version);
        object["kind"] = json!(kind);
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        let key = (
            collection.to_string(),
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            object["metadata"]["name"].as_str().unwrap().to_string(),
        );
        let event = if s.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        s.objects.insert(key, object.clone());
        s.events
            .push((version, collection.to_string(), event, object));
        drop(s);
        self.changed.send_replace(version);
    }

    /// Deletes an object, as a watch event.
    fn remove(&self, collection: &str, namespace: &str, name: &str) {
        let mut s = self.store.lock().unwrap();
        let key = (
            collection.to_string(),
            namespace.to_string(),
            name.to_string(),
        );
        let Some(mut object) = s.objects.remove(&key) else {
            return;
        };
        s.version += 1;
        let version = s.version;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        s.events
            .push((version, collection.to_string(), "DELETED", object));
        drop(s);
        self.changed.send_replace(version);
    }

    fn report(&self, collection: &str, namespace: &str, name: &str) -> Option<Value> {
        self.store
            .lock()
            .unwrap()
            .objects
            .get(&(
                collection.to_string(),
                namespace.to_string(),
                name.to_string(),
            ))
            .cloned()
    }

    fn requests(&self) -> Vec<String> {
        self.store.lock().unwrap().requests.clone()
    }

    fn list(&self, collection: &str) -> Value {
        let s = self.store.lock().unwrap();
        let items: Vec<Value> = s
            .objects
            .iter()
            .filter(|((c, _, _), _)| c == collection)
            .map(|(_, o)| o.clone())
            .collect();
        json!({
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": s.version.to_string()},
            "items": items,
        })
    }

    /// A watch from `since`: what happened after it, then what happens,
    /// one JSON event per line, until the client goes away.
    fn watch(&self, collection: String, since: u64) -> Frames {
        let api = self.clone();
        let changes = self.changed.subscribe();
        Box::pin(futures_util::stream::unfold(
            (api, changes, since),
            move |(api, mut changes, mut cursor)| {
                let collection = collection.clone();
                async move {
                    loop {
                        let pending: Vec<(u64, String)> = {
                            let s = api.store.lock().unwrap();
                            s.events
                                .iter()
                                .filter(|(v, c, _, _)| *v > cursor && *c == collection)
                                .map(|(v, _, kind, object)| {
                                    (*v, json!({"type": kind, "object": object}).to_string())
                                })
                                .collect()
                        };
                        if let Some(last) = pending.last() {
                            cursor = last.0;
                            let lines: String = pending
                                .iter()
                                .map(|(_, line)| format!("{line}\n"))
                                .collect();
                            return Some((
                                Ok(Frame::data(Bytes::from(lines))),
                                (api, changes, cursor),
                            ));
                        }
                        if changes.changed().await.is_err() {
                            return None;
                        }
                    }
                }
            },
        ))
    }

    /// Server-side apply: the object as sent becomes the stored one (one
    /// field manager owns everything sigil writes); its uid is kept, and a
    /// new object gets a uid never used before.
    fn apply(&self, key: (String, String, String), body: &Value) -> Value {
        let mut object = body.clone();
        let uid = {
            let s = self.store.lock().unwrap();
            s.objects.get(&key).map_or_else(
                || json!(format!("uid-{}", s.version + 1)),
                |old| old["metadata"]["uid"].clone(),
            )
        };
        object["metadata"]["uid"] = uid;
        self.put(&key.0, object.clone());
        self.report(&key.0, &key.1, &key.2).unwrap_or(object)
    }

    fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let api = api.clone();
            async move {
                let method = req.method().to_string();
                let path = req.uri().path().to_string();
                let query = req.uri().query().unwrap_or_default().to_string();
                api.store
                    .lock()
                    .unwrap()
                    .requests
                    .push(format!("{method} {path}"));
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let response = match (method.as_str(), report_target(&path)) {
                    ("GET", _) if query_value(&query, "watch").as_deref() == Some("true") => {
                        let since = query_value(&query, "resourceVersion")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        http::Response::builder()
                            .status(200)
                            .header("content-type", "application/json")
                            .body(StreamBody::new(api.watch(path, since)))
                            .unwrap()
                    }
                    ("GET", _) => once(200, &api.list(&path)),
                    ("PATCH", Some(key)) => {
                        let sent: Value = serde_json::from_slice(&body).unwrap();
                        once(200, &api.apply(key, &sent))
                    }
                    ("DELETE", Some((collection, ns, name))) => {
                        api.remove(&collection, &ns, &name);
                        once(
                            200,
                            &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                        )
                    }
                    _ => once(
                        404,
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404, "message": format!("{method} {path}")}),
                    ),
                };
                Ok::<_, Infallible>(response)
            }
        });
        kube::Client::new(service, "default")
    }
}

fn namespace(name: &str, labels: &BTreeMap<String, String>) -> Value {
    json!({"metadata": {"name": name, "labels": labels}})
}

/// A running pod of Deployment `app` (through ReplicaSet `app-5d`).
fn pod(namespace: &str, name: &str, image: &str, d: usize) -> Value {
    let repository = image.split(':').next().unwrap_or_default();
    json!({
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{name}-5d"), "uid": format!("rs-{name}"), "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": image}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "image": image,
            "imageID": format!("{repository}@{}", digest(d)), "ready": true, "restartCount": 0}]}
    })
}

fn replica_set(namespace: &str, name: &str) -> Value {
    json!({"metadata": {"name": format!("{name}-5d"), "namespace": namespace,
        "uid": format!("rs-{name}"),
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
            "name": name, "uid": format!("deploy-{name}"), "controller": true}]}})
}

/// The (workload name, result) pairs of a report, sorted.
fn results(report: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = report["results"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    (
                        r["resources"][0]["name"]
                            .as_str()
                            .unwrap_or("-")
                            .to_string(),
                        r["result"].as_str().unwrap_or("-").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Waits until the shop report holds `want` (10 s at most).
async fn shop_report_becomes(api: &FakeApi, want: &[(&str, &str)], what: &str) -> Value {
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| ((*a).to_string(), (*b).to_string()))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let report = api.report(REPORTS, "shop", "sigil-audit");
        if let Some(r) = &report
            && results(r) == want
        {
            return r.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the shop report never became {want:?}; it is {:?}",
            report.as_ref().map(results)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_running_audit_keeps_reports_true_to_pod_and_policy_changes_patching_them_in_place_until_the_shutdown()
 {
    let api = FakeApi::new();
    api.put(NAMESPACES, namespace("shop", &included()));
    api.put(NAMESPACES, namespace("quiet", &BTreeMap::new()));
    api.put(REPLICA_SETS, replica_set("shop", "web"));
    api.put(PODS, pod("shop", "web", "r.example/app:1", 1));
    // Pods of a namespace admission does not guard are not audited.
    api.put(PODS, pod("quiet", "idle", "r.example/evil:1", 3));
    // A report an earlier run left in a namespace that has nothing to
    // report any more: the restarted audit adopts and deletes it.
    api.put(
        REPORTS,
        json!({"metadata": {"name": "sigil-audit", "namespace": "gone",
            "labels": {MANAGED_BY.0: MANAGED_BY.1}}, "results": []}),
    );

    let f = bare_fixture(&[("signed", "r.example/**")]);
    f.judge.set_outcome("r.example/evil", PolicyOutcome::Fail);
    let judge = f.judge.clone();
    let first = judge.in_force(&[]);
    let (revisions_tx, revisions) = watch::channel(first.revision);
    let in_force: Arc<Mutex<InForce>> = Arc::new(Mutex::new(first));
    let reading = in_force.clone();
    let settings = RuntimeSettings {
        settle: Duration::from_millis(100),
        flavor: Flavor::OpenReports,
        ..RuntimeSettings::default()
    };
    let metrics = AuditMetrics::new(&mut prometheus_client::registry::Registry::default());
    // Not spawned: the loop's future need not be Send (the binary awaits
    // it in place), so the checks run beside it in this task.
    let (stop, shutdown) = sigil_runtime::shutdown::channel();
    let audit = runtime::run(
        api.client(),
        f.auditor,
        revisions,
        move || Some(reading.lock().unwrap().clone()),
        metrics.clone(),
        settings,
        shutdown,
    );
    let mut audit = std::pin::pin!(audit);
    let checks = async {
        // Start: what runs is reported, the earlier run's leftover goes.
        let first_report = shop_report_becomes(&api, &[("web", "pass")], "at start").await;
        let uid = first_report["metadata"]["uid"].clone();
        assert_eq!(first_report["summary"]["pass"], 1);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while api.report(REPORTS, "gone", "sigil-audit").is_some() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the stale report stayed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(api.report(REPORTS, "quiet", "sigil-audit").is_none());
        assert!(api.report(CLUSTER_REPORTS, "", "sigil-audit").is_some());

        // A pod starts with an image its policy fails.
        api.put(REPLICA_SETS, replica_set("shop", "shady"));
        api.put(PODS, pod("shop", "shady", "r.example/evil:1", 2));
        let report = shop_report_becomes(
            &api,
            &[("shady", "fail"), ("web", "pass")],
            "after a pod started",
        )
        .await;
        let fail = report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["result"] == "fail")
            .unwrap();
        assert_eq!(fail["resources"][0]["kind"], "Deployment");
        assert!(
            fail["message"]
                .as_str()
                .unwrap()
                .contains("no signature found"),
            "{fail}"
        );
        assert_eq!(metrics.violations(), 1);

        // It is changed to run a signed image.
        api.put(PODS, pod("shop", "shady", "r.example/app:1", 1));
        shop_report_becomes(
            &api,
            &[("shady", "pass"), ("web", "pass")],
            "after a pod changed",
        )
        .await;
        assert_eq!(metrics.violations(), 0);

        // It is deleted.
        api.remove(PODS, "shop", "shady");
        shop_report_becomes(&api, &[("web", "pass")], "after a pod was deleted").await;

        // The policy changes so that the running image no longer passes.
        judge.set_outcome("r.example/app", PolicyOutcome::Fail);
        let newer = judge.in_force(&[("signed", "p1")]);
        let revision = newer.revision;
        *in_force.lock().unwrap() = newer;
        revisions_tx.send_replace(revision);
        let last = shop_report_becomes(&api, &[("web", "fail")], "after a policy change").await;

        // The policy's status carries the counts `kubectl get cip` shows.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let status = api.report(POLICY_STATUS, "", "signed");
            let audit = status.as_ref().map(|s| s["status"]["audit"].clone());
            if audit == Some(json!({"pass": 0, "fail": 1, "warn": 0, "error": 0})) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "status.audit of policy signed is {audit:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // One object all along, patched in place: never deleted or recreated.
        assert_eq!(last["metadata"]["uid"], uid);
        let shop_writes: Vec<String> = api
            .requests()
            .into_iter()
            .filter(|r| r.contains("/namespaces/shop/reports"))
            .collect();
        assert!(
            shop_writes
                .iter()
                .all(|r| r
                    == "PATCH /apis/openreports.io/v1alpha1/namespaces/shop/reports/sigil-audit"),
            "{shop_writes:?}"
        );
        assert!(api.requests().contains(
            &"DELETE /apis/openreports.io/v1alpha1/namespaces/gone/reports/sigil-audit".to_string()
        ));
    };
    tokio::select! {
        () = &mut audit => panic!("the audit loop ended while its watches were open"),
        () = checks => {}
    }
    // The shutdown ends the loop (its watches are still open).
    stop.trigger();
    tokio::time::timeout(Duration::from_secs(5), audit)
        .await
        .expect("the audit loop stops once the shutdown is requested");
}
