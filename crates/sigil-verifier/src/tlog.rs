//! One Rekor log entry of a bundle, fully checked: the log is trusted, the
//! entry's body is about this bundle's signature, key and content, its signed
//! entry timestamp (Rekor v1) verifies, and its inclusion proof leads to a
//! checkpoint the log signed.
//!
//! What this module does not decide: whether the signing certificate was valid
//! at the entry's time and whether a Rekor v2 entry has a trusted timestamp.
//! The orchestrator does that with [`VerifiedEntry::integrated_time`] and
//! [`VerifiedEntry::check_log_valid_at`].

use base64::Engine as _;
use serde_json::Value;
use time::{Duration, OffsetDateTime};

use crate::bundle::{Bundle, BundleVersion, Content, DsseEnvelope, InclusionProof, TlogEntry};
use crate::checkpoint::{CheckpointError, OriginRule, ed25519_note_key_id, verify_checkpoint};
use crate::crypto::{HashAlgorithm, PublicKey, pem_decode, sha256};
use crate::merkle::{MerkleError, leaf_hash, verify_inclusion};
use crate::trust::{TransparencyLog, TrustedRoot, format_rfc3339};
use crate::x509::Certificate;

/// How far in the future of `now` a verified integrated time may lie. Rekor's
/// clock and the verifier's are independent; five minutes absorbs a badly
/// synchronised node without letting a log back-date trust meaningfully
/// (Fulcio certificates live ten minutes).
pub const MAX_FUTURE_SKEW: Duration = Duration::minutes(5);

/// Why a log entry was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlogError {
    /// A Rekor v2 entry's `logIndex` is not the leaf its inclusion proof proves.
    #[error(
        "transparency log entry {log_index} carries an inclusion proof for leaf {proof_index}; a Rekor v2 entry's index must be its leaf index"
    )]
    IndexMismatch {
        /// The entry's log index.
        log_index: i64,
        /// The inclusion proof's leaf index.
        proof_index: i64,
    },
    /// No log in the trusted root has the entry's log ID.
    #[error(
        "transparency log entry {log_index} comes from log {log_id_hex} (base64 {log_id_b64}), which the trusted root does not contain; use the trust root of the Sigstore instance that logged it"
    )]
    UnknownLog {
        /// The entry's log index.
        log_index: i64,
        /// The log ID, hex.
        log_id_hex: String,
        /// The log ID, base64.
        log_id_b64: String,
    },
    /// The trusted root's key for this log could not be decoded.
    #[error("transparency log {log} has a key sigil cannot use ({details}); fix the trusted root")]
    LogKeyUnsupported {
        /// The log's base URL.
        log: String,
        /// The root's `keyDetails`.
        details: String,
    },
    /// The log's key has no `validFor.start` in the trusted root.
    #[error(
        "transparency log {log} has no validFor.start in the trusted root, so its key is never valid; fix the trusted root"
    )]
    LogNeverValid {
        /// The log's base URL.
        log: String,
    },
    /// The log's key was not valid at the entry's time.
    #[error(
        "transparency log {log} key was not valid at {at} according to the trusted root's validFor; the entry is outside the key's lifetime"
    )]
    LogKeyNotValidAt {
        /// The log's base URL.
        log: String,
        /// The time checked (RFC 3339).
        at: String,
    },
    /// The entry's kind/version is not one sigil checks.
    #[error(
        "transparency log entry {log_index} has kind {kind} version {version}; sigil checks hashedrekord 0.0.1/0.0.2, dsse 0.0.1/0.0.2 and intoto 0.0.2"
    )]
    UnsupportedKind {
        /// The entry's log index.
        log_index: i64,
        /// `kindVersion.kind`.
        kind: String,
        /// `kindVersion.version`.
        version: String,
    },
    /// The canonicalized body is not JSON or lacks a field.
    #[error("transparency log entry {log_index} body field `{field}`: {reason}")]
    BodyField {
        /// The entry's log index.
        log_index: i64,
        /// JSON path in the body.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A body field disagrees with the bundle.
    #[error(
        "transparency log entry {log_index} does not match the bundle: body field `{field}` {reason}; the entry was made for other content or another signature"
    )]
    BodyMismatch {
        /// The entry's log index.
        log_index: i64,
        /// JSON path in the body.
        field: String,
        /// How it differs.
        reason: String,
    },
    /// The bundle is signed by a managed key but no key was given to compare.
    #[error(
        "transparency log entry {log_index} cannot be matched to the bundle: the bundle names no certificate and no public key was supplied; pass the signer's public key"
    )]
    NoSigningKey {
        /// The entry's log index.
        log_index: i64,
    },
    /// Neither the artifact digest nor the bundle's messageDigest is known.
    #[error(
        "transparency log entry {log_index} cannot be matched to the artifact: no artifact digest was given and the bundle has no messageDigest"
    )]
    NoArtifactDigest {
        /// The entry's log index.
        log_index: i64,
    },
    /// A v0.1 bundle entry has no signed entry timestamp.
    #[error(
        "transparency log entry {log_index} has no inclusion promise (SET), which a v0.1 bundle requires"
    )]
    MissingSet {
        /// The entry's log index.
        log_index: i64,
    },
    /// A Rekor v2 entry carries a signed entry timestamp, which v2 logs never issue.
    #[error(
        "transparency log entry {log_index} is a Rekor v2 entry but carries an inclusion promise (SET); Rekor v2 does not issue them, so the bundle is malformed"
    )]
    UnexpectedSet {
        /// The entry's log index.
        log_index: i64,
    },
    /// The signed entry timestamp does not verify under the log key.
    #[error(
        "transparency log entry {log_index} inclusion promise (SET) does not verify under log {log}: {reason}; the entry, its time or its index was altered"
    )]
    SetInvalid {
        /// The entry's log index.
        log_index: i64,
        /// The log's base URL.
        log: String,
        /// Why.
        reason: String,
    },
    /// The integrated time is not a representable instant.
    #[error("transparency log entry {log_index} integrated time {time} is not a valid Unix time")]
    BadIntegratedTime {
        /// The entry's log index.
        log_index: i64,
        /// The raw value.
        time: i64,
    },
    /// The verified integrated time is later than now plus [`MAX_FUTURE_SKEW`].
    #[error(
        "transparency log entry {log_index} integrated time {time} is in the future (now {now}, allowed skew 5 minutes); check the clock or the log"
    )]
    IntegratedTimeInFuture {
        /// The entry's log index.
        log_index: i64,
        /// The integrated time (RFC 3339).
        time: String,
        /// The verifier's time (RFC 3339).
        now: String,
    },
    /// An inclusion proof is required but absent.
    #[error(
        "transparency log entry {log_index} has no inclusion proof, which {why} requires; re-fetch the bundle from the log"
    )]
    MissingInclusionProof {
        /// The entry's log index.
        log_index: i64,
        /// What requires it.
        why: &'static str,
    },
    /// The inclusion proof does not verify.
    #[error("transparency log entry {log_index}: {cause}")]
    InclusionProof {
        /// The entry's log index.
        log_index: i64,
        /// The Merkle failure.
        cause: MerkleError,
    },
    /// A checkpoint is required with the inclusion proof but absent.
    #[error(
        "transparency log entry {log_index} inclusion proof has no checkpoint, which {why} requires; the proof's root hash is unsigned"
    )]
    MissingCheckpoint {
        /// The entry's log index.
        log_index: i64,
        /// What requires it.
        why: &'static str,
    },
    /// The checkpoint is malformed or not signed by the log.
    #[error("transparency log entry {log_index}: {cause}")]
    Checkpoint {
        /// The entry's log index.
        log_index: i64,
        /// The checkpoint failure.
        cause: CheckpointError,
    },
    /// The checkpoint is about another tree than the inclusion proof.
    #[error(
        "transparency log entry {log_index} checkpoint {field} {checkpoint} differs from the inclusion proof's {proof}; the checkpoint does not cover this proof"
    )]
    CheckpointMismatch {
        /// `tree size` or `root hash`.
        field: &'static str,
        /// The entry's log index.
        log_index: i64,
        /// The checkpoint's value.
        checkpoint: String,
        /// The proof's (or log's) value.
        proof: String,
    },
    /// The entry has neither a verified SET nor a verified inclusion proof.
    #[error(
        "transparency log entry {log_index} has neither an inclusion promise (SET) nor an inclusion proof, so nothing shows it was logged"
    )]
    NoInclusionEvidence {
        /// The entry's log index.
        log_index: i64,
    },
}

