//! Tamper sweep: for testkit bundles of every kind, every single byte of every
//! signed or proof field is flipped, the bundle JSON re-serialised and
//! verified again; each flip must be rejected (a parse error or a
//! verification error both count, a panic does not). Also: the untouched
//! bundles verify, and the wrong artifact, identity, issuer, key or trust
//! root each fail.
//!
//! Nothing is sampled. Every leaf of the bundle JSON is classified (see
//! [`treatment`]); a leaf the table does not know fails the test, so a new
//! field cannot slip past the sweep unflipped. The few flips that legitimately
//! do not matter are listed in [`ALLOWANCES`] with their reason; for those the
//! sweep asserts that verification yields exactly the same facts.
//!
//! Run with `--nocapture` to see the per-field flip counts.

// Test glue: a failed fixture build should abort loudly.
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;
use sigil_testkit::{
    BundleSpec, BundleVersion, ChainSpec, Content, DEFAULT_SIGNING_TIME, KeySpec, TimestampSpec,
    TlogSpec, V1Kind, V2Kind,
};
use sigil_verifier::bundle::Bundle;
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{Artifact, VerificationPolicy, verify_bundle};
use time::OffsetDateTime;

const SEED: u64 = 2024;
const ARTIFACT: &[u8] = b"sigil tamper sweep artifact\n";
const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";

/// A fixed "now" a day after signing: verification never reads the clock here.
fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(DEFAULT_SIGNING_TIME + 86_400).unwrap()
}

/// The bundle kinds the sweep covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Message signature, bundle v0.1, leaf + intermediate chain, Rekor v1 hashedrekord.
    MessageV01,
    /// Message signature, bundle v0.2, leaf + intermediate chain, Rekor v1 hashedrekord.
    MessageV02,
    /// Message signature, bundle v0.3, Rekor v1 hashedrekord (SET, proof, checkpoint).
    MessageV03,
    /// DSSE in-toto statement, bundle v0.3, Rekor v1 dsse 0.0.1.
    DsseV03,
    /// DSSE in-toto statement, bundle v0.3, Rekor v1 intoto 0.0.2.
    Intoto,
    /// Message signature, Rekor v2 hashedrekord 0.0.2, RFC 3161 token with certificates.
    Rekor2TsaCerts,
    /// Message signature, Rekor v2 hashedrekord 0.0.2, RFC 3161 token without certificates.
    Rekor2TsaNoCerts,
    /// DSSE in-toto statement, Rekor v2 dsse 0.0.2, RFC 3161 token with certificates.
    Rekor2Dsse,
    /// Managed key, message signature, bundle v0.3, Rekor v1 hashedrekord.
    ManagedKey,
}

impl Kind {
    fn spec(self) -> (BundleSpec, bool) {
        let d = BundleSpec::default;
        let v2 = BundleSpec::rekor_v2;
        match self {
            Kind::MessageV01 => (
                BundleSpec {
                    version: BundleVersion::V01,
                    chain: ChainSpec::WithIntermediate,
                    ..d()
                },
                false,
            ),
            Kind::MessageV02 => (
                BundleSpec {
                    version: BundleVersion::V02,
                    chain: ChainSpec::WithIntermediate,
                    ..d()
                },
                false,
            ),
            Kind::MessageV03 => (d(), false),
            Kind::DsseV03 => (
                BundleSpec {
                    tlog: TlogSpec::RekorV1(V1Kind::Dsse),
                    ..d()
                },
                true,
            ),
            Kind::Intoto => (
                BundleSpec {
                    tlog: TlogSpec::RekorV1(V1Kind::Intoto),
                    ..d()
                },
                true,
            ),
            Kind::Rekor2TsaCerts => (v2(), false),
            Kind::Rekor2TsaNoCerts => (
                BundleSpec {
                    timestamp: TimestampSpec::without_certs(),
                    ..v2()
                },
                false,
            ),
            Kind::Rekor2Dsse => (
                BundleSpec {
                    tlog: TlogSpec::RekorV2(V2Kind::Dsse),
                    ..v2()
                },
                true,
            ),
            Kind::ManagedKey => (BundleSpec::managed_key(), false),
        }
    }
}

/// One minted bundle with everything needed to verify it, built once.
struct Subject {
    kind: Kind,
    spec: BundleSpec,
    json: Value,
    policy: VerificationPolicy,
    root: TrustedRoot,
    /// `Debug` of the verified facts of the untouched bundle.
    facts: String,
}

