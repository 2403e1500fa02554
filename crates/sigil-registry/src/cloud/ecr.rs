//! Amazon ECR: the registry's own hosts (every private form, see
//! [`super::hosts::ecr_registry`]; ECR Public when AWS credentials are
//! configured, as its images are public anyway) and the hosts an admin adds,
//! with a SigV4-signed `GetAuthorizationToken` (service `ecr`, target
//! `AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken`; ECR Public:
//! `ecr-public` in us-east-1, `SpencerFrontendService.GetAuthorizationToken`)
//! at `AWS_ENDPOINT_URL_ECR` (`AWS_ENDPOINT_URL_ECR_PUBLIC`),
//! `AWS_ENDPOINT_URL`, else the region's endpoint. The token is base64 of
//! `AWS:<password>` and lives 12 hours.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use reqwest::Method;
use serde_json::Value;
use sigil_cloud::sigv4;

use super::aws::AwsCredentials;
use super::cache::Timed;
use super::hosts::{EcrRegistry, ExtraHost, ecr_registry, is_ecr_public};
use super::http::field;
use super::{CloudError, Context, ErrorKind, Provider, ProviderId, identity_key, life_until};
use crate::auth::Credential;

const P: ProviderId = ProviderId::Ecr;

/// Which ECR API a host's token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A private registry named by its host.
    Private(EcrRegistry),
    /// ECR Public.
    Public,
    /// A host the admin gave ECR: the default registry of the credentials'
    /// account, in `AWS_REGION`.
    Extra,
}

/// The ECR provider.
#[derive(Debug)]
pub struct Ecr {
    context: Arc<Context>,
    aws: Arc<AwsCredentials>,
    extra: Vec<ExtraHost>,
}

impl Ecr {
    /// ECR for its own hosts and `extra`.
    pub fn new(context: Arc<Context>, aws: Arc<AwsCredentials>, extra: Vec<ExtraHost>) -> Self {
        Self {
            context,
            aws,
            extra,
        }
    }

    fn target(&self, host: &str) -> Option<Target> {
        if let Some(r) = ecr_registry(host) {
            return Some(Target::Private(r));
        }
        if self.extra.iter().any(|e| e.matches(host)) {
            return Some(Target::Extra);
        }
        // Anonymous pulls work on ECR Public; credentials only raise its
        // rate limit, so they are used when there are some.
        (is_ecr_public(host) && self.aws.source().is_ok()).then_some(Target::Public)
    }
}

/// The region's ECR API endpoint for `r`.
fn regional_endpoint(r: &EcrRegistry) -> String {
    let region = &r.region;
    match (r.fips, r.domain.as_str()) {
        (_, "on.aws") => format!(
            "https://ecr{}.{region}.api.aws",
            if r.fips { "-fips" } else { "" }
        ),
        (true, domain) => format!("https://ecr-fips.{region}.{domain}"),
        (false, domain) => format!("https://api.ecr.{region}.{domain}"),
    }
}

impl Provider for Ecr {
    fn id(&self) -> ProviderId {
        P
    }

    fn serves(&self, host: &str) -> Option<String> {
        self.target(host)?;
        Some(identity_key(
            self.aws.source().ok().map(|s| s.describe()),
            host,
        ))
    }

    fn fetch(
        self: Arc<Self>,
        host: String,
    ) -> BoxFuture<'static, Result<Timed<Credential>, CloudError>> {
        async move {
            let target = self.target(&host).ok_or_else(|| {
                CloudError::config(
                    P,
                    "choosing the registry",
                    format!("{host} is not ECR"),
                    "report this as a bug",
                )
            })?;
            self.token(&target).await
        }
        .boxed()
    }

    fn source(&self) -> String {
        match self.aws.source() {
            Ok(s) => s.describe(),
            Err(e) => format!("none ({})", e.reason),
        }
    }

    fn refused_fix(&self) -> &'static str {
        "ECR refused the token: check that the IAM role allows ecr:BatchGetImage and \
         ecr:GetDownloadUrlForLayer on the repository (and that a repository policy in another \
         account allows it)"
    }
}

