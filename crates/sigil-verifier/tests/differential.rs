//! The scenarios of the differential test against independent Sigstore
//! clients (`scripts/differential.sh` runs sigil's CLI, sigstore-python and
//! cosign on them and compares verdicts).
//!
//! This file owns the scenario table: what is minted, how it is verified and
//! the expected verdict, plus each peer's documented scope differences. Two
//! entry points:
//! - a normal test that verifies every scenario in-process with the library,
//!   so the table stays right without any peer installed;
//! - an ignored test that writes the scenarios to `$SIGIL_DIFFERENTIAL_DIR`,
//!   one directory each (`bundle.sigstore.json`, `artifact`,
//!   `trusted_root.json`, `trust_config.json`, `identity`, `issuer` or
//!   `key.pub`, `expect`, and `predicate_type`, `signed_timestamps`,
//!   `scope.<peer>` when they apply).

// Test glue: a failed fixture build should abort loudly.
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::fs;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use sigil_testkit::{
    BundleSpec, BundleVersion, ChainSpec, Content, DEFAULT_SIGNING_TIME, EPOCH_2020, KeySpec,
    SctSpec, Testkit, TimestampSpec, TlogSpec, TrustRootSpec, TsaOptions, V1Kind, V2Kind,
};
use sigil_verifier::bundle::Bundle;
use sigil_verifier::crypto::PublicKey;
use sigil_verifier::identity::{IdentityMatcher, IdentityPolicy};
use sigil_verifier::trust::TrustedRoot;
use sigil_verifier::verify::{Artifact, VerificationPolicy, verify_bundle};
use time::OffsetDateTime;

const SEED: u64 = 42;
const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";
const PY: &str = "sigstore-python";
const COSIGN: &str = "cosign";

/// What is signed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Signed {
    Message,
    /// In-toto statement whose subject has a `name`.
    DsseNamed,
    /// In-toto statement whose subject has only a digest, as cosign v3 writes it.
    DsseNameless,
}

/// Something done to the bundle or to the verification inputs after minting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Twist {
    None,
    /// Flip one bit of the message or DSSE signature.
    TamperSignature,
    /// Verify for another identity (same issuer).
    WrongIdentity,
    /// Verify for another issuer (same identity).
    WrongIssuer,
    /// Verify against other artifact bytes.
    WrongArtifact,
    /// Verify a managed-key bundle with another key.
    WrongKey,
    /// Rename the key in the checkpoint's signature line.
    RenameCheckpointKey,
    /// Make a Rekor v2 entry's logIndex disagree with its inclusion proof.
    MismatchedV2LogIndex,
}

struct Scenario {
    name: &'static str,
    spec: BundleSpec,
    signed: Signed,
    twist: Twist,
    /// A kit other than the default one.
    kit: Option<Testkit>,
    /// The correct verdict.
    ok: bool,
    /// Peers that cannot judge this scenario, with the reason.
    scope: Vec<(&'static str, &'static str)>,
}

fn sc(name: &'static str, spec: BundleSpec, signed: Signed, ok: bool) -> Scenario {
    Scenario {
        name,
        spec,
        signed,
        twist: Twist::None,
        kit: None,
        ok,
        scope: Vec::new(),
    }
}

impl Scenario {
    fn twist(mut self, t: Twist) -> Self {
        self.twist = t;
        self
    }
    fn scope(mut self, peer: &'static str, why: &'static str) -> Self {
        self.scope.push((peer, why));
        self
    }
    fn kit(mut self, kit: Testkit) -> Self {
        self.kit = Some(kit);
        self
    }
}

// Scope differences, each stated once.
const PY_NO_KEY: &str = "the sigstore CLI has no key-based verification";
const PY_NAMELESS: &str = "rejects in-toto subjects without `name` (cosign v3 writes them)";
const PY_INTOTO: &str =
    "Rekor v1 intoto 0.0.2: 'Integrated time only supported for dsse/hashedrekord 0.0.1 types'";
const PY_DSSE_V2: &str = "does not verify Rekor v2 dsse 0.0.2 entries";
const PY_ROOT_IN_CHAIN: &str = "only warns about a root certificate inside the bundle's chain";
const PY_NOTE_NAME: &str =
    "matches checkpoint signature lines by key hint only, ignoring the key name";
const PY_V2_INDEX: &str =
    "does not compare a Rekor v2 entry's logIndex with its inclusion proof's leaf index";
const COSIGN_ROOT_IN_CHAIN: &str =
    "sigstore-go reads only certificates[0] of x509CertificateChain and ignores the rest";
