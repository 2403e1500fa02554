//! The admission decision, without HTTP: which requests to look at (kinds,
//! operations, subresources, namespaces, unchanged images), `/validate`
//! (every image's verdict, denial lines and warnings) and `/mutate` (tags
//! pinned to digests as a JSONPatch), within a deadline derived from the
//! webhook's `timeoutSeconds`.
//!
//! Namespace selection (opt-in label `policy.sigil.dev/include: "true"` by
//! default, or opt-out) is done by the webhook configuration's
//! `namespaceSelector`: an AdmissionReview carries no namespace labels. The
//! server additionally never acts in the namespaces of
//! [`AdmissionConfig::excluded_namespaces`] (kube-system and its own).
//!
//! Network: an image no policy selects is answered without any registry
//! request (`/mutate` pins only selected images, or with `--pin all` those
//! on registries some policy can select); `/validate` resolves nothing when
//! pinning is on — a selected image still written as a tag there was
//! changed after sigil's `/mutate` (or pinning did not run) and is denied
//! unless [`AdmissionConfig::allow_unpinned`].
//!
//! Workload templates (Deployment, StatefulSet, CronJob, …) are pinned only
//! with [`AdmissionConfig::pin_templates`]: by default they stay as written,
//! so GitOps tools that compare the live object with the manifest see no
//! drift. What runs is still what was verified: `/validate` resolves a
//! template's tags and verifies what they point to, and every Pod the
//! template produces is pinned by `/mutate` when it is created.
//!
//! `mode: audit` policies never take part in the answer: after `/validate`
//! answered, each image one of them selects is judged by them in the
//! background (its digest as admission found it, or its tag resolved
//! then), at most [`AUDIT_MODE_IN_FLIGHT`] at a time, and the verdicts are
//! logged and counted in `sigil_admission_audit_mode_verdicts_total`.
//!
//! Text from the object (image names) reaches logs and messages through
//! [`printable`], so it cannot forge log lines or denial lines.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use sigil_policy::render;
use sigil_registry::Digest;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::cache::{CacheConfig, CachedJudge, LookupError, SecretsOnce};
use crate::images::{self, ImageSite};
use crate::judge::{ImageJudge, ObjectInfo, Outcome, PinnedImage, PullSecretSource, Verdict};
use crate::metrics::{Metrics, RequestLabels};
use crate::review::{self, Answer, Invalid};
use crate::secrets::ObjectSecrets;
use crate::workload_kind::WorkloadKinds;

/// Which images `/mutate` pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMode {
    /// Images some policy selects.
    Matched,
    /// Every image.
    All,
    /// None (`/mutate` allows without a patch).
    Off,
}

/// Admission settings.
#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    /// The webhook configuration's `timeoutSeconds`.
    pub timeout: Duration,
    /// Kept free of that timeout to write the answer and cross the network.
    pub margin: Duration,
    /// Namespaces the server never acts in (allowed untouched).
    pub excluded_namespaces: Vec<String>,
    /// What `/mutate` pins.
    pub pin: PinMode,
    /// Pin workload templates too, not only Pods (`--pin-templates`).
    pub pin_templates: bool,
    /// Largest request body read.
    pub max_body_bytes: usize,
    /// With pinning on, admit a selected image that reaches `/validate` as
    /// a tag (verifying what the tag points to now) instead of denying it.
    pub allow_unpinned: bool,
    /// Caches.
    pub cache: CacheConfig,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            margin: Duration::from_secs(1),
            excluded_namespaces: vec!["kube-system".into()],
            pin: PinMode::Matched,
            pin_templates: false,
            max_body_bytes: 7 * 1024 * 1024,
            allow_unpinned: false,
            cache: CacheConfig::default(),
        }
    }
}

impl AdmissionConfig {
    /// The deadline of a review received at `start`.
    pub fn deadline(&self, start: Instant) -> Instant {
        start + self.timeout.saturating_sub(self.margin)
    }

    /// Whether `/mutate` pins the images of an object of this kind: Pods
    /// whenever pinning is on (the kubelet pulls what a Pod names), workload
    /// templates only with [`Self::pin_templates`].
    pub fn pins(&self, object: &ObjectInfo) -> bool {
        self.pin != PinMode::Off && (is_pod(object) || self.pin_templates)
    }
}

