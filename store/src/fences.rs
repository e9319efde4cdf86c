//! The write fence a community and a user share: its states, its row, and the mechanism both
//! scopes use (lock the row, change its state, refuse while serving writes are live or stalled).
//!
//! A fence is keyed by its scope ([`FenceKey`]): a community's id (`deletion.community_fences`)
//! or a user's 64-hex pubkey (`deletion.user_fences`, migration 0012). Every state change bumps
//! the row's `generation`. Serving writers hold the row `FOR SHARE` (lease acquisition and the
//! row-write triggers) and a fence change takes it `FOR UPDATE` ([`lock_fence_row`]), so a fence
//! cannot commit past an in-flight admission: a concurrent fence either sees a lease or refuses
//! it. What differs between the scopes (which transitions are allowed, which audit events and
//! stage advances record them, what locks come first) stays with each scope's fence module.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use serving::LiveServingWrites;
use sqlx::{Encode, PgConnection, PgExecutor, PgPool, Postgres, Type};
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::{Store, count_u64};

/// How long a fence change waits for serving transactions holding the fence row before giving up
/// (transiently: SQLSTATE 55P03) so a stuck writer cannot hang the activity.
const FENCE_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '5s'";

/// Whether a community or a user accepts serving writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FenceState {
    /// Writes accepted.
    Serving,
    /// New serving writes refused; admitted ones may finish.
    Quiescing,
    /// Every serving write refused, row writes included (SQLSTATE BZ001 for a community, BZ006
    /// for a user).
    Fenced,
}

impl FenceState {
    /// The spelling stored in the fence tables' `state`.
    pub fn as_str(self) -> &'static str {
        match self {
            FenceState::Serving => "serving",
            FenceState::Quiescing => "quiescing",
            FenceState::Fenced => "fenced",
        }
    }

    /// Every state.
    const ALL: [FenceState; 3] = [
        FenceState::Serving,
        FenceState::Quiescing,
        FenceState::Fenced,
    ];

    /// The state stored as `value` (its [`FenceState::as_str`] spelling); any other value is a
    /// corrupt row.
    pub(crate) fn parse(value: &str) -> StoreResult<Self> {
        FenceState::ALL
            .into_iter()
            .find(|state| state.as_str() == value)
            .ok_or_else(|| StoreError::Corrupt {
                what: "fence state",
                reason: format!("unknown state {value:?}"),
            })
    }
}

impl fmt::Display for FenceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Leases of a fenced community or user left unreleased at fence time whose writers may still be
/// running.
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

/// One of the two scopes a fence has, as [`FenceKey::scope`] names it.
#[derive(Debug, Clone, Copy)]
pub enum FenceScope<'a> {
    /// A community's fence.
    Community(Uuid),
    /// A user's fence.
    User(&'a str),
}

/// What a fence row is keyed by: a community's id ([`Uuid`]) or a user's pubkey ([`String`]).
pub trait FenceKey:
    Clone + Serialize + Send + Sync + Unpin + 'static + for<'q> Encode<'q, Postgres> + Type<Postgres>
{
    /// Its fence table.
    const TABLE: &'static str;
    /// The key column of that table, and the key's field in a serialized status.
    const COLUMN: &'static str;
    /// The `deletion.serving_write_leases` column naming the scope.
    const LEASE_COLUMN: &'static str;

    /// The key as one of the two scopes.
    fn scope(&self) -> FenceScope<'_>;
}

impl FenceKey for Uuid {
    const TABLE: &'static str = "deletion.community_fences";
    const COLUMN: &'static str = "community_id";
    const LEASE_COLUMN: &'static str = "community_id";

    fn scope(&self) -> FenceScope<'_> {
        FenceScope::Community(*self)
    }
}

impl FenceKey for String {
    const TABLE: &'static str = "deletion.user_fences";
    const COLUMN: &'static str = "pubkey";
    const LEASE_COLUMN: &'static str = "user_pubkey";

    fn scope(&self) -> FenceScope<'_> {
        FenceScope::User(self)
    }
}

/// A fence row: [`crate::FenceStatus`] (a community's) or
/// [`crate::UserFenceStatus`] (a user's). Serialized with the key under its column's
/// name (`community_id` or `pubkey`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedFenceStatus<K> {
    /// The community's id or the user's 64-hex pubkey.
    pub key: K,
    /// Its state.
    pub state: FenceState,
    /// Bumped on every change.
    pub generation: i64,
    /// The request that last changed it (`None` for a row nobody changed yet, e.g. a user's row
    /// created by a serving write).
    pub request_id: Option<Uuid>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl<K: FenceKey> Serialize for ScopedFenceStatus<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut status = serializer.serialize_struct("FenceStatus", 5)?;
        status.serialize_field(K::COLUMN, &self.key)?;
        status.serialize_field("state", &self.state)?;
        status.serialize_field("generation", &self.generation)?;
        status.serialize_field("request_id", &self.request_id)?;
        status.serialize_field("updated_at", &self.updated_at)?;
        status.end()
    }
}

