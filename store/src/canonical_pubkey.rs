//! The canonical form of a pubkey in a declared user column (issue 29, migration 0016): exactly
//! 64 lowercase hex characters, or NULL (the row belongs to no user).
//!
//! A user deletion's target is that canonical text, and the inventory, the purge, the per-user
//! write fence and the verification all compare a declared column to it with `=`; a row holding
//! the same key in upper or mixed case would be matched by none of them. So a declaration is
//! sound only when the schema itself guarantees the canonical form: the user-data catalogue check
//! ([`super::user_data`]) refuses a declared column without the guarantee, naming it.
//!
//! **The guarantee**, recognised strictly (deny by default), is a CHECK constraint of the relation
//! that references only the declared column and
//! - deparses (`pg_get_constraintdef`) to exactly `CHECK ((col ~ '^[0-9a-f]{64}$'::text))` —
//!   nothing else in it, no `NO INHERIT` (a `NOT VALID` / `NOT ENFORCED` suffix is reported as
//!   such, and refused) — where the only accepted variations are: the column cast to text
//!   (`(col)::text`, a `varchar` column), the operator spelled `OPERATOR(pg_catalog.~)` (how it
//!   deparses under a search path that puts another schema first), and the class spelled
//!   `[a-f0-9]`;
//! - is validated (`convalidated`: every existing row was checked) and enforced (`conenforced`,
//!   PostgreSQL 18; always true before);
//! - depends (`pg_depend`) on nothing but its own relation's columns: PostgreSQL records a
//!   dependency on every operator, function, type or collation an expression uses that is not
//!   built in (pinned), so a look-alike `~` of another schema, which deparses as a bare `~` in a
//!   session whose search path finds it first, is refused;
//! - is on a relation whose CHECK constraints PostgreSQL enforces (not a foreign table).
//!
//! NOT NULL is not required: NULL is "no user" (`media_uploads.uploader_pubkey` of old uploads).

use std::collections::BTreeMap;

use sqlx::PgConnection;

use super::error::StoreResult;
use super::quote_ident;

/// The pattern every declared user column is checked against (migrations 0011 and 0016).
pub const CANONICAL_PUBKEY_PATTERN: &str = "^[0-9a-f]{64}$";

/// The spellings of [`CANONICAL_PUBKEY_PATTERN`] accepted as the same guarantee.
const ACCEPTED_PATTERNS: [&str; 2] = [CANONICAL_PUBKEY_PATTERN, "^[a-f0-9]{64}$"];

/// The spellings of `pg_catalog`'s case-sensitive regular-expression match, as deparsed.
const MATCH_OPERATORS: [&str; 2] = ["~", "OPERATOR(pg_catalog.~)"];

/// One CHECK constraint of a relation, under one column it references, as the catalog has it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct ColumnCheck {
    /// `pg_class.oid` of the relation.
    pub relation: i64,
    /// A column it references.
    pub column: String,
    /// The column as the deparser spells it (`quote_ident`).
    pub quoted_column: String,
    /// The constraint's name.
    pub name: String,
    /// `pg_get_constraintdef`.
    pub definition: String,
    /// `convalidated`.
    pub validated: bool,
    /// `conenforced` (PostgreSQL 18), true where the server has no such column.
    pub enforced: bool,
    /// It depends on nothing but its own relation's columns.
    pub self_contained: bool,
}

/// Every CHECK constraint of the relations, by relation and each column it references.
pub(crate) type ColumnChecks = BTreeMap<(i64, String), Vec<ColumnCheck>>;

/// Whether `definition` is exactly the canonical comparison of the column spelled
/// `quoted_column`, in one of the accepted spellings (see the module documentation).
pub(crate) fn is_canonical_definition(quoted_column: &str, definition: &str) -> bool {
    let operands = [quoted_column.to_owned(), format!("({quoted_column})::text")];
    operands.iter().any(|operand| {
        MATCH_OPERATORS.iter().any(|operator| {
            ACCEPTED_PATTERNS.iter().any(|pattern| {
                definition == format!("CHECK (({operand} {operator} '{pattern}'::text))")
            })
        })
    })
}

