//! The two rules a tenant catalog must satisfy before anything is deleted.
//!
//! **Fence rule.** Every relation of every tenant table (root, each partition at any depth with its
//! cloned trigger, each inheritance child with its own) carries a `buzz_write_fence` trigger that
//! fires for every row write in every session: `BEFORE INSERT OR UPDATE FOR EACH ROW`, enabled
//! `ALWAYS` (an `ENABLE`d trigger is skipped under `session_replication_role = replica`), without a
//! `WHEN` condition or a column list, executing `buzz.refuse_fenced_write()`. A foreign table
//! cannot be purged or proven empty from here and is refused too.
//!
//! **Foreign-key rule.** A foreign key `ON DELETE CASCADE`, `SET NULL` or `SET DEFAULT` from a
//! table that is not tenant data into any relation of a tenant table would let the purge change
//! non-tenant rows silently. It is refused, naming the constraint and both tables, unless the
//! referencing table is itself a relation of a tenant table.

use crate::CatalogError;
use std::collections::BTreeSet;

use sqlx::PgConnection;

use crate::catalog::tenant_tree::{RelationKind, TenantRelation, TenantTable};
use crate::error::{CascadingReference, StoreError, StoreResult};

/// Trigger type bits (`pg_trigger.h`).
const TRIGGER_ROW: i32 = 1;
const TRIGGER_BEFORE: i32 = 2;
const TRIGGER_INSERT: i32 = 4;
const TRIGGER_UPDATE: i32 = 16;
const TRIGGER_INSTEAD: i32 = 64;

/// What keeps the relation's fence from stopping every write, or `None` when it is sound.
pub(crate) fn fence_problem(relation: &TenantRelation) -> Option<String> {
    match relation.kind {
        RelationKind::Heap | RelationKind::Partitioned => {}
        RelationKind::Foreign => {
            return Some(
                "is a foreign table: its rows live outside this database and cannot be purged \
                 or proven gone"
                    .to_owned(),
            );
        }
        RelationKind::Other(kind) => {
            return Some(format!("is a relation of unsupported kind '{kind}'"));
        }
    }
    let Some(trigger) = &relation.fence else {
        return Some("has no buzz_write_fence trigger".to_owned());
    };
    let mut wrong = Vec::new();
    match trigger.enabled.as_str() {
        "A" => {}
        "D" => wrong.push("is disabled"),
        "O" => wrong.push(
            "is enabled for origin sessions only (skipped under session_replication_role = \
             replica); it must be ENABLE ALWAYS",
        ),
        "R" => wrong.push("fires only under session_replication_role = replica"),
        _ => wrong.push("has an unknown enabled state"),
    }
    if trigger.has_when {
        wrong.push("has a WHEN condition");
    }
    if trigger.has_columns {
        wrong.push("is limited to a column list (UPDATE OF …)");
    }
    let bits = trigger.tgtype;
    if bits & TRIGGER_ROW == 0 {
        wrong.push("is not FOR EACH ROW");
    }
    if bits & TRIGGER_BEFORE == 0 || bits & TRIGGER_INSTEAD != 0 {
        wrong.push("does not fire BEFORE the write");
    }
    if bits & TRIGGER_INSERT == 0 {
        wrong.push("does not fire on INSERT");
    }
    if bits & TRIGGER_UPDATE == 0 {
        wrong.push("does not fire on UPDATE");
    }
    if !trigger.runs_fence_function {
        wrong.push("does not execute buzz.refuse_fenced_write()");
    }
    if wrong.is_empty() {
        None
    } else {
        Some(format!("buzz_write_fence {}", wrong.join(", ")))
    }
}

