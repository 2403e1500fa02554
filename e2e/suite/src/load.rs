//! A bounded admission load: workers create pods running a signed image and
//! pods running an unsigned one, through the API server, for as long as a
//! scenario disrupts sigil, and judge every answer.
//!
//! Most creates are server-side dry runs (admission runs, nothing is
//! stored); every `real_every`-th is a real create of a pod that runs the
//! node's workload, deleted again at once. Each answer is one admission:
//! - correct: the signed pod admitted, the unsigned one denied by sigil;
//! - wrong verdict: the signed pod denied by sigil, or the unsigned admitted;
//! - failed: anything else (the API server could not call the webhook, a
//!   timeout, a transport error).
//!
//! Bounded twice: workers stop when told, and at the latest after `limit`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::task::JoinHandle;

use crate::{Cluster, Reply};

/// How one admission answer is judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The verdict the policy asks for.
    Correct,
    /// sigil's verdict, but the wrong one.
    Wrong(String),
    /// No verdict of sigil's: an error of the API server, the webhook call
    /// or the transport.
    Failed(String),
}

/// What sigil's denials start with (the API server prefixes the webhook name).
const SIGIL_DENIAL: &str = "sigil denied";

/// Judges the answer to a create of a pod whose images should be admitted
/// (`expect_allowed`) or denied.
pub fn judge(expect_allowed: bool, answer: &anyhow::Result<Reply>) -> Outcome {
    let reply = match answer {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(format!("no answer: {e:#}")),
    };
    let sigil_denied = reply.status == 403 && reply.message().contains(SIGIL_DENIAL);
    match (expect_allowed, reply.ok(), sigil_denied) {
        (true, true, _) | (false, false, true) => Outcome::Correct,
        (true, false, true) => Outcome::Wrong(format!("signed pod denied: {}", reply.message())),
        (false, true, _) => Outcome::Wrong("unsigned pod admitted".to_string()),
        (_, false, false) => Outcome::Failed(reply.describe()),
    }
}

/// The counts a load run ends with.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Answers received (every create, dry run or real).
    pub admissions: u64,
    /// Answers that were no verdict of sigil's.
    pub failed: u64,
    /// Verdicts opposite to the policy.
    pub wrong: u64,
    /// Real pods created (and deleted).
    pub real: u64,
    /// The first few failures and wrong verdicts, for the report.
    pub examples: Vec<String>,
}

impl Tally {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: Tally) {
        self.admissions += other.admissions;
        self.failed += other.failed;
        self.wrong += other.wrong;
        self.real += other.real;
        for e in other.examples {
            if self.examples.len() < 10 {
                self.examples.push(e);
            }
        }
    }

    /// `<name>: N admissions, F failed, D wrong verdicts`.
    pub fn line(&self, name: &str) -> String {
        format!(
            "{name}: {} admissions, {} failed, {} wrong verdicts",
            self.admissions, self.failed, self.wrong
        )
    }
}

/// What the workers send.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// The namespace pods are created in (opted in to sigil).
    pub namespace: String,
    /// An image the policies admit, for dry runs.
    pub signed: String,
    /// An image the policies deny, for dry runs.
    pub unsigned: String,
    /// The signed image real pods run (one that starts on the node).
    pub real_signed: String,
    /// The unsigned image real creates try.
    pub real_unsigned: String,
    /// Concurrent workers.
    pub workers: usize,
    /// Every this many creates of a worker is real (0: none).
    pub real_every: u64,
    /// The longest a run may last, whatever happens.
    pub limit: Duration,
}

/// A running load; `finish` stops it and adds up its answers.
pub struct Load {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<Tally>>,
    started: Instant,
    sent: Arc<AtomicU64>,
}

impl Load {
    /// Starts `spec.workers` workers.
    pub fn start(cluster: &Cluster, spec: &LoadSpec) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let run = std::process::id();
        let handles = (0..spec.workers)
            .map(|w| {
                let cluster = cluster.clone();
                let spec = spec.clone();
                let stop = stop.clone();
                let sent = sent.clone();
                tokio::spawn(async move { worker(cluster, spec, stop, sent, run, w).await })
            })
            .collect();
        Load {
            stop,
            handles,
            started: Instant::now(),
            sent,
        }
    }

    /// Answers so far, all workers together.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// How long the load has run.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops the workers (each finishes the request it is in) and adds up.
    pub async fn finish(self) -> anyhow::Result<Tally> {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = Tally::default();
        for h in self.handles {
            total.add(h.await?);
        }
        Ok(total)
    }
}

