//! HashiCorp Vault and OpenBao transit keys (`hashivault://NAME`,
//! `openbao://NAME`): `GET /v1/<transit>/keys/<name>` and the public key of
//! its `latest_version`, as sigstore's hashivault provider reads it.
//!
//! Settings (the names cosign's Vault client reads, plus Kubernetes auth):
//! `VAULT_ADDR` (or `BAO_ADDR`); `VAULT_TOKEN` (or `BAO_TOKEN`), or
//! `VAULT_KUBERNETES_ROLE` to log in with the pod's service-account token
//! (`VAULT_KUBERNETES_MOUNT`, default `kubernetes`;
//! `VAULT_KUBERNETES_TOKEN_FILE`, default the projected token);
//! `VAULT_NAMESPACE`; `TRANSIT_SECRET_ENGINE_PATH` (default `transit`);
//! `VAULT_CACERT` (a PEM file trusted besides the web PKI roots).

use base64::Engine as _;
use serde_json::Value;

use crate::der::{ed25519_spki, public_key_pem};
use crate::destinations::Origin;
use crate::http::{GET, Http};
use crate::{FetchedKey, KmsError, Provider};
use sigil_cloud::Env;

const P: Provider = Provider::Vault;
/// Vault's address is always the admin's setting.
const ADDR: Origin = Origin::Setting("VAULT_ADDR");
/// Where Kubernetes mounts a pod's service-account token.
pub(crate) const SERVICE_ACCOUNT_TOKEN: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/token";

fn config(message: impl Into<String>) -> KmsError {
    KmsError::Config {
        provider: P,
        message: message.into(),
    }
}

/// A path segment as given in settings, without surrounding slashes.
fn segment(value: &str) -> &str {
    value.trim_matches('/')
}

