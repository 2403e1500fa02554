//! The JWS envelope (`application/jose+json`): the flattened JSON
//! serialization, the signed attributes in the protected header, the
//! certificate chain (`x5c`), timestamp and signing agent in the unprotected
//! `header`. The signature covers `protected || "." || payload` as encoded.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::Deserialize;
use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::algorithm::Algorithm;
use crate::envelope::{
    self, AUTHENTIC_SIGNING_TIME, Attribute, EXPIRY, Envelope, EnvelopeError, Format,
    PAYLOAD_CONTENT_TYPE, SIGNING_SCHEME, SIGNING_TIME, TIMESTAMP_SIGNATURE,
};

const F: Format = Format::Jws;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Flattened {
    payload: String,
    protected: String,
    #[serde(default)]
    header: Unprotected,
    signature: String,
}

#[derive(Deserialize, Default)]
struct Unprotected {
    #[serde(default)]
    x5c: Vec<String>,
    #[serde(rename = "io.cncf.notary.timestampSignature", default)]
    timestamp: Option<String>,
    #[serde(rename = "io.cncf.notary.signingAgent", default)]
    signing_agent: Option<String>,
}

/// Parses a JWS envelope.
pub fn parse(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
    let jws: Flattened = serde_json::from_slice(bytes).map_err(|e| {
        EnvelopeError::malformed(F, format!("not the flattened JSON serialization: {e}"))
    })?;
    let protected_json = URL_SAFE_NO_PAD
        .decode(&jws.protected)
        .map_err(|e| EnvelopeError::malformed(F, format!("`protected` is not base64url: {e}")))?;
    let payload = URL_SAFE_NO_PAD
        .decode(&jws.payload)
        .map_err(|e| EnvelopeError::malformed(F, format!("`payload` is not base64url: {e}")))?;
    let signature = URL_SAFE_NO_PAD
        .decode(&jws.signature)
        .map_err(|e| EnvelopeError::malformed(F, format!("`signature` is not base64url: {e}")))?;
    let header: Map<String, Value> = serde_json::from_slice(&protected_json).map_err(|e| {
        EnvelopeError::malformed(F, format!("the protected header is not a JSON object: {e}"))
    })?;

    let alg = text(&header, "alg")?.ok_or_else(|| EnvelopeError::header(F, "alg", "is missing"))?;
    let algorithm = Algorithm::from_jws(alg).ok_or_else(|| {
        EnvelopeError::header(
            F,
            "alg",
            format!("`{alg}` is not a Notary Project algorithm"),
        )
    })?;
    let cty = text(&header, "cty")?.ok_or_else(|| EnvelopeError::header(F, "cty", "is missing"))?;
    if cty != PAYLOAD_CONTENT_TYPE {
        return Err(EnvelopeError::header(
            F,
            "cty",
            format!("is `{cty}`, not {PAYLOAD_CONTENT_TYPE}"),
        ));
    }
    let crit: Vec<String> = match header.get("crit") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| EnvelopeError::header(F, "crit", "must be an array of header names"))?,
        Some(_) => {
            return Err(EnvelopeError::header(
                F,
                "crit",
                "must be an array of header names",
            ));
        }
        None => return Err(EnvelopeError::header(F, "crit", "is missing")),
    };
    if crit.is_empty() {
        return Err(EnvelopeError::header(F, "crit", "is empty"));
    }
    if let Some(absent) = crit.iter().find(|k| !header.contains_key(k.as_str())) {
        return Err(EnvelopeError::header(
            F,
            "crit",
            format!("lists `{absent}`, which the protected header does not carry"),
        ));
    }
    let times = envelope::check_reserved(
        F,
        text(&header, SIGNING_SCHEME)?,
        time_of(&header, SIGNING_TIME)?,
        time_of(&header, AUTHENTIC_SIGNING_TIME)?,
        time_of(&header, EXPIRY)?,
        &|k| crit.iter().any(|c| c == k),
    )?;
    let extended = header
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "alg" | "cty" | "crit") && !envelope::is_reserved(k))
        .map(|(k, v)| Attribute {
            key: k.clone(),
            value: v.clone(),
            critical: crit.iter().any(|c| c == k),
        })
        .collect();

    let ders = jws
        .header
        .x5c
        .iter()
        .take(envelope::MAX_CHAIN_LEN + 1)
        .map(|c| {
            STANDARD.decode(c).map_err(|e| {
                EnvelopeError::header(
                    F,
                    "x5c",
                    format!("holds a certificate that is not base64: {e}"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&[u8]> = ders.iter().map(Vec::as_slice).collect();
    let chain = envelope::parse_chain(F, &refs)?;
    let timestamp = jws
        .header
        .timestamp
        .map(|t| {
            STANDARD.decode(t).map_err(|e| {
                EnvelopeError::header(F, TIMESTAMP_SIGNATURE, format!("is not base64: {e}"))
            })
        })
        .transpose()?;

    let mut signed_bytes = Vec::with_capacity(jws.protected.len() + 1 + jws.payload.len());
    signed_bytes.extend_from_slice(jws.protected.as_bytes());
    signed_bytes.push(b'.');
    signed_bytes.extend_from_slice(jws.payload.as_bytes());
    Ok(Envelope {
        format: F,
        algorithm,
        signed_bytes,
        signature,
        payload,
        scheme: times.scheme,
        signing_time: times.signing_time,
        expiry: times.expiry,
        extended,
        chain,
        timestamp,
        signing_agent: jws.header.signing_agent,
    })
}

fn text<'a>(header: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, EnvelopeError> {
    match header.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(EnvelopeError::header(F, key, "must be a string")),
    }
}

fn time_of(
    header: &Map<String, Value>,
    key: &str,
) -> Result<Option<OffsetDateTime>, EnvelopeError> {
    text(header, key)?
        .map(|t| {
            OffsetDateTime::parse(t, &Rfc3339).map_err(|e| {
                EnvelopeError::header(F, key, format!("`{t}` is not an RFC 3339 time: {e}"))
            })
        })
        .transpose()
}
