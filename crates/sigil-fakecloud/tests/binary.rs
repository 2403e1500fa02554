//! The `sigil-fakecloud` binary as `e2e/run-node.sh` runs it: its own
//! process, no TLS provider installed by anyone else, its addresses written
//! to the state file, and a registry request proxied to the upstream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::Router;
use axum::http::Uri;

/// A P-256 public key: the fakes need one to start (no token is checked
/// here).
const SA_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEjrglNd3An3sEWuWMzlgfJKugdrc4
N4dx2oYNzX2C6M/uSaS19gQFYIr5qy4AUmP+ptqTDBh/x5pp1FKKi4wERQ==
-----END PUBLIC KEY-----
";

/// The child process, stopped when the test ends however it ends.
struct Fakes(Child);

impl Drop for Fakes {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sigil-fakecloud-binary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_binary_proxies_a_registry_request_to_its_upstream() {
    // The upstream registry: answers every request with the path it saw.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    let app = Router::new().fallback(|uri: Uri| async move { format!("upstream saw {uri}") });
    tokio::spawn(async move { axum::serve(upstream, app).await });

    let dir = scratch_dir();
    let key = dir.join("sa.pub");
    std::fs::write(&key, SA_KEY).unwrap();
    let state = dir.join("fakecloud.env");
    let _ = std::fs::remove_file(&state);
    let _fakes = Fakes(
        Command::new(env!("CARGO_BIN_EXE_sigil-fakecloud"))
            .arg("--sa-key")
            .arg(&key)
            .args([
                "--subject",
                "system:serviceaccount:sigil-system:sigil-webhook",
            ])
            .args(["--upstream", &format!("http://{upstream_addr}")])
            .args(["--tls-name", "127.0.0.1"])
            .arg("--state")
            .arg(&state)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );

    // Bounded: 100 × 100 ms.
    let mut lines = String::new();
    for _ in 0..100 {
        if let Ok(text) = std::fs::read_to_string(&state) {
            lines = text;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let env: BTreeMap<&str, &str> = lines.lines().filter_map(|l| l.split_once('=')).collect();
    let plain = env
        .get("FAKECLOUD_PLAIN")
        .unwrap_or_else(|| panic!("no FAKECLOUD_PLAIN in the state file: {lines:?}"));

    // The test's own client needs a provider too (reqwest has none of its own).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let answer = client
        .get(format!("http://{plain}/v2/test/app/manifests/latest"))
        .send()
        .await
        .expect("the plain front answers (a panic in the fakes closes the connection)");
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.text().await.unwrap(),
        "upstream saw /v2/test/app/manifests/latest"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
