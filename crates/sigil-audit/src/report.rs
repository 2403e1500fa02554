//! The audit's results as report objects the ecosystem reads:
//! `openreports.io/v1alpha1` Report per namespace and one ClusterReport
//! (Kyverno 1.15+, Policy Reporter), or `wgpolicyk8s.io/v1alpha2`
//! PolicyReport / ClusterPolicyReport for older consumers. Both APIs have
//! the same body (`summary`, `results` with `resources`, `message`,
//! `properties`), so one builder serves both.
//!
//! A namespace's results are split over parts (`sigil-audit`,
//! `sigil-audit-1`, ...) bounded in results and bytes, far below the API
//! server's object size limit. The writer applies them server-side under
//! one field manager, so they are updated in place, never deleted and
//! recreated; it writes a part only when its content changed and deletes
//! only parts a shrinking namespace no longer needs.

use std::collections::{BTreeMap, HashMap};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::finding::{Finding, Outcome};

/// The field manager of every report write.
pub const FIELD_MANAGER: &str = "sigil-audit";
/// The label every report object sigil writes carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "sigil");
/// The name of a namespace's first report part; later parts add `-<n>`.
pub const REPORT_NAME: &str = "sigil-audit";
/// Results in one report part at most.
pub const DEFAULT_MAX_RESULTS: usize = 300;
/// Serialized results in one part at most, in bytes (the API server stores
/// objects up to about 1.5 MiB).
pub const MAX_PART_BYTES: usize = 512 * 1024;
/// Parts of one namespace at most; results beyond are left out and the
/// last part says how many (a namespace with more than 20 × 300 distinct
/// results has a report nobody reads).
pub const MAX_PARTS: usize = 20;

/// Which report API to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Flavor {
    /// `openreports.io/v1alpha1` Report and ClusterReport.
    #[value(name = "openreports")]
    OpenReports,
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport and ClusterPolicyReport.
    #[value(name = "wgpolicyk8s")]
    PolicyReport,
}

impl Flavor {
    fn group_version(self) -> (&'static str, &'static str) {
        match self {
            Self::OpenReports => ("openreports.io", "v1alpha1"),
            Self::PolicyReport => ("wgpolicyk8s.io", "v1alpha2"),
        }
    }

    /// The API resource of the namespaced report.
    pub fn namespaced(self) -> ApiResource {
        let (g, v) = self.group_version();
        let kind = match self {
            Self::OpenReports => "Report",
            Self::PolicyReport => "PolicyReport",
        };
        ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, kind))
    }

    /// The API resource of the cluster-wide report.
    pub fn cluster(self) -> ApiResource {
        let (g, v) = self.group_version();
        let kind = match self {
            Self::OpenReports => "ClusterReport",
            Self::PolicyReport => "ClusterPolicyReport",
        };
        ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, kind))
    }
}

/// The name of part `index` of a report.
pub fn part_name(index: usize) -> String {
    if index == 0 {
        REPORT_NAME.to_string()
    } else {
        format!("{REPORT_NAME}-{index}")
    }
}

/// The index of the part called `name`, `None` when sigil gives no part
/// that name (another tool's report carrying sigil's label by mistake).
pub fn part_index(name: &str) -> Option<usize> {
    if name == REPORT_NAME {
        return Some(0);
    }
    let index: usize = name
        .strip_prefix(REPORT_NAME)?
        .strip_prefix('-')?
        .parse()
        .ok()?;
    // "sigil-audit-01" is not a name part_name gives.
    (index > 0 && index < MAX_PARTS && part_name(index) == name).then_some(index)
}

fn summary<'a>(outcomes: impl Iterator<Item = &'a Outcome>) -> Value {
    let mut counts: BTreeMap<&str, usize> = Outcome::ALL.iter().map(|o| (o.as_str(), 0)).collect();
    for o in outcomes {
        *counts.entry(o.as_str()).or_default() += 1;
    }
    json!(counts)
}

