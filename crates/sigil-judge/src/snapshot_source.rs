//! Where the policy snapshot comes from: a file polled every few seconds
//! (local runs and tests, plain JSON) or the controller's Secrets read
//! through the API (a watch on the main Secret by field selector delivers a
//! new manifest within about a second; its shard Secrets, if any, are read
//! then, [`load_secret`]). Both feed [`PolicyJudge::apply`]; an invalid,
//! incomplete or missing version is logged and the last good one stays
//! until the next version arrives. A version whose Secrets could not be
//! read (an API error, not their content) is read again with backoff until
//! it loads or a newer one arrives: one failed GET must not leave a replica
//! on an older revision until the next policy change.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use sha2::{Digest as _, Sha256};
use sigil_api::snapshot::stored::{self, CHUNK_KEY};
use sigil_api::snapshot::{MAX_DECODED_BYTES, PolicySnapshot, SnapshotError};

use crate::policy_judge::{Applied, PolicyJudge};

/// Reads the snapshot stored under `main` (a Secret read or watched through
/// `secrets`), fetching its shard Secrets: the one read path of the webhook,
/// the audit, `sigil audit` and `sigil doctor`.
pub async fn load_secret(
    secrets: &Api<Secret>,
    main: &Secret,
) -> Result<PolicySnapshot, SnapshotError> {
    let name = main.metadata.name.clone().unwrap_or_default();
    let empty = Default::default();
    let data = main.data.as_ref().unwrap_or(&empty);
    stored::load(
        &name,
        |key| data.get(key).map(|b| b.0.as_slice()),
        |shard| async move {
            let secret = secrets.get_opt(&shard).await.map_err(|e| e.to_string())?;
            Ok(secret
                .and_then(|s| s.data)
                .and_then(|mut d| d.remove(CHUNK_KEY))
                .map(|b| b.0))
        },
    )
    .await
}

