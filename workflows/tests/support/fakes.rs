//! In-memory stand-ins for the community activities, so the workflow's orchestration can be
//! tested alone. Each fake keeps what a real store would (fence state, generation, chunk
//! stamps, audit events) and can be told to hold, or to fail transiently or permanently.

// `#[activities]` adds a marker constant per activity; the worker registers them all and the
// tests never name them.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use temporalio_macros::activities;
use temporalio_sdk::ApplicationFailure;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use uuid::Uuid;
use workflows::community::{
    AbortInput, AbortOutcome, AbortRequest, ApprovalInput, ApprovalRecord, CacheReport,
    DeleteChunksInput, DeleteProgress, DrainOutcome, EventInput, FenceOutcome, InventorySummary,
    LateVersionsReport, ManifestSummary, PrefixSummary, PurgeInput, PurgeReport, RegisterInput,
    RegisteredRequest, RequestEvent, RequestRef, TableCount, VerificationReport,
};
use workflows::contract::{
    ABORT_REFUSED_FAILURE_TYPE, LATE_OBJECT_VERSION_FAILURE_TYPE, PERMANENT_FAILURE_TYPE,
    STALE_GENERATION_FAILURE_TYPE,
};

/// The digest the fake inventory freezes.
pub const FROZEN_DIGEST: &str =
    "sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
/// Versions in each fake manifest chunk.
pub const VERSIONS_PER_CHUNK: u64 = 10;

/// How an activity misbehaves: after `succeed_first` successful calls, the next `transient`
/// attempts fail retryably, then the next `permanent` attempts fail permanently, then the next
/// `stale` attempts fail with the stale-generation type (non-retryable if `stale_non_retryable`,
/// as an older worker sent it), as an attempt does when a late zombie claimed after it.
#[derive(Debug, Clone, Default)]
pub struct Misbehaviour {
    pub succeed_first: u32,
    pub transient: u32,
    pub permanent: u32,
    pub stale: u32,
    pub stale_non_retryable: bool,
    pub message: String,
}

/// What the fake stores hold, and what happened to them.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Attempts per activity name (every call, failed or not).
    pub attempts: BTreeMap<&'static str, u32>,
    /// Successful calls per activity name.
    pub successes: BTreeMap<&'static str, u32>,
    /// Activities that wait, heartbeating, until released (or cancelled).
    pub held: BTreeSet<&'static str>,
    /// Activities that start waiting like `held` once they have succeeded this many times.
    pub held_after: BTreeMap<&'static str, u32>,
    /// Activities that have started at least once.
    pub started: BTreeSet<&'static str>,
    /// Scripted failures per activity name.
    pub misbehaviour: BTreeMap<&'static str, Misbehaviour>,
    /// The audit trail, in order.
    pub events: Vec<RequestEvent>,
    /// Approvals persisted.
    pub approvals: Vec<ApprovalInput>,
    /// Aborts run.
    pub aborts: Vec<AbortInput>,
    /// Serving writes refused (quiescing set by `fence`, lifted by `abort`).
    pub quiescing: bool,
    /// The community is fenced.
    pub fenced: bool,
    /// The request's execution/fence generation.
    pub generation: u64,
    /// Chunks in the manifest `freeze_manifest` writes.
    pub chunks: u64,
    /// How often each chunk was stamped deleted.
    pub chunk_stamps: BTreeMap<u64, u32>,
    /// `complete` ran.
    pub completed: bool,
    /// Object versions that appeared after the freeze and are still there: `verify` fails on
    /// them with the late-object-version failure until `delete_late_versions` removes them.
    pub late_versions: Vec<String>,
    /// Late versions `delete_late_versions` deleted (all calls).
    pub late_versions_deleted: u64,
    /// The irreversible marker: `delete_chunks` sets it before deleting anything; `abort`
    /// refuses once it is set, as the store does.
    pub irreversible: bool,
    /// `delete_chunks` attempts that fail permanently before setting the marker (as a claim
    /// refused for mismatched evidence does).
    pub failures_before_marker: u32,
}

impl Ledger {
    fn holds(&self, activity: &str) -> bool {
        let successes = self.successes.get(activity).copied().unwrap_or(0);
        self.held.contains(activity)
            || self
                .held_after
                .get(activity)
                .is_some_and(|&after| successes >= after)
    }
}

