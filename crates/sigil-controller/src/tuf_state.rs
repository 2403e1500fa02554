//! TUF client state that survives restarts: for each TUF repository the
//! controller follows (the built-in Sigstore instance's, and each `remote`
//! or `repository` TrustRoot's), the newest verified `root.json` and the
//! versions of the last verified timestamp, snapshot and targets, kept in
//! one Secret in sigil's namespace ([`DEFAULT_SECRET`]).
//!
//! Starting each update from this state is what makes rollback protection
//! hold across restarts and leader changes: a mirror that serves an older
//! root, timestamp or snapshot than one sigil already verified is refused
//! (TUF specification 5.3–5.5), not silently accepted by a fresh process
//! that starts over from the embedded root of trust.
//!
//! A Secret rather than a ConfigMap although nothing in it is secret: who
//! can write it can choose the root sigil trusts, so it gets the protection
//! of the policy snapshot Secret, which already decides everything the
//! webhook enforces. Only the leader writes it, by fenced writes
//! ([`crate::fenced`]): a replica that lost the Lease, or that has not seen
//! another controller's write, cannot overwrite it.
//!
//! A Secret holds 1 MiB, and a mirror chooses how large its `root.json` is:
//! each repository's state is bounded ([`MAX_REPOSITORY_BYTES`]) and the
//! TrustRoots' states together leave the built-in root's share free
//! ([`MAX_SHARED_BYTES`]), so no TrustRoot can keep the built-in root's
//! updates from persisting. An update past a bound is refused (and, as any
//! update that is not persisted, not used), naming the bound.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::error::{Error, Result};
use crate::fenced::{SecretWriter, Seen};
use crate::tuf::{TufError, TufState};

/// Name of the Secret holding the TUF state, in sigil's namespace.
pub const DEFAULT_SECRET: &str = "sigil-tuf-state";
/// Annotation of that Secret saying where the built-in Sigstore root in
/// force comes from (`kubectl describe secret sigil-tuf-state`).
pub const STATUS_ANNOTATION: &str = "policy.sigil.dev/sigstore-root";
/// Largest state of one repository (its newest `root.json` and versions,
/// as stored): Sigstore's public-good root is under 6 KiB.
pub const MAX_REPOSITORY_BYTES: usize = 64 * 1024;
/// What the TrustRoots' repositories may take together: a Secret's 1 MiB
/// less the built-in root's share ([`MAX_REPOSITORY_BYTES`]) and room for
/// the keys.
pub const MAX_SHARED_BYTES: usize = 1024 * 1024 - MAX_REPOSITORY_BYTES - 4 * 1024;

/// One repository's state as stored: the TUF state plus the initial root
/// it was reached from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct Stored {
    /// SHA-256 (hex) of the initial `root.json` the chain of roots started
    /// from; the state counts only for that initial root.
    initial_root_sha256: String,
    /// The newest verified `root.json`.
    root: String,
    root_version: u64,
    timestamp_version: u64,
    snapshot_version: u64,
    targets_version: u64,
    timestamp_expires: String,
}

impl Stored {
    fn new(initial_root: &[u8], state: &TufState) -> Option<Self> {
        Some(Self {
            initial_root_sha256: hex::encode(sigil_verifier::crypto::sha256(initial_root)),
            root: String::from_utf8(state.root.clone()).ok()?,
            root_version: state.root_version,
            timestamp_version: state.timestamp_version,
            snapshot_version: state.snapshot_version,
            targets_version: state.targets_version,
            timestamp_expires: state.timestamp_expires.clone(),
        })
    }

    /// The stored form, as it goes into the Secret.
    fn encode(&self) -> Vec<u8> {
        // Plain strings and integers always serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Whether `self` is at least as far along as `other` (a later root,
    /// or the same root with versions no lower).
    fn not_behind(&self, other: &Self) -> bool {
        let versions = |s: &Self| {
            (
                s.root_version,
                s.timestamp_version,
                s.snapshot_version,
                s.targets_version,
            )
        };
        self.initial_root_sha256 != other.initial_root_sha256 || versions(self) >= versions(other)
    }

    fn state(&self) -> TufState {
        TufState {
            root: self.root.clone().into_bytes(),
            root_version: self.root_version,
            timestamp_version: self.timestamp_version,
            snapshot_version: self.snapshot_version,
            targets_version: self.targets_version,
            timestamp_expires: self.timestamp_expires.clone(),
        }
    }
}

#[derive(Default)]
struct Held {
    states: BTreeMap<String, Stored>,
    status: Option<String>,
    /// What was last seen of the Secret; `None` until read, and again
    /// after a refused write.
    seen: Option<Seen>,
}

/// The TUF state of every repository, in memory and in the Secret.
pub struct TufStore {
    secrets: SecretWriter,
    name: String,
    /// The built-in root's repository, whose share the others leave free.
    builtin: String,
    held: Mutex<Held>,
}

/// The Secret data key of a repository's state.
fn data_key(repository: &str) -> String {
    format!("{repository}.json")
}

impl TufStore {
    /// A store writing Secret `name` through `secrets`, keeping the share
    /// of repository `builtin` (the built-in root's) free.
    pub fn new(secrets: SecretWriter, name: &str, builtin: &str) -> Self {
        Self {
            secrets,
            name: name.to_owned(),
            builtin: builtin.to_owned(),
            held: Mutex::default(),
        }
    }

