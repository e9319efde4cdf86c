//! The irreversible point: `irreversible_at` is set only once S3 has acknowledged a destructive
//! call (a version deletion or an upload abort), and `irreversible_pending_at` (migration 0017)
//! stands between the first such call and its answer.
//!
//! An attempt records the pending call ([`Store::begin_destructive_call`]) before its first
//! destructive call, under the request lock and with the same checks the marker has (stage
//! `drained`, fence held, manifest bound). Once the answer is known it either sets the marker
//! ([`Store::mark_irreversible`], on an acknowledgement or an unknown outcome) or withdraws the
//! pending call ([`Store::withdraw_destructive_call`], when S3 refused every call whole). While a
//! call is pending an abort fails transiently ([`RequestError::DestructiveCallPending`]) and is
//! retried: it is decided by the answer. A pending call left by an attempt that died is resolved
//! by the next one, conservatively ([`Store::resolve_inherited_call`]).

use crate::RequestError;
use chrono::{DateTime, Utc};

use super::stage::Stage;
use super::token::ExecToken;
use crate::Store;
use crate::error::{StoreError, StoreResult};

impl Store {
    /// Records, before a destructive S3 call, that one may be in flight. Returns `true` when the
    /// irreversible marker is already set (nothing recorded). Requires stage `drained`, the
    /// fence held and the manifest bound (and still valid). Idempotent.
    pub async fn begin_destructive_call(&self, token: &ExecToken) -> StoreResult<bool> {
        let (mut tx, row) = self.begin_destruction(token).await?;
        if row.irreversible_at.is_some() {
            return Ok(true);
        }
        if row.irreversible_pending_at.is_none() {
            sqlx::query(
                "UPDATE deletion.requests SET irreversible_pending_at = now(), updated_at = now() \
                 WHERE id = $1",
            )
            .bind(token.request_id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        }
        Ok(false)
    }

    /// Records, once and under the request lock, the point after which abort is refused, and
    /// clears any pending call. Call it once S3 acknowledged a destructive call (or its answer is
    /// unknown). Requires stage `drained`, the fence held and the manifest bound (and still
    /// valid). Returns when the point was (first) recorded.
    pub async fn mark_irreversible(&self, token: &ExecToken) -> StoreResult<DateTime<Utc>> {
        self.mark_irreversible_because(token, serde_json::json!({}))
            .await
    }

    /// As [`Store::mark_irreversible`], with `why` (what S3 answered) in the `irreversible`
    /// audit event.
    pub async fn mark_irreversible_because(
        &self,
        token: &ExecToken,
        why: serde_json::Value,
    ) -> StoreResult<DateTime<Utc>> {
        let (mut tx, row) = self.begin_destruction(token).await?;
        if let Some(at) = row.irreversible_at {
            return Ok(at);
        }
        let at = sqlx::query_scalar(
            "UPDATE deletion.requests SET irreversible_at = now(), \
             irreversible_pending_at = NULL, updated_at = now() \
             WHERE id = $1 RETURNING irreversible_at",
        )
        .bind(token.request_id)
        .fetch_one(&mut *tx)
        .await?;
        let detail = serde_json::json!({
            "exec_generation": token.exec_generation,
            "pending_since": row.irreversible_pending_at,
            "because": why,
        });
        token.commit_event(tx, "irreversible", &detail).await?;
        Ok(at)
    }

    /// Withdraws the pending call once S3 refused every destructive call of this attempt whole:
    /// nothing was deleted or aborted, so the marker stays unset and the request can still be
    /// aborted. `refusal` (what S3 answered) goes into the `destructive_calls_refused` audit
    /// event. Returns `false`, changing nothing, when the marker is set or nothing is pending.
    pub async fn withdraw_destructive_call(
        &self,
        token: &ExecToken,
        refusal: serde_json::Value,
    ) -> StoreResult<bool> {
        let (mut tx, row) = self.begin_for_token(token, &[Stage::Drained]).await?;
        let Some(since) = row.irreversible_pending_at else {
            return Ok(false);
        };
        if row.irreversible_at.is_some() {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE deletion.requests SET irreversible_pending_at = NULL, updated_at = now() \
             WHERE id = $1",
        )
        .bind(token.request_id)
        .execute(&mut *tx)
        .await?;
        let detail = serde_json::json!({
            "exec_generation": token.exec_generation,
            "pending_since": since,
            "refusal": refusal,
        });
        token
            .commit_event(tx, "destructive_calls_refused", &detail)
            .await?;
        Ok(true)
    }

    /// At the start of an attempt: a call an earlier attempt left pending has no known answer
    /// (that attempt died, or is a zombie that may still be waiting for it), so the marker is set
    /// conservatively. Returns whether the marker is set now. Read-only unless a call is pending.
    pub async fn resolve_inherited_call(&self, token: &ExecToken) -> StoreResult<bool> {
        let (tx, row) = self.begin_for_token(token, &[Stage::Drained]).await?;
        if row.irreversible_at.is_some() {
            return Ok(true);
        }
        if row.irreversible_pending_at.is_none() {
            return Ok(false);
        }
        drop(tx);
        let why = serde_json::json!({
            "inherited": "an earlier attempt's destructive call has no known answer"
        });
        self.mark_irreversible_because(token, why).await?;
        Ok(true)
    }
}

/// The abort's view of the marker, read under the request lock: refused past it, transient
/// while a destructive call is pending (its answer decides), allowed otherwise.
pub(crate) fn abort_blocked_by_pending_call(
    request_id: uuid::Uuid,
    pending_since: Option<DateTime<Utc>>,
) -> StoreResult<()> {
    match pending_since {
        Some(since) => Err(StoreError::Request(RequestError::DestructiveCallPending {
            request_id,
            since,
        })),
        None => Ok(()),
    }
}