/// Whether the object is a Pod (rather than a workload with a template).
fn is_pod(object: &ObjectInfo) -> bool {
    object.group.is_empty() && object.kind == "Pod"
}

/// The two admission endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/validate`.
    Validate,
    /// `/mutate`.
    Mutate,
}

impl Endpoint {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Validate => "validate",
            Self::Mutate => "mutate",
        }
    }
}

/// The admission answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the object is admitted.
    pub allowed: bool,
    /// The denial message: a summary line, then one line per failing image.
    pub message: Option<String>,
    /// Admission warnings.
    pub warnings: Vec<String>,
    /// `/mutate`: (JSON pointer, pinned image) replacements.
    pub patch: Vec<(String, String)>,
    /// The metric label: `allowed`, `denied`, `warned`, `patched`, `skipped`.
    pub outcome: &'static str,
}

impl Decision {
    fn skip() -> Self {
        Self {
            allowed: true,
            message: None,
            warnings: Vec::new(),
            patch: Vec::new(),
            outcome: "skipped",
        }
    }

    fn deny(message: String) -> Self {
        Self {
            allowed: false,
            message: Some(message),
            warnings: Vec::new(),
            patch: Vec::new(),
            outcome: Outcome::Denied.label(),
        }
    }
}

/// What to do with a request.
#[derive(Debug)]
pub enum Plan {
    /// Allow untouched, for this reason (for logs).
    Skip(&'static str),
    /// Refuse: the object cannot be read.
    Refuse(String),
    /// Look at these images of this object.
    Check(Box<Checked>),
}

/// A request whose images must be looked at.
#[derive(Debug)]
pub struct Checked {
    /// The object.
    pub object: ObjectInfo,
    /// Its images.
    pub sites: Vec<ImageSite>,
}

/// The supported kind as a static label, or `other`.
pub fn kind_label(group: &str, kind: &str) -> &'static str {
    match (group, kind) {
        ("", "Pod") => "Pod",
        ("", "ReplicationController") => "ReplicationController",
        ("apps", "Deployment") => "Deployment",
        ("apps", "ReplicaSet") => "ReplicaSet",
        ("apps", "StatefulSet") => "StatefulSet",
        ("apps", "DaemonSet") => "DaemonSet",
        ("batch", "Job") => "Job",
        ("batch", "CronJob") => "CronJob",
        _ => "other",
    }
}