const COSIGN_DSSE_V2: &str = "sigstore-go v1.2.2 parses only hashedrekord 0.0.2 Rekor v2 bodies: \
     the bundle is not recognised ('--trusted-root only supported with --new-bundle-format')";

fn scenarios() -> Vec<Scenario> {
    use Signed::{DsseNamed, DsseNameless, Message};
    let d = BundleSpec::default;
    let v2 = BundleSpec::rekor_v2;
    let late = Some(DEFAULT_SIGNING_TIME + 3600);
    let tsa = |gen_time, wrong_imprint| {
        TimestampSpec::Rfc3161(TsaOptions {
            embed_certs: true,
            gen_time,
            wrong_imprint,
        })
    };
    let version = |version| BundleSpec { version, ..d() };
    vec![
        // Every kind, verified as signed.
        sc(
            "v1-message-v0.1",
            version(BundleVersion::V01),
            Message,
            true,
        ),
        sc(
            "v1-message-v0.2",
            version(BundleVersion::V02),
            Message,
            true,
        ),
        sc("v1-message-v0.3", d(), Message, true),
        sc(
            "v1-message-v0.3-alt",
            version(BundleVersion::V03Alt),
            Message,
            true,
        ),
        sc(
            "v1-message-v0.2-with-intermediate",
            BundleSpec {
                version: BundleVersion::V02,
                chain: ChainSpec::WithIntermediate,
                ..d()
            },
            Message,
            true,
        ),
        sc(
            "v1-message-email",
            BundleSpec::email("alice@sigil.test", "https://accounts.sigil.test"),
            Message,
            true,
        ),
        sc("v1-dsse", d(), DsseNamed, true),
        sc("v1-dsse-nameless-subject", d(), DsseNameless, true).scope(PY, PY_NAMELESS),
        sc(
            "v1-intoto",
            BundleSpec {
                tlog: TlogSpec::RekorV1(V1Kind::Intoto),
                ..d()
            },
            DsseNamed,
            true,
        )
        .scope(PY, PY_INTOTO),
        sc(
            "v1-intoto-with-tsa",
            BundleSpec {
                tlog: TlogSpec::RekorV1(V1Kind::Intoto),
                timestamp: TimestampSpec::embedded(),
                ..d()
            },
            DsseNamed,
            true,
        )
        .scope(PY, PY_INTOTO),
        sc("v2-message-tsa-certs", v2(), Message, true),
        sc(
            "v2-message-tsa-no-certs",
            BundleSpec {
                timestamp: TimestampSpec::without_certs(),
                ..v2()
            },
            Message,
            true,
        ),
        sc("v2-dsse-hashedrekord", v2(), DsseNamed, true),
        sc(
            "v2-dsse-dsse002",
            BundleSpec {
                tlog: TlogSpec::RekorV2(V2Kind::Dsse),
                ..v2()
            },
            DsseNamed,
            true,
        )
        .scope(PY, PY_DSSE_V2)
        .scope(COSIGN, COSIGN_DSSE_V2),
        sc("managed-key", BundleSpec::managed_key(), Message, true).scope(PY, PY_NO_KEY),
        // Broken material.
        sc(
            "no-sct_fail",
            BundleSpec {
                sct: SctSpec::None,
                ..d()
            },
            Message,
            false,
        ),
        sc(
            "untrusted-sct-log_fail",
            BundleSpec {
                sct: SctSpec::Untrusted,
                ..d()
            },
            Message,
            false,
        ),
        sc(
            "chain-with-root_fail",
            BundleSpec {
                version: BundleVersion::V01,
                chain: ChainSpec::WithRoot,
                ..d()
            },
            Message,
            false,
        )
        .scope(PY, PY_ROOT_IN_CHAIN)
        .scope(COSIGN, COSIGN_ROOT_IN_CHAIN),
        sc(
            "tsa-wrong-imprint_fail",
            BundleSpec {
                timestamp: tsa(None, true),
                ..v2()
            },
            Message,
            false,
        ),
        sc(
            "tsa-time-after-leaf-expiry_fail",
            BundleSpec {
                timestamp: tsa(late, false),
                ..v2()
            },
            Message,
            false,
        ),
        sc("tsa-outside-tsa-cert-validity_fail", v2(), Message, false)
            .kit(Testkit::new(SEED).with_tsa_validity(EPOCH_2020, DEFAULT_SIGNING_TIME - 1)),
        sc(
            "integrated-time-after-cert-expiry_fail",
            BundleSpec {
                integrated_time: late,
                ..d()
            },
            Message,
            false,
        ),
        sc(
            "v2-no-timestamp_fail",
            BundleSpec {
                timestamp: TimestampSpec::None,
                ..v2()
            },
            Message,
            false,
        ),
        sc(
            "no-tlog_fail",
            BundleSpec {
                tlog: TlogSpec::None,
                timestamp: TimestampSpec::embedded(),
                ..d()
            },
            Message,
            false,
        ),
        sc("tampered-signature_fail", d(), Message, false).twist(Twist::TamperSignature),
        sc("tampered-dsse-signature_fail", d(), DsseNamed, false).twist(Twist::TamperSignature),
        sc("v2-tampered-signature_fail", v2(), Message, false).twist(Twist::TamperSignature),
        sc("wrong-identity_fail", d(), Message, false).twist(Twist::WrongIdentity),
        sc("wrong-issuer_fail", d(), Message, false).twist(Twist::WrongIssuer),
        sc("wrong-artifact_fail", d(), Message, false).twist(Twist::WrongArtifact),
        sc("dsse-wrong-artifact_fail", d(), DsseNamed, false).twist(Twist::WrongArtifact),
        sc("v2-wrong-identity_fail", v2(), Message, false).twist(Twist::WrongIdentity),
        sc(
            "managed-key-wrong-key_fail",
            BundleSpec::managed_key(),
            Message,
            false,
        )
        .twist(Twist::WrongKey)
        .scope(PY, PY_NO_KEY),
        // A Rekor v1 checkpoint names the server's own hostname, which is no
        // part of the log's key ID: a private deployment's pod name, or any
        // other key name on the signature line, changes nothing.
        sc("v1-private-rekor-pod-hostname", d(), Message, true).kit({
            let mut kit = Testkit::new(SEED);
            kit.rekor_v1 = kit
                .rekor_v1
                .clone()
                .with_hostname("rekor-server-7d9c8b5f4-x2x4l");
            kit
        }),
        sc("v1-checkpoint-key-renamed", d(), Message, true).twist(Twist::RenameCheckpointKey),
        // Unsigned parts of a checkpoint and a Rekor v2 entry that must still be checked.
        sc("v2-checkpoint-key-renamed_fail", v2(), Message, false)
            .twist(Twist::RenameCheckpointKey)
            .scope(PY, PY_NOTE_NAME),
        sc("v2-log-index-mismatch_fail", v2(), Message, false)
            .twist(Twist::MismatchedV2LogIndex)
            .scope(PY, PY_V2_INDEX),
    ]
}

