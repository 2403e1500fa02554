//! sigil-fakecloud: the cloud endpoints sigil's registry credentials talk
//! to, faked on 127.0.0.1 for tests, each checking what the real one
//! checks (see each module), and registry fronts that accept only the
//! tokens these fakes issued:
//!
//! - `api` (HTTPS): STS, ECR's API, the EKS Pod Identity agent
//!   (`/v1/credentials`), Google STS and impersonation, Entra ID;
//! - `metadata` (HTTP, as at 169.254.169.254): IMDSv2, the GKE metadata
//!   server, Azure IMDS;
//! - `ecr`, `gcp`, `acr` (HTTPS): a local registry behind each cloud's
//!   authentication; `plain` (HTTP): the same registry, only counted;
//! - `proxy`: an HTTP proxy that forwards nothing: it counts each request
//!   and `CONNECT` with its target and refuses it (the way to prove an
//!   upstream is never contacted: point `HTTPS_PROXY` here);
//! - `admin` (HTTP): `GET /stats` (every counter), `POST /down/SERVICE` and
//!   `POST /up/SERVICE` (an outage of one service).
//!
//! ServiceAccount tokens are checked against the API server's public keys
//! (ES256); the TLS certificate is made at start by a CA written out for
//! the clients to trust. Tests start it in process ([`start`]); the e2e
//! suite runs the `sigil-fakecloud` binary. Tests only: never a dependency
//! of sigil's own crates.
#![forbid(unsafe_code)]
#![allow(missing_docs, unreachable_pub)]

pub mod aws;
pub mod azure;
pub mod front;
pub mod google;
pub mod jwt;
pub mod state;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::{Context as _, Result};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State as Axum};
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::{any, get, post, put};
use base64::Engine as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::ServiceExt as _;

use front::Front;
pub use jwt::TokenIssuer;
use state::State;

/// How long what the fakes issue lives, in seconds.
#[derive(Debug, Clone)]
pub struct Lifetimes {
    /// Temporary AWS credentials (STS, Pod Identity, IMDS).
    pub aws_credentials: i64,
    /// ECR authorization tokens (12 h for real).
    pub ecr_token: i64,
    /// Google access tokens.
    pub google_token: i64,
    /// Entra ID tokens.
    pub entra_token: i64,
    /// ACR refresh tokens (3 h for real).
    pub acr_refresh: i64,
    /// Registry bearer tokens (GCP and ACR fronts).
    pub registry_token: i64,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Self {
            aws_credentials: 3600,
            ecr_token: 12 * 3600,
            google_token: 3600,
            entra_token: 3600,
            acr_refresh: 3 * 3600,
            registry_token: 300,
        }
    }
}

/// What the fakes trust and serve.
#[derive(Debug, Clone)]
pub struct Config {
    /// The address every listener binds.
    pub listen: IpAddr,
    /// Names and addresses the TLS certificate holds.
    pub tls_names: Vec<String>,
    /// The API server's ServiceAccount signing keys (PEM).
    pub service_account_keys: String,
    /// The tokens' issuer (`None`: any).
    pub issuer: Option<String>,
    /// ServiceAccounts (`system:serviceaccount:NS:NAME`) the role, the
    /// Pod Identity association, the federated credential and the pool's
    /// condition trust.
    pub subjects: Vec<String>,
    /// The role STS lets them assume.
    pub role_arn: String,
    /// The AWS account of that role.
    pub aws_account: String,
    /// Static AWS keys accepted by ECR (id, secret).
    pub static_aws_keys: Vec<(String, String)>,
    /// The workload identity pool provider's audience (Google STS).
    pub pool_audience: String,
    /// The gcloud user's OAuth client (ID, secret) and refresh token, as
    /// `gcloud auth application-default login` writes them.
    pub google_user: (String, String, String),
    /// The Entra application's client ID.
    pub azure_client_id: String,
    /// The Entra tenant.
    pub azure_tenant: String,
    /// The registry the fronts stand before (`http://127.0.0.1:PORT`).
    pub upstream: Option<String>,
    /// Lifetimes.
    pub lifetimes: Lifetimes,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: IpAddr::from([127, 0, 0, 1]),
            tls_names: vec!["127.0.0.1".into()],
            service_account_keys: String::new(),
            issuer: None,
            subjects: vec!["system:serviceaccount:sigil-system:sigil-webhook".into()],
            role_arn: "arn:aws:iam::123456789012:role/sigil".into(),
            aws_account: "123456789012".into(),
            static_aws_keys: Vec::new(),
            pool_audience: "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/sigil/providers/cluster".into(),
            google_user: (
                "sigil-fake.apps.googleusercontent.com".into(),
                "fake-client-secret".into(),
                "1//0fake-refresh-token".into(),
            ),
            azure_client_id: "00000000-0000-0000-0000-0000000c11e7".into(),
            azure_tenant: "00000000-0000-0000-0000-00000000a1a1".into(),
            upstream: None,
            lifetimes: Lifetimes::default(),
        }
    }
}

