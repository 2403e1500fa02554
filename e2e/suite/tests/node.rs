//! sigil on a real node (`make e2e-node`, `e2e/run-node.sh`): the chart's
//! Pods as the container runtime runs them, signed and unsigned workloads,
//! and the failures and changes users fear, each under a bounded admission
//! load that counts every answer (`sigil_e2e::load`).
//!
//! Every load scenario prints `<name>: N admissions, F failed, D wrong
//! verdicts` and fails unless F and D are 0.
//!
//! Needs, besides what `tests/e2e.rs` needs: sigil installed in-cluster by
//! its chart with two webhook and two controller replicas, the node's
//! containerd socket (`SIGIL_E2E_CONTAINERD_SOCK`), and the fixture entries
//! `run-node.sh` adds (`NODE_REGISTRY`, `NODE_WORKLOAD_*`, `NODE_QUICKSTART_*`,
//! `SIGIL_IMAGE`, `SIGIL_IMAGE_NEXT`); `helm`, `openssl`, `ctr`, `kubectl`
//! and `cosign` on PATH; root.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sigil_e2e::doctor::Doctor;
use sigil_e2e::load::{Load, LoadSpec, Tally};
use sigil_e2e::node::{self, ContainerRef};
use sigil_e2e::{
    Cluster, Fixtures, Reply, example_policy, key_authority, policy, testkit_trust_root, wait_for,
};
use sigil_testkit::cosign;
use sigil_testkit::registry::Pusher;
use sigil_testkit::{BundleSpec, Testkit};

const SETTLE: Duration = Duration::from_secs(30);
const WEBHOOK: &str = "app.kubernetes.io%2Fcomponent%3Dwebhook";
const CONTROLLER: &str = "app.kubernetes.io%2Fcomponent%3Dcontroller";

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Node {
    cluster: Cluster,
    fx: Fixtures,
    ns: String,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Node {
    /// A fresh opted-in namespace `e2e-node-<name>`, the suite's earlier
    /// policies removed, and two policies in force: the fixtures' key1 over
    /// the test registry's images, and over the node registry's workloads.
    async fn start(name: &str) -> Node {
        let serial = SERIAL.lock().await;
        let ns = format!("e2e-node-{name}");
        let (cluster, fx) = Cluster::fresh_scenario(&ns).await.unwrap();
        let n = Node {
            cluster,
            fx,
            ns,
            _serial: serial,
        };
        let key = n.fx.key_pem("KEY1").unwrap();
        let olareg = n.fx.get("OLAREG").unwrap();
        n.cluster
            .apply_policy(&policy(
                "node-test-images",
                &format!("{olareg}/test/**"),
                json!([key_authority("harness-key1", &key)]),
            ))
            .await
            .unwrap();
        n.cluster
            .apply_policy(&policy(
                "node-workloads",
                &format!("{}/sigil-e2e/**", n.raw("NODE_REGISTRY")),
                json!([key_authority("harness-key1", &key)]),
            ))
            .await
            .unwrap();
        n.eventually(&n.fx.get("OLAREG_NEW").unwrap(), true).await;
        n.eventually(&n.raw("NODE_WORKLOAD_SIGNED"), true).await;
        n
    }

    fn raw(&self, key: &str) -> String {
        self.fx.raw(key).unwrap()
    }

    fn pods_path(&self) -> String {
        format!("/api/v1/namespaces/{}/pods", self.ns)
    }

    /// Waits until dry-run pods running `image` are admitted (or denied)
    /// `IN_A_ROW` times in a row. The Service spreads reviews over both
    /// webhook pods, and each follows the snapshot Secret on its own watch:
    /// one answer says only that one pod has the change, and a load started
    /// then would meet the other. A pod that never gets it fails the wait.
    async fn eventually(&self, image: &str, allowed: bool) -> Duration {
        const IN_A_ROW: usize = 6;
        let start = Instant::now();
        wait_for(
            &format!(
                "{image} to be {} {IN_A_ROW} times in a row",
                if allowed { "admitted" } else { "denied" }
            ),
            SETTLE,
            async || {
                // When the streak's first answer came back.
                let mut first = None;
                for seen in 0..IN_A_ROW {
                    let r = self.cluster.try_pod(&self.ns, &[image]).await?;
                    if r.ok() != allowed {
                        return Ok(Err(format!("after {seen} in a row: {}", r.describe())));
                    }
                    first.get_or_insert_with(Instant::now);
                }
                Ok(Ok(first.unwrap_or_else(Instant::now)))
            },
        )
        .await
        .unwrap()
        // Until the first answer of the streak: what a policy change costs.
        .duration_since(start)
    }

    fn load_spec(&self) -> LoadSpec {
        LoadSpec {
            namespace: self.ns.clone(),
            signed: self.fx.get("OLAREG_NEW").unwrap(),
            unsigned: self.fx.get("OLAREG_UNSIGNED").unwrap(),
            real_signed: self.raw("NODE_WORKLOAD_SIGNED"),
            real_unsigned: self.raw("NODE_WORKLOAD_UNSIGNED"),
            workers: 4,
            real_every: 25,
            limit: Duration::from_secs(600),
        }
    }

    async fn start_load(&self) -> Load {
        let load = Load::start(&self.cluster, &self.load_spec());
        // Some answers before the disruption, so it happens under load.
        wait_for("the load to get answers", SETTLE, async || {
            Ok(if load.sent() >= 20 {
                Ok(())
            } else {
                Err(format!("{} answers", load.sent()))
            })
        })
        .await
        .unwrap();
        load
    }

    async fn sigil(&self, selector: &str) -> Vec<ContainerRef> {
        node::containers(&self.cluster, &self.cluster.sigil_namespace, selector)
            .await
            .unwrap()
    }

    /// Waits until `count` containers of `selector` are ready, none of them
    /// in a pod named in `not`, and returns them.
    async fn ready(&self, selector: &str, count: usize, not: &[String]) -> Vec<ContainerRef> {
        wait_for(
            &format!("{count} ready {selector} pods, none of {not:?}"),
            Duration::from_secs(240),
            async || {
                let all = node::containers(&self.cluster, &self.cluster.sigil_namespace, selector)
                    .await?;
                let ready: Vec<ContainerRef> = all
                    .iter()
                    .filter(|c| c.ready && !not.contains(&c.pod))
                    .cloned()
                    .collect();
                Ok(if ready.len() == count && all.len() == count {
                    Ok(ready)
                } else {
                    Err(format!(
                        "{:?}",
                        all.iter().map(|c| (&c.pod, c.ready)).collect::<Vec<_>>()
                    ))
                })
            },
        )
        .await
        .unwrap()
    }

    async fn finish(&self, load: Load, name: &str) -> Tally {
        let took = load.elapsed();
        let tally = load.finish().await.unwrap();
        println!("{} (over {took:.0?})", tally.line(name));
        assert!(
            tally.failed == 0 && tally.wrong == 0,
            "{}; first problems: {:#?}",
            tally.line(name),
            tally.examples
        );
        assert!(tally.admissions > 0, "{name}: the load got no answer");
        tally
    }
}

fn digest_of(reference: &str) -> &str {
    reference.rsplit_once('@').map_or("", |(_, d)| d)
}

// ---- the chart, installed as a user installs it ---------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn the_chart_runs_sigil_as_pods_that_the_runtime_confines() {
    let n = Node::start("chart").await;
    let ns = n.cluster.sigil_namespace.clone();
    let webhooks = n.ready(WEBHOOK, 2, &[]).await;
    let controllers = n.ready(CONTROLLER, 2, &[]).await;
    // The image installed, or the one the upgrade scenario moved to.
    let image = webhooks[0].image.clone();
    assert!(
        [n.raw("SIGIL_IMAGE"), n.raw("SIGIL_IMAGE_NEXT")].contains(&image),
        "sigil runs {image}, not an image this run built"
    );
    for c in webhooks.iter().chain(&controllers) {
        // Pinned by digest, pulled by digest; ready means the probes pass.
        assert_eq!(c.image, image, "{} runs {}", c.pod, c.image);
        assert!(
            c.image_id.ends_with(digest_of(&image)),
            "{}: the runtime ran {}, not {image}",
            c.pod,
            c.image_id
        );
        assert_eq!(c.restarts, 0, "{} restarted", c.pod);
        // What the runtime enforces, read from the kernel.
        let pid = node::container_pid(&c.id).await.unwrap();
        let confined = node::confinement(pid).unwrap();
        assert_eq!(confined.uids, vec![65532; 4], "{}: {confined:?}", c.pod);
        assert!(
            confined.unhardened().is_empty(),
            "{}: {:?}: {confined:?}",
            c.pod,
            confined.unhardened()
        );
    }
    println!(
        "chart: {} webhook and {} controller pods run {image} as 65532, read-only /, no capabilities, seccomp",
        webhooks.len(),
        controllers.len()
    );

    // The controller issued the serving certificate into its Secret, and
    // each webhook pod serves that certificate from the mounted volume.
    let secret = n
        .cluster
        .get(&format!(
            "/api/v1/namespaces/{ns}/secrets/sigil-webhook-tls"
        ))
        .await
        .unwrap()
        .expect_ok("the webhook TLS Secret")
        .unwrap();
    let data = |k: &str| secret_text(&secret, k);
    let issued = node::first_certificate(&data("tls.crt")).expect("tls.crt in the Secret");
    for c in &webhooks {
        let served = served(c, &ns).await;
        assert_eq!(served, issued, "{} serves another certificate", c.pod);
    }
    // The API server calls the webhook through its Service, trusting the
    // controller's CA.
    for kind in [
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ] {
        let config = n
            .cluster
            .get(&format!(
                "/apis/admissionregistration.k8s.io/v1/{kind}/sigil-webhook"
            ))
            .await
            .unwrap()
            .expect_ok(kind)
            .unwrap();
        let hook = &config.body["webhooks"][0]["clientConfig"];
        assert_eq!(hook["service"]["name"], "sigil-webhook", "{kind}: {hook}");
        assert!(hook["url"].is_null(), "{kind}: {hook}");
        let bundle = hook["caBundle"].as_str().unwrap_or("");
        assert_eq!(
            base64_decode(bundle),
            data("ca.crt").into_bytes(),
            "{kind}: caBundle is not the Secret's ca.crt"
        );
    }
    // And it does: a pod admitted through the Service.
    n.eventually(&n.fx.get("OLAREG_NEW").unwrap(), true).await;
}

