//! Cloud registry credentials end to end against `sigil-fakecloud` on
//! 127.0.0.1: each provider's every source, through endpoints that check
//! what the real ones check (ServiceAccount token signature, audience and
//! expiry at STS, Entra and Google STS; SigV4 at ECR; the Pod Identity
//! agent's token; `Metadata-Flavor: Google`; `Metadata: true`; ACR's
//! exchange refusing a token for another audience), to a registry front
//! that accepts only what the fakes issued. Refresh before expiry under
//! steady use, and an outage named in the error.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Response, Uri};
use sigil_fakecloud::{Config, Lifetimes, Running, TokenIssuer};
use sigil_registry::client::Descriptor;
use sigil_registry::cloud::cache::Exchange;
use sigil_registry::cloud::hosts::ExtraHost;
use sigil_registry::cloud::{CredentialObserver, Env};
use sigil_registry::{
    ClientConfig, Digest, Keychain, KeychainSettings, Limits, ProviderId, RegistryClient,
    RegistryError, Repository,
};
use tokio::net::TcpListener;

const SUBJECT: &str = "system:serviceaccount:sigil-system:sigil-webhook";
const BLOB: &[u8] = b"a signature layer";

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// The registry behind the fronts: serves `BLOB` at any blob path.
async fn upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(|uri: Uri| async move {
        if uri.path().contains("/blobs/") {
            Response::new(Body::from(BLOB))
        } else {
            Response::builder().status(404).body(Body::empty()).unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

struct World {
    fakes: Running,
    issuer: TokenIssuer,
    dir: PathBuf,
}

async fn world(name: &str, lifetimes: Lifetimes, static_keys: Vec<(String, String)>) -> World {
    let issuer = TokenIssuer::new(11, "https://kubernetes.default.svc.cluster.local").unwrap();
    let fakes = sigil_fakecloud::start(Config {
        service_account_keys: issuer.public_pem().unwrap(),
        issuer: Some("https://kubernetes.default.svc.cluster.local".into()),
        subjects: vec![SUBJECT.into()],
        upstream: Some(upstream().await),
        lifetimes,
        static_aws_keys: static_keys,
        ..Config::default()
    })
    .await
    .unwrap();
    let dir = std::env::temp_dir().join(format!("sigil-cloud-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    World { fakes, issuer, dir }
}

impl World {
    /// Writes a ServiceAccount token for `audience` as a projected volume would.
    fn token_file(&self, name: &str, audience: &str, life: i64) -> String {
        self.token_file_for(name, SUBJECT, audience, life)
    }

    fn token_file_for(&self, name: &str, subject: &str, audience: &str, life: i64) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, self.issuer.mint(subject, audience, now(), life)).unwrap();
        path.to_str().unwrap().to_string()
    }

    fn api(&self) -> String {
        format!("https://{}", self.fakes.api)
    }

    /// A keychain with `provider` serving the front `front`, settings from `env`.
    fn keychain(&self, provider: ProviderId, front: &str, env: &[(&str, String)]) -> Arc<Keychain> {
        let mut pairs: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        pairs.push(("AWS_EC2_METADATA_DISABLED".into(), "true".into()));
        let settings = KeychainSettings {
            providers: vec![provider],
            extra_hosts: vec![(provider, ExtraHost::parse(front).unwrap())],
            extra_roots_pem: self.fakes.ca_pem.clone().into_bytes(),
            exchange_timeout: Duration::from_secs(5),
            ..KeychainSettings::default()
        };
        Arc::new(Keychain::new(&settings, Env::from_pairs(pairs)).unwrap())
    }

    fn client(&self, keychain: Arc<Keychain>) -> RegistryClient {
        RegistryClient::new(ClientConfig {
            keychain: Some(keychain),
            extra_roots_pem: self.fakes.ca_pem.clone().into_bytes(),
            limits: Limits {
                request_timeout: Duration::from_secs(5),
                total_deadline: Duration::from_secs(8),
                ..Limits::default()
            },
            ..ClientConfig::default()
        })
        .unwrap()
    }
}

fn blob() -> Descriptor {
    serde_json::from_value(serde_json::json!({
        "mediaType": "application/octet-stream",
        "digest": Digest::of(BLOB).to_string(),
        "size": BLOB.len(),
    }))
    .unwrap()
}

async fn read(client: &RegistryClient, front: &str) -> Result<Vec<u8>, RegistryError> {
    let repo = Repository::parse(&format!("{front}/team/app")).unwrap();
    client.session().blob(&repo, &blob()).await
}

#[tokio::test]
async fn ecr_through_irsa_assumes_the_role_at_sts_then_signs_get_authorization_token() {
    let w = world("irsa", Lifetimes::default(), Vec::new()).await;
    let front = w.fakes.ecr.to_string();
    let env = [
        (
            "AWS_ROLE_ARN",
            "arn:aws:iam::123456789012:role/sigil".to_string(),
        ),
        (
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            w.token_file("irsa", "sts.amazonaws.com", 3600),
        ),
        ("AWS_ENDPOINT_URL_STS", w.api()),
        ("AWS_ENDPOINT_URL_ECR", w.api()),
        ("AWS_REGION", "us-east-1".to_string()),
    ];
    let client = w.client(w.keychain(ProviderId::Ecr, &front, &env));
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    assert_eq!(w.fakes.count("sts.issued"), 1);
    assert_eq!(w.fakes.count("ecr.issued"), 1);
    assert!(w.fakes.count("front.ecr.proxied") >= 2);
}

#[tokio::test]
async fn sts_refuses_a_token_of_another_audience_key_or_subject_and_sigil_names_the_step() {
    let w = world("irsa-refused", Lifetimes::default(), Vec::new()).await;
    let front = w.fakes.ecr.to_string();
    let stranger = TokenIssuer::new(99, "https://kubernetes.default.svc.cluster.local").unwrap();
    let forged = w.dir.join("forged");
    std::fs::write(
        &forged,
        stranger.mint(SUBJECT, "sts.amazonaws.com", now(), 3600),
    )
    .unwrap();
    for (file, expected) in [
        (
            w.token_file("wrong-aud", "api://AzureADTokenExchange", 3600),
            "incorrect token audience",
        ),
        (
            w.token_file("expired", "sts.amazonaws.com", -10),
            "Token expired",
        ),
        (
            forged.to_str().unwrap().to_string(),
            "signature does not verify",
        ),
        (
            w.token_file_for(
                "other-sa",
                "system:serviceaccount:default:app",
                "sts.amazonaws.com",
                3600,
            ),
            "Not authorized to perform sts:AssumeRoleWithWebIdentity",
        ),
    ] {
        let env = [
            (
                "AWS_ROLE_ARN",
                "arn:aws:iam::123456789012:role/sigil".to_string(),
            ),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", file),
            ("AWS_ENDPOINT_URL_STS", w.api()),
            ("AWS_ENDPOINT_URL_ECR", w.api()),
            ("AWS_REGION", "us-east-1".to_string()),
        ];
        let client = w.client(w.keychain(ProviderId::Ecr, &front, &env));
        let err = read(&client, &front).await.unwrap_err().to_string();
        assert!(
            err.contains(
                "ecr credentials: AWS credentials from IRSA (STS AssumeRoleWithWebIdentity) failed"
            ),
            "{err}"
        );
        assert!(err.contains(expected), "{expected}: {err}");
        assert!(err.contains("trusts the cluster's OIDC provider"), "{err}");
    }
    assert_eq!(w.fakes.count("sts.issued"), 0);
    assert_eq!(w.fakes.count("front.ecr.proxied"), 0);
}

#[tokio::test]
async fn ecr_through_eks_pod_identity_shows_the_agent_its_token() {
    let w = world("pod-identity", Lifetimes::default(), Vec::new()).await;
    let front = w.fakes.ecr.to_string();
    let env = [
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/v1/credentials", w.api()),
        ),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            w.token_file("eks-pod-identity-token", "pods.eks.amazonaws.com", 3600),
        ),
        ("AWS_ENDPOINT_URL_ECR", w.api()),
        ("AWS_REGION", "eu-west-1".to_string()),
    ];
    let client = w.client(w.keychain(ProviderId::Ecr, &front, &env));
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    assert_eq!(w.fakes.count("pod-identity.issued"), 1);
    // A token for STS's audience is not the agent's.
    let env = [
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/v1/credentials", w.api()),
        ),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            w.token_file("wrong", "sts.amazonaws.com", 3600),
        ),
        ("AWS_ENDPOINT_URL_ECR", w.api()),
        ("AWS_REGION", "eu-west-1".to_string()),
    ];
    let client = w.client(w.keychain(ProviderId::Ecr, &front, &env));
    let err = read(&client, &front).await.unwrap_err().to_string();
    assert!(err.contains("EKS Pod Identity"), "{err}");
    assert!(err.contains("audience"), "{err}");
}

