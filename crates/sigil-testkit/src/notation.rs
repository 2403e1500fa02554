//! Notary Project test material minted offline: a CA with an intermediate
//! and a code signing leaf (names with C, ST, O, CN; optional OCSP and CRL
//! endpoints), JWS and COSE envelopes over a target descriptor (either
//! signing scheme, any signed attributes, a timestamp from a [`Tsa`]),
//! CRLs and OCSP responses. Real notation-go signatures come from the
//! testkit's Go signer; these cover what notation-go will not produce
//! (tampered, malformed or unusual envelopes) and run without a build.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

use crate::der;
use crate::keys::KeyPair;
use crate::tsa::{TimestampRequest, Tsa, token_of};
use crate::x509::{CertTemplate, CertifiedKey, Extension, Name, self_signed_ca, serial_from};

const CODE_SIGNING: &str = "1.3.6.1.5.5.7.3.3";

/// What the signing certificate looks like.
#[derive(Clone, Debug)]
pub struct LeafSpec {
    /// Its subject.
    pub subject: Name,
    /// Validity start, Unix seconds.
    pub not_before: i64,
    /// Validity end, Unix seconds.
    pub not_after: i64,
    /// An OCSP responder URL (authorityInfoAccess).
    pub ocsp_url: Option<String>,
    /// A CRL distribution point.
    pub crl_url: Option<String>,
    /// Extra extended key usages beside codeSigning.
    pub extra_ekus: Vec<&'static str>,
}

impl LeafSpec {
    /// A leaf `C=US, ST=WA, O=<org>, CN=<cn>` valid over the window.
    pub fn new(org: &str, cn: &str, not_before: i64, not_after: i64) -> Self {
        Self {
            subject: Name::full("US", "WA", org, cn),
            not_before,
            not_after,
            ocsp_url: None,
            crl_url: None,
            extra_ekus: Vec::new(),
        }
    }
}

/// A root, an intermediate and a signing certificate.
#[derive(Clone, Debug)]
pub struct NotaryPki {
    /// The self-signed root (P-384).
    pub root: CertifiedKey,
    /// The intermediate CA (P-384), which signs the leaf, its CRLs and OCSP answers.
    pub intermediate: CertifiedKey,
    /// The signing certificate (P-256) and its key.
    pub leaf: CertifiedKey,
}

impl NotaryPki {
    /// A PKI whose keys derive from `seed` and `label`; the CAs are valid
    /// from `ca_from` to `ca_to`.
    pub fn new(seed: u64, label: &str, ca_from: i64, ca_to: i64, leaf: &LeafSpec) -> Self {
        let root_key = KeyPair::p384(seed, &format!("{label}/root"));
        let root = self_signed_ca(
            seed,
            &format!("{label}/root"),
            root_key,
            Name::full("US", "WA", "sigil-testkit", &format!("{label} root")),
            ca_from,
            ca_to,
        );
        let int_key = KeyPair::p384(seed, &format!("{label}/intermediate"));
        let int_name = Name::full(
            "US",
            "WA",
            "sigil-testkit",
            &format!("{label} intermediate"),
        );
        let int_serial = serial_from(seed, &format!("{label}/intermediate"));
        let int_der = CertTemplate {
            serial: int_serial.clone(),
            issuer: root.name.clone(),
            subject: int_name.clone(),
            not_before: ca_from,
            not_after: ca_to,
            spki: int_key.spki_der(),
            extensions: vec![
                Extension::key_usage(&[5, 6]),
                Extension::basic_constraints(true, Some(0)),
                Extension::subject_key_id(&int_key),
                Extension::authority_key_id(&root.key),
            ],
        }
        .sign(&root.key);
        let intermediate = CertifiedKey {
            cert_der: int_der,
            name: int_name,
            key: int_key,
            serial: int_serial,
        };
        let leaf_key = KeyPair::p256(seed, &format!("{label}/leaf"));
        let leaf_serial = serial_from(seed, &format!("{label}/leaf"));
        let mut ekus = vec![CODE_SIGNING];
        ekus.extend(leaf.extra_ekus.iter().copied());
        let mut extensions = vec![
            Extension::key_usage(&[0]),
            Extension::basic_constraints(false, None),
            Extension::ext_key_usage(false, &ekus),
            Extension::subject_key_id(&leaf_key),
            Extension::authority_key_id(&intermediate.key),
        ];
        if let Some(url) = &leaf.ocsp_url {
            let access = der::seq([
                der::oid("1.3.6.1.5.5.7.48.1"),
                der::ctx_primitive(6, url.as_bytes()),
            ]);
            extensions.push(Extension::new(
                "1.3.6.1.5.5.7.1.1",
                false,
                der::seq([access]),
            ));
        }
        if let Some(url) = &leaf.crl_url {
            let full_name = der::ctx_constructed(0, &der::ctx_primitive(6, url.as_bytes()));
            let point = der::seq([der::ctx_constructed(0, &full_name)]);
            extensions.push(Extension::new("2.5.29.31", false, der::seq([point])));
        }
        let leaf_der = CertTemplate {
            serial: leaf_serial.clone(),
            issuer: intermediate.name.clone(),
            subject: leaf.subject.clone(),
            not_before: leaf.not_before,
            not_after: leaf.not_after,
            spki: leaf_key.spki_der(),
            extensions,
        }
        .sign(&intermediate.key);
        Self {
            root,
            intermediate,
            leaf: CertifiedKey {
                cert_der: leaf_der,
                name: leaf.subject.clone(),
                key: leaf_key,
                serial: leaf_serial,
            },
        }
    }

