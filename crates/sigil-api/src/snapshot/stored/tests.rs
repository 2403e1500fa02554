#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;

use super::*;
use crate::snapshot::SnapshotTrustRoot;

const MAIN: &str = "sigil-policy-snapshot";

/// A snapshot whose trust roots are `kib` KiB of incompressible text each.
fn snapshot(revision: u64, roots: usize, kib: usize) -> PolicySnapshot {
    let mut state = revision.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut noise = |len: usize| -> String {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b'A' + u8::try_from(state % 26).unwrap())
            })
            .collect()
    };
    PolicySnapshot {
        revision,
        generated_at: "2026-12-03T00:00:00Z".into(),
        policies: vec![crate::snapshot::tests::policy_p()],
        trust_roots: (0..roots)
            .map(|i| SnapshotTrustRoot {
                name: format!("root-{i}"),
                generation: 1,
                trusted_root_json: noise(kib * 1024),
                default: false,
            })
            .collect(),
        ..PolicySnapshot::empty()
    }
}

/// The Secrets an [`Encoded`] writes, by name and data key.
type Store = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

fn store(encoded: &Encoded) -> Store {
    let mut store = Store::new();
    for (name, chunk) in &encoded.shards {
        store.insert(name.clone(), [(CHUNK_KEY.to_owned(), chunk.clone())].into());
    }
    store.insert(MAIN.to_owned(), encoded.main.clone());
    store
}

async fn read(store: &Store) -> Result<PolicySnapshot, SnapshotError> {
    let main = &store[MAIN];
    load(
        MAIN,
        |key| main.get(key).map(Vec::as_slice),
        |name| {
            let chunk = store.get(&name).and_then(|d| d.get(CHUNK_KEY)).cloned();
            async move { Ok(chunk) }
        },
    )
    .await
}

#[tokio::test]
async fn a_small_snapshot_is_one_secret_and_round_trips() {
    let s = snapshot(3, 1, 4);
    let encoded = encode(&s, MAIN).unwrap();
    assert!(encoded.shards.is_empty());
    assert!(encoded.stored_bytes < encoded.decoded_bytes);
    assert_eq!(read(&store(&encoded)).await.unwrap(), s);
}

#[tokio::test]
async fn a_large_snapshot_spills_over_shards_of_its_revisions_set_and_round_trips() {
    // 3.75 MiB of text that gzip takes to about 2.2 MiB: three chunks.
    let odd = snapshot(5, 5, 768);
    let encoded = encode(&odd, MAIN).unwrap();
    let names: Vec<&str> = encoded.shards.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, [format!("{MAIN}-a1"), format!("{MAIN}-a2")]);
    assert!(encoded.main[CHUNK_KEY].len() <= CHUNK_BYTES);
    assert_eq!(read(&store(&encoded)).await.unwrap(), odd);

    let even = snapshot(6, 5, 768);
    let encoded = encode(&even, MAIN).unwrap();
    assert!(
        encoded
            .shards
            .iter()
            .all(|(n, _)| n.starts_with(&format!("{MAIN}-b")))
    );
    assert_eq!(read(&store(&encoded)).await.unwrap(), even);
}

#[tokio::test]
async fn the_old_plain_json_format_is_still_read() {
    let s = snapshot(7, 1, 1);
    let store: Store = [(
        MAIN.to_owned(),
        [(SECRET_KEY.to_owned(), s.to_json().into_bytes())].into(),
    )]
    .into();
    assert_eq!(read(&store).await.unwrap(), s);
}

#[tokio::test]
async fn a_missing_shard_fails_the_read_naming_it() {
    let encoded = encode(&snapshot(5, 5, 768), MAIN).unwrap();
    let mut store = store(&encoded);
    store.remove(&format!("{MAIN}-a2"));
    match read(&store).await {
        Err(SnapshotError::Chunk { secret, problem }) => {
            assert_eq!(secret, format!("{MAIN}-a2"));
            assert_eq!(problem, "missing");
        }
        other => panic!("{:?}", other.map(|s| s.revision)),
    }
}

#[tokio::test]
async fn a_shard_that_cannot_be_read_fails_the_read_as_transient_and_a_missing_one_does_not() {
    let encoded = encode(&snapshot(5, 5, 768), MAIN).unwrap();
    let store = store(&encoded);
    let main = &store[MAIN];
    let err = load(
        MAIN,
        |key| main.get(key).map(Vec::as_slice),
        |name| {
            let chunk = store.get(&name).and_then(|d| d.get(CHUNK_KEY)).cloned();
            async move {
                if name.ends_with("-a2") {
                    Err("503 Service Unavailable".to_owned())
                } else {
                    Ok(chunk)
                }
            }
        },
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        SnapshotError::Unreadable {
            secret: format!("{MAIN}-a2"),
            reason: "503 Service Unavailable".into(),
        }
    );
    assert!(err.is_transient());

    let mut missing = store.clone();
    missing.remove(&format!("{MAIN}-a2"));
    assert!(!read(&missing).await.unwrap_err().is_transient());
}

