//! Where the images of an admitted object live: the pod spec of each
//! supported kind, every container list in it (init, regular, ephemeral)
//! and its image volumes (`volumes[].image.reference`, Kubernetes 1.31+:
//! an OCI image or artifact the kubelet pulls like a container image), with
//! the JSON pointer `/mutate` patches; and, for a kind a WorkloadKind
//! admits, the pod specs and image fields its paths reach ([`Layout`]).

use serde_json::Value;
use sigil_judge::workload_kind::{CompiledKind, WorkloadKinds};

/// Containers per list beyond which an object is refused (the API server's
/// own validation keeps real objects far below this).
pub const MAX_CONTAINERS: usize = 512;

/// Images of one object of a WorkloadKind read at most (all its pod specs
/// and image fields together).
pub const MAX_IMAGES: usize = 2048;

/// The container lists of a pod spec, in the order the kubelet starts them.
const LISTS: [(&str, ContainerList); 3] = [
    ("initContainers", ContainerList::Init),
    ("containers", ContainerList::Regular),
    ("ephemeralContainers", ContainerList::Ephemeral),
];

/// Where in the pod spec an image is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerList {
    /// `initContainers`.
    Init,
    /// `containers`.
    Regular,
    /// `ephemeralContainers`.
    Ephemeral,
    /// `volumes[].image`: an image volume.
    Volume,
    /// An image field a WorkloadKind names (`spec.steps[0].image`).
    Field,
}

impl ContainerList {
    /// The word messages use.
    pub fn label(self) -> &'static str {
        match self {
            Self::Init => "init container",
            Self::Regular => "container",
            Self::Ephemeral => "ephemeral container",
            Self::Volume => "image volume",
            Self::Field => "field",
        }
    }
}

/// One image in an object: a container's, or an image volume's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSite {
    /// The image as written.
    pub image: String,
    /// The container's (or volume's) name.
    pub container: String,
    /// Its list (or [`ContainerList::Volume`]).
    pub list: ContainerList,
    /// JSON pointer to the `image` field, from the object's root.
    pub pointer: String,
}

/// Why the images of an object could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    /// More containers than [`MAX_CONTAINERS`] in one list.
    #[error("{list} has more than {max} entries; sigil refuses objects this large")]
    TooManyContainers {
        /// The list's JSON pointer.
        list: String,
        /// The bound.
        max: usize,
    },
    /// An object of a WorkloadKind has more images than [`MAX_IMAGES`].
    #[error("the object has more than {max} images; sigil refuses objects this large")]
    TooManyImages {
        /// The bound.
        max: usize,
    },
    /// A container list or image is not of the expected JSON type.
    #[error("{pointer} is not {expected}; the object does not follow the Kubernetes schema")]
    Shape {
        /// Where.
        pointer: String,
        /// What was expected.
        expected: &'static str,
    },
}

/// The JSON pointer of the pod spec in an object of `group`/`kind`, or `None`
/// for kinds sigil does not inspect.
pub fn pod_spec_pointer(group: &str, kind: &str) -> Option<&'static str> {
    match (group, kind) {
        ("", "Pod") => Some("/spec"),
        ("", "ReplicationController")
        | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job") => Some("/spec/template/spec"),
        ("batch", "CronJob") => Some("/spec/jobTemplate/spec/template/spec"),
        _ => None,
    }
}

/// Where the images of an object of one kind are.
#[derive(Debug, Clone, Copy)]
pub enum Layout<'a> {
    /// Kubernetes' own kinds: one pod spec at this pointer.
    PodSpec(&'static str),
    /// A kind a WorkloadKind admits: its pod specs and image fields.
    Workload(&'a CompiledKind),
}

/// Where the images of `group`/`kind` are: Kubernetes' own kinds first
/// (a WorkloadKind cannot name their groups), then `kinds`; `None` for
/// kinds sigil does not inspect.
pub fn layout<'a>(group: &str, kind: &str, kinds: Option<&'a WorkloadKinds>) -> Option<Layout<'a>> {
    if let Some(pointer) = pod_spec_pointer(group, kind) {
        return Some(Layout::PodSpec(pointer));
    }
    kinds
        .and_then(|k| k.find(group, kind))
        .map(Layout::Workload)
}