    /// The chain an envelope carries: leaf, intermediate, root.
    pub fn chain(&self) -> Vec<Vec<u8>> {
        vec![
            self.leaf.cert_der.clone(),
            self.intermediate.cert_der.clone(),
            self.root.cert_der.clone(),
        ]
    }
}

/// Envelope format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `application/jose+json`.
    Jws,
    /// `application/cose`.
    Cose,
}

impl Format {
    /// The envelope media type.
    pub fn media_type(self) -> &'static str {
        match self {
            Self::Jws => "application/jose+json",
            Self::Cose => "application/cose",
        }
    }
}

/// How to sign.
#[derive(Clone, Debug)]
pub struct SignSpec {
    /// Envelope format.
    pub format: Format,
    /// `notary.x509` or `notary.x509.signingAuthority`.
    pub scheme: &'static str,
    /// The signing time (or authentic signing time), Unix seconds.
    pub signing_time: i64,
    /// The expiry, Unix seconds.
    pub expiry: Option<i64>,
    /// Extended attributes: key, string value, critical.
    pub extended: Vec<(String, String, bool)>,
    /// The target's media type.
    pub media_type: String,
    /// The target's digest.
    pub digest: String,
    /// The target's size.
    pub size: u64,
    /// A timestamp over the signature from this TSA at this time.
    pub timestamp: Option<(Tsa, i64)>,
}

impl SignSpec {
    /// A `notary.x509` signature of an OCI image manifest.
    pub fn new(format: Format, digest: &str, size: u64, signing_time: i64) -> Self {
        Self {
            format,
            scheme: "notary.x509",
            signing_time,
            expiry: None,
            extended: Vec::new(),
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            digest: digest.into(),
            size,
            timestamp: None,
        }
    }
}

/// The payload document for a target.
pub fn payload(media_type: &str, digest: &str, size: u64) -> Vec<u8> {
    serde_json::json!({
        "targetArtifact": {"mediaType": media_type, "digest": digest, "size": size}
    })
    .to_string()
    .into_bytes()
}

/// Signs an envelope with the PKI's leaf.
pub fn sign(pki: &NotaryPki, spec: &SignSpec) -> Vec<u8> {
    let body = payload(&spec.media_type, &spec.digest, spec.size);
    match spec.format {
        Format::Jws => sign_jws(pki, spec, &body),
        Format::Cose => sign_cose(pki, spec, &body),
    }
}

fn time_key(scheme: &str) -> &'static str {
    if scheme == "notary.x509.signingAuthority" {
        "io.cncf.notary.authenticSigningTime"
    } else {
        "io.cncf.notary.signingTime"
    }
}

