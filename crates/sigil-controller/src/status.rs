//! Status conditions written by server-side apply, and the Events that go
//! with a change of them; shared by the policy and trust-root reconcilers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::names::MANAGER;

/// One condition as a reconciler decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The condition type (`Ready`, `Fresh`).
    pub type_: &'static str,
    /// True or false.
    pub ok: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// One line saying what happened and what to do.
    pub message: String,
}

impl Verdict {
    /// A condition that holds.
    pub fn ok(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            ok: true,
            reason,
            message: message.into(),
        }
    }

    /// A condition that does not hold.
    pub fn failed(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            ok: false,
            reason,
            message: message.into(),
        }
    }
}

// Kubernetes caps condition messages at 32768 bytes; keep them readable.
const MAX_MESSAGE: usize = 4096;

// Events notes are capped at 1 kB.
const MAX_NOTE: usize = 1000;

fn truncate(message: &str) -> String {
    truncate_to(message, MAX_MESSAGE)
}

fn truncate_to(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_owned();
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", message.get(..end).unwrap_or_default())
}

/// Builds the conditions to write, keeping `lastTransitionTime` of those
/// whose status did not change.
pub fn conditions(previous: &[Condition], verdicts: &[Verdict], generation: i64) -> Vec<Condition> {
    verdicts
        .iter()
        .map(|v| {
            let status = if v.ok { "True" } else { "False" };
            let since = previous
                .iter()
                .find(|c| c.type_ == v.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| Time(Timestamp::now()));
            Condition {
                type_: v.type_.to_owned(),
                status: status.to_owned(),
                reason: v.reason.to_owned(),
                message: truncate(&v.message),
                observed_generation: Some(generation),
                last_transition_time: since,
            }
        })
        .collect()
}

/// Whether `verdict` differs from what `previous` already says at `generation`.
pub fn changed(previous: &[Condition], verdict: &Verdict, generation: i64) -> bool {
    !previous.iter().any(|c| {
        c.type_ == verdict.type_
            && (c.status == "True") == verdict.ok
            && c.reason == verdict.reason
            && c.message == truncate(&verdict.message)
            && c.observed_generation == Some(generation)
    })
}

/// Writes `status` by server-side apply (field manager `sigil-controller`).
pub async fn apply_status<K>(ctx: &Context, obj: &K, status: serde_json::Value) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    apply_status_with(&Api::all(ctx.client.clone()), obj, status).await
}

/// Writes `status` by server-side apply through `api` (a namespaced API for
/// a namespaced object).
pub async fn apply_status_with<K>(api: &Api<K>, obj: &K, status: serde_json::Value) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let name = obj.name_any();
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(|e| Error::kube(format!("writing status of {} {name}", K::kind(&())), e))?;
    Ok(())
}

/// Publishes an Event about `obj`; a failure is logged, never fatal (Events
/// are best effort).
pub async fn event<K: Resource<DynamicType = ()>>(ctx: &Context, obj: &K, verdict: &Verdict) {
    let event = Event {
        type_: if verdict.ok {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: verdict.reason.to_owned(),
        note: Some(truncate_to(&verdict.message, MAX_NOTE)),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::warn!(error = %e, "could not publish an Event");
    }
}
