//! A small, strict CBOR (RFC 8949) reader for COSE_Sign1 envelopes, and the
//! few encoders the COSE `Sig_structure` needs.
//!
//! Only definite lengths are accepted, nesting and item counts are bounded,
//! and a map with a repeated key is refused: a signature envelope is a small,
//! fixed shape, and anything that could be read two ways is rejected.

/// Deepest nesting of arrays, maps and tags accepted.
pub const MAX_DEPTH: usize = 16;
/// Most items (array elements or map entries) in one container.
pub const MAX_ITEMS: usize = 4096;

/// A decoded CBOR data item.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Major type 0: an unsigned integer.
    Unsigned(u64),
    /// Major type 1: the integer `-1 - n`.
    Negative(u64),
    /// Major type 2: a byte string.
    Bytes(Vec<u8>),
    /// Major type 3: a UTF-8 text string.
    Text(String),
    /// Major type 4: an array.
    Array(Vec<Value>),
    /// Major type 5: a map, in encoded order.
    Map(Vec<(Value, Value)>),
    /// Major type 6: a tagged item.
    Tag(u64, Box<Value>),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// `undefined`.
    Undefined,
    /// A floating-point number (never a Notary Project header value).
    Float(f64),
}

impl Value {
    /// The value as an `i64`, when it is an integer in range.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Unsigned(n) => i64::try_from(*n).ok(),
            Self::Negative(n) => i64::try_from(*n).ok().map(|n| -1 - n),
            _ => None,
        }
    }

    /// The text, when the value is a text string.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text(t) => Some(t),
            _ => None,
        }
    }

    /// A short description for messages.
    pub fn describe(&self) -> String {
        match self {
            Self::Unsigned(n) => n.to_string(),
            Self::Negative(n) => format!("-{}", u128::from(*n) + 1),
            Self::Text(t) => format!("{t:?}"),
            Self::Bytes(b) => format!("a {}-byte string", b.len()),
            Self::Array(_) => "an array".into(),
            Self::Map(_) => "a map".into(),
            Self::Tag(t, _) => format!("tag {t}"),
            Self::Bool(b) => b.to_string(),
            Self::Null => "null".into(),
            Self::Undefined => "undefined".into(),
            Self::Float(f) => f.to_string(),
        }
    }
}

/// Why bytes are not one well-formed CBOR item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CborError {
    /// The input ends inside an item.
    #[error("CBOR input truncated at offset {0}")]
    Truncated(usize),
    /// An indefinite length, a reserved additional-info value or a break.
    #[error(
        "unsupported CBOR encoding at offset {0} (indefinite lengths and reserved values are refused)"
    )]
    Unsupported(usize),
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("CBOR nesting deeper than {MAX_DEPTH} at offset {0}")]
    TooDeep(usize),
    /// A container with more than [`MAX_ITEMS`] items.
    #[error("CBOR container at offset {0} has more than {MAX_ITEMS} items")]
    TooManyItems(usize),
    /// A text string that is not UTF-8.
    #[error("CBOR text string at offset {0} is not UTF-8")]
    BadUtf8(usize),
    /// A map with the same key twice.
    #[error("CBOR map at offset {0} repeats a key")]
    DuplicateKey(usize),
    /// Bytes after the item.
    #[error("{0} trailing bytes after the CBOR item")]
    Trailing(usize),
}

/// Decodes exactly one item from `input`.
pub fn decode(input: &[u8]) -> Result<Value, CborError> {
    let mut d = Decoder { buf: input, pos: 0 };
    let v = d.item(0)?;
    if d.pos != input.len() {
        return Err(CborError::Trailing(input.len() - d.pos));
    }
    Ok(v)
}

struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Decoder<'_> {
    fn byte(&mut self) -> Result<u8, CborError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(CborError::Truncated(self.pos))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: u64) -> Result<&[u8], CborError> {
        let n = usize::try_from(n).map_err(|_| CborError::Truncated(self.pos))?;
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(CborError::Truncated(self.pos))?;
        let out = self
            .buf
            .get(self.pos..end)
            .ok_or(CborError::Truncated(self.pos))?;
        self.pos = end;
        Ok(out)
    }

    fn argument(&mut self, info: u8, at: usize) -> Result<u64, CborError> {
        let width = match info {
            0..=23 => return Ok(u64::from(info)),
            24 => 1,
            25 => 2,
            26 => 4,
            27 => 8,
            _ => return Err(CborError::Unsupported(at)),
        };
        let bytes = self.take(width)?;
        Ok(bytes.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn count(&self, n: u64, at: usize) -> Result<usize, CborError> {
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= MAX_ITEMS)
            .ok_or(CborError::TooManyItems(at))
    }

    fn item(&mut self, depth: usize) -> Result<Value, CborError> {
        let at = self.pos;
        if depth > MAX_DEPTH {
            return Err(CborError::TooDeep(at));
        }
        let initial = self.byte()?;
        let major = initial >> 5;
        let info = initial & 0x1f;
        if major == 7 {
            return match info {
                20 => Ok(Value::Bool(false)),
                21 => Ok(Value::Bool(true)),
                22 => Ok(Value::Null),
                23 => Ok(Value::Undefined),
                25 => {
                    let b = self.take(2)?;
                    let bits = u16::from_be_bytes([
                        b.first().copied().unwrap_or(0),
                        b.get(1).copied().unwrap_or(0),
                    ]);
                    Ok(Value::Float(half_to_f64(bits)))
                }
                26 => {
                    let v = self.argument(26, at)?;
                    Ok(Value::Float(f64::from(f32::from_bits(
                        u32::try_from(v).unwrap_or(0),
                    ))))
                }
                27 => {
                    let v = self.argument(27, at)?;
                    Ok(Value::Float(f64::from_bits(v)))
                }
                _ => Err(CborError::Unsupported(at)),
            };
        }
        let arg = self.argument(info, at)?;
        match major {
            0 => Ok(Value::Unsigned(arg)),
            1 => Ok(Value::Negative(arg)),
            2 => Ok(Value::Bytes(self.take(arg)?.to_vec())),
            3 => {
                let bytes = self.take(arg)?;
                String::from_utf8(bytes.to_vec())
                    .map(Value::Text)
                    .map_err(|_| CborError::BadUtf8(at))
            }
            4 => {
                let n = self.count(arg, at)?;
                let mut items = Vec::with_capacity(n.min(64));
                for _ in 0..n {
                    items.push(self.item(depth + 1)?);
                }
                Ok(Value::Array(items))
            }
            5 => {
                let n = self.count(arg, at)?;
                let mut entries: Vec<(Value, Value)> = Vec::with_capacity(n.min(64));
                for _ in 0..n {
                    let key = self.item(depth + 1)?;
                    if entries.iter().any(|(k, _)| *k == key) {
                        return Err(CborError::DuplicateKey(at));
                    }
                    let value = self.item(depth + 1)?;
                    entries.push((key, value));
                }
                Ok(Value::Map(entries))
            }
            6 => Ok(Value::Tag(arg, Box::new(self.item(depth + 1)?))),
            _ => Err(CborError::Unsupported(at)),
        }
    }
}

fn half_to_f64(bits: u16) -> f64 {
    let exp = i32::from((bits >> 10) & 0x1f);
    let mant = f64::from(bits & 0x3ff);
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let magnitude = match exp {
        0 => mant * 2f64.powi(-24),
        31 if mant == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + mant / 1024.0) * 2f64.powi(exp - 15),
    };
    sign * magnitude
}

/// Appends the head of an item of `major` type with argument `n`.
fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    if n < 24 {
        out.push(m | n as u8);
    } else if let Ok(b) = u8::try_from(n) {
        out.extend_from_slice(&[m | 24, b]);
    } else if let Ok(w) = u16::try_from(n) {
        out.push(m | 25);
        out.extend_from_slice(&w.to_be_bytes());
    } else if let Ok(w) = u32::try_from(n) {
        out.push(m | 26);
        out.extend_from_slice(&w.to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Appends an array head of `len` items.
pub fn encode_array_head(out: &mut Vec<u8>, len: usize) {
    head(out, 4, len as u64);
}

/// Appends a byte string.
pub fn encode_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    head(out, 2, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends a text string.
pub fn encode_text(out: &mut Vec<u8>, text: &str) {
    head(out, 3, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_the_heads_the_sig_structure_uses() {
        let mut out = Vec::new();
        encode_array_head(&mut out, 4);
        encode_text(&mut out, "Signature1");
        encode_bytes(&mut out, &[0u8; 300]);
        encode_bytes(&mut out, &[]);
        encode_bytes(&mut out, b"payload");
        let Ok(Value::Array(items)) = decode(&out) else {
            panic!("not an array")
        };
        assert_eq!(items.len(), 3 + 1);
        assert_eq!(items.first(), Some(&Value::Text("Signature1".into())));
        assert_eq!(items.get(1), Some(&Value::Bytes(vec![0u8; 300])));
    }

    #[test]
    fn indefinite_lengths_repeated_keys_and_trailing_bytes_are_refused() {
        assert_eq!(decode(&[0x9f, 0xff]), Err(CborError::Unsupported(0)));
        assert_eq!(
            decode(&[0xa2, 0x01, 0x01, 0x01, 0x02]),
            Err(CborError::DuplicateKey(0))
        );
        assert_eq!(decode(&[0x01, 0x02]), Err(CborError::Trailing(1)));
        assert_eq!(
            decode(&[0x5a, 0xff, 0xff, 0xff, 0xff]),
            Err(CborError::Truncated(5))
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = vec![0x81; MAX_DEPTH + 2];
        assert!(matches!(decode(&deep), Err(CborError::TooDeep(_))));
    }

    #[test]
    fn negative_integers_read_as_cose_labels() {
        assert_eq!(
            decode(&[0x38, 0x25]).ok().and_then(|v| v.as_i64()),
            Some(-38)
        );
        assert_eq!(decode(&[0x26]).ok().and_then(|v| v.as_i64()), Some(-7));
    }
}
