//! Which namespace the current judgement runs for. The verdict cache runs
//! each judgement (and each tag resolution) inside [`in_namespace`]; what
//! the registry client consults below it reads [`current`]: the request
//! slots ([`crate::slots`]) to share registries fairly among namespaces,
//! the registry scope ([`crate::policy_judge`]) to let a namespace's own
//! policies widen the registries contacted for that namespace only.
//! Outside any judgement the namespace is empty, which widens nothing.

use std::future::Future;
use std::sync::Arc;

tokio::task_local! {
    static NAMESPACE: Arc<str>;
}

/// Runs `work` as a judgement for `namespace`.
pub async fn in_namespace<F: Future>(namespace: &str, work: F) -> F::Output {
    NAMESPACE.scope(Arc::from(namespace), work).await
}

/// The namespace the current task judges for (empty outside any).
pub fn current() -> Arc<str> {
    NAMESPACE
        .try_with(Arc::clone)
        .unwrap_or_else(|_| Arc::from(""))
}
