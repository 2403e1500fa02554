//! Bundle verification: ties the pieces together in the order a verifier must
//! apply them and returns the facts the rest of sigil acts on.
//!
//! The rules, in short:
//! - the signature must cover the expected artifact (message signature over its
//!   digest, or a DSSE envelope whose in-toto subject names the digest);
//! - every transparency-log entry and every RFC 3161 timestamp in the bundle
//!   must verify, and at least one of them must yield a verified signing time
//!   for certificate-based bundles; the time is never taken from the clock;
//! - at every verified time the leaf certificate must chain to a trusted CA
//!   that was valid then, and the leaf must be within its own validity;
//! - a keyless signer needs a valid embedded SCT and an identity the policy
//!   accepts; a managed-key signer needs the policy's key.

use time::OffsetDateTime;

use crate::bundle::{Bundle, BundleVersion, Content, SigningMaterial};
use crate::chain::{ChainError, verify_fulcio_chain};
use crate::crypto::{HashAlgorithm, PublicKey, SignatureError, sha256};
use crate::dsse::{Statement, StatementError, pae};
use crate::identity::{
    FulcioIdentity, IdentityError, IdentityPolicy, check_identity, fulcio_identity,
};
use crate::sct::{SctError, verify_embedded_scts};
use crate::tlog::{EntryContext, TlogError, verify_tlog_entry};
use crate::trust::{TrustedRoot, format_rfc3339};
use crate::tsa::{TimestampError, verify_rfc3161};

/// What the bundle is expected to sign.
#[derive(Debug, Clone, Copy)]
pub enum Artifact<'a> {
    /// The artifact's bytes.
    Bytes(&'a [u8]),
    /// The artifact's SHA-256 digest (an image manifest digest, say).
    Sha256([u8; 32]),
}

impl Artifact<'_> {
    /// The artifact's SHA-256 digest.
    pub fn sha256(&self) -> [u8; 32] {
        match self {
            Self::Bytes(b) => sha256(b),
            Self::Sha256(d) => *d,
        }
    }
}

/// Who may have signed.
#[derive(Debug, Clone)]
pub enum SignerPolicy {
    /// A Fulcio certificate whose identity matches any of these.
    Keyless {
        /// Accepted identities (any one suffices).
        identities: Vec<IdentityPolicy>,
        /// Whether an embedded SCT from a trusted CT log is required.
        require_sct: bool,
    },
    /// A managed key.
    Key(PublicKey),
}

/// How a bundle must verify.
#[derive(Debug, Clone)]
pub struct VerificationPolicy {
    /// Who may have signed.
    pub signer: SignerPolicy,
    /// Whether at least one transparency-log entry is required. A
    /// managed-key policy may turn this off (like cosign's
    /// `--insecure-ignore-tlog`). A keyless policy may turn it off only
    /// against a trust root that lists no transparency log (a private
    /// instance such as GitHub's for private repositories): the signing time
    /// then comes from RFC 3161 timestamps alone. Against a trust root that
    /// lists a log, keyless bundles always need an entry, whatever this says.
    pub require_tlog: bool,
    /// The digest a managed key signed over (a policy's `hashAlgorithm`):
    /// ECDSA and RSA signatures must verify with exactly this hash. `None`
    /// takes the hash cosign signs with for the key's type (SHA-384 for
    /// P-384, SHA-256 otherwise). Ignored for certificates and Ed25519 keys.
    pub key_hash: Option<HashAlgorithm>,
}

impl VerificationPolicy {
    /// Keyless: one identity, SCT and transparency log required.
    pub fn keyless(identity: IdentityPolicy) -> Self {
        Self {
            signer: SignerPolicy::Keyless {
                identities: vec![identity],
                require_sct: true,
            },
            require_tlog: true,
            key_hash: None,
        }
    }

    /// Keyless, one identity, with a log entry required exactly when `root`
    /// lists a transparency log: against a root without one (a private
    /// instance such as GitHub's), RFC 3161 timestamps are the time source.
    pub fn keyless_under(root: &TrustedRoot, identity: IdentityPolicy, require_sct: bool) -> Self {
        Self {
            signer: SignerPolicy::Keyless {
                identities: vec![identity],
                require_sct,
            },
            require_tlog: !root.tlogs.is_empty(),
            key_hash: None,
        }
    }

