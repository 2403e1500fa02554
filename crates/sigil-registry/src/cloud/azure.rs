//! Azure Container Registry: an Entra ID token for the registry audience
//! (`https://containerregistry.azure.net/.default`), exchanged at the
//! registry's `/oauth2/exchange` for an ACR refresh token, which the
//! registry's own token flow turns into an access token (the refresh token
//! is the password of the user `00000000-0000-0000-0000-000000000000`).
//! The Entra token comes from:
//!
//! 1. Azure workload identity: `AZURE_CLIENT_ID`, `AZURE_TENANT_ID` and the
//!    federated token file `AZURE_FEDERATED_TOKEN_FILE` (all set by the
//!    workload identity webhook), sent as the client assertion to
//!    `AZURE_AUTHORITY_HOST` (default `https://login.microsoftonline.com/`);
//! 2. a managed identity through IMDS (`Metadata: true`; the user-assigned
//!    one of `AZURE_CLIENT_ID` when set), at
//!    `AZURE_POD_IDENTITY_AUTHORITY_HOST` or 169.254.169.254, tried only on
//!    Azure or with that variable set.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use reqwest::Method;
use serde_json::Value;

use super::cache::{Timed, TokenCache};
use super::hosts::{ExtraHost, is_acr};
use super::http::field;
use super::{
    CloudError, Context, ErrorKind, Provider, ProviderId, identity_key, jwt_expiry, life_until,
};
use crate::auth::Credential;

const P: ProviderId = ProviderId::Acr;
/// The scope of the Entra token ACR's exchange accepts.
pub const ACR_SCOPE: &str = "https://containerregistry.azure.net/.default";
const ACR_RESOURCE: &str = "https://containerregistry.azure.net/";
/// The user an ACR refresh token is the password of.
pub const REFRESH_USER: &str = "00000000-0000-0000-0000-000000000000";
/// ACR refresh tokens live three hours; used when the token does not say.
const REFRESH_LIFE: Duration = Duration::from_secs(3 * 3600);
/// How long one request to IMDS may take.
const IMDS_TIMEOUT: Duration = Duration::from_secs(3);

/// Where the Entra token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Azure workload identity.
    WorkloadIdentity {
        /// The application (client) ID.
        client_id: String,
        /// The tenant.
        tenant: String,
        /// The federated token file.
        file: String,
    },
    /// A managed identity through IMDS.
    ManagedIdentity {
        /// IMDS's base URL.
        endpoint: String,
        /// The user-assigned identity's client ID, if any.
        client_id: Option<String>,
    },
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Self::WorkloadIdentity { client_id, .. } => format!(
                "Azure workload identity: client {client_id} (AZURE_CLIENT_ID, AZURE_FEDERATED_TOKEN_FILE)"
            ),
            Self::ManagedIdentity { client_id, .. } => match client_id {
                Some(c) => format!("the managed identity {c} through IMDS"),
                None => "the system-assigned managed identity through IMDS".into(),
            },
        }
    }
}

/// The ACR provider.
#[derive(Debug)]
pub struct Acr {
    context: Arc<Context>,
    extra: Vec<ExtraHost>,
    entra: TokenCache<String>,
}

impl Acr {
    /// ACR for its own hosts and `extra`.
    pub fn new(context: Arc<Context>, extra: Vec<ExtraHost>) -> Self {
        let entra = TokenCache::new(P, context.exchange_timeout);
        Self {
            context,
            extra,
            entra,
        }
    }

