//! The `CommunityDeletion` workflow: DESIGN 3.1's phase table as one Temporal workflow per
//! request.
//!
//! `run` reads top to bottom as the table. Every side effect is an activity; this code only
//! decides what runs next. Operators steer it with messages: `approve`, `abort` and `unblock`
//! (each an Update with a validator, and a Signal for the Web UI) and read it with the `status`
//! query, the search attributes and the memo.
//!
//! Workflow cancellation (the Web UI's "Cancel") is observed, not obeyed blindly: every activity
//! and wait uses a cancellation token detached from the workflow's, and the workflow watches its
//! own cancellation. Before the irreversible point a cancellation is an abort by
//! `temporal-cancel` and the run ends `Canceled` once the fence is lifted; after it the
//! cancellation is refused, recorded in the audit trail, and the deletion runs to completion
//! (the run ends `Completed`).
//!
//! The irreversible point is the database's `irreversible_at` marker, not a phase: while deleting
//! objects the workflow cannot know whether the marker is set, so it accepts an abort
//! tentatively and the abort activity decides under the request lock (see `decide_abort`).
//!
//! This file holds the state, the SDK's entry points (`#[workflow_methods]`: init, run, the
//! `status` query, the update validators, updates and signals) and the phase table's steps.
//! Its parts, one concern each: `messages.rs` (what `approve`, `abort` and `unblock` do),
//! `cancellation.rs` (the guard every step runs under, and what a workflow cancellation means),
//! `visibility.rs` (search attributes, memo, the status snapshot) and `late.rs` (verification
//! and its late-version remedy).

use std::error::Error;

use temporalio_common::data_converters::{RawValue, TemporalDeserializable};
use temporalio_common::error::IncomingError;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    ActivityExecutionError, ApplicationFailure, ContinueAsNewOptions, WaitConditionOptions,
    WorkflowCancellationToken, WorkflowContext, WorkflowContextView, WorkflowResult,
    WorkflowTermination,
};
use uuid::Uuid;

use super::contracts::{
    Abort, AbortInput, AbortOutcome, AbortRequest, ApprovalRecord, ApproveRequest, CacheReport,
    Complete, DeleteChunks, DeleteChunksInput, DeleteProgress, Drain, DrainOutcome, Fence,
    FenceOutcome, FreezeManifest, Inventory, InventorySummary, ManifestSummary, Preflight,
    PurgeCache, PurgeInput, PurgePostgres, PurgeReport, Register, RegisterInput, RequestEvent,
    RequestRef, UnblockRequest, VerificationReport,
};
use super::input::{CarriedState, CommunityDeletionInput};
use super::options::{Pace, Paced, activity_options};
use super::phase::Phase;
use super::rules::{AbortGate, ApprovalGate, Subject, check_abort, check_approval, check_unblock};
use super::status::{BlockedInfo, DeletionStatus, Progress, rfc3339};
use crate::contract::{PERMANENT_FAILURE_TYPE, STALE_GENERATION_FAILURE_TYPE};
use crate::delivery::{Deliveries, repeat_refusal};
use crate::search;

mod cancellation;
mod late;
mod messages;
mod visibility;

/// Patch marker of operator identity: a run that records it requires signed operator messages;
/// a history recorded before it replays with the unsigned rules it ran with.
pub const SIGNED_MESSAGES_PATCH: &str = "signed-operator-messages";

/// The actor recorded when a workflow cancellation is taken as an abort, or refused.
pub const CANCEL_ACTOR: &str = "temporal-cancel";

/// Error type of update handlers, as the SDK requires it.
type UpdateError = Box<dyn Error + Send + Sync>;

