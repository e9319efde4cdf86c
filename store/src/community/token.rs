//! Execution generations: the exclusion proof against zombie activity attempts.
//!
//! `claim` bumps the request's `exec_generation` under its row lock and hands the new value to
//! the attempt as an [`ExecToken`]. Every later write re-locks the row and compares generations,
//! so once a newer attempt has claimed the request, the older one is refused on its next write —
//! it can neither advance a stage, stamp a chunk nor reach an irreversible call unnoticed.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

use super::evidence::{evidence_required, require_bound_evidence, require_token_community};
use super::stage::{Stage, stage_list};
use crate::Store;
use crate::claim::{RequestKind, claim_request};
use crate::error::{StoreError, StoreResult};
use crate::fences::FenceState;

/// Proof that an activity attempt is the latest to have claimed a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecToken {
    /// The request claimed.
    pub request_id: Uuid,
    /// Its community.
    pub community_id: Uuid,
    /// The stage at the time of the claim (writes name the stage they expect themselves).
    pub stage: Stage,
    /// The execution generation this attempt owns.
    pub exec_generation: i64,
    /// The fence generation recorded on the request, once it fenced.
    pub fence_generation: Option<i64>,
}

/// The request row as the generation checks need it, read under `FOR UPDATE`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct LockedRequest {
    pub id: Uuid,
    pub kind: String,
    pub community_id: Option<Uuid>,
    pub host: Option<String>,
    pub stage: String,
    pub exec_generation: i64,
    pub fence_generation: Option<i64>,
    pub irreversible_at: Option<DateTime<Utc>>,
    pub irreversible_pending_at: Option<DateTime<Utc>>,
    pub blocked_stage: Option<String>,
    pub blocked_reason: Option<String>,
    pub inventory_digest: Option<String>,
}

impl LockedRequest {
    /// The community of a community request (user requests have none).
    pub fn community(&self) -> StoreResult<Uuid> {
        match (self.kind.as_str(), self.community_id) {
            ("community", Some(community_id)) => Ok(community_id),
            _ => Err(StoreError::InvalidInput {
                field: "request_id",
                reason: format!(
                    "request {} is a {} request, not a community one",
                    self.id, self.kind
                ),
            }),
        }
    }

    /// The stage, parsed (fails for user-deletion stages).
    pub fn community_stage(&self) -> StoreResult<Stage> {
        self.stage.parse().map_err(|_| StoreError::WrongStage {
            request_id: self.id,
            expected: "a community stage".to_owned(),
            actual: self.stage.clone(),
        })
    }

    /// Refuses unless the stage is one of `expected`.
    pub fn require_stage(&self, expected: &[Stage]) -> StoreResult<Stage> {
        let stage = self.community_stage()?;
        if expected.contains(&stage) {
            Ok(stage)
        } else {
            Err(StoreError::WrongStage {
                request_id: self.id,
                expected: stage_list(expected),
                actual: self.stage.clone(),
            })
        }
    }
}

const LOCKED_REQUEST_COLUMNS: &str = "id, kind, community_id, host, stage, exec_generation, \
     fence_generation, irreversible_at, irreversible_pending_at, blocked_stage, blocked_reason, \
     inventory_digest";

