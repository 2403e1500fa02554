//! The little DER and PEM the providers need: SubjectPublicKeyInfo for keys
//! that arrive as raw parts (Azure's JWK, Vault's raw Ed25519 key), PEM
//! armour, and CRC32C to check Google's `pemCrc32c`.

use base64::Engine as _;

const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(content);
    out
}

fn sequence(parts: &[&[u8]]) -> Vec<u8> {
    tlv(0x30, &parts.concat())
}

/// A positive INTEGER from big-endian magnitude bytes.
fn unsigned_integer(magnitude: &[u8]) -> Vec<u8> {
    let trimmed: Vec<u8> = magnitude.iter().copied().skip_while(|b| *b == 0).collect();
    let mut content = Vec::with_capacity(trimmed.len() + 1);
    if trimmed.first().is_none_or(|b| b & 0x80 != 0) {
        content.push(0);
    }
    content.extend_from_slice(&trimmed);
    tlv(0x02, &content)
}

fn spki(algorithm: &[u8], key: &[u8]) -> Vec<u8> {
    let mut bits = vec![0u8];
    bits.extend_from_slice(key);
    sequence(&[algorithm, &tlv(0x03, &bits)])
}

/// An elliptic curve sigil knows by its JOSE name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// NIST P-256.
    P256,
    /// NIST P-384.
    P384,
    /// NIST P-521 (encoded faithfully; sigil's verifier does not take it).
    P521,
}

impl Curve {
    /// The curve a JOSE `crv` names.
    pub fn from_jose(name: &str) -> Option<Self> {
        match name {
            "P-256" => Some(Self::P256),
            "P-384" => Some(Self::P384),
            "P-521" => Some(Self::P521),
            _ => None,
        }
    }

    fn coordinate_len(self) -> usize {
        match self {
            Self::P256 => 32,
            Self::P384 => 48,
            Self::P521 => 66,
        }
    }
}

/// SubjectPublicKeyInfo of an EC point given by its affine coordinates;
/// `None` when a coordinate is longer than the curve allows.
pub fn ec_spki(curve: Curve, x: &[u8], y: &[u8]) -> Option<Vec<u8>> {
    let n = curve.coordinate_len();
    if x.len() > n || y.len() > n || x.is_empty() || y.is_empty() {
        return None;
    }
    let mut point = vec![0x04];
    for c in [x, y] {
        point.extend(std::iter::repeat_n(0, n - c.len()));
        point.extend_from_slice(c);
    }
    let oid = match curve {
        Curve::P256 => OID_P256,
        Curve::P384 => OID_P384,
        Curve::P521 => OID_P521,
    };
    let algorithm = sequence(&[&tlv(0x06, OID_EC_PUBLIC_KEY), &tlv(0x06, oid)]);
    Some(spki(&algorithm, &point))
}

/// SubjectPublicKeyInfo of an RSA key from its modulus and exponent.
pub fn rsa_spki(n: &[u8], e: &[u8]) -> Vec<u8> {
    let key = sequence(&[&unsigned_integer(n), &unsigned_integer(e)]);
    let algorithm = sequence(&[&tlv(0x06, OID_RSA), &[0x05, 0x00]]);
    spki(&algorithm, &key)
}

/// SubjectPublicKeyInfo of a raw 32-byte Ed25519 key.
pub fn ed25519_spki(key: &[u8; 32]) -> Vec<u8> {
    spki(&sequence(&[&tlv(0x06, OID_ED25519)]), key)
}

/// PEM armour with the `PUBLIC KEY` label.
pub fn public_key_pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN PUBLIC KEY-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(chunk));
        pem.push('\n');
    }
    pem.push_str("-----END PUBLIC KEY-----\n");
    pem
}

/// The DER inside the first PEM block labelled `label`.
pub fn pem_body(pem: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = start + pem.get(start..)?.find(&end)?;
    let b64: String = pem
        .get(start..stop)?
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// CRC32C (Castagnoli), as Google Cloud KMS checksums its answers.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0x82f6_3b78 & mask);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_rfc_3720_check_values() {
        // RFC 3720 B.4: 32 bytes of zeros, of 0xff, and ascending bytes.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn an_rsa_key_built_from_its_parts_is_the_der_rsa_would_encode() {
        use aws_lc_rs::encoding::{AsDer as _, PublicKeyX509Der};
        use aws_lc_rs::rsa::KeySize;
        use aws_lc_rs::signature::{KeyPair as _, RsaKeyPair};
        let pair = RsaKeyPair::generate(KeySize::Rsa2048).unwrap();
        let public = pair.public_key();
        let ours = rsa_spki(
            public.modulus().big_endian_without_leading_zero(),
            public.exponent().big_endian_without_leading_zero(),
        );
        let theirs: PublicKeyX509Der<'_> = public.as_der().unwrap();
        assert_eq!(ours, theirs.as_ref());
    }

    #[test]
    fn ec_coordinates_are_left_padded_and_overlong_ones_refused() {
        let der = ec_spki(Curve::P256, &[1], &[2; 32]).unwrap();
        // 0x04, then x padded to 32 bytes, then y.
        let point = &der[der.len() - 65..];
        assert_eq!(point[0], 4);
        assert_eq!(&point[1..32], &[0u8; 31]);
        assert_eq!(point[32], 1);
        assert!(ec_spki(Curve::P256, &[1; 33], &[2; 32]).is_none());
    }

    #[test]
    fn lengths_over_127_bytes_use_the_long_form() {
        assert_eq!(&tlv(0x04, &[0; 200])[..3], &[0x04, 0x81, 200]);
        assert_eq!(&tlv(0x04, &[0; 300])[..4], &[0x04, 0x82, 0x01, 0x2c]);
    }
}
