//! The audit on a real node (`make e2e-node`, `e2e/run-node.sh`, after
//! `helm upgrade --reuse-values --set audit.enabled=true`): pods that really
//! run on the node, judged by the in-cluster audit, their results read back
//! from the API server as `openreports.io/v1alpha1` Report objects, and the
//! counts as `kubectl get cip` prints them.
//!
//! Each wait is bounded and, when it runs out, prints the report it saw;
//! each scenario prints how long the audit took (`audit: ...`).
//!
//! Needs, besides what `tests/node.rs` needs: the chart's audit enabled
//! with a 60 s interval and a verdict TTL below it, and the fixture entries
//! `run-node.sh` adds for it (`NODE_AUDIT_KEYLESS`, `NODE_AUDIT_OUTAGE`,
//! `NODE_AUDIT_REGISTRY`, `NODE_AUDIT_REGISTRY_PID`, host side, with their
//! registry in `SIGIL_E2E_REGISTRY_ALIAS`); `kubectl` on PATH.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sigil_e2e::node;
use sigil_e2e::{Cluster, Fixtures, key_authority, testkit_trust_root, wait_for};
use sigil_testkit::cosign;
use sigil_testkit::registry::Pusher;
use sigil_testkit::{BundleSpec, Testkit};

/// The chart's audit interval in this run (`audit.intervalSeconds`).
const INTERVAL: Duration = Duration::from_secs(60);
/// Pods reach Running within this (images are on the node or in its registry).
const RUNNING: Duration = Duration::from_secs(120);
/// An audit pass after a pod or policy change: settle (5 s) plus judging.
const PASS: Duration = Duration::from_secs(60);
const REPORTS: &str = "/apis/openreports.io/v1alpha1";
const TRUST_ROOT: &str = "audit-corp";

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One result of a Report, the fields the scenarios read.
#[derive(Debug, Clone)]
struct Outcome {
    kind: String,
    workload: String,
    policy: String,
    result: String,
    message: String,
    pods: u64,
    stamped: i64,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} {} {} (pods {}): {}",
            self.kind, self.workload, self.policy, self.result, self.pods, self.message
        )
    }
}

fn outcomes(report: &Value) -> Vec<Outcome> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    report["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| Outcome {
            kind: s(&r["resources"][0]["kind"]),
            workload: s(&r["resources"][0]["name"]),
            policy: s(&r["policy"]),
            result: s(&r["result"]),
            message: s(&r["message"]),
            pods: r["properties"]["pods"]
                .as_str()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0),
            stamped: r["timestamp"]["seconds"].as_i64().unwrap_or(0),
        })
        .collect()
}

fn shown(seen: &[Outcome]) -> String {
    if seen.is_empty() {
        return "no results".to_string();
    }
    let lines: Vec<String> = seen.iter().map(|o| format!("\n  {o}")).collect();
    lines.concat()
}

