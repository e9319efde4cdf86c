//! The `UserDeletion` workflow: register, wait for approval, then execute stages whenever an
//! operator's `run` update asks, pausing after one handler in step mode, on a handler failure, or
//! at the end.
//!
//! The workflow holds no progress of its own: each step loads the stage history from Postgres,
//! reconstructs progress from the predecessor chain, runs the current row's handler and saves the
//! decision the policy takes. A resumed run, a replacement worker or a retried activity therefore
//! continues from what was saved, never from what a worker remembered.
//!
//! Recovery (`recovery`): a `stop` update or signal ends the run in progress before its next
//! handler or transition; an execution started in resume mode takes the request up from Postgres
//! (an operator's `user resume`, or this workflow's own continue-as-new between runs).

use std::time::{Duration, UNIX_EPOCH};

use temporalio_common::RetryPolicy;
use temporalio_common::data_converters::RawValue;
use temporalio_common::error::IncomingError;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    ActivityExecutionError, ActivityOptions, ApplicationFailure, WorkflowContext,
    WorkflowContextView, WorkflowResult,
};
use uuid::Uuid;

use super::contracts::{
    BlockedInput, ChildCommunityDeletion, CommitTransition, CommitTransitionInput,
    CommittedTransition, ExecuteStageInput, LoadApprovedInventory, LoadProgress, RecordBlocked,
    RegisterUser, RegisterUserInput, StageOutcome, StageRecord, StartedChildDeletion,
    TakeUserInventory, TakeUserInventoryInput, TransitionCommand, UserAbortRecord,
    UserAbortRequest, UserApprovalRecord, UserApproveRequest, UserRequestRef, UserUnblockRecord,
    UserUnblockRequest,
};
use super::early_start::store_refused_early_start;
use super::inventory::{DEFAULT_DEMO_COMMUNITIES, UserInventory};
use super::ledger::{Admission, RunLedger};
use super::messages::{
    RefusedSignal, Registration, RunOptions, RunOutcome, RunReport, UserDeletionInput,
    UserDeletionOutcome, UserDeletionStatus, UserPhase,
};
use super::policy::{
    Position, decide, initial_stage, lifecycle_problem, reconstruct, successor_stage,
};
use super::resume::{StartMode, UserTuning, run_token};
use super::stage::StageStatus;
use super::stop::{HandlerAtStop, StopAnswer, StopRequest, stopped_at};
use super::target::{TargetError, UserTarget, parse_target};
use crate::approval::Operator;
use crate::community::{CommunityDeletion, CommunityDeletionInput};
use crate::contract::{
    PERMANENT_FAILURE_TYPE, RETRY_NOT_DUE_FAILURE_TYPE, STALE_GENERATION_FAILURE_TYPE,
};
use crate::delivery::{Deliveries, repeat_refusal};
use crate::operator::{Action, Expected, Kind, SignedAction, check_binding};
use crate::search;
use temporalio_common::search_attributes::SearchAttributes;
use temporalio_sdk::{ChildWorkflowOptions, ParentClosePolicy};

/// How long after a handler failure its row may be retried.
pub const RETRY_DELAY: Duration = Duration::from_secs(30);
/// Heartbeat timeout of a handler: a worker that dies mid-handler is noticed this fast, and the
/// row is resumed elsewhere.
pub const HANDLER_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one attempt at taking a user's inventory may run (it counts rows in every declared
/// table and scans the Redis namespaces of every community found).
pub const INVENTORY_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest one attempt of a real user's handler may run (it heartbeats every batch).
pub const REAL_HANDLER_TIMEOUT: Duration = Duration::from_secs(3600);
/// Handlers one run may execute before it pauses, so a run always returns to its operator.
pub const MAX_HANDLERS_PER_RUN: u32 = 100;

mod operator_messages;
mod recovery;

type UpdateError = Box<dyn std::error::Error + Send + Sync>;

