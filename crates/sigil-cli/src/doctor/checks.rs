//! The judgement of `sigil doctor`, without a cluster: each check takes
//! what was read (webhook configurations, the snapshot Secret, conditions,
//! namespaces, what the webhook answered) as plain values and returns a
//! [`Finding`] that says what is wrong and what to do. The cluster I/O is
//! in the parent module.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use sigil_verifier::trust::format_rfc3339;
use time::OffsetDateTime;

/// How a check came out, worst last (the report's status is the maximum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    /// Nothing to act on.
    Ok,
    /// Could not be checked from here; the summary says why.
    Skip,
    /// Works, but deserves a look.
    Warn,
    /// Broken: admissions fail, or do not enforce what the cluster says.
    Fail,
}

impl Status {
    /// The tag printed before a finding.
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Skip => "skip",
            Self::Warn => "warn",
            Self::Fail => "FAIL",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    /// The check's stable name (`ca-bundle`, `endpoints`, …).
    pub check: &'static str,
    /// Its outcome.
    pub status: Status,
    /// One line: what was found.
    pub summary: String,
    /// Supporting lines (one per object looked at).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// What to do, when something is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub(crate) fn new(check: &'static str, status: Status, summary: impl Into<String>) -> Self {
        Self {
            check,
            status,
            summary: summary.into(),
            details: Vec::new(),
            fix: None,
        }
    }

    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    pub(crate) fn details(mut self, details: Vec<String>) -> Self {
        self.details = details;
        self
    }
}

/// Where the API server sends admission requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `clientConfig.url` (the webhook runs outside the cluster).
    Url(String),
    /// `clientConfig.service`.
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
}

impl Target {
    /// The server called, whatever the path: the two webhooks share one
    /// server under `/validate` and `/mutate`.
    fn server(&self) -> String {
        match self {
            Self::Url(u) => url::Url::parse(u)
                .map(|p| p.origin().ascii_serialization())
                .unwrap_or_else(|_| u.clone()),
            Self::Service { .. } => self.to_string(),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Url(u) => write!(f, "{u}"),
            Self::Service {
                namespace,
                name,
                port,
            } => write!(f, "Service {namespace}/{name} port {port}"),
        }
    }
}

/// A label selector as the webhook configuration writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Selector {
    /// `matchLabels`.
    pub labels: BTreeMap<String, String>,
    /// `matchExpressions`: key, operator, values.
    pub expressions: Vec<(String, String, Vec<String>)>,
}