impl Subject {
    fn new(kind: Kind) -> Self {
        let kit = sigil_testkit::Testkit::new(SEED);
        let (spec, dsse) = kind.spec();
        let content = if dsse {
            Content::in_toto(
                ARTIFACT,
                PREDICATE_TYPE,
                serde_json::json!({"buildDefinition": {"buildType": "https://sigil.test/build"}}),
            )
        } else {
            Content::Message(ARTIFACT.to_vec())
        };
        let minted = kit.sign(&spec, content).expect("mint");
        let policy = match spec.key {
            KeySpec::ManagedKey => VerificationPolicy::key(
                PublicKey::from_pem(minted.public_key_pem.as_deref().expect("managed key PEM"))
                    .expect("managed key"),
            ),
            KeySpec::Keyless => VerificationPolicy::keyless(IdentityPolicy {
                subject: IdentityMatcher::Exact(spec.identity.as_str().to_owned()),
                issuer: IdentityMatcher::Exact(spec.oidc_issuer.clone()),
                claims: Vec::new(),
            }),
        };
        let root = TrustedRoot::from_json(&kit.trusted_root_json()).expect("trusted root");
        let mut s = Subject {
            kind,
            spec,
            json: minted.value(),
            policy,
            root,
            facts: String::new(),
        };
        let bytes = serde_json::to_vec(&s.json).unwrap();
        s.facts = s
            .verify(&bytes)
            .unwrap_or_else(|e| panic!("{kind:?}: the untouched bundle must verify: {e}"));
        s
    }

    /// Parses and verifies bundle JSON; `Ok` carries the facts' `Debug`.
    fn verify(&self, json: &[u8]) -> Result<String, String> {
        self.verify_with(json, Artifact::Bytes(ARTIFACT), &self.policy, &self.root)
    }

    fn verify_with(
        &self,
        json: &[u8],
        artifact: Artifact<'_>,
        policy: &VerificationPolicy,
        root: &TrustedRoot,
    ) -> Result<String, String> {
        let bundle = Bundle::from_json(json).map_err(|e| format!("parse: {e}"))?;
        verify_bundle(&bundle, artifact, policy, root, now())
            .map(|v| format!("{v:?}"))
            .map_err(|e| format!("verify ({}): {e}", e.reason()))
    }
}

/// How a JSON leaf is tampered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Treatment {
    /// Base64 bytes: flip every decoded byte.
    Bytes,
    /// Text: flip every byte of the UTF-8 string.
    Text,
    /// protobuf-JSON int64 (a decimal string): flip every digit and also set
    /// other values.
    Int,
}

/// The sweep's classification of every bundle field, by normalised path
/// (`[]` for any array index). Every field of the bundle is tampered with:
/// signed material, proofs, and the unsigned metadata too (so that whatever
/// the verifier ignores shows up in [`ALLOWANCES`] with a reason).
fn treatment(path: &str) -> Option<Treatment> {
    use Treatment::{Bytes, Int, Text};
    Some(match path {
        "mediaType" => Text,
        "messageSignature.signature" => Bytes,
        "messageSignature.messageDigest.digest" => Bytes,
        "messageSignature.messageDigest.algorithm" => Text,
        "dsseEnvelope.payload" => Bytes,
        "dsseEnvelope.payloadType" => Text,
        "dsseEnvelope.signatures[].sig" => Bytes,
        "dsseEnvelope.signatures[].keyid" => Text,
        "verificationMaterial.certificate.rawBytes" => Bytes,
        "verificationMaterial.x509CertificateChain.certificates[].rawBytes" => Bytes,
        "verificationMaterial.publicKey.hint" => Bytes,
        "verificationMaterial.tlogEntries[].canonicalizedBody" => Bytes,
        "verificationMaterial.tlogEntries[].inclusionPromise.signedEntryTimestamp" => Bytes,
        "verificationMaterial.tlogEntries[].inclusionProof.checkpoint.envelope" => Text,
        "verificationMaterial.tlogEntries[].inclusionProof.hashes[]" => Bytes,
        "verificationMaterial.tlogEntries[].inclusionProof.rootHash" => Bytes,
        "verificationMaterial.tlogEntries[].inclusionProof.logIndex" => Int,
        "verificationMaterial.tlogEntries[].inclusionProof.treeSize" => Int,
        "verificationMaterial.tlogEntries[].integratedTime" => Int,
        "verificationMaterial.tlogEntries[].kindVersion.kind" => Text,
        "verificationMaterial.tlogEntries[].kindVersion.version" => Text,
        "verificationMaterial.tlogEntries[].logId.keyId" => Bytes,
        "verificationMaterial.tlogEntries[].logIndex" => Int,
        "verificationMaterial.timestampVerificationData.rfc3161Timestamps[].signedTimestamp" => {
            Bytes
        }
        _ => return None,
    })
}

