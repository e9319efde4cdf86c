//! Contracts of the activities `UserDeletion` calls: name, typed input, typed output.
//!
//! The stage policy stays in the workflow; the activities only save what it decided. Every write
//! is conditional: a handler attempt bumps the request's execution generation when it starts and
//! saves its outcome only while that generation is still the request's, and a transition is a
//! compare-and-set from the row the workflow expects to be current. Replayed or retried calls
//! find their earlier effect and return it instead of writing twice.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::approved::ApprovedInventory;
use super::inventory::UserInventory;
use super::policy::Transition;
use super::resume::{ResumeInput, ResumedRequest};
use super::stage::{StageKind, StageStatus};
use super::stop::{InterruptStageInput, InterruptedStage};
use crate::activity_contracts;
use crate::operator::SignedAction;

/// Input of `user.register`: the request as submitted, with its frozen inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterUserInput {
    /// Request id chosen by the starter.
    pub request_id: Uuid,
    /// The workflow driving the request.
    pub workflow_id: String,
    /// The user, e.g. `demo:alice`.
    pub target: String,
    /// Operator who asked for the deletion.
    pub requested_by: String,
    /// Free-text reason.
    pub reason: Option<String>,
    /// The inventory to freeze.
    pub inventory: UserInventory,
    /// Its digest (see [`UserInventory::digest`]); re-checked by the activity.
    pub inventory_digest: String,
    /// The requester's signed `submit` statement, verified in the registering transaction.
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// The registered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredUserRequest {
    /// The request id.
    pub request_id: Uuid,
    /// The frozen digest an approver must name.
    pub inventory_digest: String,
}

/// An approval as the operator submits it (update `approve`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserApproveRequest {
    /// The approving operator; must differ from the requester.
    pub approved_by: String,
    /// The frozen inventory digest the approver looked at.
    pub inventory_digest: String,
    /// Optional note kept with the evidence.
    #[serde(default)]
    pub note: Option<String>,
    /// Communities the user owns alone that the approver chose to delete as child community
    /// deletions (each with its own frozen inventory, digest and two-person approval).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_deletions: Vec<ChildCommunityDeletion>,
    /// The approver's signed `approve` statement (required).
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// Input of `user.record_approval`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserApprovalInput {
    /// The request being approved.
    pub request_id: Uuid,
    /// The approval, already validated by the workflow (re-checked against the stored digest).
    pub approval: UserApproveRequest,
}

/// Approval evidence as persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserApprovalRecord {
    /// The approving operator.
    pub approved_by: String,
    /// RFC 3339 time the evidence row was written.
    pub approved_at: String,
    /// The digest approved.
    pub inventory_digest: String,
    /// The note, if any.
    pub note: Option<String>,
    /// The approver's signed statement as stored.
    #[serde(default)]
    pub signed: Option<SignedAction>,
    /// The child community deletions this approval started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_deletions: Vec<StartedChildDeletion>,
}

/// A community the user owns alone, chosen in the approval to be deleted as a child community
/// deletion. The approver signs the child's `submit` (the child's requester is the approver; its
/// approval needs another operator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildCommunityDeletion {
    /// The community (must be one the inventory shows the user owning alone).
    pub community_id: Uuid,
    /// Its host, as the inventory recorded it (what the signed submit names).
    pub host: String,
    /// The child request's id.
    pub request_id: Uuid,
    /// The approver's signed `submit` of the community deletion.
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// A child community deletion the approval started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedChildDeletion {
    /// The community.
    pub community_id: Uuid,
    /// Its host.
    pub host: String,
    /// The child request (`community status ID`, `community approve ID`).
    pub request_id: Uuid,
    /// Its workflow.
    pub workflow_id: String,
}

/// Names the request an activity works on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRequestRef {
    /// The request id.
    pub request_id: Uuid,
}

/// One row of stage history as the policy reads it. The stage name is kept as saved so that
/// reconstruction can refuse a name this version does not know instead of guessing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    /// Row id.
    pub id: Uuid,
    /// Saved stage name.
    pub stage: String,
    /// The community of a per-community stage.
    pub community_id: Option<Uuid>,
    /// Execution status.
    pub status: StageStatus,
    /// Whether the row is the request's durable position.
    pub is_current: bool,
    /// Handler starts so far.
    pub attempt: u32,
    /// Inputs saved when the row was created.
    pub inputs: serde_json::Value,
    /// The handler's saved result.
    pub result: Option<serde_json::Value>,
    /// The transition decision saved when the row was left.
    pub transition: Option<serde_json::Value>,
    /// The row this one was created from (None for the initial stage).
    pub previous_stage_id: Option<Uuid>,
}