/// Every image of `object` laid out as `layout` says, in the order of the
/// kind's paths (pod specs, then image fields).
pub fn extract_from(object: &Value, layout: Layout<'_>) -> Result<Vec<ImageSite>, ExtractError> {
    let kind = match layout {
        Layout::PodSpec(pointer) => return extract(object, pointer),
        Layout::Workload(kind) => kind,
    };
    let too_many = |path: String| ExtractError::TooManyContainers {
        list: path,
        max: sigil_judge::workload_kind::MAX_MATCHES,
    };
    let mut sites = Vec::new();
    for path in &kind.pod_specs {
        for spec in path.reach(object).map_err(|e| too_many(e.path))? {
            if !spec.value.is_object() {
                return Err(ExtractError::Shape {
                    pointer: spec.pointer,
                    expected: "a pod spec",
                });
            }
            sites.extend(extract(object, &spec.pointer)?.into_iter().map(|mut site| {
                // Kinds such as Knative's leave a single container unnamed;
                // its path then names it in messages.
                if site.container.is_empty() {
                    site.container = dotted_path(&site.pointer);
                }
                site
            }));
            if sites.len() > MAX_IMAGES {
                return Err(ExtractError::TooManyImages { max: MAX_IMAGES });
            }
        }
    }
    for path in &kind.images {
        for field in path.reach(object).map_err(|e| too_many(e.path))? {
            let Some(image) = image_string(Some(field.value), &field.pointer)? else {
                continue;
            };
            sites.push(ImageSite {
                image,
                container: field.path,
                list: ContainerList::Field,
                pointer: field.pointer,
            });
            if sites.len() > MAX_IMAGES {
                return Err(ExtractError::TooManyImages { max: MAX_IMAGES });
            }
        }
    }
    Ok(sites)
}

/// The item holding the image at `pointer`, written as a field path:
/// `/spec/template/spec/containers/0/image` is
/// `spec.template.spec.containers[0]`.
fn dotted_path(pointer: &str) -> String {
    let mut tokens: Vec<&str> = pointer.split('/').skip(1).collect();
    // The image field itself (`image`, or `image/reference` of a volume).
    if tokens.last() == Some(&"reference") {
        tokens.pop();
    }
    tokens.pop();
    let mut out = String::new();
    for t in tokens {
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{t}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&t.replace("~1", "/").replace("~0", "~"));
        }
    }
    out
}

/// [`pull_secret_names`] of the object's (first) pod spec; an object of a
/// WorkloadKind without one pulls with the `default` service account.
pub fn pull_secrets_of(object: &Value, layout: Layout<'_>) -> (Vec<String>, String) {
    match layout {
        Layout::PodSpec(pointer) => pull_secret_names(object, pointer),
        Layout::Workload(kind) => {
            let first = kind
                .pod_specs
                .iter()
                .find_map(|p| p.reach(object).ok()?.into_iter().next());
            match first {
                Some(spec) => pull_secret_names(object, &spec.pointer),
                None => (Vec::new(), "default".to_string()),
            }
        }
    }
}

/// Every image of the pod spec at `spec_pointer` in `object`. A missing spec
/// or list yields nothing (the API server validates presence); a container
/// without an image is skipped.
pub fn extract(object: &Value, spec_pointer: &str) -> Result<Vec<ImageSite>, ExtractError> {
    let Some(spec) = object.pointer(spec_pointer) else {
        return Ok(Vec::new());
    };
    let mut sites = Vec::new();
    for (field, list) in LISTS {
        let pointer = format!("{spec_pointer}/{field}");
        let containers = match spec.get(field) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(a)) => a,
            Some(_) => {
                return Err(ExtractError::Shape {
                    pointer,
                    expected: "a list of containers",
                });
            }
        };
        if containers.len() > MAX_CONTAINERS {
            return Err(ExtractError::TooManyContainers {
                list: pointer,
                max: MAX_CONTAINERS,
            });
        }
        for (i, c) in containers.iter().enumerate() {
            let at = format!("{pointer}/{i}/image");
            let Some(image) = image_string(c.get("image"), &at)? else {
                continue;
            };
            sites.push(ImageSite {
                image,
                container: name_of(c),
                list,
                pointer: at,
            });
        }
    }
    sites.extend(volume_images(spec, spec_pointer)?);
    Ok(sites)
}

