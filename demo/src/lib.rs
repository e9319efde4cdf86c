//! Demo data for demos, tests and benchmarks, written the way the relay writes: rows through
//! plain SQL (guarded by the fence trigger), objects and keys under a serving-write lease.
//!
//! The community demo's data lives here: the seed plan and the writes through the serving
//! library in this file, the rows' shapes and SQL in `rows.rs`. (The user deletion's demo
//! inventory is the workflow's own input, so it stays in `workflows::user::inventory`.)
#![deny(unsafe_code)]

mod rows;
pub use rows::{create_community, record_media_upload, seed_rows};
pub mod simulator;
pub mod user;

use futures::StreamExt;
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;
use workflows::community::TableCount;

use activities::redis::{Cache, CacheError};
use activities::s3::{ObjectStore, ObjectStoreError};
use activities::store::{Store, StoreError};
use activities::taxonomy::PrefixRoot;
use serving::{ServingError, acquire_serving_write};

/// Writes per serving-write lease while seeding: one lease guards a batch, not each write, so
/// seeding 50,000 versions does not mint 50,000 lease rows.
const WRITES_PER_LEASE: usize = 200;

/// How much to write for one community.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedPlan {
    /// Distinct object hashes; each gets a key under every tenant prefix family.
    pub objects: u32,
    /// Versions written per key.
    pub versions: u32,
    /// Media keys that get a delete marker on top of their versions.
    pub delete_markers: u32,
    /// Rows per tenant table.
    pub rows: u32,
    /// Keys in the Redis namespace.
    pub redis_keys: u32,
    /// S3 writes in flight at once.
    pub parallelism: usize,
}

/// What seeding wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeedReport {
    /// The community.
    pub community_id: Uuid,
    /// Its host.
    pub host: String,
    /// Rows inserted per tenant table.
    pub rows: Vec<TableCount>,
    /// Object versions written (not counting delete markers).
    pub object_versions: u64,
    /// Delete markers written.
    pub delete_markers: u64,
    /// Bytes of object versions.
    pub bytes: u64,
    /// Redis keys written.
    pub redis_keys: u64,
}

/// Why seeding failed.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// Postgres.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// S3.
    #[error(transparent)]
    Objects(#[from] ObjectStoreError),
    /// Redis.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The serving-write lease was refused (the community is quiescing or fenced) or lost.
    #[error(transparent)]
    Serving(#[from] ServingError),
}

/// The exact writer key of `root` for content hash `h` of `community`.
pub fn writer_key(root: PrefixRoot, community: Uuid, h: &str) -> String {
    match root {
        PrefixRoot::Media => format!("media/{community}/{h}"),
        PrefixRoot::Thumbs => format!("thumbs/{community}/{h}.webp"),
        PrefixRoot::Meta => format!("_meta/{community}/{h}.json"),
    }
}

/// A deterministic 64-hex content hash for object `n` of `community`.
pub fn content_hash(community: Uuid, n: u32) -> String {
    hex::encode(Sha256::digest(format!("{community}/{n}").as_bytes()))
}

/// Creates the community if needed and writes the plan's rows, object versions, delete markers
/// and Redis keys.
pub async fn seed_community(
    store: &Store,
    objects: &ObjectStore,
    cache: &Cache,
    host: &str,
    plan: SeedPlan,
) -> Result<SeedReport, SeedError> {
    let community = create_community(store, host).await?;
    let rows = seed_rows(store, community.id, u64::from(plan.rows)).await?;

    let mut puts = Vec::new();
    for n in 0..plan.objects {
        let h = content_hash(community.id, n);
        for root in PrefixRoot::ALL {
            for version in 0..plan.versions {
                let body = format!("{root:?} {h} v{version}").into_bytes();
                puts.push((writer_key(root, community.id, &h), body));
            }
        }
    }
    let bytes: u64 = puts.iter().map(|(_, b)| b.len() as u64).sum();
    let object_versions = puts.len() as u64;
    for batch in puts.chunks(WRITES_PER_LEASE) {
        let guard = acquire_serving_write(store, community.id, "demo_seed_s3_put").await?;
        let written = guard
            .protect(async {
                let mut results = futures::stream::iter(batch.iter().cloned())
                    .map(|(key, body)| async move { objects.put_object(&key, body).await })
                    .buffer_unordered(plan.parallelism.max(1));
                while let Some(result) = results.next().await {
                    result?;
                }
                Ok::<(), ObjectStoreError>(())
            })
            .await?;
        written?;
        guard.finish().await?;
    }

    let marked = plan.delete_markers.min(plan.objects);
    if marked > 0 {
        let guard = acquire_serving_write(store, community.id, "demo_seed_s3_delete").await?;
        let result = guard
            .protect(async {
                for n in 0..marked {
                    let key = writer_key(
                        PrefixRoot::Media,
                        community.id,
                        &content_hash(community.id, n),
                    );
                    objects.put_delete_marker(&key).await?;
                }
                Ok::<(), ObjectStoreError>(())
            })
            .await?;
        result?;
        guard.finish().await?;
    }

    if plan.redis_keys > 0 {
        let guard = acquire_serving_write(store, community.id, "demo_seed_redis").await?;
        let result = guard
            .protect(async {
                for n in 0..plan.redis_keys {
                    let key = format!("buzz:{}:session:{n}", community.id);
                    cache
                        .set(&key, format!("demo session {n}").as_bytes())
                        .await?;
                }
                Ok::<(), CacheError>(())
            })
            .await?;
        result?;
        guard.finish().await?;
    }

    Ok(SeedReport {
        community_id: community.id,
        host: community.host,
        rows,
        object_versions,
        delete_markers: u64::from(marked),
        bytes,
        redis_keys: u64::from(plan.redis_keys),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use activities::taxonomy::is_tenant_owned_key;

    #[test]
    fn every_seeded_key_has_an_exact_writer_shape_of_its_community() {
        let community = Uuid::new_v4();
        for n in 0..5 {
            let h = content_hash(community, n);
            for root in PrefixRoot::ALL {
                assert!(is_tenant_owned_key(
                    community,
                    &writer_key(root, community, &h)
                ));
                assert!(!is_tenant_owned_key(
                    Uuid::new_v4(),
                    &writer_key(root, community, &h)
                ));
            }
        }
    }
}