/// Fails closed with [`CatalogError::Unfenced`] naming every relation whose fence would not
/// fire, and why.
pub(crate) fn require_fenced(tables: &[TenantTable]) -> StoreResult<()> {
    let mut unfenced = Vec::new();
    let mut problems = Vec::new();
    for relation in tables.iter().flat_map(|table| table.relations.iter()) {
        if let Some(problem) = fence_problem(relation) {
            let name = relation.qualified();
            problems.push(format!("{name} {problem}"));
            unfenced.push(name);
        }
    }
    if unfenced.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Catalog(CatalogError::Unfenced {
            tables: unfenced,
            problems,
        }))
    }
}

/// One foreign key as the catalog records it (top-level constraints only: the clones Postgres
/// makes on partitions repeat their parent's).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct ForeignKey {
    /// Constraint name.
    pub constraint: String,
    /// The referencing relation's oid.
    pub referencing_oid: i64,
    /// The referencing relation, `schema.name`.
    pub referencing: String,
    /// The referenced relation's oid.
    pub referenced_oid: i64,
    /// The referenced relation, `schema.name`.
    pub referenced: String,
    /// `confdeltype`: `a` no action, `r` restrict, `c` cascade, `n` set null, `d` set default.
    pub on_delete: String,
}

/// Every foreign key in the database (top-level constraints).
pub(crate) async fn foreign_keys(conn: &mut PgConnection) -> StoreResult<Vec<ForeignKey>> {
    let keys = sqlx::query_as::<_, ForeignKey>(
        "SELECT con.conname::text AS constraint, \
                con.conrelid::int8 AS referencing_oid, \
                format('%s.%s', sn.nspname, src.relname) AS referencing, \
                con.confrelid::int8 AS referenced_oid, \
                format('%s.%s', dn.nspname, dst.relname) AS referenced, \
                con.confdeltype::text AS on_delete \
         FROM pg_catalog.pg_constraint con \
         JOIN pg_catalog.pg_class src ON src.oid = con.conrelid \
         JOIN pg_catalog.pg_namespace sn ON sn.oid = src.relnamespace \
         JOIN pg_catalog.pg_class dst ON dst.oid = con.confrelid \
         JOIN pg_catalog.pg_namespace dn ON dn.oid = dst.relnamespace \
         WHERE con.contype = 'f' AND con.conparentid = 0 \
         ORDER BY con.conname, sn.nspname, src.relname",
    )
    .fetch_all(conn)
    .await?;
    Ok(keys)
}

/// The SQL spelling of a delete action that changes the referencing rows, if it is one.
fn changing_action(on_delete: &str) -> Option<&'static str> {
    match on_delete {
        "c" => Some("CASCADE"),
        "n" => Some("SET NULL"),
        "d" => Some("SET DEFAULT"),
        _ => None,
    }
}

/// Refuses ([`CatalogError::CascadingReferences`]) a foreign key from a non-tenant table
/// whose delete action would change its rows when a tenant row is purged.
pub(crate) fn require_no_cascade_out_of_tenant_data(
    tables: &[TenantTable],
    keys: &[ForeignKey],
) -> StoreResult<()> {
    let tenant: BTreeSet<i64> = tables
        .iter()
        .flat_map(|table| table.relations.iter().map(|relation| relation.oid))
        .collect();
    let references: Vec<CascadingReference> = keys
        .iter()
        .filter(|key| {
            tenant.contains(&key.referenced_oid) && !tenant.contains(&key.referencing_oid)
        })
        .filter_map(|key| {
            changing_action(&key.on_delete).map(|action| CascadingReference {
                constraint: key.constraint.clone(),
                referencing: key.referencing.clone(),
                referenced: key.referenced.clone(),
                action: action.to_owned(),
            })
        })
        .collect();
    if references.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Catalog(CatalogError::CascadingReferences {
            references,
        }))
    }
}

