//! The chunk stamps of a v2 receipt: stated by their count and an RFC 6962 Merkle root, not
//! listed, so the receipt stays the same size whatever the tenant's size.
//!
//! Leaf `i` is the canonical JSON (JCS) of the stamp of chunk `i`, as [`ChunkStamp`] serialises;
//! leaf hash SHA-256(0x00 ‖ leaf), node hash SHA-256(0x01 ‖ left ‖ right), the root of no stamps
//! SHA-256("") — the transparency log's hashing, over other leaves. [`StampFold`] folds the stamps
//! in chunk order in O(log n) memory (the log's [`Frontier`]), summing them and checking each one
//! against the per-chunk rules as it goes, so the issuer (streaming the stamps from the database)
//! and the verifier (reading them from the certificate) compute the same root, sums and
//! problems.

use serde::{Deserialize, Serialize};

use crate::canonical::{CanonicalError, canonical_bytes};
use crate::merkle::Frontier;
use crate::verify::CertificateProblem;

use super::ChunkStamp;

/// The stamps of a v2 manifest: how many, and their Merkle root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StampsRoot {
    /// Chunk stamps (chunks are numbered 0 to `count - 1`).
    pub count: u64,
    /// RFC 6962 root of their canonical JSON, in chunk order: 64 lowercase hex.
    pub merkle_root: String,
}

/// Folds chunk stamps, in the order given, into their count, Merkle root and sums, and collects
/// what breaks a per-chunk rule ([`stamp_problems`]), each named under a pointer prefix.
#[derive(Debug, Clone)]
pub struct StampFold {
    /// Pointer of the list the stamps come from (`/chunk_stamps`, `/manifest/chunks`).
    at: String,
    frontier: Frontier,
    versions_total: u128,
    versions_deleted: u128,
    already_missing: u128,
    problems: Vec<CertificateProblem>,
}

impl StampFold {
    /// An empty fold whose problems are named under `at`.
    pub fn new(at: &str) -> StampFold {
        StampFold {
            at: at.to_owned(),
            frontier: Frontier::new(),
            versions_total: 0,
            versions_deleted: 0,
            already_missing: 0,
            problems: Vec::new(),
        }
    }

    /// Appends the next stamp (its leaf is `canonical_bytes(stamp)`).
    pub fn push(&mut self, stamp: &ChunkStamp) -> Result<(), CanonicalError> {
        let leaf = canonical_bytes(stamp)?;
        self.push_leaf(&leaf, stamp);
        Ok(())
    }

    /// Appends the next stamp whose leaf bytes the caller already has (the verifier hashes the
    /// JSON it was given, so an added member changes the root even if `stamp` dropped it).
    pub fn push_leaf(&mut self, leaf: &[u8], stamp: &ChunkStamp) {
        let position = self.frontier.size();
        self.problems
            .extend(stamp_problems(&self.at, position, stamp));
        self.frontier.push(leaf);
        self.versions_total += u128::from(stamp.entries);
        self.versions_deleted += u128::from(stamp.versions_deleted);
        self.already_missing += u128::from(stamp.already_missing);
    }

    /// Records a stamp that could not be read at all, so the count and positions stay right.
    pub fn push_unreadable(&mut self, leaf: &[u8], problem: CertificateProblem) {
        self.problems.push(problem);
        self.frontier.push(leaf);
    }

    /// The count and root of the stamps folded so far.
    pub fn root(&self) -> StampsRoot {
        StampsRoot {
            count: self.frontier.size(),
            merkle_root: self.frontier.root_hex(),
        }
    }

    /// Sums of entries, versions deleted and versions already missing (saturating at u64::MAX,
    /// which no real manifest reaches and which then disagrees with any stated sum).
    pub fn sums(&self) -> (u64, u64, u64) {
        let clamp = |sum: u128| u64::try_from(sum).unwrap_or(u64::MAX);
        (
            clamp(self.versions_total),
            clamp(self.versions_deleted),
            clamp(self.already_missing),
        )
    }

    /// The per-chunk problems found, in chunk order.
    pub fn problems(&self) -> &[CertificateProblem] {
        &self.problems
    }
}