/// The columns of a fence row after its key, as every query here selects or returns them.
type FenceRow = (String, i64, Option<Uuid>, DateTime<Utc>);

/// The column list matching [`FenceRow`].
const FENCE_COLUMNS: &str = "state, generation, request_id, updated_at";

impl<K: FenceKey> ScopedFenceStatus<K> {
    fn from_row(
        key: &K,
        (state, generation, request_id, updated_at): FenceRow,
    ) -> StoreResult<Self> {
        Ok(ScopedFenceStatus {
            key: key.clone(),
            state: FenceState::parse(&state)?,
            generation,
            request_id,
            updated_at,
        })
    }
}

/// Bounds the waits of the fence change in the caller's transaction by [`FENCE_LOCK_TIMEOUT`].
pub(crate) async fn set_fence_lock_timeout(conn: &mut PgConnection) -> StoreResult<()> {
    sqlx::query(FENCE_LOCK_TIMEOUT).execute(conn).await?;
    Ok(())
}

/// `template` with the scope's names filled in: `{table}`, `{column}`, `{lease_column}` (see
/// [`FenceKey`]) and `{row}` (the columns of a [`FenceRow`]).
fn scoped_sql<K: FenceKey>(template: &str) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(
        template
            .replace("{table}", K::TABLE)
            .replace("{column}", K::COLUMN)
            .replace("{lease_column}", K::LEASE_COLUMN)
            .replace("{row}", FENCE_COLUMNS),
    )
}

/// Reads the fence row with `template` (a `SELECT {row} FROM {table} WHERE {column} = $1 …`).
async fn select_fence_row<'c, K: FenceKey>(
    executor: impl PgExecutor<'c>,
    key: &K,
    template: &str,
) -> StoreResult<Option<ScopedFenceStatus<K>>> {
    let row = sqlx::query_as::<_, FenceRow>(scoped_sql::<K>(template))
        .bind(key.clone())
        .fetch_optional(executor)
        .await?;
    row.map(|row| ScopedFenceStatus::from_row(key, row))
        .transpose()
}

/// Creates the fence row `serving` (generation 0) unless it exists (communities created before
/// the schema's creation trigger and users who never wrote have none).
pub(crate) async fn ensure_fence_row<K: FenceKey>(
    conn: &mut PgConnection,
    key: &K,
) -> StoreResult<()> {
    sqlx::query(scoped_sql::<K>(
        "INSERT INTO {table} ({column}, state, generation) VALUES ($1, 'serving', 0) \
         ON CONFLICT ({column}) DO NOTHING",
    ))
    .bind(key.clone())
    .execute(conn)
    .await?;
    Ok(())
}

/// Locks the fence row `FOR UPDATE`, creating it `serving` if missing. The caller sets the lock
/// timeout ([`set_fence_lock_timeout`]) after whatever it locks first.
pub(crate) async fn lock_fence_row<K: FenceKey>(
    conn: &mut PgConnection,
    key: &K,
) -> StoreResult<ScopedFenceStatus<K>> {
    ensure_fence_row(conn, key).await?;
    let locked = select_fence_row(
        conn,
        key,
        "SELECT {row} FROM {table} WHERE {column} = $1 FOR UPDATE",
    )
    .await?;
    Ok(locked.ok_or(sqlx::Error::RowNotFound)?)
}

/// The fence row, if there is one (no lock taken).
pub(crate) async fn fence_row<K: FenceKey>(
    pool: &PgPool,
    key: &K,
) -> StoreResult<Option<ScopedFenceStatus<K>>> {
    select_fence_row(pool, key, "SELECT {row} FROM {table} WHERE {column} = $1").await
}

/// Sets the fence state for `request_id`, bumping the generation; returns the new row.
pub(crate) async fn set_fence<K: FenceKey>(
    conn: &mut PgConnection,
    key: &K,
    state: FenceState,
    request_id: Uuid,
) -> StoreResult<ScopedFenceStatus<K>> {
    let row = sqlx::query_as::<_, FenceRow>(scoped_sql::<K>(
        "UPDATE {table} SET state = $2, generation = generation + 1, request_id = $3, \
         updated_at = now() WHERE {column} = $1 RETURNING {row}",
    ))
    .bind(key.clone())
    .bind(state.as_str())
    .bind(request_id)
    .fetch_one(conn)
    .await?;
    ScopedFenceStatus::from_row(key, row)
}