/// A log entry that passed every check of [`verify_tlog_entry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedEntry {
    /// Index of the log in `root.tlogs`.
    pub log: usize,
    /// The entry's (global) log index.
    pub log_index: i64,
    /// The integrated time, `Some` only when a signed entry timestamp verified it (Rekor v1).
    pub integrated_time: Option<OffsetDateTime>,
    /// Whether an inclusion proof was present and verified.
    pub has_inclusion_proof: bool,
    /// Whether the entry is a Rekor v2 entry (hashedrekord/dsse 0.0.2).
    pub rekor_v2: bool,
}

impl VerifiedEntry {
    /// Checks that the log's key was valid at `at` (e.g. a verified RFC 3161
    /// time for a Rekor v2 entry, whose log carries no time of its own). Any
    /// trust-root entry for the same key whose closed `validFor` contains `at`
    /// suffices, so a key listed twice across a rotation is handled.
    pub fn check_log_valid_at(
        &self,
        root: &TrustedRoot,
        at: OffsetDateTime,
    ) -> Result<(), TlogError> {
        let Some(log) = root.tlogs.get(self.log) else {
            return Err(TlogError::LogKeyNotValidAt {
                log: format!("tlogs[{}]", self.log),
                at: format_rfc3339(at),
            });
        };
        check_valid_at(root, log, at)
    }
}

/// What an entry is checked against.
#[derive(Debug, Clone, Copy)]
pub struct EntryContext<'a> {
    /// The bundle the entry belongs to.
    pub bundle: &'a Bundle,
    /// SHA-256 of the artifact, for message signatures; `None` falls back to
    /// the bundle's `messageDigest`.
    pub artifact_digest: Option<&'a [u8; 32]>,
    /// DER SubjectPublicKeyInfo of the managed key, for key-signed bundles.
    pub signing_key_spki: Option<&'a [u8]>,
    /// The verifier's current time.
    pub now: OffsetDateTime,
    /// Whether a missing inclusion proof is an error (bundle v0.2 and later).
    pub require_inclusion_proof: bool,
}

/// The entry kinds sigil checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    HashedRekordV001,
    DsseV001,
    IntotoV002,
    HashedRekordV002,
    DsseV002,
}

impl Kind {
    fn of(entry: &TlogEntry) -> Option<Self> {
        Some(match (entry.kind.as_str(), entry.version.as_str()) {
            ("hashedrekord", "0.0.1") => Self::HashedRekordV001,
            ("dsse", "0.0.1") => Self::DsseV001,
            ("intoto", "0.0.2") => Self::IntotoV002,
            ("hashedrekord", "0.0.2") => Self::HashedRekordV002,
            ("dsse", "0.0.2") => Self::DsseV002,
            _ => return None,
        })
    }

    fn rekor_v2(self) -> bool {
        matches!(self, Self::HashedRekordV002 | Self::DsseV002)
    }
}

/// Whether `log` is known under `id`: its trust-root log ID, SHA-256 of its
/// DER SPKI (Rekor v1's log ID), or its C2SP key ID (Rekor v2), since trust
/// roots and bundles each carry one of these.
fn log_has_id(log: &TransparencyLog, id: &[u8]) -> bool {
    log.log_id == id
        || sha256(&log.spki_der) == id
        || matches!(&log.key, Some(PublicKey::Ed25519(k)) if ed25519_note_key_id(&log.origin, k) == id)
}