/// One user deletion (reference 003 on Temporal). Workflow id: [`super::workflow_id`].
#[workflow]
pub struct UserDeletion {
    request_id: Uuid,
    requested_by: String,
    reason: Option<String>,
    target: String,
    /// The requester's signed `submit` statement.
    submitted: Option<SignedAction>,
    inventory: Result<UserInventory, TargetError>,
    registration_error: Option<String>,
    ledger: RunLedger,
    /// Register a new request, or resume one from Postgres.
    start: StartMode,
    /// Knobs carried across continue-as-new.
    tuning: UserTuning,
    /// This execution's run id: with a run's sequence number, the run token saved on the rows
    /// whose handlers the run starts.
    run_id: String,
    /// Set while an abort is being recorded: no run is admitted meanwhile.
    aborting: bool,
    /// The recorded abort: the workflow ends.
    aborted: Option<UserAbortRecord>,
    /// The signed statements taken in: an update's statement that arrives again as a signal
    /// (see [`crate::delivery`]) acts once.
    deliveries: Deliveries,
    /// Signalled messages refused, for `status`.
    refused_signals: Vec<RefusedSignal>,
}

#[workflow_methods]
impl UserDeletion {
    #[init]
    fn new(ctx: &WorkflowContextView, input: UserDeletionInput) -> Self {
        UserDeletion {
            request_id: input.request_id,
            inventory: initial_inventory(&input.target, input.demo_communities),
            requested_by: input.requested_by,
            reason: input.reason,
            submitted: input.signed,
            target: input.target,
            registration_error: None,
            ledger: RunLedger::default(),
            start: input.start,
            tuning: input.tuning,
            run_id: ctx.run_id().to_string(),
            aborting: false,
            aborted: None,
            deliveries: Deliveries::default(),
            refused_signals: Vec::new(),
        }
    }

    /// Registers the request, waits for approval, then serves `run` updates until the last
    /// transition completes the request.
    #[run]
    pub async fn run(ctx: &mut WorkflowContext<Self>) -> WorkflowResult<UserDeletionOutcome> {
        let request_id = ctx.state(|s| s.request_id);
        if let StartMode::Resume { cause } = ctx.state(|s| s.start.clone()) {
            recovery::resume_from_postgres(ctx, cause).await?;
            return serve_runs(ctx, request_id).await;
        }
        let inventory = match ctx.state(|s| s.inventory.clone()) {
            Ok(inventory) => inventory,
            Err(TargetError::InventoryPending) => match take_inventory(ctx, request_id).await {
                Ok(inventory) => inventory,
                Err(reason) => return Err(registration_failed(ctx, reason).into()),
            },
            Err(refusal) => return Err(registration_failed(ctx, refusal.to_string()).into()),
        };

        let register = RegisterUserInput {
            request_id,
            workflow_id: ctx.workflow_id().to_string(),
            target: inventory.target.clone(),
            requested_by: ctx.state(|s| s.requested_by.clone()),
            reason: ctx.state(|s| s.reason.clone()),
            inventory_digest: inventory.digest(),
            inventory: inventory.clone(),
            signed: ctx.state(|s| s.submitted.clone()),
        };
        if let Err(e) = ctx
            .execute_activity(RegisterUser, register, store_options())
            .await
        {
            return Err(registration_failed(ctx, describe(&e)).into());
        }
        enter_phase(ctx, UserPhase::AwaitingApproval);
        serve_runs(ctx, request_id).await
    }

    /// Waits until the request row is recorded and answers what `user submit` prints.
    #[update(name = "registration")]
    pub async fn registration(
        ctx: &mut WorkflowContext<Self>,
    ) -> Result<Registration, UpdateError> {
        ctx.wait_condition(|s| s.ledger.phase != UserPhase::Registering)
            .await?;
        ctx.state(|s| match (&s.inventory, &s.registration_error) {
            (Ok(inventory), None) => Ok(Registration {
                id: s.request_id,
                workflow_id: super::workflow_id(s.request_id),
                target: s.target.clone(),
                inventory_digest: inventory.digest(),
                inventory: inventory.clone(),
            }),
            (_, Some(error)) => Err(error.clone().into()),
            (Err(refusal), None) => Err(refusal.to_string().into()),
        })
    }

    #[update_validator(approve)]
    fn validate_approve(
        &self,
        _ctx: &WorkflowContextView,
        request: &UserApproveRequest,
    ) -> Result<(), UpdateError> {
        if self.deliveries.is_repeat(request.signed.as_ref()) {
            return Err(repeat_refusal(request.signed.as_ref()).into());
        }
        unless_refused(self.approval_refusal(request))
    }

    /// Persists the approval evidence (bound to the frozen digest) before answering.
    #[update(name = "approve")]
    pub async fn approve(
        ctx: &mut WorkflowContext<Self>,
        request: UserApproveRequest,
    ) -> Result<UserApprovalRecord, UpdateError> {
        operator_messages::approve(ctx, request).await
    }

