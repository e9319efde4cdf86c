//! Approval and the operator's audit trail: approval evidence bound to the frozen digest, and
//! operator events (a block recorded or cleared).

use workflows::community::{ApprovalInput, ApprovalRecord, EventInput, RequestEvent};

use crate::identity::consumer_of;

use super::Attempt;
use super::failure::PhaseResult;

/// Persists approval evidence (the store re-checks digest, two-person rule and stage).
pub async fn record_approval(
    (acts, ctx): Attempt<'_>,
    input: ApprovalInput,
) -> PhaseResult<ApprovalRecord> {
    Ok(acts
        .store
        .record_approval(input.request_id, &input.approval, &consumer_of(ctx))
        .await?)
}

/// Appends an operator event to the audit trail (recording or clearing a block).
pub async fn record_event((acts, ctx): Attempt<'_>, input: EventInput) -> PhaseResult<()> {
    acts.store.record_event(&input, &consumer_of(ctx)).await?;
    if let RequestEvent::Blocked { phase, .. } = &input.event {
        acts.settings.metrics.blocked(phase);
    }
    Ok(())
}