fn operation_label(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// Decides whether and what to look at in `req`; `kinds` are the
/// WorkloadKinds in force (kinds besides Kubernetes' own workloads).
pub fn plan(
    req: &AdmissionRequest<DynamicObject>,
    config: &AdmissionConfig,
    kinds: Option<&WorkloadKinds>,
) -> Plan {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Plan::Skip("operation is neither CREATE nor UPDATE");
    }
    match req.sub_resource.as_deref() {
        None | Some("") => {}
        Some("ephemeralcontainers") if req.kind.group.is_empty() && req.kind.kind == "Pod" => {}
        Some(_) => return Plan::Skip("subresource other than pods/ephemeralcontainers"),
    }
    let namespace = req.namespace.clone().unwrap_or_default();
    if config.excluded_namespaces.contains(&namespace) {
        return Plan::Skip("namespace excluded");
    }
    let Some(layout) = images::layout(&req.kind.group, &req.kind.kind, kinds) else {
        // The chart registers Kubernetes' own workloads only; any other kind
        // is sent because the controller added a WorkloadKind's rule. Until
        // the snapshot carrying that WorkloadKind is loaded (or after it was
        // withdrawn, until its rule goes), its images are unknown: refuse
        // rather than admit them unread.
        let group = if req.kind.group.is_empty() {
            "core".to_owned()
        } else {
            req.kind.group.clone()
        };
        return Plan::Refuse(format!(
            "sigil's webhook was sent an object of kind {} ({group}/{}) but its policy snapshot holds no \
             WorkloadKind for that kind, so it cannot tell where its images are: a \
             WorkloadKind created or deleted seconds ago has not reached every webhook replica \
             yet (retry shortly), or a rule for the kind was added to sigil's webhook \
             configurations by hand (remove it, or create a WorkloadKind for the kind)",
            req.kind.kind, req.kind.version
        ));
    };
    let Some(object) = req.object.as_ref() else {
        return Plan::Refuse(format!(
            "the {} request for {} has no object; the API server always sends one",
            operation_label(&req.operation),
            req.kind.kind
        ));
    };
    // The pod spec is in `data` (everything but metadata), so pointers
    // computed on it are valid from the object's root.
    let data = &object.data;
    let sites = match images::extract_from(data, layout) {
        Ok(s) => s,
        Err(e) => return Plan::Refuse(format!("cannot read the images: {e}")),
    };
    if req.operation == Operation::Update {
        let old: Vec<ImageSite> = req
            .old_object
            .as_ref()
            .and_then(|o| images::extract_from(&o.data, layout).ok())
            .unwrap_or_default();
        let unchanged = sites.iter().all(|s| old.iter().any(|o| o.image == s.image));
        if unchanged {
            return Plan::Skip("no image changed");
        }
    }
    if sites.is_empty() {
        return Plan::Skip("no images");
    }
    let (pull_secret_names, service_account) = images::pull_secrets_of(data, layout);
    let labels: BTreeMap<String, String> = object.metadata.labels.clone().unwrap_or_default();
    let name = object
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| req.name.clone());
    Plan::Check(Box::new(Checked {
        object: ObjectInfo {
            group: req.kind.group.clone(),
            version: req.kind.version.clone(),
            resource: req.resource.resource.clone(),
            sub_resource: req.sub_resource.clone().unwrap_or_default(),
            kind: req.kind.kind.clone(),
            namespace,
            name,
            labels,
            pull_secret_names,
            service_account,
            object: Arc::new(object.clone()),
        },
        sites,
    }))
}

/// One image's outcome in `/validate`.
#[derive(Debug)]
struct ImageOutcome {
    image: String,
    digest: Option<String>,
    /// `Err`: a cause that denies the image (resolution, deadline).
    verdict: Result<Arc<Verdict>, String>,
    note: Option<String>,
}

/// What `/validate` says about one image, in its words: whether it may run,
/// the reasons its denial line gives, and the warnings the answer carries
/// for it. [`Admission::judge_images`] gives one per image, and `/validate`
/// builds its message from them, so another caller (the Gatekeeper
/// provider) cannot word a verdict differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageAnswer {
    /// The image as written.
    pub image: String,
    /// Whether it may run.
    pub allowed: bool,
    /// What the verdict comes to.
    pub outcome: Outcome,
    /// The digest judged, when one was found (written or resolved).
    pub digest: Option<String>,
    /// `false` when the image could not be judged at all (its tag did not
    /// resolve, the deadline passed, pull secrets could not be read): its
    /// one reason is then that cause.
    pub judged: bool,
    /// When denied: the reasons, one line each, as the denial line joins
    /// them with `; `.
    pub reasons: Vec<String>,
    /// The admission warnings about it (`image X: ...`).
    pub warnings: Vec<String>,
    /// The policies that applied, for logs.
    pub policies: Vec<String>,
}

impl ImageAnswer {
    fn from_outcome(o: ImageOutcome) -> Self {
        let mut warnings: Vec<String> = match &o.verdict {
            Ok(v) => v
                .warnings
                .iter()
                .map(|w| render::image_warning(&printable(&o.image), &one_line(w)))
                .collect(),
            Err(_) => Vec::new(),
        };
        let (allowed, outcome, policies) = match &o.verdict {
            Ok(v) => (v.allowed, v.outcome(), v.policies.clone()),
            Err(_) => (false, Outcome::Denied, Vec::new()),
        };
        let reasons = match &o.verdict {
            _ if allowed => Vec::new(),
            Ok(v) if v.reasons.is_empty() => vec!["denied by policy".to_string()],
            Ok(v) => v.reasons.iter().map(|r| one_line(r)).collect(),
            Err(cause) => vec![cause.clone()],
        };
        if allowed {
            warnings.extend(o.note);
        }
        let outcome = if allowed && outcome == Outcome::Allowed && !warnings.is_empty() {
            Outcome::Warned
        } else {
            outcome
        };
        Self {
            allowed,
            outcome,
            digest: o.digest,
            judged: o.verdict.is_ok(),
            reasons,
            warnings,
            policies,
            image: o.image,
        }
    }
}

