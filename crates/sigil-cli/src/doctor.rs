//! `sigil doctor`: checks an installation through the current kube context
//! and explains what usually breaks (webhook registration and its caBundle,
//! the Service's endpoints, the webhook answering through the API server,
//! the policy snapshot and what each webhook replica loaded, the policies'
//! and trust roots' conditions, TUF freshness, enforced namespaces, and for
//! each registry host the policies name, which cloud credential provider
//! serves it and whether a webhook pod can get a token from it now).
//!
//! It reads the cluster and writes nothing: the one request that reaches
//! admission is a server-side dry-run Pod create, which the API server
//! never persists. The judgement is plain code in [`checks`], tested
//! without a cluster; this module only gathers what it needs.
//!
//! The serving certificate: a webhook registered by URL is asked for it (a
//! TLS handshake from here, what the API server does); one behind a Service
//! is read from its TLS Secret, because a Service's address is rarely
//! reachable from where an admin runs `sigil doctor`, and the API server's
//! service proxy terminates TLS itself. The dry run then exercises the real
//! path, the API server's own TLS check included.

mod checks;
mod tls;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result};
use checks::{
    Conditioned, CredentialAnswer, CredentialFacts, DryRun, Finding, Hook, LeaseFacts, Loaded,
    Selector, ServingCert, SnapshotFacts, Status, Target,
};
use clap::{Args, ValueEnum};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::discovery::ApiResource;
use rustls::pki_types::UnixTime;
use serde::Serialize;
use serde_json::{Value, json};
use sigil_api::snapshot::{PolicySnapshot, SECRET_NAME};
use time::OffsetDateTime;

use crate::verdict::Verdict;

/// How `sigil doctor` prints.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Output {
    /// One line per check, with details and fixes.
    Text,
    /// The report as one JSON object.
    Json,
}

/// `sigil doctor`.
#[derive(Args)]
pub(crate) struct DoctorArgs {
    /// The namespace sigil runs in (its Service, Secrets and Lease are there).
    #[arg(long, default_value = "sigil-system")]
    sigil_namespace: String,
    /// The kubeconfig context (default: the current one).
    #[arg(long)]
    context: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    output: Output,
    /// The webhook's metrics address (`http://HOST:PORT`), repeatable, when
    /// the webhook runs outside the cluster (registered by URL). Replicas
    /// in the cluster are read through the API server.
    #[arg(long = "webhook-metrics", value_name = "URL")]
    webhook_metrics: Vec<String>,
    /// The controller's leader-election Lease (its --lease-name).
    #[arg(long, default_value = "sigil-controller")]
    lease_name: String,
    /// Seconds each request may take.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// The whole report.
#[derive(Serialize)]
struct Report {
    /// The kubeconfig context checked.
    context: String,
    /// sigil's namespace.
    namespace: String,
    /// No check failed.
    healthy: bool,
    /// Each check's finding, in order.
    checks: Vec<Finding>,
}

/// Runs `sigil doctor`: exit 0 when no check failed, 1 when one did.
pub(crate) fn run(args: &DoctorArgs) -> Result<Verdict> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = rt.block_on(doctor(args))?;
    match args.output {
        Output::Text => print!("{}", text(&report)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).context("cannot print the report")?
        ),
    }
    Ok(if report.healthy {
        Verdict::Allow
    } else {
        Verdict::Deny
    })
}

fn text(report: &Report) -> String {
    let mut out = format!(
        "sigil doctor: context {}, sigil namespace {}\n",
        report.context, report.namespace
    );
    for f in &report.checks {
        out.push_str(&format!(
            "[{:<4}] {}: {}\n",
            f.status.tag(),
            f.check,
            f.summary
        ));
        for d in &f.details {
            out.push_str(&format!("       {d}\n"));
        }
        if let Some(fix) = &f.fix {
            out.push_str(&format!("       fix: {fix}\n"));
        }
    }
    let count = |s: Status| report.checks.iter().filter(|f| f.status == s).count();
    out.push_str(&format!(
        "{} checks: {} ok, {} failed, {} warnings, {} skipped\n",
        report.checks.len(),
        count(Status::Ok),
        count(Status::Fail),
        count(Status::Warn),
        count(Status::Skip)
    ));
    out
}

