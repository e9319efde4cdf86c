//! The community fence: serving → quiescing → fenced, and back to serving on abort.
//!
//! Every change bumps the fence generation, so a lease or token minted under an older generation
//! is never mistaken for a current one. Lock order everywhere: request row, then fence row.
//! Serving writers hold the fence row `FOR SHARE` (lease acquisition and the row-write trigger),
//! and `fence` takes it `FOR UPDATE`, so the fence cannot commit past an in-flight admission.
//! The row mechanism (lock, state change, live-lease refusal) is the one the user fence shares
//! (`store/fences.rs`); what is the community's own is here: which transitions its request may
//! make, the request row and stage advances, and the audit events.

use crate::{FenceError, RequestError};
use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::AbortRequest;

use super::audit::{WORKFLOW_ACTOR, commit_audited, insert_audit, record_advance};
use super::irreversible::abort_blocked_by_pending_call;
use super::signed::require_statement;
use super::stage::Stage;
use super::token::{ExecToken, LockedRequest, Tx};
use crate::Store;
use crate::error::{StoreError, StoreResult};
use crate::fences::{
    FenceState, ScopedFenceStatus, fence_row, lock_fence_row, require_no_live_serving_writes,
    set_fence, set_fence_lock_timeout,
};

/// A community's fence row (keyed by `community_id`).
pub type FenceStatus = ScopedFenceStatus<Uuid>;

/// Locks the community's fence row `FOR UPDATE` under the fence's lock timeout, creating it
/// `serving` if missing.
async fn lock_fence(conn: &mut PgConnection, community_id: Uuid) -> StoreResult<FenceStatus> {
    set_fence_lock_timeout(conn).await?;
    lock_fence_row(conn, &community_id).await
}

/// Moves the fence of the token's community to `state` for its request (the caller holds the
/// fence row lock); returns the new fence generation.
async fn set_token_fence(
    conn: &mut PgConnection,
    token: &ExecToken,
    state: FenceState,
) -> StoreResult<i64> {
    let status = set_fence(conn, &token.community_id, state, token.request_id).await?;
    Ok(status.generation)
}

impl Store {
    /// Opens a transaction in which the token's request is `approved` (generation-checked) and
    /// its community's fence row is locked: the start of quiescing and fencing.
    async fn begin_fencing(&self, token: &ExecToken) -> StoreResult<(Tx, FenceStatus)> {
        let (mut tx, _) = self.begin_for_token(token, &[Stage::Approved]).await?;
        let fence = lock_fence(&mut tx, token.community_id).await?;
        Ok((tx, fence))
    }
}

impl Store {
    /// The community's fence row, if it has one.
    pub async fn fence_status(&self, community_id: Uuid) -> StoreResult<Option<FenceStatus>> {
        fence_row(&self.pool, &community_id).await
    }

    /// Starts quiescing: new serving-write leases are refused from now on, while leases already
    /// admitted may renew and finish. Returns the fence generation. Idempotent for this request
    /// (a retry does not bump the generation again). Stage must be `approved`.
    pub async fn begin_quiescing(&self, token: &ExecToken) -> StoreResult<i64> {
        let (mut tx, fence) = self.begin_fencing(token).await?;
        let generation = match fence.state {
            FenceState::Serving => {
                let generation = set_token_fence(&mut tx, token, FenceState::Quiescing).await?;
                let detail = serde_json::json!({ "fence_generation": generation });
                let request = Some(token.request_id);
                insert_audit(&mut tx, request, WORKFLOW_ACTOR, "quiescing", &detail).await?;
                generation
            }
            FenceState::Quiescing if fence.request_id == Some(token.request_id) => fence.generation,
            state => {
                return Err(StoreError::Fence(FenceError::Conflict {
                    community_id: token.community_id,
                    state: state.to_string(),
                    holder: fence.request_id,
                    reason: "cannot start quiescing".to_owned(),
                }));
            }
        };
        tx.commit().await?;
        Ok(generation)
    }

    /// Fences the community once no serving write is live: every serving write and row write is
    /// refused from now on. Bumps and records the fence generation on the request and advances
    /// `approved → fenced` with a checkpoint. Refused with [`FenceError::ServingWritesLive`]
    /// (transient: retry later) while an unexpired, unreleased lease exists; nothing changes then.
    pub async fn fence(&self, token: &ExecToken) -> StoreResult<i64> {
        let (mut tx, fence) = self.begin_fencing(token).await?;
        if fence.state != FenceState::Quiescing || fence.request_id != Some(token.request_id) {
            return Err(StoreError::Fence(FenceError::Conflict {
                community_id: token.community_id,
                state: fence.state.to_string(),
                holder: fence.request_id,
                reason: "fence requires this request's quiescing first".to_owned(),
            }));
        }
        require_no_live_serving_writes(&mut tx, &token.community_id).await?;
        let generation = set_token_fence(&mut tx, token, FenceState::Fenced).await?;
        sqlx::query(
            "UPDATE deletion.requests SET fence_generation = $2, updated_at = now() WHERE id = $1",
        )
        .bind(token.request_id)
        .bind(generation)
        .execute(&mut *tx)
        .await?;
        let detail = serde_json::json!({ "fence_generation": generation });
        token.commit_advance(tx, Stage::Fenced, &detail).await?;
        Ok(generation)
    }

