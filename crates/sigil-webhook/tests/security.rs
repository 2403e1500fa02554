//! The threats of docs/threat-model.md that the admission server answers:
//! registry requests an attacker chooses (SSRF) through whole reviews, the
//! policy bypasses (unpinned images at `/validate`, image volumes, mirror
//! pods), log and message injection through image names, and the webhook's
//! secure defaults. Registries are mocks on 127.0.0.1 that count requests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Response, Uri};
use clap::Parser as _;
use common::{
    FakeJudge, app_with, config, fixture, message, patch, post, response, strict_config, warnings,
};
use serde_json::{Value, json};
use sigil_policy::glob::HostPattern;
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::egress::{AddressPolicy, Lookup, parse_net};
use sigil_registry::{ClientConfig, Limits};
use sigil_verifier::trust::TrustedRoot;
use sigil_webhook::Args;
use sigil_webhook::admit::{Admission, AdmissionConfig, PinMode};
use sigil_webhook::metrics::Metrics;
use sigil_webhook::policy_judge::PolicyJudge;
use sigil_webhook::secrets::NoPullSecrets;
use sigil_webhook::server::{AppState, router};
use tokio::net::TcpListener;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
const IMAGE: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

fn reply(status: u16, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("docker-content-digest", IMAGE)
        .body(Body::from(body))
        .unwrap()
}

/// A registry holding the sample image (every tag resolves to it) and its
/// real cosign signature; it counts the requests it gets.
#[derive(Default)]
struct Registry {
    requests: AtomicUsize,
}

impl Registry {
    fn answer(&self, method: &Method, uri: &Uri) -> Response<Body> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let path = uri.path();
        if path.ends_with(&format!("/referrers/{IMAGE}")) {
            return reply(200, sample("olareg/referrers.json"));
        }
        if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
            return reply(200, sample("olareg/new-sig.manifest.json"));
        }
        if path.ends_with(&format!("/blobs/{SIG_BUNDLE}")) {
            return reply(200, sample("olareg/new-sig.bundle.json"));
        }
        if path.contains("/manifests/") && !path.contains("sha256") {
            let body = if method == Method::HEAD {
                Vec::new()
            } else {
                b"{}".to_vec()
            };
            return reply(200, body);
        }
        reply(404, b"{}".to_vec())
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Serves a counting registry on 127.0.0.1; returns it and `host:port`.
async fn registry() -> (Arc<Registry>, String) {
    let r = Arc::new(Registry::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = r.clone();
    let app = Router::new().fallback(move |method: Method, uri: Uri| {
        let r = served.clone();
        async move { r.answer(&method, &uri) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (r, addr.to_string())
}

fn key_policy(name: &str, glob: &str, source: Option<&str>) -> Value {
    let key = String::from_utf8(sample("cosign.pub")).unwrap();
    let mut authority = json!({"key": {"data": key}, "ctlog": {}});
    if let Some(oci) = source {
        authority["source"] = json!([{"oci": oci}]);
    }
    json!({
        "name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1",
        "spec": {"images": [{"glob": glob}], "authorities": [authority]},
    })
}

fn snapshot(policies: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "policy.sigil.dev/snapshot/v1", "revision": 1,
        "generatedAt": "2026-01-01T00:00:00Z", "policies": policies, "trustRoots": [],
    }))
    .unwrap()
}

fn client_config(addresses: AddressPolicy) -> ClientConfig {
    ClientConfig {
        allow_insecure_all: true,
        addresses,
        limits: Limits {
            request_timeout: Duration::from_secs(3),
            total_deadline: Duration::from_secs(5),
            ..Limits::default()
        },
        ..ClientConfig::default()
    }
}

fn judge(config: ClientConfig, allowed: &[&str], policies: Value) -> PolicyJudge {
    let judge = PolicyJudge::new(
        config,
        TrustedRoot::public_good().unwrap(),
        "public-good",
        NoMatchPolicy::Deny,
    )
    .unwrap()
    .with_allowed_registries(
        allowed
            .iter()
            .map(|h| HostPattern::allow(h).unwrap())
            .collect(),
    );
    judge.apply_bytes(&snapshot(policies)).unwrap();
    judge
}

fn app(judge: PolicyJudge, config: AdmissionConfig) -> Router {
    let admission = Admission::new(
        Arc::new(judge),
        NoPullSecrets,
        config,
        Arc::new(Metrics::new()),
    );
    router(AppState::new(admission))
}

fn pod_review(images: &[String]) -> Vec<u8> {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "pod-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web", "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "mallory"},
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"containers": containers},
            },
        },
    }))
    .unwrap()
}

/// Loopback allowed: the mock registries live there.
fn loopback_allowed() -> AddressPolicy {
    AddressPolicy::without_loopback().allow(parse_net("127.0.0.0/8").unwrap())
}