    /// The same approval as a signal: what a command sends when its update got no answer in
    /// time (an admitted update is not durable), or the Web UI. A refusal is kept in `status`.
    #[signal(name = "approve")]
    pub async fn approve_signal(ctx: &mut WorkflowContext<Self>, input: RawValue) {
        operator_messages::approve_signal(ctx, input).await;
    }

    #[update_validator(abort)]
    fn validate_abort(
        &self,
        _ctx: &WorkflowContextView,
        request: &UserAbortRequest,
    ) -> Result<(), UpdateError> {
        if self.deliveries.is_repeat(request.signed.as_ref()) {
            return Err(repeat_refusal(request.signed.as_ref()).into());
        }
        unless_refused(self.abort_refusal(request))
    }

    /// Aborts the request before its irreversible point: the store refuses once a purge has
    /// started. The user's write fence, if this request holds it, is lifted; the workflow ends.
    #[update(name = "abort")]
    pub async fn abort(
        ctx: &mut WorkflowContext<Self>,
        request: UserAbortRequest,
    ) -> Result<UserAbortRecord, UpdateError> {
        operator_messages::abort(ctx, request).await
    }

    /// The same abort as a signal (see `approve_signal`).
    #[signal(name = "abort")]
    pub async fn abort_signal(ctx: &mut WorkflowContext<Self>, input: RawValue) {
        operator_messages::abort_signal(ctx, input).await;
    }

    #[update_validator(unblock)]
    fn validate_unblock(
        &self,
        _ctx: &WorkflowContextView,
        request: &UserUnblockRequest,
    ) -> Result<(), UpdateError> {
        if self.deliveries.is_repeat(request.signed.as_ref()) {
            return Err(repeat_refusal(request.signed.as_ref()).into());
        }
        unless_refused(self.unblock_refusal(request))
    }

    /// Unblocks the request once its reason was remedied: the store clears the reason and the
    /// retry deadline, and the next run re-checks what blocked it.
    #[update(name = "unblock")]
    pub async fn unblock(
        ctx: &mut WorkflowContext<Self>,
        request: UserUnblockRequest,
    ) -> Result<UserUnblockRecord, UpdateError> {
        operator_messages::unblock(ctx, request).await
    }

    /// The same unblock as a signal (see `approve_signal`).
    #[signal(name = "unblock")]
    pub async fn unblock_signal(ctx: &mut WorkflowContext<Self>, input: RawValue) {
        operator_messages::unblock_signal(ctx, input).await;
    }

    #[update_validator(request_run)]
    fn validate_run(
        &self,
        _ctx: &WorkflowContextView,
        _options: &RunOptions,
    ) -> Result<(), UpdateError> {
        if self.aborting {
            return Err("the request is being aborted".into());
        }
        // A resuming execution is reading its request from Postgres: the run waits for it.
        if self.ledger.phase == UserPhase::Registering && self.start != StartMode::Register {
            return Ok(());
        }
        unless_refused(self.ledger.run_rejection())
    }

    /// Lets the workflow execute stages with the given options; answers when it pauses again
    /// (after one handler and its transition in step mode, on a handler failure, or at the end).
    #[update(name = "run")]
    pub async fn request_run(ctx: &mut WorkflowContext<Self>, options: RunOptions) -> RunReport {
        // Only a resuming execution admits a run while registering (see the validator).
        let _taken_up = ctx
            .wait_condition(|s| s.ledger.phase != UserPhase::Registering)
            .await;
        let now = workflow_time_unix_ms(ctx);
        let run = match ctx.state_mut(|s| s.ledger.admit_run(options, now)) {
            Admission::Answer(report) => return report,
            Admission::Queued(run) => run,
        };
        publish_phase(ctx, UserPhase::Running);
        ctx.state_mut(|s| s.ledger.waiting_updates += 1);
        let waited = ctx.wait_condition(|s| s.ledger.runs_finished >= run).await;
        ctx.state_mut(|s| {
            s.ledger.waiting_updates -= 1;
            match (waited, s.ledger.report_of(run)) {
                (Ok(()), Some(report)) => report,
                _ => RunLedger::missing_report(run, s.request_id),
            }
        })
    }

