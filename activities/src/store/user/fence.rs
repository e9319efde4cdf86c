//! The per-user write fence (migration 0012): serving → quiescing → fenced for one user's
//! deletion request, and back to serving when that request is aborted before its irreversible
//! point.
//!
//! The fence row lives in `deletion.user_fences`, keyed by the user's 64-hex pubkey. The
//! `buzz_user_data` trigger of every tenant relation holds the row `FOR SHARE` (creating it
//! `serving` when the user has none yet) before it lets a row naming the user be written, and
//! refuses it with SQLSTATE BZ006 once `fenced`; per-user serving-write leases hold it the same
//! way. [`Store::fence_user`] takes the row `FOR UPDATE` (after creating it the same way), so it
//! cannot commit past a write that passed the trigger and is still uncommitted: it waits for it
//! (up to `lock_timeout`, then fails transiently).
//!
//! Every change bumps `generation` and appends an audit event (`user.quiesced`, `user.fenced`,
//! `user.unfenced`) in the same transaction. Lock order: the request's audit chain (its request
//! row), then the fence row.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serving::{LiveServingWrites, ServingError, ServingWriteLease};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::store::community::audit::{WORKFLOW_ACTOR, insert_audit};
use crate::store::community::fence::FenceState;
use crate::store::community::leases::StalledServingWrites;
use crate::store::error::{StoreError, StoreResult};
use crate::store::{Store, count_u64};

/// How long quiescing, fencing or lifting waits for serving transactions holding the user's
/// fence row before giving up (transiently: SQLSTATE 55P03).
const USER_FENCE_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '5s'";

/// A user's fence row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserFenceStatus {
    /// The user's 64-hex pubkey.
    pub pubkey: String,
    /// Its state.
    pub state: FenceState,
    /// Bumped on every change.
    pub generation: i64,
    /// The request that last changed it (`None` for a row created by a serving write).
    pub request_id: Option<Uuid>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct UserFenceRow {
    pubkey: String,
    state: String,
    generation: i64,
    request_id: Option<Uuid>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<UserFenceRow> for UserFenceStatus {
    type Error = StoreError;

    fn try_from(row: UserFenceRow) -> StoreResult<Self> {
        Ok(UserFenceStatus {
            pubkey: row.pubkey,
            state: FenceState::parse(&row.state)?,
            generation: row.generation,
            request_id: row.request_id,
            updated_at: row.updated_at,
        })
    }
}

/// Refuses, before any SQL, a value that is not a user's pubkey: 64 lowercase hex digits, the
/// rule of [`serving::pubkey_problem`] (the relay's; the workflows crate keeps a copy, which
/// `crate::serving`'s tests hold to the same verdicts).
pub fn validate_user_pubkey(field: &'static str, pubkey: &str) -> StoreResult<()> {
    match serving::pubkey_problem(pubkey) {
        None => Ok(()),
        Some(problem) => Err(StoreError::InvalidInput {
            field,
            reason: format!("{pubkey:?} is not a 64-hex lowercase pubkey: {problem}"),
        }),
    }
}

/// Locks the request's audit chain first (its request row, or an advisory lock when there is
/// none), then the user's fence row `FOR UPDATE`, creating it `serving` if missing.
async fn lock_user_fence(
    conn: &mut PgConnection,
    request_id: Uuid,
    pubkey: &str,
) -> StoreResult<UserFenceStatus> {
    sqlx::query(USER_FENCE_LOCK_TIMEOUT)
        .execute(&mut *conn)
        .await?;
    let locked: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM deletion.requests WHERE id = $1 FOR UPDATE")
            .bind(request_id)
            .fetch_optional(&mut *conn)
            .await?;
    if locked.is_none() {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 15))")
            .bind(request_id)
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query(
        "INSERT INTO deletion.user_fences (pubkey, state, generation) \
         VALUES ($1, 'serving', 0) ON CONFLICT (pubkey) DO NOTHING",
    )
    .bind(pubkey)
    .execute(&mut *conn)
    .await?;
    let row = sqlx::query_as::<_, UserFenceRow>(
        "SELECT pubkey, state, generation, request_id, updated_at \
         FROM deletion.user_fences WHERE pubkey = $1 FOR UPDATE",
    )
    .bind(pubkey)
    .fetch_one(conn)
    .await?;
    row.try_into()
}

