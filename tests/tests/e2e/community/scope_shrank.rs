//! Scope can never shrink after approval (issue 28, must-show 3), through the CLI and a worker
//! process: while the community's objects are being deleted (past the approval, the object
//! versions of the manifest chunk already gone, its stamp held), (a) a tenant table is moved
//! into another schema, or (b) the target's partition of a partitioned tenant table is detached.
//! The next destructive step — the purge's first transaction — blocks naming the relation and
//! what became of it; no receipt exists for the request; nothing of the neighbour changed. The
//! operator puts the relation back and unblocks: the deletion completes, and its receipt states
//! the relation among the inventoried ones and verifies offline.
//!
//! The stories commit tenant tables (and a trigger holding the chunk stamp), so each runs on a
//! database of its own; objects and Redis keys stay on the shared stack.

use std::time::Duration;

use activities::store::Store;
use serde_json::Value;
use uuid::Uuid;

use testkit::certificates::verified_receipt;
use testkit::poll;
use testkit::prelude::*;
use testkit::private_db::{PrivateStory, exec, exec_for};
use testkit::records::{request_rows, stage_of};

/// The advisory lock every manifest chunk stamp waits for while the test holds it.
const HOLD_STAMPS: i64 = 28_003;

/// A trigger making the stamp of every manifest chunk with entries take [`HOLD_STAMPS`], and a
/// connection holding it: the worker deletes a chunk's object versions, then waits to stamp it
/// until released.
async fn hold_chunk_stamps(store: &Store) -> sqlx::pool::PoolConnection<sqlx::Postgres> {
    exec(
        store,
        &format!(
            "CREATE FUNCTION public.hold_chunk_stamp() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN IF NEW.entry_count > 0 THEN PERFORM pg_advisory_xact_lock({HOLD_STAMPS}); \
             END IF; RETURN NEW; END $$"
        ),
    )
    .await;
    exec(
        store,
        "CREATE TRIGGER hold_chunk_stamp BEFORE UPDATE OF deleted_at ON deletion.manifest_chunks \
         FOR EACH ROW EXECUTE FUNCTION public.hold_chunk_stamp()",
    )
    .await;
    let mut held = store
        .pool()
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(HOLD_STAMPS)
        .execute(&mut *held)
        .await
        .unwrap_or_else(|e| panic!("hold the stamps: {e}"));
    held
}

/// Waits (up to 120 s) until the worker waits to stamp a chunk of `request`, then returns its
/// stage: its object versions are being deleted.
async fn wait_for_held_stamp(stack: &Stack, request: Uuid) -> String {
    poll::until(
        Duration::from_secs(120),
        Duration::from_millis(100),
        async || {
            let waiting: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory' \
             AND NOT granted AND ((classid::int8 << 32) | objid::int8) = $1 \
             AND database = (SELECT oid FROM pg_catalog.pg_database \
                             WHERE datname = current_database()))",
            )
            .bind(HOLD_STAMPS)
            .fetch_one(stack.store.pool())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
            match waiting {
                true => Ok(stage_of(stack, request).await),
                false => Err("the worker never reached a chunk stamp".to_owned()),
            }
        },
    )
    .await
}

/// One story: the tenant relation set up by `setup`, shrunk by `shrink` while objects are being
/// deleted, restored by `restore`; the block must name everything in `named`, and the final
/// receipt must state `relation`.
struct Story {
    tag: &'static str,
    setup: &'static [&'static str],
    shrink: &'static [&'static str],
    named: &'static [&'static str],
    restore: &'static [&'static str],
    relation: &'static str,
}