/// What breaks a rule in the stamp at `position` of the list at `at`:
/// - balance: `versions_deleted + already_missing == entries` (every listed version is
///   accounted for);
/// - numbering: `chunk_no == position` (chunks are 0, 1, 2, … without gaps or repeats);
/// - `stamped_at` is an RFC 3339 timestamp.
pub fn stamp_problems(at: &str, position: u64, stamp: &ChunkStamp) -> Vec<CertificateProblem> {
    let mut problems = Vec::new();
    let done = u128::from(stamp.versions_deleted) + u128::from(stamp.already_missing);
    if done != u128::from(stamp.entries) {
        problems.push(CertificateProblem::new(
            format!("{at}/{position}/entries"),
            format!(
                "is {} but versions_deleted {} + already_missing {} = {done}: a listed version is unaccounted for",
                stamp.entries, stamp.versions_deleted, stamp.already_missing
            ),
        ));
    }
    if stamp.chunk_no != position {
        problems.push(CertificateProblem::new(
            format!("{at}/{position}/chunk_no"),
            format!(
                "is {} at position {position}: chunks must be numbered 0, 1, 2, … without gaps or repeats (a chunk is missing, repeated or out of order)",
                stamp.chunk_no
            ),
        ));
    }
    if let Err(error) = chrono::DateTime::parse_from_rfc3339(&stamp.stamped_at) {
        problems.push(CertificateProblem::new(
            format!("{at}/{position}/stamped_at"),
            format!(
                "{:?} is not an RFC 3339 timestamp: {error}",
                stamp.stamped_at
            ),
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::sha256_hex;

    fn stamp(chunk_no: u64, entries: u64, deleted: u64) -> ChunkStamp {
        ChunkStamp {
            chunk_no,
            prefix: "media/c/".to_owned(),
            entries,
            versions_deleted: deleted,
            already_missing: entries - deleted,
            late: false,
            stamped_at: "2026-12-03T10:00:00.000000Z".to_owned(),
        }
    }

    #[test]
    fn the_root_is_the_rfc_6962_root_of_the_stamps_canonical_json() {
        let empty = StampFold::new("/chunk_stamps");
        assert_eq!(empty.root().count, 0);
        assert_eq!(empty.root().merkle_root, sha256_hex(b""));

        let stamps = [stamp(0, 3, 3), stamp(1, 2, 1), stamp(2, 5, 5)];
        let mut fold = StampFold::new("/chunk_stamps");
        for s in &stamps {
            fold.push(s).unwrap();
        }
        let leaves: Vec<Vec<u8>> = stamps.iter().map(|s| canonical_bytes(s).unwrap()).collect();
        assert_eq!(
            fold.root().merkle_root,
            Frontier::of(&leaves).root_hex(),
            "the log's own tree over the JCS leaves"
        );
        assert_eq!(
            String::from_utf8(leaves[0].clone()).unwrap(),
            r#"{"already_missing":0,"chunk_no":0,"entries":3,"late":false,"prefix":"media/c/","stamped_at":"2026-12-03T10:00:00.000000Z","versions_deleted":3}"#
        );
        assert_eq!(fold.root().count, 3);
        assert_eq!(fold.sums(), (10, 9, 1));
        assert!(fold.problems().is_empty(), "{:?}", fold.problems());
    }

    #[test]
    fn any_change_to_any_stamp_changes_the_root() {
        let root = |stamps: &[ChunkStamp]| {
            let mut fold = StampFold::new("");
            stamps.iter().for_each(|s| fold.push(s).unwrap());
            fold.root()
        };
        let original = [stamp(0, 3, 3), stamp(1, 2, 2)];
        let mut swapped = original.clone();
        swapped.swap(0, 1);
        let mut late = original.clone();
        late[1].late = true;
        let mut prefix = original.clone();
        prefix[0].prefix = "thumbs/c/".to_owned();
        for changed in [&swapped[..], &late[..], &prefix[..], &original[..1]] {
            assert_ne!(root(changed), root(&original));
        }
    }

    #[test]
    fn each_per_chunk_rule_names_the_stamp_and_its_field() {
        let mut unbalanced = stamp(0, 3, 3);
        unbalanced.versions_deleted = 2;
        let mut bad_time = stamp(2, 1, 1);
        bad_time.stamped_at = "yesterday".to_owned();
        let mut fold = StampFold::new("/chunk_stamps");
        for s in [unbalanced, stamp(5, 1, 1), bad_time] {
            fold.push(&s).unwrap();
        }
        let fields: Vec<&str> = fold.problems().iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "/chunk_stamps/0/entries",
                "/chunk_stamps/1/chunk_no",
                "/chunk_stamps/2/stamped_at"
            ]
        );
    }
}