/// One result of a namespaced report.
fn result(f: &Finding) -> Value {
    let mut properties = BTreeMap::from([
        (
            "container".to_string(),
            format!("{}/{}", f.list.label(), f.container),
        ),
        ("image".to_string(), f.image.clone()),
        ("pods".to_string(), f.pods.to_string()),
        ("enforced".to_string(), f.enforced.to_string()),
    ]);
    if !f.digest.is_empty() {
        properties.insert("digest".into(), f.digest.clone());
    }
    if !f.mode.is_empty() {
        properties.insert("mode".into(), f.mode.clone());
    }
    if !f.authorities.is_empty() {
        properties.insert("authorities".into(), f.authorities.join(", "));
    }
    json!({
        "source": "sigil",
        "policy": f.policy,
        "rule": f.container,
        "result": f.outcome.as_str(),
        // A warn- or audit-mode policy or an unguarded namespace never denies.
        "scored": f.enforced && !matches!(f.mode.as_str(), "warn" | "audit"),
        "message": f.message,
        "resources": [{
            "apiVersion": f.workload.api_version,
            "kind": f.workload.kind,
            "name": f.workload.name,
            "namespace": f.namespace,
            "uid": f.workload.uid,
        }],
        "properties": properties,
    })
}

/// A report object's body without its timestamps, and the hash the writer
/// compares to tell whether it changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// Its name.
    pub name: String,
    /// Its namespace (`None` for the cluster report).
    pub namespace: Option<String>,
    /// `summary` and `results`.
    pub body: Value,
    /// A hash of `body`.
    pub print: String,
}

fn part(name: String, namespace: Option<&str>, results: Vec<Value>, outcomes: &[Outcome]) -> Part {
    let body = json!({
        "source": "sigil",
        "summary": summary(outcomes.iter()),
        "results": results,
    });
    let print = hex::encode(Sha256::digest(body.to_string().as_bytes()));
    Part {
        name,
        namespace: namespace.map(str::to_string),
        body,
        print,
    }
}

/// The parts of `namespace`'s report from its findings (in report order),
/// at most `max_results` results and [`MAX_PART_BYTES`] each; empty when it
/// has no findings (its parts are then deleted).
pub fn namespace_parts(namespace: &str, findings: &[Finding], max_results: usize) -> Vec<Part> {
    let max_results = max_results.clamp(1, 5000);
    let mut parts = Vec::new();
    let mut results = Vec::new();
    let mut outcomes = Vec::new();
    let mut bytes = 0;
    for (i, f) in findings.iter().enumerate() {
        let r = result(f);
        let size = r.to_string().len();
        if !results.is_empty() && (results.len() >= max_results || bytes + size > MAX_PART_BYTES) {
            if parts.len() + 1 == MAX_PARTS {
                let left = findings.len() - i;
                results.push(json!({
                    "source": "sigil",
                    "policy": "report-size",
                    "result": "error",
                    "scored": false,
                    "message": format!("{left} more results of namespace {namespace} are not \
                        reported: the report is at its limit of {MAX_PARTS} parts; narrow the \
                        audit's namespaces or raise --audit-report-max-results"),
                }));
                outcomes.push(Outcome::Error);
                break;
            }
            parts.push(part(
                part_name(parts.len()),
                Some(namespace),
                std::mem::take(&mut results),
                &std::mem::take(&mut outcomes),
            ));
            bytes = 0;
        }
        bytes += size;
        results.push(r);
        outcomes.push(f.outcome);
    }
    if !results.is_empty() {
        parts.push(part(
            part_name(parts.len()),
            Some(namespace),
            results,
            &outcomes,
        ));
    }
    parts
}

