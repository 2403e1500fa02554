//! Reading an envelope by its media type: the one entry point over the JWS
//! and COSE readers.

use crate::envelope::{Envelope, EnvelopeError, Format, MAX_ENVELOPE_LEN};

/// Parses an envelope of the given media type (bounded by [`MAX_ENVELOPE_LEN`]).
pub fn envelope(media_type: &str, bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
    let format = Format::from_media_type(media_type)
        .ok_or_else(|| EnvelopeError::MediaType(media_type.to_owned()))?;
    if bytes.len() > MAX_ENVELOPE_LEN {
        return Err(EnvelopeError::TooLarge(bytes.len()));
    }
    match format {
        Format::Jws => crate::jws::parse(bytes),
        Format::Cose => crate::cose::parse(bytes),
    }
}