/// One community deletion. The fields are the workflow's state; `status` reports them.
#[workflow]
pub struct CommunityDeletion {
    /// The input this run started with (its `carried` says whether it resumes).
    input: CommunityDeletionInput,
    phase: Phase,
    community_id: Option<Uuid>,
    inventory: Option<InventorySummary>,
    approval: Option<ApprovalRecord>,
    /// An approval passed the rules and its evidence is being written.
    approval_in_flight: bool,
    blocked: Option<BlockedInfo>,
    /// An unblock passed the rules and is being recorded.
    unblock_in_flight: bool,
    last_error: Option<String>,
    progress: Progress,
    fence_generation: Option<u64>,
    verification: Option<VerificationReport>,
    run_number: u32,
    /// The accepted abort: before object deletion, or tentatively during it.
    abort: Option<AbortRequest>,
    /// The abort activity ended the request aborted while the phase could not tell (during
    /// object deletion): the run stops and ends aborted.
    abort_confirmed: bool,
    /// The database refused an abort because its irreversible marker was set: later aborts in
    /// this run are refused at once.
    irreversible_seen: bool,
    /// The abort activity runs: nothing interrupts it any more.
    aborting: bool,
    /// An abort's signature is being verified and recorded.
    abort_in_flight: bool,
    /// Operator messages must be signed (false only when replaying a history recorded before
    /// operator identity: see `SIGNED_MESSAGES_PATCH`).
    signatures_required: bool,
    /// The accepted abort came from a workflow cancellation: the run ends `Canceled`.
    cancelled: bool,
    /// This run has acted on the workflow's cancellation (it does so once).
    cancellation_seen: bool,
    /// The signed statements taken in: an update's statement that arrives again as a signal
    /// (see [`crate::delivery`]) acts once.
    deliveries: Deliveries,
}

/// Why the phase table stopped before its last row.
enum Stop {
    /// An abort was accepted before the irreversible point.
    Abort(Box<AbortRequest>),
    /// This run ends here: continue-as-new, or a failure that ends the workflow.
    End(WorkflowTermination),
}

#[workflow_methods]
impl CommunityDeletion {
    /// Builds the state from the input; a continued run restores what its predecessor carried.
    #[init]
    pub fn new(_ctx: &WorkflowContextView, input: CommunityDeletionInput) -> Self {
        let mut state = Self {
            phase: Phase::Submitted,
            community_id: None,
            inventory: None,
            approval: None,
            approval_in_flight: false,
            blocked: None,
            unblock_in_flight: false,
            last_error: None,
            progress: Progress::default(),
            fence_generation: None,
            verification: None,
            run_number: 0,
            abort: None,
            abort_confirmed: false,
            irreversible_seen: false,
            aborting: false,
            abort_in_flight: false,
            signatures_required: true,
            cancelled: false,
            cancellation_seen: false,
            deliveries: Deliveries::default(),
            input,
        };
        if let Some(carried) = state.input.carried.clone() {
            state.phase = carried.phase;
            state.community_id = Some(carried.community_id);
            state.approval = carried.approval;
            state.inventory = carried.inventory;
            state.progress = carried.progress;
            state.fence_generation = carried.fence_generation;
            state.run_number = carried.run_number;
        }
        state
    }

    /// Runs DESIGN 3.1's phase table; a run started by continue-as-new resumes at object
    /// deletion.
    #[run]
    pub async fn run(ctx: &mut WorkflowContext<Self>) -> WorkflowResult<DeletionStatus> {
        let ctx: &WorkflowContext<Self> = ctx;
        let request = ctx.state(|s| RequestRef {
            request_id: s.input.request_id,
        });
        let purge = Self::purge_input(ctx);
        let signed = ctx.patched(SIGNED_MESSAGES_PATCH);
        ctx.state_mut(|s| s.signatures_required = signed);
        let table = async {
            Self::announce(ctx)?;
            if !ctx.state(|s| s.input.carried.is_some()) {
                // Records the request row; an unknown host or an open request for the
                // community ends the workflow failed.
                Self::register(ctx).await?;
                // Freezes the inventory (tables, row counts, prefix listings) and its digest.
                Self::stage(ctx, Phase::Submitted, Inventory, request.clone()).await?;
                // Waits for a second operator to approve exactly that digest, evidence first.
                Self::await_approval(ctx).await?;
                // Proves version-list permission per prefix and no catalog drift since then.
                Self::stage(ctx, Phase::Approved, Preflight, request.clone()).await?;
                // Quiesces serving writes, then fences once no serving-write lease is live.
                Self::stage(ctx, Phase::Fencing, Fence, request.clone()).await?;
                // Disconnects relays and requires every serving write drained.
                Self::stage(ctx, Phase::Draining, Drain, request.clone()).await?;
                // Binds the post-drain version listing into manifest chunks: exactly what goes.
                Self::stage(ctx, Phase::Draining, FreezeManifest, request.clone()).await?;
            }
            // Deletes every manifest version by id (irreversible), continuing as new so that
            // no run's history grows with the tenant.
            Self::delete_objects(ctx).await?;
            // Deletes the community's rows in every tenant table, then the community row.
            Self::stage(ctx, Phase::PurgingRows, PurgePostgres, purge).await?;
            // Unlinks every key of the community's Redis namespace.
            Self::stage(ctx, Phase::PurgingCache, PurgeCache, request.clone()).await?;
            // Proves absence: zero rows, empty prefixes, two empty Redis SCAN passes. A version
            // that appeared after the freeze blocks; its unblock deletes it as a late chunk.
            Self::verify_absence(ctx, request.clone()).await?;
            // Marks the request retention-pending: done, its proof kept in Postgres.
            Self::stage(ctx, Phase::Verifying, Complete, request).await
        };
        let outcome = table.await;
        Self::conclude(ctx, outcome).await
    }

