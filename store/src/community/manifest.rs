//! The destructive manifest: the post-drain version listing, streamed into chunk rows of at most
//! 10,000 entries (never spanning prefixes) and bound to per-prefix digests atomically with
//! `fenced → drained`; then deleted chunk by chunk, each chunk stamped once every version in it
//! was acknowledged.
//!
//! Each chunk row carries the partial digest of its entries, computed here as it is inserted;
//! binding merges them into each prefix's count and order-independent digest (one small row per
//! chunk, never the entries), and the delete loop re-checks each chunk's entries against its
//! partial digest as it reads them: what is bound and deleted is exactly what was stored. Every
//! entry is checked at append time to be a key of the community's own exact writer shape under the
//! chunk's prefix. A retried freeze continues after what is stored (`freeze_resume`).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::ManifestSummary;

use super::freeze_resume::{ChunkTail, check_chunk_digest, check_chunk_digests, partial_digest};
use super::inventory::{
    StoredDocument, frozen_inventory_in, put_prefix_summaries, verified_document,
};
use super::stage::Stage;
use super::token::{ExecToken, LockedRequest, Tx, check_fence_held, read_for_token, read_request};
use crate::error::{StoreError, StoreResult};
use crate::taxonomy::{ListingLane, ManifestEntry, is_tenant_owned_key, tenant_prefixes};
use crate::{Store, count_i64, count_u64, put_canonical_field};

/// Most entries one chunk holds (ten `DeleteObjects` calls of 1,000).
pub const MANIFEST_CHUNK_MAX_ENTRIES: usize = 10_000;

/// Domain separator of the destructive-manifest digest.
const DIGEST_DOMAIN: &str = "buzz-deletion/destructive-manifest";

/// One unstamped chunk of the destructive manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestChunk {
    /// Position in the manifest (0-based, contiguous).
    pub chunk_no: u32,
    /// The tenant prefix all its entries are under.
    pub prefix: String,
    /// Encoded manifest entries (`ManifestEntry::encode`).
    pub entries: Vec<String>,
}

/// Which chunks of a request: the frozen manifest (bound with `fenced → drained`, deleted in
/// `drained`), or the late chunks appended after verification found versions that appeared
/// under a tenant prefix after the freeze (deleted in `cache_purged`, see `store::late`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChunkSet {
    /// The bound destructive manifest.
    Frozen,
    /// Chunks appended after the freeze, on an operator's unblock.
    Late,
}

impl ChunkSet {
    /// The stages in which chunks of this set are read and stamped.
    pub fn stages(self) -> &'static [Stage] {
        match self {
            ChunkSet::Frozen => &[Stage::Drained],
            ChunkSet::Late => &[Stage::CachePurged, Stage::LogicallyVerified],
        }
    }
}

/// What the object store acknowledged for one chunk's delete calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkAck {
    /// Versions reported deleted.
    pub deleted: u64,
    /// Versions already absent (a replayed chunk).
    pub already_missing: u64,
}

/// Progress over the destructive manifest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkProgress {
    /// Chunks in the manifest.
    pub chunks_total: u64,
    /// Chunks stamped.
    pub chunks_stamped: u64,
    /// Versions in the manifest.
    pub versions_total: u64,
    /// Versions in stamped chunks.
    pub versions_stamped: u64,
}

/// sha256 over a canonical encoding of the manifest summary (prefixes sorted).
fn manifest_digest(summary: &ManifestSummary) -> String {
    let mut out = Vec::new();
    put_canonical_field(&mut out, DIGEST_DOMAIN);
    put_canonical_field(&mut out, &summary.chunks.to_string());
    put_canonical_field(&mut out, &summary.versions.to_string());
    put_prefix_summaries(&mut out, &summary.prefixes);
    hex::encode(Sha256::digest(out))
}

