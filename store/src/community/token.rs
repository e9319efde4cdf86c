//! Execution generations: the exclusion proof against zombie activity attempts.
//!
//! `claim` bumps the request's `exec_generation` under its row lock and hands the new value to
//! the attempt as an [`ExecToken`]. Every later write re-locks the row and compares generations,
//! so once a newer attempt has claimed the request, the older one is refused on its next write —
//! it can neither advance a stage, stamp a chunk nor reach an irreversible call unnoticed.

use crate::{FenceError, RequestError};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use super::evidence::{evidence_required, require_bound_evidence, require_token_community};
use super::requests::{REQUEST_COLUMNS, Request};
use super::stage::{Stage, stage_list};
use crate::Store;
use crate::claim::{RequestKind, claim_request};
use crate::error::{StoreError, StoreResult};
use crate::fences::FenceState;

/// A transaction of the store's pool.
pub(crate) type Tx = Transaction<'static, Postgres>;

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

/// The request row as the generation checks read it (normally under `FOR UPDATE`).
pub(crate) type LockedRequest = Request;

impl LockedRequest {
    /// The community of a community request (user requests have none).
    pub(crate) fn community(&self) -> StoreResult<Uuid> {
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

    /// The stage, parsed; refused ([`RequestError::WrongStage`]) for user-deletion stages.
    pub(crate) fn require_community_stage(&self) -> StoreResult<Stage> {
        self.community_stage().ok_or_else(|| {
            StoreError::Request(RequestError::WrongStage {
                request_id: self.id,
                expected: "a community stage".to_owned(),
                actual: self.stage.clone(),
            })
        })
    }

    /// Refuses before the irreversible point ([`RequestError::IrreversibleNotMarked`]): a
    /// destruction is recorded only once it is marked.
    pub(crate) fn require_irreversible_marked(&self) -> StoreResult<()> {
        match self.irreversible_at {
            Some(_) => Ok(()),
            None => Err(StoreError::Request(RequestError::IrreversibleNotMarked {
                request_id: self.id,
            })),
        }
    }

    /// Refuses unless the stage is one of `expected`.
    pub(crate) fn require_stage(&self, expected: &[Stage]) -> StoreResult<Stage> {
        let stage = self.require_community_stage()?;
        if expected.contains(&stage) {
            Ok(stage)
        } else {
            Err(StoreError::Request(RequestError::WrongStage {
                request_id: self.id,
                expected: stage_list(expected),
                actual: self.stage.clone(),
            }))
        }
    }
}

/// Locks the request row (`FOR UPDATE`) for the rest of the transaction.
pub(crate) async fn lock_request(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> StoreResult<LockedRequest> {
    select_request(conn, request_id, "FOR UPDATE").await
}

/// Reads the request row without locking it.
pub(crate) async fn read_request(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> StoreResult<LockedRequest> {
    select_request(conn, request_id, "").await
}

/// The request row, read with the row lock `lock` (`FOR UPDATE`, or none when empty), or
/// [`StoreError::NotFound`].
async fn select_request(
    conn: &mut PgConnection,
    request_id: Uuid,
    lock: &'static str,
) -> StoreResult<LockedRequest> {
    let sql = format!("SELECT {REQUEST_COLUMNS} FROM deletion.requests WHERE id = $1 {lock}");
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

/// Reads the request without locking it and refuses a stale `token`: the prelude of the
/// read-only generation checks.
pub(crate) async fn read_for_token(
    conn: &mut PgConnection,
    token: &ExecToken,
) -> StoreResult<LockedRequest> {
    let row = read_request(conn, token.request_id).await?;
    check_generation(&row, token)?;
    Ok(row)
}

/// Refuses a token whose generation is no longer the request's.
pub(crate) fn check_generation(row: &LockedRequest, token: &ExecToken) -> StoreResult<()> {
    if row.exec_generation == token.exec_generation {
        Ok(())
    } else {
        Err(StoreError::Request(RequestError::StaleGeneration {
            request_id: row.id,
            expected: token.exec_generation,
            actual: row.exec_generation,
        }))
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
    fence_held(row, fence)
}

/// Whether the community's fence, as read (`None`: no fence row, i.e. serving), is `fenced` at
/// the generation the request recorded; [`FenceError::NotHeld`] otherwise.
fn fence_held(row: &LockedRequest, fence: Option<(String, i64)>) -> StoreResult<()> {
    let community_id = row.community()?;
    let (state, generation) = fence.unwrap_or_else(|| (FenceState::Serving.as_str().to_owned(), 0));
    let held = state == FenceState::Fenced.as_str() && Some(generation) == row.fence_generation;
    if held {
        Ok(())
    } else {
        Err(StoreError::Fence(FenceError::NotHeld {
            request_id: row.id,
            community_id,
            expected_generation: row.fence_generation,
            state,
            generation,
        }))
    }
}

/// The request row with its community's fence, read in one statement (the delete loop's bracket
/// runs twice per DeleteObjects call).
#[derive(sqlx::FromRow)]
struct RequestAndFence {
    #[sqlx(flatten)]
    request: LockedRequest,
    fence_state: Option<String>,
    fence_generation_now: Option<i64>,
}

impl Store {
    /// Opens a transaction and locks the request row in it (`FOR UPDATE`, [`lock_request`]).
    pub(crate) async fn begin_locked(&self, request_id: Uuid) -> StoreResult<(Tx, LockedRequest)> {
        let mut tx = self.pool.begin().await?;
        let row = lock_request(&mut tx, request_id).await?;
        Ok((tx, row))
    }

    /// Opens a transaction and runs [`lock_for_token`] in it: the start of every
    /// generation-checked write.
    pub(crate) async fn begin_for_token(
        &self,
        token: &ExecToken,
        expected: &[Stage],
    ) -> StoreResult<(Tx, LockedRequest)> {
        let mut tx = self.pool.begin().await?;
        let row = lock_for_token(&mut tx, token, expected).await?;
        Ok((tx, row))
    }

    /// Claims the request for one activity attempt: under the row lock, checks the stage is one of
    /// `allowed`, the request is not blocked and, from approval on, that the approval and the
    /// frozen inventory are bound to the request row ([`ApprovalError::EvidenceMismatch`]
    /// otherwise); bumps `exec_generation` and returns the token every later write must present.
    /// Any older token is stale from this moment. A refused claim changes nothing.
    pub async fn claim(&self, request_id: Uuid, allowed: &[Stage]) -> StoreResult<ExecToken> {
        let (mut tx, row) = self.begin_locked(request_id).await?;
        let community_id = row.community()?;
        let stage = row.require_stage(allowed)?;
        if let Some(reason) = &row.blocked_reason {
            return Err(StoreError::Request(RequestError::Blocked {
                request_id,
                phase: row.blocked_stage.clone().unwrap_or_default(),
                reason: reason.clone(),
            }));
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
        read_for_token(&mut conn, token).await.map(|_| ())
    }

    /// Like [`Store::verify_token`], and also that the request is at `stage`.
    pub async fn verify_token_at(&self, token: &ExecToken, stage: Stage) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await?;
        let row = read_for_token(&mut conn, token).await?;
        row.require_stage(&[stage]).map(|_| ())
    }

    /// Checks the token is current, the evidence still bound to the request (from approval on)
    /// and the community `fenced` at the fence generation this request recorded (an abort's
    /// unfence, or any later fence change, makes this fail). Run when an activity claims the
    /// request and around the irreversible calls of the stages that make few of them; the delete
    /// loop's per-call bracket is [`Store::verify_fence_held`].
    pub async fn verify_fence(&self, token: &ExecToken) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await?;
        let row = read_for_token(&mut conn, token).await?;
        if evidence_required(row.require_community_stage()?) {
            require_token_community(&row, token)?;
            require_bound_evidence(&mut conn, &row).await?;
        }
        check_fence_held(&mut conn, &row).await
    }

    /// The bracket of each DeleteObjects call, before it is sent and after it is answered: the
    /// token is current, the row still names the token's community, and the community is
    /// `fenced` at the request's fence generation. Two reads, no document: the evidence binding
    /// (inventory, approval, digest) is re-proved by [`Store::verify_fence`] when the attempt
    /// claims the request and inside every chunk stamp's transaction, and no call deletes
    /// anything but the entries of a chunk the bound manifest holds.
    ///
    /// One statement: the row and its community's fence are read together, so a check costs one
    /// round trip (a single snapshot of both).
    pub async fn verify_fence_held(&self, token: &ExecToken) -> StoreResult<()> {
        let sql = format!(
            "SELECT {REQUEST_COLUMNS}, \
             (SELECT f.state FROM deletion.community_fences f \
              WHERE f.community_id = r.community_id) AS fence_state, \
             (SELECT f.generation FROM deletion.community_fences f \
              WHERE f.community_id = r.community_id) AS fence_generation_now \
             FROM deletion.requests r WHERE r.id = $1"
        );
        let read = sqlx::query_as::<_, RequestAndFence>(sqlx::AssertSqlSafe(sql))
            .bind(token.request_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| not_found(token.request_id))?;
        let row = read.request;
        check_generation(&row, token)?;
        require_token_community(&row, token)?;
        let fence = read.fence_state.zip(read.fence_generation_now);
        fence_held(&row, fence)
    }
}
