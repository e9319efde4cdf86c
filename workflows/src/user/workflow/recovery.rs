//! The recovery paths of `UserDeletion`: resuming a request from Postgres, continuing as new
//! between runs, and running a handler while watching for an operator's stop.

use std::pin::pin;
use std::time::Duration;

use futures::FutureExt;
use temporalio_sdk::workflows::select;
use temporalio_sdk::{
    ActivityExecutionError, ActivityOptions, ContinueAsNewOptions, WorkflowCancellationToken,
    WorkflowContext, WorkflowResult, WorkflowTermination,
};

use super::{
    HANDLER_HEARTBEAT_TIMEOUT, REAL_HANDLER_TIMEOUT, UserDeletion, describe, enter_phase,
    registration_failed, retry_policy, store_options,
};
use crate::user::contracts::{ExecuteStage, ExecuteStageInput, StageOutcome};
use crate::user::contracts::{InterruptStage, ResumeRequest};
use crate::user::inventory::UserInventory;
use crate::user::messages::{RunOptions, UserDeletionInput, UserPhase};
use crate::user::resume::{ResumeCause, ResumeInput, StartMode};
use crate::user::stop::{HandlerAtStop, InterruptStageInput};
use crate::user::target::real_user_pubkey;

/// Reads the request from Postgres (bumping its execution generation, which fences out every
/// older execution's late writes) and takes up its phase, approval and retry state. A request
/// that cannot be resumed ends this execution with the reason (the `registration` update shows
/// it to the CLI that started it).
pub(super) async fn resume_from_postgres(
    ctx: &mut WorkflowContext<UserDeletion>,
    cause: ResumeCause,
) -> WorkflowResult<UserInventory> {
    let input = ResumeInput {
        request_id: ctx.state(|s| s.request_id),
        workflow_id: ctx.workflow_id().to_string(),
        run_id: ctx.state(|s| s.run_id.clone()),
        cause,
    };
    let resumed = match ctx
        .execute_activity(ResumeRequest, input, store_options())
        .await
    {
        Ok(resumed) => resumed,
        Err(e) => {
            let reason = format!("the request cannot be resumed: {}", describe(&e));
            return Err(registration_failed(ctx, reason).into());
        }
    };
    let phase = match resumed.phase() {
        Ok(phase) => phase,
        Err(reason) => return Err(registration_failed(ctx, reason).into()),
    };
    ctx.state_mut(|s| {
        s.target = resumed.target.clone();
        s.requested_by = resumed.requested_by.clone();
        s.reason = resumed.reason.clone();
        s.inventory = Ok(resumed.inventory.clone());
        s.ledger.approval = resumed.approval.clone();
        s.ledger.retry = resumed.retry.clone();
    });
    enter_phase(ctx, phase);
    Ok(resumed.inventory)
}

/// Whether this execution has served its share of runs (or the server suggests a new one) and
/// should continue as new once no update waits.
pub(super) fn continue_as_new_due(ctx: &WorkflowContext<UserDeletion>) -> bool {
    let (finished, limit, completed) = ctx.state(|s| {
        (
            s.ledger.runs_finished,
            s.tuning.runs_per_execution(),
            s.ledger.phase == UserPhase::Completed,
        )
    });
    !completed && finished >= 1 && (finished >= limit || ctx.continue_as_new_suggested())
}

/// Continues as new in resume mode: the next execution carries nothing Postgres holds (only the
/// request id, the labels of the start input and the tuning) and reads the rest from Postgres.
pub(super) async fn continue_as_new(ctx: &WorkflowContext<UserDeletion>) -> WorkflowTermination {
    let next = ctx.state(|s| UserDeletionInput {
        request_id: s.request_id,
        target: s.target.clone(),
        requested_by: s.requested_by.clone(),
        reason: s.reason.clone(),
        // The continued execution reads the approved inventory from Postgres.
        demo_communities: None,
        // The submit signature was verified at registration and is stored with the request.
        signed: None,
        start: StartMode::Resume {
            cause: ResumeCause::ContinueAsNew,
        },
        tuning: s.tuning,
    });
    let Err(termination) = ctx.continue_as_new(next, ContinueAsNewOptions::default());
    termination
}

/// Runs the current row's handler unless the run is asked to stop. A stop cancels the attempt
/// (it notices with its next heartbeat) without waiting for it, since its worker may be gone:
/// None then, and [`handler_after_interruption`] fences the attempt out.
pub(super) async fn execute_unless_stopped(
    ctx: &WorkflowContext<UserDeletion>,
    input: ExecuteStageInput,
    options: &RunOptions,
) -> Result<Option<StageOutcome>, ActivityExecutionError> {
    let delay = Duration::from_millis(options.directives.stage_delay_ms);
    // A real user's handler waits out serving-write leases and deletes in batches; it heartbeats
    // every batch, so the heartbeat timeout, not this bound, notices a dead worker.
    let bound = match ctx.state(|s| real_user_pubkey(&s.target).is_some()) {
        true => REAL_HANDLER_TIMEOUT,
        false => delay + Duration::from_secs(60),
    };
    let cancellation = WorkflowCancellationToken::new();
    let handler_options = ActivityOptions::with_start_to_close_timeout(bound)
        .heartbeat_timeout(HANDLER_HEARTBEAT_TIMEOUT)
        .retry_policy(retry_policy())
        .cancellation_token(cancellation.clone())
        .build();
    let mut work = pin!(
        ctx.execute_activity(ExecuteStage, input, handler_options)
            .fuse()
    );
    let mut stop = pin!(ctx.wait_condition(|s| s.ledger.stop_requested).fuse());
    select! {
        done = work.as_mut() => done.map(Some),
        _ = stop.as_mut() => {
            cancellation.cancel();
            // Resolves at once (TryCancel), with the outcome if one arrived in the same task.
            Ok(work.as_mut().await.ok())
        }
    }
}

/// Fences out the attempt a stop cancelled (a new execution generation, so it can save nothing
/// from now on, whether its worker is alive or gone) and reads what it had saved: the row is
/// final for this run. If the fence cannot be written, the next run's start fences it instead.
pub(super) async fn handler_after_interruption(
    ctx: &WorkflowContext<UserDeletion>,
    stage_id: uuid::Uuid,
) -> HandlerAtStop {
    let input = InterruptStageInput {
        request_id: ctx.state(|s| s.request_id),
        stage_id,
        requested_by: ctx.state(|s| s.ledger.stop_requested_by.clone()),
    };
    match ctx
        .execute_activity(InterruptStage, input, store_options())
        .await
    {
        Ok(interrupted) => interrupted.handler(),
        Err(_) => HandlerAtStop::Interrupted,
    }
}