pub(crate) async fn public_key(key: &str, env: &Env, http: &Http) -> Result<FetchedKey, KmsError> {
    let addr = env
        .first(&["VAULT_ADDR", "BAO_ADDR"])
        .ok_or_else(|| config("VAULT_ADDR (or BAO_ADDR) is not set: set it to the Vault or OpenBao server's address, e.g. https://vault.vault.svc:8200"))?
        .trim_end_matches('/');
    if !(addr.starts_with("https://") || addr.starts_with("http://")) {
        return Err(config(format!("VAULT_ADDR `{addr}` is not an http(s) URL")));
    }
    let ca = match env.first(&["VAULT_CACERT", "BAO_CACERT"]) {
        Some(path) => Some(crate::read_file(env, P, "VAULT_CACERT", path)?),
        None => None,
    };
    let client = http.client(P, ca.as_deref().map(|pem| ("VAULT_CACERT", pem)))?;
    let namespace = env.first(&["VAULT_NAMESPACE", "BAO_NAMESPACE"]);
    let with_namespace = |request: reqwest::RequestBuilder| match namespace {
        Some(ns) => request.header("X-Vault-Namespace", ns),
        None => request,
    };

    let token = match env.first(&["VAULT_TOKEN", "BAO_TOKEN"]) {
        Some(token) => token.to_owned(),
        None => {
            match env.get("VAULT_KUBERNETES_ROLE") {
                Some(role) => {
                    let mount = segment(env.get("VAULT_KUBERNETES_MOUNT").unwrap_or("kubernetes"));
                    let file = env
                        .get("VAULT_KUBERNETES_TOKEN_FILE")
                        .unwrap_or(SERVICE_ACCOUNT_TOKEN);
                    let jwt = crate::read_file(env, P, "VAULT_KUBERNETES_TOKEN_FILE", file)?;
                    let url = format!("{addr}/v1/auth/{mount}/login");
                    let body = serde_json::json!({"role": role, "jwt": jwt});
                    let answer = http
                    .json(
                        P,
                        &url,
                        ADDR,
                        with_namespace(client.post(&url).header("content-type", "application/json").body(body.to_string())),
                        &format!(
                            "check that Vault's Kubernetes auth at `{mount}` knows role `{role}` \
                             for sigil's service account"
                        ),
                    )
                    .await?;
                    answer
                        .get("auth")
                        .and_then(|a| a.get("client_token"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| KmsError::Malformed {
                            provider: P,
                            url: url.clone(),
                            reason: "the login answer has no auth.client_token".into(),
                        })?
                }
                None => {
                    return Err(config(
                        "no Vault credentials: set VAULT_TOKEN (or BAO_TOKEN), or \
                     VAULT_KUBERNETES_ROLE to log in with sigil's service-account token",
                    ));
                }
            }
        }
    };

    let transit = segment(env.get("TRANSIT_SECRET_ENGINE_PATH").unwrap_or("transit"));
    let url = format!("{addr}/v1/{transit}/keys/{key}");
    let answer = http
        .json(
            P,
            &url,
            ADDR,
            with_namespace(client.request(GET, &url).header("X-Vault-Token", token)),
            &format!(
                "check that transit key `{key}` exists at `{transit}` and that the token's policy \
                 allows `read` on {transit}/keys/{key}"
            ),
        )
        .await?;
    parse_key(&url, key, &answer)
}

/// Reads the latest version's public key from a transit key's description.
fn parse_key(url: &str, name: &str, answer: &Value) -> Result<FetchedKey, KmsError> {
    let malformed = |reason: String| KmsError::Malformed {
        provider: P,
        url: url.to_owned(),
        reason,
    };
    let data = answer
        .get("data")
        .ok_or_else(|| malformed("no `data` object".into()))?;
    let latest = match data.get("latest_version") {
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(malformed("no numeric `latest_version`".into())),
    };
    let version = data
        .get("keys")
        .and_then(|k| k.get(&latest))
        .ok_or_else(|| malformed(format!("no keys.{latest} entry for the latest version")))?;
    let Some(public) = version.get("public_key").and_then(Value::as_str) else {
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        return Err(KmsError::Unsupported {
            provider: P,
            reason: format!(
                "transit key `{name}` (type {kind}) has no public key: use an asymmetric signing \
                 key (ecdsa-p256, ecdsa-p384, ed25519 or rsa-*), e.g. `vault write -f \
                 transit/keys/{name} type=ecdsa-p256`"
            ),
        });
    };
    let pem = if version.get("name").and_then(Value::as_str) == Some("ed25519") {
        // Vault gives Ed25519 keys as base64 of the raw 32 bytes.
        let raw = base64::engine::general_purpose::STANDARD
            .decode(public.trim())
            .map_err(|e| malformed(format!("ed25519 public_key is not base64: {e}")))?;
        let raw: [u8; 32] = raw.try_into().map_err(|r: Vec<u8>| {
            malformed(format!("ed25519 public_key has {} bytes, not 32", r.len()))
        })?;
        public_key_pem(&ed25519_spki(&raw))
    } else {
        public.to_owned()
    };
    Ok(FetchedKey {
        pem,
        version: Some(latest),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_latest_versions_key_is_taken_and_ed25519_keys_get_a_spki() {
        let pem = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n";
        let answer = json!({"data": {"latest_version": 2, "type": "ecdsa-p256", "keys": {
            "1": {"public_key": "old", "name": "P-256"},
            "2": {"public_key": pem, "name": "P-256"}}}});
        let key = parse_key("u", "k", &answer).unwrap();
        assert_eq!(key.pem, pem);
        assert_eq!(key.version.as_deref(), Some("2"));

        let raw = [7u8; 32];
        let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
        let answer = json!({"data": {"latest_version": 1, "type": "ed25519", "keys": {
            "1": {"public_key": b64, "name": "ed25519"}}}});
        let key = parse_key("u", "k", &answer).unwrap();
        assert_eq!(key.pem, public_key_pem(&ed25519_spki(&raw)));
    }

    #[test]
    fn a_symmetric_transit_key_is_unsupported_with_what_to_create_instead() {
        let answer = json!({"data": {"latest_version": 1, "type": "aes256-gcm96", "keys": {"1": 1700000000}}});
        let err = parse_key("u", "k", &answer).unwrap_err().to_string();
        assert!(err.contains("type aes256-gcm96"), "{err}");
        assert!(err.contains("type=ecdsa-p256"), "{err}");
    }

    #[test]
    fn answers_without_the_documented_fields_are_malformed() {
        for answer in [
            json!({}),
            json!({"data": {"latest_version": "1", "keys": {}}}),
            json!({"data": {"latest_version": 3, "keys": {"1": {}}}}),
        ] {
            assert!(matches!(
                parse_key("u", "k", &answer),
                Err(KmsError::Malformed { .. })
            ));
        }
    }
}
