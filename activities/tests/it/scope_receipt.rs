//! Scope can never shrink after approval (issue 28, build item 3), at store level on the real
//! PostgreSQL: a tenant table moved into another schema blocks the purge's first transaction
//! naming it; a partition detached after the purge blocks the scope verification naming it; and
//! the store refuses to issue a receipt whose purge or verification facts cover fewer relations
//! than the frozen inventory — a completion without recorded scope verification, and a purge
//! count removed from the evidence — until the evidence covers every inventoried relation. The
//! receipt then states every inventoried relation and verifies.
//!
//! Each test commits tenant tables, so each runs in a database of its own.

use crate::store_support;
use crate::store_support::exec;
use activities::store::CatalogError;

use activities::store::certificates::CertificateStoreError;
use activities::store::{Community, Stage, Store, StoreError};
use store_support::community;
use store_support::private_db::private_db;
use store_support::request_flow::submit;
use uuid::Uuid;

/// A fenced tenant table `buzz.notes` and a fenced partitioned tenant table `buzz.parted` (the
/// target's partition `buzz.parted_target`, every other community in `buzz.parted_rest`), with
/// rows of both communities.
async fn tenant_tables(store: &Store, target: &Community, neighbour: &Community) {
    let fenced = |table: &str| {
        [
            format!(
                "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON {table} \
                 FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()"
            ),
            format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER buzz_write_fence"),
        ]
    };
    exec(
        store,
        "CREATE TABLE buzz.notes (community_id uuid NOT NULL, seq int NOT NULL, body text NOT NULL)",
    )
    .await;
    exec(
        store,
        "CREATE TABLE buzz.parted (community_id uuid NOT NULL, seq int NOT NULL, body text NOT NULL) \
         PARTITION BY LIST (community_id)",
    )
    .await;
    for sql in fenced("buzz.notes").iter().chain(&fenced("buzz.parted")) {
        exec(store, sql).await;
    }
    exec(
        store,
        &format!(
            "CREATE TABLE buzz.parted_target PARTITION OF buzz.parted FOR VALUES IN ('{}')",
            target.id
        ),
    )
    .await;
    exec(
        store,
        "CREATE TABLE buzz.parted_rest PARTITION OF buzz.parted DEFAULT",
    )
    .await;
    for community in [target, neighbour] {
        for table in ["buzz.notes", "buzz.parted"] {
            exec(
                store,
                &format!(
                    "INSERT INTO {table} (community_id, seq, body) \
                     SELECT '{}', g, 'row ' || g FROM generate_series(1, 3) g",
                    community.id
                ),
            )
            .await;
        }
    }
}

/// Two communities with demo rows, and the test's tenant tables.
async fn two_communities(store: &Store) -> (Community, Community) {
    let target = community(store).await;
    let neighbour = community(store).await;
    for id in [target.id, neighbour.id] {
        demo::seed_rows(store, id, 2).await.expect("seed");
    }
    tenant_tables(store, &target, &neighbour).await;
    (target, neighbour)
}

fn problems_of(error: &StoreError) -> String {
    match error {
        StoreError::Catalog(CatalogError::ScopeShrank { problems }) => problems.join("; "),
        other => panic!("expected the scope to have shrunk, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relation_that_left_blocks_the_purge_and_the_verification_naming_it() {
    let db = private_db("scope_guard").await;
    let store = &db.store;
    let (target, neighbour) = two_communities(store).await;
    let neighbour_before = store.snapshot_rows(neighbour.id).await.expect("snapshot");
    let mut request = submit(store, &target).await;
    let inventory = request.take_inventory().await.expect("inventory");
    request.approve(&inventory).await;
    request.preflight().await.expect("preflight");
    request.fence_and_drain().await;

    // Moved into another schema after the irreversible point: the purge's first transaction
    // names it, and nothing is deleted.
    exec(store, "CREATE SCHEMA attic").await;
    exec(store, "ALTER TABLE buzz.notes SET SCHEMA attic").await;
    let refused = request.purge(2).await.expect_err("the scope shrank");
    let named = problems_of(&refused);
    assert!(
        named.contains("buzz.notes") && named.contains("is now named attic.notes"),
        "{named}"
    );
    assert!(
        refused.to_string().contains("move it back") || refused.to_string().contains("rename"),
        "the block names the remedy: {refused}"
    );
    let left = store.count_community_rows(target.id).await.expect("count");
    assert!(
        left.iter().all(|c| c.rows > 0),
        "nothing was purged: {left:?}"
    );

    // Moved back, the purge completes; a partition detached afterwards blocks verification.
    exec(store, "ALTER TABLE attic.notes SET SCHEMA buzz").await;
    request.purge(2).await.expect("purge");
    let token = request.record_cache_purged().await;
    exec(
        store,
        "ALTER TABLE buzz.parted DETACH PARTITION buzz.parted_target",
    )
    .await;
    let refused = store
        .verify_scope(&token)
        .await
        .expect_err("the scope shrank");
    let named = problems_of(&refused);
    assert!(
        named.contains("buzz.parted_target") && named.contains("no longer belongs to buzz.parted"),
        "{named}"
    );
    let id = target.id;
    let attach = format!(
        "ALTER TABLE buzz.parted ATTACH PARTITION buzz.parted_target FOR VALUES IN ('{id}')"
    );
    exec(store, &attach).await;
    let counts = store.verify_scope(&token).await.expect("verify scope");
    assert!(
        counts.iter().any(|c| c.table == "buzz.parted_target")
            && counts.iter().any(|c| c.table == "buzz.communities")
            && counts.iter().all(|c| c.rows == 0),
        "{counts:?}"
    );
    assert_eq!(
        store.snapshot_rows(neighbour.id).await.expect("snapshot"),
        neighbour_before,
        "the neighbour's rows are byte-identical"
    );
    db.drop_database().await;
}

/// The request's `scope_verified` checkpoints.
async fn scope_verified_checkpoints(store: &Store, request_id: Uuid) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM deletion.checkpoints \
         WHERE request_id = $1 AND stage = 'scope_verified'",
    )
    .bind(request_id)
    .fetch_one(store.pool())
    .await
    .expect("checkpoint lookup")
}

