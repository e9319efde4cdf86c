//! The receipt: what a completed deletion asserts, field by field. It is what gets signed.
//!
//! Every timestamp in it is written by [`crate::canonical::timestamp`]. Counts are plain JSON
//! integers. Serde refuses unknown members everywhere, so a receipt with an added field does not
//! parse.
//!
//! [`check_counts`] checks that the numbers agree with each other (the manifest chunks add up,
//! the purge stayed within the inventory, the approval names the inventory that was deleted,
//! …). Each rule is one small function so that a rule found wrong for real data can be dropped
//! alone.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::chain::ChainHead;
use crate::keys::{KeyError, random_bytes};
use crate::verify::CertificateProblem;

mod coverage;
pub mod stamps;

pub use coverage::coverage_problems;
pub use stamps::{StampFold, StampsRoot};

/// The `format` of every receipt issued now: v2, whose manifest states the chunk stamps by their
/// count and Merkle root ([`StampsRoot`]) instead of listing them, so a receipt's size (and the
/// memory that builds, signs and stores it) no longer grows with the tenant. The stamps travel
/// beside the receipt in the certificate (`chunk_stamps`), where the verifier checks them against
/// the signed root.
pub const RECEIPT_FORMAT: &str = "buzz-deletion-receipt/v2";

/// The `format` of receipts signed before v2: the manifest lists every chunk stamp
/// ([`ManifestFacts::chunks`]). They still verify and audit as signed.
///
/// v1 also gained the inventoried relations ([`InventoryFacts::relations`]) without a bump: the
/// list is optional and omitted when empty, so every receipt signed before it existed parses and
/// re-canonicalises byte-identically, and a verifier reads both. A bump would have bought nothing
/// in safety: the list cannot be stripped from a receipt that has one (its every leaf is covered
/// by a signed field digest), and an older verifier refuses a receipt carrying it either way.
/// v2 is a bump because its manifest has another shape, which a v1 verifier must refuse by name.
pub const RECEIPT_FORMAT_V1: &str = "buzz-deletion-receipt/v1";

/// Every receipt format this crate signs, verifies and audits.
pub const RECEIPT_FORMATS: [&str; 2] = [RECEIPT_FORMAT_V1, RECEIPT_FORMAT];

/// The signed statement about one completed deletion request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// [`RECEIPT_FORMAT`] (v2), or [`RECEIPT_FORMAT_V1`] for a receipt signed before it.
    pub format: String,
    /// The deletion request.
    pub request_id: Uuid,
    /// Community or user deletion.
    pub kind: ReceiptKind,
    /// What was deleted.
    pub subject: Subject,
    /// Who asked for it.
    pub requested_by: String,
    /// When it was asked for.
    pub requested_at: String,
    /// The approval and the inventory it was bound to.
    pub approval: ApprovalFacts,
    /// What the inventory found before deletion.
    pub inventory: InventoryFacts,
    /// The object-version manifest and its stamped chunks.
    pub manifest: ManifestFacts,
    /// The rows and keys purged.
    pub purge: PurgeFacts,
    /// Fence and execution generations the deletion ran under.
    pub generations: Generations,
    /// The verification report as recorded (a JSON object). A community receipt that states
    /// inventoried relations also names, under `relations`, every relation the scope
    /// verification re-found and counted empty (see [`coverage_problems`]).
    pub verification: serde_json::Value,
    /// The stages reached, in order.
    pub stages: Vec<StageReached>,
    /// The audit chain head at completion.
    pub audit_chain: ChainHead,
    /// When the deletion completed.
    pub completed_at: String,
    /// Key id of the key that signs this receipt.
    pub key_id: String,
    /// When the receipt was signed.
    pub signed_at: String,
}

/// The kind of deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiptKind {
    /// A whole community (tenant).
    Community,
    /// One user.
    User,
}

/// What was deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Subject {
    /// A community, by id and host.
    Community {
        /// Community id.
        community_id: Uuid,
        /// Its host name.
        host: String,
    },
    /// A user, by a salted commitment (the receipt does not name the user).
    User {
        /// [`target_commitment`] of the user identifier.
        target_hash: String,
        /// The salt (hex) used for `target_hash`.
        target_salt: String,
    },
}

