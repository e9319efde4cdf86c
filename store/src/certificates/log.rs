//! The transparency log in Postgres: one leaf per receipt (its digest), a signed checkpoint after
//! every append. Appends are serialised by one advisory lock, so leaf indexes have no gaps and
//! every checkpoint covers exactly the leaves before it. Roots come from the log's right edge,
//! one pass over the stored leaves (`certificate::merkle::Frontier`); proofs rebuild the tree.

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
    let leaves = leaves(conn).await?;
    let mut edge = merkle::Frontier::of(&leaves);
    require_latest_checkpoint_matches(conn, &edge).await?;
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
    sqlx::query(
        "INSERT INTO deletion.log_checkpoints (tree_size, root_hash, checkpoint) \
         VALUES ($1, $2, $3)",
    )
    .bind(to_i64(tree_size)?)
    .bind(&root_hash)
    .bind(sqlx::types::Json(&checkpoint))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Refuses to extend a log whose stored leaves are not exactly what its latest signed checkpoint
/// covers: a receipt removed, changed or inserted since (only the schema owner can, with the
/// append-only triggers lifted) would otherwise be papered over by the next checkpoint.
async fn require_latest_checkpoint_matches(
    conn: &mut PgConnection,
    stored: &merkle::Frontier,
) -> CertificateResult<()> {
    let stored_size = stored.size();
    let stored_root = stored.root_hex();
    let (signed_size, signed_root) = match latest_checkpoint(conn).await? {
        Some(checkpoint) => (checkpoint.tree_size, checkpoint.root_hash),
        None => (0, merkle::root(&[])),
    };
    if signed_size == stored_size && signed_root == stored_root {
        return Ok(());
    }
    Err(CertificateStoreError::LogRewritten {
        signed_size,
        signed_root,
        stored_size,
        stored_root,
    })
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
