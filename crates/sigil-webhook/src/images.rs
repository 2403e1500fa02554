//! Where the images of an admitted object live: the pod spec of each
//! supported kind, every container list in it (init, regular, ephemeral)
//! and its image volumes (`volumes[].image.reference`, Kubernetes 1.31+:
//! an OCI image or artifact the kubelet pulls like a container image), with
//! the JSON pointer `/mutate` patches.

use serde_json::Value;

/// Containers per list beyond which an object is refused (the API server's
/// own validation keeps real objects far below this).
pub const MAX_CONTAINERS: usize = 512;

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
}

impl ContainerList {
    /// The word messages use.
    pub fn label(self) -> &'static str {
        match self {
            Self::Init => "init container",
            Self::Regular => "container",
            Self::Ephemeral => "ephemeral container",
            Self::Volume => "image volume",
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

    use super::*;

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