struct Audit {
    cluster: Cluster,
    fx: Fixtures,
    ns: String,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Audit {
    /// A fresh opted-in namespace `e2e-audit-<name>` and the suite's
    /// earlier policies removed.
    async fn start(name: &str) -> Audit {
        let serial = SERIAL.lock().await;
        let ns = format!("e2e-audit-{name}");
        let (cluster, fx) = Cluster::fresh_scenario(&ns).await.unwrap();
        Audit {
            cluster,
            fx,
            ns,
            _serial: serial,
        }
    }

    fn raw(&self, key: &str) -> String {
        self.fx.raw(key).unwrap()
    }

    /// Applies ClusterImagePolicy `name` (mode `mode`) and waits until the
    /// controller reports it Ready.
    async fn policy(&self, name: &str, glob: &str, mode: &str, authorities: Value) {
        let mut cip = sigil_e2e::policy(name, glob, authorities);
        cip["spec"]["mode"] = json!(mode);
        self.cluster.apply_policy(&cip).await.unwrap();
        wait_for(&format!("policy {name} Ready"), PASS, async || {
            Ok(match self.cluster.policy_ready(name).await? {
                Some((s, _, _)) if s == "True" => Ok(()),
                other => Err(format!("{other:?}")),
            })
        })
        .await
        .unwrap();
    }

    /// Waits until a dry-run pod running `image` is admitted (or denied):
    /// the webhook follows the controller's snapshot.
    async fn admitted(&self, image: &str, allowed: bool) {
        wait_for(
            &format!(
                "admission to {} {image}",
                if allowed { "admit" } else { "deny" }
            ),
            PASS,
            async || {
                let r = self.cluster.try_pod(&self.ns, &[image]).await?;
                Ok(if r.ok() == allowed {
                    Ok(())
                } else {
                    Err(r.describe())
                })
            },
        )
        .await
        .unwrap();
    }

    /// Creates Deployment `name` with `replicas` pods running `image`.
    async fn deployment(&self, name: &str, image: &str, replicas: u32) {
        let doc = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": {"sigil-e2e": "true"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name, "sigil-e2e": "true"}},
                    "spec": workload_spec(image),
                },
            },
        });
        self.cluster
            .create(
                &format!("/apis/apps/v1/namespaces/{}/deployments", self.ns),
                &doc,
                false,
            )
            .await
            .unwrap()
            .expect_ok(&format!("creating Deployment {name}"))
            .unwrap();
    }

    /// Creates a Pod of its own (no owner) named `name` running `image`.
    async fn bare_pod(&self, name: &str, image: &str) {
        let doc = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name, "sigil-e2e": "true"}},
            "spec": workload_spec(image),
        });
        self.cluster
            .create(&format!("/api/v1/namespaces/{}/pods", self.ns), &doc, false)
            .await
            .unwrap()
            .expect_ok(&format!("creating Pod {name}"))
            .unwrap();
    }

    /// Waits until `count` ready containers run for `app` and returns when.
    async fn running(&self, app: &str, count: usize) -> Instant {
        wait_for(
            &format!("{count} pods of {app} running on the node"),
            RUNNING,
            async || {
                let all =
                    node::containers(&self.cluster, &self.ns, &format!("app%3D{app}")).await?;
                let ready = all.iter().filter(|c| c.ready).count();
                Ok(if ready == count && all.len() == count {
                    Ok(())
                } else {
                    Err(format!(
                        "{:?}",
                        all.iter().map(|c| (&c.pod, c.ready)).collect::<Vec<_>>()
                    ))
                })
            },
        )
        .await
        .unwrap();
        Instant::now()
    }

    /// The results of this namespace's Report (none before the first).
    async fn results(&self) -> anyhow::Result<Vec<Outcome>> {
        let reply = self
            .cluster
            .get(&format!(
                "{REPORTS}/namespaces/{}/reports/sigil-audit",
                self.ns
            ))
            .await?;
        if reply.status == 404 {
            return Ok(Vec::new());
        }
        Ok(outcomes(&reply.expect_ok("the namespace's Report")?.body))
    }

    /// Waits until this namespace's Report satisfies `done`; the timeout
    /// message shows the last report seen.
    async fn report_until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[Outcome]) -> bool,
    ) -> Vec<Outcome> {
        wait_for(what, timeout, async || {
            let seen = self.results().await?;
            Ok(if done(&seen) {
                Ok(seen)
            } else {
                Err(shown(&seen))
            })
        })
        .await
        .unwrap()
    }

    /// `kubectl get cip NAMES`: per policy, its Pass, Fail and Error
    /// columns (absent until the audit wrote the policy's counts).
    async fn cip_columns(
        &self,
        names: &[&str],
    ) -> anyhow::Result<(String, BTreeMap<String, [String; 3]>)> {
        let mut args = vec!["get", "cip"];
        args.extend_from_slice(names);
        let out = node::run("kubectl", &args).await?;
        Ok((out.clone(), printer_columns(&out)))
    }
}

/// The pod spec of the scenarios' workloads. busybox's `sleep` as PID 1
/// ignores SIGTERM, so a deleted pod would otherwise linger for the default
/// 30 s grace period. IfNotPresent (the default for a digest reference,
/// written out): the outage image is on the node, not in its registry.
fn workload_spec(image: &str) -> Value {
    json!({
        "terminationGracePeriodSeconds": 2,
        "containers": [{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent"}],
    })
}

/// `kubectl get cip` text: per NAME, the PASS, FAIL and ERROR cells.
fn printer_columns(table: &str) -> BTreeMap<String, [String; 3]> {
    let mut lines = table.lines();
    let Some(header) = lines.next() else {
        return BTreeMap::new();
    };
    let columns: Vec<&str> = header.split_whitespace().collect();
    let at = |name: &str| columns.iter().position(|c| *c == name);
    let (Some(pass), Some(fail), Some(error)) = (at("PASS"), at("FAIL"), at("ERROR")) else {
        return BTreeMap::new();
    };
    lines
        .filter_map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            // Every column of these policies has a value (mode is set), so
            // cells line up with the header.
            (cells.len() == columns.len()).then(|| {
                (
                    cells[0].to_string(),
                    [cells[pass], cells[fail], cells[error]].map(str::to_string),
                )
            })
        })
        .collect()
}

