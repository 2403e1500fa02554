//! `sigil audit` end to end against a fake API server on 127.0.0.1 (a
//! kubeconfig pointing at it): the cluster is only read, the results are
//! the webhook's (an unreachable registry is an error, an image no policy
//! selects follows noMatchPolicy), excluded namespaces are skipped, and the
//! exit status says whether enforcing would deny something. Pods' pull
//! secrets are read as the webhook reads them (get, by name).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

fn pod(namespace: &str, name: &str, image: &str) -> Value {
    let repository = image.rsplit_once(':').map_or(image, |(r, _)| r);
    json!({
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "app", "image": image}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "image": image,
            "imageID": format!("{repository}@{DIGEST}"), "ready": true, "restartCount": 0}]}
    })
}

fn with_pull_secret(mut pod: Value, secret: &str) -> Value {
    pod["spec"]["imagePullSecrets"] = json!([{"name": secret}]);
    pod
}

fn answer(path: &str) -> Value {
    let list = |kind: &str, items: Vec<Value>| json!({"kind": kind, "apiVersion": "v1", "metadata": {}, "items": items});
    match path {
        "/api/v1/namespaces" => list(
            "NamespaceList",
            vec![
                json!({"metadata": {"name": "shop", "labels": {"policy.sigil.dev/include": "true"}}}),
                json!({"metadata": {"name": "kube-system"}}),
            ],
        ),
        "/apis/apps/v1/replicasets" => list("ReplicaSetList", vec![]),
        "/apis/batch/v1/jobs" => list("JobList", vec![]),
        // {"auths":{"127.0.0.1:1":{"auth":"dXNlcjpwdw=="}}}, base64.
        "/api/v1/namespaces/shop/secrets/regcred" => json!({
            "kind": "Secret", "apiVersion": "v1",
            "metadata": {"name": "regcred", "namespace": "shop"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson":
                "eyJhdXRocyI6eyIxMjcuMC4wLjE6MSI6eyJhdXRoIjoiZFhObGNqcHdkdz09In19fQ=="}
        }),
        "/api/v1/pods" => list(
            "PodList",
            vec![
                // The registry port is closed: the verification cannot answer.
                with_pull_secret(pod("shop", "signed", "127.0.0.1:1/shop/app:1"), "regcred"),
                pod("shop", "other", "127.0.0.1:1/elsewhere/tool:1"),
                pod("kube-system", "dns", "127.0.0.1:1/shop/app:1"),
            ],
        ),
        _ => json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
            "reason": "NotFound", "message": format!("{path} not found")}),
    }
}

/// Serves [`answer`] over plain HTTP/1.1, one request per connection,
/// recording `METHOD path` of each.
fn fake_api() -> (u16, Arc<Mutex<Vec<String>>>) {
    fake_api_with(|_| None)
}

/// [`fake_api`] answering the paths `extra` knows with what it gives.
fn fake_api_with(extra: fn(&str) -> Option<Value>) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let mut parts = request_line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let target = parts.next().unwrap_or_default();
            let path = target.split('?').next().unwrap_or_default().to_string();
            log.lock().unwrap().push(format!("{method} {path}"));
            let value = extra(&path).unwrap_or_else(|| answer(&path));
            let status = if value["kind"] == "Status" {
                "404 Not Found"
            } else {
                "200 OK"
            };
            let text = value.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (port, seen)
}

