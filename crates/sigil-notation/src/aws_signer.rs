//! AWS Signer's Notary Project signatures, built in: sigil runs no plugin
//! binary, so what AWS Signer's Notation plugin checks is checked here. Its
//! signatures use `notary.x509.signingAuthority`, name the plugin
//! (`io.cncf.notary.verificationPlugin`) and carry two critical extended
//! attributes: the signing profile version ARN and the signing job ARN.
//! Trusted identities are signing profile (or profile version) ARNs; the
//! chain must end at AWS Signer's root; revocation of the profile, the job
//! and the certificates is asked of AWS Signer's `GetRevocationStatus` API.

use crate::envelope::{Envelope, SigningScheme};
use crate::policy::Identity;
use crate::revocation::Request;

/// The plugin name AWS Signer's signatures require.
pub const PLUGIN_NAME: &str = "com.amazonaws.signer.notation.plugin";
/// The extended attribute naming the verification plugin.
pub const ATTR_PLUGIN: &str = "io.cncf.notary.verificationPlugin";
/// The extended attribute naming the plugin's minimum version.
pub const ATTR_PLUGIN_MIN_VERSION: &str = "io.cncf.notary.verificationPluginMinVersion";
/// The signing profile version ARN.
pub const ATTR_PROFILE_VERSION: &str = "com.amazonaws.signer.signingProfileVersion";
/// The signing job ARN.
pub const ATTR_JOB: &str = "com.amazonaws.signer.signingJob";
/// SHA-256 of the DER of AWS Signer's root, `CN=AWS Signer Code Signing Root
/// CA G1, OU=Cryptography, O=AWS, ST=WA, C=US` (valid to 2027-10-28), which
/// every AWS Signer signature carries as the last certificate of its chain.
pub const ROOT_SHA256: &str = "90a87d0543c3f094dbff9589b6649affe2f3d6e0f308799be2258461c686473f";
/// The platform AWS Signer signs container images on.
pub const PLATFORM: &str = "Notation-OCI-SHA384-ECDSA";

/// What an AWS Signer signature claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsSignature {
    /// `arn:aws:signer:<region>:<account>:/signing-profiles/<name>/<version>`.
    pub profile_version: String,
    /// `arn:aws:signer:<region>:<account>:/signing-jobs/<id>`.
    pub job: String,
    /// The profile's region.
    pub region: String,
}

/// Why an AWS Signer signature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwsSignerError {
    /// A required attribute is missing or not a string.
    #[error("AWS Signer signature lacks the extended attribute `{0}` (a string)")]
    Attribute(&'static str),
    /// Not signed under the signing authority scheme.
    #[error("AWS Signer signatures use notary.x509.signingAuthority, this one uses {0}")]
    Scheme(&'static str),
    /// The profile ARN is not a signing profile version ARN.
    #[error("`{0}` is not an AWS Signer signing profile version ARN")]
    Arn(String),
    /// The trust policy allows `*`, which AWS Signer refuses.
    #[error(
        "the trust policy's trusted identity `*` cannot be used with AWS Signer signatures; name the signing profile ARN"
    )]
    Wildcard,
    /// No trusted identity names the profile.
    #[error("AWS Signer signing profile `{0}` is not among the trust policy's trusted identities")]
    Identity(String),
    /// The revocation API's answer names revoked resources.
    #[error("AWS Signer reports revoked: {0}")]
    Revoked(String),
    /// The revocation API could not be asked or answered badly.
    #[error("AWS Signer revocation status unknown: {0}")]
    Unknown(String),
}

/// Whether `envelope` is an AWS Signer signature, and what it claims.
/// `Ok(None)` when it names no verification plugin.
pub fn detect(envelope: &Envelope) -> Result<Option<AwsSignature>, AwsSignerError> {
    let Some(plugin) = envelope.attribute(ATTR_PLUGIN) else {
        return Ok(None);
    };
    if plugin.value.as_str() != Some(PLUGIN_NAME) {
        return Ok(None);
    }
    if envelope.scheme != SigningScheme::SigningAuthority {
        return Err(AwsSignerError::Scheme(envelope.scheme.as_str()));
    }
    let text = |key: &'static str| {
        envelope
            .attribute(key)
            .and_then(|a| a.value.as_str())
            .map(str::to_owned)
            .ok_or(AwsSignerError::Attribute(key))
    };
    let profile_version = text(ATTR_PROFILE_VERSION)?;
    let job = text(ATTR_JOB)?;
    let region = arn_region(&profile_version)
        .filter(|_| profile_version.split('/').count() == 4)
        .ok_or_else(|| AwsSignerError::Arn(profile_version.clone()))?;
    Ok(Some(AwsSignature {
        profile_version,
        job,
        region,
    }))
}

