//! The append-only audit trail, stage checkpoints, and the blocked/unblocked state of a request.
//!
//! The database refuses UPDATE, DELETE and TRUNCATE on `deletion.audit_events` (SQLSTATE BZ002),
//! so the trail outlives Temporal's history retention unchanged.

use crate::RequestError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;
use workflows::community::contracts::{AbortRequest, EventInput, RequestEvent, UnblockRequest};

use super::signed::{consume_statement, require_statement};
use super::stage::Stage;
use super::token::{ExecToken, Tx};
use crate::Store;
use crate::chain::append_chained;
use crate::error::{StoreError, StoreResult};

/// Actor recorded for writes made by workflow activities (operators are named explicitly).
pub(crate) const WORKFLOW_ACTOR: &str = "buzz-deletion-worker";

/// One audit event.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AuditEvent {
    /// Monotonic id (the trail's order).
    pub id: i64,
    /// The request it concerns (`None` for fleet-wide events).
    pub request_id: Option<Uuid>,
    /// When it was written.
    pub at: DateTime<Utc>,
    /// Who caused it.
    pub actor: String,
    /// What happened (`submitted`, `approved`, `chunk_stamped`, `blocked`, …).
    pub event: String,
    /// Evidence: counts, digests, reasons.
    pub detail: serde_json::Value,
    /// Its place in the request's hash chain (1, 2, …; none for fleet-wide events).
    pub seq: Option<i64>,
    /// Its hash in that chain (`certificate::chain`).
    pub row_hash: Option<String>,
}

impl From<certificate::chain::ChainRow> for AuditEvent {
    fn from(row: certificate::chain::ChainRow) -> AuditEvent {
        AuditEvent {
            id: row.id,
            request_id: Some(row.request_id),
            at: row.at,
            actor: row.actor,
            event: row.event,
            detail: row.detail,
            seq: row.seq,
            row_hash: row.row_hash,
        }
    }
}

/// Appends an audit event inside the caller's transaction: a request's event extends that
/// request's hash chain (`crate::chain`); a fleet-wide one (no request) is not chained.
pub(crate) async fn insert_audit(
    conn: &mut PgConnection,
    request_id: Option<Uuid>,
    actor: &str,
    event: &str,
    detail: &serde_json::Value,
) -> StoreResult<i64> {
    match request_id {
        Some(request_id) => Ok(append_chained(conn, request_id, actor, event, detail).await?),
        None => insert_fleet_event(conn, actor, event, detail).await,
    }
}

/// Appends a fleet-wide audit event: it concerns no request (`request_id` stays NULL), so it
/// extends no chain.
async fn insert_fleet_event(
    conn: &mut PgConnection,
    actor: &str,
    event: &str,
    detail: &serde_json::Value,
) -> StoreResult<i64> {
    let id = sqlx::query_scalar(
        "INSERT INTO deletion.audit_events (actor, event, detail) VALUES ($1, $2, $3) RETURNING id",
    )
    .bind(actor)
    .bind(event)
    .bind(sqlx::types::Json(detail))
    .fetch_one(conn)
    .await?;
    Ok(id)
}

/// Records that the request reached `stage`, with its evidence, inside the caller's transaction.
/// A milestone already recorded keeps its first evidence (checkpoints are append-only).
pub(crate) async fn insert_checkpoint(
    conn: &mut PgConnection,
    request_id: Uuid,
    stage: &str,
    exec_generation: i64,
    detail: &serde_json::Value,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO deletion.checkpoints (request_id, stage, exec_generation, detail) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (request_id, stage) DO NOTHING",
    )
    .bind(request_id)
    .bind(stage)
    .bind(exec_generation)
    .bind(sqlx::types::Json(detail))
    .execute(conn)
    .await?;
    Ok(())
}

/// Sets the request's stage (the caller holds the row lock and has checked the transition).
async fn set_stage(conn: &mut PgConnection, request_id: Uuid, stage: &str) -> StoreResult<()> {
    sqlx::query(
        "UPDATE deletion.requests SET stage = $2, updated_at = now(), \
         completed_at = CASE WHEN $2 IN ('retention_pending', 'aborted') THEN now() \
                        ELSE completed_at END \
         WHERE id = $1",
    )
    .bind(request_id)
    .bind(stage)
    .execute(conn)
    .await?;
    Ok(())
}

/// Sets the request's stage to `to` and records its checkpoint and an audit event named after the
/// stage, all inside the caller's transaction (which holds the row lock and checked the
/// transition): a stage is never reached without its evidence.
pub(crate) async fn record_advance(
    conn: &mut PgConnection,
    request_id: Uuid,
    to: Stage,
    exec_generation: i64,
    actor: &str,
    detail: &serde_json::Value,
) -> StoreResult<()> {
    set_stage(conn, request_id, to.as_str()).await?;
    record_milestone(
        conn,
        request_id,
        to.as_str(),
        exec_generation,
        actor,
        detail,
    )
    .await
}

