//! The policy reconciler with `key.kms` against a Vault transit mock on
//! 127.0.0.1 and the in-memory API server: the key is fetched with the
//! credentials Secret, published inline, refreshed, and kept while the KMS
//! cannot be reached.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, Uri};
use serde_json::{Value, json};
use sigil_kms::Provider;

use super::*;
use crate::fixtures::*;
use crate::kms::parse_credentials_flag;

/// What the mock Vault answers: the key, or 503 while it is down.
#[derive(Clone)]
struct Vault {
    pem: Arc<Mutex<Option<String>>>,
}

async fn vault() -> (String, Vault) {
    let state = Vault {
        pem: Arc::new(Mutex::new(Some(P256_PUB.to_owned()))),
    };
    let shared = state.clone();
    let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
        let shared = shared.clone();
        async move {
            let pem = shared.pem.lock().unwrap().clone();
            let Some(pem) = pem else {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    r#"{"errors":["Vault is sealed"]}"#.to_owned(),
                );
            };
            if headers.get("x-vault-token").is_none_or(|t| t != "s.good") {
                return (
                    StatusCode::FORBIDDEN,
                    r#"{"errors":["permission denied"]}"#.to_owned(),
                );
            }
            if uri.path() != "/v1/transit/keys/release" {
                return (StatusCode::NOT_FOUND, r#"{"errors":[]}"#.to_owned());
            }
            let body = json!({"data": {"latest_version": 1, "type": "ecdsa-p256",
                "keys": {"1": {"public_key": pem, "name": "P-256"}}}});
            (StatusCode::OK, body.to_string())
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), state)
}

fn kms_context(client: kube::Client) -> Arc<Context> {
    kms_context_with(client, &[])
}

fn kms_context_with(client: kube::Client, deny_address: &[&str]) -> Arc<Context> {
    let args = crate::Args {
        namespace: NS.into(),
        kms_credentials_secret: vec![(Provider::Vault, "vault-creds".into())],
        deny_address: deny_address.iter().map(|a| (*a).to_owned()).collect(),
        ..crate::Args::default()
    };
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let (_leading_tx, leading_rx) = tokio::sync::watch::channel(true);
    // The sender is dropped: `leading` keeps its last value, true.
    Arc::new(Context::new(
        client,
        args,
        Arc::new(crate::metrics::Metrics::default()),
        leading_rx,
        tx,
    ))
}

fn kms_policy() -> Value {
    cip(
        "p",
        1,
        json!({"images": [{"glob": "ghcr.io/acme/**"}],
               "authorities": [{"name": "vault", "key": {"kms": "hashivault://release"}}]}),
    )
}

fn ready(api: &FakeApi) -> Value {
    let obj = api.get(&cip_path("p")).unwrap();
    obj["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone()
}

async fn reconcile(api: &FakeApi, ctx: &Arc<Context>) -> kube::runtime::controller::Action {
    crate::policy::reconcile(
        object::<sigil_api::ClusterImagePolicy>(api, &cip_path("p")),
        ctx.clone(),
    )
    .await
    .unwrap()
}

fn published_key(api: &FakeApi) -> KeyRef {
    stored_snapshot(api).unwrap().policies[0].spec.authorities[0]
        .key
        .clone()
        .unwrap()
}

#[tokio::test]
async fn a_kms_key_is_fetched_with_the_credentials_secret_and_published_inline() {
    let (addr, _vault) = vault().await;
    let (client, api) = FakeApi::start();
    let ctx = kms_context(client);
    api.put(
        &secret_path("vault-creds"),
        secret(
            "vault-creds",
            &[("VAULT_ADDR", &addr), ("VAULT_TOKEN", "s.good")],
        ),
    );
    api.put(&cip_path("p"), kms_policy());

    let action = reconcile(&api, &ctx).await;

    let cond = ready(&api);
    assert_eq!(cond["status"], "True", "{cond}");
    let key = published_key(&api);
    assert_eq!(key.data.as_deref(), Some(P256_PUB));
    assert!(key.kms.is_none());
    sigil_compile::snapshot::validate(&stored_snapshot(&api).unwrap()).unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(ctx.kms.refresh()),
        "KMS policies come back every refresh interval"
    );
}