/// Refuses a summary whose prefixes are not exactly the community's three tenant prefixes.
fn require_tenant_prefixes(
    request_id: Uuid,
    community_id: Uuid,
    summary: &ManifestSummary,
) -> StoreResult<()> {
    let mut expected: Vec<String> = tenant_prefixes(community_id).to_vec();
    expected.sort();
    let mut actual: Vec<String> = summary.prefixes.iter().map(|p| p.prefix.clone()).collect();
    actual.sort();
    if actual == expected {
        Ok(())
    } else {
        Err(mismatch(
            request_id,
            format!("prefixes {actual:?} are not the community's tenant prefixes {expected:?}"),
        ))
    }
}

pub(crate) fn chunk_no_i32(chunk_no: u32) -> StoreResult<i32> {
    i32::try_from(chunk_no).map_err(|_| StoreError::InvalidInput {
        field: "chunk_no",
        reason: format!("{chunk_no} is out of range"),
    })
}

/// Refuses a chunk unless it has 1..=10,000 entries, `prefix` is one of the community's tenant
/// prefixes, and every entry decodes to a key of the community's exact writer shape under it and,
/// when the chunk was listed in a `lane`, inside that lane's range.
pub(crate) fn check_chunk_entries(
    token: &ExecToken,
    label: &str,
    prefix: &str,
    entries: &[String],
    lane: Option<&ListingLane>,
) -> StoreResult<()> {
    let mismatch = |reason: String| mismatch(token.request_id, reason);
    if entries.is_empty() || entries.len() > MANIFEST_CHUNK_MAX_ENTRIES {
        return Err(mismatch(format!(
            "{label} has {} entries (1..={MANIFEST_CHUNK_MAX_ENTRIES} allowed)",
            entries.len()
        )));
    }
    if !tenant_prefixes(token.community_id)
        .iter()
        .any(|p| p == prefix)
    {
        return Err(mismatch(format!(
            "{prefix:?} is not one of the community's tenant prefixes"
        )));
    }
    for encoded in entries {
        let entry = ManifestEntry::decode(encoded)
            .map_err(|error| mismatch(format!("{label}: {error}")))?;
        if !entry.key.starts_with(prefix) || !is_tenant_owned_key(token.community_id, &entry.key) {
            return Err(mismatch(format!(
                "{label}: key {:?} is not the community's under {prefix}",
                entry.key
            )));
        }
        if let Some(lane) = lane.filter(|lane| !lane.holds(&entry.key)) {
            return Err(mismatch(format!(
                "{label}: key {:?} lies outside its lane {}",
                entry.key,
                lane.label()
            )));
        }
    }
    Ok(())
}

/// Reads the bound manifest, re-validating its digest and prefix ownership.
pub(crate) async fn destructive_manifest_in(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> StoreResult<ManifestSummary> {
    let row = read_request(conn, request_id).await?;
    let community_id = row.community()?;
    let stored: StoredDocument = sqlx::query_as(
        "SELECT destructive_manifest, destructive_manifest_digest FROM deletion.requests \
         WHERE id = $1",
    )
    .bind(request_id)
    .fetch_one(&mut *conn)
    .await?;
    let what = ("destructive manifest", "destructive manifest of request");
    let summary = verified_document(request_id, stored, what, manifest_digest)?;
    require_tenant_prefixes(request_id, community_id, &summary)?;
    Ok(summary)
}

/// One chunk to store ([`Store::append_manifest_chunks`]).
#[derive(Debug, Clone, Copy)]
pub struct NewChunk<'a> {
    /// Its number (chunks are numbered in the order the freeze hands them over).
    pub chunk_no: u32,
    /// The tenant prefix its entries are under.
    pub prefix: &'a str,
    /// Encoded entries, in listing order.
    pub entries: &'a [String],
    /// Bytes of its versions and, when it ends at a key boundary, its last key.
    pub tail: &'a ChunkTail,
}

