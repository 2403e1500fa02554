//! AWS KMS keys (`awskms://[ENDPOINT]/KEY`): `TrentService.GetPublicKey`
//! over the KMS JSON API, signed with SigV4 ([`crate::sigv4`]).
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
use crate::env::Env;
use crate::http::{Http, field};
use crate::sigv4::{self, Credentials};
use crate::{FetchedKey, KmsError, Provider};

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

fn endpoint_url(env: &Env, uri_endpoint: &str, service_var: &str, default: String) -> String {
    if !uri_endpoint.is_empty() {
        return format!("https://{uri_endpoint}");
    }
    env.first(&[service_var, "AWS_ENDPOINT_URL"])
        .map(|u| u.trim_end_matches('/').to_owned())
        .unwrap_or(default)
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
    let client = http.client(P, None)?;
    let credentials = credentials(env, region, http, &client).await?;
    let url = endpoint_url(
        env,
        uri_endpoint,
        "AWS_ENDPOINT_URL_KMS",
        regional("kms", region),
    );
    let url = format!("{}/", url.trim_end_matches('/'));
    let host = host_header(&url)?;
    let body = serde_json::json!({ "KeyId": key_id }).to_string();
    let date = sigv4::amz_date(time::OffsetDateTime::now_utc());
    let mut headers = vec![
        ("content-type", "application/x-amz-json-1.1"),
        ("host", host.as_str()),
        ("x-amz-date", date.as_str()),
        ("x-amz-target", "TrentService.GetPublicKey"),
    ];
    if let Some(token) = &credentials.session_token {
        headers.push(("x-amz-security-token", token.as_str()));
    }
    let signed = sigv4::sign(
        &credentials,
        region,
        "kms",
        &date,
        &sigv4::Request {
            method: "POST",
            path: "/",
            query: &[],
            headers: &headers,
            payload: body.as_bytes(),
        },
    );
    let mut request = client
        .post(&url)
        .header("Authorization", &signed.authorization)
        .body(body);
    for (name, value) in headers.iter().filter(|(n, _)| *n != "host") {
        request = request.header(*name, *value);
    }
    let answer = http
        .json(
            P,
            &url,
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
    let token = env.read_file(P, "AWS_WEB_IDENTITY_TOKEN_FILE", file)?;
    let session = env
        .get("AWS_ROLE_SESSION_NAME")
        .unwrap_or("sigil-controller");
    let url = endpoint_url(env, "", "AWS_ENDPOINT_URL_STS", regional("sts", region));
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
        xml_text(&xml, name).ok_or_else(|| KmsError::Malformed {
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

/// The text of the first `<name>…</name>` element (STS answers in XML; the
/// three credential fields are plain text without markup).
fn xml_text(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml.get(start..)?.find(&close)?;
    let text = xml.get(start..end)?.trim();
    (!text.is_empty() && !text.contains('<')).then(|| {
        text.replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_endpoint_comes_from_the_uri_then_the_sdk_variables_then_the_region() {
        let env = Env::from_pairs([("AWS_ENDPOINT_URL", "http://127.0.0.1:5000/")]);
        assert_eq!(
            endpoint_url(
                &env,
                "kms.local:4566",
                "AWS_ENDPOINT_URL_KMS",
                regional("kms", "eu-west-1")
            ),
            "https://kms.local:4566"
        );
        assert_eq!(
            endpoint_url(
                &env,
                "",
                "AWS_ENDPOINT_URL_KMS",
                regional("kms", "eu-west-1")
            ),
            "http://127.0.0.1:5000"
        );
        let env = Env::from_pairs([
            ("AWS_ENDPOINT_URL", "http://a"),
            ("AWS_ENDPOINT_URL_KMS", "http://b"),
        ]);
        assert_eq!(
            endpoint_url(&env, "", "AWS_ENDPOINT_URL_KMS", String::new()),
            "http://b"
        );
        assert_eq!(
            endpoint_url(
                &Env::default(),
                "",
                "AWS_ENDPOINT_URL_KMS",
                regional("kms", "cn-north-1")
            ),
            "https://kms.cn-north-1.amazonaws.com.cn"
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

    #[test]
    fn sts_credentials_are_read_from_the_xml_answer() {
        let xml = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>\
                   <Credentials><AccessKeyId>ASIA1</AccessKeyId>\
                   <SecretAccessKey>s/e&amp;c</SecretAccessKey><SessionToken>tok</SessionToken>\
                   </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
        assert_eq!(xml_text(xml, "AccessKeyId").as_deref(), Some("ASIA1"));
        assert_eq!(xml_text(xml, "SecretAccessKey").as_deref(), Some("s/e&c"));
        assert_eq!(xml_text(xml, "Missing"), None);
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
