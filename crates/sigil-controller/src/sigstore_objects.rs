//! policy-controller's own objects, served as they are
//! (`--serve-policy-controller-objects`, the chart's `policyController.serve`).
//!
//! Each `policy.sigstore.dev` ClusterImagePolicy and TrustRoot is converted
//! by the same code as `sigil policy convert`
//! ([`sigil_compile::convert::convert_document`]: the same changes that keep
//! policy-controller's verdicts) and written as the `policy.sigil.dev`
//! object of the same name, labelled [`CONVERTED_LABEL`] and owned by its
//! source. When the source is deleted, this reconciler deletes its copy
//! itself (on the delete event, and once its watch has listed every source,
//! for deletions while the controller was down) rather than leave it
//! enforced until the API server's garbage collector gets to it, which can
//! take long: the collector waits for its discovery of every API, and an
//! unavailable one stalls it. sigil's own reconcilers then compile and publish it like any
//! other, and this reconciler copies their verdict back: the source's
//! `Ready` condition says whether sigil enforces it, and `Converted` what
//! the conversion changed and where verdicts still differ from
//! policy-controller's (also an Event, so `kubectl describe` shows it).
//!
//! Three refusals, each with its reason on the source object:
//! - while policy-controller's own webhook configuration
//!   ([`sigil_api::sigstore::WEBHOOK_CONFIGURATION`]) exists, nothing is
//!   converted and the converted objects are withdrawn: two enforcers of the
//!   same policies would give two answers, and policy-controller's includes
//!   defaults sigil does not share;
//! - a `policy.sigil.dev` object of the same name that sigil did not convert
//!   is never overwritten;
//! - a conversion that the API server's validation of sigil's types refuses
//!   (reason `Invalid`) is not retried until the source changes: its status
//!   carries the API server's message, which names the field.
//!
//! With the mode off, [`withdraw_all`] deletes every converted object, so
//! turning it off stops enforcing them.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::ClusterResourceScope;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sigil_api::sigstore::{
    GROUP, SigstoreClusterImagePolicy, SigstoreStatus, SigstoreTrustRoot, WEBHOOK_CONFIGURATION,
};
use sigil_api::{ClusterImagePolicy, TrustRoot};
use sigil_compile::convert::convert_document;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::names::MANAGER;
use crate::prune::{Published, watch_and_prune};
use crate::status::{self, Verdict};

/// The controller's name in metrics.
pub const CONTROLLER: &str = "policy-controller-objects";
/// The label on every object converted from a policy-controller one; its
/// value is the source's API group.
pub const CONVERTED_LABEL: &str = "policy.sigil.dev/converted-from";
/// How often a source refused for policy-controller's webhook (or a name
/// taken) is looked at again, besides the watches that notice at once.
const RECHECK: Duration = Duration::from_secs(30);
/// How soon a source whose converted object sigil has not compiled yet is
/// looked at again (its status change also triggers a reconcile).
const PENDING: Duration = Duration::from_secs(5);
/// How often an enforced source is reconciled without a change.
const RESYNC: Duration = Duration::from_secs(3600);

/// A policy-controller kind and the sigil kind it converts to.
pub trait Source:
    Resource<DynamicType = (), Scope = ClusterResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The `policy.sigil.dev` kind it becomes.
    type Converted: Resource<DynamicType = (), Scope = ClusterResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static;

    /// What sigil last wrote on it.
    fn sigstore_status(&self) -> Option<&SigstoreStatus>;

    /// The converted object's `observedGeneration` and conditions.
    fn converted_status(converted: &Self::Converted) -> (Option<i64>, Vec<Condition>);
}

impl Source for SigstoreClusterImagePolicy {
    type Converted = ClusterImagePolicy;

    fn sigstore_status(&self) -> Option<&SigstoreStatus> {
        self.status.as_ref()
    }

    fn converted_status(converted: &ClusterImagePolicy) -> (Option<i64>, Vec<Condition>) {
        converted.status.as_ref().map_or((None, Vec::new()), |s| {
            (s.observed_generation, s.conditions.clone())
        })
    }
}

impl Source for SigstoreTrustRoot {
    type Converted = TrustRoot;

    fn sigstore_status(&self) -> Option<&SigstoreStatus> {
        self.status.as_ref()
    }

