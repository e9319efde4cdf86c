//! Deleting one user's rows in one community, heap by heap, in logged batches.
//!
//! Tables are visited in the community purge's order (a table before any tenant table it
//! references, with the same catalog checks), skipping tables that declare no user data and the
//! ones the caller excludes. Each batch is one transaction: check the attempt is still current,
//! delete at most `batch` rows of the user from one heap (`ONLY`, filtered by community and the
//! declared column, matched by `ctid` inside that same heap), log how many. A crash loses at
//! most an uncommitted batch, which a retry deletes again; a committed batch is logged exactly
//! once, so the log's sum is the number of rows deleted.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{ErasureAttempt, PurgeLogKind};
use crate::store::catalog::tenant_tables_in_purge_order;
use crate::store::error::StoreResult;
use crate::store::tenant_tree::TenantRelation;
use crate::store::user_data::declared_tenant_tables;
use crate::store::{Store, count_u64, quote_ident};

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
        let columns: BTreeMap<String, String> = declared_tenant_tables(&mut conn)
            .await?
            .into_iter()
            .filter_map(|d| d.declaration.user_column.map(|c| (d.declaration.table, c)))
            .collect();
        let mut seen = BTreeSet::new();
        let mut targets = Vec::new();
        for table in tenant_tables_in_purge_order(&mut conn).await? {
            let name = table.qualified();
            let Some(column) = columns.get(&name) else {
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
        let mut tx = self.pool.begin().await?;
        attempt.require_current(&mut tx).await?;
        let sql = format!(
            "DELETE FROM ONLY {heap} WHERE community_id = $1 AND {column} = $2 \
             AND ctid = ANY(ARRAY(SELECT ctid FROM ONLY {heap} \
                                  WHERE community_id = $1 AND {column} = $2 LIMIT $3))",
            heap = target.heap.sql_name(),
            column = quote_ident(&target.column)
        );
        let removed = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(community_id)
            .bind(pubkey)
            .bind(i64::from(batch.max(1)))
            .execute(&mut *tx)
            .await?
            .rows_affected();
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
        Ok(count_u64(i64::try_from(removed).unwrap_or(i64::MAX)))
    }
}
