//! Operator messages: what the `approve`, `abort` and `unblock` updates and signals do once
//! the SDK has dispatched them (the entry points stay in the `#[workflow_methods]` block of
//! `workflow.rs`, as the SDK requires), and the audit events they record.

use temporalio_common::data_converters::RawValue;
use temporalio_sdk::{WorkflowCancellationToken, WorkflowContext};
use uuid::Uuid;

use super::{CommunityDeletion, detached, failure_reason, failure_type};
use crate::community::contracts::{
    Abort, AbortInput, AbortRequest, AcceptAbort, ApprovalInput, ApprovalRecord, ApproveRequest,
    EventInput, RecordApproval, RecordEvent, RequestEvent, UnblockRequest,
};
use crate::community::decode::{Message, Undecodable, decode};
use crate::community::options::Paced;
use crate::community::phase::Phase;
use crate::community::rules::{
    AbortRefusal, MessageError, check_abort, check_approval, check_reversible, check_unblock,
};
use crate::contract::ABORT_REFUSED_FAILURE_TYPE;
use crate::delivery::repeat_refusal;
use crate::operator::SignedAction;

/// Takes the message's signed statement in; a statement delivered before is refused as a
/// repeat (see [`crate::delivery`]).
fn take_statement(
    state: &mut CommunityDeletion,
    signed: Option<&SignedAction>,
) -> Result<(), MessageError> {
    if state.deliveries.take(signed) {
        Ok(())
    } else {
        Err(MessageError::Repeat(repeat_refusal(signed)))
    }
}

impl CommunityDeletion {
    /// The `approve` signal: a valid approval acts as the update; an invalid or malformed one (any
    /// payload is taken and decoded here, see `decode`) is recorded as a rejected attempt.
    pub(super) async fn approve_from_signal(ctx: &WorkflowContext<Self>, input: RawValue) {
        let rejected = |actor, reason| RequestEvent::ApprovalRejected { actor, reason };
        // Every refusal is recorded: a rule, or the activity's verdict on the signature.
        let accept = |request| Self::accept_approval(ctx, request);
        Self::act_on_signal(ctx, &input, rejected, accept).await;
    }

    /// The `abort` signal: as the update; every refusal, a malformed payload included, is
    /// recorded.
    pub(super) async fn abort_from_signal(ctx: &WorkflowContext<Self>, input: RawValue) {
        let refused = |actor, reason| RequestEvent::AbortRefused { actor, reason };
        let Some(request) = Self::decode_signal::<AbortRequest>(ctx, &input, refused).await else {
            return;
        };
        // The outcome is in the audit trail and the status query; a signal has no caller.
        let _outcome = Self::request_abort(ctx, request, true).await;
    }

    /// The `unblock` signal: as the update; an invalid or malformed one is recorded as
    /// rejected.
    pub(super) async fn unblock_from_signal(ctx: &WorkflowContext<Self>, input: RawValue) {
        let rejected = |actor, reason| RequestEvent::UnblockRejected { actor, reason };
        let release = |request| Self::release(ctx, request);
        Self::act_on_signal(ctx, &input, rejected, release).await;
    }

    /// A signalled message acted on: decoded (a malformed one is recorded as the event
    /// `rejected` builds), then `act`ed on; its refusal is recorded the same way under the
    /// message's actor (a signal has no caller to tell).
    async fn act_on_signal<M, T, Fut>(
        ctx: &WorkflowContext<Self>,
        input: &RawValue,
        rejected: impl Fn(String, String) -> RequestEvent,
        act: impl FnOnce(M) -> Fut,
    ) where
        M: Message,
        Fut: Future<Output = Result<T, MessageError>>,
    {
        let Some(request) = Self::decode_signal::<M>(ctx, input, &rejected).await else {
            return;
        };
        let actor = request.actor().to_owned();
        if let Err(refusal) = act(request).await {
            Self::record_event(ctx, rejected(actor, refusal.to_string())).await;
        }
    }