    /// Ends the request `aborted` and lifts its quiescing or fence so the community is served
    /// again (bumping the fence generation, and the execution generation so any attempt still
    /// running is stale). Returns the fence generation. Idempotent on an already aborted request.
    ///
    /// The irreversible marker decides, under the request row lock, not the workflow's phase:
    /// once `irreversible_at` is set the abort is refused with
    /// [`RequestError::IrreversibleStarted`], and the refusal is committed to the audit trail
    /// (`abort_refused`) before the error is returned. While a destructive S3 call is pending
    /// before the marker (`irreversible_pending_at`) the abort fails transiently
    /// ([`RequestError::DestructiveCallPending`]), recording nothing: S3's answer decides. The
    /// fence lifted is the one this request holds, whatever community the request row names now.
    pub async fn unfence_for_abort(
        &self,
        request_id: Uuid,
        abort: &AbortRequest,
    ) -> StoreResult<i64> {
        require_statement(abort)?;
        let (mut tx, row) = self.begin_locked(request_id).await?;
        let community_id = row.community()?;
        let stage = row.require_community_stage()?;
        if row.irreversible_at.is_some() || stage.is_past_irreversible_point() {
            return Err(commit_abort_refused(tx, &row, stage, abort).await?);
        }
        abort_blocked_by_pending_call(request_id, row.irreversible_pending_at)?;
        // The fence this request holds, even if the row's community was changed since.
        let community_id = held_fence(&mut tx, request_id)
            .await?
            .unwrap_or(community_id);
        let fence = lock_fence(&mut tx, community_id).await?;
        if stage == Stage::Aborted {
            return Ok(fence.generation);
        }
        let held_by_this_request =
            fence.state != FenceState::Serving && fence.request_id == Some(request_id);
        let generation = if held_by_this_request {
            set_fence(&mut tx, &community_id, FenceState::Serving, request_id)
                .await?
                .generation
        } else {
            fence.generation
        };
        let exec_generation = restart_generation(&mut tx, request_id).await?;
        let detail = serde_json::json!({
            "actor": abort.actor,
            "reason": abort.reason,
            "aborted_at_stage": stage,
            "fence_lifted": held_by_this_request,
            "fence_generation": generation,
        });
        record_advance(
            &mut tx,
            request_id,
            Stage::Aborted,
            exec_generation,
            abort.actor.trim(),
            &detail,
        )
        .await?;
        tx.commit().await?;
        Ok(generation)
    }
}

/// Commits the refusal of an abort past the irreversible point to the audit trail
/// (`abort_refused`), and returns it.
async fn commit_abort_refused(
    tx: Tx,
    row: &LockedRequest,
    stage: Stage,
    abort: &AbortRequest,
) -> StoreResult<StoreError> {
    let refusal = StoreError::Request(RequestError::IrreversibleStarted {
        request_id: row.id,
        stage: stage.to_string(),
    });
    let detail = serde_json::json!({
        "reason": refusal.to_string(),
        "abort_reason": abort.reason,
        "stage": stage,
        "irreversible_at": row.irreversible_at,
    });
    commit_audited(tx, row.id, abort.actor.trim(), "abort_refused", &detail).await?;
    Ok(refusal)
}

/// The community whose fence `request_id` holds (quiescing or fenced), if any.
async fn held_fence(conn: &mut PgConnection, request_id: Uuid) -> StoreResult<Option<Uuid>> {
    Ok(sqlx::query_scalar(
        "SELECT community_id FROM deletion.community_fences \
         WHERE request_id = $1 AND state <> 'serving'",
    )
    .bind(request_id)
    .fetch_optional(conn)
    .await?)
}

/// Bumps the request's execution generation, so that any attempt still running is stale, and
/// clears its block; returns the new generation.
async fn restart_generation(conn: &mut PgConnection, request_id: Uuid) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(
        "UPDATE deletion.requests SET exec_generation = exec_generation + 1, \
         blocked_stage = NULL, blocked_reason = NULL, blocked_at = NULL, updated_at = now() \
         WHERE id = $1 RETURNING exec_generation",
    )
    .bind(request_id)
    .fetch_one(conn)
    .await?)
}
