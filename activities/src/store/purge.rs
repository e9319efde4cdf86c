//! Row purge: the community's rows in every tenant table, then the community row.
//!
//! Tables come from the catalog at purge time (a table added after the inventory is purged too;
//! an unfenced one fails closed). Each batch is its own short transaction that re-checks the
//! execution generation and the fence and commits its count to `deletion.purge_progress`, so no
//! statement holds locks for long, a zombie attempt stops at its next batch, and a retried attempt
//! reports what earlier attempts deleted.

use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::{PurgeReport, TableCount};

use super::audit::{WORKFLOW_ACTOR, record_advance};
use super::catalog::{COMMUNITIES_TABLE, TenantTable, tenant_tables_in_purge_order};
use super::error::{StoreError, StoreResult};
use super::stage::Stage;
use super::token::{ExecToken, check_fence_held, lock_for_token};
use super::{Store, count_u64};

/// Adds `rows` to the table's purge count (inside the batch's transaction).
async fn add_progress(
    conn: &mut PgConnection,
    request_id: Uuid,
    table: &str,
    rows: u64,
) -> StoreResult<u64> {
    let total: i64 = sqlx::query_scalar(
        "INSERT INTO deletion.purge_progress (request_id, table_name, rows_deleted) \
         VALUES ($1, $2, $3) ON CONFLICT (request_id, table_name) DO UPDATE \
         SET rows_deleted = purge_progress.rows_deleted + EXCLUDED.rows_deleted, updated_at = now() \
         RETURNING rows_deleted",
    )
    .bind(request_id)
    .bind(table)
    .bind(i64::try_from(rows).unwrap_or(i64::MAX))
    .fetch_one(conn)
    .await?;
    Ok(count_u64(total))
}

impl Store {
    /// Deletes the community's rows in every tenant table in batches of `batch_rows` (children
    /// before the tables they reference), then the community row, then advances
    /// `bindings_removed → postgres_purged` with a checkpoint of the counts — the last step in
    /// the same transaction as the community row's delete. `on_progress(table, rows_so_far)` is
    /// called after each batch (for activity heartbeats).
    pub async fn purge_postgres(
        &self,
        token: &ExecToken,
        batch_rows: u32,
        mut on_progress: impl FnMut(&str, u64),
    ) -> StoreResult<PurgeReport> {
        let batch = i64::from(batch_rows.max(1));
        let tables = {
            let mut conn = self.pool.acquire().await?;
            tenant_tables_in_purge_order(&mut conn).await?
        };
        for table in &tables {
            self.purge_table(token, table, batch, &mut on_progress)
                .await?;
        }

        let mut tx = self.pool.begin().await?;
        let row = lock_for_token(&mut tx, token, &[Stage::BindingsRemoved]).await?;
        check_fence_held(&mut tx, &row).await?;
        let mut remaining = Vec::new();
        for table in &tables {
            let sql = format!(
                "SELECT count(*) FROM {} WHERE community_id = $1",
                table.sql_name()
            );
            let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .bind(token.community_id)
                .fetch_one(&mut *tx)
                .await?;
            if rows > 0 {
                remaining.push(format!("{}: {rows}", table.qualified()));
            }
        }
        if !remaining.is_empty() {
            // Only possible if a tenant table appeared mid-purge; the next attempt picks it up.
            return Err(StoreError::CatalogDrift {
                added: remaining,
                removed: Vec::new(),
            });
        }
        let deleted = sqlx::query("DELETE FROM buzz.communities WHERE id = $1")
            .bind(token.community_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        add_progress(&mut tx, token.request_id, COMMUNITIES_TABLE, deleted).await?;
        let report = purge_report_in(&mut tx, token.request_id).await?;
        let detail = serde_json::json!({
            "tables": report.tables,
            "rows_deleted": report.rows_deleted,
        });
        record_advance(
            &mut tx,
            token.request_id,
            Stage::PostgresPurged,
            token.exec_generation,
            WORKFLOW_ACTOR,
            &detail,
        )
        .await?;
        tx.commit().await?;
        on_progress(COMMUNITIES_TABLE, deleted);
        Ok(report)
    }

    /// Deletes one table's rows of the community, one short generation-checked batch at a time.
    async fn purge_table(
        &self,
        token: &ExecToken,
        table: &TenantTable,
        batch: i64,
        on_progress: &mut impl FnMut(&str, u64),
    ) -> StoreResult<()> {
        let sql = format!(
            "DELETE FROM {name} WHERE ctid = ANY(ARRAY(\
               SELECT ctid FROM {name} WHERE community_id = $1 LIMIT $2))",
            name = table.sql_name()
        );
        let qualified = table.qualified();
        loop {
            let mut tx = self.pool.begin().await?;
            let row = lock_for_token(&mut tx, token, &[Stage::BindingsRemoved]).await?;
            check_fence_held(&mut tx, &row).await?;
            let deleted = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(token.community_id)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let total = add_progress(&mut tx, token.request_id, &qualified, deleted).await?;
            tx.commit().await?;
            on_progress(&qualified, total);
            if i64::try_from(deleted).unwrap_or(i64::MAX) < batch {
                return Ok(());
            }
        }
    }

    /// Rows purged per table so far for the request.
    pub async fn purge_progress(&self, request_id: Uuid) -> StoreResult<Vec<TableCount>> {
        let mut conn = self.pool.acquire().await?;
        Ok(purge_report_in(&mut conn, request_id).await?.tables)
    }
}

/// The purge counts recorded for the request, tables sorted with `buzz.communities` last.
async fn purge_report_in(conn: &mut PgConnection, request_id: Uuid) -> StoreResult<PurgeReport> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT table_name, rows_deleted FROM deletion.purge_progress WHERE request_id = $1 \
         ORDER BY table_name = $2, table_name",
    )
    .bind(request_id)
    .bind(COMMUNITIES_TABLE)
    .fetch_all(conn)
    .await?;
    let tables: Vec<TableCount> = rows
        .into_iter()
        .map(|(table, rows)| TableCount {
            table,
            rows: count_u64(rows),
        })
        .collect();
    Ok(PurgeReport {
        rows_deleted: tables.iter().map(|t| t.rows).sum(),
        tables,
    })
}
