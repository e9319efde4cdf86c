//! One purge batch of one heap, inside the caller's transaction, shared by the community and the
//! user purge:
//!
//! 1. lock at most `batch` of the scope's rows in the heap `FOR UPDATE`, through the owner's
//!    `buzz.lock_rows_for_deletion` (the worker has no UPDATE privilege) (a neighbour's insert that
//!    would reference one of them now waits for this transaction, and then fails its key check);
//! 2. lock the key-only children's rows referencing them, top-down through every chain;
//! 3. count rows *outside* the scope that reference any locked row through a cross key — with
//!    the rows locked, that count cannot grow before the delete — and refuse any
//!    ([`CatalogError::CrossTenantReferences`]: nothing of this batch is deleted);
//! 4. delete bottom-up: the deepest key children first, the heap's rows last;
//! 5. refuse a delete that removed fewer rows than it locked (a rule or trigger suppressed it).
//!
//! Statement failures are classified ([`classify_statement_error`]): the block names the step,
//! the relation and the remedy.

use crate::CatalogError;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::QueryAs;
use sqlx::{PgConnection, Postgres};
use uuid::Uuid;

use super::keyset::Keyset;
use super::scope::{Scope, ScopePlan, columns_of};
use super::{bind_scope, require_no_cross_references};
use crate::count_u64;
use crate::error::{
    CrossReferenceCount, StoreError, StoreResult, sqlstate, sqlx_severity, violated_constraint,
};
use crate::failure::Severity;

/// Where a batch runs and whose rows it deletes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchScope<'a> {
    pub plan: &'a ScopePlan,
    pub scope: Scope<'a>,
    pub community_id: Uuid,
    pub pubkey: Option<&'a str>,
}

impl<'a> BatchScope<'a> {
    /// `sql` as a query with the scope's parameters bound ([`bind_scope`]).
    fn query_as<'q, O>(&self, sql: String) -> QueryAs<'q, Postgres, O, PgArguments>
    where
        'a: 'q,
        O: for<'r> sqlx::FromRow<'r, PgRow>,
    {
        bind_scope(
            sqlx::query_as(sqlx::AssertSqlSafe(sql)),
            self.community_id,
            self.pubkey,
        )
    }
}

/// What one batch deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BatchDeleted {
    /// Rows of the heap.
    pub rows: u64,
    /// Rows of key-only children, per child table (`schema.name`), zeros omitted.
    pub children: Vec<(String, u64)>,
}

/// A relation in the batch's tree: the heap (depth 0) or a key child, with the SQL selecting
/// the batch's rows of it.
struct Node {
    oid: i64,
    name: String,
    sql_name: String,
    alias: String,
    filter: String,
}

/// The batch's nodes, top-down (a parent before its children).
fn nodes(
    scope: &BatchScope<'_>,
    heap_oid: i64,
    heap_sql: &str,
    heap_name: &str,
    ctid_param: usize,
) -> Vec<Node> {
    let mut out = vec![Node {
        oid: heap_oid,
        name: heap_name.to_owned(),
        sql_name: heap_sql.to_owned(),
        alias: "d0".to_owned(),
        filter: format!("d0.ctid = ANY(${ctid_param}::text[]::tid[])"),
    }];
    let mut next = 0;
    while next < out.len() {
        let parent_tree = scope.plan.tree_of(out[next].oid);
        let children: Vec<_> = scope
            .plan
            .key_children_of(&parent_tree)
            .into_iter()
            .cloned()
            .collect();
        for child in children {
            let alias = format!("d{}", out.len());
            let parent = &out[next];
            let filter = format!(
                "({}) IN (SELECT {} FROM ONLY {} {} WHERE {})",
                columns_of(&alias, &child.columns),
                columns_of(&parent.alias, &child.parent_columns),
                parent.sql_name,
                parent.alias,
                parent.filter
            );
            out.push(Node {
                oid: child.relation.oid,
                name: child.relation.qualified(),
                sql_name: child.relation.sql_name(),
                alias,
                filter,
            });
        }
        next += 1;
    }
    out
}