    /// Asks the run in progress to stop before it starts another handler or commits another
    /// transition (a handler in flight is cancelled), and answers with that run's report once it
    /// ended. Idempotent: with no run in progress it answers at once and changes nothing.
    #[update(name = "stop")]
    pub async fn stop(ctx: &mut WorkflowContext<Self>, request: StopRequest) -> StopAnswer {
        let Some(run) = ctx.state_mut(|s| s.ledger.request_stop(request.requested_by)) else {
            return StopAnswer::NothingRunning {
                phase: ctx.state(|s| s.ledger.phase),
            };
        };
        ctx.state_mut(|s| s.ledger.waiting_updates += 1);
        let waited = ctx.wait_condition(|s| s.ledger.runs_finished >= run).await;
        ctx.state_mut(|s| {
            s.ledger.waiting_updates -= 1;
            let report = match (waited, s.ledger.report_of(run)) {
                (Ok(()), Some(report)) => report,
                _ => RunLedger::missing_report(run, s.request_id),
            };
            StopAnswer::Stopped { report }
        })
    }

    /// The same stop as the `stop` update, for the Web UI (a signal has no answer; the run's
    /// report shows in the `status` query). Any payload is accepted.
    #[signal(name = "stop")]
    pub async fn stop_signal(ctx: &mut WorkflowContext<Self>, _input: RawValue) {
        ctx.state_mut(|s| s.ledger.request_stop(Some("stop signal".into())));
    }

    /// Phase, approval, retry state and the last run's report.
    #[query]
    pub fn status(&self, _ctx: &WorkflowContextView) -> UserDeletionStatus {
        UserDeletionStatus {
            request_id: self.request_id,
            phase: self.ledger.phase,
            inventory_digest: self.inventory.as_ref().ok().map(UserInventory::digest),
            approval: self.ledger.approval.clone(),
            retry: self.ledger.retry.clone(),
            runs_started: self.ledger.runs_started,
            runs_finished: self.ledger.runs_finished,
            last_run: self.ledger.last_run.clone(),
            refused_signals: self.refused_signals.clone(),
        }
    }
}

impl UserDeletion {
    /// Why an abort must be refused before it is sent to the store, if it must.
    fn abort_refusal(&self, request: &UserAbortRequest) -> Option<String> {
        let refusal = match self.ledger.phase {
            UserPhase::Registering | UserPhase::RegistrationFailed => {
                Some("the request is not registered")
            }
            UserPhase::Approving => Some("an approval is being recorded; try again"),
            UserPhase::Running => Some(
                "a run of this request is in progress: stop it first with `buzz-deletion user \
                 stop ID`",
            ),
            UserPhase::Completed => Some("the request is completed: there is nothing to abort"),
            UserPhase::Aborted => Some("the request is already aborted"),
            _ if self.aborting => Some("an abort is already being recorded"),
            _ => None,
        };
        if let Some(refusal) = refusal {
            return Some(refusal.to_owned());
        }
        if request.reason.trim().is_empty() {
            return Some("an abort needs a reason (--reason)".into());
        }
        self.user_action_refusal(Action::Abort, request.signed.as_ref())
    }

    /// Why an operator's signed `action` (abort, unblock) is not a statement of that action on
    /// this request, if it is not.
    fn user_action_refusal(&self, action: Action, signed: Option<&SignedAction>) -> Option<String> {
        let expected = Expected {
            action,
            kind: Kind::User,
            request_id: self.request_id,
            target: &self.target,
            digest: None,
        };
        check_binding(signed, &expected)
            .err()
            .map(|refusal| refusal.to_string())
    }

    /// Why an unblock must be refused before it is sent to the store, if it must.
    fn unblock_refusal(&self, request: &UserUnblockRequest) -> Option<String> {
        let refusal = match self.ledger.phase {
            UserPhase::Registering | UserPhase::RegistrationFailed => {
                Some("the request is not registered")
            }
            UserPhase::Running => Some("a run of this request is in progress"),
            UserPhase::Completed => Some("the request is completed"),
            UserPhase::Aborted => Some("the request is aborted"),
            _ => None,
        };
        if let Some(refusal) = refusal {
            return Some(refusal.to_owned());
        }
        if request.reason.trim().is_empty() {
            return Some("an unblock needs a reason saying what was remedied (--reason)".into());
        }
        self.user_action_refusal(Action::Unblock, request.signed.as_ref())
    }

