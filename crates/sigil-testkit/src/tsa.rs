//! A test RFC 3161 timestamp authority: a P-384 root and a P-256 signing
//! certificate (critical timeStamping EKU), issuing TimeStampResp
//! structures whose token is CMS SignedData over a TSTInfo; or, like GitHub's
//! timestamp authority, a P-384 signing certificate that signs with SHA-384.

use sha2::{Digest as _, Sha256, Sha384};

use crate::der;
use crate::keys::KeyPair;
use crate::x509::{
    CertTemplate, CertifiedKey, Extension, Name, OID_EKU_TIME_STAMPING, self_signed_ca, serial_from,
};

const OID_SIGNED_DATA: &str = "1.2.840.113549.1.7.2";
const OID_TST_INFO: &str = "1.2.840.113549.1.9.16.1.4";
const OID_CONTENT_TYPE: &str = "1.2.840.113549.1.9.3";
const OID_MESSAGE_DIGEST: &str = "1.2.840.113549.1.9.4";
const OID_SIGNING_CERT_V2: &str = "1.2.840.113549.1.9.16.2.47";
const OID_SHA256: &str = "2.16.840.1.101.3.4.2.1";
const OID_SHA384: &str = "2.16.840.1.101.3.4.2.2";
/// The TSA policy OID written into TSTInfo (Sigstore's timestamp arc).
pub const TSA_POLICY_OID: &str = "1.3.6.1.4.1.57264.2";

/// A timestamp authority with its certificate chain.
#[derive(Clone, Debug)]
pub struct Tsa {
    /// The TSA root (self-signed, P-384).
    pub root: CertifiedKey,
    /// The signing certificate (P-256, issued by the root).
    pub signer: CertifiedKey,
    /// URI written into the trusted root.
    pub uri: String,
    /// The digest the signer signs with (SignerInfo `digestAlgorithm`).
    pub digest: TsaDigest,
    seed: u64,
}

/// The digest a TSA's signer uses over the signed attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsaDigest {
    /// SHA-256 with a P-256 signing key (the public-good TSA).
    Sha256,
    /// SHA-384 with a P-384 signing key (GitHub's TSA).
    Sha384,
}

/// How to mint one timestamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimestampRequest {
    /// The bytes being timestamped (their SHA-256 is the message imprint).
    pub message: Vec<u8>,
    /// `genTime`, Unix seconds.
    pub gen_time: i64,
    /// Embed the signing and root certificates in the token.
    pub embed_certs: bool,
    /// Replace the imprint with the SHA-256 of other bytes (a wrong imprint).
    pub imprint_override: Option<[u8; 32]>,
}

impl Tsa {
    /// A TSA whose keys derive from `seed` and `label`, certificates valid over `[not_before, not_after]`.
    pub fn new(seed: u64, label: &str, uri: &str, not_before: i64, not_after: i64) -> Self {
        Self::with_digest(seed, label, uri, not_before, not_after, TsaDigest::Sha256)
    }

    /// As [`Tsa::new`], with the signer's key and digest chosen by `digest`.
    pub fn with_digest(
        seed: u64,
        label: &str,
        uri: &str,
        not_before: i64,
        not_after: i64,
        digest: TsaDigest,
    ) -> Self {
        let root = self_signed_ca(
            seed,
            &format!("{label}/root"),
            KeyPair::p384(seed, &format!("{label}/root")),
            Name::new("sigil-testkit.dev", "sigstore-tsa-selfsigned"),
            not_before,
            not_after,
        );
        let key = match digest {
            TsaDigest::Sha256 => KeyPair::p256(seed, &format!("{label}/signer")),
            TsaDigest::Sha384 => KeyPair::p384(seed, &format!("{label}/signer")),
        };
        let name = Name::new("sigil-testkit.dev", "sigstore-tsa");
        let serial = serial_from(seed, &format!("{label}/signer"));
        let template = CertTemplate {
            serial: serial.clone(),
            issuer: root.name.clone(),
            subject: name.clone(),
            not_before,
            not_after,
            spki: key.spki_der(),
            extensions: vec![
                Extension::key_usage(&[0]),
                Extension::subject_key_id(&key),
                Extension::authority_key_id(&root.key),
                Extension::ext_key_usage(true, &[OID_EKU_TIME_STAMPING]),
            ],
        };
        let signer = CertifiedKey {
            cert_der: template.sign(&root.key),
            name,
            key,
            serial,
        };
        Tsa {
            root,
            signer,
            uri: uri.to_owned(),
            digest,
            seed,
        }
    }