/// One row of the target left behind after the purge (planted by the owner past the fence, as a
/// writer the fence missed would leave it): the Postgres verification finds it and names its
/// table and count, records no scope verification, and passes only once the row is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_of_the_target_left_after_the_purge_fails_the_verification_naming_its_table() {
    let db = private_db("scope_left").await;
    let store = &db.store;
    let (target, _neighbour) = two_communities(store).await;
    let mut request = submit(store, &target).await;
    let inventory = request.take_inventory().await.expect("inventory");
    request.approve(&inventory).await;
    request.preflight().await.expect("preflight");
    request.fence_and_drain().await;
    request.purge(2).await.expect("purge");
    let token = request.record_cache_purged().await;

    for sql in [
        "ALTER TABLE buzz.notes DISABLE TRIGGER buzz_write_fence".to_owned(),
        format!(
            "INSERT INTO buzz.notes (community_id, seq, body) VALUES ('{}', 99, 'straggler')",
            target.id
        ),
        "ALTER TABLE buzz.notes ENABLE ALWAYS TRIGGER buzz_write_fence".to_owned(),
    ] {
        exec(store, &sql).await;
    }
    let left = |counts: &[workflows::community::contracts::TableCount]| -> Vec<(String, u64)> {
        counts
            .iter()
            .filter(|c| c.rows > 0)
            .map(|c| (c.table.clone(), c.rows))
            .collect()
    };
    let counted = store.count_community_rows(target.id).await.expect("count");
    assert_eq!(left(&counted), vec![("buzz.notes".to_owned(), 1)]);
    let verified = store.verify_scope(&token).await.expect("verify scope");
    assert_eq!(left(&verified), vec![("buzz.notes".to_owned(), 1)]);
    assert_eq!(
        scope_verified_checkpoints(store, request.request_id).await,
        0,
        "a scope with a row left is not recorded as verified"
    );

    let straggler = format!(
        "DELETE FROM buzz.notes WHERE community_id = '{}'",
        target.id
    );
    exec(store, &straggler).await;
    let verified = store.verify_scope(&token).await.expect("verify scope");
    assert!(left(&verified).is_empty(), "{verified:?}");
    assert!(
        verified.iter().any(|c| c.table == "buzz.notes"),
        "{verified:?}"
    );
    assert_eq!(
        scope_verified_checkpoints(store, request.request_id).await,
        1
    );
    db.drop_database().await;
}

/// The request's receipt row, if one was issued.
async fn receipt_issued(store: &Store, request_id: Uuid) -> bool {
    sqlx::query_scalar::<_, bool>(
        "SELECT EXISTS (SELECT 1 FROM deletion.receipts WHERE request_id = $1)",
    )
    .bind(request_id)
    .fetch_one(store.pool())
    .await
    .expect("receipt lookup")
}

