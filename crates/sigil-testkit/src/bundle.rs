//! Bundle minting: the spec of a signing scenario, the content signed, and
//! the protobuf-JSON `dev.sigstore.bundle.v1.Bundle` that comes out.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::fulcio::{GithubWorkflow, IssuedLeaf, LeafRequest, SctRequest};
use crate::json::canonical;
use crate::keys::{KeyPair, pem};
use crate::rekor::{DsseEnvelope, TlogEntry, TreeShape, V2Verifier, body};
use crate::tsa::TimestampRequest;
use crate::x509::Identity;
use crate::{DEFAULT_SIGNING_TIME, GITHUB_ISSUER, Testkit, TestkitError};

/// Bundle media type version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleVersion {
    /// `application/vnd.dev.sigstore.bundle+json;version=0.1` (certificate chain, SET).
    V01,
    /// `application/vnd.dev.sigstore.bundle+json;version=0.2` (certificate chain, inclusion proof).
    V02,
    /// `application/vnd.dev.sigstore.bundle.v0.3+json` (single certificate).
    V03,
    /// `application/vnd.dev.sigstore.bundle+json;version=0.3`, the older spelling of v0.3.
    V03Alt,
}

impl BundleVersion {
    /// The media type string.
    pub fn media_type(self) -> &'static str {
        match self {
            BundleVersion::V01 => "application/vnd.dev.sigstore.bundle+json;version=0.1",
            BundleVersion::V02 => "application/vnd.dev.sigstore.bundle+json;version=0.2",
            BundleVersion::V03 => "application/vnd.dev.sigstore.bundle.v0.3+json",
            BundleVersion::V03Alt => "application/vnd.dev.sigstore.bundle+json;version=0.3",
        }
    }

    fn single_certificate(self) -> bool {
        matches!(self, BundleVersion::V03 | BundleVersion::V03Alt)
    }
}

/// Entry kinds on the Rekor v1 log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V1Kind {
    /// hashedrekord 0.0.1 for message signatures, dsse 0.0.1 for DSSE.
    Auto,
    /// hashedrekord 0.0.1 (message signatures only).
    HashedRekord,
    /// dsse 0.0.1 (DSSE only).
    Dsse,
    /// intoto 0.0.2 (DSSE only).
    Intoto,
}

/// Entry kinds on the Rekor v2 log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V2Kind {
    /// hashedrekord 0.0.2 for both (for DSSE its digest is SHA-256 of the PAE, as current clients log it).
    Auto,
    /// hashedrekord 0.0.2.
    HashedRekord,
    /// dsse 0.0.2 (DSSE only).
    Dsse,
}

/// Which transparency log records the signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlogSpec {
    /// No tlog entry (`tlogEntries: []`).
    None,
    /// The Rekor v1 log: SET, integrated time, checkpointed inclusion proof.
    RekorV1(V1Kind),
    /// The Rekor v2 log: checkpointed inclusion proof only.
    RekorV2(V2Kind),
}

/// Options of an RFC 3161 timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsaOptions {
    /// Embed the TSA certificates in the token.
    pub embed_certs: bool,
    /// `genTime` (default: signing time + 1 s).
    pub gen_time: Option<i64>,
    /// Timestamp different bytes than the signature (imprint mismatch).
    pub wrong_imprint: bool,
}

/// Whether and how the signature is timestamped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampSpec {
    /// No timestamp.
    None,
    /// One RFC 3161 timestamp from the kit's TSA.
    Rfc3161(TsaOptions),
}

impl TimestampSpec {
    /// A correct timestamp with embedded certificates.
    pub fn embedded() -> Self {
        TimestampSpec::Rfc3161(TsaOptions {
            embed_certs: true,
            gen_time: None,
            wrong_imprint: false,
        })
    }

    /// A correct timestamp without certificates (the chain comes from the trusted root).
    pub fn without_certs() -> Self {
        TimestampSpec::Rfc3161(TsaOptions {
            embed_certs: false,
            gen_time: None,
            wrong_imprint: false,
        })
    }
}

