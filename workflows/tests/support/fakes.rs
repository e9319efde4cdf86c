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

impl Misbehaviour {
    /// One permanent failure with this message.
    pub fn permanent(message: &str) -> Self {
        Self {
            permanent: 1,
            message: message.to_owned(),
            ..Self::default()
        }
    }
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

    /// These fakes, with `activity` held until [`FakeStores::release`].
    pub fn holding(self, activity: &'static str) -> Self {
        self.hold(activity);
        self
    }

    /// These fakes, with `activity` misbehaving so.
    pub fn failing(self, activity: &'static str, misbehaviour: Misbehaviour) -> Self {
        self.misbehave(activity, misbehaviour);
        self
    }

    /// These fakes, with the first `delete_chunks` claim refused before the irreversible marker.
    pub fn failing_before_the_marker(self) -> Self {
        self.ledger().failures_before_marker = 1;
        self
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
            return Err(failure(plan.message.clone(), PERMANENT_FAILURE_TYPE, true));
        }
        if plan.stale > 0 {
            plan.stale -= 1;
            let non_retryable = plan.stale_non_retryable;
            return Err(failure(
                plan.message.clone(),
                STALE_GENERATION_FAILURE_TYPE,
                non_retryable,
            ));
        }
        Ok(())
    }

    fn succeeded(&self, activity: &'static str) -> MutexGuard<'_, Ledger> {
        let mut ledger = self.ledger();
        *ledger.successes.entry(activity).or_default() += 1;
        ledger
    }

    /// Before `delete_chunks` begins: fails permanently while `failures_before_marker` lasts
    /// (counting the attempt), else sets the irreversible marker.
    fn claim_the_marker(&self, _input: &DeleteChunksInput) -> Result<(), ActivityError> {
        let mut ledger = self.ledger();
        if ledger.failures_before_marker > 0 {
            ledger.failures_before_marker -= 1;
            *ledger
                .attempts
                .entry("community.delete_chunks")
                .or_default() += 1;
            return Err(failure(
                "evidence does not match the request (fake)".to_string(),
                PERMANENT_FAILURE_TYPE,
                true,
            ));
        }
        ledger.irreversible = true;
        Ok(())
    }

    /// Fails `verify` on the first late version still there.
    fn refuse_late_versions(&self, _input: &RequestRef) -> Result<(), ActivityError> {
        match self.ledger().late_versions.first() {
            Some(late) => Err(failure(
                format!("late object version: {late} appeared after the manifest was frozen"),
                LATE_OBJECT_VERSION_FAILURE_TYPE,
                true,
            )),
            None => Ok(()),
        }
    }

    /// Refuses an abort past the irreversible marker, committing the refusal to the audit trail
    /// first, as the store does.
    fn refuse_abort_past_the_marker(&self, input: &AbortInput) -> Result<(), ActivityError> {
        let mut ledger = self.ledger();
        if !ledger.irreversible {
            return Ok(());
        }
        let reason = "request passed the irreversible point (stage drained); it can no \
                      longer be aborted and runs to completion";
        ledger.events.push(RequestEvent::AbortRefused {
            actor: input.abort.actor.clone(),
            reason: reason.to_string(),
        });
        Err(failure(
            reason.to_string(),
            ABORT_REFUSED_FAILURE_TYPE,
            true,
        ))
    }
}

/// A non-retryable or retryable application failure of this type, as the real activities send.
fn failure(message: String, type_name: &str, non_retryable: bool) -> ActivityError {
    ActivityError::application(
        ApplicationFailure::builder(message)
            .type_name(type_name.to_string())
            .non_retryable(non_retryable)
            .build(),
    )
}