/// Flattens a multi-line reason so each failing image stays on one line.
fn one_line(s: &str) -> String {
    printable(
        &s.split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// The longest line of a denial about one image, and the longest denial:
/// an object may have 2,048 images with 128 rejected signatures each, and
/// the message travels in the AdmissionReview answer, events and logs.
const MAX_LINE_BYTES: usize = 4 << 10;
const MAX_MESSAGE_BYTES: usize = 32 << 10;

/// `s` cut to at most `max` bytes on a character boundary, saying so.
fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} more bytes)",
        s.get(..end).unwrap_or_default(),
        s.len() - end
    )
}

/// Adds the line of the `nth` failing image to a denial, each line and the
/// whole bounded; past the bound, one line says how many were left out.
fn append_line(lines: &mut String, line: &str, nth: usize) {
    const MORE: &str = "\n- … more failing images not listed (the message is at its size limit)";
    if lines.ends_with(MORE) {
        return;
    }
    let line = bounded(line, MAX_LINE_BYTES);
    if lines.len() + line.len() > MAX_MESSAGE_BYTES && nth > 1 {
        lines.push_str(MORE);
        return;
    }
    lines.push_str(&line);
}

/// `s` with control characters (line breaks, escapes) written as `\u{..}`:
/// text from an admitted object (an image name) can then neither start a
/// forged log line nor a forged line of a denial message.
pub fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                format!("\\u{{{:x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// When a judgement must be done, and the setting that deadline comes from,
/// which a denial for running out of time tells the user to raise.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    /// When the answer is due.
    pub at: Instant,
    /// The timeout it derives from.
    pub timeout: Duration,
    /// The part of that timeout kept to answer and cross the network.
    pub margin: Duration,
    /// The setting of that timeout, as a user finds it.
    pub setting: &'static str,
}

impl AdmissionConfig {
    /// The deadline of a review due at `at`, named as the webhook's.
    fn named(&self, at: Instant) -> Deadline {
        Deadline {
            at,
            timeout: self.timeout,
            margin: self.margin,
            setting: "the webhook's timeoutSeconds",
        }
    }
}

fn lookup_cause(what: &str, image: &str, e: &LookupError, deadline: &Deadline) -> String {
    match e {
        LookupError::Deadline { .. } => format!(
            "{what} {e}: registry {} may be slow or unreachable; retry, or raise {} (now {}s, of which sigil keeps {} ms as margin)",
            printable(crate::cache::registry_host(image)),
            deadline.setting,
            deadline.timeout.as_secs(),
            deadline.margin.as_millis()
        ),
        LookupError::Secrets(cause) => format!("cannot read pull secrets: {cause}"),
    }
}

/// Background judgements by `mode: audit` policies at once; past this an
/// image's audit-mode judgement is skipped (and counted in
/// `sigil_admission_audit_mode_skipped_total`) rather than queued without bound.
pub const AUDIT_MODE_IN_FLIGHT: usize = 64;

/// The admission logic: a cached judge, a pull-secret source, settings.
pub struct Admission<J, S> {
    cache: Arc<CachedJudge<J>>,
    secrets: Arc<S>,
    config: AdmissionConfig,
    metrics: Arc<Metrics>,
    audit_mode_slots: Arc<Semaphore>,
}

impl<J: ImageJudge, S: PullSecretSource> Admission<J, S> {
    /// Builds the admission logic around `judge`.
    pub fn new(judge: Arc<J>, secrets: S, config: AdmissionConfig, metrics: Arc<Metrics>) -> Self {
        Self {
            cache: Arc::new(CachedJudge::new(judge, &config.cache, metrics.clone())),
            secrets: Arc::new(secrets),
            config,
            metrics,
            audit_mode_slots: Arc::new(Semaphore::new(AUDIT_MODE_IN_FLIGHT)),
        }
    }

