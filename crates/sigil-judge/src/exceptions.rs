//! The ImagePolicyExceptions a judging process enforces, read straight from
//! the API (no controller in between) and checked with the admin's rules
//! (`--exception-namespace`, `--exception-max-duration`).
//!
//! The table holds every exception that passed the checks, expired or not;
//! whether one counts is asked at each judgement with this process's clock
//! ([`sigil_compile::exception::Exceptions::waivers`]), so the webhook and
//! the audit stop honouring an exception at its `expiresAt`, not when
//! something deletes it. A refused exception is logged once per change and
//! counted (`sigil_exceptions{state="refused"}`); it waives nothing.
//!
//! When the watch fails (the CRD not installed yet, RBAC missing), the
//! table keeps what it last read and the watch retries with backoff: an
//! exception only ever admits more, so a reader that cannot see one denies
//! what it would have waived, never the reverse.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use futures_util::StreamExt as _;
use kube::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use sigil_api::exception::ImagePolicyException;
use sigil_compile::exception::{self, ExceptionRules, Exceptions};
use time::OffsetDateTime;
use tokio::sync::watch;

/// What the process enforces: the exceptions that passed the admin's rules,
/// and the names and reasons of those refused.
#[derive(Debug)]
pub struct ExceptionTable {
    rules: ExceptionRules,
    accepted: RwLock<Arc<Exceptions>>,
    refused: RwLock<BTreeMap<String, String>>,
    generation: AtomicU64,
    changes: watch::Sender<u64>,
}

/// The table's counts at one instant (for the metrics and `sigil doctor`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExceptionCounts {
    /// Accepted and not yet expired.
    pub active: u64,
    /// Accepted, past their `expiresAt`.
    pub expired: u64,
    /// Refused by the admin's rules or as invalid.
    pub refused: u64,
}

impl ExceptionTable {
    /// An empty table checking exceptions with `rules`.
    pub fn new(rules: ExceptionRules) -> Self {
        Self {
            rules,
            accepted: RwLock::new(Arc::new(Exceptions::default())),
            refused: RwLock::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            changes: watch::Sender::new(0),
        }
    }

    /// The table's generation after every change (0 before the first).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The first instant after `now` when an accepted exception expires:
    /// whoever keeps results (the audit) judges again then.
    pub fn next_expiry(&self, now: OffsetDateTime) -> Option<OffsetDateTime> {
        self.current()
            .all()
            .map(|e| e.expires_at)
            .filter(|t| *t > now)
            .min()
    }

    /// The accepted exceptions now.
    pub fn current(&self) -> Arc<Exceptions> {
        self.accepted
            .read()
            .map(|a| a.clone())
            // A poisoned table waives nothing.
            .unwrap_or_default()
    }

    /// A number that grows with every change of the table, so verdicts
    /// judged across a change are not cached.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Replaces the table with `objects`, checked at `now` (which stands in
    /// for a missing creation time only). Logs each newly refused exception.
    pub fn replace<'a>(
        &self,
        objects: impl IntoIterator<Item = &'a ImagePolicyException>,
        now: OffsetDateTime,
    ) {
        let mut accepted = Vec::new();
        let mut refused = BTreeMap::new();
        for object in objects {
            match exception::compile(object, &self.rules, now) {
                Ok(e) => accepted.push(e),
                Err(why) => {
                    let name = sigil_api::exception::qualified_name(
                        object.metadata.namespace.as_deref().unwrap_or_default(),
                        object.metadata.name.as_deref().unwrap_or_default(),
                    );
                    refused.insert(name, why);
                }
            }
        }
        if let Ok(held) = self.refused.read() {
            for (name, why) in &refused {
                if held.get(name) != Some(why) {
                    tracing::warn!(exception = %name, reason = %why, "exception refused");
                }
            }
        }
        let accepted = Arc::new(Exceptions::new(accepted));
        if let Ok(mut slot) = self.accepted.write() {
            *slot = accepted;
        }
        if let Ok(mut slot) = self.refused.write() {
            *slot = refused;
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.changes.send_replace(generation);
    }

    /// How many exceptions are active, expired and refused at `now`.
    pub fn counts(&self, now: OffsetDateTime) -> ExceptionCounts {
        let current = self.current();
        let (active, expired) = current.all().fold((0, 0), |(a, x), e| {
            if now < e.expires_at {
                (a + 1, x)
            } else {
                (a, x + 1)
            }
        });
        ExceptionCounts {
            active,
            expired,
            refused: self.refused.read().map_or(0, |r| r.len() as u64),
        }
    }

    /// The refused exceptions with why, by `NAMESPACE/NAME`.
    pub fn refused(&self) -> BTreeMap<String, String> {
        self.refused.read().map(|r| r.clone()).unwrap_or_default()
    }
}

