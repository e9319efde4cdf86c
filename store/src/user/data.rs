//! User-data declarations (migration 0011): which column of each tenant table holds the pubkey
//! of the user a row belongs to, or that the table holds no user data. Declared in the schema,
//! never guessed: every relation of every tenant table (root, partitions, inheritance children)
//! carries a `buzz_user_data` trigger whose one argument names the column, or is `none`. The
//! per-user write fence of a user deletion runs in that trigger, on that column.
//!
//! [`Store::user_data_declarations`] reads them from the catalog and fails closed, naming every
//! relation, when one is missing or unsound — a tenant table added later without a declaration
//! cannot be forgotten by a user inventory. A declared column is sound only when the schema
//! guarantees it holds a pubkey in its one canonical form, 64 lowercase hex characters
//! ([`crate::canonical_pubkey`], migration 0016).

use crate::CatalogError;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Store;
use crate::canonical_pubkey::{ColumnChecks, column_checks, missing_guarantee};
use crate::catalog::tenant_tree::{RelationKind, TenantRelation, TenantTable, tenant_tables};
use crate::error::{StoreError, StoreResult};

/// The trigger that declares a relation's user data.
pub const USER_DATA_TRIGGER: &str = "buzz_user_data";
/// The argument declaring that a table holds no user data.
pub const NO_USER_DATA: &str = "none";

/// How one tenant table's rows are attributed to users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserDataDeclaration {
    /// `schema.name` of the tenant table's root.
    pub table: String,
    /// The text column holding the user's pubkey; `None`: the table holds no user data.
    pub user_column: Option<String>,
}

/// The `buzz_user_data` trigger of one relation, as the catalog has it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
struct DeclarationRow {
    oid: i64,
    /// `pg_trigger.tgenabled` (`A`: always).
    enabled: Option<String>,
    /// Whether it runs `buzz.user_data()`.
    runs_function: Option<bool>,
    /// Whether it fires before each inserted and updated row, without WHEN or column list.
    fires_on_every_write: Option<bool>,
    /// Its arguments.
    args: Option<Vec<String>>,
    /// The text-typed columns of the relation.
    text_columns: Vec<String>,
}

/// What is wrong with `relation`'s declaration, or its declared column (`None` for `none`).
/// `checks`: the CHECK constraints of every relation, by the columns they reference.
fn judge(
    relation: &TenantRelation,
    row: Option<&DeclarationRow>,
    checks: &ColumnChecks,
) -> Result<Option<String>, String> {
    let name = relation.qualified();
    let Some(row) = row.filter(|row| row.runs_function.is_some()) else {
        return Err(format!("{name} has no {USER_DATA_TRIGGER} trigger"));
    };
    if row.runs_function != Some(true) {
        return Err(format!(
            "{name}: {USER_DATA_TRIGGER} does not run buzz.user_data()"
        ));
    }
    if row.fires_on_every_write != Some(true) {
        return Err(format!(
            "{name}: {USER_DATA_TRIGGER} must fire BEFORE INSERT OR UPDATE FOR EACH ROW, without WHEN or a column list"
        ));
    }
    if row.enabled.as_deref() != Some("A") {
        return Err(format!(
            "{name}: {USER_DATA_TRIGGER} is not enabled ALWAYS (ALTER TABLE … ENABLE ALWAYS TRIGGER {USER_DATA_TRIGGER})"
        ));
    }
    let args = row.args.clone().unwrap_or_default();
    let [column] = args.as_slice() else {
        return Err(format!(
            "{name}: {USER_DATA_TRIGGER} must have exactly one argument (a column or '{NO_USER_DATA}'), has {}",
            args.len()
        ));
    };
    if column == NO_USER_DATA {
        return Ok(None);
    }
    if !row.text_columns.contains(column) {
        return Err(format!(
            "{name}: {USER_DATA_TRIGGER} declares column {column:?}, which is not a text column of the relation"
        ));
    }
    let column_checks = checks
        .get(&(relation.oid, column.clone()))
        .map(Vec::as_slice)
        .unwrap_or_default();
    if let Some(problem) = missing_guarantee(
        &name,
        &relation.sql_name(),
        column,
        relation.kind != RelationKind::Foreign,
        column_checks,
    ) {
        return Err(problem);
    }
    Ok(Some(column.clone()))
}