/// Whether `check` is the canonical comparison, perhaps not validated or not enforced: the
/// ` NOT VALID` / ` NOT ENFORCED` the deparser appends are set aside only when the catalog's flags
/// say so too (the flags are judged by [`deficiency`]).
fn is_canonical_comparison(check: &ColumnCheck) -> bool {
    let mut definition = check.definition.as_str();
    loop {
        if let Some(rest) = definition
            .strip_suffix(" NOT VALID")
            .filter(|_| !check.validated)
        {
            definition = rest;
        } else if let Some(rest) = definition
            .strip_suffix(" NOT ENFORCED")
            .filter(|_| !check.enforced)
        {
            definition = rest;
        } else {
            return is_canonical_definition(&check.quoted_column, definition);
        }
    }
}

/// Why `check`, which has the canonical definition, still guarantees nothing; `None`: it does.
fn deficiency(check: &ColumnCheck) -> Option<String> {
    let name = &check.name;
    if !check.self_contained {
        Some(format!(
            "its CHECK constraint {name:?} depends on an operator, function, type or collation \
             that is not built in"
        ))
    } else if !check.enforced {
        Some(format!("its CHECK constraint {name:?} is NOT ENFORCED"))
    } else if !check.validated {
        Some(format!(
            "its CHECK constraint {name:?} is NOT VALID (existing rows were never checked: \
             canonicalise them, then ALTER TABLE … VALIDATE CONSTRAINT {})",
            quote_ident(name)
        ))
    } else {
        None
    }
}

/// What is missing for `column` of the relation `qualified` (SQL name `sql_name`) to be
/// guaranteed canonical, given the CHECK constraints referencing it; `None`: it is.
/// `checks_enforced`: PostgreSQL enforces the relation's CHECK constraints (not a foreign table).
pub(crate) fn missing_guarantee(
    qualified: &str,
    sql_name: &str,
    column: &str,
    checks_enforced: bool,
    checks: &[ColumnCheck],
) -> Option<String> {
    let canonical: Vec<&ColumnCheck> = checks
        .iter()
        .filter(|check| is_canonical_comparison(check))
        .collect();
    let why = if !checks_enforced {
        "it is a foreign table, whose CHECK constraints PostgreSQL does not enforce (move the \
         table's rows into an ordinary table)"
            .to_owned()
    } else if canonical.iter().any(|check| deficiency(check).is_none()) {
        return None;
    } else if let Some(why) = canonical.iter().find_map(|check| deficiency(check)) {
        why
    } else if checks.is_empty() {
        "it has no CHECK constraint".to_owned()
    } else {
        let names: Vec<String> = checks
            .iter()
            .map(|check| format!("{:?}", check.name))
            .collect();
        format!(
            "its CHECK constraint(s) {} are not exactly the canonical comparison",
            names.join(", ")
        )
    };
    Some(format!(
        "{qualified}: declared user column {column:?} is not guaranteed to hold a pubkey as 64 \
         lowercase hex characters: {why}; add ALTER TABLE {sql_name} ADD CHECK ({} ~ '{CANONICAL_PUBKEY_PATTERN}') \
         (on a partitioned or inheritance parent: its children inherit it)",
        quote_ident(column)
    ))
}

/// Every CHECK constraint of the relations `oids`, under each column it references, read on
/// `conn`.
pub(crate) async fn column_checks(
    conn: &mut PgConnection,
    oids: &[i64],
) -> StoreResult<ColumnChecks> {
    let rows = sqlx::query_as::<_, ColumnCheck>(
        "SELECT k.conrelid::int8 AS relation, a.attname::text AS \"column\", \
                quote_ident(a.attname) AS quoted_column, k.conname::text AS name, \
                pg_get_constraintdef(k.oid) AS definition, k.convalidated AS validated, \
                coalesce((to_jsonb(k) ->> 'conenforced')::bool, true) AS enforced, \
                NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d \
                             WHERE d.classid = 'pg_catalog.pg_constraint'::regclass \
                               AND d.objid = k.oid \
                               AND NOT (d.refclassid = 'pg_catalog.pg_class'::regclass \
                                        AND d.refobjid = k.conrelid)) AS self_contained \
           FROM pg_catalog.pg_constraint k \
           JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY(k.conkey) \
          WHERE k.contype = 'c' \
            AND k.conrelid = ANY($1::int8[]::oid[]) \
          ORDER BY k.conrelid, a.attname, k.conname",
    )
    .bind(oids)
    .fetch_all(conn)
    .await?;
    let mut checks = ColumnChecks::new();
    for check in rows {
        checks
            .entry((check.relation, check.column.clone()))
            .or_default()
            .push(check);
    }
    Ok(checks)
}

#[cfg(test)]
mod tests;
