//! The built-in Sigstore root: the default trust root while no TrustRoot is
//! marked default, kept fresh the way cosign, sigstore-go and
//! policy-controller keep it — `trusted_root.json` fetched through TUF from
//! the instance's mirror (`https://tuf-repo-cdn.sigstore.dev` for
//! public-good), starting from the TUF root of trust built into sigil and
//! from the state persisted by [`crate::tuf_state`].
//!
//! What is published, in order of preference: the root verified by the
//! latest TUF update; when an update fails, the root an earlier update
//! verified (also one recovered from the snapshot after a restart), because
//! going back to an older root is what TUF's rollback protection forbids;
//! only when no update ever succeeded, the `trusted_root.json` built into
//! sigil. With `--tuf-offline` (air-gapped clusters) no mirror is contacted
//! and the built-in copy is used. Every request to the mirror is bounded
//! (`--tuf-timeout-seconds`), and the refresh runs beside the reconcilers, so an
//! unreachable mirror never delays a policy.
//!
//! An expired timestamp (TUF 5.4.4, a freeze attack or an unmaintained
//! mirror) aborts the update: nothing it carries is trusted or persisted,
//! the last verified root stays in force and the failure is reported
//! (`sigil_controller_tuf_metadata_expired`, the status annotation, a log
//! line). Keeping the last verified root rather than refusing all trust
//! follows the specification — it forbids trusting the expired metadata, not
//! the targets an earlier complete update verified — and refusing would let
//! whoever can stall the mirror deny every admission in the cluster; the
//! cost is that a key revocation published after the freeze does not reach
//! sigil, which is why it alerts.

use std::sync::Arc;
use std::time::Duration;

use sigil_api::snapshot::SnapshotSigstore;
use sigil_verifier::trust::{TrustedRoot, format_rfc3339, parse_rfc3339};
use time::OffsetDateTime;

use crate::context::{Context, TrustChange};
use crate::error::Result;
use crate::names::{EMBEDDED, TUF};
use crate::trustroot::TARGET;
use crate::tuf::{self, Source, TufError};

/// The TUF state key of the built-in root, e.g. `sigstore.public-good`.
pub fn repository(ctx: &Context) -> String {
    crate::names::sigstore_repository(ctx.args.sigstore_instance.name())
}

/// Why an update of the built-in root failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// The mirror could not be reached or its repository did not verify.
    #[error(transparent)]
    Tuf(#[from] TufError),
    /// The update verified but could not be persisted, so it is not used:
    /// after a restart a mirror could roll back to before it.
    #[error("the verified update could not be persisted to the TUF state Secret: {0}")]
    Persist(String),
}

impl UpdateError {
    /// A short stable label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Tuf(e) => e.reason(),
            Self::Persist(_) => "persist",
        }
    }
}

/// What a refresh did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refreshed {
    /// Offline mode: the built-in copy is in force.
    Offline,
    /// The mirror gave a verified root, now in force.
    Updated,
    /// The update failed; the root an earlier update verified stays.
    KeptLastVerified(UpdateError),
    /// The update failed and none ever succeeded: the built-in copy is in force.
    Fallback(UpdateError),
}

/// One refresh of the built-in root: updates through TUF (or not, offline),
/// publishes what should be in force, records status and metrics.
pub async fn refresh(ctx: &Context) -> Result<Refreshed> {
    refresh_from(ctx, ctx.args.sigstore_instance.tuf_root().as_bytes()).await
}