    /// A signal's payload decoded as `M`; a malformed one is recorded as the event `rejected`
    /// builds from its actor and the reason, and yields `None`.
    async fn decode_signal<M: Message>(
        ctx: &WorkflowContext<Self>,
        input: &RawValue,
        rejected: impl FnOnce(String, String) -> RequestEvent,
    ) -> Option<M> {
        match decode::<M>(input) {
            Ok(message) => Some(message),
            Err(Undecodable { actor, reason }) => {
                Self::record_event(ctx, rejected(actor, reason)).await;
                None
            }
        }
    }

    /// Records an approval that passes the rules (checked again here: another message may have
    /// changed the state since validation). The evidence is persisted before the approval
    /// counts, and its failure leaves the request unapproved.
    pub(super) async fn accept_approval(
        ctx: &WorkflowContext<Self>,
        request: ApproveRequest,
    ) -> Result<ApprovalRecord, MessageError> {
        let signed = request.signed.clone();
        ctx.state_mut(|s| take_statement(s, signed.as_ref()))?;
        let recorded = Self::record_approval(ctx, request).await;
        if recorded.is_err() {
            ctx.state_mut(|s| s.deliveries.release(signed.as_ref()));
        }
        recorded
    }

    /// The approval checked against the rules and its evidence persisted.
    async fn record_approval(
        ctx: &WorkflowContext<Self>,
        request: ApproveRequest,
    ) -> Result<ApprovalRecord, MessageError> {
        let request_id = ctx.state_mut(|s| {
            check_approval(&s.approval_gate(), &request)?;
            s.approval_in_flight = true;
            Ok::<_, MessageError>(s.input.request_id)
        })?;
        let input = ApprovalInput {
            request_id,
            approval: request,
        };
        let options = Self::options(ctx, RecordApproval::PACE, WorkflowCancellationToken::new());
        let recorded = ctx.execute_activity(RecordApproval, input, options).await;
        ctx.state_mut(|s| s.approval_in_flight = false);
        match recorded {
            Ok(record) => {
                ctx.state_mut(|s| s.approval = Some(record.clone()));
                Self::publish_memo(ctx);
                Ok(record)
            }
            Err(failure) => {
                let reason = failure_reason(&failure);
                ctx.state_mut(|s| s.last_error = Some(format!("approval not recorded: {reason}")));
                Err(MessageError::NotRecorded {
                    what: "approval",
                    reason,
                })
            }
        }
    }

    /// Accepts an abort before the irreversible point and waits until the request is aborted;
    /// after it, records the refusal (as it does for every refused signal) and refuses.
    pub(super) async fn request_abort(
        ctx: &WorkflowContext<Self>,
        request: AbortRequest,
        from_signal: bool,
    ) -> Result<Phase, MessageError> {
        let signed = request.signed.clone();
        ctx.state_mut(|s| take_statement(s, signed.as_ref()))?;
        let outcome = Self::take_abort(ctx, request, from_signal).await;
        // Refused or not recorded: it never acted. Accepted but blocked: it stands.
        if let Err(e) = &outcome
            && !matches!(e, MessageError::AbortBlocked { .. })
        {
            ctx.state_mut(|s| s.deliveries.release(signed.as_ref()));
        }
        outcome
    }

