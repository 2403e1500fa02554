//! A minimal DER writer: just enough ASN.1 to build certificates, CMS
//! SignedData and RFC 3161 tokens by hand. Every function returns the full
//! tag-length-value encoding so values compose by concatenation.

/// Encodes a definite length in DER form (short form below 128, long form otherwise).
fn length(len: usize) -> Vec<u8> {
    if len < 0x80 {
        // Fits in seven bits by the branch condition.
        return vec![len as u8];
    }
    let bytes = len.to_be_bytes();
    let first = bytes
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(bytes.len() - 1);
    let significant = bytes.get(first..).unwrap_or(&[]);
    let mut out = Vec::with_capacity(1 + significant.len());
    out.push(0x80 | significant.len() as u8);
    out.extend_from_slice(significant);
    out
}

/// Tag-length-value with an arbitrary one-byte tag.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend(length(content.len()));
    out.extend_from_slice(content);
    out
}

/// SEQUENCE of already encoded elements, in the given order.
pub fn seq<I, T>(items: I) -> Vec<u8>
where
    I: IntoIterator<Item = T>,
    T: AsRef<[u8]>,
{
    tlv(0x30, &concat(items))
}

/// SET OF already encoded elements, sorted by their encodings as DER requires.
pub fn set_of<I, T>(items: I) -> Vec<u8>
where
    I: IntoIterator<Item = T>,
    T: AsRef<[u8]>,
{
    tlv(0x31, &sorted_concat(items))
}

/// Concatenation of encodings sorted bytewise (the DER order for SET OF).
pub fn sorted_concat<I, T>(items: I) -> Vec<u8>
where
    I: IntoIterator<Item = T>,
    T: AsRef<[u8]>,
{
    let mut parts: Vec<Vec<u8>> = items.into_iter().map(|i| i.as_ref().to_vec()).collect();
    parts.sort();
    parts.concat()
}

/// Concatenation of encodings in the given order.
pub fn concat<I, T>(items: I) -> Vec<u8>
where
    I: IntoIterator<Item = T>,
    T: AsRef<[u8]>,
{
    let mut out = Vec::new();
    for item in items {
        out.extend_from_slice(item.as_ref());
    }
    out
}

/// OBJECT IDENTIFIER from dotted notation. Arcs that do not parse are
/// treated as 0: OIDs here are compile-time constants of this crate.
pub fn oid(dotted: &str) -> Vec<u8> {
    let arcs: Vec<u64> = dotted.split('.').map(|a| a.parse().unwrap_or(0)).collect();
    let mut body = Vec::new();
    let first = arcs.first().copied().unwrap_or(0);
    let second = arcs.get(1).copied().unwrap_or(0);
    push_base128(&mut body, first * 40 + second);
    for arc in arcs.iter().skip(2) {
        push_base128(&mut body, *arc);
    }
    tlv(0x06, &body)
}

fn push_base128(out: &mut Vec<u8>, mut value: u64) {
    let mut groups = vec![(value & 0x7f) as u8];
    value >>= 7;
    while value > 0 {
        groups.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    groups.reverse();
    out.extend(groups);
}

/// INTEGER from an unsigned big-endian magnitude (leading zeros trimmed,
/// a 0x00 prepended when the high bit is set).
pub fn uint(magnitude: &[u8]) -> Vec<u8> {
    let start = magnitude
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(magnitude.len());
    let trimmed = magnitude.get(start..).unwrap_or(&[]);
    let mut body = Vec::with_capacity(trimmed.len() + 1);
    match trimmed.first() {
        None => body.push(0),
        Some(b) if b & 0x80 != 0 => {
            body.push(0);
            body.extend_from_slice(trimmed);
        }
        Some(_) => body.extend_from_slice(trimmed),
    }
    tlv(0x02, &body)
}

/// INTEGER from a u64.
pub fn uint64(value: u64) -> Vec<u8> {
    uint(&value.to_be_bytes())
}

/// BOOLEAN.
pub fn boolean(value: bool) -> Vec<u8> {
    tlv(0x01, &[if value { 0xff } else { 0x00 }])
}

/// NULL.
pub fn null() -> Vec<u8> {
    vec![0x05, 0x00]
}

/// BIT STRING holding whole bytes (zero unused bits).
pub fn bit_string(bytes: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(bytes);
    tlv(0x03, &body)
}

/// BIT STRING for a named-bit list (e.g. KeyUsage): trailing zero bits are
/// dropped as DER requires. `bits` holds the bit numbers that are set.
pub fn named_bits(bits: &[u8]) -> Vec<u8> {
    let Some(max) = bits.iter().max().copied() else {
        return tlv(0x03, &[0]);
    };
    let nbytes = usize::from(max / 8) + 1;
    let mut bytes = vec![0u8; nbytes];
    for bit in bits {
        if let Some(b) = bytes.get_mut(usize::from(bit / 8)) {
            *b |= 0x80 >> (bit % 8);
        }
    }
    let unused = 7 - (max % 8);
    let mut body = vec![unused];
    body.extend(bytes);
    tlv(0x03, &body)
}

/// OCTET STRING.
pub fn octet_string(bytes: &[u8]) -> Vec<u8> {
    tlv(0x04, bytes)
}

/// UTF8String.
pub fn utf8(s: &str) -> Vec<u8> {
    tlv(0x0c, s.as_bytes())
}

/// PrintableString (the caller keeps to the printable character set).
pub fn printable(s: &str) -> Vec<u8> {
    tlv(0x13, s.as_bytes())
}

/// IA5String.
pub fn ia5(s: &str) -> Vec<u8> {
    tlv(0x16, s.as_bytes())
}

/// UTCTime `YYMMDDHHMMSSZ` (valid for 1950..2049).
pub fn utc_time(unix: i64) -> Vec<u8> {
    let c = crate::time::Civil::from_unix(unix);
    let s = format!(
        "{:02}{:02}{:02}{:02}{:02}{:02}Z",
        c.year.rem_euclid(100),
        c.month,
        c.day,
        c.hour,
        c.minute,
        c.second
    );
    tlv(0x17, s.as_bytes())
}

/// GeneralizedTime `YYYYMMDDHHMMSSZ`.
pub fn generalized_time(unix: i64) -> Vec<u8> {
    let c = crate::time::Civil::from_unix(unix);
    let s = format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    );
    tlv(0x18, s.as_bytes())
}

