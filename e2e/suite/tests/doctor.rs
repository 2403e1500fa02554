//! `sigil doctor` against the local control plane with sigil installed (the
//! chart in URL mode, controller and webhook as host processes, as
//! `e2e/run-local.sh` runs them): a healthy installation passes, and each
//! failure induced here (a policy the controller rejects, a caBundle of
//! another CA, nothing listening where the webhook is registered, a
//! controller that stopped publishing) is diagnosed by the check that
//! names it. Every scenario puts the cluster back before it asserts.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use sigil_e2e::doctor::Doctor;
use sigil_e2e::{Cluster, Fixtures, key_authority, policy, wait_for, webhook_metrics};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NS: &str = "e2e-doctor";
const SETTLE: Duration = Duration::from_secs(30);
const VALIDATING: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";

fn doctor(namespace: &str) -> Doctor {
    Doctor::run(namespace, webhook_metrics().as_deref()).unwrap()
}

/// Prints doctor's text report, as a user sees it, into the test's output.
fn show_text(namespace: &str, scenario: &str) {
    Doctor::show_text(namespace, webhook_metrics().as_deref(), scenario);
}

/// The scenario's start: serialized, the namespace opted in, no policies
/// left by others, and the webhook answering.
async fn start() -> (tokio::sync::MutexGuard<'static, ()>, Cluster, Fixtures) {
    let guard = SERIAL.lock().await;
    let (cluster, fx) = Cluster::fresh_scenario(NS).await.unwrap();
    (guard, cluster, fx)
}

/// A policy admitting images signed by the harness's KEY1 on olareg.
fn key1_policy(fx: &Fixtures, name: &str) -> Value {
    let glob = format!("{}/test/**", fx.get("OLAREG").unwrap());
    policy(
        name,
        &glob,
        json!([key_authority("harness-key1", &fx.key_pem("KEY1").unwrap())]),
    )
}

/// Waits (bounded) until a doctor run satisfies `want`, described by `what`.
async fn doctor_until(namespace: &str, what: &str, want: impl Fn(&Doctor) -> bool) -> Doctor {
    let mut last = None;
    let outcome = wait_for(&format!("doctor to report {what}"), SETTLE, async || {
        let d = doctor(namespace);
        let ok = d.report.is_object() && want(&d);
        let text = d.describe();
        last = Some(d);
        Ok(if ok { Ok(()) } else { Err(text) })
    })
    .await;
    if let Err(e) = outcome {
        panic!("{e:#}");
    }
    last.unwrap()
}

#[tokio::test]
#[ignore = "needs a cluster with sigil: e2e/run-local.sh"]
async fn doctor_finds_a_healthy_installation_healthy() {
    let (_g, cluster, fx) = start().await;
    cluster
        .apply_policy(&key1_policy(&fx, "e2e-doctor-ok"))
        .await
        .unwrap();
    // Once the controller published the policy and the webhook loaded it.
    let d = doctor_until(&cluster.sigil_namespace, "a healthy installation", |d| {
        d.code == Some(0) && d.text("policies").contains("e2e-doctor-ok")
    })
    .await;
    show_text(&cluster.sigil_namespace, "healthy");
    assert_eq!(d.code, Some(0), "{}", d.describe());
    assert_eq!(d.report["healthy"], true);
    // The suite's serving certificate lives two days: doctor may warn that
    // it expires soon, never that it does not verify.
    assert!(
        d.status("ca-bundle") == "ok"
            || (d.status("ca-bundle") == "warn" && d.text("ca-bundle").contains("expires")),
        "{}",
        d.describe()
    );
    for check in [
        "webhook-configurations",
        "endpoints",
        "admission",
        "policy-snapshot",
        "webhook-loaded",
        "policies",
        "namespaces",
    ] {
        assert_eq!(d.status(check), "ok", "{check}: {}", d.describe());
    }
    assert!(
        d.text("admission").contains("judged by sigil"),
        "{}",
        d.describe()
    );
    assert!(
        d.text("namespaces").contains(NS),
        "{NS} is enforced: {}",
        d.describe()
    );
    assert!(
        d.text("policies").contains("e2e-doctor-ok"),
        "{}",
        d.describe()
    );
    // The suite's controller runs --tuf-offline: the built-in root is the
    // embedded copy, which doctor calls out.
    assert_eq!(d.status("tuf"), "warn", "{}", d.describe());
    assert!(d.text("tuf").contains("embedded"), "{}", d.describe());
    cluster.clear_policies().await.unwrap();
}