#[tokio::test]
async fn a_kms_that_cannot_be_reached_keeps_the_last_good_key_and_ready_says_why() {
    let (addr, vault) = vault().await;
    let (client, api) = FakeApi::start();
    let ctx = kms_context(client);
    api.put(
        &secret_path("vault-creds"),
        secret(
            "vault-creds",
            &[("VAULT_ADDR", &addr), ("VAULT_TOKEN", "s.good")],
        ),
    );
    api.put(&cip_path("p"), kms_policy());
    reconcile(&api, &ctx).await;
    let good = stored_snapshot(&api).unwrap();

    // Vault goes down; new credentials force a fetch before the interval ends.
    *vault.pem.lock().unwrap() = None;
    api.put(
        &secret_path("vault-creds"),
        secret(
            "vault-creds",
            &[
                ("VAULT_ADDR", &addr),
                ("VAULT_TOKEN", "s.good"),
                ("VAULT_NAMESPACE", "x"),
            ],
        ),
    );
    let action = reconcile(&api, &ctx).await;

    let cond = ready(&api);
    assert_eq!(cond["status"], "False", "{cond}");
    assert_eq!(cond["reason"], "KMSUnreachable");
    let message = cond["message"].as_str().unwrap();
    assert!(
        message.contains(
            "spec.authorities[0].key.kms: KMS key hashivault://release cannot be fetched since"
        ),
        "{message}"
    );
    assert!(message.contains("Vault is sealed"), "{message}");
    assert!(
        message.contains("keeps enforcing the last good key (version 1), fetched at"),
        "{message}"
    );
    assert_eq!(stored_snapshot(&api).unwrap().policies, good.policies);
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(30))
    );

    // Vault is back with a rotated key: the next reconcile publishes it and
    // Ready recovers.
    *vault.pem.lock().unwrap() = Some(ED_PUB.to_owned());
    reconcile(&api, &ctx).await;
    assert_eq!(ready(&api)["status"], "True", "{}", ready(&api));
    assert_eq!(published_key(&api).data.as_deref(), Some(ED_PUB));
}

#[tokio::test]
async fn without_a_last_good_key_a_kms_failure_is_an_unresolved_reference() {
    let (addr, _vault) = vault().await;
    let (client, api) = FakeApi::start();
    let ctx = kms_context(client);
    api.put(&cip_path("p"), kms_policy());

    reconcile(&api, &ctx).await;
    let cond = ready(&api);
    assert_eq!(cond["reason"], "UnresolvedReference");
    assert!(
        cond["message"].as_str().unwrap().contains(
            "credentials Secret sigil-system/vault-creds (--kms-credentials-secret) not found"
        ),
        "{cond}"
    );

    api.put(
        &secret_path("vault-creds"),
        secret(
            "vault-creds",
            &[("VAULT_ADDR", &addr), ("VAULT_TOKEN", "s.wrong")],
        ),
    );
    reconcile(&api, &ctx).await;
    let cond = ready(&api);
    assert_eq!(cond["reason"], "UnresolvedReference");
    let message = cond["message"].as_str().unwrap();
    assert!(
        message.contains("spec.authorities[0].key.kms: hashivault:"),
        "{message}"
    );
    assert!(
        message.contains("answered HTTP 403: permission denied"),
        "{message}"
    );
    assert!(!message.contains("s.wrong"), "the token leaked: {message}");
    assert!(stored_snapshot(&api).is_none_or(|s| s.policies.is_empty()));
}

#[test]
fn credentials_flags_name_a_provider_and_a_secret() {
    assert_eq!(
        parse_credentials_flag("azurekms=az").unwrap(),
        (Provider::Azure, "az".to_owned())
    );
    assert!(parse_credentials_flag("azurekms=").is_err());
    assert!(parse_credentials_flag("=x").is_err());
}