#[tokio::test]
async fn ecr_with_environment_keys_and_with_the_instance_role_and_a_wrong_secret_refused_by_sigv4()
{
    let w = world(
        "keys",
        Lifetimes::default(),
        vec![("AKIAFAKESTATIC".into(), "the-right-secret".into())],
    )
    .await;
    let front = w.fakes.ecr.to_string();
    let keys = |secret: &str| {
        [
            ("AWS_ACCESS_KEY_ID", "AKIAFAKESTATIC".to_string()),
            ("AWS_SECRET_ACCESS_KEY", secret.to_string()),
            ("AWS_ENDPOINT_URL_ECR", w.api()),
            ("AWS_REGION", "us-west-2".to_string()),
        ]
    };
    let client = w.client(w.keychain(ProviderId::Ecr, &front, &keys("the-right-secret")));
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    let client = w.client(w.keychain(ProviderId::Ecr, &front, &keys("a-wrong-secret")));
    let err = read(&client, &front).await.unwrap_err().to_string();
    assert!(err.contains("ECR GetAuthorizationToken failed"), "{err}");
    assert!(err.contains("InvalidSignatureException"), "{err}");
    assert_eq!(w.fakes.count("ecr.refused.signature"), 1);

    // IMDSv2: a session token first, then the role's credentials.
    let mut settings: Vec<(String, String)> = vec![
        (
            "AWS_EC2_METADATA_SERVICE_ENDPOINT".into(),
            format!("http://{}", w.fakes.metadata),
        ),
        ("AWS_ENDPOINT_URL_ECR".into(), w.api()),
        ("AWS_REGION".into(), "us-west-2".into()),
    ];
    settings.push(("AWS_EC2_METADATA_DISABLED".into(), "false".into()));
    let keychain = Keychain::new(
        &KeychainSettings {
            providers: vec![ProviderId::Ecr],
            extra_hosts: vec![(ProviderId::Ecr, ExtraHost::parse(&front).unwrap())],
            extra_roots_pem: w.fakes.ca_pem.clone().into_bytes(),
            ..KeychainSettings::default()
        },
        Env::from_pairs(settings),
    )
    .unwrap();
    let client = w.client(Arc::new(keychain));
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    assert_eq!(w.fakes.count("imds.issued"), 1);
}

