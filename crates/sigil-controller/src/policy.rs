//! The policy reconciler, for ClusterImagePolicies and for namespaces'
//! ImagePolicies alike ([`PolicyObject`]): resolves the Secrets and
//! ConfigMaps a policy refers to (in sigil's namespace for a
//! ClusterImagePolicy, in its own for an ImagePolicy) and its remote modules
//! ([`crate::remote_policy`]), compiles it with sigil-compile's
//! compiler, publishes the compiled version to the snapshot, and reports
//! `Ready` with `observedGeneration` plus an Event when that changes. A
//! rejected generation is not published; the snapshot keeps the last
//! accepted one. A policy's `keyless.url` and `ctlog.url` without
//! `trustRootRef` must name instances of the cluster's default trust root
//! (`TrustRootMismatch` otherwise); an ImagePolicy may name only the
//! registries the admin allows ([`crate::tenant_registries`];
//! `RegistryNotAllowed` otherwise). Changes of referenced Secrets and
//! ConfigMaps re-reconcile the policies that refer to them: in sigil's
//! namespace for ClusterImagePolicies, in the namespaces of ImagePolicies
//! through [`crate::tenant_references`] (and, where the controller may not
//! watch them, every [`RESYNC_REFERENCES`]); changes of TrustRoots the
//! policies that name them, a change of the default trust root every
//! policy, a change of the registries ClusterImagePolicies name every
//! ImagePolicy.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Client, ResourceExt};
use serde::Serialize;
use sigil_api::cip::{
    ClusterImagePolicy, ClusterImagePolicySpec, ClusterImagePolicyStatus, KeyRef, NotationRef,
    Policy,
};
use sigil_api::image_policy::{ImagePolicy, qualified_name};
use sigil_api::snapshot::SnapshotPolicy;
use sigil_compile::compile::{Offline, compile_policy, namespaced_problems, trust_root_refs};
use sigil_compile::default_root::check_instance_urls;
use sigil_compile::lint::rego_bound_problems;
use sigil_policy::model::CompiledPolicy;

use crate::context::{Context, TrustChange};
use crate::egress::Author;
use crate::error::{Error, Result};
use crate::prune::{Published, watch_and_prune};
use crate::status::{self, Verdict};

/// The controller's name in metrics.
pub const CONTROLLER: &str = "policy";
/// How often an accepted policy is checked again without a change.
const RESYNC: Duration = Duration::from_secs(3600);
/// How soon a policy with a missing reference is retried.
const RETRY_UNRESOLVED: Duration = Duration::from_secs(30);
/// How often an ImagePolicy's Secrets and ConfigMaps are read again anyway
/// (where the controller may not watch them, or watches too many
/// namespaces already).
pub const RESYNC_REFERENCES: Duration = Duration::from_secs(60);
/// How often the namespaces to watch and the registries ClusterImagePolicies
/// name are looked at again.
const TENANT_CHECK: Duration = Duration::from_secs(3);

/// What the reconciler needs of a policy kind.
pub trait PolicyObject: Published + Serialize {
    /// The kind as messages name it.
    const KIND: &'static str;
    /// Whether Secret and ConfigMap changes in sigil's namespace are watched
    /// (ClusterImagePolicy), or references are read again every
    /// [`RESYNC_REFERENCES`] (ImagePolicy).
    const WATCHES_REFERENCES: bool;
    /// The policy's spec.
    fn policy_spec(&self) -> &ClusterImagePolicySpec;
    /// Its status.
    fn policy_status(&self) -> Option<&ClusterImagePolicyStatus>;
    /// The namespace it applies in and reads references from: `None` for a
    /// ClusterImagePolicy (which reads them from sigil's namespace).
    fn scope(&self) -> Option<String>;
    /// An API through which its status is written.
    fn status_api(&self, client: Client) -> Api<Self>;
}

impl PolicyObject for ClusterImagePolicy {
    const KIND: &'static str = "ClusterImagePolicy";
    const WATCHES_REFERENCES: bool = true;
    fn policy_spec(&self) -> &ClusterImagePolicySpec {
        &self.spec
    }
    fn policy_status(&self) -> Option<&ClusterImagePolicyStatus> {
        self.status.as_ref()
    }
    fn scope(&self) -> Option<String> {
        None
    }
    fn status_api(&self, client: Client) -> Api<Self> {
        Api::all(client)
    }
}

impl PolicyObject for ImagePolicy {
    const KIND: &'static str = "ImagePolicy";
    const WATCHES_REFERENCES: bool = false;
    fn policy_spec(&self) -> &ClusterImagePolicySpec {
        &self.spec.policy
    }
    fn policy_status(&self) -> Option<&ClusterImagePolicyStatus> {
        self.status.as_ref()
    }
    fn scope(&self) -> Option<String> {
        Some(self.namespace().unwrap_or_default())
    }
    fn status_api(&self, client: Client) -> Api<Self> {
        Api::namespaced(client, &self.namespace().unwrap_or_default())
    }
}

/// The Secrets, ConfigMaps and TrustRoots a policy refers to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct References {
    /// Secret names (in the namespace the policy reads from).
    pub secrets: BTreeSet<String>,
    /// ConfigMap names (in the namespace the policy reads from).
    pub config_maps: BTreeSet<String>,
    /// TrustRoot names.
    pub trust_roots: BTreeSet<String>,
}

impl References {
    /// Whether the policy reads any Secret or ConfigMap.
    pub fn reads_objects(&self) -> bool {
        !self.secrets.is_empty() || !self.config_maps.is_empty()
    }
}

/// What `spec` refers to.
pub fn references(spec: &ClusterImagePolicySpec) -> References {
    let mut refs = References::default();
    let policy = |p: &Option<Policy>, refs: &mut References| {
        if let Some(name) = p
            .as_ref()
            .and_then(|p| p.config_map_ref.as_ref())
            .map(|r| r.name.as_str())
        {
            refs.config_maps.insert(name.to_owned());
        }
    };
    policy(&spec.policy, &mut refs);
    for a in &spec.authorities {
        let keys = [
            a.key.as_ref(),
            a.keyless.as_ref().and_then(|k| k.ca_cert.as_ref()),
        ];
        for key in keys.into_iter().flatten() {
            if let Some(s) = &key.secret_ref {
                refs.secrets.insert(s.name.clone());
            }
        }
        let roots = [
            a.keyless.as_ref().and_then(|k| k.trust_root_ref.as_ref()),
            a.ctlog.as_ref().and_then(|c| c.trust_root_ref.as_ref()),
            a.rfc3161_timestamp
                .as_ref()
                .and_then(|t| t.trust_root_ref.as_ref()),
        ];
        refs.trust_roots
            .extend(roots.into_iter().flatten().cloned());
        for att in &a.attestations {
            policy(&att.policy, &mut refs);
        }
        if let Some(n) = &a.notation {
            if let Some(r) = &n.trust_policy_ref {
                refs.config_maps.insert(r.name.clone());
            }
            for store in &n.trust_stores {
                if let Some(r) = &store.config_map_ref {
                    refs.config_maps.insert(r.name.clone());
                }
                if let Some(r) = &store.secret_ref {
                    refs.secrets.insert(r.name.clone());
                }
            }
        }
    }
    refs
}

/// Returns `spec` with every Secret and ConfigMap reference replaced by its
/// content, or the problems found (one line each, naming the field). They
/// are read from sigil's namespace, or from `scope`, an ImagePolicy's.
pub async fn resolve(
    spec: &ClusterImagePolicySpec,
    scope: Option<&str>,
    ctx: &Context,
) -> Result<Result<ClusterImagePolicySpec, Vec<String>>> {
    let mut spec = spec.clone();
    let mut problems = Vec::new();
    let r = Resolver {
        ctx,
        namespace: scope.unwrap_or(&ctx.args.namespace),
        tenant: scope.is_some(),
    };
    for (i, a) in spec.authorities.iter_mut().enumerate() {
        if let Some(key) = &mut a.key {
            let path = format!("spec.authorities[{i}].key");
            r.key(&path, key, &mut problems).await?;
            crate::kms_resolve::resolve_key(ctx, &path, key, &mut problems).await?;
        }
        if let Some(ca) = a.keyless.as_mut().and_then(|k| k.ca_cert.as_mut()) {
            r.key(
                &format!("spec.authorities[{i}].keyless.ca-cert"),
                ca,
                &mut problems,
            )
            .await?;
        }
        if let Some(n) = &mut a.notation {
            r.notation(&format!("spec.authorities[{i}].notation"), n, &mut problems)
                .await?;
        }
        for (j, att) in a.attestations.iter_mut().enumerate() {
            if let Some(p) = &mut att.policy {
                r.policy(
                    &format!("spec.authorities[{i}].attestations[{j}].policy"),
                    p,
                    &mut problems,
                )
                .await?;
            }
        }
    }
    if let Some(p) = &mut spec.policy {
        r.policy("spec.policy", p, &mut problems).await?;
    }
    Ok(if problems.is_empty() {
        Ok(spec)
    } else {
        Err(problems)
    })
}

struct Resolver<'a> {
    ctx: &'a Context,
    /// Where references are read: sigil's namespace, or an ImagePolicy's.
    namespace: &'a str,
    /// Reading for an ImagePolicy.
    tenant: bool,
}

