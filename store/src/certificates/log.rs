//! The transparency log in Postgres: one leaf per receipt (its digest), a signed checkpoint after
//! every append. Appends are serialised by one advisory lock, so leaf indexes have no gaps and
//! every checkpoint covers exactly the leaves before it.
//!
//! Each checkpoint row keeps the log's right edge at its size (`certificate::merkle::Frontier`,
//! one hash per set bit of the size), so an append reads one checkpoint and the highest leaf
//! index instead of every leaf: O(log n) whatever the log's size. The stored edge is trusted only
//! when it folds to the root the latest checkpoint signed, and the leaves stored must be exactly
//! as many as it covers; otherwise the log was rewritten and nothing is appended. A leaf changed
//! in place (same count) is not read here, but cannot be papered over either: the next
//! checkpoint extends the signed edge, not the stored leaves, and the audit and every exported
//! proof over that leaf fail. Proofs and the audit still rebuild the tree from the leaves.

use certificate::checkpoint::Checkpoint;
use certificate::keys::ReceiptSigningKey;
use certificate::merkle;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::error::{CertificateResult, CertificateStoreError};

/// Advisory lock key of the log's single writer (any constant distinct from the chain locks).
const LOG_LOCK_KEY: i64 = 0x6275_7a7a_6c6f_6700; // "buzzlog\0"

/// Appends `digest` (of `request_id`'s receipt) as the next leaf and signs the new checkpoint,
/// inside the caller's transaction.
pub(crate) async fn append(
    conn: &mut PgConnection,
    key: &ReceiptSigningKey,
    request_id: Uuid,
    digest: &[u8; 32],
    signed_at: DateTime<Utc>,
) -> CertificateResult<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(LOG_LOCK_KEY)
        .execute(&mut *conn)
        .await?;
    let mut edge = signed_edge(conn).await?;
    let leaf_index = edge.size();
    sqlx::query(
        "INSERT INTO deletion.transparency_log (leaf_index, receipt_digest, request_id) \
         VALUES ($1, $2, $3)",
    )
    .bind(to_i64(leaf_index)?)
    .bind(hex::encode(digest))
    .bind(request_id)
    .execute(&mut *conn)
    .await?;
    edge.push(digest);
    let tree_size = edge.size();
    let root_hash = edge.root_hex();
    let checkpoint = Checkpoint::sign(key, tree_size, root_hash.clone(), signed_at)
        .map_err(|e| CertificateStoreError::certificate("signing the checkpoint", e))?;
    let peaks: Vec<String> = edge.peaks().iter().map(hex::encode).collect();
    sqlx::query(
        "INSERT INTO deletion.log_checkpoints (tree_size, root_hash, checkpoint, frontier) \
         VALUES ($1, $2, $3, $4)",
    )
    .bind(to_i64(tree_size)?)
    .bind(&root_hash)
    .bind(sqlx::types::Json(&checkpoint))
    .bind(peaks)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The log's right edge as its latest signed checkpoint left it, after checking that the stored
/// leaves are as many as it covers (one index lookup). A checkpoint signed before edges were
/// stored gives way to the edge of every stored leaf, checked against its root, once.
async fn signed_edge(conn: &mut PgConnection) -> CertificateResult<merkle::Frontier> {
    let latest: Option<(sqlx::types::Json<Checkpoint>, Option<Vec<String>>)> = sqlx::query_as(
        "SELECT checkpoint, frontier FROM deletion.log_checkpoints \
         ORDER BY tree_size DESC LIMIT 1",
    )
    .fetch_optional(&mut *conn)
    .await?;
    let stored_size: i64 = sqlx::query_scalar(
        "SELECT COALESCE(max(leaf_index) + 1, 0) FROM deletion.transparency_log",
    )
    .fetch_one(&mut *conn)
    .await?;
    let (edge, signed_size, signed_root) = match latest {
        None => (merkle::Frontier::new(), 0, merkle::root(&[])),
        Some((sqlx::types::Json(checkpoint), peaks)) => {
            let edge = match peaks {
                Some(peaks) => edge_from_peaks(checkpoint.tree_size, &peaks).unwrap_or_default(),
                None => merkle::Frontier::of(&leaves(conn).await?),
            };
            (edge, checkpoint.tree_size, checkpoint.root_hash)
        }
    };
    if edge.size() == signed_size
        && edge.root_hex() == signed_root
        && u64::try_from(stored_size).ok() == Some(signed_size)
    {
        return Ok(edge);
    }
    // Refused: the message names what the stored leaves are now (read in full, once).
    let stored = merkle::Frontier::of(&leaves(conn).await?);
    Err(CertificateStoreError::LogRewritten {
        signed_size,
        signed_root,
        stored_size: stored.size(),
        stored_root: stored.root_hex(),
    })
}

