//! A namespace's ImagePolicy cannot read, in a denial, content its own
//! pods could not pull. A private registry (basic auth) holds an image
//! whose config carries a secret, and a cosign attestation of another
//! image; a ClusterImagePolicy names `signaturePullSecrets` that can read
//! it. The tenant's policy prints the config (`fetchConfigFile`) and the
//! attestation's statement in its Rego `error`: with its pods' own
//! credentials (none) it reads neither; with a pull secret of its own it
//! reads both, as its pods would pull them. The cluster's policy still
//! fetches its own signatures with its own secret.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Response, Uri};
use base64::Engine as _;
use common::{FakeApi, config, docker_config, message, post, response};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use sigil_policy::model::NoMatchPolicy;
use sigil_registry::{ClientConfig, Limits};
use sigil_verifier::trust::TrustedRoot;
use sigil_webhook::admit::Admission;
use sigil_webhook::metrics::Metrics;
use sigil_webhook::policy_judge::PolicyJudge;
use sigil_webhook::secrets::KubePullSecrets;
use sigil_webhook::server::{AppState, router};
use tokio::net::TcpListener;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/samples");
/// The sample image, signed and attested by `cosign.pub`.
const ATTESTED: &str = "sha256:07b2ad76d4dd7b15cb582654a11e03d42811d830732b4a3a2e469e6b0832a85d";
const SIG_MANIFEST: &str =
    "sha256:ef94da3194562958d1b56a9bcd2244338b7115a5dce69b7939c5fcb468977680";
const SIG_BUNDLE: &str = "sha256:5b34bcde3569e121f93680639391c5aa2f1e2e5594d0ba663ae469def717e4b2";
const ATT_MANIFEST: &str =
    "sha256:954e9edfb7705838febf15ea1022512d75acd5992963a69cde5aa7059b2613a0";
const ATT_BUNDLE: &str = "sha256:34f8a0f00327d2b6a2c6e97f92c24f348d001cf15962b5f75aa36b1a925a485e";
/// What the private image's config holds and no tenant may see unless its
/// pods can pull the image.
const SECRET_ENV: &str = "DB_PASSWORD=hunter2-private";
/// The attestation's predicate (`scripts/samples/predicate.json`).
const PREDICATE_MARK: &str = "sigil-test";
const USER: &str = "robot";
const PASSWORD: &str = "s3cret";

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(format!("{SAMPLES}/{path}")).unwrap()
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A private image: its config with [`SECRET_ENV`], its manifest.
fn private_image() -> (String, Vec<u8>, String, Vec<u8>) {
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": [SECRET_ENV]},
        "rootfs": {"type": "layers", "diff_ids": []},
    }))
    .unwrap();
    let config_digest = digest(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "size": config.len(), "digest": config_digest},
        "layers": [],
    }))
    .unwrap();
    (digest(&manifest), manifest, config_digest, config)
}

