//! `sigil doctor` as the suite runs it: the `sigil` binary of this build,
//! its JSON report read back, and its text report shown as a user sees it.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context as _;
use serde_json::Value;

/// The `sigil` binary of this build (`SIGIL_E2E_SIGIL_BIN` overrides it).
pub fn sigil_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("SIGIL_E2E_SIGIL_BIN") {
        return bin.into();
    }
    let target = std::env::var("CARGO_TARGET_DIR").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("debug/sigil")
}

/// A doctor run: its exit status and its JSON report.
pub struct Doctor {
    /// The exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// The report of `--output json` (`Null` when stdout was not JSON).
    pub report: Value,
    /// What it wrote to stderr.
    pub stderr: String,
}

/// The arguments every run takes: a short timeout, sigil's namespace and,
/// where the webhook runs as a host process, its metrics address.
fn command(namespace: &str, webhook_metrics: Option<&str>) -> Command {
    let mut cmd = Command::new(sigil_bin());
    cmd.args(["doctor", "--timeout", "4", "--sigil-namespace", namespace]);
    if let Some(m) = webhook_metrics {
        cmd.args(["--webhook-metrics", m]);
    }
    cmd
}

impl Doctor {
    /// `sigil doctor --output json` against the current kube context.
    pub fn run(namespace: &str, webhook_metrics: Option<&str>) -> anyhow::Result<Doctor> {
        let out = command(namespace, webhook_metrics)
            .args(["--output", "json"])
            .output()
            .with_context(|| format!("cannot run {}", sigil_bin().display()))?;
        Ok(Doctor {
            code: out.status.code(),
            report: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Prints doctor's text report, as a user sees it, into the test's
    /// output, headed by `scenario`.
    pub fn show_text(namespace: &str, webhook_metrics: Option<&str>, scenario: &str) {
        if let Ok(out) = command(namespace, webhook_metrics).output() {
            eprintln!(
                "---- sigil doctor, {scenario} (exit {:?}) ----\n{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }

    /// The check called `name` (`Null` when the report has none).
    pub fn check(&self, name: &str) -> &Value {
        static ABSENT: Value = Value::Null;
        self.report["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|f| f["check"] == name))
            .unwrap_or(&ABSENT)
    }

    /// `ok`, `warn`, `fail` or `skip`; `absent` when the report has no such
    /// check.
    pub fn status(&self, name: &str) -> String {
        self.check(name)["status"]
            .as_str()
            .unwrap_or("absent")
            .to_owned()
    }

    /// The summary, details and fix of a check as one text.
    pub fn text(&self, name: &str) -> String {
        let c = self.check(name);
        let mut out = c["summary"].as_str().unwrap_or("").to_owned();
        for d in c["details"].as_array().into_iter().flatten() {
            out.push('\n');
            out.push_str(d.as_str().unwrap_or(""));
        }
        if let Some(fix) = c["fix"].as_str() {
            out.push_str("\nfix: ");
            out.push_str(fix);
        }
        out
    }

    /// Everything the run said, for an assertion's message.
    pub fn describe(&self) -> String {
        format!(
            "exit {:?}\n{}\nstderr: {}",
            self.code,
            serde_json::to_string_pretty(&self.report).unwrap_or_default(),
            self.stderr
        )
    }
}