/// Every tenant table's declaration, or every problem found.
fn declarations_of(
    tables: &[TenantTable],
    rows: &BTreeMap<i64, DeclarationRow>,
    checks: &ColumnChecks,
) -> StoreResult<Vec<DeclaredTenantTable>> {
    let mut declarations = Vec::new();
    let mut problems = Vec::new();
    let mut refused = Vec::new();
    for table in tables {
        let mut declared: Option<Option<String>> = None;
        for relation in &table.relations {
            match judge(relation, rows.get(&relation.oid), checks) {
                Err(problem) => {
                    refused.push(relation.qualified());
                    problems.push(problem);
                }
                Ok(column) => match &declared {
                    None => declared = Some(column),
                    Some(root) if *root == column => {}
                    Some(root) => {
                        refused.push(relation.qualified());
                        problems.push(format!(
                            "{} declares {:?} but its root {} declares {:?}",
                            relation.qualified(),
                            column.as_deref().unwrap_or(NO_USER_DATA),
                            table.qualified(),
                            root.as_deref().unwrap_or(NO_USER_DATA)
                        ));
                    }
                },
            }
        }
        if let Some(user_column) = declared {
            declarations.push(DeclaredTenantTable {
                declaration: UserDataDeclaration {
                    table: table.qualified(),
                    user_column,
                },
                table: table.clone(),
            });
        }
    }
    if problems.is_empty() {
        Ok(declarations)
    } else {
        Err(StoreError::Catalog(CatalogError::UserDataUndeclared {
            tables: refused,
            problems,
        }))
    }
}

/// A tenant table with its sound user-data declaration.
#[derive(Debug, Clone)]
pub(crate) struct DeclaredTenantTable {
    /// The declaration.
    pub declaration: UserDataDeclaration,
    /// The table's relations (heaps hold the rows).
    pub table: TenantTable,
}

/// Every tenant table with its declaration, read on `conn`; fails closed like
/// [`Store::user_data_declarations`].
pub(crate) async fn declared_tenant_tables(
    conn: &mut sqlx::PgConnection,
) -> StoreResult<Vec<DeclaredTenantTable>> {
    let tables = tenant_tables(&mut *conn).await?;
    let oids: Vec<i64> = tables
        .iter()
        .flat_map(|table| table.relations.iter().map(|relation| relation.oid))
        .collect();
    let rows = sqlx::query_as::<_, DeclarationRow>(
        "SELECT r.oid::int8 AS oid, \
                t.tgenabled::text AS enabled, \
                (t.tgfoid = 'buzz.user_data()'::regprocedure) AS runs_function, \
                (t.tgtype::int4 & 31 = 23 AND t.tgqual IS NULL \
                 AND cardinality(t.tgattr::int2[]) = 0) AS fires_on_every_write, \
                CASE WHEN t.oid IS NULL THEN NULL ELSE \
                  (SELECT coalesce(array_agg(a ORDER BY n), '{}') \
                     FROM unnest((string_to_array(encode(t.tgargs, 'escape'), '\\000')) \
                                 [1:t.tgnargs]) WITH ORDINALITY AS x(a, n)) \
                END AS args, \
                coalesce((SELECT array_agg(c.attname::text ORDER BY c.attnum) \
                            FROM pg_catalog.pg_attribute c \
                           WHERE c.attrelid = r.oid AND c.attnum > 0 AND NOT c.attisdropped \
                             AND c.atttypid IN ('text'::regtype, 'varchar'::regtype)), '{}') \
                  AS text_columns \
           FROM unnest($1::int8[]) AS o(oid) \
           JOIN pg_catalog.pg_class r ON r.oid = o.oid::oid \
           LEFT JOIN pg_catalog.pg_trigger t ON t.tgrelid = r.oid AND t.tgname = $2",
    )
    .bind(&oids)
    .bind(USER_DATA_TRIGGER)
    .fetch_all(&mut *conn)
    .await?;
    let rows: BTreeMap<i64, DeclarationRow> = rows.into_iter().map(|row| (row.oid, row)).collect();
    let checks = column_checks(&mut *conn, &oids).await?;
    let mut declared = declarations_of(&tables, &rows, &checks)?;
    declared.sort_by(|a, b| a.declaration.table.cmp(&b.declaration.table));
    Ok(declared)
}

impl Store {
    /// Every tenant table's user-data declaration, sorted by table; fails closed with
    /// [`CatalogError::UserDataUndeclared`] naming every relation whose declaration is missing or
    /// unsound (no trigger, not enabled ALWAYS, not one argument, a column that is not a text
    /// column of the relation or is not guaranteed to hold a canonical pubkey, a partition or
    /// child declaring otherwise than its root).
    pub async fn user_data_declarations(&self) -> StoreResult<Vec<UserDataDeclaration>> {
        let mut conn = self.pool.acquire().await?;
        let declared = declared_tenant_tables(&mut conn).await?;
        Ok(declared.into_iter().map(|d| d.declaration).collect())
    }
}
