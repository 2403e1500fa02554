//! How a [`PolicySnapshot`] is stored in Secrets: gzip-compressed, split
//! into chunks of at most [`CHUNK_BYTES`], and described by a manifest.
//!
//! Why this shape: a Secret holds at most 1 MiB (and etcd refuses requests
//! over about 1.5 MiB), and plain JSON passes that at about 1,800 mixed
//! policies (`tests/snapshot_scale.rs`). Compressed, the snapshot is 4-6
//! times smaller; beyond one Secret it spills over a fixed set of shard
//! Secrets whose names follow from the main Secret's, so the chart can grant
//! them by `resourceNames`.
//!
//! - The main Secret ([`SECRET_NAME`](super::SECRET_NAME)) holds the
//!   [`MANIFEST_KEY`] (revision, decoded length, each chunk's Secret, length
//!   and sha256) and the first chunk under [`CHUNK_KEY`]; up to about 9,000
//!   mixed policies (`tests/snapshot_scale.rs`) need nothing else, and then
//!   one write publishes a revision whole, as before.
//! - Further chunks go to shard Secrets `<main>-a1` … `<main>-a7` for odd
//!   revisions and `<main>-b1` … `<main>-b7` for even ones, written before
//!   the manifest, which is written last. The shards the manifest in force
//!   names are never rewritten by the next revision, so a reader, or the
//!   controller after a crash between the two writes, always finds the
//!   manifest in force whole.
//! - A reader checks each chunk's length and digest; a chunk missing or
//!   changed makes the read fail, and the reader keeps what it had.
//! - The old format (plain JSON under [`SECRET_KEY`](super::SECRET_KEY)) is
//!   still read, so a new reader works against an older controller.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{Read as _, Write as _};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::{MAX_BYTES, PolicySnapshot, SECRET_KEY, SnapshotError};

/// `apiVersion` of the manifest.
pub const MANIFEST_API_VERSION: &str = "policy.sigil.dev/snapshot-manifest/v1";
/// Data key of the manifest in the main Secret.
pub const MANIFEST_KEY: &str = "manifest.json";
/// Data key of a chunk of the compressed snapshot, in the main Secret and in
/// each shard Secret.
pub const CHUNK_KEY: &str = "snapshot.json.gz";
/// Largest chunk in one Secret: under a Secret's 1 MiB with room for the
/// manifest and metadata, and far under etcd's 1.5 MiB request limit once
/// the API server has encoded it.
pub const CHUNK_BYTES: usize = 900 * 1024;
/// Shard Secrets per set; with the main Secret's chunk, a snapshot is at
/// most `1 + SHARDS_PER_SET` chunks.
pub const SHARDS_PER_SET: usize = 7;
/// Largest compressed snapshot that can be stored.
pub const MAX_STORED_BYTES: usize = CHUNK_BYTES * (1 + SHARDS_PER_SET);
/// Largest decoded snapshot accepted: bounds what a reader inflates (a small
/// gzip can expand to gigabytes) and what the webhook parses and compiles,
/// about 55,000 mixed policies, well inside the webhook's memory limit.
pub const MAX_DECODED_BYTES: usize = 32 * 1024 * 1024;
/// The only encoding written.
const GZIP: &str = "gzip";

/// What the main Secret says about a stored revision.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always [`MANIFEST_API_VERSION`].
    pub api_version: String,
    /// The snapshot's revision.
    pub revision: u64,
    /// `gzip`.
    pub encoding: String,
    /// Length of the decoded JSON.
    pub decoded_length: u64,
    /// The compressed snapshot's chunks, in order; the first is in the main
    /// Secret.
    pub chunks: Vec<Chunk>,
}

/// One chunk of the compressed snapshot.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Chunk {
    /// The Secret holding it under [`CHUNK_KEY`].
    pub secret: String,
    /// Its length in bytes.
    pub length: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
}

/// The Secrets' data for one revision, in the order to write them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The revision.
    pub revision: u64,
    /// Shard Secrets' names and their [`CHUNK_KEY`] values, written first.
    pub shards: Vec<(String, Vec<u8>)>,
    /// The main Secret's data ([`MANIFEST_KEY`] and [`CHUNK_KEY`]), written
    /// last.
    pub main: BTreeMap<String, Vec<u8>>,
    /// Length of the JSON.
    pub decoded_bytes: usize,
    /// Length of the compressed JSON over all chunks.
    pub stored_bytes: usize,
}

/// The shard Secret names of the set a revision writes to.
pub fn shard_set(main: &str, revision: u64) -> Vec<String> {
    let set = if revision % 2 == 1 { 'a' } else { 'b' };
    (1..=SHARDS_PER_SET)
        .map(|i| format!("{main}-{set}{i}"))
        .collect()
}

