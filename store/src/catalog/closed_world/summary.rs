//! What the frozen inventory records of the closed world, bound by its digest: every relation of
//! the purge set by oid and name with its role and tenant column, every declaration relied on,
//! the target's rows in key children, archives and refreshed views, the cross-reference counts
//! (all zero, or the inventory would have been refused), and what was judged unrelated.

use serde::{Deserialize, Serialize};
use workflows::community::contracts::TableCount;

use super::classify::DeclaredObject;
use crate::error::CrossReferenceCount;
use crate::put_canonical_field;

/// One relation of the purge set, as inventoried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoriedRelation {
    /// `pg_class.oid` at inventory time.
    pub oid: i64,
    /// `schema.name` at inventory time.
    pub relation: String,
    /// What it is to the deletion: `tenant table`, `tenant relation of <root>`, `community row`,
    /// `key child through <key>`, `archive table`.
    pub role: String,
    /// The tenant table it belongs to (`schema.name` of the root); itself when it is a root or
    /// not a tenant relation.
    pub root: String,
    /// `pg_class.relkind`.
    pub relkind: String,
    /// The column attributing its rows to a community (`community_id`, `id`), if it has one.
    pub tenant_column: Option<String>,
}

/// The closed world as the inventory froze it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedWorldSummary {
    /// Every purge-set relation, sorted by name.
    pub relations: Vec<InventoriedRelation>,
    /// Declarations relied on, sorted by object.
    pub declarations: Vec<DeclaredObject>,
    /// The target's rows per key-only child table.
    pub key_children: Vec<TableCount>,
    /// The target's rows per archive table.
    pub archives: Vec<TableCount>,
    /// The target's rows per declared materialized view (before the purge's refresh).
    pub refreshed_views: Vec<TableCount>,
    /// Rows of other owners referencing the target's, per cross key (all zero).
    pub cross_references: Vec<CrossReferenceCount>,
    /// Relations judged to hold no tenant data (`kind schema.name`).
    pub unrelated: Vec<String>,
}

impl ClosedWorldSummary {
    /// Sorts every list (the canonical order).
    pub fn sorted(mut self) -> Self {
        self.relations.sort_by(|a, b| a.relation.cmp(&b.relation));
        self.declarations.sort_by(|a, b| a.object.cmp(&b.object));
        for list in [
            &mut self.key_children,
            &mut self.archives,
            &mut self.refreshed_views,
        ] {
            list.sort_by(|a, b| a.table.cmp(&b.table));
        }
        self.cross_references
            .sort_by(|a, b| (&a.constraint, &a.referencing).cmp(&(&b.constraint, &b.referencing)));
        self.unrelated.sort();
        self
    }

    /// Appends the canonical encoding (every list in canonical order) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let sorted = self.clone().sorted();
        let put = |out: &mut Vec<u8>, field: &str| put_canonical_field(out, field);
        put(out, &sorted.relations.len().to_string());
        for r in &sorted.relations {
            put(out, &r.oid.to_string());
            put(out, &r.relation);
            put(out, &r.role);
            put(out, &r.root);
            put(out, &r.relkind);
            put(out, r.tenant_column.as_deref().unwrap_or(""));
        }
        put(out, &sorted.declarations.len().to_string());
        for d in &sorted.declarations {
            put(out, &d.object);
            put(out, &d.declaration);
        }
        for list in [
            &sorted.key_children,
            &sorted.archives,
            &sorted.refreshed_views,
        ] {
            put(out, &list.len().to_string());
            for count in list {
                put(out, &count.table);
                put(out, &count.rows.to_string());
            }
        }
        put(out, &sorted.cross_references.len().to_string());
        for c in &sorted.cross_references {
            put(out, &c.constraint);
            put(out, &c.referencing);
            put(out, &c.referenced);
            put(out, &c.rows.to_string());
        }
        put(out, &sorted.unrelated.len().to_string());
        for u in &sorted.unrelated {
            put(out, u);
        }
    }

    /// Relations the deletion purges beyond the tenant tables, `schema.name`.
    pub fn derived_tables(&self) -> impl Iterator<Item = &str> {
        self.key_children
            .iter()
            .chain(&self.archives)
            .map(|c| c.table.as_str())
    }
}
