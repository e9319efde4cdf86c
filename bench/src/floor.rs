//! The raw floor (variant a): what a bare program needs to erase a tenant, and nothing more.
//!
//! The same version listing (ListObjectVersions, 1,000 per page, the three tenant prefixes in
//! the workflow's key ranges), the same DeleteObjects calls (explicit version ids, at most 1,000
//! per call, never spanning a prefix) with the same parallelism, the same batched row deletes (one short statement of
//! `purge_batch_rows` rows at a time, tenant tables then the community row) and the same
//! SCAN + UNLINK. No Temporal, no fence, no manifest, no stamps, no audit trail.

use std::sync::Arc;
use std::time::{Duration, Instant};

use activities::community::PAGES_IN_MEMORY;
use activities::s3::{MAX_VERSIONS_PER_DELETE, ObjectStore, ObjectVersionRef};
use activities::taxonomy::{ListingLane, listing_lanes};
use anyhow::{Result, bail};
use futures::StreamExt;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::stack::Stack;

/// Versions per listing page (the S3 maximum).
const LIST_PAGE_SIZE: i32 = 1000;

/// SQLSTATE of a foreign-key violation: that table must wait until its referencing rows go.
const FOREIGN_KEY_VIOLATION: &str = "23503";

/// Where the floor spent its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorTimings {
    /// Listing every version of the three prefixes.
    pub list: Duration,
    /// The DeleteObjects calls.
    pub delete: Duration,
    /// The batched row deletes, community row included.
    pub rows: Duration,
    /// SCAN + UNLINK.
    pub keys: Duration,
    /// DeleteObjects calls issued.
    pub calls: u64,
    /// Versions and delete markers deleted.
    pub versions_deleted: u64,
    /// Rows deleted, community row included.
    pub rows_deleted: u64,
    /// Redis keys unlinked.
    pub keys_unlinked: u64,
}

impl FloorTimings {
    /// Wall time of the whole floor.
    pub fn total(&self) -> Duration {
        self.list + self.delete + self.rows + self.keys
    }
}

/// Erases `community` the bare way and says where the time went.
pub async fn run_floor(
    stack: &Stack,
    community: Uuid,
    parallelism: usize,
    batch_rows: u32,
) -> Result<FloorTimings> {
    let started = Instant::now();
    let calls = list_delete_calls(&stack.objects, community).await?;
    let list = started.elapsed();
    let call_count = calls.len() as u64;

    let started = Instant::now();
    let versions_deleted = delete_calls(&stack.objects, calls, parallelism).await?;
    let delete = started.elapsed();

    let started = Instant::now();
    let rows_deleted = delete_rows(stack.store.pool(), &stack.store, community, batch_rows).await?;
    let rows = started.elapsed();

    let started = Instant::now();
    let keys_unlinked = stack.cache.purge_namespace(community, |_| {}).await?;
    let keys = started.elapsed();

    Ok(FloorTimings {
        list,
        delete,
        rows,
        keys,
        calls: call_count,
        versions_deleted,
        rows_deleted,
        keys_unlinked,
    })
}

/// Every version of the community's three prefixes, as DeleteObjects calls of at most 1,000
/// versions that never span a prefix (as the manifest's chunks never do), the prefixes taking
/// turns call by call as the workflow's delete lanes do. Each prefix is listed in the key ranges
/// the workflow's listing uses (`listing_lanes`), every range side by side on a task of its own,
/// at most [`PAGES_IN_MEMORY`] listing calls in flight (as the workflow's listing), and a call
/// never spans two ranges (as a chunk never does).
pub async fn list_delete_calls(
    objects: &ObjectStore,
    community: Uuid,
) -> Result<Vec<Vec<ObjectVersionRef>>> {
    // As many listing calls in flight as the workflow's listing allows pages in memory.
    let in_flight = Arc::new(Semaphore::new(PAGES_IN_MEMORY));
    let listers: Vec<_> = listing_lanes(community)
        .into_iter()
        .map(|lane| {
            let prefix = lane.prefix.clone();
            let lister = list_lane_calls(objects.clone(), lane, in_flight.clone());
            (prefix, tokio::spawn(lister))
        })
        .collect();
    let mut per_prefix: Vec<(String, Vec<Vec<ObjectVersionRef>>)> = Vec::new();
    for (prefix, lister) in listers {
        let calls = lister.await??;
        match per_prefix.last_mut() {
            Some((last, gathered)) if *last == prefix => gathered.extend(calls),
            _ => per_prefix.push((prefix, calls)),
        }
    }
    Ok(interleaved(
        per_prefix
            .into_iter()
            .map(|(_, calls)| calls.into_iter())
            .collect(),
    ))
}

