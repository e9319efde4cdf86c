//! Taking up a request for a resuming `UserDeletion` execution (`user resume`, or the workflow's
//! own continue-as-new): read what Postgres holds and fence out every older execution.

use chrono::{DateTime, Utc};
use serde_json::json;
use workflows::user::resume::ResumeInput;
use workflows::user::{ResumedRequest, UserInventory};

use super::error::UserStoreError;
use super::{StoredApproval, UserStore, UserStoreResult, commit_audited, retry_state};
use crate::claim::{RequestKind, claim_request};

/// The request columns a resume reads.
type RequestColumns = (
    String,
    Option<String>,
    String,
    Option<String>,
    Option<serde_json::Value>,
    Option<String>,
    i32,
    Option<DateTime<Utc>>,
);

impl UserStore {
    /// Reads request `input.request_id` for a resuming execution, bumps its execution generation
    /// and makes the resuming execution its owner, under the request row lock: every write an
    /// older execution's attempt may still make (a saved result, a saved failure) is refused as
    /// stale, and a handler start on its behalf as superseded. Only a request that is
    /// inventoried, approved, running or in retry wait can be resumed; a completed one is not.
    /// Records `user.resumed` in the audit trail.
    pub async fn resume(&self, input: &ResumeInput) -> UserStoreResult<ResumedRequest> {
        let request_id = input.request_id;
        let mut tx = self.pool.begin().await?;
        let row: Option<RequestColumns> = sqlx::query_as(
            "SELECT stage, target, requested_by, reason, inventory, inventory_digest, \
                    retry_count, next_attempt_at \
             FROM deletion.requests WHERE id = $1 AND kind = 'user' FOR UPDATE",
        )
        .bind(request_id)
        .fetch_optional(&mut *tx)
        .await?;
        let (stage, target, requested_by, reason, inventory, digest, retry_count, next_attempt_at) =
            row.ok_or(UserStoreError::UnknownRequest(request_id))?;
        if !matches!(
            stage.as_str(),
            "inventoried" | "approved" | "running" | "retry_wait"
        ) {
            return Err(UserStoreError::WrongRequestStage {
                request_id,
                expected: "inventoried, approved, running or retry_wait",
                actual: stage,
            });
        }
        let corrupt =
            |what: &str| UserStoreError::CorruptRow(format!("request {request_id}: {what}"));
        let inventory: UserInventory = inventory
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| corrupt(&format!("unreadable inventory: {e}")))?
            .ok_or_else(|| corrupt("no saved inventory"))?;
        let target = target.ok_or_else(|| corrupt("no target"))?;
        let inventory_digest = digest.ok_or_else(|| corrupt("no inventory digest"))?;
        let approval = StoredApproval::of(&mut tx, request_id).await?;
        let exec_generation = claim_request(&mut tx, request_id, RequestKind::User)
            .await?
            .ok_or(UserStoreError::UnknownRequest(request_id))?;
        sqlx::query("UPDATE deletion.requests SET owner_run_id = $2 WHERE id = $1")
            .bind(request_id)
            .bind(&input.run_id)
            .execute(&mut *tx)
            .await?;
        let detail = json!({
            "cause": input.cause.as_str(),
            "workflow_id": input.workflow_id,
            "run_id": input.run_id,
            "exec_generation": exec_generation,
        });
        commit_audited(tx, request_id, "workflow", "user.resumed", detail).await?;
        Ok(ResumedRequest {
            target,
            requested_by,
            reason,
            inventory,
            inventory_digest,
            request_stage: stage,
            // As `approval()` reads it: the signatures are listed with the request.
            approval: approval.map(|approval| approval.record(None)),
            retry: next_attempt_at.map(|at| retry_state(retry_count, at)),
            exec_generation,
        })
    }
}