#[tokio::test]
#[ignore = "needs a cluster with sigil: e2e/run-local.sh"]
async fn doctor_names_a_policy_the_controller_rejects_and_why() {
    let (_g, cluster, fx) = start().await;
    let mut bad = key1_policy(&fx, "e2e-doctor-bad");
    bad["spec"]["authorities"][0]["key"]["data"] = json!("not a PEM key");
    cluster.apply_policy(&bad).await.unwrap();
    let ready = wait_for("the controller to judge the policy", SETTLE, async || {
        Ok(match cluster.policy_ready("e2e-doctor-bad").await? {
            Some(r) => Ok(r),
            None => Err("no Ready condition yet".to_owned()),
        })
    })
    .await
    .unwrap();
    assert_eq!(ready.0, "False", "{ready:?}");
    let d = doctor(&cluster.sigil_namespace);
    show_text(&cluster.sigil_namespace, "a policy not Ready");
    cluster.clear_policies().await.unwrap();
    assert_eq!(d.code, Some(1), "{}", d.describe());
    assert_eq!(d.status("policies"), "fail", "{}", d.describe());
    let text = d.text("policies");
    assert!(
        text.contains("e2e-doctor-bad") && text.contains("Ready=False") && text.contains(&ready.1),
        "the policy, its condition and reason are named: {text}"
    );
    // A rejected generation is left out of the snapshot on purpose.
    assert_eq!(d.status("policy-snapshot"), "ok", "{}", d.describe());
}

/// Both webhook configurations' JSON documents (validating, mutating).
async fn configurations(cluster: &Cluster) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (path, hook) in [
        (VALIDATING, "validate.policy.sigil.dev"),
        (MUTATING, "mutate.policy.sigil.dev"),
    ] {
        let list = cluster.get(path).await.unwrap().expect_ok(path).unwrap();
        for item in list.body["items"].as_array().into_iter().flatten() {
            if item["webhooks"][0]["name"] == hook {
                let name = item["metadata"]["name"].as_str().unwrap_or("").to_owned();
                out.push((format!("{path}/{name}"), item.clone()));
            }
        }
    }
    assert_eq!(out.len(), 2, "sigil's two webhook configurations: {out:?}");
    out
}

/// Replaces `field` of the first webhook's clientConfig in each configuration.
async fn set_client_config(cluster: &Cluster, field: &str, values: &[Value]) {
    for ((path, _), value) in configurations(cluster).await.iter().zip(values) {
        let patch = json!([{
            "op": "replace",
            "path": format!("/webhooks/0/clientConfig/{field}"),
            "value": value,
        }]);
        cluster
            .raw(
                http::Method::PATCH,
                path,
                "application/json-patch+json",
                Some(&patch),
            )
            .await
            .unwrap()
            .expect_ok(&format!("patching {path}"))
            .unwrap();
    }
}

/// Waits until the webhook answers a pod again (after a restore).
async fn webhook_answers(cluster: &Cluster, fx: &Fixtures) {
    let probe = fx.get("OLAREG_NEW").unwrap();
    wait_for("the webhook to answer again", SETTLE, async || {
        let reply = cluster.try_pod(NS, &[&probe]).await?;
        Ok(if reply.message().contains("sigil denied") || reply.ok() {
            Ok(())
        } else {
            Err(reply.describe())
        })
    })
    .await
    .unwrap();
}

#[tokio::test]
#[ignore = "needs a cluster with sigil: e2e/run-local.sh"]
async fn doctor_diagnoses_a_ca_bundle_of_another_ca() {
    let (_g, cluster, fx) = start().await;
    let originals: Vec<Value> = configurations(&cluster)
        .await
        .iter()
        .map(|(_, c)| c["webhooks"][0]["clientConfig"]["caBundle"].clone())
        .collect();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "not sigil's CA");
    let other = params.self_signed(&key).unwrap().pem();
    let other = json!(base64::engine::general_purpose::STANDARD.encode(other));
    set_client_config(&cluster, "caBundle", &[other.clone(), other]).await;
    let d = doctor(&cluster.sigil_namespace);
    show_text(&cluster.sigil_namespace, "a caBundle of another CA");
    set_client_config(&cluster, "caBundle", &originals).await;
    webhook_answers(&cluster, &fx).await;

    assert_eq!(d.code, Some(1), "{}", d.describe());
    assert_eq!(d.status("ca-bundle"), "fail", "{}", d.describe());
    assert!(
        d.text("ca-bundle").contains("unknown issuer"),
        "{}",
        d.describe()
    );
    assert_eq!(d.status("admission"), "fail", "{}", d.describe());
    assert!(
        d.text("admission").contains("TLS verification failed"),
        "the API server's own x509 refusal is explained: {}",
        d.describe()
    );
}