fn write_kubeconfig(dir: &Path, port: u16) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\nusers:\n- name: fake\n  user:\n    token: not-a-secret\n"
        ),
    )
    .unwrap();
    path
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sigil-audit-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn sigil_audit_judges_running_digests_by_local_policies_and_writes_nothing() {
    let (port, seen) = fake_api();
    let dir = scratch("local");
    let kubeconfig = write_kubeconfig(&dir, port);
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata:\n  name: shop-signed\nspec:\n  images:\n  - glob: \"127.0.0.1:1/shop/**\"\n  authorities:\n  - name: ci\n    keyless:\n      identities:\n      - issuer: https://token.actions.githubusercontent.com\n        subject: https://github.com/example/shop/.github/workflows/release.yml@refs/heads/main\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(["audit", "--policy"])
        .arg(&policy)
        .args(["--timeout", "5", "-o", "json"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let results: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(
        out.status.code(),
        Some(1),
        "something enforced would be denied\n{stderr}"
    );
    let got: Vec<(&str, &str, &str)> = results
        .iter()
        .map(|r| {
            (
                r["workload"]["name"].as_str().unwrap(),
                r["policy"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(got.len(), 2, "kube-system is not audited: {got:?}");
    assert!(
        got.contains(&("other", "noMatchPolicy", "fail")),
        "no policy selects it and noMatchPolicy is deny: {got:?}"
    );
    let signed = results
        .iter()
        .find(|r| r["workload"]["name"] == "signed")
        .unwrap();
    assert_eq!(signed["policy"], "shop-signed");
    assert_ne!(
        signed["outcome"], "pass",
        "an unreachable registry never passes"
    );
    assert!(
        signed["message"].as_str().unwrap().contains("127.0.0.1:1"),
        "{signed}"
    );
    assert_eq!(
        signed["digest"], DIGEST,
        "the running digest, from the pod status"
    );
    let requests = seen.lock().unwrap().clone();
    assert!(
        requests.iter().all(|r| r.starts_with("GET ")),
        "{requests:?}"
    );
    assert!(
        requests.contains(&"GET /api/v1/pods".to_string()),
        "{requests:?}"
    );
    assert!(
        requests.contains(&"GET /api/v1/namespaces/shop/secrets/regcred".to_string()),
        "the pod's imagePullSecrets are read as the webhook reads them: {requests:?}"
    );
}

#[test]
fn sigil_audit_without_pull_secrets_reads_no_secret() {
    let (port, seen) = fake_api();
    let dir = scratch("no-pull-secrets");
    let kubeconfig = write_kubeconfig(&dir, port);
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata:\n  name: shop-signed\nspec:\n  images:\n  - glob: \"127.0.0.1:1/shop/**\"\n  authorities:\n  - name: ci\n    keyless:\n      identities:\n      - issuer: https://token.actions.githubusercontent.com\n        subject: https://github.com/example/shop/.github/workflows/release.yml@refs/heads/main\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(["audit", "--no-pull-secrets", "--policy"])
        .arg(&policy)
        .args(["--timeout", "5", "-o", "json"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let requests = seen.lock().unwrap().clone();
    assert!(
        requests.contains(&"GET /api/v1/pods".to_string()),
        "{requests:?}"
    );
    assert!(
        !requests.iter().any(|r| r.contains("/secrets/")),
        "{requests:?}"
    );
}

#[test]
fn sigil_audit_says_what_to_do_when_the_clusters_snapshot_cannot_be_read() {
    let (port, _) = fake_api();
    let dir = scratch("snapshot");
    let kubeconfig = write_kubeconfig(&dir, port);
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(["audit"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr
            .contains("cannot read the policy snapshot Secret sigil-system/sigil-policy-snapshot"),
        "{stderr}"
    );
    assert!(stderr.contains("--policy"), "{stderr}");
}

/// What an installed sigil adds to [`answer`]: its policy snapshot Secret
/// and the audit Deployment the chart renders (noMatchPolicy allow,
/// namespaceSelection opt-out).
fn installed(path: &str) -> Option<Value> {
    use base64::Engine as _;
    let snapshot = json!({
        "apiVersion": "policy.sigil.dev/snapshot/v1",
        "revision": 1,
        "generatedAt": "2026-01-01T00:00:00Z",
        "policies": [{"name": "shop-signed", "uid": "uid-p", "generation": 1, "resourceVersion": "1",
            "spec": {"images": [{"glob": "127.0.0.1:1/shop/**"}],
                "authorities": [{"name": "ci", "keyless": {"identities": [{
                    "issuer": "https://token.actions.githubusercontent.com",
                    "subject": "https://github.com/example/shop/.github/workflows/release.yml@refs/heads/main"}]}}]}}],
        "trustRoots": [],
    });
    match path {
        "/api/v1/namespaces/sigil-system/secrets/sigil-policy-snapshot" => Some(json!({
            "kind": "Secret", "apiVersion": "v1",
            "metadata": {"name": "sigil-policy-snapshot", "namespace": "sigil-system"},
            "data": {"snapshot.json": base64::engine::general_purpose::STANDARD.encode(snapshot.to_string())}
        })),
        "/apis/apps/v1/namespaces/sigil-system/deployments/sigil-audit" => Some(json!({
            "kind": "Deployment", "apiVersion": "apps/v1",
            "metadata": {"name": "sigil-audit", "namespace": "sigil-system"},
            "spec": {"selector": {"matchLabels": {"app": "sigil-audit"}},
                "template": {"metadata": {"labels": {"app": "sigil-audit"}},
                    "spec": {"containers": [{"name": "audit", "command": ["/usr/local/bin/sigil-audit"],
                        "args": ["--metrics-listen=0.0.0.0:9090", "--namespace=sigil-system",
                            "--exclude-namespace=kube-system",
                            "--policy-snapshot-secret=sigil-system/sigil-policy-snapshot",
                            "--no-match=allow", "--namespace-selection=opt-out",
                            "--report-format=openreports"]}]}}}
        })),
        _ => None,
    }
}

#[test]
fn sigil_audit_from_the_cluster_judges_with_the_installed_charts_settings() {
    let (port, seen) = fake_api_with(installed);
    let dir = scratch("from-cluster");
    let kubeconfig = write_kubeconfig(&dir, port);
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(["audit", "--from-cluster", "--no-pull-secrets"])
        .args(["--timeout", "5", "-o", "json"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("noMatchPolicy Allow, namespaceSelection OptOut"),
        "{stderr}"
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    let outcome = |name: &str| {
        results
            .iter()
            .find(|r| r["workload"]["name"] == name)
            .map(|r| r["outcome"].as_str().unwrap().to_owned())
    };
    assert_ne!(
        outcome("other").as_deref(),
        Some("fail"),
        "the installed noMatchPolicy is allow, not the flag's default deny: {results:?}"
    );
    assert_ne!(
        outcome("signed").as_deref(),
        Some("pass"),
        "an unreachable registry never passes: {results:?}"
    );
    assert_eq!(
        outcome("dns"),
        None,
        "kube-system stays excluded: {results:?}"
    );
    let requests = seen.lock().unwrap().clone();
    assert!(
        requests.contains(
            &"GET /apis/apps/v1/namespaces/sigil-system/deployments/sigil-audit".to_string()
        ),
        "{requests:?}"
    );
}

#[test]
fn sigil_audit_from_the_cluster_refuses_settings_given_as_flags_too() {
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args([
            "audit",
            "--from-cluster",
            "--namespace-selection",
            "opt-out",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--from-cluster") && stderr.contains("--namespace-selection"),
        "{stderr}"
    );
}

/// The policy the one-wording test judges by: a managed key, for the images
/// of 127.0.0.1:1/shop, where nothing listens.
fn key_policy() -> String {
    let key: String = include_str!("../../sigil-webhook/tests/data/p256.pub")
        .lines()
        .map(|l| format!("        {l}\n"))
        .collect();
    format!(
        "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata:\n  name: shop-signed\nspec:\n  images:\n  - glob: \"127.0.0.1:1/shop/**\"\n  authorities:\n  - name: release\n    key:\n      data: |\n{key}"
    )
}

/// The line of `text` that words policy shop-signed's failure, from
/// `policy shop-signed failed:` to its end.
fn failure_line(text: &str) -> String {
    let at = text
        .find("policy shop-signed failed:")
        .unwrap_or_else(|| panic!("no failure of shop-signed in {text}"));
    text[at..].lines().next().unwrap().to_owned()
}

/// The webhook's answer to a Pod running `image`, from its router with the
/// policy snapshot judge loaded with [`key_policy`] (as the controller would
/// publish it).
fn webhook_denial(image: &str) -> String {
    use sigil_webhook::admit::{Admission, AdmissionConfig};
    use tower::ServiceExt as _;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = sigil_registry::ClientConfig {
            insecure_hosts: vec!["127.0.0.1:1".into()],
            ..sigil_registry::ClientConfig::default()
        };
        let judge = sigil_webhook::policy_judge::PolicyJudge::new(
            client,
            sigil_verifier::trust::TrustedRoot::public_good().unwrap(),
            "public-good",
            sigil_policy::NoMatchPolicy::Deny,
        )
        .unwrap();
        let doc: Value = serde_saphyr::from_str(&key_policy()).unwrap();
        let spec = serde_json::from_value(doc["spec"].clone()).unwrap();
        judge
            .apply(&sigil_api::snapshot::PolicySnapshot {
                api_version: sigil_api::snapshot::API_VERSION.to_owned(),
                revision: 1,
                policies: vec![sigil_api::snapshot::SnapshotPolicy {
                    name: "shop-signed".into(),
                    spec,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .unwrap();
        let admission = Admission::new(
            Arc::new(judge),
            sigil_webhook::secrets::NoPullSecrets,
            AdmissionConfig::default(),
            Arc::new(sigil_webhook::metrics::Metrics::new()),
        );
        let router = sigil_webhook::server::router(sigil_webhook::server::AppState::new(admission));
        let review = json!({
            "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": "pod-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "signed", "namespace": "shop", "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "signed", "namespace": "shop"},
                    "spec": {"containers": [{"name": "app", "image": image}]}},
            },
        });
        let request = http::Request::post("/validate")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(review.to_string()))
            .unwrap();
        let answer = router.oneshot(request).await.unwrap();
        let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap();
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        answer["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .to_owned()
    })
}

#[test]
fn the_webhook_the_audit_and_policy_test_word_one_denied_image_alike() {
    let dir = scratch("one-wording");
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, key_policy()).unwrap();
    let image = format!("127.0.0.1:1/shop/app@{DIGEST}");

    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(["policy", "test", "--policy"])
        .arg(&policy)
        .args(["--insecure-registry", "127.0.0.1:1", &image])
        .env("HOME", &dir)
        .output()
        .unwrap();
    let policy_test = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{policy_test}");

    let (port, _) = fake_api();
    let kubeconfig = write_kubeconfig(&dir, port);
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(["audit", "--no-pull-secrets", "--policy"])
        .arg(&policy)
        .args(["--insecure-registry", "127.0.0.1:1", "-o", "json"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &dir)
        .output()
        .unwrap();
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let audit = results
        .iter()
        .find(|r| r["workload"]["name"] == "signed" && r["policy"] == "shop-signed")
        .map(|r| r["message"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no result of pod signed: {results:?}"));

    let webhook = webhook_denial(&image);

    let words = failure_line(&webhook);
    assert!(
        words.starts_with("policy shop-signed failed: authority release (key): "),
        "{words}"
    );
    assert_eq!(failure_line(&policy_test), words, "sigil policy test");
    assert_eq!(failure_line(&audit), words, "sigil audit");
    let heading = |text: &str| {
        let line = text.lines().find(|l| l.contains("sigil denied")).unwrap();
        line[line.find("sigil denied").unwrap()..]
            .split_once(": ")
            .unwrap()
            .1
            .to_owned()
    };
    assert_eq!(
        heading(&policy_test),
        heading(&webhook),
        "the same summary after the object's name:\n{policy_test}\n{webhook}"
    );
}

/// A policy over 127.0.0.1:1/shop whose one authority always fails (no
/// registry is contacted), in `mode`.
fn failing_policy(dir: &Path, mode: &str) -> std::path::PathBuf {
    let path = dir.join(format!("failing-{mode}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata:\n  name: shop-gate\nspec:\n  mode: {mode}\n  images:\n  - glob: \"127.0.0.1:1/shop/**\"\n  authorities:\n  - name: closed\n    static:\n      action: fail\n      message: shop images are not allowed yet\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn sigil_audit_reports_an_audit_mode_policy_as_such_without_failing() {
    let (port, _) = fake_api();
    let dir = scratch("audit-mode");
    let kubeconfig = write_kubeconfig(&dir, port);
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args([
            "audit",
            "--no-pull-secrets",
            "--no-match",
            "allow",
            "--policy",
        ])
        .arg(failing_policy(&dir, "audit"))
        .args(["-o", "json"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "audit mode denies nothing\n{stderr}"
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let gate = results
        .iter()
        .find(|r| r["policy"] == "shop-gate")
        .unwrap_or_else(|| panic!("{results:?}"));
    assert_eq!(
        (&gate["mode"], &gate["outcome"]),
        (&json!("audit"), &json!("fail"))
    );
    assert_eq!(
        gate["message"],
        "policy shop-gate (mode: audit) failed: authority closed (static): shop images are not allowed yet"
    );
    assert!(
        results
            .iter()
            .any(|r| r["workload"]["name"] == "signed" && r["policy"] == "noMatchPolicy"),
        "admission treats the image as one no policy selects: {results:?}"
    );
}

#[test]
fn sigil_policy_preview_lists_what_a_policy_would_deny_and_fails_only_when_asked() {
    let (port, seen) = fake_api();
    let dir = scratch("preview");
    let kubeconfig = write_kubeconfig(&dir, port);
    // In audit mode in the file; previewed as enforced.
    let policy = failing_policy(&dir, "audit");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sigil"))
            .args(["policy", "preview", "--no-pull-secrets"])
            .arg(&policy)
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", &dir)
            .output()
            .unwrap()
    };
    let out = run(&["-o", "json", "--fail-on-deny"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "--fail-on-deny\n{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    let summary = &report["summary"];
    assert_eq!(summary["policies"], json!(["shop-gate"]));
    assert_eq!(summary["imagesChecked"], 1, "{summary}");
    assert_eq!(summary["containersChecked"], 1, "{summary}");
    assert_eq!(summary["wouldDeny"], 1, "{summary}");
    assert_eq!(summary["unverifiable"], 0, "{summary}");
    assert_eq!(summary["byNamespace"], json!({"shop": 1}));
    assert_eq!(
        summary["workloads"],
        json!([{"namespace": "shop", "workload": "pod/signed", "containers": ["containers/app"], "pods": 1}])
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(
        results.len(),
        1,
        "the unselected image is left out: {results:?}"
    );
    assert_eq!(results[0]["mode"], "enforce");
    assert_eq!(
        results[0]["message"],
        "policy shop-gate failed: authority closed (static): shop images are not allowed yet"
    );
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "without --fail-on-deny");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("preview of shop-gate (each judged as if enforced): 1 image(s) checked in 1 container(s); 1 container(s) would be denied"),
        "{table}"
    );
    assert!(
        table.contains("  pod/signed (1 pod(s)): containers/app"),
        "{table}"
    );
    let requests = seen.lock().unwrap().clone();
    assert!(
        requests.iter().all(|r| r.starts_with("GET ")),
        "preview writes nothing: {requests:?}"
    );
}

#[test]
fn sigil_policy_preview_says_which_file_does_not_load() {
    let (port, _) = fake_api();
    let dir = scratch("preview-bad");
    let kubeconfig = write_kubeconfig(&dir, port);
    let policy = dir.join("bad.yaml");
    std::fs::write(
        &policy,
        "apiVersion: policy.sigil.dev/v1alpha1\nkind: ClusterImagePolicy\nmetadata:\n  name: broken\nspec:\n  images:\n  - glob: \"a b\"\n  authorities:\n  - static: {action: pass}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(["policy", "preview"])
        .arg(&policy)
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the files to preview do not load")
            && stderr.contains("bad.yaml")
            && stderr.contains("sigil policy lint"),
        "{stderr}"
    );
}
