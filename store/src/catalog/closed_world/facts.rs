//! Everything the catalogue records about objects that can hold, reach, copy or hide rows, read
//! in a handful of queries from `pg_catalog` and judged nowhere here (see [`super::classify`]).
//!
//! Every schema is read except PostgreSQL's own (`pg_catalog`, `information_schema`, TOAST and
//! temporary schemas): the system catalogues list relations whatever the reader's privileges, so
//! a relation in a schema the worker cannot use is still seen, and judged, and a privilege the
//! worker lacks is a fact like any other.

use sqlx::PgConnection;

use crate::error::StoreResult;

/// One relation (`pg_class` row of a kind that can hold or read rows).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct RelationFact {
    pub oid: i64,
    pub schema: String,
    pub name: String,
    /// `pg_class.relkind` (`r`, `p`, `m`, `f`, `v`, `S`).
    pub relkind: String,
    /// It has a `community_id` column.
    pub has_community_id: bool,
    /// Its direct `pg_inherits` parents (partition or inheritance).
    pub parents: Vec<i64>,
    /// Whether the current role may SELECT / DELETE it.
    pub can_select: bool,
    pub can_delete: bool,
    /// Whether the current role may INSERT into it (an archive written as the deleting role).
    pub can_insert: bool,
    /// An ordinary table a DELETE can be published from: its replica identity names the deleted
    /// row (FULL, an index marked as replica identity, or the default with a primary key).
    /// True for every other kind. A table without one refuses every DELETE while a publication
    /// publishes its deletes (SQLSTATE 55000).
    pub has_replica_identity: bool,
    /// Row-level security is enabled on it.
    pub row_security: bool,
    /// Whether the current role sees every row: RLS off, or the role bypasses it (superuser,
    /// BYPASSRLS, or the owner without FORCE).
    pub sees_every_row: bool,
    /// Columns of type `oid` or the `lo` domain (large-object references).
    pub large_object_columns: Vec<String>,
    /// The relation's comment (a declaration, or anything else).
    pub comment: Option<String>,
    /// A foreign table's options (`table_name=…`, `schema_name=…`).
    pub foreign_options: Vec<String>,
    /// Its owner's role name.
    pub owner: String,
}

impl RelationFact {
    /// `schema.name`.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

/// One foreign key (top-level constraints: a partition's clone repeats its parent's).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct KeyFact {
    pub oid: i64,
    pub name: String,
    pub referencing_oid: i64,
    pub referenced_oid: i64,
    /// The referencing columns, in key order.
    pub columns: Vec<String>,
    /// The referenced columns, in key order.
    pub referenced_columns: Vec<String>,
    /// `confdeltype`: `a` no action, `r` restrict, `c` cascade, `n` set null, `d` set default.
    pub on_delete: String,
    pub comment: Option<String>,
}

impl KeyFact {
    /// The delete action in SQL words.
    pub fn action(&self) -> &'static str {
        match self.on_delete.as_str() {
            "c" => "ON DELETE CASCADE",
            "n" => "ON DELETE SET NULL",
            "d" => "ON DELETE SET DEFAULT",
            "r" => "ON DELETE RESTRICT",
            _ => "ON DELETE NO ACTION",
        }
    }
}

/// One user trigger (not a foreign-key enforcement trigger, not a partition's clone).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct TriggerFact {
    pub relation_oid: i64,
    pub name: String,
    /// `tgtype` bits: ROW 1, BEFORE 2, INSERT 4, DELETE 8, UPDATE 16, TRUNCATE 32, INSTEAD 64.
    pub tgtype: i32,
    /// The function, `schema.name` (`buzz.refuse_fenced_write`).
    pub function: String,
    /// The function is SECURITY DEFINER.
    pub security_definer: bool,
    /// The function's owner (whose rights a SECURITY DEFINER function runs with).
    pub function_owner: String,
    pub comment: Option<String>,
}

/// One rewrite rule other than a view's `_RETURN`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct RuleFact {
    pub relation_oid: i64,
    pub name: String,
    /// `ev_type`: `1` SELECT, `2` UPDATE, `3` INSERT, `4` DELETE.
    pub event: String,
    pub is_instead: bool,
    pub comment: Option<String>,
}

