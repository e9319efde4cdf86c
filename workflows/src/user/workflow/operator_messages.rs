//! What an operator's `approve`, `abort` and `unblock` do once the SDK dispatched them, whether
//! they came as the update (the CLI, answered) or as the signal of the same name (the durable
//! copy a command sends when no worker answered its update in time, or the Web UI).
//!
//! Each takes its signed statement in first: a statement delivered before is refused as a
//! signature already used and changes nothing; a delivery refused before it acted is forgotten
//! (see [`crate::delivery`]). A signal has no caller to answer, so its refusal is
//! kept in the workflow's state and shown by the `status` query.

use temporalio_common::data_converters::RawValue;
use temporalio_sdk::WorkflowContext;

use super::{
    UpdateError, UserDeletion, describe, enter_phase, start_child_deletions, store_options,
};
use crate::community::decode::{Message, decode};
use crate::delivery::repeat_refusal;
use crate::operator::SignedAction;
use crate::user::contracts::{
    AbortUser, RecordUserApproval, UnblockUser, UserAbortInput, UserAbortRecord, UserApprovalInput,
    UserApprovalRecord, UserApproveRequest, UserOperatorRequest, UserUnblockInput,
    UserUnblockRecord,
};
use crate::user::messages::{RefusedSignal, UserPhase};
use crate::user::signals::{AbortMessage, UnblockMessage};

/// How many refused signals `status` keeps (the oldest are dropped).
const REFUSED_SIGNALS_KEPT: usize = 20;

/// Takes the statement in; a statement delivered before is refused as a repeat.
fn take_statement(
    ctx: &WorkflowContext<UserDeletion>,
    signed: Option<&SignedAction>,
) -> Result<(), UpdateError> {
    if ctx.state_mut(|s| s.deliveries.take(signed)) {
        Ok(())
    } else {
        Err(repeat_refusal(signed).into())
    }
}

/// Records the approval evidence (bound to the frozen digest), then starts the child community
/// deletions it chose.
pub(super) async fn approve(
    ctx: &mut WorkflowContext<UserDeletion>,
    request: UserApproveRequest,
) -> Result<UserApprovalRecord, UpdateError> {
    let signed = request.signed.clone();
    take_statement(ctx, signed.as_ref())?;
    let outcome = record_approval(ctx, request).await;
    // Refused or not recorded: it never acted (a recorded approval stands whatever happened to
    // its child deletions).
    if outcome.is_err() && ctx.state(|s| s.ledger.approval.is_none()) {
        ctx.state_mut(|s| s.deliveries.release(signed.as_ref()));
    }
    outcome
}

/// The approval checked against the rules and its evidence persisted.
async fn record_approval(
    ctx: &mut WorkflowContext<UserDeletion>,
    request: UserApproveRequest,
) -> Result<UserApprovalRecord, UpdateError> {
    // Re-checked here because two approvals validated in the same task both pass the validator.
    ctx.state_mut(|s| match s.approval_refusal(&request) {
        Some(refusal) => Err(refusal),
        None => {
            s.ledger.phase = UserPhase::Approving;
            Ok(())
        }
    })?;
    let input = UserApprovalInput {
        request_id: ctx.state(|s| s.request_id),
        approval: request,
    };
    let children = input.approval.child_deletions.clone();
    match ctx
        .execute_activity(RecordUserApproval, input, store_options())
        .await
    {
        Ok(mut record) => {
            ctx.state_mut(|s| s.ledger.approval = Some(record.clone()));
            enter_phase(ctx, UserPhase::Approved);
            // The approval stands whatever happens to the children; a child that cannot be
            // started is reported to the approver, who can submit it as a community deletion.
            record.child_deletions = start_child_deletions(ctx, &record, children).await?;
            ctx.state_mut(|s| s.ledger.approval = Some(record.clone()));
            Ok(record)
        }
        Err(e) => {
            enter_phase(ctx, UserPhase::AwaitingApproval);
            Err(format!("the approval was not recorded: {}", describe(&e)).into())
        }
    }
}

/// Aborts the request before its irreversible point: the store refuses once a purge has
/// started. The user's write fence, if this request holds it, is lifted; the workflow ends.
pub(super) async fn abort(
    ctx: &WorkflowContext<UserDeletion>,
    request: UserOperatorRequest,
) -> Result<UserAbortRecord, UpdateError> {
    let signed = request.signed.clone();
    take_statement(ctx, signed.as_ref())?;
    let outcome = record_abort(ctx, request).await;
    if outcome.is_err() {
        ctx.state_mut(|s| s.deliveries.release(signed.as_ref()));
    }
    outcome
}