    /// Managed key, transparency log required.
    pub fn key(key: PublicKey) -> Self {
        Self {
            signer: SignerPolicy::Key(key),
            require_tlog: true,
            key_hash: None,
        }
    }
}

/// Where a verified signing time came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeSource {
    /// A Rekor v1 integrated time, proven by its signed entry timestamp.
    IntegratedTime {
        /// The entry's log index.
        log_index: i64,
    },
    /// An RFC 3161 timestamp.
    Rfc3161 {
        /// The timestamp authority's URI.
        authority: String,
    },
}

impl std::fmt::Display for TimeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::IntegratedTime { log_index } => {
                write!(f, "transparency log integrated time (entry {log_index})")
            }
            Self::Rfc3161 { authority } => write!(f, "RFC 3161 timestamp from {authority}"),
        }
    }
}

/// The kind of content a bundle signed.
#[derive(Debug, Clone, PartialEq)]
pub enum SignedContent {
    /// A plain message signature over the artifact.
    MessageSignature,
    /// A DSSE envelope with its in-toto statement.
    Dsse {
        /// The envelope's payload type.
        payload_type: String,
        /// The in-toto statement.
        statement: Box<Statement>,
    },
}

/// The facts established by a successful verification.
#[derive(Debug, Clone)]
pub struct VerifiedBundle {
    /// The bundle's media type.
    pub media_type: String,
    /// The signer's identity (keyless bundles).
    pub identity: Option<FulcioIdentity>,
    /// The earliest verified signing time, when any.
    pub signing_time: Option<OffsetDateTime>,
    /// Every verified time with its source.
    pub verified_times: Vec<(OffsetDateTime, TimeSource)>,
    /// Log index of the first transparency-log entry, when any.
    pub log_index: Option<i64>,
    /// Base URL of the log holding that entry.
    pub log_url: Option<String>,
    /// What was signed.
    pub content: SignedContent,
}

/// Why a bundle did not verify. `reason()` gives a stable machine label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The bundle is signed with a certificate but a key was given, or the reverse.
    #[error("{0}")]
    SignerMismatch(String),
    /// The signing key in the certificate is of an unsupported type.
    #[error("signing certificate key is unsupported: {0}")]
    UnsupportedKey(String),
    /// The bundle's signature does not verify over the artifact.
    #[error("signature does not verify over the artifact: {0}")]
    Signature(SignatureError),
    /// The bundle's message digest names another artifact.
    #[error(
        "bundle messageDigest {found} does not match the artifact's sha256 {expected}; the signature is for another artifact"
    )]
    DigestMismatch {
        /// The artifact's digest (hex).
        expected: String,
        /// The bundle's digest (hex).
        found: String,
    },
    /// The DSSE envelope is not usable.
    #[error("DSSE envelope: {0}")]
    Dsse(String),
    /// The in-toto statement does not bind the artifact.
    #[error(transparent)]
    Statement(StatementError),
    /// A transparency-log entry failed.
    #[error("{cause}")]
    Tlog {
        /// Index of the entry in the bundle.
        index: usize,
        /// The failure.
        cause: TlogError,
    },
    /// No transparency-log entry although one is required.
    #[error("bundle has no transparency log entry; sigil requires one")]
    NoTlogEntry,
    /// An RFC 3161 timestamp failed.
    #[error("{cause}")]
    Timestamp {
        /// Index of the timestamp in the bundle.
        index: usize,
        /// The failure.
        cause: TimestampError,
    },
    /// No verified signing time for a certificate-based bundle.
    #[error(
        "no verified signing time: the bundle needs a transparency log entry with a signed entry timestamp or an RFC 3161 timestamp from a trusted authority"
    )]
    NoVerifiedTime,
    /// A timestamp-only keyless bundle (no log in the trust root) carries no
    /// RFC 3161 timestamp, so nothing vouches for when it was signed.
    #[error(
        "no verified signing time: the trust root lists no transparency log, so the bundle needs an \
         RFC 3161 timestamp from one of its timestamp authorities, and it has none"
    )]
    NoTimestamp,
    /// The certificate chain failed at a verified time.
    #[error("certificate chain at {time} ({source_kind}): {cause}")]
    Chain {
        /// The verified time used.
        time: String,
        /// Where the time came from.
        source_kind: String,
        /// The failure.
        cause: Box<ChainError>,
    },
    /// The embedded SCT failed.
    #[error(transparent)]
    Sct(SctError),
    /// The signer's identity is not accepted.
    #[error(transparent)]
    Identity(IdentityError),
    /// A keyless policy listed no identities.
    #[error("the verification policy lists no accepted identities")]
    NoIdentities,
    /// The trust root is inconsistent.
    #[error("trust root: {0}")]
    TrustRoot(String),
}

