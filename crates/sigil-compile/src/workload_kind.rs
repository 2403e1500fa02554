//! What sigil makes of a `WorkloadKind`: the built-in kinds it knows
//! ([`BUILTINS`]), the field paths that say where a kind's images are
//! ([`FieldPath`]: parsing, and expansion over an object, bounded), and the
//! checks that turn a spec into a [`CompiledKind`] the webhook can use
//! ([`compile_workload_kind`], [`WorkloadKinds`]).
//!
//! Precedence: a built-in gives group, version, kind, resource and
//! locations; a `version` in the spec replaces the built-in's version, and
//! `podSpecs`/`images` in the spec are looked at besides the built-in's
//! locations. Group, kind and resource of a built-in cannot be changed
//! (a spec that names other ones is refused, not silently corrected).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;
use sigil_api::WorkloadKindSpec;
use sigil_api::snapshot::{SnapshotError, SnapshotWorkloadKind};

/// Segments of one field path at most.
pub const MAX_SEGMENTS: usize = 32;
/// Bytes of one field path at most.
pub const MAX_PATH_BYTES: usize = 256;
/// Values one path reaches in one object at most: past this the object is
/// refused (as a Pod with more containers than sigil reads is).
pub const MAX_MATCHES: usize = 512;
/// Pod-spec paths and image paths of one kind at most.
pub const MAX_POD_SPECS: usize = 16;
/// Image paths of one kind at most.
pub const MAX_IMAGE_PATHS: usize = 32;

/// Groups of the workloads sigil always admits (Pods, Deployments, Jobs,
/// …): a WorkloadKind cannot name them, the chart's rules cover them.
const OWN_GROUPS: [&str; 3] = ["", "apps", "batch"];

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A field of an object (`spec`).
    Field(String),
    /// Every item of a list (`[*]`).
    EveryItem,
    /// One item of a list (`[2]`).
    Item(usize),
    /// Every value of a map (`*`).
    EveryValue,
}

/// A parsed field path: `spec.template.spec`, `spec.steps[*].image`,
/// `spec.replicaSpecs.*.template.spec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    segments: Vec<Segment>,
}

/// Why a field path does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("field path is empty; write field names joined by dots, as spec.template.spec")]
    Empty,
    /// The path is too long.
    #[error("field path `{0}` is longer than {MAX_PATH_BYTES} bytes or {MAX_SEGMENTS} segments")]
    TooLong(String),
    /// A character or bracket is out of place.
    #[error(
        "field path `{path}` is invalid at byte {at}: {problem}; write field names joined by dots, [*] for every item of a list, [N] for one, * for every value of a map (spec.steps[*].image)"
    )]
    Syntax {
        /// The path.
        path: String,
        /// Where.
        at: usize,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Where one value a path reached is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached<'a> {
    /// JSON pointer (RFC 6901) from the object's root.
    pub pointer: String,
    /// The path with every wildcard replaced by the item or key reached
    /// (`spec.steps[0].image`), for messages.
    pub path: String,
    /// The value.
    pub value: &'a Value,
}

/// A path reached more values than [`MAX_MATCHES`] in one object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "field path {path} reaches more than {MAX_MATCHES} values in this object; sigil refuses objects this large"
)]
pub struct TooManyMatches {
    /// The path, as written.
    pub path: String,
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'$'
}