fn secret_text(secret: &Reply, key: &str) -> String {
    let b64 = secret.body["data"][key].as_str().unwrap_or("");
    String::from_utf8(base64_decode(b64)).unwrap()
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .unwrap_or_default()
}

async fn served(c: &ContainerRef, ns: &str) -> Vec<u8> {
    node::served_certificate(&c.pod_ip, 8443, &format!("sigil-webhook.{ns}.svc"))
        .await
        .unwrap()
}

// ---- workloads ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn a_signed_workload_created_by_tag_is_pinned_pulled_by_digest_and_runs() {
    let n = Node::start("signed").await;
    let tagged = n.raw("NODE_WORKLOAD_TAG_SIGNED");
    let digest = digest_of(&n.raw("NODE_WORKLOAD_SIGNED")).to_string();
    let name = "signed-busybox";
    let created = n
        .cluster
        .create(&n.pods_path(), &sigil_e2e::pod(name, &[&tagged]), false)
        .await
        .unwrap()
        .expect_ok("creating the signed workload by tag")
        .unwrap();
    let pinned = format!("{tagged}@{digest}");
    assert_eq!(
        created.body["spec"]["containers"][0]["image"],
        json!(pinned)
    );
    let start = Instant::now();
    let status = wait_for(
        "the signed workload to run",
        Duration::from_secs(120),
        async || {
            let pod = n
                .cluster
                .get(&format!("{}/{name}", n.pods_path()))
                .await?
                .expect_ok("the pod")?;
            let s = &pod.body["status"];
            Ok(if s["phase"] == "Running" {
                Ok(s.clone())
            } else {
                Err(format!("phase {} {}", s["phase"], s["containerStatuses"]))
            })
        },
    )
    .await
    .unwrap();
    let image_id = status["containerStatuses"][0]["imageID"].as_str().unwrap();
    assert!(
        image_id.ends_with(&digest),
        "the kubelet ran {image_id}, not {digest}"
    );
    println!(
        "signed workload: created by tag, pinned to {digest}, pulled by digest and Running in {:.1?}",
        start.elapsed()
    );
    n.cluster
        .delete(&format!("{}/{name}", n.pods_path()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn an_unsigned_workload_never_gets_a_pod() {
    let n = Node::start("unsigned").await;
    let tagged = n.raw("NODE_WORKLOAD_TAG_UNSIGNED");
    let reply = n
        .cluster
        .create(
            &n.pods_path(),
            &sigil_e2e::pod("unsigned", &[&tagged]),
            false,
        )
        .await
        .unwrap();
    assert!(
        reply.status == 403 && reply.message().contains("sigil denied"),
        "{}",
        reply.describe()
    );
    // Through a Deployment: the ReplicaSet's creates are denied, no Pod exists.
    let name = "unsigned-app";
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"sigil-e2e": "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": n.raw("NODE_WORKLOAD_UNSIGNED")}]},
            },
        },
    });
    let path = format!("/apis/apps/v1/namespaces/{}/deployments", n.ns);
    // The Deployment itself is checked too: it is denied before any ReplicaSet.
    let reply = n.cluster.create(&path, &deployment, false).await.unwrap();
    assert!(
        reply.status == 403 && reply.message().contains("sigil denied"),
        "{}",
        reply.describe()
    );
    // Denied means never stored: no Deployment, so no controller can make a
    // ReplicaSet or a Pod from it later.
    let stored = n.cluster.get(&format!("{path}/{name}")).await.unwrap();
    assert_eq!(stored.status, 404, "{}", stored.describe());
    let pods = n
        .cluster
        .get(&n.pods_path())
        .await
        .unwrap()
        .expect_ok("listing pods")
        .unwrap();
    let items = pods.body["items"].as_array().unwrap();
    assert!(
        items.is_empty(),
        "pods exist: {:?}",
        items
            .iter()
            .map(|p| p["metadata"]["name"].clone())
            .collect::<Vec<_>>()
    );
    println!(
        "unsigned workload: denied by tag and as a Deployment; no Pod in {}",
        n.ns
    );
}

