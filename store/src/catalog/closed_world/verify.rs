//! Verification of the approved scope: every relation the frozen inventory lists is re-found by
//! oid under its inventoried name ([`require_scope_intact`]), must still be in the live purge set
//! (a declaration withdrawn or a key child reclassified since the inventory is the scope
//! shrinking too), and is counted with the scope plan's own predicate — the one the inventory's
//! counts and the purge batches use.

use crate::CatalogError;
use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::TableCount;

use super::guard::require_scope_intact;
use super::summary::InventoriedRelation;
use super::{Scope, ScopePlan, count_in_scope};
use crate::catalog::checked_tenant_tables;
use crate::error::{StoreError, StoreResult};

/// What is wrong with `relation` in the live `plan`, if it left the purge set.
fn outside_plan(plan: &ScopePlan, relation: &InventoriedRelation) -> Option<String> {
    (!plan.contains(relation.oid)).then(|| {
        format!(
            "{} ({}, oid {}) is no longer in the purge set (its declaration or classification \
             changed since the inventory)",
            relation.relation, relation.role, relation.oid
        )
    })
}

/// The community's rows in each of `frozen`, by inventoried name, in `frozen`'s order. Refuses
/// with [`CatalogError::ScopeShrank`] when any of them left the scope, and with the catalogue
/// checks' own errors when the live catalogue is refused.
pub(crate) async fn count_inventoried(
    conn: &mut PgConnection,
    frozen: &[InventoriedRelation],
    community_id: Uuid,
) -> StoreResult<Vec<TableCount>> {
    require_scope_intact(conn, frozen).await?;
    let checked = checked_tenant_tables(conn).await?;
    let plan = &checked.world.plan;
    let outside: Vec<String> = frozen
        .iter()
        .filter_map(|r| outside_plan(plan, r))
        .collect();
    if !outside.is_empty() {
        return Err(StoreError::Catalog(CatalogError::ScopeShrank {
            problems: outside,
        }));
    }
    let mut counts = Vec::with_capacity(frozen.len());
    for relation in frozen {
        let predicate = plan.predicate(relation.oid, "k", Scope::Community, 0);
        let rows = count_in_scope(
            conn,
            &plan.sql_name(relation.oid),
            &relation.relation,
            &predicate,
            community_id,
        )
        .await?;
        counts.push(TableCount {
            table: relation.relation.clone(),
            rows,
        });
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relation_missing_from_the_live_plan_is_named() {
        let plan = ScopePlan::default();
        let relation = InventoriedRelation {
            oid: 42,
            relation: "audit.events_archive".into(),
            role: "archive table".into(),
            root: "audit.events_archive".into(),
            relkind: "r".into(),
            tenant_column: Some("community_id".into()),
        };
        let problem = outside_plan(&plan, &relation).unwrap_or_default();
        assert!(
            problem.contains("audit.events_archive (archive table, oid 42)")
                && problem.contains("no longer in the purge set"),
            "{problem}"
        );
    }
}
