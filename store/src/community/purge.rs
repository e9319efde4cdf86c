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
//! reports what earlier attempts deleted. A heap with a unique index led by `community_id` is
//! walked by that index, each batch after the last key of the one before (`keyset`), so a batch
//! never re-reads the rows purged before it; every heap ends with batches from the start of its
//! rows until one comes back short.

use crate::CatalogError;
use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::{PurgeReport, TableCount};

use super::inventory::frozen_inventory_in;
use super::stage::Stage;
use super::token::{ExecToken, Tx, check_fence_held};
use crate::catalog::closed_world::batch::{
    BatchScope, HeapBatch, classify_statement_error, delete_batch,
};
use crate::catalog::closed_world::classify::{ArchiveTable, RefreshedView};
use crate::catalog::closed_world::guard::require_scope_intact;
use crate::catalog::closed_world::keyset::keyset_for;
use crate::catalog::closed_world::summary::InventoriedRelation;
use crate::catalog::closed_world::{
    Scope, after_dependencies, count_in_scope, cross_reference_counts, require_no_cross_references,
};
use crate::catalog::tenant_tree::{count_heap_rows, tenant_tables};
use crate::catalog::{COMMUNITIES_TABLE, checked_catalog_in_purge_order};
use crate::error::{StoreError, StoreResult};
use crate::{Store, count_u64};

/// What every batch of one purge shares.
struct HeapPurge<'a> {
    token: &'a ExecToken,
    scope: &'a BatchScope<'a>,
    frozen: &'a [InventoriedRelation],
    batch: i64,
}

/// Archive tables ordered so an archive comes after every archive that feeds it.
fn archive_order(archives: &[ArchiveTable]) -> Vec<&ArchiveTable> {
    after_dependencies(
        archives.iter().collect(),
        |a| a.relation.oid,
        |a| a.sources.clone(),
    )
}

