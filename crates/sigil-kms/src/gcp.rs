//! Google Cloud KMS keys (`gcpkms://projects/…/cryptoKeys/K[/cryptoKeyVersions/V]`)
//! through the REST API, choosing the version as sigstore's gcp provider
//! does (the pinned one, else the first enabled one by `name desc`), with
//! the answer's `pemCrc32c` checked.
//!
//! Credentials, from `GOOGLE_APPLICATION_CREDENTIALS` (a file path, or in a
//! credentials Secret the JSON itself): a service-account key (`type:
//! service_account`, a signed JWT exchanged at its `token_uri`), workload
//! identity federation (`type: external_account` with a `credential_source.file`,
//! exchanged at its `token_url`, then `service_account_impersonation_url`
//! when set), or a user's refresh token (`type: authorized_user`); or a ready
//! token in `GOOGLE_OAUTH_ACCESS_TOKEN`. The GCE/GKE metadata server is not
//! used (sigil never contacts metadata addresses): on GKE use workload
//! identity federation's credential file. `SIGIL_GCPKMS_ENDPOINT` replaces
//! `https://cloudkms.googleapis.com` (private endpoints, tests).

use base64::Engine as _;
use serde_json::Value;

use crate::der::{crc32c, pem_body};
use crate::destinations::Origin;
use crate::http::{GET, Http, field};
use crate::{FetchedKey, KmsError, Provider};
use sigil_cloud::{Env, GOOGLE_CLOUD_PLATFORM as CLOUD_PLATFORM};

const P: Provider = Provider::Gcp;
const DEFAULT_ENDPOINT: &str = "https://cloudkms.googleapis.com";
/// The scope cosign's KMS client asks for.
const SCOPE: &str = "https://www.googleapis.com/auth/cloudkms";
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// URLs a credentials file names are the admin's choice.
const CREDENTIALS: Origin = Origin::Setting("GOOGLE_APPLICATION_CREDENTIALS");

fn config(message: impl Into<String>) -> KmsError {
    KmsError::Config {
        provider: P,
        message: message.into(),
    }
}

pub(crate) async fn public_key(
    key: &str,
    version: Option<&str>,
    env: &Env,
    http: &Http,
) -> Result<FetchedKey, KmsError> {
    let client = http.client(P, None)?;
    let token = access_token(env, http, &client).await?;
    let (endpoint, origin) = match env.get("SIGIL_GCPKMS_ENDPOINT") {
        Some(e) => (e, Origin::Setting("SIGIL_GCPKMS_ENDPOINT")),
        None => (DEFAULT_ENDPOINT, Origin::Reference),
    };
    let endpoint = endpoint.trim_end_matches('/');
    let get = |url: &str| client.request(GET, url).bearer_auth(&token);
    let permission = "check the key name and that the credentials' principal has \
                      roles/cloudkms.viewer and roles/cloudkms.publicKeyViewer on it";

    let url = format!("{endpoint}/v1/{key}");
    let crypto_key = http.json(P, &url, origin, get(&url), permission).await?;
    let purpose = crypto_key
        .get("purpose")
        .and_then(Value::as_str)
        .unwrap_or("");
    if purpose != "ASYMMETRIC_SIGN" {
        return Err(KmsError::Unsupported {
            provider: P,
            reason: format!(
                "{key} has purpose `{purpose}`; cosign signs with ASYMMETRIC_SIGN keys"
            ),
        });
    }
    let name = match version {
        Some(v) => format!("{key}/cryptoKeyVersions/{v}"),
        None => {
            let url = format!("{endpoint}/v1/{key}/cryptoKeyVersions");
            let list = http
                .json(
                    P,
                    &url,
                    origin,
                    get(&url).query(&[("filter", "state=ENABLED"), ("orderBy", "name desc")]),
                    permission,
                )
                .await?;
            let first = list
                .get("cryptoKeyVersions")
                .and_then(Value::as_array)
                .and_then(|v| v.first())
                .ok_or_else(|| KmsError::Unsupported {
                    provider: P,
                    reason: format!(
                        "{key} has no enabled key version; enable one or pin a version in the URI"
                    ),
                })?;
            field(P, &url, first, "name")?.to_owned()
        }
    };
    let url = format!("{endpoint}/v1/{name}/publicKey");
    let answer = http.json(P, &url, origin, get(&url), permission).await?;
    let pem = field(P, &url, &answer, "pem")?;
    if let Some(crc) = answer.get("pemCrc32c") {
        // int64 fields arrive as JSON strings.
        let expected = crc
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .or_else(|| crc.as_u64());
        if expected != Some(u64::from(crc32c(pem.as_bytes()))) {
            return Err(KmsError::Malformed {
                provider: P,
                url,
                reason: "pemCrc32c does not match the pem: the answer was corrupted in transit"
                    .into(),
            });
        }
    }
    let algorithm = answer
        .get("algorithm")
        .and_then(Value::as_str)
        .unwrap_or("");
    if algorithm.starts_with("RSA_SIGN_PSS")
        || algorithm.starts_with("RSA_SIGN_RAW")
        || algorithm == "EC_SIGN_SECP256K1_SHA256"
        || algorithm.starts_with("PQ_")
        || algorithm.contains("ED25519")
    {
        return Err(KmsError::Unsupported {
            provider: P,
            reason: format!(
                "{name} has algorithm {algorithm}, which sigil does not verify for cosign \
                 signatures; use EC_SIGN_P256_SHA256, EC_SIGN_P384_SHA384 or an RSA_SIGN_PKCS1_* key"
            ),
        });
    }
    Ok(FetchedKey {
        pem: pem.to_owned(),
        version: name.rsplit('/').next().map(str::to_owned),
    })
}