/// The heap a batch deletes from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeapBatch<'a> {
    /// Its oid.
    pub oid: i64,
    /// Its name as SQL (quoted, schema-qualified).
    pub sql: &'a str,
    /// Its name as blocks and counts spell it.
    pub name: &'a str,
    /// Selects the scope's rows of the heap under alias `d0`.
    pub predicate: &'a str,
}

/// Runs one batch on `heap` (see the module doc): the first `batch` of the scope's rows, or with
/// a `keyset`, the next `batch` after the last key it locked (the keyset then moves on to this
/// batch's last key).
pub(crate) async fn delete_batch(
    conn: &mut PgConnection,
    scope: &BatchScope<'_>,
    heap: HeapBatch<'_>,
    keyset: Option<&mut Keyset>,
    batch: i64,
) -> StoreResult<BatchDeleted> {
    let HeapBatch {
        oid: heap_oid,
        sql: heap_sql,
        name: heap_name,
        predicate,
    } = heap;
    let step = "purging rows";
    let first = scope.scope.first_free_param();
    let ctids: Vec<String> = match keyset {
        Some(keyset) => {
            let lock = keyset.select_sql(heap_sql, predicate, first, first + 1);
            let mut query = scope.query_as::<(String, Vec<String>)>(lock).bind(batch);
            for key in keyset.after.iter().flatten() {
                query = query.bind(key.clone());
            }
            let chosen = query
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| classify_statement_error(step, heap_name, e))?;
            if let Some((_, last)) = chosen.last() {
                keyset.after = Some(last.clone());
            }
            chosen.into_iter().map(|(ctid, _)| ctid).collect()
        }
        None => {
            let lock = format!(
                "SELECT d0.ctid::text FROM ONLY {heap_sql} d0 WHERE {predicate} LIMIT ${first}"
            );
            let chosen: Vec<(String,)> = scope
                .query_as(lock)
                .bind(batch)
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| classify_statement_error(step, heap_name, e))?;
            chosen.into_iter().map(|(c,)| c).collect()
        }
    };
    if ctids.is_empty() {
        return Ok(BatchDeleted::default());
    }
    let locked = lock_rows(conn, heap_oid, heap_name, &ctids).await?;
    let tree = nodes(scope, heap_oid, heap_sql, heap_name, first);

    for node in tree.iter().skip(1) {
        let sql = format!(
            "SELECT {alias}.ctid::text FROM ONLY {} {alias} WHERE {}",
            node.sql_name,
            node.filter,
            alias = node.alias
        );
        let rows: Vec<(String,)> = scope
            .query_as(sql)
            .bind(&ctids)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| classify_statement_error(step, &node.name, e))?;
        let child_rows: Vec<String> = rows.into_iter().map(|(c,)| c).collect();
        if !child_rows.is_empty() {
            lock_rows(conn, node.oid, &node.name, &child_rows).await?;
        }
    }

    let mut references = Vec::new();
    for node in &tree {
        let node_tree = scope.plan.tree_of(node.oid);
        for key in scope.plan.cross_keys(scope.scope) {
            if !node_tree.contains(&key.referenced_oid) {
                continue;
            }
            let inside = format!(
                "SELECT {} FROM ONLY {} {} WHERE {}",
                columns_of(&node.alias, &key.referenced_columns),
                node.sql_name,
                node.alias,
                node.filter
            );
            let sql = scope.plan.cross_reference_sql(key, scope.scope, &inside);
            let (rows, communities): (i64, Vec<String>) = scope
                .query_as(sql)
                .bind(&ctids)
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| {
                    classify_statement_error("checking cross-tenant references", &node.name, e)
                })?;
            references.push(CrossReferenceCount {
                constraint: key.name.clone(),
                referencing: scope.plan.name(key.referencing_oid),
                referenced: scope.plan.name(key.referenced_oid),
                rows: count_u64(rows),
                communities,
            });
        }
    }
    require_no_cross_references(&references)?;

    let mut deleted = BatchDeleted::default();
    for node in tree.iter().skip(1).rev() {
        let sql = format!(
            "DELETE FROM ONLY {} {} WHERE {}",
            node.sql_name, node.alias, node.filter
        );
        let rows = bind_scope_query(sqlx::query(sqlx::AssertSqlSafe(sql)), scope)
            .bind(&ctids)
            .execute(&mut *conn)
            .await
            .map_err(|e| classify_statement_error(step, &node.name, e))?
            .rows_affected();
        if rows > 0 {
            deleted.children.push((node.name.clone(), rows));
        }
    }
    let sql = format!(
        "DELETE FROM ONLY {heap_sql} d0 WHERE {predicate} AND d0.ctid = ANY(${first}::text[]::tid[])"
    );
    deleted.rows = bind_scope_query(sqlx::query(sqlx::AssertSqlSafe(sql)), scope)
        .bind(&ctids)
        .execute(&mut *conn)
        .await
        .map_err(|e| classify_statement_error(step, heap_name, e))?
        .rows_affected();
    if deleted.rows < locked {
        return Err(StoreError::Catalog(CatalogError::PurgeStatementFailed {
            step,
            relation: heap_name.to_owned(),
            sqlstate: "00000".to_owned(),
            reason: format!(
                "{} of {locked} locked rows were not deleted: a rule or trigger suppressed the delete",
                locked - deleted.rows
            ),
            remedy: "drop the rule or trigger that keeps deleted rows (or its declaration, so the \
                     catalogue check refuses it), then unblock"
                .to_owned(),
        }));
    }
    Ok(deleted)
}

