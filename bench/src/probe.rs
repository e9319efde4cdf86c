//! What the S3 server allows: raw DeleteObjects throughput at several parallelism levels.
//!
//! Each level deletes its own freshly written versions (keys of the tenant shape under a
//! throw-away community id that has no rows), so no level deletes what another already did.
//! Only the DeleteObjects calls are timed; writing and listing are not.

use std::time::{Duration, Instant};

use activities::s3::ObjectStore;
use activities::taxonomy::{PrefixRoot, tenant_prefixes};
use anyhow::{Result, bail};
use demo::{content_hash, writer_key};
use futures::StreamExt;
use uuid::Uuid;

use crate::floor::{delete_calls, list_delete_calls};
use crate::plan::VERSIONS_PER_KEY;

/// One probe level's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeLevel {
    /// DeleteObjects calls in flight.
    pub parallelism: u32,
    /// Versions deleted.
    pub versions: u64,
    /// DeleteObjects calls issued.
    pub calls: u64,
    /// Time spent in the calls.
    pub elapsed: Duration,
}

impl ProbeLevel {
    /// Versions deleted per second.
    pub fn rate(&self) -> f64 {
        crate::report::per_second(self.versions, self.elapsed)
    }
}

/// Runs every level in order and returns their throughputs.
pub async fn run_probe(
    objects: &ObjectStore,
    levels: &[u32],
    versions: u32,
    seed_parallelism: usize,
) -> Result<Vec<ProbeLevel>> {
    let mut results = Vec::with_capacity(levels.len());
    for &parallelism in levels {
        let community = Uuid::new_v4();
        write_versions(objects, community, versions, seed_parallelism).await?;
        let calls = list_delete_calls(objects, community).await?;
        let call_count = calls.len() as u64;
        let started = Instant::now();
        let deleted = delete_calls(objects, calls, parallelism as usize).await?;
        let elapsed = started.elapsed();
        for prefix in tenant_prefixes(community) {
            if let Some(left) = objects.prefix_is_empty(&prefix).await? {
                bail!("probe left {}@{} behind", left.key, left.version_id);
            }
        }
        eprintln!(
            "probe: parallelism {parallelism:>2}: {deleted} versions in {:.1} s",
            elapsed.as_secs_f64()
        );
        results.push(ProbeLevel {
            parallelism,
            versions: deleted,
            calls: call_count,
            elapsed,
        });
    }
    Ok(results)
}

/// Writes about `versions` versions (two per key, keys spread over the three prefix families).
async fn write_versions(
    objects: &ObjectStore,
    community: Uuid,
    versions: u32,
    parallelism: usize,
) -> Result<()> {
    let keys = versions.div_ceil(3 * VERSIONS_PER_KEY).max(1);
    let puts = (0..keys).flat_map(|n| {
        let h = content_hash(community, n);
        PrefixRoot::ALL.into_iter().flat_map(move |root| {
            let key = writer_key(root, community, &h);
            (0..VERSIONS_PER_KEY).map(move |v| (key.clone(), format!("probe {v}").into_bytes()))
        })
    });
    let mut writes = futures::stream::iter(puts)
        .map(|(key, body)| async move { objects.put_object(&key, body).await })
        .buffer_unordered(parallelism.max(1));
    while let Some(written) = writes.next().await {
        written?;
    }
    Ok(())
}