    /// Where the deletion stands: phase, progress, blocked reason, last error, approval.
    #[query]
    pub fn status(&self, _ctx: &WorkflowContextView) -> DeletionStatus {
        self.snapshot()
    }

    #[update_validator(approve_update)]
    fn validate_approve(
        &self,
        _ctx: &WorkflowContextView,
        request: &ApproveRequest,
    ) -> Result<(), UpdateError> {
        if self.deliveries.is_repeat(request.signed.as_ref()) {
            return Err(repeat_refusal(request.signed.as_ref()).into());
        }
        check_approval(&self.approval_gate(), request).map_err(Into::into)
    }

    /// Approves the frozen inventory; returns once the approval evidence is persisted.
    #[update(name = "approve")]
    pub async fn approve_update(
        ctx: &mut WorkflowContext<Self>,
        request: ApproveRequest,
    ) -> Result<ApprovalRecord, UpdateError> {
        Self::accept_approval(ctx, request)
            .await
            .map_err(Into::into)
    }

    /// The Web UI's approval: a valid one acts as the update; an invalid or malformed one (any
    /// payload is taken and decoded here, see `decode`) is recorded as a rejected attempt and
    /// changes nothing.
    #[signal(name = "approve")]
    pub async fn approve_signal(ctx: &mut WorkflowContext<Self>, input: RawValue) {
        Self::approve_from_signal(ctx, input).await
    }

    #[update_validator(abort_update)]
    fn validate_abort(
        &self,
        _ctx: &WorkflowContextView,
        request: &AbortRequest,
    ) -> Result<(), UpdateError> {
        if self.deliveries.is_repeat(request.signed.as_ref()) {
            return Err(repeat_refusal(request.signed.as_ref()).into());
        }
        // Past the irreversible point the update is accepted so its refusal can be recorded.
        check_abort(&self.abort_gate(), request).map_err(Into::into)
    }

    /// Aborts before the irreversible point and returns `aborted` once the fence is lifted;
    /// after it, records the refusal and fails.
    #[update(name = "abort")]
    pub async fn abort_update(
        ctx: &mut WorkflowContext<Self>,
        request: AbortRequest,
    ) -> Result<Phase, UpdateError> {
        Self::request_abort(ctx, request, false)
            .await
            .map_err(Into::into)
    }

    /// The Web UI's abort: as the update; every refusal, a malformed payload included, is
    /// recorded.
    #[signal(name = "abort")]
    pub async fn abort_signal(ctx: &mut WorkflowContext<Self>, input: RawValue) {
        Self::abort_from_signal(ctx, input).await
    }

