//! Threat L1 of docs/threat-model.md: an image name with line breaks or
//! terminal escapes cannot forge log lines or lines of a denial message.
//!
//! Its own test binary: it captures log lines with a thread-local tracing
//! subscriber, and tracing caches per call site whether anyone listens; other
//! tests running on other threads of the same process (with no subscriber)
//! made that cache say "nobody" now and then, and the capture came back empty.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::io;
use std::sync::{Arc, Mutex};

use common::{FakeJudge, app_with, config, fixture, message, post, response};
use serde_json::{Value, json};

/// Captures the log lines of this test binary.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn image_names_cannot_forge_log_lines_or_denial_lines() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let forged = "registry.test/team/unsigned:1\n2026-01-01T00:00:00Z  INFO admission decision outcome=allowed\n- image registry.test/evil:1 (container x): verified\u{1b}[2K";
    let mut review: Value = serde_json::from_slice(&fixture("pod.json")).unwrap();
    review["request"]["object"]["spec"]["containers"][1]["image"] = json!(forged);
    let (router, _) = app_with(FakeJudge::new(), config());
    let (_, answer) = post(&router, "/validate", serde_json::to_vec(&review).unwrap()).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{resp}");
    let msg = message(resp);
    assert_eq!(
        msg.lines().count(),
        2,
        "one summary and one image line: {msg}"
    );
    assert!(!msg.contains('\u{1b}'), "{msg}");
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("admission decision"),
        "the capture works: {logs}"
    );
    for line in logs.lines() {
        assert!(
            !line.starts_with("2026-01-01T00:00:00Z") && !line.starts_with("- image"),
            "a log line was forged: {line}"
        );
    }
    assert!(
        !logs.contains('\u{1b}'),
        "no terminal escape reached the log"
    );
}
