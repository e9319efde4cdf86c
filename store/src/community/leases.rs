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
//!   plus the protected-operation bound ([`serving::MAX_PROTECTED_OPERATION`]); a release
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
//! [`serving::ServingDb`]; acquiring goes through [`Store::serving`] (one signature, the
//! crate's), and renew, verify, release and the live count are `Store` methods of the same names
//! calling it on the store's pool.
//! What stays here is the worker's side of a community's leases: awaited leases and reaping; the
//! live and stalled counts are the fence mechanism a community shares with a user
//! (`store/fences.rs`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serving::{LiveServingWrites, ServingError, ServingWriteLease};
use uuid::Uuid;

use crate::error::StoreResult;
use crate::fences::StalledServingWrites;
use crate::{Store, count_u64};

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

impl Store {
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
        self.live_serving_writes_of(&community_id).await
    }

    /// Stalled serving writes of the community (see [`StalledServingWrites`]): what the drain
    /// waits for before the manifest may be frozen. `bound` is the protected-operation bound
    /// ([`serving::MAX_PROTECTED_OPERATION`] in production).
    pub async fn stalled_serving_writes(
        &self,
        community_id: Uuid,
        bound: Duration,
    ) -> StoreResult<StalledServingWrites> {
        self.stalled_serving_writes_of(&community_id, bound).await
    }

    /// Refuses with [`FenceError::StalledServingWrites`] (transient) while a lease left
    /// unreleased at fence time is inside `expires_at + bound`; the gate in front of freezing the
    /// manifest.
    pub async fn require_no_stalled_serving_writes(
        &self,
        community_id: Uuid,
        bound: Duration,
    ) -> StoreResult<StalledServingWrites> {
        self.require_no_stalled_serving_writes_of(&community_id, bound)
            .await
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