impl Resolver<'_> {
    /// Checks that `namespace` is the one references are read from: sigil's
    /// for a ClusterImagePolicy, its own for an ImagePolicy.
    fn namespace_ok(&self, path: &str, namespace: &str, problems: &mut Vec<String>) -> bool {
        let ns = self.namespace;
        if namespace.is_empty() || namespace == ns {
            true
        } else if self.tenant {
            problems.push(format!(
                "{path}: namespace `{namespace}` is not the ImagePolicy's namespace `{ns}`; an \
                 ImagePolicy reads referenced Secrets and ConfigMaps only from its own namespace: \
                 move the object there"
            ));
            false
        } else {
            problems.push(format!(
                "{path}: namespace `{namespace}` is not sigil's namespace `{ns}`; sigil reads \
                 referenced Secrets and ConfigMaps only from its own namespace: move the object there"
            ));
            false
        }
    }

    /// Reads `name` of kind `K` in the resolver's namespace. For an
    /// ImagePolicy, a refusal by RBAC is a problem of the policy (the chart
    /// grants the read per namespace), not a failed reconcile.
    async fn read<K>(&self, path: &str, name: &str, problems: &mut Vec<String>) -> Result<Option<K>>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let ns = self.namespace;
        let kind = K::kind(&());
        let api: Api<K> = Api::namespaced(self.ctx.client.clone(), ns);
        match api.get_opt(name).await {
            Ok(found) => Ok(found),
            Err(kube::Error::Api(e)) if self.tenant && e.code == 403 => {
                problems.push(format!(
                    "{path}: sigil's controller may not read {kind} {ns}/{name}; let it read \
                     the namespace's Secrets and ConfigMaps (chart value \
                     imagePolicies.referenceNamespaces, or a RoleBinding in {ns} to the \
                     ClusterRole the chart names in docs/policies.md)"
                ));
                Ok(None)
            }
            Err(e) => Err(Error::kube(format!("reading {kind} {ns}/{name}"), e)),
        }
    }

    async fn key(&self, path: &str, key: &mut KeyRef, problems: &mut Vec<String>) -> Result<()> {
        let Some(secret_ref) = key.secret_ref.clone() else {
            return Ok(());
        };
        if key.data.is_some() {
            // Both set: the compiler reports it.
            return Ok(());
        }
        let path = format!("{path}.secretRef");
        if !self.namespace_ok(&path, &secret_ref.namespace, problems) {
            return Ok(());
        }
        let ns = self.namespace;
        let name = &secret_ref.name;
        let before = problems.len();
        let Some(secret) = self.read::<Secret>(&path, name, problems).await? else {
            if problems.len() == before {
                problems.push(format!(
                    "{path}: Secret {ns}/{name} not found; create it with the PEM as its only data entry"
                ));
            }
            return Ok(());
        };
        let data = secret.data.unwrap_or_default();
        let mut entries = data.iter();
        match (entries.next(), entries.next()) {
            (Some((_, value)), None) => match String::from_utf8(value.0.clone()) {
                Ok(pem) => {
                    key.data = Some(pem);
                    key.secret_ref = None;
                }
                Err(_) => problems.push(format!(
                    "{path}: Secret {ns}/{name} holds binary data; store the PEM text"
                )),
            },
            (None, _) => problems.push(format!(
                "{path}: Secret {ns}/{name} has no data; put the PEM in its only data entry"
            )),
            (Some(_), Some(_)) => problems.push(format!(
                "{path}: Secret {ns}/{name} has {} data entries ({}); it must hold exactly one, the PEM",
                data.len(),
                data.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        }
        Ok(())
    }

    /// Inlines a notation authority's trust policy (a ConfigMap entry) and
    /// the certificates of its trust stores (every data entry of a
    /// ConfigMap or Secret, in key order, as the files of the store's
    /// directory).
    async fn notation(
        &self,
        path: &str,
        n: &mut NotationRef,
        problems: &mut Vec<String>,
    ) -> Result<()> {
        if let (None, Some(reference)) = (&n.trust_policy, n.trust_policy_ref.clone()) {
            let at = format!("{path}.trustPolicyRef");
            let namespace = reference.namespace.clone().unwrap_or_default();
            if !reference.name.is_empty() && self.namespace_ok(&at, &namespace, problems) {
                let ns = self.namespace;
                let name = &reference.name;
                let before = problems.len();
                match self.read::<ConfigMap>(&at, name, problems).await? {
                    None if problems.len() == before => problems.push(format!(
                        "{at}: ConfigMap {ns}/{name} not found; create it with the trust policy \
                         document (trustpolicy.oci.json) as an entry"
                    )),
                    None => {}
                    Some(cm) => {
                        let text = config_map_entry(
                            &cm.data.unwrap_or_default(),
                            reference.key.as_deref().unwrap_or_default(),
                            &at,
                            (ns, name),
                            ("trustPolicyRef", "the trust policy"),
                            problems,
                        );
                        if let Some(text) = text {
                            n.trust_policy = Some(text);
                            n.trust_policy_ref = None;
                        }
                    }
                }
            }
        }
        for (j, store) in n.trust_stores.iter_mut().enumerate() {
            if store.certificates.is_some() {
                continue;
            }
            let at = format!("{path}.trustStores[{j}]");
            let files: Option<Vec<(String, Vec<u8>)>> =
                match (store.config_map_ref.clone(), store.secret_ref.clone()) {
                    (Some(r), None) => {
                        let at = format!("{at}.configMapRef");
                        if !self.namespace_ok(&at, &r.namespace, problems) {
                            continue;
                        }
                        let before = problems.len();
                        let found = self.read::<ConfigMap>(&at, &r.name, problems).await?;
                        if found.is_none() && problems.len() == before {
                            problems.push(format!(
                                "{at}: ConfigMap {}/{} not found; create it from the store's \
                                 directory (kubectl create configmap {} --from-file=DIR)",
                                self.namespace, r.name, r.name
                            ));
                        }
                        found.map(|cm| {
                            cm.data
                                .unwrap_or_default()
                                .into_iter()
                                .map(|(k, v)| (k, v.into_bytes()))
                                .collect()
                        })
                    }
                    (None, Some(r)) => {
                        let at = format!("{at}.secretRef");
                        if !self.namespace_ok(&at, &r.namespace, problems) {
                            continue;
                        }
                        let before = problems.len();
                        let found = self.read::<Secret>(&at, &r.name, problems).await?;
                        if found.is_none() && problems.len() == before {
                            problems.push(format!(
                                "{at}: Secret {}/{} not found; create it with the store's \
                                 certificate files as its entries",
                                self.namespace, r.name
                            ));
                        }
                        found.map(|secret| {
                            secret
                                .data
                                .unwrap_or_default()
                                .into_iter()
                                .map(|(k, v)| (k, v.0))
                                .collect()
                        })
                    }
                    // Several or none set: the compiler reports it.
                    _ => continue,
                };
            let Some(files) = files else { continue };
            let object = if store.config_map_ref.is_some() {
                "ConfigMap"
            } else {
                "Secret"
            };
            if files.is_empty() {
                problems.push(format!(
                    "{at}: the {object} has no data entries; put the store's PEM certificate \
                     files in it"
                ));
                continue;
            }
            let mut pem = String::new();
            for (key, bytes) in files {
                match String::from_utf8(bytes) {
                    Ok(text) => {
                        pem.push_str(&text);
                        if !pem.ends_with('\n') {
                            pem.push('\n');
                        }
                    }
                    Err(_) => problems.push(format!(
                        "{at}: entry `{key}` of the {object} is not text; store the certificates \
                         as PEM"
                    )),
                }
            }
            store.certificates = Some(pem);
            store.config_map_ref = None;
            store.secret_ref = None;
        }
        Ok(())
    }

    async fn policy(&self, path: &str, p: &mut Policy, problems: &mut Vec<String>) -> Result<()> {
        if p.remote.is_some() {
            let author = if self.tenant {
                Author::Tenant
            } else {
                Author::Admin
            };
            self.ctx
                .remote_policies
                .inline(path, p, author, problems)
                .await;
            return Ok(());
        }
        let Some(reference) = p.config_map_ref.clone() else {
            return Ok(());
        };
        if p.data.is_some() {
            // Both set: the compiler reports it.
            return Ok(());
        }
        let path = format!("{path}.configMapRef");
        let name = reference.name;
        let namespace = reference.namespace.unwrap_or_default();
        let key = reference.key.unwrap_or_default();
        if name.is_empty() {
            problems.push(format!("{path}.name: the ConfigMap's name is required"));
            return Ok(());
        }
        if !self.namespace_ok(&path, &namespace, problems) {
            return Ok(());
        }
        let ns = self.namespace;
        let before = problems.len();
        let Some(cm) = self.read::<ConfigMap>(&path, &name, problems).await? else {
            if problems.len() == before {
                problems.push(format!(
                    "{path}: ConfigMap {ns}/{name} not found; create it with the Rego module"
                ));
            }
            return Ok(());
        };
        let module = config_map_entry(
            &cm.data.unwrap_or_default(),
            &key,
            &path,
            (ns, &name),
            ("configMapRef", "the Rego module"),
            problems,
        );
        if let Some(module) = module {
            p.data = Some(module);
            p.config_map_ref = None;
        }
        Ok(())
    }
}

/// Reconciles one ClusterImagePolicy or ImagePolicy.
pub async fn reconcile<K: PolicyObject>(policy: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    ctx.ensure_leader()?;
    ctx.metrics.reconciled(CONTROLLER);
    // The name it goes by in the snapshot and metrics: an ImagePolicy's is
    // `NAMESPACE/NAME`.
    let key = K::key(policy.as_ref());
    let spec = policy.policy_spec();
    let scope = policy.scope();
    if crate::remote_policy::any(spec) {
        let published = ctx.publisher.policy(&key).await;
        ctx.remote_policies.remember(published.as_ref()).await;
    }
    let not_for_a_namespace = scope
        .as_deref()
        .map(|ns| namespaced_problems(spec, ns))
        .unwrap_or_default();
    let not_allowed = if scope.is_some() && not_for_a_namespace.is_empty() {
        registries_not_allowed(&key, spec, &ctx).await?
    } else {
        Vec::new()
    };
    // Bounds its Rego crosses on an empty document, said on Ready.
    let mut crossed = Vec::new();
    let (verdict, requeue) = if !not_for_a_namespace.is_empty() {
        (
            Verdict::failed("Ready", "Invalid", not_for_a_namespace.join("; ")),
            RESYNC,
        )
    } else if !not_allowed.is_empty() {
        (
            Verdict::failed("Ready", "RegistryNotAllowed", not_allowed.join("; ")),
            RESYNC,
        )
    } else {
        match resolve(spec, scope.as_deref(), &ctx).await? {
            Err(problems) => (
                Verdict::failed("Ready", "UnresolvedReference", problems.join("; ")),
                RETRY_UNRESOLVED,
            ),
            Ok(resolved) => match compile_policy(&key, &resolved, &Offline) {
                Err(e) => (Verdict::failed("Ready", "Invalid", e.to_string()), RESYNC),
                Ok(compiled) => {
                    // Neither the compiled policy nor the parsed default root
                    // is kept while `accept` waits for its write: thousands
                    // of reconciles may wait at once.
                    let refs = trust_root_refs(&compiled).into_keys().collect();
                    crossed = rego_bounds(compiled).await;
                    // URLs without trustRootRef must name instances of the
                    // default trust root in force (re-checked when it changes).
                    let mismatches = {
                        let default = ctx.publisher.default_in_force().await;
                        check_instance_urls(&resolved, &default.view())
                    };
                    if mismatches.is_empty() {
                        accept(policy.as_ref(), &ctx, refs, resolved).await?
                    } else {
                        let message = mismatches
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ");
                        (
                            Verdict::failed("Ready", "TrustRootMismatch", message),
                            RESYNC,
                        )
                    }
                }
            },
        }
    };
    // An ImagePolicy's Secrets and ConfigMaps are not watched: read again.
    let requeue = if !K::WATCHES_REFERENCES && references(spec).reads_objects() {
        requeue.min(RESYNC_REFERENCES)
    } else {
        requeue
    };
    finish(policy.as_ref(), &ctx, verdict, requeue, &crossed).await
}

/// Each Rego program of `compiled` evaluated once on an empty document in
/// the Rego sandbox, as `sigil policy lint` does it
/// ([`rego_bound_problems`]): the bounds crossed there, which the webhook
/// most likely meets on every image the policy selects. The evaluation
/// blocks a thread of tokio's blocking pool, never an async worker.
async fn rego_bounds(compiled: CompiledPolicy) -> Vec<String> {
    tokio::task::spawn_blocking(move || rego_bound_problems(&compiled))
        .await
        .unwrap_or_default()
}

/// What an ImagePolicy's `spec` names outside the registries it may name.
/// A published version that names such registries (the ClusterImagePolicy
/// naming them went away) is withdrawn: the webhook must not contact them
/// for the namespace any longer.
async fn registries_not_allowed(
    key: &str,
    spec: &ClusterImagePolicySpec,
    ctx: &Context,
) -> Result<Vec<String>> {
    let allowed = ctx.tenant_registries.current(&ctx.publisher).await;
    let problems = allowed.problems(spec);
    if let Some(published) = ctx.publisher.policy(key).await
        && !allowed.problems(&published.spec).is_empty()
    {
        ctx.publisher.remove_policy(key).await?;
    }
    Ok(problems)
}

/// Publishes a compiled policy once every TrustRoot it names (`refs`) is
/// loaded.
async fn accept<K: PolicyObject>(
    policy: &K,
    ctx: &Context,
    refs: Vec<String>,
    spec: ClusterImagePolicySpec,
) -> Result<(Verdict, Duration)> {
    let generation = policy.meta().generation.unwrap_or_default();
    let mut missing = Vec::new();
    for root in refs {
        if ctx.publisher.trust_root(&root).await.is_none() {
            missing.push(root);
        }
    }
    let scope = policy.scope();
    let in_force = match (spec.mode.as_deref() == Some("audit"), &scope) {
        (true, _) => "is in force in audit mode: the webhook counts its verdicts and the audit \
                      reports them, but it never denies, warns or pins"
            .to_owned(),
        (false, None) => "is enforced by the webhook".to_owned(),
        (false, Some(ns)) => format!(
            "is enforced by the webhook in namespace {ns}, in addition to the cluster's \
             ClusterImagePolicies"
        ),
    };
    let result = if missing.is_empty() {
        let published = ctx
            .publisher
            .accept_policy(SnapshotPolicy {
                name: policy.name_any(),
                namespace: scope.unwrap_or_default(),
                uid: policy.uid().unwrap_or_default(),
                generation,
                resource_version: policy.resource_version().unwrap_or_default(),
                spec,
            })
            .await;
        match published {
            Ok(_) => (
                Verdict::ok(
                    "Ready",
                    "Accepted",
                    format!("generation {generation} compiled and {in_force}"),
                ),
                RESYNC,
            ),
            // The policy set with this one does not fit: say so on the
            // policy that did not; the others stay published.
            Err(Error::SnapshotTooLarge(why)) => {
                (Verdict::failed("Ready", "SnapshotTooLarge", why), RESYNC)
            }
            // Past its namespace's share: said on its own status only.
            Err(Error::SnapshotBudget(why)) => {
                (Verdict::failed("Ready", "SnapshotBudget", why), RESYNC)
            }
            Err(e) => return Err(e),
        }
    } else {
        (
            Verdict::failed(
                "Ready",
                "UnresolvedReference",
                format!(
                    "TrustRoot {} not found or not Ready; create it or fix trustRootRef",
                    missing.join(", ")
                ),
            ),
            RETRY_UNRESOLVED,
        )
    };
    Ok(result)
}

/// Reports `verdict` (status and Event when it changed) and requeues.
async fn finish<K: PolicyObject>(
    policy: &K,
    ctx: &Context,
    mut verdict: Verdict,
    requeue: Duration,
    crossed: &[String],
) -> Result<Action> {
    let key = K::key(policy);
    let generation = policy.meta().generation.unwrap_or_default();
    if !verdict.ok {
        verdict.message = match ctx.publisher.policy(&key).await {
            Some(good) => format!(
                "generation {generation} rejected: {}; the webhook keeps enforcing generation {}",
                verdict.message, good.generation
            ),
            None => format!(
                "generation {generation} rejected: {}; the webhook does not enforce this policy",
                verdict.message
            ),
        };
    }
    // A KMS that cannot be reached leaves the last good key in force: the
    // policy is enforced, but Ready says what is wrong until it recovers.
    let spec = policy.policy_spec();
    let kms_degraded = ctx.kms.degraded(spec).await;
    if verdict.ok && !kms_degraded.is_empty() {
        verdict = Verdict::failed("Ready", "KMSUnreachable", kms_degraded.join("; "));
    }
    // A policy whose Rego crosses a bound is enforced (every image it
    // selects is denied, naming the bound), but it is not ready for use.
    if verdict.ok && !crossed.is_empty() {
        verdict = Verdict::failed(
            "Ready",
            "RegoBoundExceeded",
            format!(
                "generation {generation} is enforced, but {}",
                crossed.join("; ")
            ),
        );
    }
    let requeue = if crate::kms_resolve::uses_kms(spec) {
        let again = if kms_degraded.is_empty() {
            ctx.kms.refresh()
        } else {
            RETRY_UNRESOLVED
        };
        requeue.min(again)
    } else {
        requeue
    };
    ctx.metrics.policy_state(&key, Some(verdict.ok));
    let previous = policy
        .policy_status()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let observed = policy.policy_status().and_then(|s| s.observed_generation);
    if status::changed(previous, &verdict, generation) || observed != Some(generation) {
        let conditions = status::conditions(previous, std::slice::from_ref(&verdict), generation);
        // The reconcile may have waited (a KMS, a write): a replica that lost
        // the Lease meanwhile leaves the status to the new leader.
        ctx.ensure_leader()?;
        status::apply_status_with(
            &policy.status_api(ctx.client.clone()),
            policy,
            serde_json::json!({"observedGeneration": generation, "conditions": conditions}),
        )
        .await?;
        status::event(ctx, policy, &verdict).await;
    }
    Ok(Action::requeue(requeue))
}

/// What to do after a failed reconcile: count it and retry soon.
pub fn error_policy<K: PolicyObject>(_policy: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(CONTROLLER, error.metric_label());
    if matches!(error, Error::NotLeader(_)) {
        return Action::await_change();
    }
    tracing::warn!(%error, kind = K::KIND, "policy reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

fn policies_referring<K: PolicyObject>(
    store: &Store<K>,
    refers: impl Fn(&References) -> bool,
) -> Vec<ObjectRef<K>> {
    store
        .state()
        .iter()
        .filter(|p| refers(&references(p.policy_spec())))
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Maps a changed Secret to the policies that refer to it.
pub fn secret_mapper<K: PolicyObject>(
    store: Store<K>,
) -> impl Fn(Secret) -> Vec<ObjectRef<K>> + Send + Sync + 'static {
    move |s: Secret| policies_referring(&store, |r| r.secrets.contains(&s.name_any()))
}

/// Runs the controller of policy kind `K` until `shutdown` resolves.
/// `trust_root_changed` says which published trust material changed.
pub async fn run<K: PolicyObject>(
    ctx: Arc<Context>,
    trust_root_changed: impl Stream<Item = TrustChange> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let ns = ctx.args.namespace.clone();
    let (reader, objects) = watch_and_prune::<K>(&ctx);

    let config_maps = reader.clone();
    let secrets = secret_mapper(reader.clone());
    let roots = reader.clone();
    let trust_root_triggers = trust_root_changed.flat_map(move |change| {
        futures_util::stream::iter(match change {
            TrustChange::TrustRoot(name) => {
                policies_referring(&roots, |r| r.trust_roots.contains(&name))
            }
            TrustChange::Default => policies_referring(&roots, |_| true),
        })
    });
    let tenant_triggers = (!K::WATCHES_REFERENCES).then(|| {
        futures_util::stream::select(
            registry_triggers(ctx.clone(), reader.clone()),
            reference_triggers(ctx.client.clone(), reader.clone()),
        )
    });
    let mut controller = Controller::for_stream(objects, reader);
    if K::WATCHES_REFERENCES {
        controller = controller
            .watches(
                Api::<Secret>::namespaced(client.clone(), &ns),
                watcher::Config::default(),
                secrets,
            )
            .watches(
                Api::<ConfigMap>::namespaced(client, &ns),
                watcher::Config::default(),
                move |c: ConfigMap| {
                    policies_referring(&config_maps, |r| r.config_maps.contains(&c.name_any()))
                },
            );
    }
    let triggers = match tenant_triggers {
        Some(tenant) => futures_util::stream::select(trust_root_triggers, tenant).boxed(),
        None => trust_root_triggers.boxed(),
    };
    controller
        .reconcile_on(triggers)
        .graceful_shutdown_on(shutdown)
        .run(reconcile::<K>, error_policy::<K>, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, kind = K::KIND, "policy controller event");
            }
        })
        .await;
}