/// One listing lane listed to its end, as DeleteObjects calls in listing order: from the lane's
/// lower bound (exclusive) to its upper bound (inclusive).
async fn list_lane_calls(
    objects: ObjectStore,
    lane: ListingLane,
    in_flight: Arc<Semaphore>,
) -> Result<Vec<Vec<ObjectVersionRef>>> {
    let mut versions = Vec::new();
    let mut start = lane.after.clone();
    let mut marker = None;
    loop {
        let _call = in_flight.acquire().await?;
        let page = match start.take() {
            Some(key) => {
                objects
                    .list_versions_after_key(&lane.prefix, key, LIST_PAGE_SIZE)
                    .await?
            }
            None => {
                objects
                    .list_versions_page(&lane.prefix, marker, LIST_PAGE_SIZE)
                    .await?
            }
        };
        let passed_end = page.entries.iter().any(|v| lane.is_past(&v.key));
        versions.extend(
            page.entries
                .iter()
                .filter(|v| lane.holds(&v.key))
                .map(|v| v.version_ref()),
        );
        match page.next {
            Some(next) if !passed_end && !lane.is_past(&next.0) => marker = Some(next),
            _ => break,
        }
    }
    Ok(versions
        .chunks(MAX_VERSIONS_PER_DELETE)
        .map(<[ObjectVersionRef]>::to_vec)
        .collect())
}

/// The lanes' items taking turns (a1 b1 c1 a2 b2 …), a lane dropping out when it runs dry.
fn interleaved<T>(mut lanes: Vec<std::vec::IntoIter<T>>) -> Vec<T> {
    let mut out = Vec::new();
    loop {
        let before = out.len();
        out.extend(lanes.iter_mut().filter_map(Iterator::next));
        if out.len() == before {
            return out;
        }
    }
}

/// Issues the calls with at most `parallelism` in flight, each on a task of its own (so the
/// SDK's work on the calls spreads over the runtime's threads, as the worker's does); every
/// version must be acknowledged.
pub async fn delete_calls(
    objects: &ObjectStore,
    calls: Vec<Vec<ObjectVersionRef>>,
    parallelism: usize,
) -> Result<u64> {
    let mut outcomes = futures::stream::iter(calls)
        .map(|versions| {
            let objects = objects.clone();
            tokio::spawn(async move { objects.delete_versions(&versions).await })
        })
        .buffer_unordered(parallelism.max(1));
    let mut deleted = 0u64;
    while let Some(outcome) = outcomes.next().await {
        let outcome = outcome??;
        if !outcome.is_complete() {
            bail!(
                "DeleteObjects acknowledged {} of {} versions ({} refused)",
                outcome.deleted,
                outcome.requested,
                outcome.failed.len()
            );
        }
        deleted += outcome.deleted;
    }
    Ok(deleted)
}

/// Deletes the community's rows from every tenant table in batches of `batch_rows` (each its
/// own autocommitted statement), then the community row. A table refused for a foreign key is
/// retried after the others; each pass must make progress, so the loop is bounded.
async fn delete_rows(
    pool: &PgPool,
    store: &activities::store::Store,
    community: Uuid,
    batch_rows: u32,
) -> Result<u64> {
    let batch = i64::from(batch_rows.max(1));
    let mut tables = store.catalog_scan(community).await?.tenant_tables;
    let mut deleted = 0u64;
    while !tables.is_empty() {
        let before = tables.len();
        let mut deferred = Vec::new();
        for table in tables {
            match delete_table_rows(pool, &table, community, batch).await {
                Ok(rows) => deleted += rows,
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some(FOREIGN_KEY_VIOLATION) =>
                {
                    deferred.push(table);
                }
                Err(other) => return Err(other.into()),
            }
        }
        if deferred.len() == before {
            bail!("no tenant table could be emptied: foreign keys among {deferred:?}");
        }
        tables = deferred;
    }
    let community_row = sqlx::query("DELETE FROM buzz.communities WHERE id = $1")
        .bind(community)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(deleted + community_row)
}

/// One table's rows of the community, one bounded statement at a time.
async fn delete_table_rows(
    pool: &PgPool,
    qualified: &str,
    community: Uuid,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let name = quoted(qualified);
    let sql = format!(
        "DELETE FROM {name} WHERE community_id = $1 AND ctid = ANY(ARRAY(\
           SELECT ctid FROM {name} WHERE community_id = $1 LIMIT $2))"
    );
    let mut deleted = 0u64;
    loop {
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(community)
            .bind(batch)
            .execute(pool)
            .await?
            .rows_affected();
        deleted += rows;
        if i64::try_from(rows).unwrap_or(i64::MAX) < batch {
            return Ok(deleted);
        }
    }
}

/// `schema.name` as a quoted SQL identifier pair (names come from the catalog).
fn quoted(qualified: &str) -> String {
    qualified
        .split('.')
        .map(|part| format!("\"{}\"", part.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_names_are_quoted_part_by_part() {
        assert_eq!(quoted("buzz.events"), "\"buzz\".\"events\"");
        assert_eq!(quoted("buzz.we\"ird"), "\"buzz\".\"we\"\"ird\"");
    }

    #[test]
    fn calls_of_the_prefixes_take_turns_until_each_runs_dry() {
        let lanes = vec![
            vec!["m1", "m2", "m3"].into_iter(),
            vec!["t1"].into_iter(),
            vec!["x1", "x2"].into_iter(),
        ];
        assert_eq!(interleaved(lanes), vec!["m1", "t1", "x1", "m2", "x2", "m3"]);
    }

    #[test]
    fn the_floor_total_is_the_sum_of_its_phases() {
        let t = FloorTimings {
            list: Duration::from_millis(100),
            delete: Duration::from_millis(2_000),
            rows: Duration::from_millis(300),
            keys: Duration::from_millis(40),
            calls: 0,
            versions_deleted: 0,
            rows_deleted: 0,
            keys_unlinked: 0,
        };
        assert_eq!(t.total(), Duration::from_millis(2_440));
    }
}
