//! Tenant tables as trees of physical relations, read from the catalog.
//!
//! A tenant table is an ordinary or partitioned table in schema `buzz` with a `community_id`
//! column that does not descend (by partitioning or inheritance) from another such table. Its
//! *relations* are itself and every descendant in `pg_inherits`, whatever their schema: partitions
//! at any depth, partitions attached later, and inheritance children. Rows live only in the heaps
//! among them (relkind `r`), and every count and delete names one heap with `ONLY`, so a row is
//! read exactly once even though a query on an inheritance parent without `ONLY` also reads its
//! children. A relation reachable from two tenant tables (multiple inheritance) belongs to the
//! first by name.
//!
//! The discovery itself judges nothing: the fence and foreign-key rules are in
//! [`crate::catalog::rules`].

use std::collections::BTreeSet;

use sqlx::PgConnection;

use crate::error::StoreResult;
use crate::quote_ident;

/// The serving schema.
pub const TENANT_SCHEMA: &str = "buzz";

/// Name of the write-fence trigger every relation of a tenant table must carry.
pub const FENCE_TRIGGER: &str = "buzz_write_fence";

/// What kind of relation holds (or routes) tenant rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RelationKind {
    /// An ordinary table: holds rows (a plain table, a leaf partition, an inheritance member).
    Heap,
    /// A partitioned table: routes rows to its partitions, holds none itself.
    Partitioned,
    /// A foreign table: its rows live outside this database.
    Foreign,
    /// Any other relkind (not expected under a table).
    Other(char),
}

impl RelationKind {
    fn from_relkind(relkind: &str) -> RelationKind {
        match relkind {
            "r" => RelationKind::Heap,
            "p" => RelationKind::Partitioned,
            "f" => RelationKind::Foreign,
            other => RelationKind::Other(other.chars().next().unwrap_or('?')),
        }
    }
}

/// The `buzz_write_fence` trigger of one relation, as `pg_trigger` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FenceTrigger {
    /// `tgenabled`: `O` origin/local only, `A` always, `R` replica only, `D` disabled.
    pub enabled: String,
    /// It has a `WHEN` condition.
    pub has_when: bool,
    /// It is limited to a column list (`UPDATE OF …`).
    pub has_columns: bool,
    /// `tgtype` bits (ROW 1, BEFORE 2, INSERT 4, DELETE 8, UPDATE 16, TRUNCATE 32, INSTEAD 64).
    pub tgtype: i32,
    /// It executes `buzz.refuse_fenced_write()`.
    pub runs_fence_function: bool,
}

/// One relation of a tenant table's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TenantRelation {
    /// `pg_class.oid`.
    pub oid: i64,
    /// Schema.
    pub schema: String,
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: RelationKind,
    /// Its fence trigger, if it has one by that name.
    pub fence: Option<FenceTrigger>,
}