/// Index in `root.tlogs` of the first log known under `log_id`.
pub fn find_log(root: &TrustedRoot, log_id: &[u8], log_index: i64) -> Result<usize, TlogError> {
    root.tlogs
        .iter()
        .position(|l| log_has_id(l, log_id))
        .ok_or_else(|| TlogError::UnknownLog {
            log_index,
            log_id_hex: hex::encode(log_id),
            log_id_b64: base64::engine::general_purpose::STANDARD.encode(log_id),
        })
}

fn check_valid_at(
    root: &TrustedRoot,
    log: &TransparencyLog,
    at: OffsetDateTime,
) -> Result<(), TlogError> {
    let same_key = || root.tlogs.iter().filter(|l| l.spki_der == log.spki_der);
    if same_key().any(|l| l.valid_for.contains(at)) {
        return Ok(());
    }
    if same_key().all(|l| l.valid_for.start.is_none()) {
        return Err(TlogError::LogNeverValid {
            log: log.base_url.clone(),
        });
    }
    Err(TlogError::LogKeyNotValidAt {
        log: log.base_url.clone(),
        at: format_rfc3339(at),
    })
}

/// Verifies one tlog entry of `ctx.bundle` against `root`; see the module docs.
pub fn verify_tlog_entry(
    entry: &TlogEntry,
    ctx: &EntryContext<'_>,
    root: &TrustedRoot,
) -> Result<VerifiedEntry, TlogError> {
    let log_index = entry.log_index;
    let log_pos = find_log(root, &entry.log_id, log_index)?;
    let log = root
        .tlogs
        .get(log_pos)
        .ok_or_else(|| TlogError::UnknownLog {
            log_index,
            log_id_hex: hex::encode(&entry.log_id),
            log_id_b64: base64::engine::general_purpose::STANDARD.encode(&entry.log_id),
        })?;
    // A key the root never made valid fails now, whatever time is checked later.
    if root
        .tlogs
        .iter()
        .filter(|l| l.spki_der == log.spki_der)
        .all(|l| l.valid_for.start.is_none())
    {
        return Err(TlogError::LogNeverValid {
            log: log.base_url.clone(),
        });
    }
    let key = log
        .key
        .as_ref()
        .ok_or_else(|| TlogError::LogKeyUnsupported {
            log: log.base_url.clone(),
            details: log.key_details.clone(),
        })?;
    let kind = Kind::of(entry).ok_or_else(|| TlogError::UnsupportedKind {
        log_index,
        kind: entry.kind.clone(),
        version: entry.version.clone(),
    })?;
    let rekor_v2 = kind.rekor_v2();

    check_body(kind, entry, ctx)?;

    let integrated_time = match (&entry.signed_entry_timestamp, rekor_v2) {
        (Some(_), true) => return Err(TlogError::UnexpectedSet { log_index }),
        (None, _) => {
            if ctx.bundle.version == BundleVersion::V0_1 && !rekor_v2 {
                return Err(TlogError::MissingSet { log_index });
            }
            None
        }
        (Some(set), false) => {
            verify_set(entry, log, key, set)?;
            let t = OffsetDateTime::from_unix_timestamp(entry.integrated_time).map_err(|_| {
                TlogError::BadIntegratedTime {
                    log_index,
                    time: entry.integrated_time,
                }
            })?;
            if t > ctx.now + MAX_FUTURE_SKEW {
                return Err(TlogError::IntegratedTimeInFuture {
                    log_index,
                    time: format_rfc3339(t),
                    now: format_rfc3339(ctx.now),
                });
            }
            check_valid_at(root, log, t)?;
            Some(t)
        }
    };

    let has_inclusion_proof = match &entry.inclusion_proof {
        Some(proof) => {
            let checkpoint_required = if rekor_v2 {
                Some("a Rekor v2 entry")
            } else if ctx.bundle.version >= BundleVersion::V0_2 {
                Some("a v0.2+ bundle")
            } else {
                None
            };
            verify_proof(entry, proof, log, rekor_v2, checkpoint_required)?;
            true
        }
        None if rekor_v2 => {
            return Err(TlogError::MissingInclusionProof {
                log_index,
                why: "a Rekor v2 entry",
            });
        }
        None if ctx.require_inclusion_proof => {
            return Err(TlogError::MissingInclusionProof {
                log_index,
                why: "a v0.2+ bundle",
            });
        }
        None => false,
    };
    if integrated_time.is_none() && !has_inclusion_proof {
        return Err(TlogError::NoInclusionEvidence { log_index });
    }

    Ok(VerifiedEntry {
        log: log_pos,
        log_index,
        integrated_time,
        has_inclusion_proof,
        rekor_v2,
    })
}

/// The SET is the log's signature over the entry's canonical JSON (keys
/// sorted, no whitespace); base64 and hex need no JSON escaping.
fn verify_set(
    entry: &TlogEntry,
    log: &TransparencyLog,
    key: &PublicKey,
    set: &[u8],
) -> Result<(), TlogError> {
    let payload = format!(
        r#"{{"body":"{}","integratedTime":{},"logID":"{}","logIndex":{}}}"#,
        base64::engine::general_purpose::STANDARD.encode(&entry.canonicalized_body),
        entry.integrated_time,
        hex::encode(&entry.log_id),
        entry.log_index,
    );
    key.verify(payload.as_bytes(), set, HashAlgorithm::Sha256)
        .map_err(|e| TlogError::SetInvalid {
            log_index: entry.log_index,
            log: log.base_url.clone(),
            reason: e.to_string(),
        })
}

