//! The COSE envelope (`application/cose`): a tagged COSE_Sign1 (RFC 9052)
//! whose protected header carries the algorithm, `crit`, the content type
//! and the signed attributes (times as tag 1 epoch seconds), and whose
//! unprotected header carries `x5chain` (label 33), the timestamp and the
//! signing agent. The signature covers the `Signature1` Sig_structure.

use time::OffsetDateTime;

use crate::algorithm::Algorithm;
use crate::cbor::{self, Value};
use crate::envelope::{
    self, AUTHENTIC_SIGNING_TIME, Attribute, EXPIRY, Envelope, EnvelopeError, Format,
    PAYLOAD_CONTENT_TYPE, SIGNING_AGENT, SIGNING_SCHEME, SIGNING_TIME, TIMESTAMP_SIGNATURE,
};

const F: Format = Format::Cose;
const TAG_SIGN1: u64 = 18;
const LABEL_ALG: i64 = 1;
const LABEL_CRIT: i64 = 2;
const LABEL_CONTENT_TYPE: i64 = 3;
const LABEL_X5CHAIN: i64 = 33;

/// Parses a COSE_Sign1 envelope.
pub fn parse(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
    let value = cbor::decode(bytes).map_err(|e| EnvelopeError::malformed(F, e.to_string()))?;
    let items = match value {
        Value::Tag(TAG_SIGN1, inner) => match *inner {
            Value::Array(items) => items,
            other => {
                return Err(EnvelopeError::malformed(
                    F,
                    format!("COSE_Sign1 is {}, not an array", other.describe()),
                ));
            }
        },
        other => {
            return Err(EnvelopeError::malformed(
                F,
                format!("not a tagged COSE_Sign1 (tag 18), but {}", other.describe()),
            ));
        }
    };
    let [protected, unprotected, payload, signature] =
        <[Value; 4]>::try_from(items).map_err(|v| {
            EnvelopeError::malformed(F, format!("COSE_Sign1 has {} elements, not 4", v.len()))
        })?;
    let Value::Bytes(protected_bytes) = protected else {
        return Err(EnvelopeError::malformed(
            F,
            "the protected header is not a byte string",
        ));
    };
    let Value::Map(unprotected) = unprotected else {
        return Err(EnvelopeError::malformed(
            F,
            "the unprotected header is not a map",
        ));
    };
    let Value::Bytes(payload) = payload else {
        return Err(EnvelopeError::malformed(
            F,
            "the payload is not an embedded byte string",
        ));
    };
    let Value::Bytes(signature) = signature else {
        return Err(EnvelopeError::malformed(
            F,
            "the signature is not a byte string",
        ));
    };
    let Value::Map(header) = cbor::decode(&protected_bytes)
        .map_err(|e| EnvelopeError::malformed(F, format!("the protected header: {e}")))?
    else {
        return Err(EnvelopeError::malformed(
            F,
            "the protected header is not a map",
        ));
    };

    let int = |label: i64| {
        header
            .iter()
            .find(|(k, _)| k.as_i64() == Some(label))
            .map(|(_, v)| v)
    };
    let named = |name: &str| {
        header
            .iter()
            .find(|(k, _)| k.as_text() == Some(name))
            .map(|(_, v)| v)
    };

    let alg = int(LABEL_ALG).ok_or_else(|| EnvelopeError::header(F, "alg (1)", "is missing"))?;
    let algorithm = alg.as_i64().and_then(Algorithm::from_cose).ok_or_else(|| {
        EnvelopeError::header(
            F,
            "alg (1)",
            format!("{} is not a Notary Project algorithm", alg.describe()),
        )
    })?;
    match int(LABEL_CONTENT_TYPE) {
        Some(Value::Text(t)) if t == PAYLOAD_CONTENT_TYPE => {}
        Some(other) => {
            return Err(EnvelopeError::header(
                F,
                "content type (3)",
                format!("is {}, not {PAYLOAD_CONTENT_TYPE}", other.describe()),
            ));
        }
        None => return Err(EnvelopeError::header(F, "content type (3)", "is missing")),
    }
    let crit: Vec<Value> = match int(LABEL_CRIT) {
        Some(Value::Array(labels)) if !labels.is_empty() => labels.clone(),
        Some(_) => {
            return Err(EnvelopeError::header(
                F,
                "crit (2)",
                "must be a non-empty array of labels",
            ));
        }
        None => return Err(EnvelopeError::header(F, "crit (2)", "is missing")),
    };
    for label in &crit {
        if !header.iter().any(|(k, _)| k == label) {
            return Err(EnvelopeError::header(
                F,
                "crit (2)",
                format!(
                    "lists {}, which the protected header does not carry",
                    label.describe()
                ),
            ));
        }
    }
    let is_critical = |name: &str| crit.iter().any(|l| l.as_text() == Some(name));
    let scheme = match named(SIGNING_SCHEME) {
        None => None,
        Some(Value::Text(t)) => Some(t.as_str()),
        Some(_) => {
            return Err(EnvelopeError::header(
                F,
                SIGNING_SCHEME,
                "must be a text string",
            ));
        }
    };
    let times = envelope::check_reserved(
        F,
        scheme,
        epoch(named(SIGNING_TIME), SIGNING_TIME)?,
        epoch(named(AUTHENTIC_SIGNING_TIME), AUTHENTIC_SIGNING_TIME)?,
        epoch(named(EXPIRY), EXPIRY)?,
        &is_critical,
    )?;
    let mut extended = Vec::new();
    for (key, value) in &header {
        match key {
            Value::Text(name) if !envelope::is_reserved(name) => extended.push(Attribute {
                key: name.clone(),
                value: to_json(value),
                critical: is_critical(name),
            }),
            Value::Text(_) => {}
            other => {
                let label = other.as_i64();
                if !matches!(label, Some(LABEL_ALG | LABEL_CRIT | LABEL_CONTENT_TYPE))
                    && crit.contains(other)
                {
                    return Err(EnvelopeError::header(
                        F,
                        &other.describe(),
                        "is a critical header sigil does not understand",
                    ));
                }
            }
        }
    }

    let mut ders: Vec<&[u8]> = Vec::new();
    let mut timestamp = None;
    let mut signing_agent = None;
    for (key, value) in &unprotected {
        if key.as_i64() == Some(LABEL_X5CHAIN) {
            match value {
                Value::Bytes(one) => ders.push(one),
                Value::Array(many) => {
                    for cert in many.iter().take(envelope::MAX_CHAIN_LEN + 1) {
                        match cert {
                            Value::Bytes(der) => ders.push(der),
                            _ => {
                                return Err(EnvelopeError::header(
                                    F,
                                    "x5chain (33)",
                                    "holds an element that is not a byte string",
                                ));
                            }
                        }
                    }
                }
                _ => {
                    return Err(EnvelopeError::header(
                        F,
                        "x5chain (33)",
                        "is neither a byte string nor an array",
                    ));
                }
            }
        } else if key.as_text() == Some(TIMESTAMP_SIGNATURE) {
            match value {
                Value::Bytes(token) => timestamp = Some(token.clone()),
                _ => {
                    return Err(EnvelopeError::header(
                        F,
                        TIMESTAMP_SIGNATURE,
                        "must be a byte string",
                    ));
                }
            }
        } else if key.as_text() == Some(SIGNING_AGENT) {
            match value {
                Value::Text(agent) => signing_agent = Some(agent.clone()),
                _ => {
                    return Err(EnvelopeError::header(
                        F,
                        SIGNING_AGENT,
                        "must be a text string",
                    ));
                }
            }
        }
    }
    let chain = envelope::parse_chain(F, &ders)?;

    let mut signed_bytes = Vec::with_capacity(protected_bytes.len() + payload.len() + 32);
    cbor::encode_array_head(&mut signed_bytes, 4);
    cbor::encode_text(&mut signed_bytes, "Signature1");
    cbor::encode_bytes(&mut signed_bytes, &protected_bytes);
    cbor::encode_bytes(&mut signed_bytes, &[]);
    cbor::encode_bytes(&mut signed_bytes, &payload);
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
        signing_agent,
    })
}