/// Refreshes each declared materialized view (in dependency order, through the owner's
/// `buzz.refresh_declared_view`) and proves it holds no row of the community.
async fn refresh_and_verify_views(
    conn: &mut PgConnection,
    views: &[RefreshedView],
    community_id: Uuid,
) -> StoreResult<()> {
    for view in views {
        let name = view.relation.qualified();
        sqlx::query("SELECT buzz.refresh_declared_view($1::int8::oid::regclass)")
            .bind(view.relation.oid)
            .execute(&mut *conn)
            .await
            .map_err(|e| classify_statement_error("refreshing a materialized view", &name, e))?;
        let rows = count_in_scope(
            conn,
            &view.relation.sql_name(),
            &name,
            "k.community_id = $1",
            community_id,
        )
        .await?;
        if rows > 0 {
            return Err(StoreError::Catalog(CatalogError::PurgeStatementFailed {
                step: "verifying a refreshed materialized view",
                relation: name,
                sqlstate: "00000".to_owned(),
                reason: format!("{rows} row(s) of the community remain after the refresh"),
                remedy: "the view reads rows from outside the purge set: drop it or correct its \
                         definition, then unblock"
                    .to_owned(),
            }));
        }
    }
    Ok(())
}

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
    /// Deletes the community's rows in every purge-set relation in batches of `batch_rows`
    /// (tenant tables children before the tables they reference, each batch taking the key-only
    /// children of its rows with it; then the archive tables; then the community row), refreshes
    /// the declared materialized views, proves everything empty, and advances
    /// `bindings_removed → postgres_purged` with a checkpoint of the counts — the last steps in
    /// the same transaction as the community row's delete. The closed-world check runs in the
    /// purge's first transaction; every batch re-checks that no inventoried relation left the
    /// scope. `on_progress(table, rows_so_far)` is called after each batch (for heartbeats).
    pub async fn purge_postgres(
        &self,
        token: &ExecToken,
        batch_rows: u32,
        mut on_progress: impl FnMut(&str, u64),
    ) -> StoreResult<PurgeReport> {
        let batch = i64::from(batch_rows.max(1));
        let frozen = {
            let mut conn = self.pool.acquire().await?;
            frozen_inventory_in(&mut conn, token.request_id)
                .await?
                .catalog
                .closed_world
                .map(|world| world.relations)
                .unwrap_or_default()
        };
        let (tables, checked) = {
            // First: a relation that left the scope is named as such, not as whatever the
            // catalogue check makes of it where it went.
            let mut tx = self.begin_purge_step(token, &frozen).await?;
            let (tables, checked) = checked_catalog_in_purge_order(&mut tx).await?;
            let counts = cross_reference_counts(
                &mut tx,
                &checked.plan,
                Scope::Community,
                token.community_id,
                None,
            )
            .await?;
            require_no_cross_references(&counts)?;
            tx.commit().await?;
            (tables, checked)
        };
        let scope = BatchScope {
            plan: &checked.plan,
            scope: Scope::Community,
            community_id: token.community_id,
            pubkey: None,
        };
        let purge = HeapPurge {
            token,
            scope: &scope,
            frozen: &frozen,
            batch,
        };
        for table in &tables {
            for heap in table.heaps() {
                self.purge_heap(
                    &purge,
                    &table.qualified(),
                    heap.oid,
                    &heap.sql_name(),
                    &heap.qualified(),
                    &mut on_progress,
                )
                .await?;
            }
        }
        for archive in archive_order(&checked.world.archives) {
            let name = archive.relation.qualified();
            self.purge_heap(
                &purge,
                &name,
                archive.relation.oid,
                &archive.relation.sql_name(),
                &name,
                &mut on_progress,
            )
            .await?;
        }

        let mut tx = self.begin_purge_step(token, &frozen).await?;
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
        for archive in &checked.world.archives {
            let rows = count_in_scope(
                &mut tx,
                &archive.relation.sql_name(),
                &archive.relation.qualified(),
                "k.community_id = $1",
                token.community_id,
            )
            .await?;
            if rows > 0 {
                remaining.push(format!("{}: {rows}", archive.relation.qualified()));
            }
        }
        if !remaining.is_empty() {
            // Only possible if a tenant table appeared mid-purge; the next attempt picks it up.
            return Err(StoreError::Catalog(CatalogError::Drift {
                added: remaining,
                removed: Vec::new(),
            }));
        }
        let communities = checked.world.communities_oid;
        let heap = HeapBatch {
            oid: communities,
            sql: &checked.plan.sql_name(communities),
            name: COMMUNITIES_TABLE,
            predicate: "d0.id = $1",
        };
        let deleted = delete_batch(&mut tx, &scope, heap, None, 1).await?;
        for (child, rows) in &deleted.children {
            add_progress(&mut tx, token.request_id, child, *rows).await?;
        }
        add_progress(&mut tx, token.request_id, COMMUNITIES_TABLE, deleted.rows).await?;
        // Every tenant table and key child purged gets a count, zero included (a partitioned
        // table without partitions, a key child none of whose rows were the community's), so
        // the receipt's purge facts name every root the inventory lists.
        let roots = tables.iter().map(|t| t.qualified()).chain(
            checked
                .world
                .key_children
                .iter()
                .map(|c| c.relation.qualified()),
        );
        for root in roots {
            add_progress(&mut tx, token.request_id, &root, 0).await?;
        }
        refresh_and_verify_views(&mut tx, &checked.world.refreshed_views, token.community_id)
            .await?;
        let report = purge_report_in(&mut tx, token.request_id).await?;
        let detail = serde_json::json!({
            "tables": report.tables,
            "rows_deleted": report.rows_deleted,
        });
        token
            .commit_advance(tx, Stage::PostgresPurged, &detail)
            .await?;
        on_progress(COMMUNITIES_TABLE, deleted.rows);
        Ok(report)
    }

    /// A transaction at `bindings_removed` (generation-checked), the fence held and no relation
    /// of the frozen inventory gone from the scope: the start of every step of the purge.
    async fn begin_purge_step(
        &self,
        token: &ExecToken,
        frozen: &[InventoriedRelation],
    ) -> StoreResult<Tx> {
        let (mut tx, row) = self
            .begin_for_token(token, &[Stage::BindingsRemoved])
            .await?;
        check_fence_held(&mut tx, &row).await?;
        require_scope_intact(&mut tx, frozen).await?;
        Ok(tx)
    }

    /// Deletes one heap's rows of the community, one short generation-checked batch at a time,
    /// counting them under `qualified` (the tenant table, or the archive table).
    async fn purge_heap(
        &self,
        purge: &HeapPurge<'_>,
        qualified: &str,
        heap_oid: i64,
        heap_sql: &str,
        heap_name: &str,
        on_progress: &mut impl FnMut(&str, u64),
    ) -> StoreResult<()> {
        let heap = HeapBatch {
            oid: heap_oid,
            sql: heap_sql,
            name: heap_name,
            predicate: "d0.community_id = $1",
        };
        // Walk the heap's unique index led by community_id where it has one (batch k starts
        // after batch k-1's last key, whatever is dead behind it); then, and otherwise, batches
        // from the start of the community's rows until one comes back short.
        let mut keyset = None;
        let mut walking = true;
        loop {
            let mut tx = self.begin_purge_step(purge.token, purge.frozen).await?;
            if walking && keyset.is_none() {
                keyset = keyset_for(&mut tx, heap_oid, "community_id").await?;
                walking = keyset.is_some();
            }
            let cursor = if walking { keyset.as_mut() } else { None };
            let deleted = delete_batch(&mut tx, purge.scope, heap, cursor, purge.batch).await?;
            for (child, rows) in &deleted.children {
                add_progress(&mut tx, purge.token.request_id, child, *rows).await?;
            }
            let total =
                add_progress(&mut tx, purge.token.request_id, qualified, deleted.rows).await?;
            tx.commit().await?;
            on_progress(qualified, total);
            if i64::try_from(deleted.rows).unwrap_or(i64::MAX) < purge.batch {
                if !walking {
                    return Ok(());
                }
                walking = false;
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
