//! Reading what runs from the API server in one pass: namespaces (their
//! labels decide coverage), ReplicaSets and Jobs (to name the Deployment or
//! CronJob above a pod), then pods, each list paged. `sigil audit` uses
//! this once; the in-cluster audit uses it to start, then follows watches.
//! Only reads: nothing here writes to the cluster.

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, ObjectList};
use serde::de::DeserializeOwned;
use sigil_judge::judge::{ImageJudge, PullSecretSource};

use crate::auditor::Auditor;

/// Objects asked for per list page.
const PAGE: u32 = 500;
/// Objects of one kind read at most (a bound on memory whatever the
/// cluster's size; far above what one cluster runs).
pub const MAX_OBJECTS: usize = 500_000;

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A list call failed.
    #[error(
        "cannot list {what}: {source}; check the kubeconfig context and that it may list \
             {what} in every namespace"
    )]
    List {
        /// The resource (`pods`, `namespaces`, ...).
        what: &'static str,
        /// The client's error.
        source: kube::Error,
    },
    /// The cluster holds more objects of a kind than the audit reads.
    #[error("the cluster has more than {MAX_OBJECTS} {what}; the audit reads at most that many")]
    TooMany {
        /// The resource.
        what: &'static str,
    },
}

/// What one [`read_cluster`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Namespaces listed.
    pub namespaces: usize,
    /// ReplicaSets and Jobs listed.
    pub owners: usize,
    /// Pods listed.
    pub pods: usize,
    /// List requests made.
    pub requests: usize,
}

async fn list_all<K>(
    api: &Api<K>,
    what: &'static str,
    stats: &mut ReadStats,
    mut each: impl FnMut(K),
) -> Result<usize, ReadError>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    let mut seen = 0;
    loop {
        stats.requests += 1;
        let page: ObjectList<K> = api
            .list(&params)
            .await
            .map_err(|source| ReadError::List { what, source })?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        for item in page.items {
            seen += 1;
            if seen > MAX_OBJECTS {
                return Err(ReadError::TooMany { what });
            }
            each(item);
        }
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(seen),
        }
    }
}

/// Feeds every namespace, owner and pod of the cluster `client` reaches
/// into `auditor`.
pub async fn read_cluster<J: ImageJudge, S: PullSecretSource>(
    client: &kube::Client,
    auditor: &mut Auditor<J, S>,
) -> Result<ReadStats, ReadError> {
    let mut stats = ReadStats::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    stats.namespaces = list_all(&namespaces, "namespaces", &mut stats, |ns| {
        if let Some(name) = &ns.metadata.name {
            auditor.namespace_applied(name, ns.metadata.labels.clone().unwrap_or_default());
        }
    })
    .await?;
    let replica_sets: Api<ReplicaSet> = Api::all(client.clone());
    stats.owners += list_all(&replica_sets, "replicasets", &mut stats, |rs| {
        auditor.owner_applied(&rs.metadata);
    })
    .await?;
    let jobs: Api<Job> = Api::all(client.clone());
    stats.owners += list_all(&jobs, "jobs", &mut stats, |job| {
        auditor.owner_applied(&job.metadata);
    })
    .await?;
    let pods: Api<Pod> = Api::all(client.clone());
    stats.pods = list_all(&pods, "pods", &mut stats, |pod| auditor.pod_applied(&pod)).await?;
    Ok(stats)
}