async fn access_token(
    env: &Env,
    http: &Http,
    client: &reqwest::Client,
) -> Result<String, KmsError> {
    if let Some(token) = env.get("GOOGLE_OAUTH_ACCESS_TOKEN") {
        return Ok(token.to_owned());
    }
    let Some(setting) = env.get("GOOGLE_APPLICATION_CREDENTIALS") else {
        return Err(config(
            "no Google credentials: set GOOGLE_APPLICATION_CREDENTIALS to a service-account key \
             or workload identity federation credential file (in a credentials Secret it may \
             hold the JSON itself), or GOOGLE_OAUTH_ACCESS_TOKEN; the metadata server is not \
             used",
        ));
    };
    let text = if setting.starts_with('{') {
        setting.to_owned()
    } else {
        crate::read_file(env, P, "GOOGLE_APPLICATION_CREDENTIALS", setting)?
    };
    let creds: Value = serde_json::from_str(&text)
        .map_err(|e| config(format!("GOOGLE_APPLICATION_CREDENTIALS is not JSON: {e}")))?;
    let text_field = |name: &str| -> Result<&str, KmsError> {
        creds.get(name).and_then(Value::as_str).ok_or_else(|| {
            config(format!(
                "GOOGLE_APPLICATION_CREDENTIALS: no string field `{name}`"
            ))
        })
    };
    match creds.get("type").and_then(Value::as_str) {
        Some("service_account") => {
            let (token_uri, origin) = token_uri(&creds);
            let assertion = service_account_jwt(
                text_field("client_email")?,
                creds.get("private_key_id").and_then(Value::as_str),
                text_field("private_key")?,
                token_uri,
                time::OffsetDateTime::now_utc().unix_timestamp(),
            )?;
            let form = [
                ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                ("assertion", assertion.as_str()),
            ];
            oauth_token(http, client, token_uri, origin, &form, "access_token").await
        }
        Some("authorized_user") => {
            let (token_uri, origin) = token_uri(&creds);
            let form = [
                ("grant_type", "refresh_token"),
                ("client_id", text_field("client_id")?),
                ("client_secret", text_field("client_secret")?),
                ("refresh_token", text_field("refresh_token")?),
            ];
            oauth_token(http, client, token_uri, origin, &form, "access_token").await
        }
        Some("external_account") => {
            let source = creds.get("credential_source").unwrap_or(&Value::Null);
            let Some(file) = source.get("file").and_then(Value::as_str) else {
                return Err(config(
                    "GOOGLE_APPLICATION_CREDENTIALS: only workload identity federation with a \
                     credential_source.file is supported (url and executable sources are not)",
                ));
            };
            let raw = crate::read_file(env, P, "credential_source.file", file)?;
            let subject = sigil_cloud::subject_token(&raw, source.get("format"))
                .map_err(|e| config(format!("credential_source.file {file}: {e}")))?;
            let form = sigil_cloud::google_sts_form(
                text_field("audience")?,
                &subject,
                text_field("subject_token_type")?,
            );
            let federated = oauth_token(
                http,
                client,
                text_field("token_url")?,
                CREDENTIALS,
                &form,
                "access_token",
            )
            .await?;
            match creds
                .get("service_account_impersonation_url")
                .and_then(Value::as_str)
            {
                None => Ok(federated),
                Some(url) => {
                    let body = serde_json::json!({"scope": [CLOUD_PLATFORM], "lifetime": "3600s"});
                    let answer = http
                        .json(
                            P,
                            url,
                            CREDENTIALS,
                            client.post(url).bearer_auth(&federated).header("content-type", "application/json").body(body.to_string()),
                            "check that the federated principal has roles/iam.workloadIdentityUser on the service account",
                        )
                        .await?;
                    Ok(field(P, url, &answer, "accessToken")?.to_owned())
                }
            }
        }
        other => Err(config(format!(
            "GOOGLE_APPLICATION_CREDENTIALS has type {}; supported: service_account, \
             external_account (credential_source.file), authorized_user",
            other.unwrap_or("(none)")
        ))),
    }
}

