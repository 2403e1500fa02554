//! AWS KMS keys (`awskms://[ENDPOINT]/KEY`): `TrentService.GetPublicKey`
//! over the KMS JSON API, signed with SigV4 ([`sigil_cloud::sigv4`]).
//!
//! Settings, by the AWS SDKs' names: the region from the key's ARN, else
//! `AWS_REGION` / `AWS_DEFAULT_REGION`; the endpoint from the URI (https, as
//! cosign does), else `AWS_ENDPOINT_URL_KMS` / `AWS_ENDPOINT_URL`, else the
//! regional one. Credentials: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY`
//! (+ `AWS_SESSION_TOKEN`), else web identity (EKS IRSA): `AWS_ROLE_ARN` +
//! `AWS_WEB_IDENTITY_TOKEN_FILE` exchanged at STS
//! (`AssumeRoleWithWebIdentity`; `AWS_ENDPOINT_URL_STS`, `AWS_ROLE_SESSION_NAME`).
//! Instance metadata, ECS/EKS Pod Identity container credentials and
//! profiles are not used: sigil never contacts metadata addresses.

use base64::Engine as _;
use serde_json::Value;

use crate::der::public_key_pem;
use crate::destinations::Origin;
use crate::http::{Http, field};
use crate::{FetchedKey, KmsError, Provider};
use sigil_cloud::Env;
use sigil_cloud::sigv4::{self, Credentials};

const P: Provider = Provider::Aws;

fn config(message: impl Into<String>) -> KmsError {
    KmsError::Config {
        provider: P,
        message: message.into(),
    }
}

/// The regional endpoint of `service` (partition by region prefix).
fn regional(service: &str, region: &str) -> String {
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://{service}.{region}.{domain}")
}

/// The endpoint to ask, and who chose it: the key reference's own
/// endpoint, else the admin's setting, else the regional default.
fn endpoint_url(
    env: &Env,
    uri_endpoint: &str,
    service_var: &'static str,
    default: String,
) -> (String, Origin) {
    if !uri_endpoint.is_empty() {
        return (format!("https://{uri_endpoint}"), Origin::Reference);
    }
    for var in [service_var, "AWS_ENDPOINT_URL"] {
        if let Some(u) = env.get(var) {
            return (u.trim_end_matches('/').to_owned(), Origin::Setting(var));
        }
    }
    (default, Origin::Reference)
}

