//! What a freeze has stored so far, read back so that a retried attempt continues the listing
//! where the last one stopped; and the per-chunk partial digests that let the bind check every
//! prefix's digest without reading the entries again, and the delete loop check each chunk's
//! entries before it deletes them.
//!
//! Each frozen chunk row carries the running sum of its entries' hashes (`digest_sum`, computed
//! here from the entries inserted), the bytes of its versions, and — when the chunk ends at a key
//! boundary — its last key (`resume_after_key`). A prefix's listing resumes after the last such
//! key; the entries of the chunks stored after it (the versions of one key split across chunks)
//! are read back so the resumed listing skips them instead of storing them twice.

use std::collections::{BTreeMap, HashSet};

use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::ManifestSummary;

use super::manifest::{ManifestError, chunk_no_i32};
use super::stage::Stage;
use super::token::ExecToken;
use crate::error::{StoreError, StoreResult};
use crate::taxonomy::{KeyStreamDigest, tenant_prefixes};
use crate::{Store, count_u64};

/// What the freeze knows of one chunk beyond its entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkTail {
    /// Bytes of the chunk's object versions, as listed.
    pub bytes: u64,
    /// The chunk's last key, when every version of that key is in this chunk or an earlier one
    /// (the listing may continue after it); `None` when the chunk ends inside a key's versions.
    pub resume_after_key: Option<String>,
}

/// What one prefix's stored chunks hold, and where its listing continues.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrefixResume {
    /// The digest of every version stored for the prefix so far.
    pub digest: KeyStreamDigest,
    /// Their bytes.
    pub bytes: u64,
    /// List the prefix's keys after this one (from its first key when `None`).
    pub after_key: Option<String>,
    /// Encoded entries already stored that a listing resumed after `after_key` lists again (the
    /// rest of a key split across chunks): skipped, not stored twice.
    pub stored_beyond: HashSet<String>,
}

/// Where a freeze continues: the next chunk number and, per prefix with stored chunks, what they
/// hold. Empty (chunk 0, no prefix) when nothing usable is stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreezeResume {
    /// The number the next chunk is stored under.
    pub next_chunk_no: u32,
    /// Per prefix, what its stored chunks hold.
    pub prefixes: BTreeMap<String, PrefixResume>,
    /// Chunks a previous attempt left that this one keeps.
    pub chunks_kept: u64,
    /// Chunks written before the resumable freeze (no partial digest) that were cleared.
    pub chunks_cleared: u64,
}

impl FreezeResume {
    /// Versions the kept chunks hold.
    pub fn versions_kept(&self) -> u64 {
        self.prefixes.values().map(|p| p.digest.count()).sum()
    }
}

/// One chunk row as the resume and the bind read it: everything but the entries.
type ChunkMeta = (
    i32,
    String,
    i32,
    Option<String>,
    Option<i64>,
    Option<String>,
);

/// The partial digest of `entries`, folded here so the row always matches what it stores.
pub(crate) fn partial_digest(entries: &[String]) -> KeyStreamDigest {
    let mut digest = KeyStreamDigest::new();
    for encoded in entries {
        digest.fold_encoded(encoded);
    }
    digest
}

/// Refuses a chunk read for deletion whose entries do not match the count and partial digest
/// stored with them (a row edited after the freeze). Rows from before the resumable freeze carry
/// no partial digest and are taken as they are, as they always were.
pub(crate) fn check_chunk_digest(
    request_id: Uuid,
    chunk_no: i32,
    entries: &[String],
    entry_count: i32,
    digest_sum: Option<&str>,
) -> StoreResult<()> {
    if i64::try_from(entries.len()).ok() != Some(i64::from(entry_count)) {
        return Err(mismatch(
            request_id,
            format!(
                "chunk {chunk_no} holds {} entries but records {entry_count}",
                entries.len()
            ),
        ));
    }
    let Some(stored) = digest_sum else {
        return Ok(());
    };
    let actual = partial_digest(entries).partial_sum();
    if actual != stored {
        return Err(mismatch(
            request_id,
            format!(
                "chunk {chunk_no}: its entries hash to {actual}, the freeze stored {stored} \
                 (the row was changed after the freeze)"
            ),
        ));
    }
    Ok(())
}