fn current_context(requested: Option<&str>) -> String {
    if let Some(c) = requested {
        return c.to_owned();
    }
    kube::config::Kubeconfig::read()
        .ok()
        .and_then(|k| k.current_context)
        .unwrap_or_else(|| "(in-cluster)".to_owned())
}

async fn doctor(args: &DoctorArgs) -> Result<Report> {
    let client = crate::audit_cmd::kube_client(args.context.as_deref()).await?;
    let ns = args.sigil_namespace.as_str();
    let timeout = Duration::from_secs(args.timeout.max(1));
    let now = OffsetDateTime::now_utc();
    let mut out = Vec::new();

    let (validating, mutating) = hooks(&client).await?;
    out.push(checks::configurations(
        validating.as_ref(),
        mutating.as_ref(),
    ));

    let namespaces = namespace_labels(&client).await?;
    let excluded = vec!["kube-system".to_owned(), ns.to_owned()];
    let (ns_finding, enforced) = checks::namespaces(
        validating.as_ref().map(|h| &h.namespace_selector),
        &namespaces,
        &excluded,
    );

    let mut service_pods = None;
    if let Some(hook) = &validating {
        match &hook.target {
            Target::Url(url) => {
                let served = tls::served_chain(url, timeout).await;
                let reached = served.as_ref().map(|_| ()).map_err(Clone::clone);
                let cert = served.and_then(|chain| {
                    let (host, _) = tls::host_port(url)?;
                    Ok(serving_cert(
                        format!("served at {url}"),
                        host,
                        &hook.ca_bundle,
                        &chain,
                    ))
                });
                out.push(checks::ca_bundle(cert, now));
                out.push(checks::url_reachable(url, &reached));
            }
            Target::Service {
                namespace, name, ..
            } => {
                let cert = secret_cert(&client, namespace, name, &hook.ca_bundle).await;
                out.push(checks::ca_bundle(cert, now));
                let (found, pods) = service_endpoints(&client, namespace, name).await;
                out.push(checks::endpoints(found));
                service_pods = Some((namespace.clone(), pods));
            }
        }
        let endpoints_down = out
            .iter()
            .any(|f| f.check == "endpoints" && f.status == Status::Fail);
        out.push(checks::dry_run(
            &dry_run(&client, enforced.first()).await,
            endpoints_down,
        ));
    }

    let cips = conditioned(
        &client,
        "clusterimagepolicies",
        "ClusterImagePolicy",
        "mode",
    )
    .await;
    let roots = conditioned(&client, "trustroots", "TrustRoot", "remote").await;
    let lease = lease(&client, ns, &args.lease_name).await;
    let mut snapshot = read_snapshot(&client, ns).await;
    let listed = |r: &Result<Vec<Conditioned>, String>| r.as_ref().cloned().unwrap_or_default();
    let mut finding = checks::snapshot(snapshot.clone(), &listed(&cips), lease.as_ref(), now);
    if finding.status == Status::Fail && snapshot.is_ok() {
        // The controller publishes within about a second of a change: look
        // again once before calling it stale.
        tokio::time::sleep(Duration::from_secs(3)).await;
        snapshot = read_snapshot(&client, ns).await;
        let cips = listed(
            &conditioned(
                &client,
                "clusterimagepolicies",
                "ClusterImagePolicy",
                "mode",
            )
            .await,
        );
        finding = checks::snapshot(
            snapshot.clone(),
            &cips,
            lease.as_ref(),
            OffsetDateTime::now_utc(),
        );
    }
    out.push(finding);

    let revision = snapshot.as_ref().ok().map(|s| s.revision);
    let credentials = match &service_pods {
        Some((namespace, pods)) => {
            let hosts = policy_registries(&client, ns).await;
            registry_credentials(&client, namespace, pods, hosts).await
        }
        None => checks::registry_credentials(None, &[]),
    };
    out.push(match (&validating, service_pods) {
        (_, Some((namespace, pods))) => {
            let replicas = pod_revisions(&client, &namespace, &pods).await;
            checks::loaded(revision, &replicas, None)
        }
        (Some(_), None) if !args.webhook_metrics.is_empty() => {
            let replicas = url_revisions(&args.webhook_metrics, timeout).await;
            checks::loaded(revision, &replicas, None)
        }
        (Some(_), None) => checks::loaded(
            revision,
            &[],
            Some(
                "the webhook is registered by URL (it runs outside the cluster): its metrics \
                  address is not known",
            ),
        ),
        (None, None) => checks::loaded(revision, &[], Some("no webhook is registered")),
    });
    out.push(match &cips {
        Ok(items) => checks::policies(items),
        Err(why) => Finding::new("policies", Status::Fail, why.clone()),
    });
    out.push(match &roots {
        Ok(items) => checks::trust_roots(items),
        Err(why) => Finding::new("trust-roots", Status::Fail, why.clone()),
    });
    out.push(checks::tuf(snapshot.as_ref().ok(), &listed(&roots)));
    out.push(
        match (
            sigstore_policies(&client).await,
            policy_controller_webhook(&client).await,
        ) {
            (Ok(sources), Ok(webhook)) => checks::policy_controller(sources.as_deref(), webhook),
            (Err(why), _) | (_, Err(why)) => Finding::new("policy-controller", Status::Skip, why),
        },
    );
    out.push(ns_finding);
    out.push(credentials);

    let healthy = out.iter().all(|f| f.status != Status::Fail);
    Ok(Report {
        context: current_context(args.context.as_deref()),
        namespace: ns.to_owned(),
        healthy,
        checks: out,
    })
}