    /// Waits until no audit-mode judgement runs in the background (tests,
    /// and a shutdown that wants their counts).
    pub async fn audit_mode_settled(&self) {
        // Every slot free means no judgement holds one; a closed semaphore
        // cannot happen (it is never closed), so the error is ignored.
        let all = u32::try_from(AUDIT_MODE_IN_FLIGHT).unwrap_or(u32::MAX);
        let _ = self.audit_mode_slots.acquire_many(all).await;
    }

    /// The cached judge.
    pub fn cache(&self) -> &CachedJudge<J> {
        &self.cache
    }

    /// Where pull secrets come from.
    pub fn pull_secrets(&self) -> &Arc<S> {
        &self.secrets
    }

    /// The settings.
    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Whether the judge is ready.
    pub fn ready(&self) -> bool {
        self.cache.judge().ready()
    }

    /// Answers one request body: always an AdmissionReview, counted in metrics.
    pub async fn review(&self, endpoint: Endpoint, body: &[u8], start: Instant) -> Answer {
        let (review, labels) = match review::parse(body) {
            Err(invalid) => {
                tracing::warn!(endpoint = endpoint.label(), uid = %invalid.uid, error = %invalid, "unreadable admission review");
                (
                    Answer::invalid(&invalid),
                    RequestLabels {
                        endpoint: endpoint.label(),
                        operation: "unknown",
                        kind: "other",
                        decision: "invalid",
                    },
                )
            }
            Ok(req) => {
                let decision = self.decide(endpoint, &req, start).await;
                let labels = RequestLabels {
                    endpoint: endpoint.label(),
                    operation: operation_label(&req.operation),
                    kind: self.kind_label(&req.kind.group, &req.kind.kind),
                    decision: decision.outcome,
                };
                (respond(&req, &decision), labels)
            }
        };
        self.metrics.requests.get_or_create(&labels).inc();
        review
    }

    /// The decision for a parsed request.
    pub async fn decide(
        &self,
        endpoint: Endpoint,
        req: &AdmissionRequest<DynamicObject>,
        start: Instant,
    ) -> Decision {
        let deadline = self.config.deadline(start);
        let kinds = self.cache.judge().workload_kinds();
        match plan(req, &self.config, kinds.as_deref()) {
            Plan::Skip(why) => {
                tracing::debug!(uid = %req.uid, kind = %req.kind.kind, why, "admission skipped");
                Decision::skip()
            }
            Plan::Refuse(why) => Decision::deny(format!(
                "sigil denied {} {}: {why}",
                req.kind.kind.to_ascii_lowercase(),
                req.name
            )),
            Plan::Check(checked) => match endpoint {
                Endpoint::Validate => self.validate(&checked, deadline).await,
                Endpoint::Mutate => self.mutate(&checked, deadline).await,
            },
        }
    }

