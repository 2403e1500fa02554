//! The audit at scale against a fake judge and a fake API server: 10,000
//! pods of 1,000 Deployments in 100 namespaces, running 200 distinct
//! digests. Prints the judge calls, wall and CPU time, peak memory and API
//! writes of: the first audit, a pass where nothing changed, a policy
//! change that affects half of the images, and the deletion of a tenth of
//! the pods. The judge answers at once, so the times are the audit's own
//! cost (registry time adds per distinct image, bounded by concurrency).
//!
//! `cargo bench -p sigil-audit --bench audit_scale`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant as StdInstant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use sigil_audit::auditor::Auditor;
use sigil_audit::engine::EngineSettings;
use sigil_audit::report::{self, Flavor, Writer};
use sigil_audit::scope::{INCLUDE_LABEL, Scope};
use sigil_judge::cache::{CacheConfig, CachedJudge, NoObserver};
use sigil_judge::judge::{
    AuthorityVerdict, ImageJudge, ObjectInfo, PinnedImage, PolicyOutcome, PolicyVerdict,
    PullSecrets, Verdict, Versions,
};
use sigil_judge::policy_judge::InForce;
use sigil_judge::secrets::NoPullSecrets;
use sigil_policy::{CompiledPolicy, Glob, Mode, Platforms};
use tokio::time::Instant;

const PODS: usize = 10_000;
const DIGESTS: usize = 200;
const NAMESPACES: usize = 100;
const DEPLOYMENTS: usize = 1_000;

/// Passes images of even repositories, fails odd ones; counts calls.
#[derive(Default)]
struct Judge {
    calls: AtomicUsize,
    revision: AtomicUsize,
}

impl ImageJudge for Judge {
    async fn judge(
        &self,
        image: &PinnedImage,
        _object: &ObjectInfo,
        _secrets: &PullSecrets,
        _deadline: Instant,
    ) -> Verdict {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let odd = image
            .image
            .trim_end_matches(":1")
            .ends_with(['1', '3', '5', '7', '9']);
        let policy = if image.image.contains("/half-a/") {
            "half-a"
        } else {
            "half-b"
        };
        let outcome = if odd {
            PolicyOutcome::Fail
        } else {
            PolicyOutcome::Pass
        };
        Verdict {
            allowed: !odd,
            results: vec![PolicyVerdict {
                policy: policy.into(),
                mode: sigil_policy::model::Mode::Enforce,
                outcome,
                authorities: vec![AuthorityVerdict {
                    name: "release-key".into(),
                    kind: "key",
                    passed: !odd,
                }],
                message: if odd {
                    format!(
                        "policy {policy} failed: authority release-key (key): no signature found"
                    )
                } else {
                    String::new()
                },
            }],
            ..Verdict::default()
        }
    }

    async fn resolve(&self, _: &str, _: &PullSecrets, _: Instant) -> Result<String, String> {
        Err("not used".into())
    }

    fn matches(&self, _image: &str, _object: &ObjectInfo) -> bool {
        true
    }

    fn no_match(&self, _image: &str) -> Verdict {
        Verdict::allow(Vec::new())
    }

    fn versions(&self) -> Versions {
        Versions {
            policy_hash: self.revision.load(Ordering::SeqCst).to_string(),
            trust_root_version: String::new(),
        }
    }

    fn ready(&self) -> bool {
        true
    }
}

fn in_force(revision: u64, print_a: &str) -> InForce {
    let policy = |name: &str, glob: &str| CompiledPolicy {
        name: name.into(),
        namespace: None,
        images: vec![Glob::compile(glob).unwrap()],
        authorities: Vec::new(),
        policy: None,
        mode: Mode::Enforce,
        matches: Vec::new(),
        platforms: Platforms::Named,
    };
    InForce {
        revision,
        versions: Versions {
            policy_hash: revision.to_string(),
            trust_root_version: String::new(),
        },
        policies: BTreeMap::from([
            (
                "half-a".into(),
                (print_a.into(), policy("half-a", "r.example/half-a/**")),
            ),
            (
                "half-b".into(),
                ("b".into(), policy("half-b", "r.example/half-b/**")),
            ),
        ]),
    }
}

fn image(d: usize) -> String {
    let half = if d.is_multiple_of(2) {
        "half-a"
    } else {
        "half-b"
    };
    format!("r.example/{half}/app{d}:1")
}

fn pod(i: usize) -> Pod {
    let deployment = i % DEPLOYMENTS;
    let d = deployment % DIGESTS;
    let image = image(d);
    serde_json::from_value(json!({
        "metadata": {"name": format!("app{deployment}-{i}"), "namespace": format!("ns{}", deployment % NAMESPACES),
            "uid": format!("pod-{i}"),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("app{deployment}-5d"),
                "uid": format!("rs-{deployment}"), "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": image}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "image": image,
            "imageID": format!("{}@sha256:{d:064x}", image.trim_end_matches(":1")), "ready": true, "restartCount": 0}]}
    }))
    .unwrap()
}