    fn converted_status(converted: &TrustRoot) -> (Option<i64>, Vec<Condition>) {
        converted.status.as_ref().map_or((None, Vec::new()), |s| {
            (s.observed_generation, s.conditions.clone())
        })
    }
}

/// Which of policy-controller's webhook configurations exist, if any.
pub async fn policy_controller_webhooks(ctx: &Context) -> Result<Vec<&'static str>> {
    let mut found = Vec::new();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(ctx.client.clone());
    if validating
        .get_opt(WEBHOOK_CONFIGURATION)
        .await
        .map_err(|e| {
            Error::kube(
                "reading policy-controller's ValidatingWebhookConfiguration",
                e,
            )
        })?
        .is_some()
    {
        found.push("ValidatingWebhookConfiguration");
    }
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(ctx.client.clone());
    if mutating
        .get_opt(WEBHOOK_CONFIGURATION)
        .await
        .map_err(|e| {
            Error::kube(
                "reading policy-controller's MutatingWebhookConfiguration",
                e,
            )
        })?
        .is_some()
    {
        found.push("MutatingWebhookConfiguration");
    }
    Ok(found)
}

/// Whether `obj` is one this reconciler converted.
fn is_converted<K: Resource>(obj: &K) -> bool {
    obj.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(CONVERTED_LABEL))
        .is_some_and(|v| v == GROUP)
}

/// The converted form of `source` as sigil writes it: the conversion's
/// `apiVersion`, `kind` and `spec`; only sigil's label and the owner
/// reference as metadata (the source's labels and annotations stay on the
/// source: copying a GitOps tool's tracking label would make it prune the
/// converted object as one it does not know).
fn converted<S: Source>(source: &S) -> Result<(Value, Vec<sigil_compile::verdicts::VerdictNote>)> {
    let name = source.name_any();
    let doc = serde_json::to_value(source)
        .map_err(|e| Error::Convert(format!("{} {name}: {e}", S::kind(&()))))?;
    let (mut out, notes) = convert_document(&doc);
    let owner = source
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Convert(format!("{} {name}: it has no uid", S::kind(&()))))?;
    let metadata = json!({
        "name": name,
        "labels": {CONVERTED_LABEL: GROUP},
        "ownerReferences": [owner],
    });
    match out.as_object_mut() {
        Some(fields) => fields.insert("metadata".into(), metadata),
        None => {
            return Err(Error::Convert(format!(
                "{} {name}: the conversion is not an object",
                S::kind(&())
            )));
        }
    };
    Ok((out, notes))
}

/// Deletes the converted object named `name` if this reconciler wrote it.
async fn withdraw<K>(ctx: &Context, name: &str) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = ClusterResourceScope> + Clone + Debug + DeserializeOwned,
{
    let api: Api<K> = Api::all(ctx.client.clone());
    let existing = api
        .get_opt(name)
        .await
        .map_err(|e| Error::kube(format!("reading {} {name}", K::kind(&())), e))?;
    if !existing.as_ref().is_some_and(is_converted) {
        return Ok(false);
    }
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        // Gone meanwhile (the garbage collector, another withdrawal).
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(Error::kube(
            format!("deleting converted {} {name}", K::kind(&())),
            e,
        )),
    }
}

/// Deletes every converted `K` whose name is not in `live` (the sources
/// that exist); returns how many.
async fn withdraw_orphans<K>(ctx: &Context, live: &BTreeSet<String>) -> Result<u64>
where
    K: Resource<DynamicType = (), Scope = ClusterResourceScope> + Clone + Debug + DeserializeOwned,
{
    let api: Api<K> = Api::all(ctx.client.clone());
    let params = ListParams::default().labels(&format!("{CONVERTED_LABEL}={GROUP}"));
    let list = api
        .list(&params)
        .await
        .map_err(|e| Error::kube(format!("listing converted {}s", K::kind(&())), e))?;
    let mut withdrawn = 0;
    for obj in list.items.iter().filter(|o| is_converted(*o)) {
        let name = obj.name_any();
        if !live.contains(&name) && withdraw::<K>(ctx, &name).await? {
            tracing::info!(%name, kind = %K::kind(&()), "converted object withdrawn: its source is gone");
            withdrawn += 1;
        }
    }
    Ok(withdrawn)
}