/// The approval of the deletion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalFacts {
    /// Approver identity.
    pub approved_by: String,
    /// Approval time.
    pub approved_at: String,
    /// The inventory digest the approval was bound to.
    pub inventory_digest: String,
}

/// Rows counted in one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableRows {
    /// Table name.
    pub table: String,
    /// Row count.
    pub rows: u64,
}

/// The inventory taken before deletion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoryFacts {
    /// Inventory digest.
    pub digest: String,
    /// Rows per table.
    pub tables: Vec<TableRows>,
    /// Object versions found.
    pub object_versions: u64,
    /// Their total bytes.
    pub object_bytes: u64,
    /// Redis keys found.
    pub redis_keys: u64,
    /// Incomplete multipart uploads found.
    pub multipart_uploads: u64,
    /// Every relation of the purge set the frozen inventory recorded (by name, oid, role, the
    /// root whose purge count covers it, kind and tenant column), sorted by name. The coverage
    /// rules ([`coverage_problems`]) require each to appear in `/purge/tables` and in
    /// `/verification/relations`.
    ///
    /// Absent (never written empty) when the receipt makes no statement about relations: a
    /// receipt signed before receipts stated them, a user deletion's receipt, or an inventory
    /// frozen before the closed world was recorded. Absent means "not stated", never "none":
    /// no coverage rule applies to such a receipt, exactly as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relations: Vec<InventoriedRelation>,
    /// Every owner declaration (a `buzz-deletion:` comment) the frozen inventory relied on: an
    /// archive trigger, a key-only child's key, a refreshed materialized view, a harmless trigger
    /// or rule, a relation that is not tenant data. Sorted by object. Absent (never written
    /// empty) when none was relied on, or the receipt makes no statement about them (signed
    /// before receipts named declarations, a user deletion's receipt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declarations: Vec<DeclarationFacts>,
}

/// One owner declaration the frozen inventory relied on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclarationFacts {
    /// The object and where: `trigger archive_events on buzz.events`.
    pub object: String,
    /// What the owner declared it to be (`archives into history.events_archive`).
    pub declaration: String,
}

/// One relation of the purge set as the frozen inventory recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoriedRelation {
    /// `schema.name` at inventory time.
    pub relation: String,
    /// `pg_class.oid` at inventory time.
    pub oid: u64,
    /// What it is to the deletion: `tenant table`, `tenant relation of <root>` (a partition or
    /// inheritance child), `community row`, `key child through <key>`, `archive table`.
    pub role: String,
    /// The relation whose purge count covers it (`schema.name`): the tenant table for a tenant
    /// relation (the purge counts a whole tree's rows under its root), itself otherwise.
    pub root: String,
    /// `pg_class.relkind` (`r`, `p`, `f`, …).
    pub relkind: String,
    /// The column attributing its rows to a community (`community_id`, `id`), `null` for a key
    /// child (its rows are the community's through its key).
    pub tenant_column: Option<String>,
}

/// One stamped manifest chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkStamp {
    /// Chunk number, from 0.
    pub chunk_no: u64,
    /// Key prefix the chunk covers.
    pub prefix: String,
    /// Object versions listed in it.
    pub entries: u64,
    /// Versions deleted by us.
    pub versions_deleted: u64,
    /// Versions already gone when we deleted.
    pub already_missing: u64,
    /// Listed after the inventory (a late write caught by the final sweep).
    pub late: bool,
    /// When the chunk was stamped done.
    pub stamped_at: String,
}

/// The object-version manifest.
///
/// Exactly one of `chunks` (v1) and `stamps` (v2) is present, as the receipt's format says
/// (checked by [`check_counts`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestFacts {
    /// Manifest digest.
    pub digest: String,
    /// v1: its chunks, in chunk_no order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<ChunkStamp>>,
    /// v2: how many chunk stamps there are and their Merkle root ([`stamps`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamps: Option<StampsRoot>,
    /// Sum of chunk entries.
    pub versions_total: u64,
    /// Sum of chunk versions_deleted.
    pub versions_deleted: u64,
    /// Sum of chunk already_missing.
    pub already_missing: u64,
}

