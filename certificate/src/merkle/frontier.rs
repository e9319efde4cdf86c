//! The right edge of an RFC 6962 tree: the roots of the perfect subtrees its leaves decompose
//! into, one per set bit of the size, largest (leftmost) first. Appending a leaf merges equal
//! subtrees (O(log n) amortised) and the root folds the edge from the right (O(log n)), so the
//! roots of every prefix of a log cost one pass over its leaves instead of one tree per prefix.
//!
//! Why the fold is the RFC root: MTH splits n leaves at the largest power of two k < n, and the
//! first k leaves are exactly the leftmost perfect subtree of the edge; the rest recurses on the
//! remaining subtrees. The unit tests hold it to the RFC vectors and to ct-merkle's tree.

use sha2::{Digest, Sha256};

/// The compact right edge of a log (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    /// Leaves appended.
    size: u64,
    /// Perfect subtree roots, largest first; `peaks.len()` is the number of set bits of `size`.
    peaks: Vec<[u8; 32]>,
}

impl Frontier {
    /// The edge of the empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// The edge of the log of `leaves`.
    pub fn of<L: AsRef<[u8]>>(leaves: &[L]) -> Self {
        let mut frontier = Self::new();
        for leaf in leaves {
            frontier.push(leaf.as_ref());
        }
        frontier
    }

    /// The edge of a log of `size` leaves from its stored peaks, largest first, as
    /// [`Frontier::peaks`] gave them: `None` unless there is exactly one per set bit of `size`.
    /// (Whether they are the right peaks is for the caller to check against a signed root.)
    pub fn from_peaks(size: u64, peaks: Vec<[u8; 32]>) -> Option<Self> {
        let expected = usize::try_from(size.count_ones()).ok()?;
        (peaks.len() == expected).then_some(Self { size, peaks })
    }

    /// Leaves appended so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The roots of the perfect subtrees the leaves decompose into, largest (leftmost) first:
    /// what a store keeps to append without reading the leaves ([`Frontier::from_peaks`]).
    pub fn peaks(&self) -> &[[u8; 32]] {
        &self.peaks
    }

    /// Appends one leaf (its bytes; the log's leaves are 32-byte receipt digests).
    pub fn push(&mut self, leaf: &[u8]) {
        let mut node = leaf_hash(leaf);
        let mut below = self.size;
        // Each trailing set bit of the old size is a subtree as large as the one just completed.
        while below & 1 == 1 {
            let Some(left) = self.peaks.pop() else {
                break;
            };
            node = node_hash(&left, &node);
            below >>= 1;
        }
        self.peaks.push(node);
        self.size += 1;
    }

    /// The root hash: SHA-256("") for the empty log.
    pub fn root(&self) -> [u8; 32] {
        let mut peaks = self.peaks.iter().rev();
        match peaks.next() {
            None => Sha256::digest([]).into(),
            Some(last) => peaks.fold(*last, |right, left| node_hash(left, &right)),
        }
    }

    /// The root hash as 64 lowercase hex characters.
    pub fn root_hex(&self) -> String {
        hex::encode(self.root())
    }
}

/// RFC 6962 §2.1: SHA-256(0x00 || leaf).
fn leaf_hash(leaf: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update([0x00]);
    hasher.update(leaf);
    hasher.finalize().into()
}

/// RFC 6962 §2.1: SHA-256(0x01 || left || right).
fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update([0x01]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}
