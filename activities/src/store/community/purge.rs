//! Row purge: the community's rows in every tenant table, then the community row.
//!
//! Tables come from the catalog at purge time (a table or partition added after the inventory is
//! purged too; a relation whose fence would not fire, or a foreign key cascading into non-tenant
//! data, fails closed before the first delete). Rows are deleted one heap at a time: every
//! statement names the heap with `ONLY`, filters by `community_id` itself and matches the batch by
//! `(tableoid, ctid)`, because a ctid is unique only inside one physical table (a sibling partition
//! or an inheritance child can hold another community's row at the same ctid). Each batch is its own short transaction that re-checks the
//! execution generation and the fence and commits its count to `deletion.purge_progress`, so no
//! statement holds locks for long, a zombie attempt stops at its next batch, and a retried attempt
//! reports what earlier attempts deleted.

use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::{PurgeReport, TableCount};

use super::audit::{WORKFLOW_ACTOR, record_advance};
use super::stage::Stage;
use super::token::{ExecToken, check_fence_held, lock_for_token};
use crate::store::catalog::{COMMUNITIES_TABLE, TenantTable, tenant_tables_in_purge_order};
use crate::store::error::{StoreError, StoreResult};
use crate::store::tenant_tree::{TenantRelation, count_heap_rows, tenant_tables};
use crate::store::{Store, count_u64};

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
        // Re-discovered here: a partition attached or a table added during the batches is counted.
        let mut remaining = Vec::new();
        for table in tenant_tables(&mut tx).await? {
            for heap in table.heaps() {
                let rows = count_heap_rows(&mut tx, heap, token.community_id).await?;
                if rows > 0 {
                    remaining.push(format!("{}: {rows}", heap.qualified()));
                }
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

    /// Deletes one table's rows of the community, heap by heap.
    async fn purge_table(
        &self,
        token: &ExecToken,
        table: &TenantTable,
        batch: i64,
        on_progress: &mut impl FnMut(&str, u64),
    ) -> StoreResult<()> {
        for heap in table.heaps() {
            self.purge_heap(token, &table.qualified(), heap, batch, on_progress)
                .await?;
        }
        Ok(())
    }

    /// Deletes one heap's rows of the community, one short generation-checked batch at a time,
    /// counting them under the tenant table `qualified`.
    async fn purge_heap(
        &self,
        token: &ExecToken,
        qualified: &str,
        heap: &TenantRelation,
        batch: i64,
        on_progress: &mut impl FnMut(&str, u64),
    ) -> StoreResult<()> {
        let sql = format!(
            "DELETE FROM ONLY {name} WHERE community_id = $1 AND tableoid = $3::int8::oid \
               AND ctid = ANY(ARRAY(\
                 SELECT ctid FROM ONLY {name} WHERE community_id = $1 AND tableoid = $3::int8::oid \
                 LIMIT $2))",
            name = heap.sql_name()
        );
        loop {
            let mut tx = self.pool.begin().await?;
            let row = lock_for_token(&mut tx, token, &[Stage::BindingsRemoved]).await?;
            check_fence_held(&mut tx, &row).await?;
            let deleted = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(token.community_id)
                .bind(batch)
                .bind(heap.oid)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let total = add_progress(&mut tx, token.request_id, qualified, deleted).await?;
            tx.commit().await?;
            on_progress(qualified, total);
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