impl ManifestFacts {
    /// The v2 manifest of the stamps folded into `fold`.
    pub fn rooted(digest: String, fold: &StampFold) -> ManifestFacts {
        let (versions_total, versions_deleted, already_missing) = fold.sums();
        ManifestFacts {
            digest,
            chunks: None,
            stamps: Some(fold.root()),
            versions_total,
            versions_deleted,
            already_missing,
        }
    }

    /// The v1 manifest listing `chunks`.
    pub fn listed(digest: String, chunks: Vec<ChunkStamp>) -> ManifestFacts {
        ManifestFacts {
            digest,
            versions_total: chunks.iter().map(|c| c.entries).sum(),
            versions_deleted: chunks.iter().map(|c| c.versions_deleted).sum(),
            already_missing: chunks.iter().map(|c| c.already_missing).sum(),
            chunks: Some(chunks),
            stamps: None,
        }
    }
}

/// What the purge removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeFacts {
    /// Rows deleted per table.
    pub tables: Vec<TableRows>,
    /// Sum of those rows.
    pub rows_total: u64,
    /// Redis keys deleted.
    pub redis_keys_purged: u64,
    /// Multipart uploads aborted.
    pub multipart_uploads_aborted: u64,
}

/// The generations the deletion ran under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generations {
    /// Fence generation (none for a user deletion).
    pub fence_generation: Option<u64>,
    /// Execution generation.
    pub exec_generation: u64,
}

/// A stage the request reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageReached {
    /// Stage name.
    pub stage: String,
    /// When it was reached.
    pub reached_at: String,
}

/// The commitment to a user identifier: SHA-256 hex of (salt bytes || target UTF-8). The salt
/// is hex; it is published next to the commitment so that whoever knows the identifier can
/// check it, while the receipt alone does not reveal it.
pub fn target_commitment(target: &str, salt_hex: &str) -> Result<String, KeyError> {
    let mut bytes = hex::decode(salt_hex).map_err(|error| KeyError::InvalidSalt {
        reason: error.to_string(),
    })?;
    bytes.extend_from_slice(target.as_bytes());
    Ok(crate::canonical::sha256_hex(&bytes))
}

/// A fresh salt for [`target_commitment`]: 16 random bytes, hex.
pub fn new_salt() -> Result<String, KeyError> {
    Ok(hex::encode(random_bytes::<16>()?))
}

/// Internal consistency problems of a receipt; each `field` is a JSON pointer into the
/// receipt. Empty when every rule holds. The rules, one function each:
///
/// - `manifest_shape`: a v1 manifest lists `chunks`, a v2 manifest states `stamps` (count and
///   root), never both, and the format is one this crate knows;
/// - `manifest_sums`: v1: `/manifest/versions_total`, `versions_deleted`, `already_missing` are
///   the sums over the chunks; v2: `versions_deleted + already_missing == versions_total` (the
///   per-chunk balance, summed; the stamps themselves are checked against the root by the
///   certificate's verifier, [`StampFold`]);
/// - `listed_chunks` (v1): per chunk, `versions_deleted + already_missing == entries`,
///   `chunk_no` is 0, 1, 2, … in order, and `stamped_at` is RFC 3339 ([`stamps::stamp_problems`]);
/// - `purge_total`: `/purge/rows_total` is the sum over the purged tables;
/// - `approval_binds_inventory`: `/approval/inventory_digest == /inventory/digest`;
/// - `timestamps_parse`: `/signed_at` and `/completed_at` are RFC 3339;
/// - `other_timestamps_parse`: so are `requested_at`, `approved_at` and `reached_at`;
/// - `community_has_audit_chain`: a community receipt has `audit_chain.length >= 1`;
/// - `kind_matches_subject`: `/kind` agrees with `/subject/type`;
/// - `inventoried_relations_purged` and `inventoried_relations_verified`: every inventoried
///   relation appears in the purge facts and in the verification facts (see
///   [`coverage_problems`]; nothing to check when the receipt states no relations).
///
/// Only rules that hold by construction are checked. Purged rows are deliberately not compared
/// with the inventory's: rows written between the inventory and the fence are purged too (the
/// approval covers the community, the digest binds what was shown), and the community's own row
/// in `buzz.communities` is purged without being a tenant table of the inventory. Likewise the
/// frozen manifest may list versions written in that window, so it is not compared with the
/// inventory's version count.
pub fn check_counts(receipt: &Receipt) -> Vec<CertificateProblem> {
    let rules: &[fn(&Receipt) -> Vec<CertificateProblem>] = &[
        manifest_shape,
        manifest_sums,
        listed_chunks,
        purge_total,
        approval_binds_inventory,
        timestamps_parse,
        other_timestamps_parse,
        community_has_audit_chain,
        kind_matches_subject,
        coverage::inventoried_relations_purged,
        coverage::inventoried_relations_verified,
    ];
    rules.iter().flat_map(|rule| rule(receipt)).collect()
}