/// A JSON leaf: its concrete path (keys and indices) and normalised path.
#[derive(Clone, Debug)]
struct Leaf {
    path: Vec<String>,
    normalised: String,
}

fn leaves(v: &Value, path: &mut Vec<String>, norm: &mut Vec<String>, out: &mut Vec<Leaf>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                path.push(k.clone());
                norm.push(if norm.is_empty() {
                    k.clone()
                } else {
                    format!(".{k}")
                });
                leaves(v, path, norm, out);
                path.pop();
                norm.pop();
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                path.push(i.to_string());
                norm.push("[]".into());
                leaves(v, path, norm, out);
                path.pop();
                norm.pop();
            }
        }
        _ => out.push(Leaf {
            path: path.clone(),
            normalised: norm.concat(),
        }),
    }
}

fn at_mut<'a>(v: &'a mut Value, path: &[String]) -> &'a mut Value {
    path.iter().fold(v, |v, k| match v {
        Value::Object(m) => m.get_mut(k).expect("key"),
        Value::Array(a) => &mut a[k.parse::<usize>().expect("index")],
        _ => panic!("path runs through a scalar"),
    })
}

/// One tampered value of a leaf and where in the field it sits.
struct Mutation {
    /// Human description: which byte, or which replacement value.
    at: String,
    /// Byte offset in the field (decoded bytes or text); `None` for a replaced integer.
    offset: Option<usize>,
    value: Value,
    /// Not a tamper but the same value in another valid protobuf-JSON form:
    /// it must verify with identical facts.
    equivalent: bool,
}

fn mutations(original: &Value, t: Treatment) -> Vec<Mutation> {
    let s = original.as_str().expect("every bundle leaf is a string");
    match t {
        Treatment::Bytes => {
            let bytes = B64.decode(s).expect("testkit writes standard base64");
            (0..bytes.len())
                .map(|i| {
                    let mut b = bytes.clone();
                    b[i] ^= 0x01;
                    Mutation {
                        at: format!("byte {i}"),
                        offset: Some(i),
                        value: Value::String(B64.encode(&b)),
                        equivalent: false,
                    }
                })
                .collect()
        }
        Treatment::Text => (0..s.len())
            .map(|i| {
                let mut b = s.as_bytes().to_vec();
                b[i] ^= 0x01;
                // XOR 0x01 keeps ASCII ASCII, a lead byte a lead byte of the
                // same length and a continuation byte a continuation byte.
                let t = String::from_utf8(b).expect("a flipped low bit keeps UTF-8 valid");
                Mutation {
                    at: format!("byte {i}"),
                    offset: Some(i),
                    value: Value::String(t),
                    equivalent: false,
                }
            })
            .collect(),
        Treatment::Int => {
            let n: i64 = s.parse().expect("protobuf-JSON int64 string");
            let mut out: Vec<Mutation> = (0..s.len())
                .map(|i| {
                    let mut b = s.as_bytes().to_vec();
                    // Digits pair up under XOR 1 (0↔1, 2↔3, ...): the value always changes.
                    b[i] ^= 0x01;
                    let t = String::from_utf8(b).unwrap();
                    Mutation {
                        at: format!("digit {i} -> {t}"),
                        offset: Some(i),
                        value: Value::String(t),
                        equivalent: false,
                    }
                })
                .collect();
            for v in [n + 1, n - 1, 0, n + (1 << 32), -1] {
                if v != n && !out.iter().any(|m| m.value == Value::String(v.to_string())) {
                    out.push(Mutation {
                        at: format!("value {v}"),
                        offset: None,
                        value: Value::String(v.to_string()),
                        equivalent: false,
                    });
                }
            }
            // protobuf-JSON also allows int64 as a JSON number.
            out.push(Mutation {
                at: format!("as the JSON number {n}"),
                offset: None,
                value: Value::from(n),
                equivalent: true,
            });
            out
        }
    }
}

/// How the facts of an accepted flip must compare with the untouched bundle's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SameFacts {
    /// Byte-for-byte identical `Debug` of the verified facts.
    Exactly,
    /// Identical except `media_type`, which reports the (tampered) label itself.
    ExceptMediaType,
}

/// A flip that may be accepted because the byte is not part of anything
/// signed and changing it cannot change what was verified. Accepted flips are
/// still required to yield the same verified facts.
struct Allowance {
    /// Normalised field path.
    field: &'static str,
    /// Whether the flip at `offset` (`None`: a replaced integer) of the
    /// original field (decoded bytes) is covered.
    covers: fn(original: &[u8], offset: Option<usize>) -> bool,
    /// How the facts must compare.
    facts: SameFacts,
    /// Why the byte does not matter.
    reason: &'static str,
}

