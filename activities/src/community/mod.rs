//! The `CommunityDeletion` activities: each one implements a contract declared in
//! `workflows::community`, claims the request in Postgres, and makes every progress write and
//! every irreversible call conditional on the generation it claimed.

// One file per phase, named as the phase (in the order the workflow runs them) …
mod abort;
mod approval;
mod complete;
mod delete;
mod drain;
mod fence;
mod freeze;
mod inventory;
mod late_versions;
mod preflight;
mod purge_cache;
mod purge_rows;
mod register;
mod verify;
// … and what several phases share: the claim that opens each phase, the failure type,
// heartbeats, the irreversible marker, the per-prefix pacer, version listing and upload scans.
mod chunk_writer;
mod claim;
mod connection_budget;
mod failure;
mod fence_gate;
mod heartbeat;
mod listing;
mod marker;
mod own_task;
mod pacing;
mod uploads;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::TryFutureExt;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use workflows::community::{
    self as contract, AbortInput, AbortOutcome, AbortRequest, ApprovalInput, ApprovalRecord,
    CacheReport, DeleteChunksInput, DeleteProgress, DrainOutcome, EventInput, FenceOutcome,
    InventorySummary, LateVersionsReport, ManifestSummary, PurgeInput, PurgeReport, RegisterInput,
    RegisteredRequest, RequestRef, VerificationReport,
};

use crate::activity_impl::activities_impl;
use crate::identity::consumer_of;
use crate::metrics::DeletionMetrics;
use crate::redis::Cache;
use crate::s3::ObjectStore;
use crate::store::Store;

pub use connection_budget::CONNECTIONS_PER_ATTEMPT;
pub use failure::{PhaseError, PhaseResult, into_activity_error};
pub use heartbeat::PhaseProgress;
pub use listing::PAGES_IN_MEMORY;
pub use pacing::{
    DEFAULT_DELETES_PER_SECOND_FLOOR, DEFAULT_DELETES_PER_SECOND_PER_PREFIX, PrefixPacer,
    RateBounds,
};

/// Default versions per manifest chunk: one DeleteObjects call's worth, so a worker holds a
/// listing page or a chunk of the same size. Larger chunks raise the worker's memory, not its
/// speed: on a 50,000-version tenant, peak RSS was about 15 MB higher at 10,000 entries.
pub const DEFAULT_MANIFEST_CHUNK_ENTRIES: usize = 1_000;

/// Knobs of the activities that are not part of the workflow's input.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long one fence attempt waits for live serving-write leases before failing
    /// transiently (Temporal then retries with backoff).
    pub fence_wait: Duration,
    /// Versions per manifest chunk (at most 10,000; default [`DEFAULT_MANIFEST_CHUNK_ENTRIES`]).
    pub manifest_chunk_entries: usize,
    /// The bounds of each tenant prefix's delete rate, versions per second: it starts at the
    /// ceiling (0: unpaced until the first throttle) and adapts to `SlowDown` down to the floor;
    /// real S3 throttles at about 3,500 DELETEs per second per prefix.
    pub delete_rate: RateBounds,
    /// Where the activities count what they did (disabled by default).
    pub metrics: DeletionMetrics,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            fence_wait: Duration::from_secs(20),
            manifest_chunk_entries: DEFAULT_MANIFEST_CHUNK_ENTRIES,
            delete_rate: RateBounds::default(),
            metrics: DeletionMetrics::disabled(),
        }
    }
}

/// The three stores a community deletion touches, plus settings.
#[derive(Debug, Clone)]
pub struct CommunityActivities {
    store: Store,
    objects: ObjectStore,
    cache: Cache,
    settings: Settings,
    /// Paces DeleteObjects per prefix across every deletion this worker runs.
    pacer: Arc<PrefixPacer>,
    /// The object-lock bucket signed receipts are copied to, when configured.
    archive: Option<ObjectStore>,
}

impl CommunityActivities {
    /// Binds the activities to their stores.
    pub fn new(store: Store, objects: ObjectStore, cache: Cache, settings: Settings) -> Self {
        Self {
            store,
            objects,
            cache,
            pacer: Arc::new(PrefixPacer::new(settings.delete_rate)),
            settings,
            archive: None,
        }
    }