/// The edge stored with a checkpoint of `size` leaves, or `None` when the stored text is not one
/// 32-byte hex hash per set bit of the size (the table's CHECK refuses that; a None here is then
/// refused as a rewritten log by the caller, since the empty edge folds to no signed root).
fn edge_from_peaks(size: u64, peaks: &[String]) -> Option<merkle::Frontier> {
    let peaks = peaks
        .iter()
        .map(|peak| decode_digest(peak).ok())
        .collect::<Option<Vec<[u8; 32]>>>()?;
    merkle::Frontier::from_peaks(size, peaks)
}

/// Every leaf of the log, in index order.
pub(crate) async fn leaves(conn: &mut PgConnection) -> CertificateResult<Vec<[u8; 32]>> {
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT leaf_index, receipt_digest FROM deletion.transparency_log ORDER BY leaf_index",
    )
    .fetch_all(conn)
    .await?;
    let mut leaves = Vec::with_capacity(rows.len());
    for (position, (index, digest)) in rows.into_iter().enumerate() {
        if index != position as i64 {
            return Err(CertificateStoreError::certificate(
                "transparency log",
                format!("leaf {position} is missing (the next stored leaf is {index})"),
            ));
        }
        leaves.push(decode_digest(&digest)?);
    }
    Ok(leaves)
}

/// The latest signed checkpoint, if anything was ever logged.
pub(crate) async fn latest_checkpoint(
    conn: &mut PgConnection,
) -> CertificateResult<Option<Checkpoint>> {
    let row: Option<sqlx::types::Json<Checkpoint>> = sqlx::query_scalar(
        "SELECT checkpoint FROM deletion.log_checkpoints ORDER BY tree_size DESC LIMIT 1",
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|json| json.0))
}

/// Every stored checkpoint, oldest first.
pub(crate) async fn checkpoints(conn: &mut PgConnection) -> CertificateResult<Vec<Checkpoint>> {
    let rows: Vec<sqlx::types::Json<Checkpoint>> =
        sqlx::query_scalar("SELECT checkpoint FROM deletion.log_checkpoints ORDER BY tree_size")
            .fetch_all(conn)
            .await?;
    Ok(rows.into_iter().map(|json| json.0).collect())
}

/// The leaf index of `request_id`'s receipt.
pub(crate) async fn leaf_index_of(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> CertificateResult<Option<(u64, String)>> {
    let row: Option<(i64, String)> = sqlx::query_as(
        "SELECT leaf_index, receipt_digest FROM deletion.transparency_log WHERE request_id = $1",
    )
    .bind(request_id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(index, digest)| (index.max(0) as u64, digest)))
}

/// A stored hex digest as 32 bytes.
pub(crate) fn decode_digest(digest: &str) -> CertificateResult<[u8; 32]> {
    let bytes = hex::decode(digest)
        .map_err(|e| CertificateStoreError::certificate("stored receipt digest", e))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| CertificateStoreError::certificate("stored receipt digest", "is not 32 bytes"))
}

fn to_i64(value: u64) -> CertificateResult<i64> {
    i64::try_from(value).map_err(|e| CertificateStoreError::certificate("log size", e))
}
