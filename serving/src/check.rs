//! Renewing, verifying and releasing a held lease, and counting a community's live leases.
//!
//! Renewal is allowed while the community serves or quiesces (an admitted write may finish) and
//! refused once the lease was released, expired, is not the caller's, or its community or user
//! is fenced. Release matches on id *and* owner: nobody releases a lease that is not theirs.
//! Time is the database's `clock_timestamp()`, never a client clock.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::db::ServingDb;
use crate::error::ServingError;
use crate::lease::{LiveServingWrites, ServingWriteLease, ttl_seconds};

/// Maps the outcome of `deletion.check_serving_write_lease` to the library's result.
fn lease_outcome(
    lease: &ServingWriteLease,
    outcome: &str,
    expires_at: Option<DateTime<Utc>>,
) -> Result<DateTime<Utc>, ServingError> {
    let lost = |reason: &str| ServingError::LeaseLost {
        lease_id: lease.id,
        reason: reason.to_owned(),
    };
    match (outcome, expires_at) {
        ("valid", Some(expires_at)) => Ok(expires_at),
        ("fenced", _) => Err(ServingError::Fenced {
            community_id: lease.community_id,
        }),
        ("user_fenced", _) => Err(ServingError::UserFenced {
            pubkey: lease.user_pubkey.clone().unwrap_or_default(),
        }),
        ("missing", _) => Err(lost("no such lease for this community")),
        ("not_owner", _) => Err(lost("held by another owner")),
        ("released", _) => Err(lost("already released")),
        ("expired", _) => Err(lost("expired before it was renewed")),
        (other, _) => Err(ServingError::Corrupt {
            what: "serving-write lease check",
            reason: format!("outcome {other:?} for lease {}", lease.id),
        }),
    }
}

impl ServingDb {
    /// Checks the lease is still the caller's, unreleased and unexpired, and the community is
    /// not fenced; with `renew`, also extends it by that many seconds. One call of the SECURITY
    /// DEFINER function `deletion.check_serving_write_lease`, which holds the fence row
    /// `FOR SHARE` while it checks.
    async fn check_lease(
        &self,
        lease: &ServingWriteLease,
        renew: Option<f64>,
    ) -> Result<DateTime<Utc>, ServingError> {
        let (outcome, expires_at): (String, Option<DateTime<Utc>>) = sqlx::query_as(
            "SELECT outcome, expires_at FROM deletion.check_serving_write_lease($1, $2, $3, $4)",
        )
        .bind(lease.id)
        .bind(lease.community_id)
        .bind(&lease.owner)
        .bind(renew)
        .fetch_one(self.pool())
        .await?;
        lease_outcome(lease, &outcome, expires_at)
    }

    /// Extends the lease by `ttl` from now and returns the new expiry. Allowed while the
    /// community serves or quiesces; refused ([`ServingError::LeaseLost`],
    /// [`ServingError::Fenced`], [`ServingError::UserFenced`]) once released, expired, not the
    /// caller's, or fenced.
    pub async fn renew_serving_write_lease(
        &self,
        lease: &ServingWriteLease,
        ttl: Duration,
    ) -> Result<DateTime<Utc>, ServingError> {
        let ttl = ttl_seconds(ttl)?;
        self.check_lease(lease, Some(ttl)).await
    }

    /// Checks the lease is still valid (see [`ServingDb::renew_serving_write_lease`]) without
    /// extending it; the serving path calls it right before and after its external write.
    pub async fn verify_serving_write_lease(
        &self,
        lease: &ServingWriteLease,
    ) -> Result<(), ServingError> {
        self.check_lease(lease, None).await.map(|_| ())
    }

    /// Releases the lease. Returns `true` only if it was this owner's lease and still live;
    /// `false` if it was already released, had expired (it is marked released anyway), or is
    /// not this owner's (then nothing changes).
    pub async fn release_serving_write_lease(
        &self,
        lease: &ServingWriteLease,
    ) -> Result<bool, ServingError> {
        let was_live: bool =
            sqlx::query_scalar("SELECT deletion.release_serving_write_lease($1, $2, $3)")
                .bind(lease.id)
                .bind(lease.community_id)
                .bind(&lease.owner)
                .fetch_one(self.pool())
                .await?;
        Ok(was_live)
    }

    /// Unreleased, unexpired leases of the community and their operations.
    pub async fn live_serving_writes(
        &self,
        community_id: Uuid,
    ) -> Result<LiveServingWrites, ServingError> {
        let mut conn = self.pool().acquire().await?;
        Ok(live_serving_writes_in(&mut conn, community_id).await?)
    }
}

/// Live serving writes of the community, read inside the caller's transaction through
/// `deletion.live_serving_writes`: the one definition of a live lease, shared by the worker's
/// fence (which calls this inside its fencing transaction) and the serving side.
pub async fn live_serving_writes_in(
    conn: &mut PgConnection,
    community_id: Uuid,
) -> Result<LiveServingWrites, sqlx::Error> {
    live_writes_in(
        conn,
        "SELECT live_count, operations FROM deletion.live_serving_writes($1)",
        community_id,
    )
    .await
}

/// Live serving writes made for the user `pubkey` (in any community), read inside the caller's
/// transaction through `deletion.live_user_serving_writes`: the definition the user's fence
/// shares with the serving side.
pub async fn live_user_serving_writes_in(
    conn: &mut PgConnection,
    pubkey: &str,
) -> Result<LiveServingWrites, sqlx::Error> {
    live_writes_in(
        conn,
        "SELECT live_count, operations FROM deletion.live_user_serving_writes($1)",
        pubkey,
    )
    .await
}

/// Runs one of the two live-count functions (`sql`, taking the scope's key as `$1`).
async fn live_writes_in<'k, K>(
    conn: &mut PgConnection,
    sql: &'static str,
    key: K,
) -> Result<LiveServingWrites, sqlx::Error>
where
    K: 'k + sqlx::Encode<'k, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send,
{
    let (count, operations): (i64, Vec<String>) =
        sqlx::query_as(sql).bind(key).fetch_one(conn).await?;
    Ok(LiveServingWrites {
        count: u64::try_from(count).unwrap_or_default(),
        operations,
    })
}