// ---------------------------------------------------------------------------
// Registry requests an attacker chooses.

#[tokio::test]
async fn an_image_no_policy_selects_is_answered_without_any_registry_request() {
    let (selected, selected_host) = registry().await;
    let (elsewhere, elsewhere_host) = registry().await;
    let policies = json!([key_policy(
        "team",
        &format!("{selected_host}/team/**"),
        None
    )]);
    for pin in [PinMode::Matched, PinMode::All] {
        let router = app(
            judge(client_config(loopback_allowed()), &[], policies.clone()),
            AdmissionConfig {
                pin,
                ..strict_config()
            },
        );
        let images = [
            // A registry no policy can select, by tag and by digest.
            format!("{elsewhere_host}/team/app:1"),
            format!("{elsewhere_host}/team/app@{IMAGE}"),
        ];
        for endpoint in ["/mutate", "/validate"] {
            let (_, answer) = post(&router, endpoint, pod_review(&images)).await;
            let resp = response(&answer);
            if endpoint == "/validate" {
                assert_eq!(resp["allowed"], false, "{resp}");
                assert!(
                    message(resp).contains("no ClusterImagePolicy matches"),
                    "{resp}"
                );
            } else {
                assert_eq!(resp["allowed"], true, "{resp}");
                assert!(resp["patch"].is_null(), "nothing pinned: {resp}");
            }
        }
        assert_eq!(
            elsewhere.requests(),
            0,
            "{pin:?}: the unselected registry heard nothing"
        );
    }
    // An unselected image on a host some policy selects: no request with
    // pinning of matched images either.
    let router = app(
        judge(client_config(loopback_allowed()), &[], policies),
        strict_config(),
    );
    let other_repo = format!("{selected_host}/other/app:1");
    let (_, answer) = post(&router, "/mutate", pod_review(&[other_repo])).await;
    assert!(response(&answer)["patch"].is_null());
    assert_eq!(selected.requests(), 0);
}

#[tokio::test]
async fn pin_all_pins_only_images_on_registries_a_policy_can_select_or_an_allowed_one() {
    let (selected, selected_host) = registry().await;
    let (elsewhere, elsewhere_host) = registry().await;
    let (allowed, allowed_host) = registry().await;
    let policies = json!([key_policy(
        "team",
        &format!("{selected_host}/team/**"),
        None
    )]);
    let router = app(
        judge(
            client_config(loopback_allowed()),
            &[&allowed_host],
            policies,
        ),
        AdmissionConfig {
            pin: PinMode::All,
            ..strict_config()
        },
    );
    let images = [
        format!("{selected_host}/other/app:1"),
        format!("{elsewhere_host}/team/app:1"),
        format!("{allowed_host}/any/app:1"),
    ];
    let (_, answer) = post(&router, "/mutate", pod_review(&images)).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], true, "{resp}");
    let paths: Vec<String> = patch(resp)
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        paths,
        ["/spec/containers/0/image", "/spec/containers/2/image"],
        "the unselectable registry's image stays a tag"
    );
    assert!(selected.requests() > 0 && allowed.requests() > 0);
    assert_eq!(elsewhere.requests(), 0);
}

#[tokio::test]
async fn signature_sources_named_by_policies_are_the_only_other_registries_contacted() {
    let (images, images_host) = registry().await;
    let (signatures, signatures_host) = registry().await;
    let policies = json!([key_policy(
        "sigs-elsewhere",
        &format!("{images_host}/team/**"),
        Some(&format!("{signatures_host}/signatures")),
    )]);
    let router = app(
        judge(client_config(loopback_allowed()), &[], policies),
        strict_config(),
    );
    let (_, answer) = post(
        &router,
        "/validate",
        pod_review(&[format!("{images_host}/team/app@{IMAGE}")]),
    )
    .await;
    // The sample signature is stored for the image's own repository; what
    // matters here is where sigil looked, not the verdict.
    let _ = response(&answer);
    assert!(
        signatures.requests() > 0,
        "the policy's source.oci was asked"
    );
    assert_eq!(
        images.requests(),
        0,
        "signatures are looked for in the source only"
    );
}

#[derive(Debug)]
struct TestLookup(Vec<(String, IpAddr)>);

impl Lookup for TestLookup {
    fn lookup(&self, host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
        let found: Vec<IpAddr> = self
            .0
            .iter()
            .filter(|(n, _)| n == host)
            .map(|(_, a)| *a)
            .collect();
        Box::pin(async move {
            if found.is_empty() {
                Err(io::Error::new(io::ErrorKind::NotFound, "unknown test name"))
            } else {
                Ok(found)
            }
        })
    }
}

