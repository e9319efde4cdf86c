//! A pubkey is compared in one canonical form (issue 29, migration 0016), against a real
//! PostgreSQL: a declared user column without a validated CHECK guaranteeing 64 lowercase hex is
//! refused by the user-data catalogue check, naming the table, the column and the remedy (and a
//! look-alike guarantee is not taken for one); a row with an upper-case pubkey cannot be written
//! to any shipped declared table; and the migration refuses to run while existing rows violate
//! the rule, naming each table and count, changing nothing, and runs once they are canonicalised.

use activities::store::{CatalogError, SchemaError};
use activities::store::{MIGRATOR, Store, StoreError};
use uuid::Uuid;

use super::{assert_refused, declarations_after, declare, exec, shipped};
use crate::store_support::private_db::with_private_db_as_worker;
use crate::store_support::{community, serving_store, store};

/// A fresh canonical pubkey.
fn pubkey() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

/// A new tenant table whose `reactor` column is declared as its user column, with `extra`
/// statements (its CHECK constraints) run between the table and the declaration.
fn declared_reactions(extra: &[&str]) -> Vec<String> {
    let mut statements = vec![
        "CREATE TABLE buzz.reactions (community_id uuid NOT NULL, reactor text, seq int NOT NULL)"
            .to_owned(),
    ];
    statements.extend(extra.iter().map(|sql| (*sql).to_owned()));
    statements.extend(declare("buzz.reactions", "reactor"));
    statements
}

