//! Tenant tables discovered from the catalog, never from a hand-kept list.
//!
//! A tenant table is any ordinary or partitioned table (not a partition) in schema `buzz` with a
//! `community_id` column, so a table added later is inventoried and purged too. It is *fenced*
//! when it carries an enabled `buzz_write_fence` row trigger firing BEFORE INSERT and UPDATE and
//! executing `buzz.refuse_fenced_write()`. A tenant table without it fails the scan closed:
//! deleting while an unfenced writer can still insert would leave rows behind.
//! `buzz.communities` itself is keyed by `id`, is not a tenant table, and is deleted last.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::TableCount;

use super::error::{StoreError, StoreResult};
use super::{Store, count_u64, quote_ident};

/// The serving schema.
pub const TENANT_SCHEMA: &str = "buzz";

/// The community row's table (keyed by `id`, deleted after every tenant table).
pub const COMMUNITIES_TABLE: &str = "buzz.communities";

/// What the catalog says about the tenant model, with the community's row counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogInventory {
    /// Schema-qualified tenant tables, sorted.
    pub tenant_tables: Vec<String>,
    /// Tenant tables carrying the write-fence trigger, sorted (equal to `tenant_tables`, or the
    /// scan would have failed).
    pub fenced_tables: Vec<String>,
    /// The community's rows per tenant table, in `tenant_tables` order.
    pub row_counts: Vec<TableCount>,
}

impl CatalogInventory {
    /// Sum of the row counts.
    pub fn total_rows(&self) -> u64 {
        self.row_counts.iter().map(|count| count.rows).sum()
    }

    /// Refuses a catalog whose tenant tables differ from `frozen`'s (a table added or dropped
    /// since the inventory the operator approved).
    pub fn require_unchanged_since(&self, frozen: &CatalogInventory) -> StoreResult<()> {
        let now: BTreeSet<&String> = self.tenant_tables.iter().collect();
        let then: BTreeSet<&String> = frozen.tenant_tables.iter().collect();
        if now == then {
            return Ok(());
        }
        Err(StoreError::CatalogDrift {
            added: now.difference(&then).map(|t| (*t).clone()).collect(),
            removed: then.difference(&now).map(|t| (*t).clone()).collect(),
        })
    }
}

/// One tenant table as found in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct TenantTable {
    pub schema: String,
    pub name: String,
    pub fenced: bool,
}

