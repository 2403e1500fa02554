//! The WorkloadKind reconciler: decides which WorkloadKinds are in force
//! (each compiled by [`sigil_compile::workload_kind`]; two naming one group
//! and kind are a conflict, the older object keeps it), publishes them in
//! the policy snapshot, adds their kinds to the rules of sigil's mutating
//! and validating webhook configurations, and reports `Ready` on each.
//!
//! Kinds are decided as one set, not object by object, because they
//! conflict with each other and the webhook rules hold all of them.
//!
//! The rules the controller adds are recorded in an annotation of each
//! webhook configuration ([`RULES_ANNOTATION`]): a sync removes what it
//! added before and adds what is in force now, and never touches any other
//! rule (the chart's own), so a deleted WorkloadKind's rule goes and a Helm
//! upgrade that resets the rules is repaired on the watch event it causes.
//! A refused new generation of an accepted WorkloadKind leaves its last
//! accepted spec in force, as a refused policy does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhookConfiguration,
};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use sigil_api::snapshot::SnapshotWorkloadKind;
use sigil_api::workloadkind::{WorkloadKind, WorkloadKindStatus};
use sigil_compile::workload_kind::{CompiledKind, compile_workload_kind};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::resync;
use crate::status::{self, Verdict};

/// The controller's name in metrics.
pub const CONTROLLER: &str = "workloadkind";
/// The annotation on each webhook configuration listing the rules the
/// controller added (JSON), so it removes exactly those and nothing else.
pub const RULES_ANNOTATION: &str = "policy.sigil.dev/workload-kind-rules";
/// How often everything is checked again besides watch events.
const RESYNC: Duration = Duration::from_secs(300);

/// What the reconciler decided for one WorkloadKind object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The object's name.
    pub name: String,
    /// `group/version/Kind` in force for it, if any.
    pub kind: Option<String>,
    /// Its `Ready` condition (before the webhook configurations are synced).
    pub verdict: Verdict,
}

/// The set in force and a decision per object: `objects` in the order
/// they claim kinds (oldest first), `held` what the snapshot holds now.
pub fn decide(
    objects: &[WorkloadKind],
    held: &BTreeMap<String, SnapshotWorkloadKind>,
) -> (Vec<(SnapshotWorkloadKind, CompiledKind)>, Vec<Decision>) {
    let mut in_force: Vec<(SnapshotWorkloadKind, CompiledKind)> = Vec::new();
    let mut decisions = Vec::new();
    for o in objects {
        let name = o.name_any();
        let generation = o.metadata.generation.unwrap_or_default();
        let claimed = |c: &CompiledKind, in_force: &[(SnapshotWorkloadKind, CompiledKind)]| {
            in_force
                .iter()
                .find(|(_, k)| k.group == c.group && k.kind == c.kind)
                .map(|(s, _)| s.name.clone())
        };
        let (entry, verdict) = match compile_workload_kind(&name, &o.spec) {
            Ok(compiled) => match claimed(&compiled, &in_force) {
                Some(other) => (
                    None,
                    Verdict::failed(
                        "Ready",
                        "Conflict",
                        format!(
                            "WorkloadKind {other} already admits {}; delete one of the two",
                            compiled.gvk()
                        ),
                    ),
                ),
                None => {
                    let message = format!(
                        "sigil admits the images of {} ({}) at {}",
                        compiled.gvk(),
                        compiled.resource,
                        locations(&compiled)
                    );
                    let snapshot = SnapshotWorkloadKind {
                        name: name.clone(),
                        generation,
                        spec: o.spec.clone(),
                    };
                    (
                        Some((snapshot, compiled)),
                        Verdict::ok("Ready", "Accepted", message),
                    )
                }
            },
            Err(e) => {
                let previous = held.get(&name).and_then(|h| {
                    compile_workload_kind(&name, &h.spec)
                        .ok()
                        .filter(|c| claimed(c, &in_force).is_none())
                        .map(|c| (h.clone(), c))
                });
                let message = match &previous {
                    Some((h, _)) => format!(
                        "spec: {e}; generation {} stays in force until this is fixed",
                        h.generation
                    ),
                    None => format!("spec: {e}"),
                };
                (previous, Verdict::failed("Ready", "Invalid", message))
            }
        };
        decisions.push(Decision {
            name,
            kind: entry.as_ref().map(|(_, c)| c.gvk()),
            verdict,
        });
        in_force.extend(entry);
    }
    (in_force, decisions)
}

