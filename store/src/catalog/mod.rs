//! Tenant tables discovered from the catalog, never from a hand-kept list.
//!
//! A tenant table is any ordinary or partitioned table in schema `buzz` with a `community_id`
//! column that does not descend from another one (see [`tenant_tree`]: its partitions and
//! inheritance children are part of it), so a table or partition added later is inventoried and
//! purged too. Every scan checks the two catalog rules of [`rules`] and fails
//! closed, before anything irreversible: each relation's `buzz_write_fence` must fire on every
//! write in every session, and no foreign key may let the purge cascade into non-tenant data.
//! `buzz.communities` itself is keyed by `id`, is not a tenant table, and is deleted last.

pub mod closed_world;
pub(crate) mod rules;
pub(crate) mod tenant_tree;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::TableCount;

use super::Store;
use super::error::{StoreError, StoreResult};
use closed_world::classify::NamedRelation;
use closed_world::summary::{ClosedWorldSummary, InventoriedRelation};
use closed_world::{CheckedWorld, Scope, count_in_scope};
use rules::{foreign_keys, require_fenced, require_no_cascade_out_of_tenant_data, tenant_edges};
pub(crate) use tenant_tree::TenantTable;
use tenant_tree::{RelationKind, count_table_rows, tenant_tables};

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
        Err(StoreError::Catalog(CatalogError::Drift {
            added: now.difference(&then).map(|t| (*t).clone()).collect(),
            removed: then.difference(&now).map(|t| (*t).clone()).collect(),
        }))
    }
}

impl CatalogInventory {
    /// Refuses ([`CatalogError::Drift`]) a closed world that differs from the frozen one:
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
        Err(StoreError::Catalog(CatalogError::Drift { added, removed }))
    }
}

