//! Activities of the `UserDeletion` workflow: each binds one contract of `workflows::user` to the
//! user-deletion store or to a dummy handler.

pub mod faults;
pub mod handlers;

/// The user-deletion store, at its old path: it lives beside the community store in
/// `crate::store::user`.
pub use crate::store::user as store;
/// The user-deletion store's errors, at their old path.
pub use crate::store::user::error;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use workflows::user::resume::ResumeInput;
use workflows::user::stop::{InterruptStageInput, InterruptedStage};
use workflows::user::{
    ApprovedInventory, BlockedInput, CommitTransitionInput, CommittedTransition, ExecuteStageInput,
    ProgressSnapshot, RegisterUserInput, RegisteredUserRequest, ResumedRequest, StageKind,
    StageOutcome, UserApprovalInput, UserApprovalRecord, UserRequestRef,
};

pub use error::UserStoreError;
pub use store::{StageRowView, StageStart, UserRequestSummary, UserRequestView, UserStore};

use faults::{FaultPoint, FaultPoints};
use handlers::{HandlerError, run_dummy_handler};

/// The user-deletion activities, registered on a worker with
/// `WorkerOptions::register_activities(UserActivities::new(pool))`.
#[derive(Debug, Clone)]
pub struct UserActivities {
    store: UserStore,
    faults: FaultPoints,
    /// The object-lock bucket signed receipts are copied to, when configured.
    archive: Option<crate::objects::ObjectStore>,
}

impl UserActivities {
    /// Activities writing through `pool`.
    pub fn new(pool: PgPool) -> Self {
        UserActivities {
            store: UserStore::new(pool),
            faults: FaultPoints::default(),
            archive: None,
        }
    }

    /// The same activities signing each completed request's receipt with `key`.
    pub fn with_receipt_key(mut self, key: crate::certificates::ReceiptKey) -> Self {
        self.store = self.store.with_receipt_key(key);
        self
    }

    /// The same activities copying every signed receipt to `archive` (an object-lock bucket).
    pub fn with_receipt_archive(mut self, archive: crate::objects::ObjectStore) -> Self {
        self.archive = Some(archive);
        self
    }

    /// The same activities passing every [`FaultPoint`] through `faults` (end-to-end tests only).
    pub fn with_fault_points(mut self, faults: FaultPoints) -> Self {
        self.faults = faults;
        self
    }
}

#[activities]
impl UserActivities {
    /// Records the request row with its frozen inventory.
    #[activity(definition = workflows::user::RegisterUser)]
    pub async fn register(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RegisterUserInput,
    ) -> Result<RegisteredUserRequest, ActivityError> {
        self.store
            .register(&input, &crate::identity::consumer_of(&ctx))
            .await
            .map_err(activity_error)
    }

    /// Persists approval evidence and marks the request approved.
    #[activity(definition = workflows::user::RecordUserApproval)]
    pub async fn record_approval(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: UserApprovalInput,
    ) -> Result<UserApprovalRecord, ActivityError> {
        self.store
            .record_approval(&input, &crate::identity::consumer_of(&ctx))
            .await
            .map_err(activity_error)
    }

    /// Reads lifecycle, retry state and stage history.
    #[activity(definition = workflows::user::LoadProgress)]
    pub async fn load_progress(
        self: Arc<Self>,
        _ctx: ActivityContext,
        input: UserRequestRef,
    ) -> Result<ProgressSnapshot, ActivityError> {
        self.store
            .load_progress(input.request_id)
            .await
            .map_err(activity_error)
    }

    /// Saves a transition decision and its successor (or completion).
    #[activity(definition = workflows::user::CommitTransition)]
    pub async fn commit_transition(
        self: Arc<Self>,
        _ctx: ActivityContext,
        input: CommitTransitionInput,
    ) -> Result<CommittedTransition, ActivityError> {
        let committed = self
            .store
            .commit_transition(&input)
            .await
            .map_err(activity_error)?;
        // The receipt was signed in the completing transaction; its object-lock copy is written
        // (once) after the commit, so a retry finishes an archive write that failed.
        if committed.request_completed
            && let Some(archive) = &self.archive
        {
            let store = crate::store::Store::from_pool(self.store.pool().clone());
            crate::certificates::archive_receipt(&store, archive, input.request_id)
                .await
                .map_err(crate::failure::activity_error)?;
        }
        self.faults.pass(FaultPoint::TransitionCommitted).await;
        Ok(committed)
    }