/// Every ImagePolicy, each time the registries the ClusterImagePolicies
/// name change (they are what an ImagePolicy may name by default).
fn registry_triggers<K: PolicyObject>(
    ctx: Arc<Context>,
    store: Store<K>,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
    futures_util::stream::unfold(None::<u64>, move |last| {
        let (ctx, store) = (ctx.clone(), store.clone());
        async move {
            tokio::time::sleep(TENANT_CHECK).await;
            let now = ctx.tenant_registries.fingerprint(&ctx.publisher).await;
            let changed = last.is_some_and(|l| l != now);
            let refs = if changed {
                policies_referring(&store, |_| true)
            } else {
                Vec::new()
            };
            Some((futures_util::stream::iter(refs), Some(now)))
        }
    })
    .flatten()
}

/// The ImagePolicies whose Secrets or ConfigMaps were touched, watched in
/// the namespaces where ImagePolicies name some.
fn reference_triggers<K: PolicyObject>(
    client: Client,
    store: Store<K>,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
    let wanted = {
        let store = store.clone();
        move || namespaces_with_references(&store)
    };
    crate::tenant_references::touched(client, wanted, TENANT_CHECK)
        .flat_map(move |t| futures_util::stream::iter(policies_touched(&store, &t)))
}

/// The namespaces where some policy of `store` names a Secret or ConfigMap.
fn namespaces_with_references<K: PolicyObject>(store: &Store<K>) -> BTreeSet<String> {
    store
        .state()
        .iter()
        .filter(|p| references(p.policy_spec()).reads_objects())
        .filter_map(|p| p.scope())
        .collect()
}

