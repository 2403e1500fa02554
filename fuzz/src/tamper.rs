//! The structure-aware tamper property: start from a bundle that verifies,
//! let the fuzzer edit one field (bytes inserted, deleted, set, flipped,
//! truncated, or the field replaced by another field's value), and require
//! that the result does not verify, unless the field is one whose content is
//! not signed, in which case what verification establishes must not change.
//!
//! This extends `crates/sigil-verifier/tests/tamper.rs` (every single-bit
//! flip, exhaustively) to arbitrary multi-byte edits, found by coverage.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;
use sigil_testkit::{
    BundleSpec, BundleVersion, ChainSpec, Content, TimestampSpec, TlogSpec, V1Kind, V2Kind,
};
use sigil_verifier::bundle::Bundle;
use sigil_verifier::checkpoint::is_rekor_v1_origin;
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{Artifact, VerificationPolicy, verify_bundle};
use time::OffsetDateTime;

use crate::{
    ARTIFACT, CONFORMANCE_IDENTITY, CONFORMANCE_ISSUER, case_dirs, conformance_dir, fixture,
};

/// How a field's content is edited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// Base64: the decoded bytes are edited and encoded again.
    Bytes,
    /// A string: its UTF-8 bytes are edited.
    Text,
    /// A protobuf-JSON int64 (decimal string): edited as text; an edit that
    /// spells the same number is not a change.
    Int,
}

/// What a field's content means for verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signed {
    /// Signed, or bound by a proof: no change may verify.
    Yes,
    /// Not signed; a change may verify but must not change the facts.
    No,
    /// The bundle's media type: may be relabelled to another version whose
    /// rules the bundle meets; only the reported media type may change.
    MediaType,
    /// A signed note: the body and the log's signature are signed; other
    /// signature lines (witnesses' cosignatures, unknown keys) are ignored
    /// by design, and a Rekor v1 note's key names are not bound to the log
    /// (the server's hostname, see `OriginRule::RekorV1`), so only their
    /// signatures count.
    Note,
}

/// The classification of a bundle field by its path (`[]` for any index).
pub fn classify(path: &str) -> (Treatment, Signed) {
    use Signed::{MediaType, No, Note, Yes};
    use Treatment::{Bytes, Int, Text};
    match path {
        "mediaType" => (Text, MediaType),
        // Unsigned hints and labels: see the allowances of
        // crates/sigil-verifier/tests/tamper.rs for why each is unsigned.
        "messageSignature.messageDigest.algorithm" => (Text, No),
        "verificationMaterial.publicKey.hint" => (Bytes, No),
        // DSSE: keyid is an unauthenticated hint (DSSE protocol spec).
        "dsseEnvelope.signatures[].keyid" => (Text, No),
        // The TimeStampResp wraps the signed TSTInfo in unsigned parts
        // (status, certificate set, digestAlgorithms hint).
        "verificationMaterial.timestampVerificationData.rfc3161Timestamps[].signedTimestamp" => {
            (Bytes, No)
        }
        "verificationMaterial.tlogEntries[].inclusionProof.checkpoint.envelope" => (Text, Note),
        "verificationMaterial.tlogEntries[].inclusionProof.logIndex"
        | "verificationMaterial.tlogEntries[].inclusionProof.treeSize"
        | "verificationMaterial.tlogEntries[].integratedTime"
        | "verificationMaterial.tlogEntries[].logIndex" => (Int, Yes),
        "messageSignature.signature"
        | "messageSignature.messageDigest.digest"
        | "dsseEnvelope.payload"
        | "dsseEnvelope.signatures[].sig"
        | "verificationMaterial.certificate.rawBytes"
        | "verificationMaterial.x509CertificateChain.certificates[].rawBytes"
        | "verificationMaterial.tlogEntries[].canonicalizedBody"
        | "verificationMaterial.tlogEntries[].inclusionPromise.signedEntryTimestamp"
        | "verificationMaterial.tlogEntries[].inclusionProof.hashes[]"
        | "verificationMaterial.tlogEntries[].inclusionProof.rootHash"
        | "verificationMaterial.tlogEntries[].logId.keyId" => (Bytes, Yes),
        // Everything else (payloadType, kindVersion, fields this table does
        // not know) is held to the strict rule.
        _ => (Text, Yes),
    }
}

/// A string leaf of the bundle JSON.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// Keys and indices from the root.
    pub path: Vec<String>,
    /// The path with indices as `[]`.
    pub normalised: String,
}