    /// The metric label of a kind: Kubernetes' own by name, any kind a
    /// WorkloadKind admits as `WorkloadKind` (their number is the
    /// cluster's, labels must stay few), else `other`.
    fn kind_label(&self, group: &str, kind: &str) -> &'static str {
        match kind_label(group, kind) {
            "other"
                if self
                    .cache
                    .judge()
                    .workload_kinds()
                    .is_some_and(|k| k.find(group, kind).is_some()) =>
            {
                "WorkloadKind"
            }
            label => label,
        }
    }

    /// Distinct images of the object, in order of appearance, with the
    /// containers that use each.
    fn distinct(sites: &[ImageSite]) -> Vec<(&str, Vec<&ImageSite>)> {
        let mut out: Vec<(&str, Vec<&ImageSite>)> = Vec::new();
        for s in sites {
            match out.iter_mut().find(|(i, _)| *i == s.image) {
                Some((_, v)) => v.push(s),
                None => out.push((&s.image, vec![s])),
            }
        }
        out
    }

    async fn judge_image(
        &self,
        image: &str,
        object: &ObjectInfo,
        secrets: &impl SecretsOnce,
        due: &Deadline,
    ) -> ImageOutcome {
        let judge = self.cache.judge();
        let mut outcome = ImageOutcome {
            image: image.to_string(),
            digest: None,
            verdict: Err(String::new()),
            note: None,
        };
        if !judge.matches(image, object) {
            outcome.verdict = Ok(Arc::new(judge.no_match(image)));
            return outcome;
        }
        let digest = if images::is_pinned(image) {
            let raw = image.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
            match Digest::parse(raw) {
                Ok(d) => d.to_string(),
                Err(e) => {
                    outcome.verdict = Err(one_line(&e.to_string()));
                    return outcome;
                }
            }
        } else if self.config.pins(object) && !self.config.allow_unpinned {
            // /mutate pinned every selected image; a tag here was written after
            // it ran, or it did not run. Resolving it now would verify one
            // digest and let the kubelet pull another.
            outcome.verdict = Err(
                "it reached validation as a tag, not a digest, although sigil's /mutate pins \
                 the images policies select: another mutating webhook changed it after sigil's \
                 (reinvocation), pinning did not run (webhook configuration, a failure), or a \
                 policy changed in between. sigil denies it because the kubelet could pull a \
                 different image than the one verified; retry, fix the other webhook (or pin \
                 the image by digest), or allow it with --allow-unpinned (chart value \
                 webhook.allowUnpinned)"
                    .into(),
            );
            return outcome;
        } else {
            match self.cache.resolve(image, secrets, due.at).await {
                // A template left as written is not worth a warning on every
                // apply: its Pods are pinned when they are created.
                Ok(Ok(d)) if self.config.pin != PinMode::Off && !self.config.pins(object) => d,
                Ok(Ok(d)) => {
                    outcome.note = Some(format!(
                        "image {image} is not pinned to a digest; sigil verified {d}, what the tag pointed to at admission (the /mutate webhook pins tags)"
                    ));
                    d
                }
                Ok(Err(cause)) => {
                    outcome.verdict = Err(format!(
                        "cannot resolve the tag to a digest: {}",
                        one_line(&cause)
                    ));
                    return outcome;
                }
                Err(e) => {
                    outcome.verdict = Err(lookup_cause("resolving the tag", image, &e, due));
                    return outcome;
                }
            }
        };
        outcome.digest = Some(digest.clone());
        let pinned = PinnedImage {
            image: image.to_string(),
            digest,
        };
        outcome.verdict = self
            .cache
            .verdict(&pinned, object, secrets, due.at)
            .await
            .map_err(|e| lookup_cause("verification", image, &e, due));
        outcome
    }

    /// Judges `images` (distinct) of `object` as `/validate` does, by
    /// `due`, all at once (the cache's single flight and the registry
    /// clients' per-host bounds limit the work); each `mode: audit` policy
    /// that selects one judges it afterwards in the background. One answer
    /// per image, in order.
    pub async fn judge_images(
        &self,
        object: &ObjectInfo,
        images: &[&str],
        secrets: &impl SecretsOnce,
        due: &Deadline,
    ) -> Vec<ImageAnswer> {
        let outcomes = join_all(
            images
                .iter()
                .map(|image| self.judge_image(image, object, secrets, due)),
        )
        .await;
        for o in &outcomes {
            self.judge_audit_mode_later(object, &o.image, o.digest.as_deref());
        }
        outcomes
            .into_iter()
            .map(ImageAnswer::from_outcome)
            .collect()
    }

    async fn validate(&self, checked: &Checked, deadline: Instant) -> Decision {
        let object = &checked.object;
        let secrets = ObjectSecrets::new(
            self.secrets.as_ref(),
            object,
            self.cache.judge().signature_pull_secrets(),
        );
        let distinct = Self::distinct(&checked.sites);
        let images: Vec<&str> = distinct.iter().map(|(image, _)| *image).collect();
        let due = self.config.named(deadline);
        let answers = self.judge_images(object, &images, &secrets, &due).await;
        let mut lines = String::new();
        let mut failed = 0usize;
        let mut warnings = Vec::new();
        for ((_, sites), a) in distinct.iter().zip(answers) {
            let containers = sites
                .iter()
                .map(|s| format!("{} {}", s.list.label(), s.container))
                .collect::<Vec<_>>()
                .join(", ");
            tracing::info!(
                namespace = %printable(&object.namespace),
                kind = %printable(&object.kind),
                name = %printable(&object.name),
                image = %printable(&a.image),
                digest = a.digest.as_deref().unwrap_or("-"),
                policy = %a.policies.join(","),
                outcome = a.outcome.label(),
                "admission decision"
            );
            warnings.extend(a.warnings);
            if a.allowed {
                continue;
            }
            failed += 1;
            let at = a
                .digest
                .as_deref()
                .filter(|_| !images::is_pinned(&a.image))
                .map(|d| format!("{d}, "))
                .unwrap_or_default();
            let line = render::image_line(
                &printable(&a.image),
                &format!(" ({at}{})", printable(&containers)),
                &a.reasons,
            );
            append_line(&mut lines, &line, failed);
        }
        if let Some(note) = secrets.note() {
            warnings.push(note);
        }
        if failed == 0 {
            let outcome = if warnings.is_empty() {
                Outcome::Allowed
            } else {
                Outcome::Warned
            };
            return Decision {
                allowed: true,
                message: None,
                warnings,
                patch: Vec::new(),
                outcome: outcome.label(),
            };
        }
        let total = distinct.len();
        Decision {
            allowed: false,
            message: Some(format!(
                "{}{lines}",
                render::denial(&object.display(), failed, total)
            )),
            warnings,
            patch: Vec::new(),
            outcome: Outcome::Denied.label(),
        }
    }

    async fn mutate(&self, checked: &Checked, deadline: Instant) -> Decision {
        let object = &checked.object;
        if !self.config.pins(object) {
            return Decision::skip();
        }
        let judge = self.cache.judge();
        let secrets = ObjectSecrets::new(
            self.secrets.as_ref(),
            object,
            judge.signature_pull_secrets(),
        );
        let distinct: Vec<_> = Self::distinct(&checked.sites)
            .into_iter()
            .filter(|(image, _)| !images::is_pinned(image))
            .filter(|(image, _)| match self.config.pin {
                PinMode::Off => false,
                // Never a registry no policy can select: those stay tags.
                PinMode::All => judge.matches(image, object) || judge.registry_permitted(image),
                PinMode::Matched => judge.matches(image, object),
            })
            .collect();
        if distinct.is_empty() {
            return Decision::skip();
        }
        let resolved = join_all(
            distinct
                .iter()
                .map(|(image, _)| self.cache.resolve(image, &secrets, deadline)),
        )
        .await;
        let mut patch = Vec::new();
        let mut lines = String::new();
        let mut failed = 0usize;
        for ((image, sites), r) in distinct.iter().zip(resolved) {
            let cause = match r {
                Ok(Ok(digest)) => {
                    patch.extend(
                        sites
                            .iter()
                            .map(|s| (s.pointer.clone(), format!("{image}@{digest}"))),
                    );
                    continue;
                }
                Ok(Err(cause)) => one_line(&cause),
                Err(e) => {
                    lookup_cause("resolving the tag", image, &e, &self.config.named(deadline))
                }
            };
            failed += 1;
            let line = format!(
                "\n- image {}: cannot pin the tag to a digest: {cause}",
                printable(image)
            );
            append_line(&mut lines, &line, failed);
        }
        if failed > 0 {
            return Decision::deny(format!(
                "sigil denied {}: {failed} image(s) could not be resolved to a digest{lines}",
                object.display()
            ));
        }
        Decision {
            allowed: true,
            message: None,
            warnings: Vec::new(),
            patch,
            outcome: "patched",
        }
    }
}