/// A source deleted, or not there when the watch listed them all: its
/// converted object goes too (see the module's documentation).
macro_rules! withdraws_with_its_source {
    ($source:ty, $plural:literal) => {
        impl Published for $source {
            const PLURAL: &'static str = $plural;

            async fn unpublish(ctx: &Context, name: &str) -> Result<u64> {
                let kind = <$source as Source>::Converted::kind(&());
                let withdrawn =
                    withdraw::<<$source as Source>::Converted>(ctx, name).await?;
                if withdrawn {
                    tracing::info!(%name, %kind, "converted object withdrawn: its source was deleted");
                }
                Ok(u64::from(withdrawn))
            }

            async fn retain(ctx: &Context, live: &BTreeSet<String>) -> Result<u64> {
                withdraw_orphans::<<$source as Source>::Converted>(ctx, live).await
            }
        }
    };
}
withdraws_with_its_source!(
    SigstoreClusterImagePolicy,
    "copies of policy-controller's ClusterImagePolicies"
);
withdraws_with_its_source!(
    SigstoreTrustRoot,
    "copies of policy-controller's TrustRoots"
);

/// Deletes every converted object of both kinds (the mode is off); returns
/// how many.
pub async fn withdraw_all(ctx: &Context) -> Result<usize> {
    async fn kind<K>(ctx: &Context) -> Result<usize>
    where
        K: Resource<DynamicType = (), Scope = ClusterResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        let api: Api<K> = Api::all(ctx.client.clone());
        let params = ListParams::default().labels(&format!("{CONVERTED_LABEL}={GROUP}"));
        let list = api
            .list(&params)
            .await
            .map_err(|e| Error::kube(format!("listing converted {}s", K::kind(&())), e))?;
        let mut n = 0;
        for obj in list.items.iter().filter(|o| is_converted(*o)) {
            let name = obj.name_any();
            api.delete(&name, &DeleteParams::default())
                .await
                .map_err(|e| {
                    Error::kube(format!("deleting converted {} {name}", K::kind(&())), e)
                })?;
            n += 1;
        }
        Ok(n)
    }
    Ok(kind::<ClusterImagePolicy>(ctx).await? + kind::<TrustRoot>(ctx).await?)
}

/// What the source's `Ready` condition says, given the converted object's
/// status.
fn ready_from<S: Source>(source_kind: &str, name: &str, converted: &S::Converted) -> Verdict {
    let (observed, conditions) = S::converted_status(converted);
    let generation = converted.meta().generation;
    let kind = S::Converted::kind(&());
    let ready = conditions.iter().find(|c| c.type_ == "Ready");
    match ready {
        Some(c) if observed.is_some() && observed == generation => {
            let message = format!(
                "enforced by sigil as policy.sigil.dev {kind} {name}: {}",
                c.message
            );
            if c.status == "True" {
                Verdict::ok("Ready", "Enforced", message)
            } else {
                Verdict::failed(
                    "Ready",
                    "NotEnforced",
                    format!(
                        "sigil converted this {source_kind} but does not enforce it; its \
                         policy.sigil.dev {kind} {name} says: {} ({})",
                        c.message, c.reason
                    ),
                )
            }
        }
        _ => Verdict::failed(
            "Ready",
            "Converting",
            format!(
                "converted to policy.sigil.dev {kind} {name}; waiting for sigil's controller to \
                 compile it"
            ),
        ),
    }
}

/// What the source's `Converted` condition says.
fn converted_verdict(notes: &[sigil_compile::verdicts::VerdictNote]) -> Verdict {
    let kept: Vec<String> = notes
        .iter()
        .filter(|n| n.kept)
        .map(ToString::to_string)
        .collect();
    let differ: Vec<String> = notes
        .iter()
        .filter(|n| !n.kept)
        .map(ToString::to_string)
        .collect();
    if !differ.is_empty() {
        // The object is still converted: True, with a reason that says
        // verdicts may differ.
        let mut message = format!(
            "verdicts may differ from policy-controller's: {}",
            differ.join("; ")
        );
        if !kept.is_empty() {
            message.push_str(&format!("; changed to keep them: {}", kept.join("; ")));
        }
        return Verdict::ok("Converted", "VerdictsDiffer", message);
    }
    if kept.is_empty() {
        Verdict::ok(
            "Converted",
            "Unchanged",
            "converted as it is: sigil gives the verdicts policy-controller gives",
        )
    } else {
        Verdict::ok(
            "Converted",
            "VerdictsKept",
            format!(
                "changed to keep policy-controller's verdicts: {}",
                kept.join("; ")
            ),
        )
    }
}