async fn worker(
    cluster: Cluster,
    spec: LoadSpec,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    run: u32,
    w: usize,
) -> Tally {
    let mut tally = Tally::default();
    let start = Instant::now();
    let pods = format!("/api/v1/namespaces/{}/pods", spec.namespace);
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) && start.elapsed() < spec.limit {
        i += 1;
        let signed = i.is_multiple_of(2);
        let real = spec.real_every > 0 && i.is_multiple_of(spec.real_every);
        let image = match (signed, real) {
            (true, true) => &spec.real_signed,
            (true, false) => &spec.signed,
            (false, true) => &spec.real_unsigned,
            (false, false) => &spec.unsigned,
        };
        let name = format!("load-{run}-{w}-{i}");
        let mut doc = crate::pod(&name, &[image]);
        // Real pods go quickly: no grace period, and they never restart.
        doc["spec"]["terminationGracePeriodSeconds"] = json!(0);
        doc["spec"]["restartPolicy"] = json!("Never");
        let answer = cluster.create(&pods, &doc, !real).await;
        if real && answer.as_ref().is_ok_and(Reply::ok) {
            tally.real += 1;
            if let Err(e) = cluster.delete(&format!("{pods}/{name}")).await {
                tally.examples.push(format!("deleting pod {name}: {e:#}"));
            }
        }
        tally.admissions += 1;
        sent.fetch_add(1, Ordering::Relaxed);
        match judge(signed, &answer) {
            Outcome::Correct => {}
            Outcome::Wrong(why) => {
                tally.wrong += 1;
                if tally.examples.len() < 10 {
                    tally
                        .examples
                        .push(format!("wrong verdict for {image}: {why}"));
                }
            }
            Outcome::Failed(why) => {
                tally.failed += 1;
                if tally.examples.len() < 10 {
                    tally.examples.push(format!("failed for {image}: {why}"));
                }
            }
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn reply(status: u16, message: &str) -> anyhow::Result<Reply> {
        Ok(Reply {
            status,
            warnings: Vec::new(),
            body: if message.is_empty() {
                Value::Null
            } else {
                json!({"message": message})
            },
        })
    }

    #[test]
    fn an_admitted_signed_pod_and_a_denied_unsigned_pod_are_correct() {
        assert_eq!(judge(true, &reply(201, "")), Outcome::Correct);
        let denied = "admission webhook \"validate.policy.sigil.dev\" denied the request: sigil denied pod x: ...";
        assert_eq!(judge(false, &reply(403, denied)), Outcome::Correct);
    }

    #[test]
    fn opposite_verdicts_of_sigil_are_wrong() {
        let denied = "sigil denied pod x: 1 of 1 image(s) failed verification";
        assert!(matches!(
            judge(true, &reply(403, denied)),
            Outcome::Wrong(_)
        ));
        assert!(matches!(judge(false, &reply(200, "")), Outcome::Wrong(_)));
    }

    #[test]
    fn anything_but_a_verdict_of_sigil_is_a_failure() {
        let call_failed = "Internal error occurred: failed calling webhook \"validate.policy.sigil.dev\": connection refused";
        assert!(matches!(
            judge(true, &reply(500, call_failed)),
            Outcome::Failed(_)
        ));
        assert!(matches!(
            judge(false, &reply(500, call_failed)),
            Outcome::Failed(_)
        ));
        assert!(matches!(
            judge(false, &reply(403, "forbidden by RBAC")),
            Outcome::Failed(_)
        ));
        assert!(matches!(
            judge(true, &Err(anyhow::anyhow!("connection reset"))),
            Outcome::Failed(_)
        ));
    }

    #[test]
    fn the_report_line_has_the_three_counts() {
        let t = Tally {
            admissions: 12,
            failed: 1,
            wrong: 2,
            ..Tally::default()
        };
        assert_eq!(t.line("x"), "x: 12 admissions, 1 failed, 2 wrong verdicts");
    }
}
