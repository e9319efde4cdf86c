//! Activities of the `UserDeletion` workflow: each binds one contract of `workflows::user` to the
//! user-deletion store or to a dummy handler.

pub mod erasure;
pub use crate::store::user::faults;
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
    StageOutcome, TakeUserInventoryInput, UserAbortInput, UserAbortRecord, UserApprovalInput,
    UserApprovalRecord, UserInventory, UserRequestRef, UserUnblockInput, UserUnblockRecord,
};

pub use error::UserStoreError;
pub use store::{StageRowView, StageStart, UserRequestSummary, UserRequestView, UserStore};

use crate::store::user::erasure::ErasureAttempt;
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
    /// The real handlers of `user:` targets (Postgres, S3, Redis); `None` on a worker that can
    /// only run demo targets.
    eraser: Option<erasure::Eraser>,
}

impl UserActivities {
    /// Activities writing through `pool`.
    pub fn new(pool: PgPool) -> Self {
        UserActivities {
            store: UserStore::new(pool),
            faults: FaultPoints::default(),
            archive: None,
            eraser: None,
        }
    }

    /// The same activities running real handlers for `user:` targets through `eraser`.
    pub fn with_eraser(mut self, eraser: erasure::Eraser) -> Self {
        self.eraser = Some(eraser);
        self
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

    /// The same activities passing every [`FaultPoint`] through `faults` (end-to-end tests only),
    /// those inside the store's transactions included.
    pub fn with_fault_points(mut self, faults: FaultPoints) -> Self {
        self.store = self.store.with_faults(faults.clone());
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
        let handled = match self.real_target(input.request_id).await? {
            None => run_dummy_handler(&ctx, row.id, stage, row.community_id, &input.directives)
                .await
                .map_err(StageFailure::Dummy),
            Some(inventory) => {
                let run = erasure::HandlerRun {
                    ctx: &ctx,
                    attempt: ErasureAttempt {
                        request_id: input.request_id,
                        stage_id: row.id,
                        generation,
                    },
                    pubkey: workflows::user::real_user_pubkey(&inventory.target).unwrap_or(""),
                    stage: stage.as_str(),
                    community_id: row.community_id,
                };
                self.run_real_handler(&run, stage, &inventory, &input.directives)
                    .await
            }
        };
        match handled {
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
            Err(StageFailure::Dummy(HandlerError::Cancelled)) => Err(ActivityError::cancelled()),
            Err(StageFailure::Real(error)) if !error.is_saved_as_stage_failure() => {
                // Transient (retried by Temporal as a new attempt under a new generation),
                // cancelled, or superseded by a newer attempt: nothing to save.
                Err(crate::failure::activity_error(error))
            }
            Err(StageFailure::Real(error)) => {
                // A safety check failed: the request blocks until an operator remedies it and
                // unblocks; the failed row is retried by the next run after that.
                let error = error.to_string();
                let retry = self
                    .store
                    .save_stage_blocked(input.request_id, row.id, generation, &error)
                    .await
                    .map_err(activity_error)?;
                Ok(StageOutcome::Failed { error, retry })
            }
            Err(failure) => {
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

    /// Takes a real user's inventory (read-only): declarations first (failing closed, naming any
    /// undeclared tenant table), then every community holding data of the user.
    #[activity(definition = workflows::user::TakeUserInventory)]
    pub async fn take_inventory(
        self: Arc<Self>,
        _ctx: ActivityContext,
        input: TakeUserInventoryInput,
    ) -> Result<UserInventory, ActivityError> {
        let Some(pubkey) = workflows::user::real_user_pubkey(&input.target) else {
            return Err(crate::failure::activity_error(
                erasure::ErasureError::NotAUserTarget(input.target.clone()),
            ));
        };
        let eraser = self
            .eraser
            .as_ref()
            .ok_or(erasure::ErasureError::NotConfigured)
            .map_err(crate::failure::activity_error)?;
        match erasure::take_inventory(eraser, &input.target, pubkey).await {
            Ok(Ok(inventory)) => Ok(inventory),
            Ok(Err(refusal)) => Err(crate::failure::activity_error(refusal)),
            Err(error) => Err(crate::failure::activity_error(error)),
        }
    }

    /// Aborts the request before its irreversible point and lifts the user's write fence.
    #[activity(definition = workflows::user::AbortUser)]
    pub async fn abort(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: UserAbortInput,
    ) -> Result<UserAbortRecord, ActivityError> {
        self.store
            .abort(&input, &crate::identity::consumer_of(&ctx))
            .await
            .map_err(activity_error)
    }

    /// Unblocks a blocked request after its reason was remedied.
    #[activity(definition = workflows::user::UnblockUser)]
    pub async fn unblock(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: UserUnblockInput,
    ) -> Result<UserUnblockRecord, ActivityError> {
        self.store
            .unblock(&input, &crate::identity::consumer_of(&ctx))
            .await
            .map_err(activity_error)
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

/// Why a handler produced no result.
#[derive(Debug, thiserror::Error)]
enum StageFailure {
    /// The dummy handler of a demo target.
    #[error(transparent)]
    Dummy(HandlerError),
    /// A real handler.
    #[error(transparent)]
    Real(erasure::ErasureError),
}

impl UserActivities {
    /// The approved inventory when the request is a real user's (`user:` target); `None` for a
    /// demo target.
    async fn real_target(
        &self,
        request_id: uuid::Uuid,
    ) -> Result<Option<UserInventory>, ActivityError> {
        let approved = self
            .store
            .load_approved_inventory(request_id)
            .await
            .map_err(activity_error)?;
        Ok(
            workflows::user::real_user_pubkey(&approved.inventory.target)
                .is_some()
                .then_some(approved.inventory),
        )
    }

    /// Runs the real handler of `stage`. The run's directives apply as they do to a dummy: the
    /// delay is taken first (heartbeating), and an injected failure fails the stage before the
    /// handler changes anything.
    async fn run_real_handler(
        &self,
        run: &erasure::HandlerRun<'_>,
        stage: StageKind,
        inventory: &UserInventory,
        directives: &workflows::user::HandlerDirectives,
    ) -> Result<serde_json::Value, StageFailure> {
        handlers::take_delay(
            run.ctx,
            run.attempt.stage_id,
            stage,
            directives.stage_delay_ms,
        )
        .await
        .map_err(StageFailure::Dummy)?;
        if directives.fail_stage == Some(stage) {
            return Err(StageFailure::Dummy(HandlerError::Injected(stage)));
        }
        let eraser = self
            .eraser
            .as_ref()
            .ok_or(StageFailure::Real(erasure::ErasureError::NotConfigured))?;
        let handled = match (stage, run.community_id) {
            (StageKind::GateUser, _) => erasure::gate_user(eraser, run, inventory).await,
            (StageKind::PurgeDb, Some(community)) => {
                erasure::purge_db(eraser, run, inventory, community).await
            }
            (StageKind::PurgeAgents, Some(community)) => {
                erasure::purge_agents(eraser, run, inventory, community).await
            }
            (_, None) => Err(erasure::ErasureError::NoCommunity(
                stage.as_str().to_owned(),
            )),
        };
        handled.map_err(StageFailure::Real)
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
            user_activities::TakeInventory.name().to_string(),
            user_activities::Abort.name().to_string(),
            user_activities::Unblock.name().to_string(),
        ];
        assert_eq!(
            implemented,
            workflows::user::ACTIVITY_NAMES.map(String::from)
        );
    }
}