/// The running fakes.
pub struct Running {
    /// STS, ECR's API, Pod Identity, Google STS, Entra (HTTPS).
    pub api: SocketAddr,
    /// IMDSv2, GKE metadata, Azure IMDS (HTTP).
    pub metadata: SocketAddr,
    /// The ECR front (HTTPS).
    pub ecr: SocketAddr,
    /// The Artifact Registry front (HTTPS).
    pub gcp: SocketAddr,
    /// The ACR front (HTTPS).
    pub acr: SocketAddr,
    /// The counting front (HTTP).
    pub plain: SocketAddr,
    /// The counting proxy.
    pub proxy: SocketAddr,
    /// Stats and outages (HTTP).
    pub admin: SocketAddr,
    /// The CA that signed the TLS certificate (PEM).
    pub ca_pem: String,
    state: Arc<State>,
}

impl Running {
    /// The counter `key` (`sts.issued`, `front.ecr.proxied`, ...).
    pub fn count(&self, key: &str) -> u64 {
        self.state.counts().get(key).copied().unwrap_or(0)
    }

    /// Every counter.
    pub fn counts(&self) -> std::collections::BTreeMap<String, u64> {
        self.state.counts()
    }

    /// Switches `service` off (it answers 503) or on.
    pub fn set_down(&self, service: &str, down: bool) {
        self.state.set_down(service, down);
    }

    /// The listeners as `NAME=host:port` lines, for a shell to read.
    pub fn env_lines(&self) -> String {
        [
            ("FAKECLOUD_API", self.api),
            ("FAKECLOUD_METADATA", self.metadata),
            ("FAKECLOUD_ECR", self.ecr),
            ("FAKECLOUD_GCP", self.gcp),
            ("FAKECLOUD_ACR", self.acr),
            ("FAKECLOUD_PLAIN", self.plain),
            ("FAKECLOUD_PROXY", self.proxy),
            ("FAKECLOUD_ADMIN", self.admin),
        ]
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect()
    }
}

pub(crate) fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    (
        status,
        [("content-type", "application/json")],
        value.to_string(),
    )
        .into_response()
}

pub(crate) fn down(service: &str) -> Response<Body> {
    json(
        StatusCode::SERVICE_UNAVAILABLE,
        serde_json::json!({"error": "service_unavailable", "message": format!("{service} is down (switched off by the test)")}),
    )
}

pub(crate) fn rfc3339(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

pub(crate) fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn api_router(state: Arc<State>) -> Router {
    Router::new()
        .route("/", post(aws::post_root))
        .route("/v1/credentials", get(aws::pod_identity))
        .route("/v1/token", post(google::sts_token))
        .route("/token", post(google::oauth_token))
        .route(
            "/v1/projects/-/serviceAccounts/{account}",
            post(google::impersonate),
        )
        .route("/{tenant}/oauth2/v2.0/token", post(azure::entra_token))
        .with_state(state)
}

fn metadata_router(state: Arc<State>) -> Router {
    Router::new()
        .route("/latest/api/token", put(aws::imds_token))
        .route(
            "/latest/meta-data/iam/security-credentials/",
            get(aws::imds_credentials),
        )
        .route(
            "/latest/meta-data/iam/security-credentials/{role}",
            get(aws::imds_credentials),
        )
        .route(
            "/computeMetadata/v1/instance/service-accounts/default/token",
            get(google::metadata_token),
        )
        .route("/metadata/identity/oauth2/token", get(azure::imds_token))
        .with_state(state)
}

fn front_router(state: Arc<State>, front: Front, scheme: &'static str) -> Router {
    Router::new().fallback(any(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = state.clone();
            async move { front::serve(state, front, scheme, method, uri, headers, body).await }
        },
    ))
}