const VALIDATE: &str = "validate.policy.sigil.dev";
const MUTATE: &str = "mutate.policy.sigil.dev";

fn target(c: &WebhookClientConfig) -> Target {
    match (&c.url, &c.service) {
        (Some(url), _) => Target::Url(url.clone()),
        (None, Some(s)) => Target::Service {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            port: s.port.unwrap_or(443),
        },
        (None, None) => Target::Url(String::new()),
    }
}

fn selector(s: Option<&LabelSelector>) -> Selector {
    let Some(s) = s else {
        return Selector::default();
    };
    Selector {
        labels: s.match_labels.clone().unwrap_or_default(),
        expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|e| {
                (
                    e.key.clone(),
                    e.operator.clone(),
                    e.values.clone().unwrap_or_default(),
                )
            })
            .collect(),
    }
}

/// One webhook of either configuration kind, from the fields the two k8s
/// types share, with the API server's defaults (failurePolicy Fail, 10 s).
fn hook(
    kind: &'static str,
    config: String,
    name: String,
    client_config: WebhookClientConfig,
    failure_policy: Option<String>,
    timeout_seconds: Option<i32>,
    namespace_selector: Option<&LabelSelector>,
) -> Hook {
    Hook {
        kind,
        config,
        name,
        target: target(&client_config),
        ca_bundle: client_config.ca_bundle.map(|b| b.0).unwrap_or_default(),
        failure_policy: failure_policy.unwrap_or_else(|| "Fail".into()),
        timeout_seconds: timeout_seconds.unwrap_or(10),
        namespace_selector: selector(namespace_selector),
    }
}

/// sigil's validating and mutating webhooks, found by their names.
async fn hooks(client: &kube::Client) -> Result<(Option<Hook>, Option<Hook>)> {
    let v: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let validating = v
        .list(&ListParams::default())
        .await
        .context("cannot list ValidatingWebhookConfigurations (needs list on them)")?
        .items
        .into_iter()
        .find_map(|c| {
            let config = c.metadata.name.unwrap_or_default();
            c.webhooks
                .into_iter()
                .flatten()
                .find(|w| w.name == VALIDATE)
                .map(|w| {
                    hook(
                        "ValidatingWebhookConfiguration",
                        config,
                        w.name,
                        w.client_config,
                        w.failure_policy,
                        w.timeout_seconds,
                        w.namespace_selector.as_ref(),
                    )
                })
        });
    let m: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mutating = m
        .list(&ListParams::default())
        .await
        .context("cannot list MutatingWebhookConfigurations (needs list on them)")?
        .items
        .into_iter()
        .find_map(|c| {
            let config = c.metadata.name.unwrap_or_default();
            c.webhooks
                .into_iter()
                .flatten()
                .find(|w| w.name == MUTATE)
                .map(|w| {
                    hook(
                        "MutatingWebhookConfiguration",
                        config,
                        w.name,
                        w.client_config,
                        w.failure_policy,
                        w.timeout_seconds,
                        w.namespace_selector.as_ref(),
                    )
                })
        });
    Ok((validating, mutating))
}