/// Keyless (Fulcio certificate) or managed key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySpec {
    /// An ephemeral key certified by the kit's Fulcio CA.
    Keyless,
    /// The kit's managed key; the bundle carries only `publicKey.hint`.
    ManagedKey,
}

/// The SCT embedded in the leaf certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SctSpec {
    /// An SCT from the trusted CT log.
    Trusted,
    /// No SCT extension at all.
    None,
    /// An SCT from a CT log missing from the trusted root.
    Untrusted,
    /// An SCT from the trusted log with these `extensions` bytes.
    WithExtensions(Vec<u8>),
}

/// Which certificates a v0.1/v0.2 `x509CertificateChain` lists (v0.3 always has the leaf alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainSpec {
    /// The leaf only (what current clients write).
    LeafOnly,
    /// Leaf and intermediate.
    WithIntermediate,
    /// Leaf, intermediate and root (clients must reject a bundle carrying the root).
    WithRoot,
}

/// A signing scenario. `BundleSpec::default()` is a keyless v0.3 bundle by a
/// GitHub workflow, logged to Rekor v1, without TSA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleSpec {
    /// SAN identity of the leaf.
    pub identity: Identity,
    /// OIDC issuer (extensions 1.1 and 1.8).
    pub oidc_issuer: String,
    /// Signing time, Unix seconds: the leaf's notBefore.
    pub signing_time: i64,
    /// GitHub workflow extensions to add.
    pub github: Option<GithubWorkflow>,
    /// Bundle media type.
    pub version: BundleVersion,
    /// Transparency log.
    pub tlog: TlogSpec,
    /// RFC 3161 timestamp.
    pub timestamp: TimestampSpec,
    /// Keyless or managed key.
    pub key: KeySpec,
    /// Embedded SCT.
    pub sct: SctSpec,
    /// Certificate chain contents for v0.1/v0.2.
    pub chain: ChainSpec,
    /// Where the entry sits in the log's tree.
    pub tree: TreeShape,
    /// Rekor v1 integrated time (default: signing time + 2 s).
    pub integrated_time: Option<i64>,
    /// Leaf lifetime in seconds (Fulcio: 600).
    pub cert_lifetime_secs: i64,
}

impl Default for BundleSpec {
    fn default() -> Self {
        let gh = GithubWorkflow::new(
            "sigil-dev/example",
            ".github/workflows/release.yml",
            "refs/heads/main",
            "0123456789abcdef0123456789abcdef01234567",
        );
        BundleSpec {
            identity: gh.identity(),
            oidc_issuer: GITHUB_ISSUER.to_owned(),
            signing_time: DEFAULT_SIGNING_TIME,
            github: Some(gh),
            version: BundleVersion::V03,
            tlog: TlogSpec::RekorV1(V1Kind::Auto),
            timestamp: TimestampSpec::None,
            key: KeySpec::Keyless,
            sct: SctSpec::Trusted,
            chain: ChainSpec::LeafOnly,
            tree: TreeShape::default(),
            integrated_time: None,
            cert_lifetime_secs: 600,
        }
    }
}

impl BundleSpec {
    /// The default spec moved to Rekor v2 with an embedded-certificate TSA timestamp.
    pub fn rekor_v2() -> Self {
        BundleSpec {
            tlog: TlogSpec::RekorV2(V2Kind::Auto),
            timestamp: TimestampSpec::embedded(),
            ..BundleSpec::default()
        }
    }

    /// The default spec signed by the managed key instead of a Fulcio certificate.
    pub fn managed_key() -> Self {
        BundleSpec {
            key: KeySpec::ManagedKey,
            ..BundleSpec::default()
        }
    }