/// Checks one chunk's entries and resume key (nothing is read or written) and returns its entry
/// count and partial digest.
fn checked_new_chunk(token: &ExecToken, chunk: &NewChunk<'_>) -> StoreResult<(i32, String)> {
    let label = format!("chunk {}", chunk.chunk_no);
    let lane = chunk.tail.lane(chunk.prefix);
    check_chunk_entries(token, &label, chunk.prefix, chunk.entries, Some(&lane))?;
    if let Some(key) = &chunk.tail.resume_after_key {
        let last = chunk
            .entries
            .last()
            .and_then(|encoded| ManifestEntry::decode(encoded).ok())
            .map(|entry| entry.key);
        if last.as_ref() != Some(key) {
            return Err(mismatch(
                token.request_id,
                format!("{label}: resumes after {key:?}, but its last key is {last:?}"),
            ));
        }
    }
    let entry_count = i32::try_from(chunk.entries.len()).unwrap_or(i32::MAX);
    Ok((entry_count, partial_digest(chunk.entries).partial_sum()))
}

impl Store {
    /// A transaction at `drained` (generation-checked), the fence held and the bound manifest
    /// re-validated ([`destructive_manifest_in`]): the start of every step of the destruction.
    pub(crate) async fn begin_destruction(
        &self,
        token: &ExecToken,
    ) -> StoreResult<(Tx, LockedRequest)> {
        let (mut tx, row) = self.begin_for_token(token, &[Stage::Drained]).await?;
        check_fence_held(&mut tx, &row).await?;
        destructive_manifest_in(&mut tx, token.request_id).await?;
        Ok((tx, row))
    }

    /// Stores one chunk (1..=10,000 encoded entries under one tenant prefix) with its partial
    /// digest (folded here from `entries`) and `tail`: the bytes of its versions and, when it ends
    /// at a key boundary, its last key, which must be the last entry's. Every entry must decode and
    /// be a key of the community's exact writer shape under `prefix` ([`ManifestError::Mismatch`]
    /// otherwise). Stage must be `fenced` and the fence held. Re-appending the same chunk number
    /// (a replayed freeze) replaces it.
    pub async fn append_manifest_chunk(
        &self,
        token: &ExecToken,
        chunk_no: u32,
        prefix: &str,
        entries: &[String],
        tail: &ChunkTail,
    ) -> StoreResult<()> {
        let chunk = NewChunk {
            chunk_no,
            prefix,
            entries,
            tail,
        };
        self.append_manifest_chunks(token, &[chunk]).await
    }