impl Selector {
    /// Whether `labels` are selected, as the API server decides it. An
    /// unknown operator selects nothing (the API server refuses it).
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let plain = self
            .labels
            .iter()
            .all(|(k, v)| labels.get(k).is_some_and(|l| l == v));
        plain
            && self.expressions.iter().all(|(key, op, values)| {
                let value = labels.get(key);
                match op.as_str() {
                    "In" => value.is_some_and(|v| values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// One of sigil's webhooks as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hook {
    /// `ValidatingWebhookConfiguration` or `MutatingWebhookConfiguration`.
    pub kind: &'static str,
    /// The configuration's name.
    pub config: String,
    /// The webhook's name (`validate.policy.sigil.dev`).
    pub name: String,
    /// Where it is called.
    pub target: Target,
    /// The PEM (or DER) bytes of `caBundle`; empty when unset.
    pub ca_bundle: Vec<u8>,
    /// `failurePolicy`.
    pub failure_policy: String,
    /// `timeoutSeconds`.
    pub timeout_seconds: i32,
    /// `namespaceSelector`.
    pub namespace_selector: Selector,
}

/// `webhook-configurations`: sigil's two webhooks exist and agree.
pub(crate) fn configurations(validating: Option<&Hook>, mutating: Option<&Hook>) -> Finding {
    const CHECK: &str = "webhook-configurations";
    let Some(v) = validating else {
        return Finding::new(
            CHECK,
            Status::Fail,
            "no ValidatingWebhookConfiguration has a webhook named validate.policy.sigil.dev: \
             nothing is enforced",
        )
        .fix(
            "install or upgrade the chart (helm upgrade --install sigil …); if it was removed on \
             purpose (break glass), reinstall it when the cause is fixed",
        );
    };
    let mut details = vec![describe(v)];
    let mut problems = Vec::new();
    match mutating {
        Some(m) => {
            details.push(describe(m));
            if m.target.server() != v.target.server() {
                problems.push(format!(
                    "the two webhooks call different servers ({} and {})",
                    v.target, m.target
                ));
            }
            if m.ca_bundle != v.ca_bundle {
                problems.push("the two webhooks carry different caBundles".to_owned());
            }
        }
        None => details.push(
            "no MutatingWebhookConfiguration with mutate.policy.sigil.dev: tags are not pinned \
             (the chart's webhook.pin: off)"
                .to_owned(),
        ),
    }
    if v.ca_bundle.is_empty() {
        problems.push(format!(
            "{} has no caBundle, so the API server cannot trust the webhook",
            v.name
        ));
    }
    if !problems.is_empty() {
        return Finding::new(CHECK, Status::Fail, problems.join("; "))
            .details(details)
            .fix(
                "the controller (or cert-manager's CA injector) writes the caBundle: check that \
                 it runs; with webhook.url give webhook.caBundle; then helm upgrade",
            );
    }
    let summary = format!(
        "{} {} calls {} (failurePolicy {}, timeout {}s)",
        v.kind, v.config, v.target, v.failure_policy, v.timeout_seconds
    );
    Finding::new(CHECK, Status::Ok, summary).details(details)
}

fn describe(h: &Hook) -> String {
    format!(
        "{} {}: webhook {} → {}, failurePolicy {}, timeoutSeconds {}",
        h.kind, h.config, h.name, h.target, h.failure_policy, h.timeout_seconds
    )
}

/// What was learned about the serving certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServingCert {
    /// Where the chain came from (`served at https://…`, `Secret ns/name`).
    pub source: String,
    /// The name the API server checks (`svc.ns.svc`, or the URL's host).
    pub server_name: String,
    /// The chain's verification against the caBundle: `Err` with the cause.
    pub verified: Result<(), String>,
    /// The leaf's subject and notAfter, when it parses.
    pub leaf: Option<(String, OffsetDateTime)>,
}

/// Certificates expiring sooner than this are worth a warning.
pub(crate) const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 3600);

/// `ca-bundle`: the serving certificate chains to the caBundle for the name
/// the API server calls.
pub(crate) fn ca_bundle(cert: Result<ServingCert, String>, now: OffsetDateTime) -> Finding {
    const CHECK: &str = "ca-bundle";
    let cert = match cert {
        Ok(c) => c,
        Err(why) => {
            return Finding::new(
                CHECK,
                Status::Fail,
                format!("cannot read the serving certificate: {why}"),
            )
            .fix(
                "start the webhook (its Deployment's pods, or the process behind webhook.url), \
                 and check that its TLS Secret exists",
            );
        }
    };
    let mut details = vec![format!(
        "certificate {} checked for {}",
        cert.source, cert.server_name
    )];
    if let Some((subject, not_after)) = &cert.leaf {
        details.push(format!(
            "leaf {subject}, valid until {}",
            format_rfc3339(*not_after)
        ));
    }
    if let Err(cause) = &cert.verified {
        return Finding::new(
            CHECK,
            Status::Fail,
            format!(
                "the serving certificate does not verify against the webhooks' caBundle for {}: \
                 {cause}; the API server refuses the webhook (x509 errors), and with \
                 failurePolicy Fail every admission in enforced namespaces fails",
                cert.server_name
            ),
        )
        .details(details)
        .fix(
            "put the CA that signed the serving certificate into the caBundle: the controller \
             does it for its own certificate (check its log), cert-manager's CA injector for \
             certManager.enabled, webhook.caBundle for webhook.url; then helm upgrade",
        );
    }
    if let Some((_, not_after)) = cert.leaf {
        let left = not_after - now;
        if left < time::Duration::try_from(EXPIRY_WARNING).unwrap_or(time::Duration::ZERO) {
            return Finding::new(
                CHECK,
                Status::Warn,
                format!(
                    "the serving certificate verifies but expires at {} ({} left)",
                    format_rfc3339(not_after),
                    human(left.try_into().unwrap_or_default())
                ),
            )
            .details(details)
            .fix("renew it: the controller rotates its own certificate; check that it runs");
        }
    }
    Finding::new(
        CHECK,
        Status::Ok,
        format!(
            "the serving certificate verifies against the caBundle for {}",
            cert.server_name
        ),
    )
    .details(details)
}

/// The Service's endpoints as EndpointSlices report them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoints {
    /// The Service.
    pub service: String,
    /// Addresses whose `ready` condition is not false.
    pub ready: Vec<String>,
    /// Addresses not ready.
    pub not_ready: Vec<String>,
}

/// `endpoints` for a webhook behind a Service.
pub(crate) fn endpoints(found: Result<Endpoints, String>) -> Finding {
    const CHECK: &str = "endpoints";
    let e = match found {
        Ok(e) => e,
        Err(why) => {
            return Finding::new(CHECK, Status::Fail, why).fix(
                "reinstall the chart: the webhook configurations name a Service that must exist",
            );
        }
    };
    let mut details: Vec<String> = e.ready.iter().map(|a| format!("ready {a}")).collect();
    details.extend(e.not_ready.iter().map(|a| format!("not ready {a}")));
    if e.ready.is_empty() {
        return Finding::new(
            CHECK,
            Status::Fail,
            format!(
                "Service {} has no ready endpoint ({} not ready): the API server cannot reach the \
                 webhook, and with failurePolicy Fail every admission in enforced namespaces fails",
                e.service,
                e.not_ready.len()
            ),
        )
        .details(details)
        .fix(
            "look at the webhook pods (kubectl get pods and kubectl describe pod): a pod is ready \
             once it has loaded the policy snapshot, so also check the controller",
        );
    }
    let status = if e.ready.len() == 1 {
        Status::Warn
    } else {
        Status::Ok
    };
    let finding = Finding::new(
        CHECK,
        status,
        format!(
            "Service {} has {} ready endpoint(s)",
            e.service,
            e.ready.len()
        ),
    )
    .details(details);
    if status == Status::Warn {
        finding.fix("one replica is a single point of failure for admissions: run two or more")
    } else {
        finding
    }
}

/// `endpoints` for a webhook registered by URL: whether anything answered
/// TLS there.
pub(crate) fn url_reachable(url: &str, reached: &Result<(), String>) -> Finding {
    const CHECK: &str = "endpoints";
    match reached {
        Ok(()) => Finding::new(
            CHECK,
            Status::Ok,
            format!("registered by URL (no Service): {url} answers TLS from here"),
        ),
        Err(why) => Finding::new(
            CHECK,
            Status::Fail,
            format!("registered by URL (no Service): nothing answers at {url}: {why}"),
        )
        .fix("start sigil-webhook there, or point webhook.url at where it runs"),
    }
}

/// How the API server answered a dry-run Pod create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DryRun {
    /// No namespace is enforced: nothing to try.
    NoNamespace,
    /// Created (dry run): the webhooks allowed it.
    Allowed { namespace: String },
    /// Refused with this status message.
    Refused { namespace: String, message: String },
}