/// Applies what was read from `origin` (reading it began at `started`) and
/// logs the outcome, with how long reading and compiling took. Compiling
/// thousands of policies takes seconds of CPU: it runs on the blocking pool,
/// so the runtime's workers keep answering reviews, probes and metrics.
async fn apply_logged(
    judge: &Arc<PolicyJudge>,
    read: Result<PolicySnapshot, SnapshotError>,
    origin: &str,
    started: Instant,
) {
    let snapshot = match read {
        Ok(snapshot) => snapshot,
        Err(e) => {
            tracing::error!(
                origin,
                error = %e,
                reason = "unreadable",
                held = ?judge.revision(),
                "policy snapshot not read; the last good one stays"
            );
            return;
        }
    };
    let policies = snapshot.policies.len();
    let applying = judge.clone();
    let applied = match tokio::task::spawn_blocking(move || applying.apply(&snapshot)).await {
        Ok(applied) => applied,
        Err(e) => {
            tracing::error!(
                origin,
                error = %e,
                held = ?judge.revision(),
                "policy snapshot not applied (its compilation did not finish); the last good one stays"
            );
            return;
        }
    };
    match applied {
        Ok(Applied::Swapped) => tracing::info!(
            origin,
            revision = judge.revision().unwrap_or_default(),
            policies,
            load_ms = started.elapsed().as_millis(),
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
        Ok(Applied::Conflicting) => tracing::warn!(
            origin,
            held = judge.revision().unwrap_or_default(),
            "policy snapshot has the revision in force but other content (two controllers \
             wrote it); ignored until a higher revision"
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

/// Reads the snapshot file (plain JSON), bounded as a decoded snapshot is.
async fn read_bounded(path: &PathBuf) -> Result<Vec<u8>, String> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let len = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    if len > MAX_DECODED_BYTES {
        return Err(format!(
            "{} is {len} bytes, more than the {MAX_DECODED_BYTES} a snapshot may be",
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
            let started = Instant::now();
            apply_logged(&judge, PolicySnapshot::from_slice(&bytes), &origin, started).await;
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
                        let started = Instant::now();
                        apply_logged(&judge, PolicySnapshot::from_slice(&bytes), &origin, started)
                            .await;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "policy snapshot file unreadable; last good snapshot stays")
                }
            }
        }
    }
}

/// Watches Secret `namespace/name` and applies the snapshot stored under
/// every version of it ([`load_secret`]). Runs until dropped; the watcher
/// retries with backoff when the API server is unreachable, and the last
/// good snapshot stays. A version whose shards are missing or do not match
/// (the controller was mid-write, or already wrote the next one) is skipped:
/// the next version of the main Secret arrives by the same watch. A version
/// whose shards could not be read is read again ([`retry_wait`]) until it
/// loads or a newer version takes its place.
pub async fn secret_source(judge: Arc<PolicyJudge>, secrets: Api<Secret>, name: String) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let origin = format!("secret {name}");
    let stream = watcher::watcher(secrets.clone(), config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    // The newest version, while its read failed on an API error, and how
    // many reads failed.
    let mut unread: Option<(Secret, u32)> = None;
    loop {
        let first = match unread.take() {
            None => stream.next().await,
            Some((secret, failed)) => {
                tokio::select! {
                    event = stream.next() => {
                        // Read again after this event, unless it brings a
                        // newer version.
                        unread = Some((secret, failed));
                        event
                    }
                    () = tokio::time::sleep(retry_wait(failed)) => {
                        unread = load_version(&judge, &secrets, secret, failed, &origin).await;
                        continue;
                    }
                }
            }
        };
        let Some(first) = first else {
            break;
        };
        let mut newest = None;
        let mut note = |event: Result<Event<Secret>, watcher::Error>| match event {
            Ok(Event::Apply(secret) | Event::InitApply(secret)) => newest = Some(secret),
            Ok(Event::Delete(_)) => tracing::warn!(
                origin,
                "policy snapshot Secret deleted; last good snapshot stays until the controller rewrites it"
            ),
            Ok(Event::Init | Event::InitDone) => {}
            Err(e) => tracing::warn!(origin, error = %e, "policy snapshot watch failed; retrying"),
        };
        note(first);
        // Versions that arrived while the previous one was read and compiled:
        // only the newest is loaded, the ones it superseded are skipped.
        let skipped = drain_ready(&mut stream, MAX_DRAINED, &mut note);
        if let Some(secret) = newest {
            if skipped > 0 {
                tracing::debug!(
                    origin,
                    skipped,
                    "superseded policy snapshot versions skipped"
                );
            }
            unread = load_version(&judge, &secrets, secret, 0, &origin).await;
        }
    }
}

/// How long to wait before reading a version again after `failed` reads
/// failed: 250 ms, doubling, at most 10 s.
pub fn retry_wait(failed: u32) -> Duration {
    Duration::from_millis(250)
        .saturating_mul(1u32 << failed.min(16))
        .min(Duration::from_secs(10))
}

/// Reads and applies `secret`; gives it back when reading failed on an API
/// error (with the count of failed reads), so that it is read again.
async fn load_version(
    judge: &Arc<PolicyJudge>,
    secrets: &Api<Secret>,
    secret: Secret,
    failed: u32,
    origin: &str,
) -> Option<(Secret, u32)> {
    let started = Instant::now();
    match load_secret(secrets, &secret).await {
        Err(e) if e.is_transient() => {
            let failed = failed.saturating_add(1);
            tracing::warn!(
                origin,
                error = %e,
                failed,
                retry_in_ms = retry_wait(failed).as_millis(),
                held = ?judge.revision(),
                "policy snapshot not read; the last good one stays and the read is retried"
            );
            Some((secret, failed))
        }
        read => {
            apply_logged(judge, read, origin, started).await;
            None
        }
    }
}

/// At most this many queued watch events are taken at once before the newest
/// version is loaded.
const MAX_DRAINED: usize = 1024;

/// Hands `note` every item `stream` has ready now, without waiting, up to
/// `max`; returns how many it took.
fn drain_ready<S, T>(stream: &mut S, max: usize, note: &mut impl FnMut(T)) -> usize
where
    S: futures_util::Stream<Item = T> + Unpin,
{
    use futures_util::FutureExt as _;
    let mut taken = 0;
    while taken < max {
        match stream.next().now_or_never() {
            Some(Some(item)) => {
                note(item);
                taken += 1;
            }
            // Nothing ready, or the stream ended (the outer loop sees that).
            _ => break,
        }
    }
    taken
}

#[cfg(test)]
mod drain_tests {
    use futures_util::stream;

    use super::*;

    #[tokio::test]
    async fn queued_versions_are_taken_at_once_and_an_empty_queue_does_not_wait() {
        // Three versions queued, then a stream that stays open with nothing
        // ready, as a watch between events.
        let mut queued = stream::iter([2, 3, 4]).chain(stream::pending());
        let mut seen = vec![queued.next().await.unwrap()];
        let taken = drain_ready(&mut queued, MAX_DRAINED, &mut |v| seen.push(v));
        assert_eq!((taken, seen.as_slice()), (2, [2, 3, 4].as_slice()));
        assert_eq!(
            drain_ready(&mut queued, MAX_DRAINED, &mut |v| seen.push(v)),
            0
        );

        let mut many = stream::iter(5..10).chain(stream::pending());
        let mut capped = Vec::new();
        assert_eq!(drain_ready(&mut many, 3, &mut |v| capped.push(v)), 3);
        assert_eq!(capped, [5, 6, 7]);
    }
}