#[tokio::test]
async fn artifact_registry_through_the_gke_metadata_server() {
    let w = world("gke", Lifetimes::default(), Vec::new()).await;
    let front = w.fakes.gcp.to_string();
    let env = [("GCE_METADATA_HOST", w.fakes.metadata.to_string())];
    let client = w.client(w.keychain(ProviderId::Gcp, &front, &env));
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    assert_eq!(w.fakes.count("metadata.issued"), 1);
    assert_eq!(w.fakes.count("front.gcp.tokens"), 1);
    // The metadata server answers nobody who does not say Metadata-Flavor: Google.
    let plain = reqwest::get(format!(
        "http://{}/computeMetadata/v1/instance/service-accounts/default/token",
        w.fakes.metadata
    ))
    .await
    .unwrap();
    assert_eq!(plain.status(), 403);
}

#[tokio::test]
async fn artifact_registry_through_workload_identity_federation_and_impersonation() {
    let w = world("wif", Lifetimes::default(), Vec::new()).await;
    let front = w.fakes.gcp.to_string();
    let audience = Config::default().pool_audience;
    let token = w.token_file("gcp-token", &audience, 3600);
    let config = serde_json::json!({
        "type": "external_account",
        "audience": audience,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": format!("{}/v1/token", w.api()),
        "service_account_impersonation_url":
            format!("{}/v1/projects/-/serviceAccounts/sigil@p.iam.gserviceaccount.com:generateAccessToken", w.api()),
        "credential_source": {"file": token},
    });
    let file = w.dir.join("credentials.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let env = [(
        "GOOGLE_APPLICATION_CREDENTIALS",
        file.to_str().unwrap().to_string(),
    )];
    let client = w.client(w.keychain(ProviderId::Gcp, &front, &env));
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    assert_eq!(w.fakes.count("google-sts.issued"), 1);
    assert_eq!(w.fakes.count("impersonate.issued"), 1);
}