/// Records the audit event `event` of the request as the last write of `tx`, then commits it.
pub(crate) async fn commit_audited(
    mut tx: Transaction<'_, Postgres>,
    request_id: Uuid,
    actor: &str,
    event: &str,
    detail: &serde_json::Value,
) -> StoreResult<()> {
    insert_audit(&mut tx, Some(request_id), actor, event, detail).await?;
    tx.commit().await?;
    Ok(())
}

/// Records the checkpoint `milestone` and an audit event of the same name by `actor`, with the
/// same evidence, inside the caller's transaction.
pub(crate) async fn record_milestone(
    conn: &mut PgConnection,
    request_id: Uuid,
    milestone: &str,
    exec_generation: i64,
    actor: &str,
    detail: &serde_json::Value,
) -> StoreResult<()> {
    insert_checkpoint(conn, request_id, milestone, exec_generation, detail).await?;
    insert_audit(conn, Some(request_id), actor, milestone, detail).await?;
    Ok(())
}

/// The writes of the worker holding a token: on its request, at its execution generation, by
/// [`WORKFLOW_ACTOR`]. The caller's transaction holds the row lock ([`lock_for_token`]).
///
/// [`lock_for_token`]: super::token::lock_for_token
impl ExecToken {
    /// [`record_advance`] to `to`, inside the caller's transaction.
    pub(crate) async fn record_advance(
        &self,
        conn: &mut PgConnection,
        to: Stage,
        detail: &serde_json::Value,
    ) -> StoreResult<()> {
        set_stage(conn, self.request_id, to.as_str()).await?;
        self.record_milestone(conn, to.as_str(), detail).await
    }

    /// [`ExecToken::record_advance`] as the last write of `tx`, then commits it.
    pub(crate) async fn commit_advance(
        &self,
        mut tx: Tx,
        to: Stage,
        detail: &serde_json::Value,
    ) -> StoreResult<()> {
        self.record_advance(&mut tx, to, detail).await?;
        tx.commit().await?;
        Ok(())
    }

    /// [`record_milestone`] `milestone`, inside the caller's transaction.
    pub(crate) async fn record_milestone(
        &self,
        conn: &mut PgConnection,
        milestone: &str,
        detail: &serde_json::Value,
    ) -> StoreResult<()> {
        record_milestone(
            conn,
            self.request_id,
            milestone,
            self.exec_generation,
            WORKFLOW_ACTOR,
            detail,
        )
        .await
    }

    /// The audit event `event` as the last write of `tx`, then commits it.
    /// Appends `event` to the request's hash chain inside the caller's transaction (several
    /// events may share one commit).
    pub(crate) async fn append_event(
        &self,
        conn: &mut PgConnection,
        event: &str,
        detail: &serde_json::Value,
    ) -> StoreResult<()> {
        insert_audit(conn, Some(self.request_id), WORKFLOW_ACTOR, event, detail).await?;
        Ok(())
    }

    pub(crate) async fn commit_event(
        &self,
        tx: Tx,
        event: &str,
        detail: &serde_json::Value,
    ) -> StoreResult<()> {
        commit_audited(tx, self.request_id, WORKFLOW_ACTOR, event, detail).await
    }
}

