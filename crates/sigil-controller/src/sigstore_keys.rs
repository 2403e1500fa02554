//! `TrustRoot.spec.sigstoreKeys` → `trusted_root.json`.
//!
//! The CRD carries no validity windows, while the verifier requires a
//! `validFor.start` on every key and authority: a certificate authority is
//! trusted from its certificate's `notBefore` (leaf-most certificate of the
//! chain), a log key from the Unix epoch — an administrator who lists a key
//! trusts it for everything it signed.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use sigil_api::trustroot::{CertificateAuthority, SigstoreKeys, TransparencyLogInstance};
use sigil_verifier::crypto::{PublicKey, pem_decode, sha256};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::x509::Certificate;
use time::format_description::well_known::Rfc3339;

const MEDIA_TYPE: &str = "application/vnd.dev.sigstore.trustedroot+json;version=0.1";
const EPOCH: &str = "1970-01-01T00:00:00Z";

/// Builds the `trusted_root.json` text for `keys`, checked by the verifier's
/// own parser. The error names the field at fault.
pub fn trusted_root_json(keys: &SigstoreKeys) -> Result<String, String> {
    let logs = |field: &str, list: &[TransparencyLogInstance]| -> Result<Vec<Value>, String> {
        list.iter()
            .enumerate()
            .map(|(i, l)| log(&format!("spec.sigstoreKeys.{field}[{i}]"), l))
            .collect()
    };
    let cas = |field: &str, list: &[CertificateAuthority]| -> Result<Vec<Value>, String> {
        list.iter()
            .enumerate()
            .map(|(i, c)| authority(&format!("spec.sigstoreKeys.{field}[{i}]"), c))
            .collect()
    };
    let root = json!({
        "mediaType": MEDIA_TYPE,
        "tlogs": logs("tLogs", &keys.tlogs)?,
        "ctlogs": logs("ctLogs", &keys.ctlogs)?,
        "certificateAuthorities": cas("certificateAuthorities", &keys.certificate_authorities)?,
        "timestampAuthorities": cas("timestampAuthorities", &keys.timestamp_authorities)?,
    });
    let text = serde_json::to_string_pretty(&root).map_err(|e| e.to_string())?;
    TrustedRoot::from_json(&text).map_err(|e| format!("spec.sigstoreKeys: {e}"))?;
    Ok(text)
}

fn decode_text(path: &str, b64: &str) -> Result<String, String> {
    let compact: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let bytes = STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| format!("{path}: not base64 ({e})"))?;
    String::from_utf8(bytes).map_err(|_| format!("{path}: the base64 does not decode to PEM text"))
}

fn key_details(key: &PublicKey) -> &'static str {
    match key {
        PublicKey::P256(_) => "PKIX_ECDSA_P256_SHA_256",
        PublicKey::P384(_) => "PKIX_ECDSA_P384_SHA_384",
        PublicKey::Ed25519(_) => "PKIX_ED25519",
        PublicKey::Rsa(_) => "PKIX_RSA_PKCS1V15_2048_SHA256",
    }
}

fn log(path: &str, l: &TransparencyLogInstance) -> Result<Value, String> {
    let pem = decode_text(&format!("{path}.publicKey"), &l.public_key)?;
    let der = pem_decode(&pem, "PUBLIC KEY").map_err(|e| format!("{path}.publicKey: {e}"))?;
    let key = PublicKey::from_spki_der(&der).map_err(|e| format!("{path}.publicKey: {e}"))?;
    let hash = match l.hash_algorithm.as_deref() {
        None | Some("") | Some("sha256") => "SHA2_256",
        Some("sha384") => "SHA2_384",
        Some("sha512") => "SHA2_512",
        Some(other) => return Err(format!("{path}.hashAlgorithm: unsupported `{other}`")),
    };
    Ok(json!({
        "baseUrl": l.base_url,
        "hashAlgorithm": hash,
        "publicKey": {
            "rawBytes": STANDARD.encode(&der),
            "keyDetails": key_details(&key),
            "validFor": {"start": EPOCH},
        },
        "logId": {"keyId": STANDARD.encode(sha256(&der))},
    }))
}

fn authority(path: &str, ca: &CertificateAuthority) -> Result<Value, String> {
    let path = format!("{path}.certChain");
    let pem = decode_text(&path, &ca.cert_chain)?;
    let chain = Certificate::from_pem_chain(&pem).map_err(|e| format!("{path}: {e}"))?;
    let first = chain
        .first()
        .ok_or_else(|| format!("{path}: no certificate in the chain"))?;
    let start = first
        .not_before
        .format(&Rfc3339)
        .map_err(|e| format!("{path}: {e}"))?;
    let certificates: Vec<Value> = chain
        .iter()
        .map(|c| json!({"rawBytes": STANDARD.encode(&c.der)}))
        .collect();
    Ok(json!({
        "subject": {
            "organization": ca.subject.organization,
            "commonName": ca.subject.common_name,
        },
        "uri": ca.uri,
        "certChain": {"certificates": certificates},
        "validFor": {"start": start},
    }))
}