/// `admission`: the webhook answers through the API server.
/// `endpoints_down`: the endpoints check found nothing to call, which is
/// then the cause of a call that timed out (a Service without endpoints
/// may drop the API server's connection rather than refuse it).
pub(crate) fn dry_run(outcome: &DryRun, endpoints_down: bool) -> Finding {
    const CHECK: &str = "admission";
    match outcome {
        DryRun::NoNamespace => Finding::new(
            CHECK,
            Status::Skip,
            "no namespace is enforced, so no dry-run Pod can reach the webhook",
        )
        .fix("label a namespace policy.sigil.dev/include=true (opt-in installs)"),
        DryRun::Allowed { namespace } => Finding::new(
            CHECK,
            Status::Ok,
            format!("a dry-run Pod in {namespace} was admitted: the webhook answers"),
        ),
        DryRun::Refused { namespace, message } => {
            let first = message.lines().next().unwrap_or_default();
            if message.contains("sigil denied") {
                return Finding::new(
                    CHECK,
                    Status::Ok,
                    format!(
                        "a dry-run Pod in {namespace} was judged by sigil (denied, as expected \
                         for a probe image no one signed): the webhook answers"
                    ),
                )
                .details(vec![first.to_owned()]);
            }
            if message.contains("failed calling webhook") {
                let (cause, fix) = webhook_call_failure(message, endpoints_down);
                return Finding::new(
                    CHECK,
                    Status::Fail,
                    format!(
                        "the API server could not call sigil's webhook for a dry-run Pod in \
                         {namespace}: {cause}"
                    ),
                )
                .details(vec![first.to_owned()])
                .fix(fix);
            }
            Finding::new(
                CHECK,
                Status::Warn,
                format!(
                    "a dry-run Pod in {namespace} was refused before sigil could answer: {first}"
                ),
            )
            .fix(
                "doctor needs `create pods` (dry run) in that namespace; run it with a context \
                 that may, or read the message above",
            )
        }
    }
}

/// The cause and fix of an API server's "failed calling webhook" message.
fn webhook_call_failure(message: &str, endpoints_down: bool) -> (&'static str, &'static str) {
    let timed_out = message.contains("deadline exceeded") || message.contains("timeout");
    if message.contains("x509") || message.contains("certificate") {
        (
            "TLS verification failed (the caBundle does not match the serving certificate)",
            "see the ca-bundle check; fix the caBundle, or the serving certificate",
        )
    } else if message.contains("connection refused")
        || message.contains("no endpoints available")
        || message.contains("service unavailable")
        || (timed_out && endpoints_down)
    {
        (
            "nothing answers (the webhook is down or has no ready endpoint)",
            "see the endpoints check: start the webhook; in an emergency, see the break-glass \
             procedure (webhook.failurePolicy)",
        )
    } else if timed_out {
        (
            "the webhook did not answer within timeoutSeconds",
            "check the webhook's logs and registry latency; raise webhook.timeoutSeconds",
        )
    } else {
        (
            "see the message",
            "read the message; check the webhook's logs",
        )
    }
}

/// What a webhook pod says about one registry host's credentials
/// (`/registry-credentials` of its admin port).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CredentialAnswer {
    /// The provider serving the host, if any.
    pub provider: Option<String>,
    /// Where the provider's identity comes from.
    pub source: String,
    /// Whether a token could be had.
    pub ok: bool,
    /// The token's remaining life, when there is one.
    #[serde(default)]
    pub seconds_left: Option<u64>,
    /// Why not, with the provider's fix.
    #[serde(default)]
    pub error: Option<String>,
}