impl Store {
    /// Appends an event to the audit trail and returns its id.
    pub async fn append_audit(
        &self,
        request_id: Option<Uuid>,
        actor: &str,
        event: &str,
        detail: serde_json::Value,
    ) -> StoreResult<i64> {
        let mut tx = self.pool.begin().await?;
        let id = insert_audit(&mut tx, request_id, actor, event, &detail).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// The request's audit trail, oldest first.
    pub async fn audit_events(&self, request_id: Uuid) -> StoreResult<Vec<AuditEvent>> {
        let events = sqlx::query_as::<_, AuditEvent>(
            "SELECT id, request_id, at, actor, event, detail, seq, row_hash \
             FROM deletion.audit_events WHERE request_id = $1 ORDER BY id",
        )
        .bind(request_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(events)
    }

    /// Records a permanent failure: the request is blocked in `phase` until an operator unblocks
    /// it. A newer failure replaces the recorded reason; each one is kept in the audit trail.
    pub async fn record_block(
        &self,
        request_id: Uuid,
        phase: &str,
        reason: &str,
    ) -> StoreResult<()> {
        let (mut tx, _row) = self.begin_locked(request_id).await?;
        sqlx::query(
            "UPDATE deletion.requests SET blocked_stage = $2, blocked_reason = $3, \
             blocked_at = now(), last_error = $3, updated_at = now() WHERE id = $1",
        )
        .bind(request_id)
        .bind(phase)
        .bind(reason)
        .execute(&mut *tx)
        .await?;
        let detail = serde_json::json!({ "phase": phase, "reason": reason });
        commit_audited(tx, request_id, WORKFLOW_ACTOR, "blocked", &detail).await?;
        Ok(())
    }

    /// Clears the block after an operator's remediation (recorded with the signing key's
    /// registered name, the reason and the signature). Refused with [`RequestError::NotBlocked`]
    /// when the request is not blocked, and with [`StoreError::Identity`] when the unblock's
    /// signature does not count; a retry by the same `consumer` after a commit is a no-op.
    pub async fn record_unblock(
        &self,
        request_id: Uuid,
        unblock: &UnblockRequest,
        consumer: &str,
    ) -> StoreResult<()> {
        require_statement(unblock)?;
        let (mut tx, row) = self.begin_locked(request_id).await?;
        let Some(blocked_reason) = row.blocked_reason else {
            if let Some(signed) = &unblock.signed {
                let consumed_by: Option<String> = sqlx::query_scalar(
                    "SELECT consumed_by FROM deletion.operator_signatures \
                     WHERE fingerprint = $1 AND nonce = $2",
                )
                .bind(&signed.operator)
                .bind(&signed.nonce)
                .fetch_optional(&mut *tx)
                .await?;
                if consumed_by.as_deref() == Some(consumer) {
                    // This unblock's own retry: it is recorded.
                    return Ok(());
                }
            }
            return Err(StoreError::Request(RequestError::NotBlocked { request_id }));
        };
        let consumed = consume_statement(&mut tx, request_id, unblock, consumer).await?;
        sqlx::query(
            "UPDATE deletion.requests SET blocked_stage = NULL, blocked_reason = NULL, \
             blocked_at = NULL, updated_at = now() WHERE id = $1",
        )
        .bind(request_id)
        .execute(&mut *tx)
        .await?;
        let detail = serde_json::json!({
            "phase": row.blocked_stage,
            "blocked_reason": blocked_reason,
            "remediation": unblock.reason,
            "operator": consumed.fingerprint,
            "nonce": consumed.nonce,
        });
        commit_audited(tx, request_id, &consumed.name, "unblocked", &detail).await?;
        Ok(())
    }

    /// Verifies and consumes an abort's signature for `consumer` and records it in the audit
    /// trail (`abort_signed`), in one transaction, before the workflow lets the abort count.
    /// Returns the abort under the signing key's registered name.
    pub async fn accept_abort(
        &self,
        request_id: Uuid,
        abort: &AbortRequest,
        consumer: &str,
    ) -> StoreResult<AbortRequest> {
        require_statement(abort)?;
        let (mut tx, row) = self.begin_locked(request_id).await?;
        row.community()?;
        let consumed = consume_statement(&mut tx, request_id, abort, consumer).await?;
        if !consumed.repeat {
            let detail = serde_json::json!({
                "reason": abort.reason,
                "stage": row.stage,
                "operator": consumed.fingerprint,
                "nonce": consumed.nonce,
            });
            insert_audit(
                &mut tx,
                Some(request_id),
                &consumed.name,
                "abort_signed",
                &detail,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(AbortRequest {
            actor: consumed.name,
            reason: abort.reason.clone(),
            signed: abort.signed.clone(),
        })
    }

    /// Records a transient failure (Temporal retries it): last error and attempt count, for
    /// status and inspect. The request is not blocked.
    pub async fn record_transient_failure(
        &self,
        request_id: Uuid,
        phase: &str,
        error: &str,
    ) -> StoreResult<()> {
        let updated = sqlx::query(
            "UPDATE deletion.requests SET last_error = $2, retry_count = retry_count + 1, \
             updated_at = now() WHERE id = $1",
        )
        .bind(request_id)
        .bind(format!("{phase}: {error}"))
        .execute(&self.pool)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                what: "deletion request",
                id: request_id.to_string(),
            });
        }
        Ok(())
    }

    /// Implements the `community.record_event` contract: blocks and unblocks change the request's
    /// blocked state; every other event is appended to the audit trail as is. `consumer`
    /// identifies the activity attempt consuming an unblock's signature.
    pub async fn record_event(&self, input: &EventInput, consumer: &str) -> StoreResult<()> {
        match &input.event {
            RequestEvent::Blocked { phase, reason } => {
                self.record_block(input.request_id, phase, reason).await
            }
            RequestEvent::Unblocked {
                actor,
                reason,
                signed,
            } => {
                let unblock = UnblockRequest {
                    actor: actor.clone(),
                    reason: reason.clone(),
                    signed: signed.clone(),
                };
                self.record_unblock(input.request_id, &unblock, consumer)
                    .await
            }
            RequestEvent::ApprovalRejected { actor, .. }
            | RequestEvent::AbortRefused { actor, .. }
            | RequestEvent::UnblockRejected { actor, .. } => {
                let detail =
                    serde_json::to_value(&input.event).map_err(|error| StoreError::Corrupt {
                        what: "request event",
                        reason: error.to_string(),
                    })?;
                let event = detail
                    .get("event")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("request_event")
                    .to_owned();
                self.append_audit(Some(input.request_id), actor, &event, detail)
                    .await
                    .map(|_| ())
            }
        }
    }
}

/// Refuses an empty (after trimming) operator-supplied field.
pub(crate) fn require_named(field: &'static str, value: &str) -> StoreResult<()> {
    if value.trim().is_empty() {
        Err(StoreError::InvalidInput {
            field,
            reason: "must not be empty".to_owned(),
        })
    } else {
        Ok(())
    }
}
