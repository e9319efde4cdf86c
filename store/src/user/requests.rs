//! Request lifecycle writes: registration with the frozen inventory, approval evidence, and the
//! reason a run was blocked.

use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;
use workflows::user::{
    RegisterUserInput, RegisteredUserRequest, UserApprovalInput, UserApprovalRecord, UserInventory,
};

use workflows::approval::{Operator, check_digest, check_two_person, same_operator_name};
use workflows::operator::{Action, Expected, Kind, check_binding};

use super::error::UserStoreError;
use super::{
    StoredApproval, UserStore, UserStoreResult, audit, commit_audited, consume_statement,
    consume_user_action, rfc3339, update_request_audited,
};
use crate::identity::{IdentityError, consume_signature};

/// What an approval is checked against: stage, requester name, frozen digest, target and the
/// requester's key fingerprint.
type ApprovalTarget = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

impl UserStore {
    /// Records request `input.request_id` as `inventoried` with its frozen inventory. Refuses an
    /// inventory that is not the demo inventory of the target, or whose digest differs. A repeat
    /// with the same contents returns the existing row; different contents are refused. The
    /// requester's `submit` signature is verified and consumed (for `consumer`) in the
    /// registering transaction; the requester recorded is the key's registered name.
    pub async fn register(
        &self,
        input: &RegisterUserInput,
        consumer: &str,
    ) -> UserStoreResult<RegisteredUserRequest> {
        let refused = |reason: String| UserStoreError::InventoryRefused {
            request_id: input.request_id,
            reason,
        };
        if input.inventory.target != input.target {
            return Err(refused(format!(
                "it is the inventory of {:?}, not of {:?}",
                input.inventory.target, input.target
            )));
        }
        if let Some(problem) = input.inventory.shape_problem() {
            return Err(refused(problem));
        }
        if workflows::user::real_user_pubkey(&input.target).is_none() {
            let size = u32::try_from(input.inventory.communities.len()).unwrap_or(u32::MAX);
            let expected = UserInventory::demo_sized(&input.target, size)
                .map_err(|e| refused(e.to_string()))?;
            if input.inventory != expected {
                return Err(refused(format!(
                    "it is not the demo inventory of {size} communities (B participant, C former \
                     participant, then the generated ones)"
                )));
            }
        }
        if input.inventory_digest != input.inventory.digest() {
            return Err(refused(format!(
                "digest {} is not the inventory's digest {}",
                input.inventory_digest,
                input.inventory.digest()
            )));
        }
        let inventory = serde_json::to_value(&input.inventory)
            .map_err(|e| refused(format!("cannot encode the inventory: {e}")))?;

        let mut tx = self.pool.begin().await?;
        let expected = Expected {
            action: Action::Submit,
            kind: Kind::User,
            request_id: input.request_id,
            target: &input.target,
            digest: None,
        };
        let consumed = consume_statement(
            &mut tx,
            input.signed.as_ref(),
            &expected,
            &input.requested_by,
            consumer,
        )
        .await?;
        let inserted = sqlx::query(
            "INSERT INTO deletion.requests \
                 (id, kind, target, workflow_id, requested_by, reason, stage, inventory, inventory_digest, \
                  requested_fingerprint, requested_nonce) \
             VALUES ($1, 'user', $2, $3, $4, $5, 'inventoried', $6, $7, $8, $9) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(input.request_id)
        .bind(&input.target)
        .bind(&input.workflow_id)
        .bind(&consumed.name)
        .bind(&input.reason)
        .bind(&inventory)
        .bind(&input.inventory_digest)
        .bind(&consumed.fingerprint)
        .bind(&consumed.nonce)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if inserted {
            audit(
                &mut tx,
                input.request_id,
                &consumed.name,
                "user.submitted",
                json!({
                    "target": input.target,
                    "inventory_digest": input.inventory_digest,
                    "operator": consumed.fingerprint,
                    "nonce": consumed.nonce,
                }),
            )
            .await?;
        } else {
            let existing: (String, Option<String>, String, Option<String>) = sqlx::query_as(
                "SELECT kind, target, workflow_id, inventory_digest FROM deletion.requests WHERE id = $1",
            )
            .bind(input.request_id)
            .fetch_one(&mut *tx)
            .await?;
            let same = existing
                == (
                    "user".to_string(),
                    Some(input.target.clone()),
                    input.workflow_id.clone(),
                    Some(input.inventory_digest.clone()),
                );
            if !same {
                return Err(UserStoreError::RegistrationConflict(input.request_id));
            }
        }
        tx.commit().await?;
        Ok(RegisteredUserRequest {
            request_id: input.request_id,
            inventory_digest: input.inventory_digest.clone(),
        })
    }

    /// Persists the approval evidence and marks the request `approved`, in one transaction.
    /// Re-checks the digest and the two-person rule against the stored request. A repeat by the
    /// same approver for the same digest returns the existing evidence. The approval's signature
    /// must be for this request and digest, by a registered, unrevoked key other than the
    /// requester's; it is consumed for `consumer` in the same transaction.
    pub async fn record_approval(
        &self,
        input: &UserApprovalInput,
        consumer: &str,
    ) -> UserStoreResult<UserApprovalRecord> {
        let request_id = input.request_id;
        let approval = &input.approval;
        let refused = |reason: String| UserStoreError::ApprovalRefused { request_id, reason };
        let mut tx = self.pool.begin().await?;
        let request: Option<ApprovalTarget> = sqlx::query_as(
            "SELECT stage, requested_by, inventory_digest, target, requested_fingerprint \
                 FROM deletion.requests WHERE id = $1 AND kind = 'user' FOR UPDATE",
        )
        .bind(request_id)
        .fetch_optional(&mut *tx)
        .await?;
        let (stage, requested_by, digest, target, requester) =
            request.ok_or(UserStoreError::UnknownRequest(request_id))?;

        if let Some(existing) = StoredApproval::of(&mut tx, request_id).await? {
            if same_operator_name(&existing.approved_by, &approval.approved_by)
                && check_digest(Some(&existing.inventory_digest), &approval.inventory_digest)
                    .is_ok()
            {
                return Ok(existing.record(approval.signed.clone()));
            }
            return Err(refused(format!(
                "already approved by {}",
                existing.approved_by
            )));
        }
        if stage != "inventoried" {
            return Err(UserStoreError::WrongRequestStage {
                request_id,
                expected: "inventoried",
                actual: stage,
            });
        }
        if let Err(refusal) = check_digest(digest.as_deref(), &approval.inventory_digest) {
            return Err(refused(refusal.to_string()));
        }
        let label = approval.approved_by.trim();
        if label.is_empty() {
            return Err(refused(format!(
                "approved_by must name the approving operator (requested by {requested_by:?})"
            )));
        }
        let target = target.ok_or_else(|| {
            UserStoreError::CorruptRow(format!("user request {request_id} has no target"))
        })?;
        let expected = Expected {
            action: Action::Approve,
            kind: Kind::User,
            request_id,
            target: &target,
            digest: Some(&approval.inventory_digest),
        };
        let signed =
            check_binding(approval.signed.as_ref(), &expected).map_err(IdentityError::from)?;
        // The one two-person rule: another key and another name than the requester's.
        check_two_person(
            Operator {
                fingerprint: requester.as_deref(),
                name: &requested_by,
            },
            Operator {
                fingerprint: Some(&signed.operator),
                name: label,
            },
        )
        .map_err(IdentityError::from)?;
        let consumed = consume_signature(&mut tx, signed, label, consumer).await?;
        let approver = consumed.name.as_str();

        let approved_at: DateTime<Utc> = sqlx::query_scalar(
            "INSERT INTO deletion.approvals (request_id, approved_by, inventory_digest, note, \
             approved_fingerprint, approved_nonce) VALUES ($1, $2, $3, $4, $5, $6) \
             RETURNING approved_at",
        )
        .bind(request_id)
        .bind(approver)
        .bind(&approval.inventory_digest)
        .bind(&approval.note)
        .bind(&consumed.fingerprint)
        .bind(&consumed.nonce)
        .fetch_one(&mut *tx)
        .await?;
        update_request_audited(
            &mut tx,
            "UPDATE deletion.requests SET stage = 'approved', updated_at = now() WHERE id = $1",
            request_id,
            approver,
            "user.approved",
            json!({
                "inventory_digest": approval.inventory_digest,
                "operator": consumed.fingerprint,
                "nonce": consumed.nonce,
                "child_deletions": approval
                    .child_deletions
                    .iter()
                    .map(|c| json!({"community_id": c.community_id, "host": c.host,
                                     "request_id": c.request_id}))
                    .collect::<Vec<_>>(),
            }),
        )
        .await?;
        tx.commit().await?;
        Ok(UserApprovalRecord {
            approved_by: approver.to_string(),
            approved_at: rfc3339(approved_at),
            inventory_digest: approval.inventory_digest.clone(),
            note: approval.note.clone(),
            signed: approval.signed.clone(),
            child_deletions: Vec::new(),
        })
    }

    /// Saves why a run stopped on a broken invariant as the request's last error and blocked
    /// reason (`user list --state blocked`); the next successful transition clears both. A real
    /// user's request keeps its first reason until `user unblock` clears it.
    pub async fn record_blocked(&self, request_id: Uuid, reason: &str) -> UserStoreResult<()> {
        let mut tx = self.pool.begin().await?;
        let updated = sqlx::query(
            "UPDATE deletion.requests SET last_error = $2, \
                 blocked_reason = CASE WHEN blocked_reason IS NOT NULL AND target LIKE 'user:%' \
                                       THEN blocked_reason ELSE $2 END, \
                 blocked_stage = CASE WHEN blocked_reason IS NOT NULL AND target LIKE 'user:%' \
                                      THEN blocked_stage ELSE stage END, \
                 blocked_at = CASE WHEN blocked_reason IS NOT NULL AND target LIKE 'user:%' \
                                   THEN blocked_at ELSE now() END, \
                 updated_at = now() \
             WHERE id = $1 AND kind = 'user'",
        )
        .bind(request_id)
        .bind(reason)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if updated == 0 {
            return Err(UserStoreError::UnknownRequest(request_id));
        }
        let detail = json!({"reason": reason});
        commit_audited(tx, request_id, "workflow", "user.blocked", detail).await
    }
}

impl UserStore {
    /// Unblocks a blocked request: verifies and consumes the signed `unblock` statement, clears
    /// the blocked reason and the retry deadline (the next run may start at once) and records
    /// `user.unblocked` with the reason that was cleared. Refused with
    /// [`UserStoreError::NotBlocked`] when the request is not blocked.
    pub async fn unblock(
        &self,
        input: &workflows::user::UserUnblockInput,
        consumer: &str,
    ) -> UserStoreResult<workflows::user::UserUnblockRecord> {
        let request_id = input.request_id;
        let mut tx = self.pool.begin().await?;
        let (target, blocked): (Option<String>, Option<String>) = sqlx::query_as(
            "SELECT target, blocked_reason FROM deletion.requests \
             WHERE id = $1 AND kind = 'user' FOR UPDATE",
        )
        .bind(request_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(UserStoreError::UnknownRequest(request_id))?;
        let cleared = blocked.ok_or(UserStoreError::NotBlocked(request_id))?;
        let consumed = consume_user_action(
            &mut tx,
            Action::Unblock,
            request_id,
            &target.unwrap_or_default(),
            input.unblock.signed.as_ref(),
            &input.unblock.requested_by,
            consumer,
        )
        .await?;
        update_request_audited(
            &mut tx,
            "UPDATE deletion.requests SET blocked_reason = NULL, blocked_stage = NULL, \
                 blocked_at = NULL, next_attempt_at = NULL, updated_at = now() \
             WHERE id = $1",
            request_id,
            &consumed.name,
            "user.unblocked",
            json!({"reason": input.unblock.reason, "cleared": cleared}),
        )
        .await?;
        tx.commit().await?;
        Ok(workflows::user::UserUnblockRecord {
            request_id,
            unblocked_by: consumed.name,
            reason: input.unblock.reason.clone(),
            cleared,
        })
    }
}