fn problem(field: impl Into<String>, text: impl Into<String>) -> CertificateProblem {
    CertificateProblem::new(field, text)
}

/// Sum without overflow (u128 holds any sum of u64 counts we will see).
fn sum(values: impl Iterator<Item = u64>) -> u128 {
    values.map(u128::from).sum()
}

fn mismatch(field: &str, stated: u64, computed: u128, of: &str) -> Option<CertificateProblem> {
    (u128::from(stated) != computed).then(|| {
        problem(
            field,
            format!("is {stated} but {of} is {computed}: the counts of the receipt disagree"),
        )
    })
}

/// The manifest has the shape of the receipt's format: v1 lists its chunks, v2 states the
/// stamps' count and root.
fn manifest_shape(receipt: &Receipt) -> Vec<CertificateProblem> {
    let manifest = &receipt.manifest;
    let v1 = receipt.format == RECEIPT_FORMAT_V1;
    if !v1 && receipt.format != RECEIPT_FORMAT {
        return vec![problem(
            "/format",
            format!(
                "is {:?}, not one of {RECEIPT_FORMATS:?}: not a receipt this verifier understands",
                receipt.format
            ),
        )];
    }
    // The member this format requires, the other one, and what the required one states.
    let listed = ("chunks", manifest.chunks.is_some());
    let rooted = ("stamps", manifest.stamps.is_some());
    let ((wanted, has_wanted), (other, has_other), version, states) = match v1 {
        true => (listed, rooted, "v1", "lists every chunk stamp"),
        false => (
            rooted,
            listed,
            "v2",
            "states the chunk stamps' count and Merkle root",
        ),
    };
    let mut problems = Vec::new();
    if !has_wanted {
        problems.push(problem(
            format!("/manifest/{wanted}"),
            format!("is missing: a {version} receipt {states}"),
        ));
    }
    if has_other {
        problems.push(problem(
            format!("/manifest/{other}"),
            format!("is not a member of a {version} receipt's manifest: it was added"),
        ));
    }
    if let Some(stamps) = &manifest.stamps
        && !crate::verify::is_hash_hex(&stamps.merkle_root)
    {
        problems.push(problem(
            "/manifest/stamps/merkle_root",
            "is not a hash (64 lowercase hex characters)",
        ));
    }
    problems
}