impl VerifyError {
    /// A stable, short label for metrics and machine-readable output.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::SignerMismatch(_) => "signer-mismatch",
            Self::UnsupportedKey(_) => "unsupported-key",
            Self::Signature(_) => "bad-signature",
            Self::DigestMismatch { .. } => "digest-mismatch",
            Self::Dsse(_) => "bad-dsse",
            Self::Statement(_) => "statement-mismatch",
            Self::Tlog { .. } => "tlog",
            Self::NoTlogEntry => "no-tlog-entry",
            Self::Timestamp { .. } => "timestamp",
            Self::NoVerifiedTime => "no-verified-time",
            Self::NoTimestamp => "no-timestamp",
            Self::Chain { .. } => "certificate-chain",
            Self::Sct(_) => "sct",
            Self::Identity(_) => "identity",
            Self::NoIdentities => "no-identities",
            Self::TrustRoot(_) => "trust-root",
        }
    }
}

/// Verifies the bundle's signature over the artifact with `key`, returning the
/// in-toto statement for DSSE content. `hash` is a managed key's configured
/// digest (`None`: the key type's own).
fn verify_content(
    bundle: &Bundle,
    artifact: &Artifact<'_>,
    digest: &[u8; 32],
    key: &PublicKey,
    hash: Option<HashAlgorithm>,
) -> Result<SignedContent, VerifyError> {
    match &bundle.content {
        Content::MessageSignature {
            digest: bundle_digest,
            signature,
        } => {
            if let Some((alg, d)) = bundle_digest {
                // The digest is informational, but when present it must agree:
                // a mismatch means the bundle was made for something else.
                if alg == "SHA2_256" && d.as_slice() != digest.as_slice() {
                    return Err(VerifyError::DigestMismatch {
                        expected: hex::encode(digest),
                        found: hex::encode(d),
                    });
                }
            }
            if let Some(hash) = hash {
                return match artifact {
                    Artifact::Bytes(b) => key.verify(b, signature, hash),
                    Artifact::Sha256(d) if hash == HashAlgorithm::Sha256 => {
                        key.verify_prehash(d, signature, hash)
                    }
                    Artifact::Sha256(_) => Err(SignatureError::Unsupported {
                        scheme: key.scheme(),
                        what: "signature over another digest than the artifact's SHA-256 \
                               (the artifact itself is needed)",
                    }),
                }
                .map(|()| SignedContent::MessageSignature)
                .map_err(VerifyError::Signature);
            }
            match (artifact, key) {
                (Artifact::Bytes(b), _) => key.verify(b, signature, key.default_hash()),
                (Artifact::Sha256(_), PublicKey::Ed25519(_)) => {
                    return Err(VerifyError::Signature(SignatureError::Unsupported {
                        scheme: key.scheme(),
                        what: "artifact given only by digest (Ed25519 signs the whole artifact)",
                    }));
                }
                (Artifact::Sha256(d), _) => key.verify_prehash(d, signature, HashAlgorithm::Sha256),
            }
            .or_else(|e| match (artifact, key) {
                // cosign signs blobs with SHA-256 whatever the curve; accept that
                // for P-384 keys given the bytes, as cosign does.
                (Artifact::Bytes(_), PublicKey::P384(_)) => {
                    key.verify_prehash(digest, signature, HashAlgorithm::Sha256)
                }
                _ => Err(e),
            })
            .map_err(VerifyError::Signature)?;
            Ok(SignedContent::MessageSignature)
        }
        Content::Dsse(env) => {
            let [(sig, _)] = env.signatures.as_slice() else {
                return Err(VerifyError::Dsse(format!(
                    "expected exactly one signature, found {}",
                    env.signatures.len()
                )));
            };
            key.verify(
                &pae(&env.payload_type, &env.payload),
                sig,
                hash.unwrap_or_else(|| key.default_hash()),
            )
            .map_err(VerifyError::Signature)?;
            let statement = Statement::from_payload(&env.payload_type, &env.payload)
                .map_err(VerifyError::Statement)?;
            statement
                .require_subject_sha256(digest)
                .map_err(VerifyError::Statement)?;
            Ok(SignedContent::Dsse {
                payload_type: env.payload_type.clone(),
                statement: Box::new(statement),
            })
        }
    }
}

