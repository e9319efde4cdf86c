//! User-data declarations (migration 0011) against a real PostgreSQL: the shipped tenant model
//! declares every table, read as the worker role; a tenant table added without a declaration, or
//! with an unsound one (a column that does not exist or is not text, a trigger not enabled
//! ALWAYS, a partition or inheritance child declaring otherwise than its root, or none at all on
//! a child) is refused, naming the relation — so a table added later cannot be forgotten by a
//! user inventory. Each shape runs in a transaction of its own on a private database.
//! `canonical`: a declared column must also be guaranteed to hold its pubkeys in canonical form.

mod canonical;

use crate::store_support::private_db::with_private_db_as_worker;
use crate::store_support::{exec, refused_sqlstate};
use activities::failure::{Classified, Severity};
use activities::store::CatalogError;
use activities::store::user::data::UserDataDeclaration;
use activities::store::{Store, StoreError};

/// The guarantee a declared user column needs: its values are 64 lowercase hex (migration 0016).
fn canonical(table: &str, column: &str) -> String {
    format!("ALTER TABLE {table} ADD CHECK ({column} ~ '^[0-9a-f]{{64}}$')")
}

/// The sound declaration of `table` with `argument`.
fn declare(table: &str, argument: &str) -> [String; 2] {
    [
        format!(
            "CREATE TRIGGER buzz_user_data BEFORE INSERT OR UPDATE ON {table} \
             FOR EACH ROW EXECUTE FUNCTION buzz.user_data('{argument}')"
        ),
        format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER buzz_user_data"),
    ]
}

fn declared(table: &str, column: Option<&str>) -> UserDataDeclaration {
    UserDataDeclaration {
        table: table.to_owned(),
        user_column: column.map(str::to_owned),
    }
}

/// The shipped model's declarations.
fn shipped() -> Vec<UserDataDeclaration> {
    vec![
        declared("buzz.agents", Some("pubkey")),
        declared("buzz.channels", None),
        declared("buzz.events", Some("pubkey")),
        declared("buzz.media_uploads", Some("uploader_pubkey")),
        declared("buzz.memberships", Some("pubkey")),
        declared("buzz.pubkey_allowlist", Some("pubkey")),
    ]
}

/// Runs `statements` (as the owner), reads the declarations (as the worker), then drops what
/// the statements created (in reverse `cleanup` order).
async fn declarations_after(
    owner: &Store,
    worker: &Store,
    statements: &[String],
    cleanup: &[&str],
) -> Result<Vec<UserDataDeclaration>, StoreError> {
    for sql in statements {
        exec(owner, sql).await;
    }
    let read = worker.user_data_declarations().await;
    for table in cleanup {
        exec(owner, &format!("DROP TABLE IF EXISTS {table} CASCADE")).await;
    }
    read
}

