//! Fills a fresh database's transparency log with `n` receipts, as a fleet would have issued them
//! over the years: `n` finished user requests, one stored receipt each, `n` leaves, and one
//! checkpoint at size `n` signed with the worker's receipt key and carrying the log's right edge
//! — exactly what the worker's own appends leave behind, so the next deletion appends to a log of
//! that size.
//!
//! The receipts' bodies are placeholders (`{}`): nothing on the completion path reads them, and
//! reading them is what the benchmark would catch.

use activities::certificates::ReceiptKey;
use anyhow::{Context, Result, bail};
use certificate::checkpoint::Checkpoint;
use certificate::merkle::Frontier;
use sqlx::{Connection, PgConnection};

/// The statements that write the filler, in order, inside one transaction. `$1` is the number
/// of receipts in the first, the signing key's id in the third.
const FILL: [&str; 4] = [
    "CREATE TEMP TABLE filler ON COMMIT DROP AS \
     SELECT i, gen_random_uuid() AS id, \
            encode(sha256(convert_to('bench-log-filler-' || i, 'UTF8')), 'hex') AS digest \
     FROM generate_series(1, $1::bigint) AS i",
    "INSERT INTO deletion.requests (id, kind, target, workflow_id, requested_by, stage, \
                                    completed_at) \
     SELECT id, 'user', 'bench-log-filler-' || i, 'bench-log-filler-' || i, 'bench', \
            'completed', now() \
     FROM filler ORDER BY i",
    "INSERT INTO deletion.receipts (request_id, kind, key_id, signed, receipt_digest) \
     SELECT id, 'user', $1, '{}'::jsonb, digest FROM filler ORDER BY i",
    "INSERT INTO deletion.transparency_log (leaf_index, receipt_digest, request_id) \
     SELECT i - 1, digest, id FROM filler ORDER BY i",
];

/// Writes `n` receipts into the empty log of the database at `owner_url` (the schema owner's
/// URL) and signs a checkpoint over them. The connection is closed before returning, so the
/// server has counted its reads before anyone snapshots the statistics.
pub async fn fill_log(owner_url: &str, key: &ReceiptKey, n: u64) -> Result<()> {
    let mut conn = PgConnection::connect(owner_url)
        .await
        .context("connect to the benchmark's database as the schema owner")?;
    let already: i64 = sqlx::query_scalar("SELECT count(*) FROM deletion.transparency_log")
        .fetch_one(&mut conn)
        .await?;
    if already != 0 {
        bail!("the log already holds {already} receipts: fill only a fresh database");
    }
    let signing = key.signing_key();
    let key_id = signing.key_id();
    let count = i64::try_from(n).context("receipt count")?;
    let mut tx = conn.begin().await?;
    for (step, sql) in FILL.iter().enumerate() {
        let query = sqlx::query(*sql);
        let query = match step {
            0 => query.bind(count),
            2 => query.bind(&key_id),
            _ => query,
        };
        query
            .execute(&mut *tx)
            .await
            .with_context(|| format!("filling the log: {sql}"))?;
    }
    let digests: Vec<String> = sqlx::query_scalar(
        "SELECT receipt_digest FROM deletion.transparency_log ORDER BY leaf_index",
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut edge = Frontier::new();
    for digest in &digests {
        let bytes = hex::decode(digest).context("a filler digest is not hex")?;
        let leaf: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .context("a filler digest is not 32 bytes")?;
        edge.push(&leaf);
    }
    let checkpoint = Checkpoint::sign(signing, edge.size(), edge.root_hex(), chrono::Utc::now())
        .context("signing the filler's checkpoint")?;
    let peaks: Vec<String> = edge.peaks().iter().map(hex::encode).collect();
    sqlx::query(
        "INSERT INTO deletion.log_checkpoints (tree_size, root_hash, checkpoint, frontier) \
         VALUES ($1, $2, $3, $4)",
    )
    .bind(count)
    .bind(edge.root_hex())
    .bind(sqlx::types::Json(&checkpoint))
    .bind(peaks)
    .execute(&mut *tx)
    .await
    .context("storing the filler's checkpoint")?;
    tx.commit().await?;
    conn.close().await?;
    Ok(())
}