/// v1: versions_total, versions_deleted and already_missing are the sums over the chunks.
/// v2: versions deleted and already missing add up to the versions listed.
fn manifest_sums(receipt: &Receipt) -> Vec<CertificateProblem> {
    let manifest = &receipt.manifest;
    let Some(chunks) = &manifest.chunks else {
        return mismatch(
            "/manifest/versions_total",
            manifest.versions_total,
            u128::from(manifest.versions_deleted) + u128::from(manifest.already_missing),
            "versions_deleted + already_missing",
        )
        .into_iter()
        .collect();
    };
    [
        mismatch(
            "/manifest/versions_total",
            manifest.versions_total,
            sum(chunks.iter().map(|c| c.entries)),
            "the sum of the chunks' entries",
        ),
        mismatch(
            "/manifest/versions_deleted",
            manifest.versions_deleted,
            sum(chunks.iter().map(|c| c.versions_deleted)),
            "the sum of the chunks' versions_deleted",
        ),
        mismatch(
            "/manifest/already_missing",
            manifest.already_missing,
            sum(chunks.iter().map(|c| c.already_missing)),
            "the sum of the chunks' already_missing",
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// v1: every listed chunk keeps the per-chunk rules (balance, numbering, timestamp).
fn listed_chunks(receipt: &Receipt) -> Vec<CertificateProblem> {
    receipt
        .manifest
        .chunks
        .iter()
        .flatten()
        .zip(0_u64..)
        .flat_map(|(chunk, position)| stamps::stamp_problems("/manifest/chunks", position, chunk))
        .collect()
}

/// rows_total is the sum over the purged tables.
fn purge_total(receipt: &Receipt) -> Vec<CertificateProblem> {
    mismatch(
        "/purge/rows_total",
        receipt.purge.rows_total,
        sum(receipt.purge.tables.iter().map(|t| t.rows)),
        "the sum of the purged tables' rows",
    )
    .into_iter()
    .collect()
}

/// The approval names the inventory the receipt reports.
fn approval_binds_inventory(receipt: &Receipt) -> Vec<CertificateProblem> {
    (receipt.approval.inventory_digest != receipt.inventory.digest)
        .then(|| {
            problem(
                "/approval/inventory_digest",
                format!(
                    "is {} but the inventory's digest is {}: the approval was for another inventory",
                    receipt.approval.inventory_digest, receipt.inventory.digest
                ),
            )
        })
        .into_iter()
        .collect()
}

/// Problems for the given (pointer, text) pairs that are not RFC 3339 timestamps.
fn unparsable(stamps: Vec<(String, &str)>) -> Vec<CertificateProblem> {
    stamps
        .into_iter()
        .filter_map(|(field, text)| {
            chrono::DateTime::parse_from_rfc3339(text)
                .err()
                .map(|error| {
                    problem(
                        field,
                        format!("{text:?} is not an RFC 3339 timestamp: {error}"),
                    )
                })
        })
        .collect()
}

/// `signed_at` and `completed_at` are RFC 3339 timestamps.
fn timestamps_parse(receipt: &Receipt) -> Vec<CertificateProblem> {
    unparsable(vec![
        ("/signed_at".to_owned(), &receipt.signed_at),
        ("/completed_at".to_owned(), &receipt.completed_at),
    ])
}

/// The other timestamps (request, approval, stages) are RFC 3339 too; a v1 receipt's chunk stamps
/// are checked by `listed_chunks`.
fn other_timestamps_parse(receipt: &Receipt) -> Vec<CertificateProblem> {
    let mut stamps: Vec<(String, &str)> = vec![
        ("/requested_at".to_owned(), &receipt.requested_at),
        (
            "/approval/approved_at".to_owned(),
            &receipt.approval.approved_at,
        ),
    ];
    for (i, stage) in receipt.stages.iter().enumerate() {
        stamps.push((format!("/stages/{i}/reached_at"), &stage.reached_at));
    }
    unparsable(stamps)
}

/// A community deletion records at least one audit event.
fn community_has_audit_chain(receipt: &Receipt) -> Vec<CertificateProblem> {
    (receipt.kind == ReceiptKind::Community && receipt.audit_chain.length < 1)
        .then(|| {
            problem(
                "/audit_chain/length",
                format!(
                    "is {}: a community deletion must have a chained audit trail",
                    receipt.audit_chain.length
                ),
            )
        })
        .into_iter()
        .collect()
}

/// `kind` and the subject's `type` agree.
fn kind_matches_subject(receipt: &Receipt) -> Vec<CertificateProblem> {
    let agrees = matches!(
        (receipt.kind, &receipt.subject),
        (ReceiptKind::Community, Subject::Community { .. })
            | (ReceiptKind::User, Subject::User { .. })
    );
    (!agrees)
        .then(|| problem("/subject/type", "does not match /kind"))
        .into_iter()
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
