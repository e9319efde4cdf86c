//! Streams the versions under the community's three tenant prefixes, fail-closed on unknown
//! key shapes. Memory stays bounded at one listing page plus one buffered chunk: the full key
//! set is never held, whatever the tenant's size.

use uuid::Uuid;
use workflows::community::PrefixSummary;

use crate::s3::{ObjectStore, ObjectVersion};
use crate::taxonomy::{KeyStreamDigest, is_tenant_owned_key, tenant_prefixes};

use super::failure::{PhaseError, PhaseResult};
use super::heartbeat::ProgressCell;

/// Versions per listing page (the S3 maximum).
pub const LIST_PAGE_SIZE: i32 = 1000;

/// Receives every listed version, in listing order, prefix by prefix.
pub trait VersionSink {
    /// Called for each version of `prefix`.
    fn accept(
        &mut self,
        prefix: &str,
        version: &ObjectVersion,
    ) -> impl std::future::Future<Output = PhaseResult<()>> + Send;
    /// Called once a prefix is fully listed (flush what is buffered for it).
    fn prefix_done(
        &mut self,
        prefix: &str,
    ) -> impl std::future::Future<Output = PhaseResult<()>> + Send;
}

/// A sink that keeps nothing (inventory only needs the summaries).
pub struct DiscardVersions;

impl VersionSink for DiscardVersions {
    async fn accept(&mut self, _prefix: &str, _version: &ObjectVersion) -> PhaseResult<()> {
        Ok(())
    }
    async fn prefix_done(&mut self, _prefix: &str) -> PhaseResult<()> {
        Ok(())
    }
}

/// Lists every version and delete marker under the community's tenant prefixes, checking each
/// key's exact shape, and returns one summary (count, bytes, order-independent digest) per prefix.
///
/// Cost is O(tenant versions) regardless of the bucket's size.
pub async fn scan_tenant_prefixes(
    objects: &ObjectStore,
    community: Uuid,
    progress: &ProgressCell,
    sink: &mut impl VersionSink,
) -> PhaseResult<Vec<PrefixSummary>> {
    let mut summaries = Vec::with_capacity(3);
    for prefix in tenant_prefixes(community) {
        let mut digest = KeyStreamDigest::new();
        let mut bytes: u64 = 0;
        let mut marker = None;
        loop {
            let page = objects
                .list_versions_page(&prefix, marker, LIST_PAGE_SIZE)
                .await?;
            for version in &page.entries {
                if !is_tenant_owned_key(community, &version.key) {
                    return Err(PhaseError::UnknownKeyShape {
                        prefix: prefix.clone(),
                        key: version.key.clone(),
                    });
                }
                digest.fold(&version.manifest_entry());
                bytes = bytes.saturating_add(version.size);
                sink.accept(&prefix, version).await?;
            }
            progress.update(|p| {
                p.step = format!("listing {prefix}");
                p.done = p.done.saturating_add(page.entries.len() as u64);
                p.unit = "versions listed".to_owned();
            });
            match page.next {
                Some(next) => marker = Some(next),
                None => break,
            }
        }
        sink.prefix_done(&prefix).await?;
        let (keys_digest, versions) = digest.finish();
        summaries.push(PrefixSummary {
            prefix,
            versions,
            bytes,
            keys_digest,
        });
    }
    Ok(summaries)
}