#[tokio::test]
async fn a_shard_of_another_revision_fails_the_read() {
    // Revisions 5 and 7 both write set `a`: a reader holding 5's manifest
    // that finds 7's shards must not decode a mix.
    let five = encode(&snapshot(5, 5, 768), MAIN).unwrap();
    let seven = encode(&snapshot(7, 5, 768), MAIN).unwrap();
    let mut store = store(&five);
    store.insert(
        format!("{MAIN}-a1"),
        [(CHUNK_KEY.to_owned(), seven.shards[0].1.clone())].into(),
    );
    let err = read(&store).await.unwrap_err();
    assert!(
        matches!(&err, SnapshotError::Chunk { secret, .. } if secret == &format!("{MAIN}-a1")),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("last good snapshot stays"),
        "{err}"
    );
}

#[test]
fn a_snapshot_larger_than_every_secret_together_is_refused_whole() {
    // 16 MiB of text, about 9.5 MiB compressed: more than 8 chunks.
    match encode(&snapshot(9, 16, 1024), MAIN) {
        Err(e @ SnapshotError::StoredTooLarge { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&MAX_STORED_BYTES.to_string()), "{message}");
            assert!(
                message.contains("previous revision stays in force"),
                "{message}"
            );
        }
        other => panic!("{:?}", other.map(|s| s.revision)),
    }
}

#[test]
fn a_snapshot_over_the_decoded_bound_is_refused_before_compression() {
    let mut s = snapshot(9, 0, 0);
    s.generated_at = " ".repeat(MAX_DECODED_BYTES);
    assert!(matches!(encode(&s, MAIN), Err(SnapshotError::TooLarge(_))));
}

/// A manifest over `compressed`, as a hostile or broken writer could make.
fn forged(compressed: &[u8], decoded_length: u64) -> Store {
    let manifest = Manifest {
        api_version: MANIFEST_API_VERSION.into(),
        revision: 1,
        encoding: "gzip".into(),
        decoded_length,
        chunks: vec![Chunk {
            secret: MAIN.into(),
            length: compressed.len() as u64,
            sha256: sha256_hex(compressed),
        }],
    };
    [(
        MAIN.to_owned(),
        [
            (
                MANIFEST_KEY.to_owned(),
                serde_json::to_vec(&manifest).unwrap(),
            ),
            (CHUNK_KEY.to_owned(), compressed.to_vec()),
        ]
        .into(),
    )]
    .into()
}

#[tokio::test]
async fn decompression_stops_at_the_decoded_bound() {
    // 64 MiB of zeros is about 64 KiB of gzip: a bomb for a reader that
    // inflates without a bound.
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        encoder.write_all(&zeros).unwrap();
    }
    let bomb = encoder.finish().unwrap();
    assert!(bomb.len() < CHUNK_BYTES);
    // Claiming its true size is refused from the manifest alone.
    assert!(matches!(
        read(&forged(&bomb, 64 << 20)).await,
        Err(SnapshotError::TooLarge(_))
    ));
    // Claiming less stops inflating just past the claim.
    match read(&forged(&bomb, 1000)).await {
        Err(SnapshotError::Gzip(message)) => {
            assert!(message.contains("past the 1000 bytes"), "{message}");
        }
        other => panic!("{:?}", other.map(|s| s.revision)),
    }
}

#[tokio::test]
async fn a_manifest_naming_other_secrets_is_refused() {
    let encoded = encode(&snapshot(5, 5, 768), MAIN).unwrap();
    let mut store = store(&encoded);
    let main = store.get_mut(MAIN).unwrap();
    let mut manifest: Manifest = serde_json::from_slice(&main[MANIFEST_KEY]).unwrap();
    manifest.chunks[1].secret = "some-other-secret".into();
    main.insert(MANIFEST_KEY.into(), serde_json::to_vec(&manifest).unwrap());
    assert!(matches!(
        read(&store).await,
        Err(SnapshotError::Manifest(_))
    ));
}

#[test]
fn the_chart_grants_fourteen_shard_names() {
    let names = all_shards(MAIN);
    assert_eq!(names.len(), 2 * SHARDS_PER_SET);
    assert_eq!(names[0], format!("{MAIN}-a1"));
    assert_eq!(names[13], format!("{MAIN}-b7"));
}