/// The media type of OCI image manifests.
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The artifact type of Notary Project signature manifests.
pub const SIGNATURE_ARTIFACT_TYPE: &str = "application/vnd.cncf.notary.signature";

/// `sha256:<hex>` of `bytes`.
fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

fn descriptor(media_type: &str, bytes: &[u8]) -> serde_json::Value {
    serde_json::json!({"mediaType": media_type, "digest": sha256_digest(bytes), "size": bytes.len()})
}

/// An image in a repository as a registry serves it, with the Notary
/// Project signatures pushed for it as OCI referrers: each file by its
/// path under the registry root, without the leading `/`
/// (`v2/REPO/manifests/DIGEST`, `v2/REPO/referrers/DIGEST`,
/// `v2/REPO/blobs/DIGEST`), ready for [`crate::tuf::Mirror::serve`].
#[derive(Clone, Debug)]
pub struct RegistryImage {
    /// The repository path (`acme/app`).
    pub repository: String,
    /// The image manifest's bytes.
    pub manifest: Vec<u8>,
    /// Its config blob.
    pub config: Vec<u8>,
    /// Its digest, `sha256:<hex>`.
    pub digest: String,
    /// The signature manifests pushed for it, in order.
    pub signatures: Vec<Vec<u8>>,
    /// Every envelope pushed, by its signature manifest's position.
    pub envelopes: Vec<Vec<u8>>,
}

impl RegistryImage {
    /// An image manifest (an empty config, no layers) unique to `label`,
    /// unsigned so far.
    pub fn new(repository: &str, label: &str) -> Self {
        let config = serde_json::json!({"label": label}).to_string().into_bytes();
        let manifest = serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": descriptor("application/vnd.oci.image.config.v1+json", &config),
            "layers": [],
        })
        .to_string()
        .into_bytes();
        Self {
            repository: repository.to_owned(),
            digest: sha256_digest(&manifest),
            manifest,
            config,
            signatures: Vec::new(),
            envelopes: Vec::new(),
        }
    }

    /// A [`SignSpec`] of this image signed at `signing_time`.
    pub fn spec(&self, format: Format, signing_time: i64) -> SignSpec {
        SignSpec::new(
            format,
            &self.digest,
            self.manifest.len() as u64,
            signing_time,
        )
    }

    /// Pushes `envelope` (of `format`) as a signature referrer of the image.
    pub fn push_signature(&mut self, format: Format, envelope: Vec<u8>) {
        let empty = b"{}";
        let signature = serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "artifactType": SIGNATURE_ARTIFACT_TYPE,
            "config": descriptor("application/vnd.oci.empty.v1+json", empty),
            "layers": [descriptor(format.media_type(), &envelope)],
            "subject": descriptor(OCI_MANIFEST, &self.manifest),
        })
        .to_string()
        .into_bytes();
        self.signatures.push(signature);
        self.envelopes.push(envelope);
    }

    /// The image manifest with its config blob, as
    /// [`crate::registry::Pusher::manifest`] pushes it.
    pub fn image_manifest(&self) -> crate::cosign::OciManifest {
        crate::cosign::OciManifest {
            media_type: OCI_MANIFEST,
            json: self.manifest.clone(),
            blobs: vec![self.config.clone()],
        }
    }

    /// Each signature manifest with its blobs (the empty config, the
    /// envelope), as [`crate::registry::Pusher::referrer`] pushes it.
    pub fn signature_manifests(&self) -> Vec<crate::cosign::OciManifest> {
        self.signatures
            .iter()
            .zip(&self.envelopes)
            .map(|(signature, envelope)| crate::cosign::OciManifest {
                media_type: OCI_MANIFEST,
                json: signature.clone(),
                blobs: vec![b"{}".to_vec(), envelope.clone()],
            })
            .collect()
    }

    /// The files a registry serves for the image and its signatures.
    pub fn files(&self) -> std::collections::BTreeMap<String, Vec<u8>> {
        let repo = &self.repository;
        let mut files = std::collections::BTreeMap::new();
        files.insert("v2/".to_owned(), Vec::new());
        files.insert(
            format!("v2/{repo}/manifests/{}", self.digest),
            self.manifest.clone(),
        );
        files.insert(
            format!("v2/{repo}/blobs/{}", sha256_digest(&self.config)),
            self.config.clone(),
        );
        let mut entries = Vec::new();
        for (signature, envelope) in self.signatures.iter().zip(&self.envelopes) {
            let mut entry = descriptor(OCI_MANIFEST, signature);
            if let Some(fields) = entry.as_object_mut() {
                fields.insert("artifactType".into(), SIGNATURE_ARTIFACT_TYPE.into());
            }
            entries.push(entry);
            files.insert(
                format!("v2/{repo}/manifests/{}", sha256_digest(signature)),
                signature.clone(),
            );
            files.insert(
                format!("v2/{repo}/blobs/{}", sha256_digest(envelope)),
                envelope.clone(),
            );
        }
        files.insert(
            format!("v2/{repo}/blobs/{}", sha256_digest(b"{}")),
            b"{}".to_vec(),
        );
        let referrers = serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": entries,
        })
        .to_string()
        .into_bytes();
        files.insert(format!("v2/{repo}/referrers/{}", self.digest), referrers);
        files
    }
}

