//! The Postgres side of erasing one real user (issue 17): where their data is
//! ([`footprint`]), the batched, logged deletion of their rows ([`rows`]), and the recorded
//! decision for every media object they uploaded ([`media`]).
//!
//! Every irreversible write is made by a handler attempt ([`ErasureAttempt`]) and re-checks, in
//! its own transaction, that the attempt's execution generation is still the request's: an
//! attempt a newer one superseded can never delete another row.

pub mod footprint;
pub mod media;
pub mod rows;

use crate::RequestError;
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use crate::community::audit::commit_audited;
use crate::error::{StoreError, StoreResult};

/// One handler attempt of a user deletion: the request, the stage row it runs, and the
/// execution generation its start was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErasureAttempt {
    /// The request.
    pub request_id: Uuid,
    /// The stage row whose handler runs.
    pub stage_id: Uuid,
    /// The generation `start_stage` returned.
    pub generation: i64,
}

impl ErasureAttempt {
    /// Refuses with [`RequestError::StaleGeneration`] unless the request's execution generation is
    /// still this attempt's. Holds the request row `FOR SHARE` until the caller's transaction
    /// ends, so no newer attempt can start while the caller's irreversible statement runs.
    pub(crate) async fn require_current(&self, conn: &mut PgConnection) -> StoreResult<()> {
        let current: Option<i64> = sqlx::query_scalar(
            "SELECT exec_generation FROM deletion.requests \
             WHERE id = $1 AND kind = 'user' FOR SHARE",
        )
        .bind(self.request_id)
        .fetch_optional(conn)
        .await?;
        match current {
            Some(actual) if actual == self.generation => Ok(()),
            Some(actual) => Err(StoreError::Request(RequestError::StaleGeneration {
                request_id: self.request_id,
                expected: self.generation,
                actual,
            })),
            None => Err(StoreError::NotFound {
                what: "user-deletion request",
                id: self.request_id.to_string(),
            }),
        }
    }

    /// Appends one batch to `deletion.user_purge_log` (inside the caller's transaction).
    pub(crate) async fn log(
        &self,
        conn: &mut PgConnection,
        community_id: Uuid,
        what: PurgeLogKind,
        subject: &str,
        removed: u64,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO deletion.user_purge_log \
                 (request_id, stage_id, community_id, what, subject, removed, exec_generation) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(self.request_id)
        .bind(self.stage_id)
        .bind(community_id)
        .bind(what.as_str())
        .bind(subject)
        .bind(crate::count_i64("removed", removed)?)
        .bind(self.generation)
        .execute(conn)
        .await?;
        Ok(())
    }
}

/// A transaction of the store's pool.
type Tx = Transaction<'static, Postgres>;

/// What one purge-log row counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeLogKind {
    /// Rows of one tenant relation.
    Rows,
    /// Versions of one media object.
    ObjectVersions,
    /// Keys of a per-user namespace.
    UserKeys,
    /// Keys of a per-agent namespace.
    AgentKeys,
}

impl PurgeLogKind {
    /// The spelling stored in `user_purge_log.what`.
    pub fn as_str(self) -> &'static str {
        match self {
            PurgeLogKind::Rows => "rows",
            PurgeLogKind::ObjectVersions => "object_versions",
            PurgeLogKind::UserKeys => "user_keys",
            PurgeLogKind::AgentKeys => "agent_keys",
        }
    }
}

impl crate::Store {
    /// Opens a transaction in which `attempt` is current ([`ErasureAttempt::require_current`]:
    /// its request row is held `FOR SHARE` until the transaction ends): the start of every
    /// write of an attempt.
    pub(crate) async fn begin_attempt(&self, attempt: &ErasureAttempt) -> StoreResult<Tx> {
        let mut tx = self.pool.begin().await?;
        attempt.require_current(&mut tx).await?;
        Ok(tx)
    }

    /// Logs a batch of keys (or object versions) an external call removed, generation-checked:
    /// the call itself cannot be in the transaction, so this records it right after it was
    /// acknowledged, and refuses when a newer attempt took over meanwhile. A batch of zero is
    /// logged too: the row records which namespace was purged (and is verified later).
    pub async fn log_erased(
        &self,
        attempt: &ErasureAttempt,
        community_id: Uuid,
        what: PurgeLogKind,
        subject: &str,
        removed: u64,
    ) -> StoreResult<()> {
        let mut tx = self.begin_attempt(attempt).await?;
        attempt
            .log(&mut tx, community_id, what, subject, removed)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The subjects logged for the request in the community under `what` (e.g. every agent
    /// namespace purged), whichever attempt logged them.
    pub async fn erased_subjects(
        &self,
        request_id: Uuid,
        community_id: Uuid,
        what: PurgeLogKind,
    ) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT subject FROM deletion.user_purge_log \
             WHERE request_id = $1 AND community_id = $2 AND what = $3 ORDER BY subject",
        )
        .bind(request_id)
        .bind(community_id)
        .bind(what.as_str())
        .fetch_all(&self.pool)
        .await?)
    }

    /// Refuses with [`RequestError::StaleGeneration`] unless `attempt` is still current: the check
    /// before an irreversible external call.
    pub async fn require_current_attempt(&self, attempt: &ErasureAttempt) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await?;
        attempt.require_current(&mut conn).await
    }

    /// Total removed per (community, what, subject) for the request, from the purge log.
    pub async fn erased_totals(
        &self,
        request_id: Uuid,
    ) -> StoreResult<Vec<(Uuid, String, String, u64)>> {
        let rows: Vec<(Uuid, String, String, i64)> = sqlx::query_as(
            "SELECT community_id, what, subject, sum(removed)::int8 FROM deletion.user_purge_log \
             WHERE request_id = $1 GROUP BY community_id, what, subject \
             ORDER BY community_id, what, subject",
        )
        .bind(request_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(c, what, subject, n)| (c, what, subject, crate::count_u64(n)))
            .collect())
    }
}

impl crate::Store {
    /// Appends `event` for the attempt's stage row to the request's hash-chained audit trail,
    /// generation-checked, once per stage row: an attempt retried after an earlier one wrote it
    /// (and died before saving its result) does not write it again.
    pub async fn audit_erasure(
        &self,
        attempt: &ErasureAttempt,
        event: &str,
        detail: &serde_json::Value,
    ) -> StoreResult<()> {
        let mut tx = self.begin_attempt(attempt).await?;
        let written: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM deletion.audit_events \
                            WHERE request_id = $1 AND event = $2 AND detail ->> 'stage_id' = $3)",
        )
        .bind(attempt.request_id)
        .bind(event)
        .bind(attempt.stage_id.to_string())
        .fetch_one(&mut *tx)
        .await?;
        if written {
            return Ok(());
        }
        let mut detail = detail.clone();
        if let serde_json::Value::Object(fields) = &mut detail {
            fields.insert("stage_id".into(), attempt.stage_id.to_string().into());
        }
        commit_audited(tx, attempt.request_id, "workflow", event, &detail).await
    }

    /// What the stage row's attempts removed, per (what, subject), from the purge log.
    pub async fn erased_in_stage(
        &self,
        request_id: Uuid,
        stage_id: Uuid,
    ) -> StoreResult<Vec<(String, String, u64)>> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT what, subject, sum(removed)::int8 FROM deletion.user_purge_log \
             WHERE request_id = $1 AND stage_id = $2 GROUP BY what, subject ORDER BY what, subject",
        )
        .bind(request_id)
        .bind(stage_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(what, subject, n)| (what, subject, crate::count_u64(n)))
            .collect())
    }
}
