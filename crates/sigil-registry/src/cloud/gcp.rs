//! Google Artifact Registry and Container Registry: a Google access token,
//! sent as the password of `oauth2accesstoken`. The token comes from the
//! first source configured, in the order of Google's application-default
//! credentials:
//!
//! 1. `GOOGLE_APPLICATION_CREDENTIALS`: workload identity federation
//!    (`type: external_account`, a `credential_source` file or URL, for
//!    clusters outside Google Cloud; the STS token exchange, then
//!    `service_account_impersonation_url` when set) or a user's refresh
//!    token (`type: authorized_user`);
//! 2. on a laptop, gcloud's application-default credentials file
//!    (`$CLOUDSDK_CONFIG` or `~/.config/gcloud`);
//! 3. the metadata server (GKE workload identity, or the node's service
//!    account), at `GCE_METADATA_HOST` or 169.254.169.254, asked with
//!    `Metadata-Flavor: Google` and believed only when it answers with it;
//!    tried only on Google Cloud or with `GCE_METADATA_HOST` set.
//!
//! Service-account key files are refused: on GKE use workload identity, and
//! elsewhere workload identity federation, so that no long-lived key sits in
//! the cluster.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use reqwest::Method;
use serde_json::Value;
use sigil_cloud::GOOGLE_CLOUD_PLATFORM as CLOUD_PLATFORM;

use super::cache::{Timed, TokenCache};
use super::hosts::{ExtraHost, is_google};
use super::http::field;
use super::{
    CloudError, Context, ErrorKind, Provider, ProviderId, identity_key, life_until_rfc3339,
};
use crate::auth::Credential;

const P: ProviderId = ProviderId::Gcp;
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// How long one request to the metadata server may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(3);
/// The registry user an access token is the password of.
pub const USER: &str = "oauth2accesstoken";

/// Where the access token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A credentials file (`GOOGLE_APPLICATION_CREDENTIALS` or gcloud's).
    File {
        /// Which setting named it.
        setting: &'static str,
        /// Its path.
        path: String,
    },
    /// The metadata server.
    Metadata {
        /// `host[:port]`.
        host: String,
    },
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Self::File { setting, path } => format!("credentials file {path} ({setting})"),
            Self::Metadata { host } => {
                format!("the metadata server at {host} (GKE workload identity)")
            }
        }
    }
}

/// The Google provider.
#[derive(Debug)]
pub struct Google {
    context: Arc<Context>,
    extra: Vec<ExtraHost>,
    tokens: TokenCache<String>,
}

impl Google {
    /// Google for its own hosts and `extra`.
    pub fn new(context: Arc<Context>, extra: Vec<ExtraHost>) -> Self {
        let tokens = TokenCache::new(P, context.exchange_timeout);
        Self {
            context,
            extra,
            tokens,
        }
    }

    /// The configured source, or why there is none.
    pub fn token_source(&self) -> Result<Source, CloudError> {
        let env = &self.context.env;
        if let Some(path) = env.get("GOOGLE_APPLICATION_CREDENTIALS") {
            return Ok(Source::File {
                setting: "GOOGLE_APPLICATION_CREDENTIALS",
                path: path.to_string(),
            });
        }
        if self.context.laptop {
            let dir = env
                .get("CLOUDSDK_CONFIG")
                .map(str::to_string)
                .or_else(|| env.get("HOME").map(|h| format!("{h}/.config/gcloud")));
            if let Some(dir) = dir {
                let path = format!("{dir}/application_default_credentials.json");
                if std::path::Path::new(&path).exists() {
                    return Ok(Source::File {
                        setting: "gcloud auth application-default login",
                        path,
                    });
                }
            }
        }
        if let Some(host) = env.get("GCE_METADATA_HOST") {
            return Ok(Source::Metadata {
                host: host.to_string(),
            });
        }
        if super::firmware_says("google") {
            return Ok(Source::Metadata {
                host: "169.254.169.254".into(),
            });
        }
        Err(CloudError::config(
            P,
            "Google credentials",
            "no source is configured: no GOOGLE_APPLICATION_CREDENTIALS, no GCE_METADATA_HOST, \
             and not on Google Cloud",
            "on GKE enable workload identity and annotate sigil's ServiceAccount with \
             iam.gke.io/gcp-service-account; elsewhere mount a workload identity federation \
             credential file and set GOOGLE_APPLICATION_CREDENTIALS; or use a pull secret",
        ))
    }

    async fn access_token(self: Arc<Self>) -> Result<String, CloudError> {
        let source = self.token_source()?;
        let me = self.clone();
        self.tokens
            .get("token", self.context.exchange_timeout, move || {
                async move {
                    match &source {
                        Source::Metadata { host } => metadata(&me.context, host).await,
                        Source::File { setting, path } => {
                            credentials_file(&me.context, setting, path).await
                        }
                    }
                }
                .boxed()
            })
            .await
    }
}