/// An ECDSA DER signature as the fixed-width `r || s` JOSE and COSE use.
pub fn fixed_signature(der_sig: &[u8], width: usize) -> Vec<u8> {
    let body = der::content_of(der_sig);
    let mut out = Vec::with_capacity(width * 2);
    let mut rest = body;
    for _ in 0..2 {
        let len = usize::from(rest.get(1).copied().unwrap_or(0));
        let int = rest.get(2..2 + len).unwrap_or_default();
        let int: Vec<u8> = int.iter().copied().skip_while(|&b| b == 0).collect();
        out.extend(std::iter::repeat_n(0u8, width.saturating_sub(int.len())));
        out.extend_from_slice(&int);
        rest = rest.get(2 + len..).unwrap_or_default();
    }
    out
}

fn leaf_signature(pki: &NotaryPki, message: &[u8]) -> Vec<u8> {
    let width = match pki.leaf.key {
        KeyPair::P384(_) => 48,
        _ => 32,
    };
    fixed_signature(&pki.leaf.key.sign(message), width)
}

fn timestamp_of(spec: &SignSpec, signature: &[u8]) -> Option<Vec<u8>> {
    spec.timestamp.as_ref().map(|(tsa, at)| {
        token_of(&tsa.timestamp(&TimestampRequest {
            message: signature.to_vec(),
            gen_time: *at,
            embed_certs: true,
            imprint_override: None,
        }))
    })
}

fn rfc3339(unix: i64) -> String {
    crate::time::rfc3339(unix)
}

fn sign_jws(pki: &NotaryPki, spec: &SignSpec, body: &[u8]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut crit = vec!["io.cncf.notary.signingScheme".to_owned()];
    header.insert("alg".into(), "ES256".into());
    header.insert(
        "cty".into(),
        "application/vnd.cncf.notary.payload.v1+json".into(),
    );
    header.insert("io.cncf.notary.signingScheme".into(), spec.scheme.into());
    header.insert(
        time_key(spec.scheme).into(),
        rfc3339(spec.signing_time).into(),
    );
    if spec.scheme == "notary.x509.signingAuthority" {
        crit.push("io.cncf.notary.authenticSigningTime".into());
    }
    if let Some(e) = spec.expiry {
        header.insert("io.cncf.notary.expiry".into(), rfc3339(e).into());
        crit.push("io.cncf.notary.expiry".into());
    }
    for (k, v, critical) in &spec.extended {
        header.insert(k.clone(), v.clone().into());
        if *critical {
            crit.push(k.clone());
        }
    }
    header.insert("crit".into(), crit.into());
    let protected = URL_SAFE_NO_PAD.encode(serde_json::Value::Object(header).to_string());
    let payload = URL_SAFE_NO_PAD.encode(body);
    let signature = leaf_signature(pki, format!("{protected}.{payload}").as_bytes());
    let mut unprotected = serde_json::Map::new();
    let x5c: Vec<String> = pki.chain().iter().map(|c| STANDARD.encode(c)).collect();
    unprotected.insert("x5c".into(), x5c.into());
    unprotected.insert("io.cncf.notary.signingAgent".into(), "sigil-testkit".into());
    if let Some(token) = timestamp_of(spec, &signature) {
        unprotected.insert(
            "io.cncf.notary.timestampSignature".into(),
            STANDARD.encode(token).into(),
        );
    }
    serde_json::json!({
        "payload": payload,
        "protected": protected,
        "header": unprotected,
        "signature": URL_SAFE_NO_PAD.encode(&signature),
    })
    .to_string()
    .into_bytes()
}

