//! Abort: once the operator's signed abort is accepted (`accept_abort`, a store call of the
//! activity table), the fence lifted and the request ended aborted — refused once the
//! irreversible point was marked.

use workflows::community::{AbortInput, AbortOutcome};

use super::Attempt;
use super::failure::PhaseResult;
use super::fence::reported_fence_generation;

/// Lifts quiescing/fence (bumping the generation) and ends the request aborted; refused once the
/// irreversible point was marked.
pub async fn abort((acts, _): Attempt<'_>, input: AbortInput) -> PhaseResult<AbortOutcome> {
    let generation = acts
        .store
        .unfence_for_abort(input.request_id, &input.abort)
        .await?;
    Ok(AbortOutcome {
        fence_generation: reported_fence_generation(Some(generation))?,
    })
}