async fn namespace_labels(
    client: &kube::Client,
) -> Result<Vec<(String, BTreeMap<String, String>)>> {
    let api: Api<Namespace> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .context("cannot list namespaces (needs list on namespaces)")?;
    // A namespace being deleted takes no new pods: neither listed nor tried.
    Ok(list
        .items
        .into_iter()
        .filter(|n| n.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating"))
        .map(|n| {
            (
                n.metadata.name.unwrap_or_default(),
                n.metadata.labels.unwrap_or_default(),
            )
        })
        .collect())
}

fn serving_cert(
    source: String,
    server_name: String,
    ca_bundle: &[u8],
    chain: &[rustls::pki_types::CertificateDer<'static>],
) -> ServingCert {
    let verified = tls::verify(ca_bundle, chain, &server_name, UnixTime::now());
    ServingCert {
        source,
        leaf: chain.first().and_then(tls::leaf_facts),
        server_name,
        verified,
    }
}

/// The serving certificate from the webhook's TLS Secret: the one its
/// Deployment (named like the Service) mounts, else the chart's default name.
async fn secret_cert(
    client: &kube::Client,
    namespace: &str,
    service: &str,
    ca_bundle: &[u8],
) -> Result<ServingCert, String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let mut candidates: Vec<String> = match deployments.get_opt(service).await {
        Ok(Some(d)) => d
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.volumes)
            .into_iter()
            .flatten()
            .filter_map(|v| v.secret.and_then(|s| s.secret_name))
            .collect(),
        _ => Vec::new(),
    };
    candidates.push(format!("{service}-tls"));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for name in &candidates {
        let Ok(Some(secret)) = secrets.get_opt(name).await else {
            continue;
        };
        let Some(pem) = secret.data.as_ref().and_then(|d| d.get("tls.crt")) else {
            continue;
        };
        let chain = tls::certificates(&pem.0);
        if chain.is_empty() {
            return Err(format!(
                "Secret {namespace}/{name} holds no certificate in tls.crt"
            ));
        }
        return Ok(serving_cert(
            format!("in Secret {namespace}/{name}"),
            format!("{service}.{namespace}.svc"),
            ca_bundle,
            &chain,
        ));
    }
    Err(format!(
        "no TLS Secret of the webhook found in {namespace} (looked for {}); doctor needs get on \
         secrets there",
        candidates.join(", ")
    ))
}

/// The Service's ready and not-ready endpoints, and the pods it selects.
async fn service_endpoints(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> (Result<checks::Endpoints, String>, Vec<Pod>) {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let service = match services.get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return (
                Err(format!(
                    "the webhooks call Service {namespace}/{name}, which does not exist"
                )),
                Vec::new(),
            );
        }
        Err(e) => {
            return (
                Err(format!("cannot read Service {namespace}/{name}: {e}")),
                Vec::new(),
            );
        }
    };
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let listed = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await;
    let found = match listed {
        Ok(list) => {
            let mut e = checks::Endpoints {
                service: format!("{namespace}/{name}"),
                ready: Vec::new(),
                not_ready: Vec::new(),
            };
            for ep in list.items.iter().flat_map(|s| &s.endpoints) {
                let who = ep
                    .target_ref
                    .as_ref()
                    .and_then(|t| t.name.clone())
                    .unwrap_or_else(|| ep.addresses.join(","));
                let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if ready {
                    e.ready.push(who);
                } else {
                    e.not_ready.push(who);
                }
            }
            Ok(e)
        }
        Err(e) => Err(format!(
            "cannot list the EndpointSlices of Service {namespace}/{name}: {e}"
        )),
    };
    let selector = service
        .spec
        .and_then(|s| s.selector)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = if selector.is_empty() {
        Vec::new()
    } else {
        pods.list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    };
    (found, pods)
}

/// A server-side dry-run create of a Pod no one signed, in `namespace`.
async fn dry_run(client: &kube::Client, namespace: Option<&String>) -> DryRun {
    let Some(namespace) = namespace else {
        return DryRun::NoNamespace;
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let probe: Pod = match serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "sigil-doctor-", "labels": {"app.kubernetes.io/name": "sigil-doctor"}},
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "probe",
                // A digest, so no tag is resolved; a registry name that
                // cannot exist, so no one has signed it.
                "image": format!("sigil-doctor.invalid/probe@sha256:{}", "0".repeat(64)),
            }],
        },
    })) {
        Ok(p) => p,
        Err(e) => {
            return DryRun::Refused {
                namespace: namespace.clone(),
                message: format!("cannot build the probe Pod: {e}"),
            };
        }
    };
    let params = PostParams {
        dry_run: true,
        field_manager: Some("sigil-doctor".into()),
    };
    match pods.create(&params, &probe).await {
        Ok(_) => DryRun::Allowed {
            namespace: namespace.clone(),
        },
        Err(kube::Error::Api(status)) => DryRun::Refused {
            namespace: namespace.clone(),
            message: status.message,
        },
        Err(e) => DryRun::Refused {
            namespace: namespace.clone(),
            message: e.to_string(),
        },
    }
}

