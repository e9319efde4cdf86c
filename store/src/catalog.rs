//! Tenant tables discovered from the catalog, never from a hand-kept list.
//!
//! A tenant table is any ordinary or partitioned table in schema `buzz` with a `community_id`
//! column that does not descend from another one (see [`super::tenant_tree`]: its partitions and
//! inheritance children are part of it), so a table or partition added later is inventoried and
//! purged too. Every scan checks the two catalog rules of [`super::catalog_rules`] and fails
//! closed, before anything irreversible: each relation's `buzz_write_fence` must fire on every
//! write in every session, and no foreign key may let the purge cascade into non-tenant data.
//! `buzz.communities` itself is keyed by `id`, is not a tenant table, and is deleted last.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::TableCount;

use super::Store;
use super::catalog_rules::{
    foreign_keys, require_fenced, require_no_cascade_out_of_tenant_data, tenant_edges,
};
use super::closed_world::summary::{ClosedWorldSummary, InventoriedRelation};
use super::closed_world::{self, CheckedWorld, Scope, count_in_scope};
use super::error::{StoreError, StoreResult};
pub(crate) use super::tenant_tree::TenantTable;
use super::tenant_tree::{RelationKind, count_table_rows, tenant_tables};

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
    /// The closed-world classification (inventories frozen since encoding version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_world: Option<ClosedWorldSummary>,
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
            return self.require_same_closed_world(frozen);
        }
        Err(StoreError::CatalogDrift {
            added: now.difference(&then).map(|t| (*t).clone()).collect(),
            removed: then.difference(&now).map(|t| (*t).clone()).collect(),
        })
    }
}

impl CatalogInventory {
    /// Refuses ([`StoreError::CatalogDrift`]) a closed world that differs from the frozen one:
    /// a purge-set relation (partition, key child, archive) or a declaration added or removed
    /// since the approval. Inventories frozen before the closed world was recorded have nothing
    /// to compare.
    fn require_same_closed_world(&self, frozen: &CatalogInventory) -> StoreResult<()> {
        let (Some(now), Some(then)) = (&self.closed_world, &frozen.closed_world) else {
            return Ok(());
        };
        // A partition or inheritance child that joined an approved tenant table since is in
        // scope already (its rows are the approved table's): it is not drift.
        let approved: BTreeSet<&String> = frozen.tenant_tables.iter().collect();
        let joined_approved_table = |r: &InventoriedRelation| {
            r.relation != r.root
                && r.tenant_column.as_deref() == Some("community_id")
                && approved.contains(&r.root)
        };
        let items = |world: &ClosedWorldSummary, skip_joined: bool| -> BTreeSet<String> {
            world
                .relations
                .iter()
                .filter(|r| !(skip_joined && joined_approved_table(r)))
                .map(|r| format!("{} ({})", r.relation, r.role))
                .chain(
                    world
                        .declarations
                        .iter()
                        .map(|d| format!("{} declared '{}'", d.object, d.declaration)),
                )
                .collect()
        };
        let added: Vec<String> = items(now, true)
            .difference(&items(then, false))
            .cloned()
            .collect();
        let removed: Vec<String> = items(then, false)
            .difference(&items(now, false))
            .cloned()
            .collect();
        if added.is_empty() && removed.is_empty() {
            return Ok(());
        }
        Err(StoreError::CatalogDrift { added, removed })
    }
}

/// Tenant tables that satisfy the fence and key rules and the closed-world check, with the
/// "referencing before referenced" edges between them. Fails closed with
/// [`StoreError::CatalogUnfenced`], [`StoreError::CatalogCascadingReference`] or
/// [`StoreError::CatalogRefused`].
pub(crate) async fn checked_tenant_tables(conn: &mut PgConnection) -> StoreResult<CheckedCatalog> {
    let tables = tenant_tables(conn).await?;
    require_fenced(&tables)?;
    let keys = foreign_keys(conn).await?;
    require_no_cascade_out_of_tenant_data(&tables, &keys)?;
    let edges = tenant_edges(&tables, &keys);
    let world = closed_world::check(conn, &tables).await?;
    Ok(CheckedCatalog {
        tables,
        edges,
        world,
    })
}

/// The checked catalogue: tenant tables, their key edges, and the closed world around them.
#[derive(Debug, Clone)]
pub(crate) struct CheckedCatalog {
    pub tables: Vec<TenantTable>,
    pub edges: Vec<(String, String)>,
    pub world: CheckedWorld,
}

