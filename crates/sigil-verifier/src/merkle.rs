//! RFC 9162 Merkle tree hashing and inclusion-proof verification (§2.1.1 and
//! §2.1.3.2), the proof that a Rekor entry is a leaf of a signed tree.
//!
//! Only SHA-256 trees exist in Sigstore, so the hash is fixed here rather than
//! threaded through every call.

/// Why an inclusion proof was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MerkleError {
    /// The leaf index is not inside the tree.
    #[error(
        "inclusion proof leaf index {index} is outside a tree of size {tree_size}; the proof does not belong to this entry"
    )]
    IndexOutOfRange {
        /// The claimed leaf index.
        index: u64,
        /// The claimed tree size.
        tree_size: u64,
    },
    /// The audit path has the wrong number of hashes for this index and size.
    #[error(
        "inclusion proof has {got} hashes but a leaf at index {index} of a tree of size {tree_size} needs {expected}; the proof is truncated or padded"
    )]
    WrongProofLength {
        /// Hashes the proof carries.
        got: usize,
        /// Hashes RFC 9162 requires.
        expected: usize,
        /// The claimed leaf index.
        index: u64,
        /// The claimed tree size.
        tree_size: u64,
    },
    /// A proof hash or the root hash is not 32 bytes.
    #[error("inclusion proof {what} is {len} bytes, expected a 32-byte SHA-256 hash")]
    BadHashLength {
        /// Which hash (`root hash`, `hash[3]`).
        what: String,
        /// Its length.
        len: usize,
    },
    /// The audit path leads to a different root than the one claimed.
    #[error(
        "inclusion proof does not lead to the claimed root hash (computed {computed}, claimed {claimed}); the entry or proof was altered"
    )]
    RootMismatch {
        /// Hex of the root the proof computes.
        computed: String,
        /// Hex of the root the bundle claims.
        claimed: String,
    },
}

/// RFC 9162 leaf hash: SHA-256(0x00 ‖ leaf).
pub fn leaf_hash(leaf: &[u8]) -> [u8; 32] {
    crate::crypto::sha256_parts(&[&[0x00], leaf])
}

/// RFC 9162 interior node hash: SHA-256(0x01 ‖ left ‖ right).
pub fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    // One-shot over a stack buffer: a proof hashes dozens of nodes, and a
    // streaming context costs an allocation each.
    let mut buf = [0x01u8; 65];
    for (dst, src) in buf.iter_mut().skip(1).zip(left.iter().chain(right)) {
        *dst = *src;
    }
    crate::crypto::sha256(&buf)
}

/// The number of audit-path hashes a leaf at `index` of a tree of `tree_size`
/// leaves has: the levels where the paths to `index` and to the last leaf
/// differ, plus the right-border levels above them where `index` is a right child.
fn expected_proof_len(index: u64, tree_size: u64) -> usize {
    let last = tree_size.saturating_sub(1);
    let inner = 64 - (index ^ last).leading_zeros();
    let border = index.checked_shr(inner).unwrap_or(0).count_ones();
    (inner + border) as usize
}

fn to_array(what: impl FnOnce() -> String, bytes: &[u8]) -> Result<[u8; 32], MerkleError> {
    <[u8; 32]>::try_from(bytes).map_err(|_| MerkleError::BadHashLength {
        what: what(),
        len: bytes.len(),
    })
}