/// Every flip the sweep accepts, with the reason. Nothing else may verify.
const ALLOWANCES: &[Allowance] = &[
    Allowance {
        field: "mediaType",
        covers: |orig, off| {
            orig == b"application/vnd.dev.sigstore.bundle.v0.3+json" && off == Some(39)
        },
        facts: SameFacts::ExceptMediaType,
        reason: "the media type is not signed: `bundle.v0.3+json` -> `bundle.v0.2+json` relabels a \
                 bundle that meets v0.2's rules too (inclusion proof present); only the reported \
                 media type changes",
    },
    Allowance {
        field: "messageSignature.messageDigest.algorithm",
        covers: |_, _| true,
        facts: SameFacts::Exactly,
        reason: "the algorithm name is not signed; sigil compares messageDigest only when it says \
                 SHA2_256 and otherwise relies on the signature over the artifact and on the log \
                 body, which both still bind the artifact",
    },
    Allowance {
        field: "verificationMaterial.publicKey.hint",
        covers: |_, _| true,
        facts: SameFacts::Exactly,
        reason: "the key hint is an unsigned locator; the key comes from the verification policy",
    },
    Allowance {
        field: "verificationMaterial.timestampVerificationData.rfc3161Timestamps[].signedTimestamp",
        covers: |orig, off| off.is_some_and(|o| tsa::status_value(orig).contains(&o)),
        facts: SameFacts::Exactly,
        reason: "TimeStampResp.status 0 (granted) -> 1 (grantedWithMods): both mean a token was \
                 issued (RFC 3161 §2.4.2); the status is outside the signed TSTInfo",
    },
    Allowance {
        field: "verificationMaterial.timestampVerificationData.rfc3161Timestamps[].signedTimestamp",
        covers: |orig, off| off.is_some_and(|o| tsa::digest_algorithms(orig).contains(&o)),
        facts: SameFacts::Exactly,
        reason: "SignedData.digestAlgorithms is an unsigned one-pass hint (RFC 5652 §5.1); the \
                 SignerInfo's digestAlgorithm, which the signature does depend on, is the one used",
    },
    Allowance {
        field: "verificationMaterial.timestampVerificationData.rfc3161Timestamps[].signedTimestamp",
        covers: |orig, off| off.is_some_and(|o| tsa::certificates(orig).contains(&o)),
        facts: SameFacts::Exactly,
        reason: "the token's certificate set is unsigned transport: the TSA chain comes from the \
                 trusted root, and a tampered copy of the signer certificate no longer matches the \
                 signed ESS signing-certificate hash, so the trusted copy is used; retagging the \
                 set [0] -> [1] makes it the (unsigned, ignored) crls field",
    },
    Allowance {
        field: "verificationMaterial.tlogEntries[].inclusionProof.checkpoint.envelope",
        covers: |orig, off| {
            is_rekor_v1_note(orig) && off.is_some_and(|o| checkpoint_key_names(orig).contains(&o))
        },
        facts: SameFacts::Exactly,
        reason: "a Rekor v1 checkpoint's signature line names the Rekor server's own hostname (a \
                 pod name in private deployments), which is outside the signed note text and not \
                 part of the log's key ID (SHA-256 of its key alone): the key hint and the \
                 signature identify the log, as in Rekor, sigstore-go and sigstore-python. (The \
                 origin line is signed; a Rekor v2 key name is bound and still checked.)",
    },
];

/// Whether a signed note is a Rekor v1 checkpoint: its origin line is
/// `<hostname> - <tree id>`.
fn is_rekor_v1_note(note: &[u8]) -> bool {
    let text = std::str::from_utf8(note).unwrap();
    let origin = text.lines().next().unwrap_or_default();
    origin
        .rsplit_once(" - ")
        .is_some_and(|(_, tree)| !tree.is_empty() && tree.bytes().all(|b| b.is_ascii_digit()))
}

/// Byte offsets of the key names in a signed note's signature lines
/// (`— <name> <base64>`).
fn checkpoint_key_names(note: &[u8]) -> std::ops::Range<usize> {
    let text = std::str::from_utf8(note).unwrap();
    let sigs = text.find("\n\n").unwrap() + 2;
    let line = &text[sigs..];
    let name_start = sigs + line.find(' ').unwrap() + 1;
    let name_len = text[name_start..].find(' ').unwrap();
    assert_eq!(
        text[name_start + name_len + 1..].matches('\n').count(),
        1,
        "one signature line"
    );
    name_start..name_start + name_len
}

