//! `user list`: user-deletion requests by state, newest first, from Postgres alone.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{UserStore, UserStoreResult};
use crate::RequestFilter;

/// Most rows one `user list` returns (its `--limit` is clamped to this).
pub const MAX_LIST_ROWS: u32 = 1_000;

/// What `user list` reads of a request: a [`UserRequestSummary`].
const SUMMARY_SELECT: &str = "SELECT r.id, r.target, r.stage, r.requested_by, a.approved_by, \
            r.inventory_digest, \
            (SELECT count(*) FROM deletion.user_stage_history h \
              WHERE h.request_id = r.id) AS stage_rows, \
            cur.stage AS current_stage, cur.community_id AS current_community, \
            r.retry_count, r.next_attempt_at, r.blocked_reason, r.last_error, \
            r.created_at, r.completed_at \
     FROM deletion.requests r \
     LEFT JOIN deletion.approvals a ON a.request_id = r.id \
     LEFT JOIN deletion.user_stage_history cur \
            ON cur.request_id = r.id AND cur.is_current";

/// One line of `user list`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct UserRequestSummary {
    /// Request id.
    pub id: Uuid,
    /// The user (`demo:…`).
    pub target: Option<String>,
    /// Lifecycle: inventoried, approved, running, retry_wait, completed, aborted.
    pub stage: String,
    /// Who asked.
    pub requested_by: String,
    /// Who approved, once approved.
    pub approved_by: Option<String>,
    /// The frozen digest.
    pub inventory_digest: Option<String>,
    /// Stage rows reached so far.
    pub stage_rows: i64,
    /// The current row's stage, if a row is current.
    pub current_stage: Option<String>,
    /// The current row's community.
    pub current_community: Option<Uuid>,
    /// Failed handler attempts since the last successful transition.
    pub retry_count: i32,
    /// The saved retry deadline.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Why the last run was blocked (cleared by the next successful transition).
    pub blocked_reason: Option<String>,
    /// The last handler failure or blocking reason.
    pub last_error: Option<String>,
    /// Submission time.
    pub created_at: DateTime<Utc>,
    /// Completion time.
    pub completed_at: Option<DateTime<Utc>>,
}

impl UserStore {
    /// User-deletion requests matching `filter`, newest first (then by id), at most `limit`
    /// (1 to [`MAX_LIST_ROWS`]). The same states as `community list`: open (not completed),
    /// blocked (a run stopped on a broken invariant and nothing has succeeded since), completed.
    pub async fn list_requests(
        &self,
        filter: RequestFilter,
        limit: u32,
    ) -> UserStoreResult<Vec<UserRequestSummary>> {
        let limit = limit.clamp(1, MAX_LIST_ROWS);
        Ok(filter
            .list(&self.pool, SUMMARY_SELECT, "user", limit)
            .await?)
    }
}