fn mismatch(request_id: Uuid, reason: String) -> StoreError {
    StoreError::Manifest(ManifestError::Mismatch { request_id, reason })
}

/// The frozen chunks' metadata, lowest number first; refused unless numbered from 0 without a
/// gap.
async fn frozen_chunk_meta(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> StoreResult<Vec<ChunkMeta>> {
    let rows: Vec<ChunkMeta> = sqlx::query_as(
        "SELECT chunk_no, prefix, entry_count, digest_sum, bytes, resume_after_key \
         FROM deletion.manifest_chunks WHERE request_id = $1 AND late_at IS NULL \
         ORDER BY chunk_no",
    )
    .bind(request_id)
    .fetch_all(&mut *conn)
    .await?;
    if let Some((position, row)) = rows
        .iter()
        .enumerate()
        .find(|(position, row)| i64::try_from(*position).ok() != Some(i64::from(row.0)))
    {
        return Err(mismatch(
            request_id,
            format!("chunk {} found at position {position}: gap", row.0),
        ));
    }
    Ok(rows)
}

/// Per prefix, the merged partial digests of `rows`; refused if a row has none.
fn merged_digests(
    request_id: Uuid,
    rows: &[ChunkMeta],
) -> StoreResult<BTreeMap<String, (KeyStreamDigest, u64)>> {
    let mut prefixes: BTreeMap<String, (KeyStreamDigest, u64)> = BTreeMap::new();
    for (chunk_no, prefix, entry_count, digest_sum, bytes, _) in rows {
        let partial = digest_sum
            .as_deref()
            .and_then(|sum| {
                KeyStreamDigest::from_partial_sum(sum, count_u64(i64::from(*entry_count)))
            })
            .ok_or_else(|| {
                mismatch(
                    request_id,
                    format!("chunk {chunk_no} has no partial digest of its entries"),
                )
            })?;
        let (digest, total) = prefixes.entry(prefix.clone()).or_default();
        digest.merge(&partial);
        *total = total.saturating_add(bytes.map_or(0, count_u64));
    }
    Ok(prefixes)
}

/// Refuses unless the stored frozen chunks are exactly `summary`: as many as it says, numbered
/// from 0 without a gap, every one under one of its prefixes, and each prefix's count and digest
/// (merged from the chunks' partial digests) and the total count equal to its. Reads one small
/// row per chunk, never the entries.
pub(crate) async fn check_chunk_digests(
    conn: &mut PgConnection,
    request_id: Uuid,
    summary: &ManifestSummary,
) -> StoreResult<()> {
    let rows = frozen_chunk_meta(conn, request_id).await?;
    if rows.len() as u64 != summary.chunks {
        return Err(mismatch(
            request_id,
            format!(
                "{} chunks stored, summary says {}",
                rows.len(),
                summary.chunks
            ),
        ));
    }
    let mut merged = merged_digests(request_id, &rows)?;
    let mut versions = 0u64;
    for expected in &summary.prefixes {
        let (digest, _) = merged.remove(&expected.prefix).unwrap_or_default();
        let (keys_digest, count) = digest.finish();
        if count != expected.versions || keys_digest != expected.keys_digest {
            return Err(mismatch(
                request_id,
                format!(
                    "prefix {}: stored chunks hold {count} versions with digest {keys_digest}, \
                     summary says {} with {}",
                    expected.prefix, expected.versions, expected.keys_digest
                ),
            ));
        }
        versions += count;
    }
    if let Some(foreign) = merged.keys().next() {
        return Err(mismatch(
            request_id,
            format!("a chunk is under foreign prefix {foreign}"),
        ));
    }
    if versions != summary.versions {
        return Err(mismatch(
            request_id,
            format!(
                "prefixes hold {versions} versions, summary says {}",
                summary.versions
            ),
        ));
    }
    Ok(())
}

impl Store {
    /// Where the freeze continues: what the chunks stored by earlier attempts hold, per prefix,
    /// and after which key each prefix's listing resumes. Chunks written before the resumable
    /// freeze (no partial digest) are cleared instead, and the freeze starts from chunk 0. When
    /// an earlier attempt left chunks, the audit trail records `freeze_resumed` (chunks and
    /// versions kept, chunks cleared). Stage must be `fenced`; generation-checked.
    pub async fn freeze_resume_point(&self, token: &ExecToken) -> StoreResult<FreezeResume> {
        let (mut tx, _) = self.begin_for_token(token, &[Stage::Fenced]).await?;
        let rows = frozen_chunk_meta(&mut tx, token.request_id).await?;
        if rows.iter().any(|row| row.3.is_none()) {
            let cleared = sqlx::query("DELETE FROM deletion.manifest_chunks WHERE request_id = $1")
                .bind(token.request_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let detail = serde_json::json!({
                "chunks_kept": 0,
                "versions_kept": 0,
                "chunks_cleared": cleared,
                "exec_generation": token.exec_generation,
            });
            token.commit_event(tx, "freeze_resumed", &detail).await?;
            return Ok(FreezeResume {
                chunks_cleared: cleared,
                ..FreezeResume::default()
            });
        }
        let own = tenant_prefixes(token.community_id);
        if let Some(row) = rows.iter().find(|row| !own.contains(&row.1)) {
            return Err(mismatch(
                token.request_id,
                format!("chunk {} is under foreign prefix {}", row.0, row.1),
            ));
        }
        let merged = merged_digests(token.request_id, &rows)?;
        let mut prefixes: BTreeMap<String, PrefixResume> = merged
            .into_iter()
            .map(|(prefix, (digest, bytes))| {
                let resume = PrefixResume {
                    digest,
                    bytes,
                    ..PrefixResume::default()
                };
                (prefix, resume)
            })
            .collect();
        // Per prefix: the last key boundary, and the chunks stored after it.
        let mut beyond: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (chunk_no, prefix, _, _, _, resume_after_key) in &rows {
            let Some(resume) = prefixes.get_mut(prefix) else {
                continue;
            };
            let after = beyond.entry(prefix.clone()).or_default();
            match resume_after_key {
                Some(key) => {
                    resume.after_key = Some(key.clone());
                    after.clear();
                }
                None => after.push(*chunk_no),
            }
        }
        for (prefix, chunk_numbers) in beyond {
            if chunk_numbers.is_empty() {
                continue;
            }
            let stored: Vec<sqlx::types::Json<Vec<String>>> = sqlx::query_scalar(
                "SELECT entries FROM deletion.manifest_chunks \
                 WHERE request_id = $1 AND chunk_no = ANY($2)",
            )
            .bind(token.request_id)
            .bind(&chunk_numbers)
            .fetch_all(&mut *tx)
            .await?;
            if let Some(resume) = prefixes.get_mut(&prefix) {
                resume.stored_beyond = stored.into_iter().flat_map(|e| e.0).collect();
            }
        }
        let versions_kept: u64 = prefixes.values().map(|p| p.digest.count()).sum();
        if rows.is_empty() {
            tx.commit().await?;
        } else {
            let detail = serde_json::json!({
                "chunks_kept": rows.len(),
                "versions_kept": versions_kept,
                "chunks_cleared": 0,
                "exec_generation": token.exec_generation,
            });
            token.commit_event(tx, "freeze_resumed", &detail).await?;
        }
        let next = u32::try_from(rows.len()).map_err(|_| StoreError::InvalidInput {
            field: "chunk_no",
            reason: format!("{} chunks is out of range", rows.len()),
        })?;
        chunk_no_i32(next)?;
        Ok(FreezeResume {
            next_chunk_no: next,
            prefixes,
            chunks_kept: rows.len() as u64,
            chunks_cleared: 0,
        })
    }
}
