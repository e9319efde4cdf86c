//! Streams the versions under the community's three tenant prefixes, fail-closed on unknown
//! key shapes. Each prefix is listed in key ranges side by side (its lanes,
//! [`crate::taxonomy::listing_lanes`]). Memory stays bounded at a few listing pages plus one
//! buffered chunk per lane: the full key set is never held, whatever the tenant's size.

use uuid::Uuid;
use workflows::community::PrefixSummary;

use crate::s3::{ObjectStore, ObjectStoreError, ObjectVersion, S3Operation, VersionPage};
use crate::store::PrefixResume;
use crate::taxonomy::{
    KeyStreamDigest, ListingLane, ManifestEntry, is_tenant_owned_key, lanes_cover_prefixes,
    listing_lanes, tenant_prefixes,
};

use super::failure::{PhaseError, PhaseResult};
use super::heartbeat::ProgressCell;

/// Versions per listing page (the S3 maximum).
pub const LIST_PAGE_SIZE: i32 = 1000;

/// Receives every listed version, in listing order within each lane.
pub trait VersionSink {
    /// Called for each version of `lane`, with its manifest entry and that entry's canonical
    /// encoding (computed once by the scan, which folds it into the prefix's digest).
    fn accept(
        &mut self,
        lane: &ListingLane,
        version: &ObjectVersion,
        entry: &ManifestEntry,
        encoded: String,
    ) -> impl std::future::Future<Output = PhaseResult<()>> + Send;
    /// Called once a lane is fully listed (flush what is buffered for it).
    fn lane_done(
        &mut self,
        lane: &ListingLane,
    ) -> impl std::future::Future<Output = PhaseResult<()>> + Send;
}

/// A sink that keeps nothing (inventory only needs the summaries).
pub struct DiscardVersions;

impl VersionSink for DiscardVersions {
    async fn accept(
        &mut self,
        _lane: &ListingLane,
        _version: &ObjectVersion,
        _entry: &ManifestEntry,
        _encoded: String,
    ) -> PhaseResult<()> {
        Ok(())
    }
    async fn lane_done(&mut self, _lane: &ListingLane) -> PhaseResult<()> {
        Ok(())
    }
}

/// Listing pages held at most at once, from the request that fetches a page until the sink has
/// taken every version of it: bounds the scan's memory whatever the number of lanes (a lane
/// waits for a page's room before it asks for the page). Eight keeps eight listing calls in
/// flight, enough to hide the listing's latency behind the work on the pages already here.
pub const PAGES_IN_MEMORY: usize = 8;

/// A listed page (or the lane's failure), the lane's index, and the room it takes in memory.
type ListedPage = (
    usize,
    Result<VersionPage, ObjectStoreError>,
    tokio::sync::OwnedSemaphorePermit,
);

/// What the scan of one lane has summed so far.
struct LaneScan {
    lane: ListingLane,
    digest: KeyStreamDigest,
    bytes: u64,
    /// Versions a resumed scan lists again but a previous attempt already stored: skipped.
    stored_beyond: std::collections::HashSet<String>,
    done: bool,
}

/// Lists every version and delete marker under the community's tenant prefixes, checking each
/// key's exact shape, and returns one summary (count, bytes, order-independent digest) per prefix,
/// in the prefixes' order.
///
/// Every lane of the three prefixes is listed side by side (one lister task each, a few pages
/// ahead of the sink), so the listing takes as long as the largest lane, not the sum, and
/// overlaps with what the sink does with each page. The sink sees each lane's versions in listing
/// order, the lanes' pages interleaved, and `lane_done` once a lane is listed to its end. Memory
/// stays bounded by [`PAGES_IN_MEMORY`] pages plus what the sink buffers. Cost is O(tenant versions)
/// regardless of the bucket's size; the first failure ends the scan and stops every lister.
pub async fn scan_tenant_prefixes(
    objects: &ObjectStore,
    community: Uuid,
    progress: &ProgressCell,
    sink: &mut impl VersionSink,
) -> PhaseResult<Vec<PrefixSummary>> {
    let lanes = listing_lanes(community)
        .into_iter()
        .map(|lane| (lane, PrefixResume::default()))
        .collect();
    scan_lanes(objects, community, progress, sink, lanes).await
}