/// The policies of `touched`'s namespace that name it.
fn policies_touched<K: PolicyObject>(
    store: &Store<K>,
    touched: &crate::tenant_references::Touched,
) -> Vec<ObjectRef<K>> {
    use crate::tenant_references::Kind;
    store
        .state()
        .iter()
        .filter(|p| p.scope().as_deref() == Some(touched.namespace.as_str()))
        .filter(|p| {
            let refs = references(p.policy_spec());
            match touched.kind {
                Kind::Secret => refs.secrets.contains(&touched.name),
                Kind::ConfigMap => refs.config_maps.contains(&touched.name),
            }
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

impl Published for ClusterImagePolicy {
    const PLURAL: &'static str = "policies";

    async fn unpublish(ctx: &Context, name: &str) -> Result<u64> {
        ctx.metrics.policy_state(name, None);
        ctx.publisher.remove_policy(name).await
    }

    async fn retain(ctx: &Context, live: &BTreeSet<String>) -> Result<u64> {
        ctx.publisher.retain_policies(false, live).await
    }
}

impl Published for ImagePolicy {
    const PLURAL: &'static str = "image policies";

    fn key(obj: &Self) -> String {
        qualified_name(&obj.namespace().unwrap_or_default(), &obj.name_any())
    }

    async fn unpublish(ctx: &Context, key: &str) -> Result<u64> {
        ctx.metrics.policy_state(key, None);
        ctx.publisher.remove_policy(key).await
    }

    async fn retain(ctx: &Context, live: &BTreeSet<String>) -> Result<u64> {
        ctx.publisher.retain_policies(true, live).await
    }
}

/// The entry of ConfigMap `ns/name` (its `data`) that the reference at `at`
/// names: `key`, or the only entry when no key is given. `field` is the
/// reference's name (`configMapRef`) and `holding` what the entry holds,
/// for the problem's words when there is no such entry.
fn config_map_entry(
    data: &BTreeMap<String, String>,
    key: &str,
    at: &str,
    (ns, name): (&str, &str),
    (field, holding): (&str, &str),
    problems: &mut Vec<String>,
) -> Option<String> {
    if key.is_empty() {
        let mut values = data.values();
        match (values.next(), values.next()) {
            (Some(v), None) => Some(v.clone()),
            _ => {
                problems.push(format!(
                    "{at}: ConfigMap {ns}/{name} has {} entries; set {field}.key to the one \
                     holding {holding}",
                    data.len()
                ));
                None
            }
        }
    } else {
        let v = data.get(key).cloned();
        if v.is_none() {
            problems.push(format!(
                "{at}.key: ConfigMap {ns}/{name} has no entry `{key}`"
            ));
        }
        v
    }
}

#[cfg(test)]
mod tests {

    use http::Method;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::{Value, json};

    use super::*;
    use crate::fixtures::*;

    fn key_spec(key: Value) -> Value {
        json!({"images": [{"glob": "ghcr.io/acme/**"}], "authorities": [{"key": key}]})
    }

    async fn reconcile_path(api: &FakeApi, ctx: &Arc<Context>, name: &str) -> Result<Action> {
        reconcile(
            object::<ClusterImagePolicy>(api, &cip_path(name)),
            ctx.clone(),
        )
        .await
    }

    fn ready(api: &FakeApi, name: &str) -> Value {
        let obj = api.get(&cip_path(name)).unwrap();
        obj["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone()
    }

    #[tokio::test]
    async fn a_valid_policy_gets_ready_true_its_status_an_event_and_a_place_in_the_snapshot() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &cip_path("p"),
            cip("p", 1, key_spec(json!({"data": P256_PUB}))),
        );

        reconcile_path(&api, &ctx, "p").await.unwrap();

        let obj = api.get(&cip_path("p")).unwrap();
        assert_eq!(obj["status"]["observedGeneration"], 1);
        let cond = ready(&api, "p");
        assert_eq!(cond["status"], "True");
        assert_eq!(cond["reason"], "Accepted");
        assert_eq!(
            api.requests_to(Method::PATCH, &format!("{}/status", cip_path("p")))
                .len(),
            1
        );
        assert_eq!(api.event_notes().len(), 1);
        assert_eq!(api.event_notes()[0].0, "Accepted");
        let snapshot = stored_snapshot(&api).unwrap();
        assert_eq!(snapshot.policies.len(), 1);
        assert_eq!(snapshot.policies[0].generation, 1);
        sigil_compile::snapshot::validate(&snapshot).unwrap();
    }

    #[tokio::test]
    async fn an_audit_mode_policy_is_ready_and_says_it_is_in_force_in_audit_mode() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let mut spec = key_spec(json!({"data": P256_PUB}));
        spec["mode"] = json!("audit");
        api.put(&cip_path("p"), cip("p", 1, spec));

        reconcile_path(&api, &ctx, "p").await.unwrap();

        let cond = ready(&api, "p");
        assert_eq!(
            (&cond["status"], &cond["reason"]),
            (&json!("True"), &json!("Accepted"))
        );
        assert_eq!(
            cond["message"],
            "generation 1 compiled and is in force in audit mode: the webhook counts its \
             verdicts and the audit reports them, but it never denies, warns or pins"
        );
        let snapshot = stored_snapshot(&api).unwrap();
        assert_eq!(snapshot.policies[0].spec.mode.as_deref(), Some("audit"));
    }

    #[tokio::test]
    async fn a_policy_that_does_not_fit_in_the_snapshot_is_not_ready_and_the_snapshot_stays() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        // A trust root that leaves the snapshot's Secrets nearly full (gzip
        // keeps about 84.5% of this text, escapes included: some 70 KiB
        // stay free).
        let mut state = 7u64;
        let mut noise = |len: usize, symbols: u64, first: u8| -> String {
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    char::from(first + u8::try_from(state % symbols).unwrap())
                })
                .collect()
        };
        let mut root: Value = serde_json::from_str(
            crate::config::SigstoreInstance::PublicGood.embedded_trusted_root(),
        )
        .unwrap();
        root["padding"] = noise(8_430 * 1024, 90, b'!').into();
        ctx.publisher
            .accept_trust_root(sigil_api::snapshot::SnapshotTrustRoot {
                name: "padding".into(),
                generation: 1,
                trusted_root_json: root.to_string(),
                default: false,
            })
            .await
            .unwrap();
        let before = stored_snapshot(&api).unwrap();
        // 200 KiB of image globs, about 125 KiB compressed: more than is left.
        let images: Vec<Value> = (0..200)
            .map(|_| json!({"glob": format!("registry.example.com/{}/**", noise(1000, 26, b'a'))}))
            .collect();
        api.put(
            &cip_path("big"),
            cip(
                "big",
                1,
                json!({"images": images, "authorities": [{"key": {"data": P256_PUB}}]}),
            ),
        );

        reconcile_path(&api, &ctx, "big").await.unwrap();

        let cond = ready(&api, "big");
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "SnapshotTooLarge");
        let message = cond["message"].as_str().unwrap();
        assert!(message.contains("more than the"), "{message}");
        assert!(
            message.contains("the webhook does not enforce this policy"),
            "{message}"
        );
        assert_eq!(stored_snapshot(&api).unwrap(), before);
    }

    #[tokio::test]
    async fn a_second_reconcile_without_change_writes_nothing() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &cip_path("p"),
            cip("p", 1, key_spec(json!({"data": P256_PUB}))),
        );
        reconcile_path(&api, &ctx, "p").await.unwrap();
        let writes = |api: &FakeApi| {
            api.requests()
                .iter()
                .filter(|r| r.method != Method::GET)
                .count()
        };
        let before = writes(&api);

        reconcile_path(&api, &ctx, "p").await.unwrap();

        assert_eq!(writes(&api), before, "{:#?}", api.requests().last());
    }

    #[tokio::test]
    async fn a_secret_key_is_resolved_inline_and_a_secret_change_re_reconciles_the_policy() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &secret_path("cosign-key"),
            secret("cosign-key", &[("cosign.pub", P256_PUB)]),
        );
        api.put(
            &cip_path("p"),
            cip(
                "p",
                1,
                key_spec(json!({"secretRef": {"name": "cosign-key"}})),
            ),
        );
        reconcile_path(&api, &ctx, "p").await.unwrap();
        let spec = &stored_snapshot(&api).unwrap().policies[0].spec;
        let key = spec.authorities[0].key.as_ref().unwrap();
        assert_eq!(key.data.as_deref(), Some(P256_PUB));
        assert!(key.secret_ref.is_none());

        // The Secret changes: the controller's mapper names the policy…
        let (reader, mut writer) = reflector::store::<ClusterImagePolicy>();
        writer.apply_watcher_event(&Event::Apply(
            (*object::<ClusterImagePolicy>(&api, &cip_path("p"))).clone(),
        ));
        api.put(
            &secret_path("cosign-key"),
            secret("cosign-key", &[("cosign.pub", ED_PUB)]),
        );
        let changed: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(api.get(&secret_path("cosign-key")).unwrap()).unwrap();
        let unrelated: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(secret("other", &[("x", "y")])).unwrap();
        assert_eq!(
            secret_mapper(reader.clone())(changed),
            vec![ObjectRef::new("p")]
        );
        assert!(secret_mapper(reader)(unrelated).is_empty());

        // …and its reconcile publishes the new key.
        reconcile_path(&api, &ctx, "p").await.unwrap();
        let spec = &stored_snapshot(&api).unwrap().policies[0].spec;
        assert_eq!(
            spec.authorities[0].key.as_ref().unwrap().data.as_deref(),
            Some(ED_PUB)
        );
    }

    #[tokio::test]
    async fn an_invalid_policy_gets_ready_false_and_is_not_published() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &cip_path("bad"),
            cip("bad", 1, key_spec(json!({"data": "not a key"}))),
        );

        reconcile_path(&api, &ctx, "bad").await.unwrap();

        let cond = ready(&api, "bad");
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "Invalid");
        let message = cond["message"].as_str().unwrap();
        assert!(
            message.contains("spec.authorities[0].key.data"),
            "{message}"
        );
        assert!(
            message.contains("the webhook does not enforce this policy"),
            "{message}"
        );
        assert_eq!(api.event_notes()[0].0, "Invalid");
        assert!(stored_snapshot(&api).is_none_or(|s| s.policies.is_empty()));
    }

    #[tokio::test]
    async fn a_rejected_new_generation_keeps_the_last_good_spec_in_the_snapshot() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &cip_path("p"),
            cip("p", 1, key_spec(json!({"data": P256_PUB}))),
        );
        reconcile_path(&api, &ctx, "p").await.unwrap();
        let good = stored_snapshot(&api).unwrap();

        let mut obj = api.get(&cip_path("p")).unwrap();
        obj["metadata"]["generation"] = 2.into();
        obj["spec"]["authorities"][0]["key"]["data"] = "garbage".into();
        api.put(&cip_path("p"), obj);
        reconcile_path(&api, &ctx, "p").await.unwrap();

        let cond = ready(&api, "p");
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["observedGeneration"], 2);
        assert!(
            cond["message"]
                .as_str()
                .unwrap()
                .contains("keeps enforcing generation 1")
        );
        let now = stored_snapshot(&api).unwrap();
        assert_eq!(now.policies, good.policies);
        assert_eq!(now.revision, good.revision);
    }

    #[tokio::test]
    async fn after_a_restart_the_last_good_specs_are_recovered_from_the_secret() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client.clone(), true);
        api.put(
            &cip_path("p"),
            cip("p", 1, key_spec(json!({"data": P256_PUB}))),
        );
        reconcile_path(&api, &ctx, "p").await.unwrap();
        let before = stored_snapshot(&api).unwrap();

        // A new controller process starts while generation 2 is invalid.
        let (restarted, _rx2, _l2) = context(client, true);
        assert_eq!(
            restarted.publisher.recover().await.unwrap(),
            crate::publish::Recovered::Snapshot(before.revision)
        );
        let mut obj = api.get(&cip_path("p")).unwrap();
        obj["metadata"]["generation"] = 2.into();
        obj["spec"]["mode"] = "sometimes".into();
        api.put(&cip_path("p"), obj);
        reconcile_path(&api, &restarted, "p").await.unwrap();
        api.put(
            &cip_path("q"),
            cip("q", 1, key_spec(json!({"data": ED_PUB}))),
        );
        reconcile_path(&api, &restarted, "q").await.unwrap();

        let after = stored_snapshot(&api).unwrap();
        assert!(after.revision > before.revision);
        let p = after.policies.iter().find(|p| p.name == "p").unwrap();
        assert_eq!(p.generation, 1);
        assert!(after.policies.iter().any(|p| p.name == "q"));
    }

    #[tokio::test]
    async fn a_missing_secret_or_one_outside_sigils_namespace_is_an_unresolved_reference() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &cip_path("m"),
            cip("m", 1, key_spec(json!({"secretRef": {"name": "nope"}}))),
        );
        api.put(
            &cip_path("o"),
            cip(
                "o",
                1,
                key_spec(json!({"secretRef": {"name": "k", "namespace": "default"}})),
            ),
        );

        let action = reconcile_path(&api, &ctx, "m").await.unwrap();
        reconcile_path(&api, &ctx, "o").await.unwrap();

        assert_eq!(action, Action::requeue(RETRY_UNRESOLVED));
        let m = ready(&api, "m");
        assert_eq!(m["reason"], "UnresolvedReference");
        assert!(
            m["message"]
                .as_str()
                .unwrap()
                .contains("Secret sigil-system/nope not found")
        );
        let o = ready(&api, "o");
        assert!(
            o["message"]
                .as_str()
                .unwrap()
                .contains("not sigil's namespace")
        );
    }

    #[tokio::test]
    async fn a_configmap_policy_is_resolved_inline() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let rego = "package sigstore\nisCompliant := true\n";
        api.put(
            &configmap_path("rego"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rego", "namespace": NS}, "data": {"policy.rego": rego}}),
        );
        let mut spec = key_spec(json!({"data": P256_PUB}));
        spec["policy"] =
            json!({"type": "rego", "configMapRef": {"name": "rego", "key": "policy.rego"}});
        api.put(&cip_path("p"), cip("p", 1, spec));

        reconcile_path(&api, &ctx, "p").await.unwrap();

        assert_eq!(ready(&api, "p")["status"], "True", "{}", ready(&api, "p"));
        let snapshot = stored_snapshot(&api).unwrap();
        let policy = snapshot.policies[0].spec.policy.as_ref().unwrap();
        assert_eq!(policy.data.as_deref(), Some(rego));
        assert!(policy.config_map_ref.is_none());
    }

    #[tokio::test]
    async fn a_notation_trust_policy_and_stores_in_configmaps_and_secrets_are_resolved_inline() {
        use base64::Engine as _;
        use sigil_testkit::notation::{LeafSpec, NotaryPki};
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let t = 1_750_000_000;
        let pki = NotaryPki::new(
            3,
            "ctl",
            t,
            t + 3650 * 86_400,
            &LeafSpec::new("Acme", "signer", t, t + 86_400),
        );
        let root = pki.root.cert_pem();
        let trust_policy = json!({"version": "1.0", "trustPolicies": [{
            "name": "acme", "registryScopes": ["*"],
            "signatureVerification": {"level": "strict"},
            "trustStores": ["ca:acme", "signingAuthority:acme"],
            "trustedIdentities": ["x509.subject: C=US, ST=WA, O=Acme"]}]})
        .to_string();
        api.put(
            &configmap_path("notation-policy"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "notation-policy", "namespace": NS},
                "data": {"trustpolicy.oci.json": trust_policy}}),
        );
        api.put(
            &configmap_path("acme-ca"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "acme-ca", "namespace": NS}, "data": {"root.crt": root}}),
        );
        api.put(
            &secret_path("acme-sa"),
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "acme-sa", "namespace": NS},
                "data": {"root.crt": base64::engine::general_purpose::STANDARD.encode(&root)}}),
        );
        let spec = json!({"images": [{"glob": "ghcr.io/acme/**"}], "authorities": [{"notation": {
        "trustPolicyRef": {"name": "notation-policy"},
        "trustStores": [
            {"name": "ca/acme", "configMapRef": {"name": "acme-ca"}},
            {"name": "signingAuthority/acme", "secretRef": {"name": "acme-sa"}},
        ]}}]});
        api.put(&cip_path("n"), cip("n", 1, spec));
        api.put(
            &cip_path("missing"),
            cip(
                "missing",
                1,
                json!({"images": [{"glob": "ghcr.io/acme/**"}], "authorities": [{"notation": {
                    "trustPolicy": trust_policy,
                    "trustStores": [{"name": "ca/acme", "configMapRef": {"name": "nope"}}]}}]}),
            ),
        );

        reconcile_path(&api, &ctx, "n").await.unwrap();
        reconcile_path(&api, &ctx, "missing").await.unwrap();

        assert_eq!(ready(&api, "n")["status"], "True", "{}", ready(&api, "n"));
        let snapshot = stored_snapshot(&api).unwrap();
        let n = snapshot.policies[0].spec.authorities[0]
            .notation
            .as_ref()
            .unwrap();
        assert_eq!(n.trust_policy.as_deref(), Some(trust_policy.as_str()));
        assert!(n.trust_policy_ref.is_none());
        for store in &n.trust_stores {
            assert_eq!(store.certificates.as_deref(), Some(root.as_str()));
            assert!(store.config_map_ref.is_none() && store.secret_ref.is_none());
        }
        let missing = ready(&api, "missing");
        assert_eq!(missing["reason"], "UnresolvedReference");
        assert!(
            missing["message"].as_str().unwrap().contains(
                "spec.authorities[0].notation.trustStores[0].configMapRef: ConfigMap \
                 sigil-system/nope not found; create it from the store's directory"
            ),
            "{missing}"
        );
    }

    #[tokio::test]
    async fn a_rego_policy_that_crosses_a_bound_is_enforced_and_ready_says_which_bound() {
        // The sandbox's workers come from the `sigil-rego-worker` binary.
        sigil_policy::rego::testing::worker_program().unwrap_or_else(|e| panic!("{e}"));
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let mut bomb = key_spec(json!({"data": P256_PUB}));
        bomb["policy"] = json!({"type": "rego", "data":
            "package sigstore\nisCompliant if count(numbers.range(0, 2000000000)) > 0\n"});
        api.put(&cip_path("bomb"), cip("bomb", 1, bomb));
        let mut fine = key_spec(json!({"data": P256_PUB}));
        fine["policy"] = json!({"type": "rego", "data":
            "package sigstore\nisCompliant if input.predicateType == \"x\"\n"});
        api.put(&cip_path("fine"), cip("fine", 1, fine));

        reconcile_path(&api, &ctx, "bomb").await.unwrap();
        reconcile_path(&api, &ctx, "fine").await.unwrap();

        let cond = ready(&api, "bomb");
        assert_eq!(
            (&cond["status"], &cond["reason"]),
            (&json!("False"), &json!("RegoBoundExceeded")),
            "{cond}"
        );
        let message = cond["message"].as_str().unwrap();
        assert!(
            message.contains(
                "generation 1 is enforced, but spec.policy: evaluated on an empty document, \
                 the Rego evaluation exceeded its memory limit of 128 MiB"
            ),
            "{message}"
        );
        // A policy false on an empty document is not a bound crossed.
        assert_eq!(ready(&api, "fine")["reason"], "Accepted");
        // Both are in the snapshot: the webhook denies the bomb's images,
        // naming the bound.
        let snapshot = stored_snapshot(&api).unwrap();
        let mut names: Vec<&str> = snapshot.policies.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["bomb", "fine"]);
    }

    #[tokio::test]
    async fn a_policy_waiting_for_a_trust_root_is_not_published_until_it_loads() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let spec = json!({"images": [{"glob": "**"}], "authorities": [{"keyless": {
            "identities": [{"issuer": "https://issuer", "subject": "me"}],
            "trustRootRef": "private"}}]});
        api.put(&cip_path("p"), cip("p", 1, spec));

        reconcile_path(&api, &ctx, "p").await.unwrap();

        let cond = ready(&api, "p");
        assert_eq!(cond["reason"], "UnresolvedReference");
        assert!(
            cond["message"]
                .as_str()
                .unwrap()
                .contains("TrustRoot private")
        );
        let (reader, mut writer) = reflector::store::<ClusterImagePolicy>();
        writer.apply_watcher_event(&Event::Apply(
            (*object::<ClusterImagePolicy>(&api, &cip_path("p"))).clone(),
        ));
        assert_eq!(
            policies_referring(&reader, |r| r.trust_roots.contains("private")),
            vec![ObjectRef::new("p")]
        );
    }

    #[tokio::test]
    async fn a_replica_that_lost_the_lease_does_not_reconcile() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, false);
        api.put(
            &cip_path("p"),
            cip("p", 1, key_spec(json!({"data": P256_PUB}))),
        );

        let err = reconcile_path(&api, &ctx, "p").await.unwrap_err();

        assert!(matches!(err, Error::NotLeader(_)));
        assert!(api.requests().is_empty());
        assert_eq!(
            error_policy(
                object::<ClusterImagePolicy>(&api, &cip_path("p")),
                &err,
                ctx
            ),
            Action::await_change()
        );
    }

    #[tokio::test]
    async fn deleted_policies_are_unpublished() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        for name in ["a", "b"] {
            api.put(
                &cip_path(name),
                cip(name, 1, key_spec(json!({"data": P256_PUB}))),
            );
            reconcile_path(&api, &ctx, name).await.unwrap();
        }
        let (reader, mut writer) = reflector::store::<ClusterImagePolicy>();
        writer.apply_watcher_event(&Event::Apply(
            (*object::<ClusterImagePolicy>(&api, &cip_path("b"))).clone(),
        ));

        crate::prune::prune(&ctx, &reader, &Event::InitDone).await;

        let names: Vec<String> = stored_snapshot(&api)
            .unwrap()
            .policies
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, vec!["b".to_owned()]);
    }

    /// policy-controller's `cip-keyless.yaml`: a private Fulcio and Rekor
    /// named by URL, no trustRootRef.
    fn private_keyless() -> Value {
        json!({"images": [{"glob": "**demo**"}], "authorities": [{
            "keyless": {"url": "http://fulcio.fulcio-system.svc", "identities": [{
                "issuerRegExp": ".*kubernetes.default.*",
                "subjectRegExp": ".*kubernetes.io/namespaces/default/serviceaccounts/default"}]},
            "ctlog": {"url": "http://rekor.rekor-system.svc"}}]})
    }

    fn private_trust_root(name: &str) -> Value {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        json!({
            "apiVersion": "policy.sigil.dev/v1alpha1", "kind": "TrustRoot",
            "metadata": {"name": name, "generation": 1,
                "annotations": {sigil_compile::default_root::DEFAULT_ANNOTATION: "true"}},
            "spec": {"sigstoreKeys": {
                "certificateAuthorities": [{"uri": "http://fulcio.fulcio-system.svc",
                    "certChain": b64(CA_PEM)}],
                "tLogs": [{"baseURL": "http://rekor.rekor-system.svc", "publicKey": b64(P256_PUB)}],
            }},
        })
    }

    #[tokio::test]
    async fn a_private_sigstore_named_by_url_is_refused_against_public_good_and_accepted_once_a_default_trust_root_lists_it()
     {
        let (client, api) = FakeApi::start();
        let (ctx, mut changes, _l) = context(client, true);
        api.put(&cip_path("keyless"), cip("keyless", 1, private_keyless()));

        reconcile_path(&api, &ctx, "keyless").await.unwrap();

        let cond = ready(&api, "keyless");
        assert_eq!(cond["reason"], "TrustRootMismatch");
        let message = cond["message"].as_str().unwrap();
        for needle in [
            "spec.authorities[0].keyless.url: `http://fulcio.fulcio-system.svc` is not a Fulcio of the default trust root, the Sigstore public-good root",
            "it lists https://fulcio.sigstore.dev",
            "spec.authorities[0].ctlog.url: `http://rekor.rekor-system.svc`",
            "https://rekor.sigstore.dev",
            "the webhook does not enforce this policy",
        ] {
            assert!(message.contains(needle), "{needle}\n{message}");
        }
        assert!(stored_snapshot(&api).is_none_or(|s| s.policies.is_empty()));

        // The admin marks a TrustRoot listing the private instances as the
        // cluster's default; the change re-reconciles every policy.
        api.put(
            &crate::fixtures::trustroot_path("private"),
            private_trust_root("private"),
        );
        crate::trustroot::reconcile(
            object(&api, &crate::fixtures::trustroot_path("private")),
            ctx.clone(),
        )
        .await
        .unwrap();
        let received: Vec<TrustChange> = std::iter::from_fn(|| changes.try_recv().ok()).collect();
        assert!(received.contains(&TrustChange::Default), "{received:?}");
        let (reader, mut writer) = reflector::store::<ClusterImagePolicy>();
        writer.apply_watcher_event(&Event::Apply(
            (*object::<ClusterImagePolicy>(&api, &cip_path("keyless"))).clone(),
        ));
        assert_eq!(
            policies_referring(&reader, |_| true),
            vec![ObjectRef::new("keyless")]
        );
        reconcile_path(&api, &ctx, "keyless").await.unwrap();

        assert_eq!(
            ready(&api, "keyless")["status"],
            "True",
            "{}",
            ready(&api, "keyless")
        );
        let snapshot = stored_snapshot(&api).unwrap();
        assert_eq!(snapshot.policies[0].name, "keyless");
        assert_eq!(snapshot.default_trust_root().unwrap().name, "private");
        let valid = sigil_compile::snapshot::validate(&snapshot).unwrap();
        assert_eq!(valid.default_trust_root.as_deref(), Some("private"));
    }

    #[tokio::test]
    async fn public_good_urls_in_either_scheme_are_accepted_without_a_default_trust_root() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &cip_path("pg"),
            cip(
                "pg",
                1,
                json!({"images": [{"glob": "**"}], "authorities": [{
                "keyless": {"url": "http://fulcio.sigstore.dev",
                    "identities": [{"issuer": "https://token.actions.githubusercontent.com",
                        "subjectRegExp": ".*"}]},
                "ctlog": {"url": "https://rekor.sigstore.dev"}}]}),
            ),
        );

        reconcile_path(&api, &ctx, "pg").await.unwrap();

        assert_eq!(ready(&api, "pg")["status"], "True", "{}", ready(&api, "pg"));
    }
}

