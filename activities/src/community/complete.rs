//! Complete: the scope re-checked, the request marked retention-pending with its signed
//! receipt, and the receipt copied to the object-lock archive when one is configured.

use workflows::community::RequestRef;

use crate::certificates::{ArchiveError, archive_receipt};
use crate::store::Stage;

use super::Attempt;
use super::failure::{PhaseError, PhaseResult};
use super::verify::verify_inventoried_relations;

/// Re-validates the frozen inventory and marks the request retention-pending (terminal).
pub async fn complete((acts, _): Attempt<'_>, input: RequestRef) -> PhaseResult<()> {
    let token = acts
        .store
        .claim(
            input.request_id,
            &[Stage::LogicallyVerified, Stage::RetentionPending],
        )
        .await?;
    if token.stage != Stage::RetentionPending {
        acts.store.load_frozen_inventory(input.request_id).await?;
        // Again right before the receipt is issued: the scope is re-checked, and a request
        // verified by a worker that did not record the scope verification gets it now.
        verify_inventoried_relations(acts, &token).await?;
        acts.store
            .complete_with_receipt(
                &token,
                serde_json::json!({
                    "policy": "rows, object versions and keys of the community are gone; \
                               the audit trail and approval evidence are retained"
                }),
            )
            .await?;
    }
    // The signed receipt is in Postgres now; its object-lock copy is written (once) after the
    // commit, so a retry of this activity finishes an archive write that failed.
    if let Some(archive) = &acts.archive {
        archive_receipt(&acts.store, archive, input.request_id)
            .await
            .map_err(|error| match error {
                ArchiveError::Store(error) => PhaseError::Store(error.into()),
                ArchiveError::Objects(error) => PhaseError::Objects(error),
            })?;
    }
    Ok(())
}
