//! Where the policy snapshot comes from: a file polled every few seconds
//! (local runs and tests) or the controller's Secret watched through the API
//! (a watch on that one Secret by field selector delivers a new version
//! within about a second). Both feed [`PolicyJudge::apply_bytes`]; an
//! invalid or missing version is logged and the last good one stays.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use sha2::{Digest as _, Sha256};
use sigil_api::snapshot::{MAX_BYTES, SECRET_KEY};

use crate::policy_judge::{Applied, PolicyJudge};

/// Applies `bytes` from `origin` and logs the outcome.
fn apply_logged(judge: &PolicyJudge, bytes: &[u8], origin: &str) {
    match judge.apply_bytes(bytes) {
        Ok(Applied::Swapped) => tracing::info!(
            origin,
            revision = judge.revision().unwrap_or_default(),
            default_trust_root = judge
                .default_trust_root()
                .as_deref()
                .unwrap_or("(built-in Sigstore root)"),
            "policy snapshot in force"
        ),
        Ok(Applied::Unchanged) => {}
        Ok(Applied::Stale) => tracing::warn!(
            origin,
            held = judge.revision().unwrap_or_default(),
            "policy snapshot has an older revision than the one in force; ignored"
        ),
        Err(e) => tracing::error!(
            origin,
            error = %e,
            reason = e.reason(),
            held = ?judge.revision(),
            "policy snapshot refused"
        ),
    }
}

/// Reads the snapshot file, bounded to a Secret's size.
async fn read_bounded(path: &PathBuf) -> Result<Vec<u8>, String> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let len = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    if len > MAX_BYTES {
        return Err(format!(
            "{} is {len} bytes, more than the {MAX_BYTES} a snapshot may be",
            path.display()
        ));
    }
    tokio::fs::read(path)
        .await
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Loads `path` once now (so a valid file makes the judge ready before the
/// server starts), then returns the poll loop, which re-reads it every
/// `interval` and applies it when its content changed. The loop runs until
/// dropped or aborted.
pub async fn file_source(
    judge: Arc<PolicyJudge>,
    path: PathBuf,
    interval: Duration,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let origin = path.display().to_string();
    let mut last = None;
    match read_bounded(&path).await {
        Ok(bytes) => {
            last = Some(Sha256::digest(&bytes));
            apply_logged(&judge, &bytes, &origin);
        }
        Err(e) => tracing::error!(error = %e, "policy snapshot file unreadable; not ready"),
    }
    async move {
        let mut tick = tokio::time::interval(interval.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match read_bounded(&path).await {
                Ok(bytes) => {
                    let hash = Sha256::digest(&bytes);
                    if last.as_ref() != Some(&hash) {
                        last = Some(hash);
                        apply_logged(&judge, &bytes, &origin);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "policy snapshot file unreadable; last good snapshot stays")
                }
            }
        }
    }
}

/// Watches Secret `namespace/name` and applies the [`SECRET_KEY`] entry of
/// every version. Runs until dropped; the watcher retries with backoff when
/// the API server is unreachable, and the last good snapshot stays.
pub async fn secret_source(judge: Arc<PolicyJudge>, secrets: Api<Secret>, name: String) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let origin = format!("secret {name}");
    let stream = watcher::watcher(secrets, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(secret) | Event::InitApply(secret)) => {
                let data = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(SECRET_KEY))
                    .map(|b| b.0.as_slice());
                match data {
                    Some(bytes) => apply_logged(&judge, bytes, &origin),
                    None => tracing::error!(
                        origin,
                        key = SECRET_KEY,
                        "policy snapshot Secret has no such key; last good snapshot stays"
                    ),
                }
            }
            Ok(Event::Delete(_)) => tracing::warn!(
                origin,
                "policy snapshot Secret deleted; last good snapshot stays until the controller rewrites it"
            ),
            Ok(Event::Init | Event::InitDone) => {}
            Err(e) => tracing::warn!(origin, error = %e, "policy snapshot watch failed; retrying"),
        }
    }
}