/// Just enough DER walking to locate the unsigned parts of a TimeStampResp.
mod tsa {
    use std::ops::Range;

    /// (tag, whole element, content) of the element at `at`.
    fn tlv(der: &[u8], at: usize) -> (u8, Range<usize>, Range<usize>) {
        let tag = der[at];
        let first = der[at + 1];
        let (len, header) = if first < 0x80 {
            (usize::from(first), 2)
        } else {
            let n = usize::from(first & 0x7f);
            let len = der[at + 2..at + 2 + n]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, 2 + n)
        };
        (tag, at..at + header + len, at + header..at + header + len)
    }

    fn children(der: &[u8], content: Range<usize>) -> Vec<(u8, Range<usize>, Range<usize>)> {
        let mut out = Vec::new();
        let mut at = content.start;
        while at < content.end {
            let t = tlv(der, at);
            at = t.1.end;
            out.push(t);
        }
        out
    }

    fn signed_data(resp: &[u8]) -> Vec<(u8, Range<usize>, Range<usize>)> {
        let top = children(resp, tlv(resp, 0).2);
        let token = children(resp, top[1].2.clone());
        let explicit = children(resp, token[1].2.clone());
        children(resp, explicit[0].2.clone())
    }

    /// The value bytes of `TimeStampResp.status.status`.
    pub(super) fn status_value(resp: &[u8]) -> Range<usize> {
        let top = children(resp, tlv(resp, 0).2);
        children(resp, top[0].2.clone())[0].2.clone()
    }

    /// The content of `SignedData.digestAlgorithms`.
    pub(super) fn digest_algorithms(resp: &[u8]) -> Range<usize> {
        let sd = signed_data(resp);
        assert_eq!(sd[1].0, 0x31, "digestAlgorithms is a SET");
        sd[1].2.clone()
    }

    /// `SignedData.certificates`, tag and length included (empty when absent).
    pub(super) fn certificates(resp: &[u8]) -> Range<usize> {
        signed_data(resp)
            .into_iter()
            .find(|(tag, ..)| *tag == 0xa0)
            .map_or(0..0, |(_, whole, _)| whole)
    }
}

/// The outcome of sweeping one field.
#[derive(Default)]
struct FieldReport {
    flips: usize,
    /// Flips accepted under an allowance (facts the same).
    allowed: usize,
    nanos: u128,
}

/// Stands in for the tampered field while the rest of the bundle is serialised.
const SPLICE_MARK: &str = "sigil-tamper-splice-point";