impl TenantRelation {
    /// `schema.name`, as reported to operators.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// `"schema"."name"`, for SQL.
    pub fn sql_name(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

/// One tenant table: the root in schema `buzz` and every relation below it (root first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TenantTable {
    /// Schema of the root.
    pub schema: String,
    /// Name of the root.
    pub name: String,
    /// The root and its descendants, root first, the rest by schema and name.
    pub relations: Vec<TenantRelation>,
}

impl TenantTable {
    /// `schema.name` of the root, as reported to operators and recorded in the inventory.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// The relations that hold rows.
    pub fn heaps(&self) -> impl Iterator<Item = &TenantRelation> {
        self.relations
            .iter()
            .filter(|relation| relation.kind == RelationKind::Heap)
    }
}

#[derive(sqlx::FromRow)]
struct RelationRow {
    root_schema: String,
    root_name: String,
    oid: i64,
    schema: String,
    name: String,
    relkind: String,
    fence_enabled: Option<String>,
    fence_has_when: Option<bool>,
    fence_has_columns: Option<bool>,
    fence_type: Option<i32>,
    fence_runs_function: Option<bool>,
}

/// Every tenant table with its relations, sorted by root name.
pub(crate) async fn tenant_tables(conn: &mut PgConnection) -> StoreResult<Vec<TenantTable>> {
    let rows = sqlx::query_as::<_, RelationRow>(
        "WITH RECURSIVE candidate AS ( \
             SELECT c.oid FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'community_id' \
                                           AND a.attnum > 0 AND NOT a.attisdropped \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')), \
         tree AS ( \
             SELECT oid AS top, oid AS rel FROM candidate \
             UNION \
             SELECT tree.top, i.inhrelid FROM tree \
             JOIN pg_catalog.pg_inherits i ON i.inhparent = tree.rel) \
         SELECT tn.nspname::text AS root_schema, t.relname::text AS root_name, \
                r.oid::int8 AS oid, rn.nspname::text AS schema, r.relname::text AS name, \
                r.relkind::text AS relkind, \
                f.tgenabled::text AS fence_enabled, \
                (f.tgqual IS NOT NULL) AS fence_has_when, \
                (cardinality(f.tgattr::int2[]) > 0) AS fence_has_columns, \
                f.tgtype::int4 AS fence_type, \
                (f.tgfoid = 'buzz.refuse_fenced_write()'::regprocedure) AS fence_runs_function \
         FROM tree \
         JOIN pg_catalog.pg_class t ON t.oid = tree.top \
         JOIN pg_catalog.pg_namespace tn ON tn.oid = t.relnamespace \
         JOIN pg_catalog.pg_class r ON r.oid = tree.rel \
         JOIN pg_catalog.pg_namespace rn ON rn.oid = r.relnamespace \
         LEFT JOIN pg_catalog.pg_trigger f ON f.tgrelid = r.oid AND f.tgname = $2 \
         WHERE NOT EXISTS (SELECT 1 FROM tree up WHERE up.rel = tree.top AND up.top <> tree.top) \
         ORDER BY t.relname, tn.nspname, (r.oid = tree.top) DESC, rn.nspname, r.relname",
    )
    .bind(TENANT_SCHEMA)
    .bind(FENCE_TRIGGER)
    .fetch_all(conn)
    .await?;
    Ok(group_into_tables(rows))
}

/// Groups the rows (sorted by root, root relation first) into tables, keeping each relation in
/// the first table that reaches it.
fn group_into_tables(rows: Vec<RelationRow>) -> Vec<TenantTable> {
    let mut seen: BTreeSet<i64> = BTreeSet::new();
    let mut tables: Vec<TenantTable> = Vec::new();
    for row in rows {
        let same_root = tables
            .last()
            .is_some_and(|t| t.schema == row.root_schema && t.name == row.root_name);
        if !same_root {
            tables.push(TenantTable {
                schema: row.root_schema.clone(),
                name: row.root_name.clone(),
                relations: Vec::new(),
            });
        }
        if !seen.insert(row.oid) {
            continue;
        }
        let fence = row.fence_enabled.map(|enabled| FenceTrigger {
            enabled,
            has_when: row.fence_has_when.unwrap_or(false),
            has_columns: row.fence_has_columns.unwrap_or(false),
            tgtype: row.fence_type.unwrap_or(0),
            runs_fence_function: row.fence_runs_function.unwrap_or(false),
        });
        if let Some(table) = tables.last_mut() {
            table.relations.push(TenantRelation {
                oid: row.oid,
                schema: row.schema,
                name: row.name,
                kind: RelationKind::from_relkind(&row.relkind),
                fence,
            });
        }
    }
    tables
}

/// The community's rows in one heap (`ONLY`: its inheritance children are counted on their own).
pub(crate) async fn count_heap_rows(
    conn: &mut PgConnection,
    heap: &TenantRelation,
    community_id: uuid::Uuid,
) -> StoreResult<i64> {
    let sql = format!(
        "SELECT count(*) FROM ONLY {} WHERE community_id = $1",
        heap.sql_name()
    );
    let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(community_id)
        .fetch_one(conn)
        .await?;
    Ok(rows)
}

/// The community's rows in every heap of the table.
pub(crate) async fn count_table_rows(
    conn: &mut PgConnection,
    table: &TenantTable,
    community_id: uuid::Uuid,
) -> StoreResult<u64> {
    let mut total = 0u64;
    for heap in table.heaps() {
        let rows = count_heap_rows(conn, heap, community_id).await?;
        total = total.saturating_add(crate::count_u64(rows));
    }
    Ok(total)
}
