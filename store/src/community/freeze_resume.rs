//! What a freeze has stored so far, read back so that a retried attempt continues the listing
//! where the last one stopped; and the per-chunk partial digests that let the bind check every
//! prefix's digest without reading the entries again, and the delete loop check each chunk's
//! entries before it deletes them.
//!
//! A freeze lists each prefix in key ranges, its *lanes* ([`listing_lanes`]), side by side. Each
//! frozen chunk row carries its lane's bounds, the running sum of its entries' hashes
//! (`digest_sum`, computed here from the entries inserted), the bytes of its versions, and — when
//! the chunk ends at a key boundary — its last key. A lane's listing resumes after the last such
//! key; the entries of the lane's chunks stored after it (the versions of one key split across
//! chunks) are read back so the resumed listing skips them instead of storing them twice.
//!
//! A chunk whose lane has no bound lies in a lane that is its whole prefix: what a freeze before
//! lanes wrote. Its key boundary stays in `resume_after_key`, the column those releases read;
//! a bounded lane's goes to `lane_resume_after_key` (migration 0023 says why).

use std::collections::{BTreeMap, HashSet};

use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::ManifestSummary;

use super::manifest::{ManifestError, chunk_no_i32};
use super::stage::Stage;
use super::token::ExecToken;
use crate::error::{StoreError, StoreResult};
use crate::taxonomy::{
    KeyStreamDigest, ListingLane, listing_lanes, tenant_prefixes, whole_prefix_lanes,
};
use crate::{Store, count_u64};

/// What the freeze knows of one chunk beyond its entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkTail {
    /// Bytes of the chunk's object versions, as listed.
    pub bytes: u64,
    /// The chunk's last key, when every version of that key is in this chunk or an earlier one
    /// of its lane (the lane's listing may continue after it); `None` when the chunk ends inside
    /// a key's versions.
    pub resume_after_key: Option<String>,
    /// The exclusive lower bound of the lane the chunk was listed in (`None`: the prefix's start).
    pub lane_after: Option<String>,
    /// The inclusive upper bound of that lane (`None`: the prefix's end).
    pub lane_through: Option<String>,
}

impl ChunkTail {
    /// The lane the chunk was listed in.
    pub fn lane(&self, prefix: &str) -> ListingLane {
        ListingLane {
            prefix: prefix.to_owned(),
            after: self.lane_after.clone(),
            through: self.lane_through.clone(),
        }
    }
}

/// What one lane's stored chunks hold, and where its listing continues.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrefixResume {
    /// The digest of every version stored for the lane so far.
    pub digest: KeyStreamDigest,
    /// Their bytes.
    pub bytes: u64,
    /// List the lane's keys after this one (from the lane's first key when `None`).
    pub after_key: Option<String>,
    /// Encoded entries already stored that a listing resumed after `after_key` lists again (the
    /// rest of a key split across chunks): skipped, not stored twice.
    pub stored_beyond: HashSet<String>,
}

/// Where a freeze continues: the next chunk number and the lanes to list, each with what its
/// stored chunks hold. With nothing usable stored: chunk 0 and [`listing_lanes`], each empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreezeResume {
    /// The number the next chunk is stored under.
    pub next_chunk_no: u32,
    /// The lanes the listing goes on in (those the stored chunks were listed in), in listing
    /// order, with what each one's stored chunks hold.
    pub lanes: Vec<(ListingLane, PrefixResume)>,
    /// Chunks a previous attempt left that this one keeps.
    pub chunks_kept: u64,
    /// Chunks cleared because this release cannot continue them: written before the resumable
    /// freeze (no partial digest), or in lanes other than this release's.
    pub chunks_cleared: u64,
}

impl FreezeResume {
    /// Versions the kept chunks hold.
    pub fn versions_kept(&self) -> u64 {
        self.lanes.iter().map(|(_, p)| p.digest.count()).sum()
    }

    /// What the stored chunks of `lane` hold, when it is one of the lanes.
    pub fn lane(&self, lane: &ListingLane) -> Option<&PrefixResume> {
        self.lanes
            .iter()
            .find(|(listed, _)| listed == lane)
            .map(|(_, resume)| resume)
    }
}

/// One chunk row as the resume and the bind read it: everything but the entries.
#[derive(Debug, Clone, sqlx::FromRow)]
struct ChunkMeta {
    chunk_no: i32,
    prefix: String,
    entry_count: i32,
    digest_sum: Option<String>,
    bytes: Option<i64>,
    resume_after_key: Option<String>,
    lane_after: Option<String>,
    lane_through: Option<String>,
    lane_resume_after_key: Option<String>,
}

impl ChunkMeta {
    fn lane(&self) -> ListingLane {
        ListingLane {
            prefix: self.prefix.clone(),
            after: self.lane_after.clone(),
            through: self.lane_through.clone(),
        }
    }

    /// The key the chunk's lane may be listed on after.
    fn boundary(&self) -> Option<&String> {
        self.resume_after_key
            .as_ref()
            .or(self.lane_resume_after_key.as_ref())
    }
}

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
        "SELECT chunk_no, prefix, entry_count, digest_sum, bytes, resume_after_key, lane_after, \
         lane_through, lane_resume_after_key FROM deletion.manifest_chunks \
         WHERE request_id = $1 AND late_at IS NULL \
         ORDER BY chunk_no",
    )
    .bind(request_id)
    .fetch_all(&mut *conn)
    .await?;
    if let Some((position, row)) = rows
        .iter()
        .enumerate()
        .find(|(position, row)| i64::try_from(*position).ok() != Some(i64::from(row.chunk_no)))
    {
        return Err(mismatch(
            request_id,
            format!("chunk {} found at position {position}: gap", row.chunk_no),
        ));
    }
    Ok(rows)
}