/// Policies or TrustRoots with their conditions; `note` is `spec.mode` for
/// policies, `remote` for TrustRoots with `spec.remote`.
async fn conditioned(
    client: &kube::Client,
    plural: &str,
    kind: &str,
    note: &str,
) -> Result<Vec<Conditioned>, String> {
    listed_with_conditions(client, "policy.sigil.dev", plural, kind, note)
        .await
        .map_err(|e| {
            format!(
                "cannot list {kind}s: {e}; are sigil's CRDs installed, and may this context list \
                 them?"
            )
        })
}

/// policy-controller's ClusterImagePolicies with their conditions; `None`
/// when the cluster does not serve that API (no policy-controller CRDs).
async fn sigstore_policies(client: &kube::Client) -> Result<Option<Vec<Conditioned>>, String> {
    match listed_with_conditions(
        client,
        "policy.sigstore.dev",
        "clusterimagepolicies",
        "ClusterImagePolicy",
        "mode",
    )
    .await
    {
        Ok(items) => Ok(Some(items)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(format!(
            "cannot list policy-controller's ClusterImagePolicies (policy.sigstore.dev): {e}; \
             may this context list them?"
        )),
    }
}

/// Whether policy-controller's own webhook configuration exists.
async fn policy_controller_webhook(client: &kube::Client) -> Result<bool, String> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.get_opt("policy.sigstore.dev")
        .await
        .map(|c| c.is_some())
        .map_err(|e| format!("cannot read ValidatingWebhookConfiguration policy.sigstore.dev: {e}"))
}

async fn listed_with_conditions(
    client: &kube::Client,
    group: &str,
    plural: &str,
    kind: &str,
    note: &str,
) -> Result<Vec<Conditioned>, kube::Error> {
    let resource = ApiResource {
        group: group.into(),
        version: "v1alpha1".into(),
        api_version: format!("{group}/v1alpha1"),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .map(|o| {
            let at = |ptr: &str| o.data.pointer(ptr).unwrap_or(&Value::Null);
            let conditions = at("/status/conditions")
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    let text = |k: &str| {
                        c.get(k)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    let kind = c.get("type").and_then(Value::as_str)?.to_owned();
                    Some((kind, (text("status"), text("reason"), text("message"))))
                })
                .collect();
            let note = if note == "mode" {
                at("/spec/mode").as_str().unwrap_or("enforce").to_owned()
            } else if at("/spec/remote").is_object() {
                "remote".to_owned()
            } else {
                String::new()
            };
            Conditioned {
                name: o.metadata.name.clone().unwrap_or_default(),
                generation: o.metadata.generation.unwrap_or(0),
                observed_generation: at("/status/observedGeneration").as_i64(),
                conditions,
                note,
            }
        })
        .collect())
}

async fn lease(client: &kube::Client, namespace: &str, name: &str) -> Option<LeaseFacts> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let spec = api.get_opt(name).await.ok()??.spec?;
    Some(LeaseFacts {
        holder: spec.holder_identity.unwrap_or_default(),
        renewed: spec
            .renew_time
            .and_then(|t| OffsetDateTime::from_unix_timestamp(t.0.as_second()).ok()),
        duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(15),
        ),
    })
}

async fn read_snapshot(client: &kube::Client, namespace: &str) -> Result<SnapshotFacts, String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let where_ = format!("{namespace}/{SECRET_NAME}");
    let secret = secrets
        .get_opt(SECRET_NAME)
        .await
        .map_err(|e| format!("cannot read Secret {where_}: {e}"))?
        .ok_or_else(|| format!("Secret {where_} does not exist"))?;
    let s: PolicySnapshot = sigil_judge::snapshot_source::load_secret(&secrets, &secret)
        .await
        .map_err(|e| format!("Secret {where_} holds no valid snapshot: {e}"))?;
    let generated_at = sigil_verifier::trust::parse_rfc3339(&s.generated_at);
    Ok(SnapshotFacts {
        secret: where_,
        revision: s.revision,
        generated_at,
        policies: s
            .policies
            .iter()
            .map(|p| (p.name.clone(), p.generation))
            .collect(),
        trust_roots: s.trust_roots.len(),
        sigstore: s
            .sigstore
            .as_ref()
            .map(|g| (g.instance.clone(), g.source.clone())),
        default_trust_root: s
            .trust_roots
            .iter()
            .find(|t| t.default)
            .map(|t| t.name.clone()),
    })
}