/// Sets the user's fence state for `request_id`, bumping the generation, and records `event`
/// in the request's audit trail; returns the new row.
async fn set_user_fence(
    conn: &mut PgConnection,
    request_id: Uuid,
    pubkey: &str,
    state: FenceState,
    event: &str,
) -> StoreResult<UserFenceStatus> {
    let row = sqlx::query_as::<_, UserFenceRow>(
        "UPDATE deletion.user_fences SET state = $2, generation = generation + 1, \
         request_id = $3, updated_at = now() WHERE pubkey = $1 \
         RETURNING pubkey, state, generation, request_id, updated_at",
    )
    .bind(pubkey)
    .bind(state.as_str())
    .bind(request_id)
    .fetch_one(&mut *conn)
    .await?;
    let status = UserFenceStatus::try_from(row)?;
    let detail = serde_json::json!({
        "pubkey": pubkey,
        "state": state,
        "fence_generation": status.generation,
    });
    insert_audit(conn, Some(request_id), WORKFLOW_ACTOR, event, &detail).await?;
    Ok(status)
}

/// Live user leases, read inside the caller's transaction through
/// `deletion.live_user_serving_writes`, the definition the serving side shares.
async fn live_user_serving_writes_in(
    conn: &mut PgConnection,
    pubkey: &str,
) -> StoreResult<LiveServingWrites> {
    let (count, operations): (i64, Vec<String>) =
        sqlx::query_as("SELECT live_count, operations FROM deletion.live_user_serving_writes($1)")
            .bind(pubkey)
            .fetch_one(conn)
            .await?;
    Ok(LiveServingWrites {
        count: count_u64(count),
        operations,
    })
}

/// The refusal of a fence held by another request.
fn held_by_other(status: &UserFenceStatus, request_id: Uuid) -> Option<StoreError> {
    match status.request_id {
        Some(holder) if status.state != FenceState::Serving && holder != request_id => {
            Some(StoreError::UserFenceHeld {
                pubkey: status.pubkey.clone(),
                request_id: holder,
            })
        }
        _ => None,
    }
}

impl Store {
    /// Opens the transaction of a fence change by `request_id`: the pubkey checked, the fence
    /// row locked (created `serving` if missing), and refused with [`StoreError::UserFenceHeld`]
    /// while another request holds it.
    async fn lock_fence_for(
        &self,
        request_id: Uuid,
        pubkey: &str,
    ) -> StoreResult<(sqlx::Transaction<'static, sqlx::Postgres>, UserFenceStatus)> {
        validate_user_pubkey("pubkey", pubkey)?;
        let mut tx = self.pool.begin().await?;
        let fence = lock_user_fence(&mut tx, request_id, pubkey).await?;
        match held_by_other(&fence, request_id) {
            Some(refusal) => Err(refusal),
            None => Ok((tx, fence)),
        }
    }

    /// The user's fence row, if they have one (a user who never wrote since migration 0012 and
    /// was never quiesced has none: they are served).
    pub async fn user_fence_status(&self, pubkey: &str) -> StoreResult<Option<UserFenceStatus>> {
        validate_user_pubkey("pubkey", pubkey)?;
        let row = sqlx::query_as::<_, UserFenceRow>(
            "SELECT pubkey, state, generation, request_id, updated_at \
             FROM deletion.user_fences WHERE pubkey = $1",
        )
        .bind(pubkey)
        .fetch_optional(&self.pool)
        .await?;
        row.map(UserFenceStatus::try_from).transpose()
    }

    /// Starts quiescing the user for `request_id`: new serving-write leases for them are refused
    /// from now on, while admitted ones may renew and finish (row writes still pass). Idempotent
    /// when this request already holds the fence quiescing or fenced; refused with
    /// [`StoreError::UserFenceHeld`] (permanent) while another request holds it.
    pub async fn quiesce_user(
        &self,
        request_id: Uuid,
        pubkey: &str,
    ) -> StoreResult<UserFenceStatus> {
        let (mut tx, fence) = self.lock_fence_for(request_id, pubkey).await?;
        if fence.state != FenceState::Serving {
            return Ok(fence);
        }
        let status = set_user_fence(
            &mut tx,
            request_id,
            pubkey,
            FenceState::Quiescing,
            "user.quiesced",
        )
        .await?;
        tx.commit().await?;
        Ok(status)
    }

    /// Fences the user for `request_id` once no serving write for them is live: every row write
    /// naming them (BZ006) and every lease for them is refused from now on. The fence row is
    /// taken `FOR UPDATE` under a 5 s `lock_timeout`, so a row write that passed the trigger and
    /// has not committed makes this wait, then fail transiently (SQLSTATE 55P03). Refused with
    /// [`StoreError::LiveUserServingWrites`] (transient) while a live user lease exists, with
    /// [`StoreError::UserNotQuiescing`] unless this request quiesced the user, and with
    /// [`StoreError::UserFenceHeld`] while another request holds the fence. Idempotent when this
    /// request already fenced the user.
    pub async fn fence_user(&self, request_id: Uuid, pubkey: &str) -> StoreResult<UserFenceStatus> {
        let (mut tx, fence) = self.lock_fence_for(request_id, pubkey).await?;
        match fence.state {
            FenceState::Fenced => return Ok(fence),
            FenceState::Serving => {
                return Err(StoreError::UserNotQuiescing {
                    pubkey: pubkey.to_owned(),
                    state: fence.state.to_string(),
                });
            }
            FenceState::Quiescing => {}
        }
        let live = live_user_serving_writes_in(&mut tx, pubkey).await?;
        if live.count > 0 {
            return Err(StoreError::LiveUserServingWrites {
                pubkey: pubkey.to_owned(),
                count: live.count,
                operations: live.operations,
            });
        }
        let status = set_user_fence(
            &mut tx,
            request_id,
            pubkey,
            FenceState::Fenced,
            "user.fenced",
        )
        .await?;
        tx.commit().await?;
        Ok(status)
    }