/// Per group of `rows` (`group` names a row's), the merged partial digests and bytes; refused
/// if a row has no partial digest.
fn merged_digests<K: Ord>(
    request_id: Uuid,
    rows: &[ChunkMeta],
    group: impl Fn(&ChunkMeta) -> K,
) -> StoreResult<BTreeMap<K, (KeyStreamDigest, u64)>> {
    let mut groups: BTreeMap<K, (KeyStreamDigest, u64)> = BTreeMap::new();
    for row in rows {
        let partial = row
            .digest_sum
            .as_deref()
            .and_then(|sum| {
                KeyStreamDigest::from_partial_sum(sum, count_u64(i64::from(row.entry_count)))
            })
            .ok_or_else(|| {
                mismatch(
                    request_id,
                    format!(
                        "chunk {} has no partial digest of its entries",
                        row.chunk_no
                    ),
                )
            })?;
        let (digest, total) = groups.entry(group(row)).or_default();
        digest.merge(&partial);
        *total = total.saturating_add(row.bytes.map_or(0, count_u64));
    }
    Ok(groups)
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
    let mut merged = merged_digests(request_id, &rows, |row| row.prefix.clone())?;
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

/// The lanes a freeze with `rows` stored goes on listing in: this release's
/// ([`listing_lanes`]) when every stored chunk lies in one of them (nothing stored included);
/// one whole-prefix lane per prefix when every stored chunk does (a freeze begun by a release
/// before lanes, continued as it began); `None` when the chunks fit neither (a mixture, or
/// another release's cut), and the freeze must start again.
fn lanes_to_continue(community: Uuid, rows: &[ChunkMeta]) -> Option<Vec<ListingLane>> {
    let current = listing_lanes(community);
    if rows.iter().all(|row| current.contains(&row.lane())) {
        return Some(current);
    }
    let whole = whole_prefix_lanes(community);
    rows.iter()
        .all(|row| whole.contains(&row.lane()))
        .then_some(whole)
}

impl Store {
    /// Where the freeze continues: the lanes to list and what the chunks stored by earlier
    /// attempts hold in each, and after which key each lane's listing resumes
    /// ([`FreezeResume`]). Chunks this release cannot continue — written before the resumable
    /// freeze (no partial digest), or in lanes that are neither this release's nor whole
    /// prefixes — are cleared instead, and the freeze starts from chunk 0. When an earlier
    /// attempt left chunks, the audit trail records `freeze_resumed` (chunks and versions kept,
    /// chunks cleared). Stage must be `fenced`; generation-checked.
    pub async fn freeze_resume_point(&self, token: &ExecToken) -> StoreResult<FreezeResume> {
        let (mut tx, _) = self.begin_for_token(token, &[Stage::Fenced]).await?;
        let rows = frozen_chunk_meta(&mut tx, token.request_id).await?;
        let own = tenant_prefixes(token.community_id);
        if let Some(row) = rows.iter().find(|row| !own.contains(&row.prefix)) {
            return Err(mismatch(
                token.request_id,
                format!(
                    "chunk {} is under foreign prefix {}",
                    row.chunk_no, row.prefix
                ),
            ));
        }
        let continued = lanes_to_continue(token.community_id, &rows);
        let (Some(lanes), false) = (continued, rows.iter().any(|row| row.digest_sum.is_none()))
        else {
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
                lanes: listing_lanes(token.community_id)
                    .into_iter()
                    .map(|lane| (lane, PrefixResume::default()))
                    .collect(),
                chunks_cleared: cleared,
                ..FreezeResume::default()
            });
        };
        let mut merged = merged_digests(token.request_id, &rows, ChunkMeta::lane)?;
        let mut resumes: Vec<(ListingLane, PrefixResume)> = lanes
            .into_iter()
            .map(|lane| {
                let (digest, bytes) = merged.remove(&lane).unwrap_or_default();
                let resume = PrefixResume {
                    digest,
                    bytes,
                    ..PrefixResume::default()
                };
                (lane, resume)
            })
            .collect();
        // Per lane (by position): the last key boundary, and the chunks stored after it.
        let mut beyond: Vec<Vec<i32>> = vec![Vec::new(); resumes.len()];
        for row in &rows {
            let lane = row.lane();
            let Some(position) = resumes.iter().position(|(listed, _)| *listed == lane) else {
                continue;
            };
            match row.boundary() {
                Some(key) => {
                    resumes[position].1.after_key = Some(key.clone());
                    beyond[position].clear();
                }
                None => beyond[position].push(row.chunk_no),
            }
        }
        for ((_, resume), chunk_numbers) in resumes.iter_mut().zip(beyond) {
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
            resume.stored_beyond = stored.into_iter().flat_map(|e| e.0).collect();
        }
        let versions_kept: u64 = resumes.iter().map(|(_, p)| p.digest.count()).sum();
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
            lanes: resumes,
            chunks_kept: rows.len() as u64,
            chunks_cleared: 0,
        })
    }
}