/// The problem every refusal of `buzz.reactions`' column starts with.
const NOT_GUARANTEED: &str = "declared user column \"reactor\" is not guaranteed to hold a pubkey \
                              as 64 lowercase hex characters";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_column_without_the_lowercase_guarantee_is_refused_naming_it() {
    with_private_db_as_worker("canonical", async |owner, worker| {
        let cleanup = ["buzz.reactions"];

        // Declared, but nothing keeps upper case out: refused, naming table, column and remedy.
        let read = declarations_after(&owner, &worker, &declared_reactions(&[]), &cleanup).await;
        let message = read
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert_refused(read, "buzz.reactions", NOT_GUARANTEED);
        for named in [
            "it has no CHECK constraint",
            "ALTER TABLE \"buzz\".\"reactions\" ADD CHECK (\"reactor\" ~ '^[0-9a-f]{64}$')",
        ] {
            assert!(message.contains(named), "{named}: {message}");
        }

        // CHECK constraints that are not the guarantee, and the comparison but NOT VALID (the
        // rows already there were never checked).
        let not_exact = "are not exactly the canonical comparison";
        for (check, refusal) in [
            (
                "ALTER TABLE buzz.reactions ADD CHECK (reactor ~* '^[0-9a-f]{64}$')",
                not_exact,
            ),
            (
                "ALTER TABLE buzz.reactions ADD CHECK (reactor ~ '^[0-9a-fA-F]{64}$')",
                not_exact,
            ),
            (
                "ALTER TABLE buzz.reactions ADD CHECK (length(reactor) = 64)",
                not_exact,
            ),
            (
                "ALTER TABLE buzz.reactions ADD CHECK (reactor ~ '^[0-9a-f]{64}$' OR seq > 0)",
                not_exact,
            ),
            (
                "ALTER TABLE buzz.reactions ADD CONSTRAINT reactions_reactor_canonical \
                 CHECK (reactor ~ '^[0-9a-f]{64}$') NOT VALID",
                "\"reactions_reactor_canonical\" is NOT VALID",
            ),
        ] {
            let read =
                declarations_after(&owner, &worker, &declared_reactions(&[check]), &cleanup).await;
            assert_refused(read, "buzz.reactions", refusal);
        }

        // NO INHERIT leaves an inheritance child unguarded: both are named, each with its reason.
        let mut statements = declared_reactions(&[
            "ALTER TABLE buzz.reactions ADD CHECK (reactor ~ '^[0-9a-f]{64}$') NO INHERIT",
        ]);
        statements.push("CREATE TABLE buzz.reactions_old () INHERITS (buzz.reactions)".to_owned());
        statements.extend(declare("buzz.reactions_old", "reactor"));
        let read = declarations_after(&owner, &worker, &statements, &cleanup).await;
        let problems = match read {
            Err(StoreError::Catalog(CatalogError::UserDataUndeclared { tables, problems })) => {
                assert_eq!(tables, ["buzz.reactions", "buzz.reactions_old"]);
                problems
            }
            other => panic!("NO INHERIT: expected UserDataUndeclared, got {other:?}"),
        };
        assert!(
            problems[0].starts_with("buzz.reactions: ")
                && problems[0].contains("are not exactly the canonical comparison"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with(&format!("buzz.reactions_old: {NOT_GUARANTEED}"))
                && problems[1].contains("it has no CHECK constraint"),
            "{problems:?}"
        );

        // The guarantee: listed. On a partitioned or inheritance parent it covers every child.
        let guarantee = "ALTER TABLE buzz.reactions ADD CHECK (reactor ~ '^[0-9a-f]{64}$')";
        let mut statements = declared_reactions(&[guarantee]);
        statements.push("CREATE TABLE buzz.reactions_old () INHERITS (buzz.reactions)".to_owned());
        statements.extend(declare("buzz.reactions_old", "reactor"));
        let read = declarations_after(&owner, &worker, &statements, &cleanup).await;
        let listed = read.unwrap_or_else(|e| panic!("a guaranteed column: {e}"));
        assert_eq!(
            listed
                .iter()
                .find(|d| d.table == "buzz.reactions")
                .map(|d| d.user_column.clone()),
            Some(Some("reactor".to_owned()))
        );
        // A varchar column and the class spelled the other way round are the same guarantee.
        let read = declarations_after(
            &owner,
            &worker,
            &declared_reactions(&[
                "ALTER TABLE buzz.reactions ALTER COLUMN reactor TYPE varchar(64)",
                "ALTER TABLE buzz.reactions ADD CHECK (reactor ~ '^[a-f0-9]{64}$')",
            ]),
            &cleanup,
        )
        .await;
        assert!(read.is_ok(), "{read:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_alike_operator_is_not_the_guarantee_whatever_the_search_path() {
    let db = testkit::private_db::private_database("lookalike").await;
    let owner = db.migrated_owner_store(2).await;
    // A `~` of another schema that lets everything through, used by the new table's CHECK.
    for sql in [
        "CREATE FUNCTION public.anything_goes(text, text) RETURNS bool \
         LANGUAGE sql IMMUTABLE AS 'SELECT true'",
        "CREATE OPERATOR public.~ (LEFTARG = text, RIGHTARG = text, \
         FUNCTION = public.anything_goes)",
        "CREATE TABLE buzz.reactions (community_id uuid NOT NULL, reactor text, seq int NOT NULL)",
        "ALTER TABLE buzz.reactions ADD CONSTRAINT reactions_reactor_lookalike \
         CHECK (reactor OPERATOR(public.~) '^[0-9a-f]{64}$')",
    ] {
        exec(&owner, sql).await;
    }
    for sql in declare("buzz.reactions", "reactor") {
        exec(&owner, &sql).await;
    }
    // Sessions that find public's `~` first: the look-alike deparses as a bare `~` and the
    // genuine constraints as OPERATOR(pg_catalog.~).
    let set_path = format!(
        "ALTER DATABASE \"{}\" SET search_path = public, pg_catalog",
        db.name
    );
    exec(&owner, &set_path).await;
    let worker = db.worker_store(1).await;
    let deparsed: String = sqlx::query_scalar(
        "SELECT pg_get_constraintdef(oid) FROM pg_catalog.pg_constraint \
         WHERE conname = 'reactions_reactor_lookalike'",
    )
    .fetch_one(worker.pool())
    .await
    .expect("deparse");
    assert_eq!(deparsed, "CHECK ((reactor ~ '^[0-9a-f]{64}$'::text))");

    let read = worker.user_data_declarations().await;
    assert_refused(read, "buzz.reactions", "that is not built in");
    // The shipped constraints, spelled OPERATOR(pg_catalog.~) here, are still the guarantee.
    exec(&owner, "DROP TABLE buzz.reactions").await;
    assert_eq!(worker.user_data_declarations().await.ok(), Some(shipped()));

    worker.pool().close().await;
    owner.pool().close().await;
    testkit::private_db::drop_database(&db.name).await;
}

/// `(table, INSERT of one row whose user column is $2, in community $1)` for every shipped
/// declared table.
const SHIPPED_WRITES: [(&str, &str); 5] = [
    (
        "events",
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
         VALUES (md5(random()::text) || md5(random()::text), $1, $2, 1, 'x')",
    ),
    (
        "memberships",
        "INSERT INTO buzz.memberships (community_id, pubkey) VALUES ($1, $2)",
    ),
    (
        "pubkey_allowlist",
        "INSERT INTO buzz.pubkey_allowlist (community_id, pubkey) VALUES ($1, $2)",
    ),
    (
        "agents",
        "INSERT INTO buzz.agents (id, community_id, pubkey, name) \
         VALUES (gen_random_uuid(), $1, $2, 'a')",
    ),
    (
        "media_uploads",
        "INSERT INTO buzz.media_uploads (id, community_id, sha256, object_key, bytes, \
         uploader_pubkey) VALUES (gen_random_uuid(), $1, 'h', 'k', 1, $2)",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_with_an_upper_case_pubkey_cannot_be_written_to_a_shipped_table() {
    let owner = store().await;
    let serving = serving_store().await;
    let community = community(&owner).await.id;
    let key = pubkey();
    for (table, insert) in SHIPPED_WRITES {
        for written in [key.to_uppercase(), format!("{}{}", &key[..63], "F")] {
            let refused = sqlx::query(insert)
                .bind(community)
                .bind(&written)
                .execute(serving.pool())
                .await
                .expect_err("an upper-case pubkey");
            let error = refused.as_database_error();
            assert_eq!(
                error.and_then(|e| e.code()).as_deref(),
                Some("23514"),
                "{table}: {refused}"
            );
            assert_eq!(
                error.and_then(|e| e.table()),
                Some(table),
                "{table}: {refused}"
            );
        }
        // The canonical text is written (and rolled back: the shared database keeps nothing).
        let mut tx = serving.pool().begin().await.expect("begin");
        sqlx::query(insert)
            .bind(community)
            .bind(&key)
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{table}: the canonical pubkey: {e}"));
        tx.rollback().await.expect("rollback");
    }
}

/// The version of migration 0016 and the one before it.
fn versions() -> (i64, i64) {
    let ours = MIGRATOR
        .iter()
        .find(|m| m.description.contains("canonical pubkeys"))
        .map(|m| m.version)
        .expect("the canonical pubkeys migration");
    let before = MIGRATOR
        .iter()
        .map(|m| m.version)
        .filter(|version| *version < ours)
        .max()
        .expect("a migration before it");
    (ours, before)
}

/// How many CHECK constraints named `*_canonical` the shipped tables have.
async fn canonical_constraints(owner: &Store) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_catalog.pg_constraint \
         WHERE contype = 'c' AND conname LIKE '%\\_pubkey\\_canonical' \
           AND connamespace = 'buzz'::regnamespace",
    )
    .fetch_one(owner.pool())
    .await
    .expect("constraints")
}

/// Migrates as `buzz-deletion migrate` does: in a session of its own that ends afterwards. (sqlx
/// keeps its session advisory lock after a failed migration, so a pooled session that failed
/// would make the next run on another session wait for ever.)
async fn migrate_once(url: &str) -> Result<(), StoreError> {
    let store = Store::connect_with_pool_size(url, 1)
        .await
        .expect("connect as the owner");
    let migrated = store.migrate().await;
    store.pool().close().await;
    migrated
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_refuses_to_run_while_rows_violate_it_naming_table_and_count() {
    let (ours, before) = versions();
    let db = testkit::private_db::private_database("canonical_migration").await;
    let owner = db.owner_store(2).await;
    // The schema as it was just before the migration, with rows written before the rule.
    MIGRATOR
        .run_to(before, owner.pool())
        .await
        .unwrap_or_else(|e| panic!("migrate to {before}: {e}"));
    let community = community(&owner).await.id;
    let (alice, bob) = (pubkey(), pubkey());
    let mixed = format!("{}{}", &bob[..32], bob[32..].to_uppercase());
    for (table, written) in [
        ("events", alice.to_uppercase()),
        ("events", alice.to_uppercase()),
        ("events", alice.clone()),
        ("memberships", "Alice".to_owned()),
        ("memberships", bob.clone()),
        ("agents", mixed.clone()),
    ] {
        let insert = SHIPPED_WRITES
            .iter()
            .find(|(name, _)| *name == table)
            .map(|(_, sql)| *sql)
            .unwrap_or_default();
        sqlx::query(insert)
            .bind(community)
            .bind(&written)
            .execute(owner.pool())
            .await
            .unwrap_or_else(|e| panic!("{table} before the rule: {e}"));
    }

    // Refused, naming each table with its count and the remedy; nothing changed.
    let refused = migrate_once(&db.owner).await;
    let message = match &refused {
        Err(error @ StoreError::Schema(SchemaError::Migrate(_))) => error.to_string(),
        other => panic!("expected the migration to refuse, got {other:?}"),
    };
    for named in [
        "migration 0016 refused",
        "buzz.events.pubkey: 2 row(s)",
        "buzz.memberships.pubkey: 1 row(s)",
        "buzz.agents.pubkey: 1 row(s)",
        "nothing was changed",
        "lower(column)",
        "docs/operations.md",
    ] {
        assert!(message.contains(named), "{named}: {message}");
    }
    for clean in ["buzz.pubkey_allowlist", "buzz.media_uploads"] {
        assert!(!message.contains(clean), "{clean}: {message}");
    }
    assert!(
        matches!(
            owner.check_schema_current().await,
            Err(StoreError::Schema(SchemaError::Outdated { applied: Some(applied), .. })) if applied == before
        ),
        "migration {ours} must not be recorded"
    );
    assert_eq!(canonical_constraints(&owner).await, 0);
    let upper: i64 = sqlx::query_scalar("SELECT count(*) FROM buzz.events WHERE pubkey = $1")
        .bind(alice.to_uppercase())
        .fetch_one(owner.pool())
        .await
        .expect("count");
    assert_eq!(upper, 2, "the migration rewrote no row");

    // The remedy of docs/operations.md: a hex key is lowered, anything else is not a pubkey.
    for table in ["events", "memberships", "pubkey_allowlist", "agents"] {
        exec(
            &owner,
            &format!(
                "UPDATE buzz.{table} SET pubkey = lower(pubkey) \
                 WHERE pubkey ~ '^[0-9a-fA-F]{{64}}$' AND pubkey !~ '^[0-9a-f]{{64}}$'"
            ),
        )
        .await;
    }
    exec(
        &owner,
        "DELETE FROM buzz.memberships WHERE pubkey = 'Alice'",
    )
    .await;
    migrate_once(&db.owner)
        .await
        .expect("the migration after the remedy");
    owner.check_schema_current().await.expect("current");
    assert_eq!(canonical_constraints(&owner).await, 4);
    let users: Vec<String> = sqlx::query_scalar(
        "SELECT pubkey FROM buzz.events UNION SELECT pubkey FROM buzz.agents ORDER BY 1",
    )
    .fetch_all(owner.pool())
    .await
    .expect("users");
    let mut expected = vec![alice, bob];
    expected.sort();
    assert_eq!(users, expected, "one user each, in canonical form");

    owner.pool().close().await;
    testkit::private_db::drop_database(&db.name).await;
}