/// Live serving writes of the scope, read inside the caller's transaction through the one
/// definition of a live lease the serving side shares (`deletion.live_serving_writes` or
/// `deletion.live_user_serving_writes`, see [`serving::live_serving_writes_in`]).
pub(crate) async fn live_serving_writes_in<K: FenceKey>(
    conn: &mut PgConnection,
    key: &K,
) -> StoreResult<LiveServingWrites> {
    Ok(match key.scope() {
        FenceScope::Community(community_id) => {
            serving::live_serving_writes_in(conn, community_id).await?
        }
        FenceScope::User(pubkey) => serving::live_user_serving_writes_in(conn, pubkey).await?,
    })
}

/// Refuses with [`FenceError::ServingWritesLive`] (a community) or
/// [`FenceError::LiveUserServingWrites`] (a user), both transient, while a serving write of the
/// scope is live; read inside the caller's (fencing) transaction.
pub(crate) async fn require_no_live_serving_writes<K: FenceKey>(
    conn: &mut PgConnection,
    key: &K,
) -> StoreResult<()> {
    let live = live_serving_writes_in(conn, key).await?;
    if live.count == 0 {
        return Ok(());
    }
    let (count, operations) = (live.count, live.operations);
    Err(match key.scope() {
        FenceScope::Community(community_id) => StoreError::Fence(FenceError::ServingWritesLive {
            community_id,
            count,
            operations,
        }),
        FenceScope::User(pubkey) => StoreError::Fence(FenceError::LiveUserServingWrites {
            pubkey: pubkey.to_owned(),
            count,
            operations,
        }),
    })
}

/// Stalled serving writes of the scope, read inside the caller's transaction: leases naming it
/// whose `released_at` is empty or later than the fence row's last change, and whose
/// `expires_at + bound` is still ahead of `clock_timestamp()`. The fence's `updated_at` is the
/// start of the fencing transaction, so a lease released while it ran counts as unreleased: the
/// error is on the safe side. A scope without a fence row has none.
pub(crate) async fn stalled_serving_writes_in<K: FenceKey>(
    conn: &mut PgConnection,
    key: &K,
    bound: Duration,
) -> StoreResult<StalledServingWrites> {
    let sql = scoped_sql::<K>(
        "SELECT count(l.id), \
                coalesce(array_agg(DISTINCT l.operation ORDER BY l.operation) \
                         FILTER (WHERE l.id IS NOT NULL), '{}'), \
                max(l.expires_at) + make_interval(secs => $2), clock_timestamp() \
         FROM {table} f \
         LEFT JOIN deletion.serving_write_leases l \
           ON l.{lease_column} = f.{column} \
          AND (l.released_at IS NULL OR l.released_at > f.updated_at) \
          AND l.expires_at + make_interval(secs => $2) > clock_timestamp() \
         WHERE f.{column} = $1",
    );
    let (count, operations, until, now): (i64, Vec<String>, Option<DateTime<Utc>>, DateTime<Utc>) =
        sqlx::query_as(sql)
            .bind(key.clone())
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
    /// Live serving writes of the scope, on a connection of the pool.
    pub(crate) async fn live_serving_writes_of<K: FenceKey>(
        &self,
        key: &K,
    ) -> StoreResult<LiveServingWrites> {
        let mut conn = self.pool.acquire().await?;
        live_serving_writes_in(&mut conn, key).await
    }

    /// Stalled serving writes of the scope (see [`stalled_serving_writes_in`]), on a connection
    /// of the pool.
    pub(crate) async fn stalled_serving_writes_of<K: FenceKey>(
        &self,
        key: &K,
        bound: Duration,
    ) -> StoreResult<StalledServingWrites> {
        let mut conn = self.pool.acquire().await?;
        stalled_serving_writes_in(&mut conn, key, bound).await
    }

    /// The drain gate of either scope: refuses with [`FenceError::StalledServingWrites`] (a
    /// community) or [`FenceError::StalledUserServingWrites`] (a user), both transient, while a
    /// lease left unreleased at fence time is inside `expires_at + bound`.
    pub(crate) async fn require_no_stalled_serving_writes_of<K: FenceKey>(
        &self,
        key: &K,
        bound: Duration,
    ) -> StoreResult<StalledServingWrites> {
        let stalled = self.stalled_serving_writes_of(key, bound).await?;
        let (count, until) = match stalled.until {
            Some(until) if stalled.count > 0 => (stalled.count, until),
            _ => return Ok(stalled),
        };
        Err(match key.scope() {
            FenceScope::Community(community_id) => {
                StoreError::Fence(FenceError::StalledServingWrites {
                    community_id,
                    count,
                    until,
                })
            }
            FenceScope::User(pubkey) => StoreError::Fence(FenceError::StalledUserServingWrites {
                pubkey: pubkey.to_owned(),
                count,
                until,
            }),
        })
    }
}

