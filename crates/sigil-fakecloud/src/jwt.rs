//! Kubernetes ServiceAccount tokens as the cloud identity endpoints read
//! them: an ES256 JWT (the e2e API server signs with a P-256 key) checked
//! against the API server's public keys, then its audience, expiry and
//! not-before; and a minter for tests that have no API server.

use base64::Engine as _;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePublicKey as _, EncodePublicKey as _, LineEnding};
use serde_json::Value;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|e| format!("not base64url: {e}"))
}

/// The claims the fakes check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `iss`.
    pub issuer: String,
    /// `sub` (`system:serviceaccount:NS:NAME`).
    pub subject: String,
    /// `aud`, a string or a list.
    pub audiences: Vec<String>,
    /// `exp`.
    pub expires: i64,
}

/// Public keys from PEM text (one or more `PUBLIC KEY` blocks).
pub fn keys_from_pem(pem: &str) -> Result<Vec<VerifyingKey>, String> {
    let mut keys = Vec::new();
    let mut rest = pem;
    // Bounded by the text: each round consumes one block.
    while let Some(start) = rest.find("-----BEGIN PUBLIC KEY-----") {
        let end_marker = "-----END PUBLIC KEY-----";
        let end = rest[start..]
            .find(end_marker)
            .ok_or("a PUBLIC KEY block without its end")?
            + start
            + end_marker.len();
        let block = &rest[start..end];
        keys.push(
            VerifyingKey::from_public_key_pem(block)
                .map_err(|e| format!("not a P-256 public key (the fakes check ES256): {e}"))?,
        );
        rest = &rest[end..];
    }
    if keys.is_empty() {
        return Err("no PUBLIC KEY block".into());
    }
    Ok(keys)
}

/// Checks `token`'s ES256 signature against `keys`, then that `audience`
/// is among its audiences and that it is valid at `now` (Unix seconds).
/// The error says which check failed, as the real endpoints' messages do.
pub fn verify(
    token: &str,
    keys: &[VerifyingKey],
    audience: &str,
    now: i64,
) -> Result<Claims, String> {
    let mut parts = token.trim().split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the token is not a JWT (three dot-separated parts)".into());
    };
    let header: Value =
        serde_json::from_slice(&unb64(h)?).map_err(|e| format!("JWT header is not JSON: {e}"))?;
    if header.get("alg").and_then(Value::as_str) != Some("ES256") {
        return Err(format!(
            "unsupported JWT alg {}",
            header.get("alg").unwrap_or(&Value::Null)
        ));
    }
    let signature = Signature::from_slice(&unb64(s)?).map_err(|e| format!("bad signature: {e}"))?;
    let signed = format!("{h}.{p}");
    if !keys
        .iter()
        .any(|k| k.verify(signed.as_bytes(), &signature).is_ok())
    {
        return Err("the token's signature does not verify with the issuer's keys".into());
    }
    let claims: Value =
        serde_json::from_slice(&unb64(p)?).map_err(|e| format!("JWT claims are not JSON: {e}"))?;
    let text = |k: &str| {
        claims
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let audiences = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.clone()],
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    if !audiences.iter().any(|a| a == audience) {
        return Err(format!(
            "incorrect token audience {audiences:?}, want {audience}"
        ));
    }
    let expires = claims
        .get("exp")
        .and_then(Value::as_i64)
        .ok_or("the token has no exp")?;
    if expires <= now {
        return Err("the token has expired".into());
    }
    if claims
        .get("nbf")
        .and_then(Value::as_i64)
        .is_some_and(|nbf| nbf > now + 60)
    {
        return Err("the token is not valid yet".into());
    }
    Ok(Claims {
        issuer: text("iss"),
        subject: text("sub"),
        audiences,
        expires,
    })
}

/// Mints ServiceAccount-like tokens, for tests without an API server.
pub struct TokenIssuer {
    key: SigningKey,
    issuer: String,
}

impl TokenIssuer {
    /// A deterministic P-256 key from `seed` (1..=255) and the `iss` claim.
    pub fn new(seed: u8, issuer: &str) -> Result<Self, String> {
        let key = SigningKey::from_bytes(&[seed.max(1); 32].into())
            .map_err(|e| format!("seed {seed}: {e}"))?;
        Ok(Self {
            key,
            issuer: issuer.to_string(),
        })
    }

    /// The public key as PEM, as the API server's `sa.pub`.
    pub fn public_pem(&self) -> Result<String, String> {
        self.key
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| e.to_string())
    }

    /// A token for `subject` and `audience`, issued at `now`, valid `life` seconds.
    pub fn mint(&self, subject: &str, audience: &str, now: i64, life: i64) -> String {
        let header = serde_json::json!({"alg": "ES256", "kid": "fake", "typ": "JWT"});
        let claims = serde_json::json!({
            "iss": self.issuer, "sub": subject, "aud": [audience],
            "iat": now, "nbf": now, "exp": now + life,
        });
        let signed = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature: Signature = self.key.sign(signed.as_bytes());
        format!("{signed}.{}", b64(&signature.to_bytes()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_minted_token_verifies_and_each_check_fails_on_its_own() {
        let issuer = TokenIssuer::new(7, "https://kubernetes.default.svc").unwrap();
        let keys = keys_from_pem(&issuer.public_pem().unwrap()).unwrap();
        let token = issuer.mint(
            "system:serviceaccount:sigil-system:sigil-webhook",
            "sts.amazonaws.com",
            1000,
            600,
        );
        let claims = verify(&token, &keys, "sts.amazonaws.com", 1100).unwrap();
        assert_eq!(
            claims.subject,
            "system:serviceaccount:sigil-system:sigil-webhook"
        );
        assert!(
            verify(&token, &keys, "api://AzureADTokenExchange", 1100)
                .unwrap_err()
                .contains("audience")
        );
        assert!(
            verify(&token, &keys, "sts.amazonaws.com", 1600)
                .unwrap_err()
                .contains("expired")
        );
        let other =
            keys_from_pem(&TokenIssuer::new(8, "x").unwrap().public_pem().unwrap()).unwrap();
        assert!(
            verify(&token, &other, "sts.amazonaws.com", 1100)
                .unwrap_err()
                .contains("signature")
        );
        let mut tampered = token.clone();
        tampered.insert(token.find('.').unwrap() + 3, 'A');
        assert!(verify(&tampered, &keys, "sts.amazonaws.com", 1100).is_err());
        assert!(verify("a.b", &keys, "sts.amazonaws.com", 1100).is_err());
    }
}
