//! Transparency logs: an RFC 6962/9162 Merkle tree, signed-note checkpoints,
//! a Rekor v1-like log (ECDSA P-256, SETs, sharded log indices) and a Rekor
//! v2-like log (Ed25519, C2SP key IDs, witness cosignatures), plus the
//! canonicalized entry bodies Rekor stores for each supported kind.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::json::canonical;
use crate::keys::KeyPair;

/// RFC 6962 Merkle tree hashing and inclusion proofs.
pub mod merkle {
    use sha2::{Digest as _, Sha256};

    /// A 32-byte SHA-256 node.
    pub type Hash = [u8; 32];

    /// Leaf hash: SHA-256(0x00 ‖ data).
    pub fn leaf_hash(data: &[u8]) -> Hash {
        let mut h = Sha256::new();
        h.update([0u8]);
        h.update(data);
        h.finalize().into()
    }

    /// Interior node hash: SHA-256(0x01 ‖ left ‖ right).
    pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
        let mut h = Sha256::new();
        h.update([1u8]);
        h.update(left);
        h.update(right);
        h.finalize().into()
    }

    fn split(n: usize) -> usize {
        // Largest power of two strictly below n (n >= 2).
        let mut k = 1;
        while k * 2 < n {
            k *= 2;
        }
        k
    }

    /// Merkle tree hash over leaf hashes (the empty tree hashes to SHA-256 of nothing).
    pub fn root(leaves: &[Hash]) -> Hash {
        match leaves {
            [] => Sha256::digest([]).into(),
            [one] => *one,
            _ => {
                let k = split(leaves.len());
                let (l, r) = leaves.split_at(k);
                node_hash(&root(l), &root(r))
            }
        }
    }

    /// Audit path for leaf `index` (RFC 9162 §2.1.3.1), leaf-side first.
    pub fn inclusion_proof(index: usize, leaves: &[Hash]) -> Vec<Hash> {
        if leaves.len() <= 1 || index >= leaves.len() {
            return Vec::new();
        }
        let k = split(leaves.len());
        let (l, r) = leaves.split_at(k);
        if index < k {
            let mut p = inclusion_proof(index, l);
            p.push(root(r));
            p
        } else {
            let mut p = inclusion_proof(index - k, r);
            p.push(root(l));
            p
        }
    }

    /// Recomputes the root from an inclusion proof (RFC 9162 §2.1.3.2);
    /// `None` when the proof has the wrong length for (index, size).
    pub fn root_from_proof(index: u64, size: u64, leaf: &Hash, proof: &[Hash]) -> Option<Hash> {
        if index >= size {
            return None;
        }
        let (mut f_n, mut s_n) = (index, size - 1);
        let mut r = *leaf;
        for p in proof {
            if s_n == 0 {
                return None;
            }
            if f_n & 1 == 1 || f_n == s_n {
                r = node_hash(p, &r);
                if f_n & 1 == 0 {
                    while f_n & 1 == 0 && f_n != 0 {
                        f_n >>= 1;
                        s_n >>= 1;
                    }
                }
            } else {
                r = node_hash(&r, p);
            }
            f_n >>= 1;
            s_n >>= 1;
        }
        (s_n == 0).then_some(r)
    }
}

/// One signature line of a signed note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteSignature {
    /// Signer name (the key name of the note's verifier).
    pub name: String,
    /// The bytes after the name, before base64: 4-byte key hint ‖ signature (‖ ... for cosignatures).
    pub data: Vec<u8>,
}

/// `origin\nsize\nb64(root)\n`, the text a checkpoint signature covers.
pub fn checkpoint_body(origin: &str, size: u64, root: &[u8; 32]) -> String {
    format!("{origin}\n{size}\n{}\n", B64.encode(root))
}

/// A signed note: `body` + blank line + one `— name b64(data)` line per signature.
pub fn signed_note(body: &str, signatures: &[NoteSignature]) -> String {
    let mut out = format!("{body}\n");
    for s in signatures {
        out.push_str(&format!("\u{2014} {} {}\n", s.name, B64.encode(&s.data)));
    }
    out
}

/// A witness that cosigns Rekor v2 checkpoints (C2SP tlog-cosignature, Ed25519).
#[derive(Clone, Debug)]
pub struct Witness {
    /// Witness name (its note key name).
    pub name: String,
    /// Witness key (Ed25519).
    pub key: KeyPair,
}

