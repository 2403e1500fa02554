//! Changes of the Secrets and ConfigMaps namespaces' ImagePolicies refer
//! to, within seconds. The controller watches, in each namespace where an
//! ImagePolicy names a Secret or ConfigMap, the metadata of its Secrets and
//! ConfigMaps (never their content: a changed `resourceVersion` is all it
//! needs, and the reconcile reads the object it names), and reports every
//! object touched. Namespaces come and go as ImagePolicies do; at most
//! [`MAX_NAMESPACES`] are watched at once, and the others, like a namespace
//! where RBAC does not let the controller list and watch (the chart binds
//! `list` and `watch` with `get` in `imagePolicies.referenceNamespaces`),
//! rely on the policies' periodic re-read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a namespace where RBAC refused the watch waits before the
/// controller asks again (a RoleBinding may have come meanwhile).
const ASK_AGAIN: Duration = Duration::from_secs(60);

/// Namespaces watched at most.
pub const MAX_NAMESPACES: usize = 256;

/// A Secret or ConfigMap that changed, appeared or went away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touched {
    /// `Secret` or `ConfigMap`.
    pub kind: Kind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// The kinds of object an ImagePolicy reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A key or CA Secret.
    Secret,
    /// A ConfigMap holding a policy module.
    ConfigMap,
}

/// The objects touched in the namespaces `wanted` names (asked again
/// every `every`), until the stream is dropped.
pub fn touched(
    client: Client,
    wanted: impl Fn() -> BTreeSet<String> + Send + 'static,
    every: Duration,
) -> impl Stream<Item = Touched> + Send + 'static {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(manage(client, wanted, every, tx));
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|touched| (touched, rx))
    })
}

/// Starts and stops one watch per wanted namespace; ends when the
/// receiving stream is gone.
async fn manage(
    client: Client,
    wanted: impl Fn() -> BTreeSet<String>,
    every: Duration,
    tx: mpsc::UnboundedSender<Touched>,
) {
    let mut watching: BTreeMap<String, tokio::task::JoinHandle<()>> = BTreeMap::new();
    let mut over_bound = false;
    let mut refused: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        let mut want = wanted();
        if want.len() > MAX_NAMESPACES {
            if !over_bound {
                tracing::warn!(
                    namespaces = want.len(),
                    max = MAX_NAMESPACES,
                    "more namespaces have ImagePolicies naming Secrets or ConfigMaps than \
                     sigil watches; the others' changes count at the next periodic re-read"
                );
            }
            over_bound = true;
            want = want.into_iter().take(MAX_NAMESPACES).collect();
        }
        let wanted_now = want.clone();
        watching.retain(|ns, task| {
            let keep = want.contains(ns);
            if !keep {
                task.abort();
            }
            keep
        });
        for ns in want {
            if watching.contains_key(&ns) {
                continue;
            }
            // Asked first, so a namespace RBAC does not open is told once as
            // the admin's choice, not retried into the API server's refusals.
            if refused.get(&ns).is_some_and(|at| at.elapsed() < ASK_AGAIN) {
                continue;
            }
            if !may_watch(&client, &ns).await {
                if refused.insert(ns.clone(), Instant::now()).is_none() {
                    tracing::info!(namespace = %ns, "sigil's controller may not list and watch Secrets and ConfigMaps here (chart value imagePolicies.referenceNamespaces, or a RoleBinding to the ClusterRole docs/policies.md names); a change of those the ImagePolicies here name counts at the next periodic re-read");
                }
                continue;
            }
            refused.remove(&ns);
            watching.insert(
                ns.clone(),
                tokio::spawn(watch_namespace(client.clone(), ns, tx.clone())),
            );
        }
        refused.retain(|ns, _| wanted_now.contains(ns));
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = tx.closed() => break,
        }
    }
    for task in watching.values() {
        task.abort();
    }
}

/// Reports every Secret and ConfigMap touched in `namespace`.
async fn watch_namespace(client: Client, namespace: String, tx: mpsc::UnboundedSender<Touched>) {
    let secrets = metadata_of::<Secret>(client.clone(), &namespace, Kind::Secret);
    let config_maps = metadata_of::<ConfigMap>(client, &namespace, Kind::ConfigMap);
    let mut both = futures_util::stream::select(secrets, config_maps);
    let mut refused = false;
    while let Some(item) = both.next().await {
        match item {
            Ok(touched) => {
                if tx.send(touched).is_err() {
                    return;
                }
            }
            // Said once, then retried with backoff. RBAC's refusal is the
            // admin's choice (the namespace is not bound), told as such.
            Err(e) if !refused => {
                refused = true;
                if refused_by_rbac(&e) {
                    tracing::info!(%namespace, "sigil's controller may not list and watch Secrets and ConfigMaps here (chart value imagePolicies.referenceNamespaces, or a RoleBinding to the ClusterRole docs/policies.md names); a change of those the ImagePolicies here name counts at the next periodic re-read");
                } else {
                    tracing::info!(%namespace, error = %e, "cannot watch the Secrets and ConfigMaps ImagePolicies name here; their changes count at the next periodic re-read");
                }
            }
            Err(_) => {}
        }
    }
}

/// Whether the controller may list and watch Secrets and ConfigMaps in
/// `namespace` (SelfSubjectAccessReviews, which every authenticated user may
/// create). When the API cannot tell, the watch is tried.
async fn may_watch(client: &Client, namespace: &str) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for resource in ["secrets", "configmaps"] {
        for verb in ["list", "watch"] {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        namespace: Some(namespace.to_owned()),
                        resource: Some(resource.to_owned()),
                        verb: Some(verb.to_owned()),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            match api.create(&Default::default(), &review).await {
                Ok(answer) if answer.status.as_ref().is_some_and(|s| !s.allowed) => return false,
                _ => {}
            }
        }
    }
    true
}

/// Whether the API server refused the watch for lack of rights (403).
fn refused_by_rbac(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

/// The objects of kind `K` touched in `namespace`, read as metadata only.
fn metadata_of<K>(
    client: Client,
    namespace: &str,
    kind: Kind,
) -> futures_util::stream::BoxStream<'static, Result<Touched, watcher::Error>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let ns = namespace.to_owned();
    watcher(
        Api::<PartialObjectMeta<K>>::namespaced(client, namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .map(move |r| {
        r.map(|meta| Touched {
            kind,
            namespace: ns.clone(),
            name: meta.name_any(),
        })
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    #[test]
    fn rbacs_refusal_is_told_apart_from_other_watch_failures() {
        let status = |code| Status::failure("x", "y").with_code(code).boxed();
        assert!(refused_by_rbac(&watcher::Error::InitialListFailed(
            kube::Error::Api(status(403))
        )));
        assert!(refused_by_rbac(&watcher::Error::WatchError(status(403))));
        assert!(!refused_by_rbac(&watcher::Error::WatchStartFailed(
            kube::Error::Api(status(500))
        )));
        assert!(!refused_by_rbac(&watcher::Error::NoResourceVersion));
    }
}