fn not_covered(result: Result<(), StoreError>) -> Vec<String> {
    match result {
        Err(StoreError::Certificate(CertificateStoreError::ScopeNotCovered {
            problems, ..
        })) => problems,
        other => panic!("the receipt must not be issued: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_receipt_is_issued_with_fewer_relations_covered_than_the_inventory() {
    let db = private_db("scope_receipt").await;
    let store = db
        .store
        .clone()
        .with_receipt_key(testkit::env::receipt_key());
    let (target, _neighbour) = two_communities(&store).await;
    let mut request = submit(&store, &target).await;
    let inventory = request.take_inventory().await.expect("inventory");
    let inventoried: Vec<String> = inventory
        .catalog
        .closed_world
        .as_ref()
        .map(|w| w.relations.iter().map(|r| r.relation.clone()).collect())
        .unwrap_or_default();
    for name in [
        "buzz.notes",
        "buzz.parted",
        "buzz.parted_target",
        "buzz.communities",
    ] {
        assert!(inventoried.iter().any(|r| r == name), "{inventoried:?}");
    }
    request.approve(&inventory).await;
    request.preflight().await.expect("preflight");
    request.fence_and_drain().await;
    request.purge(2).await.expect("purge");
    request.claim(&[Stage::PostgresPurged]).await;
    let token = request.token.clone();
    request.advance_to_verified().await;

    // Verified without the scope verification (as by a worker that did not record it): the
    // verification facts name no relation, and no receipt is issued.
    let problems = not_covered(
        store
            .complete_with_receipt(&token, serde_json::json!({}))
            .await,
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("/verification/relations:")),
        "{problems:?}"
    );
    assert!(!receipt_issued(&store, request.request_id).await);
    assert_eq!(request.stage().await, Stage::LogicallyVerified);

    // The scope verified, but the partitioned table's purge count removed from the evidence
    // the receipt states it from (the append-only `postgres_purged` checkpoint, rewritten by the
    // owner with its guard lifted): the table and both its partitions are uncovered, each named.
    let counts = store.verify_scope(&token).await.expect("verify scope");
    assert_eq!(counts.len(), inventoried.len());
    let original: serde_json::Value = sqlx::query_scalar(
        "SELECT detail FROM deletion.checkpoints \
         WHERE request_id = $1 AND stage = 'postgres_purged'",
    )
    .bind(request.request_id)
    .fetch_one(store.pool())
    .await
    .expect("the postgres_purged checkpoint");
    let purged = original["tables"]
        .as_array()
        .and_then(|all| all.iter().find(|t| t["table"] == "buzz.parted"))
        .and_then(|t| t["rows"].as_i64())
        .unwrap_or_default();
    let mut without = original.clone();
    if let Some(tables) = without["tables"].as_array_mut() {
        tables.retain(|t| t["table"] != "buzz.parted");
    }
    rewrite_purged_checkpoint(&store, request.request_id, &without).await;
    assert_eq!(purged, 3);
    let problems = not_covered(
        store
            .complete_with_receipt(&token, serde_json::json!({}))
            .await,
    );
    for name in [
        "buzz.parted (",
        "buzz.parted_rest (",
        "buzz.parted_target (",
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.contains(name)
                    && p.contains("/purge/tables has no count for buzz.parted")),
            "{name}: {problems:?}"
        );
    }
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(!receipt_issued(&store, request.request_id).await);
    assert_eq!(request.stage().await, Stage::LogicallyVerified);

    // The evidence restored, the receipt is issued and states every inventoried relation.
    rewrite_purged_checkpoint(&store, request.request_id, &original).await;
    let receipt = request.complete_with_receipt(&store).await;
    let stated: Vec<&str> = receipt
        .inventory
        .relations
        .iter()
        .map(|r| r.relation.as_str())
        .collect();
    assert_eq!(
        stated, inventoried,
        "the receipt states the inventoried relations"
    );
    assert_eq!(
        receipt.verification["relations"],
        serde_json::json!(inventoried),
        "the verification facts name every one of them"
    );
    assert_eq!(certificate::receipt::check_counts(&receipt), vec![]);
    request.assert_certificate_audits_clean(&store).await;
    db.drop_database().await;
}

/// Sets request `request_id`'s `postgres_purged` checkpoint detail to `detail`, as the owner with
/// the checkpoints' append-only guard lifted for the one statement.
async fn rewrite_purged_checkpoint(store: &Store, request_id: Uuid, detail: &serde_json::Value) {
    let mut tx = store.pool().begin().await.expect("begin");
    for sql in [
        "ALTER TABLE deletion.checkpoints DISABLE TRIGGER checkpoints_append_only",
        "UPDATE deletion.checkpoints SET detail = $2 \
         WHERE request_id = $1 AND stage = 'postgres_purged'",
        "ALTER TABLE deletion.checkpoints ENABLE TRIGGER checkpoints_append_only",
    ] {
        let query = sqlx::query(sql);
        let query = if sql.contains("$1") {
            query.bind(request_id).bind(detail)
        } else {
            query
        };
        query
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    tx.commit().await.expect("commit");
}
