//! Abort: an operator's signed abort accepted, then the fence lifted and the request ended
//! aborted — refused once the irreversible point was marked.

use workflows::community::{AbortInput, AbortOutcome, AbortRequest};

use crate::identity::consumer_of;

use super::Attempt;
use super::failure::PhaseResult;
use super::fence::reported_fence_generation;

/// Verifies and records an abort's signature; returns the abort under the registered name.
pub async fn accept_abort(
    (acts, ctx): Attempt<'_>,
    input: AbortInput,
) -> PhaseResult<AbortRequest> {
    Ok(acts
        .store
        .accept_abort(input.request_id, &input.abort, &consumer_of(ctx))
        .await?)
}

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
