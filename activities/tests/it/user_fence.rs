//! The per-user write fence (migration 0012) against a real PostgreSQL, each side as the role
//! that runs it in production: the worker quiesces, fences and lifts; the relay (serving role)
//! writes rows with plain SQL and takes per-user serving-write leases.
//!
//! What an operator relies on: once a user is fenced, no row naming them can be written (or
//! moved onto or away from them) on any tenant relation, partitions and inheritance children
//! included, and no serving write for them is admitted — while every other user of the same
//! community keeps writing; and the fence cannot commit past a write that passed the trigger,
//! even for a user who had no fence row when the write began.

use activities::store::FenceError;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use activities::failure::{Classified, Severity};
use activities::redis::Cache;
use activities::s3::{ObjectStore, ObjectVersionRef};
use activities::serving::{ServingError, ServingLeaseConfig, acquire_user_serving_write_with};
use activities::stack_settings::StackSettings;
use activities::store::{FenceState, Store, StoreError, is_fenced_write, is_user_fenced_write};
use demo::simulator::{
    AdmittedWrite, AuthoredOutcome, AuthoredWrite, RowTable, SimulationPlan,
    missing_admitted_writes, simulate,
};
use uuid::Uuid;

use crate::store_support::*;

/// A fresh user: 64 lowercase hex.
fn user() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

fn config(owner: &str) -> ServingLeaseConfig {
    ServingLeaseConfig {
        ttl: Duration::from_secs(10),
        renew_every: Duration::from_secs(2),
        owner: owner.to_owned(),
    }
}

/// Inserts an event authored by `pubkey`; returns its id.
async fn post(store: &Store, community: Uuid, pubkey: &str) -> Result<String, sqlx::Error> {
    let id = user();
    sqlx::query(
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
         VALUES ($1, $2, $3, 1, 'hello')",
    )
    .bind(&id)
    .bind(community)
    .bind(pubkey)
    .execute(store.pool())
    .await?;
    Ok(id)
}