    #[update_validator(unblock_update)]
    fn validate_unblock(
        &self,
        _ctx: &WorkflowContextView,
        request: &UnblockRequest,
    ) -> Result<(), UpdateError> {
        if self.deliveries.is_repeat(request.signed.as_ref()) {
            return Err(repeat_refusal(request.signed.as_ref()).into());
        }
        check_unblock(
            &self.subject(),
            self.phase,
            self.blocked.is_some(),
            self.unblock_in_flight,
            request,
        )
        .map_err(Into::into)
    }

    /// Records the operator's remediation and retries the blocked phase, which it returns.
    #[update(name = "unblock")]
    pub async fn unblock_update(
        ctx: &mut WorkflowContext<Self>,
        request: UnblockRequest,
    ) -> Result<Phase, UpdateError> {
        Self::release(ctx, request).await.map_err(Into::into)
    }

    /// The Web UI's unblock: as the update; an invalid or malformed one is recorded as
    /// rejected.
    #[signal(name = "unblock")]
    pub async fn unblock_signal(ctx: &mut WorkflowContext<Self>, input: RawValue) {
        Self::unblock_from_signal(ctx, input).await
    }
}

/// The phases and the waits between them.
impl CommunityDeletion {
    /// Records the request row with the requester's verified `submit` signature. A refusal
    /// (no or a mismatched signature, an unknown or revoked key, unknown host, an open request
    /// for the community; the activity checks the signature) ends the workflow failed with the
    /// reason: there is nothing to unblock.
    async fn register(ctx: &WorkflowContext<Self>) -> Result<(), Stop> {
        let input = ctx.state(|s| RegisterInput {
            request_id: s.input.request_id,
            workflow_id: ctx.workflow_id().to_string(),
            host: s.input.host.clone(),
            requested_by: s.input.requested_by.clone(),
            reason: s.input.reason.clone(),
            signed: s.input.signed.clone(),
        });
        let options = Self::options(ctx, Register::PACE, WorkflowCancellationToken::new());
        match ctx.execute_activity(Register, input, options).await {
            Ok(registered) => {
                ctx.state_mut(|s| s.community_id = Some(registered.community_id));
                Self::publish(ctx);
                Ok(())
            }
            Err(failure) => Err(Self::registration_refused(ctx, failure_reason(&failure))),
        }
    }

    /// Ends the workflow failed at registration with `reason` (kept as the last error).
    fn registration_refused(ctx: &WorkflowContext<Self>, reason: String) -> Stop {
        ctx.state_mut(|s| s.last_error = Some(reason.clone()));
        Stop::End(WorkflowTermination::failed_application(
            ApplicationFailure::builder(reason)
                .type_name(PERMANENT_FAILURE_TYPE.to_string())
                .non_retryable(true)
                .build(),
        ))
    }

    /// Runs `activity` as `phase` until it succeeds and records its output. Temporal retries
    /// transient failures (unlimited attempts); a failure that reaches the workflow is one
    /// Temporal will not retry, so it blocks until an operator unblocks, then the same
    /// activity runs again. An accepted abort interrupts it while abort is allowed.
    async fn stage<AD>(
        ctx: &WorkflowContext<Self>,
        phase: Phase,
        activity: AD,
        input: AD::Input,
    ) -> Result<(), Stop>
    where
        AD: Paced,
        AD::Input: Clone,
        AD::Output: PhaseOutput + TemporalDeserializable,
    {
        Self::enter_unless_aborted(ctx, phase)?;
        loop {
            match Self::attempt(ctx, activity, input.clone()).await? {
                Ok(()) => return Ok(()),
                // Only the current claimant's failures may block: a stale generation means
                // another attempt claimed the request after this one, so the phase simply runs
                // again and re-claims (the activities send it retryable; this covers any that
                // still reaches the workflow).
                Err(failure) if failure_type(&failure) == Some(STALE_GENERATION_FAILURE_TYPE) => {
                    let reason = failure_reason(&failure);
                    ctx.state_mut(|s| s.last_error = Some(reason));
                }
                Err(failure) => Self::block(ctx, phase, failure_reason(&failure)).await?,
            }
        }
    }