/// Verifies `bundle` against `artifact` and `policy` under `root`.
///
/// `now` is only used to reject transparency-log times in the future; the
/// certificate is never checked against it.
pub fn verify_bundle(
    bundle: &Bundle,
    artifact: Artifact<'_>,
    policy: &VerificationPolicy,
    root: &TrustedRoot,
    now: OffsetDateTime,
) -> Result<VerifiedBundle, VerifyError> {
    let digest = artifact.sha256();

    // 1. Which key signed, and does the policy accept that kind of signer?
    let (key, certs) = match (&bundle.signing, &policy.signer) {
        (SigningMaterial::Certificates(certs), SignerPolicy::Keyless { .. }) => {
            let leaf = certs.first().ok_or_else(|| {
                VerifyError::SignerMismatch("bundle has an empty certificate chain".into())
            })?;
            let key = leaf.public_key.clone().ok_or_else(|| {
                VerifyError::UnsupportedKey(format!("certificate `{}`", leaf.subject))
            })?;
            (key, Some(certs))
        }
        (SigningMaterial::PublicKey { .. }, SignerPolicy::Key(key)) => (key.clone(), None),
        (SigningMaterial::PublicKey { .. }, SignerPolicy::Keyless { .. }) => {
            return Err(VerifyError::SignerMismatch(
                "bundle is signed with a managed key, not a certificate; verify it with the signer's public key (--key)".into(),
            ));
        }
        (SigningMaterial::Certificates(_), SignerPolicy::Key(_)) => {
            return Err(VerifyError::SignerMismatch(
                "bundle is signed with a certificate (keyless); verify it with an identity and issuer, not a key".into(),
            ));
        }
    };
    let managed_spki = match &policy.signer {
        SignerPolicy::Key(k) => k.canonical_spki_der(),
        SignerPolicy::Keyless { .. } => None,
    };

    // 2. The signature covers the artifact.
    let key_hash = match &policy.signer {
        SignerPolicy::Key(_) => policy.key_hash,
        SignerPolicy::Keyless { .. } => None,
    };
    let content = verify_content(bundle, &artifact, &digest, &key, key_hash)?;

    // 3. Transparency-log entries: every one must verify. A certificate
    //    needs one unless the trust root has no log at all and the policy
    //    accepts timestamps as the only time source; an entry from a log the
    //    trust root does not list fails below rather than being skipped.
    let timestamp_only = certs.is_some() && !policy.require_tlog && root.tlogs.is_empty();
    if bundle.tlog_entries.is_empty()
        && (policy.require_tlog || (certs.is_some() && !timestamp_only))
    {
        return Err(VerifyError::NoTlogEntry);
    }
    let mut verified_times: Vec<(OffsetDateTime, TimeSource)> = Vec::new();
    let mut untimed_entries = Vec::new();
    let mut first_log = None;
    let ctx = EntryContext {
        bundle,
        artifact_digest: Some(&digest),
        signing_key_spki: managed_spki.as_deref(),
        now,
        require_inclusion_proof: bundle.version >= BundleVersion::V0_2,
    };
    for (index, entry) in bundle.tlog_entries.iter().enumerate() {
        let v = verify_tlog_entry(entry, &ctx, root)
            .map_err(|cause| VerifyError::Tlog { index, cause })?;
        if first_log.is_none() {
            first_log = Some((v.log_index, v.log));
        }
        if let Some(t) = v.integrated_time {
            verified_times.push((
                t,
                TimeSource::IntegratedTime {
                    log_index: v.log_index,
                },
            ));
        }
        if v.integrated_time.is_none() {
            untimed_entries.push((index, v));
        }
    }

    // 4. RFC 3161 timestamps: every one must verify, over the signature bytes
    //    (or what a legacy format timestamps instead).
    if !bundle.rfc3161_timestamps.is_empty() {
        let signed = match &bundle.timestamped_message {
            Some(m) => m.as_slice(),
            None => bundle.signature_bytes().unwrap_or_default(),
        };
        for (index, token) in bundle.rfc3161_timestamps.iter().enumerate() {
            let ts = verify_rfc3161(token, signed, root)
                .map_err(|cause| VerifyError::Timestamp { index, cause })?;
            let authority = root
                .timestamp_authorities
                .get(ts.authority)
                .map(|a| a.uri.clone())
                .unwrap_or_default();
            verified_times.push((ts.time, TimeSource::Rfc3161 { authority }));
        }
    }
    verified_times.sort_by_key(|(t, _)| *t);

    // A Rekor v2 entry (or a v1 entry without a SET) carries no verified time
    // of its own: its log key must have been valid at the times the timestamp
    // authorities vouch for.
    for (index, entry) in &untimed_entries {
        for (t, _) in &verified_times {
            entry
                .check_log_valid_at(root, *t)
                .map_err(|cause| VerifyError::Tlog {
                    index: *index,
                    cause,
                })?;
        }
    }

    // 5. Certificate: chain, validity at every verified time, SCT, identity.
    let mut identity = None;
    if let (
        Some(certs),
        SignerPolicy::Keyless {
            identities,
            require_sct,
        },
    ) = (certs, &policy.signer)
    {
        let (leaf, rest) = certs.split_first().ok_or_else(|| {
            VerifyError::SignerMismatch("bundle has an empty certificate chain".into())
        })?;
        if verified_times.is_empty() {
            return Err(if timestamp_only {
                VerifyError::NoTimestamp
            } else {
                VerifyError::NoVerifiedTime
            });
        }
        let mut matched = None;
        for (t, source) in &verified_times {
            let m = verify_fulcio_chain(leaf, rest, root, *t).map_err(|source_err| {
                VerifyError::Chain {
                    time: format_rfc3339(*t),
                    source_kind: source.to_string(),
                    cause: Box::new(source_err),
                }
            })?;
            matched.get_or_insert(m);
        }
        if *require_sct && let Some(m) = matched {
            let issuer = root
                .certificate_authorities
                .get(m.authority)
                .and_then(|a| a.chain.get(m.issuer))
                .ok_or_else(|| {
                    VerifyError::TrustRoot("matched certificate authority has no issuer".into())
                })?;
            verify_embedded_scts(leaf, issuer, root).map_err(VerifyError::Sct)?;
        }
        let id = fulcio_identity(leaf).map_err(VerifyError::Identity)?;
        let mut last_err = None;
        let mut ok = false;
        for p in identities {
            match check_identity(&id, p) {
                Ok(()) => {
                    ok = true;
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        if !ok {
            return Err(last_err.map_or(VerifyError::NoIdentities, VerifyError::Identity));
        }
        identity = Some(id);
    }

    let (log_index, log_url) = match first_log {
        Some((idx, log)) => (Some(idx), root.tlogs.get(log).map(|l| l.base_url.clone())),
        None => (None, None),
    };
    Ok(VerifiedBundle {
        media_type: bundle.media_type.clone(),
        identity,
        signing_time: verified_times.first().map(|(t, _)| *t),
        verified_times,
        log_index,
        log_url,
        content,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use base64::Engine as _;
    use sigil_testkit::KeyPair;

    use super::*;

    const ARTIFACT: &[u8] = b"sigil hash-algorithm artifact\n";
    const ALL: [HashAlgorithm; 4] = [
        HashAlgorithm::Sha224,
        HashAlgorithm::Sha256,
        HashAlgorithm::Sha384,
        HashAlgorithm::Sha512,
    ];

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn policy(key: &KeyPair, hash: Option<HashAlgorithm>) -> VerificationPolicy {
        VerificationPolicy {
            signer: SignerPolicy::Key(PublicKey::from_pem(&key.public_key_pem()).unwrap()),
            require_tlog: false,
            key_hash: hash,
        }
    }

    /// A v0.3 bundle without log entries: a DSSE in-toto statement about
    /// [`ARTIFACT`] signed by `key` over the `hash` of its PAE, as cosign
    /// signs with a key whose type implies that digest.
    fn dsse_bundle(key: &KeyPair, hash: HashAlgorithm) -> Bundle {
        let statement = sigil_testkit::in_toto_statement(
            &crate::crypto::sha256(ARTIFACT),
            "https://sigstore.dev/cosign/sign/v1",
            serde_json::json!({}),
        );
        let payload_type = sigil_testkit::IN_TOTO_PAYLOAD_TYPE;
        let sig = key
            .sign_prehash(&hash.digest(&crate::dsse::pae(payload_type, &statement)))
            .unwrap();
        let json = serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {"publicKey": {"hint": "k"}, "tlogEntries": []},
            "dsseEnvelope": {
                "payload": b64(&statement),
                "payloadType": payload_type,
                "signatures": [{"sig": b64(&sig), "keyid": ""}],
            },
        });
        Bundle::from_json(json.to_string().as_bytes()).unwrap()
    }

    /// The same, as a message signature over the artifact's `hash`.
    fn message_bundle(key: &KeyPair, hash: HashAlgorithm) -> Bundle {
        let sig = key.sign_prehash(&hash.digest(ARTIFACT)).unwrap();
        let json = serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {"publicKey": {"hint": "k"}, "tlogEntries": []},
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": b64(&crate::crypto::sha256(ARTIFACT))},
                "signature": b64(&sig),
            },
        });
        Bundle::from_json(json.to_string().as_bytes()).unwrap()
    }

    fn verify(
        bundle: &Bundle,
        artifact: Artifact<'_>,
        policy: &VerificationPolicy,
    ) -> Result<(), &'static str> {
        let root = TrustedRoot::public_good().unwrap();
        verify_bundle(bundle, artifact, policy, &root, OffsetDateTime::now_utc())
            .map(|_| ())
            .map_err(|e| e.reason())
    }

    #[test]
    fn a_managed_key_signature_verifies_with_exactly_its_hash_algorithm() {
        for key in [KeyPair::p256(3, "hash"), KeyPair::p384(3, "hash")] {
            for signed in ALL {
                for bundle in [dsse_bundle(&key, signed), message_bundle(&key, signed)] {
                    for configured in ALL {
                        let got = verify(
                            &bundle,
                            Artifact::Bytes(ARTIFACT),
                            &policy(&key, Some(configured)),
                        );
                        if configured == signed {
                            assert_eq!(got, Ok(()), "{key:?} signed {signed:?}");
                        } else {
                            assert_eq!(
                                got,
                                Err("bad-signature"),
                                "{key:?} signed {signed:?}, configured {configured:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn without_a_hash_algorithm_the_key_types_own_digest_applies() {
        let p256 = KeyPair::p256(3, "hash");
        let p384 = KeyPair::p384(3, "hash");
        let verify_default = |key: &KeyPair, signed| {
            verify(
                &dsse_bundle(key, signed),
                Artifact::Bytes(ARTIFACT),
                &policy(key, None),
            )
        };
        assert_eq!(verify_default(&p256, HashAlgorithm::Sha256), Ok(()));
        assert_eq!(verify_default(&p384, HashAlgorithm::Sha384), Ok(()));
        assert_eq!(
            verify_default(&p256, HashAlgorithm::Sha512),
            Err("bad-signature")
        );
        assert_eq!(
            verify_default(&p384, HashAlgorithm::Sha256),
            Err("bad-signature")
        );
    }

    #[test]
    fn an_artifact_known_only_by_its_sha256_cannot_check_another_digests_signature() {
        let key = KeyPair::p256(3, "hash");
        let digest = crate::crypto::sha256(ARTIFACT);
        let bundle = message_bundle(&key, HashAlgorithm::Sha512);
        assert_eq!(
            verify(
                &bundle,
                Artifact::Sha256(digest),
                &policy(&key, Some(HashAlgorithm::Sha512))
            ),
            Err("bad-signature")
        );
        let bundle = message_bundle(&key, HashAlgorithm::Sha256);
        assert_eq!(
            verify(
                &bundle,
                Artifact::Sha256(digest),
                &policy(&key, Some(HashAlgorithm::Sha256))
            ),
            Ok(())
        );
    }

    #[test]
    fn certificates_ignore_a_key_hash_algorithm() {
        let key = KeyPair::p256(3, "hash");
        let keyless = VerificationPolicy {
            key_hash: Some(HashAlgorithm::Sha512),
            ..VerificationPolicy::keyless(crate::identity::IdentityPolicy {
                subject: crate::identity::IdentityMatcher::Exact("a".into()),
                issuer: crate::identity::IdentityMatcher::Exact("b".into()),
                claims: Vec::new(),
            })
        };
        // A key-signed bundle under a keyless policy fails on the signer, not the hash.
        assert_eq!(
            verify(
                &dsse_bundle(&key, HashAlgorithm::Sha512),
                Artifact::Bytes(ARTIFACT),
                &keyless
            ),
            Err("signer-mismatch")
        );
    }
}