    /// The abort checked against the rules, its signature recorded, then decided or awaited.
    async fn take_abort(
        ctx: &WorkflowContext<Self>,
        request: AbortRequest,
        from_signal: bool,
    ) -> Result<Phase, MessageError> {
        let checked = ctx.state_mut(|s| {
            check_abort(&s.abort_gate(), &request)?;
            check_reversible(s.phase, s.irreversible_seen)?;
            s.abort_in_flight = true;
            Ok::<_, AbortRefusal>(s.input.request_id)
        });
        let request = match checked {
            Ok(request_id) if ctx.state(|s| s.signatures_required) => {
                Self::record_signed_abort(ctx, request_id, request, from_signal).await?
            }
            Ok(_) => {
                ctx.state_mut(|s| s.abort_in_flight = false);
                request
            }
            Err(refusal) => {
                return Err(Self::refuse_abort(ctx, request.actor, refusal, from_signal).await);
            }
        };
        // The phase may have moved while the signature was recorded.
        let accepted = ctx.state_mut(|s| {
            check_reversible(s.phase, s.irreversible_seen)?;
            if let Some(first) = &s.abort {
                return Err(AbortRefusal::AlreadyAborting {
                    actor: first.actor.clone(),
                });
            }
            s.abort = Some(request.clone());
            Ok::<_, AbortRefusal>(s.phase.abort_undecided())
        });
        let undecided = match accepted {
            Ok(undecided) => undecided,
            Err(refusal) => {
                return Err(Self::refuse_abort(ctx, request.actor, refusal, from_signal).await);
            }
        };
        if undecided {
            return Self::decide_abort(ctx, request, from_signal).await;
        }
        let settled = ctx.wait_condition_with_options(
            |s| s.phase == Phase::Aborted || (s.aborting && s.blocked.is_some()),
            detached(),
        );
        let _settled = settled.await;
        ctx.state(|s| match &s.blocked {
            Some(blocked) if s.phase != Phase::Aborted => Err(MessageError::AbortBlocked {
                reason: blocked.reason.clone(),
            }),
            _ => Ok(s.phase),
        })
    }

    /// Verifies the abort's signature against the registry and records it (`community.accept_abort`)
    /// before the abort counts; returns the abort under the operator's registered name. A
    /// refusal changes nothing and, for a signal, is recorded in the audit trail.
    async fn record_signed_abort(
        ctx: &WorkflowContext<Self>,
        request_id: Uuid,
        abort: AbortRequest,
        from_signal: bool,
    ) -> Result<AbortRequest, MessageError> {
        let actor = abort.actor.clone();
        let input = AbortInput { request_id, abort };
        let options = Self::options(ctx, AcceptAbort::PACE, WorkflowCancellationToken::new());
        let recorded = ctx.execute_activity(AcceptAbort, input, options).await;
        ctx.state_mut(|s| s.abort_in_flight = false);
        match recorded {
            Ok(abort) => Ok(abort),
            Err(failure) => Err(Self::abort_not_taken(
                ctx,
                from_signal,
                actor,
                "not recorded",
                failure_reason(&failure),
            )
            .await),
        }
    }

    /// Lets the abort activity decide an abort accepted while deleting objects, under the request
    /// lock: before the irreversible marker it lifts the fence and ends the request aborted (the
    /// run then stops and ends aborted); after it, it refuses and records the refusal in the audit
    /// trail, and the run goes on as if no abort came (a blocked phase stays blocked). Returns
    /// without waiting for the run, so it never holds up a continue-as-new.
    pub(super) async fn decide_abort(
        ctx: &WorkflowContext<Self>,
        abort: AbortRequest,
        from_signal: bool,
    ) -> Result<Phase, MessageError> {
        let request_id = ctx.state(|s| s.input.request_id);
        let actor = abort.actor.clone();
        let input = AbortInput { request_id, abort };
        let options = Self::options(ctx, Abort::PACE, WorkflowCancellationToken::new());
        let failure = match ctx.execute_activity(Abort, input, options).await {
            Ok(outcome) => {
                ctx.state_mut(|s| {
                    s.abort_confirmed = true;
                    s.fence_generation = Some(outcome.fence_generation);
                });
                return Ok(Phase::Aborted);
            }
            Err(failure) => failure,
        };
        let reason = failure_reason(&failure);
        let refused = failure_type(&failure) == Some(ABORT_REFUSED_FAILURE_TYPE);
        ctx.state_mut(|s| {
            s.abort = None;
            s.cancelled = false;
            s.irreversible_seen |= refused;
            if !refused {
                s.last_error = Some(format!("abort not decided: {reason}"));
            }
        });
        if refused {
            return Err(AbortRefusal::RefusedByDatabase { reason }.into());
        }
        Err(Self::abort_not_taken(ctx, from_signal, actor, "could not be decided", reason).await)
    }