// ---- policy code that would take admission down ----------------------------------

/// The threat model's Rego bomb (docs/threat-model.md, D5): a
/// ClusterImagePolicy whose Rego asks for two billion
/// numbers at once. Before the Rego sandbox, evaluating it aborted the
/// webhook process ("memory allocation of 48000000024 bytes failed"), and
/// every replica crash-looped with `failurePolicy: Fail`. Now the pod it
/// selects is denied naming the bound, no webhook container restarts, and
/// admission goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn a_rego_bomb_policy_denies_naming_its_bound_and_no_webhook_restarts() {
    const BOUND: &str = "the Rego evaluation exceeded its memory limit of 128 MiB";
    let n = Node::start("rego-bomb").await;
    let before = n.ready(WEBHOOK, 2, &[]).await;
    let olareg = n.fx.get("OLAREG").unwrap();
    let image = format!("{olareg}/bomb/app@sha256:{}", "b".repeat(64));
    let mut bomb = policy(
        "e2e-rego-bomb",
        &format!("{olareg}/bomb/**"),
        json!([{"name": "anyone", "static": {"action": "pass"}}]),
    );
    bomb["spec"]["policy"] = json!({
        "type": "rego",
        "data": "package sigstore\nisCompliant if count(numbers.range(0, 2000000000)) > 0\n",
    });
    n.cluster.apply_policy(&bomb).await.unwrap();

    // Both webhook pods enforce it (the Service spreads the dry runs over
    // them): six denials in a row that name the bound.
    wait_for(
        "the bomb to be denied naming its bound six times in a row",
        SETTLE,
        async || {
            for seen in 0..6 {
                let r = n.cluster.try_pod(&n.ns, &[&image]).await?;
                if r.status != 403 || !r.message().contains(BOUND) {
                    return Ok(Err(format!("after {seen} in a row: {}", r.describe())));
                }
            }
            Ok(Ok(()))
        },
    )
    .await
    .unwrap();
    // A real create, as a tenant would try it.
    let reply = n
        .cluster
        .create(
            &n.pods_path(),
            &sigil_e2e::pod("rego-bomb", &[&image]),
            false,
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 403, "{}", reply.describe());
    let denial = reply.message().to_owned();
    assert!(denial.contains(BOUND), "{denial}");
    assert!(denial.contains("policy e2e-rego-bomb failed"), "{denial}");
    for line in denial.lines() {
        println!("rego bomb: denial: {line}");
    }

    // The same webhook pods, none restarted.
    let after = n.ready(WEBHOOK, 2, &[]).await;
    let pods = |c: &[ContainerRef]| {
        let mut p: Vec<(String, i64)> = c.iter().map(|c| (c.pod.clone(), c.restarts)).collect();
        p.sort();
        p
    };
    println!(
        "rego bomb: webhook pods and restart counts: {:?}",
        pods(&after)
    );
    assert_eq!(
        pods(&after).iter().map(|p| &p.0).collect::<Vec<_>>(),
        pods(&before).iter().map(|p| &p.0).collect::<Vec<_>>(),
        "the webhook pods changed"
    );
    assert!(after.iter().all(|c| c.restarts == 0), "{:?}", pods(&after));

    // Admission still works: the signed image is admitted, the unsigned one
    // denied.
    n.eventually(&n.fx.get("OLAREG_NEW").unwrap(), true).await;
    n.eventually(&n.fx.get("OLAREG_UNSIGNED").unwrap(), false)
        .await;
    println!("rego bomb: afterwards a signed image is admitted and an unsigned one denied");
}

// ---- the README and `sigil doctor`, as a new user meets them -----------------------

/// The fenced blocks of README.md's "Quick start" section, as (info string,
/// body), and the section's text.
fn quick_start() -> (Vec<(String, String)>, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let section = readme
        .split("\n## Quick start")
        .nth(1)
        .expect("README.md has a Quick start section");
    let section = section.split("\n## ").next().unwrap_or(section).to_owned();
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if let Some(info) = line.strip_prefix("```") {
            let body: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.starts_with("```"))
                .collect();
            blocks.push((info.to_owned(), body.join("\n") + "\n"));
        }
    }
    (blocks, section)
}

/// `text` with its one occurrence of `from` replaced by `to`: the README
/// must still say what this test adapts.
fn adapt(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "README's quick start no longer says {from:?} once:\n{text}"
    );
    text.replacen(from, to, 1)
}

/// Runs `script` with bash (`-euo pipefail`) in `work`: whether it
/// succeeded, and what it printed (stdout, then stderr).
fn bash(work: &std::path::Path, env: &[(&str, &str)], script: &str) -> (bool, String) {
    tokio::task::block_in_place(|| {
        let out = std::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(work)
            .envs(env.iter().copied())
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash: {e}"));
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    })
}

/// Whether `got` reads as README's sample output `want`: whitespace
/// (line breaks included) is compared as one space, `…` stands for any
/// text, and so does a shortened digest (`sha256:4c95…4fdb`).
fn reads_as(want: &str, got: &str) -> bool {
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let (want, got) = (squeeze(want), squeeze(got));
    // A shortened digest: the hex on both sides of `…` goes with it.
    let mut pattern = String::new();
    let mut rest = want.as_str();
    while let Some(at) = rest.find('…') {
        let before = rest[..at].trim_end_matches(|c: char| c.is_ascii_hexdigit());
        let before = if before.ends_with("sha256:") || before.ends_with("sha256-") {
            before
        } else {
            &rest[..at]
        };
        pattern.push_str(before);
        pattern.push('…');
        rest = &rest[at + '…'.len_utf8()..];
        if before.len() < at {
            rest = rest.trim_start_matches(|c: char| c.is_ascii_hexdigit());
        }
    }
    pattern.push_str(rest);
    glob(
        &pattern.chars().collect::<Vec<_>>(),
        &got.chars().collect::<Vec<_>>(),
    )
}

/// `pattern` (where `…` matches any run of characters) matches all of `text`.
fn glob(pattern: &[char], text: &[char]) -> bool {
    // The classic two-pointer match with one backtrack point.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == '…' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '…')
}

#[test]
fn the_readme_sample_matcher_takes_shortened_digests_and_line_breaks() {
    let want = "denied:\nsigil denied pod demo/x: image r/app:dev@sha256:4c95…4fdb (c x): failed\n  (looked in …, r/app:sha256-4c95….sig)";
    let digest = "0123456789abcdef".repeat(4);
    let got = format!(
        "denied: sigil denied pod demo/x: image r/app:dev@sha256:{digest} (c x): failed (looked in referrers API of r, r/app:sha256-{digest}.sig)"
    );
    assert!(reads_as(want, &got));
    assert!(!reads_as(want, &got.replace("demo/x", "demo/y")));
    assert!(!reads_as(want, &got.replace("failed", "passed")));
    assert!(!reads_as(want, &format!("{got} and more")));
}