/// Edits the content of event `id`.
async fn edit(store: &Store, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE buzz.events SET content = 'edited' WHERE id = $1")
        .bind(id)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Gives event `id` to `pubkey` (an UPDATE of its author).
async fn reattribute(store: &Store, id: &str, pubkey: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE buzz.events SET pubkey = $2 WHERE id = $1")
        .bind(id)
        .bind(pubkey)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Inserts a media upload row by `uploader` (NULL: no uploader of record).
async fn upload(store: &Store, community: Uuid, uploader: Option<&str>) -> Result<(), sqlx::Error> {
    let sha = user();
    sqlx::query(
        "INSERT INTO buzz.media_uploads (id, community_id, sha256, object_key, bytes, \
         uploader_pubkey) VALUES ($1, $2, $3, $4, 1, $5)",
    )
    .bind(Uuid::new_v4())
    .bind(community)
    .bind(&sha)
    .bind(format!("media/{community}/{sha}"))
    .bind(uploader)
    .execute(store.pool())
    .await
    .map(|_| ())
}

/// Events of `pubkey` in `community`, as ids, sorted.
async fn events_of(store: &Store, community: Uuid, pubkey: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT id FROM buzz.events WHERE community_id = $1 AND pubkey = $2 ORDER BY id",
    )
    .bind(community)
    .bind(pubkey)
    .fetch_all(store.pool())
    .await
    .expect("read events")
}

/// The write was refused by the user fence (BZ006), which the serving side also reads as fenced.
fn assert_user_refused<T: std::fmt::Debug>(result: Result<T, sqlx::Error>, what: &str) {
    match result {
        Err(error) => {
            assert!(is_user_fenced_write(&error), "{what}: {error}");
            assert!(is_fenced_write(&error), "{what}: {error}");
            assert!(
                error.to_string().contains("is fenced for deletion"),
                "{what}: {error}"
            );
        }
        Ok(value) => panic!("{what}: expected BZ006, the write went through ({value:?})"),
    }
}

/// The audit events recorded for `request_id`, in order.
async fn audit_events(store: &Store, request_id: Uuid) -> Vec<String> {
    sqlx::query_scalar("SELECT event FROM deletion.audit_events WHERE request_id = $1 ORDER BY id")
        .bind(request_id)
        .fetch_all(store.pool())
        .await
        .expect("read audit")
}

#[tokio::test]
async fn the_user_fence_goes_serving_quiescing_fenced_and_back_for_its_request_only() {
    let worker = worker_store().await;
    let owner = store().await;
    let (pubkey, request, other) = (user(), Uuid::new_v4(), Uuid::new_v4());
    assert_eq!(
        worker.user_fence_status(&pubkey).await.expect("status"),
        None
    );

    // Fencing before quiescing is refused, permanently, and changes nothing.
    let early = worker.fence_user(request, &pubkey).await;
    match early {
        Err(error @ StoreError::Fence(FenceError::UserNotQuiescing { .. })) => {
            assert_eq!(error.severity(), Severity::Permanent)
        }
        other => panic!("expected UserNotQuiescing, got {other:?}"),
    }

    let quiesced = worker
        .quiesce_user(request, &pubkey)
        .await
        .expect("quiesce");
    assert_eq!(quiesced.state, FenceState::Quiescing);
    assert_eq!(quiesced.request_id, Some(request));
    assert_eq!(quiesced.key, pubkey);
    let again = worker
        .quiesce_user(request, &pubkey)
        .await
        .expect("quiesce again");
    assert_eq!(
        again.generation, quiesced.generation,
        "a retry bumps nothing"
    );

    // Another request can neither quiesce, fence nor lift it.
    for (what, result) in [
        ("quiesce", worker.quiesce_user(other, &pubkey).await),
        ("fence", worker.fence_user(other, &pubkey).await),
        ("lift", worker.lift_user_fence(other, &pubkey).await),
    ] {
        match result {
            Err(error @ StoreError::Fence(FenceError::UserFenceHeld { .. })) => {
                assert_eq!(error.severity(), Severity::Permanent, "{what}");
                if let StoreError::Fence(FenceError::UserFenceHeld { request_id, .. }) = error {
                    assert_eq!(request_id, request, "{what} names the holder");
                }
            }
            other => panic!("{what} by another request: expected UserFenceHeld, got {other:?}"),
        }
    }

    let fenced = worker.fence_user(request, &pubkey).await.expect("fence");
    assert_eq!(fenced.state, FenceState::Fenced);
    assert_eq!(fenced.generation, quiesced.generation + 1);
    let again = worker
        .fence_user(request, &pubkey)
        .await
        .expect("fence again");
    assert_eq!(again.generation, fenced.generation);
    let requiesced = worker
        .quiesce_user(request, &pubkey)
        .await
        .expect("quiesce when fenced");
    assert_eq!(
        requiesced.state,
        FenceState::Fenced,
        "quiescing never loosens a fence"
    );
    assert_matches!(
        worker.fence_user(other, &pubkey).await,
        Err(StoreError::Fence(FenceError::UserFenceHeld { .. }))
    );

    let lifted = worker
        .lift_user_fence(request, &pubkey)
        .await
        .expect("lift");
    assert_eq!(lifted.state, FenceState::Serving);
    assert_eq!(lifted.generation, fenced.generation + 1);
    let again = worker
        .lift_user_fence(request, &pubkey)
        .await
        .expect("lift again");
    assert_eq!(again.generation, lifted.generation);
    // Once served again, another request may quiesce the user.
    let taken = worker
        .quiesce_user(other, &pubkey)
        .await
        .expect("quiesce by the next request");
    assert_eq!(taken.request_id, Some(other));

    assert_eq!(
        worker.user_fence_status(&pubkey).await.expect("status"),
        Some(taken)
    );
    assert_eq!(
        audit_events(&owner, request).await,
        vec!["user.quiesced", "user.fenced", "user.unfenced"]
    );
    assert_eq!(audit_events(&owner, other).await, vec!["user.quiesced"]);

    // The relay can neither read nor change fence rows, nor lock one by hand.
    let serving = serving_store().await;
    for sql in [
        "SELECT state FROM deletion.user_fences LIMIT 1",
        "UPDATE deletion.user_fences SET state = 'serving'",
        "SELECT deletion.hold_user_fence(repeat('a', 64))",
    ] {
        let denied = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(serving.pool())
            .await;
        match denied {
            Err(sqlx::Error::Database(error)) => {
                assert_eq!(error.code().as_deref(), Some("42501"), "{sql}: {error}")
            }
            other => panic!("{sql}: expected permission denied, got {other:?}"),
        }
    }

    // A malformed pubkey never reaches SQL.
    for bad in ["", "ABCD", &pubkey.to_uppercase(), &format!("{pubkey}0")] {
        assert!(
            matches!(
                worker.quiesce_user(request, bad).await,
                Err(StoreError::InvalidInput {
                    field: "pubkey",
                    ..
                })
            ),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn row_writes_naming_a_fenced_user_are_refused_and_the_neighbours_kept() {
    let (owner, worker, serving) = every_role().await;
    let community = community(&owner).await.id;
    let (alice, bob, request) = (user(), user(), Uuid::new_v4());

    let alice_before = post(&serving, community, &alice)
        .await
        .expect("alice posts");
    let bob_before = post(&serving, community, &bob).await.expect("bob posts");
    worker.quiesce_user(request, &alice).await.expect("quiesce");
    // Quiescing refuses new serving leases only; row writes still pass (as for communities).
    let alice_quiescing = post(&serving, community, &alice)
        .await
        .expect("posts while quiescing");
    worker.fence_user(request, &alice).await.expect("fence");

    assert_user_refused(post(&serving, community, &alice).await, "alice's new event");
    assert_user_refused(
        upload(&serving, community, Some(&alice)).await,
        "alice's upload",
    );
    assert_user_refused(
        sqlx::query("INSERT INTO buzz.memberships (community_id, pubkey) VALUES ($1, $2)")
            .bind(community)
            .bind(&alice)
            .execute(serving.pool())
            .await,
        "alice's membership",
    );
    assert_user_refused(
        edit(&serving, &alice_before).await,
        "an edit of alice's event",
    );
    assert_user_refused(
        reattribute(&serving, &alice_before, &bob).await,
        "moving alice's event away to bob",
    );
    assert_user_refused(
        reattribute(&serving, &bob_before, &alice).await,
        "moving bob's event onto alice",
    );
    // The fence binds every role: the worker's own writes too (an owner's, in a test).
    assert_user_refused(
        post(&owner, community, &alice).await,
        "alice's event as the owner",
    );

    // Bob, anonymous uploads and tables without user data are untouched by alice's fence.
    let bob_after = post(&serving, community, &bob)
        .await
        .expect("bob posts after the fence");
    upload(&serving, community, Some(&bob))
        .await
        .expect("bob uploads");
    upload(&serving, community, None)
        .await
        .expect("an upload without uploader");
    sqlx::query("INSERT INTO buzz.channels (id, community_id, name) VALUES ($1, $2, $3)")
        .bind(Uuid::new_v4())
        .bind(community)
        .bind(format!("c-{}", Uuid::new_v4().simple()))
        .execute(serving.pool())
        .await
        .expect("a channel (no user data)");
    edit(&serving, &bob_before)
        .await
        .expect("bob edits his event");

    let mut alice_rows = vec![alice_before.clone(), alice_quiescing];
    alice_rows.sort();
    assert_eq!(events_of(&owner, community, &alice).await, alice_rows);
    let mut bob_rows = vec![bob_before.clone(), bob_after];
    bob_rows.sort();
    assert_eq!(events_of(&owner, community, &bob).await, bob_rows);
    let edited: String = sqlx::query_scalar("SELECT content FROM buzz.events WHERE id = $1")
        .bind(&alice_before)
        .fetch_one(owner.pool())
        .await
        .expect("read");
    assert_eq!(edited, "hello", "alice's event was not edited");

    // Lifted (an abort before the irreversible point): alice writes again.
    worker.lift_user_fence(request, &alice).await.expect("lift");
    post(&serving, community, &alice)
        .await
        .expect("alice posts after the lift");
}

/// A tenant table of the test's own shape: a range-partitioned one and an inheritance tree,
/// each relation carrying the community fence and the user-data declaration, the declared column
/// guaranteed canonical by a CHECK on the root (which every partition and child inherits).
const SHAPES: &[&str] = &[
    "CREATE TABLE buzz.posts (community_id uuid NOT NULL, author text, seq int NOT NULL) \
     PARTITION BY RANGE (seq)",
    "CREATE TABLE buzz.posts_low PARTITION OF buzz.posts FOR VALUES FROM (MINVALUE) TO (100)",
    "CREATE TABLE buzz.posts_high PARTITION OF buzz.posts FOR VALUES FROM (100) TO (MAXVALUE)",
    "ALTER TABLE buzz.posts ADD CHECK (author ~ '^[0-9a-f]{64}$')",
    "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.posts \
     FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()",
    "CREATE TRIGGER buzz_user_data BEFORE INSERT OR UPDATE ON buzz.posts \
     FOR EACH ROW EXECUTE FUNCTION buzz.user_data('author')",
    "ALTER TABLE buzz.posts ENABLE ALWAYS TRIGGER buzz_write_fence",
    "ALTER TABLE buzz.posts ENABLE ALWAYS TRIGGER buzz_user_data",
    "ALTER TABLE buzz.posts_low ENABLE ALWAYS TRIGGER buzz_write_fence",
    "ALTER TABLE buzz.posts_low ENABLE ALWAYS TRIGGER buzz_user_data",
    "ALTER TABLE buzz.posts_high ENABLE ALWAYS TRIGGER buzz_write_fence",
    "ALTER TABLE buzz.posts_high ENABLE ALWAYS TRIGGER buzz_user_data",
    "CREATE TABLE buzz.notes (community_id uuid NOT NULL, author text, seq int NOT NULL)",
    "CREATE TABLE buzz.notes_pinned (pinned_by text) INHERITS (buzz.notes)",
    "ALTER TABLE buzz.notes ADD CHECK (author ~ '^[0-9a-f]{64}$')",
    "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.notes \
     FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()",
    "CREATE TRIGGER buzz_user_data BEFORE INSERT OR UPDATE ON buzz.notes \
     FOR EACH ROW EXECUTE FUNCTION buzz.user_data('author')",
    "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.notes_pinned \
     FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()",
    "CREATE TRIGGER buzz_user_data BEFORE INSERT OR UPDATE ON buzz.notes_pinned \
     FOR EACH ROW EXECUTE FUNCTION buzz.user_data('author')",
    "ALTER TABLE buzz.notes ENABLE ALWAYS TRIGGER buzz_write_fence",
    "ALTER TABLE buzz.notes ENABLE ALWAYS TRIGGER buzz_user_data",
    "ALTER TABLE buzz.notes_pinned ENABLE ALWAYS TRIGGER buzz_write_fence",
    "ALTER TABLE buzz.notes_pinned ENABLE ALWAYS TRIGGER buzz_user_data",
];

async fn insert_into(
    store: &Store,
    table: &str,
    community: Uuid,
    author: &str,
    seq: i32,
) -> Result<(), sqlx::Error> {
    let sql = format!("INSERT INTO {table} (community_id, author, seq) VALUES ($1, $2, $3)");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(community)
        .bind(author)
        .bind(seq)
        .execute(store.pool())
        .await
        .map(|_| ())
}

/// `(physical table, author, seq)` of every row under `root`, sorted.
async fn rows_under(store: &Store, root: &str) -> Vec<(String, String, i32)> {
    let sql = format!("SELECT tableoid::regclass::text, author, seq FROM {root} ORDER BY 1, 2, 3");
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_all(store.pool())
        .await
        .expect("read rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_and_inheritance_children_refuse_only_the_fenced_users_rows() {
    let db = testkit::private_db::private_database("ufence").await;
    let owner = db.migrated_owner_store(2).await;
    for sql in SHAPES {
        sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(owner.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let worker = db.worker_store(2).await;
    let serving = db.serving_store(2).await;
    // The shapes are soundly declared: the user inventory would read them.
    let declared = worker.user_data_declarations().await.expect("declarations");
    assert!(
        declared.iter().any(|d| d.table == "buzz.posts"),
        "{declared:?}"
    );
    assert!(
        declared.iter().any(|d| d.table == "buzz.notes"),
        "{declared:?}"
    );

    let community = community(&owner).await.id;
    let (alice, bob, request) = (user(), user(), Uuid::new_v4());
    for (seq, author) in [(1, &alice), (150, &alice), (2, &bob), (151, &bob)] {
        insert_into(&serving, "buzz.posts", community, author, seq)
            .await
            .expect("post");
        insert_into(&serving, "buzz.notes_pinned", community, author, seq)
            .await
            .expect("note");
    }
    let posts_before = rows_under(&owner, "buzz.posts").await;
    let notes_before = rows_under(&owner, "buzz.notes").await;

    worker.quiesce_user(request, &alice).await.expect("quiesce");
    worker.fence_user(request, &alice).await.expect("fence");

    // Alice: refused on the partitioned root (routed to either partition), on a partition
    // written directly, on the inheritance child and its parent, and moving rows to or from her.
    for (table, seq) in [
        ("buzz.posts", 3),
        ("buzz.posts", 152),
        ("buzz.posts_high", 153),
        ("buzz.notes", 4),
        ("buzz.notes_pinned", 5),
    ] {
        assert_user_refused(
            insert_into(&serving, table, community, &alice, seq).await,
            &format!("alice into {table}"),
        );
    }
    for (table, from, to) in [
        ("buzz.posts", &alice, &bob),
        ("buzz.posts", &bob, &alice),
        ("buzz.notes_pinned", &alice, &bob),
        ("buzz.notes_pinned", &bob, &alice),
    ] {
        let sql = format!("UPDATE {table} SET author = $2 WHERE author = $1");
        assert_user_refused(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(from)
                .bind(to)
                .execute(serving.pool())
                .await,
            &format!("moving {table} rows between alice and bob"),
        );
    }
    // A row moved across partitions stays alice's: still refused.
    assert_user_refused(
        sqlx::query("UPDATE buzz.posts SET seq = 160 WHERE author = $1 AND seq = 1")
            .bind(&alice)
            .execute(serving.pool())
            .await,
        "moving alice's post to another partition",
    );
    assert_eq!(rows_under(&owner, "buzz.posts").await, posts_before);
    assert_eq!(rows_under(&owner, "buzz.notes").await, notes_before);

    // Bob keeps writing everywhere, in the same community.
    for (table, seq) in [
        ("buzz.posts", 6),
        ("buzz.posts", 156),
        ("buzz.notes", 7),
        ("buzz.notes_pinned", 8),
    ] {
        insert_into(&serving, table, community, &bob, seq)
            .await
            .unwrap_or_else(|e| panic!("bob into {table}: {e}"));
    }
    let mut posts: Vec<i32> = rows_under(&owner, "buzz.posts")
        .await
        .into_iter()
        .filter(|(_, author, _)| *author == bob)
        .map(|(_, _, seq)| seq)
        .collect();
    posts.sort();
    assert_eq!(posts, vec![2, 6, 151, 156]);

    for store in [&owner, &worker, &serving] {
        store.pool().close().await;
    }
    testkit::private_db::drop_database(&db.name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_cannot_commit_past_a_write_that_passed_the_trigger_even_without_a_fence_row() {
    let (owner, worker, serving) = every_role().await;
    let community = community(&owner).await.id;
    let (carol, request) = (user(), Uuid::new_v4());

    // Carol has no fence row; her write passes the trigger (which creates it) and stays open.
    let mut writer = serving.pool().begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
         VALUES ($1, $2, $3, 1, 'in flight')",
    )
    .bind(user())
    .bind(community)
    .bind(&carol)
    .execute(&mut *writer)
    .await
    .expect("carol's write passes the trigger");
    assert_eq!(
        worker.user_fence_status(&carol).await.expect("status"),
        None,
        "the row the writer created is not committed yet"
    );

    // The deletion cannot get past it: it waits on the writer, then gives up transiently.
    let started = Instant::now();
    let waited = worker.quiesce_user(request, &carol).await;
    match waited {
        Err(error) => assert_eq!(error.severity(), Severity::Transient, "{error}"),
        Ok(status) => panic!("quiesced past an uncommitted write: {status:?}"),
    }
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "it waited for the lock"
    );

    writer.commit().await.expect("carol's write commits");
    worker.quiesce_user(request, &carol).await.expect("quiesce");

    // Quiescing: a write passes the trigger (holding her fence row) and stays open; the fence
    // waits for it and fails transiently, leaving her quiescing.
    let mut writer = serving.pool().begin().await.expect("begin");
    let held = user();
    sqlx::query(
        "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
         VALUES ($1, $2, $3, 1, 'in flight')",
    )
    .bind(&held)
    .bind(community)
    .bind(&carol)
    .execute(&mut *writer)
    .await
    .expect("passes while quiescing");
    let refused = worker.fence_user(request, &carol).await;
    match refused {
        Err(error) => assert_eq!(error.severity(), Severity::Transient, "{error}"),
        Ok(status) => panic!("fenced past an uncommitted write: {status:?}"),
    }
    let status = worker.user_fence_status(&carol).await.expect("status");
    assert_eq!(status.map(|s| s.state), Some(FenceState::Quiescing));

    // A fence started while the write is open commits only after the write did.
    let fencing = tokio::spawn({
        let worker = worker.clone();
        let carol = carol.clone();
        async move { worker.fence_user(request, &carol).await }
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!fencing.is_finished(), "the fence waits for the open write");
    writer.commit().await.expect("the open write commits");
    let fenced = fencing.await.expect("join").expect("fence after the write");
    assert_eq!(fenced.state, FenceState::Fenced);

    // The write that passed before the fence is stored; every write after it is refused.
    let stored = events_of(&owner, community, &carol).await;
    assert!(stored.contains(&held), "{stored:?}");
    assert_eq!(stored.len(), 2);
    assert_user_refused(
        post(&serving, community, &carol).await,
        "carol after the fence",
    );
    assert_eq!(events_of(&owner, community, &carol).await, stored);
}

#[tokio::test]
async fn user_leases_are_refused_while_the_user_quiesces_or_is_fenced_and_others_are_not() {
    let (owner, worker, serving) = every_role().await;
    let community = community(&owner).await.id;
    let (dave, erin, request) = (user(), user(), Uuid::new_v4());
    let relay = config("relay-u");

    let admitted = acquire_user_serving_write_with(&serving, community, &dave, "s3_put", &relay)
        .await
        .expect("admitted while serving");
    assert_eq!(admitted.lease().user_pubkey.as_deref(), Some(dave.as_str()));
    // A user lease is a community lease too: the community's drain sees it.
    assert_eq!(
        owner
            .live_serving_writes(community)
            .await
            .expect("live")
            .count,
        1
    );
    assert_eq!(
        serving
            .live_user_serving_writes(&dave)
            .await
            .expect("live")
            .count,
        1
    );

    worker.quiesce_user(request, &dave).await.expect("quiesce");
    match acquire_user_serving_write_with(&serving, community, &dave, "s3_put", &relay).await {
        Err(error @ ServingError::UserQuiescing { .. }) => {
            assert!(error.is_refused_because_fenced(), "{error}")
        }
        other => panic!("expected UserQuiescing, got {other:?}"),
    }
    // The admitted write may finish while quiescing; the fence waits for it, transiently.
    admitted
        .verify()
        .await
        .expect("still valid while quiescing");
    match worker.fence_user(request, &dave).await {
        Err(error @ StoreError::Fence(FenceError::LiveUserServingWrites { .. })) => {
            assert_eq!(error.severity(), Severity::Transient);
            if let StoreError::Fence(FenceError::LiveUserServingWrites {
                count, operations, ..
            }) = error
            {
                assert_eq!((count, operations), (1, vec!["s3_put".to_owned()]));
            }
        }
        other => panic!("expected LiveUserServingWrites, got {other:?}"),
    }
    admitted
        .protect(async {})
        .await
        .expect("the admitted write runs");
    admitted.finish().await.expect("released");
    worker
        .fence_user(request, &dave)
        .await
        .expect("fence once drained");

    match acquire_user_serving_write_with(&serving, community, &dave, "redis_write", &relay).await {
        Err(error @ ServingError::UserFenced { .. }) => {
            assert!(error.is_refused_because_fenced(), "{error}")
        }
        other => panic!("expected UserFenced, got {other:?}"),
    }
    // Erin, in the same community, is served throughout.
    let erins = acquire_user_serving_write_with(&serving, community, &erin, "s3_put", &relay)
        .await
        .expect("erin is served");
    erins.protect(async {}).await.expect("erin's write");
    erins.finish().await.expect("erin's release");
    assert_eq!(
        serving
            .live_user_serving_writes(&dave)
            .await
            .expect("live")
            .count,
        0
    );
    assert_matches!(
        worker .require_no_stalled_user_serving_writes(&dave, Duration::from_secs(30)) .await,
        Ok(stalled) if stalled.count == 0
    );

    // Unknown community, malformed user.
    assert_matches!(
        serving
            .serving()
            .acquire_user_serving_write_lease(
                Uuid::new_v4(),
                &erin,
                "s3_put",
                "r",
                Duration::from_secs(5)
            )
            .await,
        Err(ServingError::UnknownCommunity { .. })
    );
    assert_matches!(
        serving
            .serving()
            .acquire_user_serving_write_lease(
                community,
                "not-a-key",
                "s3_put",
                "r",
                Duration::from_secs(5)
            )
            .await,
        Err(ServingError::InvalidInput {
            field: "pubkey",
            ..
        })
    );
}

#[tokio::test]
async fn a_user_lease_left_unreleased_at_the_fence_is_refused_and_holds_the_drain() {
    let (owner, worker, serving) = every_role().await;
    let community = community(&owner).await.id;
    let (frank, request) = (user(), Uuid::new_v4());

    // An admitted write whose relay stalled: its lease expires unreleased.
    let stalled = serving
        .serving()
        .acquire_user_serving_write_lease(
            community,
            &frank,
            "s3_put",
            "relay-stalled",
            Duration::from_millis(800),
        )
        .await
        .expect("admitted");
    worker.quiesce_user(request, &frank).await.expect("quiesce");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    worker
        .fence_user(request, &frank)
        .await
        .expect("fence: the lease is no longer live");

    // Renewing or verifying it now is refused because the user is fenced.
    for result in [
        serving
            .renew_serving_write_lease(&stalled, Duration::from_secs(5))
            .await
            .map(|_| ()),
        serving.verify_serving_write_lease(&stalled).await,
    ] {
        assert!(
            matches!(&result, Err(ServingError::UserFenced { pubkey }) if *pubkey == frank),
            "{result:?}"
        );
    }
    // The drain waits for it until its expiry plus the bound (transient), not past it.
    match worker
        .require_no_stalled_user_serving_writes(&frank, Duration::from_secs(30))
        .await
    {
        Err(error @ StoreError::Fence(FenceError::StalledUserServingWrites { .. })) => {
            assert_eq!(error.severity(), Severity::Transient);
            if let StoreError::Fence(FenceError::StalledUserServingWrites {
                count, until, ..
            }) = error
            {
                assert_eq!(count, 1);
                assert_eq!(until, stalled.expires_at + chrono::Duration::seconds(30));
            }
        }
        other => panic!("expected StalledUserServingWrites, got {other:?}"),
    }
    let past = worker
        .require_no_stalled_user_serving_writes(&frank, Duration::ZERO)
        .await
        .expect("past its bound");
    assert_eq!(past.count, 0);
}

#[tokio::test]
async fn the_community_fence_still_refuses_user_leases_and_counts_them_live() {
    let owner = store().await;
    let serving = serving_store().await;
    let fixture = approved(&owner, 0).await;
    let community = fixture.community.id;
    let grace = user();
    let relay = config("relay-c");

    let admitted = acquire_user_serving_write_with(&serving, community, &grace, "s3_put", &relay)
        .await
        .expect("admitted");
    fixture.quiesce().await;
    match acquire_user_serving_write_with(&serving, community, &grace, "s3_put", &relay).await {
        Err(error @ ServingError::Quiescing { .. }) => {
            assert!(error.is_refused_because_fenced())
        }
        other => panic!("expected the community's Quiescing, got {other:?}"),
    }
    assert!(
        matches!(
            owner.fence(&fixture.token).await,
            Err(StoreError::Fence(FenceError::ServingWritesLive {
                count: 1,
                ..
            }))
        ),
        "the community fence waits for the user lease"
    );
    admitted.finish().await.expect("released");
    owner
        .fence(&fixture.token)
        .await
        .expect("fence the community");
    match acquire_user_serving_write_with(&serving, community, &grace, "s3_put", &relay).await {
        Err(error @ ServingError::Fenced { .. }) => assert!(error.is_refused_because_fenced()),
        other => panic!("expected the community's Fenced, got {other:?}"),
    }
}

async fn object_store() -> ObjectStore {
    let config = stack_config::env::StackEnv::process()
        .s3()
        .unwrap_or_else(|e| panic!("the RGW (S3) server cannot be found: {e}"));
    let objects = ObjectStore::connect(&config)
        .await
        .unwrap_or_else(|e| panic!("S3 configuration rejected: {e}"));
    objects
        .check_bucket()
        .await
        .unwrap_or_else(|e| panic!("RGW not reachable at {}: {e}", config.endpoint));
    objects
}

async fn cache() -> Cache {
    let url = stack_config::env::StackEnv::process()
        .redis_url()
        .unwrap_or_else(|e| panic!("the Redis server cannot be found: {e}"));
    Cache::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("Redis not reachable at {url}: {e}"))
}

/// What `author` has stored in `community`: event ids, upload object keys, per-user Redis keys.
async fn stored_as(
    store: &Store,
    cache: &Cache,
    community: Uuid,
    author: &str,
) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    let events = events_of(store, community, author)
        .await
        .into_iter()
        .collect();
    let uploads: Vec<String> = sqlx::query_scalar(
        "SELECT object_key FROM buzz.media_uploads WHERE community_id = $1 AND uploader_pubkey = $2",
    )
    .bind(community)
    .bind(author)
    .fetch_all(store.pool())
    .await
    .expect("read uploads");
    let marker = format!(":user:{author}:");
    let keys = cache
        .snapshot_namespace(community)
        .await
        .expect("snapshot namespace")
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| key.contains(&marker))
        .collect();
    (events, uploads.into_iter().collect(), keys)
}

/// What the report says `author` had admitted: event ids, object keys, Redis keys.
fn admitted_as(
    authored: &[AuthoredWrite],
    author: &str,
) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    let (mut rows, mut objects, mut keys) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for write in authored.iter().filter(|w| w.author == author) {
        match &write.outcome {
            AuthoredOutcome::Admitted {
                write: AdmittedWrite::Row(row),
            } => {
                assert_eq!(row.table, RowTable::Events, "a write as a user is an event");
                rows.insert(row.key.clone());
            }
            AuthoredOutcome::Admitted {
                write: AdmittedWrite::Object(version),
            } => {
                objects.insert(version.key.clone());
            }
            AuthoredOutcome::Admitted {
                write: AdmittedWrite::Key(key),
            } => {
                keys.insert(key.clone());
            }
            _ => {}
        }
    }
    (rows, objects, keys)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_author_fenced_mid_run_is_refused_from_the_fence_on_and_the_others_kept() {
    let (owner, worker, serving) = every_role().await;
    let (objects, cache) = (object_store().await, cache().await);
    let community = community(&owner).await;
    // Three authors, so each one's writes (seq % 3) cover every kind of the rotation (seq % 4).
    let (fenced, kept, request) = (user(), vec![user(), user()], Uuid::new_v4());
    let mut plan = SimulationPlan::new(
        vec![community.host.clone()],
        20,
        Some(Duration::from_secs(5)),
    );
    plan.record_limit = 10_000;
    plan.authors = vec![fenced.clone(), kept[0].clone(), kept[1].clone()];
    plan.lease = ServingLeaseConfig {
        ttl: Duration::from_secs(5),
        renew_every: Duration::from_secs(1),
        owner: "simulator-ufence".to_owned(),
    };
    let run = tokio::spawn({
        let (serving, objects, cache) = (serving.clone(), objects.clone(), cache.clone());
        async move { simulate(&serving, &objects, &cache, &plan, std::future::pending()).await }
    });

    tokio::time::sleep(Duration::from_millis(1_500)).await;
    worker
        .quiesce_user(request, &fenced)
        .await
        .expect("quiesce");
    let mut attempts = 0;
    loop {
        match worker.fence_user(request, &fenced).await {
            Ok(_) => break,
            Err(error) if error.severity() == Severity::Transient && attempts < 50 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("fence: {error}"),
        }
    }
    let fenced_at = chrono::Utc::now();

    let report = run.await.expect("join").expect("simulate");
    let served = report
        .community(&community.host)
        .expect("the host's report");
    assert_eq!(served.totals.failed, 0, "{:?}", served.failure_samples);
    assert!(!served.authored_truncated);
    assert_eq!(served.authored.len() as u64, served.totals.attempted);

    // The fenced author: admitted before, every write started after the fence refused.
    let counts = served.by_author[&fenced];
    assert!(counts.admitted > 0 && counts.refused > 0, "{counts:?}");
    let after: Vec<&AuthoredWrite> = served
        .authored
        .iter()
        .filter(|w| w.author == fenced && w.started_at > fenced_at)
        .collect();
    assert!(after.len() >= 4, "writes after the fence: {}", after.len());
    for write in &after {
        assert_eq!(write.outcome, AuthoredOutcome::Refused, "{write:?}");
    }
    let kinds: BTreeSet<String> = after.iter().map(|w| format!("{:?}", w.kind)).collect();
    assert_eq!(
        kinds.len(),
        4,
        "every kind was refused after the fence: {kinds:?}"
    );

    // The other authors: every write admitted.
    for author in &kept {
        let counts = served.by_author[author];
        assert!(counts.attempted > 0);
        assert_eq!(counts.admitted, counts.attempted, "{author}: {counts:?}");
    }

    // What each author has stored is exactly what the report admitted: nothing refused landed,
    // nothing admitted is missing.
    let missing = missing_admitted_writes(&serving, &objects, &cache, served)
        .await
        .expect("check");
    assert!(missing.is_empty(), "{missing:?}");
    for author in plan_authors(&fenced, &kept) {
        assert_eq!(
            stored_as(&owner, &cache, community.id, &author).await,
            admitted_as(&served.authored, &author),
            "{author}"
        );
    }

    // Tidy the shared bucket and Redis.
    let versions: Vec<ObjectVersionRef> = served
        .admitted
        .as_ref()
        .map(|a| a.objects.clone())
        .unwrap_or_default();
    for chunk in versions.chunks(500) {
        objects
            .delete_versions(chunk)
            .await
            .expect("delete versions");
    }
    cache
        .purge_namespace(community.id, |_| {})
        .await
        .expect("purge keys");
}

fn plan_authors(fenced: &str, kept: &[String]) -> Vec<String> {
    std::iter::once(fenced.to_owned())
        .chain(kept.iter().cloned())
        .collect()
}