/// Registry hosts the policies in the snapshot name, checked at most.
const MAX_CHECKED_REGISTRIES: usize = 16;

/// The registry host of an image glob, when the glob names one (no
/// pattern in it); Docker Hub for a glob without a registry part.
fn glob_host(glob: &str) -> Option<String> {
    let first = glob.split('/').next()?;
    let is_host =
        glob.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    if !is_host && glob.starts_with('*') {
        return None;
    }
    let host = if is_host { first } else { "index.docker.io" };
    (!host.contains(['*', '?', '[', '{'])).then(|| host.to_ascii_lowercase())
}

/// The registry hosts the snapshot's policies name: their images' globs
/// (those without a pattern in the host) and their `source[].oci`
/// repositories; an empty list when the snapshot cannot be read (its own
/// check says why).
async fn policy_registries(client: &kube::Client, namespace: &str) -> Vec<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let Ok(Some(secret)) = secrets.get_opt(SECRET_NAME).await else {
        return Vec::new();
    };
    let Ok(s) = sigil_judge::snapshot_source::load_secret(&secrets, &secret).await else {
        return Vec::new();
    };
    let mut hosts: Vec<String> = s
        .policies
        .iter()
        .flat_map(|p| {
            let globs = p.spec.images.iter().filter_map(|i| glob_host(&i.glob));
            let sources = p
                .spec
                .authorities
                .iter()
                .flat_map(|a| a.sources.iter())
                .filter_map(|src| src.oci.as_deref())
                .filter_map(|oci| sigil_registry::Repository::parse(oci).ok())
                .map(|r| r.host);
            globs.chain(sources).collect::<Vec<_>>()
        })
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The port of a sigil pod's admin server (its container port `metrics`,
/// 9090 by default).
fn admin_port(pod: &Pod) -> i32 {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some("metrics"))
        .map_or(9090, |p| p.container_port)
}

/// Asks one running webhook pod, through the API server's pod proxy, which
/// provider serves each of `hosts` and whether it can get a token now.
async fn registry_credentials(
    client: &kube::Client,
    namespace: &str,
    pods: &[Pod],
    hosts: Vec<String>,
) -> Finding {
    let running = serving(pods).find(|p| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|phase| phase == "Running")
    });
    let Some(pod) = running else {
        return checks::registry_credentials(None, &[]);
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    let port = admin_port(pod);
    let mut facts = Vec::new();
    for host in hosts.into_iter().take(MAX_CHECKED_REGISTRIES) {
        let path = format!(
            "/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/registry-credentials?host={}",
            host.replace(':', "%3A")
        );
        let answer = match http::Request::get(&path).body(Vec::new()) {
            Ok(req) => match client.request_text(req).await {
                Ok(text) => serde_json::from_str::<CredentialAnswer>(&text).map_err(|e| {
                    format!(
                        "the webhook's answer is not the expected JSON ({e}); is it an older sigil?"
                    )
                }),
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        facts.push(CredentialFacts { host, answer });
    }
    checks::registry_credentials(Some(&format!("pod {name}")), &facts)
}

/// The webhook pods that take admissions: a terminating pod (deleted, still
/// shutting down) has left the Service's endpoints and is not asked.
fn serving(pods: &[Pod]) -> impl Iterator<Item = &Pod> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
}

/// Each serving webhook pod's loaded revision, read through the API
/// server's pod proxy from its metrics port; a pod gone between the list
/// and the question is left out.
async fn pod_revisions(client: &kube::Client, namespace: &str, pods: &[Pod]) -> Vec<Loaded> {
    let mut out = Vec::new();
    for pod in serving(pods) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let running = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Running");
        if !running {
            out.push(Loaded {
                replica: format!("pod {name}"),
                revision: Err("not running".into()),
            });
            continue;
        }
        let port = admin_port(pod);
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics");
        let revision = match http::Request::get(&path).body(Vec::new()) {
            Ok(req) => match client.request_text(req).await {
                Ok(t) => Ok(checks::revision_metric(&t)),
                // The API server's own NotFound: the pod is gone (a 404 of
                // the proxied metrics endpoint carries no such reason).
                Err(kube::Error::Api(s)) if s.reason == "NotFound" => continue,
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        out.push(Loaded {
            replica: format!("pod {name}"),
            revision,
        });
    }
    out
}

/// Revisions from metrics URLs given on the command line.
async fn url_revisions(urls: &[String], timeout: Duration) -> Vec<Loaded> {
    let client = match reqwest::Client::builder().timeout(timeout).build() {
        Ok(c) => c,
        Err(e) => {
            return urls
                .iter()
                .map(|u| Loaded {
                    replica: u.clone(),
                    revision: Err(format!("cannot build an HTTP client: {e}")),
                })
                .collect();
        }
    };
    let mut out = Vec::new();
    for url in urls {
        let full = if url.ends_with("/metrics") {
            url.clone()
        } else {
            format!("{}/metrics", url.trim_end_matches('/'))
        };
        let revision = async {
            let resp = client.get(&full).send().await.map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("HTTP {}", resp.status()));
            }
            let text = resp.text().await.map_err(|e| e.to_string())?;
            Ok(checks::revision_metric(&text))
        }
        .await;
        out.push(Loaded {
            replica: full,
            revision,
        });
    }
    out
}