/// A bundle that verifies, and everything needed to verify it again.
pub struct Subject {
    /// For messages.
    pub name: String,
    /// The bundle.
    pub json: Value,
    /// Its string leaves.
    pub leaves: Vec<Leaf>,
    artifact: Vec<u8>,
    policy: VerificationPolicy,
    root: TrustedRoot,
    now: OffsetDateTime,
    /// `Debug` of the verified facts of the untouched bundle.
    pub facts: String,
}

impl Subject {
    fn new(
        name: String,
        json: Value,
        artifact: Vec<u8>,
        policy: VerificationPolicy,
        root: TrustedRoot,
        now: OffsetDateTime,
    ) -> Option<Self> {
        let mut leaves = Vec::new();
        collect(&json, &mut Vec::new(), &mut String::new(), &mut leaves);
        let mut s = Subject {
            name,
            json,
            leaves,
            artifact,
            policy,
            root,
            now,
            facts: String::new(),
        };
        s.facts = s.verify(&serde_json::to_vec(&s.json).ok()?).ok()?;
        Some(s)
    }

    /// Parses and verifies bundle JSON; `Ok` carries the facts' `Debug`.
    pub fn verify(&self, json: &[u8]) -> Result<String, String> {
        let bundle = Bundle::from_json(json).map_err(|e| format!("parse: {e}"))?;
        verify_bundle(
            &bundle,
            Artifact::Bytes(&self.artifact),
            &self.policy,
            &self.root,
            self.now,
        )
        .map(|v| format!("{v:?}"))
        .map_err(|e| format!("verify: {e}"))
    }
}

fn collect(v: &Value, path: &mut Vec<String>, norm: &mut String, out: &mut Vec<Leaf>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let before = norm.len();
                if !norm.is_empty() {
                    norm.push('.');
                }
                norm.push_str(k);
                path.push(k.clone());
                collect(v, path, norm, out);
                path.pop();
                norm.truncate(before);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                let before = norm.len();
                norm.push_str("[]");
                path.push(i.to_string());
                collect(v, path, norm, out);
                path.pop();
                norm.truncate(before);
            }
        }
        Value::String(_) => out.push(Leaf {
            path: path.clone(),
            normalised: norm.clone(),
        }),
        _ => {}
    }
}

fn at_mut<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, k| match v {
        Value::Object(m) => m.get_mut(k),
        Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    })
}

fn at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| match v {
        Value::Object(m) => m.get(k),
        Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// Every subject: testkit bundles of nine kinds, and the happy-path
/// sigstore-conformance bundles when that data set is on this machine.
pub fn subjects() -> &'static [Subject] {
    static S: std::sync::OnceLock<Vec<Subject>> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let mut out = testkit_subjects();
        out.extend(conformance_subjects());
        assert!(!out.is_empty(), "no tamper subject verifies");
        out
    })
}

/// The testkit bundle specs of the tamper subjects, with whether each signs
/// an in-toto statement (DSSE) rather than the artifact itself.
pub fn testkit_specs() -> Vec<(&'static str, BundleSpec, bool)> {
    let d = BundleSpec::default;
    let v2 = BundleSpec::rekor_v2;
    vec![
        (
            "message-v0.1-chain",
            BundleSpec {
                version: BundleVersion::V01,
                chain: ChainSpec::WithIntermediate,
                ..d()
            },
            false,
        ),
        ("message-v0.3", d(), false),
        (
            "dsse-v0.3-rekor1-dsse",
            BundleSpec {
                tlog: TlogSpec::RekorV1(V1Kind::Dsse),
                ..d()
            },
            true,
        ),
        (
            "dsse-v0.3-rekor1-intoto",
            BundleSpec {
                tlog: TlogSpec::RekorV1(V1Kind::Intoto),
                ..d()
            },
            true,
        ),
        ("message-rekor2-tsa-certs", v2(), false),
        (
            "message-rekor2-tsa-no-certs",
            BundleSpec {
                timestamp: TimestampSpec::without_certs(),
                ..v2()
            },
            false,
        ),
        (
            "dsse-rekor2",
            BundleSpec {
                tlog: TlogSpec::RekorV2(V2Kind::Dsse),
                ..v2()
            },
            true,
        ),
        ("managed-key", BundleSpec::managed_key(), false),
        (
            "managed-key-tsa",
            BundleSpec {
                timestamp: TimestampSpec::embedded(),
                ..BundleSpec::managed_key()
            },
            false,
        ),
    ]
}

/// The content a tamper subject signs.
pub fn testkit_content(dsse: bool) -> Content {
    if dsse {
        Content::in_toto(
            ARTIFACT,
            "https://slsa.dev/provenance/v1",
            serde_json::json!({"buildDefinition": {"buildType": "https://sigil.test/build"}}),
        )
    } else {
        Content::Message(ARTIFACT.to_vec())
    }
}

