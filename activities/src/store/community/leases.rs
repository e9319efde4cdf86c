//! Serving-write leases: the durable proof that no external serving write (S3 put, Redis write,
//! push) is in flight when a community is fenced.
//!
//! Rules:
//! - acquisition is refused once the community is quiescing or fenced;
//! - renewal is allowed while serving or quiescing (an admitted write may finish) and refused
//!   once the lease was released, expired, or the community is fenced;
//! - a lease counts as live only while unreleased and unexpired, so a crashed serving process
//!   holds the fence back for at most one TTL;
//! - release matches on id *and* owner: nobody releases a lease that is not theirs;
//! - a lease still unreleased when the community was fenced is *stalled*: its writer may still be
//!   running, so the manifest is frozen only once the database clock is past its `expires_at`
//!   plus the protected-operation bound ([`crate::serving::MAX_PROTECTED_OPERATION`]); a release
//!   after the fence proves nothing (the write may have landed just before it) and does not end
//!   the wait. Reaping never removes a row still inside that bound.
//!
//! Time is the database's `clock_timestamp()`, never a client clock.
//!
//! Every write goes through a SECURITY DEFINER function of migration 0007 (owned by the schema
//! owner): the serving role holds no privilege on `deletion.serving_write_leases` itself, so a
//! relay can only acquire, renew, verify, release and reap leases by these rules.
//!
//! The relay's side (acquire, renew, verify, release, the live count) is the `serving` crate's
//! [`serving::ServingDb`]; the `Store` methods of the same names call it on the store's pool.
//! What stays here is the worker's side: stalled and awaited leases, and reaping.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serving::{LiveServingWrites, ServingError, ServingWriteLease};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::store::error::StoreResult;
use crate::store::{Store, StoreError, count_u64};

/// A serving-write lease the community's fence or drain is waiting for, as `community status`
/// names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct AwaitedLease {
    /// Lease id.
    pub id: Uuid,
    /// What the write is.
    pub operation: String,
    /// The serving process holding it.
    pub owner: String,
    /// The user the write is made for, if a per-user lease.
    pub user_pubkey: Option<String>,
    /// When it was acquired.
    pub acquired_at: DateTime<Utc>,
    /// When it lapses unless renewed.
    pub expires_at: DateTime<Utc>,
    /// When it was released (after the fence: proves nothing, the drain still waits).
    pub released_at: Option<DateTime<Utc>>,
    /// `fence` (a live lease holds the fence back) or `drain` (left unreleased at fence time:
    /// the manifest is frozen only after its writer's window).
    pub holds: String,
    /// When it stops holding, by the database clock, unless renewed: `expires_at` for the
    /// fence, `expires_at` + the protected-operation bound for the drain.
    pub until: DateTime<Utc>,
}

/// Live serving writes of the community, read inside the caller's transaction through
/// `deletion.live_serving_writes` (migration 0007), the one definition of a live lease that the
/// worker's fence and the serving side share ([`serving::live_serving_writes_in`]).
pub(crate) async fn live_serving_writes_in(
    conn: &mut PgConnection,
    community_id: Uuid,
) -> StoreResult<LiveServingWrites> {
    Ok(serving::live_serving_writes_in(conn, community_id).await?)
}

/// Leases of a fenced community left unreleased at fence time whose writers may still be running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StalledServingWrites {
    /// Leases unreleased at fence time and not yet past `expires_at + bound`.
    pub count: u64,
    /// Their operations, deduplicated and sorted.
    pub operations: Vec<String>,
    /// When the last of them leaves its bound (database clock); `None` when `count` is 0.
    pub until: Option<DateTime<Utc>>,
    /// The database clock when this was read.
    pub now: DateTime<Utc>,
}

/// Stalled serving writes of the community, read inside the caller's transaction: leases whose
/// `released_at` is empty or later than the fence's last change, and whose `expires_at + bound`
/// is still ahead of `clock_timestamp()`. The fence's `updated_at` is the start of the fencing
/// transaction, so a lease released while it ran counts as unreleased: the error is on the safe
/// side.
pub(crate) async fn stalled_serving_writes_in(
    conn: &mut PgConnection,
    community_id: Uuid,
    bound: Duration,
) -> StoreResult<StalledServingWrites> {
    let (count, operations, until, now): (i64, Vec<String>, Option<DateTime<Utc>>, DateTime<Utc>) =
        sqlx::query_as(
            "SELECT count(l.id),                     coalesce(array_agg(DISTINCT l.operation ORDER BY l.operation)                              FILTER (WHERE l.id IS NOT NULL), '{}'),                     max(l.expires_at) + make_interval(secs => $2), clock_timestamp()              FROM deletion.community_fences f              LEFT JOIN deletion.serving_write_leases l                ON l.community_id = f.community_id               AND (l.released_at IS NULL OR l.released_at > f.updated_at)               AND l.expires_at + make_interval(secs => $2) > clock_timestamp()              WHERE f.community_id = $1",
        )
        .bind(community_id)
        .bind(bound.as_secs_f64())
        .fetch_optional(conn)
        .await?
        .unwrap_or((0, Vec::new(), None, Utc::now()));
    Ok(StalledServingWrites {
        count: count_u64(count),
        operations,
        until,
        now,
    })
}

