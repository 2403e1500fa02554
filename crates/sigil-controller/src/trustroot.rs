//! The TrustRoot reconciler: turns `sigstoreKeys` into `trusted_root.json`,
//! takes a `trustedRoot` as it is (inline or from a ConfigMap, re-read at
//! each refresh), reads `repository` (a serialized TUF repository) and
//! refreshes `remote` (a TUF mirror, its `trustedRootTarget`) periodically, all through [`crate::tuf`] with the state
//! [`crate::tuf_state`] persists, and publishes the result to the snapshot.
//! A failed load or refresh publishes nothing new: the snapshot keeps the
//! last good material, `Ready` stays as it was when there is one, and
//! `Fresh=False` says why the refresh failed (`MetadataExpired` for a
//! freeze, `Rollback` for a mirror serving older metadata than sigil already
//! verified, `MirrorUnreachable`, `LoadFailed`).
//!
//! A TrustRoot annotated `policy.sigil.dev/default-trust-root: "true"` asks
//! to be the cluster's default trust root; its `Default` condition says
//! whether it is (a second marked one is refused with reason `Conflict`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use sigil_api::snapshot::SnapshotTrustRoot;
use sigil_api::trustroot::{TrustRoot, TrustedRootSource};
use sigil_compile::compile::validate_trust_root;
use sigil_compile::default_root::{DEFAULT_ANNOTATION, is_marked_default};
use sigil_verifier::trust::parse_rfc3339;
use time::OffsetDateTime;

use crate::context::{Context, TrustChange};
use crate::error::{Error, Result};
use crate::prune::{Published, watch_and_prune};
use crate::publish::DefaultMark;
use crate::sigstore_keys::trusted_root_json;
use crate::status::{self, Verdict};
use crate::tuf::{self, Source, TufError};

/// The controller's name in metrics.
pub const CONTROLLER: &str = "trustroot";
/// The TUF target holding Sigstore's trust root.
pub const TARGET: &str = "trusted_root.json";
/// How soon a failed load is retried.
const RETRY: Duration = Duration::from_secs(60);
/// How soon a TrustRoot refused as a second default asks again.
const RETRY_CONFLICT: Duration = Duration::from_secs(30);

/// The TUF state key of a TrustRoot's repository.
pub fn repository(name: &str) -> String {
    format!("trustroot.{name}")
}

/// Why a TrustRoot's material could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The `Fresh`/`Ready` condition reason.
    pub reason: &'static str,
    /// What failed, naming the mirror or field.
    pub message: String,
}

impl LoadError {
    fn failed(message: impl Into<String>) -> Self {
        Self {
            reason: "LoadFailed",
            message: message.into(),
        }
    }

    fn tuf(what: &str, e: &TufError) -> Self {
        Self {
            reason: match e {
                TufError::Expired { .. } => "MetadataExpired",
                TufError::Rollback { .. } => "Rollback",
                TufError::Fetch { .. } => "MirrorUnreachable",
                _ => "LoadFailed",
            },
            message: format!("{what}: {e}"),
        }
    }
}