fn without_media_type(facts: &str) -> String {
    let re = regex::Regex::new(r#"media_type: "[^"]*""#).unwrap();
    re.replace(facts, "media_type: _").into_owned()
}

/// Sweeps every field of `s`; returns per-field counts and the failures.
fn sweep(s: &Subject) -> (BTreeMap<String, FieldReport>, Vec<String>) {
    let mut all = Vec::new();
    leaves(&s.json, &mut Vec::new(), &mut Vec::new(), &mut all);
    let mut report: BTreeMap<String, FieldReport> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut json = s.json.clone();
    for leaf in &all {
        let t = treatment(&leaf.normalised).unwrap_or_else(|| {
            panic!(
                "{:?}: field `{}` is not classified for the tamper sweep; add it to `treatment`",
                s.kind, leaf.normalised
            )
        });
        let original = at_mut(&mut json, &leaf.path).clone();
        let original_bytes = match t {
            Treatment::Bytes => B64.decode(original.as_str().unwrap()).unwrap(),
            Treatment::Text | Treatment::Int => original.as_str().unwrap().as_bytes().to_vec(),
        };
        let name = leaf.path.join(".");
        let entry = report.entry(name.clone()).or_default();
        // Serialise the bundle once around the field, then splice each
        // tampered value in: the same JSON text a full re-serialisation gives.
        *at_mut(&mut json, &leaf.path) = Value::String(SPLICE_MARK.into());
        let text = serde_json::to_string(&json).unwrap();
        let (prefix, suffix) = text
            .split_once(&format!("\"{SPLICE_MARK}\""))
            .expect("marker appears once");
        for m in mutations(&original, t) {
            let value = serde_json::to_string(&m.value).unwrap();
            let bytes = [prefix.as_bytes(), value.as_bytes(), suffix.as_bytes()].concat();
            if entry.flips == 0 {
                let mut full = json.clone();
                *at_mut(&mut full, &leaf.path) = m.value.clone();
                assert_eq!(
                    bytes,
                    serde_json::to_vec(&full).unwrap(),
                    "splicing is serialising"
                );
            }
            entry.flips += 1;
            let t0 = std::time::Instant::now();
            let outcome = catch_unwind(AssertUnwindSafe(|| s.verify(&bytes)));
            entry.nanos += t0.elapsed().as_nanos();
            let facts = match outcome {
                Err(_) => {
                    failures.push(format!("{name} {}: PANIC", m.at));
                    continue;
                }
                Ok(Err(_)) if !m.equivalent => continue,
                Ok(Err(e)) => {
                    failures.push(format!(
                        "{name} {}: an equivalent encoding was rejected: {e}",
                        m.at
                    ));
                    continue;
                }
                Ok(Ok(facts)) => facts,
            };
            if m.equivalent {
                if facts != s.facts {
                    failures.push(format!(
                        "{name} {}: an equivalent encoding changed the facts",
                        m.at
                    ));
                }
                continue;
            }
            let covered = |field: &str, covers: fn(&[u8], Option<usize>) -> bool| {
                field == leaf.normalised && covers(&original_bytes, m.offset)
            };
            match ALLOWANCES.iter().find(|a| covered(a.field, a.covers)) {
                Some(a) => {
                    let same = match a.facts {
                        SameFacts::Exactly => facts == s.facts,
                        SameFacts::ExceptMediaType => {
                            without_media_type(&facts) == without_media_type(&s.facts)
                        }
                    };
                    if same {
                        entry.allowed += 1;
                    } else {
                        failures.push(format!(
                            "{name} {}: accepted under allowance `{}` but the verified facts changed:\n  {facts}",
                            m.at, a.reason
                        ));
                    }
                }
                None => failures.push(format!(
                    "{name} {}: ACCEPTED{}",
                    m.at,
                    if facts == s.facts {
                        " (same facts)"
                    } else {
                        " with different facts"
                    }
                )),
            }
        }
        *at_mut(&mut json, &leaf.path) = original;
    }
    (report, failures)
}

fn run_sweep(kind: Kind) {
    let s = Subject::new(kind);
    let started = std::time::Instant::now();
    let (report, failures) = sweep(&s);
    let total: usize = report.values().map(|r| r.flips).sum();
    println!(
        "{kind:?}: {total} tampered bundles in {:.1?}",
        started.elapsed()
    );
    for (field, r) in &report {
        let mut notes = Vec::new();
        if r.allowed > 0 {
            notes.push(format!(
                "{} accepted with the same facts (allowance)",
                r.allowed
            ));
        }
        println!(
            "  {field}: {} flips, {} us each{}{}",
            r.flips,
            r.nanos / 1000 / r.flips.max(1) as u128,
            if notes.is_empty() { "" } else { "; " },
            notes.join("; ")
        );
    }
    assert!(
        failures.is_empty(),
        "{kind:?}: {} tampered bundles were not rejected:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_flipped_byte_of_a_v0_1_message_signature_bundle_is_rejected() {
    run_sweep(Kind::MessageV01);
}

#[test]
fn every_flipped_byte_of_a_v0_2_message_signature_bundle_is_rejected() {
    run_sweep(Kind::MessageV02);
}

#[test]
fn every_flipped_byte_of_a_v0_3_message_signature_bundle_is_rejected() {
    run_sweep(Kind::MessageV03);
}

#[test]
fn every_flipped_byte_of_a_dsse_bundle_on_a_rekor_v1_dsse_entry_is_rejected() {
    run_sweep(Kind::DsseV03);
}

#[test]
fn every_flipped_byte_of_a_dsse_bundle_on_a_rekor_v1_intoto_entry_is_rejected() {
    run_sweep(Kind::Intoto);
}

#[test]
fn every_flipped_byte_of_a_rekor_v2_bundle_with_a_tsa_token_carrying_certificates_is_rejected() {
    run_sweep(Kind::Rekor2TsaCerts);
}

#[test]
fn every_flipped_byte_of_a_rekor_v2_bundle_with_a_tsa_token_without_certificates_is_rejected() {
    run_sweep(Kind::Rekor2TsaNoCerts);
}

#[test]
fn every_flipped_byte_of_a_dsse_bundle_on_a_rekor_v2_dsse_entry_is_rejected() {
    run_sweep(Kind::Rekor2Dsse);
}

#[test]
fn every_flipped_byte_of_a_managed_key_bundle_is_rejected() {
    run_sweep(Kind::ManagedKey);
}

const ALL_KINDS: &[Kind] = &[
    Kind::MessageV01,
    Kind::MessageV02,
    Kind::MessageV03,
    Kind::DsseV03,
    Kind::Intoto,
    Kind::Rekor2TsaCerts,
    Kind::Rekor2TsaNoCerts,
    Kind::Rekor2Dsse,
    Kind::ManagedKey,
];

fn keyless(subject: IdentityMatcher, issuer: IdentityMatcher) -> VerificationPolicy {
    VerificationPolicy::keyless(IdentityPolicy {
        subject,
        issuer,
        claims: Vec::new(),
    })
}

fn regex(r: &str) -> IdentityMatcher {
    IdentityMatcher::Regex(regex::Regex::new(r).unwrap())
}

fn exact(s: &str) -> IdentityMatcher {
    IdentityMatcher::Exact(s.to_owned())
}

fn untouched(s: &Subject) -> Vec<u8> {
    serde_json::to_vec(&s.json).unwrap()
}

#[test]
fn no_kind_verifies_for_another_artifact_given_by_bytes_or_by_digest() {
    let other = b"sigil tamper sweep artifact, another one\n";
    for &kind in ALL_KINDS {
        let s = Subject::new(kind);
        let json = untouched(&s);
        // Digest mode on the right artifact verifies (the control)...
        let digest = sigil_verifier::crypto::sha256(ARTIFACT);
        assert!(
            s.verify_with(&json, Artifact::Sha256(digest), &s.policy, &s.root)
                .is_ok(),
            "{kind:?}: the right digest must verify"
        );
        // ...and another artifact fails both ways.
        for artifact in [
            Artifact::Bytes(other),
            Artifact::Sha256(sigil_verifier::crypto::sha256(other)),
        ] {
            let got = s.verify_with(&json, artifact, &s.policy, &s.root);
            assert!(got.is_err(), "{kind:?}: verified for {artifact:?}");
        }
    }
}

#[test]
fn no_keyless_kind_verifies_for_another_identity_or_issuer_exact_or_by_regex() {
    for &kind in ALL_KINDS.iter().filter(|k| **k != Kind::ManagedKey) {
        let s = Subject::new(kind);
        let json = untouched(&s);
        let id = s.spec.identity.as_str().to_owned();
        let iss = s.spec.oidc_issuer.clone();
        let run =
            |p: VerificationPolicy| s.verify_with(&json, Artifact::Bytes(ARTIFACT), &p, &s.root);
        // Controls: the right identity, exact and by (anchored) regex, verifies.
        let id_re = format!("^{}$", regex::escape(&id));
        let iss_re = format!("^{}$", regex::escape(&iss));
        assert!(run(keyless(exact(&id), exact(&iss))).is_ok(), "{kind:?}");
        assert!(
            run(keyless(regex(&id_re), regex(&iss_re))).is_ok(),
            "{kind:?}"
        );
        let wrong = [
            (
                "another identity",
                keyless(exact(&format!("{id}x")), exact(&iss)),
            ),
            (
                "an identity prefix",
                keyless(exact(&id[..id.len() - 1]), exact(&iss)),
            ),
            (
                "another issuer",
                keyless(exact(&id), exact("https://accounts.sigil.test")),
            ),
            (
                "an issuer with a trailing slash",
                keyless(exact(&id), exact(&format!("{iss}/"))),
            ),
            (
                "an identity regex",
                keyless(regex("^https://github.com/sigil-dev/other/"), exact(&iss)),
            ),
            (
                "an anchored identity regex",
                keyless(regex(&format!("^{}x$", regex::escape(&id))), exact(&iss)),
            ),
            (
                "an issuer regex",
                keyless(exact(&id), regex(r"^https://gitlab\.com$")),
            ),
            (
                "an anchored issuer regex",
                keyless(exact(&id), regex(&format!("^{}/$", regex::escape(&iss)))),
            ),
            (
                "a managed key",
                VerificationPolicy::key(
                    PublicKey::from_pem(
                        &sigil_testkit::Testkit::new(SEED).managed_public_key_pem(),
                    )
                    .unwrap(),
                ),
            ),
        ];
        for (what, policy) in wrong {
            assert!(run(policy).is_err(), "{kind:?}: verified for {what}");
        }
    }
}

#[test]
fn a_managed_key_bundle_verifies_only_with_its_own_key() {
    let s = Subject::new(Kind::ManagedKey);
    let json = untouched(&s);
    let other = sigil_testkit::Testkit::new(SEED + 1).managed_public_key_pem();
    let wrong = [
        (
            "another key",
            VerificationPolicy::key(PublicKey::from_pem(&other).unwrap()),
        ),
        ("a keyless policy", keyless(regex(".*"), regex(".*"))),
    ];
    for (what, policy) in wrong {
        let got = s.verify_with(&json, Artifact::Bytes(ARTIFACT), &policy, &s.root);
        assert!(got.is_err(), "verified with {what}");
    }
}

#[test]
fn no_kind_verifies_under_another_trust_root() {
    let other =
        TrustedRoot::from_json(&sigil_testkit::Testkit::new(SEED + 1).trusted_root_json()).unwrap();
    let public_good = TrustedRoot::public_good().unwrap();
    for &kind in ALL_KINDS {
        let s = Subject::new(kind);
        let json = untouched(&s);
        for (what, root) in [("another testkit", &other), ("public good", &public_good)] {
            let got = s.verify_with(&json, Artifact::Bytes(ARTIFACT), &s.policy, root);
            assert!(
                got.is_err(),
                "{kind:?}: verified under the {what} trust root"
            );
        }
    }
}

#[test]
fn an_integrated_time_added_to_a_rekor_v2_entry_is_never_trusted() {
    // Rekor v2 entries carry no integrated time and nothing signs one: an
    // added value may be rejected or ignored, but never change the facts.
    for kind in [
        Kind::Rekor2TsaCerts,
        Kind::Rekor2TsaNoCerts,
        Kind::Rekor2Dsse,
    ] {
        let s = Subject::new(kind);
        for t in [
            DEFAULT_SIGNING_TIME + 2,
            DEFAULT_SIGNING_TIME - 86_400,
            DEFAULT_SIGNING_TIME + 3_600,
        ] {
            let mut json = s.json.clone();
            json["verificationMaterial"]["tlogEntries"][0]["integratedTime"] =
                Value::String(t.to_string());
            if let Ok(facts) = s.verify(&serde_json::to_vec(&json).unwrap()) {
                assert_eq!(
                    facts, s.facts,
                    "{kind:?}: integratedTime {t} changed the facts"
                );
            }
        }
    }
}

/// Verifies `s` with one field replaced.
fn verify_replaced(s: &Subject, path: &[&str], value: Value) -> Result<String, String> {
    let mut json = s.json.clone();
    let path: Vec<String> = path.iter().map(|p| (*p).to_owned()).collect();
    *at_mut(&mut json, &path) = value;
    s.verify(&serde_json::to_vec(&json).unwrap())
}

const CHECKPOINT: &[&str] = &[
    "verificationMaterial",
    "tlogEntries",
    "0",
    "inclusionProof",
    "checkpoint",
    "envelope",
];

fn checkpoint_renamed(s: &Subject, name: &str) -> Result<String, String> {
    let mut json = s.json.clone();
    let path: Vec<String> = CHECKPOINT.iter().map(|p| (*p).to_owned()).collect();
    let note = at_mut(&mut json, &path).as_str().unwrap().to_owned();
    let names = checkpoint_key_names(note.as_bytes());
    let renamed = format!("{}{name}{}", &note[..names.start], &note[names.end..]);
    verify_replaced(s, CHECKPOINT, Value::String(renamed))
}

#[test]
fn a_rekor_v2_checkpoint_signed_under_another_key_name_is_rejected() {
    for kind in [Kind::Rekor2TsaNoCerts, Kind::Rekor2Dsse] {
        let s = Subject::new(kind);
        assert!(
            checkpoint_renamed(&s, "evil.example").is_err(),
            "{kind:?}: a checkpoint whose only signature line names `evil.example` verified"
        );
    }
}

#[test]
fn a_rekor_v1_checkpoints_key_name_is_the_servers_hostname_and_changes_no_fact() {
    for kind in [Kind::MessageV03, Kind::DsseV03] {
        let s = Subject::new(kind);
        // A private Rekor v1 signs under its pod name: same key, same facts.
        let facts = checkpoint_renamed(&s, "rekor-server-7d9c8b5f4-x2x4l")
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(facts, s.facts, "{kind:?}");
    }
}

#[test]
fn a_rekor_v2_entry_whose_log_index_differs_from_its_inclusion_proof_is_rejected() {
    let s = Subject::new(Kind::Rekor2TsaNoCerts);
    let got = verify_replaced(
        &s,
        &["verificationMaterial", "tlogEntries", "0", "logIndex"],
        Value::String("11".into()),
    );
    assert!(
        got.is_err(),
        "a Rekor v2 entry claiming logIndex 11 with a proof for leaf 10 verified: {}",
        got.unwrap_or_default()
    );
}