fn verify_proof(
    entry: &TlogEntry,
    proof: &InclusionProof,
    log: &TransparencyLog,
    rekor_v2: bool,
    checkpoint_required: Option<&'static str>,
) -> Result<(), TlogError> {
    let log_index = entry.log_index;
    // A Rekor v2 log is a single tree: the entry's index is its leaf index,
    // and nothing else binds the reported index to the proven leaf. (A v1
    // index is global across shards and is covered by the SET instead.)
    if rekor_v2 && proof.log_index != log_index {
        return Err(TlogError::IndexMismatch {
            log_index,
            proof_index: proof.log_index,
        });
    }
    let merkle = |cause| TlogError::InclusionProof { log_index, cause };
    // The bundle parser rejects negative values; a failed conversion here is
    // still an out-of-range index, never a panic.
    let index = u64::try_from(proof.log_index).unwrap_or(u64::MAX);
    let tree_size = u64::try_from(proof.tree_size).unwrap_or(0);
    verify_inclusion(
        &leaf_hash(&entry.canonicalized_body),
        index,
        tree_size,
        &proof.hashes,
        &proof.root_hash,
    )
    .map_err(merkle)?;

    let Some(text) = &proof.checkpoint else {
        return match checkpoint_required {
            Some(why) => Err(TlogError::MissingCheckpoint { log_index, why }),
            None => Ok(()),
        };
    };
    // The entry's kind and version are in the logged body, so the log
    // version, and with it how the checkpoint names the log, is not the
    // bundle's to choose.
    let rule = if rekor_v2 {
        OriginRule::Host
    } else {
        OriginRule::RekorV1
    };
    let cp = verify_checkpoint(text, log, rule)
        .map_err(|cause| TlogError::Checkpoint { log_index, cause })?;
    if cp.tree_size != tree_size {
        return Err(TlogError::CheckpointMismatch {
            field: "tree size",
            log_index,
            checkpoint: cp.tree_size.to_string(),
            proof: tree_size.to_string(),
        });
    }
    if cp.root_hash != proof.root_hash {
        return Err(TlogError::CheckpointMismatch {
            field: "root hash",
            log_index,
            checkpoint: hex::encode(&cp.root_hash),
            proof: hex::encode(&proof.root_hash),
        });
    }
    Ok(())
}

/// Who signed the bundle, for comparison with the body's verifier fields.
#[derive(Clone, Copy)]
enum Signer<'a> {
    Certificate(&'a Certificate),
    Key(&'a [u8]),
}

/// Reads the canonicalized body and compares it field by field with the bundle.
struct Body<'a> {
    json: Value,
    log_index: i64,
    ctx: &'a EntryContext<'a>,
}

impl<'a> Body<'a> {
    fn field_err(&self, path: &str, reason: impl Into<String>) -> TlogError {
        TlogError::BodyField {
            log_index: self.log_index,
            field: path.to_owned(),
            reason: reason.into(),
        }
    }

    fn mismatch(&self, path: &str, reason: impl Into<String>) -> TlogError {
        TlogError::BodyMismatch {
            log_index: self.log_index,
            field: path.to_owned(),
            reason: reason.into(),
        }
    }