/// A view or materialized view reading a relation (its `_RETURN` rule's dependency).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct ReadsFact {
    pub view_oid: i64,
    pub source_oid: i64,
}

/// One publication.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct PublicationFact {
    pub name: String,
    pub publishes_deletes: bool,
    pub all_tables: bool,
    pub relation_oids: Vec<i64>,
    pub schemas: Vec<String>,
}

/// Everything [`super::classify`] judges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CatalogFacts {
    pub relations: Vec<RelationFact>,
    pub keys: Vec<KeyFact>,
    pub triggers: Vec<TriggerFact>,
    pub rules: Vec<RuleFact>,
    pub reads: Vec<ReadsFact>,
    pub publications: Vec<PublicationFact>,
    /// The owner of `buzz.refresh_declared_view(regclass)`, the only role whose materialized
    /// views the deletion can refresh (`None` before migration 0014).
    pub refresher_owner: Option<String>,
}

/// Schemas PostgreSQL keeps for itself.
const SYSTEM_SCHEMAS: &str = "n.nspname NOT IN ('pg_catalog', 'information_schema') \
     AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp\\_%'";

/// Reads every fact on `conn` (inside the caller's transaction when it has one).
pub(crate) async fn read_facts(conn: &mut PgConnection) -> StoreResult<CatalogFacts> {
    let relations = sqlx::query_as::<_, RelationFact>(sqlx::AssertSqlSafe(format!(
        "SELECT c.oid::int8 AS oid, n.nspname::text AS schema, c.relname::text AS name, \
                c.relkind::text AS relkind, \
                EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid \
                        AND a.attname = 'community_id' AND a.attnum > 0 AND NOT a.attisdropped) \
                    AS has_community_id, \
                ARRAY(SELECT i.inhparent::int8 FROM pg_catalog.pg_inherits i \
                      WHERE i.inhrelid = c.oid ORDER BY 1) AS parents, \
                CASE WHEN c.relkind = 'S' THEN false \
                     ELSE has_table_privilege(c.oid, 'SELECT') \
                          AND has_schema_privilege(c.relnamespace, 'USAGE') END AS can_select, \
                CASE WHEN c.relkind IN ('r', 'p', 'f', 'v') THEN has_table_privilege(c.oid, 'DELETE') \
                          AND has_schema_privilege(c.relnamespace, 'USAGE') \
                     ELSE false END AS can_delete, \
                CASE WHEN c.relkind = 'r' THEN has_table_privilege(c.oid, 'INSERT') \
                          AND has_schema_privilege(c.relnamespace, 'USAGE') \
                     ELSE false END AS can_insert, \
                CASE WHEN c.relkind <> 'r' THEN true \
                     WHEN c.relreplident = 'f' THEN true \
                     WHEN c.relreplident = 'i' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_index x \
                          WHERE x.indrelid = c.oid AND x.indisreplident) \
                     WHEN c.relreplident = 'd' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_index x \
                          WHERE x.indrelid = c.oid AND x.indisprimary) \
                     ELSE false END AS has_replica_identity, \
                c.relrowsecurity AS row_security, \
                (NOT c.relrowsecurity OR me.rolsuper OR me.rolbypassrls \
                 OR (pg_has_role(c.relowner, 'USAGE') AND NOT c.relforcerowsecurity)) \
                    AS sees_every_row, \
                ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a \
                      JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                        AND (a.atttypid = 'pg_catalog.oid'::regtype OR t.typname = 'lo' \
                             OR (t.typtype = 'd' AND t.typbasetype = 'pg_catalog.oid'::regtype)) \
                      ORDER BY a.attnum) AS large_object_columns, \
                pg_catalog.obj_description(c.oid, 'pg_class') AS comment, \
                COALESCE(ft.ftoptions::text[], '{{}}') AS foreign_options, \
                pg_catalog.pg_get_userbyid(c.relowner)::text AS owner \
         FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_catalog.pg_roles me ON me.rolname = current_user \
         LEFT JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid = c.oid \
         WHERE c.relkind IN ('r', 'p', 'm', 'f', 'v', 'S') AND {SYSTEM_SCHEMAS} \
         ORDER BY n.nspname, c.relname"
    )))
    .fetch_all(&mut *conn)
    .await?;

    let keys = sqlx::query_as::<_, KeyFact>(
        "SELECT con.oid::int8 AS oid, con.conname::text AS name, \
                con.conrelid::int8 AS referencing_oid, con.confrelid::int8 AS referenced_oid, \
                ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY k(num, ord) \
                      JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.num \
                      ORDER BY k.ord) AS columns, \
                ARRAY(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY k(num, ord) \
                      JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.num \
                      ORDER BY k.ord) AS referenced_columns, \
                con.confdeltype::text AS on_delete, \
                pg_catalog.obj_description(con.oid, 'pg_constraint') AS comment \
         FROM pg_catalog.pg_constraint con \
         WHERE con.contype = 'f' AND con.conparentid = 0 \
         ORDER BY con.conname, con.oid",
    )
    .fetch_all(&mut *conn)
    .await?;

    let triggers = sqlx::query_as::<_, TriggerFact>(
        "SELECT t.tgrelid::int8 AS relation_oid, t.tgname::text AS name, t.tgtype::int4 AS tgtype, \
                (pn.nspname || '.' || p.proname)::text AS function, p.prosecdef AS security_definer, \
                pg_catalog.pg_get_userbyid(p.proowner)::text AS function_owner, \
                pg_catalog.obj_description(t.oid, 'pg_trigger') AS comment \
         FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid \
         JOIN pg_catalog.pg_namespace pn ON pn.oid = p.pronamespace \
         WHERE NOT t.tgisinternal AND t.tgparentid = 0 \
         ORDER BY t.tgrelid, t.tgname",
    )
    .fetch_all(&mut *conn)
    .await?;

    let rules = sqlx::query_as::<_, RuleFact>(
        "SELECT r.ev_class::int8 AS relation_oid, r.rulename::text AS name, \
                r.ev_type::text AS event, r.is_instead, \
                pg_catalog.obj_description(r.oid, 'pg_rewrite') AS comment \
         FROM pg_catalog.pg_rewrite r WHERE r.rulename <> '_RETURN' \
         ORDER BY r.ev_class, r.rulename",
    )
    .fetch_all(&mut *conn)
    .await?;

    let reads = sqlx::query_as::<_, ReadsFact>(
        "SELECT DISTINCT r.ev_class::int8 AS view_oid, d.refobjid::int8 AS source_oid \
         FROM pg_catalog.pg_rewrite r \
         JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::regclass \
              AND d.objid = r.oid AND d.refclassid = 'pg_catalog.pg_class'::regclass \
         WHERE r.rulename = '_RETURN' AND d.refobjid <> r.ev_class \
         ORDER BY 1, 2",
    )
    .fetch_all(&mut *conn)
    .await?;

    let publications = sqlx::query_as::<_, PublicationFact>(
        "SELECT p.pubname::text AS name, p.pubdelete AS publishes_deletes, \
                p.puballtables AS all_tables, \
                ARRAY(SELECT pr.prrelid::int8 FROM pg_catalog.pg_publication_rel pr \
                      WHERE pr.prpubid = p.oid ORDER BY 1) AS relation_oids, \
                ARRAY(SELECT n.nspname::text FROM pg_catalog.pg_publication_namespace pn \
                      JOIN pg_catalog.pg_namespace n ON n.oid = pn.pnnspid \
                      WHERE pn.pnpubid = p.oid ORDER BY 1) AS schemas \
         FROM pg_catalog.pg_publication p ORDER BY p.pubname",
    )
    .fetch_all(&mut *conn)
    .await?;

    let refresher_owner: Option<String> = sqlx::query_scalar(
        "SELECT pg_catalog.pg_get_userbyid(p.proowner)::text FROM pg_catalog.pg_proc p \
         JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
         WHERE n.nspname = 'buzz' AND p.proname = 'refresh_declared_view'",
    )
    .fetch_optional(&mut *conn)
    .await?;

    Ok(CatalogFacts {
        relations,
        keys,
        triggers,
        rules,
        reads,
        publications,
        refresher_owner,
    })
}