    /// Why the child community deletions an approval chose must be refused, if they must: each
    /// must be a community the frozen inventory shows the user owning alone, named once, with the
    /// host the inventory recorded and a `submit` signed for that child request.
    fn child_deletion_refusal(&self, children: &[ChildCommunityDeletion]) -> Option<String> {
        if children.is_empty() {
            return None;
        }
        let Ok(inventory) = &self.inventory else {
            return Some("the request has no inventory".into());
        };
        let mut named = std::collections::BTreeSet::new();
        for child in children {
            let footprint = inventory
                .community(child.community_id)
                .and_then(|c| c.footprint.as_ref());
            let Some(footprint) = footprint else {
                return Some(format!(
                    "community {} is not a community of this user's inventory; only a community \
                     the user owns alone can be deleted as a child community deletion",
                    child.community_id
                ));
            };
            if !footprint.owner || footprint.other_members != 0 {
                return Some(format!(
                    "the inventory does not show the user owning {} alone (owner: {}, other \
                     members: {}); only such a community can be deleted as a child community \
                     deletion",
                    footprint.host, footprint.owner, footprint.other_members
                ));
            }
            if footprint.host != child.host {
                return Some(format!(
                    "community {} is {} in the inventory, not {}",
                    child.community_id, footprint.host, child.host
                ));
            }
            if !named.insert(child.community_id) {
                return Some(format!("community {} is named twice", child.host));
            }
            let expected = Expected {
                action: Action::Submit,
                kind: Kind::Community,
                request_id: child.request_id,
                target: &child.host,
                digest: None,
            };
            if let Err(refusal) = check_binding(child.signed.as_ref(), &expected) {
                return Some(format!("child deletion of {}: {refusal}", child.host));
            }
        }
        None
    }

    fn approval_refusal(&self, request: &UserApproveRequest) -> Option<String> {
        let digest = self.inventory.as_ref().ok().map(UserInventory::digest);
        let requester = Operator {
            fingerprint: self.submitted.as_ref().map(|s| s.operator.as_str()),
            name: &self.requested_by,
        };
        if let Some(refusal) = self
            .ledger
            .approval_refusal(requester, digest.as_deref(), request)
        {
            return Some(refusal);
        }
        if let Some(refusal) = self.child_deletion_refusal(&request.child_deletions) {
            return Some(refusal);
        }
        // Signed for this request and its frozen digest.
        let expected = Expected {
            action: Action::Approve,
            kind: Kind::User,
            request_id: self.request_id,
            target: &self.target,
            digest: digest.as_deref(),
        };
        check_binding(request.signed.as_ref(), &expected)
            .err()
            .map(|refusal| refusal.to_string())
    }
}

/// Starts the child community deletions the approval chose, each a `CommunityDeletion` of its
/// own (its own frozen inventory, digest and two-person approval) that outlives this workflow.
async fn start_child_deletions(
    ctx: &mut WorkflowContext<UserDeletion>,
    record: &UserApprovalRecord,
    children: Vec<ChildCommunityDeletion>,
) -> Result<Vec<StartedChildDeletion>, UpdateError> {
    let parent = ctx.state(|s| s.request_id);
    let mut started = Vec::with_capacity(children.len());
    for child in children {
        let workflow_id = crate::community::workflow_id(child.request_id);
        let mut input = CommunityDeletionInput::new(
            child.request_id,
            child.host.clone(),
            record.approved_by.clone(),
            Some(format!(
                "child of user deletion {parent}: the user owned this community alone"
            )),
        );
        input.signed = child.signed.clone();
        let options = ChildWorkflowOptions::builder()
            .workflow_id(workflow_id.clone())
            .parent_close_policy(ParentClosePolicy::Abandon)
            .search_attributes(SearchAttributes::new([
                search::KIND.value_set("community".to_owned()),
                search::COMMUNITY_ID.value_set(child.community_id.to_string()),
                search::BLOCKED.value_set(false),
            ]))
            .build();
        ctx.start_child_workflow(CommunityDeletion::run, input, options)
            .await
            .map_err(|e| {
                format!(
                    "the approval is recorded, but the child deletion of {} could not be \
                     started: {e}",
                    child.host
                )
            })?;
        started.push(StartedChildDeletion {
            community_id: child.community_id,
            host: child.host,
            request_id: child.request_id,
            workflow_id,
        });
    }
    Ok(started)
}