impl FieldPath {
    /// Parses `text`; a leading `.` or `$.` (kubectl's JSONPath spelling)
    /// is accepted and dropped.
    pub fn parse(text: &str) -> Result<Self, PathError> {
        let trimmed = text.trim();
        let body = trimmed
            .strip_prefix("$.")
            .or_else(|| trimmed.strip_prefix('.'))
            .unwrap_or(trimmed);
        if body.is_empty() {
            return Err(PathError::Empty);
        }
        if body.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong(trimmed.to_owned()));
        }
        let syntax = |at: usize, problem: &'static str| PathError::Syntax {
            path: trimmed.to_owned(),
            at,
            problem,
        };
        let bytes = body.as_bytes();
        let mut segments = Vec::new();
        let mut i = 0;
        // A field (or `*`) is expected at the start and after each dot.
        let mut want_field = true;
        while i < bytes.len() {
            let b = bytes.get(i).copied().unwrap_or_default();
            if want_field {
                if b == b'*' {
                    segments.push(Segment::EveryValue);
                    i += 1;
                } else {
                    let start = i;
                    while bytes.get(i).copied().is_some_and(is_name_byte) {
                        i += 1;
                    }
                    if i == start {
                        return Err(syntax(i, "a field name was expected"));
                    }
                    let name = body.get(start..i).unwrap_or_default();
                    segments.push(Segment::Field(name.to_owned()));
                }
                want_field = false;
                continue;
            }
            match b {
                b'.' => {
                    want_field = true;
                    i += 1;
                }
                b'[' => {
                    let close = body
                        .get(i..)
                        .and_then(|rest| rest.find(']'))
                        .map(|n| i + n)
                        .ok_or_else(|| syntax(i, "a `[` is not closed"))?;
                    let inner = body.get(i + 1..close).unwrap_or_default();
                    if inner == "*" {
                        segments.push(Segment::EveryItem);
                    } else if !inner.is_empty() && inner.bytes().all(|c| c.is_ascii_digit()) {
                        let n = inner
                            .parse::<usize>()
                            .map_err(|_| syntax(i + 1, "the index is too large"))?;
                        segments.push(Segment::Item(n));
                    } else {
                        return Err(syntax(i + 1, "inside brackets only * or an index"));
                    }
                    i = close + 1;
                }
                _ => return Err(syntax(i, "a `.` or `[` was expected")),
            }
            if segments.len() > MAX_SEGMENTS {
                return Err(PathError::TooLong(trimmed.to_owned()));
            }
        }
        if want_field {
            return Err(syntax(bytes.len(), "the path ends with a dot"));
        }
        if segments.len() > MAX_SEGMENTS {
            return Err(PathError::TooLong(trimmed.to_owned()));
        }
        Ok(Self {
            text: body.to_owned(),
            segments,
        })
    }

    /// The path as written (without a leading `.` or `$.`).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Every value the path reaches in `object`, in document order. A field
    /// that is absent or null, or a value of another type than the path
    /// expects (a field on a list), reaches nothing: the kind's schema is
    /// the API server's to enforce, and a path that does not apply to one
    /// object is not an error. The bound is checked before each match is
    /// made, so an object with a million items under a wildcard costs
    /// [`MAX_MATCHES`] matches, not a million.
    pub fn reach<'a>(&self, object: &'a Value) -> Result<Vec<Reached<'a>>, TooManyMatches> {
        let mut current = vec![Reached {
            pointer: String::new(),
            path: String::new(),
            value: object,
        }];
        for segment in &self.segments {
            let mut next = Vec::new();
            let push = |next: &mut Vec<Reached<'a>>, make: &dyn Fn() -> Reached<'a>| {
                if next.len() >= MAX_MATCHES {
                    return Err(TooManyMatches {
                        path: self.text.clone(),
                    });
                }
                next.push(make());
                Ok(())
            };
            for at in &current {
                match (segment, at.value) {
                    (Segment::Field(name), Value::Object(map)) => {
                        if let Some(v) = map.get(name).filter(|v| !v.is_null()) {
                            push(&mut next, &|| at.child(name, &dotted(&at.path, name), v))?;
                        }
                    }
                    (Segment::EveryValue, Value::Object(map)) => {
                        for (key, v) in map.iter().filter(|(_, v)| !v.is_null()) {
                            push(&mut next, &|| at.child(key, &dotted(&at.path, key), v))?;
                        }
                    }
                    (Segment::EveryItem, Value::Array(items)) => {
                        for (n, v) in items.iter().enumerate() {
                            push(&mut next, &|| {
                                at.child(&n.to_string(), &format!("{}[{n}]", at.path), v)
                            })?;
                        }
                    }
                    (Segment::Item(n), Value::Array(items)) => {
                        if let Some(v) = items.get(*n) {
                            push(&mut next, &|| {
                                at.child(&n.to_string(), &format!("{}[{n}]", at.path), v)
                            })?;
                        }
                    }
                    _ => {}
                }
            }
            current = next;
        }
        Ok(current)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn dotted(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

impl<'a> Reached<'a> {
    fn child(&self, token: &str, path: &str, value: &'a Value) -> Self {
        Self {
            pointer: format!(
                "{}/{}",
                self.pointer,
                token.replace('~', "~0").replace('/', "~1")
            ),
            path: path.to_owned(),
            value,
        }
    }
}

/// A kind sigil knows where the images are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    /// Its name in `spec.builtin`.
    pub name: &'static str,
    /// API group.
    pub group: &'static str,
    /// Version registered when the spec gives none.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural resource.
    pub resource: &'static str,
    /// Field paths of pod specs.
    pub pod_specs: &'static [&'static str],
    /// Field paths of images.
    pub images: &'static [&'static str],
}