    /// Loads the persisted state; returns how many repositories it holds.
    /// A missing Secret is a first start; an entry that does not parse is
    /// logged and skipped (that repository starts over from its initial
    /// root: whoever could corrupt the entry could as well have written an
    /// older valid one, so refusing to work would protect nothing).
    pub async fn recover(&self) -> Result<usize> {
        let mut held = self.held.lock().await;
        self.read_into(&mut held).await?;
        Ok(held.states.len())
    }

    /// Reads the Secret into `held`: its entries where they are not behind
    /// the ones held (after a refused write, what the other controller
    /// wrote joins what this one verified), its status unless one is held.
    async fn read_into(&self, held: &mut Held) -> Result<()> {
        let (seen, secret) = self.secrets.read(&self.name).await?;
        held.seen = Some(seen);
        let Some(secret) = secret else {
            return Ok(());
        };
        if held.status.is_none() {
            held.status = secret
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(STATUS_ANNOTATION))
                .cloned();
        }
        for (key, value) in secret.data.unwrap_or_default() {
            let Some(repository) = key.strip_suffix(".json") else {
                continue;
            };
            match serde_json::from_slice::<Stored>(&value.0) {
                Ok(stored) => {
                    let keep = held
                        .states
                        .get(repository)
                        .is_some_and(|mine| mine.not_behind(&stored));
                    if !keep {
                        held.states.insert(repository.to_owned(), stored);
                    }
                }
                Err(e) => tracing::warn!(
                    secret = %self.name, key, error = %e,
                    "TUF state entry unreadable; that repository starts over from its initial root"
                ),
            }
        }
        Ok(())
    }

    /// Refuses `stored` for `repository` when it passes its bound or, with
    /// the other TrustRoots' states, their shared bound.
    fn check_bounds(&self, held: &Held, repository: &str, stored: &Stored) -> Result<()> {
        let bytes = stored.encode().len();
        let too_large = |reason: String| {
            Err(Error::Tuf(TufError::StateTooLarge {
                repository: repository.to_owned(),
                reason,
            }))
        };
        if bytes > MAX_REPOSITORY_BYTES {
            return too_large(format!(
                "its state (root.json v{} of {} bytes) takes {bytes} bytes, more than the \
                 {MAX_REPOSITORY_BYTES} one repository may keep in Secret {}",
                stored.root_version,
                stored.root.len(),
                self.name
            ));
        }
        if repository == self.builtin {
            return Ok(());
        }
        let others: usize = held
            .states
            .iter()
            .filter(|(r, _)| r.as_str() != repository && **r != self.builtin)
            .map(|(_, s)| s.encode().len())
            .sum();
        if others.saturating_add(bytes) > MAX_SHARED_BYTES {
            return too_large(format!(
                "with the other TrustRoots' TUF states it would take {} bytes, more than the \
                 {MAX_SHARED_BYTES} they may keep together in Secret {} (the built-in root \
                 keeps a share of its own); remove TrustRoots no longer used",
                others.saturating_add(bytes),
                self.name
            ));
        }
        Ok(())
    }

    /// The state to start `repository`'s next update from: the last
    /// verified one, when it was reached from `initial_root`.
    pub async fn previous(&self, repository: &str, initial_root: &[u8]) -> Option<TufState> {
        let wanted = hex::encode(sigil_verifier::crypto::sha256(initial_root));
        self.held
            .lock()
            .await
            .states
            .get(repository)
            .filter(|s| s.initial_root_sha256 == wanted)
            .map(Stored::state)
    }

