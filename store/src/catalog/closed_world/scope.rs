//! Which rows of each purge-set relation are the target's, as SQL: the one definition the
//! inventory's counts, every purge batch and verification share.
//!
//! A *scope* is whose rows are being deleted: a community's (`$1` is its id) or one user's in one
//! community (`$1` the community, `$2` the user's pubkey). A relation's membership predicate:
//! - a tenant relation: `community_id = $1` (and, for a user, its declared user column `= $2`;
//!   a table declaring no user data holds none of the user's rows);
//! - `buzz.communities`: `id = $1` (never a user's);
//! - an archive table: `community_id = $1` (user scope: none; the user path refuses archives of
//!   user-data tables before anything is deleted);
//! - a key child: its key's columns `IN` the parent's in-scope rows, recursively.

use std::collections::BTreeMap;

use super::classify::{ClosedWorld, CrossKey, KeyChild, NamedRelation};
use crate::catalog::tenant_tree::TenantTable;
use crate::quote_ident;

/// Whose rows a statement deletes or counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope<'a> {
    /// Every row of the community `$1`.
    Community,
    /// The rows of user `$2` in community `$1`; the map gives each tenant table root's declared
    /// user column (`None`: the table holds no user data).
    User(&'a BTreeMap<String, Option<String>>),
}

impl Scope<'_> {
    /// The first placeholder number free for a statement's own parameters.
    pub fn first_free_param(&self) -> usize {
        match self {
            Scope::Community => 2,
            Scope::User(_) => 3,
        }
    }
}

/// How one purge-set relation's rows are attributed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Membership {
    /// A tenant relation of the table rooted at `root` (`schema.name`).
    Tenant { root: String },
    /// `buzz.communities`.
    CommunityRow,
    /// An archive table.
    Archive,
    /// A key child.
    ThroughKey(KeyChild),
}

/// Every purge-set relation with its SQL name and membership.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScopePlan {
    relations: BTreeMap<i64, (NamedRelation, Membership)>,
    /// The tree (every relation) of each tenant relation's table, by relation oid.
    trees: BTreeMap<i64, Vec<i64>>,
    cross_keys: Vec<CrossKey>,
    key_children: Vec<KeyChild>,
}

impl ScopePlan {
    /// The plan for the classified catalogue.
    pub fn new(tenant: &[TenantTable], world: &ClosedWorld, communities: NamedRelation) -> Self {
        let mut plan = ScopePlan::default();
        for table in tenant {
            let tree: Vec<i64> = table.relations.iter().map(|r| r.oid).collect();
            for relation in &table.relations {
                plan.relations.insert(
                    relation.oid,
                    (
                        NamedRelation {
                            oid: relation.oid,
                            schema: relation.schema.clone(),
                            name: relation.name.clone(),
                        },
                        Membership::Tenant {
                            root: table.qualified(),
                        },
                    ),
                );
                plan.trees.insert(relation.oid, tree.clone());
            }
        }
        plan.relations
            .insert(communities.oid, (communities, Membership::CommunityRow));
        for archive in &world.archives {
            plan.relations.insert(
                archive.relation.oid,
                (archive.relation.clone(), Membership::Archive),
            );
        }
        for child in &world.key_children {
            plan.relations.insert(
                child.relation.oid,
                (
                    child.relation.clone(),
                    Membership::ThroughKey(child.clone()),
                ),
            );
        }
        plan.cross_keys = world.cross_keys.clone();
        plan.key_children = world.key_children.clone();
        plan
    }

    /// Whether relation `oid` is in the purge set.
    pub fn contains(&self, oid: i64) -> bool {
        self.relations.contains_key(&oid)
    }

    /// The relation's name, if it is in the purge set.
    pub fn name(&self, oid: i64) -> String {
        self.relations
            .get(&oid)
            .map(|(r, _)| r.qualified())
            .unwrap_or_else(|| format!("relation oid {oid}"))
    }

    /// The predicate selecting the scope's rows of relation `oid` under alias `alias`; `depth`
    /// keeps nested aliases apart.
    pub fn predicate(&self, oid: i64, alias: &str, scope: Scope<'_>, depth: usize) -> String {
        let Some((_, membership)) = self.relations.get(&oid) else {
            return "false".to_owned();
        };
        match (membership, scope) {
            (Membership::Tenant { .. }, Scope::Community)
            | (Membership::Archive, Scope::Community) => {
                format!("{alias}.community_id = $1")
            }
            (Membership::Tenant { root }, Scope::User(columns)) => {
                match columns.get(root).cloned().flatten() {
                    Some(column) => format!(
                        "({alias}.community_id = $1 AND {alias}.{} = $2)",
                        quote_ident(&column)
                    ),
                    None => "false".to_owned(),
                }
            }
            (Membership::CommunityRow, Scope::Community) => format!("{alias}.id = $1"),
            (Membership::CommunityRow | Membership::Archive, Scope::User(_)) => "false".to_owned(),
            (Membership::ThroughKey(child), _) => {
                let parent_alias = format!("p{depth}");
                let parent_sql = self
                    .relations
                    .get(&child.parent_oid)
                    .map(|(r, _)| r.sql_name())
                    .unwrap_or_default();
                format!(
                    "({}) IN (SELECT {} FROM {parent_sql} {parent_alias} WHERE {})",
                    columns_of(alias, &child.columns),
                    columns_of(&parent_alias, &child.parent_columns),
                    self.predicate(child.parent_oid, &parent_alias, scope, depth + 1)
                )
            }
        }
    }

