//! Late manifest chunks: object versions that appeared under a tenant prefix after the
//! destructive manifest was frozen.
//!
//! The frozen manifest is the proof of what deletion was approved to remove; a version that
//! lands later (a serving writer that outlived its lease, or one that bypassed the lease library)
//! is in no chunk, so verification blocks on it. When the operator unblocks, each late version is
//! appended as a *late chunk* of the same request — numbered after every existing chunk, marked
//! `late_at`, with the order-independent digest of its entries recorded on the row and in the
//! audit trail — and then deleted and stamped through the same generation- and fence-checked
//! path as the frozen chunks ([`crate::ChunkSet::Late`]). Late chunks never change the bound
//! manifest summary or its digest.

use serde::{Deserialize, Serialize};

use super::manifest::{ChunkSet, check_chunk_entries, chunk_no_i32};
use super::token::{ExecToken, check_fence_held};
use crate::error::{StoreError, StoreResult};
use crate::taxonomy::{KeyStreamDigest, ManifestEntry};
use crate::{Store, count_u64};

/// Entries named in a `late_chunk_appended` audit event (the digest covers all of them).
const AUDITED_ENTRIES: usize = 100;

/// A late chunk as appended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateChunk {
    /// Its number: after every chunk the request had.
    pub chunk_no: u32,
    /// The tenant prefix of its entries.
    pub prefix: String,
    /// Entries in it.
    pub versions: u64,
    /// Order-independent digest of its encoded entries.
    pub digest: String,
}

impl Store {
    /// Whether any chunk of the request, frozen or late, lists exactly this version (key,
    /// version id and kind) under `prefix`.
    pub async fn manifest_lists_version(
        &self,
        request_id: uuid::Uuid,
        prefix: &str,
        entry: &ManifestEntry,
    ) -> StoreResult<bool> {
        let listed = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM deletion.manifest_chunks \
             WHERE request_id = $1 AND prefix = $2 AND entries ? $3)",
        )
        .bind(request_id)
        .bind(prefix)
        .bind(entry.encode())
        .fetch_one(&self.pool)
        .await?;
        Ok(listed)
    }

    /// Appends a late chunk of `entries` (1..=10,000 versions of the community's exact writer
    /// shape under `prefix`) after every existing chunk of the request, and audits it with its
    /// digest. Stage must be `cache_purged` or `logically_verified`, the fence held at the
    /// request's generation and the irreversible point recorded.
    pub async fn append_late_chunk(
        &self,
        token: &ExecToken,
        prefix: &str,
        entries: &[String],
    ) -> StoreResult<LateChunk> {
        check_chunk_entries(token, "late chunk", prefix, entries, None)?;
        let mut digest = KeyStreamDigest::new();
        for encoded in entries {
            digest.fold_encoded(encoded);
        }
        let digest_sum = digest.partial_sum();
        let (digest, versions) = digest.finish();
        let (mut tx, row) = self.begin_for_token(token, ChunkSet::Late.stages()).await?;
        check_fence_held(&mut tx, &row).await?;
        row.require_irreversible_marked()?;
        let next: i64 = sqlx::query_scalar(
            "SELECT coalesce(max(chunk_no), -1)::bigint + 1 FROM deletion.manifest_chunks \
             WHERE request_id = $1",
        )
        .bind(token.request_id)
        .fetch_one(&mut *tx)
        .await?;
        let chunk_no = u32::try_from(next).map_err(|_| StoreError::InvalidInput {
            field: "chunk_no",
            reason: format!("{next} is out of range"),
        })?;
        sqlx::query(
            "INSERT INTO deletion.manifest_chunks \
             (request_id, chunk_no, prefix, entries, entry_count, exec_generation, late_at, \
              late_digest, digest_sum) \
             VALUES ($1, $2, $3, $4, $5, $6, now(), $7, $8)",
        )
        .bind(token.request_id)
        .bind(chunk_no_i32(chunk_no)?)
        .bind(prefix)
        .bind(sqlx::types::Json(entries))
        .bind(i32::try_from(entries.len()).unwrap_or(i32::MAX))
        .bind(token.exec_generation)
        .bind(&digest)
        .bind(&digest_sum)
        .execute(&mut *tx)
        .await?;
        let named: Vec<&String> = entries.iter().take(AUDITED_ENTRIES).collect();
        let detail = serde_json::json!({
            "chunk_no": chunk_no,
            "prefix": prefix,
            "versions": versions,
            "digest": digest,
            "entries": named,
            "entries_omitted": entries.len().saturating_sub(named.len()),
            "exec_generation": token.exec_generation,
        });
        token
            .commit_event(tx, "late_chunk_appended", &detail)
            .await?;
        Ok(LateChunk {
            chunk_no,
            prefix: prefix.to_owned(),
            versions,
            digest,
        })
    }

    /// Late chunks of the request and how many of them are stamped: `(total, stamped, versions
    /// in stamped ones)`.
    pub async fn late_chunk_progress(
        &self,
        request_id: uuid::Uuid,
    ) -> StoreResult<(u64, u64, u64)> {
        let (total, stamped, versions): (i64, i64, i64) = sqlx::query_as(
            "SELECT count(*), count(deleted_at), \
                    coalesce(sum(entry_count) FILTER (WHERE deleted_at IS NOT NULL), 0)::bigint \
             FROM deletion.manifest_chunks WHERE request_id = $1 AND late_at IS NOT NULL",
        )
        .bind(request_id)
        .fetch_one(&self.pool)
        .await?;
        Ok((count_u64(total), count_u64(stamped), count_u64(versions)))
    }
}