/// The inventory a new execution registers: a demo target's is artificial and computed here; a
/// user target's is discovered by `user.take_inventory` when the workflow runs.
fn initial_inventory(
    target: &str,
    demo_communities: Option<u32>,
) -> Result<UserInventory, TargetError> {
    match parse_target(target)? {
        UserTarget::Demo { .. } => {
            UserInventory::demo_sized(target, demo_communities.unwrap_or(DEFAULT_DEMO_COMMUNITIES))
        }
        UserTarget::User { .. } if demo_communities.is_some() => Err(TargetError::SizedRealTarget),
        UserTarget::User { .. } => Err(TargetError::InventoryPending),
    }
}

/// Takes a user target's inventory and keeps it as the one this execution registers. The
/// activity refuses (permanently) a tenant table without a user-data declaration, naming it.
async fn take_inventory(
    ctx: &mut WorkflowContext<UserDeletion>,
    request_id: Uuid,
) -> Result<UserInventory, String> {
    let input = TakeUserInventoryInput {
        request_id,
        target: ctx.state(|s| s.target.clone()),
    };
    let options = ActivityOptions::with_start_to_close_timeout(INVENTORY_TIMEOUT)
        .retry_policy(retry_policy())
        .build();
    let inventory = ctx
        .execute_activity(TakeUserInventory, input, options)
        .await
        .map_err(|e| format!("the user's inventory could not be taken: {}", describe(&e)))?;
    ctx.state_mut(|s| s.inventory = Ok(inventory.clone()));
    Ok(inventory)
}

/// Waits for the approval, then serves `run` updates until the last transition completes the
/// request. Between runs it continues as new once this execution served its share of runs.
async fn serve_runs(
    ctx: &mut WorkflowContext<UserDeletion>,
    request_id: Uuid,
) -> WorkflowResult<UserDeletionOutcome> {
    ctx.wait_condition(|s| s.ledger.approval.is_some() || s.aborted.is_some())
        .await?;
    loop {
        if ctx.state(|s| s.aborted.is_some()) {
            break;
        }
        let continue_due = recovery::continue_as_new_due(ctx);
        ctx.wait_condition(move |s| {
            s.ledger.pending_run.is_some()
                || s.aborted.is_some()
                || (continue_due && s.ledger.waiting_updates == 0)
        })
        .await?;
        if ctx.state(|s| s.aborted.is_some()) {
            break;
        }
        let Some((run, options)) = ctx.state(|s| s.ledger.pending_run.clone()) else {
            return Err(recovery::continue_as_new(ctx).await);
        };
        let (outcome, handlers_run) = drive_run(ctx, request_id, &options, run).await;
        if let RunOutcome::Blocked { reason } = &outcome {
            let blocked = BlockedInput {
                request_id,
                reason: reason.clone(),
            };
            // The report carries the reason either way; saving it is for `user status`.
            let _ = ctx
                .execute_activity(RecordBlocked, blocked, store_options())
                .await;
        }
        ctx.state_mut(|s| s.ledger.finish_run(run, handlers_run, outcome));
        let phase = ctx.state(|s| s.ledger.phase);
        publish_phase(ctx, phase);
        if phase == UserPhase::Completed {
            break;
        }
    }
    // Let every waiting `run` update collect its report before the workflow closes.
    ctx.wait_condition(|s| s.ledger.waiting_updates == 0)
        .await?;
    Ok(UserDeletionOutcome {
        request_id,
        runs: ctx.state(|s| s.ledger.runs_finished),
    })
}

/// Executes stages until the run must pause; returns how it ended and how many handlers ran.
/// Every run first reads the approved inventory back from Postgres (verified against the
/// approval's digest and this build's known versions); the workflow never trusts its own copy.
async fn drive_run(
    ctx: &mut WorkflowContext<UserDeletion>,
    request_id: Uuid,
    options: &RunOptions,
    run: u64,
) -> (RunOutcome, u32) {
    let approved = match ctx
        .execute_activity(
            LoadApprovedInventory,
            UserRequestRef { request_id },
            store_options(),
        )
        .await
    {
        Ok(approved) => approved,
        Err(e) => {
            return (
                RunOutcome::Blocked {
                    reason: describe(&e),
                },
                0,
            );
        }
    };
    let inventory = &approved.inventory;
    let token = ctx.state(|s| run_token(&s.run_id, run));
    let mut handlers_run = 0;
    loop {
        match advance_one(ctx, request_id, inventory, options, &token, handlers_run).await {
            Ok(Step::Continue { handler_ran }) => handlers_run += u32::from(handler_ran),
            Ok(Step::Stop {
                outcome,
                handler_ran,
            }) => return (outcome, handlers_run + u32::from(handler_ran)),
            Err(reason) => return (RunOutcome::Blocked { reason }, handlers_run),
        }
    }
}