    /// Enters `phase`, unless an abort is pending: checked before entering, so a pending abort
    /// stops the run before it crosses the irreversible point.
    fn enter_unless_aborted(ctx: &WorkflowContext<Self>, phase: Phase) -> Result<(), Stop> {
        Self::stop_on_pending_abort(ctx)?;
        Self::enter(ctx, phase);
        Ok(())
    }

    /// Stops the run if an accepted abort is pending.
    fn stop_on_pending_abort(ctx: &WorkflowContext<Self>) -> Result<(), Stop> {
        match ctx.state(Self::pending_abort) {
            Some(abort) => Err(Stop::Abort(Box::new(abort))),
            None => Ok(()),
        }
    }

    /// One call of `activity`, guarded against an abort and the workflow's cancellation: its
    /// output recorded in the state, or the failure that reached the workflow.
    async fn attempt<AD>(
        ctx: &WorkflowContext<Self>,
        activity: AD,
        input: AD::Input,
    ) -> Result<Result<(), ActivityExecutionError>, Stop>
    where
        AD: Paced,
        AD::Output: PhaseOutput + TemporalDeserializable,
    {
        let call_cancellation = WorkflowCancellationToken::new();
        let options = Self::options(ctx, AD::PACE, call_cancellation.clone());
        let call = ctx.execute_activity(activity, input, options);
        let outcome = Self::guarded(ctx, call, Some(&call_cancellation)).await?;
        Ok(outcome.map(|output| ctx.state_mut(|s| output.record(s))))
    }

    /// Enters awaiting-approval and waits until an approval's evidence is persisted (by the
    /// `approve` handler), or an abort.
    async fn await_approval(ctx: &WorkflowContext<Self>) -> Result<(), Stop> {
        Self::enter_unless_aborted(ctx, Phase::AwaitingApproval)?;
        let approved = ctx.wait_condition_with_options(|s| s.approval.is_some(), detached());
        let _approved = Self::guarded(ctx, approved, None).await?;
        Ok(())
    }

    /// Deletes manifest chunks, `chunks_per_call` per activity call, until every chunk is
    /// stamped. After `delete_rounds_per_run` calls it continues as new, so no run's history
    /// grows with the tenant's size.
    async fn delete_objects(ctx: &WorkflowContext<Self>) -> Result<(), Stop> {
        let (input, rounds) = ctx.state(|s| {
            let input = DeleteChunksInput {
                request_id: s.input.request_id,
                max_chunks: s.input.tuning.chunks_per_call.max(1),
                parallelism: s.input.tuning.delete_parallelism.max(1),
            };
            (input, s.input.tuning.delete_rounds_per_run.max(1))
        });
        for _round in 0..rounds {
            Self::stage(ctx, Phase::DeletingObjects, DeleteChunks, input.clone()).await?;
            if ctx.state(|s| s.progress.objects_deleted()) {
                return Ok(());
            }
        }
        Self::continue_as_new(ctx).await
    }

    /// Blocks `phase` on a permanent failure: persists the reason, shows it (status query,
    /// `BuzzBlocked`), and waits for an operator's unblock, or an abort while one is allowed.
    async fn block(ctx: &WorkflowContext<Self>, phase: Phase, reason: String) -> Result<(), Stop> {
        let event = RequestEvent::Blocked {
            phase: phase.as_str().to_string(),
            reason: reason.clone(),
        };
        Self::record_event(ctx, event).await;
        let since = Self::now(ctx);
        ctx.state_mut(|s| {
            s.last_error = Some(reason.clone());
            s.blocked = Some(BlockedInfo {
                phase,
                reason,
                since,
                unblocking: false,
            });
        });
        ctx.upsert_search_attributes([search::BLOCKED.value_set(true)]);
        let unblocked = ctx.wait_condition_with_options(|s| s.blocked.is_none(), detached());
        let released = Self::guarded(ctx, unblocked, None).await.map(|_| ());
        ctx.state_mut(|s| s.blocked = None);
        ctx.upsert_search_attributes([search::BLOCKED.value_set(false)]);
        released
    }