impl<J: ImageJudge, S: PullSecretSource> Admission<J, S> {
    /// Judges `image` of `object` by the `mode: audit` policies that select
    /// it, in the background (the answer never waits for it): at `digest`
    /// when admission found one, else at what its tag resolves to. Logs and
    /// counts each policy's verdict.
    fn judge_audit_mode_later(&self, object: &ObjectInfo, image: &str, digest: Option<&str>) {
        if !self.cache.judge().audit_mode_matches(image, object) {
            return;
        }
        let Ok(permit) = self.audit_mode_slots.clone().try_acquire_owned() else {
            self.metrics.audit_mode_skipped.inc();
            tracing::debug!(image = %printable(image), "audit-mode judgement skipped: too many in flight");
            return;
        };
        let cache = self.cache.clone();
        let secrets = self.secrets.clone();
        let metrics = self.metrics.clone();
        let object = object.clone();
        let image = image.to_string();
        let pinned_digest = digest.map(str::to_string).or_else(|| {
            images::is_pinned(&image)
                .then(|| image.rsplit_once('@').map(|(_, d)| d.to_string()))
                .flatten()
        });
        let deadline = self.config.deadline(Instant::now());
        tokio::spawn(async move {
            let _permit = permit;
            let judge = cache.judge();
            let secrets =
                ObjectSecrets::new(secrets.as_ref(), &object, judge.signature_pull_secrets());
            let digest = match pinned_digest {
                Some(d) => Ok(d),
                None => match cache.resolve(&image, &secrets, deadline).await {
                    Ok(Ok(d)) => Ok(d),
                    Ok(Err(cause)) => Err(format!(
                        "cannot resolve the tag to a digest: {}",
                        one_line(&cause)
                    )),
                    Err(e) => Err(format!("resolving the tag {e}")),
                },
            };
            let verdict = match digest {
                Ok(digest) => {
                    let pinned = PinnedImage {
                        image: image.clone(),
                        digest,
                    };
                    cache
                        .audit_mode_verdict(&pinned, &object, &secrets, deadline)
                        .await
                        .map_err(|e| format!("verification {e}"))
                }
                Err(cause) => Err(cause),
            };
            match verdict {
                Ok(v) => {
                    for r in &v.results {
                        metrics.audit_mode_verdict(&r.policy, r.outcome.label());
                        tracing::info!(
                            namespace = %printable(&object.namespace),
                            kind = %printable(&object.kind),
                            name = %printable(&object.name),
                            image = %printable(&image),
                            policy = %r.policy,
                            outcome = r.outcome.label(),
                            message = %one_line(&r.message),
                            "audit-mode decision (not enforced)"
                        );
                    }
                }
                Err(cause) => {
                    metrics.audit_mode_verdict("unknown", "error");
                    tracing::info!(
                        namespace = %printable(&object.namespace),
                        kind = %printable(&object.kind),
                        name = %printable(&object.name),
                        image = %printable(&image),
                        outcome = "error",
                        cause = %cause,
                        "audit-mode decision (not enforced)"
                    );
                }
            }
        });
    }
}

