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

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

use super::audit::require_named;
use super::error::{StoreError, StoreResult};
use super::fence::{FenceState, ensure_fence_row};
use super::{Store, count_u64};

/// A lease on one external serving write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServingWriteLease {
    /// Lease id.
    pub id: Uuid,
    /// The community written to.
    pub community_id: Uuid,
    /// What the write is (`s3_put`, `redis_write`, `push`, …).
    pub operation: String,
    /// The serving process holding it.
    pub owner: String,
    /// The fence generation when it was acquired.
    pub fence_generation: i64,
    /// When it lapses unless renewed.
    pub expires_at: DateTime<Utc>,
}

/// Live serving writes of a community.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveServingWrites {
    /// Unreleased, unexpired leases.
    pub count: u64,
    /// Their operations, deduplicated and sorted.
    pub operations: Vec<String>,
}

fn ttl_seconds(ttl: Duration) -> StoreResult<f64> {
    if ttl.is_zero() {
        return Err(StoreError::InvalidInput {
            field: "ttl",
            reason: "a lease needs a positive time to live".to_owned(),
        });
    }
    Ok(ttl.as_secs_f64())
}

/// Locks the community's fence row `FOR SHARE` (held until commit, so `fence` waits for this
/// transaction) and returns its state; `None` if the community has no fence row.
async fn share_fence_row(
    conn: &mut PgConnection,
    community_id: Uuid,
) -> StoreResult<Option<(FenceState, i64)>> {
    let row: Option<(String, i64)> = sqlx::query_as(
        "SELECT state, generation FROM deletion.community_fences WHERE community_id = $1 FOR SHARE",
    )
    .bind(community_id)
    .fetch_optional(conn)
    .await?;
    row.map(|(state, generation)| Ok((FenceState::parse(&state)?, generation)))
        .transpose()
}

