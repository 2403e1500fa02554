//! ImagePolicyExceptions, checked and matched: which policies an exception
//! waives for which image of which workload, and until when.
//!
//! Whoever enforces exceptions (the webhook, the audit, `sigil policy
//! test`) compiles them with the admin's [`ExceptionRules`] and asks
//! [`Exceptions::waivers`] with its own clock at every judgement, so an
//! expired exception stops counting at its `expiresAt` in admission and in
//! reports alike, without waiting for anything to remove it.
//!
//! An exception is refused (and so waives nothing) when its namespace is
//! not one the admin allows, when its expiry does not parse or lies more
//! than the admin's maximum after the object's creation, or when a glob or
//! a name is invalid. A refused exception is an error naming the exception
//! and what to change; it never half-applies.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sigil_api::exception::{ImagePolicyException, ImagePolicyExceptionSpec, qualified_name};
use sigil_policy::glob::{Glob, ImageName};
use sigil_policy::model::{CompiledPolicy, ResourceInfo};
use sigil_verifier::trust::{format_rfc3339, parse_rfc3339};
use time::OffsetDateTime;

/// The longest `maxDuration` accepted: a year. Exceptions are meant to be
/// short; an admin who needs longer should change the policy.
pub const MAX_ALLOWED_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Where exceptions count and for how long, as the cluster's admin decides
/// (the chart's `exceptions.namespaces` and `exceptions.maxDuration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExceptionRules {
    namespaces: Namespaces,
    max_duration: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Namespaces {
    All,
    Only(BTreeSet<String>),
}

impl ExceptionRules {
    /// Exceptions count in `namespaces` (`*` for every namespace; none: no
    /// exception counts anywhere) for at most `max_duration` after their
    /// creation.
    pub fn new(namespaces: &[String], max_duration: Duration) -> Result<Self, String> {
        if max_duration.is_zero() || max_duration > MAX_ALLOWED_DURATION {
            return Err(format!(
                "the exceptions' maximum duration must be more than 0 and at most {}; got {}",
                format_duration(MAX_ALLOWED_DURATION),
                format_duration(max_duration)
            ));
        }
        let namespaces = if namespaces.iter().any(|n| n == "*") {
            Namespaces::All
        } else {
            Namespaces::Only(
                namespaces
                    .iter()
                    .filter(|n| !n.is_empty())
                    .cloned()
                    .collect(),
            )
        };
        Ok(Self {
            namespaces,
            max_duration,
        })
    }

    /// No exception counts anywhere.
    pub fn off() -> Self {
        Self {
            namespaces: Namespaces::Only(BTreeSet::new()),
            max_duration: Duration::from_secs(1),
        }
    }

    /// Whether exceptions may count in some namespace.
    pub fn enabled(&self) -> bool {
        match &self.namespaces {
            Namespaces::All => true,
            Namespaces::Only(set) => !set.is_empty(),
        }
    }

    /// Whether exceptions count in `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        match &self.namespaces {
            Namespaces::All => true,
            Namespaces::Only(set) => set.contains(namespace),
        }
    }

    /// The longest time an exception may run after its creation.
    pub fn max_duration(&self) -> Duration {
        self.max_duration
    }

    fn allowed_list(&self) -> String {
        match &self.namespaces {
            Namespaces::All => "every namespace".into(),
            Namespaces::Only(set) if set.is_empty() => "no namespace".into(),
            Namespaces::Only(set) => set.iter().cloned().collect::<Vec<_>>().join(", "),
        }
    }
}