/// Verifies that `leaf_hash` is the leaf at `index` of the tree of `tree_size`
/// leaves whose root is `root`, using the audit path `proof` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(
    leaf_hash: &[u8; 32],
    index: u64,
    tree_size: u64,
    proof: &[Vec<u8>],
    root: &[u8],
) -> Result<(), MerkleError> {
    if index >= tree_size {
        return Err(MerkleError::IndexOutOfRange { index, tree_size });
    }
    let claimed = to_array(|| "root hash".to_owned(), root)?;
    let expected = expected_proof_len(index, tree_size);
    if proof.len() != expected {
        return Err(MerkleError::WrongProofLength {
            got: proof.len(),
            expected,
            index,
            tree_size,
        });
    }

    let mut fnode = index;
    let mut snode = tree_size - 1;
    let mut r = *leaf_hash;
    for (i, p) in proof.iter().enumerate() {
        let p = to_array(|| format!("hash[{i}]"), p)?;
        // The length check above guarantees snode stays positive here; keep the
        // RFC's guard anyway so a logic slip can never accept a long proof.
        if snode == 0 {
            return Err(MerkleError::WrongProofLength {
                got: proof.len(),
                expected,
                index,
                tree_size,
            });
        }
        if fnode & 1 == 1 || fnode == snode {
            r = node_hash(&p, &r);
            if fnode & 1 == 0 {
                while fnode & 1 == 0 && fnode != 0 {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            r = node_hash(&r, &p);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    if snode != 0 || r != claimed {
        return Err(MerkleError::RootMismatch {
            computed: hex::encode(r),
            claimed: hex::encode(claimed),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9162 §2.1.1 Merkle Tree Hash, computed directly from the leaves.
    fn mth(leaves: &[[u8; 32]]) -> [u8; 32] {
        match leaves.len() {
            0 => crate::crypto::sha256(&[]),
            1 => leaves[0],
            n => {
                let k = largest_pow2_below(n);
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    fn largest_pow2_below(n: usize) -> usize {
        let mut k = 1;
        while k * 2 < n {
            k *= 2;
        }
        k
    }

    /// RFC 9162 §2.1.3.1 PATH(m, D[n]).
    fn path(m: usize, leaves: &[[u8; 32]]) -> Vec<Vec<u8>> {
        let n = leaves.len();
        if n <= 1 {
            return Vec::new();
        }
        let k = largest_pow2_below(n);
        if m < k {
            let mut p = path(m, &leaves[..k]);
            p.push(mth(&leaves[k..]).to_vec());
            p
        } else {
            let mut p = path(m - k, &leaves[k..]);
            p.push(mth(&leaves[..k]).to_vec());
            p
        }
    }

    fn tree(n: usize) -> Vec<[u8; 32]> {
        (0..n)
            .map(|i| leaf_hash(format!("leaf {i}").as_bytes()))
            .collect()
    }

    #[test]
    fn every_leaf_of_trees_up_to_40_verifies() {
        for n in 1..=40usize {
            let leaves = tree(n);
            let root = mth(&leaves);
            for (m, leaf) in leaves.iter().enumerate() {
                let p = path(m, &leaves);
                assert_eq!(
                    p.len(),
                    expected_proof_len(m as u64, n as u64),
                    "n={n} m={m}"
                );
                verify_inclusion(leaf, m as u64, n as u64, &p, &root)
                    .unwrap_or_else(|e| panic!("n={n} m={m}: {e}"));
            }
        }
    }

    #[test]
    fn a_tree_of_one_leaf_has_an_empty_proof_and_the_leaf_as_root() {
        let leaves = tree(1);
        verify_inclusion(&leaves[0], 0, 1, &[], &leaves[0]).unwrap();
        let other = leaf_hash(b"other");
        assert!(matches!(
            verify_inclusion(&other, 0, 1, &[], &leaves[0]),
            Err(MerkleError::RootMismatch { .. })
        ));
    }

    #[test]
    fn first_and_last_leaf_verify_and_swapping_them_fails() {
        let leaves = tree(7);
        let root = mth(&leaves);
        verify_inclusion(&leaves[0], 0, 7, &path(0, &leaves), &root).unwrap();
        verify_inclusion(&leaves[6], 6, 7, &path(6, &leaves), &root).unwrap();
        assert!(verify_inclusion(&leaves[6], 0, 7, &path(0, &leaves), &root).is_err());
    }

    #[test]
    fn index_at_or_beyond_the_tree_size_is_rejected() {
        let leaves = tree(4);
        let root = mth(&leaves);
        assert!(matches!(
            verify_inclusion(&leaves[0], 4, 4, &path(0, &leaves), &root),
            Err(MerkleError::IndexOutOfRange { .. })
        ));
        assert!(matches!(
            verify_inclusion(&leaves[0], 0, 0, &[], &root),
            Err(MerkleError::IndexOutOfRange { .. })
        ));
    }

    #[test]
    fn proofs_of_the_wrong_length_are_rejected() {
        let leaves = tree(6);
        let root = mth(&leaves);
        let mut long = path(2, &leaves);
        long.push(vec![0; 32]);
        assert!(matches!(
            verify_inclusion(&leaves[2], 2, 6, &long, &root),
            Err(MerkleError::WrongProofLength { .. })
        ));
        let short = path(2, &leaves)[1..].to_vec();
        assert!(matches!(
            verify_inclusion(&leaves[2], 2, 6, &short, &root),
            Err(MerkleError::WrongProofLength { .. })
        ));
    }

    #[test]
    fn a_flipped_bit_anywhere_fails() {
        let leaves = tree(13);
        let root = mth(&leaves);
        let p = path(9, &leaves);
        for i in 0..p.len() {
            let mut bad = p.clone();
            bad[i][0] ^= 1;
            assert!(verify_inclusion(&leaves[9], 9, 13, &bad, &root).is_err());
        }
        let mut bad_root = root;
        bad_root[31] ^= 0x80;
        assert!(verify_inclusion(&leaves[9], 9, 13, &p, &bad_root).is_err());
        // A different tree size changes the path's shape (here: its length).
        assert!(verify_inclusion(&leaves[9], 9, 10, &p, &root).is_err());
    }

    #[test]
    fn hashes_of_the_wrong_size_are_errors_not_panics() {
        let leaves = tree(2);
        let root = mth(&leaves);
        assert!(matches!(
            verify_inclusion(&leaves[0], 0, 2, &[vec![0; 31]], &root),
            Err(MerkleError::BadHashLength { .. })
        ));
        assert!(matches!(
            verify_inclusion(&leaves[0], 0, 2, &path(0, &leaves), &root[..16]),
            Err(MerkleError::BadHashLength { .. })
        ));
    }

    #[test]
    fn huge_tree_sizes_do_not_overflow() {
        let leaf = leaf_hash(b"x");
        let r = verify_inclusion(&leaf, u64::MAX - 1, u64::MAX, &[], &[0; 32]);
        assert!(matches!(r, Err(MerkleError::WrongProofLength { .. })));
    }
}