/// [`refresh`] starting from `initial_root` as the TUF root of trust (tests
/// give their own repository's).
async fn refresh_from(ctx: &Context, initial_root: &[u8]) -> Result<Refreshed> {
    let instance = ctx.args.sigstore_instance;
    let name = instance.name();
    let repository = repository(ctx);
    let embedded = SnapshotSigstore {
        instance: name.to_owned(),
        source: EMBEDDED.to_owned(),
        trusted_root_json: instance.embedded_trusted_root().to_owned(),
    };
    let before = ctx.publisher.default_id().await;
    let Some(mirror) = ctx.args.tuf_mirror_url() else {
        ctx.publisher.accept_sigstore(embedded).await?;
        ctx.metrics.sigstore_source(name, "embedded_offline");
        report(
            ctx,
            &format!(
                "{name}: offline mode (--tuf-offline): the trusted_root.json built into sigil"
            ),
        )
        .await;
        notify_if_changed(ctx, &before).await;
        return Ok(Refreshed::Offline);
    };
    let outcome = update(ctx, &mirror, &repository, initial_root).await;
    let now = OffsetDateTime::now_utc();
    let refreshed = match outcome {
        Ok((json, state)) => {
            ctx.publisher
                .accept_sigstore(SnapshotSigstore {
                    instance: name.to_owned(),
                    source: TUF.to_owned(),
                    trusted_root_json: json,
                })
                .await?;
            ctx.metrics.tuf_updated(
                &repository,
                now.unix_timestamp(),
                parse_rfc3339(&state.timestamp_expires).map(OffsetDateTime::unix_timestamp),
            );
            ctx.metrics.sigstore_source(name, "tuf");
            report(
                ctx,
                &format!(
                    "{name}: verified through TUF from {mirror}: root v{}, timestamp v{} \
                     (expires {}), at {}",
                    state.root_version,
                    state.timestamp_version,
                    state.timestamp_expires,
                    format_rfc3339(now)
                ),
            )
            .await;
            Refreshed::Updated
        }
        Err(e) => {
            ctx.metrics.tuf_failed(&repository, e.reason());
            let held = ctx.publisher.sigstore().await;
            let cause = match &e {
                UpdateError::Tuf(TufError::Fetch { .. }) => {
                    format!("mirror {mirror} unreachable: {e}")
                }
                UpdateError::Tuf(_) => format!("TUF update from {mirror} refused: {e}"),
                UpdateError::Persist(_) => e.to_string(),
            };
            if held.source == TUF {
                ctx.metrics.sigstore_source(name, "tuf");
                tracing::warn!(instance = name, error = %e, "TUF refresh of the built-in Sigstore root failed; the last verified root stays in force");
                report(
                    ctx,
                    &format!("{name}: last root verified through TUF kept; {cause}"),
                )
                .await;
                Refreshed::KeptLastVerified(e)
            } else {
                ctx.publisher.accept_sigstore(embedded).await?;
                ctx.metrics.sigstore_source(name, "embedded_fallback");
                tracing::warn!(instance = name, error = %e, "TUF refresh of the built-in Sigstore root failed; the embedded root is in force");
                report(ctx, &format!("{name}: fallback: embedded root, {cause}")).await;
                Refreshed::Fallback(e)
            }
        }
    };
    notify_if_changed(ctx, &before).await;
    Ok(refreshed)
}

/// Runs the TUF update workflow for the built-in root and checks the target.
async fn update(
    ctx: &Context,
    mirror: &str,
    repository: &str,
    initial_root: &[u8],
) -> Result<(String, tuf::TufState), UpdateError> {
    let source = Source::http_with_timeout(mirror, ctx.args.tuf_timeout())?;
    let previous = ctx.tuf.previous(repository, initial_root).await;
    let (bytes, state) = tuf::fetch_target(
        &source,
        initial_root,
        previous.as_ref(),
        TARGET,
        OffsetDateTime::now_utc(),
    )
    .await?;
    let malformed = |reason: String| TufError::Malformed {
        file: TARGET.to_owned(),
        reason,
    };
    let json = String::from_utf8(bytes).map_err(|_| malformed("not UTF-8".into()))?;
    TrustedRoot::from_json(&json).map_err(|e| malformed(e.to_string()))?;
    // A verified update a restart would not know about could be rolled
    // back by a later mirror: it is used only once persisted.
    ctx.tuf
        .record(repository, initial_root, &state)
        .await
        .map_err(|e| UpdateError::Persist(e.to_string()))?;
    Ok((json, state))
}

async fn report(ctx: &Context, status: &str) {
    if let Err(e) = ctx.tuf.set_status(status).await {
        tracing::warn!(error = %e, status, "could not record the built-in root's status");
    }
}

async fn notify_if_changed(ctx: &Context, before: &str) {
    if ctx.publisher.default_id().await != before {
        let _ = ctx.trust_root_changed.send(TrustChange::Default);
    }
}