/// Parses a duration written as a sum of `<n>d`, `<n>h`, `<n>m` and
/// `<n>s` (`168h`, `7d`, `1h30m`), as the chart's `exceptions.maxDuration`
/// is written.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "{text:?} is not a duration: write it as numbers with units d, h, m or s (168h, 7d, 1h30m)"
        )
    };
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    for c in text.trim().chars() {
        if let Some(d) = c.to_digit(10) {
            number = Some(
                number
                    .unwrap_or(0)
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u64::from(d)))
                    .ok_or_else(bad)?,
            );
            continue;
        }
        let unit = match c {
            'd' => 86_400,
            'h' => 3_600,
            'm' => 60,
            's' => 1,
            _ => return Err(bad()),
        };
        let n = number.take().ok_or_else(bad)?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(bad)?;
    }
    if number.is_some() || text.trim().is_empty() {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

/// `1d2h`, `36h`, `90m`, `45s`: a duration as [`parse_duration`] reads it.
pub fn format_duration(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

/// One workload an exception's `workloads` entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WorkloadPattern {
    kind: String,
    name: String,
}

/// An exception that counts (until [`Self::expires_at`]).
#[derive(Debug, Clone)]
pub struct CompiledException {
    /// `NAMESPACE/NAME`.
    pub name: String,
    /// Its namespace, the only one whose workloads it covers.
    pub namespace: String,
    /// The policy names it waives as verdicts name them: each
    /// ClusterImagePolicy's name and `NAMESPACE/NAME` for this namespace's
    /// ImagePolicy of the same name.
    policies: BTreeSet<String>,
    images: Vec<Glob>,
    workloads: Vec<WorkloadPattern>,
    /// When it stops counting.
    pub expires_at: OffsetDateTime,
    /// Its `reason`, if any.
    pub reason: Option<String>,
}

/// A policy waived for one image of one workload, by one exception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiver {
    /// The waived policy as verdicts name it.
    pub policy: String,
    /// The exception, `NAMESPACE/NAME`.
    pub exception: String,
    /// When the exception stops counting.
    pub expires_at: OffsetDateTime,
    /// The exception's reason.
    pub reason: Option<String>,
}

impl Waiver {
    /// What admission warns and the audit reports: `admitted by exception
    /// NS/NAME until T` (with the reason when the exception gives one).
    pub fn words(&self) -> String {
        let mut words = format!(
            "admitted by exception {} until {}",
            self.exception,
            format_rfc3339(self.expires_at)
        );
        if let Some(reason) = &self.reason {
            words.push_str(&format!(" ({reason})"));
        }
        words
    }

    /// The admission warning for this waiver: `policy P waived: admitted by
    /// exception NS/NAME until T`.
    pub fn warning(&self) -> String {
        format!("policy {} waived: {}", self.policy, self.words())
    }
}

/// Checks `exception` under `rules`. `now` stands in for a creation time
/// the object does not carry (a file given to `sigil policy test`).
pub fn compile(
    exception: &ImagePolicyException,
    rules: &ExceptionRules,
    now: OffsetDateTime,
) -> Result<CompiledException, String> {
    let namespace = exception.metadata.namespace.clone().unwrap_or_default();
    let name = exception.metadata.name.clone().unwrap_or_default();
    let qualified = qualified_name(&namespace, &name);
    let refused = |why: String| format!("ImagePolicyException {qualified} waives nothing: {why}");
    if namespace.is_empty() || name.is_empty() {
        return Err(refused(
            "it has no namespace or no name; an exception is a namespaced object".into(),
        ));
    }
    if !rules.allows(&namespace) {
        return Err(refused(format!(
            "exceptions count only in the namespaces the cluster's admin allows ({}); ask them to \
             add {namespace} to the chart's exceptions.namespaces, or create it there",
            rules.allowed_list()
        )));
    }
    let created = creation_time(&exception.metadata).unwrap_or(now);
    compile_spec(&namespace, &exception.spec, created, rules.max_duration)
        .map(
            |(policies, images, workloads, expires_at)| CompiledException {
                name: qualified.clone(),
                namespace: namespace.clone(),
                policies,
                images,
                workloads,
                expires_at,
                reason: exception.spec.reason.clone(),
            },
        )
        .map_err(refused)
}

type Compiled = (
    BTreeSet<String>,
    Vec<Glob>,
    Vec<WorkloadPattern>,
    OffsetDateTime,
);

