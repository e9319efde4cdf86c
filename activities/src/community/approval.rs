//! The operator's audit trail: operator events (a block recorded or cleared). Approval evidence
//! bound to the frozen digest is a store call of the activity table (`record_approval`).

use workflows::community::{EventInput, RequestEvent};

use crate::identity::consumer_of;

use super::Attempt;
use super::failure::PhaseResult;

/// Appends an operator event to the audit trail (recording or clearing a block).
pub async fn record_event((acts, ctx): Attempt<'_>, input: EventInput) -> PhaseResult<()> {
    acts.store.record_event(&input, &consumer_of(ctx)).await?;
    if let RequestEvent::Blocked { phase, .. } = &input.event {
        acts.settings.metrics.blocked(phase);
    }
    Ok(())
}