/// Keeps `table` equal to the ImagePolicyExceptions `api` lists, for as
/// long as the task runs: a watch (relisting on every restart, with
/// backoff on errors) whose every event rebuilds the table from the
/// reflected objects.
pub async fn watch(table: Arc<ExceptionTable>, api: Api<ImagePolicyException>) {
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                let objects = reader.state();
                table.replace(objects.iter().map(|o| &**o), OffsetDateTime::now_utc());
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "cannot watch ImagePolicyExceptions (is the CRD installed, may sigil list \
                     them?); the exceptions last read stay, retrying"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use std::time::Duration;

    use sigil_api::exception::{ExceptionWorkload, ImagePolicyExceptionSpec};
    use sigil_verifier::trust::parse_rfc3339;

    use super::*;

    fn object(ns: &str, name: &str, expires: &str) -> ImagePolicyException {
        let mut e = ImagePolicyException::new(
            name,
            ImagePolicyExceptionSpec {
                policies: vec!["signed".into()],
                images: vec!["registry.local/**".into()],
                workloads: vec![ExceptionWorkload {
                    kind: "Pod".into(),
                    name: "*".into(),
                }],
                expires_at: expires.into(),
                reason: None,
            },
        );
        e.metadata.namespace = Some(ns.into());
        e
    }

    #[test]
    fn the_table_counts_active_expired_and_refused_and_moves_its_generation() {
        let rules = ExceptionRules::new(&["team-a".into()], Duration::from_secs(86_400)).unwrap();
        let table = ExceptionTable::new(rules);
        let now = parse_rfc3339("2026-12-07T12:00:00Z").unwrap();
        assert_eq!(table.generation(), 0);
        let objects = [
            object("team-a", "soon", "2026-12-07T13:00:00Z"),
            object("team-a", "later", "2026-12-08T11:00:00Z"),
            object("team-b", "elsewhere", "2026-12-07T13:00:00Z"),
            object("team-a", "too-long", "2026-12-09T12:00:00Z"),
        ];
        table.replace(&objects, now);
        assert_eq!(table.generation(), 1);
        assert_eq!(
            table.counts(now),
            ExceptionCounts {
                active: 2,
                expired: 0,
                refused: 2
            }
        );
        let later = parse_rfc3339("2026-12-07T14:00:00Z").unwrap();
        assert_eq!(table.counts(later).active, 1);
        assert_eq!(table.counts(later).expired, 1);
        assert_eq!(
            table.next_expiry(now),
            parse_rfc3339("2026-12-07T13:00:00Z")
        );
        assert_eq!(
            table.next_expiry(later),
            parse_rfc3339("2026-12-08T11:00:00Z")
        );
        assert_eq!(*table.subscribe().borrow(), 1);
        let refused = table.refused();
        assert!(refused["team-b/elsewhere"].contains("(team-a)"));
        assert!(refused["team-a/too-long"].contains("maximum of 1d"));
        table.replace([], now);
        assert_eq!(table.counts(now), ExceptionCounts::default());
        assert_eq!(table.generation(), 2);
    }
}
