//! AWS credentials for ECR, from the first source that is configured, in
//! the AWS SDKs' order and by their variable names:
//!
//! 1. environment keys: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY`
//!    (+ `AWS_SESSION_TOKEN`);
//! 2. on a laptop, the profile `AWS_PROFILE` (else `default`) of
//!    `~/.aws/credentials` and `~/.aws/config` (`AWS_SHARED_CREDENTIALS_FILE`,
//!    `AWS_CONFIG_FILE`), static keys only;
//! 3. IRSA: `AWS_ROLE_ARN` + `AWS_WEB_IDENTITY_TOKEN_FILE` (the projected
//!    ServiceAccount token EKS's webhook mounts) exchanged at STS
//!    `AssumeRoleWithWebIdentity` (`AWS_ENDPOINT_URL_STS`, `AWS_ROLE_SESSION_NAME`);
//! 4. EKS Pod Identity and ECS: `AWS_CONTAINER_CREDENTIALS_FULL_URI` with
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` (or `_TOKEN`), or
//!    `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`; plain HTTP only to loopback
//!    and the link-local agents (169.254.170.2, 169.254.170.23,
//!    fd00:ec2::23), as the SDKs allow;
//! 5. the instance role through IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT`,
//!    `AWS_EC2_METADATA_DISABLED`), tried only on EC2 or with the endpoint
//!    set, so that elsewhere a missing source is a quick, clear error and
//!    not a timeout.
//!
//! Temporary credentials are cached until shortly before they expire.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use reqwest::Method;
use serde_json::Value;
use sigil_cloud::sigv4::Credentials;

use super::cache::{Timed, TokenCache};
use super::http::field;
use super::{CloudError, Context, ErrorKind, ProviderId, life_until_rfc3339};

const P: ProviderId = ProviderId::Ecr;
/// Temporary credentials whose issuer gives no expiry are kept this long.
const DEFAULT_LIFE: Duration = Duration::from_secs(900);
/// How long one request to a metadata agent may take.
const AGENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where this process's AWS credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Keys in the environment.
    Environment,
    /// A profile's static keys (laptops).
    Profile(String),
    /// IRSA: a role assumed with the projected token file.
    WebIdentity {
        /// The role's ARN.
        role: String,
        /// The token file.
        file: String,
    },
    /// EKS Pod Identity or ECS: the container credentials endpoint.
    Container {
        /// The endpoint.
        url: String,
    },
    /// The instance role through IMDSv2.
    Instance {
        /// The IMDS endpoint.
        endpoint: String,
    },
}

impl Source {
    /// How messages and `sigil doctor` name it.
    pub fn describe(&self) -> String {
        match self {
            Self::Environment => {
                "environment keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)".into()
            }
            Self::Profile(p) => format!("AWS profile `{p}`"),
            Self::WebIdentity { role, .. } => {
                format!("IRSA: role {role} (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE)")
            }
            Self::Container { url } => {
                format!("EKS Pod Identity / container credentials at {url}")
            }
            Self::Instance { endpoint } => {
                format!("the instance role through IMDSv2 at {endpoint}")
            }
        }
    }
}

/// The fix when no source is configured.
const NO_SOURCE_FIX: &str = "give sigil's ServiceAccount an IAM role: IRSA (annotation \
    eks.amazonaws.com/role-arn) or an EKS Pod Identity association; or set AWS_ACCESS_KEY_ID and \
    AWS_SECRET_ACCESS_KEY; or use a pull secret for this registry";

/// This process's AWS credentials, cached.
#[derive(Debug)]
pub struct AwsCredentials {
    context: Arc<Context>,
    cache: TokenCache<Credentials>,
}

impl AwsCredentials {
    /// The chain, reading settings from `context`.
    pub fn new(context: Arc<Context>) -> Self {
        let cache = TokenCache::new(P, context.exchange_timeout);
        Self { context, cache }
    }

