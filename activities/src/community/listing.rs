//! Streams the versions under the community's three tenant prefixes, fail-closed on unknown
//! key shapes. Memory stays bounded at one listing page plus one buffered chunk: the full key
//! set is never held, whatever the tenant's size.

use std::collections::{BTreeMap, HashSet};

use uuid::Uuid;
use workflows::community::PrefixSummary;

use crate::s3::{ObjectStore, ObjectStoreError, ObjectVersion, S3Operation, VersionPage};
use crate::store::PrefixResume;
use crate::taxonomy::{KeyStreamDigest, ManifestEntry, is_tenant_owned_key, tenant_prefixes};

use super::failure::{PhaseError, PhaseResult};
use super::heartbeat::ProgressCell;

/// Versions per listing page (the S3 maximum).
pub const LIST_PAGE_SIZE: i32 = 1000;

/// Receives every listed version, in listing order, prefix by prefix.
pub trait VersionSink {
    /// Called for each version of `prefix`, with its manifest entry and that entry's canonical
    /// encoding (computed once by the scan, which folds it into the prefix's digest).
    fn accept(
        &mut self,
        prefix: &str,
        version: &ObjectVersion,
        entry: &ManifestEntry,
        encoded: String,
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
    async fn accept(
        &mut self,
        _prefix: &str,
        _version: &ObjectVersion,
        _entry: &ManifestEntry,
        _encoded: String,
    ) -> PhaseResult<()> {
        Ok(())
    }
    async fn prefix_done(&mut self, _prefix: &str) -> PhaseResult<()> {
        Ok(())
    }
}

/// Listing pages of the three prefixes held at most between the listers and the sink.
const PAGES_AHEAD: usize = 6;

/// What the scan of one prefix has summed so far.
struct PrefixScan {
    prefix: String,
    digest: KeyStreamDigest,
    bytes: u64,
    /// Versions a resumed scan lists again but a previous attempt already stored: skipped.
    stored_beyond: HashSet<String>,
    done: bool,
}

/// Lists every version and delete marker under the community's tenant prefixes, checking each
/// key's exact shape, and returns one summary (count, bytes, order-independent digest) per prefix,
/// in the prefixes' order.
///
/// The three prefixes are listed side by side (one lister task each, a few pages ahead of the
/// sink), so the listing takes as long as the largest prefix, not the sum, and overlaps with what
/// the sink does with each page. The sink sees each prefix's versions in listing order, the
/// prefixes' pages interleaved, and `prefix_done` once a prefix is listed to its end. Memory
/// stays bounded by [`PAGES_AHEAD`] pages plus what the sink buffers. Cost is O(tenant versions)
/// regardless of the bucket's size; the first failure ends the scan and stops every lister.
pub async fn scan_tenant_prefixes(
    objects: &ObjectStore,
    community: Uuid,
    progress: &ProgressCell,
    sink: &mut impl VersionSink,
) -> PhaseResult<Vec<PrefixSummary>> {
    scan_tenant_prefixes_from(objects, community, progress, sink, BTreeMap::new()).await
}

/// [`scan_tenant_prefixes`] continued from what a previous attempt stored: each prefix of
/// `resumed` starts from its stored digest, bytes and count and lists only the keys after its
/// resume key, skipping the versions it lists again that were stored already. The summaries are
/// those of the whole listing, as if it had run in one go. The store only resumes the
/// community's own prefixes (`Store::freeze_resume_point`); any other entry of `resumed` is
/// ignored.
pub async fn scan_tenant_prefixes_from(
    objects: &ObjectStore,
    community: Uuid,
    progress: &ProgressCell,
    sink: &mut impl VersionSink,
    mut resumed: BTreeMap<String, PrefixResume>,
) -> PhaseResult<Vec<PrefixSummary>> {
    let mut starts = Vec::new();
    let mut scans: Vec<PrefixScan> = tenant_prefixes(community)
        .into_iter()
        .map(|prefix| {
            let resume = resumed.remove(&prefix).unwrap_or_default();
            starts.push(resume.after_key);
            PrefixScan {
                prefix,
                digest: resume.digest,
                bytes: resume.bytes,
                stored_beyond: resume.stored_beyond,
                done: false,
            }
        })
        .collect();
    let already: u64 = scans.iter().map(|scan| scan.digest.count()).sum();
    if already > 0 {
        progress.update(|p| {
            p.step = "listing on after the versions a previous attempt stored".to_owned();
            p.done = already;
            p.unit = "versions listed".to_owned();
        });
    }
    let (pages, mut listed) = tokio::sync::mpsc::channel(PAGES_AHEAD);
    // Dropped on return, which aborts every lister still running.
    let mut listers = tokio::task::JoinSet::new();
    for (lane, (scan, start)) in scans.iter().zip(starts).enumerate() {
        listers.spawn(list_prefix(
            objects.clone(),
            scan.prefix.clone(),
            lane,
            start,
            pages.clone(),
        ));
    }
    drop(pages);
    while let Some((lane, page)) = listed.recv().await {
        let page: VersionPage = page?;
        let Some(scan) = scans.get_mut(lane) else {
            continue;
        };
        for version in &page.entries {
            if !is_tenant_owned_key(community, &version.key) {
                return Err(PhaseError::UnknownKeyShape {
                    prefix: scan.prefix.clone(),
                    key: version.key.clone(),
                });
            }
            let entry = version.manifest_entry();
            let encoded = entry.encode();
            if !scan.stored_beyond.is_empty() && scan.stored_beyond.remove(&encoded) {
                continue;
            }
            scan.digest.fold_encoded(&encoded);
            scan.bytes = scan.bytes.saturating_add(version.size);
            sink.accept(&scan.prefix, version, &entry, encoded).await?;
        }
        progress.update(|p| {
            p.step = "listing the tenant's prefixes side by side".to_owned();
            p.done = p.done.saturating_add(page.entries.len() as u64);
            p.unit = "versions listed".to_owned();
        });
        if page.next.is_none() {
            sink.prefix_done(&scan.prefix).await?;
            scan.done = true;
        }
    }
    // Every lister has ended; one that ended without its last page panicked or was cancelled.
    if scans.iter().any(|scan| !scan.done) {
        return Err(ObjectStoreError::IncompleteResponse {
            operation: S3Operation::ListObjectVersions,
            field: "the rest of a prefix's listing (its lister stopped)",
        }
        .into());
    }
    Ok(scans
        .into_iter()
        .map(|scan| {
            let (keys_digest, versions) = scan.digest.finish();
            PrefixSummary {
                prefix: scan.prefix,
                versions,
                bytes: scan.bytes,
                keys_digest,
            }
        })
        .collect())
}

/// Lists `prefix` page by page into `pages`, tagged with its `lane`, from its first key or only
/// the keys after `after_key`; stops after a failure (sent on) or when the scan stopped
/// listening.
async fn list_prefix(
    objects: ObjectStore,
    prefix: String,
    lane: usize,
    mut after_key: Option<String>,
    pages: tokio::sync::mpsc::Sender<(usize, Result<VersionPage, ObjectStoreError>)>,
) {
    let mut marker = None;
    // A resumed listing starts at the key it resumes after: servers differ on whether that key's
    // own versions are listed again (the local gateway lists them, AWS S3 does not), so entries
    // at or before it are dropped here, whichever the server does.
    let resume_after = after_key.clone();
    loop {
        let mut page = match after_key.take() {
            Some(key) => {
                objects
                    .list_versions_after_key(&prefix, key, LIST_PAGE_SIZE)
                    .await
            }
            None => {
                objects
                    .list_versions_page(&prefix, marker.take(), LIST_PAGE_SIZE)
                    .await
            }
        };
        if let (Some(after), Ok(page)) = (&resume_after, &mut page) {
            page.entries
                .retain(|version| version.key.as_str() > after.as_str());
        }
        let next = match &page {
            Ok(page) => page.next.clone(),
            Err(_) => None,
        };
        if pages.send((lane, page)).await.is_err() {
            return;
        }
        match next {
            Some(next) => marker = Some(next),
            None => return,
        }
    }
}
