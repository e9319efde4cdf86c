//! The transparency log: an RFC 6962 Merkle tree over receipt digests.
//!
//! Every signed receipt's 32-byte digest is appended as one leaf. Hashing is RFC 6962 §2.1 with
//! SHA-256: leaf hash = SHA-256(0x00 || digest), node hash = SHA-256(0x01 || left || right),
//! the root of the empty log is SHA-256(""). Inclusion proofs (a receipt is in the log) and
//! consistency proofs (a later log extends an earlier one, nothing removed or changed) are the
//! RFC 6962 audit paths, each node written as 64 lowercase hex characters.
//!
//! Roots come from the log's right edge ([`Frontier`]): one pass over the leaves, O(log n)
//! memory, and every prefix's root along the way. Proofs rebuild the tree in memory from the
//! stored leaf digests: O(n) time and memory per proof, 32 bytes per receipt plus the internal
//! nodes, fine for the volume of deletion receipts (thousands, not billions).

use ct_merkle::mem_backed_tree::MemoryBackedTree;
use ct_merkle::{ConsistencyProof, InclusionProof, RootHash};
use sha2_ct::Sha256;

mod frontier;
pub use frontier::Frontier;

/// A log digest as ct-merkle holds it.
type Node = ct_merkle::digest::Output<Sha256>;

/// The largest tree size accepted when verifying. ct-merkle's index arithmetic overflows (and
/// panics) near 2^63 leaves; a certificate is untrusted input, so sizes are bounded well below.
pub const MAX_TREE_SIZE: u64 = 1 << 62;

/// Refuses tree sizes beyond [`MAX_TREE_SIZE`].
fn bounded(size: u64) -> Result<u64, MerkleError> {
    if size > MAX_TREE_SIZE {
        return Err(MerkleError::TreeTooLarge { size });
    }
    Ok(size)
}

/// What is wrong with a log request or a proof.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MerkleError {
    /// A tree size larger than the log.
    #[error("tree size {size} is larger than the log ({log_size} receipts)")]
    BeyondLog {
        /// Requested size.
        size: u64,
        /// Leaves available.
        log_size: u64,
    },
    /// A tree size beyond [`MAX_TREE_SIZE`].
    #[error("tree size {size} is beyond any real log (at most 2^62 receipts)")]
    TreeTooLarge {
        /// The size given.
        size: u64,
    },
    /// An index outside the tree.
    #[error("leaf index {index} is not in a tree of {tree_size} receipts")]
    IndexOutOfRange {
        /// The leaf index.
        index: u64,
        /// The tree size.
        tree_size: u64,
    },
    /// An older size larger than the newer one.
    #[error(
        "the older tree size {old_size} is larger than the newer size {new_size}: a log never shrinks"
    )]
    OldLargerThanNew {
        /// Older size.
        old_size: u64,
        /// Newer size.
        new_size: u64,
    },
    /// A hash that is not 64 lowercase hex characters.
    #[error("{what} is not 64 lowercase hex characters")]
    MalformedHash {
        /// Which value ("proof element 2", "root hash", …).
        what: String,
    },
    /// The inclusion proof does not lead to the root.
    #[error(
        "the inclusion proof does not lead from the receipt digest at index {index} to the root of the tree of {tree_size}: {reason}"
    )]
    InclusionFails {
        /// Leaf index.
        index: u64,
        /// Tree size.
        tree_size: u64,
        /// ct-merkle's reason.
        reason: String,
    },
    /// The consistency proof does not connect the two roots.
    #[error(
        "the consistency proof does not show the tree of {new_size} extending the tree of {old_size}: {reason}"
    )]
    ConsistencyFails {
        /// Older size.
        old_size: u64,
        /// Newer size.
        new_size: u64,
        /// ct-merkle's reason.
        reason: String,
    },
}

/// The tree of the given leaves (any byte strings; our public API uses 32-byte digests).
fn tree<L: AsRef<[u8]> + Clone>(leaves: &[L]) -> MemoryBackedTree<Sha256, L> {
    let mut tree = MemoryBackedTree::new();
    for leaf in leaves {
        tree.push(leaf.clone());
    }
    tree
}

/// The first `size` leaves, or an error if the log is shorter.
fn prefix<L>(leaves: &[L], size: u64) -> Result<&[L], MerkleError> {
    let log_size = leaves.len() as u64;
    usize::try_from(size)
        .ok()
        .and_then(|size| leaves.get(..size))
        .ok_or(MerkleError::BeyondLog { size, log_size })
}

fn to_hex(nodes: &[u8]) -> Vec<String> {
    nodes.chunks(32).map(hex::encode).collect()
}

/// Parses 64 lowercase hex characters.
fn parse_node(text: &str, what: impl Fn() -> String) -> Result<Node, MerkleError> {
    let lowercase = text
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let bytes = hex::decode(text).ok().filter(|_| lowercase);
    bytes
        .and_then(|bytes| Node::try_from(bytes.as_slice()).ok())
        .ok_or_else(|| MerkleError::MalformedHash { what: what() })
}