/// Loads the trust material of `tr`: the `trusted_root.json` text, or why
/// it could not be loaded. TUF sources start from (and update) the
/// persisted state of the TrustRoot's repository.
pub async fn load(tr: &TrustRoot, ctx: &Context) -> Result<String, LoadError> {
    let name = tr.name_any();
    let (source, root, what, target) = if let Some(keys) = &tr.spec.sigstore_keys {
        return trusted_root_json(keys).map_err(LoadError::failed);
    } else if let Some(given) = &tr.spec.trusted_root {
        return given_trusted_root(given, ctx).await;
    } else if let Some(remote) = &tr.spec.remote {
        (
            Source::http_with_timeout(&remote.mirror, ctx.args.tuf_timeout())
                .map_err(|e| LoadError::tuf(&format!("mirror {}", remote.mirror), &e))?,
            &remote.root,
            format!("mirror {}", remote.mirror),
            remote.trusted_root_target.as_deref().unwrap_or(TARGET),
        )
    } else if let Some(repo) = &tr.spec.repository {
        (
            Source::archive(&repo.mirror_fs, repo.targets.as_deref())
                .map_err(|e| LoadError::failed(format!("spec.repository.mirrorFS: {e}")))?,
            &repo.root,
            "spec.repository".to_owned(),
            TARGET,
        )
    } else {
        return Err(LoadError::failed(
            "exactly one of remote, repository, sigstoreKeys or trustedRoot must be set",
        ));
    };
    let compact: String = root.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let root = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, compact)
        .map_err(|e| LoadError::failed(format!("root: not base64 ({e})")))?;
    let repository = repository(&name);
    // The state of the last update counts only for the same initial root.
    let previous = ctx.tuf.previous(&repository, &root).await;
    let fetched = tuf::fetch_target(
        &source,
        &root,
        previous.as_ref(),
        target,
        OffsetDateTime::now_utc(),
    )
    .await;
    let (bytes, state) = match fetched {
        Ok(ok) => ok,
        Err(e) => {
            ctx.metrics.tuf_failed(&repository, e.reason());
            return Err(LoadError::tuf(&what, &e));
        }
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| LoadError::failed(format!("{what}: {target} is not UTF-8")))?;
    sigil_verifier::trust::TrustedRoot::from_json(&text)
        .map_err(|e| LoadError::failed(format!("{what}: {target}: {e}")))?;
    // Used only once persisted: a restart must not start from before it.
    ctx.tuf
        .record(&repository, &root, &state)
        .await
        .map_err(|e| {
            LoadError::failed(format!(
                "{what}: the verified update could not be persisted: {e}"
            ))
        })?;
    ctx.metrics.tuf_updated(
        &repository,
        OffsetDateTime::now_utc().unix_timestamp(),
        parse_rfc3339(&state.timestamp_expires).map(OffsetDateTime::unix_timestamp),
    );
    Ok(text)
}

/// A `trusted_root.json` given as it is: inline, or read from a ConfigMap in
/// sigil's namespace. Checked by loading it as the webhook will.
async fn given_trusted_root(given: &TrustedRootSource, ctx: &Context) -> Result<String, LoadError> {
    let (text, what) = match (&given.data, &given.config_map_ref) {
        (Some(json), None) => (json.clone(), "spec.trustedRoot.data".to_owned()),
        (None, Some(cm)) => {
            let what = format!(
                "ConfigMap {}/{} (spec.trustedRoot.configMapRef)",
                ctx.args.namespace, cm.name
            );
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.args.namespace);
            let found = api
                .get_opt(&cm.name)
                .await
                .map_err(|e| LoadError::failed(format!("{what} could not be read: {e}")))?;
            let Some(found) = found else {
                return Err(LoadError::failed(format!(
                    "{what} does not exist; create it with the trusted_root.json (kubectl \
                     create configmap {} --from-file=trusted_root.json -n {})",
                    cm.name, ctx.args.namespace
                )));
            };
            let data = found.data.unwrap_or_default();
            let entry = match &cm.key {
                Some(key) => data
                    .get(key)
                    .cloned()
                    .ok_or_else(|| LoadError::failed(format!("{what} has no entry `{key}`")))?,
                None if data.len() == 1 => data.into_values().next().unwrap_or_default(),
                None => {
                    return Err(LoadError::failed(format!(
                        "{what} has {} entries; name the one holding the trusted root in \
                         configMapRef.key",
                        data.len()
                    )));
                }
            };
            (entry, what)
        }
        _ => {
            return Err(LoadError::failed(
                "spec.trustedRoot: set exactly one of data and configMapRef",
            ));
        }
    };
    sigil_verifier::trust::TrustedRoot::from_json(&text)
        .map_err(|e| LoadError::failed(format!("{what}: not a usable trusted_root.json: {e}")))?;
    Ok(text)
}