#[tokio::test]
async fn a_selected_image_at_a_forbidden_address_is_denied_with_the_cause_and_never_contacted() {
    // A canary on 127.0.0.2 stands for the metadata service: denied by the
    // address policy, it counts every connection.
    let canary = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let port = canary.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = connections.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = canary.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    let mut config = client_config(
        AddressPolicy::without_loopback()
            .allow(parse_net("127.0.0.1").unwrap())
            .deny(parse_net("127.0.0.2").unwrap()),
    );
    config.lookup = Some(Arc::new(TestLookup(vec![
        ("metadata.test".into(), "169.254.169.254".parse().unwrap()),
        ("canary.test".into(), "127.0.0.2".parse().unwrap()),
    ])));
    // A policy over every image: the address policy alone must refuse.
    let router = app(
        judge(config, &[], json!([key_policy("all", "**", None)])),
        strict_config(),
    );
    for image in [
        format!("canary.test:{port}/x/y@{IMAGE}"),
        format!("127.0.0.2:{port}/x/y@{IMAGE}"),
        format!("metadata.test/latest/meta-data@{IMAGE}"),
        format!("169.254.169.254/latest/meta-data@{IMAGE}"),
    ] {
        let (_, answer) = post(
            &router,
            "/validate",
            pod_review(std::slice::from_ref(&image)),
        )
        .await;
        let resp = response(&answer);
        assert_eq!(resp["allowed"], false, "{image}: {resp}");
        let msg = message(resp);
        assert!(msg.contains("refusing to connect"), "{image}: {msg}");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0);
}

#[test]
fn the_webhook_refuses_loopback_and_metadata_registries_unless_allowed() {
    let base = ["sigil-webhook", "--tls-cert", "c", "--tls-key", "k"];
    let args = Args::parse_from(base);
    let policy = args.judge.address_policy().unwrap();
    for refused in [
        "127.0.0.1",
        "::1",
        "169.254.169.254",
        "fd00:ec2::254",
        "0.0.0.0",
        "fe80::1",
    ] {
        assert!(policy.check(refused.parse().unwrap()).is_err(), "{refused}");
    }
    assert!(policy.check("10.0.0.5".parse().unwrap()).is_ok());
    let args = Args::parse_from(
        base.iter()
            .copied()
            .chain(["--allow-registry-address", "127.0.0.0/8"])
            .chain(["--deny-registry-address", "10.96.0.0/12"]),
    );
    let policy = args.judge.address_policy().unwrap();
    assert!(policy.check("127.0.0.1".parse().unwrap()).is_ok());
    assert!(policy.check("10.96.0.1".parse().unwrap()).is_err());
    assert!(policy.check("169.254.169.254".parse().unwrap()).is_err());
    let bad = Args::parse_from(
        base.iter()
            .copied()
            .chain(["--allow-registry-address", "metadata.internal"]),
    );
    let err = bad.judge.address_policy().unwrap_err().to_string();
    assert!(
        err.contains("--allow-registry-address") && err.contains("CIDR"),
        "{err}"
    );
    let bad = Args::parse_from(base.iter().copied().chain(["--allow-registry", "a/b"]));
    assert!(bad.judge.allowed_registries().is_err());
}

// ---------------------------------------------------------------------------
// Policy bypass.

#[tokio::test]
async fn an_unpinned_selected_image_at_validate_is_denied_when_pinning_is_on() {
    for pin in [PinMode::Matched, PinMode::All] {
        let judge = FakeJudge::new();
        let (router, _) = app_with(
            judge.clone(),
            AdmissionConfig {
                pin,
                ..strict_config()
            },
        );
        let (_, answer) = post(&router, "/validate", fixture("pod_good.json")).await;
        let resp = response(&answer);
        assert_eq!(resp["allowed"], false, "{resp}");
        let msg = message(resp);
        assert!(
            msg.contains("reached validation as a tag")
                && msg.contains("another mutating webhook")
                && msg.contains("--allow-unpinned"),
            "{msg}"
        );
        assert_eq!(
            judge.resolve_calls.load(Ordering::SeqCst),
            0,
            "the tags are not resolved: no registry request"
        );
        assert_eq!(judge.calls(), 1, "only the pinned image is verified");
        assert!(msg.contains("2 of 3 image(s) failed"), "{msg}");
    }
}

