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
// … and what several phases share: the failure type, heartbeats, the irreversible marker, the
// per-prefix pacer, version listing and upload scans.
mod chunk_writer;
mod failure;
mod heartbeat;
mod listing;
mod marker;
mod pacing;
mod uploads;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use workflows::community::{
    AbortInput, AbortOutcome, AbortRequest, ApprovalInput, ApprovalRecord, CacheReport,
    DeleteChunksInput, DeleteProgress, DrainOutcome, EventInput, FenceOutcome, InventorySummary,
    LateVersionsReport, ManifestSummary, PurgeInput, PurgeReport, RegisterInput, RegisteredRequest,
    RequestRef, VerificationReport,
};

use crate::cache::Cache;
use crate::metrics::DeletionMetrics;
use crate::objects::ObjectStore;
use crate::store::Store;

pub use failure::{PhaseError, PhaseResult, into_activity_error};
pub use heartbeat::PhaseProgress;
pub use pacing::{DEFAULT_DELETES_PER_SECOND_PER_PREFIX, PrefixPacer};

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
    /// Versions deleted per second per tenant prefix, at most (0: unlimited); real S3
    /// throttles at 3,500 DELETEs per second per prefix.
    pub deletes_per_second_per_prefix: u32,
    /// Where the activities count what they did (disabled by default).
    pub metrics: DeletionMetrics,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            fence_wait: Duration::from_secs(20),
            manifest_chunk_entries: DEFAULT_MANIFEST_CHUNK_ENTRIES,
            deletes_per_second_per_prefix: DEFAULT_DELETES_PER_SECOND_PER_PREFIX,
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
            pacer: Arc::new(PrefixPacer::new(settings.deletes_per_second_per_prefix)),
            settings,
            archive: None,
        }
    }

    /// The same activities copying every signed receipt to `archive` (an object-lock bucket).
    pub fn with_receipt_archive(mut self, archive: ObjectStore) -> Self {
        self.archive = Some(archive);
        self
    }

    /// Runs one activity body, records its duration and outcome, and maps its failure.
    async fn timed<T>(
        &self,
        ctx: &ActivityContext,
        work: impl Future<Output = PhaseResult<T>>,
    ) -> Result<T, ActivityError> {
        self.settings
            .metrics
            .timed(&ctx.info().activity_type, work)
            .await
            .map_err(into_activity_error)
    }
}

#[activities]
impl CommunityActivities {
    /// Records the request row (at most one open per community; unknown host refused).
    #[activity(definition = workflows::community::Register)]
    pub async fn register(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RegisterInput,
    ) -> Result<RegisteredRequest, ActivityError> {
        self.timed(&ctx, register::register(&self, &ctx, input))
            .await
    }

    /// Takes and freezes the inventory with its digest.
    #[activity(definition = workflows::community::Inventory)]
    pub async fn inventory(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RequestRef,
    ) -> Result<InventorySummary, ActivityError> {
        self.timed(&ctx, inventory::inventory(&self, &ctx, input))
            .await
    }

    /// Persists approval evidence bound to the frozen digest.
    #[activity(definition = workflows::community::RecordApproval)]
    pub async fn record_approval(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ApprovalInput,
    ) -> Result<ApprovalRecord, ActivityError> {
        self.timed(&ctx, approval::record_approval(&self, &ctx, input))
            .await
    }

    /// Appends an operator event to the audit trail.
    #[activity(definition = workflows::community::RecordEvent)]
    pub async fn record_event(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: EventInput,
    ) -> Result<(), ActivityError> {
        self.timed(&ctx, approval::record_event(&self, &ctx, input))
            .await
    }

    /// Checks list permission and catalog drift.
    #[activity(definition = workflows::community::Preflight)]
    pub async fn preflight(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RequestRef,
    ) -> Result<(), ActivityError> {
        self.timed(&ctx, preflight::preflight(&self, &ctx, input))
            .await
    }

    /// Quiesces, then fences once no serving-write lease is live.
    #[activity(definition = workflows::community::Fence)]
    pub async fn fence(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RequestRef,
    ) -> Result<FenceOutcome, ActivityError> {
        self.timed(&ctx, fence::fence(&self, &ctx, input)).await
    }

    /// Disconnects relays and requires serving writes drained.
    #[activity(definition = workflows::community::Drain)]
    pub async fn drain(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RequestRef,
    ) -> Result<DrainOutcome, ActivityError> {
        self.timed(&ctx, drain::drain(&self, &ctx, input)).await
    }