    /// Stores several chunks as [`Store::append_manifest_chunk`] stores one, in one transaction:
    /// every chunk is checked before anything is written, then the request is locked and the fence
    /// checked once for all of them. A freeze hands its chunks over a few at a time, so the
    /// request lock, the evidence check and the commit are paid once per group, not per chunk.
    pub async fn append_manifest_chunks(
        &self,
        token: &ExecToken,
        chunks: &[NewChunk<'_>],
    ) -> StoreResult<()> {
        if chunks.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            rows.push(checked_new_chunk(token, chunk)?);
        }
        let (mut tx, row) = self.begin_for_token(token, &[Stage::Fenced]).await?;
        check_fence_held(&mut tx, &row).await?;
        for (chunk, (entry_count, digest_sum)) in chunks.iter().zip(rows) {
            // A whole-prefix lane keeps its key boundary where releases before lanes read it;
            // a bounded lane's goes to its own column (migration 0023).
            let whole_prefix = chunk.tail.lane_after.is_none() && chunk.tail.lane_through.is_none();
            let resume_key = chunk.tail.resume_after_key.as_deref();
            sqlx::query(
                "INSERT INTO deletion.manifest_chunks \
                 (request_id, chunk_no, prefix, entries, entry_count, exec_generation, digest_sum, \
                  bytes, resume_after_key, lane_after, lane_through, lane_resume_after_key) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (request_id, chunk_no) DO UPDATE SET prefix = EXCLUDED.prefix, \
                   entries = EXCLUDED.entries, entry_count = EXCLUDED.entry_count, \
                   exec_generation = EXCLUDED.exec_generation, digest_sum = EXCLUDED.digest_sum, \
                   bytes = EXCLUDED.bytes, resume_after_key = EXCLUDED.resume_after_key, \
                   lane_after = EXCLUDED.lane_after, lane_through = EXCLUDED.lane_through, \
                   lane_resume_after_key = EXCLUDED.lane_resume_after_key",
            )
            .bind(token.request_id)
            .bind(chunk_no_i32(chunk.chunk_no)?)
            .bind(chunk.prefix)
            .bind(sqlx::types::Json(chunk.entries))
            .bind(entry_count)
            .bind(token.exec_generation)
            .bind(&digest_sum)
            .bind(count_i64("bytes", chunk.tail.bytes)?)
            .bind(whole_prefix.then_some(resume_key).flatten())
            .bind(chunk.tail.lane_after.as_deref())
            .bind(chunk.tail.lane_through.as_deref())
            .bind((!whole_prefix).then_some(resume_key).flatten())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Binds the manifest to the request and advances `fenced → drained` atomically, after
    /// checking the frozen inventory still validates, the fence is held, the prefixes are the
    /// community's, chunk numbers are contiguous from 0, and each prefix's count and digest
    /// merged from the stored chunks' partial digests equal the summary's. Reads one small row
    /// per chunk, never the entries: the transaction holding the request stays short whatever the
    /// manifest's size.
    pub async fn bind_destructive_manifest(
        &self,
        token: &ExecToken,
        summary: &ManifestSummary,
    ) -> StoreResult<String> {
        require_tenant_prefixes(token.request_id, token.community_id, summary)?;
        let (mut tx, row) = self.begin_for_token(token, &[Stage::Fenced]).await?;
        check_fence_held(&mut tx, &row).await?;
        frozen_inventory_in(&mut tx, token.request_id).await?;
        check_chunk_digests(&mut tx, token.request_id, summary).await?;

        let digest = manifest_digest(summary);
        let document = serde_json::to_value(summary).map_err(|error| StoreError::Corrupt {
            what: "destructive manifest",
            reason: error.to_string(),
        })?;
        sqlx::query(
            "UPDATE deletion.requests SET destructive_manifest = $2, \
             destructive_manifest_digest = $3, updated_at = now() WHERE id = $1",
        )
        .bind(token.request_id)
        .bind(sqlx::types::Json(&document))
        .bind(&digest)
        .execute(&mut *tx)
        .await?;
        let detail = serde_json::json!({
            "manifest_digest": digest,
            "chunks": summary.chunks,
            "versions": summary.versions,
        });
        token.commit_advance(tx, Stage::Drained, &detail).await?;
        Ok(digest)
    }

    /// Re-validates what destructive work acts on: the approved inventory's digest and the bound
    /// manifest's digest and prefix ownership (each fails closed if tampered with).
    pub async fn revalidate_frozen(&self, request_id: Uuid) -> StoreResult<()> {
        self.load_frozen_inventory(request_id).await?;
        self.load_destructive_manifest(request_id).await?;
        Ok(())
    }

    /// The bound manifest, its digest and prefix ownership re-validated.
    pub async fn load_destructive_manifest(
        &self,
        request_id: Uuid,
    ) -> StoreResult<ManifestSummary> {
        let mut conn = self.pool.acquire().await?;
        destructive_manifest_in(&mut conn, request_id).await
    }

    /// Up to `limit` unstamped chunks of `set` numbered above `after` (from the first when
    /// `None`), lowest number first, so a caller streaming the manifest reads each chunk once
    /// while earlier ones are still being deleted. Each set is read only at the stages it is
    /// deleted in. Generation-checked (read only).
    pub async fn pending_chunks_of(
        &self,
        token: &ExecToken,
        set: ChunkSet,
        after: Option<u32>,
        limit: u32,
    ) -> StoreResult<Vec<ManifestChunk>> {
        let mut conn = self.pool.acquire().await?;
        read_for_token(&mut conn, token)
            .await?
            .require_stage(set.stages())?;
        unstamped_chunks(&mut conn, token.request_id, set, after, limit).await
    }

    /// The next unstamped chunk of `set` under `prefix` after chunk `after`, generation-checked
    /// like [`Store::pending_chunks_of`]: one lane of a deletion that works the tenant's
    /// prefixes side by side.
    pub async fn next_pending_chunk_in(
        &self,
        token: &ExecToken,
        set: ChunkSet,
        prefix: &str,
        after: Option<u32>,
    ) -> StoreResult<Option<ManifestChunk>> {
        let mut conn = self.pool.acquire().await?;
        read_for_token(&mut conn, token)
            .await?
            .require_stage(set.stages())?;
        let row: Option<StoredChunk> = sqlx::query_as(
            "SELECT chunk_no, prefix, entries, entry_count, digest_sum \
             FROM deletion.manifest_chunks \
             WHERE request_id = $1 AND deleted_at IS NULL AND chunk_no > $2 \
               AND (late_at IS NOT NULL) = $3 AND prefix = $4 \
             ORDER BY chunk_no LIMIT 1",
        )
        .bind(token.request_id)
        .bind(after.map_or(-1, i64::from))
        .bind(set == ChunkSet::Late)
        .bind(prefix)
        .fetch_optional(&mut *conn)
        .await?;
        row.map(|row| checked_chunk(token.request_id, row))
            .transpose()
    }

    /// The prefixes that still have unstamped chunks of `set`, each with the number of its first
    /// such chunk, in that order: the lanes of [`Store::next_pending_chunk_in`].
    pub async fn pending_prefixes(
        &self,
        token: &ExecToken,
        set: ChunkSet,
    ) -> StoreResult<Vec<(String, u32)>> {
        let mut conn = self.pool.acquire().await?;
        read_for_token(&mut conn, token)
            .await?
            .require_stage(set.stages())?;
        let rows: Vec<(String, i32)> = sqlx::query_as(
            "SELECT prefix, min(chunk_no) FROM deletion.manifest_chunks \
             WHERE request_id = $1 AND deleted_at IS NULL AND (late_at IS NOT NULL) = $2 \
             GROUP BY prefix ORDER BY min(chunk_no)",
        )
        .bind(token.request_id)
        .bind(set == ChunkSet::Late)
        .fetch_all(&mut *conn)
        .await?;
        rows.into_iter()
            .map(|(prefix, first)| Ok((prefix, stored_chunk_no(first)?)))
            .collect()
    }

    /// [`Store::pending_chunks_of`] the frozen manifest.
    pub async fn pending_chunks_after(
        &self,
        token: &ExecToken,
        after: Option<u32>,
        limit: u32,
    ) -> StoreResult<Vec<ManifestChunk>> {
        self.pending_chunks_of(token, ChunkSet::Frozen, after, limit)
            .await
    }

    /// Up to `limit` unstamped chunks of the frozen manifest, lowest number first
    /// ([`Store::pending_chunks_of`]).
    pub async fn pending_chunks(
        &self,
        token: &ExecToken,
        limit: u32,
    ) -> StoreResult<Vec<ManifestChunk>> {
        self.pending_chunks_after(token, None, limit).await
    }

    /// Stamps the chunk of `set` as deleted (refused for a chunk of the other set): every version
    /// acknowledged (`deleted + already_missing` must equal its entry count). Generation- and
    /// fence-checked; requires the irreversible point recorded. Returns `false`, counting
    /// nothing, if the chunk was already stamped: no chunk is stamped twice.
    pub async fn stamp_chunk_of(
        &self,
        token: &ExecToken,
        set: ChunkSet,
        chunk_no: u32,
        ack: ChunkAck,
    ) -> StoreResult<bool> {
        let stamped = self.stamp_chunks_of(token, set, &[(chunk_no, ack)]).await?;
        Ok(stamped == 1)
    }

    /// Stamps several answered chunks of `set` in one transaction: the request lock, the
    /// evidence and the fence are checked once for the group, each chunk is checked and stamped
    /// as [`Store::stamp_chunk_of`] does, and each gets its own `chunk_stamped` event in the
    /// request's hash chain (in chunk order). A chunk already stamped is skipped; a chunk that
    /// is missing or not fully acknowledged refuses the whole group (nothing is stamped).
    /// Returns how many chunks this call stamped.
    pub async fn stamp_chunks_of(
        &self,
        token: &ExecToken,
        set: ChunkSet,
        acks: &[(u32, ChunkAck)],
    ) -> StoreResult<u64> {
        if acks.is_empty() {
            return Ok(0);
        }
        let (mut tx, row) = self.begin_for_token(token, set.stages()).await?;
        check_fence_held(&mut tx, &row).await?;
        row.require_irreversible_marked()?;
        let numbers = acks
            .iter()
            .map(|(chunk_no, _)| chunk_no_i32(*chunk_no))
            .collect::<StoreResult<Vec<i32>>>()?;
        let found: Vec<(i32, i32, bool, String)> = sqlx::query_as(
            "SELECT chunk_no, entry_count, deleted_at IS NOT NULL, prefix \
             FROM deletion.manifest_chunks WHERE request_id = $1 AND chunk_no = ANY($2) \
             AND (late_at IS NOT NULL) = $3 ORDER BY chunk_no FOR UPDATE",
        )
        .bind(token.request_id)
        .bind(&numbers)
        .bind(set == ChunkSet::Late)
        .fetch_all(&mut *tx)
        .await?;
        let mut stamps: Vec<(u32, String, u64, ChunkAck)> = Vec::with_capacity(acks.len());
        let mut sorted: Vec<&(u32, ChunkAck)> = acks.iter().collect();
        sorted.sort_by_key(|(chunk_no, _)| *chunk_no);
        for (chunk_no, ack) in sorted {
            let number = chunk_no_i32(*chunk_no)?;
            let Some((_, entry_count, stamped, prefix)) =
                found.iter().find(|(no, ..)| *no == number)
            else {
                return Err(StoreError::NotFound {
                    what: "manifest chunk",
                    id: format!("{}#{chunk_no}", token.request_id),
                });
            };
            if *stamped || stamps.iter().any(|(no, ..)| no == chunk_no) {
                continue;
            }
            let entries = count_u64(i64::from(*entry_count));
            let acknowledged = ack.deleted.saturating_add(ack.already_missing);
            if acknowledged != entries {
                return Err(StoreError::Manifest(ManifestError::ChunkIncomplete {
                    request_id: token.request_id,
                    chunk_no: *chunk_no,
                    entries,
                    acknowledged,
                }));
            }
            stamps.push((*chunk_no, prefix.clone(), entries, *ack));
        }
        if stamps.is_empty() {
            return Ok(0);
        }
        let mut numbers = Vec::with_capacity(stamps.len());
        let mut counts = Vec::with_capacity(stamps.len());
        for (chunk_no, _, entries, _) in &stamps {
            numbers.push(chunk_no_i32(*chunk_no)?);
            counts.push(count_i64("deleted_versions", *entries)?);
        }
        sqlx::query(
            "UPDATE deletion.manifest_chunks AS m SET deleted_at = now(), \
             deleted_versions = u.deleted, stamp_generation = $4 \
             FROM unnest($2::int[], $3::bigint[]) AS u(chunk_no, deleted) \
             WHERE m.request_id = $1 AND m.chunk_no = u.chunk_no",
        )
        .bind(token.request_id)
        .bind(&numbers)
        .bind(&counts)
        .bind(token.exec_generation)
        .execute(&mut *tx)
        .await?;
        for (chunk_no, prefix, entries, ack) in &stamps {
            let detail = serde_json::json!({
                "chunk_no": chunk_no,
                "prefix": prefix,
                "versions": entries,
                "deleted": ack.deleted,
                "already_missing": ack.already_missing,
                "exec_generation": token.exec_generation,
                "late": set == ChunkSet::Late,
            });
            token
                .append_event(&mut tx, "chunk_stamped", &detail)
                .await?;
        }
        tx.commit().await?;
        Ok(count_u64(i64::try_from(stamps.len()).unwrap_or(i64::MAX)))
    }

    /// [`Store::stamp_chunk_of`] a chunk of the frozen manifest.
    pub async fn stamp_chunk(
        &self,
        token: &ExecToken,
        chunk_no: u32,
        ack: ChunkAck,
    ) -> StoreResult<bool> {
        self.stamp_chunk_of(token, ChunkSet::Frozen, chunk_no, ack)
            .await
    }

    /// Chunks and versions in the manifest, and how many are stamped.
    pub async fn chunk_progress(&self, request_id: Uuid) -> StoreResult<ChunkProgress> {
        let mut conn = self.pool.acquire().await?;
        chunk_progress_in(&mut conn, request_id).await
    }

    /// Advances `drained → bindings_removed` once every chunk is stamped
    /// ([`ManifestError::ChunksPending`] otherwise), with a checkpoint of the counts. An empty
    /// manifest records the irreversible point here.
    pub async fn mark_bindings_removed(
        &self,
        token: &ExecToken,
        detail: serde_json::Value,
    ) -> StoreResult<ChunkProgress> {
        let (mut tx, _) = self.begin_destruction(token).await?;
        let pending: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM deletion.manifest_chunks \
             WHERE request_id = $1 AND deleted_at IS NULL",
        )
        .bind(token.request_id)
        .fetch_one(&mut *tx)
        .await?;
        if pending > 0 {
            return Err(StoreError::Manifest(ManifestError::ChunksPending {
                request_id: token.request_id,
                pending: count_u64(pending),
            }));
        }
        sqlx::query(
            "UPDATE deletion.requests SET irreversible_at = coalesce(irreversible_at, now()), \
             irreversible_pending_at = NULL WHERE id = $1",
        )
        .bind(token.request_id)
        .execute(&mut *tx)
        .await?;
        let progress = chunk_progress_in(&mut tx, token.request_id).await?;
        let detail = serde_json::json!({ "progress": progress, "detail": detail });
        token
            .commit_advance(tx, Stage::BindingsRemoved, &detail)
            .await?;
        Ok(progress)
    }
}

/// The refusal of a destructive manifest inconsistent with its chunks or its target.
fn mismatch(request_id: Uuid, reason: String) -> StoreError {
    StoreError::Manifest(ManifestError::Mismatch { request_id, reason })
}

/// Up to `limit` (at least 1) unstamped chunks of `set` numbered above `after`, lowest first.
async fn unstamped_chunks(
    conn: &mut PgConnection,
    request_id: Uuid,
    set: ChunkSet,
    after: Option<u32>,
    limit: u32,
) -> StoreResult<Vec<ManifestChunk>> {
    let rows: Vec<StoredChunk> = sqlx::query_as(
        "SELECT chunk_no, prefix, entries, entry_count, digest_sum \
         FROM deletion.manifest_chunks \
         WHERE request_id = $1 AND deleted_at IS NULL AND chunk_no > $3 \
           AND (late_at IS NOT NULL) = $4 \
         ORDER BY chunk_no LIMIT $2",
    )
    .bind(request_id)
    .bind(i64::from(limit.max(1)))
    .bind(after.map_or(-1, i64::from))
    .bind(set == ChunkSet::Late)
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|row| checked_chunk(request_id, row))
        .collect()
}