/// Checked tenant tables ordered so that a table is purged before any tenant table it references
/// by foreign key (ties broken by name), with the closed world. Self-references are ignored; a
/// cycle is refused.
pub(crate) async fn checked_catalog_in_purge_order(
    conn: &mut PgConnection,
) -> StoreResult<(Vec<TenantTable>, CheckedWorld)> {
    let checked = checked_tenant_tables(conn).await?;
    let ordered = purge_order(checked.tables, &checked.edges)?;
    Ok((ordered, checked.world))
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
/// uncommitted table): tenant tables, fenced tables, the community's row counts (every heap of
/// each table counted once, with `ONLY`). Fails closed with [`StoreError::CatalogUnfenced`] if a
/// relation's fence would not fire and [`StoreError::CatalogCascadingReference`] if a foreign key
/// would carry the purge into non-tenant data.
pub async fn catalog_scan_in(
    conn: &mut PgConnection,
    community_id: Uuid,
) -> StoreResult<CatalogInventory> {
    let checked = checked_tenant_tables(conn).await?;
    let tables = checked.tables;
    let mut row_counts = Vec::with_capacity(tables.len());
    for table in &tables {
        row_counts.push(TableCount {
            table: table.qualified(),
            rows: count_table_rows(conn, table, community_id).await?,
        });
    }
    let summary = closed_world_summary(conn, &tables, &checked.world, community_id).await?;
    let tenant_tables: Vec<String> = tables.iter().map(TenantTable::qualified).collect();
    Ok(CatalogInventory {
        fenced_tables: tenant_tables.clone(),
        tenant_tables,
        row_counts,
        closed_world: Some(summary),
    })
}

/// The relkind letter of a tenant relation.
fn relkind_of(kind: RelationKind) -> String {
    match kind {
        RelationKind::Heap => "r".to_owned(),
        RelationKind::Partitioned => "p".to_owned(),
        RelationKind::Foreign => "f".to_owned(),
        RelationKind::Other(c) => c.to_string(),
    }
}

/// The closed world as the inventory records it; refuses cross-tenant references
/// ([`StoreError::CrossTenantReferences`]).
async fn closed_world_summary(
    conn: &mut PgConnection,
    tables: &[TenantTable],
    checked: &CheckedWorld,
    community_id: Uuid,
) -> StoreResult<ClosedWorldSummary> {
    let world = &checked.world;
    let plan = &checked.plan;
    let mut relations = Vec::new();
    for table in tables {
        let root = table.qualified();
        for relation in &table.relations {
            let name = relation.qualified();
            relations.push(InventoriedRelation {
                oid: relation.oid,
                role: if name == root {
                    "tenant table".to_owned()
                } else {
                    format!("tenant relation of {root}")
                },
                relation: name,
                root: root.clone(),
                relkind: relkind_of(relation.kind),
                tenant_column: Some("community_id".to_owned()),
            });
        }
    }
    relations.push(InventoriedRelation {
        oid: world.communities_oid,
        relation: COMMUNITIES_TABLE.to_owned(),
        role: "community row".to_owned(),
        root: COMMUNITIES_TABLE.to_owned(),
        relkind: "r".to_owned(),
        tenant_column: Some("id".to_owned()),
    });
    let mut key_children = Vec::new();
    for child in &world.key_children {
        let name = child.relation.qualified();
        relations.push(InventoriedRelation {
            oid: child.relation.oid,
            relation: name.clone(),
            role: format!("key child through {}", child.key),
            root: name.clone(),
            relkind: "r".to_owned(),
            tenant_column: None,
        });
        let predicate = plan.predicate(child.relation.oid, "k", Scope::Community, 0);
        key_children.push(TableCount {
            table: name,
            rows: count_in_scope(
                conn,
                &child.relation.sql_name(),
                &child.relation.qualified(),
                &predicate,
                community_id,
            )
            .await?,
        });
    }
    let mut archives = Vec::new();
    for archive in &world.archives {
        let name = archive.relation.qualified();
        relations.push(InventoriedRelation {
            oid: archive.relation.oid,
            relation: name.clone(),
            role: "archive table".to_owned(),
            root: name.clone(),
            relkind: "r".to_owned(),
            tenant_column: Some("community_id".to_owned()),
        });
        archives.push(TableCount {
            table: name,
            rows: count_in_scope(
                conn,
                &archive.relation.sql_name(),
                &archive.relation.qualified(),
                "k.community_id = $1",
                community_id,
            )
            .await?,
        });
    }
    let mut refreshed_views = Vec::new();
    for view in &world.refreshed_views {
        refreshed_views.push(TableCount {
            table: view.relation.qualified(),
            rows: count_in_scope(
                conn,
                &view.relation.sql_name(),
                &view.relation.qualified(),
                "k.community_id = $1",
                community_id,
            )
            .await?,
        });
    }
    let cross_references =
        closed_world::cross_reference_counts(conn, plan, Scope::Community, community_id, None)
            .await?;
    closed_world::require_no_cross_references(&cross_references)?;
    Ok(ClosedWorldSummary {
        relations,
        declarations: world.declared.clone(),
        key_children,
        archives,
        refreshed_views,
        cross_references,
        unrelated: world.unrelated.clone(),
    }
    .sorted())
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
            schema: "buzz".into(),
            name: name.into(),
            relations: Vec::new(),
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
            closed_world: None,
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
