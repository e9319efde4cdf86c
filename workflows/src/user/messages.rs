//! What operators send to a `UserDeletion` workflow and what it answers: the start input, the
//! `registration`, `approve` and `run` updates, and the `status` query.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::contracts::{HandlerDirectives, RetryState, UserApprovalRecord};
use super::inventory::UserInventory;
use super::resume::{StartMode, UserTuning};
use super::stop::HandlerAtStop;
use crate::operator::SignedAction;

/// The id of the workflow driving request `request_id`.
pub fn workflow_id(request_id: Uuid) -> String {
    format!("user-deletion-{request_id}")
}

/// Start input of `UserDeletion`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserDeletionInput {
    /// Request id chosen by the starter.
    pub request_id: Uuid,
    /// The user, e.g. `demo:alice`; anything but a `demo:` target fails the workflow.
    pub target: String,
    /// Operator who asked for the deletion (may not approve it).
    pub requested_by: String,
    /// Free-text reason.
    #[serde(default)]
    pub reason: Option<String>,
    /// Size of the demo inventory to freeze (`user submit --demo-communities N`); none means
    /// B and C. Recorded as the inventory's community list, so the approved digest covers it.
    #[serde(default)]
    pub demo_communities: Option<u32>,
    /// Register a new request (default), or resume an existing one from Postgres.
    #[serde(default)]
    pub start: StartMode,
    /// Knobs of the execution (carried across continue-as-new).
    #[serde(default)]
    pub tuning: UserTuning,
    /// The requester's signed `submit` statement; a run without one fails at registration.
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// Where a user deletion stands, as the workflow sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserPhase {
    /// Recording the request row and its frozen inventory.
    Registering,
    /// Registration failed; the workflow ends.
    RegistrationFailed,
    /// Waiting for a second operator to approve the frozen digest.
    AwaitingApproval,
    /// An approval is being persisted.
    Approving,
    /// Approved; no run yet.
    Approved,
    /// A `run` update is executing stages.
    Running,
    /// A step-mode run stopped after one handler and its transition.
    Paused,
    /// A handler failed; a run is refused until the saved deadline.
    RetryWait,
    /// An operator stopped the last run; the current row stays current.
    Stopped,
    /// A broken invariant stopped the last run; the reason is saved on the request.
    Blocked,
    /// Every stage is done.
    Completed,
    /// An operator aborted the request before its irreversible point; the workflow ends.
    Aborted,
}

impl UserPhase {
    /// The stable name used in search attributes and CLI output.
    pub fn as_str(self) -> &'static str {
        match self {
            UserPhase::Registering => "registering",
            UserPhase::RegistrationFailed => "registration_failed",
            UserPhase::AwaitingApproval => "awaiting_approval",
            UserPhase::Approving => "approving",
            UserPhase::Approved => "approved",
            UserPhase::Running => "running",
            UserPhase::Paused => "paused",
            UserPhase::RetryWait => "retry_wait",
            UserPhase::Stopped => "stopped",
            UserPhase::Blocked => "blocked",
            UserPhase::Completed => "completed",
            UserPhase::Aborted => "aborted",
        }
    }
}

/// Answer of the `registration` update: what `user submit` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The request id.
    pub id: Uuid,
    /// The workflow id.
    pub workflow_id: String,
    /// The user.
    pub target: String,
    /// The frozen inventory.
    pub inventory: UserInventory,
    /// Its digest, which the approver must name.
    pub inventory_digest: String,
}

/// Options of one `run` update (`user run`). The demo directives travel with the run, not with
/// the request: a later run without them behaves normally.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOptions {
    /// Stop after one handler and its transition (`--next-step`).
    #[serde(default)]
    pub next_step: bool,
    /// Demo directives for the handlers of this run.
    #[serde(default)]
    pub directives: HandlerDirectives,
    /// Label saved on the rows this run starts (`--executor-id`).
    #[serde(default)]
    pub executor_id: Option<String>,
}

