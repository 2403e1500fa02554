//! Transparency-log checkpoints: C2SP signed notes (<https://c2sp.org/signed-note>)
//! carrying a tlog checkpoint body (<https://c2sp.org/tlog-checkpoint>), parsed
//! and checked against one trusted log's key.
//!
//! A note is its text (every line ending in `\n`), a blank line, then one or
//! more signature lines `— <name> <base64(key hint ‖ signature)>`. Signatures
//! from keys other than the log's (witness cosignatures, other logs) are
//! ignored: only the log's own signature makes a checkpoint trustworthy, and
//! sigil does not yet carry witness keys.
//!
//! How a checkpoint names its log depends on the log ([`OriginRule`]). A
//! Rekor v2 (C2SP) log's key ID hashes its name, so the origin line and the
//! signature's key name must be the log's host: the name is part of the key's
//! identity. A Rekor v1 log signs `<hostname> - <tree id>` with the Rekor
//! server's own hostname (its `rekor_server.hostname`, by default the pod
//! name in private deployments) and puts that hostname on the signature line;
//! its key ID is SHA-256 of the key alone. There the key identifies the log and
//! the names are not checked, as Rekor's own `SignedNote.Verify`, sigstore-go
//! and sigstore-python do for v1 checkpoints.

use base64::Engine as _;

use crate::crypto::{HashAlgorithm, KeyMaterial, PublicKey, sha256};
use crate::trust::TransparencyLog;

/// Largest note accepted. Real checkpoints are a few hundred bytes; the bound
/// keeps a hostile bundle from making us scan megabytes.
pub const MAX_NOTE_LEN: usize = 64 * 1024;
/// Most signature lines accepted on one note (the Go `note` package uses the same bound).
pub const MAX_SIGNATURES: usize = 100;

const SIG_PREFIX: &str = "\u{2014} ";

/// Why a checkpoint was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The note is larger than [`MAX_NOTE_LEN`].
    #[error(
        "checkpoint is {len} bytes, more than the {MAX_NOTE_LEN} sigil accepts; it is not a log checkpoint"
    )]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// The note has no blank line between its text and its signatures.
    #[error(
        "checkpoint has no blank line separating its text from its signatures; the signed note is malformed"
    )]
    NoSignatureBlock,
    /// The note text breaks a signed-note rule.
    #[error("checkpoint text is malformed: {0}")]
    Text(String),
    /// The first line (the log origin) is missing or empty.
    #[error("checkpoint has no origin line; the checkpoint body is malformed")]
    MissingOrigin,
    /// The second line is not a decimal tree size.
    #[error(
        "checkpoint tree size line `{0}` is not a decimal integer; the checkpoint body is malformed"
    )]
    BadTreeSize(String),
    /// The third line is not a base64 root hash.
    #[error("checkpoint root hash line `{0}` is not base64; the checkpoint body is malformed")]
    BadRootHash(String),
    /// A signature line is malformed.
    #[error("checkpoint signature line {index} is malformed: {reason}")]
    BadSignatureLine {
        /// 0-based index of the signature line.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The note carries no signature lines at all.
    #[error("checkpoint carries no signatures; a log checkpoint must be signed by its log")]
    NoSignatures,
    /// The note carries more than [`MAX_SIGNATURES`] signature lines.
    #[error("checkpoint carries {0} signatures, more than the {MAX_SIGNATURES} sigil accepts")]
    TooManySignatures(usize),
    /// The origin line does not name the log the entry claims to come from.
    #[error(
        "checkpoint origin `{origin}` does not match the transparency log: expected {expected}; the checkpoint is from another log"
    )]
    OriginMismatch {
        /// The checkpoint's origin.
        origin: String,
        /// What the origin must be, e.g. `` `log2025-1.rekor.sigstore.dev` `` or
        /// `` `<rekor hostname> - <tree id>` ``.
        expected: String,
    },
    /// The trusted root's key for this log could not be decoded.
    #[error("transparency log {log} has a key sigil cannot use ({details}); fix the trusted root")]
    LogKeyUnsupported {
        /// The log's base URL.
        log: String,
        /// The root's `keyDetails`.
        details: String,
    },
    /// No signature line carries the log's key hint.
    #[error(
        "checkpoint has no signature from transparency log {log} (key hint {hint}); it was signed by another key"
    )]
    NoLogSignature {
        /// The log's base URL.
        log: String,
        /// Hex of the key hint looked for.
        hint: String,
    },
    /// A signature with the log's key hint does not verify.
    #[error(
        "checkpoint signature `{name}` from transparency log {log} does not verify: {reason}; the checkpoint was altered"
    )]
    InvalidSignature {
        /// The signature line's name.
        name: String,
        /// The log's base URL.
        log: String,
        /// Why it failed.
        reason: String,
    },
}