fn compile_spec(
    namespace: &str,
    spec: &ImagePolicyExceptionSpec,
    created: OffsetDateTime,
    max: Duration,
) -> Result<Compiled, String> {
    let expires_at = parse_rfc3339(&spec.expires_at).ok_or_else(|| {
        format!(
            "spec.expiresAt {:?} is not an RFC 3339 time (2026-12-31T18:00:00Z)",
            spec.expires_at
        )
    })?;
    let latest = created + max;
    if expires_at > latest {
        return Err(format!(
            "spec.expiresAt {} is more than the cluster's maximum of {} after the exception was \
             created ({}); set it at or before {}",
            format_rfc3339(expires_at),
            format_duration(max),
            format_rfc3339(created),
            format_rfc3339(latest)
        ));
    }
    if spec.policies.is_empty() || spec.images.is_empty() || spec.workloads.is_empty() {
        return Err("spec.policies, spec.images and spec.workloads each need an entry".into());
    }
    let mut policies = BTreeSet::new();
    for p in &spec.policies {
        if p.is_empty() || p.contains('/') || p.contains('*') {
            return Err(format!(
                "spec.policies entry {p:?} is not a policy name; name a ClusterImagePolicy, or an \
                 ImagePolicy of this namespace, by its name (no globs)"
            ));
        }
        policies.insert(p.clone());
        policies.insert(sigil_api::image_policy::qualified_name(namespace, p));
    }
    let images = spec
        .images
        .iter()
        .map(|g| Glob::compile(g).map_err(|e| format!("spec.images: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let workloads = spec
        .workloads
        .iter()
        .map(|w| {
            if w.kind.is_empty() || w.name.is_empty() {
                Err("spec.workloads entries need a kind and a name (a glob such as web-*)".into())
            } else {
                Ok(WorkloadPattern {
                    kind: w.kind.clone(),
                    name: w.name.clone(),
                })
            }
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((policies, images, workloads, expires_at))
}

fn creation_time(meta: &ObjectMeta) -> Option<OffsetDateTime> {
    let t = meta.creation_timestamp.as_ref()?;
    OffsetDateTime::from_unix_timestamp(t.0.as_second()).ok()
}

/// The names a workload goes by for exceptions: the object itself, the
/// object that controls it (`ownerReferences` with `controller: true`),
/// and, for a ReplicaSet or a Pod of a ReplicaSet that a Deployment made
/// (named `DEPLOYMENT-HASH` with the `pod-template-hash` label), that
/// Deployment.
pub fn workload_names(kind: &str, meta: &ObjectMeta) -> Vec<(String, String)> {
    let mut names = Vec::new();
    let name = meta.name.clone().unwrap_or_default();
    if !name.is_empty() {
        names.push((kind.to_string(), name.clone()));
    }
    let hash = meta
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"))
        .filter(|h| !h.is_empty());
    let deployment_of = |replica_set: &str| {
        hash.and_then(|h| replica_set.strip_suffix(&format!("-{h}")))
            .filter(|d| !d.is_empty())
            .map(|d| ("Deployment".to_string(), d.to_string()))
    };
    if kind == "ReplicaSet" {
        names.extend(deployment_of(&name));
    }
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    if let Some(owner) = controller {
        names.push((owner.kind.clone(), owner.name.clone()));
        if owner.kind == "ReplicaSet" {
            names.extend(deployment_of(&owner.name));
        }
    }
    names
}

/// The exceptions that count, by namespace.
#[derive(Debug, Clone, Default)]
pub struct Exceptions {
    by_namespace: BTreeMap<String, Vec<CompiledException>>,
}

impl Exceptions {
    /// The set of `exceptions`.
    pub fn new(exceptions: impl IntoIterator<Item = CompiledException>) -> Self {
        let mut by_namespace: BTreeMap<String, Vec<CompiledException>> = BTreeMap::new();
        for e in exceptions {
            by_namespace.entry(e.namespace.clone()).or_default().push(e);
        }
        for list in by_namespace.values_mut() {
            list.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Self { by_namespace }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }

    /// Every exception, expired or not, by namespace and name.
    pub fn all(&self) -> impl Iterator<Item = &CompiledException> {
        self.by_namespace.values().flatten()
    }

    /// Whether `namespace` has any exception (expired or not): objects
    /// elsewhere need no further look.
    pub fn in_namespace(&self, namespace: &str) -> bool {
        self.by_namespace.contains_key(namespace)
    }

    /// The policies waived at `now` for `image` of the workload in
    /// `namespace` going by `workloads` ([`workload_names`]): one waiver
    /// per policy, from the exception that runs longest (then by name).
    pub fn waivers(
        &self,
        namespace: &str,
        workloads: &[(String, String)],
        image: &ImageName,
        now: OffsetDateTime,
    ) -> Vec<Waiver> {
        let Some(list) = self.by_namespace.get(namespace) else {
            return Vec::new();
        };
        let mut out: BTreeMap<&str, &CompiledException> = BTreeMap::new();
        for e in list {
            if now >= e.expires_at || !e.covers(workloads, image) {
                continue;
            }
            for p in &e.policies {
                let keep = out
                    .get(p.as_str())
                    .is_some_and(|held| held.expires_at >= e.expires_at);
                if !keep {
                    out.insert(p, e);
                }
            }
        }
        out.into_iter()
            .map(|(policy, e)| Waiver {
                policy: policy.to_string(),
                exception: e.name.clone(),
                expires_at: e.expires_at,
                reason: e.reason.clone(),
            })
            .collect()
    }
}

impl CompiledException {
    /// Whether it names `image` of a workload going by one of `workloads`.
    fn covers(&self, workloads: &[(String, String)], image: &ImageName) -> bool {
        self.images.iter().any(|g| g.matches(image))
            && self.workloads.iter().any(|w| {
                workloads
                    .iter()
                    .any(|(kind, name)| *kind == w.kind && name_matches(&w.name, name))
            })
    }

    /// Whether it waives the policy verdicts name `policy`.
    pub fn waives(&self, policy: &str) -> bool {
        self.policies.contains(policy)
    }
}

/// Whether `policy` is among those `waivers` waive.
pub fn is_waived(waivers: &[Waiver], policy: &CompiledPolicy) -> bool {
    waivers.iter().any(|w| w.policy == policy.name)
}

/// The waived policies among `policies` that select `image` of `resource`,
/// each with its waiver: those an admission answer reports as skipped.
pub fn waived_selecting<'p>(
    policies: impl Iterator<Item = &'p CompiledPolicy>,
    waivers: &[Waiver],
    image: &ImageName,
    resource: &ResourceInfo,
) -> Vec<(&'p CompiledPolicy, Waiver)> {
    if waivers.is_empty() {
        return Vec::new();
    }
    policies
        .filter(|p| p.matches_image(image) && p.matches_resource(resource))
        .filter_map(|p| {
            waivers
                .iter()
                .find(|w| w.policy == p.name)
                .map(|w| (p, w.clone()))
        })
        .collect()
}

/// Whether `name` matches `pattern`, where `*` stands for any run of
/// characters (and nothing else is special).
fn name_matches(pattern: &str, name: &str) -> bool {
    let p = pattern.as_bytes();
    let n = name.as_bytes();
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while let Some(&here) = n.get(ni) {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == here => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .is_some_and(|rest| rest.iter().all(|&c| c == b'*'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use sigil_api::exception::ExceptionWorkload;

    use super::*;

    fn at(text: &str) -> OffsetDateTime {
        parse_rfc3339(text).unwrap()
    }

    fn exception(ns: &str, name: &str, created: &str, expires: &str) -> ImagePolicyException {
        let mut e = ImagePolicyException::new(
            name,
            ImagePolicyExceptionSpec {
                policies: vec!["signed".into()],
                images: vec!["ghcr.io/vendor/sidecar*".into()],
                workloads: vec![ExceptionWorkload {
                    kind: "Deployment".into(),
                    name: "web-*".into(),
                }],
                expires_at: expires.into(),
                reason: Some("vendor signs next release".into()),
            },
        );
        e.metadata.namespace = Some(ns.into());
        e.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(at(created).unix_timestamp()).unwrap(),
        ));
        e
    }

    fn rules() -> ExceptionRules {
        ExceptionRules::new(&["team-a".into()], Duration::from_secs(7 * 86_400)).unwrap()
    }

    fn image(s: &str) -> ImageName {
        ImageName::parse(s).unwrap()
    }

    const NOW: &str = "2026-12-07T12:00:00Z";

    fn deployment(name: &str) -> Vec<(String, String)> {
        vec![("Deployment".into(), name.into())]
    }

    #[test]
    fn an_exception_waives_its_policies_for_its_images_and_workloads_until_it_expires() {
        let e = compile(
            &exception("team-a", "sidecar", NOW, "2026-12-08T12:00:00Z"),
            &rules(),
            at(NOW),
        )
        .unwrap();
        let set = Exceptions::new([e]);
        let sidecar = image("ghcr.io/vendor/sidecar:1.2");
        let waivers = set.waivers("team-a", &deployment("web-1"), &sidecar, at(NOW));
        let names: Vec<&str> = waivers.iter().map(|w| w.policy.as_str()).collect();
        assert_eq!(names, ["signed", "team-a/signed"]);
        assert_eq!(
            waivers[0].warning(),
            "policy signed waived: admitted by exception team-a/sidecar until \
             2026-12-08T12:00:00Z (vendor signs next release)"
        );
        // Another image, another workload, another namespace: nothing.
        assert!(
            set.waivers(
                "team-a",
                &deployment("web-1"),
                &image("ghcr.io/other/app:1"),
                at(NOW)
            )
            .is_empty()
        );
        assert!(
            set.waivers("team-a", &deployment("api"), &sidecar, at(NOW))
                .is_empty()
        );
        assert!(
            set.waivers(
                "team-a",
                &[("StatefulSet".into(), "web-1".into())],
                &sidecar,
                at(NOW)
            )
            .is_empty()
        );
        assert!(
            set.waivers("team-b", &deployment("web-1"), &sidecar, at(NOW))
                .is_empty()
        );
        // At its expiry and after: nothing.
        let expiry = at("2026-12-08T12:00:00Z");
        assert_eq!(
            set.waivers(
                "team-a",
                &deployment("web-1"),
                &sidecar,
                expiry - time::Duration::seconds(1)
            )
            .len(),
            2
        );
        assert!(
            set.waivers("team-a", &deployment("web-1"), &sidecar, expiry)
                .is_empty()
        );
    }

    #[test]
    fn an_exception_outside_the_allowed_namespaces_or_beyond_the_maximum_is_refused() {
        let err = compile(
            &exception("team-b", "sidecar", NOW, "2026-12-08T12:00:00Z"),
            &rules(),
            at(NOW),
        )
        .unwrap_err();
        assert!(err.contains("team-b/sidecar waives nothing"), "{err}");
        assert!(err.contains("(team-a)"), "{err}");
        let err = compile(
            &exception("team-a", "sidecar", NOW, "2026-12-15T12:00:01Z"),
            &rules(),
            at(NOW),
        )
        .unwrap_err();
        assert!(err.contains("maximum of 7d"), "{err}");
        assert!(err.contains("at or before 2026-12-14T12:00:00Z"), "{err}");
        // Exactly the maximum is accepted; the creation time counts, not
        // the time of the check.
        assert!(
            compile(
                &exception("team-a", "sidecar", NOW, "2026-12-14T12:00:00Z"),
                &rules(),
                at("2026-12-10T00:00:00Z"),
            )
            .is_ok()
        );
        let err = compile(
            &exception("team-a", "sidecar", NOW, "tomorrow"),
            &rules(),
            at(NOW),
        )
        .unwrap_err();
        assert!(err.contains("not an RFC 3339 time"), "{err}");
        let mut bad = exception("team-a", "sidecar", NOW, "2026-12-08T00:00:00Z");
        bad.spec.policies = vec!["team-b/other".into()];
        assert!(
            compile(&bad, &rules(), at(NOW))
                .unwrap_err()
                .contains("not a policy name")
        );
        let mut bad = exception("team-a", "sidecar", NOW, "2026-12-08T00:00:00Z");
        bad.spec.images = vec!["ghcr.io/bad image".into()];
        assert!(
            compile(&bad, &rules(), at(NOW))
                .unwrap_err()
                .contains("spec.images")
        );
        let off = ExceptionRules::off();
        assert!(!off.enabled());
        assert!(
            compile(
                &exception("team-a", "sidecar", NOW, "2026-12-08T00:00:00Z"),
                &off,
                at(NOW)
            )
            .unwrap_err()
            .contains("(no namespace)")
        );
    }

    #[test]
    fn of_two_exceptions_waiving_a_policy_the_one_running_longer_is_named() {
        let short = compile(
            &exception("team-a", "a-short", NOW, "2026-12-08T00:00:00Z"),
            &rules(),
            at(NOW),
        )
        .unwrap();
        let long = compile(
            &exception("team-a", "b-long", NOW, "2026-12-09T00:00:00Z"),
            &rules(),
            at(NOW),
        )
        .unwrap();
        let set = Exceptions::new([short, long]);
        let w = set.waivers(
            "team-a",
            &deployment("web-1"),
            &image("ghcr.io/vendor/sidecar:1"),
            at(NOW),
        );
        assert!(w.iter().all(|w| w.exception == "team-a/b-long"), "{w:?}");
    }

    #[test]
    fn a_pod_goes_by_its_controller_and_the_deployment_above_its_replica_set() {
        let meta = ObjectMeta {
            name: Some("web-7d4f9-abcde".into()),
            labels: Some([("pod-template-hash".to_string(), "7d4f9".to_string())].into()),
            owner_references: Some(vec![OwnerReference {
                kind: "ReplicaSet".into(),
                name: "web-7d4f9".into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        };
        assert_eq!(
            workload_names("Pod", &meta),
            [
                ("Pod".to_string(), "web-7d4f9-abcde".to_string()),
                ("ReplicaSet".into(), "web-7d4f9".into()),
                ("Deployment".into(), "web".into()),
            ]
        );
        // An owner that is not the controller does not count; a generated
        // name without its suffix is no name.
        let meta = ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                kind: "Job".into(),
                name: "batch".into(),
                controller: None,
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        };
        assert!(workload_names("Pod", &meta).is_empty());
    }

    #[test]
    fn names_match_with_stars_only() {
        for (p, n, want) in [
            ("web", "web", true),
            ("web", "web-1", false),
            ("web-*", "web-1", true),
            ("*", "anything", true),
            ("*-canary", "api-canary", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("web?", "web1", false),
        ] {
            assert_eq!(name_matches(p, n), want, "{p} vs {n}");
        }
    }

    #[test]
    fn durations_read_and_print_alike() {
        assert_eq!(
            parse_duration("168h").unwrap(),
            Duration::from_secs(604_800)
        );
        assert_eq!(
            parse_duration("1d2h30m").unwrap(),
            Duration::from_secs(95_400)
        );
        assert_eq!(format_duration(Duration::from_secs(95_400)), "1d2h30m");
        for bad in ["", "7", "h", "7w", "1.5h", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(ExceptionRules::new(&["*".into()], Duration::ZERO).is_err());
        assert!(ExceptionRules::new(&["*".into()], Duration::from_secs(400 * 86_400)).is_err());
        assert!(
            ExceptionRules::new(&["*".into()], Duration::from_secs(60))
                .unwrap()
                .allows("anything")
        );
    }
}