/// One registry host and the answer about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CredentialFacts {
    /// The registry host a policy names.
    pub host: String,
    /// The webhook pod's answer, or why there is none.
    pub answer: Result<CredentialAnswer, String>,
}

/// Which cloud provider serves each registry host the policies name and
/// whether it can get a token now, as the webhook pod `asked` says: a
/// provider that cannot is a failure (its images are denied), a host no
/// provider serves is read with pull secrets or anonymously.
pub(crate) fn registry_credentials(asked: Option<&str>, facts: &[CredentialFacts]) -> Finding {
    const CHECK: &str = "registry-credentials";
    let Some(asked) = asked else {
        return Finding::new(
            CHECK,
            Status::Skip,
            "no running webhook pod in the cluster to ask which cloud credentials it has",
        );
    };
    if facts.is_empty() {
        return Finding::new(
            CHECK,
            Status::Ok,
            "the policies name no registry host without a pattern",
        );
    }
    let mut details = Vec::new();
    let mut failed = Vec::new();
    let mut served = 0;
    for f in facts {
        let line = match &f.answer {
            Err(why) => {
                failed.push(f.host.clone());
                format!("{}: cannot ask {asked}: {why}", f.host)
            }
            Ok(a) => match (&a.provider, a.ok) {
                (None, _) => format!(
                    "{}: no cloud provider serves it (pull secrets, or anonymous)",
                    f.host
                ),
                (Some(p), true) => {
                    served += 1;
                    let left = a
                        .seconds_left
                        .map(|s| format!(" ({} left)", human(Duration::from_secs(s))))
                        .unwrap_or_default();
                    format!("{}: {p} via {}: a token can be had{left}", f.host, a.source)
                }
                (Some(p), false) => {
                    served += 1;
                    failed.push(f.host.clone());
                    format!(
                        "{}: {p} via {}: no token: {}",
                        f.host,
                        a.source,
                        a.error.as_deref().unwrap_or("no reason given")
                    )
                }
            },
        };
        details.push(line);
    }
    let finding = if failed.is_empty() {
        Finding::new(
            CHECK,
            Status::Ok,
            format!(
                "{} registry host(s) named by policies, {served} served by a cloud provider with a token at hand (asked {asked})",
                facts.len()
            ),
        )
    } else {
        Finding::new(
            CHECK,
            Status::Fail,
            format!(
                "no registry credentials for {}: images there are denied",
                listed(&failed.iter().map(String::as_str).collect::<Vec<_>>())
            ),
        )
        .fix("follow the fix in the line of each host (docs/registries.md has a recipe per cloud)")
    };
    finding.details(details)
}

/// The policy snapshot Secret's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotFacts {
    /// The Secret (`ns/name`).
    pub secret: String,
    /// Its revision.
    pub revision: u64,
    /// When it was written.
    pub generated_at: Option<OffsetDateTime>,
    /// Policies in it: name → accepted generation.
    pub policies: BTreeMap<String, i64>,
    /// TrustRoots in it.
    pub trust_roots: usize,
    /// The built-in Sigstore root's instance and source (`tuf`,
    /// `embedded`), absent in v1 snapshots.
    pub sigstore: Option<(String, String)>,
    /// The TrustRoot marked default, if any.
    pub default_trust_root: Option<String>,
}

/// A ClusterImagePolicy's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conditioned {
    /// The object's name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// Conditions: type → (status, reason, message).
    pub conditions: BTreeMap<String, (String, String, String)>,
    /// `spec.mode` for policies; for TrustRoots whether `spec.remote` is set.
    pub note: String,
}

impl Conditioned {
    fn condition(&self, kind: &str) -> Option<&(String, String, String)> {
        self.conditions.get(kind)
    }

    fn ready(&self) -> bool {
        self.condition("Ready").is_some_and(|c| c.0 == "True")
    }
}

/// The controller's leader Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseFacts {
    /// `holderIdentity` (empty when released).
    pub holder: String,
    /// `renewTime`.
    pub renewed: Option<OffsetDateTime>,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
}