/// The built-in kinds.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "ArgoRollout",
        group: "argoproj.io",
        version: "v1alpha1",
        kind: "Rollout",
        resource: "rollouts",
        pod_specs: &["spec.template.spec"],
        images: &[],
    },
    Builtin {
        name: "KnativeService",
        group: "serving.knative.dev",
        version: "v1",
        kind: "Service",
        resource: "services",
        pod_specs: &["spec.template.spec"],
        images: &[],
    },
    Builtin {
        name: "KnativeConfiguration",
        group: "serving.knative.dev",
        version: "v1",
        kind: "Configuration",
        resource: "configurations",
        pod_specs: &["spec.template.spec"],
        images: &[],
    },
    Builtin {
        name: "TektonTask",
        group: "tekton.dev",
        version: "v1",
        kind: "Task",
        resource: "tasks",
        pod_specs: &[],
        images: &[
            "spec.steps[*].image",
            "spec.sidecars[*].image",
            "spec.stepTemplate.image",
        ],
    },
    Builtin {
        name: "TektonTaskRun",
        group: "tekton.dev",
        version: "v1",
        kind: "TaskRun",
        resource: "taskruns",
        pod_specs: &[],
        images: &[
            "spec.taskSpec.steps[*].image",
            "spec.taskSpec.sidecars[*].image",
            "spec.taskSpec.stepTemplate.image",
        ],
    },
    Builtin {
        name: "KubeVirtVirtualMachine",
        group: "kubevirt.io",
        version: "v1",
        kind: "VirtualMachine",
        resource: "virtualmachines",
        pod_specs: &[],
        images: &["spec.template.spec.volumes[*].containerDisk.image"],
    },
];

/// The built-in named `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// A WorkloadKind ready to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledKind {
    /// The WorkloadKind's name.
    pub name: String,
    /// API group.
    pub group: String,
    /// Version the webhook registers for.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource.
    pub resource: String,
    /// Pod specs in the object.
    pub pod_specs: Vec<FieldPath>,
    /// Image references in the object.
    pub images: Vec<FieldPath>,
}

impl CompiledKind {
    /// `group/version/Kind`.
    pub fn gvk(&self) -> String {
        format!("{}/{}/{}", self.group, self.version, self.kind)
    }
}

/// Why a WorkloadKind is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    /// `builtin` names no built-in.
    #[error("builtin `{0}` is not one sigil knows; use one of {list}, or leave builtin out and give group, version, kind, resource and paths", list = builtin_names())]
    UnknownBuiltin(String),
    /// A field is missing or empty.
    #[error("{0} is required (or set builtin)")]
    Missing(&'static str),
    /// A field contradicts the built-in.
    #[error(
        "{field} `{given}` differs from builtin {builtin}'s `{expected}`; leave {field} out (only version may differ)"
    )]
    BuiltinMismatch {
        /// The field.
        field: &'static str,
        /// The value in the spec.
        given: String,
        /// The built-in.
        builtin: &'static str,
        /// The built-in's value.
        expected: &'static str,
    },
    /// A field is not a valid name of its sort.
    #[error("{field} `{value}` is not valid: {why}")]
    InvalidName {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        why: &'static str,
    },
    /// The kind is one sigil always admits.
    #[error(
        "group `{0}` holds Kubernetes' own workloads, which sigil always admits; a WorkloadKind is for other kinds"
    )]
    OwnGroup(String),
    /// No location.
    #[error("no podSpecs and no images: name where the kind's images are")]
    NoLocation,
    /// Too many paths.
    #[error("{field} has {count} paths, more than the {max} sigil reads")]
    TooManyPaths {
        /// `podSpecs` or `images`.
        field: &'static str,
        /// How many.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A path does not parse.
    #[error("{field}[{index}]: {source}")]
    Path {
        /// `podSpecs` or `images`.
        field: &'static str,
        /// The path's index.
        index: usize,
        /// Why.
        source: PathError,
    },
}