/// README.md's quick start, run as written against the chart installed from
/// this checkout with this build's image, on the node: a namespace opted in,
/// a key made and a policy applied, the unsigned image denied with the
/// message README shows, then signed and run, pinned to its digest. What
/// this machine needs that README's reader does not is adapted in place
/// and asserted to still be there: the repository (the node's registry),
/// and signing without the public Rekor (README's own variant: no log
/// upload, `ctlog: {}`), which this offline machine cannot reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn the_readmes_quick_start_reaches_a_denial_and_a_fix() {
    let _serial = SERIAL.lock().await;
    let (cluster, fx) = Cluster::fresh_scenario("e2e-node-quickstart")
        .await
        .unwrap();
    let tag = fx.raw("NODE_QUICKSTART_TAG").unwrap();
    let digest = digest_of(&fx.raw("NODE_QUICKSTART_IMAGE").unwrap()).to_owned();
    let repo = tag
        .rsplit_once("/app:")
        .map(|(r, _)| r.to_owned())
        .expect("NODE_QUICKSTART_TAG is REGISTRY/team/app:TAG");
    let work = tempfile_dir("sigil-e2e-quickstart");
    // cosign keeps its state in the scenario's directory, and the key has
    // no password (README's reader types one at the prompt).
    let home = work.display().to_string();
    let tuf_root = format!("{home}/tuf");
    let env = [
        ("HOME", home.as_str()),
        ("TUF_ROOT", tuf_root.as_str()),
        ("COSIGN_PASSWORD", ""),
        ("UNSIGNED", tag.as_str()),
    ];
    let clean = "kubectl delete namespace demo --ignore-not-found --wait=true >/dev/null; \
                 kubectl delete clusterimagepolicies.policy.sigil.dev team-signed --ignore-not-found >/dev/null";
    let (ok, out) = bash(&work, &env, clean);
    assert!(ok, "cleaning up an earlier run: {out}");

    let (blocks, text) = quick_start();
    let kinds: Vec<&str> = blocks.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        ["sh", "sh", "text", "sh"],
        "README's quick start: opt in, key and policy, the denial, the fix"
    );
    // 1. Opt a namespace in.
    let (ok, out) = bash(&work, &env, &blocks[0].1);
    assert!(ok, "step 1:\n{}\n{out}", blocks[0].1);
    // 2. A key and a policy: the node's registry, and the key alone vouching.
    let step2 = adapt(
        &blocks[1].1,
        "REPO=registry.example.com/team",
        &format!("REPO={repo}"),
    );
    let step2 = adapt(
        &step2,
        "$(sed 's/^/        /' cosign.pub)\n",
        "$(sed 's/^/        /' cosign.pub)\n    ctlog: {}\n",
    );
    let (ok, out) = bash(&work, &env, &step2);
    assert!(ok, "step 2:\n{step2}\n{out}");
    // 3. The denial, and the message README shows for it.
    let sample = &blocks[2].1;
    let (command, want) = sample
        .split_once('\n')
        .and_then(|(first, rest)| Some((first.strip_prefix("$ ")?, rest)))
        .expect("step 3 opens with `$ COMMAND`");
    let want = want.replace("registry.example.com/team", &repo);
    let (ok, got) = bash(&work, &env, command);
    assert!(!ok, "step 3 was admitted: {got}");
    assert!(
        reads_as(&want, &got),
        "step 3: the denial does not read as README shows it\nREADME:\n{want}\ngot:\n{got}"
    );
    // 4. The fix: sign (without the public Rekor, as README says for a
    // registry that cannot reach it), wait out the remembered denial, run.
    let mut fix = blocks[3].1.lines().filter(|l| !l.trim().is_empty());
    let sign = fix.next().unwrap();
    let sign = adapt(
        sign,
        "cosign sign --yes --key cosign.key",
        "cosign sign --yes --key cosign.key --tlog-upload=false --use-signing-config=false \
         --allow-insecure-registry",
    );
    let (ok, out) = bash(&work, &env, &sign);
    assert!(ok, "step 4, {sign}: {out}");
    let remembered: u64 = text
        .split_once("a denial is remembered for ")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .expect("README says how long a denial is remembered");
    tokio::time::sleep(Duration::from_secs(remembered + 1)).await;
    let rest = fix.collect::<Vec<_>>().join("\n");
    let (ok, out) = bash(&work, &env, &rest);
    assert!(ok, "step 4:\n{rest}\n{out}");
    assert!(
        out.trim_end().ends_with(&format!("{tag}@{digest}")),
        "step 4 printed {out:?}, not {tag}@{digest}"
    );
    // And the kubelet runs it, by that digest.
    let pod = "/api/v1/namespaces/demo/pods/signed";
    let image_id = wait_for(
        "the quick start's pod to run",
        Duration::from_secs(120),
        async || {
            let p = cluster.get(pod).await?.expect_ok("the pod")?;
            let s = &p.body["status"];
            Ok(match s["containerStatuses"][0]["imageID"].as_str() {
                Some(id) if s["phase"] == "Running" => Ok(id.to_owned()),
                _ => Err(format!("phase {} {}", s["phase"], s["containerStatuses"])),
            })
        },
    )
    .await;
    let (ok, out) = bash(&work, &env, clean);
    let _ = std::fs::remove_dir_all(&work);
    let image_id = image_id.unwrap();
    assert!(ok, "cleaning up: {out}");
    assert!(image_id.ends_with(&digest), "the kubelet ran {image_id}");
    println!(
        "README quick start: denied as README shows, then signed, pinned to {digest} and Running"
    );
}

/// A fresh directory under the system's temporary directory.
fn tempfile_dir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `sigil doctor` against the chart's installation (webhook behind its
/// Service, TLS from the controller's Secret, replicas' snapshot revisions
/// read through the API server): healthy, then, with the webhook scaled to
/// zero, the Service without a ready endpoint diagnosed, and healthy again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn sigil_doctor_reads_the_charts_installation_and_names_a_webhook_without_endpoints() {
    const HEALTHY: [&str; 8] = [
        "webhook-configurations",
        "ca-bundle",
        "endpoints",
        "admission",
        "policy-snapshot",
        "webhook-loaded",
        "policies",
        "namespaces",
    ];
    let n = Node::start("doctor").await;
    let ns = n.cluster.sigil_namespace.clone();
    // An earlier scenario may have left a webhook pod going (deleted under
    // load): wait for the Deployment's two, then for every check to pass.
    n.ready(WEBHOOK, 2, &[]).await;
    let healthy = wait_for(
        "doctor to find the installation healthy",
        SETTLE,
        async || {
            let d = Doctor::run(&ns, None)?;
            Ok(
                if d.code == Some(0) && HEALTHY.iter().all(|c| d.status(c) == "ok") {
                    Ok(d)
                } else {
                    Err(d.describe())
                },
            )
        },
    )
    .await
    .unwrap();
    Doctor::show_text(&ns, None, "the chart's installation");
    for check in HEALTHY {
        assert_eq!(
            healthy.status(check),
            "ok",
            "{check}: {}",
            healthy.describe()
        );
    }
    let service = format!("Service {ns}/sigil-webhook");
    assert!(
        healthy.text("endpoints").contains(&service)
            && healthy.text("endpoints").contains("2 ready endpoint(s)"),
        "{}",
        healthy.describe()
    );
    assert!(
        healthy
            .text("webhook-loaded")
            .contains("2 webhook replica(s)"),
        "{}",
        healthy.describe()
    );

    // The webhook scaled to zero: no endpoint, nothing answers.
    let scale = |replicas: u32| {
        let (ok, out) = bash(
            &std::env::temp_dir(),
            &[],
            &format!("kubectl -n {ns} scale deployment/sigil-webhook --replicas={replicas}"),
        );
        assert!(ok, "kubectl scale: {out}");
    };
    scale(0);
    // The pods drain before they go: until then they may still answer
    // through connections the API server keeps, so wait for both checks.
    let down = wait_for(
        "doctor to find no endpoint and nothing answering",
        Duration::from_secs(90),
        async || {
            let d = Doctor::run(&ns, None)?;
            Ok(
                if d.status("endpoints") == "fail" && d.status("admission") == "fail" {
                    Ok(d)
                } else {
                    Err(d.describe())
                },
            )
        },
    )
    .await;
    Doctor::show_text(&ns, None, "the webhook scaled to zero");
    scale(2);
    n.ready(WEBHOOK, 2, &[]).await;
    n.eventually(&n.fx.get("OLAREG_NEW").unwrap(), true).await;
    let down = down.unwrap();
    assert_eq!(down.code, Some(1), "{}", down.describe());
    assert!(
        down.text("endpoints").contains("no ready endpoint"),
        "{}",
        down.describe()
    );
    assert_eq!(down.status("admission"), "fail", "{}", down.describe());
    assert!(
        down.text("admission").contains("nothing answers"),
        "{}",
        down.describe()
    );
    println!("doctor: the chart's installation healthy; the webhook scaled to zero diagnosed");
}