#[tokio::test]
#[ignore = "needs a cluster with sigil: e2e/run-local.sh"]
async fn doctor_diagnoses_a_webhook_that_does_not_answer() {
    let (_g, cluster, fx) = start().await;
    let originals: Vec<Value> = configurations(&cluster)
        .await
        .iter()
        .map(|(_, c)| c["webhooks"][0]["clientConfig"]["url"].clone())
        .collect();
    // A port that was free a moment ago: nothing listens there, as when
    // the webhook process is down.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let down: Vec<Value> = ["validate", "mutate"]
        .iter()
        .map(|p| json!(format!("https://127.0.0.1:{port}/{p}")))
        .collect();
    set_client_config(&cluster, "url", &down).await;
    let d = doctor(&cluster.sigil_namespace);
    show_text(
        &cluster.sigil_namespace,
        "nothing answers at the webhook's URL",
    );
    set_client_config(&cluster, "url", &originals).await;
    webhook_answers(&cluster, &fx).await;

    assert_eq!(d.code, Some(1), "{}", d.describe());
    assert_eq!(d.status("endpoints"), "fail", "{}", d.describe());
    assert!(
        d.text("endpoints")
            .contains(&format!("nothing answers at https://127.0.0.1:{port}")),
        "{}",
        d.describe()
    );
    assert_eq!(d.status("admission"), "fail", "{}", d.describe());
    assert!(
        d.text("admission").contains("nothing answers"),
        "{}",
        d.describe()
    );
}

/// Sends `signal` (`STOP`, `CONT`) to the controller `e2e/run-local.sh`
/// started; false when its pid file is not there.
fn signal_controller(signal: &str) -> bool {
    let Ok(dir) = std::env::var("SIGIL_E2E_LOG_DIR") else {
        return false;
    };
    let Ok(pid) = std::fs::read_to_string(PathBuf::from(dir).join("controller.pid")) else {
        return false;
    };
    Command::new("kill")
        .args([&format!("-{signal}"), pid.trim()])
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test]
#[ignore = "needs a cluster with sigil: e2e/run-local.sh"]
async fn doctor_diagnoses_a_snapshot_the_controller_stopped_publishing() {
    let (_g, cluster, fx) = start().await;
    if !signal_controller("STOP") {
        eprintln!(
            "skipped: no controller pid file (SIGIL_E2E_LOG_DIR): not run by e2e/run-local.sh"
        );
        return;
    }
    // Paused, not stopped: it renews its Lease again right after, well
    // within its renew deadline, and publishes what it missed.
    let applied = cluster
        .apply_policy(&key1_policy(&fx, "e2e-doctor-unpublished"))
        .await;
    let d = doctor(&cluster.sigil_namespace);
    assert!(signal_controller("CONT"), "the controller resumes");
    eprintln!(
        "---- sigil doctor, a stale snapshot: policy-snapshot ----\n{}",
        d.text("policy-snapshot")
    );
    applied.unwrap();
    let published = doctor_until(&cluster.sigil_namespace, "the policy published", |d| {
        d.status("policy-snapshot") == "ok"
    })
    .await;
    cluster.clear_policies().await.unwrap();

    assert_eq!(d.code, Some(1), "{}", d.describe());
    assert_eq!(d.status("policy-snapshot"), "fail", "{}", d.describe());
    let text = d.text("policy-snapshot");
    assert!(text.contains("is stale"), "{text}");
    assert!(
        text.contains("e2e-doctor-unpublished (generation 1) was not compiled yet"),
        "{text}"
    );
    assert!(
        !published
            .text("policy-snapshot")
            .contains("e2e-doctor-unpublished"),
        "once the controller resumed, the policy is published: {}",
        published.describe()
    );
}