fn builtin_names() -> String {
    BUILTINS
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `s` is a DNS-1123 subdomain (an API group).
fn is_group(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `s` is a DNS-1035 label (a version or a plural resource).
fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.ends_with('-')
}

/// Whether `s` is a kind (`Rollout`: a letter, then letters and digits).
fn is_kind(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

fn given(field: &Option<String>) -> Option<&str> {
    field.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// Checks one identifying field against the built-in (if any) and returns
/// its value.
fn identity(
    field: &'static str,
    value: &Option<String>,
    from_builtin: Option<(&'static str, &'static str)>,
) -> Result<String, KindError> {
    match (given(value), from_builtin) {
        (Some(v), Some((name, expected))) if v != expected => Err(KindError::BuiltinMismatch {
            field,
            given: v.to_owned(),
            builtin: name,
            expected,
        }),
        (Some(v), _) => Ok(v.to_owned()),
        (None, Some((_, expected))) => Ok(expected.to_owned()),
        (None, None) => Err(KindError::Missing(field)),
    }
}

fn paths(
    field: &'static str,
    builtin: &[&str],
    spec: &[String],
    max: usize,
) -> Result<Vec<FieldPath>, KindError> {
    let count = builtin.len() + spec.len();
    if count > max {
        return Err(KindError::TooManyPaths { field, count, max });
    }
    let mut out: Vec<FieldPath> = Vec::new();
    for p in builtin.iter().copied() {
        // The built-ins' own paths are tested to parse.
        if let Ok(path) = FieldPath::parse(p) {
            out.push(path);
        }
    }
    for (index, text) in spec.iter().enumerate() {
        let path = FieldPath::parse(text).map_err(|source| KindError::Path {
            field,
            index,
            source,
        })?;
        if !out.contains(&path) {
            out.push(path);
        }
    }
    Ok(out)
}

/// Checks a WorkloadKind's spec and compiles it.
pub fn compile_workload_kind(
    name: &str,
    spec: &WorkloadKindSpec,
) -> Result<CompiledKind, KindError> {
    let builtin = match given(&spec.builtin) {
        Some(b) => Some(builtin(b).ok_or_else(|| KindError::UnknownBuiltin(b.to_owned()))?),
        None => None,
    };
    let group = identity("group", &spec.group, builtin.map(|b| (b.name, b.group)))?;
    let kind = identity("kind", &spec.kind, builtin.map(|b| (b.name, b.kind)))?;
    let resource = identity(
        "resource",
        &spec.resource,
        builtin.map(|b| (b.name, b.resource)),
    )?;
    let version = match given(&spec.version) {
        Some(v) => v.to_owned(),
        None => builtin
            .map(|b| b.version.to_owned())
            .ok_or(KindError::Missing("version"))?,
    };
    if OWN_GROUPS.contains(&group.as_str()) {
        return Err(KindError::OwnGroup(group));
    }
    if !is_group(&group) {
        return Err(KindError::InvalidName {
            field: "group",
            value: group,
            why: "an API group is lowercase DNS labels joined by dots (argoproj.io)",
        });
    }
    if !is_label(&version) {
        return Err(KindError::InvalidName {
            field: "version",
            value: version,
            why: "a version is a lowercase DNS label (v1alpha1)",
        });
    }
    if !is_label(&resource) {
        return Err(KindError::InvalidName {
            field: "resource",
            value: resource,
            why: "a resource is the lowercase plural name webhook rules use (rollouts)",
        });
    }
    if !is_kind(&kind) {
        return Err(KindError::InvalidName {
            field: "kind",
            value: kind,
            why: "a kind is a letter followed by letters and digits (Rollout)",
        });
    }
    let pod_specs = paths(
        "podSpecs",
        builtin.map_or(&[][..], |b| b.pod_specs),
        &spec.pod_specs,
        MAX_POD_SPECS,
    )?;
    let images = paths(
        "images",
        builtin.map_or(&[][..], |b| b.images),
        &spec.images,
        MAX_IMAGE_PATHS,
    )?;
    if pod_specs.is_empty() && images.is_empty() {
        return Err(KindError::NoLocation);
    }
    Ok(CompiledKind {
        name: name.to_owned(),
        group,
        version,
        kind,
        resource,
        pod_specs,
        images,
    })
}

/// The WorkloadKinds of a snapshot, by group and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadKinds {
    by_kind: BTreeMap<(String, String), CompiledKind>,
}

impl WorkloadKinds {
    /// Compiles every WorkloadKind of a snapshot; two naming the same group
    /// and kind, or one that does not compile, refuse the snapshot (the
    /// controller publishes neither).
    pub fn compile(kinds: &[SnapshotWorkloadKind]) -> Result<Self, SnapshotError> {
        let mut by_kind = BTreeMap::new();
        for k in kinds {
            let compiled = compile_workload_kind(&k.name, &k.spec).map_err(|e| {
                SnapshotError::WorkloadKind {
                    name: k.name.clone(),
                    reason: e.to_string(),
                }
            })?;
            let key = (compiled.group.clone(), compiled.kind.clone());
            if let Some(other) = by_kind.insert(key, compiled) {
                return Err(SnapshotError::WorkloadKind {
                    name: k.name.clone(),
                    reason: format!(
                        "WorkloadKind `{}` already admits {}",
                        other.name,
                        other.gvk()
                    ),
                });
            }
        }
        Ok(Self { by_kind })
    }

    /// The kind admitted for `group`/`kind`, if any (any version: the
    /// webhook configuration converts requests to the registered one).
    pub fn find(&self, group: &str, kind: &str) -> Option<&CompiledKind> {
        self.by_kind.get(&(group.to_owned(), kind.to_owned()))
    }

    /// Every kind, by group and kind.
    pub fn iter(&self) -> impl Iterator<Item = &CompiledKind> {
        self.by_kind.values()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use serde_json::json;

    use super::*;

    fn spec(v: Value) -> WorkloadKindSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn paths_parse_fields_wildcards_and_indexes() {
        let p = FieldPath::parse("$.spec.replicaSpecs.*.template.spec").unwrap();
        assert_eq!(p.as_str(), "spec.replicaSpecs.*.template.spec");
        assert_eq!(
            FieldPath::parse(".spec.steps[*].image").unwrap().segments(),
            [
                Segment::Field("spec".into()),
                Segment::Field("steps".into()),
                Segment::EveryItem,
                Segment::Field("image".into()),
            ]
        );
        assert_eq!(
            FieldPath::parse("spec.list[2][*]").unwrap().segments()[2..],
            [Segment::Item(2), Segment::EveryItem]
        );
    }

    #[test]
    fn malformed_paths_say_where_and_how_to_write_them() {
        for (bad, at) in [
            ("spec..image", "byte 5"),
            ("spec.steps[", "byte 10"),
            ("spec.steps[x]", "byte 11"),
            ("spec.", "byte 5"),
            ("spec steps", "byte 4"),
            ("[*].image", "byte 0"),
        ] {
            let e = FieldPath::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains(at) && e.contains("spec.steps[*].image"),
                "{bad}: {e}"
            );
        }
        assert_eq!(FieldPath::parse(" "), Err(PathError::Empty));
        let long = vec!["a"; MAX_SEGMENTS + 1].join(".");
        assert!(matches!(
            FieldPath::parse(&long),
            Err(PathError::TooLong(_))
        ));
        assert!(matches!(
            FieldPath::parse(&"a".repeat(MAX_PATH_BYTES + 1)),
            Err(PathError::TooLong(_))
        ));
    }

    #[test]
    fn a_path_reaches_every_item_and_map_value_with_its_pointer() {
        let obj = json!({"spec": {
            "steps": [{"name": "build", "image": "b:1"}, {"name": "a/b~c", "image": "t:1"}],
            "replicas": {"Worker": {"image": "w:1"}, "PS": {"image": "p:1"}, "Off": null}}});
        let got: Vec<_> = FieldPath::parse("spec.steps[*].image")
            .unwrap()
            .reach(&obj)
            .unwrap()
            .into_iter()
            .map(|r| (r.pointer, r.path, r.value.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "/spec/steps/0/image".to_string(),
                    "spec.steps[0].image".to_string(),
                    json!("b:1")
                ),
                (
                    "/spec/steps/1/image".to_string(),
                    "spec.steps[1].image".to_string(),
                    json!("t:1")
                ),
            ]
        );
        let maps: Vec<_> = FieldPath::parse("spec.replicas.*.image")
            .unwrap()
            .reach(&obj)
            .unwrap()
            .into_iter()
            .map(|r| r.pointer)
            .collect();
        assert_eq!(
            maps,
            ["/spec/replicas/PS/image", "/spec/replicas/Worker/image"]
        );
        let escaped = json!({"m": {"a/b~c": {"image": "x"}}});
        let r = FieldPath::parse("m.*.image")
            .unwrap()
            .reach(&escaped)
            .unwrap();
        assert_eq!(r[0].pointer, "/m/a~1b~0c/image");
        assert_eq!(escaped.pointer(&r[0].pointer), Some(&json!("x")));
    }

    #[test]
    fn a_path_that_does_not_apply_reaches_nothing_and_a_huge_list_is_refused() {
        let obj = json!({"spec": {"steps": {"not": "a list"}, "x": null}});
        for p in [
            "spec.steps[*].image",
            "spec.x.image",
            "spec.missing",
            "spec.steps[3]",
        ] {
            assert!(
                FieldPath::parse(p).unwrap().reach(&obj).unwrap().is_empty(),
                "{p}"
            );
        }
        let many: Vec<_> = (0..=MAX_MATCHES).map(|_| json!({"image": "x"})).collect();
        let obj = json!({"spec": {"steps": many}});
        let e = FieldPath::parse("spec.steps[*].image")
            .unwrap()
            .reach(&obj)
            .unwrap_err();
        assert_eq!(e.path, "spec.steps[*].image");
    }

    #[test]
    fn every_builtin_compiles_with_its_own_paths() {
        for b in BUILTINS {
            for p in b.pod_specs.iter().chain(b.images) {
                FieldPath::parse(p).unwrap();
            }
            let k = compile_workload_kind("k", &spec(json!({"builtin": b.name}))).unwrap();
            assert_eq!(
                (k.group.as_str(), k.kind.as_str(), k.resource.as_str()),
                (b.group, b.kind, b.resource)
            );
            assert_eq!(
                k.pod_specs.len() + k.images.len(),
                b.pod_specs.len() + b.images.len()
            );
        }
    }

    #[test]
    fn a_builtin_takes_a_version_and_more_paths_but_not_another_kind() {
        let k = compile_workload_kind(
            "r",
            &spec(json!({"builtin": "ArgoRollout", "version": "v1beta1",
                "images": ["metadata.annotations.extra"], "podSpecs": ["spec.template.spec"]})),
        )
        .unwrap();
        assert_eq!(k.gvk(), "argoproj.io/v1beta1/Rollout");
        assert_eq!(k.pod_specs.len(), 1, "a repeated path is read once");
        assert_eq!(k.images[0].as_str(), "metadata.annotations.extra");
        let e = compile_workload_kind(
            "r",
            &spec(json!({"builtin": "ArgoRollout", "kind": "Experiment"})),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("differs from builtin ArgoRollout"),
            "{e}"
        );
        let e = compile_workload_kind("r", &spec(json!({"builtin": "Argo"}))).unwrap_err();
        assert!(e.to_string().contains("KnativeService"), "{e}");
    }

    #[test]
    fn a_custom_kind_needs_its_identity_valid_names_and_a_location() {
        let ok = json!({"group": "example.dev", "version": "v1", "kind": "Pipeline",
            "resource": "pipelines", "images": ["spec.steps[*].image"]});
        compile_workload_kind("p", &spec(ok.clone())).unwrap();
        let cases = [
            ("group", json!(null), "group is required"),
            ("group", json!("apps"), "Kubernetes' own workloads"),
            (
                "group",
                json!("Example.dev"),
                "group `Example.dev` is not valid",
            ),
            (
                "resource",
                json!("Pipelines"),
                "resource `Pipelines` is not valid",
            ),
            ("kind", json!("pipe-line"), "kind `pipe-line` is not valid"),
            ("version", json!(""), "version is required"),
            ("images", json!([]), "no podSpecs and no images"),
            ("images", json!(["spec..x"]), "images[0]: field path"),
        ];
        for (field, value, want) in cases {
            let mut v = ok.clone();
            v[field] = value;
            let e = compile_workload_kind("p", &spec(v))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{field}: {e}");
        }
        let mut v = ok;
        v["images"] = json!(vec!["spec.x"; MAX_IMAGE_PATHS + 1]);
        assert!(matches!(
            compile_workload_kind("p", &spec(v)),
            Err(KindError::TooManyPaths { .. })
        ));
    }

    #[test]
    fn two_workload_kinds_for_one_kind_refuse_the_snapshot() {
        let k = |name: &str| SnapshotWorkloadKind {
            name: name.into(),
            generation: 1,
            spec: spec(json!({"builtin": "KnativeService"})),
        };
        let kinds = WorkloadKinds::compile(&[k("a")]).unwrap();
        assert_eq!(
            kinds
                .find("serving.knative.dev", "Service")
                .map(|k| k.name.as_str()),
            Some("a")
        );
        assert!(kinds.find("", "Service").is_none());
        let e = WorkloadKinds::compile(&[k("a"), k("b")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("`a` already admits serving.knative.dev/v1/Service"),
            "{e}"
        );
    }
}