    /// Starts the current row's handler under a new generation, runs the dummy handler with
    /// heartbeats, and saves its result or failure under that generation. A row whose result an
    /// earlier attempt saved is answered from the store without running the handler again; it
    /// counts as run by this workflow run when the row carries this run's token.
    #[activity(definition = workflows::user::ExecuteStage)]
    pub async fn execute_stage(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ExecuteStageInput,
    ) -> Result<StageOutcome, ActivityError> {
        let start = self
            .store
            .start_stage_for_run(
                input.request_id,
                input.stage_id,
                input.executor_id.as_deref(),
                input.run_token.as_deref(),
            )
            .await
            .map_err(activity_error)?;
        let (generation, row) = match start {
            StageStart::AlreadyCompleted { result, run_token } => {
                // Decided from the durable row: an attempt of this run that saved the result and
                // died before Temporal recorded it done still counts as this run's handler.
                let handler_ran = run_token.is_some() && run_token == input.run_token;
                return Ok(StageOutcome::Completed {
                    result,
                    handler_ran,
                });
            }
            StageStart::Started { generation, row } => (generation, row),
        };
        self.faults.pass(FaultPoint::HandlerStarted).await;
        let stage: StageKind = row.stage.parse().map_err(|e| {
            activity_error(UserStoreError::CorruptRow(format!(
                "stage row {}: {e}",
                row.id
            )))
        })?;
        match run_dummy_handler(&ctx, row.id, stage, row.community_id, &input.directives).await {
            Ok(result) => {
                self.store
                    .save_stage_result(input.request_id, row.id, generation, &result)
                    .await
                    .map_err(activity_error)?;
                self.faults.pass(FaultPoint::ResultSaved).await;
                Ok(StageOutcome::Completed {
                    result,
                    handler_ran: true,
                })
            }
            Err(HandlerError::Cancelled) => Err(ActivityError::cancelled()),
            Err(failure @ HandlerError::Injected(_)) => {
                let error = failure.to_string();
                let retry = self
                    .store
                    .save_stage_failure(
                        input.request_id,
                        row.id,
                        generation,
                        &error,
                        Duration::from_millis(input.retry_delay_ms),
                    )
                    .await
                    .map_err(activity_error)?;
                Ok(StageOutcome::Failed { error, retry })
            }
        }
    }

    /// Reads the stored inventory back and verifies it against the approval.
    #[activity(definition = workflows::user::LoadApprovedInventory)]
    pub async fn load_approved_inventory(
        self: Arc<Self>,
        _ctx: ActivityContext,
        input: UserRequestRef,
    ) -> Result<ApprovedInventory, ActivityError> {
        self.store
            .load_approved_inventory(input.request_id)
            .await
            .map_err(activity_error)
    }

    /// Takes up a request for a resuming execution, fencing out older executions.
    #[activity(definition = workflows::user::ResumeRequest)]
    pub async fn resume(
        self: Arc<Self>,
        _ctx: ActivityContext,
        input: ResumeInput,
    ) -> Result<ResumedRequest, ActivityError> {
        self.store.resume(&input).await.map_err(activity_error)
    }

    /// Fences out the handler attempt a stop cancelled and reports whether it saved its result.
    #[activity(definition = workflows::user::stop::InterruptStage)]
    pub async fn interrupt_stage(
        self: Arc<Self>,
        _ctx: ActivityContext,
        input: InterruptStageInput,
    ) -> Result<InterruptedStage, ActivityError> {
        self.store
            .interrupt_stage(
                input.request_id,
                input.stage_id,
                input.requested_by.as_deref(),
            )
            .await
            .map_err(activity_error)
    }

    /// Saves why a run was blocked.
    #[activity(definition = workflows::user::RecordBlocked)]
    pub async fn record_blocked(
        self: Arc<Self>,
        _ctx: ActivityContext,
        input: BlockedInput,
    ) -> Result<(), ActivityError> {
        self.store
            .record_blocked(input.request_id, &input.reason)
            .await
            .map_err(activity_error)
    }
}

/// Maps a store error to Temporal's retry decision through the one mapping
/// ([`crate::failure::activity_error`]; see `UserStoreError::report` for the failures with a type
/// of their own).
fn activity_error(error: UserStoreError) -> ActivityError {
    crate::failure::activity_error(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_activity_names_match_the_contracts() {
        let implemented = [
            user_activities::Register.name().to_string(),
            user_activities::RecordApproval.name().to_string(),
            user_activities::LoadProgress.name().to_string(),
            user_activities::CommitTransition.name().to_string(),
            user_activities::ExecuteStage.name().to_string(),
            user_activities::RecordBlocked.name().to_string(),
            user_activities::LoadApprovedInventory.name().to_string(),
            user_activities::Resume.name().to_string(),
            user_activities::InterruptStage.name().to_string(),
        ];
        assert_eq!(
            implemented,
            workflows::user::ACTIVITY_NAMES.map(String::from)
        );
    }
}