/// The saved retry state of a request whose handler failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryState {
    /// Failed handler attempts since the last successful transition.
    pub retry_count: u32,
    /// RFC 3339 time before which a run is refused.
    pub next_attempt_at: String,
    /// The same deadline in milliseconds since the Unix epoch, for comparison with workflow time.
    pub next_attempt_at_unix_ms: i64,
}

/// Output of `user.load_progress`: the request's lifecycle and its whole stage history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressSnapshot {
    /// `deletion.requests.stage` (inventoried, approved, running, retry_wait, completed, aborted).
    pub request_stage: String,
    /// Saved retry state, if a handler failed since the last successful transition.
    pub retry: Option<RetryState>,
    /// Every stage row of the request, in no particular order (the policy orders them by chain).
    pub stages: Vec<StageRecord>,
}

/// A stage row to create.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageSpec {
    /// The stage.
    pub stage: StageKind,
    /// Its community, for a per-community stage.
    pub community_id: Option<Uuid>,
    /// Inputs the handler will read.
    pub inputs: serde_json::Value,
}

/// What `user.commit_transition` must save, atomically.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TransitionCommand {
    /// Create the initial stage of an approved request with empty history, and mark it running.
    Initialize {
        /// The initial stage.
        first: StageSpec,
    },
    /// Leave the completed current row `from_stage_id`: save `transition` on it, then create
    /// `successor` as the new current row, or complete the request when there is none.
    Advance {
        /// The row the workflow expects to be current and completed.
        from_stage_id: Uuid,
        /// The decision to save on it.
        transition: Transition,
        /// The row to create next.
        successor: Option<StageSpec>,
    },
}

/// Input of `user.commit_transition`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitTransitionInput {
    /// The request.
    pub request_id: Uuid,
    /// What to save.
    pub command: TransitionCommand,
}

/// Output of `user.commit_transition`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommittedTransition {
    /// The new current row (None when the request completed).
    pub current: Option<StageRecord>,
    /// Whether the request is now completed.
    pub request_completed: bool,
}

/// Demo directives of one run, passed to every handler it executes. They simulate runtime
/// observations and faults; they never change the saved inventory or the stage rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandlerDirectives {
    /// Make the handler of this stage fail (`--fail-stage`).
    #[serde(default)]
    pub fail_stage: Option<StageKind>,
    /// Communities whose `purge_db` reports `has_agents: false` (`--demo-no-agents-in`).
    #[serde(default)]
    pub no_agents_in: Vec<Uuid>,
    /// Time each handler takes, heartbeating meanwhile (`--stage-delay-ms`).
    #[serde(default)]
    pub stage_delay_ms: u64,
}

/// Input of `user.execute_stage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteStageInput {
    /// The request.
    pub request_id: Uuid,
    /// The current row whose handler to run.
    pub stage_id: Uuid,
    /// Demo directives of this run.
    pub directives: HandlerDirectives,
    /// Label of the operator's run, saved on the row.
    pub executor_id: Option<String>,
    /// How long after a failure the row may be retried.
    pub retry_delay_ms: u64,
    /// The token of the workflow run asking (see [`super::resume::run_token`]). Saved on the row
    /// when the handler starts, so a retried attempt knows from the row whether this run already
    /// executed the handler.
    #[serde(default)]
    pub run_token: Option<String>,
}

/// Output of `user.execute_stage`: the outcome the activity saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum StageOutcome {
    /// The handler's result is saved (or was already saved by an earlier attempt, in which case
    /// the handler did not run again).
    Completed {
        /// The saved result.
        result: serde_json::Value,
        /// Whether this run executed the handler: decided from the row's saved run token, so an
        /// attempt retried after a crash that followed the save still answers true. False when
        /// an earlier run saved the result.
        handler_ran: bool,
    },
    /// The handler failed; the row is failed and current, the request waits for `retry`.
    Failed {
        /// The handler's error.
        error: String,
        /// The saved retry state.
        retry: RetryState,
    },
}

