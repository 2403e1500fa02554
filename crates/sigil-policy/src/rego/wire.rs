//! What the parent and a worker say to each other over the worker's stdin
//! and stdout: frames of a 4-byte big-endian length and that many bytes.
//! The worker greets with [`HELLO`]; a request is three frames (the
//! module's name, its text, the input document as JSON); an answer is one
//! frame of JSON, `{"verdict": {...}}` or `{"error": {"kind", "message"}}`.

use std::io::{self, Read, Write};

use super::{RegoError, RegoVerdict};

/// The worker's first frame: who it is and the protocol it speaks.
pub(super) const HELLO: &[u8] = b"sigil-rego-worker/1";

/// The longest answer a parent reads: verdict texts are cut far below it.
pub(super) const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The longest `error` or `warning` text a worker sends (in characters).
pub(super) const MAX_TEXT_CHARS: usize = 4096;

/// Writes one frame.
pub(super) fn write_frame(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    out.write_all(&len.to_be_bytes())?;
    out.write_all(bytes)
}

/// Reads one frame of at most `max` bytes; `Ok(None)` at a clean end of
/// the stream (before a frame began).
pub(super) fn read_frame(input: &mut impl Read, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes, over the {max} accepted"),
        ));
    }
    let mut bytes = vec![0u8; len];
    input.read_exact(&mut bytes)?;
    Ok(Some(bytes))
}

/// The answer to one request, as the worker writes it.
pub(super) fn answer(result: &Result<RegoVerdict, RegoError>) -> Vec<u8> {
    let cut = |s: &Option<String>| {
        s.as_ref().map(|s| {
            if s.chars().count() > MAX_TEXT_CHARS {
                format!("{}…", s.chars().take(MAX_TEXT_CHARS).collect::<String>())
            } else {
                s.clone()
            }
        })
    };
    let json = match result {
        Ok(v) => serde_json::json!({"verdict": {
            "compliant": v.compliant,
            "error": cut(&v.error),
            "warning": cut(&v.warning),
        }}),
        Err(e) => {
            let kind = match e {
                RegoError::Shape(_) => "shape",
                RegoError::TimeLimit { .. } => "time",
                RegoError::Crashed(_) => "panic",
                _ => "eval",
            };
            let message = match e {
                RegoError::Shape(s) | RegoError::Eval(s) | RegoError::Crashed(s) => s.clone(),
                other => other.to_string(),
            };
            serde_json::json!({"error": {"kind": kind, "message": cut(&Some(message))}})
        }
    };
    json.to_string().into_bytes()
}

/// What a worker's answer says: the verdict, or the error it reported
/// (`time` carries the limit the caller set).
pub(super) fn parse_answer(
    bytes: &[u8],
    time: std::time::Duration,
) -> Result<RegoVerdict, RegoError> {
    let malformed = || RegoError::Crashed("the Rego worker answered something unreadable".into());
    let json: serde_json::Value = serde_json::from_slice(bytes).map_err(|_| malformed())?;
    let text =
        |v: &serde_json::Value, key: &str| v.get(key).and_then(|s| s.as_str()).map(str::to_owned);
    if let Some(v) = json.get("verdict") {
        let compliant = v
            .get("compliant")
            .and_then(serde_json::Value::as_bool)
            .ok_or_else(malformed)?;
        return Ok(RegoVerdict {
            compliant,
            error: text(v, "error"),
            warning: text(v, "warning"),
        });
    }
    let e = json.get("error").ok_or_else(malformed)?;
    let message = text(e, "message").unwrap_or_default();
    Err(match e.get("kind").and_then(serde_json::Value::as_str) {
        Some("shape") => RegoError::Shape(message),
        Some("time") => RegoError::TimeLimit { limit: time },
        Some("panic") => RegoError::Crashed(message),
        _ => RegoError::Eval(message),
    })
}