/// A parsed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log origin (first line), e.g. `rekor.sigstore.dev - 1193050959916656506`.
    pub origin: String,
    /// Number of leaves in the tree.
    pub tree_size: u64,
    /// Root hash of the tree of `tree_size` leaves.
    pub root_hash: Vec<u8>,
    /// Lines after the root hash (e.g. Rekor v1's `Timestamp: …`), without `\n`.
    pub extensions: Vec<String>,
    /// Every signature line, in note order.
    pub signatures: Vec<NoteSignature>,
}

/// One signature line of a signed note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    /// The key name the line gives.
    pub name: String,
    /// First four bytes of the signing key's ID.
    pub key_hint: [u8; 4],
    /// The signature proper (after the hint).
    pub signature: Vec<u8>,
}

/// Splits a note into its signed text (ending in `\n`) and its signature block.
fn split_note(text: &str) -> Result<(&str, &str), CheckpointError> {
    if text.len() > MAX_NOTE_LEN {
        return Err(CheckpointError::TooLarge { len: text.len() });
    }
    // The last blank line is the separator: the text itself may not contain
    // one, and signature lines never do.
    let split = text
        .rfind("\n\n")
        .ok_or(CheckpointError::NoSignatureBlock)?;
    let body = text
        .get(..=split)
        .ok_or(CheckpointError::NoSignatureBlock)?;
    let sigs = text
        .get(split + 2..)
        .ok_or(CheckpointError::NoSignatureBlock)?;
    Ok((body, sigs))
}

fn parse_signature(index: usize, line: &str) -> Result<NoteSignature, CheckpointError> {
    let bad = |reason: &str| CheckpointError::BadSignatureLine {
        index,
        reason: reason.to_owned(),
    };
    let rest = line
        .strip_prefix(SIG_PREFIX)
        .ok_or_else(|| bad("does not start with `— `"))?;
    let (name, b64) = rest
        .split_once(' ')
        .ok_or_else(|| bad("has no space between key name and signature"))?;
    if name.is_empty() || name.contains('+') || name.chars().any(char::is_whitespace) {
        return Err(bad("key name is empty or contains `+` or whitespace"));
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| bad(&format!("signature is not base64: {e}")))?;
    let (hint, signature) = raw
        .split_first_chunk::<4>()
        .filter(|(_, sig)| !sig.is_empty())
        .ok_or_else(|| bad("signature is shorter than a key hint plus one byte"))?;
    Ok(NoteSignature {
        name: name.to_owned(),
        key_hint: *hint,
        signature: signature.to_vec(),
    })
}