// ---- failure and change under load --------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn a_webhook_pod_deleted_under_load_costs_no_admission() {
    let n = Node::start("webhook-deleted").await;
    let before = n.ready(WEBHOOK, 2, &[]).await;
    let load = n.start_load().await;
    let victim = before[0].pod.clone();
    n.cluster
        .delete(&format!(
            "/api/v1/namespaces/{}/pods/{victim}",
            n.cluster.sigil_namespace
        ))
        .await
        .unwrap();
    let start = Instant::now();
    n.ready(WEBHOOK, 2, std::slice::from_ref(&victim)).await;
    println!(
        "webhook pod deleted: {victim} replaced, two webhook pods ready again after {:.1?}",
        start.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    n.finish(load, "webhook pod deleted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn a_helm_upgrade_to_a_new_image_digest_costs_no_admission() {
    let n = Node::start("upgrade").await;
    let next = n.raw("SIGIL_IMAGE_NEXT");
    assert_ne!(
        next,
        n.raw("SIGIL_IMAGE"),
        "the upgrade needs another digest"
    );
    n.ready(WEBHOOK, 2, &[]).await;
    let load = n.start_load().await;
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../../charts/sigil");
    let digest = format!("image.digest={}", digest_of(&next));
    let start = Instant::now();
    node::run(
        "helm",
        &[
            "upgrade",
            "sigil",
            chart,
            "--namespace",
            &n.cluster.sigil_namespace,
            "--reuse-values",
            "--set",
            &digest,
            "--wait",
            "--timeout",
            "5m",
        ],
    )
    .await
    .unwrap();
    let upgraded = wait_for(
        "every sigil pod to run the new digest",
        Duration::from_secs(240),
        async || {
            let mut all = n.sigil(WEBHOOK).await;
            all.extend(n.sigil(CONTROLLER).await);
            let old: Vec<&str> = all
                .iter()
                .filter(|c| c.image != next || !c.ready)
                .map(|c| c.pod.as_str())
                .collect();
            Ok(if old.is_empty() && all.len() == 4 {
                Ok(all)
            } else {
                Err(format!("not yet: {old:?} of {}", all.len()))
            })
        },
    )
    .await
    .unwrap();
    println!(
        "helm upgrade: {} pods on {} after {:.1?}",
        upgraded.len(),
        digest_of(&next),
        start.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    n.finish(load, "helm upgrade to a new image digest").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn the_controller_leader_deleted_under_load_hands_over_and_a_later_policy_change_is_enforced()
{
    let n = Node::start("leader").await;
    n.ready(CONTROLLER, 2, &[]).await;
    let lease_path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/sigil-controller",
        n.cluster.sigil_namespace
    );
    let holder = |lease: &Reply| {
        lease.body["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let leader = holder(&n.cluster.get(&lease_path).await.unwrap());
    assert!(!leader.is_empty(), "no controller holds the Lease");
    // A marker image whose verdict only a policy change can flip: a static
    // authority, no registry involved.
    let marker = format!(
        "{}/marker/app@sha256:{}",
        n.raw("NODE_REGISTRY"),
        "a".repeat(64)
    );
    let marker_policy = |action: &str| {
        policy(
            "node-marker",
            &format!("{}/marker/**", n.raw("NODE_REGISTRY")),
            json!([{"name": "marker", "static": {"action": action}}]),
        )
    };
    n.cluster
        .apply_policy(&marker_policy("pass"))
        .await
        .unwrap();
    n.eventually(&marker, true).await;

    let load = n.start_load().await;
    let start = Instant::now();
    n.cluster
        .delete(&format!(
            "/api/v1/namespaces/{}/pods/{leader}",
            n.cluster.sigil_namespace
        ))
        .await
        .unwrap();
    let standby = wait_for(
        "another controller to take the Lease",
        Duration::from_secs(60),
        async || {
            let now = holder(&n.cluster.get(&lease_path).await?);
            Ok(if !now.is_empty() && now != leader {
                Ok(now)
            } else {
                Err(format!("holder {now:?}"))
            })
        },
    )
    .await
    .unwrap();
    let takeover = start.elapsed();
    let changed = Instant::now();
    n.cluster
        .apply_policy(&marker_policy("fail"))
        .await
        .unwrap();
    let enforced = n.eventually(&marker, false).await;
    println!(
        "controller leader deleted: {standby} took over from {leader} {takeover:.1?} after the delete; \
         a policy change made after the takeover was enforced {enforced:.1?} later ({:.1?} from the delete)",
        takeover + changed.elapsed()
    );
    n.ready(CONTROLLER, 2, std::slice::from_ref(&leader)).await;
    n.finish(load, "controller leader deleted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn the_serving_certificate_rotates_under_load_without_restarting_the_webhook() {
    let n = Node::start("rotation").await;
    let ns = n.cluster.sigil_namespace.clone();
    let secret_path = format!("/api/v1/namespaces/{ns}/secrets/sigil-webhook-tls");
    let secret = n
        .cluster
        .get(&secret_path)
        .await
        .unwrap()
        .expect_ok("the TLS Secret")
        .unwrap();
    let original = secret_text(&secret, "tls.crt");
    let pods = n.ready(WEBHOOK, 2, &[]).await;
    for c in &pods {
        assert_eq!(
            Some(served(c, &ns).await),
            node::first_certificate(&original),
            "{} does not serve the Secret's certificate before the rotation",
            c.pod
        );
    }

    // A serving certificate of the same CA valid for one day: far inside the
    // controller's renewal window (120 days), so it must be replaced at once.
    let dir = std::env::temp_dir().join(format!("sigil-e2e-rotation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    std::fs::write(path("ca.crt"), secret_text(&secret, "ca.crt")).unwrap();
    std::fs::write(path("ca.key"), secret_text(&secret, "ca.key")).unwrap();
    let svc = format!("sigil-webhook.{ns}.svc");
    std::fs::write(
        path("ext.cnf"),
        format!(
            "subjectAltName=DNS:sigil-webhook,DNS:sigil-webhook.{ns},DNS:{svc},DNS:{svc}.cluster.local\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    let subject = format!("/CN={svc}");
    let (key, csr, crt) = (path("tls.key"), path("tls.csr"), path("tls.crt"));
    node::run(
        "openssl",
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-subj",
            &subject,
            "-out",
            &csr,
        ],
    )
    .await
    .unwrap();
    let (ca, ca_key, ext) = (path("ca.crt"), path("ca.key"), path("ext.cnf"));
    node::run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ],
    )
    .await
    .unwrap();
    let short_lived = std::fs::read_to_string(&crt).unwrap();
    let short_key = std::fs::read_to_string(&key).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let load = n.start_load().await;
    let start = Instant::now();
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    n.cluster
        .raw(
            http::Method::PATCH,
            &secret_path,
            "application/merge-patch+json",
            Some(&json!({"data": {"tls.crt": b64(&short_lived), "tls.key": b64(&short_key)}})),
        )
        .await
        .unwrap()
        .expect_ok("writing the short-lived certificate")
        .unwrap();
    let renewed = wait_for(
        "the controller to replace the short-lived certificate",
        Duration::from_secs(60),
        async || {
            let s = n
                .cluster
                .get(&secret_path)
                .await?
                .expect_ok("the TLS Secret")?;
            let now = secret_text(&s, "tls.crt");
            Ok(if now != short_lived && now != original {
                Ok(now)
            } else {
                Err("not renewed yet".to_string())
            })
        },
    )
    .await
    .unwrap();
    let renewed_after = start.elapsed();
    let want = node::first_certificate(&renewed).unwrap();
    wait_for(
        "every webhook pod to serve the renewed certificate",
        Duration::from_secs(180),
        async || {
            let mut stale = Vec::new();
            for c in &pods {
                if node::served_certificate(&c.pod_ip, 8443, &svc).await? != want {
                    stale.push(c.pod.clone());
                }
            }
            Ok(if stale.is_empty() {
                Ok(())
            } else {
                Err(format!("still the old certificate: {stale:?}"))
            })
        },
    )
    .await
    .unwrap();
    let served_after = start.elapsed();
    let after = n.sigil(WEBHOOK).await;
    for c in &pods {
        let same = after
            .iter()
            .find(|a| a.pod_uid == c.pod_uid)
            .unwrap_or_else(|| panic!("webhook pod {} was replaced", c.pod));
        assert_eq!(same.restarts, c.restarts, "{} restarted", c.pod);
    }
    println!(
        "certificate rotation: a 1-day certificate written at 0 s, renewed by the controller after {renewed_after:.1?}, \
         served by both webhook pods (same pods, no restart) after {served_after:.1?}"
    );
    n.finish(load, "serving certificate rotation").await;
}

// ---- a rolling update of the controller while policies change ------------------------

/// Policies the rolling-update scenario writes, and how many times each.
const ROLL_POLICIES: usize = 30;
const ROLL_GENERATIONS: usize = 10;

/// One version of the snapshot Secret: the API server's resourceVersion of
/// the write, the revision, and the scenario's policies it holds with their
/// generations.
#[derive(Debug, Clone)]
struct SnapshotVersion {
    rv: u64,
    revision: u64,
    policies: std::collections::BTreeMap<String, i64>,
}

/// A scenario policy seen Ready at `generation` by the status write at `rv`.
#[derive(Debug, Clone)]
struct ReadyAt {
    name: String,
    generation: i64,
    rv: u64,
}

fn roll_policy(n: &Node, i: usize, generation: usize) -> serde_json::Value {
    policy(
        &format!("node-roll-{i:02}"),
        &format!("{}/roll-{i:02}/**", n.raw("NODE_REGISTRY")),
        json!([{"name": "marker", "static": {"action": "pass",
            "message": format!("write {generation}")}}]),
    )
}

/// Decodes the snapshot a version of the main Secret holds (one chunk: the
/// scenario's snapshot is small), keeping the scenario's policies.
fn snapshot_version(secret: &serde_json::Value) -> Option<SnapshotVersion> {
    use std::io::Read as _;
    let rv = secret["metadata"]["resourceVersion"]
        .as_str()?
        .parse()
        .ok()?;
    let data = &secret["data"];
    let json: serde_json::Value = match data["snapshot.json.gz"].as_str() {
        Some(chunk) => {
            let manifest: serde_json::Value =
                serde_json::from_slice(&base64_decode(data["manifest.json"].as_str()?)).ok()?;
            assert_eq!(
                manifest["chunks"].as_array().map(Vec::len),
                Some(1),
                "the scenario's snapshot fits one Secret"
            );
            let mut text = Vec::new();
            flate2::read::GzDecoder::new(base64_decode(chunk).as_slice())
                .read_to_end(&mut text)
                .ok()?;
            serde_json::from_slice(&text).ok()?
        }
        None => serde_json::from_slice(&base64_decode(data["snapshot.json"].as_str()?)).ok()?,
    };
    let policies = json["policies"]
        .as_array()?
        .iter()
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            name.starts_with("node-roll-")
                .then(|| (name.to_owned(), p["generation"].as_i64().unwrap_or(0)))
        })
        .collect();
    Some(SnapshotVersion {
        rv,
        revision: json["revision"].as_u64()?,
        policies,
    })
}

/// Records, until `stop`, every version of the snapshot Secret and every
/// Ready status of the scenario's policies, through watches from `from`
/// (a resourceVersion): one etcd orders all of them by resourceVersion.
async fn record_versions_and_readiness(
    cluster: Cluster,
    from: String,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (Vec<SnapshotVersion>, Vec<ReadyAt>) {
    use futures_util::StreamExt as _;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, WatchEvent, WatchParams};
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), &cluster.sigil_namespace);
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "policy.sigil.dev",
        "v1alpha1",
        "ClusterImagePolicy",
    ));
    let cips: Api<DynamicObject> = Api::all_with(cluster.client(), &resource);
    let mut versions = Vec::new();
    let mut ready = Vec::new();
    let (mut secret_rv, mut cip_rv) = (from.clone(), from);
    let mut stopped = stop.clone();
    while !*stop.borrow() {
        let params = WatchParams::default()
            .fields("metadata.name=sigil-policy-snapshot")
            .timeout(60);
        let mut secret_events = secrets.watch(&params, &secret_rv).await.unwrap().boxed();
        let params = WatchParams::default().timeout(60);
        let mut cip_events = cips.watch(&params, &cip_rv).await.unwrap().boxed();
        loop {
            tokio::select! {
                _ = stopped.changed() => break,
                event = secret_events.next() => match event {
                    Some(Ok(WatchEvent::Added(s) | WatchEvent::Modified(s))) => {
                        let value = serde_json::to_value(&s).unwrap();
                        secret_rv = s.metadata.resource_version.clone().unwrap_or_default();
                        versions.extend(snapshot_version(&value));
                    }
                    Some(Ok(WatchEvent::Bookmark(b))) => secret_rv = b.metadata.resource_version,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => panic!("snapshot Secret watch: {e}"),
                    None => break,
                },
                event = cip_events.next() => match event {
                    Some(Ok(WatchEvent::Added(p) | WatchEvent::Modified(p))) => {
                        let value = serde_json::to_value(&p).unwrap();
                        cip_rv = p.metadata.resource_version.clone().unwrap_or_default();
                        let name = p.metadata.name.clone().unwrap_or_default();
                        let observed = value["status"]["observedGeneration"].as_i64();
                        let is_ready = value["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True");
                        if let (true, true, Some(generation)) =
                            (name.starts_with("node-roll-"), is_ready, observed)
                        {
                            let rv = cip_rv.parse().unwrap();
                            ready.push(ReadyAt { name, generation, rv });
                        }
                    }
                    Some(Ok(WatchEvent::Bookmark(b))) => cip_rv = b.metadata.resource_version,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => panic!("ClusterImagePolicy watch: {e}"),
                    None => break,
                },
            }
        }
    }
    (versions, ready)
}