/// Minimal CBOR writing for the COSE envelope.
mod cbor {
    pub(super) fn head(out: &mut Vec<u8>, major: u8, n: u64) {
        let m = major << 5;
        match n {
            0..=23 => out.push(m | n as u8),
            24..=0xff => out.extend_from_slice(&[m | 24, n as u8]),
            0x100..=0xffff => {
                out.push(m | 25);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(m | 26);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(m | 27);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
    }
    pub(super) fn int(out: &mut Vec<u8>, v: i64) {
        if v >= 0 {
            head(out, 0, v as u64);
        } else {
            head(out, 1, (-1 - v) as u64);
        }
    }
    pub(super) fn text(out: &mut Vec<u8>, t: &str) {
        head(out, 3, t.len() as u64);
        out.extend_from_slice(t.as_bytes());
    }
    pub(super) fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        head(out, 2, b.len() as u64);
        out.extend_from_slice(b);
    }
}

fn sign_cose(pki: &NotaryPki, spec: &SignSpec, body: &[u8]) -> Vec<u8> {
    let mut crit = vec!["io.cncf.notary.signingScheme".to_owned()];
    if spec.scheme == "notary.x509.signingAuthority" {
        crit.push("io.cncf.notary.authenticSigningTime".into());
    }
    if spec.expiry.is_some() {
        crit.push("io.cncf.notary.expiry".into());
    }
    crit.extend(
        spec.extended
            .iter()
            .filter(|(_, _, c)| *c)
            .map(|(k, _, _)| k.clone()),
    );
    let mut entries: Vec<Vec<u8>> = Vec::new();
    let mut entry = |key: &dyn Fn(&mut Vec<u8>), value: &dyn Fn(&mut Vec<u8>)| {
        let mut e = Vec::new();
        key(&mut e);
        value(&mut e);
        entries.push(e);
    };
    entry(&|o| cbor::int(o, 1), &|o| cbor::int(o, -7));
    entry(&|o| cbor::int(o, 2), &|o| {
        cbor::head(o, 4, crit.len() as u64);
        for c in &crit {
            cbor::text(o, c);
        }
    });
    entry(&|o| cbor::int(o, 3), &|o| {
        cbor::text(o, "application/vnd.cncf.notary.payload.v1+json")
    });
    entry(&|o| cbor::text(o, "io.cncf.notary.signingScheme"), &|o| {
        cbor::text(o, spec.scheme)
    });
    entry(&|o| cbor::text(o, time_key(spec.scheme)), &|o| {
        cbor::head(o, 6, 1);
        cbor::int(o, spec.signing_time);
    });
    if let Some(e) = spec.expiry {
        entry(&|o| cbor::text(o, "io.cncf.notary.expiry"), &|o| {
            cbor::head(o, 6, 1);
            cbor::int(o, e);
        });
    }
    for (k, v, _) in &spec.extended {
        entry(&|o| cbor::text(o, k), &|o| cbor::text(o, v));
    }
    let mut protected = Vec::new();
    cbor::head(&mut protected, 5, entries.len() as u64);
    for e in &entries {
        protected.extend_from_slice(e);
    }
    let mut to_sign = Vec::new();
    cbor::head(&mut to_sign, 4, 4);
    cbor::text(&mut to_sign, "Signature1");
    cbor::bytes(&mut to_sign, &protected);
    cbor::bytes(&mut to_sign, &[]);
    cbor::bytes(&mut to_sign, body);
    let signature = leaf_signature(pki, &to_sign);
    let token = timestamp_of(spec, &signature);
    let chain = pki.chain();
    let mut out = Vec::new();
    cbor::head(&mut out, 6, 18);
    cbor::head(&mut out, 4, 4);
    cbor::bytes(&mut out, &protected);
    cbor::head(&mut out, 5, if token.is_some() { 3 } else { 2 });
    cbor::int(&mut out, 33);
    cbor::head(&mut out, 4, chain.len() as u64);
    for c in &chain {
        cbor::bytes(&mut out, c);
    }
    cbor::text(&mut out, "io.cncf.notary.signingAgent");
    cbor::text(&mut out, "sigil-testkit");
    if let Some(t) = token {
        cbor::text(&mut out, "io.cncf.notary.timestampSignature");
        cbor::bytes(&mut out, &t);
    }
    cbor::bytes(&mut out, body);
    cbor::bytes(&mut out, &signature);
    out
}

/// A CRL from `issuer` revoking `revoked` (serial magnitude, revocation time).
pub fn crl(
    issuer: &CertifiedKey,
    revoked: &[(Vec<u8>, i64)],
    this_update: i64,
    next_update: i64,
) -> Vec<u8> {
    let mut tbs = vec![
        der::uint64(1),
        issuer.key.signature_algorithm_der(),
        issuer.name.to_der(),
        der::x509_time(this_update),
        der::x509_time(next_update),
    ];
    if !revoked.is_empty() {
        tbs.push(der::seq(revoked.iter().map(|(serial, at)| {
            der::seq([der::uint(serial), der::x509_time(*at)])
        })));
    }
    let tbs = der::seq(tbs);
    let signature = issuer.key.sign(&tbs);
    der::seq([
        tbs,
        issuer.key.signature_algorithm_der(),
        der::bit_string(&signature),
    ])
}

/// An OCSP answer's certificate status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OcspStatus {
    /// Good.
    Good,
    /// Revoked at this Unix time.
    Revoked(i64),
    /// Unknown to the responder.
    Unknown,
}

