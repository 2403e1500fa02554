//! A small, strict DER reader: the one place that turns untrusted ASN.1 bytes
//! into tag/length/value triples for the hand-written parsers (RFC 3161 tokens).
//!
//! It accepts only what DER allows where that matters for security: definite,
//! minimally encoded lengths, low tag numbers, minimal INTEGERs, canonical
//! BOOLEANs and `Z`-terminated GeneralizedTimes. Every element keeps its raw
//! TLV span so callers can hash or verify the exact bytes that were signed.
//! Offsets in errors are absolute positions in the outermost input.

use time::{Date, Month, OffsetDateTime, Time};

/// Universal tag: BOOLEAN.
pub const BOOLEAN: u8 = 0x01;
/// Universal tag: INTEGER.
pub const INTEGER: u8 = 0x02;
/// Universal tag: BIT STRING.
pub const BIT_STRING: u8 = 0x03;
/// Universal tag: OCTET STRING (primitive form; DER forbids the constructed one).
pub const OCTET_STRING: u8 = 0x04;
/// Universal tag: NULL.
pub const NULL: u8 = 0x05;
/// Universal tag: OBJECT IDENTIFIER.
pub const OID: u8 = 0x06;
/// Universal tag: UTF8String.
pub const UTF8_STRING: u8 = 0x0c;
/// Universal tag: UTCTime.
pub const UTC_TIME: u8 = 0x17;
/// Universal tag: GeneralizedTime.
pub const GENERALIZED_TIME: u8 = 0x18;
/// Universal tag: SEQUENCE / SEQUENCE OF (constructed).
pub const SEQUENCE: u8 = 0x30;
/// Universal tag: SET / SET OF (constructed).
pub const SET: u8 = 0x31;

/// Why an OBJECT IDENTIFIER's contents octets are not a DER OID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OidError {
    /// No octets at all.
    Empty,
    /// An arc starts with a 0x80 octet: not the fewest octets (X.690 8.19.2),
    /// so the same OID would have two encodings.
    NonMinimal,
    /// An arc does not fit 64 bits (legal ASN.1, never used by Sigstore).
    TooWide,
    /// The last octet still has its continuation bit set.
    Unterminated,
}

impl OidError {
    /// What is wrong, for error messages.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Empty => "empty contents",
            Self::NonMinimal => "arc with a redundant leading 0x80 octet",
            Self::TooWide => "arc larger than 64 bits",
            Self::Unterminated => "last arc is unterminated",
        }
    }
}

/// The dotted form (`1.2.840.113549.1.7.2`) of an OBJECT IDENTIFIER's
/// contents octets. Since only minimal encodings are accepted, two OIDs are
/// equal exactly when their contents octets are.
///
/// Certificates are parsed for every bundle, each with a dozen extension
/// OIDs, so the text is written straight into one `String`.
pub fn dotted_oid(contents: &[u8]) -> Result<String, OidError> {
    if contents.is_empty() {
        return Err(OidError::Empty);
    }
    let mut out = String::with_capacity(contents.len() * 3);
    let mut acc: u64 = 0;
    let mut in_arc = false;
    for &b in contents {
        if !in_arc && b == 0x80 {
            return Err(OidError::NonMinimal);
        }
        if acc > (u64::MAX >> 7) {
            return Err(OidError::TooWide);
        }
        acc = (acc << 7) | u64::from(b & 0x7f);
        in_arc = b & 0x80 != 0;
        if !in_arc {
            if out.is_empty() {
                // The first subidentifier packs the first two arcs.
                let first = (acc / 40).min(2);
                push_decimal(&mut out, first);
                out.push('.');
                push_decimal(&mut out, acc - first * 40);
            } else {
                out.push('.');
                push_decimal(&mut out, acc);
            }
            acc = 0;
        }
    }
    if in_arc {
        return Err(OidError::Unterminated);
    }
    Ok(out)
}