impl TenantTable {
    /// `schema.name`, as reported to operators.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// `"schema"."name"`, for SQL.
    pub fn sql_name(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

/// Tenant tables with whether each is fenced, sorted by name. Trigger type bits (pg_trigger.h):
/// ROW = 1, BEFORE = 2, INSERT = 4, UPDATE = 16, so a correct fence has all of 23 set.
pub(crate) async fn tenant_tables(conn: &mut PgConnection) -> StoreResult<Vec<TenantTable>> {
    let tables = sqlx::query_as::<_, TenantTable>(
        "SELECT n.nspname::text AS schema, c.relname::text AS name, \
                EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t \
                         WHERE t.tgrelid = c.oid AND t.tgname = 'buzz_write_fence' \
                           AND t.tgfoid = 'buzz.refuse_fenced_write()'::regprocedure \
                           AND t.tgenabled <> 'D' AND (t.tgtype & 23) = 23) AS fenced \
         FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'community_id' \
                                       AND a.attnum > 0 AND NOT a.attisdropped \
         WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
         ORDER BY c.relname",
    )
    .bind(TENANT_SCHEMA)
    .fetch_all(conn)
    .await?;
    Ok(tables)
}

/// Tenant tables, failing closed with [`StoreError::CatalogUnfenced`] if any lacks the fence.
pub(crate) async fn fenced_tenant_tables(conn: &mut PgConnection) -> StoreResult<Vec<TenantTable>> {
    let tables = tenant_tables(conn).await?;
    let unfenced: Vec<String> = tables
        .iter()
        .filter(|table| !table.fenced)
        .map(TenantTable::qualified)
        .collect();
    if unfenced.is_empty() {
        Ok(tables)
    } else {
        Err(StoreError::CatalogUnfenced { tables: unfenced })
    }
}

/// Fenced tenant tables ordered so that a table is purged before any tenant table it references
/// by foreign key (ties broken by name). Self-references are ignored; a cycle is refused.
pub(crate) async fn tenant_tables_in_purge_order(
    conn: &mut PgConnection,
) -> StoreResult<Vec<TenantTable>> {
    let tables = fenced_tenant_tables(conn).await?;
    let edges: Vec<(String, String)> = sqlx::query_as(
        "SELECT child.relname::text, parent.relname::text \
         FROM pg_catalog.pg_constraint con \
         JOIN pg_catalog.pg_class child ON child.oid = con.conrelid \
         JOIN pg_catalog.pg_class parent ON parent.oid = con.confrelid \
         JOIN pg_catalog.pg_namespace cn ON cn.oid = child.relnamespace \
         JOIN pg_catalog.pg_namespace pn ON pn.oid = parent.relnamespace \
         WHERE con.contype = 'f' AND cn.nspname = $1 AND pn.nspname = $1",
    )
    .bind(TENANT_SCHEMA)
    .fetch_all(conn)
    .await?;
    purge_order(tables, &edges)
}

/// Kahn's algorithm over "child references parent" edges: children first.
fn purge_order(
    tables: Vec<TenantTable>,
    edges: &[(String, String)],
) -> StoreResult<Vec<TenantTable>> {
    let names: BTreeSet<String> = tables.iter().map(|t| t.name.clone()).collect();
    // For each table, the tenant tables that reference it and must be emptied first.
    let mut blockers: BTreeMap<String, BTreeSet<String>> = names
        .iter()
        .map(|name| (name.clone(), BTreeSet::new()))
        .collect();
    for (child, parent) in edges {
        if child != parent && names.contains(child) && names.contains(parent) {
            blockers
                .entry(parent.clone())
                .or_default()
                .insert(child.clone());
        }
    }
    let mut by_name: BTreeMap<String, TenantTable> =
        tables.into_iter().map(|t| (t.name.clone(), t)).collect();
    let mut ordered = Vec::with_capacity(by_name.len());
    while !by_name.is_empty() {
        let ready: Vec<String> = by_name
            .keys()
            .filter(|name| blockers.get(*name).is_none_or(BTreeSet::is_empty))
            .cloned()
            .collect();
        if ready.is_empty() {
            return Err(StoreError::CatalogCycle {
                tables: by_name.values().map(TenantTable::qualified).collect(),
            });
        }
        for name in ready {
            if let Some(table) = by_name.remove(&name) {
                ordered.push(table);
            }
            for referenced_by in blockers.values_mut() {
                referenced_by.remove(&name);
            }
        }
    }
    Ok(ordered)
}

/// Scans the catalog on the given connection (so a test can scan inside a transaction holding an
/// uncommitted table): tenant tables, fenced tables, the community's row counts. Fails closed
/// with [`StoreError::CatalogUnfenced`] if any tenant table lacks the fence trigger.
pub async fn catalog_scan_in(
    conn: &mut PgConnection,
    community_id: Uuid,
) -> StoreResult<CatalogInventory> {
    let tables = fenced_tenant_tables(conn).await?;
    let mut row_counts = Vec::with_capacity(tables.len());
    for table in &tables {
        let sql = format!(
            "SELECT count(*) FROM {} WHERE community_id = $1",
            table.sql_name()
        );
        let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(community_id)
            .fetch_one(&mut *conn)
            .await?;
        row_counts.push(TableCount {
            table: table.qualified(),
            rows: count_u64(rows),
        });
    }
    let tenant_tables: Vec<String> = tables.iter().map(TenantTable::qualified).collect();
    Ok(CatalogInventory {
        fenced_tables: tenant_tables.clone(),
        tenant_tables,
        row_counts,
    })
}

impl Store {
    /// Scans the catalog for the community: see [`catalog_scan_in`].
    pub async fn catalog_scan(&self, community_id: Uuid) -> StoreResult<CatalogInventory> {
        let mut conn = self.pool.acquire().await?;
        catalog_scan_in(&mut conn, community_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str) -> TenantTable {
        TenantTable {
            schema: TENANT_SCHEMA.into(),
            name: name.into(),
            fenced: true,
        }
    }

    fn names(tables: &[TenantTable]) -> Vec<&str> {
        tables.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn referencing_tables_are_purged_before_the_tables_they_reference() {
        let tables = vec![table("channels"), table("events"), table("reactions")];
        let edges = vec![
            ("events".to_owned(), "channels".to_owned()),
            ("reactions".to_owned(), "events".to_owned()),
            ("events".to_owned(), "communities".to_owned()),
        ];
        let ordered = purge_order(tables, &edges).map(|t| names(&t).join(","));
        assert_eq!(ordered.ok().as_deref(), Some("reactions,events,channels"));
    }

    #[test]
    fn unrelated_tables_keep_name_order_and_self_references_are_ignored() {
        let tables = vec![table("b"), table("a"), table("c")];
        let edges = vec![("c".to_owned(), "c".to_owned())];
        let ordered = purge_order(tables, &edges).map(|t| names(&t).join(","));
        assert_eq!(ordered.ok().as_deref(), Some("a,b,c"));
    }

    #[test]
    fn reference_cycles_are_refused() {
        let tables = vec![table("a"), table("b")];
        let edges = vec![
            ("a".to_owned(), "b".to_owned()),
            ("b".to_owned(), "a".to_owned()),
        ];
        assert!(matches!(
            purge_order(tables, &edges),
            Err(StoreError::CatalogCycle { .. })
        ));
    }

    #[test]
    fn drift_names_added_and_removed_tables() {
        let frozen = CatalogInventory {
            tenant_tables: vec!["buzz.a".into(), "buzz.b".into()],
            fenced_tables: vec![],
            row_counts: vec![],
        };
        let live = CatalogInventory {
            tenant_tables: vec!["buzz.b".into(), "buzz.c".into()],
            ..frozen.clone()
        };
        match live.require_unchanged_since(&frozen) {
            Err(StoreError::CatalogDrift { added, removed }) => {
                assert_eq!(added, vec!["buzz.c".to_owned()]);
                assert_eq!(removed, vec!["buzz.a".to_owned()]);
            }
            other => panic!("expected drift, got {other:?}"),
        }
        assert!(frozen.require_unchanged_since(&frozen).is_ok());
    }
}