#[cfg(test)]
mod image_policy_tests {
    use http::Method;
    use serde_json::{Value, json};

    use super::*;
    use crate::fixtures::*;

    const TEAM: &str = "team-a";

    async fn reconcile_image_policy(api: &FakeApi, ctx: &Arc<Context>, name: &str) -> Action {
        reconcile(
            object::<ImagePolicy>(api, &image_policy_path(TEAM, name)),
            ctx.clone(),
        )
        .await
        .unwrap()
    }

    fn ready(api: &FakeApi, name: &str) -> Value {
        let obj = api.get(&image_policy_path(TEAM, name)).unwrap();
        obj["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone()
    }

    /// Publishes a ClusterImagePolicy selecting `glob`, so that the
    /// registries it names may be named by ImagePolicies.
    async fn cluster_policy(api: &FakeApi, ctx: &Arc<Context>, name: &str, glob: &str) {
        api.put(
            &cip_path(name),
            cip(
                name,
                1,
                json!({"images": [{"glob": glob}], "authorities": [{"static": {"action": "pass"}}]}),
            ),
        );
        reconcile(
            object::<ClusterImagePolicy>(api, &cip_path(name)),
            ctx.clone(),
        )
        .await
        .unwrap();
    }

    fn team_secret(name: &str, pem: &str) -> Value {
        let mut s = secret(name, &[("cosign.pub", pem)]);
        s["metadata"]["namespace"] = json!(TEAM);
        s
    }

    #[tokio::test]
    async fn an_image_policy_is_published_under_its_namespace_with_its_own_namespaces_key() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        cluster_policy(&api, &ctx, "open", "**").await;
        api.put(
            &secret_path_in(TEAM, "team-key"),
            team_secret("team-key", P256_PUB),
        );
        // A Secret of the same name in sigil's namespace must not be read.
        api.put(
            &secret_path("team-key"),
            secret("team-key", &[("k", "not a key")]),
        );
        api.put(
            &image_policy_path(TEAM, "extra"),
            image_policy(
                TEAM,
                "extra",
                1,
                json!({"images": [{"glob": "**"}],
                       "authorities": [{"key": {"secretRef": {"name": "team-key"}}}]}),
            ),
        );

        let action = reconcile_image_policy(&api, &ctx, "extra").await;

        let cond = ready(&api, "extra");
        assert_eq!(
            (&cond["status"], &cond["reason"]),
            (&json!("True"), &json!("Accepted"))
        );
        assert_eq!(
            cond["message"],
            "generation 1 compiled and is enforced by the webhook in namespace team-a, in \
             addition to the cluster's ClusterImagePolicies"
        );
        let snapshot = stored_snapshot(&api).unwrap();
        let published = snapshot
            .policies
            .iter()
            .find(|p| p.name == "extra")
            .unwrap();
        assert_eq!(
            (published.namespace.as_str(), published.name.as_str()),
            (TEAM, "extra")
        );
        assert_eq!(
            published.spec.authorities[0]
                .key
                .as_ref()
                .unwrap()
                .data
                .as_deref(),
            Some(P256_PUB)
        );
        let valid = sigil_compile::snapshot::validate(&snapshot).unwrap();
        assert!(valid.policies.contains_key("team-a/extra"));
        // The tenant's Secret is not watched: it is read again within a minute.
        assert_eq!(action, Action::requeue(RESYNC_REFERENCES));
    }