/// The critical extended attributes sigil understands for AWS Signer.
pub fn understands(key: &str) -> bool {
    matches!(
        key,
        ATTR_PLUGIN | ATTR_PLUGIN_MIN_VERSION | ATTR_PROFILE_VERSION | ATTR_JOB
    )
}

fn arn_region(arn: &str) -> Option<String> {
    let mut parts = arn.splitn(6, ':');
    let (
        Some("arn"),
        Some(_partition),
        Some("signer"),
        Some(region),
        Some(_account),
        Some(resource),
    ) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    )
    else {
        return None;
    };
    resource
        .starts_with("/signing-profiles/")
        .then(|| region.to_owned())
}

/// Whether a trusted identity is an AWS Signer signing profile ARN.
pub fn is_profile_identity(identity: &Identity) -> bool {
    matches!(identity, Identity::Other(arn) if arn_region(arn).is_some())
}

/// Checks the signature's profile against the trusted identities, as AWS
/// Signer's plugin does: a profile ARN matches every version of it, a
/// profile version ARN that version only (both case-insensitively).
pub fn check_identity(
    signature: &AwsSignature,
    identities: &[Identity],
) -> Result<(), AwsSignerError> {
    if identities.contains(&Identity::Any) {
        return Err(AwsSignerError::Wildcard);
    }
    let signed = signature.profile_version.to_ascii_lowercase();
    let profile = signed
        .rsplit_once('/')
        .map(|(p, _)| p.to_owned())
        .unwrap_or_default();
    for identity in identities {
        let Identity::Other(arn) = identity else {
            continue;
        };
        if arn_region(arn).is_none() {
            continue;
        }
        let arn = arn.to_ascii_lowercase();
        let matched = match arn.split('/').count() {
            3 => arn == profile,
            4 => arn == signed,
            _ => false,
        };
        if matched {
            return Ok(());
        }
    }
    Err(AwsSignerError::Identity(signature.profile_version.clone()))
}

/// The `GetRevocationStatus` request for this signature.
pub fn revocation_request(signature: &AwsSignature, envelope: &Envelope) -> Request {
    let hashes: Vec<String> = envelope.chain.iter().map(|c| hex_sha384(&c.tbs)).collect();
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (i, h) in hashes.iter().enumerate() {
        let next = hashes.get(i + 1).unwrap_or(h);
        pairs.push(("certificateHashes".into(), format!("{h}{next}")));
    }
    pairs.push(("jobArn".into(), signature.job.clone()));
    pairs.push(("platformId".into(), PLATFORM.into()));
    pairs.push((
        "profileVersionArn".into(),
        signature.profile_version.clone(),
    ));
    pairs.push((
        "signatureTimestamp".into(),
        envelope.signing_time.unix_timestamp().to_string(),
    ));
    let query = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    Request::AwsSigner {
        region: signature.region.clone(),
        query,
    }
}

/// Reads `GetRevocationStatus`'s answer: `{"revokedEntities": [...]}`.
pub fn revocation_verdict(response: Result<&[u8], String>) -> Result<(), AwsSignerError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Answer {
        #[serde(default)]
        revoked_entities: Vec<String>,
    }
    let body = response.map_err(AwsSignerError::Unknown)?;
    let answer: Answer = serde_json::from_slice(body).map_err(|e| {
        AwsSignerError::Unknown(format!("the answer is not GetRevocationStatus output: {e}"))
    })?;
    if answer.revoked_entities.is_empty() {
        return Ok(());
    }
    let (arns, certs): (Vec<&String>, Vec<&String>) = answer
        .revoked_entities
        .iter()
        .partition(|e| e.starts_with("arn"));
    let mut parts: Vec<String> = arns.iter().map(|a| (*a).clone()).collect();
    if !certs.is_empty() {
        parts.push(format!("{} certificate(s) of the chain", certs.len()));
    }
    Err(AwsSignerError::Revoked(parts.join(", ")))
}

fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The hex SHA-384 AWS Signer identifies a certificate by (over its TBS).
fn hex_sha384(data: &[u8]) -> String {
    hex::encode(sigil_verifier::crypto::HashAlgorithm::Sha384.digest(data))
}