/// Why a store call failed because a community or user write fence, or the serving-write leases it waits for, refuses the step: one part of [`crate::StoreError`].
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// Serving writes admitted before quiescing are still running; the fence waits for them.
    #[error("community {community_id} still has {count} live serving write(s): {operations:?}")]
    ServingWritesLive {
        /// The community.
        community_id: uuid::Uuid,
        /// Live, unexpired, unreleased leases.
        count: u64,
        /// Their operations, deduplicated.
        operations: Vec<String>,
    },
    /// Leases left unreleased when the community was fenced may still cover a writer that is
    /// running (a paused process, a slow PutObject): the manifest is not frozen before every one
    /// of them is past its expiry plus the protected-operation bound.
    #[error(
        "community {community_id}: waiting on {count} stalled serving-write lease(s) until {until} \
         (expiry plus the protected-operation bound)"
    )]
    StalledServingWrites {
        /// The community.
        community_id: uuid::Uuid,
        /// Leases unreleased at fence time and still inside their bound.
        count: u64,
        /// When the last of them leaves its bound (database clock).
        until: chrono::DateTime<chrono::Utc>,
    },
    /// The user's fence is held by another deletion request.
    #[error(
        "user {pubkey} is already quiesced or fenced by deletion request {request_id}; finish or \
         abort that request first"
    )]
    UserFenceHeld {
        /// The user's pubkey.
        pubkey: String,
        /// The request holding the fence.
        request_id: uuid::Uuid,
    },
    /// The user cannot be fenced: this request has not quiesced them first.
    #[error("user {pubkey} is {state}, not quiescing for this request: quiesce before fencing")]
    UserNotQuiescing {
        /// The user's pubkey.
        pubkey: String,
        /// The fence state found.
        state: String,
    },
    /// Serving writes for the user admitted before quiescing are still running; the user fence
    /// waits for them.
    #[error("user {pubkey} still has {count} live serving write(s): {operations:?}")]
    LiveUserServingWrites {
        /// The user's pubkey.
        pubkey: String,
        /// Live, unexpired, unreleased user leases.
        count: u64,
        /// Their operations, deduplicated.
        operations: Vec<String>,
    },
    /// Leases for the user left unreleased when the user was fenced may still cover a running
    /// writer: the user's data is not purged before each is past its expiry plus the
    /// protected-operation bound.
    #[error(
        "user {pubkey}: waiting on {count} stalled serving-write lease(s) until {until} (expiry \
         plus the protected-operation bound)"
    )]
    StalledUserServingWrites {
        /// The user's pubkey.
        pubkey: String,
        /// Leases unreleased at fence time and still inside their bound.
        count: u64,
        /// When the last of them leaves its bound (database clock).
        until: chrono::DateTime<chrono::Utc>,
    },
    /// The community's fence is held in a way this request cannot use.
    #[error("community {community_id} fence is {state} for request {holder:?}: {reason}")]
    Conflict {
        /// The community.
        community_id: uuid::Uuid,
        /// The fence state found.
        state: String,
        /// The request holding it, if any.
        holder: Option<uuid::Uuid>,
        /// Why the call cannot proceed.
        reason: String,
    },
    /// The fence this request recorded is no longer in force (lifted or superseded).
    #[error(
        "request {request_id}: community {community_id} is not fenced at generation \
         {expected_generation:?} (found {state} at generation {generation})"
    )]
    NotHeld {
        /// The request.
        request_id: uuid::Uuid,
        /// The community.
        community_id: uuid::Uuid,
        /// The generation recorded on the request when it fenced.
        expected_generation: Option<i64>,
        /// The fence state found.
        state: String,
        /// The generation found.
        generation: i64,
    },
}

impl crate::failure::Classified for FenceError {
    fn severity(&self) -> crate::failure::Severity {
        match self {
            FenceError::ServingWritesLive { .. }
            | FenceError::StalledServingWrites { .. }
            | FenceError::LiveUserServingWrites { .. }
            | FenceError::StalledUserServingWrites { .. } => crate::failure::Severity::Transient,
            _ => crate::failure::Severity::Permanent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status<K>(key: K) -> ScopedFenceStatus<K> {
        ScopedFenceStatus {
            key,
            state: FenceState::Quiescing,
            generation: 3,
            request_id: None,
            updated_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_status_serializes_its_key_under_the_scope_s_column() -> serde_json::Result<()> {
        let community = serde_json::to_value(status(Uuid::nil()))?;
        assert_eq!(community["community_id"], Uuid::nil().to_string());
        assert_eq!(community["state"], "quiescing");
        assert_eq!(community["generation"], 3);
        let user = serde_json::to_value(status("0a".repeat(32)))?;
        assert_eq!(user["pubkey"], "0a".repeat(32));
        assert!(user.get("community_id").is_none() && user.get("key").is_none());
        Ok(())
    }
}