    /// Cross keys that can reference the scope's rows from rows outside it. In community scope
    /// a key carrying `community_id` to the referenced row's community (or to
    /// `buzz.communities.id`) cannot: both rows are of one community by construction.
    pub fn cross_keys(&self, scope: Scope<'_>) -> Vec<&CrossKey> {
        self.cross_keys
            .iter()
            .filter(|key| match scope {
                Scope::Community => !self.same_community_by_construction(key),
                Scope::User(_) => true,
            })
            .collect()
    }

    fn same_community_by_construction(&self, key: &CrossKey) -> bool {
        let referencing_is_tenant = matches!(
            self.relations.get(&key.referencing_oid),
            Some((_, Membership::Tenant { .. } | Membership::Archive))
        );
        let target_column = match self.relations.get(&key.referenced_oid) {
            Some((_, Membership::CommunityRow)) => "id",
            Some((_, Membership::Tenant { .. } | Membership::Archive)) => "community_id",
            _ => return false,
        };
        referencing_is_tenant
            && key
                .columns
                .iter()
                .zip(&key.referenced_columns)
                .any(|(from, to)| from == "community_id" && to == target_column)
    }

    /// The expression naming a referencing row's community, if its relation has one.
    pub fn community_of(&self, oid: i64, alias: &str) -> String {
        match self.relations.get(&oid) {
            Some((_, Membership::Tenant { .. } | Membership::Archive)) => {
                format!("{alias}.community_id::text")
            }
            Some((_, Membership::CommunityRow)) => format!("{alias}.id::text"),
            _ => "NULL::text".to_owned(),
        }
    }

    /// The SQL name of a purge-set relation.
    pub fn sql_name(&self, oid: i64) -> String {
        self.relations
            .get(&oid)
            .map(|(r, _)| r.sql_name())
            .unwrap_or_default()
    }

    /// Every relation of the tree `oid` belongs to (itself, if it is not a tenant relation).
    pub fn tree_of(&self, oid: i64) -> Vec<i64> {
        self.trees.get(&oid).cloned().unwrap_or_else(|| vec![oid])
    }

    /// Key children whose membership key references any relation of `oids`.
    pub fn key_children_of(&self, oids: &[i64]) -> Vec<&KeyChild> {
        self.key_children
            .iter()
            .filter(|c| oids.contains(&c.parent_oid))
            .collect()
    }

    /// The query counting rows outside the scope that reference rows inside it through `key`:
    /// one row, `(count, communities)`.
    pub fn cross_reference_query(&self, key: &CrossKey, scope: Scope<'_>) -> String {
        let inside = format!(
            "SELECT {} FROM {} d WHERE {}",
            columns_of("d", &key.referenced_columns),
            self.sql_name(key.referenced_oid),
            self.predicate(key.referenced_oid, "d", scope, 10)
        );
        self.cross_reference_sql(key, scope, &inside)
    }

    /// The query counting rows outside the scope that reference, through `key`, any row the
    /// subquery `inside` selects (it selects the key's referenced columns): one row,
    /// `(count, communities)`.
    pub fn cross_reference_sql(&self, key: &CrossKey, scope: Scope<'_>, inside: &str) -> String {
        format!(
            "SELECT count(*)::int8, COALESCE(array_agg(DISTINCT {community}) FILTER \
                 (WHERE {community} IS NOT NULL), '{{}}') \
             FROM {referencing} r WHERE ({outside}) IS NOT TRUE AND ({columns}) IN ({inside})",
            community = self.community_of(key.referencing_oid, "r"),
            referencing = self.sql_name(key.referencing_oid),
            outside = self.predicate(key.referencing_oid, "r", scope, 0),
            columns = columns_of("r", &key.columns),
        )
    }
}

/// `alias.a, alias.b`.
pub(crate) fn columns_of(alias: &str, columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| format!("{alias}.{}", quote_ident(c)))
        .collect::<Vec<_>>()
        .join(", ")
}