/// The revisions the webhook pods loaded, from their `policy snapshot in
/// force` log lines, by pod.
async fn loaded_revisions(n: &Node) -> Vec<(String, u64)> {
    let mut loads = Vec::new();
    for c in n.sigil(WEBHOOK).await {
        let log = n
            .cluster
            .get_text(&format!(
                "/api/v1/namespaces/{}/pods/{}/log?container={}",
                n.cluster.sigil_namespace, c.pod, c.name
            ))
            .await
            .unwrap();
        for line in log
            .lines()
            .filter(|l| l.contains("policy snapshot in force"))
        {
            let entry: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            if let Some(revision) = entry["revision"].as_u64() {
                loads.push((c.pod.clone(), revision));
            }
        }
    }
    loads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn a_rolling_update_of_the_controller_while_policies_change_never_loads_a_revision_lacking_a_ready_policy()
 {
    let n = Node::start("rolling").await;
    let before = n.ready(CONTROLLER, 2, &[]).await;
    let old_pods: Vec<String> = before.iter().map(|c| c.pod.clone()).collect();
    let ns = n.cluster.sigil_namespace.clone();
    // Versions and readiness from now on.
    let now = n
        .cluster
        .get(&format!(
            "/api/v1/namespaces/{ns}/secrets/sigil-policy-snapshot"
        ))
        .await
        .unwrap()
        .expect_ok("reading the snapshot Secret")
        .unwrap();
    let from = now.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let first_revision = snapshot_version(&now.body).unwrap().revision;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let recorder = tokio::spawn(record_versions_and_readiness(
        n.cluster.clone(),
        from,
        stop_rx,
    ));
    let load = n.start_load().await;

    // Policies change while the controller rolls: created, then each
    // changed again and again.
    let writer = {
        let cluster = n.cluster.clone();
        let docs: Vec<Vec<serde_json::Value>> = (1..=ROLL_GENERATIONS)
            .map(|g| (0..ROLL_POLICIES).map(|i| roll_policy(&n, i, g)).collect())
            .collect();
        tokio::spawn(async move {
            let mut writes = 0usize;
            for round in docs {
                for doc in round {
                    cluster.apply_policy(&doc).await.unwrap();
                    writes += 1;
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
            }
            writes
        })
    };
    let start = Instant::now();
    let restarted = json!({"spec": {"template": {"metadata": {"annotations": {
        "e2e.sigil.dev/restarted-at": format!("{:?}", std::time::SystemTime::now())}}}}});
    n.cluster
        .raw(
            http::Method::PATCH,
            &format!("/apis/apps/v1/namespaces/{ns}/deployments/sigil-controller"),
            "application/merge-patch+json",
            Some(&restarted),
        )
        .await
        .unwrap()
        .expect_ok("restarting the controller's Deployment")
        .unwrap();
    n.ready(CONTROLLER, 2, &old_pods).await;
    let rolled = start.elapsed();
    let writes = writer.await.unwrap();

    // Every policy Ready at its last generation, in a revision both
    // webhook pods loaded.
    let last = ROLL_GENERATIONS as i64;
    wait_for(
        "every scenario policy Ready at its last generation",
        Duration::from_secs(120),
        async || {
            let mut behind = Vec::new();
            for i in 0..ROLL_POLICIES {
                let name = format!("node-roll-{i:02}");
                let reply = n
                    .cluster
                    .get(&format!(
                        "/apis/policy.sigil.dev/v1alpha1/clusterimagepolicies/{name}"
                    ))
                    .await?;
                let generation = reply.body["metadata"]["generation"].as_i64();
                match n.cluster.policy_ready(&name).await? {
                    Some((status, _, _)) if status == "True" && generation == Some(last) => {}
                    other => behind.push(format!("{name}: {other:?}")),
                }
            }
            Ok(if behind.is_empty() {
                Ok(())
            } else {
                Err(behind.join("; "))
            })
        },
    )
    .await
    .unwrap();
    let final_revision = wait_for(
        "both webhook pods to load a revision holding every policy's last generation",
        Duration::from_secs(60),
        async || {
            let reply = n
                .cluster
                .get(&format!(
                    "/api/v1/namespaces/{ns}/secrets/sigil-policy-snapshot"
                ))
                .await?;
            let stored = snapshot_version(&reply.body).unwrap();
            let complete = stored.policies.len() == ROLL_POLICIES
                && stored.policies.values().all(|g| *g == last);
            let loads = loaded_revisions(&n).await;
            let pods: std::collections::BTreeSet<&str> = loads
                .iter()
                .filter(|(_, r)| *r >= stored.revision)
                .map(|(p, _)| p.as_str())
                .collect();
            Ok(if complete && pods.len() == 2 {
                Ok(stored.revision)
            } else {
                Err(format!(
                    "revision {} complete {complete}, loaded by {pods:?}",
                    stored.revision
                ))
            })
        },
    )
    .await
    .unwrap();
    let tally = n.finish(load, "controller rolling update").await;
    stop_tx.send(true).unwrap();
    let (versions, ready) = recorder.await.unwrap();

    // Each load: the version of the Secret it read must hold every policy
    // at (at least) the generation that was Ready before that version was
    // written.
    let loads: Vec<(String, u64)> = loaded_revisions(&n)
        .await
        .into_iter()
        .filter(|(_, r)| *r > first_revision && *r <= final_revision)
        .collect();
    let mut unchecked = Vec::new();
    let mut lacking = Vec::new();
    for (pod, revision) in &loads {
        let Some(version) = versions.iter().rev().find(|v| v.revision == *revision) else {
            unchecked.push(format!(
                "{pod} loaded revision {revision}, never seen stored"
            ));
            continue;
        };
        for r in ready.iter().filter(|r| r.rv < version.rv) {
            if version
                .policies
                .get(&r.name)
                .is_none_or(|g| *g < r.generation)
            {
                lacking.push(format!(
                    "{pod} loaded revision {revision} (resourceVersion {}) holding {} at {:?}, \
                     Ready at generation {} since resourceVersion {}",
                    version.rv,
                    r.name,
                    version.policies.get(&r.name),
                    r.generation,
                    r.rv
                ));
            }
        }
    }
    let revisions: std::collections::BTreeSet<u64> = versions.iter().map(|v| v.revision).collect();
    println!(
        "controller rolling update: {} admissions, {} failed, {} wrong verdicts; {writes} policy \
         writes, {} snapshot revisions stored, {} webhook loads checked against the API server \
         ({} unchecked), {} lacked a Ready policy; rollout {rolled:.1?}",
        tally.admissions,
        tally.failed,
        tally.wrong,
        revisions.len(),
        loads.len() - unchecked.len(),
        unchecked.len(),
        lacking.len()
    );
    assert!(lacking.is_empty(), "{lacking:#?}");
    assert!(unchecked.is_empty(), "{unchecked:#?}");
    assert!(
        loads.len() >= 2,
        "the webhook pods loaded the scenario's revisions: {loads:?}"
    );
}

// ---- memory --------------------------------------------------------------------------

const IMAGES: usize = 10_000;
const PER_POD: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil installed on a node: e2e/run-node.sh"]
async fn webhook_memory_idle_and_after_ten_thousand_distinct_images() {
    let n = Node::start("memory").await;
    let ns = n.cluster.sigil_namespace.clone();
    // Fresh webhook pods: idle means nothing cached yet.
    let old: Vec<String> = n
        .ready(WEBHOOK, 2, &[])
        .await
        .into_iter()
        .map(|c| c.pod)
        .collect();
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {
        "sigil.dev/e2e-restart": format!("{}", std::process::id())}}}}});
    n.cluster
        .raw(
            http::Method::PATCH,
            &format!("/apis/apps/v1/namespaces/{ns}/deployments/sigil-webhook"),
            "application/merge-patch+json",
            Some(&restart),
        )
        .await
        .unwrap()
        .expect_ok("restarting the webhook")
        .unwrap();
    let pods = n.ready(WEBHOOK, 2, &old).await;

    // 10,000 images signed keyless by the testkit's Sigstore, new format,
    // in 100 repositories (a registry lists a repository's referrers by
    // scanning it: one repository of 10,000 would measure the registry).
    let kit = Arc::new(Testkit::new(0x6e0d_e2e1));
    let registry = n.raw("OLAREG");
    let run = std::process::id();
    let started = Instant::now();
    let mut minting = Vec::new();
    for t in 0..4 {
        let kit = kit.clone();
        minting.push(tokio::task::spawn_blocking(move || {
            (t..IMAGES)
                .step_by(4)
                .map(|i| {
                    let image = cosign::image(&format!("memory-{run}-{i}"));
                    let bundle = cosign::image_signature_bundle(
                        &kit,
                        &BundleSpec::default(),
                        &image.sha256(),
                    )
                    .unwrap();
                    let referrer = cosign::bundle_referrer(
                        bundle.json.as_bytes(),
                        cosign::COSIGN_SIGN_PREDICATE,
                        image.descriptor(),
                    );
                    (format!("mem/r{}", i % 100), image, referrer)
                })
                .collect::<Vec<_>>()
        }));
    }
    let mut signed = Vec::new();
    for m in minting {
        signed.extend(m.await.unwrap());
    }
    let minted = started.elapsed();
    let queue = Arc::new(tokio::sync::Mutex::new(signed));
    let mut pushers = Vec::new();
    for _ in 0..16 {
        let queue = queue.clone();
        let registry = registry.clone();
        pushers.push(tokio::spawn(async move {
            let mut pushed = Vec::new();
            loop {
                let Some((repo, image, referrer)) = queue.lock().await.pop() else {
                    break pushed;
                };
                let push = Pusher::new(&registry, &repo).unwrap();
                push.manifest(&image, &image.digest()).await.unwrap();
                push.referrer(&referrer, &image.digest()).await.unwrap();
                pushed.push(format!("{registry}/{repo}@{}", image.digest()));
            }
        }));
    }
    let mut images = Vec::new();
    for p in pushers {
        images.extend(p.await.unwrap().iter().map(|r| n.fx.in_cluster(r)));
    }
    images.sort();
    println!(
        "memory: {} images signed keyless in {minted:.1?}, pushed to 100 repositories in {:.1?}",
        images.len(),
        started.elapsed() - minted
    );
    n.cluster
        .apply_trust_root(&testkit_trust_root("corp-sigstore", &kit).unwrap())
        .await
        .unwrap();
    let mut cip = example_policy(
        "keyless-custom-trustroot.yaml",
        &format!("{}/mem/**", n.fx.get("OLAREG").unwrap()),
    )
    .unwrap();
    cip["metadata"]["name"] = json!("node-memory");
    cip["spec"]["authorities"][0]["keyless"]["identities"] = json!([{
        "issuer": "https://token.actions.githubusercontent.com",
        "subjectRegExp": "^https://github\\.com/sigil-dev/example/",
    }]);
    n.cluster.apply_policy(&cip).await.unwrap();
    n.eventually(&images[0], true).await;

    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut idle = Vec::new();
    for c in &pods {
        idle.push(node::memory(node::container_pid(&c.id).await.unwrap()).unwrap());
    }

    // Pods of 10 images each, every image new to the webhook.
    let started = Instant::now();
    let chunks: Vec<Vec<String>> = images.chunks(PER_POD).map(<[String]>::to_vec).collect();
    let chunks = Arc::new(tokio::sync::Mutex::new(chunks));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let chunks = chunks.clone();
        let cluster = n.cluster.clone();
        let ns = n.ns.clone();
        workers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            while let Some(chunk) = chunks.lock().await.pop() {
                let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
                let answer = cluster.try_pod(&ns, &refs).await;
                tally.admissions += 1;
                match sigil_e2e::load::judge(true, &answer) {
                    sigil_e2e::load::Outcome::Correct => {}
                    sigil_e2e::load::Outcome::Wrong(w) => {
                        tally.wrong += 1;
                        tally.examples.push(w);
                    }
                    sigil_e2e::load::Outcome::Failed(f) => {
                        tally.failed += 1;
                        tally.examples.push(f);
                    }
                }
            }
            tally
        }));
    }
    let mut tally = Tally::default();
    for w in workers {
        let t = w.await.unwrap();
        tally.admissions += t.admissions;
        tally.failed += t.failed;
        tally.wrong += t.wrong;
        tally.examples.extend(t.examples.into_iter().take(5));
    }
    let took = started.elapsed();
    println!(
        "{} ({IMAGES} distinct images, {PER_POD} a pod, in {took:.1?})",
        tally.line("10,000 distinct images verified")
    );
    let mib = |b: u64| b as f64 / 1_048_576.0;
    for (c, before) in pods.iter().zip(&idle) {
        let after = node::memory(node::container_pid(&c.id).await.unwrap()).unwrap();
        println!(
            "webhook memory (cgroup) {}: idle {:.1} MiB (rss {:.1} MiB); after {IMAGES} distinct images {:.1} MiB (rss {:.1} MiB)",
            c.pod,
            mib(before.usage),
            mib(before.rss),
            mib(after.usage),
            mib(after.rss)
        );
    }
    assert!(
        tally.failed == 0 && tally.wrong == 0,
        "{}: {:#?}",
        tally.line("10,000 distinct images verified"),
        tally.examples
    );
    assert_eq!(tally.admissions as usize, IMAGES / PER_POD);
}