impl Provider for Google {
    fn id(&self) -> ProviderId {
        P
    }

    fn serves(&self, host: &str) -> Option<String> {
        ExtraHost::served(host, is_google, &self.extra)
            .then(|| identity_key(self.token_source().ok().map(|s| s.describe()), host))
    }

    fn fetch(
        self: Arc<Self>,
        _host: String,
    ) -> BoxFuture<'static, Result<Timed<Credential>, CloudError>> {
        async move {
            let token = self.clone().access_token().await?;
            // The registry credential lives as long as the access token.
            let life = self.tokens.held_life("token").unwrap_or(Duration::ZERO);
            Ok(Timed::new(
                Credential::Basic {
                    username: USER.into(),
                    password: token,
                },
                life,
            ))
        }
        .boxed()
    }

    fn source(&self) -> String {
        match self.token_source() {
            Ok(s) => s.describe(),
            Err(e) => format!("none ({})", e.reason),
        }
    }

    fn refused_fix(&self) -> &'static str {
        "the registry refused the Google token: grant the Google service account \
         roles/artifactregistry.reader on the repository (roles/storage.objectViewer on the \
         bucket for Container Registry)"
    }
}

/// The life of an OAuth answer's `expires_in` (a number, or a string).
fn expires_in(v: &Value) -> Option<Duration> {
    let e = v.get("expires_in")?;
    e.as_u64()
        .or_else(|| e.as_str().and_then(|s| s.trim().parse().ok()))
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

async fn metadata(context: &Context, host: &str) -> Result<Timed<String>, CloudError> {
    let step = "Google access token from the metadata server";
    let fix = "on GKE enable workload identity on the node pool and annotate sigil's \
               ServiceAccount with iam.gke.io/gcp-service-account (and bind \
               roles/iam.workloadIdentityUser); GCE_METADATA_HOST, if set, must be the metadata \
               server";
    let url = format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/token");
    let answer = context
        .http
        .fetch(
            P,
            step,
            &url,
            context
                .http
                .request(Method::GET, &url)
                .timeout(METADATA_TIMEOUT)
                .header("metadata-flavor", "Google"),
            fix,
        )
        .await?;
    let flavor = answer
        .headers
        .get("metadata-flavor")
        .and_then(|v| v.to_str().ok());
    if flavor != Some("Google") {
        return Err(CloudError::new(
            P,
            ErrorKind::Malformed,
            step,
            format!(
                "{url} answered without `Metadata-Flavor: Google`, so it is not Google's metadata server"
            ),
            fix,
        ));
    }
    let v = answer.json(P, step, &url)?;
    token_answer(step, &url, &v, "access_token")
}

fn token_answer(step: &str, url: &str, v: &Value, name: &str) -> Result<Timed<String>, CloudError> {
    let token = field(P, step, url, v, name)?.to_string();
    let life = expires_in(v).ok_or_else(|| {
        CloudError::new(
            P,
            ErrorKind::Malformed,
            step,
            format!("{url} answered without a positive expires_in"),
            "check the endpoint",
        )
    })?;
    Ok(Timed::new(token, life))
}

async fn credentials_file(
    context: &Context,
    setting: &'static str,
    path: &str,
) -> Result<Timed<String>, CloudError> {
    let step = "Google access token from the credentials file";
    let text = context.env.read_file(setting, path).map_err(|e| {
        CloudError::config(P, step, e, "check that the credentials file is mounted")
    })?;
    let creds: Value = serde_json::from_str(&text).map_err(|e| {
        CloudError::config(P, step, format!("{path} is not JSON: {e}"), "fix the file")
    })?;
    let text_field = |name: &str| -> Result<&str, CloudError> {
        creds
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                CloudError::config(
                    P,
                    step,
                    format!("{path} has no string field `{name}`"),
                    "regenerate it with `gcloud iam workload-identity-pools create-cred-config`",
                )
            })
    };
    match creds.get("type").and_then(Value::as_str) {
        Some("external_account") => {
            let subject = subject_token(context, &creds, path).await?;
            let token_url = text_field("token_url")?;
            let step = "Google workload identity federation (STS token exchange)";
            let fix = "check the workload identity pool provider's audience and attribute \
                       conditions against sigil's ServiceAccount token";
            let pairs = sigil_cloud::google_sts_form(
                text_field("audience")?,
                &subject,
                text_field("subject_token_type")?,
            );
            let answer = context
                .http
                .post_form(P, step, token_url, &pairs, fix)
                .await?;
            let federated = token_answer(
                step,
                token_url,
                &answer.json(P, step, token_url)?,
                "access_token",
            )?;
            match creds
                .get("service_account_impersonation_url")
                .and_then(Value::as_str)
            {
                None => Ok(federated),
                Some(url) => impersonate(context, url, &federated.value).await,
            }
        }
        Some("authorized_user") => {
            let step = "Google access token from a user's refresh token";
            let url = creds
                .get("token_uri")
                .and_then(Value::as_str)
                .unwrap_or(DEFAULT_TOKEN_URI);
            let fix = "run `gcloud auth application-default login` again";
            let pairs = [
                ("grant_type", "refresh_token"),
                ("client_id", text_field("client_id")?),
                ("client_secret", text_field("client_secret")?),
                ("refresh_token", text_field("refresh_token")?),
            ];
            let answer = context.http.post_form(P, step, url, &pairs, fix).await?;
            token_answer(step, url, &answer.json(P, step, url)?, "access_token")
        }
        other => Err(CloudError::config(
            P,
            step,
            format!(
                "{path} has type `{}`; sigil reads external_account (workload identity \
                 federation) and authorized_user files",
                other.unwrap_or("(none)")
            ),
            "service-account keys are not used: on GKE use workload identity, elsewhere \
             workload identity federation",
        )),
    }
}