    /// The configured source, or why there is none.
    pub fn token_source(&self) -> Result<Source, CloudError> {
        let env = &self.context.env;
        let client_id = env.get("AZURE_CLIENT_ID");
        if let Some(file) = env.get("AZURE_FEDERATED_TOKEN_FILE") {
            let (Some(client_id), Some(tenant)) = (client_id, env.get("AZURE_TENANT_ID")) else {
                return Err(CloudError::config(
                    P,
                    "Entra ID token from workload identity",
                    "AZURE_FEDERATED_TOKEN_FILE is set but AZURE_CLIENT_ID or AZURE_TENANT_ID is not",
                    "label sigil's pods azure.workload.identity/use: \"true\" and annotate its \
                     ServiceAccount with azure.workload.identity/client-id",
                ));
            };
            return Ok(Source::WorkloadIdentity {
                client_id: client_id.to_string(),
                tenant: tenant.to_string(),
                file: file.to_string(),
            });
        }
        let endpoint = env.get("AZURE_POD_IDENTITY_AUTHORITY_HOST");
        if endpoint.is_some() || super::firmware_says("microsoft") {
            return Ok(Source::ManagedIdentity {
                endpoint: endpoint
                    .unwrap_or("http://169.254.169.254")
                    .trim_end_matches('/')
                    .to_string(),
                client_id: client_id.map(str::to_string),
            });
        }
        Err(CloudError::config(
            P,
            "Entra ID token",
            "no source is configured: no Azure workload identity (AZURE_FEDERATED_TOKEN_FILE) \
             and not on Azure",
            "on AKS enable workload identity, label sigil's pods azure.workload.identity/use: \
             \"true\" and annotate its ServiceAccount with azure.workload.identity/client-id; \
             or use a pull secret",
        ))
    }

    async fn entra_token(&self) -> Result<String, CloudError> {
        let source = self.token_source()?;
        let context = self.context.clone();
        self.entra
            .get("entra", self.context.exchange_timeout, move || {
                async move {
                    match &source {
                        Source::WorkloadIdentity {
                            client_id,
                            tenant,
                            file,
                        } => workload_identity(&context, client_id, tenant, file).await,
                        Source::ManagedIdentity {
                            endpoint,
                            client_id,
                        } => managed_identity(&context, endpoint, client_id.as_deref()).await,
                    }
                }
                .boxed()
            })
            .await
    }

    /// Exchanges the Entra token for `host`'s refresh token.
    async fn refresh_token(&self, host: &str) -> Result<Timed<Credential>, CloudError> {
        let entra = self.entra_token().await?;
        let step = "ACR token exchange (/oauth2/exchange)";
        let url = format!("{}/oauth2/exchange", self.context.registry_base(host));
        let tenant = match self.token_source()? {
            Source::WorkloadIdentity { tenant, .. } => Some(tenant),
            Source::ManagedIdentity { .. } => None,
        };
        let mut pairs = vec![
            ("grant_type", "access_token"),
            ("service", host),
            ("access_token", entra.as_str()),
        ];
        if let Some(t) = &tenant {
            pairs.push(("tenant", t.as_str()));
        }
        let fix = format!(
            "assign the identity the AcrPull role on {host} (and check that the registry \
             allows Entra authentication)"
        );
        let answer = self
            .context
            .http
            .post_form(P, step, &url, &pairs, &fix)
            .await?;
        let v = answer.json(P, step, &url)?;
        let refresh = field(P, step, &url, &v, "refresh_token")?.to_string();
        let life = match jwt_expiry(&refresh) {
            Some(exp) => life_until(exp).ok_or_else(|| {
                CloudError::new(
                    P,
                    ErrorKind::Malformed,
                    step,
                    format!("{url} answered with a refresh token that has already expired"),
                    "check this machine's clock",
                )
            })?,
            None => REFRESH_LIFE,
        };
        Ok(Timed::new(
            Credential::Basic {
                username: REFRESH_USER.into(),
                password: refresh,
            },
            life,
        ))
    }
}

impl Provider for Acr {
    fn id(&self) -> ProviderId {
        P
    }

    fn serves(&self, host: &str) -> Option<String> {
        ExtraHost::served(host, is_acr, &self.extra)
            .then(|| identity_key(self.token_source().ok().map(|s| s.describe()), host))
    }

    fn fetch(
        self: Arc<Self>,
        host: String,
    ) -> BoxFuture<'static, Result<Timed<Credential>, CloudError>> {
        async move { self.refresh_token(&host).await }.boxed()
    }

    fn source(&self) -> String {
        match self.token_source() {
            Ok(s) => s.describe(),
            Err(e) => format!("none ({})", e.reason),
        }
    }

    fn refused_fix(&self) -> &'static str {
        "ACR refused the token: assign the identity the AcrPull role on the registry"
    }
}