fn parse_proof(proof: &[String]) -> Result<Vec<u8>, MerkleError> {
    let mut bytes = Vec::with_capacity(proof.len() * 32);
    for (i, element) in proof.iter().enumerate() {
        bytes.extend_from_slice(&parse_node(element, || format!("proof element {i}"))?);
    }
    Ok(bytes)
}

/// Generic root over byte-string leaves (used by the RFC test vectors too).
fn root_of<L: AsRef<[u8]>>(leaves: &[L]) -> String {
    Frontier::of(leaves).root_hex()
}

/// The root hash (hex) of the log of these leaves; SHA-256("") for an empty log.
pub fn root(leaves: &[[u8; 32]]) -> String {
    root_of(leaves)
}

/// The inclusion proof of leaf `index` in the tree of the first `tree_size` leaves.
pub fn inclusion_proof<L: AsRef<[u8]> + Clone>(
    leaves: &[L],
    index: u64,
    tree_size: u64,
) -> Result<Vec<String>, MerkleError> {
    let leaves = prefix(leaves, tree_size)?;
    let position = usize::try_from(index)
        .ok()
        .filter(|&i| i < leaves.len())
        .ok_or(MerkleError::IndexOutOfRange { index, tree_size })?;
    Ok(to_hex(tree(leaves).prove_inclusion(position).as_bytes()))
}

/// The consistency proof from the tree of the first `old_size` leaves to the tree of the first
/// `new_size`. Empty when the sizes are equal or `old_size` is 0 (every log extends the empty
/// log).
pub fn consistency_proof<L: AsRef<[u8]> + Clone>(
    leaves: &[L],
    old_size: u64,
    new_size: u64,
) -> Result<Vec<String>, MerkleError> {
    if old_size > new_size {
        return Err(MerkleError::OldLargerThanNew { old_size, new_size });
    }
    let leaves = prefix(leaves, new_size)?;
    if old_size == 0 || old_size == new_size {
        return Ok(Vec::new());
    }
    // old_size < new_size = leaves.len(), so the additions fit in usize.
    let additions = leaves.len() - prefix(leaves, old_size)?.len();
    Ok(to_hex(tree(leaves).prove_consistency(additions).as_bytes()))
}

/// Checks that `leaf` is at `index` in the tree of `tree_size` leaves with root `root_hex`.
pub fn verify_inclusion<L: AsRef<[u8]>>(
    leaf: &L,
    index: u64,
    tree_size: u64,
    proof: &[String],
    root_hex: &str,
) -> Result<(), MerkleError> {
    bounded(tree_size)?;
    if index >= tree_size {
        return Err(MerkleError::IndexOutOfRange { index, tree_size });
    }
    let root = RootHash::<Sha256>::new(
        parse_node(root_hex, || "the root hash".to_owned())?,
        tree_size,
    );
    let fails = |reason: String| MerkleError::InclusionFails {
        index,
        tree_size,
        reason,
    };
    let proof = InclusionProof::<Sha256>::try_from_bytes(parse_proof(proof)?)
        .map_err(|error| fails(error.to_string()))?;
    root.verify_inclusion(leaf, index, &proof)
        .map_err(|error| fails(error.to_string()))
}

/// Checks that the tree of `new_size` leaves with root `new_root_hex` extends the tree of
/// `old_size` leaves with root `old_root_hex`. Equal sizes need equal roots and an empty proof;
/// old size 0 needs the empty-log root and an empty proof.
pub fn verify_consistency(
    old_size: u64,
    old_root_hex: &str,
    new_size: u64,
    new_root_hex: &str,
    proof: &[String],
) -> Result<(), MerkleError> {
    bounded(new_size)?;
    if old_size > new_size {
        return Err(MerkleError::OldLargerThanNew { old_size, new_size });
    }
    let old_root = parse_node(old_root_hex, || "the older root hash".to_owned())?;
    let new_root = parse_node(new_root_hex, || "the newer root hash".to_owned())?;
    let proof = parse_proof(proof)?;
    let fails = |reason: &str| MerkleError::ConsistencyFails {
        old_size,
        new_size,
        reason: reason.to_owned(),
    };
    if old_size == 0 {
        let empty = tree::<[u8; 32]>(&[]).root();
        if old_root != *empty.as_bytes() {
            return Err(fails("the root of an empty log is SHA-256 of nothing"));
        }
        if !proof.is_empty() {
            return Err(fails("a proof from the empty log must be empty"));
        }
        return Ok(());
    }
    if old_size == new_size {
        if !proof.is_empty() {
            return Err(fails("a proof between equal sizes must be empty"));
        }
        if old_root != new_root {
            return Err(fails("the two roots of the same size differ"));
        }
        return Ok(());
    }
    let proof = ConsistencyProof::<Sha256>::try_from_bytes(proof)
        .map_err(|error| fails(&error.to_string()))?;
    RootHash::<Sha256>::new(new_root, new_size)
        .verify_consistency(&RootHash::new(old_root, old_size), &proof)
        .map_err(|error| fails(&error.to_string()))
}

#[cfg(test)]
mod tests;
