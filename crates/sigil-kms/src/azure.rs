//! Azure Key Vault keys (`azurekms://VAULT_HOST/KEY[/VERSION]`): `GET
//! /keys/{name}/{version}` of the Key Vault REST API, the JWK turned into a
//! SubjectPublicKeyInfo.
//!
//! Credentials, by azidentity's names: a client secret (`AZURE_TENANT_ID`,
//! `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`) or workload identity
//! (`AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_FEDERATED_TOKEN_FILE`), both
//! exchanged at Microsoft Entra ID's v2 token endpoint (`AZURE_AUTHORITY_HOST`,
//! or the cloud `AZURE_ENVIRONMENT` names). Managed identity (IMDS) and
//! client certificates are not supported: sigil never contacts metadata
//! addresses. `SIGIL_AZUREKMS_ENDPOINT` replaces `https://VAULT_HOST`
//! (private endpoints, tests).

use base64::Engine as _;
use serde_json::Value;

use crate::der::{Curve, ec_spki, public_key_pem, rsa_spki};
use crate::destinations::Origin;
use crate::http::{GET, Http, field};
use crate::{FetchedKey, KmsError, Provider};
use sigil_cloud::Env;

const P: Provider = Provider::Azure;
/// The Key Vault REST API version asked for.
pub(crate) const API_VERSION: &str = "7.5";

fn config(message: impl Into<String>) -> KmsError {
    KmsError::Config {
        provider: P,
        message: message.into(),
    }
}

/// The token authority and Key Vault scope of the cloud `AZURE_ENVIRONMENT` names.
fn cloud(env: &Env) -> Result<(&'static str, &'static str), KmsError> {
    match env.get("AZURE_ENVIRONMENT").unwrap_or("AZUREPUBLICCLOUD") {
        "AZUREPUBLICCLOUD" | "AZURECLOUD" => Ok((
            "https://login.microsoftonline.com",
            "https://vault.azure.net/.default",
        )),
        "AZUREUSGOVERNMENT" | "AZUREUSGOVERNMENTCLOUD" => Ok((
            "https://login.microsoftonline.us",
            "https://vault.usgovcloudapi.net/.default",
        )),
        "AZURECHINACLOUD" => Ok((
            "https://login.chinacloudapi.cn",
            "https://vault.azure.cn/.default",
        )),
        other => Err(config(format!(
            "AZURE_ENVIRONMENT `{other}` is unknown; use AZUREPUBLICCLOUD, AZUREUSGOVERNMENT or \
             AZURECHINACLOUD"
        ))),
    }
}

pub(crate) async fn public_key(
    vault_host: &str,
    key: &str,
    version: Option<&str>,
    env: &Env,
    http: &Http,
) -> Result<FetchedKey, KmsError> {
    let (base, origin) = match env.get("SIGIL_AZUREKMS_ENDPOINT") {
        Some(endpoint) => (
            endpoint.trim_end_matches('/').to_owned(),
            Origin::Setting("SIGIL_AZUREKMS_ENDPOINT"),
        ),
        None => (format!("https://{vault_host}"), Origin::Reference),
    };
    let url = match version {
        Some(v) => format!("{base}/keys/{key}/{v}"),
        None => format!("{base}/keys/{key}"),
    };
    // The bearer token may sign with the vault's keys: never obtained for
    // a vault it could not be sent to.
    http.permit(P, &url, origin)?;
    let client = http.client(P, None)?;
    let token = access_token(env, http, &client).await?;
    let answer = http
        .json(
            P,
            &url,
            origin,
            client
                .request(GET, &url)
                .query(&[("api-version", API_VERSION)])
                .bearer_auth(&token),
            &format!(
                "check the vault and key names and that the identity may `get` keys (Key Vault \
                 Crypto User or an access policy with keys/get) on {vault_host}"
            ),
        )
        .await?;
    parse_key(&url, key, &answer)
}