    /// The same activities copying every signed receipt to `archive` (an object-lock bucket).
    pub fn with_receipt_archive(mut self, archive: ObjectStore) -> Self {
        self.archive = Some(archive);
        self
    }

    /// Runs one phase of an activity attempt, records its duration and outcome, and maps its
    /// failure.
    async fn timed<T>(
        &self,
        ctx: &ActivityContext,
        phase: impl Future<Output = PhaseResult<T>>,
    ) -> Result<T, ActivityError> {
        self.settings
            .metrics
            .timed(&ctx.info().activity_type, phase)
            .await
            .map_err(into_activity_error)
    }
}

/// One attempt of a phase: the activities and the attempt's context, which every phase function
/// takes first.
type Attempt<'a> = (&'a CommunityActivities, &'a ActivityContext);

activities_impl! {
    impl CommunityActivities, each run by timed with |acts, ctx, input|;
    /// Records the request row (at most one open per community; unknown host refused).
    register(RegisterInput) -> RegisteredRequest = contract::Register => register::register((acts, &ctx), input);
    /// Takes and freezes the inventory with its digest.
    inventory(RequestRef) -> InventorySummary = contract::Inventory => inventory::inventory((acts, &ctx), input);
    /// Persists approval evidence bound to the frozen digest (the store re-checks digest,
    /// two-person rule and stage).
    record_approval(ApprovalInput) -> ApprovalRecord = contract::RecordApproval => acts.store.record_approval(input.request_id, &input.approval, &consumer_of(&ctx)).map_err(PhaseError::from);
    /// Appends an operator event to the audit trail.
    record_event(EventInput) -> () = contract::RecordEvent => approval::record_event((acts, &ctx), input);
    /// Checks list permission and catalog drift.
    preflight(RequestRef) -> () = contract::Preflight => preflight::preflight((acts, &ctx), input);
    /// Quiesces, then fences once no serving-write lease is live.
    fence(RequestRef) -> FenceOutcome = contract::Fence => fence::fence((acts, &ctx), input);
    /// Disconnects relays and requires serving writes drained.
    drain(RequestRef) -> DrainOutcome = contract::Drain => drain::drain((acts, &ctx), input);
    /// Streams the post-drain listing into manifest chunks and binds it.
    freeze_manifest(RequestRef) -> ManifestSummary = contract::FreezeManifest => freeze::freeze_manifest((acts, &ctx), input);
    /// Deletes pending chunks by explicit version id and stamps them.
    delete_chunks(DeleteChunksInput) -> DeleteProgress = contract::DeleteChunks => delete::delete_chunks((acts, &ctx), input);
    /// Batched row purge, then the community row.
    purge_postgres(PurgeInput) -> PurgeReport = contract::PurgePostgres => purge_rows::purge_postgres((acts, &ctx), input);
    /// SCAN + UNLINK of the community namespace.
    purge_cache(RequestRef) -> CacheReport = contract::PurgeCache => purge_cache::purge_cache((acts, &ctx), input);
    /// The absence proof.
    verify(RequestRef) -> VerificationReport = contract::Verify => verify::verify((acts, &ctx), input);
    /// Deletes object versions that appeared after the freeze, as late manifest chunks.
    delete_late_versions(RequestRef) -> LateVersionsReport = contract::DeleteLateVersions => late_versions::delete_late_versions((acts, &ctx), input);
    /// Marks the request retention-pending.
    complete(RequestRef) -> () = contract::Complete => complete::complete((acts, &ctx), input);
    /// Lifts the fence and ends the request aborted.
    abort(AbortInput) -> AbortOutcome = contract::Abort => abort::abort((acts, &ctx), input);
    /// Verifies and records an abort's signature before the abort counts; returns the abort
    /// under the registered name.
    accept_abort(AbortInput) -> AbortRequest = contract::AcceptAbort => acts.store.accept_abort(input.request_id, &input.abort, &consumer_of(&ctx)).map_err(PhaseError::from);
}

#[cfg(test)]
mod tests {
    use workflows::community::ACTIVITY_NAMES;

    use super::CommunityActivities;

    /// The worker registers every activity under the name the workflow schedules it by.
    #[test]
    fn every_contract_is_implemented_under_its_own_name() {
        CommunityActivities::assert_registered_as(&ACTIVITY_NAMES);
    }
}