/// Locks the rows `ctids` of relation `oid` FOR UPDATE in the caller's transaction, through the
/// owner's `buzz.lock_rows_for_deletion` (a row lock needs UPDATE privilege, which the worker
/// does not have); returns how many were locked.
async fn lock_rows(
    conn: &mut PgConnection,
    oid: i64,
    name: &str,
    ctids: &[String],
) -> StoreResult<u64> {
    let (locked,): (i64,) =
        sqlx::query_as("SELECT buzz.lock_rows_for_deletion($1::int8::oid::regclass, $2::text[])")
            .bind(oid)
            .bind(ctids)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| classify_statement_error("locking rows for the purge", name, e))?;
    Ok(count_u64(locked))
}

/// [`bind_scope`] for a plain query.
fn bind_scope_query<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    scope: &BatchScope<'q>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let query = query.bind(scope.community_id);
    match scope.pubkey {
        Some(pubkey) => query.bind(pubkey),
        None => query,
    }
}

/// A purge or verification statement's failure as a typed block naming the step, the relation
/// and the remedy. Transient failures (connection, deadlock, timeouts) stay transient.
pub(crate) fn classify_statement_error(
    step: &'static str,
    relation: &str,
    error: sqlx::Error,
) -> StoreError {
    if sqlx_severity(&error) == Severity::Transient {
        return StoreError::Database(error);
    }
    let Some(code) = sqlstate(&error) else {
        return StoreError::Database(error);
    };
    let constraint = violated_constraint(&error).unwrap_or_else(|| "?".to_owned());
    let (reason, remedy) = match code.as_str() {
        "23503" => (
            format!(
                "a row outside the inventoried scope references it through foreign key {constraint}"
            ),
            "run `community status` to see the catalogue check's answer: declare or drop the key \
             (docs/data-model.md, \"Declarations\"), remove the referencing row, then unblock"
                .to_owned(),
        ),
        "42501" => (
            "the worker's role may not do this here (a missing grant, or row-level security that \
             would hide rows)"
                .to_owned(),
            format!(
                "GRANT SELECT, DELETE ON {relation} TO buzz_deletion_worker, or disable its \
                 row-level security, then unblock"
            ),
        ),
        "42P01" | "42703" => (
            "the relation or a column it needs is gone".to_owned(),
            "restore it as the inventory recorded it (docs/operations.md, \"Scope shrank\"), then \
             unblock"
                .to_owned(),
        ),
        _ => (
            format!("unclassified database error in {step} on {relation}: {code}"),
            "see docs/operations.md, \"Unclassified database errors\"; fix the cause, then unblock"
                .to_owned(),
        ),
    };
    StoreError::Catalog(CatalogError::PurgeStatementFailed {
        step,
        relation: relation.to_owned(),
        sqlstate: code,
        reason,
        remedy,
    })
}