/// `policy-snapshot`: the Secret the controller writes holds every Ready
/// policy at its current generation.
pub(crate) fn snapshot(
    snapshot: Result<SnapshotFacts, String>,
    policies: &[Conditioned],
    lease: Option<&LeaseFacts>,
    now: OffsetDateTime,
) -> Finding {
    const CHECK: &str = "policy-snapshot";
    let controller = controller_state(lease, now);
    let s = match snapshot {
        Ok(s) => s,
        Err(why) => {
            let mut details = Vec::new();
            details.extend(controller.clone().map(|(_, l)| l));
            return Finding::new(
                CHECK,
                Status::Fail,
                format!("no policy snapshot: {why}; the webhook stays not ready without one"),
            )
            .details(details)
            .fix("the controller writes it: check that sigil-controller runs and read its log");
        }
    };
    let age = s
        .generated_at
        .map(|t| human((now - t).try_into().unwrap_or_default()))
        .unwrap_or_else(|| "unknown age".into());
    let mut details = vec![format!(
        "{} revision {} written {} ago, {} policies, {} trust roots",
        s.secret,
        s.revision,
        age,
        s.policies.len(),
        s.trust_roots
    )];
    let mut stale = Vec::new();
    for p in policies {
        // A generation the controller rejected stays out on purpose (the
        // last accepted one keeps being enforced); any other generation
        // newer than the snapshot's is waiting for the controller.
        let rejected = !p.ready()
            && p.condition("Ready").is_some()
            && p.observed_generation == Some(p.generation);
        if rejected {
            continue;
        }
        let state = if p.ready() && p.observed_generation == Some(p.generation) {
            "is Ready"
        } else {
            "was not compiled yet"
        };
        match s.policies.get(&p.name) {
            None => stale.push(format!(
                "ClusterImagePolicy {} (generation {}) {state} and is not in the snapshot",
                p.name, p.generation
            )),
            Some(g) if *g < p.generation => stale.push(format!(
                "ClusterImagePolicy {} {state} at generation {} but the snapshot holds generation {g}",
                p.name, p.generation
            )),
            _ => {}
        }
    }
    for name in s.policies.keys() {
        if !policies.iter().any(|p| &p.name == name) {
            stale.push(format!(
                "the snapshot still enforces ClusterImagePolicy {name}, which no longer exists"
            ));
        }
    }
    let controller_down = controller.as_ref().is_some_and(|(down, _)| *down);
    details.extend(controller.map(|(_, line)| line));
    if !stale.is_empty() {
        details.extend(stale.iter().cloned());
        let summary = format!(
            "the policy snapshot (revision {}, {age} old) is stale: {} of the cluster's policies \
             are not enforced as written",
            s.revision,
            stale.len()
        );
        let fix = if controller_down {
            "no controller holds its leader Lease: start sigil-controller (kubectl -n <sigil \
             namespace> get pods, its logs); the webhook keeps enforcing the last snapshot"
        } else {
            "the controller has not published the latest policies: read sigil-controller's log \
             (a Secret write refused, RBAC)"
        };
        return Finding::new(CHECK, Status::Fail, summary)
            .details(details)
            .fix(fix);
    }
    if controller_down {
        return Finding::new(
            CHECK,
            Status::Warn,
            format!(
                "the policy snapshot (revision {}) matches the policies, but no controller holds \
                 its leader Lease: later policy changes will not be enforced",
                s.revision
            ),
        )
        .details(details)
        .fix("start sigil-controller and read its log");
    }
    Finding::new(
        CHECK,
        Status::Ok,
        format!(
            "revision {} ({age} old) holds every Ready policy at its current generation",
            s.revision
        ),
    )
    .details(details)
}

/// Whether the controller is down, and a line saying who leads.
fn controller_state(lease: Option<&LeaseFacts>, now: OffsetDateTime) -> Option<(bool, String)> {
    let lease = lease?;
    if lease.holder.is_empty() {
        return Some((
            true,
            "the controller's leader Lease is released: no controller runs".to_owned(),
        ));
    }
    let Some(renewed) = lease.renewed else {
        return Some((
            false,
            format!("controller leader {} (renewal time unknown)", lease.holder),
        ));
    };
    let since: Duration = (now - renewed).try_into().unwrap_or_default();
    // Two lease durations: a live leader renews every few seconds.
    let down = since > lease.duration.saturating_mul(2);
    let line = if down {
        format!(
            "controller leader {} last renewed its Lease {} ago: it is not running",
            lease.holder,
            human(since)
        )
    } else {
        format!(
            "controller leader {} renewed its Lease {} ago",
            lease.holder,
            human(since)
        )
    };
    Some((down, line))
}

/// What one webhook replica says it enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loaded {
    /// The replica (a pod name, or a metrics URL).
    pub replica: String,
    /// `sigil_policy_snapshot_revision`, `Err` when it could not be read.
    pub revision: Result<Option<i64>, String>,
}

/// Reads `sigil_policy_snapshot_revision` from an OpenMetrics text.
pub(crate) fn revision_metric(text: &str) -> Option<i64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("sigil_policy_snapshot_revision")?;
        let value = rest.strip_prefix(' ')?;
        value.trim().parse::<i64>().ok()
    })
}

