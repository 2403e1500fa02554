//! The loop of the reconcilers that decide one thing for the whole cluster
//! (webhook TLS, WorkloadKinds and their webhook rules): a sync on start, at
//! an interval, and whenever something they watch changes, retried after a
//! pause when it fails; and the watch of sigil's two webhook configurations,
//! which both keep.

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::{BoxStream, Stream};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::config::Args;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// How soon a failed sync is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// An item whenever an object `api` lists with `config` changes (the
/// watch restarts with a backoff on errors).
pub fn changes<K>(api: Api<K>, config: watcher::Config) -> BoxStream<'static, ()>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    watcher(api, config).default_backoff().map(|_| ()).boxed()
}

/// Changes of sigil's MutatingWebhookConfiguration and
/// ValidatingWebhookConfiguration (by their names in `args`).
pub fn webhook_configurations(client: &kube::Client, args: &Args) -> [BoxStream<'static, ()>; 2] {
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    [
        changes(
            Api::<MutatingWebhookConfiguration>::all(client.clone()),
            by_name(&args.mutating_webhook),
        ),
        changes(
            Api::<ValidatingWebhookConfiguration>::all(client.clone()),
            by_name(&args.validating_webhook),
        ),
    ]
}

/// Runs `sync` on start, every `every` and on every item of `changes` (a
/// burst of items is one sync) until `shutdown` resolves; a failure is
/// counted under `controller`, logged as `what`, and retried after a pause.
pub async fn keep<F, Fut>(
    controller: &'static str,
    what: &'static str,
    metrics: &Metrics,
    every: Duration,
    changes: impl Stream<Item = ()> + Send,
    mut sync: F,
    shutdown: impl Future<Output = ()> + Send,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let changes = changes.ready_chunks(256);
    let mut changes = std::pin::pin!(changes);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => return,
            _ = tick.tick() => {}
            Some(_) = changes.next() => {}
        }
        let result: Result<()> = sync().await;
        if let Err(e) = result {
            metrics.failed(controller, e.metric_label());
            tracing::warn!(error = %e, "{what} failed; retrying");
            tokio::select! {
                biased;
                () = &mut shutdown => return,
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    }
}
