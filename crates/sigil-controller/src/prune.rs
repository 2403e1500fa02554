//! The watch stream both reconcilers run on: a reflector over every object
//! of one kind that also unpublishes what was deleted, on its delete event
//! and once the initial list is complete (objects deleted while the
//! controller was down). What "unpublish" means is the kind's own
//! ([`Published`]); the stream, the leadership check and the error handling
//! are shared.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures_util::{Stream, TryStreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::Result;

/// A kind whose accepted objects the controller publishes to the webhook.
pub trait Published:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
    /// What log lines call these objects ("policies", "trust roots").
    const PLURAL: &'static str;

    /// The name the object is published under: its name, unless the kind
    /// says otherwise (an ImagePolicy's `NAMESPACE/NAME`).
    fn key(obj: &Self) -> String {
        obj.name_any()
    }

    /// Withdraws one deleted object (by [`Self::key`]) from the snapshot and
    /// its metrics.
    fn unpublish(ctx: &Context, name: &str) -> impl Future<Output = Result<u64>> + Send;

    /// Withdraws every published object whose key is not in `live`.
    fn retain(ctx: &Context, live: &BTreeSet<String>) -> impl Future<Output = Result<u64>> + Send;
}

/// Watches every `K` into a reflector store and unpublishes deletions as
/// they stream past. Returns the store's reader and the stream of applied
/// objects for `Controller::for_stream`.
pub fn watch_and_prune<K>(
    ctx: &Arc<Context>,
) -> (
    Store<K>,
    impl Stream<Item = std::result::Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Published,
    K::DynamicType: Eq + Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let prune_ctx = ctx.clone();
    let prune_reader = reader.clone();
    let objects = reflector::reflector(
        writer,
        // Nothing here reads managedFields, and with thousands of objects
        // they are a large share of what the store would hold.
        watcher(
            Api::<K>::all(ctx.client.clone()),
            watcher::Config::default(),
        )
        .modify(|obj| obj.managed_fields_mut().clear()),
    )
    .and_then(move |event| {
        let ctx = prune_ctx.clone();
        let reader = prune_reader.clone();
        async move {
            if matches!(event, watcher::Event::Delete(_) | watcher::Event::InitDone) {
                // In a task of its own: unpublishing waits its turn for the
                // snapshot writer, and at shutdown the controller stops
                // polling this stream while it waits for a reconcile in
                // flight. A turn handed to a future nobody polls would never
                // be given back, and that reconcile would wait forever.
                let pruning = {
                    let event = event.clone();
                    tokio::spawn(async move { prune(&ctx, &reader, &event).await })
                };
                if let Err(e) = pruning.await {
                    tracing::warn!(error = %e, "unpublishing deleted {} stopped; retried on the next change", K::PLURAL);
                }
            }
            Ok(event)
        }
    })
    .default_backoff()
    .applied_objects();
    (reader, objects)
}

/// Unpublishes deleted objects of one kind. Only the leader writes; a
/// failure is logged and retried with the next change, as the snapshot is
/// rewritten whole each time.
pub(crate) async fn prune<K: Published>(
    ctx: &Context,
    reader: &Store<K>,
    event: &watcher::Event<K>,
) {
    if ctx.ensure_leader().is_err() {
        return;
    }
    let result = match event {
        watcher::Event::Delete(obj) => K::unpublish(ctx, &K::key(obj)).await,
        watcher::Event::InitDone => {
            let live: BTreeSet<String> = reader.state().iter().map(|o| K::key(o)).collect();
            K::retain(ctx, &live).await
        }
        _ => return,
    };
    if let Err(e) = result {
        tracing::warn!(
            error = %e,
            "could not unpublish deleted {}; retried on the next change",
            K::PLURAL
        );
    }
}