/// Parses a checkpoint without verifying any signature.
pub fn parse_checkpoint(text: &str) -> Result<Checkpoint, CheckpointError> {
    let (body, sigs) = split_note(text)?;
    if body.chars().any(|c| c.is_ascii_control() && c != '\n') {
        return Err(CheckpointError::Text(
            "contains a control character other than newline".into(),
        ));
    }

    let mut lines = body.strip_suffix('\n').unwrap_or(body).split('\n');
    let origin = lines
        .next()
        .filter(|l| !l.is_empty())
        .ok_or(CheckpointError::MissingOrigin)?;
    let size_line = lines.next().unwrap_or_default();
    // C2SP: ASCII decimal without leading zeros, so a size has one spelling.
    let tree_size = Some(size_line)
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .filter(|s| *s == "0" || !s.starts_with('0'))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| CheckpointError::BadTreeSize(size_line.to_owned()))?;
    let hash_line = lines.next().unwrap_or_default();
    let root_hash = base64::engine::general_purpose::STANDARD
        .decode(hash_line)
        .ok()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| CheckpointError::BadRootHash(hash_line.to_owned()))?;
    let extensions: Vec<String> = lines.map(str::to_owned).collect();
    if extensions.iter().any(String::is_empty) {
        return Err(CheckpointError::Text(
            "contains an empty extension line".into(),
        ));
    }

    let Some(sig_lines) = sigs.strip_suffix('\n') else {
        return Err(if sigs.is_empty() {
            CheckpointError::NoSignatures
        } else {
            CheckpointError::BadSignatureLine {
                index: sigs.split('\n').count().saturating_sub(1),
                reason: "does not end with a newline".into(),
            }
        });
    };
    let count = sig_lines.split('\n').count();
    if count > MAX_SIGNATURES {
        return Err(CheckpointError::TooManySignatures(count));
    }
    let signatures = sig_lines
        .split('\n')
        .enumerate()
        .map(|(i, l)| parse_signature(i, l))
        .collect::<Result<Vec<_>, _>>()?;

    Ok(Checkpoint {
        origin: origin.to_owned(),
        tree_size,
        root_hash,
        extensions,
        signatures,
    })
}

/// The C2SP signed-note key ID of an Ed25519 key named `name`:
/// SHA-256(name ‖ `\n` ‖ 0x01 ‖ raw 32-byte key). Rekor v2 logs are named by
/// their origin, and their trust-root log ID is this value.
pub fn ed25519_note_key_id(name: &str, key: &KeyMaterial) -> [u8; 32] {
    let mut buf = Vec::with_capacity(name.len() + 2 + 32);
    buf.extend_from_slice(name.as_bytes());
    buf.push(b'\n');
    buf.push(0x01);
    buf.extend_from_slice(key.raw());
    sha256(&buf)
}

/// How a checkpoint must name its log; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginRule {
    /// Rekor v2 and C2SP logs: the origin and the signature's key name are
    /// exactly the log's host, which its key ID commits to.
    Host,
    /// Rekor v1: the origin is `<server hostname> - <decimal tree id>` and the
    /// key name is the server's hostname, neither tied to the log's URL; the
    /// key alone identifies the log.
    RekorV1,
}

/// Whether `origin` has the form of a Rekor v1 checkpoint's origin:
/// `<server hostname> - <decimal tree id>`.
pub fn is_rekor_v1_origin(origin: &str) -> bool {
    origin.rsplit_once(" - ").is_some_and(|(host, tree)| {
        !host.is_empty() && !tree.is_empty() && tree.bytes().all(|b| b.is_ascii_digit())
    })
}

impl OriginRule {
    /// Whether `origin` is acceptable for `log` under this rule.
    pub fn accepts(self, origin: &str, log: &TransparencyLog) -> bool {
        match self {
            Self::Host => origin == log.origin,
            Self::RekorV1 => is_rekor_v1_origin(origin),
        }
    }

    fn expected(self, log: &TransparencyLog) -> String {
        match self {
            Self::Host => format!("`{}` (the host of {})", log.origin, log.base_url),
            Self::RekorV1 => "`<rekor hostname> - <tree id>`".to_owned(),
        }
    }

    /// Whether a signature line under key name `name` may be the log's.
    fn name_ok(self, name: &str, log: &TransparencyLog) -> bool {
        match self {
            // C2SP verifiers bind a key to its name, so a line under another
            // name is someone else's (a witness's cosignature, or a forgery)
            // whatever its four-byte hint says.
            Self::Host => name == log.origin,
            Self::RekorV1 => true,
        }
    }
}