/// The CertID of a DER OCSPRequest for one certificate, as a responder reads it.
pub fn cert_id_of_request(request: &[u8]) -> Vec<u8> {
    // OCSPRequest > TBSRequest > requestList > Request > CertID
    let mut inner = request;
    for _ in 0..4 {
        inner = der::content_of(inner);
    }
    inner.to_vec()
}

/// A signed OCSP response from `issuer` for the certificate `cert_id` names.
pub fn ocsp_response(
    issuer: &CertifiedKey,
    cert_id: &[u8],
    status: OcspStatus,
    this_update: i64,
    next_update: i64,
) -> Vec<u8> {
    let cert_status = match status {
        OcspStatus::Good => der::ctx_primitive(0, &[]),
        OcspStatus::Revoked(at) => der::ctx_constructed(1, &der::generalized_time(at)),
        OcspStatus::Unknown => der::ctx_primitive(2, &[]),
    };
    let single = der::seq([
        cert_id.to_vec(),
        cert_status,
        der::generalized_time(this_update),
        der::ctx_constructed(0, &der::generalized_time(next_update)),
    ]);
    let responder_id =
        der::ctx_constructed(2, &der::octet_string(&crate::x509::key_id(&issuer.key)));
    let tbs = der::seq([
        responder_id,
        der::generalized_time(this_update),
        der::seq([single]),
    ]);
    let signature = issuer.key.sign(&tbs);
    let basic = der::seq([
        tbs,
        issuer.key.signature_algorithm_der(),
        der::bit_string(&signature),
    ]);
    let bytes = der::seq([der::oid("1.3.6.1.5.5.7.48.1.1"), der::octet_string(&basic)]);
    der::seq([der::tlv(0x0a, &[0]), der::ctx_constructed(0, &bytes)])
}