fn testkit_subjects() -> Vec<Subject> {
    let f = fixture();
    testkit_specs()
        .into_iter()
        .filter_map(|(name, spec, dsse)| {
            let minted = f.mint(&spec, testkit_content(dsse));
            Subject::new(
                name.to_string(),
                minted.value(),
                ARTIFACT.to_vec(),
                f.policy_for(&spec).clone(),
                f.root.clone(),
                f.now,
            )
        })
        .collect()
}

fn conformance_subjects() -> Vec<Subject> {
    let Some(cases) = conformance_dir() else {
        return Vec::new();
    };
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    let mut out = Vec::new();
    for dir in case_dirs(&cases) {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with("_fail") {
            continue;
        }
        let Some(json) = std::fs::read(dir.join("bundle.sigstore.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        else {
            continue;
        };
        let root = match read(dir.join("trusted_root.json")) {
            Some(j) => TrustedRoot::from_json(&j).ok(),
            None => TrustedRoot::public_good().ok(),
        };
        let Some(root) = root else { continue };
        let policy = match read(dir.join("key.pub")) {
            Some(pem) => match PublicKey::from_pem(&pem) {
                Ok(k) => VerificationPolicy::key(k),
                Err(_) => continue,
            },
            None => VerificationPolicy::keyless(IdentityPolicy {
                subject: IdentityMatcher::Exact(
                    read(dir.join("identity")).unwrap_or_else(|| CONFORMANCE_IDENTITY.into()),
                ),
                issuer: IdentityMatcher::Exact(
                    read(dir.join("issuer")).unwrap_or_else(|| CONFORMANCE_ISSUER.into()),
                ),
                claims: Vec::new(),
            }),
        };
        let artifact_path = if dir.join("artifact").exists() {
            dir.join("artifact")
        } else {
            cases.join("a.txt")
        };
        let Ok(artifact) = std::fs::read(artifact_path) else {
            continue;
        };
        out.extend(Subject::new(
            format!("conformance/{name}"),
            json,
            artifact,
            policy,
            root,
            OffsetDateTime::now_utc(),
        ));
    }
    out
}

/// The fuzzer's edit of one subject: which field, and how.
#[derive(Debug)]
pub struct Edit<'a> {
    /// Index into [`subjects`].
    pub subject: usize,
    /// Index into the subject's leaves.
    pub leaf: usize,
    /// Another leaf whose value replaces this one's before the byte edits.
    pub splice_from: Option<usize>,
    /// Byte edits, four bytes each: op, position (two bytes), value.
    pub ops: &'a [u8],
}

/// Reads an edit from fuzz input: subject, leaf, mode, [splice source], ops.
pub fn read_edit(data: &[u8]) -> Option<Edit<'_>> {
    let subjects = subjects();
    let (&s, rest) = data.split_first()?;
    let subject = usize::from(s) % subjects.len();
    let leaves = subjects[subject].leaves.len();
    if leaves == 0 {
        return None;
    }
    let (&l, rest) = rest.split_first()?;
    let (&mode, rest) = rest.split_first()?;
    let (splice_from, ops) = if mode % 8 == 7 {
        let (&o, rest) = rest.split_first()?;
        (Some(usize::from(o) % leaves), rest)
    } else {
        (None, rest)
    };
    Some(Edit {
        subject,
        leaf: usize::from(l) % leaves,
        splice_from,
        ops: &ops[..ops.len().min(4 * 16)],
    })
}

fn apply_ops(mut bytes: Vec<u8>, ops: &[u8]) -> Vec<u8> {
    for op in ops.chunks_exact(4) {
        let pos = (usize::from(op[1]) << 8 | usize::from(op[2])) % (bytes.len() + 1);
        let val = op[3];
        match op[0] % 6 {
            0 if pos < bytes.len() => bytes[pos] ^= val.max(1),
            1 if pos < bytes.len() => bytes[pos] = val,
            2 => bytes.insert(pos, val),
            3 if pos < bytes.len() => {
                bytes.remove(pos);
            }
            4 => bytes.truncate(pos),
            5 => {
                // Repeat a short run (length fields, duplicated elements).
                let end = (pos + usize::from(val % 16) + 1).min(bytes.len());
                let run = bytes[pos..end].to_vec();
                bytes.splice(pos..pos, run);
            }
            _ => {}
        }
        if bytes.len() > 1 << 16 {
            break;
        }
    }
    bytes
}

