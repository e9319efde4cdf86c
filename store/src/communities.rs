//! The communities (tenants) of the relay platform: looking one up by host or id, and reading
//! its rows in every tenant table (counts for verification, byte-exact snapshots for proving a
//! neighbour untouched). Demo rows are written by the `demo` crate.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Postgres;
use uuid::Uuid;
use workflows::community::contracts::TableCount;

use super::catalog::COMMUNITIES_TABLE;
use super::catalog::tenant_tree::{count_table_rows, tenant_tables};
use super::error::{StoreError, StoreResult};
use super::{Store, count_u64};

/// A tenant of the relay platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Community {
    /// Community id (lowercase hyphenated UUID in every key that names it).
    pub id: Uuid,
    /// The host it is served under, lower-cased.
    pub host: String,
    /// Display name.
    pub display_name: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// A community's rows in one table, each as JSON text, sorted: two snapshots are equal exactly
/// when the rows are byte-identical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableSnapshot {
    /// Schema-qualified table.
    pub table: String,
    /// Rows as `to_jsonb(row)::text`, sorted.
    pub rows: Vec<String>,
}

/// The canonical spelling of a host (`workflows::host`, the rule the CLI applies too), refused as
/// invalid input when it is not a host name.
pub fn normalize_host(host: &str) -> StoreResult<String> {
    workflows::host::normalize(host).map_err(|e| StoreError::InvalidInput {
        field: "host",
        reason: e.to_string(),
    })
}

impl Store {
    /// The community served under `host` (matched after normalising), if any.
    pub async fn community_by_host(&self, host: &str) -> StoreResult<Option<Community>> {
        let host = normalize_host(host)?;
        self.community_where("host = $1", host).await
    }

    /// The community with this id, if it still exists.
    pub async fn community_by_id(&self, community_id: Uuid) -> StoreResult<Option<Community>> {
        self.community_where("id = $1", community_id).await
    }

    /// The community `condition` (on `buzz.communities`, with `value` as `$1`) selects, if any.
    async fn community_where<V>(
        &self,
        condition: &'static str,
        value: V,
    ) -> StoreResult<Option<Community>>
    where
        V: for<'q> sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres> + Send,
    {
        let sql = format!(
            "SELECT id, host, display_name, created_at FROM buzz.communities WHERE {condition}"
        );
        let community = sqlx::query_as::<_, Community>(sqlx::AssertSqlSafe(sql))
            .bind(value)
            .fetch_optional(&self.pool)
            .await?;
        Ok(community)
    }

    /// Every row of the community in every tenant table plus its community row, as sorted JSON
    /// text per table (tables sorted, `buzz.communities` last). Used to prove another community
    /// was left byte-identical.
    pub async fn snapshot_rows(&self, community_id: Uuid) -> StoreResult<Vec<TableSnapshot>> {
        let mut conn = self.pool.acquire().await?;
        let mut snapshots = Vec::new();
        for table in tenant_tables(&mut conn).await? {
            let mut rows: Vec<String> = Vec::new();
            for heap in table.heaps() {
                let sql = format!(
                    "SELECT to_jsonb(t)::text FROM ONLY {} t WHERE community_id = $1",
                    heap.sql_name()
                );
                let heap_rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .bind(community_id)
                    .fetch_all(&mut *conn)
                    .await?;
                rows.extend(heap_rows);
            }
            rows.sort();
            snapshots.push(TableSnapshot {
                table: table.qualified(),
                rows,
            });
        }
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT to_jsonb(c)::text FROM buzz.communities c WHERE id = $1 ORDER BY 1",
        )
        .bind(community_id)
        .fetch_all(&mut *conn)
        .await?;
        snapshots.push(TableSnapshot {
            table: COMMUNITIES_TABLE.to_owned(),
            rows,
        });
        Ok(snapshots)
    }

    /// Rows of the community per tenant table (every heap of its tree counted once, whether or
    /// not its fence is sound: counting is how a leftover is found), `buzz.communities` (0 or 1)
    /// last.
    pub async fn count_community_rows(&self, community_id: Uuid) -> StoreResult<Vec<TableCount>> {
        let mut conn = self.pool.acquire().await?;
        let mut counts = Vec::new();
        for table in tenant_tables(&mut conn).await? {
            counts.push(TableCount {
                table: table.qualified(),
                rows: count_table_rows(&mut conn, &table, community_id).await?,
            });
        }
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM buzz.communities WHERE id = $1")
            .bind(community_id)
            .fetch_one(&mut *conn)
            .await?;
        counts.push(TableCount {
            table: COMMUNITIES_TABLE.to_owned(),
            rows: count_u64(rows),
        });
        Ok(counts)
    }
}