/// The fixture file `e2e/kms-fixtures.sh` writes: real OpenBao and moto on
/// 127.0.0.1 and the public keys cosign wrote for the keys it made there.
fn real_fixtures() -> std::collections::HashMap<String, String> {
    let path = std::env::var("SIGIL_KMS_FIXTURES").expect("run through e2e/kms-fixtures.sh");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// PEM without its line breaks, to compare keys written by different tools.
fn pem_text(pem: &str) -> String {
    pem.split_whitespace().collect()
}

#[tokio::test]
#[ignore = "needs e2e/kms-fixtures.sh"]
async fn real_openbao_and_aws_kms_keys_are_published_as_the_public_keys_cosign_wrote() {
    let f = real_fixtures();
    for (provider, uri, pubkey, entries) in [
        (
            Provider::Vault,
            "VAULT_URI",
            "VAULT_PUB",
            vec!["VAULT_ADDR", "VAULT_TOKEN"],
        ),
        (
            Provider::Aws,
            "AWS_URI",
            "AWS_PUB",
            vec![
                "AWS_ENDPOINT_URL",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_REGION",
            ],
        ),
    ] {
        let (client, api) = FakeApi::start();
        let args = crate::Args {
            namespace: NS.into(),
            kms_credentials_secret: vec![(provider, "kms-creds".into())],
            ..crate::Args::default()
        };
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let (_leading_tx, leading_rx) = tokio::sync::watch::channel(true);
        let ctx = Arc::new(Context::new(
            client,
            args,
            Arc::new(crate::metrics::Metrics::default()),
            leading_rx,
            tx,
        ));
        let data: Vec<(&str, &str)> = entries.iter().map(|k| (*k, f[*k].as_str())).collect();
        api.put(&secret_path("kms-creds"), secret("kms-creds", &data));
        api.put(
            &cip_path("p"),
            cip(
                "p",
                1,
                json!({"images": [{"glob": "**"}],
                       "authorities": [{"name": "kms", "key": {"kms": f[uri]}, "ctlog": {}}]}),
            ),
        );

        reconcile(&api, &ctx).await;

        assert_eq!(ready(&api)["status"], "True", "{uri}: {}", ready(&api));
        let published = published_key(&api).data.unwrap();
        let cosign = std::fs::read_to_string(&f[pubkey]).unwrap();
        assert_eq!(pem_text(&published), pem_text(&cosign), "{uri}");
    }
}

#[tokio::test]
async fn an_image_policys_kms_key_is_refused_and_the_kms_never_asked_with_sigils_credentials() {
    let (addr, _vault) = vault().await;
    let asked = Arc::new(Mutex::new(0usize));
    // A host the tenant names: it counts what reaches it.
    let seen = asked.clone();
    let app = axum::Router::new().fallback(move || {
        *seen.lock().unwrap() += 1;
        async { (StatusCode::OK, "{}") }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tenant_host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let (client, api) = FakeApi::start();
    let ctx = kms_context(client);
    api.put(
        &secret_path("vault-creds"),
        secret(
            "vault-creds",
            &[("VAULT_ADDR", &addr), ("VAULT_TOKEN", "s.good")],
        ),
    );
    let path = image_policy_path("team-a", "kms");
    api.put(
        &path,
        image_policy(
            "team-a",
            "kms",
            1,
            json!({"images": [{"glob": "ghcr.io/acme/**"}],
            "authorities": [
                {"name": "vault", "key": {"kms": "hashivault://release"}},
                {"name": "aws", "key": {"kms": format!("awskms://{tenant_host}/alias/x")}},
            ]}),
        ),
    );

    crate::policy::reconcile(object::<sigil_api::ImagePolicy>(&api, &path), ctx.clone())
        .await
        .unwrap();

    let obj = api.get(&path).unwrap();
    let cond = obj["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(
        (&cond["status"], &cond["reason"]),
        (&json!("False"), &json!("Invalid"))
    );
    let message = cond["message"].as_str().unwrap();
    assert!(
        message.contains("spec.authorities[0].key.kms: an ImagePolicy cannot name a KMS key")
            && message.contains("spec.authorities[1].key.kms: "),
        "{message}"
    );
    // Neither sigil's credentials Secret nor any KMS was touched.
    assert!(
        api.requests_to(http::Method::GET, &secret_path("vault-creds"))
            .is_empty()
    );
    assert_eq!(*asked.lock().unwrap(), 0);
    assert!(stored_snapshot(&api).is_none_or(|s| s.policies.is_empty()));
}

#[tokio::test]
async fn a_kms_at_an_address_the_egress_policy_refuses_is_not_contacted_by_address_or_name() {
    let (addr, _vault) = vault().await;
    for vault_addr in [addr.clone(), addr.replace("127.0.0.1", "localhost")] {
        let (client, api) = FakeApi::start();
        let ctx = kms_context_with(client, &["127.0.0.0/8", "::1/128"]);
        api.put(
            &secret_path("vault-creds"),
            secret(
                "vault-creds",
                &[("VAULT_ADDR", &vault_addr), ("VAULT_TOKEN", "s.good")],
            ),
        );
        api.put(&cip_path("p"), kms_policy());

        reconcile(&api, &ctx).await;

        let cond = ready(&api);
        assert_eq!(cond["reason"], "UnresolvedReference", "{cond}");
        let message = cond["message"].as_str().unwrap();
        assert!(
            message.contains("spec.authorities[0].key.kms: hashivault: ")
                && message.contains("in a range the operator denied"),
            "{message}"
        );
    }
}