/// Input of `user.record_blocked`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedInput {
    /// The request.
    pub request_id: Uuid,
    /// Why the run stopped (a policy or store invariant failed); saved as the request's error.
    pub reason: String,
}

/// An operator's abort or unblock as submitted (updates `abort` and `unblock`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserOperatorRequest {
    /// The operator (the signing key's registered name).
    pub requested_by: String,
    /// Why the request is aborted, or what was done about the reason it is blocked (kept in the
    /// audit trail).
    pub reason: String,
    /// The operator's signed `abort` or `unblock` statement (required).
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// An abort as the operator submits it (update `abort`): refused once a purge has started.
pub type UserAbortRequest = UserOperatorRequest;

/// Input of `user.abort`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserAbortInput {
    /// The request.
    pub request_id: Uuid,
    /// The abort as submitted.
    pub abort: UserAbortRequest,
}

/// The recorded abort.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserAbortRecord {
    /// The request.
    pub request_id: Uuid,
    /// Who aborted it (the key's registered name).
    pub aborted_by: String,
    /// Why.
    pub reason: String,
    /// Whether a per-user write fence this request held was lifted (the user may write again).
    pub fence_lifted: bool,
}

/// An unblock as the operator submits it (update `unblock`), after remedying the reason.
pub type UserUnblockRequest = UserOperatorRequest;

/// Input of `user.unblock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserUnblockInput {
    /// The request.
    pub request_id: Uuid,
    /// The unblock as submitted.
    pub unblock: UserUnblockRequest,
}

/// The recorded unblock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserUnblockRecord {
    /// The request.
    pub request_id: Uuid,
    /// Who unblocked it.
    pub unblocked_by: String,
    /// What they did about it.
    pub reason: String,
    /// The blocked reason that was cleared.
    pub cleared: String,
}

/// Input of `user.take_inventory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeUserInventoryInput {
    /// The request being registered.
    pub request_id: Uuid,
    /// The `user:<pubkey>` target.
    pub target: String,
}

activity_contracts! {
    /// Records the request row with its frozen inventory and digest (idempotent).
    RegisterUser = "user.register": RegisterUserInput => RegisteredUserRequest;
    /// Persists approval evidence bound to the frozen digest and marks the request approved.
    RecordUserApproval = "user.record_approval": UserApprovalInput => UserApprovalRecord;
    /// Reads the request's lifecycle, retry state and stage history (read-only).
    LoadProgress = "user.load_progress": UserRequestRef => ProgressSnapshot;
    /// Saves a transition decision and creates the successor row, or completes the request.
    CommitTransition = "user.commit_transition": CommitTransitionInput => CommittedTransition;
    /// Runs the current row's handler (a dummy for a demo target, the real one for a user
    /// target), heartbeating, and saves its outcome.
    ExecuteStage = "user.execute_stage": ExecuteStageInput => StageOutcome;
    /// Saves why a run stopped on a broken invariant, so `user status` shows it.
    RecordBlocked = "user.record_blocked": BlockedInput => ();
    /// Reads the stored inventory and the approval, and verifies the inventory's version and its
    /// recomputed digest against the approval (read-only).
    LoadApprovedInventory = "user.load_approved_inventory": UserRequestRef => ApprovedInventory;
    /// Reads a request to resume from Postgres and bumps its execution generation (fencing out
    /// every older execution's late writes).
    ResumeRequest = "user.resume": ResumeInput => ResumedRequest;
    /// Fences out the handler attempt a stop cancelled (bumps the execution generation) and
    /// reports whether it saved its result first; records the stop in the audit trail.
    InterruptStage = "user.interrupt_stage": InterruptStageInput => InterruptedStage;
    /// Discovers a real user's footprint: the user-data declarations (refusing any tenant table
    /// without one), every community where the user participates or left data, and per community
    /// the rows per declared table, media objects, agents and Redis keys (read-only).
    TakeUserInventory = "user.take_inventory": TakeUserInventoryInput => UserInventory;
    /// Aborts the request before its irreversible point (no purge started): verifies and consumes
    /// the signed statement, marks the request aborted and lifts the user's write fence.
    AbortUser = "user.abort": UserAbortInput => UserAbortRecord;
    /// Unblocks a blocked request: verifies and consumes the signed statement, clears the reason
    /// and the retry deadline. The next run re-checks whatever blocked it.
    UnblockUser = "user.unblock": UserUnblockInput => UserUnblockRecord;
}