    /// The chain for the trusted root: signing certificate first, then the root.
    pub fn chain_der(&self) -> Vec<Vec<u8>> {
        vec![self.signer.cert_der.clone(), self.root.cert_der.clone()]
    }

    /// The DER TSTInfo for a request.
    pub fn tst_info(&self, req: &TimestampRequest) -> Vec<u8> {
        let imprint = req
            .imprint_override
            .unwrap_or_else(|| Sha256::digest(&req.message).into());
        let serial = serial_from(
            self.seed,
            &format!("tst/{}/{}", hex::encode(imprint), req.gen_time),
        );
        der::seq([
            der::uint64(1),
            der::oid(TSA_POLICY_OID),
            der::seq([
                der::seq([der::oid(OID_SHA256)]),
                der::octet_string(&imprint),
            ]),
            der::uint(&serial),
            der::generalized_time(req.gen_time),
        ])
    }

    /// A DER TimeStampResp (status granted + token), the bytes a bundle's `signedTimestamp` holds.
    pub fn timestamp(&self, req: &TimestampRequest) -> Vec<u8> {
        let tst = self.tst_info(req);
        let (digest_alg, tst_digest) = match self.digest {
            TsaDigest::Sha256 => (
                der::seq([der::oid(OID_SHA256)]),
                Sha256::digest(&tst).to_vec(),
            ),
            TsaDigest::Sha384 => (
                der::seq([der::oid(OID_SHA384)]),
                Sha384::digest(&tst).to_vec(),
            ),
        };
        let ess_cert_id = der::seq([
            der::octet_string(&Sha256::digest(&self.signer.cert_der)),
            der::seq([
                // GeneralNames { directoryName [4] Name }
                der::seq([der::ctx_constructed(4, &self.root.name.to_der())]),
                der::uint(&self.signer.serial),
            ]),
        ]);
        let attrs = [
            der::seq([
                der::oid(OID_CONTENT_TYPE),
                der::set_of([der::oid(OID_TST_INFO)]),
            ]),
            der::seq([
                der::oid(OID_MESSAGE_DIGEST),
                der::set_of([der::octet_string(&tst_digest)]),
            ]),
            der::seq([
                der::oid(OID_SIGNING_CERT_V2),
                der::set_of([der::seq([der::seq([ess_cert_id])])]),
            ]),
        ];
        let attrs_content = der::sorted_concat(attrs);
        // The signature covers the attributes re-tagged as an explicit SET OF (RFC 5652 §5.4).
        let signature = self.signer.key.sign(&der::tlv(0x31, &attrs_content));
        let signer_info = der::seq([
            der::uint64(1),
            der::seq([self.root.name.to_der(), der::uint(&self.signer.serial)]),
            digest_alg.clone(),
            der::ctx_constructed(0, &attrs_content),
            self.signer.key.signature_algorithm_der(),
            der::octet_string(&signature),
        ]);
        let mut signed_data = vec![
            der::uint64(3),
            der::set_of([digest_alg]),
            der::seq([
                der::oid(OID_TST_INFO),
                der::ctx_constructed(0, &der::octet_string(&tst)),
            ]),
        ];
        if req.embed_certs {
            signed_data.push(der::ctx_constructed(
                0,
                &der::sorted_concat([self.signer.cert_der.clone(), self.root.cert_der.clone()]),
            ));
        }
        signed_data.push(der::set_of([signer_info]));
        let token = der::seq([
            der::oid(OID_SIGNED_DATA),
            der::ctx_constructed(0, &der::seq(signed_data)),
        ]);
        der::seq([der::seq([der::uint64(0)]), token])
    }
}

/// The TimeStampToken (ContentInfo) inside a TimeStampResp, for tools that want the bare token.
pub fn token_of(response: &[u8]) -> Vec<u8> {
    // TimeStampResp = SEQ { status SEQ, token }: skip the status element.
    let content = der::content_of(response);
    let status_len = der_element_len(content);
    content.get(status_len..).unwrap_or(&[]).to_vec()
}

fn der_element_len(encoded: &[u8]) -> usize {
    let Some(first) = encoded.get(1).copied() else {
        return encoded.len();
    };
    if first < 0x80 {
        return 2 + usize::from(first);
    }
    let n = usize::from(first & 0x7f);
    let mut len = 0usize;
    for b in encoded.get(2..2 + n).unwrap_or(&[]) {
        len = (len << 8) | usize::from(*b);
    }
    2 + n + len
}
