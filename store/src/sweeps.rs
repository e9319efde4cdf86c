//! Observational, bucket-wide key-taxonomy sweeps. They never gate a deletion.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::error::StoreResult;
use super::{Store, count_i64, count_u64};

/// What one sweep found, as the sweep activity reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaxonomySweepInput {
    /// When listing began.
    pub started_at: DateTime<Utc>,
    /// Most objects the sweep would list.
    pub object_cap: u64,
    /// Objects listed.
    pub listed_objects: u64,
    /// Objects whose key matched no known writer shape.
    pub unknown_object_count: u64,
    /// A sample of those keys, verbatim.
    pub unknown_key_sample: Vec<String>,
    /// Whether listing stopped at the cap.
    pub reached_cap: bool,
}

/// A recorded sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaxonomySweep {
    /// Sweep id.
    pub id: Uuid,
    /// When it was recorded.
    pub finished_at: DateTime<Utc>,
    /// What it found.
    #[serde(flatten)]
    pub found: TaxonomySweepInput,
}

#[derive(sqlx::FromRow)]
struct SweepRow {
    id: Uuid,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    object_cap: i64,
    listed_objects: i64,
    unknown_object_count: i64,
    unknown_key_sample: sqlx::types::Json<Vec<String>>,
    reached_cap: bool,
}

impl From<SweepRow> for TaxonomySweep {
    fn from(row: SweepRow) -> Self {
        TaxonomySweep {
            id: row.id,
            finished_at: row.finished_at,
            found: TaxonomySweepInput {
                started_at: row.started_at,
                object_cap: count_u64(row.object_cap),
                listed_objects: count_u64(row.listed_objects),
                unknown_object_count: count_u64(row.unknown_object_count),
                unknown_key_sample: row.unknown_key_sample.0,
                reached_cap: row.reached_cap,
            },
        }
    }
}

const SWEEP_COLUMNS: &str = "id, started_at, finished_at, object_cap, listed_objects, \
     unknown_object_count, unknown_key_sample, reached_cap";

impl Store {
    /// Records a finished sweep.
    pub async fn record_taxonomy_sweep(
        &self,
        sweep: &TaxonomySweepInput,
    ) -> StoreResult<TaxonomySweep> {
        let sql = format!(
            "INSERT INTO deletion.taxonomy_sweeps (id, started_at, object_cap, listed_objects, \
             unknown_object_count, unknown_key_sample, reached_cap) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {SWEEP_COLUMNS}"
        );
        let row = sqlx::query_as::<_, SweepRow>(sqlx::AssertSqlSafe(sql))
            .bind(Uuid::new_v4())
            .bind(sweep.started_at)
            .bind(count_i64("object_cap", sweep.object_cap)?)
            .bind(count_i64("listed_objects", sweep.listed_objects)?)
            .bind(count_i64(
                "unknown_object_count",
                sweep.unknown_object_count,
            )?)
            .bind(sqlx::types::Json(&sweep.unknown_key_sample))
            .bind(sweep.reached_cap)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.into())
    }

    /// The most recent sweeps, newest first (at most `limit`, clamped to 1..=1000).
    pub async fn latest_sweeps(&self, limit: u32) -> StoreResult<Vec<TaxonomySweep>> {
        let sql = format!(
            "SELECT {SWEEP_COLUMNS} FROM deletion.taxonomy_sweeps \
             ORDER BY finished_at DESC, id LIMIT $1"
        );
        let rows = sqlx::query_as::<_, SweepRow>(sqlx::AssertSqlSafe(sql))
            .bind(i64::from(limit.clamp(1, 1000)))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(TaxonomySweep::from).collect())
    }
}