    /// Hands the deletion to a fresh run that carries phase, approval, inventory, counters and
    /// fence generation. In-flight handlers finish first, so no message is lost.
    async fn continue_as_new(ctx: &WorkflowContext<Self>) -> Result<(), Stop> {
        Self::answer_late_cancellation(ctx).await;
        Self::handlers_finished(ctx).await;
        // An abort the database confirmed while the last round ran ends this run instead.
        Self::stop_on_pending_abort(ctx)?;
        let next = ctx.state(|s| {
            s.carried().map(|carried| CommunityDeletionInput {
                carried: Some(carried),
                ..s.input.clone()
            })
        });
        let Some(next) = next else {
            return Err(Stop::End(WorkflowTermination::failed_application(
                ApplicationFailure::non_retryable("cannot continue as new before registration"),
            )));
        };
        let Err(termination) = ctx.continue_as_new(next, ContinueAsNewOptions::default());
        Err(Stop::End(termination))
    }

    /// Ends the run: retention-pending after `complete`, aborted after an accepted abort, or as
    /// Temporal decided (continue-as-new, failure).
    async fn conclude(
        ctx: &WorkflowContext<Self>,
        outcome: Result<(), Stop>,
    ) -> WorkflowResult<DeletionStatus> {
        match outcome {
            Ok(()) => {
                Self::enter(ctx, Phase::RetentionPending);
                Self::answer_late_cancellation(ctx).await;
                Self::handlers_finished(ctx).await;
                Ok(ctx.state(Self::snapshot))
            }
            Err(Stop::Abort(abort)) => Self::abort(ctx, *abort).await,
            Err(Stop::End(termination)) => Err(termination),
        }
    }

    /// Runs the accepted abort: lifts quiescing and fence (bumping the generation) and ends the
    /// request aborted. Nothing interrupts it; a permanent failure blocks it like any phase.
    async fn abort(
        ctx: &WorkflowContext<Self>,
        abort: AbortRequest,
    ) -> WorkflowResult<DeletionStatus> {
        let (phase, request_id) = ctx.state_mut(|s| {
            s.aborting = true;
            (s.phase, s.input.request_id)
        });
        let input = AbortInput { request_id, abort };
        // An abort the database already confirmed (see `decide_abort`) is not run again.
        if !ctx.state(|s| s.abort_confirmed) {
            match Self::stage(ctx, phase, Abort, input).await {
                Ok(()) => {}
                Err(Stop::End(termination)) => return Err(termination),
                // `aborting` is set, so no abort can interrupt the abort itself.
                Err(Stop::Abort(_)) => {}
            }
        }
        Self::enter(ctx, Phase::Aborted);
        Self::handlers_finished(ctx).await;
        let status = ctx.state(Self::snapshot);
        if ctx.state(|s| s.cancelled) {
            Err(WorkflowTermination::cancelled_with_details(status))
        } else {
            Ok(status)
        }
    }

    /// Waits until no update or signal handler is running, so none is cut off by the end of
    /// the run.
    async fn handlers_finished(ctx: &WorkflowContext<Self>) {
        let finished = ctx.wait_condition_with_options(|_| ctx.all_handlers_finished(), detached());
        // Detached from workflow cancellation: the wait cannot be cancelled.
        let _finished = finished.await;
    }
}

/// State helpers: options, gates, carried state.
impl CommunityDeletion {
    fn options(
        ctx: &WorkflowContext<Self>,
        pace: Pace,
        cancellation: WorkflowCancellationToken,
    ) -> temporalio_sdk::ActivityOptions {
        ctx.state(|s| activity_options(pace, &s.input.tuning, cancellation))
    }

    fn purge_input(ctx: &WorkflowContext<Self>) -> PurgeInput {
        ctx.state(|s| PurgeInput {
            request_id: s.input.request_id,
            batch_rows: s.input.tuning.purge_batch_rows.max(1),
        })
    }

    /// The workflow time as RFC 3339 (empty only if the SDK has no time yet).
    fn now(ctx: &WorkflowContext<Self>) -> String {
        ctx.workflow_time().map(rfc3339).unwrap_or_default()
    }