/// Refreshes the built-in root now and then every refresh interval (sooner
/// after a failure) until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()>) {
    let repository = repository(&ctx);
    if let Some(expires) = ctx
        .tuf
        .timestamp_expires(&repository)
        .await
        .and_then(|e| parse_rfc3339(&e))
    {
        ctx.metrics
            .tuf_timestamp_expires(&repository, expires.unix_timestamp());
    }
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A slow mirror must not hold up shutdown or a lost lease: the update
        // is dropped where it stands (what it persisted stays valid state).
        let refreshed = tokio::select! {
            () = &mut shutdown => return,
            r = refresh(&ctx) => r,
        };
        let wait = match refreshed {
            Ok(Refreshed::Updated | Refreshed::Offline) => ctx.args.trust_root_refresh(),
            Ok(Refreshed::KeptLastVerified(_) | Refreshed::Fallback(_)) => ctx.args.tuf_retry(),
            Err(e) => {
                tracing::warn!(error = %e, "publishing the built-in Sigstore root failed; retrying");
                Duration::from_secs(10)
            }
        };
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use sigil_verifier::trust::{PUBLIC_GOOD_JSON, STAGING_JSON};

    use super::*;
    use crate::fixtures::*;
    use crate::tuf_state::{DEFAULT_SECRET, STATUS_ANNOTATION};

    /// A context following `mirror` for the built-in root.
    fn following(client: kube::Client, mirror: &str) -> Arc<Context> {
        let mirror = mirror.to_owned();
        context_with(client, move |args| {
            args.tuf_offline = false;
            args.tuf_mirror = Some(mirror);
            args.tuf_timeout_secs = 5;
        })
        .0
    }

    fn status(api: &FakeApi) -> String {
        api.get(&secret_path(DEFAULT_SECRET)).unwrap()["metadata"]["annotations"][STATUS_ANNOTATION]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn published(api: &FakeApi) -> sigil_api::snapshot::SnapshotSigstore {
        stored_snapshot(api).unwrap().sigstore.unwrap()
    }

    fn metrics(ctx: &Context) -> String {
        ctx.metrics.encode(0)
    }

    /// A mirror whose repository has `trusted_root.json` = the staging root
    /// (told apart from the embedded public-good one) at timestamp `version`.
    fn repo(version: u64) -> TufRepo {
        let mut repo = TufRepo::new(STAGING_JSON.as_bytes());
        repo.timestamp_version = version;
        repo
    }

    #[tokio::test]
    async fn an_unreachable_mirror_leaves_the_embedded_root_in_force_and_says_why() {
        let (client, api) = FakeApi::start();
        // Nothing listens on port 1: the connection is refused at once.
        let ctx = following(client, "http://127.0.0.1:1");

        let refreshed = refresh(&ctx).await.unwrap();

        assert!(
            matches!(
                refreshed,
                Refreshed::Fallback(UpdateError::Tuf(TufError::Fetch { .. }))
            ),
            "{refreshed:?}"
        );
        let held = published(&api);
        assert_eq!(
            (held.instance.as_str(), held.source.as_str()),
            ("public-good", EMBEDDED)
        );
        assert_eq!(held.trusted_root_json, PUBLIC_GOOD_JSON);
        let status = status(&api);
        assert!(
            status.starts_with(
                "public-good: fallback: embedded root, mirror http://127.0.0.1:1 unreachable: TUF: fetching"
            ),
            "{status}"
        );
        let m = metrics(&ctx);
        assert!(
            m.contains(
                r#"sigil_controller_sigstore_root{instance="public-good",source="embedded_fallback"} 1"#
            ),
            "{m}"
        );
        assert!(
            m.contains(r#"sigil_controller_tuf_update_failures_total{repository="sigstore.public-good",reason="fetch"} 1"#),
            "{m}"
        );
    }

    #[tokio::test]
    async fn offline_mode_publishes_the_embedded_root_without_contacting_a_mirror() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |args| args.tuf_offline = true);

        assert_eq!(refresh(&ctx).await.unwrap(), Refreshed::Offline);

        assert_eq!(published(&api).source, EMBEDDED);
        assert!(status(&api).contains("offline mode (--tuf-offline)"));
        assert!(metrics(&ctx).contains(
            r#"sigil_controller_sigstore_root{instance="public-good",source="embedded_offline"} 1"#
        ));
        assert!(api.requests().iter().all(|r| !r.path.contains("tuf-repo")));
    }

    #[tokio::test]
    async fn a_verified_update_is_published_and_persisted_and_a_change_of_the_default_is_announced()
    {
        let (client, api) = FakeApi::start();
        let tuf = repo(5);
        let mirror = serve_mirror(Arc::new(Mutex::new(tuf.files()))).await;
        let (ctx, mut changes) = context_with(client, |args| {
            args.tuf_offline = false;
            args.tuf_mirror = Some(mirror.clone());
        });

        assert_eq!(
            refresh_from(&ctx, &tuf.root()).await.unwrap(),
            Refreshed::Updated
        );

        let held = published(&api);
        assert_eq!(
            (held.source.as_str(), held.trusted_root_json.as_str()),
            (TUF, STAGING_JSON)
        );
        assert_eq!(changes.try_recv().unwrap(), TrustChange::Default);
        let secret = api.get(&secret_path(DEFAULT_SECRET)).unwrap();
        let stored: serde_json::Value = serde_json::from_slice(
            &base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                secret["data"]["sigstore.public-good.json"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(stored["timestampVersion"], 5);
        assert_eq!(stored["rootVersion"], 1);
        assert!(
            status(&api).contains("verified through TUF"),
            "{}",
            status(&api)
        );
        let m = metrics(&ctx);
        assert!(
            m.contains(r#"sigil_controller_tuf_timestamp_expiry_timestamp_seconds{repository="sigstore.public-good"} 4070908800"#),
            "{m}"
        );
        // The same repository again: nothing changes, nothing is announced.
        assert_eq!(
            refresh_from(&ctx, &tuf.root()).await.unwrap(),
            Refreshed::Updated
        );
        assert!(changes.try_recv().is_err());
    }

    #[tokio::test]
    async fn after_a_restart_a_mirror_rolled_back_to_an_older_timestamp_is_refused_and_the_verified_root_kept()
     {
        let (client, api) = FakeApi::start();
        let tuf = repo(5);
        let files = Arc::new(Mutex::new(tuf.files()));
        let mirror = serve_mirror(files.clone()).await;
        let first = following(client.clone(), &mirror);
        first.publisher.recover().await.unwrap();
        first.tuf.recover().await.unwrap();
        assert_eq!(
            refresh_from(&first, &tuf.root()).await.unwrap(),
            Refreshed::Updated
        );

        // The mirror is rolled back to timestamp version 4, whose repository
        // now names the embedded public-good root; the controller restarts.
        let mut old = TufRepo::new(PUBLIC_GOOD_JSON.as_bytes());
        old.timestamp_version = 4;
        *files.lock().unwrap() = old.files();
        let restarted = following(client, &mirror);
        restarted.publisher.recover().await.unwrap();
        assert_eq!(restarted.tuf.recover().await.unwrap(), 1);

        let refreshed = refresh_from(&restarted, &tuf.root()).await.unwrap();

        assert_eq!(
            refreshed,
            Refreshed::KeptLastVerified(UpdateError::Tuf(TufError::Rollback {
                role: "timestamp".into(),
                had: 5,
                got: 4
            }))
        );
        let held = published(&api);
        assert_eq!(
            (held.source.as_str(), held.trusted_root_json.as_str()),
            (TUF, STAGING_JSON)
        );
        let status = status(&api);
        assert!(
            status.contains("last root verified through TUF kept")
                && status
                    .contains("timestamp version 4 is lower than the already trusted 5 (rollback)"),
            "{status}"
        );
        assert!(metrics(&restarted).contains(
            r#"sigil_controller_tuf_update_failures_total{repository="sigstore.public-good",reason="rollback"} 1"#
        ));

        // Without the persisted state (a fresh cluster) the same mirror is
        // simply the first one seen: the state is what refuses it.
        let (fresh_client, _fresh_api) = FakeApi::start();
        let fresh = following(fresh_client, &mirror);
        assert_eq!(
            refresh_from(&fresh, &tuf.root()).await.unwrap(),
            Refreshed::Updated
        );
    }

    #[tokio::test]
    async fn after_a_restart_a_mirror_rolled_back_to_before_a_key_rotation_is_refused() {
        let (client, api) = FakeApi::start();
        // Root version 2 replaces the timestamp key (seed 2 → seed 9).
        let before = repo(3);
        let mut after = repo(2);
        after.timestamp_key = seed_key(9);
        let root2 = sign(after.root_signed(2, &after.root_key), &[&before.root_key]);
        let mut files = after.files();
        files.insert("2.root.json".into(), root2);
        let files = Arc::new(Mutex::new(files));
        let mirror = serve_mirror(files.clone()).await;
        let first = following(client.clone(), &mirror);
        assert_eq!(
            refresh_from(&first, &before.root()).await.unwrap(),
            Refreshed::Updated
        );
        let state = first
            .tuf
            .previous("sigstore.public-good", &before.root())
            .await
            .unwrap();
        assert_eq!(state.root_version, 2);

        // The mirror goes back to the repository of root version 1, whose
        // timestamp (a higher version, even) the old key signed; restart.
        *files.lock().unwrap() = before.files();
        let restarted = following(client, &mirror);
        restarted.publisher.recover().await.unwrap();
        restarted.tuf.recover().await.unwrap();

        let refreshed = refresh_from(&restarted, &before.root()).await.unwrap();

        assert!(
            matches!(&refreshed, Refreshed::KeptLastVerified(UpdateError::Tuf(TufError::Threshold { role, .. })) if role == "timestamp"),
            "{refreshed:?}"
        );
        assert_eq!(published(&api).trusted_root_json, STAGING_JSON);
        // A controller that never saw root version 2 accepts that mirror.
        let (fresh_client, _fresh_api) = FakeApi::start();
        let fresh = following(fresh_client, &mirror);
        assert_eq!(
            refresh_from(&fresh, &before.root()).await.unwrap(),
            Refreshed::Updated
        );
    }

    #[tokio::test]
    async fn an_expired_timestamp_is_refused_and_reported_and_the_verified_root_kept() {
        let (client, api) = FakeApi::start();
        let tuf = repo(5);
        let files = Arc::new(Mutex::new(tuf.files()));
        let mirror = serve_mirror(files.clone()).await;
        let ctx = following(client, &mirror);
        assert_eq!(
            refresh_from(&ctx, &tuf.root()).await.unwrap(),
            Refreshed::Updated
        );

        // The mirror freezes: a newer timestamp, validly signed, but expired.
        let mut frozen = repo(6);
        frozen.expires = "2021-01-01T00:00:00Z".into();
        let timestamp = frozen.files()["timestamp.json"].clone();
        files
            .lock()
            .unwrap()
            .insert("timestamp.json".into(), timestamp);

        let refreshed = refresh_from(&ctx, &tuf.root()).await.unwrap();

        assert!(
            matches!(&refreshed, Refreshed::KeptLastVerified(UpdateError::Tuf(TufError::Expired { role, .. })) if role == "timestamp"),
            "{refreshed:?}"
        );
        assert_eq!(published(&api).trusted_root_json, STAGING_JSON);
        assert!(status(&api).contains("timestamp metadata expired at 2021-01-01T00:00:00Z"));
        let m = metrics(&ctx);
        assert!(
            m.contains(
                r#"sigil_controller_tuf_metadata_expired{repository="sigstore.public-good"} 1"#
            ),
            "{m}"
        );
        // Nothing of the expired update was persisted.
        assert_eq!(
            ctx.tuf
                .previous("sigstore.public-good", &tuf.root())
                .await
                .unwrap()
                .timestamp_version,
            5
        );
    }

    #[tokio::test]
    async fn an_expired_timestamp_on_the_first_update_falls_back_to_the_embedded_root() {
        let (client, api) = FakeApi::start();
        let mut tuf = repo(1);
        tuf.expires = "2099-01-01T00:00:00Z".into();
        let mut files = tuf.files();
        let mut frozen = repo(1);
        frozen.expires = "2021-01-01T00:00:00Z".into();
        files.insert(
            "timestamp.json".into(),
            frozen.files()["timestamp.json"].clone(),
        );
        let mirror = serve_mirror(Arc::new(Mutex::new(files))).await;
        let ctx = following(client, &mirror);

        let refreshed = refresh_from(&ctx, &tuf.root()).await.unwrap();

        assert!(matches!(refreshed, Refreshed::Fallback(_)), "{refreshed:?}");
        assert_eq!(published(&api).trusted_root_json, PUBLIC_GOOD_JSON);
        assert!(
            status(&api).starts_with("public-good: fallback: embedded root, TUF update from"),
            "{}",
            status(&api)
        );
    }

    /// A mirror that accepts connections and never answers; returns its URL.
    async fn hanging_mirror() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_mirror_that_never_answers_costs_one_bounded_request_then_the_embedded_root_stands() {
        let (client, api) = FakeApi::start();
        let mirror = hanging_mirror().await;
        let (ctx, _rx) = context_with(client, |args| {
            args.tuf_offline = false;
            args.tuf_mirror = Some(mirror.clone());
            args.tuf_timeout_secs = 1;
        });
        let started = std::time::Instant::now();

        let refreshed = refresh(&ctx).await.unwrap();

        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(
            matches!(
                refreshed,
                Refreshed::Fallback(UpdateError::Tuf(TufError::Fetch { .. }))
            ),
            "{refreshed:?}"
        );
        assert_eq!(published(&api).source, EMBEDDED);
        assert!(status(&api).contains("unreachable"), "{}", status(&api));
    }

    #[tokio::test]
    async fn shutdown_does_not_wait_for_a_mirror_that_never_answers() {
        let (client, _api) = FakeApi::start();
        let mirror = hanging_mirror().await;
        let (ctx, _rx) = context_with(client, |args| {
            args.tuf_offline = false;
            args.tuf_mirror = Some(mirror.clone());
            args.tuf_timeout_secs = 60;
        });

        let stopped = tokio::time::timeout(
            Duration::from_secs(5),
            run(ctx, tokio::time::sleep(Duration::from_millis(200))),
        )
        .await;

        assert!(
            stopped.is_ok(),
            "the refresh loop outlived its shutdown by 5 s"
        );
    }
}
