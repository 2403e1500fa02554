//! Cloud registries on a real node (`make e2e-node`, after the audit's
//! scenarios): sigil installed by its chart with each cloud's values
//! (`registryCredentials`: the projected ServiceAccount tokens mounted as EKS's,
//! AKS's webhooks mount them; the GKE metadata server's address) and a mirror
//! setting, against `sigil-fakecloud` on the host: STS, ECR, the Pod Identity
//! agent, the metadata server, Entra ID and ACR's exchange, which check the
//! API server's real tokens, and registry fronts before olareg that accept
//! only the tokens they issued. Workload pods carry no pull secret.
//!
//! The tests run in their names' order (`--test-threads 1`): one per cloud,
//! refresh under load, a provider down, the mirror, and last EKS Pod
//! Identity, which changes the installation (`helm upgrade`).
//!
//! Needs, besides what `tests/node.rs` needs, the fixture entries
//! `run-node.sh` adds (`FAKECLOUD_ADMIN`, `CLOUD_ECR`, `CLOUD_GCP`,
//! `CLOUD_ACR`, `CLOUD_API`, `CLOUD_SIGNED_DIGEST`, `CLOUD_UNSIGNED_DIGEST`)
//! and `SIGIL_E2E_CLOUD_VALUES`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;
use sigil_e2e::doctor::Doctor;
use sigil_e2e::load::{Load, LoadSpec, Tally};
use sigil_e2e::{Cluster, Fixtures, Reply, key_authority, node, wait_for};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Cloud {
    cluster: Cluster,
    fx: Fixtures,
    ns: String,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

/// The three cloud registries' fixture keys and names.
const CLOUDS: [(&str, &str); 3] = [
    ("CLOUD_ECR", "ecr"),
    ("CLOUD_GCP", "gcp"),
    ("CLOUD_ACR", "acr"),
];

impl Cloud {
    /// A fresh opted-in namespace and the cloud scenarios' policies: key1
    /// over each cloud front's images and over `docker.io/sigil-e2e/**`.
    async fn start(name: &str) -> Cloud {
        let serial = SERIAL.lock().await;
        let ns = format!("e2e-cloud-{name}");
        let (cluster, fx) = Cluster::fresh_scenario(&ns).await.unwrap();
        let c = Cloud {
            cluster,
            fx,
            ns,
            _serial: serial,
        };
        let key = c.fx.key_pem("KEY1").unwrap();
        let mut images: Vec<serde_json::Value> = CLOUDS
            .iter()
            .map(|(k, _)| json!({"glob": format!("{}/test/**", c.raw(k))}))
            .collect();
        images.push(json!({"glob": "docker.io/sigil-e2e/**"}));
        c.cluster
            .apply_policy(&json!({
                "apiVersion": "policy.sigil.dev/v1alpha1",
                "kind": "ClusterImagePolicy",
                "metadata": {"name": "cloud-registries"},
                "spec": {"images": images, "authorities": [key_authority("key1", &key)]},
            }))
            .await
            .unwrap();
        c
    }

    fn raw(&self, key: &str) -> String {
        self.fx.raw(key).unwrap()
    }

    /// The signed or unsigned test image as a cloud front serves it.
    fn image(&self, front: &str, signed: bool) -> String {
        let digest = self.raw(if signed {
            "CLOUD_SIGNED_DIGEST"
        } else {
            "CLOUD_UNSIGNED_DIGEST"
        });
        format!("{}/test/app@{digest}", self.raw(front))
    }

    /// Waits until a dry-run pod of `image` is admitted (or denied), then
    /// returns that answer.
    async fn eventually(&self, image: &str, allowed: bool, within: Duration) -> Reply {
        wait_for(
            &format!(
                "{image} to be {}",
                if allowed { "admitted" } else { "denied" }
            ),
            within,
            async || {
                let r = self.cluster.try_pod(&self.ns, &[image]).await?;
                Ok(if r.ok() == allowed {
                    Ok(r)
                } else {
                    Err(r.describe())
                })
            },
        )
        .await
        .unwrap()
    }

    /// The fakes' counters.
    async fn stats(&self) -> BTreeMap<String, u64> {
        let url = format!("http://{}/stats", self.raw("FAKECLOUD_ADMIN"));
        let body = reqwest::get(&url).await.unwrap().text().await.unwrap();
        serde_json::from_str(&body).unwrap()
    }

    async fn set_down(&self, service: &str, down: bool) {
        let url = format!(
            "http://{}/{}/{service}",
            self.raw("FAKECLOUD_ADMIN"),
            if down { "down" } else { "up" }
        );
        let status = reqwest::Client::new()
            .post(&url)
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_success(), "{url}: {status}");
    }

    /// The sum over sigil's webhook pods of the samples of `metric` whose
    /// labels contain every one of `labels`.
    async fn metric(&self, metric: &str, labels: &[&str]) -> u64 {
        let ns = &self.cluster.sigil_namespace;
        let pods = self
            .cluster
            .get(&format!(
                "/api/v1/namespaces/{ns}/pods?labelSelector=app.kubernetes.io%2Fcomponent%3Dwebhook"
            ))
            .await
            .unwrap();
        let mut sum = 0.0;
        for pod in pods.body["items"].as_array().into_iter().flatten() {
            if pod["metadata"]["deletionTimestamp"].is_string()
                || pod["status"]["phase"] != "Running"
            {
                continue;
            }
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            let Ok(text) = self
                .cluster
                .get_text(&format!(
                    "/api/v1/namespaces/{ns}/pods/{name}:9090/proxy/metrics"
                ))
                .await
            else {
                continue;
            };
            for line in text.lines().filter(|l| l.starts_with(metric)) {
                if labels.iter().all(|l| line.contains(l))
                    && let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok())
                {
                    sum += v;
                }
            }
        }
        sum as u64
    }

    /// A signed image admitted and an unsigned one denied, from `front`,
    /// printed as the admission lines a user sees.
    async fn signed_admitted_unsigned_denied(&self, front: &str, label: &str) {
        let signed = self.image(front, true);
        let unsigned = self.image(front, false);
        let start = Instant::now();
        let admitted = self
            .eventually(&signed, true, Duration::from_secs(60))
            .await;
        println!(
            "{label}: signed {signed}: admitted (HTTP {}) after {:.1?}",
            admitted.status,
            start.elapsed()
        );
        let denied = self
            .eventually(&unsigned, false, Duration::from_secs(30))
            .await;
        println!("{label}: unsigned {unsigned}: denied: {}", denied.message());
        assert!(
            denied.message().contains("no signature found"),
            "{}",
            denied.describe()
        );
    }

    /// Prints the fakes' counters with `prefixes`.
    async fn print_stats(&self, label: &str, prefixes: &[&str]) {
        let stats = self.stats().await;
        let shown: Vec<String> = stats
            .iter()
            .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!("{label}: fakes counted {}", shown.join(", "));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil and sigil-fakecloud on a node: e2e/run-node.sh"]
async fn cloud_1_ecr_through_irsa_admits_signed_images_without_a_pull_secret() {
    let c = Cloud::start("ecr").await;
    c.signed_admitted_unsigned_denied("CLOUD_ECR", "ecr (IRSA)")
        .await;
    let stats = c.stats().await;
    assert!(
        stats.get("sts.issued").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    assert!(
        stats.get("ecr.issued").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    assert!(
        stats.get("front.ecr.proxied").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    c.print_stats("ecr (IRSA)", &["sts.", "ecr.", "front.ecr."])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil and sigil-fakecloud on a node: e2e/run-node.sh"]
async fn cloud_2_artifact_registry_through_the_gke_metadata_server() {
    let c = Cloud::start("gcp").await;
    c.signed_admitted_unsigned_denied("CLOUD_GCP", "gcp (GKE metadata server)")
        .await;
    let stats = c.stats().await;
    assert!(
        stats.get("metadata.issued").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    assert!(
        stats.get("front.gcp.tokens").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    c.print_stats("gcp (GKE metadata server)", &["metadata.", "front.gcp."])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil and sigil-fakecloud on a node: e2e/run-node.sh"]
async fn cloud_3_acr_through_azure_workload_identity() {
    let c = Cloud::start("acr").await;
    c.signed_admitted_unsigned_denied("CLOUD_ACR", "acr (Azure workload identity)")
        .await;
    let stats = c.stats().await;
    assert!(
        stats.get("entra.issued").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    assert!(
        stats.get("acr.exchange.issued").copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    c.print_stats(
        "acr (Azure workload identity)",
        &["entra.", "acr.", "front.acr."],
    )
    .await;
    // sigil doctor names the provider of each registry the policies name.
    let doctor = Doctor::run(&c.cluster.sigil_namespace, None).unwrap();
    let text = doctor.text("registry-credentials");
    assert_eq!(
        doctor.status("registry-credentials"),
        "ok",
        "{}",
        doctor.describe()
    );
    for (key, provider) in CLOUDS {
        assert!(
            text.contains(&format!("{}: {provider} via", c.raw(key))),
            "{text}"
        );
    }
    assert!(text.contains("a token can be had"), "{text}");
    println!("sigil doctor registry-credentials:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil and sigil-fakecloud on a node: e2e/run-node.sh"]
async fn cloud_4_tokens_expire_and_are_refreshed_under_steady_load_with_no_failed_admission() {
    // The fakes' tokens live 60 s (ECR's, Google's, Entra's, ACR's refresh
    // tokens), the registries' own 30 s; the verdict cache keeps answers 2 s,
    // so the load reaches the registries all along. 80 s: every token is
    // refreshed at least once.
    let c = Cloud::start("load").await;
    for (front, _) in CLOUDS {
        c.eventually(&c.image(front, true), true, Duration::from_secs(60))
            .await;
    }
    let before: Vec<u64> = {
        let mut v = Vec::new();
        for (_, p) in CLOUDS {
            v.push(
                c.metric(
                    "sigil_registry_credential_exchanges_total",
                    &[&format!("provider=\"{p}\""), "outcome=\"refreshed\""],
                )
                .await,
            );
        }
        v
    };
    let loads: Vec<Load> = CLOUDS
        .iter()
        .map(|(front, _)| {
            Load::start(
                &c.cluster,
                &LoadSpec {
                    namespace: c.ns.clone(),
                    signed: c.image(front, true),
                    unsigned: c.image(front, false),
                    real_signed: c.image(front, true),
                    real_unsigned: c.image(front, false),
                    workers: 2,
                    real_every: 0,
                    limit: Duration::from_secs(150),
                },
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(80)).await;
    let mut total = Tally::default();
    for ((_, provider), load) in CLOUDS.iter().zip(loads) {
        let tally = load.finish().await.unwrap();
        println!("{}", tally.line(&format!("{provider} under load")));
        total.add(tally);
    }
    let mut refreshed = Vec::new();
    for (i, (_, p)) in CLOUDS.iter().enumerate() {
        let now = c
            .metric(
                "sigil_registry_credential_exchanges_total",
                &[&format!("provider=\"{p}\""), "outcome=\"refreshed\""],
            )
            .await;
        let failed = c
            .metric(
                "sigil_registry_credential_exchanges_total",
                &[&format!("provider=\"{p}\""), "outcome=\"failed\""],
            )
            .await;
        refreshed.push(format!(
            "{p}: {} refreshed, {failed} failed",
            now - before[i]
        ));
        assert!(
            now > before[i],
            "{p}: no token was refreshed during the load"
        );
        assert_eq!(failed, 0, "{p}: a token exchange failed");
    }
    println!(
        "credential refreshes during the load: {}",
        refreshed.join("; ")
    );
    c.print_stats(
        "under load",
        &["sts.", "ecr.", "metadata.", "entra.", "acr.", "front."],
    )
    .await;
    assert!(total.admissions > 0);
    assert_eq!(total.failed, 0, "{:?}", total.examples);
    assert_eq!(total.wrong, 0, "{:?}", total.examples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil and sigil-fakecloud on a node: e2e/run-node.sh"]
async fn cloud_5_a_provider_that_is_down_gives_a_denial_naming_it() {
    let c = Cloud::start("down").await;
    let signed = c.image("CLOUD_ACR", true);
    c.eventually(&signed, true, Duration::from_secs(60)).await;
    c.set_down("entra", true).await;
    c.set_down("acr", true).await;
    // Held tokens keep admitting until they expire (60 s at most); then the
    // next admission needs Entra ID and is denied, naming the provider.
    let start = Instant::now();
    let denied = wait_for(
        "a denial naming acr",
        Duration::from_secs(120),
        async || {
            let r = c.cluster.try_pod(&c.ns, &[&signed]).await?;
            Ok(if !r.ok() && r.message().contains("acr credentials") {
                Ok(r)
            } else {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Err(r.describe())
            })
        },
    )
    .await;
    c.set_down("entra", false).await;
    c.set_down("acr", false).await;
    let denied = denied.unwrap();
    println!(
        "acr down: signed {signed}: denied after {:.1?}: {}",
        start.elapsed(),
        denied.message()
    );
    assert!(denied.message().contains("503"), "{}", denied.describe());
    let back = c.eventually(&signed, true, Duration::from_secs(60)).await;
    println!(
        "acr back up: signed {signed}: admitted (HTTP {})",
        back.status
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil and sigil-fakecloud on a node: e2e/run-node.sh"]
async fn cloud_6_a_mirror_serves_docker_io_images_and_the_upstream_is_never_contacted() {
    let c = Cloud::start("mirror").await;
    let signed = format!(
        "docker.io/sigil-e2e/mirrored/app@{}",
        c.raw("CLOUD_SIGNED_DIGEST")
    );
    let unsigned = format!(
        "docker.io/sigil-e2e/mirrored/app@{}",
        c.raw("CLOUD_UNSIGNED_DIGEST")
    );
    let proxy_before = c.stats().await.get("proxy.requests").copied().unwrap_or(0);
    let admitted = c.eventually(&signed, true, Duration::from_secs(60)).await;
    println!(
        "mirror: signed {signed}: admitted (HTTP {})",
        admitted.status
    );
    let denied = c
        .eventually(&unsigned, false, Duration::from_secs(30))
        .await;
    println!("mirror: unsigned {unsigned}: denied: {}", denied.message());
    assert!(
        denied.message().contains("(mirror)"),
        "{}",
        denied.describe()
    );
    assert!(
        denied.message().contains("(upstream): not contacted"),
        "{}",
        denied.describe()
    );
    let proxy_after = c.stats().await.get("proxy.requests").copied().unwrap_or(0);
    assert_eq!(
        proxy_after, proxy_before,
        "the upstream was contacted through the proxy"
    );
    let mirror = c
        .metric(
            "sigil_registry_requests_total",
            &[&format!(
                "host=\"{}\"",
                c.fx.get("OLAREG").unwrap().split('/').next().unwrap()
            )],
        )
        .await;
    let upstream = c
        .metric(
            "sigil_registry_requests_total",
            &["host=\"index.docker.io\""],
        )
        .await;
    println!(
        "mirror: registry requests counted by sigil: mirror {mirror}, docker.io {upstream}; at the proxy standing for the internet: {proxy_after}"
    );
    assert_eq!(upstream, 0);
    // The control: where the rule lists the upstream, a signature the
    // cache lacks is looked for there, and the proxy counts it.
    let fallback = format!(
        "docker.io/sigil-e2e/fallback/app@{}",
        c.raw("CLOUD_UNSIGNED_DIGEST")
    );
    let denied = c
        .eventually(&fallback, false, Duration::from_secs(30))
        .await;
    let proxied = c.stats().await.get("proxy.requests").copied().unwrap_or(0);
    println!(
        "mirror with the upstream allowed: {fallback}: denied: {}; proxy requests now {proxied}",
        denied.message()
    );
    assert!(proxied > proxy_after, "the control never reached the proxy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs sigil and sigil-fakecloud on a node: e2e/run-node.sh"]
async fn cloud_7_ecr_through_eks_pod_identity_after_a_helm_upgrade() {
    let c = Cloud::start("pod-identity").await;
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../../charts/sigil");
    let endpoint = format!(
        "registryCredentials.aws.podIdentityEndpoint=https://{}/v1/credentials",
        c.raw("CLOUD_API")
    );
    let start = Instant::now();
    node::run(
        "helm",
        &[
            "upgrade",
            "sigil",
            chart,
            "--namespace",
            &c.cluster.sigil_namespace,
            "--reuse-values",
            "--set",
            "registryCredentials.aws.roleArn=",
            "--set",
            "registryCredentials.aws.podIdentity=true",
            "--set",
            &endpoint,
            "--wait",
            "--timeout",
            "5m",
        ],
    )
    .await
    .unwrap();
    println!(
        "helm upgrade to EKS Pod Identity took {:.1?}",
        start.elapsed()
    );
    let before = c
        .stats()
        .await
        .get("pod-identity.issued")
        .copied()
        .unwrap_or(0);
    // Until the IRSA pods are gone, a review may still reach one; wait for
    // an admission that a Pod Identity credential made.
    wait_for(
        "a Pod Identity credential",
        Duration::from_secs(180),
        async || {
            let _ = c
                .cluster
                .try_pod(&c.ns, &[&c.image("CLOUD_ECR", true)])
                .await?;
            let now = c
                .stats()
                .await
                .get("pod-identity.issued")
                .copied()
                .unwrap_or(0);
            Ok(if now > before {
                Ok(())
            } else {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Err(format!("pod-identity.issued still {now}"))
            })
        },
    )
    .await
    .unwrap();
    c.signed_admitted_unsigned_denied("CLOUD_ECR", "ecr (EKS Pod Identity)")
        .await;
    c.print_stats(
        "ecr (EKS Pod Identity)",
        &["pod-identity.", "ecr.", "front.ecr."],
    )
    .await;
}
