//! Fencing out the handler attempt a stopped run cancelled.

use serde_json::json;
use uuid::Uuid;
use workflows::user::stop::InterruptedStage;

use super::error::UserStoreError;
use super::{UserStore, UserStoreResult, commit_audited};
use crate::claim::{RequestKind, claim_request};

impl UserStore {
    /// Bumps request `request_id`'s execution generation under the request row lock, so the
    /// cancelled attempt on row `stage_id` can save nothing from now on, then reads whether it
    /// saved its result first. Records `user.run_stopped` in the audit trail. The row itself is
    /// not changed: it stays current for the next run.
    pub async fn interrupt_stage(
        &self,
        request_id: Uuid,
        stage_id: Uuid,
        requested_by: Option<&str>,
    ) -> UserStoreResult<InterruptedStage> {
        let mut tx = self.pool.begin().await?;
        let exec_generation = claim_request(&mut tx, request_id, RequestKind::User)
            .await?
            .ok_or(UserStoreError::UnknownRequest(request_id))?;
        let status: String = sqlx::query_scalar(
            "SELECT status FROM deletion.user_stage_history \
             WHERE id = $1 AND request_id = $2 AND is_current",
        )
        .bind(stage_id)
        .bind(request_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(UserStoreError::NotCurrent {
            request_id,
            stage_id,
        })?;
        let result_saved = status == "completed";
        let detail = json!({
            "stage_id": stage_id,
            "result_saved": result_saved,
            "exec_generation": exec_generation,
        });
        let actor = requested_by.unwrap_or("operator");
        commit_audited(tx, request_id, actor, "user.run_stopped", detail).await?;
        Ok(InterruptedStage {
            result_saved,
            exec_generation,
        })
    }
}
