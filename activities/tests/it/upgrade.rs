//! Upgrading loses nothing (issue 30, item 5): a database migrated to the previous release's last
//! migration and holding that release's data (`previous_release`) is migrated to this release;
//! then every table of `buzz` and `deletion` still has every column it had, with the same type,
//! and every row byte for byte (each row's text form, compared as a multiset); the migration
//! history is kept; every request's audit chain still verifies to the same head and can be
//! extended; the evidence still refuses UPDATE, DELETE and TRUNCATE, even from the schema owner;
//! and this release's store reads the migrated requests.
//!
//! Runs in a database of its own (`testkit::private_db`): it starts from an empty schema.

mod previous_release;

use std::collections::BTreeMap;

use activities::store::{MIGRATOR, is_append_only_refusal};
use activities::user::UserStore;
use certificate::chain::{ChainHead, ChainRow, EventContent, event_hash, verify_chain};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use previous_release::{LAST_MIGRATION, REQUESTS};

/// One table: its columns (name, type) and its rows' text forms, sorted.
#[derive(Debug, Clone, PartialEq)]
struct Table {
    columns: Vec<(String, String)>,
    rows: Vec<String>,
}

/// Every table of schemas `buzz` and `deletion`, by qualified name.
async fn tables(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname IN ('buzz', 'deletion') AND c.relkind IN ('r', 'p') ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("listing tables: {e}"))
}

async fn columns(pool: &PgPool, table: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute \
         WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("columns of {table}: {e}"))
}

