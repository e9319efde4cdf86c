//! Writing and reading the hash-chained audit trail (one chain per request; the encoding is
//! `certificate::chain`'s). Every request-scoped audit event of both stores is appended here, in
//! the caller's transaction, after taking the request's lock: the row lock on
//! `deletion.requests` when the request exists (the lock every stage write already takes), an
//! advisory lock on the request id otherwise. So the head read here is the head the insert
//! extends; the database's `audit_events_extend_chain` trigger checks that it does.

use certificate::chain::{ChainHead, ChainRow, EventContent, GENESIS_HASH, event_hash};
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::certificates::{CertificateResult, CertificateStoreError};

/// Appends one event to `request_id`'s chain inside the caller's transaction; returns its id.
pub(crate) async fn append_chained(
    conn: &mut PgConnection,
    request_id: Uuid,
    actor: &str,
    event: &str,
    detail: &serde_json::Value,
) -> CertificateResult<i64> {
    lock_chain(conn, request_id).await?;
    // The head, and the database's clock at the precision it stores (so the hashed time is the
    // stored time), in one round trip.
    let (head_seq, head_hash, at): (Option<i64>, Option<String>, DateTime<Utc>) = sqlx::query_as(
        "SELECT h.seq, h.row_hash, date_trunc('microseconds', clock_timestamp()) \
         FROM (SELECT 1) AS one LEFT JOIN LATERAL ( \
             SELECT seq, row_hash FROM deletion.audit_events \
             WHERE request_id = $1 AND seq IS NOT NULL ORDER BY seq DESC LIMIT 1) AS h ON true",
    )
    .bind(request_id)
    .fetch_one(&mut *conn)
    .await?;
    let (seq, prev_hash) = match (head_seq, head_hash) {
        (Some(seq), Some(hash)) => (seq + 1, hash),
        _ => (1, GENESIS_HASH.to_owned()),
    };
    let row_hash = event_hash(&EventContent {
        request_id,
        seq,
        at,
        actor,
        event,
        detail,
        prev_hash: &prev_hash,
    })
    .map_err(|e| CertificateStoreError::certificate("audit event hash", e))?;
    Ok(sqlx::query_scalar(
        "INSERT INTO deletion.audit_events \
         (request_id, at, actor, event, detail, seq, prev_hash, row_hash) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
    )
    .bind(request_id)
    .bind(at)
    .bind(actor)
    .bind(event)
    .bind(sqlx::types::Json(detail))
    .bind(seq)
    .bind(&prev_hash)
    .bind(&row_hash)
    .fetch_one(conn)
    .await?)
}

/// Serialises writers of one request's chain (and orders the user fence's changes after it).
pub(crate) async fn lock_chain(conn: &mut PgConnection, request_id: Uuid) -> sqlx::Result<()> {
    let locked: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM deletion.requests WHERE id = $1 FOR UPDATE")
            .bind(request_id)
            .fetch_optional(&mut *conn)
            .await?;
    if locked.is_none() {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 15))")
            .bind(request_id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Every audit row of `request_id` as stored, in id order (what `certificate::chain` verifies).
pub(crate) async fn chain_rows(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> sqlx::Result<Vec<ChainRow>> {
    let rows: Vec<StoredRow> = sqlx::query_as(
        "SELECT id, request_id, seq, at, actor, event, detail, prev_hash, row_hash \
         FROM deletion.audit_events WHERE request_id = $1 ORDER BY id",
    )
    .bind(request_id)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(StoredRow::into_chain_row).collect())
}

/// The chain's head as stored (not verified): the last chained row.
pub(crate) async fn stored_head(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> sqlx::Result<ChainHead> {
    let head: Option<(i64, String, i64)> = sqlx::query_as(
        "SELECT seq, row_hash, id FROM deletion.audit_events \
         WHERE request_id = $1 AND seq IS NOT NULL ORDER BY seq DESC LIMIT 1",
    )
    .bind(request_id)
    .fetch_optional(conn)
    .await?;
    Ok(match head {
        Some((length, head_hash, head_row_id)) => ChainHead {
            length,
            head_hash,
            head_row_id,
        },
        None => ChainHead {
            length: 0,
            head_hash: GENESIS_HASH.to_owned(),
            head_row_id: 0,
        },
    })
}

#[derive(sqlx::FromRow)]
struct StoredRow {
    id: i64,
    request_id: Uuid,
    seq: Option<i64>,
    at: DateTime<Utc>,
    actor: String,
    event: String,
    detail: serde_json::Value,
    prev_hash: Option<String>,
    row_hash: Option<String>,
}

impl StoredRow {
    fn into_chain_row(self) -> ChainRow {
        ChainRow {
            id: self.id,
            request_id: self.request_id,
            seq: self.seq,
            at: self.at,
            actor: self.actor,
            event: self.event,
            detail: self.detail,
            prev_hash: self.prev_hash,
            row_hash: self.row_hash,
        }
    }
}