/// The subject token of an `external_account` file's `credential_source`:
/// a file (EKS, AKS or any cluster's projected ServiceAccount token) or a
/// URL, as text or as a field of a JSON document.
async fn subject_token(context: &Context, creds: &Value, path: &str) -> Result<String, CloudError> {
    let step = "Google workload identity federation (reading the subject token)";
    let source = creds.get("credential_source").unwrap_or(&Value::Null);
    let raw = if let Some(file) = source.get("file").and_then(Value::as_str) {
        context
            .env
            .read_file("credential_source.file", file)
            .map_err(|e| {
                CloudError::config(P, step, e, "mount the projected ServiceAccount token there")
            })?
    } else if let Some(url) = source.get("url").and_then(Value::as_str) {
        let mut request = context.http.request(Method::GET, url);
        if let Some(headers) = source.get("headers").and_then(Value::as_object) {
            for (k, v) in headers {
                if let Some(v) = v.as_str() {
                    request = request.header(k.as_str(), v);
                }
            }
        }
        let answer = context
            .http
            .fetch(P, step, url, request, "check credential_source.url")
            .await?;
        String::from_utf8_lossy(&answer.body).trim().to_string()
    } else {
        return Err(CloudError::config(
            P,
            step,
            format!(
                "{path}: credential_source has neither `file` nor `url` (executable and AWS sources are not supported)"
            ),
            "use a file source with the projected ServiceAccount token",
        ));
    };
    sigil_cloud::subject_token(&raw, source.get("format")).map_err(|e| {
        CloudError::config(
            P,
            step,
            e,
            "check the projected token volume and credential_source.format",
        )
    })
}

async fn impersonate(
    context: &Context,
    url: &str,
    federated: &str,
) -> Result<Timed<String>, CloudError> {
    let step = "Google service account impersonation (generateAccessToken)";
    let fix = "grant the federated principal roles/iam.workloadIdentityUser on the service account";
    let body = serde_json::json!({"scope": [CLOUD_PLATFORM], "lifetime": "3600s"}).to_string();
    let answer = context
        .http
        .fetch(
            P,
            step,
            url,
            context
                .http
                .request(Method::POST, url)
                .bearer_auth(federated)
                .header("content-type", "application/json")
                .body(body),
            fix,
        )
        .await?;
    let v = answer.json(P, step, url)?;
    let token = field(P, step, url, &v, "accessToken")?.to_string();
    let life = v
        .get("expireTime")
        .and_then(Value::as_str)
        .and_then(life_until_rfc3339)
        .ok_or_else(|| {
            CloudError::new(
                P,
                ErrorKind::Malformed,
                step,
                format!("{url} answered without a future expireTime"),
                "check the endpoint and this machine's clock",
            )
        })?;
    Ok(Timed::new(token, life))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_in_is_a_positive_number_or_numeric_string() {
        let e = |v: Value| expires_in(&v);
        assert_eq!(
            e(serde_json::json!({"expires_in": 3599})),
            Some(Duration::from_secs(3599))
        );
        assert_eq!(
            e(serde_json::json!({"expires_in": "60"})),
            Some(Duration::from_secs(60))
        );
        assert_eq!(e(serde_json::json!({"expires_in": 0})), None);
        assert_eq!(e(serde_json::json!({"expires_in": -5})), None);
        assert_eq!(e(serde_json::json!({})), None);
    }
}
