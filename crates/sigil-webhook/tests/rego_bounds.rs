//! Denial of service by policy code, against the `sigil-webhook` binary:
//! Rego that asks for more memory than exists (`numbers.range` over two
//! billion numbers, strings squared by `replace`, arrays doubled by
//! `array.concat`, a `sprintf` width of a billion), Rego that loops for
//! billions of iterations in a comprehension, and Rego that makes regorus
//! panic. Each image those policies select is denied with words naming the
//! bound it crossed, and the same process (never restarted) keeps answering
//! reviews afterwards. What a policy `print`s never reaches the webhook's
//! log.
//!
//! The denials are printed (`-- --nocapture`): docs/threat-model.md quotes
//! them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::AnyCert;
use rustls::ClientConfig;
use serde_json::{Value, json};

const DIGEST: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
/// Marks what a policy prints, to look for in the webhook's output.
const PRINTED: &str = "SIGIL-REGO-PRINTED-THIS";

/// The time limit the webhook runs with: long enough that the memory bombs
/// always reach the memory bound first, even in a debug build on a busy
/// machine.
const TIME_LIMIT_MS: u64 = 4000;

/// Each case: the policy's name (and the image's repository), its Rego
/// after `package sigstore`, and the words its denial must hold.
fn cases() -> Vec<(&'static str, String, &'static str)> {
    let memory = "the Rego evaluation exceeded its memory limit of 128 MiB";
    let array = (1..=40)
        .map(|i| format!("a{i} := array.concat(a{0}, a{0})\n", i - 1))
        .collect::<String>();
    vec![
        (
            "range",
            format!(
                "isCompliant if {{\n  print(\"{PRINTED}\")\n  count(numbers.range(0, 2000000000)) > 0\n}}"
            ),
            memory,
        ),
        (
            "string",
            "s := concat(\"\", [\"a\" | some _ in numbers.range(1, 1000)])\n\
             isCompliant if count(replace(replace(s, \"a\", s), \"a\", s)) > 0"
                .into(),
            memory,
        ),
        (
            "array",
            format!("a0 := numbers.range(1, 1000)\n{array}isCompliant if count(a40) > 0"),
            memory,
        ),
        (
            "sprintf",
            "isCompliant if sprintf(\"%0999999999d\", [1]) != \"\"".into(),
            memory,
        ),
        (
            "comprehension",
            "isCompliant if count({x | some i in numbers.range(1, 50000); \
             some j in numbers.range(1, 50000); x := (i + j) % 2}) > 5"
                .into(),
            "the Rego evaluation exceeded its time limit of 4s",
        ),
        (
            "panic",
            "isCompliant if sprintf(\"%\u{663}d\", [1]) != \"\"".into(),
            "the Rego evaluator failed: regorus panicked",
        ),
    ]
}

fn policy(name: &str, rego: Option<String>) -> Value {
    let mut spec = json!({
        "images": [{"glob": format!("registry.test/{name}")}],
        "authorities": [{"name": "anyone", "static": {"action": "pass"}}],
    });
    if let Some(rego) = rego {
        spec["policy"] = json!({"type": "rego", "data": format!("package sigstore\n{rego}\n")});
    }
    json!({"name": format!("rego-{name}"), "uid": format!("uid-{name}"), "generation": 1,
           "resourceVersion": "1", "spec": spec})
}

fn pod_review(uid: &str, image: &str) -> Value {
    json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": uid, "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "tenant"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": uid, "namespace": "shop"},
                       "spec": {"containers": [{"name": "app", "image": image}]}},
        },
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn client() -> reqwest::Client {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The webhook process, killed on drop; its output in `dir/out.log`.
struct Webhook {
    child: Child,
    dir: PathBuf,
    port: u16,
    metrics_port: u16,
}

impl Webhook {
    fn start(snapshot: &Value) -> Self {
        let dir = std::env::temp_dir().join(format!("sigil-rego-bounds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pair = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        std::fs::write(dir.join("tls.crt"), pair.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), pair.signing_key.serialize_pem()).unwrap();
        std::fs::write(dir.join("snapshot.json"), snapshot.to_string()).unwrap();
        let out = std::fs::File::create(dir.join("out.log")).unwrap();
        let (port, metrics_port) = (free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_sigil-webhook"))
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg(format!("--metrics-listen=127.0.0.1:{metrics_port}"))
            .arg(format!("--tls-cert={}", dir.join("tls.crt").display()))
            .arg(format!("--tls-key={}", dir.join("tls.key").display()))
            .arg(format!(
                "--policy-snapshot-file={}",
                dir.join("snapshot.json").display()
            ))
            .args(["--timeout-seconds=30", "--no-match=deny"])
            .arg(format!("--rego-time-limit-ms={TIME_LIMIT_MS}"))
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Self {
            child,
            dir,
            port,
            metrics_port,
        }
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = format!("http://127.0.0.1:{}/readyz", self.metrics_port);
        loop {
            if let Ok(r) = reqwest::get(&url).await
                && r.status().is_success()
            {
                return;
            }
            assert!(self.alive(), "the webhook exited: {}", self.log());
            assert!(Instant::now() < deadline, "not ready: {}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("out.log")).unwrap_or_default()
    }

    /// The answer to a review of a pod running `image`.
    async fn review(&self, client: &reqwest::Client, uid: &str, image: &str) -> Value {
        let body = client
            .post(format!("https://127.0.0.1:{}/validate", self.port))
            .header("content-type", "application/json")
            .body(pod_review(uid, image).to_string())
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let answer: Value = serde_json::from_slice(&body).unwrap();
        answer["response"].clone()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rego_bombs_are_denied_naming_their_bound_and_the_webhook_keeps_answering() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cases = cases();
    let mut policies: Vec<Value> = cases
        .iter()
        .map(|(name, rego, _)| policy(name, Some(rego.clone())))
        .collect();
    policies.push(policy("ok", None));
    let snapshot = json!({
        "apiVersion": "policy.sigil.dev/snapshot/v1", "revision": 1,
        "generatedAt": "2026-01-01T00:00:00Z", "policies": policies, "trustRoots": [],
    });
    let mut webhook = Webhook::start(&snapshot);
    webhook.wait_ready().await;
    let pid = webhook.child.id();
    let client = client();

    // All at once: two workers take them in turn.
    let answers = futures_util::future::join_all(cases.iter().map(|(name, _, _)| {
        let image = format!("registry.test/{name}@{DIGEST}");
        let (client, webhook) = (&client, &webhook);
        async move { webhook.review(client, name, &image).await }
    }))
    .await;
    for ((name, _, words), answer) in cases.iter().zip(&answers) {
        assert_eq!(answer["uid"], *name);
        assert_eq!(answer["allowed"], false, "{name}: {answer}");
        let message = answer["status"]["message"].as_str().unwrap_or_default();
        println!("{name}: {message}");
        assert!(message.contains(words), "{name}: {message}");
        assert!(
            message.contains(&format!("rego-{name}")),
            "{name}: {message}"
        );
    }

    // The same process, never restarted, still answers.
    assert!(webhook.alive(), "{}", webhook.log());
    assert_eq!(webhook.child.id(), pid);
    let ok = webhook
        .review(&client, "after", &format!("registry.test/ok@{DIGEST}"))
        .await;
    assert_eq!(ok["allowed"], true, "{ok}");
    println!(
        "after the bombs, pid {pid} still answers: allowed {}",
        ok["allowed"]
    );
    let log = webhook.log();
    assert!(
        !log.contains(PRINTED),
        "a policy's print reached the log:\n{log}"
    );
    assert!(!log.contains("memory allocation of"), "{log}");
}