impl Witness {
    /// A witness whose key derives from `seed` and its name.
    pub fn new(seed: u64, name: &str) -> Self {
        Witness {
            name: name.to_owned(),
            key: KeyPair::ed25519(seed, &format!("witness/{name}")),
        }
    }

    /// C2SP key ID for a cosignature/v1 key: SHA-256(name ‖ "\n" ‖ 0x04 ‖ key).
    pub fn key_id(&self) -> [u8; 32] {
        c2sp_key_id(&self.name, 0x04, &self.key.public_key_raw())
    }

    /// Cosigns `body` at `timestamp` (Unix seconds).
    pub fn cosign(&self, body: &str, timestamp: u64) -> NoteSignature {
        let msg = format!("cosignature/v1\ntime {timestamp}\n{body}");
        let mut data = self.key_id().get(..4).unwrap_or(&[]).to_vec();
        data.extend(timestamp.to_be_bytes());
        data.extend(self.key.sign(msg.as_bytes()));
        NoteSignature {
            name: self.name.clone(),
            data,
        }
    }
}

/// C2SP signed-note key ID: SHA-256(name ‖ "\n" ‖ type ‖ key).
pub fn c2sp_key_id(name: &str, key_type: u8, key: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([key_type]);
    h.update(key);
    h.finalize().into()
}

/// An inclusion proof with its checkpoint, as a bundle carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InclusionProof {
    /// Leaf index within the (shard's) tree.
    pub log_index: u64,
    /// Tree size the proof is for.
    pub tree_size: u64,
    /// Root hash at `tree_size`.
    pub root_hash: [u8; 32],
    /// Audit path, leaf-side first.
    pub hashes: Vec<[u8; 32]>,
    /// Signed-note checkpoint text.
    pub checkpoint: String,
}

/// A transparency log entry in the shape of a bundle's `tlogEntries[]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlogEntry {
    /// Global log index (`logIndex`).
    pub log_index: u64,
    /// Log ID (`logId.keyId`).
    pub log_id: [u8; 32],
    /// Entry kind, e.g. `hashedrekord`.
    pub kind: String,
    /// Entry version, e.g. `0.0.1`.
    pub version: String,
    /// Integrated time (Rekor v1 only).
    pub integrated_time: Option<i64>,
    /// Signed entry timestamp (Rekor v1 only).
    pub set: Option<Vec<u8>>,
    /// Inclusion proof.
    pub inclusion_proof: Option<InclusionProof>,
    /// The canonicalized body.
    pub body: Vec<u8>,
}

impl TlogEntry {
    /// The protobuf-JSON `TransparencyLogEntry`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "logIndex": self.log_index.to_string(),
            "logId": {"keyId": B64.encode(self.log_id)},
            "kindVersion": {"kind": self.kind, "version": self.version},
            "canonicalizedBody": B64.encode(&self.body),
        });
        if let Some(t) = self.integrated_time {
            crate::json::insert(&mut v, "integratedTime", json!(t.to_string()));
        }
        if let Some(set) = &self.set {
            crate::json::insert(
                &mut v,
                "inclusionPromise",
                json!({"signedEntryTimestamp": B64.encode(set)}),
            );
        }
        if let Some(p) = &self.inclusion_proof {
            crate::json::insert(
                &mut v,
                "inclusionProof",
                json!({
                    "logIndex": p.log_index.to_string(),
                    "rootHash": B64.encode(p.root_hash),
                    "treeSize": p.tree_size.to_string(),
                    "hashes": p.hashes.iter().map(|h| B64.encode(h)).collect::<Vec<_>>(),
                    "checkpoint": {"envelope": p.checkpoint},
                }),
            );
        }
        v
    }
}

/// Where an entry sits in a log's tree: `before` filler leaves precede it
/// and `after` follow it, so proofs have realistic, non-trivial paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeShape {
    /// Leaves before the entry (its tree index).
    pub before: u64,
    /// Leaves after the entry.
    pub after: u64,
}

impl Default for TreeShape {
    fn default() -> Self {
        TreeShape {
            before: 10,
            after: 3,
        }
    }
}