/// Values the tests of the report's shape use.
#[cfg(test)]
fn sample_report(checks: Vec<Finding>) -> Report {
    Report {
        context: "test".into(),
        namespace: "sigil-system".into(),
        healthy: checks.iter().all(|f| f.status != Status::Fail),
        checks,
    }
}

#[cfg(test)]
mod registry_tests {
    use super::*;

    #[test]
    fn a_globs_registry_host_is_checked_only_when_it_names_one() {
        assert_eq!(
            glob_host("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/**").as_deref(),
            Some("123456789012.dkr.ecr.us-east-1.amazonaws.com")
        );
        assert_eq!(
            glob_host("localhost:5000/a/*").as_deref(),
            Some("localhost:5000")
        );
        assert_eq!(
            glob_host("library/nginx*").as_deref(),
            Some("index.docker.io")
        );
        assert_eq!(glob_host("*.azurecr.io/**"), None);
        assert_eq!(glob_host("**"), None);
    }
}

#[cfg(test)]
mod serving_tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    #[test]
    fn a_terminating_webhook_pod_is_not_asked() {
        let pod = |name: &str, deleted: bool| {
            let mut p = Pod::default();
            p.metadata.name = Some(name.into());
            if deleted {
                p.metadata.deletion_timestamp =
                    Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
            }
            p
        };
        let pods = [pod("a", false), pod("going", true), pod("b", false)];
        let names: Vec<_> = serving(&pods)
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;

    #[test]
    fn the_text_report_tags_each_check_and_counts_the_outcomes() {
        let report = sample_report(vec![
            Finding::new("policies", Status::Ok, "2 ClusterImagePolicies, all Ready"),
            Finding::new("endpoints", Status::Fail, "no ready endpoint")
                .details(vec!["not ready sigil-webhook-abc".into()])
                .fix("start it"),
        ]);
        let out = text(&report);
        assert!(
            out.contains("[ok  ] policies: 2 ClusterImagePolicies, all Ready"),
            "{out}"
        );
        assert!(out.contains("[FAIL] endpoints: no ready endpoint"), "{out}");
        assert!(
            out.contains("       not ready sigil-webhook-abc\n       fix: start it"),
            "{out}"
        );
        assert!(
            out.ends_with("2 checks: 1 ok, 1 failed, 0 warnings, 0 skipped\n"),
            "{out}"
        );
        assert!(!report.healthy);
    }

    #[test]
    fn the_json_report_names_each_check_and_its_status() {
        let report = sample_report(vec![Finding::new("tuf", Status::Warn, "embedded root")]);
        let v: Value = serde_json::to_value(&report).unwrap_or_default();
        assert_eq!(v["healthy"], true);
        assert_eq!(v["checks"][0]["check"], "tuf");
        assert_eq!(v["checks"][0]["status"], "warn");
        assert!(v["checks"][0].get("fix").is_none());
    }
}