/// Every shard Secret name a main Secret may use (both sets), as the chart
/// grants them.
pub fn all_shards(main: &str) -> Vec<String> {
    let mut names = shard_set(main, 1);
    names.extend(shard_set(main, 2));
    names
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Compresses and splits `snapshot` for storage under main Secret `main`.
/// Refuses a snapshot larger than [`MAX_DECODED_BYTES`] decoded or
/// [`MAX_STORED_BYTES`] compressed: nothing of it is written then, so the
/// revision in force stays whole.
pub fn encode(snapshot: &PolicySnapshot, main: &str) -> Result<Encoded, SnapshotError> {
    let json = snapshot.to_json();
    if json.len() > MAX_DECODED_BYTES {
        return Err(SnapshotError::TooLarge(json.len()));
    }
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(json.len() / 4),
        flate2::Compression::default(),
    );
    // Writing into a Vec cannot fail.
    let compressed = encoder
        .write_all(json.as_bytes())
        .and_then(|()| encoder.finish())
        .map_err(|e| SnapshotError::Gzip(e.to_string()))?;
    if compressed.len() > MAX_STORED_BYTES {
        return Err(SnapshotError::StoredTooLarge {
            decoded: json.len(),
            stored: compressed.len(),
        });
    }
    let mut pieces = compressed.chunks(CHUNK_BYTES);
    let first = pieces.next().unwrap_or_default();
    let mut chunks = vec![Chunk {
        secret: main.to_owned(),
        length: first.len() as u64,
        sha256: sha256_hex(first),
    }];
    let mut shards = Vec::new();
    for (name, piece) in shard_set(main, snapshot.revision).into_iter().zip(pieces) {
        chunks.push(Chunk {
            secret: name.clone(),
            length: piece.len() as u64,
            sha256: sha256_hex(piece),
        });
        shards.push((name, piece.to_vec()));
    }
    let manifest = Manifest {
        api_version: MANIFEST_API_VERSION.to_owned(),
        revision: snapshot.revision,
        encoding: GZIP.to_owned(),
        decoded_length: json.len() as u64,
        chunks,
    };
    // Serializing plain structs of strings and integers cannot fail.
    let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
    Ok(Encoded {
        revision: snapshot.revision,
        shards,
        main: [
            (MANIFEST_KEY.to_owned(), manifest),
            (CHUNK_KEY.to_owned(), first.to_vec()),
        ]
        .into(),
        decoded_bytes: json.len(),
        stored_bytes: compressed.len(),
    })
}

/// What the main Secret holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored<'a> {
    /// The old format: the snapshot as plain JSON.
    Plain(&'a [u8]),
    /// A manifest and the first chunk.
    Manifest {
        /// The manifest.
        manifest: Manifest,
        /// The chunk in the main Secret.
        first: &'a [u8],
    },
}

impl<'a> Stored<'a> {
    /// Reads the main Secret `main`'s data (`get` gives the value of a data
    /// key). A manifest wins over plain JSON.
    pub fn read(main: &str, get: impl Fn(&str) -> Option<&'a [u8]>) -> Result<Self, SnapshotError> {
        let Some(manifest) = get(MANIFEST_KEY) else {
            return get(SECRET_KEY)
                .map(Stored::Plain)
                .ok_or(SnapshotError::NoData);
        };
        if manifest.len() > MAX_BYTES {
            return Err(SnapshotError::Manifest(format!(
                "{} bytes, more than a Secret holds",
                manifest.len()
            )));
        }
        let manifest: Manifest =
            serde_json::from_slice(manifest).map_err(|e| SnapshotError::Manifest(e.to_string()))?;
        manifest.check(main)?;
        let first = get(CHUNK_KEY).ok_or_else(|| SnapshotError::Chunk {
            secret: main.to_owned(),
            problem: "missing".into(),
        })?;
        Ok(Stored::Manifest { manifest, first })
    }
}