fn note_lines(note: &str) -> (&str, Vec<&str>) {
    match note.split_once("\n\n") {
        Some((body, sigs)) => (body, sigs.lines().collect()),
        None => (note, Vec::new()),
    }
}

/// The key hint and signature of a note's signature line, without the key
/// name (`— <name> <base64>`).
fn signature_of(line: &str) -> &str {
    line.rsplit(' ').next().unwrap_or(line)
}

/// Whether a note body is a Rekor v1 checkpoint's (by its origin line).
fn is_rekor_v1_note(body: &str) -> bool {
    body.lines().next().is_some_and(is_rekor_v1_origin)
}

fn without_media_type(facts: &str) -> String {
    let key = "media_type: \"";
    match facts.find(key) {
        Some(i) => {
            let start = i + key.len();
            let end = facts[start..].find('"').map_or(facts.len(), |e| start + e);
            format!("{}{}", &facts[..start], &facts[end..])
        }
        None => facts.to_string(),
    }
}

/// Applies `edit` and checks the property; panics with a description when
/// a tampered bundle verifies where it must not.
pub fn check(edit: &Edit<'_>) {
    let s = &subjects()[edit.subject];
    let leaf = &s.leaves[edit.leaf];
    let (treatment, signed) = classify(&leaf.normalised);
    let Some(Value::String(original)) = at(&s.json, &leaf.path) else {
        return;
    };
    let start = match edit.splice_from.and_then(|i| s.leaves.get(i)) {
        Some(other) => match at(&s.json, &other.path) {
            Some(Value::String(v)) => v.clone(),
            _ => return,
        },
        None => original.clone(),
    };
    let decoded = |text: &str| match treatment {
        Treatment::Bytes => B64.decode(text).ok(),
        Treatment::Text | Treatment::Int => Some(text.as_bytes().to_vec()),
    };
    let (Some(original_bytes), Some(start_bytes)) = (decoded(original), decoded(&start)) else {
        return;
    };
    let edited = apply_ops(start_bytes, edit.ops);
    if edited == original_bytes {
        return;
    }
    let new_text = match treatment {
        Treatment::Bytes => B64.encode(&edited),
        Treatment::Text | Treatment::Int => String::from_utf8_lossy(&edited).into_owned(),
    };
    if new_text == *original {
        return;
    }
    let mut json = s.json.clone();
    let Some(slot) = at_mut(&mut json, &leaf.path) else {
        return;
    };
    *slot = Value::String(new_text.clone());
    let Ok(bytes) = serde_json::to_vec(&json) else {
        return;
    };
    let Ok(facts) = s.verify(&bytes) else {
        return;
    };
    let field = leaf.path.join(".");
    let same_number = treatment == Treatment::Int
        && new_text.parse::<i64>().ok() == original.parse::<i64>().ok()
        && original.parse::<i64>().is_ok();
    let allowed = match signed {
        Signed::No => facts == s.facts,
        Signed::MediaType => without_media_type(&facts) == without_media_type(&s.facts),
        Signed::Note => {
            let (body, sigs) = note_lines(original);
            let (new_body, new_sigs) = note_lines(&new_text);
            // The log's own lines must survive: those whose key hint is a
            // trusted log's (the first four bytes of its log ID). Other lines
            // (witnesses' cosignatures, unknown keys, whatever their name)
            // are not checked by the verifier, and may change as long as the
            // facts do not. A Rekor v1 log signs under its hostname, which is
            // not bound, so only its line's signature counts; a C2SP log
            // (Rekor v2) signs under its origin, so its whole line is bound.
            let log_hint = |line: &str| {
                B64.decode(signature_of(line)).ok().is_some_and(|sig| {
                    s.root
                        .tlogs
                        .iter()
                        .any(|l| l.log_id.len() >= 4 && sig.get(..4) == l.log_id.get(..4))
                })
            };
            let rekor_v1 = is_rekor_v1_note(body);
            let kept = |line: &&str| {
                if !log_hint(line) {
                    true
                } else if rekor_v1 {
                    new_sigs
                        .iter()
                        .any(|n| signature_of(n) == signature_of(line))
                } else {
                    new_sigs.contains(line)
                }
            };
            body == new_body && sigs.iter().all(kept) && facts == s.facts
        }
        Signed::Yes => same_number && facts == s.facts,
    };
    assert!(
        allowed,
        "{}: tampered field {field} ({:?}) still verifies{}:\n  original: {original:?}\n  tampered: {new_text:?}\n  facts before: {}\n  facts after:  {facts}",
        s.name,
        signed,
        if facts == s.facts {
            " with the same facts"
        } else {
            " with different facts"
        },
        s.facts,
    );
}
