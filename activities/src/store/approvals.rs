//! Approval evidence: one row per request, bound to the frozen inventory digest, never updated.

use chrono::{DateTime, SecondsFormat, Utc};
use uuid::Uuid;
use workflows::community::contracts::{ApprovalRecord, ApproveRequest};

use super::Store;
use super::audit::{record_advance, require_named};
use super::error::{StoreError, StoreResult};
use super::stage::Stage;
use super::token::lock_request;

/// An approval row as stored.
#[derive(Debug, sqlx::FromRow)]
struct ApprovalRow {
    approved_by: String,
    approved_at: DateTime<Utc>,
    inventory_digest: String,
    note: Option<String>,
}

impl From<ApprovalRow> for ApprovalRecord {
    fn from(row: ApprovalRow) -> Self {
        ApprovalRecord {
            approved_by: row.approved_by,
            approved_at: row.approved_at.to_rfc3339_opts(SecondsFormat::Millis, true),
            digest: row.inventory_digest,
            note: row.note,
        }
    }
}

/// Operator identities compare trimmed and case-insensitively: `Alice ` and `alice` are one person.
fn same_operator(a: &str, b: &str) -> bool {
    a.trim().to_lowercase() == b.trim().to_lowercase()
}

impl Store {
    /// Records approval evidence and advances `inventoried → approved`, in one transaction.
    ///
    /// Refused, with nothing changed, when the request already has an approval
    /// ([`StoreError::AlreadyApproved`]), is not awaiting approval ([`StoreError::WrongStage`]),
    /// the digest is not the frozen one ([`StoreError::DigestMismatch`]), or the approver is the
    /// requester ([`StoreError::SelfApproval`], the two-person rule).
    pub async fn record_approval(
        &self,
        request_id: Uuid,
        approval: &ApproveRequest,
    ) -> StoreResult<ApprovalRecord> {
        require_named("approved_by", &approval.approved_by)?;
        let mut tx = self.pool.begin().await?;
        let row = lock_request(&mut tx, request_id).await?;
        row.community()?;
        let existing: Option<String> =
            sqlx::query_scalar("SELECT approved_by FROM deletion.approvals WHERE request_id = $1")
                .bind(request_id)
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(approved_by) = existing {
            return Err(StoreError::AlreadyApproved {
                request_id,
                approved_by,
            });
        }
        row.require_stage(&[Stage::Inventoried])?;
        let frozen_digest = row.inventory_digest.clone().unwrap_or_default();
        if approval.digest.trim() != frozen_digest {
            return Err(StoreError::DigestMismatch {
                request_id,
                what: "approved inventory",
                expected: frozen_digest,
                actual: approval.digest.clone(),
            });
        }
        if same_operator(&approval.approved_by, &row.requested_by) {
            return Err(StoreError::SelfApproval {
                request_id,
                approver: approval.approved_by.clone(),
            });
        }
        let approver = approval.approved_by.trim();
        let stored = sqlx::query_as::<_, ApprovalRow>(
            "INSERT INTO deletion.approvals (request_id, approved_by, inventory_digest, note) \
             VALUES ($1, $2, $3, $4) \
             RETURNING approved_by, approved_at, inventory_digest, note",
        )
        .bind(request_id)
        .bind(approver)
        .bind(&frozen_digest)
        .bind(approval.note.as_deref())
        .fetch_one(&mut *tx)
        .await?;
        let detail = serde_json::json!({
            "approved_by": approver,
            "digest": frozen_digest,
            "note": approval.note,
        });
        record_advance(
            &mut tx,
            request_id,
            Stage::Approved,
            row.exec_generation,
            approver,
            &detail,
        )
        .await?;
        tx.commit().await?;
        Ok(stored.into())
    }

    /// The request's approval evidence, if approved.
    pub async fn approval_of(&self, request_id: Uuid) -> StoreResult<Option<ApprovalRecord>> {
        let row = sqlx::query_as::<_, ApprovalRow>(
            "SELECT approved_by, approved_at, inventory_digest, note FROM deletion.approvals \
             WHERE request_id = $1",
        )
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(ApprovalRecord::from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_names_compare_trimmed_and_case_insensitively() {
        assert!(same_operator("Alice ", " alice"));
        assert!(!same_operator("alice", "bob"));
    }
}