/// Per policy, how many results of every Report in the cluster have each
/// outcome: what the `kubectl get cip` columns must say.
async fn report_counts(cluster: &Cluster) -> anyhow::Result<BTreeMap<String, [u64; 3]>> {
    let list = cluster
        .get(&format!("{REPORTS}/reports"))
        .await?
        .expect_ok("listing Reports")?;
    let mut counts: BTreeMap<String, [u64; 3]> = BTreeMap::new();
    for report in list.body["items"].as_array().into_iter().flatten() {
        for o in outcomes(report) {
            let slot = match o.result.as_str() {
                "pass" => 0,
                "fail" => 1,
                "error" => 2,
                _ => continue,
            };
            counts.entry(o.policy).or_default()[slot] += 1;
        }
    }
    Ok(counts)
}

/// Waits until `kubectl get cip` shows, for each of `names`, the counts of
/// the cluster's Reports and `check` accepts them; prints the table.
async fn cip_agrees(
    a: &Audit,
    names: &[&str],
    check: impl Fn(&BTreeMap<String, [u64; 3]>) -> bool,
) -> String {
    wait_for(
        "kubectl get cip to show the Reports' counts",
        PASS,
        async || {
            let (table, columns) = a.cip_columns(names).await?;
            let counts = report_counts(&a.cluster).await?;
            let agree = names.iter().all(|n| {
                let want = counts.get(*n).copied().unwrap_or_default();
                columns.get(*n) == Some(&want.map(|c| c.to_string()))
            });
            Ok(if agree && check(&counts) {
                Ok(table)
            } else {
                Err(format!("{table}\nReports: {counts:?}"))
            })
        },
    )
    .await
    .unwrap()
}

fn find<'a>(seen: &'a [Outcome], workload: &str, policy: &str) -> Option<&'a Outcome> {
    seen.iter()
        .find(|o| o.workload == workload && o.policy == policy)
}

/// Signs the image `registry/repo@digest` (host side: the suite pushes only
/// to 127.0.0.1) keyless with `kit`'s Sigstore (new bundle format, an OCI
/// referrer), as cosign v3 does.
async fn sign_keyless(kit: &Testkit, reference: &str) {
    let (name, digest) = reference.rsplit_once('@').unwrap();
    let (registry, repo) = name.split_once('/').unwrap();
    let manifest = reqwest::Client::new()
        .get(format!("http://{registry}/v2/{repo}/manifests/{digest}"))
        .header(
            "accept",
            format!("{},{}", cosign::OCI_MANIFEST, cosign::OCI_INDEX),
        )
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    let media_type = manifest
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or(cosign::OCI_MANIFEST)
        .to_string();
    let bytes = manifest.bytes().await.unwrap();
    assert_eq!(
        cosign::digest_of(&bytes),
        digest,
        "{reference}: the registry served another manifest"
    );
    let sha256 = sha256_bytes(digest);
    let minted = cosign::image_signature_bundle(kit, &BundleSpec::default(), &sha256).unwrap();
    let referrer = cosign::bundle_referrer(
        minted.json.as_bytes(),
        cosign::COSIGN_SIGN_PREDICATE,
        json!({"mediaType": media_type, "digest": digest, "size": bytes.len()}),
    );
    Pusher::new(registry, repo)
        .unwrap()
        .referrer(&referrer, digest)
        .await
        .unwrap();
}

