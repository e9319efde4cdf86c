//! Scope can never shrink after approval: before each destructive step the relations the frozen
//! inventory lists are looked up again by oid, and one that left (dropped, renamed, moved to
//! another schema, detached from its tree, its tenant column dropped, its kind changed) refuses
//! the step with [`CatalogError::ScopeShrank`], naming it — never a silent skip.

use crate::CatalogError;
use sqlx::PgConnection;

use super::summary::InventoriedRelation;
use crate::error::{StoreError, StoreResult};

#[derive(sqlx::FromRow)]
struct LiveRelation {
    oid: i64,
    name: Option<String>,
    relkind: Option<String>,
    has_community_id: bool,
    has_id: bool,
    ancestors: Vec<String>,
}

/// What is wrong with `frozen` now, given what the catalogue says of its oid.
fn problem(frozen: &InventoriedRelation, live: Option<&LiveRelation>) -> Option<String> {
    let name = &frozen.relation;
    let Some(live) = live.filter(|l| l.name.is_some()) else {
        return Some(format!("{name} (oid {}) no longer exists", frozen.oid));
    };
    let now = live.name.clone().unwrap_or_default();
    if now != *name {
        return Some(format!("{name} (oid {}) is now named {now}", frozen.oid));
    }
    if live.relkind.as_deref() != Some(frozen.relkind.as_str()) {
        return Some(format!(
            "{name} changed kind from '{}' to '{}'",
            frozen.relkind,
            live.relkind.clone().unwrap_or_default()
        ));
    }
    match frozen.tenant_column.as_deref() {
        Some("community_id") if !live.has_community_id => {
            return Some(format!("{name} no longer has its community_id column"));
        }
        Some("id") if !live.has_id => return Some(format!("{name} no longer has its id column")),
        _ => {}
    }
    if frozen.root != *name && !live.ancestors.contains(&frozen.root) {
        return Some(format!(
            "{name} no longer belongs to {} (detached or moved out of its tree)",
            frozen.root
        ));
    }
    None
}

/// Refuses with [`CatalogError::ScopeShrank`] when any inventoried relation left the scope.
pub(crate) async fn require_scope_intact(
    conn: &mut PgConnection,
    frozen: &[InventoriedRelation],
) -> StoreResult<()> {
    if frozen.is_empty() {
        return Ok(());
    }
    let oids: Vec<i64> = frozen.iter().map(|r| r.oid).collect();
    let live = sqlx::query_as::<_, LiveRelation>(
        "WITH RECURSIVE up(start, rel) AS ( \
             SELECT o, o::oid FROM unnest($1::int8[]) u(o) \
             UNION \
             SELECT up.start, i.inhparent FROM up JOIN pg_catalog.pg_inherits i ON i.inhrelid = up.rel) \
         SELECT u.o AS oid, \
                (SELECT n.nspname || '.' || c.relname FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = u.o::oid)::text AS name, \
                (SELECT c.relkind::text FROM pg_catalog.pg_class c WHERE c.oid = u.o::oid) AS relkind, \
                EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = u.o::oid \
                        AND a.attname = 'community_id' AND a.attnum > 0 AND NOT a.attisdropped) AS has_community_id, \
                EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = u.o::oid \
                        AND a.attname = 'id' AND a.attnum > 0 AND NOT a.attisdropped) AS has_id, \
                ARRAY(SELECT (n.nspname || '.' || c.relname)::text FROM up \
                      JOIN pg_catalog.pg_class c ON c.oid = up.rel \
                      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                      WHERE up.start = u.o) AS ancestors \
         FROM unnest($1::int8[]) u(o)",
    )
    .bind(&oids)
    .fetch_all(&mut *conn)
    .await?;
    let problems: Vec<String> = frozen
        .iter()
        .filter_map(|f| problem(f, live.iter().find(|l| l.oid == f.oid)))
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Catalog(CatalogError::ScopeShrank { problems }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frozen(relation: &str, root: &str) -> InventoriedRelation {
        InventoriedRelation {
            oid: 7,
            relation: relation.into(),
            role: "tenant relation".into(),
            root: root.into(),
            relkind: "r".into(),
            tenant_column: Some("community_id".into()),
        }
    }

    fn live(name: &str, ancestors: &[&str]) -> LiveRelation {
        LiveRelation {
            oid: 7,
            name: Some(name.into()),
            relkind: Some("r".into()),
            has_community_id: true,
            has_id: true,
            ancestors: ancestors.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    #[test]
    fn an_unchanged_relation_passes() {
        let f = frozen("buzz.events_p1", "buzz.events");
        assert_eq!(
            problem(
                &f,
                Some(&live("buzz.events_p1", &["buzz.events_p1", "buzz.events"]))
            ),
            None
        );
    }

    #[test]
    fn every_way_of_leaving_is_named() {
        let f = frozen("buzz.events_p1", "buzz.events");
        let gone = problem(&f, None).unwrap_or_default();
        assert!(gone.contains("no longer exists"), "{gone}");
        let moved =
            problem(&f, Some(&live("attic.events_p1", &["attic.events_p1"]))).unwrap_or_default();
        assert!(moved.contains("is now named attic.events_p1"), "{moved}");
        let detached =
            problem(&f, Some(&live("buzz.events_p1", &["buzz.events_p1"]))).unwrap_or_default();
        assert!(
            detached.contains("no longer belongs to buzz.events"),
            "{detached}"
        );
        let mut no_column = live("buzz.events_p1", &["buzz.events"]);
        no_column.has_community_id = false;
        let column = problem(&f, Some(&no_column)).unwrap_or_default();
        assert!(column.contains("community_id"), "{column}");
        let mut view = live("buzz.events_p1", &["buzz.events"]);
        view.relkind = Some("v".into());
        let kind = problem(&f, Some(&view)).unwrap_or_default();
        assert!(kind.contains("changed kind"), "{kind}");
    }
}