impl Manifest {
    /// Refuses a manifest this reader cannot follow: another version or
    /// encoding, lengths over the bounds, or chunks in Secrets other than
    /// the ones the chart grants (the main one, then one set's shards in
    /// order).
    fn check(&self, main: &str) -> Result<(), SnapshotError> {
        let bad = |why: String| Err(SnapshotError::Manifest(why));
        if self.api_version != MANIFEST_API_VERSION {
            return bad(format!(
                "apiVersion `{}`, expected `{MANIFEST_API_VERSION}`; run a webhook and controller of the same release",
                self.api_version
            ));
        }
        if self.encoding != GZIP {
            return bad(format!("encoding `{}`, expected `{GZIP}`", self.encoding));
        }
        if self.decoded_length > MAX_DECODED_BYTES as u64 {
            return Err(SnapshotError::TooLarge(
                usize::try_from(self.decoded_length).unwrap_or(usize::MAX),
            ));
        }
        let expected = std::iter::once(main.to_owned()).chain(shard_set(main, self.revision));
        if self.chunks.is_empty() || self.chunks.len() > 1 + SHARDS_PER_SET {
            return bad(format!("{} chunks", self.chunks.len()));
        }
        for (chunk, want) in self.chunks.iter().zip(expected) {
            if chunk.secret != want {
                return bad(format!(
                    "chunk in Secret `{}` where `{want}` was expected",
                    chunk.secret
                ));
            }
            if chunk.length > CHUNK_BYTES as u64 {
                return bad(format!(
                    "chunk in `{}` of {} bytes",
                    chunk.secret, chunk.length
                ));
            }
        }
        Ok(())
    }

    /// The shard Secrets to read, after the main one.
    pub fn shards(&self) -> impl Iterator<Item = &str> {
        self.chunks.iter().skip(1).map(|c| c.secret.as_str())
    }

    /// Checks the chunks (the main Secret's, then each shard's, `None` for a
    /// Secret or key that is missing) against the manifest and decodes the
    /// snapshot, bounded by the manifest's decoded length.
    pub fn assemble(
        &self,
        first: &[u8],
        shards: &[Option<Vec<u8>>],
    ) -> Result<PolicySnapshot, SnapshotError> {
        let pieces = std::iter::once(Some(first)).chain(shards.iter().map(|s| s.as_deref()));
        let mut compressed = Vec::new();
        for (chunk, piece) in self.chunks.iter().zip(pieces) {
            let problem = |p: &str| SnapshotError::Chunk {
                secret: chunk.secret.clone(),
                problem: p.to_owned(),
            };
            let piece = piece.ok_or_else(|| problem("missing"))?;
            if piece.len() as u64 != chunk.length || sha256_hex(piece) != chunk.sha256 {
                return Err(problem(
                    "does not match the manifest's length and sha256 (written for another revision)",
                ));
            }
            compressed.extend_from_slice(piece);
        }
        if shards.len() + 1 < self.chunks.len() {
            return Err(SnapshotError::Chunk {
                secret: self
                    .chunks
                    .last()
                    .map(|c| c.secret.clone())
                    .unwrap_or_default(),
                problem: "missing".into(),
            });
        }
        let limit = self.decoded_length.min(MAX_DECODED_BYTES as u64);
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(compressed.as_slice())
            .take(limit + 1)
            .read_to_end(&mut json)
            .map_err(|e| SnapshotError::Gzip(e.to_string()))?;
        if json.len() as u64 != self.decoded_length {
            return Err(SnapshotError::Gzip(if json.len() as u64 > limit {
                format!(
                    "it inflates past the {} bytes the manifest says",
                    self.decoded_length
                )
            } else {
                format!(
                    "it inflates to {} bytes where the manifest says {}",
                    json.len(),
                    self.decoded_length
                )
            }));
        }
        let snapshot = PolicySnapshot::from_slice(&json)?;
        if snapshot.revision != self.revision {
            return Err(SnapshotError::Manifest(format!(
                "names revision {} but the snapshot is revision {}",
                self.revision, snapshot.revision
            )));
        }
        Ok(snapshot)
    }
}

/// Reads the snapshot stored under main Secret `main`, whose data `get`
/// gives; `fetch(name)` reads shard Secret `name`'s [`CHUNK_KEY`] (`Ok(None)`
/// when the Secret or key is missing, `Err` with the reason when it could
/// not be read, which fails the load with the transient
/// [`SnapshotError::Unreadable`]). Every reader goes through here.
pub async fn load<'a, F, Fut>(
    main: &str,
    get: impl Fn(&str) -> Option<&'a [u8]>,
    mut fetch: F,
) -> Result<PolicySnapshot, SnapshotError>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<Option<Vec<u8>>, String>>,
{
    match Stored::read(main, get)? {
        Stored::Plain(bytes) => PolicySnapshot::from_slice(bytes),
        Stored::Manifest { manifest, first } => {
            let mut shards = Vec::new();
            for name in manifest.shards() {
                let piece =
                    fetch(name.to_owned())
                        .await
                        .map_err(|reason| SnapshotError::Unreadable {
                            secret: name.to_owned(),
                            reason,
                        })?;
                shards.push(piece);
            }
            manifest.assemble(first, &shards)
        }
    }
}

#[cfg(test)]
mod tests;