/// X.509 `Time`: UTCTime through 2049, GeneralizedTime from 2050 (RFC 5280 §4.1.2.5).
pub fn x509_time(unix: i64) -> Vec<u8> {
    let year = crate::time::Civil::from_unix(unix).year;
    if (1950..2050).contains(&year) {
        utc_time(unix)
    } else {
        generalized_time(unix)
    }
}

/// Constructed context-specific tag `[n]` around content (EXPLICIT tagging,
/// or IMPLICIT tagging of a constructed type such as SEQUENCE/SET).
pub fn ctx_constructed(n: u8, content: &[u8]) -> Vec<u8> {
    tlv(0xa0 | n, content)
}

/// Primitive context-specific tag `[n]` (IMPLICIT tagging of a primitive type).
pub fn ctx_primitive(n: u8, content: &[u8]) -> Vec<u8> {
    tlv(0x80 | n, content)
}

/// Returns the content octets of a DER TLV (skipping tag and length), or
/// the input unchanged when it is not a well-formed TLV.
pub fn content_of(encoded: &[u8]) -> &[u8] {
    let Some(first_len) = encoded.get(1).copied() else {
        return encoded;
    };
    let header = if first_len < 0x80 {
        2
    } else {
        2 + usize::from(first_len & 0x7f)
    };
    encoded.get(header..).unwrap_or(encoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_lengths_in_short_and_long_form() {
        assert_eq!(tlv(0x04, &[1, 2]), vec![0x04, 2, 1, 2]);
        let long = tlv(0x04, &[0u8; 200]);
        assert_eq!(long.get(..3), Some(&[0x04, 0x81, 200][..]));
        let longer = tlv(0x04, &[0u8; 300]);
        assert_eq!(longer.get(..4), Some(&[0x04, 0x82, 0x01, 0x2c][..]));
    }

    #[test]
    fn encodes_oids_and_integers() {
        assert_eq!(
            oid("1.2.840.10045.4.3.3"),
            vec![0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03]
        );
        assert_eq!(uint64(0), vec![0x02, 0x01, 0x00]);
        assert_eq!(uint64(128), vec![0x02, 0x02, 0x00, 0x80]);
        assert_eq!(uint(&[0, 0, 5]), vec![0x02, 0x01, 0x05]);
    }

    #[test]
    fn drops_trailing_zero_bits_in_named_bit_lists() {
        // digitalSignature only
        assert_eq!(named_bits(&[0]), vec![0x03, 0x02, 0x07, 0x80]);
        // keyCertSign + cRLSign
        assert_eq!(named_bits(&[5, 6]), vec![0x03, 0x02, 0x01, 0x06]);
    }

    #[test]
    fn sorts_set_of_members() {
        assert_eq!(
            set_of([vec![0x02, 0x01, 0x05], vec![0x02, 0x01, 0x01]]),
            vec![0x31, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x05]
        );
    }

    #[test]
    fn picks_utctime_before_2050() {
        assert_eq!(x509_time(0), tlv(0x17, b"700101000000Z"));
        assert_eq!(x509_time(2_524_608_000), tlv(0x18, b"20500101000000Z"));
    }
}