/// The text form of every row of `table` over `columns` (those it had before the upgrade),
/// sorted.
async fn rows(
    pool: &PgPool,
    table: &str,
    columns: &[(String, String)],
    filter: &str,
) -> Vec<String> {
    let list = columns
        .iter()
        .map(|(name, _)| format!("\"{}\"", name.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!("SELECT (ROW({list}))::text FROM {table} {filter} ORDER BY 1");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("rows of {table}: {e}"))
}

/// The migration history, as far as the previous release recorded it.
const HISTORY: &str = "public._sqlx_migrations";

async fn snapshot(pool: &PgPool) -> BTreeMap<String, Table> {
    let mut out = BTreeMap::new();
    for table in tables(pool).await {
        let columns = columns(pool, &table).await;
        let rows = rows(pool, &table, &columns, "").await;
        out.insert(table, Table { columns, rows });
    }
    let columns = columns(pool, HISTORY).await;
    let filter = format!("WHERE version <= {LAST_MIGRATION}");
    let rows = rows(pool, HISTORY, &columns, &filter).await;
    out.insert(HISTORY.to_owned(), Table { columns, rows });
    out
}

/// Everything in `before` is still in the database: each table, each of its columns with its
/// type, each row with the same text (read over the columns it had).
async fn assert_nothing_lost(pool: &PgPool, before: &BTreeMap<String, Table>) {
    let now = tables(pool).await;
    let mut problems = Vec::new();
    for (table, old) in before {
        if table != HISTORY && !now.contains(table) {
            problems.push(format!("{table} is gone"));
            continue;
        }
        let current = columns(pool, table).await;
        for column in &old.columns {
            if !current.contains(column) {
                problems.push(format!(
                    "{table}: column {} {} is gone or changed type",
                    column.0, column.1
                ));
            }
        }
        if problems.iter().any(|p| p.starts_with(table.as_str())) {
            continue;
        }
        let filter = if table == HISTORY {
            format!("WHERE version <= {LAST_MIGRATION}")
        } else {
            String::new()
        };
        let after = rows(pool, table, &old.columns, &filter).await;
        let missing = multiset_minus(&old.rows, &after);
        let added = multiset_minus(&after, &old.rows);
        if !missing.is_empty() || !added.is_empty() {
            problems.push(format!(
                "{table}: {} row(s) lost or changed, {} appeared; first lost: {:?}; first new: {:?}",
                missing.len(),
                added.len(),
                missing.first(),
                added.first()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the upgrade lost data:\n{}",
        problems.join("\n")
    );
}

fn multiset_minus(a: &[String], b: &[String]) -> Vec<String> {
    let mut left: BTreeMap<&str, usize> = BTreeMap::new();
    for row in b {
        *left.entry(row.as_str()).or_default() += 1;
    }
    a.iter()
        .filter(|row| match left.get_mut(row.as_str()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}

async fn chain_rows(pool: &PgPool, request: Uuid) -> Vec<ChainRow> {
    sqlx::query(
        "SELECT id, request_id, seq, at, actor, event, detail, prev_hash, row_hash \
         FROM deletion.audit_events WHERE request_id = $1 ORDER BY id",
    )
    .bind(request)
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("audit events of {request}: {e}"))
    .into_iter()
    .map(|row| ChainRow {
        id: row.get("id"),
        request_id: row.get("request_id"),
        seq: row.get("seq"),
        at: row.get("at"),
        actor: row.get("actor"),
        event: row.get("event"),
        detail: row
            .get::<sqlx::types::Json<serde_json::Value>, _>("detail")
            .0,
        prev_hash: row.get("prev_hash"),
        row_hash: row.get("row_hash"),
    })
    .collect()
}

async fn chain_heads(pool: &PgPool) -> Vec<ChainHead> {
    let mut heads = Vec::new();
    for request in REQUESTS {
        let rows = chain_rows(pool, request).await;
        heads.push(
            verify_chain(&rows).unwrap_or_else(|e| panic!("the chain of {request} is broken: {e}")),
        );
    }
    heads
}

/// Each statement must be refused as an append-only violation (SQLSTATE BZ002) and change
/// nothing (it runs in a transaction that is rolled back anyway).
async fn assert_refused(pool: &PgPool, statements: &[&str]) {
    for sql in statements {
        let mut tx = pool.begin().await.unwrap_or_else(|e| panic!("{e}"));
        let affected = sqlx::query(sqlx::AssertSqlSafe(*sql))
            .execute(&mut *tx)
            .await;
        let _ = tx.rollback().await;
        match affected {
            Err(error) if is_append_only_refusal(&error) => {}
            Err(error) => panic!("{sql}: refused, but not as append-only: {error}"),
            Ok(done) => panic!(
                "{sql}: accepted ({} row(s)) after the upgrade: the evidence is no longer append-only",
                done.rows_affected()
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_a_database_holding_the_previous_releases_data_loses_nothing() {
    assert!(
        MIGRATOR.iter().any(|m| m.version > LAST_MIGRATION),
        "this release adds no migration after {LAST_MIGRATION}: set LAST_MIGRATION to the last \
         migration of the release before this one"
    );
    let db = testkit::private_db::private_database("upgrade").await;
    let owner = db.owner_store(2).await;
    let pool = owner.pool().clone();

    // The previous release: its migrations, then its data.
    MIGRATOR
        .run_to(LAST_MIGRATION, &pool)
        .await
        .unwrap_or_else(|e| panic!("migrating to {LAST_MIGRATION}: {e}"));
    previous_release::write(&pool).await;
    let before = snapshot(&pool).await;
    let empty: Vec<&String> = before
        .iter()
        .filter(|(_, t)| t.rows.is_empty())
        .map(|(name, _)| name)
        .collect();
    assert!(
        empty.is_empty(),
        "the previous release's data must fill every table, or the test proves nothing for \
         these: {empty:?}"
    );
    let heads = chain_heads(&pool).await;

    // This release.
    MIGRATOR.run(&pool).await.unwrap_or_else(|e| {
        panic!("migrating a database holding the previous release's data: {e}")
    });
    owner
        .check_schema_current()
        .await
        .unwrap_or_else(|e| panic!("the upgraded schema is not current: {e}"));

    assert_nothing_lost(&pool, &before).await;
    assert_eq!(chain_heads(&pool).await, heads, "an audit chain changed");

    // The evidence is still append-only, for the schema owner too.
    assert_refused(
        &pool,
        &[
            "UPDATE deletion.audit_events SET actor = actor",
            "DELETE FROM deletion.audit_events",
            "TRUNCATE deletion.audit_events",
            "UPDATE deletion.approvals SET note = 'edited'",
            "DELETE FROM deletion.approvals",
            "TRUNCATE deletion.approvals",
            "UPDATE deletion.checkpoints SET detail = '{}'",
            "DELETE FROM deletion.checkpoints",
            "TRUNCATE deletion.checkpoints",
            "UPDATE deletion.operator_signatures SET signature = 'forged'",
            "DELETE FROM deletion.operator_signatures",
            "TRUNCATE deletion.operator_signatures CASCADE",
            "DELETE FROM deletion.operators",
            "UPDATE deletion.operators SET name = name || 'x' WHERE revoked_at IS NULL",
            "TRUNCATE deletion.operators CASCADE",
            "UPDATE deletion.receipts SET key_id = 'other'",
            "DELETE FROM deletion.receipts",
            "TRUNCATE deletion.receipts CASCADE",
            "UPDATE deletion.transparency_log SET appended_at = now()",
            "DELETE FROM deletion.transparency_log",
            "UPDATE deletion.log_checkpoints SET checkpoint = '{}'",
            "DELETE FROM deletion.log_checkpoints",
            "UPDATE deletion.receipt_archives SET bucket = 'elsewhere'",
            "DELETE FROM deletion.receipt_archives",
            "UPDATE deletion.manifest_chunks SET entries = '[]' WHERE deleted_at IS NOT NULL",
            "DELETE FROM deletion.manifest_chunks WHERE deleted_at IS NOT NULL",
            "TRUNCATE deletion.manifest_chunks",
            "UPDATE deletion.user_stage_history SET last_error = 'rewritten' WHERE NOT is_current",
            "DELETE FROM deletion.user_stage_history",
            "TRUNCATE deletion.user_stage_history CASCADE",
            "UPDATE deletion.user_purge_log SET removed = 0",
            "DELETE FROM deletion.user_purge_log",
            "UPDATE deletion.user_media_decisions SET decision = 'delete', versions = '[]' \
             WHERE decision = 'keep_shared'",
            "DELETE FROM deletion.user_media_decisions",
            "TRUNCATE deletion.user_media_decisions",
        ],
    )
    .await;

    // A chain continues across the upgrade: the next event of a migrated request is accepted.
    let request = previous_release::R_M;
    let rows = chain_rows(&pool, request).await;
    let head = verify_chain(&rows).unwrap_or_else(|e| panic!("{e}"));
    let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T08:00:00.654321Z")
        .unwrap_or_else(|e| panic!("{e}"))
        .with_timezone(&chrono::Utc);
    let detail = serde_json::json!({"chunk_no": 1, "deleted": 1, "already_missing": 0});
    let next = head.length + 1;
    let row_hash = event_hash(&EventContent {
        request_id: request,
        seq: next,
        at,
        actor: "worker",
        event: "chunk_stamped",
        detail: &detail,
        prev_hash: &head.head_hash,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    sqlx::query(
        "INSERT INTO deletion.audit_events (request_id, at, actor, event, detail, seq, prev_hash, \
         row_hash) VALUES ($1, $2, 'worker', 'chunk_stamped', $3, $4, $5, $6)",
    )
    .bind(request)
    .bind(at)
    .bind(sqlx::types::Json(&detail))
    .bind(next)
    .bind(&head.head_hash)
    .bind(&row_hash)
    .execute(&pool)
    .await
    .unwrap_or_else(|e| panic!("extending a migrated chain: {e}"));
    let extended =
        verify_chain(&chain_rows(&pool, request).await).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((extended.length, extended.head_hash), (next, row_hash));

    // This release's store, as the worker role, reads every migrated request.
    let worker = db.worker_store(2).await;
    for request in REQUESTS {
        let row = worker
            .get_request(request)
            .await
            .unwrap_or_else(|e| panic!("reading migrated request {request}: {e}"));
        assert_eq!(row.id, request);
    }
    let users = UserStore::new(worker.pool().clone());
    let stages = users
        .stage_rows(previous_release::R_U)
        .await
        .unwrap_or_else(|e| panic!("reading the migrated stage history: {e}"));
    assert_eq!(stages.len(), 2);

    worker.pool().close().await;
    owner.pool().close().await;
    testkit::private_db::drop_database(&db.name).await;
}