#[tokio::test]
async fn a_workload_template_left_unpinned_is_verified_at_what_its_tags_point_to() {
    let judge = FakeJudge::new();
    let (router, _) = app_with(judge.clone(), strict_config());
    let (_, answer) = post(&router, "/validate", fixture("deployment.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{resp}");
    let msg = message(resp);
    assert!(
        msg.contains("1 of 2 image(s) failed verification")
            && msg.contains("- image registry.test/team/unsigned:2.0 (sha256:")
            && !msg.contains("reached validation as a tag"),
        "the unsigned image is denied for its signature, not for its tag: {msg}"
    );
    assert_eq!(
        judge.resolve_calls.load(Ordering::SeqCst),
        2,
        "both tags resolved"
    );
    assert_eq!(judge.calls(), 2, "both digests verified");

    // The signed image alone is admitted, without a warning per apply.
    let mut review: Value = serde_json::from_slice(&fixture("deployment.json")).unwrap();
    review["request"]["object"]["spec"]["template"]["spec"]["containers"][1]["image"] =
        json!("registry.test/team/app:1.0");
    let (router, _) = app_with(FakeJudge::new(), strict_config());
    let (_, answer) = post(&router, "/validate", serde_json::to_vec(&review).unwrap()).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(warnings(resp).is_empty(), "{resp}");
}

#[tokio::test]
async fn with_pin_templates_a_template_tag_at_validate_is_denied_like_a_pods() {
    let judge = FakeJudge::new();
    let (router, _) = app_with(
        judge.clone(),
        AdmissionConfig {
            pin_templates: true,
            ..strict_config()
        },
    );
    let (_, answer) = post(&router, "/validate", fixture("deployment.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{resp}");
    assert!(
        message(resp).contains("reached validation as a tag"),
        "{resp}"
    );
    assert_eq!(judge.resolve_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn allow_unpinned_admits_it_after_verifying_what_the_tag_points_to() {
    let judge = FakeJudge::new();
    let (router, _) = app_with(judge.clone(), config());
    let (_, answer) = post(&router, "/validate", fixture("pod_good.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(
        warnings(resp)
            .iter()
            .any(|w| w.contains("is not pinned to a digest")),
        "{resp}"
    );
    assert_eq!(judge.resolve_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn with_pinning_off_unpinned_images_are_verified_at_their_current_digest() {
    let judge = FakeJudge::new();
    let (router, _) = app_with(
        judge.clone(),
        AdmissionConfig {
            pin: PinMode::Off,
            ..strict_config()
        },
    );
    let (_, answer) = post(&router, "/validate", fixture("pod_good.json")).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], true, "{resp}");
    assert_eq!(
        warnings(resp).len(),
        2,
        "one note per unpinned image: {resp}"
    );
}

fn with_image_volume(image: &str) -> Vec<u8> {
    let mut review: Value = serde_json::from_slice(&fixture("pod_good.json")).unwrap();
    review["request"]["object"]["spec"]["volumes"] = json!([
        {"name": "config", "configMap": {"name": "c"}},
        {"name": "models", "image": {"reference": image, "pullPolicy": "IfNotPresent"}},
    ]);
    serde_json::to_vec(&review).unwrap()
}

#[tokio::test]
async fn image_volumes_are_verified_and_pinned_like_container_images() {
    let judge = FakeJudge::new();
    let (router, _) = app_with(judge.clone(), config());
    let (_, answer) = post(
        &router,
        "/validate",
        with_image_volume("registry.test/models/unsigned:3"),
    )
    .await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{resp}");
    let msg = message(resp);
    assert!(
        msg.contains("- image registry.test/models/unsigned:3 (")
            && msg.contains("image volume models"),
        "{msg}"
    );
    let (_, answer) = post(
        &router,
        "/mutate",
        with_image_volume("registry.test/models/weights:3"),
    )
    .await;
    let ops = patch(response(&answer));
    assert!(
        ops.as_array()
            .unwrap()
            .iter()
            .any(|op| op["path"] == "/spec/volumes/1/image/reference"
                && op["value"]
                    .as_str()
                    .unwrap()
                    .starts_with("registry.test/models/weights:3@sha256:")),
        "{ops}"
    );
}

#[tokio::test]
async fn a_mirror_pod_of_a_static_pod_is_judged_like_any_pod() {
    // The kubelet runs static pods from its manifest directory whatever
    // admission says; their API mirror is still judged, so a denial shows
    // in events and logs (threat model: static pods are out of reach).
    let mut review: Value = serde_json::from_slice(&fixture("pod.json")).unwrap();
    review["request"]["object"]["metadata"]["annotations"] =
        json!({"kubernetes.io/config.mirror": "0123abcd", "kubernetes.io/config.source": "file"});
    review["request"]["userInfo"] =
        json!({"username": "system:node:node-1", "groups": ["system:nodes"]});
    let judge = FakeJudge::new();
    let (router, _) = app_with(judge.clone(), config());
    let (_, answer) = post(&router, "/validate", serde_json::to_vec(&review).unwrap()).await;
    let resp = response(&answer);
    assert_eq!(resp["allowed"], false, "{resp}");
    assert!(message(resp).contains("registry.test/team/unsigned:2.0"));
}