/// [`scan_tenant_prefixes`] over the given `lanes`, each continued from what a previous attempt
/// stored (`Store::freeze_resume_point`): a lane starts from its stored digest, bytes and count
/// and lists only the keys after its resume key, skipping the versions it lists again that were
/// stored already. The summaries are those of the whole listing, as if it had run in one go.
/// Refused before anything is listed unless the lanes cut each of the community's prefixes into
/// ranges that cover every key exactly once ([`lanes_cover_prefixes`]).
pub async fn scan_lanes(
    objects: &ObjectStore,
    community: Uuid,
    progress: &ProgressCell,
    sink: &mut impl VersionSink,
    lanes: Vec<(ListingLane, PrefixResume)>,
) -> PhaseResult<Vec<PrefixSummary>> {
    if !lanes_cover_prefixes(community, lanes.iter().map(|(lane, _)| lane)) {
        return Err(PhaseError::LanesIncomplete {
            lanes: lanes.iter().map(|(lane, _)| lane.label()).collect(),
        });
    }
    let mut starts = Vec::new();
    let mut scans: Vec<LaneScan> = lanes
        .into_iter()
        .map(|(lane, resume)| {
            starts.push(resume.after_key.or_else(|| lane.after.clone()));
            LaneScan {
                lane,
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
    let room = std::sync::Arc::new(tokio::sync::Semaphore::new(PAGES_IN_MEMORY));
    // Never full: a page is sent only with one of the room's permits.
    let (pages, mut listed) = tokio::sync::mpsc::channel(PAGES_IN_MEMORY);
    // Dropped on return, which aborts every lister still running.
    let mut listers = tokio::task::JoinSet::new();
    let mut stoppers = Vec::with_capacity(scans.len());
    for (index, (scan, start)) in scans.iter().zip(starts).enumerate() {
        stoppers.push(listers.spawn(list_lane(
            objects.clone(),
            scan.lane.clone(),
            index,
            start,
            room.clone(),
            pages.clone(),
        )));
    }
    drop(pages);
    // A lane that fails (the listing, or a key of unknown shape) stops alone: the others are
    // listed to their end, so what they hold reaches the sink (a freeze stores it, and its retry
    // lists only the failed lane on). The first lane failure is returned once they are.
    let mut failed: Option<PhaseError> = None;
    while let Some((index, page, _room)) = listed.recv().await {
        let Some(scan) = scans.get_mut(index) else {
            continue;
        };
        if scan.done {
            continue;
        }
        let checked = page.map_err(PhaseError::from).and_then(|page| {
            match page
                .entries
                .iter()
                .find(|version| !is_tenant_owned_key(community, &version.key))
            {
                Some(unknown) => Err(PhaseError::UnknownKeyShape {
                    prefix: scan.lane.prefix.clone(),
                    key: unknown.key.clone(),
                }),
                None => Ok(page),
            }
        });
        let page = match checked {
            Ok(page) => page,
            Err(error) => {
                scan.done = true;
                if let Some(stopper) = stoppers.get(index) {
                    stopper.abort();
                }
                failed.get_or_insert(error);
                continue;
            }
        };
        for version in &page.entries {
            let entry = version.manifest_entry();
            let encoded = entry.encode();
            if !scan.stored_beyond.is_empty() && scan.stored_beyond.remove(&encoded) {
                continue;
            }
            scan.digest.fold_encoded(&encoded);
            scan.bytes = scan.bytes.saturating_add(version.size);
            sink.accept(&scan.lane, version, &entry, encoded).await?;
        }
        progress.update(|p| {
            p.step = "listing the tenant's prefixes in key ranges side by side".to_owned();
            p.done = p.done.saturating_add(page.entries.len() as u64);
            p.unit = "versions listed".to_owned();
        });
        if page.next.is_none() {
            sink.lane_done(&scan.lane).await?;
            scan.done = true;
        }
    }
    if let Some(error) = failed {
        return Err(error);
    }
    // Every lister has ended; one that ended without its last page panicked or was cancelled.
    if scans.iter().any(|scan| !scan.done) {
        return Err(ObjectStoreError::IncompleteResponse {
            operation: S3Operation::ListObjectVersions,
            field: "the rest of a lane's listing (its lister stopped)",
        }
        .into());
    }
    Ok(tenant_prefixes(community)
        .into_iter()
        .map(|prefix| {
            let mut digest = KeyStreamDigest::new();
            let mut bytes = 0u64;
            for scan in scans.iter().filter(|scan| scan.lane.prefix == prefix) {
                digest.merge(&scan.digest);
                bytes = bytes.saturating_add(scan.bytes);
            }
            let (keys_digest, versions) = digest.finish();
            PrefixSummary {
                prefix,
                versions,
                bytes,
                keys_digest,
            }
        })
        .collect())
}

/// Lists `lane` page by page into `pages`, tagged with its `index` and holding a permit of
/// `room` each (taken before the page is asked for): from the lane's first key,
/// or only the keys after `start` (its lower bound, or where a previous attempt stopped), up to
/// its upper bound. A page holds only the lane's versions; the last one sent has no `next`. Stops
/// after a failure (sent on) or when the scan stopped listening.
async fn list_lane(
    objects: ObjectStore,
    lane: ListingLane,
    index: usize,
    mut start: Option<String>,
    room: std::sync::Arc<tokio::sync::Semaphore>,
    pages: tokio::sync::mpsc::Sender<ListedPage>,
) {
    let mut marker = None;
    // A listing started after a key: servers differ on whether that key's own versions are
    // listed again (the local gateway lists them, AWS S3 does not), so entries at or before it
    // are dropped here, whichever the server does.
    let start_after = start.clone();
    loop {
        // Room for the page before asking for it (the semaphore is never closed).
        let Ok(permit) = room.clone().acquire_owned().await else {
            return;
        };
        let mut page = match start.take() {
            Some(key) => {
                objects
                    .list_versions_after_key(&lane.prefix, key, LIST_PAGE_SIZE)
                    .await
            }
            None => {
                objects
                    .list_versions_page(&lane.prefix, marker.take(), LIST_PAGE_SIZE)
                    .await
            }
        };
        if let Ok(page) = &mut page {
            let passed_end = page.entries.iter().any(|v| lane.is_past(&v.key))
                || page
                    .next
                    .as_ref()
                    .is_some_and(|(next_key, _)| lane.is_past(next_key));
            page.entries.retain(|version| {
                lane.holds(&version.key)
                    && start_after
                        .as_deref()
                        .is_none_or(|after| version.key.as_str() > after)
            });
            if passed_end {
                page.next = None;
            }
        }
        let next = match &page {
            Ok(page) => page.next.clone(),
            Err(_) => None,
        };
        if pages.send((index, page, permit)).await.is_err() {
            return;
        }
        match next {
            Some(next) => marker = Some(next),
            None => return,
        }
    }
}