/// Computes (tree index, tree size, root, proof) for `body` placed per `shape`.
fn place(label: &str, body: &[u8], shape: TreeShape) -> (u64, u64, [u8; 32], Vec<[u8; 32]>) {
    let mut leaves: Vec<merkle::Hash> = Vec::new();
    for i in 0..shape.before {
        leaves.push(merkle::leaf_hash(format!("{label}/filler/{i}").as_bytes()));
    }
    leaves.push(merkle::leaf_hash(body));
    for i in 0..shape.after {
        leaves.push(merkle::leaf_hash(
            format!("{label}/filler/{}", shape.before + 1 + i).as_bytes(),
        ));
    }
    let idx = shape.before as usize;
    let proof = merkle::inclusion_proof(idx, &leaves);
    (
        shape.before,
        leaves.len() as u64,
        merkle::root(&leaves),
        proof,
    )
}

/// Host part of a URL (`https://host:port/path` → `host:port`).
pub fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// A Rekor v1-like log.
#[derive(Clone, Debug)]
pub struct RekorV1 {
    /// The log key (P-256).
    pub key: KeyPair,
    /// Base URL, as the trusted root lists it.
    pub base_url: String,
    /// The server's own hostname (Rekor's `rekor_server.hostname`), which
    /// names its checkpoints: the origin's first part and the signature
    /// line's key name. `None` uses the base URL's host, as the public-good
    /// instance is configured; private deployments leave Rekor's default,
    /// the pod name.
    pub hostname: Option<String>,
    /// Tree ID of the active shard (appears in the checkpoint origin).
    pub tree_id: u64,
    /// Global index of the active shard's first leaf (bundle `logIndex` = offset + tree index).
    pub index_offset: u64,
}

impl RekorV1 {
    /// A log whose key derives from `seed` and `label`.
    pub fn new(seed: u64, label: &str, base_url: &str) -> Self {
        RekorV1 {
            key: KeyPair::p256(seed, label),
            base_url: base_url.to_owned(),
            hostname: None,
            tree_id: 1_193_050_959_916_656_506 ^ seed,
            index_offset: 4_000_000,
        }
    }

    /// The same log, naming its checkpoints by `hostname` (e.g. a pod name).
    pub fn with_hostname(mut self, hostname: &str) -> Self {
        self.hostname = Some(hostname.to_owned());
        self
    }

    /// Log ID: SHA-256 of the DER SPKI.
    pub fn log_id(&self) -> [u8; 32] {
        self.key.spki_sha256()
    }

    /// The name the server signs checkpoints under.
    pub fn checkpoint_name(&self) -> &str {
        self.hostname
            .as_deref()
            .unwrap_or_else(|| url_host(&self.base_url))
    }

    /// Checkpoint origin, `<hostname> - <tree id>`.
    pub fn origin(&self) -> String {
        format!("{} - {}", self.checkpoint_name(), self.tree_id)
    }

    /// The canonical JSON the SET signs.
    pub fn set_payload(
        body: &[u8],
        integrated_time: i64,
        log_id: &[u8; 32],
        log_index: u64,
    ) -> String {
        canonical(&json!({
            "body": B64.encode(body),
            "integratedTime": integrated_time,
            "logID": hex::encode(log_id),
            "logIndex": log_index,
        }))
    }

    /// Signs a checkpoint body, returning the signature line (key hint = first 4 bytes of the log ID).
    pub fn sign_checkpoint(&self, body: &str) -> NoteSignature {
        let mut data = self.log_id().get(..4).unwrap_or(&[]).to_vec();
        data.extend(self.key.sign(body.as_bytes()));
        NoteSignature {
            name: self.checkpoint_name().to_owned(),
            data,
        }
    }

    /// Logs `body` (of `kind`/`version`) at `integrated_time`, with SET and checkpointed inclusion proof.
    pub fn log(
        &self,
        kind: &str,
        version: &str,
        body: Vec<u8>,
        integrated_time: i64,
        shape: TreeShape,
    ) -> TlogEntry {
        let (idx, size, root, hashes) = place(&format!("rekor-v1/{}", self.tree_id), &body, shape);
        let log_index = self.index_offset + idx;
        let set = self
            .key
            .sign(Self::set_payload(&body, integrated_time, &self.log_id(), log_index).as_bytes());
        let cp_body = checkpoint_body(&self.origin(), size, &root);
        let checkpoint = signed_note(&cp_body, &[self.sign_checkpoint(&cp_body)]);
        TlogEntry {
            log_index,
            log_id: self.log_id(),
            kind: kind.to_owned(),
            version: version.to_owned(),
            integrated_time: Some(integrated_time),
            set: Some(set),
            inclusion_proof: Some(InclusionProof {
                log_index: idx,
                tree_size: size,
                root_hash: root,
                hashes,
                checkpoint,
            }),
            body,
        }
    }
}