/// The image at `value`, `None` when absent or empty (the API server
/// validates presence; a workload template may leave it to be defaulted).
fn image_string(value: Option<&Value>, pointer: &str) -> Result<Option<String>, ExtractError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ExtractError::Shape {
            pointer: pointer.to_string(),
            expected: "a string",
        }),
    }
}

fn name_of(item: &Value) -> String {
    item.get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The references of the spec's image volumes.
fn volume_images(spec: &Value, spec_pointer: &str) -> Result<Vec<ImageSite>, ExtractError> {
    let pointer = format!("{spec_pointer}/volumes");
    let volumes = match spec.get("volumes") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ExtractError::Shape {
                pointer,
                expected: "a list of volumes",
            });
        }
    };
    if volumes.len() > MAX_CONTAINERS {
        return Err(ExtractError::TooManyContainers {
            list: pointer,
            max: MAX_CONTAINERS,
        });
    }
    let mut sites = Vec::new();
    for (i, v) in volumes.iter().enumerate() {
        let source = match v.get("image") {
            None | Some(Value::Null) => continue,
            Some(s @ Value::Object(_)) => s,
            Some(_) => {
                return Err(ExtractError::Shape {
                    pointer: format!("{pointer}/{i}/image"),
                    expected: "an image volume source",
                });
            }
        };
        let at = format!("{pointer}/{i}/image/reference");
        let Some(image) = image_string(source.get("reference"), &at)? else {
            continue;
        };
        sites.push(ImageSite {
            image,
            container: name_of(v),
            list: ContainerList::Volume,
            pointer: at,
        });
    }
    Ok(sites)
}