#[tokio::test]
async fn on_a_laptop_gclouds_application_default_credentials_are_refreshed_at_googles_token_endpoint()
 {
    let w = world("adc", Lifetimes::default(), Vec::new()).await;
    let front = w.fakes.gcp.to_string();
    let (client_id, client_secret, refresh_token) = Config::default().google_user;
    let gcloud = w.dir.join("gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    let write_adc = |refresh: &str| {
        let adc = serde_json::json!({
            "type": "authorized_user",
            "client_id": client_id,
            "client_secret": client_secret,
            "refresh_token": refresh,
            "token_uri": format!("{}/token", w.api()),
        });
        std::fs::write(
            gcloud.join("application_default_credentials.json"),
            adc.to_string(),
        )
        .unwrap();
    };
    let keychain = |laptop: bool| {
        Arc::new(
            Keychain::new(
                &KeychainSettings {
                    providers: vec![ProviderId::Gcp],
                    extra_hosts: vec![(ProviderId::Gcp, ExtraHost::parse(&front).unwrap())],
                    extra_roots_pem: w.fakes.ca_pem.clone().into_bytes(),
                    laptop,
                    ..KeychainSettings::default()
                },
                Env::from_pairs([("CLOUDSDK_CONFIG", gcloud.to_str().unwrap())]),
            )
            .unwrap(),
        )
    };
    write_adc(&refresh_token);
    // The CLI on a laptop uses what `gcloud auth application-default login` wrote.
    let client = w.client(keychain(true));
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    assert_eq!(w.fakes.count("google-oauth.issued"), 1);
    // In a cluster the same file is no source: a named error, nothing asked.
    let err = read(&w.client(keychain(false)), &front)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no source is configured"), "{err}");
    assert_eq!(w.fakes.count("google-oauth.issued"), 1);
    // A revoked refresh token is refused by the endpoint, and the denial says what to do.
    write_adc("1//revoked");
    let err = read(&w.client(keychain(true)), &front)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("Token has been expired or revoked"), "{err}");
    assert!(
        err.contains("gcloud auth application-default login"),
        "{err}"
    );
    assert_eq!(w.fakes.count("google-oauth.refused.token"), 1);
}

#[tokio::test]
async fn acr_through_workload_identity_exchanges_the_entra_token_for_a_refresh_token() {
    let w = world("aks", Lifetimes::default(), Vec::new()).await;
    let front = w.fakes.acr.to_string();
    let defaults = Config::default();
    let env = [
        ("AZURE_CLIENT_ID", defaults.azure_client_id.clone()),
        ("AZURE_TENANT_ID", defaults.azure_tenant.clone()),
        (
            "AZURE_FEDERATED_TOKEN_FILE",
            w.token_file("azure-identity-token", "api://AzureADTokenExchange", 3600),
        ),
        ("AZURE_AUTHORITY_HOST", format!("{}/", w.api())),
    ];
    let client = w.client(w.keychain(ProviderId::Acr, &front, &env));
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    assert_eq!(w.fakes.count("entra.issued"), 1);
    assert_eq!(w.fakes.count("acr.exchange.issued"), 1);
    assert_eq!(w.fakes.count("front.acr.tokens"), 1);

    // Entra checks the federated token's subject.
    let env = [
        ("AZURE_CLIENT_ID", defaults.azure_client_id.clone()),
        ("AZURE_TENANT_ID", defaults.azure_tenant.clone()),
        (
            "AZURE_FEDERATED_TOKEN_FILE",
            w.token_file_for(
                "intruder",
                "system:serviceaccount:default:app",
                "api://AzureADTokenExchange",
                3600,
            ),
        ),
        ("AZURE_AUTHORITY_HOST", format!("{}/", w.api())),
    ];
    let client = w.client(w.keychain(ProviderId::Acr, &front, &env));
    let err = read(&client, &front).await.unwrap_err().to_string();
    assert!(
        err.contains("Entra ID token from workload identity failed"),
        "{err}"
    );
    assert!(err.contains("AADSTS700213"), "{err}");
}