/// The cluster report: per policy, the worst outcome over every audited
/// namespace and how many results had each outcome, so `kubectl get
/// clusterreports` shows at a glance which policies would deny what runs.
pub fn cluster_part(findings: &[Finding]) -> Part {
    let mut by_policy: BTreeMap<&str, (Outcome, BTreeMap<&str, usize>, usize)> = BTreeMap::new();
    for f in findings {
        let entry = by_policy
            .entry(&f.policy)
            .or_insert((Outcome::Skip, BTreeMap::new(), 0));
        if f.outcome.severity() > entry.0.severity() {
            entry.0 = f.outcome;
        }
        *entry.1.entry(f.outcome.as_str()).or_default() += 1;
        if matches!(f.outcome, Outcome::Fail | Outcome::Error) {
            entry.2 += f.pods;
        }
    }
    let mut outcomes = Vec::new();
    let results = by_policy
        .into_iter()
        .map(|(policy, (worst, counts, pods))| {
            outcomes.push(worst);
            let counted: Vec<String> = counts.iter().map(|(o, n)| format!("{n} {o}")).collect();
            let properties: BTreeMap<String, String> = counts
                .iter()
                .map(|(o, n)| ((*o).to_string(), n.to_string()))
                .chain([("podsFailingOrInError".to_string(), pods.to_string())])
                .collect();
            json!({
                "source": "sigil",
                "policy": policy,
                "result": worst.as_str(),
                "scored": true,
                "message": format!("{policy}: {} over the audited workloads", counted.join(", ")),
                "properties": properties,
            })
        })
        .collect();
    part(REPORT_NAME.to_string(), None, results, &outcomes)
}

/// One policy's results by outcome, as the audit writes them into the
/// ClusterImagePolicy's `status.audit` (its Pass and Fail columns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PolicyCounts {
    /// Results passing.
    pub pass: i64,
    /// Results failing.
    pub fail: i64,
    /// Results passing with warnings.
    pub warn: i64,
    /// Results that could not be judged.
    pub error: i64,
}

/// Per policy of `policies`, its results among `findings` by outcome
/// (zero for a policy that selects nothing running).
pub fn policy_counts(findings: &[Finding], policies: &[String]) -> BTreeMap<String, PolicyCounts> {
    let mut counts: BTreeMap<String, PolicyCounts> = policies
        .iter()
        .map(|p| (p.clone(), PolicyCounts::default()))
        .collect();
    for f in findings {
        if let Some(c) = counts.get_mut(&f.policy) {
            match f.outcome {
                Outcome::Pass => c.pass += 1,
                Outcome::Fail => c.fail += 1,
                Outcome::Warn => c.warn += 1,
                Outcome::Error => c.error += 1,
                Outcome::Skip => {}
            }
        }
    }
    counts
}

/// The ClusterImagePolicy resource (`policy.sigil.dev/v1alpha1`).
fn policy_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy.sigil.dev", "v1alpha1", "ClusterImagePolicy"),
        "clusterimagepolicies",
    )
}

/// The namespaced ImagePolicy resource (`policy.sigil.dev/v1alpha1`),
/// whose policies the judge names `NAMESPACE/NAME`.
fn image_policy_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy.sigil.dev", "v1alpha1", "ImagePolicy"),
        "imagepolicies",
    )
}

/// The object to apply for `part`, stamped with `now` (RFC 3339 seconds).
fn object(flavor: Flavor, part: &Part, now_seconds: i64) -> DynamicObject {
    let resource = if part.namespace.is_some() {
        flavor.namespaced()
    } else {
        flavor.cluster()
    };
    let mut obj = DynamicObject::new(&part.name, &resource);
    obj.metadata.namespace.clone_from(&part.namespace);
    obj.metadata.labels = Some(BTreeMap::from([(
        MANAGED_BY.0.to_string(),
        MANAGED_BY.1.to_string(),
    )]));
    let mut body = part.body.clone();
    if let Some(results) = body.get_mut("results").and_then(Value::as_array_mut) {
        for r in results {
            if let Some(r) = r.as_object_mut() {
                r.insert(
                    "timestamp".into(),
                    json!({"seconds": now_seconds, "nanos": 0}),
                );
            }
        }
    }
    obj.data = body;
    obj
}

