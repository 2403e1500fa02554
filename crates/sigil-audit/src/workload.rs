//! What runs: the containers of a Pod with the digest the container runtime
//! reports for each (`status.*containerStatuses[].imageID`), and the workload
//! that owns the Pod (a Deployment rather than its ReplicaSet, a CronJob
//! rather than its Job), which names the results.
//!
//! Only containers the runtime has started are audited: a container without
//! an `imageID` has not pulled anything yet, and the pod's next status update
//! brings it in. Pods that finished (`Succeeded`, `Failed`) run nothing.
//! Image volumes are admitted by the webhook but have no running digest in
//! the pod status that every supported Kubernetes version reports, so they
//! are not audited.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::{ApiResource, DynamicObject};
use sigil_registry::Digest;

/// Containers of one pod audited at most (the webhook admits no more).
pub const MAX_CONTAINERS: usize = 2048;

/// Which list of the pod spec a container is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContainerList {
    /// `initContainers`.
    Init,
    /// `containers`.
    Main,
    /// `ephemeralContainers` (`kubectl debug`).
    Ephemeral,
}

impl ContainerList {
    /// The field name, as messages and reports name it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Init => "initContainers",
            Self::Main => "containers",
            Self::Ephemeral => "ephemeralContainers",
        }
    }
}

/// One container that runs (or ran, for a started init container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningContainer {
    /// Its list.
    pub list: ContainerList,
    /// Its name.
    pub name: String,
    /// The image as the pod spec names it.
    pub image: String,
    /// The digest that runs (`sha256:<hex>`), or why it cannot be told.
    pub digest: Result<String, String>,
}

/// An object a result is about: the workload that owns the pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    /// `apps/v1`, `batch/v1`, `v1`.
    pub api_version: String,
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `CronJob`, `Job`,
    /// `ReplicaSet`, `ReplicationController`, or `Pod` for a bare pod.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
}

/// A pod as the audit keeps it: what policies may read about it and what
/// runs in it, nothing else (its status and managed fields are dropped).
#[derive(Debug, Clone)]
pub struct RunningPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The pod's controller, as its `ownerReferences` name it (before
    /// [`OwnerIndex::workload`] walks further up).
    pub owner: Option<Workload>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// `spec.imagePullSecrets` names.
    pub pull_secret_names: Vec<String>,
    /// `spec.serviceAccountName` (`default` when unset).
    pub service_account: String,
    /// The containers the runtime started.
    pub containers: Vec<RunningContainer>,
    /// Metadata (without managed fields) and spec, for policies that read
    /// the object, exactly as admission hands them to the judge.
    pub object: Arc<DynamicObject>,
}

/// The digest a container runs, from its status's `imageID` and, when that
/// names no repository digest, from the spec image if it is pinned.
///
/// Runtimes report `imageID` as `repo@sha256:<manifest digest>` (containerd,
/// CRI-O) or `docker-pullable://repo@sha256:…` (dockershim); an image without
/// a repository digest (loaded onto the node, never pulled) has only its
/// configuration's ID, `sha256:…`, which is not a manifest digest.
pub fn running_digest(spec_image: &str, image_id: &str) -> Result<String, String> {
    let id = image_id
        .split_once("://")
        .map_or(image_id, |(_, rest)| rest);
    if let Some((_, digest)) = id.rsplit_once('@') {
        return Digest::parse(digest).map(|d| d.to_string()).map_err(|e| {
            format!("the runtime reports imageID `{image_id}`, whose digest does not parse: {e}")
        });
    }
    if let Some((_, digest)) = spec_image.rsplit_once('@')
        && let Ok(d) = Digest::parse(digest)
    {
        // Pulled by digest: the runtime ran that manifest, whatever ID it
        // reports for the image's configuration.
        return Ok(d.to_string());
    }
    Err(format!(
        "the runtime reports imageID `{image_id}`, which names no repository digest (an image \
         loaded onto the node rather than pulled?), so sigil cannot tell which manifest runs; \
         pin the image by digest"
    ))
}

fn statuses(list: Option<&Vec<ContainerStatus>>) -> HashMap<&str, &ContainerStatus> {
    list.into_iter()
        .flatten()
        .map(|s| (s.name.as_str(), s))
        .collect()
}