/// Where a credentials file sends its token requests: its own `token_uri`
/// (the admin's file), else Google's.
fn token_uri(creds: &Value) -> (&str, Origin) {
    match creds.get("token_uri").and_then(Value::as_str) {
        Some(uri) => (uri, CREDENTIALS),
        None => (DEFAULT_TOKEN_URI, Origin::Reference),
    }
}

async fn oauth_token(
    http: &Http,
    client: &reqwest::Client,
    url: &str,
    origin: Origin,
    form: &[(&str, &str)],
    token_field: &str,
) -> Result<String, KmsError> {
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let answer = http
        .json(
            P,
            url,
            origin,
            client
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body),
            "check the credentials file (a deleted or disabled key is refused here)",
        )
        .await?;
    Ok(field(P, url, &answer, token_field)?.to_owned())
}

/// The RS256 JWT a service-account key signs to get an access token.
fn service_account_jwt(
    email: &str,
    key_id: Option<&str>,
    private_key_pem: &str,
    audience: &str,
    now: i64,
) -> Result<String, KmsError> {
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let header = match key_id {
        Some(kid) => serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": kid}),
        None => serde_json::json!({"alg": "RS256", "typ": "JWT"}),
    };
    let claims = serde_json::json!({
        "iss": email, "scope": SCOPE, "aud": audience, "iat": now, "exp": now + 3600,
    });
    let signing_input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let der = pem_body(private_key_pem, "PRIVATE KEY").ok_or_else(|| {
        config("GOOGLE_APPLICATION_CREDENTIALS: private_key is not a PEM PRIVATE KEY")
    })?;
    let key = aws_lc_rs::signature::RsaKeyPair::from_pkcs8(&der).map_err(|e| {
        config(format!(
            "GOOGLE_APPLICATION_CREDENTIALS: private_key is not an RSA PKCS#8 key: {e}"
        ))
    })?;
    let mut signature = vec![0u8; key.public_modulus_len()];
    key.sign(
        &aws_lc_rs::signature::RSA_PKCS1_SHA256,
        &aws_lc_rs::rand::SystemRandom::new(),
        signing_input.as_bytes(),
        &mut signature,
    )
    .map_err(|_| config("GOOGLE_APPLICATION_CREDENTIALS: signing the token request failed"))?;
    Ok(format!("{signing_input}.{}", b64(&signature)))
}