/// The `Default` condition of a TrustRoot marked default, after the
/// publisher decided about it.
fn default_verdict(mark: &DefaultMark) -> Option<Verdict> {
    match mark {
        DefaultMark::NotMarked => None,
        DefaultMark::Default => Some(Verdict::ok(
            "Default",
            "Default",
            "the cluster's default trust root: authorities without trustRootRef verify against it",
        )),
        DefaultMark::Conflict(other) => Some(Verdict::failed(
            "Default",
            "Conflict",
            format!(
                "annotated {DEFAULT_ANNOTATION}, but TrustRoot {other} is already the default; \
                 remove the annotation from one of them"
            ),
        )),
    }
}

/// Reconciles one TrustRoot.
pub async fn reconcile(tr: Arc<TrustRoot>, ctx: Arc<Context>) -> Result<Action> {
    ctx.ensure_leader()?;
    ctx.metrics.reconciled(CONTROLLER);
    let name = tr.name_any();
    let generation = tr.metadata.generation.unwrap_or_default();
    let marked = is_marked_default(&tr.metadata);
    let refresh = ctx.args.trust_root_refresh();
    let last_good = ctx.publisher.trust_root(&name).await;
    let default_before = ctx.publisher.default_id().await;
    let loaded = match validate_trust_root(&tr.spec) {
        Err(e) => Err(LoadError {
            reason: "Invalid",
            message: e.to_string(),
        }),
        Ok(()) => load(&tr, &ctx).await,
    };
    let now = OffsetDateTime::now_utc();
    let (ready, fresh, mark, requeue) = match loaded {
        Ok(json) => {
            let changed = last_good
                .as_ref()
                .is_none_or(|g| g.trusted_root_json != json);
            let mark = ctx
                .publisher
                .accept_trust_root(SnapshotTrustRoot {
                    name: name.clone(),
                    generation,
                    trusted_root_json: json,
                    default: marked,
                })
                .await?;
            ctx.metrics
                .trust_root_refreshed(&name, now.unix_timestamp());
            if changed {
                // Policies waiting for this trust root can now be accepted.
                let _ = ctx
                    .trust_root_changed
                    .send(TrustChange::TrustRoot(name.clone()));
            }
            let fresh = Verdict::ok("Fresh", "Loaded", "trust material loaded and verified");
            let ready = Verdict::ok(
                "Ready",
                "Loaded",
                format!("generation {generation} loaded and published to the webhook"),
            );
            // Only a mirror or a ConfigMap changes without the object changing.
            let from_config_map = tr
                .spec
                .trusted_root
                .as_ref()
                .is_some_and(|t| t.config_map_ref.is_some());
            let requeue = if tr.spec.remote.is_some() || from_config_map {
                refresh
            } else {
                Duration::from_secs(3600)
            };
            (ready, fresh, mark, requeue)
        }
        Err(LoadError { reason, message }) => {
            let fresh = Verdict::failed("Fresh", reason, message.clone());
            let (ready, mark) = match &last_good {
                Some(good) => (
                    Verdict::ok(
                        "Ready",
                        "StaleMaterial",
                        format!(
                            "generation {generation} failed to load ({message}); the webhook \
                             keeps using the material of generation {} loaded earlier",
                            good.generation
                        ),
                    ),
                    ctx.publisher
                        .mark_trust_root_default(&name, marked)
                        .await?
                        .unwrap_or(DefaultMark::NotMarked),
                ),
                None => (
                    Verdict::failed(
                        "Ready",
                        reason,
                        format!("generation {generation} failed to load: {message}"),
                    ),
                    DefaultMark::NotMarked,
                ),
            };
            (ready, fresh, mark, RETRY)
        }
    };
    if ctx.publisher.default_id().await != default_before {
        let _ = ctx.trust_root_changed.send(TrustChange::Default);
    }
    let mut verdicts = vec![ready.clone(), fresh.clone()];
    let default = match (&mark, marked, ready.ok) {
        (DefaultMark::NotMarked, true, _) => Some(Verdict::failed(
            "Default",
            "NotLoaded",
            "annotated as the default trust root, but its material is not loaded (see Ready); \
             authorities without trustRootRef verify against the previous default",
        )),
        _ => default_verdict(&mark),
    };
    let requeue = match &mark {
        DefaultMark::Conflict(_) => requeue.min(RETRY_CONFLICT),
        _ => requeue,
    };
    verdicts.extend(default.clone());
    let previous = tr
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let observed = tr.status.as_ref().and_then(|s| s.observed_generation);
    let had_default = previous.iter().any(|c| c.type_ == "Default");
    let changed = verdicts
        .iter()
        .any(|v| status::changed(previous, v, generation))
        || had_default != default.is_some();
    if changed || observed != Some(generation) {
        let conditions = status::conditions(previous, &verdicts, generation);
        // A TUF load may have taken long: a replica that lost the Lease
        // meanwhile leaves the status to the new leader.
        ctx.ensure_leader()?;
        status::apply_status(
            &ctx,
            tr.as_ref(),
            serde_json::json!({"observedGeneration": generation, "conditions": conditions}),
        )
        .await?;
        let event = match &default {
            Some(d) if !d.ok => d,
            _ if !fresh.ok => &fresh,
            _ => &ready,
        };
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
    let (reader, objects) = watch_and_prune::<TrustRoot>(&ctx);
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

impl Published for TrustRoot {
    const PLURAL: &'static str = "trust roots";

    async fn unpublish(ctx: &Context, name: &str) -> Result<u64> {
        ctx.metrics.trust_root_removed(name);
        ctx.metrics.tuf_removed(&repository(name));
        let before = ctx.publisher.default_id().await;
        ctx.tuf.forget(&repository(name)).await?;
        let revision = ctx.publisher.remove_trust_root(name).await?;
        if ctx.publisher.default_id().await != before {
            let _ = ctx.trust_root_changed.send(TrustChange::Default);
        }
        Ok(revision)
    }

    async fn retain(ctx: &Context, live: &BTreeSet<String>) -> Result<u64> {
        let before = ctx.publisher.default_id().await;
        ctx.tuf
            .retain(|repo| {
                repo.strip_prefix("trustroot.")
                    .is_none_or(|name| live.contains(name))
            })
            .await?;
        let revision = ctx.publisher.retain_trust_roots(live).await?;
        if ctx.publisher.default_id().await != before {
            let _ = ctx.trust_root_changed.send(TrustChange::Default);
        }
        Ok(revision)
    }
}

#[cfg(test)]
mod tests {

    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde_json::{Value, json};

    use super::*;
    use crate::fixtures::*;

    fn trust_root(name: &str, generation: i64, spec: Value) -> Value {
        json!({
            "apiVersion": "policy.sigil.dev/v1alpha1", "kind": "TrustRoot",
            "metadata": {"name": name, "generation": generation},
            "spec": spec,
        })
    }

    fn condition(api: &FakeApi, name: &str, type_: &str) -> Value {
        let obj = api.get(&trustroot_path(name)).unwrap();
        obj["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == type_)
            .unwrap()
            .clone()
    }

    async fn reconcile_path(api: &FakeApi, ctx: &Arc<Context>, name: &str) -> Result<Action> {
        reconcile(object::<TrustRoot>(api, &trustroot_path(name)), ctx.clone()).await
    }

    fn published(api: &FakeApi, name: &str) -> Option<String> {
        stored_snapshot(api)?
            .trust_roots
            .into_iter()
            .find(|t| t.name == name)
            .map(|t| t.trusted_root_json)
    }

    const PUBLIC_GOOD: &str = sigil_verifier::trust::PUBLIC_GOOD_JSON;

    #[tokio::test]
    async fn sigstore_keys_become_a_trusted_root_the_verifier_loads_and_are_published() {
        let (client, api) = FakeApi::start();
        let (ctx, mut changed, _l) = context(client, true);
        api.put(
            &trustroot_path("own"),
            trust_root("own", 1, json!({"sigstoreKeys": {
                "certificateAuthorities": [{"subject": {"organization": "acme", "commonName": "ca"},
                    "uri": "https://fulcio.acme", "certChain": STANDARD.encode(CA_PEM)}],
                "tLogs": [{"baseURL": "https://rekor.acme", "publicKey": STANDARD.encode(P256_PUB)}],
            }})),
        );

        reconcile_path(&api, &ctx, "own").await.unwrap();

        assert_eq!(condition(&api, "own", "Ready")["status"], "True");
        let json = published(&api, "own").unwrap();
        let root = sigil_verifier::trust::TrustedRoot::from_json(&json).unwrap();
        assert_eq!(root.certificate_authorities.len(), 1);
        assert_eq!(root.tlogs[0].base_url, "https://rekor.acme");
        assert_eq!(
            changed.try_recv().unwrap(),
            TrustChange::TrustRoot("own".into())
        );
        assert_eq!(api.event_notes()[0].0, "Loaded");
    }

    #[tokio::test]
    async fn a_trusted_root_given_inline_is_published_as_it_is() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &trustroot_path("given"),
            trust_root("given", 1, json!({"trustedRoot": {"data": PUBLIC_GOOD}})),
        );
        let action = reconcile_path(&api, &ctx, "given").await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_secs(3600)));
        assert_eq!(condition(&api, "given", "Ready")["status"], "True");
        assert_eq!(published(&api, "given").as_deref(), Some(PUBLIC_GOOD));
    }

    #[tokio::test]
    async fn a_trusted_root_in_a_configmap_is_read_again_at_each_refresh() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &trustroot_path("cm"),
            trust_root(
                "cm",
                1,
                json!({"trustedRoot": {"configMapRef": {"name": "github-root"}}}),
            ),
        );
        // Missing ConfigMap: not Ready, and the message says how to create it.
        reconcile_path(&api, &ctx, "cm").await.unwrap();
        let ready = condition(&api, "cm", "Ready");
        assert_eq!(ready["status"], "False");
        let message = ready["message"].as_str().unwrap();
        assert!(
            message.contains("ConfigMap sigil-system/github-root")
                && message.contains("kubectl create configmap github-root"),
            "{message}"
        );
        assert_eq!(published(&api, "cm"), None);

        api.put(
            &configmap_path("github-root"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "github-root", "namespace": NS},
                "data": {"trusted_root.json": PUBLIC_GOOD}}),
        );
        let action = reconcile_path(&api, &ctx, "cm").await.unwrap();
        assert_eq!(action, Action::requeue(ctx.args.trust_root_refresh()));
        assert_eq!(condition(&api, "cm", "Ready")["status"], "True");
        assert_eq!(published(&api, "cm").as_deref(), Some(PUBLIC_GOOD));

        // A broken document later keeps the last good one in force.
        api.put(
            &configmap_path("github-root"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "github-root", "namespace": NS},
                "data": {"trusted_root.json": "{\"mediaType\": 1}"}}),
        );
        reconcile_path(&api, &ctx, "cm").await.unwrap();
        let fresh = condition(&api, "cm", "Fresh");
        assert_eq!(fresh["status"], "False");
        assert!(
            fresh["message"]
                .as_str()
                .unwrap()
                .contains("not a usable trusted_root.json"),
            "{fresh}"
        );
        assert_eq!(condition(&api, "cm", "Ready")["reason"], "StaleMaterial");
        assert_eq!(published(&api, "cm").as_deref(), Some(PUBLIC_GOOD));
    }

    #[tokio::test]
    async fn a_remote_trust_root_reads_the_target_its_trust_domain_names() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let mut repo = TufRepo::new(PUBLIC_GOOD.as_bytes());
        repo.target_name = "acme.ghe.com.trusted_root.json".into();
        let mirror = serve_mirror(Arc::new(Mutex::new(repo.files()))).await;
        let root = STANDARD.encode(repo.root());
        api.put(
            &trustroot_path("ghe"),
            trust_root(
                "ghe",
                1,
                json!({"remote": {"mirror": mirror, "root": root,
                    "trustedRootTarget": "acme.ghe.com.trusted_root.json"}}),
            ),
        );
        reconcile_path(&api, &ctx, "ghe").await.unwrap();
        assert_eq!(published(&api, "ghe").as_deref(), Some(PUBLIC_GOOD));

        // Without the target name the default target is not in that repository.
        api.put(
            &trustroot_path("plain"),
            trust_root(
                "plain",
                1,
                json!({"remote": {"mirror": mirror, "root": root}}),
            ),
        );
        reconcile_path(&api, &ctx, "plain").await.unwrap();
        let ready = condition(&api, "plain", "Ready");
        assert_eq!(ready["status"], "False");
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("trusted_root.json"),
            "{ready}"
        );
    }

    #[tokio::test]
    async fn a_remote_trust_root_is_verified_through_tuf_and_a_failed_refresh_keeps_the_last_root()
    {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let repo = TufRepo::new(PUBLIC_GOOD.as_bytes());
        let files = Arc::new(Mutex::new(repo.files()));
        let mirror = serve_mirror(files.clone()).await;
        api.put(
            &trustroot_path("remote"),
            trust_root(
                "remote",
                1,
                json!({"remote": {"mirror": mirror, "root": STANDARD.encode(repo.root())}}),
            ),
        );
        let action = reconcile_path(&api, &ctx, "remote").await.unwrap();
        assert_eq!(action, Action::requeue(ctx.args.trust_root_refresh()));
        assert_eq!(published(&api, "remote").as_deref(), Some(PUBLIC_GOOD));
        assert_eq!(condition(&api, "remote", "Fresh")["status"], "True");

        // The mirror now serves a timestamp that expired.
        let mut stale = TufRepo::new(b"{}");
        stale.expires = "2021-01-01T00:00:00Z".into();
        let timestamp = stale.files()["timestamp.json"].clone();
        files
            .lock()
            .unwrap()
            .insert("timestamp.json".into(), timestamp);
        let action = reconcile_path(&api, &ctx, "remote").await.unwrap();

        assert_eq!(action, Action::requeue(RETRY));
        assert_eq!(published(&api, "remote").as_deref(), Some(PUBLIC_GOOD));
        let fresh = condition(&api, "remote", "Fresh");
        assert_eq!(fresh["status"], "False");
        assert_eq!(fresh["reason"], "MetadataExpired");
        assert!(
            fresh["message"]
                .as_str()
                .unwrap()
                .contains("timestamp metadata expired"),
            "{fresh}"
        );
        let ready = condition(&api, "remote", "Ready");
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], "StaleMaterial");
        assert!(
            api.event_notes()
                .iter()
                .any(|(reason, note)| reason == "MetadataExpired" && note.contains("expired"))
        );
    }

    #[tokio::test]
    async fn an_unreachable_mirror_on_first_load_gives_ready_false_and_publishes_nothing() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let repo = TufRepo::new(PUBLIC_GOOD.as_bytes());
        let mirror = serve_mirror(Arc::new(Mutex::new(BTreeMap::new()))).await;
        api.put(
            &trustroot_path("r"),
            trust_root(
                "r",
                1,
                json!({"remote": {"mirror": mirror, "root": STANDARD.encode(repo.root())}}),
            ),
        );

        reconcile_path(&api, &ctx, "r").await.unwrap();

        let ready = condition(&api, "r", "Ready");
        assert_eq!(ready["status"], "False");
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("timestamp.json not found"),
            "{ready}"
        );
        assert!(published(&api, "r").is_none());
    }

    #[tokio::test]
    async fn a_serialized_repository_is_read_from_its_archive() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let repo = TufRepo::new(PUBLIC_GOOD.as_bytes());
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for (path, data) in repo.files() {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            tar.append_data(&mut header, format!("repository/{path}"), data.as_slice())
                .unwrap();
        }
        let tgz = tar.into_inner().unwrap().finish().unwrap();
        api.put(
            &trustroot_path("airgap"),
            trust_root(
                "airgap",
                1,
                json!({"repository": {
                "root": STANDARD.encode(repo.root()), "mirrorFS": STANDARD.encode(tgz)}}),
            ),
        );

        reconcile_path(&api, &ctx, "airgap").await.unwrap();

        assert_eq!(
            condition(&api, "airgap", "Ready")["status"],
            "True",
            "{}",
            condition(&api, "airgap", "Ready")
        );
        assert_eq!(published(&api, "airgap").as_deref(), Some(PUBLIC_GOOD));
    }

    #[tokio::test]
    async fn an_invalid_trust_root_is_not_published() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &trustroot_path("bad"),
            trust_root(
                "bad",
                1,
                json!({"sigstoreKeys": {"tLogs": [{"baseURL": "https://r", "publicKey": "%%%"}]}}),
            ),
        );

        reconcile_path(&api, &ctx, "bad").await.unwrap();

        let ready = condition(&api, "bad", "Ready");
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("False"), Some("Invalid"))
        );
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("spec.sigstoreKeys.tLogs[0].publicKey")
        );
        assert!(published(&api, "bad").is_none());
    }

    #[tokio::test]
    async fn deleted_trust_roots_are_unpublished_on_delete_and_after_the_initial_list() {
        use kube::runtime::reflector;
        use kube::runtime::watcher::Event;

        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        for name in ["a", "b", "c"] {
            api.put(
                &trustroot_path(name),
                trust_root(name, 1, json!({"sigstoreKeys": {
                    "tLogs": [{"baseURL": "https://rekor.acme", "publicKey": STANDARD.encode(P256_PUB)}],
                }})),
            );
            reconcile_path(&api, &ctx, name).await.unwrap();
        }
        let (reader, mut writer) = reflector::store::<TrustRoot>();
        writer.apply_watcher_event(&Event::Apply(
            (*object::<TrustRoot>(&api, &trustroot_path("b"))).clone(),
        ));

        let deleted = (*object::<TrustRoot>(&api, &trustroot_path("a"))).clone();
        crate::prune::prune(&ctx, &reader, &Event::Delete(deleted)).await;
        assert!(published(&api, "a").is_none());
        assert!(published(&api, "c").is_some());

        crate::prune::prune(&ctx, &reader, &Event::InitDone).await;
        assert!(published(&api, "b").is_some());
        assert!(published(&api, "c").is_none());
    }

    #[tokio::test]
    async fn after_a_restart_a_remote_trust_roots_mirror_cannot_roll_back_its_timestamp() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client.clone(), true);
        let mut repo = TufRepo::new(PUBLIC_GOOD.as_bytes());
        repo.timestamp_version = 5;
        let files = Arc::new(Mutex::new(repo.files()));
        let mirror = serve_mirror(files.clone()).await;
        api.put(
            &trustroot_path("remote"),
            trust_root(
                "remote",
                1,
                json!({"remote": {"mirror": mirror, "root": STANDARD.encode(repo.root())}}),
            ),
        );
        reconcile_path(&api, &ctx, "remote").await.unwrap();
        assert_eq!(condition(&api, "remote", "Fresh")["status"], "True");

        repo.timestamp_version = 4;
        *files.lock().unwrap() = repo.files();
        let (restarted, _rx2, _l2) = context(client, true);
        restarted.publisher.recover().await.unwrap();
        assert_eq!(restarted.tuf.recover().await.unwrap(), 1);
        reconcile_path(&api, &restarted, "remote").await.unwrap();

        let fresh = condition(&api, "remote", "Fresh");
        assert_eq!(
            (fresh["status"].as_str(), fresh["reason"].as_str()),
            (Some("False"), Some("Rollback")),
            "{fresh}"
        );
        assert!(
            fresh["message"]
                .as_str()
                .unwrap()
                .contains("timestamp version 4 is lower than the already trusted 5"),
            "{fresh}"
        );
        assert_eq!(
            condition(&api, "remote", "Ready")["reason"],
            "StaleMaterial"
        );
        assert_eq!(published(&api, "remote").as_deref(), Some(PUBLIC_GOOD));
    }

    fn keys_spec(fulcio: &str, rekor: &str) -> Value {
        json!({"sigstoreKeys": {
            "certificateAuthorities": [{"subject": {"organization": "acme", "commonName": "ca"},
                "uri": fulcio, "certChain": STANDARD.encode(CA_PEM)}],
            "tLogs": [{"baseURL": rekor, "publicKey": STANDARD.encode(P256_PUB)}],
        }})
    }

    fn marked(name: &str, spec: Value) -> Value {
        let mut tr = trust_root(name, 1, spec);
        tr["metadata"]["annotations"] =
            json!({sigil_compile::default_root::DEFAULT_ANNOTATION: "true"});
        tr
    }

    fn default_of(api: &FakeApi) -> Option<String> {
        stored_snapshot(api)?
            .default_trust_root()
            .map(|t| t.name.clone())
    }

    #[tokio::test]
    async fn an_annotated_trust_root_becomes_the_default_and_a_second_one_is_refused_as_a_conflict()
    {
        let (client, api) = FakeApi::start();
        let (ctx, mut changes, _l) = context(client, true);
        let private = keys_spec(
            "http://fulcio.fulcio-system.svc",
            "http://rekor.rekor-system.svc",
        );
        api.put(&trustroot_path("corp"), marked("corp", private.clone()));
        api.put(&trustroot_path("other"), marked("other", private));

        reconcile_path(&api, &ctx, "corp").await.unwrap();
        let action = reconcile_path(&api, &ctx, "other").await.unwrap();

        assert_eq!(default_of(&api).as_deref(), Some("corp"));
        let corp = condition(&api, "corp", "Default");
        assert_eq!(
            (corp["status"].as_str(), corp["reason"].as_str()),
            (Some("True"), Some("Default"))
        );
        let other = condition(&api, "other", "Default");
        assert_eq!(
            (other["status"].as_str(), other["reason"].as_str()),
            (Some("False"), Some("Conflict"))
        );
        assert!(
            other["message"]
                .as_str()
                .unwrap()
                .contains("TrustRoot corp is already the default")
        );
        assert_eq!(action, Action::requeue(RETRY_CONFLICT));
        // Both loaded (policies may still name `other`); the default changed once.
        assert!(published(&api, "other").is_some());
        let received: Vec<TrustChange> = std::iter::from_fn(|| changes.try_recv().ok()).collect();
        assert_eq!(
            received
                .iter()
                .filter(|c| **c == TrustChange::Default)
                .count(),
            1,
            "{received:?}"
        );
        let d = ctx.publisher.default_in_force().await;
        assert_eq!(d.trust_root.as_deref(), Some("corp"));
        assert_eq!(d.root.tlogs[0].base_url, "http://rekor.rekor-system.svc");
    }

    #[tokio::test]
    async fn unmarking_or_deleting_the_default_trust_root_gives_the_default_back_to_the_builtin_root()
     {
        let (client, api) = FakeApi::start();
        let (ctx, mut changes, _l) = context(client, true);
        let spec = keys_spec("https://fulcio.corp", "https://rekor.corp");
        api.put(&trustroot_path("corp"), marked("corp", spec.clone()));
        reconcile_path(&api, &ctx, "corp").await.unwrap();
        assert_eq!(default_of(&api).as_deref(), Some("corp"));
        while changes.try_recv().is_ok() {}

        // The annotation is removed: the TrustRoot stays, as an ordinary one.
        let mut obj = api.get(&trustroot_path("corp")).unwrap();
        obj["metadata"]["annotations"] = json!({});
        api.put(&trustroot_path("corp"), obj);
        reconcile_path(&api, &ctx, "corp").await.unwrap();
        assert_eq!(default_of(&api), None);
        assert!(published(&api, "corp").is_some());
        assert_eq!(changes.try_recv().unwrap(), TrustChange::Default);
        let status = api.get(&trustroot_path("corp")).unwrap()["status"]["conditions"].clone();
        assert!(
            status
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["type"] != "Default"),
            "{status}"
        );

        // Marked again, then deleted.
        api.put(&trustroot_path("corp"), marked("corp", spec));
        reconcile_path(&api, &ctx, "corp").await.unwrap();
        assert_eq!(default_of(&api).as_deref(), Some("corp"));
        while changes.try_recv().is_ok() {}
        <TrustRoot as crate::prune::Published>::unpublish(&ctx, "corp")
            .await
            .unwrap();
        assert_eq!(default_of(&api), None);
        assert_eq!(changes.try_recv().unwrap(), TrustChange::Default);
        assert_eq!(ctx.publisher.default_in_force().await.trust_root, None);
    }
}