/// "Referencing table before referenced table" edges between tenant tables (by root name), from
/// foreign keys between any of their relations.
pub(crate) fn tenant_edges(tables: &[TenantTable], keys: &[ForeignKey]) -> Vec<(String, String)> {
    let root_of = |oid: i64| {
        tables
            .iter()
            .find(|table| table.relations.iter().any(|relation| relation.oid == oid))
            .map(|table| table.name.clone())
    };
    let edges: BTreeSet<(String, String)> = keys
        .iter()
        .filter_map(|key| Some((root_of(key.referencing_oid)?, root_of(key.referenced_oid)?)))
        .collect();
    edges.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tenant_tree::FenceTrigger;

    fn relation(oid: i64, fence: Option<FenceTrigger>) -> TenantRelation {
        TenantRelation {
            oid,
            schema: "buzz".into(),
            name: format!("t{oid}"),
            kind: RelationKind::Heap,
            fence,
        }
    }

    fn sound() -> FenceTrigger {
        FenceTrigger {
            enabled: "A".into(),
            has_when: false,
            has_columns: false,
            tgtype: TRIGGER_ROW | TRIGGER_BEFORE | TRIGGER_INSERT | TRIGGER_UPDATE,
            runs_fence_function: true,
        }
    }

    /// [`sound`] changed by `change`.
    fn sound_but(change: impl FnOnce(&mut FenceTrigger)) -> FenceTrigger {
        let mut trigger = sound();
        change(&mut trigger);
        trigger
    }

    #[test]
    fn only_an_always_enabled_unconditional_before_row_fence_is_sound() {
        assert_eq!(fence_problem(&relation(1, Some(sound()))), None);
        assert!(fence_problem(&relation(1, None)).is_some());
        for enabled in ["O", "R", "D"] {
            let trigger = FenceTrigger {
                enabled: enabled.into(),
                ..sound()
            };
            assert!(
                fence_problem(&relation(1, Some(trigger))).is_some(),
                "{enabled}"
            );
        }
        let unsound = [
            ("when", sound_but(|t| t.has_when = true)),
            ("columns", sound_but(|t| t.has_columns = true)),
            (
                "after",
                sound_but(|t| t.tgtype = TRIGGER_ROW | TRIGGER_INSERT | TRIGGER_UPDATE),
            ),
            (
                "insert only",
                sound_but(|t| t.tgtype = TRIGGER_ROW | TRIGGER_BEFORE | TRIGGER_INSERT),
            ),
            (
                "other function",
                sound_but(|t| t.runs_fence_function = false),
            ),
        ];
        for (what, trigger) in unsound {
            assert!(
                fence_problem(&relation(1, Some(trigger))).is_some(),
                "{what}"
            );
        }
    }

    fn key(referencing: i64, referenced: i64, on_delete: &str) -> ForeignKey {
        ForeignKey {
            constraint: format!("fk_{referencing}_{referenced}"),
            referencing_oid: referencing,
            referencing: format!("x.t{referencing}"),
            referenced_oid: referenced,
            referenced: format!("buzz.t{referenced}"),
            on_delete: on_delete.into(),
        }
    }

    #[test]
    fn cascades_from_outside_tenant_data_are_refused_and_inside_allowed() {
        let tables = vec![TenantTable {
            schema: "buzz".into(),
            name: "t1".into(),
            relations: vec![relation(1, Some(sound())), relation(2, Some(sound()))],
        }];
        for action in ["c", "n", "d"] {
            let refused = require_no_cascade_out_of_tenant_data(&tables, &[key(9, 2, action)]);
            match refused {
                Err(StoreError::Catalog(CatalogError::CascadingReferences { references })) => {
                    assert_eq!(references.len(), 1);
                    assert_eq!(references[0].constraint, "fk_9_2");
                }
                other => panic!("{action}: expected a refusal, got {other:?}"),
            }
        }
        assert!(require_no_cascade_out_of_tenant_data(&tables, &[key(9, 2, "a")]).is_ok());
        assert!(require_no_cascade_out_of_tenant_data(&tables, &[key(9, 2, "r")]).is_ok());
        assert!(require_no_cascade_out_of_tenant_data(&tables, &[key(2, 1, "c")]).is_ok());
        assert!(require_no_cascade_out_of_tenant_data(&tables, &[key(1, 9, "c")]).is_ok());
    }
}