    /// The configured source, or why there is none.
    pub fn source(&self) -> Result<Source, CloudError> {
        let env = &self.context.env;
        match (
            env.get("AWS_ACCESS_KEY_ID"),
            env.get("AWS_SECRET_ACCESS_KEY"),
        ) {
            (Some(_), Some(_)) => return Ok(Source::Environment),
            (Some(_), None) | (None, Some(_)) => {
                return Err(CloudError::config(
                    P,
                    "AWS credentials from the environment",
                    "only one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is set",
                    "set both, or neither",
                ));
            }
            (None, None) => {}
        }
        if self.context.laptop
            && let Some(profile) = self.profile_keys()?.map(|(name, _)| name)
        {
            return Ok(Source::Profile(profile));
        }
        match (
            env.get("AWS_ROLE_ARN"),
            env.get("AWS_WEB_IDENTITY_TOKEN_FILE"),
        ) {
            (Some(role), Some(file)) => {
                return Ok(Source::WebIdentity {
                    role: role.to_string(),
                    file: file.to_string(),
                });
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(CloudError::config(
                    P,
                    "AWS credentials from IRSA",
                    "only one of AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE is set",
                    "annotate sigil's ServiceAccount with eks.amazonaws.com/role-arn and restart \
                     its pods (EKS's webhook sets both), or set both yourself",
                ));
            }
            (None, None) => {}
        }
        if let Some(url) = env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
            return Ok(Source::Container {
                url: url.to_string(),
            });
        }
        if let Some(path) = env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            return Ok(Source::Container {
                url: format!("http://169.254.170.2{path}"),
            });
        }
        let disabled = env
            .get("AWS_EC2_METADATA_DISABLED")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let endpoint = env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT");
        if !disabled && (endpoint.is_some() || super::firmware_says("amazon")) {
            return Ok(Source::Instance {
                endpoint: endpoint
                    .unwrap_or("http://169.254.169.254")
                    .trim_end_matches('/')
                    .to_string(),
            });
        }
        Err(CloudError::config(
            P,
            "AWS credentials",
            "no source is configured: no AWS_ACCESS_KEY_ID, no IRSA (AWS_ROLE_ARN and \
             AWS_WEB_IDENTITY_TOKEN_FILE), no EKS Pod Identity \
             (AWS_CONTAINER_CREDENTIALS_FULL_URI), and not on EC2",
            NO_SOURCE_FIX,
        ))
    }

    /// Credentials now: environment and profile keys as they are, temporary
    /// ones from the cache (one exchange at a time).
    pub async fn get(&self, region: &str, wait: Duration) -> Result<Credentials, CloudError> {
        let env = &self.context.env;
        let source = self.source()?;
        match &source {
            Source::Environment => {
                return Ok(Credentials {
                    access_key_id: env.get("AWS_ACCESS_KEY_ID").unwrap_or_default().into(),
                    secret_access_key: env.get("AWS_SECRET_ACCESS_KEY").unwrap_or_default().into(),
                    session_token: env.get("AWS_SESSION_TOKEN").map(str::to_string),
                });
            }
            Source::Profile(_) => {
                if let Some((_, keys)) = self.profile_keys()? {
                    return Ok(keys);
                }
            }
            _ => {}
        }
        let context = self.context.clone();
        let region = region.to_string();
        self.cache
            .get("aws", wait, move || {
                async move { temporary(&context, &source, &region).await }.boxed()
            })
            .await
    }

    /// The profile's static keys, when a laptop's shared files have them.
    fn profile_keys(&self) -> Result<Option<(String, Credentials)>, CloudError> {
        let env = &self.context.env;
        let profile = env.get("AWS_PROFILE").unwrap_or("default").to_string();
        let home = env.get("HOME").unwrap_or("");
        let credentials_file = env
            .get("AWS_SHARED_CREDENTIALS_FILE")
            .map(str::to_string)
            .unwrap_or_else(|| format!("{home}/.aws/credentials"));
        let config_file = env
            .get("AWS_CONFIG_FILE")
            .map(str::to_string)
            .unwrap_or_else(|| format!("{home}/.aws/config"));
        for (file, section) in [
            (credentials_file, profile.clone()),
            (
                config_file,
                if profile == "default" {
                    profile.clone()
                } else {
                    format!("profile {profile}")
                },
            ),
        ] {
            if !std::path::Path::new(&file).exists() {
                continue;
            }
            let text = env.read_file("AWS shared file", &file).map_err(|e| {
                CloudError::config(P, "AWS credentials from a profile", e, "fix the file")
            })?;
            let keys = ini_section(&text, &section);
            let get = |k: &str| {
                keys.iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            if let (Some(id), Some(secret)) =
                (get("aws_access_key_id"), get("aws_secret_access_key"))
            {
                return Ok(Some((
                    profile,
                    Credentials {
                        access_key_id: id,
                        secret_access_key: secret,
                        session_token: get("aws_session_token"),
                    },
                )));
            }
        }
        Ok(None)
    }
}