/// The names in the pod spec's `imagePullSecrets` and its service account
/// (`default` when unset), bounded like container lists.
pub fn pull_secret_names(object: &Value, spec_pointer: &str) -> (Vec<String>, String) {
    let spec = object.pointer(spec_pointer);
    let names = spec
        .and_then(|s| s.get("imagePullSecrets"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .take(MAX_CONTAINERS)
                .filter_map(|r| r.get("name").and_then(Value::as_str))
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let account = spec
        .and_then(|s| s.get("serviceAccountName"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string();
    (names, account)
}

/// Whether the image carries a digest (`...@sha256:...`).
pub fn is_pinned(image: &str) -> bool {
    image.contains('@')
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sigil_api::snapshot::SnapshotWorkloadKind;

    use super::*;

    fn kinds(specs: &[serde_json::Value]) -> WorkloadKinds {
        let kinds: Vec<SnapshotWorkloadKind> = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| SnapshotWorkloadKind {
                name: format!("k{i}"),
                generation: 1,
                spec: serde_json::from_value(spec.clone()).unwrap(),
            })
            .collect();
        WorkloadKinds::compile(&kinds).unwrap()
    }

    #[test]
    fn a_rollout_s_pod_template_is_read_like_a_deployment_s() {
        let k = kinds(&[json!({"builtin": "ArgoRollout"})]);
        let rollouts = layout("argoproj.io", "Rollout", Some(&k)).unwrap();
        let rollout = json!({"spec": {"template": {"spec": {
            "serviceAccountName": "deployer", "imagePullSecrets": [{"name": "reg"}],
            "initContainers": [{"name": "init", "image": "i:1"}],
            "containers": [{"name": "app", "image": "a:1"}]}}}});
        let sites = extract_from(&rollout, rollouts).unwrap();
        let got: Vec<_> = sites
            .iter()
            .map(|s| (s.image.as_str(), s.list, s.pointer.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "i:1",
                    ContainerList::Init,
                    "/spec/template/spec/initContainers/0/image"
                ),
                (
                    "a:1",
                    ContainerList::Regular,
                    "/spec/template/spec/containers/0/image"
                ),
            ]
        );
        assert_eq!(
            pull_secrets_of(&rollout, rollouts),
            (vec!["reg".to_string()], "deployer".to_string())
        );
        assert!(layout("argoproj.io", "Experiment", Some(&k)).is_none());
        let unnamed = json!({"spec": {"template": {"spec": {"containers": [{"image": "a:1"}]}}}});
        assert_eq!(
            extract_from(&unnamed, rollouts).unwrap()[0].container,
            "spec.template.spec.containers[0]",
            "an unnamed container is named by its path"
        );
        assert!(matches!(
            layout("apps", "Deployment", Some(&k)),
            Some(Layout::PodSpec("/spec/template/spec"))
        ));
    }

    #[test]
    fn image_fields_are_found_with_their_concrete_path_and_pointer() {
        let k = kinds(&[json!({"builtin": "TektonTask"})]);
        let tasks = layout("tekton.dev", "Task", Some(&k)).unwrap();
        let task = json!({"spec": {
            "steps": [{"name": "build", "image": "b:1"}, {"name": "script"}, {"name": "push", "image": "p:1"}],
            "stepTemplate": {"image": "t:1"}}});
        let sites = extract_from(&task, tasks).unwrap();
        let got: Vec<_> = sites
            .iter()
            .map(|s| (s.image.as_str(), s.container.as_str(), s.pointer.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("b:1", "spec.steps[0].image", "/spec/steps/0/image"),
                ("p:1", "spec.steps[2].image", "/spec/steps/2/image"),
                ("t:1", "spec.stepTemplate.image", "/spec/stepTemplate/image"),
            ]
        );
        assert!(sites.iter().all(|s| s.list == ContainerList::Field));
        assert_eq!(
            pull_secrets_of(&task, tasks),
            (vec![], "default".to_string())
        );
    }

    #[test]
    fn a_workload_object_of_the_wrong_shape_or_size_is_refused_with_the_place() {
        let k = kinds(&[
            json!({"builtin": "TektonTask"}),
            json!({"group": "example.dev", "version": "v1", "kind": "Job", "resource": "jobs",
                "podSpecs": ["spec.workers[*].template.spec"]}),
        ]);
        let task = layout("tekton.dev", "Task", Some(&k)).unwrap();
        let e = extract_from(&json!({"spec": {"steps": [{"image": 3}]}}), task).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/spec/steps/0/image is not a string; the object does not follow the Kubernetes schema"
        );
        let jobs = layout("example.dev", "Job", Some(&k)).unwrap();
        let e = extract_from(
            &json!({"spec": {"workers": [{"template": {"spec": "x"}}]}}),
            jobs,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("/spec/workers/0/template/spec is not a pod spec"),
            "{e}"
        );
        let many: Vec<_> = (0..=sigil_judge::workload_kind::MAX_MATCHES)
            .map(|_| json!({"image": "x"}))
            .collect();
        let e = extract_from(&json!({"spec": {"steps": many}}), task).unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.steps[*].image has more than 512 entries"),
            "{e}"
        );
        let worker = json!({"template": {"spec": {"containers": (0..300).map(|i| json!({"name": format!("c{i}"), "image": "x"})).collect::<Vec<_>>()}}});
        let e = extract_from(&json!({"spec": {"workers": vec![worker; 8]}}), jobs).unwrap_err();
        assert_eq!(e, ExtractError::TooManyImages { max: MAX_IMAGES });
    }

    #[test]
    fn a_cronjob_s_images_are_found_under_its_job_template() {
        let cj = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "a", "image": "x:1"}]}}}}}});
        let sites = extract(&cj, pod_spec_pointer("batch", "CronJob").unwrap_or("")).unwrap();
        assert_eq!(sites.len(), 1);
        assert_eq!(
            sites[0].pointer,
            "/spec/jobTemplate/spec/template/spec/containers/0/image"
        );
    }

    #[test]
    fn init_regular_and_ephemeral_containers_are_all_found_in_start_order() {
        let pod = json!({"spec": {
            "containers": [{"name": "app", "image": "app:1"}, {"name": "side", "image": "side:1"}],
            "initContainers": [{"name": "init", "image": "init:1"}],
            "ephemeralContainers": [{"name": "dbg", "image": "busybox"}]}});
        let sites = extract(&pod, "/spec").unwrap();
        let got: Vec<_> = sites
            .iter()
            .map(|s| (s.image.as_str(), s.list, s.pointer.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "init:1",
                    ContainerList::Init,
                    "/spec/initContainers/0/image"
                ),
                ("app:1", ContainerList::Regular, "/spec/containers/0/image"),
                ("side:1", ContainerList::Regular, "/spec/containers/1/image"),
                (
                    "busybox",
                    ContainerList::Ephemeral,
                    "/spec/ephemeralContainers/0/image"
                ),
            ]
        );
    }

    #[test]
    fn image_volumes_are_found_with_the_pointer_of_their_reference() {
        let pod = json!({"spec": {
            "containers": [{"name": "app", "image": "app:1"}],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "x"}},
                {"name": "models", "image": {"reference": "ghcr.io/org/models:v3", "pullPolicy": "IfNotPresent"}},
                {"name": "empty", "image": {}}]}});
        let sites = extract(&pod, "/spec").unwrap();
        let volume = sites
            .iter()
            .find(|s| s.list == ContainerList::Volume)
            .unwrap();
        assert_eq!(volume.image, "ghcr.io/org/models:v3");
        assert_eq!(volume.container, "models");
        assert_eq!(volume.pointer, "/spec/volumes/1/image/reference");
        assert_eq!(sites.len(), 2, "a volume without a reference has no image");
        let bad = json!({"spec": {"volumes": [{"name": "v", "image": "ghcr.io/x"}]}});
        assert!(matches!(
            extract(&bad, "/spec"),
            Err(ExtractError::Shape { .. })
        ));
        let many: Vec<_> = (0..=MAX_CONTAINERS)
            .map(|i| json!({"name": format!("v{i}"), "image": {"reference": "x"}}))
            .collect();
        assert!(matches!(
            extract(&json!({"spec": {"volumes": many}}), "/spec"),
            Err(ExtractError::TooManyContainers { .. })
        ));
    }

    #[test]
    fn a_container_list_that_is_not_a_list_is_refused_with_its_pointer() {
        let pod = json!({"spec": {"containers": {"name": "x"}}});
        let err = extract(&pod, "/spec").unwrap_err();
        assert!(err.to_string().contains("/spec/containers"), "{err}");
    }

    #[test]
    fn an_image_that_is_not_a_string_is_refused() {
        let pod = json!({"spec": {"containers": [{"name": "x", "image": 3}]}});
        assert!(matches!(
            extract(&pod, "/spec"),
            Err(ExtractError::Shape { .. })
        ));
    }

    #[test]
    fn too_many_containers_are_refused() {
        let many: Vec<_> = (0..=MAX_CONTAINERS)
            .map(|i| json!({"name": format!("c{i}"), "image": "x"}))
            .collect();
        let pod = json!({"spec": {"containers": many}});
        assert!(matches!(
            extract(&pod, "/spec"),
            Err(ExtractError::TooManyContainers { .. })
        ));
    }

    #[test]
    fn unsupported_kinds_have_no_pod_spec() {
        assert_eq!(pod_spec_pointer("", "ConfigMap"), None);
        assert_eq!(pod_spec_pointer("extensions", "Deployment"), None);
    }

    #[test]
    fn pull_secrets_and_service_account_default_sensibly() {
        let pod = json!({"spec": {"imagePullSecrets": [{"name": "reg"}, {}]}});
        assert_eq!(
            pull_secret_names(&pod, "/spec"),
            (vec!["reg".to_string()], "default".to_string())
        );
    }
}