    /// Streams the post-drain listing into manifest chunks and binds it.
    #[activity(definition = workflows::community::FreezeManifest)]
    pub async fn freeze_manifest(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RequestRef,
    ) -> Result<ManifestSummary, ActivityError> {
        self.timed(&ctx, freeze::freeze_manifest(&self, &ctx, input))
            .await
    }

    /// Deletes pending chunks by explicit version id and stamps them.
    #[activity(definition = workflows::community::DeleteChunks)]
    pub async fn delete_chunks(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: DeleteChunksInput,
    ) -> Result<DeleteProgress, ActivityError> {
        self.timed(&ctx, delete::delete_chunks(&self, &ctx, input))
            .await
    }

    /// Batched row purge, then the community row.
    #[activity(definition = workflows::community::PurgePostgres)]
    pub async fn purge_postgres(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: PurgeInput,
    ) -> Result<PurgeReport, ActivityError> {
        self.timed(&ctx, purge_rows::purge_postgres(&self, &ctx, input))
            .await
    }

    /// SCAN + UNLINK of the community namespace.
    #[activity(definition = workflows::community::PurgeCache)]
    pub async fn purge_cache(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RequestRef,
    ) -> Result<CacheReport, ActivityError> {
        self.timed(&ctx, purge_cache::purge_cache(&self, &ctx, input))
            .await
    }

    /// The absence proof.
    #[activity(definition = workflows::community::Verify)]
    pub async fn verify(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RequestRef,
    ) -> Result<VerificationReport, ActivityError> {
        self.timed(&ctx, verify::verify(&self, &ctx, input)).await
    }

    /// Deletes object versions that appeared after the freeze, as late manifest chunks.
    #[activity(definition = workflows::community::DeleteLateVersions)]
    pub async fn delete_late_versions(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RequestRef,
    ) -> Result<LateVersionsReport, ActivityError> {
        self.timed(
            &ctx,
            late_versions::delete_late_versions(&self, &ctx, input),
        )
        .await
    }

    /// Marks the request retention-pending.
    #[activity(definition = workflows::community::Complete)]
    pub async fn complete(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RequestRef,
    ) -> Result<(), ActivityError> {
        self.timed(&ctx, complete::complete(&self, input)).await
    }

    /// Lifts the fence and ends the request aborted.
    #[activity(definition = workflows::community::Abort)]
    pub async fn abort(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: AbortInput,
    ) -> Result<AbortOutcome, ActivityError> {
        self.timed(&ctx, abort::abort(&self, input)).await
    }

    /// Verifies and records an abort's signature before the abort counts.
    #[activity(definition = workflows::community::AcceptAbort)]
    pub async fn accept_abort(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: AbortInput,
    ) -> Result<AbortRequest, ActivityError> {
        self.timed(&ctx, abort::accept_abort(&self, &ctx, input))
            .await
    }
}

#[cfg(test)]
mod tests {
    use temporalio_common::ActivityDefinition;
    use workflows::community as contract;

    use super::CommunityActivities as Impl;

    /// The worker registers every activity under the name the workflow schedules it by.
    #[test]
    fn every_contract_is_implemented_under_its_own_name() {
        let implemented = [
            (Impl::register.name(), contract::Register.name()),
            (Impl::inventory.name(), contract::Inventory.name()),
            (
                Impl::record_approval.name(),
                contract::RecordApproval.name(),
            ),
            (Impl::record_event.name(), contract::RecordEvent.name()),
            (Impl::preflight.name(), contract::Preflight.name()),
            (Impl::fence.name(), contract::Fence.name()),
            (Impl::drain.name(), contract::Drain.name()),
            (
                Impl::freeze_manifest.name(),
                contract::FreezeManifest.name(),
            ),
            (Impl::delete_chunks.name(), contract::DeleteChunks.name()),
            (Impl::purge_postgres.name(), contract::PurgePostgres.name()),
            (Impl::purge_cache.name(), contract::PurgeCache.name()),
            (Impl::verify.name(), contract::Verify.name()),
            (
                Impl::delete_late_versions.name(),
                contract::DeleteLateVersions.name(),
            ),
            (Impl::complete.name(), contract::Complete.name()),
            (Impl::abort.name(), contract::Abort.name()),
            (Impl::accept_abort.name(), contract::AcceptAbort.name()),
        ];
        let names: Vec<&str> = implemented.iter().map(|(i, _)| *i).collect();
        for (implementation, declared) in implemented {
            assert_eq!(implementation, declared);
        }
        assert_eq!(names, contract::ACTIVITY_NAMES.to_vec());
    }
}