/// Serves the private registry behind basic auth; returns `host:port`.
async fn private_registry() -> String {
    let (image, manifest, config_digest, config) = private_image();
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
        let (image, manifest, config_digest, config, want) = (
            image.clone(),
            manifest.clone(),
            config_digest.clone(),
            config.clone(),
            want.clone(),
        );
        async move {
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
            if auth != Some(want.as_str()) {
                return Response::builder()
                    .status(401)
                    .header("www-authenticate", r#"Basic realm="private""#)
                    .body(Body::empty())
                    .unwrap();
            }
            let path = uri.path();
            let (status, body, media) = if path.ends_with(&format!("/manifests/{image}")) {
                (200, manifest, "application/vnd.oci.image.manifest.v1+json")
            } else if path.ends_with(&format!("/blobs/{config_digest}")) {
                (200, config, "application/octet-stream")
            } else if path.ends_with(&format!("/referrers/{ATTESTED}")) {
                (
                    200,
                    sample("olareg/referrers.json"),
                    "application/vnd.oci.image.index.v1+json",
                )
            } else if path.ends_with(&format!("/manifests/{SIG_MANIFEST}")) {
                (
                    200,
                    sample("olareg/new-sig.manifest.json"),
                    "application/vnd.oci.image.manifest.v1+json",
                )
            } else if path.ends_with(&format!("/manifests/{ATT_MANIFEST}")) {
                (
                    200,
                    sample("olareg/new-att.manifest.json"),
                    "application/vnd.oci.image.manifest.v1+json",
                )
            } else if path.ends_with(&format!("/blobs/{SIG_BUNDLE}")) {
                (
                    200,
                    sample("olareg/new-sig.bundle.json"),
                    "application/json",
                )
            } else if path.ends_with(&format!("/blobs/{ATT_BUNDLE}")) {
                (
                    200,
                    sample("olareg/new-att.bundle.json"),
                    "application/json",
                )
            } else {
                (404, b"{}".to_vec(), "application/json")
            };
            Response::builder()
                .status(status)
                .header("content-type", media)
                .body(Body::from(body))
                .unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A Rego module that fails with `what` printed in its error.
fn leaking_rego(what: &str) -> String {
    format!(
        "package sigstore\nisCompliant := {{\"result\": false, \"error\": sprintf(\"leak: %v\", [{what}])}}\n"
    )
}

fn snapshot(host: &str) -> Vec<u8> {
    let key = String::from_utf8(sample("cosign.pub")).unwrap();
    let glob = format!("{host}/**");
    serde_json::to_vec(&json!({
        "apiVersion": "policy.sigil.dev/snapshot/v3", "revision": 1,
        "generatedAt": "2026-01-01T00:00:00Z", "trustRoots": [],
        "policies": [
            // The cluster's policy reads its signatures with sigil's secret.
            {"name": "cluster-signed", "uid": "u1", "generation": 1, "resourceVersion": "1",
             "spec": {"images": [{"glob": format!("{host}/team/attested*")}],
                      "authorities": [{"name": "release", "key": {"data": key}, "ctlog": {},
                                       "source": [{"signaturePullSecrets": [{"name": "sigs"}]}]}]}},
            // Every image of the registry is otherwise let in by the cluster.
            {"name": "cluster-open", "uid": "u2", "generation": 1, "resourceVersion": "1",
             "spec": {"images": [{"glob": glob}],
                      "authorities": [{"name": "open", "static": {"action": "pass"}}]}},
            // The tenant's policies print what they read.
            {"name": "config", "namespace": "team", "uid": "u3", "generation": 1,
             "resourceVersion": "1",
             "spec": {"images": [{"glob": format!("{host}/team/private*")}],
                      "authorities": [{"name": "open", "static": {"action": "pass"}}],
                      "policy": {"type": "rego", "fetchConfigFile": true,
                                 "data": leaking_rego("input.config")}}},
            {"name": "statement", "namespace": "team", "uid": "u4", "generation": 1,
             "resourceVersion": "1",
             "spec": {"images": [{"glob": format!("{host}/team/attested*")}],
                      "authorities": [{"name": "team-key", "key": {"data": key}, "ctlog": {},
                                       "attestations": [{"name": "provenance",
                                           "predicateType": "https://slsa.dev/provenance/v0.2",
                                           "policy": {"type": "rego",
                                                      "data": leaking_rego("input")}}]}]}},
        ],
    }))
    .unwrap()
}

fn pod(namespace: &str, image: &str, pull_secrets: &[&str]) -> Vec<u8> {
    let secrets: Vec<Value> = pull_secrets.iter().map(|s| json!({"name": s})).collect();
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "pod-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "web", "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "tenant"},
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": image}],
                         "imagePullSecrets": secrets},
            },
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn a_tenant_reads_in_a_denial_only_what_its_own_pods_could_pull() {
    let host = private_registry().await;
    let api = FakeApi::default();
    let creds = docker_config(&host, USER, PASSWORD);
    // sigil's signature pull secret, and one pull secret of the tenant's
    // own in a second namespace it controls.
    api.put_secret(
        "sigil-system",
        "sigs",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &creds,
    );
    api.put_secret(
        "team",
        "regcred",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &creds,
    );
    let judge = PolicyJudge::new(
        ClientConfig {
            allow_insecure_all: true,
            limits: Limits {
                request_timeout: Duration::from_secs(3),
                total_deadline: Duration::from_secs(5),
                ..Limits::default()
            },
            ..ClientConfig::default()
        },
        TrustedRoot::public_good().unwrap(),
        "public-good",
        NoMatchPolicy::Deny,
    )
    .unwrap();
    judge.apply_bytes(&snapshot(&host)).unwrap();
    let admission = Admission::new(
        Arc::new(judge),
        KubePullSecrets::new(api.client(), "sigil-system", Duration::from_secs(30)),
        config(),
        Arc::new(Metrics::new()),
    );
    let app = router(AppState::new(admission));
    let (private, _, _, _) = private_image();
    let private = format!("{host}/team/private@{private}");
    let attested = format!("{host}/team/attested@{ATTESTED}");

    // Without credentials of its own, the tenant's policies read nothing.
    for image in [&private, &attested] {
        let (_, answer) = post(&app, "/validate", pod("team", image, &[])).await;
        let resp = response(&answer);
        let text = message(resp);
        println!("without a pull secret, {image}: {text}");
        assert_eq!(resp["allowed"], false, "{answer}");
        assert!(
            !text.contains("hunter2") && !text.contains(PREDICATE_MARK),
            "a tenant read private content with the cluster's credentials: {text}"
        );
        assert!(text.contains("401"), "{text}");
    }
    // The cluster's own policy still fetched its signature with its secret:
    // its authority passed, only the tenant's failed.
    let (_, answer) = post(&app, "/validate", pod("team", &attested, &[])).await;
    let text = message(response(&answer));
    assert!(
        !text.contains("policy cluster-signed failed"),
        "the cluster's policy lost its own secret: {text}"
    );

    // With its own pull secret it reads what its pods can pull.
    for (image, mark) in [(&private, "hunter2"), (&attested, PREDICATE_MARK)] {
        let (_, answer) = post(&app, "/validate", pod("team", image, &["regcred"])).await;
        let text = message(response(&answer));
        println!("with the tenant's pull secret, {image}: {text}");
        assert!(text.contains("leak: ") && text.contains(mark), "{text}");
    }
}
