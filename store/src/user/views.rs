//! Read-only views of a user deletion: the request row, its approval and its stage rows, as the
//! CLI prints them and as the workflow's policy reads them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;
use workflows::user::policy::MAX_STAGES;
use workflows::user::{ProgressSnapshot, RetryState, StageRecord, UserApprovalRecord};

use super::error::UserStoreError;
use super::{StoredApproval, UserStore, UserStoreResult, retry_state};

/// The request row of a user deletion.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct UserRequestView {
    /// Request id.
    pub id: Uuid,
    /// The user (`demo:…`).
    pub target: Option<String>,
    /// The workflow driving it.
    pub workflow_id: String,
    /// Who asked.
    pub requested_by: String,
    /// Why.
    pub reason: Option<String>,
    /// Lifecycle: inventoried, approved, running, retry_wait, completed, aborted.
    pub stage: String,
    /// The frozen inventory.
    pub inventory: Option<serde_json::Value>,
    /// Its digest.
    pub inventory_digest: Option<String>,
    /// Bumped by every handler attempt and transition.
    pub exec_generation: i64,
    /// Failed handler attempts since the last successful transition.
    pub retry_count: i32,
    /// The saved retry deadline.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The last handler failure or blocking reason.
    pub last_error: Option<String>,
    /// Submission time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Completion time.
    pub completed_at: Option<DateTime<Utc>>,
}

impl UserRequestView {
    /// The saved retry state, while a deadline is set.
    pub fn retry(&self) -> Option<RetryState> {
        self.next_attempt_at
            .map(|at| retry_state(self.retry_count, at))
    }
}

/// One row of `deletion.user_stage_history`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct StageRowView {
    /// Row id.
    pub id: Uuid,
    /// Stage name.
    pub stage: String,
    /// Community of a per-community stage.
    pub community_id: Option<Uuid>,
    /// pending, running, completed or failed.
    pub status: String,
    /// Whether the row is the request's durable position.
    pub is_current: bool,
    /// Handler starts.
    pub attempt: i32,
    /// Generation of the attempt that last started the handler.
    pub exec_generation: Option<i64>,
    /// Label of the run that last started it.
    pub executor_id: Option<String>,
    /// Insertion time.
    pub created_at: DateTime<Utc>,
    /// First handler start (kept across retries).
    pub first_started_at: Option<DateTime<Utc>>,
    /// Latest handler start.
    pub started_at: Option<DateTime<Utc>>,
    /// Latest handler end.
    pub finished_at: Option<DateTime<Utc>>,
    /// Inputs saved at creation.
    pub inputs: serde_json::Value,
    /// Saved handler result.
    pub result: Option<serde_json::Value>,
    /// Saved transition decision.
    pub transition: Option<serde_json::Value>,
    /// Predecessor row.
    pub previous_stage_id: Option<Uuid>,
    /// Last handler failure.
    pub last_error: Option<String>,
    /// Token of the workflow run whose attempt last started the handler (migration 0009).
    pub handler_run_token: Option<String>,
}

impl StageRowView {
    /// The row as the policy reads it.
    pub fn to_record(&self) -> UserStoreResult<StageRecord> {
        Ok(StageRecord {
            id: self.id,
            stage: self.stage.clone(),
            community_id: self.community_id,
            status: self
                .status
                .parse()
                .map_err(|e| UserStoreError::CorruptRow(format!("stage row {}: {e}", self.id)))?,
            is_current: self.is_current,
            attempt: u32::try_from(self.attempt).unwrap_or(0),
            inputs: self.inputs.clone(),
            result: self.result.clone(),
            transition: self.transition.clone(),
            previous_stage_id: self.previous_stage_id,
        })
    }
}

/// The column list of [`StageRowView`], shared by every statement that returns stage rows.
macro_rules! stage_columns {
    () => {
        "id, stage, community_id, status, is_current, attempt, exec_generation, executor_id, \
         created_at, first_started_at, started_at, finished_at, inputs, result, transition, \
         previous_stage_id, last_error, handler_run_token"
    };
}
pub(super) use stage_columns;

/// `SELECT` of the stage columns from the stage history under `condition` (a string literal
/// starting after `WHERE`), as one literal.
macro_rules! select_stage_rows {
    ($condition:literal) => {
        concat!(
            "SELECT ",
            stage_columns!(),
            " FROM deletion.user_stage_history WHERE ",
            $condition
        )
    };
}
pub(super) use select_stage_rows;

impl UserStore {
    /// The user-deletion request `id`, if it exists.
    pub async fn request_view(&self, id: Uuid) -> UserStoreResult<Option<UserRequestView>> {
        Ok(sqlx::query_as::<_, UserRequestView>(
            "SELECT id, target, workflow_id, requested_by, reason, stage, inventory, \
                    inventory_digest, exec_generation, retry_count, next_attempt_at, last_error, \
                    created_at, updated_at, completed_at \
             FROM deletion.requests WHERE id = $1 AND kind = 'user'",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The approval evidence of request `id`, if approved.
    pub async fn approval(&self, id: Uuid) -> UserStoreResult<Option<UserApprovalRecord>> {
        let mut conn = self.pool.acquire().await?;
        let approval = StoredApproval::of(&mut conn, id).await?;
        Ok(approval.map(|approval| approval.record(None)))
    }

    /// Every stage row of request `id`, in insertion order. Insertion order is for display only;
    /// progress is read by following `previous_stage_id`. The read is bounded: it fetches at
    /// most [`MAX_STAGES`] + 1 rows and refuses ([`UserStoreError::TooManyStages`]) when the
    /// history is longer than reconstruction may read.
    pub async fn stage_rows(&self, id: Uuid) -> UserStoreResult<Vec<StageRowView>> {
        let rows = sqlx::query_as::<_, StageRowView>(select_stage_rows!(
            "request_id = $1 ORDER BY created_at, id LIMIT $2"
        ))
        .bind(id)
        .bind(MAX_STAGES as i64 + 1)
        .fetch_all(&self.pool)
        .await?;
        if rows.len() > MAX_STAGES {
            return Err(UserStoreError::TooManyStages { request_id: id });
        }
        Ok(rows)
    }

    /// The request's lifecycle, retry state and stage history, as the workflow's policy reads it.
    pub async fn load_progress(&self, id: Uuid) -> UserStoreResult<ProgressSnapshot> {
        let request = self
            .request_view(id)
            .await?
            .ok_or(UserStoreError::UnknownRequest(id))?;
        let stages = self
            .stage_rows(id)
            .await?
            .iter()
            .map(StageRowView::to_record)
            .collect::<UserStoreResult<Vec<_>>>()?;
        Ok(ProgressSnapshot {
            retry: request.retry(),
            request_stage: request.stage,
            stages,
        })
    }
}