/// The 32 bytes of a `sha256:<hex>` digest.
fn sha256_bytes(digest: &str) -> [u8; 32] {
    let hex = digest.strip_prefix("sha256:").unwrap();
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

/// The keyless authority of the testkit's identity, trusting `TRUST_ROOT`.
fn keyless_authority() -> Value {
    json!([{
        "name": "corp-ci",
        "keyless": {
            "url": "https://fulcio.sigil.test",
            "trustRootRef": TRUST_ROOT,
            "identities": [{
                "issuer": "https://token.actions.githubusercontent.com",
                "subjectRegExp": "^https://github\\.com/sigil-dev/example/",
            }],
        },
        "ctlog": {"url": "https://rekor.sigil.test", "trustRootRef": TRUST_ROOT},
    }])
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node with audit.enabled: e2e/run-node.sh"]
async fn the_audit_reports_running_pods_follows_a_key_rotated_out_of_a_trust_root_and_forgets_deleted_pods()
 {
    let a = Audit::start("running").await;
    let key = a.fx.key_pem("KEY1").unwrap();
    let signed = a.raw("NODE_WORKLOAD_SIGNED");
    let unsigned = a.raw("NODE_WORKLOAD_UNSIGNED");
    let keyless = a.fx.get("NODE_AUDIT_KEYLESS").unwrap();
    // The key that signs `keyless` at first, and the one that replaces it.
    let old_kit = Testkit::new(0xa0d1_0001);
    let new_kit = Testkit::new(0xa0d1_0002);
    sign_keyless(&old_kit, &a.raw("NODE_AUDIT_KEYLESS")).await;
    a.cluster
        .apply_trust_root(&testkit_trust_root(TRUST_ROOT, &old_kit).unwrap())
        .await
        .unwrap();
    let registry = a.raw("NODE_REGISTRY");
    a.policy(
        "audit-warn",
        &format!("{registry}/sigil-e2e/**"),
        "warn",
        json!([key_authority("harness-key1", &key)]),
    )
    .await;
    a.policy(
        "audit-keyless",
        &format!(
            "{}/sigil-audit/**",
            a.fx.get("NODE_AUDIT_REGISTRY").unwrap()
        ),
        "enforce",
        keyless_authority(),
    )
    .await;
    a.admitted(&keyless, true).await;

    // Signed and unsigned images under a warn-mode policy: both run.
    a.deployment("signed", &signed, 1).await;
    a.deployment("unsigned", &unsigned, 1).await;
    a.deployment("keyless", &keyless, 3).await;
    a.bare_pod("lone", &signed).await;
    let mut ran = Instant::now();
    for (app, count) in [("signed", 1), ("unsigned", 1), ("keyless", 3), ("lone", 1)] {
        ran = a.running(app, count).await;
    }
    let seen = a
        .report_until(
            "the Report to show the running pods as pass and fail",
            PASS,
            |seen| {
                let is = |w: &str, p: &str, r: &str, pods: u64| {
                    find(seen, w, p).is_some_and(|o| o.result == r && o.pods == pods)
                };
                is("signed", "audit-warn", "pass", 1)
                    && is("lone", "audit-warn", "pass", 1)
                    && is("unsigned", "audit-warn", "fail", 1)
                    && is("keyless", "audit-keyless", "pass", 3)
            },
        )
        .await;
    let reported = ran.elapsed();
    let unsigned_result = find(&seen, "unsigned", "audit-warn").unwrap();
    // The cause text of a denial, for an image with no signature at all.
    assert!(
        unsigned_result.message.contains("no signature"),
        "{unsigned_result}"
    );
    let signed_result = find(&seen, "signed", "audit-warn").unwrap();
    assert_eq!(signed_result.kind, "Deployment", "{signed_result}");
    assert_eq!(find(&seen, "lone", "audit-warn").unwrap().kind, "Pod");
    println!(
        "audit: 6 pods running signed and unsigned images reported as pass and fail {reported:.1?} after the last one ran:{}",
        shown(&seen)
    );
    let table = cip_agrees(&a, &["audit-warn", "audit-keyless"], |c| {
        let of = |p: &str| c.get(p).copied().unwrap_or_default();
        of("audit-warn")[0] >= 2 && of("audit-warn")[1] >= 1 && of("audit-keyless")[0] >= 1
    })
    .await;
    println!("audit: kubectl get cip shows the Reports' counts:\n{table}");

    // The old key rotated out: the TrustRoot now holds only the new one.
    let rotated = Instant::now();
    a.cluster
        .apply_trust_root(&testkit_trust_root(TRUST_ROOT, &new_kit).unwrap())
        .await
        .unwrap();
    let seen = a
        .report_until(
            "the keyless pods to turn to fail after the key rotation",
            PASS,
            |seen| find(seen, "keyless", "audit-keyless").is_some_and(|o| o.result == "fail"),
        )
        .await;
    let took = rotated.elapsed();
    let turned = find(&seen, "keyless", "audit-keyless").unwrap();
    assert_eq!(turned.pods, 3, "{turned}");
    assert!(
        turned.message.contains("authority corp-ci (keyless)")
            && turned
                .message
                .contains("which the trusted root does not contain"),
        "the cause should name the authority and the log key the TrustRoot no longer holds: {turned}"
    );
    // Only the policy naming the TrustRoot changed.
    for w in ["signed", "lone"] {
        let o = find(&seen, w, "audit-warn").unwrap();
        assert_eq!(o.result, "pass", "{o}");
    }
    println!(
        "audit: key rotated out of TrustRoot {TRUST_ROOT}: {} pods turned to fail after {took:.1?}: {}",
        turned.pods, turned.message
    );
    // Admission agrees: a new pod of that image is denied now.
    a.admitted(&keyless, false).await;
    let table = cip_agrees(&a, &["audit-keyless"], |c| {
        c.get("audit-keyless").is_some_and(|k| k[1] >= 1)
    })
    .await;
    println!("audit: kubectl get cip after the rotation:\n{table}");

    // A pod deleted: its result goes.
    let deleted = Instant::now();
    a.cluster
        .delete(&format!("/api/v1/namespaces/{}/pods/lone", a.ns))
        .await
        .unwrap();
    let seen = a
        .report_until(
            "the deleted pod's result to leave the Report",
            PASS,
            |seen| find(seen, "lone", "audit-warn").is_none() && !seen.is_empty(),
        )
        .await;
    assert!(
        find(&seen, "signed", "audit-warn").is_some(),
        "the other results stay:{}",
        shown(&seen)
    );
    println!(
        "audit: pod deleted: its result left the Report {:.1?} after the delete",
        deleted.elapsed()
    );
    a.cluster
        .delete(&format!("/api/v1/namespaces/{}", a.ns))
        .await
        .unwrap();
}

/// Continues a frozen process whatever happens to the test.
struct Frozen(String);

impl Frozen {
    fn freeze(pid: &str) -> Frozen {
        let ok = std::process::Command::new("kill")
            .args(["-STOP", pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot freeze the audit registry (pid {pid})");
        Frozen(pid.to_string())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node with audit.enabled: e2e/run-node.sh"]
async fn a_frozen_workload_registry_turns_the_audit_results_to_error_never_pass() {
    let a = Audit::start("outage").await;
    let key = a.fx.key_pem("KEY1").unwrap();
    let image = a.fx.get("NODE_AUDIT_OUTAGE").unwrap();
    a.policy(
        "audit-outage",
        &format!("{}/**", a.fx.get("NODE_AUDIT_REGISTRY").unwrap()),
        "enforce",
        json!([key_authority("harness-key1", &key)]),
    )
    .await;
    a.admitted(&image, true).await;
    a.deployment("outage", &image, 2).await;
    a.running("outage", 2).await;
    a.report_until(
        "the Report to show the outage workload as pass",
        PASS,
        |seen| {
            find(seen, "outage", "audit-outage").is_some_and(|o| o.result == "pass" && o.pods == 2)
        },
    )
    .await;

    let frozen = Frozen::freeze(&a.raw("NODE_AUDIT_REGISTRY_PID"));
    let since = unix_now();
    let start = Instant::now();
    // The next re-verification past the verdict TTL meets the frozen
    // registry: at most an interval, a TTL and admission's deadline away.
    let seen = a
        .report_until(
            "the frozen registry's workload to turn to error",
            INTERVAL * 2 + PASS,
            |seen| {
                let o = find(seen, "outage", "audit-outage");
                // A pass written after the freeze would be a lie.
                assert!(
                    !o.is_some_and(|o| o.result == "pass" && o.stamped > since),
                    "a pass was written while the registry was frozen:{}",
                    shown(seen)
                );
                o.is_some_and(|o| o.result == "error")
            },
        )
        .await;
    let took = start.elapsed();
    let error = find(&seen, "outage", "audit-outage").unwrap();
    assert_eq!(error.pods, 2, "{error}");
    // Which call meets the deadline first varies ("registry ... did not
    // answer before the admission deadline", or "deadline of 5s ... passed
    // before <url> answered"); both name the registry and the deadline.
    let registry = a.fx.get("NODE_AUDIT_REGISTRY").unwrap();
    assert!(
        error.message.contains("deadline") && error.message.contains(&registry),
        "the cause should name the registry {registry} and the deadline it missed: {error}"
    );
    println!(
        "audit: workload registry frozen: {} pods turned to error after {took:.1?} (interval {INTERVAL:?}): {}",
        error.pods, error.message
    );
    let table = cip_agrees(&a, &["audit-outage"], |c| {
        c.get("audit-outage")
            .is_some_and(|k| k[2] >= 1 && k[0] == 0)
    })
    .await;
    println!("audit: kubectl get cip during the outage:\n{table}");
    drop(frozen);
    a.cluster
        .delete(&format!("/api/v1/namespaces/{}", a.ns))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node with audit.enabled: e2e/run-node.sh"]
async fn an_exception_runs_an_unsigned_workload_until_it_expires_and_the_audit_agrees() {
    // The chart allows exceptions in this namespace (run-node.sh).
    let a = Audit::start("exception").await;
    let key = a.fx.key_pem("KEY1").unwrap();
    let unsigned = a.raw("NODE_WORKLOAD_UNSIGNED");
    let registry = a.raw("NODE_REGISTRY");
    let glob = format!("{registry}/sigil-e2e/**");
    a.policy(
        "audit-exception",
        &glob,
        "enforce",
        json!([key_authority("harness-key1", &key)]),
    )
    .await;
    a.admitted(&unsigned, false).await;

    // Deployment `vendor` and the probe pod `e2e` may run the unsigned
    // image for 150 s.
    let expires = a
        .cluster
        .apply_exception(
            &a.ns,
            "vendor",
            &["audit-exception"],
            &[&glob],
            &[("Deployment", "vendor"), ("Pod", "e2e")],
            150,
        )
        .await
        .unwrap();
    a.admitted(&unsigned, true).await;
    a.deployment("vendor", &unsigned, 1).await;
    a.running("vendor", 1).await;
    let seen = a
        .report_until(
            "the Report to show the excepted workload as skip",
            PASS,
            |seen| find(seen, "vendor", "audit-exception").is_some_and(|o| o.result == "skip"),
        )
        .await;
    let skipped = find(&seen, "vendor", "audit-exception").unwrap();
    let words = format!("admitted by exception {}/vendor until {expires}", a.ns);
    assert!(skipped.message.contains(&words), "{skipped}");
    println!("audit: while the exception runs: {skipped}");

    // Right after the expiry, by each component's own clock: admission
    // denies and the audit turns the running workload to fail, though the
    // exception object is still there.
    let expiry: k8s_openapi::jiff::Timestamp = expires.parse().unwrap();
    let left = expiry.as_second() - unix_now();
    assert!(
        left > 0,
        "the exception expired before the checks ({expires})"
    );
    tokio::time::sleep(Duration::from_secs(u64::try_from(left).unwrap() + 1)).await;
    let reply = a.cluster.try_pod(&a.ns, &[&unsigned]).await.unwrap();
    assert!(
        !reply.ok() && reply.message().contains("policy audit-exception failed"),
        "admission after the expiry: {}",
        reply.describe()
    );
    let start = Instant::now();
    let seen = a
        .report_until(
            "the Report to turn the workload to fail after the expiry",
            PASS,
            |seen| find(seen, "vendor", "audit-exception").is_some_and(|o| o.result == "fail"),
        )
        .await;
    println!(
        "audit: {:.1?} after the expiry the Report says: {}",
        start.elapsed() + Duration::from_secs(1),
        find(&seen, "vendor", "audit-exception").unwrap()
    );
    a.cluster
        .delete(&format!("/api/v1/namespaces/{}", a.ns))
        .await
        .unwrap();
}

#[test]
fn printer_columns_are_read_by_their_header() {
    let table = "NAME          READY   MODE      PASS   FAIL   ERROR   AGE\n\
                 audit-warn    True    warn      2      1      0       5s\n\
                 other         True    enforce   0      0      3       1m\n";
    let columns = printer_columns(table);
    assert_eq!(
        columns.get("audit-warn"),
        Some(&["2", "1", "0"].map(str::to_string))
    );
    assert_eq!(
        columns.get("other"),
        Some(&["0", "0", "3"].map(str::to_string))
    );
    assert!(printer_columns("NAME AGE\nx 1s\n").is_empty());
}