/// The abort checked against the rules and recorded.
async fn record_abort(
    ctx: &WorkflowContext<UserDeletion>,
    request: UserOperatorRequest,
) -> Result<UserAbortRecord, UpdateError> {
    ctx.state_mut(|s| match s.abort_refusal(&request) {
        Some(refusal) => Err(refusal),
        None => {
            s.aborting = true;
            Ok(())
        }
    })?;
    let input = UserAbortInput {
        request_id: ctx.state(|s| s.request_id),
        abort: request,
    };
    let recorded = ctx
        .execute_activity(AbortUser, input, store_options())
        .await;
    ctx.state_mut(|s| s.aborting = false);
    match recorded {
        Ok(record) => {
            ctx.state_mut(|s| s.aborted = Some(record.clone()));
            enter_phase(ctx, UserPhase::Aborted);
            Ok(record)
        }
        Err(e) => Err(format!("the abort was not recorded: {}", describe(&e)).into()),
    }
}

/// Unblocks the request once its reason was remedied: the store clears the reason and the
/// retry deadline, and the next run re-checks what blocked it.
pub(super) async fn unblock(
    ctx: &WorkflowContext<UserDeletion>,
    request: UserOperatorRequest,
) -> Result<UserUnblockRecord, UpdateError> {
    let signed = request.signed.clone();
    take_statement(ctx, signed.as_ref())?;
    let outcome = record_unblock(ctx, request).await;
    if outcome.is_err() {
        ctx.state_mut(|s| s.deliveries.release(signed.as_ref()));
    }
    outcome
}

/// The unblock checked against the rules and recorded.
async fn record_unblock(
    ctx: &WorkflowContext<UserDeletion>,
    request: UserOperatorRequest,
) -> Result<UserUnblockRecord, UpdateError> {
    if let Some(refusal) = ctx.state(|s| s.unblock_refusal(&request)) {
        return Err(refusal.into());
    }
    let input = UserUnblockInput {
        request_id: ctx.state(|s| s.request_id),
        unblock: request,
    };
    match ctx
        .execute_activity(UnblockUser, input, store_options())
        .await
    {
        Ok(record) => {
            // The saved deadline is cleared with the block: the next run may start now.
            ctx.state_mut(|s| s.ledger.retry = None);
            Ok(record)
        }
        Err(e) => Err(format!("the unblock was not recorded: {}", describe(&e)).into()),
    }
}

/// The `approve` signal: decoded strictly, then acted on as the update.
pub(super) async fn approve_signal(ctx: &mut WorkflowContext<UserDeletion>, input: RawValue) {
    let Some(request) = decoded::<UserApproveRequest>(ctx, &input) else {
        return;
    };
    let actor = request.approved_by.clone();
    if let Err(refusal) = approve(ctx, request).await {
        refuse(ctx, UserApproveRequest::NAME, actor, refusal.to_string());
    }
}

/// The `abort` signal: decoded strictly, then acted on as the update.
pub(super) async fn abort_signal(ctx: &WorkflowContext<UserDeletion>, input: RawValue) {
    let Some(AbortMessage(request)) = decoded::<AbortMessage>(ctx, &input) else {
        return;
    };
    let actor = request.requested_by.clone();
    if let Err(refusal) = abort(ctx, request).await {
        refuse(ctx, AbortMessage::NAME, actor, refusal.to_string());
    }
}

/// The `unblock` signal: decoded strictly, then acted on as the update.
pub(super) async fn unblock_signal(ctx: &WorkflowContext<UserDeletion>, input: RawValue) {
    let Some(UnblockMessage(request)) = decoded::<UnblockMessage>(ctx, &input) else {
        return;
    };
    let actor = request.requested_by.clone();
    if let Err(refusal) = unblock(ctx, request).await {
        refuse(ctx, UnblockMessage::NAME, actor, refusal.to_string());
    }
}

/// The signal's message, or `None` when it is malformed (refused).
fn decoded<M: Message>(ctx: &WorkflowContext<UserDeletion>, input: &RawValue) -> Option<M> {
    match decode::<M>(input) {
        Ok(message) => Some(message),
        Err(undecodable) => {
            refuse(ctx, M::NAME, undecodable.actor, undecodable.reason);
            None
        }
    }
}

/// Keeps a refused signal for the `status` query.
fn refuse(ctx: &WorkflowContext<UserDeletion>, signal: &str, actor: String, reason: String) {
    ctx.state_mut(|s| {
        if s.refused_signals.len() >= REFUSED_SIGNALS_KEPT {
            s.refused_signals.remove(0);
        }
        s.refused_signals.push(RefusedSignal {
            signal: signal.to_owned(),
            actor,
            reason,
        });
    });
}
