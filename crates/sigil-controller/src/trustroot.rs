//! The TrustRoot reconciler: turns `sigstoreKeys` into `trusted_root.json`,
//! reads `repository` (a serialized TUF repository) and refreshes `remote`
//! (a TUF mirror) periodically, all through [`crate::tuf`], and publishes the
//! result to the snapshot. A failed load or refresh publishes nothing new:
//! the snapshot keeps the last good material, `Ready` stays as it was when
//! there is one, and `Fresh=False` says why the refresh failed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use sigil_api::compile::validate_trust_root;
use sigil_api::snapshot::SnapshotTrustRoot;
use sigil_api::trustroot::TrustRoot;
use time::OffsetDateTime;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::sigstore_keys::trusted_root_json;
use crate::status::{self, Verdict};
use crate::tuf::{self, Source};

/// The controller's name in metrics.
pub const CONTROLLER: &str = "trustroot";
/// The TUF target holding Sigstore's trust root.
pub const TARGET: &str = "trusted_root.json";
/// How soon a failed load is retried.
const RETRY: Duration = Duration::from_secs(60);

/// Loads the trust material of `tr`: the `trusted_root.json` text, or why
/// it could not be loaded.
pub async fn load(tr: &TrustRoot, ctx: &Context) -> Result<String, String> {
    let name = tr.name_any();
    let (source, root, what) = if let Some(keys) = &tr.spec.sigstore_keys {
        return trusted_root_json(keys);
    } else if let Some(remote) = &tr.spec.remote {
        (
            Source::http(&remote.mirror).map_err(|e| e.to_string())?,
            &remote.root,
            format!("mirror {}", remote.mirror),
        )
    } else if let Some(repo) = &tr.spec.repository {
        (
            Source::archive(&repo.mirror_fs, repo.targets.as_deref())
                .map_err(|e| format!("spec.repository.mirrorFS: {e}"))?,
            &repo.root,
            "spec.repository".to_owned(),
        )
    } else {
        return Err("exactly one of remote, repository or sigstoreKeys must be set".into());
    };
    let compact: String = root.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let root = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, compact)
        .map_err(|e| format!("root: not base64 ({e})"))?;
    // The state of the last update is valid only for the same initial root.
    let key = format!(
        "{name}/{}",
        hex::encode(sigil_verifier::crypto::sha256(&root))
    );
    let previous = ctx.tuf.lock().await.get(&key).cloned();
    let (bytes, state) = tuf::fetch_target(
        &source,
        &root,
        previous.as_ref(),
        TARGET,
        OffsetDateTime::now_utc(),
    )
    .await
    .map_err(|e| format!("{what}: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{what}: {TARGET} is not UTF-8"))?;
    sigil_verifier::trust::TrustedRoot::from_json(&text)
        .map_err(|e| format!("{what}: {TARGET}: {e}"))?;
    ctx.tuf.lock().await.insert(key, state);
    Ok(text)
}

/// Reconciles one TrustRoot.
pub async fn reconcile(tr: Arc<TrustRoot>, ctx: Arc<Context>) -> Result<Action> {
    ctx.ensure_leader()?;
    ctx.metrics.reconciled(CONTROLLER);
    let name = tr.name_any();
    let generation = tr.metadata.generation.unwrap_or_default();
    let refresh = ctx.args.trust_root_refresh();
    let last_good = ctx.publisher.trust_root(&name).await;
    let loaded = match validate_trust_root(&tr.spec) {
        Err(e) => Err(("Invalid", e.to_string())),
        Ok(()) => load(&tr, &ctx).await.map_err(|e| ("LoadFailed", e)),
    };
    let now = OffsetDateTime::now_utc();
    let (ready, fresh, requeue) = match loaded {
        Ok(json) => {
            let changed = last_good
                .as_ref()
                .is_none_or(|g| g.trusted_root_json != json);
            ctx.publisher
                .accept_trust_root(SnapshotTrustRoot {
                    name: name.clone(),
                    generation,
                    trusted_root_json: json,
                })
                .await?;
            ctx.metrics
                .trust_root_refreshed(&name, now.unix_timestamp());
            if changed {
                // Policies waiting for this trust root can now be accepted.
                let _ = ctx.trust_root_changed.send(name.clone());
            }
            let fresh = Verdict::ok("Fresh", "Loaded", "trust material loaded and verified");
            let ready = Verdict::ok(
                "Ready",
                "Loaded",
                format!("generation {generation} loaded and published to the webhook"),
            );
            // Only a mirror changes without the object changing.
            let requeue = if tr.spec.remote.is_some() {
                refresh
            } else {
                Duration::from_secs(3600)
            };
            (ready, fresh, requeue)
        }
        Err((reason, why)) => {
            let fresh = Verdict::failed("Fresh", reason, why.clone());
            let ready = match &last_good {
                Some(good) => Verdict::ok(
                    "Ready",
                    "StaleMaterial",
                    format!(
                        "generation {generation} failed to load ({why}); the webhook keeps using \
                         the material of generation {} loaded earlier",
                        good.generation
                    ),
                ),
                None => Verdict::failed(
                    "Ready",
                    reason,
                    format!("generation {generation} failed to load: {why}"),
                ),
            };
            (ready, fresh, RETRY)
        }
    };
    let previous = tr
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let observed = tr.status.as_ref().and_then(|s| s.observed_generation);
    let changed = status::changed(previous, &ready, generation)
        || status::changed(previous, &fresh, generation);
    if changed || observed != Some(generation) {
        let conditions = status::conditions(previous, &[ready.clone(), fresh.clone()], generation);
        status::apply_status(
            &ctx,
            tr.as_ref(),
            serde_json::json!({"observedGeneration": generation, "conditions": conditions}),
        )
        .await?;
        let event = if fresh.ok { &ready } else { &fresh };
        status::event(&ctx, tr.as_ref(), event).await;
    }
    Ok(Action::requeue(requeue))
}

/// What to do after a failed reconcile: count it and retry soon.
pub fn error_policy(_tr: Arc<TrustRoot>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(CONTROLLER, error.metric_label());
    if matches!(error, Error::NotLeader(_)) {
        return Action::await_change();
    }
    tracing::warn!(%error, "TrustRoot reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

/// Runs the TrustRoot controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (reader, writer) = reflector::store();
    let prune_ctx = ctx.clone();
    let prune_reader = reader.clone();
    let objects = reflector::reflector(
        writer,
        watcher(
            Api::<TrustRoot>::all(ctx.client.clone()),
            watcher::Config::default(),
        ),
    )
    .and_then(move |event| {
        let ctx = prune_ctx.clone();
        let reader = prune_reader.clone();
        async move {
            prune(&ctx, &reader, &event).await;
            Ok(event)
        }
    })
    .default_backoff()
    .applied_objects();
    Controller::for_stream(objects, reader)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "trust root controller event");
            }
        })
        .await;
}

async fn prune(ctx: &Context, reader: &Store<TrustRoot>, event: &watcher::Event<TrustRoot>) {
    if ctx.ensure_leader().is_err() {
        return;
    }
    let result = match event {
        watcher::Event::Delete(tr) => {
            ctx.metrics.trust_root_removed(&tr.name_any());
            ctx.publisher.remove_trust_root(&tr.name_any()).await
        }
        watcher::Event::InitDone => {
            let live: BTreeSet<String> = reader.state().iter().map(|t| t.name_any()).collect();
            ctx.publisher.retain_trust_roots(&live).await
        }
        _ => return,
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "could not unpublish deleted trust roots; retried on the next change");
    }
}