    #[tokio::test]
    async fn an_image_policy_reaching_outside_its_namespace_is_not_published() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        api.put(
            &secret_path("sigil-key"),
            secret("sigil-key", &[("k", P256_PUB)]),
        );
        api.put(
            &image_policy_path(TEAM, "borrow"),
            image_policy(
                TEAM,
                "borrow",
                1,
                json!({"images": [{"glob": "**"}],
                       "authorities": [{"key": {"secretRef": {"name": "sigil-key", "namespace": NS}}}]}),
            ),
        );

        reconcile_image_policy(&api, &ctx, "borrow").await;

        let cond = ready(&api, "borrow");
        assert_eq!(
            (&cond["status"], &cond["reason"]),
            (&json!("False"), &json!("Invalid"))
        );
        assert_eq!(
            cond["message"],
            "generation 1 rejected: spec.authorities[0].key.secretRef: Secret sigil-system/sigil-key \
             is outside the ImagePolicy's namespace `team-a`; an ImagePolicy reads Secrets only \
             from its own namespace: create it there and leave the namespace out; the webhook \
             does not enforce this policy"
        );
        assert!(
            api.requests_to(Method::GET, &secret_path("sigil-key"))
                .is_empty()
        );
        assert!(stored_snapshot(&api).is_none_or(|s| s.policies.is_empty()));
    }

    #[tokio::test]
    async fn a_secret_rbac_does_not_let_sigil_read_is_a_reason_on_the_policy() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        cluster_policy(&api, &ctx, "open", "**").await;
        api.put(
            &secret_path_in(TEAM, "team-key"),
            team_secret("team-key", P256_PUB),
        );
        api.forbid(&secret_path_in(TEAM, "team-key"));
        api.put(
            &image_policy_path(TEAM, "extra"),
            image_policy(
                TEAM,
                "extra",
                1,
                json!({"images": [{"glob": "**"}],
                       "authorities": [{"key": {"secretRef": {"name": "team-key"}}}]}),
            ),
        );

        reconcile_image_policy(&api, &ctx, "extra").await;

        let cond = ready(&api, "extra");
        assert_eq!(
            (&cond["status"], &cond["reason"]),
            (&json!("False"), &json!("UnresolvedReference"))
        );
        let message = cond["message"].as_str().unwrap();
        assert!(
            message.contains(
                "spec.authorities[0].key.secretRef: sigil's controller may not read Secret \
                 team-a/team-key; let it read the namespace's Secrets and ConfigMaps (chart value \
                 imagePolicies.referenceNamespaces"
            ),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_deleted_image_policy_is_withdrawn_and_a_cluster_policy_of_its_name_stays() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        let spec =
            json!({"images": [{"glob": "**"}], "authorities": [{"key": {"data": P256_PUB}}]});
        api.put(&cip_path("extra"), cip("extra", 1, spec.clone()));
        api.put(
            &image_policy_path(TEAM, "extra"),
            image_policy(TEAM, "extra", 1, spec),
        );
        reconcile(
            object::<ClusterImagePolicy>(&api, &cip_path("extra")),
            ctx.clone(),
        )
        .await
        .unwrap();
        reconcile_image_policy(&api, &ctx, "extra").await;
        let keys = |api: &FakeApi| -> Vec<String> {
            stored_snapshot(api)
                .unwrap()
                .policies
                .iter()
                .map(SnapshotPolicy::key)
                .collect()
        };
        assert_eq!(keys(&api), ["extra", "team-a/extra"]);

        // After a restart, only ClusterImagePolicy `extra` is listed among
        // its kind: the ImagePolicy of the same name is not touched by it.
        ClusterImagePolicy::retain(&ctx, &BTreeSet::from(["extra".to_owned()]))
            .await
            .unwrap();
        assert_eq!(keys(&api), ["extra", "team-a/extra"]);
        ImagePolicy::unpublish(&ctx, "team-a/extra").await.unwrap();
        assert_eq!(keys(&api), ["extra"]);
    }

    fn ready_of(api: &FakeApi, name: &str) -> (String, String, String) {
        let cond = ready(api, name);
        (
            cond["status"].as_str().unwrap().to_owned(),
            cond["reason"].as_str().unwrap().to_owned(),
            cond["message"].as_str().unwrap().to_owned(),
        )
    }

    fn published_keys(api: &FakeApi) -> Vec<String> {
        stored_snapshot(api)
            .map(|s| s.policies.iter().map(SnapshotPolicy::key).collect())
            .unwrap_or_default()
    }

    fn static_spec(glob: &str) -> Value {
        json!({"images": [{"glob": glob}], "authorities": [{"static": {"action": "pass"}}]})
    }

    #[tokio::test]
    async fn an_image_policy_naming_a_registry_no_cluster_policy_names_is_not_ready_nor_enforced() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        cluster_policy(&api, &ctx, "platform", "registry.example/**").await;
        for (name, spec) in [
            ("inside", static_spec("registry.example/team-a/**")),
            ("anywhere", static_spec("**")),
            ("service", static_spec("kubernetes.default.svc/x")),
            (
                "source",
                json!({"images": [{"glob": "registry.example/team-a/**"}],
                       "authorities": [{"key": {"data": P256_PUB},
                                        "source": [{"oci": "10.96.0.1/sigs"}]}]}),
            ),
        ] {
            api.put(
                &image_policy_path(TEAM, name),
                image_policy(TEAM, name, 1, spec),
            );
            reconcile_image_policy(&api, &ctx, name).await;
        }
        assert_eq!(ready_of(&api, "inside").1, "Accepted");
        for name in ["anywhere", "service", "source"] {
            let (status, reason, message) = ready_of(&api, name);
            assert_eq!(
                (status.as_str(), reason.as_str()),
                ("False", "RegistryNotAllowed"),
                "{message}"
            );
            assert!(
                message.contains("the registries the cluster's ClusterImagePolicies name")
                    && message.contains("the webhook does not enforce this policy"),
                "{message}"
            );
        }
        assert!(
            ready_of(&api, "source")
                .2
                .contains("spec.authorities[0].source[0].oci: registry `10.96.0.1` is not among")
        );
        assert_eq!(published_keys(&api), ["platform", "team-a/inside"]);
    }

    #[tokio::test]
    async fn an_admins_list_decides_which_registries_image_policies_name() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |args| {
            args.image_policy_registry = vec!["*.corp.example".into()];
        });
        cluster_policy(&api, &ctx, "open", "**").await;
        for (name, glob) in [
            ("corp", "team.corp.example/**"),
            ("hub", "docker.io/team/*"),
        ] {
            api.put(
                &image_policy_path(TEAM, name),
                image_policy(TEAM, name, 1, static_spec(glob)),
            );
            reconcile_image_policy(&api, &ctx, name).await;
        }
        assert_eq!(ready_of(&api, "corp").1, "Accepted");
        let (_, reason, message) = ready_of(&api, "hub");
        assert_eq!(reason, "RegistryNotAllowed");
        assert!(message.contains("--image-policy-registry"), "{message}");
    }

    #[tokio::test]
    async fn a_published_image_policy_is_withdrawn_once_the_registry_it_names_is_no_longer_allowed()
    {
        let (client, api) = FakeApi::start();
        let (ctx, _rx, _l) = context(client, true);
        cluster_policy(&api, &ctx, "platform", "registry.example/**").await;
        api.put(
            &image_policy_path(TEAM, "extra"),
            image_policy(TEAM, "extra", 1, static_spec("registry.example/team-a/**")),
        );
        reconcile_image_policy(&api, &ctx, "extra").await;
        assert_eq!(published_keys(&api), ["platform", "team-a/extra"]);

        // The only ClusterImagePolicy naming that registry goes away.
        ClusterImagePolicy::unpublish(&ctx, "platform")
            .await
            .unwrap();
        reconcile_image_policy(&api, &ctx, "extra").await;

        let (status, reason, message) = ready_of(&api, "extra");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "RegistryNotAllowed")
        );
        assert!(
            message.contains("the webhook does not enforce this policy"),
            "{message}"
        );
        assert!(published_keys(&api).is_empty());
    }

    #[test]
    fn the_namespaces_watched_and_the_policies_a_change_touches_follow_the_references() {
        use crate::tenant_references::{Kind, Touched};
        let (store, mut writer) = kube::runtime::reflector::store::<ImagePolicy>();
        let key = json!({"secretRef": {"name": "team-key"}});
        let add = |writer: &mut kube::runtime::reflector::store::Writer<ImagePolicy>,
                   ns: &str,
                   name: &str,
                   spec: Value| {
            let obj: ImagePolicy = serde_json::from_value(image_policy(ns, name, 1, spec)).unwrap();
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(obj));
        };
        add(
            &mut writer,
            TEAM,
            "keyed",
            json!({"images": [{"glob": "**"}], "authorities": [{"key": key}]}),
        );
        add(
            &mut writer,
            TEAM,
            "moduled",
            json!({"images": [{"glob": "**"}], "authorities": [{"static": {"action": "pass"}}],
                   "policy": {"type": "rego", "configMapRef": {"name": "module"}}}),
        );
        add(&mut writer, "team-b", "inline", static_spec("**"));
        add(
            &mut writer,
            "team-c",
            "keyed",
            json!({"images": [{"glob": "**"}], "authorities": [{"key": key}]}),
        );
        assert_eq!(
            namespaces_with_references(&store),
            BTreeSet::from([TEAM.to_owned(), "team-c".to_owned()])
        );
        let touched = |kind, namespace: &str, name: &str| {
            let mut names: Vec<String> = policies_touched(
                &store,
                &Touched {
                    kind,
                    namespace: namespace.into(),
                    name: name.into(),
                },
            )
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
            names.sort();
            names
        };
        assert_eq!(touched(Kind::Secret, TEAM, "team-key"), ["team-a/keyed"]);
        assert_eq!(touched(Kind::ConfigMap, TEAM, "module"), ["team-a/moduled"]);
        assert!(touched(Kind::ConfigMap, TEAM, "team-key").is_empty());
        assert!(touched(Kind::Secret, "team-b", "team-key").is_empty());
    }

    #[tokio::test]
    async fn an_image_policy_past_its_namespaces_share_says_so_on_its_own_status() {
        let (client, api) = FakeApi::start();
        let (ctx, _rx) = context_with(client, |args| {
            args.image_policy_snapshot_bytes_per_namespace = 2048;
            // The registry is the admin's to allow; the budget is the
            // check under test.
            args.image_policy_registry = vec!["registry.example.com".into()];
        });
        let globs = |n: usize| -> Vec<Value> {
            (0..n)
                .map(|i| json!({"glob": format!("registry.example.com/team/app-{i:04}/**")}))
                .collect()
        };
        api.put(
            &image_policy_path(TEAM, "big"),
            image_policy(
                TEAM,
                "big",
                1,
                json!({"images": globs(80), "authorities": [{"key": {"data": P256_PUB}}]}),
            ),
        );

        reconcile_image_policy(&api, &ctx, "big").await;

        let cond = ready(&api, "big");
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "SnapshotBudget");
        let message = cond["message"].as_str().unwrap();
        assert!(message.contains("namespace team-a would take"), "{message}");
        assert!(
            message.contains("the webhook does not enforce this policy"),
            "{message}"
        );
        assert!(ctx.publisher.policy("team-a/big").await.is_none());
    }
}