/// `webhook-loaded`: each replica enforces the Secret's revision.
pub(crate) fn loaded(
    secret_revision: Option<u64>,
    replicas: &[Loaded],
    skip: Option<&str>,
) -> Finding {
    const CHECK: &str = "webhook-loaded";
    if let Some(why) = skip {
        return Finding::new(CHECK, Status::Skip, why.to_owned()).fix(
            "give the webhook's metrics address with --webhook-metrics URL (repeatable) to check it",
        );
    }
    if replicas.is_empty() {
        return Finding::new(CHECK, Status::Fail, "no webhook replica runs")
            .fix("start the webhook (its Deployment)");
    }
    let mut details = Vec::new();
    let mut behind = 0usize;
    let mut unknown = 0usize;
    for r in replicas {
        match (&r.revision, secret_revision) {
            (Ok(Some(rev)), Some(want)) if i64::try_from(want).is_ok_and(|w| *rev >= w) => {
                details.push(format!("{}: revision {rev}", r.replica));
            }
            (Ok(Some(rev)), Some(want)) => {
                behind += 1;
                details.push(if *rev < 0 {
                    format!(
                        "{}: no snapshot loaded (the Secret holds {want})",
                        r.replica
                    )
                } else {
                    format!("{}: revision {rev}, the Secret holds {want}", r.replica)
                });
            }
            (Ok(Some(rev)), None) => details.push(format!("{}: revision {rev}", r.replica)),
            (Ok(None), _) => {
                unknown += 1;
                details.push(format!(
                    "{}: exports no sigil_policy_snapshot_revision (an older sigil-webhook)",
                    r.replica
                ));
            }
            (Err(why), _) => {
                unknown += 1;
                details.push(format!("{}: cannot read its metrics: {why}", r.replica));
            }
        }
    }
    if behind > 0 {
        return Finding::new(
            CHECK,
            Status::Fail,
            format!(
                "{behind} of {} webhook replica(s) enforce an older policy snapshot than the Secret's",
                replicas.len()
            ),
        )
        .details(details)
        .fix(
            "the webhook watches the Secret: read the lagging replica's log (an invalid snapshot \
             is refused, a watch refused by RBAC); restarting it makes it read the Secret again",
        );
    }
    if unknown > 0 {
        return Finding::new(
            CHECK,
            Status::Warn,
            format!(
                "{unknown} of {} webhook replica(s) could not be asked what they enforce",
                replicas.len()
            ),
        )
        .details(details);
    }
    Finding::new(
        CHECK,
        Status::Ok,
        format!(
            "{} webhook replica(s) enforce the latest policy snapshot",
            replicas.len()
        ),
    )
    .details(details)
}

fn condition_line(kind: &str, c: Option<&(String, String, String)>) -> String {
    match c {
        None => format!("{kind} unknown (no status yet)"),
        Some((status, reason, message)) if message.is_empty() => {
            format!("{kind}={status} ({reason})")
        }
        Some((status, reason, message)) => format!("{kind}={status} ({reason}): {message}"),
    }
}

/// `policies`: every ClusterImagePolicy is Ready.
/// The reasons sigil writes on the `Ready` condition of a policy-controller
/// object it serves (`policyController.serve`).
const SERVED_REASONS: &[&str] = &[
    "Enforced",
    "NotEnforced",
    "Converting",
    "NameTaken",
    "PolicyControllerPresent",
];

/// policy-controller's own ClusterImagePolicies (`policy.sigstore.dev`):
/// who enforces them. `sources` is `None` when that API is not served (no
/// policy-controller CRDs); `webhook` whether policy-controller's own
/// webhook configuration exists.
pub(crate) fn policy_controller(sources: Option<&[Conditioned]>, webhook: bool) -> Finding {
    const CHECK: &str = "policy-controller";
    let sources = sources.unwrap_or_default();
    if sources.is_empty() {
        return Finding::new(
            CHECK,
            Status::Ok,
            "no policy-controller ClusterImagePolicy (policy.sigstore.dev) exists",
        );
    }
    let served = |p: &&Conditioned| {
        p.condition("Ready")
            .is_some_and(|(_, reason, _)| SERVED_REASONS.contains(&reason.as_str()))
    };
    let details: Vec<String> = sources
        .iter()
        .map(|p| {
            format!(
                "{}: {}",
                p.name,
                condition_line("Ready", p.condition("Ready"))
            )
        })
        .collect();
    let n = sources.len();
    if !sources.iter().any(|p| served(&p)) {
        return if webhook {
            Finding::new(
                CHECK,
                Status::Ok,
                format!(
                    "{n} policy-controller ClusterImagePolicies are enforced by policy-controller \
                     (its webhook configuration policy.sigstore.dev exists), not by sigil"
                ),
            )
            .details(details)
        } else {
            Finding::new(
                CHECK,
                Status::Warn,
                format!(
                    "{n} policy-controller ClusterImagePolicies are enforced by nobody: \
                     policy-controller's webhook is gone and sigil does not serve them"
                ),
            )
            .details(details)
            .fix(
                "helm upgrade sigil with --set policyController.serve=true to enforce them as \
                 they are, or convert them with `sigil policy convert` (docs: migration)",
            )
        };
    }
    let refused: Vec<&Conditioned> = sources
        .iter()
        .filter(|p| {
            p.condition("Ready").is_some_and(|(status, reason, _)| {
                status != "True" && reason != "Converting" && reason != "PolicyControllerPresent"
            })
        })
        .collect();
    if !refused.is_empty() {
        let names: Vec<&str> = refused.iter().map(|p| p.name.as_str()).collect();
        return Finding::new(
            CHECK,
            Status::Fail,
            format!(
                "{} of {n} policy-controller ClusterImagePolicies are not enforced by sigil: {}",
                refused.len(),
                names.join(", ")
            ),
        )
        .details(details)
        .fix(
            "read each one's Ready condition (kubectl describe \
             clusterimagepolicies.policy.sigstore.dev NAME) and fix what it names",
        );
    }
    if webhook {
        return Finding::new(
            CHECK,
            Status::Warn,
            format!(
                "sigil serves policy-controller's objects, but policy-controller's webhook \
                 configuration policy.sigstore.dev exists, so sigil enforces none of the {n}"
            ),
        )
        .details(details)
        .fix("uninstall policy-controller; sigil takes over as soon as its webhook is gone");
    }
    Finding::new(
        CHECK,
        Status::Ok,
        format!("{n} policy-controller ClusterImagePolicies served by sigil"),
    )
    .details(details)
}

