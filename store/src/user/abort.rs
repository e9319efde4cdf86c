//! Aborting a user deletion before its irreversible point: the first start of a `purge_db` or
//! `purge_agents` handler. Until then nothing of the user was deleted (the gate only fences), so
//! the request may end and the user's write fence is lifted: the user writes again.

use serde_json::json;
use uuid::Uuid;
use workflows::operator::Action;
use workflows::user::{UserAbortInput, UserAbortRecord, real_user_pubkey};

use super::error::UserStoreError;
use super::{UserStore, UserStoreResult, consume_user_action, update_request_audited};
use crate::Store;

impl UserStore {
    /// Aborts the request: verifies and consumes the signed `abort` statement, refuses once a
    /// purge handler started ([`UserStoreError::IrreversibleStarted`]) or while a handler is
    /// marked running ([`UserStoreError::HandlerRunning`]), marks the request `aborted` with an
    /// audit event, then lifts the user's write fence if this request holds it. A repeat on an
    /// aborted request only lifts the fence again (idempotent).
    pub async fn abort(
        &self,
        input: &UserAbortInput,
        consumer: &str,
    ) -> UserStoreResult<UserAbortRecord> {
        let request_id = input.request_id;
        let mut tx = self.pool.begin().await?;
        let (stage, target): (String, Option<String>) = sqlx::query_as(
            "SELECT stage, target FROM deletion.requests WHERE id = $1 AND kind = 'user' FOR UPDATE",
        )
        .bind(request_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(UserStoreError::UnknownRequest(request_id))?;
        let target = target.unwrap_or_default();
        if stage != "aborted" {
            refuse_abort(&mut tx, request_id, stage).await?;
            let consumed = consume_user_action(
                &mut tx,
                Action::Abort,
                request_id,
                &target,
                input.abort.signed.as_ref(),
                &input.abort.requested_by,
                consumer,
            )
            .await?;
            update_request_audited(
                &mut tx,
                "UPDATE deletion.requests SET stage = 'aborted', updated_at = now() WHERE id = $1",
                request_id,
                &consumed.name,
                "user.aborted",
                json!({"reason": input.abort.reason, "fingerprint": consumed.fingerprint}),
            )
            .await?;
        }
        tx.commit().await?;
        let fence_lifted = match real_user_pubkey(&target) {
            Some(pubkey) => self.lift_fence_if_held(request_id, pubkey).await?,
            None => false,
        };
        Ok(UserAbortRecord {
            request_id,
            aborted_by: input.abort.requested_by.clone(),
            reason: input.abort.reason.clone(),
            fence_lifted,
        })
    }

    /// Lifts the user's fence when this request holds it; true when it was quiescing or fenced.
    async fn lift_fence_if_held(&self, request_id: Uuid, pubkey: &str) -> UserStoreResult<bool> {
        let store = Store::from_pool(self.pool.clone());
        let held = store.user_fence_status(pubkey).await?.is_some_and(|f| {
            f.request_id == Some(request_id) && f.state != crate::FenceState::Serving
        });
        if held {
            store.lift_user_fence(request_id, pubkey).await?;
        }
        Ok(held)
    }
}

/// Refuses to abort a completed request, one past its irreversible point (a purge handler
/// started), or one whose current handler is marked running.
async fn refuse_abort(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    request_id: Uuid,
    stage: String,
) -> UserStoreResult<()> {
    if stage == "completed" {
        return Err(UserStoreError::WrongRequestStage {
            request_id,
            expected: "not completed",
            actual: stage,
        });
    }
    let started: Option<(Uuid, String)> = sqlx::query_as(
        "SELECT id, stage FROM deletion.user_stage_history \
         WHERE request_id = $1 AND stage IN ('purge_db', 'purge_agents') AND attempt > 0 \
         ORDER BY created_at LIMIT 1",
    )
    .bind(request_id)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some((stage_id, stage)) = started {
        return Err(UserStoreError::IrreversibleStarted {
            request_id,
            stage_id,
            stage,
        });
    }
    let running: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM deletion.user_stage_history \
         WHERE request_id = $1 AND is_current AND status = 'running'",
    )
    .bind(request_id)
    .fetch_optional(&mut **tx)
    .await?;
    match running {
        Some(stage_id) => Err(UserStoreError::HandlerRunning {
            request_id,
            stage_id,
        }),
        None => Ok(()),
    }
}
