//! Register: records the deletion request row (at most one open per community).

use workflows::community::{RegisterInput, RegisteredRequest};

use crate::identity::consumer_of;

use super::Attempt;
use super::failure::PhaseResult;

/// Records the request row; idempotent for the same request id.
pub async fn register(
    (acts, ctx): Attempt<'_>,
    input: RegisterInput,
) -> PhaseResult<RegisteredRequest> {
    let request = acts
        .store
        .register_community_request(&input, &consumer_of(ctx))
        .await?;
    let community_id = request
        .community_id
        .ok_or_else(|| crate::store::StoreError::Corrupt {
            what: "community deletion request",
            reason: "it names no community_id".to_owned(),
        })?;
    Ok(RegisteredRequest {
        request_id: request.id,
        community_id,
    })
}