/// A chunk row as the delete loop reads it: number, prefix, entries, entry count, partial digest.
type StoredChunk = (
    i32,
    String,
    sqlx::types::Json<Vec<String>>,
    i32,
    Option<String>,
);

/// The chunk of `row`, refused unless its entries still match the count and partial digest the
/// freeze stored with them.
fn checked_chunk(request_id: Uuid, row: StoredChunk) -> StoreResult<ManifestChunk> {
    let (chunk_no, prefix, entries, entry_count, digest_sum) = row;
    check_chunk_digest(
        request_id,
        chunk_no,
        &entries.0,
        entry_count,
        digest_sum.as_deref(),
    )?;
    Ok(ManifestChunk {
        chunk_no: stored_chunk_no(chunk_no)?,
        prefix,
        entries: entries.0,
    })
}

/// Chunk progress, read on the caller's connection.
async fn chunk_progress_in(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> StoreResult<ChunkProgress> {
    let (chunks_total, chunks_stamped, versions_total, versions_stamped): (i64, i64, i64, i64) =
        sqlx::query_as(
            "SELECT count(*), count(deleted_at), coalesce(sum(entry_count), 0)::bigint, \
                    coalesce(sum(entry_count) FILTER (WHERE deleted_at IS NOT NULL), 0)::bigint \
             FROM deletion.manifest_chunks WHERE request_id = $1",
        )
        .bind(request_id)
        .fetch_one(conn)
        .await?;
    Ok(ChunkProgress {
        chunks_total: count_u64(chunks_total),
        chunks_stamped: count_u64(chunks_stamped),
        versions_total: count_u64(versions_total),
        versions_stamped: count_u64(versions_stamped),
    })
}

/// A stored chunk number as the `u32` chunks are numbered with. Chunks are written from `u32`
/// numbers, so a negative one is a damaged row: refused (permanently) rather than read as chunk 0,
/// which would stamp or delete another chunk's versions.
fn stored_chunk_no(chunk_no: i32) -> StoreResult<u32> {
    u32::try_from(chunk_no).map_err(|_| StoreError::Corrupt {
        what: "manifest chunk",
        reason: format!("chunk number {chunk_no} is not a valid chunk number"),
    })
}

/// Why a store call failed because the destructive manifest or its chunks are inconsistent or unfinished: one part of [`crate::StoreError`].
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The destructive manifest is inconsistent with its chunks or its target.
    #[error("request {request_id}: destructive manifest rejected: {reason}")]
    Mismatch {
        /// The request.
        request_id: uuid::Uuid,
        /// What is inconsistent.
        reason: String,
    },
    /// A chunk was stamped without every version acknowledged.
    #[error(
        "request {request_id}: chunk {chunk_no} holds {entries} versions but {acknowledged} were \
         acknowledged"
    )]
    ChunkIncomplete {
        /// The request.
        request_id: uuid::Uuid,
        /// The chunk.
        chunk_no: u32,
        /// Versions in the chunk.
        entries: u64,
        /// Versions acknowledged.
        acknowledged: u64,
    },
    /// Object deletion is not finished: chunks remain unstamped.
    #[error("request {request_id}: {pending} manifest chunk(s) are not stamped yet")]
    ChunksPending {
        /// The request.
        request_id: uuid::Uuid,
        /// Unstamped chunks.
        pending: u64,
    },
}

// Every one is permanent: retrying cannot change the answer.
crate::failure::permanent_failure!(ManifestError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_number_outside_u32_is_a_corrupt_row_not_chunk_zero() {
        assert_eq!(stored_chunk_no(0).ok(), Some(0));
        assert_eq!(stored_chunk_no(i32::MAX).ok(), Some(2_147_483_647));
        for bad in [-1, i32::MIN] {
            let refused = stored_chunk_no(bad).unwrap_err();
            assert!(
                matches!(
                    refused,
                    StoreError::Corrupt {
                        what: "manifest chunk",
                        ..
                    }
                ),
                "{refused:?}"
            );
            assert_eq!(
                crate::failure::Classified::severity(&refused),
                crate::failure::Severity::Permanent
            );
        }
    }
}