impl Story {
    async fn run(&self) {
        let _shared = outage_lock().read().await;
        let story = PrivateStory::start(self.tag, &[]).await;
        let (stack, cli) = (&story.stack, &story.cli);

        let target = Tenant::seed(stack, self.tag, small_plan()).await;
        let neighbour = small_community(stack, "kept").await;
        exec_for(&stack.store, self.setup, target.id, neighbour).await;
        let neighbour_before = Kept::now(stack, neighbour).await;
        let versions_before = object_versions(stack, target.id).await.len();
        let mut held = hold_chunk_stamps(&stack.store).await;

        let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
        let request: Uuid = id.parse().unwrap_or_default();
        cli.approve(&id, "bob", &digest).await.expect_code(0);
        let stage = wait_for_held_stamp(stack, request).await;
        assert_eq!(stage, "drained", "held while the objects are being deleted");
        let versions_now = object_versions(stack, target.id).await.len();
        assert!(
            versions_now < versions_before,
            "a chunk's object versions are gone ({versions_now} of {versions_before} left): \
             past the point of no return"
        );
        exec_for(&stack.store, self.shrink, target.id, neighbour).await;
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(HOLD_STAMPS)
            .execute(&mut *held)
            .await
            .unwrap_or_else(|e| panic!("release the stamps: {e}"));
        drop(held);

        let status = cli.wait_status(&id, 120, |s| !s["blocked"].is_null()).await;
        let reason = status["blocked"]["reason"].as_str().unwrap_or_default();
        for named in self.named {
            assert!(
                reason.contains(named),
                "the block must name {named}: {status}"
            );
        }
        assert_eq!(
            stage_of(stack, request).await,
            "bindings_removed",
            "blocked before any row was purged"
        );
        let out = std::env::temp_dir().join(format!("scope-shrank-{request}.json"));
        let refused = cli
            .run(&[
                "community",
                "certificate",
                &id,
                "--out",
                &out.display().to_string(),
            ])
            .await;
        assert_ne!(
            refused.code, 0,
            "no certificate while blocked: {}",
            refused.stdout
        );
        assert!(
            refused.stderr.contains("no receipt"),
            "the refusal says why: {}",
            refused.stderr
        );
        let receipts = request_rows(stack, "deletion.receipts", request).await;
        assert_eq!(receipts, 0, "no receipt is issued for a shrunk scope");

        // The operator puts the relation back: the neighbour is byte-identical, and the
        // unblocked deletion completes.
        exec_for(&stack.store, self.restore, target.id, neighbour).await;
        let blocked = "the neighbour while blocked";
        neighbour_before.assert_unchanged(stack, blocked).await;
        cli.unblock_and_finish(&id, "carol", "put the relation back")
            .await;
        target.assert_gone(stack, "the target").await;
        neighbour_before
            .assert_unchanged(stack, "the neighbour")
            .await;
        let receipt = verified_receipt(cli, "community", &id).await;
        let stated = |list: &Value, field: Option<&str>| {
            list.as_array().is_some_and(|items| {
                items.iter().any(|item| {
                    field.map_or(item, |field| &item[field]).as_str() == Some(self.relation)
                })
            })
        };
        assert!(
            stated(&receipt["inventory"]["relations"], Some("relation")),
            "the receipt states {} as inventoried: {}",
            self.relation,
            receipt["inventory"]
        );
        assert!(
            stated(&receipt["verification"]["relations"], None),
            "and as verified: {}",
            receipt["verification"]
        );
        let _ = std::fs::remove_file(&out);
        story.end().await;
    }
}

/// A fenced tenant table of the test's own, with three rows of each community.
const NOTES: &[&str] = &[
    "CREATE TABLE buzz.notes (community_id uuid NOT NULL, seq int NOT NULL, body text NOT NULL)",
    "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.notes \
     FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()",
    "ALTER TABLE buzz.notes ENABLE ALWAYS TRIGGER buzz_write_fence",
    "INSERT INTO buzz.notes SELECT c, g, 'note ' || g \
     FROM unnest(ARRAY['{target}', '{neighbour}']::uuid[]) c, generate_series(1, 3) g",
    "CREATE SCHEMA attic",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_table_moved_into_another_schema_while_objects_are_deleted_blocks_the_purge() {
    Story {
        tag: "moved",
        setup: NOTES,
        shrink: &["ALTER TABLE buzz.notes SET SCHEMA attic"],
        named: &["scope shrank", "buzz.notes", "is now named attic.notes"],
        restore: &["ALTER TABLE attic.notes SET SCHEMA buzz"],
        relation: "buzz.notes",
    }
    .run()
    .await;
}

/// A fenced tenant table partitioned by community: the target's partition and the rest.
const PARTED: &[&str] = &[
    "CREATE TABLE buzz.parted (community_id uuid NOT NULL, seq int NOT NULL, body text NOT NULL) \
     PARTITION BY LIST (community_id)",
    "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.parted \
     FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()",
    "ALTER TABLE buzz.parted ENABLE ALWAYS TRIGGER buzz_write_fence",
    "CREATE TABLE buzz.parted_target PARTITION OF buzz.parted FOR VALUES IN ('{target}')",
    "CREATE TABLE buzz.parted_rest PARTITION OF buzz.parted DEFAULT",
    "INSERT INTO buzz.parted SELECT c, g, 'row ' || g \
     FROM unnest(ARRAY['{target}', '{neighbour}']::uuid[]) c, generate_series(1, 3) g",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_detached_while_objects_are_deleted_blocks_the_purge() {
    Story {
        tag: "detached",
        setup: PARTED,
        shrink: &["ALTER TABLE buzz.parted DETACH PARTITION buzz.parted_target"],
        named: &[
            "scope shrank",
            "buzz.parted_target",
            "no longer belongs to buzz.parted",
        ],
        restore: &[
            "ALTER TABLE buzz.parted ATTACH PARTITION buzz.parted_target \
             FOR VALUES IN ('{target}')",
        ],
        relation: "buzz.parted_target",
    }
    .run()
    .await;
}