    /// A keyless bundle as GitHub's instance signs a private repository's
    /// attestation: workflow `workflow` (visibility `private`), no
    /// transparency log entry, no SCT, one RFC 3161 timestamp whose TSA
    /// chain comes from the trusted root. Pair with [`crate::Testkit::github_private`].
    pub fn github_private(workflow: GithubWorkflow) -> Self {
        let workflow = GithubWorkflow {
            source_repository_visibility: "private".to_owned(),
            ..workflow
        };
        BundleSpec {
            identity: workflow.identity(),
            github: Some(workflow),
            tlog: TlogSpec::None,
            sct: SctSpec::None,
            timestamp: TimestampSpec::without_certs(),
            ..BundleSpec::default()
        }
    }

    /// A keyless email identity (no GitHub extensions) with the given issuer.
    pub fn email(email: &str, issuer: &str) -> Self {
        BundleSpec {
            identity: Identity::Email(email.to_owned()),
            oidc_issuer: issuer.to_owned(),
            github: None,
            ..BundleSpec::default()
        }
    }
}

/// What gets signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// A message signature over these artifact bytes.
    Message(Vec<u8>),
    /// A DSSE envelope with this payload.
    Dsse {
        /// `payloadType`, e.g. `application/vnd.in-toto+json`.
        payload_type: String,
        /// Payload bytes.
        payload: Vec<u8>,
    },
}

impl Content {
    /// A DSSE in-toto statement (v1, subject without name) about `artifact`.
    pub fn in_toto(artifact: &[u8], predicate_type: &str, predicate: Value) -> Self {
        let digest: [u8; 32] = Sha256::digest(artifact).into();
        Content::Dsse {
            payload_type: IN_TOTO_PAYLOAD_TYPE.to_owned(),
            payload: in_toto_statement(&digest, predicate_type, predicate),
        }
    }

    /// A DSSE in-toto statement (v1) about `artifact` whose subject also has a `name`.
    pub fn in_toto_named(
        name: &str,
        artifact: &[u8],
        predicate_type: &str,
        predicate: Value,
    ) -> Self {
        let digest: [u8; 32] = Sha256::digest(artifact).into();
        Content::Dsse {
            payload_type: IN_TOTO_PAYLOAD_TYPE.to_owned(),
            payload: in_toto_statement_named(name, &digest, predicate_type, predicate),
        }
    }
}

/// The DSSE payload type of in-toto statements.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// An in-toto Statement v1 whose single subject has a `name` and a `sha256` digest (canonical JSON).
pub fn in_toto_statement_named(
    name: &str,
    subject_digest_sha256: &[u8; 32],
    predicate_type: &str,
    predicate: Value,
) -> Vec<u8> {
    canonical(&json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": name, "digest": {"sha256": hex::encode(subject_digest_sha256)}}],
        "predicateType": predicate_type,
        "predicate": predicate,
    }))
    .into_bytes()
}

/// An in-toto Statement v1 whose single subject has only a `sha256` digest and
/// no `name`, as cosign v3 writes it (canonical JSON).
pub fn in_toto_statement(
    subject_digest_sha256: &[u8; 32],
    predicate_type: &str,
    predicate: Value,
) -> Vec<u8> {
    canonical(&json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"digest": {"sha256": hex::encode(subject_digest_sha256)}}],
        "predicateType": predicate_type,
        "predicate": predicate,
    }))
    .into_bytes()
}

/// A minted bundle and the pieces it was made of.
#[derive(Clone, Debug)]
pub struct MintedBundle {
    /// The bundle JSON.
    pub json: String,
    /// SHA-256 of the message (message signatures) or of the DSSE payload.
    pub artifact_digest: [u8; 32],
    /// The signature bytes (message signature, or the DSSE signature).
    pub signature: Vec<u8>,
    /// The leaf certificate (keyless only).
    pub leaf: Option<IssuedLeaf>,
    /// The PEM public key to verify with (managed key only).
    pub public_key_pem: Option<String>,
    /// The DSSE envelope (DSSE content only).
    pub envelope: Option<DsseEnvelope>,
    /// The tlog entry, if any.
    pub tlog_entry: Option<TlogEntry>,
    /// The DER TimeStampResp, if any.
    pub timestamp: Option<Vec<u8>>,
    /// The key that made the signature.
    pub signing_key: KeyPair,
}

