//! Approval evidence: one row per request, bound to the frozen inventory digest, never updated.

use chrono::{DateTime, SecondsFormat, Utc};
use uuid::Uuid;
use workflows::community::contracts::{ApprovalRecord, ApproveRequest};

use workflows::approval::{self, Operator};
use workflows::operator::{Action, SignedAction};

use super::audit::{record_advance, require_named};
use super::signed::consume_request_signature;
use super::stage::Stage;
use crate::Store;
use crate::error::{StoreError, StoreResult};
use crate::identity::IdentityError;

/// An approval row as stored.
#[derive(Debug, sqlx::FromRow)]
struct ApprovalRow {
    approved_by: String,
    approved_at: DateTime<Utc>,
    inventory_digest: String,
    note: Option<String>,
}

/// An approval row with the statement and signature it names.
#[derive(Debug, sqlx::FromRow)]
struct SignedApprovalRow {
    #[sqlx(flatten)]
    approval: ApprovalRow,
    statement: Option<String>,
    signature: Option<String>,
}

impl From<ApprovalRow> for ApprovalRecord {
    fn from(row: ApprovalRow) -> Self {
        ApprovalRecord {
            approved_by: row.approved_by,
            approved_at: row.approved_at.to_rfc3339_opts(SecondsFormat::Millis, true),
            digest: row.inventory_digest,
            note: row.note,
            signed: None,
        }
    }
}

impl Store {
    /// Records approval evidence and advances `inventoried → approved`, in one transaction.
    ///
    /// Refused, with nothing changed, when the request already has an approval
    /// ([`ApprovalError::AlreadyApproved`]), is not awaiting approval ([`RequestError::WrongStage`]),
    /// the digest is not the frozen one ([`ApprovalError::DigestMismatch`]), or the approval's
    /// signature does not count ([`StoreError::Identity`]): missing, bound to something else,
    /// made with the requester's key (the two-person rule compares fingerprints), by an unknown
    /// or revoked key, expired, or used before. The approval is recorded under the key's
    /// registered name, naming its signature. `consumer` identifies the activity attempt: a
    /// retry after a commit returns the recorded approval.
    pub async fn record_approval(
        &self,
        request_id: Uuid,
        approval: &ApproveRequest,
        consumer: &str,
    ) -> StoreResult<ApprovalRecord> {
        require_named("approved_by", &approval.approved_by)?;
        let (mut tx, row) = self.begin_locked(request_id).await?;
        row.community()?;
        let existing: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT approved_by, approved_nonce FROM deletion.approvals WHERE request_id = $1",
        )
        .bind(request_id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((approved_by, nonce)) = existing {
            let signed = approval.signed.as_ref();
            if nonce.is_some() && nonce.as_deref() == signed.map(|s| s.nonce.as_str()) {
                // This approval's own retry: the evidence is recorded.
                let mut record =
                    self.approval_of(request_id)
                        .await?
                        .ok_or_else(|| StoreError::Corrupt {
                            what: "approval",
                            reason: "vanished while read".into(),
                        })?;
                record.signed = approval.signed.clone();
                return Ok(record);
            }
            return Err(StoreError::Approval(ApprovalError::AlreadyApproved {
                request_id,
                approved_by,
            }));
        }
        row.require_stage(&[Stage::Inventoried])?;
        // An inventoried request without a digest is damaged, not "frozen as empty".
        let frozen_digest = row
            .inventory_digest
            .clone()
            .ok_or_else(|| StoreError::Corrupt {
                what: "request",
                reason: format!("request {request_id} is inventoried without an inventory digest"),
            })?;
        if approval::check_digest(Some(&frozen_digest), &approval.digest).is_err() {
            return Err(StoreError::Approval(ApprovalError::DigestMismatch {
                request_id,
                what: "approved inventory",
                expected: frozen_digest,
                actual: approval.digest.clone(),
            }));
        }
        let (requester, requested_by): (Option<String>, String) = sqlx::query_as(
            "SELECT requested_fingerprint, requested_by FROM deletion.requests WHERE id = $1",
        )
        .bind(request_id)
        .fetch_one(&mut *tx)
        .await?;
        // The one two-person rule; the label is checked against the key's registered name when
        // the signature is consumed.
        approval::check_two_person(
            Operator {
                fingerprint: requester.as_deref(),
                name: &requested_by,
            },
            Operator {
                fingerprint: approval.signed.as_ref().map(|s| s.operator.as_str()),
                name: &approval.approved_by,
            },
        )
        .map_err(IdentityError::from)?;
        let consumed = consume_request_signature(
            &mut tx,
            approval.signed.as_ref(),
            (Action::Approve, request_id, Some(&frozen_digest)),
            &approval.approved_by,
            consumer,
        )
        .await?;
        let approver = consumed.name.as_str();
        let stored = sqlx::query_as::<_, ApprovalRow>(
            "INSERT INTO deletion.approvals (request_id, approved_by, inventory_digest, note, \
             approved_fingerprint, approved_nonce) VALUES ($1, $2, $3, $4, $5, $6) \
             RETURNING approved_by, approved_at, inventory_digest, note",
        )
        .bind(request_id)
        .bind(approver)
        .bind(&frozen_digest)
        .bind(approval.note.as_deref())
        .bind(&consumed.fingerprint)
        .bind(&consumed.nonce)
        .fetch_one(&mut *tx)
        .await?;
        let detail = serde_json::json!({
            "approved_by": approver,
            "digest": frozen_digest,
            "note": approval.note,
            "operator": consumed.fingerprint,
            "nonce": consumed.nonce,
        });
        let generation = row.exec_generation;
        record_advance(
            &mut tx,
            request_id,
            Stage::Approved,
            generation,
            approver,
            &detail,
        )
        .await?;
        tx.commit().await?;
        let mut record = ApprovalRecord::from(stored);
        record.signed = approval.signed.clone();
        Ok(record)
    }