impl Ecr {
    async fn token(&self, target: &Target) -> Result<Timed<Credential>, CloudError> {
        let env = &self.context.env;
        let step = "ECR GetAuthorizationToken";
        let env_region = env.first(&["AWS_REGION", "AWS_DEFAULT_REGION"]);
        let (region, service, api_target, override_vars, default_endpoint, body) = match target {
            Target::Private(r) => (
                r.region.clone(),
                "ecr",
                "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken",
                ["AWS_ENDPOINT_URL_ECR", "AWS_ENDPOINT_URL"],
                regional_endpoint(r),
                serde_json::json!({"registryIds": [r.account]}).to_string(),
            ),
            Target::Public => (
                "us-east-1".to_string(),
                "ecr-public",
                "SpencerFrontendService.GetAuthorizationToken",
                ["AWS_ENDPOINT_URL_ECR_PUBLIC", "AWS_ENDPOINT_URL"],
                "https://api.ecr-public.us-east-1.amazonaws.com".to_string(),
                "{}".to_string(),
            ),
            Target::Extra => {
                let region = env_region.ok_or_else(|| {
                    CloudError::config(
                        P,
                        step,
                        "the registry's region is not in its name and AWS_REGION is not set",
                        "set AWS_REGION (webhook.env) to the registry's region",
                    )
                })?;
                (
                    region.to_string(),
                    "ecr",
                    "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken",
                    ["AWS_ENDPOINT_URL_ECR", "AWS_ENDPOINT_URL"],
                    format!("https://api.ecr.{region}.amazonaws.com"),
                    "{}".to_string(),
                )
            }
        };
        let credentials = self.aws.get(&region, self.context.exchange_timeout).await?;
        let url = env
            .first(&override_vars)
            .map(|u| u.trim_end_matches('/').to_string())
            .unwrap_or(default_endpoint);
        let url = format!("{url}/");
        let host = host_header(&url).ok_or_else(|| {
            CloudError::config(
                P,
                step,
                format!("the ECR endpoint `{url}` is not an http(s) URL with a host"),
                "fix AWS_ENDPOINT_URL_ECR / AWS_ENDPOINT_URL",
            )
        })?;
        let date = sigv4::amz_date(time::OffsetDateTime::now_utc());
        let headers = sigv4::json_request_headers(
            &credentials,
            &region,
            service,
            api_target,
            &host,
            body.as_bytes(),
            &date,
        );
        let mut request = self.context.http.request(Method::POST, &url).body(body);
        for (name, value) in &headers {
            request = request.header(*name, value);
        }
        let fix = format!(
            "check that sigil's IAM role ({}) allows ecr:GetAuthorizationToken (in region {region})",
            self.aws.source().map(|s| s.describe()).unwrap_or_default()
        );
        let answer = self
            .context
            .http
            .fetch(P, step, &url, request, &fix)
            .await?;
        parse_authorization(step, &url, &answer.json(P, step, &url)?)
    }
}

/// `host[:port]` of `url`, as the client sends it in `Host`.
fn host_header(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "https" | "http") {
        return None;
    }
    let host = parsed.host_str()?;
    Some(match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// The credential in a `GetAuthorizationToken` answer: `authorizationData`
/// is a list (ECR) or one object (ECR Public).
fn parse_authorization(step: &str, url: &str, v: &Value) -> Result<Timed<Credential>, CloudError> {
    let malformed = |reason: String| {
        CloudError::new(
            P,
            ErrorKind::Malformed,
            step,
            format!("{url}: {reason}"),
            "check that AWS_ENDPOINT_URL_ECR, if set, is ECR's API",
        )
    };
    let data = match v.get("authorizationData") {
        Some(Value::Array(list)) => list.first(),
        Some(one @ Value::Object(_)) => Some(one),
        _ => None,
    }
    .ok_or_else(|| malformed("no authorizationData in the answer".into()))?;
    let encoded = field(P, step, url, data, "authorizationToken")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| malformed("authorizationToken is not base64 of text".into()))?;
    let (username, password) = decoded
        .split_once(':')
        .filter(|(u, p)| !u.is_empty() && !p.is_empty())
        .ok_or_else(|| malformed("authorizationToken is not user:password".into()))?;
    // A JSON number of Unix seconds, possibly fractional.
    let expires_at = data
        .get("expiresAt")
        .and_then(Value::as_f64)
        .ok_or_else(|| malformed("no expiresAt in authorizationData".into()))?;
    let life = life_until(expires_at as i64).ok_or_else(|| {
        malformed(format!(
            "the token expires at {expires_at}, which is already past; check this machine's clock"
        ))
    })?;
    Ok(Timed::new(
        Credential::Basic {
            username: username.to_string(),
            password: password.to_string(),
        },
        life.min(Duration::from_secs(12 * 3600)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_host_form_has_its_api_endpoint() {
        let e = |h: &str| regional_endpoint(&ecr_registry(h).unwrap());
        assert_eq!(
            e("123456789012.dkr.ecr.us-east-1.amazonaws.com"),
            "https://api.ecr.us-east-1.amazonaws.com"
        );
        assert_eq!(
            e("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com"),
            "https://ecr-fips.us-gov-west-1.amazonaws.com"
        );
        assert_eq!(
            e("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn"),
            "https://api.ecr.cn-north-1.amazonaws.com.cn"
        );
        assert_eq!(
            e("123456789012.dkr-ecr.eu-west-1.on.aws"),
            "https://ecr.eu-west-1.api.aws"
        );
        assert_eq!(
            e("123456789012.dkr-ecr-fips.us-east-1.on.aws"),
            "https://ecr-fips.us-east-1.api.aws"
        );
    }

    #[test]
    fn authorization_answers_of_ecr_and_ecr_public_give_basic_credentials() {
        let token = base64::engine::general_purpose::STANDARD.encode("AWS:pa:ss");
        let private = serde_json::json!({"authorizationData": [{"authorizationToken": token,
            "expiresAt": 4.1e9, "proxyEndpoint": "https://123456789012.dkr.ecr.us-east-1.amazonaws.com"}]});
        let t = parse_authorization("s", "u", &private).unwrap();
        assert_eq!(
            t.value,
            Credential::Basic {
                username: "AWS".into(),
                password: "pa:ss".into()
            }
        );
        let public = serde_json::json!({"authorizationData": {"authorizationToken": token, "expiresAt": 4100000000u64}});
        assert!(parse_authorization("s", "u", &public).is_ok());
        for bad in [
            serde_json::json!({"authorizationData": []}),
            serde_json::json!({"authorizationData": [{"authorizationToken": "!!", "expiresAt": 4.1e9}]}),
            serde_json::json!({"authorizationData": [{"authorizationToken": token}]}),
            serde_json::json!({"authorizationData": [{"authorizationToken": token, "expiresAt": 1.0e9}]}),
        ] {
            assert!(parse_authorization("s", "u", &bad).is_err(), "{bad}");
        }
    }
}