/// What one [`Writer::write`] did against the API server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Parts applied (created or changed).
    pub applied: usize,
    /// Parts deleted (a namespace's report shrank or emptied).
    pub deleted: usize,
    /// Parts left alone because nothing in them changed.
    pub unchanged: usize,
}

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The reports written before could not be listed.
    #[error(
        "cannot list the {kind} objects sigil wrote before: {source}; check that the report \
             CRDs are installed and that sigil's service account may list them"
    )]
    List {
        /// The report kind.
        kind: String,
        /// The client's error.
        source: kube::Error,
    },
    /// The API server refused or failed a write.
    #[error(
        "cannot write report {kind} {name} (namespace {namespace}): {source}; check that the \
             report CRDs are installed and that sigil's service account may patch them"
    )]
    Api {
        /// The report kind.
        kind: String,
        /// Its name.
        name: String,
        /// Its namespace (empty for cluster reports).
        namespace: String,
        /// The client's error.
        source: kube::Error,
    },
}

/// Writes report parts, remembering what it wrote so unchanged parts cost
/// no API call.
pub struct Writer {
    client: kube::Client,
    flavor: Flavor,
    /// Per (namespace, name), the print last applied.
    written: HashMap<(String, String), String>,
    /// Per namespace, how many parts it has.
    counts: HashMap<String, usize>,
    /// Per policy, the counts last written into its status.
    policy_status: BTreeMap<String, PolicyCounts>,
}

impl Writer {
    /// A writer of `flavor` reports through `client`.
    pub fn new(client: kube::Client, flavor: Flavor) -> Self {
        Self {
            client,
            flavor,
            written: HashMap::new(),
            counts: HashMap::new(),
            policy_status: BTreeMap::new(),
        }
    }