/// The fake activities; clones share one ledger.
#[derive(Clone, Default)]
pub struct FakeStores {
    ledger: Arc<Mutex<Ledger>>,
}

impl FakeStores {
    /// Fakes whose manifest has `chunks` chunks.
    pub fn with_chunks(chunks: u64) -> Self {
        let fakes = Self::default();
        fakes.ledger().chunks = chunks;
        fakes
    }

    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes `activity` wait until [`FakeStores::release`].
    pub fn hold(&self, activity: &'static str) {
        self.ledger().held.insert(activity);
    }

    /// Makes `activity` wait once it has succeeded `successes` times.
    pub fn hold_after(&self, activity: &'static str, successes: u32) {
        self.ledger().held_after.insert(activity, successes);
    }

    pub fn release(&self, activity: &'static str) {
        let mut ledger = self.ledger();
        ledger.held.remove(activity);
        ledger.held_after.remove(activity);
    }

    pub fn release_all(&self) {
        let mut ledger = self.ledger();
        ledger.held.clear();
        ledger.held_after.clear();
    }

    pub fn misbehave(&self, activity: &'static str, misbehaviour: Misbehaviour) {
        self.ledger().misbehaviour.insert(activity, misbehaviour);
    }

    pub fn attempts(&self, activity: &str) -> u32 {
        self.ledger().attempts.get(activity).copied().unwrap_or(0)
    }

    pub fn started(&self, activity: &str) -> bool {
        self.ledger().started.contains(activity)
    }

    pub fn events(&self) -> Vec<RequestEvent> {
        self.ledger().events.clone()
    }