impl Store {
    /// [`serving::ServingDb::acquire_serving_write_lease`] on this store's pool.
    pub async fn acquire_serving_write_lease(
        &self,
        community_id: Uuid,
        operation: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<ServingWriteLease, ServingError> {
        self.serving()
            .acquire_serving_write_lease(community_id, operation, owner, ttl)
            .await
    }

    /// [`serving::ServingDb::renew_serving_write_lease`] on this store's pool.
    pub async fn renew_serving_write_lease(
        &self,
        lease: &ServingWriteLease,
        ttl: Duration,
    ) -> Result<DateTime<Utc>, ServingError> {
        self.serving().renew_serving_write_lease(lease, ttl).await
    }

    /// [`serving::ServingDb::verify_serving_write_lease`] on this store's pool.
    pub async fn verify_serving_write_lease(
        &self,
        lease: &ServingWriteLease,
    ) -> Result<(), ServingError> {
        self.serving().verify_serving_write_lease(lease).await
    }

    /// [`serving::ServingDb::release_serving_write_lease`] on this store's pool.
    pub async fn release_serving_write_lease(
        &self,
        lease: &ServingWriteLease,
    ) -> Result<bool, ServingError> {
        self.serving().release_serving_write_lease(lease).await
    }

    /// Unreleased, unexpired leases of the community and their operations.
    /// Callable by the worker and the serving role alike (SECURITY DEFINER function).
    pub async fn live_serving_writes(&self, community_id: Uuid) -> StoreResult<LiveServingWrites> {
        let mut conn = self.pool.acquire().await?;
        live_serving_writes_in(&mut conn, community_id).await
    }

    /// Stalled serving writes of the community (see [`StalledServingWrites`]): what the drain
    /// waits for before the manifest may be frozen. `bound` is the protected-operation bound
    /// ([`crate::serving::MAX_PROTECTED_OPERATION`] in production).
    pub async fn stalled_serving_writes(
        &self,
        community_id: Uuid,
        bound: Duration,
    ) -> StoreResult<StalledServingWrites> {
        let mut conn = self.pool.acquire().await?;
        stalled_serving_writes_in(&mut conn, community_id, bound).await
    }

    /// Refuses with [`StoreError::StalledServingWrites`] (transient) while a lease left
    /// unreleased at fence time is inside `expires_at + bound`; the gate in front of freezing the
    /// manifest.
    pub async fn require_no_stalled_serving_writes(
        &self,
        community_id: Uuid,
        bound: Duration,
    ) -> StoreResult<StalledServingWrites> {
        let stalled = self.stalled_serving_writes(community_id, bound).await?;
        match stalled.until {
            Some(until) if stalled.count > 0 => Err(StoreError::StalledServingWrites {
                community_id,
                count: stalled.count,
                until,
            }),
            _ => Ok(stalled),
        }
    }

    /// The leases the community's fence (before it is fenced: live ones) or drain (once fenced:
    /// those left unreleased at fence time, inside `expires_at + bound`) is waiting for, soonest
    /// to stop holding first, at most `limit`. The same rules as [`Self::live_serving_writes`]
    /// and [`Self::stalled_serving_writes`], one row per lease so that an operator can find its
    /// writer.
    pub async fn awaited_serving_leases(
        &self,
        community_id: Uuid,
        bound: Duration,
        limit: u32,
    ) -> StoreResult<Vec<AwaitedLease>> {
        let leases = sqlx::query_as::<_, AwaitedLease>(
            "SELECT l.id, l.operation, l.owner, l.user_pubkey, l.acquired_at, l.expires_at, \
                    l.released_at, \
                    CASE WHEN f.state = 'fenced' THEN 'drain' ELSE 'fence' END AS holds, \
                    CASE WHEN f.state = 'fenced' THEN l.expires_at + make_interval(secs => $2) \
                         ELSE l.expires_at END AS until \
               FROM deletion.serving_write_leases l \
               LEFT JOIN deletion.community_fences f ON f.community_id = l.community_id \
              WHERE l.community_id = $1 \
                AND CASE WHEN f.state = 'fenced' \
                         THEN (l.released_at IS NULL OR l.released_at > f.updated_at) \
                              AND l.expires_at + make_interval(secs => $2) > clock_timestamp() \
                         ELSE l.released_at IS NULL AND l.expires_at > clock_timestamp() END \
              ORDER BY until, l.id \
              LIMIT $3",
        )
        .bind(community_id)
        .bind(bound.as_secs_f64())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(leases)
    }

    /// Deletes lease rows released or expired more than `retain` ago (they prove nothing any
    /// more); returns how many. Keeps the lease table small under serving churn. A row still
    /// inside its protected-operation bound is kept whatever `retain` says: the drain reads it.
    pub async fn reap_serving_write_leases(&self, retain: Duration) -> StoreResult<u64> {
        let deleted: i64 = sqlx::query_scalar("SELECT deletion.reap_serving_write_leases($1)")
            .bind(retain.as_secs_f64())
            .fetch_one(&self.pool)
            .await?;
        Ok(count_u64(deleted))
    }
}
