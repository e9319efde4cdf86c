//! Deleting one user's rows in one community, heap by heap, in logged batches.
//!
//! Tables are visited in the community purge's order (a table before any tenant table it
//! references, with the same catalog checks), skipping tables that declare no user data and the
//! ones the caller excludes. Each batch is one transaction: check the attempt is still current,
//! delete at most `batch` rows of the user from one heap (`ONLY`, filtered by community and the
//! declared column, matched by `ctid` inside that same heap), log how many. A crash loses at
//! most an uncommitted batch, which a retry deletes again; a committed batch is logged exactly
//! once, so the log's sum is the number of rows deleted.

use crate::CatalogError;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use uuid::Uuid;

use super::{ErasureAttempt, PurgeLogKind};
use crate::catalog::checked_catalog_in_purge_order;
use crate::catalog::closed_world::batch::{BatchScope, HeapBatch, delete_batch};
use crate::catalog::closed_world::{CheckedWorld, Scope};
use crate::catalog::tenant_tree::TenantRelation;
use crate::error::{CatalogRefusal, StoreError, StoreResult};
use crate::user::data::declared_tenant_tables;
use crate::{Store, quote_ident};

/// Which declared tables a row purge covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowScope<'a> {
    /// Every declared table except these (schema-qualified roots).
    AllExcept(&'a [&'a str]),
    /// Only this table.
    Only(&'a str),
}

impl RowScope<'_> {
    fn covers(&self, table: &str) -> bool {
        match self {
            RowScope::AllExcept(excluded) => !excluded.contains(&table),
            RowScope::Only(only) => *only == table,
        }
    }
}

/// One heap a row purge deletes from, with the declared column of its table.
#[derive(Debug, Clone)]
pub struct RowTarget {
    /// The tenant table (root, `schema.name`) the heap belongs to.
    pub table: String,
    pub(crate) heap: TenantRelation,
    pub(crate) column: String,
    /// The classified catalogue the targets were computed under (key children, cross keys).
    pub(crate) world: Arc<CheckedWorld>,
    /// Each declared tenant table's user column.
    pub(crate) columns: Arc<BTreeMap<String, Option<String>>>,
}

impl RowTarget {
    /// The heap, `schema.name`.
    pub fn heap(&self) -> String {
        self.heap.qualified()
    }
}

impl Store {
    /// The heaps a row purge of `scope` deletes from, in purge order (a table before any tenant
    /// table it references; the catalog checks of the community purge apply and fail closed).
    pub async fn user_row_targets(&self, scope: RowScope<'_>) -> StoreResult<Vec<RowTarget>> {
        let mut conn = self.pool.acquire().await?;
        let declared: BTreeMap<String, Option<String>> = declared_tenant_tables(&mut conn)
            .await?
            .into_iter()
            .map(|d| (d.declaration.table, d.declaration.user_column))
            .collect();
        let (tables, world) = checked_catalog_in_purge_order(&mut conn).await?;
        refuse_archives_of_user_data(&world, &tables, &declared)?;
        let world = Arc::new(world);
        let columns = Arc::new(declared);
        let mut seen = BTreeSet::new();
        let mut targets = Vec::new();
        for table in tables {
            let name = table.qualified();
            let Some(Some(column)) = columns.get(&name).cloned() else {
                continue;
            };
            if !scope.covers(&name) || !seen.insert(name.clone()) {
                continue;
            }
            for heap in table.heaps() {
                targets.push(RowTarget {
                    table: name.clone(),
                    heap: heap.clone(),
                    column: column.clone(),
                    world: Arc::clone(&world),
                    columns: Arc::clone(&columns),
                });
            }
        }
        Ok(targets)
    }

    /// One batch: at most `batch` rows of the user in `community_id` deleted from the target's
    /// heap, and logged, in one transaction that first checks the attempt is current. Returns
    /// how many were deleted (0: none is left).
    pub async fn erase_row_batch(
        &self,
        attempt: &ErasureAttempt,
        community_id: Uuid,
        target: &RowTarget,
        pubkey: &str,
        batch: u32,
    ) -> StoreResult<u64> {
        let mut tx = self.begin_attempt(attempt).await?;
        let scope = BatchScope {
            plan: &target.world.plan,
            scope: Scope::User(&target.columns),
            community_id,
            pubkey: Some(pubkey),
        };
        let predicate = format!(
            "d0.community_id = $1 AND d0.{} = $2",
            quote_ident(&target.column)
        );
        let heap = HeapBatch {
            oid: target.heap.oid,
            sql: &target.heap.sql_name(),
            name: &target.heap.qualified(),
            predicate: &predicate,
        };
        let deleted = delete_batch(&mut tx, &scope, heap, None, i64::from(batch.max(1))).await?;
        for (child, rows) in &deleted.children {
            attempt
                .log(&mut tx, community_id, PurgeLogKind::Rows, child, *rows)
                .await?;
        }
        let removed = deleted.rows;
        if removed > 0 {
            attempt
                .log(
                    &mut tx,
                    community_id,
                    PurgeLogKind::Rows,
                    &target.heap.qualified(),
                    removed,
                )
                .await?;
        }
        tx.commit().await?;
        Ok(removed)
    }
}

/// Fails closed ([`CatalogError::Refused`]) when a declared archive is fed from a table
/// holding user data, or a declared materialized view exists: a user erasure neither purges
/// archive tables nor refreshes views (only a community deletion does), so the user's rows
/// would be left behind there.
fn refuse_archives_of_user_data(
    world: &CheckedWorld,
    tables: &[crate::catalog::tenant_tree::TenantTable],
    declared: &BTreeMap<String, Option<String>>,
) -> StoreResult<()> {
    let mut refusals = Vec::new();
    for archive in &world.world.archives {
        for source in &archive.sources {
            let table = tables
                .iter()
                .find(|t| t.relations.iter().any(|r| r.oid == *source));
            let Some(table) = table else { continue };
            if declared
                .get(&table.qualified())
                .cloned()
                .flatten()
                .is_some()
            {
                refusals.push(CatalogRefusal {
                    object: format!("archive table {}", archive.relation.qualified()),
                    problem: format!(
                        "is fed from {}, which holds user data, and a user erasure does not purge \
                         archive tables: the user's archived rows would be left behind",
                        table.qualified()
                    ),
                    remedy: "delete the user's rows from the archive table by hand before the \
                             erasure and drop the archive trigger for its duration, or erase the \
                             whole community instead"
                        .to_owned(),
                });
            }
        }
    }
    // A declared materialized view is refreshed by a community deletion only; after a user
    // erasure it would keep the user's rows until someone refreshes it.
    for view in &world.world.refreshed_views {
        refusals.push(CatalogRefusal {
            object: format!("materialized view {}", view.relation.qualified()),
            problem: "is declared 'refreshed by the deletion', but a user erasure does not \
                      refresh materialized views: the user's rows would stay in it"
                .to_owned(),
            remedy: "drop the view for the duration of the erasure, or declare it 'not tenant \
                     data' if it holds no user's rows"
                .to_owned(),
        });
    }
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Catalog(CatalogError::Refused { refusals }))
    }
}