/// `host[:port]` of `url` as the HTTP client sends it in `Host`.
fn host_header(url: &str) -> Result<String, KmsError> {
    let parsed = url::Url::parse(url).map_err(|e| config(format!("endpoint `{url}`: {e}")))?;
    if !matches!(parsed.scheme(), "https" | "http") {
        return Err(config(format!("endpoint `{url}` is not an http(s) URL")));
    }
    let host = parsed
        .host_str()
        .ok_or_else(|| config(format!("endpoint `{url}` has no host")))?;
    Ok(match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

pub(crate) async fn public_key(
    uri_endpoint: &str,
    key_id: &str,
    arn_region: Option<&str>,
    env: &Env,
    http: &Http,
) -> Result<FetchedKey, KmsError> {
    let region = arn_region
        .or_else(|| env.first(&["AWS_REGION", "AWS_DEFAULT_REGION"]))
        .ok_or_else(|| {
            config(
                "no region: use a key ARN, or set AWS_REGION (or AWS_DEFAULT_REGION) to the \
                 key's region",
            )
        })?;
    let (url, origin) = endpoint_url(
        env,
        uri_endpoint,
        "AWS_ENDPOINT_URL_KMS",
        regional("kms", region),
    );
    let url = format!("{}/", url.trim_end_matches('/'));
    // Checked before any credential is read or exchanged.
    http.permit(P, &url, origin)?;
    let client = http.client(P, None)?;
    let credentials = credentials(env, region, http, &client).await?;
    let host = host_header(&url)?;
    let body = serde_json::json!({ "KeyId": key_id }).to_string();
    let date = sigv4::amz_date(time::OffsetDateTime::now_utc());
    let headers = sigv4::json_request_headers(
        &credentials,
        region,
        "kms",
        "TrentService.GetPublicKey",
        &host,
        body.as_bytes(),
        &date,
    );
    let mut request = client.post(&url).body(body);
    for (name, value) in &headers {
        request = request.header(*name, value);
    }
    let answer = http
        .json(
            P,
            &url,
            origin,
            request,
            &format!("check the key `{key_id}`, its region `{region}` and that the credentials may call kms:GetPublicKey on it"),
        )
        .await?;
    parse_public_key(&url, key_id, &answer)
}

fn parse_public_key(url: &str, key_id: &str, answer: &Value) -> Result<FetchedKey, KmsError> {
    let der = base64::engine::general_purpose::STANDARD
        .decode(field(P, url, answer, "PublicKey")?)
        .map_err(|e| KmsError::Malformed {
            provider: P,
            url: url.to_owned(),
            reason: format!("PublicKey is not base64: {e}"),
        })?;
    let usage = answer.get("KeyUsage").and_then(Value::as_str).unwrap_or("");
    if usage != "SIGN_VERIFY" {
        return Err(KmsError::Unsupported {
            provider: P,
            reason: format!(
                "key `{key_id}` has KeyUsage `{usage}`; cosign signs with SIGN_VERIFY keys \
                 (e.g. KeySpec ECC_NIST_P256)"
            ),
        });
    }
    // cosign signs with the first algorithm KMS lists, which for RSA keys is
    // an RSASSA-PSS one; sigil verifies RSA PKCS#1 v1.5 signatures only.
    let first = answer
        .get("SigningAlgorithms")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .unwrap_or("");
    if first.starts_with("RSASSA_PSS") || first.starts_with("SM2") {
        let spec = answer.get("KeySpec").and_then(Value::as_str).unwrap_or("?");
        return Err(KmsError::Unsupported {
            provider: P,
            reason: format!(
                "key `{key_id}` ({spec}) is signed with {first} by cosign, which sigil does not \
                 verify; use an ECC_NIST_P256 or ECC_NIST_P384 key"
            ),
        });
    }
    Ok(FetchedKey {
        pem: public_key_pem(&der),
        version: answer
            .get("KeyId")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

async fn credentials(
    env: &Env,
    region: &str,
    http: &Http,
    client: &reqwest::Client,
) -> Result<Credentials, KmsError> {
    match (
        env.get("AWS_ACCESS_KEY_ID"),
        env.get("AWS_SECRET_ACCESS_KEY"),
    ) {
        (Some(id), Some(secret)) => {
            return Ok(Credentials {
                access_key_id: id.to_owned(),
                secret_access_key: secret.to_owned(),
                session_token: env.get("AWS_SESSION_TOKEN").map(str::to_owned),
            });
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(config(
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together",
            ));
        }
        (None, None) => {}
    }
    let (Some(role), Some(file)) = (
        env.get("AWS_ROLE_ARN"),
        env.get("AWS_WEB_IDENTITY_TOKEN_FILE"),
    ) else {
        let container = env
            .first(&["AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"])
            .map(|_| " (EKS Pod Identity / ECS container credentials are served from a link-local address, which sigil never contacts)")
            .unwrap_or("");
        return Err(config(format!(
            "no AWS credentials{container}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
             (in the KMS credentials Secret or the environment), or use IAM roles for service \
             accounts (AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE)"
        )));
    };
    let token = crate::read_file(env, P, "AWS_WEB_IDENTITY_TOKEN_FILE", file)?;
    let session = env
        .get("AWS_ROLE_SESSION_NAME")
        .unwrap_or("sigil-controller");
    let (url, origin) = endpoint_url(env, "", "AWS_ENDPOINT_URL_STS", regional("sts", region));
    let url = format!("{}/", url.trim_end_matches('/'));
    let form = [
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", role),
        ("RoleSessionName", session),
        ("WebIdentityToken", token.as_str()),
    ];
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let response = http
        .send(
            P,
            &url,
            origin,
            client
                .post(&url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body),
        )
        .await?
        .ok(
            P,
            &url,
            &format!("check that role `{role}` trusts the cluster's OIDC provider for sigil's service account"),
        )?;
    let xml = String::from_utf8_lossy(&response.body);
    let tag = |name: &str| -> Result<String, KmsError> {
        sigil_cloud::xml_text(&xml, name).ok_or_else(|| KmsError::Malformed {
            provider: P,
            url: url.clone(),
            reason: format!("AssumeRoleWithWebIdentity answer has no <{name}>"),
        })
    };
    Ok(Credentials {
        access_key_id: tag("AccessKeyId")?,
        secret_access_key: tag("SecretAccessKey")?,
        session_token: Some(tag("SessionToken")?),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_endpoint_comes_from_the_uri_then_the_sdk_variables_then_the_region() {
        let env = Env::from_pairs([("AWS_ENDPOINT_URL", "http://127.0.0.1:5000/")]);
        let kms = |env: &Env, uri: &str, region: &str| {
            endpoint_url(env, uri, "AWS_ENDPOINT_URL_KMS", regional("kms", region))
        };
        assert_eq!(
            kms(&env, "kms.local:4566", "eu-west-1"),
            ("https://kms.local:4566".to_owned(), Origin::Reference)
        );
        assert_eq!(
            kms(&env, "", "eu-west-1"),
            (
                "http://127.0.0.1:5000".to_owned(),
                Origin::Setting("AWS_ENDPOINT_URL")
            )
        );
        let env = Env::from_pairs([
            ("AWS_ENDPOINT_URL", "http://a"),
            ("AWS_ENDPOINT_URL_KMS", "http://b"),
        ]);
        assert_eq!(
            kms(&env, "", "eu-west-1"),
            (
                "http://b".to_owned(),
                Origin::Setting("AWS_ENDPOINT_URL_KMS")
            )
        );
        assert_eq!(
            kms(&Env::default(), "", "cn-north-1"),
            (
                "https://kms.cn-north-1.amazonaws.com.cn".to_owned(),
                Origin::Reference
            )
        );
        assert_eq!(
            host_header("http://127.0.0.1:5000/").unwrap(),
            "127.0.0.1:5000"
        );
        assert_eq!(
            host_header("https://kms.us-east-1.amazonaws.com/").unwrap(),
            "kms.us-east-1.amazonaws.com"
        );
    }

    #[test]
    fn rsa_keys_cosign_would_sign_with_pss_are_unsupported() {
        let answer = json!({"KeyId": "k", "PublicKey": "MAo=", "KeyUsage": "SIGN_VERIFY",
            "KeySpec": "RSA_2048",
            "SigningAlgorithms": ["RSASSA_PSS_SHA_256", "RSASSA_PKCS1_V1_5_SHA_256"]});
        let err = parse_public_key("u", "k", &answer).unwrap_err().to_string();
        assert!(err.contains("RSASSA_PSS_SHA_256"), "{err}");
        assert!(err.contains("ECC_NIST_P256"), "{err}");
        let encrypt = json!({"KeyId": "k", "PublicKey": "MAo=", "KeyUsage": "ENCRYPT_DECRYPT"});
        assert!(matches!(
            parse_public_key("u", "k", &encrypt),
            Err(KmsError::Unsupported { .. })
        ));
    }

    #[tokio::test]
    async fn without_credentials_the_error_names_every_supported_source() {
        let env = Env::from_pairs([
            ("AWS_REGION", "us-east-1"),
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://169.254.170.23/v1/credentials",
            ),
        ]);
        let err = public_key("", "alias/x", None, &env, &Http::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");
        assert!(err.contains("AWS_WEB_IDENTITY_TOKEN_FILE"), "{err}");
        assert!(err.contains("never contacts"), "{err}");
        let no_region = public_key("", "alias/x", None, &Env::default(), &Http::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(no_region.contains("AWS_REGION"), "{no_region}");
    }
}
