//! `sigil-audit` as shipped: the binary, a policy snapshot file,
//! and a fake API server on 127.0.0.1 reached through a kubeconfig. The
//! audit reads what runs, judges it with admission's judge (an unreachable
//! registry is an error, never a pass), writes the namespace's Report by
//! server-side apply, and serves its metrics and readiness.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const KEY: &str = include_str!("../../sigil-webhook/tests/data/p256.pub");
const DIGEST: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn list(items: Vec<Value>) -> Value {
    json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": items})
}

/// What the fake API server answers a GET of `path` with.
fn answer(path: &str) -> Value {
    match path {
        "/api/v1/namespaces" => list(vec![json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "shop", "labels": {"policy.sigil.dev/include": "true"}}})]),
        "/api/v1/pods" => list(vec![json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop", "uid": "uid-web"},
            "spec": {"containers": [{"name": "app", "image": "127.0.0.1:1/shop/app:1"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "app",
                "image": "127.0.0.1:1/shop/app:1", "imageID": format!("127.0.0.1:1/shop/app@{DIGEST}"),
                "ready": true, "restartCount": 0}]}
        })]),
        _ => list(Vec::new()),
    }
}

/// Requests seen (`METHOD path`) and the bodies of writes.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

fn serve(mut stream: TcpStream, seen: &Seen) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
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
    let target = parts.next().unwrap_or_default().to_string();
    let path = target.split('?').next().unwrap_or_default().to_string();
    let sent: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock()
        .unwrap()
        .push((format!("{method} {path}"), sent.clone()));
    if target.contains("watch=true") {
        // A watch with nothing new: headers, then silence until the
        // client goes away.
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let _ = stream.flush();
        let mut sink = [0u8; 64];
        let _ = stream.read(&mut sink);
        return;
    }
    let value = if method == "GET" { answer(&path) } else { sent };
    let text = value.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

fn fake_api() -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let log = log.clone();
            std::thread::spawn(move || serve(stream, &log));
        }
    });
    (port, seen)
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sigil-audit-program-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `path` on 127.0.0.1:`port`: the status code and body, or `None`
/// while nothing listens.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_audit_mode_reports_what_runs_through_admissions_judge_and_serves_its_metrics() {
    let (api_port, seen) = fake_api();
    let dir = scratch();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{api_port}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\nusers:\n- name: fake\n  user:\n    token: not-a-secret\n"
        ),
    )
    .unwrap();
    let snapshot = dir.join("snapshot.json");
    std::fs::write(
        &snapshot,
        json!({
            "apiVersion": "policy.sigil.dev/snapshot/v1",
            "revision": 1,
            "generatedAt": "2026-01-01T00:00:00Z",
            "policies": [{"name": "shop-signed", "uid": "uid-p", "generation": 1, "resourceVersion": "1",
                "spec": {"images": [{"glob": "127.0.0.1:1/shop/**"}],
                    "authorities": [{"key": {"data": KEY}}]}}],
            "trustRoots": [],
        })
        .to_string(),
    )
    .unwrap();
    let metrics_port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_sigil-audit"))
        .args(["--settle-seconds=0", "--timeout-seconds=3"])
        // The registry is allowed and down (nothing listens on port 1): an
        // outage, not a refusal.
        .args([
            "--allow-registry-address=127.0.0.0/8",
            "--insecure-registry=127.0.0.1:1",
        ])
        .arg(format!("--metrics-listen=127.0.0.1:{metrics_port}"))
        .arg("--policy-snapshot-file")
        .arg(&snapshot)
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _child = Killed(child);

    let deadline = Instant::now() + Duration::from_secs(60);
    let report = loop {
        let written = seen.lock().unwrap().iter().rev().find_map(|(r, body)| {
            (r == "PATCH /apis/openreports.io/v1alpha1/namespaces/shop/reports/sigil-audit"
                && body["results"].as_array().is_some_and(|a| !a.is_empty()))
            .then(|| body.clone())
        });
        if let Some(body) = written {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "no report of namespace shop was written; requests: {:?}",
            seen.lock()
                .unwrap()
                .iter()
                .map(|(r, _)| r.clone())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let result = &report["results"][0];
    assert_eq!(result["policy"], "shop-signed");
    assert_eq!(
        result["result"], "error",
        "an unreachable registry is an error, never a pass: {report}"
    );
    assert_eq!(result["properties"]["digest"], DIGEST);
    assert_eq!(report["summary"]["error"], 1);

    let (code, body) = http_get(metrics_port, "/readyz").expect("the metrics port answers");
    assert_eq!(code, 200, "{body}");
    let (code, text) = http_get(metrics_port, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        text.contains(
            r#"sigil_audit_results{namespace="shop",policy="shop-signed",mode="enforce",outcome="error"} 1"#
        ),
        "{text}"
    );
    assert!(text.contains("sigil_build_info"), "{text}");
    let requests: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(r, _)| r.clone())
        .collect();
    assert!(
        requests
            .iter()
            .all(|r| r.starts_with("GET ") || r.starts_with("PATCH ")),
        "the audit only reads and applies: {requests:?}"
    );
}
