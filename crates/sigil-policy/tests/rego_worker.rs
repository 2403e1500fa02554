//! The Rego worker as a program: what the sandbox starts (this crate's
//! `sigil-rego-worker` here; in production each sigil binary started again
//! with the same argument). It bounds itself through the kernel before it
//! reads a request, greets, and answers framed requests on its pipes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use sigil_policy::rego::WORKER_ARG;

const WORKER: &str = env!("CARGO_BIN_EXE_sigil-rego-worker");

fn frame(bytes: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

fn read_frame(input: &mut impl Read) -> Vec<u8> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len).unwrap();
    let mut bytes = vec![0u8; u32::from_be_bytes(len) as usize];
    input.read_exact(&mut bytes).unwrap();
    bytes
}

#[test]
fn the_worker_bounds_its_heap_greets_and_answers_requests_on_its_pipes() {
    let mut child = Command::new(WORKER)
        .args([WORKER_ARG, "67108864", "1000", "1048576"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    assert_eq!(read_frame(&mut stdout), b"sigil-rego-worker/1");

    // The kernel's limits, as the worker set them before greeting.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let data = limits
        .lines()
        .find(|l| l.starts_with("Max data size"))
        .unwrap();
    assert!(
        data.split_whitespace().filter(|w| *w == "67108864").count() == 2,
        "soft and hard RLIMIT_DATA: {data}"
    );
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap();
    assert!(
        core.split_whitespace().filter(|w| *w == "0").count() == 2,
        "{core}"
    );

    let mut stdin = child.stdin.take().unwrap();
    let module = "package sigstore\nisCompliant if input.ok\n";
    for input in [r#"{"ok": true}"#, r#"{"ok": false}"#] {
        let mut request = frame(b"policy");
        request.extend(frame(module.as_bytes()));
        request.extend(frame(input.as_bytes()));
        stdin.write_all(&request).unwrap();
        let answer: serde_json::Value = serde_json::from_slice(&read_frame(&mut stdout)).unwrap();
        let compliant = input.contains("true");
        assert_eq!(answer["verdict"]["compliant"], compliant, "{answer}");
    }
    drop(stdin);
    assert!(
        child.wait().unwrap().success(),
        "it ends when its stdin closes"
    );
}

#[test]
fn without_the_worker_argument_it_refuses_to_run() {
    let out = Command::new(WORKER).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(WORKER_ARG),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