/// The refusal names `relation` and says `what`.
fn assert_refused(read: Result<Vec<UserDataDeclaration>, StoreError>, relation: &str, what: &str) {
    match read {
        Err(error @ StoreError::Catalog(CatalogError::UserDataUndeclared { .. })) => {
            assert_eq!(error.severity(), Severity::Permanent);
            let message = error.to_string();
            if let StoreError::Catalog(CatalogError::UserDataUndeclared { tables, problems }) =
                &error
            {
                assert!(tables.iter().any(|t| t == relation), "{tables:?}");
                assert!(
                    problems
                        .iter()
                        .any(|p| p.contains(relation) && p.contains(what)),
                    "{problems:?}"
                );
            }
            assert!(message.contains("buzz.user_data("), "{message}");
        }
        other => panic!("{relation}: expected UserDataUndeclared ({what}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tenant_table_must_declare_its_user_data_and_a_new_one_without_is_named() {
    with_private_db_as_worker("userdata", async |owner, worker| {
        // The shipped model, read by the worker role.
        assert_eq!(worker.user_data_declarations().await.ok(), Some(shipped()));

        let new_table = "CREATE TABLE buzz.reactions (community_id uuid NOT NULL, \
                     reactor text NOT NULL, seq int NOT NULL, score int NOT NULL DEFAULT 0)";
        // Added without a declaration: named.
        let read = declarations_after(
            &owner,
            &worker,
            &[new_table.to_owned()],
            &["buzz.reactions"],
        )
        .await;
        assert_refused(read, "buzz.reactions", "has no buzz_user_data trigger");

        // Declared with its author column, guaranteed canonical: listed.
        let mut statements = vec![new_table.to_owned(), canonical("buzz.reactions", "reactor")];
        statements.extend(declare("buzz.reactions", "reactor"));
        let read = declarations_after(&owner, &worker, &statements, &["buzz.reactions"]).await;
        let mut expected = shipped();
        expected.push(declared("buzz.reactions", Some("reactor")));
        expected.sort_by(|a, b| a.table.cmp(&b.table));
        assert_eq!(read.ok(), Some(expected));

        // Declared with a column it does not have, or one that is not text.
        for (column, what) in [("author", "\"author\""), ("score", "\"score\"")] {
            let mut statements = vec![new_table.to_owned()];
            statements.extend(declare("buzz.reactions", column));
            let read = declarations_after(&owner, &worker, &statements, &["buzz.reactions"]).await;
            assert_refused(read, "buzz.reactions", what);
        }

        // Enabled, but not ALWAYS (skipped under session_replication_role = replica).
        let statements = vec![
            new_table.to_owned(),
            declare("buzz.reactions", "none")[0].clone(),
        ];
        let read = declarations_after(&owner, &worker, &statements, &["buzz.reactions"]).await;
        assert_refused(read, "buzz.reactions", "not enabled ALWAYS");

        // A partitioned table declared on its root: the cloned trigger declares every partition.
        let partition = |remainder: u8| {
            format!(
                "CREATE TABLE buzz.votes_{remainder} PARTITION OF buzz.votes \
                 FOR VALUES WITH (MODULUS 2, REMAINDER {remainder})"
            )
        };
        let mut statements = vec![
            "CREATE TABLE buzz.votes (community_id uuid NOT NULL, voter text NOT NULL) \
             PARTITION BY HASH (community_id)"
                .to_owned(),
            partition(0),
            canonical("buzz.votes", "voter"),
        ];
        statements.extend(declare("buzz.votes", "voter"));
        statements.push(partition(1));
        let read = declarations_after(&owner, &worker, &statements, &["buzz.votes"]).await;
        let declarations = read.unwrap_or_else(|e| panic!("a declared partitioned table: {e}"));
        assert!(
            declarations.contains(&declared("buzz.votes", Some("voter"))),
            "{declarations:?}"
        );

        // An inheritance child carries no trigger of its parent: it must declare too, and alike.
        let parent = [
            "CREATE TABLE buzz.notes (community_id uuid NOT NULL, author text NOT NULL)".to_owned(),
            canonical("buzz.notes", "author"),
            declare("buzz.notes", "author")[0].clone(),
            declare("buzz.notes", "author")[1].clone(),
            "CREATE TABLE buzz.notes_old () INHERITS (buzz.notes)".to_owned(),
        ];
        let read = declarations_after(&owner, &worker, &parent, &["buzz.notes"]).await;
        assert_refused(read, "buzz.notes_old", "has no buzz_user_data trigger");
        let mut differing = parent.to_vec();
        differing.extend(declare("buzz.notes_old", "none"));
        let read = declarations_after(&owner, &worker, &differing, &["buzz.notes"]).await;
        assert_refused(
            read,
            "buzz.notes_old",
            "its root buzz.notes declares \"author\"",
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_may_change_a_declaration_and_an_uploader_is_a_pubkey() {
    with_private_db_as_worker("userdata_roles", async |owner, worker| {
        // Only the tables' owner may change a declaration: the worker may not drop or add one.
        for sql in [
            "DROP TRIGGER buzz_user_data ON buzz.events",
            "CREATE TRIGGER buzz_user_data_2 BEFORE INSERT ON buzz.channels FOR EACH ROW \
             EXECUTE FUNCTION buzz.user_data('none')",
            "ALTER TABLE buzz.events DISABLE TRIGGER buzz_user_data",
        ] {
            // The worker role owns no tenant table.
            let (code, refused) = refused_sqlstate(&worker, sql).await;
            assert_eq!(code.as_deref(), Some("42501"), "{sql}: {refused}");
        }
        assert_eq!(worker.user_data_declarations().await.ok(), Some(shipped()));
        // The uploader of record is a 64-hex pubkey or nothing.
        exec(
            &owner,
            "INSERT INTO buzz.communities (id, host) \
         VALUES ('00000000-0000-4000-8000-000000000001', 'ud.example')",
        )
        .await;
        let refused = sqlx::query(
            "INSERT INTO buzz.media_uploads \
         (id, community_id, sha256, object_key, bytes, uploader_pubkey) \
         VALUES (gen_random_uuid(), '00000000-0000-4000-8000-000000000001', 'x', 'k', 1, 'Alice')",
        )
        .execute(owner.pool())
        .await
        .expect_err("not a pubkey");
        assert!(refused.to_string().contains("uploader_pubkey"), "{refused}");
    })
    .await;
}