/// The `key = value` pairs of `[section]` in an INI text (AWS's shared
/// files), keys lowercased.
fn ini_section(text: &str, section: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
            continue;
        }
        if inside && let Some((k, v)) = line.split_once('=') {
            out.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    out
}

async fn temporary(
    context: &Context,
    source: &Source,
    region: &str,
) -> Result<Timed<Credentials>, CloudError> {
    match source {
        Source::WebIdentity { role, file } => web_identity(context, role, file, region).await,
        Source::Container { url } => container(context, url).await,
        Source::Instance { endpoint } => instance(context, endpoint).await,
        Source::Environment | Source::Profile(_) => Err(CloudError::config(
            P,
            "AWS credentials",
            "static keys have no exchange",
            "report this as a bug",
        )),
    }
}

/// The STS endpoint: `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, else the
/// region's (the global one without a region).
fn sts_url(context: &Context, region: &str) -> String {
    let env = &context.env;
    if let Some(u) = env.first(&["AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"]) {
        return format!("{}/", u.trim_end_matches('/'));
    }
    match env
        .first(&["AWS_REGION", "AWS_DEFAULT_REGION"])
        .unwrap_or(region)
    {
        "" => "https://sts.amazonaws.com/".into(),
        r if r.starts_with("cn-") => format!("https://sts.{r}.amazonaws.com.cn/"),
        r => format!("https://sts.{r}.amazonaws.com/"),
    }
}

async fn web_identity(
    context: &Context,
    role: &str,
    file: &str,
    region: &str,
) -> Result<Timed<Credentials>, CloudError> {
    let step = "AWS credentials from IRSA (STS AssumeRoleWithWebIdentity)";
    let token = context
        .env
        .read_file("AWS_WEB_IDENTITY_TOKEN_FILE", file)
        .map_err(|e| {
            CloudError::config(
                P,
                step,
                e,
                "check that the projected token volume EKS's webhook adds is mounted",
            )
        })?;
    let session = context
        .env
        .get("AWS_ROLE_SESSION_NAME")
        .unwrap_or("sigil")
        .to_string();
    let url = sts_url(context, region);
    let pairs = [
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", role),
        ("RoleSessionName", &session),
        ("WebIdentityToken", &token),
    ];
    let fix = format!(
        "check that role {role} trusts the cluster's OIDC provider for sigil's ServiceAccount \
         (audience sts.amazonaws.com) and that AWS_ENDPOINT_URL_STS, if set, is STS"
    );
    let answer = context.http.post_form(P, step, &url, &pairs, &fix).await?;
    let xml = String::from_utf8_lossy(&answer.body);
    let tag = |name: &str| {
        sigil_cloud::xml_text(&xml, name).ok_or_else(|| {
            CloudError::new(
                P,
                ErrorKind::Malformed,
                step,
                format!("{url} answered without <{name}>"),
                "check that AWS_ENDPOINT_URL_STS, if set, is STS",
            )
        })
    };
    let credentials = Credentials {
        access_key_id: tag("AccessKeyId")?,
        secret_access_key: tag("SecretAccessKey")?,
        session_token: Some(tag("SessionToken")?),
    };
    let life = expiring(step, &url, tag("Expiration").ok().as_deref())?;
    Ok(Timed::new(credentials, life))
}