/// Appends `n` in decimal. Certificates carry a dozen OIDs each, so this
/// skips `core::fmt`, which was most of the cost of writing them out.
fn push_decimal(out: &mut String, mut n: u64) {
    // u64::MAX has 20 digits.
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    for slot in digits.iter_mut().rev() {
        // `n % 10` is below 10, so the cast cannot truncate.
        *slot = b'0' + (n % 10) as u8;
        start -= 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in digits.get(start..).unwrap_or_default() {
        out.push(char::from(d));
    }
}

/// The tag byte of a context-specific `[n]` element (`n` < 31).
pub const fn context(n: u8, constructed: bool) -> u8 {
    0x80 | if constructed { 0x20 } else { 0 } | (n & 0x1f)
}

/// Why DER bytes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DerError {
    /// The input ends before the element it announces.
    #[error("DER input truncated at offset {at}: needs {needed} more bytes")]
    Truncated {
        /// Absolute offset where the missing bytes should start.
        at: usize,
        /// How many bytes are missing.
        needed: usize,
    },
    /// A BER indefinite length (0x80), which DER forbids.
    #[error("indefinite length at offset {at}; only DER definite lengths are accepted")]
    IndefiniteLength {
        /// Absolute offset of the length octets.
        at: usize,
    },
    /// A length encoded in more octets than needed, which DER forbids.
    #[error("non-minimal length encoding at offset {at}")]
    NonMinimalLength {
        /// Absolute offset of the length octets.
        at: usize,
    },
    /// A length of more than four octets (over 4 GiB) or the reserved 0xFF form.
    #[error("unsupported length encoding at offset {at}")]
    LengthTooLarge {
        /// Absolute offset of the length octets.
        at: usize,
    },
    /// A high tag number (tag bits 0x1f), which no structure sigil reads uses.
    #[error("high-tag-number form at offset {at} is not supported")]
    HighTagNumber {
        /// Absolute offset of the tag.
        at: usize,
    },
    /// A different element was found than the structure requires.
    #[error("expected {expected} at offset {at}, found tag 0x{found:02x}")]
    UnexpectedTag {
        /// What the structure requires there.
        expected: &'static str,
        /// The tag byte found.
        found: u8,
        /// Absolute offset of the element.
        at: usize,
    },
    /// A structure ended while a required element was still expected.
    #[error("expected {expected} at offset {at}, found the end of the enclosing element")]
    MissingElement {
        /// What the structure requires there.
        expected: &'static str,
        /// Absolute offset of the end.
        at: usize,
    },
    /// Bytes remain after the last element of a structure.
    #[error("{count} unexpected trailing bytes at offset {at}")]
    TrailingData {
        /// Absolute offset of the first extra byte.
        at: usize,
        /// How many bytes are left.
        count: usize,
    },
    /// A primitive value's contents break its type's DER rules.
    #[error("invalid {what} at offset {at}: {reason}")]
    InvalidValue {
        /// The ASN.1 type.
        what: &'static str,
        /// Absolute offset of the element.
        at: usize,
        /// What rule is broken.
        reason: &'static str,
    },
}

/// One DER element: its tag, contents, and the exact bytes it occupied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// The tag byte.
    pub tag: u8,
    /// The contents octets.
    pub value: &'a [u8],
    /// The whole element (tag, length and contents) as it appeared.
    pub raw: &'a [u8],
    /// Absolute offset of the tag byte in the outermost input.
    pub offset: usize,
}

/// Reads consecutive DER elements from a buffer.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

/// Parses `input` as exactly one DER element with nothing after it.
pub fn parse_single(input: &[u8]) -> Result<Tlv<'_>, DerError> {
    let mut r = Reader::new(input);
    let tlv = r.read_any()?;
    r.finish()?;
    Ok(tlv)
}