/// How a run ended (or why it did not start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RunOutcome {
    /// Step mode: one handler ran and its transition committed; the successor is current.
    Paused {
        /// The new current row.
        stage_id: Uuid,
        /// Its stage.
        stage: String,
        /// Its community.
        community_id: Option<Uuid>,
    },
    /// The run executed its budget of handlers (`MAX_HANDLERS_PER_RUN`) and paused so that it
    /// returns to its operator; the next run continues from the current row.
    HandlerBudgetReached {
        /// Handlers one run may execute.
        limit: u32,
        /// The current row, not started.
        stage_id: Uuid,
        /// Its stage.
        stage: String,
        /// Its community.
        community_id: Option<Uuid>,
    },
    /// The last transition committed: the request is completed.
    Completed,
    /// The request was already completed; nothing was changed.
    AlreadyCompleted,
    /// A handler failed. Its row stays failed and current; the saved deadline gates the next run.
    HandlerFailed {
        /// The failed row.
        stage_id: Uuid,
        /// Its stage.
        stage: String,
        /// Its community.
        community_id: Option<Uuid>,
        /// The handler's error.
        error: String,
        /// The saved retry state.
        retry: RetryState,
    },
    /// Refused: the saved retry deadline has not passed (by the workflow's clock at admission, or
    /// by the database's clock when the store refused the handler's start). Nothing was changed.
    RetryNotDue {
        /// The saved retry state.
        retry: RetryState,
    },
    /// Refused: another run is executing. Nothing was changed.
    RunInProgress,
    /// Refused: the request is not approved. Nothing was changed.
    NotApproved,
    /// An operator stopped the run (`user stop`, Ctrl-C): no further handler started and no
    /// further transition committed; the row named here stays current.
    Stopped {
        /// The current row (None when the run stopped before the first row was created).
        stage_id: Option<Uuid>,
        /// Its stage.
        stage: Option<String>,
        /// Its community.
        community_id: Option<Uuid>,
        /// What its handler had done.
        handler: HandlerAtStop,
    },
    /// A broken invariant (unreadable history, refused write) stopped the run.
    Blocked {
        /// What broke.
        reason: String,
    },
}

impl RunOutcome {
    /// Whether the operator must look: the CLI exits 1 for these.
    pub fn needs_attention(&self) -> bool {
        !matches!(
            self,
            RunOutcome::Paused { .. }
                | RunOutcome::HandlerBudgetReached { .. }
                | RunOutcome::Completed
                | RunOutcome::AlreadyCompleted
                | RunOutcome::Stopped { .. }
        )
    }
}

/// Answer of the `run` update, given once the workflow pauses again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// Sequence number of the run (0 when it was refused or had nothing to do).
    pub run: u64,
    /// Handlers executed by this run (a saved result that was reused does not count).
    pub handlers_run: u32,
    /// How it ended.
    pub outcome: RunOutcome,
}

/// Answer of the `status` query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserDeletionStatus {
    /// The request id.
    pub request_id: Uuid,
    /// Where the workflow stands.
    pub phase: UserPhase,
    /// The frozen digest (none for a refused target).
    pub inventory_digest: Option<String>,
    /// The approval evidence, once persisted.
    pub approval: Option<UserApprovalRecord>,
    /// The retry state while a failed handler waits.
    pub retry: Option<RetryState>,
    /// Runs admitted so far.
    pub runs_started: u64,
    /// Runs that have paused or ended.
    pub runs_finished: u64,
    /// The report of the last finished run.
    pub last_run: Option<RunReport>,
    /// Operator messages that came as signals and were refused (the newest last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_signals: Vec<RefusedSignal>,
}

/// A signalled operator message the workflow refused: nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedSignal {
    /// `approve`, `abort` or `unblock`.
    pub signal: String,
    /// The operator the message named (`unknown` when it named none).
    pub actor: String,
    /// Why it was refused.
    pub reason: String,
}

/// Result of a completed `UserDeletion` workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserDeletionOutcome {
    /// The request id.
    pub request_id: Uuid,
    /// Runs it took.
    pub runs: u64,
}