/// A Rekor v2-like (tile-based) log with an Ed25519 key.
#[derive(Clone, Debug)]
pub struct RekorV2 {
    /// The log key (Ed25519).
    pub key: KeyPair,
    /// Base URL; its host is the checkpoint origin and key name.
    pub base_url: String,
    /// Witnesses that cosign every checkpoint (none by default).
    pub witnesses: Vec<Witness>,
    /// Timestamp witnesses put in their cosignatures (Unix seconds).
    pub cosignature_time: u64,
}

impl RekorV2 {
    /// A log whose key derives from `seed` and `label`.
    pub fn new(seed: u64, label: &str, base_url: &str) -> Self {
        RekorV2 {
            key: KeyPair::ed25519(seed, label),
            base_url: base_url.to_owned(),
            witnesses: Vec::new(),
            cosignature_time: 1_760_000_000,
        }
    }

    /// Checkpoint origin: the host of the base URL.
    pub fn origin(&self) -> String {
        url_host(&self.base_url).to_owned()
    }

    /// C2SP key ID SHA-256(origin ‖ "\n" ‖ 0x01 ‖ key): the log ID in bundles and trusted roots.
    pub fn log_id(&self) -> [u8; 32] {
        c2sp_key_id(&self.origin(), 0x01, &self.key.public_key_raw())
    }

    /// Signs a checkpoint body (key hint = first 4 bytes of the key ID).
    pub fn sign_checkpoint(&self, body: &str) -> NoteSignature {
        let mut data = self.log_id().get(..4).unwrap_or(&[]).to_vec();
        data.extend(self.key.sign(body.as_bytes()));
        NoteSignature {
            name: self.origin(),
            data,
        }
    }

    /// Logs `body` with a checkpointed inclusion proof (no integrated time, no SET).
    pub fn log(&self, kind: &str, body: Vec<u8>, shape: TreeShape) -> TlogEntry {
        let (idx, size, root, hashes) = place(&format!("rekor-v2/{}", self.origin()), &body, shape);
        let cp_body = checkpoint_body(&self.origin(), size, &root);
        let mut sigs = vec![self.sign_checkpoint(&cp_body)];
        for w in &self.witnesses {
            sigs.push(w.cosign(&cp_body, self.cosignature_time));
        }
        TlogEntry {
            log_index: idx,
            log_id: self.log_id(),
            kind: kind.to_owned(),
            version: "0.0.2".to_owned(),
            integrated_time: None,
            set: None,
            inclusion_proof: Some(InclusionProof {
                log_index: idx,
                tree_size: size,
                root_hash: root,
                hashes,
                checkpoint: signed_note(&cp_body, &sigs),
            }),
            body,
        }
    }
}

/// A DSSE envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DsseEnvelope {
    /// `payloadType`.
    pub payload_type: String,
    /// Raw payload bytes.
    pub payload: Vec<u8>,
    /// Signatures (raw bytes; keyid empty for Sigstore).
    pub signatures: Vec<Vec<u8>>,
}

impl DsseEnvelope {
    /// The DSSE v1 pre-authentication encoding of a payload.
    pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
        let mut out = format!(
            "DSSEv1 {} {} {} ",
            payload_type.len(),
            payload_type,
            payload.len()
        )
        .into_bytes();
        out.extend_from_slice(payload);
        out
    }

    /// The bundle's `dsseEnvelope` JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "payload": B64.encode(&self.payload),
            "payloadType": self.payload_type,
            "signatures": self.signatures.iter().map(|s| json!({"sig": B64.encode(s)})).collect::<Vec<_>>(),
        })
    }

    /// The first signature (empty if there is none).
    pub fn first_signature(&self) -> &[u8] {
        self.signatures.first().map_or(&[][..], Vec::as_slice)
    }
}

/// The Rekor v2 `verifier` of a signature: a certificate or a public key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum V2Verifier {
    /// DER X.509 certificate.
    Certificate(Vec<u8>),
    /// DER SubjectPublicKeyInfo.
    PublicKey(Vec<u8>),
}

/// Canonicalized Rekor entry bodies, byte-for-byte as Rekor produces them.
pub mod body {
    use super::*;

    fn to_bytes(v: &Value) -> Vec<u8> {
        canonical(v).into_bytes()
    }