pub(crate) fn policies(items: &[Conditioned]) -> Finding {
    const CHECK: &str = "policies";
    if items.is_empty() {
        return Finding::new(
            CHECK,
            Status::Warn,
            "no ClusterImagePolicy exists: every image in an enforced namespace gets the \
             noMatchPolicy (deny by default)",
        )
        .fix("apply a ClusterImagePolicy (docs: policies)");
    }
    let mut details = Vec::new();
    let mut not_ready = 0usize;
    let mut behind = 0usize;
    for p in items {
        let ready = p.condition("Ready");
        let line = format!(
            "{} (mode {}, generation {}): {}",
            p.name,
            p.note,
            p.generation,
            condition_line("Ready", ready)
        );
        if !p.ready() {
            not_ready += 1;
        } else if p.observed_generation != Some(p.generation) {
            behind += 1;
        }
        details.push(line);
    }
    if not_ready > 0 {
        return Finding::new(
            CHECK,
            Status::Fail,
            format!(
                "{not_ready} of {} ClusterImagePolicies are not Ready: their last accepted version \
                 (or nothing) is enforced",
                items.len()
            ),
        )
        .details(details)
        .fix(
            "fix what each Ready condition names (sigil policy lint FILE shows it before \
             applying); kubectl get cip",
        );
    }
    if behind > 0 {
        return Finding::new(
            CHECK,
            Status::Warn,
            format!(
                "{behind} ClusterImagePolicies changed since the controller last compiled them"
            ),
        )
        .details(details)
        .fix("wait a few seconds; if it stays so, check that sigil-controller runs");
    }
    Finding::new(
        CHECK,
        Status::Ok,
        format!("{} ClusterImagePolicies, all Ready", items.len()),
    )
    .details(details)
}

/// `trust-roots`: every TrustRoot is Ready (and Fresh).
pub(crate) fn trust_roots(items: &[Conditioned]) -> Finding {
    const CHECK: &str = "trust-roots";
    if items.is_empty() {
        return Finding::new(
            CHECK,
            Status::Ok,
            "no TrustRoot: policies verify against the built-in Sigstore root",
        );
    }
    let mut details = Vec::new();
    let mut not_ready = 0usize;
    let mut stale = 0usize;
    for t in items {
        let fresh = t.condition("Fresh");
        if !t.ready() {
            not_ready += 1;
        } else if fresh.is_some_and(|c| c.0 == "False") {
            stale += 1;
        }
        let mut line = format!(
            "{}: {}",
            t.name,
            condition_line("Ready", t.condition("Ready"))
        );
        if fresh.is_some() {
            line.push_str(&format!("; {}", condition_line("Fresh", fresh)));
        }
        details.push(line);
    }
    if not_ready > 0 {
        return Finding::new(
            CHECK,
            Status::Fail,
            format!(
                "{not_ready} of {} TrustRoots are not Ready: policies naming them deny what they \
                 would verify",
                items.len()
            ),
        )
        .details(details)
        .fix("fix what each Ready condition names; kubectl describe trustroot NAME");
    }
    if stale > 0 {
        return Finding::new(
            CHECK,
            Status::Warn,
            format!(
                "{stale} TrustRoot(s) failed their last refresh: earlier material stays in force"
            ),
        )
        .details(details)
        .fix("see the Fresh condition: a mirror the controller cannot reach, or expired metadata");
    }
    Finding::new(
        CHECK,
        Status::Ok,
        format!("{} TrustRoots, all Ready", items.len()),
    )
    .details(details)
}