fn admin_router(state: Arc<State>) -> Router {
    Router::new()
        .route(
            "/stats",
            get(|Axum(s): Axum<Arc<State>>| async move {
                json(StatusCode::OK, serde_json::json!(s.counts()))
            }),
        )
        .route(
            "/down/{service}",
            post(
                |Axum(s): Axum<Arc<State>>, Path(service): Path<String>| async move {
                    s.set_down(&service, true);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/up/{service}",
            post(
                |Axum(s): Axum<Arc<State>>, Path(service): Path<String>| async move {
                    s.set_down(&service, false);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(state)
}

/// A CA and a serving certificate for `names` signed by it: (CA PEM, TLS config).
fn tls(names: &[String]) -> Result<(String, Arc<rustls::ServerConfig>)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sigil-fakecloud CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let key = rcgen::KeyPair::generate()?;
    let params = rcgen::CertificateParams::new(names.to_vec())?;
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer)?;
    let der_key = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| anyhow::anyhow!("key: {e}"))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], der_key)?;
    Ok((ca.pem(), Arc::new(config)))
}

/// The counting proxy: reads each request's head (at most 8 KiB), counts
/// `proxy.requests` and `proxy.target.<host:port>`, answers 403 and closes.
async fn serve_proxy(listener: TcpListener, state: Arc<State>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // Runs until the process (or the test's runtime) ends.
    loop {
        let Ok((mut tcp, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tokio::time::timeout(std::time::Duration::from_secs(5), tcp.read(&mut buf))
                    .await
                {
                    Ok(Ok(n)) if n > 0 => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
                    _ => break,
                }
            }
            let line = String::from_utf8_lossy(&head);
            let target = line.split_whitespace().nth(1).unwrap_or("?").to_string();
            state.count("proxy.requests");
            state.count(&format!("proxy.target.{target}"));
            let _ = tcp
                .write_all(
                    b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
        });
    }
}

async fn serve_plain(listener: TcpListener, router: Router) {
    let _ = axum::serve(listener, router).await;
}

async fn serve_tls(listener: TcpListener, router: Router, config: Arc<rustls::ServerConfig>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    // Runs until the process (or the test's runtime) ends.
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(
                move |request: hyper::Request<hyper::body::Incoming>| {
                    let router = router.clone();
                    async move { router.oneshot(request.map(Body::new)).await }
                },
            );
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

/// Starts every fake on `config.listen` (ports chosen by the system).
pub async fn start(config: Config) -> Result<Running> {
    // The registry fronts' HTTP client (reqwest without a provider of its
    // own, as in the whole workspace) needs a process-wide rustls provider,
    // or it panics on every request it proxies. Tests that start the fakes
    // in process had one installed by sigil's registry client; the
    // `sigil-fakecloud` binary has only this.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let keys = jwt::keys_from_pem(&config.service_account_keys)
        .map_err(|e| anyhow::anyhow!("the ServiceAccount keys: {e}"))?;
    let (ca_pem, tls_config) = tls(&config.tls_names).context("making the TLS certificate")?;
    let listen = config.listen;
    let state = Arc::new(State::new(config, keys));
    let bind = || async move { TcpListener::bind((listen, 0)).await };
    let mut addrs = Vec::new();
    for (router, tls) in [
        (api_router(state.clone()), true),
        (metadata_router(state.clone()), false),
        (front_router(state.clone(), Front::Ecr, "https"), true),
        (front_router(state.clone(), Front::Gcp, "https"), true),
        (front_router(state.clone(), Front::Acr, "https"), true),
        (front_router(state.clone(), Front::Plain, "http"), false),
        (admin_router(state.clone()), false),
    ] {
        let listener = bind().await.context("binding a listener")?;
        addrs.push(listener.local_addr()?);
        if tls {
            tokio::spawn(serve_tls(listener, router, tls_config.clone()));
        } else {
            tokio::spawn(serve_plain(listener, router));
        }
    }
    let [api, metadata, ecr, gcp, acr, plain, admin] = addrs[..] else {
        anyhow::bail!("not every listener was bound");
    };
    let proxy_listener = bind().await.context("binding the proxy")?;
    let proxy = proxy_listener.local_addr()?;
    tokio::spawn(serve_proxy(proxy_listener, state.clone()));
    Ok(Running {
        api,
        metadata,
        ecr,
        gcp,
        acr,
        plain,
        proxy,
        admin,
        ca_pem,
        state,
    })
}