    /// Records a verified update and persists it when it changed anything;
    /// an update past its repository's bound is refused, and nothing
    /// changes.
    pub async fn record(
        &self,
        repository: &str,
        initial_root: &[u8],
        state: &TufState,
    ) -> Result<()> {
        let Some(stored) = Stored::new(initial_root, state) else {
            return Err(Error::Tuf(crate::tuf::TufError::Malformed {
                file: format!("{repository}: root.json"),
                reason: "not UTF-8".into(),
            }));
        };
        let mut held = self.held.lock().await;
        if held.states.get(repository) == Some(&stored) {
            return Ok(());
        }
        self.check_bounds(&held, repository, &stored)?;
        let previous = held.states.insert(repository.to_owned(), stored);
        if let Err(e) = self.write(&mut held).await {
            // Memory must not run ahead of what a restart would find.
            match previous {
                Some(p) => held.states.insert(repository.to_owned(), p),
                None => held.states.remove(repository),
            };
            return Err(e);
        }
        Ok(())
    }

    /// Forgets the state of a repository no longer followed (a deleted
    /// TrustRoot), so that a TrustRoot created again under the same name
    /// starts from the root of trust its spec gives.
    pub async fn forget(&self, repository: &str) -> Result<()> {
        let mut held = self.held.lock().await;
        if held.states.remove(repository).is_some() {
            self.write(&mut held).await?;
        }
        Ok(())
    }

    /// Keeps only the repositories `keep` accepts (after a restart, those
    /// of TrustRoots deleted while the controller was down).
    pub async fn retain(&self, keep: impl Fn(&str) -> bool) -> Result<()> {
        let mut held = self.held.lock().await;
        let before = held.states.len();
        held.states.retain(|repository, _| keep(repository));
        if held.states.len() != before {
            self.write(&mut held).await?;
        }
        Ok(())
    }

    /// Sets the one-line status of the built-in Sigstore root (written as an
    /// annotation of the Secret when it changed).
    pub async fn set_status(&self, status: &str) -> Result<()> {
        let mut held = self.held.lock().await;
        if held.status.as_deref() == Some(status) {
            return Ok(());
        }
        let previous = held.status.replace(status.to_owned());
        if let Err(e) = self.write(&mut held).await {
            held.status = previous;
            return Err(e);
        }
        Ok(())
    }

    /// The persisted state of `repository`'s timestamp expiry, for metrics.
    pub async fn timestamp_expires(&self, repository: &str) -> Option<String> {
        self.held
            .lock()
            .await
            .states
            .get(repository)
            .map(|s| s.timestamp_expires.clone())
    }