/// `tuf`: where the built-in Sigstore root comes from, and the remote
/// TrustRoots' freshness.
pub(crate) fn tuf(snapshot: Option<&SnapshotFacts>, trust_roots: &[Conditioned]) -> Finding {
    const CHECK: &str = "tuf";
    let remote: Vec<&Conditioned> = trust_roots.iter().filter(|t| t.note == "remote").collect();
    let mut details: Vec<String> = remote
        .iter()
        .map(|t| {
            format!(
                "TrustRoot {}: {}",
                t.name,
                condition_line("Fresh", t.condition("Fresh"))
            )
        })
        .collect();
    let stale: Vec<&str> = remote
        .iter()
        .filter(|t| t.condition("Fresh").is_none_or(|c| c.0 != "True"))
        .map(|t| t.name.as_str())
        .collect();
    let Some(s) = snapshot else {
        return Finding::new(
            CHECK,
            Status::Skip,
            "no policy snapshot to read the built-in Sigstore root's source from",
        )
        .details(details);
    };
    if let Some(name) = &s.default_trust_root {
        details.push(format!(
            "TrustRoot {name} is the cluster's default: the built-in Sigstore root is not used \
             for policies without trustRootRef"
        ));
    }
    let builtin = match &s.sigstore {
        None => {
            details.push("a v1 snapshot: the webhook uses its embedded Sigstore root".to_owned());
            Status::Warn
        }
        Some((instance, source)) if source == "tuf" => {
            details.push(format!(
                "built-in Sigstore root ({instance}) verified through TUF"
            ));
            Status::Ok
        }
        Some((instance, source)) => {
            details.push(format!(
                "built-in Sigstore root ({instance}) is the copy embedded in sigil ({source}): \
                 the controller runs offline (--tuf-offline) or never reached the TUF mirror"
            ));
            if s.default_trust_root.is_some() {
                Status::Ok
            } else {
                Status::Warn
            }
        }
    };
    if !stale.is_empty() {
        return Finding::new(
            CHECK,
            Status::Warn,
            format!("remote TrustRoot(s) not fresh: {}", stale.join(", ")),
        )
        .details(details)
        .fix("the controller cannot refresh them from their mirror: see their Fresh condition");
    }
    if builtin == Status::Warn {
        return Finding::new(
            CHECK,
            Status::Warn,
            "the built-in Sigstore root is not kept fresh through TUF: signatures made after \
             Sigstore rotates keys will fail",
        )
        .details(details)
        .fix(
            "let the controller reach the TUF mirror (egress), or keep a TrustRoot with \
             spec.repository up to date and make it the default",
        );
    }
    Finding::new(CHECK, Status::Ok, "trust material is fresh").details(details)
}

/// Most namespace names listed in one line.
const LISTED: usize = 20;

fn listed(names: &[&str]) -> String {
    let mut out = names
        .iter()
        .take(LISTED)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED {
        out.push_str(&format!(" … and {} more", names.len() - LISTED));
    }
    if out.is_empty() {
        out.push_str("(none)");
    }
    out
}

/// `namespaces`: which namespaces the webhook acts in. `excluded` are the
/// namespaces the server itself never acts in (kube-system, its own).
pub(crate) fn namespaces(
    selector: Option<&Selector>,
    namespaces: &[(String, BTreeMap<String, String>)],
    excluded: &[String],
) -> (Finding, Vec<String>) {
    const CHECK: &str = "namespaces";
    let Some(selector) = selector else {
        return (
            Finding::new(
                CHECK,
                Status::Skip,
                "no webhook configuration to read its selector",
            ),
            Vec::new(),
        );
    };
    let (enforced, other): (Vec<_>, Vec<_>) = namespaces
        .iter()
        .partition(|(name, labels)| !excluded.contains(name) && selector.matches(labels));
    let enforced: Vec<&str> = enforced.iter().map(|(n, _)| n.as_str()).collect();
    let other: Vec<&str> = other.iter().map(|(n, _)| n.as_str()).collect();
    let details = vec![
        format!("enforced: {}", listed(&enforced)),
        format!("not enforced: {}", listed(&other)),
    ];
    let names = enforced.iter().map(|n| (*n).to_owned()).collect();
    if enforced.is_empty() {
        return (
            Finding::new(
                CHECK,
                Status::Warn,
                format!("no namespace is enforced ({} not enforced)", other.len()),
            )
            .details(details)
            .fix(
                "opt a namespace in: kubectl label namespace NAME policy.sigil.dev/include=true \
                 (opt-out installs: every namespace without policy.sigil.dev/exclude=true)",
            ),
            names,
        );
    }
    (
        Finding::new(
            CHECK,
            Status::Ok,
            format!(
                "{} namespace(s) enforced, {} not",
                enforced.len(),
                other.len()
            ),
        )
        .details(details),
        names,
    )
}

/// `d` as a short human duration (`3s`, `4m`, `2h`, `5d`).
pub(crate) fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s}s"),
        120..7_200 => format!("{}m", s / 60),
        7_200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests;
