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

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use workflows::user as contract;
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

use crate::activity_impl::activities_impl;
use crate::identity::consumer_of;
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
    archive: Option<crate::s3::ObjectStore>,
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
    pub fn with_receipt_archive(mut self, archive: crate::s3::ObjectStore) -> Self {
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

activities_impl! {
    impl UserActivities, each run by finish with |acts, ctx, input|;
    /// Records the request row with its frozen inventory.
    register(RegisterUserInput) -> RegisteredUserRequest = contract::RegisterUser => acts.store.register(&input, &consumer_of(&ctx));
    /// Persists approval evidence and marks the request approved.
    record_approval(UserApprovalInput) -> UserApprovalRecord = contract::RecordUserApproval => acts.store.record_approval(&input, &consumer_of(&ctx));
    /// Reads lifecycle, retry state and stage history.
    load_progress(UserRequestRef) -> ProgressSnapshot = contract::LoadProgress => acts.store.load_progress(input.request_id);
    /// Saves a transition decision and its successor (or completion).
    commit_transition(CommitTransitionInput) -> CommittedTransition = contract::CommitTransition => acts.commit_and_archive(input);
    /// Starts the current row's handler under a new generation, runs the dummy handler with
    /// heartbeats, and saves its result or failure under that generation. A row whose result an
    /// earlier attempt saved is answered from the store without running the handler again; it
    /// counts as run by this workflow run when the row carries this run's token.
    execute_stage(ExecuteStageInput) -> StageOutcome = contract::ExecuteStage => acts.run_stage(&ctx, input);
    /// Saves why a run was blocked.
    record_blocked(BlockedInput) -> () = contract::RecordBlocked => acts.store.record_blocked(input.request_id, &input.reason);
    /// Reads the stored inventory back and verifies it against the approval.
    load_approved_inventory(UserRequestRef) -> ApprovedInventory = contract::LoadApprovedInventory => acts.store.load_approved_inventory(input.request_id);
    /// Takes up a request for a resuming execution, fencing out older executions.
    resume(ResumeInput) -> ResumedRequest = contract::ResumeRequest => acts.store.resume(&input);
    /// Fences out the handler attempt a stop cancelled and reports whether it saved its result.
    interrupt_stage(InterruptStageInput) -> InterruptedStage = contract::stop::InterruptStage => acts.store.interrupt_stage(input.request_id, input.stage_id, input.requested_by.as_deref());
    /// Takes a real user's inventory (read-only): declarations first (failing closed, naming any
    /// undeclared tenant table), then every community holding data of the user.
    take_inventory(TakeUserInventoryInput) -> UserInventory = contract::TakeUserInventory => acts.take_real_inventory(input);
    /// Aborts the request before its irreversible point and lifts the user's write fence.
    abort(UserAbortInput) -> UserAbortRecord = contract::AbortUser => acts.store.abort(&input, &consumer_of(&ctx));
    /// Unblocks a blocked request after its reason was remedied.
    unblock(UserUnblockInput) -> UserUnblockRecord = contract::UnblockUser => acts.store.unblock(&input, &consumer_of(&ctx));
}

impl UserActivities {
    /// Awaits an activity's body and maps its failure through the one mapping.
    async fn finish<T, E: IntoActivityError>(
        &self,
        _ctx: &ActivityContext,
        body: impl Future<Output = Result<T, E>>,
    ) -> Result<T, ActivityError> {
        body.await.map_err(IntoActivityError::into_activity_error)
    }

    /// Commits a transition; a completed request's signed receipt is then copied to the archive.
    async fn commit_and_archive(
        &self,
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

    /// Runs the current stage row's handler under a new generation and saves its outcome.
    async fn run_stage(
        &self,
        ctx: &ActivityContext,
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
            None => run_dummy_handler(ctx, row.id, stage, row.community_id, &input.directives)
                .await
                .map_err(StageFailure::Dummy),
            Some(inventory) => {
                let run = erasure::HandlerRun {
                    ctx,
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

    /// Takes a real user's inventory (the `take_inventory` activity).
    async fn take_real_inventory(
        &self,
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
}

/// A failure an activity body ends with, as the activity returns it.
trait IntoActivityError {
    /// The failure Temporal sees.
    fn into_activity_error(self) -> ActivityError;
}

impl IntoActivityError for UserStoreError {
    fn into_activity_error(self) -> ActivityError {
        activity_error(self)
    }
}

impl IntoActivityError for ActivityError {
    fn into_activity_error(self) -> ActivityError {
        self
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
            (StageKind::PurgeDb | StageKind::PurgeAgents, Some(community)) => {
                erasure::purge_community(eraser, run, inventory, stage, community).await
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
        UserActivities::assert_registered_as(&workflows::user::ACTIVITY_NAMES);
    }
}