/// Reconciles one policy-controller object.
pub async fn reconcile<S: Source>(source: Arc<S>, ctx: Arc<Context>) -> Result<Action> {
    ctx.ensure_leader()?;
    ctx.metrics.reconciled(CONTROLLER);
    let name = source.name_any();
    let source_kind = S::kind(&()).into_owned();
    let target_kind = S::Converted::kind(&()).into_owned();

    let present = policy_controller_webhooks(&ctx).await?;
    if !present.is_empty() {
        if withdraw::<S::Converted>(&ctx, &name).await? {
            tracing::info!(%name, kind = %target_kind, "converted object withdrawn: policy-controller is installed");
        }
        let verdict = Verdict::failed(
            "Ready",
            "PolicyControllerPresent",
            format!(
                "policy-controller's {} {WEBHOOK_CONFIGURATION} exists, so policy-controller \
                 enforces this {source_kind}; sigil does not enforce it as well (two enforcers \
                 would answer differently). Uninstall policy-controller, or delete that \
                 configuration, and sigil enforces it as soon as it is gone",
                present.join(" and "),
            ),
        );
        return finish(&*source, &ctx, &[verdict], RECHECK).await;
    }

    let api: Api<S::Converted> = Api::all(ctx.client.clone());
    let existing = api
        .get_opt(&name)
        .await
        .map_err(|e| Error::kube(format!("reading {target_kind} {name}"), e))?;
    if existing.as_ref().is_some_and(|o| !is_converted(o)) {
        let verdict = Verdict::failed(
            "Ready",
            "NameTaken",
            format!(
                "a policy.sigil.dev {target_kind} named {name} exists and was not converted from \
                 this object; sigil enforces that one. Rename one of the two"
            ),
        );
        return finish(&*source, &ctx, &[verdict], RECHECK).await;
    }

    let refused = serde_json::to_value(&*source)
        .ok()
        .and_then(|doc| sigil_compile::verdicts::refusal(&doc));
    if let Some(why) = refused {
        let kept = if existing.is_some() {
            "the copy of its previous generation stays enforced"
        } else {
            "sigil does not enforce it"
        };
        let verdict = Verdict::failed(
            "Ready",
            "Invalid",
            format!("it cannot be converted to a policy.sigil.dev {target_kind}: {why}; {kept}"),
        );
        return finish(&*source, &ctx, &[verdict], RESYNC).await;
    }

    let (doc, notes) = converted(&*source)?;
    let written = match api
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(doc),
        )
        .await
    {
        Ok(written) => written,
        // The API server's validation of sigil's types refused the copy:
        // the source says why, and nothing changes until it does.
        Err(kube::Error::Api(status)) if status.code == 422 => {
            let kept = if existing.is_some() {
                "the copy of its previous generation stays enforced"
            } else {
                "sigil does not enforce it"
            };
            let verdict = Verdict::failed(
                "Ready",
                "Invalid",
                format!(
                    "its conversion to a policy.sigil.dev {target_kind} was refused by the API \
                     server: {}; {kept}. Fix the field it names in this object",
                    status.message
                ),
            );
            return finish(&*source, &ctx, &[verdict], RESYNC).await;
        }
        Err(e) => {
            return Err(Error::kube(
                format!("writing converted {target_kind} {name}"),
                e,
            ));
        }
    };
    let ready = ready_from::<S>(&source_kind, &name, &written);
    let requeue = if ready.reason == "Converting" {
        PENDING
    } else {
        RESYNC
    };
    let mut verdicts = vec![ready];
    if source_kind == "ClusterImagePolicy" {
        verdicts.push(converted_verdict(&notes));
    }
    finish(&*source, &ctx, &verdicts, requeue).await
}

/// Writes the source's status when any verdict changed, with an Event for
/// each that did.
async fn finish<S: Source>(
    source: &S,
    ctx: &Context,
    verdicts: &[Verdict],
    requeue: Duration,
) -> Result<Action> {
    let generation = source.meta().generation.unwrap_or_default();
    let previous = source
        .sigstore_status()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let observed = source.sigstore_status().and_then(|s| s.observed_generation);
    let changed: Vec<&Verdict> = verdicts
        .iter()
        .filter(|v| status::changed(previous, v, generation))
        .collect();
    if !changed.is_empty() || observed != Some(generation) {
        let conditions = status::conditions(previous, verdicts, generation);
        status::apply_status(
            ctx,
            source,
            json!({"observedGeneration": generation, "conditions": conditions}),
        )
        .await?;
        for verdict in changed {
            // A pending compilation is not news.
            if verdict.reason != "Converting" {
                status::event(ctx, source, verdict).await;
            }
        }
    }
    Ok(Action::requeue(requeue))
}