fn counting_client(writes: Arc<AtomicUsize>) -> kube::Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let writes = writes.clone();
        async move {
            writes.fetch_add(1, Ordering::SeqCst);
            let bytes = http_body_util::BodyExt::collect(req.into_body())
                .await
                .unwrap()
                .to_bytes();
            let body = if bytes.is_empty() {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            Ok::<_, Infallible>(
                http::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            )
        }
    });
    kube::Client::new(service, "default")
}

/// CPU time of this (single) thread so far, in ns.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

async fn write_dirty(
    auditor: &mut Auditor<Judge, NoPullSecrets>,
    writer: &mut Writer,
) -> (usize, usize) {
    let (mut applied, mut deleted) = (0, 0);
    for ns in auditor.take_dirty() {
        let findings = auditor.findings(Some(&ns));
        let parts = report::namespace_parts(&ns, &findings, report::DEFAULT_MAX_RESULTS);
        let stats = writer.write(Some(&ns), &parts, 1).await.unwrap();
        applied += stats.applied;
        deleted += stats.deleted;
    }
    let all = auditor.findings(None);
    let stats = writer
        .write(None, &[report::cluster_part(&all)], 1)
        .await
        .unwrap();
    (applied + stats.applied, deleted + stats.deleted)
}

struct Step {
    wall: StdInstant,
    cpu: u64,
    calls: usize,
    writes: usize,
}

fn report_step(
    name: &str,
    start: &Step,
    judge: &Judge,
    writes: &AtomicUsize,
    applied_deleted: (usize, usize),
) {
    println!(
        "{name}: wall {:.1} ms, cpu {:.1} ms, judge calls {}, api writes {} (applied {}, deleted {}), peak rss {} MiB",
        start.wall.elapsed().as_secs_f64() * 1e3,
        (cpu_ns() - start.cpu) as f64 / 1e6,
        judge.calls.load(Ordering::SeqCst) - start.calls,
        writes.load(Ordering::SeqCst) - start.writes,
        applied_deleted.0,
        applied_deleted.1,
        peak_rss_kib() / 1024,
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let judge = Arc::new(Judge::default());
        let cache = Arc::new(CachedJudge::new(
            judge.clone(),
            &CacheConfig::default(),
            Arc::new(NoObserver),
        ));
        let mut auditor = Auditor::new(
            cache,
            Arc::new(NoPullSecrets),
            EngineSettings::default(),
            Scope::default(),
        );
        let writes = Arc::new(AtomicUsize::new(0));
        let mut writer = Writer::new(counting_client(writes.clone()), Flavor::OpenReports);
        let mark = |judge: &Judge, writes: &AtomicUsize| Step {
            wall: StdInstant::now(),
            cpu: cpu_ns(),
            calls: judge.calls.load(Ordering::SeqCst),
            writes: writes.load(Ordering::SeqCst),
        };
        println!("{PODS} pods, {DEPLOYMENTS} deployments, {NAMESPACES} namespaces, {DIGESTS} digests");

        let start = mark(&judge, &writes);
        auditor.snapshot_applied(in_force(1, "a"));
        for n in 0..NAMESPACES {
            auditor.namespace_applied(
                &format!("ns{n}"),
                BTreeMap::from([(INCLUDE_LABEL.to_string(), "true".to_string())]),
            );
        }
        for d in 0..DEPLOYMENTS {
            let rs: ObjectMeta = serde_json::from_value(json!({"name": format!("app{d}-5d"),
                "namespace": format!("ns{}", d % NAMESPACES), "uid": format!("rs-{d}"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": format!("app{d}"),
                    "uid": format!("dep-{d}"), "controller": true}]}))
            .unwrap();
            auditor.owner_applied(&rs);
        }
        for i in 0..PODS {
            auditor.pod_applied(&pod(i));
        }
        let stats = auditor.run().await;
        let wrote = write_dirty(&mut auditor, &mut writer).await;
        report_step("first audit", &start, &judge, &writes, wrote);
        println!(
            "  containers {}, judged {}, reused {}, results {}",
            stats.containers,
            stats.judged,
            stats.reused,
            auditor.findings(None).len()
        );

        let start = mark(&judge, &writes);
        for i in 0..PODS {
            auditor.pod_applied(&pod(i));
        }
        auditor.run().await;
        let wrote = write_dirty(&mut auditor, &mut writer).await;
        report_step("resync, nothing changed", &start, &judge, &writes, wrote);

        let start = mark(&judge, &writes);
        judge.revision.fetch_add(1, Ordering::SeqCst);
        let marked = auditor.snapshot_applied(in_force(2, "a2"));
        auditor.run().await;
        let wrote = write_dirty(&mut auditor, &mut writer).await;
        report_step(
            &format!("policy half-a changed ({marked} containers marked)"),
            &start,
            &judge,
            &writes,
            wrote,
        );

        let start = mark(&judge, &writes);
        for i in (0..PODS).filter(|i| i % 10 == 0) {
            let p = pod(i);
            auditor.pod_deleted(
                p.metadata.namespace.as_deref().unwrap(),
                p.metadata.name.as_deref().unwrap(),
            );
        }
        auditor.run().await;
        let wrote = write_dirty(&mut auditor, &mut writer).await;
        report_step("a tenth of the pods deleted", &start, &judge, &writes, wrote);
    });
}