    /// The request's approval evidence, if approved, with the signed statement it names.
    pub async fn approval_of(&self, request_id: Uuid) -> StoreResult<Option<ApprovalRecord>> {
        let row = sqlx::query_as::<_, SignedApprovalRow>(
            "SELECT a.approved_by, a.approved_at, a.inventory_digest, a.note, s.statement, \
             s.signature FROM deletion.approvals a LEFT JOIN deletion.operator_signatures s \
             ON s.fingerprint = a.approved_fingerprint AND s.nonce = a.approved_nonce \
             WHERE a.request_id = $1",
        )
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| {
            let signed = match (&row.statement, &row.signature) {
                (Some(statement), Some(signature)) => {
                    SignedAction::from_statement(statement, signature)
                }
                _ => None,
            };
            ApprovalRecord {
                signed,
                ..ApprovalRecord::from(row.approval)
            }
        }))
    }
}

/// Why a store call failed because an approval is refused (digest, evidence, two-person rule): one part of [`crate::StoreError`].
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// A digest does not match what it must match.
    #[error("request {request_id}: {what} digest mismatch (expected {expected}, got {actual})")]
    DigestMismatch {
        /// The request.
        request_id: uuid::Uuid,
        /// What the digest covers.
        what: &'static str,
        /// The digest it must equal.
        expected: String,
        /// The digest found or offered.
        actual: String,
    },
    /// The approval, the frozen inventory and the request row do not name the same thing: the
    /// request row (or the approval) was changed after approval. Never a reason to act on what
    /// the row now names.
    #[error(
        "request {request_id}: the deletion evidence does not match the request: {}. Approved \
         evidence never changes, so this means the records were tampered with or a bug rewrote \
         them; nothing was deleted on their word. Find who changed them (`buzz-deletion \
         community inspect {request_id}` shows the approved digest and the audit trail), restore \
         the request row, then unblock; or abort",
        differences.join("; ")
    )]
    EvidenceMismatch {
        /// The request.
        request_id: uuid::Uuid,
        /// Each disagreement, naming both sides.
        differences: Vec<String>,
    },
    /// The requester tried to approve their own request (two-person rule).
    #[error("request {request_id}: {approver} requested this deletion and cannot also approve it")]
    SelfApproval {
        /// The request.
        request_id: uuid::Uuid,
        /// The would-be approver.
        approver: String,
    },
    /// The request already carries approval evidence.
    #[error("request {request_id} is already approved by {approved_by}")]
    AlreadyApproved {
        /// The request.
        request_id: uuid::Uuid,
        /// Who approved it.
        approved_by: String,
    },
}

// Every one is permanent: retrying cannot change the answer.
crate::failure::permanent_failure!(ApprovalError);