    fn api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &self.flavor.namespaced()),
            None => Api::all_with(self.client.clone(), &self.flavor.cluster()),
        }
    }

    /// Brings the report of `namespace` (the cluster report when `None`)
    /// to `parts`: applies changed parts, deletes parts beyond them. A
    /// failure leaves the writer's memory such that the next call retries.
    pub async fn write(
        &mut self,
        namespace: Option<&str>,
        parts: &[Part],
        now_seconds: i64,
    ) -> Result<WriteStats, WriteError> {
        let ns_key = namespace.unwrap_or_default().to_string();
        let api = self.api(namespace);
        let resource = if namespace.is_some() {
            self.flavor.namespaced()
        } else {
            self.flavor.cluster()
        };
        let fail = |name: &str, source| WriteError::Api {
            kind: resource.kind.clone(),
            name: name.to_string(),
            namespace: ns_key.clone(),
            source,
        };
        let mut stats = WriteStats::default();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for p in parts {
            let key = (ns_key.clone(), p.name.clone());
            if self.written.get(&key) == Some(&p.print) {
                stats.unchanged += 1;
                continue;
            }
            let obj = object(self.flavor, p, now_seconds);
            api.patch(&p.name, &params, &Patch::Apply(&obj))
                .await
                .map_err(|e| fail(&p.name, e))?;
            self.written.insert(key, p.print.clone());
            stats.applied += 1;
        }
        let before = self.counts.get(&ns_key).copied().unwrap_or_default();
        for index in parts.len()..before {
            let name = part_name(index);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(fail(&name, e)),
            }
            self.written.remove(&(ns_key.clone(), name));
            stats.deleted += 1;
        }
        if parts.is_empty() {
            self.counts.remove(&ns_key);
        } else {
            self.counts.insert(ns_key, parts.len());
        }
        Ok(stats)
    }

    /// Whether `policies` are the ones whose status was last written: when
    /// not, the next [`Writer::write_policy_status`] has news.
    pub fn policy_status_covers(&self, policies: &[String]) -> bool {
        self.policy_status.len() == policies.len()
            && policies.iter().all(|p| self.policy_status.contains_key(p))
    }

    /// Writes each policy's counts into its `status.audit` (server-side
    /// apply of that field only, so the controller's conditions stay its
    /// own), skipping counts already written. A policy deleted meanwhile is
    /// skipped. Returns how many statuses were written.
    pub async fn write_policy_status(
        &mut self,
        counts: &BTreeMap<String, PolicyCounts>,
    ) -> Result<usize, WriteError> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.policy_status.retain(|p, _| counts.contains_key(p));
        let mut written = 0;
        for (policy, c) in counts {
            if self.policy_status.get(policy) == Some(c) {
                continue;
            }
            // `NAMESPACE/NAME` is an ImagePolicy (a ClusterImagePolicy's name
            // has no `/`).
            let (resource, namespace, name) = match policy.split_once('/') {
                Some((ns, name)) => (image_policy_resource(), ns, name),
                None => (policy_resource(), "", policy.as_str()),
            };
            let api: Api<DynamicObject> = if namespace.is_empty() {
                Api::all_with(self.client.clone(), &resource)
            } else {
                Api::namespaced_with(self.client.clone(), namespace, &resource)
            };
            let body = json!({
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "metadata": {"name": name},
                "status": {"audit": c},
            });
            match api.patch_status(name, &params, &Patch::Apply(&body)).await {
                Ok(_) => written += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => {
                    // Not covered any more: the next pass writes it again.
                    self.policy_status.remove(policy);
                    return Err(WriteError::Api {
                        kind: resource.kind.clone(),
                        name: format!("{name} (status)"),
                        namespace: namespace.to_owned(),
                        source,
                    });
                }
            }
            self.policy_status.insert(policy.clone(), *c);
        }
        Ok(written)
    }

    /// Learns the parts that already exist (from a list at start), so a
    /// restarted audit deletes parts it no longer needs.
    pub fn adopt(&mut self, namespace: Option<&str>, parts: usize) {
        let key = namespace.unwrap_or_default().to_string();
        let held = self.counts.entry(key).or_default();
        *held = (*held).max(parts);
    }

    /// Lists the namespaced reports an earlier run wrote (by sigil's
    /// label) and adopts them, so that the first passes rewrite or delete
    /// them instead of leaving stale results behind. Returns their
    /// namespaces, which the caller marks to be written again.
    pub async fn adopt_written(&mut self) -> Result<Vec<String>, WriteError> {
        let resource = self.flavor.namespaced();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
        let mut params = ListParams::default().labels(&selector).limit(500);
        let mut found: BTreeMap<String, usize> = BTreeMap::new();
        let mut listed = 0usize;
        loop {
            let page = api
                .list_metadata(&params)
                .await
                .map_err(|source| WriteError::List {
                    kind: resource.kind.clone(),
                    source,
                })?;
            for item in &page.items {
                let (Some(ns), Some(index)) = (
                    item.metadata.namespace.as_deref(),
                    item.metadata.name.as_deref().and_then(part_index),
                ) else {
                    continue;
                };
                let parts = found.entry(ns.to_string()).or_default();
                *parts = (*parts).max(index + 1);
            }
            listed += page.items.len();
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                // Bounded like every other list: a label selector over
                // reports cannot grow past namespaces times parts.
                Some(token) if listed < crate::cluster::MAX_OBJECTS => {
                    params = params.continue_token(&token);
                }
                _ => break,
            }
        }
        for (ns, parts) in &found {
            self.adopt(Some(ns), *parts);
        }
        Ok(found.into_keys().collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::workload::{ContainerList, Workload};

    fn finding(name: &str, outcome: Outcome) -> Finding {
        Finding {
            namespace: "shop".into(),
            workload: Workload {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            list: ContainerList::Main,
            container: "app".into(),
            image: "r.example/app:1".into(),
            digest: format!("sha256:{:064x}", 1),
            policy: "signed".into(),
            mode: "enforce".into(),
            authorities: vec!["k (key)".into()],
            outcome,
            message: if outcome == Outcome::Fail {
                "policy signed failed: authority k (key): no signature found".into()
            } else {
                String::new()
            },
            enforced: true,
            pods: 3,
        }
    }

    /// A fake API server that records each request's method and path and
    /// answers every one with the object it was sent (or a Status).
    #[derive(Clone, Default)]
    struct Recorder {
        seen: Arc<Mutex<Vec<(String, String, Value)>>>,
    }

    impl Recorder {
        fn client(&self) -> kube::Client {
            let seen = self.seen.clone();
            let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
                let seen = seen.clone();
                async move {
                    let method = req.method().to_string();
                    let path = req.uri().path().to_string();
                    let bytes = http_body_util::BodyExt::collect(req.into_body())
                        .await
                        .unwrap()
                        .to_bytes();
                    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                    seen.lock()
                        .unwrap()
                        .push((method.clone(), path, body.clone()));
                    let answer = if method == "DELETE" {
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})
                    } else {
                        body
                    };
                    Ok::<_, Infallible>(
                        http::Response::builder()
                            .status(200)
                            .header("content-type", "application/json")
                            .body(kube::client::Body::from(
                                serde_json::to_vec(&answer).unwrap(),
                            ))
                            .unwrap(),
                    )
                }
            });
            kube::Client::new(service, "default")
        }

        fn take(&self) -> Vec<(String, String, Value)> {
            std::mem::take(&mut *self.seen.lock().unwrap())
        }
    }

    #[test]
    fn one_result_per_workload_container_and_policy_with_the_denial_text() {
        let parts = namespace_parts(
            "shop",
            &[finding("api", Outcome::Fail), finding("web", Outcome::Pass)],
            DEFAULT_MAX_RESULTS,
        );
        assert_eq!(parts.len(), 1);
        let body = &parts[0].body;
        assert_eq!(body["summary"]["fail"], 1);
        assert_eq!(body["summary"]["pass"], 1);
        let r = &body["results"][0];
        assert_eq!(r["result"], "fail");
        assert_eq!(r["policy"], "signed");
        assert_eq!(r["resources"][0]["kind"], "Deployment");
        assert_eq!(r["resources"][0]["name"], "api");
        assert_eq!(r["properties"]["pods"], "3");
        assert_eq!(r["properties"]["container"], "containers/app");
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("no signature found")
        );
    }

    #[test]
    fn large_namespaces_are_split_into_bounded_parts_and_capped() {
        let many: Vec<Finding> = (0..25)
            .map(|i| finding(&format!("w{i:02}"), Outcome::Pass))
            .collect();
        let parts = namespace_parts("shop", &many, 10);
        let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["sigil-audit", "sigil-audit-1", "sigil-audit-2"]);
        let sizes: Vec<usize> = parts
            .iter()
            .map(|p| p.body["results"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, [10, 10, 5]);

        let huge: Vec<Finding> = (0..(MAX_PARTS * 2 + 5))
            .map(|i| finding(&format!("w{i:03}"), Outcome::Pass))
            .collect();
        let parts = namespace_parts("shop", &huge, 2);
        assert_eq!(parts.len(), MAX_PARTS);
        let last = parts.last().unwrap().body["results"]
            .as_array()
            .unwrap()
            .clone();
        let note = last.last().unwrap();
        assert_eq!(note["policy"], "report-size");
        assert!(
            note["message"].as_str().unwrap().contains("5 more results"),
            "{note}"
        );
    }

    #[test]
    fn the_cluster_report_gives_each_policy_its_worst_outcome_and_counts() {
        let mut other = finding("web", Outcome::Pass);
        other.policy = "attested".into();
        let part = cluster_part(&[
            finding("api", Outcome::Fail),
            finding("web", Outcome::Pass),
            other,
        ]);
        assert_eq!(part.namespace, None);
        let results = part.body["results"].as_array().unwrap();
        assert_eq!(results[0]["policy"], "attested");
        assert_eq!(results[0]["result"], "pass");
        assert_eq!(results[1]["policy"], "signed");
        assert_eq!(results[1]["result"], "fail");
        assert_eq!(results[1]["properties"]["podsFailingOrInError"], "3");
        assert_eq!(part.body["summary"]["fail"], 1);
    }

    #[tokio::test]
    async fn reports_are_applied_in_place_only_when_changed_and_shrunk_by_deleting_extra_parts() {
        let api = Recorder::default();
        let mut writer = Writer::new(api.client(), Flavor::OpenReports);
        let three: Vec<Finding> = (0..3)
            .map(|i| finding(&format!("w{i}"), Outcome::Pass))
            .collect();
        let parts = namespace_parts("shop", &three, 2);
        let stats = writer.write(Some("shop"), &parts, 100).await.unwrap();
        assert_eq!(
            stats,
            WriteStats {
                applied: 2,
                deleted: 0,
                unchanged: 0
            }
        );
        let seen = api.take();
        assert_eq!(
            seen[0].0, "PATCH",
            "server-side apply, never delete and create"
        );
        assert_eq!(
            seen[0].1,
            "/apis/openreports.io/v1alpha1/namespaces/shop/reports/sigil-audit"
        );
        assert_eq!(seen[0].2["kind"], "Report");
        assert_eq!(
            seen[0].2["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "sigil"
        );
        assert_eq!(seen[0].2["results"][0]["timestamp"]["seconds"], 100);

        // Nothing changed: no request at all, however much time passed.
        let stats = writer.write(Some("shop"), &parts, 200).await.unwrap();
        assert_eq!(stats.unchanged, 2);
        assert!(api.take().is_empty());

        // One workload turns to fail and another goes: the first part is
        // patched in place, the second part is no longer needed.
        let two = vec![finding("w0", Outcome::Fail), finding("w1", Outcome::Pass)];
        let stats = writer
            .write(Some("shop"), &namespace_parts("shop", &two, 2), 300)
            .await
            .unwrap();
        assert_eq!(
            stats,
            WriteStats {
                applied: 1,
                deleted: 1,
                unchanged: 0
            }
        );
        let seen = api.take();
        assert_eq!(
            (seen[0].0.as_str(), seen[1].0.as_str()),
            ("PATCH", "DELETE")
        );
        assert!(seen[1].1.ends_with("/reports/sigil-audit-1"));

        // The last pod gone: the report goes.
        let stats = writer.write(Some("shop"), &[], 400).await.unwrap();
        assert_eq!(stats.deleted, 1);
    }

    #[tokio::test]
    async fn each_policys_counts_go_to_its_own_object_an_image_policys_in_its_namespace() {
        let api = Recorder::default();
        let mut writer = Writer::new(api.client(), Flavor::OpenReports);
        let mut tenant = finding("w1", Outcome::Fail);
        tenant.policy = "shop/extra".into();
        let findings = vec![finding("w0", Outcome::Pass), tenant];
        let policies = vec!["signed".to_string(), "shop/extra".to_string()];
        let counts = policy_counts(&findings, &policies);
        assert_eq!(writer.write_policy_status(&counts).await.unwrap(), 2);
        let seen = api.take();
        let paths: Vec<&str> = seen.iter().map(|(_, path, _)| path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/apis/policy.sigil.dev/v1alpha1/namespaces/shop/imagepolicies/extra/status",
                "/apis/policy.sigil.dev/v1alpha1/clusterimagepolicies/signed/status",
            ]
        );
        assert_eq!(seen[0].2["kind"], "ImagePolicy");
        assert_eq!(seen[0].2["metadata"]["name"], "extra");
        assert_eq!(seen[0].2["status"]["audit"]["fail"], 1);
        assert_eq!(seen[1].2["status"]["audit"]["pass"], 1);
    }

    #[tokio::test]
    async fn the_policy_report_flavor_writes_wgpolicyk8s_objects() {
        let api = Recorder::default();
        let mut writer = Writer::new(api.client(), Flavor::PolicyReport);
        writer
            .write(None, &[cluster_part(&[finding("w", Outcome::Pass)])], 1)
            .await
            .unwrap();
        let seen = api.take();
        assert_eq!(
            seen[0].1,
            "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports/sigil-audit"
        );
        assert_eq!(seen[0].2["kind"], "ClusterPolicyReport");
    }
}