fn parse_key(url: &str, name: &str, answer: &Value) -> Result<FetchedKey, KmsError> {
    let malformed = |reason: String| KmsError::Malformed {
        provider: P,
        url: url.to_owned(),
        reason,
    };
    let jwk = answer
        .get("key")
        .ok_or_else(|| malformed("no `key` object".into()))?;
    if answer
        .get("attributes")
        .and_then(|a| a.get("enabled"))
        .and_then(Value::as_bool)
        == Some(false)
    {
        return Err(KmsError::Unsupported {
            provider: P,
            reason: format!(
                "key `{name}` is disabled in the vault; enable it or name another version"
            ),
        });
    }
    let part = |field_name: &str| -> Result<Vec<u8>, KmsError> {
        let text = field(P, url, jwk, field_name)?;
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .map_err(|e| malformed(format!("key.{field_name} is not base64url: {e}")))
    };
    let kty = field(P, url, jwk, "kty")?;
    let der = match kty {
        "EC" | "EC-HSM" => {
            let crv = field(P, url, jwk, "crv")?;
            let curve = Curve::from_jose(crv).ok_or_else(|| KmsError::Unsupported {
                provider: P,
                reason: format!("key `{name}` is on curve {crv}; use P-256 or P-384"),
            })?;
            ec_spki(curve, &part("x")?, &part("y")?)
                .ok_or_else(|| malformed(format!("key.x or key.y is too long for {crv}")))?
        }
        "RSA" | "RSA-HSM" => rsa_spki(&part("n")?, &part("e")?),
        other => {
            return Err(KmsError::Unsupported {
                provider: P,
                reason: format!("key `{name}` has type {other}; cosign signs with EC or RSA keys"),
            });
        }
    };
    let version = jwk
        .get("kid")
        .and_then(Value::as_str)
        .and_then(|kid| kid.rsplit('/').next())
        .map(str::to_owned);
    Ok(FetchedKey {
        pem: public_key_pem(&der),
        version,
    })
}

async fn access_token(
    env: &Env,
    http: &Http,
    client: &reqwest::Client,
) -> Result<String, KmsError> {
    let (default_authority, scope) = cloud(env)?;
    let (Some(tenant), Some(client_id)) = (env.get("AZURE_TENANT_ID"), env.get("AZURE_CLIENT_ID"))
    else {
        return Err(config(
            "no Azure credentials: set AZURE_TENANT_ID and AZURE_CLIENT_ID with \
             AZURE_CLIENT_SECRET (a service principal) or AZURE_FEDERATED_TOKEN_FILE (workload \
             identity); managed identity is not used (sigil never contacts metadata addresses)",
        ));
    };
    let assertion;
    let mut form = vec![
        ("grant_type", "client_credentials"),
        ("client_id", client_id),
        ("scope", scope),
    ];
    if let Some(secret) = env.get("AZURE_CLIENT_SECRET") {
        form.push(("client_secret", secret));
    } else if let Some(file) = env.get("AZURE_FEDERATED_TOKEN_FILE") {
        assertion = crate::read_file(env, P, "AZURE_FEDERATED_TOKEN_FILE", file)?;
        form.push((
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        ));
        form.push(("client_assertion", assertion.as_str()));
    } else {
        return Err(config(
            "AZURE_TENANT_ID and AZURE_CLIENT_ID are set but neither AZURE_CLIENT_SECRET nor \
             AZURE_FEDERATED_TOKEN_FILE is; client certificates are not supported",
        ));
    }
    if !tenant
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    {
        return Err(config(format!(
            "AZURE_TENANT_ID `{tenant}` is not a tenant ID or domain"
        )));
    }
    let (authority, origin) = match env.get("AZURE_AUTHORITY_HOST") {
        Some(host) => (host, Origin::Setting("AZURE_AUTHORITY_HOST")),
        None => (default_authority, Origin::Reference),
    };
    let authority = authority.trim_end_matches('/');
    let url = format!("{authority}/{tenant}/oauth2/v2.0/token");
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let answer = http
        .json(
            P,
            &url,
            origin,
            client
                .post(&url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body),
            "check AZURE_TENANT_ID, AZURE_CLIENT_ID and the secret or federated credential",
        )
        .await?;
    Ok(field(P, &url, &answer, "access_token")?.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn hsm_key_types_and_padding_are_accepted_and_other_curves_refused() {
        let coordinate = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([9u8; 32]);
        let answer = json!({"key": {"kid": "https://v.vault.azure.net/keys/k/abc123", "kty": "EC-HSM",
            "crv": "P-256", "x": coordinate, "y": format!("{coordinate}=")}, "attributes": {"enabled": true}});
        let key = parse_key("u", "k", &answer).unwrap();
        assert_eq!(key.version.as_deref(), Some("abc123"));
        assert!(key.pem.starts_with("-----BEGIN PUBLIC KEY-----"));

        let k256 = json!({"key": {"kty": "EC", "crv": "P-256K", "x": coordinate, "y": coordinate}});
        let err = parse_key("u", "k", &k256).unwrap_err().to_string();
        assert!(err.contains("P-256K"), "{err}");
        let disabled = json!({"key": {"kty": "EC"}, "attributes": {"enabled": false}});
        assert!(
            parse_key("u", "k", &disabled)
                .unwrap_err()
                .to_string()
                .contains("disabled")
        );
    }

    #[test]
    fn sovereign_clouds_get_their_authority_and_scope() {
        let env = Env::from_pairs([("AZURE_ENVIRONMENT", "AZURECHINACLOUD")]);
        assert_eq!(cloud(&env).unwrap().1, "https://vault.azure.cn/.default");
        let bad = Env::from_pairs([("AZURE_ENVIRONMENT", "MARS")]);
        assert!(cloud(&bad).is_err());
    }
}