    /// The accepted abort, while it stops the run: before object deletion (or once the database
    /// confirmed it during object deletion) and before the abort activity of `abort` started.
    fn pending_abort(&self) -> Option<AbortRequest> {
        if (self.phase.abort_allowed() || self.abort_confirmed) && !self.aborting {
            self.abort.clone()
        } else {
            None
        }
    }

    /// The request and host every operator signature must name.
    fn subject(&self) -> Subject<'_> {
        Subject {
            request_id: self.input.request_id,
            host: &self.input.host,
            signed: self.signatures_required,
        }
    }

    fn approval_gate(&self) -> ApprovalGate<'_> {
        ApprovalGate {
            phase: self.phase,
            subject: self.subject(),
            requester: self.input.signed.as_ref().map(|s| s.operator.as_str()),
            requested_by: &self.input.requested_by,
            frozen_digest: self.inventory.as_ref().map(|i| i.digest.as_str()),
            approval: self.approval.as_ref(),
            approval_in_flight: self.approval_in_flight,
        }
    }

    fn abort_gate(&self) -> AbortGate<'_> {
        AbortGate {
            phase: self.phase,
            subject: self.subject(),
            registered: self.community_id.is_some(),
            accepted: self.abort.as_ref(),
            in_flight: self.abort_in_flight,
        }
    }

    fn carried(&self) -> Option<CarriedState> {
        Some(CarriedState {
            phase: self.phase,
            community_id: self.community_id?,
            approval: self.approval.clone(),
            inventory: self.inventory.clone(),
            progress: self.progress.clone(),
            fence_generation: self.fence_generation,
            run_number: self.run_number + 1,
        })
    }
}

/// Wait options detached from workflow cancellation: the workflow decides what a cancellation
/// means (see the module documentation).
fn detached() -> WaitConditionOptions {
    WaitConditionOptions::builder()
        .cancellation_token(WorkflowCancellationToken::new())
        .build()
}

/// The `ApplicationFailure` type name the activity sent, if any.
fn failure_type(failure: &ActivityExecutionError) -> Option<&str> {
    match failure.cause() {
        Some(IncomingError::Application(app)) => app.type_name(),
        _ => None,
    }
}

/// The failure as an operator should read it: the activity's own message when it sent one.
fn failure_reason(failure: &ActivityExecutionError) -> String {
    match failure.cause() {
        Some(IncomingError::Application(app)) => app.to_string(),
        Some(cause) => format!("{failure}: {cause}"),
        None => failure.to_string(),
    }
}

/// How a phase's activity output lands in the workflow state.
trait PhaseOutput {
    /// Stores what the status query reports about this output.
    fn record(self, state: &mut CommunityDeletion);
}

impl PhaseOutput for () {
    fn record(self, _state: &mut CommunityDeletion) {}
}

impl PhaseOutput for InventorySummary {
    fn record(self, state: &mut CommunityDeletion) {
        state.inventory = Some(self);
    }
}

impl PhaseOutput for FenceOutcome {
    fn record(self, state: &mut CommunityDeletion) {
        state.fence_generation = Some(self.fence_generation);
    }
}

impl PhaseOutput for DrainOutcome {
    fn record(self, _state: &mut CommunityDeletion) {}
}

impl PhaseOutput for ManifestSummary {
    fn record(self, state: &mut CommunityDeletion) {
        state.progress.chunks_total = self.chunks;
        state.progress.versions_total = self.versions;
    }
}

impl PhaseOutput for DeleteProgress {
    fn record(self, state: &mut CommunityDeletion) {
        state.progress.record_deletion(&self);
    }
}

impl PhaseOutput for PurgeReport {
    fn record(self, state: &mut CommunityDeletion) {
        state.progress.rows_purged = self.rows_deleted;
    }
}

impl PhaseOutput for CacheReport {
    fn record(self, state: &mut CommunityDeletion) {
        state.progress.keys_purged = self.keys_unlinked;
    }
}

impl PhaseOutput for VerificationReport {
    fn record(self, state: &mut CommunityDeletion) {
        state.verification = Some(self);
    }
}

impl PhaseOutput for AbortOutcome {
    fn record(self, state: &mut CommunityDeletion) {
        state.fence_generation = Some(self.fence_generation);
    }
}