/// Live serving writes of the community, read inside the caller's transaction.
pub(crate) async fn live_serving_writes_in(
    conn: &mut PgConnection,
    community_id: Uuid,
) -> StoreResult<LiveServingWrites> {
    let (count, operations): (i64, Vec<String>) = sqlx::query_as(
        "SELECT count(*), coalesce(array_agg(DISTINCT operation ORDER BY operation), '{}') \
         FROM deletion.serving_write_leases \
         WHERE community_id = $1 AND released_at IS NULL AND expires_at > clock_timestamp()",
    )
    .bind(community_id)
    .fetch_one(conn)
    .await?;
    Ok(LiveServingWrites {
        count: count_u64(count),
        operations,
    })
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

#[derive(sqlx::FromRow)]
struct LeaseRow {
    owner: String,
    released: bool,
    expired: bool,
}

/// Checks the lease is still the caller's, unreleased and unexpired, and the community is not
/// fenced (inside the caller's transaction, with the fence row shared).
async fn check_lease(
    conn: &mut PgConnection,
    lease: &ServingWriteLease,
    lock: bool,
) -> StoreResult<()> {
    let fence = share_fence_row(conn, lease.community_id).await?;
    if matches!(fence, Some((FenceState::Fenced, _))) {
        return Err(StoreError::CommunityFenced {
            community_id: lease.community_id,
        });
    }
    let sql = if lock {
        "SELECT owner, released_at IS NOT NULL AS released, \
                expires_at <= clock_timestamp() AS expired \
         FROM deletion.serving_write_leases WHERE id = $1 AND community_id = $2 FOR UPDATE"
    } else {
        "SELECT owner, released_at IS NOT NULL AS released, \
                expires_at <= clock_timestamp() AS expired \
         FROM deletion.serving_write_leases WHERE id = $1 AND community_id = $2"
    };
    let row = sqlx::query_as::<_, LeaseRow>(sql)
        .bind(lease.id)
        .bind(lease.community_id)
        .fetch_optional(conn)
        .await?;
    let lost = |reason: &str| StoreError::LeaseLost {
        lease_id: lease.id,
        reason: reason.to_owned(),
    };
    match row {
        None => Err(lost("no such lease for this community")),
        Some(row) if row.owner != lease.owner => Err(lost("held by another owner")),
        Some(row) if row.released => Err(lost("already released")),
        Some(row) if row.expired => Err(lost("expired before it was renewed")),
        Some(_) => Ok(()),
    }
}

impl Store {
    /// Admits one external serving write: refused with [`StoreError::CommunityQuiescing`] or
    /// [`StoreError::CommunityFenced`] once deletion started, [`StoreError::NotFound`] for an
    /// unknown community. The fence row is held `FOR SHARE` while the lease is inserted, so a
    /// concurrent `fence` either sees this lease or refuses it.
    pub async fn acquire_serving_write_lease(
        &self,
        community_id: Uuid,
        operation: &str,
        owner: &str,
        ttl: Duration,
    ) -> StoreResult<ServingWriteLease> {
        require_named("operation", operation)?;
        require_named("owner", owner)?;
        let ttl = ttl_seconds(ttl)?;
        let mut tx = self.pool.begin().await?;
        let mut fence = share_fence_row(&mut tx, community_id).await?;
        if fence.is_none() {
            let exists: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM buzz.communities WHERE id = $1)")
                    .bind(community_id)
                    .fetch_one(&mut *tx)
                    .await?;
            if !exists {
                return Err(StoreError::NotFound {
                    what: "community",
                    id: community_id.to_string(),
                });
            }
            ensure_fence_row(&mut tx, community_id).await?;
            fence = share_fence_row(&mut tx, community_id).await?;
        }
        let fence_generation = match fence {
            Some((FenceState::Serving, generation)) => generation,
            Some((FenceState::Quiescing, _)) => {
                return Err(StoreError::CommunityQuiescing { community_id });
            }
            Some((FenceState::Fenced, _)) => {
                return Err(StoreError::CommunityFenced { community_id });
            }
            None => {
                return Err(StoreError::NotFound {
                    what: "community fence",
                    id: community_id.to_string(),
                });
            }
        };
        let id = Uuid::new_v4();
        let expires_at: DateTime<Utc> = sqlx::query_scalar(
            "INSERT INTO deletion.serving_write_leases \
             (id, community_id, operation, owner, fence_generation, expires_at) \
             VALUES ($1, $2, $3, $4, $5, clock_timestamp() + make_interval(secs => $6)) \
             RETURNING expires_at",
        )
        .bind(id)
        .bind(community_id)
        .bind(operation)
        .bind(owner)
        .bind(fence_generation)
        .bind(ttl)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(ServingWriteLease {
            id,
            community_id,
            operation: operation.to_owned(),
            owner: owner.to_owned(),
            fence_generation,
            expires_at,
        })
    }

    /// Extends the lease by `ttl` from now and returns the new expiry. Allowed while the
    /// community serves or quiesces; refused ([`StoreError::LeaseLost`],
    /// [`StoreError::CommunityFenced`]) once released, expired, not the caller's, or fenced.
    pub async fn renew_serving_write_lease(
        &self,
        lease: &ServingWriteLease,
        ttl: Duration,
    ) -> StoreResult<DateTime<Utc>> {
        let ttl = ttl_seconds(ttl)?;
        let mut tx = self.pool.begin().await?;
        check_lease(&mut tx, lease, true).await?;
        let expires_at: DateTime<Utc> = sqlx::query_scalar(
            "UPDATE deletion.serving_write_leases \
             SET expires_at = clock_timestamp() + make_interval(secs => $2), \
                 renewed_at = clock_timestamp() \
             WHERE id = $1 RETURNING expires_at",
        )
        .bind(lease.id)
        .bind(ttl)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(expires_at)
    }

    /// Checks the lease is still valid (see [`Store::renew_serving_write_lease`]) without
    /// extending it; the serving path calls it right before and after its external write.
    pub async fn verify_serving_write_lease(&self, lease: &ServingWriteLease) -> StoreResult<()> {
        let mut tx = self.pool.begin().await?;
        check_lease(&mut tx, lease, false).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Releases the lease. Returns `true` only if it was this owner's lease and still live;
    /// `false` if it was already released, had expired (it is marked released anyway), or is not
    /// this owner's (then nothing changes).
    pub async fn release_serving_write_lease(
        &self,
        lease: &ServingWriteLease,
    ) -> StoreResult<bool> {
        let was_live: Option<bool> = sqlx::query_scalar(
            "UPDATE deletion.serving_write_leases SET released_at = clock_timestamp() \
             WHERE id = $1 AND owner = $2 AND community_id = $3 AND released_at IS NULL \
             RETURNING expires_at > clock_timestamp()",
        )
        .bind(lease.id)
        .bind(&lease.owner)
        .bind(lease.community_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(was_live.unwrap_or(false))
    }

    /// Unreleased, unexpired leases of the community and their operations.
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

    /// Deletes lease rows released or expired more than `retain` ago (they prove nothing any
    /// more); returns how many. Keeps the lease table small under serving churn. A row still
    /// inside its protected-operation bound is kept whatever `retain` says: the drain reads it.
    pub async fn reap_serving_write_leases(&self, retain: Duration) -> StoreResult<u64> {
        let deleted = sqlx::query(
            "DELETE FROM deletion.serving_write_leases \
             WHERE coalesce(released_at, expires_at) < clock_timestamp() - make_interval(secs => $1) \
               AND expires_at < clock_timestamp() - make_interval(secs => $2)",
        )
        .bind(retain.as_secs_f64())
        .bind(crate::serving::MAX_PROTECTED_OPERATION.as_secs_f64())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(deleted)
    }
}