/// The life of credentials expiring at `expiration` (RFC 3339); an
/// expiration in the past is an error, a missing one gets [`DEFAULT_LIFE`].
fn expiring(step: &str, url: &str, expiration: Option<&str>) -> Result<Duration, CloudError> {
    match expiration {
        None => Ok(DEFAULT_LIFE),
        Some(e) => life_until_rfc3339(e).ok_or_else(|| {
            CloudError::new(
                P,
                ErrorKind::Malformed,
                step,
                format!(
                    "{url} answered with credentials expiring at `{e}`, which is past or not a time"
                ),
                "check this machine's clock and the endpoint",
            )
        }),
    }
}

/// Whether plain HTTP may carry the container credentials token to `url`:
/// loopback and the EKS/ECS agents' link-local addresses only.
fn container_url_allowed(url: &url::Url) -> bool {
    if url.scheme() == "https" {
        return true;
    }
    if url.scheme() != "http" {
        return false;
    }
    match url.host() {
        Some(url::Host::Ipv4(a)) => {
            a.is_loopback()
                || a == std::net::Ipv4Addr::new(169, 254, 170, 2)
                || a == std::net::Ipv4Addr::new(169, 254, 170, 23)
        }
        Some(url::Host::Ipv6(a)) => {
            a.is_loopback() || a == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23)
        }
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    }
}

async fn container(context: &Context, url: &str) -> Result<Timed<Credentials>, CloudError> {
    let step = "AWS credentials from EKS Pod Identity (container credentials endpoint)";
    let fix = "check the EKS Pod Identity association of sigil's ServiceAccount and that the \
               eks-pod-identity-agent runs on the node";
    let parsed = url::Url::parse(url).map_err(|e| {
        CloudError::config(
            P,
            step,
            format!("AWS_CONTAINER_CREDENTIALS_FULL_URI `{url}`: {e}"),
            fix,
        )
    })?;
    if !container_url_allowed(&parsed) {
        return Err(CloudError::config(
            P,
            step,
            format!("`{url}` is plain HTTP to a host that is not loopback or the EKS/ECS agent"),
            "use https, or the agent's address (169.254.170.23), as the AWS SDKs require",
        ));
    }
    let env = &context.env;
    let token = match (
        env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"),
        env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
    ) {
        (Some(file), _) => Some(
            env.read_file("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", file)
                .map_err(|e| {
                    CloudError::config(
                        P,
                        step,
                        e,
                        "check that the eks-pod-identity-token volume is mounted",
                    )
                })?,
        ),
        (None, Some(t)) => Some(t.to_string()),
        (None, None) => None,
    };
    let mut request = context
        .http
        .request(Method::GET, url)
        .timeout(AGENT_TIMEOUT);
    if let Some(t) = &token {
        request = request.header("authorization", t);
    }
    let answer = context.http.fetch(P, step, url, request, fix).await?;
    let v = answer.json(P, step, url)?;
    agent_credentials(step, url, &v)
}

/// The credentials of a container or instance agent's JSON answer.
fn agent_credentials(step: &str, url: &str, v: &Value) -> Result<Timed<Credentials>, CloudError> {
    let credentials = Credentials {
        access_key_id: field(P, step, url, v, "AccessKeyId")?.to_string(),
        secret_access_key: field(P, step, url, v, "SecretAccessKey")?.to_string(),
        session_token: v.get("Token").and_then(Value::as_str).map(str::to_string),
    };
    let life = expiring(step, url, v.get("Expiration").and_then(Value::as_str))?;
    Ok(Timed::new(credentials, life))
}