/// What to do after a failed reconcile: count it and retry soon.
pub fn error_policy<S: Source>(_source: Arc<S>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(CONTROLLER, error.metric_label());
    if matches!(error, Error::NotLeader(_)) {
        return Action::await_change();
    }
    tracing::warn!(%error, kind = %S::kind(&()), "policy-controller object reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

/// Maps any change of a `K` to every source in `store`.
fn every_source<S: Source, K>(store: Store<S>) -> impl Fn(K) -> Vec<ObjectRef<S>> {
    move |_| {
        store
            .state()
            .iter()
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect()
    }
}

/// Runs one kind's reconciler until `shutdown` resolves: its sources, and
/// the converted objects they own (their status changes are copied back).
async fn run_kind<S: Source + Published>(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let converted = watcher::Config::default().labels(&format!("{CONVERTED_LABEL}={GROUP}"));
    // Sources deleted take their converted objects with them.
    let (reader, sources) = watch_and_prune::<S>(&ctx);
    let controller = Controller::for_stream(sources, reader);
    // policy-controller's webhook configurations appearing or going away
    // re-reconciles every source: sigil steps back, or takes over.
    let by_name =
        || watcher::Config::default().fields(&format!("metadata.name={WEBHOOK_CONFIGURATION}"));
    let store = controller.store();
    controller
        .owns(Api::<S::Converted>::all(client.clone()), converted)
        .watches(
            Api::<ValidatingWebhookConfiguration>::all(client.clone()),
            by_name(),
            every_source::<S, ValidatingWebhookConfiguration>(store.clone()),
        )
        .watches(
            Api::<MutatingWebhookConfiguration>::all(client),
            by_name(),
            every_source::<S, MutatingWebhookConfiguration>(store),
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile::<S>, error_policy::<S>, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "policy-controller object event");
            }
        })
        .await;
}