    /// hashedrekord 0.0.1: SHA-256 hex of the artifact, base64 signature, base64 of the verifier PEM.
    pub fn hashedrekord_v001(
        artifact_sha256: &[u8; 32],
        signature: &[u8],
        verifier_pem: &str,
    ) -> Vec<u8> {
        to_bytes(&json!({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hex::encode(artifact_sha256)}},
                "signature": {
                    "content": B64.encode(signature),
                    "publicKey": {"content": B64.encode(verifier_pem)},
                },
            },
        }))
    }

    /// dsse 0.0.1: envelope hash over the canonical envelope JSON (keyid omitted), payload hash, signatures with verifiers.
    pub fn dsse_v001(env: &DsseEnvelope, verifier_pem: &str) -> Vec<u8> {
        let envelope_hash = Sha256::digest(canonical(&env.to_json()));
        to_bytes(&json!({
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {"algorithm": "sha256", "value": hex::encode(envelope_hash)},
                "payloadHash": {"algorithm": "sha256", "value": hex::encode(Sha256::digest(&env.payload))},
                "signatures": env.signatures.iter().map(|s| json!({
                    "signature": B64.encode(s),
                    "verifier": B64.encode(verifier_pem),
                })).collect::<Vec<_>>(),
            },
        }))
    }

    /// intoto 0.0.2: the envelope with payload, signature and verifier PEM each base64'd once more,
    /// `hash` over the canonical envelope with the first signature's PEM as `publicKey`.
    pub fn intoto_v002(env: &DsseEnvelope, verifier_pem: &str) -> Vec<u8> {
        let sig_b64 = B64.encode(env.first_signature());
        let hashed = json!({
            "payload": B64.encode(&env.payload),
            "payloadType": env.payload_type,
            "signatures": [{"publicKey": verifier_pem, "sig": sig_b64}],
        });
        let envelope_hash = Sha256::digest(canonical(&hashed));
        to_bytes(&json!({
            "apiVersion": "0.0.2",
            "kind": "intoto",
            "spec": {"content": {
                "envelope": {
                    "payload": B64.encode(B64.encode(&env.payload)),
                    "payloadType": env.payload_type,
                    "signatures": env.signatures.iter().map(|s| json!({
                        "publicKey": B64.encode(verifier_pem),
                        "sig": B64.encode(B64.encode(s)),
                    })).collect::<Vec<_>>(),
                },
                "hash": {"algorithm": "sha256", "value": hex::encode(envelope_hash)},
                "payloadHash": {"algorithm": "sha256", "value": hex::encode(Sha256::digest(&env.payload))},
            }},
        }))
    }

    fn v2_verifier(verifier: &V2Verifier, key_details: &str) -> Value {
        match verifier {
            V2Verifier::Certificate(der) => json!({
                "keyDetails": key_details,
                "x509Certificate": {"rawBytes": B64.encode(der)},
            }),
            V2Verifier::PublicKey(spki) => json!({
                "keyDetails": key_details,
                "publicKey": {"rawBytes": B64.encode(spki)},
            }),
        }
    }

    /// hashedrekord 0.0.2 (Rekor v2): SHA-256 digest (of the artifact, or of the DSSE PAE), signature, verifier.
    pub fn hashedrekord_v002(
        digest: &[u8; 32],
        signature: &[u8],
        verifier: &V2Verifier,
        key_details: &str,
    ) -> Vec<u8> {
        to_bytes(&json!({
            "apiVersion": "0.0.2",
            "kind": "hashedrekord",
            "spec": {"hashedRekordV002": {
                "data": {"algorithm": "SHA2_256", "digest": B64.encode(digest)},
                "signature": {"content": B64.encode(signature), "verifier": v2_verifier(verifier, key_details)},
            }},
        }))
    }

    /// dsse 0.0.2 (Rekor v2): payload hash and signatures with verifiers.
    pub fn dsse_v002(env: &DsseEnvelope, verifier: &V2Verifier, key_details: &str) -> Vec<u8> {
        to_bytes(&json!({
            "apiVersion": "0.0.2",
            "kind": "dsse",
            "spec": {"dsseV002": {
                "payloadHash": {"algorithm": "SHA2_256", "digest": B64.encode(Sha256::digest(&env.payload))},
                "signatures": env.signatures.iter().map(|s| json!({
                    "content": B64.encode(s),
                    "verifier": v2_verifier(verifier, key_details),
                })).collect::<Vec<_>>(),
            }},
        }))
    }
}