    /// The error of an abort the rules refuse; the refusal is recorded in the audit trail when
    /// the abort came as a signal (no caller to tell) or past the irreversible point.
    async fn refuse_abort(
        ctx: &WorkflowContext<Self>,
        actor: String,
        refusal: AbortRefusal,
        from_signal: bool,
    ) -> MessageError {
        if from_signal || matches!(refusal, AbortRefusal::PastIrreversiblePoint { .. }) {
            let event = RequestEvent::AbortRefused {
                actor,
                reason: refusal.to_string(),
            };
            Self::record_event(ctx, event).await;
        }
        refusal.into()
    }

    /// The error of an abort that changed nothing (`what_happened`: why, in a few words); a
    /// signalled abort has no caller to tell, so the refusal goes to the audit trail first.
    async fn abort_not_taken(
        ctx: &WorkflowContext<Self>,
        from_signal: bool,
        actor: String,
        what_happened: &str,
        reason: String,
    ) -> MessageError {
        if from_signal {
            let event = RequestEvent::AbortRefused {
                actor,
                reason: format!("abort {what_happened}, nothing changed: {reason}"),
            };
            Self::record_event(ctx, event).await;
        }
        MessageError::NotRecorded {
            what: "abort",
            reason,
        }
    }

    /// Records an unblock that passes the rules, then lets the blocked phase run again.
    pub(super) async fn release(
        ctx: &WorkflowContext<Self>,
        request: UnblockRequest,
    ) -> Result<Phase, MessageError> {
        let signed = request.signed.clone();
        ctx.state_mut(|s| take_statement(s, signed.as_ref()))?;
        let outcome = Self::record_unblock(ctx, request).await;
        if outcome.is_err() {
            ctx.state_mut(|s| s.deliveries.release(signed.as_ref()));
        }
        outcome
    }

    /// The unblock checked against the rules and recorded; the blocked phase may run again.
    async fn record_unblock(
        ctx: &WorkflowContext<Self>,
        request: UnblockRequest,
    ) -> Result<Phase, MessageError> {
        let (request_id, phase) = ctx.state_mut(|s| {
            check_unblock(
                &s.subject(),
                s.phase,
                s.blocked.is_some(),
                s.unblock_in_flight,
                &request,
            )?;
            s.unblock_in_flight = true;
            let phase = s.blocked.as_ref().map_or(s.phase, |b| b.phase);
            Ok::<_, MessageError>((s.input.request_id, phase))
        })?;
        let event = EventInput {
            request_id,
            event: RequestEvent::Unblocked {
                actor: request.actor,
                reason: request.reason,
                signed: request.signed,
            },
        };
        let options = Self::options(ctx, RecordEvent::PACE, WorkflowCancellationToken::new());
        let recorded = ctx.execute_activity(RecordEvent, event, options).await;
        ctx.state_mut(|s| {
            s.unblock_in_flight = false;
            if recorded.is_ok() {
                s.blocked = None;
            }
        });
        recorded
            .map(|()| phase)
            .map_err(|failure| MessageError::NotRecorded {
                what: "unblock",
                reason: failure_reason(&failure),
            })
    }

    /// Appends `event` to the request's audit trail. An event never changes the deletion, so
    /// a failure to record it is only kept as `last_error`.
    pub(super) async fn record_event(ctx: &WorkflowContext<Self>, event: RequestEvent) {
        let request_id = ctx.state(|s| s.input.request_id);
        let options = Self::options(ctx, RecordEvent::PACE, WorkflowCancellationToken::new());
        let input = EventInput { request_id, event };
        if let Err(failure) = ctx.execute_activity(RecordEvent, input, options).await {
            let reason = failure_reason(&failure);
            ctx.state_mut(|s| s.last_error = Some(format!("audit event not recorded: {reason}")));
        }
    }
}