/// What one step did.
enum Step {
    /// A transition committed and the run goes on.
    Continue {
        /// Whether a handler executed (a reused saved result does not count).
        handler_ran: bool,
    },
    /// The run pauses with this outcome.
    Stop {
        /// How the run ends.
        outcome: RunOutcome,
        /// Whether a handler executed in this step.
        handler_ran: bool,
    },
}

/// Loads history, runs the current row's handler unless its result is already saved, and commits
/// the policy's decision. Errors are reasons the run is blocked.
async fn advance_one(
    ctx: &mut WorkflowContext<UserDeletion>,
    request_id: Uuid,
    inventory: &UserInventory,
    options: &RunOptions,
    token: &str,
    handlers_run: u32,
) -> Result<Step, String> {
    let snapshot = ctx
        .execute_activity(LoadProgress, UserRequestRef { request_id }, store_options())
        .await
        .map_err(|e| describe(&e))?;
    let progress = reconstruct(inventory, &snapshot.stages).map_err(|e| e.to_string())?;
    // The chain and the request row are written together: a disagreement stops the run before
    // anything is reported completed or started again.
    if let Some(problem) = lifecycle_problem(&snapshot.request_stage, progress.position) {
        return Err(problem);
    }
    let current = match progress.position {
        Position::Finished => {
            return Ok(Step::Stop {
                outcome: RunOutcome::Completed,
                handler_ran: false,
            });
        }
        Position::NotStarted if stop_requested(ctx) => {
            return Ok(Step::Stop {
                outcome: stopped_at(None, HandlerAtStop::NotStarted),
                handler_ran: false,
            });
        }
        Position::NotStarted => {
            let first = TransitionCommand::Initialize {
                first: initial_stage(inventory),
            };
            commit(ctx, request_id, first)
                .await?
                .current
                .ok_or("initializing the request created no stage row")?
        }
        Position::Current => progress
            .current()
            .cloned()
            .ok_or("the current stage row vanished during reconstruction")?,
    };

    let (completed, handler_ran) = if current.status == StageStatus::Completed {
        (current, false)
    } else if stop_requested(ctx) {
        return Ok(Step::Stop {
            outcome: stopped_at(Some(&current), HandlerAtStop::NotStarted),
            handler_ran: false,
        });
    } else {
        if handlers_run >= MAX_HANDLERS_PER_RUN {
            return Ok(Step::Stop {
                outcome: RunOutcome::HandlerBudgetReached {
                    limit: MAX_HANDLERS_PER_RUN,
                    stage_id: current.id,
                    stage: current.stage.clone(),
                    community_id: current.community_id,
                },
                handler_ran: false,
            });
        }
        let input = execute_input(request_id, &current, options, token);
        let executed = recovery::execute_unless_stopped(ctx, input, options).await;
        if let Err(e) = &executed
            && let Some(outcome) = store_refused_early_start(e, snapshot.retry.as_ref())
        {
            return Ok(Step::Stop {
                outcome,
                handler_ran: false,
            });
        }
        match executed.map_err(|e| describe(&e))? {
            None => {
                let handler = recovery::handler_after_interruption(ctx, current.id).await;
                return Ok(Step::Stop {
                    outcome: stopped_at(Some(&current), handler),
                    // This run's attempt saved the result before it was cut off.
                    handler_ran: handler == HandlerAtStop::ResultSaved,
                });
            }
            Some(StageOutcome::Completed {
                result,
                handler_ran,
            }) => {
                let mut completed = current;
                completed.status = StageStatus::Completed;
                completed.result = Some(result);
                (completed, handler_ran)
            }
            Some(StageOutcome::Failed { error, retry }) => {
                return Ok(Step::Stop {
                    outcome: RunOutcome::HandlerFailed {
                        stage_id: current.id,
                        stage: current.stage,
                        community_id: current.community_id,
                        error,
                        retry,
                    },
                    handler_ran: true,
                });
            }
        }
    };

    if stop_requested(ctx) {
        return Ok(Step::Stop {
            outcome: stopped_at(Some(&completed), HandlerAtStop::ResultSaved),
            handler_ran,
        });
    }
    let transition = decide(inventory, &progress.covered, &completed).map_err(|e| e.to_string())?;
    let advance = TransitionCommand::Advance {
        from_stage_id: completed.id,
        transition,
        successor: transition
            .next
            .map(|next| successor_stage(inventory, &next)),
    };
    let committed = commit(ctx, request_id, advance).await?;
    match committed.current {
        None if committed.request_completed => Ok(Step::Stop {
            outcome: RunOutcome::Completed,
            handler_ran,
        }),
        None => Err("the transition left the request without a current stage".into()),
        Some(next) if options.next_step && (handler_ran || handlers_run > 0) => Ok(Step::Stop {
            outcome: paused_at(&next),
            handler_ran,
        }),
        Some(_) => Ok(Step::Continue { handler_ran }),
    }
}