/// Every key hint under which `log` may sign a checkpoint under `rule`: the
/// first four bytes of its trust-root log ID, and of the ID its key implies
/// (the C2SP key ID for an Ed25519 key named by its host; SHA-256 of the DER
/// SPKI otherwise, and always for Rekor v1). Trust roots carry one or the
/// other, so both count.
pub fn log_key_hints(log: &TransparencyLog, rule: OriginRule) -> Vec<[u8; 4]> {
    let derived = match (&log.key, rule) {
        (Some(PublicKey::Ed25519(k)), OriginRule::Host) => ed25519_note_key_id(&log.origin, k),
        _ => sha256(&log.spki_der),
    };
    let mut hints = Vec::with_capacity(2);
    if let Some((h, _)) = log.log_id.split_first_chunk::<4>() {
        hints.push(*h);
    }
    if let Some((h, _)) = derived.split_first_chunk::<4>()
        && !hints.contains(h)
    {
        hints.push(*h);
    }
    hints
}

/// Parses a checkpoint and verifies that `log` signed it and that its origin
/// names `log` under `rule`. Signatures under other key hints (or, for
/// [`OriginRule::Host`], other key names) are ignored; at least one that can
/// be the log's must verify.
pub fn verify_checkpoint(
    text: &str,
    log: &TransparencyLog,
    rule: OriginRule,
) -> Result<Checkpoint, CheckpointError> {
    let checkpoint = parse_checkpoint(text)?;
    if !rule.accepts(&checkpoint.origin, log) {
        return Err(CheckpointError::OriginMismatch {
            expected: rule.expected(log),
            origin: checkpoint.origin,
        });
    }
    let key = log
        .key
        .as_ref()
        .ok_or_else(|| CheckpointError::LogKeyUnsupported {
            log: log.base_url.clone(),
            details: log.key_details.clone(),
        })?;
    let (signed, _) = split_note(text)?;
    let hints = log_key_hints(log, rule);
    let mut failure = None;
    for sig in checkpoint
        .signatures
        .iter()
        .filter(|s| rule.name_ok(&s.name, log) && hints.contains(&s.key_hint))
    {
        // Ed25519 signs the text itself; ECDSA (Rekor v1) signs its SHA-256.
        match key.verify(signed.as_bytes(), &sig.signature, HashAlgorithm::Sha256) {
            Ok(()) => return Ok(checkpoint),
            Err(e) => {
                failure.get_or_insert(CheckpointError::InvalidSignature {
                    name: sig.name.clone(),
                    log: log.base_url.clone(),
                    reason: e.to_string(),
                });
            }
        }
    }
    Err(failure.unwrap_or_else(|| CheckpointError::NoLogSignature {
        log: log.base_url.clone(),
        hint: hints.first().map(hex::encode).unwrap_or_default(),
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use base64::engine::general_purpose::STANDARD as B64;

    use super::*;
    use crate::trust::TrustedRoot;

    pub(crate) use crate::test_support::{case_bundle, case_root, conformance_dir};

    fn case_checkpoint(case: &str) -> String {
        case_bundle(case).tlog_entries[0]
            .inclusion_proof
            .as_ref()
            .and_then(|p| p.checkpoint.clone())
            .unwrap()
    }

    fn verify_case(case: &str) -> Result<Checkpoint, CheckpointError> {
        let bundle = case_bundle(case);
        let root = case_root(case);
        let entry = &bundle.tlog_entries[0];
        let log = root
            .tlogs
            .iter()
            .find(|l| l.log_id == entry.log_id)
            .unwrap();
        let rule = if case.starts_with("rekor2") {
            OriginRule::Host
        } else {
            OriginRule::RekorV1
        };
        verify_checkpoint(&case_checkpoint(case), log, rule)
    }

    #[test]
    fn parses_a_rekor_v1_checkpoint_with_a_timestamp_extension() {
        let cp = parse_checkpoint(&case_checkpoint("happy-path-v0.1")).unwrap();
        assert_eq!(cp.origin, "rekor.sigstore.dev - 2605736670972794746");
        assert_eq!(cp.tree_size, 23_083_062);
        assert_eq!(cp.root_hash.len(), 32);
        assert_eq!(cp.extensions, vec!["Timestamp: 1689177396617352539"]);
        assert_eq!(cp.signatures.len(), 1);
        assert_eq!(cp.signatures[0].name, "rekor.sigstore.dev");
        assert_eq!(hex::encode(cp.signatures[0].key_hint), "c0d23d6a");
    }

    #[test]
    fn verifies_rekor_v1_ecdsa_checkpoints() {
        for case in [
            "happy-path-v0.1",
            "happy-path-v0.3",
            "happy-path-intoto-in-dsse-v3",
        ] {
            verify_case(case).unwrap_or_else(|e| panic!("{case}: {e}"));
        }
    }

    #[test]
    fn verifies_rekor_v2_ed25519_checkpoints_with_or_without_cosignatures() {
        for case in [
            "rekor2-happy-path",
            "rekor2-checkpoint-cosigned",
            "rekor2-checkpoint-multiple-cosigs",
            "rekor2-checkpoint-origin-not-first",
            "rekor2-checkpoint-two-sigs-cosigned",
            "rekor2-checkpoint-two-sigs-from-origin",
            "rekor2-dsse-happy-path",
        ] {
            let cp = verify_case(case).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert!(cp.origin.starts_with("log2025-alpha"), "{case}");
        }
    }

    #[test]
    fn parse_rejects_checkpoints_missing_origin_size_root_or_signature() {
        assert_eq!(
            parse_checkpoint(&case_checkpoint("rekor2-checkpoint-missing-origin_fail")),
            Err(CheckpointError::BadTreeSize(
                "rs1YPY0ydAV0lxgfrq5pE4oRpUJwo3syeps5+eGUTDI=".into()
            ))
        );
        assert!(matches!(
            parse_checkpoint(&case_checkpoint("rekor2-checkpoint-missing-size_fail")),
            Err(CheckpointError::BadTreeSize(_))
        ));
        assert!(matches!(
            parse_checkpoint(&case_checkpoint("rekor2-checkpoint-missing-root-hash_fail")),
            Err(CheckpointError::BadRootHash(_))
        ));
        assert_eq!(
            parse_checkpoint(&case_checkpoint(
                "rekor2-checkpoint-missing-log-signature_fail"
            )),
            Err(CheckpointError::NoSignatures)
        );
    }

    #[test]
    fn a_wrong_key_hint_means_no_log_signature() {
        assert!(matches!(
            verify_case("checkpoint-bad-keyhint_fail"),
            Err(CheckpointError::NoLogSignature { .. })
        ));
    }

    #[test]
    fn a_tampered_signature_fails() {
        assert!(matches!(
            verify_case("invalid-checkpoint-signature_fail"),
            Err(CheckpointError::InvalidSignature { .. })
        ));
    }

    #[test]
    fn an_origin_of_another_host_is_rejected() {
        assert!(matches!(
            verify_case("rekor2-checkpoint-no-matching-signature_fail"),
            Err(CheckpointError::OriginMismatch { .. })
        ));
    }

    #[test]
    fn a_changed_body_breaks_the_signature() {
        let text = case_checkpoint("rekor2-happy-path").replacen("\n736\n", "\n737\n", 1);
        let root = case_root("rekor2-happy-path");
        let log = root
            .tlogs
            .iter()
            .find(|l| l.origin == "log2025-alpha1.rekor.sigstage.dev")
            .unwrap();
        assert!(matches!(
            verify_checkpoint(&text, log, OriginRule::Host),
            Err(CheckpointError::InvalidSignature { .. })
        ));
    }

    /// Fuzz finding (`bundle_tamper`, input kept in
    /// `fuzz/regressions/bundle_tamper/`): the key name of a Rekor v1
    /// checkpoint's signature line is not signed and not part of the log's
    /// identity (the server's hostname, often a pod name), so a renamed line
    /// still verifies; under the C2SP rule the name is bound and a renamed
    /// line is not the log's.
    #[test]
    fn only_rekor_v2_binds_the_key_name_of_the_signature_line() {
        let renamed = |case: &str, from: &str| {
            let text = case_checkpoint(case);
            assert!(text.contains(&format!("\n\u{2014} {from} ")), "{text}");
            text.replacen(
                &format!("\n\u{2014} {from} "),
                "\n\u{2014} rkor.example ",
                1,
            )
        };
        let case = "managed-key-and-trusted-root";
        let v1 = case_root(case);
        let entry_log = case_bundle(case).tlog_entries[0].log_id.clone();
        let v1_log = v1.tlogs.iter().find(|l| l.log_id == entry_log).unwrap();
        let text = renamed(case, "rekor.sigstage.dev");
        assert!(verify_checkpoint(&text, v1_log, OriginRule::RekorV1).is_ok());

        let v2 = case_root("rekor2-happy-path");
        let v2_log = v2
            .tlogs
            .iter()
            .find(|l| l.origin == "log2025-alpha1.rekor.sigstage.dev")
            .unwrap();
        let text = renamed("rekor2-happy-path", "log2025-alpha1.rekor.sigstage.dev");
        assert!(matches!(
            verify_checkpoint(&text, v2_log, OriginRule::Host),
            Err(CheckpointError::NoLogSignature { .. })
        ));
    }

    /// Fuzz finding 2 (`bundle_tamper`): a byte changed in a witness's
    /// cosignature, or an unknown key's line renamed, still verifies, as
    /// sigil checks only the log's signature (found by its key hint; it
    /// carries no witness keys); the same change in the log's own line fails.
    #[test]
    fn a_witness_cosignature_is_not_checked_but_the_logs_signature_is() {
        let case = "rekor2-dsse-happy-path";
        let text = case_checkpoint(case);
        let root = case_root(case);
        let entry_log = case_bundle(case).tlog_entries[0].log_id.clone();
        let log = root.tlogs.iter().find(|l| l.log_id == entry_log).unwrap();
        let flip_in_line = |name: &str| {
            let start = text.find(&format!("\n\u{2014} {name} ")).unwrap() + 1;
            let line_end = start + text[start..].find('\n').unwrap();
            let sig_start = start + text[start..line_end].rfind(' ').unwrap() + 1;
            let sig = B64.decode(&text[sig_start..line_end]).unwrap();
            let mut tampered = sig.clone();
            // Past the 4-byte key hint: the signature itself.
            tampered[10] ^= 0x01;
            format!(
                "{}{}{}",
                &text[..sig_start],
                B64.encode(&tampered),
                &text[line_end..]
            )
        };
        assert!(verify_checkpoint(&text, log, OriginRule::Host).is_ok());
        let witness = flip_in_line("witness.stagemole.eu");
        assert_ne!(witness, text);
        assert!(verify_checkpoint(&witness, log, OriginRule::Host).is_ok());
        let own = flip_in_line(&log.origin);
        assert!(verify_checkpoint(&own, log, OriginRule::Host).is_err());

        // A line under the origin's name but with another key's hint is not
        // the log's either: renaming it changes nothing.
        let case = "rekor2-checkpoint-two-sigs-from-origin";
        let text = case_checkpoint(case);
        let root = case_root(case);
        let entry_log = case_bundle(case).tlog_entries[0].log_id.clone();
        let log = root.tlogs.iter().find(|l| l.log_id == entry_log).unwrap();
        let hint = B64.encode(log.log_id.get(..3).unwrap());
        let foreign = text
            .lines()
            .find(|l| {
                l.starts_with('\u{2014}') && !l.rsplit(' ').next().unwrap().starts_with(&hint)
            })
            .unwrap();
        let renamed = text.replacen(foreign, &foreign.replacen("sigstage", "sigstaWe", 1), 1);
        assert_ne!(renamed, text);
        assert!(verify_checkpoint(&renamed, log, OriginRule::Host).is_ok());
    }

    #[test]
    fn v2_trust_roots_carry_c2sp_key_ids() {
        let root = case_root("rekor2-happy-path");
        let log = root
            .tlogs
            .iter()
            .find(|l| l.origin == "log2025-alpha1.rekor.sigstage.dev")
            .unwrap();
        let Some(PublicKey::Ed25519(k)) = &log.key else {
            panic!("not Ed25519")
        };
        assert_eq!(ed25519_note_key_id(&log.origin, k).to_vec(), log.log_id);
    }

    #[test]
    fn rekor_v2_origins_are_exactly_the_log_host() {
        let root = TrustedRoot::public_good().unwrap();
        let v2 = &root.tlogs[1];
        assert!(OriginRule::Host.accepts("log2025-1.rekor.sigstore.dev", v2));
        assert!(!OriginRule::Host.accepts("log2025-1.rekor.sigstore.dev - 1", v2));
        assert!(!OriginRule::Host.accepts("log2025-1.rekor.sigstore.dev.evil", v2));
        assert!(!OriginRule::Host.accepts("rekor.sigstore.dev", v2));
    }

    #[test]
    fn rekor_v1_origins_name_any_server_hostname_and_a_decimal_tree_id() {
        let root = TrustedRoot::public_good().unwrap();
        let v1 = &root.tlogs[0];
        for ok in [
            "rekor.sigstore.dev - 2605736670972794746",
            "rekor-server-7d9c8b5f4-x2x4l - 7125409239467830170",
            "rekor.rekor-system.svc - 1",
        ] {
            assert!(OriginRule::RekorV1.accepts(ok, v1), "{ok}");
        }
        for bad in [
            "rekor.sigstore.dev",
            "rekor.sigstore.dev - ",
            " - 123",
            "rekor.sigstore.dev - 12a",
            "rekor.sigstore.dev - -1",
        ] {
            assert!(!OriginRule::RekorV1.accepts(bad, v1), "{bad}");
        }
    }

    /// A Rekor v1 log of a private deployment, as sigstore's scaffolding
    /// charts install it: reached at an in-cluster URL, signing checkpoints
    /// with its pod name.
    fn private_rekor_v1() -> (sigil_testkit::rekor::RekorV1, TrustedRoot) {
        let kit = sigil_testkit::Testkit::new(7);
        let rekor =
            sigil_testkit::rekor::RekorV1::new(7, "rekor-v1", "http://rekor.rekor-system.svc")
                .with_hostname("rekor-server-7d9c8b5f4-x2x4l");
        let kit = sigil_testkit::Testkit {
            rekor_v1: rekor.clone(),
            ..kit
        };
        let root = TrustedRoot::from_json(&kit.trusted_root_json()).unwrap();
        (rekor, root)
    }

    fn private_checkpoint(rekor: &sigil_testkit::rekor::RekorV1) -> String {
        let body = sigil_testkit::rekor::checkpoint_body(&rekor.origin(), 14, &[7; 32]);
        sigil_testkit::rekor::signed_note(&body, &[rekor.sign_checkpoint(&body)])
    }

    #[test]
    fn a_rekor_v1_checkpoint_named_by_the_servers_pod_hostname_verifies_under_the_log_key() {
        let (rekor, root) = private_rekor_v1();
        let log = root
            .tlogs
            .iter()
            .find(|l| l.base_url == rekor.base_url)
            .unwrap();
        let text = private_checkpoint(&rekor);
        assert!(
            text.starts_with("rekor-server-7d9c8b5f4-x2x4l - "),
            "{text}"
        );
        assert!(
            text.contains("\n\u{2014} rekor-server-7d9c8b5f4-x2x4l "),
            "{text}"
        );

        let cp = verify_checkpoint(&text, log, OriginRule::RekorV1).unwrap();
        assert_eq!(cp.tree_size, 14);
        // The same note claimed by a Rekor v2 log: its names are not the log's host.
        assert!(matches!(
            verify_checkpoint(&text, log, OriginRule::Host),
            Err(CheckpointError::OriginMismatch { .. })
        ));
    }

    #[test]
    fn a_private_rekor_v1_checkpoint_under_another_key_or_with_a_changed_body_is_rejected() {
        let (rekor, root) = private_rekor_v1();
        let log = root
            .tlogs
            .iter()
            .find(|l| l.base_url == rekor.base_url)
            .unwrap();
        // Same hostname, same log ID hint, another key: the signature fails.
        let impostor = sigil_testkit::rekor::RekorV1 {
            key: sigil_testkit::KeyPair::p256(8, "rekor-v1"),
            ..rekor.clone()
        };
        let body = sigil_testkit::rekor::checkpoint_body(&rekor.origin(), 14, &[7; 32]);
        let mut forged = impostor.sign_checkpoint(&body);
        forged.data.splice(..4, rekor.log_id()[..4].iter().copied());
        let text = sigil_testkit::rekor::signed_note(&body, &[forged]);
        assert!(matches!(
            verify_checkpoint(&text, log, OriginRule::RekorV1),
            Err(CheckpointError::InvalidSignature { .. })
        ));
        // Signed by the other key under its own hint: no signature of this log.
        let text = sigil_testkit::rekor::signed_note(&body, &[impostor.sign_checkpoint(&body)]);
        assert!(matches!(
            verify_checkpoint(&text, log, OriginRule::RekorV1),
            Err(CheckpointError::NoLogSignature { .. })
        ));
        // The log's signature over another tree size or root hash.
        let good = private_checkpoint(&rekor);
        for tampered in [
            good.replacen("\n14\n", "\n15\n", 1),
            good.replacen(&B64.encode([7u8; 32]), &B64.encode([8u8; 32]), 1),
            good.replacen("x2x4l - ", "x2x4m - ", 1),
        ] {
            assert_ne!(tampered, good);
            assert!(
                matches!(
                    verify_checkpoint(&tampered, log, OriginRule::RekorV1),
                    Err(CheckpointError::InvalidSignature { .. })
                ),
                "{tampered}"
            );
        }
    }

    #[test]
    fn malformed_notes_are_errors_not_panics() {
        for text in [
            "",
            "\n\n",
            "a\n1\nAAAA\n\n",
            "a\n1\nAAAA\n\n— x\n",
            "a\n1\nAAAA\n\n— x AAAA\n",
            "a\n1\nAAAA\n\n- x AAAAAAA=\n",
            "a\n1\nAAAA\n\n— x AAAAAAA=",
            "a\n01\nAAAA\n\n— x AAAAAAA=\n",
            "a\n-1\nAAAA\n\n— x AAAAAAA=\n",
            "a\n1\n!!\n\n— x AAAAAAA=\n",
            "a\u{7}\n1\nAAAA\n\n— x AAAAAAA=\n",
            "a\n99999999999999999999\nAAAA\n\n— x AAAAAAA=\n",
        ] {
            assert!(parse_checkpoint(text).is_err(), "{text:?}");
        }
        let big = "a".repeat(MAX_NOTE_LEN + 1);
        assert!(matches!(
            parse_checkpoint(&big),
            Err(CheckpointError::TooLarge { .. })
        ));
        let ok = parse_checkpoint("a\n0\nAAAA\nx: y\n\n— x AAAAAAA=\n").unwrap();
        assert_eq!(ok.tree_size, 0);
        assert_eq!(ok.extensions, vec!["x: y"]);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_notes_never_panic(text in "(?s).{0,300}", lines in proptest::collection::vec("[a-z0-9 =+/\u{2014}-]{0,20}", 0..8)) {
            let _ = parse_checkpoint(&text);
            let joined = lines.join("\n");
            let _ = parse_checkpoint(&joined);
            let root = TrustedRoot::public_good().unwrap();
            let _ = verify_checkpoint(&joined, &root.tlogs[0], OriginRule::RekorV1);
            let _ = verify_checkpoint(&joined, &root.tlogs[1], OriginRule::Host);
        }
    }
}
