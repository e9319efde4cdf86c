//! The closed-world catalogue check (deny by default): every object in the database that can
//! hold, reach, copy or hide a tenant's rows is classified, and whatever the deletion does not
//! understand is refused before approval, naming it and the remedy.
//!
//! - [`facts`] reads what `pg_catalog` records (no judgement);
//! - [`declaration`] parses what the owner declared an unusual object to mean;
//! - [`classify`] judges, purely, and yields the purge set beyond the tenant tables;
//! - [`scope`] turns the purge set into the SQL predicates every count, purge batch and
//!   verification shares;
//! - [`summary`] is what the frozen inventory records of it, under the digest;
//! - [`guard`] re-checks, before each destructive step, that no inventoried relation left;
//! - [`verify`] counts the community's rows in every inventoried relation at verification.
//!
//! It runs at inventory, at preflight and inside the purge's first transaction.

pub(crate) mod batch;
pub(crate) mod classify;
pub mod declaration;
pub(crate) mod facts;
pub(crate) mod guard;
pub(crate) mod keyset;
pub(crate) mod scope;
pub mod summary;
pub(crate) mod verify;

use crate::CatalogError;
use sqlx::PgConnection;

pub(crate) use classify::{ClosedWorld, NamedRelation};
pub(crate) use scope::{Scope, ScopePlan};

use crate::catalog::tenant_tree::TenantTable;
use crate::count_u64;
use crate::error::{CrossReferenceCount, StoreError, StoreResult};

/// The classified catalogue: the closed world and its scope plan.
#[derive(Debug, Clone)]
pub(crate) struct CheckedWorld {
    pub world: ClosedWorld,
    pub plan: ScopePlan,
}

/// Reads and classifies the catalogue around `tenant`, failing closed with
/// [`CatalogError::Refused`].
pub(crate) async fn check(
    conn: &mut PgConnection,
    tenant: &[TenantTable],
) -> StoreResult<CheckedWorld> {
    let facts = facts::read_facts(conn).await?;
    let world = classify::classify(&facts, tenant)
        .map_err(|refusals| StoreError::Catalog(CatalogError::Refused { refusals }))?;
    let communities = facts
        .relations
        .iter()
        .find(|r| r.oid == world.communities_oid)
        .map(|r| NamedRelation {
            oid: r.oid,
            schema: r.schema.clone(),
            name: r.name.clone(),
        })
        .unwrap_or(NamedRelation {
            oid: world.communities_oid,
            schema: "buzz".into(),
            name: "communities".into(),
        });
    let plan = ScopePlan::new(tenant, &world, communities);
    Ok(CheckedWorld { world, plan })
}

/// Binds the scope's parameters (`$1`, and `$2` for a user) to `query`.
pub(crate) fn bind_scope<'q, O>(
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    community_id: uuid::Uuid,
    pubkey: Option<&'q str>,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    let query = query.bind(community_id);
    match pubkey {
        Some(pubkey) => query.bind(pubkey),
        None => query,
    }
}

/// Rows outside the scope referencing rows inside it, per cross key (zero counts included).
pub(crate) async fn cross_reference_counts(
    conn: &mut PgConnection,
    plan: &ScopePlan,
    scope: Scope<'_>,
    community_id: uuid::Uuid,
    pubkey: Option<&str>,
) -> StoreResult<Vec<CrossReferenceCount>> {
    let mut counts = Vec::new();
    for key in plan.cross_keys(scope) {
        let sql = plan.cross_reference_query(key, scope);
        let (rows, communities): (i64, Vec<String>) = bind_scope(
            sqlx::query_as(sqlx::AssertSqlSafe(sql)),
            community_id,
            pubkey,
        )
        .fetch_one(&mut *conn)
        .await?;
        counts.push(CrossReferenceCount {
            constraint: key.name.clone(),
            referencing: plan.name(key.referencing_oid),
            referenced: plan.name(key.referenced_oid),
            rows: count_u64(rows),
            communities,
        });
    }
    Ok(counts)
}

/// Refuses ([`CatalogError::CrossTenantReferences`]) any non-zero count.
pub(crate) fn require_no_cross_references(counts: &[CrossReferenceCount]) -> StoreResult<()> {
    let references: Vec<CrossReferenceCount> =
        counts.iter().filter(|c| c.rows > 0).cloned().collect();
    if references.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Catalog(CatalogError::CrossTenantReferences {
            references,
        }))
    }
}

/// `items` ordered so each comes after every item among them it depends on (`deps` by `id`);
/// dependencies outside `items` are ignored, and a cycle keeps its members in their given order.
pub(crate) fn after_dependencies<T>(
    items: Vec<T>,
    id: impl Fn(&T) -> i64,
    deps: impl Fn(&T) -> Vec<i64>,
) -> Vec<T> {
    let mut ordered: Vec<T> = Vec::with_capacity(items.len());
    let mut left = items;
    while !left.is_empty() {
        let pending: Vec<i64> = left.iter().map(&id).collect();
        let (ready, rest): (Vec<T>, Vec<T>) = left.into_iter().partition(|item| {
            let own = id(item);
            !deps(item).iter().any(|d| *d != own && pending.contains(d))
        });
        if ready.is_empty() {
            ordered.extend(rest);
            break;
        }
        ordered.extend(ready);
        left = rest;
    }
    ordered
}

/// The community's rows in `sql_name` (reported as `name`) selected by `predicate` under alias
/// `k`; a failure is classified as a verification failure naming the relation.
pub(crate) async fn count_in_scope(
    conn: &mut PgConnection,
    sql_name: &str,
    name: &str,
    predicate: &str,
    community_id: uuid::Uuid,
) -> StoreResult<u64> {
    let sql = format!("SELECT count(*)::int8 FROM {sql_name} k WHERE {predicate}");
    let (rows,): (i64,) = bind_scope(sqlx::query_as(sqlx::AssertSqlSafe(sql)), community_id, None)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| batch::classify_statement_error("verifying rows", name, e))?;
    Ok(count_u64(rows))
}