fn paused_at(row: &StageRecord) -> RunOutcome {
    RunOutcome::Paused {
        stage_id: row.id,
        stage: row.stage.clone(),
        community_id: row.community_id,
    }
}

async fn commit(
    ctx: &mut WorkflowContext<UserDeletion>,
    request_id: Uuid,
    command: TransitionCommand,
) -> Result<CommittedTransition, String> {
    let input = CommitTransitionInput {
        request_id,
        command,
    };
    ctx.execute_activity(CommitTransition, input, store_options())
        .await
        .map_err(|e| describe(&e))
}

fn execute_input(
    request_id: Uuid,
    row: &StageRecord,
    options: &RunOptions,
    token: &str,
) -> ExecuteStageInput {
    ExecuteStageInput {
        request_id,
        stage_id: row.id,
        directives: options.directives.clone(),
        executor_id: options.executor_id.clone(),
        retry_delay_ms: RETRY_DELAY.as_millis() as u64,
        run_token: Some(token.to_string()),
    }
}

/// Whether an operator asked the run in progress to stop.
fn stop_requested(ctx: &WorkflowContext<UserDeletion>) -> bool {
    ctx.state(|s| s.ledger.stop_requested)
}

/// Store calls are short; transient failures are retried without limit (visible in the Web UI as
/// a pending activity), permanent ones are typed non-retryable by the activity.
fn store_options() -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(Duration::from_secs(30))
        .retry_policy(retry_policy())
        .build()
}

fn retry_policy() -> RetryPolicy {
    crate::retry::until_success(
        Duration::from_secs(1),
        Duration::from_secs(30),
        [
            PERMANENT_FAILURE_TYPE,
            STALE_GENERATION_FAILURE_TYPE,
            RETRY_NOT_DUE_FAILURE_TYPE,
        ],
    )
}

/// The activity's own message when it failed with an application failure, else the SDK's.
fn describe(error: &ActivityExecutionError) -> String {
    match error.cause() {
        Some(IncomingError::Application(failure)) => failure.to_string(),
        _ => error.to_string(),
    }
}

fn workflow_time_unix_ms(ctx: &WorkflowContext<UserDeletion>) -> i64 {
    ctx.workflow_time()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn enter_phase(ctx: &WorkflowContext<UserDeletion>, phase: UserPhase) {
    ctx.state_mut(|s| s.ledger.phase = phase);
    publish_phase(ctx, phase);
}

/// Mirrors the phase into search attributes so the Web UI can filter user deletions.
fn publish_phase(ctx: &WorkflowContext<UserDeletion>, phase: UserPhase) {
    ctx.upsert_search_attributes([
        search::STAGE.value_set(phase.as_str().to_string()),
        search::BLOCKED.value_set(phase == UserPhase::Blocked),
    ]);
}

/// Records why registration failed (for the waiting `registration` update) and builds the
/// non-retryable failure that ends the workflow.
fn registration_failed(ctx: &WorkflowContext<UserDeletion>, reason: String) -> ApplicationFailure {
    ctx.state_mut(|s| s.registration_error = Some(reason.clone()));
    enter_phase(ctx, UserPhase::RegistrationFailed);
    ApplicationFailure::builder(reason)
        .type_name(PERMANENT_FAILURE_TYPE.to_string())
        .non_retryable(true)
        .build()
}

/// An update validator's verdict: accepted unless there is a `refusal`, which the caller sees.
fn unless_refused(refusal: Option<impl Into<UpdateError>>) -> Result<(), UpdateError> {
    match refusal {
        Some(refusal) => Err(refusal.into()),
        None => Ok(()),
    }
}