/// Serves policy-controller's objects when the mode is on, or withdraws
/// every converted object when it is off; runs until `shutdown` resolves.
pub async fn run<F, Fut>(ctx: Arc<Context>, shutdown: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    if !ctx.args.serve_policy_controller_objects {
        match withdraw_all(&ctx).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                withdrawn = n,
                "objects converted from policy-controller's withdrawn: serving them is off"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "could not withdraw objects converted from policy-controller's")
            }
        }
        return;
    }
    tokio::join!(
        run_kind::<SigstoreTrustRoot>(ctx.clone(), shutdown()),
        run_kind::<SigstoreClusterImagePolicy>(ctx.clone(), shutdown()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::*;

    fn source_path(plural: &str, name: &str) -> String {
        format!("/apis/policy.sigstore.dev/v1alpha1/{plural}/{name}")
    }

    fn source(kind: &str, name: &str, generation: i64, spec: Value) -> Value {
        json!({
            "apiVersion": "policy.sigstore.dev/v1alpha1",
            "kind": kind,
            "metadata": {
                "name": name, "generation": generation, "uid": format!("src-{name}"),
                "labels": {"app.kubernetes.io/instance": "trust-policies"},
                "annotations": {"meta.helm.sh/release-name": "trust-policies"}
            },
            "spec": spec,
        })
    }

    fn key_policy() -> Value {
        json!({
            "images": [{"glob": "registry.example/**"}],
            "authorities": [{"key": {"data": P256_PUB}}]
        })
    }

    async fn reconcile_cip(api: &FakeApi, ctx: &Arc<Context>, name: &str) -> Result<Action> {
        let obj: Arc<SigstoreClusterImagePolicy> =
            object(api, &source_path("clusterimagepolicies", name));
        reconcile(obj, ctx.clone()).await
    }

    fn condition(api: &FakeApi, path: &str, type_: &str) -> Value {
        api.get(path).unwrap()["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == type_)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// What sigil's policy reconciler writes on the converted policy `name`
    /// (generation 1): its `Ready` condition as (status, reason, message).
    fn judge_converted(api: &FakeApi, name: &str, ready: (&str, &str, &str)) {
        let mut judged = api.get(&cip_path(name)).unwrap();
        judged["metadata"]["generation"] = json!(1);
        judged["status"] = json!({"observedGeneration": 1, "conditions": [{
            "type": "Ready", "status": ready.0, "reason": ready.1, "message": ready.2,
            "lastTransitionTime": "2026-12-01T00:00:00Z"
        }]});
        api.put(&cip_path(name), judged);
    }

    #[tokio::test]
    async fn a_policy_is_converted_owned_by_its_source_and_its_verdict_is_copied_back() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |a| a.serve_policy_controller_objects = true);
        let path = source_path("clusterimagepolicies", "p");
        api.put(&path, source("ClusterImagePolicy", "p", 2, key_policy()));

        reconcile_cip(&api, &ctx, "p").await.unwrap();
        let written = api.get(&cip_path("p")).expect("converted policy written");
        assert_eq!(written["apiVersion"], "policy.sigil.dev/v1alpha1");
        assert_eq!(written["spec"]["authorities"][0]["key"]["data"], P256_PUB);
        assert_eq!(written["metadata"]["labels"][CONVERTED_LABEL], GROUP);
        assert!(
            written["metadata"]["labels"]
                .get("app.kubernetes.io/instance")
                .is_none(),
            "a GitOps tool's tracking label stays on the source"
        );
        assert!(written["metadata"].get("annotations").is_none());
        let owner = &written["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "ClusterImagePolicy");
        assert_eq!(owner["apiVersion"], "policy.sigstore.dev/v1alpha1");
        assert_eq!(owner["uid"], "src-p");
        assert_eq!(owner["controller"], true);
        let ready = condition(&api, &path, "Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "Converting");

        // sigil's policy reconciler accepts the converted policy...
        judge_converted(
            &api,
            "p",
            (
                "True",
                "Accepted",
                "generation 1 compiled and is enforced by the webhook",
            ),
        );
        reconcile_cip(&api, &ctx, "p").await.unwrap();
        // ... and the source says so.
        let ready = condition(&api, &path, "Ready");
        assert_eq!(ready["status"], "True", "{ready}");
        assert_eq!(ready["reason"], "Enforced");
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("enforced by sigil as policy.sigil.dev ClusterImagePolicy p")
        );
        assert_eq!(ready["observedGeneration"], 2);
        let converted = condition(&api, &path, "Converted");
        assert_eq!(converted["status"], "True");
        assert!(
            api.event_notes()
                .iter()
                .any(|(reason, _)| reason == "Enforced")
        );
    }

    #[tokio::test]
    async fn a_refusal_of_the_converted_policy_is_the_sources_not_ready_with_the_reason() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |a| a.serve_policy_controller_objects = true);
        let path = source_path("clusterimagepolicies", "p");
        api.put(&path, source("ClusterImagePolicy", "p", 1, key_policy()));
        reconcile_cip(&api, &ctx, "p").await.unwrap();
        judge_converted(
            &api,
            "p",
            (
                "False",
                "UnresolvedReference",
                "TrustRoot github not found or not Ready",
            ),
        );
        reconcile_cip(&api, &ctx, "p").await.unwrap();
        let ready = condition(&api, &path, "Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "NotEnforced");
        let message = ready["message"].as_str().unwrap();
        assert!(
            message.contains("TrustRoot github not found or not Ready")
                && message.contains("UnresolvedReference"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_verdict_keeping_change_is_written_in_the_converted_condition() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |a| a.serve_policy_controller_objects = true);
        let path = source_path("clusterimagepolicies", "p");
        // A key in a Secret: policy-controller verifies with sha256 whatever
        // the key, so conversion writes that down (a kept verdict).
        let spec = json!({
            "images": [{"glob": "registry.example/**"}],
            "authorities": [{"key": {"secretRef": {"name": "cosign-pub"}}}]
        });
        api.put(&path, source("ClusterImagePolicy", "p", 1, spec.clone()));
        reconcile_cip(&api, &ctx, "p").await.unwrap();
        let (_, notes) = convert_document(&api.get(&path).unwrap());
        assert!(notes.iter().any(|n| n.kept), "{notes:?}");
        let converted = condition(&api, &path, "Converted");
        assert_eq!(converted["status"], "True");
        let expected = converted_verdict(&notes);
        assert_eq!(converted["reason"], expected.reason);
        for note in &notes {
            assert!(
                converted["message"]
                    .as_str()
                    .unwrap()
                    .contains(&note.to_string()),
                "{converted} lacks {note}"
            );
        }
    }

    #[tokio::test]
    async fn while_policy_controllers_webhook_exists_nothing_is_converted_and_earlier_conversions_are_withdrawn()
     {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |a| a.serve_policy_controller_objects = true);
        let path = source_path("clusterimagepolicies", "p");
        api.put(&path, source("ClusterImagePolicy", "p", 1, key_policy()));
        reconcile_cip(&api, &ctx, "p").await.unwrap();
        assert!(api.get(&cip_path("p")).is_some());

        let webhook = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/policy.sigstore.dev";
        api.put(
            webhook,
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                   "kind": "ValidatingWebhookConfiguration",
                   "metadata": {"name": "policy.sigstore.dev"}}),
        );
        let action = reconcile_cip(&api, &ctx, "p").await.unwrap();
        assert_eq!(action, Action::requeue(RECHECK));
        assert!(
            api.get(&cip_path("p")).is_none(),
            "the converted policy is withdrawn"
        );
        let ready = condition(&api, &path, "Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "PolicyControllerPresent");
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("ValidatingWebhookConfiguration policy.sigstore.dev")
        );
    }

    #[tokio::test]
    async fn a_sigil_object_of_the_same_name_is_never_overwritten() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |a| a.serve_policy_controller_objects = true);
        let own = cip(
            "p",
            1,
            json!({"images": [{"glob": "**"}], "authorities": [{"key": {"data": ED_PUB}}]}),
        );
        api.put(&cip_path("p"), own.clone());
        let path = source_path("clusterimagepolicies", "p");
        api.put(&path, source("ClusterImagePolicy", "p", 1, key_policy()));
        reconcile_cip(&api, &ctx, "p").await.unwrap();
        assert_eq!(
            api.get(&cip_path("p")).unwrap()["spec"],
            own["spec"],
            "sigil's own policy is untouched"
        );
        assert_eq!(condition(&api, &path, "Ready")["reason"], "NameTaken");
    }

    #[tokio::test]
    async fn a_conversion_the_api_server_refuses_is_the_sources_not_ready_with_its_message() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |a| a.serve_policy_controller_objects = true);
        let message = "TrustRoot.policy.sigil.dev \"r\" is invalid: \
                       spec.sigstoreKeys.tLogs[0].hashAlgorithm: Unsupported value: \"md5\"";
        api.refuse(&trustroot_path("r"), message);
        let path = source_path("trustroots", "r");
        api.put(
            &path,
            source(
                "TrustRoot",
                "r",
                1,
                json!({"sigstoreKeys": {"tLogs": [
                    {"baseURL": "https://rekor.example", "hashAlgorithm": "md5", "publicKey": "eA=="}]}}),
            ),
        );
        let obj: Arc<SigstoreTrustRoot> = object(&api, &path);
        let action = reconcile(obj, ctx.clone()).await.unwrap();
        assert_eq!(action, Action::requeue(RESYNC), "no retry loop");
        assert!(api.get(&trustroot_path("r")).is_none());
        let ready = condition(&api, &path, "Ready");
        assert_eq!(
            (&ready["status"], &ready["reason"]),
            (&json!("False"), &json!("Invalid"))
        );
        let text = ready["message"].as_str().unwrap();
        assert!(
            text.contains("refused by the API server")
                && text.contains("hashAlgorithm: Unsupported value"),
            "{text}"
        );
        assert!(text.contains("sigil does not enforce it"), "{text}");
        assert!(
            api.event_notes()
                .iter()
                .any(|(reason, _)| reason == "Invalid"),
            "an Event says it too"
        );
    }

    #[tokio::test]
    async fn a_policy_in_sigils_audit_mode_is_not_converted_and_says_why() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |a| a.serve_policy_controller_objects = true);
        let path = source_path("clusterimagepolicies", "p");
        let mut spec = key_policy();
        spec["mode"] = json!("audit");
        api.put(&path, source("ClusterImagePolicy", "p", 1, spec));
        let action = reconcile_cip(&api, &ctx, "p").await.unwrap();
        assert_eq!(action, Action::requeue(RESYNC), "no retry loop");
        assert!(api.get(&cip_path("p")).is_none(), "nothing is converted");
        let ready = condition(&api, &path, "Ready");
        assert_eq!(
            (&ready["status"], &ready["reason"]),
            (&json!("False"), &json!("Invalid"))
        );
        let text = ready["message"].as_str().unwrap();
        assert!(
            text.contains("spec.mode: `audit` is sigil's extension")
                && text.contains("sigil does not enforce it"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_trust_root_is_converted_with_its_spec_unchanged() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |a| a.serve_policy_controller_objects = true);
        let spec = json!({"remote": {
            "mirror": "https://tuf-repo.github.com",
            "root": "eyJzaWduZWQiOnt9fQ==",
            "trustedRootTarget": "trusted_root.json"
        }});
        let path = source_path("trustroots", "github");
        api.put(&path, source("TrustRoot", "github", 1, spec.clone()));
        let obj: Arc<SigstoreTrustRoot> = object(&api, &path);
        reconcile(obj, ctx.clone()).await.unwrap();
        let written = api.get(&trustroot_path("github")).unwrap();
        assert_eq!(written["kind"], "TrustRoot");
        assert_eq!(written["spec"], spec);
        let ready = condition(&api, &path, "Ready");
        assert_eq!(ready["reason"], "Converting");
        assert!(
            condition(&api, &path, "Converted").is_null(),
            "a trust root has no verdicts to keep"
        );
    }

    #[tokio::test]
    async fn a_deleted_source_takes_its_copy_with_it_without_the_garbage_collector() {
        use kube::runtime::reflector;
        use kube::runtime::watcher::Event;
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        for name in ["gone", "kept", "gone-while-down"] {
            api.put(
                &source_path("clusterimagepolicies", name),
                source("ClusterImagePolicy", name, 1, key_policy()),
            );
            reconcile_cip(&api, &ctx, name).await.unwrap();
            assert!(api.get(&cip_path(name)).is_some(), "{name} converted");
        }
        api.put(&cip_path("own"), cip("own", 1, key_policy()));
        // The watch saw "kept" only: "gone" is deleted now, and
        // "gone-while-down" was deleted while the controller was not running.
        let (reader, mut writer) = reflector::store::<SigstoreClusterImagePolicy>();
        writer.apply_watcher_event(&Event::Apply(
            (*object::<SigstoreClusterImagePolicy>(
                &api,
                &source_path("clusterimagepolicies", "kept"),
            ))
            .clone(),
        ));
        let gone: SigstoreClusterImagePolicy = (*object::<SigstoreClusterImagePolicy>(
            &api,
            &source_path("clusterimagepolicies", "gone"),
        ))
        .clone();
        crate::prune::prune(&ctx, &reader, &Event::Delete(gone)).await;
        assert!(api.get(&cip_path("gone")).is_none(), "withdrawn on delete");
        assert!(api.get(&cip_path("gone-while-down")).is_some());

        crate::prune::prune(&ctx, &reader, &Event::InitDone).await;
        assert!(
            api.get(&cip_path("gone-while-down")).is_none(),
            "withdrawn once every source was listed"
        );
        assert!(api.get(&cip_path("kept")).is_some(), "its source exists");
        assert!(
            api.get(&cip_path("own")).is_some(),
            "sigil's own policy stays"
        );
    }

    #[tokio::test]
    async fn with_the_mode_off_every_converted_object_is_withdrawn_and_nothing_else() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        let mut converted = cip("from-sigstore", 1, key_policy());
        converted["metadata"]["labels"] = json!({CONVERTED_LABEL: GROUP});
        api.put(&cip_path("from-sigstore"), converted);
        api.put(&cip_path("own"), cip("own", 1, key_policy()));
        let mut root = json!({"apiVersion": "policy.sigil.dev/v1alpha1", "kind": "TrustRoot",
            "metadata": {"name": "github", "labels": {CONVERTED_LABEL: GROUP}}, "spec": {}});
        root["metadata"]["generation"] = json!(1);
        api.put(&trustroot_path("github"), root);

        run(ctx, || std::future::ready(())).await;
        assert!(api.get(&cip_path("from-sigstore")).is_none());
        assert!(api.get(&trustroot_path("github")).is_none());
        assert!(
            api.get(&cip_path("own")).is_some(),
            "sigil's own policy stays"
        );
    }
}