impl<'a> Reader<'a> {
    /// A reader over `buf`, whose first byte is at absolute offset 0.
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// Whether every element has been read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Absolute offset of the next unread byte.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// The tag of the next element without consuming it.
    pub fn peek_tag(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// Fails unless every byte has been consumed.
    pub fn finish(&self) -> Result<(), DerError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DerError::TrailingData {
                at: self.offset(),
                count: self.buf.len().saturating_sub(self.pos),
            })
        }
    }

    /// Reads the next element, whatever its tag.
    pub fn read_any(&mut self) -> Result<Tlv<'a>, DerError> {
        let start = self.pos;
        let at = self.base + start;
        let rest = self.buf.get(start..).unwrap_or_default();
        let Some((&tag, after_tag)) = rest.split_first() else {
            return Err(DerError::Truncated { at, needed: 1 });
        };
        if tag & 0x1f == 0x1f {
            return Err(DerError::HighTagNumber { at });
        }
        let len_at = at + 1;
        let Some((&first, after_len_byte)) = after_tag.split_first() else {
            return Err(DerError::Truncated {
                at: len_at,
                needed: 1,
            });
        };
        let (len, len_octets) = if first < 0x80 {
            (usize::from(first), 1)
        } else if first == 0x80 {
            return Err(DerError::IndefiniteLength { at: len_at });
        } else {
            let n = usize::from(first & 0x7f);
            if n > 4 {
                return Err(DerError::LengthTooLarge { at: len_at });
            }
            let Some(octets) = after_len_byte.get(..n) else {
                return Err(DerError::Truncated {
                    at: len_at + 1,
                    needed: n.saturating_sub(after_len_byte.len()),
                });
            };
            // DER: no leading zero octet, and the long form only when the
            // short form cannot express the length.
            if octets.first() == Some(&0) {
                return Err(DerError::NonMinimalLength { at: len_at });
            }
            let len = octets
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            if len < 0x80 {
                return Err(DerError::NonMinimalLength { at: len_at });
            }
            (len, 1 + n)
        };
        let header = 1 + len_octets;
        let body = rest.get(header..).unwrap_or_default();
        let Some(value) = body.get(..len) else {
            return Err(DerError::Truncated {
                at: at + header + body.len(),
                needed: len.saturating_sub(body.len()),
            });
        };
        let total = header + len;
        let raw = rest.get(..total).unwrap_or_default();
        self.pos = start + total;
        Ok(Tlv {
            tag,
            value,
            raw,
            offset: at,
        })
    }

    /// Reads the next element and requires its tag to be `tag`.
    pub fn read(&mut self, tag: u8, expected: &'static str) -> Result<Tlv<'a>, DerError> {
        match self.peek_tag() {
            None => Err(DerError::MissingElement {
                expected,
                at: self.offset(),
            }),
            Some(t) if t != tag => Err(DerError::UnexpectedTag {
                expected,
                found: t,
                at: self.offset(),
            }),
            Some(_) => self.read_any(),
        }
    }

    /// Reads the next element if it has tag `tag`; otherwise reads nothing.
    pub fn read_optional(&mut self, tag: u8) -> Result<Option<Tlv<'a>>, DerError> {
        if self.peek_tag() == Some(tag) {
            self.read_any().map(Some)
        } else {
            Ok(None)
        }
    }
}