fn entra_answer(step: &str, url: &str, v: &Value) -> Result<Timed<String>, CloudError> {
    let token = field(P, step, url, v, "access_token")?.to_string();
    let seconds = v
        .get("expires_in")
        .and_then(|e| {
            e.as_u64()
                .or_else(|| e.as_str().and_then(|s| s.parse().ok()))
        })
        .filter(|s| *s > 0)
        .ok_or_else(|| {
            CloudError::new(
                P,
                ErrorKind::Malformed,
                step,
                format!("{url} answered without a positive expires_in"),
                "check the endpoint",
            )
        })?;
    Ok(Timed::new(token, Duration::from_secs(seconds)))
}

async fn workload_identity(
    context: &Context,
    client_id: &str,
    tenant: &str,
    file: &str,
) -> Result<Timed<String>, CloudError> {
    let step = "Entra ID token from workload identity";
    if !tenant
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    {
        return Err(CloudError::config(
            P,
            step,
            format!("AZURE_TENANT_ID `{tenant}` is not a tenant ID or domain"),
            "fix AZURE_TENANT_ID",
        ));
    }
    let assertion = context
        .env
        .read_file("AZURE_FEDERATED_TOKEN_FILE", file)
        .map_err(|e| {
            CloudError::config(
                P,
                step,
                e,
                "check that the workload identity webhook mounted the token (pod label \
                 azure.workload.identity/use: \"true\")",
            )
        })?;
    let authority = context
        .env
        .get("AZURE_AUTHORITY_HOST")
        .unwrap_or("https://login.microsoftonline.com/")
        .trim_end_matches('/');
    let url = format!("{authority}/{tenant}/oauth2/v2.0/token");
    let fix = format!(
        "check the federated identity credential of application {client_id}: issuer = the \
         cluster's OIDC issuer, subject = system:serviceaccount:<sigil's namespace>:<its \
         ServiceAccount>, audience api://AzureADTokenExchange"
    );
    let pairs = [
        ("grant_type", "client_credentials"),
        ("client_id", client_id),
        ("scope", ACR_SCOPE),
        (
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        ),
        ("client_assertion", &assertion),
    ];
    let answer = context.http.post_form(P, step, &url, &pairs, &fix).await?;
    entra_answer(step, &url, &answer.json(P, step, &url)?)
}

async fn managed_identity(
    context: &Context,
    endpoint: &str,
    client_id: Option<&str>,
) -> Result<Timed<String>, CloudError> {
    let step = "Entra ID token from the managed identity (IMDS)";
    let fix = "assign a managed identity to the node pool (the kubelet identity) and give it \
               AcrPull; better, use workload identity for sigil alone";
    let url = format!("{endpoint}/metadata/identity/oauth2/token");
    let mut query = vec![("api-version", "2018-02-01"), ("resource", ACR_RESOURCE)];
    if let Some(c) = client_id {
        query.push(("client_id", c));
    }
    let answer = context
        .http
        .fetch(
            P,
            step,
            &url,
            context
                .http
                .request(Method::GET, &url)
                .timeout(IMDS_TIMEOUT)
                .query(&query)
                .header("metadata", "true"),
            fix,
        )
        .await?;
    entra_answer(step, &url, &answer.json(P, step, &url)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entra_answers_need_a_token_and_a_positive_life() {
        let ok =
            serde_json::json!({"access_token": "t", "expires_in": "3599", "token_type": "Bearer"});
        assert_eq!(entra_answer("s", "u", &ok).unwrap().value, "t");
        let zero = serde_json::json!({"access_token": "t", "expires_in": 0});
        assert!(entra_answer("s", "u", &zero).is_err());
        let none = serde_json::json!({"expires_in": 10});
        assert!(entra_answer("s", "u", &none).is_err());
    }
}