/// A time header: tag 1 around integer epoch seconds.
fn epoch(value: Option<&Value>, name: &str) -> Result<Option<OffsetDateTime>, EnvelopeError> {
    let Some(value) = value else { return Ok(None) };
    let seconds = match value {
        Value::Tag(1, inner) => inner.as_i64(),
        _ => None,
    }
    .ok_or_else(|| {
        EnvelopeError::header(
            F,
            name,
            format!("is {}, not a tag 1 epoch time in seconds", value.describe()),
        )
    })?;
    OffsetDateTime::from_unix_timestamp(seconds)
        .map(Some)
        .map_err(|_| EnvelopeError::header(F, name, format!("{seconds} is out of range")))
}

/// A COSE header value as JSON, for extended attributes.
fn to_json(value: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        Value::Unsigned(n) => J::from(*n),
        Value::Negative(_) => value.as_i64().map(J::from).unwrap_or(J::Null),
        Value::Text(t) => J::String(t.clone()),
        Value::Bytes(b) => J::String(hex::encode(b)),
        Value::Array(items) => J::Array(items.iter().map(to_json).collect()),
        Value::Map(entries) => J::Object(
            entries
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_text()
                            .map(str::to_owned)
                            .unwrap_or_else(|| k.describe()),
                        to_json(v),
                    )
                })
                .collect(),
        ),
        Value::Tag(_, inner) => to_json(inner),
        Value::Bool(b) => J::Bool(*b),
        Value::Null | Value::Undefined => J::Null,
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(J::Number)
            .unwrap_or(J::Null),
    }
}