/// A scenario made concrete: the files a verifier is given.
struct Minted {
    bundle: Value,
    artifact: Vec<u8>,
    trusted_root: String,
    trust_config: String,
    identity: String,
    issuer: String,
    key_pem: Option<String>,
}

fn artifact_of(name: &str) -> Vec<u8> {
    format!("artifact for {name}\n").into_bytes()
}

fn mint(s: &Scenario) -> Minted {
    let default_kit;
    let kit = match &s.kit {
        Some(k) => k,
        None => {
            default_kit = Testkit::new(SEED);
            &default_kit
        }
    };
    let artifact = artifact_of(s.name);
    let predicate = json!({"buildDefinition": {"buildType": "https://sigil.test/build"}});
    let content = match s.signed {
        Signed::Message => Content::Message(artifact.clone()),
        Signed::DsseNamed => {
            Content::in_toto_named("artifact", &artifact, PREDICATE_TYPE, predicate)
        }
        Signed::DsseNameless => Content::in_toto(&artifact, PREDICATE_TYPE, predicate),
    };
    let minted = kit.sign(&s.spec, content).expect(s.name);
    let mut m = Minted {
        bundle: minted.value(),
        artifact,
        trusted_root: kit.trusted_root_json(),
        trust_config: kit.client_trust_config_json(&TrustRootSpec::default()),
        identity: s.spec.identity.as_str().to_owned(),
        issuer: s.spec.oidc_issuer.clone(),
        key_pem: minted.public_key_pem.clone(),
    };
    match s.twist {
        Twist::None => {}
        Twist::TamperSignature => {
            let sig = match s.signed {
                Signed::Message => &mut m.bundle["messageSignature"]["signature"],
                Signed::DsseNamed | Signed::DsseNameless => {
                    &mut m.bundle["dsseEnvelope"]["signatures"][0]["sig"]
                }
            };
            let mut bytes = B64.decode(sig.as_str().unwrap()).unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 0x01;
            *sig = Value::String(B64.encode(bytes));
        }
        Twist::WrongIdentity => {
            m.identity =
                "https://github.com/sigil-dev/other/.github/workflows/release.yml@refs/heads/main"
                    .into();
        }
        Twist::WrongIssuer => m.issuer = "https://accounts.sigil.test".into(),
        Twist::WrongArtifact => m.artifact = b"another artifact\n".to_vec(),
        Twist::WrongKey => m.key_pem = Some(Testkit::new(SEED + 1).managed_public_key_pem()),
        Twist::RenameCheckpointKey => {
            let env = &mut m.bundle["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["checkpoint"]
                ["envelope"];
            let note = env.as_str().unwrap().to_owned();
            let (body, sigs) = note.split_once("\n\n").unwrap();
            // `— <name> <base64>\n`: keep the dash and the signature, swap the name.
            let mut parts = sigs.splitn(3, ' ');
            let (dash, _name, sig) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            *env = Value::String(format!("{body}\n\n{dash} evil.example {sig}"));
        }
        Twist::MismatchedV2LogIndex => {
            let entry = &mut m.bundle["verificationMaterial"]["tlogEntries"][0];
            let i: i64 = entry["inclusionProof"]["logIndex"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            entry["logIndex"] = Value::String((i + 1).to_string());
        }
    }
    m
}

/// sigil's verdict, in-process: `Ok` or the reason it failed.
fn verify_in_process(m: &Minted) -> Result<(), String> {
    let root = TrustedRoot::from_json(&m.trusted_root).map_err(|e| e.to_string())?;
    let bundle =
        Bundle::from_json(&serde_json::to_vec(&m.bundle).unwrap()).map_err(|e| e.to_string())?;
    let policy = match &m.key_pem {
        Some(pem) => VerificationPolicy::key(PublicKey::from_pem(pem).map_err(|e| e.to_string())?),
        None => VerificationPolicy::keyless(IdentityPolicy {
            subject: IdentityMatcher::Exact(m.identity.clone()),
            issuer: IdentityMatcher::Exact(m.issuer.clone()),
            claims: Vec::new(),
        }),
    };
    let now = OffsetDateTime::from_unix_timestamp(DEFAULT_SIGNING_TIME + 86_400).unwrap();
    verify_bundle(&bundle, Artifact::Bytes(&m.artifact), &policy, &root, now)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn every_differential_scenario_gets_its_expected_verdict_from_the_library() {
    let mut wrong = Vec::new();
    for s in scenarios() {
        let got = verify_in_process(&mint(&s));
        if got.is_ok() != s.ok {
            wrong.push(format!(
                "{}: expected {}, got {got:?}",
                s.name,
                if s.ok { "verified" } else { "rejected" }
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_differential_scenario_has_a_unique_name_that_says_its_verdict() {
    let all = scenarios();
    let mut names: Vec<_> = all.iter().map(|s| s.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all.len(), "duplicate scenario names");
    for s in &all {
        assert_eq!(s.name.ends_with("_fail"), !s.ok, "{}", s.name);
    }
}

/// Writes every scenario under `$SIGIL_DIFFERENTIAL_DIR` for `scripts/differential.sh`.
#[test]
#[ignore = "writes files for scripts/differential.sh; run it through the script"]
fn write_the_differential_scenarios_for_the_script() {
    let out = std::env::var("SIGIL_DIFFERENTIAL_DIR")
        .expect("set SIGIL_DIFFERENTIAL_DIR to the output directory");
    let out = Path::new(&out);
    let mut index = String::new();
    for s in scenarios() {
        let m = mint(&s);
        let dir = out.join(s.name);
        // Idempotent: each run rewrites the scenario from scratch.
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let write = |file: &str, data: &[u8]| fs::write(dir.join(file), data).unwrap();
        write(
            "bundle.sigstore.json",
            serde_json::to_string_pretty(&m.bundle).unwrap().as_bytes(),
        );
        write("artifact", &m.artifact);
        write("trusted_root.json", m.trusted_root.as_bytes());
        write("trust_config.json", m.trust_config.as_bytes());
        write("expect", if s.ok { b"ok" } else { b"fail" });
        match &m.key_pem {
            Some(pem) => write("key.pub", pem.as_bytes()),
            None => {
                write("identity", m.identity.as_bytes());
                write("issuer", m.issuer.as_bytes());
            }
        }
        if s.signed != Signed::Message {
            write("predicate_type", PREDICATE_TYPE.as_bytes());
        }
        if !matches!(s.spec.timestamp, TimestampSpec::None) {
            write("signed_timestamps", b"");
        }
        for (peer, why) in &s.scope {
            write(&format!("scope.{peer}"), why.as_bytes());
        }
        assert!(s.spec.key == KeySpec::ManagedKey || m.key_pem.is_none());
        index.push_str(s.name);
        index.push('\n');
    }
    fs::write(out.join("scenarios.txt"), index).unwrap();
}