    /// Lifts the user's fence back to serving (an abort before the irreversible point): only the
    /// request holding it may ([`StoreError::UserFenceHeld`] otherwise); idempotent when the user
    /// is already served.
    pub async fn lift_user_fence(
        &self,
        request_id: Uuid,
        pubkey: &str,
    ) -> StoreResult<UserFenceStatus> {
        let (mut tx, fence) = self.lock_fence_for(request_id, pubkey).await?;
        if fence.state == FenceState::Serving {
            tx.commit().await?;
            return Ok(fence);
        }
        let status = set_user_fence(
            &mut tx,
            request_id,
            pubkey,
            FenceState::Serving,
            "user.unfenced",
        )
        .await?;
        tx.commit().await?;
        Ok(status)
    }

    /// Unreleased, unexpired leases for the user, in any community, and their operations.
    pub async fn live_user_serving_writes(&self, pubkey: &str) -> StoreResult<LiveServingWrites> {
        validate_user_pubkey("pubkey", pubkey)?;
        let mut conn = self.pool.acquire().await?;
        live_user_serving_writes_in(&mut conn, pubkey).await
    }

    /// The drain gate of a user deletion: refuses with [`StoreError::StalledUserServingWrites`]
    /// (transient) while a lease for the user left unreleased at fence time (the fence row's
    /// `updated_at`) is still inside `expires_at + bound`; `bound` is
    /// [`crate::serving::MAX_PROTECTED_OPERATION`] in production. A user without a fence row has
    /// no stalled writes.
    pub async fn require_no_stalled_user_serving_writes(
        &self,
        pubkey: &str,
        bound: Duration,
    ) -> StoreResult<StalledServingWrites> {
        validate_user_pubkey("pubkey", pubkey)?;
        let (count, operations, until, now): (
            i64,
            Vec<String>,
            Option<DateTime<Utc>>,
            DateTime<Utc>,
        ) = sqlx::query_as(
            "SELECT count(l.id), \
                    coalesce(array_agg(DISTINCT l.operation ORDER BY l.operation) \
                             FILTER (WHERE l.id IS NOT NULL), '{}'), \
                    max(l.expires_at) + make_interval(secs => $2), clock_timestamp() \
             FROM deletion.user_fences f \
             LEFT JOIN deletion.serving_write_leases l \
               ON l.user_pubkey = f.pubkey \
              AND (l.released_at IS NULL OR l.released_at > f.updated_at) \
              AND l.expires_at + make_interval(secs => $2) > clock_timestamp() \
             WHERE f.pubkey = $1",
        )
        .bind(pubkey)
        .bind(bound.as_secs_f64())
        .fetch_optional(&self.pool)
        .await?
        .unwrap_or((0, Vec::new(), None, Utc::now()));
        let stalled = StalledServingWrites {
            count: count_u64(count),
            operations,
            until,
            now,
        };
        match stalled.until {
            Some(until) if stalled.count > 0 => Err(StoreError::StalledUserServingWrites {
                pubkey: pubkey.to_owned(),
                count: stalled.count,
                until,
            }),
            _ => Ok(stalled),
        }
    }

    /// [`serving::ServingDb::acquire_user_serving_write_lease`] on this store's pool.
    pub async fn acquire_user_serving_write_lease(
        &self,
        community_id: Uuid,
        pubkey: &str,
        operation: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<ServingWriteLease, ServingError> {
        self.serving()
            .acquire_user_serving_write_lease(community_id, pubkey, operation, owner, ttl)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_64_lowercase_hex_is_a_pubkey() {
        assert!(validate_user_pubkey("pubkey", &"0a".repeat(32)).is_ok());
        for bad in [
            String::new(),
            "0a".repeat(31),
            "0A".repeat(32),
            format!("{}g", "0".repeat(63)),
            format!("{}'", "0".repeat(63)),
            "0a".repeat(33),
        ] {
            assert!(
                matches!(
                    validate_user_pubkey("pubkey", &bad),
                    Err(StoreError::InvalidInput {
                        field: "pubkey",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }
}