/// Declares every fake activity in one `#[activities]` impl. Each one runs its optional
/// `before` check (a method taking the input), then [`FakeStores::begin`] (attempt, hold,
/// scripted misbehaviour), then its optional `check`, then counts a success and answers from the
/// ledger its body receives.
macro_rules! fake_activities {
    ($(
        $(#[$meta:meta])*
        $method:ident = $definition:ident($name:literal):
            |$ledger:ident, $input:ident: $input_type:ident| -> $output:ty
            $(, before $before:ident)? $(, check $check:ident)?
            $body:block
    )*) => {
        #[activities]
        impl FakeStores {
            $(
                $(#[$meta])*
                #[activity(definition = workflows::community::$definition)]
                pub async fn $method(
                    self: Arc<Self>,
                    ctx: ActivityContext,
                    $input: $input_type,
                ) -> Result<$output, ActivityError> {
                    $(self.$before(&$input)?;)?
                    self.begin(&ctx, $name).await?;
                    $(self.$check(&$input)?;)?
                    #[allow(unused_mut, unused_variables)]
                    let mut $ledger = self.succeeded($name);
                    $body
                }
            )*
        }
    };
}

fake_activities! {
    register = Register("community.register"):
        |_ledger, input: RegisterInput| -> RegisteredRequest {
        Ok(RegisteredRequest {
            request_id: input.request_id,
            community_id: community_of(&input.host),
        })
    }

    inventory = Inventory("community.inventory"):
        |_ledger, _input: RequestRef| -> InventorySummary {
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

    record_approval = RecordApproval("community.record_approval"):
        |ledger, input: ApprovalInput| -> ApprovalRecord {
        ledger.approvals.push(input.clone());
        Ok(ApprovalRecord {
            approved_by: input.approval.approved_by,
            approved_at: "2024-05-01T12:00:00Z".into(),
            digest: input.approval.digest,
            note: input.approval.note,
            signed: input.approval.signed,
        })
    }

    record_event = RecordEvent("community.record_event"):
        |ledger, input: EventInput| -> () {
        ledger.events.push(input.event);
        Ok(())
    }

    preflight = Preflight("community.preflight"): |_ledger, _input: RequestRef| -> () {
        Ok(())
    }

    fence = Fence("community.fence"): |ledger, _input: RequestRef| -> FenceOutcome {
        ledger.quiescing = true;
        ledger.fenced = true;
        ledger.generation += 1;
        Ok(FenceOutcome {
            fence_generation: ledger.generation,
        })
    }

    drain = Drain("community.drain"): |_ledger, _input: RequestRef| -> DrainOutcome {
        Ok(DrainOutcome {
            disconnect_receivers: 2,
        })
    }

    freeze_manifest = FreezeManifest("community.freeze_manifest"):
        |ledger, _input: RequestRef| -> ManifestSummary {
        Ok(ManifestSummary {
            chunks: ledger.chunks,
            versions: ledger.chunks * VERSIONS_PER_CHUNK,
            prefixes: Vec::new(),
        })
    }

    delete_chunks = DeleteChunks("community.delete_chunks"):
        |ledger, input: DeleteChunksInput| -> DeleteProgress, before claim_the_marker {
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

    purge_postgres = PurgePostgres("community.purge_postgres"):
        |_ledger, _input: PurgeInput| -> PurgeReport {
        Ok(PurgeReport {
            tables: vec![TableCount {
                table: "buzz.events".into(),
                rows: 42,
            }],
            rows_deleted: 42,
        })
    }

    purge_cache = PurgeCache("community.purge_cache"):
        |_ledger, _input: RequestRef| -> CacheReport {
        Ok(CacheReport { keys_unlinked: 7 })
    }

    verify = Verify("community.verify"):
        |_ledger, _input: RequestRef| -> VerificationReport, check refuse_late_versions {
        Ok(VerificationReport {
            tables_checked: 6,
            prefixes_checked: 3,
            redis_empty_passes: 2,
        })
    }

    delete_late_versions = DeleteLateVersions("community.delete_late_versions"):
        |ledger, _input: RequestRef| -> LateVersionsReport {
        let deleted = std::mem::take(&mut ledger.late_versions);
        ledger.late_versions_deleted += deleted.len() as u64;
        Ok(LateVersionsReport {
            late_chunks: u64::from(ledger.late_versions_deleted > 0),
            late_versions_deleted: ledger.late_versions_deleted,
        })
    }

    complete = Complete("community.complete"): |ledger, _input: RequestRef| -> () {
        ledger.completed = true;
        Ok(())
    }

    abort = Abort("community.abort"):
        |ledger, input: AbortInput| -> AbortOutcome, check refuse_abort_past_the_marker {
        ledger.quiescing = false;
        ledger.fenced = false;
        ledger.generation += 1;
        ledger.aborts.push(input);
        Ok(AbortOutcome {
            fence_generation: ledger.generation,
        })
    }

    /// Records the abort's signature (the fake verifies nothing).
    accept_abort = AcceptAbort("community.accept_abort"):
        |_ledger, input: AbortInput| -> AbortRequest {
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