    fn at<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
        path.split('.').try_fold(v, |v, k| v.get(k))
    }

    fn value(&self, path: &str) -> Option<&Value> {
        Self::at(&self.json, path)
    }

    fn str_in<'v>(&self, v: &'v Value, base: &str, rel: &str) -> Result<&'v str, TlogError> {
        Self::at(v, rel)
            .and_then(Value::as_str)
            .ok_or_else(|| self.field_err(&join(base, rel), "missing or not a string"))
    }

    fn str(&self, path: &str) -> Result<&str, TlogError> {
        self.str_in(&self.json, "", path)
    }

    fn b64_in(&self, v: &Value, base: &str, rel: &str) -> Result<Vec<u8>, TlogError> {
        let s = self.str_in(v, base, rel)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| self.field_err(&join(base, rel), format!("invalid base64: {e}")))
    }

    fn b64(&self, path: &str) -> Result<Vec<u8>, TlogError> {
        self.b64_in(&self.json, "", path)
    }

    fn array(&self, path: &str) -> Result<&'_ Vec<Value>, TlogError> {
        self.value(path)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| self.field_err(path, "missing, empty or not an array"))
    }

    fn signer(&self) -> Result<Signer<'a>, TlogError> {
        if let Some(cert) = self.ctx.bundle.leaf_certificate() {
            return Ok(Signer::Certificate(cert));
        }
        self.ctx
            .signing_key_spki
            .map(Signer::Key)
            .ok_or(TlogError::NoSigningKey {
                log_index: self.log_index,
            })
    }

    /// Rekor v1 verifiers: a PEM certificate or public key, compared as DER.
    fn check_pem_verifier(&self, path: &str, pem: &[u8]) -> Result<(), TlogError> {
        let pem = std::str::from_utf8(pem).map_err(|_| self.field_err(path, "is not PEM text"))?;
        match self.signer()? {
            Signer::Certificate(cert) => {
                let der = pem_decode(pem, "CERTIFICATE").map_err(|e| self.mismatch(path, e))?;
                if der != cert.der {
                    return Err(self.mismatch(path, "is not the bundle's signing certificate"));
                }
            }
            Signer::Key(spki) => {
                let der = pem_decode(pem, "PUBLIC KEY").map_err(|e| self.mismatch(path, e))?;
                if der != spki {
                    return Err(self.mismatch(path, "is not the verification public key"));
                }
            }
        }
        Ok(())
    }

    /// Rekor v2 verifiers: `{x509Certificate: {rawBytes}}` or `{publicKey: {rawBytes}}`.
    fn check_v2_verifier(&self, v: &Value, path: &str) -> Result<(), TlogError> {
        match self.signer()? {
            Signer::Certificate(cert) => {
                let der = self.b64_in(v, path, "x509Certificate.rawBytes")?;
                if der != cert.der {
                    return Err(self.mismatch(
                        &join(path, "x509Certificate.rawBytes"),
                        "is not the bundle's signing certificate",
                    ));
                }
            }
            Signer::Key(spki) => {
                let der = self.b64_in(v, path, "publicKey.rawBytes")?;
                if der != spki {
                    return Err(self.mismatch(
                        &join(path, "publicKey.rawBytes"),
                        "is not the verification public key",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The digest the entry must record for a message signature.
    fn expected_digest(&self) -> Result<(HashAlgorithm, Vec<u8>), TlogError> {
        if let Some(d) = self.ctx.artifact_digest {
            return Ok((HashAlgorithm::Sha256, d.to_vec()));
        }
        if let Content::MessageSignature {
            digest: Some((alg, d)),
            ..
        } = &self.ctx.bundle.content
            && let Some(alg) = hash_algorithm(alg)
        {
            return Ok((alg, d.clone()));
        }
        Err(TlogError::NoArtifactDigest {
            log_index: self.log_index,
        })
    }

    fn check_digest(
        &self,
        alg_path: &str,
        alg: &str,
        value_path: &str,
        value: &[u8],
        expected: &(HashAlgorithm, Vec<u8>),
    ) -> Result<(), TlogError> {
        if hash_algorithm(alg) != Some(expected.0) {
            return Err(self.mismatch(
                alg_path,
                format!("is `{alg}`, expected {}", expected.0.name()),
            ));
        }
        if value != expected.1.as_slice() {
            return Err(self.mismatch(
                value_path,
                format!(
                    "is {}, expected {}",
                    hex::encode(value),
                    hex::encode(&expected.1)
                ),
            ));
        }
        Ok(())
    }

    fn hex_at(&self, path: &str) -> Result<Vec<u8>, TlogError> {
        hex::decode(self.str(path)?).map_err(|e| self.field_err(path, format!("invalid hex: {e}")))
    }

    fn message_signature(&self, path: &str) -> Result<&'a [u8], TlogError> {
        match &self.ctx.bundle.content {
            Content::MessageSignature { signature, .. } => Ok(signature),
            Content::Dsse(_) => Err(self.mismatch(
                path,
                "belongs to a message-signature entry but the bundle holds a DSSE envelope",
            )),
        }
    }

    fn envelope(&self, path: &str) -> Result<&'a DsseEnvelope, TlogError> {
        match &self.ctx.bundle.content {
            Content::Dsse(env) => Ok(env),
            Content::MessageSignature { .. } => Err(self.mismatch(
                path,
                "belongs to a DSSE entry but the bundle holds a message signature",
            )),
        }
    }

    fn check_signature_set(&self, path: &str, mut logged: Vec<Vec<u8>>) -> Result<(), TlogError> {
        let env = self.envelope(path)?;
        let mut ours: Vec<Vec<u8>> = env.signatures.iter().map(|(s, _)| s.clone()).collect();
        ours.sort();
        ours.dedup();
        logged.sort();
        logged.dedup();
        if ours != logged {
            return Err(self.mismatch(
                path,
                format!(
                    "lists {} signature(s) that are not the envelope's {}",
                    logged.len(),
                    ours.len()
                ),
            ));
        }
        Ok(())
    }

    fn hashedrekord_v001(&self) -> Result<(), TlogError> {
        let bundle_sig = self.message_signature("spec.signature.content")?;
        let expected = self.expected_digest()?;
        self.check_digest(
            "spec.data.hash.algorithm",
            self.str("spec.data.hash.algorithm")?,
            "spec.data.hash.value",
            &self.hex_at("spec.data.hash.value")?,
            &expected,
        )?;
        if self.b64("spec.signature.content")? != bundle_sig {
            return Err(self.mismatch("spec.signature.content", "is not the bundle's signature"));
        }
        let pem = self.b64("spec.signature.publicKey.content")?;
        self.check_pem_verifier("spec.signature.publicKey.content", &pem)
    }

    fn hashedrekord_v002(&self) -> Result<(), TlogError> {
        let sig = self.b64("spec.hashedRekordV002.signature.content")?;
        let digest = self.b64("spec.hashedRekordV002.data.digest")?;
        let alg = self.str("spec.hashedRekordV002.data.algorithm")?;
        // Rekor v2 logs DSSE as a hashedrekord over the envelope's PAE
        // (rekor-v2 spec §6.1.4), so the content decides what is compared.
        let (expected, bundle_sig): ((HashAlgorithm, Vec<u8>), &[u8]) =
            match &self.ctx.bundle.content {
                Content::MessageSignature { signature, .. } => (self.expected_digest()?, signature),
                Content::Dsse(env) => {
                    let [(only, _)] = env.signatures.as_slice() else {
                        return Err(self.mismatch(
                            "spec.hashedRekordV002.signature.content",
                            format!(
                                "is one signature but the envelope has {}",
                                env.signatures.len()
                            ),
                        ));
                    };
                    (
                        (
                            HashAlgorithm::Sha256,
                            sha256(&crate::dsse::pae(&env.payload_type, &env.payload)).to_vec(),
                        ),
                        only,
                    )
                }
            };
        self.check_digest(
            "spec.hashedRekordV002.data.algorithm",
            alg,
            "spec.hashedRekordV002.data.digest",
            &digest,
            &expected,
        )?;
        if sig != bundle_sig {
            return Err(self.mismatch(
                "spec.hashedRekordV002.signature.content",
                "is not the bundle's signature",
            ));
        }
        let verifier = self
            .value("spec.hashedRekordV002.signature.verifier")
            .ok_or_else(|| self.field_err("spec.hashedRekordV002.signature.verifier", "missing"))?;
        self.check_v2_verifier(verifier, "spec.hashedRekordV002.signature.verifier")
    }

    fn dsse_v001(&self) -> Result<(), TlogError> {
        let env = self.envelope("spec")?;
        // `envelopeHash` hashes the client's own JSON serialization of the
        // envelope, which the bundle does not preserve byte for byte; the
        // payload hash and signatures below bind the same content, and the
        // DSSE signature binds the payload type.
        self.check_digest(
            "spec.payloadHash.algorithm",
            self.str("spec.payloadHash.algorithm")?,
            "spec.payloadHash.value",
            &self.hex_at("spec.payloadHash.value")?,
            &(HashAlgorithm::Sha256, sha256(&env.payload).to_vec()),
        )?;
        let mut logged = Vec::new();
        for (i, s) in self.array("spec.signatures")?.iter().enumerate() {
            let base = format!("spec.signatures[{i}]");
            logged.push(self.b64_in(s, &base, "signature")?);
            let pem = self.b64_in(s, &base, "verifier")?;
            self.check_pem_verifier(&join(&base, "verifier"), &pem)?;
        }
        self.check_signature_set("spec.signatures", logged)
    }

    fn intoto_v002(&self) -> Result<(), TlogError> {
        let env = self.envelope("spec.content")?;
        let payload_type = self.str("spec.content.envelope.payloadType")?;
        if payload_type != env.payload_type {
            return Err(self.mismatch(
                "spec.content.envelope.payloadType",
                format!("is `{payload_type}`, expected `{}`", env.payload_type),
            ));
        }
        // Rekor stores the envelope's base64 fields base64-encoded again.
        let double = |v: &Value, base: &str, rel: &str| -> Result<Vec<u8>, TlogError> {
            let inner = self.b64_in(v, base, rel)?;
            base64::engine::general_purpose::STANDARD
                .decode(&inner)
                .map_err(|_| {
                    self.mismatch(
                        &join(base, rel),
                        "is not base64 of base64, as Rekor stores it",
                    )
                })
        };
        if self.value("spec.content.envelope.payload").is_some() {
            let payload = double(&self.json, "", "spec.content.envelope.payload")?;
            if payload != env.payload {
                return Err(self.mismatch(
                    "spec.content.envelope.payload",
                    "is not the envelope's payload",
                ));
            }
        }
        self.check_digest(
            "spec.content.payloadHash.algorithm",
            self.str("spec.content.payloadHash.algorithm")?,
            "spec.content.payloadHash.value",
            &self.hex_at("spec.content.payloadHash.value")?,
            &(HashAlgorithm::Sha256, sha256(&env.payload).to_vec()),
        )?;
        let mut logged = Vec::new();
        for (i, s) in self
            .array("spec.content.envelope.signatures")?
            .iter()
            .enumerate()
        {
            let base = format!("spec.content.envelope.signatures[{i}]");
            logged.push(double(s, &base, "sig")?);
            let pem = self.b64_in(s, &base, "publicKey")?;
            self.check_pem_verifier(&join(&base, "publicKey"), &pem)?;
        }
        self.check_signature_set("spec.content.envelope.signatures", logged)
    }

    fn dsse_v002(&self) -> Result<(), TlogError> {
        let env = self.envelope("spec.dsseV002")?;
        self.check_digest(
            "spec.dsseV002.payloadHash.algorithm",
            self.str("spec.dsseV002.payloadHash.algorithm")?,
            "spec.dsseV002.payloadHash.digest",
            &self.b64("spec.dsseV002.payloadHash.digest")?,
            &(HashAlgorithm::Sha256, sha256(&env.payload).to_vec()),
        )?;
        let mut logged = Vec::new();
        for (i, s) in self.array("spec.dsseV002.signatures")?.iter().enumerate() {
            let base = format!("spec.dsseV002.signatures[{i}]");
            logged.push(self.b64_in(s, &base, "content")?);
            let verifier = s
                .get("verifier")
                .ok_or_else(|| self.field_err(&join(&base, "verifier"), "missing"))?;
            self.check_v2_verifier(verifier, &join(&base, "verifier"))?;
        }
        self.check_signature_set("spec.dsseV002.signatures", logged)
    }
}

fn join(base: &str, rel: &str) -> String {
    if base.is_empty() {
        rel.to_owned()
    } else {
        format!("{base}.{rel}")
    }
}

/// Hash names as Rekor v1 (`sha256`) and the protobuf specs (`SHA2_256`) spell them.
fn hash_algorithm(name: &str) -> Option<HashAlgorithm> {
    match name {
        "sha256" | "SHA2_256" => Some(HashAlgorithm::Sha256),
        "sha384" | "SHA2_384" => Some(HashAlgorithm::Sha384),
        "sha512" | "SHA2_512" => Some(HashAlgorithm::Sha512),
        _ => None,
    }
}

fn check_body(kind: Kind, entry: &TlogEntry, ctx: &EntryContext<'_>) -> Result<(), TlogError> {
    let log_index = entry.log_index;
    let json: Value =
        serde_json::from_slice(&entry.canonicalized_body).map_err(|e| TlogError::BodyField {
            log_index,
            field: "canonicalizedBody".into(),
            reason: format!("not JSON: {e}"),
        })?;
    let body = Body {
        json,
        log_index,
        ctx,
    };
    let body_kind = body.str("kind")?;
    if body_kind != entry.kind {
        return Err(body.mismatch(
            "kind",
            format!("is `{body_kind}` but kindVersion.kind is `{}`", entry.kind),
        ));
    }
    let body_version = body.str("apiVersion")?;
    if body_version != entry.version {
        return Err(body.mismatch(
            "apiVersion",
            format!(
                "is `{body_version}` but kindVersion.version is `{}`",
                entry.version
            ),
        ));
    }
    match kind {
        Kind::HashedRekordV001 => body.hashedrekord_v001(),
        Kind::DsseV001 => body.dsse_v001(),
        Kind::IntotoV002 => body.intoto_v002(),
        Kind::HashedRekordV002 => body.hashedrekord_v002(),
        Kind::DsseV002 => body.dsse_v002(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::tests::{case_bundle, case_root, conformance_dir};

    fn artifact_digest(case: &str) -> [u8; 32] {
        let dir = conformance_dir();
        let bytes = std::fs::read(dir.join(case).join("artifact"))
            .or_else(|_| std::fs::read(dir.join("a.txt")))
            .unwrap();
        sha256(&bytes)
    }

    fn managed_key(case: &str) -> Option<Vec<u8>> {
        let pem = std::fs::read_to_string(conformance_dir().join(case).join("key.pub")).ok()?;
        // managed-key-wrong-key_fail ships a key that is not even valid
        // base64; the orchestrator rejects it first, here it is just "another key".
        Some(pem_decode(&pem, "PUBLIC KEY").unwrap_or_else(|_| b"not the key".to_vec()))
    }

    /// A conformance case with everything `verify_tlog_entry` needs, editable
    /// before verifying.
    struct Case {
        bundle: Bundle,
        root: TrustedRoot,
        digest: Option<[u8; 32]>,
        key: Option<Vec<u8>>,
        now: OffsetDateTime,
    }

    impl Case {
        fn load(name: &str) -> Self {
            let bundle = case_bundle(name);
            let digest = matches!(bundle.content, Content::MessageSignature { .. })
                .then(|| artifact_digest(name));
            Self {
                root: case_root(name),
                key: managed_key(name),
                bundle,
                digest,
                now: OffsetDateTime::now_utc(),
            }
        }

        fn entry(&mut self) -> &mut TlogEntry {
            &mut self.bundle.tlog_entries[0]
        }

        fn verify(&self) -> Result<VerifiedEntry, TlogError> {
            let ctx = EntryContext {
                bundle: &self.bundle,
                artifact_digest: self.digest.as_ref(),
                signing_key_spki: self.key.as_deref(),
                now: self.now,
                require_inclusion_proof: self.bundle.version >= BundleVersion::V0_2,
            };
            verify_tlog_entry(&self.bundle.tlog_entries[0], &ctx, &self.root)
        }
    }

    fn run(case: &str) -> Result<VerifiedEntry, TlogError> {
        Case::load(case).verify()
    }

    fn at(unix: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(unix).unwrap()
    }

    #[test]
    fn accepts_valid_entries_of_every_kind() {
        for case in [
            "happy-path-v0.1",
            "happy-path-v0.2",
            "happy-path-v0.3",
            "happy-path-v0.3-new-mediaType",
            "happy-path-intoto-in-dsse-v3",
            "intoto-with-custom-trust-root",
            "managed-key-happy-path",
            "managed-key-and-trusted-root",
            "trust-root-tlog-validity-end-inclusive",
            "rekor2-happy-path",
            "rekor2-dsse-happy-path",
            "rekor2-checkpoint-cosigned",
            "rekor2-checkpoint-multiple-cosigs",
            "rekor2-checkpoint-origin-not-first",
            "rekor2-checkpoint-two-sigs-cosigned",
            "rekor2-checkpoint-two-sigs-from-origin",
            "bundle-with-sct-with-extensions",
        ] {
            let v = run(case).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert!(v.has_inclusion_proof, "{case}");
            assert_eq!(v.rekor_v2, v.integrated_time.is_none(), "{case}");
        }
    }

    #[test]
    fn a_rekor_v1_entry_reports_the_time_its_set_verified() {
        let v = run("happy-path-v0.1").unwrap();
        assert_eq!(v.integrated_time, Some(at(1_689_177_396)));
        assert_eq!(v.log_index, 27_246_492);
        assert!(!v.rekor_v2);
        assert_eq!(v.log, 0);
    }

    #[test]
    fn a_rekor_v2_entry_has_no_time_and_finds_its_shard() {
        let case = Case::load("rekor2-dsse-happy-path");
        let v = case.verify().unwrap();
        assert!(v.rekor_v2 && v.integrated_time.is_none());
        assert_eq!(
            case.root.tlogs[v.log].origin,
            "log2025-alpha3.rekor.sigstage.dev"
        );
    }

    #[test]
    fn the_log_key_validity_of_a_v2_entry_is_checked_at_the_time_given() {
        let case = Case::load("rekor2-happy-path");
        let v = case.verify().unwrap();
        let start = case.root.tlogs[v.log].valid_for.start.unwrap();
        v.check_log_valid_at(&case.root, start).unwrap();
        assert!(matches!(
            v.check_log_valid_at(&case.root, start - Duration::seconds(1)),
            Err(TlogError::LogKeyNotValidAt { .. })
        ));
    }

    #[test]
    fn an_entry_from_another_sigstore_instance_names_the_unknown_log() {
        let err = run("bundle-from-wrong-instance_fail").unwrap_err();
        assert!(matches!(err, TlogError::UnknownLog { .. }));
        assert!(
            err.to_string()
                .contains("0y8wo8MtY5wrdiIFohx7sHeI5oKDpK5vQhGHI6G+pJY=")
        );
    }

    #[test]
    fn logs_match_by_spki_hash_or_c2sp_key_id_whichever_the_root_carries() {
        let mut v2 = Case::load("rekor2-happy-path");
        for l in &mut v2.root.tlogs {
            l.log_id = sha256(&l.spki_der).to_vec();
        }
        v2.verify().unwrap();
        let mut v1 = Case::load("happy-path-v0.2");
        v1.root.tlogs[0].log_id = b"some other id".to_vec();
        v1.verify().unwrap();
    }

    #[test]
    fn a_log_key_without_validity_start_is_never_valid() {
        // The trust-root parser already refuses such a root (see
        // trust-root-tlog-missing-validity-start_fail); a root built in code
        // with the same hole must still not widen trust.
        let mut case = Case::load("trust-root-tlog-validity-end-inclusive");
        for log in &mut case.root.tlogs {
            log.valid_for.start = None;
        }
        assert!(matches!(
            case.verify(),
            Err(TlogError::LogNeverValid { .. })
        ));
    }

    #[test]
    fn an_integrated_time_outside_the_log_key_validity_is_rejected() {
        let mut case = Case::load("trust-root-tlog-validity-end-inclusive");
        case.root.tlogs[0].valid_for.end = Some(at(1_689_177_395));
        assert!(matches!(
            case.verify(),
            Err(TlogError::LogKeyNotValidAt { .. })
        ));
    }

    #[test]
    fn an_integrated_time_beyond_the_allowed_skew_is_in_the_future() {
        let mut case = Case::load("happy-path-v0.1");
        case.now = at(1_689_177_396) - MAX_FUTURE_SKEW - Duration::seconds(1);
        assert!(matches!(
            case.verify(),
            Err(TlogError::IntegratedTimeInFuture { .. })
        ));
        case.now = at(1_689_177_396) - MAX_FUTURE_SKEW;
        case.verify().unwrap();
    }

    #[test]
    fn a_bad_set_signature_fails() {
        assert!(matches!(
            run("set-invalid-signature_fail"),
            Err(TlogError::SetInvalid { .. })
        ));
        let mut case = Case::load("happy-path-v0.1");
        case.entry().integrated_time += 1;
        assert!(matches!(case.verify(), Err(TlogError::SetInvalid { .. })));
        let mut case = Case::load("happy-path-v0.1");
        case.entry().log_index += 1;
        assert!(matches!(case.verify(), Err(TlogError::SetInvalid { .. })));
    }

    #[test]
    fn a_v01_entry_needs_a_set_but_not_a_proof() {
        let mut case = Case::load("happy-path-v0.1");
        case.entry().inclusion_proof = None;
        let v = case.verify().unwrap();
        assert!(!v.has_inclusion_proof && v.integrated_time.is_some());
        case.entry().signed_entry_timestamp = None;
        assert!(matches!(case.verify(), Err(TlogError::MissingSet { .. })));
    }

    #[test]
    fn v02_entries_need_a_proof_with_a_checkpoint() {
        assert!(matches!(
            run("intoto-missing-inclusion-proof_fail"),
            Err(TlogError::MissingInclusionProof { .. })
        ));
        let mut case = Case::load("happy-path-v0.2");
        if let Some(p) = case.entry().inclusion_proof.as_mut() {
            p.checkpoint = None;
        }
        assert!(matches!(
            case.verify(),
            Err(TlogError::MissingCheckpoint { .. })
        ));
    }

    #[test]
    fn a_v2_entry_needs_a_proof_and_carries_no_set() {
        assert!(matches!(
            run("rekor2-no-inclusion-proof_fail"),
            Err(TlogError::MissingInclusionProof { .. })
        ));
        let mut case = Case::load("rekor2-happy-path");
        case.entry().signed_entry_timestamp = Some(vec![0x30, 0x00]);
        assert!(matches!(
            case.verify(),
            Err(TlogError::UnexpectedSet { .. })
        ));
    }

    #[test]
    fn broken_or_foreign_inclusion_proofs_fail() {
        for case in [
            "inclusion-proof-corrupted-hash_fail",
            "invalid-inclusion-proof_fail",
        ] {
            assert!(
                matches!(run(case), Err(TlogError::InclusionProof { .. })),
                "{case}"
            );
        }
        assert!(matches!(
            run("checkpoint-wrong-roothash_fail"),
            Err(TlogError::CheckpointMismatch { .. })
        ));
    }

    #[test]
    fn bad_checkpoints_fail() {
        for case in [
            "checkpoint-bad-keyhint_fail",
            "invalid-checkpoint-signature_fail",
            "rekor2-checkpoint-missing-log-signature_fail",
            "rekor2-checkpoint-missing-origin_fail",
            "rekor2-checkpoint-missing-root-hash_fail",
            "rekor2-checkpoint-missing-size_fail",
            "rekor2-checkpoint-no-matching-signature_fail",
        ] {
            assert!(
                matches!(run(case), Err(TlogError::Checkpoint { .. })),
                "{case}: {:?}",
                run(case)
            );
        }
    }

    #[test]
    fn entries_for_other_content_or_signatures_name_the_field() {
        for (case, field) in [
            ("wrong-hashedrekord-artifact_fail", "spec.data.hash.value"),
            (
                "wrong-hashedrekord-cert-and-sig_fail",
                "spec.signature.content",
            ),
            ("wrong-hashedrekord-entry_fail", "spec.data.hash.value"),
            ("wrong-material_fail", "spec.data.hash.value"),
            ("signature-mismatch_fail", "spec.signature.content"),
            (
                "incorrect-public-key_fail",
                "spec.signature.publicKey.content",
            ),
            (
                "managed-key-wrong-key_fail",
                "spec.signature.publicKey.content",
            ),
            ("dsse-mismatch-envelope_fail", "spec.payloadHash.value"),
            ("dsse-mismatch-sig_fail", "spec.signatures"),
            (
                "intoto-log-entry-mismatch_fail",
                "spec.content.envelope.signatures[0].sig",
            ),
            (
                "rekor2-dsse-mismatch-envelope_fail",
                "spec.hashedRekordV002.data.digest",
            ),
            (
                "rekor2-dsse-mismatch-sig_fail",
                "spec.hashedRekordV002.signature.content",
            ),
            (
                "rekor2-dsse-invalid-sig_fail",
                "spec.hashedRekordV002.signature.content",
            ),
        ] {
            match run(case) {
                Err(TlogError::BodyMismatch { field: f, .. }) => assert_eq!(f, field, "{case}"),
                other => panic!("{case}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_managed_key_bundle_without_a_key_cannot_be_matched() {
        assert!(matches!(
            run("managed-key-no-key_fail"),
            Err(TlogError::NoSigningKey { .. })
        ));
    }

    #[test]
    fn without_an_artifact_digest_the_bundle_message_digest_is_compared() {
        let mut ok = Case::load("happy-path-v0.3");
        ok.digest = None;
        ok.verify().unwrap();
        let mut bad = Case::load("message-digest-mismatch_fail");
        bad.digest = None;
        assert!(matches!(bad.verify(), Err(TlogError::BodyMismatch { .. })));
    }

    #[test]
    fn kind_version_must_match_the_body_and_be_known() {
        let mut case = Case::load("happy-path-v0.3");
        case.entry().kind = "rekord".into();
        assert!(matches!(
            case.verify(),
            Err(TlogError::UnsupportedKind { .. })
        ));
        let mut case = Case::load("happy-path-intoto-in-dsse-v3");
        case.entry().kind = "hashedrekord".into();
        match case.verify() {
            Err(TlogError::BodyMismatch { field, .. }) => assert_eq!(field, "kind"),
            other => panic!("{other:?}"),
        }
        let mut case = Case::load("rekor2-happy-path");
        case.entry().version = "0.0.1".into();
        match case.verify() {
            Err(TlogError::BodyMismatch { field, .. }) => assert_eq!(field, "apiVersion"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_changed_body_byte_fails_and_never_panics() {
        let base = Case::load("rekor2-dsse-happy-path");
        let len = base.bundle.tlog_entries[0].canonicalized_body.len();
        for i in (0..len).step_by(97) {
            let mut case = Case::load("rekor2-dsse-happy-path");
            case.entry().canonicalized_body[i] ^= 0x01;
            assert!(case.verify().is_err(), "byte {i}");
        }
        let mut case = Case::load("happy-path-v0.1");
        case.entry().canonicalized_body = b"not json".to_vec();
        assert!(matches!(case.verify(), Err(TlogError::BodyField { .. })));
    }
}