fn locations(k: &CompiledKind) -> String {
    k.pod_specs
        .iter()
        .map(|p| format!("pod spec {p}"))
        .chain(k.images.iter().map(|p| format!("image {p}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The webhook rule of each kind in force: CREATE and UPDATE of its
/// resource at the registered version, in any scope (a cluster-scoped kind
/// is judged too; the namespace selector does not apply to it).
pub fn rules(kinds: &[CompiledKind]) -> Vec<RuleWithOperations> {
    kinds
        .iter()
        .map(|k| RuleWithOperations {
            api_groups: Some(vec![k.group.clone()]),
            api_versions: Some(vec![k.version.clone()]),
            resources: Some(vec![k.resource.clone()]),
            operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
            scope: Some("*".into()),
        })
        .collect()
}

/// `current` without the rules added before (`added`), then with `want`
/// (each once): the chart's rules stay as they are, in their order.
pub fn merge_rules(
    current: &[RuleWithOperations],
    added: &[RuleWithOperations],
    want: &[RuleWithOperations],
) -> Vec<RuleWithOperations> {
    let mut out: Vec<RuleWithOperations> = current
        .iter()
        .filter(|r| !added.contains(r) && !want.contains(r))
        .cloned()
        .collect();
    out.extend(want.iter().cloned());
    out
}

/// The rules recorded in a configuration's annotation (none when it is
/// missing or unreadable: then only exact duplicates are avoided).
fn recorded(annotations: Option<&BTreeMap<String, String>>) -> Vec<RuleWithOperations> {
    annotations
        .and_then(|a| a.get(RULES_ANNOTATION))
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// A webhook configuration whose webhooks' rules the controller keeps.
trait Rules {
    /// Every webhook's rules.
    fn rule_lists(&mut self) -> Vec<&mut Option<Vec<RuleWithOperations>>>;
}

impl Rules for MutatingWebhookConfiguration {
    fn rule_lists(&mut self) -> Vec<&mut Option<Vec<RuleWithOperations>>> {
        self.webhooks
            .iter_mut()
            .flatten()
            .map(|w| &mut w.rules)
            .collect()
    }
}

impl Rules for ValidatingWebhookConfiguration {
    fn rule_lists(&mut self) -> Vec<&mut Option<Vec<RuleWithOperations>>> {
        self.webhooks
            .iter_mut()
            .flatten()
            .map(|w| &mut w.rules)
            .collect()
    }
}

/// Brings the rules of configuration `name` to `want`; `false` when it
/// does not exist (pinning off has no mutating configuration).
async fn sync_configuration<K>(
    ctx: &Context,
    name: &str,
    want: &[RuleWithOperations],
) -> Result<bool>
where
    K: Resource<DynamicType = ()>
        + Rules
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api = Api::<K>::all(ctx.client.clone());
    let kind = K::kind(&());
    let Some(mut config) = api
        .get_opt(name)
        .await
        .map_err(|e| Error::kube(format!("reading {kind} {name}"), e))?
    else {
        return Ok(false);
    };
    let added = recorded(config.meta().annotations.as_ref());
    let mut changed = false;
    for rules in config.rule_lists() {
        let merged = merge_rules(rules.as_deref().unwrap_or_default(), &added, want);
        if rules.as_deref().unwrap_or_default() != merged.as_slice() {
            *rules = Some(merged);
            changed = true;
        }
    }
    let record = serde_json::to_string(want).unwrap_or_default();
    let annotations = config.meta_mut().annotations.get_or_insert_default();
    if annotations.get(RULES_ANNOTATION) != Some(&record) {
        annotations.insert(RULES_ANNOTATION.to_owned(), record);
        changed = true;
    }
    if changed {
        api.replace(name, &PostParams::default(), &config)
            .await
            .map_err(|e| Error::kube(format!("updating the rules of {kind} {name}"), e))?;
        tracing::info!(%name, %kind, kinds = want.len(), "webhook rules for WorkloadKinds updated");
    }
    Ok(true)
}

/// Brings both webhook configurations' rules to `want`.
async fn sync_webhooks(ctx: &Context, want: &[RuleWithOperations]) -> Result<()> {
    sync_configuration::<MutatingWebhookConfiguration>(ctx, &ctx.args.mutating_webhook, want)
        .await?;
    let validating = sync_configuration::<ValidatingWebhookConfiguration>(
        ctx,
        &ctx.args.validating_webhook,
        want,
    )
    .await?;
    if !validating && !want.is_empty() {
        return Err(Error::WebhookRules(format!(
            "ValidatingWebhookConfiguration {} does not exist, so no WorkloadKind is admitted; \
             install sigil's chart (or pass the configuration's name with --validating-webhook)",
            ctx.args.validating_webhook
        )));
    }
    Ok(())
}

/// Lists every WorkloadKind, oldest first (the order they claim kinds in).
async fn list(ctx: &Context) -> Result<Vec<WorkloadKind>> {
    let api: Api<WorkloadKind> = Api::all(ctx.client.clone());
    let mut objects = api
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube("listing WorkloadKinds", e))?
        .items;
    objects.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    Ok(objects)
}

/// One pass: decide, publish, sync the webhook rules, report.
pub async fn sync(ctx: &Context) -> Result<()> {
    ctx.ensure_leader()?;
    ctx.metrics.reconciled(CONTROLLER);
    let objects = list(ctx).await?;
    let held = ctx.publisher.workload_kinds().await;
    let (in_force, decisions) = decide(&objects, &held);
    let compiled: Vec<CompiledKind> = in_force.iter().map(|(_, c)| c.clone()).collect();
    ctx.publisher
        .set_workload_kinds(in_force.into_iter().map(|(s, _)| s).collect())
        .await?;
    let webhooks = sync_webhooks(ctx, &rules(&compiled)).await;
    for (object, decision) in objects.iter().zip(decisions) {
        let mut verdict = decision.verdict;
        if let (Err(e), true) = (&webhooks, verdict.ok) {
            verdict = Verdict::failed(
                "Ready",
                "WebhookNotUpdated",
                format!(
                    "{}, but the webhook configurations were not updated: {e}",
                    verdict.message
                ),
            );
        }
        report(ctx, object, &verdict, decision.kind).await?;
    }
    webhooks
}

/// Writes `Ready` (and the kind in force) when it changed.
async fn report(
    ctx: &Context,
    object: &WorkloadKind,
    verdict: &Verdict,
    kind: Option<String>,
) -> Result<()> {
    let generation = object.metadata.generation.unwrap_or_default();
    let previous = object.status.clone().unwrap_or_default();
    if !status::changed(&previous.conditions, verdict, generation) && previous.kind == kind {
        return Ok(());
    }
    let status = WorkloadKindStatus {
        observed_generation: Some(generation),
        kind,
        conditions: status::conditions(
            &previous.conditions,
            std::slice::from_ref(verdict),
            generation,
        ),
    };
    let body = serde_json::to_value(&status).map_err(|e| Error::Snapshot(e.to_string()))?;
    status::apply_status(ctx, object, body).await?;
    status::event(ctx, object, verdict).await;
    Ok(())
}

/// Keeps WorkloadKinds and the webhook rules in sync until `shutdown`
/// resolves: on start, every [`RESYNC`], and on every change of a
/// WorkloadKind or of either webhook configuration.
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()> + Send) {
    let kinds = resync::changes(
        Api::<WorkloadKind>::all(ctx.client.clone()),
        watcher::Config::default(),
    );
    let [mutating, validating] = resync::webhook_configurations(&ctx.client, &ctx.args);
    resync::keep(
        CONTROLLER,
        "WorkloadKind sync",
        &ctx.metrics,
        RESYNC,
        futures_util::stream::select_all([kinds, mutating, validating]),
        || sync(&ctx),
        shutdown,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::fixtures::*;

    const MUTATING: &str =
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/sigil-webhook";
    const VALIDATING: &str =
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/sigil-webhook";

    fn path(name: &str) -> String {
        format!("/apis/policy.sigil.dev/v1alpha1/workloadkinds/{name}")
    }

    fn object(name: &str, created: &str, spec: Value) -> Value {
        json!({
            "apiVersion": "policy.sigil.dev/v1alpha1", "kind": "WorkloadKind",
            "metadata": {"name": name, "generation": 1, "uid": format!("uid-{name}"),
                "creationTimestamp": created},
            "spec": spec,
        })
    }

    fn put_kind(api: &FakeApi, name: &str, created: &str, spec: Value) {
        api.put(&path(name), object(name, created, spec));
    }

    fn chart_rule() -> Value {
        json!({"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
            "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"})
    }

    fn config(kind: &str) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": "sigil-webhook"},
            "webhooks": [
                {"name": "validate.policy.sigil.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                 "clientConfig": {"url": "https://127.0.0.1:1/validate"}, "rules": [chart_rule()]},
                {"name": "policy-controller-namespaces.validate.policy.sigil.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                 "clientConfig": {"url": "https://127.0.0.1:1/validate"}, "rules": [chart_rule()]}],
        })
    }

    fn ready(api: &FakeApi, name: &str) -> (String, String, String) {
        let o = api.get(&path(name)).unwrap();
        let c = &o["status"]["conditions"][0];
        (
            c["status"].as_str().unwrap_or_default().to_owned(),
            c["reason"].as_str().unwrap_or_default().to_owned(),
            c["message"].as_str().unwrap_or_default().to_owned(),
        )
    }

    fn resources(api: &FakeApi, config: &str, webhook: usize) -> Vec<String> {
        api.get(config).unwrap()["webhooks"][webhook]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{}/{}",
                    r["apiGroups"][0].as_str().unwrap(),
                    r["resources"][0].as_str().unwrap()
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn accepted_kinds_are_published_added_to_every_webhook_and_removed_when_deleted() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        api.put(MUTATING, config("MutatingWebhookConfiguration"));
        api.put(VALIDATING, config("ValidatingWebhookConfiguration"));
        put_kind(
            &api,
            "rollouts",
            "2026-01-01T00:00:00Z",
            json!({"builtin": "ArgoRollout"}),
        );
        put_kind(
            &api,
            "pipelines",
            "2026-01-02T00:00:00Z",
            json!({"group": "example.dev", "version": "v1", "kind": "Pipeline",
                    "resource": "pipelines", "images": ["spec.steps[*].image"]}),
        );
        sync(&ctx).await.unwrap();

        let snapshot = stored_snapshot(&api).unwrap();
        let names: Vec<_> = snapshot
            .workload_kinds
            .iter()
            .map(|k| k.name.as_str())
            .collect();
        assert_eq!(names, ["pipelines", "rollouts"]);
        for (config, webhook) in [(MUTATING, 0), (VALIDATING, 0), (VALIDATING, 1)] {
            assert_eq!(
                resources(&api, config, webhook),
                ["/pods", "argoproj.io/rollouts", "example.dev/pipelines"],
                "{config} webhook {webhook}: the chart's rule stays first"
            );
        }
        let rule = &api.get(VALIDATING).unwrap()["webhooks"][0]["rules"][1];
        assert_eq!(rule["apiVersions"], json!(["v1alpha1"]));
        assert_eq!(rule["operations"], json!(["CREATE", "UPDATE"]));
        let (status, reason, message) = ready(&api, "rollouts");
        assert_eq!((status.as_str(), reason.as_str()), ("True", "Accepted"));
        assert!(
            message
                .contains("argoproj.io/v1alpha1/Rollout (rollouts) at pod spec spec.template.spec"),
            "{message}"
        );
        assert_eq!(
            api.get(&path("rollouts")).unwrap()["status"]["kind"],
            "argoproj.io/v1alpha1/Rollout"
        );

        // A second pass with nothing changed writes nothing.
        let writes = |api: &FakeApi| {
            api.requests()
                .iter()
                .filter(|r| r.method != http::Method::GET)
                .count()
        };
        let before = writes(&api);
        sync(&ctx).await.unwrap();
        assert_eq!(writes(&api), before, "nothing changed, nothing written");

        // Deleted: its rule goes from every webhook, the chart's stays.
        Api::<WorkloadKind>::all(ctx.client.clone())
            .delete("rollouts", &Default::default())
            .await
            .unwrap();
        sync(&ctx).await.unwrap();
        assert_eq!(
            resources(&api, VALIDATING, 1),
            ["/pods", "example.dev/pipelines"]
        );
        assert_eq!(
            resources(&api, MUTATING, 0),
            ["/pods", "example.dev/pipelines"]
        );
        let snapshot = stored_snapshot(&api).unwrap();
        assert_eq!(snapshot.workload_kinds.len(), 1);
    }

    #[tokio::test]
    async fn rules_reset_by_an_upgrade_are_added_again_once() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        api.put(VALIDATING, config("ValidatingWebhookConfiguration"));
        put_kind(
            &api,
            "ksvc",
            "2026-01-01T00:00:00Z",
            json!({"builtin": "KnativeService"}),
        );
        sync(&ctx).await.unwrap();
        // helm upgrade writes the chart's rules (and drops the annotation).
        api.put(VALIDATING, config("ValidatingWebhookConfiguration"));
        sync(&ctx).await.unwrap();
        sync(&ctx).await.unwrap();
        assert_eq!(
            resources(&api, VALIDATING, 0),
            ["/pods", "serving.knative.dev/services"]
        );
    }

    #[tokio::test]
    async fn a_conflict_goes_to_the_newer_object_and_an_invalid_generation_keeps_the_last_one() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        api.put(VALIDATING, config("ValidatingWebhookConfiguration"));
        put_kind(
            &api,
            "old",
            "2026-01-01T00:00:00Z",
            json!({"builtin": "TektonTask"}),
        );
        put_kind(
            &api,
            "new",
            "2026-01-02T00:00:00Z",
            json!({"group": "tekton.dev", "version": "v1", "kind": "Task",
                    "resource": "tasks", "images": ["spec.steps[*].image"]}),
        );
        sync(&ctx).await.unwrap();
        let (status, reason, message) = ready(&api, "new");
        assert_eq!((status.as_str(), reason.as_str()), ("False", "Conflict"));
        assert!(
            message.contains("WorkloadKind old already admits tekton.dev/v1/Task"),
            "{message}"
        );
        assert_eq!(
            resources(&api, VALIDATING, 0),
            ["/pods", "tekton.dev/tasks"]
        );

        // A broken generation 2 of `old`: generation 1 stays in force.
        let mut broken = object(
            "old",
            "2026-01-01T00:00:00Z",
            json!({"builtin": "TektonTask", "images": ["spec..x"]}),
        );
        broken["metadata"]["generation"] = json!(2);
        api.put(&path("old"), broken);
        sync(&ctx).await.unwrap();
        let (status, reason, message) = ready(&api, "old");
        assert_eq!((status.as_str(), reason.as_str()), ("False", "Invalid"));
        assert!(message.contains("generation 1 stays in force"), "{message}");
        let snapshot = stored_snapshot(&api).unwrap();
        assert_eq!(snapshot.workload_kinds.len(), 1);
        assert_eq!(snapshot.workload_kinds[0].generation, 1);
        assert_eq!(
            ready(&api, "new").1,
            "Conflict",
            "the kind stays with the older object"
        );
    }

    #[tokio::test]
    async fn without_a_validating_configuration_accepted_kinds_are_not_ready() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _leading) = context(client, true);
        put_kind(
            &api,
            "vm",
            "2026-01-01T00:00:00Z",
            json!({"builtin": "KubeVirtVirtualMachine"}),
        );
        let e = sync(&ctx).await.unwrap_err();
        assert!(
            e.to_string()
                .contains("ValidatingWebhookConfiguration sigil-webhook does not exist"),
            "{e}"
        );
        let (status, reason, message) = ready(&api, "vm");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "WebhookNotUpdated")
        );
        assert!(message.contains("install sigil's chart"), "{message}");
    }

    #[test]
    fn merging_keeps_foreign_rules_and_replaces_only_what_was_added() {
        let r = |group: &str| RuleWithOperations {
            api_groups: Some(vec![group.into()]),
            ..RuleWithOperations::default()
        };
        let merged = merge_rules(
            &[r(""), r("a"), r("apps"), r("b")],
            &[r("a"), r("b")],
            &[r("b"), r("c")],
        );
        assert_eq!(merged, [r(""), r("apps"), r("b"), r("c")]);
        assert_eq!(
            merge_rules(&[r(""), r("c")], &[], &[r("c")]),
            [r(""), r("c")]
        );
    }
}