impl<'a> Tlv<'a> {
    /// A reader over this element's contents (for constructed elements).
    pub fn reader(&self) -> Reader<'a> {
        Reader {
            buf: self.value,
            pos: 0,
            base: self.offset + (self.raw.len() - self.value.len()),
        }
    }

    fn invalid(&self, what: &'static str, reason: &'static str) -> DerError {
        DerError::InvalidValue {
            what,
            at: self.offset,
            reason,
        }
    }

    /// The contents of an INTEGER, checked to be minimally encoded
    /// (two's complement, big-endian, sign byte included).
    pub fn integer_bytes(&self) -> Result<&'a [u8], DerError> {
        match self.value {
            [] => Err(self.invalid("INTEGER", "empty contents")),
            [0x00, b, ..] if *b < 0x80 => Err(self.invalid("INTEGER", "redundant leading 0x00")),
            [0xff, b, ..] if *b >= 0x80 => Err(self.invalid("INTEGER", "redundant leading 0xff")),
            v => Ok(v),
        }
    }

    /// An INTEGER that must be non-negative and fit in a `u64`.
    pub fn small_uint(&self) -> Result<u64, DerError> {
        let bytes = self.integer_bytes()?;
        if bytes.first().is_some_and(|b| b & 0x80 != 0) {
            return Err(self.invalid("INTEGER", "negative where a count is expected"));
        }
        let digits = match bytes {
            [0x00, rest @ ..] => rest,
            all => all,
        };
        if digits.len() > 8 {
            return Err(self.invalid("INTEGER", "larger than 64 bits"));
        }
        Ok(digits
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    /// A BOOLEAN (DER: exactly one octet, 0x00 or 0xff).
    pub fn boolean(&self) -> Result<bool, DerError> {
        match self.value {
            [0x00] => Ok(false),
            [0xff] => Ok(true),
            _ => Err(self.invalid("BOOLEAN", "must be the single octet 0x00 or 0xff")),
        }
    }

    /// Requires a NULL (empty contents).
    pub fn null(&self) -> Result<(), DerError> {
        if self.value.is_empty() {
            Ok(())
        } else {
            Err(self.invalid("NULL", "non-empty contents"))
        }
    }

    /// An OBJECT IDENTIFIER in dotted form (`1.2.840.113549.1.7.2`).
    pub fn oid(&self) -> Result<String, DerError> {
        dotted_oid(self.value).map_err(|e| self.invalid("OBJECT IDENTIFIER", e.reason()))
    }

    /// A GeneralizedTime in its DER form `YYYYMMDDHHMMSS[.fff]Z` (UTC, no
    /// trailing zeros in the fraction), as RFC 3161 `genTime` is encoded.
    pub fn generalized_time(&self) -> Result<OffsetDateTime, DerError> {
        let bad = |reason| self.invalid("GeneralizedTime", reason);
        let v = self.value;
        let Some((&b'Z', body)) = v.split_last() else {
            return Err(bad("must end with `Z` (UTC)"));
        };
        let (whole, fraction) = match body.iter().position(|&b| b == b'.') {
            Some(dot) => (
                body.get(..dot).unwrap_or_default(),
                Some(body.get(dot + 1..).unwrap_or_default()),
            ),
            None => (body, None),
        };
        if whole.len() != 14 || !whole.iter().all(u8::is_ascii_digit) {
            return Err(bad("date and time must be the 14 digits YYYYMMDDHHMMSS"));
        }
        let num = |from: usize, to: usize| -> u32 {
            whole
                .get(from..to)
                .unwrap_or_default()
                .iter()
                .fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0'))
        };
        let nanos = match fraction {
            None => 0,
            Some(f) => {
                if f.is_empty() || f.len() > 9 || !f.iter().all(u8::is_ascii_digit) {
                    return Err(bad("fraction must be 1 to 9 digits"));
                }
                if f.last() == Some(&b'0') {
                    return Err(bad("fraction has trailing zeros"));
                }
                let digits = f
                    .iter()
                    .fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0'));
                let scale = 10u32.pow(9 - u32::try_from(f.len()).unwrap_or(9));
                digits * scale
            }
        };
        let year = i32::try_from(num(0, 4)).map_err(|_| bad("year out of range"))?;
        let month = u8::try_from(num(4, 6))
            .ok()
            .and_then(|m| Month::try_from(m).ok())
            .ok_or_else(|| bad("month out of range"))?;
        let to_u8 = |n: u32| u8::try_from(n).unwrap_or(u8::MAX);
        let date = Date::from_calendar_date(year, month, to_u8(num(6, 8)))
            .map_err(|_| bad("day out of range"))?;
        let time = Time::from_hms_nano(
            to_u8(num(8, 10)),
            to_u8(num(10, 12)),
            to_u8(num(12, 14)),
            nanos,
        )
        .map_err(|_| bad("time of day out of range"))?;
        Ok(date.with_time(time).assume_utc())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nested_structures_with_exact_spans() {
        // SEQUENCE { INTEGER 5, SET { OID 1.2.840.113549, OCTET STRING "ab" } }
        let der = [
            0x30, 0x12, 0x02, 0x01, 0x05, 0x31, 0x0d, 0x06, 0x06, 0x2a, 0x86, 0x48, 0x86, 0xf7,
            0x0d, 0x04, 0x03, b'a', b'b', b'c',
        ];
        let outer = parse_single(&der).unwrap();
        assert_eq!(outer.tag, SEQUENCE);
        assert_eq!(outer.raw, &der[..]);
        let mut r = outer.reader();
        assert_eq!(r.read(INTEGER, "INTEGER").unwrap().small_uint().unwrap(), 5);
        let set = r.read(SET, "SET").unwrap();
        assert_eq!(set.offset, 5);
        assert!(r.finish().is_ok());
        let mut s = set.reader();
        let oid = s.read(OID, "OID").unwrap();
        assert_eq!(oid.oid().unwrap(), "1.2.840.113549");
        let os = s.read(OCTET_STRING, "OCTET STRING").unwrap();
        assert_eq!(os.value, b"abc");
        assert_eq!(os.offset, 15);
        assert_eq!(os.raw, &der[15..]);
        assert!(s.is_empty());
    }

    #[test]
    fn long_form_lengths_are_read() {
        let mut der = vec![0x04, 0x81, 0x80];
        der.extend(std::iter::repeat_n(7u8, 0x80));
        assert_eq!(parse_single(&der).unwrap().value.len(), 0x80);
        let mut der = vec![0x04, 0x82, 0x01, 0x00];
        der.extend(std::iter::repeat_n(7u8, 0x100));
        assert_eq!(parse_single(&der).unwrap().value.len(), 0x100);
    }

    #[test]
    fn rejects_indefinite_lengths() {
        assert_eq!(
            parse_single(&[0x30, 0x80, 0x00, 0x00]),
            Err(DerError::IndefiniteLength { at: 1 })
        );
    }

    #[test]
    fn rejects_truncated_input() {
        assert!(matches!(parse_single(&[]), Err(DerError::Truncated { .. })));
        assert!(matches!(
            parse_single(&[0x30]),
            Err(DerError::Truncated { .. })
        ));
        assert!(matches!(
            parse_single(&[0x30, 0x82, 0x01]),
            Err(DerError::Truncated { .. })
        ));
    }

    #[test]
    fn rejects_lengths_over_the_buffer() {
        assert_eq!(
            parse_single(&[0x04, 0x05, 1, 2]),
            Err(DerError::Truncated { at: 4, needed: 3 })
        );
        assert!(matches!(
            parse_single(&[0x04, 0x84, 0xff, 0xff, 0xff, 0xff, 0]),
            Err(DerError::Truncated { .. })
        ));
        assert!(matches!(
            parse_single(&[0x04, 0x85, 1, 0, 0, 0, 0]),
            Err(DerError::LengthTooLarge { .. })
        ));
        // A nested length may not run past its parent even if the input goes on.
        let outer = parse_single(&[0x30, 0x02, 0x04, 0x03, 0x00]);
        assert!(outer.is_err());
        let inner = Reader::new(&[0x30, 0x02, 0x04, 0x03, 0x00])
            .read_any()
            .map(|t| t.reader().read_any());
        assert!(matches!(inner, Ok(Err(DerError::Truncated { .. }))));
    }

    #[test]
    fn rejects_non_minimal_lengths() {
        assert_eq!(
            parse_single(&[0x04, 0x81, 0x01, 0x00]),
            Err(DerError::NonMinimalLength { at: 1 })
        );
        assert_eq!(
            parse_single(&[0x04, 0x82, 0x00, 0x81, 0x00]),
            Err(DerError::NonMinimalLength { at: 1 })
        );
    }

    #[test]
    fn rejects_trailing_data_and_high_tags() {
        assert!(matches!(
            parse_single(&[0x05, 0x00, 0x00]),
            Err(DerError::TrailingData { at: 2, count: 1 })
        ));
        assert!(matches!(
            parse_single(&[0x1f, 0x81, 0x00, 0x00]),
            Err(DerError::HighTagNumber { at: 0 })
        ));
    }

    #[test]
    fn unexpected_and_missing_elements_are_named() {
        let mut r = Reader::new(&[0x05, 0x00]);
        assert!(matches!(
            r.read(INTEGER, "version"),
            Err(DerError::UnexpectedTag {
                expected: "version",
                found: 0x05,
                at: 0
            })
        ));
        assert!(r.read_optional(INTEGER).unwrap().is_none());
        r.read(NULL, "NULL").unwrap().null().unwrap();
        assert!(matches!(
            r.read(INTEGER, "serial"),
            Err(DerError::MissingElement { .. })
        ));
    }

    #[test]
    fn integers_must_be_minimal() {
        let int = |v: &[u8]| {
            let mut d = vec![0x02, u8::try_from(v.len()).unwrap()];
            d.extend_from_slice(v);
            d
        };
        assert!(
            parse_single(&int(&[0x00, 0x7f]))
                .unwrap()
                .integer_bytes()
                .is_err()
        );
        assert!(
            parse_single(&int(&[0xff, 0x80]))
                .unwrap()
                .integer_bytes()
                .is_err()
        );
        assert!(parse_single(&int(&[])).unwrap().integer_bytes().is_err());
        assert_eq!(
            parse_single(&int(&[0x00, 0x80]))
                .unwrap()
                .small_uint()
                .unwrap(),
            128
        );
        assert!(parse_single(&int(&[0x80])).unwrap().small_uint().is_err());
        assert_eq!(
            parse_single(&int(&[0xde, 0xad]))
                .unwrap()
                .integer_bytes()
                .unwrap(),
            &[0xde, 0xad]
        );
    }

    #[test]
    fn oids_decode_and_reject_bad_encodings() {
        let oid = |v: &[u8]| {
            let mut d = vec![0x06, u8::try_from(v.len()).unwrap()];
            d.extend_from_slice(v);
            parse_single(&d).unwrap().oid()
        };
        assert_eq!(
            oid(&[
                0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x10, 0x01, 0x04
            ])
            .unwrap(),
            "1.2.840.113549.1.9.16.1.4"
        );
        assert_eq!(oid(&[0x88, 0x37, 0x03]).unwrap(), "2.999.3");
        assert!(oid(&[0x2a, 0x86]).is_err());
        assert!(oid(&[0x2a, 0x80, 0x01]).is_err());
    }

    #[test]
    fn oid_arcs_are_written_in_decimal_at_every_digit_boundary() {
        // Base-128 encoding of one subidentifier, most significant group first.
        let encode = |mut v: u64, out: &mut Vec<u8>| {
            let mut groups = vec![u8::try_from(v & 0x7f).unwrap()];
            v >>= 7;
            while v > 0 {
                groups.push(0x80 | u8::try_from(v & 0x7f).unwrap());
                v >>= 7;
            }
            out.extend(groups.iter().rev());
        };
        let mut arcs: Vec<u64> = vec![0, 1, 9, 10, 99, 100, 127, 128, 16_383, 16_384];
        arcs.extend((1..20).map(|k| 10_u64.pow(k) - 1));
        arcs.extend((1..20).map(|k| 10_u64.pow(k)));
        arcs.push(u64::MAX - 80);
        for &arc in &arcs {
            for first in 0..=2_u64 {
                // Arcs under the first two: 0..=39 for 0 and 1, any for 2.
                let second = if first < 2 { arc % 40 } else { arc };
                let mut der = Vec::new();
                encode(first * 40 + second, &mut der);
                encode(arc, &mut der);
                assert_eq!(
                    dotted_oid(&der).unwrap(),
                    format!("{first}.{second}.{arc}"),
                    "arc {arc}"
                );
            }
        }
        // u64::MAX is written; u64::MAX + 1 (2^64: 0x82, eight 0x80, 0x00) is
        // refused, not wrapped.
        let mut der = vec![0x2a];
        encode(u64::MAX, &mut der);
        assert_eq!(dotted_oid(&der).unwrap(), format!("1.2.{}", u64::MAX));
        let mut wide = vec![0x2a, 0x82];
        wide.extend([0x80; 8]);
        wide.push(0x00);
        assert_eq!(dotted_oid(&wide), Err(OidError::TooWide));
    }

    #[test]
    fn generalized_time_is_der_strict() {
        let gt = |s: &str| {
            let mut d = vec![0x18, u8::try_from(s.len()).unwrap()];
            d.extend_from_slice(s.as_bytes());
            parse_single(&d).unwrap().generalized_time()
        };
        let t = gt("20250612120220Z").unwrap();
        assert_eq!(t.unix_timestamp(), 1_749_729_740);
        let f = gt("20250612120220.25Z").unwrap();
        assert_eq!(f.nanosecond(), 250_000_000);
        assert!(gt("20250612120220.250Z").is_err());
        assert!(gt("20250612120220.Z").is_err());
        assert!(gt("20250612120220").is_err());
        assert!(gt("20250612120220+0100").is_err());
        assert!(gt("20251312120220Z").is_err());
        assert!(gt("20250230120220Z").is_err());
        assert!(gt("2025061212022Z").is_err());
        assert!(gt("20250612126020Z").is_err());
    }

    #[test]
    fn booleans_must_be_canonical() {
        assert!(
            parse_single(&[0x01, 0x01, 0xff])
                .unwrap()
                .boolean()
                .unwrap()
        );
        assert!(
            !parse_single(&[0x01, 0x01, 0x00])
                .unwrap()
                .boolean()
                .unwrap()
        );
        assert!(
            parse_single(&[0x01, 0x01, 0x01])
                .unwrap()
                .boolean()
                .is_err()
        );
        assert_eq!(context(0, true), 0xa0);
        assert_eq!(context(1, false), 0x81);
    }

    /// Walks every element of `r`, descending into constructed ones.
    fn walk(mut r: Reader<'_>, depth: usize) {
        while !r.is_empty() {
            let Ok(tlv) = r.read_any() else { return };
            assert!(tlv.raw.len() >= tlv.value.len() + 2);
            if tlv.tag & 0x20 != 0 && depth < 64 {
                walk(tlv.reader(), depth + 1);
            }
            let _ = (
                tlv.oid(),
                tlv.integer_bytes(),
                tlv.generalized_time(),
                tlv.boolean(),
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_input_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            walk(Reader::new(&bytes), 0);
        }
    }
}