/// The pod's controlling owner reference, if any.
fn controller(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

fn workload_of(o: &OwnerReference) -> Workload {
    Workload {
        api_version: o.api_version.clone(),
        kind: o.kind.clone(),
        name: o.name.clone(),
        uid: o.uid.clone(),
    }
}

/// What of `pod` the audit keeps, or `None` when it runs nothing (finished,
/// or unnamed).
pub fn running_pod(pod: &Pod) -> Option<RunningPod> {
    let meta = &pod.metadata;
    let name = meta.name.clone().filter(|n| !n.is_empty())?;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let status = pod.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let mut containers = Vec::new();
    let init = statuses(status.and_then(|s| s.init_container_statuses.as_ref()));
    let main = statuses(status.and_then(|s| s.container_statuses.as_ref()));
    let ephemeral = statuses(status.and_then(|s| s.ephemeral_container_statuses.as_ref()));
    let specs = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (ContainerList::Init, &c.name, &c.image, &init))
        .chain(
            spec.containers
                .iter()
                .map(|c| (ContainerList::Main, &c.name, &c.image, &main)),
        )
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| (ContainerList::Ephemeral, &c.name, &c.image, &ephemeral)),
        );
    for (list, name, image, statuses) in specs.take(MAX_CONTAINERS) {
        let Some(image) = image.as_deref().filter(|i| !i.is_empty()) else {
            continue;
        };
        let Some(image_id) = statuses
            .get(name.as_str())
            .map(|s| s.image_id.as_str())
            .filter(|i| !i.is_empty())
        else {
            continue;
        };
        containers.push(RunningContainer {
            list,
            name: name.clone(),
            image: image.to_string(),
            digest: running_digest(image, image_id),
        });
    }
    let mut kept = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(namespace.clone()),
        uid: meta.uid.clone(),
        labels: meta.labels.clone(),
        annotations: meta.annotations.clone(),
        owner_references: meta.owner_references.clone(),
        ..ObjectMeta::default()
    };
    kept.generate_name.clone_from(&meta.generate_name);
    let mut object = DynamicObject::new(&name, &ApiResource::erase::<Pod>(&()));
    object.metadata = kept;
    object.data = serde_json::json!({"spec": spec});
    Some(RunningPod {
        namespace,
        uid: meta.uid.clone().unwrap_or_default(),
        owner: controller(meta).map(workload_of),
        labels: meta.labels.clone().unwrap_or_default(),
        pull_secret_names: spec
            .image_pull_secrets
            .iter()
            .flatten()
            .map(|r| r.name.clone())
            .filter(|n| !n.is_empty())
            .collect(),
        service_account: spec
            .service_account_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into()),
        containers,
        object: Arc::new(object),
        name,
    })
}

/// Who owns the ReplicaSets and Jobs that own pods, so a result names the
/// Deployment or CronJob a user wrote rather than the object generated
/// from it.
#[derive(Debug, Default, Clone)]
pub struct OwnerIndex {
    owners: HashMap<String, Workload>,
}

/// Owners remembered at most (one per ReplicaSet or Job with an owner).
const MAX_OWNERS: usize = 200_000;

impl OwnerIndex {
    /// Records that the object with `uid` is controlled by `owner` (or by
    /// nothing).
    pub fn set(&mut self, uid: &str, meta: &ObjectMeta) {
        match controller(meta) {
            Some(o) if self.owners.len() < MAX_OWNERS || self.owners.contains_key(uid) => {
                self.owners.insert(uid.to_string(), workload_of(o));
            }
            _ => {
                self.owners.remove(uid);
            }
        }
    }

    /// Forgets the object with `uid`.
    pub fn remove(&mut self, uid: &str) {
        self.owners.remove(uid);
    }

    /// Forgets everything (a watch restarted from a fresh list).
    pub fn clear(&mut self) {
        self.owners.clear();
    }

    /// The workload a result about `pod` names: its controller's controller
    /// when that is known (ReplicaSet → Deployment, Job → CronJob), else its
    /// controller, else the pod itself.
    pub fn workload(&self, pod: &RunningPod) -> Workload {
        let Some(owner) = &pod.owner else {
            return Workload {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
            };
        };
        match self.owners.get(&owner.uid) {
            Some(top) if matches!(owner.kind.as_str(), "ReplicaSet" | "Job") => top.clone(),
            _ => owner.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use serde_json::json;

    use super::*;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_running_digest_comes_from_the_image_id_in_every_runtime_spelling() {
        for id in [
            format!("registry.example/app@{D1}"),
            format!("docker-pullable://registry.example/app@{D1}"),
            format!("docker.io/library/busybox@{D1}"),
        ] {
            assert_eq!(running_digest("registry.example/app:1", &id).unwrap(), D1);
        }
        // A pinned spec image wins only when the ID names no repository digest.
        assert_eq!(
            running_digest(
                &format!("r.example/app@{D2}"),
                &format!("r.example/app@{D1}")
            )
            .unwrap(),
            D1,
            "what runs, not what was asked for"
        );
        assert_eq!(
            running_digest(&format!("r.example/app:1@{D2}"), D1).unwrap(),
            D2
        );
    }

    #[test]
    fn an_image_id_without_a_repository_digest_of_a_tagged_image_is_unknown() {
        let why = running_digest("r.example/app:1", D1).unwrap_err();
        assert!(why.contains("names no repository digest"), "{why}");
        let why = running_digest("r.example/app:1", "r.example/app@sha256:xyz").unwrap_err();
        assert!(why.contains("does not parse"), "{why}");
    }

    #[test]
    fn only_started_containers_of_running_pods_are_kept_with_their_lists() {
        let p = pod(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1",
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d", "uid": "rs1", "controller": true}]},
            "spec": {
                "serviceAccountName": "builder",
                "imagePullSecrets": [{"name": "regcred"}],
                "initContainers": [{"name": "setup", "image": "r.example/setup:1"}],
                "containers": [
                    {"name": "app", "image": "r.example/app:1"},
                    {"name": "sidecar", "image": "r.example/side:1"}
                ],
                "ephemeralContainers": [{"name": "debug", "image": "r.example/debug:1"}]
            },
            "status": {"phase": "Running",
                "initContainerStatuses": [{"name": "setup", "image": "", "imageID": format!("r.example/setup@{D1}"), "ready": true, "restartCount": 0}],
                "containerStatuses": [
                    {"name": "app", "image": "", "imageID": format!("r.example/app@{D2}"), "ready": true, "restartCount": 0},
                    {"name": "sidecar", "image": "", "imageID": "", "ready": false, "restartCount": 0}
                ],
                "ephemeralContainerStatuses": [{"name": "debug", "image": "", "imageID": format!("r.example/debug@{D1}"), "ready": false, "restartCount": 0}]
            }
        }));
        let r = running_pod(&p).unwrap();
        let seen: Vec<(&str, &str)> = r
            .containers
            .iter()
            .map(|c| (c.list.label(), c.name.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("initContainers", "setup"),
                ("containers", "app"),
                ("ephemeralContainers", "debug")
            ],
            "the sidecar has not pulled anything yet"
        );
        assert_eq!(r.containers[1].digest.as_deref(), Ok(D2));
        assert_eq!(r.service_account, "builder");
        assert_eq!(r.pull_secret_names, ["regcred"]);
        assert!(r.object.metadata.managed_fields.is_none());
        assert_eq!(
            r.object.data["spec"]["containers"][0]["name"], "app",
            "policies that read the spec see it"
        );
        assert_eq!(r.owner.as_ref().unwrap().kind, "ReplicaSet");
    }