/// Writes `decision` as the AdmissionReview answering `req`.
pub fn respond(req: &AdmissionRequest<DynamicObject>, decision: &Decision) -> Answer {
    let mut answer = Answer::new(req.uid.clone(), true);
    answer.response.warnings.clone_from(&decision.warnings);
    if !decision.allowed {
        answer = answer.denied(decision.message.clone().unwrap_or_default());
    }
    if decision.patch.is_empty() {
        return answer;
    }
    let patched =
        review::replace_patch(&decision.patch).and_then(|p| answer.clone().with_patch(&p));
    match patched {
        Ok(a) => a,
        Err(e) => Answer::invalid(&Invalid {
            uid: req.uid.clone(),
            message: format!(
                "sigil could not write its JSONPatch ({e}); this is a bug, please report it"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn control_characters_from_objects_are_escaped() {
        assert_eq!(super::printable("ghcr.io/a:1"), "ghcr.io/a:1");
        assert_eq!(
            super::printable("a\nINFO forged\r\u{1b}[31m"),
            "a\\u{a}INFO forged\\u{d}\\u{1b}[31m"
        );
    }

    #[test]
    fn denial_lines_and_messages_are_bounded() {
        let mut lines = String::new();
        let long = format!("\n- image x: {}", "é".repeat(10_000));
        for n in 1..=100 {
            super::append_line(&mut lines, &long, n);
        }
        assert!(lines.len() <= super::MAX_MESSAGE_BYTES + super::MAX_LINE_BYTES + 200);
        assert!(lines.contains("more bytes)"), "a long line says it was cut");
        assert!(lines.ends_with("(the message is at its size limit)"));
        assert_eq!(lines.matches("not listed").count(), 1);
    }

    #[test]
    fn multi_line_reasons_become_one_line() {
        assert_eq!(
            one_line("no signature:\n  - a\n  - b\n"),
            "no signature: - a - b"
        );
    }
}