/// Tenant tables that satisfy the fence and key rules and the closed-world check, with the
/// "referencing before referenced" edges between them. Fails closed with
/// [`CatalogError::Unfenced`], [`CatalogError::CascadingReferences`] or
/// [`CatalogError::Refused`].
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
            return Err(StoreError::Catalog(CatalogError::Cycle {
                tables: by_name.values().map(TenantTable::qualified).collect(),
            }));
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
/// each table counted once, with `ONLY`). Fails closed with [`CatalogError::Unfenced`] if a
/// relation's fence would not fire and [`CatalogError::CascadingReferences`] if a foreign key
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
/// ([`CatalogError::CrossTenantReferences`]).
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
        let role = format!("key child through {}", child.key);
        relations.push(own_root(&child.relation, role, None));
        let predicate = plan.predicate(child.relation.oid, "k", Scope::Community, 0);
        key_children.push(count_relation(conn, &child.relation, &predicate, community_id).await?);
    }
    let mut archives = Vec::new();
    for archive in &world.archives {
        let role = "archive table".to_owned();
        relations.push(own_root(&archive.relation, role, Some("community_id")));
        archives.push(count_relation(conn, &archive.relation, IN_COMMUNITY, community_id).await?);
    }
    let mut refreshed_views = Vec::new();
    for view in &world.refreshed_views {
        let count = count_relation(conn, &view.relation, IN_COMMUNITY, community_id).await?;
        refreshed_views.push(count);
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

/// The scope predicate of a relation with a `community_id` column, on alias `k`.
const IN_COMMUNITY: &str = "k.community_id = $1";

/// How the inventory records a relation the purge empties as a root of its own (a key child, an
/// archive table): an ordinary table, named `role`, whose rows of the community `tenant_column`
/// names (none for a key child, reached through its key).
fn own_root(
    relation: &NamedRelation,
    role: String,
    tenant_column: Option<&str>,
) -> InventoriedRelation {
    let name = relation.qualified();
    InventoriedRelation {
        oid: relation.oid,
        relation: name.clone(),
        role,
        root: name,
        relkind: "r".to_owned(),
        tenant_column: tenant_column.map(str::to_owned),
    }
}

/// The community's rows in `relation`, counted through `predicate` (on alias `k`).
async fn count_relation(
    conn: &mut PgConnection,
    relation: &NamedRelation,
    predicate: &str,
    community_id: Uuid,
) -> StoreResult<TableCount> {
    let name = relation.qualified();
    let rows = count_in_scope(conn, &relation.sql_name(), &name, predicate, community_id).await?;
    Ok(TableCount { table: name, rows })
}

impl Store {
    /// Scans the catalog for the community: see [`catalog_scan_in`].
    pub async fn catalog_scan(&self, community_id: Uuid) -> StoreResult<CatalogInventory> {
        let mut conn = self.pool.acquire().await?;
        catalog_scan_in(&mut conn, community_id).await
    }
}

/// Why a store call failed because the tenant catalogue is not one the deletion understands, or a purge statement failed on it: one part of [`crate::StoreError`].
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A relation of a tenant table has no write-fence trigger that fires for every write in
    /// every session; deleting could race live writes.
    #[error(
        "tenant table(s) without a buzz_write_fence trigger that fires on every write: {}; give \
         each the trigger BEFORE INSERT OR UPDATE FOR EACH ROW EXECUTE FUNCTION \
         buzz.refuse_fenced_write(), without WHEN or column list, enabled with ALTER TABLE … \
         ENABLE ALWAYS TRIGGER buzz_write_fence, and unblock",
        .problems.join("; ")
    )]
    Unfenced {
        /// Schema-qualified relations (tables, partitions, inheritance children) whose fence
        /// would not fire.
        tables: Vec<String>,
        /// One line per relation: its name and what is wrong with its fence.
        problems: Vec<String>,
    },
    /// A relation of a tenant table does not declare (soundly) which column holds the pubkey of
    /// the user a row belongs to, or that it holds no user data (migration 0011), or its declared
    /// column is not guaranteed to hold the pubkey in canonical form (migration 0016).
    #[error(
        "tenant table(s) without a sound user-data declaration: {}; give each relation the \
         trigger BEFORE INSERT OR UPDATE FOR EACH ROW EXECUTE FUNCTION buzz.user_data('<the text \
         column holding the user's 64-hex pubkey>' or 'none'), named buzz_user_data and enabled \
         with ALTER TABLE … ENABLE ALWAYS TRIGGER buzz_user_data, and guarantee a declared \
         column's canonical form with a CHECK (<column> ~ '^[0-9a-f]{{64}}$') \
         (docs/data-model.md, \"User data declarations\")",
        .problems.join("; ")
    )]
    UserDataUndeclared {
        /// Schema-qualified relations whose declaration is missing or unsound.
        tables: Vec<String>,
        /// One line per relation: its name and what is wrong.
        problems: Vec<String>,
    },
    /// A foreign key from a table that is not tenant data would change that table's rows when
    /// tenant rows are purged.
    #[error(
        "foreign key(s) from non-tenant tables into tenant tables would change non-tenant rows \
         during the purge: {}; drop the constraint (or change its ON DELETE action to NO ACTION \
         or RESTRICT) and unblock",
        .references.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    CascadingReferences {
        /// The refused constraints.
        references: Vec<crate::error::CascadingReference>,
    },
    /// The closed-world catalogue check found objects the deletion does not understand: each
    /// refusal names the object, what it could do to a tenant's rows, and the remedy.
    #[error(
        "the catalogue holds {} object(s) the deletion does not understand, refused before \
         anything is deleted: {}; after the remedy, unblock (or abort and submit again) \
         (docs/operations.md, \"Catalogue refusals\")",
        .refusals.len(),
        .refusals.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    Refused {
        /// One entry per refused object.
        refusals: Vec<crate::error::CatalogRefusal>,
    },
    /// Rows of another owner reference the target's rows through a foreign key between two
    /// tenant relations: purging would delete, change or be refused by them.
    #[error(
        "{} row(s) of other owners reference the target's rows: {}; remove or re-point those \
         rows (or drop the key), then unblock (docs/operations.md, \"Cross-tenant references\")",
        .references.iter().map(|r| r.rows).sum::<u64>(),
        .references.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    CrossTenantReferences {
        /// One entry per constraint with referencing rows.
        references: Vec<crate::error::CrossReferenceCount>,
    },
    /// A relation the approved inventory covered is no longer where it was (renamed, moved to
    /// another schema, detached, its tenant column dropped, its kind changed): purging or
    /// verifying without it would silently shrink the scope.
    #[error(
        "the deletion's scope shrank since the inventory was approved: {}; restore each \
         relation (rename or move it back, re-attach the partition, restore the column), then \
         unblock (docs/operations.md, \"Scope shrank\")",
        .problems.join("; ")
    )]
    ScopeShrank {
        /// One line per relation: its inventoried name and what changed.
        problems: Vec<String>,
    },
    /// A purge or verification statement failed in a way the store classified: it names the
    /// step, the relation and the remedy, never only a raw database message.
    #[error("{step} on {relation} failed: {reason} (SQLSTATE {sqlstate}); {remedy}")]
    PurgeStatementFailed {
        /// What was being done (`purging rows`, `verifying rows`, `refreshing a view`).
        step: &'static str,
        /// The relation, `schema.name`.
        relation: String,
        /// The SQLSTATE.
        sqlstate: String,
        /// What it means.
        reason: String,
        /// What the operator does.
        remedy: String,
    },
    /// The tenant catalog changed since the inventory was frozen.
    #[error("tenant catalog drifted since the inventory: added {added:?}, removed {removed:?}")]
    Drift {
        /// Tenant tables present now but not in the inventory.
        added: Vec<String>,
        /// Tenant tables in the inventory but gone now.
        removed: Vec<String>,
    },
    /// Tenant tables reference each other in a cycle, so no delete order exists.
    #[error("tenant tables reference each other in a cycle: {tables:?}")]
    Cycle {
        /// The tables left unordered.
        tables: Vec<String>,
    },
}

// Every one is permanent: retrying cannot change the answer.
crate::failure::permanent_failure!(CatalogError);

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
            Err(StoreError::Catalog(CatalogError::Cycle { .. }))
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
            Err(StoreError::Catalog(CatalogError::Drift { added, removed })) => {
                assert_eq!(added, vec!["buzz.c".to_owned()]);
                assert_eq!(removed, vec!["buzz.a".to_owned()]);
            }
            other => panic!("expected drift, got {other:?}"),
        }
        assert!(frozen.require_unchanged_since(&frozen).is_ok());
    }
}