    #[test]
    fn finished_pods_run_nothing() {
        for phase in ["Succeeded", "Failed"] {
            let p = pod(json!({
                "metadata": {"name": "job-1", "namespace": "batch"},
                "spec": {"containers": [{"name": "c", "image": "r.example/app:1"}]},
                "status": {"phase": phase, "containerStatuses": [
                    {"name": "c", "image": "", "imageID": format!("r.example/app@{D1}"), "ready": false, "restartCount": 0}]}
            }));
            assert!(running_pod(&p).is_none(), "{phase}");
        }
    }

    #[test]
    fn results_name_a_workload_kind_s_object_that_controls_the_replicaset_or_the_pod() {
        // An Argo Rollout owns ReplicaSets as a Deployment does; a Tekton
        // TaskRun owns its pod. Results name them, whatever their kind.
        let p = pod(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c", "uid": "rs1", "controller": true}]},
            "spec": {"containers": [{"name": "app", "image": "r.example/app:1"}]}
        }));
        let mut index = OwnerIndex::default();
        let rs: ObjectMeta = serde_json::from_value(json!({"name": "web-7c", "uid": "rs1",
            "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "web", "uid": "r1", "controller": true}]}))
        .unwrap();
        index.set("rs1", &rs);
        let w = index.workload(&running_pod(&p).unwrap());
        assert_eq!(
            (w.api_version.as_str(), w.kind.as_str(), w.name.as_str()),
            ("argoproj.io/v1alpha1", "Rollout", "web")
        );
        let step = pod(json!({
            "metadata": {"name": "build-pod", "namespace": "ci", "uid": "u2",
                "ownerReferences": [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": "build", "uid": "t1", "controller": true}]},
            "spec": {"containers": [{"name": "step-compile", "image": "r.example/go:1"}]}
        }));
        let w = index.workload(&running_pod(&step).unwrap());
        assert_eq!((w.kind.as_str(), w.name.as_str()), ("TaskRun", "build"));
    }

    #[test]
    fn results_name_the_deployment_or_cronjob_above_a_replicaset_or_job() {
        let p = pod(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d", "uid": "rs1", "controller": true}]},
            "spec": {"containers": [{"name": "app", "image": "r.example/app:1"}]}
        }));
        let r = running_pod(&p).unwrap();
        let mut index = OwnerIndex::default();
        assert_eq!(index.workload(&r).kind, "ReplicaSet", "owner unknown yet");
        let rs: ObjectMeta = serde_json::from_value(json!({"name": "web-5d", "uid": "rs1",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d1", "controller": true}]}))
        .unwrap();
        index.set("rs1", &rs);
        let w = index.workload(&r);
        assert_eq!((w.kind.as_str(), w.name.as_str()), ("Deployment", "web"));
        index.remove("rs1");
        assert_eq!(index.workload(&r).kind, "ReplicaSet");

        let bare = pod(
            json!({"metadata": {"name": "solo", "namespace": "shop", "uid": "u2"},
            "spec": {"containers": [{"name": "app", "image": "r.example/app:1"}]}}),
        );
        let w = index.workload(&running_pod(&bare).unwrap());
        assert_eq!((w.kind.as_str(), w.name.as_str()), ("Pod", "solo"));
    }
}
