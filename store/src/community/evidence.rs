//! The evidence binding: what is destroyed must be exactly what was approved.
//!
//! From approval on, every claim and every generation-checked write re-reads, under the request
//! row lock, the frozen inventory (its digest re-validated), the approval row and the request row,
//! and refuses with [`ApprovalError::EvidenceMismatch`] unless the inventory's community and host
//! are the request row's and the approval names the request's inventory digest. A row edited
//! after approval (another community's id, another host, another digest) therefore blocks the
//! next destructive step instead of redirecting it.

use crate::ApprovalError;
use sqlx::PgConnection;

use super::inventory::verified_inventory;
use super::stage::Stage;
use super::token::{ExecToken, LockedRequest};
use crate::error::{StoreError, StoreResult};

/// Whether a request at `stage` must carry bound evidence: from approval until it ends.
pub(crate) fn evidence_required(stage: Stage) -> bool {
    stage >= Stage::Approved && !stage.is_terminal()
}

/// The request's frozen inventory and its digest, and the approval's digest.
type EvidenceRow = (
    Option<sqlx::types::Json<serde_json::Value>>,
    Option<String>,
    Option<String>,
);

/// Refuses unless the frozen inventory, the approval and the request row agree (see the module
/// documentation). `row` must have been read in the caller's transaction, normally `FOR UPDATE`.
pub(crate) async fn require_bound_evidence(
    conn: &mut PgConnection,
    row: &LockedRequest,
) -> StoreResult<()> {
    let community_id = row.community()?;
    // One read for both sides: the frozen inventory (re-validated against its digest) and the
    // approval's digest.
    let stored: Option<EvidenceRow> = sqlx::query_as(
        "SELECT r.inventory, r.inventory_digest, a.inventory_digest \
         FROM deletion.requests r LEFT JOIN deletion.approvals a ON a.request_id = r.id \
         WHERE r.id = $1",
    )
    .bind(row.id)
    .fetch_optional(&mut *conn)
    .await?;
    let (inventory, inventory_digest, approved_digest) = stored.unwrap_or_default();
    let inventory = verified_inventory(row.id, (inventory, inventory_digest))?;

    let mut differences = Vec::new();
    if inventory.community_id != community_id {
        differences.push(format!(
            "the frozen inventory is of community {} but the request row names community {}",
            inventory.community_id, community_id
        ));
    }
    if row.host.as_deref() != Some(inventory.host.as_str()) {
        differences.push(format!(
            "the frozen inventory is of host {:?} but the request row names host {:?}",
            inventory.host,
            row.host.as_deref().unwrap_or_default()
        ));
    }
    match (approved_digest.as_deref(), row.inventory_digest.as_deref()) {
        (None, _) => differences.push("the request has no approval row".to_owned()),
        (Some(approved), None) => differences.push(format!(
            "the approval is of digest {approved} but the request row has no inventory digest"
        )),
        (Some(approved), Some(request_digest)) if approved != request_digest => {
            differences.push(format!(
                "the approval is of digest {approved} but the request row's inventory digest \
                 is {request_digest}"
            ))
        }
        (Some(_), Some(_)) => {}
    }
    // The third side of the binding, inventory ↔ request digest, is `frozen_inventory_in`'s own
    // check: it refuses a document that does not hash to the request's digest.
    if differences.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Approval(ApprovalError::EvidenceMismatch {
            request_id: row.id,
            differences,
        }))
    }
}

/// Refuses a token whose community is not (any more) the request row's: the attempt would act
/// on a community the row no longer names.
pub(crate) fn require_token_community(row: &LockedRequest, token: &ExecToken) -> StoreResult<()> {
    if row.community_id == Some(token.community_id) {
        Ok(())
    } else {
        Err(StoreError::Approval(ApprovalError::EvidenceMismatch {
            request_id: row.id,
            differences: vec![format!(
                "this attempt claimed the request for community {} but the request row now \
                 names {}",
                token.community_id,
                row.community_id
                    .map_or_else(|| "no community".to_owned(), |id| id.to_string())
            )],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_required_from_approval_until_the_request_ends() {
        assert!(!evidence_required(Stage::Submitted));
        assert!(!evidence_required(Stage::Inventoried));
        assert!(evidence_required(Stage::Approved));
        assert!(evidence_required(Stage::Drained));
        assert!(evidence_required(Stage::LogicallyVerified));
        assert!(!evidence_required(Stage::RetentionPending));
        assert!(!evidence_required(Stage::Aborted));
    }
}
