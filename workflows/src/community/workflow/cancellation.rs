//! The cancellation guard: every activity and wait of the phase table runs under `guarded`,
//! which watches for an accepted abort and for the workflow's own cancellation (the Web UI's
//! "Cancel") and decides what that cancellation means at the current phase.

use std::future::pending;
use std::pin::pin;

use futures::future::{Fuse, FusedFuture, FutureExt, LocalBoxFuture};
use temporalio_sdk::workflows::select;
use temporalio_sdk::{WorkflowCancellationToken, WorkflowContext};

use super::{CANCEL_ACTOR, CommunityDeletion, Stop, detached};
use crate::community::contracts::{AbortRequest, RequestEvent};
use crate::community::rules::check_reversible;

/// What a workflow cancellation calls for, once it is seen.
enum CancellationAnswer {
    /// Record this refusal in the audit trail.
    Refuse(RequestEvent),
    /// Let the abort activity decide (object deletion is under way).
    Decide(AbortRequest),
}

impl CommunityDeletion {
    /// Awaits `work` while watching for an accepted abort (while abort is allowed) and for the
    /// workflow's cancellation. On an abort it cancels `work`'s activity (if any), waits for its
    /// cancellation to resolve, and stops. Any refusal it started is recorded before it returns.
    pub(super) async fn guarded<F: FusedFuture>(
        ctx: &WorkflowContext<Self>,
        work: F,
        work_cancellation: Option<&WorkflowCancellationToken>,
    ) -> Result<F::Output, Stop> {
        let mut work = pin!(work);
        let mut refusal: Fuse<LocalBoxFuture<'_, ()>> = Fuse::terminated();
        loop {
            let mut abort =
                pin!(ctx.wait_condition_with_options(|s| s.pending_abort().is_some(), detached()));
            let mut cancellation = pin!(Self::cancellation(ctx));
            select! {
                output = work.as_mut() => {
                    Self::finish_refusal(&mut refusal).await;
                    return Ok(output);
                }
                () = refusal => {}
                _ = abort.as_mut() => {
                    let Some(abort) = ctx.state(Self::pending_abort) else {
                        continue;
                    };
                    if let Some(token) = work_cancellation {
                        token.cancel();
                        // Resolves at once (cancellation type TryCancel); the abort activity
                        // bumps the generation, so a still-running attempt can stamp nothing.
                        let _cancelled = work.as_mut().await;
                    }
                    Self::finish_refusal(&mut refusal).await;
                    return Err(Stop::Abort(Box::new(abort)));
                }
                reason = cancellation.as_mut() => {
                    if let Some(answer) = Self::on_cancellation(ctx, reason) {
                        refusal = Self::answer_cancellation(ctx, answer).boxed_local().fuse();
                    }
                }
            }
        }
    }

    /// Resolves with the cancellation reason if the workflow is (or gets) cancelled and this
    /// run has not acted on it yet; otherwise never.
    fn cancellation(ctx: &WorkflowContext<Self>) -> impl FusedFuture<Output = Option<String>> + '_ {
        let watching = !ctx.state(|s| s.cancellation_seen);
        async move {
            if watching {
                ctx.cancelled().await
            } else {
                pending().await
            }
        }
        .fuse()
    }

    /// Decides what the workflow's cancellation means now: before the irreversible point an
    /// abort by `temporal-cancel`; after it a refusal, returned to be recorded; while deleting
    /// objects an abort the database must decide, returned to be decided.
    fn on_cancellation(
        ctx: &WorkflowContext<Self>,
        reason: Option<String>,
    ) -> Option<CancellationAnswer> {
        let reason = reason
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| "workflow cancellation requested".to_string());
        ctx.state_mut(|s| {
            s.cancellation_seen = true;
            if s.abort.is_some() {
                // An abort is already under way; the cancellation adds nothing.
                return None;
            }
            match check_reversible(s.phase, s.irreversible_seen) {
                Ok(()) => {
                    // Stopping before the irreversible point is always safe: a cancellation
                    // from the Web UI is an abort without a signature, recorded as such.
                    let abort = AbortRequest {
                        actor: CANCEL_ACTOR.to_string(),
                        reason,
                        signed: None,
                    };
                    s.abort = Some(abort.clone());
                    s.cancelled = true;
                    s.phase
                        .abort_undecided()
                        .then_some(CancellationAnswer::Decide(abort))
                }
                Err(refusal) => Some(CancellationAnswer::Refuse(RequestEvent::AbortRefused {
                    actor: CANCEL_ACTOR.to_string(),
                    reason: format!("{refusal} (workflow cancellation: {reason})"),
                })),
            }
        })
    }

    /// Records the refusal of a workflow cancellation that arrived while nothing was guarded
    /// (at the end of a run), so no cancellation goes unanswered.
    pub(super) async fn answer_late_cancellation(ctx: &WorkflowContext<Self>) {
        let token = ctx.cancellation_token();
        if token.is_cancelled()
            && !ctx.state(|s| s.cancellation_seen)
            && let Some(answer) = Self::on_cancellation(ctx, token.reason())
        {
            Self::answer_cancellation(ctx, answer).await;
        }
    }

    /// Records a cancellation's refusal, or lets the database decide it.
    async fn answer_cancellation(ctx: &WorkflowContext<Self>, answer: CancellationAnswer) {
        match answer {
            CancellationAnswer::Refuse(event) => Self::record_event(ctx, event).await,
            CancellationAnswer::Decide(abort) => {
                // The outcome is in the state (and the audit trail); a cancellation has no caller.
                let _outcome = Self::decide_abort(ctx, abort, true).await;
            }
        }
    }

    async fn finish_refusal(refusal: &mut Fuse<LocalBoxFuture<'_, ()>>) {
        if !refusal.is_terminated() {
            refusal.await;
        }
    }
}