    /// Writes what is held, conditioned on what was last seen of the
    /// Secret (read first when nothing is).
    async fn write(&self, held: &mut Held) -> Result<()> {
        if held.seen.is_none() {
            self.read_into(held).await?;
        }
        let seen = held.seen.clone().unwrap_or(Seen::Absent);
        let data: BTreeMap<String, Vec<u8>> = held
            .states
            .iter()
            .map(|(repository, stored)| (data_key(repository), stored.encode()))
            .collect();
        let mut annotations = BTreeMap::new();
        if let Some(status) = &held.status {
            annotations.insert(STATUS_ANNOTATION.to_owned(), status.clone());
        }
        match self
            .secrets
            .write(&self.name, &seen, data, annotations, "writing TUF state")
            .await
        {
            Ok(now) => {
                held.seen = Some(now);
                Ok(())
            }
            Err(e) => {
                if matches!(e, Error::WriteConflict(_)) {
                    held.seen = None;
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fenced::Fence;
    use crate::fixtures::*;
    use crate::tuf::{Source, fetch_target};

    const BUILTIN: &str = "sigstore.public-good";

    fn store(client: kube::Client, leading: tokio::sync::watch::Receiver<bool>) -> TufStore {
        let secrets = SecretWriter::new(client, NS, Fence::new(leading, "sigil-controller"));
        TufStore::new(secrets, DEFAULT_SECRET, BUILTIN)
    }

    fn state(timestamp_version: u64) -> TufState {
        TufState {
            root: sigil_verifier::trust::PUBLIC_GOOD_TUF_ROOT
                .as_bytes()
                .to_vec(),
            root_version: 16,
            timestamp_version,
            snapshot_version: 1,
            targets_version: 1,
            timestamp_expires: "2099-01-01T00:00:00Z".into(),
        }
    }

    fn stored(api: &FakeApi, repository: &str) -> Option<Stored> {
        let bytes = secret_data(api, DEFAULT_SECRET, &data_key(repository))?;
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn an_oversized_root_from_one_mirror_is_refused_and_the_built_in_roots_state_still_persists()
     {
        // A mirror rotates to a root padded towards a Secret's 1 MiB, signed
        // as TUF asks: the update verifies.
        let repo = TufRepo::new(b"{}");
        let mut files = repo.files();
        let mut padded = repo.root_signed(2, &repo.root_key);
        padded["x-padding"] = "A".repeat(1_044_000).into();
        files.insert("2.root.json".into(), sign(padded, &[&repo.root_key]));
        let source = Source::Archive {
            files,
            targets: "targets".into(),
        };
        let (_, big) = fetch_target(
            &source,
            &repo.root(),
            None,
            "trusted_root.json",
            time::OffsetDateTime::now_utc(),
        )
        .await
        .unwrap();
        assert_eq!(big.root_version, 2);
        assert!(big.root.len() > 1_000_000);
        let (client, api) = FakeApi::start();
        let (_leading, leading) = tokio::sync::watch::channel(true);
        let store = store(client, leading);

        let trust_root = store.record("trustroot.big", &repo.root(), &big).await;
        let builtin = store
            .record(
                BUILTIN,
                sigil_verifier::trust::PUBLIC_GOOD_TUF_ROOT.as_bytes(),
                &state(7),
            )
            .await;

        builtin.expect("the built-in root's state persists");
        let err = trust_root.unwrap_err();
        assert!(
            matches!(&err, Error::Tuf(TufError::StateTooLarge { repository, .. }) if repository == "trustroot.big"),
            "{err}"
        );
        assert!(
            err.to_string().contains(&format!(
                "more than the {MAX_REPOSITORY_BYTES} one repository may keep"
            )),
            "{err}"
        );
        assert_eq!(stored(&api, BUILTIN).unwrap().timestamp_version, 7);
        assert!(stored(&api, "trustroot.big").is_none());
    }

    #[tokio::test]
    async fn the_trust_roots_states_together_leave_the_built_in_roots_share_free() {
        let (client, api) = FakeApi::start();
        let (_leading, leading) = tokio::sync::watch::channel(true);
        let store = store(client, leading);
        // States of 60 KiB each (within the per-repository bound).
        let big = |n: u8| TufState {
            root: format!("{{\"n\":{n},\"pad\":\"{}\"}}", "B".repeat(60 * 1024)).into_bytes(),
            ..state(1)
        };
        let mut refused = None;
        for n in 0..20u8 {
            if let Err(e) = store
                .record(&format!("trustroot.t{n}"), b"r", &big(n))
                .await
            {
                refused = Some((n, e));
                break;
            }
        }
        let (n, err) = refused.expect("the TrustRoots' share fills up");
        assert!(n > 10, "{n} TrustRoots of 60 KiB fit");
        assert!(
            err.to_string().contains(&format!(
                "more than the {MAX_SHARED_BYTES} they may keep together"
            )),
            "{err}"
        );
        // The built-in root's state, as large as a repository's may be, fits.
        let builtin = TufState {
            root: format!("{{\"pad\":\"{}\"}}", "C".repeat(63 * 1024)).into_bytes(),
            ..state(3)
        };
        store.record(BUILTIN, b"r", &builtin).await.unwrap();
        assert_eq!(stored(&api, BUILTIN).unwrap().timestamp_version, 3);
    }

    #[tokio::test]
    async fn a_stale_controllers_write_is_refused_and_it_keeps_the_newer_state_it_reads_back() {
        let (client, api) = FakeApi::start();
        let (old_leading_tx, old_leading) = tokio::sync::watch::channel(true);
        let old = store(client.clone(), old_leading);
        old.record("trustroot.a", b"r", &state(2)).await.unwrap();
        // The next leader reads that and verifies a newer timestamp.
        let (_new_leading_tx, new_leading) = tokio::sync::watch::channel(true);
        let new = Arc::new(store(client, new_leading));
        new.recover().await.unwrap();
        new.record("trustroot.a", b"r", &state(5)).await.unwrap();

        // The old one, stale, writes last.
        let err = old
            .record("trustroot.b", b"r", &state(1))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::WriteConflict(_)), "{err}");
        assert_eq!(stored(&api, "trustroot.a").unwrap().timestamp_version, 5);
        assert!(stored(&api, "trustroot.b").is_none());
        // Written again, after reading back, nothing goes back.
        old.record("trustroot.b", b"r", &state(1)).await.unwrap();
        assert_eq!(stored(&api, "trustroot.a").unwrap().timestamp_version, 5);
        assert_eq!(
            old.previous("trustroot.a", b"r")
                .await
                .unwrap()
                .timestamp_version,
            5
        );
        // Without the Lease it writes nothing.
        old_leading_tx.send(false).unwrap();
        let err = old.set_status("x").await.unwrap_err();
        assert!(matches!(err, Error::NotLeader(_)), "{err}");
    }
}