impl MintedBundle {
    /// The bundle as a JSON value (for tampering in tests).
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }
}

fn unsupported(msg: &str) -> TestkitError {
    TestkitError::Unsupported(msg.to_owned())
}

pub(crate) fn mint(
    kit: &Testkit,
    spec: &BundleSpec,
    content: Content,
) -> Result<MintedBundle, TestkitError> {
    let signing_key = match spec.key {
        KeySpec::Keyless => kit.ephemeral_key(&spec.identity, spec.signing_time),
        KeySpec::ManagedKey => kit.managed_key.clone(),
    };

    // The signature and what the log records about the signed data.
    let (signature, artifact_digest, envelope) = match &content {
        Content::Message(msg) => (signing_key.sign(msg), Sha256::digest(msg).into(), None),
        Content::Dsse {
            payload_type,
            payload,
        } => {
            let sig = signing_key.sign(&DsseEnvelope::pae(payload_type, payload));
            let env = DsseEnvelope {
                payload_type: payload_type.clone(),
                payload: payload.clone(),
                signatures: vec![sig.clone()],
            };
            (sig, Sha256::digest(payload).into(), Some(env))
        }
    };

    let leaf = match spec.key {
        KeySpec::ManagedKey => None,
        KeySpec::Keyless => {
            let sct_ts = u64::try_from(spec.signing_time).unwrap_or(0) * 1000;
            let scts = match &spec.sct {
                SctSpec::None => vec![],
                SctSpec::Trusted => vec![SctRequest {
                    log: &kit.ct_log,
                    timestamp_ms: sct_ts,
                    extensions: vec![],
                }],
                SctSpec::Untrusted => vec![SctRequest {
                    log: &kit.untrusted_ct_log,
                    timestamp_ms: sct_ts,
                    extensions: vec![],
                }],
                SctSpec::WithExtensions(ext) => vec![SctRequest {
                    log: &kit.ct_log,
                    timestamp_ms: sct_ts,
                    extensions: ext.clone(),
                }],
            };
            Some(kit.fulcio.issue(&LeafRequest {
                public_key: &signing_key,
                identity: spec.identity.clone(),
                oidc_issuer: Some(spec.oidc_issuer.clone()),
                not_before: spec.signing_time,
                lifetime_secs: spec.cert_lifetime_secs,
                github: spec.github.clone(),
                scts,
                extra_extensions: vec![],
            }))
        }
    };
    let verifier_pem = match &leaf {
        Some(l) => pem("CERTIFICATE", &l.cert_der),
        None => signing_key.public_key_pem(),
    };
    let v2_verifier = match &leaf {
        Some(l) => V2Verifier::Certificate(l.cert_der.clone()),
        None => V2Verifier::PublicKey(signing_key.spki_der()),
    };

    let tlog_entry = match (spec.tlog, &envelope) {
        (TlogSpec::None, _) => None,
        (TlogSpec::RekorV1(kind), env) => {
            let (kind, version, body) = match (kind, env) {
                (V1Kind::Auto | V1Kind::HashedRekord, None) => (
                    "hashedrekord",
                    "0.0.1",
                    body::hashedrekord_v001(&artifact_digest, &signature, &verifier_pem),
                ),
                (V1Kind::Auto | V1Kind::Dsse, Some(env)) => {
                    ("dsse", "0.0.1", body::dsse_v001(env, &verifier_pem))
                }
                (V1Kind::Intoto, Some(env)) => {
                    ("intoto", "0.0.2", body::intoto_v002(env, &verifier_pem))
                }
                (V1Kind::HashedRekord, Some(_)) => {
                    return Err(unsupported("hashedrekord 0.0.1 entry for a DSSE envelope"));
                }
                (V1Kind::Dsse | V1Kind::Intoto, None) => {
                    return Err(unsupported("dsse/intoto entry for a message signature"));
                }
            };
            let integrated = spec.integrated_time.unwrap_or(spec.signing_time + 2);
            Some(kit.rekor_v1.log(kind, version, body, integrated, spec.tree))
        }
        (TlogSpec::RekorV2(kind), env) => {
            let details = signing_key.key_details();
            let (kind, body) = match (kind, env) {
                (V2Kind::Auto | V2Kind::HashedRekord, None) => (
                    "hashedrekord",
                    body::hashedrekord_v002(&artifact_digest, &signature, &v2_verifier, details),
                ),
                (V2Kind::Auto | V2Kind::HashedRekord, Some(env)) => {
                    let pae_digest: [u8; 32] =
                        Sha256::digest(DsseEnvelope::pae(&env.payload_type, &env.payload)).into();
                    (
                        "hashedrekord",
                        body::hashedrekord_v002(&pae_digest, &signature, &v2_verifier, details),
                    )
                }
                (V2Kind::Dsse, Some(env)) => ("dsse", body::dsse_v002(env, &v2_verifier, details)),
                (V2Kind::Dsse, None) => {
                    return Err(unsupported("dsse 0.0.2 entry for a message signature"));
                }
            };
            Some(kit.rekor_v2.log(kind, body, spec.tree))
        }
    };

    let timestamp = match spec.timestamp {
        TimestampSpec::None => None,
        TimestampSpec::Rfc3161(opts) => Some(
            kit.tsa.timestamp(&TimestampRequest {
                message: signature.clone(),
                gen_time: opts.gen_time.unwrap_or(spec.signing_time + 1),
                embed_certs: opts.embed_certs,
                imprint_override: opts
                    .wrong_imprint
                    .then(|| Sha256::digest(b"not the signature").into()),
            }),
        ),
    };

    let mut material = serde_json::Map::new();
    match (&leaf, spec.version.single_certificate()) {
        (Some(l), true) => {
            material.insert(
                "certificate".into(),
                json!({"rawBytes": B64.encode(&l.cert_der)}),
            );
        }
        (Some(l), false) => {
            let mut certs = vec![l.cert_der.clone()];
            if matches!(
                spec.chain,
                ChainSpec::WithIntermediate | ChainSpec::WithRoot
            ) {
                certs.push(kit.fulcio.intermediate.cert_der.clone());
            }
            if spec.chain == ChainSpec::WithRoot {
                certs.push(kit.fulcio.root.cert_der.clone());
            }
            material.insert(
                "x509CertificateChain".into(),
                json!({"certificates": certs.iter().map(|c| json!({"rawBytes": B64.encode(c)})).collect::<Vec<_>>()}),
            );
        }
        (None, _) => {
            material.insert(
                "publicKey".into(),
                json!({"hint": B64.encode(Sha256::digest(signing_key.spki_der()))}),
            );
        }
    }
    material.insert(
        "tlogEntries".into(),
        Value::Array(tlog_entry.iter().map(TlogEntry::to_json).collect()),
    );
    if let Some(ts) = &timestamp {
        material.insert(
            "timestampVerificationData".into(),
            json!({"rfc3161Timestamps": [{"signedTimestamp": B64.encode(ts)}]}),
        );
    }

    let mut bundle = json!({
        "mediaType": spec.version.media_type(),
        "verificationMaterial": Value::Object(material),
    });
    match &envelope {
        Some(env) => crate::json::insert(&mut bundle, "dsseEnvelope", env.to_json()),
        None => {
            crate::json::insert(
                &mut bundle,
                "messageSignature",
                json!({
                    "messageDigest": {"algorithm": "SHA2_256", "digest": B64.encode(artifact_digest)},
                    "signature": B64.encode(&signature),
                }),
            );
        }
    }

    Ok(MintedBundle {
        json: serde_json::to_string_pretty(&bundle).unwrap_or_else(|_| bundle.to_string()),
        artifact_digest,
        signature,
        public_key_pem: leaf.is_none().then(|| signing_key.public_key_pem()),
        leaf,
        envelope,
        tlog_entry,
        timestamp,
        signing_key,
    })
}