async fn instance(context: &Context, endpoint: &str) -> Result<Timed<Credentials>, CloudError> {
    let step = "AWS credentials from the instance role (IMDSv2)";
    let fix = "attach an instance profile to the node, and set the instance metadata hop limit \
               to 2 so pods reach it; better, give sigil its own role with IRSA or EKS Pod Identity";
    let http = &context.http;
    let token_url = format!("{endpoint}/latest/api/token");
    let session = http
        .fetch(
            P,
            step,
            &token_url,
            http.request(Method::PUT, &token_url)
                .timeout(AGENT_TIMEOUT)
                .header("x-aws-ec2-metadata-token-ttl-seconds", "21600"),
            fix,
        )
        .await?;
    let session = String::from_utf8_lossy(&session.body).trim().to_string();
    let roles_url = format!("{endpoint}/latest/meta-data/iam/security-credentials/");
    let roles = http
        .fetch(
            P,
            step,
            &roles_url,
            http.request(Method::GET, &roles_url)
                .timeout(AGENT_TIMEOUT)
                .header("x-aws-ec2-metadata-token", &session),
            fix,
        )
        .await?;
    let roles = String::from_utf8_lossy(&roles.body);
    let role = roles
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .filter(|r| {
            r.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c))
        })
        .ok_or_else(|| {
            CloudError::new(
                P,
                ErrorKind::Config,
                step,
                format!("{roles_url} lists no role"),
                fix,
            )
        })?
        .to_string();
    let url = format!("{roles_url}{role}");
    let answer = http
        .fetch(
            P,
            step,
            &url,
            http.request(Method::GET, &url)
                .timeout(AGENT_TIMEOUT)
                .header("x-aws-ec2-metadata-token", &session),
            fix,
        )
        .await?;
    agent_credentials(step, &url, &answer.json(P, step, &url)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::http::Http;
    use sigil_cloud::Env;

    fn context(pairs: &[(&str, &str)], laptop: bool) -> Arc<Context> {
        let mut env = Env::from_pairs(pairs.iter().copied());
        env.set("AWS_EC2_METADATA_DISABLED", "true");
        Arc::new(Context {
            env,
            http: Http::new(&[], Duration::from_secs(1)).unwrap(),
            laptop,
            exchange_timeout: Duration::from_secs(1),
            insecure_hosts: Vec::new(),
        })
    }

    #[test]
    fn sources_are_chosen_in_the_sdks_order() {
        let source = |pairs: &[(&str, &str)]| AwsCredentials::new(context(pairs, false)).source();
        let irsa = [
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/sigil"),
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                "/var/run/secrets/eks.amazonaws.com/serviceaccount/token",
            ),
        ];
        assert!(matches!(source(&irsa), Ok(Source::WebIdentity { .. })));
        let mut keys_first = irsa.to_vec();
        keys_first.extend([("AWS_ACCESS_KEY_ID", "A"), ("AWS_SECRET_ACCESS_KEY", "S")]);
        assert_eq!(source(&keys_first), Ok(Source::Environment));
        let pod_identity = [
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://169.254.170.23/v1/credentials",
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token",
            ),
        ];
        assert!(matches!(
            source(&pod_identity),
            Ok(Source::Container { .. })
        ));
        let relative = [(
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "/v2/credentials/x",
        )];
        assert_eq!(
            source(&relative),
            Ok(Source::Container {
                url: "http://169.254.170.2/v2/credentials/x".into()
            })
        );
        let imds = [(
            "AWS_EC2_METADATA_SERVICE_ENDPOINT",
            "http://127.0.0.1:1234/",
        )];
        // Disabled wins over an endpoint.
        assert!(source(&imds).is_err());
        let none = source(&[]).unwrap_err();
        assert_eq!(none.kind, ErrorKind::Config);
        assert!(none.fix.contains("eks.amazonaws.com/role-arn"), "{none}");
        let half = source(&[("AWS_ROLE_ARN", "arn")]).unwrap_err();
        assert!(half.reason.contains("only one of"), "{half}");
    }

    #[test]
    fn a_laptops_profile_keys_come_after_the_environment_and_before_irsa() {
        let dir = std::env::temp_dir().join(format!("sigil-aws-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n[work]\n\
             # a comment\naws_access_key_id=W\naws_secret_access_key=WS\naws_session_token=T\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let chain = AwsCredentials::new(context(
            &[
                ("AWS_SHARED_CREDENTIALS_FILE", path),
                ("AWS_CONFIG_FILE", "/nonexistent"),
                ("AWS_PROFILE", "work"),
                ("AWS_ROLE_ARN", "arn"),
                ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"),
            ],
            true,
        ));
        assert_eq!(chain.source(), Ok(Source::Profile("work".into())));
        let (_, keys) = chain.profile_keys().unwrap().unwrap();
        assert_eq!(keys.access_key_id, "W");
        assert_eq!(keys.session_token.as_deref(), Some("T"));
        // In a cluster, profiles are never read.
        let cluster = AwsCredentials::new(context(&[("AWS_SHARED_CREDENTIALS_FILE", path)], false));
        assert!(cluster.source().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plain_http_carries_the_pod_identity_token_only_to_loopback_and_the_agents() {
        let ok = |u: &str| container_url_allowed(&url::Url::parse(u).unwrap());
        assert!(ok("http://169.254.170.23/v1/credentials"));
        assert!(ok("http://169.254.170.2/v2/credentials"));
        assert!(ok("http://[fd00:ec2::23]/v1/credentials"));
        assert!(ok("http://127.0.0.1:9911/creds"));
        assert!(ok("https://creds.example/v1"));
        assert!(!ok("http://10.0.0.5/v1/credentials"));
        assert!(!ok("http://169.254.169.254/latest"));
        assert!(!ok("ftp://127.0.0.1/x"));
    }

    #[test]
    fn sts_is_the_override_then_the_regional_endpoint() {
        let c = context(
            &[("AWS_ENDPOINT_URL_STS", "https://sts.local:8443/")],
            false,
        );
        assert_eq!(sts_url(&c, "us-east-1"), "https://sts.local:8443/");
        let c = context(&[("AWS_REGION", "eu-west-1")], false);
        assert_eq!(
            sts_url(&c, "us-east-1"),
            "https://sts.eu-west-1.amazonaws.com/"
        );
        let c = context(&[], false);
        assert_eq!(
            sts_url(&c, "cn-north-1"),
            "https://sts.cn-north-1.amazonaws.com.cn/"
        );
        assert_eq!(sts_url(&c, ""), "https://sts.amazonaws.com/");
    }

    #[test]
    fn agent_answers_give_credentials_with_their_expiry_and_refuse_expired_ones() {
        let v = serde_json::json!({"AccessKeyId": "ASIA", "SecretAccessKey": "s", "Token": "t",
            "Expiration": "2999-01-01T00:00:00Z"});
        let t = agent_credentials("s", "u", &v).unwrap();
        assert_eq!(t.value.session_token.as_deref(), Some("t"));
        assert_eq!(t.expires - t.obtained, super::super::cache::MAX_LIFETIME);
        let past = serde_json::json!({"AccessKeyId": "ASIA", "SecretAccessKey": "s",
            "Expiration": "2001-01-01T00:00:00Z"});
        let err = agent_credentials("s", "u", &past).unwrap_err();
        assert!(err.reason.contains("past"), "{err}");
        let missing = serde_json::json!({"SecretAccessKey": "s"});
        assert!(agent_credentials("s", "u", &missing).is_err());
    }
}