    /// Counts an attempt, waits while held, then applies the scripted misbehaviour.
    async fn begin(
        &self,
        ctx: &ActivityContext,
        activity: &'static str,
    ) -> Result<(), ActivityError> {
        {
            let mut ledger = self.ledger();
            *ledger.attempts.entry(activity).or_default() += 1;
            ledger.started.insert(activity);
        }
        while self.ledger().holds(activity) {
            if ctx.is_cancelled() {
                return Err(ActivityError::cancelled());
            }
            let _ = ctx.record_heartbeat(()).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut ledger = self.ledger();
        let successes = ledger.successes.get(activity).copied().unwrap_or(0);
        let Some(plan) = ledger.misbehaviour.get_mut(activity) else {
            return Ok(());
        };
        if successes < plan.succeed_first {
            return Ok(());
        }
        if plan.transient > 0 {
            plan.transient -= 1;
            return Err(anyhow::anyhow!("transient: {}", plan.message).into());
        }
        if plan.permanent > 0 {
            plan.permanent -= 1;
            return Err(ActivityError::application(
                ApplicationFailure::builder(plan.message.clone())
                    .type_name(PERMANENT_FAILURE_TYPE.to_string())
                    .non_retryable(true)
                    .build(),
            ));
        }
        if plan.stale > 0 {
            plan.stale -= 1;
            return Err(ActivityError::application(
                ApplicationFailure::builder(plan.message.clone())
                    .type_name(STALE_GENERATION_FAILURE_TYPE.to_string())
                    .non_retryable(plan.stale_non_retryable)
                    .build(),
            ));
        }
        Ok(())
    }

    fn succeeded(&self, activity: &'static str) -> MutexGuard<'_, Ledger> {
        let mut ledger = self.ledger();
        *ledger.successes.entry(activity).or_default() += 1;
        ledger
    }
}

#[activities]
impl FakeStores {
    #[activity(definition = workflows::community::Register)]
    pub async fn register(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RegisterInput,
    ) -> Result<RegisteredRequest, ActivityError> {
        self.begin(&ctx, "community.register").await?;
        let _ledger = self.succeeded("community.register");
        Ok(RegisteredRequest {
            request_id: input.request_id,
            community_id: community_of(&input.host),
        })
    }

    #[activity(definition = workflows::community::Inventory)]
    pub async fn inventory(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: RequestRef,
    ) -> Result<InventorySummary, ActivityError> {
        self.begin(&ctx, "community.inventory").await?;
        let _ledger = self.succeeded("community.inventory");
        Ok(InventorySummary {
            digest: FROZEN_DIGEST.to_string(),
            tables: vec![TableCount {
                table: "buzz.events".into(),
                rows: 42,
            }],
            prefixes: vec![PrefixSummary {
                prefix: "media/x/".into(),
                versions: 3,
                bytes: 300,
                keys_digest: "k".into(),
            }],
            redis_keys: 7,
            uploads: vec![],
        })
    }

    #[activity(definition = workflows::community::RecordApproval)]
    pub async fn record_approval(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ApprovalInput,
    ) -> Result<ApprovalRecord, ActivityError> {
        self.begin(&ctx, "community.record_approval").await?;
        let mut ledger = self.succeeded("community.record_approval");
        ledger.approvals.push(input.clone());
        Ok(ApprovalRecord {
            approved_by: input.approval.approved_by,
            approved_at: "2024-05-01T12:00:00Z".into(),
            digest: input.approval.digest,
            note: input.approval.note,
            signed: input.approval.signed,
        })
    }

    #[activity(definition = workflows::community::RecordEvent)]
    pub async fn record_event(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: EventInput,
    ) -> Result<(), ActivityError> {
        self.begin(&ctx, "community.record_event").await?;
        self.succeeded("community.record_event")
            .events
            .push(input.event);
        Ok(())
    }

    #[activity(definition = workflows::community::Preflight)]
    pub async fn preflight(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: RequestRef,
    ) -> Result<(), ActivityError> {
        self.begin(&ctx, "community.preflight").await?;
        let _ledger = self.succeeded("community.preflight");
        Ok(())
    }

    #[activity(definition = workflows::community::Fence)]
    pub async fn fence(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: RequestRef,
    ) -> Result<FenceOutcome, ActivityError> {
        self.begin(&ctx, "community.fence").await?;
        let mut ledger = self.succeeded("community.fence");
        ledger.quiescing = true;
        ledger.fenced = true;
        ledger.generation += 1;
        Ok(FenceOutcome {
            fence_generation: ledger.generation,
        })
    }

    #[activity(definition = workflows::community::Drain)]
    pub async fn drain(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: RequestRef,
    ) -> Result<DrainOutcome, ActivityError> {
        self.begin(&ctx, "community.drain").await?;
        let _ledger = self.succeeded("community.drain");
        Ok(DrainOutcome {
            disconnect_receivers: 2,
        })
    }

    #[activity(definition = workflows::community::FreezeManifest)]
    pub async fn freeze_manifest(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: RequestRef,
    ) -> Result<ManifestSummary, ActivityError> {
        self.begin(&ctx, "community.freeze_manifest").await?;
        let ledger = self.succeeded("community.freeze_manifest");
        Ok(ManifestSummary {
            chunks: ledger.chunks,
            versions: ledger.chunks * VERSIONS_PER_CHUNK,
            prefixes: Vec::new(),
        })
    }

    #[activity(definition = workflows::community::DeleteChunks)]
    pub async fn delete_chunks(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: DeleteChunksInput,
    ) -> Result<DeleteProgress, ActivityError> {
        {
            let mut ledger = self.ledger();
            if ledger.failures_before_marker > 0 {
                ledger.failures_before_marker -= 1;
                *ledger
                    .attempts
                    .entry("community.delete_chunks")
                    .or_default() += 1;
                return Err(ActivityError::application(
                    ApplicationFailure::builder("evidence does not match the request (fake)")
                        .type_name(PERMANENT_FAILURE_TYPE.to_string())
                        .non_retryable(true)
                        .build(),
                ));
            }
            ledger.irreversible = true;
        }
        self.begin(&ctx, "community.delete_chunks").await?;
        let mut ledger = self.succeeded("community.delete_chunks");
        let pending: Vec<u64> = (0..ledger.chunks)
            .filter(|chunk| !ledger.chunk_stamps.contains_key(chunk))
            .take(usize::try_from(input.max_chunks).unwrap_or(usize::MAX))
            .collect();
        for chunk in pending {
            *ledger.chunk_stamps.entry(chunk).or_default() += 1;
        }
        let done = ledger.chunk_stamps.len() as u64;
        Ok(DeleteProgress {
            chunks_total: ledger.chunks,
            chunks_done: done,
            versions_deleted: done * VERSIONS_PER_CHUNK,
            versions_total: ledger.chunks * VERSIONS_PER_CHUNK,
        })
    }

    #[activity(definition = workflows::community::PurgePostgres)]
    pub async fn purge_postgres(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: PurgeInput,
    ) -> Result<PurgeReport, ActivityError> {
        self.begin(&ctx, "community.purge_postgres").await?;
        let _ledger = self.succeeded("community.purge_postgres");
        Ok(PurgeReport {
            tables: vec![TableCount {
                table: "buzz.events".into(),
                rows: 42,
            }],
            rows_deleted: 42,
        })
    }

    #[activity(definition = workflows::community::PurgeCache)]
    pub async fn purge_cache(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: RequestRef,
    ) -> Result<CacheReport, ActivityError> {
        self.begin(&ctx, "community.purge_cache").await?;
        let _ledger = self.succeeded("community.purge_cache");
        Ok(CacheReport { keys_unlinked: 7 })
    }

    #[activity(definition = workflows::community::Verify)]
    pub async fn verify(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: RequestRef,
    ) -> Result<VerificationReport, ActivityError> {
        self.begin(&ctx, "community.verify").await?;
        if let Some(late) = self.ledger().late_versions.first().cloned() {
            return Err(ActivityError::application(
                ApplicationFailure::builder(format!(
                    "late object version: {late} appeared after the manifest was frozen"
                ))
                .type_name(LATE_OBJECT_VERSION_FAILURE_TYPE.to_string())
                .non_retryable(true)
                .build(),
            ));
        }
        let _ledger = self.succeeded("community.verify");
        Ok(VerificationReport {
            tables_checked: 6,
            prefixes_checked: 3,
            redis_empty_passes: 2,
        })
    }

    #[activity(definition = workflows::community::DeleteLateVersions)]
    pub async fn delete_late_versions(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: RequestRef,
    ) -> Result<LateVersionsReport, ActivityError> {
        self.begin(&ctx, "community.delete_late_versions").await?;
        let mut ledger = self.succeeded("community.delete_late_versions");
        let deleted = std::mem::take(&mut ledger.late_versions);
        ledger.late_versions_deleted += deleted.len() as u64;
        Ok(LateVersionsReport {
            late_chunks: u64::from(ledger.late_versions_deleted > 0),
            late_versions_deleted: ledger.late_versions_deleted,
        })
    }

    #[activity(definition = workflows::community::Complete)]
    pub async fn complete(
        self: Arc<Self>,
        ctx: ActivityContext,
        _input: RequestRef,
    ) -> Result<(), ActivityError> {
        self.begin(&ctx, "community.complete").await?;
        self.succeeded("community.complete").completed = true;
        Ok(())
    }

    #[activity(definition = workflows::community::Abort)]
    pub async fn abort(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: AbortInput,
    ) -> Result<AbortOutcome, ActivityError> {
        self.begin(&ctx, "community.abort").await?;
        {
            let mut ledger = self.ledger();
            if ledger.irreversible {
                let reason = "request passed the irreversible point (stage drained); it can no \
                              longer be aborted and runs to completion";
                // The store commits the refusal to the audit trail before refusing.
                ledger.events.push(RequestEvent::AbortRefused {
                    actor: input.abort.actor.clone(),
                    reason: reason.to_string(),
                });
                return Err(ActivityError::application(
                    ApplicationFailure::builder(reason)
                        .type_name(ABORT_REFUSED_FAILURE_TYPE.to_string())
                        .non_retryable(true)
                        .build(),
                ));
            }
        }
        let mut ledger = self.succeeded("community.abort");
        ledger.quiescing = false;
        ledger.fenced = false;
        ledger.generation += 1;
        ledger.aborts.push(input);
        Ok(AbortOutcome {
            fence_generation: ledger.generation,
        })
    }

    /// Records the abort's signature (the fake verifies nothing).
    #[activity(definition = workflows::community::AcceptAbort)]
    pub async fn accept_abort(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: AbortInput,
    ) -> Result<AbortRequest, ActivityError> {
        self.begin(&ctx, "community.accept_abort").await?;
        let _ledger = self.succeeded("community.accept_abort");
        Ok(input.abort)
    }
}

/// A stable community id per host, as a real catalog would give.
pub fn community_of(host: &str) -> Uuid {
    let mut bytes = [0u8; 16];
    for (i, b) in host.bytes().enumerate() {
        bytes[i % 16] ^= b;
    }
    Uuid::from_bytes(bytes)
}