#[tokio::test]
async fn acrs_exchange_refuses_an_entra_token_for_another_audience() {
    let w = world("acr-audience", Lifetimes::default(), Vec::new()).await;
    let defaults = Config::default();
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(w.fakes.ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let assertion = w
        .issuer
        .mint(SUBJECT, "api://AzureADTokenExchange", now(), 600);
    let entra = |scope: &'static str| {
        let (http, assertion, api) = (http.clone(), assertion.clone(), w.api());
        let (tenant, client_id) = (
            defaults.azure_tenant.clone(),
            defaults.azure_client_id.clone(),
        );
        async move {
            let answer = http
                .post(format!("{api}/{tenant}/oauth2/v2.0/token"))
                .form(&[
                    ("grant_type", "client_credentials"),
                    ("client_id", client_id.as_str()),
                    ("scope", scope),
                    (
                        "client_assertion_type",
                        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                    ),
                    ("client_assertion", assertion.as_str()),
                ])
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
            answer["access_token"].as_str().unwrap().to_string()
        }
    };
    let exchange = |token: String| {
        let (http, front) = (http.clone(), w.fakes.acr.to_string());
        async move {
            http.post(format!("https://{front}/oauth2/exchange"))
                .form(&[
                    ("grant_type", "access_token"),
                    ("service", front.as_str()),
                    ("access_token", token.as_str()),
                ])
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let management = entra("https://management.azure.com/.default").await;
    assert_eq!(exchange(management).await, 401);
    assert_eq!(w.fakes.count("acr.exchange.refused.audience"), 1);
    let acr = entra("https://containerregistry.azure.net/.default").await;
    assert_eq!(exchange(acr).await, 200);
}

#[tokio::test]
async fn acr_through_a_managed_identity_at_imds() {
    let w = world("msi", Lifetimes::default(), Vec::new()).await;
    let front = w.fakes.acr.to_string();
    let env = [(
        "AZURE_POD_IDENTITY_AUTHORITY_HOST",
        format!("http://{}", w.fakes.metadata),
    )];
    let client = w.client(w.keychain(ProviderId::Acr, &front, &env));
    assert_eq!(read(&client, &front).await.unwrap(), BLOB);
    assert_eq!(w.fakes.count("azure-imds.issued"), 1);
    // IMDS answers nobody who does not say Metadata: true.
    let plain = reqwest::get(format!(
        "http://{}/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://containerregistry.azure.net/",
        w.fakes.metadata
    ))
    .await
    .unwrap();
    assert_eq!(plain.status(), 400);
}

/// Counts exchanges by outcome.
#[derive(Debug, Default)]
struct Outcomes {
    issued: AtomicU32,
    refreshed: AtomicU32,
    failed: AtomicU32,
}

impl CredentialObserver for Outcomes {
    fn exchanged(&self, _: ProviderId, outcome: Exchange) {
        match outcome {
            Exchange::Issued => &self.issued,
            Exchange::Refreshed => &self.refreshed,
            Exchange::Failed => &self.failed,
        }
        .fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn under_steady_use_short_lived_tokens_are_refreshed_before_they_expire_and_no_read_fails() {
    // ECR tokens of 4 s: refreshed in the background from their last 2 s,
    // never handed out in their last 0.4 s; a read every 100 ms for 7 s.
    let w = world(
        "refresh",
        Lifetimes {
            ecr_token: 4,
            ..Lifetimes::default()
        },
        vec![("AKIAFAKESTATIC".into(), "secret".into())],
    )
    .await;
    let front = w.fakes.ecr.to_string();
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIAFAKESTATIC".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "secret".to_string()),
        ("AWS_ENDPOINT_URL_ECR", w.api()),
        ("AWS_REGION", "us-east-1".to_string()),
    ];
    let keychain = w.keychain(ProviderId::Ecr, &front, &env);
    let outcomes = Arc::new(Outcomes::default());
    keychain.observe(outcomes.clone());
    let client = w.client(keychain);
    let mut failed = Vec::new();
    for _ in 0..70 {
        if let Err(e) = read(&client, &front).await {
            failed.push(e.to_string());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(outcomes.issued.load(Ordering::SeqCst), 1);
    assert!(
        outcomes.refreshed.load(Ordering::SeqCst) >= 2,
        "{outcomes:?}"
    );
    assert_eq!(outcomes.failed.load(Ordering::SeqCst), 0);
    assert!(w.fakes.count("ecr.issued") >= 3);
    // Only the very first, anonymous, request was refused: every later one
    // went out with a token the registry still took.
    assert_eq!(
        w.fakes.count("front.ecr.refused"),
        1,
        "{:?}",
        w.fakes.counts()
    );
}

#[tokio::test]
async fn a_provider_that_is_down_gives_an_error_naming_it_and_the_step() {
    let w = world("down", Lifetimes::default(), Vec::new()).await;
    let front = w.fakes.acr.to_string();
    let defaults = Config::default();
    let env = [
        ("AZURE_CLIENT_ID", defaults.azure_client_id.clone()),
        ("AZURE_TENANT_ID", defaults.azure_tenant.clone()),
        (
            "AZURE_FEDERATED_TOKEN_FILE",
            w.token_file("azure-identity-token", "api://AzureADTokenExchange", 3600),
        ),
        ("AZURE_AUTHORITY_HOST", format!("{}/", w.api())),
    ];
    w.fakes.set_down("entra", true);
    let client = w.client(w.keychain(ProviderId::Acr, &front, &env));
    let err = read(&client, &front).await.unwrap_err();
    assert_eq!(err.reason(), "cloud-credentials");
    let text = err.to_string();
    assert!(
        text.contains("acr credentials: Entra ID token from workload identity failed"),
        "{text}"
    );
    assert!(text.contains("503"), "{text}");
    assert!(text.contains("federated identity credential"), "{text}");
    assert_eq!(w.fakes.count("front.acr.proxied"), 0);
}