/// Locks the request row (`FOR UPDATE`) for the rest of the transaction.
pub(crate) async fn lock_request(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> StoreResult<LockedRequest> {
    let sql =
        format!("SELECT {LOCKED_REQUEST_COLUMNS} FROM deletion.requests WHERE id = $1 FOR UPDATE");
    sqlx::query_as::<_, LockedRequest>(sqlx::AssertSqlSafe(sql))
        .bind(request_id)
        .fetch_optional(conn)
        .await?
        .ok_or_else(|| not_found(request_id))
}

/// Reads the request row without locking it.
pub(crate) async fn read_request(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> StoreResult<LockedRequest> {
    let sql = format!("SELECT {LOCKED_REQUEST_COLUMNS} FROM deletion.requests WHERE id = $1");
    sqlx::query_as::<_, LockedRequest>(sqlx::AssertSqlSafe(sql))
        .bind(request_id)
        .fetch_optional(conn)
        .await?
        .ok_or_else(|| not_found(request_id))
}

fn not_found(request_id: Uuid) -> StoreError {
    StoreError::NotFound {
        what: "deletion request",
        id: request_id.to_string(),
    }
}

/// Refuses a token whose generation is no longer the request's.
pub(crate) fn check_generation(row: &LockedRequest, token: &ExecToken) -> StoreResult<()> {
    if row.exec_generation == token.exec_generation {
        Ok(())
    } else {
        Err(StoreError::StaleGeneration {
            request_id: row.id,
            expected: token.exec_generation,
            actual: row.exec_generation,
        })
    }
}

/// Locks the request and checks the token's generation, the expected stage and, from approval
/// on, that the token's community is the row's and the evidence is bound to the request (see
/// `evidence`): the prelude of every generation-checked write.
pub(crate) async fn lock_for_token(
    conn: &mut PgConnection,
    token: &ExecToken,
    expected: &[Stage],
) -> StoreResult<LockedRequest> {
    let row = lock_request(conn, token.request_id).await?;
    check_generation(&row, token)?;
    let stage = row.require_stage(expected)?;
    if evidence_required(stage) {
        require_token_community(&row, token)?;
        require_bound_evidence(conn, &row).await?;
    }
    Ok(row)
}

/// Refuses unless the community's fence is `fenced` at the generation this request recorded.
pub(crate) async fn check_fence_held(
    conn: &mut PgConnection,
    row: &LockedRequest,
) -> StoreResult<()> {
    let community_id = row.community()?;
    let fence: Option<(String, i64)> = sqlx::query_as(
        "SELECT state, generation FROM deletion.community_fences WHERE community_id = $1",
    )
    .bind(community_id)
    .fetch_optional(conn)
    .await?;
    let (state, generation) = fence.unwrap_or_else(|| (FenceState::Serving.as_str().to_owned(), 0));
    let held = state == FenceState::Fenced.as_str() && Some(generation) == row.fence_generation;
    if held {
        Ok(())
    } else {
        Err(StoreError::FenceNotHeld {
            request_id: row.id,
            community_id,
            expected_generation: row.fence_generation,
            state,
            generation,
        })
    }
}

impl Store {
    /// Claims the request for one activity attempt: under the row lock, checks the stage is one of
    /// `allowed`, the request is not blocked and, from approval on, that the approval and the
    /// frozen inventory are bound to the request row ([`StoreError::EvidenceMismatch`]
    /// otherwise); bumps `exec_generation` and returns the token every later write must present.
    /// Any older token is stale from this moment. A refused claim changes nothing.
    pub async fn claim(&self, request_id: Uuid, allowed: &[Stage]) -> StoreResult<ExecToken> {
        let mut tx = self.pool.begin().await?;
        let row = lock_request(&mut tx, request_id).await?;
        let community_id = row.community()?;
        let stage = row.require_stage(allowed)?;
        if let Some(reason) = &row.blocked_reason {
            return Err(StoreError::Blocked {
                request_id,
                phase: row.blocked_stage.clone().unwrap_or_default(),
                reason: reason.clone(),
            });
        }
        if evidence_required(stage) {
            require_bound_evidence(&mut tx, &row).await?;
        }
        let exec_generation = claim_request(&mut tx, request_id, RequestKind::Community)
            .await?
            .ok_or_else(|| not_found(request_id))?;
        tx.commit().await?;
        Ok(ExecToken {
            request_id,
            community_id,
            stage,
            exec_generation,
            fence_generation: row.fence_generation,
        })
    }

    /// Read-only check that the token is still the request's current generation; used right
    /// before and after an irreversible external call.
    pub async fn verify_token(&self, token: &ExecToken) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await?;
        let row = read_request(&mut conn, token.request_id).await?;
        check_generation(&row, token)
    }

    /// Like [`Store::verify_token`], and also that the request is at `stage`.
    pub async fn verify_token_at(&self, token: &ExecToken, stage: Stage) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await?;
        let row = read_request(&mut conn, token.request_id).await?;
        check_generation(&row, token)?;
        row.require_stage(&[stage]).map(|_| ())
    }

    /// Checks the token is current, the evidence still bound to the request (from approval on)
    /// and the community `fenced` at the fence generation this request recorded (an abort's
    /// unfence, or any later fence change, makes this fail). Brackets every irreversible call.
    pub async fn verify_fence(&self, token: &ExecToken) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await?;
        let row = read_request(&mut conn, token.request_id).await?;
        check_generation(&row, token)?;
        if evidence_required(row.community_stage()?) {
            require_token_community(&row, token)?;
            require_bound_evidence(&mut conn, &row).await?;
        }
        check_fence_held(&mut conn, &row).await
    }
}
